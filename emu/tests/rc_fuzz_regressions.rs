//! What the RC fuzz targets (`roce_responder`, `rc_send_wqe`) found, each kept as a test.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, GID_A, MAC_A};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::wire::PortId;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::wqe::{opcode, CtrlSeg};

const MEM: usize = 4 << 20;

/// The process's peak resident memory so far (`VmHWM`), in KiB.
fn peak_resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

fn pair() -> RcPair {
    RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        4,
        4,
        RcPath {
            // Several READs and atomics outstanding, so a later WQE can fail behind one.
            log_sra_max: 2,
            ..RcPath::to(GID_A, MAC_A, 0)
        },
    )
}

fn drain(h: &cxdirect_emu::testkit::Host, cq: &mut cxdirect_emu::testkit::Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// A WQE whose `ds` claims 15 WQEBBs with only one posted used to run: its message went out
/// with WQEBBs the driver never wrote, and the requester's consumer index jumped past the
/// producer index, so it went on to execute whatever lay in the ring beyond. It now fails as
/// malformed, nothing is sent, and what follows is flushed.
#[test]
fn a_wqe_whose_ds_runs_past_the_producer_index_fails_without_sending() {
    let mut p = pair();
    let lkey = p.a.create_mkey(false, false);
    let src = p.a.alloc(4096, 64);
    let buf = p.b.alloc(4096, 64);
    let recv_lkey = p.b.create_mkey(false, true);
    p.b.post_rc_recv(&mut p.qp_b, buf, 4096, recv_lkey);
    let mut w = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey, 64));
    CtrlSeg::new(&mut w[..16]).expect("layout").set_ds(58);
    // A valid SEND in a slot the long WQE covers, never posted: it must not run either.
    let mut stray = p.qp_a.sq.pi;
    stray = stray.wrapping_add(5);
    let mut hidden = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey, 64));
    CtrlSeg::new(&mut hidden[..16])
        .expect("layout")
        .set_wqe_index(stray)
        .set_ds(2);
    p.a.write(p.qp_a.sq.buf + u64::from(stray) * 64, &hidden);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let cqes = drain(&p.a, &mut p.cq_a);
    assert_eq!(cqes.len(), 1, "one completion: {cqes:02x?}");
    let view = Cqe64::new(&cqes[0][..]).expect("layout");
    assert_eq!(view.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(view.wqe_counter(), 0, "the malformed WQE's own index");
    assert_eq!(
        ErrCqe::new(&cqes[0][..]).expect("layout").syndrome(),
        CqeSyndrome::LocalQpOperation as u8
    );
    let sent = p.wire.counters(PortId::A).expect("port A").tx_frames;
    assert_eq!(sent, 0, "nothing went on the wire");
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing received");
    // The QP is in error: the next WQE is flushed.
    let next = rc_wqe(&p.qp_a.sq, opcode::SEND, 0, None, None, (src, lkey, 64));
    p.a.post(&mut p.qp_a.sq, &next, false);
    p.settle();
    let cqes = drain(&p.a, &mut p.cq_a);
    assert_eq!(cqes.len(), 1, "the next WQE flushed: {cqes:02x?}");
    assert_eq!(
        ErrCqe::new(&cqes[0][..]).expect("layout").syndrome(),
        CqeSyndrome::WrFlushed as u8
    );
    assert_eq!(Cqe64::new(&cqes[0][..]).expect("layout").wqe_counter(), 1);
    p.teardown();
}

/// A READ still waiting for its response when a later WQE of the same doorbell turned out
/// malformed: the malformed WQE's error CQE used to come first and the READ's flush after it,
/// out of posting order (a driver retiring WQEs up to each CQE's counter would then see the
/// ring go backwards). Now the READ is flushed first, then the error, each once.
#[test]
fn a_wqe_failing_behind_an_outstanding_read_completes_after_it() {
    let mut p = pair();
    let lkey = p.a.create_mkey(false, true);
    let local = p.a.alloc(4096, 64);
    let remote = p.b.alloc(4096, 64);
    let pd_b = p.b.pd;
    let rights = cxdirect_emu::testkit::rc::RemoteRights {
        read: true,
        ..Default::default()
    };
    let rkey = p.b.create_remote_mkey(pd_b, remote, 4096, rights, 0x21);
    let read = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        0,
        Some((remote, rkey)),
        None,
        (local, lkey, 64),
    );
    p.a.write_wqe(&mut p.qp_a.sq, &read);
    // An atomic needs four 16-byte units; this one claims three.
    let mut atomic = rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_CS,
        0,
        Some((remote, rkey)),
        Some((1, 0)),
        (local, lkey, 8),
    );
    CtrlSeg::new(&mut atomic[..16]).expect("layout").set_ds(3);
    p.a.write_wqe(&mut p.qp_a.sq, &atomic);
    p.a.ring(&mut p.qp_a.sq, &atomic, false);
    p.settle();
    let cqes = drain(&p.a, &mut p.cq_a);
    let seen: Vec<(u16, u8)> = cqes
        .iter()
        .map(|c| {
            let counter = Cqe64::new(&c[..]).expect("layout").wqe_counter();
            (counter, ErrCqe::new(&c[..]).expect("layout").syndrome())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (0, CqeSyndrome::WrFlushed as u8),
            (1, CqeSyndrome::LocalQpOperation as u8)
        ],
        "the READ flushed, then the malformed atomic's error, in posting order"
    );
    p.teardown();
}

/// A data segment claiming 512 MiB through the reserved lkey (which reaches any IOVA) used to
/// have the requester allocate (and zero) the whole claimed length before reading a byte; a hostile
/// driver could make the model allocate up to 2 GiB per WQE. The message now grows as its
/// bytes are read: the read fails at the end of the mapped memory and the WQE completes with a
/// local protection error, having used no more than that memory.
#[test]
fn a_data_segment_claiming_more_than_mapped_memory_allocates_no_more_than_that() {
    let mut p = pair();
    let src = p.a.alloc(4096, 64);
    let claimed = 512u32 << 20;
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::SEND,
        0,
        None,
        None,
        (src, cxdirect_emu::RESERVED_LKEY, claimed),
    );
    let before = peak_resident_kib();
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let grown = peak_resident_kib() - before;
    assert!(
        grown < 64 << 10,
        "peak resident memory grew by {grown} KiB for a segment over {MEM} bytes of memory"
    );
    let cqes = drain(&p.a, &mut p.cq_a);
    assert_eq!(cqes.len(), 1, "{cqes:02x?}");
    assert_eq!(
        ErrCqe::new(&cqes[0][..]).expect("layout").syndrome(),
        CqeSyndrome::LocalProtection as u8
    );
    let sent = p.wire.counters(PortId::A).expect("port A").tx_frames;
    assert_eq!(sent, 0, "nothing went on the wire");
    p.teardown();
}
