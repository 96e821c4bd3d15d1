//! Device memory (MEMIC) on the model, as Linux 6.12 and rdma-core use it: the general page's
//! `device_memory` and the device-memory capability page as mlx5_core's `mlx5_query_hca_caps`
//! and rdma-core's `test_mlx5_dm_ops` (through DEVX) read them; ALLOC_MEMIC and DEALLOC_MEMIC
//! as mlx5_ib's `mlx5_cmd_alloc_memic` / `mlx5_cmd_dealloc_memic` (dm.c) send them for
//! `ibv_alloc_dm` / `ibv_free_dm`; the memory reached by MMIO in BAR0 (the pages mlx5_ib maps
//! to the user, which libmlx5's `mlx5_access_dm` copies with 32-bit loads and stores);
//! MODIFY_MEMIC's atomic aliases for `mlx5dv_dm_map_op_addr`; and memory keys of access mode
//! MEMIC as `mlx5_ib_reg_dm_mr` creates them, carrying RDMA WRITE and READ.

use cxdirect_emu::server::bar;
use cxdirect_emu::testkit::rc::RemoteRights;
use cxdirect_emu::testkit::umr::{pair_without_pg, rdma_from_a, read_from_a, write_from_a};
use cxdirect_emu::testkit::{refused, CmdFail, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::memic::{
    AllocMemicIn, AllocMemicOut, DeallocMemicIn, DeviceMemCap, ModifyMemicIn, ModifyMemicOut,
    MEMIC_OP_ATOMIC_INCREMENT, MEMIC_OP_ATOMIC_TEST_AND_SET, MODIFY_MEMIC_OP_MOD_ALLOC,
    MODIFY_MEMIC_OP_MOD_DEALLOC,
};
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_MEMIC};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 8 << 20;
/// 4 KiB: mlx5_ib's `PAGE_SIZE`, the unit of its MEMIC bitmap.
const PAGE: u64 = 4096;
/// A ConnectX-6 Dx's device memory.
const MEMIC_SIZE: u64 = 256 << 10;

fn host_with(bar0_size: u64) -> Host {
    let cfg = EmuConfig {
        roce: true,
        bar0_size,
        ..EmuConfig::default()
    };
    let mut h = Host::new(Device::loopback(cfg), MEM);
    h.bring_up();
    h
}

fn host() -> Host {
    host_with(EmuConfig::default().bar0_size)
}

/// The device-memory page (current), as mlx5_core reads it.
fn dev_mem_page(h: &mut Host) -> Vec<u8> {
    h.query_cap(cap_type::DEVICE_MEM, true)
}

fn memic_base(h: &mut Host) -> u64 {
    let out = dev_mem_page(h);
    DeviceMemCap::new(&out[0x10..])
        .expect("layout")
        .memic_bar_start_addr()
}

/// ALLOC_MEMIC as `mlx5_cmd_alloc_memic` fills it: `range_size` whole pages from
/// `range_start`, `memic_size` bytes, alignment `64 << log_align`.
fn alloc(
    h: &mut Host,
    range_start: u64,
    range_size: u32,
    memic_size: u32,
    log_align: u8,
) -> Result<u64, CmdFail> {
    let mut input = Host::input(Opcode::AllocMemic, 0, 0x20);
    AllocMemicIn::new(&mut input[..])
        .expect("layout")
        .set_range_start_addr(range_start)
        .set_range_size(range_size)
        .set_memic_size(memic_size)
        .set_log_memic_addr_alignment(log_align);
    let out = h.exec(&input, 0x10)?;
    Ok(AllocMemicOut::new(&out[..])
        .expect("layout")
        .memic_start_addr())
}

/// DEALLOC_MEMIC as `mlx5_cmd_dealloc_memic` fills it.
fn dealloc(h: &mut Host, start: u64, size: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DeallocMemic, 0, 0x20);
    DeallocMemicIn::new(&mut input[..])
        .expect("layout")
        .set_memic_start_addr(start)
        .set_memic_size(size);
    h.exec(&input, 0x10).map(|_| ())
}

/// MODIFY_MEMIC as `mlx5_cmd_alloc_memic_op` (`op_mod` ALLOC) and `mlx5_cmd_dealloc_memic_op`
/// fill it: the operation address on ALLOC.
fn modify(h: &mut Host, uid: u16, op_mod: u16, op: u8, start: u64) -> Result<u64, CmdFail> {
    let mut input = Host::input(Opcode::ModifyMemic, op_mod, 0x40);
    ModifyMemicIn::new(&mut input[..])
        .expect("layout")
        .set_uid(uid)
        .set_memic_operation_type(op)
        .set_memic_start_addr(start);
    let out = h.exec(&input, 0x40)?;
    Ok(ModifyMemicOut::new(&out[..])
        .expect("layout")
        .memic_operation_addr())
}

/// A MEMIC key as `mlx5_ib_get_dm_mr` creates it: `start_addr` the BAR0 offset of the bytes,
/// `lr` always, the rest from the access flags, no translation table.
fn memic_key(h: &mut Host, start: u64, len: u64, rights: RemoteRights) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_access_mode(MKC_ACCESS_MODE_MEMIC)
        .set_lr(true)
        .set_lw(true)
        .set_rr(rights.read)
        .set_rw(rights.write)
        .set_a(rights.atomic)
        .set_pd(h.pd)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(0x5a)
        .set_start_addr(start)
        .set_len(len);
    let out = h.exec(&input, 16)?;
    Ok(mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0x5a,
    ))
}

/// MMIO of `data` at BAR0 `offset` as QEMU forwards the guest's stores: naturally aligned
/// pieces through the vfio-user server's splitting.
fn mmio_write(h: &Host, offset: u64, data: &[u8]) {
    let outcome = bar::write(&h.dev, offset, data).expect("inside BAR0");
    assert_eq!(outcome.refused, 0);
}

fn mmio_read(h: &Host, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    bar::read(&h.dev, offset, &mut buf).expect("inside BAR0");
    buf
}

/// mlx5_core's `mlx5_query_hca_caps` reads the device-memory page when the general page says
/// `device_memory`; mlx5_ib's `mlx5_ib_query_device` reports `max_memic_size` as
/// `max_dm_size`; `requires_memic_atomic_support` (test_mlx5_dm_ops.py) reads the page through
/// DEVX with an output of 0x1010 bytes and looks at output bytes 20, 22 and 80..84.
#[test]
fn device_memory_page_as_mlx5_query_hca_caps_reads_it() {
    let mut h = host();
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&general[0x10..])
        .expect("layout")
        .device_memory());
    for current in [true, false] {
        let out = h.query_cap(cap_type::DEVICE_MEM, current);
        let cap = DeviceMemCap::new(&out[0x10..]).expect("layout");
        assert!(cap.memic());
        assert_eq!(cap.max_memic_size() as u64, MEMIC_SIZE);
        assert_eq!(cap.memic_bar_size() as u64, MEMIC_SIZE);
        assert_eq!(cap.log_min_memic_alloc_size(), 6, "MLX5_MEMIC_BASE_SIZE");
        let (base, bar) = (cap.memic_bar_start_addr(), h.dev.bar0_size());
        assert_eq!(base % PAGE, 0);
        assert!(base + MEMIC_SIZE <= bar);
        // The test's own reading of the raw output.
        let ops = u32::from_be_bytes(out[80..84].try_into().expect("4 bytes"));
        assert_eq!(ops & 0x3, 0x3, "increment and test-and-set");
        assert_eq!(out[20] & out[22] & 0x1, 0x1, "1-byte atomic operations");
    }
    h.teardown();
}

/// A BAR0 too small for the window offers no device memory: the bit is clear, the page and the
/// commands are refused (without software steering, whose SW ICM is device memory too).
#[test]
fn a_small_bar_offers_no_device_memory() {
    let cfg = EmuConfig {
        roce: true,
        bar0_size: 1 << 20,
        sw_steering: false,
        ..EmuConfig::default()
    };
    let mut h = Host::new(Device::loopback(cfg), MEM);
    h.bring_up();
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    assert!(!CmdHcaCap::new(&general[0x10..])
        .expect("layout")
        .device_memory());
    let mut input = Host::input(Opcode::QueryHcaCap, (cap_type::DEVICE_MEM << 1) | 1, 0x10);
    input.truncate(0x10);
    refused(
        h.exec(&input, 0x1010),
        CmdStatus::BadParameter,
        Syndrome::BadOpMod,
    );
    refused(
        alloc(&mut h, 0, PAGE as u32, 64, 0),
        CmdStatus::BadOpcode,
        Syndrome::UnknownOpcode,
    );
    h.teardown();
}

/// `mlx5_cmd_alloc_memic`: the size rounded up to 64 bytes, a range of whole pages its bitmap
/// found free, alignment 0 (`attr->alignment` up to 6 becomes 0); the address comes back as
/// a BAR0 offset inside the range. A range with no room answers NO_RESOURCES, which mlx5_ib
/// reads as -EAGAIN and tries the next page.
#[test]
fn alloc_memic_as_mlx5_cmd_alloc_memic_sends_it() {
    let mut h = host();
    let base = memic_base(&mut h);
    let a = alloc(&mut h, base, PAGE as u32, 64, 0).expect("64 bytes in page 0");
    assert_eq!(a, base);
    let b = alloc(&mut h, base + PAGE, 2 * PAGE as u32, 2 * PAGE as u32, 0).expect("two pages");
    assert_eq!(b, base + PAGE);
    // The rest of page 0 is still free to the device.
    assert_eq!(alloc(&mut h, base, PAGE as u32, 128, 0), Ok(base + 64));
    // Aligned to 64 << 2 = 256 bytes.
    assert_eq!(alloc(&mut h, base, PAGE as u32, 64, 2), Ok(base + 256));
    // Pages 1 and 2 are full.
    refused(
        alloc(&mut h, base + PAGE, PAGE as u32, 64, 0),
        CmdStatus::NoResources,
        Syndrome::MemicNoSpace,
    );
    // The whole memory in one piece, as `max_dm_size` allows, once the rest is free.
    for (start, size) in [
        (a, 64),
        (b, 2 * PAGE as u32),
        (base + 64, 128),
        (base + 256, 64),
    ] {
        dealloc(&mut h, start, size).expect("DEALLOC_MEMIC");
    }
    let all = alloc(&mut h, base, MEMIC_SIZE as u32, MEMIC_SIZE as u32, 0).expect("all of it");
    dealloc(&mut h, all, MEMIC_SIZE as u32).expect("DEALLOC_MEMIC");
    h.teardown();
}

/// Sizes of 0 or not a multiple of 64 bytes, sizes past the range, alignments past
/// `log_max_memic_addr_alignment`, and ranges outside the memory are refused.
#[test]
fn alloc_memic_refuses_bad_sizes_and_ranges() {
    let mut h = host();
    let base = memic_base(&mut h);
    let cap = dev_mem_page(&mut h);
    let max_align = DeviceMemCap::new(&cap[0x10..])
        .expect("layout")
        .log_max_memic_addr_alignment();
    for (start, range, size, align) in [
        (base, PAGE as u32, 0, 0),
        (base, PAGE as u32, 100, 0),
        (base, PAGE as u32, 2 * PAGE as u32, 0),
        (base, PAGE as u32, 64, max_align + 1),
    ] {
        refused(
            alloc(&mut h, start, range, size, align),
            CmdStatus::BadParameter,
            Syndrome::MemicBadSize,
        );
    }
    for start in [base - PAGE, base + MEMIC_SIZE, 0] {
        refused(
            alloc(&mut h, start, PAGE as u32, 64, 0),
            CmdStatus::BadParameter,
            Syndrome::MemicOutOfRange,
        );
    }
    h.teardown();
}

/// `mlx5_cmd_dealloc_memic` names the piece by the address and size it was allocated with; a
/// second free (test_destroy_dm_bad_flow closes a DM twice: the kernel must not pass it on,
/// and the device refuses it if it does), a wrong size and an address never handed out are
/// refused.
#[test]
fn dealloc_memic_refuses_a_double_free() {
    let mut h = host();
    let base = memic_base(&mut h);
    let a = alloc(&mut h, base, PAGE as u32, 192, 0).expect("ALLOC_MEMIC");
    refused(
        dealloc(&mut h, a, 128),
        CmdStatus::BadParameter,
        Syndrome::MemicNoPiece,
    );
    refused(
        dealloc(&mut h, a + 64, 128),
        CmdStatus::BadParameter,
        Syndrome::MemicNoPiece,
    );
    dealloc(&mut h, a, 192).expect("DEALLOC_MEMIC");
    refused(
        dealloc(&mut h, a, 192),
        CmdStatus::BadParameter,
        Syndrome::MemicNoPiece,
    );
    h.teardown();
}

/// The memory is BAR0's: libmlx5's `mlx5_access_dm` copies with 32-bit stores and loads at
/// the mapped address, which QEMU forwards to the model as BAR0 accesses. A fresh piece reads
/// as zero; what a store leaves a load finds, at any width; the UAR pages end below the
/// window (ALLOC_UAR's last page is not device memory).
#[test]
fn mmio_reaches_device_memory() {
    let mut h = host();
    let base = memic_base(&mut h);
    let a = alloc(&mut h, base, PAGE as u32, 256, 0).expect("ALLOC_MEMIC");
    assert_eq!(mmio_read(&h, a, 256), vec![0u8; 256]);
    let data: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    for (i, word) in data.chunks(4).enumerate() {
        h.dev
            .mmio_write(a + 4 * i as u64, word)
            .expect("32-bit store");
    }
    assert_eq!(mmio_read(&h, a, 256), data);
    assert_eq!(mmio_read(&h, a + 5, 3), data[5..8].to_vec());
    mmio_write(&h, a + 1, &[0xee]);
    assert_eq!(mmio_read(&h, a, 4), vec![data[0], 0xee, data[2], data[3]]);
    // Freed and handed out again: zero once more.
    dealloc(&mut h, a, 256).expect("DEALLOC_MEMIC");
    let b = alloc(&mut h, base, PAGE as u32, 256, 0).expect("ALLOC_MEMIC");
    assert_eq!(mmio_read(&h, b, 256), vec![0u8; 256]);
    h.teardown();
}

/// `mlx5dv_dm_map_op_addr` (MLX5_IB_METHOD_DM_MAP_OP_ADDR): MODIFY_MEMIC maps an operation's
/// address for the piece; `test_dm_atomic_ops` stores 1 twice at the increment address, then
/// loads a byte twice at the test-and-set address (2, then 1).
#[test]
fn modify_memic_maps_the_atomic_operations() {
    let mut h = host();
    let base = memic_base(&mut h);
    let a = alloc(&mut h, base, PAGE as u32, 128, 0).expect("ALLOC_MEMIC");
    let inc = modify(
        &mut h,
        0,
        MODIFY_MEMIC_OP_MOD_ALLOC,
        MEMIC_OP_ATOMIC_INCREMENT,
        a,
    )
    .expect("increment address");
    let tas = modify(
        &mut h,
        0,
        MODIFY_MEMIC_OP_MOD_ALLOC,
        MEMIC_OP_ATOMIC_TEST_AND_SET,
        a,
    )
    .expect("test-and-set address");
    assert!(inc != tas && inc != a && tas != a);
    for addr in [inc, tas] {
        assert!(addr + 128 <= h.dev.bar0_size());
    }
    mmio_write(&h, inc, &[1]);
    mmio_write(&h, inc, &[1]);
    assert_eq!(mmio_read(&h, tas, 1), vec![2]);
    assert_eq!(mmio_read(&h, tas, 1), vec![1]);
    assert_eq!(mmio_read(&h, a, 4), vec![1, 0, 0, 0]);
    // Byte 5 of the piece through byte 5 of the alias.
    mmio_write(&h, inc + 5, &[0x10]);
    assert_eq!(mmio_read(&h, a + 4, 4), vec![0, 0x10, 0, 0]);
    // Unmapped, the alias does nothing.
    modify(
        &mut h,
        0,
        MODIFY_MEMIC_OP_MOD_DEALLOC,
        MEMIC_OP_ATOMIC_INCREMENT,
        a,
    )
    .expect("unmap");
    mmio_write(&h, inc, &[1]);
    assert_eq!(mmio_read(&h, a, 1), vec![1]);
    refused(
        modify(
            &mut h,
            0,
            MODIFY_MEMIC_OP_MOD_DEALLOC,
            MEMIC_OP_ATOMIC_INCREMENT,
            a,
        ),
        CmdStatus::BadParameter,
        Syndrome::MemicBadOperation,
    );
    // Operations past `memic_operations`, and pieces never allocated.
    refused(
        modify(&mut h, 0, MODIFY_MEMIC_OP_MOD_ALLOC, 2, a),
        CmdStatus::BadParameter,
        Syndrome::MemicBadOperation,
    );
    refused(
        modify(
            &mut h,
            0,
            MODIFY_MEMIC_OP_MOD_ALLOC,
            MEMIC_OP_ATOMIC_INCREMENT,
            a + 64,
        ),
        CmdStatus::BadParameter,
        Syndrome::MemicNoPiece,
    );
    dealloc(&mut h, a, 128).expect("DEALLOC_MEMIC");
    h.teardown();
}

/// An operation address mapped under a user context is that context's (the DEVX uid rules):
/// another context may not unmap it; when its context closes it passes to the function.
#[test]
fn an_operation_mapped_by_a_user_context_is_its_own() {
    let mut h = host();
    let base = memic_base(&mut h);
    let a = alloc(&mut h, base, PAGE as u32, 64, 0).expect("ALLOC_MEMIC");
    let one = h.create_uctx(0).expect("CREATE_UCTX");
    let two = h.create_uctx(0).expect("CREATE_UCTX");
    modify(
        &mut h,
        one,
        MODIFY_MEMIC_OP_MOD_ALLOC,
        MEMIC_OP_ATOMIC_INCREMENT,
        a,
    )
    .expect("map");
    refused(
        modify(
            &mut h,
            two,
            MODIFY_MEMIC_OP_MOD_DEALLOC,
            MEMIC_OP_ATOMIC_INCREMENT,
            a,
        ),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    h.destroy_uctx(one).expect("DESTROY_UCTX");
    refused(
        modify(
            &mut h,
            two,
            MODIFY_MEMIC_OP_MOD_DEALLOC,
            MEMIC_OP_ATOMIC_INCREMENT,
            a,
        ),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    modify(
        &mut h,
        0,
        MODIFY_MEMIC_OP_MOD_DEALLOC,
        MEMIC_OP_ATOMIC_INCREMENT,
        a,
    )
    .expect("the function unmaps it");
    h.destroy_uctx(two).expect("DESTROY_UCTX");
    dealloc(&mut h, a, 64).expect("DEALLOC_MEMIC");
    h.teardown();
}

/// `mlx5_ib_reg_dm_mr`: a key of access mode MEMIC whose `start_addr` is the BAR0 offset of
/// the registered bytes; the RDMA core registers it zero-based, so a peer's WRITE at address 0
/// through the rkey lands in the first registered byte, which the host then loads by MMIO;
/// a READ returns what the host stored; a gather through a MEMIC lkey sends from the device
/// memory (test_dm_remote_traffic, test_dm_remote_read_traffic, test_dm_traffic).
#[test]
fn rdma_write_and_read_reach_device_memory_through_a_memic_key() {
    let mut p = pair_without_pg();
    let base = memic_base(&mut p.b);
    let piece = alloc(&mut p.b, base, PAGE as u32, 1024, 0).expect("ALLOC_MEMIC on B");
    // Registered from byte 256 of the piece (`attr->offset`), 512 bytes.
    let rkey = memic_key(&mut p.b, piece + 256, 512, RemoteRights::READ_WRITE).expect("MEMIC key");
    let data: Vec<u8> = (0..300u32).map(|i| (i ^ 0x5a) as u8).collect();
    let (op, syndrome) = write_from_a(&mut p, 0, rkey, &data);
    assert_eq!((op, syndrome), (0, 0), "WRITE completes");
    assert_eq!(mmio_read(&p.b, piece + 256, 300), data);
    assert_eq!(
        mmio_read(&p.b, piece, 256),
        vec![0u8; 256],
        "before the key"
    );

    let stored: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(13)).collect();
    mmio_write(&p.b, piece + 256 + 448, &stored);
    let (op, read) = read_from_a(&mut p, 448, rkey, 64);
    assert_eq!(op, 0, "READ completes");
    assert_eq!(read, stored);

    // A's own device memory as the gather list of a WRITE into B's.
    let a_base = memic_base(&mut p.a);
    let a_piece = alloc(&mut p.a, a_base, PAGE as u32, 64, 0).expect("ALLOC_MEMIC on A");
    let lkey = memic_key(&mut p.a, a_piece, 64, RemoteRights::READ_WRITE).expect("MEMIC lkey");
    let mine: Vec<u8> = (0..64u8).map(|i| 0xff - i).collect();
    mmio_write(&p.a, a_piece, &mine);
    let done = rdma_from_a(&mut p, opcode::RDMA_WRITE, (0, rkey), (0, lkey), 64);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0][0x37], 0, "no error");
    assert_eq!(mmio_read(&p.b, piece + 256, 64), mine);

    // Past the key's 512 bytes: the peer's access is refused (and A's QP goes to error).
    let (op, syndrome) = write_from_a(&mut p, 480, rkey, &[1u8; 64]);
    assert_eq!(op, 0xd, "requester error CQE");
    assert_eq!(syndrome, CqeSyndrome::RemoteAccess as u8);
    assert_eq!(
        mmio_read(&p.b, piece + 256 + 512, 32),
        vec![0u8; 32],
        "nothing past the key"
    );
    p.teardown();
}

/// A MEMIC key must lie in the device memory; `umr_en` (which mlx5_ib never sets on one) is
/// refused.
#[test]
fn a_memic_key_must_lie_in_device_memory() {
    let mut h = host();
    let base = memic_base(&mut h);
    for (start, len) in [(base - 64, 64), (base + MEMIC_SIZE - 64, 128), (0x1000, 64)] {
        refused(
            memic_key(&mut h, start, len, RemoteRights::READ_WRITE),
            CmdStatus::BadParameter,
            Syndrome::BadMkeyParams,
        );
    }
    // The RDMA core registers zero-length regions too (test_create_dm_mr's smallest).
    memic_key(&mut h, base, 0, RemoteRights::READ_WRITE).expect("empty key");
    h.teardown();
}
