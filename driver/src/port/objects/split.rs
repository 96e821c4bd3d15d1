//! Split receive queues on a running port (headers to a host pool, payloads into a dmabuf
//! range, each under its own key), the flow rules that steer a flow to one, and taking a split
//! queue's dmabuf away from the device.

use super::recover::WorkQueue;
use super::revoke::PoolRevocation;
use super::Port;
use super::NO_RQ;
use crate::backend::Backend;
use crate::control::{KeyAccess, MemoryKey};
use crate::error::{DriverError, QueueKind};
use crate::mem::{Mempool, HEADROOM};
use crate::port::flow::{FlowMatch, FlowRule, RuleMatch};
use crate::rx::{SplitQueueParts, SplitRxQueue, SPLIT_HEADER_BYTES, SPLIT_WQE_BYTES};
use cxdirect_dma::{DmaBufMapping, DmaBufMode};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::wq::RqState;
use std::sync::Arc;
use std::time::Instant;

/// A split receive queue's shape ([`Port::create_split_rx`]).
#[derive(Debug, Clone)]
pub struct SplitRxConfig {
    /// Receive WQEs in the ring: a power of two, 2..=32768.
    pub ring_size: u32,
    /// Header buffer bytes per WQE: any length in [`SPLIT_HEADER_BYTES`] (14..=1024), such as
    /// 66 (Ethernet, IPv4 and TCP with timestamps) or 74 (a Linux SYN's headers). The frame's
    /// first `header_bytes` land in host memory, the rest in the payload buffer. A receive
    /// data segment's `byte_count` is any length: Linux's mlx5e sizes its fragments from the
    /// MTU (`mlx5e_build_rq_frags_info`), DPDK's buffer split from the application's segment
    /// lengths (`mlx5_rxq_new`); the header buffer itself stays a whole pool slot.
    pub header_bytes: u32,
    /// Header buffers in the queue's host pool: at least `ring_size` (the rest cover headers
    /// the application holds).
    pub header_buffers: u32,
    /// The dmabuf range payloads land in (memfd, udmabuf, dma-heap, or GPU memory).
    pub payload_memory: Arc<DmaBufMapping>,
    /// Bytes of one payload buffer: a multiple of 64, 64..=65536; the range is carved into as
    /// many as fit. A frame longer than `header_bytes + payload_bytes` completes in error
    /// (local length) and stops the queue.
    pub payload_bytes: u32,
}

impl SplitRxConfig {
    /// A queue of 256 WQEs with 128-byte headers and 4 KiB payload buffers in `memory`.
    pub fn new(memory: Arc<DmaBufMapping>) -> Self {
        Self {
            ring_size: 256,
            header_bytes: 128,
            header_buffers: 1024,
            payload_memory: memory,
            payload_bytes: 4096,
        }
    }

    fn validate(&self) -> Result<(), DriverError> {
        if !self.ring_size.is_power_of_two() || !(2..=32768).contains(&self.ring_size) {
            return Err(DriverError::config(
                "ring_size",
                self.ring_size,
                "give a power of two from 2 to 32768",
            ));
        }
        if !SPLIT_HEADER_BYTES.contains(&self.header_bytes) {
            return Err(DriverError::config(
                "header_bytes",
                self.header_bytes,
                "give a length from 14 to 1024 bytes",
            ));
        }
        if self.header_buffers < self.ring_size {
            return Err(DriverError::config(
                "header_buffers",
                self.header_buffers,
                "give at least ring_size buffers",
            ));
        }
        if self.payload_bytes % 64 != 0 || !(64..=65536).contains(&self.payload_bytes) {
            return Err(DriverError::config(
                "payload_bytes",
                self.payload_bytes,
                "give a multiple of 64 from 64 to 65536",
            ));
        }
        if self.payload_memory.len() < self.payload_bytes as usize {
            return Err(DriverError::BufferTooSmall {
                what: "a payload buffer in the dmabuf range",
                need: self.payload_bytes as usize,
                capacity: self.payload_memory.len(),
            });
        }
        if self.payload_memory.is_revoked() {
            return Err(cxdirect_dma::DmaBufError::Revoked {
                exporter: self.payload_memory.dmabuf().exporter().to_string(),
            }
            .into());
        }
        Ok(())
    }
}

/// What the port keeps of a split queue: its RQ and keys, destroyed when the port closes.
pub(crate) struct SplitRecord {
    rqn: u32,
    header_key: Option<MemoryKey>,
    payload_key: Option<MemoryKey>,
    payload: Arc<DmaBufMapping>,
}

impl<B: Backend> Port<B> {
    /// Creates a split receive queue (devmem-style receive): a cyclic RQ whose WQEs have two
    /// data segments, a header buffer from a new host pool and a payload buffer from
    /// `config.payload_memory`, each pool under its own memory key, completing on its own CQ.
    /// No frame reaches it until a flow rule names it ([`Port::steer`]); the port's other
    /// traffic keeps its queues. Recovery of the port's plain queues leaves it alone; a
    /// function reset ([`Port::recover`]) does not create it again.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for sizes out of range, [`DriverError::BufferTooSmall`] for a
    /// range smaller than one payload buffer, [`DriverError::DmaBuf`] for a revoked range; a
    /// command error (keys made for it are destroyed again).
    pub fn create_split_rx(
        &mut self,
        config: &SplitRxConfig,
    ) -> Result<SplitRxQueue<B>, DriverError> {
        config.validate()?;
        // A pool slot is a multiple of 64 bytes; the device writes only `header_bytes` of it.
        let buf_size = (u32::from(HEADROOM) + config.header_bytes)
            .next_multiple_of(64)
            .max(256);
        let header_pool = {
            let (iommu, iovas) = self.dev.dma();
            Mempool::new(iommu, &iovas, config.header_buffers, buf_size)?
        };
        let pages = header_pool.shared().memory().pages();
        let header_key = MemoryKey::register_pages(&mut self.dev, &pages, KeyAccess::READ_WRITE)?;
        header_pool.shared().set_lkey(header_key.lkey());
        let payload_key =
            match MemoryKey::register(&mut self.dev, &config.payload_memory, KeyAccess::READ_WRITE)
            {
                Ok(key) => key,
                Err(e) => {
                    let _ = header_key.deregister(&mut self.dev);
                    return Err(e);
                }
            };
        let payload_lkey = payload_key.lkey();
        let mut record = SplitRecord {
            rqn: u32::MAX,
            header_key: Some(header_key),
            payload_key: Some(payload_key),
            payload: Arc::clone(&config.payload_memory),
        };
        match self.create_split_objects(config, header_pool, payload_lkey, &mut record) {
            Ok(q) => {
                self.splits.push(record);
                Ok(q)
            }
            Err(e) => {
                let _ = self.destroy_split(&mut record);
                Err(e)
            }
        }
    }

    fn create_split_objects(
        &mut self,
        config: &SplitRxConfig,
        header_pool: Mempool,
        payload_lkey: u32,
        record: &mut SplitRecord,
    ) -> Result<SplitRxQueue<B>, DriverError> {
        let (uar, pd, _) = self.dev.resources();
        let cq = self.create_cq(config.ring_size, uar, 0, false, false)?;
        let ring = self.dma(SPLIT_WQE_BYTES * config.ring_size as usize)?;
        let dbr = self.dma(64)?;
        let log = config.ring_size.trailing_zeros() as u8;
        let rqn = self.create_rq_in_rst(pd, &ring, &dbr, cq.cqn(), log, |mut wq| {
            // Two 16-byte data segments per WQE.
            wq.set_log_wq_stride(SPLIT_WQE_BYTES.trailing_zeros() as u8);
        })?;
        record.rqn = rqn;
        self.modify_rq(rqn, RqState::Rst, RqState::Rdy)?;
        SplitRxQueue::new(SplitQueueParts {
            backend: self.dev.backend_arc().clone(),
            ring,
            dbr,
            log_size: log,
            cq,
            rqn,
            header_pool,
            header_bytes: config.header_bytes,
            payload: Arc::clone(&config.payload_memory),
            payload_lkey,
            payload_bytes: config.payload_bytes,
            published: Self::register_stats(&mut self.rx_stats),
            quarantine: self.quarantine.clone(),
        })
    }

    /// Destroys a split queue's RQ and keys (each only once).
    fn destroy_split(&mut self, record: &mut SplitRecord) -> Result<(), DriverError> {
        if record.rqn != u32::MAX {
            self.destroy(Opcode::DestroyRq, record.rqn, 8)?;
            record.rqn = u32::MAX;
        }
        if let Some(key) = record.payload_key.take() {
            key.deregister(&mut self.dev)?;
        }
        if let Some(key) = record.header_key.take() {
            key.deregister(&mut self.dev)?;
        }
        Ok(())
    }

    /// Destroys every split queue's RQ and keys (after the flow rules that name them); the
    /// first refusal is returned, and what was refused is tried again at the next call.
    pub(super) fn destroy_splits(&mut self) -> Result<(), DriverError> {
        let mut splits = std::mem::take(&mut self.splits);
        let mut first = Ok(());
        splits.retain_mut(|r| match self.destroy_split(r) {
            Ok(()) => false,
            Err(e) => {
                if first.is_ok() {
                    first = Err(e);
                }
                true
            }
        });
        self.splits = splits;
        first
    }

    /// Steers `flow` to the receive queue with RQ number `rqn`: one of the port's split
    /// receive queues ([`SplitRxQueue::rqn`]) or its plain ones ([`crate::RxQueue::rqn`]).
    /// The rule is an entry in the port's root flow table, matched before the port's own
    /// rules, whatever the destination MAC (as an `rte_flow` pattern without an Ethernet
    /// item). Frames of other flows keep their usual queues. Returns the rule, for
    /// [`Port::remove_flow`]. The rule survives recovery of the port's plain queues (a plain
    /// queue rebuilt after a failed CQ takes its rules along to its new RQ).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueue`] when `rqn` is none of this port's receive queues;
    /// [`DriverError::Config`] for addresses of the wrong IP version, ports or IPv6 with
    /// [`crate::FlowProtocol::Icmp`], or past [`crate::port::FLOW_RULE_LIMIT`] rules; a
    /// command error (nothing is left installed).
    pub fn steer(&mut self, flow: FlowMatch, rqn: u32) -> Result<FlowRule, DriverError> {
        self.steer_match(RuleMatch::Flow(flow), rqn)
    }

    /// Steers every untagged frame of EtherType `ethertype` (ARP: 0x0806) to the receive
    /// queue with RQ number `rqn`, as [`Port::steer`] does a flow. Steering IPv4 (0x0800) or
    /// IPv6 (0x86dd) this way takes all of it from the port's RSS.
    ///
    /// # Errors
    ///
    /// As [`Port::steer`].
    pub fn steer_ethertype(&mut self, ethertype: u16, rqn: u32) -> Result<FlowRule, DriverError> {
        self.steer_match(RuleMatch::Ethertype(ethertype), rqn)
    }

    fn steer_match(&mut self, flow: RuleMatch, rqn: u32) -> Result<FlowRule, DriverError> {
        let plain = rqn != NO_RQ && self.rqs.contains(&rqn);
        if !plain && !self.splits.iter().any(|r| r.rqn == rqn) {
            return Err(DriverError::NoSuchQueue {
                kind: QueueKind::Receive,
                number: rqn,
            });
        }
        let (_, _, td) = self.dev.resources();
        let root = self.steering.root();
        self.flows.add(&mut self.dev, flow, rqn, td, root)
    }

    /// Removes a flow rule [`Port::steer`] installed: its frames go to the port's usual queues
    /// again.
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongHandles`] for a rule of another port; a command error (what is left
    /// of the rule is destroyed when the port closes).
    pub fn remove_flow(&mut self, rule: FlowRule) -> Result<(), DriverError> {
        let root = self.steering.root();
        self.flows.remove(&mut self.dev, &rule, root)
    }

    /// True when a flow rule steers to RQ `rqn`.
    pub fn is_steered(&self, rqn: u32) -> bool {
        self.flows.steers_to(rqn)
    }

    /// Recovers a split queue that reports [`SplitRxQueue::in_error`] (an error completion,
    /// such as a frame longer than its two buffers, or a completion the driver refused): the
    /// RQ goes to RST, the completions left are taken without delivery and the posted buffers
    /// freed (tokens lent stay lent), then RDY, and the ring is refilled. Its flow rules stay.
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueue`] for a queue of another port; [`DriverError::DmaBuf`] when
    /// its payload memory was revoked; a command error (the queue then stays stopped; call
    /// again).
    pub fn recover_split_rx(
        &mut self,
        q: &mut SplitRxQueue<B>,
    ) -> Result<super::recover::Recovery, DriverError> {
        let start = Instant::now();
        let rqn = q.rqn();
        let Some(record) = self.splits.iter().find(|r| r.rqn == rqn) else {
            return Err(DriverError::NoSuchQueue {
                kind: QueueKind::Receive,
                number: rqn,
            });
        };
        if record.payload.is_revoked() {
            return Err(cxdirect_dma::DmaBufError::Revoked {
                exporter: record.payload.dmabuf().exporter().to_string(),
            }
            .into());
        }
        q.stop();
        let device_state = self.stop_wq(WorkQueue::Receive(rqn))?;
        let (drained_cqes, flushed) = q.drain_and_flush();
        self.modify_rq(rqn, RqState::Rst, RqState::Rdy)?;
        q.restart();
        Ok(super::recover::Recovery {
            flushed,
            drained_cqes,
            device_state,
            took: start.elapsed(),
            cq_recreated: false,
        })
    }

    /// Takes a split queue's payload memory away from the device (the exporter asked for it
    /// back, [`DmaBufMapping::revoke_requested`], or the application is done), in the order
    /// that keeps the device off it, as [`Port::revoke_pool`] does: the RQ is stopped (RST),
    /// the completions left are taken without delivery, the posted buffers freed, and only
    /// then the payload key destroyed and the range unmapped. The queue stays stopped
    /// ([`SplitRxQueue::in_error`]); frames of its flows are dropped by the device. Tokens
    /// still lent may be given back (nothing is posted again).
    ///
    /// # Errors
    ///
    /// [`DriverError::NoSuchQueue`] for a queue of another port;
    /// [`DriverError::DmaBuf`] for a pinned or already revoked range (nothing stopped); a
    /// command error when the RQ cannot be stopped or the key destroyed.
    pub fn revoke_split_rx(
        &mut self,
        q: &mut SplitRxQueue<B>,
    ) -> Result<PoolRevocation, DriverError> {
        let start = Instant::now();
        let rqn = q.rqn();
        let Some(at) = self.splits.iter().position(|r| r.rqn == rqn) else {
            return Err(DriverError::NoSuchQueue {
                kind: QueueKind::Receive,
                number: rqn,
            });
        };
        let mapping = Arc::clone(&self.splits[at].payload);
        if mapping.is_revoked() {
            return Err(cxdirect_dma::DmaBufError::Revoked {
                exporter: mapping.dmabuf().exporter().to_string(),
            }
            .into());
        }
        if mapping.mode() == DmaBufMode::Pinned {
            return Err(cxdirect_dma::DmaBufError::Pinned.into());
        }
        self.stop_wq(WorkQueue::Receive(rqn))?;
        q.stop();
        let (drained_cqes, flushed) = q.drain_and_flush();
        let keys = self.dev.revoke_memory(&mapping)?;
        // The payload key went with the revocation.
        self.splits[at].payload_key = None;
        Ok(PoolRevocation {
            keys,
            flushed,
            drained_cqes,
            took: start.elapsed(),
        })
    }
}
