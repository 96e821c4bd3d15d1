//! RDMA over RoCE v2: reliable-connected queue pairs with verbs a libibverbs user recognises.
//!
//! - [`Roce`]: RoCE enabled on the function's vport (MODIFY_NIC_VPORT_CONTEXT `roce_en`), its
//!   capabilities checked, and the port's GID table programmed with SET_ROCE_ADDRESS from the
//!   port's MAC and an IPv4 or IPv6 address the application gives;
//! - [`ProtectionDomain`] (ALLOC_PD) and [`MemoryRegion`] (CREATE_MKEY with remote rights) over
//!   driver DMA memory, a [`crate::Mempool`] or an imported dmabuf;
//! - [`CompletionQueue`], shared by any number of queue pairs, polled into [`WorkCompletion`]s;
//! - [`RcQueuePair`]: created in RST, [`RcQueuePair::connect`] walks RST→INIT→RTR→RTS to a
//!   peer's [`Endpoint`]; [`RcQueuePair::post_send`] and [`RcQueuePair::post_recv`] ring one
//!   doorbell per call (BlueFlame for a lone one-block WQE); a loop of alike requests is
//!   checked once with [`RcQueuePair::prepare_send`] and each then posted, its varying values
//!   checked, with [`RcQueuePair::post_prepared`] or [`RcQueuePair::post_prepared_inline`];
//! - [`UdQueuePair`]: unreliable datagrams, each [`UdSendRequest`] one SEND to the address an
//!   [`AddressHandle`] holds; receives start with the 40-byte GRH area ([`Grh::parse`]), and
//!   their completions carry the sender's QP ([`DatagramInfo`]);
//! - [`GsiQueuePair`]: the general services QP (QP1) carrying 256-byte MADs, behind the
//!   [`MadTransport`] trait of [`mad`] that a connection manager is written against;
//! - [`SharedReceiveQueue`]: a linked-list RMP (what Linux creates for a basic SRQ) with a
//!   one-shot limit event, [`crate::Event::SrqLimit`].
//!
//! Post and poll neither allocate, lock nor format. Every field of a CQE is checked against
//! what was posted before it selects a work request; a CQE naming an unknown QP, a WQE that is
//! not outstanding or a byte count larger than the posted buffers is a
//! [`crate::DriverError::BadDeviceValue`], never a panic.
//!
//! Where this differs from libibverbs:
//! - one [`CompletionQueue`] takes both the send and the receive completions of a queue pair
//!   (`send_cq == recv_cq`, as `ibv_rc_pingpong` uses it);
//! - inline data is given as bytes ([`Payload::Inline`]), not read through the gather list's
//!   addresses (which are device addresses here);
//! - [`RcQueuePair::reset`] and [`RcQueuePair::destroy`] take the queue pair's completion
//!   queue: they move the QP to error, collect its flush completions (the next
//!   [`CompletionQueue::poll`] returns them, with any other QP's completions met meanwhile),
//!   then reset or destroy it, so that nothing posted is lost or handed out twice;
//! - work request ids of buffers still posted to a [`SharedReceiveQueue`] come back from
//!   [`SharedReceiveQueue::destroy`];
//! - RoCE is enabled with [`Roce::enable`] on a [`crate::Device`] (for a started port, on
//!   [`crate::Port::device`]); the [`Roce`] it returns is what queue pairs are created with;
//! - a queue pair's affiliated async errors (`IBV_EVENT_QP_FATAL`, `_QP_REQ_ERR`,
//!   `_QP_ACCESS_ERR`) are [`crate::Event::QueueError`] with the QPN as `number`, from
//!   [`crate::Device::poll_events`];
//! - [`MemoryRegion`] access is [`crate::KeyAccess`] (`write` is `IBV_ACCESS_LOCAL_WRITE`; local
//!   read is always granted by `ibv_reg_mr`, here it is `read`).

mod ah;
mod cq;
mod grh;
mod gsi;
pub mod mad;
mod mr;
mod pd;
mod qp;
mod roce;
mod srq;
mod track;
mod ud;
mod wc;
mod wr;

pub use ah::{AddressHandle, AhAttr};
pub use grh::{gid_ip, Grh};
pub use gsi::{GsiQueuePair, GsiStats};
pub use mad::{MadAddress, MadSource, MadTransport};
pub use ud::{UdQueuePair, GRH_AREA};

pub use cq::CompletionQueue;
pub use mr::{MemoryRegion, MrSource};
pub use pd::ProtectionDomain;
pub use qp::{
    ConnectParams, Endpoint, PreparedFlags, PreparedLocal, PreparedOp, PreparedSend, QpCaps,
    QpState, QpStats, RcQueuePair,
};
pub use roce::Roce;
pub use srq::{SharedReceiveQueue, SrqCaps};
pub use wc::{DatagramInfo, NetworkHeader, WcOpcode, WcStatus, WorkCompletion};
pub use wr::{
    PathMtu, Payload, RecvRequest, RemoteAddr, SendOp, SendRequest, Sge, UdSendRequest,
    QKEY_FROM_QP,
};
