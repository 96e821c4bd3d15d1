//! On-demand paging of UD receives taken from an SRQ (the ODP page's `ud_odp_caps.srq_receive`,
//! which Linux 6.12's mlx5_core raises in `handle_hca_cap_odp` and mlx5_ib's
//! `internal_fill_odp_caps` turns into `IB_ODP_SUPPORT_SRQ_RECV` of the UD transport). A
//! datagram scattering into an SRQ WQE whose buffer is not present is dropped (UD has no
//! retransmission) and reported with the WQE sub type `MLX5_WQE_PF_TYPE_RMP`, `wq_num` the SRQ
//! (`odp_get_rsc` finds it), `wqe_index` the WQE's slot (`mlx5_ib_read_wqe_srq`,
//! `mlx5_ib_mr_responder_pfault_handler_srq` skipping its next segment), the token the UD QP;
//! `mlx5_ib_page_fault_resume` sends that type, queue and token back. The WQE stays the QP's
//! for its next datagram.

mod odp_kit;

use cxdirect_emu::testkit::ud::{UdPair, UD_QKEY};
use cxdirect_emu::testkit::Rq;
use cxdirect_hw::qp::{rq_type, service_type};
use cxdirect_hw::wq::WqType;
use cxdirect_hw::wqe::SrqNextSeg;
use odp_kit::*;

/// A next segment and one data segment, as libmlx5's SRQ WQEs with one scatter entry.
const LOG_STRIDE: u8 = 5;
const LOG_SIZE: u8 = 2;
/// The GRH area at the head of every UD receive buffer.
const GRH: usize = 40;
/// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`.
const SYND_WR_FLUSHED: u8 = 0x05;

/// A UD pair reporting ODP whose B side has, besides its own UD QP, a UD QP taking its
/// receives from a linked-list SRQ (the RMP mlx5_ib creates behind an SRQ).
struct SrqRig {
    p: UdPair,
    /// The UD QP on the SRQ.
    qpn: u32,
    rmpn: u32,
    rq: Rq,
}

fn srq_rig() -> SrqRig {
    let cfg = EmuConfig {
        odp: true,
        ..EmuConfig::default()
    };
    let mut p = UdPair::new(cfg, MEM, 6, 4, 4);
    let (rmpn, rq) =
        p.b.create_rmp_of(WqType::LinkedList, LOG_SIZE, LOG_STRIDE, 0);
    let qp =
        p.b.try_create_ud_qp(&p.cq_b, service_type::UD, 4, 0, |c| {
            c.set_rq_type(rq_type::SRQ).set_srqn_rmpn_xrqn(rmpn);
        })
        .expect("CREATE_QP of a UD QP on the SRQ");
    p.b.activate_ud(qp.qpn, service_type::UD, UD_QKEY);
    SrqRig {
        p,
        qpn: qp.qpn,
        rmpn,
        rq,
    }
}

impl SrqRig {
    /// Posts two receives on the SRQ: WQE 0 into `first` (address, lkey), then WQE 2 into
    /// `second` (the list runs 0 → 2), 4096 bytes each.
    fn post_two(&self, first: (u64, u32), second: (u64, u32)) {
        self.p
            .b
            .write_linked_recv(&self.rq, 0, 2, first.0, 4096, first.1);
        self.p
            .b
            .write_linked_recv(&self.rq, 2, 1, second.0, 4096, second.1);
        self.p.b.write_be32(self.rq.dbr, 2);
    }

    /// Sends one datagram of `data` from A's UD QP to the UD QP on the SRQ.
    fn send(&mut self, data: &[u8]) {
        let sent = self.p.send_from_a(self.qpn, data);
        assert_eq!(sent.len(), 1);
        assert_eq!(cqe_opcode(&sent[0]), CQE_REQ, "UD has no ACK");
    }

    fn teardown(mut self) {
        self.p.b.destroy_qp(self.qpn);
        self.p.teardown();
    }
}

/// The CQE's WQE counter (`wqe_counter`, bytes 0x3c..0x3e).
fn wqe_counter(cqe: &[u8]) -> u16 {
    u16::from_be_bytes([cqe[0x3c], cqe[0x3d]])
}

#[test]
fn internal_fill_odp_caps_reads_ud_srq_receive() {
    let mut r = srq_rig();
    for current in [false, true] {
        let page = r.p.b.query_cap(cap_type::ODP, current);
        let odp = OdpCap::new(&page[0x10..0x110]).expect("layout");
        assert!(
            odp.ud_send() && odp.ud_srq_receive(),
            "IB_ODP_SUPPORT_SEND and IB_ODP_SUPPORT_SRQ_RECV of ud_odp_caps"
        );
    }
    r.teardown();
}

/// The SRQ holds WQE 0 in plain memory and WQE 2 in an ODP region of one page not present;
/// the first datagram lands in WQE 0, the second faults on WQE 2. Returns the rig, the
/// region and the fault's event data.
fn ud_srq_fault() -> (SrqRig, OdpMr, Vec<u8>) {
    let mut r = srq_rig();
    let plain_key = r.p.b.create_mkey(false, true);
    let plain = r.p.b.alloc(4096, 4096);
    let iova = 0x7f58_0000_0000u64;
    let mr = OdpMr::new(&mut r.p.b, 1, iova, &[false]);
    r.post_two((plain, plain_key), (iova, mr.key));
    let first = pattern(500, 1);
    r.send(&first);
    let got = drain(&r.p.b, &mut r.p.cq_b);
    assert_eq!(got.len(), 1, "the first datagram landed in WQE 0");
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(wqe_counter(&got[0]), 0);
    assert_eq!(r.p.b.read(plain + GRH as u64, 500), first);
    assert!(page_faults(&mut r.p.b).is_empty());

    r.send(&pattern(700, 2));
    assert!(
        drain(&r.p.b, &mut r.p.cq_b).is_empty(),
        "the second datagram was dropped"
    );
    let faults = page_faults(&mut r.p.b);
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].0, pfault_subtype::WQE);
    let event = faults[0].1.clone();
    (r, mr, event)
}

#[test]
fn mlx5_ib_mr_responder_pfault_handler_srq_reads_a_ud_srq_wqe_and_a_later_datagram_lands() {
    let (mut r, mut mr, event) = ud_srq_fault();
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    // MLX5_WQE_PF_TYPE_RMP (no MLX5_PFAULT_REQUESTOR): the SRQ by number, the WQE by its slot,
    // the token the UD QP, the datagram's payload as the packet.
    assert_eq!(e.pf_type(), wqe_pf_type::RMP);
    assert_eq!(e.pf_type() & pfault_flags::REQUESTOR, 0);
    assert_eq!(
        (e.wq_num(), e.wqe_index(), e.token(), e.packet_length()),
        (r.rmpn, 2, r.qpn, 700)
    );
    assert_eq!(e.bytes_committed(), 0);
    // What mlx5_ib_read_wqe_srq reads at `2 << wqe_shift`, past the next segment.
    let wqe = r.p.b.read(r.rq.buf + (2 << LOG_STRIDE), 32);
    assert_eq!(
        SrqNextSeg::new(&wqe[..16])
            .expect("layout")
            .next_wqe_index(),
        1
    );
    let d = DataSeg::new(&wqe[16..]).expect("layout");
    assert_eq!((d.addr(), d.lkey()), (mr.iova, mr.key));

    // Another datagram while the fault waits: dropped, not reported again.
    r.send(&pattern(100, 3));
    assert!(drain(&r.p.b, &mut r.p.cq_b).is_empty());
    assert!(page_faults(&mut r.p.b).is_empty());

    mr.update_xlt(&mut r.p.b, &[true], false, 0, 0);
    // A resume of another type, naming the QP as the queue, or another QP as the token, is
    // refused, and leaves the fault waiting.
    let (t, wq, token) = (e.pf_type(), e.wq_num(), e.token());
    assert!(resume(&mut r.p.b, wqe_pf_type::RESP, token, token, false).is_err());
    assert!(resume(&mut r.p.b, t, token, token, false).is_err());
    let own = r.p.ud_b.qpn;
    assert!(resume(&mut r.p.b, t, wq, own, false).is_err());
    r.send(&pattern(100, 4));
    assert!(
        drain(&r.p.b, &mut r.p.cq_b).is_empty(),
        "still waiting: dropped"
    );
    resume(&mut r.p.b, t, wq, token, false).expect("PAGE_FAULT_RESUME");
    assert!(
        resume(&mut r.p.b, t, wq, token, false).is_err(),
        "resumed once"
    );

    let data = pattern(900, 6);
    r.send(&data);
    let got = drain(&r.p.b, &mut r.p.cq_b);
    assert_eq!(got.len(), 1, "WQE 2 took the next datagram");
    assert_eq!(cqe_opcode(&got[0]), CQE_RESP_SEND);
    assert_eq!(wqe_counter(&got[0]), 2);
    assert_eq!(mr.read(&r.p.b, GRH + 900)[GRH..], data[..]);
    // The SRQ is empty now: a later datagram is dropped, nothing delivered twice.
    r.send(&pattern(64, 7));
    assert!(drain(&r.p.b, &mut r.p.cq_b).is_empty());
    assert!(page_faults(&mut r.p.b).is_empty());
    r.teardown();
}

#[test]
fn mlx5_ib_page_fault_resume_with_error_fails_the_ud_srq_receive_with_the_next_datagram() {
    let (mut r, mr, event) = ud_srq_fault();
    let e = EqePageFaultWqe::new(&event[..]).expect("layout");
    resume(&mut r.p.b, e.pf_type(), e.wq_num(), e.token(), true).expect("resume with error");
    assert!(resume(&mut r.p.b, e.pf_type(), e.wq_num(), e.token(), true).is_err());
    r.send(&pattern(100, 3));
    let got = drain(&r.p.b, &mut r.p.cq_b);
    assert_eq!(got.len(), 1);
    assert_eq!(cqe_opcode(&got[0]), 0xe, "a receive error CQE");
    assert_eq!(got[0][0x37], SYND_LOCAL_PROT);
    assert_eq!(wqe_counter(&got[0]), 2);
    assert_eq!(mr.read(&r.p.b, 64), vec![0; 64], "nothing was written");
    // WQE 2 is spent: the next datagram finds the SRQ empty.
    r.send(&pattern(100, 4));
    assert!(drain(&r.p.b, &mut r.p.cq_b).is_empty());
    r.teardown();
}

#[test]
fn a_ud_srq_wqe_held_by_a_fault_is_flushed_when_the_qp_goes_to_error() {
    let (mut r, _mr, _event) = ud_srq_fault();
    let qpn = r.qpn;
    r.p.b.modify_qp(Opcode::Qp2errQp, qpn, |_| {});
    let got = drain(&r.p.b, &mut r.p.cq_b);
    assert_eq!(got.len(), 1, "the WQE the fault held is flushed: {got:?}");
    assert_eq!(cqe_opcode(&got[0]), 0xe);
    assert_eq!(got[0][0x37], SYND_WR_FLUSHED);
    assert_eq!(wqe_counter(&got[0]), 2);
    r.teardown();
}
