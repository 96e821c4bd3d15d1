//! The capability set the model reports: maximum and current pages, built from the model's
//! limits. QUERY_HCA_CAP and SET_HCA_CAP (`fw::caps`) read and change it; the engines read the
//! current values they act on (the atomic result order).

use crate::config::EmuConfig;
use cxdirect_hw::caps::{
    atomic_endianness, atomic_ops, port_type, wqe_inline_mode, AtomicCaps, CmdHcaCap, CmdHcaCap2,
    PerProtocolNetworkingOffloadCaps, ATOMIC_SIZE_QP_8_BYTES,
};
use cxdirect_hw::general_obj::{general_obj_types_bit, obj_type};

use crate::objects::limits::{
    LOG_BF_REG_SIZE, LOG_MAX_CQ_SZ, LOG_MAX_DCI_ERRORED_STREAMS, LOG_MAX_DCI_STREAM_CHANNELS,
    LOG_MAX_EQ, LOG_MAX_EQ_SZ, LOG_MAX_KLM_LIST_SIZE, LOG_MAX_LSO, LOG_MAX_MCG, LOG_MAX_MRW_SZ,
    LOG_MAX_MSG, LOG_MAX_QP, LOG_MAX_QP_SZ, LOG_MAX_RA_QP, LOG_MAX_RQT_SIZE, LOG_MAX_WQ_SZ,
    LOG_MAX_XRCD, MAX_QP_MCG, MAX_Q_COUNTERS, MAX_WQE_SZ_RQ, MAX_WQE_SZ_SQ,
    ROCE_ADDRESS_TABLE_SIZE,
};
use crate::objects::limits::{
    LOG_MAX_NUM_RESERVED_QPN, LOG_MAX_SEND_DBR_LESS_QP, LOG_RESERVED_QPN_GRANULARITY,
    LOG_RESERVED_QPN_MAX_ALLOC,
};
use crate::objects::queue_state::MAX_SESSION;
use crate::objects::{icm, memic, pacing, scheduling};
use cxdirect_hw::memic::{DeviceMemCap, MEMIC_BASE_ALIGN};
use cxdirect_hw::odp::OdpCap;
use cxdirect_hw::qos::{element_type_cap, tsar_type_cap, QosCap};
use cxdirect_hw::roce::{l3_type_cap, roce_version_cap, RoceCap, ROCE_V2_UDP_DPORT};

pub(crate) use super::flow_table_caps::{LOG_MAX_FLOW_DESTINATION, MAX_FT_LEVEL};

/// The metadata registers flow meters may write their color into (`flow_meter_reg_id`):
/// reg_c_2 to reg_c_5.
pub(crate) const FLOW_METER_REGISTERS: u8 = 0b0011_1100;

/// Maximum and current capability pages.
#[derive(Debug)]
pub(crate) struct CapSet {
    pub max_general: [u8; 0x100],
    pub current_general: [u8; 0x100],
    pub ethernet: [u8; 0x100],
    /// NIC flow table capabilities: receive tables only, chained by forwarding entries and
    /// table misses, with a settable root, entries modifiable in place (SET_FTE op_mod 1) and
    /// a table's miss re-pointable (MODIFY_FLOW_TABLE); no counters.
    pub flow_table: Box<[u8; 0x1000]>,
    /// RoCE capabilities, maximum and current (`sw_r_roce_src_udp_port` is off until
    /// SET_HCA_CAP turns it on); reported only with [`EmuConfig::roce`].
    pub max_roce: [u8; 0x100],
    pub current_roce: [u8; 0x100],
    /// Atomic capabilities, maximum and current: 8-byte compare-and-swap and fetch-and-add on
    /// RC QPs, the requester's result order settable (big-endian until SET_HCA_CAP asks for
    /// the host's); reported with [`EmuConfig::roce`].
    pub max_atomic: [u8; 0x100],
    pub current_atomic: [u8; 0x100],
    /// The ODP capability page (maximum and current alike), reported with RoCE: RC SENDs,
    /// receives (on the QP's own ring or an SRQ), RDMA WRITEs, RDMA READs (either side) and
    /// atomics (either side) resolve page faults (`engine::rc::page_fault`), as do UD SENDs
    /// and UD receives from an SRQ (`engine::ud::page_fault`), XRC SENDs, XRC SRQ receives,
    /// RDMA WRITEs, READs and atomics, and DC SENDs, DCT SRQ receives, RDMA WRITEs, READs and
    /// atomics; the rest (device prefetch, the memory scheme, the receive caps of transports
    /// without a receive ring of their own) are left 0 (a UD QP's own ring is paged without a
    /// bit, as the page has none for it). Read by Linux only when general `pg` is set;
    /// mlx5_core's `handle_hca_cap_odp` raises `ud_srq_receive`, `rc_srq_receive` and the XRC
    /// and DC caps to their maximum with SET_HCA_CAP, which finds them set already.
    pub odp: [u8; 0x100],
    /// The QoS capability page (maximum and current alike): packet pacing, its entries
    /// owned by uid (`packet_pacing_uid`, which mlx5_ib's `pp_is_supported` asks for), with a
    /// ConnectX-6 Dx-like rate table ([`crate::objects::pacing`]); NIC scheduling elements
    /// (`nic_sq_scheduling`, `nic_bw_share`, `nic_rate_limit`, `nic_qp_scheduling`: DWRR
    /// TSARs and queue groups, [`crate::objects::scheduling`]), so mlx5e's HTB offload
    /// (`mlx5_qos_is_supported`) is on. No e-switch scheduling (`esw_scheduling` 0: the
    /// e-switch's QoS stays off); with [`EmuConfig::sw_steering`], flow meters
    /// (`flow_meter_old`, `flow_meter_reg_id`: [`crate::objects::meter`]).
    pub qos: [u8; 0x100],
    /// The device-memory capability page (maximum and current alike), as
    /// [`crate::objects::memic`] lays the memory out; all zero where BAR0 has no room for it.
    /// With [`EmuConfig::sw_steering`] it names the SW ICM ranges of [`crate::objects::icm`] too.
    pub device_mem: [u8; 0x100],
    /// The second general capability page (cap type 0x20; maximum and current alike),
    /// offered by general `hca_cap_2`: the reserved QP number limits
    /// ([`crate::objects::reserved_qpn`]) and nothing else. Linux 6.12's mlx5_core queries it
    /// at probe (`handle_hca_cap_2`: maximum and current, before INIT_HCA;
    /// `mlx5_query_hca_caps`: current) and, before it was offered, read every
    /// `MLX5_CAP_GEN_2` field as 0 from its zeroed copy: every field it names stays 0 here,
    /// so what mlx5_core, mlx5e and mlx5_ib do is unchanged (`sw_vhca_id_valid` 0: no
    /// SET_HCA_CAP of the page; `log_min_mkey_entity_size` 0: mlx5e's default of 4 KiB;
    /// `ts_cqe_metadata_size2wqe_counter`, `max_reformat_*`, `migratable`, `query_vuid`,
    /// `multiplane` and the rest 0: absent). The three reserved QP number fields are named by
    /// neither Linux's header nor any Linux reader; libmlx5 reads the granularity
    /// (`get_hca_general_caps_2`). libmlx5's doorbell-less send queues
    /// (`send_dbr_mode_no_dbr_ext`) stay off.
    pub general_2: [u8; 0x100],
    pub context_slot: Option<crate::objects::Slot>,
}

impl CapSet {
    pub fn new(cfg: &EmuConfig) -> Self {
        let mut g = CmdHcaCap::zeroed();
        g.set_log_max_cq_sz(LOG_MAX_CQ_SZ)
            .set_log_max_cq(16)
            .set_log_max_eq_sz(LOG_MAX_EQ_SZ)
            .set_log_max_eq(LOG_MAX_EQ)
            .set_log_max_mkey(16)
            .set_log_max_mrw_sz(LOG_MAX_MRW_SZ)
            .set_log_max_klm_list_size(LOG_MAX_KLM_LIST_SIZE)
            .set_log_max_qp_sz(LOG_MAX_QP_SZ)
            .set_log_max_qp(LOG_MAX_QP)
            .set_log_max_ra_req_qp(LOG_MAX_RA_QP)
            .set_log_max_ra_res_qp(LOG_MAX_RA_QP)
            // DC initiators take the RC limits on READs and atomics in flight (mlx5_ib's
            // `validate_rd_atomic` reads these for a DCI).
            .set_log_max_ra_req_dc(LOG_MAX_RA_QP)
            .set_log_max_ra_res_dc(LOG_MAX_RA_QP)
            .set_roce(cfg.roce)
            // The vport's local loopback can be disabled per kind: Linux's
            // mlx5_nic_vport_update_local_lb (vport.c) writes `disable_uc_local_lb` /
            // `disable_mc_local_lb` only when these are advertised, and mlx5_ib counts its
            // transport domains for mlx5_ib_enable_lb only then (main.c).
            .set_disable_local_lb_uc(true)
            .set_disable_local_lb_mc(true)
            // Linux's mlx5_ib refuses a RoCE port without XRC domains; XRC QPs are modelled.
            .set_xrc(cfg.roce)
            // DC: DCTs and DC initiators (`fw::dc`, `engine::rc::dc`); mlx5_ib refuses
            // `mlx5dv_create_qp` with MLX5DV_QP_INIT_ATTR_MASK_DC without it.
            .set_dct(cfg.roce)
            // DCI streams (`engine::rc::dc_streams`): mlx5_ib reports both to libmlx5
            // (`dci_streams_caps`) and takes MLX5_QP_FLAG_DCI_STREAM only when both are
            // non-zero. The values are the model's choice; none is public for a ConnectX.
            .set_log_max_dci_stream_channels(if cfg.roce {
                LOG_MAX_DCI_STREAM_CHANNELS
            } else {
                0
            })
            .set_log_max_dci_errored_streams(if cfg.roce {
                LOG_MAX_DCI_ERRORED_STREAMS
            } else {
                0
            })
            // RTS2RTS_QP takes the QP context extension (a DCI stream's reset). Linux reads
            // the QP error syndrome through it only with `qp_error_syndrome`, left 0.
            .set_qpc_extension(true)
            // RTS2RTS_QP changes a running RC or UC QP's UDP source port (`fw::udp_sport`),
            // which libmlx5 reads before it sends one (`mlx5dv_modify_qp_udp_sport`).
            .set_rts2rts_udp_sport(cfg.roce)
            // RTS2RTS_QP moves a running QP to another Q counter set (`fw::qp`'s optional
            // counter set attribute), as `rdma statistic qp bind` asks of mlx5_ib.
            .set_rts2rts_qp_counters_set_id(cfg.roce)
            // RC atomics (compare-and-swap, fetch-and-add) are executed by the responder.
            .set_atomic(cfg.roce)
            .set_log_max_xrcd(if cfg.roce { LOG_MAX_XRCD } else { 0 })
            // UMR WQEs change a key's translation, page size, PD and access (the REG_UMR QP
            // and fast registration on RC QPs, `engine::umr`): Linux's mlx5_ib then loads
            // MTTs by UMR (`mlx5r_umr_can_load_pas`), keeps its mkey cache, and reports
            // IB_DEVICE_MEM_MGT_EXTENSIONS, which kernel ULPs (nvme-rdma) need for
            // IB_WR_REG_MR. A UMR may change a key's atomic access too: with `atomic` set and
            // this disabled, mlx5_ib's own UMRs (`umr_check_mkey_mask`) fail every user
            // registration from its cache with EPERM. The list pointer may use the reserved
            // lkey (Linux's `local_dma_lkey`). The list's octoword offset takes its bits 47:16
            // (`xlt_offset_47_16`) too: mlx5_ib then loads regions of 2^16 pages or more by
            // UMR in chunks (`mlx5r_umr_can_load_pas`, `mlx5r_umr_update_offset`) from keys of
            // its larger cache orders (`mkey_max_umr_order`) instead of by CREATE_MKEY.
            .set_umr_extended_translation_offset(true)
            .set_umr_modify_entity_size_disabled(false)
            .set_umr_modify_atomic_disabled(false)
            .set_umr_ptr_rlky(true)
            // Memory windows of types 1 and 2 (`engine::window`): mlx5_ib registers
            // ALLOC_MW/DEALLOC_MW (`mlx5_ib_alloc_mw`, a free KLM key) and reports
            // IB_DEVICE_MEM_WINDOW and _TYPE_2B, `max_mw`, and IBK_SG_GAPS_REG (KLM fast
            // registration, modelled) on this bit alone (`mlx5_ib_query_device`).
            .set_imaicl(cfg.roce)
            // Signature handover: T10-DIF keys (`crate::signature`). mlx5_ib reports
            // IBK_INTEGRITY_HANDOVER (types 1 to 3, CRC and IP checksum guards) and takes
            // IB_QP_CREATE_INTEGRITY_EN on its word alone; nvme-rdma, nvmet-rdma and iSER then
            // protect their transfers with integrity keys.
            .set_sho(true)
            // libmlx5's block signatures (`mlx5dv_wr_set_mkey_sig_block`) need the SIG_ERR
            // CQE's domain and signature type (`get_hca_sig_caps`); of its CRC guards the model
            // computes CRC32 and CRC32C. CRC64-XP10 and 4048-byte blocks are not offered (the
            // XP10 polynomial is not public), and a BSF naming them is refused.
            .set_sigerr_domain_and_sig_type(true)
            .set_sig_crc32c(true)
            // Signature pipelining (`engine::rc::sq_drain`): a `drain_sigerr` QP stops its send
            // queue in SQD after a signature error and SQD_RTS_QP resumes it. mlx5_ib tells
            // libmlx5 (MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_SQD2RTS), which then takes
            // MLX5DV_QP_CREATE_SIG_PIPELINING.
            .set_drain_sigerr(true)
            // QUERY_VPORT_COUNTER is answered: mlx5_ib serves the RDMA core's performance
            // management queries (port counters) from it instead of a MAD_IFC.
            .set_vport_counters(true)
            .set_log_max_srq_sz(LOG_MAX_QP_SZ)
            .set_log_max_srq(12)
            .set_max_indirection(16)
            .set_end_pad(true)
            .set_nic_flow_table(true)
            // The e-switch manager of its port, as a ConnectX-6 Dx PF is (`fw::eswitch`):
            // mlx5_core queries the two e-switch pages at probe and creates its e-switch in
            // legacy mode, so `devlink dev eswitch show` answers; with no VFs (no SR-IOV
            // capability) it enables no FDB, and the FDB page offers no tables (`ft_support`
            // 0), so none is ever asked for. `vport_group_manager` makes mlx5e offer DCB
            // (with `qos`) and lets it turn CQE compression on by its slow-PCI rule; LAG needs
            // `lag_master` too, which stays 0.
            .set_vport_group_manager(true)
            .set_eswitch_manager(true)
            // Enhanced transmission selection (`fw::ets`: QTCT and QETCR): mlx5e sets every
            // priority's class and every class's group and share at probe (`mlx5e_ets_init`)
            // and serves `dcb ets` and `dcb maxrate` from them.
            .set_ets(true)
            // Single flow counters (ALLOC_FLOW_COUNTER; no bulks, `flow_counter_bulk_alloc`
            // 0), up to `max_flow_counter` at once. QUERY_FLOW_COUNTER reads any run of
            // consecutive ones; `log_max_flow_counter_bulk` 0 has Linux read one at a time.
            .set_max_flow_counter_15_0((crate::objects::limits::MAX_FLOW_COUNTERS & 0xffff) as u16)
            .set_max_flow_counter_31_16((crate::objects::limits::MAX_FLOW_COUNTERS >> 16) as u16)
            .set_port_type(port_type::ETHERNET)
            .set_num_ports(1)
            .set_log_max_msg(LOG_MAX_MSG)
            .set_max_tc(8)
            .set_cqe_version(1)
            .set_cmdif_checksum(3)
            .set_wq_signature(false)
            .set_eth_net_offloads(true)
            .set_cq_oi(true)
            .set_cq_moderation(true)
            // MODIFY_CQ resizes (`fw::cq`); without it `mlx5_ib_resize_cq` returns -ENOSYS.
            .set_cq_resize(true)
            // Packet pacing: the QoS page below, read by mlx5_core's `mlx5_init_rl_table`
            // and mlx5_ib's `pp_is_supported`; SET_PP_RATE_LIMIT in `fw::pacing`.
            .set_qos(true)
            // Device memory (MEMIC) where BAR0 holds its window: mlx5_core's
            // `mlx5_query_hca_caps` then reads the device-memory page below, and mlx5_ib offers
            // `ibv_alloc_dm` (`max_dm_size`, `handle_alloc_dm_memic`); the commands are
            // `fw::memic`'s.
            // With SW ICM the page is read for its ranges as well (mlx5_core reads it only
            // when this is set), whether or not BAR0 holds MEMIC (its `memic` bit says that).
            .set_device_memory(memic::window_start(cfg.bar0_size).is_some() || cfg.sw_steering)
            // On-demand paging (`engine::rc::page_fault`): mlx5_ib's
            // `mlx5_ib_internal_fill_odp_caps` then reads the ODP page below, and mlx5_core's
            // `handle_hca_cap_odp` (main.c) queries it.
            .set_pg(cfg.odp && cfg.roce)
            // Implicit ODP (IB_ODP_SUPPORT_IMPLICIT in `mlx5_ib_internal_fill_odp_caps`, with
            // `umr_extended_translation_offset` and no `umr_indirect_mkey_disabled`): KSM keys
            // of fixed-size blocks, and the null key (QUERY_SPECIAL_CONTEXTS) their blocks
            // not yet backed name, an access there a page fault (`translate::NULL_MKEY`).
            .set_fixed_buffer_size(cfg.odp && cfg.roce)
            .set_null_mkey(cfg.odp && cfg.roce)
            // A QP created with `block_lb_mc` does not receive the multicast datagrams it sent
            // itself (mlx5_ib reports IB_DEVICE_BLOCK_MULTICAST_LOOPBACK from this and sets the
            // bit for IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK in `create_qp_common`).
            .set_block_lb_mc(true)
            // Multicast groups (ATTACH_TO_MCG): mlx5_ib reports `max_mcast_grp` and
            // `max_mcast_qp_attach` from these (`mlx5_ib_query_device`).
            .set_log_max_mcg(LOG_MAX_MCG)
            .set_max_qp_mcg(MAX_QP_MCG)
            // A UD QP's DETH source QP may be set (`deth_sqpn`): mlx5_ib's GSI layer then opens
            // transmit QPs that send as QP 1 (gsi.c) on an InfiniBand port or with LAG; on
            // this one Ethernet port without LAG it still sends through the GSI QP itself.
            .set_set_deth_sqpn(true)
            .set_uar_4k(true)
            .set_uar_sz(5)
            .set_log_pg_sz(12)
            .set_bf(true)
            .set_driver_version(true)
            .set_log_bf_reg_size(LOG_BF_REG_SIZE)
            .set_max_wqe_sz_sq(MAX_WQE_SZ_SQ)
            .set_max_wqe_sz_rq(MAX_WQE_SZ_RQ)
            .set_log_max_transport_domain(16)
            .set_log_max_pd(16)
            .set_log_max_rq(16)
            .set_log_max_sq(16)
            .set_log_max_tir(12)
            .set_log_max_tis(12)
            .set_basic_cyclic_rcv_wqe(true)
            .set_log_max_rmp(12)
            .set_max_qp_cnt(MAX_Q_COUNTERS)
            .set_modify_rq_counter_set_id(true)
            .set_log_max_rqt(12)
            .set_log_max_rqt_size(LOG_MAX_RQT_SIZE)
            .set_log_max_tis_per_sq(0)
            .set_log_max_wq_sz(LOG_MAX_WQ_SZ)
            // User contexts and umems (DEVX): mlx5_ib opens a whitelist context at probe and
            // offers DEVX only when `log_max_uctx` is non-zero (`mlx5_ib_devx_create`); a
            // ConnectX-6 Dx offers it. The sizes are the model's tables; `uctx_cap` offers raw
            // Ethernet sends (`MLX5_UCTX_CAP_RAW_TX`, which mlx5_ib asks for a CAP_NET_RAW
            // caller), the model sending a DEVX SQ's frames as any SQ's, and not the
            // internal-resources capability, which names nothing the model has.
            .set_log_max_uctx(crate::objects::limits::LOG_MAX_UCTX)
            .set_log_max_umem(crate::objects::limits::LOG_MAX_UMEM)
            .set_uctx_cap(cxdirect_hw::devx::UCTX_CAP_RAW_TX)
            .set_log_max_current_uc_list(4)
            .set_log_max_current_mc_list(8)
            .set_log_max_vlan_list(8)
            .set_num_of_uars_per_page(1)
            // A ConnectX-6 Dx whose firmware configuration gives its flex parsers to GTP-U
            // (`crate::flex_parser`): rdma-core's DR matches GTP-U's header through the tunnel
            // header lookup (`dr_matcher_supp_tnl_gtpu`) and its dwords through the parsers
            // these ids name.
            .set_flex_parser_protocols(crate::flex_parser::PROTOCOLS)
            .set_flex_parser_id_gtpu_dw_0(crate::flex_parser::ID_GTPU_DW_0)
            .set_flex_parser_id_gtpu_teid(crate::flex_parser::ID_GTPU_TEID)
            .set_flex_parser_id_gtpu_dw_2(crate::flex_parser::ID_GTPU_DW_2)
            .set_flex_parser_id_gtpu_first_ext_dw_0(crate::flex_parser::ID_GTPU_FIRST_EXT_DW_0)
            .set_cqe_compression(true)
            // Mini-CQEs with the stride index (`MLX5_CQE_FORMAT_CSUM_STRIDX`): mlx5e asks for
            // them on a striding RQ when this is set (`mlx5e_build_rx_cq_param`), and mlx5_ib
            // offers MLX5_IB_CQE_RES_FORMAT_CSUM_STRIDX to libmlx5 only with it
            // (`mlx5_ib_query_device`, `mini_cqe_res_format_to_hw`).
            .set_mini_cqe_resp_stride_index(true)
            // Padded 128-byte CQEs (`cqe_sz` 2): mlx5_ib reports them to libmlx5
            // (MLX5_IB_QUERY_DEV_RESP_FLAGS_CQE_128B_PAD) and accepts
            // MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD only with this bit (`create_cq_user`);
            // mlx5e pads its own CQs only on a 128-byte cache line.
            .set_cqe_128_always(true)
            // Compression of 128-byte CQEs: mlx5_ib accepts `cqe_comp_en` on a 128-byte CQ
            // only with this bit (`create_cq_user`) and reports it to libmlx5
            // (MLX5_IB_QUERY_DEV_RESP_FLAGS_CQE_128B_COMP), where DPDK's mlx5 PMD on a 128-byte
            // cache line needs it to compress receive completions. A session is laid out as in
            // 64-byte entries, each title and mini-CQE array in its entry's second half, where
            // DPDK reads them (its `struct mlx5_cqe` padded by 64 bytes, `pkt_info` at 64).
            .set_cqe_compression_128(true)
            // Hardware tag matching over RC (`fw::xrq`, `engine::rc::tag_matching`), as a
            // ConnectX-5 or later offers it: mlx5_ib reports `max_num_tags`
            // 2^log_tag_matching_list_sz - 1 and, with `rndv_offload_rc`, IBV_TM_CAP_RC and a
            // 64-byte rendezvous header (`mlx5_ib_query_device`). A list of 1024 entries
            // (log 10) is the model's choice, within the field's range; DC tag matching
            // (`rndv_offload_dc`) is not modelled.
            .set_tag_matching(cfg.roce)
            .set_rndv_offload_rc(cfg.roce)
            .set_log_tag_matching_list_sz(if cfg.roce {
                crate::objects::tm::LOG_TAG_MATCHING_LIST_SZ
            } else {
                0
            })
            .set_log_max_xrq(if cfg.roce { 12 } else { 0 })
            .set_striding_rq(cfg.striding_rq)
            // Down to 8 strides a WQE: mlx5e keeps 2 KiB strides (one frame a stride, linear
            // SKBs) in its 256 KiB WQEs only with this (`mlx5e_verify_rx_mpwqe_strides`), and
            // otherwise prefers its legacy RQ (`mlx5e_build_rq_params`).
            .set_ext_stride_num_range(cfg.striding_rq)
            .set_log_min_stride_sz_rq(cxdirect_hw::wq::striding::LOG_STRIDE_BYTES_BASE)
            .set_log_max_stride_sz_rq(cxdirect_hw::wq::striding::MAX_LOG_STRIDE_BYTES)
            .set_cqe_compression_max_num(MAX_SESSION)
            // The second general page (below) and three general object types: blocks of reserved
            // QP numbers, which libmlx5's `mlx5dv_reserved_qpn_alloc` asks for
            // (`general_obj_types_caps & (1ULL << MLX5_OBJ_TYPE_RESERVED_QPN)`) and rdma-core's
            // RDMA CM DC tests hand to the peer as a connection's QP number; and NIC scheduling
            // elements, which libmlx5's `mlx5dv_sched_*` create as general objects (it checks
            // the QoS page rather than this bit, which says the type is taken).
            .set_hca_cap_2(true)
            .set_general_obj_types(
                general_obj_types_bit(obj_type::RESERVED_QPN)
                    | general_obj_types_bit(obj_type::SCHEDULING_ELEMENT)
                    // AV-to-QP mappings, which libmlx5's `mlx5dv_map_ah_to_qp` creates when
                    // this bit is set (a hint for congestion control, which the model does
                    // not run: kept and queried, no traffic changed).
                    | general_obj_types_bit(obj_type::AV_QP_MAPPING)
                    // SW ICM only when asked for (`EmuConfig::sw_steering`): mlx5_core's
                    // `mlx5_dm_create` keys its SW ICM allocator on this bit.
                    // Flow samplers, flow meters and match definers too: only software
                    // steering entries reach or name one.
                    | if cfg.sw_steering {
                        general_obj_types_bit(obj_type::SW_ICM)
                            | general_obj_types_bit(obj_type::FLOW_SAMPLER)
                            | general_obj_types_bit(obj_type::FLOW_METER)
                            | general_obj_types_bit(obj_type::MATCH_DEFINER)
                    } else {
                        0
                    },
            )
            // Every predefined definer format rdma-core's DR builds matchers on, with software
            // steering: DR tries them in its order (0, 2, 16, 22, 24, 25, the IPv6 pair 26
            // and 6, 28, 33) and puts a matcher whose mask one takes whole on a definer of it,
            // the rest on its legacy lookups as before (`crate::sw_steering::definer`). Which
            // formats a ConnectX-6 Dx reports is not public; a field the model does not
            // project is refused in a definer's mask, so DR falls back to its legacy lookups.
            .set_match_definer_format_supported(if cfg.sw_steering {
                use cxdirect_hw::definer::format::*;
                [
                    DEF0, DEF2, DEF6, DEF16, DEF22, DEF24, DEF25, DEF26, DEF28, DEF33,
                ]
                .iter()
                .fold(0, |bits, f| bits | 1 << f)
            } else {
                0
            })
            // Steering entries in the ConnectX-6 Dx format (STEv1,
            // `MLX5_HW_CONNECTX_6DX`), the one `crate::sw_steering` walks.
            .set_steering_format_version(1)
            .set_device_frequency_khz(1_000_000);
        let mut max_general = [0u8; 0x100];
        max_general.copy_from_slice(g.as_bytes());
        g.set_cmdif_checksum(0);
        let mut current_general = [0u8; 0x100];
        current_general.copy_from_slice(g.as_bytes());

        let mut e = PerProtocolNetworkingOffloadCaps::zeroed();
        e.set_csum_cap(true)
            .set_vlan_cap(true)
            .set_wqe_vlan_insert(true)
            .set_self_lb_en_modifiable(true)
            .set_max_lso_cap(if cfg.lso { LOG_MAX_LSO } else { 0 })
            .set_multi_pkt_send_wqe(0)
            .set_enhanced_multi_pkt_send_wqe(cfg.multi_packet_send)
            // SQs created with `reg_umr` may post UMR WQEs (`engine::sq_umr`): Linux's mlx5e
            // opens its striding RQs only with this, `striding_rq` and `umr_ptr_rlky`
            // (`mlx5e_check_fragmented_striding_rq_cap`), and its ICOSQ asks for it
            // (`mlx5e_build_icosq_param`: `reg_umr` = this bit). Striding RQs come with it.
            .set_reg_umr_sq(cfg.striding_rq)
            .set_wqe_inline_mode(wqe_inline_mode::NOT_REQUIRED)
            // GTP-U parsed (see `flex_parser_protocols`): DPDK's mlx5 PMD takes its `gtp` item
            // only with this bit (`flow_dv_validate_item_gtp`).
            .set_tunnel_stateless_gtp(true)
            .set_rss_ind_tbl_cap(LOG_MAX_RQT_SIZE);
        let mut ethernet = [0u8; 0x100];
        let n = e.as_bytes().len().min(0x100);
        ethernet[..n].copy_from_slice(&e.as_bytes()[..n]);
        let flow_table = super::flow_table_caps::page(cfg);
        let mut r = RoceCap::zeroed();
        r.set_sw_r_roce_src_udp_port(true)
            .set_fl_rc_qp_when_roce_disabled(true)
            .set_fl_rc_qp_when_roce_enabled(true)
            // Free-running timestamps only (MLX5_TIMESTAMP_FORMAT_CAP_FREE_RUNNING), a
            // ConnectX-6 Dx's default configuration; real time is an mlxconfig option. mlx5_ib
            // refuses a QP on a timestamping CQ unless free running is offered (get_ts_format).
            .set_qp_ts_format(0)
            .set_l3_type(l3_type_cap::IPV4 | l3_type_cap::IPV6)
            .set_roce_version(roce_version_cap::V2)
            .set_r_roce_dest_udp_port(ROCE_V2_UDP_DPORT)
            .set_r_roce_min_src_udp_port(0xc000)
            .set_r_roce_max_src_udp_port(0xffff)
            .set_roce_address_table_size(ROCE_ADDRESS_TABLE_SIZE);
        let mut max_roce = [0u8; 0x100];
        max_roce.copy_from_slice(r.as_bytes());
        r.set_sw_r_roce_src_udp_port(false);
        let mut current_roce = [0u8; 0x100];
        current_roce.copy_from_slice(r.as_bytes());
        let mut a = AtomicCaps::zeroed();
        a.set_supported_atomic_req_8b_endianness_mode_1(true)
            .set_atomic_operations(atomic_ops::CMP_SWAP | atomic_ops::FETCH_ADD)
            .set_atomic_size_qp(ATOMIC_SIZE_QP_8_BYTES)
            .set_atomic_size_dc(ATOMIC_SIZE_QP_8_BYTES);
        let mut current_atomic = [0u8; 0x100];
        current_atomic.copy_from_slice(a.as_bytes());
        a.set_atomic_req_8b_endianness_mode(atomic_endianness::HOST);
        let mut max_atomic = [0u8; 0x100];
        max_atomic.copy_from_slice(a.as_bytes());
        let mut o = OdpCap::zeroed();
        o.set_rc_send(true)
            .set_rc_receive(true)
            .set_rc_write(true)
            .set_rc_read(true)
            .set_rc_atomic(true)
            .set_rc_srq_receive(true)
            // UD SENDs' gather and UD receives from an SRQ (`engine::ud::page_fault`).
            .set_ud_send(true)
            .set_ud_srq_receive(true)
            // XRC initiators and targets as RC QPs, receives from XRC SRQs
            // (`engine::rc::page_fault`); an XRC target has no receive queue of its own, so
            // `xrc_receive` stays 0.
            .set_xrc_send(true)
            .set_xrc_write(true)
            .set_xrc_read(true)
            .set_xrc_atomic(true)
            .set_xrc_srq_receive(true)
            // DC initiators as RC requesters (atomics' results included), DCTs' responder
            // contexts as RC responders (atomics' targets included) receiving from the DCT's
            // SRQ (`engine::rc::page_fault`); a DCT has no receive queue of its own
            // (`dc_receive` 0).
            .set_dc_send(true)
            .set_dc_write(true)
            .set_dc_read(true)
            .set_dc_atomic(true)
            .set_dc_srq_receive(true);
        let mut odp = [0u8; 0x100];
        odp.copy_from_slice(o.as_bytes());
        let mut q = QosCap::new([0u8; 0x100]).expect("a page holds the QoS page");
        q.set_packet_pacing(true)
            .set_packet_pacing_uid(true)
            // Burst bound and typical size are kept per entry (mlx5_ib then offers
            // MLX5_IB_PP_SUPPORT_BURST); the model does not shape by them.
            .set_packet_pacing_burst_bound(true)
            .set_packet_pacing_typical_size(true)
            .set_packet_pacing_max_rate(pacing::MAX_RATE_KBPS)
            .set_packet_pacing_min_rate(pacing::MIN_RATE_KBPS)
            .set_packet_pacing_rate_table_size(pacing::RATE_TABLE_SIZE)
            // NIC scheduling elements (`fw::scheduling`): DWRR TSARs and queue groups with
            // shares and rate limits, which send queues (mlx5e's HTB offload, libmlx5's raw
            // packet QPs) and QPs (`nic_qp_scheduling`, libmlx5's
            // `mlx5dv_modify_qp_sched_elem`) name. mlx5_core's `mlx5_qos_is_supported` then
            // holds, so mlx5e offers HTB offload and sizes its transmit queues by
            // `log_max_qos_nic_queue_group`. No e-switch scheduling.
            .set_nic_sq_scheduling(true)
            .set_nic_bw_share(true)
            .set_nic_rate_limit(true)
            .set_nic_qp_scheduling(true)
            .set_log_max_qos_nic_queue_group(scheduling::LOG_MAX_QUEUE_GROUPS)
            .set_nic_element_type(element_type_cap::TSAR | element_type_cap::QUEUE_GROUP)
            .set_nic_tsar_type(tsar_type_cap::DWRR);
        if cfg.sw_steering {
            // Flow meters (`fw::meter`), which only software steering entries reach: the
            // older meter object rdma-core's `mlx5dv_dr_action_create_flow_meter` and
            // DPDK's mlx5 PMD create on ConnectX-5 and later. The color registers offered
            // are the model's choice (which a ConnectX-6 Dx offers is not public): reg_c_2
            // to reg_c_5, leaving reg_c_0 and reg_c_1 to the e-switch's vport metadata, as
            // DPDK's PMD does (`mlx5_os.c` masks them out before it picks a color register).
            q.set_flow_meter_old(true)
                .set_flow_meter(true)
                .set_log_max_flow_meter(crate::objects::limits::LOG_MAX_FLOW_METER)
                .set_flow_meter_reg_id(FLOW_METER_REGISTERS);
        }
        let qos = q.into_inner();
        let mut dm = DeviceMemCap::new([0u8; 0x100]).expect("a page holds the device-memory page");
        if let Some(base) = memic::window_start(cfg.bar0_size) {
            dm.set_memic(true)
                .set_log_min_memic_alloc_size(MEMIC_BASE_ALIGN)
                .set_log_max_memic_addr_alignment(memic::LOG_MAX_ADDR_ALIGNMENT)
                .set_memic_bar_start_addr(base)
                .set_memic_bar_size(memic::MEMIC_SIZE as u32)
                .set_max_memic_size(memic::MEMIC_SIZE as u32)
                .set_memic_operations(memic::OPERATIONS)
                .set_memic_atomic_increment_size(memic::ATOMIC_SIZES)
                .set_memic_atomic_test_and_set_size(memic::ATOMIC_SIZES);
        }
        if cfg.sw_steering {
            // The three SW ICM ranges (`objects::icm`); no indirect-encap range (its log size
            // 0 has rdma-core skip the encap pool).
            dm.set_steering_sw_icm_start_address(icm::STEERING_START)
                .set_log_steering_sw_icm_size(icm::LOG_STEERING_SIZE)
                .set_header_modify_sw_icm_start_address(icm::HEADER_MODIFY_START)
                .set_log_header_modify_sw_icm_size(icm::LOG_HEADER_MODIFY_SIZE)
                .set_header_modify_pattern_sw_icm_start_address(icm::PATTERN_START)
                .set_log_header_modify_pattern_sw_icm_size(icm::LOG_PATTERN_SIZE)
                .set_log_sw_icm_alloc_granularity(icm::LOG_ALLOC_GRANULARITY);
        }
        let device_mem = dm.into_inner();
        let mut c2 = CmdHcaCap2::new([0u8; 0x100]).expect("a page holds HCA_CAP_2");
        c2.set_log_max_num_reserved_qpn(LOG_MAX_NUM_RESERVED_QPN)
            .set_log_reserved_qpn_granularity(LOG_RESERVED_QPN_GRANULARITY)
            .set_log_reserved_qpn_max_alloc(LOG_RESERVED_QPN_MAX_ALLOC)
            // QPs without a send doorbell record, rung through the UAR page's doorbell-less
            // register (rdma-core's DevX test posts to one); the counter kept inside the
            // device (NO_DBR_INT) is not offered.
            .set_send_dbr_mode_no_dbr_ext(true)
            .set_log_max_send_dbr_less_qp_sq(LOG_MAX_SEND_DBR_LESS_QP);
        let general_2 = c2.into_inner();
        Self {
            device_mem,
            general_2,
            odp,
            qos,
            max_atomic,
            current_atomic,
            max_general,
            current_general,
            ethernet,
            flow_table,
            max_roce,
            current_roce,
            context_slot: None,
        }
    }

    /// The current general capabilities.
    pub fn general(&self) -> CmdHcaCap<&[u8]> {
        CmdHcaCap::new(&self.current_general[..]).expect("capability page has the layout's size")
    }

    /// The second general capability page.
    pub fn general_2(&self) -> CmdHcaCap2<&[u8]> {
        CmdHcaCap2::new(&self.general_2[..]).expect("capability page has the layout's size")
    }

    /// The QoS capability page.
    pub fn qos(&self) -> QosCap<&[u8]> {
        QosCap::new(&self.qos[..]).expect("capability page has the layout's size")
    }

    /// True when the driver turned command-interface checksums on.
    pub fn checksums_on(&self) -> bool {
        self.general().cmdif_checksum() != 0
    }

    /// True when requesters write an atomic's original value in the host's (little-endian)
    /// order, as Linux's mlx5_core asks; false for network order.
    pub fn atomic_result_host_order(&self) -> bool {
        AtomicCaps::new(&self.current_atomic[..])
            .map(|a| a.atomic_req_8b_endianness_mode() == atomic_endianness::HOST)
            .unwrap_or(false)
    }
}
