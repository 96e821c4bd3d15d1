//! Memory keys: CREATE_MKEY in MTT mode over a page list (driver-allocated memory, or a range of
//! an imported dmabuf), deregistration, and revocation of the keys over a revocable dmabuf.
//!
//! The MTT is what the device translates through: one big-endian entry per page, the bare page
//! address, as Linux's mlx5_ib writes it (`reg_create` / `mlx5_ib_populate_pas`) on a device
//! without the `pg` (on-demand paging) capability: the entries' rd_en/wr_en bits are access
//! control only in page-access mode (`pg_access`), which this driver never asks for. The key's
//! start address is the IOVA of the range's first byte and its length the trimmed length, and
//! its `lr`/`lw`/`rr`/`rw`/`a` bits say what it allows, so a device access outside the range,
//! or a write through a read-only key, ends in a protection error rather than touching memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cxdirect_dma::{DmaBufMapping, PageList};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{
    mkey_from_index, mtt_entry, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_MTT,
};

use super::cmd::input;
use super::device::{Device, RegisteredKey};
use crate::backend::Backend;
use crate::error::DriverError;

/// What a memory key lets the device do with the memory: local reads and writes (through the
/// key as an lkey) and, for RDMA, remote reads, writes and atomics (through it as an rkey).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyAccess {
    /// The device may read (send from) the memory.
    pub read: bool,
    /// The device may write (receive into) the memory.
    pub write: bool,
    /// A peer may RDMA READ the memory (`rr`).
    pub remote_read: bool,
    /// A peer may RDMA WRITE the memory (`rw`); needs `write`, as verbs require.
    pub remote_write: bool,
    /// A peer may run atomics on the memory (`a`); needs `write`.
    pub remote_atomic: bool,
}

impl KeyAccess {
    /// Read and write: receive and send buffers.
    pub const READ_WRITE: Self = Self {
        read: true,
        write: true,
        remote_read: false,
        remote_write: false,
        remote_atomic: false,
    };
    /// Read only: send buffers; a receive into them fails with a local protection error.
    pub const READ_ONLY: Self = Self {
        read: true,
        write: false,
        remote_read: false,
        remote_write: false,
        remote_atomic: false,
    };

    /// True when a remote right is asked for without local write, which verbs refuse
    /// (`ibv_reg_mr` fails with EINVAL): a peer's WRITE or atomic writes the memory.
    pub fn remote_needs_write(&self) -> bool {
        (self.remote_write || self.remote_atomic) && !self.write
    }
}

/// A memory key registered with a device: `lkey()` goes into WQE data segments.
///
/// Deregister it with [`MemoryKey::deregister`]. A key that is simply dropped stays in the device
/// (and keeps its dmabuf range mapped) until [`Device::teardown`].
#[derive(Debug)]
pub struct MemoryKey {
    index: u32,
    lkey: u32,
    start: u64,
    len: u64,
    entries: usize,
    access: KeyAccess,
    valid: Arc<AtomicBool>,
}

impl MemoryKey {
    /// Registers `[0, len)` of an imported dmabuf range: the MTT holds the mapping's trimmed page
    /// list ([`DmaBufMapping::pages`]), the key's start address is [`DmaBufMapping::iova`].
    /// The key keeps the mapping alive; a revocable mapping can be taken away with
    /// [`Device::revoke_memory`].
    ///
    /// # Errors
    ///
    /// [`DriverError::DmaBuf`] for a revoked mapping, [`DriverError::Config`] for one larger
    /// than the device's keys, [`DriverError::Command`] when the device refuses.
    pub fn register<B: Backend>(
        dev: &mut Device<B>,
        mapping: &Arc<DmaBufMapping>,
        access: KeyAccess,
    ) -> Result<Self, DriverError> {
        Self::register_in(dev, mapping, access, None)
    }

    /// Registers memory described by a page list (a [`cxdirect_dma::DmaRegion`]'s pages, for
    /// instance).
    ///
    /// # Errors
    ///
    /// As [`MemoryKey::register`].
    pub fn register_pages<B: Backend>(
        dev: &mut Device<B>,
        pages: &PageList,
        access: KeyAccess,
    ) -> Result<Self, DriverError> {
        Self::register_pages_in(dev, pages, access, None)
    }

    /// As [`MemoryKey::register`], in protection domain `pd` (`None`: the device's own, from
    /// bring-up). RDMA keys live in the PD of the queue pairs that use them.
    ///
    /// # Errors
    ///
    /// As [`MemoryKey::register`].
    pub fn register_in<B: Backend>(
        dev: &mut Device<B>,
        mapping: &Arc<DmaBufMapping>,
        access: KeyAccess,
        pd: Option<u32>,
    ) -> Result<Self, DriverError> {
        if mapping.is_revoked() {
            return Err(cxdirect_dma::DmaBufError::Revoked {
                exporter: mapping.dmabuf().exporter().to_string(),
            }
            .into());
        }
        let key = Self::create(dev, &mapping.pages(), access, pd)?;
        mapping.key_registered();
        dev.keys_mut().push(RegisteredKey {
            index: key.index,
            mapping: Some(Arc::clone(mapping)),
            valid: Arc::clone(&key.valid),
        });
        Ok(key)
    }

    /// As [`MemoryKey::register_pages`], in protection domain `pd` (`None`: the device's own).
    ///
    /// # Errors
    ///
    /// As [`MemoryKey::register`].
    pub fn register_pages_in<B: Backend>(
        dev: &mut Device<B>,
        pages: &PageList,
        access: KeyAccess,
        pd: Option<u32>,
    ) -> Result<Self, DriverError> {
        let key = Self::create(dev, pages, access, pd)?;
        dev.keys_mut().push(RegisteredKey {
            index: key.index,
            mapping: None,
            valid: Arc::clone(&key.valid),
        });
        Ok(key)
    }

    fn create<B: Backend>(
        dev: &mut Device<B>,
        pages: &PageList,
        access: KeyAccess,
        pd: Option<u32>,
    ) -> Result<Self, DriverError> {
        if access.remote_needs_write() {
            return Err(DriverError::config(
                "access",
                0u64,
                "remote write and remote atomic need local write (as ibv_reg_mr requires)",
            ));
        }
        let page = pages.page_size;
        let len = pages.len() as u64;
        let Some(start) = pages.start_iova().filter(|_| len > 0) else {
            return Err(DriverError::config(
                "pages",
                len,
                "the page list covers no bytes; give at least one page",
            ));
        };
        if !page.is_power_of_two() || !(4096..=1 << 30).contains(&page) {
            return Err(DriverError::config(
                "page_size",
                page as u64,
                "memory keys take powers of two from 4 KiB to 1 GiB",
            ));
        }
        if let Some(iova) = pages.iovas.iter().find(|&iova| iova % page as u64 != 0) {
            return Err(DriverError::config(
                "iovas",
                *iova,
                format!("an address of the page list is not aligned to its {page}-byte pages"),
            ));
        }
        let max_log = dev.caps().log_max_mrw_sz();
        if len >> max_log.min(63) != 0 {
            return Err(DriverError::config(
                "pages",
                len,
                format!(
                    "the page list covers that many bytes, more than the device's memory keys \
                     (2^{max_log} bytes): register the memory in parts"
                ),
            ));
        }
        let entries = pages.iovas.len();
        let octwords = u32::try_from(entries.div_ceil(2)).map_err(|_| {
            DriverError::config(
                "iovas",
                entries as u64,
                "translation entries are too many: register the memory in parts",
            )
        })?;
        let pd = pd.unwrap_or(dev.resources().1);
        let mut cmd = input(
            Opcode::CreateMkey,
            0,
            CreateMkeyIn::<&[u8]>::SIZE + 8 * entries.next_multiple_of(2),
        );
        {
            let mut c = CreateMkeyIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateMkey, "input"))?;
            // No page-access mode: the entries are bare addresses (see the module doc).
            c.set_pg_access(false)
                .set_translations_octword_actual_size(octwords);
            c.memory_key_mkey_entry_mut()
                .set_access_mode(MKC_ACCESS_MODE_MTT)
                .set_lr(access.read)
                .set_lw(access.write)
                .set_rr(access.remote_read)
                .set_rw(access.remote_write)
                .set_a(access.remote_atomic)
                .set_pd(pd)
                .set_qpn(0x00ff_ffff)
                .set_mkey_7_0(0)
                .set_start_addr(start)
                .set_len(len)
                .set_log_page_size(page.trailing_zeros() as u8)
                .set_translations_octword_size(octwords);
            for (i, iova) in pages.iovas.iter().enumerate() {
                c.set_mtt(i, mtt_entry(*iova, false, false))
                    .map_err(|_| DriverError::layout(Opcode::CreateMkey, "MTT"))?;
            }
        }
        let out = dev.exec(&cmd, CreateMkeyOut::<&[u8]>::SIZE)?;
        let index = CreateMkeyOut::new(&out[..])
            .map_err(super::cmd::output_too_short)?
            .mkey_index();
        Ok(Self {
            index,
            lkey: mkey_from_index(index, 0),
            start,
            len,
            entries,
            access,
            valid: Arc::new(AtomicBool::new(true)),
        })
    }

    /// The key data segments name (`index << 8 | variant`).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Device address of the key's first byte (an IOVA).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Bytes the key covers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty key (never: registration refuses one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// MTT entries programmed (pages covered).
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// What the key allows.
    pub fn access(&self) -> KeyAccess {
        self.access
    }

    /// False once the key was revoked ([`Device::revoke_memory`]) or deregistered.
    pub fn is_valid(&self) -> bool {
        self.valid.load(Ordering::Acquire)
    }

    /// Destroys the key in the device (a revoked key is already gone) and lets go of its
    /// memory.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when DESTROY_MKEY fails; the key then stays registered and is
    /// destroyed at teardown.
    pub fn deregister<B: Backend>(self, dev: &mut Device<B>) -> Result<(), DriverError> {
        dev.destroy_key(self.index)
    }
}
