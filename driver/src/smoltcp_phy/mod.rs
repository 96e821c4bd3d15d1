//! smoltcp on cxdirect (feature `smoltcp`): [`CxPhy`] is a `smoltcp::phy::Device` over one
//! receive queue and one send queue of a port, so ARP, ICMP and ordinary TCP and UDP sockets
//! run on the driver's burst API. Frames are copied between the driver's buffers and the
//! stack's (smoltcp parses and builds whole frames in its own memory); the devmem path
//! ([`crate::devmem_tcp`]) is the one that keeps payloads away from the CPU.
//!
//! Received frames come in bursts and are handed to the stack one by one; a frame the stack
//! builds is sent at once, and frames the send ring cannot take yet wait (at most
//! [`TX_BACKLOG`]) for the next call.

use crate::backend::Backend;
use crate::mem::{Mbuf, Mempool};
use crate::{RxQueue, TxQueue};
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use std::collections::VecDeque;

/// The smoltcp crate this device is built for (0.12), for its interface and sockets.
pub use smoltcp;

/// Frames received per burst.
pub const RX_BURST: usize = 32;
/// Frames waiting for room in the send ring, at most; the stack is told the device is busy
/// (no transmit token) past it.
pub const TX_BACKLOG: usize = 64;
/// The largest frame the stack may build, bytes (Ethernet header included, no FCS).
const MAX_FRAME: usize = 9216;

/// Counters of a [`CxPhy`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhyStats {
    /// Frames handed to the stack.
    pub rx_frames: u64,
    /// Frames the stack built and the send ring took.
    pub tx_frames: u64,
    /// Frames the stack asked to send that found no buffer in the pool (dropped).
    pub tx_nombuf: u64,
    /// Receive bursts that failed (the queue stopped).
    pub rx_errors: u64,
}

/// A smoltcp device over a cxdirect port's queues.
pub struct CxPhy<B: Backend> {
    rx: RxQueue<B>,
    tx: TxQueue<B>,
    pool: Mempool,
    received: VecDeque<Mbuf>,
    burst: Vec<Mbuf>,
    backlog: Vec<Mbuf>,
    mtu: usize,
    stats: PhyStats,
}

impl<B: Backend> CxPhy<B> {
    /// A device over `rx` and `tx`, with send buffers from `pool` (the port's pool, or one of
    /// its own) and frames of at most `mtu` IP bytes (Ethernet header not counted).
    pub fn new(rx: RxQueue<B>, tx: TxQueue<B>, pool: Mempool, mtu: usize) -> Self {
        Self {
            rx,
            tx,
            pool,
            received: VecDeque::with_capacity(RX_BURST),
            burst: Vec::with_capacity(RX_BURST),
            backlog: Vec::with_capacity(TX_BACKLOG),
            mtu,
            stats: PhyStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> PhyStats {
        self.stats
    }

    /// The queues and pool back.
    pub fn into_parts(self) -> (RxQueue<B>, TxQueue<B>, Mempool) {
        (self.rx, self.tx, self.pool)
    }

    /// Sends what waits for room in the send ring.
    pub fn flush(&mut self) {
        if !self.backlog.is_empty() {
            let before = self.backlog.len();
            self.tx.tx_burst(&mut self.backlog);
            self.stats.tx_frames += (before - self.backlog.len()) as u64;
        }
    }

    fn refill(&mut self) {
        if !self.received.is_empty() {
            return;
        }
        match self.rx.rx_burst(&mut self.burst, RX_BURST) {
            Ok(_) => self.received.extend(self.burst.drain(..)),
            Err(_) => self.stats.rx_errors += 1,
        }
    }
}

/// One received frame for the stack.
pub struct CxRxToken {
    frame: Mbuf,
}

impl phy::RxToken for CxRxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let mut bytes = [0u8; MAX_FRAME];
        let mut n = 0;
        for seg in self.frame.segments() {
            n += seg.read(0, &mut bytes[n..]);
        }
        f(&bytes[..n])
    }
}

/// Room to send one frame.
pub struct CxTxToken<'a, B: Backend> {
    phy: &'a mut CxPhy<B>,
}

impl<B: Backend> phy::TxToken for CxTxToken<'_, B> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut bytes = [0u8; MAX_FRAME];
        let len = len.min(MAX_FRAME);
        let r = f(&mut bytes[..len]);
        let phy = self.phy;
        let filled = phy.pool.alloc().and_then(|mut m| {
            // A frame longer than a buffer cannot be sent: counted like a missing buffer.
            m.set_data(&bytes[..len]).ok()?;
            Some(m)
        });
        match filled {
            Some(m) => {
                phy.backlog.push(m);
                phy.flush();
            }
            None => phy.stats.tx_nombuf += 1,
        }
        r
    }
}

impl<B: Backend> phy::Device for CxPhy<B> {
    type RxToken<'a>
        = CxRxToken
    where
        Self: 'a;
    type TxToken<'a>
        = CxTxToken<'a, B>
    where
        Self: 'a;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.flush();
        self.refill();
        let frame = self.received.pop_front()?;
        self.stats.rx_frames += 1;
        Some((CxRxToken { frame }, CxTxToken { phy: self }))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        self.flush();
        (self.backlog.len() < TX_BACKLOG).then_some(CxTxToken { phy: self })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = (self.mtu + 14).min(MAX_FRAME);
        caps.max_burst_size = Some(RX_BURST);
        caps
    }
}
