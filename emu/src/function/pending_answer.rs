//! Commands whose answer is held back: kept with the function's state so that a reset drops
//! them. The command queue (`fw::cmdif`) makes and writes them.

use cxdirect_hw::cmd::{CmdLayout, DeliveryStatus};

/// A command that ran and the answer it is owed: written at once, or held back by
/// [`Fault::LateCommand`](crate::Fault::LateCommand).
pub(crate) struct PendingAnswer {
    pub(crate) slot: u32,
    pub(crate) entry: CmdLayout,
    pub(crate) outcome: Result<Vec<u8>, DeliveryStatus>,
    pub(crate) checksums: bool,
    /// An EQ took CMD events when the command was delivered: its completion is announced by
    /// one. A command delivered before (the CREATE_EQ that makes the command EQ, every command
    /// of a driver still polling) gets no event, so a polling driver never sees a second
    /// completion for it.
    pub(crate) event: bool,
}
