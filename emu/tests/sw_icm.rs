//! Software-owned ICM (SW ICM) on the model, as Linux 6.12 and rdma-core's software steering
//! use it: the device-memory page's SW ICM ranges and `general_obj_types` bit 8 as mlx5_core's
//! `mlx5_dm_create` reads them; CREATE / QUERY / DESTROY_GENERAL_OBJECT of type SW_ICM as
//! mlx5_core's `mlx5_dm_sw_icm_alloc` / `mlx5_dm_sw_icm_dealloc` send them; memory keys of
//! access mode SW_ICM as mlx5_ib's `mlx5_ib_get_dm_mr` creates them; and rdma-core's dr_send.c
//! writes: an RC QP connected to itself over a force-loopback path, an RDMA WRITE (inline up to
//! 64 bytes, else gathered) followed by an RDMA READ of the same remote address through the
//! SW ICM key. All of it only with `EmuConfig::sw_steering`; without it, nothing changes.

use cxdirect_emu::testkit::sw_icm::{
    by_id, create, destroy, icm_key, ranges, run, self_connected_ring, wqe, write_then_read,
};
use cxdirect_emu::testkit::umr::{cqe_opcode, drain};
use cxdirect_emu::testkit::{refused, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::{CqeSyndrome, ErrCqe};
use cxdirect_hw::general_obj::general_obj_types_bit;
use cxdirect_hw::general_obj::obj_type;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::memic::DeviceMemCap;
use cxdirect_hw::mkey::MKC_ACCESS_MODE_SW_ICM;
use cxdirect_hw::sw_icm::QuerySwIcmOut;
use cxdirect_hw::wqe::opcode;

const MEM: usize = 8 << 20;

fn host(sw_icm: bool) -> Host {
    let cfg = EmuConfig {
        sw_steering: sw_icm,
        ..EmuConfig::default()
    };
    let mut h = Host::new(Device::loopback(cfg), MEM);
    h.bring_up();
    h
}

#[test]
fn the_gate_off_offers_and_accepts_nothing() {
    let mut h = host(false);
    assert_eq!(MKC_ACCESS_MODE_SW_ICM, 0x4);
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).expect("layout");
    assert_eq!(
        caps.general_obj_types() & general_obj_types_bit(obj_type::SW_ICM),
        0
    );
    let page = h.query_cap(cap_type::DEVICE_MEM, true);
    let dm = DeviceMemCap::new(&page[0x10..]).expect("layout");
    assert_eq!(dm.steering_sw_icm_start_address(), 0);
    assert_eq!(dm.log_steering_sw_icm_size(), 0);
    refused(
        create(&mut h, 0, 0x10_0000_0000, 12),
        CmdStatus::BadParameter,
        Syndrome::UnknownObjType,
    );
    refused(
        icm_key(&mut h, 0x10_0000_0000, 64),
        CmdStatus::BadParameter,
        Syndrome::BadMkeyParams,
    );
    assert_eq!(h.dev.sw_icm_read(0x10_0000_0000, 8), None);
    h.teardown();
}

#[test]
fn the_gate_on_reports_three_ranges_and_the_object_type() {
    let mut h = host(true);
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).expect("layout");
    assert_ne!(
        caps.general_obj_types() & general_obj_types_bit(obj_type::SW_ICM),
        0
    );
    assert!(caps.device_memory());
    let r = ranges(&mut h);
    // rdma-core's `dr_domain_check_icm_memory_caps` minimums.
    assert!(r.steering.1 >= 26 && r.header_modify.1 >= 15 && r.pattern.1 >= 15);
    assert_eq!(r.granularity, 12);
    let all = [r.steering, r.header_modify, r.pattern];
    for (i, &(start, log)) in all.iter().enumerate() {
        assert_ne!(start, 0);
        assert_eq!(start % (1u64 << log), 0, "aligned to its size");
        assert!(
            start + (1u64 << log) <= 1 << 40,
            "reachable by a 40-bit ICM address"
        );
        for &(other, other_log) in &all[i + 1..] {
            assert!(start + (1u64 << log) <= other || other + (1u64 << other_log) <= start);
        }
    }
    h.teardown();
}

/// `mlx5_dm_sw_icm_alloc` / `_dealloc` under the function's uid and under a user context's;
/// QUERY answers the piece; a destroyed object's bytes are gone.
#[test]
fn sw_icm_objects_as_mlx5_core_makes_them() {
    let mut h = host(true);
    let r = ranges(&mut h);
    let (base, _) = r.steering;
    let a = create(&mut h, 0, base, 16).expect("64 KiB at the range's start");
    let b = create(&mut h, 0, base + (1 << 16), 12).expect("the next 4 KiB");
    assert_ne!(a, b);
    let out = by_id(&mut h, Opcode::QueryGeneralObject, 0, b, 0x50).expect("QUERY");
    let q = QuerySwIcmOut::new(&out[..]).expect("layout");
    assert_eq!(
        (q.obj_id(), q.sw_icm_start_addr(), q.log_sw_icm_size()),
        (b, base + (1 << 16), 12)
    );
    for (start, log) in [r.header_modify, r.pattern] {
        let id = create(&mut h, 0, start + (1 << log) - 4096, 12).expect("the range's end");
        destroy(&mut h, 0, id).expect("DESTROY");
    }
    // A user context's object is its own.
    let one = h.create_uctx(0).expect("CREATE_UCTX");
    let two = h.create_uctx(0).expect("CREATE_UCTX");
    let c = create(&mut h, one, base + (1 << 17), 13).expect("under a uid");
    refused(
        destroy(&mut h, two, c),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    destroy(&mut h, one, c).expect("its owner destroys it");
    h.destroy_uctx(one).expect("DESTROY_UCTX");
    h.destroy_uctx(two).expect("DESTROY_UCTX");
    destroy(&mut h, 0, b).expect("DESTROY");
    destroy(&mut h, 0, a).expect("DESTROY");
    assert_eq!(h.dev.sw_icm_read(base, 64), None, "no live object");
    h.teardown();
}

#[test]
fn sw_icm_refusals_each_name_their_cause() {
    let mut h = host(true);
    let r = ranges(&mut h);
    let (base, log) = r.steering;
    let bad = CmdStatus::BadParameter;
    refused(
        create(&mut h, 0, base - 4096, 12),
        bad,
        Syndrome::SwIcmOutOfRange,
    );
    refused(
        create(&mut h, 0, base + (1 << log) - 4096, 13),
        bad,
        Syndrome::SwIcmOutOfRange,
    );
    refused(
        create(&mut h, 0, 0x1000, 12),
        bad,
        Syndrome::SwIcmOutOfRange,
    );
    refused(
        create(&mut h, 0, base + 64, 12),
        bad,
        Syndrome::SwIcmMisaligned,
    );
    refused(create(&mut h, 0, base, 11), bad, Syndrome::SwIcmBadSize);
    let a = create(&mut h, 0, base + (1 << 20), 16).expect("create");
    refused(
        create(&mut h, 0, base + (1 << 20) + (1 << 15), 12),
        bad,
        Syndrome::SwIcmOverlap,
    );
    refused(
        create(&mut h, 0, base + (1 << 20) - 4096, 13),
        bad,
        Syndrome::SwIcmOverlap,
    );
    refused(
        destroy(&mut h, 0, a + 1000),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    destroy(&mut h, 0, a).expect("DESTROY");
    refused(
        destroy(&mut h, 0, a),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    refused(
        by_id(&mut h, Opcode::QueryGeneralObject, 0, a, 0x50),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    create(&mut h, 0, base + (1 << 20), 16).expect("free again");
    h.teardown();
}

#[test]
fn an_sw_icm_key_must_lie_in_a_live_object() {
    let mut h = host(true);
    let r = ranges(&mut h);
    let (base, _) = r.steering;
    let a = create(&mut h, 0, base, 16).expect("create");
    let (hm, _) = r.header_modify;
    let m = create(&mut h, 0, hm, 12).expect("header-modify piece");
    icm_key(&mut h, base + 4096, 8192).expect("inside");
    icm_key(&mut h, hm, 4096).expect("a header-modify key");
    for (start, len) in [
        (base + (1 << 16) - 64, 128),
        (base + (1 << 16), 64),
        (hm - 64, 64),
    ] {
        refused(
            icm_key(&mut h, start, len),
            CmdStatus::BadParameter,
            Syndrome::BadMkeyParams,
        );
    }
    destroy(&mut h, 0, m).expect("DESTROY");
    refused(
        icm_key(&mut h, hm, 64),
        CmdStatus::BadParameter,
        Syndrome::BadMkeyParams,
    );
    destroy(&mut h, 0, a).expect("DESTROY");
    h.teardown();
}

#[test]
fn rdma_write_and_read_through_an_sw_icm_key_reach_icm() {
    let mut h = host(true);
    let (base, _) = ranges(&mut h).steering;
    // A 64 KiB chunk and a key over it, zero-based (`mr->addr` 0 in dr_send.c).
    let chunk = base + (1 << 20);
    let id = create(&mut h, 0, chunk, 16).expect("create");
    let rkey = icm_key(&mut h, chunk, 1 << 16).expect("SW ICM key");
    let mut ring = self_connected_ring(&mut h);

    // One steering entry, inline (dr_send.c inlines up to 64 bytes).
    let entry: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(7) ^ 0xa5).collect();
    let read = write_then_read(&mut h, &mut ring, 0x40, rkey, &entry, true);
    assert_eq!(read, entry);
    assert_eq!(
        h.dev.sw_icm_entry(chunk + 0x40),
        Some(entry.clone().try_into().unwrap())
    );
    assert_eq!(
        h.dev.sw_icm_read(chunk, 64),
        Some(vec![0u8; 64]),
        "unwritten bytes are zero"
    );

    // A hash table of 64 entries, gathered from the ring's buffer, across a page boundary.
    let table: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 5) as u8).collect();
    let read = write_then_read(&mut h, &mut ring, 0x1800, rkey, &table, false);
    assert_eq!(read, table);
    assert_eq!(h.dev.sw_icm_read(chunk + 0x1800, 4096), Some(table.clone()));
    assert_eq!(h.dev.sw_icm_backed_pages(), 3);

    // Past the key's end, posted as dr_send.c posts: the WRITE and its READ, one doorbell.
    // The responder refuses the WRITE (its NAK goes to a QP that is itself now in error), so
    // the ring's QP goes to error and both WQEs complete in error; nothing lands.
    let lkey = h.create_mkey(false, true);
    let src = h.alloc(128, 4096);
    h.write(src, &[0xee; 128]);
    let sync = h.alloc(128, 4096);
    let past = (1 << 16) - 64;
    let write_index = ring.sq.pi;
    let w = wqe(
        &ring.sq,
        opcode::RDMA_WRITE,
        past,
        rkey,
        &[0xee; 128],
        (src, lkey),
    );
    h.write_wqe(&mut ring.sq, &w);
    let r = wqe(
        &ring.sq,
        opcode::RDMA_READ,
        past,
        rkey,
        &[0; 128],
        (sync, lkey),
    );
    let mut done = run(&h, &mut ring, &r);
    // A QP in error completes what it holds when next rung (the model's flush).
    h.ring(&mut ring.sq, &r, false);
    for _ in 0..4 {
        h.dev.poll();
    }
    done.extend(drain(&h, &mut ring.cq));
    assert_eq!(done.len(), 2, "the WRITE and the READ");
    let first = ErrCqe::new(&done[0][..]).expect("layout");
    assert_eq!(cqe_opcode(&done[0]), 0xd, "requester error CQE");
    assert_eq!(first.wqe_counter(), write_index, "the WRITE's");
    assert!(
        [
            CqeSyndrome::RemoteAccess as u8,
            CqeSyndrome::WrFlushed as u8
        ]
        .contains(&first.syndrome()),
        "{:#x}",
        first.syndrome()
    );
    assert_eq!(cqe_opcode(&done[1]), 0xd);
    assert_eq!(
        h.dev.sw_icm_read(chunk + past, 64),
        Some(vec![0u8; 64]),
        "nothing past the key, nor before its end"
    );
    assert_eq!(h.dev.sw_icm_backed_pages(), 3);

    destroy(&mut h, 0, id).expect("DESTROY");
    assert_eq!(h.dev.sw_icm_backed_pages(), 0, "its pages are dropped");
    h.teardown();
}
