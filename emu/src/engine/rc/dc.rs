//! The dynamically connected (DC) transport, carried by the RC rooms.
//!
//! A DC initiator (a QP of service type DCI) is an RC requester whose peer changes with its
//! WQEs: each send WQE has, after its control segment, the 48-byte address vector libmlx5's
//! `mlx5_send_wr_set_dc_addr` writes (`struct mlx5_av`: the DC access key in the Q_Key's
//! place, the DCT's number with `MLX5_EXTENDED_UD_AV`, then the path), and the WQE's
//! remote-address and data segments after it. The initiator carries one connection at a
//! time ([`connect`]): a WQE for another DCT (or key, or destination) waits until every WQE
//! sent on the current connection is acknowledged, then a new connection begins at the next
//! PSN. Everything else (segmenting, ACKs, retransmission, READ and atomic responses) is the
//! RC requester's.
//!
//! Mellanox's DC wire format is not public. The model's own, used only between modelled
//! functions: a DC request is an RC request under the DC opcodes (the RC opcode with the
//! manufacturer prefix 0xc0) whose BTH names the DCT, with a 16-byte DCETH after the BTH:
//! the access key (64 bits), the initiator's QP number and the PSN its connection began at
//! (24 bits in a 32-bit word each). Responses (ACKs, NAKs, READ responses, atomic
//! acknowledgements) go back to the initiator's QP number under the RC opcodes.
//!
//! At the target ([`admit`]), a DC request must name an existing, active DCT and present
//! its access key; a wrong key is counted (`dc_key_violations` and the DCT's
//! `dc_access_key_violation_count`) and answered by a remote access NAK, which completes the
//! initiator's WQE in error, with nothing placed. An accepted request goes to the DCT's
//! responder context carrying that initiator (its source GID and DCI number), one of the
//! contexts CREATE_DCT made: a new connection (another first PSN) starts it over at that PSN.
//! The RC responder then runs as for any RC QP, with the DCT's SRQ, CQ, PD and access rights.

use super::packet::{Offsets, BTH_LEN, DCETH_LEN, ICRC_LEN, PSN_MASK};
use crate::counters::add;
use crate::function::Core;
use crate::objects::dc::{DcPeer, DciConnection};
use crate::objects::rc::Responder;
use cxdirect_hw::dct;
use cxdirect_hw::eqe::{EventType, EQE_DCT_NUMBER_OFFSET};
use cxdirect_hw::qp::{service_type, state};
use cxdirect_hw::wqe::{DatagramSeg, WQE_DS};

/// Bytes of a DC initiator's address vector in its send WQEs (`mlx5_wqe_datagram_seg`).
pub(super) const DC_AV_BYTES: usize = 48;

/// What a DC initiator's WQE may do now.
pub(super) enum Connect {
    /// Go, on the connection whose DCETH this is.
    Go((u64, u32, u32)),
    /// Wait until the WQEs sent on the current connection are acknowledged.
    Wait,
}

/// Reads the address vector of DC initiator `qpn`'s WQE `wqe` and connects the initiator to
/// the DCT it names, when it may (see the module). A retransmission (`resend`) always goes
/// on the connection it was first sent on. `None` for a WQE too short for its vector.
pub(super) fn connect(core: &mut Core, qpn: u32, wqe: &[u8], resend: bool) -> Option<Connect> {
    let av = DatagramSeg::new(wqe.get(WQE_DS..WQE_DS + DC_AV_BYTES)?).ok()?;
    let qp = core.res.qps.get_mut(qpn)?;
    let wanted = DciConnection {
        dct: av.dest_qpn(),
        rgid: av.dgid(),
        rmac: av.rmac(),
        key: av.dc_key(),
        connect_psn: qp.next_send_psn & PSN_MASK,
    };
    let eth = |c: &DciConnection| (c.key, qpn, c.connect_psn);
    if let Some(current) = qp.dci {
        let same = current.dct == wanted.dct
            && current.rgid == wanted.rgid
            && current.rmac == wanted.rmac
            && current.key == wanted.key;
        if same || resend {
            return Some(Connect::Go(eth(&current)));
        }
        if !qp.req.outstanding.is_empty() || qp.req.sending.is_some() {
            return Some(Connect::Wait);
        }
    }
    // A new connection: the path is the vector's (the port, P_Key index and ACK timeout stay
    // the QP's own, as its transitions set them).
    qp.dci = Some(wanted);
    qp.remote_qpn = wanted.dct;
    let path = &mut qp.path;
    path.loopback = av.fl_mlid() & 0x80 != 0;
    path.gid_index = av.sgid_index();
    path.rgid = wanted.rgid;
    path.rmac = wanted.rmac;
    path.udp_sport = av.udp_sport();
    path.hop_limit = av.hop_limit();
    path.tclass = av.tclass();
    path.flow_label = av.flow_label();
    path.prio = cxdirect_hw::wqe::roce_av_prio(av.stat_rate_sl());
    Some(Connect::Go(eth(&wanted)))
}

/// Whether QP `qpn` is a DC initiator with nothing outstanding: a WQE waiting to connect
/// elsewhere may go.
pub(super) fn idle_initiator(core: &Core, qpn: u32) -> bool {
    core.res.qps.get(qpn).is_some_and(|qp| {
        qp.service == service_type::DCI && qp.req.outstanding.is_empty() && qp.req.sending.is_none()
    })
}

/// What the target made of a DC request ([`admit`]).
pub(super) enum Admission {
    /// The responder context (an RC QP number) that takes it.
    Take(u32),
    /// The access key was wrong: the responder context `0` answers with a remote access NAK
    /// (the responder sends it, so that this room needs nothing of the responder's).
    WrongKey(u32),
    /// Dropped here and counted (see the module).
    Dropped,
}

/// A DC request for DCT `dctn` (the DC prefix taken off its opcode) in `frame` with its
/// headers at `at`: the responder context that takes it, or why none does.
pub(super) fn admit(core: &mut Core, frame: &[u8], at: &Offsets, dctn: u32) -> Admission {
    match admit_context(core, frame, at, dctn) {
        Some(Ok(qpn)) => Admission::Take(qpn),
        Some(Err(qpn)) => Admission::WrongKey(qpn),
        None => Admission::Dropped,
    }
}

/// [`admit`]'s work: `Some(Ok(context))`, `Some(Err(context))` for a wrong key, `None` when
/// dropped.
fn admit_context(
    core: &mut Core,
    frame: &[u8],
    at: &Offsets,
    dctn: u32,
) -> Option<Result<u32, u32>> {
    let start = at.bth + BTH_LEN;
    // The DCETH must end before the ICRC: a shorter packet changes no responder context.
    let body_end = at.end.saturating_sub(ICRC_LEN).min(frame.len());
    let Some(eth) = frame
        .get(start..(start + DCETH_LEN).min(body_end))
        .filter(|e| e.len() == DCETH_LEN)
    else {
        add(&core.counters.roce_rx_drops, 1);
        return None;
    };
    let word = |i: usize| u32::from_be_bytes([eth[i], eth[i + 1], eth[i + 2], eth[i + 3]]);
    let key = u64::from_be_bytes(eth[..8].try_into().unwrap_or_default());
    let (dci, connect_psn) = (word(8) & PSN_MASK, word(12) & PSN_MASK);
    let (Some(rgid), Some(rmac)) = (source_gid(frame, at), frame.get(6..12)) else {
        add(&core.counters.roce_rx_drops, 1);
        return None;
    };
    let mut mac = [0u8; 6];
    mac.copy_from_slice(rmac);
    let Some(dct) = core
        .res
        .dcts
        .get(dctn)
        .filter(|d| d.state == dct::state::ACTIVE)
    else {
        add(&core.counters.roce_rx_drops, 1);
        return None;
    };
    let (dct_key, responders) = (dct.key, dct.responders.clone());
    let peer = DcPeer {
        rgid,
        dci,
        connect_psn,
    };
    let Some(qpn) = responder_for(core, &responders, peer) else {
        add(&core.counters.dc_responders_busy, 1);
        return None;
    };
    let sport = frame
        .get(at.bth - 8..at.bth - 6)
        .map_or(0, |p| u16::from_be_bytes([p[0], p[1]]));
    core.res.dc_clock += 1;
    let clock = core.res.dc_clock;
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        let fresh = qp
            .dc_responder
            .and_then(|r| r.peer)
            .is_none_or(|p| p != peer);
        if fresh {
            // A new connection (or initiator): the responder starts over at its first PSN.
            qp.state = state::RTS;
            qp.next_rcv_psn = connect_psn;
            qp.resp = Responder::default();
            qp.remote_qpn = dci;
            qp.path.rgid = rgid;
            qp.path.rmac = mac;
            qp.path.udp_sport = sport;
        }
        if let Some(r) = qp.dc_responder.as_mut() {
            r.peer = Some(peer);
            r.last_used = clock;
        }
    }
    if key != dct_key {
        add(&core.counters.dc_key_violations, 1);
        if let Some(dct) = core.res.dcts.get_mut(dctn) {
            dct.key_violations = dct.key_violations.wrapping_add(1);
        }
        key_violated(core, dctn);
        return Some(Err(qpn));
    }
    Some(Ok(qpn))
}

/// The responder context among `responders` carrying `peer`'s initiator, else a free one,
/// else the least recently used one with nothing in progress; `None` when all are busy.
fn responder_for(core: &Core, responders: &[u32], peer: DcPeer) -> Option<u32> {
    let of = |qpn: &u32| core.res.qps.get(*qpn).map(|qp| (*qpn, qp));
    let contexts = || responders.iter().filter_map(of);
    let carrying = contexts().find(|(_, qp)| {
        qp.dc_responder
            .and_then(|r| r.peer)
            .is_some_and(|p| p.rgid == peer.rgid && p.dci == peer.dci)
    });
    if let Some((qpn, _)) = carrying {
        return Some(qpn);
    }
    if let Some((qpn, _)) =
        contexts().find(|(_, qp)| qp.dc_responder.is_some_and(|r| r.peer.is_none()))
    {
        return Some(qpn);
    }
    contexts()
        .filter(|(_, qp)| {
            qp.resp.recv.is_none()
                && qp.resp.write.is_none()
                && qp.resp.owed.is_empty()
                && qp.resp.page_fault.is_none()
        })
        .min_by_key(|(_, qp)| qp.dc_responder.map_or(0, |r| r.last_used))
        .map(|(qpn, _)| qpn)
}

/// The source IP address of a RoCE frame whose headers are at `at`, as a GID (IPv4 as an
/// IPv4-mapped GID).
fn source_gid(frame: &[u8], at: &Offsets) -> Option<[u8; 16]> {
    let ip = frame.get(at.l3..)?;
    let mut gid = [0u8; 16];
    if ip.first()? >> 4 == 4 {
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(ip.get(12..16)?);
    } else {
        gid.copy_from_slice(ip.get(8..24)?);
    }
    Some(gid)
}

/// A request presented a wrong access key to DCT `dctn`: an armed DCT raises
/// DCT_KEY_VIOLATION (its number where DCT_DRAINED has it) and is disarmed.
fn key_violated(core: &mut Core, dctn: u32) {
    let Some(dct) = core.res.dcts.get_mut(dctn) else {
        return;
    };
    if !std::mem::take(&mut dct.armed) {
        return;
    }
    let mut data = [0u8; 28];
    data[EQE_DCT_NUMBER_OFFSET..EQE_DCT_NUMBER_OFFSET + 4].copy_from_slice(&dctn.to_be_bytes());
    crate::engine::eq::post_async_event(core, EventType::DctKeyViolation, 0, &data);
}
