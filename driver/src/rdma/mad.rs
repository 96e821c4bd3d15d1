//! Management datagrams (MADs) as a connection manager sends and receives them: the
//! addresses of a MAD's peer and the [`MadTransport`] trait, with nothing of the queue pairs
//! and completion queues under it. [`super::GsiQueuePair`] carries MADs over QP1 on RoCE v2;
//! a test may carry them any other way.
//!
//! On RoCE v2 every MAD is one UD SEND of exactly [`MAD_SIZE`] bytes to QP 1 with P_Key
//! [`DEFAULT_PKEY`] and Q_Key [`QP1_QKEY`], from QP 1 (Linux `ib_mad`: `ib_create_send_mad`,
//! `ib_mad_port_start`; mlx5_ib `gsi.c`).

use std::net::IpAddr;

use crate::error::DriverError;

/// Bytes of a MAD (`IB_MGMT_MAD_SIZE`): the 24-byte common header and its data.
pub const MAD_SIZE: usize = 256;
/// The Q_Key of every MAD to or from QP1 (`IB_QP1_QKEY`, Linux `include/rdma/ib_mad.h`).
pub const QP1_QKEY: u32 = 0x8001_0000;
/// The default (full-member) P_Key, the only one a RoCE port has (`IB_DEFAULT_PKEY_FULL`).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The general services QP's number on the wire.
pub const GSI_QPN: u32 = 1;

/// Where a MAD goes: a peer's port on RoCE v2. The Q_Key is the sending QP's own
/// ([`QP1_QKEY`] on QP1, as `ib_mad` posts with `IB_QP_SET_QKEY`), the P_Key
/// [`DEFAULT_PKEY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadAddress {
    /// The peer's MAC address (RoCE needs it; the connection manager resolves it, by ARP for
    /// an IPv4 GID).
    pub mac: [u8; 6],
    /// The peer's GID (an IPv4 address as `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    /// The peer's QP ([`GSI_QPN`] for every CM MAD; 24 bits).
    pub qpn: u32,
    /// IP hop limit (TTL), 1 to 255.
    pub hop_limit: u8,
    /// IP traffic class (DSCP; the ECN bits are the device's).
    pub traffic_class: u8,
}

impl MadAddress {
    /// The general services QP at `mac` and `gid`, hop limit 64, traffic class 0.
    pub fn gsi(mac: [u8; 6], gid: [u8; 16]) -> Self {
        Self {
            mac,
            gid,
            qpn: GSI_QPN,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

/// Who sent a received MAD, as its completion and GRH area tell it. The MAC is not among
/// them (mlx5 CQEs do not carry it, as mlx5_ib never reports it): a reply needs the peer's
/// MAC resolved from [`MadSource::source_ip`] ([`MadSource::reply_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadSource {
    /// The sender's GID (from the IP source address).
    pub gid: [u8; 16],
    /// The GID it was sent to (this port's; from the IP destination address).
    pub local_gid: [u8; 16],
    /// The sending QP (1 for a MAD from a GSI QP).
    pub qpn: u32,
    /// The BTH's P_Key.
    pub pkey: u16,
    /// Hop limit (TTL) as received.
    pub hop_limit: u8,
    /// Traffic class (TOS) as received.
    pub traffic_class: u8,
}

impl MadSource {
    /// The sender's IP address (IPv4 for an IPv4-mapped GID).
    pub fn source_ip(&self) -> IpAddr {
        super::grh::gid_ip(self.gid)
    }

    /// The address to answer the sender at, once its MAC is known (hop limit 64 and
    /// traffic class 0 as for a new MAD).
    pub fn reply_to(&self, mac: [u8; 6]) -> MadAddress {
        MadAddress {
            qpn: self.qpn,
            ..MadAddress::gsi(mac, self.gid)
        }
    }
}

/// Sends and receives MADs. The connection manager is written against this trait only.
pub trait MadTransport {
    /// Sends `mad` to `to`; returns once it is posted (a MAD may still be lost on the wire:
    /// MADs are datagrams, and their senders retry).
    ///
    /// # Errors
    ///
    /// [`DriverError::QueueFull`] while every send slot is in flight (call
    /// [`MadTransport::poll_mads`], which reclaims them); [`DriverError::Config`] for an
    /// address out of range; [`DriverError::WrongState`] once the transport has failed.
    fn send_mad(&mut self, to: &MadAddress, mad: &[u8; MAD_SIZE]) -> Result<(), DriverError>;

    /// Hands every MAD received since the last call to `on_mad`, oldest first, with its
    /// sender; returns how many. Datagrams that are not whole MADs, or whose sender cannot be
    /// told, are dropped and counted, never handed out.
    ///
    /// # Errors
    ///
    /// [`DriverError::BadDeviceValue`] for a completion or GRH area the device wrote wrong
    /// (the MADs handed out before it stand).
    fn poll_mads(
        &mut self,
        on_mad: &mut dyn FnMut(&MadSource, &[u8; MAD_SIZE]),
    ) -> Result<usize, DriverError>;
}
