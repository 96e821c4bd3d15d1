//! What a port is started with, and its checks against the device's capabilities.

use crate::backend::Backend;
use crate::control::{Device, KeyAccess};
use crate::error::DriverError;
use crate::rx::SharedRxConfig;
use crate::tx::InlineMode;
use std::sync::Arc;

/// The key the port hashes with unless told otherwise (the widely published default Toeplitz
/// key).
pub const DEFAULT_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// How a port is set up.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Receive queues (1..=64).
    pub rx_queues: u16,
    /// Send queues (1..=64).
    pub tx_queues: u16,
    /// Entries per ring (a power of two, 64..=32768).
    pub ring_size: u32,
    /// Largest IP packet in bytes (68..=9978 less headers; default 1500).
    pub mtu: u16,
    /// Receive every frame, or only the port's MAC, broadcast and multicast.
    pub promiscuous: bool,
    /// How much of each packet a send WQE carries inline.
    pub inline: InlineMode,
    /// Largest packet sent fully inline in `Full` mode, in bytes (18..=900).
    pub inline_max: u16,
    /// A send completion is requested every this many packets (1..=ring size; default 32).
    pub cqe_every: u16,
    /// Send runs of two or more packets of a burst in enhanced multi-packet WQEs, where the
    /// device offers them (`enhanced_multi_pkt_send_wqe`) and needs no headers inline: one
    /// control and Ethernet segment per run, then 16 bytes per packet (a pointer to it), or, in
    /// `Full` mode, the packet itself inline when within `inline_max`. A run takes consecutive
    /// single-segment packets with the same checksum requests and no VLAN tag to insert; the
    /// others, and a lone packet, go in a WQE of their own as before. Packets of a run carry
    /// no headers inline, whatever `inline` says. Default off.
    pub tx_multi_packet: bool,
    /// Receive into striding (multi-packet) receive queues, where the device offers them
    /// (`striding_rq`): each receive WQE posts one buffer of many strides from a pool of its
    /// own, packets fill it one after another, and each received [`crate::Mbuf`] points into
    /// it (no copy); a buffer is reposted once every packet in it is dropped. One WQE serves
    /// hundreds of small packets, so receiving posts and the device reads far fewer WQEs.
    /// Completions are compressed in the checksum and stride index format, whose mini-CQEs
    /// carry the stride index instead of the RSS hash, as DPDK's mlx5 driver does with MPRQ;
    /// a device without it (`mini_cqe_resp_stride_index`) gets them uncompressed. Not with
    /// `shared_rx` or `pool_memory`. `None` (default): one pool buffer per packet.
    pub rx_striding: Option<crate::RxStriding>,
    /// Buffers in the receive pool (at least twice the receive rings' total).
    pub pool_buffers: u32,
    /// Buffer size in bytes (a multiple of 64; must hold an MTU-sized frame plus headroom).
    pub buf_size: u32,
    /// RSS hash key.
    pub rss_key: [u8; 40],
    /// Copy a lone WQE into the BlueFlame register so the device need not fetch it.
    pub blueflame: bool,
    /// Give each receive queue a completion interrupt (its own EQ on MSI-X vector `1 + index`;
    /// needs `Options::msix_vectors` ≥ `rx_queues + 1`), so idle receivers can sleep.
    pub rx_interrupts: bool,
    /// Draw every receive queue's buffers from one shared ring instead of a ring per queue;
    /// the queues then come from [`crate::Port::take_shared_rx`].
    pub shared_rx: Option<SharedRxConfig>,
    /// Steer UDP/IPv4 frames to destination port `base + i` straight to receive queue `i`
    /// (ahead of RSS; other frames are hashed as usual). `None`: RSS only.
    pub udp_port_queues: Option<u16>,
    /// Carve the port's buffers from this imported dmabuf range (GPU memory, a udmabuf...)
    /// instead of allocating them: received packets land in the exporter's memory and sends
    /// gather from it. The pool then holds `len / buf_size` buffers and `pool_buffers` is
    /// ignored. `None`: the driver allocates (hugepages when it can).
    pub pool_memory: Option<Arc<cxdirect_dma::DmaBufMapping>>,
    /// Ask the device to compress receive completions (CQE compression: one title CQE and
    /// arrays of 8-byte mini-CQEs for runs of similar completions, so a burst of 32 costs 5
    /// CQE lines instead of 32), when it supports it (`cqe_compression`). Default on, as in
    /// DPDK's mlx5 driver. Queues of a shared receive ring do not use it.
    pub rx_cqe_compression: bool,
    /// Let send queues take packets asking for TCP segmentation offload
    /// ([`crate::OffloadFlags::tx_tso_mss`], as DPDK's `RTE_ETH_TX_OFFLOAD_TCP_TSO`): each
    /// such packet goes in one LSO WQE and the device cuts it into MSS-sized frames. The port
    /// does not start on a device that reports no LSO (`max_lso_cap` 0). Without it a TSO
    /// packet is refused. Default off.
    pub tx_tso: bool,
    /// The Ethernet priority (0 to 7) of every packet the port's send queues send: their
    /// TIS's `prio` (bits 3:1, as mlx5e writes `tc << 1` for traffic class `tc`). The port
    /// sends them in the traffic class that priority is in, within that class's rate limit
    /// ([`Device::set_priority_class`], [`Device::set_class_rate_limit`]). Default 0.
    pub tx_priority: u8,
    /// What the pool's memory key lets the device do (default read and write).
    /// [`KeyAccess::READ_ONLY`] suits memory the NIC must never write (send-only GPU buffers):
    /// receives into it then complete with a local protection error.
    pub pool_access: KeyAccess,
}

impl Default for PortConfig {
    fn default() -> Self {
        Self {
            rx_queues: 1,
            tx_queues: 1,
            ring_size: 1024,
            mtu: 1500,
            promiscuous: true,
            inline: InlineMode::Headers,
            inline_max: 256,
            cqe_every: 32,
            tx_multi_packet: false,
            tx_tso: false,
            rx_striding: None,
            pool_buffers: 8192,
            buf_size: 2048,
            rss_key: DEFAULT_RSS_KEY,
            blueflame: true,
            rx_interrupts: false,
            shared_rx: None,
            udp_port_queues: None,
            pool_memory: None,
            pool_access: KeyAccess::READ_WRITE,
            rx_cqe_compression: true,
            tx_priority: 0,
        }
    }
}

impl PortConfig {
    /// Checks the configuration against itself and the device's capabilities, before the
    /// device is touched: what [`crate::Port::start`] checks first. A caller that must keep
    /// its device on a bad configuration (`Port::start` takes the device whatever happens)
    /// checks here before starting.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] naming the field and the range to give;
    /// [`DriverError::Unsupported`] for features that do not combine or the device lacks.
    pub fn validate<B: Backend>(&self, dev: &Device<B>) -> Result<(), DriverError> {
        let caps = dev.caps();
        if !(1..=64).contains(&self.rx_queues) {
            return Err(DriverError::config(
                "rx_queues",
                self.rx_queues,
                "give 1..=64",
            ));
        }
        if self.tx_priority > 7 {
            return Err(DriverError::config(
                "tx_priority",
                self.tx_priority,
                "0 to 7 (an Ethernet priority)",
            ));
        }
        if !(1..=64).contains(&self.tx_queues) {
            return Err(DriverError::config(
                "tx_queues",
                self.tx_queues,
                "give 1..=64",
            ));
        }
        if !self.ring_size.is_power_of_two() || !(64..=32768).contains(&self.ring_size) {
            return Err(DriverError::config(
                "ring_size",
                self.ring_size,
                "give a power of two from 64 to 32768",
            ));
        }
        if self.ring_size.trailing_zeros() > u32::from(caps.log_max_wq_sz()) {
            return Err(DriverError::config(
                "ring_size",
                self.ring_size,
                format!(
                    "exceeds the device's 2^{}; give at most {}",
                    caps.log_max_wq_sz(),
                    1u32 << caps.log_max_wq_sz()
                ),
            ));
        }
        let frame = u32::from(self.mtu) + 18;
        if self.mtu < 68 || frame + 4 > 9982 {
            return Err(DriverError::config("mtu", self.mtu, "give 68..=9960"));
        }
        if frame + u32::from(crate::mem::HEADROOM) > self.buf_size {
            return Err(DriverError::config(
                "buf_size",
                self.buf_size,
                format!(
                    "cannot hold an MTU {} frame ({frame} bytes) plus {} bytes of headroom; give \
                     at least {}",
                    self.mtu,
                    crate::mem::HEADROOM,
                    frame + u32::from(crate::mem::HEADROOM)
                ),
            ));
        }
        let rx_buffers = match &self.shared_rx {
            Some(shared) => {
                shared.validate(caps.log_max_wq_sz())?;
                shared.ring_size
            }
            None => self.ring_size * u32::from(self.rx_queues),
        };
        let pool_buffers = match &self.pool_memory {
            Some(mapping) => {
                u32::try_from(mapping.len() / self.buf_size as usize).unwrap_or(u32::MAX - 1)
            }
            None => self.pool_buffers,
        };
        if pool_buffers < 2 * rx_buffers {
            return Err(match &self.pool_memory {
                Some(mapping) => DriverError::config(
                    "pool_memory",
                    mapping.len() as u64,
                    format!(
                        "the dmabuf range's bytes hold {pool_buffers} buffers of {} bytes, fewer \
                         than twice the receive rings ({}); give a longer range",
                        self.buf_size,
                        2 * rx_buffers
                    ),
                ),
                None => DriverError::config(
                    "pool_buffers",
                    pool_buffers,
                    format!(
                        "smaller than twice the receive rings; give at least {}",
                        2 * rx_buffers
                    ),
                ),
            });
        }
        if self.rx_interrupts && dev.msix_vectors() < usize::from(self.rx_queues) + 1 {
            return Err(DriverError::config(
                "msix_vectors",
                dev.msix_vectors() as u64,
                format!(
                    "receive interrupts for {} queues need {} MSI-X vectors: set \
                     Options::msix_vectors",
                    self.rx_queues,
                    self.rx_queues + 1
                ),
            ));
        }
        if let Some(base) = self.udp_port_queues {
            if u32::from(base) + u32::from(self.rx_queues) > 0x10000 {
                return Err(DriverError::config(
                    "udp_port_queues",
                    base,
                    format!(
                        "UDP ports {base}.. for {} queues run past 65535; give at most {}",
                        self.rx_queues,
                        0x10000 - u32::from(self.rx_queues)
                    ),
                ));
            }
        }
        if self.cqe_every == 0 || u32::from(self.cqe_every) > self.ring_size {
            return Err(DriverError::config(
                "cqe_every",
                self.cqe_every,
                format!("give 1..={} (the ring size)", self.ring_size),
            ));
        }
        if self.tx_tso && dev.eth_caps().max_lso_cap() == 0 {
            return Err(DriverError::Unsupported {
                what: "TCP segmentation offload (tx_tso)",
                why: "the device reports max_lso_cap 0; start the port without tx_tso",
            });
        }
        if !(18..=900).contains(&self.inline_max) {
            return Err(DriverError::config(
                "inline_max",
                self.inline_max,
                "give 18..=900 bytes",
            ));
        }
        if let Some(striding) = &self.rx_striding {
            striding.validate(self.rx_queues, caps.log_max_cq_sz())?;
            if self.shared_rx.is_some() || self.pool_memory.is_some() {
                return Err(DriverError::Unsupported {
                    what: "rx_striding combined with shared_rx or pool_memory",
                    why: "striding queues post buffers of their own pool, in memory the driver \
                          allocates",
                });
            }
        }
        Ok(())
    }
}
