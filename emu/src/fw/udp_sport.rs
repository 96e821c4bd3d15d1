//! The UDP source port of a connected QP's frames changed while it runs: RTS2RTS_QP with
//! `MLX5_QPC_OPT_MASK_32_UDP_SPORT` in `opt_param_mask_95_32` and the new port in the
//! context's `primary_address_path.udp_sport`, as rdma-core's `mlx5dv_modify_qp_udp_sport`
//! (providers/mlx5/mlx5.c, `_mlx5dv_modify_qp_udp_sport`) sends it through DEVX for an RC or
//! UC QP in RTS once the general cap `rts2rts_qp_udp_sport` is reported. Frames the QP sends
//! afterwards carry the new port (RoCE v2's entropy for ECMP paths); nothing else of the path
//! changes.

use super::{bad_param, CmdResult, Syndrome};
use crate::objects::rc::Qp;
use cxdirect_hw::qp::{qpc_opt_mask_32, service_type, Qpc, Rts2rtsQpIn};

/// Applies the UDP source port RTS2RTS_QP's `input` (its context `ctx`) names to `next`, when
/// its `opt_param_mask_95_32` asks for it. Refused on a QP whose frames take their port from
/// each address vector (UD, DC initiators) rather than from its path.
pub(super) fn rts2rts(input: &[u8], ctx: &Qpc<&[u8]>, next: &mut Qp) -> CmdResult {
    let Ok(cmd) = Rts2rtsQpIn::new(input) else {
        return Ok(());
    };
    if cmd.opt_param_mask_95_32() & qpc_opt_mask_32::UDP_SPORT == 0 {
        return Ok(());
    }
    if !matches!(next.service, service_type::RC | service_type::UC) {
        return Err(bad_param(
            Syndrome::BadQpOptParam,
            "a UDP source port change on a QP that is not RC or UC",
        ));
    }
    next.path.udp_sport = ctx.primary_address_path().udp_sport();
    Ok(())
}
