//! The dynamically connected (DC) transport as Linux 6.12's mlx5_ib creates its objects and
//! rdma-core's libmlx5 drives them (the way perftest's `-c DC` does):
//!
//! - a DCT is created by `ibv_create_qp` with `MLX5DV_QP_INIT_ATTR_MASK_DC` and two
//!   `ibv_modify_qp` calls; mlx5_ib (`create_dct`, `mlx5_ib_modify_dct`) collects its context
//!   and sends CREATE_DCT at INIT to RTR; `ibv_destroy_qp` sends DRAIN_DCT, waits for the
//!   DCT_DRAINED event, then DESTROY_DCT (`_mlx5_core_destroy_dct`);
//! - a DCI is CREATE_QP with service type DCI and no receive queue, taken to RTS by the
//!   transitions `modify_dci_qp_is_ok` allows (INIT2RTR with the path MTU and no destination
//!   QP);
//! - each DCI send WQE carries, after its control segment, the 48-byte address vector
//!   libmlx5's `mlx5_send_wr_set_dc_addr` copies in: the DC access key in the Q_Key's place,
//!   the DCT number with `MLX5_EXTENDED_UD_AV`, the path; then the remote-address and data
//!   segments (`_mlx5_send_wr_rdma` puts the remote-address segment after the DC vector).

mod dc_kit;

use dc_kit::*;

#[test]
fn dc_is_advertised_with_roce_as_mlx5_ib_checks_it() {
    let (mut a, _b, _wire) = hosts();
    let general = a.query_cap(cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).unwrap();
    // `set_mlx_qp_type` / `check_qp_type` refuse DC without `dct`; `validate_rd_atomic`
    // bounds a DCI's READs and atomics in flight by the DC limits.
    assert!(caps.dct());
    assert_eq!(caps.log_max_ra_req_dc(), 4);
    assert_eq!(caps.log_max_ra_res_dc(), 4);
}

#[test]
fn dct_create_query_drain_destroy_as_mlx5_ib_sends_them() {
    let mut r = rig();
    let dctn = r.dcts[0];
    assert_eq!(
        query_dct(&mut r.b, dctn).unwrap(),
        (dct::state::ACTIVE, 0, KEY)
    );
    // `_mlx5_core_destroy_dct`: DRAIN_DCT, the DCT_DRAINED event naming it, DESTROY_DCT.
    r.b.drain_eq();
    drain_dct(&mut r.b, dctn).expect("DRAIN_DCT");
    let events: Vec<_> =
        r.b.drain_eq()
            .into_iter()
            .filter(|e| e.0 == EventType::DctDrained as u8)
            .collect();
    assert_eq!(events.len(), 1, "one DCT_DRAINED event");
    let (kind, _, data) = &events[0];
    assert_eq!(*kind, EventType::DctDrained as u8);
    let at = EQE_DCT_NUMBER_OFFSET;
    let named = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) & 0x00ff_ffff;
    assert_eq!(named, dctn);
    assert_eq!(query_dct(&mut r.b, dctn).unwrap().0, dct::state::DRAINED);
    assert!(drain_dct(&mut r.b, dctn).is_err(), "drained twice");
    destroy_dct(&mut r.b, dctn).expect("DESTROY_DCT");
    assert_eq!(
        query_dct(&mut r.b, dctn).unwrap_err(),
        CmdFail::status(CmdStatus::BadResource, Syndrome::NoSuchObject)
    );
    assert!(destroy_dct(&mut r.b, dctn).is_err(), "destroyed twice");
}

#[test]
fn create_dct_refuses_a_missing_srq_or_cq() {
    let (_a, mut b, _wire) = hosts();
    let cq = b.create_cq(4);
    let (srqn, _) = b.create_rmp(RMP_LOG, 0);
    assert!(create_dct(&mut b, cq.cqn, srqn + 7, KEY).is_err());
    assert!(create_dct(&mut b, cq.cqn + 9, srqn, KEY).is_err());
    create_dct(&mut b, cq.cqn, srqn, KEY).expect("a good one");
}

#[test]
fn dci_send_lands_in_the_dcts_srq_and_completes_on_its_cq() {
    let mut r = rig();
    let land = r.post_recv(64);
    let to = r.to(0);
    r.post(opcode::SEND, to, None, b"dynamically connected");
    r.settle();
    assert_eq!(r.b.read(land, 21), b"dynamically connected");
    let cqe = r.b.poll_cq(&mut r.cq_b).expect("the DCT's receive CQE");
    assert_eq!(cqe_opcode(&cqe), RESP_SEND);
    assert_eq!(byte_cnt(&cqe), 21);
    // libmlx5 finds the DCT by its user index, and the CQE names the DCT.
    assert_eq!(srqn_uidx(&cqe), DCT_UIDX);
    assert_eq!(cqe_qpn(&cqe), r.dcts[0]);
    let done = r.a.poll_cq(&mut r.cq_a).expect("the DCI's completion");
    assert_eq!(cqe_opcode(&done), REQ);
    assert_eq!(cqe_qpn(&done), r.dci.sqn);
}

#[test]
fn dci_rdma_write_and_read_through_a_dct() {
    let mut r = rig();
    let to = r.to(0);
    let (raddr, rkey) = r.remote;
    r.post(opcode::RDMA_WRITE, to, Some((raddr, rkey)), &[0xab; 300]);
    r.settle();
    assert_eq!(r.b.read(raddr, 300), vec![0xab; 300]);
    let w = r.a.poll_cq(&mut r.cq_a).expect("WRITE completion");
    assert_eq!((cqe_opcode(&w), syndrome(&w)), (REQ, 0));
    // A READ of 2,000 bytes: two responses at MTU 1024.
    r.b.write(raddr + 1000, &[0x5c; 2000]);
    let local = r.post(
        opcode::RDMA_READ,
        to,
        Some((raddr + 1000, rkey)),
        &[0; 2000],
    );
    r.settle();
    let rd = r.a.poll_cq(&mut r.cq_a).expect("READ completion");
    assert_eq!(cqe_opcode(&rd), REQ);
    assert_eq!(r.a.read(local, 2000), vec![0x5c; 2000]);
    assert!(r.b.poll_cq(&mut r.cq_b).is_none(), "RDMA takes no receive");
}

#[test]
fn a_wrong_access_key_is_refused_counted_and_places_nothing() {
    let mut r = rig();
    let land = r.post_recv(64);
    let mut to = r.to(0);
    to.key = KEY ^ 0xdead;
    let before = r.b.dev.counters();
    r.post(opcode::SEND, to, None, b"intruder");
    r.settle();
    assert_eq!(r.b.read(land, 8), vec![0; 8], "nothing placed");
    assert!(r.b.poll_cq(&mut r.cq_b).is_none(), "no receive completion");
    let after = r.b.dev.counters();
    assert_eq!(after.dc_key_violations, before.dc_key_violations + 1);
    assert_eq!(query_dct(&mut r.b, r.dcts[0]).unwrap().1, 1);
    let err = r.a.poll_cq(&mut r.cq_a).expect("the DCI's error CQE");
    assert_eq!(cqe_opcode(&err), REQ_ERR);
    assert_eq!(syndrome(&err), REMOTE_ACCESS_ERR);
}

#[test]
fn one_dci_talks_to_two_dcts_in_turn() {
    let mut r = rig();
    let lands: Vec<u64> = (0..4).map(|_| r.post_recv(64)).collect();
    // Posted back to back: the WQE for the second DCT waits for the first's ACK, then the
    // DCI connects there; then back to the first.
    for (i, which) in [0usize, 1, 1, 0].into_iter().enumerate() {
        let to = r.to(which);
        r.post(
            opcode::SEND,
            to,
            None,
            format!("message {i} to {which}").as_bytes(),
        );
    }
    r.settle();
    let mut seen = Vec::new();
    while let Some(cqe) = r.b.poll_cq(&mut r.cq_b) {
        assert_eq!(cqe_opcode(&cqe), RESP_SEND);
        seen.push(cqe_qpn(&cqe));
    }
    assert_eq!(seen, vec![r.dcts[0], r.dcts[1], r.dcts[1], r.dcts[0]]);
    for (i, (land, which)) in lands.iter().zip([0, 1, 1, 0]).enumerate() {
        let text = format!("message {i} to {which}");
        assert_eq!(r.b.read(*land, text.len()), text.as_bytes());
    }
    let mut done = 0;
    while let Some(cqe) = r.a.poll_cq(&mut r.cq_a) {
        assert_eq!(cqe_opcode(&cqe), REQ);
        done += 1;
    }
    assert_eq!(done, 4);
}

#[test]
fn a_drained_dct_takes_no_more_requests() {
    let mut r = rig();
    let land = r.post_recv(64);
    drain_dct(&mut r.b, r.dcts[0]).expect("DRAIN_DCT");
    let to = r.to(0);
    r.post(opcode::SEND, to, None, b"too late");
    r.settle();
    assert_eq!(r.b.read(land, 8), vec![0; 8]);
    assert!(r.b.poll_cq(&mut r.cq_b).is_none());
}

#[test]
fn a_dci_reaches_a_dct_on_its_own_function() {
    // Both ends on one function (perftest with server and client on one device): the DC
    // requests and their ACKs loop inside the device.
    let (mut a, _b, _wire) = hosts();
    let cq = a.create_cq(5);
    let mut dci = create_dci(&mut a, &cq, 5);
    let (srqn, mut rmp) = a.create_rmp(RMP_LOG, 0);
    let dctn = create_dct(&mut a, cq.cqn, srqn, KEY).expect("CREATE_DCT");
    let lkey = a.create_mkey(false, true);
    let land = a.alloc(64, 64);
    a.post_recv(&mut rmp, land, 64, lkey);
    let src = a.alloc(64, 64);
    a.write(src, b"to myself");
    let to = DcAddr {
        dct: dctn,
        key: KEY,
        gid: GID_A,
        mac: MAC_A,
    };
    let w = dc_wqe(&dci, opcode::SEND, to, None, (src, lkey, 9));
    a.post(&mut dci, &w, false);
    for _ in 0..8 {
        a.dev.poll();
    }
    assert_eq!(a.read(land, 9), b"to myself");
    let mut cq = cq;
    let mut seen = Vec::new();
    while let Some(cqe) = a.poll_cq(&mut cq) {
        seen.push((cqe_opcode(&cqe), cqe_qpn(&cqe)));
    }
    seen.sort();
    assert_eq!(seen, vec![(REQ, dci.sqn), (RESP_SEND, dctn)]);
}

/// The ICRC of RoCE v2 IPv4 frame `frame` (its last four bytes the ICRC's place), from the
/// IBA rules: eight bytes of ones for the LRH, the IP, UDP and transport headers with their
/// variant fields set to ones, then the rest.
fn icrc_v4(frame: &[u8]) -> [u8; 4] {
    let mut masked = vec![0xff; 8];
    let mut ip = frame[14..34].to_vec();
    ip[1] = 0xff;
    ip[8] = 0xff;
    ip[10] = 0xff;
    ip[11] = 0xff;
    masked.extend_from_slice(&ip);
    let mut rest = frame[34..frame.len() - 4].to_vec();
    rest[6] = 0xff;
    rest[7] = 0xff;
    rest[8 + 4] = 0xff;
    masked.extend_from_slice(&rest);
    crc32fast::hash(&masked).to_le_bytes()
}

#[test]
fn the_dc_wire_format_and_a_request_cut_inside_its_dceth() {
    // Each function alone on its own wire: A's frames wait at the far end of A's, and are
    // put on B's by hand.
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (mut a, wire) = cxdirect_emu::testkit::rc::lone_host(cfg(MAC_A), MEM, GID_A, MAC_A);
    let (mut b, wire_b) = cxdirect_emu::testkit::rc::lone_host(cfg(MAC_B), MEM, GID_B, MAC_B);
    let mut cq_b = b.create_cq(5);
    let (srqn, mut rmp) = b.create_rmp(RMP_LOG, 0);
    let dctn = create_dct(&mut b, cq_b.cqn, srqn, KEY).expect("CREATE_DCT");
    let lkey_b = b.create_mkey(false, true);
    let land = b.alloc(64, 64);
    b.post_recv(&mut rmp, land, 64, lkey_b);
    let cq_a = a.create_cq(5);
    let mut dci = create_dci(&mut a, &cq_a, 5);
    let lkey_a = a.create_mkey(false, true);
    let src = a.alloc(64, 64);
    a.write(src, b"hello");
    let to = DcAddr {
        dct: dctn,
        key: KEY,
        gid: GID_B,
        mac: MAC_B,
    };
    let w = dc_wqe(&dci, opcode::SEND, to, None, (src, lkey_a, 5));
    a.post(&mut dci, &w, false);
    a.dev.poll();
    let frames = cxdirect_emu::testkit::rc::take_frames(&wire);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    // IPv4 (the GIDs are IPv4-mapped): the BTH at 42, the DCETH after it.
    assert_eq!(f[42], 0xc0 | 0x04, "SEND ONLY under the DC prefix");
    assert_eq!(
        u32::from_be_bytes(f[46..50].try_into().unwrap()) & 0xff_ffff,
        dctn
    );
    assert_eq!(
        u32::from_be_bytes(f[50..54].try_into().unwrap()) & 0xff_ffff,
        0x10
    );
    assert_eq!(u64::from_be_bytes(f[54..62].try_into().unwrap()), KEY);
    assert_eq!(u32::from_be_bytes(f[62..66].try_into().unwrap()), dci.sqn);
    assert_eq!(
        u32::from_be_bytes(f[66..70].try_into().unwrap()),
        0x10,
        "connection PSN"
    );
    assert_eq!(&f[70..75], b"hello");
    // Cut inside the DCETH (eight of its sixteen bytes), lengths, checksum and ICRC redone:
    // dropped and counted, nothing placed.
    let mut cut = f[..62].to_vec();
    let total = (cut.len() + 4 - 14) as u16;
    cut[16..18].copy_from_slice(&total.to_be_bytes());
    cut[24..26].copy_from_slice(&[0, 0]);
    let sum = !cxdirect_emu::packet::ones_complement_sum(&cut[14..34], 0);
    cut[24..26].copy_from_slice(&sum.to_be_bytes());
    cut[38..40].copy_from_slice(&(total - 20).to_be_bytes());
    cut.extend_from_slice(&[0; 4]);
    let crc = icrc_v4(&cut);
    let n = cut.len();
    cut[n - 4..].copy_from_slice(&crc);
    let before = b.dev.counters();
    wire_b.transmit(PortId::B, &cut).unwrap();
    b.dev.poll();
    let after = b.dev.counters();
    assert_eq!(
        after.roce_icrc_drops, before.roce_icrc_drops,
        "the ICRC is good"
    );
    assert_eq!(after.roce_rx_drops, before.roce_rx_drops + 1);
    assert!(b.poll_cq(&mut cq_b).is_none());
    // The whole request is taken.
    wire_b.transmit(PortId::B, &frames[0]).unwrap();
    b.dev.poll();
    assert_eq!(b.read(land, 5), b"hello");
    let cqe = b.poll_cq(&mut cq_b).expect("the DCT's receive");
    assert_eq!((cqe_opcode(&cqe), cqe_qpn(&cqe)), (RESP_SEND, dctn));
}
