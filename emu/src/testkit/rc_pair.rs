//! Two functions with RoCE on a pair wire, each with an RC QP connected to the other's: the
//! set-up most RC transport tests start from.

use super::rc::{RcPath, RcQp, GID_A, GID_B, JUMBO_PORT_MTU, MAC_A, MAC_B};
use super::{Cq, Host};
use crate::wire::{PortId, Wire};
use crate::{Device, EmuConfig};
use cxdirect_hw::qp::mtu;
use std::sync::Arc;

/// Two functions with RoCE enabled on a pair wire (A at [`GID_A`]/[`MAC_A`], B at
/// [`GID_B`]/[`MAC_B`]), each with one CQ and one RC QP in RTS connected to the other's.
pub struct RcPair {
    /// Side A.
    pub a: Host,
    /// Side B.
    pub b: Host,
    /// A's CQ (send and receive completions of `qp_a`).
    pub cq_a: Cq,
    /// B's CQ.
    pub cq_b: Cq,
    /// A's QP.
    pub qp_a: RcQp,
    /// B's QP.
    pub qp_b: RcQp,
    /// The wire between them.
    pub wire: Arc<Wire>,
}

impl RcPair {
    /// Two functions made from `cfg` (RoCE turned on, MACs set) with `mem` bytes of host
    /// memory each, their ports at [`JUMBO_PORT_MTU`] when the path MTU is above 1024;
    /// CQs of `2^log_cq` entries, send rings of `2^log_sq` WQEBBs, own receive rings of
    /// `2^log_rq` WQEs. A's path is `path` towards B (its peer fields filled in), B's the same
    /// towards A with the two PSNs swapped. With threaded execution both functions
    /// share one device thread.
    pub fn new(
        cfg: EmuConfig,
        mem: usize,
        log_cq: u8,
        log_sq: u8,
        log_rq: u8,
        path: RcPath,
    ) -> Self {
        Self::with_rmp_b(cfg, mem, log_cq, log_sq, log_rq, path, |_| None)
    }

    /// [`RcPair::new`], B's QP taking its receives from the RMP `make_rmp` creates on B (after
    /// A's QP, before B's), if it makes one.
    pub fn with_rmp_b(
        cfg: EmuConfig,
        mem: usize,
        log_cq: u8,
        log_sq: u8,
        log_rq: u8,
        path: RcPath,
        make_rmp: impl FnOnce(&mut Host) -> Option<u32>,
    ) -> Self {
        let side = |mac| EmuConfig {
            roce: true,
            mac,
            ..cfg.clone()
        };
        let (da, db) = Device::pair(side(MAC_A), side(MAC_B));
        let (wire, port) = da.wire().expect("a pair is wired");
        debug_assert_eq!(port, PortId::A);
        let (a, b) = (Host::new(da, mem), Host::new(db, mem));
        Self::build(a, b, wire, (log_cq, log_sq, log_rq), path, make_rmp)
    }

    /// [`RcPair::new`] on two hosts the caller made, not yet brought up: `a`'s function on
    /// port A of `wire`, `b`'s on port B, with MACs [`MAC_A`] and [`MAC_B`] and RoCE on (an
    /// impaired wire, or a device thread each, for instance).
    pub fn on_hosts(
        a: Host,
        b: Host,
        wire: Arc<Wire>,
        log_cq: u8,
        log_sq: u8,
        log_rq: u8,
        path: RcPath,
    ) -> Self {
        Self::build(a, b, wire, (log_cq, log_sq, log_rq), path, |_| None)
    }

    /// [`RcPair::on_hosts`], B's QP taking its receives from the RMP `make_rmp` creates on B
    /// (after A's QP, before B's), if it makes one.
    #[allow(clippy::too_many_arguments)]
    pub fn on_hosts_with_rmp_b(
        a: Host,
        b: Host,
        wire: Arc<Wire>,
        log_cq: u8,
        log_sq: u8,
        log_rq: u8,
        path: RcPath,
        make_rmp: impl FnOnce(&mut Host) -> Option<u32>,
    ) -> Self {
        Self::build(a, b, wire, (log_cq, log_sq, log_rq), path, make_rmp)
    }

    /// Brings both hosts up and connects them; `logs` are the CQ, send ring and receive ring
    /// sizes (log2).
    fn build(
        mut a: Host,
        mut b: Host,
        wire: Arc<Wire>,
        (log_cq, log_sq, log_rq): (u8, u8, u8),
        path: RcPath,
        make_rmp: impl FnOnce(&mut Host) -> Option<u32>,
    ) -> Self {
        a.bring_up();
        b.bring_up();
        if path.mtu_code > mtu::MTU_1024 {
            a.set_port_mtu(JUMBO_PORT_MTU);
            b.set_port_mtu(JUMBO_PORT_MTU);
        }
        a.enable_roce(GID_A, MAC_A);
        b.enable_roce(GID_B, MAC_B);
        let cq_a = a.create_cq(log_cq);
        let cq_b = b.create_cq(log_cq);
        let qp_a = a.create_rc_qp(&cq_a, log_sq, log_rq, None);
        let rmpn = make_rmp(&mut b);
        let qp_b = b.create_rc_qp(&cq_b, log_sq, log_rq, rmpn);
        let path_a = RcPath {
            peer_gid: GID_B,
            peer_mac: MAC_B,
            remote_qpn: qp_b.qpn,
            ..path
        };
        let path_b = RcPath {
            peer_gid: GID_A,
            peer_mac: MAC_A,
            remote_qpn: qp_a.qpn,
            send_psn: path.receive_psn,
            receive_psn: path.send_psn,
            ..path
        };
        a.connect_rc(qp_a.qpn, &path_a);
        b.connect_rc(qp_b.qpn, &path_b);
        Self {
            a,
            b,
            cq_a,
            cq_b,
            qp_a,
            qp_b,
            wire,
        }
    }

    /// Lets both functions take what reached them, and run due timers, until the wire is
    /// quiet (inline execution).
    pub fn settle(&self) {
        for _ in 0..4 {
            self.b.dev.poll();
            self.a.dev.poll();
        }
    }

    /// Destroys both QPs and tears both functions down (every page returned).
    pub fn teardown(mut self) {
        self.a.destroy_qp(self.qp_a.qpn);
        self.b.destroy_qp(self.qp_b.qpn);
        self.a.teardown();
        self.b.teardown();
    }
}
