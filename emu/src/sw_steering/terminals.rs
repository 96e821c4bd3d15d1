//! The ICM addresses the device itself answers for in software steering: where an entry's hit
//! or miss address ends a walk. rdma-core learns them from the device and writes them into its
//! entries as they are: the receive drop, transmit drop and transmit allow addresses from the
//! NIC flow table capabilities (`dr_devx_query_device`), and each TIR's address from
//! CREATE_TIR's output, which mlx5_ib hands to libmlx5 as a raw packet QP's `tir_icm_addr`
//! (`create_raw_packet_qp`) and DEVX users read themselves (`rx_icm_addr`, dr_action.c); and
//! each flow sampler's and flow meter's address from QUERY_GENERAL_OBJECT
//! (`dr_devx_query_flow_sampler`, `dr_devx_query_meter`).
//!
//! The model's choice of place: a window of its own above the SW ICM ranges and below
//! 2^40, since entries keep only bits 39:0 of an address (`dr_ste_v1_set_hit_addr`,
//! `dr_ste_v1_set_miss_addr`). Every address is a whole 64-byte entry, as rdma-core writes
//! terminals with a one-entry table size.

use super::walk::Terminals;
use crate::function::Core;
use cxdirect_hw::flow::{FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};

/// First address of the terminal window.
const WINDOW: u64 = 0x00f0_0000_0000;
/// The receive drop address (`sw_steering_nic_rx_action_drop_icm_address`): the receive
/// domain's default and its drop action.
pub(crate) const RX_DROP: u64 = WINDOW;
/// The transmit drop address (`sw_steering_nic_tx_action_drop_icm_address`).
pub(crate) const TX_DROP: u64 = WINDOW + 0x40;
/// The transmit allow address (`sw_steering_nic_tx_action_allow_icm_address`): on to the
/// wire; the transmit domain's default.
pub(crate) const TX_ALLOW: u64 = WINDOW + 0x80;
/// First TIR address: TIR `n` answers at `TIRS + 64 n` (TIR numbers are 24 bits, so the TIRs
/// take 1 GiB of addresses, all below 2^40).
const TIRS: u64 = WINDOW + (1 << 32);
/// First firmware table address: table `n` answers at `TABLES + 64 n`, the next 1 GiB.
const TABLES: u64 = TIRS + (1 << 30);
/// First flow sampler address: sampler `n` answers at `SAMPLERS + 64 n`, the next 1 GiB.
const SAMPLERS: u64 = TABLES + (1 << 30);
/// First flow meter address: meter `n` answers at `METERS + 64 n`, the next 1 GiB.
const METERS: u64 = SAMPLERS + (1 << 30);
/// End of the window.
const END: u64 = METERS + (1 << 30);

/// The ICM address of TIR `tirn` (CREATE_TIR's `icm_address`).
pub(crate) fn tir_address(tirn: u32) -> u64 {
    TIRS + (u64::from(tirn & 0x00ff_ffff) << 6)
}

/// The ICM address of firmware flow table `id` (QUERY_FLOW_TABLE's `sw_owner_icm_root_0`):
/// an entry hitting it hands the packet on to that table's groups and entries.
pub(crate) fn table_address(id: u32) -> u64 {
    TABLES + (u64::from(id & 0x00ff_ffff) << 6)
}

/// The ICM address of flow sampler `id` (QUERY_GENERAL_OBJECT's
/// `sw_steering_icm_address_rx` and `_tx`): an entry hitting it hands the packet to the
/// sampler, which sends it on to its default table and copies one in `sample_ratio` to its
/// sample table.
pub(crate) fn sampler_address(id: u32) -> u64 {
    SAMPLERS + (u64::from(id & 0x00ff_ffff) << 6)
}

/// The ICM address of flow meter `id` (QUERY_GENERAL_OBJECT's `sw_steering_icm_address_rx`
/// and `_tx`, the same both ways): an entry hitting it hands the packet to the meter, which
/// colors it and sends it on to its destination table.
pub(crate) fn meter_address(id: u32) -> u64 {
    METERS + (u64::from(id & 0x00ff_ffff) << 6)
}

/// The flow meter answering at `addr` (in the meters' part of the window), if it exists and
/// its destination table is of `table_type`.
fn meter_at(core: &Core, addr: u64, table_type: u8) -> Option<u32> {
    if !(METERS..END).contains(&addr) || addr % 64 != 0 {
        return None;
    }
    let id = ((addr - METERS) >> 6) as u32;
    core.res
        .meters
        .get(id)
        .filter(|m| m.table_type == table_type)
        .map(|_| id)
}

/// Where a walk on the receive side ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReceiveTerminal {
    /// Dropped: the drop address, a transmit terminal (meaningless on receive), or a TIR, flow
    /// sampler or flow meter that no longer exists (or a meter of the other direction).
    Drop,
    /// To this TIR.
    Tir(u32),
    /// On to this firmware flow table.
    Table(u32),
    /// To this flow sampler.
    Sampler(u32),
    /// To this flow meter.
    Meter(u32),
}

/// The function's terminals as a receive walk sees them.
pub(crate) struct ReceiveTerminals<'a> {
    pub(crate) core: &'a Core,
}

impl Terminals for ReceiveTerminals<'_> {
    type Terminal = ReceiveTerminal;

    fn terminal(&self, addr: u64) -> Option<ReceiveTerminal> {
        match addr {
            RX_DROP | TX_DROP | TX_ALLOW => Some(ReceiveTerminal::Drop),
            a if (TIRS..TABLES).contains(&a) && a % 64 == 0 => {
                let tirn = ((a - TIRS) >> 6) as u32;
                Some(if self.core.res.tirs.contains(tirn) {
                    ReceiveTerminal::Tir(tirn)
                } else {
                    ReceiveTerminal::Drop
                })
            }
            a if (TABLES..SAMPLERS).contains(&a) && a % 64 == 0 => {
                Some(match firmware_table(self.core, a, FLOW_TABLE_TYPE_NIC_RX) {
                    Some(id) => ReceiveTerminal::Table(id),
                    None => ReceiveTerminal::Drop,
                })
            }
            a if (METERS..END).contains(&a) => Some(
                meter_at(self.core, a, FLOW_TABLE_TYPE_NIC_RX)
                    .map_or(ReceiveTerminal::Drop, ReceiveTerminal::Meter),
            ),
            a if (SAMPLERS..METERS).contains(&a) && a % 64 == 0 => {
                let id = ((a - SAMPLERS) >> 6) as u32;
                Some(if self.core.res.samplers.contains(id) {
                    ReceiveTerminal::Sampler(id)
                } else {
                    ReceiveTerminal::Drop
                })
            }
            // Anything else in the window answers as a drop.
            a if (WINDOW..END).contains(&a) => Some(ReceiveTerminal::Drop),
            _ => None,
        }
    }
}

/// The firmware table of `table_type` answering at `addr` (in the tables' part of the window),
/// if it exists and is firmware-owned.
fn firmware_table(core: &Core, addr: u64, table_type: u8) -> Option<u32> {
    let id = ((addr - TABLES) >> 6) as u32;
    core.res
        .flow_tables
        .get(id)
        .filter(|t| t.sw_root.is_none() && t.table_type == table_type)
        .map(|_| id)
}

/// Where a walk on the transmit side ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransmitTerminal {
    /// Out: the allow address (the transmit domain's default and rdma-core's default-miss
    /// action).
    Allow,
    /// Dropped: the drop addresses, a TIR (meaningless on transmit), a table of the other
    /// direction or one that no longer exists, a flow sampler (the model samples on receive
    /// only), a flow meter whose destination is a receive table or that no longer exists.
    Drop,
    /// On to this firmware transmit table.
    Table(u32),
    /// To this flow meter.
    Meter(u32),
}

/// The function's terminals as a transmit walk sees them.
pub(crate) struct TransmitTerminals<'a> {
    pub(crate) core: &'a Core,
}

impl Terminals for TransmitTerminals<'_> {
    type Terminal = TransmitTerminal;

    fn terminal(&self, addr: u64) -> Option<TransmitTerminal> {
        match addr {
            TX_ALLOW => Some(TransmitTerminal::Allow),
            a if (METERS..END).contains(&a) => Some(
                meter_at(self.core, a, FLOW_TABLE_TYPE_NIC_TX)
                    .map_or(TransmitTerminal::Drop, TransmitTerminal::Meter),
            ),
            a if (TABLES..SAMPLERS).contains(&a) && a % 64 == 0 => {
                Some(match firmware_table(self.core, a, FLOW_TABLE_TYPE_NIC_TX) {
                    Some(id) => TransmitTerminal::Table(id),
                    None => TransmitTerminal::Drop,
                })
            }
            a if (WINDOW..END).contains(&a) => Some(TransmitTerminal::Drop),
            _ => None,
        }
    }
}
