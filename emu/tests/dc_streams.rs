//! DC initiator streams (DCS), as Linux 6.12's mlx5_ib and rdma-core's libmlx5 drive them:
//!
//! - mlx5_ib reports `log_max_dci_stream_channels` and `log_max_dci_errored_streams` to
//!   libmlx5 (`mlx5_ib_query_device`: `dci_streams_caps`), takes `MLX5_QP_FLAG_DCI_STREAM`
//!   only when both are non-zero (`process_vendor_flags`), and writes the DCI's
//!   `log_num_dci_stream_channels` and `log_num_dci_errored_streams` at CREATE_QP
//!   (`create_dci`); libmlx5 refuses values above the caps (`mlx5dv_create_qp`);
//! - each WQE names its stream in the control segment's `dci_stream_channel_id`
//!   (`mlx5_send_wr_set_dc_addr_stream`; perftest's `--log_dci_streams` cycles through them);
//! - `mlx5dv_dci_stream_id_reset` sends RTS2RTS_QP with `qpc_ext`, the
//!   `MLX5_QPC_OPT_MASK_32_DCI_STREAM_CHANNEL_ID` bit of `opt_param_mask_95_32` and the stream
//!   in the context extension;
//! - mlx5dv_dci_stream_id_reset(3): an error on a stream flushes that stream's WQEs only, the
//!   others keep going, and the DCI moves to error once the errored streams reach its
//!   `log_num_errored` (the model reads it as 2^log_num_errored streams, as every other
//!   `log_num_*` of the interface).

mod dc_kit;

use cxdirect_emu::testkit::rc::RemoteRights;
use cxdirect_emu::testkit::IOVA_BASE;
use dc_kit::*;

/// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`.
const LOCAL_PROT_ERR: u8 = 0x04;

/// Polls every CQE of A's CQ: (opcode, syndrome, WQE counter) each.
fn requester_cqes(r: &mut Rig) -> Vec<(u8, u8, u16)> {
    let mut seen = Vec::new();
    while let Some(cqe) = r.a.poll_cq(&mut r.cq_a) {
        let counter = u16::from_be_bytes([cqe[0x3c], cqe[0x3d]]);
        let syn = if cqe_opcode(&cqe) == REQ {
            0
        } else {
            syndrome(&cqe)
        };
        seen.push((cqe_opcode(&cqe), syn, counter));
    }
    seen
}

/// The command status of a refused command.
fn refused_with(fail: CmdFail) -> u8 {
    match fail {
        CmdFail::Status { status, .. } => status,
        other => panic!("not refused by status: {other:?}"),
    }
}

/// The wrong key for DCT 0: the request is refused with a remote access NAK.
fn wrong_key(r: &Rig) -> DcAddr {
    let mut to = r.to(0);
    to.key ^= 0xdead;
    to
}

#[test]
fn dci_streams_are_advertised_as_mlx5_ib_reports_them() {
    let (mut a, _b, _wire) = hosts();
    let general = a.query_cap(cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).unwrap();
    // The model's choice: 16 stream channels and 8 errored streams at most; both non-zero,
    // as `process_vendor_flags` needs for MLX5_QP_FLAG_DCI_STREAM.
    assert_eq!(caps.log_max_dci_stream_channels(), 4);
    assert_eq!(caps.log_max_dci_errored_streams(), 3);
    assert!(caps.qpc_extension());
}

#[test]
fn create_qp_takes_streams_within_the_caps_only_and_on_a_dci_only() {
    let (mut a, _b, _wire) = hosts();
    let cq = a.create_cq(4);
    create_dci_with(&mut a, &cq, 4, Some((2, 0))).expect("perftest's --log_dci_streams=2");
    create_dci_with(&mut a, &cq, 4, Some((4, 3))).expect("the caps themselves");
    let past_channels = create_dci_with(&mut a, &cq, 4, Some((5, 0)))
        .err()
        .expect("refused");
    assert_eq!(refused_with(past_channels), CmdStatus::BadParameter as u8);
    let past_errored = create_dci_with(&mut a, &cq, 4, Some((2, 4)))
        .err()
        .expect("refused");
    assert_eq!(refused_with(past_errored), CmdStatus::BadParameter as u8);
}

#[test]
fn streams_carry_wqes_as_an_ordinary_dci_does() {
    let mut r = rig_streams(2, 0);
    let lands: Vec<u64> = (0..4).map(|_| r.post_recv(64)).collect();
    // perftest's round robin over the streams, to one DCT.
    for stream in 0..4u16 {
        let to = r.to(0);
        r.post_on(
            stream,
            opcode::SEND,
            to,
            None,
            format!("stream {stream}").as_bytes(),
        );
    }
    r.settle();
    for (stream, land) in lands.iter().enumerate() {
        let text = format!("stream {stream}");
        assert_eq!(r.b.read(*land, text.len()), text.as_bytes());
    }
    let cqes = requester_cqes(&mut r);
    assert_eq!(cqes.len(), 4);
    assert!(cqes.iter().all(|c| c.0 == REQ), "{cqes:?}");
}

#[test]
fn an_error_on_one_stream_flushes_that_stream_only_until_it_is_reset() {
    let mut r = rig_streams(2, 1);
    let dci = r.dci.sqn;
    let lands: Vec<u64> = (0..3).map(|_| r.post_recv(64)).collect();
    // Stream 0 meets a wrong key: its WQE completes in error, the DCI stays in RTS.
    let bad = wrong_key(&r);
    r.post_on(0, opcode::SEND, bad, None, b"refused");
    r.settle();
    let cqes = requester_cqes(&mut r);
    assert_eq!(cqes, vec![(REQ_ERR, REMOTE_ACCESS_ERR, 0)]);
    assert_eq!(qp_state(&mut r.a, dci), state::RTS);
    // Stream 1 goes on; stream 0's next WQE is flushed; stream 1 again goes.
    let to = r.to(0);
    r.post_on(1, opcode::SEND, to, None, b"stream one");
    r.post_on(0, opcode::SEND, to, None, b"stream zero");
    r.post_on(1, opcode::SEND, to, None, b"one again");
    r.settle();
    let cqes = requester_cqes(&mut r);
    assert_eq!(
        cqes,
        vec![(REQ, 0, 2), (REQ_ERR, WR_FLUSH_ERR, 4), (REQ, 0, 6)],
        "in posting order"
    );
    assert_eq!(r.b.read(lands[0], 10), b"stream one");
    assert_eq!(r.b.read(lands[1], 9), b"one again");
    assert_eq!(qp_state(&mut r.a, dci), state::RTS);
    // Reset, stream 0 carries WQEs again.
    reset_stream(&mut r.a, dci, 0).expect("mlx5dv_dci_stream_id_reset");
    r.post_on(0, opcode::SEND, to, None, b"zero is back");
    r.settle();
    assert_eq!(requester_cqes(&mut r), vec![(REQ, 0, 8)]);
    assert_eq!(r.b.read(lands[2], 12), b"zero is back");
}

#[test]
fn wqes_sent_behind_an_errored_one_on_other_streams_go_again() {
    let mut r = rig_streams(2, 1);
    let lands: Vec<u64> = (0..2).map(|_| r.post_recv(64)).collect();
    let to = r.to(0);
    // One connection carries all four: a WRITE with a key the target refuses (stream 0), then
    // SENDs on streams 1, 0 and 2, sent before the NAK comes back.
    let (va, rkey) = r.remote;
    r.post_on(
        0,
        opcode::RDMA_WRITE,
        to,
        Some((va, rkey ^ 0x100)),
        b"bad key",
    );
    r.post_on(1, opcode::SEND, to, None, b"first");
    r.post_on(0, opcode::SEND, to, None, b"flushed");
    r.post_on(2, opcode::SEND, to, None, b"second");
    r.settle();
    r.settle();
    let cqes = requester_cqes(&mut r);
    assert_eq!(
        cqes,
        vec![
            (REQ_ERR, REMOTE_ACCESS_ERR, 0),
            (REQ, 0, 2),
            (REQ_ERR, WR_FLUSH_ERR, 4),
            (REQ, 0, 6)
        ]
    );
    assert_eq!(r.b.read(lands[0], 5), b"first");
    assert_eq!(r.b.read(lands[1], 6), b"second");
    assert_eq!(qp_state(&mut r.a, r.dci.sqn), state::RTS);
}

#[test]
fn the_dci_moves_to_error_when_its_errored_streams_reach_the_limit() {
    // 2^1 errored streams: the second stream in error takes the DCI to error.
    let mut r = rig_streams(2, 1);
    let dci = r.dci.sqn;
    let bad = wrong_key(&r);
    r.post_on(0, opcode::SEND, bad, None, b"one");
    r.settle();
    assert_eq!(qp_state(&mut r.a, dci), state::RTS);
    // The same stream again (flushed, not a new error), then a second stream in error.
    r.post_on(0, opcode::SEND, bad, None, b"flushed");
    r.post_on(3, opcode::SEND, bad, None, b"two");
    let to = r.to(0);
    r.post_on(1, opcode::SEND, to, None, b"after");
    r.settle();
    assert_eq!(
        requester_cqes(&mut r),
        vec![
            (REQ_ERR, REMOTE_ACCESS_ERR, 0),
            (REQ_ERR, WR_FLUSH_ERR, 2),
            (REQ_ERR, REMOTE_ACCESS_ERR, 4),
            (REQ_ERR, WR_FLUSH_ERR, 6)
        ]
    );
    assert_eq!(qp_state(&mut r.a, dci), state::ERR);
    assert!(reset_stream(&mut r.a, dci, 0).is_err(), "a DCI in error");
}

#[test]
fn one_errored_stream_allowed_is_an_ordinary_dci_on_error() {
    // perftest's --log_dci_streams leaves log_num_errored 0: 2^0, the first error.
    let mut r = rig_streams(2, 0);
    let bad = wrong_key(&r);
    r.post_on(2, opcode::SEND, bad, None, b"refused");
    r.settle();
    assert_eq!(
        requester_cqes(&mut r),
        vec![(REQ_ERR, REMOTE_ACCESS_ERR, 0)]
    );
    assert_eq!(qp_state(&mut r.a, r.dci.sqn), state::ERR);
}

#[test]
fn test_dc_rdma_write_stream_identifiers_past_the_channel_count_carry_wqes() {
    // rdma-core's `generate_stream_id` (tests/mlx5_base.py) cycles a DCI's stream ids up to
    // two past its stream count and expects every WQE to complete: an identifier is not a
    // channel index (mlx5dv_create_qp(3): the count is how many streams run in parallel).
    let mut r = rig_streams(1, 1);
    let lands: Vec<u64> = (0..3).map(|_| r.post_recv(64)).collect();
    let to = r.to(0);
    for stream in [2u16, 3, 0x1234] {
        r.post_on(stream, opcode::SEND, to, None, b"past");
    }
    r.settle();
    assert_eq!(
        requester_cqes(&mut r),
        vec![(REQ, 0, 0), (REQ, 0, 2), (REQ, 0, 4)]
    );
    for land in lands {
        assert_eq!(r.b.read(land, 4), b"past");
    }
    assert_eq!(qp_state(&mut r.a, r.dci.sqn), state::RTS);
}

/// A key over A's memory in another PD of A: a gather through it is a local protection
/// error, as after rdma-core's `check_bad_flow` moves the sender's region to `pd_bad`.
fn key_of_another_pd(r: &mut Rig) -> u32 {
    let other = r.a.alloc_pd();
    let rights = RemoteRights {
        read: false,
        write: false,
        atomic: false,
    };
    r.a.create_remote_mkey(other, IOVA_BASE, MEM as u64, rights, 0x5b)
}

#[test]
fn test_dc_send_stream_bad_flow_qp_local_protection_errors_fail_streams_until_the_limit() {
    // `test_dc_send_stream_bad_flow_qp`: log_num_errored 2, every SEND through a key of
    // another PD on a new stream. `bad_flow_handler_qp` counts one local protection error per
    // stream and, at the first flush, finds the DCI in error after exactly 2^2 of them.
    let mut r = rig_streams(3, 2);
    let dci = r.dci.sqn;
    let good = r.lkey_a;
    r.lkey_a = key_of_another_pd(&mut r);
    let to = r.to(0);
    for stream in 1..=3u16 {
        r.post_on(stream, opcode::SEND, to, None, b"bad pd");
        r.settle();
        let index = (stream - 1) * 2;
        assert_eq!(
            requester_cqes(&mut r),
            vec![(REQ_ERR, LOCAL_PROT_ERR, index)],
            "stream {stream}"
        );
        assert_eq!(qp_state(&mut r.a, dci), state::RTS, "stream {stream}");
    }
    // A stream not in error still carries WQEs; an errored one flushes.
    let land = r.post_recv(64);
    r.lkey_a = good;
    r.post_on(7, opcode::SEND, to, None, b"good");
    r.post_on(2, opcode::SEND, to, None, b"errored");
    r.settle();
    assert_eq!(
        requester_cqes(&mut r),
        vec![(REQ, 0, 6), (REQ_ERR, WR_FLUSH_ERR, 8)]
    );
    assert_eq!(r.b.read(land, 4), b"good");
    // The fourth stream in error reaches the limit: its own error, then the DCI in error.
    r.lkey_a = key_of_another_pd(&mut r);
    r.post_on(4, opcode::SEND, to, None, b"bad pd");
    r.settle();
    assert_eq!(requester_cqes(&mut r), vec![(REQ_ERR, LOCAL_PROT_ERR, 10)]);
    assert_eq!(qp_state(&mut r.a, dci), state::ERR);
    r.post_on(5, opcode::SEND, to, None, b"after");
    r.settle();
    assert_eq!(requester_cqes(&mut r), vec![(REQ_ERR, WR_FLUSH_ERR, 12)]);
}

#[test]
fn a_stream_local_error_behind_outstanding_wqes_completes_after_them() {
    let mut r = rig_streams(2, 2);
    let lands: Vec<u64> = (0..2).map(|_| r.post_recv(64)).collect();
    let to = r.to(0);
    r.post_on(1, opcode::SEND, to, None, b"first");
    let good = r.lkey_a;
    r.lkey_a = key_of_another_pd(&mut r);
    r.post_on(2, opcode::SEND, to, None, b"bad pd");
    r.lkey_a = good;
    r.post_on(3, opcode::SEND, to, None, b"third");
    r.settle();
    r.settle();
    assert_eq!(
        requester_cqes(&mut r),
        vec![(REQ, 0, 0), (REQ_ERR, LOCAL_PROT_ERR, 2), (REQ, 0, 4)],
        "in posting order"
    );
    assert_eq!(r.b.read(lands[0], 5), b"first");
    assert_eq!(r.b.read(lands[1], 5), b"third");
    assert_eq!(qp_state(&mut r.a, r.dci.sqn), state::RTS);
}

#[test]
fn stream_reset_is_refused_for_a_stream_not_in_error() {
    let mut r = rig_streams(1, 1);
    let dci = r.dci.sqn;
    // `dci_reset_stream_id` (tests/mlx5_base.py) expects the reset of a good stream to fail.
    let good = reset_stream(&mut r.a, dci, 1).unwrap_err();
    assert_eq!(refused_with(good), CmdStatus::BadParameter as u8);
    let past = reset_stream(&mut r.a, dci, 2).unwrap_err();
    assert_eq!(refused_with(past), CmdStatus::BadParameter as u8);
    // An ordinary DCI has no streams to reset.
    let cq = r.a.create_cq(3);
    let plain = create_dci(&mut r.a, &cq, 3);
    assert!(reset_stream(&mut r.a, plain.sqn, 0).is_err());
    // Without `qpc_ext` the extension is not there to read.
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, RTS2RTS_QPC_EXT_BYTE);
    Rts2rtsQpIn::new(&mut input[..])
        .unwrap()
        .set_qpn(dci)
        .set_opt_param_mask_95_32(qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID);
    assert!(r.a.exec(&input, 0x10).is_err());
    // An attribute of the extension the model does not take (`rts2rts_qp_udp_sport` is 0;
    // the QoS queue groups are taken, tests/scheduling_elements.rs).
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, RTS2RTS_QPC_EXT_BYTE + 0xc0);
    Rts2rtsQpIn::new(&mut input[..])
        .unwrap()
        .set_qpn(dci)
        .set_qpc_ext(true)
        .set_opt_param_mask_95_32(qpc_opt_mask_32::UDP_SPORT);
    assert!(r.a.exec(&input, 0x10).is_err());
}

#[test]
fn an_ordinary_dci_ignores_the_stream_field_and_fails_whole() {
    let mut r = rig();
    let land = r.post_recv(64);
    let to = r.to(0);
    r.post_on(9, opcode::SEND, to, None, b"no streams");
    r.settle();
    assert_eq!(r.b.read(land, 10), b"no streams");
    assert_eq!(requester_cqes(&mut r), vec![(REQ, 0, 0)]);
    let bad = wrong_key(&r);
    r.post_on(0, opcode::SEND, bad, None, b"refused");
    r.post_on(1, opcode::SEND, to, None, b"flushed");
    r.settle();
    assert_eq!(
        requester_cqes(&mut r),
        vec![(REQ_ERR, REMOTE_ACCESS_ERR, 2), (REQ_ERR, WR_FLUSH_ERR, 4)]
    );
    assert_eq!(qp_state(&mut r.a, r.dci.sqn), state::ERR);
}
