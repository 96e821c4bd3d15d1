//! Who holds an RDMA program's device: the program itself, or an Ethernet port started on the
//! same function (for ARP and ICMP beside RoCE), which owns the device while it runs.

use cxdirect::{Backend, Device, DriverError, Port, TeardownReport};
use std::ops::{Deref, DerefMut};

/// The device under an [`crate::rdma::verbs::RdmaPort`]: every verb reaches it through
/// `Deref`, whoever holds it.
pub enum DeviceHost<B: Backend> {
    /// The device alone: RoCE only.
    Bare(Box<Device<B>>),
    /// An Ethernet port owns the device (its queues serve the function's IPv4 address).
    Ethernet(Box<Port<B>>),
}

impl<B: Backend> DeviceHost<B> {
    /// Closes the Ethernet port (when there is one; its queues must be dropped first) and
    /// tears the device down.
    ///
    /// # Errors
    ///
    /// The port's close or the device's teardown failing.
    pub fn teardown(self) -> Result<TeardownReport, DriverError> {
        match self {
            DeviceHost::Bare(dev) => dev.teardown(),
            DeviceHost::Ethernet(port) => port.close()?.teardown(),
        }
    }

    /// The Ethernet port, when one holds the device.
    pub fn port(&mut self) -> Option<&mut Port<B>> {
        match self {
            DeviceHost::Bare(_) => None,
            DeviceHost::Ethernet(port) => Some(port),
        }
    }
}

impl<B: Backend> Deref for DeviceHost<B> {
    type Target = Device<B>;

    fn deref(&self) -> &Device<B> {
        match self {
            DeviceHost::Bare(dev) => dev,
            DeviceHost::Ethernet(port) => port.device_ref(),
        }
    }
}

impl<B: Backend> DerefMut for DeviceHost<B> {
    fn deref_mut(&mut self) -> &mut Device<B> {
        match self {
            DeviceHost::Bare(dev) => dev,
            DeviceHost::Ethernet(port) => port.device(),
        }
    }
}
