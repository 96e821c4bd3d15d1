//! A port's traffic classes as Linux's mlx5 port functions set them, for tests that send in
//! one: QTCT puts a priority in a class (`mlx5_set_port_prio_tc`), QETCR limits a class's rate
//! (`mlx5_modify_port_ets_rate_limit`, what `dcb maxrate` reaches).

use cxdirect::Device;
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::reg::{
    ets_bw_units, AccessRegisterIn, EtsTcnConfigReg, QetcReg, QtctReg, ACCESS_REG_OP_MOD_WRITE,
    ETS_TCS, ETS_TC_ENTRY_BYTES, QETC_TC_CONFIGURATION_BYTE, REG_QETCR, REG_QTCT,
};

/// The rate [`limit_priority`] gives a class: one 100 Mb/s unit, in bytes a second.
pub const LIMIT_BYTES_PER_SECOND: f64 = 12.5e6;

/// ACCESS_REG writing `register` with `data`, as Linux's `mlx5_core_access_reg` sends it.
pub fn write_register(dev: &mut Device<EmuBackend>, register: u16, data: &[u8]) {
    let mut input = vec![0u8; 0x10 + data.len()];
    input[..2].copy_from_slice(&(Opcode::AccessReg as u16).to_be_bytes());
    input[6..8].copy_from_slice(&ACCESS_REG_OP_MOD_WRITE.to_be_bytes());
    AccessRegisterIn::new(&mut input[..])
        .expect("layout")
        .set_register_id(register);
    input[0x10..].copy_from_slice(data);
    dev.exec(&input, 0x10 + data.len()).expect("ACCESS_REG");
}

/// Puts priority `prio` in class `tc` and limits class `tc` to one 100 Mb/s unit, the others
/// unlimited (`mlx5_set_port_prio_tc`, `mlx5_modify_port_ets_rate_limit`).
pub fn limit_priority(dev: &mut Device<EmuBackend>, prio: u8, tc: u8) {
    let mut qtct = QtctReg::zeroed();
    qtct.set_port_number(1).set_prio(prio).set_tclass(tc);
    write_register(dev, REG_QTCT, qtct.as_bytes());
    let mut qetcr = vec![0u8; QetcReg::<&[u8]>::SIZE];
    QetcReg::new(&mut qetcr[..])
        .expect("layout")
        .set_port_number(1);
    for class in 0..ETS_TCS {
        let at = QETC_TC_CONFIGURATION_BYTE + class * ETS_TC_ENTRY_BYTES;
        let (units, value) = if class == usize::from(tc) {
            (ets_bw_units::HUNDRED_MBPS, 1)
        } else {
            (ets_bw_units::NO_LIMIT, 0)
        };
        EtsTcnConfigReg::new(&mut qetcr[at..at + ETS_TC_ENTRY_BYTES])
            .expect("layout")
            .set_r(true)
            .set_max_bw_units(units)
            .set_max_bw_value(value);
    }
    write_register(dev, REG_QETCR, &qetcr);
}
