//! Event queues: the EQ context and the CREATE_EQ / DESTROY_EQ commands, with the EQ states and
//! the event bitmask that chooses which asynchronous events an EQ receives.

use crate::layout;

/// Values of [`Eqc::status`] (`MLX5_EQC_STATUS_*`).
pub mod eq_status {
    /// The EQ works.
    pub const OK: u8 = 0x0;
    /// Writing an EQE to the EQ buffer failed; the EQ is in error.
    pub const EQ_WRITE_FAILURE: u8 = 0xa;
}

/// Values of [`Eqc::st`] (`MLX5_EQC_ST_*`), the arm state.
pub mod eq_state {
    /// Armed: the next EQE raises the EQ's interrupt.
    pub const ARMED: u8 = 0x9;
    /// Fired: an interrupt was raised and none will be until software arms the EQ again by
    /// writing its consumer index to the arm doorbell.
    pub const FIRED: u8 = 0xa;
}

/// The bit of CREATE_EQ's `event_bitmask` that subscribes an EQ to event type `event_type`
/// (the EQE `event_type` codes, `MLX5_EVENT_TYPE_*`): `1 << event_type`. Types 64 and above do
/// not fit the 64-bit mask and give 0.
pub const fn event_bit(event_type: u8) -> u64 {
    if event_type < 64 {
        1u64 << event_type
    } else {
        0
    }
}

/// CREATE_EQ's `event_bitmask` for an EQ that receives every event type listed in
/// `event_types` (EQE `event_type` codes): the OR of their [`event_bit`]s.
///
/// ```
/// use cxdirect_hw::eq::event_bitmask;
/// // Command interface completion (0xa) and page request (0xb).
/// assert_eq!(event_bitmask(&[0xa, 0xb]), (1 << 0xa) | (1 << 0xb));
/// ```
pub const fn event_bitmask(event_types: &[u8]) -> u64 {
    let mut mask = 0u64;
    let mut i = 0;
    while i < event_types.len() {
        mask |= event_bit(event_types[i]);
        i += 1;
    }
    mask
}

layout! {
    /// Event queue context (EQC), given at CREATE_EQ and returned by QUERY_EQ.
    pub struct Eqc("eqc", 0x40) {
        /// EQ status: see [`eq_status`] (0 OK, 0xa EQE write failure).
        status: u8 @ 0x00 [0x4],
        /// Event collapse: every EQE is written to entry 0.
        ec: bool @ 0x0d [0x1],
        /// Overrun ignore: the device does not check for EQ overflow.
        oi: bool @ 0x0e [0x1],
        /// Arm state: see [`eq_state`] (9 armed, 0xa fired).
        st: u8 @ 0x14 [0x4],
        /// Offset of the EQ buffer in its first page, in 64-byte units.
        page_offset: u8 @ 0x54 [0x6],
        /// Log2 of the number of EQEs (0..=log_max_eq_sz).
        log_eq_size: u8 @ 0x63 [0x5],
        /// UAR page whose EQ doorbells update and arm this EQ.
        uar_page: u32 @ 0x68 [0x18],
        /// MSI-X vector the EQ raises.
        intr: u8 @ 0xb8 [0x8],
        /// Log2 of the EQ buffer's page size minus 12 (0 = 4 KiB pages).
        log_page_size: u8 @ 0xc3 [0x5],
        /// Consumer counter, as last written by software to the EQ doorbell.
        consumer_counter: u32 @ 0x148 [0x18],
        /// Producer counter: EQEs written by the device.
        producer_counter: u32 @ 0x168 [0x18],
    }
}

layout! {
    /// CREATE_EQ input: the context, the events to deliver, then the EQ buffer's page
    /// addresses.
    pub struct CreateEqIn("create_eq_in", 0x110) {
        /// Command opcode: [`Opcode::CreateEq`](crate::cmd::Opcode::CreateEq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Asynchronous event types this EQ receives: bit `t` for event type `t` (see
        /// [`event_bitmask`]). Completion events go to the EQ named in each CQ's context
        /// regardless.
        event_bitmask: u64 @ 0x2c0 [0x40],
    }
    nested {
        /// The new EQ's context.
        eq_context_entry: Eqc @ 0x80,
    }
    arrays {
        /// Bus addresses of the EQ buffer's pages, in order, each aligned to the page size.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_EQ output.
    pub struct CreateEqOut("create_eq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new EQ.
        eq_number: u8 @ 0x58 [0x8],
    }
}

layout! {
    /// DESTROY_EQ input.
    pub struct DestroyEqIn("destroy_eq_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyEq`](crate::cmd::Opcode::DestroyEq).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The EQ to destroy.
        eq_number: u8 @ 0x58 [0x8],
    }
}
