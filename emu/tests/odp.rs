//! On-demand paging as Linux 6.12's mlx5_ib and mlx5_core use it: the capabilities
//! `mlx5_ib_internal_fill_odp_caps` (odp.c) and `handle_hca_cap_odp` (main.c) read, ODP memory
//! regions as `alloc_cacheable_mr` takes them from the mkey cache (`set_cache_mkc`: free,
//! `umr_en`, no `pg_access`) and `mlx5r_umr_update_xlt` loads them (the pages mapped with
//! `MLX5_IB_MTT_READ | MLX5_IB_MTT_WRITE`, the rest 0), the page-fault events
//! `mlx5_ib_eq_pf_process` parses from the EQ `mlx5r_odp_create_eq` opens (mask
//! `1 << MLX5_EVENT_TYPE_PAGE_FAULT`), and PAGE_FAULT_RESUME as `mlx5_ib_page_fault_resume`
//! sends it.

mod odp_kit;

use cxdirect_emu::testkit::Host;
use odp_kit::*;

#[test]
fn caps_read_as_mlx5_ib_fill_odp_caps_and_handle_hca_cap_odp_read_them() {
    let mut p = odp_pair(false);
    let general = p.a.query_cap(cap_type::GENERAL_DEVICE, true);
    let g = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    assert!(g.pg(), "pg: mlx5_ib_internal_fill_odp_caps goes on");
    // mlx5r_umr_can_load_pas(dev, 0): UMR may load translations.
    assert!(!g.umr_modify_entity_size_disabled() && g.umr_extended_translation_offset());
    // IB_ODP_SUPPORT_IMPLICIT needs fixed_buffer_size and null_mkey (KSM keys over a null
    // key): reported (emu/tests/odp_implicit.rs).
    assert!(g.fixed_buffer_size() && g.null_mkey());
    for current in [false, true] {
        let page = p.a.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        assert!(odp.rc_send() && odp.rc_receive() && odp.rc_write());
        // IB_ODP_SUPPORT_READ, _ATOMIC and _SRQ_RECV in rc_odp_caps.
        assert!(odp.rc_read() && odp.rc_atomic() && odp.rc_srq_receive());
        // IB_ODP_SUPPORT_SEND and _SRQ_RECV in ud_odp_caps (emu/tests/odp_ud.rs,
        // odp_ud_srq.rs).
        assert!(odp.ud_send() && odp.ud_srq_receive());
        // The XRC transport's caps (emu/tests/odp_xrc.rs).
        assert!(odp.xrc_send() && odp.xrc_srq_receive());
        // The DC transport's (emu/tests/odp_dc.rs, odp_dc_atomic.rs).
        assert!(odp.dc_send() && odp.dc_srq_receive() && odp.dc_atomic());
        // No transport without a receive ring of its own reports `receive`.
        assert!(!odp.xrc_receive() && !odp.dc_receive());
        assert!(
            !odp.page_prefetch(),
            "ibv_advise_mr prefetch is mlx5_ib's own (UMR)"
        );
        assert!(!odp.mem_page_fault(), "the memory scheme is ConnectX-7's");
    }
}

#[test]
fn handle_hca_cap_odp_raises_rc_srq_receive_before_init_hca() {
    // mlx5_core's handle_hca_cap_odp (`ODP_CAP_SET_MAX`) raises rc_odp_caps.srq_receive (and
    // each other cap it names that the maximum reports): SET_HCA_CAP with the current page
    // and that bit, before INIT_HCA.
    let cfg = cxdirect_emu::EmuConfig {
        roce: true,
        odp: true,
        ..cxdirect_emu::EmuConfig::default()
    };
    let mut h = Host::new(cxdirect_emu::Device::new(cfg), MEM);
    h.start_cmdif();
    h.simple(Opcode::EnableHca, 0).expect("ENABLE_HCA");
    let boot = h.query_pages(cxdirect_hw::hca::query_pages_op_mod::BOOT);
    h.give_pages(boot as usize).expect("boot pages");
    let current = h.query_cap(cap_type::ODP, true);
    let mut set = Host::input(
        Opcode::SetHcaCap,
        cxdirect_hw::hca::set_cap_op_mod(cap_type::ODP),
        0x1010,
    );
    set[0x10..0x110].copy_from_slice(&current[0x10..0x110]);
    OdpCap::new(&mut set[0x10..0x110])
        .expect("layout")
        .set_rc_srq_receive(true);
    h.exec(&set, 16)
        .expect("SET_HCA_CAP ODP as handle_hca_cap_odp sends it");
    OdpCap::new(&mut set[0x10..0x110])
        .expect("layout")
        .set_ud_srq_receive(true)
        .set_dc_atomic(true);
    h.exec(&set, 16)
        .expect("ud_srq_receive and dc_atomic, raised by handle_hca_cap_odp");
    // A cap beyond the maximum is refused.
    OdpCap::new(&mut set[0x10..0x110])
        .expect("layout")
        .set_dc_receive(true);
    assert!(h.exec(&set, 16).is_err(), "dc_receive is not reported");
}

#[test]
fn a_responder_write_fault_is_reported_rnr_naked_and_lands_after_umr_and_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7f00_0000_0000u64;
    // Page 0 mapped by the snapshot at registration, page 1 not yet.
    let mut mr = OdpMr::new(&mut p.b, 2, iova, &[true, false]);
    let lkey_a = p.a.create_mkey(false, true);
    let len = 8192usize;
    let data = pattern(len, 7);
    let src = p.a.alloc(len as u64, 4096);
    p.a.write(src, &data);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, mr.key),
        (src, lkey_a),
        len as u32,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the WRITE waits");
    assert!(
        p.b.dev.counters().roce_rnr_naks_sent >= 1,
        "answered by an RNR NAK"
    );
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    let (sub, data_bytes) = &faults[0];
    assert_eq!(*sub, pfault_subtype::RDMA);
    let e = EqePageFaultRdma::new(&data_bytes[..]).expect("layout");
    // mlx5_ib_eq_pf_process: type = pftype_token >> 24, token = its low 24 bits (the QP).
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!(e.token(), p.qp_b.qpn);
    assert_eq!(e.r_key(), mr.key);
    assert_eq!((e.rdma_va(), e.rdma_op_len()), (iova, len as u32));
    assert_eq!(e.bytes_committed(), 4096, "the first page's packets landed");
    assert_eq!(
        e.packet_length(),
        1024,
        "the faulting packet at the path MTU"
    );
    // mlx5_ib_mr_rdma_pfault_handler: pagefault_single_data_segment maps the pages (UMR),
    // then resumes with the event's type and token (the QP as the work queue too).
    mr.update_xlt(&mut p.b, &[true, true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    assert!(
        resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).is_err(),
        "a fault is resumed once"
    );
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1, "the retransmitted WRITE completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(mr.read(&p.b, len), data, "the whole WRITE landed");
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn a_receive_fault_is_reported_with_the_receive_wqe_and_the_send_lands_after_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7f10_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.post_rc_recv(&mut p.qp_b, iova, 4096, mr.key);
    let lkey_a = p.a.create_mkey(false, true);
    let data = pattern(3000, 11);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &data);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 3000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing received yet");
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the SEND waits");
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    // mlx5_ib_mr_wqe_pfault_handler reads the receive WQE at wqe_index of the QP's RQ
    // (odp_get_rsc: MLX5_WQE_PF_TYPE_RESP names a QP).
    assert_eq!(e.pf_type(), wqe_pf_type::RESP);
    assert_eq!((e.wq_num(), e.token()), (p.qp_b.qpn, p.qp_b.qpn));
    assert_eq!(e.wqe_index(), 0);
    assert_eq!(e.bytes_committed(), 0);
    mr.update_xlt(&mut p.b, &[true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let got = completions_after_rnr(&mut p, false);
    assert_eq!(got.len(), 1, "the SEND was received");
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(mr.read(&p.b, 3000), data);
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
}

#[test]
fn a_requester_gather_fault_stops_the_send_queue_until_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7f20_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let data = pattern(2000, 5);
    p.a.write(mr.pages[0], &data);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 2000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.b, &mut p.cq_b).is_empty(), "nothing was sent");
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "the SEND waits at its WQE"
    );
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    // MLX5_PFAULT_REQUESTOR is bit 0 of the type: mlx5_ib reads the WQE from the SQ
    // (mlx5_ib_read_user_wqe_sq) and parses it (mlx5_ib_mr_initiator_pfault_handler).
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_SEND_OR_WRITE);
    assert_ne!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (p.qp_a.qpn, p.qp_a.qpn, 0)
    );
    mr.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the SEND completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(p.b.read(dst, 2000), data);
}

#[test]
fn a_fault_resumed_with_an_error_fails_the_queue() {
    // Responder: the WRITE's retransmission is refused; the requester completes with a
    // remote access error.
    let mut p = odp_pair(true);
    let iova = 0x7f30_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, mr.key),
        (src, lkey_a),
        512,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultRdma::new(&faults[0].1[..]).expect("layout");
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );

    // Requester: the faulting WQE completes with a local protection error.
    let mut p = odp_pair(true);
    let mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (iova, mr.key), 100);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.a);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_LOCAL_PROT)
    );
}

#[test]
fn without_a_page_fault_eq_a_page_not_present_is_an_access_error() {
    let mut p = odp_pair(false);
    let iova = 0x7f40_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(
        &p.qp_a.sq,
        opcode::RDMA_WRITE,
        (iova, mr.key),
        (src, lkey_a),
        512,
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert!(page_faults(&mut p.b).is_empty(), "no EQ takes page faults");
    assert!(
        resume(
            &mut p.b,
            pfault_flags::RDMA | pfault_flags::WRITE,
            p.qp_b.qpn,
            p.qp_b.qpn,
            false
        )
        .is_err(),
        "nothing to resume"
    );
}

#[test]
fn with_pg_a_key_created_with_its_list_and_without_pg_access_keeps_bare_addresses() {
    // cxdirect's driver (and `reg_create` on a device without `pg`) lists bare page addresses
    // without `pg_access` or `umr_en`: the entries are addresses, not present bits.
    let mut p = odp_pair(true);
    let page = p.b.alloc(4096, 4096);
    let iova = 0x7f50_0000_0000u64;
    let variant = 0x21;
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110 + 16);
    {
        let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
        cmd.set_mtt(0, page).expect("room");
        cmd.set_translations_octword_actual_size(1);
        cmd.set_pg_access(false);
        let mut mkc = cmd.memory_key_mkey_entry_mut();
        mkc.set_lr(true)
            .set_lw(true)
            .set_pd(p.b.pd)
            .set_qpn(0xff_ffff)
            .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
            .set_start_addr(iova)
            .set_len(4096)
            .set_translations_octword_size(1)
            .set_log_page_size(12)
            .set_mkey_7_0(variant);
    }
    let out = p.b.exec(&input, 16).expect("CREATE_MKEY with a bare list");
    let key = mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        variant,
    );
    p.b.post_rc_recv(&mut p.qp_b, iova, 4096, key);
    let lkey_a = p.a.create_mkey(false, true);
    let data = pattern(1000, 3);
    let src = p.a.alloc(4096, 4096);
    p.a.write(src, &data);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 1000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(p.b.read(page, 1000), data);
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn a_receive_fault_resumed_with_an_error_fails_the_receive_and_the_send() {
    let mut p = odp_pair(true);
    let iova = 0x7f60_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.post_rc_recv(&mut p.qp_b, iova, 4096, mr.key);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(4096, 4096);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 200);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    assert_eq!(faults.len(), 1);
    let e = EqePageFaultWqe::new(&faults[0].1[..]).expect("layout");
    assert_eq!(e.pf_type(), wqe_pf_type::RESP);
    resume(&mut p.b, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ_ERR, "the SEND was refused");
    let got = drain(&p.b, &mut p.cq_b);
    assert_eq!(got.len(), 1, "the receive completed in error");
    assert_eq!(
        got[0][0x37], SYND_LOCAL_PROT,
        "local protection on the receive"
    );
}
