//! The command queue: on a doorbell, fetch each rung slot's entry, check its delivery (type,
//! ownership, lengths, mailbox chain pointers, block numbers, tokens and — when enabled —
//! signatures), gather the input, execute, scatter the output, hand the entry back, and post a
//! CMD event when an EQ asked for them.

use super::{Core, EngineRequests};
use crate::counters::add;
use crate::faults::Fault;
use crate::function::pending_answer::PendingAnswer;
use cxdirect_hw::cmd::{
    xor8, CmdLayout, CmdMailbox, DeliveryStatus, CMD_INLINE_BYTES, CMD_OWNER_HW, CMD_STATUS_BYTES,
    CMD_TYPE_PCIE, MAILBOX_ALIGN, MAILBOX_BLOCK_SIZE, MAILBOX_DATA_BYTES,
};
use cxdirect_hw::eqe::EventType;

/// Largest input or output the model accepts: 16 MiB (an MTT for 1 GiB of 4 KiB pages is 2 MiB).
pub(crate) const MAX_CMD_LEN: usize = 16 << 20;
/// Log2 of the entry stride the model reports (64 bytes).
pub(crate) const LOG_CMDQ_STRIDE: u8 = 6;

/// Processes every slot whose bit is set in `mask`, after writing any answer held back.
pub(crate) fn ring(core: &mut Core, mask: u32) {
    for late in std::mem::take(&mut core.late_commands) {
        answer(core, late);
    }
    let slots = 1u32 << core.cfg.log_cmdq_size;
    for slot in 0..slots.min(32) {
        if mask & (1 << slot) != 0 {
            process_slot(core, slot);
        }
    }
}

fn entry_addr(core: &Core, slot: u32) -> u64 {
    core.hca.cmdq_addr + (u64::from(slot) << LOG_CMDQ_STRIDE)
}

fn process_slot(core: &mut Core, slot: u32) {
    // A failed function stops answering: the driver's command times out.
    if core.hca.failed() || core.hca.cmdq_addr == 0 {
        return;
    }
    let addr = entry_addr(core, slot);
    if core
        .faults
        .take(|f| matches!(f, Fault::StaleCommandEntry).then_some(()))
        .is_some()
    {
        if let Some((_, stale)) = core.last_answers.iter().find(|(s, _)| *s == slot) {
            let _ = core.dma_write(addr, stale.as_bytes());
        }
    }
    let mut entry = CmdLayout::zeroed();
    if core.dma_read(addr, entry.as_bytes_mut()).is_err() {
        return;
    }
    if !entry.owned_by_hw() {
        add(&core.counters.idle_command_doorbells, 1);
        return;
    }
    if core
        .faults
        .take(|f| matches!(f, Fault::SwallowCommand).then_some(()))
        .is_some()
    {
        return;
    }
    let checksums = core.hca.caps.checksums_on();
    let event = crate::engine::eq::subscribed(core, EventType::Cmd);
    let mut outcome = deliver(core, &entry, checksums);
    let patch = core.faults.take(|f| match f {
        Fault::CorruptCommandOutput { patch } => Some(patch.clone()),
        _ => None,
    });
    if let (Some(patch), Ok(output)) = (patch, outcome.as_mut()) {
        for (offset, value) in patch {
            if let Some(byte) = output.get_mut(usize::from(offset)) {
                *byte = value;
            }
        }
    }
    let answer_now = PendingAnswer {
        slot,
        entry,
        outcome,
        checksums,
        event,
    };
    if core
        .faults
        .take(|f| matches!(f, Fault::LateCommand).then_some(()))
        .is_some()
    {
        core.late_commands.push(answer_now);
        return;
    }
    answer(core, answer_now);
}

/// Writes a command's output and hands its entry back, then posts the CMD event.
fn answer(core: &mut Core, command: PendingAnswer) {
    let PendingAnswer {
        slot,
        mut entry,
        outcome,
        checksums,
        event,
    } = command;
    let status = match outcome {
        Ok(output) => {
            entry.set_inline_output(&output[..output.len().min(CMD_INLINE_BYTES)]);
            if output.len() > CMD_INLINE_BYTES {
                if let Err(st) =
                    scatter_output(core, &entry, &output[CMD_INLINE_BYTES..], checksums)
                {
                    add(&core.counters.command_errors, 1);
                    st
                } else {
                    DeliveryStatus::Ok
                }
            } else {
                DeliveryStatus::Ok
            }
        }
        Err(status) => {
            add(&core.counters.command_errors, 1);
            status
        }
    };
    entry.set_status_own((status as u8) << 1);
    if checksums {
        entry.set_sig(0);
        let sig = !xor8(entry.as_bytes());
        entry.set_sig(sig);
    }
    let _ = core.dma_write(entry_addr(core, slot), entry.as_bytes());
    match core.last_answers.iter_mut().find(|(s, _)| *s == slot) {
        Some((_, last)) => *last = entry,
        None => core.last_answers.push((slot, entry)),
    }
    if !event {
        return;
    }
    let mut data = [0u8; 28];
    data[..4].copy_from_slice(&(1u32 << slot).to_be_bytes());
    core.post_async_event(EventType::Cmd, 0, &data);
}

/// Checks delivery, gathers the input and executes; returns the whole output.
fn deliver(core: &mut Core, entry: &CmdLayout, checksums: bool) -> Result<Vec<u8>, DeliveryStatus> {
    if entry.kind() != CMD_TYPE_PCIE {
        return Err(DeliveryStatus::BadCommandType);
    }
    if checksums && xor8(entry.as_bytes()) != 0xff {
        return Err(DeliveryStatus::SignatureError);
    }
    let inlen = entry.inlen() as usize;
    let outlen = entry.outlen() as usize;
    if inlen > MAX_CMD_LEN {
        return Err(DeliveryStatus::InputLengthError);
    }
    // An output that cannot hold the status cannot report any: the delivery status does.
    if !(CMD_STATUS_BYTES..=MAX_CMD_LEN).contains(&outlen) {
        return Err(DeliveryStatus::OutputLengthError);
    }
    let mut input = vec![0u8; inlen];
    let inline = inlen.min(CMD_INLINE_BYTES);
    input[..inline].copy_from_slice(&entry.inline_input()[..inline]);
    if inlen > CMD_INLINE_BYTES {
        walk_chain(
            core,
            entry.in_ptr(),
            entry.token(),
            inlen - CMD_INLINE_BYTES,
            checksums,
            true,
            |offset, data| {
                input[CMD_INLINE_BYTES + offset..CMD_INLINE_BYTES + offset + data.len()]
                    .copy_from_slice(data);
            },
        )?;
    }
    if outlen > CMD_INLINE_BYTES {
        // The output chain must be deliverable before the command runs: a command with side
        // effects whose result cannot be returned would leave the driver out of step.
        walk_chain(
            core,
            entry.out_ptr(),
            entry.token(),
            outlen - CMD_INLINE_BYTES,
            false,
            false,
            |_, _| {},
        )?;
    }
    let mut output = vec![0u8; outlen];
    super::execute(core, &input, &mut output);
    Ok(output)
}

/// Walks a mailbox chain of `len` data bytes, checking pointers, block numbers and tokens
/// (and signatures when `verify_sig`), handing each block's data to `each`.
fn walk_chain(
    core: &Core,
    first: u64,
    token: u8,
    len: usize,
    verify_sig: bool,
    input: bool,
    mut each: impl FnMut(usize, &[u8]),
) -> Result<(), DeliveryStatus> {
    let misaligned = if input {
        DeliveryStatus::InputPointerAlignment
    } else {
        DeliveryStatus::OutputPointerAlignment
    };
    let blocks = len.div_ceil(MAILBOX_DATA_BYTES);
    let mut ptr = first;
    let mut block = CmdMailbox::zeroed();
    for index in 0..blocks {
        if ptr == 0 || ptr % MAILBOX_ALIGN as u64 != 0 {
            return Err(misaligned);
        }
        if core.dma_read(ptr, block.as_bytes_mut()).is_err() {
            return Err(misaligned);
        }
        if block.block_num() != index as u32 {
            return Err(DeliveryStatus::BadBlockNumber);
        }
        if block.token() != token {
            return Err(DeliveryStatus::TokenError);
        }
        if verify_sig {
            let bytes = block.as_bytes();
            if xor8(&bytes[MAILBOX_DATA_BYTES..MAILBOX_BLOCK_SIZE - 1]) != 0xff
                || xor8(bytes) != 0xff
            {
                return Err(DeliveryStatus::SignatureError);
            }
        }
        let offset = index * MAILBOX_DATA_BYTES;
        let n = (len - offset).min(MAILBOX_DATA_BYTES);
        each(offset, &block.data_bytes()[..n]);
        ptr = block.next();
    }
    Ok(())
}

/// Writes the output beyond the inline part into the output mailboxes.
fn scatter_output(
    core: &Core,
    entry: &CmdLayout,
    data: &[u8],
    checksums: bool,
) -> Result<(), DeliveryStatus> {
    let mut ptr = entry.out_ptr();
    let mut block = CmdMailbox::zeroed();
    for (index, chunk) in data.chunks(MAILBOX_DATA_BYTES).enumerate() {
        if ptr == 0
            || ptr % MAILBOX_ALIGN as u64 != 0
            || core.dma_read(ptr, block.as_bytes_mut()).is_err()
        {
            return Err(DeliveryStatus::OutputPointerAlignment);
        }
        if block.block_num() != index as u32 {
            return Err(DeliveryStatus::BadBlockNumber);
        }
        block.data_bytes_mut().fill(0);
        block.data_bytes_mut()[..chunk.len()].copy_from_slice(chunk);
        if checksums {
            block.set_ctrl_sig(0).set_sig(0);
            let ctrl = !xor8(&block.as_bytes()[MAILBOX_DATA_BYTES..MAILBOX_BLOCK_SIZE - 2]);
            block.set_ctrl_sig(ctrl);
            let sig = !xor8(&block.as_bytes()[..MAILBOX_BLOCK_SIZE - 1]);
            block.set_sig(sig);
        }
        if core.dma_write(ptr, block.as_bytes()).is_err() {
            return Err(DeliveryStatus::OutputPointerAlignment);
        }
        ptr = block.next();
    }
    Ok(())
}

/// True when the entry at `slot` is still owned by the device (used by tests and the device
/// thread to find work).
#[allow(dead_code)]
pub(crate) fn slot_busy(core: &Core, slot: u32) -> bool {
    let mut byte = [0u8; 1];
    core.dma_read(entry_addr(core, slot) + 0x3f, &mut byte)
        .is_ok()
        && byte[0] & CMD_OWNER_HW != 0
}
