//! What the DC tests share: DCTs, DCIs and DC WQEs as mlx5_ib and libmlx5 make them, and two
//! functions wired with a DCI on one and two DCTs on an RMP on the other ([`Rig`]). Each test
//! file uses part of it.
#![allow(dead_code, unused_imports)]

pub use cxdirect_emu::testkit::rc::{RemoteRights, GID_A, GID_B, MAC_A, MAC_B};
pub use cxdirect_emu::testkit::{CmdFail, Cq, Host, Rq, Sq};
pub use cxdirect_emu::wire::{PortId, Wire};
pub use cxdirect_emu::{Device, EmuConfig, Syndrome};
pub use cxdirect_hw::caps::CmdHcaCap;
pub use cxdirect_hw::cmd::{CmdStatus, Opcode};
pub use cxdirect_hw::dct::{
    self, CreateDctIn, CreateDctOut, DestroyDctIn, DrainDctIn, QueryDctIn, QueryDctOut,
};
pub use cxdirect_hw::eqe::{EventType, EQE_DCT_NUMBER_OFFSET};
pub use cxdirect_hw::hca::cap_type;
pub use cxdirect_hw::qp::{
    mtu, qpc_opt_mask_32, rq_type, service_type, state, CreateQpIn, CreateQpOut, QpcExt, QueryQpIn,
    QueryQpOut, Rts2rtsQpIn, RTS2RTS_QPC_EXT_BYTE,
};
pub use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg};
pub use cxdirect_hw::Layout;
pub use std::sync::Arc;

pub const MEM: usize = 4 << 20;
/// perftest's DC access key (`DC_KEY` in perftest_resources.h).
pub const KEY: u64 = 0xffee_ddcc;
/// User index mlx5_ib gives the DCT (libmlx5 stores it to find the DCT from its CQEs).
pub const DCT_UIDX: u32 = 0x77;
/// Log2 of the RMP's WQEs.
pub const RMP_LOG: u8 = 4;

/// CREATE_DCT with the context as mlx5_ib has it once `mlx5_ib_modify_dct` took it to RTR:
/// PD, SRQ, CQ, access key and user index (`create_dct`); remote read, write and atomic
/// access, P_Key index 0, port 1 (RESET to INIT); RNR timer 12, MTU 1024, GID index 0, hop
/// limit 64 (INIT to RTR).
pub fn create_dct(h: &mut Host, cqn: u32, srqn: u32, key: u64) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateDct, 0, 0x80);
    let mut cmd = CreateDctIn::new(&mut input[..]).unwrap();
    cmd.dct_context_entry_mut()
        .set_pd(h.pd)
        .set_srqn_xrqn(srqn)
        .set_cqn(cqn)
        .set_dc_access_key(key)
        .set_user_index(DCT_UIDX)
        .set_rre(true)
        .set_rwe(true)
        .set_rae(true)
        .set_atomic_mode(3)
        .set_pkey_index(0)
        .set_port(1)
        .set_min_rnr_nak(12)
        .set_mtu(mtu::MTU_1024)
        .set_my_addr_index(0)
        .set_hop_limit(64);
    let out = h.exec(&input, 0x10)?;
    Ok(CreateDctOut::new(&out[..]).unwrap().dctn())
}

pub fn drain_dct(h: &mut Host, dctn: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DrainDct, 0, 0x10);
    DrainDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    h.exec(&input, 0x10).map(|_| ())
}

pub fn destroy_dct(h: &mut Host, dctn: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DestroyDct, 0, 0x10);
    DestroyDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    h.exec(&input, 0x10).map(|_| ())
}

/// QUERY_DCT as `mlx5_core_dct_query` sends it: the state and the key violation count.
pub fn query_dct(h: &mut Host, dctn: u32) -> Result<(u8, u32, u64), CmdFail> {
    let mut input = Host::input(Opcode::QueryDct, 0, 0x10);
    QueryDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    let out = h.exec(&input, 0x80)?;
    let out = QueryDctOut::new(&out[..]).unwrap();
    let ctx = out.dct_context_entry();
    Ok((
        ctx.state(),
        ctx.dc_access_key_violation_count(),
        ctx.dc_access_key(),
    ))
}

/// CREATE_QP of a DCI as `create_user_qp` fills it for `MLX5_IB_QPT_DCI`: service type DCI, a
/// send ring, a zero-length receive queue (a DCI has none: `mlx5_ib_create_qp` refuses
/// `max_recv_wr`), then RST2INIT (port 1), INIT2RTR (path MTU, the address vector perftest
/// gives, no destination QP) and RTR2RTS (timeout, retries, PSN, `max_rd_atomic`).
pub fn create_dci(h: &mut Host, cq: &Cq, log_sq: u8) -> Sq {
    create_dci_with(h, cq, log_sq, None).expect("CREATE_QP DCI")
}

/// [`create_dci`], with DCI streams when `streams` names them: `(log_num_concurent,
/// log_num_errored)` as mlx5_ib's `create_dci` writes them for `MLX5_QP_FLAG_DCI_STREAM`
/// (`log_num_dci_stream_channels`, `log_num_dci_errored_streams`). CREATE_QP's failure is
/// returned.
pub fn create_dci_with(
    h: &mut Host,
    cq: &Cq,
    log_sq: u8,
    streams: Option<(u8, u8)>,
) -> Result<Sq, CmdFail> {
    let size = (64u64 << log_sq).next_multiple_of(4096);
    let buf = h.alloc(size, 4096);
    let dbr = h.alloc(8, 64);
    let pages = (size / 4096) as usize;
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
    let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
    let uidx = h.next_user_index;
    h.next_user_index += 1;
    cmd.qpc_mut()
        .set_st(service_type::DCI)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_user_index(uidx)
        .set_ts_format(1)
        .set_rq_type(rq_type::ZERO_LEN)
        .set_log_sq_size(log_sq)
        .set_log_msg_max(30)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_dbr_addr(dbr);
    if let Some((channels, errored)) = streams {
        cmd.qpc_mut()
            .set_log_num_dci_stream_channels(channels)
            .set_log_num_dci_errored_streams(errored);
    }
    for i in 0..pages {
        cmd.set_pas(i, buf + i as u64 * 4096).unwrap();
    }
    let out = h.exec(&input, 16)?;
    let qpn = CreateQpOut::new(&out[..]).unwrap().qpn();
    h.modify_qp(Opcode::Rst2initQp, qpn, |c| {
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    h.modify_qp(Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(mtu::MTU_1024).set_log_msg_max(30);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_src_addr_index(0)
            .set_rgid(GID_B)
            .set_rmac(MAC_B)
            .set_hop_limit(64);
    });
    h.modify_qp(Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_next_send_psn(0x10)
            .set_retry_count(7)
            .set_rnr_retry(7)
            .set_log_sra_max(2);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_ack_timeout(14);
    });
    Ok(Sq {
        sqn: qpn,
        buf,
        dbr,
        log: log_sq,
        pi: 0,
        bf_toggle: false,
    })
}

/// `mlx5dv_dci_stream_id_reset` as rdma-core sends it (through DEVX): RTS2RTS_QP with
/// `qpc_ext`, `MLX5_QPC_OPT_MASK_32_DCI_STREAM_CHANNEL_ID` in `opt_param_mask_95_32` and the
/// stream in the context extension's `dci_stream_channel_id`.
pub fn reset_stream(h: &mut Host, qpn: u32, stream: u16) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, RTS2RTS_QPC_EXT_BYTE + 0xc0);
    Rts2rtsQpIn::new(&mut input[..])
        .unwrap()
        .set_qpn(qpn)
        .set_qpc_ext(true)
        .set_opt_param_mask_95_32(qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID);
    QpcExt::new(&mut input[RTS2RTS_QPC_EXT_BYTE..])
        .unwrap()
        .set_dci_stream_channel_id(stream);
    h.exec(&input, 0x10).map(|_| ())
}

/// QUERY_QP: the QP's state (`cxdirect_hw::qp::state`).
pub fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let mut input = Host::input(Opcode::QueryQp, 0, QueryQpIn::<&[u8]>::SIZE);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qpn);
    let out = h.exec(&input, QueryQpOut::<&[u8]>::SIZE).expect("QUERY_QP");
    QueryQpOut::new(&out[..]).unwrap().qpc().state()
}

/// ARM_DCT_FOR_KEY_VIOLATION: the DCT number where DRAIN_DCT has it (mlx5_ib's devx.c reads
/// it with `drain_dct_in`'s layout).
pub fn arm_dct(h: &mut Host, dctn: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::ArmDctForKeyViolation, 0, 0x10);
    DrainDctIn::new(&mut input[..]).unwrap().set_dctn(dctn);
    h.exec(&input, 0x10).map(|_| ())
}

/// Where a DC WQE goes: the DCT, its key, and its function's GID and MAC.
#[derive(Clone, Copy)]
pub struct DcAddr {
    pub dct: u32,
    pub key: u64,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// A DCI send WQE as libmlx5 builds it (`ibv_wr_send` / `ibv_wr_rdma_write` /
/// `ibv_wr_rdma_read`, then `mlx5dv_wr_set_dc_addr` and `ibv_wr_set_sge`): control segment,
/// the address vector (`set_dc_addr`: the AH's vector, the DCT with `MLX5_EXTENDED_UD_AV`,
/// the key), the remote-address segment for RDMA, one data segment; two WQEBBs.
pub fn dc_wqe(
    sq: &Sq,
    op: u8,
    to: DcAddr,
    remote: Option<(u64, u32)>,
    local: (u64, u32, u32),
) -> [u8; 128] {
    let mut w = [0u8; 128];
    {
        let mut av = DatagramSeg::new(&mut w[16..64]).unwrap();
        av.set_dc_key(to.key)
            .set_extended(true)
            .set_dest_qpn(to.dct)
            .set_udp_sport(0xc0de)
            .set_hop_limit(64)
            .set_grh(true)
            .set_sgid_index(0)
            .set_rmac(to.mac)
            .set_dgid(to.gid);
    }
    let mut at = 64;
    if let Some((raddr, rkey)) = remote {
        RaddrSeg::new(&mut w[at..at + 16])
            .unwrap()
            .set_raddr(raddr)
            .set_rkey(rkey);
        at += 16;
    }
    DataSeg::new(&mut w[at..at + 16])
        .unwrap()
        .set_byte_count(local.2)
        .set_lkey(local.1)
        .set_addr(local.0);
    at += 16;
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds((at / 16) as u8)
        .set_ce(2);
    w
}

pub struct Rig {
    pub a: Host,
    pub b: Host,
    pub _wire: Arc<Wire>,
    /// A's CQ (the DCI's completions).
    pub cq_a: Cq,
    pub dci: Sq,
    /// B's CQ (the DCTs' receives), its RMP and two DCTs on it.
    pub cq_b: Cq,
    pub rmp: Rq,
    pub dcts: [u32; 2],
    pub lkey_a: u32,
    pub lkey_b: u32,
    /// B's memory open to remote read and write, and its key.
    pub remote: (u64, u32),
}

pub fn hosts() -> (Host, Host, Arc<Wire>) {
    hosts_with(false)
}

/// [`hosts`], reporting on-demand paging with `odp` (their async EQs taking every event, page
/// faults included).
pub fn hosts_with(odp: bool) -> (Host, Host, Arc<Wire>) {
    let cfg = |mac| EmuConfig {
        roce: true,
        odp,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = (Device::new(cfg(MAC_A)), Device::new(cfg(MAC_B)));
    let wire = Arc::new(Wire::pair());
    da.attach(wire.clone(), PortId::A, &[&db]);
    db.attach(wire.clone(), PortId::B, &[&da]);
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.bring_up();
    b.bring_up();
    a.enable_roce(GID_A, MAC_A);
    b.enable_roce(GID_B, MAC_B);
    (a, b, wire)
}

pub fn rig() -> Rig {
    rig_with(false)
}

/// [`rig`] on [`hosts_with`]`(odp)`.
pub fn rig_with(odp: bool) -> Rig {
    rig_of(odp, None)
}

/// [`rig`] whose DCI has streams (`(log_num_concurent, log_num_errored)`).
pub fn rig_streams(channels: u8, errored: u8) -> Rig {
    rig_of(false, Some((channels, errored)))
}

fn rig_of(odp: bool, streams: Option<(u8, u8)>) -> Rig {
    let (mut a, mut b, wire) = hosts_with(odp);
    let cq_a = a.create_cq(5);
    let dci = create_dci_with(&mut a, &cq_a, 5, streams).expect("CREATE_QP DCI");
    let cq_b = b.create_cq(5);
    let (srqn, rmp) = b.create_rmp(RMP_LOG, 0);
    let dcts = [
        create_dct(&mut b, cq_b.cqn, srqn, KEY).expect("CREATE_DCT"),
        create_dct(&mut b, cq_b.cqn, srqn, KEY + 1).expect("CREATE_DCT"),
    ];
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let at = b.alloc(4096, 4096);
    let pd = b.pd;
    let rkey = b.create_remote_mkey(
        pd,
        at,
        4096,
        RemoteRights {
            read: true,
            write: true,
            atomic: false,
        },
        0x5a,
    );
    Rig {
        a,
        b,
        _wire: wire,
        cq_a,
        dci,
        cq_b,
        rmp,
        dcts,
        lkey_a,
        lkey_b,
        remote: (at, rkey),
    }
}

impl Rig {
    pub fn to(&self, which: usize) -> DcAddr {
        DcAddr {
            dct: self.dcts[which],
            key: KEY + which as u64,
            gid: GID_B,
            mac: MAC_B,
        }
    }

    pub fn settle(&self) {
        for _ in 0..8 {
            self.b.dev.poll();
            self.a.dev.poll();
        }
    }

    /// Runs both functions past the DCI's RNR timer until `done` holds (at most a second).
    pub fn settle_until(&mut self, done: impl FnMut(&mut Rig) -> bool) -> bool {
        cxdirect_emu::testkit::poll::settle_until(self, |r| r.settle(), done)
    }

    /// A's completions (`on_a`, the DCI's) or B's, waiting past RNR timers for the first.
    pub fn completions_after_rnr(&mut self, on_a: bool) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        self.settle_until(|r| {
            let (h, cq) = if on_a {
                (&r.a, &mut r.cq_a)
            } else {
                (&r.b, &mut r.cq_b)
            };
            got.extend(std::iter::from_fn(|| h.poll_cq(cq)));
            !got.is_empty()
        });
        got
    }

    /// Posts a receive of `len` bytes on B's RMP; returns where it lands.
    pub fn post_recv(&mut self, len: u32) -> u64 {
        let at = self.b.alloc(u64::from(len), 64);
        let lkey = self.lkey_b;
        self.b.post_recv(&mut self.rmp, at, len, lkey);
        at
    }

    /// Posts a DCI WQE of `op` to `to` with `data` (or room for `data.len()` bytes).
    pub fn post(&mut self, op: u8, to: DcAddr, remote: Option<(u64, u32)>, data: &[u8]) -> u64 {
        self.post_on(0, op, to, remote, data)
    }

    /// [`Rig::post`] on DCI stream `stream` (`mlx5dv_wr_set_dc_addr_stream`: the stream in
    /// the control segment's `dci_stream_channel_id`).
    pub fn post_on(
        &mut self,
        stream: u16,
        op: u8,
        to: DcAddr,
        remote: Option<(u64, u32)>,
        data: &[u8],
    ) -> u64 {
        let at = self.a.alloc(data.len() as u64, 64);
        self.a.write(at, data);
        let mut w = dc_wqe(
            &self.dci,
            op,
            to,
            remote,
            (at, self.lkey_a, data.len() as u32),
        );
        CtrlSeg::new(&mut w[..16])
            .unwrap()
            .set_dci_stream_channel_id(stream);
        self.a.post(&mut self.dci, &w, false);
        at
    }
}

pub fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

pub fn byte_cnt(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x2c..0x30].try_into().unwrap())
}

pub fn srqn_uidx(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x20..0x24].try_into().unwrap()) & 0x00ff_ffff
}

pub fn cqe_qpn(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x38..0x3c].try_into().unwrap()) & 0x00ff_ffff
}

pub fn syndrome(cqe: &[u8]) -> u8 {
    cqe[0x37]
}

/// CQE opcodes (`MLX5_CQE_*`).
pub const REQ: u8 = 0x0;
pub const RESP_SEND: u8 = 0x2;
pub const REQ_ERR: u8 = 0xd;
/// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`.
pub const REMOTE_ACCESS_ERR: u8 = 0x13;
/// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`.
pub const WR_FLUSH_ERR: u8 = 0x05;
/// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`.
pub const LOCAL_QP_OP_ERR: u8 = 0x02;
