//! The send engine: on a doorbell, read the SQ's doorbell record, fetch each new WQE (or take
//! the BlueFlame copy), parse its control, Ethernet, data and inline segments, gather the frame
//! through memory keys, apply checksum offload and VLAN insertion, put it on the wire, and write
//! the CQEs the WQE asked for. An enhanced multi-packet WQE (on an SQ that allows them) carries
//! one packet per data or inline segment behind one Ethernet segment. An LSO WQE carries one
//! TCP packet larger than a frame, cut into MSS-sized frames (see [`super::lso`]). The SQ's
//! rates (`engine::pacing`) are asked before each WQE and before each later frame of one that
//! makes several, since the device schedules packets: a WQE they stop goes on from its next
//! frame when the SQ runs again (`objects::PartlySent`). A malformed WQE ends in an error CQE
//! and the SQ in error.

use crate::counters::{add, QueueKind};
use crate::engine::fetch::read_wqes;
use crate::engine::lso::{self, HeaderLayout, SegmentPlace};
use crate::engine::send_counter::{self, Register};
use crate::faults::{DmaQueue, Fault, UNMAPPED_IOVA};
use crate::function::local_loopback::Sender;
use crate::function::Core;
use crate::objects::limits::MAX_LSO_BYTES;
use crate::objects::queue_state::{Fetched, SendScratch, MAX_FRAME_BYTES, MAX_WQE};
use crate::objects::{PartlySent, QState};
use crate::packet;
use crate::translate::{translate, KeyFault};
use crate::transmit_steering::Verdict;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome};
use cxdirect_hw::wqe::{self, CtrlSeg, EthSeg, ETH_WQE_INSERT_VLAN, INLINE_SEG, WQE_BB, WQE_DS};

/// A BlueFlame copy of the WQE the doorbell announced.
pub(crate) struct BlueFlame<'a> {
    pub bytes: &'a [u8],
}

/// Send doorbell written to `register` of UAR `uar`: `first8` are the first eight bytes of the
/// announced WQE's control segment (opcode/index and SQ number), `bf` the whole WQE when
/// written as BlueFlame. SQ objects always have a doorbell record; a QP may not
/// ([`send_counter`](crate::engine::send_counter)).
pub(crate) fn doorbell(
    core: &mut Core,
    uar: u32,
    first8: [u8; 8],
    bf: Option<BlueFlame<'_>>,
    register: Register,
) {
    if !core.res.uars.contains(uar) {
        // Not a doorbell at all: a write to a UAR page nobody allocated.
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    add(&core.counters.doorbells, 1);
    let sqn = u32::from_be_bytes([first8[4], first8[5], first8[6], first8[7]]) >> 8;
    let bf_index = u16::from_be_bytes([first8[1], first8[2]]);
    if core
        .faults
        .take(|f| matches!(f, Fault::DropDoorbell { sqn: s } if *s == sqn).then_some(()))
        .is_some()
    {
        return;
    }
    if !core.res.sqs.contains(sqn) && (core.res.qps.contains(sqn) || core.res.ud_qps.contains(sqn))
    {
        if !send_counter::announce(core, uar, sqn, first8, register) {
            add(&core.counters.bad_doorbells, 1);
        } else if core.res.qps.contains(sqn) {
            crate::engine::rc::doorbell(core, uar, sqn);
        } else {
            crate::engine::ud::doorbell(core, uar, sqn);
        }
        return;
    }
    let Some(sq) = core
        .res
        .sqs
        .get(sqn)
        .filter(|_| register == Register::BlueFlame)
    else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if sq.wq.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    match sq.state {
        QState::Rdy => {}
        // What a doorbell announces to an SQ in error is flushed (when it asked for that).
        QState::Err if sq.flush_in_error => {
            if let Some(pi) = producer_index(core, sqn) {
                crate::engine::sq_flush::flush(core, sqn, pi, false);
            }
            return;
        }
        _ => {
            add(&core.counters.bad_doorbells, 1);
            return;
        }
    }
    let Some(pi) = producer_index(core, sqn) else {
        return;
    };
    {
        let qc = core.queue_counters.get_mut(QueueKind::Sq, sqn);
        qc.doorbells += 1;
        if bf.is_some() {
            qc.bf_writes += 1;
        }
    }
    if bf.is_some() {
        add(&core.counters.bf_writes, 1);
    }
    run(core, sqn, pi, bf.map(|b| (bf_index, b)));
}

/// SQ `sqn`'s producer index from its doorbell record; `None` (counted as a bad doorbell)
/// when the record cannot be read or claims more than the ring holds.
fn producer_index(core: &Core, sqn: u32) -> Option<u16> {
    let sq = core.res.sqs.get(sqn)?;
    let (dbr, entries, consumed) = (sq.wq.dbr, sq.wq.entries(), sq.wq.consumed);
    add(&core.counters.dbrec_reads, 1);
    let pi = core.dma_read_be32(dbr + 4).ok()? as u16;
    if u32::from(pi.wrapping_sub(consumed)) > entries {
        add(&core.counters.bad_doorbells, 1);
        return None;
    }
    Some(pi)
}

/// Executes SQ `sqn`'s WQEs up to producer index `pi`, the one at the BlueFlame index taken
/// from the doorbell's copy; stops early at a WQE that fails or when the SQ's rate must wait
/// (`engine::pacing`).
fn run(core: &mut Core, sqn: u32, pi: u16, bf: Option<(u16, BlueFlame<'_>)>) {
    let Some(consumed) = core.res.sqs.get(sqn).map(|sq| sq.wq.consumed) else {
        return;
    };
    // Swapped out for an unallocated placeholder: taking it must not allocate per doorbell.
    let mut scratch = std::mem::replace(&mut core.send_scratch, SendScratch::placeholder());
    scratch.fetched.clear();
    // Fetches stop short of the BlueFlame WQE, which arrived with the doorbell.
    let fetch_end = match &bf {
        Some((bf_index, _)) if bf_index.wrapping_sub(consumed) < pi.wrapping_sub(consumed) => {
            *bf_index
        }
        _ => pi,
    };
    let mut index = consumed;
    while index != pi {
        if !crate::engine::pacing::admit(core, sqn) {
            break;
        }
        let use_bf = bf
            .as_ref()
            .filter(|(at, b)| index == *at && b.bytes.len() >= WQE_BB)
            .map(|(_, b)| b);
        let ring = Ring { sqn, fetch_end, pi };
        match execute_one(core, ring, index, use_bf, &mut scratch) {
            Ok(bbs) => index = index.wrapping_add(bbs),
            Err(()) => {
                // The failed WQE has its error CQE; the rest are flushed (when asked).
                crate::engine::sq_flush::flush(core, sqn, pi, true);
                break;
            }
        }
    }
    core.send_scratch = scratch;
}

/// Runs the paced SQs whose wait is over at `now` (`engine::pacing`) from where they stopped,
/// to the producer index their doorbell records hold now; whether any ran.
pub(crate) fn resume_paced(core: &mut Core, now: std::time::Instant) -> bool {
    let mut ran = false;
    while let Some(sqn) = crate::engine::pacing::take_due(core, now) {
        let ready = core
            .res
            .sqs
            .get(sqn)
            .is_some_and(|sq| sq.state == QState::Rdy);
        if let (true, Some(pi)) = (ready, producer_index(core, sqn)) {
            run(core, sqn, pi, None);
            ran = true;
        }
    }
    ran
}

/// The SQ a doorbell rang for, its producer index, and where fetching ahead stops (the
/// producer index, or the BlueFlame WQE).
#[derive(Clone, Copy)]
struct Ring {
    sqn: u32,
    fetch_end: u16,
    pi: u16,
}

/// Copies WQEBB `bb` of the SQ into `out` (one WQEBB long), fetching ahead up to the BlueFlame
/// WQE or the producer index; false when it cannot be read.
fn fetch(core: &Core, ring: Ring, bb: u16, fetched: &mut Fetched, out: &mut [u8]) -> bool {
    if fetched.copy_held(bb, out) {
        return true;
    }
    let Some(sq) = core.res.sqs.get(ring.sqn) else {
        return false;
    };
    let posted = ring.pi.wrapping_sub(bb);
    let before_bf = ring.fetch_end.wrapping_sub(bb);
    let ahead = if before_bf > 0 && before_bf <= posted {
        before_bf
    } else if posted > 0 && u32::from(posted) <= sq.wq.entries() {
        posted
    } else {
        // A WQE claiming more basic blocks than were posted.
        1
    };
    match read_wqes(core, &sq.wq, fetched, bb, ahead, out) {
        Ok(bytes) => {
            add(&core.counters.wqe_fetch_reads, 1);
            add(&core.counters.wqe_fetch_bytes, bytes);
            true
        }
        Err(()) => {
            add(&core.counters.wqe_fetch_reads, 1);
            add(&core.counters.wqe_fetch_bytes, out.len() as u64);
            false
        }
    }
}

/// Fetches and executes the WQE at `index`; returns how many WQEBBs it used.
fn execute_one(
    core: &mut Core,
    ring: Ring,
    index: u16,
    bf: Option<&BlueFlame<'_>>,
    s: &mut SendScratch,
) -> Result<u16, ()> {
    let sqn = ring.sqn;
    let Some(sq) = core.res.sqs.get(sqn) else {
        return Err(());
    };
    let mask = sq.wq.entries() - 1;
    let (cqn, pd, min_inline, tisn) = (sq.cqn, sq.wq.pd, sq.min_inline, sq.tisn);
    // A WQE its SQ's rates stopped between frames goes on from where it stopped.
    let before = if sq.wq.consumed == index {
        sq.wq.partly_sent
    } else {
        PartlySent::default()
    };
    let reg_umr = sq.reg_umr;
    // The transport domain of the SQ's TIS goes with every frame it loops inside the device:
    // a TIR of the same domain takes it only as self loopback (see `rq::receive`).
    let td = core.res.tises.get(tisn).map(|tis| tis.td);
    // First basic block: from the BlueFlame copy when it matches, else fetched.
    let from_bf = bf.map(|b| b.bytes);
    match from_bf {
        Some(bytes) => s.wqe[..WQE_BB].copy_from_slice(&bytes[..WQE_BB]),
        None => {
            if !fetch(core, ring, index, &mut s.fetched, &mut s.wqe[..WQE_BB]) {
                return fail(core, sqn, index, 0, CqeSyndrome::LocalProtection, cqn);
            }
        }
    }
    let ctrl = CtrlSeg::new(&s.wqe[..16]).map_err(|_| ())?;
    let (opcode, ds, ce) = (ctrl.opcode(), usize::from(ctrl.ds()), ctrl.ce());
    let injected = core.faults.take(|f| match f {
        Fault::SendError { sqn: s, syndrome } if *s == sqn => Some(*syndrome),
        _ => None,
    });
    if let Some(syndrome) = injected {
        return fail(core, sqn, index, opcode, syndrome, cqn);
    }
    let wqe_bytes = ds * WQE_DS;
    if ds == 0 || wqe_bytes > MAX_WQE || ctrl.qpn_or_sqn() != sqn || ctrl.wqe_index() != index {
        log::info!(
            "function {}: SQ {sqn:#x} WQE {index}: bad control segment (opcode {opcode:#x}, ds {ds}, sqn {:#x}, index {})",
            core.port_name(),
            ctrl.qpn_or_sqn(),
            ctrl.wqe_index()
        );
        return fail(core, sqn, index, opcode, CqeSyndrome::LocalQpOperation, cqn);
    }
    let bbs = wqe::wqebbs(ds) as u16;
    if u32::from(bbs) > mask + 1 {
        return fail(core, sqn, index, opcode, CqeSyndrome::LocalQpOperation, cqn);
    }
    for i in 1..bbs {
        let range = usize::from(i) * WQE_BB..usize::from(i + 1) * WQE_BB;
        match from_bf {
            Some(bytes) if bytes.len() >= range.end => {
                s.wqe[range.clone()].copy_from_slice(&bytes[range])
            }
            _ => {
                let bb = index.wrapping_add(i);
                if !fetch(core, ring, bb, &mut s.fetched, &mut s.wqe[range]) {
                    return fail(core, sqn, index, opcode, CqeSyndrome::LocalProtection, cqn);
                }
            }
        }
    }
    let mut sent = Sent {
        before,
        ..Sent::default()
    };
    let context = SendContext {
        sqn,
        pd,
        min_inline,
        td,
    };
    let result = match opcode {
        wqe::opcode::NOP => Ok(()),
        wqe::opcode::SEND => match build_frame(
            core,
            context,
            &s.wqe[..wqe_bytes],
            &mut s.frame,
            &mut s.tagged,
        ) {
            Ok((len, tagged)) => {
                let frame: &[u8] = if tagged { &s.tagged[..len] } else { &s.frame };
                transmit_from(core, frame, context);
                sent.count(len);
                Ok(())
            }
            Err(syndrome) => Err(syndrome),
        },
        // The capability allows them on every SQ: the SQ's allow_multi_pkt_send_wqe is for
        // the legacy multi-packet WQE, and Linux's mlx5e never sets it.
        wqe::opcode::ENHANCED_MPSW if core.cfg.multi_packet_send => send_multi(
            core,
            context,
            &s.wqe[..wqe_bytes],
            &mut s.frame,
            &mut s.tagged,
            &mut sent,
        ),
        wqe::opcode::LSO if core.cfg.lso => send_lso(
            core,
            context,
            &s.wqe[..wqe_bytes],
            LsoBuffers {
                headers: &mut s.lso_headers,
                payload: &mut s.lso_payload,
                frame: &mut s.frame,
            },
            &mut sent,
        ),
        // Only on an SQ created with `reg_umr`; elsewhere a local QP operation error.
        wqe::opcode::UMR if reg_umr => {
            crate::engine::sq_umr::execute(core, sqn, pd, &s.wqe[..wqe_bytes])
        }
        _ => Err(CqeSyndrome::LocalQpOperation),
    };
    {
        let qc = core.queue_counters.get_mut(QueueKind::Sq, sqn);
        qc.frames += sent.frames;
        qc.bytes += sent.bytes as u64;
        if result.is_ok() && !sent.paused {
            qc.wqes += 1;
        }
    }
    if result.is_ok() && sent.paused {
        if let Some(sq) = core.res.sqs.get_mut(sqn) {
            sq.wq.partly_sent = PartlySent {
                frames: before.frames + sent.frames,
                bytes: before.bytes + sent.bytes,
            };
        }
        return Err(());
    }
    if let Err(syndrome) = result {
        log::info!(
            "function {}: SQ {sqn:#x} WQE {index} (opcode {opcode:#x}, ds {ds}) failed: {syndrome:?}; first bytes {:02x?}",
            core.port_name(),
            &s.wqe[..wqe_bytes.min(64)]
        );
        return fail(core, sqn, index, opcode, syndrome, cqn);
    }
    if let Some(sq) = core.res.sqs.get_mut(sqn) {
        sq.wq.consumed = index.wrapping_add(bbs);
        sq.wq.partly_sent = PartlySent::default();
    }
    if ce >= wqe::completion::ALWAYS {
        let mut cqe = [0u8; 64];
        let bytes = before.bytes + sent.bytes;
        cqe[0x2c..0x30].copy_from_slice(&(bytes as u32).to_be_bytes());
        cqe[0x38..0x3c].copy_from_slice(&(sqn & 0x00ff_ffff).to_be_bytes());
        cqe[0x3c..0x3e].copy_from_slice(&index.to_be_bytes());
        cqe[0x3f] = (CqeOpcode::Req as u8) << 4 | u8::from(ctrl_se(&s.wqe)) << 1;
        stamp_user_index(core, sqn, &mut cqe);
        if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
            // The completion has nowhere to go (CQ in error): the SQ stops with it.
            add(&core.counters.completions_lost, 1);
            if let Some(sq) = core.res.sqs.get_mut(sqn) {
                sq.state = QState::Err;
            }
            return Err(());
        }
        core.queue_counters.get_mut(QueueKind::Sq, sqn).cqes += 1;
    }
    Ok(bbs)
}

fn ctrl_se(wqe: &[u8]) -> bool {
    wqe[11] & 2 != 0
}

/// What one WQE put on the wire in this turn: frames and their bytes; for a WQE that makes
/// several frames, what it sent in earlier turns and whether its SQ's rates stopped it again.
#[derive(Default)]
struct Sent {
    frames: u64,
    bytes: usize,
    /// Frames (and their bytes) the WQE sent in earlier turns: not sent again.
    before: PartlySent,
    /// Whether the SQ names a rate table entry or a queue group (only then are its rates
    /// asked between frames), looked up at the WQE's second frame.
    paced: Option<bool>,
    /// Set when the SQ's rates stopped the WQE before its next frame.
    paused: bool,
}

/// What happens to a frame of a multi-frame WQE in this turn ([`Sent::turn`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Sent in an earlier turn.
    Skip,
    Go,
    /// The SQ's rates stop the WQE here: this frame and the rest wait for the next turn.
    Stop,
}

impl Sent {
    fn count(&mut self, len: usize) {
        self.frames += 1;
        self.bytes += len;
    }

    /// What frame `index` (from the WQE's first) of SQ `sqn` does now. The device schedules
    /// packets, not WQEs: the first frame of a turn goes (the SQ was admitted before the
    /// WQE), each later one only when the SQ's rate and its queue group's admit it
    /// (`engine::pacing::admit`, which lists the SQ in `Core::paced` when they do not), so
    /// that an LSO WQE of 64 KiB neither runs its rate limits into a long debt nor holds
    /// its siblings behind it.
    fn turn(&mut self, core: &mut Core, sqn: u32, index: u64) -> Turn {
        if index < self.before.frames {
            return Turn::Skip;
        }
        if index == self.before.frames {
            return Turn::Go;
        }
        let paced = *self
            .paced
            .get_or_insert_with(|| crate::engine::pacing::sq_is_paced(core, sqn));
        if paced && !crate::engine::pacing::admit(core, sqn) {
            self.paused = true;
            return Turn::Stop;
        }
        Turn::Go
    }
}

/// The SQ a WQE runs on: its number, protection domain, minimum inline mode and its TIS's
/// transport domain.
#[derive(Clone, Copy)]
struct SendContext {
    sqn: u32,
    pd: u32,
    min_inline: u8,
    /// The transport domain of the SQ's TIS (none if the TIS is gone).
    td: Option<u32>,
}

/// What an Ethernet segment asks of every frame of its WQE.
#[derive(Clone, Copy)]
struct Offloads {
    l3_csum: bool,
    l4_csum: bool,
    vlan: Option<u16>,
}

impl Offloads {
    fn of<T: AsRef<[u8]>>(eth: &EthSeg<T>) -> Self {
        Self {
            l3_csum: eth.l3_csum(),
            l4_csum: eth.l4_csum(),
            vlan: eth.vlan_insert(),
        }
    }
}

/// Builds the frame a SEND WQE describes into `frame` (or `tagged` when a VLAN is inserted);
/// returns the length on the wire and whether the frame is in `tagged`.
fn build_frame(
    core: &mut Core,
    sq: SendContext,
    w: &[u8],
    frame: &mut Vec<u8>,
    tagged: &mut [u8],
) -> Result<(usize, bool), CqeSyndrome> {
    frame.clear();
    if w.len() < 2 * WQE_DS {
        return Err(CqeSyndrome::LocalQpOperation);
    }
    let eth = EthSeg::new(&w[WQE_DS..2 * WQE_DS]).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let offloads = Offloads::of(&eth);
    let inline_len = if offloads.vlan.is_some() {
        0
    } else {
        usize::from(eth.inline_hdr_sz())
    };
    let mut at = 2 * WQE_DS;
    if inline_len > 0 {
        let first = inline_len.min(2);
        frame.extend_from_slice(&w[WQE_DS + 14..WQE_DS + 14 + first]);
        let rest = inline_len - first;
        if at + rest > w.len() {
            return Err(CqeSyndrome::LocalLength);
        }
        frame.extend_from_slice(&w[at..at + rest]);
        at += rest.div_ceil(WQE_DS) * WQE_DS;
    }
    while at + 4 <= w.len() {
        if let Some(next) = take_inline(w, at, frame)? {
            at = next;
        } else {
            if at + WQE_DS > w.len() {
                return Err(CqeSyndrome::LocalQpOperation);
            }
            gather(
                core,
                sq.sqn,
                sq.pd,
                &w[at..at + WQE_DS],
                frame,
                MAX_FRAME_BYTES,
            )?;
            at += WQE_DS;
        }
    }
    check_length(core, frame)?;
    if sq.min_inline > 0 && !inline_covers(frame, inline_len, sq.min_inline) {
        return Err(CqeSyndrome::LocalQpOperation);
    }
    apply_offloads(offloads, frame, tagged)
}

/// Sends every packet of an enhanced multi-packet WQE `w` (control segment included). The
/// Ethernet segment inlines nothing and its offloads apply to each packet; after it, each data
/// segment is one packet gathered by memory key and each inline segment one packet carried in
/// the WQE. Packets before a bad one are on the wire when it fails, as on a device, and are
/// counted in `sent`.
fn send_multi(
    core: &mut Core,
    sq: SendContext,
    w: &[u8],
    frame: &mut Vec<u8>,
    tagged: &mut [u8],
    sent: &mut Sent,
) -> Result<(), CqeSyndrome> {
    if w.len() < 3 * WQE_DS {
        // Not a single packet after the Ethernet segment.
        return Err(CqeSyndrome::LocalQpOperation);
    }
    let eth = EthSeg::new(&w[WQE_DS..2 * WQE_DS]).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let offloads = Offloads::of(&eth);
    if offloads.vlan.is_none() && eth.inline_hdr_sz() != 0 {
        return Err(CqeSyndrome::LocalQpOperation);
    }
    // `w` is whole 16-byte segments, so a segment's first word is always there.
    let mut at = 2 * WQE_DS;
    let mut index = 0;
    while at < w.len() {
        frame.clear();
        if let Some(next) = take_inline(w, at, frame)? {
            at = next;
        } else {
            if sq.min_inline > 0 {
                // The SQ must see each packet's headers inline; a pointer carries none.
                return Err(CqeSyndrome::LocalQpOperation);
            }
            gather(
                core,
                sq.sqn,
                sq.pd,
                &w[at..at + WQE_DS],
                frame,
                MAX_FRAME_BYTES,
            )?;
            at += WQE_DS;
        }
        check_length(core, frame)?;
        let (len, is_tagged) = apply_offloads(offloads, frame, tagged)?;
        index += 1;
        match sent.turn(core, sq.sqn, index - 1) {
            Turn::Skip => continue,
            Turn::Stop => return Ok(()),
            Turn::Go => {}
        }
        transmit_from(core, if is_tagged { &tagged[..len] } else { frame }, sq);
        sent.count(len);
    }
    Ok(())
}

/// The scratch buffers an LSO WQE is built in.
struct LsoBuffers<'a> {
    headers: &'a mut Vec<u8>,
    payload: &'a mut Vec<u8>,
    frame: &'a mut Vec<u8>,
}

/// Sends an LSO WQE `w` (control segment included): the Ethernet segment gives the MSS and
/// inlines the packet's headers (Ethernet to TCP, exactly); the data and inline segments after
/// them carry the TCP payload, sent as frames of at most MSS payload bytes, each behind the
/// headers rewritten for it (see [`lso`]) and with the checksums the Ethernet segment asks for.
///
/// Everything is checked and the whole payload gathered before the first frame goes out, so a
/// refused WQE sends nothing: an MSS of 0, headers that are not TCP over IPv4 or IPv6, or a VLAN
/// insertion request instead of inlined headers are local QP operation errors; an inline header
/// size that runs past the WQE or does not end where the TCP header ends, a message over
/// [`MAX_LSO_BYTES`] or a frame over the port's MTU are local length errors.
fn send_lso(
    core: &mut Core,
    sq: SendContext,
    w: &[u8],
    bufs: LsoBuffers<'_>,
    sent: &mut Sent,
) -> Result<(), CqeSyndrome> {
    let LsoBuffers {
        headers,
        payload,
        frame,
    } = bufs;
    if w.len() < 2 * WQE_DS {
        return Err(CqeSyndrome::LocalQpOperation);
    }
    let eth = EthSeg::new(&w[WQE_DS..2 * WQE_DS]).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let offloads = Offloads::of(&eth);
    let mss = usize::from(eth.mss());
    if mss == 0 || offloads.vlan.is_some() {
        return Err(CqeSyndrome::LocalQpOperation);
    }
    let header_len = usize::from(eth.inline_hdr_sz());
    headers.clear();
    let first = header_len.min(2);
    headers.extend_from_slice(&w[WQE_DS + 14..WQE_DS + 14 + first]);
    let rest = header_len - first;
    let mut at = 2 * WQE_DS;
    if at + rest > w.len() {
        return Err(CqeSyndrome::LocalLength);
    }
    headers.extend_from_slice(&w[at..at + rest]);
    at += rest.div_ceil(WQE_DS) * WQE_DS;
    let layout = HeaderLayout::parse(headers).map_err(|e| match e {
        lso::HeaderError::NotTcp => CqeSyndrome::LocalQpOperation,
        lso::HeaderError::Length => CqeSyndrome::LocalLength,
    })?;
    let payload_limit = MAX_LSO_BYTES - header_len;
    payload.clear();
    while at + 4 <= w.len() {
        if let Some(next) = take_inline(w, at, payload)? {
            at = next;
        } else {
            if at + WQE_DS > w.len() {
                return Err(CqeSyndrome::LocalQpOperation);
            }
            gather(
                core,
                sq.sqn,
                sq.pd,
                &w[at..at + WQE_DS],
                payload,
                payload_limit,
            )?;
            at += WQE_DS;
        }
        if payload.len() > payload_limit {
            return Err(CqeSyndrome::LocalLength);
        }
    }
    if header_len + mss.min(payload.len()) > core.port.max_frame() {
        return Err(CqeSyndrome::LocalLength);
    }
    // A message with no payload still goes out, as one frame of headers.
    let segments = payload.len().div_ceil(mss).max(1);
    for index in 0..segments {
        match sent.turn(core, sq.sqn, index as u64) {
            Turn::Skip => continue,
            Turn::Stop => return Ok(()),
            Turn::Go => {}
        }
        let start = index * mss;
        let end = (start + mss).min(payload.len());
        frame.clear();
        frame.extend_from_slice(headers);
        frame.extend_from_slice(&payload[start..end]);
        let place = SegmentPlace {
            // Past 2^16 segments (an MSS under 4 bytes) the IPv4 identification wraps, as the
            // 16-bit field does.
            index: index as u16,
            payload_before: start as u32,
            last: index + 1 == segments,
        };
        lso::rewrite_segment(frame, layout, place);
        if offloads.l3_csum || offloads.l4_csum {
            // The headers were checked above, so the offload can parse every segment.
            let _ = packet::insert_checksums(frame, offloads.l3_csum, offloads.l4_csum);
        }
        transmit_from(core, frame, sq);
        sent.count(frame.len());
    }
    Ok(())
}

/// When the segment at `at` of WQE `w` (at least four bytes on) is an inline data segment,
/// appends its bytes to `frame` and returns where the next segment starts; `None` for a data
/// segment.
#[inline(always)]
fn take_inline(w: &[u8], at: usize, frame: &mut Vec<u8>) -> Result<Option<usize>, CqeSyndrome> {
    let head = u32::from_be_bytes([w[at], w[at + 1], w[at + 2], w[at + 3]]);
    if head & INLINE_SEG == 0 {
        return Ok(None);
    }
    let count = (head & !INLINE_SEG) as usize;
    if at + 4 + count > w.len() {
        return Err(CqeSyndrome::LocalLength);
    }
    frame.extend_from_slice(&w[at + 4..at + 4 + count]);
    Ok(Some(at + (4 + count).div_ceil(WQE_DS) * WQE_DS))
}

/// Appends the bytes data segment `seg` (16 bytes) points at to `frame`, through its memory key,
/// refusing (local length error) to grow `frame` past `limit` bytes.
// Inlined into its callers: out of line, the memory key walk's callback stays a call per chunk.
#[inline(always)]
fn gather(
    core: &mut Core,
    sqn: u32,
    pd: u32,
    seg: &[u8],
    frame: &mut Vec<u8>,
    limit: usize,
) -> Result<(), CqeSyndrome> {
    let seg = wqe::DataSeg::new(seg).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let (len, lkey, addr) = (seg.byte_count() as usize, seg.lkey(), seg.addr());
    let start = frame.len();
    if start + len > limit {
        return Err(CqeSyndrome::LocalLength);
    }
    frame.resize(start + len, 0);
    let unmapped = len > 0
        && core
            .faults
            .take(|f| {
                matches!(f, Fault::UnmappedDma { queue: DmaQueue::Send(s) } if *s == sqn)
                    .then_some(())
            })
            .is_some();
    let core: &Core = core;
    translate(core, lkey, pd, addr, len as u64, false, |iova, off, n| {
        let dst = &mut frame[start + off as usize..start + (off + n) as usize];
        add(&core.counters.payload_reads, 1);
        add(&core.counters.payload_read_bytes, n);
        // The faulted access really goes to the IOMMU, which refuses it.
        let iova = if unmapped { UNMAPPED_IOVA + off } else { iova };
        core.dma_read(iova, dst).map_err(|_| KeyFault::Bounds)
    })
    .map_err(|_| CqeSyndrome::LocalProtection)
}

/// Refuses a frame shorter than an Ethernet header or longer than the port carries.
#[inline]
fn check_length(core: &Core, frame: &[u8]) -> Result<(), CqeSyndrome> {
    if frame.len() < packet::ETH_HEADER_LEN || frame.len() > core.port.max_frame() {
        return Err(CqeSyndrome::LocalLength);
    }
    Ok(())
}

/// Inserts the checksums and the VLAN tag `offloads` asks for; returns the length on the wire
/// and whether the frame is in `tagged` (a tag was inserted).
#[inline]
fn apply_offloads(
    offloads: Offloads,
    frame: &mut [u8],
    tagged: &mut [u8],
) -> Result<(usize, bool), CqeSyndrome> {
    if offloads.l3_csum || offloads.l4_csum {
        // A frame the offload cannot parse goes out as the driver built it.
        let _ = packet::insert_checksums(frame, offloads.l3_csum, offloads.l4_csum);
    }
    if let Some(tci) = offloads.vlan {
        let n = packet::insert_vlan(frame, tci, tagged).map_err(|_| CqeSyndrome::LocalLength)?;
        return Ok((n, true));
    }
    Ok((frame.len(), false))
}

/// Whether `inline_len` inlined bytes cover the headers the SQ's minimum inline mode demands
/// (1 = L2, 2 = up to L3, 3 = up to L4).
fn inline_covers(frame: &[u8], inline_len: usize, mode: u8) -> bool {
    let parsed = packet::parse(frame);
    let needed = match mode {
        1 => packet::ETH_HEADER_LEN,
        2 => parsed.l3_offset + parsed.l3_len,
        _ => parsed.l4_offset + parsed.l4_len,
    };
    inline_len >= needed.max(packet::ETH_HEADER_LEN)
}

/// Sends `frame` from an RC QP (RoCE): no sender goes with a looped copy.
pub(crate) fn transmit(core: &mut Core, frame: &[u8]) {
    send(core, frame, None);
}

/// Sends `frame` from datagram QP `qpn`: a multicast copy looped inside the device names the
/// QP, for its multicast loopback block (`block_lb_mc`).
pub(crate) fn transmit_from_qp(core: &mut Core, frame: &[u8], qpn: u32) {
    send(core, frame, Some(Sender::Qp(qpn)));
}

/// Sends `frame` from the SQ of `context` through NIC transmit steering
/// (`crate::transmit_steering`), which lets it out as it is, rewritten, or not at all; a copy
/// looped inside the device carries the transport domain of the SQ's TIS, when it has one, to
/// the receive path's self-loopback check.
fn transmit_from(core: &mut Core, frame: &[u8], context: SendContext) {
    crate::engine::pacing::charge(core, context.sqn, frame.len());
    let from = context.td.map(Sender::Sq);
    match crate::transmit_steering::steer(core, context.sqn, frame) {
        Verdict::Allow(None) => send(core, frame, from),
        Verdict::Allow(Some(rewritten)) => send(core, &rewritten, from),
        Verdict::Drop => add(&core.counters.tx_steer_drops, 1),
    }
}

/// Sends `frame` by `from`: into the function's own receive path, out on the cable, or both
/// (`engine::loopback::route`).
fn send(core: &mut Core, frame: &[u8], from: Option<Sender>) {
    add(&core.counters.tx_frames, 1);
    add(&core.counters.tx_bytes, frame.len() as u64);
    crate::counters::count_cast(&core.counters, true, frame);
    let route = crate::engine::loopback::route(core, frame);
    if route.local {
        crate::engine::loopback::loop_back(core, frame, from);
    }
    if route.cable {
        if let Some((wire, port)) = &core.wire {
            let _ = wire.transmit(*port, frame);
        }
    }
}

/// Puts SQ `sqn`'s `user_index` into a CQE of its, as a `cqe_version` 1 device does: libmlx5
/// finds the raw packet QP a send completion belongs to by it (`get_req_ctx_v1`).
fn stamp_user_index(core: &Core, sqn: u32, cqe: &mut [u8; 64]) {
    if let Some(sq) = core.res.sqs.get(sqn) {
        crate::engine::cq::set_user_index(cqe, sq.user_index);
    }
}

/// Writes an error CQE for the WQE at `index`, moves the SQ to error, and stops the burst.
fn fail(
    core: &mut Core,
    sqn: u32,
    index: u16,
    opcode: u8,
    syndrome: CqeSyndrome,
    cqn: u32,
) -> Result<u16, ()> {
    add(&core.counters.error_cqes, 1);
    crate::engine::sq_flush::post_error_cqe(core, (sqn, cqn), index, opcode, syndrome);
    core.queue_counters.get_mut(QueueKind::Sq, sqn).errors += 1;
    if let Some(sq) = core.res.sqs.get_mut(sqn) {
        sq.state = QState::Err;
    }
    Err(())
}

/// The Ethernet segment's inline header size field with the VLAN-insert flag masked out.
#[allow(dead_code)]
pub(crate) fn inline_size(raw: u16) -> u16 {
    raw & !ETH_WQE_INSERT_VLAN
}
