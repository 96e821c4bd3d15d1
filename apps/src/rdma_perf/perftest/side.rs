//! One side facing a perftest peer on a device: its queue pairs, its buffer laid out as
//! perftest lays its own out (`alloc_ctx`, `set_up_connection`), and the loops of
//! [`super::solo`] over them.
//!
//! The buffer holds, per queue pair, a source slot (what this side WRITEs, SENDs or READs
//! into) and after all of those a target slot, whose address the keys advertise (where the
//! peer's WRITEs and SENDs land and its READs read from). Each slot is a cycle buffer or a
//! message, whichever is larger, rounded up to a cache line.

use super::session::{Agreed, Local, Measured, Role, Test};
use super::solo::{self, Cycle, Solo};
use super::wire::Keys;
use crate::rdma::served_address::ServedAddress;
use crate::rdma::verbs::{IdleHook, RdmaBuffer, RdmaPort, REMOTE_READ_WRITE};
use crate::rdma::MemoryKind;
use crate::rdma_perf::cli::Plan;
use crate::rdma_perf::engine::{Done, POLL_BATCH, RX_DEPTH, TX_DEPTH};
use crate::rdma_perf::Op;
use cxdirect::rdma::{
    ConnectParams, Endpoint, PathMtu, Payload, QpCaps, RcQueuePair, RecvRequest, RemoteAddr,
    SendOp, SendRequest, WorkCompletion,
};
use cxdirect::Backend;
use std::net::IpAddr;
use std::time::Duration;

/// Most RDMA READs a side serves or issues at once (perftest's `MAX_OUT_READ_HERMON`).
const MAX_OUT_READ: u8 = 16;
/// Most inline bytes a WQE of the driver carries.
const DRIVER_MAX_INLINE: u32 = 460;
/// Send requests a latency run's queue pair holds (one is outstanding at a time).
const LAT_SEND_DEPTH: u32 = 4;
/// perftest's RTR and RTS attributes for RC (`ctx_modify_qp_to_rtr`, `ctx_modify_qp_to_rts`):
/// ACK timeout `DEF_QP_TIME`, 7 retries, 7 RNR retries, RNR timer `MIN_RNR_TIMER`, hop limit
/// 0xff.
const ACK_TIMEOUT: u8 = 14;
const RETRIES: u8 = 7;
const RNR_TIMER: u8 = 12;
const HOP_LIMIT: u8 = 0xff;
/// Longest the peer's MAC is waited for by ARP (the neighbour table gives up after its three
/// requests, a second apart).
const ARP_PATIENCE: Duration = Duration::from_secs(5);

/// The path MTU of an `ibv_mtu` value (1 = 256 … 5 = 4096).
pub fn path_mtu(ibv_mtu: u8) -> Option<PathMtu> {
    Some(match ibv_mtu {
        1 => PathMtu::Mtu256,
        2 => PathMtu::Mtu512,
        3 => PathMtu::Mtu1024,
        4 => PathMtu::Mtu2048,
        5 => PathMtu::Mtu4096,
        _ => return None,
    })
}

/// One side on a device.
pub struct PerftestSide<B: Backend> {
    port: RdmaPort<B>,
    test: Test,
    role: Role,
    plan: Plan,
    /// The peer's MAC: given, or `None` to resolve it by ARP through `served`.
    peer_mac: Option<[u8; 6]>,
    /// The port's address, answered from a thread of its own (when the MAC is resolved).
    served: Option<ServedAddress<B>>,
    patience: Duration,
    qps: Vec<RcQueuePair<B>>,
    buffer: Option<RdmaBuffer>,
    cycle: Cycle,
    inline: u32,
    inline_bytes: Vec<u8>,
    remote: Vec<Keys>,
    wcs: [WorkCompletion; POLL_BATCH],
}

impl<B: Backend> PerftestSide<B> {
    /// Opens `backend` with `address` as its port's address (its GID) for `test` as `role`,
    /// toward a peer whose MAC is `peer_mac`; with `None` the port serves its IPv4 address
    /// (ARP and ICMP echo answered from a thread of its own, so a Linux peer resolves it
    /// whenever it asks) and resolves the peer's MAC by ARP when the keys name its GID.
    pub fn open(
        backend: B,
        address: IpAddr,
        (test, role): (Test, Role),
        plan: &Plan,
        peer_mac: Option<[u8; 6]>,
        idle: Option<IdleHook>,
    ) -> Result<Self, String> {
        let per_qp = TX_DEPTH + RX_DEPTH;
        let cq_entries = (u32::from(plan.qps) * per_qp).next_power_of_two();
        let mut port = match (peer_mac, address) {
            (None, IpAddr::V4(v4)) => RdmaPort::open_serving(backend, v4, cq_entries)?,
            (None, IpAddr::V6(_)) => {
                return Err("ARP resolves IPv4 addresses: give the peer's --peer-mac".into())
            }
            (Some(_), _) => RdmaPort::open(backend, address, cq_entries)?,
        };
        let served = match port.address.take() {
            Some(address) => match ServedAddress::start(address) {
                Ok(served) => Some(served),
                Err(e) => {
                    let _ = port.close(Vec::new(), Vec::new());
                    return Err(e);
                }
            },
            None => None,
        };
        port.set_idle(idle);
        Ok(Self {
            port,
            test,
            role,
            plan: *plan,
            peer_mac,
            served,
            patience: super::super::run::PATIENCE,
            qps: Vec::new(),
            buffer: None,
            cycle: Cycle {
                size: u64::from(plan.size),
                cycle_buffer: 0,
                cache_line: 1,
            },
            inline: plan.inline.min(DRIVER_MAX_INLINE),
            inline_bytes: vec![0; plan.size as usize],
            remote: Vec::new(),
            wcs: [WorkCompletion::default(); POLL_BATCH],
        })
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.port.roce.mac()
    }

    /// Sets the MAC the queue pairs send to.
    pub fn set_peer_mac(&mut self, mac: [u8; 6]) {
        self.peer_mac = Some(mac);
    }

    /// The MAC of the peer whose GID is `gid`: given, or resolved by ARP (and kept).
    fn peer_mac_for(&mut self, gid: &[u8; 16]) -> Result<[u8; 6], String> {
        if let Some(mac) = self.peer_mac {
            return Ok(mac);
        }
        let ip = cxdirect::cm::gid_ipv4(gid).ok_or_else(|| {
            format!(
                "the peer's GID {} is not an IPv4 address ARP resolves: give --peer-mac",
                std::net::Ipv6Addr::from(*gid)
            )
        })?;
        let served = self
            .served
            .as_ref()
            .ok_or("the peer's MAC: give --peer-mac, or serve the port's address")?;
        let mac = served.mac_of(ip, ARP_PATIENCE)?;
        self.peer_mac = Some(mac);
        Ok(mac)
    }

    /// The address's report line, when the port serves its address.
    pub fn address_report(&self) -> Option<String> {
        self.served.as_ref().map(ServedAddress::describe)
    }

    /// This side's path MTU as `ibv_mtu`.
    pub fn ibv_mtu(&self) -> u8 {
        self.port.roce.max_path_mtu() as u8
    }

    /// The lines perftest prints about the run's settings.
    pub fn settings(&self, agreed: &Agreed) -> Vec<String> {
        let mtu = path_mtu(agreed.mtu).map_or(0, PathMtu::bytes);
        let mut lines = vec![
            format!(
                " Number of qps   : {}\t\tConnection type : RC\t\tUsing SRQ : OFF",
                self.plan.qps
            ),
            format!(
                " Mtu             : {mtu}[B]\t\tInline data is used up to {} bytes message",
                self.inline
            ),
        ];
        if self.test != Test::WriteLat {
            lines.push(format!(
                " TX depth        : {TX_DEPTH}\t\tCQ Moderation   : {}",
                crate::rdma_perf::engine::CQ_MOD
            ));
        }
        lines
    }

    fn slot(&self) -> u64 {
        self.cycle.slot()
    }

    fn source(&self, qp: usize) -> u64 {
        qp as u64 * self.slot()
    }

    fn target(&self, qp: usize) -> u64 {
        (self.qps.len() + qp) as u64 * self.slot()
    }

    fn buffer(&self) -> Result<&RdmaBuffer, String> {
        self.buffer
            .as_ref()
            .ok_or_else(|| "no buffer yet".to_string())
    }

    /// READs this side serves at once: the device's limit for `ib_read_bw`, 1 otherwise, as
    /// perftest sets its `out_reads`.
    fn out_reads(&self) -> u8 {
        if self.test == Test::ReadBw {
            MAX_OUT_READ.min(1u8 << self.port.roce.log_max_dest_rd_atomic().min(7))
        } else {
            1
        }
    }

    /// Closes everything.
    pub fn close(mut self) -> Result<(), String> {
        let stopped = self.served.take().map(ServedAddress::stop).transpose();
        let address = match stopped {
            Ok(address) => address,
            Err(e) => {
                let _ = self.port.close(self.qps, self.buffer.into_iter().collect());
                return Err(e);
            }
        };
        // Its queues go back to the port, which drops them before it closes.
        self.port.address = address;
        self.port.close(self.qps, self.buffer.into_iter().collect())
    }
}

impl<B: Backend> Local for PerftestSide<B> {
    fn prepare(&mut self, agreed: &Agreed) -> Result<Vec<Keys>, String> {
        self.cycle = Cycle {
            size: u64::from(self.plan.size),
            cycle_buffer: u64::from(agreed.cycle_buffer),
            cache_line: u64::from(agreed.cache_line),
        };
        let n = usize::from(self.plan.qps);
        let len = usize::try_from(2 * n as u64 * self.slot())
            .map_err(|_| "the buffer does not fit this machine's addresses".to_string())?;
        self.buffer = Some(self.port.buffer(MemoryKind::Host, len, REMOTE_READ_WRITE)?);
        let send_server = self.test == Test::SendBw && self.role == Role::Server;
        let caps = QpCaps {
            max_send_wr: if self.test == Test::WriteLat {
                LAT_SEND_DEPTH
            } else {
                TX_DEPTH
            },
            max_recv_wr: if send_server { RX_DEPTH } else { 1 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: self.inline,
        };
        for _ in 0..n {
            let qp = self.port.queue_pair(caps)?;
            self.qps.push(qp);
        }
        let out_reads = u16::from(self.out_reads());
        let b = self.buffer()?.advertise();
        let gid = self.port.roce.gid();
        Ok((0..n)
            .map(|i| {
                let e = self.qps[i].local_endpoint();
                Keys {
                    lid: 0,
                    out_reads,
                    qpn: e.qpn,
                    psn: e.psn,
                    rkey: b.rkey,
                    vaddr: b.addr + self.target(i),
                    gid: Some(gid),
                    srqn: 0,
                }
            })
            .collect())
    }

    fn connect(&mut self, remote: &[Keys], agreed: &Agreed) -> Result<(), String> {
        if remote.len() != self.qps.len() {
            return Err(format!(
                "{} remote queue pairs for {} local ones",
                remote.len(),
                self.qps.len()
            ));
        }
        let mtu = path_mtu(agreed.mtu)
            .ok_or_else(|| format!("MTU code {} names no path MTU", agreed.mtu))?
            .min(self.port.roce.max_path_mtu());
        let max_rd = MAX_OUT_READ.min(1u8 << self.port.roce.log_max_rd_atomic().min(7));
        let dest_rd = self.out_reads();
        for (i, r) in remote.iter().enumerate() {
            let gid = r.gid.ok_or("the peer's keys carry no GID")?;
            let peer_reads = u8::try_from(r.out_reads).unwrap_or(u8::MAX);
            let params = ConnectParams {
                mtu,
                ack_timeout: ACK_TIMEOUT,
                retry_count: RETRIES,
                rnr_timer: RNR_TIMER,
                rnr_retry: RETRIES,
                // perftest takes the peer's out_reads as its initiator depth.
                max_rd_atomic: peer_reads.clamp(1, max_rd),
                max_dest_rd_atomic: dest_rd,
                hop_limit: HOP_LIMIT,
                traffic_class: 0,
                sl: 0,
            };
            let endpoint = Endpoint {
                qpn: r.qpn & 0xff_ffff,
                psn: r.psn & 0xff_ffff,
                gid,
                mac: self.peer_mac_for(&gid)?,
            };
            self.qps[i]
                .connect(&mut self.port.dev, &endpoint, params)
                .map_err(|e| format!("{}: connecting QPN {:#x}: {e}", self.port.name(), r.qpn))?;
        }
        self.remote = remote.to_vec();
        Ok(())
    }

    fn post_receives(&mut self) -> Result<(), String> {
        let (qps, iters) = (self.qps.len(), iters(&self.plan)?);
        solo::post_first_receives(self, qps, iters).map_err(|e| e.to_string())
    }

    fn measure(&mut self, _remote: &[Keys]) -> Result<Measured, String> {
        let (qps, iters) = (self.qps.len(), iters(&self.plan)?);
        let (cycle, patience, size) = (self.cycle, self.patience, u64::from(self.plan.size));
        let measured = match (self.test, self.role) {
            (Test::WriteBw, Role::Client) => {
                solo::bw_client(self, Op::Write, qps, iters, cycle, patience).map(Measured::Bw)
            }
            (Test::ReadBw, Role::Client) => {
                solo::bw_client(self, Op::Read, qps, iters, cycle, patience).map(Measured::Bw)
            }
            (Test::SendBw, Role::Client) => {
                solo::bw_client(self, Op::Send, qps, iters, cycle, patience).map(Measured::Bw)
            }
            (Test::SendBw, Role::Server) => {
                solo::send_server(self, qps, iters, size, patience).map(Measured::Bw)
            }
            (Test::WriteLat, role) => {
                solo::write_lat(self, role == Role::Server, iters, size, patience)
                    .map(Measured::Lat)
            }
            (Test::WriteBw | Test::ReadBw, Role::Server) => {
                return Err("the server of a WRITE or READ test does not run".into())
            }
        };
        measured.map_err(|e| e.to_string())
    }
}

fn iters(plan: &Plan) -> Result<u32, String> {
    u32::try_from(plan.iters).map_err(|_| "--iters: at most 4294967295".to_string())
}

impl<B: Backend> Solo for PerftestSide<B> {
    type Error = String;

    fn post(
        &mut self,
        qp: usize,
        op: Op,
        offset: u64,
        signaled: bool,
        stamp: Option<u8>,
    ) -> Result<(), String> {
        let size = self.plan.size;
        let local = self.source(qp) + offset;
        if let Some(s) = stamp {
            let last = size.checked_sub(1).ok_or("a stamp needs a byte or more")?;
            self.buffer()?
                .mr
                .write((local + u64::from(last)) as usize, &[s])
                .map_err(|e| e.to_string())?;
            self.inline_bytes[last as usize] = s;
        }
        let r = self
            .remote
            .get(qp)
            .ok_or_else(|| format!("no remote keys for queue pair {qp}"))?;
        let remote = RemoteAddr {
            addr: r.vaddr.wrapping_add(offset),
            rkey: r.rkey,
        };
        let send_op = match op {
            Op::Write => SendOp::Write(remote),
            Op::Read => SendOp::Read(remote),
            Op::Send => SendOp::Send,
        };
        let sge = [self.buffer()?.mr.sge(local, size)];
        let payload = if op != Op::Read && size <= self.inline {
            Payload::Inline(&self.inline_bytes)
        } else {
            Payload::Gather(&sge)
        };
        let mut wr = SendRequest::new(qp as u64, send_op, payload);
        wr.signaled = signaled;
        self.qps[qp].post_send(&[wr]).map_err(|e| e.to_string())
    }

    fn post_recv(&mut self, qp: usize, n: u32) -> Result<(), String> {
        let sge = [self.buffer()?.mr.sge(self.target(qp), self.plan.size)];
        let batch = [RecvRequest {
            wr_id: qp as u64,
            sg_list: &sge,
        }; POLL_BATCH];
        let mut left = n as usize;
        while left > 0 {
            let k = left.min(POLL_BATCH);
            self.qps[qp]
                .post_recv(&batch[..k])
                .map_err(|e| e.to_string())?;
            left -= k;
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [Done]) -> Result<usize, String> {
        crate::rdma_perf::engine::poll_completions(&mut self.port, &mut self.wcs, out)
    }

    fn last_byte(&mut self, qp: usize) -> Result<u8, String> {
        let mut byte = [0u8];
        let last = u64::from(self.plan.size.saturating_sub(1));
        self.buffer()?
            .load((self.target(qp) + last) as usize, &mut byte)?;
        Ok(byte[0])
    }

    fn idle(&mut self) {
        self.port.idle();
    }
}
