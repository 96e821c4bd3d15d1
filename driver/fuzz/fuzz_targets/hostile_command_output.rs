//! A hostile device's command outputs: one command's output is damaged (bytes overwritten,
//! header included, after the command ran and its side effects stood) somewhere in a port's
//! start, its close, a port-admin change or the function's teardown. The driver may fail with an
//! error, never panic; a port closed without error leaves no object behind; a teardown that
//! succeeds keeps (never frees) every page the device still holds; a function lost to an error
//! comes back after a reset.
//!
//! Input: byte 0 picks the phase, byte 1 how many commands pass untouched first (0..64), then
//! 3 bytes per overwritten byte (up to 8): an offset selector (bit 7 clear: the 16-byte header,
//! offset in the low nibble of the next byte; set: any of the first 1 KiB) and the value.

#![no_main]

use cxdirect::{Device, Port, Started};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{Device as Model, EmuConfig, Fault};
use cxdirect_hw::reg;
use cxdirect_tests::setup::{self, small_port};
use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

struct State {
    model: Model,
    dev: Option<Device<EmuBackend>>,
    /// Object counts of a freshly brought-up function.
    baseline: [usize; 6],
}

fn model() -> Model {
    Model::loopback(EmuConfig {
        init_delay: Some(Duration::ZERO),
        ..EmuConfig::default()
    })
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(|| {
        Mutex::new(State {
            model: model(),
            dev: None,
            baseline: [0; 6],
        })
    })
}

fn bring_up(model: &Model) -> Device<EmuBackend> {
    model.reset();
    setup::bring_up(model, "fuzz")
}

fn still_answers(dev: &mut Device<EmuBackend>) -> bool {
    dev.access_reg(reg::REG_PMTU, false, &[0; 16]).is_ok()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let phase = data[0] % 4;
    let skip = usize::from(data[1] % 64);
    let patch: Vec<(u16, u8)> = data[2..]
        .chunks_exact(3)
        .take(8)
        .map(|c| {
            let offset = if c[0] & 0x80 == 0 {
                u16::from(c[1] & 0x0f)
            } else {
                u16::from_be_bytes([c[0], c[1]]) & 0x3ff
            };
            (offset, c[2])
        })
        .collect();

    let mut guard = state().lock().unwrap_or_else(|e| e.into_inner());
    let st = &mut *guard;
    if st.dev.is_none() || st.model.faults_pending() > 0 {
        st.dev = None;
        st.dev = Some(bring_up(&st.model));
        st.baseline = st.model.object_counts();
    }
    let model = st.model.clone();
    let arm = || {
        for _ in 0..skip {
            model.inject(Fault::CorruptCommandOutput { patch: Vec::new() });
        }
        model.inject(Fault::CorruptCommandOutput {
            patch: patch.clone(),
        });
    };

    let mut dev = st.dev.take().expect("device");
    match phase {
        0 | 1 => {
            if phase == 0 {
                arm();
            }
            match Port::start(dev, small_port()) {
                Ok(Started { port, queues }) => {
                    drop(queues);
                    if phase == 1 {
                        arm();
                    }
                    if let Ok(d) = port.close() {
                        if model.faults_pending() == 0 {
                            assert_eq!(
                                model.object_counts(),
                                st.baseline,
                                "a port closed without error left objects behind"
                            );
                        }
                        st.dev = Some(d);
                    }
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
        2 => {
            arm();
            let _ = dev.set_port_admin(data.len() & 1 == 0);
            let _ = dev.poll_events();
            st.dev = Some(dev);
        }
        _ => {
            arm();
            if let Ok(report) = dev.teardown() {
                // The driver never believes a page came back that the device still holds (it
                // would free memory the device may write). The reverse, pages kept that the
                // device did return while its damaged output said otherwise, is the safe side.
                assert!(
                    model.firmware_pages_held() <= report.pages_kept,
                    "device holds {} pages, teardown kept {}",
                    model.firmware_pages_held(),
                    report.pages_kept
                );
                // Pages the device did not give back are taken back by a function reset (the
                // emulated function always has one), so none are kept.
                assert_eq!(report.pages_kept, 0, "{report:?}");
            }
        }
    }

    // Take the faults left armed (their commands damaged or not); a function that cannot
    // answer once they are gone is brought up again at the next input.
    if let Some(dev) = st.dev.as_mut() {
        let mut tries = 0;
        while model.faults_pending() > 0 && tries < 80 {
            let _ = still_answers(dev);
            tries += 1;
        }
        if model.faults_pending() > 0 || !still_answers(dev) {
            st.dev = None;
        }
    }
});
