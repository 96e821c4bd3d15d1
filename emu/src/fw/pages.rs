//! Firmware pages: the host memory the driver lends the device. The model tracks every page
//! given (rejecting misaligned and duplicate addresses), returns pages on MANAGE_PAGES take, and
//! really uses them: every object keeps its context in a 256-byte slot of a given page, written
//! and read back through the IOMMU, so a driver that frees or unmaps firmware pages early is
//! caught (the device reports a fatal health syndrome).

use super::{bad_param, input_as, output_as, CmdResult, Core, EngineRequests, Syndrome};
use crate::counters::add;
pub(crate) use crate::function::pages::{PageUse, FW_PAGE_SIZE, LOW_SLOTS, TAG_OFFSET};
pub(crate) use crate::objects::context::{Slot, SLOT_SIZE};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::hca::{manage_pages_op_mod, ManagePagesIn, ManagePagesOut};
use cxdirect_hw::init_seg::health_syndrome;

/// Allocates a context slot and stores `context` in it through the IOMMU.
pub(crate) fn store_new_context(core: &mut Core, context: &[u8]) -> Result<Slot, super::CmdError> {
    let slot = core.pages.alloc_slot().ok_or(super::CmdError::new(
        cxdirect_hw::cmd::CmdStatus::NoResources,
        Syndrome::NoContextSpace,
        "firmware context space exhausted: give more pages",
    ))?;
    write_context(core, slot, context);
    maybe_request_pages(core);
    Ok(slot)
}

/// Rewrites an object's context in its slot.
pub(crate) fn write_context(core: &mut Core, slot: Slot, context: &[u8]) {
    let len = context.len().min(SLOT_SIZE as usize);
    if core.dma_write(slot.addr(), &context[..len]).is_err() {
        fatal(core, health_syndrome::ICM_FETCH_PCI_ERR);
    }
    core.pages.live.insert(slot.addr(), context[..len].to_vec());
}

/// Releases an object's context slot, and offers pages back when many are empty.
pub(crate) fn release_context(core: &mut Core, slot: Slot) {
    core.pages.free_slot(slot);
    let chunk = core.cfg.page_request_chunk as usize;
    let baseline = (core.cfg.boot_pages + core.cfg.init_pages) as usize;
    if core.pages.regular_request == 0
        && core.pages.held() > baseline
        && core.pages.empty_pages() >= 2 * chunk
    {
        core.pages.regular_request = -(chunk as i32);
        post_page_request(core, -(chunk as i32));
    }
}

/// Asks the driver for more pages before the context space runs out: when fewer than half the
/// used slots (at least [`LOW_SLOTS`]) are free, for as many pages as the function holds (at
/// least the configured chunk). Growing by a share of what is held keeps
/// the margin ahead of a driver that creates objects in bursts of asynchronous commands while
/// its page work waits (mlx5_ib fills its mkey cache with thousands of keys at probe).
fn maybe_request_pages(core: &mut Core) {
    let low = LOW_SLOTS.max(core.pages.used_slots() / 2);
    if core.pages.regular_request <= 0 && core.pages.free_slots() < low {
        let chunk = (core.cfg.page_request_chunk as usize).max(core.pages.held());
        let chunk = i32::try_from(chunk).unwrap_or(i32::MAX);
        core.pages.regular_request = chunk;
        post_page_request(core, chunk);
    }
}

fn post_page_request(core: &mut Core, num_pages: i32) {
    add(&core.counters.page_requests, 1);
    let mut data = [0u8; 28];
    data[2..4].copy_from_slice(&0u16.to_be_bytes());
    data[4..8].copy_from_slice(&num_pages.to_be_bytes());
    core.post_async_event(EventType::PageRequest, 0, &data);
}

/// The tag the firmware writes into a page it was given.
fn page_tag(addr: u64) -> [u8; 16] {
    let mut tag = [0u8; 16];
    tag[..8].copy_from_slice(b"cxdemufw");
    tag[8..].copy_from_slice(&addr.to_be_bytes());
    tag
}

/// Reads every given page's tag and every live context back through the IOMMU and checks they
/// are intact: the model's proof that the pages are still the device's. A failure is a fatal
/// device error.
pub(crate) fn verify_contexts(core: &mut Core) {
    if core.hca.failed() {
        return;
    }
    let mut bad = false;
    let mut tag = [0u8; 16];
    for &addr in core.pages.given.keys() {
        if core.dma_read(addr + TAG_OFFSET, &mut tag).is_err() || tag != page_tag(addr) {
            bad = true;
            break;
        }
    }
    let mut buf = [0u8; SLOT_SIZE as usize];
    for (&addr, bytes) in core.pages.live.iter() {
        let got = &mut buf[..bytes.len()];
        if core.dma_read(addr, got).is_err() || got != &bytes[..] {
            bad = true;
            break;
        }
    }
    if bad {
        fatal(core, health_syndrome::ICM_PAGE_ERR);
    }
}

fn fatal(core: &mut Core, syndrome: u8) {
    core.hca.set_fatal(syndrome);
}

/// A driver whose bring-up failed after INIT_HCA takes every page back without TEARDOWN_HCA
/// (Linux does, then sends DISABLE_HCA). When the take asks for more than the empty pages and
/// nothing but the HCA's own context is left in the rest, the firmware gives up that context
/// (as a teardown would) so every page can go back; pages holding objects' contexts are kept.
fn abandon_unused_init(core: &mut Core, wanted: usize) {
    if core.hca.state != crate::function::hca::HcaState::Initialized
        || wanted <= core.pages.empty_pages()
        || core.pages.used_slots() != 1
    {
        return;
    }
    if let Some(slot) = core.hca.caps.context_slot.take() {
        core.pages.free_slot(slot);
        core.pages.regular_request = 0;
        crate::function::hca::set_oper(core, false);
        core.hca.state = crate::function::hca::HcaState::TornDown;
    }
}

/// MANAGE_PAGES: give (op_mod 1), take (op_mod 2) or report an allocation failure (op_mod 0).
pub(crate) fn manage_pages(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(ManagePagesIn<&[u8]>, input);
    if cmd.function_id() != 0 {
        return Err(bad_param(
            Syndrome::BadFunctionId,
            "MANAGE_PAGES for another function",
        ));
    }
    let count = cmd.input_num_entries() as usize;
    match cmd.op_mod() {
        manage_pages_op_mod::GIVE => {
            if count > cmd.pas_capacity() {
                return Err(bad_param(
                    Syndrome::PageCountTooLarge,
                    "more page entries than the input carries",
                ));
            }
            let mut addrs = Vec::with_capacity(count);
            for i in 0..count {
                let addr = cmd
                    .pas(i)
                    .map_err(|_| bad_param(Syndrome::PageCountTooLarge, "page entry past input"))?;
                if addr % FW_PAGE_SIZE != 0 {
                    return Err(bad_param(
                        Syndrome::PageMisaligned,
                        "firmware page not 4 KiB aligned",
                    ));
                }
                if core.pages.given.contains_key(&addr) || addrs.contains(&addr) {
                    return Err(bad_param(
                        Syndrome::PageDuplicate,
                        "firmware page given twice",
                    ));
                }
                if !core.bus_master || !core.iommu.is_mapped(addr, FW_PAGE_SIZE, true) {
                    return Err(bad_param(
                        Syndrome::PageUnreachable,
                        "firmware page not reachable through the IOMMU",
                    ));
                }
                addrs.push(addr);
            }
            // Clear and tag each page as the firmware would before using it: real DMA writes.
            let mut fresh = [0u8; FW_PAGE_SIZE as usize];
            for &addr in &addrs {
                fresh[TAG_OFFSET as usize..TAG_OFFSET as usize + 16]
                    .copy_from_slice(&page_tag(addr));
                let _ = core.dma_write(addr, &fresh);
                core.pages.given.insert(addr, PageUse::default());
            }
            core.pages.total_given += count as u64;
            if core.pages.regular_request > 0 {
                core.pages.regular_request = (core.pages.regular_request - count as i32).max(0);
            }
            Ok(())
        }
        manage_pages_op_mod::TAKE => {
            let _ = output_as!(ManagePagesOut<&mut [u8]>, output);
            abandon_unused_init(core, count);
            let mut out = output_as!(ManagePagesOut<&mut [u8]>, output);
            let room = out.pas_capacity();
            let mut returned = 0usize;
            let empty: Vec<u64> = core
                .pages
                .given
                .iter()
                .rev()
                .filter(|(_, u)| u.used == 0)
                .map(|(&a, _)| a)
                .collect();
            for addr in empty.into_iter().take(count.min(room)) {
                core.pages.given.remove(&addr);
                let _ = out.set_pas(returned, addr);
                returned += 1;
            }
            out.set_output_num_entries(returned as u32);
            if core.pages.regular_request < 0 {
                core.pages.regular_request = (core.pages.regular_request + returned as i32).min(0);
            }
            Ok(())
        }
        manage_pages_op_mod::ALLOC_FAIL => {
            // The driver could not satisfy a request: withdraw it.
            core.pages.regular_request = 0;
            Ok(())
        }
        _ => Err(bad_param(
            Syndrome::BadOpMod,
            "MANAGE_PAGES op_mod must be 0, 1 or 2",
        )),
    }
}
