//! The port's traffic classes: which class a priority's packets go in (QTCT) and each class's
//! rate limit (QETCR), written as Linux's mlx5 port functions write them for `dcb ets` and
//! `dcb maxrate` (`mlx5_set_port_prio_tc`, `mlx5_modify_port_ets_rate_limit`). A function
//! cxdirect holds through VFIO has no kernel driver to run `dcb`, so these are how its user
//! shapes what each priority sends: an Ethernet port's queues send at `PortConfig::priority`,
//! an RC queue pair at `ConnectParams::sl`, a datagram at its address handle's `AhAttr::sl`.

use super::Device;
use crate::backend::Backend;
use crate::error::DriverError;
use cxdirect_hw::reg::{
    self, ets_bw_units, EtsTcnConfigReg, QetcReg, QtctReg, ETS_TCS, ETS_TC_ENTRY_BYTES,
    QETC_TC_CONFIGURATION_BYTE,
};

/// The `port_number` Linux's port functions name the function's one port with.
const PORT: u8 = 1;
/// The largest rate the 100 Mb/s unit carries (255 units); above it, whole Gb/s.
const MAX_HUNDRED_MBPS: u32 = 255 * 100;
/// The largest rate a class limit carries: 255 units of 1 Gb/s, in Mb/s.
const MAX_CLASS_MBPS: u32 = 255 * 1000;

/// A class's rate limit as QETCR carries it: (`max_bw_units`, `max_bw_value`) for `mbps`
/// (`None`: no limit). Up to 25.5 Gb/s in units of 100 Mb/s (rounded down, at least one),
/// above in whole Gb/s, as `mlx5e_dcbnl_ieee_setmaxrate` chooses.
fn class_limit_fields(mbps: Option<u32>) -> Result<(u8, u8), DriverError> {
    match mbps {
        None => Ok((ets_bw_units::NO_LIMIT, 0)),
        Some(0) => Err(DriverError::config(
            "mbps",
            0u64,
            "1 to 255,000 Mb/s (None for no limit)",
        )),
        Some(m) if m <= MAX_HUNDRED_MBPS => {
            Ok((ets_bw_units::HUNDRED_MBPS, (m / 100).max(1) as u8))
        }
        Some(m) if m <= MAX_CLASS_MBPS => Ok((ets_bw_units::GBPS, (m / 1000) as u8)),
        Some(m) => Err(DriverError::config(
            "mbps",
            m,
            "at most 255,000 Mb/s (255 units of 1 Gb/s)",
        )),
    }
}

impl<B: Backend> Device<B> {
    /// Traffic classes the port has (the general capability page's `max_tc`), 0 when it
    /// offers no enhanced transmission selection (`ets` clear).
    pub fn traffic_classes(&self) -> u8 {
        if self.caps().ets() {
            self.caps().max_tc()
        } else {
            0
        }
    }

    /// Puts priority `prio` (0 to 7) in traffic class `class` (below
    /// [`Device::traffic_classes`]): QTCT, as `mlx5_set_port_prio_tc` writes it.
    ///
    /// # Errors
    ///
    /// [`DriverError::Unsupported`] without ETS, [`DriverError::Config`] for a priority or
    /// class out of range, [`DriverError::Command`] when the device refuses the register.
    pub fn set_priority_class(&mut self, prio: u8, class: u8) -> Result<(), DriverError> {
        let classes = self.ets_classes()?;
        if prio > 7 {
            return Err(DriverError::config("prio", prio, "0 to 7"));
        }
        if class >= classes {
            return Err(DriverError::config(
                "class",
                class,
                format!("below the port's {classes} traffic classes"),
            ));
        }
        let mut qtct = QtctReg::zeroed();
        qtct.set_port_number(PORT).set_prio(prio).set_tclass(class);
        self.access_register(reg::REG_QTCT, true, qtct.as_bytes())?;
        Ok(())
    }

    /// Limits traffic class `class` to `mbps` Mb/s (`None`: no limit); the other classes keep
    /// theirs. QETCR read, then written whole with every class's `r` bit, as
    /// `mlx5_modify_port_ets_rate_limit` writes it; the rate goes in units of 100 Mb/s up to
    /// 25.5 Gb/s (rounded down, at least one unit: 100 Mb/s is the least a class takes), in
    /// whole Gb/s above.
    ///
    /// # Errors
    ///
    /// [`DriverError::Unsupported`] without ETS, [`DriverError::Config`] for a class out of
    /// range or a rate of 0 or above 255 Gb/s, [`DriverError::Command`] when the device
    /// refuses the register.
    pub fn set_class_rate_limit(
        &mut self,
        class: u8,
        mbps: Option<u32>,
    ) -> Result<(), DriverError> {
        let classes = self.ets_classes()?;
        if class >= classes {
            return Err(DriverError::config(
                "class",
                class,
                format!("below the port's {classes} traffic classes"),
            ));
        }
        let (units, value) = class_limit_fields(mbps)?;
        let mut query = vec![0u8; QetcReg::<&[u8]>::SIZE];
        if let Ok(mut q) = QetcReg::new(&mut query[..]) {
            q.set_port_number(PORT);
        }
        let mut register = self.access_register(reg::REG_QETCR, false, &query)?;
        register.resize(QetcReg::<&[u8]>::SIZE, 0);
        if let Ok(mut r) = QetcReg::new(&mut register[..]) {
            r.set_port_number(PORT);
        }
        for tc in 0..ETS_TCS {
            let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
            let mut entry = EtsTcnConfigReg::new(&mut register[at..at + ETS_TC_ENTRY_BYTES])
                .map_err(|_| DriverError::Internal("the QETCR entry's layout"))?;
            // Only the rate limits change: the group and share bits stay clear.
            entry.set_g(false).set_b(false).set_r(true);
            if tc == usize::from(class) {
                entry.set_max_bw_units(units).set_max_bw_value(value);
            }
        }
        self.access_register(reg::REG_QETCR, true, &register)?;
        Ok(())
    }

    /// The port's traffic classes, or why there are none.
    fn ets_classes(&self) -> Result<u8, DriverError> {
        match self.traffic_classes() {
            0 => Err(DriverError::Unsupported {
                what: "traffic classes",
                why: "the device reports no enhanced transmission selection (ets)",
            }),
            classes => Ok(classes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::class_limit_fields;
    use cxdirect_hw::reg::ets_bw_units::{GBPS, HUNDRED_MBPS, NO_LIMIT};

    #[test]
    fn class_limits_take_linuxs_units() {
        assert_eq!(class_limit_fields(None).unwrap(), (NO_LIMIT, 0));
        assert_eq!(class_limit_fields(Some(50)).unwrap(), (HUNDRED_MBPS, 1));
        assert_eq!(class_limit_fields(Some(100)).unwrap(), (HUNDRED_MBPS, 1));
        assert_eq!(class_limit_fields(Some(2_550)).unwrap(), (HUNDRED_MBPS, 25));
        assert_eq!(
            class_limit_fields(Some(25_500)).unwrap(),
            (HUNDRED_MBPS, 255)
        );
        assert_eq!(class_limit_fields(Some(25_600)).unwrap(), (GBPS, 25));
        assert_eq!(class_limit_fields(Some(255_000)).unwrap(), (GBPS, 255));
        assert!(class_limit_fields(Some(0)).is_err());
        assert!(class_limit_fields(Some(255_001)).is_err());
    }
}
