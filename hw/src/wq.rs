//! Work queues: the common WQ context, the send queue (SQ), receive queue (RQ) and receive
//! memory pool (RMP) contexts that embed it, and the CREATE / MODIFY / QUERY / DESTROY commands
//! for those objects.
//!
//! The WQ context (`wq`) sits at byte 0x30 of each of `sqc`, `rqc` and `rmpc`, and its `pas`
//! array (the WQ buffer's page addresses) continues past the end of the enclosing context. A
//! nested view covers only the fixed part, so each CREATE command that carries page addresses
//! declares that trailing array itself, at its absolute offset: [`CreateSqIn::pas`],
//! [`CreateRqIn::pas`] and [`CreateRmpIn::pas`].
//!
//! Field values that the header names in enums are the small enums and constants below; every
//! enum converts to its raw `u8` with `u8::from` and back with `TryFrom<u8>`, which hands back the
//! unknown value as the error.

use crate::layout;

/// Declares a `#[repr(u8)]` enum of a field's named values, with `From<Enum> for u8` and
/// `TryFrom<u8>` (whose error is the unrecognised raw value).
macro_rules! value_enum {
    (
        $(#[doc = $doc:expr])*
        $vis:vis enum $name:ident {
            $(
                $(#[doc = $vdoc:expr])*
                $variant:ident = $value:literal
            ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $(
                $(#[doc = $vdoc])*
                $variant = $value,
            )*
        }

        impl From<$name> for u8 {
            fn from(value: $name) -> u8 {
                value as u8
            }
        }

        impl TryFrom<u8> for $name {
            type Error = u8;

            /// Recognises a raw field value; an unknown value comes back as the error.
            fn try_from(raw: u8) -> Result<Self, u8> {
                match raw {
                    $($value => Ok(Self::$variant),)*
                    other => Err(other),
                }
            }
        }
    };
}
pub(crate) use value_enum;

value_enum! {
    /// `wq.wq_type`: how the WQ's entries are organised (`MLX5_WQ_TYPE_*`).
    pub enum WqType {
        /// Linked list: each WQE points at the next (RMP / SRQ style).
        LinkedList = 0x0,
        /// Cyclic buffer indexed by a wrapping counter (SQ, RQ).
        Cyclic = 0x1,
        /// Linked list of multi-packet (striding) receive WQEs.
        LinkedListStridingRq = 0x2,
        /// Cyclic buffer of multi-packet (striding) receive WQEs.
        StridingCyclic = 0x3,
    }
}

value_enum! {
    /// `wq.end_padding_mode`: padding of received data (`MLX5_WQ_END_PAD_MODE_*`).
    pub enum EndPadMode {
        /// No padding: data is scattered as is.
        None = 0x0,
        /// Pad the end of each received packet's data to a cache line boundary.
        Align = 0x1,
    }
}

value_enum! {
    /// `sqc.state`, `modify_sq_in.sq_state` (`MLX5_SQC_STATE_*`).
    pub enum SqState {
        /// Reset: the state after CREATE_SQ; the SQ does not execute WQEs.
        Rst = 0x0,
        /// Ready: WQEs are executed.
        Rdy = 0x1,
        /// Error: WQEs are flushed (with error CQEs when `flush_in_error_en`).
        Err = 0x3,
    }
}

value_enum! {
    /// `rqc.state`, `modify_rq_in.rq_state` (`MLX5_RQC_STATE_*`).
    pub enum RqState {
        /// Reset: the state after CREATE_RQ; received packets are not scattered to it.
        Rst = 0x0,
        /// Ready: receive WQEs are consumed.
        Rdy = 0x1,
        /// Error: WQEs are flushed (with error CQEs when `flush_in_error_en`).
        Err = 0x3,
    }
}

value_enum! {
    /// `rmpc.state`, `modify_rmp_in.rmp_state` (`MLX5_RMPC_STATE_*`; an RMP has no reset
    /// state).
    pub enum RmpState {
        /// Ready: receive WQEs are consumed.
        Rdy = 0x1,
        /// Error.
        Err = 0x3,
    }
}

value_enum! {
    /// `rqc.mem_rq_type`: where an RQ takes its receive WQEs from
    /// (`MLX5_RQC_MEM_RQ_TYPE_MEMORY_RQ_*`).
    pub enum MemRqType {
        /// The RQ's own WQ (`rqc.wq`).
        Inline = 0x0,
        /// A shared receive memory pool (`rqc.rmpn`).
        Rmp = 0x1,
    }
}

value_enum! {
    /// `sqc.min_wqe_inline_mode`: the packet headers that every send WQE must carry inline in
    /// its Ethernet segment (`enum mlx5_inline_modes`).
    pub enum InlineMode {
        /// Nothing needs to be inlined.
        None = 0x0,
        /// The L2 (Ethernet, VLAN) headers.
        L2 = 0x1,
        /// Headers up to and including the IP header.
        Ip = 0x2,
        /// Headers up to and including the TCP / UDP header.
        TcpUdp = 0x3,
    }
}

/// `modify_sq_in.modify_bitmask`: also modify `sqc.packet_pacing_rate_limit_index` (used by
/// Linux `mlx5e_modify_sq` as the value 1).
pub const MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX: u64 = 1 << 0;
/// `modify_sq_in.modify_bitmask`: also modify the SQ's QoS queue group
/// (`MLX5_MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID`, rdma-core `mlx5_ifc.h`).
pub const MODIFY_SQ_BITMASK_QOS_QUEUE_GROUP_ID: u64 = 1 << 2;

/// `modify_rq_in.modify_bitmask`: also modify `rqc.vsd`
/// (`MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_VSD`).
pub const MODIFY_RQ_BITMASK_VSD: u64 = 1 << 1;
/// `modify_rq_in.modify_bitmask`: also modify `rqc.scatter_fcs`
/// (`MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_SCATTER_FCS`).
pub const MODIFY_RQ_BITMASK_SCATTER_FCS: u64 = 1 << 2;
/// `modify_rq_in.modify_bitmask`: also modify `rqc.counter_set_id`
/// (`MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_RQ_COUNTER_SET_ID`).
pub const MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID: u64 = 1 << 3;

/// `modify_rmp_in.bitmask` read as one big-endian 64-bit value: also modify `rmpc.wq.lwm`. The
/// same bit as [`RmpBitmask::lwm`] (bit offset 0x3f of `rmp_bitmask`).
pub const MODIFY_RMP_BITMASK_LWM: u64 = 1 << 0;

layout! {
    /// Work queue context: the buffer, doorbell record and geometry shared by SQs, RQs and
    /// RMPs (embedded at byte 0x30 of `sqc`, `rqc` and `rmpc`).
    pub struct Wq("wq", 0xc0) {
        /// WQ organisation: see [`WqType`].
        wq_type: u8 @ 0x00 [0x4],
        /// WQE signature: each WQE carries a signature byte that the device checks.
        wq_signature: bool @ 0x04 [0x1],
        /// Padding of received data: see [`EndPadMode`].
        end_padding_mode: u8 @ 0x05 [0x2],
        /// Cross-channel slave: the WQ only executes WQEs that a cross-channel master enabled.
        cd_slave: bool @ 0x07 [0x1],
        /// Header-data split: the first scatter entry of each receive WQE is skipped for the
        /// payload (it takes the headers, see `log2_hds_buf_size`).
        hds_skip_first_sge: bool @ 0x20 [0x1],
        /// Header-data split: log2 of the header buffer size.
        log2_hds_buf_size: u8 @ 0x21 [0x3],
        /// Offset of the WQ buffer in its first page, in 64-byte units.
        page_offset: u8 @ 0x2b [0x5],
        /// Limit watermark: a limit event fires when fewer receive WQEs than this remain posted
        /// (0 = no event).
        lwm: u16 @ 0x30 [0x10],
        /// Protection domain of the WQ's buffers and of the memory its WQEs reference.
        pd: u32 @ 0x48 [0x18],
        /// UAR page whose doorbell register rings this WQ (send queues).
        uar_page: u32 @ 0x68 [0x18],
        /// Bus address of the WQ doorbell record (8-byte aligned).
        dbr_addr: u64 @ 0x80 [0x40],
        /// WQE counter of the device: WQEs consumed (read back by QUERY).
        hw_counter: u32 @ 0xc0 [0x20],
        /// WQE counter of software: WQEs posted, as last written to the doorbell record.
        sw_counter: u32 @ 0xe0 [0x20],
        /// Log2 of the WQE stride in bytes (the size of one WQ entry).
        log_wq_stride: u8 @ 0x10c [0x4],
        /// Log2 of the WQ buffer's page size minus 12 (0 = 4 KiB pages).
        log_wq_pg_sz: u8 @ 0x113 [0x5],
        /// Log2 of the number of WQEs.
        log_wq_sz: u8 @ 0x11b [0x5],
        /// Striding RQ: log2 of the number of strides per WQE, minus
        /// [`striding::LOG_STRIDES_BASE`] (0..=7: 512..=65,536 strides).
        log_wqe_num_of_strides: u8 @ 0x134 [0x4],
        /// Striding RQ: shift each packet's data by two bytes (aligns the IP header).
        two_byte_shift_en: bool @ 0x138 [0x1],
        /// Striding RQ: log2 of the stride size in bytes, minus
        /// [`striding::LOG_STRIDE_BYTES_BASE`] (0..=7: 64..=8,192 bytes).
        log_wqe_stride_size: u8 @ 0x13d [0x3],
        /// The doorbell record is in umem `dbr_umem_id`, at offset `dbr_addr` (DEVX).
        dbr_umem_valid: bool @ 0x120 [0x1],
        /// The ring is in umem `wq_umem_id`, at `wq_umem_offset`, instead of `pas` (DEVX).
        wq_umem_valid: bool @ 0x121 [0x1],
        /// Umem holding the doorbell record (with `dbr_umem_valid`).
        dbr_umem_id: u32 @ 0x140 [0x20],
        /// Umem holding the ring (with `wq_umem_valid`).
        wq_umem_id: u32 @ 0x160 [0x20],
        /// Offset of the ring in its umem, in bytes (with `wq_umem_valid`).
        wq_umem_offset: u64 @ 0x180 [0x40],
    }
    arrays {
        /// Bus addresses of the WQ buffer's pages (`cmd_pas`: bits 63..12 of each address, the
        /// low 12 bits reserved), in order, each aligned to the page size. Present only when the
        /// buffer extends past the fixed part.
        pas: u64 @ 0x600 [0x40],
    }
}

layout! {
    /// Send queue context (SQC), given at CREATE_SQ and MODIFY_SQ.
    pub struct Sqc("sqc", 0xf0) {
        /// Reserved LKey enabled: WQEs may use the reserved LKey (physical addresses).
        rlky: bool @ 0x00 [0x1],
        /// Cross-channel master: the SQ may post SEND_EN / WAIT WQEs for other queues.
        cd_master: bool @ 0x01 [0x1],
        /// Fast register enabled: the SQ may post memory registration (UMR) WQEs.
        fre: bool @ 0x02 [0x1],
        /// Flush in error: in the error state, outstanding WQEs complete with flush errors.
        flush_in_error_en: bool @ 0x03 [0x1],
        /// Enhanced multi-packet send WQEs are allowed.
        allow_multi_pkt_send_wqe: bool @ 0x04 [0x1],
        /// Headers every WQE must inline: see [`InlineMode`].
        min_wqe_inline_mode: u8 @ 0x05 [0x3],
        /// SQ state: see [`SqState`] (MODIFY_SQ: the state to move to).
        state: u8 @ 0x08 [0x4],
        /// UMR WQEs may register memory regions.
        reg_umr: bool @ 0x0c [0x1],
        /// Software parser offsets in the Ethernet segment are allowed.
        allow_swp: bool @ 0x0d [0x1],
        /// Software-chosen index reported in this SQ's CQEs.
        user_index: u32 @ 0x28 [0x18],
        /// Completion queue of this SQ.
        cqn: u32 @ 0x48 [0x18],
        /// Entry of the packet pacing rate table (0 = no rate limit).
        packet_pacing_rate_limit_index: u16 @ 0xf0 [0x10],
        /// Number of TISes in the TIS list (1).
        tis_lst_sz: u16 @ 0x100 [0x10],
        /// NIC queue group (scheduling element) the SQ sends under (0 = none).
        qos_queue_group_id: u16 @ 0x110 [0x10],
        /// The transport interface send object whose properties the SQ's packets take.
        tis_num_0: u32 @ 0x168 [0x18],
    }
    nested {
        /// The SQ's work queue.
        wq: Wq @ 0x180,
    }
}

layout! {
    /// Receive queue context (RQC), given at CREATE_RQ and MODIFY_RQ.
    pub struct Rqc("rqc", 0xf0) {
        /// Reserved LKey enabled: WQEs may use the reserved LKey (physical addresses).
        rlky: bool @ 0x00 [0x1],
        /// Delay drop: when no WQE is posted, hold packets for a while instead of dropping them.
        delay_drop_en: bool @ 0x01 [0x1],
        /// Scatter the Ethernet FCS with the packet.
        scatter_fcs: bool @ 0x02 [0x1],
        /// VLAN strip disable: leave the VLAN tag in the packet.
        vsd: bool @ 0x03 [0x1],
        /// Where receive WQEs come from: see [`MemRqType`].
        mem_rq_type: u8 @ 0x04 [0x4],
        /// RQ state: see [`RqState`] (MODIFY_RQ: the state to move to).
        state: u8 @ 0x08 [0x4],
        /// Flush in error: in the error state, posted WQEs complete with flush errors.
        flush_in_error_en: bool @ 0x0d [0x1],
        /// Software-chosen index reported in this RQ's CQEs.
        user_index: u32 @ 0x28 [0x18],
        /// Completion queue of this RQ.
        cqn: u32 @ 0x48 [0x18],
        /// Queue counter set that counts this RQ's events (out-of-buffer drops).
        counter_set_id: u8 @ 0x60 [0x8],
        /// The RMP to take WQEs from, when `mem_rq_type` is [`MemRqType::Rmp`].
        rmpn: u32 @ 0x88 [0x18],
    }
    nested {
        /// The RQ's work queue (used when `mem_rq_type` is [`MemRqType::Inline`]).
        wq: Wq @ 0x180,
    }
}

layout! {
    /// Receive memory pool context (RMPC): a pool of receive WQEs shared by RQs.
    pub struct Rmpc("rmpc", 0xf0) {
        /// RMP state: see [`RmpState`] (MODIFY_RMP: the state to move to).
        state: u8 @ 0x08 [0x4],
        /// WQEs are basic cyclic receive WQEs (no next-WQE segment).
        basic_cyclic_rcv_wqe: bool @ 0x20 [0x1],
    }
    nested {
        /// The pool's work queue.
        wq: Wq @ 0x180,
    }
}

layout! {
    /// Which RMP context fields MODIFY_RMP changes besides the state.
    pub struct RmpBitmask("rmp_bitmask", 0x8) {
        /// Modify `rmpc.wq.lwm` (the value [`MODIFY_RMP_BITMASK_LWM`] of the 64-bit mask).
        lwm: bool @ 0x3f [0x1],
    }
}

layout! {
    /// CREATE_SQ input: the context, then the WQ buffer's page addresses.
    pub struct CreateSqIn("create_sq_in", 0x110) {
        /// Command opcode: [`Opcode::CreateSq`](crate::cmd::Opcode::CreateSq).
        opcode: u16 @ 0x00 [0x10],
        /// User context the queue belongs to (0: the function's own driver).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new SQ's context (create it in [`SqState::Rst`]).
        ctx: Sqc @ 0x100,
    }
    arrays {
        /// Bus addresses of the WQ buffer's pages (`ctx.wq.pas`, which continues past the
        /// context): bits 63..12 of each address, in order, each aligned to
        /// `ctx.wq.log_wq_pg_sz`.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_SQ output.
    pub struct CreateSqOut("create_sq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new SQ.
        sqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// MODIFY_SQ input: a state transition, and the context fields named by the bitmask.
    pub struct ModifySqIn("modify_sq_in", 0x110) {
        /// Command opcode: [`Opcode::ModifySq`](crate::cmd::Opcode::ModifySq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The SQ's current state (see [`SqState`]); the new one is `ctx.state`.
        sq_state: u8 @ 0x40 [0x4],
        /// The SQ to modify.
        sqn: u32 @ 0x48 [0x18],
        /// Context fields to modify besides the state: `MODIFY_SQ_BITMASK_*`.
        modify_bitmask: u64 @ 0x80 [0x40],
    }
    nested {
        /// The new state and the fields named by `modify_bitmask`.
        ctx: Sqc @ 0x100,
    }
}

layout! {
    /// DESTROY_SQ input.
    pub struct DestroySqIn("destroy_sq_in", 0x10) {
        /// Command opcode: [`Opcode::DestroySq`](crate::cmd::Opcode::DestroySq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The SQ to destroy.
        sqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// CREATE_RQ input: the context, then the WQ buffer's page addresses.
    pub struct CreateRqIn("create_rq_in", 0x110) {
        /// Command opcode: [`Opcode::CreateRq`](crate::cmd::Opcode::CreateRq).
        opcode: u16 @ 0x00 [0x10],
        /// User context the queue belongs to (0: the function's own driver).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new RQ's context (create it in [`RqState::Rst`]).
        ctx: Rqc @ 0x100,
    }
    arrays {
        /// Bus addresses of the WQ buffer's pages (`ctx.wq.pas`, which continues past the
        /// context): bits 63..12 of each address, in order, each aligned to
        /// `ctx.wq.log_wq_pg_sz`.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_RQ output.
    pub struct CreateRqOut("create_rq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new RQ.
        rqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// MODIFY_RQ input: a state transition, and the context fields named by the bitmask.
    pub struct ModifyRqIn("modify_rq_in", 0x110) {
        /// Command opcode: [`Opcode::ModifyRq`](crate::cmd::Opcode::ModifyRq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RQ's current state (see [`RqState`]); the new one is `ctx.state`.
        rq_state: u8 @ 0x40 [0x4],
        /// The RQ to modify.
        rqn: u32 @ 0x48 [0x18],
        /// Context fields to modify besides the state: `MODIFY_RQ_BITMASK_*`.
        modify_bitmask: u64 @ 0x80 [0x40],
    }
    nested {
        /// The new state and the fields named by `modify_bitmask`.
        ctx: Rqc @ 0x100,
    }
}

layout! {
    /// DESTROY_RQ input.
    pub struct DestroyRqIn("destroy_rq_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyRq`](crate::cmd::Opcode::DestroyRq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RQ to destroy.
        rqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// CREATE_RMP input: the context, then the WQ buffer's page addresses.
    pub struct CreateRmpIn("create_rmp_in", 0x110) {
        /// Command opcode: [`Opcode::CreateRmp`](crate::cmd::Opcode::CreateRmp).
        opcode: u16 @ 0x00 [0x10],
        /// User context the queue belongs to (0: the function's own driver).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new RMP's context.
        ctx: Rmpc @ 0x100,
    }
    arrays {
        /// Bus addresses of the WQ buffer's pages (`ctx.wq.pas`, which continues past the
        /// context): bits 63..12 of each address, in order, each aligned to
        /// `ctx.wq.log_wq_pg_sz`.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_RMP output.
    pub struct CreateRmpOut("create_rmp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new RMP.
        rmpn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// MODIFY_RMP input: a state transition, and the context fields named by the bitmask.
    pub struct ModifyRmpIn("modify_rmp_in", 0x110) {
        /// Command opcode: [`Opcode::ModifyRmp`](crate::cmd::Opcode::ModifyRmp).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RMP's current state (see [`RmpState`]); the new one is `ctx.state`.
        rmp_state: u8 @ 0x40 [0x4],
        /// The RMP to modify.
        rmpn: u32 @ 0x48 [0x18],
    }
    nested {
        /// Context fields to modify besides the state.
        bitmask: RmpBitmask @ 0x80,
        /// The new state and the fields named by `bitmask`.
        ctx: Rmpc @ 0x100,
    }
}

layout! {
    /// QUERY_RQ input.
    pub struct QueryRqIn("query_rq_in", 0x10) {
        /// Command opcode: [`Opcode::QueryRq`](crate::cmd::Opcode::QueryRq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RQ to query.
        rqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_RQ output.
    pub struct QueryRqOut("query_rq_out", 0x110) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The RQ's current context.
        rq_context: Rqc @ 0x100,
    }
}

layout! {
    /// QUERY_SQ input.
    pub struct QuerySqIn("query_sq_in", 0x10) {
        /// Command opcode: [`Opcode::QuerySq`](crate::cmd::Opcode::QuerySq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The SQ to query.
        sqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_SQ output.
    pub struct QuerySqOut("query_sq_out", 0x110) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The SQ's current context.
        sq_context: Sqc @ 0x100,
    }
}

layout! {
    /// QUERY_RMP input.
    pub struct QueryRmpIn("query_rmp_in", 0x10) {
        /// Command opcode: [`Opcode::QueryRmp`](crate::cmd::Opcode::QueryRmp).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RMP to query.
        rmpn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_RMP output.
    pub struct QueryRmpOut("query_rmp_out", 0x110) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The RMP's current context.
        rmp_context: Rmpc @ 0x100,
    }
}

layout! {
    /// DESTROY_RMP input.
    pub struct DestroyRmpIn("destroy_rmp_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyRmp`](crate::cmd::Opcode::DestroyRmp).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The RMP to destroy.
        rmpn: u32 @ 0x48 [0x18],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_round_trip_through_u8() {
        for raw in 0..=u8::MAX {
            if let Ok(v) = WqType::try_from(raw) {
                assert_eq!(u8::from(v), raw);
            }
            if let Ok(v) = SqState::try_from(raw) {
                assert_eq!(u8::from(v), raw);
            }
        }
        assert_eq!(RmpState::try_from(0), Err(0));
        assert_eq!(MemRqType::try_from(1), Ok(MemRqType::Rmp));
        assert_eq!(InlineMode::try_from(3), Ok(InlineMode::TcpUdp));
    }

    #[test]
    fn rmp_bitmask_lwm_is_bit_zero_of_the_64_bit_mask() {
        let mut mask = RmpBitmask::zeroed();
        mask.set_lwm(true);
        assert_eq!(
            u64::from_be_bytes(*mask.as_bytes().first_chunk().unwrap()),
            MODIFY_RMP_BITMASK_LWM
        );
    }

    #[test]
    fn create_sq_pas_follows_the_wq_context() {
        let mut buf = vec![0u8; <CreateSqIn>::SIZE + 16];
        let mut cmd = CreateSqIn::new(&mut buf[..]).unwrap();
        assert_eq!(cmd.pas_capacity(), 2);
        cmd.set_pas(1, 0x1234_5678_9abc_d000).unwrap();
        assert!(cmd.set_pas(2, 0).is_err());
        cmd.ctx_mut().wq_mut().set_log_wq_sz(7);
        assert_eq!(cmd.ctx().wq().log_wq_sz(), 7);
        // The WQ context ends exactly where the page addresses begin.
        assert_eq!(0x100 / 8 + 0x30 + <Wq>::SIZE, 0x880 / 8);
        assert_eq!(&buf[0x118..0x120], &0x1234_5678_9abc_d000u64.to_be_bytes());
    }
}

/// Striding (multi-packet) receive queues (`wq_type` [`WqType::StridingCyclic`]): each
/// receive WQE is one buffer cut into equal strides; a packet takes as many consecutive strides
/// of the current WQE as it needs, and the WQE is done when all its strides are taken.
pub mod striding {
    /// `log_wqe_num_of_strides` counts from this: upwards without `ext_stride_num_range`; with
    /// it, the 4-bit field is signed (mlx5e writes `log - LOG_STRIDES_BASE` into it,
    /// `mlx5e_build_rq_param`), reaching down to [`EXT_MIN_LOG_STRIDES`].
    pub const LOG_STRIDES_BASE: u8 = 9;
    /// Fewest strides per WQE, as a log2, with `ext_stride_num_range`
    /// (`MLX5_MPWQE_LOG_NUM_STRIDES_EXT_BASE`).
    pub const EXT_MIN_LOG_STRIDES: u8 = 3;

    /// The log2 of a WQE's strides that `log_wqe_num_of_strides` names (its 4 bits), `None`
    /// when out of range: 9..=16 from fields 0..=7 (`ext_stride_num_range` 0), and with `ext`
    /// also 3..=8 from the negative fields 0xa..=0xf.
    pub fn log_strides(field: u8, ext: bool) -> Option<u8> {
        let field = field & 0xf;
        let log = if field < 8 {
            LOG_STRIDES_BASE + field
        } else if ext {
            (LOG_STRIDES_BASE + field).checked_sub(16)?
        } else {
            return None;
        };
        (log <= MAX_LOG_STRIDES
            && log
                >= if ext {
                    EXT_MIN_LOG_STRIDES
                } else {
                    LOG_STRIDES_BASE
                })
        .then_some(log)
    }
    /// Most strides per WQE, as a log2.
    pub const MAX_LOG_STRIDES: u8 = 16;
    /// `log_wqe_stride_size` counts from this.
    pub const LOG_STRIDE_BYTES_BASE: u8 = 6;
    /// Largest stride, as a log2 of bytes.
    pub const MAX_LOG_STRIDE_BYTES: u8 = 13;
    /// Size of a cyclic striding receive WQE's header (a reserved next segment) before its
    /// data segment, in bytes.
    pub const WQE_HEADER: usize = 16;
    /// Bit 31 of a striding RQ completion's `byte_cnt`: a filler, which takes the strides left
    /// in a WQE that the next packet did not fit, and carries no packet.
    pub const FILLER: u32 = 1 << 31;
    /// Bits 29:16 of `byte_cnt`: strides the completion took (1 or more).
    pub const STRIDES_SHIFT: u32 = 16;
    /// Mask of the stride count once shifted down.
    pub const STRIDES_MASK: u32 = 0x3fff;
    /// Bits 15:0 of `byte_cnt`: the packet's length in bytes.
    pub const LEN_MASK: u32 = 0xffff;

    /// A striding completion's `byte_cnt` word.
    pub const fn byte_cnt(filler: bool, strides: u32, len: u32) -> u32 {
        (if filler { FILLER } else { 0 })
            | (strides & STRIDES_MASK) << STRIDES_SHIFT
            | (len & LEN_MASK)
    }
}
