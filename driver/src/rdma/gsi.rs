//! The general services QP (QP1) on a RoCE port, owned as mlx5_ib's `gsi.c` owns it on a port
//! without LAG: one hardware QP of service type QP1 (0x8) sends and receives every MAD
//! (`set_deth_sqpn` is not used, so no extra UD QPs), with Q_Key `IB_QP1_QKEY` at RST2INIT
//! and send PSN 0 (`ib_mad_port_start`). Its own completion queue and one registered region
//! hold the receive slots (the 40-byte GRH area, then the 256-byte MAD, as `ib_mad` posts
//! one 296-byte entry) and the send slots (one MAD each).

use super::ah::{AddressHandle, AhAttr};
use super::cq::CompletionQueue;
use super::grh::Grh;
use super::mad::{MadAddress, MadSource, MadTransport, DEFAULT_PKEY, MAD_SIZE, QP1_QKEY};
use super::mr::MemoryRegion;
use super::pd::ProtectionDomain;
use super::qp::{QpCaps, QpState};
use super::roce::Roce;
use super::ud::{UdQueuePair, GRH_AREA};
use super::wc::{WcOpcode, WcStatus, WorkCompletion};
use super::wr::{Payload, RecvRequest, UdSendRequest, QKEY_FROM_QP};
use crate::backend::Backend;
use crate::control::{Device, KeyAccess};
use crate::error::DriverError;

/// Bytes a receive slot takes: the GRH area and a MAD (`mad_priv_dma_size`).
const RECV_BYTES: usize = GRH_AREA + MAD_SIZE;
/// Spacing of receive slots in the region (a multiple of the cache line).
const RECV_STRIDE: usize = 320;
/// Bit 63 of a work request id: a send slot's (the rest is the slot's index).
const SEND_TAG: u64 = 1 << 63;

/// Counters of a [`GsiQueuePair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GsiStats {
    /// MADs posted for sending.
    pub sent: u64,
    /// MADs handed out by [`MadTransport::poll_mads`].
    pub received: u64,
    /// Datagrams dropped: not a whole MAD (shorter or longer than 256 bytes), or without a
    /// network header to tell the sender by.
    pub dropped: u64,
    /// Sends that completed in error (the QP then stops sending: recreate it).
    pub send_errors: u64,
    /// Receives that completed in error other than flushed.
    pub recv_errors: u64,
}

/// The general services QP (QP1) of a RoCE function, carrying MADs ([`MadTransport`]).
///
/// Destroy it with [`GsiQueuePair::destroy`]; one simply dropped leaves its QP, CQ and key in
/// the device until [`Device::teardown`] and leaks their memory.
pub struct GsiQueuePair<B: Backend> {
    qp: Option<UdQueuePair<B>>,
    cq: Option<CompletionQueue>,
    mr: Option<MemoryRegion>,
    roce: Roce,
    recv_slots: u32,
    send_slots: u32,
    /// Sends posted and not yet completed.
    in_flight: u32,
    /// Sends posted, wrapping: the next one takes slot `send_seq % send_slots`.
    send_seq: u64,
    stats: GsiStats,
}

impl<B: Backend> std::fmt::Debug for GsiQueuePair<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GsiQueuePair")
            .field("qpn", &self.qpn())
            .field("stats", &self.stats)
            .finish()
    }
}

impl<B: Backend> GsiQueuePair<B> {
    /// Creates the GSI QP in `pd` with `depth` receive and `depth` send slots (1 to 1024),
    /// posts every receive and moves it to RTS. One per function: the device hands datagrams
    /// for QP 1 to the first one.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for a depth out of range; [`DriverError::Command`] when the
    /// device refuses (nothing is left created).
    pub fn create(
        dev: &mut Device<B>,
        pd: &ProtectionDomain,
        roce: &Roce,
        depth: u32,
    ) -> Result<Self, DriverError> {
        if !(1..=1024).contains(&depth) {
            return Err(DriverError::config("depth", depth, "1 to 1024"));
        }
        let mut cq = CompletionQueue::create(dev, 2 * depth)?;
        let mr = match MemoryRegion::alloc(
            dev,
            pd,
            depth as usize * (RECV_STRIDE + MAD_SIZE),
            KeyAccess::READ_WRITE,
        ) {
            Ok(mr) => mr,
            Err(e) => {
                let _ = cq.destroy(dev);
                return Err(e);
            }
        };
        let caps = QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = match UdQueuePair::create_gsi(dev, pd, &mut cq, caps, roce) {
            Ok(qp) => qp,
            Err(e) => {
                let _ = mr.deregister(dev);
                let _ = cq.destroy(dev);
                return Err(e);
            }
        };
        let mut gsi = Self {
            qp: Some(qp),
            cq: Some(cq),
            mr: Some(mr),
            roce: *roce,
            recv_slots: depth,
            send_slots: depth,
            in_flight: 0,
            send_seq: 0,
            stats: GsiStats::default(),
        };
        let ready = (0..depth)
            .try_for_each(|slot| gsi.post_receive(slot))
            .and_then(|()| gsi.parts().0.activate(dev, QP1_QKEY));
        if let Err(e) = ready {
            let _ = gsi.destroy(dev);
            return Err(e);
        }
        Ok(gsi)
    }

    /// The QP's firmware number (what its CQEs name; peers address it as QP 1).
    pub fn qpn(&self) -> u32 {
        self.qp.as_ref().map_or(0, UdQueuePair::qpn)
    }

    /// Its counters.
    pub fn stats(&self) -> GsiStats {
        self.stats
    }

    /// The QP's state ([`QpState::Error`] after a failed send).
    pub fn state(&self) -> QpState {
        self.qp.as_ref().map_or(QpState::Error, UdQueuePair::state)
    }

    /// The QP, its CQ and its region (present until destroyed).
    fn parts(&mut self) -> (&mut UdQueuePair<B>, &mut CompletionQueue, &MemoryRegion) {
        match (self.qp.as_mut(), self.cq.as_mut(), self.mr.as_ref()) {
            (Some(qp), Some(cq), Some(mr)) => (qp, cq, mr),
            // Only destroy() takes them, and it consumes the value.
            _ => unreachable!("a GSI QP keeps its parts until destroyed"),
        }
    }

    /// Posts receive slot `slot`.
    fn post_receive(&mut self, slot: u32) -> Result<(), DriverError> {
        let (qp, _, mr) = self.parts();
        let sge = [mr.sge((slot as usize * RECV_STRIDE) as u64, RECV_BYTES as u32)];
        qp.post_recv(&[RecvRequest {
            wr_id: u64::from(slot),
            sg_list: &sge,
        }])
    }

    /// Moves the QP to error, takes its flush completions, then DESTROY_QP, DESTROY_CQ and
    /// the region's key.
    ///
    /// # Errors
    ///
    /// The first command the device refused; the rest is still torn down.
    pub fn destroy(mut self, dev: &mut Device<B>) -> Result<(), DriverError> {
        let mut result = Ok(());
        if let (Some(qp), Some(cq)) = (self.qp.take(), self.cq.as_mut()) {
            result = qp.destroy(dev, cq);
        }
        if let Some(cq) = self.cq.take() {
            let r = cq.destroy(dev);
            result = result.and(r);
        }
        if let Some(mr) = self.mr.take() {
            let r = mr.deregister(dev);
            result = result.and(r);
        }
        result
    }

    /// One receive completion: the MAD handed to `on_mad` when whole and from a known
    /// sender; the slot posted again unless the QP was flushed. True when a MAD was handed.
    fn received(
        &mut self,
        wc: &WorkCompletion,
        on_mad: &mut dyn FnMut(&MadSource, &[u8; MAD_SIZE]),
    ) -> Result<bool, DriverError> {
        let slot = wc.wr_id;
        if slot >= u64::from(self.recv_slots) {
            return Err(DriverError::BadDeviceValue {
                what: "GSI receive work request id",
                value: slot,
            });
        }
        match wc.status {
            WcStatus::Success => {}
            // The QP is in error: its receives are not posted again.
            WcStatus::WrFlushErr => return Ok(false),
            _ => {
                self.stats.recv_errors += 1;
                self.post_receive(slot as u32)?;
                return Ok(false);
            }
        }
        let mut buf = [0u8; RECV_BYTES];
        let (_, _, mr) = self.parts();
        mr.read(slot as usize * RECV_STRIDE, &mut buf)?;
        let sender = match wc.datagram {
            Some(info) if wc.byte_len as usize == RECV_BYTES => info
                .network
                .map(|network| (Grh::parse(&buf[..GRH_AREA], network), info)),
            _ => None,
        };
        // The slot's bytes are copied out: it takes the next datagram now.
        self.post_receive(slot as u32)?;
        let Some((grh, info)) = sender else {
            self.stats.dropped += 1;
            return Ok(false);
        };
        let grh = grh?;
        let source = MadSource {
            gid: grh.sgid,
            local_gid: grh.dgid,
            qpn: info.src_qp,
            pkey: info.pkey.unwrap_or(DEFAULT_PKEY),
            hop_limit: grh.hop_limit,
            traffic_class: grh.traffic_class,
        };
        let mut mad = [0u8; MAD_SIZE];
        mad.copy_from_slice(&buf[GRH_AREA..]);
        on_mad(&source, &mad);
        self.stats.received += 1;
        Ok(true)
    }
}

impl<B: Backend> MadTransport for GsiQueuePair<B> {
    fn send_mad(&mut self, to: &MadAddress, mad: &[u8; MAD_SIZE]) -> Result<(), DriverError> {
        if self.in_flight >= self.send_slots {
            return Err(DriverError::QueueFull {
                what: "the GSI send slots",
                outstanding: self.in_flight,
                capacity: self.send_slots,
                asked: 1,
            });
        }
        let attr = AhAttr {
            mac: to.mac,
            gid: to.gid,
            hop_limit: to.hop_limit,
            traffic_class: to.traffic_class,
            flow_label: 0,
            // MADs go at priority 0: a RoCE packet carries no SL for a reply to copy.
            sl: 0,
        };
        let ah = AddressHandle::new(&self.roce, &attr)?;
        // Sends complete in order, so the slot `send_slots` sends back is free again.
        let slot = (self.send_seq % u64::from(self.send_slots)) as usize;
        let offset = self.recv_slots as usize * RECV_STRIDE + slot * MAD_SIZE;
        let (qp, _, mr) = self.parts();
        mr.write(offset, mad)?;
        let sge = [mr.sge(offset as u64, MAD_SIZE as u32)];
        // The QP's own Q_Key (IB_QP1_QKEY), as ib_mad posts with IB_QP_SET_QKEY.
        let wr = UdSendRequest::new(
            SEND_TAG | slot as u64,
            &ah,
            to.qpn,
            QKEY_FROM_QP,
            Payload::Gather(&sge),
        );
        qp.post_send(&[wr])?;
        self.in_flight += 1;
        self.send_seq = self.send_seq.wrapping_add(1);
        self.stats.sent += 1;
        Ok(())
    }

    fn poll_mads(
        &mut self,
        on_mad: &mut dyn FnMut(&MadSource, &[u8; MAD_SIZE]),
    ) -> Result<usize, DriverError> {
        let mut handed = 0;
        let mut wcs = [WorkCompletion::default(); 16];
        loop {
            let n = self.parts().1.poll(&mut wcs)?;
            for wc in &wcs[..n] {
                if wc.opcode == WcOpcode::Recv {
                    handed += usize::from(self.received(wc, on_mad)?);
                } else {
                    if wc.wr_id & SEND_TAG == 0
                        || wc.wr_id & !SEND_TAG >= u64::from(self.send_slots)
                    {
                        return Err(DriverError::BadDeviceValue {
                            what: "GSI send work request id",
                            value: wc.wr_id,
                        });
                    }
                    self.in_flight = self.in_flight.saturating_sub(1);
                    if wc.status != WcStatus::Success {
                        self.stats.send_errors += 1;
                    }
                }
            }
            if n < wcs.len() {
                return Ok(handed);
            }
        }
    }
}

impl<B: Backend> Drop for GsiQueuePair<B> {
    fn drop(&mut self) {
        // Parts not destroyed stay in the device: their own drops leak their memory.
        let _ = (self.qp.take(), self.cq.take(), self.mr.take());
    }
}
