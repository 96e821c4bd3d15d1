//! Memory windows: the rules a ConnectX holds a window's bind to. A window is a KLM key
//! Linux's mlx5_ib creates free and empty (`mlx5_ib_alloc_mw` in `mr.c`: `umr_en`, `lr`, four
//! KLMs, `en_rinval` for type 2, no QP); libmlx5 binds it with a UMR WQE on the user's QP
//! (`set_bind_wr` in `providers/mlx5/qp.c`, behind `mlx5_bind_mw` for type 1 and
//! IBV_WR_BIND_MW / `mlx5_send_wr_bind_mw` for type 2), whose one KLM names the bound memory
//! region's lkey over the window's range, and unbinds it with the same WQE of length 0
//! (type 1) or IBV_WR_LOCAL_INV (type 2, `MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN`).
//!
//! The UMR engine (`engine::umr`) applies the WQE; this room says which UMRs are binds and
//! checks what a bind may name. A refused bind completes with the memory window bind error
//! (`MLX5_CQE_SYNDROME_MW_BIND_ERR`, IBV_WC_MW_BIND_ERR in libmlx5's `mlx5_handle_error_cqe`)
//! and changes nothing.

use crate::function::Core;
use crate::objects::Mkey;
use crate::translate::{is_indirect, RESERVED_LKEY};
use cxdirect_hw::mkey::MKC_ACCESS_MODE_KLM;
use cxdirect_hw::umr::flags;

/// Whether a UMR on `key` is held to the bind rules (`privileged`: posted on the REG_UMR
/// QP; `umr_flags`: its control segment's flags): a window's bind or unbind, posted from a
/// user's QP on a KLM key without a BSF. libmlx5 writes a window's one KLM at an explicit
/// translation offset of 0 (`set_umr_control_seg` always sets
/// `MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET`); the other UMRs a user's or a kernel ULP's QP
/// posts on a KLM key do not: mlx5dv's indirect keys (`_mlx5dv_wr_mkey_configure` behind
/// `mlx5dv_wr_mr_list`, `mlx5dv_wr_mr_interleaved` and the `mlx5dv_wr_set_mkey_layout_*`
/// setters: the inline flag alone) and fast registration (`set_reg_umr_seg` in mlx5_ib's
/// `wr.c`: the not-free check alone). The key's context cannot tell a window: libmlx5's
/// `_mlx5dv_create_mkey` and mlx5_ib's `mlx5_ib_alloc_mw` create the same free KLM key
/// (`umr_en`, `lr`, `qpn` 0xffffff). The REG_UMR QP and kernel ULPs name bus addresses through
/// the reserved lkey, which no rule below touches.
pub(crate) fn is_bind(privileged: bool, umr_flags: u8, key: &Mkey) -> bool {
    !privileged
        && umr_flags & flags::TRANSLATION_OFFSET_EN != 0
        && key.access_mode == MKC_ACCESS_MODE_KLM
        && !key.bsf_en
}

/// The rights a bind gives the window, after its mask applied: what it checks the bound
/// regions against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rights {
    /// Local write (IBV_ACCESS_LOCAL_WRITE).
    pub local_write: bool,
    /// Remote write (IBV_ACCESS_REMOTE_WRITE).
    pub remote_write: bool,
    /// Remote atomics (IBV_ACCESS_REMOTE_ATOMIC).
    pub atomic: bool,
}

/// Checks a bind's KLMs (`(bytes, key, address)`) for a window of protection domain `pd` and
/// `len` bytes given `rights`. Only the KLMs the window's length reaches are checked: the
/// entries of no bytes padding libmlx5's list to four, and whatever a kernel ULP's inline
/// list leaves in the rest of its last 64 bytes (`set_reg_wr` copies only its own KLMs), are
/// never reached through the key. Each KLM reached names a
/// valid direct key (an MTT or PA region, not another window) of the same PD that covers the
/// entry's range, and a window that may write (locally, remotely or by atomics) binds only
/// regions the owner may write locally (IBA 10.6.7.2.1: remote write or atomic rights need the
/// region's local write). The region's IBV_ACCESS_MW_BIND is not the device's to check: the
/// memory key context has no bit for it (mlx5_ib's `set_mkc_access_pd_addr_fields` writes
/// none), and libmlx5 checks it only when built with MW_DEBUG.
pub(crate) fn check_klms(
    core: &Core,
    pd: u32,
    len: u64,
    rights: Rights,
    klms: &[(u32, u32, u64)],
) -> Result<(), BindFault> {
    let writes = rights.local_write || rights.remote_write || rights.atomic;
    let mut reached = 0u64;
    for &(bytes, inner, address) in klms {
        if reached >= len {
            break;
        }
        reached = reached.saturating_add(u64::from(bytes));
        if bytes == 0 || inner == RESERVED_LKEY {
            continue;
        }
        let region = core.res.mkeys.get(inner >> 8).ok_or(BindFault::NoRegion)?;
        if region.variant != inner as u8 || region.free || is_indirect(region.access_mode) {
            return Err(BindFault::NoRegion);
        }
        if region.pd != pd {
            return Err(BindFault::WrongPd);
        }
        let end = address
            .checked_add(u64::from(bytes))
            .ok_or(BindFault::Range)?;
        let region_end = region.start.saturating_add(region.len);
        if !region.length64 && (address < region.start || end > region_end) {
            return Err(BindFault::Range);
        }
        if writes && !region.local_write {
            return Err(BindFault::Rights);
        }
    }
    Ok(())
}

/// Why a bind was refused (each completes with the memory window bind error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BindFault {
    /// A KLM names no valid key, or another indirect key.
    NoRegion,
    /// The region is of another protection domain than the window.
    WrongPd,
    /// The window's range reaches outside the region.
    Range,
    /// The window would write where the region grants no local write.
    Rights,
}
