//! Completion queues for RDMA: created with CREATE_CQ, shared by any number of queue pairs,
//! polled into [`WorkCompletion`]s after every CQE field was checked against what was posted.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::track::QpTrack;
use super::wc::{DatagramInfo, NetworkHeader, WcOpcode, WcStatus, WorkCompletion};
use crate::backend::Backend;
use crate::control::{create_cq_input, destroy_input, output_too_short, Device};
use crate::cq::{CqRing, Cqe};
use crate::error::DriverError;
use cxdirect_dma::{DmaRegion, PageKind};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cq::CreateCqOut;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome, CQE_INITIAL_OP_OWN, CQE_SIZE};
use cxdirect_hw::qp::USER_INDEX_NONE;

#[cfg(test)]
mod tests;

/// A CQE the driver refused: what was wrong and the value the device wrote.
type Refusal = (&'static str, u64);

/// A completion queue (`ibv_cq`) for RC queue pairs. Poll it from one thread at a time (it
/// is `Send`); the queue pairs completing on it may post from other threads.
pub struct CompletionQueue {
    ring: CqRing,
    cqn: u32,
    entries: u32,
    /// Queue pairs completing here (few; searched from the last one found).
    qps: Vec<Arc<QpTrack>>,
    last: usize,
    /// Completions collected while a queue pair was reset or destroyed, returned first.
    deferred: VecDeque<WorkCompletion>,
    /// A refused CQE met after completions were already gathered: reported by the next poll.
    refused: Option<Refusal>,
    bad_cqes: u64,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqn", &self.cqn)
            .field("entries", &self.entries)
            .field("qps", &self.qps.len())
            .finish()
    }
}

impl CompletionQueue {
    /// CREATE_CQ of at least `entries` CQEs (rounded up to a power of two, 2 to 2^22).
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for a size outside the device's range; [`DriverError::Command`]
    /// when the device refuses.
    pub fn create<B: Backend>(dev: &mut Device<B>, entries: u32) -> Result<Self, DriverError> {
        let max_log = dev.caps().log_max_cq_sz().min(22);
        let entries = entries.max(2).next_power_of_two();
        if entries > 1 << max_log {
            return Err(DriverError::config(
                "entries",
                entries,
                format!("a CQ holds at most 2^{max_log} entries"),
            ));
        }
        let log = entries.trailing_zeros() as u8;
        let (iommu, iovas) = dev.dma();
        let region = DmaRegion::new(
            iommu.clone(),
            &iovas,
            CQE_SIZE * entries as usize,
            PageKind::Auto,
        )?;
        for i in 0..entries as usize {
            region.write(i * CQE_SIZE + CQE_SIZE - 1, &[CQE_INITIAL_OP_OWN])?;
        }
        let dbr = DmaRegion::new(iommu, &iovas, 64, PageKind::Small)?;
        let (uar, _, _) = dev.resources();
        let cmd = create_cq_input(&region, dbr.iova(), log, uar, 0, None)?;
        let out = dev.exec(&cmd, CreateCqOut::<&[u8]>::SIZE)?;
        let cqn = CreateCqOut::new(&out[..]).map_err(output_too_short)?.cqn();
        Ok(Self {
            ring: CqRing::new(region, dbr, log, cqn, false)?,
            cqn,
            entries,
            qps: Vec::new(),
            last: 0,
            deferred: VecDeque::new(),
            refused: None,
            bad_cqes: 0,
        })
    }

    /// A CQ over `ring`, as [`CompletionQueue::create`] makes it.
    #[cfg(test)]
    fn over(ring: CqRing) -> Self {
        Self {
            cqn: ring.cqn(),
            entries: 1 << ring.log_size(),
            ring,
            qps: Vec::new(),
            last: 0,
            deferred: VecDeque::new(),
            refused: None,
            bad_cqes: 0,
        }
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// CQEs the ring holds.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// CQEs refused so far (each reported once as an error by [`CompletionQueue::poll`]).
    pub fn bad_cqes(&self) -> u64 {
        self.bad_cqes
    }

    /// Queue pairs completing on this CQ.
    pub fn queue_pairs(&self) -> usize {
        self.qps.len()
    }

    pub(super) fn attach(&mut self, qp: Arc<QpTrack>) {
        self.qps.push(qp);
    }

    pub(super) fn detach(&mut self, qpn: u32) {
        self.qps.retain(|qp| qp.qpn != qpn);
        self.last = 0;
    }

    /// Queues `wc` for the next [`CompletionQueue::poll`] (a completion the driver makes: a
    /// receive flushed from a queue pair the device never took it from).
    pub(super) fn defer(&mut self, wc: WorkCompletion) {
        self.deferred.push_back(wc);
    }

    pub(super) fn has(&self, qpn: u32) -> bool {
        self.qps.iter().any(|qp| qp.qpn == qpn)
    }

    /// Takes up to `out.len()` completions, oldest first; returns how many.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadDeviceValue`] for a CQE the driver refused (an unknown opcode or QP,
    /// a WQE counter that names nothing outstanding, a byte count past the posted buffers):
    /// it is consumed and counted in [`CompletionQueue::bad_cqes`]; when completions were
    /// gathered before it, they are returned first and the error by the next call.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, DriverError> {
        if let Some((what, value)) = self.refused.take() {
            return Err(DriverError::BadDeviceValue { what, value });
        }
        let mut n = 0;
        while n < out.len() {
            let Some(wc) = self.deferred.pop_front() else {
                break;
            };
            out[n] = wc;
            n += 1;
        }
        let mut consumed = false;
        while n < out.len() {
            let Some(cqe) = self.ring.peek() else {
                break;
            };
            let decoded = self.decode(&cqe);
            self.ring.consume();
            consumed = true;
            match decoded {
                Ok(Some(wc)) => {
                    out[n] = wc;
                    n += 1;
                }
                // A CQE the driver asked for on an unsignalled request: ring reclaimed.
                Ok(None) => {}
                Err(refusal) => {
                    self.bad_cqes += 1;
                    if n == 0 {
                        self.ring.update_dbr();
                        let (what, value) = refusal;
                        return Err(DriverError::BadDeviceValue { what, value });
                    }
                    self.refused = Some(refusal);
                    break;
                }
            }
        }
        if consumed {
            self.ring.update_dbr();
        }
        Ok(n)
    }

    /// Where the queue pair `qpn` names is in the list, if it completes here.
    #[inline]
    fn find(&mut self, qpn: u32) -> Option<usize> {
        if self.qps.get(self.last).is_some_and(|qp| qp.qpn == qpn) {
            return Some(self.last);
        }
        let at = self.qps.iter().position(|qp| qp.qpn == qpn)?;
        self.last = at;
        Some(at)
    }

    /// The completion `cqe` reports (none for a CQE the driver asked for on an unsignalled
    /// request), after checking it against what was posted.
    #[inline]
    fn decode(&mut self, cqe: &Cqe) -> Result<Option<WorkCompletion>, Refusal> {
        let qpn = cqe.qpn();
        let at = self
            .find(qpn)
            .ok_or(("CQE QP number (no QP of this CQ)", u64::from(qpn)))?;
        let qp = &self.qps[at];
        // Every QP is created with this user index; a CQE naming another is not the QP's.
        if cqe.user_index() != USER_INDEX_NONE {
            return Err(("CQE user index", u64::from(cqe.user_index())));
        }
        let opcode = cqe.opcode();
        let mut wc = WorkCompletion {
            qpn,
            ..WorkCompletion::default()
        };
        match CqeOpcode::try_from(opcode) {
            Ok(CqeOpcode::Req) => {
                if !send_done(qp, cqe, &mut wc, false)? {
                    return Ok(None);
                }
            }
            Ok(CqeOpcode::ReqErr) => {
                qp.failed.store(true, Ordering::Relaxed);
                send_done(qp, cqe, &mut wc, true)?;
            }
            Ok(CqeOpcode::RespSend | CqeOpcode::RespSendImm | CqeOpcode::RespWrImm) => {
                recv_done(qp, cqe, &mut wc, opcode)?;
            }
            Ok(CqeOpcode::RespErr) => {
                // A datagram QP keeps receiving after a receive fails (a datagram too long
                // for its buffer); only a flush says it is in error.
                if !qp.datagram || cqe.syndrome() == CqeSyndrome::WrFlushed as u8 {
                    qp.failed.store(true, Ordering::Relaxed);
                }
                recv_done(qp, cqe, &mut wc, opcode)?;
            }
            _ => return Err(("CQE opcode", u64::from(opcode))),
        }
        Ok(Some(wc))
    }

    /// Polls until queue pair `qpn` has nothing outstanding (its flush completions taken) or
    /// `timeout` passes, keeping every completion met for the next [`CompletionQueue::poll`].
    /// Returns true when it drained.
    pub(super) fn drain_qp(&mut self, qp: &QpTrack, timeout: Duration) -> bool {
        // The completions kept from before are set aside while polling, so that each poll
        // reads the ring rather than handing them back again (with more of them than a batch
        // it would never reach the ring).
        let earlier = std::mem::take(&mut self.deferred);
        let mut met = VecDeque::new();
        let drained = self.drain_into(qp, timeout, &mut met);
        self.deferred = earlier;
        self.deferred.extend(met);
        drained
    }

    fn drain_into(
        &mut self,
        qp: &QpTrack,
        timeout: Duration,
        met: &mut VecDeque<WorkCompletion>,
    ) -> bool {
        let start = Instant::now();
        let mut batch = [WorkCompletion::default(); 16];
        loop {
            let srq_free = qp.srq.is_some() || qp.rq.outstanding() == 0;
            if qp.sq.outstanding() == 0 && srq_free {
                return true;
            }
            match self.poll(&mut batch) {
                Ok(0) => {
                    if start.elapsed() > timeout {
                        return false;
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                Ok(n) => met.extend(&batch[..n]),
                // Counted; the rest of the ring is still taken.
                Err(_) => {}
            }
        }
    }

    /// DESTROY_CQ, once no queue pair completes here.
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongState`] while queue pairs use it; [`DriverError::Command`] when
    /// the device refuses (the CQ's memory is then leaked, not freed under the device).
    pub fn destroy<B: Backend>(mut self, dev: &mut Device<B>) -> Result<(), DriverError> {
        if !self.qps.is_empty() {
            return Err(DriverError::WrongState {
                what: "the completion queue",
                state: format!("used by {} queue pairs", self.qps.len()),
                needed: "unused: destroy its queue pairs first",
            });
        }
        let result = dev.exec(&destroy_input(Opcode::DestroyCq, self.cqn, 8), 16);
        if result.is_err() {
            for region in self.ring.take_memory() {
                region.leak();
            }
        }
        result.map(|_| ())
    }
}

/// A send completion for the WQE at the CQE's counter: earlier unsignalled WQEs retire with
/// it silently (a signalled one skipped, or a counter that is not a WQE's first block of
/// those outstanding, is refused and nothing retires). False when it makes no work
/// completion: the WQE was unsignalled, its CQE asked for by the driver.
#[inline]
fn send_done(
    qp: &QpTrack,
    cqe: &Cqe,
    wc: &mut WorkCompletion,
    error: bool,
) -> Result<bool, Refusal> {
    let sq = &qp.sq;
    let ci = sq.ci();
    let outstanding = sq.outstanding();
    let counter = cqe.wqe_counter();
    let distance = u32::from(counter.wrapping_sub(ci as u16));
    if distance >= outstanding {
        return Err(("send CQE WQE counter (not outstanding)", u64::from(counter)));
    }
    let target = ci.wrapping_add(distance);
    let mut at = ci;
    let done = loop {
        let w = sq.sent(at);
        if w.bbs == 0 {
            return Err(("send CQE WQE counter (ring damaged)", u64::from(counter)));
        }
        if at == target {
            break w;
        }
        if w.signaled && !error {
            return Err((
                "send CQE WQE counter (skips a signalled WQE)",
                u64::from(counter),
            ));
        }
        at = at.wrapping_add(u32::from(w.bbs));
        if at.wrapping_sub(ci) > distance {
            return Err(("send CQE WQE counter (inside a WQE)", u64::from(counter)));
        }
    };
    if !error && !done.signaled {
        sq.retire(at.wrapping_add(u32::from(done.bbs)));
        return Ok(false);
    }
    wc.wr_id = done.wr_id;
    wc.opcode = done.op;
    if error {
        let syndrome = cqe.syndrome();
        wc.status = WcStatus::from_syndrome(syndrome);
        wc.vendor_err = syndrome;
    } else {
        wc.byte_len = match done.op {
            WcOpcode::RdmaRead => {
                let bytes = cqe.byte_cnt();
                if bytes > done.len {
                    return Err(("READ CQE byte count", u64::from(bytes)));
                }
                bytes
            }
            WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
            _ => 0,
        };
    }
    sq.retire(at.wrapping_add(u32::from(done.bbs)));
    Ok(true)
}

/// Bits 29:28 of `flags_rqpn`: the GRH (or IP header) is in the receive buffer
/// (`MLX5_GRH_IN_BUFFER`; mlx5_ib `handle_responder` reports any nonzero value as `IB_WC_GRH`).
const GRH_IN_BUFFER: u32 = 1;
/// Bytes of the GRH area at the start of every datagram receive buffer (`sizeof(struct ib_grh)`).
const GRH_AREA: u32 = 40;

/// What the CQE of a datagram receive reports of its sender (mlx5_ib `handle_responder`:
/// `src_qp`, the GRH flag and `network_hdr_type` from `flags_rqpn`, the P_Key from
/// `imm_inval_pkey`), each field checked.
#[inline]
fn datagram_info(cqe: &Cqe, opcode: u8, bytes: u32) -> Result<DatagramInfo, Refusal> {
    let flags = cqe.flags_rqpn();
    let network = match (flags >> 28) & 3 {
        0 => None,
        GRH_IN_BUFFER => Some(match (flags >> 24) & 3 {
            0 => NetworkHeader::Grh,
            1 => NetworkHeader::Ipv6,
            2 => NetworkHeader::Ipv4,
            _ => return Err(("datagram CQE RoCE L3 header type", u64::from(flags))),
        }),
        // A GRH in the CQE itself (or a reserved value): nowhere this driver reads it from.
        _ => return Err(("datagram CQE GRH location", u64::from(flags))),
    };
    if bytes < GRH_AREA {
        return Err((
            "datagram CQE byte count (below the GRH area)",
            u64::from(bytes),
        ));
    }
    // QP 0 is the subnet management QP, which RoCE has none of.
    if flags & 0x00ff_ffff == 0 {
        return Err(("datagram CQE source QP", u64::from(flags)));
    }
    Ok(DatagramInfo {
        src_qp: flags & 0x00ff_ffff,
        network,
        pkey: (opcode == CqeOpcode::RespSend as u8).then(|| cqe.imm() as u16),
    })
}

/// A receive completion: the QP's next receive, or the SRQ WQE the counter names. Nothing
/// is retired unless every field passed.
#[inline]
fn recv_done(qp: &QpTrack, cqe: &Cqe, wc: &mut WorkCompletion, opcode: u8) -> Result<(), Refusal> {
    let error = opcode == CqeOpcode::RespErr as u8;
    let counter = cqe.wqe_counter();
    let (wr_id, len) = match &qp.srq {
        Some(srq) => {
            // The CQE names the QP (its user index, checked by the caller), not the SRQ: the
            // receive came from the SRQ the QP was created on.
            srq.posted(counter)
                .ok_or(("receive CQE SRQ WQE counter", u64::from(counter)))?
        }
        None => {
            let rq = &qp.rq;
            if rq.outstanding() == 0 || counter != rq.ci() as u16 {
                return Err(("receive CQE WQE counter", u64::from(counter)));
            }
            rq.received(rq.ci())
        }
    };
    wc.wr_id = wr_id;
    wc.opcode = WcOpcode::Recv;
    if error {
        let syndrome = cqe.syndrome();
        wc.status = WcStatus::from_syndrome(syndrome);
        wc.vendor_err = syndrome;
    } else {
        let bytes = cqe.byte_cnt();
        if opcode == CqeOpcode::RespWrImm as u8 {
            wc.opcode = WcOpcode::RecvRdmaWithImm;
        } else if bytes > len {
            return Err(("receive CQE byte count", u64::from(bytes)));
        }
        wc.byte_len = bytes;
        if opcode != CqeOpcode::RespSend as u8 {
            wc.imm = Some(cqe.imm());
        }
        if qp.datagram {
            wc.datagram = Some(datagram_info(cqe, opcode, bytes)?);
        }
    }
    match &qp.srq {
        Some(srq) => {
            wc.srqn = Some(srq.srqn);
            // Checked above; a concurrent take (another CQ of the same SRQ naming the same
            // WQE) makes this one the duplicate.
            srq.take(counter)
                .ok_or(("receive CQE SRQ WQE counter", u64::from(counter)))?;
        }
        None => qp.rq.retire(qp.rq.ci().wrapping_add(1)),
    }
    Ok(())
}
