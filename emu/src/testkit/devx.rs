//! DEVX for the test host: user contexts, umems, and a CQ and an RC QP built on umems the way
//! rdma-core's DEVX tests build them (`Mlx5DevxRcResources` in `tests/mlx5_base.py`: the CQ
//! and QP rings and their doorbell records each in a umem of their own, 16-byte receive WQEs,
//! the send ring after the receive ring), with every command carrying the context's uid as
//! mlx5_ib writes it (`devx_obj_create`, `devx_umem_reg_cmd_alloc`).

use super::{CmdFail, Cq, Host, Sq};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cq::{CreateCqIn, CreateCqOut};
use cxdirect_hw::devx::{CreateUctxIn, CreateUctxOut, CreateUmemIn, CreateUmemOut};
use cxdirect_hw::devx::{DestroyUctxIn, DestroyUmemIn, UMEM_MTT_BYTE, UMEM_MTT_BYTES};
use cxdirect_hw::general_obj::GeneralObjInCmdHdr;
use cxdirect_hw::mkey::{MTT_READ, MTT_WRITE};
use cxdirect_hw::qp::{rq_type, service_type, CreateQpIn, CreateQpOut, Qpc, Rst2initQpIn};
use cxdirect_hw::wqe::DataSeg;

/// Bytes of one receive WQE of a DEVX RC QP made by [`Host::create_devx_rc_qp`]: one data
/// segment (`log_rq_stride` 0, as the rdma-core test sizes it for one SGE).
pub const DEVX_RQ_STRIDE: u64 = 16;

/// A umem registered by [`Host::create_umem`].
#[derive(Debug, Clone, Copy)]
pub struct Umem {
    /// Its number.
    pub id: u32,
    /// IOVA of its first byte.
    pub iova: u64,
}

/// An RC QP on umems made by [`Host::create_devx_rc_qp`].
pub struct DevxRcQp {
    /// QP number.
    pub qpn: u32,
    /// The user context it belongs to.
    pub uid: u16,
    /// Its send ring (in the ring umem after the receive ring; doorbell record in the
    /// doorbell umem, send counter at +4).
    pub sq: Sq,
    /// The umem holding both rings.
    pub ring: Umem,
    /// The umem holding the doorbell record.
    pub dbr: Umem,
    /// Log2 of the receive ring's entries.
    pub rq_log: u8,
    /// Receive WQEs posted.
    pub rq_pi: u16,
}

impl Host {
    /// Runs `input` with its header's `uid` set to `uid`.
    pub fn exec_as(&mut self, uid: u16, input: &[u8], outlen: usize) -> Result<Vec<u8>, CmdFail> {
        let mut input = input.to_vec();
        input[2..4].copy_from_slice(&uid.to_be_bytes());
        self.exec(&input, outlen)
    }

    /// A header-only general object command (`op` QUERY_ or DESTROY_GENERAL_OBJECT, as
    /// mlx5_ib's `devx_obj_build_destroy_cmd` builds the latter) for object `id` of type `ty`,
    /// under `uid`.
    pub fn general_object_by_id(
        &mut self,
        op: Opcode,
        ty: u16,
        uid: u16,
        id: u32,
        outlen: usize,
    ) -> Result<Vec<u8>, CmdFail> {
        let mut input = Self::input(op, 0, 0x10);
        GeneralObjInCmdHdr::new(&mut input[..])
            .expect("layout")
            .set_uid(uid)
            .set_obj_type(ty)
            .set_obj_id(id);
        self.exec(&input, outlen)
    }

    /// CREATE_UCTX asking for capabilities `cap`, as `mlx5_ib_devx_create` sends it; the uid.
    pub fn create_uctx(&mut self, cap: u32) -> Result<u16, CmdFail> {
        let mut input = Self::input(Opcode::CreateUctx, 0, 0x40);
        CreateUctxIn::new(&mut input[..])
            .expect("layout")
            .set_cap(cap);
        let out = self.exec(&input, 16)?;
        Ok(CreateUctxOut::new(&out[..]).expect("layout").uid())
    }

    /// DESTROY_UCTX of `uid`, named in the body as `mlx5_ib_devx_destroy` names it.
    pub fn destroy_uctx(&mut self, uid: u16) -> Result<(), CmdFail> {
        let mut input = Self::input(Opcode::DestroyUctx, 0, 0x10);
        DestroyUctxIn::new(&mut input[..])
            .expect("layout")
            .set_uid(uid);
        self.exec(&input, 16).map(|_| ())
    }

    /// Allocates `len` bytes of host memory (page-aligned) and registers them as a umem of
    /// `uid` the way `devx_umem_reg_cmd_alloc` does with 4 KiB pages: one MTT entry per page,
    /// read bit always, write bit when `writable`.
    pub fn create_umem(&mut self, uid: u16, len: u64, writable: bool) -> Result<Umem, CmdFail> {
        let iova = self.alloc(len.next_multiple_of(4096), 4096);
        self.register_umem(uid, iova, len, writable)
            .map(|id| Umem { id, iova })
    }

    /// CREATE_UMEM for `len` bytes at `iova` (anywhere in a 4 KiB page: the offset in the
    /// first page goes in `page_offset`).
    pub fn register_umem(
        &mut self,
        uid: u16,
        iova: u64,
        len: u64,
        writable: bool,
    ) -> Result<u32, CmdFail> {
        let first = iova & !0xfff;
        let pages = (iova + len - first).div_ceil(4096) as usize;
        let mut input = Self::input(
            Opcode::CreateUmem,
            0,
            UMEM_MTT_BYTE + UMEM_MTT_BYTES * pages,
        );
        let mut cmd = CreateUmemIn::new(&mut input[..]).expect("layout");
        cmd.set_uid(uid)
            .set_log_page_size(0)
            .set_page_offset((iova & 0xfff) as u32)
            .set_num_of_mtt(pages as u64);
        let bits = MTT_READ | if writable { MTT_WRITE } else { 0 };
        for i in 0..pages {
            cmd.set_mtt(i, (first + 4096 * i as u64) | bits)
                .expect("room");
        }
        let out = self.exec(&input, 16)?;
        Ok(CreateUmemOut::new(&out[..]).expect("layout").umem_id())
    }

    /// DESTROY_UMEM of `id` under `uid`, as `devx_obj_build_destroy_cmd` builds it.
    pub fn destroy_umem(&mut self, uid: u16, id: u32) -> Result<(), CmdFail> {
        let mut input = Self::input(Opcode::DestroyUmem, 0, 0x10);
        DestroyUmemIn::new(&mut input[..])
            .expect("layout")
            .set_uid(uid)
            .set_umem_id(id);
        self.exec(&input, 16).map(|_| ())
    }

    /// A CQ of `2^log` 64-byte CQEs for `uid` on the async EQ, its ring in one umem and its
    /// doorbell record in another (8 bytes), as the rdma-core test's `create_cq` sends it:
    /// `cq_umem_valid`, `dbr_umem_valid`, no page list, no page size or offset. Returns the
    /// CQ (its `buf` and `dbr` the umems' IOVAs) and the two umems.
    pub fn create_devx_cq(&mut self, uid: u16, log: u8) -> Result<(Cq, Umem, Umem), CmdFail> {
        let ring = self.create_umem(uid, 64 << log, true)?;
        for i in 0..(1u64 << log) {
            self.write(ring.iova + i * 64 + 63, &[0xf1]);
        }
        let dbr = self.create_umem(uid, 8, true)?;
        let mut input = Self::input(Opcode::CreateCq, 0, 0x110);
        let mut cmd = CreateCqIn::new(&mut input[..]).expect("layout");
        cmd.set_uid(uid)
            .set_cq_umem_valid(true)
            .set_cq_umem_id(ring.id);
        cmd.cq_context_mut()
            .set_log_cq_size(log)
            .set_uar_page(self.uar)
            .set_c_eqn(self.eqn as u8)
            .set_dbr_umem_valid(true)
            .set_dbr_umem_id(dbr.id);
        let out = self.exec(&input, 16)?;
        let cq = Cq {
            cqn: CreateCqOut::new(&out[..]).expect("layout").cqn(),
            buf: ring.iova,
            dbr: dbr.iova,
            log,
            ci: 0,
        };
        Ok((cq, ring, dbr))
    }

    /// An RC QP for `uid` completing to `cq`, as the rdma-core test's `create_qp` sends it:
    /// `2^log_rq` 16-byte receive WQEs then `2^log_sq` send WQEBBs in one umem
    /// (`wq_umem_valid`), the doorbell record in another (`dbr_umem_valid`), `ts_format` 1.
    pub fn create_devx_rc_qp(
        &mut self,
        uid: u16,
        cq: &Cq,
        log_sq: u8,
        log_rq: u8,
    ) -> Result<DevxRcQp, CmdFail> {
        let rq_bytes = DEVX_RQ_STRIDE << log_rq;
        let size = (rq_bytes + (64u64 << log_sq)).next_multiple_of(4096);
        let ring = self.create_umem(uid, size, true)?;
        let dbr = self.create_umem(uid, 8, true)?;
        let mut input = Self::input(Opcode::CreateQp, 0, 0x110);
        let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
        cmd.set_wq_umem_valid(true).set_wq_umem_id(ring.id);
        cmd.qpc_mut()
            .set_st(service_type::RC)
            .set_pm_state(3)
            .set_pd(self.pd)
            .set_uar_page(self.uar)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_rq_type(rq_type::REGULAR)
            .set_log_rq_size(log_rq)
            .set_log_rq_stride(0)
            .set_log_sq_size(log_sq)
            .set_ts_format(1)
            .set_dbr_umem_valid(true)
            .set_dbr_umem_id(dbr.id);
        let out = self.exec_as(uid, &input, 16)?;
        let qpn = CreateQpOut::new(&out[..]).expect("layout").qpn();
        Ok(DevxRcQp {
            qpn,
            uid,
            sq: Sq {
                sqn: qpn,
                buf: ring.iova + rq_bytes,
                dbr: dbr.iova,
                log: log_sq,
                pi: 0,
                bf_toggle: false,
            },
            ring,
            dbr,
            rq_log: log_rq,
            rq_pi: 0,
        })
    }

    /// A QP state transition `opcode` on `qpn` under `uid`, its context filled by `fill`.
    pub fn modify_qp_as(
        &mut self,
        uid: u16,
        opcode: Opcode,
        qpn: u32,
        fill: impl FnOnce(&mut Qpc<&mut [u8]>),
    ) -> Result<(), CmdFail> {
        let mut input = Self::input(opcode, 0, 0x110);
        let mut cmd = Rst2initQpIn::new(&mut input[..]).expect("layout");
        cmd.set_qpn(qpn);
        fill(&mut cmd.qpc_mut());
        self.exec_as(uid, &input, 16).map(|_| ())
    }

    /// Posts a one-segment receive WQE on a DEVX QP's ring and updates the doorbell record's
    /// receive counter, as the rdma-core test's `post_recv` does.
    pub fn post_devx_recv(&self, qp: &mut DevxRcQp, addr: u64, len: u32, lkey: u32) {
        let mut w = [0u8; DEVX_RQ_STRIDE as usize];
        DataSeg::new(&mut w[..])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(addr);
        let slot = u64::from(qp.rq_pi) & ((1 << qp.rq_log) - 1);
        self.write(qp.ring.iova + slot * DEVX_RQ_STRIDE, &w);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        self.write_be32(qp.dbr.iova, u32::from(qp.rq_pi));
    }
}
