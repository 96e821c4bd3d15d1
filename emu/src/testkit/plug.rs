//! A function on a loopback plug with one SQ and one RQ that every received frame is steered
//! to: what it sends comes back to it, so a test sees what left the function.

use super::{Cq, Host, Rq, Sq};
use crate::{Device, EmuConfig};
use cxdirect_hw::cqe::Cqe64;

/// Host memory of a plug.
const MEM: usize = 16 << 20;
/// Receive buffers posted, 2 KiB each.
const RX_BUFFERS: usize = 32;

/// A function on a loopback plug: an SQ, and an RQ every received frame is steered to.
pub struct Plug {
    /// The host driving it.
    pub h: Host,
    /// The send queue.
    pub sq: Sq,
    /// The TIR of the receive queue (the receive root's catch-all entry's destination).
    pub tirn: u32,
    tx_key: u32,
    tx_cq: Cq,
    rx_cq: Cq,
    rx_bufs: Vec<u64>,
    rq: Rq,
}

impl Plug {
    /// A plugged function brought up with `cfg`, its RQ the receive root's only destination.
    pub fn new(cfg: EmuConfig) -> Self {
        let mut h = Host::new(Device::loopback(cfg), MEM);
        h.bring_up();
        let tx_key = h.create_mkey(true, true);
        let rx_key = h.create_mkey(false, true);
        let tx_cq = h.create_cq(6);
        let tisn = h.create_tis();
        let sq = h.create_sq(tx_cq.cqn, tisn, 6);
        let rx_cq = h.create_cq(6);
        let mut rq = h.create_rq(rx_cq.cqn, 6, None);
        let mut rx_bufs = Vec::new();
        for _ in 0..RX_BUFFERS {
            let buf = h.alloc(2048, 64);
            h.post_recv(&mut rq, buf, 2048, rx_key);
            rx_bufs.push(buf);
        }
        let tirn = h.steer_all_to(rq.rqn);
        Plug {
            h,
            sq,
            tirn,
            tx_key,
            tx_cq,
            rx_cq,
            rx_bufs,
            rq,
        }
    }

    /// The receive queue's number.
    pub fn rqn(&self) -> u32 {
        self.rq.rqn
    }

    /// Sends `dropped`, which must not come back, and each of `passing`, which must come
    /// back whole; panics otherwise.
    pub fn drops_only(&mut self, dropped: &[u8], passing: impl IntoIterator<Item = Vec<u8>>) {
        assert_eq!(
            self.send(dropped),
            None,
            "a frame the steering should drop came back"
        );
        for other in passing {
            assert_eq!(
                self.send(&other),
                Some(other.clone()),
                "a frame was not passed whole"
            );
        }
    }

    /// Sends `frame`; returns what came back, if anything. The send always completes.
    pub fn send(&mut self, frame: &[u8]) -> Option<Vec<u8>> {
        self.send_for_cqe(frame).map(|(bytes, _)| bytes)
    }

    /// Sends `frame`; returns what came back, if anything, with its receive CQE.
    pub fn send_for_cqe(&mut self, frame: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let buf = self.h.alloc(frame.len() as u64, 64);
        let wqe = self.h.build_send(&self.sq, frame, buf, self.tx_key, true);
        self.h.post(&mut self.sq, &wqe, false);
        self.h.poll_cq(&mut self.tx_cq).expect("send completion");
        self.h.dev.poll();
        let cqe = self.h.poll_cq(&mut self.rx_cq)?;
        let len = Cqe64::new(&cqe[..]).expect("layout").byte_cnt() as usize;
        let index = u16::from_be_bytes([cqe[0x3c], cqe[0x3d]]);
        let bytes = self
            .h
            .read(self.rx_bufs[usize::from(index) % RX_BUFFERS], len);
        Some((bytes, cqe))
    }
}
