//! Fault injection: faults a test or the fault matrix arms on purpose, each taken once by the
//! engine it belongs to. Every fault is something a real device or firmware does: a send or
//! receive completing in error, a completion with wrong values in it, a doorbell the device
//! never saw, a command that never completes or returns damaged output, an event out of the
//! blue. The model's own checks stay in place; these only add what hardware could do wrong.

use cxdirect_hw::cqe::CqeSyndrome;

/// One armed fault. Each is consumed by the first event it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The next WQE the send engine executes on SQ `sqn` completes with an error CQE carrying
    /// `syndrome`, and the SQ moves to the error state (later doorbells are ignored until the
    /// driver resets it).
    SendError {
        /// Send queue number.
        sqn: u32,
        /// Error CQE syndrome.
        syndrome: CqeSyndrome,
    },
    /// The next frame steered to RQ `rqn` consumes a receive WQE, completes it with an error
    /// CQE carrying `syndrome`, and moves the RQ to the error state.
    ReceiveError {
        /// Receive queue number.
        rqn: u32,
        /// Error CQE syndrome.
        syndrome: CqeSyndrome,
    },
    /// The next CQE written to CQ `cqn` has `patch` applied before the device's owner bit: each
    /// `(offset, value)` overwrites one byte (offset 0..64; at byte 63 the owner bit is kept so
    /// the entry is still delivered).
    CorruptCqe {
        /// Completion queue number.
        cqn: u32,
        /// Bytes to overwrite.
        patch: Vec<(u8, u8)>,
    },
    /// The next compressed session written to CQ `cqn` has bytes of one of its slots
    /// overwritten: `slot` 0 is the title CQE, 1 the first mini-CQE array, 8 the second, and so
    /// on every 8 (see `cxdirect_hw::cqe::mini_array_slot`); `(offset, value)` pairs as in
    /// [`Fault::CorruptCqe`]. A patch for a slot the session does not write is dropped.
    CorruptSession {
        /// Completion queue number.
        cqn: u32,
        /// Which slot of the session.
        slot: u32,
        /// Bytes to overwrite.
        patch: Vec<(u8, u8)>,
    },
    /// The next CQE written to CQ `cqn` carries the owner bit of the previous pass, so it
    /// reads as not yet written to a driver that trusts the owner bit alone.
    WrongOwner {
        /// Completion queue number.
        cqn: u32,
    },
    /// The next send doorbell for SQ `sqn` is lost (as a dropped posted write would be).
    DropDoorbell {
        /// Send queue number.
        sqn: u32,
    },
    /// The next command is taken but never completed (a firmware hang for that command).
    SwallowCommand,
    /// The next command runs (its side effects stand), but its output and the entry's return
    /// to the driver are written only when the next command doorbell rings, before that
    /// doorbell's slots are looked at: firmware answering after the driver gave up on it. A
    /// function reset drops the answer.
    LateCommand,
    /// Before the next command doorbell looks at its slot, the slot's entry is written over
    /// with the entry the device last handed back there (a late duplicate of the previous
    /// answer, as seen once in a while under QEMU): the doorbell finds an entry the device
    /// does not own and does nothing, and the driver finds the previous answer in place of
    /// its own.
    StaleCommandEntry,
    /// The next command with `opcode` is refused without running, with status NO_RES (as
    /// firmware out of resources refuses a create).
    RefuseCommand {
        /// Command opcode.
        opcode: u16,
    },
    /// As [`Fault::RefuseCommand`], once `after` commands with `opcode` have run normally:
    /// the third DESTROY_RQ of a sequence, say, with `after: 2`.
    RefuseCommandAfter {
        /// Command opcode.
        opcode: u16,
        /// Commands with `opcode` let through before the one refused.
        after: u32,
    },
    /// The next command's output has `patch` applied (offsets into the output, header
    /// included) after it ran; its side effects stand.
    CorruptCommandOutput {
        /// Bytes to overwrite.
        patch: Vec<(u16, u8)>,
    },
    /// The next CQE the device has for CQ `cqn` finds the CQ full, as it would if the driver
    /// had stopped taking completions: the CQ overruns (it goes to error and a CQ error event
    /// with syndrome OVERRUN is posted to the async EQ), the completion is lost, and the queue
    /// it belonged to moves to error. A CQ created with `overrun_ignore` never overruns, so the
    /// fault waits for a CQ that can.
    CqOverrun {
        /// Completion queue number.
        cqn: u32,
    },
    /// The next packet-buffer access (send gather or receive scatter) of `queue` goes to an IOVA
    /// no IOMMU mapping covers, as a stale translation or a wild data-segment address would: the
    /// IOMMU refuses it (counted in `dma_faults`), the WQE completes with a local protection
    /// error, and the queue moves to error.
    UnmappedDma {
        /// The queue whose next buffer access faults.
        queue: DmaQueue,
    },
    /// The next frame steered to RQ `rqn` takes its receive WQE, but its payload write and
    /// completion stay in flight (a slow DMA) until [`crate::Device::land_late_writes`], or
    /// until the RQ is reset or destroyed (the device finishes in-flight DMA before such a
    /// command completes). The write then lands where the WQE pointed, whatever the driver did
    /// with the buffer meanwhile: a driver that handed it out again is caught. A function
    /// reset drops it.
    LateReceive {
        /// Receive queue number.
        rqn: u32,
    },
    /// The next frame steered to an RQ drawing from shared ring `rmpn` finds the ring broken,
    /// as an SRQ catastrophic error leaves it: the device moves the RMP to error, and every RQ
    /// drawing from it, without a completion; posts an SRQ_CATAS_ERROR event naming the RMP to
    /// the async EQ; and drops the frame (counted in `rx_steer_drops`). The ring's posted
    /// buffers are never written again.
    SharedRingError {
        /// Shared receive ring (RMP) number.
        rmpn: u32,
    },
    /// The next send doorbell for RC QP `qpn` (in RTS) finds the QP broken, as a WQ
    /// catastrophic error leaves it: the QP moves to error on its own, a
    /// WQ_CATASTROPHIC_ERROR event naming it (`IBV_EVENT_QP_FATAL`) is posted to the async EQ,
    /// and every send WQE outstanding or posted, and every receive WQE posted, completes with
    /// the flush syndrome.
    RcQpFatal {
        /// The RC queue pair's number.
        qpn: u32,
    },
    /// An event of `event_type` with `data` is posted to the EQ subscribed to that type (the
    /// async EQ for everything but completions).
    RawEvent {
        /// EQE event type byte.
        event_type: u8,
        /// EQE sub-type byte.
        sub_type: u8,
        /// The 28 bytes of event data.
        data: [u8; 28],
    },
}

/// A queue named by [`Fault::UnmappedDma`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaQueue {
    /// Send queue number (its next gather read faults).
    Send(u32),
    /// Receive queue number (its next scatter write faults).
    Receive(u32),
}

/// An IOVA no mapping covers: the top of the 64-bit space, which no IOVA allocator hands out
/// (the IOMMU model still checks it like any other address).
pub(crate) const UNMAPPED_IOVA: u64 = 0xffff_f000_0000_0000;

/// Faults armed and not yet taken, and how many were taken.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    armed: Vec<Fault>,
    pub taken: u64,
}

impl Faults {
    pub fn arm(&mut self, fault: Fault) {
        self.armed.push(fault);
    }

    /// Whether any armed fault satisfies `pred` (the fault stays armed).
    #[inline]
    pub fn any(&self, pred: impl FnMut(&Fault) -> bool) -> bool {
        !self.armed.is_empty() && self.armed.iter().any(pred)
    }

    /// Takes the first armed fault `pick` accepts (returning what it extracted).
    #[inline(always)]
    pub fn take<T>(&mut self, pick: impl FnMut(&Fault) -> Option<T>) -> Option<T> {
        // Every frame and WQE asks: with nothing armed, the answer costs a load and a branch.
        if self.armed.is_empty() {
            return None;
        }
        self.take_armed(pick)
    }

    #[inline(never)]
    fn take_armed<T>(&mut self, mut pick: impl FnMut(&Fault) -> Option<T>) -> Option<T> {
        let (at, value) = self
            .armed
            .iter()
            .enumerate()
            .find_map(|(i, f)| pick(f).map(|v| (i, v)))?;
        self.armed.remove(at);
        self.taken += 1;
        Some(value)
    }

    /// True when an armed refusal ([`Fault::RefuseCommand`], [`Fault::RefuseCommandAfter`])
    /// takes this command with `opcode`; a refusal still letting commands through counts one
    /// down instead.
    pub fn refuses(&mut self, opcode: u16) -> bool {
        let Some(at) = self.armed.iter().position(|f| {
            matches!(f, Fault::RefuseCommand { opcode: o } | Fault::RefuseCommandAfter { opcode: o, .. } if *o == opcode)
        }) else {
            return false;
        };
        if let Fault::RefuseCommandAfter { after, .. } = &mut self.armed[at] {
            if *after > 0 {
                *after -= 1;
                return false;
            }
        }
        self.armed.remove(at);
        self.taken += 1;
        true
    }

    /// Faults still armed.
    pub fn pending(&self) -> usize {
        self.armed.len()
    }

    pub fn clear(&mut self) {
        self.armed.clear();
    }
}
