//! A frame sent from two places: its headers in a pool buffer (host memory the CPU wrote) and
//! its payload a stretch of other registered memory (a dmabuf) named by memory key and device
//! address. The WQE gathers both: the device reads the payload, the CPU never does. Only the
//! driver builds these (`crate::devmem_tcp`'s send path checks the stretch against the key it
//! registered), so a stretch reaches the ring only inside memory its key covers.

use crate::mem::Mbuf;

/// `len` bytes at device address `iova` under memory key `lkey` (a data segment's three
/// fields: mlx5's `struct mlx5_wqe_data_seg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyedStretch {
    /// The memory key (in the port's protection domain).
    pub lkey: u32,
    /// Device address of the first byte, inside the key.
    pub iova: u64,
    /// Bytes, at least 1.
    pub len: u32,
}

/// One frame: `headers` (Ethernet, IP and TCP, with the offloads its flags ask for) followed
/// on the wire by `payload`.
pub(crate) struct GatheredFrame {
    /// The frame's first bytes, in a pool buffer; kept in flight until the device sent them.
    pub headers: Mbuf,
    /// The rest of the frame.
    pub payload: KeyedStretch,
    /// Segmentation by the device (LSO) with this MSS, in TCP payload bytes per frame: the
    /// headers (Ethernet, IP, TCP, all of `headers`) go before each piece with the lengths,
    /// IPv4 identification, sequence number and flags rewritten (`None`: one frame).
    pub mss: Option<u16>,
}
