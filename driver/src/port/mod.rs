//! An Ethernet port on a brought-up function: its configuration and checks, the objects behind
//! it, receive steering and RSS, shared receive rings, recovery, pool revocation and statistics.

mod config;
mod create;
mod recover;
mod restart;
mod revoke;
mod shared;
mod stats;
mod steering;
mod teardown;
mod wq;

pub use config::{PortConfig, DEFAULT_RSS_KEY};
pub use create::{Port, Queues, SharedQueues, Started};
pub use recover::{PortRecovery, Recovery};
pub use restart::SharedRingRestart;
pub use revoke::PoolRevocation;
pub use stats::{PortStats, QueueXstats};
