//! The memory keys a device holds: revoking a dmabuf range, destroying keys one by one, at
//! teardown, or forgetting them after a reset.

use super::Device;
use crate::backend::Backend;
use crate::control::cmd::input;
use crate::error::DriverError;
use cxdirect_dma::DmaBufMapping;
use cxdirect_hw::cmd::Opcode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<B: Backend> Device<B> {
    /// Takes a revocable dmabuf range away from the device: every key over it is destroyed
    /// (the device stops translating; queues using it get local protection errors), and only
    /// then is the IOMMU range unmapped. Returns the number of keys invalidated.
    ///
    /// # Errors
    ///
    /// [`DriverError::DmaBuf`] for a pinned mapping (nothing is destroyed) or a failed unmap,
    /// [`DriverError::Command`] when a key cannot be destroyed (the range then stays mapped).
    pub fn revoke_memory(&mut self, mapping: &Arc<DmaBufMapping>) -> Result<usize, DriverError> {
        if mapping.mode() == cxdirect_dma::DmaBufMode::Pinned {
            return Err(cxdirect_dma::DmaBufError::Pinned.into());
        }
        let doomed: Vec<u32> = self
            .keys_mut()
            .iter()
            .filter(|k| k.mapping.as_ref().is_some_and(|m| Arc::ptr_eq(m, mapping)))
            .map(|k| k.index)
            .collect();
        for &index in &doomed {
            self.destroy_key(index)?;
        }
        mapping.revoke()?;
        Ok(doomed.len())
    }

    /// DESTROY_MKEY, then forgets the key (invalid from here on).
    pub(crate) fn destroy_key(&mut self, index: u32) -> Result<(), DriverError> {
        let Some(at) = self.keys_mut().iter().position(|k| k.index == index) else {
            return Ok(());
        };
        let mut cmd = input(Opcode::DestroyMkey, 0, 16);
        cmd[8..12].copy_from_slice(&index.to_be_bytes());
        self.exec(&cmd, 16)?;
        let key = self.keys_mut().swap_remove(at);
        key.valid.store(false, Ordering::Release);
        if let Some(mapping) = key.mapping {
            mapping.key_released();
        }
        Ok(())
    }

    /// Forgets every key after a function reset destroyed them in the device; returns how
    /// many. Their [`MemoryKey`]s report `is_valid() == false` from here on.
    pub(crate) fn forget_all_keys(&mut self) -> usize {
        let keys = std::mem::take(self.keys_mut());
        for key in &keys {
            key.valid.store(false, Ordering::Release);
            if let Some(mapping) = &key.mapping {
                mapping.key_released();
            }
        }
        keys.len()
    }

    /// Destroys every key still registered (teardown).
    pub(crate) fn destroy_all_keys(&mut self) -> Result<(), DriverError> {
        while let Some(index) = self.keys_mut().last().map(|k| k.index) {
            self.destroy_key(index)?;
        }
        Ok(())
    }
}
