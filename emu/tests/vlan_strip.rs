//! VLAN stripping on receive (`rqc.vsd` clear): the device takes a frame's first tag out when
//! it is a customer tag and reports it in the CQE (`has_vlan`, `vlan_info`), as mlx5e's RQs ask
//! by default (`mlx5e_build_rq_param`: `vsd` = `!NETIF_F_HW_VLAN_CTAG_RX`) and read it
//! (`cqe_has_vlan`, en_rx.c); `ethtool -K rxvlan` turns it on and off with MODIFY_RQ's VSD
//! bit (`mlx5e_modify_rq_vsd`). The frames go out of the plug's SQ and come back to its RQ.

use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::{udp_frame, vlan_tagged, Host};
use cxdirect_emu::EmuConfig;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::cqe::Cqe64;
use cxdirect_hw::wq::{ModifyRqIn, QueryRqIn, QueryRqOut, MODIFY_RQ_BITMASK_VSD};

/// MODIFY_RQ of ready RQ `rqn` changing only `vsd`, as `mlx5e_modify_rq_vsd` sends it.
fn set_vsd(h: &mut Host, rqn: u32, vsd: bool) {
    let mut input = Host::input(Opcode::ModifyRq, 0, 0x110);
    let mut m = ModifyRqIn::new(&mut input[..]).expect("layout");
    m.set_rq_state(1)
        .set_rqn(rqn)
        .set_modify_bitmask(MODIFY_RQ_BITMASK_VSD);
    m.ctx_mut().set_state(1).set_vsd(vsd);
    h.exec(&input, 16).expect("MODIFY_RQ");
}

/// QUERY_RQ's `vsd` of RQ `rqn`.
fn queried_vsd(h: &mut Host, rqn: u32) -> bool {
    let mut input = Host::input(Opcode::QueryRq, 0, 0x10);
    QueryRqIn::new(&mut input[..]).expect("layout").set_rqn(rqn);
    let out = h.exec(&input, 0x110).expect("QUERY_RQ");
    QueryRqOut::new(&out[..])
        .expect("layout")
        .rq_context()
        .vsd()
}

/// A plug whose RQ strips tags.
fn stripping_plug() -> Plug {
    let mut p = Plug::new(EmuConfig::default());
    let rqn = p.rqn();
    set_vsd(&mut p.h, rqn, false);
    assert!(!queried_vsd(&mut p.h, rqn));
    p
}

#[test]
fn a_customer_tag_goes_to_the_cqe_and_the_frame_arrives_without_it() {
    let mut p = stripping_plug();
    let plain = udp_frame(64, 3);
    let (bytes, cqe) = p
        .send_for_cqe(&vlan_tagged(&plain, &[(0x8100, 0xa07b)]))
        .expect("frame back");
    assert_eq!(bytes, plain);
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert!(c.has_vlan());
    assert_eq!(c.vlan_info(), 0xa07b);
    assert_eq!(c.byte_cnt() as usize, plain.len());
    // Checksums are the stripped frame's, as a ConnectX computes them past the tag.
    assert!(c.l3_ok() && c.l4_ok());
}

#[test]
fn untagged_frames_and_service_tags_arrive_whole_without_has_vlan() {
    let mut p = stripping_plug();
    let plain = udp_frame(64, 4);
    for f in [
        plain.clone(),
        vlan_tagged(&plain, &[(0x88a8, 7)]),
        vlan_tagged(&plain, &[(0x88a8, 7), (0x8100, 9)]),
    ] {
        let (bytes, cqe) = p.send_for_cqe(&f).expect("frame back");
        assert_eq!(bytes, f);
        assert!(!Cqe64::new(&cqe[..]).unwrap().has_vlan());
    }
}

#[test]
fn an_rq_with_vsd_keeps_the_tag_and_modify_turns_stripping_on_and_off() {
    let mut p = Plug::new(EmuConfig::default());
    let rqn = p.rqn();
    // The plug's RQ is created with vsd set.
    assert!(queried_vsd(&mut p.h, rqn));
    let f = vlan_tagged(&udp_frame(64, 5), &[(0x8100, 5)]);
    let (bytes, cqe) = p.send_for_cqe(&f).expect("frame back");
    assert_eq!(bytes, f);
    assert!(!Cqe64::new(&cqe[..]).unwrap().has_vlan());
    set_vsd(&mut p.h, rqn, false);
    let (bytes, _) = p.send_for_cqe(&f).expect("frame back");
    assert_eq!(bytes.len(), f.len() - 4);
    set_vsd(&mut p.h, rqn, true);
    assert!(queried_vsd(&mut p.h, rqn));
    assert_eq!(p.send(&f), Some(f.clone()));
}
