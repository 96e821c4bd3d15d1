//! RoCE multicast as Linux drives it: rdma_cm's multicast join (`rdma_join_multicast`, what
//! rdmacm-utils' `mckey` does on both ends) attaches the UD QP to the group's GID by
//! ATTACH_TO_MCG (`mlx5_ib_mcg_attach` → `mlx5_cmd_attach_mcg`); the sender sends to the
//! multicast QP (`IB_MULTICAST_QPN`, the remote QPN rdma_cm's join event gives) at the
//! group's address and MAC (`ip_eth_mc_map`: 01:00:5e and the address's low 23 bits). The
//! device delivers a copy to every QP of the function attached to the group, loops a copy to
//! the sending function's own members (except the sender itself when it was created with
//! `block_lb_mc`, mlx5_ib's IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK in `create_qp_common`), and
//! counts datagrams to a group no QP joined.
//!
//! Also here: the DETH source QP of a UD QP created with `deth_sqpn` (mlx5_ib's GSI transmit
//! QPs, `create_gsi_ud_qp` in gsi.c).

use cxdirect_emu::testkit::rc::{lone_host, take_frames, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdPair, UdQp, QP1_QKEY, UD_QKEY};
use cxdirect_emu::testkit::{CmdFail, Cq, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode};
use cxdirect_hw::qp::service_type;
use cxdirect_hw::wqe::opcode;

const MEM: usize = 8 << 20;
/// rdma_cm's group GID for 239.1.1.1 (`cma_iboe_set_mgid`: the IPv4-mapped address).
const MGID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 1, 1];
/// Its MAC (`ip_eth_mc_map`).
const MMAC: [u8; 6] = [0x01, 0x00, 0x5e, 0x01, 0x01, 0x01];
/// An IPv6 group, ff0e::1:2, and its MAC (`ipv6_eth_mc_map`: 33:33 and the low 32 bits).
const MGID6: [u8; 16] = [0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2];
const MMAC6: [u8; 6] = [0x33, 0x33, 0, 1, 0, 2];
/// The destination QP of every multicast send (`IB_MULTICAST_QPN`).
const MULTICAST_QPN: u32 = 0x00ff_ffff;

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// A UD QP in RTS with Q_Key [`UD_QKEY`] completing on `cq`, created with `block_lb_mc`
/// when `block` is set.
fn ud_qp(h: &mut Host, cq: &Cq, block: bool) -> UdQp {
    let qp = h
        .try_create_ud_qp(cq, service_type::UD, 4, 4, |c| {
            c.set_block_lb_mc(block);
        })
        .expect("CREATE_QP");
    h.activate_ud(qp.qpn, service_type::UD, UD_QKEY);
    qp
}

/// Posts one 1 KiB receive on `qp`; returns the buffer.
fn post_recv(h: &mut Host, qp: &mut UdQp, lkey: u32) -> u64 {
    let buf = h.alloc(4096, 64);
    h.post_ud_recv(qp, buf, 1024, lkey);
    buf
}

/// `mckey`'s send (`post_sends`): SEND with immediate (the sender's QPN) of `len` bytes of
/// 0x5a from `qp` to the group of `dgid` at `rmac`, to the multicast QP.
fn send_to_group(h: &mut Host, qp: &mut UdQp, lkey: u32, dgid: [u8; 16], rmac: [u8; 6], len: u32) {
    let src = h.alloc(4096, 64);
    h.write(src, &vec![0x5a; len as usize]);
    let av = UdAv::to(dgid, rmac, MULTICAST_QPN, UD_QKEY);
    let w = ud_wqe(&qp.sq, opcode::SEND_IMM, qp.qpn, &av, &[(src, lkey, len)]);
    h.post(&mut qp.sq, &w, false);
}

/// The responder CQEs among `cqes`, as (local QP, source QP, immediate).
fn received(cqes: &[Vec<u8>]) -> Vec<(u32, u32, u32)> {
    cqes.iter()
        .filter(|c| c[63] >> 4 == CqeOpcode::RespSendImm as u8)
        .map(|c| {
            let cqe = Cqe64::new(&c[..]).unwrap();
            let imm = u32::from_be_bytes([c[36], c[37], c[38], c[39]]);
            (cqe.qpn(), cqe.flags_rqpn() & 0xff_ffff, imm)
        })
        .collect()
}

fn mcg_refused() -> CmdFail {
    CmdFail::status(CmdStatus::BadParameter, Syndrome::BadMcgParams)
}

#[test]
fn mckey_from_the_other_function_reaches_every_qp_attached_to_the_group_each_its_copy() {
    let mut p = UdPair::new(EmuConfig::default(), MEM, 6, 4, 4);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let mut second = ud_qp(&mut p.b, &p.cq_b, false);
    let mut outsider = ud_qp(&mut p.b, &p.cq_b, false);
    // rdma_join_multicast on B (twice: two receivers) and on A (mckey's sender joins too).
    p.b.attach_mcg(p.ud_b.qpn, MGID).expect("ATTACH_TO_MCG");
    p.b.attach_mcg(second.qpn, MGID).expect("ATTACH_TO_MCG");
    p.a.attach_mcg(p.ud_a.qpn, MGID).expect("ATTACH_TO_MCG");
    let first_buf = post_recv(&mut p.b, &mut p.ud_b, lkey_b);
    let second_buf = post_recv(&mut p.b, &mut second, lkey_b);
    let outsider_buf = post_recv(&mut p.b, &mut outsider, lkey_b);
    send_to_group(&mut p.a, &mut p.ud_a, lkey_a, MGID, MMAC, 100);
    let sender = p.ud_a.qpn;
    p.settle();
    let got = received(&drain(&p.b, &mut p.cq_b));
    assert_eq!(
        got,
        vec![(p.ud_b.qpn, sender, sender), (second.qpn, sender, sender)],
        "one copy per attached QP, in the order they joined"
    );
    for buf in [first_buf, second_buf] {
        assert_eq!(p.b.read(buf + 40, 100), vec![0x5a; 100]);
        // The GRH area carries the IPv4 header: destination 239.1.1.1.
        assert_eq!(p.b.read(buf + 36, 4), vec![239, 1, 1, 1]);
    }
    assert_eq!(p.b.read(outsider_buf + 40, 100), vec![0; 100]);
    assert_eq!(p.b.dev.counters().ud_delivered, 2);
    assert_eq!(p.b.dev.counters().ud_mcast_no_group_drops, 0);
    // The sender's own membership holds no receive: its looped copy found none.
    assert_eq!(p.a.dev.counters().ud_no_receive_drops, 1);
    p.b.destroy_qp(second.qpn);
    p.b.destroy_qp(outsider.qpn);
    p.teardown();
}

#[test]
fn an_ipv6_group_is_found_by_its_ipv6_destination_address() {
    let mut p = UdPair::new(EmuConfig::default(), MEM, 6, 4, 4);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    p.b.attach_mcg(p.ud_b.qpn, MGID6).expect("ATTACH_TO_MCG");
    let buf = post_recv(&mut p.b, &mut p.ud_b, lkey_b);
    send_to_group(&mut p.a, &mut p.ud_a, lkey_a, MGID6, MMAC6, 64);
    p.settle();
    let got = received(&drain(&p.b, &mut p.cq_b));
    assert_eq!(got, vec![(p.ud_b.qpn, p.ud_a.qpn, p.ud_a.qpn)]);
    let cqe = drain(&p.b, &mut p.cq_b);
    assert!(cqe.is_empty());
    // IPv6: the GRH area is the packet's IPv6 header, destination the group.
    assert_eq!(p.b.read(buf + 24, 16), MGID6.to_vec());
    p.teardown();
}

#[test]
fn a_datagram_to_a_group_no_qp_joined_is_counted_and_dropped() {
    let mut p = UdPair::new(EmuConfig::default(), MEM, 6, 4, 4);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let buf = post_recv(&mut p.b, &mut p.ud_b, lkey_b);
    send_to_group(&mut p.a, &mut p.ud_a, lkey_a, MGID, MMAC, 32);
    p.settle();
    assert!(received(&drain(&p.b, &mut p.cq_b)).is_empty());
    assert_eq!(p.b.dev.counters().ud_mcast_no_group_drops, 1);
    // Joined, then left (`mlx5_ib_mcg_detach`, rdma_leave_multicast): dropped again.
    p.b.attach_mcg(p.ud_b.qpn, MGID).expect("ATTACH_TO_MCG");
    p.b.detach_mcg(p.ud_b.qpn, MGID).expect("DETACH_FROM_MCG");
    send_to_group(&mut p.a, &mut p.ud_a, lkey_a, MGID, MMAC, 32);
    p.settle();
    assert!(received(&drain(&p.b, &mut p.cq_b)).is_empty());
    assert_eq!(p.b.dev.counters().ud_mcast_no_group_drops, 2);
    assert_eq!(p.b.read(buf + 40, 32), vec![0; 32]);
    // A unicast UD send to the multicast QP number names no QP.
    let av = UdAv::to(GID_B, MAC_B, MULTICAST_QPN, UD_QKEY);
    let src = p.a.alloc(64, 64);
    let w = ud_wqe(&p.ud_a.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 8)]);
    p.a.post(&mut p.ud_a.sq, &w, false);
    p.settle();
    assert!(received(&drain(&p.b, &mut p.cq_b)).is_empty());
    p.teardown();
}

#[test]
fn a_group_s_datagram_loops_to_the_sending_function_s_members_and_leaves_on_the_cable() {
    // Both ends of mckey on one RDMA device: a receiver and a sender, both joined.
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let mut cq = h.create_cq(6);
    let lkey = h.create_mkey(true, true);
    let mut receiver = ud_qp(&mut h, &cq, false);
    let mut sender = ud_qp(&mut h, &cq, false);
    h.attach_mcg(receiver.qpn, MGID).expect("ATTACH_TO_MCG");
    h.attach_mcg(sender.qpn, MGID).expect("ATTACH_TO_MCG");
    let receiver_buf = post_recv(&mut h, &mut receiver, lkey);
    let sender_buf = post_recv(&mut h, &mut sender, lkey);
    send_to_group(&mut h, &mut sender, lkey, MGID, MMAC, 80);
    let got = received(&drain(&h, &mut cq));
    // Without block_lb_mc the sender is a member like any other: it gets its copy too.
    assert_eq!(
        got,
        vec![
            (receiver.qpn, sender.qpn, sender.qpn),
            (sender.qpn, sender.qpn, sender.qpn)
        ]
    );
    assert_eq!(h.read(receiver_buf + 40, 80), vec![0x5a; 80]);
    assert_eq!(h.read(sender_buf + 40, 80), vec![0x5a; 80]);
    let frames = take_frames(&wire);
    assert_eq!(frames.len(), 1, "the datagram also left on the cable");
    assert_eq!(&frames[0][..6], &MMAC, "to the group's MAC");
    assert_eq!(
        &frames[0][30..34],
        &[239, 1, 1, 1],
        "to the group's address"
    );
    h.destroy_qp(receiver.qpn);
    h.destroy_qp(sender.qpn);
}

#[test]
fn a_sender_created_with_block_lb_mc_misses_only_its_own_datagrams() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let mut cq = h.create_cq(6);
    let lkey = h.create_mkey(true, true);
    let mut receiver = ud_qp(&mut h, &cq, false);
    let mut sender = ud_qp(&mut h, &cq, true);
    h.attach_mcg(receiver.qpn, MGID).expect("ATTACH_TO_MCG");
    h.attach_mcg(sender.qpn, MGID).expect("ATTACH_TO_MCG");
    post_recv(&mut h, &mut receiver, lkey);
    let sender_buf = post_recv(&mut h, &mut sender, lkey);
    send_to_group(&mut h, &mut sender, lkey, MGID, MMAC, 40);
    let got = received(&drain(&h, &mut cq));
    assert_eq!(got, vec![(receiver.qpn, sender.qpn, sender.qpn)]);
    assert_eq!(h.read(sender_buf + 40, 40), vec![0; 40]);
    assert_eq!(h.dev.counters().ud_mcast_loopback_blocked, 1);
    // The blocking QP still takes the group's datagrams from other QPs.
    send_to_group(&mut h, &mut receiver, lkey, MGID, MMAC, 40);
    let got = received(&drain(&h, &mut cq));
    assert!(
        got.contains(&(sender.qpn, receiver.qpn, receiver.qpn)),
        "{got:?}"
    );
    assert_eq!(take_frames(&wire).len(), 2);
}

#[test]
fn a_function_with_no_member_sends_group_datagrams_to_the_cable_only() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let cq = h.create_cq(6);
    let lkey = h.create_mkey(true, true);
    let mut sender = ud_qp(&mut h, &cq, false);
    send_to_group(&mut h, &mut sender, lkey, MGID, MMAC, 16);
    h.dev.poll();
    assert_eq!(take_frames(&wire).len(), 1);
    let counters = h.dev.counters();
    assert_eq!(counters.local_loopback_frames, 0);
    assert_eq!(counters.ud_mcast_no_group_drops, 0);
}

#[test]
fn attach_takes_ud_qps_and_multicast_gids_only_and_detach_only_members() {
    let (mut h, _wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let cq = h.create_cq(6);
    let ud = ud_qp(&mut h, &cq, false);
    let gsi = h.create_ud_qp(&cq, service_type::QP1, 4, 4);
    // ib_attach_mcast takes UD QPs only; rdma_is_multicast_addr GIDs only.
    assert_eq!(h.attach_mcg(gsi.qpn, MGID), Err(mcg_refused()));
    assert_eq!(h.attach_mcg(ud.qpn, GID_B), Err(mcg_refused()));
    assert_eq!(
        h.attach_mcg(0x00ab_cdef, MGID),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    assert_eq!(h.detach_mcg(ud.qpn, MGID), Err(mcg_refused()));
    h.attach_mcg(ud.qpn, MGID).expect("ATTACH_TO_MCG");
    h.attach_mcg(ud.qpn, MGID)
        .expect("a second attach changes nothing");
    h.detach_mcg(ud.qpn, MGID).expect("DETACH_FROM_MCG");
    assert_eq!(h.detach_mcg(ud.qpn, MGID), Err(mcg_refused()));
    // A destroyed QP leaves its groups: a later datagram finds none.
    h.attach_mcg(ud.qpn, MGID).expect("ATTACH_TO_MCG");
    h.destroy_qp(ud.qpn);
    let mut sender = ud_qp(&mut h, &cq, false);
    let lkey = h.create_mkey(true, true);
    send_to_group(&mut h, &mut sender, lkey, MGID, MMAC, 16);
    h.dev.poll();
    assert_eq!(h.dev.counters().local_loopback_frames, 0);
}

#[test]
fn the_general_caps_advertise_groups_their_size_the_loopback_block_and_set_deth_sqpn() {
    // mlx5_ib_query_device: max_mcast_grp = 1 << log_max_mcg, max_mcast_qp_attach =
    // max_qp_mcg, IB_DEVICE_BLOCK_MULTICAST_LOOPBACK from block_lb_mc; gsi.c reads
    // set_deth_sqpn.
    let (mut h, _wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let caps = h.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let caps = cxdirect_hw::caps::CmdHcaCap::new(&caps[0x10..]).expect("layout");
    assert!(caps.log_max_mcg() > 0);
    assert!(caps.max_qp_mcg() > 1);
    assert!(caps.block_lb_mc());
    assert!(caps.set_deth_sqpn());
}

#[test]
fn a_ud_qp_created_with_deth_sqpn_1_sends_mads_as_qp1() {
    // mlx5_ib's GSI transmit QPs (`create_gsi_ud_qp`, gsi.c) are UD QPs whose context carries
    // deth_sqpn 1 (`create_kernel_qp`, and again at every `__mlx5_ib_modify_qp`); they send
    // MADs to QP 1 with IB_QP1_QKEY, and the receiver sees source QP 1.
    let mut p = UdPair::new(EmuConfig::default(), MEM, 6, 4, 4);
    let cq = p.a.create_cq(6);
    let mut tx =
        p.a.try_create_ud_qp(&cq, service_type::UD, 4, 4, |c| {
            c.set_deth_sqpn(1);
        })
        .expect("CREATE_QP with deth_sqpn");
    p.a.modify_qp(cxdirect_hw::cmd::Opcode::Rst2initQp, tx.qpn, |c| {
        c.set_st(service_type::UD)
            .set_deth_sqpn(1)
            .set_q_key(QP1_QKEY);
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    for op in [
        cxdirect_hw::cmd::Opcode::Init2rtrQp,
        cxdirect_hw::cmd::Opcode::Rtr2rtsQp,
    ] {
        p.a.modify_qp(op, tx.qpn, |c| {
            c.set_st(service_type::UD).set_deth_sqpn(1);
        });
    }
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let buf = p.b.alloc(4096, 64);
    p.b.post_ud_recv(&mut p.gsi_b, buf, 1024, lkey_b);
    let src = p.a.alloc(4096, 64);
    p.a.write(src, &[0x01; 256]);
    let av = UdAv::to(GID_B, MAC_B, 1, QP1_QKEY);
    let w = ud_wqe(&tx.sq, opcode::SEND, 0, &av, &[(src, lkey_a, 256)]);
    p.a.post(&mut tx.sq, &w, false);
    p.settle();
    let cqes = drain(&p.b, &mut p.cq_b);
    assert_eq!(cqes.len(), 1, "the GSI QP took the MAD");
    let c = Cqe64::new(&cqes[0][..]).unwrap();
    assert_eq!(c.qpn(), p.gsi_b.qpn);
    assert_eq!(c.flags_rqpn() & 0xff_ffff, 1, "DETH source QP 1");
    assert_eq!(p.b.read(buf + 40, 256), vec![0x01; 256]);
    // Only UD QPs carry a DETH to set.
    let refused =
        p.a.try_create_ud_qp(&cq, service_type::QP1, 4, 4, |c| {
            c.set_deth_sqpn(1);
        })
        .err();
    assert_eq!(
        refused,
        Some(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadQpParams
        ))
    );
    p.a.destroy_qp(tx.qpn);
    p.teardown();
}
