//! One function of the CM classes, and the CM's clock.

use super::{RECEIVES, SLOT};
use crate::emulated::EmuBackend;
use crate::rdma::verbs::{RdmaBuffer, RdmaPort};
use crate::rdma::MemoryKind;
use cxdirect::cm::{Cm, CmAddress, Event, Identity, QpAttributes};
use cxdirect::control::KeyAccess;
use cxdirect::rdma::{
    ConnectParams, Endpoint, GsiQueuePair, MadAddress, MadTransport, PathMtu, Payload, QpCaps,
    RcQueuePair, RecvRequest, SendOp, SendRequest, WorkCompletion,
};
use cxdirect_emu::Device as Model;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// One function: its RDMA port, QP1, CM and RC queue pair.
pub(super) struct Node {
    pub(super) port: RdmaPort<EmuBackend>,
    pub(super) gsi: GsiQueuePair<EmuBackend>,
    pub(super) cm: Cm,
    pub(super) qp: RcQueuePair<EmuBackend>,
    pub(super) buf: RdmaBuffer,
    pub(super) peer_mac: [u8; 6],
    pub(super) events: Vec<Event>,
    /// Work requests posted and not completed.
    pub(super) outstanding: u64,
}

impl Node {
    pub(super) fn open(model: &Model, name: &str, ip: Ipv4Addr, guid: u64) -> Result<Self, String> {
        let mut port = RdmaPort::open(EmuBackend::new(model.clone(), name), IpAddr::V4(ip), 64)?;
        let gsi = GsiQueuePair::create(&mut port.dev, &port.pd, &port.roce, 32)
            .map_err(|e| format!("{name}: QP1: {e}"))?;
        let buf = port.buffer(
            MemoryKind::Host,
            SLOT * (RECEIVES + 1),
            KeyAccess::READ_WRITE,
        )?;
        let qp = port.queue_pair(QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: SLOT as u32,
        })?;
        Ok(Self {
            port,
            gsi,
            cm: Cm::new(Identity::new(guid, ip, guid.rotate_left(29) ^ 0x5eed)),
            qp,
            buf,
            peer_mac: [0; 6],
            events: Vec::new(),
            outstanding: 0,
        })
    }

    /// One turn of the CM at `now`: QP1's MADs in, the CM's out.
    pub(super) fn turn(&mut self, now: Duration) -> Result<(), String> {
        let mut got = Vec::new();
        self.gsi
            .poll_mads(&mut |from, mad| got.push((from.gid, from.qpn, *mad)))
            .map_err(|e| format!("polling QP1: {e}"))?;
        for (gid, qpn, mad) in got {
            if let Ok(Some(event)) = self.cm.receive(now, CmAddress { gid, qpn }, &mad) {
                self.events.push(event);
            }
        }
        let poll = self.cm.poll(now);
        self.events.extend(poll.events);
        for (to, mad) in poll.sends {
            self.gsi
                .send_mad(&MadAddress::gsi(self.peer_mac, to.gid), &mad)
                .map_err(|e| format!("sending a MAD to {to}: {e}"))?;
        }
        Ok(())
    }

    /// Programs the RC queue pair from what the CM negotiated (as `cm_link` does).
    pub(super) fn program(&mut self, attrs: &QpAttributes) -> Result<(), String> {
        self.qp
            .set_send_psn(attrs.sq_psn)
            .map_err(|e| format!("first PSN: {e}"))?;
        let remote = Endpoint {
            qpn: attrs.remote_qpn,
            psn: attrs.rq_psn,
            gid: attrs.remote_gid,
            mac: self.peer_mac,
        };
        let mtu = PathMtu::largest_for(128u32 << attrs.path_mtu.clamp(1, 5))
            .ok_or_else(|| format!("path MTU {}", attrs.path_mtu))?;
        let params = ConnectParams {
            mtu,
            ack_timeout: attrs.timeout,
            retry_count: attrs.retry_count,
            rnr_timer: attrs.min_rnr_timer.max(12),
            rnr_retry: attrs.rnr_retry,
            max_rd_atomic: attrs.max_rd_atomic,
            max_dest_rd_atomic: attrs.max_dest_rd_atomic,
            hop_limit: attrs.hop_limit,
            traffic_class: attrs.traffic_class,
            // An Ethernet priority is 3 bits; mlx5_ib's `mlx5_set_path` keeps `sl & 0x7`.
            sl: attrs.sl & 0x7,
        };
        self.qp
            .connect(&mut self.port.dev, &remote, params)
            .map_err(|e| format!("programming the queue pair: {e}"))
    }

    pub(super) fn post_recv(&mut self, slot: usize) -> Result<(), String> {
        let sge = [self.buf.mr.sge((slot * SLOT) as u64, SLOT as u32)];
        self.qp
            .post_recv(&[RecvRequest {
                wr_id: slot as u64,
                sg_list: &sge,
            }])
            .map_err(|e| format!("posting a receive: {e}"))?;
        self.outstanding += 1;
        Ok(())
    }

    pub(super) fn post_send(&mut self, bytes: &[u8]) -> Result<(), String> {
        let send = SendRequest::new(0x5e, SendOp::Send, Payload::Inline(bytes));
        self.qp
            .post_send(&[send])
            .map_err(|e| format!("posting a SEND: {e}"))?;
        self.outstanding += 1;
        Ok(())
    }

    /// Completions available now.
    pub(super) fn completions(&mut self) -> Result<Vec<WorkCompletion>, String> {
        let mut wcs = [WorkCompletion::default(); 16];
        let n = self
            .port
            .cq
            .poll(&mut wcs)
            .map_err(|e| format!("polling the CQ: {e}"))?;
        self.outstanding = self.outstanding.saturating_sub(n as u64);
        Ok(wcs[..n].to_vec())
    }

    pub(super) fn close(self) -> Result<(), String> {
        let Node {
            mut port,
            gsi,
            qp,
            buf,
            ..
        } = self;
        let gsi = gsi
            .destroy(&mut port.dev)
            .map_err(|e| format!("closing QP1: {e}"));
        port.close(vec![qp], vec![buf]).and(gsi)
    }
}

/// The CM's clock: wall time plus the time jumped over.
pub(super) struct Clock {
    pub(super) start: Instant,
    pub(super) skipped: Duration,
}

impl Clock {
    pub(super) fn now(&self) -> Duration {
        self.start.elapsed() + self.skipped
    }

    /// Jumps to `deadline` when it is ahead.
    pub(super) fn jump_to(&mut self, deadline: Duration) {
        let now = self.now();
        if deadline > now {
            self.skipped += deadline - now;
        }
    }
}
