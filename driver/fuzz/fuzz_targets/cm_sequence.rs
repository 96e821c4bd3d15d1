//! A hostile peer's sequence of MADs against a connected client/server pair of CMs
//! (`cxdirect::cm::script`): replays, wrong communication IDs, REJ and MRA floods, DREQs for
//! other QPs, a listener that goes away, a lossy wire and timers running out, interleaved with
//! the consumer's calls.
//!
//! Invariants (checked by the script runner after every step): no panic; no connection
//! established without a REP or RTU naming it (and an accept on the passive side); no event for
//! a communication ID that side never issued; tables, queued answers and poll output bounded;
//! every MAD sent parses.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = cxdirect::cm::script::run(data) {
        panic!("{v}");
    }
});
