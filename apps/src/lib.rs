//! cxdirect-apps: DPDK-like programs built on cxdirect — info, devbind, testpmd, pingpong,
//! shared-rx, dmabuf-rx, devmem-rx, devmem-tcp ([`devmem_tcp`]), bench, faults — and
//! rdma-core-like ones — krping and rdma-perf ([`krping`], [`rdma_perf`], sharing [`rdma`]) —
//! plus what they share: command-line option groups ([`cli`]), device specs (`emu`,
//! `emu-pair`, PCI addresses) and the emulated backend. [`cmd_diff`] sets two command traces
//! of the model side by side.

pub mod cli;
pub mod cmd_diff;
pub mod devbind;
pub mod devmem_tcp;
pub mod dmabuf;
pub mod emulated;
pub mod faults;
pub mod krping;
pub mod rdma;
pub mod rdma_perf;
pub mod testpmd;
pub mod testpmd_run;

/// `spec` with `,iommu=MODE` appended when it names no IOMMU mode itself: a program's
/// `--iommu-mode` is the default, a spec's own option wins.
pub fn with_iommu_mode(spec: &str, mode: &str) -> String {
    if spec.contains("iommu=") {
        spec.to_string()
    } else {
        format!("{spec},iommu={mode}")
    }
}

/// Opens the PCI function a spec names (`[pci:]DOMAIN:BUS:DEVICE.FUNCTION[,iommu=MODE]`)
/// through VFIO, with `mode` (`auto`, `type1`, `iommufd` or `noiommu`) unless the spec names
/// one; the device is not brought up (see [`cxdirect::Device::open`] for both at once).
pub fn vfio_open(
    spec: &str,
    mode: &str,
) -> Result<cxdirect::backend::vfio::VfioDevice, cxdirect::backend::vfio::VfioError> {
    let spec: cxdirect::backend::vfio::DeviceSpec = with_iommu_mode(spec, mode).parse()?;
    cxdirect::backend::vfio::VfioDevice::open(
        &spec.address.to_string(),
        spec.iommu,
        cxdirect::backend::vfio::RealSys,
    )
}

/// The ports a program's `--device` options name: emulated or PCI, never mixed.
pub enum Ports {
    /// Modelled functions (`emu`, `emu-pair`).
    Emulated(Vec<emulated::EmuBackend>),
    /// PCI functions opened through VFIO.
    Pci(Vec<cxdirect::backend::vfio::VfioDevice>),
}

/// Why [`open_ports`] gave no ports.
#[derive(Debug)]
pub enum OpenError {
    /// The options are wrong (show the usage).
    Usage(String),
    /// A function could not be opened.
    Open(String),
}

/// Opens one or two ports from `specs`: emulated ones built from `model`, or PCI
/// functions through VFIO with `iommu_mode` unless a spec names one.
pub fn open_ports(
    specs: &[String],
    model: cxdirect_emu::EmuConfig,
    iommu_mode: cli::IommuMode,
) -> Result<Ports, OpenError> {
    if specs.is_empty() || specs.len() > 2 {
        return Err(OpenError::Usage(format!(
            "--device: give one or two devices, not {}",
            specs.len()
        )));
    }
    let parsed: Vec<emulated::Spec> = specs.iter().map(|s| emulated::Spec::parse(s)).collect();
    let pci = parsed
        .iter()
        .filter(|s| matches!(s, emulated::Spec::Pci(_)))
        .count();
    if pci == 0 {
        let backends: Vec<_> = parsed
            .iter()
            .flat_map(|s| emulated::open_emulated(s, model.clone()))
            .collect();
        if backends.len() > 2 {
            return Err(OpenError::Usage(
                "--device: at most two ports (emu-pair is two)".into(),
            ));
        }
        return Ok(Ports::Emulated(backends));
    }
    if pci != parsed.len() {
        return Err(OpenError::Usage(
            "--device: do not mix emulated and PCI devices".into(),
        ));
    }
    let mut backends = Vec::new();
    for spec in specs {
        backends.push(
            vfio_open(spec, iommu_mode.as_str())
                .map_err(|e| OpenError::Open(format!("{spec}: {e}")))?,
        );
    }
    Ok(Ports::Pci(backends))
}

/// Empty receive polls between two looks at the clock in [`poll_rx`]: a clock read costs about
/// as much as an empty poll, and a latency measurement should time the driver, not the clock.
const POLLS_PER_CLOCK_READ: u32 = 256;

/// Polls `queue` (bursts of up to `max` packets into `got`) until something arrives, and
/// returns how many arrived; `None` once `deadline` has passed with nothing. The clock is read
/// only every `POLLS_PER_CLOCK_READ` (256) empty polls, so the deadline may be overrun by that many
/// polls (microseconds).
pub fn poll_rx<B: cxdirect::Backend>(
    queue: &mut cxdirect::RxQueue<B>,
    got: &mut Vec<cxdirect::Mbuf>,
    max: usize,
    deadline: std::time::Instant,
) -> Option<usize> {
    let mut empty = 0u32;
    loop {
        let n = queue.rx_burst(got, max).expect(testpmd::VEC_TAKES_ANY_POOL);
        if n > 0 {
            return Some(n);
        }
        empty = empty.wrapping_add(1);
        if empty % POLLS_PER_CLOCK_READ == 0 && std::time::Instant::now() > deadline {
            return None;
        }
    }
}

/// The README's Rust code blocks, compiled and run as doctests so the first program it shows
/// keeps working.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
