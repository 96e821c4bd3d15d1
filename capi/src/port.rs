//! Ports: their configuration, start, queues, pool, statistics and close.

use crate::backend::AnyBackend;
use crate::boundary::handle::{self, Handle, Kind};
use crate::boundary::slots::SlotTable;
use crate::boundary::{read_in, write_out};
use crate::burst::{cxd_rxq, cxd_txq, RxSource, RxqState, TxqState};
use crate::device::{cxd_device, take_up, DeviceState};
use crate::error::{guard, Error, Failure, Outcome};
use crate::flow::{self, cxd_flow};
use crate::mbuf::{cxd_mempool, PoolState};
use cxdirect_dma::DmaBufMapping;
use driver::{Device, InlineMode, PortConfig, SharedQueues, SharedRxConfig, SharedRxRing, Started};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Port flag: receive every frame, not only the port's MAC, broadcast and multicast.
pub const CXD_PORT_PROMISCUOUS: u32 = 1 << 0;
/// Port flag: send runs of packets in enhanced multi-packet WQEs where the device offers them.
pub const CXD_PORT_TX_MULTI_PACKET: u32 = 1 << 1;
/// Port flag: accept packets asking for TCP segmentation offload (`CXD_TX_TSO`); the port
/// does not start on a device without LSO.
pub const CXD_PORT_TX_TSO: u32 = 1 << 2;
/// Port flag: copy a lone WQE into the BlueFlame register.
pub const CXD_PORT_BLUEFLAME: u32 = 1 << 3;
/// Port flag: ask the device to compress receive completions where it can.
pub const CXD_PORT_RX_CQE_COMPRESSION: u32 = 1 << 4;
/// Port flag: give each receive queue a completion interrupt, a file descriptor `poll()`
/// waits on (`cxd_rxq_interrupt_fd`), so that an idle receiver can sleep. The device is
/// brought up with one MSI-X vector per receive queue besides its own.
pub const CXD_PORT_RX_INTERRUPTS: u32 = 1 << 5;

/// Inline mode: no packet bytes inline in send WQEs.
pub const CXD_INLINE_NONE: u8 = 0;
/// Inline mode: the headers inline (the default).
pub const CXD_INLINE_HEADERS: u8 = 1;
/// Inline mode: whole packets up to `inline_max` bytes inline.
pub const CXD_INLINE_FULL: u8 = 2;

/// How a port is set up. Fill it with `cxd_port_config_default`, then change what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct cxd_port_config {
    /// Receive queues (1..=64).
    pub rx_queues: u16,
    /// Send queues (1..=64).
    pub tx_queues: u16,
    /// Entries per ring (a power of two, 64..=32768).
    pub ring_size: u32,
    /// Buffers in the port's pool (at least twice `rx_queues * ring_size`).
    pub pool_buffers: u32,
    /// Bytes per buffer, headroom (128) included (a multiple of 64, 256..=65536, holding an
    /// MTU-sized frame plus headroom).
    pub buf_size: u32,
    /// Largest IP packet in bytes (68..=9960).
    pub mtu: u16,
    /// A send completion is asked for every this many packets (1..=ring_size).
    pub cqe_every: u16,
    /// Largest packet sent wholly inline with `CXD_INLINE_FULL`, in bytes (18..=900).
    pub inline_max: u16,
    /// `CXD_INLINE_NONE`, `CXD_INLINE_HEADERS` or `CXD_INLINE_FULL`.
    pub inline_mode: u8,
    /// The priority (0..=7) the port's packets carry: the traffic class they go in is this
    /// priority's (`cxd_port_set_priority_class`). 0 by default.
    pub tx_priority: u8,
    /// `CXD_PORT_*` flags.
    pub flags: u32,
    /// Buffers in a receive ring shared by all the port's receive queues (a power of two,
    /// 64..=32768), or 0 (the default) for a ring per queue. See `cxd_port_shared_refill`.
    pub shared_ring_size: u32,
    /// The shared ring's limit armed at start, in buffers (below `shared_ring_size`; 0: not
    /// armed): when fewer are posted the device raises one limit event
    /// (`cxd_port_shared_limit_reached`).
    pub shared_limit: u32,
}

/// A port's statistics, summed over its queues (as of each queue's last burst), as DPDK's
/// `rte_eth_stats` names them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct cxd_port_stats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received (without the FCS).
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Frames the device dropped for want of a posted receive buffer.
    pub imissed: u64,
    /// Receive completions with an error.
    pub ierrors: u64,
    /// Packets the send side refused or the device completed with an error.
    pub oerrors: u64,
    /// Times a receive refill found the pool empty.
    pub rx_nombuf: u64,
}

/// What a port handle holds: the running port and the handles it gave out.
pub(crate) struct PortState {
    port: driver::Port<crate::backend::AnyBackend>,
    device: &'static Handle<DeviceState>,
    pool: &'static cxd_mempool,
    txqs: Vec<&'static cxd_txq>,
    rxqs: Vec<&'static cxd_rxq>,
    /// The RQ number of each receive queue, in index order (flow rules name them).
    rqns: Vec<u32>,
    /// Flow rules installed and not yet destroyed.
    pub(crate) flows: Vec<&'static cxd_flow>,
    /// The shared receive ring's handle, for a port started with one.
    pub(crate) shared: Option<SharedRxRing<crate::backend::AnyBackend>>,
    /// Buffers the device still had posted at the shared ring's last limit event, until
    /// `cxd_port_shared_limit_reached` reports it.
    pub(crate) shared_low: Option<u32>,
}

impl PortState {
    /// The driver's port.
    pub(crate) fn port_mut(&mut self) -> &mut driver::Port<crate::backend::AnyBackend> {
        &mut self.port
    }

    /// The RQ number of receive queue `index`; `CXD_ERROR_INVALID_ARGUMENT` past the last.
    pub(crate) fn rqn(&self, index: u16) -> Result<u32, Failure> {
        self.rqns.get(usize::from(index)).copied().ok_or_else(|| {
            Failure::new(
                Error::InvalidArgument,
                format!(
                    "receive queue {index} does not exist; the port has 0..{}",
                    self.rqns.len()
                ),
            )
        })
    }
}

/// A started port (`struct cxd_port` in C, opaque).
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct cxd_port {
    handle: Handle<PortState>,
}

impl Kind for cxd_port {
    type Inner = PortState;
    const MAGIC: u64 = 0x6378_642d_706f_7274; // "cxd-port"
    const NAME: &'static str = "cxd_port";
    fn wrap(handle: Handle<PortState>) -> Self {
        Self { handle }
    }
    fn handle(&self) -> &Handle<PortState> {
        &self.handle
    }
}

/// Pools are told apart by this number in their slot tables.
static NEXT_POOL: AtomicU32 = AtomicU32::new(1);

impl cxd_port_config {
    fn defaults() -> Self {
        let d = PortConfig::default();
        let mut flags = 0;
        for (on, flag) in [
            (d.promiscuous, CXD_PORT_PROMISCUOUS),
            (d.tx_multi_packet, CXD_PORT_TX_MULTI_PACKET),
            (d.tx_tso, CXD_PORT_TX_TSO),
            (d.blueflame, CXD_PORT_BLUEFLAME),
            (d.rx_cqe_compression, CXD_PORT_RX_CQE_COMPRESSION),
            (d.rx_interrupts, CXD_PORT_RX_INTERRUPTS),
        ] {
            if on {
                flags |= flag;
            }
        }
        Self {
            rx_queues: d.rx_queues,
            tx_queues: d.tx_queues,
            ring_size: d.ring_size,
            pool_buffers: d.pool_buffers,
            buf_size: d.buf_size,
            mtu: d.mtu,
            cqe_every: d.cqe_every,
            inline_max: d.inline_max,
            inline_mode: match d.inline {
                InlineMode::None => CXD_INLINE_NONE,
                InlineMode::Headers => CXD_INLINE_HEADERS,
                InlineMode::Full => CXD_INLINE_FULL,
            },
            tx_priority: d.tx_priority,
            flags,
            shared_ring_size: 0,
            shared_limit: 0,
        }
    }

    /// The driver's configuration; refuses unknown flags and modes (the driver checks ranges).
    fn to_driver(self) -> Result<PortConfig, Failure> {
        let known = CXD_PORT_PROMISCUOUS
            | CXD_PORT_TX_MULTI_PACKET
            | CXD_PORT_TX_TSO
            | CXD_PORT_BLUEFLAME
            | CXD_PORT_RX_CQE_COMPRESSION
            | CXD_PORT_RX_INTERRUPTS;
        if self.flags & !known != 0 {
            return Err(Failure::new(
                Error::Config,
                format!(
                    "flags {:#x} has bits no CXD_PORT_* flag names ({:#x}); clear them",
                    self.flags,
                    self.flags & !known
                ),
            ));
        }
        let inline = match self.inline_mode {
            CXD_INLINE_NONE => InlineMode::None,
            CXD_INLINE_HEADERS => InlineMode::Headers,
            CXD_INLINE_FULL => InlineMode::Full,
            other => {
                return Err(Failure::new(
                    Error::Config,
                    format!("inline_mode {other}: give CXD_INLINE_NONE, _HEADERS or _FULL"),
                ))
            }
        };
        Ok(PortConfig {
            rx_queues: self.rx_queues,
            tx_queues: self.tx_queues,
            ring_size: self.ring_size,
            pool_buffers: self.pool_buffers,
            buf_size: self.buf_size,
            mtu: self.mtu,
            cqe_every: self.cqe_every,
            inline_max: self.inline_max,
            inline,
            tx_priority: self.tx_priority,
            promiscuous: self.flags & CXD_PORT_PROMISCUOUS != 0,
            tx_multi_packet: self.flags & CXD_PORT_TX_MULTI_PACKET != 0,
            tx_tso: self.flags & CXD_PORT_TX_TSO != 0,
            blueflame: self.flags & CXD_PORT_BLUEFLAME != 0,
            rx_cqe_compression: self.flags & CXD_PORT_RX_CQE_COMPRESSION != 0,
            rx_interrupts: self.flags & CXD_PORT_RX_INTERRUPTS != 0,
            shared_rx: (self.shared_ring_size != 0).then_some(SharedRxConfig {
                ring_size: self.shared_ring_size,
                limit: self.shared_limit,
            }),
            ..PortConfig::default()
        })
    }
}

/// Fills `*config` with the defaults (one queue each way, rings of 1024, 8192 buffers of 2048
/// bytes, MTU 1500, promiscuous, headers inline, BlueFlame, CQE compression).
///
/// # Safety
///
/// `config` is NULL or points to a writable `struct cxd_port_config`.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_config_default(config: *mut cxd_port_config) -> c_int {
    guard(|| {
        write_out(config, cxd_port_config::defaults(), "config")?;
        Ok(0)
    })
}

/// Brings the function up and starts a port on it with `*config`: its pool, queues and
/// steering. The device handle then belongs to the port until `cxd_port_close`.
///
/// Returns 0 and stores the port in `*out`, or a negative `cxd_error`: `CXD_ERROR_CONFIG` with
/// the field and the range to give (checked against the device before the port takes it: the
/// device stays usable for another start), `CXD_ERROR_BUSY` when the device already runs a port
/// or RDMA, `CXD_ERROR_DEVICE` when bring-up or the port's creation failed (the device is then
/// spent: close it and open it again).
///
/// # Safety
///
/// `device` is NULL or a handle this library returned; `config` is NULL or points to a
/// `struct cxd_port_config`; `out` is NULL or points to a writable `cxd_port *`.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_start(
    device: *mut cxd_device,
    config: *const cxd_port_config,
    out: *mut *mut cxd_port,
) -> c_int {
    guard(|| start(device, config, out, &|_| Ok(None)))
}

/// Where a port's buffers live: `Ok(None)` for memory the driver allocates, or a mapping made
/// on the brought-up device (an imported memfd or dmabuf range).
pub(crate) type PoolMemory<'a> =
    &'a dyn Fn(&Device<AnyBackend>) -> Result<Option<Arc<DmaBufMapping>>, Failure>;

/// `cxd_port_start`'s body, with the pool's memory made by `memory` once the device is up.
pub(crate) fn start(
    device: *mut cxd_device,
    config: *const cxd_port_config,
    out: *mut *mut cxd_port,
    memory: PoolMemory<'_>,
) -> Outcome {
    let device = handle::resolve(device)?;
    let mut config = read_in(config, "config")?.to_driver()?;
    if out.is_null() {
        return Err(Failure::new(Error::Null, "out is NULL; pass &port"));
    }
    let mut dev = device.exclusive(cxd_device::NAME)?;
    // Vector 0 carries the device's events; receive interrupts take one each after it.
    let vectors = if config.rx_interrupts {
        config.rx_queues.saturating_add(1)
    } else {
        1
    };
    let up = take_up(dev.get(), vectors)?;
    match memory(&up) {
        Ok(mapping) => config.pool_memory = mapping,
        Err(e) => {
            *dev.get() = DeviceState::Up(Box::new(up));
            return Err(e);
        }
    }
    // Checked before the port takes the device, so that a bad configuration leaves the
    // device as it was (Port::start keeps it whatever fails).
    if let Err(e) = config.validate(&up) {
        *dev.get() = DeviceState::Up(Box::new(up));
        return Err(e.into());
    }
    let Started { mut port, queues } = match driver::Port::start(up, config) {
        Ok(started) => started,
        Err(e) => {
            *dev.get() = DeviceState::Spent;
            return Err(e.into());
        }
    };
    drop(dev);
    let pool = port.pool().clone();
    let pool_id = NEXT_POOL.fetch_add(1, Ordering::Relaxed);
    let table = SlotTable::new(pool.capacity(), pool_id);
    // A port with a shared ring gives its receive queues through take_shared_rx.
    let (shared, rx): (_, Vec<RxSource>) = match port.take_shared_rx() {
        Some(SharedQueues { ring, rx }) => {
            (Some(ring), rx.into_iter().map(RxSource::Shared).collect())
        }
        None => (None, queues.rx.into_iter().map(RxSource::Plain).collect()),
    };
    let rqns = rx.iter().map(RxSource::rqn).collect();
    let txqs = queues
        .tx
        .into_iter()
        .map(|q| handle::open::<cxd_txq>(TxqState::new(q)))
        .collect();
    let rxqs = rx
        .into_iter()
        .map(|q| handle::open::<cxd_rxq>(RxqState::new(q, table)))
        .collect();
    let pool = handle::open::<cxd_mempool>(PoolState::new(pool, table));
    let port = handle::open::<cxd_port>(PortState {
        port,
        device,
        pool,
        txqs,
        rxqs,
        rqns,
        flows: Vec::new(),
        shared,
        shared_low: None,
    });
    write_out(out, port as *const cxd_port as *mut cxd_port, "out")?;
    Ok(0)
}

/// Stores send queue `index` (0..tx_queues) of the port in `*out`. The queue handle is the
/// port's: valid until `cxd_port_close`. Use each queue from one thread at a time.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_txq(
    port: *mut cxd_port,
    index: u16,
    out: *mut *mut cxd_txq,
) -> c_int {
    guard(|| {
        let mut port = handle::resolve(port)?.exclusive(cxd_port::NAME)?;
        let txqs = &port.get().txqs;
        let q = *txqs.get(usize::from(index)).ok_or_else(|| {
            Failure::new(
                Error::InvalidArgument,
                format!(
                    "send queue {index} does not exist; the port has 0..{}",
                    txqs.len()
                ),
            )
        })?;
        write_out(out, q as *const cxd_txq as *mut cxd_txq, "out")?;
        Ok(0)
    })
}

/// Stores receive queue `index` (0..rx_queues) of the port in `*out`, as `cxd_port_txq`.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_rxq(
    port: *mut cxd_port,
    index: u16,
    out: *mut *mut cxd_rxq,
) -> c_int {
    guard(|| {
        let mut port = handle::resolve(port)?.exclusive(cxd_port::NAME)?;
        let rxqs = &port.get().rxqs;
        let q = *rxqs.get(usize::from(index)).ok_or_else(|| {
            Failure::new(
                Error::InvalidArgument,
                format!(
                    "receive queue {index} does not exist; the port has 0..{}",
                    rxqs.len()
                ),
            )
        })?;
        write_out(out, q as *const cxd_rxq as *mut cxd_rxq, "out")?;
        Ok(0)
    })
}

/// Stores the port's buffer pool in `*out`: the pool its receive queues fill from and that
/// `cxd_mbuf_alloc` takes send buffers from. Valid until `cxd_port_close`.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_mempool(
    port: *mut cxd_port,
    out: *mut *mut cxd_mempool,
) -> c_int {
    guard(|| {
        let mut port = handle::resolve(port)?.exclusive(cxd_port::NAME)?;
        let pool = port.get().pool;
        write_out(out, pool as *const cxd_mempool as *mut cxd_mempool, "out")?;
        Ok(0)
    })
}

/// Stores the port's statistics in `*out` (reads the device's missed-frame counter: a
/// command, so not for every burst).
///
/// # Safety
///
/// `port` is NULL or a handle this library returned; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_stats_get(
    port: *mut cxd_port,
    out: *mut cxd_port_stats,
) -> c_int {
    guard(|| {
        let mut port = handle::resolve(port)?.exclusive(cxd_port::NAME)?;
        let s = port.get().port.stats()?;
        let stats = cxd_port_stats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        };
        write_out(out, stats, "out")?;
        Ok(0)
    })
}

/// Stops the port and tears its function down. Its queue and pool handles close with it;
/// mbufs the program still holds stay valid until it frees them (their memory is kept until
/// then). Refused with `CXD_ERROR_BUSY`, with nothing closed, while another call uses the port,
/// one of its queues or its pool. The device handle is then spent: `cxd_device_close` it.
///
/// # Safety
///
/// `port` is NULL or a handle this library returned.
#[no_mangle]
pub unsafe extern "C" fn cxd_port_close(port: *mut cxd_port) -> c_int {
    guard(|| {
        let port = handle::resolve(port)?.exclusive(cxd_port::NAME)?;
        let mut port = port;
        // Every handle the port gave out, taken before anything closes.
        let state = port.get();
        let mut txqs = Vec::with_capacity(state.txqs.len());
        for q in &state.txqs {
            txqs.push(q.handle().exclusive(cxd_txq::NAME)?);
        }
        let mut rxqs = Vec::with_capacity(state.rxqs.len());
        for q in &state.rxqs {
            rxqs.push(q.handle().exclusive(cxd_rxq::NAME)?);
        }
        let pool = state.pool.handle().exclusive(cxd_mempool::NAME)?;
        let flows = flow::take_all(&state.flows)?;
        let mut device = state.device.exclusive(cxd_device::NAME)?;
        txqs.into_iter().for_each(|q| drop(q.close()));
        rxqs.into_iter().for_each(|q| drop(q.close()));
        drop(pool.close());
        // Their rules go with the port's steering; the handles only close.
        for f in flows {
            let _rule = f.close();
        }
        *device.get() = DeviceState::Spent;
        let Some(state) = port.close() else {
            return Err(Failure::new(Error::Closed, "the cxd_port was closed"));
        };
        // The ring's handle goes before the port that destroys the ring.
        drop(state.shared);
        let report = state.port.close().and_then(Device::teardown);
        report.map(|_| 0).map_err(Failure::from)
    })
}
