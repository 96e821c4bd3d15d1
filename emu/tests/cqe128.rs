//! 128-byte CQ entries (`cqe_sz` 1), as libmlx5 asks for them (`get_cqe_size`: the
//! `MLX5_CQE_SIZE=128` environment variable or `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`) and mlx5_ib
//! passes them on (`create_cq_user`, `cqe_sz_to_mlx_sz`): each entry's 64-byte CQE sits in its
//! second half, owner bit included, where libmlx5's `get_sw_cqe` / `mlx5_get_next_cqe` and
//! mlx5_ib's `get_sw_cqe` read it (`cqe + 64` when `cqe_sz` is 128).

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cq::{CreateCqIn, CreateCqOut};
use cxdirect_hw::cqe::{
    cqe_format, mini_array_slot, mini_cqe_res_format, Cqe64, MiniCqe8, MINI_CQE_SIZE,
};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::wqe::opcode;

const MEM: usize = 16 << 20;
const ENTRY: u64 = 128;

fn hosts() -> (Host, Host) {
    let side = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = Device::pair(side(MAC_A), side(MAC_B));
    let (mut a, mut b) = (Host::new(da, MEM), Host::new(db, MEM));
    a.bring_up();
    b.bring_up();
    a.enable_roce(GID_A, MAC_A);
    b.enable_roce(GID_B, MAC_B);
    (a, b)
}

/// CREATE_CQ of `2^log` entries of `cqe_sz`, the rest of the context as `fill` leaves it; the
/// buffer initialised as libmlx5's `mlx5_alloc_cq_buf` does (every first half poisoned here,
/// every CQE's `op_own` invalid).
fn try_create_cq(
    h: &mut Host,
    log: u8,
    cqe_sz: u8,
    fill: impl FnOnce(&mut cxdirect_hw::cq::Cqc<&mut [u8]>),
) -> Result<Cq, CmdFail> {
    let bytes = ENTRY << log;
    let buf = h.alloc(bytes, 4096);
    h.write(buf, &vec![0xa5; bytes as usize]);
    for i in 0..(1u64 << log) {
        h.write(buf + i * ENTRY + 64 + 63, &[0xf0]);
    }
    let dbr = h.alloc(8, 64);
    let pages = bytes.div_ceil(4096) as usize;
    let mut input = Host::input(Opcode::CreateCq, 0, 0x110 + 8 * pages);
    let mut cmd = CreateCqIn::new(&mut input[..]).expect("layout");
    let mut ctx = cmd.cq_context_mut();
    ctx.set_log_cq_size(log)
        .set_cqe_sz(cqe_sz)
        .set_uar_page(h.uar)
        .set_c_eqn(h.eqn as u8)
        .set_dbr_addr(dbr);
    fill(&mut ctx);
    for i in 0..pages {
        cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
    }
    let out = h.exec(&input, 16)?;
    Ok(Cq {
        cqn: CreateCqOut::new(&out[..]).expect("layout").cqn(),
        buf,
        dbr,
        log,
        ci: 0,
    })
}

/// The next CQE software owns on a CQ of 128-byte entries, read where libmlx5 reads it, and
/// the entry's first half.
fn poll128(h: &Host, cq: &mut Cq) -> Option<(Vec<u8>, Vec<u8>)> {
    let slot = u64::from(cq.ci & ((1 << cq.log) - 1));
    let entry = h.read(cq.buf + slot * ENTRY, ENTRY as usize);
    let cqe = entry[64..].to_vec();
    if cqe[63] >> 4 == 0xf || !cxdirect_hw::cqe::sw_owns(cqe[63], cq.ci, cq.log) {
        return None;
    }
    cq.ci += 1;
    h.write_be32(cq.dbr, cq.ci & 0xff_ffff);
    Some((cqe, entry[..64].to_vec()))
}

fn settle(a: &Host, b: &Host) {
    for _ in 0..4 {
        b.dev.poll();
        a.dev.poll();
    }
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

#[test]
fn rc_completions_land_in_the_second_half_of_128_byte_entries_with_the_owner_bit_there() {
    let (mut a, mut b) = hosts();
    // 16 entries: forty messages wrap each CQ five times over (two CQEs per message).
    let mut cq_a = try_create_cq(&mut a, 4, 1, |_| {}).expect("128-byte CQEs");
    let mut cq_b = try_create_cq(&mut b, 4, 1, |_| {}).expect("128-byte CQEs");
    let mut qp_a = a.create_rc_qp(&cq_a, 4, 4, None);
    let mut qp_b = b.create_rc_qp(&cq_b, 4, 4, None);
    a.connect_rc(qp_a.qpn, &RcPath::to(GID_B, MAC_B, qp_b.qpn));
    b.connect_rc(qp_b.qpn, &RcPath::to(GID_A, MAC_A, qp_a.qpn));
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let src = a.alloc(4096, 4096);
    let dst = b.alloc(4096, 4096);
    for i in 0..40u32 {
        let len = 1 + i * 7;
        let data: Vec<u8> = (0..len)
            .map(|k| (k as u8).wrapping_mul(3) ^ i as u8)
            .collect();
        a.write(src, &data);
        b.post_rc_recv(&mut qp_b, dst, 4096, lkey_b);
        let index = qp_a.sq.pi;
        let w = rc_wqe(&qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, len));
        a.post(&mut qp_a.sq, &w, false);
        settle(&a, &b);
        assert_eq!(b.read(dst, len as usize), data, "message {i} intact");
        let (resp, first) = poll128(&b, &mut cq_b).expect("a responder CQE");
        assert_eq!(resp[63] >> 4, 2, "message {i}: RESP_SEND");
        assert_eq!(be32(&resp, 44), len, "message {i}: byte count");
        assert_eq!(be32(&resp, 56) & 0xff_ffff, qp_b.qpn, "message {i}: QPN");
        assert_eq!(
            first,
            vec![0xa5; 64],
            "message {i}: the first half is not written"
        );
        assert!(poll128(&b, &mut cq_b).is_none(), "one responder CQE");
        let (req, first) = poll128(&a, &mut cq_a).expect("a requester CQE");
        assert_eq!(req[63] >> 4, 0, "message {i}: REQ");
        assert_eq!(u16::from_be_bytes([req[60], req[61]]), index);
        assert_eq!(be32(&req, 56), (u32::from(opcode::SEND) << 24) | qp_a.qpn);
        assert_eq!(
            first,
            vec![0xa5; 64],
            "message {i}: the first half is not written"
        );
        assert!(poll128(&a, &mut cq_a).is_none(), "one requester CQE");
    }
}

/// Padded 128-byte entries (`cqe_sz` 2, mlx5_ib's `CQE_STRIDE_128_PAD` for libmlx5's
/// `MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD`): the CQE where an unpadded entry has it, and the device
/// writing the whole entry, so the first half no longer holds what was there.
#[test]
fn padded_128_byte_entries_are_written_whole_with_the_cqe_in_the_second_half() {
    let (mut a, mut b) = hosts();
    let general = a.query_cap(cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    assert!(general.cqe_128_always(), "cqe_128_always reported");
    let mut cq_a = try_create_cq(&mut a, 3, 2, |_| {}).expect("padded 128-byte CQEs");
    let mut cq_b = try_create_cq(&mut b, 3, 2, |_| {}).expect("padded 128-byte CQEs");
    let mut qp_a = a.create_rc_qp(&cq_a, 4, 4, None);
    let mut qp_b = b.create_rc_qp(&cq_b, 4, 4, None);
    a.connect_rc(qp_a.qpn, &RcPath::to(GID_B, MAC_B, qp_b.qpn));
    b.connect_rc(qp_b.qpn, &RcPath::to(GID_A, MAC_A, qp_a.qpn));
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let src = a.alloc(4096, 4096);
    let dst = b.alloc(4096, 4096);
    // Twenty messages wrap the 8-entry CQs: every pass writes whole entries.
    for i in 0..20u32 {
        let len = 3 + i * 11;
        let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ (i as u8)).collect();
        a.write(src, &data);
        b.post_rc_recv(&mut qp_b, dst, 4096, lkey_b);
        let w = rc_wqe(&qp_a.sq, opcode::SEND, 0, None, None, (src, lkey_a, len));
        a.post(&mut qp_a.sq, &w, false);
        settle(&a, &b);
        assert_eq!(b.read(dst, len as usize), data, "message {i} intact");
        let (resp, first) = poll128(&b, &mut cq_b).expect("a responder CQE");
        assert_eq!(resp[63] >> 4, 2, "message {i}: RESP_SEND");
        assert_eq!(be32(&resp, 44), len, "message {i}: byte count");
        assert_eq!(first, vec![0; 64], "message {i}: the padding is written");
        let (req, first) = poll128(&a, &mut cq_a).expect("a requester CQE");
        assert_eq!(req[63] >> 4, 0, "message {i}: REQ");
        assert_eq!(first, vec![0; 64], "message {i}: the padding is written");
    }
}

/// Compressed 128-byte CQEs (`cqe_compression_128`, which mlx5_ib's `create_cq_user` asks
/// for before it passes `cqe_comp_en` on a 128-byte CQ): twenty receive completions in one
/// session, the title in entry 0 and the mini-CQE arrays in entries 1, 8 and 16, each in its
/// entry's second half, where DPDK's mlx5 PMD reads them on a 128-byte cache line
/// (`struct mlx5_cqe` with 64 bytes of padding first, the mini-CQE array at `pkt_info`). The
/// first halves are left alone, or written as zeros when the CQ is padded.
#[test]
fn compressed_sessions_in_128_byte_entries_sit_in_the_second_halves() {
    for (cqe_sz, first_half) in [(1u8, 0xa5u8), (2, 0)] {
        let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
        h.bring_up();
        let key = h.create_mkey(true, true);
        let mut cq = try_create_cq(&mut h, 6, cqe_sz, |c| {
            c.set_cqe_comp_en(true)
                .set_mini_cqe_res_format(mini_cqe_res_format::HASH);
        })
        .expect("compressed 128-byte CQ");
        let mut rq = h.create_rq(cq.cqn, 6, None);
        h.steer_all_to(rq.rqn);
        for _ in 0..32 {
            let buf = h.alloc(2048, 64);
            h.post_recv(&mut rq, buf, 2048, key);
        }
        let frames: Vec<Vec<u8>> = (0..20).map(|i| udp_frame(60 + 3 * i, i as u8)).collect();
        h.arrive(&frames);

        let (title, half) = poll128(&h, &mut cq).expect("the session's title");
        assert_eq!(
            half,
            vec![first_half; 64],
            "cqe_sz {cqe_sz}: title's first half"
        );
        let t = Cqe64::new(&title[..]).unwrap();
        assert_eq!(t.cqe_format(), cqe_format::COMPRESSED);
        assert_eq!((t.byte_cnt(), t.wqe_counter()), (20, 0));
        for (i, frame) in frames.iter().enumerate() {
            let entry = u64::from(mini_array_slot(i as u32));
            let bytes = h.read(cq.buf + entry * ENTRY, ENTRY as usize);
            assert_eq!(
                &bytes[..64],
                &[first_half; 64][..],
                "entry {entry}'s first half"
            );
            let at = 64 + (i % 8) * MINI_CQE_SIZE;
            let mini = MiniCqe8::new(&bytes[at..at + MINI_CQE_SIZE]).unwrap();
            assert_eq!(mini.byte_cnt(), frame.len() as u32, "completion {i}");
        }
        let c = h.dev.counters();
        assert_eq!((c.cqes, c.compressed_sessions), (20, 1));
    }
}

#[test]
fn cqe_sizes_and_modes_this_device_does_not_write_are_refused() {
    let (mut a, _b) = hosts();
    let bad = CmdFail::status(CmdStatus::BadParameter, Syndrome::BadWqParams);
    // Reserved encodings.
    for cqe_sz in 3..8 {
        let got = try_create_cq(&mut a, 4, cqe_sz, |_| {}).err();
        assert_eq!(got, Some(bad), "cqe_sz {cqe_sz}");
    }
    // A collapsed CQ.
    let got = try_create_cq(&mut a, 4, 1, |c| {
        c.set_cc(true);
    })
    .err();
    assert_eq!(got, Some(bad), "collapsed");
    // The page list must cover 128-byte entries: 64 of them are two pages.
    let buf = a.alloc(8192, 4096);
    let dbr = a.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateCq, 0, 0x110 + 8);
    let mut cmd = CreateCqIn::new(&mut input[..]).expect("layout");
    cmd.cq_context_mut()
        .set_log_cq_size(6)
        .set_cqe_sz(1)
        .set_uar_page(a.uar)
        .set_c_eqn(a.eqn as u8)
        .set_dbr_addr(dbr);
    cmd.set_pas(0, buf).expect("room");
    assert_eq!(
        a.exec(&input, 16).err(),
        Some(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::PasTooShort
        ))
    );
}
