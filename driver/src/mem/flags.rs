//! The offloads a packet asks for on send and was given on receive.

/// Offload requests and results carried by an [`Mbuf`](super::Mbuf).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffloadFlags {
    /// Send: ask the device to compute the IPv4 header checksum.
    pub tx_ip_csum: bool,
    /// Send: ask the device to compute the TCP/UDP checksum.
    pub tx_l4_csum: bool,
    /// Send: insert this VLAN tag (TCI).
    pub tx_vlan: Option<u16>,
    /// Send: TCP segmentation offload with this MSS, in TCP payload bytes per frame (as DPDK's
    /// `RTE_MBUF_F_TX_TCP_SEG` with `tso_segsz`), on a port started with
    /// `PortConfig::tx_tso`. The packet (Ethernet, optionally one VLAN tag, IPv4 or IPv6 without
    /// extension headers, TCP; headers wholly in the first segment) may be longer than the
    /// MTU, up to the device's LSO limit: the device sends its TCP payload in frames of at most
    /// this many bytes, each behind a copy of the headers with the IP length, IPv4
    /// identification, TCP sequence number and flags rewritten; checksums as `tx_ip_csum` and
    /// `tx_l4_csum` ask. A packet the offload cannot take is refused (see
    /// [`TxRefusal`](crate::tx::TxRefusal)).
    pub tx_tso_mss: Option<u16>,
    /// Receive: the device verified the IPv4 header checksum (or the packet is IPv6).
    pub rx_ip_csum_good: bool,
    /// Receive: the device verified the TCP/UDP checksum.
    pub rx_l4_csum_good: bool,
    /// Receive: RSS hash, when the device computed one.
    pub rx_rss_hash: Option<u32>,
    /// Receive: L3 type as the CQE reports it (0 none, 1 IPv6, 2 IPv4).
    pub rx_l3_type: u8,
    /// Receive: L4 type as the CQE reports it (0 none, 1-4 TCP kinds, 2 UDP).
    pub rx_l4_type: u8,
}
