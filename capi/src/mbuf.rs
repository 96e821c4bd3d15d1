//! Pools and mbufs: allocation, freeing, packet data and per-packet offloads.
//!
//! Packet data goes in with `cxd_mbuf_set_data`/`cxd_mbuf_write` and out with `cxd_mbuf_read`
//! (copies), or in place through `cxd_mbuf_data`, the buffer's CPU address while the program
//! holds the mbuf (the device does not touch a held buffer), with `cxd_mbuf_set_len` for a
//! packet written there. Bursts hand mbufs over without copying packets.

use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::slots::{claim, cxd_mbuf, SlotTable};
use crate::boundary::{bytes_in, bytes_out, read_in, write_out};
use crate::error::{guard, Error, Failure};
use driver::{Mbuf, Mempool};
use std::ffi::{c_int, c_void};

/// What a pool handle holds.
pub(crate) struct PoolState {
    pool: Mempool,
    table: SlotTable,
}

impl PoolState {
    pub(crate) fn new(pool: Mempool, table: SlotTable) -> Self {
        Self { pool, table }
    }
}

/// A port's buffer pool (`struct cxd_mempool` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_mempool {
    handle: Handle<PoolState>,
}

impl Kind for cxd_mempool {
    type Inner = PoolState;
    const MAGIC: u64 = 0x6378_642d_706f_6f6c; // "cxd-pool"
    const NAME: &'static str = "cxd_mempool";
    fn wrap(handle: Handle<PoolState>) -> Self {
        Self { handle }
    }
    fn handle(&self) -> &Handle<PoolState> {
        &self.handle
    }
}

/// A pool's sizes and fill.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_mempool_info {
    /// Buffers in the pool.
    pub capacity: u32,
    /// Buffers free now.
    pub available: u32,
    /// Bytes per buffer, headroom included.
    pub buf_size: u32,
    /// Largest packet a buffer holds, in bytes.
    pub data_room: u32,
}

/// Send offload: compute the IPv4 header checksum.
pub const CXD_TX_IP_CSUM: u32 = 1 << 0;
/// Send offload: compute the TCP/UDP checksum.
pub const CXD_TX_L4_CSUM: u32 = 1 << 1;
/// Send offload: insert the VLAN tag `vlan_tci`.
pub const CXD_TX_VLAN: u32 = 1 << 2;
/// Send offload: TCP segmentation with `tso_mss` (the port needs `CXD_PORT_TX_TSO`).
pub const CXD_TX_TSO: u32 = 1 << 3;
/// Receive result: the device verified the IPv4 header checksum (or the packet is IPv6).
pub const CXD_RX_IP_CSUM_GOOD: u32 = 1 << 16;
/// Receive result: the device verified the TCP/UDP checksum.
pub const CXD_RX_L4_CSUM_GOOD: u32 = 1 << 17;
/// Receive result: `rss_hash` holds the device's RSS hash.
pub const CXD_RX_RSS_HASH: u32 = 1 << 18;

/// `rx_l3_type`: no IP header the device knew.
pub const CXD_RX_L3_NONE: u8 = 0;
/// `rx_l3_type`: IPv6.
pub const CXD_RX_L3_IPV6: u8 = 1;
/// `rx_l3_type`: IPv4.
pub const CXD_RX_L3_IPV4: u8 = 2;
/// `rx_l4_type`: neither TCP nor UDP.
pub const CXD_RX_L4_NONE: u8 = 0;
/// `rx_l4_type`: TCP without the ACK flag.
pub const CXD_RX_L4_TCP: u8 = 1;
/// `rx_l4_type`: UDP.
pub const CXD_RX_L4_UDP: u8 = 2;
/// `rx_l4_type`: TCP, ACK flag set, no payload.
pub const CXD_RX_L4_TCP_ACK: u8 = 3;
/// `rx_l4_type`: TCP, ACK flag set, with payload.
pub const CXD_RX_L4_TCP_ACK_DATA: u8 = 4;

/// A packet's offload requests (send) and results (receive).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_mbuf_offload {
    /// `CXD_TX_*` and `CXD_RX_*` flags.
    pub flags: u32,
    /// VLAN tag to insert, with `CXD_TX_VLAN`.
    pub vlan_tci: u16,
    /// TCP payload bytes per segment, with `CXD_TX_TSO`.
    pub tso_mss: u16,
    /// RSS hash, with `CXD_RX_RSS_HASH`.
    pub rss_hash: u32,
    /// The packet's L3 type as the completion reported it: a `CXD_RX_L3_*` value.
    pub rx_l3_type: u8,
    /// The packet's L4 type as the completion reported it: a `CXD_RX_L4_*` value.
    pub rx_l4_type: u8,
    /// Zero.
    pub reserved: u16,
}

/// Takes a free buffer from `pool` (empty: length 0) and stores its handle in `*out`. The
/// caller owns it until it frees it or a send takes it. One compare-and-swap on the pool and
/// one on the buffer's slot; no allocation.
///
/// Returns 0, or `CXD_ERROR_NO_BUFFERS` when the pool is empty, or another negative `cxd_error`.
///
/// # Safety
///
/// `pool` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_alloc(pool: *mut cxd_mempool, out: *mut *mut cxd_mbuf) -> c_int {
    guard(|| {
        if out.is_null() {
            return Err(Failure::new(Error::Null, "out is NULL; pass &mbuf"));
        }
        let token = handle::resolve(pool)?.shared(cxd_mempool::NAME, |p| {
            let m = p.pool.alloc().ok_or_else(|| {
                Failure::new(
                    Error::NoBuffers,
                    format!(
                        "the pool's {} buffers are all in use; free mbufs (or receive less \
                         before freeing), or start the port with more pool_buffers",
                        p.pool.capacity()
                    ),
                )
            })?;
            p.table.place(m.buffer_index() as usize, m)
        })??;
        write_out(out, token, "out")?;
        Ok(0)
    })
}

/// Frees `m`: its buffer goes back to the pool it came from. The handle may not be used
/// again: a second free is `CXD_ERROR_DOUBLE_FREE`.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_free(m: *mut cxd_mbuf) -> c_int {
    guard(|| {
        drop(claim(m)?.take());
        Ok(0)
    })
}

/// Returns `m` to `pool`, checking that it came from there: `CXD_ERROR_WRONG_POOL`, with the
/// mbuf still the caller's, when it belongs to another pool.
///
/// # Safety
///
/// `pool` and `m` are NULL or handles this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_mempool_put(pool: *mut cxd_mempool, m: *mut cxd_mbuf) -> c_int {
    guard(|| {
        let pool_id = handle::resolve(pool)?.shared(cxd_mempool::NAME, |p| p.table.pool_id())?;
        let c = claim(m)?;
        if c.pool_id() != pool_id {
            c.keep();
            return Err(Failure::new(
                Error::WrongPool,
                "the mbuf belongs to another pool than the one given; return it to the pool \
                 it came from (or use cxd_mbuf_free, which knows)",
            ));
        }
        drop(c.take());
        Ok(0)
    })
}

/// Stores the pool's sizes and free buffers in `*out`.
///
/// # Safety
///
/// `pool` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mempool_info_get(
    pool: *mut cxd_mempool,
    out: *mut cxd_mempool_info,
) -> c_int {
    guard(|| {
        let info = handle::resolve(pool)?.shared(cxd_mempool::NAME, |p| cxd_mempool_info {
            capacity: p.pool.capacity(),
            available: p.pool.available(),
            buf_size: p.pool.buf_size(),
            data_room: p.pool.data_room(),
        })?;
        write_out(out, info, "out")?;
        Ok(0)
    })
}

/// Runs `f` on the caller's mbuf `m`, which stays the caller's.
pub(crate) fn with_mbuf<T>(
    m: *const cxd_mbuf,
    f: impl FnOnce(&mut Mbuf) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut c = claim(m)?;
    let result = f(c.mbuf());
    c.keep();
    result
}

/// The packet's length in bytes (of all its segments), or a negative `cxd_error`.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_len(m: *const cxd_mbuf) -> c_int {
    guard(|| with_mbuf(m, |m| Ok(clamp(m.pkt_len()))))
}

/// The largest packet the buffer holds, in bytes, or a negative `cxd_error`.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_capacity(m: *const cxd_mbuf) -> c_int {
    guard(|| with_mbuf(m, |m| Ok(clamp(m.capacity()))))
}

fn clamp(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// Stores in `*data` the address of the packet's first byte (its buffer's CPU mapping, as
/// DPDK's `rte_pktmbuf_mtod`) and returns the bytes from there that are this packet's (its
/// capacity: `cxd_mbuf_len` of them hold the packet now). Read and write the packet in place
/// there, then `cxd_mbuf_set_len` for a new length.
///
/// The address is valid while the program holds the mbuf: not after `cxd_mbuf_free`, nor
/// after a `cxd_tx_burst` takes it (the device reads it then; a later receive may hand the
/// buffer out again). The library cannot catch a use past that through the address, as it
/// catches a stale handle. `CXD_ERROR_INVALID_ARGUMENT` for a pool in memory the CPU does not
/// map (a dmabuf): use the copies then.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `data` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_data(m: *mut cxd_mbuf, data: *mut *mut c_void) -> c_int {
    guard(|| {
        if data.is_null() {
            return Err(Failure::new(Error::Null, "data is NULL; pass &pointer"));
        }
        with_mbuf(m, |m| {
            let Some(ptr) = m.data_ptr() else {
                return Err(Failure::new(
                    Error::InvalidArgument,
                    "the mbuf's pool lives in memory the CPU does not map (a dmabuf); copy with \
                     cxd_mbuf_read and cxd_mbuf_write instead",
                ));
            };
            write_out(data, ptr.as_ptr().cast::<c_void>(), "data")?;
            Ok(clamp(m.capacity()))
        })
    })
}

/// Sets the packet's length to `len` bytes, for a packet written in place through
/// `cxd_mbuf_data`. `CXD_ERROR_TOO_LONG`, with the length unchanged, past its capacity.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_set_len(m: *mut cxd_mbuf, len: usize) -> c_int {
    guard(|| {
        with_mbuf(m, |m| {
            m.set_len_within_capacity(len)?;
            Ok(0)
        })
    })
}

/// Replaces the packet with the `len` bytes at `data` (a copy into the buffer); its length
/// becomes `len`. `CXD_ERROR_TOO_LONG`, with the packet unchanged, when they do not fit.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `data` points to `len` readable bytes (or
/// `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_set_data(
    m: *mut cxd_mbuf,
    data: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let data = bytes_in(data.cast(), len, "data")?;
        with_mbuf(m, |m| {
            m.set_data(data)?;
            Ok(0)
        })
    })
}

/// Overwrites `len` packet bytes at `offset` with those at `data`, within the packet's
/// current length (`CXD_ERROR_TOO_LONG` past it, nothing written).
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `data` points to `len` readable bytes (or
/// `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_write(
    m: *mut cxd_mbuf,
    offset: usize,
    data: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let data = bytes_in(data.cast(), len, "data")?;
        with_mbuf(m, |m| {
            m.write(offset, data)?;
            Ok(0)
        })
    })
}

/// Copies up to `len` packet bytes from `offset` into `out`; returns how many it copied
/// (fewer when the packet ends first), or a negative `cxd_error`.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `out` points to `len` writable bytes (or
/// `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_read(
    m: *const cxd_mbuf,
    offset: usize,
    out: *mut c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let out = bytes_out(out.cast(), len, "out")?;
        with_mbuf(m, |m| Ok(clamp(m.read(offset, out))))
    })
}

/// Stores the packet's offload flags (the send requests set, and what receive reported) in
/// `*out`.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_offload_get(
    m: *const cxd_mbuf,
    out: *mut cxd_mbuf_offload,
) -> c_int {
    guard(|| {
        let mut got = cxd_mbuf_offload::default();
        with_mbuf(m, |m| {
            let f = m.flags;
            let bits = [
                (f.tx_ip_csum, CXD_TX_IP_CSUM),
                (f.tx_l4_csum, CXD_TX_L4_CSUM),
                (f.tx_vlan.is_some(), CXD_TX_VLAN),
                (f.tx_tso_mss.is_some(), CXD_TX_TSO),
                (f.rx_ip_csum_good, CXD_RX_IP_CSUM_GOOD),
                (f.rx_l4_csum_good, CXD_RX_L4_CSUM_GOOD),
                (f.rx_rss_hash.is_some(), CXD_RX_RSS_HASH),
            ];
            got.flags = bits.iter().filter(|(on, _)| *on).fold(0, |a, (_, b)| a | b);
            got.vlan_tci = f.tx_vlan.unwrap_or(0);
            got.tso_mss = f.tx_tso_mss.unwrap_or(0);
            got.rss_hash = f.rx_rss_hash.unwrap_or(0);
            got.rx_l3_type = f.rx_l3_type;
            got.rx_l4_type = f.rx_l4_type;
            Ok(0)
        })?;
        write_out(out, got, "out")?;
        Ok(0)
    })
}

/// Sets the packet's send offload requests from `offload->flags` (`CXD_TX_*` bits;
/// `CXD_RX_*` bits are refused with `CXD_ERROR_INVALID_ARGUMENT`), `vlan_tci` and `tso_mss`.
///
/// # Safety
///
/// `m` is NULL or a handle this library returned; `offload` is NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn cxd_mbuf_offload_set(
    m: *mut cxd_mbuf,
    offload: *const cxd_mbuf_offload,
) -> c_int {
    guard(|| {
        let o = read_in(offload, "offload")?;
        let tx = CXD_TX_IP_CSUM | CXD_TX_L4_CSUM | CXD_TX_VLAN | CXD_TX_TSO;
        if o.flags & !tx != 0 {
            return Err(Failure::new(
                Error::InvalidArgument,
                format!(
                    "flags {:#x} asks for more than the CXD_TX_* offloads; clear the other bits",
                    o.flags
                ),
            ));
        }
        if o.flags & CXD_TX_TSO != 0 && o.tso_mss == 0 {
            return Err(Failure::new(
                Error::InvalidArgument,
                "CXD_TX_TSO with tso_mss 0: give the TCP payload bytes per segment",
            ));
        }
        with_mbuf(m, |m| {
            let f = &mut m.flags;
            f.tx_ip_csum = o.flags & CXD_TX_IP_CSUM != 0;
            f.tx_l4_csum = o.flags & CXD_TX_L4_CSUM != 0;
            f.tx_vlan = (o.flags & CXD_TX_VLAN != 0).then_some(o.vlan_tci);
            f.tx_tso_mss = (o.flags & CXD_TX_TSO != 0).then_some(o.tso_mss);
            Ok(0)
        })
    })
}
