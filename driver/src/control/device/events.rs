//! The async event queue and what it reports (page requests, port changes, CQ and ring
//! errors), completion EQs for receive interrupts, and the firmware's health.

use super::super::health::health_counter;
use super::{record, Device, RmpStatus, ASYNC_EVENTS, MAX_FAILED_CQS};
use crate::backend::registers::Registers;
use crate::backend::{Backend, Interrupt};
use crate::control::cmd::input;
use crate::cq::{Event, EventQueue};
use crate::error::{DriverError, HealthFailure, QueueKind};
use cxdirect_dma::{DmaRegion, PageKind};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eq::{CreateEqIn, CreateEqOut};
use cxdirect_hw::eqe::{event_bit, EventType};
use cxdirect_hw::init_seg::{HealthFwVer, HealthSyndrome};
use cxdirect_hw::wq::{QueryRmpOut, RmpState};
use std::time::{Duration, Instant};

impl<B: Backend> Device<B> {
    pub(super) fn create_async_eq(&mut self) -> Result<(), DriverError> {
        let bitmask = ASYNC_EVENTS.iter().fold(0, |m, e| m | event_bit(*e));
        let log = self.options.async_eq_log_size;
        let mut eq = self.create_eq(log, bitmask, 0)?;
        eq.arm(&*self.backend);
        self.eq = Some(eq);
        Ok(())
    }

    /// Creates an EQ of 2^`log_size` entries (clamped to 16..=4096) taking the events in
    /// `bitmask` (completion events need none: CQs name their EQ) and signalling MSI-X `vector`.
    /// The caller arms it.
    pub(crate) fn create_eq(
        &mut self,
        log_size: u8,
        bitmask: u64,
        vector: u16,
    ) -> Result<EventQueue, DriverError> {
        if usize::from(vector) >= self.interrupts.len() || vector > 255 {
            return Err(DriverError::config(
                "msix_vectors",
                self.interrupts.len() as u64,
                format!("vector {vector} is not enabled: raise Options::msix_vectors above it"),
            ));
        }
        let log = log_size.clamp(4, 12);
        let len = (64usize << log).max(4096);
        let region = DmaRegion::new(self.iommu.clone(), &self.iovas, len, PageKind::Small)?;
        // Every entry starts owned by hardware: owner bit set, so the first pass reads none.
        for i in 0..(1usize << log) {
            region.write(i * 64 + 63, &[1])?;
        }
        let mut cmd = input(Opcode::CreateEq, 0, CreateEqIn::<&[u8]>::SIZE + 8);
        {
            let mut c = CreateEqIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateEq, "input"))?;
            c.set_event_bitmask(bitmask);
            c.eq_context_entry_mut()
                .set_log_eq_size(log)
                .set_uar_page(self.uar)
                .set_intr(vector as u8)
                .set_log_page_size((len.trailing_zeros() - 12) as u8);
            let _ = c.set_pas(0, region.iova());
        }
        let out = self.exec(&cmd, 16)?;
        let eqn = CreateEqOut::new(&out[..])
            .map(|o| u32::from(o.eq_number()))
            .map_err(|_| DriverError::BadDeviceValue {
                what: "CREATE_EQ output length",
                value: out.len() as u64,
            })?;
        Ok(EventQueue::new(region, log, eqn, self.uar))
    }

    /// DESTROY_EQ.
    pub(crate) fn destroy_eq(&mut self, eqn: u32) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::DestroyEq, 0, 16);
        cmd[0xb] = eqn as u8;
        self.exec(&cmd, 16).map(|_| ())
    }

    /// A second handle on MSI-X `vector`'s eventfd (`None` when the vector is not enabled).
    pub(crate) fn interrupt(&self, vector: u16) -> Result<Option<Interrupt>, DriverError> {
        match self.interrupts.get(usize::from(vector)) {
            Some(irq) => Ok(Some(irq.try_clone()?)),
            None => Ok(None),
        }
    }

    /// MSI-X vectors enabled (vector 0 carries async events, the rest are free for receive
    /// interrupts).
    pub fn msix_vectors(&self) -> usize {
        self.interrupts.len()
    }

    /// The async event queue's eventfd (MSI-X vector 0): readable when the device has posted an
    /// event — a shared ring's low watermark, a page request, a port change, an error. Wait on
    /// it (poll, epoll), then call [`Device::poll_events`].
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.interrupts.first().map(|irq| irq.as_fd())
    }

    /// Sleeps until the async event queue's vector fires or `timeout` passes; returns the
    /// interrupts taken (0 on timeout). Then call [`Device::poll_events`].
    pub fn wait_event(&mut self, timeout: Duration) -> u64 {
        let fired = self.interrupts.first().map_or(0, |irq| irq.wait(timeout));
        self.info.async_interrupts += fired;
        fired
    }

    /// Starts reporting limit events of the shared ring `rmpn` (of `entries` buffers).
    pub(crate) fn register_shared_ring(&mut self, rmpn: u32, entries: u32) {
        self.shared_rings.push((rmpn, entries));
    }

    /// Starts reporting limit events of the RDMA SRQ `rmpn` (of `entries` WQEs) as
    /// [`Event::SrqLimit`].
    pub(crate) fn register_srq(&mut self, rmpn: u32, entries: u32) {
        self.shared_rings.push((rmpn, entries));
        self.srqs.push(rmpn);
    }

    /// Stops reporting limit events of the shared ring `rmpn`.
    pub(crate) fn unregister_shared_ring(&mut self, rmpn: u32) {
        self.shared_rings.retain(|&(n, _)| n != rmpn);
        self.srqs.retain(|&n| n != rmpn);
        self.failed_rings.retain(|&n| n != rmpn);
    }

    /// QUERY_RMP: the ring's state, armed limit and posted buffers as the device sees them,
    /// checked against the ring's size.
    pub(crate) fn query_rmp(&mut self, rmpn: u32) -> Result<RmpStatus, DriverError> {
        let entries = self
            .shared_rings
            .iter()
            .find(|&&(n, _)| n == rmpn)
            .map(|&(_, e)| e)
            .ok_or(DriverError::NoSuchQueue {
                kind: QueueKind::SharedRing,
                number: rmpn,
            })?;
        let mut cmd = input(Opcode::QueryRmp, 0, 16);
        cmd[8..12].copy_from_slice(&rmpn.to_be_bytes());
        let out = self.exec(&cmd, QueryRmpOut::<&[u8]>::SIZE)?;
        let out = QueryRmpOut::new(&out[..]).map_err(|_| DriverError::BadDeviceValue {
            what: "QUERY_RMP output length",
            value: out.len() as u64,
        })?;
        let ctx = out.rmp_context();
        let wq = ctx.wq();
        let posted = u32::from((wq.sw_counter() as u16).wrapping_sub(wq.hw_counter() as u16));
        if posted > entries {
            return Err(DriverError::BadDeviceValue {
                what: "shared ring posted count (QUERY_RMP counters)",
                value: u64::from(posted),
            });
        }
        let limit = u32::from(wq.lwm());
        if limit > entries {
            return Err(DriverError::BadDeviceValue {
                what: "shared ring limit (QUERY_RMP lwm)",
                value: u64::from(limit),
            });
        }
        let state = match RmpState::try_from(ctx.state()) {
            Ok(state) => state,
            Err(_) => {
                return Err(DriverError::BadDeviceValue {
                    what: "shared ring state (QUERY_RMP)",
                    value: u64::from(ctx.state()),
                })
            }
        };
        Ok(RmpStatus {
            state,
            limit,
            posted,
        })
    }

    /// Handles pending async events: page requests (give or take), port changes, errors.
    /// Returns the events seen since the last call.
    pub fn poll_events(&mut self) -> Result<Vec<Event>, DriverError> {
        self.ensure_healthy()?;
        self.drain_events();
        self.serve_page_requests()?;
        let mut events = std::mem::take(&mut self.unreported);
        for ev in &mut events {
            if let Event::SharedRingLow { ring, posted } = ev {
                *posted = self.query_rmp(*ring)?.posted;
            }
        }
        Ok(events)
    }

    /// True when events were taken from the async EQ (while a command waited) but not yet
    /// returned by [`Device::poll_events`]: their interrupt has already been consumed, so call
    /// `poll_events` before sleeping on [`Device::event_fd`] again.
    pub fn events_pending(&self) -> bool {
        !self.unreported.is_empty()
    }

    /// Takes the async EQ's entries (without commands or a health check, so that a port can
    /// look for failed CQs on every burst) and returns, once, each CQ a CQ error event named
    /// since the last call: (CQ number, syndrome). The numbers are the device's word: the
    /// caller acts only on CQs it created.
    pub(crate) fn take_failed_cqs(&mut self) -> Vec<(u32, u8)> {
        self.drain_events();
        std::mem::take(&mut self.failed_cqs)
    }

    /// As [`Device::take_failed_cqs`], for the shared rings (RMP numbers) an SRQ catastrophic
    /// error event named; only rings this driver registered are kept.
    pub(crate) fn take_failed_rings(&mut self) -> Vec<u32> {
        self.drain_events();
        std::mem::take(&mut self.failed_rings)
    }

    /// Takes the async EQ's entries and interrupt count, recording the events.
    pub(super) fn drain_events(&mut self) {
        let Some(eq) = self.eq.as_mut() else { return };
        if let Some(irq) = self.interrupts.first() {
            self.info.async_interrupts += irq.take();
        }
        let start = self.unreported.len();
        eq.poll(&*self.backend, &mut self.unreported);
        for ev in &mut self.unreported[start..] {
            if let Event::SharedRingLow { ring, .. } = *ev {
                // Only a ring this driver created may be named.
                if !self.shared_rings.iter().any(|&(n, _)| n == ring) {
                    *ev = Event::Invalid {
                        raw_type: EventType::SrqRqLimit as u8,
                    };
                } else if self.srqs.contains(&ring) {
                    *ev = Event::SrqLimit { srq: ring };
                }
            }
            record(&mut self.events, &mut self.pending_pages, *ev);
            if let Event::CqError { cqn, syndrome } = *ev {
                // Kept apart from `unreported`: whoever polls events, the port that owns the
                // CQ must still learn that it failed.
                if !self.failed_cqs.iter().any(|&(n, _)| n == cqn)
                    && self.failed_cqs.len() < MAX_FAILED_CQS
                {
                    self.failed_cqs.push((cqn, syndrome));
                }
            }
            if let Event::QueueError {
                kind: EventType::SrqCatastrophicError,
                number,
            } = *ev
            {
                if self.shared_rings.iter().any(|&(n, _)| n == number)
                    && !self.failed_rings.contains(&number)
                {
                    self.failed_rings.push(number);
                }
            }
            if let Event::PortChange { up } = ev {
                self.info.link_up = *up;
            }
        }
        // Command completions are bookkeeping, not news for the caller.
        self.unreported.retain(|e| !matches!(e, Event::Cmd { .. }));
        if self.unreported.len() > 4096 {
            self.unreported.drain(..self.unreported.len() - 4096);
        }
    }

    pub(super) fn serve_page_requests(&mut self) -> Result<(), DriverError> {
        while let Some(pages) = self.pending_pages.pop() {
            if pages > 0 {
                let room = self
                    .options
                    .max_firmware_pages
                    .saturating_sub(self.pages.held());
                let give = (pages as usize).min(room);
                self.info.pages_refused += pages as usize - give;
                self.give_pages(give)?;
                self.info.pages_regular += give;
            } else if pages < 0 {
                let count = pages.unsigned_abs() as usize;
                self.info.pages_returned += self.take_pages(count.min(self.pages.held()))?;
            }
        }
        Ok(())
    }

    /// Checks the health buffer and counter; a failure is sticky until recovery.
    pub fn check_health(&mut self) -> Result<(), DriverError> {
        if let Some(f) = self.health.failed {
            return Err(DriverError::Failed(f));
        }
        let registers = Registers::init_seg(&*self.backend);
        let failure = if registers.read::<HealthFwVer>().is_dead_read() {
            Some(HealthFailure::NotResponding)
        } else {
            let synd = registers.read::<HealthSyndrome>().synd();
            let counter = health_counter(&*self.backend);
            if synd != 0 {
                Some(HealthFailure::Syndrome(synd))
            } else if counter != self.health.last_counter {
                self.health.last_counter = counter;
                self.health.last_change = Instant::now();
                None
            } else if self.health.last_change.elapsed() > self.options.health_stall {
                Some(HealthFailure::CounterStalled)
            } else {
                None
            }
        };
        if let Some(f) = failure {
            self.health.failed = Some(f);
            return Err(DriverError::Failed(f));
        }
        Ok(())
    }

    pub(super) fn ensure_healthy(&self) -> Result<(), DriverError> {
        match self.health.failed {
            Some(f) => Err(DriverError::Failed(f)),
            None => Ok(()),
        }
    }
}
