//! RoCE v2 reliable connections for the test host: RoCE on the vport with a GID, RC QPs moved
//! to RTS over a path, remote memory keys, RC WQEs built byte by byte, and two functions on a
//! pair wire with one connected QP each ([`RcPair`](super::rc_pair::RcPair)), for tests, fuzzing and benchmarks.

use super::{CmdFail, Cq, Host, Sq};
use crate::wire::{PortId, Wire};
use crate::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_PA};
use cxdirect_hw::qp::{
    mtu, rq_type, service_type, CreateQpIn, CreateQpOut, Qp2errIn, Qpc, Rst2initQpIn,
};
use cxdirect_hw::roce::{l3_type, roce_version, SetRoceAddressIn};
use cxdirect_hw::vport::ModifyNicVportContextIn;
use cxdirect_hw::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, INVALID_LKEY};
use std::sync::Arc;

/// GID of side A of an [`RcPair`](super::rc_pair::RcPair): IPv4-mapped 10.0.0.1.
pub const GID_A: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
/// GID of side B of an [`RcPair`](super::rc_pair::RcPair): IPv4-mapped 10.0.0.2.
pub const GID_B: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
/// MAC of side A of an [`RcPair`](super::rc_pair::RcPair).
pub const MAC_A: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 1];
/// MAC of side B of an [`RcPair`](super::rc_pair::RcPair).
pub const MAC_B: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 2];
/// Port MTU (PMTU `admin_mtu`, bytes with the Ethernet header and FCS) an [`RcPair`](super::rc_pair::RcPair) sets
/// when its path MTU is above 1024 bytes: 9000-byte jumbo frames.
pub const JUMBO_PORT_MTU: u16 = 9018;
/// UDP source port of a path made by [`RcPath::to`].
pub const UDP_SPORT: u16 = 0xc123;
/// Bytes of one receive WQE of a QP's own ring ([`Host::create_rc_qp`]): four data segments.
pub const RC_RQ_STRIDE: u64 = 64;

/// An RC QP made by [`Host::create_rc_qp`].
pub struct RcQp {
    /// QP number.
    pub qpn: u32,
    /// Its send ring (`sqn` is the QPN; the doorbell record's send counter is at `dbr + 4`).
    pub sq: Sq,
    /// IOVA of its own receive ring ([`RC_RQ_STRIDE`]-byte WQEs), when it has one.
    pub rq_buf: Option<u64>,
    /// Log2 of the receive ring's entries.
    pub rq_log: u8,
    /// Receive WQEs posted on its own ring (the doorbell record's receive counter).
    pub rq_pi: u16,
    /// The RMP it takes receive WQEs from instead, when it has one.
    pub srq: Option<u32>,
}

/// Where an RC QP's path leads, and its transport parameters.
#[derive(Debug, Clone, Copy)]
pub struct RcPath {
    /// Index of the local GID ([`Host::enable_roce`] sets index 0).
    pub gid_index: u8,
    /// The peer's GID.
    pub peer_gid: [u8; 16],
    /// The peer's MAC.
    pub peer_mac: [u8; 6],
    /// The peer QP's number.
    pub remote_qpn: u32,
    /// Path MTU code ([`mtu`]).
    pub mtu_code: u8,
    /// First PSN sent (24 bits).
    pub send_psn: u32,
    /// First PSN expected (24 bits).
    pub receive_psn: u32,
    /// Retransmissions after an ACK timeout (0..=7).
    pub retry_count: u8,
    /// RNR NAKs accepted (0..=7, 7 without limit).
    pub rnr_retry: u8,
    /// Local ACK timeout code: 4.096 us << code (0..=31).
    pub ack_timeout: u8,
    /// RNR timer code the QP's RNR NAKs ask for (0..=31).
    pub min_rnr_nak: u8,
    /// READs and atomics outstanding at once as requester: `2^log_sra_max` (0..=7; the
    /// device holds back further ones until a response retires one).
    pub log_sra_max: u8,
    /// READs and atomics accepted outstanding at once as responder: `2^log_rra_max` (0..=7).
    pub log_rra_max: u8,
    /// UDP source port of the QP's packets.
    pub udp_sport: u16,
    /// Ethernet priority of the QP's packets (0..=7: `ads.eth_prio`, where mlx5_ib writes
    /// the address handle's SL).
    pub prio: u8,
}

impl RcPath {
    /// A path to `remote_qpn` at `peer_gid`/`peer_mac`, MTU 1024, PSNs from 0, seven retries,
    /// RNR retries without limit, an ACK timeout of about 4.4 s, the shortest RNR timer, one
    /// READ or atomic outstanding each way, UDP source port [`UDP_SPORT`] and priority 0.
    pub fn to(peer_gid: [u8; 16], peer_mac: [u8; 6], remote_qpn: u32) -> Self {
        Self {
            gid_index: 0,
            peer_gid,
            peer_mac,
            remote_qpn,
            mtu_code: mtu::MTU_1024,
            send_psn: 0,
            receive_psn: 0,
            retry_count: 7,
            rnr_retry: 7,
            ack_timeout: 20,
            min_rnr_nak: 1,
            log_sra_max: 0,
            log_rra_max: 0,
            udp_sport: UDP_SPORT,
            prio: 0,
        }
    }
}

/// Remote rights of a memory key made by [`Host::create_remote_mkey`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoteRights {
    /// RDMA READ.
    pub read: bool,
    /// RDMA WRITE.
    pub write: bool,
    /// Atomics.
    pub atomic: bool,
}

impl RemoteRights {
    /// RDMA READ and WRITE, no atomics.
    pub const READ_WRITE: Self = Self {
        read: true,
        write: true,
        atomic: false,
    };
}

impl Host {
    /// Sets `roce_en` on the vport and GID index 0 to `gid` (RoCE v2; IPv4 when the GID is
    /// IPv4-mapped, else IPv6) with source MAC `mac`.
    pub fn enable_roce(&mut self, gid: [u8; 16], mac: [u8; 6]) {
        let mut input = Self::input(Opcode::ModifyNicVportContext, 0, 0x200);
        let mut cmd = ModifyNicVportContextIn::new(&mut input[..]).expect("layout");
        cmd.field_select_mut().set_roce_en(true);
        cmd.nic_vport_context_mut().set_roce_en(true);
        self.exec(&input, 16)
            .expect("MODIFY_NIC_VPORT_CONTEXT roce_en");
        self.set_roce_gid(0, gid, mac);
    }

    /// SET_ROCE_ADDRESS: GID index `index` to `gid` (RoCE v2; IPv4 when the GID is
    /// IPv4-mapped, else IPv6) with source MAC `mac`.
    pub fn set_roce_gid(&mut self, index: u16, gid: [u8; 16], mac: [u8; 6]) {
        let v4 = gid[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        let mut input = Self::input(Opcode::SetRoceAddress, 0, 0x30);
        let mut cmd = SetRoceAddressIn::new(&mut input[..]).expect("layout");
        cmd.set_roce_address_index(index).set_vhca_port_num(1);
        cmd.roce_address_mut()
            .set_gid(gid)
            .set_source_mac(mac)
            .set_roce_l3_type(if v4 { l3_type::IPV4 } else { l3_type::IPV6 })
            .set_roce_version(roce_version::V2);
        self.exec(&input, 16).expect("SET_ROCE_ADDRESS");
    }

    /// CREATE_QP (RC, in the host's PD, completions on `cq`): a `2^log_sq`-WQEBB send ring
    /// and either a `2^log_rq`-entry receive ring of its own or receives from RMP `srq`.
    pub fn create_rc_qp(&mut self, cq: &Cq, log_sq: u8, log_rq: u8, srq: Option<u32>) -> RcQp {
        self.create_connected_qp(service_type::RC, cq, log_sq, log_rq, srq)
    }

    /// [`Host::create_rc_qp`] with service type `st` (RC or UC, `service_type`).
    pub fn create_connected_qp(
        &mut self,
        st: u8,
        cq: &Cq,
        log_sq: u8,
        log_rq: u8,
        srq: Option<u32>,
    ) -> RcQp {
        self.try_create_connected_qp(st, cq, (log_sq, log_rq), srq, |_| {})
            .expect("CREATE_QP")
    }

    /// [`Host::create_connected_qp`] with the context changed by `fill` after the usual fields
    /// are set; `logs` are the send and receive ring sizes (log2). The command's failure is
    /// returned.
    pub fn try_create_connected_qp(
        &mut self,
        st: u8,
        cq: &Cq,
        (log_sq, log_rq): (u8, u8),
        srq: Option<u32>,
        fill: impl FnOnce(&mut Qpc<&mut [u8]>),
    ) -> Result<RcQp, CmdFail> {
        let rq_bytes = if srq.is_some() {
            0
        } else {
            RC_RQ_STRIDE << log_rq
        };
        let size = (rq_bytes + (64u64 << log_sq)).next_multiple_of(4096);
        let buf = self.alloc(size, 4096);
        let dbr = self.alloc(8, 64);
        let pages = (size / 4096) as usize;
        let mut input = Self::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
        let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
        cmd.qpc_mut()
            .set_st(st)
            .set_pm_state(3)
            .set_user_index(self.next_user_index)
            .set_pd(self.pd)
            .set_uar_page(self.uar)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_rq_type(srq.map_or(rq_type::REGULAR, |_| rq_type::SRQ))
            .set_srqn_rmpn_xrqn(srq.unwrap_or(0))
            .set_log_rq_size(log_rq)
            .set_log_rq_stride(2)
            .set_log_sq_size(log_sq)
            .set_log_msg_max(30)
            .set_ts_format(1)
            .set_dbr_addr(dbr);
        fill(&mut cmd.qpc_mut());
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        self.next_user_index += 1;
        let out = self.exec(&input, 16)?;
        let qpn = CreateQpOut::new(&out[..]).expect("layout").qpn();
        Ok(RcQp {
            qpn,
            sq: Sq {
                sqn: qpn,
                buf: buf + rq_bytes,
                dbr,
                log: log_sq,
                pi: 0,
                bf_toggle: false,
            },
            rq_buf: srq.is_none().then_some(buf),
            rq_log: log_rq,
            rq_pi: 0,
            srq,
        })
    }

    /// The REG_UMR QP as Linux's `mlx5r_umr_resource_init` opens it (service type 0xc, no
    /// receive queue, send and receive CQ `cq`, `2^log_sq` WQEBBs; no PD, as
    /// `create_qp_common` leaves `pd` zero and sets `latency_sensitive` for it), taken to RTS
    /// as `mlx5r_umr_qp_rst2rts` does: RST2INIT with port 1, INIT2RTR and RTR2RTS with nothing
    /// but the MTU (4096) and `log_msg_max` (12) mlx5_ib writes for this QP type.
    pub fn create_reg_umr_qp(&mut self, cq: &Cq, log_sq: u8) -> Sq {
        let size = (64u64 << log_sq).next_multiple_of(4096);
        let buf = self.alloc(size, 4096);
        let dbr = self.alloc(8, 64);
        let pages = (size / 4096) as usize;
        let mut input = Self::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
        let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
        cmd.qpc_mut()
            .set_st(service_type::REG_UMR)
            .set_pm_state(3)
            .set_latency_sensitive(true)
            .set_uar_page(self.uar)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_rq_type(rq_type::ZERO_LEN)
            .set_log_sq_size(log_sq)
            .set_ts_format(1)
            .set_dbr_addr(dbr);
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        let out = self.exec(&input, 16).expect("CREATE_QP REG_UMR");
        let qpn = CreateQpOut::new(&out[..]).expect("layout").qpn();
        self.modify_qp(Opcode::Rst2initQp, qpn, |q| {
            q.primary_address_path_mut().set_vhca_port_num(1);
        });
        for op in [Opcode::Init2rtrQp, Opcode::Rtr2rtsQp] {
            self.modify_qp(op, qpn, |q| {
                q.set_mtu(mtu::MTU_4096).set_log_msg_max(12);
            });
        }
        Sq {
            sqn: qpn,
            buf,
            dbr,
            log: log_sq,
            pi: 0,
            bf_toggle: false,
        }
    }

    /// RST2INIT (remote read, write and atomics enabled), INIT2RTR over `path`, RTR2RTS.
    pub fn connect_rc(&mut self, qpn: u32, path: &RcPath) {
        self.connect_rc_then(qpn, path, |_| {});
    }
    /// [`Host::connect_rc`] with `in_init` run while the QP is in INIT (a test's INIT2INIT).
    pub fn connect_rc_then(&mut self, qpn: u32, path: &RcPath, in_init: impl FnOnce(&mut Self)) {
        self.modify_qp(Opcode::Rst2initQp, qpn, |c| {
            c.set_rre(true).set_rwe(true).set_rae(true);
            c.primary_address_path_mut().set_vhca_port_num(1);
        });
        in_init(self);
        self.modify_qp(Opcode::Init2rtrQp, qpn, |c| {
            c.set_mtu(path.mtu_code)
                .set_log_msg_max(30)
                .set_remote_qpn(path.remote_qpn)
                .set_min_rnr_nak(path.min_rnr_nak)
                .set_log_rra_max(path.log_rra_max)
                .set_next_rcv_psn(path.receive_psn);
            c.primary_address_path_mut()
                .set_vhca_port_num(1)
                .set_src_addr_index(path.gid_index)
                .set_rgid(path.peer_gid)
                .set_rmac(path.peer_mac)
                .set_udp_sport(path.udp_sport)
                .set_eth_prio(path.prio)
                .set_hop_limit(64);
        });
        self.modify_qp(Opcode::Rtr2rtsQp, qpn, |c| {
            c.set_next_send_psn(path.send_psn)
                .set_retry_count(path.retry_count)
                .set_rnr_retry(path.rnr_retry)
                .set_log_sra_max(path.log_sra_max);
            c.primary_address_path_mut()
                .set_vhca_port_num(1)
                .set_ack_timeout(path.ack_timeout);
        });
    }

    /// A QP state transition command `opcode` on `qpn`, its QP context filled by `fill`.
    pub fn modify_qp(&mut self, opcode: Opcode, qpn: u32, fill: impl FnOnce(&mut Qpc<&mut [u8]>)) {
        let mut input = Self::input(opcode, 0, 0x110);
        let mut cmd = Rst2initQpIn::new(&mut input[..]).expect("layout");
        cmd.set_qpn(qpn);
        fill(&mut cmd.qpc_mut());
        self.exec(&input, 16).expect("QP transition");
    }

    /// DESTROY_QP.
    pub fn destroy_qp(&mut self, qpn: u32) {
        let mut input = Self::input(Opcode::DestroyQp, 0, 0x10);
        Qp2errIn::new(&mut input[..]).expect("layout").set_qpn(qpn);
        self.exec(&input, 16).expect("DESTROY_QP");
    }

    /// A PA memory key in `pd` over `len` bytes from IOVA `start`, with local read and write
    /// and the remote `rights`; `variant` is the key's low byte. The key may be invalidated
    /// remotely (`en_rinval`).
    pub fn create_remote_mkey(
        &mut self,
        pd: u32,
        start: u64,
        len: u64,
        rights: RemoteRights,
        variant: u8,
    ) -> u32 {
        let mut input = Self::input(Opcode::CreateMkey, 0, 0x110);
        let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
        cmd.memory_key_mkey_entry_mut()
            .set_access_mode(MKC_ACCESS_MODE_PA)
            .set_lr(true)
            .set_lw(true)
            .set_rr(rights.read)
            .set_rw(rights.write)
            .set_a(rights.atomic)
            .set_en_rinval(true)
            .set_pd(pd)
            .set_qpn(0xff_ffff)
            .set_mkey_7_0(variant)
            .set_start_addr(start)
            .set_len(len);
        let out = self.exec(&input, 16).expect("CREATE_MKEY");
        mkey_from_index(
            CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
            variant,
        )
    }

    /// Posts a one-segment receive WQE (`len` bytes at `addr` through `lkey`) on the QP's own
    /// receive ring and updates the doorbell record's receive counter.
    pub fn post_rc_recv(&self, qp: &mut RcQp, addr: u64, len: u32, lkey: u32) {
        let ring = qp.rq_buf.expect("the QP has its own receive ring");
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
        self.write(ring + slot * RC_RQ_STRIDE, &w);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        self.write_be32(qp.sq.dbr, u32::from(qp.rq_pi));
    }
}

/// A one-WQEBB RC send WQE of `op` asking for a completion: the control segment (immediate
/// `imm`), a remote address segment when `remote` (address, rkey) is given, an atomic segment
/// when `atomic` (swap or add, compare) is, then the data segment `local` (address, lkey,
/// bytes).
pub fn rc_wqe(
    sq: &Sq,
    op: u8,
    imm: u32,
    remote: Option<(u64, u32)>,
    atomic: Option<(u64, u64)>,
    local: (u64, u32, u32),
) -> [u8; 64] {
    let mut w = [0u8; 64];
    let mut at = 16;
    if let Some((raddr, rkey)) = remote {
        RaddrSeg::new(&mut w[at..at + 16])
            .expect("layout")
            .set_raddr(raddr)
            .set_rkey(rkey);
        at += 16;
    }
    if let Some((swap_add, compare)) = atomic {
        AtomicSeg::new(&mut w[at..at + 16])
            .expect("layout")
            .set_swap_add(swap_add)
            .set_compare(compare);
        at += 16;
    }
    DataSeg::new(&mut w[at..at + 16])
        .expect("layout")
        .set_byte_count(local.2)
        .set_lkey(local.1)
        .set_addr(local.0);
    at += 16;
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds((at / 16) as u8)
        .set_ce(2)
        .set_imm(imm);
    w
}

/// A function made from `cfg` (RoCE turned on) with `mem` bytes of host memory, brought up
/// with RoCE enabled at `gid`/`mac`, alone on port A of a pair wire whose port B nobody takes
/// from: every frame it sends waits there, for [`take_frames`].
pub fn lone_host(cfg: EmuConfig, mem: usize, gid: [u8; 16], mac: [u8; 6]) -> (Host, Arc<Wire>) {
    let dev = Device::new(EmuConfig { roce: true, ..cfg });
    let wire = Arc::new(Wire::pair());
    dev.attach(wire.clone(), PortId::A, &[]);
    let mut h = Host::new(dev, mem);
    h.bring_up();
    h.enable_roce(gid, mac);
    (h, wire)
}

/// Every frame waiting at port B of `wire`, oldest first.
pub fn take_frames(wire: &Wire) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    loop {
        let mut frame = Vec::new();
        if !wire.receive(PortId::B, &mut frame).expect("port B") {
            return frames;
        }
        frames.push(frame);
    }
}
