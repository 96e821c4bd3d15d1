//! What the RDMA completion queue does with CQEs a device got wrong: every field that selects
//! host state is checked, a refused CQE is a typed error (never a panic), and completions
//! gathered before it still come back.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::CompletionQueue;
use crate::cq::CqRing;
use crate::error::DriverError;
use crate::rdma::track::{QpTrack, SentWqe, SlotTrack, SrqTrack};
use crate::rdma::wc::{WcOpcode, WcStatus, WorkCompletion};
use crate::test_support::region;
use cxdirect_hw::cqe::{CqeOpcode, CQE_INITIAL_OP_OWN, CQE_SIZE};

const QPN: u32 = 0x42;
const SRQ_QPN: u32 = 0x43;
const SRQN: u32 = 0x9;
const LOG: u8 = 4;

/// The user index the driver gives every QP, which the device echoes in its CQEs.
const UIDX: u32 = cxdirect_hw::qp::USER_INDEX_NONE;

/// A CQ with QP `QPN` (three one-block WRITEs, the middle one unsignalled, and two receives
/// of 100 bytes posted) and QP `SRQ_QPN` on SRQ `SRQN` (WQEs 0 and 1 posted).
fn cq() -> (CompletionQueue, Arc<QpTrack>, Arc<SrqTrack>) {
    let memory = region(CQE_SIZE << LOG);
    for slot in 0..1usize << LOG {
        memory
            .write(slot * CQE_SIZE + CQE_SIZE - 1, &[CQE_INITIAL_OP_OWN])
            .unwrap();
    }
    let ring = CqRing::new(memory, region(64), LOG, 5, false).unwrap();
    let mut cq = CompletionQueue::over(ring);
    let qp = Arc::new(QpTrack {
        qpn: QPN,
        sq: SlotTrack::new(16),
        rq: SlotTrack::new(4),
        srq: None,
        failed: AtomicBool::new(false),
        datagram: false,
    });
    for i in 0..3 {
        qp.sq.record_send(
            i,
            SentWqe {
                wr_id: 10 + u64::from(i),
                op: WcOpcode::RdmaWrite,
                bbs: 1,
                signaled: i != 1,
                forced: false,
                len: 64,
            },
        );
    }
    qp.sq.publish(3);
    qp.rq.record_recv(0, 20, 100);
    qp.rq.record_recv(1, 21, 100);
    qp.rq.publish(2);
    let srq = Arc::new(SrqTrack::new(SRQN, 4));
    srq.record(0, 30, 100);
    srq.record(1, 31, 100);
    let on_srq = Arc::new(QpTrack {
        qpn: SRQ_QPN,
        sq: SlotTrack::new(16),
        rq: SlotTrack::new(1),
        srq: Some(Arc::clone(&srq)),
        failed: AtomicBool::new(false),
        datagram: false,
    });
    cq.attach(Arc::clone(&qp));
    cq.attach(on_srq);
    (cq, qp, srq)
}

/// Writes a CQE at consumer index `index` as the device does on the first pass.
fn write(
    cq: &CompletionQueue,
    index: u32,
    opcode: CqeOpcode,
    qpn: u32,
    counter: u16,
    bytes: u32,
    user_index: u32,
) {
    let mut c = [0u8; CQE_SIZE];
    c[0x20..0x24].copy_from_slice(&user_index.to_be_bytes());
    c[0x2c..0x30].copy_from_slice(&bytes.to_be_bytes());
    c[0x38..0x3c].copy_from_slice(&qpn.to_be_bytes());
    c[0x3c..0x3e].copy_from_slice(&counter.to_be_bytes());
    c[0x3f] = (opcode as u8) << 4;
    cq.ring.device_writes(index, &c);
}

fn refused(result: Result<usize, DriverError>, what: &str) {
    match result {
        Err(DriverError::BadDeviceValue { what: said, .. }) => {
            assert!(said.contains(what), "{said:?} names {what:?}");
        }
        other => panic!("expected a refusal naming {what:?}, got {other:?}"),
    }
}

#[test]
fn a_completion_retires_the_unsignalled_requests_before_it() {
    let (mut cq, qp, _) = cq();
    write(&cq, 0, CqeOpcode::Req, QPN, 0, 0, UIDX);
    write(&cq, 1, CqeOpcode::Req, QPN, 2, 0, UIDX);
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut out).unwrap(), 2);
    assert_eq!((out[0].wr_id, out[1].wr_id), (10, 12));
    assert_eq!((out[1].qpn, out[1].opcode), (QPN, WcOpcode::RdmaWrite));
    assert_eq!(
        qp.sq.outstanding(),
        0,
        "the unsignalled WRITE retired with the last"
    );
}

#[test]
fn an_unknown_qp_an_unposted_wqe_or_an_unknown_opcode_is_refused_and_the_queue_goes_on() {
    let (mut cq, qp, _) = cq();
    let mut out = [WorkCompletion::default(); 4];
    write(&cq, 0, CqeOpcode::Req, 0x777, 0, 0, UIDX);
    refused(cq.poll(&mut out), "QP number");
    write(&cq, 1, CqeOpcode::Req, QPN, 7, 0, UIDX);
    refused(cq.poll(&mut out), "not outstanding");
    write(&cq, 2, CqeOpcode::Req, QPN, 2, 0, UIDX);
    // Counter 2 skips WQE 0, which asked for a completion of its own.
    refused(cq.poll(&mut out), "skips a signalled");
    write(&cq, 3, CqeOpcode::ResizeCq, QPN, 0, 0, UIDX);
    refused(cq.poll(&mut out), "opcode");
    write(&cq, 4, CqeOpcode::RespSend, QPN, 1, 10, UIDX);
    refused(cq.poll(&mut out), "receive CQE WQE counter");
    write(&cq, 5, CqeOpcode::RespSend, QPN, 0, 101, UIDX);
    refused(cq.poll(&mut out), "byte count");
    assert_eq!(cq.bad_cqes(), 6);
    // Nothing the refusals named was taken: the right completions still come.
    write(&cq, 6, CqeOpcode::Req, QPN, 0, 0, UIDX);
    write(&cq, 7, CqeOpcode::RespSendImm, QPN, 0, 100, UIDX);
    assert_eq!(cq.poll(&mut out).unwrap(), 2);
    assert_eq!((out[0].wr_id, out[1].wr_id, out[1].byte_len), (10, 20, 100));
    assert_eq!(out[1].opcode, WcOpcode::Recv);
    assert_eq!(qp.sq.outstanding(), 2);
}

#[test]
fn srq_completions_must_name_a_posted_wqe_once_and_the_queues_srq() {
    let (mut cq, _, srq) = cq();
    let mut out = [WorkCompletion::default(); 4];
    write(&cq, 0, CqeOpcode::RespSend, SRQ_QPN, 1, 50, UIDX - 1);
    refused(cq.poll(&mut out), "user index");
    write(&cq, 1, CqeOpcode::RespSend, SRQ_QPN, 1, 101, UIDX);
    refused(cq.poll(&mut out), "byte count");
    write(&cq, 2, CqeOpcode::RespSend, SRQ_QPN, 3, 50, UIDX);
    refused(cq.poll(&mut out), "SRQ WQE counter");
    write(&cq, 3, CqeOpcode::RespSend, SRQ_QPN, 1, 50, UIDX);
    write(&cq, 4, CqeOpcode::RespSend, SRQ_QPN, 1, 50, UIDX);
    // The good completion comes first; the second one for the same WQE is refused next.
    assert_eq!(cq.poll(&mut out).unwrap(), 1);
    assert_eq!(
        (out[0].wr_id, out[0].srqn, out[0].status),
        (31, Some(SRQN), WcStatus::Success)
    );
    refused(cq.poll(&mut out), "SRQ WQE counter");
    assert_eq!(
        srq.next_returned(),
        Some(1),
        "the used WQE goes back to the poster once"
    );
    assert_eq!(srq.next_returned(), None);
    assert_eq!(srq.take_all_posted(), vec![30]);
}

#[test]
fn an_error_completion_flushes_by_the_posted_operation_and_marks_the_qp_failed() {
    let (mut cq, qp, _) = cq();
    let mut out = [WorkCompletion::default(); 4];
    let mut c = [0u8; CQE_SIZE];
    c[0x20..0x24].copy_from_slice(&UIDX.to_be_bytes());
    c[0x37] = 0x13;
    c[0x38..0x3c].copy_from_slice(&(0x08u32 << 24 | QPN).to_be_bytes());
    c[0x3c..0x3e].copy_from_slice(&0u16.to_be_bytes());
    c[0x3f] = (CqeOpcode::ReqErr as u8) << 4;
    cq.ring.device_writes(0, &c);
    assert_eq!(cq.poll(&mut out).unwrap(), 1);
    assert_eq!(
        (
            out[0].wr_id,
            out[0].status,
            out[0].opcode,
            out[0].vendor_err
        ),
        (10, WcStatus::RemAccessErr, WcOpcode::RdmaWrite, 0x13)
    );
    assert!(qp.failed.load(std::sync::atomic::Ordering::Relaxed));
}
