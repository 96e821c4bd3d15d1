//! The driver's RDMA verbs as the programs use them: a port brought up with RoCE, a protection
//! domain and one completion queue; buffers registered from the memory `--memory` names; RC
//! queue pairs connected to a peer's [`Endpoint`]; and an orderly
//! close.

use super::endpoint::Endpoint;
use super::host::DeviceHost;
use super::port_address::{port_config, PortAddress};
use super::MemoryKind;
use cxdirect::control::KeyAccess;
use cxdirect::rdma::{
    CompletionQueue, ConnectParams, MemoryRegion, MrSource, ProtectionDomain, QpCaps, RcQueuePair,
    Roce, SharedReceiveQueue,
};
use cxdirect::{Backend, Device, Options, Port};
use cxdirect_dma::cuda::CudaMemory;
use cxdirect_dma::{DmaBufMapping, DmaBufMode};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// Bytes of a dmabuf-backed buffer are rounded up to whole pages of this size.
const PAGE: usize = 4096;

/// Access of every buffer a peer reads or writes: local read and write, remote read and write.
pub const REMOTE_READ_WRITE: KeyAccess = KeyAccess {
    read: true,
    write: true,
    remote_read: true,
    remote_write: true,
    remote_atomic: false,
};

/// A port ready for RDMA: the brought-up device, RoCE with its GID, a protection domain and the
/// completion queue every queue pair of the program completes on.
pub struct RdmaPort<B: Backend> {
    /// The device (held by the Ethernet port when the port serves its IPv4 address).
    pub dev: DeviceHost<B>,
    /// The function's IPv4 address on its Ethernet side (ARP, ICMP), when served
    /// ([`RdmaPort::open_serving`]).
    pub address: Option<PortAddress<B>>,
    /// RoCE on the port: its GID and MAC.
    pub roce: Roce,
    /// The protection domain of every buffer and queue pair.
    pub pd: ProtectionDomain,
    /// The completion queue.
    pub cq: CompletionQueue,
    name: String,
    idle: Option<IdleHook>,
}

/// What a port runs when a poll of its completion queue finds nothing: for a model that
/// executes inline, within the driver's doorbell writes, the delivery of frames that arrived
/// since and the transport's due timers (nothing else would run them).
pub type IdleHook = Box<dyn FnMut()>;

/// The idle hook of an emulated port whose model executes as `exec` says: none when the model
/// runs on its own thread.
pub fn emulated_idle_hook(
    backend: &crate::emulated::EmuBackend,
    exec: crate::cli::EmuExec,
) -> Option<IdleHook> {
    let model = backend.model().clone();
    (exec == crate::cli::EmuExec::Inline).then(|| Box::new(move || model.poll()) as IdleHook)
}

/// A registered buffer and what the CPU reaches it through.
pub struct RdmaBuffer {
    /// The memory region.
    pub mr: MemoryRegion,
    /// Bytes the program uses (the region may be larger: whole pages).
    pub len: usize,
    /// The CUDA allocation behind a GPU buffer (it must outlive the region).
    gpu: Option<(CudaMemory, Arc<DmaBufMapping>)>,
}

impl RdmaBuffer {
    /// Copies `data` into the start of the buffer (the CPU's store).
    pub fn store(&self, data: &[u8]) -> Result<(), String> {
        if self.gpu.is_some() {
            return Err("GPU memory: the CPU does not store into it here".into());
        }
        self.mr.write(0, data).map_err(|e| e.to_string())
    }

    /// Copies the first `out.len()` bytes at `offset` into `out` (the CPU's load; GPU memory
    /// through a device-to-host copy).
    pub fn load(&self, offset: usize, out: &mut [u8]) -> Result<(), String> {
        match &self.gpu {
            Some((gpu, mapping)) => gpu
                .copy_to_host(mapping.offset() as usize + offset, out)
                .map_err(|e| e.to_string()),
            None => self.mr.read(offset, out).map_err(|e| e.to_string()),
        }
    }

    /// How a peer addresses the buffer.
    pub fn advertise(&self) -> super::BufferInfo {
        let remote = self.mr.remote(0);
        super::BufferInfo {
            addr: remote.addr,
            rkey: remote.rkey,
            size: self.len as u32,
        }
    }
}

impl<B: Backend> RdmaPort<B> {
    /// Brings `backend` up, enables RoCE with `address` as the port's address (its GID),
    /// allocates a protection domain and a completion queue of `cq_entries`.
    pub fn open(backend: B, address: IpAddr, cq_entries: u32) -> Result<Self, String> {
        Self::open_with(backend, address, cq_entries, false)
    }

    /// As [`RdmaPort::open`], and the function also serves `address` on its Ethernet side (a
    /// small Ethernet port answers ARP and ICMP echo and resolves peers' MACs: see
    /// [`PortAddress`]), so a Linux host reaches it with nothing configured by hand.
    pub fn open_serving(backend: B, address: Ipv4Addr, cq_entries: u32) -> Result<Self, String> {
        Self::open_with(backend, address.into(), cq_entries, true)
    }

    fn open_with(
        backend: B,
        address: IpAddr,
        cq_entries: u32,
        serve: bool,
    ) -> Result<Self, String> {
        let name = backend.name();
        let fail = |what: &str, e: cxdirect::DriverError| format!("{name}: {what}: {e}");
        let mut dev = Device::bring_up(backend, Options::default())
            .map_err(|e| format!("{name}: bring-up failed: {e}"))?;
        let roce = Roce::enable(&mut dev, address).map_err(|e| fail("enabling RoCE", e))?;
        let (mut dev, served) = match address {
            IpAddr::V4(ip) if serve => {
                let started = Port::start(dev, port_config())
                    .map_err(|e| fail("the Ethernet port serving the address", e))?;
                let mut port = started.port;
                match PortAddress::serve(&mut port, started.queues, ip) {
                    Ok(served) => (DeviceHost::Ethernet(Box::new(port)), Some(served)),
                    Err(e) => {
                        let _ = DeviceHost::Ethernet(Box::new(port)).teardown();
                        return Err(format!("{name}: {e}"));
                    }
                }
            }
            _ => (DeviceHost::Bare(Box::new(dev)), None),
        };
        let pd = ProtectionDomain::alloc(&mut dev).map_err(|e| fail("protection domain", e))?;
        let cq = CompletionQueue::create(&mut dev, cq_entries)
            .map_err(|e| fail("completion queue", e))?;
        Ok(Self {
            dev,
            address: served,
            roce,
            pd,
            cq,
            name,
            idle: None,
        })
    }

    /// Sets what [`RdmaPort::idle`] runs.
    pub fn set_idle(&mut self, hook: Option<IdleHook>) {
        self.idle = hook;
    }

    /// Called after a poll that found nothing: runs the idle hook, if any.
    #[inline]
    pub fn idle(&mut self) {
        if let Some(hook) = self.idle.as_mut() {
            hook();
        }
    }

    /// The port's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Registers `len` bytes of `kind` memory with `access`. GPU memory needs the CUDA driver;
    /// memfd and udmabuf are dmabuf imports the CPU reaches through their mapping.
    pub fn buffer(
        &mut self,
        kind: MemoryKind,
        len: usize,
        access: KeyAccess,
    ) -> Result<RdmaBuffer, String> {
        let fail = |e: String| {
            format!(
                "{}: {} buffer of {len} bytes: {e}",
                self.name,
                kind.as_str()
            )
        };
        if kind == MemoryKind::Host {
            let mr = MemoryRegion::alloc(&mut self.dev, &self.pd, len.max(1), access)
                .map_err(|e| fail(e.to_string()))?;
            return Ok(RdmaBuffer { mr, len, gpu: None });
        }
        let size = len.max(1).next_multiple_of(PAGE) as u64;
        let (buf, gpu) =
            crate::dmabuf::export_and_import(kind.as_str(), size, "cxdirect-rdma").map_err(fail)?;
        let (iommu, iovas) = self.dev.dma();
        let mapping = Arc::new(
            buf.map(iommu, &iovas, 0, size, DmaBufMode::Pinned)
                .map_err(|e| fail(e.to_string()))?,
        );
        let mr =
            MemoryRegion::register(&mut self.dev, &self.pd, MrSource::DmaBuf(&mapping), access)
                .map_err(|e| fail(e.to_string()))?;
        Ok(RdmaBuffer {
            mr,
            len,
            gpu: gpu.map(|g| (g, mapping)),
        })
    }

    /// Creates an RC queue pair with `caps` completing on the port's completion queue.
    pub fn queue_pair(&mut self, caps: QpCaps) -> Result<RcQueuePair<B>, String> {
        self.queue_pair_on(caps, None)
    }

    /// Creates an RC queue pair with `caps` completing on the port's completion queue and
    /// receiving from `srq` when one is given (its own receive queue otherwise).
    pub fn queue_pair_on(
        &mut self,
        caps: QpCaps,
        srq: Option<&SharedReceiveQueue<B>>,
    ) -> Result<RcQueuePair<B>, String> {
        RcQueuePair::create(&mut self.dev, &self.pd, &mut self.cq, srq, caps, &self.roce)
            .map_err(|e| format!("{}: queue pair: {e}", self.name))
    }

    /// Destroys `qp`, its posted requests flushed (before the SRQ it receives from).
    pub fn destroy_queue_pair(&mut self, qp: RcQueuePair<B>) -> Result<(), String> {
        qp.destroy(&mut self.dev, &mut self.cq)
            .map_err(|e| format!("{}: closing: queue pair: {e}", self.name))
    }

    /// Connects `qp` to `remote` with `params`.
    pub fn connect(
        &mut self,
        qp: &mut RcQueuePair<B>,
        remote: &Endpoint,
        params: ConnectParams,
    ) -> Result<(), String> {
        qp.connect(&mut self.dev, &to_driver(remote), params)
            .map_err(|e| format!("{}: connecting QPN {:#x}: {e}", self.name, remote.qpn))
    }

    /// Destroys `qps` (their posted requests flushed), deregisters `buffers`, and closes the
    /// port; the first failure is returned after everything has been tried.
    pub fn close(
        mut self,
        qps: Vec<RcQueuePair<B>>,
        buffers: Vec<RdmaBuffer>,
    ) -> Result<(), String> {
        let mut first = None;
        let mut note = |r: Result<(), cxdirect::DriverError>, what: &str| {
            if let Err(e) = r {
                first.get_or_insert(format!("{}: closing: {what}: {e}", self.name));
            }
        };
        for qp in qps {
            note(qp.destroy(&mut self.dev, &mut self.cq), "queue pair");
        }
        for b in buffers {
            note(b.mr.deregister(&mut self.dev), "memory region");
            drop(b.gpu);
        }
        note(self.cq.destroy(&mut self.dev), "completion queue");
        note(self.pd.dealloc(&mut self.dev), "protection domain");
        // The address's queues go before the port that owns them.
        drop(self.address.take());
        note(self.dev.teardown().map(|_| ()), "device");
        first.map_or(Ok(()), Err)
    }
}

/// The endpoint a peer is told of for `qp` (LID 0: RoCE addresses by GID).
pub fn local_endpoint<B: Backend>(qp: &RcQueuePair<B>) -> Endpoint {
    let e = qp.local_endpoint();
    Endpoint {
        lid: 0,
        qpn: e.qpn,
        psn: e.psn,
        gid: e.gid,
        mac: e.mac,
    }
}

fn to_driver(e: &Endpoint) -> cxdirect::rdma::Endpoint {
    cxdirect::rdma::Endpoint {
        qpn: e.qpn,
        psn: e.psn,
        gid: e.gid,
        mac: e.mac,
    }
}
