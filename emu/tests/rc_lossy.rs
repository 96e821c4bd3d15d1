//! The RoCE v2 RC transport over an impaired wire: with frames dropped, duplicated and
//! reordered, every SEND and RDMA WRITE still arrives exactly once, in order, its bytes
//! intact, with every completion on both sides and no error; every RDMA READ lands once,
//! intact, and every atomic is executed exactly once.

use cxdirect_emu::testkit::{Cq, Host, Sq, IOVA_BASE};
use cxdirect_emu::wire::{ImpairmentCounters, Impairments, PortId, Wire, WireConfig};
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_PA};
use cxdirect_hw::qp::{mtu, rq_type, service_type, CreateQpIn, CreateQpOut, Qpc, Rst2initQpIn};
use cxdirect_hw::roce::{roce_version, SetRoceAddressIn};
use cxdirect_hw::vport::ModifyNicVportContextIn;
use cxdirect_hw::wqe::{opcode, AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, INVALID_LKEY};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MEM: usize = 8 << 20;
const GID_A: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
const GID_B: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
const MAC_A: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [0x02, 0xcd, 0, 0, 0, 2];
/// Bytes of the QP's own receive ring, before its send ring (16 WQEs of 64 bytes).
const RQ_BYTES: u64 = 16 * 64;
const RQ_ENTRIES: u16 = 16;
const MTU: usize = 1024;
/// Messages each test moves, alternately SEND and RDMA WRITE.
const MESSAGES: u16 = 200;
/// The biggest message: sizes cycle through 1..=3 * MTU.
const MAX_LEN: usize = 3 * MTU;
/// Messages posted and not yet completed at the requester, at most.
const IN_FLIGHT: u16 = 12;
/// ACK timeout code: 4.096 us << 9, about 2 ms, so that a lost packet costs little time.
const ACK_TIMEOUT: u8 = 9;
/// How long a test may take to move everything before it fails.
const TIME_LIMIT: Duration = Duration::from_secs(60);
const SEED: u64 = 0x5eed_0c10_55e5;
/// Log2 of the READs and atomics a QP may have outstanding, as requester and as responder.
const LOG_READS: u8 = 3;

fn enable_roce(h: &mut Host, gid: [u8; 16]) {
    let mut input = Host::input(Opcode::ModifyNicVportContext, 0, 0x200);
    let mut cmd = ModifyNicVportContextIn::new(&mut input[..]).expect("layout");
    cmd.field_select_mut().set_roce_en(true);
    cmd.nic_vport_context_mut().set_roce_en(true);
    h.exec(&input, 16)
        .expect("MODIFY_NIC_VPORT_CONTEXT roce_en");
    let mut input = Host::input(Opcode::SetRoceAddress, 0, 0x30);
    let mut cmd = SetRoceAddressIn::new(&mut input[..]).expect("layout");
    cmd.set_roce_address_index(0).set_vhca_port_num(1);
    let mac = if gid == GID_A { MAC_A } else { MAC_B };
    cmd.roce_address_mut()
        .set_gid(gid)
        .set_source_mac(mac)
        .set_roce_l3_type(cxdirect_hw::roce::l3_type::IPV4)
        .set_roce_version(roce_version::V2);
    h.exec(&input, 16).expect("SET_ROCE_ADDRESS");
}

/// CREATE_QP: a 16-entry receive ring of 64-byte WQEs, then a 16-WQEBB send ring.
fn create_qp(h: &mut Host, cq: &Cq) -> Sq {
    let buf = h.alloc(8192, 4096);
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 16);
    let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
    cmd.qpc_mut()
        .set_st(service_type::RC)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_rq_type(rq_type::REGULAR)
        .set_log_rq_size(4)
        .set_log_rq_stride(2)
        .set_log_sq_size(4)
        .set_log_msg_max(20)
        .set_ts_format(1)
        .set_dbr_addr(dbr);
    cmd.set_pas(0, buf).expect("room");
    cmd.set_pas(1, buf + 4096).expect("room");
    let out = h.exec(&input, 16).expect("CREATE_QP");
    let qpn = CreateQpOut::new(&out[..]).expect("layout").qpn();
    Sq {
        sqn: qpn,
        buf: buf + RQ_BYTES,
        dbr,
        log: 4,
        pi: 0,
        bf_toggle: false,
    }
}

fn modify(h: &mut Host, opcode: Opcode, qpn: u32, fill: impl FnOnce(&mut Qpc<&mut [u8]>)) {
    let mut input = Host::input(opcode, 0, 0x110);
    let mut cmd = Rst2initQpIn::new(&mut input[..]).expect("layout");
    cmd.set_qpn(qpn);
    fill(&mut cmd.qpc_mut());
    h.exec(&input, 16).expect("QP transition");
}

/// RST2INIT, INIT2RTR and RTR2RTS towards `remote_qpn` at `peer_gid`/`peer_mac`, path MTU
/// 1024, PSNs `send_psn` and `receive_psn`, the short ACK timeout and 7 retries.
fn connect(
    h: &mut Host,
    qpn: u32,
    peer: ([u8; 16], [u8; 6], u32),
    send_psn: u32,
    receive_psn: u32,
) {
    modify(h, Opcode::Rst2initQp, qpn, |c| {
        c.set_rre(true).set_rwe(true).set_rae(true);
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    modify(h, Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(mtu::MTU_1024)
            .set_log_msg_max(20)
            .set_remote_qpn(peer.2)
            .set_min_rnr_nak(1)
            .set_log_rra_max(LOG_READS)
            .set_next_rcv_psn(receive_psn);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_src_addr_index(0)
            .set_rgid(peer.0)
            .set_rmac(peer.1)
            .set_udp_sport(0xc123)
            .set_hop_limit(64);
    });
    modify(h, Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_next_send_psn(send_psn)
            .set_log_sra_max(LOG_READS)
            .set_retry_count(7)
            .set_rnr_retry(7);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_ack_timeout(ACK_TIMEOUT);
    });
}

/// A one-WQEBB WQE asking for a completion: ctrl, the remote address segment for writes,
/// one data segment.
fn wqe(sq: &Sq, op: u8, remote: Option<(u64, u32)>, local: (u64, u32, u32)) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    let ds = if remote.is_some() { 3 } else { 2 };
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(op)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(ds)
        .set_ce(2);
    let mut at = 16;
    if let Some((raddr, rkey)) = remote {
        RaddrSeg::new(&mut w[at..at + 16])
            .expect("layout")
            .set_raddr(raddr)
            .set_rkey(rkey);
        at += 16;
    }
    DataSeg::new(&mut w[at..at + 16])
        .expect("layout")
        .set_byte_count(local.2)
        .set_lkey(local.1)
        .set_addr(local.0);
    w
}

/// Posts a one-segment receive WQE at the QP's own ring and bumps its doorbell record.
fn post_recv(h: &Host, sq: &Sq, rq_pi: &mut u16, addr: u64, len: u32, lkey: u32) {
    let mut w = [0u8; 64];
    DataSeg::new(&mut w[..16])
        .expect("layout")
        .set_byte_count(len)
        .set_lkey(lkey)
        .set_addr(addr);
    DataSeg::new(&mut w[16..32])
        .expect("layout")
        .set_lkey(INVALID_LKEY);
    let slot = u64::from(*rq_pi % RQ_ENTRIES);
    h.write(sq.buf - RQ_BYTES + slot * 64, &w);
    *rq_pi = rq_pi.wrapping_add(1);
    h.write_be32(sq.dbr, u32::from(*rq_pi));
}

/// A PA memory key over all host memory in the host's PD with remote read, write and
/// atomics.
fn remote_key(h: &mut Host) -> u32 {
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut()
        .set_access_mode(MKC_ACCESS_MODE_PA)
        .set_lr(true)
        .set_lw(true)
        .set_rr(true)
        .set_rw(true)
        .set_a(true)
        .set_pd(h.pd)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(0x5a)
        .set_start_addr(IOVA_BASE)
        .set_len(MEM as u64);
    let out = h.exec(&input, 16).expect("CREATE_MKEY");
    mkey_from_index(
        CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
        0x5a,
    )
}

fn destroy_qp(h: &mut Host, qpn: u32) {
    let mut input = Host::input(Opcode::DestroyQp, 0, 0x10);
    cxdirect_hw::qp::Qp2errIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(qpn);
    h.exec(&input, 16).expect("DESTROY_QP");
}

fn cqe_opcode(cqe: &[u8]) -> u8 {
    cqe[63] >> 4
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn wqe_counter(cqe: &[u8]) -> u16 {
    u16::from_be_bytes([cqe[60], cqe[61]])
}

/// Message `i`: its length (1..=3 * MTU) and bytes, different for every message.
fn message(i: u16) -> Vec<u8> {
    let len = 1 + (usize::from(i) * 997) % MAX_LEN;
    (0..len)
        .map(|k| {
            (k as u8)
                .wrapping_mul(31)
                .wrapping_add(i as u8)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

fn is_send(i: u16) -> bool {
    i % 2 == 0
}

/// Moves [`MESSAGES`] messages from A to B over a wire with `impairments` in both directions
/// and checks that each arrived once, in order, intact, with all completions and no error.
/// Returns what the wire did in both directions, and how many times A sent packets again.
/// Two functions on a pair wire with `impairments` in both directions, each with an RC QP
/// connected to the other's.
struct Link {
    a: Host,
    b: Host,
    cq_a: Cq,
    cq_b: Cq,
    sq_a: Sq,
    sq_b: Sq,
    wire: Arc<Wire>,
}

fn link(impairments: Impairments) -> Link {
    link_on(impairments, ExecMode::Inline)
}

/// [`link`], the functions' work running as `exec` says.
fn link_on(impairments: Impairments, exec: ExecMode) -> Link {
    let cfg = |mac| EmuConfig {
        roce: true,
        mac,
        exec,
        ..EmuConfig::default()
    };
    let da = Device::new(cfg(MAC_A));
    let db = Device::new(cfg(MAC_B));
    let wire = Arc::new(
        Wire::pair_with(WireConfig {
            fifo_capacity: 4096,
            impairments,
        })
        .expect("valid impairments"),
    );
    da.attach(wire.clone(), PortId::A, &[&db]);
    db.attach(wire.clone(), PortId::B, &[&da]);
    let mut a = Host::new(da, MEM);
    let mut b = Host::new(db, MEM);
    a.bring_up();
    b.bring_up();
    enable_roce(&mut a, GID_A);
    enable_roce(&mut b, GID_B);
    let cq_a = a.create_cq(8);
    let cq_b = b.create_cq(8);
    let sq_a = create_qp(&mut a, &cq_a);
    let sq_b = create_qp(&mut b, &cq_b);
    let psn = 0xff_ff00;
    connect(&mut a, sq_a.sqn, (GID_B, MAC_B, sq_b.sqn), psn, 0);
    connect(&mut b, sq_b.sqn, (GID_A, MAC_A, sq_a.sqn), 0, psn);
    Link {
        a,
        b,
        cq_a,
        cq_b,
        sq_a,
        sq_b,
        wire,
    }
}

impl Link {
    /// Lets whatever the wire still holds land, and checks that nothing completes twice.
    fn quiesce(&mut self) {
        self.wire.release_held(PortId::A).expect("port");
        self.wire.release_held(PortId::B).expect("port");
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..4 {
            self.a.dev.poll();
            self.b.dev.poll();
        }
        assert!(
            self.a.poll_cq(&mut self.cq_a).is_none(),
            "no requester completion twice"
        );
        assert!(
            self.b.poll_cq(&mut self.cq_b).is_none(),
            "no responder completion twice"
        );
    }

    /// What the wire did in both directions, and how many times A sent packets again; the
    /// QPs and functions go.
    fn finish(mut self) -> (ImpairmentCounters, u64) {
        let mut done = self.wire.impairment_counters(PortId::A).expect("port");
        let back = self.wire.impairment_counters(PortId::B).expect("port");
        done.frames += back.frames;
        done.dropped += back.dropped;
        done.duplicated += back.duplicated;
        done.reordered += back.reordered;
        done.corrupted += back.corrupted;
        let retransmits = self.a.dev.counters().roce_retransmits;
        destroy_qp(&mut self.a, self.sq_a.sqn);
        destroy_qp(&mut self.b, self.sq_b.sqn);
        self.a.teardown();
        self.b.teardown();
        (done, retransmits)
    }
}

fn run(impairments: Impairments) -> (ImpairmentCounters, u64) {
    let Link {
        mut a,
        mut b,
        mut cq_a,
        mut cq_b,
        mut sq_a,
        sq_b,
        wire,
    } = link(impairments);
    let lkey_a = a.create_mkey(false, true);
    let lkey_b = b.create_mkey(false, true);
    let rkey_b = remote_key(&mut b);
    let slot = MAX_LEN as u64;
    let src = a.alloc(slot * u64::from(MESSAGES), 4096);
    let dst = b.alloc(slot * u64::from(MESSAGES), 4096);
    b.write(dst, &vec![0xee; MAX_LEN * usize::from(MESSAGES)]);
    for i in 0..MESSAGES {
        a.write(src + slot * u64::from(i), &message(i));
    }
    // Receive WQE `r` takes the `r`th SEND, message `2 * r`.
    let sends = (0..MESSAGES).filter(|&i| is_send(i)).count() as u16;
    let mut rq_pi = 0u16;
    let mut posted = 0u16;
    let mut requester_done = 0u16;
    let mut receives_done = 0u16;
    let started = Instant::now();
    while requester_done < MESSAGES || receives_done < sends {
        assert!(
            started.elapsed() < TIME_LIMIT,
            "stuck: {requester_done} requester and {receives_done} responder completions; \
             {:?}",
            a.dev.counters()
        );
        while rq_pi < sends && rq_pi.wrapping_sub(receives_done) < RQ_ENTRIES {
            let i = 2 * rq_pi;
            post_recv(
                &b,
                &sq_b,
                &mut rq_pi,
                dst + slot * u64::from(i),
                MAX_LEN as u32,
                lkey_b,
            );
        }
        while posted < MESSAGES && posted - requester_done < IN_FLIGHT {
            let i = posted;
            let len = message(i).len() as u32;
            let local = (src + slot * u64::from(i), lkey_a, len);
            let w = if is_send(i) {
                wqe(&sq_a, opcode::SEND, None, local)
            } else {
                let remote = (dst + slot * u64::from(i), rkey_b);
                wqe(&sq_a, opcode::RDMA_WRITE, Some(remote), local)
            };
            a.post(&mut sq_a, &w, false);
            posted += 1;
        }
        a.dev.poll();
        b.dev.poll();
        let mut progressed = false;
        while let Some(c) = a.poll_cq(&mut cq_a) {
            let i = requester_done;
            assert_eq!(
                cqe_opcode(&c),
                0,
                "message {i}: a requester completion, no error"
            );
            assert_eq!(wqe_counter(&c), i, "requester completions in order");
            let op = if is_send(i) {
                opcode::SEND
            } else {
                opcode::RDMA_WRITE
            };
            assert_eq!(be32(&c, 56), (u32::from(op) << 24) | sq_a.sqn);
            requester_done += 1;
            progressed = true;
        }
        while let Some(c) = b.poll_cq(&mut cq_b) {
            let r = receives_done;
            let i = 2 * r;
            assert!(r < sends, "a responder completion for no SEND: {c:?}");
            assert_eq!(cqe_opcode(&c), 2, "message {i}: a SEND received, no error");
            assert_eq!(wqe_counter(&c), r, "receives completed in order");
            assert_eq!(
                be32(&c, 44),
                message(i).len() as u32,
                "message {i}: byte count"
            );
            let want = message(i);
            assert_eq!(
                b.read(dst + slot * u64::from(i), want.len()),
                want,
                "message {i}: delivered intact when completed"
            );
            receives_done += 1;
            progressed = true;
        }
        if !progressed {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    let mut link = Link {
        a,
        b,
        cq_a,
        cq_b,
        sq_a,
        sq_b,
        wire,
    };
    // Whatever is still held or retransmitted lands now; nothing may complete twice.
    link.quiesce();
    let b = &link.b;
    for i in 0..MESSAGES {
        let want = message(i);
        let at = dst + slot * u64::from(i);
        assert_eq!(b.read(at, want.len()), want, "message {i}: bytes intact");
        assert_eq!(
            b.read(at + want.len() as u64, MAX_LEN - want.len()),
            vec![0xee; MAX_LEN - want.len()],
            "message {i}: nothing past its end"
        );
    }
    if impairments.corrupt_probability == 0.0 {
        assert_eq!(
            link.b.dev.counters().roce_icrc_drops,
            0,
            "no corruption asked for"
        );
        assert_eq!(
            link.a.dev.counters().roce_icrc_drops,
            0,
            "no corruption asked for"
        );
    }
    link.finish()
}

fn impaired(edit: impl FnOnce(&mut Impairments)) -> Impairments {
    let mut i = Impairments {
        seed: SEED,
        ..Impairments::NONE
    };
    edit(&mut i);
    i
}

#[test]
fn a_clean_wire_moves_every_message() {
    let (wire, retransmits) = run(Impairments::NONE);
    assert_eq!(wire.dropped + wire.duplicated + wire.reordered, 0);
    assert_eq!(retransmits, 0, "nothing lost, nothing sent again");
}

#[test]
fn one_percent_drop() {
    let (wire, retransmits) = run(impaired(|i| i.drop_probability = 0.01));
    assert!(wire.dropped > 0, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn five_percent_drop() {
    let (wire, retransmits) = run(impaired(|i| i.drop_probability = 0.05));
    assert!(wire.dropped > 10, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn duplication() {
    let (wire, _) = run(impaired(|i| i.duplicate_probability = 0.05));
    assert!(wire.duplicated > 10, "frames were duplicated: {wire:?}");
}

#[test]
fn reordering_within_four_frames() {
    let (wire, _) = run(impaired(|i| {
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(wire.reordered > 10, "frames were reordered: {wire:?}");
}

#[test]
fn drop_duplication_and_reordering_together() {
    let (wire, retransmits) = run(impaired(|i| {
        i.drop_probability = 0.05;
        i.duplicate_probability = 0.05;
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(
        wire.dropped > 10 && wire.duplicated > 10 && wire.reordered > 10,
        "every impairment happened: {wire:?}"
    );
    assert!(retransmits > 0, "lost packets were sent again");
}

/// Corrupted and delayed frames as well: a flipped bit anywhere in a frame, the IP version
/// or header length included, costs that frame and nothing else.
#[test]
fn corruption_and_delay_with_everything_else() {
    let (wire, retransmits) = run(impaired(|i| {
        i.drop_probability = 0.05;
        i.duplicate_probability = 0.05;
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
        i.corrupt_probability = 0.05;
        i.delay_frames = 1;
        i.delay_jitter_frames = 3;
    }));
    assert!(wire.corrupted > 10, "frames were corrupted: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

/// Operations each READ and atomic test runs: in turn an RDMA READ, a fetch-and-add and an
/// RDMA WRITE (whose ACKs may pass a READ or atomic whose response was lost).
const OPERATIONS: u16 = 240;
/// What each fetch-and-add adds.
const ADD: u64 = 3;

fn is_read(i: u16) -> bool {
    i % 3 == 0
}

fn is_atomic(i: u16) -> bool {
    i % 3 == 1
}

/// A one-WQEBB fetch-and-add of [`ADD`] at `remote`, the original value landing in `local`.
fn fetch_add_wqe(sq: &Sq, remote: (u64, u32), local: (u64, u32)) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    CtrlSeg::new(&mut w[..16])
        .expect("layout")
        .set_opcode(opcode::ATOMIC_FA)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(4)
        .set_ce(2);
    RaddrSeg::new(&mut w[16..32])
        .expect("layout")
        .set_raddr(remote.0)
        .set_rkey(remote.1);
    AtomicSeg::new(&mut w[32..48])
        .expect("layout")
        .set_swap_add(ADD);
    DataSeg::new(&mut w[48..64])
        .expect("layout")
        .set_byte_count(8)
        .set_lkey(local.1)
        .set_addr(local.0);
    w
}

/// A runs [`OPERATIONS`] operations on B over a wire with `impairments` in both directions:
/// in turn an RDMA READ of message `i` (1..=3 * MTU bytes), a fetch-and-add of [`ADD`] to one
/// counter, and an RDMA WRITE of message `i`. Checks: every requester completion once, in
/// order, without error; every READ's and WRITE's bytes intact and nothing past them; the
/// `k`th fetch-and-add found exactly `k * ADD` (each executed once, in order) and the counter
/// ends at the number of them times [`ADD`]; nothing completes at B. Returns what the wire
/// did, A's retransmissions and A's implied NAKs.
fn run_reads_and_atomics(impairments: Impairments) -> (ImpairmentCounters, u64, u64) {
    let mut link = link(impairments);
    let lkey_a = link.a.create_mkey(false, true);
    let rkey_b = remote_key(&mut link.b);
    let slot = MAX_LEN as u64;
    let src = link.b.alloc(slot * u64::from(OPERATIONS), 4096);
    let dst = link.a.alloc(slot * u64::from(OPERATIONS), 4096);
    let counter = link.b.alloc(64, 64);
    link.b.write(counter, &0u64.to_be_bytes());
    link.a
        .write(dst, &vec![0xee; MAX_LEN * usize::from(OPERATIONS)]);
    link.b
        .write(src, &vec![0xee; MAX_LEN * usize::from(OPERATIONS)]);
    for i in 0..OPERATIONS {
        let at = slot * u64::from(i);
        if is_read(i) {
            link.b.write(src + at, &message(i));
        } else if !is_atomic(i) {
            link.a.write(dst + at, &message(i));
        }
    }
    let mut posted = 0u16;
    let mut done = 0u16;
    let started = Instant::now();
    while done < OPERATIONS {
        assert!(
            started.elapsed() < TIME_LIMIT,
            "stuck: {done} completions; {:?}",
            link.a.dev.counters()
        );
        while posted < OPERATIONS && posted - done < IN_FLIGHT {
            let i = posted;
            let at = dst + slot * u64::from(i);
            let len = message(i).len() as u32;
            let remote = (src + slot * u64::from(i), rkey_b);
            let w = if is_read(i) {
                wqe(
                    &link.sq_a,
                    opcode::RDMA_READ,
                    Some(remote),
                    (at, lkey_a, len),
                )
            } else if is_atomic(i) {
                fetch_add_wqe(&link.sq_a, (counter, rkey_b), (at, lkey_a))
            } else {
                wqe(
                    &link.sq_a,
                    opcode::RDMA_WRITE,
                    Some(remote),
                    (at, lkey_a, len),
                )
            };
            link.a.post(&mut link.sq_a, &w, false);
            posted += 1;
        }
        link.a.dev.poll();
        link.b.dev.poll();
        let mut progressed = false;
        while let Some(c) = link.a.poll_cq(&mut link.cq_a) {
            let i = done;
            assert_eq!(cqe_opcode(&c), 0, "operation {i}: completed, no error");
            assert_eq!(wqe_counter(&c), i, "completions in order");
            let at = dst + slot * u64::from(i);
            if is_read(i) {
                let want = message(i);
                assert_eq!(be32(&c, 44), want.len() as u32, "READ {i}: byte count");
                assert_eq!(
                    be32(&c, 56),
                    (u32::from(opcode::RDMA_READ) << 24) | link.sq_a.sqn
                );
                assert_eq!(
                    link.a.read(at, want.len()),
                    want,
                    "READ {i}: intact when completed"
                );
            } else if is_atomic(i) {
                let k = u64::from(i / 3);
                assert_eq!(be32(&c, 44), 8, "atomic {i}: byte count");
                assert_eq!(
                    link.a.read(at, 8),
                    (k * ADD).to_be_bytes(),
                    "atomic {i}: the {k}th fetch-and-add found {k} adds before it"
                );
            } else {
                let want = message(i);
                assert_eq!(
                    link.b.read(src + slot * u64::from(i), want.len()),
                    want,
                    "WRITE {i}: intact when completed"
                );
            }
            done += 1;
            progressed = true;
        }
        assert!(
            link.b.poll_cq(&mut link.cq_b).is_none(),
            "READs and atomics complete nothing at the responder"
        );
        if !progressed {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    link.quiesce();
    let atomics = u64::from(OPERATIONS / 3);
    assert_eq!(
        link.b.read(counter, 8),
        (atomics * ADD).to_be_bytes(),
        "every fetch-and-add executed exactly once"
    );
    for i in 0..OPERATIONS {
        let len = if is_atomic(i) { 8 } else { message(i).len() };
        // A READ lands at A, a WRITE at B; an atomic's result at A.
        let (h, at) = if is_read(i) || is_atomic(i) {
            (&link.a, dst + slot * u64::from(i))
        } else {
            (&link.b, src + slot * u64::from(i))
        };
        if !is_atomic(i) {
            assert_eq!(h.read(at, len), message(i), "operation {i}: intact");
        }
        assert_eq!(
            h.read(at + len as u64, MAX_LEN - len),
            vec![0xee; MAX_LEN - len],
            "operation {i}: nothing past its end"
        );
    }
    let implied = link.a.dev.counters().roce_implied_naks;
    let (wire, retransmits) = link.finish();
    (wire, retransmits, implied)
}

#[test]
fn reads_and_atomics_on_a_clean_wire() {
    let (wire, retransmits, _) = run_reads_and_atomics(Impairments::NONE);
    assert_eq!(wire.dropped + wire.duplicated + wire.reordered, 0);
    assert_eq!(retransmits, 0, "nothing lost, nothing sent again");
}

#[test]
fn reads_and_atomics_with_one_percent_drop() {
    let (wire, retransmits, _) = run_reads_and_atomics(impaired(|i| i.drop_probability = 0.01));
    assert!(wire.dropped > 0, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
}

#[test]
fn reads_and_atomics_with_five_percent_drop() {
    let (wire, retransmits, implied) =
        run_reads_and_atomics(impaired(|i| i.drop_probability = 0.05));
    assert!(wire.dropped > 10, "frames were dropped: {wire:?}");
    assert!(retransmits > 0, "lost packets were sent again");
    assert!(
        implied > 0,
        "ACKs past a lost READ response or atomic acknowledgement sent it again"
    );
}

#[test]
fn reads_and_atomics_with_duplication() {
    let (wire, _, _) = run_reads_and_atomics(impaired(|i| i.duplicate_probability = 0.05));
    assert!(wire.duplicated > 10, "frames were duplicated: {wire:?}");
}

#[test]
fn reads_and_atomics_with_reordering() {
    let (wire, _, _) = run_reads_and_atomics(impaired(|i| {
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(wire.reordered > 10, "frames were reordered: {wire:?}");
}

#[test]
fn reads_and_atomics_with_drop_duplication_and_reordering_together() {
    let (wire, retransmits, _) = run_reads_and_atomics(impaired(|i| {
        i.drop_probability = 0.05;
        i.duplicate_probability = 0.05;
        i.reorder_probability = 0.05;
        i.reorder_window = 4;
    }));
    assert!(
        wire.dropped > 10 && wire.duplicated > 10 && wire.reordered > 10,
        "every impairment happened: {wire:?}"
    );
    assert!(retransmits > 0, "lost packets were sent again");
}

/// Behind a device thread (as behind the vfio-user server) nobody calls `poll`: the thread
/// itself must send again what was lost, when the ACK timer runs out. Every second frame
/// each port sends is dropped, so SENDs and ACKs go missing with nothing after them to
/// reveal the gap; only the timer recovers them.
#[test]
fn the_device_thread_sends_lost_frames_again_without_a_poll() {
    let mut link = link_on(impaired(|i| i.drop_every = 2), ExecMode::Threaded);
    let lkey_a = link.a.create_mkey(false, true);
    let lkey_b = link.b.create_mkey(false, true);
    let src = link.a.alloc(4096, 4096);
    let dst = link.b.alloc(4096 * 4, 4096);
    let mut rq_pi = 0u16;
    for i in 0..4u16 {
        // One packet each: a message of two would lose one of them every time it is sent.
        let mut want = message(i);
        want.truncate(MTU / 2);
        let at = dst + 4096 * u64::from(i);
        post_recv(&link.b, &link.sq_b, &mut rq_pi, at, 4096, lkey_b);
        link.a.write(src, &want);
        let w = wqe(
            &link.sq_a,
            opcode::SEND,
            None,
            (src, lkey_a, want.len() as u32),
        );
        link.a.post(&mut link.sq_a, &w, false);
        // Only memory is read here: the CQs, never the device.
        let started = Instant::now();
        let done = loop {
            if let Some(c) = link.a.poll_cq(&mut link.cq_a) {
                break c;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "message {i} never completed; {:?}",
                link.a.dev.counters()
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(cqe_opcode(&done), 0, "message {i}: completed, no error");
        assert_eq!(wqe_counter(&done), i);
        let received = loop {
            if let Some(c) = link.b.poll_cq(&mut link.cq_b) {
                break c;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "message {i} not received"
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(cqe_opcode(&received), 2, "message {i}: received");
        assert_eq!(link.b.read(at, want.len()), want, "message {i}: intact");
    }
    let wire = link.wire.impairment_counters(PortId::A).expect("port");
    assert!(wire.dropped > 0, "frames were lost: {wire:?}");
    let a = link.a.dev.counters();
    assert!(a.roce_retransmits > 0, "the timer sent them again");
    assert_eq!(
        a.roce_naks_sent + link.b.dev.counters().roce_naks_sent,
        0,
        "no NAK revealed a gap"
    );
    link.finish();
}
