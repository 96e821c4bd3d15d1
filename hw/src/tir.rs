//! Transport objects: the transport interface send (TIS) and receive (TIR) contexts, the RQ
//! table (RQT) that spreads received packets over RQs, and their CREATE / DESTROY commands.
//!
//! An SQ sends through a TIS (`sqc.tis_num_0`); received packets are steered to a TIR, which
//! hands them to one RQ (`tirc.inline_rqn`) or hashes them over an RQT (`tirc.indirect_table`).
//! Field values that the header names in enums are the small enums and constants below; every
//! enum converts to its raw `u8` with `u8::from` and back with `TryFrom<u8>`, which hands back the
//! unknown value as the error.

use crate::layout;
use crate::wq::value_enum;

value_enum! {
    /// `tirc.disp_type`: how a TIR picks the RQ for a packet (`MLX5_TIRC_DISP_TYPE_*`).
    pub enum DispType {
        /// Every packet goes to `tirc.inline_rqn`.
        Direct = 0x0,
        /// Packets are hashed (`tirc.rx_hash_fn`) over the RQ table `tirc.indirect_table`.
        Indirect = 0x1,
    }
}

value_enum! {
    /// `tirc.rx_hash_fn`: the hash that spreads packets over an RQ table
    /// (`MLX5_RX_HASH_FN_*`).
    pub enum RxHashFn {
        /// No hashing.
        None = 0x0,
        /// XOR of the selected fields' bytes, inverted.
        InvertedXor8 = 0x1,
        /// Toeplitz hash with `tirc.rx_hash_toeplitz_key`.
        Toeplitz = 0x2,
    }
}

value_enum! {
    /// `rx_hash_field_select.l3_prot_type`: the L3 protocol whose fields are hashed
    /// (`MLX5_L3_PROT_TYPE_*`).
    pub enum L3ProtType {
        /// IPv4.
        Ipv4 = 0,
        /// IPv6.
        Ipv6 = 1,
    }
}

value_enum! {
    /// `rx_hash_field_select.l4_prot_type`: the L4 protocol whose ports are hashed
    /// (`MLX5_L4_PROT_TYPE_*`).
    pub enum L4ProtType {
        /// TCP.
        Tcp = 0,
        /// UDP.
        Udp = 1,
    }
}

/// `rx_hash_field_select.selected_fields`: hash the source IP address
/// (`MLX5_HASH_FIELD_SEL_SRC_IP`, bit `MLX5_RX_HASH_FIELD_SELECT_SELECTED_FIELDS_SRC_IP` = 0).
pub const HASH_FIELD_SEL_SRC_IP: u32 = 1 << 0;
/// `rx_hash_field_select.selected_fields`: hash the destination IP address
/// (`MLX5_HASH_FIELD_SEL_DST_IP`, bit 1).
pub const HASH_FIELD_SEL_DST_IP: u32 = 1 << 1;
/// `rx_hash_field_select.selected_fields`: hash the L4 source port
/// (`MLX5_HASH_FIELD_SEL_L4_SPORT`, bit 2).
pub const HASH_FIELD_SEL_L4_SPORT: u32 = 1 << 2;
/// `rx_hash_field_select.selected_fields`: hash the L4 destination port
/// (`MLX5_HASH_FIELD_SEL_L4_DPORT`, bit 3).
pub const HASH_FIELD_SEL_L4_DPORT: u32 = 1 << 3;
/// `rx_hash_field_select.selected_fields`: hash the IPsec SPI
/// (`MLX5_HASH_FIELD_SEL_IPSEC_SPI`, bit 4).
pub const HASH_FIELD_SEL_IPSEC_SPI: u32 = 1 << 4;

/// `tirc.lro_enable_mask`: LRO for IPv4 packets (`MLX5_TIRC_LRO_ENABLE_MASK_IPV4_LRO`).
pub const LRO_ENABLE_MASK_IPV4_LRO: u8 = 0x1;
/// `tirc.lro_enable_mask`: LRO for IPv6 packets (`MLX5_TIRC_LRO_ENABLE_MASK_IPV6_LRO`).
pub const LRO_ENABLE_MASK_IPV6_LRO: u8 = 0x2;

/// `tirc.self_lb_block`: unicast self loopback (a frame sent through a TIS of the TIR's own
/// transport domain). Despite the name, Linux sets it to allow such frames
/// (`MLX5_TIRC_SELF_LB_BLOCK_BLOCK_UNICAST`: `mlx5e_modify_tirs_lb` for `enable_uc_lb`,
/// mlx5_ib's raw packet TIR for `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC`).
pub const SELF_LB_BLOCK_UNICAST: u8 = 0x1;
/// `tirc.self_lb_block`: multicast and broadcast self loopback, set by Linux to allow them
/// (`MLX5_TIRC_SELF_LB_BLOCK_BLOCK_MULTICAST`: `enable_mc_lb`,
/// `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_MC`).
pub const SELF_LB_BLOCK_MULTICAST: u8 = 0x2;

/// Bytes in `tirc.rx_hash_toeplitz_key` (10 dwords).
pub const RX_HASH_TOEPLITZ_KEY_LEN: usize = 40;

layout! {
    /// Transport interface send context (TISC), given at CREATE_TIS.
    pub struct Tisc("tisc", 0xa0) {
        /// Strict LAG affinity: packets leave only through `lag_tx_port_affinity`.
        strict_lag_tx_port_affinity: bool @ 0x00 [0x1],
        /// LAG port that packets are sent through (0 = chosen by the device, 1 or 2 = port).
        lag_tx_port_affinity: u8 @ 0x04 [0x4],
        /// Priority of the packets sent through this TIS (Linux writes the traffic class
        /// shifted left by one).
        prio: u8 @ 0x0c [0x4],
        /// Transport domain the TIS belongs to.
        transport_domain: u32 @ 0x128 [0x18],
        /// Underlay QP (IPoIB enhanced mode): the QP whose transport carries the packets.
        underlay_qpn: u32 @ 0x148 [0x18],
    }
}

layout! {
    /// CREATE_TIS input.
    pub struct CreateTisIn("create_tis_in", 0xc0) {
        /// Command opcode: [`Opcode::CreateTis`](crate::cmd::Opcode::CreateTis).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new TIS's context.
        ctx: Tisc @ 0x100,
    }
}

layout! {
    /// Which parts of the TIS context MODIFY_TIS changes.
    pub struct ModifyTisBitmask("modify_tis_bitmask", 0x8) {
        /// `lag_tx_port_affinity`.
        lag_tx_port_affinity: bool @ 0x3d [0x1],
        /// `strict_lag_tx_port_affinity`.
        strict_lag_tx_port_affinity: bool @ 0x3e [0x1],
        /// `prio`: mlx5_ib's `modify_raw_packet_eth_prio` sets a raw packet QP's SL here.
        prio: bool @ 0x3f [0x1],
    }
}

layout! {
    /// MODIFY_TIS input: the parts of `ctx` that `bitmask` names replace the TIS's.
    pub struct ModifyTisIn("modify_tis_in", 0xc0) {
        /// Command opcode: [`Opcode::ModifyTis`](crate::cmd::Opcode::ModifyTis).
        opcode: u16 @ 0x00 [0x10],
        /// The user context's uid (0: the kernel's).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The TIS to modify.
        tisn: u32 @ 0x48 [0x18],
    }
    nested {
        /// What to modify.
        bitmask: ModifyTisBitmask @ 0x80,
        /// The new values.
        ctx: Tisc @ 0x100,
    }
}

layout! {
    /// CREATE_TIS output.
    pub struct CreateTisOut("create_tis_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new TIS.
        tisn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_TIS input.
    pub struct DestroyTisIn("destroy_tis_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyTis`](crate::cmd::Opcode::DestroyTis).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The TIS to destroy.
        tisn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// Which header fields a TIR hashes (`tirc.rx_hash_field_selector_outer` / `_inner`).
    pub struct RxHashFieldSelect("rx_hash_field_select", 0x4) {
        /// L3 protocol whose addresses are hashed: see [`L3ProtType`].
        l3_prot_type: u8 @ 0x00 [0x1],
        /// L4 protocol whose ports are hashed: see [`L4ProtType`].
        l4_prot_type: u8 @ 0x01 [0x1],
        /// Fields hashed: an OR of `HASH_FIELD_SEL_*`.
        selected_fields: u32 @ 0x02 [0x1e],
    }
}

layout! {
    /// Transport interface receive context (TIRC), given at CREATE_TIR.
    pub struct Tirc("tirc", 0xf0) {
        /// How the TIR picks an RQ: see [`DispType`].
        disp_type: u8 @ 0x20 [0x4],
        /// LRO: microseconds a session may stay open waiting for more segments.
        lro_timeout_period_usecs: u16 @ 0x84 [0x10],
        /// LRO: protocols it applies to, an OR of `LRO_ENABLE_MASK_*` (0 = LRO off).
        lro_enable_mask: u8 @ 0x94 [0x4],
        /// LRO: largest aggregated IP payload, in 256-byte units.
        lro_max_ip_payload_size: u8 @ 0x98 [0x8],
        /// The RQ that receives every packet when `disp_type` is [`DispType::Direct`].
        inline_rqn: u32 @ 0xe8 [0x18],
        /// Symmetric hash: swapping source and destination gives the same hash.
        rx_hash_symmetric: bool @ 0x100 [0x1],
        /// Tunneled packets: offloads (checksum, hashing) apply to the inner headers.
        tunneled_offload_en: bool @ 0x102 [0x1],
        /// The RQ table packets are hashed over when `disp_type` is [`DispType::Indirect`].
        indirect_table: u32 @ 0x108 [0x18],
        /// Hash function: see [`RxHashFn`].
        rx_hash_fn: u8 @ 0x120 [0x4],
        /// Which frames sent by this transport domain the TIR takes (self loopback, allowed
        /// where set, as Linux uses it): an OR of `SELF_LB_BLOCK_*`.
        self_lb_block: u8 @ 0x126 [0x2],
        /// Transport domain the TIR belongs to.
        transport_domain: u32 @ 0x128 [0x18],
    }
    nested {
        /// Fields hashed in the outer (or only) headers.
        rx_hash_field_selector_outer: RxHashFieldSelect @ 0x280,
        /// Fields hashed in the inner headers of tunneled packets (with `tunneled_offload_en`).
        rx_hash_field_selector_inner: RxHashFieldSelect @ 0x2a0,
    }
    arrays {
        /// Dword `index` (0..10) of the Toeplitz hash key, big-endian, key byte 0 first. Indices
        /// from 10 on reach the fields that follow the key; see also
        /// [`Tirc::rx_hash_toeplitz_key_bytes`].
        rx_hash_toeplitz_key: u32 @ 0x140 [0x20],
    }
}

/// Byte range of `tirc.rx_hash_toeplitz_key` (bit offset 0x140, 10 dwords).
const TOEPLITZ_KEY_BYTES: core::ops::Range<usize> = 0x140 / 8..0x140 / 8 + RX_HASH_TOEPLITZ_KEY_LEN;

impl<T: AsRef<[u8]>> Tirc<T> {
    /// The whole Toeplitz hash key (`rx_hash_toeplitz_key`), in key byte order.
    pub fn rx_hash_toeplitz_key_bytes(&self) -> [u8; RX_HASH_TOEPLITZ_KEY_LEN] {
        let mut key = [0u8; RX_HASH_TOEPLITZ_KEY_LEN];
        key.copy_from_slice(&self.as_bytes()[TOEPLITZ_KEY_BYTES]);
        key
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tirc<T> {
    /// Sets the whole Toeplitz hash key: see [`Self::rx_hash_toeplitz_key_bytes`].
    pub fn set_rx_hash_toeplitz_key_bytes(
        &mut self,
        key: &[u8; RX_HASH_TOEPLITZ_KEY_LEN],
    ) -> &mut Self {
        self.as_bytes_mut()[TOEPLITZ_KEY_BYTES].copy_from_slice(key);
        self
    }
}

layout! {
    /// CREATE_TIR input.
    pub struct CreateTirIn("create_tir_in", 0x110) {
        /// Command opcode: [`Opcode::CreateTir`](crate::cmd::Opcode::CreateTir).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new TIR's context.
        ctx: Tirc @ 0x100,
    }
}

layout! {
    /// CREATE_TIR output.
    pub struct CreateTirOut("create_tir_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Bits 63:40 of the TIR's ICM address, where a software steering entry sends a
        /// packet to this TIR (mlx5_ib's `create_raw_packet_qp` hands it to libmlx5 as
        /// `tir_icm_addr`).
        icm_address_63_40: u32 @ 0x08 [0x18],
        /// Bits 39:32 of the TIR's ICM address.
        icm_address_39_32: u8 @ 0x40 [0x8],
        /// Number of the new TIR.
        tirn: u32 @ 0x48 [0x18],
        /// Bits 31:0 of the TIR's ICM address.
        icm_address_31_0: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// DESTROY_TIR input.
    pub struct DestroyTirIn("destroy_tir_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyTir`](crate::cmd::Opcode::DestroyTir).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The TIR to destroy.
        tirn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// RQ table context (RQTC): the RQs an indirect TIR hashes packets over.
    pub struct Rqtc("rqtc", 0xf0) {
        /// Most entries the table may ever hold (fixed at creation).
        rqt_max_size: u16 @ 0xb0 [0x10],
        /// Entries in use: the number of `rq_num` elements that follow.
        rqt_actual_size: u16 @ 0xd0 [0x10],
    }
    arrays {
        /// The table's RQ numbers (`rq_num`: low 24 bits, the top 8 reserved), continuing past
        /// the fixed part.
        rq_num: u32 @ 0x780 [0x20],
    }
}

layout! {
    /// CREATE_RQT input: the context, then the table's RQ numbers.
    pub struct CreateRqtIn("create_rqt_in", 0x110) {
        /// Command opcode: [`Opcode::CreateRqt`](crate::cmd::Opcode::CreateRqt).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new table's context.
        rqt_context: Rqtc @ 0x100,
    }
    arrays {
        /// The table's RQ numbers (`rqt_context.rq_num`, which continues past the context): low
        /// 24 bits, the top 8 reserved; `rqt_context.rqt_actual_size` of them.
        rq_num: u32 @ 0x880 [0x20],
    }
}

layout! {
    /// CREATE_RQT output.
    pub struct CreateRqtOut("create_rqt_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new RQ table.
        rqtn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_RQT input.
    pub struct DestroyRqtIn("destroy_rqt_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyRqt`](crate::cmd::Opcode::DestroyRqt).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RQ table to destroy.
        rqtn: u32 @ 0x48 [0x18],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toeplitz_key_bytes_match_the_dword_array() {
        let mut tirc = Tirc::zeroed();
        let mut key = [0u8; RX_HASH_TOEPLITZ_KEY_LEN];
        for (i, b) in key.iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        tirc.set_rx_hash_toeplitz_key_bytes(&key);
        assert_eq!(tirc.rx_hash_toeplitz_key(0), Ok(0x0102_0304));
        assert_eq!(tirc.rx_hash_toeplitz_key(9), Ok(0x2526_2728));
        assert_eq!(tirc.rx_hash_toeplitz_key_bytes(), key);
        assert_eq!(tirc.rx_hash_field_selector_outer().selected_fields(), 0);
    }

    #[test]
    fn create_rqt_rq_num_follows_the_context() {
        let mut buf = vec![0u8; <CreateRqtIn>::SIZE + 8];
        let mut cmd = CreateRqtIn::new(&mut buf[..]).unwrap();
        assert_eq!(cmd.rq_num_capacity(), 2);
        cmd.set_rq_num(1, 0x12_3456).unwrap();
        assert_eq!(&buf[0x114..0x118], &[0, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn enums_convert() {
        assert_eq!(RxHashFn::try_from(2), Ok(RxHashFn::Toeplitz));
        assert_eq!(DispType::try_from(2), Err(2));
        assert_eq!(u8::from(L3ProtType::Ipv6), 1);
        assert_eq!(L4ProtType::try_from(1), Ok(L4ProtType::Udp));
    }
}

layout! {
    /// Which parts of the TIR context MODIFY_TIR changes.
    pub struct ModifyTirBitmask("modify_tir_bitmask", 0x8) {
        /// The self-loopback block (`self_lb_block`).
        self_lb_en: bool @ 0x3b [0x1],
        /// The RX hash: function, key and field selectors.
        hash: bool @ 0x3d [0x1],
        /// Packet merging (LRO): `lro_enable_mask` and its parameters.
        packet_merge: bool @ 0x3f [0x1],
    }
}

layout! {
    /// MODIFY_TIR input: the parts of `ctx` that `bitmask` names replace the TIR's.
    pub struct ModifyTirIn("modify_tir_in", 0x110) {
        /// Command opcode: [`Opcode::ModifyTir`](crate::cmd::Opcode::ModifyTir).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The TIR to modify.
        tirn: u32 @ 0x48 [0x18],
    }
    nested {
        /// What to modify.
        bitmask: ModifyTirBitmask @ 0x80,
        /// The new values.
        ctx: Tirc @ 0x100,
    }
}

layout! {
    /// Which parts of the RQ table MODIFY_RQT changes.
    pub struct RqtBitmask("rqt_bitmask", 0x8) {
        /// The RQ list (`rqt_actual_size` and the RQ numbers).
        rqn_list: bool @ 0x3f [0x1],
    }
}

layout! {
    /// MODIFY_RQT input: the context and RQ numbers, as in CREATE_RQT, replace what `bitmask`
    /// names.
    pub struct ModifyRqtIn("modify_rqt_in", 0x110) {
        /// Command opcode: [`Opcode::ModifyRqt`](crate::cmd::Opcode::ModifyRqt).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RQ table to modify.
        rqtn: u32 @ 0x48 [0x18],
    }
    nested {
        /// What to modify.
        bitmask: RqtBitmask @ 0x80,
        /// The new context.
        ctx: Rqtc @ 0x100,
    }
    arrays {
        /// The new RQ numbers (`ctx.rq_num`): low 24 bits; `ctx.rqt_actual_size` of them.
        rq_num: u32 @ 0x880 [0x20],
    }
}
