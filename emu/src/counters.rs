//! PCIe transaction and event counters: what the driver cost the device, per function and per
//! queue. Benchmarks read these to report doorbells, DMA transactions and interrupts per packet.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counter_set {
    ($(#[doc = $doc:expr])* $name:ident, $snap:ident { $($(#[doc = $fdoc:expr])* $field:ident,)* }) => {
        $(#[doc = $doc])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[doc = $fdoc])* pub $field: AtomicU64,)*
        }

        /// A plain copy of the counters at one moment.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $snap {
            $($(#[doc = $fdoc])* pub $field: u64,)*
        }

        impl $name {
            /// Copies every counter.
            pub fn snapshot(&self) -> $snap {
                $snap { $($field: self.$field.load(Ordering::Relaxed),)* }
            }

            /// Sets every counter to zero.
            pub fn reset(&self) {
                $(self.$field.store(0, Ordering::Relaxed);)*
            }
        }

        impl $snap {
            /// Counter-wise difference `self - earlier` (saturating).
            pub fn since(&self, earlier: &$snap) -> $snap {
                $snap { $($field: self.$field.saturating_sub(earlier.$field),)* }
            }
        }
    };
}

counter_set! {
    /// Function-wide counters.
    Counters, CountersSnapshot {
        /// MMIO reads by the driver (any width).
        mmio_reads,
        /// MMIO writes by the driver (any width; a 64-byte BlueFlame store counts once).
        mmio_writes,
        /// Send doorbells rung (UAR doorbell / BlueFlame register writes that start a WQE).
        doorbells,
        /// Doorbells that carried a whole WQE (BlueFlame), sparing the WQE fetch.
        bf_writes,
        /// CQ arm doorbells.
        cq_arms,
        /// EQ consumer-index doorbells.
        eq_doorbells,
        /// Commands executed.
        commands,
        /// Commands that completed with a non-OK status or delivery status.
        command_errors,
        /// Command doorbells whose slot held an entry the device does not own: nothing ran.
        idle_command_doorbells,
        /// DMA read transactions fetching WQEs.
        wqe_fetch_reads,
        /// Bytes of WQEs fetched.
        wqe_fetch_bytes,
        /// DMA read transactions fetching packet payload (send gather).
        payload_reads,
        /// Payload bytes read.
        payload_read_bytes,
        /// DMA write transactions delivering packet payload (receive scatter).
        payload_writes,
        /// Payload bytes written.
        payload_write_bytes,
        /// Doorbell record reads.
        dbrec_reads,
        /// Receive WQE reads.
        rx_wqe_reads,
        /// Completions written (every completion a compressed session holds counts once).
        cqes,
        /// 64-byte CQE slots written: one per plain CQE; a title and its mini-CQE arrays per
        /// compressed session.
        cqe_slot_writes,
        /// Compressed CQE sessions written.
        compressed_sessions,
        /// Error CQEs written.
        error_cqes,
        /// EQEs written.
        eqes,
        /// MSI-X messages signalled.
        interrupts,
        /// Interrupts that could not be signalled (MSI-X disabled or no sink).
        interrupts_suppressed,
        /// Frames sent on the wire.
        tx_frames,
        /// Bytes sent on the wire.
        tx_bytes,
        /// Frames taken from the wire.
        rx_frames,
        /// Bytes of the frames taken from the wire.
        rx_bytes,
        /// Unicast frames sent (destination MAC with the group bit clear).
        tx_unicast_frames,
        /// Bytes of the unicast frames sent.
        tx_unicast_bytes,
        /// Multicast frames sent (group bit set, not broadcast).
        tx_multicast_frames,
        /// Bytes of the multicast frames sent.
        tx_multicast_bytes,
        /// Broadcast frames sent.
        tx_broadcast_frames,
        /// Bytes of the broadcast frames sent.
        tx_broadcast_bytes,
        /// Unicast frames taken from the wire.
        rx_unicast_frames,
        /// Bytes of the unicast frames taken from the wire.
        rx_unicast_bytes,
        /// Multicast frames taken from the wire.
        rx_multicast_frames,
        /// Bytes of the multicast frames taken from the wire.
        rx_multicast_bytes,
        /// RoCE v2 unicast frames sent (UDP port 4791): counted apart from the Ethernet casts,
        /// as a ConnectX's vport counts RDMA traffic (`transmitted_ib_unicast`).
        tx_rdma_unicast_frames,
        /// Bytes of the RoCE v2 unicast frames sent.
        tx_rdma_unicast_bytes,
        /// RoCE v2 multicast frames sent.
        tx_rdma_multicast_frames,
        /// Bytes of the RoCE v2 multicast frames sent.
        tx_rdma_multicast_bytes,
        /// RoCE v2 unicast frames taken from the wire (`received_ib_unicast`).
        rx_rdma_unicast_frames,
        /// Bytes of the RoCE v2 unicast frames taken from the wire.
        rx_rdma_unicast_bytes,
        /// RoCE v2 multicast frames taken from the wire.
        rx_rdma_multicast_frames,
        /// Bytes of the RoCE v2 multicast frames taken from the wire.
        rx_rdma_multicast_bytes,
        /// Broadcast frames taken from the wire.
        rx_broadcast_frames,
        /// Bytes of the broadcast frames taken from the wire.
        rx_broadcast_bytes,
        /// Frames delivered into receive buffers.
        rx_delivered,
        /// Frames dropped: no receive WQE posted (out of buffer).
        rx_out_of_buffer,
        /// Frames dropped by steering (no matching rule, no root table, queue not ready).
        rx_steer_drops,
        /// Frames dropped because the port was down.
        rx_port_down_drops,
        /// Frames whose walk through software steering entries failed (an unreadable or
        /// malformed entry, a loop, an action the model does not apply): dropped, and counted
        /// in `rx_steer_drops` too.
        rx_sw_steering_errors,
        /// Frames an SQ sent that NIC transmit steering dropped (a drop entry or action, or a
        /// failed software steering walk): their WQEs complete, nothing leaves.
        tx_steer_drops,
        /// Frames whose transmit walk through software steering entries failed (an unreadable
        /// or malformed entry, a loop, an action the model does not apply): dropped, and
        /// counted in `tx_steer_drops` too.
        tx_sw_steering_errors,
        /// Frames dropped by a striding RQ because they need more strides than a whole WQE has.
        rx_striding_too_long,
        /// Filler completions of striding RQs (the strides a WQE had left when the next frame
        /// did not fit them).
        rx_striding_fillers,
        /// Linked-list striding RQs moved to error because a finished WQE's next segment named
        /// a WQE past the ring.
        rx_striding_bad_links,
        /// Device accesses to host memory refused by the IOMMU model.
        dma_faults,
        /// Doorbells with a producer index the device could not accept.
        bad_doorbells,
        /// CQ overruns detected.
        cq_overruns,
        /// Completions the device could not write because their CQ was in error (overrun) or
        /// unreachable: the WQE was consumed (a received frame is lost with it) and its queue
        /// moved to error.
        completions_lost,
        /// EQ overruns (events lost because the EQ was full).
        eq_overruns,
        /// Low-watermark (SRQ_RQ_LIMIT) events raised.
        limit_events,
        /// PAGE_REQUEST events raised.
        page_requests,
        /// RoCE packets dropped for a bad invariant CRC.
        roce_icrc_drops,
        /// RoCE packets dropped for their destination: a MAC that is not the function's, or
        /// an IP address that is not in its RoCE address table.
        roce_address_drops,
        /// Frames the function sent to itself, delivered inside the device instead of on the
        /// cable (local loopback).
        local_loopback_frames,
        /// RoCE packets dropped otherwise (no such QP, QP not receiving, malformed, out of
        /// sequence).
        roce_rx_drops,
        /// RoCE packets that repeated a PSN already received (answered by an ACK).
        roce_duplicates,
        /// RoCE ACKs sent.
        roce_acks_sent,
        /// RoCE NAKs sent (sequence error, remote access, invalid request).
        roce_naks_sent,
        /// RoCE RNR NAKs sent (no receive WQE posted).
        roce_rnr_naks_sent,
        /// RC WQEs sent again (ACK timeout, RNR wait over, or sequence NAK).
        roce_retransmits,
        /// ACKs past a READ or atomic whose response never came (implied NAKs): the requester
        /// went back to it.
        roce_implied_naks,
        /// DC requests refused by their DCT for a wrong DC access key (answered by a remote
        /// access NAK, nothing placed).
        dc_key_violations,
        /// DC requests dropped because every responder context of their DCT was busy with
        /// another initiator (the initiator's retransmission tries again).
        dc_responders_busy,
        /// SENDs to a tag-matching XRQ too short for a tag-matching header or naming an
        /// operation other than no-tag, eager or rendezvous: delivered whole to an ordinary
        /// receive WQE as no-tag messages.
        tm_malformed,
        /// UD and GSI (QP1) datagrams sent.
        ud_sent,
        /// UD and GSI datagrams delivered into receive WQEs (completed with success).
        ud_delivered,
        /// UD and GSI datagrams dropped for a Q_Key that is not the receiving QP's.
        ud_qkey_drops,
        /// UD and GSI datagrams dropped for want of a posted receive WQE (UD has no RNR).
        ud_no_receive_drops,
        /// RoCE multicast datagrams dropped because no QP of the function joined their group
        /// (ATTACH_TO_MCG).
        ud_mcast_no_group_drops,
        /// Multicast datagrams a QP sent and did not receive back because it blocks multicast
        /// loopback (`block_lb_mc`); the group's other QPs still got theirs.
        ud_mcast_loopback_blocked,
    }
}

counter_set! {
    /// Per-queue counters (send or receive queue, or RMP).
    QueueCounters, QueueCountersSnapshot {
        /// WQEs processed.
        wqes,
        /// Frames moved.
        frames,
        /// Bytes moved.
        bytes,
        /// Doorbells rung on this queue.
        doorbells,
        /// BlueFlame writes on this queue.
        bf_writes,
        /// CQEs written for this queue.
        cqes,
        /// Frames dropped for lack of a posted WQE.
        out_of_buffer,
        /// Error completions.
        errors,
        /// WQEs completed with a flush error CQE, their queue in error (`flush_in_error_en`).
        flushed,
    }
}

/// Kind of queue a [`QueueCounters`] set belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueueKind {
    /// Send queue.
    Sq,
    /// Receive queue.
    Rq,
    /// Shared receive memory pool.
    Rmp,
}

/// Per-queue counter sets, keyed by kind and queue number; kept after the queue is destroyed so
/// a test can read them afterwards (until the function is reset).
#[derive(Debug, Default)]
pub struct QueueCounterTable {
    /// Sorted by key. A function has tens of queues, and the packet path counts into the same
    /// few again and again (a send queue, then a receive queue): `recent` holds the indexes of
    /// the last sets used, most recent first, to save the search.
    sets: Vec<((QueueKind, u32), QueueCountersSnapshot)>,
    recent: [usize; RECENT_SETS],
}

/// Sets [`QueueCounterTable`] remembers.
const RECENT_SETS: usize = 4;

impl QueueCounterTable {
    /// Mutable counters of one queue, created on first use.
    #[inline]
    pub fn get_mut(&mut self, kind: QueueKind, number: u32) -> &mut QueueCountersSnapshot {
        // A burst counts into one queue's set many times over: the last set used, inline.
        let last = self.recent[0];
        if self
            .sets
            .get(last)
            .is_some_and(|(k, _)| *k == (kind, number))
        {
            return &mut self.sets[last].1;
        }
        self.get_mut_searched(kind, number)
    }

    /// [`QueueCounterTable::get_mut`] past the last set used.
    #[inline(never)]
    fn get_mut_searched(&mut self, kind: QueueKind, number: u32) -> &mut QueueCountersSnapshot {
        let key = (kind, number);
        let hit = self
            .recent
            .iter()
            .position(|&at| self.sets.get(at).is_some_and(|(k, _)| *k == key));
        let at = match hit {
            Some(place) => {
                let at = self.recent[place];
                self.recent[..=place].rotate_right(1);
                at
            }
            None => {
                let at = match self.sets.binary_search_by_key(&key, |(k, _)| *k) {
                    Ok(at) => at,
                    Err(at) => {
                        self.sets
                            .insert(at, (key, QueueCountersSnapshot::default()));
                        // Every index from `at` on moved.
                        self.recent = [usize::MAX; RECENT_SETS];
                        at
                    }
                };
                self.recent.rotate_right(1);
                self.recent[0] = at;
                at
            }
        };
        &mut self.sets[at].1
    }

    /// Counters of one queue, if it ever counted anything.
    pub fn get(&self, kind: QueueKind, number: u32) -> Option<QueueCountersSnapshot> {
        let at = self
            .sets
            .binary_search_by_key(&(kind, number), |(k, _)| *k)
            .ok()?;
        Some(self.sets[at].1)
    }

    /// Forgets every queue.
    pub fn clear(&mut self) {
        self.sets.clear();
        self.recent = [usize::MAX; RECENT_SETS];
    }
}

/// Reads a counter of the function's core.
#[inline]
pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Counts `frame` in the unicast, multicast or broadcast pair of `tx` (sent) or not (received),
/// by its destination MAC address.
#[inline]
pub(crate) fn count_cast(counters: &Counters, tx: bool, frame: &[u8]) {
    let broadcast = frame.len() >= 6 && frame[..6] == [0xff; 6];
    let multicast = !broadcast && frame.first().is_some_and(|b| b & 1 != 0);
    // RDMA traffic is counted apart: the Ethernet vport counters exclude it (mlx5e's
    // `rx_vport_unicast_packets` "excluding RDMA traffic"), mlx5_ib's port counters are it.
    if is_roce_v2(frame) {
        let (frames, bytes) = match (tx, multicast || broadcast) {
            (true, false) => (
                &counters.tx_rdma_unicast_frames,
                &counters.tx_rdma_unicast_bytes,
            ),
            (true, true) => (
                &counters.tx_rdma_multicast_frames,
                &counters.tx_rdma_multicast_bytes,
            ),
            (false, false) => (
                &counters.rx_rdma_unicast_frames,
                &counters.rx_rdma_unicast_bytes,
            ),
            (false, true) => (
                &counters.rx_rdma_multicast_frames,
                &counters.rx_rdma_multicast_bytes,
            ),
        };
        add(frames, 1);
        add(bytes, frame.len() as u64);
        return;
    }
    let (frames, bytes) = match (tx, broadcast, multicast) {
        (true, true, _) => (&counters.tx_broadcast_frames, &counters.tx_broadcast_bytes),
        (true, _, true) => (&counters.tx_multicast_frames, &counters.tx_multicast_bytes),
        (true, _, _) => (&counters.tx_unicast_frames, &counters.tx_unicast_bytes),
        (false, true, _) => (&counters.rx_broadcast_frames, &counters.rx_broadcast_bytes),
        (false, _, true) => (&counters.rx_multicast_frames, &counters.rx_multicast_bytes),
        (false, _, _) => (&counters.rx_unicast_frames, &counters.rx_unicast_bytes),
    };
    add(frames, 1);
    add(bytes, frame.len() as u64);
}

/// True when `frame` is RoCE v2: untagged IPv4 or IPv6 carrying UDP to port 4791.
fn is_roce_v2(frame: &[u8]) -> bool {
    let at = |i: usize| frame.get(i).copied().unwrap_or(0);
    let udp = match (at(12), at(13)) {
        (0x08, 0x00) if at(14) >> 4 == 4 && at(14 + 9) == 17 => 14 + usize::from(at(14) & 0x0f) * 4,
        (0x86, 0xdd) if at(14) >> 4 == 6 && at(14 + 6) == 17 => 14 + 40,
        _ => return false,
    };
    u16::from_be_bytes([at(udp + 2), at(udp + 3)]) == cxdirect_hw::roce::ROCE_V2_UDP_DPORT
        && frame.len() >= udp + 8
}

/// Adds `n` to a counter of the function's core. Every writer of these counters holds the
/// core lock, so a plain load and store loses nothing and costs no locked instruction (the
/// packet path counts a dozen times per frame); readers on other threads still see whole
/// values.
#[inline]
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// Adds `n` to a counter written without the core lock, from any thread (MMIO counts).
#[inline]
pub(crate) fn add_shared(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts land in their own queue's set whatever the order of use and of creation.
    #[test]
    fn queue_counters_land_in_their_own_set() {
        let mut table = QueueCounterTable::default();
        let keys: Vec<(QueueKind, u32)> = (0..40u32)
            .map(|i| {
                let kind = [QueueKind::Sq, QueueKind::Rq, QueueKind::Rmp][i as usize % 3];
                (kind, (i * 7919) % 97)
            })
            .collect();
        let mut expected = std::collections::BTreeMap::new();
        for round in 0..500usize {
            // Mostly the same few queues, now and then another one (created on first use).
            let key = if round % 9 == 0 {
                keys[(round / 9) % keys.len()]
            } else {
                keys[round % 3]
            };
            table.get_mut(key.0, key.1).wqes += 1;
            *expected.entry(key).or_insert(0u64) += 1;
        }
        for (key, count) in &expected {
            assert_eq!(
                table.get(key.0, key.1).map(|c| c.wqes),
                Some(*count),
                "{key:?}"
            );
        }
        assert_eq!(table.get(QueueKind::Sq, 1000), None);
        table.clear();
        assert_eq!(table.get(keys[0].0, keys[0].1), None);
        assert_eq!(table.get_mut(keys[0].0, keys[0].1).wqes, 0);
    }
}
