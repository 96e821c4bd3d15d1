//! Opening functions: the emulated pair and PCI functions through VFIO.

use crate::backend::AnyBackend;
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::{string_in, write_out};
use crate::error::{guard, Error, Failure};
use cxdirect_apps::emulated::{open_emulated, Spec};
use cxdirect_emu::EmuConfig;
use driver::{Device, DriverError, Options};
use std::ffi::{c_char, c_int};

/// What a device handle holds: the function until a port starts on it.
pub(crate) enum DeviceState {
    /// Opened, no port yet.
    Ready(AnyBackend),
    /// Brought up, no port: a port start refused its configuration before touching the device
    /// (the next start or `cxd_rdma_open` uses it as it is).
    Up(Box<driver::Device<AnyBackend>>),
    /// A port runs on it (`cxd_port_start` took it); `cxd_port_close` tears it down.
    InUse,
    /// Its port was closed and the function torn down; only `cxd_device_close` is left.
    Spent,
}

/// An opened function (`struct cxd_device` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_device {
    handle: Handle<DeviceState>,
}

impl Kind for cxd_device {
    type Inner = DeviceState;
    const MAGIC: u64 = 0x6378_642d_6465_7600; // "cxd-dev"
    const NAME: &'static str = "cxd_device";
    fn wrap(handle: Handle<DeviceState>) -> Self {
        Self { handle }
    }
    fn handle(&self) -> &Handle<DeviceState> {
        &self.handle
    }
}

/// Opens two modelled ConnectX-6 Dx functions wired back to back (the `emu-pair` spec):
/// what one sends, the other receives. For tests and trying the interface without hardware.
///
/// Returns 0 and stores the two handles in `*a` and `*b`, or a negative `cxd_error`.
///
/// # Safety
///
/// `a` and `b` are NULL or point to writable `cxd_device *` variables.
#[no_mangle]
pub unsafe extern "C" fn cxd_open_emulated_pair(
    a: *mut *mut cxd_device,
    b: *mut *mut cxd_device,
) -> c_int {
    guard(|| {
        if a.is_null() || b.is_null() {
            return Err(Failure::new(
                Error::Null,
                "cxd_open_emulated_pair needs two out-pointers (a and b); one is NULL",
            ));
        }
        let mut functions = open_emulated(&Spec::EmuPair, EmuConfig::default());
        let (Some(second), Some(first)) = (functions.pop(), functions.pop()) else {
            return Err(Failure::new(Error::Open, "the emulated pair did not open"));
        };
        let first = handle::open::<cxd_device>(DeviceState::Ready(AnyBackend::Emulated(first)));
        let second = handle::open::<cxd_device>(DeviceState::Ready(AnyBackend::Emulated(second)));
        write_out(a, first as *const cxd_device as *mut cxd_device, "a")?;
        write_out(b, second as *const cxd_device as *mut cxd_device, "b")?;
        Ok(0)
    })
}

/// Opens the ConnectX PCI function at `address` (`0000:06:00.0`, or `06:00.0` for domain 0,
/// optionally followed by `,iommu=auto|type1|iommufd|noiommu`) through VFIO. The function
/// must be bound to vfio-pci (`cxdirect-devbind`), and the caller needs access to its VFIO
/// nodes and enough locked memory; the message says which is missing.
///
/// Returns 0 and stores the handle in `*out`, or a negative `cxd_error` (`CXD_ERROR_OPEN` when
/// the function cannot be opened).
///
/// # Safety
///
/// `address` is NULL or a NUL-terminated string; `out` is NULL or points to a writable
/// `cxd_device *`.
#[no_mangle]
pub unsafe extern "C" fn cxd_open_pci(address: *const c_char, out: *mut *mut cxd_device) -> c_int {
    guard(|| {
        let address = string_in(address, "the PCI address")?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &device"));
        }
        let function = cxdirect_apps::vfio_open(&address, "auto")
            .map_err(|e| Failure::new(Error::Open, format!("cannot open {address}: {e}")))?;
        let device = handle::open::<cxd_device>(DeviceState::Ready(AnyBackend::Pci(function)));
        write_out(out, device as *const cxd_device as *mut cxd_device, "out")?;
        Ok(0)
    })
}

/// Closes a device handle. A device whose port still runs is refused with `CXD_ERROR_BUSY`:
/// close the port first. The handle may not be used afterwards (`CXD_ERROR_CLOSED`).
///
/// # Safety
///
/// `device` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_device_close(device: *mut cxd_device) -> c_int {
    guard(|| {
        let handle = handle::resolve(device)?;
        let guard = handle.exclusive(cxd_device::NAME)?;
        let mut guard = guard;
        if matches!(guard.get(), DeviceState::InUse) {
            return Err(Failure::new(
                Error::Busy,
                "the device runs a port; close the port (cxd_port_close) first",
            ));
        }
        match guard.close() {
            Some(DeviceState::Up(dev)) => dev.teardown().map(|_| 0).map_err(Failure::from),
            _ => Ok(0),
        }
    })
}

/// The brought-up device a port or RDMA starts on, taken from the handle's state (left
/// `InUse`): brought up now when only opened, with `msix_vectors` interrupt vectors. `Err` leaves the state as it was and says why
/// (`CXD_ERROR_BUSY` for a device in use or spent); a failed bring-up leaves it spent.
pub(crate) fn take_up(
    state: &mut DeviceState,
    msix_vectors: u16,
) -> Result<Device<AnyBackend>, Failure> {
    match std::mem::replace(state, DeviceState::InUse) {
        DeviceState::Up(dev) => Ok(*dev),
        DeviceState::Ready(backend) => {
            let options = Options {
                msix_vectors,
                ..Options::default()
            };
            Device::bring_up(backend, options).map_err(|e: DriverError| {
                *state = DeviceState::Spent;
                Failure::from(e)
            })
        }
        other => {
            let spent = matches!(other, DeviceState::Spent);
            *state = other;
            Err(Failure::new(
                Error::Busy,
                if spent {
                    "the device was torn down (its port or RDMA closed, or its bring-up \
                     failed); close it and open it again"
                } else {
                    "the device already runs a port or RDMA; close that first"
                },
            ))
        }
    }
}
