//! Completion queue entries: the 64-byte CQE (rdma-core `mlx5dv.h` / Linux `device.h`
//! `struct mlx5_cqe64`) and its error form.
//!
//! Software owns entry `ci` of a CQ of `2^log_size` entries when the entry's owner bit equals
//! `(ci >> log_size) & 1` and its opcode is not [`CqeOpcode::Invalid`]; see [`sw_owns`].

use crate::cmd::device_codes;
use crate::layout;

/// Size of a CQE in bytes.
pub const CQE_SIZE: usize = 64;

device_codes! {
    /// CQE opcodes (bits 7:4 of `op_own`).
    pub enum CqeOpcode: u8, "CQE opcode" {
        /// Send completion.
        Req = 0x0 => "REQ",
        /// Receive of an RDMA write with immediate.
        RespWrImm = 0x1 => "RESP_WR_IMM",
        /// Receive completion (an Ethernet frame arrived).
        RespSend = 0x2 => "RESP_SEND",
        /// Receive of a send with immediate.
        RespSendImm = 0x3 => "RESP_SEND_IMM",
        /// Receive of a send with invalidate.
        RespSendInv = 0x4 => "RESP_SEND_INV",
        /// CQ resize marker.
        ResizeCq = 0x5 => "RESIZE_CQ",
        /// No packet (filler).
        NoPacket = 0x6 => "NO_PACKET",
        /// Signature error.
        SigErr = 0xc => "SIG_ERR",
        /// Send completed in error (see [`ErrCqe`]).
        ReqErr = 0xd => "REQ_ERR",
        /// Receive completed in error (see [`ErrCqe`]).
        RespErr = 0xe => "RESP_ERR",
        /// Not yet written by the device.
        Invalid = 0xf => "INVALID",
    }
}

device_codes! {
    /// Error CQE syndromes.
    pub enum CqeSyndrome: u8, "CQE syndrome" {
        /// A length did not fit (receive buffer too small, send too long).
        LocalLength = 0x01 => "LOCAL_LENGTH_ERR",
        /// The WQE itself was malformed.
        LocalQpOperation = 0x02 => "LOCAL_QP_OP_ERR",
        /// A memory key check failed (bad lkey, access rights, bounds).
        LocalProtection = 0x04 => "LOCAL_PROT_ERR",
        /// Flushed because the queue is in error.
        WrFlushed = 0x05 => "WR_FLUSH_ERR",
        /// Memory window bind failed.
        MwBind = 0x06 => "MW_BIND_ERR",
        /// Bad response.
        BadResponse = 0x10 => "BAD_RESP_ERR",
        /// Local access error.
        LocalAccess = 0x11 => "LOCAL_ACCESS_ERR",
        /// Remote invalid request.
        RemoteInvalidRequest = 0x12 => "REMOTE_INVAL_REQ_ERR",
        /// Remote access error.
        RemoteAccess = 0x13 => "REMOTE_ACCESS_ERR",
        /// Remote operation error.
        RemoteOperation = 0x14 => "REMOTE_OP_ERR",
        /// Transport retries exceeded.
        RetryExceeded = 0x15 => "TRANSPORT_RETRY_EXC_ERR",
        /// Receiver-not-ready retries exceeded.
        RnrRetryExceeded = 0x16 => "RNR_RETRY_EXC_ERR",
        /// Remote aborted.
        RemoteAborted = 0x22 => "REMOTE_ABORTED_ERR",
    }
}

/// Values of [`Cqe64::cqe_format`].
pub mod cqe_format {
    /// A plain CQE.
    pub const NO_INLINE_DATA: u8 = 0;
    /// Up to 32 bytes of the packet are inlined in the CQE.
    pub const INLINE_DATA32: u8 = 1;
    /// Up to 64 bytes of the packet are inlined in the preceding CQE slot.
    pub const INLINE_DATA64: u8 = 2;
    /// A compressed CQE session (mini-CQE array).
    pub const COMPRESSED: u8 = 3;
}

/// Values of the CQ context's `mini_cqe_res_format`: what the first four bytes of each mini-CQE
/// of a compressed session carry (the byte count is always in the last four).
pub mod mini_cqe_res_format {
    /// The packet's RSS hash result.
    pub const HASH: u8 = 0;
    /// The packet's raw checksum; the next two bytes reserved (Linux's first `mlx5_mini_cqe8`
    /// names them `rsvd`).
    pub const CSUM: u8 = 1;
    /// The packet's raw checksum, then the striding RQ's stride index
    /// (`MLX5_CQE_FORMAT_CSUM_STRIDX`, offered with `mini_cqe_resp_stride_index`).
    pub const CSUM_STRIDX: u8 = 3;
}

/// Size of a mini-CQE in bytes.
pub const MINI_CQE_SIZE: usize = 8;

/// Mini-CQEs in one CQE slot of a compressed session (a mini-CQE array).
pub const MINI_CQES_PER_SLOT: u32 = (CQE_SIZE / MINI_CQE_SIZE) as u32;

/// Where mini-CQE `index` (0-based) of a compressed session lives, as the number of CQE slots
/// after the session's title: the first array follows the title, and array `k` (k >= 1) sits
/// `8 * k` slots after it, so every array lies inside the `count` slots the session takes. The
/// slots between arrays are never written by the device.
pub const fn mini_array_slot(index: u32) -> u32 {
    if index < MINI_CQES_PER_SLOT {
        1
    } else {
        index & !(MINI_CQES_PER_SLOT - 1)
    }
}

/// Values of [`Cqe64::l3_hdr_type`].
pub mod l3_hdr_type {
    /// No L3 header recognised.
    pub const NONE: u8 = 0;
    /// IPv6.
    pub const IPV6: u8 = 1;
    /// IPv4.
    pub const IPV4: u8 = 2;
}

/// Values of [`Cqe64::l4_hdr_type`].
pub mod l4_hdr_type {
    /// No L4 header recognised.
    pub const NONE: u8 = 0;
    /// TCP without ACK.
    pub const TCP_NO_ACK: u8 = 1;
    /// UDP.
    pub const UDP: u8 = 2;
    /// TCP ACK without data.
    pub const TCP_ACK_NO_DATA: u8 = 3;
    /// TCP ACK with data.
    pub const TCP_ACK_AND_DATA: u8 = 4;
}

layout! {
    /// A 64-byte completion queue entry.
    pub struct Cqe64("mlx5_cqe64", 64) {
        /// The packet arrived inside a tunnel (outer L3 was a tunnel header).
        outer_l3_tunneled: bool @ 0x07 [0x1],
        /// Striding RQ: WQE id.
        wqe_id: u16 @ 0x10 [0x10],
        /// RSS hash value computed for the packet.
        rss_hash_result: u32 @ 0x60 [0x20],
        /// Which fields were hashed: IP in bits 3:2, L4 in bits 7:6.
        rss_hash_type: u8 @ 0x80 [0x8],
        /// Raw one's-complement checksum of the packet.
        check_sum: u16 @ 0xa0 [0x10],
        /// Flags and remote QP number (RDMA).
        flags_rqpn: u32 @ 0xc0 [0x20],
        /// The L4 checksum was verified good.
        l4_ok: bool @ 0xe5 [0x1],
        /// The L3 (IPv4 header) checksum was verified good.
        l3_ok: bool @ 0xe6 [0x1],
        /// The L2 frame was good.
        l2_ok: bool @ 0xe7 [0x1],
        /// L4 header type (see [`l4_hdr_type`]).
        l4_hdr_type: u8 @ 0xe9 [0x3],
        /// L3 header type (see [`l3_hdr_type`]).
        l3_hdr_type: u8 @ 0xec [0x2],
        /// The frame carried (and the device stripped) a VLAN tag, given in `vlan_info`.
        has_vlan: bool @ 0xef [0x1],
        /// Stripped VLAN tag control information.
        vlan_info: u16 @ 0xf0 [0x10],
        /// LRO: number of coalesced segments.
        lro_num_seg: u8 @ 0x100 [0x8],
        /// Shared receive queue (or RMP) number the buffer came from.
        srqn: u32 @ 0x108 [0x18],
        /// Immediate data, invalidated key or P_Key.
        imm_inval_pkey: u32 @ 0x120 [0x20],
        /// Offload application of the completion (1: tag matching,
        /// [`CQE_APP_TAG_MATCHING`](crate::xrq::CQE_APP_TAG_MATCHING)).
        app: u8 @ 0x140 [0x8],
        /// The application's operation ([`cqe_app_op`](crate::xrq::cqe_app_op)).
        app_op: u8 @ 0x148 [0x8],
        /// The application's datum (tag matching: the list entry).
        app_info: u16 @ 0x150 [0x10],
        /// Bytes written (receive) or sent.
        byte_cnt: u32 @ 0x160 [0x20],
        /// Completion timestamp in device clock ticks.
        timestamp: u64 @ 0x180 [0x40],
        /// Top byte of `sop_drop_qpn`: start-of-packet / drop information.
        sop_drop: u8 @ 0x1c0 [0x8],
        /// The SQ or RQ number this completion belongs to.
        qpn: u32 @ 0x1c8 [0x18],
        /// Index (16-bit, wrapping) of the WQE this completion is for: the last completed WQE.
        wqe_counter: u16 @ 0x1e0 [0x10],
        /// CQE signature when enabled.
        signature: u8 @ 0x1f0 [0x8],
        /// CQE opcode (see [`CqeOpcode`]).
        opcode: u8 @ 0x1f8 [0x4],
        /// CQE format (see [`cqe_format`]).
        cqe_format: u8 @ 0x1fc [0x2],
        /// Solicited event.
        se: bool @ 0x1fe [0x1],
        /// Ownership bit: flips on each pass of the device around the ring.
        owner: bool @ 0x1ff [0x1],
    }
}

layout! {
    /// A 64-byte error CQE (opcode [`CqeOpcode::ReqErr`] or [`CqeOpcode::RespErr`]).
    pub struct ErrCqe("mlx5_err_cqe", 64) {
        /// SRQ number (receive errors on shared queues).
        srqn: u32 @ 0x100 [0x20],
        /// Vendor-specific error syndrome.
        vendor_err_synd: u8 @ 0x1b0 [0x8],
        /// Error syndrome (see [`CqeSyndrome`]).
        syndrome: u8 @ 0x1b8 [0x8],
        /// Opcode of the WQE that failed.
        s_wqe_opcode: u8 @ 0x1c0 [0x8],
        /// The SQ or RQ number.
        qpn: u32 @ 0x1c8 [0x18],
        /// Index of the WQE that failed.
        wqe_counter: u16 @ 0x1e0 [0x10],
        /// CQE signature when enabled.
        signature: u8 @ 0x1f0 [0x8],
        /// CQE opcode.
        opcode: u8 @ 0x1f8 [0x4],
        /// CQE format.
        cqe_format: u8 @ 0x1fc [0x2],
        /// Solicited event.
        se: bool @ 0x1fe [0x1],
        /// Ownership bit.
        owner: bool @ 0x1ff [0x1],
    }
}

layout! {
    /// One mini-CQE of a compressed session in the [`mini_cqe_res_format::HASH`] format (Linux
    /// `device.h` `struct mlx5_mini_cqe8`): the fields that differ between the session's
    /// completions. Everything else is the title's.
    pub struct MiniCqe8("mlx5_mini_cqe8", 8) {
        /// RSS hash result.
        rx_hash_result: u32 @ 0x00 [0x20],
        /// Bytes received.
        byte_cnt: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// One mini-CQE in the [`mini_cqe_res_format::CSUM_STRIDX`] format, and in the
    /// [`mini_cqe_res_format::CSUM`] one with `stridx` reserved (the other member of the same
    /// union in `struct mlx5_mini_cqe8`).
    pub struct MiniCqe8Csum("mlx5_mini_cqe8_csum", 8) {
        /// Raw packet checksum.
        checksum: u16 @ 0x00 [0x10],
        /// Striding RQ stride index.
        stridx: u16 @ 0x10 [0x10],
        /// Bytes received.
        byte_cnt: u32 @ 0x20 [0x20],
    }
}

/// The `op_own` byte's fields, from the [`Cqe64`] table: opcode, format and owner share the
/// CQE's last byte, which software reads first (alone) to learn whether the entry is written.
pub mod op_own {
    use super::Cqe64;
    use crate::layout::{field, FieldInfo};

    const OPCODE: FieldInfo = field::<Cqe64>("opcode");
    const FORMAT: FieldInfo = field::<Cqe64>("cqe_format");
    const OWNER: FieldInfo = field::<Cqe64>("owner");

    /// Byte offset of `op_own` in a CQE (its last byte).
    pub const BYTE: usize = OWNER.byte();

    const _: () = assert!(
        OPCODE.byte() == BYTE
            && FORMAT.byte() == BYTE
            && OPCODE.in_one_byte()
            && FORMAT.in_one_byte()
            && OWNER.in_one_byte()
            && BYTE == super::CQE_SIZE - 1
    );

    // Shifts and widths as plain constants, so the decoders below compile to one shift and
    // one mask each.
    const OPCODE_SHIFT: u32 = OPCODE.byte_shift();
    const OPCODE_BITS: u8 = OPCODE.mask() as u8;
    const FORMAT_SHIFT: u32 = FORMAT.byte_shift();
    const FORMAT_BITS: u8 = FORMAT.mask() as u8;
    const OWNER_SHIFT: u32 = OWNER.byte_shift();
    const OWNER_BITS: u8 = OWNER.mask() as u8;

    /// The opcode bits of `op_own` in place (mask of [`opcode`]).
    pub const OPCODE_MASK: u8 = OPCODE_BITS << OPCODE_SHIFT;
    /// The format bits of `op_own` in place (mask of [`format`](fn@format)).
    pub const FORMAT_MASK: u8 = FORMAT_BITS << FORMAT_SHIFT;
    /// The owner bit of `op_own` in place.
    pub const OWNER_MASK: u8 = OWNER_BITS << OWNER_SHIFT;

    /// The CQE opcode (see [`super::CqeOpcode`]).
    #[inline(always)]
    pub const fn opcode(op_own: u8) -> u8 {
        (op_own >> OPCODE_SHIFT) & OPCODE_BITS
    }

    /// The CQE format (see [`super::cqe_format`]).
    #[inline(always)]
    pub const fn format(op_own: u8) -> u8 {
        (op_own >> FORMAT_SHIFT) & FORMAT_BITS
    }

    /// The owner bit (0 or 1).
    #[inline(always)]
    pub const fn owner(op_own: u8) -> u8 {
        (op_own >> OWNER_SHIFT) & OWNER_BITS
    }

    /// An `op_own` byte with `opcode` and `owner` (0 or 1), format 0 and no solicited event.
    #[inline(always)]
    pub const fn with(opcode: u8, owner: u8) -> u8 {
        ((opcode & OPCODE_BITS) << OPCODE_SHIFT) | ((owner & OWNER_BITS) << OWNER_SHIFT)
    }
}

/// True when software owns the CQE whose last byte (`op_own`) is `op_own`, at consumer index
/// `ci` of a CQ with `2^log_size` entries.
#[inline(always)]
pub const fn sw_owns(op_own: u8, ci: u32, log_size: u8) -> bool {
    op_own::opcode(op_own) != CqeOpcode::Invalid as u8
        && op_own::owner(op_own) as u32 == (ci >> log_size) & 1
}

/// The `op_own` byte of a CQE slot that has never been written: opcode invalid, owner set so a
/// first pass (which expects owner 0) does not mistake it for a completion.
pub const CQE_INITIAL_OP_OWN: u8 = op_own::with(CqeOpcode::Invalid as u8, 1);
