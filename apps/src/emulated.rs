//! The emulated backend: the driver's [`Backend`] seam connected to the in-process device model.
//! Device specs `emu` (one function whose port receives its own frames) and `emu-pair` (two
//! functions wired back to back).
//!
//! This module is a DMA room: it hands the model raw pointers to host memory the driver maps.

use cxdirect::{Backend, BackendError, Interrupt};
use cxdirect_dma::{Iommu, IommuError, IovaRange};
use cxdirect_emu::dma::Access;
use cxdirect_emu::irq::InterruptSink;
use cxdirect_emu::{pci, Device as EmuDevice, EmuConfig};
use std::sync::{Arc, Mutex};

/// IOVAs the emulated IOMMU offers: a 48-bit space less the first page, as a VT-d unit would.
const IOVA_SPACE: IovaRange = IovaRange {
    start: 0x1000,
    end: (1 << 48) - 1,
};

/// The model's IOMMU as the driver's DMA seam.
struct EmuIommu {
    dev: EmuDevice,
}

// SAFETY: `map` hands the model exactly the range the caller vouched for, and `unmap` removes it
// from the model's IOMMU before returning Ok, after which the model can no longer reach it.
unsafe impl Iommu for EmuIommu {
    fn iova_ranges(&self) -> Vec<IovaRange> {
        vec![IOVA_SPACE]
    }

    unsafe fn map(&self, iova: u64, host: *mut u8, len: usize) -> Result<(), IommuError> {
        // SAFETY: the caller guarantees `host..host + len` stays valid until unmapped, which is
        // the model's own requirement.
        unsafe {
            self.dev
                .iommu()
                .map(iova, host, len as u64, Access::ReadWrite)
        }
        .map_err(|e| IommuError::MapRefused {
            iova,
            len: len as u64,
            reason: e.to_string(),
        })
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<(), IommuError> {
        self.dev
            .iommu()
            .unmap(iova, len as u64)
            .map_err(|e| IommuError::UnmapRefused {
                iova,
                len: len as u64,
                reason: e.to_string(),
            })
    }
}

/// MSI-X vectors of the model delivered to the driver's eventfds.
struct EventFdSink {
    vectors: Mutex<Vec<Interrupt>>,
}

impl InterruptSink for EventFdSink {
    fn signal(&self, vector: u16) {
        if let Some(irq) = self
            .vectors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(usize::from(vector))
        {
            irq.signal();
        }
    }
}

/// One modelled function behind the driver's backend seam.
pub struct EmuBackend {
    dev: EmuDevice,
    iommu: Arc<EmuIommu>,
    sink: Arc<EventFdSink>,
    name: String,
}

impl EmuBackend {
    /// Wraps a modelled function; decoding of BAR0 is enabled as vfio-pci does on open.
    pub fn new(dev: EmuDevice, name: impl Into<String>) -> Self {
        let sink = Arc::new(EventFdSink {
            vectors: Mutex::new(Vec::new()),
        });
        dev.set_interrupt_sink(sink.clone());
        let mut cmd = [0u8; 2];
        let _ = dev.config_read(pci::REG_COMMAND, &mut cmd);
        let value = u16::from_le_bytes(cmd) | pci::COMMAND_MEMORY_SPACE;
        let _ = dev.config_write(pci::REG_COMMAND, &value.to_le_bytes());
        Self {
            iommu: Arc::new(EmuIommu { dev: dev.clone() }),
            dev,
            sink,
            name: name.into(),
        }
    }

    /// The modelled function (for its counters and fault injection).
    pub fn model(&self) -> &EmuDevice {
        &self.dev
    }
}

impl Backend for EmuBackend {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn bar0_len(&self) -> usize {
        self.dev.bar0_size() as usize
    }

    fn read32(&self, offset: usize) -> [u8; 4] {
        let mut bytes = [0xffu8; 4];
        // An access the model refuses reads as a dead device would: all ones.
        if self.dev.mmio_read(offset as u64, &mut bytes).is_err() {
            bytes = [0xff; 4];
        }
        bytes
    }

    fn write32(&self, offset: usize, bytes: [u8; 4]) {
        let _ = self.dev.mmio_write(offset as u64, &bytes);
    }

    fn write64(&self, offset: usize, bytes: [u8; 8]) {
        let _ = self.dev.mmio_write(offset as u64, &bytes);
    }

    fn write_bf(&self, offset: usize, wqe: &[u8; 64]) {
        let _ = self.dev.mmio_write(offset as u64, wqe);
    }

    fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), BackendError> {
        self.dev
            .config_read(u64::from(offset), buf)
            .map_err(|e| BackendError::Config {
                op: "read",
                offset,
                len: buf.len(),
                reason: e.to_string(),
            })
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), BackendError> {
        self.dev
            .config_write(u64::from(offset), data)
            .map_err(|e| BackendError::Config {
                op: "write",
                offset,
                len: data.len(),
                reason: e.to_string(),
            })
    }

    fn iommu(&self) -> Arc<dyn Iommu> {
        self.iommu.clone()
    }

    fn enable_msix(&self, vectors: u16) -> Result<Vec<Interrupt>, BackendError> {
        let fail = |reason: String| BackendError::Interrupts { vectors, reason };
        let mut driver_side = Vec::with_capacity(usize::from(vectors));
        let mut device_side = Vec::with_capacity(usize::from(vectors));
        for _ in 0..vectors {
            let irq = Interrupt::new()?;
            device_side.push(irq.try_clone()?);
            driver_side.push(irq);
        }
        *self.sink.vectors.lock().unwrap_or_else(|e| e.into_inner()) = device_side;
        let control = pci::MSIX_CAP_OFFSET + pci::MSIX_MSG_CTRL;
        self.dev
            .config_write(control, &pci::MSIX_CTRL_ENABLE.to_le_bytes())
            .map_err(|e| fail(e.to_string()))?;
        Ok(driver_side)
    }

    fn disable_msix(&self) -> Result<(), BackendError> {
        let control = pci::MSIX_CAP_OFFSET + pci::MSIX_MSG_CTRL;
        self.dev
            .config_write(control, &0u16.to_le_bytes())
            .map_err(|e| BackendError::Interrupts {
                vectors: 0,
                reason: e.to_string(),
            })?;
        self.sink
            .vectors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    fn reset(&self) -> Result<(), BackendError> {
        self.dev.reset();
        Ok(())
    }
}

/// What a device spec names.
pub enum Spec {
    /// One emulated function on a loopback wire.
    Emu,
    /// Two emulated functions wired back to back.
    EmuPair,
    /// A PCI function reached through VFIO.
    Pci(String),
}

impl Spec {
    /// Parses `emu`, `emu-pair`, or a PCI address.
    pub fn parse(spec: &str) -> Self {
        match spec {
            "emu" => Spec::Emu,
            "emu-pair" => Spec::EmuPair,
            other => Spec::Pci(other.to_string()),
        }
    }
}

/// The emulated functions a spec names, with the given model configuration.
pub fn open_emulated(spec: &Spec, cfg: EmuConfig) -> Vec<EmuBackend> {
    match spec {
        Spec::Emu => vec![EmuBackend::new(EmuDevice::loopback(cfg), "emu")],
        Spec::EmuPair => {
            let (a, b) = EmuDevice::pair(cfg.clone(), cfg);
            vec![
                EmuBackend::new(a, "emu-pair:0"),
                EmuBackend::new(b, "emu-pair:1"),
            ]
        }
        Spec::Pci(_) => Vec::new(),
    }
}

/// Two emulated functions, each on its own device thread, on a wire with `impairments` (the
/// second's MAC differs in its last bit): their backends named `names`, the first on the
/// wire's port A.
///
/// # Errors
///
/// The wire refused the impairments (a rate out of range).
pub fn wired_pair(
    impairments: cxdirect_emu::wire::Impairments,
    names: [&str; 2],
) -> Result<Vec<EmuBackend>, String> {
    use cxdirect_emu::wire::{PortId, Wire, WireConfig};
    let cfg = crate::cli::EmuExec::Threaded.config();
    let mut cfg_b = cfg.clone();
    cfg_b.mac[5] ^= 1;
    let (a, b) = (EmuDevice::new(cfg), EmuDevice::new(cfg_b));
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            impairments,
            ..WireConfig::default()
        })
        .map_err(|e| format!("wire: {e}"))?,
    );
    a.attach(wire.clone(), PortId::A, &[&b]);
    b.attach(wire, PortId::B, &[&a]);
    Ok(vec![
        EmuBackend::new(a, names[0]),
        EmuBackend::new(b, names[1]),
    ])
}
