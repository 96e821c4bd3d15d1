//! AV-to-QP mappings (general objects of type AV_QP_MAPPING): a destination's address vector
//! tied to the QP whose congestion control settings apply towards it. The model runs no
//! congestion control algorithm, so a mapping changes no traffic; it is kept, queried back and
//! destroyed as a ConnectX keeps it.

/// One mapping, as CREATE_GENERAL_OBJECT gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AvQpMapping {
    /// The QP named (it existed when the mapping was made; destroying it later does not end
    /// the mapping, as rdma-core's `mlx5dv_map_ah_to_qp` documents).
    pub qpn: u32,
    /// Service level (Ethernet priority) of the address vector, 0..=15.
    pub sl: u8,
    /// Source GID index, within the port's RoCE address table.
    pub src_addr_index: u8,
    /// Destination GID, network order.
    pub rgid: [u8; 16],
}
