//! Go-back-N while the RC requester waits for room at the far port: whichever way a
//! retransmission ends (all of it sent at once, or the WQE it waited to resend acknowledged
//! meanwhile), the requester goes on with the outstanding WQEs it still owes and then with
//! the WQEs posted behind them. It never stalls with WQEs posted and nothing outstanding.
//!
//! Each function is attached to the wire with no peers to wake, so nothing runs unless the
//! test polls it: the test decides when each side takes what reached its port. Frames of no
//! interest to the responder, put at its port by the test, stand for a full FIFO.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Host, IOVA_BASE};
use cxdirect_emu::wire::{PortId, Wire, WireConfig};
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::wqe::opcode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MEM: usize = 4 << 20;
const MTU: usize = 1024;
/// Bytes each WRITE's slot holds at the responder.
const SLOT: u64 = 4096;
/// How long the requester is given to finish after the interesting moment. Its timers
/// recover nothing the test relies on: a requester that stalls never finishes.
const TIME_LIMIT: Duration = Duration::from_secs(5);

/// Two inline functions on a pair wire whose ports each hold `fifo` frames, with an RC QP
/// each connected to the other's (ACK timeout code `ack_timeout`). Neither wakes the other.
fn link(fifo: usize, ack_timeout: u8) -> RcPair {
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        exec: ExecMode::Inline,
        ..EmuConfig::default()
    };
    let da = Device::new(cfg(MAC_A));
    let db = Device::new(cfg(MAC_B));
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            fifo_capacity: fifo,
            ..WireConfig::default()
        })
        .expect("valid wire"),
    );
    da.attach(wire.clone(), PortId::A, &[]);
    db.attach(wire.clone(), PortId::B, &[]);
    let path = RcPath {
        ack_timeout,
        ..RcPath::to(GID_B, MAC_B, 0)
    };
    RcPair::on_hosts(Host::new(da, MEM), Host::new(db, MEM), wire, 6, 4, 4, path)
}

/// One frame at B's port that B drops (addressed to another station): it takes a slot of
/// B's receive FIFO until B polls.
fn occupy_a_slot_at_b(link: &RcPair) {
    let mut frame = vec![0u8; 64];
    frame[..6].copy_from_slice(&[0x02, 0xcd, 0, 0, 0, 0x99]);
    frame[6..12].copy_from_slice(&MAC_A);
    // IEEE 802 local experimental EtherType.
    frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    link.wire.transmit(PortId::A, &frame).expect("port");
}

/// Message `i` of `len` bytes, different for every message.
fn message(i: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u8).wrapping_mul(7).wrapping_add(i))
        .collect()
}

/// WRITEs of `lens` bytes from A into B's slots, written to A's send ring one after
/// another and announced by one doorbell.
struct Writes {
    lkey: u32,
    rkey: u32,
    src: u64,
    dst: u64,
    lens: Vec<usize>,
}

impl Writes {
    fn new(link: &mut RcPair, lens: &[usize]) -> Self {
        let lkey = link.a.create_mkey(false, true);
        let rights = RemoteRights {
            read: false,
            write: true,
            atomic: false,
        };
        let b = &mut link.b;
        let rkey = b.create_remote_mkey(b.pd, IOVA_BASE, MEM as u64, rights, 0x3c);
        let n = lens.len() as u64;
        let src = link.a.alloc(SLOT * n, 4096);
        let dst = link.b.alloc(SLOT * n, 4096);
        link.b.write(dst, &vec![0xee; (SLOT * n) as usize]);
        for (i, &len) in lens.iter().enumerate() {
            link.a.write(src + SLOT * i as u64, &message(i as u8, len));
        }
        Writes {
            lkey,
            rkey,
            src,
            dst,
            lens: lens.to_vec(),
        }
    }

    /// Writes WRITEs `range` to A's ring and rings the doorbell once.
    fn post(&self, link: &mut RcPair, range: std::ops::Range<usize>) {
        let mut last = [0u8; 64];
        for i in range {
            let at = SLOT * i as u64;
            let local = (self.src + at, self.lkey, self.lens[i] as u32);
            let remote = (self.dst + at, self.rkey);
            last = rc_wqe(
                &link.qp_a.sq,
                opcode::RDMA_WRITE,
                0,
                Some(remote),
                None,
                local,
            );
            link.a.write_wqe(&mut link.qp_a.sq, &last);
        }
        link.a.ring(&mut link.qp_a.sq, &last, false);
    }

    /// Polls both sides until A has completed every WRITE, in order and without error, then
    /// checks that each landed intact at B.
    fn finish(&self, link: &mut RcPair) {
        let started = Instant::now();
        let mut done = 0;
        while done < self.lens.len() {
            assert!(
                started.elapsed() < TIME_LIMIT,
                "stalled after {done} of {} completions; {:?}",
                self.lens.len(),
                link.a.dev.counters()
            );
            link.b.dev.poll();
            link.a.dev.poll();
            while let Some(c) = link.a.poll_cq(&mut link.cq_a) {
                assert_eq!(c[63] >> 4, 0, "WRITE {done}: completed without error");
                assert_eq!(u16::from_be_bytes([c[60], c[61]]), done as u16, "in order");
                done += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        for (i, &len) in self.lens.iter().enumerate() {
            let at = self.dst + SLOT * i as u64;
            assert_eq!(link.b.read(at, len), message(i as u8, len), "WRITE {i}");
            assert_eq!(
                link.b.read(at + len as u64, 16),
                vec![0xee; 16],
                "nothing past WRITE {i}"
            );
        }
    }
}

/// A PSN sequence NAK sends the outstanding WQEs again, and they all fit at the far port:
/// the WQE posted behind the one that had waited for room goes next.
#[test]
fn a_nak_whose_retransmission_fits_goes_on_with_the_posted_wqes() {
    // A long ACK timeout: nothing here waits for the timer.
    let mut link = link(3, 20);
    // G (one packet, lost), S (two packets), Y (one packet).
    let w = Writes::new(&mut link, &[MTU, 2 * MTU, MTU]);
    w.post(&mut link, 0..1);
    let mut lost = Vec::new();
    assert!(
        link.wire.receive(PortId::B, &mut lost).expect("port"),
        "G sent"
    );
    // Two slots taken: S's first packet fills the FIFO, and S waits with Y posted behind it.
    occupy_a_slot_at_b(&link);
    occupy_a_slot_at_b(&link);
    w.post(&mut link, 1..3);
    assert_eq!(link.wire.pending(PortId::B).expect("port"), 3);
    // B takes S's first packet past the lost G and NAKs G's PSN.
    link.b.dev.poll();
    assert_eq!(
        link.b.dev.counters().roce_naks_sent,
        1,
        "a PSN sequence NAK"
    );
    // A sends G and S again, three packets into the three free slots, and then Y would go:
    // the FIFO is full now, so Y waits for room as any WQE does.
    link.a.dev.poll();
    assert_eq!(link.a.dev.counters().roce_retransmits, 2, "G and S again");
    w.finish(&mut link);
    link.teardown();
}

/// The ACK timer sends the outstanding WQEs again while the far port is full, so the
/// retransmission waits at its first WQE; then that WQE's original is acknowledged after
/// all. The go-back-N goes on with the WQEs it still owes and the posted ones behind them.
#[test]
fn a_retransmission_acknowledged_while_it_waits_goes_on_with_the_rest() {
    // About 2 ms: the test sleeps past it.
    let mut link = link(2, 9);
    // X and Y (one packet each) fill the FIFO; W waits for room, V is posted behind it.
    let w = Writes::new(&mut link, &[MTU, MTU, MTU, MTU]);
    w.post(&mut link, 0..4);
    assert_eq!(link.wire.pending(PortId::B).expect("port"), 2);
    std::thread::sleep(Duration::from_millis(10));
    // The ACK timer runs out: X is to go again, and waits for room.
    link.a.dev.poll();
    assert_eq!(link.wire.pending(PortId::B).expect("port"), 2, "no room");
    // B takes the originals of X and Y and acknowledges them; A retires both.
    link.b.dev.poll();
    assert_eq!(link.wire.pending(PortId::B).expect("port"), 0);
    link.a.dev.poll();
    assert_eq!(
        link.wire.pending(PortId::B).expect("port"),
        2,
        "W (owed by the go-back-N) and V (posted behind it) went at once"
    );
    w.finish(&mut link);
    link.teardown();
}
