//! An Ethernet port on a brought-up function: the objects behind it (TIS, SQs and RQs with
//! their CQs, TIRs over an RQ table with Toeplitz RSS, NIC receive steering, vport MTU, port up)
//! created in order, the queue handles given to the application, and teardown in reverse order.

use crate::backend::Backend;
use crate::cmd::input;
use crate::device::Device;
use crate::error::DriverError;
use crate::inflight::InFlight;
use crate::mempool::Mempool;
use crate::mkey::{KeyAccess, MemoryKey};
use crate::port_shared::SharedRestart;
use crate::qcounter::QCounterSet;
use crate::queue::{CqRing, InlineMode, Quarantine, RxQueue, TxQueue, EMPTY_SLOT};
use crate::rxirq::CompletionInterrupt;
use crate::shared::{SharedRing, SharedRxConfig, SharedRxQueue, SharedRxRing};
use crate::stats::{PortStats, QueueXstats, StatsHandle};
use crate::striding::StridingRx;
use cxdirect_dma::{DmaRegion, PageKind};
use cxdirect_hw::caps::wqe_inline_mode;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cq::CreateCqIn;
use cxdirect_hw::cqe::mini_cqe_res_format;
use cxdirect_hw::flow::{self, CreateFlowGroupIn, CreateFlowTableIn, SetFteIn};
use cxdirect_hw::reg::{self, PmtuReg};
use cxdirect_hw::tir::{self, CreateRqtIn, CreateTirIn, CreateTisIn};
use cxdirect_hw::vport::ModifyNicVportContextIn;
use cxdirect_hw::wq::{CreateRqIn, CreateSqIn, RqState, Wq, WqType};
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
    /// Completions are compressed in the checksum format, whose mini-CQEs carry the stride
    /// index instead of the RSS hash, as DPDK's mlx5 driver does with MPRQ. Not with
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
    /// the queues then come from [`Port::take_shared_rx`].
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
        }
    }
}

/// The queue handles a started port gives the application: send queues, then receive queues
/// (none when the port runs a shared receive ring: see [`Port::take_shared_rx`]).
pub type Queues<B> = (Vec<TxQueue<B>>, Vec<RxQueue<B>>);

/// A shared receive ring's handles: the ring (to refill) and the queues drawing from it.
pub type SharedQueues<B> = (SharedRxRing<B>, Vec<SharedRxQueue<B>>);

/// The objects behind a running port, destroyed in reverse order by [`Port::close`].
pub struct Port<B: Backend> {
    pub(crate) dev: Device<B>,
    pub(crate) pool: Mempool,
    pub(crate) pool_key: Option<MemoryKey>,
    /// The striding receive queues' pool and its key (with [`PortConfig::rx_striding`] on a
    /// device that offers them).
    pub(crate) stride_pool: Option<Mempool>,
    stride_pool_key: Option<MemoryKey>,
    tis: u32,
    pub(crate) sqs: Vec<u32>,
    pub(crate) rqs: Vec<u32>,
    pub(crate) cqs: Vec<u32>,
    /// This port's CQs the device reported in error, until their queues are recovered.
    pub(crate) failed_cqs: Vec<u32>,
    /// Set when the device reported the shared ring broken (SRQ catastrophic error), until
    /// [`Port::restart_shared_ring`] creates it again.
    pub(crate) shared_failed: bool,
    /// How far a [`Port::restart_shared_ring`] that failed partway had got (`None` when no
    /// restart is unfinished): the next call resumes there.
    pub(crate) shared_restart: Option<SharedRestart>,
    uars: Vec<u32>,
    rqt: Option<u32>,
    tirs: Vec<u32>,
    tables: Vec<u32>,
    groups: Vec<(u32, u32)>,
    entries: Vec<(u32, u32)>,
    pub(crate) q_counter: Option<QCounterSet>,
    tx_stats: Vec<StatsHandle>,
    pub(crate) rx_stats: Vec<StatsHandle>,
    pub(crate) quarantine: Quarantine,
    /// Completion EQs of receive queues in interrupt mode.
    pub(crate) eqs: Vec<u32>,
    /// The shared receive ring, kept until its RMP is destroyed.
    pub(crate) shared: Option<Arc<SharedRing>>,
    /// The shared ring's handles, until the application takes them.
    pub(crate) shared_handles: Option<SharedQueues<B>>,
    pub(crate) config: PortConfig,
}

/// The place in a port's RQ list of an RQ an unfinished shared-ring restart destroyed: never a
/// queue number, which is 24 bits wide (0 included).
pub(crate) const NO_RQ: u32 = u32::MAX;

pub(crate) fn out_u32(out: &[u8]) -> u32 {
    u32::from_be_bytes([out[8], out[9], out[10], out[11]]) & 0x00ff_ffff
}

pub(crate) fn invalid(msg: impl Into<String>) -> DriverError {
    DriverError::Invalid(msg.into())
}

impl PortConfig {
    /// Checks the configuration against itself and the device's capabilities, before the
    /// device is touched.
    fn validate<B: Backend>(&self, dev: &Device<B>) -> Result<(), DriverError> {
        let caps = dev.caps();
        if !(1..=64).contains(&self.rx_queues) || !(1..=64).contains(&self.tx_queues) {
            return Err(invalid("rx_queues and tx_queues must be 1..=64"));
        }
        if !self.ring_size.is_power_of_two() || !(64..=32768).contains(&self.ring_size) {
            return Err(invalid(format!(
                "ring size {}: give a power of two from 64 to 32768",
                self.ring_size
            )));
        }
        if self.ring_size.trailing_zeros() > u32::from(caps.log_max_wq_sz()) {
            return Err(invalid(format!(
                "ring size {} exceeds the device's 2^{}",
                self.ring_size,
                caps.log_max_wq_sz()
            )));
        }
        let frame = u32::from(self.mtu) + 18;
        if self.mtu < 68 || frame + 4 > 9982 {
            return Err(invalid(format!("MTU {}: give 68..=9960", self.mtu)));
        }
        if frame + u32::from(crate::mempool::HEADROOM) > self.buf_size {
            return Err(invalid(format!(
                "buffer size {} cannot hold an MTU {} frame ({frame} bytes) plus {} bytes of headroom",
                self.buf_size,
                self.mtu,
                crate::mempool::HEADROOM
            )));
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
            let source = if self.pool_memory.is_some() {
                "the dmabuf range holds a pool of"
            } else {
                "pool of"
            };
            return Err(invalid(format!(
                "{source} {pool_buffers} buffers is smaller than twice the receive rings ({})",
                2 * rx_buffers
            )));
        }
        if self.rx_interrupts && dev.msix_vectors() < usize::from(self.rx_queues) + 1 {
            return Err(invalid(format!(
                "receive interrupts for {} queues need {} MSI-X vectors, {} are enabled: set \
                 Options::msix_vectors",
                self.rx_queues,
                self.rx_queues + 1,
                dev.msix_vectors()
            )));
        }
        if let Some(base) = self.udp_port_queues {
            if u32::from(base) + u32::from(self.rx_queues) > 0x10000 {
                return Err(invalid(format!(
                    "UDP ports {base}.. for {} queues run past 65535",
                    self.rx_queues
                )));
            }
        }
        if self.cqe_every == 0 || u32::from(self.cqe_every) > self.ring_size {
            return Err(invalid("cqe_every must be 1..=ring size"));
        }
        if !(18..=900).contains(&self.inline_max) {
            return Err(invalid("inline_max must be 18..=900 bytes"));
        }
        if let Some(striding) = &self.rx_striding {
            striding.validate(self.rx_queues, caps.log_max_cq_sz())?;
            if self.shared_rx.is_some() || self.pool_memory.is_some() {
                return Err(invalid(
                    "rx_striding cannot be combined with shared_rx or pool_memory: striding \
                     queues post buffers of their own pool, in memory the driver allocates",
                ));
            }
        }
        Ok(())
    }
}

impl<B: Backend> Port<B> {
    /// Creates the port's objects and queues on a brought-up device.
    pub fn start(dev: Device<B>, config: PortConfig) -> Result<(Self, Queues<B>), DriverError> {
        config.validate(&dev)?;
        let pool = match &config.pool_memory {
            Some(mapping) => Mempool::from_dmabuf(Arc::clone(mapping), config.buf_size)?,
            None => {
                let (iommu, iovas) = dev.dma();
                Mempool::new(iommu, &iovas, config.pool_buffers, config.buf_size)?
            }
        };
        let stride_pool = match config.rx_striding {
            Some(striding) if dev.caps().striding_rq() => {
                let (iommu, iovas) = dev.dma();
                Some(Mempool::new_shared(
                    iommu,
                    &iovas,
                    striding.buffers,
                    striding.buffer_bytes(),
                )?)
            }
            _ => None,
        };
        let mut port = Port {
            dev,
            pool,
            pool_key: None,
            stride_pool,
            stride_pool_key: None,
            tis: 0,
            sqs: Vec::new(),
            rqs: Vec::new(),
            cqs: Vec::new(),
            failed_cqs: Vec::new(),
            shared_failed: false,
            shared_restart: None,
            uars: Vec::new(),
            rqt: None,
            tirs: Vec::new(),
            tables: Vec::new(),
            groups: Vec::new(),
            entries: Vec::new(),
            q_counter: None,
            tx_stats: Vec::new(),
            rx_stats: Vec::new(),
            quarantine: Default::default(),
            eqs: Vec::new(),
            shared: None,
            shared_handles: None,
            config,
        };
        match port.build() {
            Ok(queues) => Ok((port, queues)),
            Err(e) => {
                // Undo what was created; the device keeps working.
                let _ = port.destroy_objects();
                Err(e)
            }
        }
    }

    fn build(&mut self) -> Result<Queues<B>, DriverError> {
        self.register_pool()?;
        if let Some(pool) = &self.stride_pool {
            let pages = pool.shared().memory().pages();
            let key = MemoryKey::register_pages(&mut self.dev, &pages, KeyAccess::READ_WRITE)?;
            pool.shared()
                .lkey
                .store(key.lkey(), std::sync::atomic::Ordering::Relaxed);
            self.stride_pool_key = Some(key);
        }
        self.set_mtu()?;
        let (_, pd, td) = self.dev.resources();
        let mut cmd = input(Opcode::CreateTis, 0, CreateTisIn::<&[u8]>::SIZE);
        CreateTisIn::new(&mut cmd[..])
            .map(|mut c| {
                c.ctx_mut().set_transport_domain(td);
            })
            .ok();
        self.tis = out_u32(&self.dev.exec(&cmd, 16)?);
        let mut tx = Vec::new();
        for _ in 0..self.config.tx_queues {
            tx.push(self.create_tx(pd)?);
        }
        self.q_counter = QCounterSet::alloc(&mut self.dev)?;
        let mut rx = Vec::new();
        match self.config.shared_rx {
            Some(shared) => self.create_shared_rx(pd, shared)?,
            None => {
                for index in 0..self.config.rx_queues {
                    rx.push(self.create_rx(pd, index)?);
                }
            }
        }
        self.create_steering(td)?;
        self.dev.set_port_admin(true)?;
        Ok((tx, rx))
    }

    /// CREATE_MKEY in MTT mode over the pool's memory (its dmabuf range, when it has one).
    pub(crate) fn register_pool(&mut self) -> Result<(), DriverError> {
        let key = match self.pool.dmabuf() {
            Some(mapping) => {
                let mapping = Arc::clone(mapping);
                MemoryKey::register(&mut self.dev, &mapping, self.config.pool_access)?
            }
            None => {
                let pages = self.pool.shared().memory().pages();
                MemoryKey::register_pages(&mut self.dev, &pages, self.config.pool_access)?
            }
        };
        self.pool
            .shared()
            .lkey
            .store(key.lkey(), std::sync::atomic::Ordering::Relaxed);
        self.pool_key = Some(key);
        Ok(())
    }

    fn set_mtu(&mut self) -> Result<(), DriverError> {
        let hw_mtu = self.config.mtu + 22;
        let mut data = [0u8; 16];
        PmtuReg::new(&mut data[..])
            .map(|mut r| {
                r.set_local_port(1).set_admin_mtu(hw_mtu);
            })
            .ok();
        self.dev.access_reg(reg::REG_PMTU, true, &data)?;
        let mut cmd = input(
            Opcode::ModifyNicVportContext,
            0,
            ModifyNicVportContextIn::<&[u8]>::SIZE,
        );
        ModifyNicVportContextIn::new(&mut cmd[..])
            .map(|mut c| {
                c.field_select_mut().set_mtu(true);
                c.nic_vport_context_mut().set_mtu(hw_mtu);
            })
            .ok();
        self.dev.exec(&cmd, 16)?;
        Ok(())
    }

    pub(crate) fn dma(&self, len: usize) -> Result<DmaRegion, DriverError> {
        let (iommu, iovas) = self.dev.dma();
        Ok(DmaRegion::new(iommu, &iovas, len, PageKind::Auto)?)
    }

    /// A completion EQ on vector `1 + index` for receive queue `index` when the port runs
    /// receive interrupts: its number (for the queue's CQ) and the interrupt. Without receive
    /// interrupts: EQ 0 and none (such CQs are never armed, so they raise no events).
    pub(crate) fn rx_interrupt(
        &mut self,
        index: u16,
        uar: u32,
    ) -> Result<(u32, Option<CompletionInterrupt<B>>), DriverError> {
        if !self.config.rx_interrupts {
            return Ok((0, None));
        }
        let vector = index + 1;
        let eq = self.dev.create_eq(6, 0, vector)?;
        self.eqs.push(eq.eqn);
        let irq = self
            .dev
            .interrupt(vector)?
            .ok_or_else(|| invalid(format!("MSI-X vector {vector} is not enabled")))?;
        let irq = CompletionInterrupt::new(self.dev.backend_arc().clone(), eq, irq, uar);
        Ok((irq.eqn(), Some(irq)))
    }

    /// CREATE_CQ of `entries` CQEs on `uar`, reporting to EQ `eqn`; with CQE compression
    /// when `compress` and the device supports it, in the hash mini-CQE format, or in the
    /// checksum format (carrying stride indexes) when `striding`.
    pub(crate) fn create_cq(
        &mut self,
        entries: u32,
        uar: u32,
        eqn: u32,
        compress: bool,
        striding: bool,
    ) -> Result<CqRing, DriverError> {
        let compress = compress && self.dev.caps().cqe_compression();
        let log = entries.trailing_zeros() as u8;
        let region = self.dma(64 * entries as usize)?;
        for i in 0..entries as usize {
            region.write(i * 64 + 63, &[cxdirect_hw::cqe::CQE_INITIAL_OP_OWN])?;
        }
        let dbr = self.dma(64)?;
        let page = region.page_size();
        let pages = region.len().div_ceil(page);
        let mut cmd = input(Opcode::CreateCq, 0, CreateCqIn::<&[u8]>::SIZE + 8 * pages);
        {
            let mut c = CreateCqIn::new(&mut cmd[..]).map_err(|_| invalid("CQ input"))?;
            c.cq_context_mut()
                .set_log_cq_size(log)
                .set_uar_page(uar)
                .set_c_eqn(eqn as u8)
                .set_log_page_size((page.trailing_zeros() - 12) as u8)
                .set_dbr_addr(dbr.iova())
                .set_cqe_comp_en(compress)
                .set_mini_cqe_res_format(if striding {
                    mini_cqe_res_format::CSUM
                } else {
                    mini_cqe_res_format::HASH
                });
            for i in 0..pages {
                let _ = c.set_pas(i, region.iova() + (i * page) as u64);
            }
        }
        let cqn = out_u32(&self.dev.exec(&cmd, 16)?);
        self.cqs.push(cqn);
        Ok(CqRing::new(region, dbr, log, cqn, compress))
    }

    /// CREATE_SQ over `ring` (2^`log` WQEBBs, doorbell record `dbr`, doorbells on `uar`)
    /// completing on `cqn`, then RST→RDY; the SQ number is remembered in `sqs`.
    pub(crate) fn create_sq(
        &mut self,
        pd: u32,
        ring: &DmaRegion,
        dbr: &DmaRegion,
        uar: u32,
        cqn: u32,
        log: u8,
    ) -> Result<u32, DriverError> {
        let page = ring.page_size();
        let pages = ring.len().div_ceil(page);
        let mut cmd = input(Opcode::CreateSq, 0, CreateSqIn::<&[u8]>::SIZE + 8 * pages);
        {
            let mut c = CreateSqIn::new(&mut cmd[..]).map_err(|_| invalid("SQ input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_cqn(cqn)
                .set_tis_lst_sz(1)
                .set_tis_num_0(self.tis)
                .set_flush_in_error_en(true)
                .set_allow_multi_pkt_send_wqe(self.multi_packet_send());
            ctx.wq_mut()
                .set_wq_type(1)
                .set_pd(pd)
                .set_uar_page(uar)
                .set_dbr_addr(dbr.iova())
                .set_log_wq_stride(6)
                .set_log_wq_pg_sz((page.trailing_zeros() - 12) as u8)
                .set_log_wq_sz(log);
            for i in 0..pages {
                let _ = c.set_pas(i, ring.iova() + (i * page) as u64);
            }
        }
        let sqn = out_u32(&self.dev.exec(&cmd, 16)?);
        self.sqs.push(sqn);
        self.modify_sq(sqn, RqState::Rst, RqState::Rdy)?;
        Ok(sqn)
    }

    /// Whether send queues use enhanced multi-packet WQEs: asked for, offered by the device,
    /// and possible without inlined headers.
    fn multi_packet_send(&self) -> bool {
        let caps = self.dev.eth_caps();
        self.config.tx_multi_packet
            && caps.enhanced_multi_pkt_send_wqe()
            && caps.wqe_inline_mode() == wqe_inline_mode::NOT_REQUIRED
    }

    fn create_tx(&mut self, pd: u32) -> Result<TxQueue<B>, DriverError> {
        let uar = out_u32(&self.dev.exec(&input(Opcode::AllocUar, 0, 16), 16)?);
        self.uars.push(uar);
        let entries = self.config.ring_size;
        let cq = self.create_cq(entries, uar, 0, false, false)?;
        let ring = self.dma(64 * entries as usize)?;
        let dbr = self.dma(64)?;
        let log = entries.trailing_zeros() as u8;
        let sqn = self.create_sq(pd, &ring, &dbr, uar, cq.cqn, log)?;
        Ok(TxQueue {
            backend: self.dev.backend_arc().clone(),
            ring,
            dbr,
            cq,
            sqn,
            log_size: log,
            ring_mask: (entries - 1) as u16,
            uar,
            pi: 0,
            ci: 0,
            inflight: InFlight::new(entries as usize),
            bf_half: false,
            blueflame: self.config.blueflame,
            inline: self.config.inline,
            inline_max: usize::from(self.config.inline_max),
            multi_packet: self.multi_packet_send(),
            cqe_every: self.config.cqe_every,
            since_cqe: 0,
            max_frame: usize::from(self.config.mtu) + 18,
            stats: Default::default(),
            published: Self::register_stats(&mut self.tx_stats),
            quarantine: self.quarantine.clone(),
            in_error: false,
            rebuild: Default::default(),
            scratch: Some(Box::default()),
        })
    }

    /// CREATE_RQ (cyclic, its own ring of 2^`log` entries, doorbell record `dbr`) completing
    /// on `cqn` and counted in the port's Q counter set, then RST→RDY; the RQ number is
    /// remembered in `rqs`.
    pub(crate) fn create_rq(
        &mut self,
        pd: u32,
        ring: &DmaRegion,
        dbr: &DmaRegion,
        cqn: u32,
        log: u8,
        striding: Option<&StridingRx>,
    ) -> Result<u32, DriverError> {
        let pages = ring_pages(ring);
        let mut cmd = input(
            Opcode::CreateRq,
            0,
            CreateRqIn::<&[u8]>::SIZE + 8 * pages.len(),
        );
        {
            let mut c = CreateRqIn::new(&mut cmd[..]).map_err(|_| invalid("RQ input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_cqn(cqn)
                .set_flush_in_error_en(true)
                .set_mem_rq_type(0)
                .set_counter_set_id(self.q_counter.as_ref().map_or(0, QCounterSet::id));
            fill_cyclic_wq(ctx.wq_mut(), pd, ring, dbr, log);
            if let Some(striding) = striding {
                use cxdirect_hw::wq::striding::{LOG_STRIDES_BASE, LOG_STRIDE_BYTES_BASE};
                ctx.wq_mut()
                    .set_wq_type(WqType::StridingCyclic as u8)
                    .set_log_wq_stride(crate::striding::WQE_BYTES.trailing_zeros() as u8)
                    .set_log_wqe_num_of_strides(striding.log_strides - LOG_STRIDES_BASE)
                    .set_log_wqe_stride_size(striding.log_stride_bytes - LOG_STRIDE_BYTES_BASE);
            }
            for (i, iova) in pages.enumerate() {
                let _ = c.set_pas(i, iova);
            }
        }
        let rqn = out_u32(&self.dev.exec(&cmd, 16)?);
        self.rqs.push(rqn);
        self.modify_rq(rqn, RqState::Rst, RqState::Rdy)?;
        Ok(rqn)
    }

    fn create_rx(&mut self, pd: u32, index: u16) -> Result<RxQueue<B>, DriverError> {
        let geometry = self
            .config
            .rx_striding
            .filter(|_| self.stride_pool.is_some());
        let striding = geometry.as_ref().map(StridingRx::new);
        let (entries, wqe_bytes, cq_entries, pool) = match (&geometry, &self.stride_pool) {
            (Some(g), Some(pool)) => (
                g.ring_wqes,
                crate::striding::WQE_BYTES,
                g.cq_entries(),
                pool.clone(),
            ),
            _ => (
                self.config.ring_size,
                16,
                self.config.ring_size,
                self.pool.clone(),
            ),
        };
        let (uar, _, _) = self.dev.resources();
        let (eqn, interrupt) = self.rx_interrupt(index, uar)?;
        let cq = self.create_cq(
            cq_entries,
            uar,
            eqn,
            self.config.rx_cqe_compression,
            striding.is_some(),
        )?;
        let ring = self.dma(wqe_bytes * entries as usize)?;
        let dbr = self.dma(64)?;
        let log = entries.trailing_zeros() as u8;
        let rqn = self.create_rq(pd, &ring, &dbr, cq.cqn, log, striding.as_ref())?;
        let mut rxq = RxQueue {
            _backend: self.dev.backend_arc().clone(),
            ring,
            dbr,
            cq,
            rqn,
            log_size: log,
            ring_mask: (entries - 1) as u16,
            pi: 0,
            ci: 0,
            slots: vec![EMPTY_SLOT; entries as usize],
            pool,
            stats: Default::default(),
            published: Self::register_stats(&mut self.rx_stats),
            quarantine: self.quarantine.clone(),
            interrupt,
            in_error: false,
            rebuild: Default::default(),
            rss_place: 0,
            striding,
        };
        rxq.refill();
        Ok(rxq)
    }

    /// A fresh shared stats block, remembered in `list` for [`Port::stats`].
    pub(crate) fn register_stats(list: &mut Vec<StatsHandle>) -> StatsHandle {
        let handle = StatsHandle::default();
        list.push(handle.clone());
        handle
    }

    fn create_tir(&mut self, td: u32, kind: TirKind) -> Result<u32, DriverError> {
        let mut cmd = input(Opcode::CreateTir, 0, CreateTirIn::<&[u8]>::SIZE);
        {
            let mut c = CreateTirIn::new(&mut cmd[..]).map_err(|_| invalid("TIR input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_transport_domain(td);
            match kind {
                TirKind::Direct(rqn) => {
                    ctx.set_disp_type(0).set_inline_rqn(rqn);
                }
                TirKind::Hash { rqt, l3, l4 } => {
                    ctx.set_disp_type(1)
                        .set_indirect_table(rqt)
                        .set_rx_hash_fn(2);
                    ctx.set_rx_hash_toeplitz_key_bytes(&self.config.rss_key);
                    let fields = tir::HASH_FIELD_SEL_SRC_IP
                        | tir::HASH_FIELD_SEL_DST_IP
                        | if l4.is_some() {
                            tir::HASH_FIELD_SEL_L4_SPORT | tir::HASH_FIELD_SEL_L4_DPORT
                        } else {
                            0
                        };
                    ctx.rx_hash_field_selector_outer_mut()
                        .set_l3_prot_type(l3)
                        .set_l4_prot_type(l4.unwrap_or(0))
                        .set_selected_fields(fields);
                }
            }
        }
        let tirn = out_u32(&self.dev.exec(&cmd, 16)?);
        self.tirs.push(tirn);
        Ok(tirn)
    }

    fn create_table(&mut self, level: u8, log_size: u8) -> Result<u32, DriverError> {
        let mut cmd = input(Opcode::CreateFlowTable, 0, CreateFlowTableIn::<&[u8]>::SIZE);
        CreateFlowTableIn::new(&mut cmd[..])
            .map(|mut c| {
                c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX);
                c.flow_table_context_mut()
                    .set_level(level)
                    .set_log_size(log_size);
            })
            .ok();
        let id = out_u32(&self.dev.exec(&cmd, 16)?);
        self.tables.push(id);
        Ok(id)
    }

    /// A group of one entry at `index` matching `mask`/`value` (outer headers), forwarding to
    /// `dest` (a TIR, or a flow table).
    fn add_rule(
        &mut self,
        table: u32,
        index: u32,
        fill: impl Fn(&mut cxdirect_hw::flow::FteMatchSetLyr24<&mut [u8]>, bool),
        dest: (u8, u32),
    ) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::CreateFlowGroup, 0, CreateFlowGroupIn::<&[u8]>::SIZE);
        {
            let mut c = CreateFlowGroupIn::new(&mut cmd[..]).map_err(|_| invalid("group input"))?;
            c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                .set_table_id(table)
                .set_start_flow_index(index)
                .set_end_flow_index(index)
                .set_match_criteria_enable(flow::MATCH_OUTER_HEADERS);
            fill(&mut c.match_criteria_mut().outer_headers_mut(), true);
        }
        let group = out_u32(&self.dev.exec(&cmd, 16)?);
        self.groups.push((table, group));
        let mut cmd = input(Opcode::SetFlowTableEntry, 0, SetFteIn::<&[u8]>::SIZE + 8);
        {
            let mut c = SetFteIn::new(&mut cmd[..]).map_err(|_| invalid("entry input"))?;
            c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                .set_table_id(table)
                .set_flow_index(index);
            let mut ctx = c.flow_context_all_mut();
            ctx.set_group_id(group)
                .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
                .set_destination_list_size(1);
            fill(&mut ctx.match_value_mut().outer_headers_mut(), false);
            let _ = ctx.set_destination(0, flow::dest_format_entry(dest.0, dest.1));
        }
        self.dev.exec(&cmd, 16)?;
        self.entries.push((table, index));
        Ok(())
    }

    pub(crate) fn create_steering(&mut self, td: u32) -> Result<(), DriverError> {
        let rqs = self.rqs.clone();
        // Where accepted frames go: one RQ, or RSS over all of them by traffic type.
        let classify = if rqs.len() == 1 {
            (
                flow::FLOW_DESTINATION_TYPE_TIR,
                self.create_tir(td, TirKind::Direct(rqs[0]))?,
            )
        } else {
            let mut cmd = input(
                Opcode::CreateRqt,
                0,
                CreateRqtIn::<&[u8]>::SIZE + 4 * rqs.len(),
            );
            {
                let mut c = CreateRqtIn::new(&mut cmd[..]).map_err(|_| invalid("RQT input"))?;
                c.rqt_context_mut()
                    .set_rqt_max_size(rqs.len() as u16)
                    .set_rqt_actual_size(rqs.len() as u16);
                for (i, &rqn) in rqs.iter().enumerate() {
                    let _ = c.set_rq_num(i, rqn);
                }
            }
            let rqt = out_u32(&self.dev.exec(&cmd, 16)?);
            self.rqt = Some(rqt);
            // Per-port UDP rules first (lower index matches first), then 7 RSS rules.
            let rules = rqs.len() * usize::from(self.config.udp_port_queues.is_some()) + 7;
            let table = self.create_table(1, rules.next_power_of_two().trailing_zeros() as u8)?;
            let mut index = 0;
            if let Some(base) = self.config.udp_port_queues {
                for (i, &rqn) in rqs.iter().enumerate() {
                    let tirn = self.create_tir(td, TirKind::Direct(rqn))?;
                    let port = base + i as u16;
                    self.add_rule(
                        table,
                        index,
                        move |m, mask| {
                            m.set_ip_version(if mask { 0xf } else { 4 })
                                .set_ip_protocol(if mask { 0xff } else { 17 })
                                .set_udp_dport(if mask { 0xffff } else { port });
                        },
                        (flow::FLOW_DESTINATION_TYPE_TIR, tirn),
                    )?;
                    index += 1;
                }
            }
            for (version, l3) in [(4u8, 0u8), (6, 1)] {
                for (proto, l4) in [(17u8, 1u8), (6, 0)] {
                    let tirn = self.create_tir(
                        td,
                        TirKind::Hash {
                            rqt,
                            l3,
                            l4: Some(l4),
                        },
                    )?;
                    self.add_rule(
                        table,
                        index,
                        move |m, mask| {
                            m.set_ip_version(if mask { 0xf } else { version })
                                .set_ip_protocol(if mask { 0xff } else { proto });
                        },
                        (flow::FLOW_DESTINATION_TYPE_TIR, tirn),
                    )?;
                    index += 1;
                }
                let tirn = self.create_tir(td, TirKind::Hash { rqt, l3, l4: None })?;
                self.add_rule(
                    table,
                    index,
                    move |m, mask| {
                        m.set_ip_version(if mask { 0xf } else { version });
                    },
                    (flow::FLOW_DESTINATION_TYPE_TIR, tirn),
                )?;
                index += 1;
            }
            let other = self.create_tir(td, TirKind::Direct(rqs[0]))?;
            self.add_rule(
                table,
                index,
                |_, _| {},
                (flow::FLOW_DESTINATION_TYPE_TIR, other),
            )?;
            (flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, table)
        };
        // The root: everything (promiscuous), or the port's MAC plus broadcast and multicast.
        let root = self.create_table(0, 4)?;
        if self.config.promiscuous {
            self.add_rule(root, 0, |_, _| {}, classify)?;
        } else {
            let mac = u64::from_be_bytes({
                let mut b = [0u8; 8];
                b[2..].copy_from_slice(&self.dev.info().mac);
                b
            });
            self.add_rule(
                root,
                0,
                move |m, mask| {
                    m.set_dmac(if mask { 0xffff_ffff_ffff } else { mac });
                },
                classify,
            )?;
            // The group bit of the destination MAC covers broadcast and every multicast.
            self.add_rule(
                root,
                1,
                |m, _| {
                    m.set_dmac(0x0100_0000_0000);
                },
                classify,
            )?;
        }
        let mut cmd = input(
            Opcode::SetFlowTableRoot,
            0,
            flow::SetFlowTableRootIn::<&[u8]>::SIZE,
        );
        flow::SetFlowTableRootIn::new(&mut cmd[..])
            .map(|mut c| {
                c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                    .set_table_id(root);
            })
            .ok();
        self.dev.exec(&cmd, 16)?;
        Ok(())
    }

    /// The device, for commands and events.
    pub fn device(&mut self) -> &mut Device<B> {
        &mut self.dev
    }

    /// The receive pool.
    pub fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// The striding receive queues' pool (buffers of [`crate::RxStriding::buffer_bytes`]),
    /// when the port receives into striding queues; `None` otherwise (not configured, or the
    /// device does not offer them and the queues take one buffer per packet).
    pub fn striding_pool(&self) -> Option<&Mempool> {
        self.stride_pool.as_ref()
    }

    /// Frames the device dropped since the port started because a receive ring had no posted
    /// buffer (DPDK's `imissed`), summed over every receive queue; `None` when the device has no
    /// Q counter sets. One firmware command per call: read it from the control path (at least
    /// once per 2^32 drops), not per burst.
    pub fn rx_missed(&mut self) -> Result<Option<u64>, DriverError> {
        match self.q_counter.as_mut() {
            Some(set) => set.out_of_buffer(&mut self.dev).map(Some),
            None => Ok(None),
        }
    }

    /// The port's statistics: every queue's counters as of its last burst, and `imissed` read
    /// from the device (one firmware command; call it from the control path, not per burst).
    pub fn stats(&mut self) -> Result<PortStats, DriverError> {
        let mut stats = PortStats::from_xstats(&self.xstats());
        stats.imissed = self.rx_missed()?.unwrap_or(0);
        Ok(stats)
    }

    /// Per-queue extended statistics (doorbells, BlueFlame writes, inline packets, CQEs, ...)
    /// as of each queue's last burst. Needs no device access.
    pub fn xstats(&self) -> QueueXstats {
        QueueXstats {
            tx: self.tx_stats.iter().map(|s| s.read()).collect(),
            rx: self.rx_stats.iter().map(|s| s.read()).collect(),
        }
    }

    /// The configuration the port runs with.
    pub fn config(&self) -> &PortConfig {
        &self.config
    }

    pub(crate) fn destroy(&mut self, op: Opcode, id: u32, at: usize) -> Result<(), DriverError> {
        let mut cmd = input(op, 0, 16);
        cmd[at..at + 4].copy_from_slice(&id.to_be_bytes());
        self.dev.exec(&cmd, 16).map(|_| ())
    }

    /// Destroys the port's steering (rules, groups, tables, TIRs, the RQ table): frames are
    /// dropped by the device from here on, and the RQs are named by nothing any more. An object
    /// the device refuses to destroy is kept, with what depends on it, and the next call tries
    /// it again (a recovery that failed here resumes here); the first refusal is returned.
    pub(crate) fn destroy_steering(&mut self) -> Result<(), DriverError> {
        let mut first_err = None;
        let mut refused = |r: Result<(), DriverError>| match r {
            Ok(()) => false,
            Err(e) => {
                first_err.get_or_insert(e);
                true
            }
        };
        let mut entries = std::mem::take(&mut self.entries);
        entries.retain(|&(table, index)| {
            let mut cmd = input(
                Opcode::DeleteFlowTableEntry,
                0,
                flow::DeleteFteIn::<&[u8]>::SIZE,
            );
            flow::DeleteFteIn::new(&mut cmd[..])
                .map(|mut c| {
                    c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                        .set_table_id(table)
                        .set_flow_index(index);
                })
                .ok();
            refused(self.dev.exec(&cmd, 16).map(|_| ()))
        });
        self.entries = entries;
        let mut groups = std::mem::take(&mut self.groups);
        groups.retain(|&(table, group)| {
            let mut cmd = input(
                Opcode::DestroyFlowGroup,
                0,
                flow::DestroyFlowGroupIn::<&[u8]>::SIZE,
            );
            flow::DestroyFlowGroupIn::new(&mut cmd[..])
                .map(|mut c| {
                    c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                        .set_table_id(table)
                        .set_group_id(group);
                })
                .ok();
            refused(self.dev.exec(&cmd, 16).map(|_| ()))
        });
        self.groups = groups;
        // The root first: a table that is root cannot be destroyed; tables in creation order
        // reversed so forwarded-to tables go last.
        let mut tables = std::mem::take(&mut self.tables);
        for at in (0..tables.len()).rev() {
            let mut cmd = input(
                Opcode::DestroyFlowTable,
                0,
                flow::DestroyFlowTableIn::<&[u8]>::SIZE,
            );
            flow::DestroyFlowTableIn::new(&mut cmd[..])
                .map(|mut c| {
                    c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                        .set_table_id(tables[at]);
                })
                .ok();
            if !refused(self.dev.exec(&cmd, 16).map(|_| ())) {
                tables.remove(at);
            }
        }
        self.tables = tables;
        let mut tirs = std::mem::take(&mut self.tirs);
        tirs.retain(|&tirn| refused(self.destroy(Opcode::DestroyTir, tirn, 8)));
        self.tirs = tirs;
        if let Some(rqt) = self.rqt {
            if !refused(self.destroy(Opcode::DestroyRqt, rqt, 8)) {
                self.rqt = None;
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn destroy_objects(&mut self) -> Result<(), DriverError> {
        let mut first_err = self.destroy_steering().err();
        let mut keep = |r: Result<(), DriverError>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        for rqn in std::mem::take(&mut self.rqs)
            .into_iter()
            .filter(|&n| n != NO_RQ)
        {
            keep(self.destroy(Opcode::DestroyRq, rqn, 8));
        }
        // The shared ring after its queues (the device refuses it while they exist); its
        // buffers go back to the pool only once the device can no longer write them. An
        // unfinished restart may have destroyed it already (and flushed it).
        self.shared_handles = None;
        let rmp_destroyed = self
            .shared_restart
            .take()
            .is_some_and(|r| r.rmp_destroyed());
        if let Some(ring) = self.shared.take().filter(|_| !rmp_destroyed) {
            let rmpn = ring.rmpn();
            match self.destroy(Opcode::DestroyRmp, rmpn, 8) {
                Ok(()) => {
                    ring.flush();
                    self.dev.unregister_shared_ring(rmpn);
                }
                Err(e) => keep(Err(e)),
            }
        }
        if let Some(set) = self.q_counter.take() {
            keep(set.free(&mut self.dev));
        }
        for sqn in std::mem::take(&mut self.sqs) {
            keep(self.destroy(Opcode::DestroySq, sqn, 8));
        }
        for cqn in std::mem::take(&mut self.cqs) {
            keep(self.destroy(Opcode::DestroyCq, cqn, 8));
        }
        for eqn in std::mem::take(&mut self.eqs) {
            keep(self.dev.destroy_eq(eqn));
        }
        if self.tis != 0 {
            let tis = std::mem::take(&mut self.tis);
            keep(self.destroy(Opcode::DestroyTis, tis, 8));
        }
        for uar in std::mem::take(&mut self.uars) {
            keep(self.destroy(Opcode::DeallocUar, uar, 8));
        }
        if let Some(key) = self.pool_key.take() {
            keep(key.deregister(&mut self.dev));
        }
        if let Some(key) = self.stride_pool_key.take() {
            keep(key.deregister(&mut self.dev));
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// After a function reset: the device holds none of the port's objects any more, so their
    /// numbers are forgotten, and buffers the shared ring and the quarantine held go back to
    /// the pool; returns how many.
    pub(crate) fn forget_objects_after_reset(&mut self) -> usize {
        self.entries.clear();
        self.groups.clear();
        self.tables.clear();
        self.tirs.clear();
        self.rqt = None;
        self.rqs.clear();
        self.shared_handles = None;
        let mut flushed = self.shared.take().map_or(0, |ring| ring.flush());
        self.q_counter = None;
        self.sqs.clear();
        self.cqs.clear();
        self.failed_cqs.clear();
        self.shared_failed = false;
        self.shared_restart = None;
        self.eqs.clear();
        self.tis = 0;
        self.uars.clear();
        self.pool_key = None;
        self.stride_pool_key = None;
        self.tx_stats.clear();
        self.rx_stats.clear();
        flushed += self
            .quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release();
        flushed
    }

    /// Creates the port's objects again on a re-initialised device, as [`Port::start`] did;
    /// undoes what it created when a step fails.
    pub(crate) fn rebuild(&mut self) -> Result<Queues<B>, DriverError> {
        self.build().inspect_err(|_| {
            let _ = self.destroy_objects();
        })
    }

    /// Stops the port: destroys steering, queues, CQs, the TIS and the pool's memory key, in
    /// that order, then releases buffers queue handles left behind. Queue handles still held
    /// keep their rings until dropped (the device no longer uses them). Returns the device.
    pub fn close(mut self) -> Result<Device<B>, DriverError> {
        let result = self.destroy_objects();
        // Only now may buffers the device could have touched go back to the pool.
        self.quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release();
        result?;
        Ok(self.dev)
    }
}

#[derive(Clone, Copy)]
enum TirKind {
    Direct(u32),
    Hash { rqt: u32, l3: u8, l4: Option<u8> },
}

/// The IOVA of each page of a work queue's ring, in order (the `pas` list of CREATE_RQ and
/// CREATE_RMP).
pub(crate) fn ring_pages(ring: &DmaRegion) -> impl ExactSizeIterator<Item = u64> + '_ {
    let page = ring.page_size();
    (0..ring.len().div_ceil(page)).map(move |i| ring.iova() + (i * page) as u64)
}

/// The work queue fields a cyclic RQ and an RMP share: 16-byte WQEs, `2^log` of them in
/// `ring`'s pages, doorbell record `dbr`, protection domain `pd`.
pub(crate) fn fill_cyclic_wq(
    mut wq: Wq<&mut [u8]>,
    pd: u32,
    ring: &DmaRegion,
    dbr: &DmaRegion,
    log: u8,
) {
    wq.set_wq_type(1)
        .set_pd(pd)
        .set_dbr_addr(dbr.iova())
        .set_log_wq_stride(4)
        .set_log_wq_pg_sz((ring.page_size().trailing_zeros() - 12) as u8)
        .set_log_wq_sz(log);
}
