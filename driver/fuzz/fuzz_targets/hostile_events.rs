//! A hostile device's events: the input is a sequence of raw EQEs (type, sub type, 28 bytes of
//! data) the model posts to the driver's async EQ, polled every few events. Every event must be
//! decoded as the PRM's EQE layouts say or refused and counted, never acted on when invalid; the
//! driver must not panic, and the device must still answer a command afterwards.
//!
//! Input: byte 0 picks how many events go in between polls (1..=16); then 30 bytes per event
//! (type, sub type, data). One function is brought up once and reused; it is torn down (every
//! page back) and brought up again when the pages it holds grow past a bound.

#![no_main]

use cxdirect::{Device, Event};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::eqe::EventType;
use cxdirect_hw::reg;
use cxdirect_tests::events::{delivered, expected};
use cxdirect_tests::setup;
use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Pages a plausible request may ask for here. Larger requests (up to the driver's 2^20 limit)
/// are skipped: serving one costs seconds and gigabytes in the model, which would only slow the
/// fuzzer (bounded separately by `Options::max_firmware_pages`).
const MAX_PAGES_ASKED: i32 = 4096;
/// Pages held past which the function is torn down and brought up again.
const RECYCLE_PAGES: usize = 16384;

struct State {
    model: Model,
    dev: Option<Device<EmuBackend>>,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(|| {
        let cfg = EmuConfig {
            init_delay: Some(Duration::ZERO),
            ..EmuConfig::default()
        };
        Mutex::new(State {
            model: Model::loopback(cfg),
            dev: None,
        })
    })
}

fn bring_up(model: &Model) -> Device<EmuBackend> {
    model.reset();
    let mut dev = setup::bring_up(model, "fuzz");
    dev.poll_events().expect("events after bring-up");
    dev
}

/// Polls, and checks what came back against `want` and the counters.
fn poll_and_check(dev: &mut Device<EmuBackend>, want: &mut Vec<Event>) {
    let before = dev.event_counts();
    let link_before = dev.info().link_up;
    let got = dev
        .poll_events()
        .expect("poll_events never fails on bad events");
    assert!(got.len() >= want.len(), "got {got:?}\nwant {want:?}");
    assert_eq!(&got[..want.len()], &want[..]);
    for extra in &got[want.len()..] {
        assert!(
            matches!(extra, Event::PageRequest { .. }),
            "extra event {extra:?}"
        );
    }
    let after = dev.event_counts();
    let count = |f: fn(&Event) -> bool| want.iter().filter(|e| f(e)).count() as u64;
    assert_eq!(
        after.port_changes - before.port_changes,
        count(|e| matches!(e, Event::PortChange { .. }))
    );
    assert_eq!(
        after.cq_errors - before.cq_errors,
        count(|e| matches!(e, Event::CqError { .. }))
    );
    assert_eq!(
        after.queue_errors - before.queue_errors,
        count(|e| matches!(e, Event::QueueError { .. }))
    );
    assert_eq!(
        after.limits, before.limits,
        "no shared ring: no limit believed"
    );
    assert_eq!(
        after.invalid - before.invalid,
        count(|e| matches!(e, Event::Invalid { .. }))
    );
    let link = want.iter().rev().find_map(|e| match e {
        Event::PortChange { up } => Some(*up),
        _ => None,
    });
    assert_eq!(dev.info().link_up, link.unwrap_or(link_before));
    want.clear();
}

fuzz_target!(|data: &[u8]| {
    let Some((&every, rest)) = data.split_first() else {
        return;
    };
    let every = usize::from(every & 15) + 1;
    let mut st = state().lock().unwrap_or_else(|e| e.into_inner());
    let State { model, dev } = &mut *st;
    let dev = dev.get_or_insert_with(|| bring_up(model));

    let mut want = Vec::new();
    let mut pending = 0;
    for chunk in rest.chunks_exact(30).take(96) {
        let (event_type, sub_type) = (chunk[0], chunk[1]);
        let data: [u8; 28] = chunk[2..30].try_into().expect("28 bytes");
        if event_type == EventType::PageRequest as u8 && data[2..4] == [0, 0] {
            let pages = i32::from_be_bytes([data[4], data[5], data[6], data[7]]);
            if pages > MAX_PAGES_ASKED && pages <= 1 << 20 {
                continue;
            }
        }
        model.inject(Fault::RawEvent {
            event_type,
            sub_type,
            data,
        });
        if delivered(event_type) {
            want.extend(expected(event_type, sub_type, &data));
        }
        pending += 1;
        if pending == every {
            poll_and_check(dev, &mut want);
            pending = 0;
        }
    }
    poll_and_check(dev, &mut want);

    // The device still answers a command.
    dev.access_reg(reg::REG_PMTU, false, &[0; 16])
        .expect("a command after hostile events");
    assert_eq!(model.firmware_pages_held(), dev.pages_held());

    if dev.pages_held() > RECYCLE_PAGES {
        let dev = st.dev.take().expect("device");
        let report = dev.teardown().expect("teardown");
        assert_eq!(report.pages_kept, 0, "{report:?}");
        assert_eq!(st.model.firmware_pages_held(), 0);
        assert_eq!(st.model.iommu().mapping_count(), 0);
    }
});
