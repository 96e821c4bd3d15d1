//! The ConnectX (mlx5) device's language as typed Rust: the init segment and health buffer,
//! command queue entries and mailboxes, every command's input and output, object contexts,
//! capabilities, work and completion queue entries, event queue entries, doorbell encodings and
//! memory translation entries.
//!
//! Everything here is a layout over bytes with explicit (big-endian) byte order: no I/O, no state.
//! The driver (`cxdirect`) and the device model (`cxdirect-emu`) both speak through these types
//! and share nothing else, so a test in which one talks to the other checks two independent
//! readings of the manual against each other.
//!
//! Layouts follow Linux `include/linux/mlx5/mlx5_ifc.h`: each is declared with the [`layout!`]
//! macro as a table of `field: type @ bit_offset [width]` rows in the header's bit numbering (bit 0
//! is the most significant bit of the first big-endian dword), so a row can be checked against the
//! header by eye and by the tests in `hw/tests/`.

#[doc(hidden)]
pub use paste;

pub mod av_qp_mapping;
pub mod caps;
pub mod cm;
pub mod cmd;
pub mod counters;
pub mod cq;
pub mod cqe;
pub mod dct;
pub mod definer;
pub mod devx;
pub mod doorbell;
pub mod eq;
pub mod eqe;
pub mod eswitch;
pub mod flow;
pub mod general_obj;
pub mod hca;
pub mod init_seg;
pub mod layout;
pub mod mcg;
pub mod memic;
pub mod meter;
pub mod mkey;
pub mod mmio;
pub mod modify_header;
pub mod odp;
pub mod qos;
pub mod qp;
pub mod reformat;
pub mod reg;
pub mod roce;
pub mod sampler;
pub mod sig;
pub mod srq;
pub mod sw_icm;
pub mod tir;
pub mod umr;
pub mod vport;
pub mod wq;
pub mod wqe;
pub mod xrq;

pub use layout::{FieldInfo, FieldKind, FieldValue, Layout, LayoutError};
