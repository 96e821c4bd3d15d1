//! The model's RDMA half read as Linux's mlx5_ib and rdma-core's libmlx5 read it: each test is a
//! divergence Linux's RDMA stack exposed in the rig, sent with the fields Linux uses.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_A, MAC_A, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::{Cq, Host};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::caps::{
    atomic_endianness, atomic_ops, AtomicCaps, CmdHcaCap, ATOMIC_SIZE_QP_8_BYTES,
};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::hca;
use cxdirect_hw::wqe::opcode;

const MEM: usize = 4 << 20;

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// mlx5_ib's `get_atomic_caps` reports `IB_ATOMIC_HCA` (and libibverbs' `atomic_cap`) only when
/// the general page sets `atomic` and the atomic page offers 8-byte compare-and-swap and
/// fetch-and-add on QPs with a host-order requester; without them perftest's `ib_atomic_bw`
/// refuses to run. mlx5_core asks for host order when the device can give it.
#[test]
fn atomics_are_reported_as_mlx5_ib_requires_them_and_host_order_can_be_chosen() {
    // Before INIT_HCA the current order is the device's default, network order.
    let mut lone = Host::new(Device::loopback(EmuConfig::default()), MEM);
    lone.bring_up();
    let general = lone.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&general[0x10..]).unwrap();
    assert!(general.atomic());
    // With atomics, mlx5_ib's UMRs set the key's atomic access (`get_umr_update_access_mask`)
    // and refuse themselves (`umr_check_mkey_mask`, EPERM) where UMR may not change it: every
    // user registration from its mkey cache then failed ("Couldn't register MR").
    assert!(!general.umr_modify_atomic_disabled());
    assert!(!general.umr_modify_entity_size_disabled());
    for current in [false, true] {
        let page = lone.query_cap(hca::cap_type::ATOMIC, current);
        let caps = AtomicCaps::new(&page[0x10..0x110]).unwrap();
        let both = atomic_ops::CMP_SWAP | atomic_ops::FETCH_ADD;
        assert_eq!(caps.atomic_operations() & both, both);
        assert_ne!(caps.atomic_size_qp() & ATOMIC_SIZE_QP_8_BYTES, 0);
        assert!(caps.supported_atomic_req_8b_endianness_mode_1());
        let expected = if current {
            atomic_endianness::BIG_ENDIAN
        } else {
            atomic_endianness::HOST
        };
        assert_eq!(caps.atomic_req_8b_endianness_mode(), expected);
    }
    // mlx5_core's SET_HCA_CAP (a page that is zero but for the order), before INIT_HCA.
    let side = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = Device::pair(side(MAC_A), side(MAC_B));
    let (wire, _) = da.wire().unwrap();
    let (mut a, b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.atomic_host_order = true;
    let mut p = RcPair::on_hosts(a, b, wire, 6, 4, 4, RcPath::to(GID_A, MAC_A, 0));
    let page = p.a.query_cap(hca::cap_type::ATOMIC, true);
    assert_eq!(
        AtomicCaps::new(&page[0x10..0x110])
            .unwrap()
            .atomic_req_8b_endianness_mode(),
        atomic_endianness::HOST
    );

    // A fetch-and-add from A now lands its original value in A's memory in host order, while
    // B's target (written by the responder) stays big-endian as the value travels.
    let lkey = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rights = RemoteRights {
        atomic: true,
        ..Default::default()
    };
    let target = p.b.alloc(64, 64);
    let rkey = p.b.create_remote_mkey(pd_b, target, 64, rights, 0x21);
    p.b.write(target, &0x0102_0304_0506_0708u64.to_be_bytes());
    let result = p.a.alloc(64, 64);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_FA,
        0,
        Some((target, rkey)),
        Some((1, 0)),
        (result, lkey, 8),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
    assert_eq!(
        p.a.read(result, 8),
        0x0102_0304_0506_0708u64.to_le_bytes(),
        "original value in host order"
    );
    assert_eq!(p.b.read(target, 8), 0x0102_0304_0506_0709u64.to_be_bytes());

    p.teardown();
}

/// QUERY_VPORT_COUNTER of `h`.
fn vport_counters(h: &mut Host) -> Vec<u8> {
    use cxdirect_hw::vport::{QueryVportCounterIn, QueryVportCounterOut};
    let input = Host::input(
        Opcode::QueryVportCounter,
        0,
        QueryVportCounterIn::<&[u8]>::SIZE,
    );
    h.exec(&input, QueryVportCounterOut::<&[u8]>::SIZE)
        .expect("QUERY_VPORT_COUNTER")
}

/// mlx5_ib answers the RDMA core's port counters (`port_xmit_data`, `port_rcv_packets`, what
/// `rdma statistic` and sysfs `ports/1/counters` show) from QUERY_VPORT_COUNTER's
/// `*_ib_unicast` and `*_ib_multicast` counters; a ConnectX counts RoCE there and leaves it out
/// of the Ethernet casts mlx5e reports. An RDMA WRITE of 3000 bytes at a 1024-byte MTU is three
/// packets one way and one ACK back.
#[test]
fn roce_traffic_is_counted_in_the_vports_rdma_counters_not_its_ethernet_ones() {
    use cxdirect_hw::vport::QueryVportCounterOut;
    let mut p = RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        4,
        4,
        RcPath::to(GID_A, MAC_A, 0),
    );
    let lkey = p.a.create_mkey(false, true);
    let pd_b = p.b.pd;
    let rights = RemoteRights {
        write: true,
        ..Default::default()
    };
    let sink = p.b.alloc(4096, 64);
    let rkey = p.b.create_remote_mkey(pd_b, sink, 4096, rights, 0x44);
    let source = p.a.alloc(4096, 64);
    p.a.write(source, &[0x5a; 3000]);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        0,
        Some((sink, rkey)),
        None,
        (source, lkey, 3000),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert_eq!(drain(&p.a, &mut p.cq_a).len(), 1);
    assert_eq!(p.b.read(sink, 3000), vec![0x5a; 3000]);
    let (out_a, out_b) = (vport_counters(&mut p.a), vport_counters(&mut p.b));
    let (a, b) = (
        QueryVportCounterOut::new(&out_a[..]).unwrap(),
        QueryVportCounterOut::new(&out_b[..]).unwrap(),
    );
    let sent = a.transmitted_ib_unicast();
    let got = b.received_ib_unicast();
    assert_eq!(sent.packets(), 3, "three WRITE packets");
    assert_eq!(got.packets(), 3);
    assert_eq!(sent.octets(), got.octets());
    // The payload and, per packet, Ethernet, IPv4, UDP, BTH and ICRC (RETH on the first).
    assert_eq!(sent.octets(), 3000 + 3 * (14 + 20 + 8 + 12 + 4) + 16);
    assert_eq!(b.transmitted_ib_unicast().packets(), 1, "one ACK");
    assert_eq!(a.received_ib_unicast().packets(), 1);
    for c in [
        a.transmitted_eth_unicast(),
        a.received_eth_unicast(),
        b.transmitted_eth_unicast(),
        b.received_eth_unicast(),
    ] {
        assert_eq!(c.packets(), 0, "no RoCE frame in the Ethernet counters");
    }
    p.teardown();
}

/// With `cqe_version` 1 every CQE of a QP carries the QP's `user_index` in `srqn_uidx`:
/// libmlx5 (`get_resp_ctx_v1`, `get_req_ctx_v1`) finds the QP by it, and a receive through an
/// SRQ through the QP. `ibv_srq_pingpong` failed with "poll CQ failed -2" when the receive CQE
/// carried the RMP number there instead.
#[test]
fn every_cqe_of_a_qp_carries_its_user_index_receives_through_an_srq_too() {
    use cxdirect_hw::cqe::Cqe64;
    use cxdirect_hw::qp::{QueryQpIn, QueryQpOut};
    use cxdirect_hw::wq::WqType;
    // A linked-list RMP, as mlx5_ib creates libmlx5's SRQs.
    let ring = std::cell::Cell::new(None);
    let mut p = RcPair::with_rmp_b(
        EmuConfig::default(),
        MEM,
        6,
        4,
        4,
        RcPath::to(GID_A, MAC_A, 0),
        |b| {
            let (rmpn, rmp) = b.create_rmp_of(WqType::LinkedList, 2, 5, 0);
            ring.set(Some(rmp));
            Some(rmpn)
        },
    );
    let rmp = ring.take().expect("made");
    let user_index = |h: &mut Host, qpn: u32| {
        let mut input = Host::input(Opcode::QueryQp, 0, QueryQpIn::<&[u8]>::SIZE);
        QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qpn);
        let out = h.exec(&input, QueryQpOut::<&[u8]>::SIZE).expect("QUERY_QP");
        QueryQpOut::new(&out[..]).unwrap().qpc().user_index()
    };
    let (uidx_a, uidx_b) = (
        user_index(&mut p.a, p.qp_a.qpn),
        user_index(&mut p.b, p.qp_b.qpn),
    );
    assert_ne!(uidx_a, 0);
    assert_ne!(uidx_b, 0);
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let source = p.a.alloc(4096, 64);
    let sink = p.b.alloc(4096, 64);
    p.b.write_linked_recv(&rmp, 0, 1, sink, 256, lkey_b);
    p.b.write_be32(rmp.dbr, 1);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::SEND,
        0,
        None,
        None,
        (source, lkey_a, 100),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let sent = drain(&p.a, &mut p.cq_a);
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!((sent.len(), got.len()), (1, 1));
    assert_eq!(
        Cqe64::new(&sent[0][..]).unwrap().srqn(),
        uidx_a,
        "requester CQE"
    );
    assert_eq!(
        Cqe64::new(&got[0][..]).unwrap().srqn(),
        uidx_b,
        "responder CQE (SRQ)"
    );
    p.teardown();
}

/// rdma_cm's passive side moves its QP from INIT to INIT to set the access flags, P_Key index
/// and port it accepts with (`cma_modify_qp_init` through `rdma_accept`); mlx5_ib sends that as
/// INIT2INIT_QP with `opt_mask[INIT][INIT][RC]`. rping's server failed `rdma_accept` with EINVAL
/// when the model did not know the command.
#[test]
fn init2init_changes_only_the_attributes_its_mask_names_as_rdma_cm_accept_sends_it() {
    use cxdirect_emu::Syndrome;
    use cxdirect_hw::cmd::CmdStatus;
    use cxdirect_hw::qp::{optpar, state, Init2initQpIn, QueryQpIn, QueryQpOut};
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let cq = h.create_cq(6);
    let qp = h.create_rc_qp(&cq, 4, 4, None);
    let init2init =
        |h: &mut Host, mask: u32, fill: &dyn Fn(&mut cxdirect_hw::qp::Qpc<&mut [u8]>)| {
            let mut input = Host::input(Opcode::Init2initQp, 0, Init2initQpIn::<&[u8]>::SIZE);
            let mut cmd = Init2initQpIn::new(&mut input[..]).unwrap();
            cmd.set_qpn(qp.qpn).set_opt_param_mask(mask);
            fill(&mut cmd.qpc_mut());
            h.exec(&input, 16)
        };
    let query = |h: &mut Host| {
        let mut input = Host::input(Opcode::QueryQp, 0, QueryQpIn::<&[u8]>::SIZE);
        QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qp.qpn);
        h.exec(&input, QueryQpOut::<&[u8]>::SIZE).expect("QUERY_QP")
    };
    // In RST it is refused.
    assert_eq!(
        init2init(&mut h, 0, &|_| {}).map(|_| ()),
        Err(cxdirect_emu::testkit::CmdFail::status(
            CmdStatus::BadQpState,
            Syndrome::BadQpTransition
        ))
    );
    // RST2INIT with no remote access.
    h.modify_qp(Opcode::Rst2initQp, qp.qpn, |c| {
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    // INIT2INIT as rdma_cm's accept: remote read and write on, the port and P_Key index 0.
    init2init(
        &mut h,
        optpar::RRE | optpar::RWE | optpar::RAE | optpar::PKEY_INDEX | optpar::PRI_PORT,
        &|c| {
            c.set_rre(true).set_rwe(true).set_rae(false);
            c.primary_address_path_mut().set_vhca_port_num(1);
        },
    )
    .expect("INIT2INIT_QP");
    let out = query(&mut h);
    let out = QueryQpOut::new(&out[..]).unwrap();
    let ctx = out.qpc();
    assert_eq!(ctx.state(), state::INIT);
    assert!(ctx.rre() && ctx.rwe() && !ctx.rae());
    // Without the mask's bits nothing changes, and a bit outside Linux's table is refused.
    init2init(&mut h, 0, &|c| {
        c.set_rre(false).set_rwe(false);
    })
    .expect("INIT2INIT_QP, empty mask");
    let out = query(&mut h);
    let out = QueryQpOut::new(&out[..]).unwrap();
    let ctx = out.qpc();
    assert!(ctx.rre() && ctx.rwe());
    assert!(init2init(&mut h, optpar::RNR_TIMEOUT, &|_| {}).is_err());
}

/// mlx5_ib binds every QP to its port's Q counter set at RST2INIT (`counter_set_id` without an
/// optional-parameter bit) and leaves the field zero at INIT2RTR; `rdma statistic` then reads
/// the set. The model took INIT2RTR's zero as a new binding, and Linux's counters stayed 0.
#[test]
fn the_counter_set_bound_at_rst2init_stays_through_init2rtr_without_the_bit() {
    use cxdirect_hw::qp::{Qpc, QueryQpIn, QueryQpOut};
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let out = h
        .exec(&Host::input(Opcode::AllocQCounter, 0, 16), 16)
        .expect("ALLOC_Q_COUNTER");
    let set = cxdirect_hw::counters::AllocQCounterOut::new(&out[..])
        .unwrap()
        .counter_set_id();
    h.enable_roce(GID_A, MAC_A);
    let cq = h.create_cq(6);
    let qp = h.create_rc_qp(&cq, 4, 4, None);
    h.modify_qp(Opcode::Rst2initQp, qp.qpn, |c| {
        c.set_counter_set_id(set);
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    h.modify_qp(Opcode::Init2rtrQp, qp.qpn, |c: &mut Qpc<&mut [u8]>| {
        c.set_mtu(cxdirect_hw::qp::mtu::MTU_1024)
            .set_log_msg_max(30)
            .set_remote_qpn(0x42);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_rmac([2, 0, 0, 0, 0, 9])
            .set_rgid(GID_A);
    });
    let mut input = Host::input(Opcode::QueryQp, 0, QueryQpIn::<&[u8]>::SIZE);
    QueryQpIn::new(&mut input[..]).unwrap().set_qpn(qp.qpn);
    let out = h.exec(&input, QueryQpOut::<&[u8]>::SIZE).expect("QUERY_QP");
    let out = QueryQpOut::new(&out[..]).unwrap();
    assert_eq!(out.qpc().counter_set_id(), set);
}

/// Linux drains a QP at every rdma_cm disconnect by moving it to error, posting one more
/// receive and waiting, without a time limit, for its flush completion (`mlx5_ib_drain_rq`).
/// No doorbell announces a receive: the device notices it on its own. nvme-rdma's
/// `nvme disconnect` hung in the kernel when the model never completed that receive.
#[test]
fn a_receive_posted_on_a_qp_in_error_completes_flushed() {
    use cxdirect_hw::cqe::CqeSyndrome;
    use cxdirect_hw::qp::Qp2errIn;
    let mut p = RcPair::new(
        EmuConfig::default(),
        MEM,
        6,
        4,
        4,
        RcPath::to(GID_A, MAC_A, 0),
    );
    let mut input = Host::input(Opcode::Qp2errQp, 0, Qp2errIn::<&[u8]>::SIZE);
    Qp2errIn::new(&mut input[..]).unwrap().set_qpn(p.qp_b.qpn);
    p.b.exec(&input, 16).expect("2ERR_QP");
    p.settle();
    drain(&p.b, &mut p.cq_b);
    let lkey = p.b.create_mkey(false, true);
    let buf = p.b.alloc(4096, 64);
    p.b.post_rc_recv(&mut p.qp_b, buf, 256, lkey);
    p.settle();
    let flushed = drain(&p.b, &mut p.cq_b);
    assert_eq!(flushed.len(), 1, "the drain receive completes");
    assert_eq!(flushed[0][63] >> 4, 14, "responder error CQE");
    assert_eq!(flushed[0][0x37], CqeSyndrome::WrFlushed as u8, "flushed");
    p.teardown();
}
