//! Enhanced transmission selection as the port's registers carry it: QTCT (the traffic class
//! of each priority) and QETCR (each class's group, bandwidth share and rate limit), written
//! and read through ACCESS_REG as Linux's mlx5 port functions do (`mlx5_set_port_prio_tc`,
//! `mlx5_set_port_tc_group`, `mlx5_set_port_tc_bw_alloc`, `mlx5_modify_port_ets_rate_limit`
//! and their queries), driven by mlx5e's DCB operations (`dcb ets`, `dcb maxrate`) and at
//! probe by `mlx5e_ets_init`.
//!
//! A class's rate limit (`max_bw_value` and `max_bw_units`) is enforced: the SQs whose TIS
//! priority QTCT puts in the class share one bucket at that rate (`engine::pacing`). Groups
//! and shares divide the link while it runs below its fastest speed and classes wait for it
//! (`engine::link`); at full speed the model's engines never fill it.

use super::{bad_param, CmdResult, Core, Syndrome};
use crate::function::hca::EtsClass;
use cxdirect_hw::reg::{
    ets_bw_units, EtsTcnConfigReg, QetcReg, QtctReg, ETS_TCS, ETS_TC_ENTRY_BYTES,
    QETC_TC_CONFIGURATION_BYTE,
};

/// The register's `port_number`: Linux writes QTCT and QETCR with 0 or 1 and reads them with
/// 0 or 1; both name the function's one port. `refusal` names the register.
fn check_port(port_number: u8, refusal: &'static str) -> CmdResult {
    if port_number > 1 {
        return Err(bad_param(Syndrome::BadRegister, refusal));
    }
    Ok(())
}

/// QTCT: a write sets priority `prio`'s traffic class (at most `max_tc` less 1); a read
/// returns it.
pub(crate) fn qtct(core: &mut Core, write: bool, data: &[u8], reply: &mut [u8]) -> CmdResult {
    let req =
        QtctReg::new(data).map_err(|_| bad_param(Syndrome::BadRegister, "QTCT data too short"))?;
    check_port(
        req.port_number(),
        "QTCT port_number names no port of the function (0 or 1)",
    )?;
    let prio = usize::from(req.prio());
    if write {
        let classes = core.hca.caps.general().max_tc().max(1);
        if req.tclass() >= classes {
            return Err(bad_param(
                Syndrome::BadRegister,
                "QTCT tclass beyond the port's traffic classes (max_tc)",
            ));
        }
        core.port.prio_tc[prio] = req.tclass();
    }
    if let Ok(mut r) = QtctReg::new(reply) {
        r.set_port_number(req.port_number())
            .set_prio(prio as u8)
            .set_tclass(core.port.prio_tc[prio]);
    }
    Ok(())
}

/// The traffic class entry `tc` of a QETCR register's bytes.
fn entry(bytes: &[u8], tc: usize) -> Option<EtsTcnConfigReg<&[u8]>> {
    let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
    EtsTcnConfigReg::new(bytes.get(at..at + ETS_TC_ENTRY_BYTES)?).ok()
}

/// QETCR: a write changes, in each traffic class entry, the fields its `g`, `b` and `r` bits
/// name (every entry checked before any is applied: a group 0-7, a share 0-100 percent, a
/// rate unit of none, 100 Mb/s or 1 Gb/s); the global entry is accepted and ignored. A read
/// returns every class's group, share and rate limit.
pub(crate) fn qetcr(core: &mut Core, write: bool, data: &[u8], reply: &mut [u8]) -> CmdResult {
    let req =
        QetcReg::new(data).map_err(|_| bad_param(Syndrome::BadRegister, "QETCR data too short"))?;
    check_port(
        req.port_number(),
        "QETCR port_number names no port of the function (0 or 1)",
    )?;
    if write {
        let mut next = core.port.ets;
        for (tc, class) in next.iter_mut().enumerate() {
            let e =
                entry(data, tc).ok_or(bad_param(Syndrome::BadRegister, "QETCR data too short"))?;
            if e.g() {
                if e.group() > 7 {
                    return Err(bad_param(Syndrome::BadRegister, "QETCR group above 7"));
                }
                class.group = e.group();
            }
            if e.b() {
                if e.bw_allocation() > 100 {
                    return Err(bad_param(
                        Syndrome::BadRegister,
                        "QETCR bw_allocation above 100 percent",
                    ));
                }
                class.bw_allocation = e.bw_allocation();
            }
            if e.r() {
                use ets_bw_units::{GBPS, HUNDRED_MBPS, NO_LIMIT};
                if ![NO_LIMIT, HUNDRED_MBPS, GBPS].contains(&e.max_bw_units()) {
                    return Err(bad_param(
                        Syndrome::BadRegister,
                        "QETCR max_bw_units must be 0 (none), 3 (100 Mb/s) or 4 (1 Gb/s)",
                    ));
                }
                class.max_bw_units = e.max_bw_units();
                class.max_bw_value = e.max_bw_value();
            }
        }
        for (tc, (now, was)) in next.iter().zip(core.port.ets).enumerate() {
            // A changed limit starts its class's bucket full again, as a rate table entry's
            // change does an SQ's.
            if now.rate() != was.rate() {
                core.port.class_pacers[tc].reset();
            }
        }
        core.port.limited_classes = next
            .iter()
            .enumerate()
            .filter(|(_, class)| class.rate().is_some())
            .fold(0, |bits, (tc, _)| bits | 1 << tc);
        core.port.ets = next;
    }
    if let Ok(mut r) = QetcReg::new(&mut reply[..]) {
        r.set_port_number(req.port_number());
    }
    for (tc, class) in core.port.ets.iter().enumerate().take(ETS_TCS) {
        let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
        let Some(bytes) = reply.get_mut(at..at + ETS_TC_ENTRY_BYTES) else {
            break;
        };
        let EtsClass {
            group,
            bw_allocation,
            max_bw_units,
            max_bw_value,
        } = *class;
        if let Ok(mut e) = EtsTcnConfigReg::new(bytes) {
            e.set_group(group)
                .set_bw_allocation(bw_allocation)
                .set_max_bw_units(max_bw_units)
                .set_max_bw_value(max_bw_value);
        }
    }
    Ok(())
}
