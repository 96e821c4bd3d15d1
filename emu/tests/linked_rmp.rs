//! A linked-list RMP (`wq_type` 0), as Linux creates the RMP behind an RC SRQ: each receive WQE
//! starts with a next segment naming the WQE after it, and the device follows that list from
//! WQE 0 rather than the ring order; the CQE names the WQE it used.

use cxdirect_emu::testkit::{udp_frame, Host};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cqe::{Cqe64, CqeOpcode};
use cxdirect_hw::wq::WqType;

const MEM: usize = 8 << 20;
/// A next segment and one data segment.
const LOG_STRIDE: u8 = 5;
const LOG_SIZE: u8 = 2;

#[test]
fn linked_list_rmp_is_taken_in_list_order() {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let key = h.create_mkey(false, true);
    let (rmpn, rmp) = h.create_rmp_of(WqType::LinkedList, LOG_SIZE, LOG_STRIDE, 0);
    let cq = h.create_cq(6);
    let mut cq = cq;
    let rq = h.create_rq(cq.cqn, 0, Some(rmpn));
    h.steer_all_to(rq.rqn);

    // Software posts WQEs 0, 2 and 1, in that order: the list runs 0 → 2 → 1 → 3.
    let next = [2u16, 3, 1, 0];
    let bufs: Vec<u64> = (0..4).map(|_| h.alloc(2048, 64)).collect();
    for (index, &to) in next.iter().enumerate() {
        h.write_linked_recv(&rmp, index as u16, to, bufs[index], 2048, key);
    }
    h.write_be32(rmp.dbr, 3);

    let frames: Vec<Vec<u8>> = (0..3).map(|i| udp_frame(100 + i * 10, i as u8)).collect();
    h.arrive(&frames);
    let mut used = Vec::new();
    while let Some(raw) = h.poll_cq(&mut cq) {
        let cqe = Cqe64::new(&raw[..]).expect("layout");
        assert_eq!(cqe.opcode(), CqeOpcode::RespSend as u8, "no error CQE");
        used.push((cqe.wqe_counter(), cqe.byte_cnt()));
    }
    let expect: Vec<(u16, u32)> = [0u16, 2, 1]
        .iter()
        .zip(&frames)
        .map(|(&i, f)| (i, f.len() as u32))
        .collect();
    assert_eq!(used, expect, "WQEs taken in list order");
    for (&index, frame) in [0usize, 2, 1].iter().zip(&frames) {
        assert_eq!(
            &h.read(bufs[index], frame.len()),
            frame,
            "WQE {index}'s buffer"
        );
    }
    // WQE 3 was never posted: a fourth frame finds no WQE and completes nothing.
    h.arrive(&[udp_frame(64, 9)]);
    assert!(h.poll_cq(&mut cq).is_none());
    assert_eq!(h.read(bufs[3], 64), vec![0u8; 64]);
}
