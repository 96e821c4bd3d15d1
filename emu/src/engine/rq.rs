//! The receive engine: steer an arriving frame (flow tables → TIR → RQ, or RQ table with
//! Toeplitz RSS), take the next posted receive WQE from the RQ or its shared RMP, scatter the
//! frame through memory keys, write the CQE (length, checksum flags, packet types, RSS hash),
//! and raise the RMP's limit event when its posted WQEs fall below the armed watermark.

use crate::counters::{add, QueueKind};
use crate::engine::fetch::read_wqes;
use crate::faults::{DmaQueue, Fault, UNMAPPED_IOVA};
use crate::function::local_loopback::Sender;
use crate::function::Core;
use crate::objects::queue_state::{LateWrite, ReceiveScratch, Steered, MAX_RX_WQE};
use crate::objects::{QState, RqMemory, TirDispatch, WorkQueue};
use crate::packet::{self, L3Kind, L4Kind, Parsed};
use crate::rss;
use crate::steering::{frame_match_words, steer, Verdict};
use crate::translate::translate;
use cxdirect_hw::cqe::{CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::wqe::{DataSeg, SrqNextSeg, INVALID_LKEY, WQE_DS};

/// Posted receive WQEs of a work queue: its doorbell record counter less what the device took.
/// `None` when the record cannot be read or claims more than the ring holds.
pub(crate) fn posted(core: &Core, wq: &WorkQueue) -> Option<u16> {
    add(&core.counters.dbrec_reads, 1);
    let counter = core.dma_read_be32(wq.dbr).ok()? as u16;
    let posted = counter.wrapping_sub(wq.consumed);
    (u32::from(posted) <= wq.entries()).then_some(posted)
}

/// Moves an RQ to the error state (the driver flushes its buffers and recovers).
pub(crate) fn enter_error(core: &mut Core, rqn: u32) {
    if let Some(rq) = core.res.rqs.get_mut(rqn) {
        rq.state = QState::Err;
    }
}

/// An RMP in error takes its RQs with it.
pub(crate) fn rmp_rqs_enter_error(core: &mut Core, rmpn: u32) {
    let rqs: Vec<u32> = core
        .res
        .rqs
        .iter()
        .filter(|(_, rq)| rq.memory == RqMemory::Rmp(rmpn))
        .map(|(n, _)| n)
        .collect();
    for rqn in rqs {
        enter_error(core, rqn);
    }
}

/// [`Fault::SharedRingError`]: the RMP breaks on its own, as on an SRQ catastrophic error.
fn shared_ring_breaks(core: &mut Core, rmpn: u32) -> bool {
    let armed = core
        .faults
        .take(|f| matches!(f, Fault::SharedRingError { rmpn: r } if *r == rmpn).then_some(()))
        .is_some();
    if !armed {
        return false;
    }
    if let Some(rmp) = core.res.rmps.get_mut(rmpn) {
        rmp.state = QState::Err;
    }
    rmp_rqs_enter_error(core, rmpn);
    let mut data = [0u8; 28];
    data[24..28].copy_from_slice(&(rmpn & 0x00ff_ffff).to_be_bytes());
    crate::engine::eq::post_subscribed_event(core, EventType::SrqCatastrophicError, 0, &data);
    true
}

/// Handles one frame arriving at the port. `from` is, for a frame this function looped inside
/// the device, its sender: for Ethernet the transport domain of the sending SQ's TIS (a TIR of
/// that same transport domain takes the frame only as self loopback, see
/// [`self_loop_allowed`]), for a RoCE datagram the sending QP (multicast loopback block). None
/// for frames from the cable (a loopback plug's included: they left the device) and for RC.
pub(crate) fn receive(core: &mut Core, frame: &[u8], from: Option<Sender>) {
    add(&core.counters.rx_frames, 1);
    add(&core.counters.rx_bytes, frame.len() as u64);
    crate::counters::count_cast(&core.counters, false, frame);
    if !core.port.oper_up {
        add(&core.counters.rx_port_down_drops, 1);
        return;
    }
    if frame.len() > core.port.max_frame() + 4 {
        add(&core.counters.rx_steer_drops, 1);
        return;
    }
    // RoCE v2 goes to the QP its BTH names, not through Ethernet steering: a UD SEND to a
    // datagram QP, anything else to an RC QP; only when it is addressed to this function.
    if core.cfg.roce && core.port.roce_en {
        if let Some(at) = crate::engine::roce::roce_offsets(frame) {
            if !crate::engine::address::addressed_here(core, frame, &at) {
                return;
            }
        }
    }
    let from_qp = match from {
        Some(Sender::Qp(qpn)) => Some(qpn),
        _ => None,
    };
    if crate::engine::ud::receive(core, frame, from_qp) || crate::engine::rc::receive(core, frame) {
        return;
    }
    let parsed = packet::parse(frame);
    let words = frame_match_words(&parsed, frame, core.res.match_parts);
    let mut copies = Vec::new();
    let verdict = steer(core, &words, &parsed, frame, &mut copies);
    // Copies a flow sampler took go where its sample table sent them.
    for copy in copies {
        to_tirs(core, from, frame, &parsed, copy);
    }
    if verdict == Verdict::Drop {
        add(&core.counters.rx_steer_drops, 1);
        return;
    }
    to_tirs(core, from, frame, &parsed, verdict);
}

/// Delivers `frame` (parsed as `parsed`) to the RQs behind the TIRs `verdict` names, as the
/// steering entries on its way rewrote it, with their flow tag.
fn to_tirs(core: &mut Core, from: Option<Sender>, frame: &[u8], parsed: &Parsed, verdict: Verdict) {
    let Verdict::Tirs(tirs, flow_tag, rewritten) = verdict else {
        return;
    };
    // What reaches the RQs is the frame as software steering entries rewrote it.
    let reparsed;
    let (frame, parsed) = match &rewritten {
        Some(bytes) => {
            reparsed = packet::parse(bytes);
            (bytes.as_slice(), &reparsed)
        }
        None => (frame, parsed),
    };
    for tirn in tirs.iter() {
        let Some(tir) = core.res.tirs.get(tirn) else {
            continue;
        };
        if from == Some(Sender::Sq(tir.td)) && !self_loop_allowed(tir.self_lb_block, parsed) {
            add(&core.counters.rx_steer_drops, 1);
            continue;
        }
        let (rqn, hash) = match &tir.dispatch {
            TirDispatch::Direct { rqn } => (*rqn, None),
            TirDispatch::Indirect {
                rqtn,
                hash_fn,
                key,
                l3,
                l4,
                fields,
                symmetric,
            } => {
                let Some(rqt) = core.res.rqts.get(*rqtn) else {
                    continue;
                };
                let hash = if *hash_fn == 2 {
                    rss::HashSelector::from_raw(*l3, *l4, *fields).and_then(|sel| {
                        let order = if *symmetric {
                            rss::HashOrder::Sorted
                        } else {
                            rss::HashOrder::AsCarried
                        };
                        rss::rss_hash_keyed(key, sel, order, frame, parsed)
                            .map(|h| (h, hash_type(parsed, sel)))
                    })
                } else {
                    None
                };
                let slot = rss::indirect(hash.map(|(h, _)| h).unwrap_or(0), rqt.rqs.len());
                let Some(&rqn) = rqt.rqs.get(slot) else {
                    continue;
                };
                (rqn, hash)
            }
        };
        let steered = Steered {
            hash,
            flow_tag,
            vlan: None,
        };
        deliver(core, rqn, frame, parsed, steered);
    }
}

/// Whether a TIR's `self_lb_block` bits let it take a frame an SQ of its own transport domain
/// sent (self loopback). Despite the field's name a set bit allows that kind of frame, as
/// Linux writes it: `mlx5e_modify_tirs_lb` (en_common.c) sets `BLOCK_UNICAST` /
/// `BLOCK_MULTICAST` for `enable_uc_lb` / `enable_mc_lb` and the loopback self-test
/// (`mlx5e_test_loopback_setup`, en_selftest.c) enables unicast and expects its packet back;
/// mlx5_ib's `create_raw_packet_qp_tir` (qp.c) sets them for
/// `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC` / `_MC`. Frames between different transport domains of
/// the function are not self loopback and pass whatever the bits say.
fn self_loop_allowed(block: u8, parsed: &Parsed) -> bool {
    let multicast = parsed.dst_mac[0] & 1 != 0;
    let bit = if multicast {
        cxdirect_hw::tir::SELF_LB_BLOCK_MULTICAST
    } else {
        cxdirect_hw::tir::SELF_LB_BLOCK_UNICAST
    };
    block & bit != 0
}

/// The CQE's `rss_hash_type`: IP kind in bits 3:2, L4 kind in bits 7:6.
fn hash_type(parsed: &Parsed, sel: rss::HashSelector) -> u8 {
    let ip = match parsed.l3 {
        L3Kind::Ipv4 => 1,
        L3Kind::Ipv6 => 2,
        L3Kind::None => 0,
    };
    let l4 = if sel.fields.intersects(rss::HashFields::L4_PORTS) {
        match parsed.l4 {
            L4Kind::Tcp => 1,
            L4Kind::Udp => 2,
            _ => 0,
        }
    } else {
        0
    };
    ip << 2 | l4 << 6
}

/// Delivers `frame` (parsed as `parsed`) to RQ `rqn`: without its first VLAN tag, which goes
/// to the CQE, when the RQ strips tags and the frame's first is a customer tag
/// ([`vlan_strip`](crate::engine::vlan_strip)); as it is otherwise.
fn deliver(core: &mut Core, rqn: u32, frame: &[u8], parsed: &Parsed, mut steered: Steered) {
    if !core.res.rqs.get(rqn).is_some_and(|rq| rq.vlan_strip) {
        deliver_as_is(core, rqn, frame, parsed, steered);
        return;
    }
    let mut stripped = std::mem::take(&mut core.receive_scratch.stripped);
    match crate::engine::vlan_strip::strip_into(frame, parsed, &mut stripped) {
        Some(tci) => {
            steered.vlan = Some(tci);
            let reparsed = packet::parse(&stripped);
            deliver_as_is(core, rqn, &stripped, &reparsed, steered);
        }
        None => deliver_as_is(core, rqn, frame, parsed, steered),
    }
    core.receive_scratch.stripped = stripped;
}

/// Delivers `frame` (parsed as `parsed`) to RQ `rqn` as it is: into the next posted WQE, or
/// strides of a striding RQ's, with its completion.
fn deliver_as_is(core: &mut Core, rqn: u32, frame: &[u8], parsed: &Parsed, steered: Steered) {
    let Some(rq) = core.res.rqs.get(rqn) else {
        add(&core.counters.rx_steer_drops, 1);
        return;
    };
    if rq.state != QState::Rdy {
        add(&core.counters.rx_steer_drops, 1);
        return;
    }
    let cqn = rq.cqn;
    let memory = rq.memory;
    let counter_set = rq.counter_set;
    let striding = rq.striding;
    if let RqMemory::Rmp(rmpn) = memory {
        if shared_ring_breaks(core, rmpn) {
            add(&core.counters.rx_steer_drops, 1);
            return;
        }
    }
    if let Some(striding) = striding {
        crate::engine::striding::deliver(core, rqn, striding, frame, parsed, steered);
        return;
    }
    let Some(available) = available_wqes(core, rqn, memory, counter_set) else {
        return;
    };
    let Some(wq) = receive_ring(core, rqn, memory) else {
        return;
    };
    let consumed = wq.consumed;
    // A linked-list RMP hands out the WQE at its list head; a cyclic ring the next in order.
    let linked = wq.linked_head;
    let index = linked.unwrap_or(consumed);
    let entries = wq.entries();
    let stride = (wq.stride() as usize).min(MAX_RX_WQE);
    let pd = wq.pd;
    // Swapped out for unallocated placeholders while in use.
    let mut scratch = std::mem::replace(
        &mut core.receive_scratch,
        ReceiveScratch {
            wqe: Vec::new(),
            stripped: Vec::new(),
        },
    );
    let wqe = &mut scratch.wqe[..stride];
    // The WQE is consumed whatever happens next.
    let held = receive_ring_mut(core, rqn, memory).is_some_and(|wq| {
        wq.consumed = consumed.wrapping_add(1);
        wq.posted_end = consumed.wrapping_add(available);
        linked.is_none() && wq.fetched.copy_held(index, wqe)
    });
    // List order is not index order, so a linked list is read a WQE at a time.
    let ahead = if linked.is_some() { 1 } else { available };
    let mut fetched = held || read_receive_wqes(core, rqn, memory, index, ahead, wqe);
    // A linked WQE starts with its next segment; the data segments follow it.
    let data_at = if linked.is_some() && fetched {
        let next = SrqNextSeg::new(&wqe[..]).map_or(u16::MAX, |seg| seg.next_wqe_index());
        if u32::from(next) < entries {
            if let Some(wq) = receive_ring_mut(core, rqn, memory) {
                wq.linked_head = Some(next);
            }
        } else {
            // A next index past the ring: the WQE cannot be used.
            fetched = false;
        }
        WQE_DS.min(wqe.len())
    } else {
        0
    };
    let wqe = &wqe[data_at..];
    if fetched
        && core
            .faults
            .take(|f| matches!(f, Fault::LateReceive { rqn: r } if *r == rqn).then_some(()))
            .is_some()
    {
        // The WQE is taken; the payload write and completion are still on their way.
        core.late_writes.push(LateWrite {
            rqn,
            cqn,
            index,
            pd,
            memory,
            steered,
            wqe: wqe.to_vec(),
            frame: frame.to_vec(),
        });
        core.receive_scratch = scratch;
        return;
    }
    let (injected, unmapped) = receive_faults(core, rqn, fetched);
    let scattered = match injected {
        Some(syndrome) => Err(syndrome),
        None if fetched => scatter(core, wqe, pd, frame, unmapped),
        None => Err(CqeSyndrome::LocalProtection),
    };
    let done = Delivered {
        rqn,
        cqn,
        index,
        memory,
        steered,
        strides: None,
    };
    complete(core, &done, frame, parsed, scattered);
    core.receive_scratch = scratch;
    if let RqMemory::Rmp(rmpn) = memory {
        check_limit(core, rmpn, available - 1);
    }
}

/// The faults armed for a receive on RQ `rqn`: an error syndrome to complete with
/// ([`Fault::ReceiveError`]), else, when its WQE was `fetched`, whether its writes go to an
/// unmapped IOVA ([`Fault::UnmappedDma`]).
pub(crate) fn receive_faults(
    core: &mut Core,
    rqn: u32,
    fetched: bool,
) -> (Option<CqeSyndrome>, bool) {
    let injected = core.faults.take(|f| match f {
        Fault::ReceiveError { rqn: r, syndrome } if *r == rqn => Some(*syndrome),
        _ => None,
    });
    let unmapped = injected.is_none()
        && fetched
        && core
            .faults
            .take(|f| {
                matches!(f, Fault::UnmappedDma { queue: DmaQueue::Receive(r) } if *r == rqn)
                    .then_some(())
            })
            .is_some();
    (injected, unmapped)
}

/// How many receive WQEs RQ `rqn` has posted past the ones it consumed, from what the device
/// knows or else its doorbell record; `None`, with the frame counted as dropped (out of
/// buffer), when there are none or the ring is gone.
pub(crate) fn available_wqes(
    core: &mut Core,
    rqn: u32,
    memory: RqMemory,
    counter_set: u32,
) -> Option<u16> {
    let Some(wq) = receive_ring(core, rqn, memory) else {
        add(&core.counters.rx_steer_drops, 1);
        return None;
    };
    // While an RMP's limit is armed, the exact count decides the event: read the record.
    let limit_armed = match memory {
        RqMemory::Rmp(rmpn) => core.res.rmps.get(rmpn).is_some_and(|r| r.lwm != 0),
        RqMemory::Own => false,
    };
    let known = wq.posted_end.wrapping_sub(wq.consumed);
    let available = if known > 0 && u32::from(known) <= wq.entries() && !limit_armed {
        known
    } else {
        let Some(read) = posted(core, wq) else {
            add(&core.counters.bad_doorbells, 1);
            add(&core.counters.rx_out_of_buffer, 1);
            return None;
        };
        read
    };
    if available == 0 {
        add(&core.counters.rx_out_of_buffer, 1);
        if let Some(set) = core.res.q_counters.get_mut(counter_set) {
            set.out_of_buffer = set.out_of_buffer.wrapping_add(1);
        }
        core.queue_counters
            .get_mut(QueueKind::Rq, rqn)
            .out_of_buffer += 1;
        if let RqMemory::Rmp(rmpn) = memory {
            core.queue_counters
                .get_mut(QueueKind::Rmp, rmpn)
                .out_of_buffer += 1;
        }
        return None;
    }
    Some(available)
}

/// Reads receive WQE `index` into `out`, and the next `available - 1` WQEs ahead as far as one
/// read goes; false when it cannot be read.
#[cold]
pub(crate) fn read_receive_wqes(
    core: &mut Core,
    rqn: u32,
    memory: RqMemory,
    index: u16,
    available: u16,
    out: &mut [u8],
) -> bool {
    add(&core.counters.rx_wqe_reads, 1);
    let mut ahead = receive_ring_mut(core, rqn, memory)
        .map(|wq| std::mem::take(&mut wq.fetched))
        .unwrap_or_default();
    let read = receive_ring(core, rqn, memory)
        .is_some_and(|wq| read_wqes(core, wq, &mut ahead, index, available, out).is_ok());
    if let Some(wq) = receive_ring_mut(core, rqn, memory) {
        wq.fetched = ahead;
    }
    read
}

/// The ring RQ `rqn` takes its WQEs from: its own, or its RMP's while the RMP is ready.
pub(crate) fn receive_ring(core: &Core, rqn: u32, memory: RqMemory) -> Option<&WorkQueue> {
    match memory {
        RqMemory::Own => core.res.rqs.get(rqn).and_then(|r| r.wq.as_ref()),
        RqMemory::Rmp(rmpn) => core
            .res
            .rmps
            .get(rmpn)
            .filter(|r| r.state == QState::Rdy)
            .map(|r| &r.wq),
    }
}

/// [`receive_ring`], to update.
pub(crate) fn receive_ring_mut(
    core: &mut Core,
    rqn: u32,
    memory: RqMemory,
) -> Option<&mut WorkQueue> {
    match memory {
        RqMemory::Own => core.res.rqs.get_mut(rqn).and_then(|r| r.wq.as_mut()),
        RqMemory::Rmp(rmpn) => core.res.rmps.get_mut(rmpn).map(|r| &mut r.wq),
    }
}

/// Lands the late writes of RQ `rqn` (every RQ when `None`): each payload goes where its WQE
/// pointed, whatever became of the ring since, and its completion follows. The device does
/// this before a queue it names is reset or destroyed, as hardware finishes in-flight DMA
/// before such a command completes. Returns how many landed.
pub(crate) fn land_late_writes(core: &mut Core, rqn: Option<u32>) -> usize {
    let (due, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut core.late_writes)
        .into_iter()
        .partition(|w| rqn.is_none_or(|r| r == w.rqn));
    core.late_writes = kept;
    let landed = due.len();
    for w in due {
        let scattered = scatter(core, &w.wqe, w.pd, &w.frame, false);
        let parsed = packet::parse(&w.frame);
        let done = Delivered {
            rqn: w.rqn,
            cqn: w.cqn,
            index: w.index,
            memory: w.memory,
            steered: w.steered,
            strides: None,
        };
        complete(core, &done, &w.frame, &parsed, scattered);
    }
    crate::engine::cq::flush_all(core);
    landed
}

/// Where a received frame's completion goes.
pub(crate) struct Delivered {
    pub rqn: u32,
    pub cqn: u32,
    /// The receive WQE the frame went into.
    pub index: u16,
    pub memory: RqMemory,
    /// The RSS hash and the flow tag.
    pub steered: Steered,
    /// Striding RQs: the first stride the frame took in WQE `index`, and how many.
    pub strides: Option<(u16, u32)>,
}

/// Writes the completion of a frame the device took a WQE for: a receive CQE when the scatter
/// worked, else an error CQE with the RQ moved to error.
pub(crate) fn complete(
    core: &mut Core,
    d: &Delivered,
    frame: &[u8],
    parsed: &Parsed,
    scattered: Result<(), CqeSyndrome>,
) {
    let Delivered {
        rqn,
        cqn,
        index,
        memory,
        steered,
        strides,
    } = *d;
    match scattered {
        Ok(()) => {
            let mut cqe = [0u8; 64];
            fill_rx_cqe(&mut cqe, index, frame, parsed, steered, memory);
            if let Some((stride, count)) = strides {
                crate::engine::striding::place_in_cqe(&mut cqe, index, stride, count, false);
            }
            stamp_user_index(core, rqn, memory, &mut cqe);
            add(&core.counters.rx_delivered, 1);
            {
                let qc = core.queue_counters.get_mut(QueueKind::Rq, rqn);
                // A striding RQ counts its WQEs as it finishes them.
                qc.wqes += u64::from(strides.is_none());
                qc.frames += 1;
                qc.bytes += frame.len() as u64;
            }
            if crate::engine::cq::post_receive(core, cqn, rqn, &mut cqe).is_err() {
                // The frame is in the buffer but its completion has nowhere to go (CQ in
                // error): it is lost, and the RQ stops with it.
                add(&core.counters.completions_lost, 1);
                enter_error(core, rqn);
            }
        }
        Err(syndrome) => {
            add(&core.counters.error_cqes, 1);
            let mut cqe = crate::engine::cq::error_cqe(CqeOpcode::RespErr, syndrome, 0, rqn, index);
            if let (RqMemory::Rmp(rmpn), Ok(mut err)) = (memory, ErrCqe::new(&mut cqe[..])) {
                err.set_srqn(rmpn);
            }
            stamp_user_index(core, rqn, memory, &mut cqe);
            if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
                add(&core.counters.completions_lost, 1);
            }
            core.queue_counters.get_mut(QueueKind::Rq, rqn).errors += 1;
            enter_error(core, rqn);
        }
    }
}

/// Puts RQ `rqn`'s `user_index` into a CQE of its when the RQ has its own ring, as a
/// `cqe_version` 1 device does: libmlx5 finds the raw packet QP a receive belongs to by it
/// (`get_resp_ctx_v1`). An RQ drawing from an RMP keeps the RMP number there.
pub(crate) fn stamp_user_index(core: &Core, rqn: u32, memory: RqMemory, cqe: &mut [u8; 64]) {
    if memory != RqMemory::Own {
        return;
    }
    if let Some(rq) = core.res.rqs.get(rqn) {
        crate::engine::cq::set_user_index(cqe, rq.user_index);
    }
}

/// Scatters `frame` into the WQE's data segments; `unmapped`: the writes go to an IOVA no
/// mapping covers ([`Fault::UnmappedDma`]).
fn scatter(
    core: &Core,
    wqe: &[u8],
    pd: u32,
    frame: &[u8],
    unmapped: bool,
) -> Result<(), CqeSyndrome> {
    let mut done = 0usize;
    for seg in wqe.chunks_exact(WQE_DS) {
        if done == frame.len() {
            break;
        }
        let seg = DataSeg::new(seg).map_err(|_| CqeSyndrome::LocalQpOperation)?;
        if seg.lkey() == INVALID_LKEY {
            break;
        }
        let room = seg.byte_count() as usize;
        let n = room.min(frame.len() - done);
        if n == 0 {
            continue;
        }
        write_payload(
            core,
            seg.lkey(),
            pd,
            seg.addr(),
            &frame[done..done + n],
            unmapped,
        )?;
        done += n;
    }
    if done < frame.len() {
        return Err(CqeSyndrome::LocalLength);
    }
    Ok(())
}

/// Writes `data` at `addr` through memory key `lkey` of protection domain `pd`; `unmapped`:
/// the writes go to an IOVA no mapping covers ([`Fault::UnmappedDma`]).
pub(crate) fn write_payload(
    core: &Core,
    lkey: u32,
    pd: u32,
    addr: u64,
    data: &[u8],
    unmapped: bool,
) -> Result<(), CqeSyndrome> {
    translate(
        core,
        lkey,
        pd,
        addr,
        data.len() as u64,
        true,
        |iova, off, len| {
            add(&core.counters.payload_writes, 1);
            add(&core.counters.payload_write_bytes, len);
            let iova = if unmapped { UNMAPPED_IOVA + off } else { iova };
            core.dma_write(iova, &data[off as usize..(off + len) as usize])
                .map_err(|_| crate::translate::KeyFault::Bounds)
        },
    )
    .map_err(|_| CqeSyndrome::LocalProtection)
}

/// A receive CQE of an Ethernet RQ: byte count, WQE counter, checksum flags and sum, the
/// flow tag in `sop_drop_qpn` (not the RQ number: libmlx5 finds the queue by the user index
/// in `srqn`, `get_resp_ctx_v1`), the RSS hash.
pub(crate) fn fill_rx_cqe(
    cqe: &mut [u8; 64],
    index: u16,
    frame: &[u8],
    parsed: &Parsed,
    steered: Steered,
    memory: RqMemory,
) {
    let Ok(mut c) = cxdirect_hw::cqe::Cqe64::new(&mut cqe[..]) else {
        return;
    };
    let l3_ok = parsed.l3 == L3Kind::Ipv4 && packet::ipv4_header_checksum_ok(frame, parsed);
    let l4_ok =
        matches!(parsed.l4, L4Kind::Tcp | L4Kind::Udp) && packet::l4_checksum_ok(frame, parsed);
    c.set_byte_cnt(frame.len() as u32)
        .set_qpn(steered.flow_tag & 0x00ff_ffff)
        .set_wqe_counter(index)
        .set_opcode(CqeOpcode::RespSend as u8)
        .set_l2_ok(true)
        .set_l3_ok(l3_ok || (parsed.l3 == L3Kind::Ipv6 && !parsed.ip_truncated()))
        .set_l4_ok(l4_ok)
        .set_l3_hdr_type(parsed.l3_hdr_type())
        .set_l4_hdr_type(parsed.l4_hdr_type());
    if let Some((value, kind)) = steered.hash {
        c.set_rss_hash_result(value).set_rss_hash_type(kind);
    }
    if let Some(tci) = steered.vlan {
        c.set_has_vlan(true).set_vlan_info(tci);
    }
    // The one's-complement sum (not inverted) of the IP packet, from its header to the frame's
    // end: Linux's mlx5e hands it to the stack as CHECKSUM_COMPLETE.
    if matches!(parsed.l3, L3Kind::Ipv4 | L3Kind::Ipv6) {
        if let Some(ip) = frame.get(parsed.l3_offset..) {
            c.set_check_sum(packet::ones_complement_sum(ip, 0));
        }
    }
    if let RqMemory::Rmp(rmpn) = memory {
        c.set_srqn(rmpn);
    }
}

/// Raises the RMP's limit event once when its posted WQEs fall below the armed watermark, and
/// disarms it (the limit then reads 0 until the driver arms it again).
pub(crate) fn check_limit(core: &mut Core, rmpn: u32, posted_now: u16) {
    check_shared_limit(core, SharedRing::Rmp(rmpn), posted_now);
}

/// Raises shared ring `ring`'s SRQ limit event (an RMP's or an XRC SRQ's) once when its posted
/// WQEs fall below the armed watermark, and disarms it. Both live in the SRQ number space
/// Linux's `srq_event_notifier` looks the event's `qp_srq_n` up in.
pub(crate) fn check_shared_limit(core: &mut Core, ring: SharedRing, posted_now: u16) {
    let (lwm, srqn) = match ring {
        SharedRing::Rmp(n) => (core.res.rmps.get_mut(n).map(|r| &mut r.lwm), n),
        SharedRing::XrcSrq(n) => (core.res.xrc_srqs.get_mut(n).map(|s| &mut s.lwm), n),
    };
    let Some(lwm) = lwm else {
        return;
    };
    if *lwm == 0 || posted_now >= *lwm {
        return;
    }
    *lwm = 0;
    add(&core.counters.limit_events, 1);
    let mut data = [0u8; 28];
    data[0x14] = 1;
    data[24..28].copy_from_slice(&(srqn & 0x00ff_ffff).to_be_bytes());
    crate::engine::eq::post_subscribed_event(core, EventType::SrqRqLimit, 0, &data);
}

/// A receive WQE a QP took from an RMP or XRC SRQ.
pub(crate) struct RmpWqe {
    /// The WQE's index in the ring.
    pub index: u16,
    /// Its address (IOVA).
    pub addr: u64,
    /// Its size in bytes (the RMP's stride).
    pub len: usize,
    /// Where its data segments start: after the next segment of a linked list.
    pub data_at: usize,
    /// The ring's protection domain.
    pub pd: u32,
}

/// A shared receive ring QPs take receive WQEs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedRing {
    /// An RMP (a basic SRQ), cyclic or linked list.
    Rmp(u32),
    /// An XRC SRQ (always a linked list).
    XrcSrq(u32),
}

fn shared_ring(core: &mut Core, ring: SharedRing) -> Option<&mut WorkQueue> {
    match ring {
        SharedRing::Rmp(n) => core.res.rmps.get_mut(n).map(|r| &mut r.wq),
        SharedRing::XrcSrq(n) => core.res.xrc_srqs.get_mut(n).map(|s| &mut s.wq),
    }
}

/// Takes the next receive WQE of RMP `rmpn` for a QP, `posted` being how many it holds (at
/// least one): see [`take_shared_wqe`]; then checks the RMP's limit.
pub(crate) fn take_rmp_wqe(core: &mut Core, rmpn: u32, posted: u16) -> Option<RmpWqe> {
    take_limited_wqe(core, SharedRing::Rmp(rmpn), posted)
}

/// Takes the next receive WQE of shared ring `ring` (an RMP or an XRC SRQ) for a QP, `posted`
/// being how many it holds (at least one, read from its doorbell record): see
/// [`take_shared_wqe`]; then checks the ring's limit.
pub(crate) fn take_limited_wqe(core: &mut Core, ring: SharedRing, posted: u16) -> Option<RmpWqe> {
    let wqe = take_shared_wqe(core, ring)?;
    check_shared_limit(core, ring, posted - 1);
    Some(wqe)
}

/// Takes the next receive WQE of shared ring `ring` for a QP (one is posted): a cyclic
/// ring's in order, a linked list's from its head, whose next segment names the new head.
/// `None` when the WQE or its next index cannot be read.
pub(crate) fn take_shared_wqe(core: &mut Core, ring: SharedRing) -> Option<RmpWqe> {
    let wq = shared_ring(core, ring)?;
    let index = wq.linked_head.unwrap_or(wq.consumed);
    wq.consumed = wq.consumed.wrapping_add(1);
    let stride = wq.stride() as usize;
    let slot = u64::from(index) & u64::from(wq.entries() - 1);
    let addr = wq.buf.addr(slot * stride as u64)?;
    let (pd, linked, entries) = (wq.pd, wq.linked_head.is_some(), wq.entries());
    let mut data_at = 0;
    if linked {
        let mut next = [0u8; WQE_DS];
        core.dma_read(addr, &mut next).ok()?;
        let next = SrqNextSeg::new(&next[..]).ok()?.next_wqe_index();
        if u32::from(next) >= entries {
            return None;
        }
        if let Some(wq) = shared_ring(core, ring) {
            wq.linked_head = Some(next);
        }
        data_at = WQE_DS;
    }
    Some(RmpWqe {
        index,
        addr,
        len: stride,
        data_at,
        pd,
    })
}
