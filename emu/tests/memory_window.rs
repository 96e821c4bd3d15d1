//! Memory windows as Linux 6.12's mlx5_ib creates them (`mlx5_ib_alloc_mw`, reported on
//! `imaicl` by `mlx5_ib_query_device`) and rdma-core's libmlx5 binds, uses and invalidates them
//! (`set_bind_wr` behind `mlx5_bind_mw` and IBV_WR_BIND_MW / `mlx5_send_wr_bind_mw`,
//! IBV_WR_LOCAL_INV, a peer's SEND with invalidate): what pyverbs' `test_mr.py` MW tests and
//! `test_qpex.py`'s `test_qp_ex_rc_bind_mw` drive. B holds a region and a window over part of
//! it; A reaches B's memory through the window's rkey.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RemoteRights, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::umr::{
    cqe_opcode, drain, pair_without_pg, placeholder_sq, post_and_drain, rdma_wqe, read_from_a,
    umr_on_b, write_from_a, CQE_REQ,
};
use cxdirect_emu::testkit::window::{
    alloc_mw, bind_wqe, local_inv_wqe, BindInfo, MwAccess, MwType, UNBOUND,
};
use cxdirect_emu::testkit::Host;
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::hca;
use cxdirect_hw::mkey::{DestroyMkeyIn, MKC_ACCESS_MODE_KLM};
use cxdirect_hw::wqe::{opcode, CtrlSeg};

const CQE_REQ_ERR: u8 = 0xd;
const CQE_RESP_SEND_INV: u8 = 0x4;
const CQE_RESP_ERR: u8 = 0xe;
const SYND_MW_BIND: u8 = 0x06;
const SYND_REMOTE_ACCESS: u8 = 0x13;
const SYND_REMOTE_INVALID_REQUEST: u8 = 0x12;

/// Bytes of B's region, and where the window lies in it.
const REGION: u64 = 8192;
const WINDOW_AT: u64 = 1024;
const WINDOW: u64 = 4096;

/// B's side of a window test: the pair, the region's buffer and lkey, and the window.
struct Setup {
    p: RcPair,
    buf: u64,
    mr: u32,
    mw: u32,
}

/// A pair whose B holds a region of [`REGION`] bytes registered as pyverbs' `MWRC.create_mr`
/// does (local write and MW bind: no remote rights of its own) and a window of `ty`.
fn setup(ty: MwType) -> Setup {
    setup_on(pair_without_pg(), ty)
}

/// [`setup`] on the pair `p`.
fn setup_on(mut p: RcPair, ty: MwType) -> Setup {
    let pd = p.b.pd;
    let buf = p.b.alloc(REGION, 4096);
    p.b.write(buf, &vec![0; REGION as usize]);
    let mr =
        p.b.create_remote_mkey(pd, buf, REGION, RemoteRights::default(), 0x31);
    let mw = alloc_mw(&mut p.b, pd, ty, 0x07);
    Setup { p, buf, mr, mw }
}

/// The bind info of the window over [`WINDOW_AT`]..+[`WINDOW`] of the region, with `access`.
fn window_of(s: &Setup, access: MwAccess) -> BindInfo {
    BindInfo {
        mr_lkey: s.mr,
        addr: s.buf + WINDOW_AT,
        len: WINDOW,
        access,
    }
}

/// B posts the bind of its window (as it is, `s.mw`) to `new_rkey` with `bind`: the
/// completions.
fn bind_on_b(s: &mut Setup, ty: MwType, new_rkey: u32, bind: BindInfo) -> Vec<Vec<u8>> {
    let w = bind_wqe(&s.p.qp_b.sq, s.p.qp_b.qpn, s.mw, ty, new_rkey, bind);
    umr_on_b(&mut s.p, &w)
}

/// B's window bound as `mlx5_bind_mw` (type 1) or IBV_WR_BIND_MW (type 2) binds it, to the
/// next variant (`ibv_inc_rkey`), all rights: the new rkey.
fn bound(ty: MwType) -> (Setup, u32) {
    let mut s = setup(ty);
    let rkey = s.mw + 1;
    let bind = window_of(&s, MwAccess::ALL);
    let done = bind_on_b(&mut s, ty, rkey, bind);
    assert_eq!(done.len(), 1, "the bind completes");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "the bind succeeds");
    assert_eq!(done[0][0x38], opcode::UMR, "as a UMR (IBV_WC_BIND_MW)");
    s.mw = rkey;
    (s, rkey)
}

/// A's fetch-and-add of `add` at `iova` through `rkey`: the completion and the value found.
fn fetch_add_from_a(p: &mut RcPair, iova: u64, rkey: u32, add: u64) -> (u8, u64) {
    let lkey = p.a.create_mkey(false, true);
    let result = p.a.alloc(8, 8);
    let w = rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_FA,
        0,
        Some((iova, rkey)),
        Some((add, 0)),
        (result, lkey, 8),
    );
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "one completion for the atomic");
    let found = u64::from_be_bytes(p.a.read(result, 8).try_into().expect("8 bytes"));
    (cqe_opcode(&done[0]), found)
}

/// A's SEND with invalidate of `rkey` to B (a receive posted there first): A's completion and
/// B's (opcode and syndrome each).
fn send_inv_from_a(p: &mut RcPair, rkey: u32) -> ((u8, u8), (u8, u8)) {
    let lkey_a = p.a.create_mkey(false, true);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let src = p.a.alloc(4096, 4096);
    let mut w = rdma_wqe(&p.qp_a.sq, opcode::SEND_INVAL, (0, 0), (src, lkey_a), 64, 0);
    // A SEND's segments: control then data (no remote address segment).
    w.copy_within(32..48, 16);
    w[32..48].fill(0);
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_ds(2)
        .set_imm(rkey);
    let mut sq = std::mem::replace(&mut p.qp_a.sq, placeholder_sq());
    let done = post_and_drain(p, false, &mut sq, &w);
    p.qp_a.sq = sq;
    let resp = drain(&p.b, &mut p.cq_b);
    let of = |c: &Vec<u8>| (cqe_opcode(c), c[0x37]);
    (of(&done[0]), of(&resp[0]))
}

/// `mlx5_ib_query_device` reports IB_DEVICE_MEM_WINDOW and _TYPE_2B, and mlx5_ib registers
/// ALLOC_MW, on `imaicl` alone; `mlx5_ib_alloc_mw`'s CREATE_MKEY then gives a free KLM window.
#[test]
fn mlx5_ib_sees_imaicl_and_mlx5_ib_alloc_mw_gets_a_free_klm_window() {
    let dev = cxdirect_emu::Device::new(cxdirect_emu::EmuConfig::default());
    let mut h = Host::new(dev, 4 << 20);
    h.bring_up();
    let caps = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&caps[0x10..]).unwrap().imaicl());
    let s = setup(MwType::Two);
    let view = s.p.b.dev.memory_key(s.mw).expect("the window");
    assert!(view.free, "a window is created unbound");
    assert_eq!(view.access_mode, MKC_ACCESS_MODE_KLM);
    assert_eq!(view.qpn, UNBOUND);
    assert!(view.local_read && !view.remote_write);
}

/// `mlx5_bind_mw` (type 1, test_mw_type1): the window's new rkey reaches the region's memory
/// within the window's range and rights, by WRITE, READ and fetch-and-add; the window's rkey
/// before the bind, and a byte outside the window though inside the region, are refused.
#[test]
fn mlx5_bind_mw_opens_the_windows_range_of_the_region_to_write_read_and_atomics() {
    let (mut s, rkey) = bound(MwType::One);
    let at = s.buf + WINDOW_AT;
    let data: Vec<u8> = (0..WINDOW).map(|i| (i * 7) as u8).collect();
    assert_eq!(write_from_a(&mut s.p, at, rkey, &data), (CQE_REQ, 0));
    assert_eq!(
        s.p.b.read(at, WINDOW as usize),
        data,
        "landed in the region"
    );
    assert_eq!(
        s.p.b.read(s.buf, WINDOW_AT as usize),
        vec![0; WINDOW_AT as usize],
        "nothing before the window"
    );
    let (op, bytes) = read_from_a(&mut s.p, at + 100, rkey, 200);
    assert_eq!((op, bytes), (CQE_REQ, data[100..300].to_vec()));
    s.p.b.write(at + 64, &5u64.to_be_bytes());
    assert_eq!(fetch_add_from_a(&mut s.p, at + 64, rkey, 3), (CQE_REQ, 5));
    assert_eq!(s.p.b.read(at + 64, 8), 8u64.to_be_bytes());
    // Each refusal takes both QPs to error: one per fresh pair.
    let refusals: [(&str, i64, u32); 3] = [
        ("below the window", -1, 0),
        ("past the window", WINDOW as i64 - 4, 0),
        ("the rkey before the bind", 0, 1),
    ];
    for (what, offset, older) in refusals {
        let (mut s, rkey) = bound(MwType::One);
        let at = (s.buf + WINDOW_AT).wrapping_add_signed(offset);
        assert_eq!(
            write_from_a(&mut s.p, at, rkey - older, &[1; 8]),
            (CQE_REQ_ERR, SYND_REMOTE_ACCESS),
            "{what}"
        );
    }
}

/// `mlx5_bind_mw` of length 0 (test_invalidate_mw_type1): the type 1 window is unbound, free,
/// and a remote access through its rkey fails with a remote access error.
#[test]
fn mlx5_bind_mw_of_length_0_unbinds_a_type_1_window() {
    let (mut s, rkey) = bound(MwType::One);
    let unbind = BindInfo {
        len: 0,
        ..window_of(&s, MwAccess::default())
    };
    let done = bind_on_b(&mut s, MwType::One, rkey + 1, unbind);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert!(s.p.b.dev.memory_key(rkey + 1).expect("window").free);
    assert_eq!(
        write_from_a(&mut s.p, s.buf + WINDOW_AT, rkey + 1, &[1; 8]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
}

/// IBV_WR_BIND_MW (`_mlx5_post_send` and `mlx5_send_wr_bind_mw`, test_mw_type2): the type 2
/// window is bound to the posting QP (`qpn` in `set_umr_mkey_seg`) and serves its peer.
#[test]
fn ibv_wr_bind_mw_binds_a_type_2_window_to_the_posting_qp() {
    let (mut s, rkey) = bound(MwType::Two);
    let view = s.p.b.dev.memory_key(rkey).expect("window");
    assert_eq!(view.qpn, s.p.qp_b.qpn);
    assert!(!view.free);
    assert_eq!((view.start, view.len), (s.buf + WINDOW_AT, WINDOW));
    let at = s.buf + WINDOW_AT + 8;
    assert_eq!(write_from_a(&mut s.p, at, rkey, &[9; 512]), (CQE_REQ, 0));
    assert_eq!(s.p.b.read(at, 512), vec![9; 512]);
}

/// The same with `pg` reported (the default configuration, as the rig runs, under which the
/// window key is created in page-access mode) over a region of MTT entries; QUERY_MKEY reads
/// the bound QP and the new variant back.
#[test]
fn a_type_2_window_binds_and_serves_with_pg_reported_and_query_mkey_reads_its_qp() {
    use cxdirect_hw::mkey::{QueryMkeyIn, QueryMkeyOut};
    let pair = RcPair::new(
        cxdirect_emu::EmuConfig::default(),
        8 << 20,
        8,
        6,
        4,
        RcPath::to(GID_B, MAC_B, 0),
    );
    let mut s = setup_on(pair, MwType::Two);
    // A region of MTT entries (over all of B's memory) instead of a PA key.
    s.mr = s.p.b.create_mkey(true, true);
    let rkey = s.mw + 1;
    let bind = window_of(&s, MwAccess::ALL);
    let done = bind_on_b(&mut s, MwType::Two, rkey, bind);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    let at = s.buf + WINDOW_AT;
    assert_eq!(write_from_a(&mut s.p, at, rkey, &[3; 256]), (CQE_REQ, 0));
    assert_eq!(s.p.b.read(at, 256), vec![3; 256]);
    let mut input = Host::input(Opcode::QueryMkey, 0, 0x10);
    QueryMkeyIn::new(&mut input[..])
        .expect("layout")
        .set_mkey_index(rkey >> 8);
    let out = s.p.b.exec(&input, 0x130).expect("QUERY_MKEY");
    let out = QueryMkeyOut::new(&out[..]).expect("layout");
    let mkc = out.memory_key_mkey_entry();
    assert_eq!(mkc.qpn(), s.p.qp_b.qpn);
    assert_eq!(mkc.mkey_7_0(), rkey as u8);
    assert!(!mkc.free() && mkc.rw() && mkc.en_rinval());
}

/// A type 2 window serves requests on the QP it is bound to only (IBA 10.6.7.2): a WRITE
/// reaching B on another connected QP is refused.
#[test]
fn a_type_2_window_refuses_requests_on_another_qp() {
    let (mut s, rkey) = bound(MwType::Two);
    let p = &mut s.p;
    let qp_a2 = p.a.create_rc_qp(&p.cq_a, 6, 4, None);
    let qp_b2 = p.b.create_rc_qp(&p.cq_b, 6, 4, None);
    let path = RcPath::to(GID_B, MAC_B, 0);
    let to_b = RcPath {
        peer_gid: GID_B,
        peer_mac: MAC_B,
        remote_qpn: qp_b2.qpn,
        ..path
    };
    let to_a = RcPath {
        peer_gid: GID_A,
        peer_mac: MAC_A,
        remote_qpn: qp_a2.qpn,
        send_psn: path.receive_psn,
        receive_psn: path.send_psn,
        ..path
    };
    p.a.connect_rc(qp_a2.qpn, &to_b);
    p.b.connect_rc(qp_b2.qpn, &to_a);
    let first_a = std::mem::replace(&mut p.qp_a, qp_a2);
    let first_b = std::mem::replace(&mut p.qp_b, qp_b2);
    assert_eq!(
        write_from_a(p, s.buf + WINDOW_AT, rkey, &[1; 8]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    p.qp_a = first_a;
    p.qp_b = first_b;
    assert_eq!(
        write_from_a(p, s.buf + WINDOW_AT, rkey, &[1; 8]),
        (CQE_REQ, 0),
        "its own QP's peer is served"
    );
}

/// A type 2 bind checks the window is free (`MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE`): binding a
/// bound window again completes with the bind error and leaves it as it was.
#[test]
fn a_type_2_bind_of_a_bound_window_completes_with_the_mw_bind_error() {
    let (mut s, rkey) = bound(MwType::Two);
    let bind = BindInfo {
        addr: s.buf,
        len: 64,
        ..window_of(&s, MwAccess::ALL)
    };
    let done = bind_on_b(&mut s, MwType::Two, rkey + 1, bind);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_MW_BIND)
    );
    let view = s.p.b.dev.memory_key(rkey).expect("unchanged variant");
    assert_eq!((view.start, view.len), (s.buf + WINDOW_AT, WINDOW));
}

/// The bind rules a ConnectX holds libmlx5's bind to (those `set_bind_wr` checks only under
/// MW_DEBUG): each violation completes with IBV_WC_MW_BIND_ERR and leaves the window free.
#[test]
fn binds_breaking_the_rules_complete_with_the_mw_bind_error_and_change_nothing() {
    type Make = fn(&mut Setup) -> BindInfo;
    let cases: [(&str, Make); 5] = [
        ("remote write over a region without local write", |s| {
            let lkey = s.p.b.create_mkey(false, false);
            BindInfo {
                mr_lkey: lkey,
                ..window_of(s, MwAccess::ALL)
            }
        }),
        ("a window reaching past the region", |s| BindInfo {
            addr: s.buf + REGION - 100,
            len: 200,
            ..window_of(s, MwAccess::ALL)
        }),
        ("a region of another PD", |s| {
            let other = s.p.b.alloc_pd();
            let (buf, rights) = (s.buf, RemoteRights::default());
            let lkey = s.p.b.create_remote_mkey(other, buf, REGION, rights, 0x55);
            BindInfo {
                mr_lkey: lkey,
                ..window_of(s, MwAccess::ALL)
            }
        }),
        ("a region key that does not exist", |s| BindInfo {
            mr_lkey: s.mr ^ 0xff,
            ..window_of(s, MwAccess::ALL)
        }),
        ("a window of another PD than the QP's", |s| {
            let other = s.p.b.alloc_pd();
            s.mw = alloc_mw(&mut s.p.b, other, MwType::Two, 0x09);
            window_of(s, MwAccess::ALL)
        }),
    ];
    for (what, make) in cases {
        let mut s = setup(MwType::Two);
        let bind = make(&mut s);
        let next = s.mw + 1;
        let done = bind_on_b(&mut s, MwType::Two, next, bind);
        assert_eq!(done.len(), 1, "{what}: one completion");
        assert_eq!(
            (cqe_opcode(&done[0]), done[0][0x37]),
            (CQE_REQ_ERR, SYND_MW_BIND),
            "{what}: the bind error"
        );
        let view = s.p.b.dev.memory_key(s.mw).expect("the variant unchanged");
        assert!(view.free && view.qpn == UNBOUND, "{what}: still unbound");
    }
}

/// A window without remote write (test_qp_ex_rc_bind_mw: bound with local write only over a
/// region that grants remote write itself) refuses a remote write through its rkey.
#[test]
fn a_window_without_remote_write_refuses_a_remote_write() {
    let mut s = setup(MwType::Two);
    let pd = s.p.b.pd;
    let rights = RemoteRights {
        write: true,
        ..Default::default()
    };
    s.mr = s.p.b.create_remote_mkey(pd, s.buf, REGION, rights, 0x32);
    let local_only = MwAccess {
        local_write: true,
        ..Default::default()
    };
    let bind = window_of(&s, local_only);
    let next = s.mw + 1;
    let done = bind_on_b(&mut s, MwType::Two, next, bind);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(
        write_from_a(&mut s.p, s.buf + WINDOW_AT, s.mw + 1, &[1; 8]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
}

/// IBV_WR_LOCAL_INV of a type 2 window (libmlx5's `set_bind_wr` with an empty bind and
/// `MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN`, test_mw_type2_invalidate_local) frees it and its rkey
/// fails; invalidating a window bound to no QP (free) completes in error.
#[test]
fn ibv_wr_local_inv_frees_a_type_2_window_bound_to_the_qp() {
    let (mut s, rkey) = bound(MwType::Two);
    let w = local_inv_wqe(&s.p.qp_b.sq, s.p.qp_b.qpn, rkey);
    let done = umr_on_b(&mut s.p, &w);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "LOCAL_INV completes");
    // The new variant is the empty bind's (rkey 0's low byte).
    let view = s.p.b.dev.memory_key(rkey & !0xff).expect("window");
    assert!(view.free);
    assert_eq!(view.qpn, UNBOUND);
    assert_eq!(
        write_from_a(&mut s.p, s.buf + WINDOW_AT, rkey, &[1; 8]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    let mut s = setup(MwType::Two);
    let w = local_inv_wqe(&s.p.qp_b.sq, s.p.qp_b.qpn, s.mw);
    let done = umr_on_b(&mut s.p, &w);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_MW_BIND),
        "a window bound to no QP is not this QP's to invalidate"
    );
}

/// A SEND with invalidate of a type 2 window's rkey arriving on the QP it is bound to
/// (test_mw_type2_invalidate_remote; `en_rinval` from `mlx5_ib_alloc_mw`) frees it: B's receive
/// completes as a SEND with invalidate and the rkey fails.
#[test]
fn a_send_with_invalidate_frees_a_type_2_window() {
    let (mut s, rkey) = bound(MwType::Two);
    let (req, resp) = send_inv_from_a(&mut s.p, rkey);
    assert_eq!(req, (CQE_REQ, 0));
    assert_eq!(resp.0, CQE_RESP_SEND_INV);
    let view = s.p.b.dev.memory_key(rkey).expect("window");
    assert!(view.free && view.qpn == UNBOUND);
    assert_eq!(
        write_from_a(&mut s.p, s.buf + WINDOW_AT, rkey, &[1; 8]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
}

/// A type 1 window has no remote invalidation (`mlx5_ib_alloc_mw` sets `en_rinval` for type 2
/// only): a SEND with invalidate of its rkey is an invalid request, and it stays bound.
#[test]
fn a_send_with_invalidate_of_a_type_1_window_is_refused() {
    let (mut s, rkey) = bound(MwType::One);
    let (_, resp) = send_inv_from_a(&mut s.p, rkey);
    assert_eq!(resp, (CQE_RESP_ERR, SYND_REMOTE_INVALID_REQUEST));
    assert!(!s.p.b.dev.memory_key(rkey).expect("window").free);
}

/// DESTROY_MKEY of a bound window (`mlx5_ib_dealloc_mw`, test_mw_type2_invalidate_dealloc):
/// its rkey fails with a remote access error.
#[test]
fn mlx5_ib_dealloc_mw_closes_a_bound_window() {
    let (mut s, rkey) = bound(MwType::Two);
    let mut input = Host::input(Opcode::DestroyMkey, 0, 16);
    DestroyMkeyIn::new(&mut input[..])
        .expect("layout")
        .set_mkey_index(rkey >> 8);
    s.p.b.exec(&input, 16).expect("DESTROY_MKEY");
    assert!(s.p.b.dev.memory_key(rkey).is_none());
    assert_eq!(
        write_from_a(&mut s.p, s.buf + WINDOW_AT, rkey, &[1; 8]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
}

/// What `imaicl` also turns on: mlx5_ib reports IBK_SG_GAPS_REG with it, and kernel ULPs
/// (xprtrdma's `frwr_mr_init`, iSER) then register through KLM keys (`mlx5_alloc_sg_gaps_descs`,
/// IB_WR_REG_MR by `set_reg_wr`). A list of one KLM naming the PD's `local_dma_lkey` goes
/// inline, `set_reg_wr` copying only its 16 bytes into the 64 it posts: the rest is whatever
/// the ring held, never reached through the key, and the bind rules leave it alone.
#[test]
fn an_sg_gaps_registration_with_a_stale_inline_tail_opens_its_one_klm() {
    use cxdirect_emu::testkit::umr::{umr_wqe, List, FRWR_MASK};
    use cxdirect_emu::RESERVED_LKEY;
    use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut};
    use cxdirect_hw::umr::flags;
    let mut p = pair_without_pg();
    let pd = p.b.pd;
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    CreateMkeyIn::new(&mut input[..])
        .expect("layout")
        .memory_key_mkey_entry_mut()
        .set_free(true)
        .set_umr_en(true)
        .set_lr(true)
        .set_access_mode_1_0(MKC_ACCESS_MODE_KLM)
        .set_translations_octword_size(4)
        .set_pd(pd)
        .set_qpn(UNBOUND);
    let out =
        p.b.exec(&input, 16)
            .expect("CREATE_MKEY for IB_MR_TYPE_SG_GAPS");
    let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
    let key = mkey_from_index(index, 0x01);
    let target = p.b.alloc(4096, 4096);
    let iova = 0x7_0000_0000u64;
    let mut list = vec![0xa5u8; 64];
    list[..4].copy_from_slice(&4096u32.to_be_bytes());
    list[4..8].copy_from_slice(&RESERVED_LKEY.to_be_bytes());
    list[8..16].copy_from_slice(&target.to_be_bytes());
    let w = umr_wqe(
        &p.qp_b.sq,
        key,
        0,
        flags::CHECK_NOT_FREE,
        FRWR_MASK,
        4,
        None,
        |seg| {
            seg.set_rw(true)
                .set_rr(true)
                .set_lw(true)
                .set_lr(true)
                .set_umr_en(true)
                .set_access_mode_1_0(MKC_ACCESS_MODE_KLM)
                .set_qpn(UNBOUND)
                .set_mkey_7_0(key as u8)
                .set_en_rinval(true)
                .set_start_addr(iova)
                .set_len(4096)
                .set_translations_octword_size(8);
        },
        &List::Inline(list),
    );
    let done = umr_on_b(&mut p, &w);
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ, "IB_WR_REG_MR completes");
    assert_eq!(write_from_a(&mut p, iova + 8, key, &[4; 100]), (CQE_REQ, 0));
    assert_eq!(p.b.read(target + 8, 100), vec![4; 100]);
}
