//! A DCT's key-violation event: ARM_DCT_FOR_KEY_VIOLATION (opcode 0x714 in Linux's
//! mlx5_ifc.h; mlx5_ib's devx.c reads its DCT number with `drain_dct_in`'s layout) arms a DCT,
//! and the next request presenting a wrong DC access key raises one DCT_KEY_VIOLATION event
//! (0x1d in Linux's device.h), whose data names the DCT where DCT_DRAINED's does (devx.c's
//! `devx_get_obj_id_from_event` reads `eqe->data.dct.dctn` for both); the DCT is then
//! disarmed until armed again. The refusal itself (the remote access NAK, the counts) is the
//! same armed or not.

mod dc_kit;

use dc_kit::*;

/// The DCT numbers of the DCT_KEY_VIOLATION events B's EQs hold now.
fn violation_events(r: &mut Rig) -> Vec<u32> {
    r.b.drain_eq()
        .into_iter()
        .filter(|e| e.0 == EventType::DctKeyViolation as u8)
        .map(|(_, _, data)| {
            let at = EQE_DCT_NUMBER_OFFSET;
            u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) & 0x00ff_ffff
        })
        .collect()
}

/// A fresh DCI on A sends one SEND to DCT `which` with a wrong key (a DCI goes to error on
/// the refusal, so each intruder gets its own).
fn intrude(r: &mut Rig, which: usize) {
    let cq = r.a.create_cq(3);
    let dci = create_dci(&mut r.a, &cq, 3);
    let saved = std::mem::replace(&mut r.dci, dci);
    let mut to = r.to(which);
    to.key ^= 0xbad;
    r.post(opcode::SEND, to, None, b"intruder");
    r.settle();
    r.dci = saved;
}

#[test]
fn an_armed_dct_raises_one_event_then_disarms_until_armed_again() {
    let mut r = rig();
    let dctn = r.dcts[0];
    r.b.drain_eq();
    arm_dct(&mut r.b, dctn).expect("ARM_DCT_FOR_KEY_VIOLATION");
    intrude(&mut r, 0);
    assert_eq!(
        violation_events(&mut r),
        vec![dctn],
        "one event naming the DCT"
    );
    intrude(&mut r, 0);
    assert!(violation_events(&mut r).is_empty(), "disarmed by the event");
    // The refusals are counted either way.
    assert_eq!(query_dct(&mut r.b, dctn).unwrap().1, 2);
    arm_dct(&mut r.b, dctn).expect("armed again");
    intrude(&mut r, 0);
    assert_eq!(violation_events(&mut r), vec![dctn]);
    assert_eq!(query_dct(&mut r.b, dctn).unwrap().1, 3);
}

#[test]
fn an_unarmed_dct_raises_no_event_and_arming_one_leaves_the_other() {
    let mut r = rig();
    r.b.drain_eq();
    intrude(&mut r, 0);
    assert!(violation_events(&mut r).is_empty(), "never armed");
    arm_dct(&mut r.b, r.dcts[1]).expect("ARM_DCT_FOR_KEY_VIOLATION");
    intrude(&mut r, 0);
    assert!(
        violation_events(&mut r).is_empty(),
        "the other DCT is armed"
    );
    intrude(&mut r, 1);
    assert_eq!(violation_events(&mut r), vec![r.dcts[1]]);
}

#[test]
fn a_good_key_neither_raises_nor_disarms() {
    let mut r = rig();
    let dctn = r.dcts[0];
    r.b.drain_eq();
    arm_dct(&mut r.b, dctn).expect("ARM_DCT_FOR_KEY_VIOLATION");
    arm_dct(&mut r.b, dctn).expect("armed twice: still armed once");
    let land = r.post_recv(64);
    let to = r.to(0);
    r.post(opcode::SEND, to, None, b"welcome");
    r.settle();
    assert_eq!(r.b.read(land, 7), b"welcome");
    assert!(violation_events(&mut r).is_empty());
    intrude(&mut r, 0);
    assert_eq!(violation_events(&mut r), vec![dctn]);
}

#[test]
fn arm_is_refused_for_a_dct_that_is_not_there_or_drained() {
    let mut r = rig();
    let missing = arm_dct(&mut r.b, r.dcts[1] + 100).unwrap_err();
    assert_eq!(
        missing,
        CmdFail::status(CmdStatus::BadResource, Syndrome::NoSuchObject)
    );
    drain_dct(&mut r.b, r.dcts[0]).expect("DRAIN_DCT");
    assert!(arm_dct(&mut r.b, r.dcts[0]).is_err(), "a drained DCT");
}
