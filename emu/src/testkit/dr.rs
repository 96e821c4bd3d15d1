//! A software steering domain as rdma-core's `mlx5dv_dr` sets one up on a ConnectX-6 Dx, for
//! the tests of the entries it writes: the capabilities `dr_devx_query_device` and
//! `dr_domain_caps_init` read, 1 MiB of steering ICM and 64 KiB of header-modify ICM (SW_ICM
//! objects at each range's start, with their keys), dr_send.c's self-connected ring, and the
//! software-owned tables `dr_devx_create_flow_table` creates.

use super::plug::Plug;
use super::ste::Builder;
use super::sw_icm::{create, icm_key, ranges, self_connected_ring, write_then_read, Ring};
use super::{CmdFail, Host};
use cxdirect_hw::caps::{CmdHcaCap, FlowTableNicCap};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::flow;
use cxdirect_hw::hca::cap_type;

/// What `dr_devx_query_device` reads: the entry format, each direction's `sw_owner_v2`,
/// `max_ft_level`, and the terminal addresses.
#[derive(Debug, Clone, Copy)]
pub struct DrCaps {
    /// `steering_format_version`.
    pub format: u8,
    /// The receive tables' `sw_owner_v2`.
    pub rx_sw_owner_v2: bool,
    /// The transmit tables' `sw_owner_v2`.
    pub tx_sw_owner_v2: bool,
    /// The receive tables' `max_ft_level`.
    pub max_ft_level: u8,
    /// `sw_steering_nic_rx_action_drop_icm_address`.
    pub rx_drop: u64,
    /// `sw_steering_nic_tx_action_drop_icm_address`.
    pub tx_drop: u64,
    /// `sw_steering_nic_tx_action_allow_icm_address`.
    pub tx_allow: u64,
    /// `match_definer_format_supported` (rdma-core's `definer_format_sup`).
    pub definer_formats: u64,
}

/// Reads [`DrCaps`] from the current general and flow table pages.
pub fn dr_caps(h: &mut Host) -> DrCaps {
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let general = CmdHcaCap::new(&general[0x10..]).expect("layout");
    let (format, definer_formats) = (
        general.steering_format_version(),
        general.match_definer_format_supported(),
    );
    let page = h.query_cap(cap_type::FLOW_TABLE, true);
    let f = FlowTableNicCap::new(&page[0x10..]).expect("layout");
    DrCaps {
        format,
        rx_sw_owner_v2: f.flow_table_properties_nic_receive().sw_owner_v2(),
        tx_sw_owner_v2: f.flow_table_properties_nic_transmit().sw_owner_v2(),
        max_ft_level: f.flow_table_properties_nic_receive().max_ft_level(),
        rx_drop: f.sw_steering_nic_rx_action_drop_icm_address(),
        tx_drop: f.sw_steering_nic_tx_action_drop_icm_address(),
        tx_allow: f.sw_steering_nic_tx_action_allow_icm_address(),
        definer_formats,
    }
}

/// A domain's ICM: steering entries from `base`, modify lists from `modify_base`.
pub struct Domain {
    /// The device's capabilities as the domain read them.
    pub caps: DrCaps,
    /// ICM address of the steering object (the start of the steering range).
    pub base: u64,
    /// Its key.
    pub rkey: u32,
    /// ICM address of the header-modify object (the start of its range): a modify list at
    /// `modify_base + 64 i` is MODIFY_LIST index `i`.
    pub modify_base: u64,
    /// Its key.
    pub modify_rkey: u32,
    /// dr_send.c's ring.
    pub ring: Ring,
}

/// Sets a domain up on `h`.
pub fn domain(h: &mut Host) -> Domain {
    let caps = dr_caps(h);
    let r = ranges(h);
    let (base, modify_base) = (r.steering.0, r.header_modify.0);
    assert_ne!(create(h, 0, base, 20).expect("SW_ICM steering object"), 0);
    let rkey = icm_key(h, base, 1 << 20).expect("SW_ICM steering key");
    create(h, 0, modify_base, 16).expect("SW_ICM header-modify object");
    let modify_rkey = icm_key(h, modify_base, 1 << 16).expect("SW_ICM header-modify key");
    let ring = self_connected_ring(h);
    Domain {
        caps,
        base,
        rkey,
        modify_base,
        modify_rkey,
        ring,
    }
}

impl Domain {
    /// Writes `entries` at their ICM addresses as dr_send.c does: an inline WRITE of the 64
    /// bytes relative to the key, then a READ of them back, which must give them.
    pub fn write(&mut self, h: &mut Host, entries: Vec<(u64, Builder)>) {
        for (addr, entry) in entries {
            let at = addr - self.base;
            let read = write_then_read(h, &mut self.ring, at, self.rkey, &entry.post(), true);
            assert_eq!(read, entry.post());
        }
    }

    /// Writes the 8-byte modify actions `actions` as modify list `index` (one 64-byte block
    /// each 8 actions), as `dr_send_postsend_action` does.
    pub fn write_modify_list(&mut self, h: &mut Host, index: u16, actions: &[[u8; 8]]) {
        let mut bytes: Vec<u8> = actions.iter().flatten().copied().collect();
        bytes.resize(bytes.len().next_multiple_of(64).max(64), 0);
        for (i, block) in bytes.chunks(64).enumerate() {
            let at = u64::from(index) * 64 + 64 * i as u64;
            let read = write_then_read(h, &mut self.ring, at, self.modify_rkey, block, true);
            assert_eq!(read, block);
        }
    }
}

/// CREATE_FLOW_TABLE as `dr_devx_create_flow_table` sends it for a NIC table of `table_type`:
/// `sw_owner`, the level, the anchor in `sw_owner_icm_root_0`.
pub fn create_sw_table(h: &mut Host, table_type: u8, level: u8, root: u64) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateFlowTable, 0, 0x40);
    {
        let mut cmd = flow::CreateFlowTableIn::new(&mut input[..]).expect("layout");
        cmd.set_table_type(table_type);
        cmd.flow_table_context_mut()
            .set_sw_owner(true)
            .set_level(level)
            .set_sw_owner_icm_root_0(root);
    }
    let out = h.exec(&input, 16)?;
    Ok(flow::CreateFlowTableOut::new(&out[..])
        .expect("layout")
        .table_id())
}

impl Domain {
    /// A software-owned NIC transmit table whose entries start at the domain's base (level
    /// `max_ft_level - 1`, as rdma-core creates them), with a transmit root forwarding every
    /// frame to it; returns the table.
    pub fn transmit_table(&self, h: &mut Host) -> u32 {
        let table = create_sw_table(
            h,
            flow::FLOW_TABLE_TYPE_NIC_TX,
            self.caps.max_ft_level - 1,
            self.base,
        )
        .expect("software-owned transmit table");
        super::flow_tables::root_forwarding_to(h, flow::FLOW_TABLE_TYPE_NIC_TX, table);
        table
    }
}

/// A transmit table of one rule, as rdma-core lays a one-rule matcher out: its anchor hits
/// (with `byte_mask`) into the rule, an entry of lookup type `lookup` dropping what matches
/// `tag` under `mask`; the rest goes out.
pub fn drop_by_lookup(p: &mut Plug, lookup: u16, byte_mask: u16, mask: [u8; 16], tag: [u8; 16]) {
    const DONT_CARE: u16 = 0x000f;
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let (anchor, matcher, end) = (dom.base, dom.base + 0x1000, dom.base + 0x2000);
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(byte_mask, lookup, matcher, 1);
    let mut rule = Builder::init(lookup, 0);
    rule.bit_mask(mask).tag(tag).hit(caps.tx_drop, 1).miss(end);
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(caps.tx_allow);
    dom.write(&mut p.h, vec![(anchor, a), (matcher, rule), (end, e)]);
    dom.transmit_table(&mut p.h);
}
