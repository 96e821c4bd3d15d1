//! Reserved QP numbers on the model: the second general capability page (HCA_CAP_2) and the
//! RESERVED_QPN general object (type 0x2c), driven by hand-built commands as rdma-core's
//! libmlx5 and Linux 6.12 send them: `get_hca_general_caps` / `get_hca_general_caps_2`
//! (providers/mlx5/verbs.c) read `general_obj_types`, `hca_cap_2` and
//! `log_reserved_qpn_granularity`; `reserved_qpn_blk_alloc` (providers/mlx5/mlx5.c) creates a
//! block through DEVX and takes `obj_id` as its first QP number; mlx5_ib's
//! `devx_obj_build_destroy_cmd` destroys it; mlx5_core's `handle_hca_cap_2` and
//! `mlx5_query_hca_caps` query the page at probe. rdma-core's `test_reservered_qpn`
//! (tests/test_mlx5_rdmacm.py) allocates 1000 numbers one by one.

use cxdirect_emu::testkit::rc::{lone_host, GID_A, MAC_A};
use cxdirect_emu::testkit::{refused, CmdFail, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::caps::{CmdHcaCap, CmdHcaCap2};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::general_obj::{obj_type, GeneralObjInCmdHdr, GeneralObjOutCmdHdr};
use cxdirect_hw::hca::{cap_type, query_cap_op_mod};
use std::collections::HashSet;

const MEM: usize = 4 << 20;

fn host() -> Host {
    lone_host(EmuConfig::default(), MEM, GID_A, MAC_A).0
}

/// HCA_CAP_2 as libmlx5's `get_hca_general_caps_2` reads it (current, 0x1010-byte output).
fn cap2(h: &mut Host) -> Vec<u8> {
    h.query_cap(cap_type::GENERAL_DEVICE_2, true)[0x10..0x110].to_vec()
}

/// CREATE_GENERAL_OBJECT as `reserved_qpn_blk_alloc` sends it: `create_reserved_qpn_in`
/// (0x20 bytes: the header and an empty body), a 0x10-byte `general_obj_out_cmd_hdr`.
fn create(h: &mut Host, uid: u16, ty: u16, log: u8) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateGeneralObject, 0, 0x20);
    GeneralObjInCmdHdr::new(&mut input[..])
        .expect("layout")
        .set_obj_type(ty)
        .set_log_obj_range(log);
    let out = h.exec_as(uid, &input, 0x10)?;
    Ok(GeneralObjOutCmdHdr::new(&out[..]).expect("layout").obj_id())
}

/// DESTROY_GENERAL_OBJECT as mlx5_ib's `devx_obj_build_destroy_cmd` builds it: the header
/// alone, the creating type, the object's number and the context's uid.
fn destroy(h: &mut Host, uid: u16, ty: u16, id: u32) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::DestroyGeneralObject, 0, 0x10);
    GeneralObjInCmdHdr::new(&mut input[..])
        .expect("layout")
        .set_obj_type(ty)
        .set_obj_id(id);
    h.exec_as(uid, &input, 0x10)
}

fn granularity(h: &mut Host) -> u8 {
    CmdHcaCap2::new(&cap2(h)[..])
        .expect("layout")
        .log_reserved_qpn_granularity()
}

/// libmlx5 offers `mlx5dv_reserved_qpn_alloc` only with the RESERVED_QPN bit of
/// `general_obj_types`, and reads the granularity only when `hca_cap_2` is set. The other
/// bits are the scheduling elements' (`emu/tests/scheduling_elements.rs`), SW ICM's
/// (`emu/tests/sw_icm.rs`), flow samplers' (`emu/tests/flow_sampler.rs`), flow meters'
/// (`emu/tests/flow_meter.rs`), match definers' (`emu/tests/match_definer.rs`) and AV-to-QP
/// mappings' (`emu/tests/av_qp_mapping.rs`).
#[test]
fn general_caps_offer_hca_cap_2_and_the_reserved_qpn_and_scheduling_object_types() {
    let mut h = host();
    let page = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&page[0x10..]).expect("layout");
    assert!(general.hca_cap_2());
    assert_eq!(
        general.general_obj_types(),
        (1u64 << 0x2c)
            | (1u64 << 0x26)
            | (1u64 << 0x8)
            | (1u64 << 0x20)
            | (1u64 << 0xa)
            | (1u64 << 0x18)
            | (1u64 << 0x3a)
    );
    let page = h.query_cap(cap_type::GENERAL_DEVICE, false);
    assert!(CmdHcaCap::new(&page[0x10..]).expect("layout").hca_cap_2());
    h.teardown();
}

/// The page answers the op_mods Linux and libmlx5 send (0x40 maximum, 0x41 current) and
/// rdma-core's pyverbs output of 0x810 bytes (`QueryCmdHcaCap2Out`); besides the reserved QP
/// number limits and the doorbell-less QPs (`emu/tests/dbr_less.rs`) every field is 0, as
/// Linux read it before the page was offered (`sw_vhca_id_valid` 0: `handle_hca_cap_2` sends
/// no SET_HCA_CAP).
#[test]
fn hca_cap_2_reports_reserved_qpn_limits_and_dbr_less_qps_and_nothing_else() {
    let mut h = host();
    let current = cap2(&mut h);
    let max = h.query_cap(cap_type::GENERAL_DEVICE_2, false)[0x10..0x110].to_vec();
    assert_eq!(current, max);
    let c = CmdHcaCap2::new(&current[..]).expect("layout");
    assert!(c.log_reserved_qpn_granularity() <= c.log_reserved_qpn_max_alloc());
    assert!(c.log_reserved_qpn_max_alloc() <= c.log_max_num_reserved_qpn());
    assert!(
        c.log_max_num_reserved_qpn() >= 10,
        "room for the 1000 of test_reservered_qpn"
    );
    assert!(!c.sw_vhca_id_valid());
    let mut rest = CmdHcaCap2::new(current.clone()).expect("layout");
    rest.set_log_max_num_reserved_qpn(0)
        .set_log_reserved_qpn_granularity(0)
        .set_log_reserved_qpn_max_alloc(0)
        .set_send_dbr_mode_no_dbr_ext(false)
        .set_log_max_send_dbr_less_qp_sq(0);
    assert!(rest.as_bytes().iter().all(|&b| b == 0));
    let op_mod = query_cap_op_mod(cap_type::GENERAL_DEVICE_2, true);
    let out = h
        .exec(&Host::input(Opcode::QueryHcaCap, op_mod, 0x10), 0x810)
        .expect("QUERY_HCA_CAP into pyverbs' 0x810 bytes");
    assert_eq!(&out[0x10..0x110], &current[..]);
    h.teardown();
}

/// `test_reservered_qpn`: 1000 numbers, one block each at the granularity of one, all
/// distinct 24-bit QP numbers; none is a QP's, and QPs created while they live take none.
#[test]
fn a_thousand_reserved_qpns_are_distinct_and_never_a_qps_number() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("CREATE_UCTX");
    let log = granularity(&mut h);
    let cq = h.create_cq(6);
    let before = h.create_rc_qp(&cq, 4, 4, None).qpn;
    let mut firsts = Vec::new();
    let mut numbers = HashSet::new();
    for _ in 0..1000 {
        let first = create(&mut h, uid, obj_type::RESERVED_QPN, log).expect("CREATE");
        assert!(first < 1 << 24, "obj_id is a QP number");
        assert_eq!(first % (1 << log), 0, "aligned to the block");
        for n in first..first + (1 << log) {
            assert!(numbers.insert(n), "QP number {n:#x} reserved twice");
        }
        firsts.push(first);
    }
    assert!(!numbers.contains(&before));
    for _ in 0..8 {
        let qpn = h.create_rc_qp(&cq, 4, 4, None).qpn;
        assert!(
            !numbers.contains(&qpn),
            "QP {qpn:#x} took a reserved number"
        );
    }
    for first in firsts {
        destroy(&mut h, uid, obj_type::RESERVED_QPN, first).expect("DESTROY");
    }
    h.teardown();
}

/// A block of `2^log` numbers starts at a multiple of its size; `log_obj_range` outside the
/// page's granularity and maximum is refused.
#[test]
fn log_obj_range_is_held_to_the_page_and_blocks_are_aligned() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("CREATE_UCTX");
    let c = cap2(&mut h);
    let c = CmdHcaCap2::new(&c[..]).expect("layout");
    let (min, max) = (
        c.log_reserved_qpn_granularity(),
        c.log_reserved_qpn_max_alloc(),
    );
    let one = create(&mut h, uid, obj_type::RESERVED_QPN, min).expect("CREATE");
    let big = create(&mut h, uid, obj_type::RESERVED_QPN, 4.max(min)).expect("CREATE");
    assert_eq!(big % 16, 0);
    assert!(big + 16 <= one || big >= one + (1 << min), "blocks overlap");
    let top = create(&mut h, uid, obj_type::RESERVED_QPN, max).expect("CREATE at the max");
    assert_eq!(top % (1 << max), 0);
    refused(
        create(&mut h, uid, obj_type::RESERVED_QPN, max + 1),
        CmdStatus::BadParameter,
        Syndrome::BadObjRange,
    );
    if min > 0 {
        refused(
            create(&mut h, uid, obj_type::RESERVED_QPN, min - 1),
            CmdStatus::BadParameter,
            Syndrome::BadObjRange,
        );
    }
    h.teardown();
}

/// DESTROY gives the block back once: a second DESTROY, or one naming a number that is not a
/// block's first, is refused (libmlx5 asserts its DESTROY succeeds).
#[test]
fn destroy_returns_the_block_once() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("CREATE_UCTX");
    let log = granularity(&mut h);
    let first = create(&mut h, uid, obj_type::RESERVED_QPN, log).expect("CREATE");
    refused(
        destroy(&mut h, uid, obj_type::RESERVED_QPN, first + (1 << log)),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    destroy(&mut h, uid, obj_type::RESERVED_QPN, first).expect("DESTROY");
    refused(
        destroy(&mut h, uid, obj_type::RESERVED_QPN, first),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    h.teardown();
}

/// A block belongs to the user context that created it: another context may neither query
/// nor destroy it; the function's own uid (0) may.
#[test]
fn a_block_belongs_to_its_user_context() {
    let mut h = host();
    let owner = h.create_uctx(0).expect("CREATE_UCTX");
    let other = h.create_uctx(0).expect("CREATE_UCTX");
    let log = granularity(&mut h);
    let first = create(&mut h, owner, obj_type::RESERVED_QPN, log).expect("CREATE");
    refused(
        destroy(&mut h, other, obj_type::RESERVED_QPN, first),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    let mut query = Host::input(Opcode::QueryGeneralObject, 0, 0x10);
    GeneralObjInCmdHdr::new(&mut query[..])
        .expect("layout")
        .set_obj_type(obj_type::RESERVED_QPN)
        .set_obj_id(first);
    refused(
        h.exec_as(other, &query, 0x20),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    let out = h
        .exec_as(owner, &query, 0x20)
        .expect("QUERY_GENERAL_OBJECT");
    assert_eq!(
        GeneralObjOutCmdHdr::new(&out[..]).expect("layout").obj_id(),
        first
    );
    destroy(&mut h, 0, obj_type::RESERVED_QPN, first).expect("uid 0 destroys any block");
    h.teardown();
}

/// Object types outside `general_obj_types` are refused at every general object command,
/// and a RESERVED_QPN object has nothing to modify.
#[test]
fn other_object_types_are_refused() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("CREATE_UCTX");
    // AV_QP_MAPPING (0x2d, rdma-core's test_dc_ah_to_qp_mapping), an ASO flow meter (0x24),
    // and a type past the 64-bit mask (MKEY's 0xff01).
    for ty in [0x2d, 0x24, 0xff01] {
        refused(
            create(&mut h, uid, ty, 0),
            CmdStatus::BadParameter,
            Syndrome::UnknownObjType,
        );
        refused(
            destroy(&mut h, uid, ty, 1),
            CmdStatus::BadParameter,
            Syndrome::UnknownObjType,
        );
    }
    let log = granularity(&mut h);
    let first = create(&mut h, uid, obj_type::RESERVED_QPN, log).expect("CREATE");
    let mut modify = Host::input(Opcode::ModifyGeneralObject, 0, 0x20);
    GeneralObjInCmdHdr::new(&mut modify[..])
        .expect("layout")
        .set_obj_type(obj_type::RESERVED_QPN)
        .set_obj_id(first);
    refused(
        h.exec_as(uid, &modify, 0x10),
        CmdStatus::BadParameter,
        Syndrome::UnknownObjType,
    );
    h.teardown();
}

/// mlx5_core's probe order: `handle_hca_cap_2` queries the page (maximum, then current)
/// after the general SET_HCA_CAP and before INIT_HCA; with `sw_vhca_id_valid` 0 it sends no
/// SET_HCA_CAP of it, and one that changes nothing is accepted while a change is refused.
#[test]
fn hca_cap_2_is_answered_before_init_hca_as_handle_hca_cap_2_reads_it() {
    use cxdirect_hw::hca::{query_pages_op_mod, set_cap_op_mod, SetIssiIn};
    let mut h = Host::new(cxdirect_emu::Device::loopback(EmuConfig::default()), MEM);
    h.start_cmdif();
    h.simple(Opcode::EnableHca, 0).expect("ENABLE_HCA");
    let mut set_issi = Host::input(Opcode::SetIssi, 0, 16);
    SetIssiIn::new(&mut set_issi[..])
        .expect("layout")
        .set_current_issi(1);
    h.exec(&set_issi, 16).expect("SET_ISSI");
    let boot = h.query_pages(query_pages_op_mod::BOOT);
    h.give_pages(boot as usize).expect("boot pages");
    let general = h.query_cap(cap_type::GENERAL_DEVICE, false);
    assert!(CmdHcaCap::new(&general[0x10..])
        .expect("layout")
        .hca_cap_2());
    let max = h.query_cap(cap_type::GENERAL_DEVICE_2, false);
    let current = h.query_cap(cap_type::GENERAL_DEVICE_2, true);
    assert!(!CmdHcaCap2::new(&max[0x10..0x110])
        .expect("layout")
        .sw_vhca_id_valid());
    let mut set = Host::input(
        Opcode::SetHcaCap,
        set_cap_op_mod(cap_type::GENERAL_DEVICE_2),
        0x1010,
    );
    set[0x10..0x110].copy_from_slice(&current[0x10..0x110]);
    h.exec(&set, 16).expect("SET_HCA_CAP of the page unchanged");
    CmdHcaCap2::new(&mut set[0x10..0x110])
        .expect("layout")
        .set_sw_vhca_id_valid(true);
    refused(
        h.exec(&set, 16),
        CmdStatus::BadParameter,
        Syndrome::CapReadOnly,
    );
    let init = h.query_pages(query_pages_op_mod::INIT);
    h.give_pages(init as usize).expect("init pages");
    h.simple(Opcode::InitHca, 0).expect("INIT_HCA");
    assert_eq!(h.query_cap(cap_type::GENERAL_DEVICE_2, true), current);
}
