//! CQE compression in the model: which receive completions share a session, and the bytes a
//! session puts in the CQ ring (title CQE, mini-CQE arrays, untouched slots between them).

use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host};
use cxdirect_emu::{Device, EmuConfig, Fault};
use cxdirect_hw::cqe::{
    cqe_format, mini_array_slot, mini_cqe_res_format, Cqe64, CqeOpcode, MiniCqe8, CQE_SIZE,
    MINI_CQE_SIZE,
};

const MEM: usize = 64 << 20;
const UNTOUCHED: u8 = 0xf1;

/// A function with a receive queue of `2^rq_log` posted 2 KiB buffers completing on a CQ of
/// `2^cq_log` entries compressed in `format`, every frame steered to it.
struct Rig {
    h: Host,
    cq: Cq,
}

fn rig(cq_log: u8, rq_log: u8, format: u8) -> Rig {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let key = h.create_mkey(true, true);
    let cq = h.try_create_cq(cq_log, Some(format)).expect("CREATE_CQ");
    let mut rq = h.create_rq(cq.cqn, rq_log, None);
    h.steer_all_to(rq.rqn);
    for _ in 0..1u32 << rq_log {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    Rig { h, cq }
}

impl Rig {
    fn slot(&self, slot: u32) -> Vec<u8> {
        self.h.cq_slot(&self.cq, slot)
    }

    /// The byte counts of a session's mini-CQEs, read where the layout puts them.
    fn mini_byte_counts(&self, title: u32, count: u32) -> Vec<u32> {
        (0..count)
            .map(|i| {
                let array = self.slot(title + mini_array_slot(i));
                let at = (i as usize % 8) * MINI_CQE_SIZE;
                MiniCqe8::new(&array[at..at + MINI_CQE_SIZE])
                    .unwrap()
                    .byte_cnt()
            })
            .collect()
    }
}

fn frames(lens: impl IntoIterator<Item = usize>) -> Vec<Vec<u8>> {
    lens.into_iter()
        .enumerate()
        .map(|(i, len)| udp_frame(len, i as u8))
        .collect()
}

/// A 60-byte frame no L3 parser recognises (its completion carries other flags).
fn non_ip_frame() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    f
}

#[test]
fn a_receive_pass_writes_one_title_and_mini_cqe_arrays() {
    let r = rig(6, 6, mini_cqe_res_format::HASH);
    let batch = frames((0..20).map(|i| 60 + i * 3));
    r.h.arrive(&batch);

    let title = r.slot(0);
    let t = Cqe64::new(&title[..]).unwrap();
    assert_eq!(t.cqe_format(), cqe_format::COMPRESSED);
    assert_eq!(t.opcode(), CqeOpcode::RespSend as u8);
    assert_eq!(
        t.byte_cnt(),
        20,
        "a title's byte count is the session's size"
    );
    assert_eq!(t.wqe_counter(), 0, "the first completion's WQE");
    assert_eq!(t.qpn(), 0, "sop_drop_qpn: no rule set a flow tag");
    assert!(!t.owner(), "first pass");
    let sizes: Vec<u32> = batch.iter().map(|f| f.len() as u32).collect();
    assert_eq!(r.mini_byte_counts(0, 20), sizes);
    // Arrays at 1, 8 and 16; the slots between them are not written.
    for slot in [2, 3, 7, 9, 15, 17, 19] {
        assert_eq!(r.slot(slot)[CQE_SIZE - 1], UNTOUCHED, "slot {slot}");
    }
    // The last array's unused mini-CQEs are zero.
    assert_eq!(&r.slot(16)[4 * MINI_CQE_SIZE..], &[0u8; 32][..]);
    let c = r.h.dev.counters();
    assert_eq!(
        (c.cqes, c.cqe_slot_writes, c.compressed_sessions),
        (20, 4, 1)
    );

    // A lone frame later is a plain CQE right after the session.
    r.h.arrive(&frames([100]));
    let plain = r.slot(20);
    let p = Cqe64::new(&plain[..]).unwrap();
    assert_eq!(p.cqe_format(), cqe_format::NO_INLINE_DATA);
    assert_eq!((p.byte_cnt(), p.wqe_counter()), (142, 20));
    let c = r.h.dev.counters();
    assert_eq!(
        (c.cqes, c.cqe_slot_writes, c.compressed_sessions),
        (21, 5, 1)
    );
}

#[test]
fn completions_with_other_flags_start_a_new_session() {
    let r = rig(6, 6, mini_cqe_res_format::HASH);
    let mut batch = frames([80, 81, 82]);
    batch.push(non_ip_frame());
    batch.extend(frames([90, 91, 92]));
    r.h.arrive(&batch);
    let at = |slot| {
        let bytes = r.slot(slot);
        let c = Cqe64::new(&bytes[..]).unwrap();
        (c.cqe_format(), c.byte_cnt(), c.wqe_counter())
    };
    assert_eq!(at(0), (cqe_format::COMPRESSED, 3, 0));
    assert_eq!(at(3), (cqe_format::NO_INLINE_DATA, 60, 3), "alone: plain");
    assert_eq!(at(4), (cqe_format::COMPRESSED, 3, 4));
    assert_eq!(r.mini_byte_counts(4, 3), [132, 133, 134]);
}

#[test]
fn sessions_close_at_the_session_limit_and_at_the_ring_size() {
    let r = rig(7, 7, mini_cqe_res_format::HASH);
    r.h.arrive(&frames((0..70).map(|_| 64)));
    let count = |slot| Cqe64::new(&r.slot(slot)[..]).unwrap().byte_cnt();
    assert_eq!(count(0), 64, "cqe_compression_max_num");
    assert_eq!(count(64), 6);

    let small = rig(4, 4, mini_cqe_res_format::HASH);
    small.h.arrive(&frames((0..16).map(|_| 64)));
    assert_eq!(Cqe64::new(&small.slot(0)[..]).unwrap().byte_cnt(), 16);
}

#[test]
fn the_checksum_formats_are_accepted_and_the_reserved_one_is_refused() {
    for format in [mini_cqe_res_format::CSUM, mini_cqe_res_format::CSUM_STRIDX] {
        let r = rig(6, 6, format);
        r.h.arrive(&frames([70, 71]));
        let title = r.slot(0);
        assert_eq!(Cqe64::new(&title[..]).unwrap().byte_cnt(), 2);
        assert_eq!(r.mini_byte_counts(0, 2), [112, 113]);
    }
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    assert!(matches!(
        h.try_create_cq(6, Some(2)),
        Err(CmdFail::Status { .. })
    ));
}

#[test]
fn a_session_with_no_room_is_lost_and_stops_its_queue() {
    let r = rig(4, 5, mini_cqe_res_format::HASH);
    // 16 entries, nothing consumed: a second session of 16 overruns.
    r.h.arrive(&frames((0..16).map(|_| 64)));
    r.h.arrive(&frames((0..16).map(|_| 64)));
    let c = r.h.dev.counters();
    assert_eq!(c.cq_overruns, 1);
    assert_eq!(c.completions_lost, 16);
    assert_eq!(c.cqes, 16);
}

#[test]
fn an_injected_session_patch_lands_on_the_slot_it_names() {
    let r = rig(6, 6, mini_cqe_res_format::HASH);
    r.h.dev.inject(Fault::CorruptSession {
        cqn: r.cq.cqn,
        slot: 8,
        patch: vec![(7, 0)],
    });
    r.h.arrive(&frames((0..10).map(|_| 64)));
    let counts = r.mini_byte_counts(0, 10);
    assert_eq!(counts[8], 0, "second array, first mini-CQE's byte count");
    assert_eq!(counts[9], 106);
}
