//! Dmabuf memory for the programs that receive into it (dmabuf-rx, devmem-rx): exported by the
//! source a program names, imported, and read back by the CPU to check what landed there.

use clap::ValueEnum;
use cxdirect_dma::cuda::CudaMemory;
use cxdirect_dma::{export, DmaBuf, DmaBufMapping};
use std::sync::Arc;

/// Who exports the dmabuf: a program's `--source`.
#[derive(ValueEnum, Clone, Copy, Debug)]
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
