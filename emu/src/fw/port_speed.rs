//! The port's speed as PTYS carries it: the Ethernet protocols the port offers
//! (`eth_proto_capability`), those software allows (`eth_proto_admin`) and the one in
//! operation (`eth_proto_oper`), in the legacy masks Linux uses when the extended ones are
//! empty (`mlx5_ptys_ext_supported`). mlx5e writes the admin mask for `ethtool -s DEV speed S`
//! (`mlx5e_ethtool_set_link_ksettings`: the protocols of that speed the port offers, with
//! `an_disable_admin` for `autoneg off`) and then takes the port down and up
//! (`mlx5_toggle_port_link`); it reads the speed from the oper mask's first bit
//! (`mlx5_port_ptys2speed`), as mlx5_ib does for the RDMA port's rate.
//!
//! The link runs at the fastest protocol the admin mask allows (the model has no link
//! partner to negotiate with; a real link comes up at the fastest both ends allow), and
//! below the port's fastest it is paced at that speed (`engine::link`).

use super::{bad_param, CmdResult, Core, Syndrome};
use crate::function::hca::PORT_PROTOCOLS;
use cxdirect_hw::reg::{self, PtysReg};

/// PTYS: a write sets the admin mask (a non-empty subset of what the port offers) and
/// whether auto-negotiation is disabled; a read, and the write's reply, return the port's
/// protocols.
pub(crate) fn ptys(core: &mut Core, write: bool, data: &[u8], reply: &mut [u8]) -> CmdResult {
    let req =
        PtysReg::new(data).map_err(|_| bad_param(Syndrome::BadRegister, "PTYS data too short"))?;
    if req.proto_mask() & reg::PTYS_PROTO_MASK_ETH == 0 {
        return Err(bad_param(
            Syndrome::BadRegister,
            "PTYS proto_mask must name Ethernet",
        ));
    }
    if write {
        let admin = req.eth_proto_admin();
        if admin & !PORT_PROTOCOLS != 0 {
            return Err(bad_param(
                Syndrome::BadRegister,
                "PTYS eth_proto_admin names a protocol the port lacks (see eth_proto_capability)",
            ));
        }
        if admin == 0 {
            return Err(bad_param(
                Syndrome::BadRegister,
                "PTYS eth_proto_admin names no protocol",
            ));
        }
        core.port.an_disable = req.an_disable_admin();
        core.port.set_eth_proto_admin(admin);
    }
    let (oper, _) = core.port.link_protocol();
    if let Ok(mut r) = PtysReg::new(reply) {
        r.set_local_port(1)
            .set_an_disable_admin(core.port.an_disable)
            .set_an_disable_cap(true)
            .set_proto_mask(reg::PTYS_PROTO_MASK_ETH)
            .set_eth_proto_capability(PORT_PROTOCOLS)
            .set_eth_proto_admin(core.port.eth_proto_admin)
            .set_eth_proto_oper(if core.port.oper_up { oper } else { 0 });
    }
    Ok(())
}
