//! Why a frame was not taken, and why an address did not resolve.

use std::net::Ipv4Addr;
use std::time::Duration;
use thiserror::Error;

/// Why a received frame is not a well-formed ARP or ICMP echo frame (each is counted and the
/// frame handed back or dropped, never trusted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// The frame (or the header its length fields name) ends before `need` bytes.
    #[error("frame of {got} bytes is too short: {need} needed")]
    TooShort {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        got: usize,
    },
    /// The Ethernet type is not the one the codec reads.
    #[error("ethertype {0:#06x} is not the one expected")]
    WrongEthertype(u16),
    /// ARP hardware type other than Ethernet (1) or IEEE 802 (6).
    #[error("ARP hardware type {0} is neither Ethernet (1) nor IEEE 802 (6)")]
    WrongHardwareType(u16),
    /// ARP protocol type other than IPv4 (0x0800).
    #[error("ARP protocol type {0:#06x} is not IPv4")]
    WrongProtocolType(u16),
    /// ARP address lengths other than 6 (MAC) and 4 (IPv4).
    #[error("ARP address lengths {hln}/{pln}, not 6/4")]
    WrongAddressLengths {
        /// Hardware address length.
        hln: u8,
        /// Protocol address length.
        pln: u8,
    },
    /// ARP operation other than request (1) or reply (2).
    #[error("ARP operation {0} is neither request nor reply")]
    WrongOperation(u16),
    /// IP version other than 4.
    #[error("IP version {0}, not 4")]
    NotIpv4(u8),
    /// IPv4 header length field below 5 words or past the packet.
    #[error("IPv4 header length of {0} words is invalid")]
    BadHeaderLength(u8),
    /// IPv4 total length shorter than its header or longer than the frame.
    #[error("IPv4 total length {total} does not fit header {header} and frame {frame}")]
    BadTotalLength {
        /// The total length field.
        total: u16,
        /// The header's length in bytes.
        header: usize,
        /// The IP bytes the frame holds.
        frame: usize,
    },
    /// IPv4 header checksum does not verify.
    #[error("IPv4 header checksum does not verify")]
    HeaderChecksum,
    /// ICMP checksum does not verify.
    #[error("ICMP checksum does not verify")]
    IcmpChecksum,
}

/// Why [`Neighbours::resolve`](super::Neighbours::resolve) gives no MAC address.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ResolveError {
    /// `requests` ARP requests for `ip` went unanswered, the last one `waited` ago.
    #[error(
        "{ip} did not answer ARP: {requests} requests sent, no reply within {waited:?} of the last"
    )]
    Unreachable {
        /// The address that did not answer.
        ip: Ipv4Addr,
        /// Requests sent for it.
        requests: u32,
        /// How long the last request was waited for.
        waited: Duration,
    },
    /// Every entry of the table is waiting for a reply; none could be given up for `ip`.
    #[error("neighbour table full ({capacity} entries all resolving); {ip} not asked for")]
    TableFull {
        /// The address asked for.
        ip: Ipv4Addr,
        /// The table's capacity.
        capacity: usize,
    },
    /// The address cannot be resolved by ARP: unspecified, broadcast, multicast, loopback,
    /// or this function's own.
    #[error("{0} is not a unicast neighbour address")]
    NotUnicast(Ipv4Addr),
}
