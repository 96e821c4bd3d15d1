//! `--devmem-tcp`: devmem TCP receive on the emulated pair beside plain receive, in one run.
//!
//! - devmem: `cxdirect-devmem-tcp`'s self-test (a TCP stream from the other port, handshake on
//!   the plain queue, data on the split queue with 66-byte headers so every payload byte lands
//!   in the dmabuf, no pattern check), timed inside the receiving side's turns that took
//!   segments (the queues' polls, the parse, the TCP receiver, tokens back, the ACKs sent)
//!   and inside the receiver alone (parse, TCP, tokens back);
//! - plain: frames of the same size (1514 bytes) received by `rx_burst` into host mbufs, with
//!   no TCP work, as the RX section times it.

use super::{metric, rx_run};
use cxdirect_apps::devmem_tcp::{self, Handshake, Settings, DATA_HEADER_BYTES};
use cxdirect_apps::emulated::wired_pair;
use cxdirect_emu::wire::Impairments;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Stream bytes of the devmem run.
const STREAM_BYTES: u64 = 16 << 20;
/// A full-size Ethernet frame: what each data segment of the stream is on the wire.
const FRAME_BYTES: usize = 1514;

/// Runs both and prints the figures and their ratio.
pub(super) fn devmem_tcp(rounds: usize) -> Result<(), String> {
    println!("# devmem TCP receive beside plain receive, emulated pair, one run");
    let settings = Settings {
        listen: 5201,
        address: Ipv4Addr::new(192, 168, 77, 1),
        sender_address: Ipv4Addr::new(192, 168, 77, 2),
        memory: "memfd".into(),
        size: 8 << 20,
        header_bytes: DATA_HEADER_BYTES,
        handshake: Handshake::Plain,
        ring: 4096,
        validate: None,
        bytes: Some(STREAM_BYTES),
        timeout: Duration::from_secs(300),
        sender_fin: true,
    };
    let backends = wired_pair(
        Impairments::NONE,
        ["devmem-bench-sender", "devmem-bench-receiver"],
    )?;
    let r = devmem_tcp::run(backends, &settings)?;
    if r.timed_out || r.bytes != STREAM_BYTES {
        return Err(format!(
            "the stream did not complete: {} of {STREAM_BYTES} bytes",
            r.bytes
        ));
    }
    let plain = rx_run(32, rounds, true, false, FRAME_BYTES)?;
    let copied_per_byte = r.counts.cpu_payload_copied as f64 / r.bytes as f64;
    let receiver = r.receiver_ns_per_frame();
    println!(
        "devmem TCP: {} bytes in {} segments at {:.0} Mbit/s; {:.0} ns per segment in the receiving side's turns (polls, parse, TCP, tokens back, ACKs sent), {receiver:.0} of them in the receiver (parse, TCP, tokens back); CPU bytes copied per payload byte {copied_per_byte}; linear bytes {}",
        r.bytes, r.counts.segments, r.mbps, r.receive_ns_per_segment(), r.counts.linear_bytes
    );
    println!(
        "plain receive of {FRAME_BYTES}-byte frames (rx_burst 32 into host mbufs, no TCP): {:.0} ns per packet",
        plain.ns
    );
    metric("devmem_tcp_mbps", r.mbps);
    metric("devmem_tcp_rx_ns_per_segment", r.receive_ns_per_segment());
    metric("plain_rx_1514_ns_per_pkt", plain.ns);
    metric("devmem_tcp_receiver_ns_per_segment", receiver);
    metric(
        "devmem_tcp_rx_over_plain_rx",
        r.receive_ns_per_segment() / plain.ns,
    );
    metric("devmem_tcp_receiver_over_plain_rx", receiver / plain.ns);
    metric(
        "devmem_tcp_cpu_bytes_copied_per_payload_byte",
        copied_per_byte,
    );
    metric("devmem_tcp_linear_bytes", r.counts.linear_bytes as f64);
    Ok(())
}
