//! What the RDMA tests share: two functions on the model's pair wire, each with RoCE, a PD and
//! a CQ ([`Side`]), and the steps to connect RC queue pairs between them.

use crate::setup::bring_up_patient;
use cxdirect::rdma::{
    CompletionQueue, ConnectParams, MemoryRegion, ProtectionDomain, QpCaps, RcQueuePair, Roce,
    SharedReceiveQueue, SrqCaps, WorkCompletion,
};
use cxdirect::{Device, KeyAccess};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, ExecMode};

/// An RC queue pair on the emulated backend.
pub type Qp = RcQueuePair<EmuBackend>;

/// Every right: local read and write, remote read, write and atomics.
pub const ALL: KeyAccess = KeyAccess {
    read: true,
    write: true,
    remote_read: true,
    remote_write: true,
    remote_atomic: true,
};

/// One function: its device, RoCE, a PD and a CQ.
pub struct Side {
    /// The function's driver handle.
    pub dev: Device<EmuBackend>,
    /// RoCE enabled on the function's address.
    pub roce: Roce,
    /// The protection domain every QP and region of the side is made in.
    pub pd: ProtectionDomain,
    /// The CQ of every QP of the side, sends and receives.
    pub cq: CompletionQueue,
}

impl Side {
    /// Brings up `model`'s function as `name` and enables RoCE on address `ip`, with a PD and a
    /// CQ of 1,024 entries.
    pub fn new(model: &Model, name: &str, ip: &str) -> Self {
        let mut dev = bring_up_patient(model, name);
        let roce = Roce::enable(&mut dev, ip.parse().unwrap()).expect("RoCE");
        let pd = ProtectionDomain::alloc(&mut dev).expect("PD");
        let cq = CompletionQueue::create(&mut dev, 1024).expect("CQ");
        Side { dev, roce, pd, cq }
    }

    /// An RC QP on this side's PD and CQ with its own receive ring.
    pub fn qp(&mut self, caps: QpCaps) -> Qp {
        self.qp_on(None, caps)
    }

    /// A QP that takes its receives from `srq` when given.
    pub fn qp_on(&mut self, srq: Option<&SharedReceiveQueue<EmuBackend>>, caps: QpCaps) -> Qp {
        RcQueuePair::create(&mut self.dev, &self.pd, &mut self.cq, srq, caps, &self.roce)
            .expect("QP")
    }

    /// A shared receive queue of `max_wr` WQEs of `max_sge` entries each.
    pub fn srq(&mut self, max_wr: u32, max_sge: u32) -> SharedReceiveQueue<EmuBackend> {
        SharedReceiveQueue::create(&mut self.dev, &self.pd, SrqCaps { max_wr, max_sge })
            .expect("SRQ")
    }

    /// A registered region of `len` bytes with `access`.
    pub fn mr(&mut self, len: usize, access: KeyAccess) -> MemoryRegion {
        MemoryRegion::alloc(&mut self.dev, &self.pd, len, access).expect("MR")
    }

    /// Polls until `n` completions came (panics when they take more than 20 s: the device
    /// thread shares a loaded machine, so the bound is generous).
    pub fn wait(&mut self, n: usize) -> Vec<WorkCompletion> {
        wait_for(&mut self.cq, n)
    }

    /// Polls once more and asserts nothing else came.
    pub fn nothing_more(&mut self) {
        let mut batch = [WorkCompletion::default(); 4];
        assert_eq!(self.cq.poll(&mut batch).expect("poll"), 0, "{batch:?}");
    }
}

/// Polls `cq` until `n` completions came (panics when they take more than 20 s: the device
/// thread shares a loaded machine, so the bound is generous).
pub fn wait_for(cq: &mut CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let start = std::time::Instant::now();
    let mut got = Vec::new();
    let mut batch = [WorkCompletion::default(); 32];
    while got.len() < n {
        let k = cq.poll(&mut batch).expect("poll");
        got.extend_from_slice(&batch[..k]);
        if k == 0 {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "{} of {n} completions came: {got:?}",
                got.len()
            );
            std::thread::yield_now();
        }
    }
    got
}

/// Two functions on the pair wire (a at 10.0.0.1, b at 10.0.0.2), the model on its own
/// thread; the models come back so that they outlive the sides.
pub fn pair() -> (Side, Side, [Model; 2]) {
    // The device thread serves both functions: a frame one sends while receiving (an ACK, a
    // READ response) reaches the other without either side ringing a doorbell.
    let cfg = EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    let (a, b) = Model::pair(cfg.clone(), cfg);
    let sa = Side::new(&a, "a", "10.0.0.1");
    let sb = Side::new(&b, "b", "10.0.0.2");
    (sa, sb, [a, b])
}

/// Connects `qa` on `a` and `qb` on `b` to each other with the default parameters.
pub fn connect(a: &mut Side, qa: &mut Qp, b: &mut Side, qb: &mut Qp) {
    connect_with(a, qa, b, qb, ConnectParams::default());
}

/// Connects `qa` on `a` and `qb` on `b` to each other, both with `params`.
pub fn connect_with(a: &mut Side, qa: &mut Qp, b: &mut Side, qb: &mut Qp, params: ConnectParams) {
    let (ea, eb) = (qa.local_endpoint(), qb.local_endpoint());
    qa.connect(&mut a.dev, &eb, params).expect("connect a");
    qb.connect(&mut b.dev, &ea, params).expect("connect b");
}

/// A pattern that differs per message and per byte.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// `len` bytes of `mr` from `offset`.
pub fn read(mr: &MemoryRegion, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    mr.read(offset, &mut out).unwrap();
    out
}
