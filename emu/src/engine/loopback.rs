//! Local loopback inside one function, and the address checks a received RoCE frame passes.
//!
//! A frame the function sends to itself never reaches the cable: the device hands it to its
//! own receive path. Which frames loop follows how Linux drives the controls:
//!
//! - Ethernet (from an SQ): unicast to the function's own MAC loops unless the NIC vport's
//!   `disable_uc_local_lb` is set, multicast and broadcast loop (a copy, the frame also leaves
//!   on the cable) unless `disable_mc_local_lb` is set. Linux writes both bits with
//!   `mlx5_nic_vport_update_local_lb` (vport.c), called by mlx5_ib's `mlx5_ib_enable_lb` /
//!   `mlx5_ib_disable_lb` (main.c: enabled when a second user transport domain or a raw packet
//!   QP allowing self loopback appears) and by mlx5e's loopback self-test; it only writes them
//!   when the caps `disable_local_lb_uc`/`_mc` are advertised (the model advertises both),
//!   and assumes loopback starts off
//!   (`lb.enabled` false, the self-test queries before enabling), so a new vport starts with
//!   both bits set. A looped frame is then steered like any other and carries the transport
//!   domain of the sending SQ's TIS. A TIR of that same transport domain takes it only as
//!   self loopback, when its `self_lb_block` bit for the frame's kind (unicast, or multicast
//!   and broadcast) is set: Linux sets those bits to allow it (`mlx5e_modify_tirs_lb` in
//!   en_common.c, called with `enable_uc_lb` by the loopback self-test, and mlx5_ib's raw
//!   packet TIR in qp.c for `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC`/`_MC`). TIRs of other
//!   transport domains of the function (another user context's raw packet QP, say) take it
//!   whatever their bits: that is the local loopback mlx5_ib enables the vport for when a
//!   second user transport domain appears.
//! - RoCE (from RC and UD QPs, QP1 included) to the function's own MAC loops whatever the vport
//!   bits say: mlx5_ib counts only user transport domains and raw packet QPs for
//!   `mlx5_ib_enable_lb`, never RC or UD QPs, yet kernel consumers with no user context (and
//!   rdma-core's own tests with one context) run RoCE between QPs of one function. The bits
//!   gate Ethernet local loopback only. RoCE multicast leaves on the cable alone (multicast
//!   groups are not modelled).
//!
//! On a one-port wire (a loopback plug) nothing is looped inside: the plug brings every frame
//! back anyway, and what it returns came from the cable, not from a transport domain of the
//! function, so no TIR's self-loopback check applies to it.
//!
//! Looped frames wait in a queue of their own until the function's next receive pass, never
//! run from inside the send that made them: the RC requester and responder of one function
//! must not re-enter each other in the middle of a message.

use super::roce::Offsets;
use crate::counters::add;
use crate::function::Core;
use cxdirect_hw::roce::RoceAddrLayout;
use std::collections::VecDeque;

/// Frames looped inside the device and not yet received, each with the transport domain of
/// the SQ that sent it (none for RoCE from a QP), with their buffers kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct LocalLoopback {
    queue: VecDeque<(Vec<u8>, Option<u32>)>,
    free: Vec<Vec<u8>>,
}

impl LocalLoopback {
    /// Whether a frame waits.
    pub fn pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Drops every waiting frame (a function reset).
    pub fn clear(&mut self) {
        while let Some((buf, _)) = self.queue.pop_front() {
            self.free.push(buf);
        }
    }

    fn push(&mut self, frame: &[u8], td: Option<u32>) {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        self.queue.push_back((buf, td));
    }
}

/// Largest number of looped frames one receive pass takes: a pass is bounded even while two
/// QPs of the function keep answering each other; the rest waits for the next pass.
const FRAMES_PER_PASS: usize = 4096;

/// Where a frame the function sends goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Route {
    /// Into the function's own receive path.
    pub local: bool,
    /// Out on the cable.
    pub cable: bool,
}

/// Whether `mac` is one of the function's own unicast addresses: the vport's permanent
/// address (as MODIFY_NIC_VPORT_CONTEXT last set it) or the source MAC of an entry of its
/// RoCE address table.
pub(crate) fn own_mac(core: &Core, mac: &[u8]) -> bool {
    if mac.len() != 6 || mac[0] & 1 != 0 {
        return false;
    }
    let port = core.port.mac.to_be_bytes();
    if mac == &port[2..] {
        return true;
    }
    core.res.gids.entries.iter().any(|entry| {
        entry[..16].iter().any(|&b| b != 0)
            && RoceAddrLayout::new(&entry[..]).is_ok_and(|l| l.source_mac() == mac)
    })
}

/// Whether `gid` (16 bytes; IPv4 as an IPv4-mapped GID) is in the function's RoCE address
/// table.
pub(crate) fn own_gid(core: &Core, gid: &[u8]) -> bool {
    core.res
        .gids
        .entries
        .iter()
        .any(|entry| entry[..16].iter().any(|&b| b != 0) && entry[..16] == *gid)
}

/// Whether RoCE takes `frame` on this function (RoCE enabled and a RoCE v2 packet): then the
/// RoCE transports, not Ethernet steering, receive it.
fn is_roce(core: &Core, frame: &[u8]) -> bool {
    core.cfg.roce && core.port.roce_en && super::roce::roce_offsets(frame).is_some()
}

/// Where `frame`, sent by this function, goes.
pub(crate) fn route(core: &Core, frame: &[u8]) -> Route {
    let cable_only = Route {
        local: false,
        cable: true,
    };
    let one_port = core
        .wire
        .as_ref()
        .is_some_and(|(wire, _)| wire.port_count() == 1);
    if one_port || frame.len() < 6 {
        return cable_only;
    }
    let dst = &frame[..6];
    let multicast = dst[0] & 1 != 0;
    if is_roce(core, frame) {
        return if !multicast && own_mac(core, dst) {
            Route {
                local: true,
                cable: false,
            }
        } else {
            cable_only
        };
    }
    if multicast {
        Route {
            local: !core.port.disable_mc_local_lb,
            cable: true,
        }
    } else if own_mac(core, dst) && !core.port.disable_uc_local_lb {
        Route {
            local: true,
            cable: false,
        }
    } else {
        cable_only
    }
}

/// Queues `frame` for the function's own receive path; `td` is the transport domain of the
/// sending SQ's TIS (none for RoCE sent by a QP).
pub(crate) fn loop_back(core: &mut Core, frame: &[u8], td: Option<u32>) {
    add(&core.counters.local_loopback_frames, 1);
    core.local_loopback.push(frame, td);
}

/// Receives the frames looped inside the function (at most [`FRAMES_PER_PASS`], those looped
/// meanwhile included); whether there were any.
pub(crate) fn drain(core: &mut Core) -> bool {
    let mut taken = 0;
    while taken < FRAMES_PER_PASS {
        let Some((frame, td)) = core.local_loopback.queue.pop_front() else {
            break;
        };
        taken += 1;
        super::rq::receive(core, &frame, td);
        core.local_loopback.free.push(frame);
    }
    if taken > 0 {
        super::cq::flush_all(core);
    }
    taken > 0
}

/// The destination checks of a received RoCE frame whose headers are at `at`: its
/// destination MAC is the function's (or multicast, with a multicast destination IP, as RoCE
/// multicast is sent) and its destination IP is a GID of the function's RoCE address table.
/// A frame that fails is counted in `roce_address_drops`; false then.
pub(crate) fn addressed_here(core: &Core, frame: &[u8], at: &Offsets) -> bool {
    let ok = destination_ok(core, frame, at);
    if !ok {
        add(&core.counters.roce_address_drops, 1);
    }
    ok
}

fn destination_ok(core: &Core, frame: &[u8], at: &Offsets) -> bool {
    let Some(dst_mac) = frame.get(..6) else {
        return false;
    };
    let ip = &frame[at.l3..];
    let mut gid = [0u8; 16];
    let multicast_ip = if ip.first().is_some_and(|b| b >> 4 == 4) {
        let Some(addr) = ip.get(16..20) else {
            return false;
        };
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(addr);
        (0xe0..=0xef).contains(&addr[0])
    } else {
        let Some(addr) = ip.get(24..40) else {
            return false;
        };
        gid.copy_from_slice(addr);
        addr[0] == 0xff
    };
    if dst_mac[0] & 1 != 0 {
        // Multicast RoCE: a multicast MAC carries a multicast IP, never a unicast one.
        return multicast_ip;
    }
    own_mac(core, dst_mac) && own_gid(core, &gid)
}
