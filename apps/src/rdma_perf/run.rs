//! Running rdma-perf on devices: opening the two ports, connecting their queue pairs pair by
//! pair, running [`super::engine`] over them and making perftest's report.
//!
//! Each side registers one buffer holding, per queue pair, a source slot (what it sends, WRITEs
//! or is READ from) and a target slot (where the peer's WRITEs and SENDs land, and its own
//! READs), so that a WRITE ping-pong never sees its own stamp.

use super::cli::{Cli, Plan, PostPath};
use super::engine::{self, Done, PerfSide, CQ_MOD, POLL_BATCH, RX_DEPTH, TX_DEPTH};
use super::{bw_summary, lat_summary, BwReport, LatReport, Mode, Op};
use super::{BW_HEADER, LAT_HEADER, RESULT_LINE};
use crate::emulated::{open_emulated, Spec};
use crate::rdma::verbs::{
    emulated_idle_hook, local_endpoint, IdleHook, RdmaBuffer, RdmaPort, REMOTE_READ_WRITE,
};
use crate::rdma::{BufferInfo, MemoryKind};
use cxdirect::rdma::{
    ConnectParams, Payload, PreparedFlags, PreparedLocal, PreparedOp, PreparedSend, QpCaps,
    RcQueuePair, RecvRequest, RemoteAddr, SendOp, SendRequest, WorkCompletion,
};
use cxdirect::Backend;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// How long a run may make no progress before it is declared stalled.
pub const PATIENCE: Duration = Duration::from_secs(10);
/// The requester's address (its GID).
const REQUESTER_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 78, 1));
/// The responder's address.
const RESPONDER_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 78, 2));
/// Most inline bytes a WQE of the driver carries.
const DRIVER_MAX_INLINE: u32 = 460;
/// Most RDMA READs outstanding per queue pair (perftest's `MAX_OUT_READ_HERMON`).
const MAX_OUT_READ: u8 = 16;

/// One side of a run on a device: its queue pairs, its buffer, and where the peer's buffer is.
pub struct VerbsPerfSide<B: Backend> {
    port: RdmaPort<B>,
    qps: Vec<RcQueuePair<B>>,
    buffer: RdmaBuffer,
    /// Bytes per slot (the message size rounded up to 64).
    slot: u64,
    size: u32,
    inline: u32,
    /// The peer's buffer.
    peer: BufferInfo,
    /// A copy of the source slot's bytes, for inline sends.
    inline_bytes: Vec<u8>,
    wcs: [WorkCompletion; POLL_BATCH],
    /// The run's operation, and how its requests are posted.
    op: Op,
    post_path: PostPath,
    /// Per queue pair, the run's request prepared once the peer's buffer is known
    /// ([`PostPath::Prepared`]).
    prepared: Vec<PreparedSend>,
}

impl<B: Backend> VerbsPerfSide<B> {
    /// Opens `backend` and sets up `plan.qps` queue pairs and the buffer.
    pub fn open(
        backend: B,
        address: IpAddr,
        plan: &Plan,
        post_path: PostPath,
        idle: Option<IdleHook>,
    ) -> Result<Self, String> {
        let qps = usize::from(plan.qps);
        let (send_depth, recv_depth) = match plan.mode {
            Mode::Bw => (TX_DEPTH, if plan.op == Op::Send { RX_DEPTH } else { 1 }),
            // One message in CQ_MOD is signalled: the ring holds the unsignalled ones before it.
            Mode::Lat => (CQ_MOD + 1, 2),
        };
        let cq_entries = (qps as u32 * (send_depth + recv_depth)).next_power_of_two();
        let mut port = RdmaPort::open(backend, address, cq_entries)?;
        port.set_idle(idle);
        let slot = u64::from(plan.size.max(1)).next_multiple_of(64);
        let buffer = port.buffer(
            MemoryKind::Host,
            (2 * slot * qps as u64) as usize,
            REMOTE_READ_WRITE,
        )?;
        let inline = plan.inline.min(DRIVER_MAX_INLINE);
        let mut queue_pairs = Vec::with_capacity(qps);
        for _ in 0..qps {
            queue_pairs.push(port.queue_pair(QpCaps {
                max_send_wr: send_depth,
                max_recv_wr: recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: inline,
            })?);
        }
        Ok(Self {
            port,
            qps: queue_pairs,
            buffer,
            slot,
            size: plan.size,
            inline,
            peer: BufferInfo::default(),
            inline_bytes: vec![0; plan.size as usize],
            wcs: [WorkCompletion::default(); POLL_BATCH],
            op: plan.op,
            post_path,
            prepared: Vec::new(),
        })
    }

    /// Whether the run's messages go inline.
    fn inlined(&self) -> bool {
        self.op != Op::Read && self.size <= self.inline
    }

    /// Prepares the run's request on every queue pair (the peer's buffer known), as perftest
    /// builds its work requests once before the loop.
    fn prepare(&mut self) -> Result<(), String> {
        if self.post_path != PostPath::Prepared {
            return Ok(());
        }
        let op = match self.op {
            Op::Write => PreparedOp::Write {
                rkey: self.peer.rkey,
            },
            Op::Read => PreparedOp::Read {
                rkey: self.peer.rkey,
            },
            Op::Send => PreparedOp::Send,
        };
        let local = if self.inlined() {
            PreparedLocal::Inline
        } else {
            PreparedLocal::Region(&self.buffer.mr)
        };
        self.prepared = self
            .qps
            .iter()
            .map(|qp| qp.prepare_send(op, local, PreparedFlags::default()))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    fn source(&self, qp: usize) -> u64 {
        2 * self.slot * qp as u64
    }

    fn target(&self, qp: usize) -> u64 {
        self.source(qp) + self.slot
    }

    /// Where a message of `op` on queue pair `qp` goes on the peer and comes from (or, for a
    /// READ, lands) here, as offsets into the buffers.
    #[inline(always)]
    fn offsets(&self, qp: usize, op: Op) -> (u64, u64) {
        match op {
            // A READ fetches the peer's source slot into this side's target slot.
            Op::Read => (self.source(qp), self.target(qp)),
            Op::Write | Op::Send => (self.target(qp), self.source(qp)),
        }
    }

    /// Stamps the last byte of the source slot (and of the inline copy) with `s`.
    #[inline(never)]
    fn stamp(&mut self, qp: usize, s: u8) -> Result<(), String> {
        let last = self
            .size
            .checked_sub(1)
            .ok_or("a stamp needs a message of a byte or more")?;
        self.buffer
            .mr
            .write((self.source(qp) + u64::from(last)) as usize, &[s])
            .map_err(|e| e.to_string())?;
        self.inline_bytes[last as usize] = s;
        Ok(())
    }

    /// Posts through the general `post_send`: the request built and checked whole.
    #[inline(never)]
    fn post_general(
        &mut self,
        qp: usize,
        op: Op,
        signaled: bool,
        remote: u64,
        local: u64,
    ) -> Result<(), String> {
        let remote = RemoteAddr {
            addr: remote,
            rkey: self.peer.rkey,
        };
        let send_op = match op {
            Op::Write => SendOp::Write(remote),
            Op::Read => SendOp::Read(remote),
            Op::Send => SendOp::Send,
        };
        let sge = [self.buffer.mr.sge(local, self.size)];
        let payload = if op != Op::Read && self.size <= self.inline {
            Payload::Inline(&self.inline_bytes)
        } else {
            Payload::Gather(&sge)
        };
        let mut wr = SendRequest::new(qp as u64, send_op, payload);
        wr.signaled = signaled;
        self.qps[qp].post_send(&[wr]).map_err(describe)
    }

    /// The lines perftest prints for each queue pair's local (or remote) address.
    fn describe(&self, qp: usize) -> String {
        let e = local_endpoint(&self.qps[qp]);
        let b = self.buffer.advertise();
        format!(
            "LID {:#06x} QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} GID {}",
            e.lid,
            e.qpn,
            e.psn,
            b.rkey,
            b.addr,
            std::net::Ipv6Addr::from(e.gid)
        )
    }

    /// Closes everything.
    pub fn close(self) -> Result<(), String> {
        self.port.close(self.qps, vec![self.buffer])
    }
}

/// A refused post, as the run reports it.
#[cold]
#[inline(never)]
fn describe(e: cxdirect::DriverError) -> String {
    e.to_string()
}

/// Connects `a`'s queue pairs to `b`'s, pair by pair, and tells each side the other's buffer.
fn connect<B: Backend>(a: &mut VerbsPerfSide<B>, b: &mut VerbsPerfSide<B>) -> Result<(), String> {
    let params = |port: &RdmaPort<B>| {
        let roce = &port.roce;
        ConnectParams {
            mtu: roce.max_path_mtu(),
            max_rd_atomic: MAX_OUT_READ.min(1u8 << roce.log_max_rd_atomic().min(7)),
            max_dest_rd_atomic: MAX_OUT_READ.min(1u8 << roce.log_max_dest_rd_atomic().min(7)),
            ..ConnectParams::default()
        }
    };
    let (pa, pb) = (params(&a.port), params(&b.port));
    // Both sides must agree on the MTU.
    let mtu = pa.mtu.min(pb.mtu);
    for i in 0..a.qps.len() {
        let (ea, eb) = (local_endpoint(&a.qps[i]), local_endpoint(&b.qps[i]));
        a.port
            .connect(&mut a.qps[i], &eb, ConnectParams { mtu, ..pa })?;
        b.port
            .connect(&mut b.qps[i], &ea, ConnectParams { mtu, ..pb })?;
    }
    a.peer = b.buffer.advertise();
    b.peer = a.buffer.advertise();
    a.prepare()?;
    b.prepare()
}

impl<B: Backend> PerfSide for VerbsPerfSide<B> {
    type Error = String;

    // Kept out of line: `apps/scripts/callgrind-rdma` counts the instructions spent inside it.
    #[inline(never)]
    fn post(&mut self, qp: usize, op: Op, signaled: bool, stamp: Option<u8>) -> Result<(), String> {
        if let Some(s) = stamp {
            self.stamp(qp, s)?;
        }
        let (remote_offset, local) = self.offsets(qp, op);
        let remote = self.peer.addr + remote_offset;
        match self.prepared.get(qp) {
            Some(p) if op == self.op => {
                let posted = if p.is_inline() {
                    self.qps[qp].post_prepared_inline(
                        p,
                        qp as u64,
                        remote,
                        &self.inline_bytes,
                        signaled,
                    )
                } else {
                    self.qps[qp].post_prepared(p, qp as u64, remote, local, self.size, signaled)
                };
                posted.map_err(describe)
            }
            _ => self.post_general(qp, op, signaled, remote, local),
        }
    }

    fn post_recv(&mut self, qp: usize, n: u32) -> Result<(), String> {
        let sge = [self.buffer.mr.sge(self.target(qp), self.size)];
        let wr = RecvRequest {
            wr_id: qp as u64,
            sg_list: &sge,
        };
        let batch = [wr; POLL_BATCH];
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

    // Kept out of line, as `post`.
    #[inline(never)]
    fn poll(&mut self, out: &mut [Done]) -> Result<usize, String> {
        crate::rdma_perf::engine::poll_completions(&mut self.port, &mut self.wcs, out)
    }

    fn last_byte(&mut self, qp: usize) -> Result<u8, String> {
        let mut byte = [0u8];
        let last = u64::from(self.size.saturating_sub(1));
        self.buffer
            .load((self.target(qp) + last) as usize, &mut byte)?;
        Ok(byte[0])
    }
}

/// Runs what `plan` says and returns the lines to print (perftest's report and the summary);
/// an error says what failed.
pub fn run(cli: &Cli, plan: &Plan) -> Result<Vec<String>, String> {
    if let Some(pp) = cli.perftest_plan()? {
        return super::perftest::run::run(cli, plan, &pp);
    }
    let post_path = cli.post;
    if plan.mode == Mode::Lat && plan.op == Op::Write && plan.size == 0 {
        return Err("--size: a WRITE latency run needs a message of a byte or more".into());
    }
    match cli.devices.devices.as_slice() {
        [one] if one == "emu-pair" => {
            let exec = cli.devices.emu_exec;
            let config = cxdirect_emu::EmuConfig {
                roce: true,
                ..cli.devices.emu_config()
            };
            let mut ports = open_emulated(&Spec::EmuPair, config).into_iter();
            let (Some(a), Some(b)) = (ports.next(), ports.next()) else {
                return Err("emu-pair gave fewer than two ports".into());
            };
            let hooks = [emulated_idle_hook(&a, exec), emulated_idle_hook(&b, exec)];
            run_on(a, b, hooks, plan, post_path)
        }
        [a, b] => {
            let mode = cli.devices.iommu_mode.as_str();
            let first = crate::vfio_open(a, mode).map_err(|e| format!("{a}: {e}"))?;
            let second = crate::vfio_open(b, mode).map_err(|e| format!("{b}: {e}"))?;
            run_on(first, second, [None, None], plan, post_path)
        }
        _ => Err("--device: give emu-pair, or two PCI addresses".into()),
    }
}

/// perftest's title of a test.
pub(crate) fn title(plan: &Plan) -> String {
    let verb = match plan.op {
        Op::Write => "RDMA_Write",
        Op::Read => "RDMA_Read",
        Op::Send => "Send",
    };
    let kind = match plan.mode {
        Mode::Bw => "BW",
        Mode::Lat => "Latency",
    };
    format!("                    {verb} {kind} Test")
}

/// Runs `plan` between a requester on `a` and a responder on `b`, posting by `post_path`.
pub fn run_on<B: Backend>(
    a: B,
    b: B,
    idle_hooks: [Option<IdleHook>; 2],
    plan: &Plan,
    post_path: PostPath,
) -> Result<Vec<String>, String> {
    let [idle_a, idle_b] = idle_hooks;
    let mut requester = VerbsPerfSide::open(a, REQUESTER_ADDRESS, plan, post_path, idle_a)?;
    let mut responder = VerbsPerfSide::open(b, RESPONDER_ADDRESS, plan, post_path, idle_b)?;
    let mut lines = vec![RESULT_LINE.to_string(), title(plan)];
    let measured = connect(&mut requester, &mut responder).and_then(|()| {
        lines.push(format!(
            " Number of qps   : {}\t\tConnection type : RC\t\tUsing SRQ : OFF",
            plan.qps
        ));
        lines.push(format!(
            " Mtu             : {}[B]\t\tInline data is used up to {} bytes message",
            requester.port.roce.max_path_mtu().bytes(),
            requester.inline
        ));
        if plan.mode == Mode::Bw {
            lines.push(format!(
                " TX depth        : {TX_DEPTH}\t\tCQ Moderation   : {CQ_MOD}"
            ));
        }
        for qp in 0..usize::from(plan.qps) {
            lines.push(format!(" local address: {}", requester.describe(qp)));
            lines.push(format!(" remote address: {}", responder.describe(qp)));
        }
        lines.push(RESULT_LINE.to_string());
        measure(&mut requester, &mut responder, plan)
    });
    let closed = requester.close().and(responder.close());
    let (header, report, summary) = measured?;
    closed?;
    lines.extend([header, report, RESULT_LINE.to_string(), summary]);
    Ok(lines)
}

/// The run itself: perftest's header, its report line and the summary.
fn measure<B: Backend>(
    requester: &mut VerbsPerfSide<B>,
    responder: &mut VerbsPerfSide<B>,
    plan: &Plan,
) -> Result<(String, String, String), String> {
    let size = u64::from(plan.size);
    let iters = u32::try_from(plan.iters).map_err(|_| "--iters: at most 4294967295")?;
    match plan.mode {
        Mode::Bw => {
            let qps = usize::from(plan.qps);
            let times = engine::bandwidth(requester, responder, plan.op, qps, iters, PATIENCE)
                .map_err(|e| e.to_string())?;
            let report = BwReport::from_times(size, qps as u64, &times.posted, &times.completed)
                .map_err(|e| e.to_string())?;
            Ok((
                BW_HEADER.to_string(),
                report.to_string(),
                bw_summary(plan.op, qps as u64, &report),
            ))
        }
        Mode::Lat => {
            let mut samples = engine::latency(requester, responder, plan.op, iters, PATIENCE)
                .map_err(|e| e.to_string())?;
            let report = LatReport::from_samples(size, &mut samples, plan.op.rtt_factor())
                .map_err(|e| e.to_string())?;
            Ok((
                LAT_HEADER.to_string(),
                report.to_string(),
                lat_summary(plan.op, 1, &report),
            ))
        }
    }
}
