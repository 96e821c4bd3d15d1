//! Software steering (rdma-core's `mlx5dv_dr`, STE format v1 as a ConnectX-6 Dx reports it with
//! `steering_format_version` 1): the device side of the steering entries (STEs) the library
//! writes into ICM itself. A packet that reaches a software-owned flow table starts at the
//! table's `sw_owner_icm_root_0` and walks 64-byte entries: each compares a 16-byte projection
//! of the packet (its "tag" for the entry's lookup type) under the entry's bit mask, and goes on
//! at its hit address (a hash table, hashed over the packet's tag for the next lookup type) or
//! its miss address, collecting actions, until an address the device knows as a terminal (drop,
//! transmit to the wire, a TIR, another table's root).
//!
//! Rooms: [`hash`] (the CRC-32 index rdma-core computes), [`entry`] (one entry's decode),
//! [`action`] (its action words), [`lookup`] (the packet's tag per lookup type), [`definer`]
//! (its tag through a match definer), [`walk`],
//! [`terminals`] (the addresses the device answers for: drop, allow, TIRs, firmware tables),
//! [`rewrite`] and [`modify`] (what the actions do to the frame), [`decide`] (a walk and its
//! actions), [`receive`] (a received frame at a software-owned table, for `crate::steering`)
//! and [`transmit`] (a sent one, for `crate::transmit_steering`).
//! Nothing here owns ICM: entries are read from the function's SW ICM store through
//! [`IcmRead`].
//!
//! Sources: rdma-core `providers/mlx5/dr_ste_v1.c`, `dr_ste_v1.h`, `dr_ste.c`, `dr_ste.h`,
//! `dr_crc32.c`, `dr_action.c`, `dr_matcher.c` and `mlx5_ifc.h` (`ste_*_v1` layouts). No manual
//! text describes how the device walks entries: the match rule, the hashing on the packet side,
//! `counter_id` 0 meaning "no counter" and the terminal recognition by address are inferred
//! from the entries rdma-core writes.

pub(crate) mod action;
pub(crate) mod decide;
pub(crate) mod definer;
pub(crate) mod entry;
pub(crate) mod hash;
pub(crate) mod lookup;
pub(crate) mod modify;
pub(crate) mod receive;
pub(crate) mod rewrite;
pub(crate) mod terminals;
pub(crate) mod transmit;
pub(crate) mod walk;

use crate::function::Core;
use crate::objects::icm::IcmStore;
use crate::objects::{MatchDefiner, PacketReformat, Table};
use cxdirect_hw::caps::FlowTableNicCap;
use cxdirect_hw::flow::{FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};

/// Bytes of one steering entry; entry and terminal addresses are multiples of it.
pub(crate) const ENTRY_BYTES: u64 = STE_SIZE as u64;

/// Whether the function offers software-owned NIC tables of `table_type` (receive or
/// transmit): `sw_owner_v2` in that direction's table properties, with
/// `EmuConfig::sw_steering`.
pub(crate) fn tables_offered(core: &Core, table_type: u8) -> bool {
    core.icm.is_some()
        && FlowTableNicCap::new(&core.hca.caps.flow_table[..]).is_ok_and(|f| match table_type {
            FLOW_TABLE_TYPE_NIC_RX => f.flow_table_properties_nic_receive().sw_owner_v2(),
            FLOW_TABLE_TYPE_NIC_TX => f.flow_table_properties_nic_transmit().sw_owner_v2(),
            _ => false,
        })
}

/// What the walk reads of the function: its steering entries and modify lists from its ICM
/// store (none without one), its packet reformat contexts and its match definers.
pub(crate) fn icm_reader(core: &Core) -> impl IcmRead + '_ {
    FunctionIcm {
        icm: core.icm.as_ref(),
        reformats: &core.res.reformats,
        definers: &core.res.definers,
    }
}

/// The ICM store of a function, if it has one, its reformat contexts and its definers.
struct FunctionIcm<'a> {
    icm: Option<&'a IcmStore>,
    reformats: &'a Table<PacketReformat>,
    definers: &'a Table<MatchDefiner>,
}

impl IcmRead for FunctionIcm<'_> {
    fn read_entry(&self, icm_addr: u64) -> Option<[u8; STE_SIZE]> {
        self.icm?.read_entry(icm_addr).ok()
    }

    fn reformat(&self, id: u32) -> Option<(u8, &[u8])> {
        self.reformats
            .get(id)
            .map(|r| (r.reformat_type, &r.data[..]))
    }

    fn definer(&self, index: u16) -> Option<MatchDefiner> {
        self.definers.get(u32::from(index)).copied()
    }
}

use entry::STE_SIZE;

/// Reads 64-byte steering entries (and modify lists) out of ICM, and the packet reformat
/// contexts INSERT_POINTER actions name.
pub(crate) trait IcmRead {
    /// The entry at `icm_addr` (an absolute ICM address, 64-byte aligned), or `None` when the
    /// address lies outside the steering ICM or is not backed.
    fn read_entry(&self, icm_addr: u64) -> Option<[u8; STE_SIZE]>;

    /// The type (`REFORMAT_TYPE_*`) and data of packet reformat context `id`, if it exists.
    fn reformat(&self, _id: u32) -> Option<(u8, &[u8])> {
        None
    }

    /// Match definer `index` (an entry's 8-bit definer index), if it exists.
    fn definer(&self, _index: u16) -> Option<MatchDefiner> {
        None
    }
}

#[cfg(test)]
mod tests;
