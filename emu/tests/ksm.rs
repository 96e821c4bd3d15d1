//! KSM memory keys (`MLX5_MKC_ACCESS_MODE_KSM`): an indirect key whose address space is blocks
//! of `2^log_page_size` bytes, block `i` reached through entry `i` (`struct mlx5_ksm`: a
//! reserved word, a key, an address). Linux's mlx5_ib makes them for implicit ODP
//! (`MLX5_IMR_KSM_CACHE_ENTRY` in odp.c: `log_page_size` `MLX5_KSM_PAGE_SHIFT`, entries
//! loaded by UMR, `mlx5_odp_populate_xlt`), and UCX creates them through DEVX. Here: CREATE_MKEY
//! with a list, a UD send gathering and a receive scattering across blocks, the checks on each
//! entry's key, and a UMR loading entries into a free KSM key on the REG_UMR QP.

use cxdirect_emu::testkit::rc::{GID_A, MAC_A};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UdQp, UD_QKEY};
use cxdirect_emu::testkit::{CmdFail, Cq, Host, Sq};
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::{Device, EmuConfig, Syndrome, NULL_MKEY, RESERVED_LKEY};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::{CqeOpcode, ErrCqe};
use cxdirect_hw::mkey::{
    mkey_from_index, CreateMkeyIn, CreateMkeyOut, Mkc, MKC_ACCESS_MODE_KSM, MKC_ACCESS_MODE_PA,
};
use cxdirect_hw::qp::service_type;
use cxdirect_hw::umr::{flags, mkey_mask, UmrCtrlSeg};
use cxdirect_hw::wqe::{self, opcode, CtrlSeg};
use std::sync::Arc;

const MEM: usize = 8 << 20;
/// The key's own address space (any IOVA: only its entries name host memory).
const KEY_START: u64 = 0x7000_0000_0000;
const BLOCK: u64 = 4096;
const SYND_LOCAL_PROT: u8 = 0x04;

/// A function alone on port A of a pair wire, RoCE on, its async EQ taking every event but
/// page faults (as mlx5_core's does): no EQ takes page faults, so a block not present fails
/// the access instead of faulting (UD SENDs fault where an EQ takes them, `odp_ud.rs`).
fn host() -> (Host, Arc<Wire>) {
    let dev = Device::new(EmuConfig {
        roce: true,
        ..EmuConfig::default()
    });
    let wire = Arc::new(Wire::pair());
    dev.attach(wire.clone(), PortId::A, &[]);
    let mut h = Host::new(dev, MEM);
    h.async_event_mask = !(1u64 << cxdirect_hw::eqe::EventType::PageFault as u8);
    h.bring_up();
    h.enable_roce(GID_A, MAC_A);
    (h, wire)
}

fn drain(h: &Host, cq: &mut Cq) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| h.poll_cq(cq)).collect()
}

/// CREATE_MKEY of a KSM key in `pd` over `blocks` blocks of 4 KiB from [`KEY_START`], room
/// for `blocks` entries, `entries` (key, address) given (none: a free key for a UMR).
fn create_ksm(h: &mut Host, pd: u32, blocks: u32, entries: &[(u32, u64)]) -> Result<u32, CmdFail> {
    create_ksm_sized(h, pd, blocks, 12, entries)
}

fn create_ksm_sized(
    h: &mut Host,
    pd: u32,
    blocks: u32,
    log_block: u8,
    entries: &[(u32, u64)],
) -> Result<u32, CmdFail> {
    create_ksm_table(h, pd, blocks, blocks, log_block, entries)
}

/// [`create_ksm_sized`] with room for `table` entries (the key's translation table may be
/// larger than its length needs).
fn create_ksm_table(
    h: &mut Host,
    pd: u32,
    blocks: u32,
    table: u32,
    log_block: u8,
    entries: &[(u32, u64)],
) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110 + 16 * entries.len());
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.set_translations_octword_actual_size(entries.len() as u32);
    cmd.memory_key_mkey_entry_mut()
        .set_access_mode(MKC_ACCESS_MODE_KSM)
        .set_free(entries.is_empty())
        .set_umr_en(true)
        .set_lr(true)
        .set_lw(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(0x5c)
        .set_start_addr(KEY_START)
        .set_len(u64::from(blocks) * BLOCK)
        .set_log_page_size(log_block)
        .set_translations_octword_size(table);
    for (i, &(key, addr)) in entries.iter().enumerate() {
        // `struct mlx5_ksm`: reserved, key, then the address.
        cmd.set_mtt(2 * i, u64::from(key)).expect("room");
        cmd.set_mtt(2 * i + 1, addr).expect("room");
    }
    let out = h.exec(&input, 16)?;
    let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
    Ok(mkey_from_index(index, 0x5c))
}

/// A PA key of `pd` (bus addresses as its own), as `mlx5_ib_get_dma_mr` makes it.
fn pa_key(h: &mut Host, pd: u32) -> u32 {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_access_mode(MKC_ACCESS_MODE_PA)
        .set_lr(true)
        .set_lw(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(0x11)
        .set_length64(true);
    let out = h.exec(&input, 16).expect("CREATE_MKEY PA");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0x11,
    )
}

/// Two UD QPs on one function, in RTS; the first sends to the second.
fn two_qps(h: &mut Host, cq: &Cq) -> (UdQp, UdQp) {
    let a = h.create_ud_qp(cq, service_type::UD, 4, 4);
    let b = h.create_ud_qp(cq, service_type::UD, 4, 4);
    h.activate_ud(a.qpn, service_type::UD, UD_QKEY);
    h.activate_ud(b.qpn, service_type::UD, UD_QKEY);
    (a, b)
}

/// Sends `len` bytes at key address `addr` through `lkey` from `a` to `b`.
fn send(h: &mut Host, a: &mut UdQp, b: &UdQp, lkey: u32, addr: u64, len: u32) {
    let av = UdAv::to(GID_A, MAC_A, b.qpn, UD_QKEY);
    let w = ud_wqe(&a.sq, opcode::SEND, 0, &av, &[(addr, lkey, len)]);
    h.post(&mut a.sq, &w, false);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

#[test]
fn a_ksm_key_gathers_and_scatters_across_its_blocks_through_each_entry_s_key() {
    let (mut h, _wire) = host();
    let mut cq = h.create_cq(6);
    let (mut a, mut b) = two_qps(&mut h, &cq);
    let pd = h.pd;
    let mtt = h.create_mkey(true, true);
    let pa = pa_key(&mut h, pd);
    // Three blocks, each elsewhere in host memory and reached through another kind of key.
    let blocks: Vec<u64> = (0..3).map(|_| h.alloc(BLOCK, BLOCK)).collect();
    for (i, &block) in blocks.iter().enumerate() {
        h.write(block, &pattern(BLOCK as usize, i as u8));
    }
    let ksm = create_ksm(
        &mut h,
        pd,
        3,
        &[
            (RESERVED_LKEY, blocks[0]),
            (mtt, blocks[1]),
            (pa, blocks[2]),
        ],
    )
    .expect("CREATE_MKEY KSM");
    // The receive lands in a second KSM key whose blocks are in reverse order.
    let rx: Vec<u64> = (0..2).map(|_| h.alloc(BLOCK, BLOCK)).collect();
    let rx_key = create_ksm(&mut h, pd, 2, &[(mtt, rx[1]), (RESERVED_LKEY, rx[0])])
        .expect("CREATE_MKEY KSM");
    // 600 bytes from 300 before the end of block 1: 300 of block 1, 300 of block 2.
    let from = KEY_START + 2 * BLOCK - 300;
    // The GRH area and payload from 200 before the end of the receive key's block 0.
    let to = KEY_START + BLOCK - 200;
    h.post_ud_recv(&mut b, to, 1024, rx_key);
    send(&mut h, &mut a, &b, ksm, from, 600);
    let cqes = drain(&h, &mut cq);
    let kinds: Vec<u8> = cqes.iter().map(|c| c[63] >> 4).collect();
    assert!(kinds.contains(&(CqeOpcode::Req as u8)), "{kinds:?}");
    assert!(kinds.contains(&(CqeOpcode::RespSend as u8)), "{kinds:?}");
    let mut sent = pattern(BLOCK as usize, 1)[BLOCK as usize - 300..].to_vec();
    sent.extend_from_slice(&pattern(BLOCK as usize, 2)[..300]);
    // Receive key block 0 is rx[1]: its last 200 bytes take the GRH area and 160 bytes.
    let mut got = h.read(rx[1] + BLOCK - 200, 200);
    got.extend(h.read(rx[0], 440));
    assert_eq!(
        &got[40..],
        &sent[..],
        "the payload as gathered across the blocks"
    );
}

#[test]
fn a_ksm_entry_through_another_pd_s_key_or_past_the_loaded_list_fails_the_access() {
    let (mut h, _wire) = host();
    let mut cq = h.create_cq(6);
    let (mut a, mut b) = two_qps(&mut h, &cq);
    let pd = h.pd;
    let other_pd = {
        let out = h.simple(Opcode::AllocPd, 0).expect("ALLOC_PD");
        u32::from_be_bytes([out[8], out[9], out[10], out[11]]) & 0xff_ffff
    };
    let foreign = pa_key(&mut h, other_pd);
    let block = h.alloc(BLOCK, BLOCK);
    // Entry 0 through a key of another PD; block 1 has no entry loaded.
    let ksm = create_ksm(&mut h, pd, 2, &[(foreign, block)]).expect("CREATE_MKEY KSM");
    let lkey = h.create_mkey(true, true);
    for (at, n) in [(KEY_START, 64), (KEY_START + BLOCK, 64)] {
        let dst = h.alloc(1024, 64);
        h.post_ud_recv(&mut b, dst, 1024, lkey);
        send(&mut h, &mut a, &b, ksm, at, n);
        let cqes = drain(&h, &mut cq);
        let err = cqes
            .iter()
            .find(|c| c[63] >> 4 == CqeOpcode::ReqErr as u8)
            .unwrap_or_else(|| panic!("an error CQE for the access at {at:#x}: {cqes:?}"));
        assert_eq!(ErrCqe::new(&err[..]).unwrap().syndrome(), SYND_LOCAL_PROT);
        // The send queue went to error; a fresh pair of QPs for the next access.
        (a, b) = two_qps(&mut h, &cq);
    }
}

#[test]
fn a_ksm_block_outside_4k_to_2g_is_refused() {
    let (mut h, _wire) = host();
    let pd = h.pd;
    let block = h.alloc(BLOCK, BLOCK);
    assert_eq!(
        create_ksm_sized(&mut h, pd, 1, 11, &[(RESERVED_LKEY, block)]),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadMkeyParams
        ))
    );
    // Linux's implicit ODP size, 2^30 (`MLX5_KSM_PAGE_SHIFT`), is taken.
    create_ksm_sized(&mut h, pd, 1, 30, &[(RESERVED_LKEY, block)]).expect("CREATE_MKEY KSM");
}

/// A UMR WQE on the REG_UMR QP loading `list` (16-byte KSM entries, inline) into `key` from
/// entry 0 and enabling it (`free` 0), as `mlx5r_umr_update_xlt` posts it for a KSM key.
fn umr_load(sq: &Sq, key: u32, list: &[u8]) -> Vec<u8> {
    let tail = list.len().next_multiple_of(64);
    let mut w = vec![0u8; 128 + tail];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(((128 + tail) / 16) as u8)
        .set_ce(wqe::completion::ALWAYS)
        .set_imm(key);
    UmrCtrlSeg::new(&mut w[16..64])
        .expect("layout")
        .set_xlt_octowords((tail / 16) as u16)
        .set_mkey_mask(mkey_mask::FREE)
        // Enabling: no free-state check (`mlx5r_umr_set_update_xlt_ctrl_seg` asks for
        // CHECK_NOT_FREE only without MLX5_IB_UPD_XLT_ENABLE).
        .set_flags(flags::INLINE);
    Mkc::new(&mut w[64..128]).expect("layout").set_free(false);
    w[128..128 + list.len()].copy_from_slice(list);
    w
}

#[test]
fn a_umr_loads_ksm_entries_into_a_free_ksm_key() {
    let (mut h, _wire) = host();
    let mut cq = h.create_cq(6);
    let (mut a, mut b) = two_qps(&mut h, &cq);
    let pd = h.pd;
    let ksm = create_ksm(&mut h, pd, 4, &[]).expect("CREATE_MKEY KSM, free");
    let blocks: Vec<u64> = (0..4).map(|_| h.alloc(BLOCK, BLOCK)).collect();
    for (i, &block) in blocks.iter().enumerate() {
        h.write(block, &pattern(BLOCK as usize, 0x40 + i as u8));
    }
    let list: Vec<u8> = blocks
        .iter()
        .flat_map(|&block| {
            let mut e = [0u8; 16];
            e[4..8].copy_from_slice(&RESERVED_LKEY.to_be_bytes());
            e[8..].copy_from_slice(&block.to_be_bytes());
            e
        })
        .collect();
    let mut umr = h.create_reg_umr_qp(&cq, 4);
    let w = umr_load(&umr, ksm, &list);
    h.post(&mut umr, &w, false);
    let done = drain(&h, &mut cq);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0][63] >> 4, CqeOpcode::Req as u8, "the UMR completed");
    let lkey = h.create_mkey(true, true);
    let dst = h.alloc(1024, 64);
    h.post_ud_recv(&mut b, dst, 1024, lkey);
    send(&mut h, &mut a, &b, ksm, KEY_START + 3 * BLOCK - 100, 100);
    let cqes = drain(&h, &mut cq);
    assert!(
        cqes.iter().any(|c| c[63] >> 4 == CqeOpcode::RespSend as u8),
        "{cqes:?}"
    );
    assert_eq!(
        h.read(dst + 40, 100),
        pattern(BLOCK as usize, 0x42)[BLOCK as usize - 100..].to_vec()
    );
}

#[test]
fn a_ksm_key_of_2_26_blocks_created_with_its_first_entries_maps_them_and_nothing_else() {
    let (mut h, _wire) = host();
    let mut cq = h.create_cq(6);
    let (mut a, mut b) = two_qps(&mut h, &cq);
    let pd = h.pd;
    let mtt = h.create_mkey(true, true);
    let blocks: Vec<u64> = (0..3).map(|_| h.alloc(BLOCK, BLOCK)).collect();
    for (i, &block) in blocks.iter().enumerate() {
        h.write(block, &pattern(BLOCK as usize, 0x20 + i as u8));
    }
    // The table of Linux's implicit ODP key under 5-level paging; three entries given, the
    // second naming the null key.
    let table = 1u32 << 26;
    let ksm = create_ksm_table(
        &mut h,
        pd,
        table,
        table,
        12,
        &[(RESERVED_LKEY, blocks[0]), (NULL_MKEY, 0), (mtt, blocks[2])],
    )
    .expect("CREATE_MKEY KSM of 2^26 blocks");
    let lkey = h.create_mkey(true, true);
    for (i, block) in [(0usize, 0u64), (2, 2)] {
        let dst = h.alloc(1024, 64);
        h.post_ud_recv(&mut b, dst, 1024, lkey);
        send(
            &mut h,
            &mut a,
            &b,
            ksm,
            KEY_START + block * BLOCK + 100,
            200,
        );
        let cqes = drain(&h, &mut cq);
        assert!(
            cqes.iter().all(|c| c[63] >> 4 != CqeOpcode::ReqErr as u8),
            "{cqes:?}"
        );
        assert_eq!(
            h.read(dst + 40, 200),
            pattern(BLOCK as usize, 0x20 + i as u8)[100..300].to_vec()
        );
    }
    // Block 1 names the null key and block 2^25 was never loaded: neither maps anything.
    for at in [KEY_START + BLOCK, KEY_START + (1 << 25) * BLOCK] {
        let dst = h.alloc(1024, 64);
        h.post_ud_recv(&mut b, dst, 1024, lkey);
        send(&mut h, &mut a, &b, ksm, at, 64);
        let cqes = drain(&h, &mut cq);
        let err = cqes
            .iter()
            .find(|c| c[63] >> 4 == CqeOpcode::ReqErr as u8)
            .unwrap_or_else(|| panic!("an error CQE for the access at {at:#x}: {cqes:?}"));
        assert_eq!(ErrCqe::new(&err[..]).unwrap().syndrome(), SYND_LOCAL_PROT);
        (a, b) = two_qps(&mut h, &cq);
    }
}
