//! Local loopback inside one function and the destination checks on receive: what a
//! ConnectX does with frames a function sends to itself (both ends of `ibv_rc_pingpong` on one
//! RDMA device, mlx5e's loopback self-test) and with RoCE frames that are not addressed to it.
//!
//! Every function here is alone on port A of a pair wire ([`lone_host`]): what leaves on the
//! cable waits at port B, so a frame that was looped inside the device is one that is not
//! there.

use cxdirect_emu::testkit::rc::{
    lone_host, rc_wqe, take_frames, RcPath, RemoteRights, GID_A, GID_B, MAC_A, MAC_B,
};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UD_QKEY};
use cxdirect_emu::testkit::{refused, udp_frame, Cq, Host, Rq, IOVA_BASE};
use cxdirect_emu::wire::PortId;
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::CqeOpcode;
use cxdirect_hw::qp::service_type;
use cxdirect_hw::tir::{CreateTirIn, ModifyTirIn, SELF_LB_BLOCK_MULTICAST, SELF_LB_BLOCK_UNICAST};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 8 << 20;

/// Every CQE waiting on `cq`.
fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

#[test]
fn rc_pingpong_on_one_device_send_and_rdma_write_loop_inside_the_function() {
    // Both ends of ibv_rc_pingpong on one RDMA device: two RC QPs of one function, each
    // path leading to the function's own GID and MAC. RoCE loops whatever the vport's
    // local-loopback bits say (mlx5_ib_enable_lb counts no RC QPs, and they start disabled).
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let mut cq_1 = h.create_cq(6);
    let mut cq_2 = h.create_cq(6);
    let mut qp_1 = h.create_rc_qp(&cq_1, 4, 4, None);
    let mut qp_2 = h.create_rc_qp(&cq_2, 4, 4, None);
    h.connect_rc(qp_1.qpn, &RcPath::to(GID_A, MAC_A, qp_2.qpn));
    h.connect_rc(qp_2.qpn, &RcPath::to(GID_A, MAC_A, qp_1.qpn));
    let lkey = h.create_mkey(true, true);
    let src = h.alloc(4096, 64);
    let dst = h.alloc(4096, 64);
    let message: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
    h.write(src, &message);
    h.post_rc_recv(&mut qp_2, dst, 4096, lkey);
    let w = rc_wqe(&qp_1.sq, opcode::SEND, 0, None, None, (src, lkey, 3000));
    h.post(&mut qp_1.sq, &w, false);
    let sent = drain(&h, &mut cq_1);
    assert_eq!(
        sent.len(),
        1,
        "the SEND completes: its ACKs came back inside"
    );
    assert_eq!(cqe_opcode(&sent[0]), CqeOpcode::Req as u8);
    let received = drain(&h, &mut cq_2);
    assert_eq!(received.len(), 1);
    assert_eq!(cqe_opcode(&received[0]), CqeOpcode::RespSend as u8);
    assert_eq!(h.read(dst, 3000), message);

    // RDMA WRITE the other way, into memory a remote-write key covers.
    let rights = RemoteRights {
        write: true,
        ..Default::default()
    };
    let rkey = h.create_remote_mkey(h.pd, IOVA_BASE, MEM as u64, rights, 0x5a);
    let target = h.alloc(4096, 64);
    let w = rc_wqe(
        &qp_2.sq,
        opcode::RDMA_WRITE,
        0,
        Some((target, rkey)),
        None,
        (dst, lkey, 3000),
    );
    h.post(&mut qp_2.sq, &w, false);
    let written = drain(&h, &mut cq_2);
    assert_eq!(written.len(), 1);
    assert_eq!(cqe_opcode(&written[0]), CqeOpcode::Req as u8);
    assert_eq!(h.read(target, 3000), message);

    assert!(
        take_frames(&wire).is_empty(),
        "nothing went out on the cable"
    );
    let counters = h.dev.counters();
    assert!(counters.local_loopback_frames >= 4, "{counters:?}");
    assert_eq!(counters.roce_address_drops, 0);
    assert!(!h.dev.local_loopback_pending());
}

#[test]
fn ud_send_to_a_qp_of_the_same_function_loops_inside() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let mut cq = h.create_cq(6);
    let mut a = h.create_ud_qp(&cq, service_type::UD, 4, 4);
    let mut b = h.create_ud_qp(&cq, service_type::UD, 4, 4);
    h.activate_ud(a.qpn, service_type::UD, UD_QKEY);
    h.activate_ud(b.qpn, service_type::UD, UD_QKEY);
    let lkey = h.create_mkey(true, true);
    let src = h.alloc(4096, 64);
    let dst = h.alloc(4096, 64);
    h.write(src, &[0x5a; 200]);
    h.post_ud_recv(&mut b, dst, 4096, lkey);
    let av = UdAv::to(GID_A, MAC_A, b.qpn, UD_QKEY);
    let w = ud_wqe(&a.sq, opcode::SEND, 0, &av, &[(src, lkey, 200)]);
    h.post(&mut a.sq, &w, false);
    let cqes = drain(&h, &mut cq);
    let kinds: Vec<u8> = cqes.iter().map(|c| cqe_opcode(c)).collect();
    assert!(kinds.contains(&(CqeOpcode::Req as u8)), "{kinds:?}");
    assert!(kinds.contains(&(CqeOpcode::RespSend as u8)), "{kinds:?}");
    // The receive buffer holds the 40-byte GRH first, then the payload.
    assert_eq!(h.read(dst + 40, 200), vec![0x5a; 200]);
    assert!(
        take_frames(&wire).is_empty(),
        "nothing went out on the cable"
    );
}

/// An SQ of `h` on a TIS of transport domain `td` sending `frame`, completed.
fn send_frame_in(h: &mut Host, td: u32, frame: &[u8]) {
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    let tisn = h.create_tis_in(td);
    let mut sq = h.create_sq(cq.cqn, tisn, 6);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&sq, frame, payload, key, true);
    h.post(&mut sq, &wqe, false);
    let cqe = h.poll_cq(&mut cq).expect("send completion");
    assert_eq!(cqe_opcode(&cqe), CqeOpcode::Req as u8);
}

/// An SQ of `h` (through a TIS of its own transport domain, as mlx5e's) sending `frame`.
fn send_frame(h: &mut Host, frame: &[u8]) {
    let td = h.td;
    send_frame_in(h, td, frame);
}

/// `mlx5e_modify_tirs_lb(mdev, enable_uc_lb, enable_mc_lb)` on one TIR: MODIFY_TIR with the
/// `self_lb_en` bitmask and the bits set for what is enabled.
fn modify_tir_lb(h: &mut Host, tirn: u32, enable_uc_lb: bool, enable_mc_lb: bool) {
    let mut bits = 0;
    if enable_uc_lb {
        bits |= SELF_LB_BLOCK_UNICAST;
    }
    if enable_mc_lb {
        bits |= SELF_LB_BLOCK_MULTICAST;
    }
    let mut input = Host::input(Opcode::ModifyTir, 0, ModifyTirIn::<&[u8]>::SIZE);
    {
        let mut cmd = ModifyTirIn::new(&mut input[..]).expect("layout");
        cmd.set_tirn(tirn);
        cmd.bitmask_mut().set_self_lb_en(true);
        cmd.ctx_mut().set_self_lb_block(bits);
    }
    h.exec(&input, 16).expect("MODIFY_TIR self_lb_en");
}

#[test]
fn mlx5e_self_test_own_unicast_loops_only_with_vport_local_lb_and_the_tirs_allow_bit() {
    // mlx5e's TIS and TIR share its one transport domain: its own frames coming back are
    // self loopback, taken only where the TIR's self_lb_block bit allows them.
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let mut cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let tirn = h.steer_all_to(rq.rqn);
    let key = h.create_mkey(true, true);
    for _ in 0..4 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    let mut frame = udp_frame(100, 5);
    frame[..6].copy_from_slice(&MAC_A);

    // Power-on: local loopback disabled (mlx5_ib's lb state starts disabled): the frame
    // to the function's own MAC leaves on the cable.
    send_frame(&mut h, &frame);
    assert_eq!(take_frames(&wire), vec![frame.clone()]);
    assert!(h.poll_cq(&mut cq).is_none());

    // Local loopback enabled (mlx5e_test_loopback_setup's mlx5_nic_vport_update_local_lb):
    // the frame stays inside, but the TIR of the sender's own transport domain, bits 0 (as
    // mlx5e runs normally), does not take it.
    h.update_local_lb(true);
    let drops = h.dev.counters().rx_steer_drops;
    send_frame(&mut h, &frame);
    assert!(take_frames(&wire).is_empty(), "looped inside");
    assert!(h.poll_cq(&mut cq).is_none(), "self loopback not allowed");
    assert_eq!(h.dev.counters().rx_steer_drops, drops + 1);

    // mlx5e_modify_tirs_lb(mdev, true, false), as the self-test does: BLOCK_UNICAST set, and
    // the test packet comes back.
    modify_tir_lb(&mut h, tirn, true, false);
    send_frame(&mut h, &frame);
    let cqe = h.poll_cq(&mut cq).expect("self loopback allowed");
    assert_eq!(cqe_opcode(&cqe), CqeOpcode::RespSend as u8);
    assert!(take_frames(&wire).is_empty());

    // A broadcast leaves on the cable and its looped copy is multicast self loopback, which
    // only BLOCK_MULTICAST allows.
    let mut broadcast = frame.clone();
    broadcast[..6].copy_from_slice(&[0xff; 6]);
    send_frame(&mut h, &broadcast);
    assert_eq!(take_frames(&wire), vec![broadcast.clone()]);
    assert!(
        h.poll_cq(&mut cq).is_none(),
        "multicast self loopback not allowed"
    );
    modify_tir_lb(&mut h, tirn, true, true);
    send_frame(&mut h, &broadcast);
    assert_eq!(take_frames(&wire), vec![broadcast]);
    assert!(
        h.poll_cq(&mut cq).is_some(),
        "multicast self loopback allowed"
    );

    // mlx5e_test_loopback_cleanup: the bits cleared, the vport's loopback off again; the
    // frame leaves on the cable.
    modify_tir_lb(&mut h, tirn, false, false);
    h.update_local_lb(false);
    send_frame(&mut h, &frame);
    assert_eq!(take_frames(&wire), vec![frame]);
    assert!(h.poll_cq(&mut cq).is_none());
}

/// An RQ with four posted 2 KiB buffers behind a direct TIR of transport domain `td` with
/// `self_lb_block`, every frame steered to it; its CQ and the RQ.
fn receiving_tir(h: &mut Host, td: u32, self_lb_block: u8) -> (Cq, Rq) {
    let cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let tirn = h.create_direct_tir(rq.rqn, td, self_lb_block);
    h.steer_to_tir(tirn);
    let key = h.create_mkey(true, true);
    for _ in 0..4 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    (cq, rq)
}

#[test]
fn a_raw_packet_tir_of_another_transport_domain_takes_mlx5e_frames_to_the_own_mac() {
    // A user context's raw packet QP: its TIR is in the context's own transport domain
    // (mlx5_ib_alloc_transport_domain, counted by mlx5_ib_enable_lb), self_lb_block 0. The
    // frames mlx5e sends to the function's MAC, through a TIS of mlx5e's transport domain,
    // are not self loopback for it: they reach it when the vport allows local loopback.
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let user_td = h.alloc_transport_domain();
    let (mut cq, _rq) = receiving_tir(&mut h, user_td, 0);
    let mut frame = udp_frame(100, 5);
    frame[..6].copy_from_slice(&MAC_A);

    // mlx5_ib_enable_lb: the second user transport domain enables local loopback.
    h.update_local_lb(true);
    send_frame(&mut h, &frame);
    let cqe = h
        .poll_cq(&mut cq)
        .expect("received from another transport domain");
    assert_eq!(cqe_opcode(&cqe), CqeOpcode::RespSend as u8);
    assert!(take_frames(&wire).is_empty(), "looped inside");

    // The same frame sent through a TIS of the TIR's own transport domain is self loopback:
    // not taken with the TIR's bits 0.
    send_frame_in(&mut h, user_td, &frame);
    assert!(h.poll_cq(&mut cq).is_none(), "self loopback not allowed");
    assert!(take_frames(&wire).is_empty());

    // disable_uc_local_lb set (mlx5_ib_disable_lb): mlx5e's frame leaves on the cable and
    // the raw packet QP does not see it.
    h.update_local_lb(false);
    send_frame(&mut h, &frame);
    assert_eq!(take_frames(&wire), vec![frame]);
    assert!(h.poll_cq(&mut cq).is_none());
}

#[test]
fn a_devx_tir_without_a_transport_domain_takes_frames_and_blocks_no_self_loopback() {
    // rdma-core's test_mlx5_dr (Mlx5DrTirResources.create_qps) creates its TIR through DEVX
    // with only `inline_rqn` set: transport domain 0, which ALLOC_TRANSPORT_DOMAIN never
    // returns. The test expects the TIR, and a root rule's DEST_TIR to it, to work. Such a
    // TIR belongs to no domain, so no SQ's frame is self loopback for it.
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let (mut cq, rq) = receiving_tir(&mut h, 0, SELF_LB_BLOCK_UNICAST | SELF_LB_BLOCK_MULTICAST);
    let mut frame = udp_frame(100, 9);
    frame[..6].copy_from_slice(&MAC_A);
    h.update_local_lb(true);
    send_frame(&mut h, &frame);
    let cqe = h.poll_cq(&mut cq).expect("received despite self_lb_block");
    assert_eq!(cqe_opcode(&cqe), CqeOpcode::RespSend as u8);
    assert!(take_frames(&wire).is_empty(), "looped inside");
    // A domain that does not exist is still refused.
    let mut input = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut input[..])
        .expect("layout")
        .ctx_mut()
        .set_inline_rqn(rq.rqn)
        .set_transport_domain(0xbeef);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
}

/// The frames an RC QP of a second function at GID_B/MAC_B sends along `path` for one SEND
/// of 64 bytes.
fn frames_along(path: RcPath) -> Vec<Vec<u8>> {
    let cfg = EmuConfig {
        mac: MAC_B,
        ..EmuConfig::default()
    };
    let (mut b, wire) = lone_host(cfg, MEM, GID_B, MAC_B);
    let cq = b.create_cq(6);
    let mut qp = b.create_rc_qp(&cq, 4, 4, None);
    b.connect_rc(qp.qpn, &path);
    let lkey = b.create_mkey(true, true);
    let src = b.alloc(4096, 64);
    b.write(src, &[0xa5; 64]);
    let w = rc_wqe(&qp.sq, opcode::SEND, 0, None, None, (src, lkey, 64));
    b.post(&mut qp.sq, &w, false);
    take_frames(&wire)
}

#[test]
fn roce_for_another_mac_or_ip_is_dropped_and_counted_not_delivered() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let mut cq = h.create_cq(6);
    let mut qp = h.create_rc_qp(&cq, 4, 4, None);
    h.connect_rc(qp.qpn, &RcPath::to(GID_B, MAC_B, 0x77));
    let lkey = h.create_mkey(true, true);
    let dst = h.alloc(4096, 64);
    h.post_rc_recv(&mut qp, dst, 4096, lkey);
    let other_gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 9];
    let wrong_mac = frames_along(RcPath::to(GID_A, [0x02, 0xcd, 0, 0, 0, 9], qp.qpn));
    let wrong_ip = frames_along(RcPath::to(other_gid, MAC_A, qp.qpn));
    let right = frames_along(RcPath::to(GID_A, MAC_A, qp.qpn));
    for (n, frames) in [wrong_mac, wrong_ip].iter().enumerate() {
        assert_eq!(frames.len(), 1);
        wire.transmit(PortId::B, &frames[0]).expect("transmit");
        h.dev.poll();
        assert!(h.poll_cq(&mut cq).is_none(), "not delivered");
        let counters = h.dev.counters();
        assert_eq!(counters.roce_address_drops, n as u64 + 1, "counted");
        assert_eq!(counters.roce_acks_sent, 0, "not answered");
    }
    assert!(take_frames(&wire).is_empty(), "nothing answered");
    // The same SEND addressed to the function is taken (PSN 0 still expected).
    wire.transmit(PortId::B, &right[0]).expect("transmit");
    h.dev.poll();
    let cqe = h.poll_cq(&mut cq).expect("delivered");
    assert_eq!(cqe_opcode(&cqe), CqeOpcode::RespSend as u8);
    assert_eq!(h.read(dst, 64), vec![0xa5; 64]);
    assert_eq!(h.dev.counters().roce_address_drops, 2);
}

#[test]
fn the_general_caps_advertise_both_vport_local_loopback_disables() {
    // mlx5_nic_vport_update_local_lb (vport.c) selects disable_uc_local_lb /
    // disable_mc_local_lb only for the caps advertised, and mlx5_ib_alloc_transport_domain
    // (main.c) counts user transport domains for mlx5_ib_enable_lb only when one is.
    let (mut h, _wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let caps = h.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let caps = cxdirect_hw::caps::CmdHcaCap::new(&caps[0x10..]).expect("layout");
    assert!(caps.disable_local_lb_uc());
    assert!(caps.disable_local_lb_mc());
}
