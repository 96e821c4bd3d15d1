//! Device capabilities: the general device capabilities (`cmd_hca_cap`) and the Ethernet offload
//! capabilities (`per_protocol_networking_offload_caps`), as QUERY_HCA_CAP returns them and
//! SET_HCA_CAP writes the settable ones, with the values their coded fields take.
//!
//! Both layouts sit at the start of [`HcaCapUnion`](crate::hca::HcaCapUnion), the capability page
//! of QUERY_HCA_CAP and SET_HCA_CAP; which one the device fills in is chosen by the command's
//! op_mod (see [`crate::hca::query_cap_op_mod`]).
//!
//! Fields named `log_*` hold log2 of the quantity. Capability fields are read-only unless the
//! manual says otherwise; the ones software sets through SET_HCA_CAP (`cmdif_checksum`,
//! `log_uar_page_sz`, `uar_4k`, `cqe_version`, `log_pg_sz`, `driver_version`, `pg`, ...) report the
//! value in force when queried with the "current" op_mod and the largest allowed value with
//! "maximum".

use crate::layout;

/// Values of [`CmdHcaCap::port_type`] (`MLX5_CAP_PORT_TYPE_*`).
pub mod port_type {
    /// InfiniBand ports.
    pub const IB: u8 = 0x0;
    /// Ethernet ports.
    pub const ETHERNET: u8 = 0x1;
}

/// Values of [`CmdHcaCap::cmdif_checksum`] (`MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_*`).
pub mod cmdif_checksum {
    /// Command interface checksums are neither checked nor generated.
    pub const DISABLED: u8 = 0x0;
    /// The state the device comes out of reset in.
    pub const INITIAL_STATE: u8 = 0x1;
    /// Command entries and mailboxes carry checksums that the device checks and generates.
    pub const ENABLED: u8 = 0x3;
}

/// Values of [`CmdHcaCap::umr_fence`] (`MLX5_CAP_UMR_FENCE_*`): the fence a WQE following a UMR
/// needs.
pub mod umr_fence {
    /// A strong (initiator small) fence is needed.
    pub const STRONG: u8 = 0x0;
    /// A small fence is enough.
    pub const SMALL: u8 = 0x1;
    /// No fence is needed.
    pub const NONE: u8 = 0x2;
}

/// Values of [`PerProtocolNetworkingOffloadCaps::wqe_inline_mode`] (`MLX5_CAP_INLINE_MODE_*` in
/// Linux `include/linux/mlx5/device.h`): how many packet headers a send WQE must carry inline
/// in its Ethernet segment.
pub mod wqe_inline_mode {
    /// The L2 headers (destination and source MAC, VLAN, ethertype) must be inlined.
    pub const L2: u8 = 0x0;
    /// The minimum is set per vport: read `min_wqe_inline_mode` of the NIC vport context.
    pub const VPORT_CONTEXT: u8 = 0x1;
    /// No headers need be inlined.
    pub const NOT_REQUIRED: u8 = 0x2;
}

/// Number of elements of [`PerProtocolNetworkingOffloadCaps::lro_timer_supported_periods`].
pub const LRO_TIMER_SUPPORTED_PERIODS: usize = 4;

layout! {
    /// General device capabilities (`MLX5_CAP_GENERAL`): queue and object limits, supported
    /// transports and features, UAR and BlueFlame geometry, CQE format.
    pub struct CmdHcaCap("cmd_hca_cap", 0x100) {
        /// The function may query and set other functions' RoCE capability.
        access_other_hca_roce: bool @ 0x0 [0x1],
        /// The second general capability page ([`CmdHcaCap2`], cap type 0x20) may be queried.
        hca_cap_2: bool @ 0x20 [0x1],
        /// Log2 of the maximum number of WQEs in an SRQ.
        log_max_srq_sz: u8 @ 0x80 [0x8],
        /// Log2 of the maximum number of WQEs in a send or receive queue of a QP.
        log_max_qp_sz: u8 @ 0x88 [0x8],
        /// Log2 of the maximum number of QPs.
        log_max_qp: u8 @ 0x9b [0x5],
        /// Log2 of the maximum number of SRQs.
        log_max_srq: u8 @ 0xab [0x5],
        /// Log2 of the maximum number of CQEs in a CQ.
        log_max_cq_sz: u8 @ 0xc8 [0x8],
        /// Log2 of the maximum number of CQs.
        log_max_cq: u8 @ 0xdb [0x5],
        /// Log2 of the maximum number of EQEs in an EQ.
        log_max_eq_sz: u8 @ 0xe0 [0x8],
        /// Log2 of the maximum number of memory keys.
        log_max_mkey: u8 @ 0xea [0x6],
        /// Log2 of the maximum number of EQs.
        log_max_eq: u8 @ 0xfc [0x4],
        /// Maximum nesting depth of indirect memory keys (KLM mkeys pointing at KLM mkeys).
        max_indirection: u8 @ 0x100 [0x8],
        /// Fixed-buffer-size memory keys are supported.
        fixed_buffer_size: bool @ 0x108 [0x1],
        /// Log2 of the maximum length in bytes of a memory region or window.
        log_max_mrw_sz: u8 @ 0x109 [0x7],
        /// TEARDOWN_HCA with the force-close profile is supported.
        force_teardown: bool @ 0x110 [0x1],
        /// Log2 of the maximum number of entries in a BSF (signature) list.
        log_max_bsf_list_size: u8 @ 0x112 [0x6],
        /// UMR may set an extended translation offset.
        umr_extended_translation_offset: bool @ 0x118 [0x1],
        /// A null memory key (QUERY_SPECIAL_CONTEXTS) is available.
        null_mkey: bool @ 0x119 [0x1],
        /// Log2 of the maximum number of KLM entries in an indirect memory key.
        log_max_klm_list_size: u8 @ 0x11a [0x6],
        /// QP commands take the QP context extension (`qpc_ext` and `qpc_data_ext`, as
        /// rdma-core's `mlx5dv_dci_stream_id_reset` sends RTS2RTS_QP).
        qpc_extension: bool @ 0x122 [0x1],
        /// Log2 of the maximum outstanding RDMA read/atomic requests a DC initiator may issue.
        log_max_ra_req_dc: u8 @ 0x12a [0x6],
        /// Log2 of the maximum outstanding RDMA read/atomic requests a DC target may serve.
        log_max_ra_res_dc: u8 @ 0x13a [0x6],
        /// Block signatures may use the CRC64-XP10 guard (libmlx5's
        /// `MLX5DV_SIG_CRC_TYPE_CAP_CRC64_XP10`).
        sig_crc64_xp10: bool @ 0x147 [0x1],
        /// Block signatures may use the CRC32C guard (libmlx5's
        /// `MLX5DV_SIG_CRC_TYPE_CAP_CRC32C`).
        sig_crc32c: bool @ 0x148 [0x1],
        /// Log2 of the maximum outstanding RDMA read/atomic requests a QP may issue.
        log_max_ra_req_qp: u8 @ 0x14a [0x6],
        /// RTS2RTS_QP may change an RC or UC QP's UDP source port (libmlx5's
        /// `mlx5dv_modify_qp_udp_sport`, which reads it as `rts2rts_qp_udp_sport`).
        rts2rts_udp_sport: bool @ 0x151 [0x1],
        /// Log2 of the maximum outstanding RDMA read/atomic requests a QP may serve.
        log_max_ra_res_qp: u8 @ 0x15a [0x6],
        /// Receive queues may pad the end of each scattered packet to a cache line
        /// (WQ `end_padding_mode` align).
        end_pad: bool @ 0x160 [0x1],
        /// Congestion control parameters may be queried.
        cc_query_allowed: bool @ 0x161 [0x1],
        /// Congestion control parameters may be modified.
        cc_modify_allowed: bool @ 0x162 [0x1],
        /// Scatter may start at a cache-line boundary (start padding).
        start_pad: bool @ 0x163 [0x1],
        /// The device's cache line is 128 bytes (64 when clear); padding follows it.
        cache_line_128byte: bool @ 0x164 [0x1],
        /// RTS2RTS_QP may bind a running QP to another Q counter set (the optional counter
        /// set attribute): mlx5_ib's `mlx5_ib_qp_set_counter` refuses `rdma statistic qp
        /// bind` of a QP past RESET without it.
        rts2rts_qp_counters_set_id: bool @ 0x169 [0x1],
        /// The QCAM access register is supported.
        qcam_reg: bool @ 0x16f [0x1],
        /// GID table size per port, coded (`MLX5_CMD_HCA_CAP_GID_TABLE_SIZE_*`: 0 = 8 entries,
        /// each step doubling).
        gid_table_size: u16 @ 0x170 [0x10],
        /// The out-of-sequence Q counter is supported.
        out_of_seq_cnt: bool @ 0x180 [0x1],
        /// Per-vport traffic counters are supported.
        vport_counters: bool @ 0x181 [0x1],
        /// Retransmission Q counters are supported.
        retransmission_q_counters: bool @ 0x182 [0x1],
        /// MODIFY_RQ may change an RQ's counter set.
        modify_rq_counter_set_id: bool @ 0x184 [0x1],
        /// Receive queues support delay drop (hold packets while no WQE is posted).
        rq_delay_drop: bool @ 0x185 [0x1],
        /// Maximum number of Q counter sets.
        max_qp_cnt: u16 @ 0x186 [0xa],
        /// P_Key table size per port, coded (`MLX5_CMD_HCA_CAP_PKEY_TABLE_SIZE_*`: 0 = 128
        /// entries, each step doubling).
        pkey_table_size: u16 @ 0x190 [0x10],
        /// This function is the vport group (e-switch) manager.
        vport_group_manager: bool @ 0x1a0 [0x1],
        /// This function is the virtual HCA group manager.
        vhca_group_manager: bool @ 0x1a1 [0x1],
        /// InfiniBand virtualization is supported.
        ib_virt: bool @ 0x1a2 [0x1],
        /// Ethernet virtualization (e-switch) is supported.
        eth_virt: bool @ 0x1a3 [0x1],
        /// Enhanced transmission selection is supported.
        ets: bool @ 0x1a5 [0x1],
        /// NIC receive and transmit flow tables are supported (`flow_table_nic_cap` is valid).
        nic_flow_table: bool @ 0x1a6 [0x1],
        /// This function is the e-switch manager (Linux's `MLX5_ESWITCH_MANAGER`): the
        /// e-switch pages (`e_switch_cap`, `flow_table_eswitch_cap`) are valid and
        /// `devlink dev eswitch` applies to it.
        eswitch_manager: bool @ 0x1a7 [0x1],
        /// On-device memory (MEMIC) is supported (`device_mem_cap` is valid).
        device_memory: bool @ 0x1a8 [0x1],
        /// The MCAM access register is supported.
        mcam_reg: bool @ 0x1a9 [0x1],
        /// The PCAM access register is supported.
        pcam_reg: bool @ 0x1aa [0x1],
        /// InfiniBand local CA ACK delay: 4.096 us * 2^value.
        local_ca_ack_delay: u8 @ 0x1ab [0x5],
        /// Port module (cable plug/unplug) events are generated.
        port_module_event: bool @ 0x1b0 [0x1],
        /// Enhanced error Q counters are supported.
        enhanced_error_q_counters: bool @ 0x1b1 [0x1],
        /// Port-check capabilities are supported.
        ports_check: bool @ 0x1b2 [0x1],
        /// INIT_HCA may leave the link down (`disable_link_up`).
        disable_link_up: bool @ 0x1b4 [0x1],
        /// The port beacon LED may be driven (MLCR register).
        beacon_led: bool @ 0x1b5 [0x1],
        /// Port type: see [`port_type`] (0 InfiniBand, 1 Ethernet).
        port_type: u8 @ 0x1b6 [0x2],
        /// Number of physical ports.
        num_ports: u8 @ 0x1b8 [0x8],
        /// Pulse-per-second input/output is supported (MTPPS register).
        pps: bool @ 0x1c1 [0x1],
        /// Pulse-per-second settings may be modified.
        pps_modify: bool @ 0x1c2 [0x1],
        /// Log2 of the maximum message size in bytes.
        log_max_msg: u8 @ 0x1c3 [0x5],
        /// Multipath is supported for XRC QPs.
        multipath_xrc_qp: bool @ 0x1c8 [0x1],
        /// Multipath is supported for DC QPs.
        multipath_dc_qp: bool @ 0x1c9 [0x1],
        /// Multipath is supported for RC QPs.
        multipath_rc_qp: bool @ 0x1ca [0x1],
        /// Number of traffic classes; 0 means 8.
        max_tc: u8 @ 0x1cc [0x4],
        /// Temperature warning events are generated.
        temp_warn_event: bool @ 0x1d0 [0x1],
        /// DCBX (data center bridging exchange) is supported.
        dcbx: bool @ 0x1d1 [0x1],
        /// General notification events are generated.
        general_notification_event: bool @ 0x1d2 [0x1],
        /// An FPGA is attached (`fpga_cap` is valid).
        fpga: bool @ 0x1d5 [0x1],
        /// Reset-on-LAN on a SecureOn (magic) packet is supported.
        rol_s: bool @ 0x1d6 [0x1],
        /// Reset-on-LAN on a magic packet is supported.
        rol_g: bool @ 0x1d7 [0x1],
        /// Wake-on-LAN on a SecureOn (password magic) packet is supported.
        wol_s: bool @ 0x1d9 [0x1],
        /// Wake-on-LAN on a magic packet is supported.
        wol_g: bool @ 0x1da [0x1],
        /// Wake-on-LAN on an ARP packet is supported.
        wol_a: bool @ 0x1db [0x1],
        /// Wake-on-LAN on a broadcast packet is supported.
        wol_b: bool @ 0x1dc [0x1],
        /// Wake-on-LAN on a multicast packet is supported.
        wol_m: bool @ 0x1dd [0x1],
        /// Wake-on-LAN on a unicast packet is supported.
        wol_u: bool @ 0x1de [0x1],
        /// Wake-on-LAN on PHY activity is supported.
        wol_p: bool @ 0x1df [0x1],
        /// Bit mask of the supported InfiniBand static rates.
        stat_rate_support: u16 @ 0x1e0 [0x10],
        /// Block signatures may use 4048-byte blocks (block size selector 6).
        sig_block_4048: bool @ 0x1f0 [0x1],
        /// CQE format version: 0 = version 0, 1 = version 1 (the CQE carries the user index).
        /// Software selects it through SET_HCA_CAP.
        cqe_version: u8 @ 0x1fc [0x4],
        /// Compact (address-vector-less) UD send WQEs are supported.
        compact_address_vector: bool @ 0x200 [0x1],
        /// Striding (multi-packet) receive queues are supported.
        striding_rq: bool @ 0x201 [0x1],
        /// Enhanced IPoIB offloads are supported.
        ipoib_enhanced_offloads: bool @ 0x203 [0x1],
        /// Basic IPoIB offloads (checksum, LSO) are supported.
        ipoib_basic_offloads: bool @ 0x204 [0x1],
        /// A UMR cannot change a memory key's entity (page) size, so it cannot load or enable
        /// a translation list: Linux then registers memory by CREATE_MKEY and keeps no UMR
        /// memory key cache.
        umr_modify_entity_size_disabled: bool @ 0x207 [0x1],
        /// A UMR cannot change a memory key's atomic access.
        umr_modify_atomic_disabled: bool @ 0x208 [0x1],
        /// Fence needed after a UMR: see [`umr_fence`].
        umr_fence: u8 @ 0x20a [0x2],
        /// DC initiators may scatter response data to the CQE.
        dc_req_scat_data_cqe: bool @ 0x20c [0x1],
        /// DC connect QPs are supported.
        dc_connect_qp: bool @ 0x20d [0x1],
        /// DC CNAK tracing is supported.
        dc_cnak_trace: bool @ 0x20e [0x1],
        /// A QP may drain after a signature error.
        drain_sigerr: bool @ 0x20f [0x1],
        /// Command interface checksum mode: see [`cmdif_checksum`]. Software sets it (to
        /// disabled, normally) through SET_HCA_CAP.
        cmdif_checksum: u8 @ 0x210 [0x2],
        /// Signature errors are reported in CQEs.
        sigerr_cqe: bool @ 0x212 [0x1],
        /// WQE signatures (a checksum over each WQE) are supported.
        wq_signature: bool @ 0x214 [0x1],
        /// Requester QPs may scatter RDMA read and atomic response data to the CQE.
        sctr_data_cqe: bool @ 0x215 [0x1],
        /// Signature handover (T10-DIF offload) is supported.
        sho: bool @ 0x217 [0x1],
        /// PCIe TLP processing hints are supported.
        tph: bool @ 0x218 [0x1],
        /// The `rf` capability bit (not described by the header).
        rf: bool @ 0x219 [0x1],
        /// Dynamically connected targets (DCT) are supported.
        dct: bool @ 0x21a [0x1],
        /// QoS capabilities are valid (`qos_cap`).
        qos: bool @ 0x21b [0x1],
        /// Ethernet offloads are supported: [`PerProtocolNetworkingOffloadCaps`] is valid.
        eth_net_offloads: bool @ 0x21c [0x1],
        /// RoCE is supported (`roce_cap` is valid).
        roce: bool @ 0x21d [0x1],
        /// Atomic operations are supported (`atomic_caps` is valid).
        atomic: bool @ 0x21e [0x1],
        /// CQs may be created with overrun ignore (`cqc.oi`).
        cq_oi: bool @ 0x220 [0x1],
        /// CQs may be resized (MODIFY_CQ).
        cq_resize: bool @ 0x221 [0x1],
        /// CQ event moderation (`cq_period`, `cq_max_count`) is supported.
        cq_moderation: bool @ 0x222 [0x1],
        /// A CQ may be moved to another EQ (MODIFY_CQ).
        cq_eq_remap: bool @ 0x226 [0x1],
        /// On-demand paging (page faults) is supported (`odp_cap` is valid).
        pg: bool @ 0x227 [0x1],
        /// Loopback of multicast packets sent by a QP to itself may be blocked.
        block_lb_mc: bool @ 0x228 [0x1],
        /// A solicited CQE may break event moderation (`scqe_break_moderation_en`).
        scqe_break_moderation: bool @ 0x22a [0x1],
        /// The moderation period may start from the last CQE (`cq_period_mode` 1).
        cq_period_start_from_cqe: bool @ 0x22b [0x1],
        /// Cross-channel (CORE-Direct) operations are supported.
        cd: bool @ 0x22c [0x1],
        /// Automatic path migration is supported.
        apm: bool @ 0x22e [0x1],
        /// Vector calculation offloads are supported (`vector_calc_cap` is valid).
        vector_calc: bool @ 0x22f [0x1],
        /// UMR may use a pointer with the reserved lkey.
        umr_ptr_rlky: bool @ 0x230 [0x1],
        /// The `imaicl` capability bit (memory windows; not described by the header).
        imaicl: bool @ 0x231 [0x1],
        /// Q_Key violation counting is supported.
        qkv: bool @ 0x236 [0x1],
        /// P_Key violation counting is supported.
        pkv: bool @ 0x237 [0x1],
        /// UD send WQEs may set the source QP number in the DETH.
        set_deth_sqpn: bool @ 0x238 [0x1],
        /// The XRC transport is supported.
        xrc: bool @ 0x23c [0x1],
        /// The UD transport is supported.
        ud: bool @ 0x23d [0x1],
        /// The UC transport is supported.
        uc: bool @ 0x23e [0x1],
        /// The RC transport is supported.
        rc: bool @ 0x23f [0x1],
        /// UARs may be 4 KiB pages inside a larger system page (see `num_of_uars_per_page`);
        /// software enables this through SET_HCA_CAP.
        uar_4k: bool @ 0x240 [0x1],
        /// Size code (log2) of the function's UAR area.
        uar_sz: u8 @ 0x24a [0x6],
        /// Log2 of the maximum number of DC CNAK QPs.
        log_max_dc_cnak_qps: u8 @ 0x253 [0x5],
        /// Log2 of the page size the device uses for its own memory, in bytes minus 12.
        log_pg_sz: u8 @ 0x258 [0x8],
        /// BlueFlame (writing a WQE through the UAR) is supported.
        bf: bool @ 0x260 [0x1],
        /// SET_DRIVER_VERSION is supported.
        driver_version: bool @ 0x261 [0x1],
        /// The device pads short transmitted Ethernet frames to the minimum length.
        pad_tx_eth_packet: bool @ 0x262 [0x1],
        /// Log2 of the BlueFlame register size in bytes (two alternating buffers of half that).
        log_bf_reg_size: u8 @ 0x26b [0x5],
        /// This function is the LAG master.
        lag_master: bool @ 0x27b [0x1],
        /// Number of ports that may form a LAG.
        num_lag_ports: u8 @ 0x27c [0x4],
        /// Maximum size of a send WQE in bytes.
        max_wqe_sz_sq: u16 @ 0x290 [0x10],
        /// Maximum size of a receive WQE in bytes.
        max_wqe_sz_rq: u16 @ 0x2b0 [0x10],
        /// Maximum number of flow counters, bits 31..16 (bits 15..0 are `max_flow_counter_15_0`).
        max_flow_counter_31_16: u16 @ 0x2c0 [0x10],
        /// Maximum size of a DC send WQE in bytes.
        max_wqe_sz_sq_dc: u16 @ 0x2d0 [0x10],
        /// Maximum number of QPs attached to one multicast group.
        max_qp_mcg: u32 @ 0x2e7 [0x19],
        /// Log2 of the maximum number of multicast groups.
        log_max_mcg: u8 @ 0x318 [0x8],
        /// Log2 of the maximum number of transport domains.
        log_max_transport_domain: u8 @ 0x323 [0x5],
        /// Log2 of the maximum number of protection domains.
        log_max_pd: u8 @ 0x32b [0x5],
        /// Log2 of the maximum number of XRC domains.
        log_max_xrcd: u8 @ 0x33b [0x5],
        /// Log2 of the maximum number of flow counters allocated in one bulk.
        log_max_flow_counter_bulk: u8 @ 0x348 [0x8],
        /// Maximum number of flow counters, bits 15..0.
        max_flow_counter_15_0: u16 @ 0x350 [0x10],
        /// Log2 of the maximum number of RQs.
        log_max_rq: u8 @ 0x363 [0x5],
        /// Log2 of the maximum number of SQs.
        log_max_sq: u8 @ 0x36b [0x5],
        /// Log2 of the maximum number of TIRs.
        log_max_tir: u8 @ 0x373 [0x5],
        /// Log2 of the maximum number of TISes.
        log_max_tis: u8 @ 0x37b [0x5],
        /// Cyclic receive queues with basic (non-linked-list) WQEs are supported.
        basic_cyclic_rcv_wqe: bool @ 0x380 [0x1],
        /// Log2 of the maximum number of RMPs (shared receive memory pools).
        log_max_rmp: u8 @ 0x383 [0x5],
        /// Log2 of the maximum number of RQ tables.
        log_max_rqt: u8 @ 0x38b [0x5],
        /// Log2 of the maximum number of entries in an RQ table.
        log_max_rqt_size: u8 @ 0x393 [0x5],
        /// Log2 of the maximum number of TISes one SQ may use.
        log_max_tis_per_sq: u8 @ 0x39b [0x5],
        /// A striding RQ's `log_wqe_num_of_strides` is a signed offset from
        /// [`LOG_STRIDES_BASE`](crate::wq::striding::LOG_STRIDES_BASE), reaching down to
        /// [`EXT_MIN_LOG_STRIDES`](crate::wq::striding::EXT_MIN_LOG_STRIDES) strides.
        ext_stride_num_range: bool @ 0x3a0 [0x1],
        /// Log2 of the largest stride in bytes of a striding RQ.
        log_max_stride_sz_rq: u8 @ 0x3a3 [0x5],
        /// Log2 of the smallest stride in bytes of a striding RQ.
        log_min_stride_sz_rq: u8 @ 0x3ab [0x5],
        /// Log2 of the largest stride in bytes of a multi-packet SQ.
        log_max_stride_sz_sq: u8 @ 0x3b3 [0x5],
        /// Log2 of the smallest stride in bytes of a multi-packet SQ.
        log_min_stride_sz_sq: u8 @ 0x3bb [0x5],
        /// Log2 of the maximum number of WQEs in a work queue (RQ or SQ object).
        log_max_wq_sz: u8 @ 0x3db [0x5],
        /// NIC vport change events are generated.
        nic_vport_change_event: bool @ 0x3e0 [0x1],
        /// Unicast local loopback may be disabled per vport (`disable_uc_local_lb`); older
        /// headers call this bit `disable_local_lb`.
        disable_local_lb_uc: bool @ 0x3e1 [0x1],
        /// Multicast and broadcast local loopback may be disabled per vport
        /// (`disable_mc_local_lb`).
        disable_local_lb_mc: bool @ 0x3e2 [0x1],
        /// Log2 of the maximum number of VLANs in a vport's allowed list.
        log_max_vlan_list: u8 @ 0x3eb [0x5],
        /// Log2 of the maximum number of multicast MACs in a vport's current list.
        log_max_current_mc_list: u8 @ 0x3f3 [0x5],
        /// Log2 of the maximum number of unicast MACs in a vport's current list.
        log_max_current_uc_list: u8 @ 0x3fb [0x5],
        /// Bit mask of the general object types CREATE_GENERAL_OBJECT takes: bit `t` set for
        /// object type `t` (`MLX5_GENERAL_OBJ_TYPES_CAP_*`; see
        /// [`general_obj::obj_type`](crate::general_obj::obj_type)).
        general_obj_types: u64 @ 0x400 [0x40],
        /// Format of software steering entries: 0 ConnectX-5, 1 ConnectX-6 Dx (STEv1), 2
        /// ConnectX-7 (`mlx5_ifc_steering_format_version`).
        steering_format_version: u8 @ 0x444 [0x4],
        /// Log2 of the maximum number of user contexts (CREATE_UCTX); 0: none, and then
        /// mlx5_ib offers no DEVX (`mlx5_ib_devx_create`).
        log_max_uctx: u8 @ 0x463 [0x5],
        /// Log2 of the maximum number of registered user memory regions (CREATE_UMEM).
        log_max_umem: u8 @ 0x46b [0x5],
        /// SIG_ERR CQEs name the failing domain and signature type; libmlx5
        /// (`get_hca_sig_caps`) offers block signatures only with it and `sho`.
        sigerr_domain_and_sig_type: bool @ 0x480 [0x1],
        /// Log2 of the maximum number of L2 table entries.
        log_max_l2_table: u8 @ 0x483 [0x5],
        /// Log2 of the UAR page size in bytes minus 12; software sets it to the system page
        /// shift minus 12 through SET_HCA_CAP.
        log_uar_page_sz: u16 @ 0x490 [0x10],
        /// Frequency of the device's internal timer in MHz.
        device_frequency_mhz: u32 @ 0x4c0 [0x20],
        /// Frequency of the device's internal timer in kHz.
        device_frequency_khz: u32 @ 0x4e0 [0x20],
        /// NVMe-oF target offload is supported (`nvmf_cap` is valid).
        nvmf_target_offload: bool @ 0x502 [0x1],
        /// Number of 4 KiB UARs in one system-size UAR page (with `uar_4k`).
        num_of_uars_per_page: u32 @ 0x520 [0x20],
        /// The protocols the device's flex parsers are configured for, one bit each
        /// (`MLX5_FLEX_PARSER_*`, e.g. [`FLEX_PARSER_GTPU_ENABLED`]).
        flex_parser_protocols: u32 @ 0x540 [0x20],
        /// The flex parser (0..=7) sampling GTP-U's first dword (flags, type, length), with
        /// [`FLEX_PARSER_GTPU_DW_0_ENABLED`].
        flex_parser_id_gtpu_dw_0: u8 @ 0x5e8 [0x4],
        /// The flex parser sampling GTP-U's TEID, with [`FLEX_PARSER_GTPU_TEID_ENABLED`].
        flex_parser_id_gtpu_teid: u8 @ 0x618 [0x4],
        /// The flex parser sampling GTP-U's third dword (sequence number, N-PDU number, next
        /// extension type), with [`FLEX_PARSER_GTPU_DW_2_ENABLED`].
        flex_parser_id_gtpu_dw_2: u8 @ 0x700 [0x4],
        /// The flex parser sampling the first dword of GTP-U's first extension header, with
        /// [`FLEX_PARSER_GTPU_FIRST_EXT_DW_0_ENABLED`].
        flex_parser_id_gtpu_first_ext_dw_0: u8 @ 0x704 [0x4],
        /// Log2 of the maximum stream channels of a DC initiator (DCI streams; 0: none).
        log_max_dci_stream_channels: u8 @ 0x58b [0x5],
        /// Log2 of the maximum errored streams a DC initiator may be given before it moves to
        /// error (0 with `log_max_dci_stream_channels` 0).
        log_max_dci_errored_streams: u8 @ 0x593 [0x5],
        /// Mini-CQEs may carry a striding RQ's stride index
        /// ([`crate::cqe::mini_cqe_res_format::CSUM_STRIDX`]).
        mini_cqe_resp_stride_index: bool @ 0x5bc [0x1],
        /// CQs may be forced to 128-byte CQEs for every completion.
        cqe_128_always: bool @ 0x5bd [0x1],
        /// CQE compression is supported with 128-byte CQEs.
        cqe_compression_128: bool @ 0x5be [0x1],
        /// CQE compression is supported.
        cqe_compression: bool @ 0x5bf [0x1],
        /// CQE compression timeout in microseconds.
        cqe_compression_timeout: u16 @ 0x5c0 [0x10],
        /// Maximum number of CQEs compressed into one session.
        cqe_compression_max_num: u16 @ 0x5d0 [0x10],
        /// Hardware tag matching is supported.
        tag_matching: bool @ 0x5f0 [0x1],
        /// Rendezvous offload on RC QPs is supported.
        rndv_offload_rc: bool @ 0x5f1 [0x1],
        /// Rendezvous offload on DC QPs is supported.
        rndv_offload_dc: bool @ 0x5f2 [0x1],
        /// Log2 of the maximum tag matching list size.
        log_tag_matching_list_sz: u8 @ 0x5f3 [0x5],
        /// Log2 of the maximum number of XRQs.
        log_max_xrq: u8 @ 0x5fb [0x5],
        /// Capabilities a user context may ask for at CREATE_UCTX (`MLX5_UCTX_CAP_RAW_TX`
        /// bit 0, `MLX5_UCTX_CAP_INTERNAL_DEV_RES` bit 1).
        uctx_cap: u32 @ 0x6a0 [0x20],
        /// Predefined match definer formats CREATE_GENERAL_OBJECT of a MATCH_DEFINER takes:
        /// bit `n` for format `n` (rdma-core's `definer_format_sup`, which DR reads to build
        /// a matcher on one definer, dr_matcher.c `dr_matcher_set_definer_builders`).
        match_definer_format_supported: u64 @ 0x7c0 [0x40],
    }
}

layout! {
    /// General device capabilities, second page (`MLX5_CAP_GENERAL_2`, cap type
    /// [`GENERAL_DEVICE_2`](crate::hca::cap_type::GENERAL_DEVICE_2)), offered when
    /// [`CmdHcaCap::hca_cap_2`] is set. Only the fields the model sets or Linux acts on are
    /// named; a ConnectX reports the rest as it chooses and the model leaves them 0.
    pub struct CmdHcaCap2("cmd_hca_cap_2", 0x100) {
        /// Log2 of the number of QP numbers that RESERVED_QPN objects may hold in all.
        log_max_num_reserved_qpn: u8 @ 0x8b [0x5],
        /// Log2 of the fewest QP numbers one RESERVED_QPN object holds: the smallest
        /// `log_obj_range` CREATE_GENERAL_OBJECT takes for it (libmlx5 asks for exactly this
        /// many per object).
        log_reserved_qpn_granularity: u8 @ 0x93 [0x5],
        /// Log2 of the most QP numbers one RESERVED_QPN object holds: the largest
        /// `log_obj_range` CREATE_GENERAL_OBJECT takes for it.
        log_reserved_qpn_max_alloc: u8 @ 0x9b [0x5],
        /// The function may be given a software vHCA id by SET_HCA_CAP (mlx5_core's
        /// `handle_hca_cap_2` then sets it).
        sw_vhca_id_valid: bool @ 0x221 [0x1],
        /// QPs may be created without a send doorbell record (`send_dbr_mode`
        /// [`NO_DBR_INT`](crate::qp::send_dbr_mode::NO_DBR_INT)).
        send_dbr_mode_no_dbr_int: bool @ 0x2e0 [0x1],
        /// QPs may be created without a send doorbell record, rung through the UAR page's
        /// doorbell-less register (`send_dbr_mode`
        /// [`NO_DBR_EXT`](crate::qp::send_dbr_mode::NO_DBR_EXT)).
        send_dbr_mode_no_dbr_ext: bool @ 0x2e1 [0x1],
        /// Log2 of the QPs without a send doorbell record a function may hold at once.
        log_max_send_dbr_less_qp_sq: u8 @ 0x2e3 [0x5],
    }
}

layout! {
    /// Ethernet offload capabilities (`MLX5_CAP_ETHERNET_OFFLOADS`): checksum, VLAN, LRO, LSO,
    /// inline requirements, RSS and tunnel offloads.
    pub struct PerProtocolNetworkingOffloadCaps("per_protocol_networking_offload_caps", 0x100) {
        /// Checksum offload (transmit insertion and receive verification) is supported.
        csum_cap: bool @ 0x0 [0x1],
        /// VLAN stripping on receive is supported.
        vlan_cap: bool @ 0x1 [0x1],
        /// Large receive offload is supported.
        lro_cap: bool @ 0x2 [0x1],
        /// LRO may aggregate segments that carry the TCP PSH flag.
        lro_psh_flag: bool @ 0x3 [0x1],
        /// LRO may aggregate segments that carry the TCP timestamp option.
        lro_time_stamp: bool @ 0x4 [0x1],
        /// Send WQEs may ask the device to insert a VLAN tag.
        wqe_vlan_insert: bool @ 0x7 [0x1],
        /// The TIS/TIR self-loopback enable may be modified.
        self_lb_en_modifiable: bool @ 0x8 [0x1],
        /// Log2 of the maximum LSO message size in bytes (0 = LSO not supported).
        max_lso_cap: u8 @ 0xb [0x5],
        /// Multi-packet send WQEs: 0 not supported; otherwise the supported form.
        multi_pkt_send_wqe: u8 @ 0x10 [0x2],
        /// Headers a send WQE must carry inline: see [`wqe_inline_mode`].
        wqe_inline_mode: u8 @ 0x12 [0x2],
        /// RSS indirection table capability code (RQ table sizes themselves are bounded by
        /// [`CmdHcaCap::log_max_rqt_size`]).
        rss_ind_tbl_cap: u8 @ 0x14 [0x4],
        /// UMR WQEs may be posted on SQ objects (not only on QPs).
        reg_umr_sq: bool @ 0x18 [0x1],
        /// The device may scatter the frame check sequence to memory on receive.
        scatter_fcs: bool @ 0x19 [0x1],
        /// Enhanced multi-packet send WQEs are supported.
        enhanced_multi_pkt_send_wqe: bool @ 0x1a [0x1],
        /// Tunnel LSO keeps the outer IP ID constant.
        tunnel_lso_const_out_ip_id: bool @ 0x1b [0x1],
        /// Stateless offloads (checksum, LSO, RSS) for GRE-tunnelled packets are supported.
        tunnel_stateless_gre: bool @ 0x1e [0x1],
        /// Stateless offloads (checksum, LSO, RSS) for VXLAN-tunnelled packets are supported.
        tunnel_stateless_vxlan: bool @ 0x1f [0x1],
        /// Software parser offloads (header offsets given in the WQE) are supported.
        swp: bool @ 0x20 [0x1],
        /// Checksum offload through the software parser is supported.
        swp_csum: bool @ 0x21 [0x1],
        /// LSO through the software parser is supported.
        swp_lso: bool @ 0x22 [0x1],
        /// GTP-U tunnels are parsed (DPDK's mlx5 PMD offers its `gtp` flow item only with it).
        tunnel_stateless_gtp: bool @ 0x2b [0x1],
        /// Which GENEVE option lengths the device parses, a 1-bit code.
        max_geneve_opt_len: bool @ 0x3e [0x1],
        /// Stateless receive offloads for GENEVE-tunnelled packets are supported.
        tunnel_stateless_geneve_rx: bool @ 0x3f [0x1],
        /// Smallest MSS in bytes that LRO aggregates.
        lro_min_mss_size: u16 @ 0x50 [0x10],
    }
    arrays {
        /// Supported LRO timer periods in microseconds: [`LRO_TIMER_SUPPORTED_PERIODS`] (4)
        /// elements; elements past the fourth are reserved bytes of the layout.
        lro_timer_supported_periods: u32 @ 0x180 [0x20],
    }
}

layout! {
    /// Flow table properties of one table type (`flow_table_prop_layout`): what tables of that
    /// type support and how many of them, their entries and levels there may be.
    pub struct FlowTablePropLayout("flow_table_prop_layout", 0x40) {
        /// Flow tables of this type are supported.
        ft_support: bool @ 0x0 [0x1],
        /// Flow counters may be attached to entries.
        flow_counter: bool @ 0x2 [0x1],
        /// An existing flow entry may be modified in place.
        flow_modify_en: bool @ 0x3 [0x1],
        /// SET_FLOW_TABLE_ROOT may change the root table.
        modify_root: bool @ 0x4 [0x1],
        /// A table's miss may forward to an identified table.
        identified_miss_table_mode: bool @ 0x5 [0x1],
        /// MODIFY_FLOW_TABLE is supported.
        flow_table_modify: bool @ 0x6 [0x1],
        /// Entries may reformat packets by a packet reformat context
        /// (`FLOW_CONTEXT_ACTION_ENCAP`, `packet_reformat_id`).
        reformat: bool @ 0x7 [0x1],
        /// Entries may decapsulate an L2 tunnel (`FLOW_CONTEXT_ACTION_DECAP`).
        decap: bool @ 0x8 [0x1],
        /// Tables of this type may be software-owned (steering entries written into ICM),
        /// first entry format.
        sw_owner: bool @ 0x11 [0x1],
        /// Entries may turn an L3 tunnel into an Ethernet frame (reformat type
        /// `L3_TUNNEL_TO_L2`).
        reformat_l3_tunnel_to_l2: bool @ 0x12 [0x1],
        /// Entries may put an Ethernet frame's IP packet into an L3 tunnel (reformat type
        /// `L2_TO_L3_TUNNEL`).
        reformat_l2_to_l3_tunnel: bool @ 0x13 [0x1],
        /// Tables of this type may be software-owned, in the entry format named by the general
        /// capability `steering_format_version`.
        sw_owner_v2: bool @ 0x1e [0x1],
        /// Log2 of the largest flow table, in entries.
        log_max_ft_size: u8 @ 0x22 [0x6],
        /// Log2 of the modify-header contexts a function may hold.
        log_max_modify_header_context: u8 @ 0x28 [0x8],
        /// Most actions of one modify-header context.
        max_modify_header_actions: u8 @ 0x30 [0x8],
        /// Deepest table level.
        max_ft_level: u8 @ 0x38 [0x8],
        /// Log2 of the flow samplers (general objects of type FLOW_SAMPLER) tables of this
        /// type may use; DPDK's mlx5 PMD offers its `sample` action only when the receive
        /// tables' is above 0 (`sampler_en`, mlx5_os.c).
        log_max_ft_sampler_num: u8 @ 0x48 [0x8],
        /// Log2 of the number of flow tables.
        log_max_ft_num: u8 @ 0x78 [0x8],
        /// Log2 of the number of flow counters.
        log_max_flow_counter: u8 @ 0x90 [0x8],
        /// Log2 of the number of destinations of one flow entry.
        log_max_destination: u8 @ 0x98 [0x8],
        /// Log2 of the number of flow entries.
        log_max_flow: u8 @ 0xb8 [0x8],
    }
    nested {
        /// The fields entries of this type may match on.
        ft_field_support: FlowTableFieldsSupported @ 0x100,
    }
}

layout! {
    /// Fields a flow table type's entries may match on (`flow_table_fields_supported`): the
    /// tunnel fields here, the others (MACs, IP, L4) by every type.
    pub struct FlowTableFieldsSupported("flow_table_fields_supported", 0x10) {
        /// `misc.gre_protocol`.
        outer_gre_protocol: bool @ 0x17 [0x1],
        /// `misc.gre_key_h/l`.
        outer_gre_key: bool @ 0x18 [0x1],
        /// `misc.vxlan_vni`.
        outer_vxlan_vni: bool @ 0x19 [0x1],
        /// `misc.geneve_vni`.
        outer_geneve_vni: bool @ 0x1a [0x1],
        /// `misc.geneve_oam`.
        outer_geneve_oam: bool @ 0x1b [0x1],
        /// `misc.geneve_protocol_type`.
        outer_geneve_protocol_type: bool @ 0x1c [0x1],
        /// `misc.geneve_opt_len`.
        outer_geneve_opt_len: bool @ 0x1d [0x1],
        /// `misc.gre_c_present`.
        outer_gre_c_present: bool @ 0x60 [0x1],
        /// `misc.gre_k_present`.
        outer_gre_k_present: bool @ 0x61 [0x1],
        /// `misc.gre_s_present`.
        outer_gre_s_present: bool @ 0x62 [0x1],
        /// `misc2.inner_first_mpls`: which of its label, exp, bottom-of-stack and TTL fields
        /// (bits 0..=3, mlx5_ib's `MLX5_FIELD_SUPPORT_MPLS_*`).
        inner_first_mpls: u8 @ 0x4d [0x4],
        /// `misc2.outer_first_mpls`: the same four bits.
        outer_first_mpls: u8 @ 0x51 [0x4],
    }
}

layout! {
    /// More fields a flow table type's entries may match on (`flow_table_fields_supported_2`,
    /// rdma-core's mlx5_ifc.h): here the integrity bits of `fte_match_set_lyr_2_4`, outer and
    /// inner. DPDK's mlx5 PMD takes its integrity item only when all eight are set in
    /// [`FlowTableNicCap`]'s receive support (`mlx5_devx_query_pkt_integrity_match`); rdma-core's
    /// software steering puts the checksum and `*_ok` bits in definers of formats 0 and 2
    /// only when the receive bitmask support has `outer_l4_checksum_ok`
    /// (`definer_supp_checksum`, dr_devx.c).
    pub struct FlowTableFieldsSupported2("flow_table_fields_supported_2", 0x10) {
        /// `inner_headers.l3_ok`.
        inner_l3_ok: bool @ 0x17 [0x1],
        /// `inner_headers.l4_ok`.
        inner_l4_ok: bool @ 0x18 [0x1],
        /// `outer_headers.l3_ok`.
        outer_l3_ok: bool @ 0x19 [0x1],
        /// `outer_headers.l4_ok`.
        outer_l4_ok: bool @ 0x1a [0x1],
        /// `inner_headers.ipv4_checksum_ok`.
        inner_ipv4_checksum_ok: bool @ 0x1c [0x1],
        /// `inner_headers.l4_checksum_ok`.
        inner_l4_checksum_ok: bool @ 0x1d [0x1],
        /// `outer_headers.ipv4_checksum_ok`.
        outer_ipv4_checksum_ok: bool @ 0x1e [0x1],
        /// `outer_headers.l4_checksum_ok`.
        outer_l4_checksum_ok: bool @ 0x1f [0x1],
    }
}

layout! {
    /// NIC flow table capabilities (`MLX5_CAP_FLOW_TABLE`): the receive and transmit tables'
    /// properties.
    pub struct FlowTableNicCap("flow_table_nic_cap", 0x1000) {
        /// A flow entry may forward to several TIRs.
        nic_rx_multi_path_tirs: bool @ 0x0 [0x1],
        /// Packet reformat contexts of the general tunnel type (`L2_TO_L2_TUNNEL`: any outer
        /// header) are offered.
        encap_general_header: bool @ 0x20 [0x1],
        /// Log2 of the packet reformat contexts the function may hold.
        log_max_packet_reformat_context: u8 @ 0x2b [0x5],
        /// Most bytes of a packet reformat context's data (10 bits).
        max_encap_header_size: u16 @ 0x36 [0xa],
        /// ICM address where a software steering entry sends a received packet to drop it
        /// (rdma-core's `dr_devx_query_device`: the receive domain's default and drop target).
        sw_steering_nic_rx_action_drop_icm_address: u64 @ 0x2000 [0x40],
        /// ICM address that drops a transmitted packet.
        sw_steering_nic_tx_action_drop_icm_address: u64 @ 0x2040 [0x40],
        /// ICM address that lets a transmitted packet go on to the wire (the transmit
        /// domain's default).
        sw_steering_nic_tx_action_allow_icm_address: u64 @ 0x2080 [0x40],
    }
    nested {
        /// NIC receive tables.
        flow_table_properties_nic_receive: FlowTablePropLayout @ 0x200,
        /// NIC transmit tables.
        flow_table_properties_nic_transmit: FlowTablePropLayout @ 0x800,
        /// More fields NIC receive tables' entries may match on.
        ft_field_support_2_nic_receive: FlowTableFieldsSupported2 @ 0x1400,
        /// Which of those fields NIC receive tables may match under any mask, not only all
        /// ones or zero (rdma-core reads `outer_l4_checksum_ok` here).
        ft_field_bitmask_support_2_nic_receive: FlowTableFieldsSupported2 @ 0x1480,
    }
}

/// Values of [`AtomicCaps::atomic_operations`] (`MLX5_ATOMIC_OPS_*`).
pub mod atomic_ops {
    /// 8-byte compare-and-swap.
    pub const CMP_SWAP: u16 = 1 << 0;
    /// 8-byte fetch-and-add.
    pub const FETCH_ADD: u16 = 1 << 1;
}

/// Bits of [`AtomicCaps::atomic_size_qp`] (`MLX5_ATOMIC_SIZE_QP_8BYTES`): operand sizes an RC
/// QP may use.
pub const ATOMIC_SIZE_QP_8_BYTES: u16 = 1 << 3;

/// Values of [`AtomicCaps::atomic_req_8b_endianness_mode`]
/// (`MLX5_ATOMIC_REQ_MODE_*`): the byte order a requester writes an atomic's original value in.
pub mod atomic_endianness {
    /// Network (big-endian) order, as the value travels.
    pub const BIG_ENDIAN: u8 = 0x0;
    /// The host's order: Linux's mlx5_core asks for it when
    /// [`super::AtomicCaps::supported_atomic_req_8b_endianness_mode_1`] is set.
    pub const HOST: u8 = 0x1;
}

layout! {
    /// Atomic operation capabilities (`MLX5_CAP_ATOMIC`, `atomic_caps`): valid when
    /// [`CmdHcaCap::atomic`] is set. mlx5_ib reports `IB_ATOMIC_HCA` only when compare-and-swap
    /// and fetch-and-add on 8 bytes are supported and the requester answers in host order.
    pub struct AtomicCaps("atomic_caps", 0x100) {
        /// The byte order requesters write atomic results in: see [`atomic_endianness`]
        /// (settable by SET_HCA_CAP).
        atomic_req_8b_endianness_mode: u8 @ 0x40 [0x2],
        /// The host-order requester mode may be chosen.
        supported_atomic_req_8b_endianness_mode_1: bool @ 0x46 [0x1],
        /// Supported operations: see [`atomic_ops`].
        atomic_operations: u16 @ 0x90 [0x10],
        /// Operand sizes on RC QPs (bit n = 2^n bytes).
        atomic_size_qp: u16 @ 0xb0 [0x10],
        /// Operand sizes on DC (bit n = 2^n bytes).
        atomic_size_dc: u16 @ 0xd0 [0x10],
    }
}

/// `flex_parser_protocols`: a flex parser is configured for GTP-U's header (flags, message
/// type, TEID; `MLX5_FLEX_PARSER_GTPU_ENABLED` in Linux's and rdma-core's mlx5_ifc.h).
pub const FLEX_PARSER_GTPU_ENABLED: u32 = 1 << 11;
/// `flex_parser_protocols`: a flex parser samples GTP-U's third dword.
pub const FLEX_PARSER_GTPU_DW_2_ENABLED: u32 = 1 << 16;
/// `flex_parser_protocols`: a flex parser samples the first dword of GTP-U's first extension
/// header (a PDU session container's QFI).
pub const FLEX_PARSER_GTPU_FIRST_EXT_DW_0_ENABLED: u32 = 1 << 17;
/// `flex_parser_protocols`: a flex parser samples GTP-U's first dword.
pub const FLEX_PARSER_GTPU_DW_0_ENABLED: u32 = 1 << 18;
/// `flex_parser_protocols`: a flex parser samples GTP-U's TEID.
pub const FLEX_PARSER_GTPU_TEID_ENABLED: u32 = 1 << 19;
