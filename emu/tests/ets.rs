//! Enhanced transmission selection as Linux's mlx5 port functions drive it (port.c): at probe
//! mlx5e's `mlx5e_ets_init` writes QTCT once per priority with `port_number` 0
//! (`mlx5_set_port_prio_tc`: priority 0 in class 1, 1 in 0, the rest in their own), then two
//! whole QETCR registers with `port_number` 0, one with every class's `g` bit and group 7
//! (`mlx5_set_port_tc_group`), one with every `b` bit and 100 percent
//! (`mlx5_set_port_tc_bw_alloc`); `dcb ets show` reads QTCT with `port_number` 1 per priority
//! and QETCR with 0 (`mlx5_query_port_prio_tc`, `mlx5_query_port_qetcr_reg`); `dcb maxrate`
//! writes the `r` bits with `port_number` 1 (`mlx5_modify_port_ets_rate_limit`). Before, the
//! general page's `ets` was 0 and both registers were refused as not modelled.

use cxdirect_emu::testkit::{refused, CmdFail, Host};
use cxdirect_emu::Syndrome;
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::reg::{
    ets_bw_units, AccessRegisterIn, EtsTcnConfigReg, QetcReg, QtctReg, ACCESS_REG_OP_MOD_READ,
    ACCESS_REG_OP_MOD_WRITE, ETS_TCS, ETS_TC_ENTRY_BYTES, QETC_TC_CONFIGURATION_BYTE, REG_QETCR,
    REG_QTCT,
};

const QETC_BYTES: usize = QetcReg::<&[u8]>::SIZE;
const QTCT_BYTES: usize = QtctReg::<&[u8]>::SIZE;

fn host() -> Host {
    Host::roce_loopback(1 << 20)
}

/// ACCESS_REG of `register` (`data`, as long as the register), written or read; the
/// register's bytes in the output.
fn access(h: &mut Host, register: u16, write: bool, data: &[u8]) -> Result<Vec<u8>, CmdFail> {
    let op_mod = if write {
        ACCESS_REG_OP_MOD_WRITE
    } else {
        ACCESS_REG_OP_MOD_READ
    };
    let mut input = Host::input(Opcode::AccessReg, op_mod, 0x10 + data.len());
    AccessRegisterIn::new(&mut input[..])
        .expect("layout")
        .set_register_id(register);
    input[0x10..].copy_from_slice(data);
    h.exec(&input, 0x10 + data.len())
        .map(|out| out[0x10..].to_vec())
}

fn qtct(port: u8, prio: u8, tclass: u8) -> Vec<u8> {
    let mut r = QtctReg::zeroed();
    r.set_port_number(port).set_prio(prio).set_tclass(tclass);
    r.as_bytes().to_vec()
}

/// A whole QETCR as Linux writes it: `port`, and for each of the 8 classes what `fill` sets.
fn qetcr(port: u8, mut fill: impl FnMut(usize, &mut EtsTcnConfigReg<&mut [u8]>)) -> Vec<u8> {
    let mut bytes = vec![0u8; QETC_BYTES];
    QetcReg::new(&mut bytes[..])
        .expect("layout")
        .set_port_number(port);
    for tc in 0..ETS_TCS {
        let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
        let mut e = EtsTcnConfigReg::new(&mut bytes[at..at + ETS_TC_ENTRY_BYTES]).expect("layout");
        fill(tc, &mut e);
    }
    bytes
}

/// Writes a whole QETCR built by [`qetcr`].
fn write_qetcr(
    h: &mut Host,
    port: u8,
    fill: impl FnMut(usize, &mut EtsTcnConfigReg<&mut [u8]>),
) -> Result<Vec<u8>, CmdFail> {
    access(h, REG_QETCR, true, &qetcr(port, fill))
}

/// Each class's (group, share, rate unit, rate value) as a QETCR read returns them.
fn classes(h: &mut Host) -> Vec<(u8, u8, u8, u8)> {
    let out = access(h, REG_QETCR, false, &[0u8; QETC_BYTES]).expect("QETCR read");
    (0..ETS_TCS)
        .map(|tc| {
            let at = QETC_TC_CONFIGURATION_BYTE + tc * ETS_TC_ENTRY_BYTES;
            let e = EtsTcnConfigReg::new(&out[at..at + ETS_TC_ENTRY_BYTES]).expect("layout");
            (
                e.group(),
                e.bw_allocation(),
                e.max_bw_units(),
                e.max_bw_value(),
            )
        })
        .collect()
}

fn prio_map(h: &mut Host) -> Vec<u8> {
    (0..8)
        .map(|prio| {
            let out = access(h, REG_QTCT, false, &qtct(1, prio, 0)).expect("QTCT read");
            QtctReg::new(&out[..]).expect("layout").tclass()
        })
        .collect()
}

#[test]
fn the_general_page_offers_ets_over_eight_classes() {
    let mut h = host();
    let out = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&out[0x10..]).expect("layout");
    assert!(g.ets());
    assert_eq!(g.max_tc(), 8, "mlx5_max_tc: 7");
}

#[test]
fn mlx5e_ets_init_and_dcb_ets_read_back_what_they_wrote() {
    let mut h = host();
    // mlx5e_ets_init: QTCT per priority with port_number 0.
    let map = [1u8, 0, 2, 3, 4, 5, 6, 7];
    for (prio, &tc) in map.iter().enumerate() {
        access(&mut h, REG_QTCT, true, &qtct(0, prio as u8, tc)).expect("QTCT write");
    }
    write_qetcr(&mut h, 0, |_, e| {
        e.set_g(true).set_group(7);
    })
    .expect("QETCR groups");
    write_qetcr(&mut h, 0, |_, e| {
        e.set_b(true).set_bw_allocation(100);
    })
    .expect("QETCR shares");
    assert_eq!(prio_map(&mut h), map);
    assert_eq!(classes(&mut h), vec![(7, 100, 0, 0); 8]);

    // `dcb ets set ... tc-tsa 0:ets 1:ets 2:strict ... tc-bw 0:70 1:30`: the ETS classes in
    // group 0, the strict ones in groups 1 up (mlx5e_build_tc_group), each write changing
    // only the fields its bits name.
    write_qetcr(&mut h, 0, |tc, e| {
        e.set_g(true)
            .set_group(if tc < 2 { 0 } else { tc as u8 - 1 });
    })
    .expect("groups");
    write_qetcr(&mut h, 0, |tc, e| {
        e.set_b(true)
            .set_bw_allocation([70, 30, 100, 100, 100, 100, 100, 100][tc]);
    })
    .expect("shares");
    // `dcb maxrate set ... tc-maxrate 0:1gbit 1:500mbit`: port_number 1, every `r` bit.
    write_qetcr(&mut h, 1, |tc, e| {
        let (units, value) = match tc {
            0 => (ets_bw_units::GBPS, 1),
            1 => (ets_bw_units::HUNDRED_MBPS, 5),
            _ => (ets_bw_units::NO_LIMIT, 0),
        };
        e.set_r(true)
            .set_max_bw_units(units)
            .set_max_bw_value(value);
    })
    .expect("rate limits");
    let got = classes(&mut h);
    assert_eq!(got[0], (0, 70, ets_bw_units::GBPS, 1));
    assert_eq!(got[1], (0, 30, ets_bw_units::HUNDRED_MBPS, 5));
    assert_eq!(got[2], (1, 100, 0, 0));
    assert_eq!(got[7], (6, 100, 0, 0));
}

#[test]
fn a_bad_ets_write_is_refused_and_changes_nothing() {
    let mut h = host();
    let before = (prio_map(&mut h), classes(&mut h));
    let bad =
        |r: Result<Vec<u8>, CmdFail>| refused(r, CmdStatus::BadParameter, Syndrome::BadRegister);
    // A port the function does not have, a short register.
    bad(access(&mut h, REG_QTCT, true, &qtct(2, 3, 1)));
    bad(access(&mut h, REG_QTCT, true, &[0u8; QTCT_BYTES - 4]));
    // A share above 100 percent in the last class: the whole write is refused, the classes
    // before it unchanged.
    bad(write_qetcr(&mut h, 0, |tc, e| {
        e.set_b(true)
            .set_bw_allocation(if tc == 7 { 101 } else { 10 });
    }));
    bad(write_qetcr(&mut h, 0, |_, e| {
        e.set_r(true).set_max_bw_units(5).set_max_bw_value(1);
    }));
    bad(write_qetcr(&mut h, 0, |_, e| {
        e.set_g(true).set_group(8);
    }));
    bad(write_qetcr(&mut h, 3, |_, e| {
        e.set_g(true).set_group(1);
    }));
    bad(access(&mut h, REG_QETCR, true, &[0u8; 0x20]));
    assert_eq!((prio_map(&mut h), classes(&mut h)), before);
}
