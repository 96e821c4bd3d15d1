//! Striding (multi-packet) receive queues ([`crate::PortConfig::rx_striding`]): each receive
//! WQE posts one large buffer cut into strides, the device puts packet after packet into it,
//! and each packet comes out as an [`Mbuf`] pointing into that buffer, with no copy. The
//! buffer goes back to its pool when the ring is done with it and the last of its packets is
//! dropped: the ring holds [`RING_HOLD`] references on a posted buffer and each packet one.
//!
//! Nothing the device writes is trusted: a completion must name the stride where the previous
//! one ended, take at least one stride and no more than the WQE has left, and a packet must
//! fit the strides it took. The queue's own count of taken strides decides which buffer and
//! offset a packet has, never the device's.

use crate::error::DriverError;
use crate::mem::{PoolShared, RING_HOLD};
use crate::ring::words_from_bytes;
use cxdirect_dma::DmaRegion;
use cxdirect_hw::wq::striding::{
    LOG_STRIDES_BASE, LOG_STRIDE_BYTES_BASE, MAX_LOG_STRIDES, MAX_LOG_STRIDE_BYTES, WQE_HEADER,
};

/// Bytes of one striding receive WQE: a reserved header and one data segment.
pub(crate) const WQE_BYTES: usize = 32;

/// Geometry of striding receive queues ([`crate::PortConfig::rx_striding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxStriding {
    /// Log2 of the strides in one WQE's buffer (9..=16: 512..65,536 strides).
    pub log_strides: u8,
    /// Log2 of the stride size in bytes (6..=13: 64..8,192 bytes). A packet takes as many
    /// whole strides as it needs, so small strides pack small packets densely.
    pub log_stride_bytes: u8,
    /// WQEs (buffers) posted per receive queue: a power of two, 2..=1024. The queue's CQ has
    /// one entry per stride of the ring (`ring_wqes << log_strides`), which must not pass the
    /// device's `log_max_cq_sz` (2^22 on the model).
    pub ring_wqes: u32,
    /// Buffers of one WQE each in the port's striding pool: at least twice the receive
    /// queues' `ring_wqes` in all, since a buffer stays out until its last packet is dropped.
    pub buffers: u32,
}

impl Default for RxStriding {
    /// 512 strides of 64 bytes (32 KiB per WQE, up to 512 small packets each), 8 WQEs per
    /// queue, 64 buffers (2 MiB).
    fn default() -> Self {
        Self {
            log_strides: LOG_STRIDES_BASE,
            log_stride_bytes: LOG_STRIDE_BYTES_BASE,
            ring_wqes: 8,
            buffers: 64,
        }
    }
}

impl RxStriding {
    /// Bytes of one WQE's buffer.
    pub fn buffer_bytes(&self) -> u32 {
        1 << (self.log_strides + self.log_stride_bytes)
    }

    /// Checks the geometry for `rx_queues` queues on a device whose CQs hold at most
    /// `2^log_max_cq_size` entries.
    pub(crate) fn validate(&self, rx_queues: u16, log_max_cq_size: u8) -> Result<(), DriverError> {
        if !(LOG_STRIDES_BASE..=MAX_LOG_STRIDES).contains(&self.log_strides)
            || !(LOG_STRIDE_BYTES_BASE..=MAX_LOG_STRIDE_BYTES).contains(&self.log_stride_bytes)
        {
            return Err(DriverError::Invalid(format!(
                "rx_striding: 2^{} strides of 2^{} bytes; give log_strides 9..=16 and \
                 log_stride_bytes 6..=13",
                self.log_strides, self.log_stride_bytes
            )));
        }
        if !self.ring_wqes.is_power_of_two() || !(2..=1024).contains(&self.ring_wqes) {
            return Err(DriverError::Invalid(format!(
                "rx_striding: ring_wqes {}; give a power of two from 2 to 1024",
                self.ring_wqes
            )));
        }
        // Each stride of the ring may complete on its own, so the CQ needs one entry per stride.
        let cq_entries = u64::from(self.ring_wqes) << self.log_strides;
        if cq_entries > 1u64 << log_max_cq_size {
            return Err(DriverError::Invalid(format!(
                "rx_striding: ring_wqes {} of 2^{} strides need a CQ of {cq_entries} entries, \
                 more than the device's 2^{log_max_cq_size}; give fewer ring_wqes or log_strides",
                self.ring_wqes, self.log_strides
            )));
        }
        let posted = self.ring_wqes * u32::from(rx_queues);
        if self.buffers < 2 * posted {
            return Err(DriverError::Invalid(format!(
                "rx_striding: {} buffers is fewer than twice the {posted} the receive queues \
                 post; give at least {}",
                self.buffers,
                2 * posted
            )));
        }
        Ok(())
    }

    /// Completions one ring can have outstanding: every stride a packet of its own.
    pub(crate) fn cq_entries(&self) -> u32 {
        self.ring_wqes << self.log_strides
    }
}

/// A striding receive queue's geometry and its place in the oldest posted WQE.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StridingRx {
    pub log_strides: u8,
    pub log_stride_bytes: u8,
    /// Strides of the oldest posted WQE already completed.
    pub used: u32,
    /// Packets handed out from the oldest posted WQE whose references its buffer does not
    /// count yet (they are added once per burst).
    pub pending: u32,
}

impl StridingRx {
    pub(crate) fn new(geometry: &RxStriding) -> Self {
        Self {
            log_strides: geometry.log_strides,
            log_stride_bytes: geometry.log_stride_bytes,
            used: 0,
            pending: 0,
        }
    }

    pub(super) fn strides(&self) -> u32 {
        1 << self.log_strides
    }

    /// Writes the WQE at ring `slot` posting the buffer at `index` of `pool` (keyed `lkey`),
    /// on which the ring now holds [`RING_HOLD`] references.
    #[inline]
    pub(crate) fn post(
        &self,
        ring: &DmaRegion,
        pool: &PoolShared,
        slot: usize,
        index: u32,
        lkey: u32,
    ) {
        pool.set_references(index, RING_HOLD);
        let bytes = 1u32 << (self.log_strides + self.log_stride_bytes);
        let mut wqe = [0u8; WQE_BYTES];
        wqe[WQE_HEADER..].copy_from_slice(&cxdirect_hw::wqe::encode_data(
            bytes,
            lkey,
            pool.iova(index),
        ));
        let _ = ring.write_words::<4>(slot * WQE_BYTES, &words_from_bytes(&wqe));
    }
}
