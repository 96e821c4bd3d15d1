//! SW ICM commands: CREATE, QUERY and DESTROY_GENERAL_OBJECT of type SW_ICM, and the checks
//! CREATE_MKEY makes of a key of access mode SW_ICM. The store and its ranges are
//! [`crate::objects::icm`]'s; who owns an object is `fw::devx`'s (by its number).
//!
//! Read from Linux 6.12: mlx5_core's `mlx5_dm_sw_icm_alloc` (lib/dm.c) picks a piece of one
//! range in its own bitmap (a power of two of at least `2^log_sw_icm_alloc_granularity`
//! bytes, aligned to the granularity and to the caller's `log_alignment`) and sends
//! CREATE_GENERAL_OBJECT with the header's `uid` (the DEVX uid of the process), `obj_type`
//! SW_ICM, and `sw_icm.log_sw_icm_size` / `sw_icm_start_addr`; it takes the output's `obj_id`
//! and later destroys by it (`mlx5_dm_sw_icm_dealloc`, same uid). The firmware allocates
//! nothing: it checks and records the range. mlx5_ib's `mlx5_ib_get_dm_mr` (mr.c) then
//! creates the key: access mode SW_ICM, `start_addr` the ICM address of the registered bytes,
//! `len` their count, the access bits, the PD, `qpn` 0xffffff; the RDMA core registers it
//! zero-based.

use super::Syndrome;
use super::{bad_param, bad_res, input_as, output_as, table_full, CmdError, CmdResult, Core};
use crate::objects::icm::{IcmError, IcmStore};
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};
use cxdirect_hw::mkey::CreateMkeyIn;
use cxdirect_hw::sw_icm::{CreateSwIcmIn, QuerySwIcmOut};

/// The function's SW ICM; refused as an unknown object type where it is not offered (the
/// general object dispatch checks `general_obj_types` first, so this is a second guard).
fn store(core: &Core) -> Result<&IcmStore, CmdError> {
    core.icm
        .as_ref()
        .ok_or(bad_param(Syndrome::UnknownObjType, "SW ICM is not offered"))
}

fn refusal(e: IcmError) -> CmdError {
    match e {
        IcmError::OutOfRange => bad_param(
            Syndrome::SwIcmOutOfRange,
            "SW_ICM piece not inside one SW ICM range",
        ),
        IcmError::BadSize => bad_param(
            Syndrome::SwIcmBadSize,
            "SW_ICM piece smaller than the allocation granularity",
        ),
        IcmError::Misaligned => bad_param(
            Syndrome::SwIcmMisaligned,
            "SW_ICM piece not aligned to the allocation granularity",
        ),
        IcmError::Overlap => bad_param(
            Syndrome::SwIcmOverlap,
            "SW_ICM piece overlaps a live SW_ICM object",
        ),
        IcmError::TableFull => table_full("SW_ICM object table full"),
        IcmError::NoObject | IcmError::NotAllocated | IcmError::Full => {
            bad_res("no SW_ICM object of that number")
        }
    }
}

/// CREATE_GENERAL_OBJECT of type SW_ICM: records the piece; the output's `obj_id` names it.
pub(crate) fn create(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateSwIcmIn<&[u8]>, input);
    let id = store(core)?
        .create(cmd.sw_icm_start_addr(), cmd.log_sw_icm_size())
        .map_err(refusal)?;
    output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
    Ok(())
}

/// DESTROY_GENERAL_OBJECT of an SW_ICM object: forgets it, and the bytes written into it.
pub(crate) fn destroy(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    store(core)?.destroy(id).map(|_| ()).map_err(refusal)
}

/// QUERY_GENERAL_OBJECT of an SW_ICM object: its number, size and start.
pub(crate) fn query(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    let object = store(core)?.get(id).ok_or(refusal(IcmError::NoObject))?;
    output_as!(QuerySwIcmOut<&mut [u8]>, output)
        .set_obj_id(id)
        .set_log_sw_icm_size(object.log_size)
        .set_sw_icm_start_addr(object.start);
    Ok(())
}

/// An SW ICM key as `mlx5_ib_get_dm_mr` creates it: `[start_addr, start_addr + len)` inside
/// one live SW_ICM object (of any range), no translation table, no `length64`, no UMR (mlx5_ib
/// never sets `umr_en` or `free` on one). A key of length 0 needs its start inside or at the
/// end of an object.
pub(crate) fn check_key(core: &Core, cmd: &CreateMkeyIn<&[u8]>) -> CmdResult {
    let mkc = cmd.memory_key_mkey_entry();
    let store = core.icm.as_ref().ok_or(bad_param(
        Syndrome::BadMkeyParams,
        "access mode SW_ICM where SW ICM is not offered",
    ))?;
    if mkc.length64() || !store.covered(mkc.start_addr(), mkc.len()) {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "an SW_ICM key's range must lie in one live SW_ICM object",
        ));
    }
    if mkc.umr_en() || mkc.free() {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "an SW_ICM key is created whole, without UMR",
        ));
    }
    Ok(())
}
