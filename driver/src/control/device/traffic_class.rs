//! The port's traffic classes: which class a priority's packets go in (QTCT), how the classes
//! take turns on the link (QETCR's groups and shares) and each class's rate limit (QETCR),
//! written as Linux's mlx5 port functions write them for `dcb ets` and `dcb maxrate`
//! (`mlx5_set_port_prio_tc`, `mlx5_set_port_tc_group`, `mlx5_set_port_tc_bw_alloc`,
//! `mlx5_modify_port_ets_rate_limit`). Groups and shares matter where the link is the
//! bottleneck (a slower link: `Device::set_link_speed`). A function
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

/// The `port_number` Linux's rate limit write names the function's one port with
/// (`mlx5_modify_port_ets_rate_limit`); its priority and group writes leave it 0
/// (`mlx5_set_port_prio_tc`, `mlx5_set_port_tc_group`, `mlx5_set_port_tc_bw_alloc`).
const PORT: u8 = 1;
/// A class's whole share, percent (`MLX5E_MAX_BW_ALLOC`).
const ALL_PERCENT: u8 = 100;
/// The group of vendor classes (`MLX5E_VENDOR_TC_GROUP_NUM`), above every other.
const VENDOR_GROUP: u8 = 7;

/// One traffic class as the port holds it (what `dcb ets show` and `dcb maxrate show` read):
/// QETCR's entry for the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSettings {
    /// Its group: a class in a higher group goes first on a contended link (0 to 7; 7 the
    /// vendor group).
    pub group: u8,
    /// Its share of its group's bandwidth, percent (0 to 100).
    pub percent: u8,
    /// Its rate limit, in Mb/s (`None`: none).
    pub limit_mbps: Option<u32>,
}

/// One class's QETCR entry as read, its rate unit checked.
#[derive(Debug, Clone, Copy, Default)]
struct HeldClass {
    group: u8,
    percent: u8,
    units: u8,
    value: u8,
}

/// How a traffic class takes its turn on the link (`dcb ets tc-tsa`), as mlx5e maps it to
/// QETCR's groups and shares (`mlx5e_build_tc_group`, `mlx5e_build_tc_tx_bw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassSelection {
    /// Strict priority: before every ETS class, and before the strict classes numbered below
    /// it (each strict class is a group of its own).
    Strict,
    /// Enhanced transmission selection: a share, in percent (0 to 100), of what the strict
    /// classes leave. The ETS classes' shares add up to 100; classes at 0% split among
    /// themselves only what the others leave.
    Ets(u8),
    /// The vendor's selection, what a port holds after mlx5e's probe (`mlx5e_ets_init`):
    /// every vendor class in the top group with an equal share.
    Vendor,
}

/// A whole QETCR register (`port_number` 0, as `mlx5_set_port_tc_group` and
/// `mlx5_set_port_tc_bw_alloc` leave it), each class's entry filled by `fill` with that
/// class's (group, share) from `chosen`.
fn qetcr_of(
    chosen: &[(u8, u8)],
    fill: impl Fn(&mut EtsTcnConfigReg<&mut [u8]>, (u8, u8)),
) -> Result<Vec<u8>, DriverError> {
    let mut register = vec![0u8; QetcReg::<&[u8]>::SIZE];
    for (tc, &choice) in chosen.iter().enumerate().take(ETS_TCS) {
        let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
        let mut entry = EtsTcnConfigReg::new(&mut register[at..at + ETS_TC_ENTRY_BYTES])
            .map_err(|_| DriverError::Internal("the QETCR entry's layout"))?;
        fill(&mut entry, choice);
    }
    Ok(register)
}

/// Each class's QETCR group and share for `classes`, as mlx5e computes them
/// (`mlx5e_build_tc_group`, `mlx5e_build_tc_tx_bw`): ETS classes in group 0, or 1 when
/// some ETS class has 0% (those staying in 0, splitting 100% among them, the remainder to
/// the last); each strict class in the next group up, in class order; vendor classes in 7.
fn groups_and_shares(classes: &[ClassSelection]) -> Vec<(u8, u8)> {
    let ets_zero = |c: &ClassSelection| *c == ClassSelection::Ets(0);
    let any_ets = classes.iter().any(|c| matches!(c, ClassSelection::Ets(_)));
    let zeros = classes.iter().filter(|c| ets_zero(c)).count() as u8;
    let last_zero = classes.iter().rposition(ets_zero);
    let mut strict_group = u8::from(any_ets) + u8::from(zeros > 0);
    classes
        .iter()
        .enumerate()
        .map(|(tc, class)| match *class {
            ClassSelection::Vendor => (VENDOR_GROUP, ALL_PERCENT),
            ClassSelection::Strict => {
                strict_group += 1;
                (strict_group - 1, ALL_PERCENT)
            }
            ClassSelection::Ets(0) => {
                let extra = if Some(tc) == last_zero {
                    ALL_PERCENT % zeros
                } else {
                    0
                };
                (0, ALL_PERCENT / zeros + extra)
            }
            ClassSelection::Ets(percent) => (u8::from(zeros > 0), percent),
        })
        .collect()
}
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
        qtct.set_prio(prio).set_tclass(class);
        self.access_register(reg::REG_QTCT, true, qtct.as_bytes())?;
        Ok(())
    }

    /// Limits traffic class `class` to `mbps` Mb/s (`None`: no limit); the other classes keep
    /// theirs. QETCR read, then written with every class's `r` bit and limit, as
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
        // The other classes' limits as the port holds them (QETCR read with `port_number` 0,
        // as `mlx5_query_port_qetcr_reg` reads it), then the write Linux builds from zero:
        // `port_number` 1 and every class's `r` bit, nothing else.
        let held = self.held_classes()?;
        let mut register = vec![0u8; QetcReg::<&[u8]>::SIZE];
        if let Ok(mut r) = QetcReg::new(&mut register[..]) {
            r.set_port_number(PORT);
        }
        for (tc, other) in held.iter().enumerate() {
            let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
            let (units, value) = if tc == usize::from(class) {
                (units, value)
            } else {
                (other.units, other.value)
            };
            let mut entry = EtsTcnConfigReg::new(&mut register[at..at + ETS_TC_ENTRY_BYTES])
                .map_err(|_| DriverError::Internal("the QETCR entry's layout"))?;
            entry
                .set_r(true)
                .set_max_bw_units(units)
                .set_max_bw_value(value);
        }
        self.access_register(reg::REG_QETCR, true, &register)?;
        Ok(())
    }

    /// Sets how each traffic class takes its turn on the link, `classes` holding one
    /// [`ClassSelection`] per class (as many as [`Device::traffic_classes`]): QETCR written
    /// with every class's group, then with every class's share, as mlx5e writes them for
    /// `dcb ets set ... tc-tsa ... tc-bw ...` (`mlx5_set_port_tc_group`,
    /// `mlx5_set_port_tc_bw_alloc`). Rate limits are left as they are.
    ///
    /// # Errors
    ///
    /// [`DriverError::Unsupported`] without ETS, [`DriverError::Config`] for a count other
    /// than the port's classes, a share above 100, or ETS shares that do not add up to 100
    /// (mlx5e's `mlx5e_dbcnl_validate_ets`), [`DriverError::Command`] when the device refuses
    /// the register.
    pub fn set_class_selection(&mut self, classes: &[ClassSelection]) -> Result<(), DriverError> {
        let count = self.ets_classes()?;
        if classes.len() != usize::from(count) {
            return Err(DriverError::config(
                "classes",
                classes.len() as u64,
                format!("one selection for each of the port's {count} traffic classes"),
            ));
        }
        let mut sum = 0u32;
        for class in classes {
            if let ClassSelection::Ets(percent) = *class {
                if percent > ALL_PERCENT {
                    return Err(DriverError::config("percent", percent, "0 to 100"));
                }
                sum += u32::from(percent);
            }
        }
        let any_ets = classes.iter().any(|c| matches!(c, ClassSelection::Ets(_)));
        if any_ets && sum != u32::from(ALL_PERCENT) {
            return Err(DriverError::config(
                "ETS shares",
                sum,
                "ETS shares that add up to 100 percent",
            ));
        }
        let chosen = groups_and_shares(classes);
        let groups = qetcr_of(&chosen, |e, (group, _)| {
            e.set_g(true).set_group(group);
        })?;
        self.access_register(reg::REG_QETCR, true, &groups)?;
        let shares = qetcr_of(&chosen, |e, (_, share)| {
            e.set_b(true).set_bw_allocation(share);
        })?;
        self.access_register(reg::REG_QETCR, true, &shares)?;
        Ok(())
    }

    /// Each traffic class's group, share and rate limit, as the port holds them (one entry
    /// per class, [`Device::traffic_classes`] of them): QETCR read as
    /// `mlx5_query_port_qetcr_reg` reads it.
    ///
    /// # Errors
    ///
    /// [`DriverError::Unsupported`] without ETS, [`DriverError::Command`] when the device
    /// refuses the register, [`DriverError::BadDeviceValue`] for a rate unit the register
    /// does not define.
    pub fn class_settings(&mut self) -> Result<Vec<ClassSettings>, DriverError> {
        let classes = usize::from(self.ets_classes()?).min(ETS_TCS);
        let held = self.held_classes()?;
        Ok(held[..classes]
            .iter()
            .map(|c| {
                let value = u32::from(c.value);
                ClassSettings {
                    group: c.group,
                    percent: c.percent,
                    limit_mbps: match (c.units, value) {
                        (ets_bw_units::HUNDRED_MBPS, v) if v != 0 => Some(v * 100),
                        (ets_bw_units::GBPS, v) if v != 0 => Some(v * 1000),
                        _ => None,
                    },
                }
            })
            .collect())
    }

    /// Every class's entry as the port holds it: QETCR read with `port_number` 0, as
    /// `mlx5_query_port_qetcr_reg` reads it, each rate unit checked before it is used or
    /// written back.
    fn held_classes(&mut self) -> Result<[HeldClass; ETS_TCS], DriverError> {
        let query = vec![0u8; QetcReg::<&[u8]>::SIZE];
        let read = self.access_register(reg::REG_QETCR, false, &query)?;
        let mut held = [HeldClass::default(); ETS_TCS];
        for (tc, class) in held.iter_mut().enumerate() {
            let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
            let e = read
                .get(at..at + ETS_TC_ENTRY_BYTES)
                .and_then(|bytes| EtsTcnConfigReg::new(bytes).ok())
                .ok_or(DriverError::BadDeviceValue {
                    what: "qetc_reg",
                    value: read.len() as u64,
                })?;
            let units = e.max_bw_units();
            if ![
                ets_bw_units::NO_LIMIT,
                ets_bw_units::HUNDRED_MBPS,
                ets_bw_units::GBPS,
            ]
            .contains(&units)
            {
                return Err(DriverError::BadDeviceValue {
                    what: "ets_tcn_config_reg.max_bw_units",
                    value: u64::from(units),
                });
            }
            *class = HeldClass {
                group: e.group(),
                percent: e.bw_allocation(),
                units,
                value: e.max_bw_value(),
            };
        }
        Ok(held)
    }

    /// The traffic class of each priority 0 to 7: QTCT read per priority with `port_number`
    /// 1, as `mlx5_query_port_prio_tc` reads it (`dcb ets show ... prio-tc`).
    ///
    /// # Errors
    ///
    /// [`DriverError::Unsupported`] without ETS, [`DriverError::Command`] when the device
    /// refuses the register.
    pub fn priority_classes(&mut self) -> Result<[u8; 8], DriverError> {
        self.ets_classes()?;
        let mut classes = [0u8; 8];
        for (prio, class) in classes.iter_mut().enumerate() {
            let mut query = QtctReg::zeroed();
            query.set_port_number(PORT).set_prio(prio as u8);
            let reply = self.access_register(reg::REG_QTCT, false, query.as_bytes())?;
            *class = QtctReg::new(&reply[..]).map_or(0, |r| r.tclass());
        }
        Ok(classes)
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
    use super::{class_limit_fields, groups_and_shares, ClassSelection};
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

    /// mlx5e's groups and shares (`mlx5e_build_tc_group`, `mlx5e_build_tc_tx_bw`) for the
    /// selections `dcb ets` sets and `mlx5e_ets_init` writes.
    #[test]
    fn selections_take_mlx5es_groups_and_shares() {
        use ClassSelection::{Ets, Strict, Vendor};
        assert_eq!(groups_and_shares(&[Vendor; 8]), vec![(7, 100); 8]);
        assert_eq!(
            groups_and_shares(&[
                Ets(70),
                Ets(30),
                Strict,
                Strict,
                Strict,
                Strict,
                Strict,
                Strict
            ]),
            vec![
                (0, 70),
                (0, 30),
                (1, 100),
                (2, 100),
                (3, 100),
                (4, 100),
                (5, 100),
                (6, 100)
            ]
        );
        assert_eq!(
            groups_and_shares(&[
                Ets(75),
                Ets(0),
                Ets(0),
                Ets(25),
                Ets(0),
                Ets(0),
                Ets(0),
                Strict
            ]),
            vec![
                (1, 75),
                (0, 20),
                (0, 20),
                (1, 25),
                (0, 20),
                (0, 20),
                (0, 20),
                (2, 100)
            ]
        );
        assert_eq!(
            groups_and_shares(&[
                Ets(0),
                Ets(0),
                Ets(0),
                Ets(100),
                Strict,
                Vendor,
                Ets(0),
                Ets(0)
            ]),
            vec![
                (0, 20),
                (0, 20),
                (0, 20),
                (1, 100),
                (2, 100),
                (7, 100),
                (0, 20),
                (0, 20)
            ]
        );
        assert_eq!(
            groups_and_shares(&[
                Ets(0),
                Ets(0),
                Ets(0),
                Ets(100),
                Strict,
                Strict,
                Ets(0),
                Ets(0)
            ])[7],
            (0, 20),
            "100 % 5 = 0 for the last"
        );
        assert_eq!(
            groups_and_shares(&[
                Ets(0),
                Ets(0),
                Ets(0),
                Ets(100),
                Strict,
                Strict,
                Strict,
                Strict
            ])[2],
            (0, 34),
            "the last class at 0% takes 100 % 3"
        );
    }
}
