//! Function-level reset and re-initialisation. After a reset the device holds nothing: no
//! firmware pages, no queues, no keys, no command queue address. Only then may host memory it
//! held be freed, which is why a reset is also how a teardown the firmware did not finish gets
//! its pages back.

use super::super::health::{health_counter, wake_firmware};
use super::{Device, DeviceRecovery, Health};
use crate::backend::Backend;
use crate::control::cmd::CmdQueue;
use crate::control::pages::FwPages;
use crate::error::{DriverError, HealthFailure};
use std::time::Instant;

impl<B: Backend> Device<B> {
    /// Resets the function (VFIO_DEVICE_RESET: a function-level reset) and brings it up again
    /// on the same IOMMU, as after [`Device::bring_up`]. This is the way back from a fatal
    /// health syndrome, a stalled health counter or a device that stopped answering
    /// ([`DriverError::Failed`]); it also works on a healthy device.
    ///
    /// Everything the device held is gone afterwards and its host memory freed: firmware pages,
    /// event queues, memory keys (re-register them). A [`crate::Port`] on this device recovers
    /// with [`crate::Port::recover`], which calls this and re-creates its queues.
    ///
    /// # Errors
    ///
    /// [`DriverError::Backend`] when the function cannot be reset (nothing is freed then: the
    /// device may still use it); otherwise the error of the failing bring-up step, after which
    /// the device stays marked failed and `recover` may be called again.
    pub fn recover(&mut self) -> Result<DeviceRecovery, DriverError> {
        let reset = self.begin_recovery()?;
        self.finish_recovery(reset)
    }

    /// The first half of [`Device::recover`]: the reset, and the host side of what it
    /// destroyed let go. From its return the device reaches no host memory, so buffers its
    /// queues held may be freed before [`Device::finish_recovery`].
    pub(crate) fn begin_recovery(&mut self) -> Result<DeviceRecovery, DriverError> {
        let start = Instant::now();
        let failure = self.health.failed;
        self.reset_function()?;
        // Until re-initialised, the device is as unusable as a failed one.
        self.health.failed = Some(failure.unwrap_or(HealthFailure::NotResponding));
        let pages_released = self.pages.held();
        let keys_lost = self.forget_after_reset();
        Ok(DeviceRecovery {
            failure,
            pages_released,
            keys_lost,
            took: start.elapsed(),
        })
    }

    /// The second half of [`Device::recover`]: bring-up again after
    /// [`Device::begin_recovery`]. On error the device stays marked failed.
    pub(crate) fn finish_recovery(
        &mut self,
        reset: DeviceRecovery,
    ) -> Result<DeviceRecovery, DriverError> {
        let start = Instant::now();
        if let Err(e) = self.reinitialise() {
            self.health.failed = Some(reset.failure.unwrap_or(HealthFailure::NotResponding));
            return Err(e);
        }
        self.info.resets += 1;
        Ok(DeviceRecovery {
            took: reset.took + start.elapsed(),
            ..reset
        })
    }

    /// Interrupts off, then the reset: from its return the device reaches no host memory.
    pub(super) fn reset_function(&mut self) -> Result<(), DriverError> {
        // A device that is failed may not answer the MSI-X change; the reset clears it anyway.
        let _ = self.backend.disable_msix();
        self.interrupts.clear();
        self.backend.reset()?;
        Ok(())
    }

    /// Drops the host side of everything the reset destroyed in the device; returns the number
    /// of memory keys lost.
    pub(super) fn forget_after_reset(&mut self) -> usize {
        self.eq = None;
        self.cmd.forget_after_reset();
        // The old page set drops here: its pages are unmapped and freed.
        self.pages = FwPages::new(self.iommu.clone(), self.iovas.clone());
        self.shared_rings.clear();
        self.pending_pages.clear();
        self.unreported.clear();
        self.failed_cqs.clear();
        self.failed_rings.clear();
        self.forget_all_keys()
    }

    fn reinitialise(&mut self) -> Result<(), DriverError> {
        wake_firmware(&*self.backend, self.options.init_timeout)?;
        self.cmd = CmdQueue::new(&*self.backend, self.iommu.clone(), self.iovas.clone())?;
        self.health = Health {
            last_counter: health_counter(&*self.backend),
            last_change: Instant::now(),
            failed: None,
        };
        self.setup_function()
    }
}
