//! A [`PortAddress`] served from its own thread, for programs that block elsewhere (in a TCP
//! exchange, or in a measuring loop) while a Linux peer resolves them: its ARP requests and
//! probes are answered within a turn's interval whatever the program does.
//!
//! The thread and the program share the address behind a mutex, taken once per turn by the
//! thread and once per resolution by the program: never on a data path.

use super::port_address::PortAddress;
use cxdirect::Backend;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Time between two turns of the serving thread: well inside Linux's ARP retransmit time
/// (1 s) and its probe delay (5 s).
const TURN_INTERVAL: Duration = Duration::from_micros(500);

/// An address served by a thread (see the module's documentation).
pub struct ServedAddress<B: Backend + Send + 'static> {
    address: Arc<Mutex<PortAddress<B>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl<B: Backend + Send + 'static> ServedAddress<B> {
    /// Starts serving `address` on a thread of its own.
    ///
    /// # Errors
    ///
    /// The thread could not be started.
    pub fn start(address: PortAddress<B>) -> Result<Self, String> {
        let address = Arc::new(Mutex::new(address));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopping) = (Arc::clone(&address), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("cxdirect-arp".into())
            .spawn(move || {
                while !stopping.load(Ordering::Relaxed) {
                    // A poisoned lock means the program panicked holding it: stop serving.
                    let Ok(mut a) = shared.lock() else {
                        return Err("the address's lock was poisoned".to_string());
                    };
                    a.turn(Instant::now())?;
                    drop(a);
                    std::thread::sleep(TURN_INTERVAL);
                }
                Ok(())
            })
            .map_err(|e| format!("starting the thread that serves the address: {e}"))?;
        Ok(Self {
            address,
            stop,
            thread: Some(thread),
        })
    }

    /// The MAC of `peer`, resolved by ARP within `patience` (the neighbour table gives up
    /// sooner when its requests go unanswered).
    ///
    /// # Errors
    ///
    /// The peer did not answer (the error names it), or the serving thread stopped.
    pub fn mac_of(&self, peer: Ipv4Addr, patience: Duration) -> Result<[u8; 6], String> {
        let deadline = Instant::now() + patience;
        loop {
            let known = {
                let mut a = self
                    .address
                    .lock()
                    .map_err(|_| "the address's lock was poisoned".to_string())?;
                a.mac_of(peer, Instant::now())?
            };
            if let Some(mac) = known {
                return Ok(mac);
            }
            if self.thread.as_ref().is_none_or(JoinHandle::is_finished) {
                return Err(format!(
                    "resolving {peer}: the thread serving the address stopped"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "resolving {peer}'s MAC address by ARP: no answer within {} ms",
                    patience.as_millis()
                ));
            }
            std::thread::sleep(TURN_INTERVAL);
        }
    }

    /// Stops the thread and hands the address back (to be dropped before its port closes).
    ///
    /// # Errors
    ///
    /// The thread failed (its receive queue did) or panicked; the address is lost then, and
    /// its queues are released when the last reference goes.
    pub fn stop(mut self) -> Result<PortAddress<B>, String> {
        self.stop.store(true, Ordering::Relaxed);
        let ran = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(ran)) => ran,
            Some(Err(_)) => Err("the thread serving the address panicked".to_string()),
            None => Ok(()),
        };
        ran?;
        let address = Arc::clone(&self.address);
        // The thread's reference went with it; this one goes with `self`.
        drop(self);
        Arc::try_unwrap(address)
            .map_err(|_| "the address is still shared".to_string())?
            .into_inner()
            .map_err(|_| "the address's lock was poisoned".to_string())
    }

    /// The address's report line.
    pub fn describe(&self) -> String {
        self.address
            .lock()
            .map_or_else(|_| "address: lock poisoned".into(), |a| a.describe())
    }
}

impl<B: Backend + Send + 'static> Drop for ServedAddress<B> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
