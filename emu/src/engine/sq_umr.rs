//! UMR WQEs on an Ethernet SQ created with `reg_umr` (the `reg_umr_sq` capability): the
//! internal control SQ (ICOSQ) Linux's mlx5e opens per channel (`mlx5e_open_icosq`,
//! `mlx5e_build_icosq_param`) loads the translations of each multi-packet receive WQE's pages
//! into its RQ's UMR key before posting the WQE (`mlx5e_alloc_rx_mpwqe`: a control segment
//! whose `umr_mkey` names the key, a UMR control segment with `MLX5_UMR_INLINE` and
//! `MLX5_UMR_TRANSLATION_OFFSET_EN`, `xlt_octowords` and the WQE's `xlt_offset`, a memory key
//! segment, then the MTT entries inline; the first UMR of a key also clears its `free` bit
//! through `mkey_mask`, `mlx5e_build_umr_wqe`). The UMR engine ([`umr`](super::umr)) applies it
//! as it does a QP's: the key must be of the SQ's protection domain (mlx5e creates both in its
//! one PD, `mlx5e_create_umr_mkey` and `mlx5e_build_sq_param_common`). The completion is the
//! SQ's ordinary requester CQE, which `mlx5e_poll_ico_cq` reads by its `wqe_counter`.

use crate::function::Core;
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::wqe::CtrlSeg;

use super::umr::{execute as execute_umr, Poster};

/// Executes UMR WQE `wqe` (its whole bytes, control segment first) posted on SQ `sqn` of
/// protection domain `pd`. Returns the error CQE syndrome of a refused one.
pub(crate) fn execute(core: &mut Core, sqn: u32, pd: u32, wqe: &[u8]) -> Result<(), CqeSyndrome> {
    let ctrl = CtrlSeg::new(wqe).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let mkey = ctrl.imm();
    let poster = Poster {
        pd,
        privileged: false,
        qpn: sqn,
    };
    execute_umr(core, poster, wqe, mkey)
}
