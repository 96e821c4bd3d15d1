//! The function's own addresses: the MACs and GIDs a frame must name for the function to take
//! it (a received RoCE frame) or for the device to loop it back inside (a frame the function
//! sends).

use super::roce::Offsets;
use crate::counters::add;
use crate::function::Core;

/// Whether `mac` is one of the function's own unicast addresses: the vport's permanent
/// address (as MODIFY_NIC_VPORT_CONTEXT last set it) or the source MAC of an entry of its
/// RoCE address table.
pub(crate) fn own_mac(core: &Core, mac: &[u8]) -> bool {
    if mac.len() != 6 || mac[0] & 1 != 0 {
        return false;
    }
    let port = core.port.mac.to_be_bytes();
    if mac == &port[2..] {
        return true;
    }
    core.res.gids.has_mac(mac)
}

/// Whether `gid` (16 bytes; IPv4 as an IPv4-mapped GID) is in the function's RoCE address
/// table.
pub(crate) fn own_gid(core: &Core, gid: &[u8]) -> bool {
    core.res.gids.has_gid(gid)
}

/// The destination checks of a received RoCE frame whose headers are at `at`: its
/// destination MAC is the function's (or multicast, with a multicast destination IP, as RoCE
/// multicast is sent) and its destination IP is a GID of the function's RoCE address table.
/// A frame that fails is counted in `roce_address_drops`; false then.
pub(crate) fn addressed_here(core: &Core, frame: &[u8], at: &Offsets) -> bool {
    let ok = destination_ok(core, frame, at);
    if !ok {
        add(&core.counters.roce_address_drops, 1);
    }
    ok
}

/// The destination IP address of a RoCE frame whose headers are at `at`, as a GID (IPv4
/// as an IPv4-mapped GID), and whether it is a multicast address (IPv4 224.0.0.0/4, IPv6
/// ff00::/8); `None` for a frame too short to hold it.
pub(crate) fn destination_gid(frame: &[u8], at: &Offsets) -> Option<([u8; 16], bool)> {
    let ip = frame.get(at.l3..)?;
    let mut gid = [0u8; 16];
    let multicast = if ip.first()? >> 4 == 4 {
        let addr = ip.get(16..20)?;
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(addr);
        (0xe0..=0xef).contains(&addr[0])
    } else {
        let addr = ip.get(24..40)?;
        gid.copy_from_slice(addr);
        addr[0] == 0xff
    };
    Some((gid, multicast))
}

fn destination_ok(core: &Core, frame: &[u8], at: &Offsets) -> bool {
    let Some(dst_mac) = frame.get(..6) else {
        return false;
    };
    let Some((gid, multicast_ip)) = destination_gid(frame, at) else {
        return false;
    };
    if dst_mac[0] & 1 != 0 {
        // Multicast RoCE: a multicast MAC carries a multicast IP, never a unicast one. The
        // groups the function's QPs joined decide who takes it (`engine::ud`), as a ConnectX
        // steers RoCE by destination GID: the vport's multicast MAC list (mlx5e's, set by
        // MODIFY_NIC_VPORT_CONTEXT and its own flow rules) filters Ethernet, not RoCE.
        return multicast_ip;
    }
    own_mac(core, dst_mac) && own_gid(core, &gid)
}
