//! cxdirect from C: a C interface to the driver, built as `libcxdirect_c.so` and
//! `libcxdirect_c.a`, with the header `include/cxdirect.h` generated from this crate.
//!
//! The interface is shaped as a C programmer expects it:
//!
//! - every name starts with `cxd_`; objects are opaque handles (`cxd_device`, `cxd_port`,
//!   `cxd_txq`, `cxd_rxq`, `cxd_mempool`, `cxd_mbuf`);
//! - every function returns an `int`: 0 (or a count) on success, a negative `cxd_error` on
//!   failure, with [`cxd_last_error`] saying what was wrong and what to do (per thread);
//! - no Rust panic crosses the boundary: each entry point catches it (`CXD_ERROR_PANIC`);
//! - bursts pass arrays of mbuf handles with no copy, and mbuf ownership moves as in DPDK: a
//!   send takes the mbufs it accepts, a receive hands out new ones.
//!
//! Handles are checked at every call (see [`boundary`]): NULL, a handle of the wrong kind, a
//! closed object, an mbuf freed or sent already, an mbuf given to a pool it does not belong
//! to, a burst larger than [`CXD_MAX_BURST`] — each is its own error code, with nothing
//! changed.
//!
//! Modules: [`boundary`] reads and writes every raw pointer C passes (the crate's only
//! `unsafe`); [`error`] has the codes and the panic guard; [`device`], [`port`], [`mbuf`] and
//! [`burst`] are the Ethernet entry points, [`rdma`] the RDMA verbs (`cxd_rdma`, `cxd_pd`,
//! `cxd_mr`, `cxd_cq`, `cxd_qp`, `cxd_srq`).

pub mod boundary;
pub mod burst;
pub mod device;
pub mod error;
pub mod flow;
pub mod interrupt;
pub mod mbuf;
pub mod pool_memory;
pub mod port;
pub mod rdma;
pub mod shared;
pub mod traffic_class;

mod backend;

pub use boundary::slots::cxd_mbuf;
pub use burst::{cxd_rx_burst, cxd_rxq, cxd_tx_burst, cxd_txq};
pub use device::{cxd_device, cxd_device_close, cxd_open_emulated_pair, cxd_open_pci};
pub use error::{cxd_error_name, cxd_last_error, Error};
pub use flow::*;
pub use interrupt::*;
pub use mbuf::*;
pub use pool_memory::*;
pub use port::*;
pub use rdma::cq::*;
pub use rdma::memory::*;
pub use rdma::qp::*;
pub use rdma::srq::*;
pub use rdma::wr::*;
pub use rdma::{
    cxd_rdma, cxd_rdma_close, cxd_rdma_event_fd, cxd_rdma_info, cxd_rdma_open, cxd_rdma_query,
};
pub use shared::*;
pub use traffic_class::*;

use std::ffi::c_char;

/// The interface's major version: changes break source or binary compatibility.
pub const CXD_VERSION_MAJOR: u32 = 0;
/// The interface's minor version: additions.
pub const CXD_VERSION_MINOR: u32 = 1;
/// The interface's patch version.
pub const CXD_VERSION_PATCH: u32 = 0;
/// Most packets one `cxd_tx_burst` or `cxd_rx_burst` call takes.
pub const CXD_MAX_BURST: u32 = 256;

/// The library's version, `"MAJOR.MINOR.PATCH"` (a static string). Compare it with the
/// `CXD_VERSION_*` macros of the header a program was built with.
#[no_mangle]
pub extern "C" fn cxd_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
