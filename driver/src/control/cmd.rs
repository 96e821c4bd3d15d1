//! The command interface, driver side: one command at a time, input and output carried inline
//! and in mailbox chains, completion seen through the entry's ownership bit (polled, or after
//! an interrupt once the async EQ exists), and every byte the device wrote back checked before
//! it is believed.
//!
//! A command that times out may still be answered: firmware that was only slow writes its
//! output and hands the entry back later. Until then its slot and the mailboxes it named are
//! the device's, so the next command goes to another slot with fresh mailboxes, and the late
//! answer lands where nothing else is kept. A slot comes back when its entry does (or at a
//! function reset, which ends every command).

use crate::backend::barrier::{rmb, wmb};
use crate::backend::registers::Registers;
use crate::backend::Backend;
use crate::error::{CmdError, CmdFailure, DriverError};
use cxdirect_dma::{DmaRegion, Iommu, IovaAllocator, PageKind};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{
    CmdIn, CmdLayout, CmdMailbox, CmdOut, CmdStatus, DeliveryStatus, CMD_INLINE_BYTES,
    CMD_OWNER_HW, CMD_TYPE_PCIE, MAILBOX_ALIGN, MAILBOX_BLOCK_SIZE, MAILBOX_DATA_BYTES,
};
use cxdirect_hw::init_seg::{CmdDoorbell, CmdqAddrHigh, CmdqAddrLowSize};
use cxdirect_hw::mmio::Register;
use cxdirect_hw::LayoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mailbox blocks kept ready for each direction; larger commands get a region of their own.
const POOL_BLOCKS: usize = 64;
/// Offset of the `status_own` byte in a command entry.
const STATUS_OWN: usize = 0x3f;

/// A command the device took and did not answer in time: its slot, and the mailbox memory it
/// may still write, are kept until the entry comes back or the function is reset.
struct Unanswered {
    slot: usize,
    mailboxes: Vec<DmaRegion>,
}

/// The command queue and its mailbox pool.
pub(crate) struct CmdQueue {
    queue: DmaRegion,
    /// Mailbox pools, allocated on first use; a pool an unanswered command named is moved out.
    pool_in: Option<DmaRegion>,
    pool_out: Option<DmaRegion>,
    iommu: Arc<dyn Iommu>,
    iovas: Arc<IovaAllocator>,
    stride: usize,
    /// Slots the device offers (1..=32).
    slots: usize,
    token: u8,
    unanswered: Vec<Unanswered>,
    /// Commands executed.
    pub executed: u64,
    /// Timed-out commands the device answered later (their slots came back).
    pub late_answers: u64,
    /// Commands posted a second time because their entry came back holding, byte for byte,
    /// the previous answer of its slot (the device never took them).
    pub stale_entries: u64,
    /// Each slot's entry as the device last handed it back.
    last_answers: Vec<Option<CmdLayout>>,
}

/// Mailbox blocks for one direction of one command: the pool, or a region of its own.
enum Blocks {
    Pool,
    Own(DmaRegion),
}

impl CmdQueue {
    /// Allocates the queue page and tells the device where it is.
    pub fn new<B: Backend>(
        backend: &B,
        iommu: Arc<dyn Iommu>,
        iovas: Arc<IovaAllocator>,
    ) -> Result<Self, DriverError> {
        let queue = DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small)?;
        let registers = Registers::init_seg(backend);
        let geometry = registers.read::<CmdqAddrLowSize>();
        let log_stride = geometry.log_cmdq_stride();
        let log_size = geometry.log_cmdq_size();
        if !(6..=12).contains(&log_stride)
            || log_size > 5
            || (1usize << (log_stride + log_size)) > queue.len()
        {
            return Err(DriverError::BadDeviceValue {
                what: "command queue geometry",
                value: u64::from(geometry.to_raw()),
            });
        }
        let iova = queue.iova();
        registers.write(CmdqAddrHigh::new().with_address_high((iova >> 32) as u32));
        // The queue is 4 KiB aligned: its low address bits are the register's bits 31:12.
        registers.write(CmdqAddrLowSize::new().with_cmdq_addr_l((iova as u32) >> 12));
        Ok(Self {
            queue,
            pool_in: None,
            pool_out: None,
            iommu,
            iovas,
            stride: 1 << log_stride,
            slots: 1 << log_size,
            token: 0,
            unanswered: Vec::new(),
            executed: 0,
            late_answers: 0,
            stale_entries: 0,
            last_answers: vec![None; 1 << log_size],
        })
    }

    /// True when the entry `back` read from `slot` is the one the device handed back for the
    /// slot's previous command, unchanged.
    fn holds_previous_answer(&self, slot: usize, back: &CmdLayout) -> bool {
        self.last_answers[slot]
            .as_ref()
            .is_some_and(|previous| previous.as_bytes() == back.as_bytes())
    }

    /// Slots held by commands the device took and has not answered.
    pub fn unanswered(&self) -> usize {
        self.unanswered.len()
    }

    /// After a function reset: no command is in the device any more, so the memory unanswered
    /// commands named may be freed.
    pub fn forget_after_reset(&mut self) {
        self.unanswered.clear();
        self.last_answers.fill(None);
    }

    fn blocks_for(&mut self, len: usize, input: bool) -> Result<Blocks, DriverError> {
        let count = len
            .saturating_sub(CMD_INLINE_BYTES)
            .div_ceil(MAILBOX_DATA_BYTES);
        if count <= POOL_BLOCKS {
            let pool = if input {
                &mut self.pool_in
            } else {
                &mut self.pool_out
            };
            if pool.is_none() {
                *pool = Some(DmaRegion::new(
                    self.iommu.clone(),
                    &self.iovas,
                    POOL_BLOCKS * MAILBOX_ALIGN,
                    PageKind::Small,
                )?);
            }
            return Ok(Blocks::Pool);
        }
        let region = DmaRegion::new(
            self.iommu.clone(),
            &self.iovas,
            count * MAILBOX_ALIGN,
            PageKind::Auto,
        )?;
        Ok(Blocks::Own(region))
    }

    fn region<'a>(&'a self, blocks: &'a Blocks, input: bool) -> &'a DmaRegion {
        match (blocks, input) {
            (Blocks::Own(r), _) => r,
            (Blocks::Pool, true) => self.pool_in.as_ref().expect("allocated by blocks_for"),
            (Blocks::Pool, false) => self.pool_out.as_ref().expect("allocated by blocks_for"),
        }
    }

    /// Takes back the slots whose late answer has arrived (the device handed the entry back,
    /// its last write); their mailboxes are freed.
    fn reclaim_answered(&mut self) {
        let queue = &self.queue;
        let stride = self.stride;
        let before = self.unanswered.len();
        self.unanswered.retain(|u| {
            let mut own = [CMD_OWNER_HW];
            let _ = queue.read(u.slot * stride + STATUS_OWN, &mut own);
            own[0] & CMD_OWNER_HW != 0
        });
        self.late_answers += (before - self.unanswered.len()) as u64;
    }

    /// Lays out a chain of `len` data bytes (taken from `data` when given) with `token`.
    fn write_chain(
        region: &DmaRegion,
        data: Option<&[u8]>,
        len: usize,
        token: u8,
    ) -> Result<(), DriverError> {
        let count = len.div_ceil(MAILBOX_DATA_BYTES);
        let mut block = CmdMailbox::zeroed();
        for i in 0..count {
            block.as_bytes_mut().fill(0);
            if let Some(data) = data {
                let chunk = &data[i * MAILBOX_DATA_BYTES..len.min((i + 1) * MAILBOX_DATA_BYTES)];
                block.data_bytes_mut()[..chunk.len()].copy_from_slice(chunk);
            }
            let next = if i + 1 < count {
                region.iova() + ((i + 1) * MAILBOX_ALIGN) as u64
            } else {
                0
            };
            block
                .set_next(next)
                .set_block_num(i as u32)
                .set_token(token);
            region.write(i * MAILBOX_ALIGN, block.as_bytes())?;
        }
        Ok(())
    }

    /// Executes one command and returns its whole output (`outlen` bytes) when it succeeded.
    /// `idle` runs between checks of the entry (event processing, interrupt waits); it returns
    /// true when it already waited, so the poll loop does not also spin.
    ///
    /// Errors other than [`DriverError::Command`] (and [`CmdFailure::NoFreeSlot`]) mean the
    /// command was never posted; a [`DriverError::Command`] error means the device took it.
    pub fn exec<B: Backend>(
        &mut self,
        backend: &B,
        input: &[u8],
        outlen: usize,
        timeout: Duration,
        idle: &mut dyn FnMut() -> bool,
    ) -> Result<Vec<u8>, DriverError> {
        let opcode = CmdIn::new(input).map_or(0, |header| header.opcode());
        let fail = |failure| DriverError::Command(CmdError { opcode, failure });
        if input.len() < CMD_INLINE_BYTES || outlen < CMD_INLINE_BYTES {
            return Err(DriverError::CommandLayout {
                opcode,
                what: "input or output (under the 16 inline bytes)",
            });
        }
        if !self.unanswered.is_empty() {
            self.reclaim_answered();
        }
        let slot = (0..self.slots)
            .find(|s| self.unanswered.iter().all(|u| u.slot != *s))
            .ok_or(fail(CmdFailure::NoFreeSlot(self.slots)))?;
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let in_extra = input.len() - CMD_INLINE_BYTES;
        let out_extra = outlen - CMD_INLINE_BYTES;
        let blocks_in = self.blocks_for(input.len(), true)?;
        let blocks_out = self.blocks_for(outlen, false)?;
        let (in_iova, out_iova) = {
            let (region_in, region_out) = (
                self.region(&blocks_in, true),
                self.region(&blocks_out, false),
            );
            Self::write_chain(region_in, Some(&input[CMD_INLINE_BYTES..]), in_extra, token)?;
            Self::write_chain(region_out, None, out_extra, token)?;
            (region_in.iova(), region_out.iova())
        };
        let mut entry = CmdLayout::zeroed();
        entry
            .set_kind(CMD_TYPE_PCIE)
            .set_inlen(input.len() as u32)
            .set_in_ptr(if in_extra > 0 { in_iova } else { 0 })
            .set_outlen(outlen as u32)
            .set_out_ptr(if out_extra > 0 { out_iova } else { 0 })
            .set_token(token)
            .set_status_own(CMD_OWNER_HW);
        entry.set_inline_input(&input[..CMD_INLINE_BYTES]);
        let at = slot * self.stride;
        let mut back = CmdLayout::zeroed();
        let mut posts = 0;
        let answered = loop {
            self.queue.write(at, entry.as_bytes())?;
            // The entry and mailboxes must reach the device before the doorbell that posts them.
            wmb();
            Registers::init_seg(backend).write(CmdDoorbell::slot(slot));
            posts += 1;
            if !self.wait_for_answer(at, timeout, idle) {
                break false;
            }
            // The entry and output mailboxes are read only after the ownership bit handed them
            // back.
            rmb();
            self.queue
                .read(at, back.as_bytes_mut())
                .map_err(|_| fail(CmdFailure::BadOutput("command entry unreadable")))?;
            if posts > 1 || !self.holds_previous_answer(slot, &back) {
                break true;
            }
            // The entry shows, byte for byte, the answer this slot's previous command got:
            // the device handed back an entry it did not take from us, so it never saw this
            // command (its doorbell found the entry not owned). Posted again, once; the token
            // check below refuses whatever comes back a second time.
            self.stale_entries += 1;
        };
        if !answered {
            // The device may still answer into this slot and these mailboxes.
            let mut mailboxes = Vec::with_capacity(2);
            for (blocks, input, used) in [
                (blocks_in, true, in_extra > 0),
                (blocks_out, false, out_extra > 0),
            ] {
                match blocks {
                    Blocks::Own(region) => mailboxes.push(region),
                    Blocks::Pool if !used => {}
                    Blocks::Pool if input => mailboxes.extend(self.pool_in.take()),
                    Blocks::Pool => mailboxes.extend(self.pool_out.take()),
                }
            }
            self.unanswered.push(Unanswered { slot, mailboxes });
            return Err(fail(CmdFailure::Timeout(timeout)));
        }
        self.last_answers[slot] = Some(back);
        let delivery = back.delivery_status_raw();
        if delivery != 0 {
            return Err(fail(CmdFailure::Delivery(
                DeliveryStatus::try_from(delivery).map_err(|_| delivery),
            )));
        }
        if back.token() != token {
            return Err(fail(CmdFailure::TokenChanged {
                sent: token,
                found: back.token(),
            }));
        }
        let mut output = vec![0u8; outlen];
        output[..CMD_INLINE_BYTES].copy_from_slice(&back.inline_output());
        let region = self.region(&blocks_out, false);
        let mut block = CmdMailbox::zeroed();
        for i in 0..out_extra.div_ceil(MAILBOX_DATA_BYTES) {
            region
                .read(
                    i * MAILBOX_ALIGN,
                    &mut block.as_bytes_mut()[..MAILBOX_BLOCK_SIZE],
                )
                .map_err(|_| fail(CmdFailure::BadOutput("output mailbox unreadable")))?;
            if block.token() != token || block.block_num() != i as u32 {
                return Err(fail(CmdFailure::BadOutput(
                    "output mailbox token or block number changed",
                )));
            }
            let start = CMD_INLINE_BYTES + i * MAILBOX_DATA_BYTES;
            let end = outlen.min(start + MAILBOX_DATA_BYTES);
            output[start..end].copy_from_slice(&block.data_bytes()[..end - start]);
        }
        self.executed += 1;
        // `outlen` (and so the output) is at least the 16-byte header, checked above.
        let header = CmdOut::new(&output[..])
            .map_err(|_| fail(CmdFailure::BadOutput("output shorter than its header")))?;
        let status = header.status();
        if status != CmdStatus::Ok as u8 {
            return Err(fail(CmdFailure::Status {
                status: CmdStatus::try_from(status).map_err(|_| status),
                syndrome: header.syndrome(),
            }));
        }
        Ok(output)
    }

    /// Polls the entry at `at` until the device hands it back (true) or `timeout` passes.
    fn wait_for_answer(
        &self,
        at: usize,
        timeout: Duration,
        idle: &mut dyn FnMut() -> bool,
    ) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let mut own = [CMD_OWNER_HW];
            let _ = self.queue.read(at + STATUS_OWN, &mut own);
            if own[0] & CMD_OWNER_HW == 0 {
                return true;
            }
            if start.elapsed() > timeout {
                return false;
            }
            if !idle() {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(Duration::from_micros(if spins < 256 { 1 } else { 100 }));
                }
            }
        }
    }

    /// Gives up the queue page and every mailbox for good, unmapped never: for when the device
    /// may still write them and no function reset could stop it.
    pub fn leak(&mut self) {
        for unanswered in self.unanswered.drain(..) {
            unanswered.mailboxes.into_iter().for_each(DmaRegion::leak);
        }
        self.pool_in.take().into_iter().for_each(DmaRegion::leak);
        self.pool_out.take().into_iter().for_each(DmaRegion::leak);
        self.queue.take().leak();
    }
}

impl Drop for CmdQueue {
    fn drop(&mut self) {
        if !self.unanswered.is_empty() {
            // No reset ended the unanswered commands: the device may still write their entries
            // and mailboxes, so that memory is never unmapped or reused.
            self.leak();
        }
    }
}

/// A zeroed command input of `size` bytes (at least the 16-byte header) with opcode and op_mod set.
pub(crate) fn input(opcode: cxdirect_hw::cmd::Opcode, op_mod: u16, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size.max(16)];
    buf[0..2].copy_from_slice(&(opcode as u16).to_be_bytes());
    buf[6..8].copy_from_slice(&op_mod.to_be_bytes());
    buf
}

/// The error for a command output shorter than the layout it is read through. The queue hands
/// back the `outlen` bytes asked for, so this means the caller asked for fewer bytes than the
/// command's output layout holds.
pub(crate) fn output_too_short(error: LayoutError) -> DriverError {
    let (layout, len) = match error {
        LayoutError::TooShort { layout, len, .. }
        | LayoutError::IndexOutOfRange { layout, len, .. } => (layout, len),
    };
    DriverError::BadDeviceValue {
        what: layout,
        value: len as u64,
    }
}

/// A DESTROY_* command input for object `id`, its number at input byte `at`.
pub(crate) fn destroy_input(op: cxdirect_hw::cmd::Opcode, id: u32, at: usize) -> Vec<u8> {
    let mut cmd = input(op, 0, 16);
    cmd[at..at + 4].copy_from_slice(&id.to_be_bytes());
    cmd
}

/// The mini-CQE format a receive ring's CQ is compressed in where `caps` allow compression:
/// the hash format, or for a striding ring the checksum and stride index one (only it carries
/// the stride index the striding receive path reads). `None`: not compressed.
pub(crate) fn rx_mini_cqe_format(caps: &CmdHcaCap<&[u8]>, striding: bool) -> Option<u8> {
    use cxdirect_hw::cqe::mini_cqe_res_format::{CSUM_STRIDX, HASH};
    match (caps.cqe_compression(), striding) {
        (false, _) => None,
        (true, false) => Some(HASH),
        (true, true) => caps.mini_cqe_resp_stride_index().then_some(CSUM_STRIDX),
    }
}

/// The CREATE_CQ input for a CQ of 2^`log_size` 64-byte CQEs in `ring`, its doorbell record at
/// device address `dbr_iova`, arm doorbells on UAR page `uar` and events to EQ `eqn`; CQE
/// compression on with `compression`, the mini-CQE format (one of
/// [`cxdirect_hw::cqe::mini_cqe_res_format`]).
pub(crate) fn create_cq_input(
    ring: &DmaRegion,
    dbr_iova: u64,
    log_size: u8,
    uar: u32,
    eqn: u8,
    compression: Option<u8>,
) -> Result<Vec<u8>, DriverError> {
    use cxdirect_hw::cmd::Opcode;
    use cxdirect_hw::cq::CreateCqIn;
    let page = ring.page_size();
    let pages = ring.len().div_ceil(page);
    let mut cmd = input(Opcode::CreateCq, 0, CreateCqIn::<&[u8]>::SIZE + 8 * pages);
    let mut c = CreateCqIn::new(&mut cmd[..])
        .map_err(|_| DriverError::layout(Opcode::CreateCq, "input"))?;
    c.cq_context_mut()
        .set_log_cq_size(log_size)
        .set_uar_page(uar)
        .set_c_eqn(eqn)
        .set_log_page_size((page.trailing_zeros() - 12) as u8)
        .set_dbr_addr(dbr_iova)
        .set_cqe_comp_en(compression.is_some())
        .set_mini_cqe_res_format(compression.unwrap_or(0));
    for i in 0..pages {
        let _ = c.set_pas(i, ring.iova() + (i * page) as u64);
    }
    Ok(cmd)
}
