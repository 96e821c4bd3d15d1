//! An Ethernet port on a brought-up function: its configuration and checks, the objects behind
//! it, receive steering and RSS, flow rules, split receive queues, shared receive rings,
//! recovery, pool revocation and statistics.

mod config;
mod flow;
mod objects;
mod restart;
mod stats;
mod steering;
mod wq;

pub use config::{PortConfig, DEFAULT_RSS_KEY};
pub use flow::{FlowMatch, FlowProtocol, FlowRule, IpVersion, FLOW_RULE_LIMIT};
pub use objects::recover::{PortRecovery, Recovery};
pub use objects::revoke::PoolRevocation;
pub use objects::split::SplitRxConfig;
pub use objects::{Port, Queues, SharedQueues, Started};
pub use restart::SharedRingRestart;
pub use stats::{PortStats, QueueXstats};
