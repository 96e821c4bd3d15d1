//! UARs, protection domains, transport domains, TISs, TIRs and RQ tables.

use super::{
    bad_param, bad_res, bad_state, input_as, output_as, table_full, CmdError, CmdResult, Core,
    Syndrome,
};
use crate::objects::{Rqt, Tir, TirDispatch, Tis};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::hca::{
    AllocPdOut, AllocTransportDomainOut, AllocUarOut, AllocXrcdOut, DeallocPdIn,
    DeallocTransportDomainIn, DeallocUarIn, DeallocXrcdIn,
};
use cxdirect_hw::tir::{
    CreateRqtIn, CreateRqtOut, CreateTirIn, CreateTirOut, CreateTisIn, CreateTisOut, DestroyRqtIn,
    DestroyTirIn, DestroyTisIn, ModifyTisIn,
};

pub(crate) const fn in_use(what: &'static str) -> CmdError {
    bad_state(Syndrome::ObjectInUse, what)
}

pub(crate) fn alloc_uar(core: &mut Core, output: &mut [u8]) -> CmdResult {
    let uar = core
        .res
        .uars
        .insert(())
        .ok_or(table_full("no free UAR page"))?;
    output_as!(AllocUarOut<&mut [u8]>, output).set_uar(uar);
    Ok(())
}

/// DEALLOC_UAR. Accepted while queues still name the page: the PRM has no syndrome for it and
/// Linux does not order the two. libmlx5 puts its CQs and QPs on UARs it allocates itself
/// (`mlx5_alloc_dyn_uar`, passed by page index with `MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX` /
/// `MLX5_QP_FLAG_UAR_PAGE_INDEX`), which mlx5_ib keeps as `MLX5_IB_OBJECT_UAR` objects with no
/// reference from the queues; when a process exits, ib_uverbs destroys those objects and the
/// queues in one sweep (`__uverbs_cleanup_ufile`), so a UAR's `mlx5_cmd_uar_dealloc` may come
/// before the DESTROY of a queue that rings it. A doorbell written to the freed page later is
/// no doorbell: it is dropped and counted (`bad_doorbells`).
pub(crate) fn dealloc_uar(core: &mut Core, input: &[u8]) -> CmdResult {
    let uar = input_as!(DeallocUarIn<&[u8]>, input).uar();
    core.res.uars.remove(uar).ok_or(bad_res("no such UAR"))?;
    Ok(())
}

pub(crate) fn alloc_pd(core: &mut Core, output: &mut [u8]) -> CmdResult {
    let pd = core
        .res
        .pds
        .insert(0)
        .ok_or(table_full("no free protection domain"))?;
    output_as!(AllocPdOut<&mut [u8]>, output).set_pd(pd);
    Ok(())
}

pub(crate) fn dealloc_pd(core: &mut Core, input: &[u8]) -> CmdResult {
    let pd = input_as!(DeallocPdIn<&[u8]>, input).pd();
    let used = core.res.mkeys.iter().any(|(_, m)| m.pd == pd)
        || core.res.sqs.iter().any(|(_, s)| s.wq.pd == pd)
        || core.res.rmps.iter().any(|(_, r)| r.wq.pd == pd)
        || core.res.qps.iter().any(|(_, q)| q.pd == pd)
        || core.res.ud_qps.iter().any(|(_, q)| q.pd == pd)
        || core.res.xrc_srqs.iter().any(|(_, s)| s.wq.pd == pd)
        || core
            .res
            .rqs
            .iter()
            .any(|(_, r)| r.wq.as_ref().is_some_and(|w| w.pd == pd));
    if used {
        return Err(in_use("protection domain still used"));
    }
    core.res
        .pds
        .remove(pd)
        .ok_or(bad_res("no such protection domain"))?;
    Ok(())
}

/// ALLOC_XRCD: an XRC domain. Only reported (`xrc`) with RoCE: Linux's mlx5_ib allocates two
/// when it probes a RoCE port and refuses the port without them.
pub(crate) fn alloc_xrcd(core: &mut Core, output: &mut [u8]) -> CmdResult {
    if !core.cfg.roce {
        return Err(CmdError::new(
            CmdStatus::BadOpcode,
            Syndrome::UnknownOpcode,
            "XRC is reported only with RoCE",
        ));
    }
    let xrcd = core
        .res
        .xrcds
        .insert(())
        .ok_or(table_full("no free XRC domain"))?;
    output_as!(AllocXrcdOut<&mut [u8]>, output).set_xrcd(xrcd);
    Ok(())
}

/// DEALLOC_XRCD.
pub(crate) fn dealloc_xrcd(core: &mut Core, input: &[u8]) -> CmdResult {
    let xrcd = input_as!(DeallocXrcdIn<&[u8]>, input).xrcd();
    if super::xrc::xrcd_in_use(core, xrcd) {
        return Err(in_use("XRC domain still named by an XRC SRQ"));
    }
    core.res
        .xrcds
        .remove(xrcd)
        .ok_or(bad_res("no such XRC domain"))?;
    Ok(())
}

pub(crate) fn alloc_td(core: &mut Core, output: &mut [u8]) -> CmdResult {
    let td = core
        .res
        .tds
        .insert(0)
        .ok_or(table_full("no free transport domain"))?;
    output_as!(AllocTransportDomainOut<&mut [u8]>, output).set_transport_domain(td);
    Ok(())
}

pub(crate) fn dealloc_td(core: &mut Core, input: &[u8]) -> CmdResult {
    let td = input_as!(DeallocTransportDomainIn<&[u8]>, input).transport_domain();
    let used = core.res.tises.iter().any(|(_, t)| t.td == td)
        || core.res.tirs.iter().any(|(_, t)| t.td == td);
    if used {
        return Err(in_use("transport domain still used by a TIS or TIR"));
    }
    core.res
        .tds
        .remove(td)
        .ok_or(bad_res("no such transport domain"))?;
    Ok(())
}

pub(crate) fn create_tis(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateTisIn<&[u8]>, input);
    let td = cmd.ctx().transport_domain();
    if !core.res.tds.contains(td) {
        return Err(bad_res("TIS transport domain does not exist"));
    }
    // Bit 0 of `prio` is not the priority's: Linux writes the priority shifted left by one.
    let prio = cmd.ctx().prio() >> 1;
    let tisn = core
        .res
        .tises
        .insert(Tis {
            td,
            sq_users: 0,
            prio,
        })
        .ok_or(table_full("TIS table full"))?;
    output_as!(CreateTisOut<&mut [u8]>, output).set_tisn(tisn);
    Ok(())
}

/// MODIFY_TIS: the priority its SQs send at (`bitmask.prio`: mlx5_ib's
/// `modify_raw_packet_eth_prio`, a raw packet QP's SL given with its address) and its LAG port
/// affinity (`modify_raw_packet_tx_affinity`). The function has one port and no LAG: an
/// affinity of 0 (the device's choice) or 1 is taken, another names no port and is refused,
/// the whole command with it.
pub(crate) fn modify_tis(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyTisIn<&[u8]>, input);
    let (bitmask, ctx) = (cmd.bitmask(), cmd.ctx());
    if !core.res.tises.contains(cmd.tisn()) {
        return Err(bad_res("no such TIS"));
    }
    if bitmask.lag_tx_port_affinity() && ctx.lag_tx_port_affinity() > 1 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "TIS lag_tx_port_affinity names no port of the function (0 or 1)",
        ));
    }
    if bitmask.prio() {
        if let Some(tis) = core.res.tises.get_mut(cmd.tisn()) {
            // Bit 0 is not the priority's, as at CREATE_TIS.
            tis.prio = ctx.prio() >> 1;
        }
    }
    Ok(())
}

pub(crate) fn destroy_tis(core: &mut Core, input: &[u8]) -> CmdResult {
    let tisn = input_as!(DestroyTisIn<&[u8]>, input).tisn();
    let tis = core.res.tises.get(tisn).ok_or(bad_res("no such TIS"))?;
    if tis.sq_users > 0 {
        return Err(in_use("TIS still used by an SQ"));
    }
    core.res.tises.remove(tisn);
    Ok(())
}

/// Reads and checks an indirect TIR's hash: function, key and outer field selector.
fn tir_hash(
    ctx: &cxdirect_hw::tir::Tirc<&[u8]>,
    rqtn: u32,
) -> Result<TirDispatch, super::CmdError> {
    let hash_fn = ctx.rx_hash_fn();
    if hash_fn > 2 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "rx_hash_fn must be 0, 1 or 2",
        ));
    }
    let sel = ctx.rx_hash_field_selector_outer();
    if sel.l3_prot_type() > 1 || sel.l4_prot_type() > 1 || sel.selected_fields() > 0x1f {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "bad RX hash field selector",
        ));
    }
    Ok(TirDispatch::Indirect {
        rqtn,
        hash_fn,
        key: crate::rss::ToeplitzKey::new(&ctx.rx_hash_toeplitz_key_bytes()),
        l3: sel.l3_prot_type(),
        l4: sel.l4_prot_type(),
        fields: sel.selected_fields(),
        symmetric: ctx.rx_hash_symmetric(),
    })
}

/// MODIFY_TIR: the self-loopback block and an indirect TIR's hash may change; packet merging
/// (LRO) may only be asked off, as the model merges nothing.
pub(crate) fn modify_tir(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(cxdirect_hw::tir::ModifyTirIn<&[u8]>, input);
    let tirn = cmd.tirn();
    let bitmask = cmd.bitmask();
    let ctx = cmd.ctx();
    let tir = core.res.tirs.get(tirn).ok_or(bad_res("no such TIR"))?;
    if bitmask.packet_merge() && ctx.lro_enable_mask() != 0 {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "packet merging (LRO) is not modelled",
        ));
    }
    let dispatch = if bitmask.hash() {
        match tir.dispatch {
            TirDispatch::Indirect { rqtn, .. } => Some(tir_hash(&ctx, rqtn)?),
            TirDispatch::Direct { .. } => {
                return Err(bad_param(
                    Syndrome::BadSteeringParams,
                    "a direct TIR has no hash to modify",
                ))
            }
        }
    } else {
        None
    };
    let self_lb_block = ctx.self_lb_block();
    if let Some(tir) = core.res.tirs.get_mut(tirn) {
        if bitmask.self_lb_en() {
            tir.self_lb_block = self_lb_block;
        }
        if let Some(dispatch) = dispatch {
            tir.dispatch = dispatch;
        }
    }
    Ok(())
}

/// The transport domain a TIR names when it names none.
const NO_TRANSPORT_DOMAIN: u32 = 0;

pub(crate) fn create_tir(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateTirIn<&[u8]>, input);
    let ctx = cmd.ctx();
    let td = ctx.transport_domain();
    // Transport domain 0 is no domain (ALLOC_TRANSPORT_DOMAIN never returns it), and is
    // accepted: rdma-core's test_mlx5_dr creates its DEVX TIR with only `inline_rqn` set
    // (`Mlx5DrTirResources.create_qps`) and expects it and a rule's DEST_TIR to it to work. No
    // SQ sends from domain 0, so such a TIR sees no frame as self loopback.
    if td != NO_TRANSPORT_DOMAIN && !core.res.tds.contains(td) {
        return Err(bad_res("TIR transport domain does not exist"));
    }
    let dispatch = match ctx.disp_type() {
        0 => {
            let rqn = ctx.inline_rqn();
            if !core.res.rqs.contains(rqn) {
                return Err(bad_res("direct TIR names an RQ that does not exist"));
            }
            TirDispatch::Direct { rqn }
        }
        1 => {
            let rqtn = ctx.indirect_table();
            if !core.res.rqts.contains(rqtn) {
                return Err(bad_res(
                    "indirect TIR names an RQ table that does not exist",
                ));
            }
            tir_hash(&ctx, rqtn)?
        }
        _ => {
            return Err(bad_param(
                Syndrome::BadSteeringParams,
                "disp_type must be 0 (direct) or 1 (indirect)",
            ))
        }
    };
    let self_lb_block = ctx.self_lb_block();
    let tirn = core
        .res
        .tirs
        .insert(Tir {
            td,
            dispatch: dispatch.clone(),
            self_lb_block,
            flow_users: 0,
        })
        .ok_or(table_full("TIR table full"))?;
    match dispatch {
        TirDispatch::Direct { rqn } => {
            if let Some(rq) = core.res.rqs.get_mut(rqn) {
                rq.tir_users += 1;
            }
        }
        TirDispatch::Indirect { rqtn, .. } => {
            if let Some(rqt) = core.res.rqts.get_mut(rqtn) {
                rqt.tir_users += 1;
            }
        }
    }
    // The TIR's ICM address, where a software steering entry sends a frame to it.
    let icm = crate::sw_steering::terminals::tir_address(tirn);
    output_as!(CreateTirOut<&mut [u8]>, output)
        .set_tirn(tirn)
        .set_icm_address_31_0(icm as u32)
        .set_icm_address_39_32((icm >> 32) as u8)
        .set_icm_address_63_40((icm >> 40) as u32);
    Ok(())
}

pub(crate) fn destroy_tir(core: &mut Core, input: &[u8]) -> CmdResult {
    let tirn = input_as!(DestroyTirIn<&[u8]>, input).tirn();
    let tir = core.res.tirs.get(tirn).ok_or(bad_res("no such TIR"))?;
    if tir.flow_users > 0 {
        return Err(in_use("TIR still the destination of a flow entry"));
    }
    let tir = core.res.tirs.remove(tirn).ok_or(bad_res("no such TIR"))?;
    match tir.dispatch {
        TirDispatch::Direct { rqn } => {
            if let Some(rq) = core.res.rqs.get_mut(rqn) {
                rq.tir_users = rq.tir_users.saturating_sub(1);
            }
        }
        TirDispatch::Indirect { rqtn, .. } => {
            if let Some(rqt) = core.res.rqts.get_mut(rqtn) {
                rqt.tir_users = rqt.tir_users.saturating_sub(1);
            }
        }
    }
    Ok(())
}

pub(crate) fn create_rqt(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateRqtIn<&[u8]>, input);
    let ctx = cmd.rqt_context();
    let actual = usize::from(ctx.rqt_actual_size());
    let max = usize::from(ctx.rqt_max_size());
    let limit = 1usize << super::caps::LOG_MAX_RQT_SIZE;
    if actual == 0 || actual > max || max > limit {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "RQ table size must be 1..=max_size, max_size <= 2^log_max_rqt_size",
        ));
    }
    let mut rqs = Vec::with_capacity(actual);
    for i in 0..actual {
        let rqn = cmd
            .rq_num(i)
            .map_err(|_| bad_param(Syndrome::BadSteeringParams, "RQ table entry past the input"))?;
        if !core.res.rqs.contains(rqn) {
            return Err(bad_res("RQ table names an RQ that does not exist"));
        }
        rqs.push(rqn);
    }
    for rqn in &rqs {
        if let Some(rq) = core.res.rqs.get_mut(*rqn) {
            rq.rqt_users += 1;
        }
    }
    let rqtn = core
        .res
        .rqts
        .insert(Rqt {
            rqs,
            max,
            tir_users: 0,
        })
        .ok_or(table_full("RQ table table full"))?;
    output_as!(CreateRqtOut<&mut [u8]>, output).set_rqtn(rqtn);
    Ok(())
}

/// MODIFY_RQT: the RQ list may be replaced, up to the table's maximum size.
pub(crate) fn modify_rqt(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(cxdirect_hw::tir::ModifyRqtIn<&[u8]>, input);
    let rqtn = cmd.rqtn();
    let max = core
        .res
        .rqts
        .get(rqtn)
        .ok_or(bad_res("no such RQ table"))?
        .max;
    if !cmd.bitmask().rqn_list() {
        return Ok(());
    }
    let actual = usize::from(cmd.ctx().rqt_actual_size());
    if actual == 0 || actual > max {
        return Err(bad_param(
            Syndrome::BadSteeringParams,
            "RQ table size must be 1..=the table's max_size",
        ));
    }
    let mut rqs = Vec::with_capacity(actual);
    for i in 0..actual {
        let rqn = cmd
            .rq_num(i)
            .map_err(|_| bad_param(Syndrome::BadSteeringParams, "RQ table entry past the input"))?
            & 0x00ff_ffff;
        if !core.res.rqs.contains(rqn) {
            return Err(bad_res("RQ table names an RQ that does not exist"));
        }
        rqs.push(rqn);
    }
    for rqn in &rqs {
        if let Some(rq) = core.res.rqs.get_mut(*rqn) {
            rq.rqt_users += 1;
        }
    }
    let old = match core.res.rqts.get_mut(rqtn) {
        Some(rqt) => std::mem::replace(&mut rqt.rqs, rqs),
        None => Vec::new(),
    };
    for rqn in old {
        if let Some(rq) = core.res.rqs.get_mut(rqn) {
            rq.rqt_users = rq.rqt_users.saturating_sub(1);
        }
    }
    Ok(())
}

pub(crate) fn destroy_rqt(core: &mut Core, input: &[u8]) -> CmdResult {
    let rqtn = input_as!(DestroyRqtIn<&[u8]>, input).rqtn();
    let rqt = core.res.rqts.get(rqtn).ok_or(bad_res("no such RQ table"))?;
    if rqt.tir_users > 0 {
        return Err(in_use("RQ table still used by a TIR"));
    }
    let rqt = core
        .res
        .rqts
        .remove(rqtn)
        .ok_or(bad_res("no such RQ table"))?;
    for rqn in rqt.rqs {
        if let Some(rq) = core.res.rqs.get_mut(rqn) {
            rq.rqt_users = rq.rqt_users.saturating_sub(1);
        }
    }
    Ok(())
}
