//! Linux mlx5e's multi-packet receive queue, driven by the test host as mlx5e drives it: the
//! UMR key of an RQ (`mlx5e_create_umr_mkey`), the internal control SQ that loads it
//! (`mlx5e_open_icosq`, CREATE_SQ with `reg_umr`), the linked-list striding RQ
//! (`mlx5e_build_rq_param`: `wq_type` 2), its WQEs (`struct mlx5e_rx_wqe_ll`, written once by
//! `mlx5e_alloc_rq`), the UMR WQE that maps one RX WQE's pages (`mlx5e_build_umr_wqe`,
//! `mlx5e_alloc_rx_mpwqe`) and the software side of the linked list (`mlx5_wq_ll_*` in
//! `en/wq.h`).

use super::umr::{umr_wqe, List};
use super::{CmdFail, Host, Rq, Sq};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::umr::{flags, mkey_mask};
use cxdirect_hw::wq::{CreateRqIn, WqType};
use cxdirect_hw::wqe::{DataSeg, SrqNextSeg};

/// `MLX5_EN_WR`: what mlx5e ORs into each MTT entry it loads (`mlx5e_alloc_rx_mpwqe`).
pub const MTT_EN_WR: u64 = 2;

/// Bytes of one RX WQE of a linked-list striding RQ: a next segment and one data segment
/// (`mlx5e_get_rqwq_log_stride`: 2^5).
pub const LL_WQE_BYTES: u64 = 32;

/// The software side of a linked list of `2^log` WQEs (`struct mlx5_wq_ll`): the head (the
/// next WQE to post), the next-index field of the tail (the last WQE the device finished),
/// and the count of WQEs posted since the reset (the doorbell record).
pub struct LinkedList {
    /// Index of the WQE the next post hands the device.
    pub head: u16,
    /// Index of the tail WQE, whose next segment the next pop writes.
    pub tail: u16,
    /// WQEs posted (`wqe_ctr`).
    pub wqe_ctr: u16,
}

impl Host {
    /// CREATE_MKEY as `mlx5e_create_umr_mkey` (Linux 6.12) builds an RQ's UMR key in the
    /// aligned MTT mode: free, `umr_en`, `lw`, `lr`, MTT, no QP, the host's PD, `npages` 4 KiB
    /// pages from address 0, `translations_octword_size` and the actual size alike, and every
    /// entry pointing at `filler` (the RQ's overflow page); the key with variant 0.
    pub fn create_umr_mtt_mkey(&mut self, npages: usize, filler: u64) -> Result<u32, CmdFail> {
        let octowords = (npages * 8).next_multiple_of(64) / 16;
        let mut input = Self::input(Opcode::CreateMkey, 0, 0x110 + octowords * 16);
        let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
        cmd.set_translations_octword_actual_size(octowords as u32);
        cmd.memory_key_mkey_entry_mut()
            .set_free(true)
            .set_umr_en(true)
            .set_lw(true)
            .set_lr(true)
            .set_access_mode(MKC_ACCESS_MODE_MTT)
            .set_qpn(0xff_ffff)
            .set_pd(self.pd)
            .set_len((npages as u64) << 12)
            .set_translations_octword_size(octowords as u32)
            .set_log_page_size(12);
        for i in 0..npages {
            cmd.set_mtt(i, filler).expect("room");
        }
        let out = self.exec(&input, 16)?;
        let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
        Ok(mkey_from_index(index, 0))
    }

    /// An SQ of `2^log` WQEBBs on CQ `cqn` without a TIS, as `mlx5e_open_icosq` opens its
    /// internal control SQ (`reg_umr` as asked), moved to RDY.
    pub fn create_icosq(&mut self, cqn: u32, log: u8, reg_umr: bool) -> Result<Sq, CmdFail> {
        self.create_sq_of(
            cqn,
            None,
            log,
            super::SqOptions {
                reg_umr,
                ..super::SqOptions::default()
            },
        )
    }

    /// A linked-list striding RQ (`wq_type` 2) of `2^log` 32-byte WQEs whose WQEs have
    /// `2^(9 + log_strides)` strides of `2^(6 + log_stride)` bytes (the raw context fields),
    /// as `mlx5e_build_rq_param` asks for it, moved to RDY. Its WQEs are linked as
    /// `mlx5_wq_ll_init_list` leaves them: each to the next, the last one's next left 0.
    pub fn try_create_linked_striding_rq(
        &mut self,
        cqn: u32,
        log: u8,
        log_strides: u8,
        log_stride: u8,
    ) -> Result<(Rq, LinkedList), CmdFail> {
        let (buf, dbr, pages, mut input) = self.ring_input(Opcode::CreateRq, LL_WQE_BYTES << log);
        let mut cmd = CreateRqIn::new(&mut input[..]).expect("layout");
        {
            let mut ctx = cmd.ctx_mut();
            // Frames kept whole (`vsd`), as DPDK's default; a test of stripping clears it.
            ctx.set_cqn(cqn).set_flush_in_error_en(true).set_vsd(true);
            ctx.wq_mut()
                .set_wq_type(WqType::LinkedListStridingRq as u8)
                .set_end_padding_mode(1)
                .set_pd(self.pd)
                .set_dbr_addr(dbr)
                .set_log_wq_stride(5)
                .set_log_wq_sz(log)
                .set_log_wqe_num_of_strides(log_strides)
                .set_log_wqe_stride_size(log_stride);
        }
        let rq = self.submit_rq(input, pages, buf, dbr, log)?;
        let last = (1u16 << log) - 1;
        for i in 0..last {
            self.link_wqe(&rq, i, i + 1);
        }
        let list = LinkedList {
            head: 0,
            tail: last,
            wqe_ctr: 0,
        };
        Ok((rq, list))
    }

    /// Writes WQE `index`'s next segment: `next_wqe_index` = `next`.
    pub fn link_wqe(&self, rq: &Rq, index: u16, next: u16) {
        let mut seg = [0u8; 16];
        SrqNextSeg::new(&mut seg[..])
            .expect("layout")
            .set_next_wqe_index(next);
        self.write(rq.buf + u64::from(index) * LL_WQE_BYTES, &seg);
    }

    /// Writes WQE `index`'s data segment: `len` bytes at `addr` through `lkey` (`mlx5e_alloc_rq`
    /// writes each WQE's once: `addr` the WQE's offset in the UMR key plus the headroom).
    pub fn write_ll_data(&self, rq: &Rq, index: u16, addr: u64, len: u32, lkey: u32) {
        let mut seg = [0u8; 16];
        DataSeg::new(&mut seg[..])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(addr);
        self.write(rq.buf + u64::from(index) * LL_WQE_BYTES + 16, &seg);
    }

    /// `mlx5e_post_rx_mpwqe`: posts the WQE at the list's head (`mlx5_wq_ll_push` to the index
    /// its next segment names) and writes the doorbell record (`mlx5_wq_ll_update_db_record`).
    /// Returns the posted WQE's index.
    pub fn ll_push(&self, rq: &Rq, list: &mut LinkedList) -> u16 {
        let posted = list.head;
        let seg = self.read(rq.buf + u64::from(posted) * LL_WQE_BYTES, 16);
        list.head = SrqNextSeg::new(&seg[..]).expect("layout").next_wqe_index();
        list.wqe_ctr = list.wqe_ctr.wrapping_add(1);
        self.write_be32(rq.dbr, u32::from(list.wqe_ctr));
        posted
    }

    /// `mlx5_wq_ll_pop`: WQE `index` is done (all its strides consumed); it is linked after
    /// the tail and becomes the tail.
    pub fn ll_pop(&self, rq: &Rq, list: &mut LinkedList, index: u16) {
        self.link_wqe(rq, list.tail, index);
        list.tail = index;
    }
}

/// The UMR WQE `mlx5e_alloc_rx_mpwqe` posts on the ICOSQ for RX WQE `ix` (aligned MTT mode):
/// control segment (opcode UMR, the SQ's producer index, `umr_mkey` = `key`, a completion
/// asked for as `mlx5e_notify_hw` does on the last WQE of a doorbell), UMR control segment
/// (`MLX5_UMR_INLINE | MLX5_UMR_TRANSLATION_OFFSET_EN`, `xlt_octowords` for the WQE's pages,
/// `xlt_offset` = `ix * mtts_per_wqe * 8 / 16`, `mkey_mask` FREE), a zero memory key segment,
/// then one MTT per page (`addr | MLX5_EN_WR`) padded to the 64-byte alignment.
pub fn mlx5e_umr_wqe(sq: &Sq, key: u32, ix: u16, mtts_per_wqe: usize, pages: &[u64]) -> Vec<u8> {
    let mut list: Vec<u8> = pages
        .iter()
        .flat_map(|p| (p | MTT_EN_WR).to_be_bytes())
        .collect();
    list.resize(list.len().next_multiple_of(64), 0);
    let octowords = (list.len() / 16) as u16;
    let offset = (usize::from(ix) * mtts_per_wqe * 8 / 16) as u64;
    umr_wqe(
        sq,
        key,
        0,
        flags::INLINE,
        mkey_mask::FREE,
        octowords,
        Some(offset),
        |_| {},
        &List::Inline(list),
    )
}
