//! The devmem TCP program (`cxdirect-devmem-tcp`) on the emulated pair: the receiving port
//! serves its address, takes the handshake on a plain queue and the stream on its split queue
//! (66-byte split: every payload byte in the dmabuf), or both on the split queue (74-byte
//! split: the SYN's headers whole, 8 linear bytes per data segment), and checks every byte
//! against ncdevmem's `-v 7` pattern where it landed; the other port's sender finds it by ARP.
//! Over a clean wire and over one that drops, repeats and reorders frames: every byte arrives
//! once and exact, and delivery copies no payload byte.

use cxdirect_apps::devmem_tcp::{
    self, Handshake, Report, Settings, DATA_HEADER_BYTES, DEFAULT_HEADER_BYTES,
};
use cxdirect_apps::emulated::{wired_pair, EmuBackend};
use cxdirect_emu::wire::Impairments;
use std::net::Ipv4Addr;
use std::time::Duration;

const BYTES: u64 = 3 << 20;

fn settings(header_bytes: u32) -> Settings {
    Settings {
        listen: 5201,
        address: Ipv4Addr::new(192, 168, 77, 1),
        sender_address: Ipv4Addr::new(192, 168, 77, 2),
        memory: "memfd".into(),
        size: 8 << 20,
        header_bytes,
        handshake: Handshake::Split,
        ring: 32768,
        validate: Some(7),
        bytes: Some(BYTES),
        timeout: Duration::from_secs(120),
        sender_fin: true,
    }
}

/// Two modelled functions on a wire with `impairments`: sender first, receiver last.
fn pair(impairments: Impairments) -> Vec<EmuBackend> {
    wired_pair(impairments, ["devmem-tcp-sender", "devmem-tcp-receiver"]).unwrap()
}

fn every_byte_once_and_exact(r: &Report) {
    assert!(r.verified, "{}", r.summary(true));
    assert_eq!(r.bytes, BYTES);
    assert_eq!(r.counts.linear_bytes + r.counts.fragment_bytes, BYTES);
    assert_eq!(r.pattern_errors, 0);
    assert_eq!(r.tokens_outstanding, 0);
    assert_eq!(r.counts.cpu_payload_copied, 0);
    // The CPU read the dmabuf only to check it: exactly the fragment bytes, once.
    assert_eq!(r.counts.validation_read_bytes, r.counts.fragment_bytes);
    assert_eq!(r.counts.unparsed, 0);
    assert!(!r.timed_out);
}

#[test]
fn a_stream_over_a_clean_wire_lands_in_the_dmabuf_with_8_linear_bytes_per_segment() {
    let r = devmem_tcp::run(pair(Impairments::NONE), &settings(DEFAULT_HEADER_BYTES)).unwrap();
    every_byte_once_and_exact(&r);
    let segments = BYTES.div_ceil(1448);
    // 66 bytes of headers in a 74-byte split: 8 payload bytes of each data segment in host
    // memory, the rest in the dmabuf; the SYN's options were all read.
    assert_eq!(r.counts.linear_bytes, segments * 8);
    assert_eq!(r.rx.options_in_dmabuf, 0);
    // Nothing came out of order (a loaded machine may still time the sender out and repeat
    // segments in order: those are trimmed as duplicates).
    assert_eq!(r.counts.out_of_order, 0);
    assert!(r.summary(true).contains(" cpu_payload_copied=0 "));
}

#[test]
fn a_stream_over_a_lossy_reordering_duplicating_wire_delivers_every_byte_once_and_exact() {
    let impairments = Impairments {
        seed: 43,
        drop_probability: 0.01,
        duplicate_probability: 0.01,
        reorder_probability: 0.01,
        reorder_window: 3,
        ..Impairments::NONE
    };
    let r = devmem_tcp::run(pair(impairments), &settings(DEFAULT_HEADER_BYTES)).unwrap();
    every_byte_once_and_exact(&r);
    // The impairments showed: segments repeated or sent again, and some kept out of order.
    assert!(r.counts.duplicates > 0, "{}", r.summary(true));
    assert!(r.rx.duplicate_bytes > 0);
    let s = r.sender.as_ref().unwrap();
    assert!(s.retransmitted > 0, "{s:?}");
}

#[test]
fn a_66_byte_split_puts_every_data_segment_exactly_at_its_headers() {
    // The SYN's timestamp and window scale land in the dmabuf unread: neither is agreed, and
    // the data segments' payload starts exactly at the split.
    let r = devmem_tcp::run(pair(Impairments::NONE), &settings(66)).unwrap();
    every_byte_once_and_exact(&r);
    assert_eq!(r.counts.linear_bytes, 0);
    assert_eq!(r.counts.fragment_bytes, BYTES);
    assert_eq!(r.rx.options_in_dmabuf, 1, "only the SYN");
}

#[test]
fn a_sender_that_never_sends_fin_is_closed_by_the_receiver_once_the_bytes_arrived() {
    // As a netcat that does not shut its side down at the end of its input.
    let s = Settings {
        sender_fin: false,
        ..settings(DEFAULT_HEADER_BYTES)
    };
    let r = devmem_tcp::run(pair(Impairments::NONE), &s).unwrap();
    every_byte_once_and_exact(&r);
}

#[test]
fn a_handshake_on_the_plain_queue_agrees_every_option_and_puts_every_data_byte_in_the_dmabuf() {
    // The SYN lands whole on a plain queue; the flow then moves to the split queue, whose
    // 66-byte split is exactly a data segment's headers.
    let s = Settings {
        handshake: Handshake::Plain,
        ..settings(DATA_HEADER_BYTES)
    };
    let r = devmem_tcp::run(pair(Impairments::NONE), &s).unwrap();
    every_byte_once_and_exact(&r);
    let sender = r.sender.as_ref().unwrap();
    assert!(sender.window_scaling && sender.timestamps, "{sender:?}");
    assert_eq!(r.rx.options_in_dmabuf, 0);
    // The flow moved before the SYN-ACK went out: every payload byte landed in the dmabuf,
    // from its first.
    assert_eq!(r.counts.plain_dropped, 0);
    assert_eq!(r.counts.linear_bytes, 0);
    assert_eq!(r.counts.fragment_bytes, BYTES);
}

#[test]
fn a_handshake_on_the_plain_queue_survives_an_impaired_wire() {
    let impairments = Impairments {
        seed: 7,
        drop_probability: 0.01,
        duplicate_probability: 0.01,
        reorder_probability: 0.01,
        reorder_window: 3,
        ..Impairments::NONE
    };
    let s = Settings {
        handshake: Handshake::Plain,
        ..settings(DATA_HEADER_BYTES)
    };
    let r = devmem_tcp::run(pair(impairments), &s).unwrap();
    every_byte_once_and_exact(&r);
}
