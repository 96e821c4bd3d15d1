//! cxdirect-emu: a model of a ConnectX-6 Dx PCI function — config space, BAR0, the firmware's
//! command processing, object tables, queue engines, an IOMMU model, wires, PCIe transaction
//! counters and fault injection.
//!
//! It depends only on `cxdirect-hw`, never on the driver: the model and the driver are two
//! independent readings of the manual. Start at [`Device`]: create one (or a wired pair), map
//! host memory into its [`Iommu`](dma::Iommu), enable memory decoding and bus mastering through
//! config space, and drive it with MMIO reads and writes at BAR0 offsets, as a driver would.
//! [`testkit`] does exactly that by hand, for tests and fuzzing.
//!
//! # What the model presents
//!
//! | item | value |
//! |---|---|
//! | PCI IDs | vendor 0x15b3, device 0x101d (ConnectX-6 Dx), class 0x020000 |
//! | BAR0 | 64-bit prefetchable, 32 MiB: init segment at 0, MSI-X table at 0x2000, PBA at 0x3000, UAR pages from index 4 |
//! | MSI-X | 64 vectors |
//! | vendor-specific capability | at 0xc0, 0x18 bytes: the gateway lock and the semaphore domain mlx5_core takes its software-reset semaphore in (`pci_vsc`); the CR space not served |
//! | firmware | 22.39.1002, command interface revision 5, 32 command slots of 64 bytes |
//! | pages | 16 boot, 64 init; more asked for by PAGE_REQUEST (16 at a time) when context space runs low, offered back when 32 pages lie empty |
//! | ISSI | 0 and 1 |
//! | general caps (max = current unless noted) | log_max_eq 6, log_max_eq_sz 16, log_max_cq 16, log_max_cq_sz 22, log_max_sq/rq 16, log_max_wq_sz 16, log_max_qp_sz and log_max_srq_sz 15 (the QP and SRQ contexts' 4-bit size fields), log_max_rmp 12, log_max_tir/tis/rqt 12, log_max_rqt_size 11, log_max_mkey 16, log_max_mrw_sz 48, log_max_pd/transport_domain 16, log_bf_reg_size 9, max_wqe_sz_sq/rq 1024, cqe_version 1, port_type Ethernet, num_ports 1, cmdif_checksum max 3 / current 0, uar_4k, end_pad (WQ end_padding_mode none or cache-line align; the two reserved modes refused), cq_oi, basic_cyclic_rcv_wqe, nic_flow_table, max_qp_cnt 64 (Q counter sets counting out_of_buffer for RQs and the RC transport's counters for the QPs naming them), modify_rq_counter_set_id, cqe_compression (cqe_compression_max_num 64; basic layout, hash or checksum mini-CQEs, the checksum's next two bytes reserved), mini_cqe_resp_stride_index (checksum and stride index mini-CQEs, format 3), cqe_128_always (padded 128-byte CQEs, `cqe_sz` 2: the device writes the whole entry, its first half as zeros), cqe_compression_128 (compressed sessions in 128-byte entries), striding_rq (cyclic striding RQs, and the linked-list ones mlx5e opens (`wq_type` 2, WQEs taken in next-segment order), of 8..65,536 strides (`ext_stride_num_range`) of 64..8,192 bytes, two-byte shift; off with `EmuConfig::striding_rq`), reg_umr_sq with striding_rq (UMR WQEs on SQs created with `reg_umr`, as mlx5e maps its striding WQEs' pages), log_max_qp 16, log_max_msg 30, log_max_ra_req_qp/ra_res_qp 4, log_max_ra_req_dc/ra_res_dc 4, dct 1 with RoCE (DCTs by CREATE_DCT, DRAIN_DCT with its DCT_DRAINED event, QUERY_DCT, ARM_DCT_FOR_KEY_VIOLATION with its DCT_KEY_VIOLATION event, and DESTROY_DCT; DC initiator QPs whose WQEs' address vectors name a DCT and its access key; the DC wire format is the model's own), log_max_dci_stream_channels 4 and log_max_dci_errored_streams 3 with RoCE (the model's choice: DCI streams, an errored stream flushed until RTS2RTS resets it through the QP context extension, `qpc_extension`), rts2rts_qp_udp_sport with RoCE (RTS2RTS_QP changes a running RC or UC QP's UDP source port), roce 1 (0 with `EmuConfig::roce` off), xrc 1 and log_max_xrcd 16 with RoCE (Linux's mlx5_ib refuses a RoCE port without them; XRC domains, XRC SRQs (linked lists) and XRC initiator and target QPs: requests carry the XRCETH, a target takes SENDs from the named SRQ of its domain and completes them on the SRQ's CQ), atomic (an atomic page: 8-byte compare-and-swap and fetch-and-add on QPs, the requester's result order settable to the host's), UMR translation and atomic-access changes (`umr_modify_entity_size_disabled` and `umr_modify_atomic_disabled` 0), umr_extended_translation_offset (list offsets past 16 bits of octowords, `xlt_offset_47_16`), umr_ptr_rlky (UMR WQEs on the REG_UMR QP and on RC QPs: enable, disable, load translations, PD and access, fast registration, local invalidation), umr_fence strong, sho (signature handover: CREATE_PSV/DESTROY_PSV, `bsf_en` KLM keys, the signature UMR with its BSF and SET_PSV, as mlx5_ib and libmlx5's `mlx5dv_wr_mkey_configure` build them; T10-DIF types 1 to 3 with CRC16 or IP checksum guards, and CRC32 / CRC32C block signatures, inserted, checked, copied and stripped through the key when the RC transport reads or writes it, a failed check reported as a SIG_ERR CQE naming its domain once per registration; blocks of 512, 520, 4096 or 4160 bytes), sigerr_domain_and_sig_type, sig_crc32c (no sig_crc64_xp10, no sig_block_4048), drain_sigerr (signature pipelining: a `drain_sigerr` QP stops in SQD after a signature error, raises SQ_DRAINED, and SQD_RTS_QP resumes it), vport_counters (QUERY_VPORT_COUNTER, RoCE counted apart from Ethernet; no MAD_IFC), disable_local_lb_uc and disable_local_lb_mc (the NIC vport's local-loopback bits), tag_matching, rndv_offload_rc, log_tag_matching_list_sz 10 and log_max_xrq 12 with RoCE (tag-matching XRQs over RC: CREATE/QUERY/ARM/DESTROY_XRQ, TAG_MATCHING list operations, eager, unexpected and no-tag receives, the device's rendezvous READ and FIN; no DC tag matching, `rndv_offload_dc` 0) |
//! | RoCE caps (type 4, only with `EmuConfig::roce`) | RoCE v2, IPv4 and IPv6 L3 types (`l3_type` bits 1 and 2), UDP port 4791, source ports 0xc000..0xffff, roce_address_table_size 128, fl_rc_qp_when_roce_disabled/enabled, sw_r_roce_src_udp_port max 1 / current 0 (the one settable field) |
//! | QPs | CREATE_QP (RC; UD and the GSI QP (QP1) Linux's MAD layer opens, carrying datagrams and MADs; the REG_UMR QP, with no PD; own receive ring, RMP via `rq_type` 1, or zero-length), RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, 2ERR, 2RST, QUERY_QP, DESTROY_QP: the state machine and Linux's optional-attribute masks enforced, paths force-loopback or RoCE v2 (RoCE enabled on the vport, source GID in the table); SET/QUERY_ROCE_ADDRESS with `EmuConfig::roce`; RoCE v2 RC transport on the wire |
//! | Ethernet caps | csum_cap, vlan_cap (an RQ created without `vsd` strips a first 802.1Q tag into the CQE; MODIFY_RQ's VSD bit), wqe_vlan_insert, self_lb_en_modifiable, wqe_inline_mode = not required, max_lso_cap 18 (LSO messages up to 256 KiB, cut by MSS with headers replicated, IPv4 id and TCP sequence advanced, FIN/PSH on the last segment and CWR on the first, checksums per segment; 0 with `EmuConfig::lso` off), enhanced multi-packet send WQE on any SQ (unless `EmuConfig::multi_packet_send` is off; the legacy multi-packet WQE is not offered) |
//! | flow table caps (type 7) | NIC receive and transmit, each: ft_support, modify_root, flow_modify_en, identified_miss_table_mode, flow_table_modify, log_max_ft_size 16, max_ft_level 127, log_max_ft_num 10, log_max_destination 6, log_max_flow 16, flow_counter with log_max_flow_counter 4 (ALLOC/DEALLOC/QUERY_FLOW_COUNTER: single counters, 4096 at once, bulk queries); transmit tables steer every frame an Ethernet SQ sends (allow, drop, forward, count); tunnel fields matched (`ft_field_support`: GENEVE VNI, O flag, option length and protocol, VXLAN VNI, GRE flags, protocol and key; VXLAN-GPE flags, next protocol and VNI and GTP-U flags, message type and TEID in `misc_parameters_3` (GTP-U reported parsed: `flex_parser_protocols`, the `flex_parser_id_gtpu_*` parsers sampling its dwords, `tunnel_stateless_gtp`); the headers inside those tunnels in `inner_headers` and the inner lookups; the metadata registers in `misc_parameters_2`, carried from table to table; on receive the integrity bits `l3_ok`, `l4_ok`, `ipv4_checksum_ok`, `l4_checksum_ok`, outer and inner, all eight in `ft_field_support_2_nic_receive` and its bitmask support, also in match definers of formats 0, 2, 6, 26 and 33; criteria on other fields refused); sw_owner_v2 both ways (software-owned tables whose frames walk steering entries of format 1, `steering_format_version` 1, written into SW ICM, with VLAN push/pop, header modification, encapsulation and decapsulation applied; the receive drop and transmit drop/allow ICM addresses; each TIR's ICM address in CREATE_TIR's output; SW ICM: `general_obj_types` bit 8 and the device-memory page's three ranges, off with `EmuConfig::sw_steering`; match definers of predefined formats 0, 2, 6, 16, 22, 24, 25, 26, 28 and 33, `match_definer_format_supported` bits 0, 2, 6, 16, 22, 24, 25, 26, 28 and 33 and `general_obj_types` bit 0x18, whose MATCH entries compare and hash the packet's 32-byte tag under the definer's mask); packet reformat contexts (ALLOC/DEALLOC_PACKET_REFORMAT_CONTEXT, the tunnel types, `encap_general_header`, `max_encap_header_size` 134, `log_max_packet_reformat_context` 12) and modify-header contexts (ALLOC/DEALLOC_MODIFY_HEADER_CONTEXT, `max_modify_header_actions` 32) for software steering entries and firmware entries alike (MOD_HDR, ENCAP, DECAP; `reformat`, `decap`, the L3 tunnel bits); no FDB, no VLAN actions of firmware entries |
//! | other capability pages | QoS (type 0xc): packet pacing (a 128-entry rate table, SET_PP_RATE_LIMIT) and NIC scheduling elements (DWRR TSARs and queue groups, CREATE/MODIFY/QUERY/DESTROY_SCHEDULING_ELEMENT and the scheduling element general object); send queues paced by their rate table entry and by the `max_average_bw` of the elements above their queue group, siblings under a limit sharing it by their `bw_share`; device memory (type 0xf): 256 KiB of MEMIC in the last MiB of BAR0 (ALLOC/DEALLOC/MODIFY_MEMIC, MEMIC memory keys, 1-byte atomic increment and test-and-set aliases); HCA_CAP_2 (type 0x20): the reserved QP number limits, every other field 0; general objects: RESERVED_QPN and scheduling elements, with software steering SW_ICM, FLOW_SAMPLER, FLOW_METER (and the QoS page's flow meter fields) and MATCH_DEFINER |
//! | other commands | SET_DRIVER_VERSION (kept), QUERY_ADAPTER (PSID `CXDIRECT_EMU_01`), ALLOC/DEALLOC_XRCD, CREATE/DESTROY/QUERY_XRC_SRQ and ARM_XRC_SRQ (a one-shot limit raising the SRQ limit event, as an RMP's), QUERY_VPORT_COUNTER (packets and octets by cast type), QUERY_SQ, MODIFY_TIR (self-loopback block, hash; LRO refused), MODIFY_RQT; any other opcode is refused with BAD_OP |
//! | SET_HCA_CAP | may change cmdif_checksum, log_uar_page_sz, uar_4k, cache_line_128byte, driver_version, disable_link_up, log_max_qp, pkey_table_size (each up to its maximum), and the RoCE page's sw_r_roce_src_udp_port; any other change is refused |
//! | reserved lkey | [`RESERVED_LKEY`] (QUERY_SPECIAL_CONTEXTS): addresses are IOVAs |
//! | null key | [`NULL_MKEY`] (QUERY_SPECIAL_CONTEXTS): an indirect key's entry naming it maps nothing (a page fault) |
//! | port | one Ethernet port; node and system image GUID: the MAC widened to EUI-64; PMTU max 9982 (frames up to 9978 bytes without FCS), default admin MTU 1522; link up after INIT_HCA when a wire is attached; ACCESS_REG: PAOS, PMTU, PTYS (1, 10, 25, 40, 50 and 100 Gb/s protocols; the link runs the fastest the admin mask allows, paced below 100 Gb/s), QTCT and QETCR (class rate limits; groups and shares dividing a paced link), NODE_DESC (read only), PFCC (kept, no pause frames), PPCNT (IEEE 802.3 group counted, the other groups Linux reads as zeros) |
//! | receive CQEs | checksum flags and the packet's one's-complement sum from the IP header (`check_sum`, for CHECKSUM_COMPLETE) |
//!
//! Queues: EQs of 64-byte entries; CQs of 64- or 128-byte entries (`cqe_sz` 0, 1, or 2 padded;
//! the CQE in the second half of a 128-byte entry, nothing scattered to the first, which a
//! padded entry writes as zeros; compressed sessions laid out as in 64-byte entries, in the second halves; not collapsed); cyclic work queues only (send stride 64 bytes,
//! receive stride 16..1024 bytes); RMPs cyclic or linked lists (the RC SRQ form: a next
//! segment heads each WQE and the device follows the list from WQE 0); queue buffers may start
//! `page_offset` quanta (1/64 of the queue's page size) into their first page. Steering: NIC receive flow tables with
//! groups over the outer L2-L4 headers, entries that forward to TIRs or deeper tables, direct and
//! indirect TIRs with Toeplitz RSS over IPv4/IPv6 TCP/UDP. Memory keys in PA or MTT mode.

pub mod config;
pub mod counters;
pub mod device;
pub mod dma;
pub(crate) mod engine;
pub mod faults;
pub(crate) mod flex_parser;
pub(crate) mod function;
pub(crate) mod fw;
pub(crate) mod header_modify;
pub(crate) mod integrity;
pub mod irq;
pub(crate) mod l4_fields;
pub(crate) mod mpls;
pub(crate) mod objects;
pub mod packet;
pub mod pcap;
pub mod pci;
pub mod pci_vsc;
pub mod rss;
#[cfg(feature = "server")]
pub mod server;
pub(crate) mod signature;
pub(crate) mod steering;
pub(crate) mod sw_steering;
pub mod testkit;
pub mod trace;
pub(crate) mod translate;
pub(crate) mod transmit_steering;
pub(crate) mod tunnel;
pub mod wire;

pub use config::{EmuConfig, ExecMode};
pub use device::Device;
pub use faults::{DmaQueue, Fault};
pub use function::command_error::{CmdError, Syndrome};
pub use trace::CommandTrace;
pub use translate::{RemoteAccess, NULL_MKEY, RESERVED_LKEY};
