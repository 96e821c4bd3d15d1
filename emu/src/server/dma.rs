//! Guest memory the client shares for DMA: its files mapped here and entered into the model's
//! IOMMU.
//!
//! This is the server's DMA room, the only module with `unsafe`: `mmap`/`munmap` of the client's
//! files and [`Iommu::map`](crate::dma::Iommu::map), whose contract is that the memory stay
//! valid while mapped. The invariant that keeps it sound: **a mapping leaves the model's IOMMU
//! before its memory is unmapped here.** `Iommu::unmap_many` (the windows of one unmap, in one
//! pass) takes the IOMMU's write lock, so once it returns no device access through that mapping is in flight (accesses hold the read lock for
//! the whole copy), and `munmap` cannot pull memory out from under the device thread.
//!
//! `VFIO_USER_DMA_MAP` brings a file descriptor, an offset in it, a size, an IOVA and READ/WRITE
//! flags. QEMU's client (`vfio_user_dma_map`) sends one per `vfio_container_dma_map` call, with
//! the offset of the guest page in its RAM block's file. With a vIOMMU in the guest
//! (`intel-iommu,caching-mode=on`), those calls come from `vfio_iommu_map_notify`, once per leaf
//! entry `vtd_page_walk_level` finds in the guest's IOMMU page tables: one 4 KiB page per map
//! (2 MiB where the guest used a large page), at IOVAs unrelated to the file offsets, since the
//! guest's pages behind one IOVA range are scattered in its RAM. A 1 GiB queue is 262,144 maps,
//! which one `mmap` each would take past the host's `vm.max_map_count` (65,530 by default).
//! Merging neighbours would not help: neighbouring IOVAs are rarely neighbouring file pages.
//!
//! So the host mappings follow the files, not the maps:
//!
//! | thing | how many | lifetime |
//! |---|---|---|
//! | host mapping | one per distinct file (device and inode), covering the whole file as long as it was when first mapped, read-write when the descriptor allows it | from the first map into the file until its last window is unmapped |
//! | window (one `DMA_MAP`) | one per map | from its `DMA_MAP` to the `DMA_UNMAP` that covers it |
//! | IOMMU entry | one per window: IOVA → host mapping + file offset, with the map's access | as the window |
//!
//! Each host mapping counts its windows; unmapping one window takes only its IOMMU entry out, and
//! the host mapping goes (`munmap`) when its count reaches zero. A file is recognised by its
//! device and inode: the mapping holds a reference to the file, so its inode number cannot be
//! reused while the mapping lives. A write map needs a descriptor opened for writing. A map that reaches past the end of every mapping of its file
//! (the file grew) or asks for write access that an existing read-only mapping lacks gets a new
//! host mapping of the whole file; the old one lives on for its windows. A window's access is the
//! one its `DMA_MAP` asked for, enforced by the model's IOMMU (a read-only window of a read-write
//! host mapping stays read-only to the device).
//!
//! `VFIO_USER_DMA_UNMAP` removes every window inside its range, as VFIO type1
//! (`vfio_dma_do_unmap`) does; a range that cuts a window in two, or that is empty or wraps, is
//! refused. A range holding no window succeeds and removes nothing, as with type1: QEMU's
//! vIOMMU unmaps whole address spaces in aligned pieces (`vtd_address_space_unmap`) whether or not
//! anything was mapped there.
//!
//! A map without a file descriptor is memory the client keeps to itself and would serve through
//! `VFIO_USER_DMA_READ`/`WRITE` messages, which this server cannot send. QEMU makes such maps for
//! guest memory that is not shareable, and, without a vIOMMU, for its ROMs at start-up; refusing
//! them would fail the device's realize, so they are accepted and recorded, but the device cannot
//! reach them (its accesses there are DMA faults). The backend warns, naming the fix for guest
//! RAM (`share=on`).
//!
//! Before mapping, the file must be a regular file (memfd, hugetlbfs or plain file) at least
//! `offset + size` bytes long, and the host mapping covers only what the file held then, so that
//! no page of a window lies beyond its end (touching one would kill the process with SIGBUS). A
//! client that shrinks the file afterwards can still do that; QEMU's memfd backend seals its
//! files against shrinking by default.

use crate::dma::{Access, MapError};
use crate::Device;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
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
    /// `fstat` or `mmap` failed, or a write map came with a descriptor opened read-only
    /// (EACCES).
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
    /// An unmap range that is empty or wraps past the top of the IOVA space.
    #[error("DMA unmap of {size:#x} bytes at IOVA {iova:#x} is empty or wraps")]
    BadUnmapRange {
        /// IOVA of the request.
        iova: u64,
        /// Size of the request.
        size: u64,
    },
    /// Dirty-page tracking was asked for.
    #[error("DMA unmap with dirty-page tracking is not supported")]
    DirtyTracking,
}

/// A file as the kernel knows it: device and inode numbers.
type FileKey = (u64, u64);

/// Names one host mapping: its file, then a serial number (a file can have several).
type HostId = (FileKey, u64);

/// One `mmap` of a whole client file, shared by the windows into it.
#[derive(Debug)]
struct HostMapping {
    /// Address of the `mmap`, kept as an integer (the pointer is only rebuilt to use it).
    addr: usize,
    /// Length of the `mmap`: the file's length when it was made.
    len: usize,
    /// Mapped with `PROT_WRITE` (the descriptor was opened read-write).
    writable: bool,
    /// Windows (entries in the IOMMU) that point into it.
    windows: usize,
}

/// One `DMA_MAP` the client made.
#[derive(Debug)]
struct Entry {
    /// Length in bytes.
    len: u64,
    /// The host mapping it is a window of, when the map came with a file descriptor (and so is
    /// in the IOMMU).
    host: Option<HostId>,
}

/// What [`GuestMemory::map`] made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped {
    /// Entered into the model's IOMMU as a window of a host mapping of its file: the device can
    /// reach it.
    Reachable,
    /// No file descriptor: recorded, but the device cannot reach it.
    WithoutFd,
}

/// The client's DMA mappings for one function, mirrored into that function's IOMMU.
#[derive(Debug)]
pub struct GuestMemory {
    device: Device,
    maps: BTreeMap<u64, Entry>,
    hosts: BTreeMap<HostId, HostMapping>,
    next_serial: u64,
}

impl GuestMemory {
    /// No mappings yet; mappings go into `device`'s IOMMU.
    pub fn new(device: Device) -> Self {
        Self {
            device,
            maps: BTreeMap::new(),
            hosts: BTreeMap::new(),
            next_serial: 0,
        }
    }

    /// Number of live mappings (one per `DMA_MAP` not yet unmapped).
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
        self.maps.values().filter(|m| m.host.is_none()).count()
    }

    /// Number of `mmap`s of client files held: normally one per distinct file, however many
    /// mappings point into it.
    pub fn host_mappings(&self) -> usize {
        self.hosts.len()
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
        if size == 0 {
            return Err(bad_range);
        }
        let (Some(iova_end), Some(file_end)) = (iova.checked_add(size), offset.checked_add(size))
        else {
            return Err(bad_range);
        };
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
                    host: None,
                },
            );
            return Ok(Mapped::WithoutFd);
        };
        let meta = file.metadata().map_err(|source| DmaError::Mmap {
            size,
            offset,
            source,
        })?;
        if !meta.is_file() || meta.len() < file_end {
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
        // A write map needs a descriptor opened for writing, even where the file is already
        // mapped writable through another one.
        if write && !opened_for_writing(&file) {
            return Err(DmaError::Mmap {
                size,
                offset,
                source: std::io::Error::from_raw_os_error(libc::EACCES),
            });
        }
        let key = (meta.dev(), meta.ino());
        let id = match self.host_for(key, file_end, write) {
            Some(id) => id,
            None => self.map_file(&file, key, meta.len(), offset, size, write)?,
        };
        // The host mapping holds its own reference to the file; our descriptor can go.
        drop(file);
        let host = &self.hosts[&id];
        // `offset + size <= host.len` (checked by `host_for`, or the mapping was just made
        // `meta.len() >= file_end` bytes long), so the offset fits a usize.
        let window = (host.addr + offset as usize) as *mut u8;
        // The device may only read a read-only mapping; a write-only one is still mapped
        // readable, since the model's IOMMU has no write-only mappings.
        let access = if write {
            Access::ReadWrite
        } else {
            Access::ReadOnly
        };
        // SAFETY: `window..window + size` lies inside the host mapping `id` (see above), which is
        // readable, writable when `access` is ReadWrite (`host_for`/`map_file` only give a
        // writable one to a write map), and backed by the file for every byte (the file held
        // them when the mapping was made). The mapping stays until its window count reaches
        // zero, which `remove` (and `Drop`, through it) only lets happen after taking this
        // window out of the IOMMU: `Iommu::map`'s requirement. The model only copies in and out.
        let mapped = unsafe { self.device.iommu().map(iova, window, size, access) };
        if let Err(e) = mapped {
            self.release_if_unused(id);
            return Err(e.into());
        }
        if let Some(host) = self.hosts.get_mut(&id) {
            host.windows += 1;
        }
        self.maps.insert(
            iova,
            Entry {
                len: size,
                host: Some(id),
            },
        );
        Ok(Mapped::Reachable)
    }

    /// A host mapping of file `key` that holds `..file_end` and, for a write map, is writable.
    fn host_for(&self, key: FileKey, file_end: u64, write: bool) -> Option<HostId> {
        self.hosts
            .range((key, 0)..=(key, u64::MAX))
            .find(|(_, h)| h.len as u64 >= file_end && (h.writable || !write))
            .map(|(&id, _)| id)
    }

    /// `mmap`s the whole of `file` (`file_len` bytes), read-write where its descriptor allows,
    /// read-only otherwise (refused for a write map), and records it with no windows yet.
    fn map_file(
        &mut self,
        file: &File,
        key: FileKey,
        file_len: u64,
        offset: u64,
        size: u64,
        write: bool,
    ) -> Result<HostId, DmaError> {
        let mmap_error = |source| DmaError::Mmap {
            size,
            offset,
            source,
        };
        let Ok(len) = usize::try_from(file_len) else {
            return Err(mmap_error(std::io::Error::from_raw_os_error(libc::EFBIG)));
        };
        let mut writable = true;
        let mut addr = mmap_whole(file, len, libc::PROT_READ | libc::PROT_WRITE);
        if let Err(e) = &addr {
            // A descriptor opened read-only: enough for a read-only map.
            if e.raw_os_error() == Some(libc::EACCES) && !write {
                writable = false;
                addr = mmap_whole(file, len, libc::PROT_READ);
            }
        }
        let addr = addr.map_err(mmap_error)?;
        let id = (key, self.next_serial);
        self.next_serial += 1;
        self.hosts.insert(
            id,
            HostMapping {
                addr,
                len,
                writable,
                windows: 0,
            },
        );
        Ok(id)
    }

    /// `munmap`s host mapping `id` if no window points into it any more.
    fn release_if_unused(&mut self, id: HostId) {
        if self.hosts.get(&id).is_some_and(|h| h.windows == 0) {
            if let Some(host) = self.hosts.remove(&id) {
                unmap_host(&host);
            }
        }
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

    /// Removes every mapping inside `iova..iova + size`; returns how many went (none is not an
    /// error: see the module documentation). A range that cuts a mapping in two, or is empty or
    /// wraps, is refused, changing nothing. `all` removes everything regardless of the range
    /// (`VFIO_DMA_UNMAP_FLAG_ALL`).
    pub fn unmap(&mut self, iova: u64, size: u64, all: bool) -> Result<usize, DmaError> {
        if all {
            let n = self.maps.len();
            self.clear();
            return Ok(n);
        }
        // The range may end at the very top of the IOVA space, but not past it. No mapping
        // reaches `u64::MAX` itself (`map` refuses ranges whose end does not fit), so a range
        // ending there may be cut at `u64::MAX`.
        if size == 0 || iova.checked_add(size - 1).is_none() {
            return Err(DmaError::BadUnmapRange { iova, size });
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
        self.remove(&inside);
        Ok(inside.len())
    }

    /// Removes every mapping.
    pub fn clear(&mut self) {
        let starts: Vec<u64> = self.maps.keys().copied().collect();
        self.remove(&starts);
    }

    /// Takes the mappings starting at `starts` out of the IOMMU (in one pass, as a guest's
    /// queue can be a quarter of a million of them), then releases each host mapping whose
    /// last window went.
    fn remove(&mut self, starts: &[u64]) {
        let windows: Vec<(u64, u64)> = starts
            .iter()
            .filter_map(|start| match self.maps.get(start) {
                Some(Entry { len, host: Some(_) }) => Some((*start, *len)),
                _ => None,
            })
            .collect();
        // Always succeeds: the IOMMU got exactly these (start, len) from `map`. Should it ever
        // fail, they are taken out one by one, and a window the IOMMU still refuses to give up
        // keeps its count, so that its host mapping is kept (leaked) rather than unmapped under
        // a live IOMMU entry.
        let iommu = self.device.iommu();
        let all_out = iommu.unmap_many(&windows).is_ok();
        let mut touched = Vec::new();
        for start in starts {
            let Some(Entry {
                len,
                host: Some(id),
            }) = self.maps.remove(start)
            else {
                continue;
            };
            if !all_out && iommu.unmap(*start, len).is_err() {
                continue;
            }
            if let Some(host) = self.hosts.get_mut(&id) {
                host.windows -= 1;
            }
            touched.push(id);
        }
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            self.release_if_unused(id);
        }
    }
}

impl Drop for GuestMemory {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Whether `file`'s descriptor was opened read-write (or write-only).
fn opened_for_writing(file: &File) -> bool {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(file, FcntlArg::F_GETFL)
        .is_ok_and(|flags| OFlag::from_bits_truncate(flags) & OFlag::O_ACCMODE != OFlag::O_RDONLY)
}

/// A fresh shared mapping of the first `len` bytes of `file`, with protection `prot`; its
/// address.
fn mmap_whole(file: &File, len: usize, prot: libc::c_int) -> std::io::Result<usize> {
    // SAFETY: a fresh shared mapping chosen by the kernel (null hint), of a file descriptor the
    // caller owns for the duration of the call; no existing memory is affected. The result is
    // checked against MAP_FAILED before use.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(addr as usize)
}

/// `munmap`s a host mapping that no IOMMU entry points into any more.
fn unmap_host(host: &HostMapping) {
    // SAFETY: `addr..addr + len` is a mapping this module made with `mmap`, and its window count
    // is zero: every IOMMU entry into it was removed first (under the IOMMU's write lock), so
    // nothing reads or writes it any more. It is unmapped once, as the `HostMapping` was just
    // taken out of the table.
    unsafe {
        libc::munmap(host.addr as *mut libc::c_void, host.len);
    }
}
