//! RDMA verbs from C: RoCE v2 on an opened device, and the objects of the driver's
//! `cxdirect::rdma` behind checked handles, named as libibverbs names them.
//!
//! - [`cxd_rdma_open`] brings a device up with RoCE and an IPv4 address (its GID); it takes the
//!   device as [`crate::cxd_port_start`] does, and [`cxd_rdma_close`] gives it back spent;
//! - `cxd_pd_*` protection domains and `cxd_mr_*` memory regions (host memory, or a memfd or
//!   dmabuf descriptor) in [`memory`];
//! - `cxd_cq_*` completion queues, polled into `struct cxd_wc` arrays, in [`cq`];
//! - `cxd_qp_*` RC queue pairs (create, endpoint, connect, post send and receive) in [`qp`];
//! - `cxd_srq_*` shared receive queues in [`srq`];
//! - the work request structs C fills, and their conversion, in [`wr`].
//!
//! Every object counts the objects made from it and refuses to close (`CXD_ERROR_BUSY`) while
//! any is left, so nothing is torn down under a queue pair the device still serves. Post and
//! poll allocate nothing and take no lock: each converts the caller's requests into a fixed
//! array on the stack (or the CQ handle's scratch) and calls the driver once per group.

pub mod cq;
pub mod memory;
pub mod qp;
pub mod srq;
pub mod wr;

use crate::backend::AnyBackend;
use crate::boundary::handle::{self, Exclusive, Handle, Kind};
use crate::boundary::{string_in, write_out};
use crate::device::{cxd_device, take_up, DeviceState};
use crate::error::{guard, Error, Failure};
use driver::rdma::Roce;
use driver::Device;
use std::ffi::{c_char, c_int};
use std::net::Ipv4Addr;

/// Implements [`Kind`] for a C handle struct holding a `Handle<$inner>`.
macro_rules! kind {
    ($c:ident, $inner:ty, $magic:expr) => {
        impl $crate::boundary::handle::Kind for $c {
            type Inner = $inner;
            const MAGIC: u64 = $magic;
            const NAME: &'static str = stringify!($c);
            fn wrap(handle: $crate::boundary::handle::Handle<$inner>) -> Self {
                Self { handle }
            }
            fn handle(&self) -> &$crate::boundary::handle::Handle<$inner> {
                &self.handle
            }
        }
    };
}
pub(crate) use kind;

/// What an RDMA handle holds: the brought-up device with RoCE, and how many objects were made
/// on it and not yet destroyed.
pub(crate) struct RdmaState {
    pub(crate) dev: Device<AnyBackend>,
    pub(crate) roce: Roce,
    /// Protection domains, regions, CQs, QPs and SRQs alive on the device.
    pub(crate) children: u32,
    /// The modelled function, for an emulated device: a completion queue found empty runs its
    /// pending work (frames arrived, transport timers due), as the model executes inline.
    pub(crate) model: Option<cxdirect_emu::Device>,
    device: &'static Handle<DeviceState>,
    /// SRQs whose limit event the device raised and `cxd_srq_limit_reached` has not yet
    /// reported (their SRQ numbers).
    pub(crate) srq_limits: Vec<u32>,
}

/// A device brought up for RDMA (`struct cxd_rdma` in C, opaque): RoCE on its port, an IPv4
/// address as its GID.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_rdma {
    handle: Handle<RdmaState>,
}
kind!(cxd_rdma, RdmaState, 0x6378_642d_7264_6d61); // "cxd-rdma"

/// Where a peer reaches this device and the queue pairs on it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_rdma_info {
    /// The GID (IPv4-mapped IPv6 address, network order).
    pub gid: [u8; 16],
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// The GID's index in the port's table.
    pub gid_index: u8,
    /// The largest path MTU the port allows (`CXD_MTU_*`: 1 = 256 .. 5 = 4096 bytes).
    pub max_path_mtu: u8,
}

/// The RDMA handle at `ptr`, one caller's until the guard drops.
pub(crate) fn rdma(
    ptr: *const cxd_rdma,
) -> Result<(&'static Handle<RdmaState>, Exclusive<'static, RdmaState>), Failure> {
    let h = handle::resolve(ptr)?;
    Ok((h, h.exclusive(cxd_rdma::NAME)?))
}

/// Brings `device` up with RoCE enabled and `ipv4` (dotted quad, `"10.0.0.1"`) as its address,
/// whose IPv4-mapped form is the port's GID. The device then belongs to the RDMA handle until
/// `cxd_rdma_close`, as it does to a port (a device runs either a port or RDMA here).
///
/// Returns 0 and stores the handle in `*out`, or a negative `cxd_error`:
/// `CXD_ERROR_INVALID_ARGUMENT` for an address that is not IPv4, `CXD_ERROR_BUSY` when the device
/// runs a port or RDMA already, `CXD_ERROR_CONFIG` when the device has no RoCE,
/// `CXD_ERROR_DEVICE` when bring-up failed (the device is then spent: close it).
///
/// # Safety
///
/// `device` is NULL or a handle this library returned; `ipv4` is NULL or a NUL-terminated
/// string; `out` is NULL or points to a writable `cxd_rdma *`.
#[no_mangle]
pub unsafe extern "C" fn cxd_rdma_open(
    device: *mut cxd_device,
    ipv4: *const c_char,
    out: *mut *mut cxd_rdma,
) -> c_int {
    guard(|| {
        let device = handle::resolve(device)?;
        let text = string_in(ipv4, "ipv4")?;
        let address: Ipv4Addr = text.parse().map_err(|_| {
            Failure::new(
                Error::InvalidArgument,
                format!("ipv4 {text:?} is not an IPv4 address; give a dotted quad (10.0.0.1)"),
            )
        })?;
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &rdma"));
        }
        let mut dev = device.exclusive(cxd_device::NAME)?;
        let mut up = take_up(dev.get(), 1)?;
        let model = match up.backend() {
            AnyBackend::Emulated(b) => Some(b.model().clone()),
            AnyBackend::Pci(_) => None,
        };
        let roce = match Roce::enable(&mut up, address.into()) {
            Ok(roce) => roce,
            Err(e) => {
                // The device keeps working without RoCE: a port may still start on it.
                *dev.get() = DeviceState::Up(Box::new(up));
                return Err(e.into());
            }
        };
        let d = up;
        drop(dev);
        let rdma = handle::open::<cxd_rdma>(RdmaState {
            dev: d,
            roce,
            children: 0,
            model,
            device,
            srq_limits: Vec::new(),
        });
        write_out(out, rdma as *const cxd_rdma as *mut cxd_rdma, "out")?;
        Ok(0)
    })
}

/// Stores the device's GID, MAC, GID index and largest path MTU in `*out`.
///
/// # Safety
///
/// `rdma` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_rdma_query(rdma: *mut cxd_rdma, out: *mut cxd_rdma_info) -> c_int {
    guard(|| {
        let (_, mut r) = self::rdma(rdma)?;
        let roce = &r.get().roce;
        let info = cxd_rdma_info {
            gid: roce.gid(),
            mac: roce.mac(),
            gid_index: roce.gid_index(),
            max_path_mtu: roce.max_path_mtu() as u8,
        };
        write_out(out, info, "out")?;
        Ok(0)
    })
}

/// Tears the device down and closes the handle; the device handle is then spent
/// (`cxd_device_close` it). Refused with `CXD_ERROR_BUSY`, nothing closed, while a protection
/// domain, region, completion queue, queue pair or shared receive queue made on it is left.
///
/// # Safety
///
/// `rdma` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_rdma_close(rdma: *mut cxd_rdma) -> c_int {
    guard(|| {
        let (_, mut r) = self::rdma(rdma)?;
        let children = r.get().children;
        if children > 0 {
            return Err(Failure::new(
                Error::Busy,
                format!(
                    "{children} objects made on the device are left; destroy the queue pairs, \
                     shared receive queues, completion queues and regions, and deallocate the \
                     protection domains first"
                ),
            ));
        }
        let mut device = r.get().device.exclusive(cxd_device::NAME)?;
        *device.get() = DeviceState::Spent;
        drop(device);
        let Some(state) = r.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_rdma was closed"));
        };
        state.dev.teardown().map(|_| 0).map_err(Failure::from)
    })
}

/// A child object's destruction: one fewer on the device.
pub(crate) fn release_child(r: &mut Exclusive<'_, RdmaState>) {
    let state = r.get();
    state.children = state.children.saturating_sub(1);
}

/// The message for a parent closed or in use while a child is made.
pub(crate) fn not_ours(what: &str, parent: &str) -> Failure {
    Failure::new(
        Error::InvalidArgument,
        format!("the {what} was made on another cxd_rdma than the {parent}; use one device's"),
    )
}

/// The device's async event descriptor: readable (`POLLIN`) when the device raised an event,
/// such as a shared receive queue's limit (`cxd_srq_limit_reached` then takes it). The
/// descriptor is the device's: do not close or read it; it stays valid until
/// `cxd_rdma_close`. Returns it, or a negative `cxd_error`.
///
/// # Safety
///
/// `rdma` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_rdma_event_fd(rdma: *mut cxd_rdma) -> c_int {
    use std::os::fd::AsRawFd;
    guard(|| {
        let (_, mut r) = self::rdma(rdma)?;
        let fd = r.get().dev.event_fd().ok_or_else(|| {
            Failure::new(
                Error::Device,
                "the device has no async event interrupt (MSI-X was not enabled)",
            )
        })?;
        Ok(fd.as_raw_fd())
    })
}

/// Takes the device's async events (never blocking), clearing its event descriptor, and keeps
/// the shared receive queues' limit events for `cxd_srq_limit_reached`.
pub(crate) fn take_events(state: &mut RdmaState) -> Result<(), Failure> {
    state.dev.wait_event(std::time::Duration::ZERO);
    loop {
        for event in state.dev.poll_events()? {
            if let driver::Event::SrqLimit { srq } = event {
                state.srq_limits.push(srq);
            }
        }
        // Events a command took off the queue while it waited are not in the descriptor.
        if !state.dev.events_pending() {
            return Ok(());
        }
    }
}
