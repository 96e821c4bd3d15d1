//! The function's limits: the sizes of its object tables, queues and WQEs. The firmware reports
//! them as capabilities (`fw::caps`) and its command handlers and the queue engines enforce
//! them, so a driver that trusts the caps stays inside them.

/// Log2 of the number of EQs.
pub(crate) const LOG_MAX_EQ: u8 = 6;
/// Log2 of the largest EQ.
pub(crate) const LOG_MAX_EQ_SZ: u8 = 16;
/// Log2 of the largest CQ.
pub(crate) const LOG_MAX_CQ_SZ: u8 = 22;
/// Log2 of the largest work queue (SQ, RQ, RMP).
pub(crate) const LOG_MAX_WQ_SZ: u8 = 16;
/// Log2 of the largest QP send or receive queue and of the largest SRQ (`log_max_qp_sz`,
/// `log_max_srq_sz`): the QP and SRQ contexts hold their sizes in 4-bit fields (`log_sq_size`,
/// `log_rq_size`, `log_srq_size`), and a ConnectX-6 Dx reports 2^15 (`max_qp_wr` 32,768).
/// mlx5_ib sizes a queue up to the reported limit and writes `ilog2` of it into the field, so
/// a larger report would reach the device as a queue of one entry.
pub(crate) const LOG_MAX_QP_SZ: u8 = 15;
/// Log2 of the largest RQ table.
pub(crate) const LOG_MAX_RQT_SIZE: u8 = 11;
/// Largest send WQE in bytes.
pub(crate) const MAX_WQE_SZ_SQ: u16 = 1024;
/// Largest receive WQE in bytes.
pub(crate) const MAX_WQE_SZ_RQ: u16 = 1024;
/// Log2 of the largest LSO message (headers and payload) in bytes (`max_lso_cap`): 256 KiB.
pub(crate) const LOG_MAX_LSO: u8 = 18;
/// The largest LSO message in bytes.
pub(crate) const MAX_LSO_BYTES: usize = 1 << LOG_MAX_LSO;
/// Log2 of the BlueFlame register size in bytes.
pub(crate) const LOG_BF_REG_SIZE: u8 = 9;
/// Log2 of the largest memory key length in bytes.
pub(crate) const LOG_MAX_MRW_SZ: u8 = 48;
/// Log2 of the largest KLM list.
pub(crate) const LOG_MAX_KLM_LIST_SIZE: u8 = 16;
/// Q counter sets a function may allocate (`max_qp_cnt`; set ids 1..=this).
pub(crate) const MAX_Q_COUNTERS: u16 = 64;
/// Log2 of the number of QPs (`log_max_qp`).
pub(crate) const LOG_MAX_QP: u8 = 16;
/// Log2 of the number of datagram (UD and GSI) QPs, numbered apart from the RC QPs.
pub(crate) const LOG_MAX_UD_QP: u8 = 12;
/// Log2 of the largest message (`log_max_msg`): 1 GiB.
pub(crate) const LOG_MAX_MSG: u8 = 30;
/// Log2 of outstanding RDMA reads and atomics per QP, as requester and as responder
/// (`log_max_ra_req_qp`, `log_max_ra_res_qp`).
pub(crate) const LOG_MAX_RA_QP: u8 = 4;
/// Entries of the port's RoCE address (GID) table (`roce_address_table_size`).
pub(crate) const ROCE_ADDRESS_TABLE_SIZE: u16 = 128;

/// Log2 of the number of multicast groups (`log_max_mcg`).
pub(crate) const LOG_MAX_MCG: u8 = 12;
/// QPs one multicast group holds at most (`max_qp_mcg`; a ConnectX reports 240).
pub(crate) const MAX_QP_MCG: u32 = 240;

/// Log2 of the number of XRC domains (`log_max_xrcd`).
pub(crate) const LOG_MAX_XRCD: u8 = 16;
/// Largest flow table: 2^16 entries.
pub(crate) const LOG_MAX_FT_SIZE: u8 = 16;

/// Log2 of the DCTs a function may create.
pub(crate) const LOG_MAX_DCT: u8 = 12;

/// Log2 of the most stream channels a DC initiator may have (`log_max_dci_stream_channels`):
/// the model's choice of a value a ConnectX plausibly reports (none is public).
pub(crate) const LOG_MAX_DCI_STREAM_CHANNELS: u8 = 4;

/// Log2 of the most errored streams a DC initiator may be given
/// (`log_max_dci_errored_streams`): the model's choice, as above.
pub(crate) const LOG_MAX_DCI_ERRORED_STREAMS: u8 = 3;
/// Log2 of the user contexts (CREATE_UCTX) the model holds at once. Linux reads the cap only as
/// "DEVX present or not" (`mlx5_ib_devx_create`); 1024 contexts is far more than a rig opens.
pub(crate) const LOG_MAX_UCTX: u8 = 10;
/// Log2 of the umems (CREATE_UMEM) the model holds at once.
pub(crate) const LOG_MAX_UMEM: u8 = 16;
/// Flow counters the function holds at once (`max_flow_counter`): the model's choice, within
/// the 32-bit field; Linux allocates one per counted rule.
pub(crate) const MAX_FLOW_COUNTERS: u32 = 1 << 12;
/// Log2 of the counters one flow entry may list (`log_max_flow_counter` of the receive
/// tables, which Linux's `mlx5_cmd_set_fte` holds an entry's list to): the model's choice.
pub(crate) const LOG_MAX_FLOW_COUNTERS_PER_ENTRY: u8 = 4;

/// Log2 of the QP numbers RESERVED_QPN objects may hold in all (`log_max_num_reserved_qpn`):
/// the size of their own region of the QP number space.
pub(crate) const LOG_MAX_NUM_RESERVED_QPN: u8 = 16;
/// Log2 of the fewest QP numbers one RESERVED_QPN object holds
/// (`log_reserved_qpn_granularity`): one. libmlx5 asks for exactly this many per object
/// (`reserved_qpn_blk_alloc`), so each `mlx5dv_reserved_qpn_alloc` past a full block makes one
/// object. A ConnectX's value is not public; any value up to the maximum below serves libmlx5.
pub(crate) const LOG_RESERVED_QPN_GRANULARITY: u8 = 0;
/// Log2 of the most QP numbers one RESERVED_QPN object holds (`log_reserved_qpn_max_alloc`).
pub(crate) const LOG_RESERVED_QPN_MAX_ALLOC: u8 = 12;

/// Log2 of the QPs without a send doorbell record a function may hold at once
/// (`log_max_send_dbr_less_qp_sq`): the model's choice, a sixteenth of its QP numbers. A
/// ConnectX's value is not public.
pub(crate) const LOG_MAX_SEND_DBR_LESS_QP: u8 = LOG_MAX_QP - 4;

/// Most bytes of a packet reformat context's data (`max_encap_header_size`): an outer
/// Ethernet, IPv6 and UDP header with a GENEVE header and 64 bytes of its options.
pub(crate) const MAX_ENCAP_HEADER_SIZE: u16 = 14 + 40 + 8 + 8 + 64;
/// Log2 of the packet reformat contexts a function may hold at once
/// (`log_max_packet_reformat_context`).
pub(crate) const LOG_MAX_PACKET_REFORMAT_CONTEXT: u8 = 12;
/// Log2 of the modify-header contexts a function may hold at once
/// (`log_max_modify_header_context`).
pub(crate) const LOG_MAX_MODIFY_HEADER_CONTEXT: u8 = 12;

/// AV-to-QP mappings a function may hold at once (the model's choice; no capability names
/// it): one per address handle of as many handles as QPs.
pub(crate) const MAX_AV_QP_MAPPINGS: u32 = 1 << LOG_MAX_QP;
/// Log2 of the flow samplers a function may hold at once (the model's choice), reported as the
/// NIC receive tables' `log_max_ft_sampler_num`.
pub(crate) const LOG_MAX_FLOW_SAMPLERS: u8 = 12;
/// Flow samplers a function may hold at once.
pub(crate) const MAX_FLOW_SAMPLERS: u32 = 1 << LOG_MAX_FLOW_SAMPLERS;
/// Log2 of the flow meters a function may hold at once (`log_max_flow_meter`; the model's
/// choice).
pub(crate) const LOG_MAX_FLOW_METER: u8 = 12;
/// The first match definer number. A steering entry names a definer in 8 bits
/// (`match_definer_ctx_idx`, `hash_definer_ctx_idx`), where the legacy lookup types take the
/// low numbers (`enum dr_ste_v1_lu_type`: up to 0x17, with 0x0f "don't care" and 0xff
/// "invalid"), so the model numbers definers from 0x20 (its choice: the device's numbering
/// is not public).
pub(crate) const FIRST_MATCH_DEFINER: u32 = 0x20;
/// Match definers a function may hold at once: numbers 0x20..=0xfe.
pub(crate) const MAX_MATCH_DEFINERS: u32 = 0xff - FIRST_MATCH_DEFINER;
/// Most actions of one modify-header context (`max_modify_header_actions`).
pub(crate) const MAX_MODIFY_HEADER_ACTIONS: u8 = 32;
