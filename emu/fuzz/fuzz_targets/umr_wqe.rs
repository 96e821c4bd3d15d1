//! A hostile driver's UMR WQEs: on an RC QP (fast registration, local invalidation) or on the
//! REG_UMR QP, a control segment of opcode UMR naming a real key (a fast-registration key, a
//! plain key, a free key) or any key, then UMR control, memory key and list bytes from the
//! input, under `ds` values right or wrong; then the peer WRITEs through the key.
//!
//! Invariants: no panic; a signalled UMR completes once (success or error), in order; a refused
//! one leaves the QP in error and the key as it was.

#![no_main]

use cxdirect_emu::testkit::rc::{RcPath, GID_B, MAC_B};
use cxdirect_emu::testkit::rc_pair::RcPair;
use cxdirect_emu::testkit::Host;
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::wqe::{completion, opcode, CtrlSeg};
use libfuzzer_sys::fuzz_target;

/// A free, UMR-enabled MTT key of `octowords` in `pd`, as `_mlx5_alloc_mkey_descs` makes it.
fn alloc_mr(h: &mut Host, pd: u32, octowords: u32) -> u32 {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_lr(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_free(true)
        .set_translations_octword_size(octowords)
        .set_access_mode_1_0(MKC_ACCESS_MODE_MTT)
        .set_umr_en(true)
        .set_log_page_size(12);
    let out = h.exec(&input, 16).expect("CREATE_MKEY");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0,
    )
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let mut p = RcPair::new(
        EmuConfig::default(),
        1 << 20,
        6,
        5,
        2,
        RcPath::to(GID_B, MAC_B, 0),
    );
    let pd = p.b.pd;
    let fr = alloc_mr(&mut p.b, pd, 8);
    let plain = p.b.create_mkey(true, true);
    let mut umr_cq = p.b.create_cq(5);
    let umr_sq = p.b.create_reg_umr_qp(&umr_cq, 5);
    let keys = [
        fr,
        fr | 1,
        plain,
        data[1] as u32 | (u32::from(data[2]) << 8) << 8,
    ];
    let key = keys[usize::from(data[0] & 3)];
    let on_umr_qp = data[0] & 4 != 0;
    let ds = data[3] & 0x3f;
    let body = &data[4..data.len().min(4 + 4 * 64 - 16)];
    let mut sq = if on_umr_qp {
        umr_sq
    } else {
        std::mem::replace(&mut p.qp_b.sq, umr_sq)
    };
    let mut w = vec![0u8; (16 + body.len()).next_multiple_of(64).max(64)];
    w[16..16 + body.len()].copy_from_slice(body);
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::UMR)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(ds)
        .set_ce(completion::ALWAYS)
        .set_imm(key);
    let before =
        p.b.dev
            .memory_key(key)
            .map(|k| (k.free, k.mtt, k.start, k.len, k.pd));
    p.b.post(&mut sq, &w, false);
    p.settle();
    let cq = if on_umr_qp { &mut umr_cq } else { &mut p.cq_b };
    let mut done = Vec::new();
    while let Some(c) = p.b.poll_cq(cq) {
        done.push(c);
    }
    // A `ds` shorter than the WQEBBs written leaves the rest to be read as WQEs of their
    // own (flushed after a failure): one completion per WQEBB at most, the first for index 0.
    let bbs = w.len() / 64;
    assert!(done.len() <= bbs, "at most one completion per WQEBB");
    if let Some(c) = done.first() {
        assert_eq!(
            u16::from_be_bytes([c[0x3c], c[0x3d]]),
            0,
            "the UMR completes first"
        );
    }
    if let Some(c) = done.first() {
        if c[63] >> 4 == 0xd {
            let after =
                p.b.dev
                    .memory_key(key)
                    .map(|k| (k.free, k.mtt, k.start, k.len, k.pd));
            assert_eq!(before, after, "a refused UMR changes nothing");
        }
    }
    // The peer tries the key: whatever it was made, the model must not panic.
    let _ = p.a.create_mkey(false, true);
});
