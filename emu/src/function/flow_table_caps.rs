//! The NIC flow table capability page (type 7) the model reports: receive and transmit tables
//! with the chaining fs_core needs, flow counters, the tunnel fields steering matches,
//! the integrity bits receive tables match, software-owned tables and their terminal addresses,
//! packet reformat contexts.

use crate::config::EmuConfig;
use crate::objects::limits::LOG_MAX_FT_SIZE;
use cxdirect_hw::caps::FlowTableNicCap;

/// Deepest flow table level the model accepts. Linux 6.12's mlx5_core lays its NIC receive
/// priorities out level after level (`root_fs` and `set_prio_attrs` in fs_core.c): with the
/// chaining capabilities, the bypass priorities take levels 0-32, MACsec, LAG, offloads,
/// ethtool and the kernel's (mlx5e's) priorities follow, and the leftovers and anchor tables
/// end near level 66. A priority whose `min_ft_level` is above this value is left out of the
/// tree; 127 keeps every one of them in (the LAG priority needs 119).
pub(crate) const MAX_FT_LEVEL: u8 = 127;
/// Log2 of the number of flow tables (the size of the model's flow table table).
pub(crate) const LOG_MAX_FT_NUM: u8 = 10;
/// Log2 of the number of destinations of one flow entry.
pub(crate) const LOG_MAX_FLOW_DESTINATION: u8 = 6;
/// Log2 of the number of flow entries.
pub(crate) const LOG_MAX_FLOW: u8 = 16;

/// The page, as both its maximum and current values.
pub(super) fn page(cfg: &EmuConfig) -> Box<[u8; 0x1000]> {
    let mut f = FlowTableNicCap::zeroed();
    // Packet reformat contexts (`fw::reformat`) of every tunnel type, the general one
    // included, whose headers entries insert on transmit.
    f.set_encap_general_header(true)
        .set_max_encap_header_size(crate::objects::limits::MAX_ENCAP_HEADER_SIZE)
        .set_log_max_packet_reformat_context(
            crate::objects::limits::LOG_MAX_PACKET_REFORMAT_CONTEXT,
        );
    // Receive and transmit tables alike. Linux's fs_core builds its chained NIC receive
    // priorities (bypass, which mlx5_ib's `ibv_create_flow` rules live in, ethtool, leftovers,
    // ...) only with the four chaining bits (`FS_CHAINING_CAPS`): without them
    // `mlx5_get_flow_namespace(MLX5_FLOW_NAMESPACE_BYPASS)` is NULL and `get_flow_table` fails
    // with EOPNOTSUPP; the same four build its egress priorities (`FS_CHAINING_CAPS_EGRESS`),
    // where mlx5_ib puts the transmit rules of `mlx5dv_create_flow` (rdma-core's transmit root
    // tables). fs_core then re-points a previous table's miss by MODIFY_FLOW_TABLE
    // (`connect_prev_fts`), names a miss table at CREATE_FLOW_TABLE, and adds a destination to
    // an existing entry by SET_FTE op_mod 1 (`mlx5_cmd_update_fte`); `fw::steering` does all
    // three. Flow counters on entries (`fw::flow_counter`): Linux's `mlx5_cmd_set_fte` lists at
    // most 2^log_max_flow_counter of them per entry. The frames the SQs send walk the
    // transmit tables before they leave (`crate::transmit_steering`).
    for transmit in [false, true] {
        let mut props = if transmit {
            f.flow_table_properties_nic_transmit_mut()
        } else {
            f.flow_table_properties_nic_receive_mut()
        };
        props
            .set_ft_support(true)
            .set_modify_root(true)
            .set_flow_modify_en(true)
            .set_identified_miss_table_mode(true)
            .set_flow_table_modify(true)
            .set_log_max_ft_size(LOG_MAX_FT_SIZE)
            .set_max_ft_level(MAX_FT_LEVEL)
            .set_log_max_ft_num(LOG_MAX_FT_NUM)
            .set_log_max_destination(LOG_MAX_FLOW_DESTINATION)
            .set_log_max_flow(LOG_MAX_FLOW)
            .set_flow_counter(true)
            .set_log_max_flow_counter(crate::objects::limits::LOG_MAX_FLOW_COUNTERS_PER_ENTRY)
            // Modify-header contexts for the entries (`fw::modify_header`,
            // `crate::header_modify`): mlx5_core's `mlx5_cmd_modify_header_alloc` refuses more
            // actions than this with EOPNOTSUPP, and mlx5_ib offers its modify-header flow
            // action only when some direction has any.
            .set_max_modify_header_actions(crate::objects::limits::MAX_MODIFY_HEADER_ACTIONS)
            .set_log_max_modify_header_context(
                crate::objects::limits::LOG_MAX_MODIFY_HEADER_CONTEXT,
            )
            // Reformat by entries (`packet_reformat_id`): on receive decapsulation of L2
            // tunnels and of L3 tunnels to L2, on transmit encapsulation into either; mlx5_ib
            // checks these per type (`mlx5_ib_flow_action_packet_reformat_valid`), rdma-core's
            // root-level reformat tests the `reformat` bits both ways.
            .set_reformat(true)
            .set_decap(!transmit)
            .set_reformat_l3_tunnel_to_l2(!transmit)
            .set_reformat_l2_to_l3_tunnel(transmit);
        // Matching on the tunnels `crate::tunnel` parses, by firmware entries (`misc`) and
        // steering entries (the GENEVE flex parser lookup): rdma-core's GENEVE tests ask the
        // receive tables for the four GENEVE fields.
        props
            .ft_field_support_mut()
            .set_outer_gre_protocol(true)
            .set_outer_gre_key(true)
            .set_outer_vxlan_vni(true)
            .set_outer_geneve_vni(true)
            .set_outer_geneve_oam(true)
            .set_outer_geneve_protocol_type(true)
            .set_outer_geneve_opt_len(true)
            .set_outer_gre_c_present(true)
            .set_outer_gre_k_present(true)
            .set_outer_gre_s_present(true)
            // The first MPLS entry of the frame and of an L2 tunnel's frame (`crate::mpls`):
            // label, exp, bottom of stack and TTL, as mlx5_ib's `check_mpls_supp_fields`
            // reads them. MPLS over GRE and UDP needs a flex parser: not offered.
            .set_outer_first_mpls(0xf)
            .set_inner_first_mpls(0xf);
        // Software-owned tables in entry format 1 (`steering_format_version`): rdma-core's
        // `dr_domain_caps_init` takes `sw_owner_v2` with a format up to ConnectX-8's; the
        // terminals entries end at (`sw_steering::terminals`): a receive walk at a TIR, a
        // table or the drop address, a transmit walk at the allow or drop address.
        props.set_sw_owner_v2(cfg.sw_steering);
        // Flow samplers (`fw::sampler`), which rdma-core's software steering creates on
        // receive tables (`mlx5dv_dr_action_create_flow_sampler`); DPDK's mlx5 PMD reads this
        // field before it offers its `sample` action.
        if cfg.sw_steering && !transmit {
            props.set_log_max_ft_sampler_num(crate::objects::limits::LOG_MAX_FLOW_SAMPLERS);
        }
    }
    // The integrity bits of received packets, outer and inner (`crate::integrity`), by
    // firmware entries and match definers: DPDK's mlx5 PMD takes its integrity item only when
    // all eight are supported (`mlx5_devx_query_pkt_integrity_match`); rdma-core's software
    // steering puts them in definers of formats 0 and 2 only when the bitmask support has
    // `outer_l4_checksum_ok` (`definer_supp_checksum`).
    for bitmask in [false, true] {
        let mut fields = if bitmask {
            f.ft_field_bitmask_support_2_nic_receive_mut()
        } else {
            f.ft_field_support_2_nic_receive_mut()
        };
        fields
            .set_inner_l3_ok(true)
            .set_inner_l4_ok(true)
            .set_outer_l3_ok(true)
            .set_outer_l4_ok(true)
            .set_inner_ipv4_checksum_ok(true)
            .set_inner_l4_checksum_ok(true)
            .set_outer_ipv4_checksum_ok(true)
            .set_outer_l4_checksum_ok(true);
    }
    if cfg.sw_steering {
        f.set_sw_steering_nic_rx_action_drop_icm_address(crate::sw_steering::terminals::RX_DROP)
            .set_sw_steering_nic_tx_action_drop_icm_address(crate::sw_steering::terminals::TX_DROP)
            .set_sw_steering_nic_tx_action_allow_icm_address(
                crate::sw_steering::terminals::TX_ALLOW,
            );
    }
    let mut page = Box::new([0u8; 0x1000]);
    page.copy_from_slice(f.as_bytes());
    page
}
