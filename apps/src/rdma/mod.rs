//! What the RDMA programs (krping, rdma-perf) share: the advertisement of a registered buffer
//! as krping and rping put it on the wire, the endpoint line two processes trade over TCP before
//! they connect their queue pairs (as `ibv_rc_pingpong` does), and the kinds of memory a
//! program registers.

pub mod cm_link;
pub mod endpoint;
pub mod host;
pub mod port_address;
pub mod served_address;
pub mod verbs;

/// The value of `key=` in a report line such as `address: ... arp_requests=1 ...` (tests read
/// the programs' counters through it).
#[cfg(test)]
pub(crate) fn report_field<'a>(line: &'a str, key: &str) -> &'a str {
    let at = line
        .find(&format!(" {key}="))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    let rest = &line[at + key.len() + 2..];
    rest.split(' ').next().unwrap_or("")
}

/// The number `key=` holds in a report line.
#[cfg(test)]
pub(crate) fn report_count(line: &str, key: &str) -> u64 {
    report_field(line, key)
        .parse()
        .unwrap_or_else(|_| panic!("{key} in {line}"))
}

use clap::ValueEnum;
use cxdirect::rdma::RemoteAddr;

/// Bytes of a [`BufferInfo`] on the wire.
pub const BUFFER_INFO_LEN: usize = 16;

/// A registered buffer as a peer addresses it: krping's and rping's `rdma_info`
/// `{u64 buf; u32 rkey; u32 size}`, sent big-endian in a SEND.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BufferInfo {
    /// The buffer's address in the owner's memory region (the IOVA an RDMA READ or WRITE names).
    pub addr: u64,
    /// The remote key the owner registered the buffer with.
    pub rkey: u32,
    /// The buffer's length in bytes.
    pub size: u32,
}

impl BufferInfo {
    /// The 16 bytes a SEND carries: address, rkey and size, each big-endian.
    pub fn to_wire(self) -> [u8; BUFFER_INFO_LEN] {
        let mut out = [0u8; BUFFER_INFO_LEN];
        out[..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        out[12..].copy_from_slice(&self.size.to_be_bytes());
        out
    }

    /// Reads an advertisement from a received message; `None` unless it is exactly
    /// [`BUFFER_INFO_LEN`] bytes (a peer's message is checked before its fields are used).
    pub fn from_wire(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; BUFFER_INFO_LEN] = bytes.try_into().ok()?;
        let (addr, rest) = bytes.split_at(8);
        let (rkey, size) = rest.split_at(4);
        Some(Self {
            addr: u64::from_be_bytes(addr.try_into().ok()?),
            rkey: u32::from_be_bytes(rkey.try_into().ok()?),
            size: u32::from_be_bytes(size.try_into().ok()?),
        })
    }

    /// The buffer as the target of an RDMA READ or WRITE: its start and rkey.
    pub fn remote(self) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr,
            rkey: self.rkey,
        }
    }

    /// Whether `len` bytes from `offset` lie inside the buffer.
    pub fn covers(self, offset: u64, len: u64) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= u64::from(self.size))
    }
}

/// The memory a program registers for RDMA: a program's `--memory`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Anonymous host memory the driver allocates and maps.
    Host,
    /// A memfd, imported as a dmabuf-like file.
    Memfd,
    /// A udmabuf over a memfd.
    Udmabuf,
    /// GPU memory through CUDA, exported as a dmabuf.
    Cuda,
}

impl MemoryKind {
    /// The name `--memory` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Memfd => "memfd",
            Self::Udmabuf => "udmabuf",
            Self::Cuda => "cuda",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_info_is_big_endian_on_the_wire() {
        let info = BufferInfo {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 65,
        };
        let wire = info.to_wire();
        assert_eq!(
            wire,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 65]
        );
        assert_eq!(BufferInfo::from_wire(&wire), Some(info));
    }

    #[test]
    fn a_message_of_another_length_is_no_buffer_info() {
        assert_eq!(BufferInfo::from_wire(&[0u8; 15]), None);
        assert_eq!(BufferInfo::from_wire(&[0u8; 17]), None);
        assert_eq!(BufferInfo::from_wire(&[]), None);
    }

    #[test]
    fn covers_checks_the_range_without_overflow() {
        let info = BufferInfo {
            addr: 0x1000,
            rkey: 1,
            size: 100,
        };
        assert!(info.covers(0, 100));
        assert!(info.covers(99, 1));
        assert!(!info.covers(99, 2));
        assert!(!info.covers(u64::MAX, 2));
    }
}
