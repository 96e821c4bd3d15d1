//! RoCE v2 datagrams for the test host: UD and GSI (QP1) QPs created and moved to RTS as
//! Linux's mlx5_ib moves them, UD send WQEs with the 48-byte address vector built byte by
//! byte, and two functions on a pair wire with one UD QP and one GSI QP each ([`UdPair`]).
//! Used by tests and fuzz targets that drive UD without a driver.

use super::rc::{GID_A, GID_B, MAC_A, MAC_B, RC_RQ_STRIDE, UDP_SPORT};
use super::{CmdFail, Cq, Host, Sq};
use crate::wire::Wire;
use crate::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::layout::Layout;
use cxdirect_hw::mcg::{AttachToMcgIn, DetachFromMcgIn};
use cxdirect_hw::qp::{mtu, service_type, CreateQpIn, CreateQpOut, Qpc};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, DatagramSeg, INVALID_LKEY};
use std::sync::Arc;

/// The Q_Key of the UD QPs of a [`UdPair`].
pub const UD_QKEY: u32 = 0x1111_1111;
/// The Q_Key of every MAD (`IB_QP1_QKEY`).
pub const QP1_QKEY: u32 = 0x8001_0000;
/// Bit 31 of a WQE's Q_Key: use the QP's own (`IB_QP_SET_QKEY`).
pub const QKEY_FROM_QP: u32 = 0x8000_0000;

/// A UD or GSI QP made by [`Host::create_ud_qp`].
pub struct UdQp {
    /// QP number (the firmware's; a GSI QP is addressed as QP 1 on the wire).
    pub qpn: u32,
    /// Its send ring (`sqn` is the QPN).
    pub sq: Sq,
    /// IOVA of its receive ring ([`RC_RQ_STRIDE`]-byte WQEs).
    pub rq_buf: u64,
    /// Log2 of the receive ring's entries.
    pub rq_log: u8,
    /// Receive WQEs posted (the doorbell record's receive counter).
    pub rq_pi: u16,
}

/// The address vector of a UD send WQE, as an address handle holds it.
#[derive(Debug, Clone, Copy)]
pub struct UdAv {
    /// Destination QP (1 for a MAD).
    pub dest_qpn: u32,
    /// Q_Key to send with ([`QKEY_FROM_QP`]: the QP's own).
    pub q_key: u32,
    /// Index of the source GID.
    pub sgid_index: u8,
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Destination MAC.
    pub rmac: [u8; 6],
    /// UDP source port.
    pub udp_sport: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub tclass: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Service level, the datagrams' Ethernet priority (0..=7: `stat_rate_sl` bits 3:1, as
    /// libmlx5's `mlx5_create_ah` writes it on an Ethernet port).
    pub sl: u8,
}

impl UdAv {
    /// A vector to `dest_qpn` at `dgid`/`rmac` with Q_Key `q_key`, from GID index 0, hop
    /// limit 64, UDP source port [`UDP_SPORT`], SL 0.
    pub fn to(dgid: [u8; 16], rmac: [u8; 6], dest_qpn: u32, q_key: u32) -> Self {
        Self {
            dest_qpn,
            q_key,
            sgid_index: 0,
            dgid,
            rmac,
            udp_sport: UDP_SPORT,
            hop_limit: 64,
            tclass: 0,
            flow_label: 0,
            sl: 0,
        }
    }

    /// The 48-byte datagram segment, as `set_datagram_seg` writes it (`MLX5_EXTENDED_UD_AV`
    /// and the GRH bit set).
    pub fn segment(&self) -> [u8; 48] {
        let mut b = [0u8; 48];
        DatagramSeg::new(&mut b[..])
            .expect("layout")
            .set_q_key(self.q_key)
            .set_extended(true)
            .set_dest_qpn(self.dest_qpn)
            .set_udp_sport(self.udp_sport)
            .set_tclass(self.tclass)
            .set_stat_rate_sl((self.sl & 0x7) << 1)
            .set_hop_limit(self.hop_limit)
            .set_grh(true)
            .set_sgid_index(self.sgid_index)
            .set_flow_label(self.flow_label)
            .set_dgid(self.dgid)
            .set_rmac(self.rmac);
        b
    }
}

/// A UD send WQE of `op` (SEND or SEND_IMM, immediate `imm`) on `sq` asking for a completion:
/// control segment, datagram segment, one data segment per `(address, lkey, bytes)` of
/// `local`; padded to whole WQEBBs.
pub fn ud_wqe(sq: &Sq, op: u8, imm: u32, av: &UdAv, local: &[(u64, u32, u32)]) -> Vec<u8> {
    let ds = 1 + 3 + local.len();
    let mut w = vec![0u8; (ds * 16).next_multiple_of(64)];
    w[16..64].copy_from_slice(&av.segment());
    for (i, &(addr, lkey, len)) in local.iter().enumerate() {
        DataSeg::new(&mut w[64 + 16 * i..80 + 16 * i])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(addr);
    }
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(ds as u8)
        .set_ce(2)
        .set_imm(imm);
    w
}

impl Host {
    /// CREATE_QP of service `st` (UD or QP1) in the host's PD, completions on `cq`: a
    /// `2^log_sq`-WQEBB send ring and a `2^log_rq`-entry receive ring of 64-byte WQEs.
    pub fn create_ud_qp(&mut self, cq: &Cq, st: u8, log_sq: u8, log_rq: u8) -> UdQp {
        self.try_create_ud_qp(cq, st, log_sq, log_rq, |_| {})
            .expect("CREATE_QP")
    }

    /// As [`Host::create_ud_qp`], with `fill` setting more of the context (`block_lb_mc`,
    /// `deth_sqpn`) before the command; the refusal when the device refuses it.
    pub fn try_create_ud_qp(
        &mut self,
        cq: &Cq,
        st: u8,
        log_sq: u8,
        log_rq: u8,
        fill: impl FnOnce(&mut Qpc<&mut [u8]>),
    ) -> Result<UdQp, CmdFail> {
        let rq_bytes = RC_RQ_STRIDE << log_rq;
        let size = (rq_bytes + (64u64 << log_sq)).next_multiple_of(4096);
        let buf = self.alloc(size, 4096);
        let dbr = self.alloc(8, 64);
        let pages = (size / 4096) as usize;
        let mut input = Self::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
        let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
        cmd.qpc_mut()
            .set_st(st)
            .set_pm_state(3)
            .set_pd(self.pd)
            .set_uar_page(self.uar)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_log_rq_size(log_rq)
            .set_log_rq_stride(2)
            .set_log_sq_size(log_sq)
            .set_ts_format(1)
            .set_dbr_addr(dbr);
        fill(&mut cmd.qpc_mut());
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        let out = self.exec(&input, 16)?;
        let qpn = CreateQpOut::new(&out[..]).expect("layout").qpn();
        Ok(UdQp {
            qpn,
            sq: Sq {
                sqn: qpn,
                buf: buf + rq_bytes,
                dbr,
                log: log_sq,
                pi: 0,
                bf_toggle: false,
            },
            rq_buf: buf,
            rq_log: log_rq,
            rq_pi: 0,
        })
    }

    /// ATTACH_TO_MCG: QP `qpn` joins the group of multicast GID `gid`, as
    /// `mlx5_cmd_attach_mcg` (drivers/infiniband/hw/mlx5/cmd.c) sends it.
    pub fn attach_mcg(&mut self, qpn: u32, gid: [u8; 16]) -> Result<(), CmdFail> {
        let mut input = Self::input(Opcode::AttachToMcg, 0, <AttachToMcgIn as Layout>::SIZE);
        AttachToMcgIn::new(&mut input[..])
            .expect("layout")
            .set_qpn(qpn)
            .set_gid(gid);
        self.exec(&input, 16).map(|_| ())
    }

    /// DETACH_FROM_MCG: QP `qpn` leaves the group of `gid` (`mlx5_cmd_detach_mcg`).
    pub fn detach_mcg(&mut self, qpn: u32, gid: [u8; 16]) -> Result<(), CmdFail> {
        let mut input = Self::input(Opcode::DetachFromMcg, 0, <DetachFromMcgIn as Layout>::SIZE);
        DetachFromMcgIn::new(&mut input[..])
            .expect("layout")
            .set_qpn(qpn)
            .set_gid(gid);
        self.exec(&input, 16).map(|_| ())
    }

    /// RST2INIT (port 1, P_Key index 0, Q_Key `q_key`), INIT2RTR and RTR2RTS (send PSN 0), each
    /// with the MTU mlx5_ib writes for the service (`__mlx5_ib_modify_qp`: 4096 and
    /// `log_msg_max` 12 for UD, 256 and 8 for QP1).
    pub fn activate_ud(&mut self, qpn: u32, st: u8, q_key: u32) {
        let (code, log_msg) = if st == service_type::QP1 {
            (mtu::MTU_256, 8)
        } else {
            (mtu::MTU_4096, 12)
        };
        for opcode in [Opcode::Rst2initQp, Opcode::Init2rtrQp, Opcode::Rtr2rtsQp] {
            self.modify_qp(opcode, qpn, |c| {
                c.set_st(st).set_mtu(code).set_log_msg_max(log_msg);
                if opcode == Opcode::Rst2initQp {
                    c.set_q_key(q_key);
                    c.primary_address_path_mut().set_vhca_port_num(1);
                }
            });
        }
    }

    /// Posts a one-segment receive WQE (`len` bytes at `addr` through `lkey`) on the QP's
    /// receive ring and updates the doorbell record's receive counter.
    pub fn post_ud_recv(&self, qp: &mut UdQp, addr: u64, len: u32, lkey: u32) {
        let mut w = [0u8; RC_RQ_STRIDE as usize];
        DataSeg::new(&mut w[..16])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(addr);
        DataSeg::new(&mut w[16..32])
            .expect("layout")
            .set_lkey(INVALID_LKEY);
        let slot = u64::from(qp.rq_pi) & ((1 << qp.rq_log) - 1);
        self.write(qp.rq_buf + slot * RC_RQ_STRIDE, &w);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        self.write_be32(qp.sq.dbr, u32::from(qp.rq_pi));
    }
}

/// Two functions with RoCE enabled on a pair wire (A at [`GID_A`]/[`MAC_A`], B at
/// [`GID_B`]/[`MAC_B`]), each with one CQ, one UD QP (Q_Key [`UD_QKEY`]) and one GSI QP
/// (Q_Key [`QP1_QKEY`]), all in RTS.
pub struct UdPair {
    /// Side A.
    pub a: Host,
    /// Side B.
    pub b: Host,
    /// A's CQ (every completion of A's QPs).
    pub cq_a: Cq,
    /// B's CQ.
    pub cq_b: Cq,
    /// A's UD QP.
    pub ud_a: UdQp,
    /// B's UD QP.
    pub ud_b: UdQp,
    /// A's GSI QP.
    pub gsi_a: UdQp,
    /// B's GSI QP.
    pub gsi_b: UdQp,
    /// The wire between them.
    pub wire: Arc<Wire>,
}

impl UdPair {
    /// Two functions made from `cfg` (RoCE on, MACs set) with `mem` bytes of host memory each,
    /// CQs of `2^log_cq` entries, send rings of `2^log_sq` WQEBBs and receive rings of
    /// `2^log_rq` WQEs.
    pub fn new(cfg: EmuConfig, mem: usize, log_cq: u8, log_sq: u8, log_rq: u8) -> Self {
        let side = |mac| EmuConfig {
            roce: true,
            mac,
            ..cfg.clone()
        };
        let (da, db) = Device::pair(side(MAC_A), side(MAC_B));
        let (wire, _) = da.wire().expect("a pair is wired");
        let (mut a, mut b) = (Host::new(da, mem), Host::new(db, mem));
        a.bring_up();
        b.bring_up();
        a.enable_roce(GID_A, MAC_A);
        b.enable_roce(GID_B, MAC_B);
        let cq_a = a.create_cq(log_cq);
        let cq_b = b.create_cq(log_cq);
        let gsi_a = a.create_ud_qp(&cq_a, service_type::QP1, log_sq, log_rq);
        let gsi_b = b.create_ud_qp(&cq_b, service_type::QP1, log_sq, log_rq);
        let ud_a = a.create_ud_qp(&cq_a, service_type::UD, log_sq, log_rq);
        let ud_b = b.create_ud_qp(&cq_b, service_type::UD, log_sq, log_rq);
        for (h, gsi, ud) in [(&mut a, &gsi_a, &ud_a), (&mut b, &gsi_b, &ud_b)] {
            h.activate_ud(gsi.qpn, service_type::QP1, QP1_QKEY);
            h.activate_ud(ud.qpn, service_type::UD, UD_QKEY);
        }
        Self {
            a,
            b,
            cq_a,
            cq_b,
            ud_a,
            ud_b,
            gsi_a,
            gsi_b,
            wire,
        }
    }

    /// Lets both functions take what reached them until the wire is quiet (inline
    /// execution).
    pub fn settle(&self) {
        for _ in 0..4 {
            self.b.dev.poll();
            self.a.dev.poll();
        }
    }

    /// Sends one datagram of `data` (at most 4096 bytes, gathered from a fresh page of A's
    /// through a fresh key) from A's UD QP to B's QP `dest_qpn` (Q_Key [`UD_QKEY`]) and
    /// settles the pair: A's completions.
    pub fn send_from_a(&mut self, dest_qpn: u32, data: &[u8]) -> Vec<Vec<u8>> {
        let lkey = self.a.create_mkey(false, true);
        let src = self.a.alloc(4096, 4096);
        self.a.write(src, data);
        let av = UdAv::to(GID_B, MAC_B, dest_qpn, UD_QKEY);
        let w = ud_wqe(
            &self.ud_a.sq,
            opcode::SEND,
            0,
            &av,
            &[(src, lkey, data.len() as u32)],
        );
        self.a.post(&mut self.ud_a.sq, &w, false);
        self.settle();
        std::iter::from_fn(|| self.a.poll_cq(&mut self.cq_a)).collect()
    }

    /// Destroys every QP and tears both functions down (every page returned).
    pub fn teardown(mut self) {
        for qpn in [self.ud_a.qpn, self.gsi_a.qpn] {
            self.a.destroy_qp(qpn);
        }
        for qpn in [self.ud_b.qpn, self.gsi_b.qpn] {
            self.b.destroy_qp(qpn);
        }
        self.a.teardown();
        self.b.teardown();
    }
}
