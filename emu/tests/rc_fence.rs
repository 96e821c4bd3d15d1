//! Fences on an RC send queue: a WQE whose control segment asks for a fence waits until every
//! READ and atomic posted before it has its response, so it sees what they brought back.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_A, MAC_A};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Cq, Host};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cqe::Cqe64;
use cxdirect_hw::wqe::{fence_mode, opcode, CtrlSeg};

const MEM: usize = 4 << 20;
const LEN: usize = 2000;

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// READs B's `source` into A's `local`, then WRITEs `local` to B's `sink` with fence mode `fm`;
/// returns what landed in `sink` and the WQE counters of A's completions, in order.
fn read_then_write(fm: u8) -> (Vec<u8>, Vec<u16>) {
    let mut p = RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        4,
        4,
        RcPath {
            log_sra_max: 2,
            ..RcPath::to(GID_A, MAC_A, 0)
        },
    );
    let lkey = p.a.create_mkey(false, true);
    let local = p.a.alloc(4096, 64);
    let (source, sink) = (p.b.alloc(4096, 64), p.b.alloc(4096, 64));
    p.b.write(source, &pattern(LEN, 7));
    p.b.write(sink, &[0xee; LEN]);
    let pd_b = p.b.pd;
    let rights = RemoteRights {
        read: true,
        write: true,
        ..Default::default()
    };
    let rkey =
        p.b.create_remote_mkey(pd_b, source.min(sink), 8192, rights, 0x31);
    let read = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        0,
        Some((source, rkey)),
        None,
        (local, lkey, LEN as u32),
    );
    p.a.write_wqe(&mut p.qp_a.sq, &read);
    let mut write = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        0,
        Some((sink, rkey)),
        None,
        (local, lkey, LEN as u32),
    );
    CtrlSeg::new(&mut write[..16]).expect("layout").set_fm(fm);
    p.a.write_wqe(&mut p.qp_a.sq, &write);
    p.a.ring(&mut p.qp_a.sq, &write, false);
    p.settle();
    let counters = drain(&p.a, &mut p.cq_a)
        .iter()
        .map(|c| Cqe64::new(&c[..]).expect("layout").wqe_counter())
        .collect();
    let landed = p.b.read(sink, LEN);
    p.teardown();
    (landed, counters)
}

#[test]
fn a_fenced_write_waits_for_the_read_before_it_and_sends_what_it_brought() {
    for fm in [
        fence_mode::FENCE,
        fence_mode::STRONG_ORDERING,
        fence_mode::SMALL_AND_FENCE,
    ] {
        let (landed, counters) = read_then_write(fm);
        assert_eq!(
            landed,
            pattern(LEN, 7),
            "fence mode {fm}: the READ's bytes sent on"
        );
        assert_eq!(counters, [0, 1], "fence mode {fm}: both complete, in order");
    }
}

#[test]
fn an_unfenced_write_goes_at_once_with_the_bytes_before_the_read() {
    // Without a fence the WRITE gathers its buffer as soon as it is executed, while the READ's
    // response is still on the wire: what it sends is what the buffer held before (zeros).
    let (landed, counters) = read_then_write(fence_mode::NONE);
    assert_eq!(landed, vec![0; LEN]);
    assert_eq!(counters, [0, 1]);
}
