//! User contexts and user memory (DEVX): CREATE_UCTX, DESTROY_UCTX, CREATE_UMEM and
//! DESTROY_UMEM, the ownership every command's `uid` is held to, and the umem-backed queue
//! buffers and doorbell records CREATE_CQ and CREATE_QP take.
//!
//! Read from Linux 6.12's mlx5_ib (`drivers/infiniband/hw/mlx5/devx.c`): `mlx5_ib_devx_create`
//! opens a context (at probe for the whitelist uid, and per DEVX user context), sending
//! `uctx.cap` with RAW_TX / INTERNAL_DEV_RES only where `uctx_cap` offers them;
//! `mlx5_ib_devx_destroy` names the uid in DESTROY_UCTX's body; `devx_umem_reg_cmd_alloc`
//! fills CREATE_UMEM (page size, offset in the first page, one MTT entry per page with the
//! read and write bits of `mlx5_ib_populate_pas`); `devx_obj_create` / `_modify` / `_query`
//! write the context's uid into the header and force `cq_umem_valid`, `wq_umem_valid` and
//! `dbr_umem_valid` on (`devx_set_umem_valid`); `devx_obj_build_destroy_cmd` destroys with
//! the creating uid.
//!
//! Ownership: an object created under a user context's uid belongs to it (a general object
//! by its type and number: a RESERVED_QPN block by its first QP number), and a command
//! carrying a user context's uid may modify, query or destroy only that context's objects
//! (mlx5_ib always passes the object's own uid; uid 0 and the shared uid may touch anything).
//! Objects a command merely names (the CQ a QP completes to, the PD) are not checked against
//! the uid; umems are: a queue may be built only on a umem of its own uid.

use super::{bad_param, bad_res, bad_state, input_as, output_as, table_full, CmdError, CmdResult};
use super::{Core, Syndrome};
use crate::objects::devx::{privileged, Owned, Umem, SHARED_UID};
use crate::objects::limits::LOG_MAX_UCTX;
use crate::objects::QueueBuffer;
use crate::translate::mtt_page_ok;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::devx::{
    CreateUctxIn, CreateUctxOut, CreateUmemIn, CreateUmemOut, DestroyUctxIn, DestroyUmemIn,
};
use cxdirect_hw::general_obj::{obj_type, GeneralObjInCmdHdr};
use cxdirect_hw::mkey::{MTT_READ, MTT_WRITE};

/// Alignment the model asks of a queue placed in a umem (`cq_umem_offset`,
/// `wq_umem_offset`): one CQE or send WQE basic block. The sources are silent on it; libmlx5
/// and the rdma-core tests place queues at offset 0 of a page-aligned umem.
const UMEM_QUEUE_ALIGN: u64 = 64;

/// CREATE_UCTX: opens a user context with the capabilities asked for, each of which
/// `uctx_cap` must offer.
pub(crate) fn create_uctx(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cap = input_as!(CreateUctxIn<&[u8]>, input).cap();
    if cap & !core.hca.caps.general().uctx_cap() != 0 {
        return Err(bad_param(
            Syndrome::UctxCapDenied,
            "user context capability outside uctx_cap",
        ));
    }
    let uid = core
        .res
        .uctxs
        .open(cap, 1 << LOG_MAX_UCTX)
        .ok_or(table_full("user context table full"))?;
    output_as!(CreateUctxOut<&mut [u8]>, output).set_uid(uid);
    Ok(())
}

/// DESTROY_UCTX: closes a user context. Linux sends it while objects created under the uid
/// may still live: mlx5_ib keeps a user MR's revoked memory key in its mkey cache for reuse
/// (`mlx5_revoke_mr`, `cache_ent_find_and_store`) after the process closed its context, so
/// the firmware cannot refuse. What the context still owns passes to the driver (uid 0): the
/// kernel may use and destroy it, another context may not touch it.
pub(crate) fn destroy_uctx(core: &mut Core, input: &[u8]) -> CmdResult {
    let uid = input_as!(DestroyUctxIn<&[u8]>, input).uid();
    if privileged(uid) || !core.res.uctxs.is_open(uid) {
        return Err(bad_param(Syndrome::UnknownUid, "no such user context"));
    }
    core.res.uctxs.close(uid);
    core.res.rates.disown(uid);
    core.res.sched.disown(uid);
    if let Some(memic) = &core.memic {
        memic.disown(uid);
    }
    Ok(())
}

/// CREATE_UMEM: registers a page list for the header's user context.
pub(crate) fn create_umem(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateUmemIn<&[u8]>, input);
    let uid = cmd.uid();
    // A umem belongs to a user context: uid 0 may own one only with `umem_uid_0`, which the
    // model does not report.
    if privileged(uid) {
        return Err(bad_param(
            Syndrome::UnknownUid,
            "a umem needs a user context's uid",
        ));
    }
    let log_page = 12 + u32::from(cmd.log_page_size());
    if !mtt_page_ok(log_page) {
        return Err(bad_param(Syndrome::BadUmem, "umem page size out of range"));
    }
    let page = 1u64 << log_page;
    let page_offset = u64::from(cmd.page_offset());
    if page_offset >= page {
        return Err(bad_param(
            Syndrome::BadUmem,
            "umem page_offset past its first page",
        ));
    }
    let count = usize::try_from(cmd.num_of_mtt()).unwrap_or(usize::MAX);
    if count == 0 || count > cmd.mtt_capacity() {
        return Err(bad_param(
            Syndrome::BadUmem,
            "num_of_mtt zero or past the command's input",
        ));
    }
    let mut pages = Vec::with_capacity(count);
    let mut writable = true;
    for i in 0..count {
        let entry = cmd
            .mtt(i)
            .map_err(|_| bad_param(Syndrome::BadUmem, "umem MTT"))?;
        let addr = entry & !(MTT_READ | MTT_WRITE);
        if addr & (page - 1) != 0 {
            return Err(bad_param(
                Syndrome::BadAddress,
                "umem page address not aligned to the umem's page size",
            ));
        }
        writable &= entry & MTT_WRITE != 0;
        pages.push(addr);
    }
    let umem = Umem {
        uid,
        log_page,
        page_offset,
        pages,
        writable,
        holders: Vec::new(),
    };
    let id = core
        .res
        .umems
        .insert(umem)
        .ok_or(table_full("umem table full"))?;
    output_as!(CreateUmemOut<&mut [u8]>, output).set_umem_id(id);
    Ok(())
}

/// DESTROY_UMEM: a umem no queue is built on any more.
pub(crate) fn destroy_umem(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = input_as!(DestroyUmemIn<&[u8]>, input).umem_id();
    let umem = core.res.umems.get(id).ok_or(bad_res("no such umem"))?;
    if !umem.holders.is_empty() {
        return Err(bad_state(
            Syndrome::ObjectInUse,
            "umem still holds a queue or doorbell record",
        ));
    }
    core.res.umems.remove(id);
    Ok(())
}

/// The umem `id` as a command under `uid` may name it.
fn umem_of(core: &Core, uid: u16, id: u32) -> Result<&Umem, CmdError> {
    let umem = core.res.umems.get(id).ok_or(bad_res("no such umem"))?;
    if umem.uid != uid {
        return Err(bad_param(
            Syndrome::UidMismatch,
            "umem belongs to another user context",
        ));
    }
    Ok(umem)
}

/// A queue buffer of `size` bytes at `offset` of umem `id`; `write`: the device writes it
/// (a CQ), so the umem must have been registered writable.
pub(crate) fn umem_buffer(
    core: &Core,
    uid: u16,
    id: u32,
    offset: u64,
    size: u64,
    write: bool,
) -> Result<QueueBuffer, CmdError> {
    let umem = umem_of(core, uid, id)?;
    if offset % UMEM_QUEUE_ALIGN != 0 {
        return Err(bad_param(
            Syndrome::BadUmem,
            "queue offset in its umem not 64-byte aligned",
        ));
    }
    if write && !umem.writable {
        return Err(bad_param(
            Syndrome::BadUmem,
            "queue the device writes placed in a read-only umem",
        ));
    }
    umem.buffer(offset, size).ok_or(bad_param(
        Syndrome::BadUmem,
        "queue runs past the end of its umem",
    ))
}

/// The bus address of an 8-byte doorbell record at `offset` of umem `id`.
pub(crate) fn umem_dbr(core: &Core, uid: u16, id: u32, offset: u64) -> Result<u64, CmdError> {
    let umem = umem_of(core, uid, id)?;
    if offset % 8 != 0 {
        return Err(bad_param(
            Syndrome::BadAddress,
            "doorbell record offset not 8-byte aligned",
        ));
    }
    umem.buffer(offset, 8)
        .and_then(|buf| buf.addr(0))
        .ok_or(bad_param(
            Syndrome::BadUmem,
            "doorbell record past the end of its umem",
        ))
}

/// The translation of an MTT memory key on umem `id` (`mkey_umem_valid`): the key's
/// `[start, start + len)` is the umem's bytes from `offset`, so the two must share their
/// offset in a page of the umem's size. Returns the umem's page size (absolute log2) and the
/// key's MTT entries (page addresses with the read bit, and the write bit when the umem was
/// registered writable), the first the page holding `start`.
pub(crate) fn umem_mtt(
    core: &Core,
    uid: u16,
    id: u32,
    offset: u64,
    start: u64,
    len: u64,
) -> Result<(u32, Vec<u64>), CmdError> {
    let umem = umem_of(core, uid, id)?;
    let page = 1u64 << umem.log_page;
    let at = umem
        .page_offset
        .checked_add(offset)
        .filter(|_| {
            offset
                .checked_add(len)
                .is_some_and(|end| end <= umem.bytes())
        })
        .ok_or(bad_param(
            Syndrome::BadUmem,
            "memory key runs past the end of its umem",
        ))?;
    if at & (page - 1) != start & (page - 1) {
        return Err(bad_param(
            Syndrome::BadUmem,
            "memory key start and umem offset differ within a page",
        ));
    }
    let first = (at >> umem.log_page) as usize;
    let count = ((start & (page - 1)) + len).div_ceil(page) as usize;
    let bits = MTT_READ | if umem.writable { MTT_WRITE } else { 0 };
    let entries = umem
        .pages
        .get(first..first + count)
        .ok_or(bad_param(
            Syndrome::BadUmem,
            "memory key runs past the end of its umem",
        ))?
        .iter()
        .map(|&addr| addr | bits)
        .collect();
    Ok((umem.log_page, entries))
}

/// Records that object `holder` is built on umems `ids` (after its creation succeeded).
pub(crate) fn hold(core: &mut Core, ids: &[u32], holder: (Owned, u32)) {
    for &id in ids {
        if let Some(umem) = core.res.umems.get_mut(id) {
            umem.holders.push(holder);
        }
    }
}

/// What a command does to an object a user context may own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Creates one: its number is in the output.
    Create,
    /// Modifies or queries one: its number is in the input.
    Touch,
    /// Destroys one: its number is in the input.
    Destroy,
}

/// The object kind and role of `opcode`, for the commands whose object number sits where
/// every one of them has it: the low 24 bits of the third input (or output) dword
/// (`devx_get_obj_id` / `devx_get_created_obj_id` read the same fields).
fn object_of(opcode: Opcode) -> Option<(Owned, Role)> {
    use Opcode as O;
    use Owned as K;
    use Role::{Create, Destroy, Touch};
    Some(match opcode {
        O::AllocPd => (K::Pd, Create),
        O::DeallocPd => (K::Pd, Destroy),
        O::AllocUar => (K::Uar, Create),
        O::DeallocUar => (K::Uar, Destroy),
        O::AllocTransportDomain => (K::Td, Create),
        O::DeallocTransportDomain => (K::Td, Destroy),
        O::AllocXrcd => (K::Xrcd, Create),
        O::DeallocXrcd => (K::Xrcd, Destroy),
        O::CreateCq => (K::Cq, Create),
        O::ModifyCq | O::QueryCq => (K::Cq, Touch),
        O::DestroyCq => (K::Cq, Destroy),
        O::CreateQp => (K::Qp, Create),
        O::Rst2initQp
        | O::Init2initQp
        | O::Init2rtrQp
        | O::Rtr2rtsQp
        | O::Rts2rtsQp
        | O::Sqerr2rtsQp
        | O::SqdRtsQp
        | O::Qp2errQp
        | O::Qp2rstQp
        | O::QueryQp => (K::Qp, Touch),
        O::DestroyQp => (K::Qp, Destroy),
        O::CreateSq => (K::Sq, Create),
        O::ModifySq | O::QuerySq => (K::Sq, Touch),
        O::DestroySq => (K::Sq, Destroy),
        O::CreateRq => (K::Rq, Create),
        O::ModifyRq | O::QueryRq => (K::Rq, Touch),
        O::DestroyRq => (K::Rq, Destroy),
        O::CreateRmp => (K::Rmp, Create),
        O::ModifyRmp | O::QueryRmp => (K::Rmp, Touch),
        O::DestroyRmp => (K::Rmp, Destroy),
        // An XRQ is numbered among the RMPs (mlx5_ib's `create_xrq_cmd` sets its uid).
        O::CreateXrq => (K::Rmp, Create),
        O::QueryXrq | O::ArmXrq => (K::Rmp, Touch),
        O::DestroyXrq => (K::Rmp, Destroy),
        O::CreateTir => (K::Tir, Create),
        O::ModifyTir | O::QueryTir => (K::Tir, Touch),
        O::DestroyTir => (K::Tir, Destroy),
        O::CreateTis => (K::Tis, Create),
        O::ModifyTis | O::QueryTis => (K::Tis, Touch),
        O::DestroyTis => (K::Tis, Destroy),
        O::CreateRqt => (K::Rqt, Create),
        O::ModifyRqt | O::QueryRqt => (K::Rqt, Touch),
        O::DestroyRqt => (K::Rqt, Destroy),
        O::CreateMkey => (K::Mkey, Create),
        O::QueryMkey => (K::Mkey, Touch),
        O::DestroyMkey => (K::Mkey, Destroy),
        O::CreatePsv => (K::Psv, Create),
        O::DestroyPsv => (K::Psv, Destroy),
        O::CreateXrcSrq => (K::XrcSrq, Create),
        O::QueryXrcSrq | O::ArmXrcSrq => (K::XrcSrq, Touch),
        O::DestroyXrcSrq => (K::XrcSrq, Destroy),
        O::CreateDct => (K::Dct, Create),
        O::DrainDct | O::QueryDct | O::ArmDctForKeyViolation => (K::Dct, Touch),
        O::DestroyDct => (K::Dct, Destroy),
        O::AllocQCounter => (K::QCounter, Create),
        O::DeallocQCounter => (K::QCounter, Destroy),
        // QUERY_FLOW_COUNTER names its counter elsewhere (`flow_counter_id` in its fifth
        // dword); mlx5_ib lets a context query only the DEVX objects it holds.
        O::AllocModifyHeaderContext => (K::ModifyHeader, Create),
        O::DeallocModifyHeaderContext => (K::ModifyHeader, Destroy),
        O::AllocPacketReformatContext => (K::PacketReformat, Create),
        O::DeallocPacketReformatContext => (K::PacketReformat, Destroy),
        O::AllocFlowCounter => (K::FlowCounter, Create),
        O::DeallocFlowCounter => (K::FlowCounter, Destroy),
        O::CreateUmem => (K::Umem, Create),
        O::DestroyUmem => (K::Umem, Destroy),
        _ => return None,
    })
}

/// The object kind and role of a command, as [`object_of`] gives them, and for the general
/// object commands by the header's `obj_type` (their number sits in the same dword:
/// `general_obj_in_cmd_hdr.obj_id` / `general_obj_out_cmd_hdr.obj_id`). A general object type
/// the model does not offer has no kind; its handler refuses it.
fn object_in(opcode: Opcode, input: &[u8]) -> Option<(Owned, Role)> {
    use Opcode as O;
    let role = match opcode {
        O::CreateGeneralObject => Role::Create,
        O::ModifyGeneralObject | O::QueryGeneralObject => Role::Touch,
        O::DestroyGeneralObject => Role::Destroy,
        _ => return object_of(opcode),
    };
    let ty = GeneralObjInCmdHdr::new(input).ok()?.obj_type();
    match ty {
        obj_type::RESERVED_QPN => Some((Owned::ReservedQpn, role)),
        obj_type::SW_ICM => Some((Owned::SwIcm, role)),
        obj_type::FLOW_SAMPLER => Some((Owned::FlowSampler, role)),
        obj_type::MATCH_DEFINER => Some((Owned::MatchDefiner, role)),
        obj_type::FLOW_METER => Some((Owned::FlowMeter, role)),
        obj_type::AV_QP_MAPPING => Some((Owned::AvQpMapping, role)),
        _ => None,
    }
}

/// The object number in the third dword of a command's input or output.
fn number_at(bytes: &[u8]) -> Option<u32> {
    let word: [u8; 4] = bytes.get(8..12)?.try_into().ok()?;
    Some(u32::from_be_bytes(word) & 0x00ff_ffff)
}

/// Before a command runs: its header `uid` must name an open user context (or be 0 or the
/// shared uid), and a user context may touch or destroy only the objects it owns.
pub(crate) fn check_uid(core: &Core, opcode: Opcode, uid: u16, input: &[u8]) -> CmdResult {
    if privileged(uid) {
        return Ok(());
    }
    if !core.res.uctxs.is_open(uid) {
        return Err(bad_param(
            Syndrome::UnknownUid,
            "uid names no open user context",
        ));
    }
    let Some((kind, role)) = object_in(opcode, input) else {
        return Ok(());
    };
    if role == Role::Create {
        return Ok(());
    }
    let Some(id) = number_at(input) else {
        return Ok(());
    };
    // An object no command created is left to the handler, which names it missing; a shared
    // one any context may use.
    let owner = core.res.uctxs.owner(kind, id).unwrap_or(uid);
    if !may_touch(owner, uid) {
        return Err(CmdError::new(
            CmdStatus::BadParameter,
            Syndrome::UidMismatch,
            "object belongs to another user context",
        ));
    }
    Ok(())
}

/// Whether a command under `uid` may touch what `owner` created: the function's own uids
/// touch anything, anything shared is touched by all, and a user context touches its own.
pub(crate) fn may_touch(owner: u16, uid: u16) -> bool {
    privileged(uid) || owner == uid || owner == SHARED_UID
}

/// After a command succeeded: records who owns what it created, forgets what it destroyed,
/// and lets go of the umems a destroyed queue was built on.
pub(crate) fn settle(core: &mut Core, opcode: Opcode, uid: u16, input: &[u8], output: &[u8]) {
    let Some((kind, role)) = object_in(opcode, input) else {
        return;
    };
    match role {
        Role::Create => {
            if let Some(id) = number_at(output) {
                core.res.uctxs.record(kind, id, uid);
            }
        }
        Role::Touch => {}
        Role::Destroy => {
            if let Some(id) = number_at(input) {
                core.res.uctxs.forget(kind, id);
                let numbers: Vec<u32> = core.res.umems.iter().map(|(n, _)| n).collect();
                for n in numbers {
                    if let Some(umem) = core.res.umems.get_mut(n) {
                        umem.holders.retain(|&h| h != (kind, id));
                    }
                }
            }
        }
    }
}
