//! Access registers: the ACCESS_REG command, register ids, and the port registers PAOS (port
//! administrative and operational status), PMTU (port MTU), PTYS, PFCC, PPCNT, and the ETS
//! registers QTCT and QETCR.
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
/// Register id of QETCR, the port's ETS configuration: each traffic class's group,
/// bandwidth share and rate limit (`MLX5_REG_QETCR`): see [`QetcReg`].
pub const REG_QETCR: u16 = 0x4005;
/// Register id of QTCT, the traffic class of a priority (`MLX5_REG_QTCT`): see [`QtctReg`].
pub const REG_QTCT: u16 = 0x400a;
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
        /// up once; written only when `ase` is set.
        admin_status: u8 @ 0x14 [0x4],
        /// Operational status: [`PORT_STATUS_UP`], [`PORT_STATUS_DOWN`],
        /// down by port failure (read only).
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

/// [`PtysReg::proto_mask`] bit: the Ethernet fields are valid (`MLX5_PTYS_EN`).
pub const PTYS_PROTO_MASK_ETH: u8 = 1 << 2;
/// Bit of the legacy `eth_proto_*` masks for 1000BASE-KX (`MLX5E_1000BASE_KX`).
pub const ETH_PROTO_1000BASE_KX: u32 = 1 << 1;
/// Bit of the legacy `eth_proto_*` masks for 10GBASE-KR (`MLX5E_10GBASE_KR`).
pub const ETH_PROTO_10GBASE_KR: u32 = 1 << 4;
/// Bit of the legacy `eth_proto_*` masks for 40GBASE-CR4 (`MLX5E_40GBASE_CR4`).
pub const ETH_PROTO_40GBASE_CR4: u32 = 1 << 6;
/// Bit of the legacy `eth_proto_*` masks for 100GBASE-CR4 (`MLX5E_100GBASE_CR4`).
pub const ETH_PROTO_100GBASE_CR4: u32 = 1 << 20;
/// Bit of the legacy `eth_proto_*` masks for 25GBASE-CR (`MLX5E_25GBASE_CR`).
pub const ETH_PROTO_25GBASE_CR: u32 = 1 << 27;
/// Bit of the legacy `eth_proto_*` masks for 50GBASE-CR2 (`MLX5E_50GBASE_CR2`).
pub const ETH_PROTO_50GBASE_CR2: u32 = 1 << 30;

/// The speed of each bit of the legacy `eth_proto_*` masks, in Mb/s (0: no protocol):
/// Linux's `mlx5e_link_speed` (drivers/net/ethernet/mellanox/mlx5/core/port.c).
const ETH_PROTO_MBPS: [u32; 32] = [
    1_000, 1_000, 10_000, 10_000, 10_000, 20_000, 40_000, 40_000, 56_000, 0, 0, 0, 10_000, 10_000,
    10_000, 40_000, 40_000, 0, 50_000, 0, 100_000, 100_000, 100_000, 100_000, 100, 1_000, 10_000,
    25_000, 25_000, 25_000, 50_000, 50_000,
];

/// The legacy `eth_proto_*` bits of every protocol of speed `mbps` (Linux's
/// `mlx5_port_speed2linkmodes`); 0 when none runs at that speed.
pub fn eth_proto_of_speed(mbps: u32) -> u32 {
    (0..32)
        .filter(|&bit| mbps != 0 && ETH_PROTO_MBPS[bit] == mbps)
        .fold(0, |mask, bit| mask | 1 << bit)
}

/// The speeds of the protocols a legacy `eth_proto_*` mask names, in Mb/s, slowest first,
/// each once.
pub fn eth_proto_speeds(mask: u32) -> impl Iterator<Item = u32> {
    let mut speeds = [0u32; 32];
    for (bit, speed) in speeds.iter_mut().enumerate() {
        if mask & (1 << bit) != 0 {
            *speed = ETH_PROTO_MBPS[bit];
        }
    }
    speeds.sort_unstable();
    let mut last = 0;
    speeds.into_iter().filter(move |&s| {
        let new = s != 0 && s != last;
        last = s;
        new
    })
}

/// The fastest protocol a legacy `eth_proto_*` mask names, as its one bit, and its speed in
/// Mb/s; `None` when the mask names none.
pub fn eth_proto_fastest(mask: u32) -> Option<(u32, u32)> {
    (0..32)
        .filter(|&bit| mask & (1 << bit) != 0 && ETH_PROTO_MBPS[bit] != 0)
        .map(|bit| (1u32 << bit, ETH_PROTO_MBPS[bit]))
        .max_by_key(|&(_, mbps)| mbps)
}

layout! {
    /// PTYS: port type and speed, as legacy Ethernet protocol masks (the extended masks are
    /// used only when PCAM says so).
    pub struct PtysReg("ptys_reg", 0x40) {
        /// Auto-negotiation disabled by software.
        an_disable_admin: bool @ 0x1 [0x1],
        /// Auto-negotiation may be disabled.
        an_disable_cap: bool @ 0x2 [0x1],
        /// Local port number (1-based).
        local_port: u8 @ 0x8 [0x8],
        /// Which protocol fields are valid: [`PTYS_PROTO_MASK_ETH`].
        proto_mask: u8 @ 0x1d [0x3],
        /// Auto-negotiation status (0 when not negotiated).
        an_status: u8 @ 0x20 [0x4],
        /// Ethernet protocols the port supports (legacy mask).
        eth_proto_capability: u32 @ 0x60 [0x20],
        /// Ethernet protocols software allows (legacy mask).
        eth_proto_admin: u32 @ 0xc0 [0x20],
        /// The Ethernet protocol in operation (legacy mask; 0 while the link is down).
        eth_proto_oper: u32 @ 0x120 [0x20],
        /// Connector type (0: unknown or not applicable).
        connector_type: u8 @ 0x17c [0x4],
    }
}

/// Values of [`PpcntReg::grp`] (`MLX5_*_COUNTERS_GROUP` in Linux `include/linux/mlx5/device.h`).
pub mod ppcnt_grp {
    /// IEEE 802.3 counters: [`Eth8023CntrsGrpDataLayout`](super::Eth8023CntrsGrpDataLayout).
    pub const IEEE_802_3: u8 = 0x0;
    /// RFC 2863 (interface MIB) counters: [`Eth2863CntrsGrpDataLayout`](super::Eth2863CntrsGrpDataLayout).
    pub const RFC_2863: u8 = 0x1;
    /// RFC 2819 (RMON) counters.
    pub const RFC_2819: u8 = 0x2;
    /// RFC 3635 (Ethernet-like MIB) counters.
    pub const RFC_3635: u8 = 0x3;
    /// Ethernet extended counters.
    pub const ETHERNET_EXTENDED: u8 = 0x5;
    /// Ethernet discard counters.
    pub const ETHERNET_DISCARD: u8 = 0x6;
    /// Per-priority counters (one set per `prio_tc`).
    pub const PER_PRIORITY: u8 = 0x10;
    /// Per-traffic-class counters (one set per `prio_tc`).
    pub const PER_TRAFFIC_CLASS: u8 = 0x11;
    /// Physical layer counters.
    pub const PHYSICAL_LAYER: u8 = 0x12;
    /// Per-traffic-class congestion counters.
    pub const PER_TRAFFIC_CLASS_CONGESTION: u8 = 0x13;
    /// Physical layer statistical counters.
    pub const PHYSICAL_LAYER_STATISTICAL: u8 = 0x16;
    /// InfiniBand port counters (symbol, link and receive errors, transmit discards): what
    /// Linux's mlx5_ib answers a PMA PortCounters query with, on RoCE ports too.
    pub const INFINIBAND_PORT_COUNTERS: u8 = 0x20;
}

layout! {
    /// PPCNT: port performance counters of one group (`grp`), in `counter_set` from byte 8.
    pub struct PpcntReg("ppcnt_reg", 0x100) {
        /// Switch partition id (0).
        swid: u8 @ 0x0 [0x8],
        /// Local port number (1-based).
        local_port: u8 @ 0x8 [0x8],
        /// Port number access type (0: local port).
        pnat: u8 @ 0x10 [0x2],
        /// Counter group: see [`ppcnt_grp`].
        grp: u8 @ 0x1a [0x6],
        /// Clear the counters after reading them.
        clr: bool @ 0x20 [0x1],
        /// Priority or traffic class of the per-priority and per-class groups.
        prio_tc: u8 @ 0x3b [0x5],
    }
}

/// Byte offset of [`PpcntReg`]'s counter set.
pub const PPCNT_COUNTER_SET_OFFSET: usize = 8;

layout! {
    /// The IEEE 802.3 counter group of PPCNT: 64-bit counters as high and low words.
    pub struct Eth8023CntrsGrpDataLayout("eth_802_3_cntrs_grp_data_layout", 0xf8) {
        /// Frames transmitted without error, high word.
        a_frames_transmitted_ok_high: u32 @ 0x0 [0x20],
        /// Frames transmitted without error, low word.
        a_frames_transmitted_ok_low: u32 @ 0x20 [0x20],
        /// Frames received without error, high word.
        a_frames_received_ok_high: u32 @ 0x40 [0x20],
        /// Frames received without error, low word.
        a_frames_received_ok_low: u32 @ 0x60 [0x20],
        /// Octets of frames transmitted without error, high word.
        a_octets_transmitted_ok_high: u32 @ 0x100 [0x20],
        /// Octets of frames transmitted without error, low word.
        a_octets_transmitted_ok_low: u32 @ 0x120 [0x20],
        /// Octets of frames received without error, high word.
        a_octets_received_ok_high: u32 @ 0x140 [0x20],
        /// Octets of frames received without error, low word.
        a_octets_received_ok_low: u32 @ 0x160 [0x20],
    }
}

layout! {
    /// The RFC 2863 (interface MIB) counter group of PPCNT: 64-bit counters as high and low
    /// words. mlx5e reads `if_in_discards` as `rx_discards_phy`.
    pub struct Eth2863CntrsGrpDataLayout("eth_2863_cntrs_grp_data_layout", 0xf8) {
        /// Octets received, high word.
        if_in_octets_high: u32 @ 0x0 [0x20],
        /// Octets received, low word.
        if_in_octets_low: u32 @ 0x20 [0x20],
        /// Frames the port received and discarded without an error in them (no room in the
        /// port's receive buffer), high word.
        if_in_discards_high: u32 @ 0x80 [0x20],
        /// The same, low word.
        if_in_discards_low: u32 @ 0xa0 [0x20],
        /// Octets transmitted, high word.
        if_out_octets_high: u32 @ 0x140 [0x20],
        /// Octets transmitted, low word.
        if_out_octets_low: u32 @ 0x160 [0x20],
    }
}

layout! {
    /// PFCC: port flow control (global pause and per-priority flow control).
    pub struct PfccReg("pfcc_reg", 0x20) {
        /// Local port number (1-based).
        local_port: u8 @ 0x8 [0x8],
        /// Priorities whose `pfctx` bits a write changes.
        prio_mask_tx: u8 @ 0x28 [0x8],
        /// Priorities whose `pfcrx` bits a write changes.
        prio_mask_rx: u8 @ 0x38 [0x8],
        /// Global pause: send pause frames.
        pptx: bool @ 0x40 [0x1],
        /// Per-priority flow control: priorities that send PFC frames.
        pfctx: u8 @ 0x48 [0x8],
        /// Global pause: honour received pause frames.
        pprx: bool @ 0x60 [0x1],
        /// Per-priority flow control: priorities that honour PFC frames.
        pfcrx: u8 @ 0x68 [0x8],
    }
}

layout! {
    /// QTCT: the traffic class one priority is sent in.
    pub struct QtctReg("qtct_reg", 0x8) {
        /// Local port number (Linux writes 0, reads with 1: both the function's port).
        port_number: u8 @ 0x8 [0x8],
        /// The priority (0-7).
        prio: u8 @ 0x1d [0x3],
        /// Its traffic class (at most the general page's `max_tc` less 1).
        tclass: u8 @ 0x3d [0x3],
    }
}

/// Byte offset of [`QetcReg`]'s first traffic class entry ([`EtsTcnConfigReg`]), each
/// [`ETS_TC_ENTRY_BYTES`] long.
pub const QETC_TC_CONFIGURATION_BYTE: usize = 0x8;
/// Bytes of one traffic class entry of QETCR.
pub const ETS_TC_ENTRY_BYTES: usize = 0x8;
/// Traffic class entries in QETCR.
pub const ETS_TCS: usize = 8;

/// `max_bw_units` of an ETS rate limit (`MLX5_BW_NO_LIMIT`, `MLX5_100_MBPS_UNIT`,
/// `MLX5_GBPS_UNIT`).
pub mod ets_bw_units {
    /// No rate limit.
    pub const NO_LIMIT: u8 = 0;
    /// `max_bw_value` counts 100 Mb/s.
    pub const HUNDRED_MBPS: u8 = 3;
    /// `max_bw_value` counts 1 Gb/s.
    pub const GBPS: u8 = 4;
}

layout! {
    /// QETCR: the port's enhanced transmission selection, one [`EtsTcnConfigReg`] per traffic
    /// class from byte [`QETC_TC_CONFIGURATION_BYTE`], then a global rate limit.
    pub struct QetcReg("qetc_reg", 0x50) {
        /// Local port number (Linux writes 0 or 1 and reads with 0: the function's port).
        port_number: u8 @ 0x8 [0x8],
    }
}

layout! {
    /// One traffic class's ETS configuration in QETCR (`ets_tcn_config_reg`). A write
    /// changes only the fields whose bit (`g`, `b`, `r`) it sets.
    pub struct EtsTcnConfigReg("ets_tcn_config_reg", 0x8) {
        /// The write sets `group`.
        g: bool @ 0x0 [0x1],
        /// The write sets `bw_allocation`.
        b: bool @ 0x1 [0x1],
        /// The write sets the rate limit (`max_bw_units`, `max_bw_value`).
        r: bool @ 0x2 [0x1],
        /// The class's group: 7 the vendor group, lower numbers strict priority groups above
        /// the ETS group 0.
        group: u8 @ 0xc [0x4],
        /// The class's share of its group's bandwidth, in percent (0-100).
        bw_allocation: u8 @ 0x19 [0x7],
        /// Unit of `max_bw_value` (see [`ets_bw_units`]).
        max_bw_units: u8 @ 0x2c [0x4],
        /// The class's rate limit in `max_bw_units` (Linux 6.12's 8 bits).
        max_bw_value: u8 @ 0x38 [0x8],
    }
}
