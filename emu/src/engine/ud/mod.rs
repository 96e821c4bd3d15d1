//! The RoCE v2 unreliable datagram (UD) transport, which also carries the MADs of the general
//! services QP (QP1): each send WQE is one datagram, each datagram fills one receive WQE.
//!
//! The rooms: [`send`] turns send WQEs (control segment, the 48-byte address vector of the
//! datagram segment, data or inline segments) into `SEND_ONLY` packets with a DETH;
//! [`receive`] takes packets addressed to a UD QP (or to QP 1), checks the Q_Key and writes
//! the 40-byte GRH area, the payload and the responder CQE; [`completion`] writes CQEs and
//! flushes the queues of a QP in error; [`page_fault`] stops the send queue at a page not
//! present (on-demand paging) until PAGE_FAULT_RESUME, and drops datagrams for a receive WQE
//! (own ring or SRQ) whose page is not present until then. There is no PSN check, no
//! acknowledgement and no RNR: a datagram with no receive WQE, or the wrong Q_Key, is dropped
//! and counted.

pub(crate) mod completion;
pub(crate) mod page_fault;
pub(crate) mod receive;
pub(crate) mod send;

pub(crate) use completion::flush_on_error;
pub(crate) use receive::receive;
pub(crate) use send::doorbell;

/// BTH opcode of a UD SEND in one packet (IBA: the UD opcode group 0x60 plus SEND_ONLY).
pub(crate) const UD_SEND_ONLY: u8 = 0x64;
/// BTH opcode of a UD SEND in one packet with immediate data.
pub(crate) const UD_SEND_ONLY_IMM: u8 = 0x65;
/// The destination QP of every multicast packet (`IB_MULTICAST_QPN`, include/rdma/ib_verbs.h;
/// IBA 10.5): the device delivers it to the QPs attached to the group instead.
pub(crate) const MULTICAST_QPN: u32 = 0x00ff_ffff;
/// Length of the Datagram Extended Transport Header: Q_Key, then the source QP.
pub(crate) const DETH_LEN: usize = 8;
/// The Q_Key of every MAD sent to or by QP1 (`IB_QP1_QKEY`, Linux `include/rdma/ib_mad.h`).
pub(crate) const QP1_QKEY: u32 = 0x8001_0000;
/// Bytes of the GRH area at the start of every UD receive buffer (`sizeof(struct ib_grh)`).
pub(crate) const GRH_LEN: usize = 40;

/// PAGE_FAULT_RESUME for datagram QP `token` ([`page_fault::resume`]); a send queue stopped
/// at its fault goes on here ([`send::resume`]).
pub(crate) fn resume_page_fault(
    core: &mut crate::function::Core,
    pf_type: u8,
    wq: u32,
    token: u32,
    error: bool,
) -> Result<(), crate::engine::rc::page_fault::ResumeError> {
    if let Some(failed) = page_fault::resume(core, pf_type, wq, token, error)? {
        send::resume(core, token, failed);
    }
    Ok(())
}
