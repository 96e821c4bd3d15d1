//! A running RC or UC QP's UDP source port changed by RTS2RTS_QP, as rdma-core's
//! `mlx5dv_modify_qp_udp_sport` (providers/mlx5/mlx5.c, `_mlx5dv_modify_qp_udp_sport`) sends it
//! through DEVX: `MLX5_QPC_OPT_MASK_32_UDP_SPORT` in `opt_param_mask_95_32`, the port in the
//! context's primary path, no context extension. libmlx5 sends it only when the general cap
//! `rts2rts_qp_udp_sport` is reported and the QP is in RTS.

use cxdirect_emu::testkit::rc::{
    lone_host, rc_wqe, take_frames, RcPath, RcQp, GID_A, GID_B, MAC_A,
};
use cxdirect_emu::testkit::{CmdFail, Host};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::qp::{qpc_opt_mask_32, service_type, QueryQpIn, QueryQpOut, Rts2rtsQpIn};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 4 << 20;
const PEER_MAC: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 2];
/// Where a RoCE v2 frame over IPv4 carries its UDP source port.
const UDP_SPORT_AT: usize = 14 + 20;

/// `mlx5dv_modify_qp_udp_sport(qp, port)` as libmlx5 builds the command.
fn modify_udp_sport(h: &mut Host, qpn: u32, port: u16) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, Rts2rtsQpIn::<&[u8]>::SIZE);
    let mut cmd = Rts2rtsQpIn::new(&mut input[..]).expect("layout");
    cmd.set_qpn(qpn)
        .set_opt_param_mask_95_32(qpc_opt_mask_32::UDP_SPORT);
    cmd.qpc_mut().primary_address_path_mut().set_udp_sport(port);
    h.exec(&input, 0x10).map(|_| ())
}

/// QUERY_QP: the primary path's UDP source port.
fn queried_udp_sport(h: &mut Host, qpn: u32) -> u16 {
    let mut input = Host::input(Opcode::QueryQp, 0, QueryQpIn::<&[u8]>::SIZE);
    QueryQpIn::new(&mut input[..]).expect("layout").set_qpn(qpn);
    let out = h.exec(&input, QueryQpOut::<&[u8]>::SIZE).expect("QUERY_QP");
    QueryQpOut::new(&out[..])
        .expect("layout")
        .qpc()
        .primary_address_path()
        .udp_sport()
}

/// Posts a SEND of `len` bytes and lets the device put it on the wire.
fn send(h: &mut Host, qp: &mut RcQp, len: u32) {
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 4096);
    let w = rc_wqe(&qp.sq, opcode::SEND, 0, None, None, (src, lkey, len));
    h.post(&mut qp.sq, &w, false);
    h.dev.poll();
}

#[test]
fn a_running_rc_qp_sends_from_the_new_port_and_reports_it() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    assert!(general.rts2rts_udp_sport(), "rts2rts_qp_udp_sport reported");
    for st in [service_type::RC, service_type::UC] {
        let cq = h.create_cq(6);
        let mut qp = h.create_connected_qp(st, &cq, 4, 4, None);
        let path = RcPath::to(GID_B, PEER_MAC, 0x77);
        h.connect_rc(qp.qpn, &path);
        send(&mut h, &mut qp, 16);
        let before = take_frames(&wire);
        assert_eq!(before.len(), 1, "service {st}: one frame");
        let port_of = |f: &[u8]| u16::from_be_bytes([f[UDP_SPORT_AT], f[UDP_SPORT_AT + 1]]);
        assert_eq!(
            port_of(&before[0]),
            path.udp_sport,
            "service {st}: the path's port"
        );
        modify_udp_sport(&mut h, qp.qpn, 55555).expect("RTS2RTS with the UDP source port");
        assert_eq!(
            queried_udp_sport(&mut h, qp.qpn),
            55555,
            "service {st}: reported"
        );
        send(&mut h, &mut qp, 16);
        let after = take_frames(&wire);
        assert_eq!(after.len(), 1, "service {st}: one frame");
        assert_eq!(port_of(&after[0]), 55555, "service {st}: the new port");
        h.destroy_qp(qp.qpn);
    }
}

#[test]
fn the_port_changes_only_in_rts() {
    let (mut h, _wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let cq = h.create_cq(6);
    let qp = h.create_rc_qp(&cq, 4, 4, None);
    // RST: RTS2RTS is not a transition from there, so nothing changes.
    let got = modify_udp_sport(&mut h, qp.qpn, 4242).err();
    assert!(
        matches!(got, Some(CmdFail::Status { status, .. }) if status == CmdStatus::BadQpState as u8),
        "RTS2RTS on a QP in RST: {got:?}"
    );
    assert_ne!(queried_udp_sport(&mut h, qp.qpn), 4242);
}
