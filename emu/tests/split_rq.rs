//! The receive engine scattering one frame across a WQE's two data segments under two memory
//! keys (header buffer, payload buffer), as a split (devmem-style) receive queue posts them:
//! the byte count says how much was written, a frame may end inside the first segment, a first
//! segment shorter than the headers is filled and the rest goes on, and a frame too long for
//! both segments completes with a local length error.

use cxdirect_emu::testkit::{self as support, udp_frame, Host};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use std::sync::atomic::Ordering;

const MEM: usize = 16 << 20;
/// Two 16-byte data segments per WQE.
const LOG_STRIDE: u8 = 5;

struct Split {
    h: Host,
    tx_key: u32,
    tx_cq: support::Cq,
    sq: support::Sq,
    rx_cq: support::Cq,
    rq: support::Rq,
    /// The header segment's key (PA mode) and the payload segment's (MTT mode).
    header_key: u32,
    payload_key: u32,
}

fn split() -> Split {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let tx_key = h.create_mkey(true, true);
    let header_key = h.create_mkey(false, true);
    let payload_key = h.create_mkey(true, true);
    assert_ne!(header_key, payload_key);
    let tx_cq = h.create_cq(6);
    let tisn = h.create_tis();
    let sq = h.create_sq(tx_cq.cqn, tisn, 6);
    let rx_cq = h.create_cq(6);
    let rq = h.create_rq_segments(rx_cq.cqn, 6, LOG_STRIDE);
    h.steer_all_to(rq.rqn);
    Split {
        h,
        tx_key,
        tx_cq,
        sq,
        rx_cq,
        rq,
        header_key,
        payload_key,
    }
}

impl Split {
    /// Posts a WQE of a `header`-byte and a `payload`-byte segment; returns their IOVAs
    /// (each buffer filled with 0xee first, so untouched bytes show).
    fn post(&mut self, header: u32, payload: u32) -> (u64, u64) {
        let hbuf = self.h.alloc(u64::from(header).max(64), 64);
        let pbuf = self.h.alloc(u64::from(payload).max(64), 64);
        self.h.write(hbuf, &vec![0xee; header as usize]);
        self.h.write(pbuf, &vec![0xee; payload as usize]);
        let segs = [
            (hbuf, header, self.header_key),
            (pbuf, payload, self.payload_key),
        ];
        self.h.post_recv_segments(&mut self.rq, LOG_STRIDE, &segs);
        (hbuf, pbuf)
    }

    fn send(&mut self, frame: &[u8]) -> Vec<u8> {
        let buf = self.h.alloc(frame.len() as u64, 64);
        let wqe = self.h.build_send(&self.sq, frame, buf, self.tx_key, true);
        self.h.post(&mut self.sq, &wqe, false);
        self.h.poll_cq(&mut self.tx_cq).expect("send completion");
        self.h.poll_cq(&mut self.rx_cq).expect("receive completion")
    }
}

#[test]
fn a_frame_is_split_across_two_keys_and_its_byte_count_is_the_whole_frame() {
    let mut s = split();
    let (hbuf, pbuf) = s.post(128, 2048);
    let header_writes = s.h.dev.iommu().watch_written(hbuf, 128);
    let payload_writes = s.h.dev.iommu().watch_written(pbuf, 2048);
    let frame = udp_frame(1000, 3);
    let cqe = s.send(&frame);
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
    assert_eq!(c.byte_cnt() as usize, frame.len());
    assert_eq!(s.h.read(hbuf, 128), frame[..128]);
    assert_eq!(s.h.read(pbuf, frame.len() - 128), frame[128..]);
    assert_eq!(s.h.read(pbuf + (frame.len() - 128) as u64, 8), [0xee; 8]);
    assert_eq!(header_writes.load(Ordering::Relaxed), 128);
    assert_eq!(
        payload_writes.load(Ordering::Relaxed),
        (frame.len() - 128) as u64
    );
}

#[test]
fn a_frame_that_ends_in_the_first_segment_leaves_the_second_unused() {
    let mut s = split();
    let (hbuf, pbuf) = s.post(256, 2048);
    let payload_writes = s.h.dev.iommu().watch_written(pbuf, 2048);
    let frame = udp_frame(100, 5);
    assert!(frame.len() < 256);
    let cqe = s.send(&frame);
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
    assert_eq!(c.byte_cnt() as usize, frame.len(), "the byte count says so");
    assert_eq!(s.h.read(hbuf, frame.len()), frame);
    assert_eq!(s.h.read(hbuf + frame.len() as u64, 4), [0xee; 4]);
    assert_eq!(payload_writes.load(Ordering::Relaxed), 0);
    assert_eq!(s.h.read(pbuf, 64), vec![0xee; 64]);
}

#[test]
fn a_first_segment_shorter_than_the_headers_is_filled_and_the_rest_follows() {
    let mut s = split();
    // 32 bytes of a 42-byte Ethernet/IPv4/UDP header: the IPv4 and UDP headers go on into the
    // second segment.
    let (hbuf, pbuf) = s.post(32, 2048);
    let frame = udp_frame(300, 9);
    let cqe = s.send(&frame);
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
    assert_eq!(c.byte_cnt() as usize, frame.len());
    assert_eq!(s.h.read(hbuf, 32), frame[..32]);
    assert_eq!(s.h.read(pbuf, frame.len() - 32), frame[32..]);
}

#[test]
fn a_payload_segment_too_small_is_a_local_length_error() {
    let mut s = split();
    let (_, pbuf) = s.post(128, 256);
    let near_payload = s.h.dev.iommu().watch_written(pbuf, 4096);
    let frame = udp_frame(600, 1);
    assert!(frame.len() > 128 + 256);
    let cqe = s.send(&frame);
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::RespErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalLength as u8);
    assert_eq!(err.qpn(), s.rq.rqn);
    // The payload segment was written at most to its byte count, never past it.
    assert!(near_payload.load(Ordering::Relaxed) <= 256);
    // The RQ is in error: the next frame is not delivered.
    s.post(128, 2048);
    let buf = s.h.alloc(200, 64);
    let small = udp_frame(50, 2);
    let wqe = s.h.build_send(&s.sq, &small, buf, s.tx_key, true);
    s.h.post(&mut s.sq, &wqe, false);
    s.h.poll_cq(&mut s.tx_cq).expect("send completion");
    assert!(s.h.poll_cq(&mut s.rx_cq).is_none());
}
