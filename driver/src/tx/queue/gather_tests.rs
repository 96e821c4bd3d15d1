//! Gathered frames' WQEs as the device reads them: the header buffer and the payload stretch
//! as two data segments under their own keys (18 header bytes inline, or none), an LSO WQE
//! with every header byte inline and the payload its only data segment, and the frames the
//! queue refuses.

use super::tests::queue_with;
use super::TxQueue;
use crate::mem::Mempool;
use crate::test_support::{pool, NoDevice};
use crate::tx::{GatheredFrame, InlineMode, KeyedStretch, TxRefusal};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg, EthSeg, WQE_BB};

/// A 66-byte header frame (Ethernet, IPv4, TCP with timestamps: bytes 0, 1, 2, ...).
fn headers(pool: &Mempool) -> crate::mem::Mbuf {
    let mut m = pool.alloc().expect("a free buffer");
    let bytes: Vec<u8> = (0..66).collect();
    m.set_data(&bytes).unwrap();
    m.flags.tx_l4_csum = true;
    m
}

const PAYLOAD: KeyedStretch = KeyedStretch {
    lkey: 0x00ab_cd01,
    iova: 0x7000_0000_1234,
    len: 1448,
};

/// The `n` basic blocks at ring index `at`.
fn wqe(q: &TxQueue<NoDevice>, at: u16, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n * WQE_BB];
    for (bb, block) in out.chunks_exact_mut(WQE_BB).enumerate() {
        q.ring.read_bytes(u32::from(at) + bb as u32, 0, block);
    }
    out
}

#[test]
fn a_frame_gathers_its_headers_and_its_payload_under_their_own_keys() {
    let p = pool(8, 2048);
    for (inline, ds, inlined) in [(InlineMode::Headers, 5, 18), (InlineMode::None, 4, 0)] {
        let mut q = queue_with(0, inline, 0);
        let h = headers(&p);
        let (hkey, hiova) = (h.lkey(), h.data_iova());
        let mut frames = vec![GatheredFrame {
            headers: h,
            payload: PAYLOAD,
            mss: None,
        }];
        assert_eq!(q.tx_burst_gathered(&mut frames), 1);
        assert!(frames.is_empty());
        let w = wqe(&q, 0, 2);
        let ctrl = CtrlSeg::new(&w[..16]).unwrap();
        assert_eq!((ctrl.opcode(), ctrl.ds()), (opcode::SEND, ds));
        let eth = EthSeg::new(&w[16..32]).unwrap();
        assert!(eth.l4_csum() && !eth.l3_csum());
        assert_eq!(usize::from(eth.inline_hdr_sz()), inlined);
        // The inlined header bytes run from the Ethernet segment's last two bytes on.
        let expect: Vec<u8> = (0..inlined as u8).collect();
        assert_eq!(&w[30..30 + inlined], &expect[..]);
        let at = 32 + inlined.saturating_sub(2).div_ceil(16) * 16;
        let head = DataSeg::new(&w[at..at + 16]).unwrap();
        assert_eq!(
            (head.byte_count(), head.lkey(), head.addr()),
            ((66 - inlined) as u32, hkey, hiova + inlined as u64)
        );
        let pay = DataSeg::new(&w[at + 16..at + 32]).unwrap();
        assert_eq!(
            (pay.byte_count(), pay.lkey(), pay.addr()),
            (PAYLOAD.len, PAYLOAD.lkey, PAYLOAD.iova)
        );
        assert_eq!((q.stats().packets, q.stats().bytes), (1, 66 + 1448));
        // The header buffer is in flight until the device reports the WQE.
        assert_eq!(q.in_flight(), 1);
    }
}

#[test]
fn an_lso_frame_inlines_every_header_byte_and_gathers_the_payload_alone() {
    let p = pool(8, 2048);
    let mut q = queue_with(0, InlineMode::Headers, 1 << 16);
    let mut h = headers(&p);
    h.flags.tx_ip_csum = true;
    let payload = KeyedStretch {
        len: 10 * 1448,
        ..PAYLOAD
    };
    let mut frames = vec![GatheredFrame {
        headers: h,
        payload,
        mss: Some(1448),
    }];
    assert_eq!(q.tx_burst_gathered(&mut frames), 1);
    let w = wqe(&q, 0, 2);
    let ctrl = CtrlSeg::new(&w[..16]).unwrap();
    // Control, Ethernet, 64 more header bytes, the payload: 7 segments.
    assert_eq!((ctrl.opcode(), ctrl.ds()), (opcode::LSO, 7));
    let eth = EthSeg::new(&w[16..32]).unwrap();
    assert_eq!((eth.mss(), eth.inline_hdr_sz()), (1448, 66));
    assert!(eth.l3_csum() && eth.l4_csum());
    let expect: Vec<u8> = (0..66).collect();
    assert_eq!(&w[30..96], &expect[..]);
    let pay = DataSeg::new(&w[96..112]).unwrap();
    assert_eq!(
        (pay.byte_count(), pay.lkey(), pay.addr()),
        (payload.len, payload.lkey, payload.iova)
    );
    assert_eq!(q.stats().tso_packets, 1);
}

#[test]
fn frames_the_queue_cannot_send_are_refused_counted_and_dropped() {
    let p = pool(8, 2048);
    let cases = [
        // LSO on a queue started without TSO.
        (0, Some(1448), PAYLOAD.len, TxRefusal::TsoOff),
        // Headers and the MSS past the frame size.
        (1 << 16, Some(1460), PAYLOAD.len, TxRefusal::TsoMss),
        // Past the device's largest LSO message.
        (1 << 14, Some(1448), 1 << 14, TxRefusal::TsoTooLong),
        // One frame past the port's frame size.
        (0, None, 1449, TxRefusal::Length),
        // No payload.
        (0, None, 0, TxRefusal::Length),
    ];
    for (max_lso, mss, len, refusal) in cases {
        let mut q = queue_with(0, InlineMode::Headers, max_lso);
        let mut frames = vec![GatheredFrame {
            headers: headers(&p),
            payload: KeyedStretch { len, ..PAYLOAD },
            mss,
        }];
        assert_eq!(q.tx_burst_gathered(&mut frames), 1, "{refusal:?}");
        assert_eq!(q.stats().errors, 1);
        assert_eq!(q.stats().last_refusal, Some(refusal));
        assert_eq!((q.stats().packets, q.in_flight()), (0, 0));
    }
    // The refused header buffers went back to the pool.
    assert_eq!(p.available(), p.capacity());
}
