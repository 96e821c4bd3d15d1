//! The port's speed through PTYS, read and written as Linux's mlx5 port functions do for
//! ethtool (`mlx5_port_query_eth_proto`, `mlx5_port_set_eth_ptys`, then
//! `mlx5_toggle_port_link`), in the legacy protocol masks Linux uses while the extended ones
//! are empty. A function cxdirect holds through VFIO has no ethtool; a slower link is also
//! where the traffic classes' groups and shares divide the bandwidth
//! (`Device::set_class_selection`).

use super::Device;
use crate::backend::Backend;
use crate::error::DriverError;
use cxdirect_hw::reg::{self, PaosReg, PtysReg};

/// The port's speeds as PTYS reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSpeeds {
    /// The speed the link runs at, in Mb/s (0 while it is down).
    pub running_mbps: u32,
    /// The protocols the port offers (legacy `eth_proto_capability` mask):
    /// [`cxdirect_hw::reg::eth_proto_speeds`] lists their speeds.
    pub offered: u32,
    /// The protocols software allows (legacy `eth_proto_admin` mask).
    pub allowed: u32,
    /// Whether auto-negotiation is off (`an_disable_admin`).
    pub autoneg_off: bool,
}

impl<B: Backend> Device<B> {
    /// The port's speeds: PTYS read for Ethernet on the function's port, as
    /// `mlx5_port_query_eth_proto` reads it.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses the register.
    pub fn link_speeds(&mut self) -> Result<LinkSpeeds, DriverError> {
        let mut query = PtysReg::zeroed();
        query
            .set_local_port(1)
            .set_proto_mask(reg::PTYS_PROTO_MASK_ETH);
        let reply = self.access_register(reg::REG_PTYS, false, query.as_bytes())?;
        let ptys = PtysReg::new(&reply[..]).map_err(|_| DriverError::BadDeviceValue {
            what: "ptys_reg",
            value: reply.len() as u64,
        })?;
        // Linux reads the speed from the oper mask's first bit (`mlx5_port_ptys2speed`).
        let oper = ptys.eth_proto_oper();
        let first = oper & oper.wrapping_neg();
        Ok(LinkSpeeds {
            running_mbps: reg::eth_proto_fastest(first).map_or(0, |(_, mbps)| mbps),
            offered: ptys.eth_proto_capability(),
            allowed: ptys.eth_proto_admin(),
            autoneg_off: ptys.an_disable_admin(),
        })
    }

    /// Runs the link at `mbps` Mb/s, auto-negotiation off (the offered protocols of that
    /// speed), or with `None` at any speed the port offers, auto-negotiated; as `ethtool -s
    /// DEV speed S autoneg off` and `ethtool -s DEV autoneg on advertise` of every offered
    /// mode do through mlx5e (`mlx5e_ethtool_set_link_ksettings`): PTYS written, then the
    /// port taken down and, if it was up, up again (`mlx5_toggle_port_link`), so that the
    /// link trains at its new speed.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for a speed the port does not offer (the message lists those
    /// it does), [`DriverError::Command`] when the device refuses a register.
    pub fn set_link_speed(&mut self, mbps: Option<u32>) -> Result<(), DriverError> {
        let speeds = self.link_speeds()?;
        let admin = match mbps {
            None => speeds.offered,
            Some(mbps) => reg::eth_proto_of_speed(mbps) & speeds.offered,
        };
        if admin == 0 {
            let offered: Vec<String> = reg::eth_proto_speeds(speeds.offered)
                .map(|s| s.to_string())
                .collect();
            return Err(DriverError::config(
                "mbps",
                mbps.unwrap_or(0),
                format!("a speed the port offers: {} Mb/s", offered.join(", ")),
            ));
        }
        let mut ptys = PtysReg::zeroed();
        ptys.set_local_port(1)
            .set_an_disable_admin(mbps.is_some())
            .set_proto_mask(reg::PTYS_PROTO_MASK_ETH)
            .set_eth_proto_admin(admin);
        self.access_register(reg::REG_PTYS, true, ptys.as_bytes())?;
        let mut query = [0u8; 16];
        if let Ok(mut paos) = PaosReg::new(&mut query[..]) {
            paos.set_local_port(1);
        }
        let paos = self.access_reg(reg::REG_PAOS, false, &query)?;
        let was_up = PaosReg::new(&paos[..]).is_ok_and(|p| p.admin_status() == reg::PORT_STATUS_UP);
        self.set_port_admin(false)?;
        if was_up {
            self.set_port_admin(true)?;
        }
        Ok(())
    }
}
