//! Receive interrupt mode (DPDK's `rte_eth_dev_rx_intr_enable` and friends): a receive queue's
//! CQ reports completions to its own EQ, bound to its own MSI-X vector, so a thread with nothing
//! to receive can arm the CQ and sleep on the vector's eventfd instead of spinning.

use crate::backend::barrier::wmb;
use crate::backend::registers::Registers;
use crate::backend::{Backend, Interrupt};
use crate::cq::{CqRing, Event, EventQueue};
use crate::error::DriverError;
use cxdirect_hw::doorbell::CqDoorbell;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

/// A CQ's completion interrupt: the EQ its completion events go to and the vector that EQ
/// signals. Owned by one receive queue, used from that queue's thread only.
pub(crate) struct CompletionInterrupt<B: Backend> {
    backend: Arc<B>,
    eq: EventQueue,
    irq: Interrupt,
    /// UAR page of the CQ's doorbell.
    uar: u32,
    /// Arm sequence number: advanced each time an armed CQ's event arrives.
    sn: u8,
    armed: bool,
    /// Completion events taken (for statistics and tests).
    events: u64,
    /// EQEs that named another CQ or were not completion events (counted, skipped).
    stray: u64,
}

impl<B: Backend> CompletionInterrupt<B> {
    /// Wraps a created completion EQ (not yet armed) and its vector.
    pub(crate) fn new(backend: Arc<B>, mut eq: EventQueue, irq: Interrupt, uar: u32) -> Self {
        eq.arm(&*backend);
        Self {
            backend,
            eq,
            irq,
            uar,
            sn: 0,
            armed: false,
            events: 0,
            stray: 0,
        }
    }

    /// The EQ's number (destroyed by the port after the CQ).
    pub(crate) fn eqn(&self) -> u32 {
        self.eq.eqn
    }

    /// Asks for one event at the next completion after `cq`'s consumer index: the arm word in
    /// the CQ's doorbell record, then the UAR doorbell.
    pub(crate) fn arm(&mut self, cq: &CqRing) {
        let word = cq.write_arm(self.sn);
        // The arm record must reach the device before the doorbell that makes it read it.
        wmb();
        Registers::uar(&*self.backend, self.uar)
            .write64(CqDoorbell::new().with_arm(word).with_cqn(cq.cqn()));
        self.armed = true;
    }

    /// Waits up to `timeout` for the armed CQ's event (not at all when `timeout` is zero), then
    /// takes what the EQ holds and re-arms the EQ. Returns true when an event for `cqn` came.
    pub(crate) fn wait(&mut self, cqn: u32, timeout: Duration) -> bool {
        if !timeout.is_zero() && self.armed {
            self.irq.wait(timeout);
        } else {
            self.irq.take();
        }
        let mut hit = false;
        let (mut events, mut stray) = (0u64, 0u64);
        self.eq.poll_each(&*self.backend, |ev| match ev {
            Event::Completion { cqn: n } if n == cqn => {
                hit = true;
                events += 1;
            }
            _ => stray += 1,
        });
        self.events += events;
        self.stray += stray;
        if hit {
            self.sn = self.sn.wrapping_add(1);
            self.armed = false;
        }
        hit
    }

    /// The vector's eventfd, for poll/epoll.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.irq.as_fd()
    }

    /// Completion events taken so far.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }
}

/// The error for a queue whose port was started without receive interrupts.
pub(crate) fn not_enabled() -> DriverError {
    DriverError::NotEnabled {
        what: "receive interrupts for this queue",
        how: "set PortConfig::rx_interrupts and give Options::msix_vectors at least receive \
              queues + 1",
    }
}
