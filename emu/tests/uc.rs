//! UC (unreliable connection) QPs as Linux's mlx5_ib creates and moves them
//! (`create_qp_common` with `MLX5_QP_ST_UC`; `__mlx5_ib_modify_qp` with the UC rows of
//! `opt_mask`) and as libmlx5 posts to them (`_mlx5_post_send`: SEND, SEND with immediate,
//! RDMA WRITE, RDMA WRITE with immediate). The requester completes a WQE once its last packet
//! is out, with no acknowledgement; the responder takes SENDs and WRITEs without answering,
//! and a lost packet loses just its message (IBA 9.7.5.2).

use cxdirect_emu::testkit::rc::{RcQp, RemoteRights, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::{Cq, Host, IOVA_BASE};
use cxdirect_emu::wire::{Impairments, PortId, Wire, WireConfig};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::qp::{mtu, service_type, QueryQpIn, QueryQpOut};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, RaddrSeg};
use std::sync::Arc;

const MEM: usize = 4 << 20;
const MTU: usize = 1024;

struct UcPair {
    a: Host,
    b: Host,
    cq_a: Cq,
    cq_b: Cq,
    qp_a: RcQp,
    qp_b: RcQp,
    wire: Arc<Wire>,
}

/// The transitions mlx5_ib sends for `ibv_modify_qp` on a UC QP as `ibv_uc_pingpong` moves it:
/// RST2INIT with port and access flags (remote write only), INIT2RTR with path MTU, peer QP,
/// receive PSN and address vector, RTR2RTS with the send PSN (no retry counts, timeout or
/// RNR timer: UC has none).
fn connect_uc(h: &mut Host, qpn: u32, remote_qpn: u32, gid: [u8; 16], mac: [u8; 6], psn: u32) {
    h.modify_qp(Opcode::Rst2initQp, qpn, |c| {
        c.set_rwe(true);
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    h.modify_qp(Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(mtu::MTU_1024)
            .set_log_msg_max(30)
            .set_remote_qpn(remote_qpn)
            .set_next_rcv_psn(psn);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_src_addr_index(0)
            .set_rgid(gid)
            .set_rmac(mac)
            .set_udp_sport(0xc000)
            .set_hop_limit(64);
    });
    h.modify_qp(Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_next_send_psn(psn);
    });
}

fn pair(impairments: Impairments) -> UcPair {
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let da = Device::new(cfg(MAC_A));
    let db = Device::new(cfg(MAC_B));
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            fifo_capacity: 4096,
            impairments,
        })
        .expect("valid impairments"),
    );
    da.attach(wire.clone(), PortId::A, &[&db]);
    db.attach(wire.clone(), PortId::B, &[&da]);
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.bring_up();
    b.bring_up();
    a.enable_roce(GID_A, MAC_A);
    b.enable_roce(GID_B, MAC_B);
    let cq_a = a.create_cq(6);
    let cq_b = b.create_cq(6);
    let qp_a = a.create_connected_qp(service_type::UC, &cq_a, 5, 5, None);
    let qp_b = b.create_connected_qp(service_type::UC, &cq_b, 5, 5, None);
    connect_uc(&mut a, qp_a.qpn, qp_b.qpn, GID_B, MAC_B, 0x00ff_fff0);
    connect_uc(&mut b, qp_b.qpn, qp_a.qpn, GID_A, MAC_A, 0x00ff_fff0);
    UcPair {
        a,
        b,
        cq_a,
        cq_b,
        qp_a,
        qp_b,
        wire,
    }
}

fn settle(p: &UcPair) {
    for _ in 0..6 {
        p.b.dev.poll();
        p.a.dev.poll();
    }
}

fn all_key(h: &mut Host) -> u32 {
    let rights = RemoteRights {
        read: true,
        write: true,
        atomic: false,
    };
    h.create_remote_mkey(h.pd, IOVA_BASE, MEM as u64, rights, 0x33)
}

/// A libmlx5 WQE: control segment (`op`, signaled, `imm` in big-endian order as
/// `send_imm` puts it), a remote address segment for WRITE and READ, one data segment.
fn wqe(qp: &RcQp, op: u8, imm: u32, remote: Option<(u64, u32)>, local: (u64, u32, u32)) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    let mut at = 16;
    if let Some((va, rkey)) = remote {
        RaddrSeg::new(&mut w[at..at + 16])
            .unwrap()
            .set_raddr(va)
            .set_rkey(rkey);
        at += 16;
    }
    DataSeg::new(&mut w[at..at + 16])
        .unwrap()
        .set_addr(local.0)
        .set_lkey(local.1)
        .set_byte_count(local.2);
    at += 16;
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(op)
        .set_wqe_index(qp.sq.pi)
        .set_qpn_or_sqn(qp.qpn)
        .set_ds((at / 16) as u8)
        .set_ce(2)
        .set_imm(imm);
    w
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

fn byte_cnt(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x2c..0x30].try_into().unwrap())
}

fn wqe_counter(cqe: &[u8]) -> u16 {
    u16::from_be_bytes([cqe[0x3c], cqe[0x3d]])
}

fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qpn);
    let out = h.exec(&input, 0x110 + 0x800).expect("QUERY_QP");
    QueryQpOut::new(&out[..]).unwrap().qpc().state()
}

/// `ibv_uc_pingpong` / `ib_send_bw -c UC` and `ib_write_bw -c UC`: a three-packet SEND, a
/// SEND with immediate, a two-packet RDMA WRITE and an RDMA WRITE with immediate between two
/// functions. Each send completes at A with nothing coming back from B (UC has no ACK: B puts
/// no frame on the wire), and B completes the SENDs and the WRITE with immediate in its
/// receive queue.
#[test]
fn uc_send_and_write_with_immediate_complete_without_acknowledgement() {
    let mut p = pair(Impairments::NONE);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let rkey_b = all_key(&mut p.b);
    let recv: Vec<u64> = (0..3).map(|_| p.b.alloc(4096, 64)).collect();
    for &r in &recv {
        p.b.post_rc_recv(&mut p.qp_b, r, 4096, lkey_b);
    }
    let target = p.b.alloc(4096, 64);
    let messages = [
        (opcode::SEND, 0, 3 * MTU - 100, None),
        (opcode::SEND_IMM, 0x1122_3344, 64, None),
        (opcode::RDMA_WRITE, 0, 2 * MTU, Some((target, rkey_b))),
        (
            opcode::RDMA_WRITE_IMM,
            0x5566_7788,
            100,
            Some((target + 2048, rkey_b)),
        ),
    ];
    let mut sent = Vec::new();
    for (i, &(op, imm, len, remote)) in messages.iter().enumerate() {
        let data = pattern(len, i as u8);
        let at = p.a.alloc(len as u64, 64);
        p.a.write(at, &data);
        let w = wqe(&p.qp_a, op, imm, remote, (at, lkey_a, len as u32));
        p.a.post(&mut p.qp_a.sq, &w, false);
        sent.push(data);
    }
    settle(&p);
    for i in 0..4u16 {
        let cqe = p.a.poll_cq(&mut p.cq_a).expect("send completion");
        assert_eq!(
            cqe_opcode(&cqe),
            0,
            "requester CQE {i}: {:02x?}",
            &cqe[0x30..]
        );
        assert_eq!(wqe_counter(&cqe), i);
    }
    assert_eq!(
        p.wire.counters(PortId::B).unwrap().tx_frames,
        0,
        "a UC responder sends nothing"
    );
    assert_eq!(p.wire.counters(PortId::A).unwrap().tx_frames, 3 + 1 + 2 + 1);
    // SEND (3 packets), SEND with immediate, WRITE with immediate (consumes a receive WQE).
    let cqe = p.b.poll_cq(&mut p.cq_b).expect("SEND");
    assert_eq!(cqe_opcode(&cqe), 2);
    assert_eq!(byte_cnt(&cqe) as usize, sent[0].len());
    assert_eq!(p.b.read(recv[0], sent[0].len()), sent[0]);
    let cqe = p.b.poll_cq(&mut p.cq_b).expect("SEND with immediate");
    assert_eq!(cqe_opcode(&cqe), 3);
    assert_eq!(
        u32::from_be_bytes(cqe[0x24..0x28].try_into().unwrap()),
        0x1122_3344
    );
    assert_eq!(p.b.read(recv[1], 64), sent[1]);
    let cqe = p.b.poll_cq(&mut p.cq_b).expect("WRITE with immediate");
    assert_eq!(cqe_opcode(&cqe), 1);
    assert_eq!(
        u32::from_be_bytes(cqe[0x24..0x28].try_into().unwrap()),
        0x5566_7788
    );
    assert_eq!(byte_cnt(&cqe), 100);
    assert!(p.b.poll_cq(&mut p.cq_b).is_none());
    assert_eq!(p.b.read(target, 2 * MTU - 1024), sent[2][..1024].to_vec());
    assert_eq!(p.b.read(target + 2048, 100), sent[3]);
    p.a.destroy_qp(p.qp_a.qpn);
    p.b.destroy_qp(p.qp_b.qpn);
    p.a.teardown();
    p.b.teardown();
}

/// A lost MIDDLE packet loses its message and only it (IBA 9.7.5.2: the responder drops the
/// rest of the message and starts again at the next FIRST or ONLY packet, whatever its PSN).
/// A's 5th frame is dropped: the middle of the 4th SEND. The receive WQE it had begun is
/// taken by the next SEND; A completes all six.
#[test]
fn a_lost_middle_packet_drops_only_its_message() {
    let mut p = pair(Impairments {
        drop_every: 5,
        ..Impairments::NONE
    });
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let recv: Vec<u64> = (0..6).map(|_| p.b.alloc(4096, 64)).collect();
    for &r in &recv {
        p.b.post_rc_recv(&mut p.qp_b, r, 4096, lkey_b);
    }
    let lens = [100, 200, 300, 3 * MTU - 1, 400, 500];
    let mut sent = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let data = pattern(len, 0x40 + i as u8);
        let at = p.a.alloc(len as u64, 64);
        p.a.write(at, &data);
        let w = wqe(&p.qp_a, opcode::SEND, 0, None, (at, lkey_a, len as u32));
        p.a.post(&mut p.qp_a.sq, &w, false);
        sent.push(data);
    }
    settle(&p);
    for i in 0..6u16 {
        let cqe = p.a.poll_cq(&mut p.cq_a).expect("send completion");
        assert_eq!(cqe_opcode(&cqe), 0);
        assert_eq!(wqe_counter(&cqe), i);
    }
    let expected = [0usize, 1, 2, 4, 5];
    for (slot, &message) in expected.iter().enumerate() {
        let cqe = p.b.poll_cq(&mut p.cq_b).expect("receive");
        assert_eq!(cqe_opcode(&cqe), 2, "{:02x?}", &cqe[0x30..]);
        assert_eq!(
            wqe_counter(&cqe),
            slot as u16,
            "receive WQEs taken in order"
        );
        assert_eq!(byte_cnt(&cqe) as usize, sent[message].len());
        assert_eq!(p.b.read(recv[slot], sent[message].len()), sent[message]);
    }
    assert!(
        p.b.poll_cq(&mut p.cq_b).is_none(),
        "the lost message completes nothing"
    );
    // The QP stays in RTS (3): nothing was an error.
    assert_eq!(qp_state(&mut p.b, p.qp_b.qpn), 3);
}

/// UC carries no RDMA READ (IBA table 38): a READ posted on a UC QP completes with a local QP
/// operation error (CQE syndrome 0x02, `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`, which mlx5_ib
/// reports as `IB_WC_LOC_QP_OP_ERR`), nothing is sent, and the QP goes to error.
#[test]
fn an_rdma_read_on_uc_completes_in_error() {
    let mut p = pair(Impairments::NONE);
    let lkey_a = p.a.create_mkey(false, true);
    let rkey_b = all_key(&mut p.b);
    let local = p.a.alloc(64, 64);
    let remote = p.b.alloc(64, 64);
    let w = wqe(
        &p.qp_a,
        opcode::RDMA_READ,
        0,
        Some((remote, rkey_b)),
        (local, lkey_a, 64),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    settle(&p);
    let cqe = p.a.poll_cq(&mut p.cq_a).expect("error completion");
    assert_eq!(cqe_opcode(&cqe), 0xd, "requester error CQE");
    assert_eq!(cqe[0x37], 0x02, "local QP operation error");
    assert_eq!(p.wire.counters(PortId::A).unwrap().tx_frames, 0);
    assert_eq!(qp_state(&mut p.a, p.qp_a.qpn), 6, "QP in error");
}
