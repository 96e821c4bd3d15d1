//! The device thread of threaded execution. One thread runs the send doorbells and receive
//! engines of every function attached to it: the two functions of [`super::Device::pair`]
//! share one, as one adapter's engines serve both its ports, so a packet crosses from one
//! function to the other without waking a second thread (a pair built with two device threads,
//! `EmuConfig::device_threads`, has one per function, each waking the other's when it put
//! frames on the wire). After work it keeps looking for more
//! for the functions' poll window, then sleeps until a doorbell wakes it.

use super::{lock, next_deadline, pump_local, pump_rx_from, run_timers, wake_peers, Shared};
use crate::engine;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the device thread and the functions it serves share.
pub(super) struct EngineState {
    members: Mutex<Vec<Weak<Shared>>>,
    /// Held by the thread from deciding to sleep until it waits on `work`.
    sleep_lock: Mutex<()>,
    work: Condvar,
    /// The thread sleeps (or is about to): a wake-up is a system call, made only then.
    sleeping: AtomicBool,
    stop: AtomicBool,
    /// The longest poll window of the functions served, in nanoseconds.
    poll_window_ns: AtomicU64,
}

/// Idle polling rounds between two yields of the core.
const YIELD_EVERY: u32 = 64;

/// Longest sleep before the thread looks for work on its own (a wake-up that raced with going
/// to sleep costs no more than this).
const SLEEP_LIMIT: Duration = Duration::from_micros(200);

impl EngineState {
    /// Wakes the thread if it sleeps. Call after queueing work for it (a doorbell, or a frame
    /// at a served function's port).
    pub(super) fn kick(&self) {
        // Orders the caller's queueing before the read of `sleeping`, against the thread's
        // store of `sleeping` before it looks for work one last time.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            let _sleep = lock(&self.sleep_lock);
            self.work.notify_one();
        }
    }
}

/// A device thread; the last function handle using it drops it, which stops the thread.
pub(super) struct Engine {
    state: Arc<EngineState>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// A device thread serving no function yet; [`Engine::serve`] adds them.
    pub(super) fn start() -> Arc<Self> {
        let state = Arc::new(EngineState {
            members: Mutex::new(Vec::new()),
            sleep_lock: Mutex::new(()),
            work: Condvar::new(),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            poll_window_ns: AtomicU64::new(0),
        });
        let for_thread = state.clone();
        let handle = std::thread::Builder::new()
            .name("cxdirect-emu".into())
            .spawn(move || run(&for_thread))
            .ok();
        Arc::new(Self {
            state,
            thread: Mutex::new(handle),
        })
    }

    /// What a function keeps to wake the thread.
    pub(super) fn state(&self) -> Arc<EngineState> {
        self.state.clone()
    }

    /// Adds a function to those the thread serves, polling for `poll_window` after work.
    pub(super) fn serve(&self, shared: &Arc<Shared>, poll_window: Duration) {
        lock(&self.state.members).push(Arc::downgrade(shared));
        let ns = u64::try_from(poll_window.as_nanos()).unwrap_or(u64::MAX);
        self.state.poll_window_ns.fetch_max(ns, Ordering::Relaxed);
        self.state.kick();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        {
            let _sleep = lock(&self.state.sleep_lock);
            self.state.work.notify_all();
        }
        if let Some(handle) = lock(&self.thread).take() {
            let _ = handle.join();
        }
    }
}

fn run(state: &EngineState) {
    let mut last_work = Instant::now();
    let mut idle_rounds = 0u32;
    // Reused every round, so a round allocates nothing.
    let mut members: Vec<Arc<Shared>> = Vec::new();
    while !state.stop.load(Ordering::Relaxed) {
        members.extend(lock(&state.members).iter().filter_map(Weak::upgrade));
        let mut did_work = false;
        for shared in &members {
            did_work |= serve_once(shared);
        }
        // No strong handle is kept between rounds: a function whose last handle is dropped
        // goes away.
        members.clear();
        let window = Duration::from_nanos(state.poll_window_ns.load(Ordering::Relaxed));
        if did_work {
            last_work = Instant::now();
            idle_rounds = 0;
        } else if last_work.elapsed() < window {
            // Polling: look again at once, as a device's engines do, but now and then give the
            // core to whoever else wants it (a yield is a system call: not every round).
            idle_rounds = idle_rounds.wrapping_add(1);
            if idle_rounds % YIELD_EVERY == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else {
            sleep(state);
        }
    }
}

/// Runs one function's queued doorbells and arrived frames; returns whether there were any.
fn serve_once(shared: &Shared) -> bool {
    let mut did_work = false;
    loop {
        let next = lock(&shared.pending).pop_front();
        let Some(db) = next else { break };
        did_work = true;
        let mut core = lock(&shared.core);
        let bf = (db.bf_len > 0).then(|| engine::sq::BlueFlame {
            bytes: &db.bf[..db.bf_len],
        });
        engine::sq::doorbell(&mut core, db.uar, db.first8, bf, db.register);
        // What the doorbell sent the function itself lands before the next doorbell runs, as
        // in inline execution: doorbells queued together were written one after the other,
        // and a later one may depend on an earlier one's loopback (rdma-core's steering
        // entries, written by RDMA WRITE on a self-connected QP, then a frame they steer).
        if core.local_loopback.pending() {
            engine::loopback::drain(&mut core);
        }
    }
    // What the function sent itself is received first, as it would be inside a device.
    did_work |= pump_local(shared);
    let link = lock(&shared.link).clone();
    // Frames that arrived are taken before the timers run: a response waiting at the port
    // is progress, not a reason to time out and send again.
    if let Some(link) = &link {
        if link.wire.pending(link.port).unwrap_or(0) > 0 {
            did_work = true;
            pump_rx_from(shared, link);
        }
    }
    if run_timers(shared) {
        did_work = true;
    }
    did_work |= pump_local(shared);
    if let Some(link) = &link {
        if did_work {
            wake_peers(link);
        }
    }
    did_work
}

/// Sleeps until kicked, [`SLEEP_LIMIT`] or the earliest timer of the functions served (an RC
/// ACK timeout or RNR wait, a paced SQ's wait: they fire though nobody polls), unless work
/// arrived meanwhile.
fn sleep(state: &EngineState) {
    // Read before the sleep lock: a timer armed later comes with a doorbell, which kicks.
    let timeout = lock(&state.members)
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|shared| next_deadline(&lock(&shared.core)))
        .min()
        .map_or(SLEEP_LIMIT, |at| {
            at.saturating_duration_since(Instant::now())
                .min(SLEEP_LIMIT)
        });
    let guard = lock(&state.sleep_lock);
    state.sleeping.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    let waiting = lock(&state.members)
        .iter()
        .filter_map(Weak::upgrade)
        .any(|shared| {
            !lock(&shared.pending).is_empty()
                || lock(&shared.core).local_loopback.pending()
                || lock(&shared.link)
                    .as_ref()
                    .is_some_and(|l| l.wire.pending(l.port).unwrap_or(0) > 0)
        });
    if !waiting && !state.stop.load(Ordering::SeqCst) {
        let _ = state.work.wait_timeout(guard, timeout);
    }
    state.sleeping.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::serve_once;
    use crate::device::PendingDoorbell;
    use crate::testkit::dr::domain;
    use crate::testkit::rc::lone_host;
    use crate::testkit::ste::Builder;
    use crate::testkit::sw_icm::wqe;
    use crate::testkit::sw_icm::GID;
    use crate::testkit::{udp_frame, Host, Sq};
    use crate::EmuConfig;
    use cxdirect_hw::wqe::opcode;

    /// Writes `w` into `sq` and its doorbell record, and queues its doorbell as a device
    /// thread finds it, without running it.
    fn queue(h: &Host, sq: &mut Sq, w: &[u8]) {
        h.write_wqe(sq, w);
        h.write_be32(sq.dbr + 4, u32::from(sq.pi));
        let mut first8 = [0u8; 8];
        first8.copy_from_slice(&w[..8]);
        super::lock(&h.dev.shared.pending).push_back(PendingDoorbell {
            uar: h.uar,
            first8,
            bf: [0; crate::device::BF_REG_SIZE / 2],
            bf_len: 0,
            register: crate::engine::send_counter::Register::BlueFlame,
        });
    }

    /// Two doorbells a device thread finds queued together: an RDMA WRITE by rdma-core's
    /// steering ring (a QP connected to itself) that turns a transmit table's anchor from
    /// "let out" into "drop", then a frame from an Ethernet SQ. The frame meets the new anchor:
    /// the WRITE's loopback landed before the second doorbell ran, as inline execution does.
    /// (The rig's `test_metadata_modify_action_set_copy_match` once counted 9 of its 10
    /// frames: its first frame was steered before its last rule's entry landed.)
    #[test]
    fn a_doorbell_meets_what_the_doorbells_before_it_looped_back() {
        const DONT_CARE: u16 = 0x000f;
        // Alone on a wire: what the function sends itself loops inside it, as in the rig.
        let cfg = EmuConfig::default();
        let mac = cfg.mac;
        let (mut h, _wire) = lone_host(cfg, 16 << 20, GID, mac);
        let mut dom = domain(&mut h);
        let caps = dom.caps;
        let mut allow = Builder::init(DONT_CARE, 0);
        allow.always_miss(caps.tx_allow);
        dom.write(&mut h, vec![(dom.base, allow)]);
        dom.transmit_table(&mut h);
        let cq = h.create_cq(6);
        let tis = h.create_tis();
        let mut sq = h.create_sq(cq.cqn, tis, 6);
        let key = h.create_mkey(false, true);
        let mut drop = Builder::init(DONT_CARE, 0);
        drop.always_miss(caps.tx_drop);
        let write = wqe(
            &dom.ring.sq,
            opcode::RDMA_WRITE,
            0,
            dom.rkey,
            &drop.post(),
            (0, 0),
        );
        queue(&h, &mut dom.ring.sq, &write);
        let buf = h.alloc(128, 64);
        let send = h.build_send(&sq, &udp_frame(64, 3), buf, key, true);
        queue(&h, &mut sq, &send);
        let before = h.dev.counters();
        serve_once(&h.dev.shared);
        let after = h.dev.counters();
        assert_eq!(
            after.tx_steer_drops - before.tx_steer_drops,
            1,
            "the frame met the entry the WRITE before it wrote"
        );
    }
}
