//! A hostile device's events: the input is a sequence of raw EQEs (type, sub type, 28 bytes of
//! data) the model posts to the driver's async EQ, polled every few events. Every event must be
//! decoded as the PRM's EQE layouts say or refused and counted, never acted on when invalid; the
//! driver must not panic, and the device must still answer a command afterwards.
//!
//! Input: byte 0 picks how many events go in between polls (1..=16); then 30 bytes per event
//! (type, sub type, data). One function is brought up once and reused; it is torn down (every
//! page back) and brought up again when the pages it holds grow past a bound.

#![no_main]

use cxdirect::{Device, Event, Options};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::eqe::{port_change, EventType};
use cxdirect_hw::reg;
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
    let options = Options {
        init_timeout: Duration::from_secs(2),
        cmd_timeout: Duration::from_secs(2),
        ..Options::default()
    };
    let mut dev = Device::bring_up(EmuBackend::new(model.clone(), "fuzz"), options)
        .expect("bring-up on a well-behaved model");
    dev.poll_events().expect("events after bring-up");
    dev
}

const SUBSCRIBED: [EventType; 10] = [
    EventType::Cmd,
    EventType::PageRequest,
    EventType::PortChange,
    EventType::CqError,
    EventType::WqCatastrophicError,
    EventType::WqInvalidRequestError,
    EventType::WqAccessError,
    EventType::SrqCatastrophicError,
    EventType::SrqRqLimit,
    EventType::InternalError,
];

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// What the driver should report for a raw event (from the PRM's EQE layouts); `None` when the
/// model does not post it (no EQ subscribed) or it is a command completion (not reported).
fn expected(event_type: u8, sub_type: u8, data: &[u8; 28]) -> Option<Event> {
    if event_type < 64 && !SUBSCRIBED.iter().any(|&t| t as u8 == event_type) {
        return None;
    }
    let Ok(kind) = EventType::try_from(event_type) else {
        return Some(Event::Invalid {
            raw_type: event_type,
        });
    };
    Some(match kind {
        EventType::Cmd => return None,
        EventType::PageRequest => {
            let func_id = u16::from_be_bytes([data[2], data[3]]);
            let pages = be32(&data[4..8]) as i32;
            if func_id == 0 && pages.unsigned_abs() <= 1 << 20 {
                Event::PageRequest { pages }
            } else {
                Event::Invalid {
                    raw_type: event_type,
                }
            }
        }
        EventType::PortChange => match sub_type {
            port_change::ACTIVE => Event::PortChange { up: true },
            port_change::DOWN => Event::PortChange { up: false },
            _ => Event::Other(kind),
        },
        EventType::CqError => Event::CqError {
            cqn: be32(&data[0..4]) & 0x00ff_ffff,
            syndrome: data[11],
        },
        // No shared ring on this function: a limit event naming one is refused.
        EventType::SrqRqLimit => Event::Invalid {
            raw_type: event_type,
        },
        EventType::WqCatastrophicError
        | EventType::WqInvalidRequestError
        | EventType::WqAccessError
        | EventType::SrqCatastrophicError => Event::QueueError {
            kind,
            number: be32(&data[24..28]) & 0x00ff_ffff,
        },
        _ => Event::Other(kind),
    })
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
            let pages = be32(&data[4..8]) as i32;
            if pages > MAX_PAGES_ASKED && pages <= 1 << 20 {
                continue;
            }
        }
        model.inject(Fault::RawEvent {
            event_type,
            sub_type,
            data,
        });
        want.extend(expected(event_type, sub_type, &data));
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
