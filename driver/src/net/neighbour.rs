//! The neighbour (ARP) table: the MAC addresses of peers on the link, each with its expiry;
//! resolution by rate-limited, retried requests that end in a clear error; and the rules by
//! which received ARP is believed, after Linux's `arp_process` (net/ipv4/arp.c) with its
//! defaults (`arp_accept` 0, `arp_ignore` 0): a request for our address teaches the sender's
//! address and is answered; any other ARP only updates an entry the table already holds (one
//! being resolved included); unsolicited replies and gratuitous ARP for addresses not held are
//! ignored; an entry changes MAC no sooner than `locktime` after its last update.
//!
//! One rule is stricter than Linux's: a known entry keeps its MAC against any received ARP that
//! names another (Linux takes a reply's new MAC once `locktime` has passed). Only an answer to
//! our own request changes it: nothing we asked for brought the other MAC, so it is a spoof or a
//! host that moved; either way the established entry stands until it expires, and resolution
//! then asks again (the entry is being resolved, and takes the first answer), so a host that
//! really moved is reached again within `reachable`.
//!
//! Time is passed in (an [`Instant`]), so the table's timers are those of its caller. The
//! table never grows past its capacity; its storage is allocated once, in [`Neighbours::new`],
//! and searched linearly (tables are small: a host talks to few neighbours).

use super::arp::{is_group, ArpOp, ArpPacket, MacAddr};
use super::error::ResolveError;
use crate::error::DriverError;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// How a [`Neighbours`] table behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourConfig {
    /// Most entries held (1 to 4096).
    pub capacity: usize,
    /// How long a learned MAC is used before it is resolved again (Linux:
    /// `base_reachable_time_ms`, 30 s). At least 1 ms.
    pub reachable: Duration,
    /// Time between requests for one address, and how long the last is waited for (Linux:
    /// `retrans_time_ms`, 1 s). At least 1 ms.
    pub retransmit: Duration,
    /// Requests sent for an address before it is given up (Linux: `mcast_solicit`, 3); 1 to 100.
    pub max_requests: u32,
    /// Least time between two changes of an entry's MAC (Linux: `locktime`, 1 s): of several
    /// replies back to back, the first is kept.
    pub locktime: Duration,
}

impl Default for NeighbourConfig {
    fn default() -> Self {
        Self {
            capacity: 256,
            reachable: Duration::from_secs(30),
            retransmit: Duration::from_secs(1),
            max_requests: 3,
            locktime: Duration::from_secs(1),
        }
    }
}

/// What [`Neighbours::resolve`] knows of an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The peer's MAC address, learned and not expired.
    Known(MacAddr),
    /// Being resolved: a request is sent, or due ([`Neighbours::next_request`]); ask again.
    Pending,
}

/// What the table made of a received ARP packet ([`Neighbours::receive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpVerdict {
    /// A request for our address: answer it, to the sender's MAC. The sender was learned,
    /// except for an address probe (sender IP 0.0.0.0, RFC 5227), which teaches nothing.
    Answer,
    /// An entry being resolved got its MAC.
    Learned,
    /// A held entry's MAC was confirmed or changed.
    Updated,
    /// Believed nothing, for the reason given.
    Ignored(IgnoreReason),
}

/// Why a received ARP packet changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    /// The target address is multicast or loopback (Linux drops these first).
    BadTarget,
    /// The sender's MAC is a group address or zero, or its IP is not unicast.
    BadSender,
    /// The sender claims our own IP address (an address conflict, or a spoof).
    OwnAddress,
    /// A reply, or gratuitous ARP, for an address the table neither holds nor asked for.
    Unsolicited,
    /// A request for another host's address from a sender the table does not hold.
    NotForUs,
    /// An address probe (sender 0.0.0.0) for another address.
    Probe,
    /// A different MAC for an entry updated less than `locktime` ago.
    Locked,
    /// A different MAC for a known entry, past `locktime` (see the module's documentation).
    Conflict,
}

/// What a [`Neighbours`] table has counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighbourStats {
    /// Requests handed out by [`Neighbours::next_request`].
    pub requests_sent: u64,
    /// Requests for our address to answer.
    pub requests_answered: u64,
    /// Entries that got their MAC (from a reply, or from a request for our address).
    pub learned: u64,
    /// Held entries confirmed or changed.
    pub updated: u64,
    /// Packets ignored: multicast or loopback target.
    pub bad_target: u64,
    /// Packets ignored: group or zero sender MAC, or non-unicast sender IP.
    pub bad_sender: u64,
    /// Packets ignored: sender claimed our IP.
    pub own_address: u64,
    /// Packets ignored: replies and gratuitous ARP for addresses not held.
    pub unsolicited: u64,
    /// Packets ignored: requests for others from senders not held.
    pub not_for_us: u64,
    /// Packets ignored: probes for other addresses.
    pub probes: u64,
    /// Packets ignored: MAC changes within `locktime`.
    pub locked: u64,
    /// Packets ignored (or requests answered without learning): another MAC for a known entry.
    pub conflicts: u64,
    /// Resolutions given up (answered with [`ResolveError::Unreachable`]).
    pub failed: u64,
    /// Entries dropped to make room.
    pub evicted: u64,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Being resolved: `sent` requests so far, the last at `last`.
    Incomplete { sent: u32, last: Option<Instant> },
    /// Known: `mac`, usable until `expires`, last changed at `updated`.
    Known {
        mac: MacAddr,
        expires: Instant,
        updated: Instant,
    },
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ip: Ipv4Addr,
    state: State,
}

/// The neighbour table of one IPv4 address on one port (see the module's documentation).
#[derive(Debug)]
pub struct Neighbours {
    mac: MacAddr,
    ip: Ipv4Addr,
    config: NeighbourConfig,
    entries: Vec<Entry>,
    stats: NeighbourStats,
}

/// True for an address ARP may resolve: not unspecified, broadcast, multicast or loopback.
fn is_unicast(ip: Ipv4Addr) -> bool {
    !(ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback())
}

impl Neighbours {
    /// An empty table for our MAC `mac` and address `ip`.
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] when `config` is out of its ranges, or `ip` is not a unicast
    /// address, or `mac` a group address.
    pub fn new(mac: MacAddr, ip: Ipv4Addr, config: NeighbourConfig) -> Result<Self, DriverError> {
        if !(1..=4096).contains(&config.capacity) {
            return Err(DriverError::config(
                "capacity",
                config.capacity as u64,
                "1 to 4096 entries",
            ));
        }
        if !(1..=100).contains(&config.max_requests) {
            return Err(DriverError::config(
                "max_requests",
                config.max_requests,
                "1 to 100 requests",
            ));
        }
        for (field, d) in [
            ("reachable", config.reachable),
            ("retransmit", config.retransmit),
        ] {
            if d < Duration::from_millis(1) {
                return Err(DriverError::config(
                    field,
                    d.as_micros() as u64,
                    "at least 1 ms",
                ));
            }
        }
        if !is_unicast(ip) {
            return Err(DriverError::config(
                "ip",
                u32::from(ip),
                "a unicast IPv4 address",
            ));
        }
        if is_group(&mac) || mac == [0; 6] {
            return Err(DriverError::config(
                "mac",
                u64::from_be_bytes([0, 0, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]]),
                "a unicast MAC address",
            ));
        }
        Ok(Self {
            mac,
            ip,
            config,
            entries: Vec::with_capacity(config.capacity),
            stats: NeighbourStats::default(),
        })
    }

    /// Our MAC address.
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// Our IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The configuration.
    pub fn config(&self) -> &NeighbourConfig {
        &self.config
    }

    /// Entries held (known or being resolved).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What has been counted.
    pub fn stats(&self) -> NeighbourStats {
        self.stats
    }

    fn find(&self, ip: Ipv4Addr) -> Option<usize> {
        self.entries.iter().position(|e| e.ip == ip)
    }

    /// The MAC of `ip` when known and not expired at `now`; sends nothing.
    pub fn lookup(&self, ip: Ipv4Addr, now: Instant) -> Option<MacAddr> {
        match self.find(ip).map(|i| self.entries[i].state) {
            Some(State::Known { mac, expires, .. }) if now < expires => Some(mac),
            _ => None,
        }
    }

    /// Resolves `ip` at `now`: its MAC when known and not expired; otherwise the address is
    /// (or stays) being resolved, with a request due from [`Neighbours::next_request`]. An
    /// expired entry is resolved again.
    ///
    /// # Errors
    ///
    /// [`ResolveError::Unreachable`] once `max_requests` requests went unanswered for
    /// `retransmit` after the last (the entry is dropped: the next call starts again);
    /// [`ResolveError::TableFull`] when every entry is being resolved;
    /// [`ResolveError::NotUnicast`] for an address ARP cannot resolve, ours included.
    pub fn resolve(&mut self, ip: Ipv4Addr, now: Instant) -> Result<Resolution, ResolveError> {
        if !is_unicast(ip) || ip == self.ip {
            return Err(ResolveError::NotUnicast(ip));
        }
        let Some(i) = self.find(ip) else {
            self.insert(Entry {
                ip,
                state: State::Incomplete {
                    sent: 0,
                    last: None,
                },
            })?;
            return Ok(Resolution::Pending);
        };
        match self.entries[i].state {
            State::Known { mac, expires, .. } if now < expires => Ok(Resolution::Known(mac)),
            State::Known { .. } => {
                self.entries[i].state = State::Incomplete {
                    sent: 0,
                    last: None,
                };
                Ok(Resolution::Pending)
            }
            State::Incomplete { sent, last } => match last {
                Some(last)
                    if sent >= self.config.max_requests
                        && now.saturating_duration_since(last) >= self.config.retransmit =>
                {
                    self.entries.swap_remove(i);
                    self.stats.failed += 1;
                    Err(ResolveError::Unreachable {
                        ip,
                        requests: sent,
                        waited: now.saturating_duration_since(last),
                    })
                }
                _ => Ok(Resolution::Pending),
            },
        }
    }

    /// The next address whose ARP request is due at `now` (never yet sent, or its last sent
    /// `retransmit` ago with fewer than `max_requests` sent), counted as sent; `None` when
    /// nothing is due. Send a broadcast request for it ([`super::Responder::poll`] does).
    pub fn next_request(&mut self, now: Instant) -> Option<Ipv4Addr> {
        let (max, every) = (self.config.max_requests, self.config.retransmit);
        let e = self.entries.iter_mut().find(|e| match e.state {
            State::Incomplete { sent, last } => {
                sent < max && last.is_none_or(|l| now.saturating_duration_since(l) >= every)
            }
            State::Known { .. } => false,
        })?;
        if let State::Incomplete { sent, .. } = e.state {
            e.state = State::Incomplete {
                sent: sent + 1,
                last: Some(now),
            };
        }
        self.stats.requests_sent += 1;
        Some(e.ip)
    }

    /// Drops the entry of `ip`, if held.
    pub fn forget(&mut self, ip: Ipv4Addr) {
        if let Some(i) = self.find(ip) {
            self.entries.swap_remove(i);
        }
    }

    /// Takes a received, well-formed ARP packet at `now` by the rules in the module's
    /// documentation, and says whether to answer it.
    pub fn receive(&mut self, arp: &ArpPacket, now: Instant) -> ArpVerdict {
        let verdict = self.judge(arp, now);
        let s = &mut self.stats;
        match verdict {
            ArpVerdict::Answer => s.requests_answered += 1,
            ArpVerdict::Learned => s.learned += 1,
            ArpVerdict::Updated => s.updated += 1,
            ArpVerdict::Ignored(why) => match why {
                IgnoreReason::BadTarget => s.bad_target += 1,
                IgnoreReason::BadSender => s.bad_sender += 1,
                IgnoreReason::OwnAddress => s.own_address += 1,
                IgnoreReason::Unsolicited => s.unsolicited += 1,
                IgnoreReason::NotForUs => s.not_for_us += 1,
                IgnoreReason::Probe => s.probes += 1,
                IgnoreReason::Locked => s.locked += 1,
                IgnoreReason::Conflict => s.conflicts += 1,
            },
        }
        verdict
    }

    fn judge(&mut self, arp: &ArpPacket, now: Instant) -> ArpVerdict {
        let (sip, tip, sha) = (arp.sender_ip, arp.target_ip, arp.sender_mac);
        // arp_process: requests for multicast or loopback targets are dropped first.
        if tip.is_multicast() || tip.is_loopback() {
            return ArpVerdict::Ignored(IgnoreReason::BadTarget);
        }
        // Ours, not Linux's: a group or zero sender MAC would be where RoCE frames go.
        if is_group(&sha) || sha == [0; 6] {
            return ArpVerdict::Ignored(IgnoreReason::BadSender);
        }
        // An address probe (RFC 5227 / RFC 2131 duplicate detection): answered when it asks
        // for our address, never learned from.
        if sip.is_unspecified() {
            return if arp.op == ArpOp::Request && tip == self.ip {
                ArpVerdict::Answer
            } else {
                ArpVerdict::Ignored(IgnoreReason::Probe)
            };
        }
        if sip == self.ip {
            return ArpVerdict::Ignored(IgnoreReason::OwnAddress);
        }
        if !is_unicast(sip) {
            return ArpVerdict::Ignored(IgnoreReason::BadSender);
        }
        if arp.op == ArpOp::Request && tip == self.ip {
            // neigh_event_ns: the sender is learned (created if need be), then answered. A
            // request claiming a live entry's address from another MAC is answered (the
            // answer goes to the asker and tells it only our own MAC) but teaches nothing.
            let _ = self.set_known(sip, sha, now, true);
            return ArpVerdict::Answer;
        }
        let Some(i) = self.find(sip) else {
            // arp_accept 0: no entry is created from unsolicited ARP.
            return ArpVerdict::Ignored(if arp.op == ArpOp::Reply || sip == tip {
                IgnoreReason::Unsolicited
            } else {
                IgnoreReason::NotForUs
            });
        };
        match self.entries[i].state {
            State::Incomplete { .. } => {
                self.entries[i].state = self.known(sha, now);
                ArpVerdict::Learned
            }
            State::Known { mac, updated, .. } => {
                if mac != sha && now.saturating_duration_since(updated) < self.config.locktime {
                    return ArpVerdict::Ignored(IgnoreReason::Locked);
                }
                if mac != sha {
                    return ArpVerdict::Ignored(IgnoreReason::Conflict);
                }
                // A request does not assert the sender's reachability: a held MAC is kept
                // for as long as it was, only changed.
                if mac != sha || arp.op == ArpOp::Reply {
                    self.entries[i].state = self.known(sha, now);
                }
                ArpVerdict::Updated
            }
        }
    }

    fn known(&self, mac: MacAddr, now: Instant) -> State {
        State::Known {
            mac,
            expires: now + self.config.reachable,
            updated: now,
        }
    }

    /// Sets `ip` known at `mac`, creating the entry when `create` (a known entry keeps its MAC
    /// against another; counted as locked within `locktime`, as a conflict after).
    fn set_known(
        &mut self,
        ip: Ipv4Addr,
        mac: MacAddr,
        now: Instant,
        create: bool,
    ) -> Result<(), ResolveError> {
        let state = self.known(mac, now);
        match self.find(ip) {
            Some(i) => {
                if let State::Known {
                    mac: old, updated, ..
                } = self.entries[i].state
                {
                    if old != mac {
                        if now.saturating_duration_since(updated) < self.config.locktime {
                            self.stats.locked += 1;
                        } else {
                            self.stats.conflicts += 1;
                        }
                        return Ok(());
                    }
                }
                self.entries[i].state = state;
                Ok(())
            }
            None if create => self.insert(Entry { ip, state }),
            None => Ok(()),
        }
    }

    /// Adds `entry`, making room when full by dropping the known entry updated longest ago
    /// (an expired one, when there is one); entries being resolved are never dropped.
    fn insert(&mut self, entry: Entry) -> Result<(), ResolveError> {
        if self.entries.len() < self.config.capacity {
            self.entries.push(entry);
            return Ok(());
        }
        let victim = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.state {
                // Every known entry expires `reachable` after its update: the oldest update
                // is the first (or only) expired one.
                State::Known { updated, .. } => Some((i, updated)),
                State::Incomplete { .. } => None,
            })
            .min_by_key(|&(_, updated)| updated)
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                self.entries[i] = entry;
                self.stats.evicted += 1;
                Ok(())
            }
            None => Err(ResolveError::TableFull {
                ip: entry.ip,
                capacity: self.config.capacity,
            }),
        }
    }
}

#[cfg(test)]
#[path = "neighbour_tests.rs"]
mod tests;
