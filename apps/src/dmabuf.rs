//! Dmabuf memory for the programs that receive into it (dmabuf-rx, devmem-rx): exported by the
//! source a program names, imported, and read back by the CPU to check what landed there.

use clap::ValueEnum;
use cxdirect::backend::vfio::{IommuMode, PeerBar, PeerBarError, RealSys};
use cxdirect_dma::cuda::CudaMemory;
use cxdirect_dma::dmabuf::FdInfo;
use cxdirect_dma::{export, DmaBuf, DmaBufMapping};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Who exports the dmabuf: a program's `--source`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A udmabuf over a memfd.
    Udmabuf,
    /// The system dma-heap.
    DmaHeap,
    /// A memfd imported as it is.
    Memfd,
    /// GPU memory through CUDA.
    Cuda,
}

/// Where a program's receive memory comes from: an exporter cxdirect runs (`--source udmabuf`,
/// `dma-heap`, `memfd`, `cuda`) or a BAR of another PCI function bound to vfio-pci
/// (`--source vfio-bar:BDF,bar=N`), exported by vfio-pci.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceSpec {
    /// An exporter cxdirect runs itself.
    Exporter(Source),
    /// BAR `bar` of the function at `bdf`, peer to peer.
    VfioBar {
        /// The function's PCI address, as given.
        bdf: String,
        /// The BAR (0..=5).
        bar: u32,
    },
}

impl SourceSpec {
    /// The name a summary line prints: the exporter's `--source` name, or `vfio-bar`.
    pub fn name(&self) -> String {
        match self {
            Self::Exporter(s) => s
                .to_possible_value()
                .map(|v| v.get_name().to_string())
                .unwrap_or_default(),
            Self::VfioBar { .. } => "vfio-bar".into(),
        }
    }
}

/// Parses `--source`: `udmabuf`, `dma-heap`, `memfd`, `cuda`, or `vfio-bar:BDF,bar=N`.
pub fn parse_source(text: &str) -> Result<SourceSpec, String> {
    if let Some(rest) = text.strip_prefix("vfio-bar:") {
        let (bdf, opts) = rest.split_once(',').unwrap_or((rest, ""));
        let bar = match opts.strip_prefix("bar=") {
            Some(n) => n
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= 5)
                .ok_or_else(|| format!("`bar={n}`: a BAR is 0 to 5"))?,
            None if opts.is_empty() => {
                return Err(format!(
                    "`{text}` names no BAR: write vfio-bar:{bdf},bar=N (ivshmem-plain keeps \
                     its shared memory in BAR 2)"
                ))
            }
            None => return Err(format!("`{opts}`: the only option of vfio-bar is bar=N")),
        };
        if bdf.is_empty() {
            return Err(
                "vfio-bar needs the PCI address of the function: vfio-bar:BDF,bar=N".into(),
            );
        }
        return Ok(SourceSpec::VfioBar {
            bdf: bdf.to_string(),
            bar,
        });
    }
    Source::from_str(text, true)
        .map(SourceSpec::Exporter)
        .map_err(|_| format!("`{text}`: give udmabuf, dma-heap, memfd, cuda or vfio-bar:BDF,bar=N"))
}

/// Opens BAR `bar` of the peer function `bdf` through VFIO in `mode`, has vfio-pci export its
/// first `size` bytes as a dmabuf and imports it, with the BAR's own mapping as the backing
/// file (VFIO type1 maps that; iommufd takes the dmabuf by descriptor).
pub fn export_and_import_peer(
    bdf: &str,
    bar: u32,
    size: u64,
    mode: IommuMode,
) -> Result<(Arc<DmaBuf>, PeerBar), String> {
    let peer = PeerBar::open(bdf, bar, size, mode, RealSys).map_err(|e| e.to_string())?;
    println!(
        "peer: {} BAR {} of {} bytes opened through vfio-pci",
        peer.bdf(),
        peer.bar(),
        peer.size()
    );
    let fd = peer
        .export(0, size, fdinfo_size)
        .map_err(|e: PeerBarError| e.to_string())?;
    let (bar_file, bar_offset) = peer
        .bar_file()
        .map_err(|e| format!("peer {bdf}: duplicating the device file: {e}"))?;
    let buf = DmaBuf::import_with_backing(fd, bar_file, bar_offset).map_err(|e| e.to_string())?;
    Ok((buf, peer))
}

/// The size `/proc/self/fdinfo` gives a dmabuf.
fn fdinfo_size(fd: &OwnedFd) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .ok()
        .and_then(|t| FdInfo::parse(&t))
        .map(|i| i.size)
}

/// POSIX `cksum` (CRC-32, polynomial 0x04C11DB7, the length appended): what `cksum` prints
/// for the same bytes, so memory read here can be compared with a file read elsewhere.
#[derive(Clone)]
pub struct Cksum {
    table: [u32; 256],
    crc: u32,
    len: u64,
}

impl Default for Cksum {
    fn default() -> Self {
        Self::new()
    }
}

impl Cksum {
    /// An empty sum.
    pub fn new() -> Self {
        let mut table = [0u32; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            let mut c = (i as u32) << 24;
            for _ in 0..8 {
                c = if c & 0x8000_0000 != 0 {
                    (c << 1) ^ 0x04C1_1DB7
                } else {
                    c << 1
                };
            }
            *entry = c;
        }
        Self {
            table,
            crc: 0,
            len: 0,
        }
    }

    fn byte(&mut self, b: u8) {
        self.crc = (self.crc << 8) ^ self.table[((self.crc >> 24) as u8 ^ b) as usize];
    }

    /// Adds bytes.
    pub fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.byte(b);
        }
        self.len += data.len() as u64;
    }

    /// The checksum and the byte count, as `cksum` prints them.
    pub fn finish(mut self) -> (u32, u64) {
        let len = self.len;
        let mut n = len;
        while n != 0 {
            self.byte(n as u8);
            n >>= 8;
        }
        (!self.crc, len)
    }
}

/// A dmabuf size: a multiple of 4096 bytes, at least 1 MiB.
pub fn parse_memory_size(text: &str) -> Result<u64, String> {
    let n: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of bytes"))?;
    if n >= 1 << 20 && n % 4096 == 0 {
        Ok(n)
    } else {
        Err(format!(
            "{n} bytes: give a multiple of 4096, at least 1 MiB (1048576)"
        ))
    }
}

/// Exports `size` bytes (a multiple of 4096) from `source` (`udmabuf`, `dma-heap` for the
/// system heap, `memfd` named `memfd_name`, anything else GPU memory through CUDA) and imports
/// the dmabuf. For GPU memory the CUDA allocation comes back too: it must outlive the import.
pub fn export_and_import(
    source: &str,
    size: u64,
    memfd_name: &str,
) -> Result<(Arc<DmaBuf>, Option<CudaMemory>), String> {
    let mut gpu = None;
    let buf = match source {
        "udmabuf" => {
            let u = export::udmabuf(size).map_err(|e| e.to_string())?;
            DmaBuf::import_with_backing(u.dmabuf, u.memfd, 0)
        }
        "dma-heap" => DmaBuf::import(export::dma_heap("system", size).map_err(|e| e.to_string())?),
        "memfd" => DmaBuf::from_memfd(export::memfd(memfd_name, size).map_err(|e| e.to_string())?),
        _ => {
            let memory = CudaMemory::alloc(0, size as usize).map_err(|e| e.to_string())?;
            println!(
                "cuda: allocated {} bytes at GPU address {:#x}",
                memory.size(),
                memory.device_ptr()
            );
            let fd = memory.export_dmabuf().map_err(|e| e.to_string())?;
            gpu = Some(memory);
            DmaBuf::import(fd)
        }
    }
    .map_err(|e| e.to_string())?;
    Ok((buf, gpu))
}

/// The imported memory and what the CPU reads it through.
pub struct Imported {
    /// The dmabuf's mapping for the device.
    pub mapping: Arc<DmaBufMapping>,
    /// Set for GPU memory: the CPU reads it with cuMemcpyDtoH.
    pub gpu: Option<CudaMemory>,
    /// Set for a peer device's BAR: the device stays open while its memory is mapped.
    pub peer: Option<PeerBar>,
}

impl Imported {
    /// Copies `out.len()` bytes from `offset` bytes into the mapping into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), String> {
        match &self.gpu {
            Some(gpu) => gpu
                .copy_to_host(self.mapping.offset() as usize + offset, out)
                .map_err(|e| e.to_string()),
            None => self.mapping.read(offset, out).map_err(|e| e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cksum_matches_posix_cksum() {
        // `printf '' | cksum` and `printf 123456789 | cksum`.
        assert_eq!(Cksum::new().finish(), (4_294_967_295, 0));
        let mut sum = Cksum::new();
        sum.update(b"1234");
        sum.update(b"56789");
        assert_eq!(sum.finish(), (930_766_865, 9));
    }

    #[test]
    fn sources_parse_with_their_errors() {
        assert_eq!(
            parse_source("dma-heap"),
            Ok(SourceSpec::Exporter(Source::DmaHeap))
        );
        assert_eq!(
            parse_source("vfio-bar:0000:00:05.0,bar=2"),
            Ok(SourceSpec::VfioBar {
                bdf: "0000:00:05.0".into(),
                bar: 2
            })
        );
        assert_eq!(
            parse_source("vfio-bar:00:05.0,bar=2").unwrap().name(),
            "vfio-bar"
        );
        let no_bar = parse_source("vfio-bar:00:05.0").unwrap_err();
        assert!(
            no_bar.contains("bar=N") && no_bar.contains("BAR 2"),
            "{no_bar}"
        );
        assert!(parse_source("vfio-bar:00:05.0,bar=6")
            .unwrap_err()
            .contains("0 to 5"));
        assert!(parse_source("vfio-bar:,bar=2")
            .unwrap_err()
            .contains("PCI address"));
        assert!(parse_source("gpu")
            .unwrap_err()
            .contains("vfio-bar:BDF,bar=N"));
    }
}
