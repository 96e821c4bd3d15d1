//! rdma_cm's private-data header of a REQ (`struct cma_hdr`, `cma.c`).

use cxdirect_hw::cm as hw;
use std::net::Ipv4Addr;
use thiserror::Error;

/// rdma_cm's IP header at the start of a REQ's private data (`struct cma_hdr`, `cma.c`), IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The active side's address.
    pub src_ip: Ipv4Addr,
    /// The passive side's address.
    pub dst_ip: Ipv4Addr,
    /// The active side's port.
    pub src_port: u16,
}

/// Bytes of [`CmaHeader`] on the wire.
pub const CMA_HDR_SIZE: usize = 36;

/// Why a REQ's private data is not an rdma_cm IPv4 header (`cma.c: cma_save_ip_info` /
/// `cma_get_ip_ver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CmaError {
    /// `cma_version` other than 0.
    #[error("cma_hdr version {0}, not 0")]
    Version(u8),
    /// Shorter than the 36-byte header.
    #[error("cma_hdr needs 36 bytes, got {0}")]
    Short(usize),
    /// IP version other than 4 (6 is valid for rdma_cm, but this CM speaks IPv4 only).
    #[error("cma_hdr IP version {0}, not 4")]
    IpVersion(u8),
}

impl CmaHeader {
    /// Writes the 36 bytes as `cma_format_hdr` does for AF_INET: version 0, `ip_version`
    /// 0x40, the source port, and each address after 12 zero bytes.
    pub fn encode(&self) -> [u8; CMA_HDR_SIZE] {
        let mut b = [0u8; CMA_HDR_SIZE];
        if let Ok(mut h) = hw::CmaHdr::new(&mut b[..]) {
            h.set_cma_version(hw::CMA_VERSION)
                .set_ip_version(4)
                .set_port(self.src_port)
                .set_src_addr_ip4(u32::from(self.src_ip))
                .set_dst_addr_ip4(u32::from(self.dst_ip));
        }
        b
    }

    /// Reads the header from the start of a REQ's private data.
    pub fn decode(pd: &[u8]) -> Result<Self, CmaError> {
        let h = hw::CmaHdr::new(pd).map_err(|_| CmaError::Short(pd.len()))?;
        if h.cma_version() != hw::CMA_VERSION {
            return Err(CmaError::Version(h.cma_version()));
        }
        if h.ip_version() != 4 {
            return Err(CmaError::IpVersion(h.ip_version()));
        }
        Ok(Self {
            src_ip: Ipv4Addr::from(h.src_addr_ip4()),
            dst_ip: Ipv4Addr::from(h.dst_addr_ip4()),
            src_port: h.port(),
        })
    }
}
