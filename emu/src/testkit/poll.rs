//! Waiting on the model past its timers. A requester answered with an RNR NAK sends again
//! only after its own RNR timer has run out, so a test that resumes a page fault must let
//! wall-clock time pass between polls; these helpers share that loop.

use std::time::Duration;

/// How long one poll waits: longer than the RNR timer the test QPs ask for (code 1: 0.01 ms).
pub const PAST_RNR: Duration = Duration::from_millis(5);

/// How many polls [`settle_until`] makes before it gives up (about a second in all).
pub const POLLS: usize = 200;

/// Sleeps [`PAST_RNR`], runs `settle` on `rig` and asks `done`, up to [`POLLS`] times:
/// whether `done` held before the polls ran out.
pub fn settle_until<T>(
    rig: &mut T,
    mut settle: impl FnMut(&mut T),
    mut done: impl FnMut(&mut T) -> bool,
) -> bool {
    for _ in 0..POLLS {
        std::thread::sleep(PAST_RNR);
        settle(rig);
        if done(rig) {
            return true;
        }
    }
    false
}
