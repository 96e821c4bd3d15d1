//! Dynamically connected targets (DCT): their context and the commands that create, drain,
//! query and destroy them (Linux `mlx5_ifc.h` `dctc`, `create_dct_in`, `drain_dct_in`,
//! `query_dct_out`, `destroy_dct_in`, 6.12).
//!
//! mlx5_ib fills the context at `ib_create_qp` time (`create_dct` in `qp.c`: PD, SRQ, CQ,
//! access key, user index) and at the two transitions a DCT takes (`mlx5_ib_modify_dct`:
//! access, port, P_Key index and counter set at RESET to INIT; RNR timer, traffic class, flow
//! label, MTU, source GID index and hop limit at INIT to RTR), and only then sends
//! CREATE_DCT (`mlx5_core_create_dct` in `qpc.c`). Destroying sends DRAIN_DCT, waits for the
//! DCT_DRAINED event, then DESTROY_DCT (`_mlx5_core_destroy_dct`).

use crate::layout;

/// DCT states (`MLX5_DCTC_STATE_*`), as QUERY_DCT reports them.
pub mod state {
    /// Taking requests.
    pub const ACTIVE: u8 = 0x0;
    /// DRAIN_DCT was given; requests are refused while in-flight work finishes.
    pub const DRAINING: u8 = 0x1;
    /// Drained: the DCT_DRAINED event was raised; only DESTROY_DCT is left.
    pub const DRAINED: u8 = 0x2;
}

layout! {
    /// DCT context (`dctc`): the receive side of the DC transport. A DCT takes requests from
    /// any DC initiator (DCI) that presents its access key, placing SENDs through its SRQ.
    pub struct Dctc("dctc", 0x40) {
        /// State ([`state`]); read back by QUERY_DCT.
        state: u8 @ 0x04 [0x4],
        /// Index the DCT's receive CQEs carry (`srqn_uidx`, CQE version 1).
        user_index: u32 @ 0x28 [0x18],
        /// CQ the DCT's receives complete on.
        cqn: u32 @ 0x48 [0x18],
        /// Q counter set the DCT counts in (0: none).
        counter_set_id: u8 @ 0x60 [0x8],
        /// Atomic mode (the QP context's encoding; mlx5_ib's `get_atomic_mode`).
        atomic_mode: u8 @ 0x68 [0x4],
        /// Remote READ enable.
        rre: bool @ 0x6c [0x1],
        /// Remote WRITE enable.
        rwe: bool @ 0x6d [0x1],
        /// Remote atomic enable.
        rae: bool @ 0x6e [0x1],
        /// Responder scatter to CQE (`cs_res`).
        cs_res: u8 @ 0x88 [0x8],
        /// Minimum RNR NAK timer (IBA encoding).
        min_rnr_nak: u8 @ 0x93 [0x5],
        /// The SRQ (an RMP, or an XRQ) the DCT's SENDs take receive WQEs from.
        srqn_xrqn: u32 @ 0xa8 [0x18],
        /// Protection domain remote keys are checked in.
        pd: u32 @ 0xc8 [0x18],
        /// Traffic class of the DCT's responses.
        tclass: u8 @ 0xe0 [0x8],
        /// IPv6 flow label of the DCT's responses.
        flow_label: u32 @ 0xec [0x14],
        /// DC access key: a request presenting another is refused.
        dc_access_key: u64 @ 0x100 [0x40],
        /// Path MTU (the QP context's encoding: 1 = 256 .. 5 = 4096).
        mtu: u8 @ 0x145 [0x3],
        /// Port (1).
        port: u8 @ 0x148 [0x8],
        /// P_Key index.
        pkey_index: u16 @ 0x150 [0x10],
        /// Index of the source GID in the port's RoCE address table.
        my_addr_index: u8 @ 0x168 [0x8],
        /// Hop limit (IPv4 TTL) of the DCT's responses.
        hop_limit: u8 @ 0x178 [0x8],
        /// Requests refused for a wrong access key; read back by QUERY_DCT.
        dc_access_key_violation_count: u32 @ 0x180 [0x20],
        /// Ethernet priority (RoCE).
        eth_prio: u8 @ 0x1b5 [0x3],
        /// Enhanced connection establishment options.
        ece: u32 @ 0x1e0 [0x20],
    }
}

layout! {
    /// CREATE_DCT input.
    pub struct CreateDctIn("create_dct_in", 0x80) {
        /// Command opcode: [`Opcode::CreateDct`](crate::cmd::Opcode::CreateDct).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The new DCT's context.
        dct_context_entry: Dctc @ 0x80,
    }
}

layout! {
    /// CREATE_DCT output.
    pub struct CreateDctOut("create_dct_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new DCT: the destination DC initiators name in their address vectors.
        dctn: u32 @ 0x48 [0x18],
        /// Enhanced connection establishment options in force.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// DESTROY_DCT input.
    pub struct DestroyDctIn("destroy_dct_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyDct`](crate::cmd::Opcode::DestroyDct).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer.
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The DCT's number.
        dctn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DRAIN_DCT input: the DCT stops taking requests and raises DCT_DRAINED once drained.
    pub struct DrainDctIn("drain_dct_in", 0x10) {
        /// Command opcode: [`Opcode::DrainDct`](crate::cmd::Opcode::DrainDct).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer.
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The DCT's number.
        dctn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_DCT input.
    pub struct QueryDctIn("query_dct_in", 0x10) {
        /// Command opcode: [`Opcode::QueryDct`](crate::cmd::Opcode::QueryDct).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The DCT's number.
        dctn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_DCT output: the context as it stands.
    pub struct QueryDctOut("query_dct_out", 0x80) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The DCT's context.
        dct_context_entry: Dctc @ 0x80,
    }
}
