//! XRC QPs as Linux's mlx5_ib creates them and rdma-core's libmlx5 drives them, the way
//! `ibv_xsrq_pingpong` uses them: an XRC initiator (XRC_INI, `create_user_qp` with
//! `MLX5_QP_ST_XRC`: a send queue, `rq_type` SRQ naming the device's own XRC SRQ, the
//! device's XRC domain) on one function sends to an XRC target (XRC_TGT, `create_xrc_tgt_qp`:
//! no send queue, the device's PD and CQ, the user's XRC domain) on the other, each WQE's XRC
//! segment (libmlx5's `_mlx5_post_send`, IBV_QPT_XRC_SEND) naming the XRC SRQ the message
//! lands in. The target's receives complete on that SRQ's CQ carrying the SRQ's user index,
//! by which libmlx5 (`get_resp_ctx_v1`, MLX5_RSC_TYPE_XSRQ) finds the SRQ.

mod xrc_kit;

use xrc_kit::*;

/// `ibv_xsrq_pingpong`'s traffic: one XRC_TGT QP behind two XRC SRQs of its XRC domain, each
/// SEND naming one of them (alternately, two messages each, one of them three packets). Each
/// message lands in the named SRQ's next WQE and completes on that SRQ's CQ with its user
/// index and the target QP's number; the sender completes each SEND once it is acknowledged.
#[test]
fn xrc_sends_land_in_the_srq_their_xrceth_names_and_complete_on_its_cq() {
    let mut r = rig();
    let mut bufs = [Vec::new(), Vec::new()];
    for (i, srq) in r.srqs.iter_mut().enumerate() {
        for _ in 0..2 {
            let at = r.b.alloc(4096, 64);
            post_srq_recv(&r.b, srq, at, 4096, r.lkey_b);
            bufs[i].push(at);
        }
    }
    let messages: Vec<Vec<u8>> = (0..4)
        .map(|i| {
            let len = if i == 1 { 2500 } else { 64 + i * 10 };
            (0..len)
                .map(|j| (j as u8).wrapping_mul(7) ^ i as u8)
                .collect()
        })
        .collect();
    for (i, m) in messages.iter().enumerate() {
        let srqn = r.srqs[i % 2].srqn;
        send(&mut r, srqn, m);
    }
    settle(&r);
    for i in 0..4u16 {
        let cqe = r.a.poll_cq(&mut r.cq_a).expect("send completion");
        assert_eq!(
            cqe_opcode(&cqe),
            0,
            "requester CQE {i}: {:02x?}",
            &cqe[0x30..]
        );
        assert_eq!(wqe_counter(&cqe), i);
    }
    assert!(r.a.poll_cq(&mut r.cq_a).is_none());
    for (i, m) in messages.iter().enumerate() {
        let (srq, nth) = (i % 2, i / 2);
        let cqe = r.b.poll_cq(&mut r.cqs_b[srq]).expect("receive completion");
        assert_eq!(
            cqe_opcode(&cqe),
            2,
            "responder SEND CQE: {:02x?}",
            &cqe[0x20..]
        );
        assert_eq!(byte_cnt(&cqe) as usize, m.len());
        assert_eq!(srqn_uidx(&cqe), UIDX[srq], "the XRC SRQ's user index");
        assert_eq!(cqe_qpn(&cqe), r.tgt, "the target QP's number");
        assert_eq!(wqe_counter(&cqe), nth as u16, "the SRQ WQE taken");
        assert_eq!(r.b.read(bufs[srq][nth], m.len()), *m);
    }
    assert!(r.b.poll_cq(&mut r.cqs_b[0]).is_none());
    assert!(r.b.poll_cq(&mut r.cqs_b[1]).is_none());
    assert_eq!(qp_state(&mut r.b, r.tgt), state::RTS);
}

/// A request whose XRCETH names an XRC SRQ of another XRC domain is refused with an
/// invalid-request NAK: nothing is placed, nothing completes at the target, and the sender's
/// WQE completes in error (remote invalid request), taking the initiator to error.
#[test]
fn an_xrc_srq_of_another_domain_is_refused_with_an_invalid_request_nak() {
    let mut r = rig();
    let at = r.b.alloc(4096, 64);
    r.b.write(at, &[0xee; 64]);
    let mut foreign = std::mem::replace(
        &mut r.foreign,
        XrcSrq {
            srqn: 0,
            buf: 0,
            dbr: 0,
            posted: 0,
        },
    );
    post_srq_recv(&r.b, &mut foreign, at, 4096, r.lkey_b);
    let naks = r.b.dev.counters().roce_naks_sent;
    send(&mut r, foreign.srqn, &[0x11; 64]);
    settle(&r);
    assert_eq!(r.b.dev.counters().roce_naks_sent, naks + 1);
    assert_eq!(r.b.read(at, 64), vec![0xee; 64], "nothing placed");
    assert!(r.b.poll_cq(&mut r.cqs_b[0]).is_none());
    let cqe = r.a.poll_cq(&mut r.cq_a).expect("the sender's completion");
    assert_eq!(cqe_opcode(&cqe), 13, "requester error CQE");
    assert_eq!(cqe[0x37], 0x12, "remote invalid request syndrome");
    assert_eq!(qp_state(&mut r.a, r.ini.sqn), state::ERR);
    assert!(r.wire.counters(PortId::B).unwrap().tx_frames >= 1);
}

/// An XRC target takes the XRC rows of Linux's `opt_mask` (the RC rows): RTS2RTS may change
/// access flags, and an attribute outside the row is refused; QUERY_QP reports the XRC
/// domain and the SRQ the context names. DEALLOC_XRCD is refused while an XRC QP names the
/// domain.
#[test]
fn xrc_qps_take_the_xrc_rows_of_opt_mask_and_hold_their_domain() {
    use cxdirect_hw::hca::DeallocXrcdIn;
    use cxdirect_hw::qp::optpar;
    let mut r = rig();
    let mut input = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(r.tgt);
    let out = r.b.exec(&input, 0x110 + 0x800).expect("QUERY_QP");
    let query = QueryQpOut::new(&out[..]).unwrap();
    let qpc = query.qpc();
    assert_eq!(qpc.st(), service_type::XRC);
    assert_eq!(qpc.rq_type(), rq_type::SRQ);
    let xrcd = qpc.xrcd();
    let mut free = Host::input(Opcode::DeallocXrcd, 0, 16);
    DeallocXrcdIn::new(&mut free[..]).unwrap().set_xrcd(xrcd);
    assert!(
        r.b.exec(&free, 16).is_err(),
        "domain held by the XRC target"
    );
    // RTS2RTS's optional attributes for XRC exclude the Q_Key.
    let mut bad = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = cxdirect_hw::qp::Rst2initQpIn::new(&mut bad[..]).unwrap();
    cmd.set_qpn(r.ini.sqn).set_opt_param_mask(optpar::Q_KEY);
    assert_eq!(
        r.a.exec(&bad, 16).map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadQpOptParam
        )),
        "Q_Key is no XRC attribute"
    );
    let mut ok = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    let mut cmd = cxdirect_hw::qp::Rst2initQpIn::new(&mut ok[..]).unwrap();
    cmd.set_qpn(r.ini.sqn).set_opt_param_mask(optpar::RWE);
    r.a.exec(&ok, 16).expect("RTS2RTS with access flags");
}

/// ARM_XRC_SRQ as mlx5_ib's `arm_xrc_srq_cmd` sends it for `ibv_modify_srq` (IBV_SRQ_LIMIT):
/// op_mod XRC_SRQ, the SRQ, the limit in `lwm`.
fn arm_xrc_srq_input(srqn: u32, lwm: u16, op_mod: u16) -> Vec<u8> {
    let mut input = Host::input(Opcode::ArmXrcSrq, op_mod, 0x10);
    ArmXrcSrqIn::new(&mut input[..])
        .unwrap()
        .set_xrc_srqn(srqn)
        .set_lwm(lwm);
    input
}

/// QUERY_XRC_SRQ as mlx5_ib's `query_xrc_srq_cmd` sends it (for `ibv_query_srq`); the whole
/// output, the context at 0x10.
fn query_xrc_srq(h: &mut Host, srqn: u32) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::QueryXrcSrq, 0, 0x10);
    QueryXrcSrqIn::new(&mut input[..])
        .unwrap()
        .set_xrc_srqn(srqn);
    h.exec(&input, 0x110)
}

fn limit_events(h: &mut Host) -> Vec<u32> {
    h.drain_eq()
        .into_iter()
        .filter(|(t, _, _)| *t == EventType::SrqRqLimit as u8)
        .map(|(_, _, d)| u32::from_be_bytes([d[24], d[25], d[26], d[27]]))
        .collect()
}

/// An XRC SRQ's limit (`arm_xrc_srq_cmd`) is one-shot, as a basic SRQ's: the SEND that leaves
/// fewer WQEs posted than the limit raises one SRQ limit event naming the SRQ (what Linux's
/// `srq_event_notifier` looks up, and mlx5_ib reports as IB_EVENT_SRQ_LIMIT_REACHED), and the
/// limit then reads 0 in QUERY_XRC_SRQ, whose context (`get_srqc`) is the one created.
#[test]
fn arm_xrc_srq_raises_one_limit_event_and_query_xrc_srq_reads_the_context() {
    let mut r = rig();
    let srqn = r.srqs[0].srqn;
    for _ in 0..4 {
        let at = r.b.alloc(4096, 64);
        post_srq_recv(&r.b, &mut r.srqs[0], at, 4096, r.lkey_b);
    }
    r.b.exec(&arm_xrc_srq_input(srqn, 2, ARM_XRC_SRQ_OP_MOD_XRC_SRQ), 16)
        .expect("ARM_XRC_SRQ");
    r.b.drain_eq();
    let out = query_xrc_srq(&mut r.b, srqn).expect("QUERY_XRC_SRQ");
    let out = QueryXrcSrqOut::new(&out[..]).unwrap();
    let ctx = out.xrc_srq_context_entry();
    assert_eq!(ctx.state(), 0, "good");
    assert_eq!(ctx.lwm(), 2, "the armed limit");
    assert_eq!(ctx.log_xrc_srq_size(), SRQ_LOG);
    assert_eq!(ctx.log_rq_stride(), 1);
    assert_eq!(ctx.log_page_size(), 0);
    assert_eq!(ctx.page_offset(), 0);
    assert_eq!(ctx.pd(), r.b.pd);
    assert_eq!(ctx.cqn(), r.cqs_b[0].cqn);
    assert_eq!(ctx.user_index(), UIDX[0]);
    let dbr = (u64::from(ctx.db_record_addr_h()) << 32) | u64::from(ctx.db_record_addr_l() << 2);
    assert_eq!(dbr, r.srqs[0].dbr);
    // 4 posted, limit 2: the first two SENDs leave 3 and 2 posted, no event.
    for i in 0..2u8 {
        send(&mut r, srqn, &[i; 64]);
    }
    settle(&r);
    assert!(limit_events(&mut r.b).is_empty(), "at or above the limit");
    // The third leaves 1 < 2: one event, naming the XRC SRQ; the fourth raises nothing.
    send(&mut r, srqn, &[2; 64]);
    settle(&r);
    assert_eq!(limit_events(&mut r.b), vec![srqn]);
    send(&mut r, srqn, &[3; 64]);
    settle(&r);
    assert!(limit_events(&mut r.b).is_empty(), "disarmed after it fired");
    for _ in 0..4 {
        let cqe = r.b.poll_cq(&mut r.cqs_b[0]).expect("receive completion");
        assert_eq!(cqe_opcode(&cqe), 2);
    }
    let out = query_xrc_srq(&mut r.b, srqn).expect("QUERY_XRC_SRQ");
    let out = QueryXrcSrqOut::new(&out[..]).unwrap();
    assert_eq!(out.xrc_srq_context_entry().lwm(), 0, "one-shot limit");
    assert_eq!(out.xrc_srq_context_entry().wqe_cnt(), 4, "WQEs consumed");
    assert_eq!(r.b.dev.counters().limit_events, 1);
}

/// ARM_XRC_SRQ refuses another op_mod, a limit above the ring and an unknown SRQ; QUERY_XRC_SRQ
/// an unknown SRQ.
#[test]
fn arm_and_query_xrc_srq_refuse_what_linux_never_sends() {
    let mut r = rig();
    let srqn = r.srqs[1].srqn;
    assert_eq!(
        r.b.exec(&arm_xrc_srq_input(srqn, 1, 0), 16).map(|_| ()),
        Err(CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod))
    );
    assert_eq!(
        r.b.exec(
            &arm_xrc_srq_input(srqn, (1 << SRQ_LOG) + 1, ARM_XRC_SRQ_OP_MOD_XRC_SRQ),
            16
        )
        .map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadWqParams
        ))
    );
    let gone = 0x00ab_cdef;
    assert_eq!(
        r.b.exec(&arm_xrc_srq_input(gone, 1, ARM_XRC_SRQ_OP_MOD_XRC_SRQ), 16)
            .map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    assert_eq!(
        query_xrc_srq(&mut r.b, gone).map(|_| ()),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
}
