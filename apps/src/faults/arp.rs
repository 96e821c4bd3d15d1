//! The `arp_spoof` class of the fault matrix: function a runs the driver's ARP responder and
//! has resolved function b (a genuine request and reply over the emulated pair); then, past the
//! neighbour table's `locktime` each time, the link carries a burst of hostile ARP: spoofed
//! replies and gratuitous ARP giving b's address another MAC, a request for a's address in
//! b's name from that MAC, claims to a's own address, group sender MACs, answers to questions
//! never asked, and frames of garbage. a's entry for b must keep b's MAC throughout.
//!
//! Accounting: `sent` hostile frames put on the wire, `received` those a's responder took,
//! `corrupt` times a's entry for b named another MAC (must be 0), `leaked` buffers of either
//! port's pool not returned; `evidence` the packets the neighbour table ignored and the
//! frames the responder refused as malformed. A recovery is a burst taken with the entry
//! intact; its time runs from the burst's sending to the entry checked.

use super::{leaked, start, ClassReport, FaultClass, Side};
use cxdirect::net::{ArpOp, ArpPacket, NeighbourConfig, Resolution, Responder};
use cxdirect::Mbuf;
use cxdirect_emu::{Device as Model, EmuConfig};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const A_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 37, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 37, 2);
/// The spoofer's MAC.
const EVIL: [u8; 6] = [0x02, 0xe7, 0x11, 0x00, 0x00, 0x66];
const BROADCAST: [u8; 6] = [0xff; 6];
/// Time between bursts on the table's clock: past its `locktime` (1 s), where Linux would take a
/// spoofed reply.
const STEP: Duration = Duration::from_millis(1500);
/// Longest a burst may take to arrive.
const PATIENCE: Duration = Duration::from_secs(2);

fn arp_frame(op: ArpOp, eth_dst: [u8; 6], sha: [u8; 6], sip: Ipv4Addr, tip: Ipv4Addr) -> Vec<u8> {
    let mut f = [0u8; 42];
    let packet = ArpPacket {
        op,
        sender_mac: sha,
        sender_ip: sip,
        target_mac: if op == ArpOp::Reply { eth_dst } else { [0; 6] },
        target_ip: tip,
    };
    // A 42-byte buffer always holds the frame.
    let _ = packet.write_frame(eth_dst, sha, &mut f);
    let mut v = f.to_vec();
    v.resize(60, 0);
    v
}

/// The hostile burst of injection `i` toward a (at `a_mac`).
fn burst(i: u32, a_mac: [u8; 6]) -> Vec<Vec<u8>> {
    let other = Ipv4Addr::new(192, 168, 37, 99);
    let mut frames = vec![
        arp_frame(ArpOp::Reply, a_mac, EVIL, B_IP, A_IP),
        arp_frame(ArpOp::Request, BROADCAST, EVIL, B_IP, B_IP),
        arp_frame(ArpOp::Reply, BROADCAST, EVIL, B_IP, B_IP),
        arp_frame(ArpOp::Request, a_mac, EVIL, B_IP, A_IP),
        arp_frame(ArpOp::Reply, a_mac, EVIL, A_IP, A_IP),
        arp_frame(ArpOp::Reply, a_mac, EVIL, other, A_IP),
    ];
    // A group sender MAC (the frame's own source stays unicast).
    let mut group = arp_frame(ArpOp::Reply, a_mac, EVIL, B_IP, A_IP);
    group[22..28].copy_from_slice(&BROADCAST);
    frames.push(group);
    // Garbage behind the ARP EtherType: wrong hardware and protocol types, lengths and
    // operations, from a seeded generator.
    let mut x = 0x9e37_79b9u32 ^ i.wrapping_mul(0x85eb_ca6b);
    for _ in 0..3 {
        let mut f = arp_frame(ArpOp::Reply, a_mac, EVIL, B_IP, A_IP);
        for byte in &mut f[14..42] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *byte = x as u8;
        }
        frames.push(f);
    }
    frames
}

fn send(side: &mut Side, frames: &[Vec<u8>]) -> Result<(), String> {
    let mut batch: Vec<Mbuf> = Vec::with_capacity(frames.len());
    for f in frames {
        let mut m = side.port.pool().alloc().ok_or("b's pool is empty")?;
        m.set_data(f).map_err(|e| format!("frame: {e}"))?;
        batch.push(m);
    }
    let start = Instant::now();
    while !batch.is_empty() {
        side.queues.tx[0].tx_burst(&mut batch);
        if start.elapsed() > PATIENCE {
            return Err("sending stalled".into());
        }
    }
    Ok(())
}

fn receive(side: &mut Side, into: &mut Vec<Mbuf>) -> Result<usize, String> {
    side.queues.rx[0]
        .rx_burst(into, 64)
        .map_err(|e| format!("receiving: {e}"))
}

/// Runs `arp_spoof` with `injections` bursts.
pub(super) fn run_class(class: FaultClass, injections: u32) -> Result<ClassReport, String> {
    let (ma, mb) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let mut a = start(&ma, "a")?;
    let mut b = start(&mb, "b")?;
    let a_mac = a.port.device().info().mac;
    let b_mac = b.port.device().info().mac;
    let config = NeighbourConfig {
        reachable: Duration::from_secs(3600),
        ..NeighbourConfig::default()
    };
    let mut responder =
        Responder::for_port(&mut a.port, A_IP, config).map_err(|e| format!("responder: {e}"))?;
    let mut report = ClassReport {
        name: class.name(),
        ..ClassReport::default()
    };
    let mut now = Instant::now();
    let mut rx = Vec::with_capacity(64);
    let mut out = Vec::with_capacity(64);

    // a resolves b: its request crosses the wire and b, the genuine host, answers.
    if responder.resolve(B_IP, now) != Ok(Resolution::Pending) {
        return Err("resolving b did not start".into());
    }
    responder.poll(a.port.pool(), &mut out, now);
    a.queues.tx[0].tx_burst(&mut out);
    out.clear();
    let began = Instant::now();
    let asked = loop {
        receive(&mut b, &mut rx)?;
        let asked = rx.drain(..).any(|m| {
            ArpPacket::parse_frame(&m.to_vec())
                .is_ok_and(|(_, p)| p.op == ArpOp::Request && p.target_ip == B_IP)
        });
        if asked {
            break true;
        }
        if began.elapsed() > PATIENCE {
            break false;
        }
    };
    if !asked {
        return Err("a's ARP request for b never reached b".into());
    }
    send(&mut b, &[arp_frame(ArpOp::Reply, a_mac, b_mac, B_IP, A_IP)])?;
    let began = Instant::now();
    while responder.neighbours().lookup(B_IP, now) != Some(b_mac) {
        receive(&mut a, &mut rx)?;
        responder.handle(&mut rx, &mut out, now);
        rx.clear();
        if began.elapsed() > PATIENCE {
            return Err("a never learned b's MAC from b's reply".into());
        }
    }
    let ignored_before = ignored(&responder);

    for i in 0..injections {
        now += STEP;
        let frames = burst(i, a_mac);
        let began = Instant::now();
        send(&mut b, &frames)?;
        report.sent += frames.len() as u64;
        let mut took = 0;
        while took < frames.len() {
            receive(&mut a, &mut rx)?;
            took += responder.handle(&mut rx, &mut out, now);
            // Frames that are not ARP or ICMP stay; none are expected here.
            rx.clear();
            // Answers (to the spoofed request for a's address) go to the asker.
            while !out.is_empty() {
                a.queues.tx[0].tx_burst(&mut out);
            }
            if began.elapsed() > PATIENCE {
                break;
            }
        }
        report.received += took as u64;
        report.injections += 1;
        if responder.neighbours().lookup(B_IP, now) == Some(b_mac) {
            report.recoveries += 1;
            report.recover_us.push(began.elapsed().as_secs_f64() * 1e6);
        } else {
            report.corrupt += 1;
        }
        // What a sent b's way (answers to the spoofer went to its MAC, not b's).
        receive(&mut b, &mut rx)?;
        rx.clear();
    }
    report.lost_beyond_flushed = report.sent - report.received;
    report.evidence = ignored(&responder) - ignored_before;
    // Let in-flight sends complete before counting buffers.
    std::thread::sleep(Duration::from_millis(5));
    for side in [&mut a, &mut b] {
        side.queues.tx[0].tx_burst(&mut Vec::new());
        receive(side, &mut rx)?;
        rx.clear();
    }
    report.leaked = leaked(&a) + leaked(&b);
    for (name, mut side) in [("a", a), ("b", b)] {
        side.queues.tx.clear();
        side.queues.rx.clear();
        side.port
            .close()
            .and_then(|dev| dev.teardown())
            .map_err(|e| format!("closing {name}: {e}"))?;
    }
    Ok(report)
}

/// Packets the table ignored plus frames the responder refused as malformed.
fn ignored(r: &Responder) -> u64 {
    let n = r.neighbours().stats();
    n.bad_target
        + n.bad_sender
        + n.own_address
        + n.unsolicited
        + n.not_for_us
        + n.probes
        + n.locked
        + n.conflicts
        + r.stats().arp_malformed
}
