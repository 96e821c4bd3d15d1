//! Guest memory the client shares for DMA: its file descriptors mapped here and entered into the
//! model's IOMMU.
//!
//! This is the server's DMA room, the only module with `unsafe`: `mmap`/`munmap` of the client's
//! files and [`Iommu::map`](crate::dma::Iommu::map), whose contract is that the memory stay
//! valid while mapped. The invariant that keeps it sound: **a mapping leaves the model's IOMMU
//! before its memory is unmapped here.** `Iommu::unmap` takes the IOMMU's write lock, so once it
//! returns no device access through that mapping is in flight (accesses hold the read lock for
//! the whole copy), and `munmap` cannot pull memory out from under the device thread.
//!
//! `VFIO_USER_DMA_MAP` brings a file descriptor, an offset in it, a size, an IOVA and READ/WRITE
//! flags. With a vIOMMU in the guest, QEMU maps guest pages one at a time as the guest's IOMMU
//! maps them, at IOVAs unrelated to their file offsets, so mappings are kept one per request.
//! `VFIO_USER_DMA_UNMAP` removes every mapping inside its range, as VFIO type1 does; a range that
//! cuts a mapping in two is refused.
//!
//! A map without a file descriptor is memory the client keeps to itself and would serve through
//! `VFIO_USER_DMA_READ`/`WRITE` messages, which this server cannot send. QEMU makes such maps for
//! guest memory that is not shareable, and, without a vIOMMU, for its ROMs at start-up; refusing
//! them would fail the device's realize, so they are accepted and recorded, but the device cannot
//! reach them (its accesses there are DMA faults). The backend warns, naming the fix for guest
//! RAM (`share=on`).
//!
//! Before mapping, the file must be a regular file (memfd, hugetlbfs or plain file) at least
//! `offset + size` bytes long, so that no page of the mapping lies beyond its end (touching one
//! would kill the process with SIGBUS). A client that shrinks the file afterwards can still do
//! that; QEMU's memfd backend seals its files against shrinking by default.

use crate::dma::{Access, MapError};
use crate::Device;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use thiserror::Error;

/// A DMA map or unmap request the server refuses.
#[derive(Debug, Error)]
pub enum DmaError {
    /// The range overlaps an existing mapping.
    #[error("DMA map of {size:#x} bytes at IOVA {iova:#x} overlaps the mapping at {mapping:#x}")]
    Overlap {
        /// IOVA of the request.
        iova: u64,
        /// Size of the request.
        size: u64,
        /// Start of the mapping it overlaps.
        mapping: u64,
    },
    /// Neither READ nor WRITE was asked for.
    #[error("DMA map at IOVA {iova:#x} asks for neither read nor write access")]
    NoAccess {
        /// IOVA of the request.
        iova: u64,
    },
    /// Zero size, a range that wraps, or numbers that do not fit this machine.
    #[error("DMA range of {size:#x} bytes at IOVA {iova:#x} (file offset {offset:#x}) is empty or does not fit")]
    BadRange {
        /// IOVA of the request.
        iova: u64,
        /// Size of the request.
        size: u64,
        /// File offset of the request.
        offset: u64,
    },
    /// The file is not a regular file, or is too short for the range.
    #[error(
        "DMA map at IOVA {iova:#x}: the file ({what}) does not hold {size:#x} bytes at offset \
         {offset:#x}"
    )]
    FileTooShort {
        /// IOVA of the request.
        iova: u64,
        /// Size of the request.
        size: u64,
        /// File offset of the request.
        offset: u64,
        /// What the file is and how long.
        what: String,
    },
    /// `fstat` or `mmap` failed.
    #[error("DMA map of {size:#x} bytes at file offset {offset:#x}: {source}")]
    Mmap {
        /// Size of the request.
        size: u64,
        /// File offset of the request.
        offset: u64,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The model's IOMMU refused the mapping (it overlaps another one).
    #[error("the model's IOMMU refused the mapping: {0}")]
    Iommu(#[from] MapError),
    /// An unmap range that cuts a mapping in two.
    #[error(
        "DMA unmap of {size:#x} bytes at IOVA {iova:#x} cuts the mapping at {mapping:#x} \
         ({mapping_len:#x} bytes) in two"
    )]
    Bisects {
        /// IOVA of the request.
        iova: u64,
        /// Size of the request.
        size: u64,
        /// Start of the mapping cut.
        mapping: u64,
        /// Its length.
        mapping_len: u64,
    },
    /// Dirty-page tracking was asked for.
    #[error("DMA unmap with dirty-page tracking is not supported")]
    DirtyTracking,
}

/// One mapped range of a client's file.
#[derive(Debug)]
struct Mapping {
    /// Address of the `mmap`, kept as an integer (the pointer is only rebuilt to unmap it).
    addr: usize,
    len: usize,
}

/// One `DMA_MAP` the client made.
#[derive(Debug)]
struct Entry {
    /// Length in bytes.
    len: u64,
    /// The memory, when the map came with a file descriptor (and so is in the IOMMU).
    memory: Option<Mapping>,
}

/// What [`GuestMemory::map`] made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped {
    /// Mapped here and entered into the model's IOMMU: the device can reach it.
    Reachable,
    /// No file descriptor: recorded, but the device cannot reach it.
    WithoutFd,
}

/// The client's DMA mappings for one function, mirrored into that function's IOMMU.
#[derive(Debug)]
pub struct GuestMemory {
    device: Device,
    maps: BTreeMap<u64, Entry>,
}

impl GuestMemory {
    /// No mappings yet; mappings go into `device`'s IOMMU.
    pub fn new(device: Device) -> Self {
        Self {
            device,
            maps: BTreeMap::new(),
        }
    }

    /// Number of live mappings.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether there are no mappings.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Bytes mapped in all (reachable by the device or not).
    pub fn bytes(&self) -> u64 {
        self.maps.values().map(|m| m.len).sum()
    }

    /// Number of live mappings the device cannot reach (made without a file descriptor).
    pub fn unreachable(&self) -> usize {
        self.maps.values().filter(|m| m.memory.is_none()).count()
    }

    /// Maps `size` bytes of `file` at `offset` and makes them reachable by the device at `iova`.
    /// `read`/`write` are the access the client grants the device. Without a file the range is
    /// only recorded (see the module documentation).
    pub fn map(
        &mut self,
        file: Option<File>,
        offset: u64,
        iova: u64,
        size: u64,
        read: bool,
        write: bool,
    ) -> Result<Mapped, DmaError> {
        if !read && !write {
            return Err(DmaError::NoAccess { iova });
        }
        let bad_range = DmaError::BadRange { iova, size, offset };
        let len = match usize::try_from(size) {
            Ok(len) if len > 0 => len,
            _ => return Err(bad_range),
        };
        let file_end = offset.checked_add(size);
        let Some(iova_end) = iova.checked_add(size) else {
            return Err(bad_range);
        };
        if file_end.is_none() {
            return Err(bad_range);
        }
        if let Some(mapping) = self.overlapping(iova, iova_end) {
            return Err(DmaError::Overlap {
                iova,
                size,
                mapping,
            });
        }
        let Some(file) = file else {
            self.maps.insert(
                iova,
                Entry {
                    len: size,
                    memory: None,
                },
            );
            return Ok(Mapped::WithoutFd);
        };
        let Ok(file_offset) = libc::off_t::try_from(offset) else {
            return Err(bad_range);
        };
        let meta = file.metadata().map_err(|source| DmaError::Mmap {
            size,
            offset,
            source,
        })?;
        if !meta.is_file() || file_end.is_some_and(|end| meta.len() < end) {
            let what = if meta.is_file() {
                format!("a file of {:#x} bytes", meta.len())
            } else {
                "not a regular file".to_string()
            };
            return Err(DmaError::FileTooShort {
                iova,
                size,
                offset,
                what,
            });
        }
        // The device may only read a read-only mapping; a write-only one is still mapped
        // readable, since the model's IOMMU has no write-only mappings.
        let (prot, access) = if write {
            (libc::PROT_READ | libc::PROT_WRITE, Access::ReadWrite)
        } else {
            (libc::PROT_READ, Access::ReadOnly)
        };
        // SAFETY: a fresh shared mapping chosen by the kernel (null hint), of a file descriptor we
        // own for the duration of the call; no existing memory is affected. The result is checked
        // against MAP_FAILED before use.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                file_offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(DmaError::Mmap {
                size,
                offset,
                source: std::io::Error::last_os_error(),
            });
        }
        // The mapping holds its own reference to the file; our descriptor can go.
        drop(file);
        let mapping = Mapping {
            addr: addr as usize,
            len,
        };
        // SAFETY: `addr..addr + len` is the mapping made above: readable (and writable when
        // `access` is ReadWrite), and backed by the file for every byte (its length was checked).
        // It stays mapped until `remove` (or `Drop`) has taken it out of the IOMMU first, which
        // is `Iommu::map`'s requirement. The model only copies in and out of it.
        let mapped = unsafe {
            self.device
                .iommu()
                .map(iova, addr.cast::<u8>(), size, access)
        };
        if let Err(e) = mapped {
            unmap_memory(&mapping);
            return Err(e.into());
        }
        self.maps.insert(
            iova,
            Entry {
                len: size,
                memory: Some(mapping),
            },
        );
        Ok(Mapped::Reachable)
    }

    /// The start of a mapping that shares a byte with `iova..end`, if any.
    fn overlapping(&self, iova: u64, end: u64) -> Option<u64> {
        if let Some((&start, m)) = self.maps.range(..=iova).next_back() {
            if start.saturating_add(m.len) > iova {
                return Some(start);
            }
        }
        self.maps.range(iova..end).next().map(|(&start, _)| start)
    }

    /// Removes every mapping inside `iova..iova + size`; returns how many went. A range that
    /// cuts a mapping in two is refused, changing nothing. `all` removes everything regardless of
    /// the range (`VFIO_DMA_UNMAP_FLAG_ALL`).
    pub fn unmap(&mut self, iova: u64, size: u64, all: bool) -> Result<usize, DmaError> {
        if all {
            let n = self.maps.len();
            self.clear();
            return Ok(n);
        }
        let end = iova.saturating_add(size);
        // A mapping that starts before the range and reaches into it.
        if let Some((&start, m)) = self.maps.range(..iova).next_back() {
            if start.saturating_add(m.len) > iova {
                return Err(DmaError::Bisects {
                    iova,
                    size,
                    mapping: start,
                    mapping_len: m.len,
                });
            }
        }
        let inside: Vec<u64> = self
            .maps
            .range(iova..end)
            .map(|(&start, _)| start)
            .collect();
        for &start in &inside {
            if let Some(m) = self.maps.get(&start) {
                if start.saturating_add(m.len) > end {
                    return Err(DmaError::Bisects {
                        iova,
                        size,
                        mapping: start,
                        mapping_len: m.len,
                    });
                }
            }
        }
        for start in &inside {
            self.remove(*start);
        }
        Ok(inside.len())
    }

    /// Removes every mapping.
    pub fn clear(&mut self) {
        let starts: Vec<u64> = self.maps.keys().copied().collect();
        for start in starts {
            self.remove(start);
        }
    }

    /// Takes the mapping at `start` out of the IOMMU, then unmaps its memory.
    fn remove(&mut self, start: u64) {
        let Some(Entry {
            len,
            memory: Some(mapping),
        }) = self.maps.remove(&start)
        else {
            return;
        };
        // Always succeeds: the IOMMU got exactly this (start, len) from `map`. Should it ever
        // fail, the memory is kept (leaked) rather than unmapped under a live IOMMU entry.
        if self.device.iommu().unmap(start, len).is_ok() {
            unmap_memory(&mapping);
        }
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `munmap`s a mapping that is no longer in the IOMMU.
fn unmap_memory(mapping: &Mapping) {
    // SAFETY: `addr..addr + len` is a mapping this module made with `mmap` and no longer lists in
    // the model's IOMMU (removed first, under its write lock), so nothing reads or writes it any
    // more; it is unmapped once, as the `Mapping` was just taken out of the table.
    unsafe {
        libc::munmap(mapping.addr as *mut libc::c_void, mapping.len);
    }
}
