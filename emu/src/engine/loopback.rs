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
//!   gate Ethernet local loopback only (they exist for raw Ethernet: mlx5_ib's
//!   `mlx5_ib_enable_lb` turns them off only for a second user context or a raw packet QP).
//! - RoCE multicast (a UD datagram to a group's multicast address) leaves on the cable and,
//!   when a QP of the function joined that group (ATTACH_TO_MCG), a copy loops inside: the
//!   receive path delivers it to every member but the sending QP itself when that QP blocks
//!   multicast loopback (`block_lb_mc`, mlx5_ib's IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK).
//!
//! On a one-port wire (a loopback plug) nothing is looped inside: the plug brings every frame
//! back anyway, and what it returns came from the cable, not from a transport domain of the
//! function, so no TIR's self-loopback check applies to it.
//!
//! Looped frames wait in a queue of their own until the function's next receive pass, never
//! run from inside the send that made them: the RC requester and responder of one function
//! must not re-enter each other in the middle of a message.

use super::address::{destination_gid, own_mac};
use crate::counters::add;
use crate::function::local_loopback::Sender;
use crate::function::Core;

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
        if multicast {
            return Route {
                local: joined_here(core, frame),
                cable: true,
            };
        }
        return if own_mac(core, dst) {
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

/// Whether a QP of the function joined the multicast group RoCE `frame` is addressed to.
fn joined_here(core: &Core, frame: &[u8]) -> bool {
    super::roce::roce_offsets(frame)
        .and_then(|at| destination_gid(frame, &at))
        .is_some_and(|(gid, _)| !core.res.mcgs.members(&gid).is_empty())
}

/// Queues `frame` for the function's own receive path; `from` is its sender (the sending SQ's
/// transport domain, or the sending datagram QP).
pub(crate) fn loop_back(core: &mut Core, frame: &[u8], from: Option<Sender>) {
    add(&core.counters.local_loopback_frames, 1);
    core.local_loopback.push(frame, from);
}

/// Receives the frames looped inside the function (at most [`FRAMES_PER_PASS`], those looped
/// meanwhile included); whether there were any.
pub(crate) fn drain(core: &mut Core) -> bool {
    let mut taken = 0;
    while taken < FRAMES_PER_PASS {
        let Some((frame, from)) = core.local_loopback.pop() else {
            break;
        };
        taken += 1;
        super::rq::receive(core, &frame, from);
        core.local_loopback.recycle(frame);
    }
    if taken > 0 {
        super::cq::flush_all(core);
    }
    taken > 0
}
