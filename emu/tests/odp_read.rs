//! On-demand paging of RDMA READ and atomics, either side, as Linux 6.12's mlx5_ib resolves
//! them (odp.c): a responder's READ source or atomic target not present is reported with the
//! RDMA sub type and mapped by `mlx5_ib_mr_rdma_pfault_handler`; a READ response or atomic
//! acknowledgement landing in a requester's local buffer not present is reported with the WQE
//! sub type (`MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC`), read back from the send queue and parsed
//! by `mlx5_ib_mr_initiator_pfault_handler` (the remote address segment, and an atomic's atomic
//! segment, skipped to the scatter list). Both resume by `mlx5_ib_page_fault_resume`; resumed
//! with an error, the WQE fails and nothing lands.

mod odp_kit;

use cxdirect_emu::testkit::rc::{rc_wqe, RemoteRights};
use cxdirect_emu::testkit::rc_pair::RcPair;
use odp_kit::*;

/// The READs' size: two 4 KiB pages.
const LEN: usize = 8192;
/// The path MTU every pair here runs at (1024 bytes).
const MTU: usize = 1024;

/// A READ WQE of `len` bytes from `remote` (address, rkey) into `local` (address, lkey).
fn read_wqe(p: &RcPair, remote: (u64, u32), local: (u64, u32), len: u32) -> [u8; 64] {
    rc_wqe(
        &p.qp_a.sq,
        opcode::RDMA_READ,
        0,
        Some(remote),
        None,
        (local.0, local.1, len),
    )
}

/// A fetch-and-add of `add` on the 8 bytes at `remote`, the original value into `local`.
fn fetch_add_wqe(p: &RcPair, remote: (u64, u32), local: (u64, u32), add: u64) -> [u8; 64] {
    rc_wqe(
        &p.qp_a.sq,
        opcode::ATOMIC_FA,
        0,
        Some(remote),
        Some((add, 0)),
        (local.0, local.1, 8),
    )
}

/// B's memory readable and atomically writable by A: `len` bytes holding `data`.
fn remote_buffer(p: &mut RcPair, data: &[u8]) -> (u64, u32) {
    let addr = p.b.alloc(data.len() as u64, 4096);
    p.b.write(addr, data);
    let rights = RemoteRights {
        read: true,
        write: true,
        atomic: true,
    };
    let pd = p.b.pd;
    let key =
        p.b.create_remote_mkey(pd, addr, data.len() as u64, rights, 0x31);
    (addr, key)
}

fn rdma_fault(faults: &[(u8, Vec<u8>)]) -> EqePageFaultRdma<&[u8]> {
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::RDMA);
    EqePageFaultRdma::new(&faults[0].1[..]).expect("layout")
}

fn wqe_fault(faults: &[(u8, Vec<u8>)]) -> EqePageFaultWqe<&[u8]> {
    assert_eq!(faults.len(), 1, "one fault reported: {faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    EqePageFaultWqe::new(&faults[0].1[..]).expect("layout")
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_a_read_source_and_the_read_completes() {
    let mut p = odp_pair(true);
    let iova = 0x7e00_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.b, 2, iova, &[true, false]);
    let data = pattern(LEN, 21);
    p.b.write(mr.pages[0], &data[..4096]);
    p.b.write(mr.pages[1], &data[4096..]);
    let lkey_a = p.a.create_mkey(false, true);
    let dst = p.a.alloc(LEN as u64, 4096);
    let w = read_wqe(&p, (iova, mr.key), (dst, lkey_a), LEN as u32);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the READ waits");
    assert!(p.b.dev.counters().roce_rnr_naks_sent >= 1, "an RNR NAK");
    let faults = page_faults(&mut p.b);
    let e = rdma_fault(&faults);
    // A READ's type is MLX5_PFAULT_RDMA alone: the responder reads the page.
    assert_eq!(e.pf_type(), pfault_flags::RDMA);
    assert_eq!((e.token(), e.r_key()), (p.qp_b.qpn, mr.key));
    assert_eq!((e.rdma_va(), e.rdma_op_len()), (iova, LEN as u32));
    assert_eq!(e.bytes_committed(), 0, "no response went");
    assert_eq!(
        usize::from(e.packet_length()),
        MTU,
        "the first response's size"
    );
    assert_eq!(p.a.read(dst, LEN), vec![0; LEN], "nothing was sent");
    mr.update_xlt(&mut p.b, &[true, true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1, "the READ completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.a.read(dst, LEN), data);
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_reads_a_read_wqe_and_the_response_lands_after_resume() {
    let mut p = odp_pair(true);
    let data = pattern(LEN, 33);
    let remote = remote_buffer(&mut p, &data);
    // The READ's local buffer: its first page mapped, the second not.
    let iova = 0x7e10_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 2, iova, &[true, false]);
    let w = read_wqe(&p, remote, (iova, mr.key), LEN as u32);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the READ waits");
    let faults = page_faults(&mut p.a);
    let e = wqe_fault(&faults);
    // MLX5_WQE_PF_TYPE_REQ_READ_OR_ATOMIC has MLX5_PFAULT_REQUESTOR: mlx5_ib reads the WQE
    // from the send queue (`mlx5_ib_read_wqe_sq`) at wqe_index, of the QP wq_num names.
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_READ_OR_ATOMIC);
    assert_ne!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!(
        (e.wq_num(), e.token(), e.wqe_index()),
        (p.qp_a.qpn, p.qp_a.qpn, 0)
    );
    // The responses before the second page landed: pagefault_data_segments skips them.
    assert_eq!(e.bytes_committed(), 4096);
    assert_eq!(mr.read(&p.a, 4096), data[..4096].to_vec());
    // Nothing retransmits while the fault waits.
    std::thread::sleep(PAST_RNR);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty());
    assert!(page_faults(&mut p.a).is_empty(), "reported once");
    mr.update_xlt(&mut p.a, &[true, true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the READ completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(mr.read(&p.a, LEN), data);
}

#[test]
fn mlx5_ib_mr_initiator_pfault_handler_reads_an_atomic_wqe_and_the_atomic_runs_once() {
    let mut p = odp_pair(true);
    let original = 0x0102_0304_0506_0708u64;
    let remote = remote_buffer(&mut p, &original.to_be_bytes());
    let iova = 0x7e20_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let w = fetch_add_wqe(&p, remote, (iova, mr.key), 5);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.a);
    let e = wqe_fault(&faults);
    assert_eq!(e.pf_type(), wqe_pf_type::REQ_READ_OR_ATOMIC);
    assert_eq!(
        (e.wq_num(), e.wqe_index(), e.bytes_committed()),
        (p.qp_a.qpn, 0, 0)
    );
    assert_eq!(mr.read(&p.a, 8), vec![0; 8], "the result waits");
    mr.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the atomic completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    // The retransmitted atomic is answered from its first execution, not run again.
    assert_eq!(mr.read(&p.a, 8), original.to_be_bytes().to_vec());
    assert_eq!(p.b.read(remote.0, 8), (original + 5).to_be_bytes().to_vec());
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_an_atomic_target_and_the_atomic_runs_after_resume() {
    let mut p = odp_pair(true);
    let iova = 0x7e30_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let original = 41u64;
    p.b.write(mr.pages[0] + 8, &original.to_be_bytes());
    let lkey_a = p.a.create_mkey(false, true);
    let result = p.a.alloc(8, 8);
    let w = fetch_add_wqe(&p, (iova + 8, mr.key), (result, lkey_a), 1);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    assert!(drain(&p.a, &mut p.cq_a).is_empty(), "the atomic waits");
    let faults = page_faults(&mut p.b);
    let e = rdma_fault(&faults);
    // The atomic writes its target: MLX5_PFAULT_RDMA | MLX5_PFAULT_WRITE, 8 bytes.
    assert_eq!(e.pf_type(), pfault_flags::RDMA | pfault_flags::WRITE);
    assert_eq!(
        (e.rdma_va(), e.rdma_op_len(), e.r_key()),
        (iova + 8, 8, mr.key)
    );
    assert_eq!(e.token(), p.qp_b.qpn);
    assert_eq!(
        mr.read(&p.b, 16)[8..],
        original.to_be_bytes(),
        "not run yet"
    );
    mr.update_xlt(&mut p.b, &[true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1, "the atomic completed");
    assert_eq!(cqe_opcode(&done[0]), CQE_REQ);
    assert_eq!(p.a.read(result, 8), original.to_be_bytes().to_vec());
    assert_eq!(mr.read(&p.b, 16)[8..], (original + 1).to_be_bytes());
}

#[test]
fn a_read_or_atomic_fault_resumed_with_an_error_fails_the_wqe_and_writes_nothing() {
    // Requester READ: the WQE completes with a local protection error, the page untouched.
    let mut p = odp_pair(true);
    let data = pattern(2000, 9);
    let remote = remote_buffer(&mut p, &data);
    let iova = 0x7e40_0000_0000u64;
    let mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let w = read_wqe(&p, remote, (iova, mr.key), 2000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.a);
    let e = wqe_fault(&faults);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_LOCAL_PROT)
    );
    assert_eq!(p.a.read(mr.pages[0], 2000), vec![0; 2000], "nothing landed");

    // Responder atomic: refused with a remote access error, its target unchanged.
    let mut p = odp_pair(true);
    let iova = 0x7e50_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.write(mr.pages[0], &7u64.to_be_bytes());
    let lkey_a = p.a.create_mkey(false, true);
    let result = p.a.alloc(8, 8);
    p.a.write(result, &[0xee; 8]);
    let w = fetch_add_wqe(&p, (iova, mr.key), (result, lkey_a), 1);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    let e = rdma_fault(&faults);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert_eq!(
        p.b.read(mr.pages[0], 8),
        7u64.to_be_bytes().to_vec(),
        "not run"
    );
    assert_eq!(p.a.read(result, 8), vec![0xee; 8], "no result written");

    // Responder READ: refused with a remote access error, nothing read into A.
    let mut p = odp_pair(true);
    let iova = 0x7e60_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    p.b.write(mr.pages[0], &[0x5a; 512]);
    let lkey_a = p.a.create_mkey(false, true);
    let dst = p.a.alloc(512, 64);
    let w = read_wqe(&p, (iova, mr.key), (dst, lkey_a), 512);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let faults = page_faults(&mut p.b);
    let e = rdma_fault(&faults);
    assert_eq!(e.pf_type(), pfault_flags::RDMA);
    // A resume naming the wrong kind (a WRITE's type) is refused; the fault still waits.
    assert!(resume(
        &mut p.b,
        pfault_flags::RDMA | pfault_flags::WRITE,
        e.token(),
        e.token(),
        true
    )
    .is_err());
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let done = completions_after_rnr(&mut p, true);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert_eq!(p.a.read(dst, 512), vec![0; 512]);
}

#[test]
fn without_a_page_fault_eq_a_read_source_not_present_is_a_remote_access_error() {
    let mut p = odp_pair(false);
    let iova = 0x7e70_0000_0000u64;
    let mr = OdpMr::new(&mut p.b, 1, iova, &[false]);
    let lkey_a = p.a.create_mkey(false, true);
    let dst = p.a.alloc(512, 64);
    let w = read_wqe(&p, (iova, mr.key), (dst, lkey_a), 512);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (cqe_opcode(&done[0]), done[0][0x37]),
        (CQE_REQ_ERR, SYND_REMOTE_ACCESS)
    );
    assert!(page_faults(&mut p.b).is_empty());
}

#[test]
fn a_send_behind_a_faulted_read_waits_and_completes_after_it_in_order() {
    let mut p = odp_pair(true);
    let data = pattern(3000, 17);
    let remote = remote_buffer(&mut p, &data);
    let iova = 0x7e80_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.a, 1, iova, &[false]);
    let lkey_b = p.b.create_mkey(false, true);
    let dst = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst, 4096, lkey_b);
    let w = read_wqe(&p, remote, (iova, mr.key), 3000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    let lkey_a = p.a.create_mkey(false, true);
    let src = p.a.alloc(64, 64);
    p.a.write(src, b"behind the read");
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src, lkey_a), 15);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    // The SEND went before the READ's response faulted and was acknowledged; it completes
    // only after the READ does.
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "the SEND was received");
    assert!(
        drain(&p.a, &mut p.cq_a).is_empty(),
        "nothing completes before the READ"
    );
    let faults = page_faults(&mut p.a);
    let e = wqe_fault(&faults);
    assert_eq!(
        (e.pf_type(), e.wqe_index()),
        (wqe_pf_type::REQ_READ_OR_ATOMIC, 0)
    );
    std::thread::sleep(PAST_RNR);
    p.settle();
    assert_eq!(
        p.a.dev.counters().roce_retransmits,
        0,
        "nothing is sent again while the fault waits (the SEND's ACK is no implied NAK)"
    );
    mr.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 2, "the READ, then the SEND");
    assert!(done.iter().all(|c| cqe_opcode(c) == CQE_REQ));
    let counters: Vec<u16> = done
        .iter()
        .map(|c| u16::from_be_bytes([c[0x3c], c[0x3d]]))
        .collect();
    assert_eq!(counters, vec![0, 1], "in posting order");
    assert_eq!(mr.read(&p.a, 3000), data);
    assert!(
        drain(&p.b, &mut p.cq_b).is_empty(),
        "the SEND was taken once"
    );
}

#[test]
fn a_read_response_behind_a_waiting_gather_fault_is_reported_after_that_resume() {
    let mut p = odp_pair(true);
    let data = pattern(1000, 61);
    let remote = remote_buffer(&mut p, &data);
    let lkey_b = p.b.create_mkey(false, true);
    let dst_b = p.b.alloc(4096, 4096);
    p.b.post_rc_recv(&mut p.qp_b, dst_b, 4096, lkey_b);
    // The READ's destination and the SEND's source, both not present.
    let mut dst = OdpMr::new(&mut p.a, 1, 0x7e90_0000_0000, &[false]);
    let mut src = OdpMr::new(&mut p.a, 1, 0x7ea0_0000_0000, &[false]);
    p.a.write(src.pages[0], b"sent after the read");
    let w = read_wqe(&p, remote, (dst.iova, dst.key), 1000);
    p.a.post(&mut p.qp_a.sq, &w, false);
    let w = wqe_of(&p.qp_a.sq, opcode::SEND, (0, 0), (src.iova, src.key), 19);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    // The SEND's gather faulted first; the READ's response came behind it and was dropped,
    // not reported over it.
    let faults = page_faults(&mut p.a);
    let e = wqe_fault(&faults);
    assert_eq!(
        (e.pf_type(), e.wqe_index()),
        (wqe_pf_type::REQ_SEND_OR_WRITE, 1)
    );
    src.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    // The SEND's ACK passes the READ: sent again, its response faults now.
    assert_eq!(drain(&p.b, &mut p.cq_b).len(), 1, "the SEND was received");
    let faults = page_faults(&mut p.a);
    let e = wqe_fault(&faults);
    assert_eq!(
        (e.pf_type(), e.wqe_index()),
        (wqe_pf_type::REQ_READ_OR_ATOMIC, 0)
    );
    assert!(drain(&p.a, &mut p.cq_a).is_empty());
    dst.update_xlt(&mut p.a, &[true], false, 0, 0);
    resume(&mut p.a, e.pf_type(), e.wq_num(), e.token(), false).expect("PAGE_FAULT_RESUME");
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 2, "the READ, then the SEND");
    assert!(done.iter().all(|c| cqe_opcode(c) == CQE_REQ));
    assert_eq!(dst.read(&p.a, 1000), data);
    assert_eq!(p.b.read(dst_b, 19), b"sent after the read".to_vec());
}

/// The frames on the pair's wire, tapped by a pcap writer.
#[derive(Clone, Default)]
struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured(p: &RcPair, capture: &Capture) -> Vec<Vec<u8>> {
    p.wire.flush_pcap().expect("flush");
    let bytes = capture.0.lock().expect("capture").clone();
    let capture = pcap_parser::PcapCapture::from_file(&bytes).expect("a pcap file");
    capture.blocks.iter().map(|b| b.data.to_vec()).collect()
}

/// BTH opcode and PSN of an IPv4 RoCE v2 frame, and its AETH syndrome where it has one.
fn bth_of(frame: &[u8]) -> (u8, u32, Option<u8>) {
    let psn = u32::from_be_bytes([frame[50], frame[51], frame[52], frame[53]]) & 0xff_ffff;
    let aeth = (frame.len() >= 58 && (0x0d..=0x12).contains(&frame[42])).then(|| frame[54]);
    (frame[42], psn, aeth)
}

const READ_REQUEST: u8 = 0x0c;
const ACKNOWLEDGE: u8 = 0x11;
const READ_RESPONSES: std::ops::RangeInclusive<u8> = 0x0d..=0x10;

/// A READ of B's ODP region answered once (every page present), then its pages paged out
/// (`mlx5_ib_invalidate_range` zeroes their entries by UMR) and its request arriving again:
/// the pair, the region, the data, A's buffer, the wire tap and the request's frame.
fn read_then_page_out() -> (RcPair, OdpMr, Vec<u8>, u64, Capture, Vec<u8>) {
    let mut p = odp_pair(true);
    let capture = Capture::default();
    p.wire
        .set_pcap(cxdirect_emu::pcap::PcapWriter::new(capture.clone()).expect("pcap header"))
        .expect("tap");
    let iova = 0x7e80_0000_0000u64;
    let mut mr = OdpMr::new(&mut p.b, 2, iova, &[true, true]);
    let data = pattern(LEN, 33);
    p.b.write(mr.pages[0], &data[..4096]);
    p.b.write(mr.pages[1], &data[4096..]);
    let lkey_a = p.a.create_mkey(false, true);
    let dst = p.a.alloc(LEN as u64, 4096);
    let w = read_wqe(&p, (iova, mr.key), (dst, lkey_a), LEN as u32);
    p.a.post(&mut p.qp_a.sq, &w, false);
    p.settle();
    let done = drain(&p.a, &mut p.cq_a);
    assert_eq!(done.len(), 1, "the READ completed");
    assert_eq!(p.a.read(dst, LEN), data);
    let request = captured(&p, &capture)
        .into_iter()
        .find(|f| bth_of(f).0 == READ_REQUEST)
        .expect("the READ request on the wire");
    mr.update_xlt(&mut p.b, &[false, true], false, 0, 0);
    (p, mr, data, dst, capture, request)
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_maps_a_duplicate_read_source_answered_by_rnr_naks_until_resumed()
{
    let (mut p, mut mr, data, _dst, capture, request) = read_then_page_out();
    let psn = bth_of(&request).1;
    let before = captured(&p, &capture).len();
    let rnr_before = p.b.dev.counters().roce_rnr_naks_sent;
    p.wire
        .transmit(cxdirect_emu::wire::PortId::A, &request)
        .expect("transmit");
    p.settle();
    // The duplicate faults as a first READ does: the RDMA sub type, its whole range.
    let faults = page_faults(&mut p.b);
    let e = rdma_fault(&faults);
    assert_eq!(e.pf_type(), pfault_flags::RDMA);
    assert_eq!((e.token(), e.r_key()), (p.qp_b.qpn, mr.key));
    assert_eq!((e.rdma_va(), e.rdma_op_len()), (mr.iova, LEN as u32));
    let answers: Vec<_> = captured(&p, &capture)
        .split_off(before)
        .iter()
        .map(|f| bth_of(f))
        .filter(|a| a.0 != READ_REQUEST)
        .collect();
    assert!(
        !answers.is_empty() && answers.iter().all(|a| a.0 == ACKNOWLEDGE && a.1 == psn),
        "answered at its PSN: {answers:?}"
    );
    assert!(
        answers
            .iter()
            .all(|a| a.2.is_some_and(|s| s & 0x60 == 0x20)),
        "by RNR NAKs: {answers:?}"
    );
    assert!(p.b.dev.counters().roce_rnr_naks_sent > rnr_before);
    // Again while the fault waits: another RNR NAK, no second fault.
    p.wire
        .transmit(cxdirect_emu::wire::PortId::A, &request)
        .expect("transmit");
    p.settle();
    assert!(page_faults(&mut p.b).is_empty());
    // Mapped and resumed: the next copy is answered from memory.
    mr.update_xlt(&mut p.b, &[true, true], false, 0, 0);
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), false).expect("PAGE_FAULT_RESUME");
    let before = captured(&p, &capture).len();
    p.wire
        .transmit(cxdirect_emu::wire::PortId::A, &request)
        .expect("transmit");
    p.settle();
    let responses: Vec<_> = captured(&p, &capture)
        .split_off(before)
        .iter()
        .map(|f| bth_of(f))
        .filter(|a| READ_RESPONSES.contains(&a.0))
        .collect();
    assert_eq!(responses.len(), LEN / MTU, "answered again: {responses:?}");
    assert_eq!(responses[0].1, psn);
    assert!(page_faults(&mut p.b).is_empty());
    assert_eq!(mr.read(&p.b, LEN), data);
}

#[test]
fn mlx5_ib_mr_rdma_pfault_handler_failing_a_duplicate_read_refuses_it_and_nothing_is_answered() {
    let (mut p, _mr, _data, _dst, capture, request) = read_then_page_out();
    let psn = bth_of(&request).1;
    p.wire
        .transmit(cxdirect_emu::wire::PortId::A, &request)
        .expect("transmit");
    p.settle();
    let faults = page_faults(&mut p.b);
    let e = rdma_fault(&faults);
    // pagefault_single_data_segment failed (-EFAULT): resumed with the error bit.
    resume(&mut p.b, e.pf_type(), e.token(), e.token(), true).expect("resume with error");
    let before = captured(&p, &capture).len();
    p.wire
        .transmit(cxdirect_emu::wire::PortId::A, &request)
        .expect("transmit");
    p.settle();
    let answers: Vec<_> = captured(&p, &capture)
        .split_off(before)
        .iter()
        .map(|f| bth_of(f))
        .filter(|a| a.0 != READ_REQUEST)
        .collect();
    assert_eq!(
        answers,
        [(ACKNOWLEDGE, psn, Some(0x62))],
        "a remote access NAK, no response"
    );
    // QUERY_QP as mlx5_ib's `mlx5_ib_query_qp` sends it.
    let mut query = cxdirect_emu::testkit::Host::input(Opcode::QueryQp, 0, 16);
    cxdirect_hw::qp::Qp2errIn::new(&mut query[..])
        .expect("layout")
        .set_qpn(p.qp_b.qpn);
    let out = p.b.exec(&query, 0x1d0).expect("QUERY_QP");
    let ctx = cxdirect_hw::qp::Qpc::new(&out[0x18..]).expect("layout");
    assert_eq!(
        ctx.state(),
        cxdirect_hw::qp::state::ERR,
        "the responder's QP in error"
    );
}
