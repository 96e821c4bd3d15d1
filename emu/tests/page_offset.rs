//! Queue buffers that start inside their first page: the `page_offset` of the QP, CQ and work
//! queue contexts, in quanta of 1/64 of the queue's page size, as mlx5_ib fills it
//! (`mlx5_umem_find_best_quantized_pgoff` with a scale of 64, called from `_create_user_qp`,
//! `create_cq_user`, `create_srq_user` and `create_rq`): a user buffer only part of a large
//! (huge) page arrives as that page plus an offset.

use cxdirect_emu::testkit::rc::{rc_wqe, RcPath, RcQp, GID_A, GID_B, MAC_A, MAC_B};
use cxdirect_emu::testkit::{CmdFail, Cq, Host, Sq};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cq::{CreateCqIn, CreateCqOut};
use cxdirect_hw::qp::{rq_type, service_type, CreateQpIn, CreateQpOut};
use cxdirect_hw::wqe::opcode;

const MEM: usize = 16 << 20;
const RQ_STRIDE: u64 = 64;

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

/// Where a queue's bytes go: pages of `4 KiB << log_page`, the buffer `page_offset` quanta
/// (each 1/64 of a page) into the first.
#[derive(Clone, Copy)]
struct Placement {
    log_page: u8,
    page_offset: u8,
}

impl Placement {
    fn page(self) -> u64 {
        4096 << self.log_page
    }

    fn offset(self) -> u64 {
        u64::from(self.page_offset) * (self.page() / 64)
    }

    /// Allocates room for `size` bytes placed so, poisoned; returns the first page's address
    /// and the number of pages.
    fn alloc(self, h: &mut Host, size: u64) -> (u64, usize) {
        let pages = (self.offset() + size).div_ceil(self.page());
        let base = h.alloc(pages * self.page(), self.page());
        h.write(base, &vec![0x5c; (pages * self.page()) as usize]);
        (base, pages as usize)
    }
}

/// CREATE_CQ of `2^log` 64-byte CQEs placed at `at`.
fn try_create_cq(h: &mut Host, log: u8, at: Placement) -> Result<Cq, CmdFail> {
    let (base, pages) = at.alloc(h, 64 << log);
    let buf = base + at.offset();
    for i in 0..(1u64 << log) {
        h.write(buf + i * 64 + 63, &[0xf1]);
    }
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateCq, 0, 0x110 + 8 * pages);
    let mut cmd = CreateCqIn::new(&mut input[..]).expect("layout");
    cmd.cq_context_mut()
        .set_log_cq_size(log)
        .set_uar_page(h.uar)
        .set_c_eqn(h.eqn as u8)
        .set_dbr_addr(dbr)
        .set_log_page_size(at.log_page)
        .set_page_offset(at.page_offset);
    for i in 0..pages {
        cmd.set_pas(i, base + i as u64 * at.page()).expect("room");
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

/// CREATE_QP (RC): a 16-entry receive ring of 64-byte WQEs then a 16-WQEBB send ring, placed
/// at `at`.
fn try_create_qp(h: &mut Host, cq: &Cq, at: Placement) -> Result<RcQp, CmdFail> {
    let (log_rq, log_sq) = (4u8, 4u8);
    let rq_bytes = RQ_STRIDE << log_rq;
    let (base, pages) = at.alloc(h, rq_bytes + (64 << log_sq));
    let buf = base + at.offset();
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8 * pages);
    let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
    cmd.qpc_mut()
        .set_st(service_type::RC)
        .set_pm_state(3)
        .set_user_index(h.next_user_index)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_rq_type(rq_type::REGULAR)
        .set_log_rq_size(log_rq)
        .set_log_rq_stride(2)
        .set_log_sq_size(log_sq)
        .set_log_msg_max(30)
        .set_ts_format(1)
        .set_dbr_addr(dbr)
        .set_log_page_size(at.log_page)
        .set_page_offset(at.page_offset);
    for i in 0..pages {
        cmd.set_pas(i, base + i as u64 * at.page()).expect("room");
    }
    let out = h.exec(&input, 16)?;
    h.next_user_index += 1;
    let qpn = CreateQpOut::new(&out[..]).expect("layout").qpn();
    Ok(RcQp {
        qpn,
        sq: Sq {
            sqn: qpn,
            buf: buf + rq_bytes,
            dbr,
            log: log_sq,
            pi: 0,
            bf_toggle: false,
        },
        rq_buf: Some(buf),
        rq_log: log_rq,
        rq_pi: 0,
        srq: None,
    })
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
fn qps_and_cqs_whose_buffers_start_inside_their_first_page_send_and_receive() {
    let (mut a, mut b) = hosts();
    // A: 4 KiB pages, the buffers 5 quanta (320 bytes) in; B: 8 KiB pages, 37 quanta of 128
    // bytes (4736 bytes: past the first 4 KiB of the first page).
    let at_a = Placement {
        log_page: 0,
        page_offset: 5,
    };
    let at_b = Placement {
        log_page: 1,
        page_offset: 37,
    };
    let mut cq_a = try_create_cq(&mut a, 6, at_a).expect("CQ at an offset");
    let mut cq_b = try_create_cq(&mut b, 6, at_b).expect("CQ at an offset");
    let mut qp_a = try_create_qp(&mut a, &cq_a, at_a).expect("QP at an offset");
    let mut qp_b = try_create_qp(&mut b, &cq_b, at_b).expect("QP at an offset");
    a.connect_rc(qp_a.qpn, &RcPath::to(GID_B, MAC_B, qp_b.qpn));
    b.connect_rc(qp_b.qpn, &RcPath::to(GID_A, MAC_A, qp_a.qpn));
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let (src_a, dst_a) = (a.alloc(4096, 4096), a.alloc(4096, 4096));
    let (src_b, dst_b) = (b.alloc(4096, 4096), b.alloc(4096, 4096));
    // Enough messages each way to wrap both rings and both CQs more than once.
    for i in 0..40u32 {
        let len = 100 + i;
        let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ (i as u8)).collect();
        a.write(src_a, &data);
        b.write(src_b, &data);
        b.post_rc_recv(&mut qp_b, dst_b, 4096, lkey_b);
        a.post_rc_recv(&mut qp_a, dst_a, 4096, lkey_a);
        let w = rc_wqe(&qp_a.sq, opcode::SEND, 0, None, None, (src_a, lkey_a, len));
        a.post(&mut qp_a.sq, &w, false);
        let w = rc_wqe(&qp_b.sq, opcode::SEND, 0, None, None, (src_b, lkey_b, len));
        b.post(&mut qp_b.sq, &w, false);
        settle(&a, &b);
        assert_eq!(b.read(dst_b, len as usize), data, "message {i} to B intact");
        assert_eq!(a.read(dst_a, len as usize), data, "message {i} to A intact");
        for (h, cq, name) in [(&a, &mut cq_a, "A"), (&b, &mut cq_b, "B")] {
            let cqes: Vec<_> = std::iter::from_fn(|| h.poll_cq(cq)).collect();
            assert_eq!(
                cqes.len(),
                2,
                "message {i}: {name} completes a send and a receive"
            );
            let opcodes: Vec<u8> = cqes.iter().map(|c| c[63] >> 4).collect();
            assert!(
                opcodes.contains(&0) && opcodes.contains(&2),
                "{name}: {opcodes:?}"
            );
            let recv = cqes.iter().find(|c| c[63] >> 4 == 2).expect("receive CQE");
            assert_eq!(be32(recv, 44), len, "{name}: byte count");
        }
    }
    // Nothing was written before either buffer's start.
    for (h, cq, at) in [(&a, &cq_a, at_a), (&b, &cq_b, at_b)] {
        let before = h.read(cq.buf - at.offset(), at.offset() as usize);
        assert!(
            before.iter().all(|&x| x == 0x5c),
            "CQ bytes before its start untouched"
        );
    }
    for (h, qp, at) in [(&a, &qp_a, at_a), (&b, &qp_b, at_b)] {
        let start = qp.rq_buf.expect("own ring");
        let before = h.read(start - at.offset(), at.offset() as usize);
        assert!(
            before.iter().all(|&x| x == 0x5c),
            "QP bytes before its start untouched"
        );
    }
}

#[test]
fn a_page_list_too_short_for_the_offset_and_the_buffer_is_refused() {
    let (mut a, _b) = hosts();
    let cq = a.create_cq(4);
    // 16 receive WQEs of 64 bytes and 16 WQEBBs: 2 KiB. Starting 63 quanta (4032 bytes) in,
    // it runs into a second page the one-entry list below does not name.
    let at = Placement {
        log_page: 0,
        page_offset: 63,
    };
    let dbr = a.alloc(8, 64);
    let page = a.alloc(4096, 4096);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8);
    let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
    cmd.qpc_mut()
        .set_st(service_type::RC)
        .set_pm_state(3)
        .set_pd(a.pd)
        .set_uar_page(a.uar)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_rq_type(rq_type::REGULAR)
        .set_log_rq_size(4)
        .set_log_rq_stride(2)
        .set_log_sq_size(4)
        .set_log_msg_max(30)
        .set_ts_format(1)
        .set_dbr_addr(dbr)
        .set_page_offset(at.page_offset);
    cmd.set_pas(0, page).expect("room");
    let got = a.exec(&input, 16).expect_err("a second page is needed");
    assert_eq!(
        got,
        CmdFail::status(CmdStatus::BadParameter, Syndrome::PasTooShort)
    );
}
