//! Send and receive work queue entries (rdma-core `mlx5dv.h`, Linux `qp.h`).
//!
//! A send WQE is one or more 64-byte basic blocks (WQEBBs) made of 16-byte segments: a control
//! segment, for Ethernet an Ethernet segment (checksum flags, MSS, inlined headers), then data
//! segments (pointer by lkey) or inline data. A receive WQE is a list of data segments; a short
//! list ends with an entry whose lkey is [`INVALID_LKEY`].

use crate::layout;

/// Size of a WQE basic block in bytes.
pub const WQE_BB: usize = 64;
/// Log2 of [`WQE_BB`].
pub const WQE_BB_SHIFT: u32 = 6;
/// Size of the unit in which the control segment's `ds` counts, in bytes.
pub const WQE_DS: usize = 16;
/// The lkey that terminates a receive WQE's scatter list.
pub const INVALID_LKEY: u32 = 0x100;
/// Flag OR-ed into an inline data segment's byte count.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Bytes of the Ethernet header a send WQE inlines at minimum (Ethernet + one VLAN tag).
pub const ETH_L2_INLINE_HEADER_SIZE: usize = 18;
/// Bytes of a plain Ethernet header.
pub const ETH_L2_MIN_HEADER_SIZE: usize = 14;
/// Bytes of inlined header that fit in the Ethernet segment itself (`inline_hdr_start`); the rest
/// continues into the following segments.
pub const ETH_INLINE_HEADER_START: usize = 2;

/// Send WQE opcodes (control segment dword 0, bits 7:0).
pub mod opcode {
    /// No operation: completes without sending.
    pub const NOP: u8 = 0x00;
    /// Send with invalidate: the peer invalidates the rkey in the control segment's `imm`.
    pub const SEND_INVAL: u8 = 0x01;
    /// RDMA write: ctrl, [`RaddrSeg`](super::RaddrSeg), then the local data.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA write with immediate (in the control segment's `imm`): consumes a receive WQE at
    /// the peer.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// Send (an Ethernet frame on an Ethernet SQ).
    pub const SEND: u8 = 0x0a;
    /// Send with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// Large send offload (`MLX5_OPCODE_LSO`, TCP segmentation): the Ethernet segment carries
    /// the MSS and the packet's Ethernet, IP and TCP headers inline; the data segments carry the
    /// payload, which the device cuts into MSS-sized frames, each with the headers replicated.
    pub const LSO: u8 = 0x0e;
    /// RDMA read: ctrl, [`RaddrSeg`](super::RaddrSeg), then where the data lands.
    pub const RDMA_READ: u8 = 0x10;
    /// Atomic compare and swap (8 bytes): ctrl, [`RaddrSeg`](super::RaddrSeg),
    /// [`AtomicSeg`](super::AtomicSeg), then an 8-byte data segment for the original value.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Atomic fetch and add (8 bytes): laid out as [`ATOMIC_CS`].
    pub const ATOMIC_FA: u8 = 0x12;
    /// User-mode memory registration (`MLX5_OPCODE_UMR`): changes the memory key the control
    /// segment's `imm` names; the segments are in [`umr`](crate::umr). Linux posts it for
    /// `IB_WR_REG_MR`, `IB_WR_LOCAL_INV` and its own key updates, and reads its requester CQE
    /// back by the WQE it remembers, not by the CQE's opcode.
    pub const UMR: u8 = 0x25;
    /// Set PSV (`MLX5_OPCODE_SET_PSV`): loads a protection signature variable's seed; the
    /// segment is a [`SetPsvSeg`](crate::sig::SetPsvSeg). mlx5_ib posts two after the UMR of
    /// `IB_WR_REG_MR_INTEGRITY` (`set_psv_wr`), unsignalled.
    pub const SET_PSV: u8 = 0x20;
    /// Get PSV (`MLX5_OPCODE_GET_PSV`): the segment (`struct mlx5_seg_get_psv` in Linux's
    /// qp.h: `num_psv`, `l_key`, `va`, four PSV indexes) is public, what it writes for a
    /// signature PSV is not; mlx5_ib and libmlx5 never post it (mlx5e posts it for kTLS
    /// receive resync only).
    pub const GET_PSV: u8 = 0x21;
    /// Check PSV (`MLX5_OPCODE_CHECK_PSV`, `struct mlx5_seg_check_psv`): its operations
    /// (`err_coalescing_op`, `xport_err_op`) are not public, and no Linux or rdma-core path
    /// posts it.
    pub const CHECK_PSV: u8 = 0x22;
    /// Enhanced multi-packet send.
    pub const ENHANCED_MPSW: u8 = 0x29;
}

/// Values of [`CtrlSeg::ce`]: when the device writes a CQE for this WQE.
pub mod completion {
    /// Only if the WQE fails.
    pub const ON_ERROR: u8 = 1;
    /// Always.
    pub const ALWAYS: u8 = 2;
    /// Always, and also generate an event.
    pub const ALWAYS_AND_EVENT: u8 = 3;
}

/// Values of [`CtrlSeg::fm`]: fence mode.
pub mod fence_mode {
    /// No fence.
    pub const NONE: u8 = 0;
    /// Initiator small fence.
    pub const INITIATOR_SMALL: u8 = 1;
    /// Fence: wait for earlier reads to complete.
    pub const FENCE: u8 = 2;
    /// Strong ordering.
    pub const STRONG_ORDERING: u8 = 3;
    /// Small fence and fence.
    pub const SMALL_AND_FENCE: u8 = 4;
}

layout! {
    /// Control segment: opens every send WQE.
    pub struct CtrlSeg("mlx5_wqe_ctrl_seg", 16) {
        /// Opcode modifier.
        opmod: u8 @ 0x00 [0x8],
        /// Producer index of this WQE in WQEBB units (wraps at 16 bits).
        wqe_index: u16 @ 0x08 [0x10],
        /// Operation (see [`opcode`]).
        opcode: u8 @ 0x18 [0x8],
        /// The SQ (or QP) number.
        qpn_or_sqn: u32 @ 0x20 [0x18],
        /// WQE size in 16-byte units, this segment included (1..=63).
        ds: u8 @ 0x38 [0x8],
        /// WQE signature when signatures are enabled.
        signature: u8 @ 0x40 [0x8],
        /// DCI stream channel (RDMA DC only).
        dci_stream_channel_id: u16 @ 0x48 [0x10],
        /// Fence mode (see [`fence_mode`]).
        fm: u8 @ 0x58 [0x3],
        /// Completion request (see [`completion`]).
        ce: u8 @ 0x5c [0x2],
        /// Solicited event.
        se: bool @ 0x5e [0x1],
        /// Immediate data or invalidation key.
        imm: u32 @ 0x60 [0x20],
    }
}

/// Flag in the Ethernet segment's first 16 bits after `mss`/metadata that turns the inline
/// header field into a VLAN insertion request (`insert.type`).
pub const ETH_WQE_INSERT_VLAN: u16 = 1 << 15;

layout! {
    /// Ethernet segment: offloads and the start of the inlined packet headers.
    pub struct EthSeg("mlx5_wqe_eth_seg", 16) {
        /// Software parser: outer L4 header offset in 2-byte units.
        swp_outer_l4_offset: u8 @ 0x00 [0x8],
        /// Software parser: outer L3 header offset in 2-byte units.
        swp_outer_l3_offset: u8 @ 0x08 [0x8],
        /// Software parser: inner L4 header offset in 2-byte units.
        swp_inner_l4_offset: u8 @ 0x10 [0x8],
        /// Software parser: inner L3 header offset in 2-byte units.
        swp_inner_l3_offset: u8 @ 0x18 [0x8],
        /// Compute and insert the (outer) L4 checksum.
        l4_csum: bool @ 0x20 [0x1],
        /// Compute and insert the (outer) IPv4 header checksum.
        l3_csum: bool @ 0x21 [0x1],
        /// Compute and insert the inner L4 checksum (tunnels).
        l4_inner_csum: bool @ 0x22 [0x1],
        /// Compute and insert the inner IPv4 header checksum (tunnels).
        l3_inner_csum: bool @ 0x23 [0x1],
        /// Software parser flags.
        swp_flags: u8 @ 0x28 [0x8],
        /// Maximum segment size of an LSO WQE: TCP payload bytes per frame (1..=65535; 0 is
        /// refused). Ignored by other opcodes.
        mss: u16 @ 0x30 [0x10],
        /// Metadata matched by egress flow steering.
        flow_table_metadata: u32 @ 0x40 [0x20],
        /// Bytes of packet headers inlined from `inline_hdr_start` on (0 when the device reads
        /// the whole packet through data segments); with [`ETH_WQE_INSERT_VLAN`] set this is
        /// instead the VLAN insertion request type.
        inline_hdr_sz: u16 @ 0x60 [0x10],
    }
    arrays {
        /// Inlined header bytes: the first two sit in this segment, the rest run on into the
        /// following 16-byte segments of the WQE.
        inline_hdr_start: u8 @ 0x70 [0x8],
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthSeg<T> {
    /// Requests VLAN tag insertion with tag control information `tci` (priority, DEI, VID)
    /// instead of inlining headers.
    pub fn set_vlan_insert(&mut self, tci: u16) -> &mut Self {
        let buf = self.as_bytes_mut();
        buf[12..14].copy_from_slice(&ETH_WQE_INSERT_VLAN.to_be_bytes());
        buf[14..16].copy_from_slice(&tci.to_be_bytes());
        self
    }
}

impl<T: AsRef<[u8]>> EthSeg<T> {
    /// The VLAN tag control information to insert, when the segment asks for insertion.
    pub fn vlan_insert(&self) -> Option<u16> {
        let buf = self.as_bytes();
        let kind = u16::from_be_bytes([buf[12], buf[13]]);
        (kind & ETH_WQE_INSERT_VLAN != 0).then(|| u16::from_be_bytes([buf[14], buf[15]]))
    }
}

layout! {
    /// Data segment: a buffer by memory key and address (send gather or receive scatter).
    pub struct DataSeg("mlx5_wqe_data_seg", 16) {
        /// Buffer length in bytes (a receive buffer's capacity; 0 means 2 GiB on send).
        byte_count: u32 @ 0x00 [0x20],
        /// Local memory key translating `addr`; [`INVALID_LKEY`] ends a receive list.
        lkey: u32 @ 0x20 [0x20],
        /// Address in the memory key's space (an IOVA for a key that maps IOVAs 1:1).
        addr: u64 @ 0x40 [0x40],
    }
}

layout! {
    /// Inline data segment header: the bytes follow it directly, padded to 16 bytes.
    pub struct InlineSeg("mlx5_wqe_inline_seg", 4) {
        /// Marks the segment as inline (must be set: the [`INLINE_SEG`] bit).
        inline: bool @ 0x00 [0x1],
        /// Number of data bytes that follow.
        byte_count: u32 @ 0x01 [0x1f],
    }
}

/// Number of 16-byte units (`ds`) an inline segment of `len` data bytes takes, header included.
pub const fn inline_seg_ds(len: usize) -> usize {
    (4 + len).div_ceil(WQE_DS)
}

/// Number of WQEBBs a WQE of `ds` 16-byte units occupies.
pub const fn wqebbs(ds: usize) -> usize {
    (ds * WQE_DS).div_ceil(WQE_BB)
}

/// The 16 bytes of a send WQE's control segment, encoded directly (what [`CtrlSeg`]'s setters
/// produce, without the view): `opcode` at WQE index `wqe_index` of send queue `sqn` (24
/// bits), `ds` 16-byte units, completion request `ce` (see [`completion`]).
#[inline]
pub fn encode_ctrl(opcode: u8, wqe_index: u16, sqn: u32, ds: u8, ce: u8) -> [u8; 16] {
    let mut seg = [0u8; 16];
    seg[0..4].copy_from_slice(&(u32::from(wqe_index) << 8 | u32::from(opcode)).to_be_bytes());
    seg[4..8].copy_from_slice(&((sqn & 0x00ff_ffff) << 8 | u32::from(ds)).to_be_bytes());
    seg[11] = (ce & 0x3) << 2;
    seg
}

/// The 16 bytes of an Ethernet segment, encoded directly (what [`EthSeg`]'s setters produce):
/// checksum requests, and either `inline_hdr_sz` header bytes inlined (the first two of them,
/// `first_two`, sit in the segment's last two bytes) or, with `vlan` set, a VLAN tag to insert.
#[inline]
pub fn encode_eth(
    l3_csum: bool,
    l4_csum: bool,
    vlan: Option<u16>,
    inline_hdr_sz: u16,
    first_two: [u8; 2],
) -> [u8; 16] {
    let mut seg = [0u8; 16];
    seg[4] = u8::from(l4_csum) << 7 | u8::from(l3_csum) << 6;
    match vlan {
        Some(tci) => {
            seg[12..14].copy_from_slice(&ETH_WQE_INSERT_VLAN.to_be_bytes());
            seg[14..16].copy_from_slice(&tci.to_be_bytes());
        }
        None => {
            seg[12..14].copy_from_slice(&inline_hdr_sz.to_be_bytes());
            seg[14..16].copy_from_slice(&first_two);
        }
    }
    seg
}

/// The 16 bytes of an LSO WQE's Ethernet segment, encoded directly (what [`EthSeg`]'s setters
/// produce): checksum requests, the MSS (TCP payload bytes per frame), and `inline_hdr_sz`
/// header bytes inlined, the first two of them (`first_two`) in the segment's last two bytes.
#[inline]
pub fn encode_eth_lso(
    l3_csum: bool,
    l4_csum: bool,
    mss: u16,
    inline_hdr_sz: u16,
    first_two: [u8; 2],
) -> [u8; 16] {
    let mut seg = encode_eth(l3_csum, l4_csum, None, inline_hdr_sz, first_two);
    seg[6..8].copy_from_slice(&mss.to_be_bytes());
    seg
}

/// The 16 bytes of a data segment, encoded directly (what [`DataSeg`]'s setters produce).
#[inline]
pub fn encode_data(byte_count: u32, lkey: u32, addr: u64) -> [u8; 16] {
    let mut seg = [0u8; 16];
    seg[0..4].copy_from_slice(&byte_count.to_be_bytes());
    seg[4..8].copy_from_slice(&lkey.to_be_bytes());
    seg[8..16].copy_from_slice(&addr.to_be_bytes());
    seg
}

#[cfg(test)]
mod encoder_tests {
    use super::*;

    #[test]
    fn direct_encoders_match_the_layout_views() {
        for (opcode, index, sqn, ds, ce) in [
            (
                opcode::SEND,
                0xbeefu16,
                0x12_3456u32,
                5u8,
                completion::ALWAYS,
            ),
            (opcode::NOP, 0, 0xff_ffff, 63, 0),
            (opcode::LSO, 0xffff, 1, 1, completion::ALWAYS_AND_EVENT),
        ] {
            let mut view = [0u8; 16];
            CtrlSeg::new(&mut view[..])
                .unwrap()
                .set_opcode(opcode)
                .set_wqe_index(index)
                .set_qpn_or_sqn(sqn)
                .set_ds(ds)
                .set_ce(ce);
            assert_eq!(encode_ctrl(opcode, index, sqn, ds, ce), view);
        }
        for (l3, l4, vlan, sz) in [
            (true, false, None, 18u16),
            (false, true, Some(0x2abc), 0),
            (true, true, None, 0),
        ] {
            let mut view = [0u8; 16];
            {
                let mut eth = EthSeg::new(&mut view[..]).unwrap();
                eth.set_l3_csum(l3).set_l4_csum(l4);
                match vlan {
                    Some(tci) => {
                        eth.set_vlan_insert(tci);
                    }
                    None => {
                        eth.set_inline_hdr_sz(sz);
                    }
                }
            }
            if vlan.is_none() {
                view[14..16].copy_from_slice(&[0xaa, 0x55]);
            }
            assert_eq!(encode_eth(l3, l4, vlan, sz, [0xaa, 0x55]), view);
        }
        for (l3, l4, mss, sz) in [(true, true, 1448u16, 66u16), (false, false, 0xffff, 54)] {
            let mut view = [0u8; 16];
            EthSeg::new(&mut view[..])
                .unwrap()
                .set_l3_csum(l3)
                .set_l4_csum(l4)
                .set_mss(mss)
                .set_inline_hdr_sz(sz);
            view[14..16].copy_from_slice(&[0x12, 0x34]);
            assert_eq!(encode_eth_lso(l3, l4, mss, sz, [0x12, 0x34]), view);
        }
        let mut view = [0u8; 16];
        DataSeg::new(&mut view[..])
            .unwrap()
            .set_byte_count(1514)
            .set_lkey(0x1234_5678)
            .set_addr(0x0102_0304_0506_0708);
        assert_eq!(encode_data(1514, 0x1234_5678, 0x0102_0304_0506_0708), view);
    }
}

layout! {
    /// Remote address segment of RDMA READ, WRITE and atomic WQEs (`mlx5_wqe_raddr_seg`).
    pub struct RaddrSeg("mlx5_wqe_raddr_seg", 16) {
        /// Remote virtual address (in the rkey's address space).
        raddr: u64 @ 0x00 [0x40],
        /// Remote memory key.
        rkey: u32 @ 0x40 [0x20],
    }
}

layout! {
    /// Atomic segment (`mlx5_wqe_atomic_seg`): follows the remote address segment.
    pub struct AtomicSeg("mlx5_wqe_atomic_seg", 16) {
        /// Compare and swap: the value swapped in; fetch and add: the value added.
        swap_add: u64 @ 0x00 [0x40],
        /// Compare and swap: the value compared with (unused by fetch and add).
        compare: u64 @ 0x40 [0x40],
    }
}

/// The service level a RoCE address vector's `stat_rate_sl` carries, which is the Ethernet
/// priority (0-7) of the packets it addresses: bits 3:1 (libmlx5's `mlx5_create_ah` and
/// mlx5_ib's `create_ib_ah` write `(sl & 0x7) << 1` on an Ethernet port; bits 3:0 are the SL on
/// InfiniBand).
pub const fn roce_av_prio(stat_rate_sl: u8) -> u8 {
    (stat_rate_sl >> 1) & 0x7
}

/// Bit 31 of a datagram segment's Q_Key (`IB_QP_SET_QKEY`): send with the QP context's Q_Key
/// instead of the WQE's (IBA: a Q_Key with its high-order bit set is not used as given).
pub const QKEY_FROM_QP: u32 = 0x8000_0000;

layout! {
    /// Datagram segment of a UD or GSI send WQE: the address vector (`struct mlx5_av`,
    /// `mlx5_wqe_datagram_seg` in Linux `qp.h`; rdma-core `mlx5_wqe_av`), after the control
    /// segment. Linux's `set_datagram_seg` (mlx5_ib `wr.c`, libmlx5 `qp.c`) copies the address
    /// handle's vector in and sets the Q_Key and the destination QP with `MLX5_EXTENDED_UD_AV`.
    pub struct DatagramSeg("mlx5_wqe_datagram_seg", 48) {
        /// Q_Key to send with; [`QKEY_FROM_QP`] set: the QP's own.
        q_key: u32 @ 0x00 [0x20],
        /// Extended address vector (`MLX5_EXTENDED_UD_AV`, bit 31 of `dqp_dct`).
        extended: bool @ 0x40 [0x1],
        /// Destination QP number (a DC initiator's WQE: the target DCT's number).
        dest_qpn: u32 @ 0x48 [0x18],
        /// Static rate (bits 7:4) and service level (bits 3:1) (`stat_rate_sl`).
        stat_rate_sl: u8 @ 0x60 [0x8],
        /// Force loopback (bit 7) and source path bits (`fl_mlid`; InfiniBand only).
        fl_mlid: u8 @ 0x68 [0x8],
        /// RoCE v2: UDP source port (InfiniBand: the remote LID, `rlid`).
        udp_sport: u16 @ 0x70 [0x10],
        /// Destination MAC, bits 47:32.
        rmac_47_32: u16 @ 0xa0 [0x10],
        /// Destination MAC, bits 31:0.
        rmac_31_0: u32 @ 0xb0 [0x20],
        /// Traffic class (IPv4 TOS / IPv6 traffic class).
        tclass: u8 @ 0xd0 [0x8],
        /// Hop limit (IPv4 TTL).
        hop_limit: u8 @ 0xd8 [0x8],
        /// A GRH (RoCE: an IP header) is present (bit 30 of `grh_gid_fl`).
        grh: bool @ 0xe1 [0x1],
        /// Index of the source GID in the port's RoCE address table (bits 27:20).
        sgid_index: u8 @ 0xe4 [0x8],
        /// IPv6 flow label (bits 19:0).
        flow_label: u32 @ 0xec [0x14],
    }
    arrays {
        /// Byte `index` (0..16) of the destination GID, in network order.
        rgid: u8 @ 0x100 [0x8],
    }
}

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// A DC initiator's WQE: the DC access key the target DCT must hold, the eight bytes the
    /// Q_Key and the word after it take in a UD WQE (`key.dc_key` of `struct mlx5_av`, which
    /// libmlx5's `mlx5_send_wr_set_dc_addr` fills).
    pub fn dc_key(&self) -> u64 {
        let mut key = [0; 8];
        key.copy_from_slice(&self.as_bytes()[..8]);
        u64::from_be_bytes(key)
    }

    /// The 16 bytes of the destination GID in network order.
    pub fn dgid(&self) -> [u8; 16] {
        let mut gid = [0; 16];
        gid.copy_from_slice(&self.as_bytes()[0x20..0x30]);
        gid
    }

    /// The destination MAC address.
    pub fn rmac(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac[..2].copy_from_slice(&self.rmac_47_32().to_be_bytes());
        mac[2..].copy_from_slice(&self.rmac_31_0().to_be_bytes());
        mac
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DatagramSeg<T> {
    /// Sets the destination GID from its 16 bytes in network order.
    pub fn set_dgid(&mut self, gid: [u8; 16]) -> &mut Self {
        self.as_bytes_mut()[0x20..0x30].copy_from_slice(&gid);
        self
    }

    /// Sets the destination MAC address.
    pub fn set_rmac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.set_rmac_47_32(u16::from_be_bytes([mac[0], mac[1]]));
        self.set_rmac_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
    }

    /// Sets the DC access key (see [`DatagramSeg::dc_key`]).
    pub fn set_dc_key(&mut self, key: u64) -> &mut Self {
        self.as_bytes_mut()[..8].copy_from_slice(&key.to_be_bytes());
        self
    }
}

layout! {
    /// Next segment of a linked-list SRQ / RMP receive WQE (`mlx5_wqe_srq_next_seg`): the first
    /// 16 bytes, before the data segments.
    pub struct SrqNextSeg("mlx5_wqe_srq_next_seg", 16) {
        /// Index of the next free WQE in the list.
        next_wqe_index: u16 @ 0x10 [0x10],
        /// WQE signature when enabled.
        signature: u8 @ 0x20 [0x8],
    }
}
