//! Addresses for a port's function: an IPv4 address, answered for by ARP and ICMP echo, and
//! its peers' MAC addresses resolved by ARP, as a Linux host on the link expects of a
//! neighbour (its `rdma_cm` resolves our address by ARP before it connects; we resolve its
//! MAC to send RoCE to it).
//!
//! - [`arp`] and [`icmp`]: the frame codecs (Ethernet, ARP, IPv4, ICMP echo), with
//!   [`checksum`];
//! - [`neighbour`]: the neighbour table, [`Neighbours`];
//! - [`responder`]: [`Responder`], which works on a port's receive and send bursts.

pub mod arp;
pub mod checksum;
mod error;
pub mod icmp;
pub mod neighbour;
pub mod responder;

pub use arp::{ArpOp, ArpPacket, EthernetHeader, MacAddr};
pub use error::{FrameError, ResolveError};
pub use icmp::{EchoFrame, IcmpEcho, Ipv4Header};
pub use neighbour::{
    ArpVerdict, IgnoreReason, NeighbourConfig, NeighbourStats, Neighbours, Resolution,
};
pub use responder::{Responder, ResponderStats};

/// Hands `f` 200 pseudo-random inputs of each length below `max_len` (xorshift from `seed`),
/// for the codecs' never-panic tests.
#[cfg(test)]
pub(crate) fn random_inputs(seed: u32, max_len: usize, mut f: impl FnMut(&[u8])) {
    let mut x = seed;
    let mut bytes = Vec::with_capacity(max_len);
    for len in 0..max_len {
        for _ in 0..200 {
            bytes.clear();
            bytes.extend((0..len).map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            }));
            f(&bytes);
        }
    }
}
