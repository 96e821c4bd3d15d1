//! The `vfio_user` [`ServerBackend`] over one modelled function.
//!
//! | request | served by |
//! |---|---|
//! | region read/write, config space (index 7) | [`Device::config_read`]/[`Device::config_write`] (any length, any alignment) |
//! | region read/write, BAR0 (index 0) | [`bar::read`]/[`bar::write`] into [`Device::mmio_read`]/[`Device::mmio_write`], except reads of the PBA page, which show the [`MsixEventfds`] pending bits |
//! | region read/write, any other index | refused: those regions have size 0 |
//! | `DMA_MAP`/`DMA_UNMAP` | [`GuestMemory`] (one mmap per client file, each map a window of it in the model's IOMMU; a map without a file descriptor is accepted with a warning but unreachable) |
//! | `SET_IRQS` | [`MsixEventfds::set_irqs`] |
//! | BAR0 writes that may be part of a BlueFlame copy | [`blueflame`]: assembled into the copy a write-combining bus delivers; every other request rings a held copy first |
//! | `DEVICE_RESET` | [`Device::reset`], pending MSI-X bits cleared; DMA mappings and eventfds stay, as with VFIO |
//!
//! Every refusal goes back to the client as an error reply and is logged (the first
//! [`LOGGED_REFUSALS`] of them, then every thousandth), never a panic.

use super::bar::{self, MmioTarget, WriteOutcome};
use super::blueflame::{self, Assembly, AssemblyStats};
use super::dma::{GuestMemory, Mapped};
use super::irq::MsixEventfds;
use super::layout::{self, BAR0_REGION, CONFIG_REGION};
use crate::device::{MmioError, MSIX_PBA_OFFSET};
use crate::pci::{COMMAND_MEMORY_SPACE, REG_COMMAND};
use crate::Device;
use std::fs::File;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

/// Refusals logged one by one before the log thins out to every thousandth.
pub const LOGGED_REFUSALS: u64 = 32;

/// Size of the BAR0 page the PBA lives in.
const PBA_PAGE: u64 = 0x1000;

/// What one backend has served, for the exit summary and for tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BackendStats {
    /// Config space reads.
    pub config_reads: u64,
    /// Config space writes.
    pub config_writes: u64,
    /// BAR0 reads.
    pub bar_reads: u64,
    /// BAR0 writes.
    pub bar_writes: u64,
    /// Model MMIO writes made for them (after splitting).
    pub mmio_pieces: u64,
    /// Model MMIO writes the model refused (dropped).
    pub mmio_refused: u64,
    /// DMA maps accepted.
    pub dma_maps: u64,
    /// DMA maps that came without a file descriptor (accepted, not reachable by the device).
    pub dma_maps_without_fd: u64,
    /// DMA unmap requests accepted.
    pub dma_unmaps: u64,
    /// `SET_IRQS` requests accepted.
    pub set_irqs: u64,
    /// Device resets.
    pub resets: u64,
    /// Requests refused.
    pub refused: u64,
    /// BlueFlame copies that came in pieces and went to the model whole, and those rung as
    /// doorbells instead ([`blueflame`]).
    pub blueflame: AssemblyStats,
    /// MSI-X eventfd signals sent.
    pub irq_signalled: u64,
    /// MSI-X vectors fired while masked (left pending).
    pub irq_held_pending: u64,
    /// MSI-X vectors fired without an eventfd (dropped).
    pub irq_dropped: u64,
}

/// The backend of one vfio-user connection: one function, its MSI-X eventfds and its DMA
/// mappings.
#[derive(Debug)]
pub struct EmuBackend {
    name: String,
    device: Device,
    irqs: Arc<MsixEventfds>,
    memory: GuestMemory,
    blueflame: Assembly<Device>,
    stats: BackendStats,
}

/// BAR0 as the client sees it: the model, with the PBA page served from the eventfd state.
struct Bar0<'a> {
    device: &'a Device,
    irqs: &'a MsixEventfds,
}

impl MmioTarget for Bar0<'_> {
    fn bar_size(&self) -> u64 {
        self.device.bar0_size()
    }

    fn mmio_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MmioError> {
        if (MSIX_PBA_OFFSET..MSIX_PBA_OFFSET + PBA_PAGE).contains(&offset) {
            if !memory_enabled(self.device) {
                buf.fill(0xff);
                return Ok(());
            }
            // Pieces are naturally aligned and at most 8 bytes, so they sit inside one quadword.
            let within = offset - MSIX_PBA_OFFSET;
            let word = self.irqs.pba_qword(within / 8).to_le_bytes();
            let at = (within % 8) as usize;
            if let Some(src) = word.get(at..at + buf.len()) {
                buf.copy_from_slice(src);
            }
            return Ok(());
        }
        self.device.mmio_read(offset, buf)
    }

    fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        self.device.mmio_write(offset, data)
    }

    fn is_memory(&self, offset: u64) -> bool {
        self.device.is_memory(offset)
    }
}

fn memory_enabled(device: &Device) -> bool {
    let mut command = [0u8; 2];
    device.config_read(REG_COMMAND, &mut command).is_ok()
        && u16::from_le_bytes(command) & COMMAND_MEMORY_SPACE != 0
}

fn invalid(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl EmuBackend {
    /// A backend for `device`, which gets a fresh [`MsixEventfds`] as its interrupt sink.
    /// `name` labels log lines (the socket path, say). BlueFlame copies written in pieces are
    /// assembled with [`blueflame::DEFAULT_HOLD`].
    pub fn new(name: impl Into<String>, device: Device) -> Self {
        Self::with_blueflame_hold(name, device, blueflame::DEFAULT_HOLD)
    }

    /// As [`new`](Self::new), holding a BlueFlame copy's first store up to `hold` for the
    /// rest (zero: every store reaches the model as it comes).
    pub fn with_blueflame_hold(name: impl Into<String>, device: Device, hold: Duration) -> Self {
        let vectors = device_msix_vectors(&device);
        let irqs = Arc::new(MsixEventfds::new(vectors));
        device.set_interrupt_sink(irqs.clone());
        Self {
            name: name.into(),
            memory: GuestMemory::new(device.clone()),
            blueflame: Assembly::new(device.clone(), hold),
            device,
            irqs,
            stats: BackendStats::default(),
        }
    }

    /// The function served.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The MSI-X state the client set up.
    pub fn irqs(&self) -> &MsixEventfds {
        &self.irqs
    }

    /// The DMA mappings the client made.
    pub fn memory(&self) -> &GuestMemory {
        &self.memory
    }

    /// What has been served so far.
    pub fn stats(&self) -> BackendStats {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.irqs.counters;
        BackendStats {
            irq_signalled: c.signalled.load(Relaxed),
            irq_held_pending: c.held_pending.load(Relaxed),
            irq_dropped: c.dropped.load(Relaxed),
            blueflame: self.blueflame.stats(),
            ..self.stats
        }
    }

    /// The label used in log lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Rings a BlueFlame copy the assembly holds: another message came before its rest.
    fn ring_held_copy(&mut self) {
        let outcome = self.blueflame.interrupt();
        self.count_stores(outcome);
    }

    /// Counts the model writes a BAR0 store (or a rung copy) made, logging refusals.
    fn count_stores(&mut self, outcome: WriteOutcome) {
        self.stats.mmio_pieces += u64::from(outcome.pieces);
        self.stats.mmio_refused += u64::from(outcome.refused);
        if let Some(e) = outcome.first_refusal {
            let n = self.stats.mmio_refused;
            if n <= LOGGED_REFUSALS || n % 1000 == 0 {
                log::warn!(
                    "{}: the model dropped a BAR0 store: {e} ({n} dropped so far)",
                    self.name
                );
            }
        }
    }

    fn refuse(&mut self, what: &str, error: &dyn std::fmt::Display) {
        self.stats.refused += 1;
        let n = self.stats.refused;
        if n <= LOGGED_REFUSALS || n % 1000 == 0 {
            log::warn!(
                "{}: refused {what}: {error} ({n} refused so far)",
                self.name
            );
        }
    }
}

/// The MSI-X vector count the function's config space advertises (Message Control's table
/// size field plus one).
pub fn device_msix_vectors(device: &Device) -> u16 {
    use crate::pci::{MSIX_CAP_OFFSET, MSIX_MSG_CTRL};
    let mut ctrl = [0u8; 2];
    match device.config_read(MSIX_CAP_OFFSET + MSIX_MSG_CTRL, &mut ctrl) {
        Ok(()) => (u16::from_le_bytes(ctrl) & 0x07ff) + 1,
        Err(_) => crate::pci::DEFAULT_MSIX_VECTORS,
    }
}

impl ServerBackend for EmuBackend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        self.ring_held_copy();
        let result = match region {
            CONFIG_REGION => {
                self.stats.config_reads += 1;
                self.device.config_read(offset, data).map_err(invalid)
            }
            BAR0_REGION => {
                self.stats.bar_reads += 1;
                let bar0 = Bar0 {
                    device: &self.device,
                    irqs: &self.irqs,
                };
                bar::read(&bar0, offset, data).map_err(invalid)
            }
            _ => Err(absent(region, layout::region_size(&self.device, region))),
        };
        if let Err(e) = &result {
            self.refuse(&format!("read of region {region} at {offset:#x}"), e);
        }
        result
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let result = match region {
            CONFIG_REGION => {
                self.ring_held_copy();
                self.stats.config_writes += 1;
                self.device.config_write(offset, data).map_err(invalid)
            }
            BAR0_REGION => {
                self.stats.bar_writes += 1;
                // Through the BlueFlame assembly: BAR0 writes need nothing of `Bar0` but the
                // device (the PBA page is read-only).
                match self.blueflame.write(offset, data) {
                    Ok(outcome) => {
                        self.count_stores(outcome);
                        Ok(())
                    }
                    Err(e) => Err(invalid(e)),
                }
            }
            _ => {
                self.ring_held_copy();
                Err(absent(region, layout::region_size(&self.device, region)))
            }
        };
        if let Err(e) = &result {
            self.refuse(&format!("write of region {region} at {offset:#x}"), e);
        }
        result
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        self.ring_held_copy();
        let read = flags.contains(DmaMapFlags::READ);
        let write = flags.contains(DmaMapFlags::WRITE);
        match self.memory.map(fd, offset, address, size, read, write) {
            Ok(Mapped::WithoutFd) => {
                self.stats.dma_maps += 1;
                self.stats.dma_maps_without_fd += 1;
                let n = self.stats.dma_maps_without_fd;
                if n <= LOGGED_REFUSALS || n % 1000 == 0 {
                    log::warn!(
                        "{}: DMA map IOVA {address:#x}+{size:#x} came without a file descriptor; \
                         the device cannot reach it ({n} such maps). Guest RAM must be shared: \
                         -object memory-backend-memfd,id=mem,size=...,share=on -machine \
                         memory-backend=mem (QEMU's ROMs map this way without a vIOMMU; harmless)",
                        self.name
                    );
                }
                Ok(())
            }
            Ok(Mapped::Reachable) => {
                self.stats.dma_maps += 1;
                log::debug!(
                    "{}: DMA map IOVA {address:#x}+{size:#x} (file offset {offset:#x}, {}), {} mappings \
                     in {} host mappings",
                    self.name,
                    if write { "read-write" } else { "read-only" },
                    self.memory.len(),
                    self.memory.host_mappings()
                );
                Ok(())
            }
            Err(e) => {
                self.refuse("DMA map", &e);
                Err(invalid(e))
            }
        }
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        self.ring_held_copy();
        if flags.contains(DmaUnmapFlags::GET_DIRTY_PAGE_INFO) {
            let e = super::dma::DmaError::DirtyTracking;
            self.refuse("DMA unmap", &e);
            return Err(invalid(e));
        }
        let all = flags.contains(DmaUnmapFlags::UNMAP_ALL);
        match self.memory.unmap(address, size, all) {
            Ok(n) => {
                self.stats.dma_unmaps += 1;
                log::debug!(
                    "{}: DMA unmap IOVA {address:#x}+{size:#x}{}: {n} removed, {} left in {} host \
                     mappings",
                    self.name,
                    if all { " (all)" } else { "" },
                    self.memory.len(),
                    self.memory.host_mappings()
                );
                Ok(())
            }
            Err(e) => {
                self.refuse("DMA unmap", &e);
                Err(invalid(e))
            }
        }
    }

    fn reset(&mut self) -> io::Result<()> {
        self.ring_held_copy();
        self.stats.resets += 1;
        self.device.reset();
        self.irqs.clear_pending();
        log::info!("{}: device reset", self.name);
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        self.ring_held_copy();
        let nfds = fds.len();
        match self.irqs.set_irqs(index, flags, start, count, fds) {
            Ok(()) => {
                self.stats.set_irqs += 1;
                log::debug!(
                    "{}: SET_IRQS index {index} flags {flags:#x} vectors {start}+{count} ({nfds} fds): {} vectors armed",
                    self.name,
                    self.irqs.armed()
                );
                Ok(())
            }
            Err(e) => {
                self.refuse("SET_IRQS", &e);
                Err(invalid(e))
            }
        }
    }
}

fn absent(region: u32, size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("region {region} is absent (size {size})"),
    )
}
