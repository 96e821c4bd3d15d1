//! Device memory (MEMIC) commands, as Linux 6.12's mlx5_ib sends them (drivers/infiniband/
//! hw/mlx5/dm.c): ALLOC_MEMIC from `mlx5_cmd_alloc_memic` (a piece of a 64-byte multiple,
//! somewhere in one or more 4 KiB pages mlx5_ib's own bitmap found free, aligned to
//! `64 << log_memic_addr_alignment`; a NO_RESOURCES answer, -EAGAIN, makes it try the next
//! page), DEALLOC_MEMIC from `mlx5_cmd_dealloc_memic` (the piece's address and size as
//! allocated), and MODIFY_MEMIC from `mlx5_cmd_alloc_memic_op` / `mlx5_cmd_dealloc_memic_op`
//! for libmlx5's `mlx5dv_dm_map_op_addr`. The memory and its aliases are
//! [`crate::objects::memic`]'s.
//!
//! ALLOC_MEMIC and DEALLOC_MEMIC carry no uid (those bits are reserved in `mlx5_ifc.h`) and
//! mlx5_ib's DEVX passes neither through: a piece belongs to the function, which hands it to
//! one user. MODIFY_MEMIC names a uid: an operation alias mapped under a user context is that
//! context's (the DEVX rules of `fw::devx`), and passes to the function when it closes.

use super::{bad_param, input_as, output_as, CmdError, CmdResult, Core, Syndrome};
use crate::objects::memic::{DeviceMemory, MemicError, OPERATIONS};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::memic::{
    AllocMemicIn, AllocMemicOut, DeallocMemicIn, ModifyMemicIn, ModifyMemicOut,
    MODIFY_MEMIC_OP_MOD_ALLOC, MODIFY_MEMIC_OP_MOD_DEALLOC,
};

/// The function's device memory; a function without it refuses the commands as unknown.
fn memory(core: &Core) -> Result<&DeviceMemory, CmdError> {
    core.memic.as_deref().ok_or(CmdError::new(
        CmdStatus::BadOpcode,
        Syndrome::UnknownOpcode,
        "device memory is not offered",
    ))
}

fn refused(e: MemicError) -> CmdError {
    match e {
        MemicError::BadSize => bad_param(
            Syndrome::MemicBadSize,
            "bad device memory size or alignment",
        ),
        MemicError::OutOfRange => bad_param(
            Syndrome::MemicOutOfRange,
            "address outside the device memory",
        ),
        MemicError::NoSpace => CmdError::new(
            CmdStatus::NoResources,
            Syndrome::MemicNoSpace,
            "no free device memory of that size in the range",
        ),
        MemicError::NoPiece => bad_param(
            Syndrome::MemicNoPiece,
            "no device memory allocated at that address and size",
        ),
        MemicError::BadOperation | MemicError::NotMapped => bad_param(
            Syndrome::MemicBadOperation,
            "device memory operation not offered or not mapped",
        ),
        MemicError::Owner => CmdError::new(
            CmdStatus::BadParameter,
            Syndrome::UidMismatch,
            "device memory operation belongs to another user context",
        ),
    }
}

/// ALLOC_MEMIC: refused for a bad size or alignment, a range outside the memory, and (with
/// NO_RESOURCES) a range with no free piece that fits.
pub(crate) fn alloc_memic(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(AllocMemicIn<&[u8]>, input);
    let start = memory(core)?
        .alloc(
            cmd.range_start_addr(),
            u64::from(cmd.range_size()),
            u64::from(cmd.memic_size()),
            cmd.log_memic_addr_alignment(),
        )
        .map_err(refused)?;
    output_as!(AllocMemicOut<&mut [u8]>, output).set_memic_start_addr(start);
    Ok(())
}

/// DEALLOC_MEMIC: the piece must be one ALLOC_MEMIC handed out, at its address and size; a
/// second free of it is refused.
pub(crate) fn dealloc_memic(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(DeallocMemicIn<&[u8]>, input);
    memory(core)?
        .dealloc(cmd.memic_start_addr(), u64::from(cmd.memic_size()))
        .map_err(refused)
}

/// MODIFY_MEMIC: maps (op_mod 0) or unmaps (op_mod 1) an operation's alias of a piece.
pub(crate) fn modify_memic(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(ModifyMemicIn<&[u8]>, input);
    let (op, start, uid) = (
        cmd.memic_operation_type(),
        cmd.memic_start_addr(),
        cmd.uid(),
    );
    let memory = memory(core)?;
    if u32::from(op) >= u32::BITS || OPERATIONS & 1u32 << op == 0 {
        return Err(refused(MemicError::BadOperation));
    }
    match cmd.op_mod() {
        MODIFY_MEMIC_OP_MOD_ALLOC => {
            let address = memory.map_op(start, op, uid).map_err(refused)?;
            output_as!(ModifyMemicOut<&mut [u8]>, output).set_memic_operation_addr(address);
            Ok(())
        }
        MODIFY_MEMIC_OP_MOD_DEALLOC => memory.unmap_op(start, op, uid).map_err(refused),
        _ => Err(bad_param(
            Syndrome::BadOpMod,
            "MODIFY_MEMIC op_mod is 0 or 1",
        )),
    }
}
