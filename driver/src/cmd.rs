//! The command interface, driver side: one command at a time on slot 0 of the command queue,
//! input and output carried inline and in mailbox chains, completion seen through the entry's
//! ownership bit (polled, or after an interrupt once the async EQ exists), and every byte the
//! device wrote back checked before it is believed.

use crate::backend::Backend;
use crate::error::{CmdError, CmdFailure, DriverError};
use cxdirect_dma::{DmaRegion, Iommu, IovaAllocator, PageKind};
use cxdirect_hw::cmd::{
    CmdLayout, CmdMailbox, CmdStatus, DeliveryStatus, CMD_INLINE_BYTES, CMD_OWNER_HW,
    CMD_TYPE_PCIE, MAILBOX_ALIGN, MAILBOX_BLOCK_SIZE, MAILBOX_DATA_BYTES,
};
use cxdirect_hw::init_seg;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Mailbox blocks kept ready for each direction; larger commands get a region of their own.
const POOL_BLOCKS: usize = 64;
/// The slot the driver posts on: one command is in flight at a time.
const SLOT: usize = 0;

/// The command queue and its mailbox pool.
pub(crate) struct CmdQueue {
    queue: DmaRegion,
    pool_in: DmaRegion,
    pool_out: DmaRegion,
    iommu: Arc<dyn Iommu>,
    iovas: Arc<IovaAllocator>,
    stride: usize,
    token: u8,
    /// Commands executed.
    pub executed: u64,
}

/// Mailbox blocks for one direction of one command: the pool, or a region of its own.
enum Blocks<'a> {
    Pool(&'a DmaRegion),
    Own(DmaRegion),
}

impl Blocks<'_> {
    fn region(&self) -> &DmaRegion {
        match self {
            Blocks::Pool(r) => r,
            Blocks::Own(r) => r,
        }
    }
}

impl CmdQueue {
    /// Allocates the queue page and the mailbox pool, and tells the device where the queue is.
    pub fn new<B: Backend>(
        backend: &B,
        iommu: Arc<dyn Iommu>,
        iovas: Arc<IovaAllocator>,
    ) -> Result<Self, DriverError> {
        let queue = DmaRegion::new(iommu.clone(), &iovas, 4096, PageKind::Small)?;
        let pool_in = DmaRegion::new(
            iommu.clone(),
            &iovas,
            POOL_BLOCKS * MAILBOX_ALIGN,
            PageKind::Small,
        )?;
        let pool_out = DmaRegion::new(
            iommu.clone(),
            &iovas,
            POOL_BLOCKS * MAILBOX_ALIGN,
            PageKind::Small,
        )?;
        let geometry = u32::from_be_bytes(backend.read32(init_seg::CMDQ_ADDR_L_SZ));
        let log_stride = geometry & 0xf;
        let log_size = (geometry >> 4) & 0xf;
        if !(6..=12).contains(&log_stride) || log_size > 5 {
            return Err(DriverError::BadDeviceValue {
                what: "command queue geometry",
                value: u64::from(geometry),
            });
        }
        let iova = queue.iova();
        backend.write32(init_seg::CMDQ_ADDR_H, ((iova >> 32) as u32).to_be_bytes());
        backend.write32(
            init_seg::CMDQ_ADDR_L_SZ,
            ((iova as u32) & 0xffff_f000).to_be_bytes(),
        );
        Ok(Self {
            queue,
            pool_in,
            pool_out,
            iommu,
            iovas,
            stride: 1 << log_stride,
            token: 0,
            executed: 0,
        })
    }

    fn blocks_for(&self, len: usize, pool: &'static str) -> Result<Blocks<'_>, DriverError> {
        let count = len
            .saturating_sub(CMD_INLINE_BYTES)
            .div_ceil(MAILBOX_DATA_BYTES);
        if count <= POOL_BLOCKS {
            return Ok(Blocks::Pool(if pool == "in" {
                &self.pool_in
            } else {
                &self.pool_out
            }));
        }
        let region = DmaRegion::new(
            self.iommu.clone(),
            &self.iovas,
            count * MAILBOX_ALIGN,
            PageKind::Auto,
        )?;
        Ok(Blocks::Own(region))
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
    pub fn exec<B: Backend>(
        &mut self,
        backend: &B,
        input: &[u8],
        outlen: usize,
        timeout: Duration,
        idle: &mut dyn FnMut() -> bool,
    ) -> Result<Vec<u8>, DriverError> {
        let opcode = if input.len() >= 2 {
            u16::from_be_bytes([input[0], input[1]])
        } else {
            0
        };
        let fail = |failure| DriverError::Command(CmdError { opcode, failure });
        if input.len() < CMD_INLINE_BYTES || outlen < CMD_INLINE_BYTES {
            return Err(DriverError::Invalid(format!(
                "command {opcode:#x}: input ({}) and output ({outlen}) must be at least 16 bytes",
                input.len()
            )));
        }
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let in_extra = input.len() - CMD_INLINE_BYTES;
        let out_extra = outlen - CMD_INLINE_BYTES;
        let blocks_in = self.blocks_for(input.len(), "in")?;
        let blocks_out = self.blocks_for(outlen, "out")?;
        Self::write_chain(
            blocks_in.region(),
            Some(&input[CMD_INLINE_BYTES..]),
            in_extra,
            token,
        )?;
        Self::write_chain(blocks_out.region(), None, out_extra, token)?;
        let mut entry = CmdLayout::zeroed();
        entry
            .set_kind(CMD_TYPE_PCIE)
            .set_inlen(input.len() as u32)
            .set_in_ptr(if in_extra > 0 {
                blocks_in.region().iova()
            } else {
                0
            })
            .set_outlen(outlen as u32)
            .set_out_ptr(if out_extra > 0 {
                blocks_out.region().iova()
            } else {
                0
            })
            .set_token(token)
            .set_status_own(CMD_OWNER_HW);
        entry.set_inline_input(&input[..CMD_INLINE_BYTES]);
        let at = SLOT * self.stride;
        self.queue.write(at, entry.as_bytes())?;
        // The entry and mailboxes must be visible before the doorbell.
        fence(Ordering::SeqCst);
        backend.write32(init_seg::CMD_DBELL, (1u32 << SLOT).to_be_bytes());

        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let mut own = [0u8; 1];
            self.queue.read(at + 0x3f, &mut own)?;
            if own[0] & CMD_OWNER_HW == 0 {
                break;
            }
            if start.elapsed() > timeout {
                return Err(fail(CmdFailure::Timeout(timeout)));
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
        fence(Ordering::SeqCst);
        let mut back = CmdLayout::zeroed();
        self.queue.read(at, back.as_bytes_mut())?;
        let delivery = back.delivery_status_raw();
        if delivery != 0 {
            return Err(fail(CmdFailure::Delivery(
                DeliveryStatus::try_from(delivery).map_err(|_| delivery),
            )));
        }
        if back.token() != token {
            return Err(fail(CmdFailure::BadOutput("entry token changed")));
        }
        let mut output = vec![0u8; outlen];
        output[..CMD_INLINE_BYTES].copy_from_slice(&back.inline_output());
        let region = blocks_out.region();
        let mut block = CmdMailbox::zeroed();
        for i in 0..out_extra.div_ceil(MAILBOX_DATA_BYTES) {
            region.read(
                i * MAILBOX_ALIGN,
                &mut block.as_bytes_mut()[..MAILBOX_BLOCK_SIZE],
            )?;
            if block.token() != token || block.block_num() != i as u32 {
                return Err(fail(CmdFailure::BadOutput(
                    "output mailbox token or block number changed",
                )));
            }
            let start = CMD_INLINE_BYTES + i * MAILBOX_DATA_BYTES;
            let end = outlen.min(start + MAILBOX_DATA_BYTES);
            output[start..end].copy_from_slice(&block.data_bytes()[..end - start]);
        }
        drop(blocks_out);
        self.executed += 1;
        let status = output[0];
        if status != CmdStatus::Ok as u8 {
            let syndrome = u32::from_be_bytes([output[4], output[5], output[6], output[7]]);
            return Err(fail(CmdFailure::Status {
                status: CmdStatus::try_from(status).map_err(|_| status),
                syndrome,
            }));
        }
        Ok(output)
    }
}

/// A zeroed command input of `size` bytes (at least the 16-byte header) with opcode and op_mod set.
pub(crate) fn input(opcode: cxdirect_hw::cmd::Opcode, op_mod: u16, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size.max(16)];
    buf[0..2].copy_from_slice(&(opcode as u16).to_be_bytes());
    buf[6..8].copy_from_slice(&op_mod.to_be_bytes());
    buf
}
