//! Access registers: the ACCESS_REG command, register ids, and the port registers PAOS (port
//! administrative and operational status) and PMTU (port MTU).
//!
//! ACCESS_REG carries the register's bytes after its 16-byte header in both directions: written
//! from the input for a write (`op_mod` [`ACCESS_REG_OP_MOD_WRITE`]), returned in the output for a
//! read. A register layout such as [`PaosReg`] can view that data directly, e.g.
//! `PaosReg::new(&in_buf[AccessRegisterIn::SIZE..])`.

use crate::layout;

/// Register id of PCAP, port capabilities (`MLX5_REG_PCAP`).
pub const REG_PCAP: u16 = 0x5001;
/// Register id of PMLP, port module to local port mapping (`MLX5_REG_PMLP`).
pub const REG_PMLP: u16 = 0x5002;
/// Register id of PMTU, port MTU (`MLX5_REG_PMTU`): see [`PmtuReg`].
pub const REG_PMTU: u16 = 0x5003;
/// Register id of PTYS, port type and speed (`MLX5_REG_PTYS`).
pub const REG_PTYS: u16 = 0x5004;
/// Register id of PAOS, port administrative and operational status (`MLX5_REG_PAOS`): see
/// [`PaosReg`].
pub const REG_PAOS: u16 = 0x5006;
/// Register id of PFCC, port flow control configuration (`MLX5_REG_PFCC`).
pub const REG_PFCC: u16 = 0x5007;
/// Register id of PPCNT, port performance counters (`MLX5_REG_PPCNT`).
pub const REG_PPCNT: u16 = 0x5008;
/// Register id of PMAOS, port module administrative and operational status
/// (`MLX5_REG_PMAOS`).
pub const REG_PMAOS: u16 = 0x5012;
/// Register id of NODE_DESC, the node description (`MLX5_REG_NODE_DESC`).
pub const REG_NODE_DESC: u16 = 0x6001;
/// Register id of HOST_ENDIANNESS (`MLX5_REG_HOST_ENDIANNESS`).
pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
/// Register id of MCIA, module cable information access (`MLX5_REG_MCIA`).
pub const REG_MCIA: u16 = 0x9014;

/// ACCESS_REG `op_mod`: write the register (`MLX5_ACCESS_REGISTER_IN_OP_MOD_WRITE`).
pub const ACCESS_REG_OP_MOD_WRITE: u16 = 0x0;
/// ACCESS_REG `op_mod`: read the register (`MLX5_ACCESS_REGISTER_IN_OP_MOD_READ`).
pub const ACCESS_REG_OP_MOD_READ: u16 = 0x1;

/// PAOS `admin_status` / `oper_status`: up (`MLX5_PORT_UP`).
pub const PORT_STATUS_UP: u8 = 1;
/// PAOS `admin_status` / `oper_status`: down (`MLX5_PORT_DOWN`; for `admin_status`, down by
/// configuration).
pub const PORT_STATUS_DOWN: u8 = 2;
layout! {
    /// ACCESS_REG input: which register, and (for a write) its new contents.
    pub struct AccessRegisterIn("access_register_in", 0x10) {
        /// Command opcode: [`Opcode::AccessReg`](crate::cmd::Opcode::AccessReg).
        opcode: u16 @ 0x0 [0x10],
        /// [`ACCESS_REG_OP_MOD_WRITE`] or [`ACCESS_REG_OP_MOD_READ`].
        op_mod: u16 @ 0x30 [0x10],
        /// The register: `REG_*`.
        register_id: u16 @ 0x50 [0x10],
        /// Register-specific argument (0 for the port registers).
        argument: u32 @ 0x60 [0x20],
    }
    arrays {
        /// Dword `index` of the register's contents (written on a write; the same length is
        /// expected in the output on a read).
        register_data: u32 @ 0x80 [0x20],
    }
}

layout! {
    /// ACCESS_REG output: the register's contents.
    pub struct AccessRegisterOut("access_register_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x0 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    arrays {
        /// Dword `index` of the register's contents (after a read; echoed after a write).
        register_data: u32 @ 0x80 [0x20],
    }
}

layout! {
    /// PAOS: port administrative and operational status.
    pub struct PaosReg("paos_reg", 0x10) {
        /// Switch partition id (0).
        swid: u8 @ 0x0 [0x8],
        /// Local port number (1-based).
        local_port: u8 @ 0x8 [0x8],
        /// Administrative status: [`PORT_STATUS_UP`], [`PORT_STATUS_DOWN`],
        /// [`PORT_STATUS_UP_ONCE`]; written only when `ase` is set.
        admin_status: u8 @ 0x14 [0x4],
        /// Operational status: [`PORT_STATUS_UP`], [`PORT_STATUS_DOWN`],
        /// [`PORT_STATUS_DOWN_BY_PORT_FAILURE`] (read only).
        oper_status: u8 @ 0x1c [0x4],
        /// Admin status update enable: a write changes `admin_status`.
        ase: bool @ 0x20 [0x1],
        /// Event update enable: a write changes `e`.
        ee: bool @ 0x21 [0x1],
        /// Event generation mode for operational status changes (0 generates none).
        e: u8 @ 0x3e [0x2],
    }
}

layout! {
    /// PMTU: port MTU, as a frame size in bytes (Linux programs its software MTU plus 22: the
    /// Ethernet header, one VLAN tag and the FCS).
    pub struct PmtuReg("pmtu_reg", 0x10) {
        /// Local port number (1-based).
        local_port: u8 @ 0x8 [0x8],
        /// Largest MTU the port supports (read only).
        max_mtu: u16 @ 0x20 [0x10],
        /// MTU configured by software.
        admin_mtu: u16 @ 0x40 [0x10],
        /// MTU in effect (read only).
        oper_mtu: u16 @ 0x60 [0x10],
    }
}
