//! Memory windows for the test host, as Linux's mlx5_ib creates them (`mlx5_ib_alloc_mw` in
//! `drivers/infiniband/hw/mlx5/mr.c`) and rdma-core's libmlx5 binds and invalidates them
//! (`set_bind_wr` and its segment builders in `providers/mlx5/qp.c`, behind `mlx5_bind_mw`,
//! IBV_WR_BIND_MW, `mlx5_send_wr_bind_mw` and IBV_WR_LOCAL_INV).

use super::umr::{umr_wqe, List};
use super::{Host, Sq};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_KLM};
use cxdirect_hw::umr::{flags, mkey_mask};

/// The `qpn` of a key bound to no QP.
pub const UNBOUND: u32 = 0x00ff_ffff;

/// A window's type (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// Type 1: bound by `ibv_bind_mw`, to no QP.
    One,
    /// Type 2: bound by IBV_WR_BIND_MW to the posting QP, invalidated locally or remotely.
    Two,
}

/// The rights a bind gives (`mw_access_flags`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MwAccess {
    /// IBV_ACCESS_LOCAL_WRITE.
    pub local_write: bool,
    /// IBV_ACCESS_REMOTE_READ.
    pub remote_read: bool,
    /// IBV_ACCESS_REMOTE_WRITE.
    pub remote_write: bool,
    /// IBV_ACCESS_REMOTE_ATOMIC.
    pub atomic: bool,
}

impl MwAccess {
    /// Local write, remote read, write and atomics.
    pub const ALL: Self = Self {
        local_write: true,
        remote_read: true,
        remote_write: true,
        atomic: true,
    };
}

/// What a bind names (`struct ibv_mw_bind_info`): the region's lkey, the window's address and
/// length (0 unbinds), and its rights.
#[derive(Debug, Clone, Copy)]
pub struct BindInfo {
    /// The bound region's lkey (`bind_info->mr->lkey`).
    pub mr_lkey: u32,
    /// The window's first address (`addr`).
    pub addr: u64,
    /// The window's length in bytes (`length`).
    pub len: u64,
    /// Its rights.
    pub access: MwAccess,
}

/// CREATE_MKEY as `mlx5_ib_alloc_mw` sends it for a window of `ty` in `pd`: free, four KLMs
/// (`translations_octword_size` 4), `umr_en`, `lr`, KLM mode, `en_rinval` for type 2, bound to
/// no QP; the key with `variant` (`assign_mkey_variant`) in its low byte.
pub fn alloc_mw(h: &mut Host, pd: u32, ty: MwType, variant: u8) -> u32 {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_free(true)
        .set_translations_octword_size(4)
        .set_pd(pd)
        .set_umr_en(true)
        .set_lr(true)
        .set_access_mode_1_0(MKC_ACCESS_MODE_KLM)
        .set_en_rinval(ty == MwType::Two)
        .set_qpn(UNBOUND)
        .set_mkey_7_0(variant);
    let out = h
        .exec(&input, 16)
        .expect("CREATE_MKEY for mlx5_ib_alloc_mw");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        variant,
    )
}

/// The UMR WQE libmlx5's `set_bind_wr` posts on QP `qpn` (its ring `sq`) for window `mw` (the
/// control segment's `imm`, its rkey as it is) of `ty`, giving it `new_rkey` (its low byte the
/// new variant) and `bind`: the UMR control segment (`set_umr_control_seg`: inline, offset 0,
/// mask FREE and KEY, QPN for type 2; with a length, one KLM padded to four, the check that the
/// window is free for type 2, and LEN, START_ADDR and the four rights; without, the check that
/// the window is bound to `qpn` for type 2), the key segment (`set_umr_mkey_seg`: the new
/// variant, `qpn` for a type 2 bind, the rights and range, or `free` without a length) and the
/// KLM (`set_umr_data_seg`); signalled.
pub fn bind_wqe(sq: &Sq, qpn: u32, mw: u32, ty: MwType, new_rkey: u32, bind: BindInfo) -> Vec<u8> {
    let two = ty == MwType::Two;
    let mut mask = mkey_mask::FREE | mkey_mask::KEY;
    if two {
        mask |= mkey_mask::QPN;
    }
    let (umr_flags, octowords, list) = if bind.len != 0 {
        mask |= mkey_mask::LEN
            | mkey_mask::START_ADDR
            | mkey_mask::LW
            | mkey_mask::RR
            | mkey_mask::RW
            | mkey_mask::A;
        let mut klms = vec![0u8; 64];
        klms[..4].copy_from_slice(&(bind.len as u32).to_be_bytes());
        klms[4..8].copy_from_slice(&bind.mr_lkey.to_be_bytes());
        klms[8..16].copy_from_slice(&bind.addr.to_be_bytes());
        let check = if two { flags::CHECK_NOT_FREE } else { 0 };
        (check, 4, klms)
    } else {
        let check = if two { flags::CHECK_QPN } else { 0 };
        (check, 0, Vec::new())
    };
    let bound_to = if two && bind.len != 0 { qpn } else { UNBOUND };
    umr_wqe(
        sq,
        mw,
        0,
        umr_flags,
        mask,
        octowords,
        Some(0),
        |seg| {
            seg.set_qpn(bound_to).set_mkey_7_0(new_rkey as u8);
            if bind.len != 0 {
                seg.set_lw(bind.access.local_write)
                    .set_rr(bind.access.remote_read)
                    .set_rw(bind.access.remote_write)
                    .set_a(bind.access.atomic)
                    .set_start_addr(bind.addr)
                    .set_len(bind.len);
            } else {
                seg.set_free(true);
            }
        },
        &List::Inline(list),
    )
}

/// The UMR WQE libmlx5 posts for IBV_WR_LOCAL_INV of `rkey` on QP `qpn`: `set_bind_wr` of a
/// type 2 window with an empty bind and new rkey 0.
pub fn local_inv_wqe(sq: &Sq, qpn: u32, rkey: u32) -> Vec<u8> {
    let empty = BindInfo {
        mr_lkey: 0,
        addr: 0,
        len: 0,
        access: MwAccess::default(),
    };
    bind_wqe(sq, qpn, rkey, MwType::Two, 0, empty)
}
