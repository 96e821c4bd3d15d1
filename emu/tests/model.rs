//! The model driven alone, through hand-built commands, WQEs and doorbells.

use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::dma::{Access, HostRegion};
use cxdirect_emu::irq::RecordingSink;
use cxdirect_emu::testkit::{self as support, udp_frame, CmdFail, Host};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::cmd::{CmdMailbox, CmdStatus, DeliveryStatus, Opcode};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::hca::{self, query_pages_op_mod};
use cxdirect_hw::tir::{CreateRqtIn, CreateTirIn};
use cxdirect_hw::wq::{
    ModifyRmpIn, ModifyRqIn, ModifySqIn, QueryRmpOut, MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID,
};
use cxdirect_hw::wqe::EthSeg;
use etherparse::{
    EtherType, IpNumber, LinkHeader, NetHeaders, PacketBuilder, PacketHeaders, TransportHeader,
};
use pcap_parser::{Linktype, PcapCapture};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MEM: usize = 64 << 20;

fn host() -> Host {
    Host::new(Device::loopback(EmuConfig::default()), MEM)
}

#[test]
fn bring_up_and_teardown_return_every_page() {
    let mut h = host();
    h.bring_up();
    assert!(
        h.dev.firmware_pages_held() >= 80,
        "boot and init pages held"
    );
    let out = h
        .exec(&Host::input(Opcode::QueryIssi, 0, 16), 0x70)
        .unwrap();
    let issi = hca::QueryIssiOut::new(&out[..]).unwrap();
    assert_eq!(issi.current_issi(), 1);
    assert_eq!(issi.supported_issi_dw0() & 0b11, 0b11);
    h.teardown();
    assert_eq!(h.dev.firmware_pages_held(), 0);
    assert_eq!(h.dev.firmware_pages_leaked(), 0);
    assert_eq!(h.dev.object_counts(), [0; 6]);
    // And again: the function can be brought up a second time.
    h.bring_up();
    h.teardown();
    assert_eq!(h.dev.firmware_pages_held(), 0);
}

#[test]
fn life_cycle_order_is_enforced() {
    let mut h = host();
    h.start_cmdif();
    assert_eq!(
        h.simple(Opcode::AllocPd, 0),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
    h.simple(Opcode::EnableHca, 0).unwrap();
    assert_eq!(h.query_pages(query_pages_op_mod::BOOT), 16);
    assert_eq!(h.query_pages(query_pages_op_mod::INIT), 80);
    // SET_HCA_CAP needs the boot pages first; INIT_HCA needs the init pages.
    assert_eq!(
        h.exec(&Host::input(Opcode::SetHcaCap, 0, 0x1010), 16),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
    h.give_pages(16).unwrap();
    assert_eq!(h.query_pages(query_pages_op_mod::BOOT), 0);
    assert_eq!(
        h.simple(Opcode::InitHca, 0),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::PagesMissing
        ))
    );
    h.give_pages(64).unwrap();
    h.simple(Opcode::InitHca, 0).unwrap();
    assert_eq!(
        h.simple(Opcode::InitHca, 0),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
}

#[test]
fn pages_are_checked_when_given() {
    let mut h = host();
    h.start_cmdif();
    h.simple(Opcode::EnableHca, 0).unwrap();
    let page = h.alloc(4096, 4096);
    assert_eq!(
        h.give_these(&[page + 8]),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::PageMisaligned
        ))
    );
    assert_eq!(
        h.give_these(&[page, page]),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::PageDuplicate
        ))
    );
    h.give_these(&[page]).unwrap();
    assert_eq!(
        h.give_these(&[page]),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::PageDuplicate
        ))
    );
    assert_eq!(
        h.give_these(&[0x4000]),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::PageUnreachable
        ))
    );
}

#[test]
fn mailbox_chains_of_one_two_and_forty_blocks() {
    for (pages, blocks) in [(64usize, 1usize), (100, 2), (2560, 40)] {
        let mut h = host();
        h.start_cmdif();
        h.simple(Opcode::EnableHca, 0).unwrap();
        assert_eq!(cxdirect_hw::cmd::mailbox_blocks(16 + 8 * pages), blocks);
        h.give_pages(pages).unwrap();
        assert_eq!(
            h.dev.firmware_pages_held(),
            pages,
            "{blocks}-block chain delivered every page"
        );
        // And back out through an output chain of the same length.
        h.simple(Opcode::InitHca, 0).unwrap_or_default();
        h.simple(Opcode::TeardownHca, 0).ok();
        let got = h.take_pages(pages);
        assert_eq!(got, pages);
        assert_eq!(h.dev.firmware_pages_held(), 0);
    }
}

#[test]
fn malformed_entries_and_chains_get_delivery_errors() {
    let mut h = host();
    h.start_cmdif();
    h.simple(Opcode::EnableHca, 0).unwrap();
    let input = {
        let mut i = Host::input(
            Opcode::ManagePages,
            hca::manage_pages_op_mod::GIVE,
            16 + 8 * 100,
        );
        hca::ManagePagesIn::new(&mut i[..])
            .unwrap()
            .set_input_num_entries(0);
        i
    };
    let mem = h.mem.clone();
    let write_block = move |addr: u64, f: &dyn Fn(&mut CmdMailbox<[u8; 576]>)| {
        let mut b = CmdMailbox::zeroed();
        mem.read((addr - support::IOVA_BASE) as usize, b.as_bytes_mut())
            .unwrap();
        f(&mut b);
        mem.write((addr - support::IOVA_BASE) as usize, b.as_bytes())
            .unwrap();
    };
    let wb = &write_block;
    let r = h.exec_with(&input, 16, |blocks| {
        wb(blocks[1], &|b| {
            b.set_block_num(7);
        })
    });
    assert_eq!(
        r,
        Err(CmdFail::Delivery(DeliveryStatus::BadBlockNumber as u8))
    );
    let r = h.exec_with(&input, 16, |blocks| {
        wb(blocks[0], &|b| {
            b.set_token(0xee);
        })
    });
    assert_eq!(r, Err(CmdFail::Delivery(DeliveryStatus::TokenError as u8)));
    let r = h.exec_with(&input, 16, |blocks| {
        wb(blocks[0], &|b| {
            b.set_next(0x1234);
        })
    });
    assert_eq!(
        r,
        Err(CmdFail::Delivery(
            DeliveryStatus::InputPointerAlignment as u8
        ))
    );
    // Nothing was given by the refused commands.
    assert_eq!(h.dev.firmware_pages_held(), 0);
    // Unknown opcode and short input are command statuses, not delivery errors.
    assert_eq!(
        h.exec(&[0x77, 0x77, 0, 0, 0, 0, 0, 0], 16),
        Err(CmdFail::status(
            CmdStatus::BadInputLength,
            Syndrome::InputTooShort
        ))
    );
    let mut unknown = Host::input(Opcode::Nop, 0, 16);
    unknown[0..2].copy_from_slice(&0x7777u16.to_be_bytes());
    assert_eq!(
        h.exec(&unknown, 16),
        Err(CmdFail::status(
            CmdStatus::BadOpcode,
            Syndrome::UnknownOpcode
        ))
    );
}

#[test]
fn object_rules_are_enforced() {
    let mut h = host();
    h.bring_up();
    // A CQ needs an existing EQ.
    let mut input = Host::input(Opcode::CreateCq, 0, 0x118);
    {
        let mut cmd = cxdirect_hw::cq::CreateCqIn::new(&mut input[..]).unwrap();
        cmd.cq_context_mut()
            .set_log_cq_size(4)
            .set_uar_page(h.uar)
            .set_c_eqn(63)
            .set_dbr_addr(support::IOVA_BASE);
        cmd.set_pas(0, support::IOVA_BASE).unwrap();
    }
    assert_eq!(
        h.exec(&input, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let cq = h.create_cq(4);
    // An EQ with a CQ attached cannot be destroyed.
    let mut destroy = Host::input(Opcode::DestroyEq, 0, 16);
    destroy[0xb] = h.eqn as u8;
    assert_eq!(
        h.exec(&destroy, 16),
        Err(CmdFail::status(
            CmdStatus::BadResourceState,
            Syndrome::ObjectInUse
        ))
    );
    // An SQ must use 64-byte WQE strides.
    let tisn = h.create_tis();
    let mut sq_in = Host::input(Opcode::CreateSq, 0, 0x118);
    {
        let mut cmd = cxdirect_hw::wq::CreateSqIn::new(&mut sq_in[..]).unwrap();
        let mut ctx = cmd.ctx_mut();
        ctx.set_cqn(cq.cqn).set_tis_num_0(tisn);
        ctx.wq_mut()
            .set_wq_type(1)
            .set_pd(h.pd)
            .set_uar_page(h.uar)
            .set_dbr_addr(support::IOVA_BASE)
            .set_log_wq_stride(5)
            .set_log_wq_sz(4);
        cmd.set_pas(0, support::IOVA_BASE).unwrap();
    }
    assert_eq!(
        h.exec(&sq_in, 16),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadWqParams
        ))
    );
    let sq = h.create_sq(cq.cqn, tisn, 4);
    // MODIFY_SQ must name the current state; ERR -> RDY is not allowed.
    let mut modify = Host::input(Opcode::ModifySq, 0, 0x110);
    {
        let mut m = ModifySqIn::new(&mut modify[..]).unwrap();
        m.set_sq_state(0).set_sqn(sq.sqn);
        m.ctx_mut().set_state(1);
    }
    assert_eq!(
        h.exec(&modify, 16),
        Err(CmdFail::status(
            CmdStatus::BadResourceState,
            Syndrome::StateMismatch
        ))
    );
    // The CQ is in use by the SQ.
    let mut destroy_cq = Host::input(Opcode::DestroyCq, 0, 16);
    destroy_cq[8..12].copy_from_slice(&cq.cqn.to_be_bytes());
    assert_eq!(
        h.exec(&destroy_cq, 16),
        Err(CmdFail::status(
            CmdStatus::BadResourceState,
            Syndrome::ObjectInUse
        ))
    );
    let mut destroy_sq = Host::input(Opcode::DestroySq, 0, 16);
    destroy_sq[8..12].copy_from_slice(&sq.sqn.to_be_bytes());
    h.exec(&destroy_sq, 16).unwrap();
    h.exec(&destroy_cq, 16).unwrap();
    h.exec(&destroy, 16).unwrap();
}

/// Sends `frames` from `tx` and checks each arrives byte-identical at `rx`.
fn send_and_check(tx: &mut Host, rx: &mut Host, frames: &[Vec<u8>], blueflame: bool) {
    let tx_key = tx.create_mkey(false, false);
    let rx_key = rx.create_mkey(true, true);
    let tx_cq_n = {
        let cq = tx.create_cq(6);
        (cq.cqn, cq)
    };
    let (_, mut tx_cq) = tx_cq_n;
    let tisn = tx.create_tis();
    let mut sq = tx.create_sq(tx_cq.cqn, tisn, 6);
    let mut rx_cq = rx.create_cq(6);
    let mut rq = rx.create_rq(rx_cq.cqn, 6, None);
    rx.steer_all_to(rq.rqn);
    let rx_bufs: Vec<u64> = (0..frames.len()).map(|_| rx.alloc(16384, 64)).collect();
    for &b in &rx_bufs {
        rx.post_recv(&mut rq, b, 16384, rx_key);
    }
    for (i, frame) in frames.iter().enumerate() {
        let payload = tx.alloc(frame.len() as u64, 64);
        let wqe = tx.build_send(&sq, frame, payload, tx_key, true);
        tx.post(&mut sq, &wqe, blueflame);
        let cqe = tx.poll_cq(&mut tx_cq).expect("send completion");
        assert_eq!(
            cqe[63] >> 4,
            CqeOpcode::Req as u8,
            "frame {i}: send completed without error"
        );
        let cqe = rx.poll_cq(&mut rx_cq).expect("receive completion");
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
        assert_eq!(c.byte_cnt() as usize, frame.len());
        assert_eq!(c.qpn(), 0, "sop_drop_qpn: no rule set a flow tag");
        assert_eq!(c.wqe_counter() as usize, i);
        assert!(c.l3_ok() && c.l4_ok(), "frame {i}: checksums verified");
        assert_eq!(
            &rx.read(rx_bufs[i], frame.len()),
            frame,
            "frame {i} arrived byte-identical"
        );
    }
}

#[test]
fn frames_cross_a_loopback_wire_byte_identical() {
    let mut h = host();
    h.bring_up();
    let frames: Vec<Vec<u8>> = [18, 60, 64, 100, 1000, 1472]
        .iter()
        .enumerate()
        .map(|(i, &n)| udp_frame(n, i as u8))
        .collect();
    let key = h.create_mkey(true, true);
    let mut tx_cq = h.create_cq(6);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(tx_cq.cqn, tisn, 6);
    let mut rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    let bufs: Vec<u64> = (0..frames.len()).map(|_| h.alloc(2048, 64)).collect();
    for &b in &bufs {
        h.post_recv(&mut rq, b, 2048, key);
    }
    for (i, frame) in frames.iter().enumerate() {
        let payload = h.alloc(frame.len() as u64, 64);
        let wqe = h.build_send(&sq, frame, payload, key, true);
        h.post(&mut sq, &wqe, i % 2 == 0);
        let sent = h.poll_cq(&mut tx_cq).expect("send completion");
        assert_eq!(
            sent[63] >> 4,
            CqeOpcode::Req as u8,
            "frame {i} sent without error"
        );
        let cqe = h
            .poll_cq(&mut rx_cq)
            .unwrap_or_else(|| panic!("receive completion: {:?}", h.dev.counters()));
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.byte_cnt() as usize, frame.len());
        assert_eq!(
            &h.read(bufs[i], frame.len()),
            frame,
            "frame {i} arrived byte-identical"
        );
    }
    let rq_counters = h.dev.queue_counters(QueueKind::Rq, rq.rqn).unwrap();
    assert_eq!(rq_counters.frames, frames.len() as u64);
}

#[test]
fn frames_cross_a_pair_byte_identical_with_and_without_blueflame() {
    for blueflame in [false, true] {
        let (a, b) = Device::pair(EmuConfig::default(), EmuConfig::default());
        let mut ha = Host::new(a, MEM);
        let mut hb = Host::new(b, MEM);
        ha.bring_up();
        hb.bring_up();
        ha.set_port_mtu(9022);
        hb.set_port_mtu(9022);
        let frames: Vec<Vec<u8>> = [18, 60, 333, 1500, 9000]
            .iter()
            .map(|&n| udp_frame(n.min(9000 - 42), n as u8))
            .collect();
        let before = ha.dev.counters();
        send_and_check(&mut ha, &mut hb, &frames, blueflame);
        let spent = ha.dev.counters().since(&before);
        assert_eq!(spent.doorbells, frames.len() as u64);
        if blueflame {
            assert_eq!(spent.bf_writes, frames.len() as u64);
            // Every WQE here fits one basic block, so BlueFlame spares every fetch.
            assert_eq!(spent.wqe_fetch_reads, 0, "BlueFlame spares the WQE fetch");
        } else {
            assert_eq!(spent.wqe_fetch_reads, frames.len() as u64);
        }
    }
}

#[test]
fn one_doorbell_for_many_wqes_fetches_them_a_read_request_at_a_time() {
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(true, true);
    let mut tx_cq = h.create_cq(7);
    let tisn = h.create_tis();
    // 64 WQEBBs: one 4 KiB page.
    let mut sq = h.create_sq(tx_cq.cqn, tisn, 6);
    let mut rx_cq = h.create_cq(7);
    let mut rq = h.create_rq(rx_cq.cqn, 7, None);
    h.steer_all_to(rq.rqn);
    for _ in 0..80 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    // 60 WQEs, then 12 more that wrap the ring, the last sent as BlueFlame.
    for (count, blueflame) in [(60, false), (12, true)] {
        let before = h.dev.counters();
        let first = payloads.len();
        let mut last = Vec::new();
        for i in first..first + count {
            let frame = udp_frame(40 + i, i as u8);
            let payload = h.alloc(frame.len() as u64, 64);
            last = h.build_send(&sq, &frame, payload, key, true);
            assert_eq!(last.len(), 64, "one WQEBB each");
            h.write_wqe(&mut sq, &last);
            payloads.push(frame);
        }
        h.ring(&mut sq, &last, blueflame);
        let spent = h.dev.counters().since(&before);
        let (reads, fetched) = if blueflame {
            // Up to the ring's end, then up to the BlueFlame WQE, which is not fetched.
            (2, 11)
        } else {
            // 512-byte read requests: eight WQEBBs each.
            (8, 60)
        };
        assert_eq!(spent.wqe_fetch_reads, reads);
        assert_eq!(spent.wqe_fetch_bytes, fetched * 64);
        for (i, frame) in payloads.iter().enumerate().skip(first) {
            let cqe = h.poll_cq(&mut tx_cq).expect("send completion");
            assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8, "WQE {i} sent");
            let cqe = h.poll_cq(&mut rx_cq).expect("receive completion");
            let c = Cqe64::new(&cqe[..]).unwrap();
            assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
            assert_eq!(c.byte_cnt() as usize, frame.len(), "frame {i} in order");
        }
    }
}

/// An IPv4/UDP frame with the given source port (so RSS can tell flows apart).
fn udp_flow(payload: usize, sport: u16) -> Vec<u8> {
    let mut f = udp_frame(payload, sport as u8);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[40..42].copy_from_slice(&[0, 0]);
    cxdirect_emu::packet::insert_checksums(&mut f, true, true).unwrap();
    f
}

struct Tx {
    key: u32,
    cq: support::Cq,
    sq: support::Sq,
}

fn tx_path(h: &mut Host, key: u32) -> Tx {
    let cq = h.create_cq(6);
    let tisn = h.create_tis();
    let sq = h.create_sq(cq.cqn, tisn, 6);
    Tx { key, cq, sq }
}

fn send(h: &mut Host, tx: &mut Tx, frame: &[u8]) -> Vec<u8> {
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&tx.sq, frame, payload, tx.key, true);
    h.post(&mut tx.sq, &wqe, false);
    h.poll_cq(&mut tx.cq).expect("send completion")
}

#[test]
fn shared_pool_limit_fires_once_per_arm_across_two_rqs() {
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(true, true);
    let mut tx = tx_path(&mut h, key);
    let (rmpn, mut pool) = h.create_rmp(5, 4);
    let mut cq1 = h.create_cq(6);
    let mut cq2 = h.create_cq(6);
    let rq1 = h.create_rq(cq1.cqn, 0, Some(rmpn));
    let rq2 = h.create_rq(cq2.cqn, 0, Some(rmpn));
    // RQ table over both RQs, Toeplitz on addresses and UDP ports.
    let tirn = h.create_udp_rss_tir(&[rq1.rqn, rq2.rqn], &[0x6d; 40], false);
    h.steer_to_tir(tirn);
    let bufs: Vec<u64> = (0..32).map(|_| h.alloc(2048, 64)).collect();
    for &b in &bufs[..10] {
        h.post_recv(&mut pool, b, 2048, key);
    }
    h.drain_eq();
    let limit_events = |h: &mut Host| {
        h.drain_eq()
            .into_iter()
            .filter(|(t, _, _)| *t == EventType::SrqRqLimit as u8)
            .map(|(_, _, d)| u32::from_be_bytes([d[24], d[25], d[26], d[27]]))
            .collect::<Vec<_>>()
    };
    // 10 posted, limit 4: six frames leave 4 posted, no event.
    for port in 0..6u16 {
        send(&mut h, &mut tx, &udp_flow(100, 1000 + port));
    }
    assert!(
        limit_events(&mut h).is_empty(),
        "no event while at or above the limit"
    );
    // The seventh leaves 3 < 4: exactly one event, naming the RMP.
    send(&mut h, &mut tx, &udp_flow(100, 1006));
    assert_eq!(limit_events(&mut h), vec![rmpn]);
    // Disarmed now: more consumption raises nothing, and the limit reads 0.
    for port in 7..10u16 {
        send(&mut h, &mut tx, &udp_flow(100, 1000 + port));
    }
    assert!(limit_events(&mut h).is_empty());
    let mut q = Host::input(Opcode::QueryRmp, 0, 16);
    q[8..12].copy_from_slice(&rmpn.to_be_bytes());
    let out = h.exec(&q, 0x110).unwrap();
    assert_eq!(
        QueryRmpOut::new(&out[..]).unwrap().rmp_context().wq().lwm(),
        0,
        "one-shot limit reads 0 after it fired"
    );
    // The pool ran dry: the tenth frame found nothing and was dropped, not written anywhere.
    assert_eq!(h.dev.counters().rx_out_of_buffer, 0);
    send(&mut h, &mut tx, &udp_flow(100, 2000));
    assert_eq!(h.dev.counters().rx_out_of_buffer, 1);
    // Both RQs drew from the pool, and together they took exactly what was posted.
    let (mut n1, mut n2) = (0, 0);
    while h.poll_cq(&mut cq1).is_some() {
        n1 += 1;
    }
    while h.poll_cq(&mut cq2).is_some() {
        n2 += 1;
    }
    assert_eq!(n1 + n2, 10);
    assert!(
        n1 > 0 && n2 > 0,
        "RSS spread the flows over both RQs ({n1}/{n2})"
    );
    // Re-arm and refill: the limit fires again, once.
    for &b in &bufs[10..20] {
        h.post_recv(&mut pool, b, 2048, key);
    }
    let mut m = Host::input(Opcode::ModifyRmp, 0, 0x110);
    {
        let mut cmd = ModifyRmpIn::new(&mut m[..]).unwrap();
        cmd.set_rmp_state(1).set_rmpn(rmpn);
        cmd.bitmask_mut().set_lwm(true);
        cmd.ctx_mut().set_state(1);
        cmd.ctx_mut().wq_mut().set_lwm(4);
    }
    h.exec(&m, 16).unwrap();
    for port in 0..10u16 {
        send(&mut h, &mut tx, &udp_flow(64, 3000 + port));
    }
    assert_eq!(limit_events(&mut h), vec![rmpn]);
    assert_eq!(h.dev.counters().limit_events, 2);
}

#[test]
fn protection_errors_end_in_error_cqes_and_error_state() {
    let mut h = host();
    h.bring_up();
    let read_only = h.create_mkey(true, false);
    let mut tx = tx_path(&mut h, read_only);
    // Send with an lkey that names no key.
    let frame = udp_frame(200, 1);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&tx.sq, &frame, payload, 0xdead_0000, true);
    h.post(&mut tx.sq, &wqe, false);
    let cqe = h.poll_cq(&mut tx.cq).expect("error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalProtection as u8);
    assert_eq!(err.qpn(), tx.sq.sqn);
    // The SQ is in error: further doorbells do nothing.
    let before = h.dev.counters();
    let wqe = h.build_send(&tx.sq, &frame, payload, read_only, true);
    h.post(&mut tx.sq, &wqe, false);
    assert!(h.poll_cq(&mut tx.cq).is_none());
    assert_eq!(h.dev.counters().since(&before).tx_frames, 0);
    // Receive into a key without local write access.
    let writable = h.create_mkey(false, true);
    let mut tx2 = tx_path(&mut h, writable);
    let mut rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    let buf = h.alloc(2048, 64);
    h.post_recv(&mut rq, buf, 2048, read_only);
    send(&mut h, &mut tx2, &frame);
    let cqe = h.poll_cq(&mut rx_cq).expect("receive error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::RespErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalProtection as u8);
    assert_eq!(
        h.read(buf, 64),
        vec![0u8; 64],
        "nothing written through a read-only key"
    );
}

#[test]
fn oversized_and_unposted_frames_are_refused() {
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(false, true);
    let mut tx = tx_path(&mut h, key);
    // A 1522-byte port MTU carries frames of up to 1518 bytes (a tagged 1500-byte payload).
    let cqe = send(&mut h, &mut tx, &udp_frame(1477, 0));
    assert_eq!(
        ErrCqe::new(&cqe[..]).unwrap().syndrome(),
        CqeSyndrome::LocalLength as u8,
        "1519 bytes exceed the port MTU"
    );
    let mut tx = tx_path(&mut h, key);
    let mut rx_cq = h.create_cq(6);
    let rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    send(&mut h, &mut tx, &udp_frame(100, 0));
    assert!(h.poll_cq(&mut rx_cq).is_none());
    assert_eq!(h.dev.counters().rx_out_of_buffer, 1);
    assert_eq!(
        h.dev
            .queue_counters(QueueKind::Rq, rq.rqn)
            .unwrap()
            .out_of_buffer,
        1
    );
}

/// A brought-up function whose frames come back to it: a read-write key, a send path, and a
/// receive CQ of `2^cq_log` entries with an RQ of `2^rq_log` WQEs that steering sends all to.
fn receiving_host(cq_log: u8, rq_log: u8) -> (Host, u32, Tx, support::Cq, support::Rq) {
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(true, true);
    let tx = tx_path(&mut h, key);
    let rx_cq = h.create_cq(cq_log);
    let rq = h.create_rq(rx_cq.cqn, rq_log, None);
    h.steer_all_to(rq.rqn);
    (h, key, tx, rx_cq, rq)
}

#[test]
fn the_receive_doorbell_record_is_read_again_only_when_the_known_wqes_run_out() {
    let (mut h, key, mut tx, mut rx_cq, mut rq) = receiving_host(6, 6);
    let frame = udp_frame(100, 0);
    // A frame sent and received also reads the SQ's record and each CQ's (its overrun check):
    // what is left over is the RQ's.
    let mut receive = |h: &mut Host, rq_reads: u64| {
        let before = h.dev.counters().dbrec_reads;
        send(h, &mut tx, &frame);
        let cqe = h.poll_cq(&mut rx_cq).expect("receive completion");
        assert_eq!(
            Cqe64::new(&cqe[..]).unwrap().opcode(),
            CqeOpcode::RespSend as u8
        );
        assert_eq!(h.dev.counters().dbrec_reads - before, 3 + rq_reads);
    };
    for _ in 0..4 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    receive(&mut h, 1);
    receive(&mut h, 0);
    // Posted while two known WQEs are left: found when those run out.
    for _ in 0..2 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    receive(&mut h, 0);
    receive(&mut h, 0);
    receive(&mut h, 1);
    receive(&mut h, 0);
    // Nothing left: the frame reads the record, and is refused (no receive CQE either).
    let before = h.dev.counters().dbrec_reads;
    send(&mut h, &mut tx, &frame);
    assert!(h.poll_cq(&mut rx_cq).is_none());
    assert_eq!(h.dev.counters().dbrec_reads - before, 3);
    assert_eq!(h.dev.counters().rx_out_of_buffer, 1);
}

#[test]
fn receive_wqes_are_read_a_read_request_at_a_time_across_the_rings_wrap() {
    // 32 WQEs of 16 bytes: the whole ring is one 512-byte read request.
    let (mut h, key, mut tx, mut rx_cq, mut rq) = receiving_host(7, 5);
    let mut bufs = Vec::new();
    let mut post = |h: &mut Host, rq: &mut support::Rq, n: usize| {
        for _ in 0..n {
            let buf = h.alloc(2048, 64);
            h.post_recv(rq, buf, 2048, key);
            bufs.push(buf);
        }
    };
    let mut sent = 0usize;
    let mut receive = |h: &mut Host, n: usize| {
        for _ in 0..n {
            let frame = udp_frame(60 + sent, sent as u8);
            send(h, &mut tx, &frame);
            let cqe = h.poll_cq(&mut rx_cq).expect("receive completion");
            let c = Cqe64::new(&cqe[..]).unwrap();
            assert_eq!(c.opcode(), CqeOpcode::RespSend as u8);
            assert_eq!(usize::from(c.wqe_counter()), sent);
            sent += 1;
        }
    };
    let before = h.dev.counters();
    post(&mut h, &mut rq, 32);
    receive(&mut h, 20);
    // Twenty more, in the ring's first slots again: read when the twelve left run out.
    post(&mut h, &mut rq, 20);
    receive(&mut h, 32);
    let spent = h.dev.counters().since(&before);
    assert_eq!(spent.rx_wqe_reads, 2, "32 WQEs, then the 20 past the wrap");
    assert_eq!(spent.rx_delivered, 52);
    // Each frame landed in the buffer its WQE named, including those past the wrap.
    for (i, &buf) in bufs.iter().enumerate() {
        let frame = udp_frame(60 + i, i as u8);
        assert_eq!(h.read(buf, frame.len()), frame, "frame {i}");
    }
}

#[test]
fn q_counter_sets_count_drops_for_the_rqs_that_name_them() {
    use cxdirect_hw::counters::{AllocQCounterOut, QueryQCounterIn, QueryQCounterOut};
    let mut h = host();
    h.bring_up();
    let alloc = |h: &mut Host| {
        let out = h
            .exec(&Host::input(Opcode::AllocQCounter, 0, 16), 16)
            .unwrap();
        AllocQCounterOut::new(&out[..]).unwrap().counter_set_id()
    };
    let query = |h: &mut Host, id: u8, clear: bool| {
        let mut q = Host::input(Opcode::QueryQCounter, 0, 0x20);
        QueryQCounterIn::new(&mut q[..])
            .unwrap()
            .set_counter_set_id(id)
            .set_clear(clear);
        h.exec(&q, 0x100)
            .map(|out| QueryQCounterOut::new(&out[..]).unwrap().out_of_buffer())
    };
    let dealloc = |h: &mut Host, id: u8| {
        let mut d = Host::input(Opcode::DeallocQCounter, 0, 16);
        d[11] = id;
        h.exec(&d, 16)
    };
    let set = alloc(&mut h);
    assert_ne!(set, 0, "set 0 means none");
    assert_eq!(
        query(&mut h, set.wrapping_add(1), false),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let key = h.create_mkey(false, true);
    let mut tx = tx_path(&mut h, key);
    let rx_cq = h.create_cq(6);
    let rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    // A drop before the RQ names the set is not counted there.
    send(&mut h, &mut tx, &udp_frame(100, 0));
    assert_eq!(query(&mut h, set, false), Ok(0));
    // MODIFY_RQ with the counter-set bit attaches it; naming a set that does not exist fails.
    let mut modify = Host::input(Opcode::ModifyRq, 0, 0x110);
    {
        let mut m = ModifyRqIn::new(&mut modify[..]).unwrap();
        m.set_rq_state(1)
            .set_rqn(rq.rqn)
            .set_modify_bitmask(MODIFY_RQ_BITMASK_RQ_COUNTER_SET_ID);
        m.ctx_mut().set_state(1).set_counter_set_id(set + 1);
    }
    assert_eq!(
        h.exec(&modify, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    ModifyRqIn::new(&mut modify[..])
        .unwrap()
        .ctx_mut()
        .set_counter_set_id(set);
    h.exec(&modify, 16).unwrap();
    for seq in 1..=3 {
        send(&mut h, &mut tx, &udp_frame(100, seq));
    }
    assert_eq!(query(&mut h, set, true), Ok(3), "read and clear");
    assert_eq!(query(&mut h, set, false), Ok(0), "cleared");
    // A set an RQ names may be freed (Linux frees a raw packet QP's set before destroying
    // its RQ when the QP is neither in RESET nor in RTS: `mlx5_ib_qp_set_counter` sends
    // nothing then); the RQ counts nowhere after, not in a set allocated later.
    dealloc(&mut h, set).unwrap();
    let later = alloc(&mut h);
    send(&mut h, &mut tx, &udp_frame(100, 4));
    assert_eq!(query(&mut h, later, false), Ok(0), "the RQ names no set");
    dealloc(&mut h, later).unwrap();
    assert_eq!(
        h.dev.counters().rx_out_of_buffer,
        5,
        "every drop still counted function-wide"
    );
    assert_eq!(
        query(&mut h, set, false),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
}

#[test]
fn completion_events_and_interrupts() {
    let mut h = host();
    let sink = Arc::new(RecordingSink::new());
    h.dev.set_interrupt_sink(sink.clone());
    h.bring_up();
    // Every command delivered once the EQ existed completes with a CMD event (the CREATE_EQ
    // itself, delivered before, does not).
    h.simple(Opcode::Nop, 0).unwrap();
    let cmd_events = h
        .drain_eq()
        .iter()
        .filter(|(t, _, _)| *t == EventType::Cmd as u8)
        .count();
    assert!(cmd_events >= 1);
    assert!(sink.count(0) >= 1, "the armed EQ raised its vector");
    h.arm_eq();
    sink.take();
    let key = h.create_mkey(false, true);
    h.drain_eq();
    h.arm_eq();
    sink.take();
    let mut tx = tx_path(&mut h, key);
    h.drain_eq();
    h.arm_eq();
    sink.take();
    h.arm_cq(&tx.cq);
    let frame = udp_frame(60, 0);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&tx.sq, &frame, payload, key, true);
    h.post(&mut tx.sq, &wqe, true);
    let events = h.drain_eq();
    let comp: Vec<u32> = events
        .iter()
        .filter(|(t, _, _)| *t == EventType::Completion as u8)
        .map(|(_, _, d)| u32::from_be_bytes([d[24], d[25], d[26], d[27]]) & 0xff_ffff)
        .collect();
    assert_eq!(
        comp,
        vec![tx.cq.cqn],
        "one completion event for the armed CQ"
    );
    assert_eq!(sink.take(), vec![0], "one interrupt on the EQ's vector");
    // Not re-armed: the next completion raises no event.
    h.poll_cq(&mut tx.cq).unwrap();
    h.arm_eq();
    let wqe = h.build_send(&tx.sq, &frame, payload, key, true);
    h.post(&mut tx.sq, &wqe, true);
    assert!(h
        .drain_eq()
        .iter()
        .all(|(t, _, _)| *t != EventType::Completion as u8));
}

#[test]
fn firmware_pages_unmapped_early_are_detected() {
    let mut h = host();
    h.start_cmdif();
    h.simple(Opcode::EnableHca, 0).unwrap();
    let boot = h.query_pages(query_pages_op_mod::BOOT) as usize;
    h.give_pages(boot).unwrap();
    // Init pages from a region the host will (wrongly) unmap while the device uses it.
    const LOANED: u64 = 0x20_0000_0000;
    let init = h.query_pages(query_pages_op_mod::INIT) as usize;
    let region = HostRegion::new(init * 4096).unwrap();
    h.dev
        .iommu()
        .map_region(LOANED, region, Access::ReadWrite)
        .unwrap();
    let pages: Vec<u64> = (0..init as u64).map(|i| LOANED + i * 4096).collect();
    h.give_these(&pages).unwrap();
    h.simple(Opcode::InitHca, 0).unwrap();
    assert_eq!(h.dev.health_syndrome(), 0);
    h.dev.iommu().unmap(LOANED, init as u64 * 4096).unwrap();
    // The device notices on its next use of its pages and stops answering.
    let _ = h.simple(Opcode::Nop, 0);
    assert_ne!(
        h.dev.health_syndrome(),
        0,
        "unmapped firmware pages are a fatal device error"
    );
    assert_eq!(h.simple(Opcode::Nop, 0), Err(CmdFail::NoCompletion));
    let counter = h.mmio_r32(cxdirect_hw::init_seg::HEALTH_COUNTER as u64);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(
        h.mmio_r32(cxdirect_hw::init_seg::HEALTH_COUNTER as u64),
        counter,
        "health counter stopped"
    );
}

/// A capture of frames the device put on its wire, and what it must hold.
struct DeviceCapture {
    /// The pcap file (removed on drop).
    path: std::path::PathBuf,
    /// The frames as they must appear on the wire, in order.
    frames: Vec<Vec<u8>>,
    /// Wall-clock time before the wire existed and after the last frame was flushed.
    window: (Duration, Duration),
}

impl Drop for DeviceCapture {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
}

/// Sends frames through the device onto a loopback wire with a pcap tap: IPv4/UDP frames of
/// several sizes with their checksums filled in by the host, then a UDP and a TCP frame whose
/// checksums the host left zero and the send WQE asks the device to fill in. The frames on the
/// wire, checksums included, are built by `etherparse`, independently of the model.
fn capture_through_the_device(tag: &str) -> DeviceCapture {
    let start = wall_clock();
    let dev = Device::loopback(EmuConfig::default());
    let path =
        std::env::temp_dir().join(format!("cxdirect-model-{tag}-{}.pcap", std::process::id()));
    let (wire, _) = dev.wire().unwrap();
    wire.set_pcap(cxdirect_emu::pcap::PcapWriter::create(&path).unwrap())
        .unwrap();
    let mut h = Host::new(dev, MEM);
    h.bring_up();
    let key = h.create_mkey(false, true);
    let mut tx = tx_path(&mut h, key);
    let mut frames = Vec::new();
    for &n in &[60usize, 128, 1000, 1514] {
        let frame = udp_frame(n - 42, 3);
        send(&mut h, &mut tx, &frame);
        frames.push(frame);
    }
    let payload: Vec<u8> = (0..200u8).collect();
    let udp = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 0x0a], [0x02, 0, 0, 0, 0, 0x0b])
        .ipv4([192, 168, 7, 1], [192, 168, 7, 2], 32)
        .udp(4791, 9);
    let tcp = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 0x0a], [0x02, 0, 0, 0, 0, 0x0b])
        .ipv4([192, 168, 7, 1], [192, 168, 7, 2], 32)
        .tcp(40_000, 80, 0x0102_0304, 8192)
        .ack(0x0a0b_0c0d)
        .psh();
    let mut udp_frame_built = Vec::new();
    udp.write(&mut udp_frame_built, &payload).unwrap();
    let mut tcp_frame_built = Vec::new();
    tcp.write(&mut tcp_frame_built, &payload).unwrap();
    // IPv4 header checksum at 24, UDP checksum at 40, TCP checksum at 50.
    for (built, l4_checksum) in [(udp_frame_built, 40), (tcp_frame_built, 50)] {
        let mut unsummed = built.clone();
        unsummed[24..26].fill(0);
        unsummed[l4_checksum..l4_checksum + 2].fill(0);
        send_with_checksum_offload(&mut h, &mut tx, &unsummed);
        frames.push(built);
    }
    wire.flush_pcap().unwrap();
    DeviceCapture {
        path,
        frames,
        window: (start, wall_clock()),
    }
}

/// Sends `frame` asking the device to compute its IPv4 and TCP/UDP checksums.
fn send_with_checksum_offload(h: &mut Host, tx: &mut Tx, frame: &[u8]) -> Vec<u8> {
    let payload = h.alloc(frame.len() as u64, 64);
    let mut wqe = h.build_send(&tx.sq, frame, payload, tx.key, true);
    EthSeg::new(&mut wqe[16..32])
        .unwrap()
        .set_l3_csum(true)
        .set_l4_csum(true);
    h.post(&mut tx.sq, &wqe, false);
    h.poll_cq(&mut tx.cq).expect("send completion")
}

/// The device's capture read by an independent pcap reader (`pcap-parser`) and packet parser
/// (`etherparse`): header, frame count, lengths, timestamps, and every frame's Ethernet, IPv4,
/// UDP and TCP fields and checksums.
#[test]
fn the_wire_capture_reads_back_in_independent_parsers() {
    let capture = capture_through_the_device("independent");
    let bytes = std::fs::read(&capture.path).unwrap();
    let file = PcapCapture::from_file(&bytes).expect("a pcap file");
    assert_eq!(
        (file.header.version_major, file.header.version_minor),
        (2, 4)
    );
    assert_eq!(file.header.network, Linktype::ETHERNET);
    assert!(!file.header.is_nanosecond_precision());
    assert_eq!(file.blocks.len(), capture.frames.len(), "frame count");
    let (start, end) = capture.window;
    let mut previous = Duration::ZERO;
    for (i, (block, sent)) in file.blocks.iter().zip(&capture.frames).enumerate() {
        assert_eq!(block.origlen as usize, sent.len(), "frame {i} length");
        assert_eq!(
            block.caplen as usize,
            sent.len(),
            "frame {i} captured length"
        );
        assert_eq!(block.data, &sent[..], "frame {i} bytes");
        let at = Duration::new(u64::from(block.ts_sec), block.ts_usec * 1000);
        assert!(block.ts_usec < 1_000_000, "frame {i} microseconds");
        assert!(at >= previous, "frame {i}: timestamps go forward");
        // Records keep whole microseconds.
        assert!(
            at + Duration::from_micros(1) > start && at <= end,
            "frame {i} at {at:?}, outside the test's run {start:?}..{end:?}"
        );
        previous = at;
        check_headers(i, block.data);
    }
}

/// Parses one captured frame as Ethernet II / IPv4 / UDP or TCP and checks its lengths and
/// checksums against values `etherparse` computes.
fn check_headers(i: usize, frame: &[u8]) {
    let headers = PacketHeaders::from_ethernet_slice(frame)
        .unwrap_or_else(|e| panic!("frame {i} does not parse: {e:?}"));
    let Some(LinkHeader::Ethernet2(eth)) = &headers.link else {
        panic!("frame {i}: no Ethernet II header");
    };
    assert_eq!(eth.ether_type, EtherType::IPV4, "frame {i} EtherType");
    assert_eq!(eth.source[0] & 1, 0, "frame {i}: unicast source MAC");
    let Some(NetHeaders::Ipv4(ip, _)) = &headers.net else {
        panic!("frame {i}: no IPv4 header");
    };
    assert_eq!(
        usize::from(ip.total_len),
        frame.len() - 14,
        "frame {i} IPv4 length"
    );
    assert_eq!(
        ip.header_checksum,
        ip.calc_header_checksum(),
        "frame {i} IPv4 header checksum"
    );
    let payload = headers.payload.slice();
    match &headers.transport {
        Some(TransportHeader::Udp(udp)) => {
            assert_eq!(ip.protocol, IpNumber::UDP, "frame {i} IP protocol");
            assert_eq!(
                usize::from(udp.length),
                frame.len() - 34,
                "frame {i} UDP length"
            );
            assert_eq!(
                udp.checksum,
                udp.calc_checksum_ipv4(ip, payload).unwrap(),
                "frame {i} UDP checksum"
            );
        }
        Some(TransportHeader::Tcp(tcp)) => {
            assert_eq!(ip.protocol, IpNumber::TCP, "frame {i} IP protocol");
            assert_eq!(
                (tcp.source_port, tcp.destination_port),
                (40_000, 80),
                "frame {i} TCP ports"
            );
            assert!(tcp.ack && tcp.psh, "frame {i} TCP flags");
            assert_eq!(
                tcp.checksum,
                tcp.calc_checksum_ipv4(ip, payload).unwrap(),
                "frame {i} TCP checksum"
            );
        }
        other => panic!("frame {i}: neither UDP nor TCP: {other:?}"),
    }
}

/// The same capture as read by tshark, a second independent reader.
#[test]
#[cfg_attr(
    not(has_tshark),
    ignore = "needs tshark on PATH: apt-get install tshark"
)]
fn the_wire_capture_opens_in_tshark() {
    let capture = capture_through_the_device("tshark");
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&capture.path)
        .args(["-T", "fields", "-e", "frame.len"])
        .output()
        .expect("tshark must be installed (apt-get install -y tshark)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lens: Vec<usize> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let sizes: Vec<usize> = capture.frames.iter().map(Vec::len).collect();
    assert_eq!(lens, sizes);
}

#[test]
fn the_reserved_lkey_addresses_iovas_directly() {
    let mut h = host();
    h.bring_up();
    let out = h
        .exec(&Host::input(Opcode::QuerySpecialContexts, 0, 16), 0x20)
        .unwrap();
    let resd = cxdirect_hw::mkey::QuerySpecialContextsOut::new(&out[..])
        .unwrap()
        .resd_lkey();
    assert_eq!(resd, cxdirect_emu::RESERVED_LKEY);
    let mut tx = tx_path(&mut h, resd);
    let mut rx_cq = h.create_cq(4);
    let mut rq = h.create_rq(rx_cq.cqn, 4, None);
    h.steer_all_to(rq.rqn);
    let buf = h.alloc(2048, 64);
    h.post_recv(&mut rq, buf, 2048, resd);
    let frame = udp_frame(300, 9);
    let cqe = send(&mut h, &mut tx, &frame);
    assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8);
    assert!(h.poll_cq(&mut rx_cq).is_some());
    assert_eq!(h.read(buf, frame.len()), frame);
}

#[test]
fn the_firmware_asks_for_pages_as_objects_grow_and_offers_them_back() {
    let mut h = host();
    h.bring_up();
    h.drain_eq();
    h.arm_eq();
    let page_requests = |h: &mut Host| -> Vec<i32> {
        h.drain_eq()
            .into_iter()
            .filter(|(t, _, _)| *t == EventType::PageRequest as u8)
            .map(|(_, _, d)| i32::from_be_bytes([d[4], d[5], d[6], d[7]]))
            .collect()
    };
    // Each CQ keeps its context in a firmware page slot; fill the initial pages.
    let mut cqs = Vec::new();
    while page_requests(&mut h).is_empty() {
        cqs.push(h.create_cq(0).cqn);
        assert!(cqs.len() < 2000, "the firmware never asked for pages");
    }
    // At least the configured chunk (16), and as many as the function holds: the firmware
    // grows its context space by what it has, ahead of bursts of objects.
    let wanted = h.query_pages(query_pages_op_mod::REGULAR);
    assert!(wanted >= 16 + 64, "asked for {wanted} pages");
    h.give_pages(wanted as usize).unwrap();
    assert_eq!(h.query_pages(query_pages_op_mod::REGULAR), 0);
    // Objects keep being created from the new pages.
    for _ in 0..64 {
        cqs.push(h.create_cq(0).cqn);
    }
    // Destroying them empties pages; the firmware offers some back (a negative request).
    let mut offers = Vec::new();
    for cqn in cqs.drain(..) {
        let mut d = Host::input(Opcode::DestroyCq, 0, 16);
        d[8..12].copy_from_slice(&cqn.to_be_bytes());
        h.exec(&d, 16).unwrap();
        offers.extend(page_requests(&mut h));
    }
    // The offer is a negative regular request (QUERY_PAGES, what a driver acts on).
    let regular = h.query_pages(query_pages_op_mod::REGULAR);
    assert!(
        regular < 0 || offers.iter().any(|&n| n < 0),
        "pages offered back: events {offers:?}, regular request {regular}"
    );
    let wanted_back = -h.query_pages(query_pages_op_mod::REGULAR);
    assert!(wanted_back > 0);
    assert_eq!(h.take_pages(wanted_back as usize), wanted_back as usize);
    h.teardown();
    assert_eq!(h.dev.firmware_pages_held(), 0);
}

#[test]
fn every_object_command_refuses_a_bad_reference() {
    let mut h = host();
    h.bring_up();
    let bogus = 0x00ab_cdefu32;
    // (opcode, input size, offset of the object number, output size)
    let cases: &[(Opcode, usize, usize, usize)] = &[
        (Opcode::DeallocUar, 16, 8, 16),
        (Opcode::DeallocPd, 16, 8, 16),
        (Opcode::DeallocTransportDomain, 16, 8, 16),
        (Opcode::DestroyCq, 16, 8, 16),
        (Opcode::DestroySq, 16, 8, 16),
        (Opcode::DestroyRq, 16, 8, 16),
        (Opcode::DestroyRmp, 16, 8, 16),
        (Opcode::QueryRmp, 16, 8, 0x110),
        (Opcode::DestroyTis, 16, 8, 16),
        (Opcode::DestroyTir, 16, 8, 16),
        (Opcode::DestroyRqt, 16, 8, 16),
        (Opcode::DestroyMkey, 16, 8, 16),
        (Opcode::QueryMkey, 16, 8, 0x130),
        (Opcode::ModifySq, 0x110, 8, 16),
        (Opcode::ModifyRq, 0x110, 8, 16),
        (Opcode::ModifyRmp, 0x110, 8, 16),
    ];
    for &(op, size, at, outlen) in cases {
        let mut input = Host::input(op, 0, size);
        input[at..at + 4].copy_from_slice(&bogus.to_be_bytes());
        match h.exec(&input, outlen) {
            Err(CmdFail::Status { status, .. }) => {
                assert_eq!(
                    status,
                    CmdStatus::BadResource as u8,
                    "{op:?} with a bogus object number"
                )
            }
            other => panic!("{op:?} with a bogus object number: {other:?}"),
        }
    }
    // Creations naming missing parents.
    let mut tis = Host::input(Opcode::CreateTis, 0, 0xc0);
    cxdirect_hw::tir::CreateTisIn::new(&mut tis[..])
        .unwrap()
        .ctx_mut()
        .set_transport_domain(bogus);
    assert_eq!(
        h.exec(&tis, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let mut tir = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut tir[..])
        .unwrap()
        .ctx_mut()
        .set_disp_type(0)
        .set_inline_rqn(bogus)
        .set_transport_domain(h.td);
    assert_eq!(
        h.exec(&tir, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let mut rqt = Host::input(Opcode::CreateRqt, 0, 0x118);
    {
        let mut cmd = CreateRqtIn::new(&mut rqt[..]).unwrap();
        cmd.rqt_context_mut()
            .set_rqt_max_size(1)
            .set_rqt_actual_size(1);
        cmd.set_rq_num(0, bogus).unwrap();
    }
    assert_eq!(
        h.exec(&rqt, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let mut mkey = Host::input(Opcode::CreateMkey, 0, 0x110);
    cxdirect_hw::mkey::CreateMkeyIn::new(&mut mkey[..])
        .unwrap()
        .memory_key_mkey_entry_mut()
        .set_pd(bogus)
        .set_access_mode(0);
    assert_eq!(
        h.exec(&mkey, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let mut root = Host::input(Opcode::SetFlowTableRoot, 0, 0x40);
    cxdirect_hw::flow::SetFlowTableRootIn::new(&mut root[..])
        .unwrap()
        .set_table_id(bogus);
    assert_eq!(
        h.exec(&root, 16),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    // Vport and register commands refuse what they do not model.
    let mut vport = Host::input(Opcode::QueryNicVportContext, 0, 16);
    cxdirect_hw::vport::QueryNicVportContextIn::new(&mut vport[..])
        .unwrap()
        .set_other_vport(true)
        .set_vport_number(3);
    assert_eq!(
        h.exec(&vport, 0x110),
        Err(CmdFail::status(CmdStatus::BadParameter, Syndrome::BadVport))
    );
    let mut reg = Host::input(Opcode::AccessReg, 1, 0x20);
    cxdirect_hw::reg::AccessRegisterIn::new(&mut reg[..])
        .unwrap()
        .set_register_id(0x9999);
    assert_eq!(
        h.exec(&reg, 0x20),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadRegister
        ))
    );
    // A capability type the model does not serve (vector calculation, type 0xb). (RoCE's,
    // type 4, are answered with RoCE on, the default; `rc_qp` checks they are refused with it
    // off; ODP's, type 2, with `pg`: `odp.rs`.)
    let mut cap = Host::input(Opcode::QueryHcaCap, 0xb << 1, 16);
    cap[6..8].copy_from_slice(&(0xbu16 << 1).to_be_bytes());
    assert_eq!(
        h.exec(&cap, 0x1010),
        Err(CmdFail::status(CmdStatus::BadParameter, Syndrome::BadOpMod))
    );
}

#[test]
fn each_command_fails_cleanly_on_bad_parameters() {
    let mut h = host();
    h.start_cmdif();
    let bad_param = |syn: Syndrome| CmdFail::status(CmdStatus::BadParameter, syn);
    let mut enable = Host::input(Opcode::EnableHca, 0, 16);
    cxdirect_hw::hca::EnableHcaIn::new(&mut enable[..])
        .unwrap()
        .set_function_id(3);
    assert_eq!(h.exec(&enable, 16), Err(bad_param(Syndrome::BadFunctionId)));
    assert_eq!(
        h.exec(&Host::input(Opcode::QueryIssi, 0, 16), 0x70),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
    h.simple(Opcode::EnableHca, 0).unwrap();
    let mut issi = Host::input(Opcode::SetIssi, 0, 16);
    cxdirect_hw::hca::SetIssiIn::new(&mut issi[..])
        .unwrap()
        .set_current_issi(2);
    assert_eq!(h.exec(&issi, 16), Err(bad_param(Syndrome::BadIssi)));
    assert_eq!(
        h.exec(&Host::input(Opcode::QueryPages, 9, 16), 16),
        Err(bad_param(Syndrome::BadOpMod))
    );
    assert_eq!(
        h.simple(Opcode::TeardownHca, 0),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
    h.give_pages(16).unwrap();
    // SET_HCA_CAP: a read-only field, and a settable one above its maximum.
    let caps = h.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let mut set = Host::input(Opcode::SetHcaCap, 0, 0x1010);
    set[0x10..0x110].copy_from_slice(&caps[0x10..0x110]);
    cxdirect_hw::caps::CmdHcaCap::new(&mut set[0x10..0x110])
        .unwrap()
        .set_log_max_cq_sz(30);
    assert_eq!(h.exec(&set, 16), Err(bad_param(Syndrome::CapReadOnly)));
    set[0x10..0x110].copy_from_slice(&caps[0x10..0x110]);
    cxdirect_hw::caps::CmdHcaCap::new(&mut set[0x10..0x110])
        .unwrap()
        .set_log_max_qp(31);
    assert_eq!(h.exec(&set, 16), Err(bad_param(Syndrome::CapAboveMax)));
    h.give_pages(64).unwrap();
    h.simple(Opcode::InitHca, 0).unwrap();
    let uar = cxdirect_hw::hca::AllocUarOut::new(&h.simple(Opcode::AllocUar, 0).unwrap()[..])
        .unwrap()
        .uar();
    h.uar = uar;
    // CREATE_EQ with a vector beyond the MSI-X table.
    let mut eq = Host::input(Opcode::CreateEq, 0, 0x118);
    {
        let mut cmd = cxdirect_hw::eq::CreateEqIn::new(&mut eq[..]).unwrap();
        cmd.eq_context_entry_mut()
            .set_log_eq_size(4)
            .set_uar_page(uar)
            .set_intr(200);
        cmd.set_pas(0, support::IOVA_BASE).unwrap();
    }
    assert_eq!(h.exec(&eq, 16), Err(bad_param(Syndrome::BadVector)));
    // Flow steering: only NIC receive and transmit tables are modelled (no FDB, type 4);
    // overlapping groups and entries outside their group are refused.
    let mut ft = Host::input(Opcode::CreateFlowTable, 0, 0x40);
    cxdirect_hw::flow::CreateFlowTableIn::new(&mut ft[..])
        .unwrap()
        .set_table_type(4);
    assert_eq!(h.exec(&ft, 16), Err(bad_param(Syndrome::BadSteeringParams)));
    let mut ft = Host::input(Opcode::CreateFlowTable, 0, 0x40);
    cxdirect_hw::flow::CreateFlowTableIn::new(&mut ft[..])
        .unwrap()
        .flow_table_context_mut()
        .set_log_size(4);
    let table = cxdirect_hw::flow::CreateFlowTableOut::new(&h.exec(&ft, 16).unwrap()[..])
        .unwrap()
        .table_id();
    let group_in = |start: u32, end: u32| {
        let mut g = Host::input(Opcode::CreateFlowGroup, 0, 0x400);
        cxdirect_hw::flow::CreateFlowGroupIn::new(&mut g[..])
            .unwrap()
            .set_table_id(table)
            .set_start_flow_index(start)
            .set_end_flow_index(end);
        g
    };
    let group =
        cxdirect_hw::flow::CreateFlowGroupOut::new(&h.exec(&group_in(0, 3), 16).unwrap()[..])
            .unwrap()
            .group_id();
    assert_eq!(
        h.exec(&group_in(2, 5), 16),
        Err(bad_param(Syndrome::BadSteeringParams))
    );
    assert_eq!(
        h.exec(&group_in(8, 40), 16),
        Err(bad_param(Syndrome::BadSteeringParams)),
        "past the table's 16 entries"
    );
    let mut fte = Host::input(Opcode::SetFlowTableEntry, 0, 0x340);
    {
        let mut cmd = cxdirect_hw::flow::SetFteIn::new(&mut fte[..]).unwrap();
        cmd.set_table_id(table).set_flow_index(7);
        cmd.flow_context_all_mut()
            .set_group_id(group)
            .set_action(cxdirect_hw::flow::FLOW_CONTEXT_ACTION_DROP);
    }
    assert_eq!(
        h.exec(&fte, 16),
        Err(bad_param(Syndrome::FlowIndexOutOfRange))
    );
    // A vport MTU out of range.
    let mut vport = Host::input(Opcode::ModifyNicVportContext, 0, 0x200);
    {
        let mut cmd = cxdirect_hw::vport::ModifyNicVportContextIn::new(&mut vport[..]).unwrap();
        cmd.field_select_mut().set_mtu(true);
        cmd.nic_vport_context_mut().set_mtu(20);
    }
    assert_eq!(h.exec(&vport, 16), Err(bad_param(Syndrome::BadVport)));
    // An RMP over a linked-list WQ is not modelled.
    let mut rmp = Host::input(Opcode::CreateRmp, 0, 0x118);
    cxdirect_hw::wq::CreateRmpIn::new(&mut rmp[..])
        .unwrap()
        .ctx_mut()
        .set_state(1);
    assert_eq!(h.exec(&rmp, 16), Err(bad_param(Syndrome::BadWqParams)));
    // A memory key whose translations do not cover its pages.
    let pd = h.alloc_pd();
    let mut mkey = Host::input(Opcode::CreateMkey, 0, 0x110 + 8);
    {
        let mut cmd = cxdirect_hw::mkey::CreateMkeyIn::new(&mut mkey[..]).unwrap();
        cmd.set_translations_octword_actual_size(1);
        cmd.memory_key_mkey_entry_mut()
            .set_access_mode(cxdirect_hw::mkey::MKC_ACCESS_MODE_MTT)
            .set_pd(pd)
            .set_qpn(0xff_ffff)
            .set_start_addr(0)
            .set_len(3 * 4096)
            .set_log_page_size(12)
            .set_translations_octword_size(1);
    }
    assert_eq!(h.exec(&mkey, 16), Err(bad_param(Syndrome::BadMkeyParams)));
}

#[test]
fn command_signatures_are_checked_once_enabled() {
    // Checksums are chosen with SET_HCA_CAP, before INIT_HCA.
    let mut h = host();
    h.start_cmdif();
    h.simple(Opcode::EnableHca, 0).unwrap();
    h.give_pages(16).unwrap();
    let caps = h.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let mut set = Host::input(Opcode::SetHcaCap, 0, 0x1010);
    set[0x10..0x110].copy_from_slice(&caps[0x10..0x110]);
    cxdirect_hw::caps::CmdHcaCap::new(&mut set[0x10..0x110])
        .unwrap()
        .set_cmdif_checksum(1);
    h.exec(&set, 16).unwrap();
    // From now on an unsigned entry is refused at delivery.
    assert_eq!(
        h.simple(Opcode::Nop, 0),
        Err(CmdFail::Delivery(DeliveryStatus::SignatureError as u8))
    );
    h.sign = true;
    h.simple(Opcode::Nop, 0).unwrap();
    // Signed mailboxes too: a 2-block MANAGE_PAGES goes through.
    h.give_pages(100).unwrap();
}

#[test]
fn a_receive_cq_smaller_than_its_ring_overruns_and_stops_its_rq() {
    let mut h = host();
    h.bring_up();
    let _ = h.drain_eq();
    let key = h.create_mkey(false, true);
    let mut tx = tx_path(&mut h, key);
    // 64 CQEs for a 128-entry RQ: a receiver that stops polling overruns it.
    let mut rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 7, None);
    h.steer_all_to(rq.rqn);
    let frame = udp_frame(100, 3);
    for _ in 0..80 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    let before = h.dev.counters();
    for _ in 0..70 {
        send(&mut h, &mut tx, &frame);
    }
    let seen = h.dev.counters().since(&before);
    assert_eq!(seen.cq_overruns, 1, "{seen:?}");
    assert_eq!(seen.completions_lost, 1, "the 65th completion had no room");
    assert_eq!(seen.cqes - 70, 64, "64 receive completions were written");
    assert_eq!(
        seen.rx_steer_drops, 5,
        "the RQ stopped with its CQ: later frames are dropped"
    );
    let events = h.drain_eq();
    let cq_errors: Vec<_> = events
        .iter()
        .filter(|e| e.0 == EventType::CqError as u8)
        .collect();
    assert_eq!(cq_errors.len(), 1, "{events:?}");
    let data = &cq_errors[0].2;
    assert_eq!(
        u32::from_be_bytes([data[0], data[1], data[2], data[3]]) & 0xff_ffff,
        rx_cq.cqn
    );
    assert_eq!(data[11], cxdirect_hw::eqe::cq_error::OVERRUN);
    // The 64 completions written are intact; the CQ writes nothing more even once drained.
    for _ in 0..64 {
        assert!(h.poll_cq(&mut rx_cq).is_some());
    }
    send(&mut h, &mut tx, &frame);
    assert!(h.poll_cq(&mut rx_cq).is_none());
}

#[test]
fn an_injected_overrun_stops_the_send_queue_whose_completion_it_was() {
    let mut h = host();
    h.bring_up();
    let _ = h.drain_eq();
    let key = h.create_mkey(false, true);
    let mut tx = tx_path(&mut h, key);
    h.dev
        .inject(cxdirect_emu::Fault::CqOverrun { cqn: tx.cq.cqn });
    let frame = udp_frame(100, 3);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&tx.sq, &frame, payload, key, true);
    h.post(&mut tx.sq, &wqe, false);
    assert!(h.poll_cq(&mut tx.cq).is_none(), "no completion was written");
    let c = h.dev.counters();
    assert_eq!((c.cq_overruns, c.completions_lost, c.tx_frames), (1, 1, 1));
    assert_eq!(h.dev.faults_taken(), 1);
    let events = h.drain_eq();
    assert!(
        events
            .iter()
            .any(|e| e.0 == EventType::CqError as u8 && e.2[11] == 1),
        "{events:?}"
    );
    // The SQ is in error: the next WQE is not executed.
    let wqe = h.build_send(&tx.sq, &frame, payload, key, true);
    h.post(&mut tx.sq, &wqe, false);
    assert_eq!(h.dev.counters().tx_frames, 1);
}

#[test]
fn a_buffer_access_to_an_unmapped_iova_completes_in_error() {
    use cxdirect_emu::{DmaQueue, Fault};
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(false, true);
    let mut tx = tx_path(&mut h, key);
    let frame = udp_frame(200, 1);
    // Send: the gather read is refused by the IOMMU.
    h.dev.inject(Fault::UnmappedDma {
        queue: DmaQueue::Send(tx.sq.sqn),
    });
    let before = h.dev.counters();
    let cqe = send(&mut h, &mut tx, &frame);
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalProtection as u8);
    let seen = h.dev.counters().since(&before);
    assert_eq!((seen.dma_faults, seen.tx_frames), (1, 0), "{seen:?}");
    let payload = h.alloc(256, 64);
    let wqe = h.build_send(&tx.sq, &frame, payload, key, true);
    h.post(&mut tx.sq, &wqe, false);
    assert!(h.poll_cq(&mut tx.cq).is_none(), "the SQ is in error");

    // Receive: the scatter write is refused; the buffer is untouched.
    let mut tx = tx_path(&mut h, key);
    let mut rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    let buf = h.alloc(2048, 64);
    h.post_recv(&mut rq, buf, 2048, key);
    h.dev.inject(Fault::UnmappedDma {
        queue: DmaQueue::Receive(rq.rqn),
    });
    let before = h.dev.counters();
    send(&mut h, &mut tx, &frame);
    let cqe = h.poll_cq(&mut rx_cq).expect("receive error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), CqeOpcode::RespErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalProtection as u8);
    assert_eq!(h.dev.counters().since(&before).dma_faults, 1);
    assert_eq!(h.read(buf, 64), vec![0u8; 64]);
    assert_eq!(h.dev.faults_taken(), 2);
}
