//! An Ethernet port on a brought-up function: the objects behind it (TIS, SQs and RQs with
//! their CQs, TIRs over an RQ table with Toeplitz RSS, NIC receive steering, vport MTU, port up)
//! created in order and the queue handles given to the application. What the port does later
//! lives beside it, in its own files: the shared receive ring, recovery, pool revocation, and
//! teardown in reverse order.

use super::config::PortConfig;
use super::flow::FlowRules;
use super::restart::SharedRestart;
use super::steering::Steering;
use super::wq::{fill_cyclic_wq, ring_pages};
use crate::backend::Backend;
use crate::control::{
    create_cq_input, destroy_input, input, output_too_short, rx_mini_cqe_format, Device, KeyAccess,
    MemoryKey, QCounterSet,
};
use crate::cq::CqRing;
use crate::error::DriverError;
use crate::mem::{Mempool, Quarantine};
use crate::ring::StatsHandle;
use crate::rx::{
    CompletionInterrupt, ReceiveQueueParts, RxQueue, SharedRing, SharedRxQueue, SharedRxRing,
    StridingRx,
};
use crate::tx::{SendQueueParts, TxQueue};
use cxdirect_dma::{DmaRegion, PageKind};
use cxdirect_hw::caps::wqe_inline_mode;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cq::CreateCqOut;
use cxdirect_hw::hca::AllocUarOut;
use cxdirect_hw::reg::{self, PmtuReg};
use cxdirect_hw::tir::{CreateTisIn, CreateTisOut};
use cxdirect_hw::vport::ModifyNicVportContextIn;
use cxdirect_hw::wq::{
    CreateRqIn, CreateRqOut, CreateSqIn, CreateSqOut, EndPadMode, RqState, Wq, WqType,
};
use std::sync::Arc;

pub(super) mod recover;
pub(super) mod revoke;
mod shared;
pub(super) mod split;
mod statistics;
mod teardown;

/// A started port and the queue handles it gives the application ([`Port::start`]).
pub struct Started<B: Backend> {
    /// The port: its objects, recovery, statistics, and [`Port::close`].
    pub port: Port<B>,
    /// Its send and receive queues.
    pub queues: Queues<B>,
}

/// The queue handles a started port gives the application. Each may move to its own thread.
pub struct Queues<B: Backend> {
    /// Send queues, [`PortConfig::tx_queues`] of them.
    pub tx: Vec<TxQueue<B>>,
    /// Receive queues, [`PortConfig::rx_queues`] of them; none when the port runs a shared
    /// receive ring (see [`Port::take_shared_rx`]).
    pub rx: Vec<RxQueue<B>>,
}

/// A shared receive ring's handles ([`Port::take_shared_rx`]).
pub struct SharedQueues<B: Backend> {
    /// The ring, to refill.
    pub ring: SharedRxRing<B>,
    /// The queues drawing from it, [`PortConfig::rx_queues`] of them.
    pub rx: Vec<SharedRxQueue<B>>,
}

/// The objects behind a running port, destroyed in reverse order by [`Port::close`].
pub struct Port<B: Backend> {
    dev: Device<B>,
    pool: Mempool,
    pool_key: Option<MemoryKey>,
    /// The striding receive queues' pool and its key (with [`PortConfig::rx_striding`] on a
    /// device that offers them).
    stride_pool: Option<Mempool>,
    stride_pool_key: Option<MemoryKey>,
    tis: u32,
    sqs: Vec<u32>,
    rqs: Vec<u32>,
    cqs: Vec<u32>,
    /// This port's CQs the device reported in error, until their queues are recovered.
    failed_cqs: Vec<u32>,
    /// Set when the device reported the shared ring broken (SRQ catastrophic error), until
    /// [`Port::restart_shared_ring`] creates it again.
    shared_failed: bool,
    /// How far a [`Port::restart_shared_ring`] that failed partway had got (`None` when no
    /// restart is unfinished): the next call resumes there.
    shared_restart: Option<SharedRestart>,
    uars: Vec<u32>,
    steering: Steering,
    /// Flow rules ([`Port::steer`]), installed in the root table while steering is built.
    flows: FlowRules,
    /// Split receive queues ([`Port::create_split_rx`]): their RQs (reached only by flow
    /// rules) and memory keys.
    splits: Vec<split::SplitRecord>,
    q_counter: Option<QCounterSet>,
    tx_stats: Vec<StatsHandle>,
    rx_stats: Vec<StatsHandle>,
    quarantine: Quarantine,
    /// Completion EQs of receive queues in interrupt mode.
    eqs: Vec<u32>,
    /// The shared receive ring, kept until its RMP is destroyed.
    shared: Option<Arc<SharedRing>>,
    /// The shared ring's handles, until the application takes them.
    shared_handles: Option<SharedQueues<B>>,
    config: PortConfig,
}

/// The place in a port's RQ list of an RQ an unfinished shared-ring restart destroyed: never a
/// queue number, which is 24 bits wide (0 included).
pub(crate) const NO_RQ: u32 = u32::MAX;

impl<B: Backend> Port<B> {
    /// Creates the port's objects and queues on a brought-up device.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] when `config` does not fit itself or the device
    /// ([`DriverError::Unsupported`] for features that do not combine); the failing
    /// command's error otherwise (what was created is destroyed again; the device keeps
    /// working).
    pub fn start(dev: Device<B>, config: PortConfig) -> Result<Started<B>, DriverError> {
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
            steering: Steering::default(),
            flows: FlowRules::default(),
            splits: Vec::new(),
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
            Ok(queues) => Ok(Started { port, queues }),
            Err(e) => {
                // Undo what was created; the device keeps working.
                let _ = port.destroy_objects();
                Err(e)
            }
        }
    }

    pub(super) fn build(&mut self) -> Result<Queues<B>, DriverError> {
        self.register_pool()?;
        if let Some(pool) = &self.stride_pool {
            let pages = pool.shared().memory().pages();
            let key = MemoryKey::register_pages(&mut self.dev, &pages, KeyAccess::READ_WRITE)?;
            pool.shared().set_lkey(key.lkey());
            self.stride_pool_key = Some(key);
        }
        self.set_mtu()?;
        let (_, pd, td) = self.dev.resources();
        let mut cmd = input(Opcode::CreateTis, 0, CreateTisIn::<&[u8]>::SIZE);
        let prio = self.config.tx_priority;
        CreateTisIn::new(&mut cmd[..])
            .map(|mut c| {
                // The priority in bits 3:1, as mlx5e's `mlx5e_create_tises` writes it.
                c.ctx_mut().set_transport_domain(td).set_prio(prio << 1);
            })
            .ok();
        let out = self.dev.exec(&cmd, CreateTisOut::<&[u8]>::SIZE)?;
        self.tis = CreateTisOut::new(&out[..])
            .map_err(output_too_short)?
            .tisn();
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
        Ok(Queues { tx, rx })
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
        self.pool.shared().set_lkey(key.lkey());
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
        let irq = self.dev.interrupt(vector)?.ok_or_else(|| {
            DriverError::config(
                "msix_vectors",
                self.dev.msix_vectors() as u64,
                format!("vector {vector} is not enabled: raise Options::msix_vectors above it"),
            )
        })?;
        let irq = CompletionInterrupt::new(self.dev.backend_arc().clone(), eq, irq, uar);
        Ok((irq.eqn(), Some(irq)))
    }

    /// CREATE_CQ of `entries` CQEs on `uar`, reporting to EQ `eqn`; with CQE compression
    /// when `compress` and the device allows it for the ring ([`rx_mini_cqe_format`]).
    pub(crate) fn create_cq(
        &mut self,
        entries: u32,
        uar: u32,
        eqn: u32,
        compress: bool,
        striding: bool,
    ) -> Result<CqRing, DriverError> {
        let format = compress.then(|| rx_mini_cqe_format(&self.dev.caps(), striding));
        let format = format.flatten();
        let log = entries.trailing_zeros() as u8;
        let region = self.dma(64 * entries as usize)?;
        for i in 0..entries as usize {
            region.write(i * 64 + 63, &[cxdirect_hw::cqe::CQE_INITIAL_OP_OWN])?;
        }
        let dbr = self.dma(64)?;
        let cmd = create_cq_input(&region, dbr.iova(), log, uar, eqn as u8, format)?;
        let out = self.dev.exec(&cmd, CreateCqOut::<&[u8]>::SIZE)?;
        let cqn = CreateCqOut::new(&out[..]).map_err(output_too_short)?.cqn();
        self.cqs.push(cqn);
        CqRing::new(region, dbr, log, cqn, format.is_some())
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
            let mut c = CreateSqIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateSq, "input"))?;
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
        let out = self.dev.exec(&cmd, CreateSqOut::<&[u8]>::SIZE)?;
        let sqn = CreateSqOut::new(&out[..]).map_err(output_too_short)?.sqn();
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

    /// The largest LSO message send queues take, in bytes: `2^max_lso_cap` with
    /// [`PortConfig::tx_tso`](crate::PortConfig::tx_tso), else 0 (no TSO).
    fn max_lso(&self) -> usize {
        if !self.config.tx_tso {
            return 0;
        }
        // The field is five bits; anything past 2^30 is more than a packet can be anyway.
        1usize << self.dev.eth_caps().max_lso_cap().min(30)
    }

    fn create_tx(&mut self, pd: u32) -> Result<TxQueue<B>, DriverError> {
        let out = self
            .dev
            .exec(&input(Opcode::AllocUar, 0, 16), AllocUarOut::<&[u8]>::SIZE)?;
        let uar = AllocUarOut::new(&out[..]).map_err(output_too_short)?.uar();
        self.uars.push(uar);
        let entries = self.config.ring_size;
        let cq = self.create_cq(entries, uar, 0, false, false)?;
        let ring = self.dma(64 * entries as usize)?;
        let dbr = self.dma(64)?;
        let log = entries.trailing_zeros() as u8;
        let sqn = self.create_sq(pd, &ring, &dbr, uar, cq.cqn(), log)?;
        TxQueue::new(SendQueueParts {
            backend: self.dev.backend_arc().clone(),
            ring,
            dbr,
            log_size: log,
            cq,
            sqn,
            uar,
            blueflame: self.config.blueflame,
            inline: self.config.inline,
            inline_max: usize::from(self.config.inline_max),
            multi_packet: self.multi_packet_send(),
            cqe_every: self.config.cqe_every,
            max_frame: usize::from(self.config.mtu) + 18,
            max_lso: self.max_lso(),
            published: Self::register_stats(&mut self.tx_stats),
            quarantine: self.quarantine.clone(),
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
        let rqn = self.create_rq_in_rst(pd, ring, dbr, cqn, log, |mut wq| {
            if let Some(striding) = striding {
                use cxdirect_hw::wq::striding::{LOG_STRIDES_BASE, LOG_STRIDE_BYTES_BASE};
                wq.set_wq_type(WqType::StridingCyclic as u8)
                    .set_log_wq_stride(crate::rx::WQE_BYTES.trailing_zeros() as u8)
                    .set_log_wqe_num_of_strides(striding.log_strides - LOG_STRIDES_BASE)
                    .set_log_wqe_stride_size(striding.log_stride_bytes - LOG_STRIDE_BYTES_BASE);
            }
        })?;
        self.rqs.push(rqn);
        self.modify_rq(rqn, RqState::Rst, RqState::Rdy)?;
        Ok(rqn)
    }

    /// CREATE_RQ as [`Self::create_rq`] makes it, its work queue then changed by `shape_wq`
    /// (striding, a wider stride); returns the RQ number, the RQ still in RST and remembered
    /// nowhere yet.
    pub(crate) fn create_rq_in_rst(
        &mut self,
        pd: u32,
        ring: &DmaRegion,
        dbr: &DmaRegion,
        cqn: u32,
        log: u8,
        shape_wq: impl FnOnce(Wq<&mut [u8]>),
    ) -> Result<u32, DriverError> {
        let pages = ring_pages(ring);
        let mut cmd = input(
            Opcode::CreateRq,
            0,
            CreateRqIn::<&[u8]>::SIZE + 8 * pages.len(),
        );
        {
            let mut c = CreateRqIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateRq, "input"))?;
            let mut ctx = c.ctx_mut();
            // The RQ's user index is its CQ's number (each RQ has a CQ of its own): the
            // device writes it into every CQE of the RQ (`srqn_uidx`, cqe_version 1), where
            // the receive path checks it, as libmlx5 finds a raw packet QP by it
            // (`get_resp_ctx_v1`). The CQE's `sop_drop_qpn` holds the flow tag, not the RQN.
            // Frames arrive whole, VLAN tags in place (`vsd`, as DPDK's mlx5 PMD asks unless
            // the application turns on VLAN stripping): the receive path reports no stripped
            // tag from the CQE.
            ctx.set_cqn(cqn)
                .set_user_index(cqn)
                .set_flush_in_error_en(true)
                .set_vsd(true)
                .set_mem_rq_type(0)
                .set_counter_set_id(self.q_counter.as_ref().map_or(0, QCounterSet::id));
            fill_cyclic_wq(ctx.wq_mut(), pd, ring, dbr, log);
            // Writes of received data end on a cache line, as mlx5e asks of every RQ
            // (mlx5e_build_rq_param sets end_padding_mode ALIGN), where the buffers are whole
            // cache lines so that the padding stays inside each one.
            if self.config.buf_size % 64 == 0 {
                ctx.wq_mut().set_end_padding_mode(EndPadMode::Align as u8);
            }
            shape_wq(ctx.wq_mut());
            for (i, iova) in pages.enumerate() {
                let _ = c.set_pas(i, iova);
            }
        }
        let out = self.dev.exec(&cmd, CreateRqOut::<&[u8]>::SIZE)?;
        Ok(CreateRqOut::new(&out[..]).map_err(output_too_short)?.rqn())
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
                crate::rx::WQE_BYTES,
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
        let rqn = self.create_rq(pd, &ring, &dbr, cq.cqn(), log, striding.as_ref())?;
        RxQueue::new(ReceiveQueueParts {
            backend: self.dev.backend_arc().clone(),
            ring,
            dbr,
            log_size: log,
            cq,
            rqn,
            pool,
            published: Self::register_stats(&mut self.rx_stats),
            quarantine: self.quarantine.clone(),
            interrupt,
            striding,
        })
    }

    /// A fresh shared stats block, remembered in `list` for [`Port::stats`].
    pub(crate) fn register_stats(list: &mut Vec<StatsHandle>) -> StatsHandle {
        let handle = StatsHandle::default();
        list.push(handle.clone());
        handle
    }

    /// The device, for commands and events.
    pub fn device(&mut self) -> &mut Device<B> {
        &mut self.dev
    }

    /// The device, to read its capabilities and identity.
    pub fn device_ref(&self) -> &Device<B> {
        &self.dev
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

    /// The configuration the port runs with.
    pub fn config(&self) -> &PortConfig {
        &self.config
    }

    pub(crate) fn destroy(&mut self, op: Opcode, id: u32, at: usize) -> Result<(), DriverError> {
        self.dev.exec(&destroy_input(op, id, at), 16).map(|_| ())
    }

    /// Builds the port's steering around its RQs (see [`Steering::build`]).
    /// Flow rules go into the new root table.
    pub(super) fn create_steering(&mut self, td: u32) -> Result<(), DriverError> {
        self.steering
            .build(&mut self.dev, &self.config, &self.rqs, td)?;
        match self.steering.root() {
            Some(root) => self.flows.install_all(&mut self.dev, root, td),
            None => Ok(()),
        }
    }

    /// Destroys the port's steering (see [`Steering::destroy`]); flow rules leave the root
    /// table first and keep their TIRs.
    pub(super) fn destroy_steering(&mut self) -> Result<(), DriverError> {
        let flows = match self.steering.root() {
            Some(root) => self.flows.uninstall_all(&mut self.dev, root),
            None => Ok(()),
        };
        // A root that still holds a flow rule is refused, and tried again at the next call.
        let steering = self.steering.destroy(&mut self.dev);
        flows.and(steering)
    }
}
