//! A hostile device: the model posts events the driver never asked for, damages command outputs
//! and swallows commands, and the driver must check what it reads, count or refuse what it cannot
//! use, report a clear error, and keep working (or fail cleanly and come back after a reset).
//! Property tests with modest case counts: each case brings a function up on a fresh model.

use cxdirect::{
    CmdFailure, Device, DriverError, Event, EventCounts, Port, Started, TeardownReport,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::eqe::{port_change, EventType};
use cxdirect_hw::reg;
use cxdirect_tests::events::{delivered, expected, SUBSCRIBED};
use cxdirect_tests::setup::{self, options, side, small_port, Side};
use proptest::prelude::*;
use std::time::Duration;

fn bring_up(model: &Model) -> Device<EmuBackend> {
    setup::bring_up(model, "hostile")
}

/// One cheap command the device must still answer: read the port's MTU register.
fn still_answers(dev: &mut Device<EmuBackend>) -> Result<(), DriverError> {
    dev.access_reg(reg::REG_PMTU, false, &[0; 16]).map(|_| ())
}

/// Tears down and checks that every firmware page came back and no DMA mapping is left.
fn clean_teardown(dev: Device<EmuBackend>, model: &Model) -> TeardownReport {
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_kept, 0, "{report:?}");
    assert_eq!(report.pages_released_by_reset, 0, "{report:?}");
    assert_eq!(model.firmware_pages_held(), 0, "every page reclaimed");
    assert_eq!(
        model.iommu().mapping_count(),
        0,
        "no DMA region left mapped"
    );
    assert_eq!(
        model.object_counts(),
        [0; 6],
        "no object left on the device"
    );
    report
}

/// A raw event: type mostly one the driver subscribes to (or 64 and up), data random, and for
/// page requests mostly a plausible request (function 0, a few pages either way).
fn raw_event() -> impl Strategy<Value = (u8, u8, [u8; 28])> {
    let event_type = prop_oneof![
        6 => prop::sample::select(SUBSCRIBED.iter().map(|&t| t as u8).collect::<Vec<_>>()),
        2 => 64u8..=255,
        1 => any::<u8>(),
    ];
    let sub_type = prop_oneof![
        prop::sample::select(vec![
            port_change::ACTIVE,
            port_change::DOWN,
            port_change::INITIALIZED
        ]),
        any::<u8>(),
    ];
    let page_request = prop_oneof![
        // Plausible: function 0, a few pages given or taken.
        3 => (-100i32..=64).prop_map(Some),
        // Left as the random data: almost always refused.
        1 => Just(None),
        // Out of range by one either way.
        1 => prop::sample::select(vec![(1 << 20) + 1, -(1 << 20) - 1]).prop_map(Some),
    ];
    (
        event_type,
        sub_type,
        prop::collection::vec(any::<u8>(), 28),
        page_request,
    )
        .prop_map(|(event_type, sub_type, data, pages)| {
            let mut data: [u8; 28] = data.try_into().expect("28 bytes");
            if let (true, Some(pages)) = (event_type == EventType::PageRequest as u8, pages) {
                data[2..4].fill(0);
                data[4..8].copy_from_slice(&pages.to_be_bytes());
            }
            (event_type, sub_type, data)
        })
}

fn counts_delta(after: EventCounts, before: EventCounts) -> [u64; 6] {
    [
        after.page_requests - before.page_requests,
        after.port_changes - before.port_changes,
        after.cq_errors - before.cq_errors,
        after.queue_errors - before.queue_errors,
        after.limits - before.limits,
        after.invalid - before.invalid,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Raw events of any type with any data: every one decoded as the PRM says or refused and
    /// counted, page requests served within bounds, and the device still answers commands and
    /// tears down with every page back.
    #[test]
    fn raw_events_are_decoded_or_refused_and_the_device_keeps_working(
        events in prop::collection::vec(raw_event(), 1..12),
    ) {
        let model = Model::loopback(EmuConfig::default());
        let mut dev = bring_up(&model);
        // Take whatever bring-up left (port change and the like) first.
        dev.poll_events().expect("events after bring-up");
        let before = dev.event_counts();
        let link_before = dev.info().link_up;

        let mut want = Vec::new();
        for &(event_type, sub_type, data) in &events {
            model.inject(Fault::RawEvent { event_type, sub_type, data });
            if delivered(event_type) {
                want.extend(expected(event_type, sub_type, &data));
            }
        }
        let got = dev.poll_events().expect("poll_events never fails on bad events");
        // The events injected, in order; after them only what serving page requests brought.
        prop_assert!(got.len() >= want.len(), "got {:?}\nwant {:?}", got, want);
        prop_assert_eq!(&got[..want.len()], &want[..]);
        for extra in &got[want.len()..] {
            prop_assert!(matches!(extra, Event::PageRequest { .. }), "extra event {:?}", extra);
        }

        // Counted by kind; unknown and refused ones only counted.
        let count = |f: fn(&Event) -> bool| want.iter().filter(|e| f(e)).count() as u64;
        let delta = counts_delta(dev.event_counts(), before);
        prop_assert_eq!(delta[1], count(|e| matches!(e, Event::PortChange { .. })));
        prop_assert_eq!(delta[2], count(|e| matches!(e, Event::CqError { .. })));
        prop_assert_eq!(delta[3], count(|e| matches!(e, Event::QueueError { .. })));
        prop_assert_eq!(delta[4], 0, "no shared ring: no limit event believed");
        prop_assert_eq!(delta[5], count(|e| matches!(e, Event::Invalid { .. })));
        let page_requests = count(|e| matches!(e, Event::PageRequest { .. }));
        prop_assert!(delta[0] >= page_requests, "{} < {}", delta[0], page_requests);
        let link = want.iter().rev().find_map(|e| match e {
            Event::PortChange { up } => Some(*up),
            _ => None,
        });
        prop_assert_eq!(dev.info().link_up, link.unwrap_or(link_before));

        // Still answering, and every page comes back at teardown.
        still_answers(&mut dev).expect("a command after hostile events");
        prop_assert_eq!(model.firmware_pages_held(), dev.pages_held());
        clean_teardown(dev, &model);
        prop_assert_eq!(model.firmware_pages_leaked(), 0);
    }

    /// A command output damaged at one command of a port's life (start, close or teardown):
    /// the driver reports an error or carries on, never panics; a device lost to an error comes
    /// back after a function reset, with no page or mapping left over.
    #[test]
    fn damaged_command_output_fails_cleanly(
        skip in 0usize..48,
        patch in prop::collection::vec(
            (prop_oneof![3 => 0u16..16, 1 => 16u16..0x120], any::<u8>()),
            1..4,
        ),
        phase in 0u8..3,
    ) {
        let model = Model::loopback(EmuConfig::default());
        let mut dev = Some(bring_up(&model));
        let arm = || {
            // `skip` commands pass untouched (an empty patch), the next one is damaged.
            for _ in 0..skip {
                model.inject(Fault::CorruptCommandOutput { patch: Vec::new() });
            }
            model.inject(Fault::CorruptCommandOutput { patch: patch.clone() });
        };
        let mut failed = None;
        if phase == 0 {
            arm();
        }
        match Port::start(dev.take().unwrap(), small_port()) {
            Ok(Started { port, queues }) => {
                drop(queues);
                if phase == 1 {
                    arm();
                }
                match port.close() {
                    Ok(d) => dev = Some(d),
                    Err(e) => failed = Some(e),
                }
            }
            Err(e) => failed = Some(e),
        }
        if let Some(mut d) = dev.take() {
            if phase == 2 {
                arm();
            }
            // Teardown reclaims pages: a damaged page list must be refused, not believed.
            let _ = still_answers(&mut d);
            match d.teardown() {
                Ok(report) => {
                    // Never a page freed that the device still holds; pages kept that a
                    // damaged page list hid are the safe side.
                    prop_assert!(
                        model.firmware_pages_held() <= report.pages_kept,
                        "device holds {}, teardown kept {}",
                        model.firmware_pages_held(),
                        report.pages_kept
                    );
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = &failed {
            // A clear error: it names what failed.
            prop_assert!(!e.to_string().is_empty());
        }
        // Whatever happened, a reset brings a working function back, and it tears down clean.
        model.reset();
        let mut again = bring_up(&model);
        still_answers(&mut again).expect("a command after reset");
        clean_teardown(again, &model);
    }
}

#[test]
fn a_swallowed_command_times_out_naming_the_command() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = Device::bring_up(
        EmuBackend::new(model.clone(), "hostile"),
        options(Duration::from_millis(200)),
    )
    .unwrap();
    model.inject(Fault::SwallowCommand);
    let err = still_answers(&mut dev).unwrap_err();
    let DriverError::Command(cmd) = &err else {
        panic!("not a command error: {err}")
    };
    assert_eq!(cmd.opcode, Opcode::AccessReg as u16);
    assert_eq!(cmd.failure, CmdFailure::Timeout(Duration::from_millis(200)));
    let text = err.to_string();
    assert!(text.contains("ACCESS_REG"), "{text}");
    assert!(text.contains("200 ms"), "{text}");
    // The next command completes.
    still_answers(&mut dev).expect("a command after the swallowed one");
    clean_teardown(dev, &model);
}

/// Seen in the QEMU rig: a command's entry came back holding the previous command's answer
/// (same token, ownership handed back) and the model never ran it.
#[test]
fn a_command_whose_entry_comes_back_stale_is_posted_again() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model);
    let idle_before = model.counters().idle_command_doorbells;
    model.inject(Fault::StaleCommandEntry);
    still_answers(&mut dev).expect("posted again after the stale entry");
    assert_eq!(dev.commands_posted_again(), 1);
    assert_eq!(model.counters().idle_command_doorbells, idle_before + 1);
    still_answers(&mut dev).unwrap();
    assert_eq!(dev.commands_posted_again(), 1);
    clean_teardown(dev, &model);
}

#[test]
fn a_command_whose_entry_comes_back_stale_twice_fails_naming_both_tokens() {
    let model = Model::loopback(EmuConfig::default());
    let mut dev = bring_up(&model);
    model.inject(Fault::StaleCommandEntry);
    model.inject(Fault::StaleCommandEntry);
    let err = still_answers(&mut dev).unwrap_err();
    let DriverError::Command(cmd) = &err else {
        panic!("not a command error: {err}")
    };
    assert_eq!(cmd.opcode, Opcode::AccessReg as u16);
    let CmdFailure::TokenChanged { sent, found } = cmd.failure else {
        panic!("not a token error: {err}")
    };
    assert_eq!(found, sent.wrapping_sub(1), "{err}");
    assert_eq!(dev.commands_posted_again(), 1);
    still_answers(&mut dev).expect("the next command runs");
    clean_teardown(dev, &model);
}

#[test]
fn a_swallowed_command_during_port_start_fails_the_start_naming_the_command() {
    let model = Model::loopback(EmuConfig::default());
    let dev = Device::bring_up(
        EmuBackend::new(model.clone(), "hostile"),
        options(Duration::from_millis(200)),
    )
    .unwrap();
    model.inject(Fault::SwallowCommand);
    let Err(err) = Port::start(dev, small_port()) else {
        panic!("the port started without its first command")
    };
    let text = err.to_string();
    assert!(
        matches!(&err, DriverError::Command(c) if matches!(c.failure, CmdFailure::Timeout(_))),
        "{text}"
    );
    assert!(text.contains("CREATE_MKEY"), "{text}");
    model.reset();
    let mut again = bring_up(&model);
    still_answers(&mut again).unwrap();
    clean_teardown(again, &model);
}

/// An emulated pair with small rings, both ports started.
fn pair() -> (Side, Side, Model, Model) {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let da = Device::bring_up(
        EmuBackend::new(a.clone(), "a"),
        options(Duration::from_secs(2)),
    )
    .unwrap();
    let db = Device::bring_up(
        EmuBackend::new(b.clone(), "b"),
        options(Duration::from_secs(2)),
    )
    .unwrap();
    let pa = Port::start(da, small_port()).unwrap();
    let pb = Port::start(db, small_port()).unwrap();
    (side(pa), side(pb), a, b)
}

/// Found by the `hostile_rx_cqe` fuzz target (input `00 00 ff ff`: one frame, receive CQE byte
/// 63 overwritten with 0xff). A CQE the device writes with opcode 0xf (INVALID) and the right
/// owner bit used to read, to the driver, as a slot not yet written: the queue stopped receiving
/// for good, reported no error, and `Port::recover_rx` could not move the CQ past that slot.
#[test]
fn a_receive_cqe_written_with_opcode_invalid_is_noticed_and_recovered_from() {
    let ((pa, mut txa, _rxa), (mut pb, _txb, mut rxb), _, model_b) = pair();
    assert_eq!(
        cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 4),
        4,
        "clean frames arrive"
    );
    model_b.inject(Fault::CorruptCqe {
        cqn: rxb[0].cqn(),
        patch: vec![(63, 0xff)],
    });
    let first = cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 1);
    assert_eq!(first, 0, "the frame behind the damaged CQE is lost");
    assert_eq!(model_b.faults_pending(), 0, "the fault was taken");
    let later = cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 8);
    let stats = rxb[0].stats();
    assert!(
        later > 0 || rxb[0].in_error() || stats.bad_cqes > 0,
        "queue stalled without an error: {later} of 8 later frames received, in_error false, \
         {stats:?}"
    );
    pb.recover_rx(&mut rxb[0]).expect("recover_rx");
    let after = cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 8);
    assert_eq!(
        after,
        8,
        "frames arrive after recovery: {:?}",
        rxb[0].stats()
    );
}

/// Found by the `hostile_command_output` fuzz target (input `13 85 02 0b 03 85 02 0b`: teardown,
/// the sixth command's output byte 11 overwritten with 3). MANAGE_PAGES (take) says 3 of the 80
/// pages came back (the model returned them all). The driver used to keep the other 77 for good,
/// IOMMU mappings included, so a function brought up again on the same IOMMU failed: its new
/// IOVA allocator overlapped the kept mappings. Now teardown resets the function, after which
/// the device holds nothing and the pages are freed and unmapped.
#[test]
fn a_teardown_the_device_kept_pages_through_resets_the_function_and_it_comes_back_up() {
    let model = Model::loopback(EmuConfig::default());
    let dev = bring_up(&model);
    // DESTROY_EQ, DEALLOC_TRANSPORT_DOMAIN, DEALLOC_PD, DEALLOC_UAR and TEARDOWN_HCA pass
    // untouched; MANAGE_PAGES (take) reports 3 pages where it returned 80.
    for _ in 0..5 {
        model.inject(Fault::CorruptCommandOutput { patch: Vec::new() });
    }
    model.inject(Fault::CorruptCommandOutput {
        patch: vec![(11, 3)],
    });
    let report = dev.teardown().expect("teardown");
    assert_eq!(report.pages_reclaimed, 3, "{report:?}");
    assert_eq!(report.pages_released_by_reset, 77, "{report:?}");
    assert_eq!(report.pages_kept, 0, "{report:?}");
    assert_eq!(model.firmware_pages_held(), 0);
    assert_eq!(
        model.iommu().mapping_count(),
        0,
        "the pages are unmapped once the reset returned"
    );
    let mut again = Device::bring_up(
        EmuBackend::new(model.clone(), "again"),
        options(Duration::from_secs(2)),
    )
    .expect("bring-up after the reset");
    still_answers(&mut again).unwrap();
    clean_teardown(again, &model);
}
/// A receive CQE whose owner bit the device got wrong (written, but reading as not yet
/// written) with completions written behind it: the ring notices the gap after its idle-poll
/// check, refuses the entry, and recovery moves past it.
#[test]
fn a_receive_cqe_with_the_wrong_owner_bit_is_noticed_and_recovered_from() {
    let ((pa, mut txa, _rxa), (mut pb, _txb, mut rxb), _, model_b) = pair();
    assert_eq!(
        cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 4),
        4,
        "clean frames arrive"
    );
    model_b.inject(Fault::WrongOwner { cqn: rxb[0].cqn() });
    assert_eq!(
        cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 8),
        0,
        "nothing is received past the damaged slot"
    );
    let mut got = Vec::new();
    // A compressed CQ waits a quarter of a second before it calls the slot skipped (a device
    // legally writes a session's arrays before its title).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !rxb[0].in_error() && std::time::Instant::now() < deadline {
        rxb[0].rx_burst(&mut got, 64).unwrap();
    }
    assert!(got.is_empty(), "{} frames received out of order", got.len());
    let stats = rxb[0].stats();
    assert!(rxb[0].in_error(), "the gap was not noticed: {stats:?}");
    assert_eq!(stats.bad_cqes, 1, "{stats:?}");
    let recovery = pb.recover_rx(&mut rxb[0]).expect("recover_rx");
    assert_eq!(
        recovery.drained_cqes, 7,
        "the seven behind the refused one: {recovery:?}"
    );
    // On a compressed CQ (the default) a skipped entry may have been a session's title, so
    // where the device writes next is unknown: the CQ is created again.
    assert!(recovery.cq_recreated, "{recovery:?}");
    assert_eq!(
        cxdirect_tests::send_and_receive(&mut txa[0], pa.pool(), &mut rxb[0], 8),
        8,
        "frames arrive after recovery: {:?}",
        rxb[0].stats()
    );
}
