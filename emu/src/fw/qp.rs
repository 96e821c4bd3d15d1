//! QP commands: CREATE_QP, the state transitions (RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS,
//! SQERR2RTS, 2ERR, 2RST), QUERY_QP and DESTROY_QP.
//!
//! Each transition reads its mandatory attributes from `qpc` and only the optional ones its
//! `opt_param_mask` names, and allows only the optional bits Linux mlx5_ib allows for RC
//! (`opt_mask[][]` in `drivers/infiniband/hw/mlx5/qp.c`). A refused command changes nothing.
//!
//! UC QPs (service type 0x1, `MLX5_QP_ST_UC`) share the RC table and transitions (with
//! Linux's UC rows of `opt_mask`); their transport is the RC engine's without acknowledgements
//! (`engine::rc::unreliable`).
//!
//! Besides RC QPs, the model creates datagram QPs: unreliable datagram (UD) QPs and general
//! services QPs (QP1, the GSI QP Linux's MAD layer opens on every RoCE port). Their
//! transitions take what Linux gives them ([`super::qp_datagram`]); the UD transport
//! (`engine::ud`) carries their datagrams and MADs.
//!
//! XRC QPs (service type 0x3, `MLX5_QP_ST_XRC`) are RC-table QPs of an XRC domain (`xrcd`):
//! an initiator (XRC_INI, with a send queue and no receive queue) sends RC requests that
//! carry an XRCETH naming the target's XRC SRQ; a target (XRC_TGT, `no_sq`, which Linux's
//! `create_xrc_tgt_qp` creates with the device's own PD and CQ and no buffer) answers them,
//! taking SEND receives from that SRQ. Both name an XRC SRQ in `srqn_rmpn_xrqn` with
//! `rq_type` SRQ (Linux names its own, `devr->s0`); the target does not draw from it. Their
//! transitions take Linux's XRC rows of `opt_mask`, which are the RC rows.
//!
//! The REG_UMR QP (service type 0xc), which Linux's mlx5_ib opens before it registers any
//! memory (`mlx5r_umr_resource_init`), is an RC-table QP without a receive queue, a peer or a
//! protection domain (`create_qp_common` leaves its `pd` zero and sets `latency_sensitive`):
//! its transitions take only the port, and its send queue executes UMR WQEs
//! (`engine::umr`); no RoCE packet reaches it.

use super::pages::{release_context, store_new_context, write_context};
use super::queues::{check_dbr, context_bytes, queue_buffer};
use super::{bad_param, bad_res, input_as, output_as, CmdError, CmdResult, Core, Syndrome};
use crate::function::hca::port_max_mtu;
use crate::objects::limits::{LOG_MAX_MSG, LOG_MAX_QP_SZ, LOG_MAX_RA_QP};
use crate::objects::rc::{Qp, RcPath, RcReceive, SendCounter};
use crate::objects::QueueBuffer;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::layout::Layout;
use cxdirect_hw::qp::{
    mtu, optpar, rq_type, send_dbr_mode, service_type, state, Ads, CreateQpIn, CreateQpOut,
    DestroyQpIn, Qpc, QueryQpIn, Rst2initQpIn,
};

/// Byte offset of `qpc` in every QP command input and in QUERY_QP's output.
const QPC_BYTE: usize = 0x18;

fn bad_qp_state(what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadQpState, Syndrome::BadQpTransition, what)
}

fn missing(what: &'static str) -> CmdError {
    bad_param(Syndrome::MissingQpAttribute, what)
}

pub(crate) fn create_qp(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateQpIn<&[u8]>, input);
    let ctx = cmd.qpc();
    let service = ctx.st();
    if !matches!(
        service,
        service_type::RC
            | service_type::UC
            | service_type::XRC
            | service_type::UD
            | service_type::QP1
            | service_type::REG_UMR
            | service_type::DCI
    ) {
        return Err(bad_param(
            Syndrome::UnsupportedServiceType,
            "only RC, UC, XRC, DCI, UD, GSI (QP1) and REG_UMR QPs are modelled",
        ));
    }
    if ctx.deth_sqpn() != 0 && service != service_type::UD {
        // `set_deth_sqpn` names the DETH of UD sends: mlx5_ib sets it only on the UD QPs its
        // GSI layer sends MADs through (`create_gsi_ud_qp` in gsi.c, `MLX5_IB_QP_CREATE_SQPN_QP1`
        // in `create_kernel_qp`); any other service carries no DETH of its own to set.
        return Err(bad_param(
            Syndrome::BadQpParams,
            "deth_sqpn on a QP that is not UD",
        ));
    }
    // The REG_UMR QP has no protection domain: each UMR names the key's own.
    if service != service_type::REG_UMR && !core.res.pds.contains(ctx.pd()) {
        return Err(bad_res("QP's PD does not exist"));
    }
    // Only a send queue is rung through a UAR page: Linux's `create_xrc_tgt_qp` names none
    // for an XRC target, which has no send queue.
    if !ctx.no_sq() && !core.res.uars.contains(ctx.uar_page()) {
        return Err(bad_res("QP's UAR page not allocated"));
    }
    if ctx.log_msg_max() > LOG_MAX_MSG {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "log_msg_max above log_max_msg",
        ));
    }
    let log_sq_size = if ctx.no_sq() {
        None
    } else {
        if ctx.log_sq_size() > LOG_MAX_QP_SZ {
            return Err(bad_param(
                Syndrome::BadQueueSize,
                "send queue above log_max_qp_sz",
            ));
        }
        if !core.res.cqs.contains(ctx.cqn_snd()) {
            return Err(bad_res("QP's send CQ does not exist"));
        }
        Some(ctx.log_sq_size())
    };
    let receive = match ctx.rq_type() {
        _ if service == service_type::XRC => xrc_receive(core, ctx.rq_type(), &ctx)?,
        rq_type::REGULAR => {
            if ctx.log_rq_size() > LOG_MAX_QP_SZ || (16u32 << ctx.log_rq_stride()) > 1024 {
                return Err(bad_param(
                    Syndrome::BadQueueSize,
                    "receive queue or stride above the caps",
                ));
            }
            RcReceive::Own {
                log_size: ctx.log_rq_size(),
                log_stride: ctx.log_rq_stride(),
            }
        }
        rq_type::SRQ => {
            if !core.res.rmps.contains(ctx.srqn_rmpn_xrqn()) {
                return Err(bad_res("QP's SRQ (RMP) does not exist"));
            }
            // Tag matching is an RC offload: only RC QPs take receives from a tag-matching
            // XRQ.
            let tm = core
                .res
                .rmps
                .get(ctx.srqn_rmpn_xrqn())
                .and_then(|r| r.xrq.as_deref())
                .is_some_and(|x| x.list.is_some());
            if tm && service != service_type::RC {
                return Err(bad_param(
                    Syndrome::BadQpParams,
                    "only RC QPs take receives from a tag-matching XRQ",
                ));
            }
            RcReceive::Shared(ctx.srqn_rmpn_xrqn())
        }
        rq_type::ZERO_LEN => RcReceive::None,
        _ => {
            return Err(bad_param(
                Syndrome::BadQpParams,
                "cross-channel receive queues are not modelled",
            ))
        }
    };
    // The rendezvous offload (`offload_type` 1, the one value mlx5_ib writes) hands the QP's
    // send side to its tag-matching XRQ.
    let rndv_offload = match ctx.offload_type() {
        0 => false,
        cxdirect_hw::xrq::QPC_OFFLOAD_TYPE_RNDV => true,
        _ => {
            return Err(bad_param(
                Syndrome::BadQpParams,
                "offload_type other than none or rendezvous",
            ))
        }
    };
    if !matches!(receive, RcReceive::None | RcReceive::Xrc { .. })
        && !core.res.cqs.contains(ctx.cqn_rcv())
    {
        return Err(bad_res("QP's receive CQ does not exist"));
    }
    let rq_bytes = receive.ring_bytes();
    let sq_bytes = log_sq_size.map_or(0, |log| 64u64 << log);
    let size = rq_bytes + sq_bytes;
    // A DEVX QP (`devx_set_umem_valid`) names umems of its user context instead of a page
    // list and a doorbell address: its rings (receive first, then send) at `wq_umem_offset`
    // of `wq_umem_id`, its doorbell record at offset `dbr_addr` of `dbr_umem_id`.
    let uid = cmd.uid();
    let mut umems = Vec::new();
    let buf = if size == 0 {
        QueueBuffer {
            pas: Vec::new(),
            log_page: 12,
            offset: 0,
            size: 0,
        }
    } else if cmd.wq_umem_valid() {
        umems.push(cmd.wq_umem_id());
        super::devx::umem_buffer(
            core,
            uid,
            cmd.wq_umem_id(),
            cmd.wq_umem_offset(),
            size,
            false,
        )?
    } else {
        queue_buffer(
            ctx.log_page_size(),
            ctx.page_offset(),
            size,
            cmd.pas_capacity(),
            |i| cmd.pas(i).ok(),
        )?
    };
    // A QP with a ring of its own needs a doorbell record.
    let dbr = if ctx.dbr_umem_valid() {
        umems.push(ctx.dbr_umem_id());
        super::devx::umem_dbr(core, uid, ctx.dbr_umem_id(), ctx.dbr_addr())?
    } else {
        if size != 0 {
            check_dbr(ctx.dbr_addr())?;
        }
        ctx.dbr_addr()
    };
    let dci_streams = super::dci::streams_at_create(service, &ctx)?;
    let send_counter = super::send_dbr_mode::at_create(core, &ctx, log_sq_size.is_some())?;
    let mut stored = context_bytes(ctx.as_bytes());
    Qpc::new(&mut stored[..])
        .map_err(|_| missing("qpc"))?
        .set_state(state::RST);
    let slot = store_new_context(core, &stored)?;
    let qp = Qp {
        service,
        state: state::RST,
        pd: ctx.pd(),
        uar: ctx.uar_page(),
        cqn_snd: ctx.cqn_snd(),
        cqn_rcv: ctx.cqn_rcv(),
        buf,
        dbr,
        log_sq_size,
        send_counter,
        rndv_offload,
        receive,
        user_index: ctx.user_index(),
        log_msg_max: ctx.log_msg_max(),
        mtu: 0,
        remote_qpn: 0,
        q_key: 0,
        path: RcPath::default(),
        next_send_psn: 0,
        next_rcv_psn: 0,
        retry_count: 0,
        rnr_retry: 0,
        min_rnr_nak: 0,
        log_sra_max: 0,
        log_rra_max: 0,
        log_ack_req_freq: 0,
        rre: false,
        rwe: false,
        rae: false,
        sq_consumed: 0,
        resp: Default::default(),
        req: Default::default(),
        counter_set: 0,
        block_lb_mc: ctx.block_lb_mc(),
        deth_sqpn: ctx.deth_sqpn(),
        dci: None,
        dci_streams,
        dc_responder: None,
        slot,
    };
    let table = if matches!(service, service_type::UD | service_type::QP1) {
        &mut core.res.ud_qps
    } else {
        &mut core.res.qps
    };
    let Some(qpn) = table.insert(qp) else {
        release_context(core, slot);
        return Err(CmdError::new(
            CmdStatus::NoResources,
            Syndrome::TableFull,
            "QP table full",
        ));
    };
    attach(core, qpn, true);
    super::devx::hold(core, &umems, (crate::objects::devx::Owned::Qp, qpn));
    output_as!(CreateQpOut<&mut [u8]>, output).set_qpn(qpn);
    Ok(())
}

/// The receive side of an XRC QP: its XRC domain must exist, and the SRQ it names (with
/// `rq_type` SRQ, as Linux's `get_rx_type` gives every XRC QP; zero-length is accepted too)
/// must be an XRC SRQ or an RMP.
fn xrc_receive(core: &Core, kind: u8, ctx: &Qpc<&[u8]>) -> Result<RcReceive, CmdError> {
    if !core.res.xrcds.contains(ctx.xrcd()) {
        return Err(bad_res("XRC QP's XRC domain does not exist"));
    }
    let srqn = ctx.srqn_rmpn_xrqn();
    match kind {
        rq_type::SRQ if core.res.xrc_srqs.contains(srqn) || core.res.rmps.contains(srqn) => {}
        rq_type::ZERO_LEN => {}
        rq_type::SRQ => return Err(bad_res("XRC QP's SRQ does not exist")),
        _ => {
            return Err(bad_param(
                Syndrome::BadQpParams,
                "an XRC QP has no receive queue of its own",
            ))
        }
    }
    Ok(RcReceive::Xrc {
        xrcd: ctx.xrcd(),
        srqn,
    })
}

/// QP `qpn`, RC or datagram. A DCT's responder contexts are the device's own QPs: no
/// command reaches them.
fn find(core: &Core, qpn: u32) -> Option<&Qp> {
    match core.res.qps.get(qpn) {
        Some(qp) if qp.dc_responder.is_some() => None,
        Some(qp) => Some(qp),
        None => core.res.ud_qps.get(qpn),
    }
}

/// QP `qpn`, RC or datagram, to change (never a DCT's responder context).
fn find_mut(core: &mut Core, qpn: u32) -> Option<&mut Qp> {
    if core.res.qps.contains(qpn) {
        core.res
            .qps
            .get_mut(qpn)
            .filter(|qp| qp.dc_responder.is_none())
    } else {
        core.res.ud_qps.get_mut(qpn)
    }
}

/// True when QP `qpn` is a datagram QP (UD or GSI).
pub(crate) fn is_datagram(core: &Core, qpn: u32) -> bool {
    core.res.ud_qps.contains(qpn)
}

/// Counts (or, `add` false, uncounts) QP `qpn` as a user of its CQs and RMP.
fn attach(core: &mut Core, qpn: u32, add: bool) {
    let Some(qp) = find(core, qpn) else {
        return;
    };
    let (snd, rcv, receive) = (qp.log_sq_size.map(|_| qp.cqn_snd), qp.cqn_rcv, qp.receive);
    // An XRC QP's receives complete on the XRC SRQ's CQ, never on `cqn_rcv`.
    let rcv = (!matches!(receive, RcReceive::None | RcReceive::Xrc { .. })).then_some(rcv);
    for cqn in [snd, rcv].into_iter().flatten() {
        if let Some(cq) = core.res.cqs.get_mut(cqn) {
            cq.users = if add {
                cq.users + 1
            } else {
                cq.users.saturating_sub(1)
            };
        }
    }
    if let RcReceive::Shared(rmpn) = receive {
        if let Some(rmp) = core.res.rmps.get_mut(rmpn) {
            rmp.rq_users = if add {
                rmp.rq_users + 1
            } else {
                rmp.rq_users.saturating_sub(1)
            };
        }
    }
}

/// The state a transition starts from (`None`: any state) and leads to, and the optional
/// attributes it takes for RC: Linux's `opt_mask` table, plus the counter set that mlx5_ib
/// binds with its own bit after that table filtered the rest.
fn transition(opcode: Opcode) -> (Option<&'static [u8]>, u8, u32) {
    const ACCESS: u32 = optpar::RRE | optpar::RAE | optpar::RWE;
    const COUNTER: u32 = optpar::COUNTER_SET_ID;
    match opcode {
        Opcode::Rst2initQp => (Some(&[state::RST]), state::INIT, COUNTER),
        // rdma_cm's accept changes access, P_Key index and port in INIT (`cma_modify_qp_init`);
        // mlx5_ib's `opt_mask[INIT][INIT][RC]`.
        Opcode::Init2initQp => (
            Some(&[state::INIT]),
            state::INIT,
            ACCESS
                | optpar::PKEY_INDEX
                | optpar::PRI_PORT
                | optpar::LAG_TX_AFF
                | COUNTER
                | optpar::DRAIN_SIGERR,
        ),
        Opcode::Init2rtrQp => (
            Some(&[state::INIT]),
            state::RTR,
            optpar::ALT_ADDR_PATH | ACCESS | optpar::PKEY_INDEX | optpar::LAG_TX_AFF | COUNTER,
        ),
        Opcode::Rtr2rtsQp => (
            Some(&[state::RTR]),
            state::RTS,
            optpar::ALT_ADDR_PATH | ACCESS | optpar::PM_STATE | optpar::RNR_TIMEOUT,
        ),
        Opcode::Rts2rtsQp => (
            Some(&[state::RTS]),
            state::RTS,
            ACCESS | optpar::RNR_TIMEOUT | optpar::PM_STATE | optpar::ALT_ADDR_PATH | COUNTER,
        ),
        // Out of SQD, where a `drain_sigerr` QP stops after a signature error: mlx5_ib's
        // `opt_mask[SQD][RTS][RC]`.
        Opcode::SqdRtsQp => (
            Some(&[state::SQD]),
            state::RTS,
            ACCESS | optpar::RNR_TIMEOUT,
        ),
        Opcode::Sqerr2rtsQp => (
            Some(&[state::SQER]),
            state::RTS,
            ACCESS | optpar::RNR_TIMEOUT,
        ),
        Opcode::Qp2errQp => (None, state::ERR, 0),
        _ => (None, state::RST, 0),
    }
}

/// Reads the primary path's fields into `path`.
fn read_path(path: &mut RcPath, ads: &Ads<&[u8]>) {
    path.loopback = ads.fl();
    path.gid_index = ads.src_addr_index();
    path.rgid = ads.rgid();
    path.rmac = ads.rmac();
    path.udp_sport = ads.udp_sport();
    path.hop_limit = ads.hop_limit();
    path.tclass = ads.tclass();
    path.flow_label = ads.flow_label();
    path.prio = ads.eth_prio();
}

/// Checks the primary path INIT2RTR gives: a loopback path, or a RoCE path on an enabled
/// port whose source GID is in the table.
fn check_path(core: &Core, ads: &Ads<&[u8]>) -> CmdResult {
    if ads.fl() {
        return Ok(());
    }
    if ads.rgid().iter().all(|&b| b == 0) {
        return Err(missing(
            "INIT2RTR without a destination GID (or force loopback)",
        ));
    }
    if !core.cfg.roce || !core.port.roce_en {
        return Err(bad_param(
            Syndrome::RoceDisabled,
            "a RoCE path while RoCE is disabled on the vport",
        ));
    }
    if core
        .res
        .gids
        .valid(usize::from(ads.src_addr_index()))
        .is_none()
    {
        return Err(bad_param(
            Syndrome::BadGidIndex,
            "source GID index past the table or unset",
        ));
    }
    Ok(())
}

pub(crate) fn modify_qp(core: &mut Core, opcode: Opcode, input: &[u8]) -> CmdResult {
    // Every transition input starts with opcode, uid, op_mod and qpn; those that carry a
    // context have it (and opt_param_mask) where RST2INIT_QP does.
    let (qpn, mask, with_ctx) = match opcode {
        Opcode::Qp2errQp | Opcode::Qp2rstQp => {
            let cmd = input_as!(cxdirect_hw::qp::Qp2errIn<&[u8]>, input);
            (cmd.qpn(), 0, false)
        }
        _ => {
            let cmd = input_as!(Rst2initQpIn<&[u8]>, input);
            (cmd.qpn(), cmd.opt_param_mask(), true)
        }
    };
    let (from, to, optional) = transition(opcode);
    let qp = find(core, qpn).ok_or(bad_res("no such QP"))?;
    let datagram = matches!(qp.service, service_type::UD | service_type::QP1);
    // Linux's opt_mask table has no optional attribute for the REG_UMR QP; mlx5_ib may still
    // bind a counter set to it as to any QP it opens.
    let umr = qp.service == service_type::REG_UMR;
    let optional = if datagram {
        super::qp_datagram::optional(opcode, qp.service)
    } else if umr {
        optional & optpar::COUNTER_SET_ID
    } else if qp.service == service_type::UC {
        // Linux's `opt_mask[][][MLX5_QP_ST_UC]` rows are the RC rows without remote READ
        // and atomic access and without the RNR timer: UC has neither READs, atomics nor RNR.
        optional & !(optpar::RRE | optpar::RAE | optpar::RNR_TIMEOUT)
    } else {
        optional
    };
    if let Some(from) = from {
        if !from.contains(&qp.state) {
            return Err(bad_qp_state("transition not allowed from the QP's state"));
        }
    }
    if mask & !optional != 0 {
        return Err(bad_param(
            Syndrome::BadQpOptParam,
            "opt_param_mask names an attribute this transition does not take",
        ));
    }
    let mut next = Qp { ..clone_attrs(qp) };
    if with_ctx {
        let ctx = Qpc::new(&input[QPC_BYTE..]).map_err(|_| missing("qpc"))?;
        if datagram {
            super::qp_datagram::apply(opcode, mask, &ctx, &mut next)?;
        } else if umr {
            apply_reg_umr(opcode, mask, &ctx, &mut next)?;
        } else {
            apply(core, opcode, mask, &ctx, &mut next)?;
        }
        if opcode == Opcode::Rts2rtsQp {
            // The attributes of `opt_param_mask_95_32`: a new UDP source port
            // (`mlx5dv_modify_qp_udp_sport`), and in the context extension a DCI stream's
            // reset (`mlx5dv_dci_stream_id_reset`).
            super::udp_sport::rts2rts(input, &ctx, &mut next)?;
            super::dci::rts2rts_extension(input, &mut next)?;
        }
    }
    // The context extension's queue groups (`mlx5dv_modify_qp_sched_elem`), checked here and
    // recorded once the transition holds.
    let groups = super::scheduling::qp_queue_groups(core, opcode, input)?;
    next.state = to;
    if to == state::RST {
        // A QP in reset has empty rings: software (Linux's mlx5_ib sets its heads and both
        // doorbell record counters to 0) starts posting again from WQE 0, and so does the
        // device, with no message half sent or received.
        next.next_send_psn = 0;
        next.next_rcv_psn = 0;
        next.sq_consumed = 0;
        if let SendCounter::Doorbells(posted) = &mut next.send_counter {
            *posted = 0;
        }
        next.resp = Default::default();
        next.req = Default::default();
        next.dci = None;
        if let Some(streams) = next.dci_streams.as_mut() {
            streams.errored_count = 0;
        }
    }
    let resume = opcode == Opcode::SqdRtsQp;
    let (old_set, new_set) = (qp.counter_set, next.counter_set);
    if new_set != old_set {
        // Checked first: a missing set refuses the command before anything changes.
        super::qcounters::check_named(core, new_set)?;
    }
    let slot = next.slot;
    let bytes = context_of(&next);
    let qp = find_mut(core, qpn).ok_or(bad_res("no such QP"))?;
    *qp = next;
    write_context(core, slot, &bytes);
    if resume {
        // The send queue goes on from the WQE it drained before.
        crate::engine::rc::resume_after_drain(core, qpn);
    }
    if let Some((requester, responder)) = groups {
        core.res.sched.set_qp(qpn, requester, responder);
    }
    if to == state::ERR {
        if datagram {
            crate::engine::ud::flush_on_error(core, qpn);
        } else {
            crate::engine::rc::flush_on_error(core, qpn);
        }
    }
    Ok(())
}

/// A copy of a QP's attributes (the buffer's page list included) to change before committing.
fn clone_attrs(qp: &Qp) -> Qp {
    Qp {
        service: qp.service,
        state: qp.state,
        pd: qp.pd,
        uar: qp.uar,
        cqn_snd: qp.cqn_snd,
        cqn_rcv: qp.cqn_rcv,
        buf: qp.buf.clone(),
        dbr: qp.dbr,
        log_sq_size: qp.log_sq_size,
        send_counter: qp.send_counter,
        rndv_offload: qp.rndv_offload,
        receive: qp.receive,
        user_index: qp.user_index,
        log_msg_max: qp.log_msg_max,
        mtu: qp.mtu,
        remote_qpn: qp.remote_qpn,
        q_key: qp.q_key,
        path: qp.path,
        next_send_psn: qp.next_send_psn,
        next_rcv_psn: qp.next_rcv_psn,
        retry_count: qp.retry_count,
        rnr_retry: qp.rnr_retry,
        min_rnr_nak: qp.min_rnr_nak,
        log_sra_max: qp.log_sra_max,
        log_rra_max: qp.log_rra_max,
        log_ack_req_freq: qp.log_ack_req_freq,
        rre: qp.rre,
        rwe: qp.rwe,
        rae: qp.rae,
        sq_consumed: qp.sq_consumed,
        resp: qp.resp.clone(),
        req: qp.req.clone(),
        counter_set: qp.counter_set,
        block_lb_mc: qp.block_lb_mc,
        deth_sqpn: qp.deth_sqpn,
        dci: qp.dci,
        dci_streams: qp.dci_streams,
        dc_responder: qp.dc_responder,
        slot: qp.slot,
    }
}

/// Reads a transition's attributes from `ctx` into `qp`; fails without side effects.
fn apply(core: &Core, opcode: Opcode, mask: u32, ctx: &Qpc<&[u8]>, qp: &mut Qp) -> CmdResult {
    // RST2INIT always carries the counter set (mlx5_ib writes the port's set there without an
    // optional-parameter bit); later transitions only with the bit (Linux's INIT2RTR leaves
    // the field zero: reading it there unbound every QP from its set).
    let counter = opcode == Opcode::Rst2initQp || mask & optpar::COUNTER_SET_ID != 0;
    if counter {
        qp.counter_set = u32::from(ctx.counter_set_id());
    }
    let ads = ctx.primary_address_path();
    let access = |qp: &mut Qp, mandatory: bool| {
        if mandatory || mask & optpar::RRE != 0 {
            qp.rre = ctx.rre();
        }
        if mandatory || mask & optpar::RWE != 0 {
            qp.rwe = ctx.rwe();
        }
        if mandatory || mask & optpar::RAE != 0 {
            qp.rae = ctx.rae();
        }
    };
    if mask & optpar::RNR_TIMEOUT != 0 {
        qp.min_rnr_nak = ctx.min_rnr_nak();
    }
    match opcode {
        Opcode::Rst2initQp => {
            // Port and access flags are mandatory (IB_QP_PORT, IB_QP_ACCESS_FLAGS).
            take_port(qp, &ads)?;
            access(qp, true);
        }
        Opcode::Init2initQp => {
            // Only what the mask names changes.
            if mask & optpar::PRI_PORT != 0 {
                take_port(qp, &ads)?;
            }
            if mask & optpar::PKEY_INDEX != 0 {
                qp.path.pkey_index = ads.pkey_index();
            }
            // libmlx5's `mlx5_modify_qp_drain_sigerr` for MLX5DV_QP_CREATE_SIG_PIPELINING.
            if mask & optpar::DRAIN_SIGERR != 0 {
                qp.req.drain_sigerr = ctx.drain_sigerr();
            }
            access(qp, false);
        }
        Opcode::Init2rtrQp => {
            let code = ctx.mtu();
            if code == 0 {
                return Err(missing("INIT2RTR without a path MTU"));
            }
            check_path_mtu(core, code)?;
            // A DC initiator has no peer of its own: each WQE's address vector names the DCT
            // and the path (mlx5_ib's `modify_dci_qp_is_ok` takes INIT2RTR with the path MTU
            // alone, the address vector optional, and never a destination QP).
            let dci = qp.service == service_type::DCI;
            if ctx.remote_qpn() == 0 && !dci {
                return Err(missing("INIT2RTR without a destination QP"));
            }
            if ctx.log_rra_max() > LOG_MAX_RA_QP {
                return Err(bad_param(
                    Syndrome::BadQpParams,
                    "log_rra_max above log_max_ra_res_qp",
                ));
            }
            check_log_msg_max(ctx)?;
            if !dci {
                check_path(core, &ads)?;
            }
            qp.mtu = code;
            qp.log_msg_max = ctx.log_msg_max();
            qp.remote_qpn = ctx.remote_qpn();
            qp.next_rcv_psn = ctx.next_rcv_psn();
            qp.log_rra_max = ctx.log_rra_max();
            qp.min_rnr_nak = ctx.min_rnr_nak();
            if !dci {
                read_path(&mut qp.path, &ads);
            }
            if mask & optpar::PKEY_INDEX != 0 {
                qp.path.pkey_index = ads.pkey_index();
            }
            access(qp, false);
        }
        Opcode::Rtr2rtsQp => {
            if ctx.log_sra_max() > LOG_MAX_RA_QP {
                return Err(bad_param(
                    Syndrome::BadQpParams,
                    "log_sra_max above log_max_ra_req_qp",
                ));
            }
            qp.next_send_psn = ctx.next_send_psn();
            qp.retry_count = ctx.retry_count();
            qp.rnr_retry = ctx.rnr_retry();
            qp.log_sra_max = ctx.log_sra_max();
            qp.log_ack_req_freq = ctx.log_ack_req_freq();
            qp.path.ack_timeout = ads.ack_timeout();
            access(qp, false);
        }
        Opcode::Rts2rtsQp | Opcode::Sqerr2rtsQp | Opcode::SqdRtsQp => access(qp, false),
        _ => {}
    }
    Ok(())
}

/// Reads the REG_UMR QP's transition attributes: the port at RST2INIT (Linux's
/// `mlx5r_umr_qp_rst2rts` gives port 1 and P_Key index 0), the counter set. The MTU (4096) and
/// `log_msg_max` mlx5_ib writes at every transition mean nothing for a QP without a wire, and
/// RTR and RTS need no path, peer or PSN.
fn apply_reg_umr(opcode: Opcode, mask: u32, ctx: &Qpc<&[u8]>, qp: &mut Qp) -> CmdResult {
    // The counter set: always at RST2INIT, later only with its optional-parameter bit.
    if opcode == Opcode::Rst2initQp || mask & optpar::COUNTER_SET_ID != 0 {
        qp.counter_set = u32::from(ctx.counter_set_id());
    }
    if opcode == Opcode::Rst2initQp {
        take_port(qp, &ctx.primary_address_path())?;
    }
    Ok(())
}

/// Refuses path MTU code `code` unless it is known and at most the port's.
fn check_path_mtu(core: &Core, code: u8) -> CmdResult {
    if mtu::bytes(code).is_none() || code > port_max_mtu(core) {
        return Err(bad_param(
            Syndrome::BadPathMtu,
            "path MTU unknown or above the port's",
        ));
    }
    Ok(())
}

/// Refuses a context whose `log_msg_max` is above the device's.
fn check_log_msg_max(ctx: &Qpc<&[u8]>) -> CmdResult {
    if ctx.log_msg_max() > LOG_MAX_MSG {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "log_msg_max above log_max_msg",
        ));
    }
    Ok(())
}

/// RST2INIT's port (it must be port 1) and P_Key index from the primary path.
fn take_port(qp: &mut Qp, ads: &Ads<&[u8]>) -> CmdResult {
    if ads.vhca_port_num() != 1 {
        return Err(missing("RST2INIT without port 1 in the primary path"));
    }
    qp.path.port = ads.vhca_port_num();
    qp.path.pkey_index = ads.pkey_index();
    Ok(())
}

/// The QP's context as QUERY_QP reports it.
fn context_of(qp: &Qp) -> Vec<u8> {
    let mut ctx = Qpc::zeroed();
    ctx.set_state(qp.state)
        .set_st(qp.service)
        .set_pd(qp.pd)
        .set_uar_page(qp.uar)
        .set_cqn_snd(qp.cqn_snd)
        .set_cqn_rcv(qp.cqn_rcv)
        .set_dbr_addr(qp.dbr)
        .set_send_dbr_mode(match qp.send_counter {
            SendCounter::Record => send_dbr_mode::DBR_VALID,
            SendCounter::Doorbells(_) => send_dbr_mode::NO_DBR_EXT,
        })
        .set_user_index(qp.user_index)
        .set_no_sq(qp.log_sq_size.is_none())
        .set_offload_type(if qp.rndv_offload {
            cxdirect_hw::xrq::QPC_OFFLOAD_TYPE_RNDV
        } else {
            0
        })
        .set_log_sq_size(qp.log_sq_size.unwrap_or(0))
        .set_log_msg_max(qp.log_msg_max)
        .set_mtu(qp.mtu)
        .set_remote_qpn(qp.remote_qpn)
        .set_q_key(qp.q_key)
        .set_next_send_psn(qp.next_send_psn)
        .set_next_rcv_psn(qp.next_rcv_psn)
        .set_retry_count(qp.retry_count)
        .set_rnr_retry(qp.rnr_retry)
        .set_min_rnr_nak(qp.min_rnr_nak)
        .set_log_sra_max(qp.log_sra_max)
        .set_log_rra_max(qp.log_rra_max)
        .set_log_ack_req_freq(qp.log_ack_req_freq)
        .set_rre(qp.rre)
        .set_rwe(qp.rwe)
        .set_rae(qp.rae)
        .set_counter_set_id(qp.counter_set as u8)
        .set_block_lb_mc(qp.block_lb_mc)
        .set_deth_sqpn(qp.deth_sqpn)
        .set_log_num_dci_stream_channels(qp.dci_streams.map_or(0, |s| s.log_channels))
        .set_log_num_dci_errored_streams(qp.dci_streams.map_or(0, |s| s.log_errored))
        .set_drain_sigerr(qp.req.drain_sigerr)
        // Where the send queue stands (libmlx5's `mlx5_qp_query_sqd` reads it in SQD).
        .set_hw_sq_wqebb_counter(qp.sq_consumed);
    match qp.receive {
        RcReceive::Own {
            log_size,
            log_stride,
        } => {
            ctx.set_rq_type(rq_type::REGULAR)
                .set_log_rq_size(log_size)
                .set_log_rq_stride(log_stride);
        }
        RcReceive::Shared(rmpn) => {
            ctx.set_rq_type(rq_type::SRQ).set_srqn_rmpn_xrqn(rmpn);
        }
        RcReceive::None => {
            ctx.set_rq_type(rq_type::ZERO_LEN);
        }
        RcReceive::Xrc { xrcd, srqn } => {
            ctx.set_rq_type(rq_type::SRQ)
                .set_srqn_rmpn_xrqn(srqn)
                .set_xrcd(xrcd);
        }
    }
    let p = qp.path;
    ctx.primary_address_path_mut()
        .set_fl(p.loopback)
        .set_src_addr_index(p.gid_index)
        .set_rgid(p.rgid)
        .set_rmac(p.rmac)
        .set_udp_sport(p.udp_sport)
        .set_hop_limit(p.hop_limit)
        .set_tclass(p.tclass)
        .set_flow_label(p.flow_label)
        .set_vhca_port_num(p.port)
        .set_pkey_index(p.pkey_index)
        .set_ack_timeout(p.ack_timeout)
        .set_grh(!p.loopback);
    ctx.layout_bytes().to_vec()
}

pub(crate) fn query_qp(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let qpn = input_as!(QueryQpIn<&[u8]>, input).qpn();
    let qp = find(core, qpn).ok_or(bad_res("no such QP"))?;
    let ctx = context_of(qp);
    // Older headers end query_qp_out at the page list (0x110 bytes); newer ones add an
    // extension: either length carries the whole context.
    let out = output
        .get_mut(QPC_BYTE..QPC_BYTE + <Qpc as Layout>::SIZE)
        .ok_or(CmdError::new(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort,
            "output shorter than query_qp_out's context",
        ))?;
    out.copy_from_slice(&ctx);
    Ok(())
}

pub(crate) fn destroy_qp(core: &mut Core, input: &[u8]) -> CmdResult {
    let qpn = input_as!(DestroyQpIn<&[u8]>, input).qpn();
    if find(core, qpn).is_none() {
        return Err(bad_res("no such QP"));
    }
    attach(core, qpn, false);
    let table = if is_datagram(core, qpn) {
        &mut core.res.ud_qps
    } else {
        &mut core.res.qps
    };
    let qp = table.remove(qpn).ok_or(bad_res("no such QP"))?;
    // Linux detaches every group first (`ib_uverbs_detach_umcast`; the RDMA core counts
    // attachments in `qp->usecnt` and refuses to destroy an attached QP); the firmware
    // forgets any membership left so a later QP of that number joins nothing.
    core.res.mcgs.forget(qpn);
    core.res.sched.set_qp(qpn, 0, 0);
    release_context(core, qp.slot);
    Ok(())
}
