//! RC queue pairs: CREATE_QP over a receive ring (or an SRQ) and a send ring, the connection
//! walk RST→INIT→RTR→RTS ([`connect`](RcQueuePair::connect)), reset and destroy with every
//! posted request returned through flush completions. Posting lives in `post.rs`, the state
//! transitions in `connect.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::cq::CompletionQueue;
use super::pd::ProtectionDomain;
use super::roce::Roce;
use super::srq::SharedReceiveQueue;
use super::track::{QpTrack, SlotTrack};
use super::wc::{WcOpcode, WcStatus, WorkCompletion};
use crate::backend::Backend;
use crate::control::{destroy_input, input, output_too_short, Device};
use crate::error::DriverError;
use crate::ring::{DoorbellRecord, SlotRing};
use cxdirect_dma::{DmaRegion, PageKind};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::hca::AllocUarOut;
use cxdirect_hw::qp::{pm_state, rq_type, service_type, CreateQpIn, CreateQpOut, USER_INDEX_NONE};
use cxdirect_hw::wqe::{WQE_BB, WQE_DS};

mod connect;
mod datagram;
mod limits;
mod post;
mod prepared;

pub use connect::{ConnectParams, Endpoint};
pub use prepared::{PreparedFlags, PreparedLocal, PreparedOp, PreparedSend};

/// What a queue pair carries: the service type its CREATE_QP names and what follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// Reliable connected (`st` 0x0).
    Rc,
    /// Unreliable datagram (`st` 0x2): each send WQE carries an address vector.
    Ud,
    /// The general services QP (`st` 0x8, QP1), as mlx5_ib's `mlx5_ib_create_gsi` makes it on
    /// a RoCE port without LAG: one hardware QP sends and receives every MAD.
    Gsi,
}

impl Transport {
    /// 16-byte segments a send WQE holds before its data: the control segment and then the
    /// remote address and atomic segments (RC) or the 48-byte datagram segment (UD, GSI).
    fn header_ds(self) -> u32 {
        match self {
            Self::Rc => 3,
            Self::Ud | Self::Gsi => 4,
        }
    }
}

/// Bytes of a work queue page (the QP's buffer uses 4 KiB pages).
const PAGE: usize = 4096;
/// Most gather entries a send WQE takes (with control, remote address and atomic segments,
/// 32 segments: 8 blocks).
const MAX_SEND_SGE: u32 = 29;
/// Most scatter entries a receive WQE takes (a 512-byte stride).
const MAX_RECV_SGE: u32 = 32;
/// Most inline bytes a send WQE carries (with its 4-byte header, 29 segments).
const MAX_INLINE: u32 = 29 * 16 - 4;
/// How long reset and destroy wait for a queue pair's flush completions.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Sizes of a queue pair (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send requests outstanding at once, each of the largest size the limits below allow
    /// (1 or more; the ring is rounded up to a power of two of 64-byte blocks).
    pub max_send_wr: u32,
    /// Receives posted at once on the QP's own ring (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// Gather entries per send request (0 to 29).
    pub max_send_sge: u32,
    /// Scatter entries per receive (1 to 32; ignored with an SRQ).
    pub max_recv_sge: u32,
    /// Inline bytes per send request (0 to 460).
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        }
    }
}

/// Counters of a queue pair's send side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpStats {
    /// Send requests posted.
    pub sends: u64,
    /// Send doorbells rung (one per `post_send` call that posted anything).
    pub doorbells: u64,
    /// Doorbells that carried their WQE whole (BlueFlame: a call of one one-block WQE).
    pub blueflame: u64,
    /// Receives posted on the QP's own ring.
    pub recvs: u64,
}

/// A queue pair's state as the driver drives it (`enum ibv_qp_state`, the states this
/// driver uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Created, or reset: [`RcQueuePair::connect`] next.
    Reset,
    /// Connected: sends and receives run.
    ReadyToSend,
    /// The device failed a request (an error completion was polled) or the QP was moved to
    /// error: everything posted completes flushed; [`RcQueuePair::reset`] then
    /// [`RcQueuePair::connect`] to use it again.
    Error,
}

/// A reliable-connected queue pair (`ibv_qp` of type `IBV_QPT_RC`) over RoCE v2.
///
/// Post from one thread at a time (it is `Send`); its completion queue may be polled on
/// another. Destroy it with [`RcQueuePair::destroy`]: one simply dropped stays in the device
/// (and listed on its CQ) until [`Device::teardown`], its rings leaked rather than freed under
/// the device.
pub struct RcQueuePair<B: Backend> {
    backend: Arc<B>,
    qpn: u32,
    pdn: u32,
    cqn: u32,
    uar: u32,
    track: Arc<QpTrack>,
    /// The send ring (64-byte blocks) and the receive ring (16-byte segments).
    sq: SlotRing<WQE_BB>,
    rq: Option<SlotRing<WQE_DS>>,
    dbr: DoorbellRecord,
    /// Receive WQE stride in 16-byte segments.
    rq_segs: u32,
    bf_half: bool,
    /// Send blocks posted since the last WQE that asked for a CQE.
    unsignaled_run: u32,
    /// The send ring's blocks, and half of them (a CQE is asked for at least that often).
    sq_blocks: u32,
    sq_half: u32,
    stats: QpStats,
    caps: QpCaps,
    state: QpState,
    psn: u32,
    roce: Roce,
    log_max_msg: u8,
    srqn: Option<u32>,
    transport: Transport,
    /// Ring memory the device may still reach after a failed destroy is leaked, never freed.
    destroyed: bool,
}

impl<B: Backend> std::fmt::Debug for RcQueuePair<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcQueuePair")
            .field("qpn", &self.qpn)
            .field("state", &self.state)
            .field("cqn", &self.cqn)
            .field("srqn", &self.srqn)
            .finish()
    }
}

impl<B: Backend> RcQueuePair<B> {
    /// CREATE_QP in `pd`, completing on `cq` (sends and receives), receiving from `srq` when
    /// given; RoCE must be enabled ([`Roce::enable`]). The QP starts in [`QpState::Reset`].
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for caps outside the limits above or the device's;
    /// [`DriverError::Command`] when the device refuses (nothing is left created).
    pub fn create(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        cq: &mut CompletionQueue,
        srq: Option<&SharedReceiveQueue<B>>,
        caps: QpCaps,
        roce: &Roce,
    ) -> Result<Self, DriverError> {
        Self::create_as(dev, pd, cq, srq, caps, roce, Transport::Rc)
    }

    /// CREATE_QP of `transport`'s service type, as [`RcQueuePair::create`] otherwise.
    pub(super) fn create_as(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        cq: &mut CompletionQueue,
        srq: Option<&SharedReceiveQueue<B>>,
        caps: QpCaps,
        roce: &Roce,
        transport: Transport,
    ) -> Result<Self, DriverError> {
        let max_wqe_bbs = limits::validate(dev, &caps, srq.is_some(), transport)?;
        // The QP context's `log_sq_size` and `log_rq_size` are 4-bit fields: 2^15 at most,
        // whatever a device reports.
        let log_max_qp_sz = dev.caps().log_max_qp_sz().min(15);
        let sq_bbs = (caps.max_send_wr * max_wqe_bbs)
            .next_power_of_two()
            .max((PAGE / WQE_BB) as u32);
        if sq_bbs > 1 << log_max_qp_sz {
            return Err(DriverError::config(
                "max_send_wr",
                caps.max_send_wr,
                format!(
                    "{} WQEs of {max_wqe_bbs} blocks pass the device's {} blocks per send \
                     queue: fewer requests, gather entries or inline bytes",
                    caps.max_send_wr,
                    1u32 << log_max_qp_sz
                ),
            ));
        }
        let rq_segs = caps.max_recv_sge.max(1).next_power_of_two();
        let rq_entries = if srq.is_some() {
            0
        } else {
            caps.max_recv_wr
                .max(1)
                .next_power_of_two()
                .max(PAGE as u32 / (16 * rq_segs))
        };
        if rq_entries > 1 << log_max_qp_sz {
            return Err(DriverError::config(
                "max_recv_wr",
                caps.max_recv_wr,
                format!("at most 2^{log_max_qp_sz} receives"),
            ));
        }
        let out = dev.exec(&input(Opcode::AllocUar, 0, 16), AllocUarOut::<&[u8]>::SIZE)?;
        let uar = AllocUarOut::new(&out[..]).map_err(output_too_short)?.uar();
        let created = Self::create_on(
            dev,
            pd,
            cq,
            srq,
            caps,
            roce,
            uar,
            (sq_bbs, rq_entries, rq_segs),
            transport,
        );
        if created.is_err() {
            let _ = dev.exec(&destroy_input(Opcode::DeallocUar, uar, 8), 16);
        }
        created
    }

    #[allow(clippy::too_many_arguments)]
    fn create_on(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        cq: &mut CompletionQueue,
        srq: Option<&SharedReceiveQueue<B>>,
        caps: QpCaps,
        roce: &Roce,
        uar: u32,
        (sq_bbs, rq_entries, rq_segs): (u32, u32, u32),
        transport: Transport,
    ) -> Result<Self, DriverError> {
        let (iommu, iovas) = dev.dma();
        let rq_bytes = rq_entries as usize * 16 * rq_segs as usize;
        let rq_region = (rq_bytes > 0)
            .then(|| DmaRegion::new(iommu.clone(), &iovas, rq_bytes, PageKind::Small))
            .transpose()?;
        let sq_region = DmaRegion::new(
            iommu.clone(),
            &iovas,
            sq_bbs as usize * WQE_BB,
            PageKind::Small,
        )?;
        let dbr = DmaRegion::new(iommu, &iovas, 64, PageKind::Small)?;
        let mut pas: Vec<u64> = Vec::new();
        for region in rq_region.iter().chain(std::iter::once(&sq_region)) {
            pas.extend((0..region.len() / PAGE).map(|i| region.iova() + (i * PAGE) as u64));
        }
        let mut cmd = input(
            Opcode::CreateQp,
            0,
            CreateQpIn::<&[u8]>::SIZE + 8 * pas.len(),
        );
        {
            let mut c = CreateQpIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateQp, "input"))?;
            let mut q = c.qpc_mut();
            let st = match transport {
                Transport::Rc => service_type::RC,
                Transport::Ud => service_type::UD,
                Transport::Gsi => service_type::QP1,
            };
            q.set_st(st)
                .set_pm_state(pm_state::MIGRATED)
                .set_pd(pd.pdn())
                .set_uar_page(uar)
                .set_cqn_snd(cq.cqn())
                .set_cqn_rcv(cq.cqn())
                .set_log_sq_size(sq_bbs.trailing_zeros() as u8)
                .set_ts_format(1)
                .set_log_page_size(0)
                // Completions are found by QP number, as Linux's kernel consumers do: with
                // `cqe_version` 1 the device echoes this in every CQE (checked on poll).
                .set_user_index(USER_INDEX_NONE)
                .set_dbr_addr(dbr.iova());
            match transport {
                // mlx5_ib states a datagram QP's message size at RST2INIT, not here
                // (create_qp_common leaves it; __mlx5_ib_modify_qp sets it per transition).
                Transport::Rc => {
                    q.set_log_msg_max(roce.log_max_msg());
                }
                Transport::Ud => {}
                // "Fast registration enabled" and the reserved lkey, as _create_kernel_qp
                // sets them for every kernel QP, the GSI QP of ib_mad among them.
                Transport::Gsi => {
                    q.set_fre(true).set_rlky(true);
                }
            }
            match srq {
                Some(srq) => {
                    q.set_rq_type(rq_type::SRQ).set_srqn_rmpn_xrqn(srq.srqn());
                }
                None => {
                    q.set_rq_type(rq_type::REGULAR)
                        .set_log_rq_size(rq_entries.trailing_zeros() as u8)
                        .set_log_rq_stride(rq_segs.trailing_zeros() as u8);
                }
            }
            for (i, iova) in pas.iter().enumerate() {
                c.set_pas(i, *iova)
                    .map_err(|_| DriverError::layout(Opcode::CreateQp, "pas"))?;
            }
        }
        let out = dev.exec(&cmd, CreateQpOut::<&[u8]>::SIZE)?;
        let qpn = CreateQpOut::new(&out[..]).map_err(output_too_short)?.qpn();
        let track = Arc::new(QpTrack {
            qpn,
            sq: SlotTrack::new(sq_bbs),
            rq: SlotTrack::new(rq_entries.max(1)),
            srq: srq.map(|s| Arc::clone(s.track())),
            failed: AtomicBool::new(false),
            datagram: transport != Transport::Rc,
        });
        let rq = match rq_region {
            Some(region) => Some(SlotRing::new(
                region,
                (rq_entries * rq_segs).trailing_zeros() as u8,
            )?),
            None => None,
        };
        cq.attach(Arc::clone(&track));
        Ok(Self {
            backend: dev.backend_arc().clone(),
            qpn,
            pdn: pd.pdn(),
            cqn: cq.cqn(),
            uar,
            track,
            sq: SlotRing::new(sq_region, sq_bbs.trailing_zeros() as u8)?,
            rq,
            dbr: DoorbellRecord::new(dbr)?,
            rq_segs,
            bf_half: false,
            unsignaled_run: 0,
            sq_blocks: sq_bbs,
            sq_half: sq_bbs / 2,
            stats: QpStats::default(),
            caps,
            state: QpState::Reset,
            psn: initial_psn(qpn),
            roce: *roce,
            log_max_msg: roce.log_max_msg(),
            srqn: srq.map(|s| s.srqn()),
            transport,
            destroyed: false,
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The protection domain number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// The sizes it was created with.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// Its counters.
    pub fn stats(&self) -> QpStats {
        self.stats
    }

    /// The SRQ it receives from, if any.
    pub fn srqn(&self) -> Option<u32> {
        self.srqn
    }

    /// The state: [`QpState::Error`] once an error completion of this QP was polled.
    pub fn state(&self) -> QpState {
        if self.state == QpState::ReadyToSend && self.track.failed.load(Ordering::Relaxed) {
            return QpState::Error;
        }
        self.state
    }

    /// Send requests outstanding, in 64-byte blocks, and receives outstanding.
    pub fn outstanding(&self) -> (u32, u32) {
        (self.track.sq.outstanding(), self.track.rq.outstanding())
    }

    /// Moves the QP to error (2ERR_QP): everything posted completes flushed, then
    /// [`RcQueuePair::reset`] and [`RcQueuePair::connect`] make it usable again.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses.
    pub fn to_error(&mut self, dev: &mut Device<B>) -> Result<(), DriverError> {
        self.modify_simple(dev, Opcode::Qp2errQp)?;
        if self.state != QpState::Reset {
            self.state = QpState::Error;
        }
        Ok(())
    }

    /// Moves the QP to error, takes its flush completions from `cq` (the next
    /// [`CompletionQueue::poll`] returns them, and any other completions met), then resets it
    /// (2RST_QP) with a new first PSN: [`RcQueuePair::connect`] again.
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongHandles`] for another CQ; [`DriverError::WrongState`] when flush
    /// completions did not all come (the QP stays in error; call again);
    /// [`DriverError::Command`] when the device refuses.
    pub fn reset(
        &mut self,
        dev: &mut Device<B>,
        cq: &mut CompletionQueue,
    ) -> Result<(), DriverError> {
        self.flush(dev, cq)?;
        self.modify_simple(dev, Opcode::Qp2rstQp)?;
        self.track.sq.clear();
        self.track.rq.clear();
        self.track.failed.store(false, Ordering::Relaxed);
        self.unsignaled_run = 0;
        self.dbr.set(0, 0);
        self.dbr.set(1, 0);
        self.psn = initial_psn(self.qpn ^ self.psn);
        self.state = QpState::Reset;
        Ok(())
    }

    /// 2ERR (unless in reset) and waits on `cq` for every flush completion.
    fn flush(&mut self, dev: &mut Device<B>, cq: &mut CompletionQueue) -> Result<(), DriverError> {
        if cq.cqn() != self.cqn || !cq.has(self.qpn) {
            return Err(DriverError::WrongHandles {
                needed: format!("the completion queue {:#x} of QP {:#x}", self.cqn, self.qpn),
            });
        }
        if self.state == QpState::Reset {
            // A QP in reset takes nothing from its rings (and 2ERR does not apply to it): the
            // receives posted before connect() come back flushed from here.
            let rq = &self.track.rq;
            let (ci, pi) = (rq.ci(), rq.pi());
            let mut index = ci;
            while index != pi {
                let (wr_id, _) = rq.received(index);
                cq.defer(WorkCompletion {
                    wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    vendor_err: CqeSyndrome::WrFlushed as u8,
                    qpn: self.qpn,
                    ..WorkCompletion::default()
                });
                index = index.wrapping_add(1);
            }
            rq.retire(pi);
            return Ok(());
        }
        self.to_error(dev)?;
        if !cq.drain_qp(&self.track, FLUSH_WAIT) {
            let (sends, recvs) = self.outstanding();
            return Err(DriverError::WrongState {
                what: "the queue pair",
                state: format!(
                    "in error with {sends} send blocks and {recvs} receives not yet flushed"
                ),
                needed: "flushed: call again once the device has completed them",
            });
        }
        Ok(())
    }

    /// Returns every posted request through flush completions on `cq` (as
    /// [`RcQueuePair::reset`]), then DESTROY_QP and frees its rings and UAR.
    ///
    /// # Errors
    ///
    /// As [`RcQueuePair::reset`]; the QP is then kept, to destroy again.
    pub fn destroy(
        mut self,
        dev: &mut Device<B>,
        cq: &mut CompletionQueue,
    ) -> Result<(), DriverError> {
        self.flush(dev, cq)?;
        dev.exec(&destroy_input(Opcode::DestroyQp, self.qpn, 8), 16)?;
        self.destroyed = true;
        cq.detach(self.qpn);
        dev.exec(&destroy_input(Opcode::DeallocUar, self.uar, 8), 16)?;
        Ok(())
    }

    /// A command naming only the QP (2ERR_QP, 2RST_QP).
    fn modify_simple(&mut self, dev: &mut Device<B>, op: Opcode) -> Result<(), DriverError> {
        dev.exec(&destroy_input(op, self.qpn, 8), 16).map(|_| ())
    }
}

impl<B: Backend> Drop for RcQueuePair<B> {
    fn drop(&mut self) {
        if !self.destroyed {
            // The device still owns the rings: never free memory it may reach.
            for region in [self.sq.take_region(), self.dbr.take_region()] {
                region.leak();
            }
            if let Some(rq) = self.rq.as_mut() {
                rq.take_region().leak();
            }
        }
    }
}

/// A first PSN (24 bits) that differs between queue pairs and between connections.
fn initial_psn(seed: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut x = u64::from(seed) << 32 | u64::from(nanos);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32) & 0x00ff_ffff
}
