//! Releasing a UAR page that queues still ring, in the order Linux releases things when an
//! rdma-core process exits: libmlx5 puts its CQs and QPs on UARs it allocates itself
//! (`mlx5_alloc_dyn_uar`, handed to mlx5_ib by page index), mlx5_ib keeps those as UAR objects
//! the queues hold no reference to, and ib_uverbs' `__uverbs_cleanup_ufile` destroys objects
//! and queues in one sweep: `mlx5_cmd_uar_dealloc` may come before the DESTROY_QP and
//! DESTROY_CQ of the queues on that page.

use cxdirect_emu::testkit::rc::{
    lone_host, rc_wqe, take_frames, RcPath, GID_A, GID_B, MAC_A, MAC_B,
};
use cxdirect_emu::testkit::Host;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cq::DestroyCqIn;
use cxdirect_hw::hca::{AllocUarOut, DeallocUarIn};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 8 << 20;

fn alloc_uar(h: &mut Host) -> u32 {
    let out = h.simple(Opcode::AllocUar, 0).expect("ALLOC_UAR");
    AllocUarOut::new(&out[..]).expect("layout").uar()
}

fn dealloc_uar(h: &mut Host, uar: u32) {
    let mut input = Host::input(Opcode::DeallocUar, 0, 0x10);
    DeallocUarIn::new(&mut input[..])
        .expect("layout")
        .set_uar(uar);
    h.exec(&input, 16).expect("DEALLOC_UAR");
}

fn destroy_cq(h: &mut Host, cqn: u32) {
    let mut input = Host::input(Opcode::DestroyCq, 0, 0x10);
    DestroyCqIn::new(&mut input[..])
        .expect("layout")
        .set_cqn(cqn);
    h.exec(&input, 16).expect("DESTROY_CQ");
}

#[test]
fn a_uar_is_released_before_the_queues_on_it_as_at_process_exit() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let own_uar = h.uar;
    // The queues ring a UAR of their own, as libmlx5's do.
    let dyn_uar = alloc_uar(&mut h);
    h.uar = dyn_uar;
    let mut cq = h.create_cq(6);
    let mut qp = h.create_rc_qp(&cq, 4, 4, None);
    h.connect_rc(qp.qpn, &RcPath::to(GID_B, MAC_B, 0x77));
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(4096, 4096);
    let w = rc_wqe(&qp.sq, opcode::SEND, 0, None, None, (src, lkey, 32));
    h.post(&mut qp.sq, &w, false);
    h.dev.poll();
    assert_eq!(
        take_frames(&wire).len(),
        1,
        "the QP sends while its UAR lives"
    );

    // ib_uverbs' sweep: the UAR object first.
    h.uar = own_uar;
    dealloc_uar(&mut h, dyn_uar);

    // A doorbell the process still had in flight lands on the freed page: no doorbell.
    let bad_before = h.dev.counters().bad_doorbells;
    h.uar = dyn_uar;
    let w = rc_wqe(&qp.sq, opcode::SEND, 0, None, None, (src, lkey, 32));
    h.post(&mut qp.sq, &w, false);
    h.uar = own_uar;
    h.dev.poll();
    assert!(
        take_frames(&wire).is_empty(),
        "nothing sent for a freed UAR's doorbell"
    );
    assert_eq!(
        h.dev.counters().bad_doorbells,
        bad_before + 1,
        "the doorbell is counted as a bad one"
    );
    assert!(h.poll_cq(&mut cq).is_none(), "and completes nothing");

    // Then the queues, then the context's own UARs.
    h.destroy_qp(qp.qpn);
    destroy_cq(&mut h, cq.cqn);
    let spare = alloc_uar(&mut h);
    dealloc_uar(&mut h, spare);
    h.teardown();
}

#[test]
fn a_uar_freed_twice_is_refused_the_second_time() {
    let (mut h, _wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let uar = alloc_uar(&mut h);
    dealloc_uar(&mut h, uar);
    let mut input = Host::input(Opcode::DeallocUar, 0, 0x10);
    DeallocUarIn::new(&mut input[..])
        .expect("layout")
        .set_uar(uar);
    h.exec(&input, 16)
        .expect_err("a second DEALLOC_UAR of the same page");
}
