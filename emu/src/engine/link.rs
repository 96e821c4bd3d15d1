//! The port's link as the senders of its traffic classes meet it. At the port's fastest
//! protocol the model's engines never fill the link and nothing here runs. Below it (PTYS:
//! `ethtool -s DEV speed 1000`, `fw::port_speed`) every frame the port sends passes one
//! bucket at the link's speed, and while classes wait for it (are backlogged) they share
//! the link as ETS divides it (QETCR, mlx5e's `dcb ets`): a class in a higher group goes
//! first (mlx5e puts each strict class in a group of its own above the ETS classes,
//! `mlx5e_build_tc_group`), and the classes of one group send in proportion to their
//! `bw_allocation`, a deficit weighted round robin over the classes still asking
//! ([`Share`](crate::objects::scheduling::Share)), as a TSAR weighs its children (`engine::pacing`). A class no other class
//! waits for goes whenever the link has room, so an idle class's share is the others' to use.

use crate::function::Core;
use crate::objects::scheduling::{ASKING, SHARE_RETRY};
use std::time::Instant;

/// Whether the link paces what the port sends (it runs below the port's fastest protocol).
pub(crate) fn paced(core: &Core) -> bool {
    core.port.link_rate.is_some()
}

/// When a frame of traffic class `tc` may go on the link: `None` now, else when to ask
/// again (when the link's bucket is out of debt, or [`SHARE_RETRY`] from now when another
/// class is to go first). A class yields while one in a higher group waits for the link, or
/// while it is ahead of the least served class of its own group that waits for the link by
/// more than its quantum. A class waits for the link when the link refused it for want of
/// room within [`ASKING`] and it has not gone since; a class that only yields is not waiting
/// for the link, so nobody yields to it (two classes each yielding to the other would leave
/// the link idle). A class that had stopped asking starts level with the least
/// served one still asking, so idling saves it nothing.
pub(crate) fn wait(core: &mut Core, tc: usize, now: Instant) -> Option<Instant> {
    let rate = core.port.link_rate?;
    let port = &mut core.port;
    let debt = port.link_pacer.admit(rate, now).err();
    let group = port.ets.get(tc)?.group;
    let mut first = false;
    let mut least_asking: Option<u64> = None;
    let mut least_waiting: Option<u64> = None;
    let min = |least: Option<u64>, served: u64| Some(least.map_or(served, |l| l.min(served)));
    for (other, share) in port.class_shares.iter().enumerate() {
        if other == tc || !share.asking(now) {
            continue;
        }
        let other_group = port.ets.get(other).map_or(0, |c| c.group);
        let waiting = port.class_waiting_at[other]
            .is_some_and(|at| now.saturating_duration_since(at) < ASKING);
        if other_group == group {
            least_asking = min(least_asking, share.served);
            if waiting {
                least_waiting = min(least_waiting, share.served);
            }
        } else if other_group > group && waiting {
            first = true;
        }
    }
    let bw = u32::from(port.ets.get(tc)?.bw_allocation);
    let share = port.class_shares.get_mut(tc)?;
    share.ask(now, least_asking);
    let yields = first || share.ahead_of(least_waiting, bw);
    port.class_waiting_at[tc] = debt.map(|_| now);
    debt.or(yields.then(|| now + SHARE_RETRY))
}

/// Charges a frame of `bytes` that traffic class `tc` sent to the link's bucket and to the
/// class's service.
pub(crate) fn charge(core: &mut Core, tc: usize, bytes: usize) {
    if core.port.link_rate.is_none() {
        return;
    }
    core.port.link_pacer.charge(bytes);
    let bw = core
        .port
        .ets
        .get(tc)
        .map_or(0, |c| u32::from(c.bw_allocation));
    if let Some(share) = core.port.class_shares.get_mut(tc) {
        share.charge(bytes, bw);
    }
}
