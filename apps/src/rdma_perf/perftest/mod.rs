//! rdma-perf against perftest: the side of a Linux `ib_write_bw`, `ib_read_bw`, `ib_send_bw`
//! or `ib_write_lat` (perftest 25.01, which announces itself as 6.24) that perftest expects on
//! the other end of its out-of-band TCP exchange (port 18515, no `-R`), over RoCE v2 RC with
//! the GID in the keys (perftest run with `-x GID_INDEX`).
//!
//! - [`wire`]: the messages, byte for byte: version, sizes, MTU, key strings, reports;
//! - [`session`]: the order of the exchanges for each test and role, over any stream, with
//!   the device's part behind [`session::Local`];
//! - [`solo`]: the measuring loops of one side, as perftest's own run;
//! - [`side`]: [`session::Local`] and [`solo::Solo`] on a device;
//! - [`run`]: one side on a PCI function, or both on emu-pair over loopback TCP.
//!
//! This side announces version 6.24 (below 6.28, so no peer sends the binary parameter
//! negotiation of later versions) and accepts peers from 5.70 on, which is what perftest
//! itself accepts. It always trades the 108-byte key message with the GID; the peer must run
//! with `-x`. The peer's MAC is given: the keys carry only its GID.

pub mod run;
pub mod session;
pub mod side;
pub mod solo;
pub mod wire;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
