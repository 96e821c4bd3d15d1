//! Event queues, driver side: reading EQEs by owner bit, checking what the device wrote, and
//! reporting the consumer index back (re-arming the interrupt).

use crate::backend::barrier::dma_rmb;
use crate::backend::registers::Registers;
use crate::backend::Backend;
use cxdirect_dma::DmaRegion;
use cxdirect_hw::doorbell::{EqDoorbell, EqUpdateCi, EqUpdateCiArm, EQ_CI_UPDATE_INTERVAL};
use cxdirect_hw::eqe::{port_change, EventType, EQE_DATA_OFFSET, EQE_SIZE};

/// Largest page request the driver accepts in one event (4 GiB of pages).
const MAX_PAGE_REQUEST: i32 = 1 << 20;

/// An event the async EQ delivered, after checking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Commands finished (bitmask of slots).
    Cmd {
        /// Finished slots.
        slots: u32,
    },
    /// The firmware wants pages (positive) or offers pages back (negative).
    PageRequest {
        /// Pages.
        pages: i32,
    },
    /// The port's operational state changed.
    PortChange {
        /// Up after the change.
        up: bool,
    },
    /// A CQ failed (overrun or access error).
    CqError {
        /// The CQ.
        cqn: u32,
        /// The reason code.
        syndrome: u8,
    },
    /// A shared receive ring fell below its armed low watermark (SRQ_RQ_LIMIT). The limit is
    /// one-shot: it reads 0 until armed again with [`crate::Port::set_shared_limit`].
    SharedRingLow {
        /// The ring (its RMP number, as [`crate::SharedRxRing::id`] reports it).
        ring: u32,
        /// Receive buffers the device still had posted on the ring when the driver handled the
        /// event (QUERY_RMP; 0..ring size).
        posted: u32,
    },
    /// An RDMA shared receive queue fell below the limit armed with
    /// [`crate::rdma::SharedReceiveQueue::arm_limit`] (SRQ_RQ_LIMIT,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`); the limit is one-shot.
    SrqLimit {
        /// The SRQ's number ([`crate::rdma::SharedReceiveQueue::srqn`]).
        srq: u32,
    },
    /// A queue hit a catastrophic error (for an RDMA queue pair, `number` is its QPN:
    /// `IBV_EVENT_QP_FATAL`, `_QP_REQ_ERR`, `_QP_ACCESS_ERR`).
    QueueError {
        /// The event type.
        kind: EventType,
        /// The queue number.
        number: u32,
    },
    /// A completion event (completion EQs only).
    Completion {
        /// The CQ.
        cqn: u32,
    },
    /// An event of a known type the driver does not act on.
    Other(EventType),
    /// An event type the driver does not know, or a field it refused (counted, skipped).
    Invalid {
        /// The raw event type byte.
        raw_type: u8,
    },
}

/// An event queue owned by the driver.
pub(crate) struct EventQueue {
    pub region: DmaRegion,
    pub log_size: u8,
    pub eqn: u32,
    pub uar: u32,
    pub ci: u32,
    since_update: u32,
}

impl EventQueue {
    /// A queue over `region` (already filled with owner bits set), created as `eqn`.
    pub fn new(region: DmaRegion, log_size: u8, eqn: u32, uar: u32) -> Self {
        Self {
            region,
            log_size,
            eqn,
            uar,
            ci: 0,
            since_update: 0,
        }
    }

    fn doorbell<B: Backend>(&mut self, backend: &B, arm: bool) {
        let db = EqDoorbell::new()
            .with_eqn(self.eqn as u8)
            .with_ci(self.ci & 0x00ff_ffff);
        let uar = Registers::uar(backend, self.uar);
        if arm {
            uar.write(EqUpdateCiArm::new().with_word(db));
        } else {
            uar.write(EqUpdateCi::new().with_word(db));
        }
        self.since_update = 0;
    }

    /// Arms the queue's interrupt with the current consumer index.
    pub fn arm<B: Backend>(&mut self, backend: &B) {
        self.doorbell(backend, true);
    }

    /// Takes every EQE software owns, appending the checked events to `out`; reports the
    /// consumer index and re-arms when anything was taken. Returns the number taken.
    pub fn poll<B: Backend>(&mut self, backend: &B, out: &mut Vec<Event>) -> usize {
        self.poll_each(backend, |ev| out.push(ev))
    }

    /// As [`EventQueue::poll`], handing each checked event to `handle` (no allocation).
    pub fn poll_each<B: Backend>(&mut self, backend: &B, mut handle: impl FnMut(Event)) -> usize {
        let mask = (1u32 << self.log_size) - 1;
        let mut taken = 0;
        let mut eqe = [0u8; EQE_SIZE];
        loop {
            let offset = (self.ci & mask) as usize * EQE_SIZE;
            if self.region.read(offset, &mut eqe).is_err() {
                break;
            }
            let owner = u32::from(eqe[EQE_SIZE - 1] & 1);
            if owner != (self.ci >> self.log_size) & 1 {
                break;
            }
            // The rest of the entry is read only after the owner bit says the device wrote it.
            dma_rmb();
            if self.region.read(offset, &mut eqe).is_err() {
                break;
            }
            handle(decode(&eqe));
            self.ci = self.ci.wrapping_add(1);
            self.since_update += 1;
            taken += 1;
            if self.since_update >= EQ_CI_UPDATE_INTERVAL {
                self.doorbell(backend, false);
            }
        }
        if taken > 0 {
            self.doorbell(backend, true);
        }
        taken
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Decodes and checks one EQE.
fn decode(eqe: &[u8; EQE_SIZE]) -> Event {
    let data = &eqe[EQE_DATA_OFFSET..EQE_DATA_OFFSET + 28];
    let Ok(kind) = EventType::try_from(eqe[1]) else {
        return Event::Invalid { raw_type: eqe[1] };
    };
    match kind {
        EventType::Cmd => Event::Cmd {
            slots: be32(&data[0..4]),
        },
        EventType::PageRequest => {
            let func_id = u16::from_be_bytes([data[2], data[3]]);
            let pages = be32(&data[4..8]) as i32;
            if func_id != 0 || !(-MAX_PAGE_REQUEST..=MAX_PAGE_REQUEST).contains(&pages) {
                return Event::Invalid { raw_type: eqe[1] };
            }
            Event::PageRequest { pages }
        }
        EventType::PortChange => match eqe[3] {
            port_change::ACTIVE => Event::PortChange { up: true },
            port_change::DOWN => Event::PortChange { up: false },
            _ => Event::Other(kind),
        },
        EventType::CqError => Event::CqError {
            cqn: be32(&data[0..4]) & 0x00ff_ffff,
            syndrome: data[11],
        },
        EventType::SrqRqLimit => Event::SharedRingLow {
            ring: be32(&data[24..28]) & 0x00ff_ffff,
            posted: 0,
        },
        EventType::WqCatastrophicError
        | EventType::WqInvalidRequestError
        | EventType::WqAccessError
        | EventType::SrqCatastrophicError => Event::QueueError {
            kind,
            number: be32(&data[24..28]) & 0x00ff_ffff,
        },
        EventType::Completion => Event::Completion {
            cqn: be32(&data[24..28]) & 0x00ff_ffff,
        },
        _ => Event::Other(kind),
    }
}
