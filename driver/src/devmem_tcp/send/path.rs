//! Transmits as frames on a send queue: the Ethernet, IP and TCP headers written into a pool
//! buffer (host memory), the payload named by memory key, device address and length in the
//! registered dmabuf, and both gathered by one WQE (`crate::tx::GatheredFrame`); a transmit
//! longer than the MSS goes as one LSO WQE, the device cutting it into segments. The TCP
//! checksum covers payload the CPU never reads, so the device computes it (the L4 checksum
//! offload, as Linux's devmem TX requires of a device: no software checksum fallback for
//! unreadable frags), and the IPv4 header checksum too (LSO rewrites the header per segment).

use super::error::TcpTxError;
use super::types::Transmit;
use crate::backend::Backend;
use crate::control::MemoryKey;
use crate::devmem_tcp::reply::{write_reply, Endpoints, MAX_REPLY_FRAME};
use crate::mem::{Mbuf, Mempool};
use crate::net::checksum::Checksum;
use crate::tx::{GatheredFrame, KeyedStretch, TxQueue};
use std::net::IpAddr;

/// Dmabuf memory registered for sending: the memory key's lkey, start address and length
/// (a key made with [`MemoryKey::register`] over the dmabuf mapping, with read access, in the
/// protection domain of the port's send queues).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendMemory {
    lkey: u32,
    start: u64,
    len: u64,
}

impl SendMemory {
    /// The memory `key` covers: dmabuf offsets `0..key.len()`.
    pub fn new(key: &MemoryKey) -> Self {
        Self {
            lkey: key.lkey(),
            start: key.start(),
            len: key.len(),
        }
    }

    /// Bytes registered.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The data segment for `len` bytes at dmabuf offset `offset`.
    fn stretch(&self, offset: u64, len: u32) -> Result<KeyedStretch, TcpTxError> {
        let inside = offset
            .checked_add(u64::from(len))
            .is_some_and(|end| end <= self.len);
        if !inside || len == 0 {
            return Err(TcpTxError::OutsideMemory {
                offset,
                len: len.into(),
                size: self.len,
            });
        }
        Ok(KeyedStretch {
            lkey: self.lkey,
            iova: self.start + offset,
            len,
        })
    }
}

/// Counters of a [`DevmemTx`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Frames with payload queued for the device (headers host, payload gathered by key).
    pub data_frames: u64,
    /// Payload bytes the device was asked to gather from the dmabuf.
    pub gathered_bytes: u64,
    /// Of `data_frames`, those the device segments (LSO).
    pub lso_frames: u64,
    /// Frames without payload (SYN, ACK, FIN).
    pub control_frames: u64,
    /// Header bytes the CPU wrote.
    pub header_bytes: u64,
    /// Transmits dropped because the pool had no buffer (the sender's timers send them again).
    pub no_buffer: u64,
}

/// Frames for one connection's [`Transmit`]s, posted on a send queue.
pub struct DevmemTx {
    pool: Mempool,
    memory: SendMemory,
    ends: Endpoints,
    control: Vec<Mbuf>,
    data: Vec<GatheredFrame>,
    stats: PathStats,
}

impl DevmemTx {
    /// Frames from `ends.local` to `ends.peer`, headers in buffers of `pool` (the port's pool,
    /// registered with the device), payload from `memory`; room for `capacity` frames waiting
    /// for the ring without allocating.
    pub fn new(pool: Mempool, memory: SendMemory, ends: Endpoints, capacity: usize) -> Self {
        Self {
            pool,
            memory,
            ends,
            control: Vec::with_capacity(capacity),
            data: Vec::with_capacity(capacity),
            stats: PathStats::default(),
        }
    }

    /// Builds the frame for `t` and queues it for [`DevmemTx::flush`].
    ///
    /// # Errors
    ///
    /// [`TcpTxError::OutsideMemory`] for a payload outside the registered memory;
    /// [`TcpTxError::Frame`] when the headers cannot be written or the pool is empty (the
    /// transmit is dropped, as a wire would, and counted).
    pub fn push(&mut self, t: &Transmit) -> Result<(), TcpTxError> {
        let stretch = if t.len > 0 {
            Some(self.memory.stretch(t.offset, t.len)?)
        } else {
            None
        };
        let mut buf = [0u8; MAX_REPLY_FRAME];
        let n = write_reply(&t.header, &self.ends, t.tsval, &mut buf).map_err(|_| {
            TcpTxError::Frame {
                why: "headers not written",
            }
        })?;
        if stretch.is_some() {
            add_payload_length(&mut buf[..n], t.len, self.ends.local_ip)?;
        }
        let Some(mut m) = self.pool.alloc() else {
            self.stats.no_buffer += 1;
            return Err(TcpTxError::Frame {
                why: "no pool buffer",
            });
        };
        m.set_data(&buf[..n]).map_err(|_| TcpTxError::Frame {
            why: "pool buffer too small",
        })?;
        self.stats.header_bytes += n as u64;
        match stretch {
            Some(payload) => {
                // Both checksums by the device, as mlx5e asks for a CHECKSUM_PARTIAL skb
                // (`mlx5e_txwqe_build_eseg_csum`): with LSO the device rewrites each segment's
                // IP length and identification, so the IPv4 header sum must be its own too.
                m.flags.tx_ip_csum = matches!(self.ends.local_ip, IpAddr::V4(_));
                m.flags.tx_l4_csum = true;
                let mss = (t.len > u32::from(t.mss)).then_some(t.mss);
                self.stats.data_frames += 1;
                self.stats.lso_frames += u64::from(mss.is_some());
                self.stats.gathered_bytes += u64::from(t.len);
                self.data.push(GatheredFrame {
                    headers: m,
                    payload,
                    mss,
                });
            }
            None => {
                self.stats.control_frames += 1;
                self.control.push(m);
            }
        }
        Ok(())
    }

    /// Posts what is queued on `tx` (control frames first); returns the frames still waiting
    /// for room in the ring.
    pub fn flush<B: Backend>(&mut self, tx: &mut TxQueue<B>) -> usize {
        while !self.control.is_empty() && tx.tx_burst(&mut self.control) > 0 {}
        while !self.data.is_empty() && tx.tx_burst_gathered(&mut self.data) > 0 {}
        self.control.len() + self.data.len()
    }

    /// Frames waiting for the ring.
    pub fn waiting(&self) -> usize {
        self.control.len() + self.data.len()
    }

    /// Counters.
    pub fn stats(&self) -> PathStats {
        self.stats
    }
}

/// Makes the IP length of header frame `f` (written for no payload) count `len` payload
/// bytes after it, with the IPv4 header checksum again and the TCP checksum zeroed for the
/// device to compute over the whole segment.
fn add_payload_length(f: &mut [u8], len: u32, version: IpAddr) -> Result<(), TcpTxError> {
    let too_long = TcpTxError::Frame {
        why: "IP length past 65535",
    };
    let (ip_len, length_at) = match version {
        IpAddr::V4(_) => (20, 14 + 2),
        IpAddr::V6(_) => (40, 14 + 4),
    };
    let old = u16::from_be_bytes([f[length_at], f[length_at + 1]]);
    let new = u16::try_from(u32::from(old) + len).map_err(|_| too_long)?;
    f[length_at..length_at + 2].copy_from_slice(&new.to_be_bytes());
    if ip_len == 20 {
        f[24..26].fill(0);
        let mut c = Checksum::new();
        c.add(&f[14..34]);
        f[24..26].copy_from_slice(&c.finish().to_be_bytes());
    }
    let check = 14 + ip_len + 16;
    f[check..check + 2].fill(0);
    Ok(())
}
