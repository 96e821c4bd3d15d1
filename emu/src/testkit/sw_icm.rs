//! SW ICM as Linux and rdma-core's software steering use it, for the tests of SW ICM and of
//! the steering entries written there: the device-memory page's ranges as mlx5_core's
//! `mlx5_dm_create` reads them, SW_ICM general objects as `mlx5_dm_sw_icm_alloc` /
//! `mlx5_dm_sw_icm_dealloc` send them, access mode SW_ICM keys as mlx5_ib's
//! `mlx5_ib_get_dm_mr` creates them, and dr_send.c's ring: an RC QP connected to itself over a
//! force-loopback path, writing with an RDMA WRITE and reading back with an RDMA READ.

use super::umr::{cqe_opcode, drain};
use super::{CmdFail, Cq, Host, Sq};
use crate::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::general_obj::{obj_type, GeneralObjOutCmdHdr};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::memic::DeviceMemCap;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut};
use cxdirect_hw::sw_icm::CreateSwIcmIn;
use cxdirect_hw::wqe::{self, opcode, CtrlSeg, DataSeg, RaddrSeg, INLINE_SEG};

/// The ring's GID (IPv4-mapped 10.0.0.1), which RoCE needs enabled.
pub const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];

/// The SW ICM fields of the device-memory page (current), as mlx5_core reads them.
pub struct Ranges {
    /// Steering entries' range: ICM address and log2 of its bytes.
    pub steering: (u64, u8),
    /// Modify-header actions' range.
    pub header_modify: (u64, u8),
    /// Modify-header patterns' range.
    pub pattern: (u64, u8),
    /// Log2 of the allocation granularity, in bytes.
    pub granularity: u8,
}

/// Reads the ranges from the device-memory page.
pub fn ranges(h: &mut Host) -> Ranges {
    let page = h.query_cap(cap_type::DEVICE_MEM, true);
    let dm = DeviceMemCap::new(&page[0x10..]).expect("layout");
    assert_eq!(dm.log_indirect_encap_sw_icm_size(), 0);
    Ranges {
        steering: (
            dm.steering_sw_icm_start_address(),
            dm.log_steering_sw_icm_size(),
        ),
        header_modify: (
            dm.header_modify_sw_icm_start_address(),
            dm.log_header_modify_sw_icm_size(),
        ),
        pattern: (
            dm.header_modify_pattern_sw_icm_start_address(),
            dm.log_header_modify_pattern_sw_icm_size(),
        ),
        granularity: dm.log_sw_icm_alloc_granularity(),
    }
}

/// CREATE_GENERAL_OBJECT of type SW_ICM as `mlx5_dm_sw_icm_alloc` fills it.
pub fn create(h: &mut Host, uid: u16, start: u64, log_size: u8) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateGeneralObject, 0, 0x50);
    CreateSwIcmIn::new(&mut input[..])
        .expect("layout")
        .set_uid(uid)
        .set_obj_type(obj_type::SW_ICM)
        .set_log_sw_icm_size(log_size)
        .set_sw_icm_start_addr(start);
    let out = h.exec(&input, 0x10)?;
    Ok(GeneralObjOutCmdHdr::new(&out[..]).expect("layout").obj_id())
}

/// A header-only general object command (DESTROY as `mlx5_dm_sw_icm_dealloc`, or QUERY).
pub fn by_id(
    h: &mut Host,
    op: Opcode,
    uid: u16,
    id: u32,
    outlen: usize,
) -> Result<Vec<u8>, CmdFail> {
    h.general_object_by_id(op, obj_type::SW_ICM, uid, id, outlen)
}

/// DESTROY_GENERAL_OBJECT of SW_ICM object `id`, as `mlx5_dm_sw_icm_dealloc` sends it.
pub fn destroy(h: &mut Host, uid: u16, id: u32) -> Result<(), CmdFail> {
    by_id(h, Opcode::DestroyGeneralObject, uid, id, 0x10).map(|_| ())
}

/// An SW ICM key as `mlx5_ib_get_dm_mr` creates it for `dr_icm_pool_mr_create`'s
/// `ibv_reg_dm_mr` (local and remote read and write): access mode 0x4 split across
/// `access_mode_1_0` (0) and `access_mode_4_2` (1), `start_addr` the ICM address.
pub fn icm_key(h: &mut Host, start: u64, len: u64) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_access_mode_1_0(0)
        .set_access_mode_4_2(1)
        .set_lr(true)
        .set_lw(true)
        .set_rr(true)
        .set_rw(true)
        .set_pd(h.pd)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(0x3c)
        .set_start_addr(start)
        .set_len(len);
    let out = h.exec(&input, 16)?;
    Ok(mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0x3c,
    ))
}

/// The ring dr_send.c builds: an RC QP whose path is force loopback (`fl`) and whose remote
/// QP is itself (`dr_prepare_qp_to_rts`), on one CQ.
pub struct Ring {
    /// The ring's CQ (send and receive).
    pub cq: Cq,
    /// The QP's send queue.
    pub sq: Sq,
}

/// The ring as `dr_send_ring_alloc` and `dr_prepare_qp_to_rts` set it up, RoCE enabled first.
pub fn self_connected_ring(h: &mut Host) -> Ring {
    // RoCE on, as on the hosts rdma-core's DR runs on (`dr_send_allow_fl` with `roce_en`).
    let mac = EmuConfig::default().mac;
    h.enable_roce(GID, mac);
    let cq = h.create_cq(7);
    let qp = h.create_rc_qp(&cq, 7, 0, None);
    let qpn = qp.qpn;
    h.modify_qp(Opcode::Rst2initQp, qpn, |c| {
        c.set_rre(true).set_rwe(true);
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    h.modify_qp(Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(3)
            .set_log_msg_max(20)
            .set_remote_qpn(qpn)
            .set_min_rnr_nak(1);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_fl(true);
    });
    h.modify_qp(Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_retry_count(7).set_rnr_retry(7);
        c.primary_address_path_mut().set_ack_timeout(8);
    });
    Ring { cq, sq: qp.sq }
}

/// A WRITE (inline when `inline`, else one data segment at `local`) or READ WQE to `raddr`
/// through `rkey`, signalled.
pub fn wqe(sq: &Sq, op: u8, raddr: u64, rkey: u32, data: &[u8], local: (u64, u32)) -> Vec<u8> {
    let inline = op == opcode::RDMA_WRITE && local.1 == 0;
    let body = if inline {
        (4 + data.len()).next_multiple_of(16)
    } else {
        16
    };
    let ds = 2 + body / 16;
    let mut w = vec![0u8; (ds * 16).next_multiple_of(64)];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(ds as u8)
        .set_ce(wqe::completion::ALWAYS);
    RaddrSeg::new(&mut w[16..32])
        .expect("layout")
        .set_raddr(raddr)
        .set_rkey(rkey);
    if inline {
        w[32..36].copy_from_slice(&(INLINE_SEG | data.len() as u32).to_be_bytes());
        w[36..36 + data.len()].copy_from_slice(data);
    } else {
        DataSeg::new(&mut w[32..48])
            .expect("layout")
            .set_byte_count(data.len() as u32)
            .set_lkey(local.1)
            .set_addr(local.0);
    }
    w
}

/// Posts `w` and lets the function run; the CQEs.
pub fn run(h: &Host, ring: &mut Ring, w: &[u8]) -> Vec<Vec<u8>> {
    h.post(&mut ring.sq, w, false);
    for _ in 0..8 {
        h.dev.poll();
    }
    drain(h, &mut ring.cq)
}

/// dr_send.c's pair: WRITE `data` at `raddr` (inline, or gathered from host memory), then READ
/// it back into a sync buffer; the READ's bytes.
pub fn write_then_read(
    h: &mut Host,
    ring: &mut Ring,
    raddr: u64,
    rkey: u32,
    data: &[u8],
    inline: bool,
) -> Vec<u8> {
    let lkey = h.create_mkey(false, true);
    let local = if inline {
        (0, 0)
    } else {
        let src = h.alloc(data.len() as u64, 4096);
        h.write(src, data);
        (src, lkey)
    };
    let w = wqe(&ring.sq, opcode::RDMA_WRITE, raddr, rkey, data, local);
    let done = run(h, ring, &w);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (0, 0),
        "WRITE completes"
    );
    let sync = h.alloc(data.len() as u64, 4096);
    let w = wqe(&ring.sq, opcode::RDMA_READ, raddr, rkey, data, (sync, lkey));
    let done = run(h, ring, &w);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), 0, "READ completes");
    h.read(sync, data.len())
}
