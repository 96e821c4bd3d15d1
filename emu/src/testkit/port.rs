//! The port's registers driven as Linux's mlx5 port functions write them (port.c, en/port.c):
//! ACCESS_REG of any register, QTCT and QETCR (`mlx5_set_port_prio_tc`,
//! `mlx5_set_port_tc_group`, `mlx5_set_port_tc_bw_alloc`, `mlx5_modify_port_ets_rate_limit`),
//! PTYS (`mlx5_port_set_eth_ptys`), and a TIS whose packets carry a priority
//! (`mlx5e_create_tis`).

use super::{CmdFail, Host};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::reg::{
    AccessRegisterIn, EtsTcnConfigReg, PtysReg, QetcReg, QtctReg, ACCESS_REG_OP_MOD_READ,
    ACCESS_REG_OP_MOD_WRITE, ETS_TCS, ETS_TC_ENTRY_BYTES, PTYS_PROTO_MASK_ETH,
    QETC_TC_CONFIGURATION_BYTE, REG_PTYS, REG_QETCR, REG_QTCT,
};
use cxdirect_hw::tir::{CreateTisIn, CreateTisOut};

/// Bytes of QETCR.
pub const QETC_BYTES: usize = QetcReg::<&[u8]>::SIZE;

/// QTCT's bytes as Linux writes them: `port` (0 or 1), priority `prio` in class `tclass`.
pub fn qtct(port: u8, prio: u8, tclass: u8) -> Vec<u8> {
    let mut r = QtctReg::zeroed();
    r.set_port_number(port).set_prio(prio).set_tclass(tclass);
    r.as_bytes().to_vec()
}

/// A whole QETCR as Linux writes it: `port`, and for each of the 8 classes what `fill` sets.
pub fn qetcr(port: u8, mut fill: impl FnMut(usize, &mut EtsTcnConfigReg<&mut [u8]>)) -> Vec<u8> {
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

impl Host {
    /// ACCESS_REG of `register` (`data`, as long as the register), written or read; the
    /// register's bytes in the output.
    pub fn access_register(
        &mut self,
        register: u16,
        write: bool,
        data: &[u8],
    ) -> Result<Vec<u8>, CmdFail> {
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
        self.exec(&input, 0x10 + data.len())
            .map(|out| out[0x10..].to_vec())
    }

    /// Writes QTCT: priority `prio` in traffic class `tclass` (`port_number` 1, as
    /// `mlx5_set_port_prio_tc` after probe).
    pub fn set_prio_class(&mut self, prio: u8, tclass: u8) -> Result<Vec<u8>, CmdFail> {
        self.access_register(REG_QTCT, true, &qtct(1, prio, tclass))
    }

    /// Writes a whole QETCR built by [`qetcr`].
    pub fn write_qetcr(
        &mut self,
        port: u8,
        fill: impl FnMut(usize, &mut EtsTcnConfigReg<&mut [u8]>),
    ) -> Result<Vec<u8>, CmdFail> {
        self.access_register(REG_QETCR, true, &qetcr(port, fill))
    }

    /// A TIS whose packets carry priority `prio`: `tisc.prio` = `prio << 1`, as mlx5e writes
    /// it for traffic class `prio` (`mlx5e_create_tis`) and mlx5_ib for a raw packet QP's SL.
    pub fn tis_with_prio(&mut self, prio: u8) -> u32 {
        let mut input = Host::input(Opcode::CreateTis, 0, 0xc0);
        let mut cmd = CreateTisIn::new(&mut input[..]).expect("layout");
        cmd.ctx_mut()
            .set_transport_domain(self.td)
            .set_prio(prio << 1);
        let out = self.exec(&input, 16).expect("CREATE_TIS");
        CreateTisOut::new(&out[..]).expect("layout").tisn()
    }

    /// Writes PTYS as `mlx5_port_set_eth_ptys` does for `ethtool -s`: the legacy admin mask
    /// `admin`, auto-negotiation disabled when `an_disable`; the register as the reply holds it.
    pub fn set_eth_protocols(&mut self, admin: u32, an_disable: bool) -> Result<Vec<u8>, CmdFail> {
        let mut r = PtysReg::zeroed();
        r.set_local_port(1)
            .set_an_disable_admin(an_disable)
            .set_proto_mask(PTYS_PROTO_MASK_ETH)
            .set_eth_proto_admin(admin);
        self.access_register(REG_PTYS, true, r.as_bytes())
    }

    /// Reads PTYS as `mlx5_query_port_ptys` does for Ethernet.
    pub fn eth_protocols(&mut self) -> Vec<u8> {
        let mut r = PtysReg::zeroed();
        r.set_local_port(1).set_proto_mask(PTYS_PROTO_MASK_ETH);
        self.access_register(REG_PTYS, false, r.as_bytes())
            .expect("PTYS read")
    }
}
