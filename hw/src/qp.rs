//! Reliable-connected queue pairs: the QP context (`qpc`), its address path (`ads`), and the
//! inputs and outputs of CREATE_QP, the state transitions (RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS,
//! SQERR2RTS, 2ERR, 2RST), QUERY_QP and DESTROY_QP (Linux `mlx5_ifc.h`, enumerations from
//! `include/linux/mlx5/qp.h`).
//!
//! A transition command carries the whole `qpc`, but the device reads only the attributes that
//! transition takes: its mandatory ones always, its optional ones where `opt_param_mask` has
//! their [`optpar`] bit.

use crate::layout;

/// QP states (`qpc.state`, `MLX5_QP_STATE_*`).
pub mod state {
    /// Reset: just created, or sent back by 2RST_QP.
    pub const RST: u8 = 0x0;
    /// Initialised: receive WQEs may be posted, nothing is processed.
    pub const INIT: u8 = 0x1;
    /// Ready to receive.
    pub const RTR: u8 = 0x2;
    /// Ready to send.
    pub const RTS: u8 = 0x3;
    /// Send queue error: a send WQE failed; receives go on.
    pub const SQER: u8 = 0x4;
    /// Send queue drained.
    pub const SQD: u8 = 0x5;
    /// Error: every outstanding WQE completes flushed.
    pub const ERR: u8 = 0x6;
    /// Send queue draining.
    pub const SQ_DRAINING: u8 = 0x7;
    /// Suspended.
    pub const SUSPENDED: u8 = 0x9;
}

/// Service types (`qpc.st`, `MLX5_QP_ST_*`).
pub mod service_type {
    /// Reliable connected.
    pub const RC: u8 = 0x0;
    /// Unreliable connected.
    pub const UC: u8 = 0x1;
    /// Unreliable datagram.
    pub const UD: u8 = 0x2;
    /// Extended reliable connected.
    pub const XRC: u8 = 0x3;
    /// Dynamically connected (vendor).
    pub const DCI: u8 = 0x5;
    /// QP0 (subnet management).
    pub const QP0: u8 = 0x7;
    /// QP1 (general services).
    pub const QP1: u8 = 0x8;
    /// Raw Ethernet.
    pub const RAW_ETHERTYPE: u8 = 0x9;
    /// Memory registration QP (`MLX5_QP_ST_REG_UMR`): its send queue carries only UMR WQEs,
    /// it has no receive queue and no peer. Linux's mlx5_ib opens one for itself
    /// (`mlx5r_umr_resource_init`) before it registers any memory.
    pub const REG_UMR: u8 = 0xc;
}

/// Path migration states (`qpc.pm_state`, `MLX5_QP_PM_*`).
pub mod pm_state {
    /// Armed: the alternate path is loaded and may be migrated to.
    pub const ARMED: u8 = 0x0;
    /// Rearm.
    pub const REARM: u8 = 0x1;
    /// Migrated: the path in use is the primary one (what software sets without APM).
    pub const MIGRATED: u8 = 0x3;
}

/// The user index of a QP whose completions are found by QP number (`MLX5_IB_DEFAULT_UIDX`,
/// what Linux's mlx5_ib gives QPs of kernel consumers). With `cqe_version` 1 every CQE of a QP
/// carries its `user_index` in `srqn_uidx`; libmlx5 finds the QP (or XRC SRQ) by it.
pub const USER_INDEX_NONE: u32 = 0x00ff_ffff;

/// Where a QP's send producer counter comes from (`qpc.send_dbr_mode`; rdma-core's tests name
/// the values `SendDbrMode`).
pub mod send_dbr_mode {
    /// The doorbell record's send counter (offset 4), read when a doorbell rings.
    pub const DBR_VALID: u8 = 0x0;
    /// No doorbell record: each doorbell, written to the UAR page's
    /// [`UAR_DBR_LESS_DOORBELL`](crate::doorbell::UAR_DBR_LESS_DOORBELL) register, names the
    /// last WQE posted (its control segment's first eight bytes); the counter ends past it.
    pub const NO_DBR_EXT: u8 = 0x1;
    /// No doorbell record, the counter kept inside the device (not offered by the model).
    pub const NO_DBR_INT: u8 = 0x2;
}

/// Receive queue kinds (`qpc.rq_type`).
pub mod rq_type {
    /// The QP's own receive ring (`log_rq_size`, `log_rq_stride`).
    pub const REGULAR: u8 = 0x0;
    /// Receives come from the SRQ or RMP named by `srqn_rmpn_xrqn`.
    pub const SRQ: u8 = 0x1;
    /// Cross-channel receive queue.
    pub const CRQ: u8 = 0x2;
    /// No receive queue: the QP takes no receives (every arriving SEND is refused).
    pub const ZERO_LEN: u8 = 0x3;
}

/// Path MTU codes (`qpc.mtu`, the InfiniBand `enum ibv_mtu`): bytes = 128 << code.
pub mod mtu {
    /// 256 bytes.
    pub const MTU_256: u8 = 1;
    /// 512 bytes.
    pub const MTU_512: u8 = 2;
    /// 1,024 bytes.
    pub const MTU_1024: u8 = 3;
    /// 2,048 bytes.
    pub const MTU_2048: u8 = 4;
    /// 4,096 bytes.
    pub const MTU_4096: u8 = 5;

    /// Bytes of payload per packet for MTU code `code` (1..=5), or `None` for another code.
    pub const fn bytes(code: u8) -> Option<u32> {
        match code {
            1..=5 => Some(128 << code),
            _ => None,
        }
    }
}

/// Bits of `opt_param_mask` (`enum mlx5_qp_optpar`): which optional attributes of a
/// transition the `qpc` carries.
pub mod optpar {
    /// Alternate address path.
    pub const ALT_ADDR_PATH: u32 = 1 << 0;
    /// Remote read enable (`rre`).
    pub const RRE: u32 = 1 << 1;
    /// Remote atomic enable (`rae`).
    pub const RAE: u32 = 1 << 2;
    /// Remote write enable (`rwe`).
    pub const RWE: u32 = 1 << 3;
    /// P_Key index.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// Q_Key.
    pub const Q_KEY: u32 = 1 << 5;
    /// Minimum RNR NAK timer (`min_rnr_nak`).
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    /// Primary address path.
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    /// Outstanding RDMA reads and atomics as requester (`log_sra_max`).
    pub const SRA_MAX: u32 = 1 << 8;
    /// Outstanding RDMA reads and atomics as responder (`log_rra_max`).
    pub const RRA_MAX: u32 = 1 << 9;
    /// Path migration state.
    pub const PM_STATE: u32 = 1 << 10;
    /// `drain_sigerr` (INIT2INIT; rdma-core's `MLX5_QPC_OPT_MASK_INIT2INIT_DRAIN_SIGERR`).
    pub const DRAIN_SIGERR: u32 = 1 << 11;
    /// Transport retry count.
    pub const RETRY_COUNT: u32 = 1 << 12;
    /// RNR retry count.
    pub const RNR_RETRY: u32 = 1 << 13;
    /// Local ACK timeout.
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    /// LAG transmit port affinity.
    pub const LAG_TX_AFF: u32 = 1 << 15;
    /// Primary port.
    pub const PRI_PORT: u32 = 1 << 16;
    /// SRQ number.
    pub const SRQN: u32 = 1 << 18;
    /// Receive CQ number.
    pub const CQN_RCV: u32 = 1 << 19;
    /// Q counter set.
    pub const COUNTER_SET_ID: u32 = 1 << 25;
}

/// Bits of `opt_param_mask_95_32` (rdma-core's `enum mlx5_qpc_opt_mask_32`): which attributes
/// of the QP context extension a transition carries.
pub mod qpc_opt_mask_32 {
    /// `dci_stream_channel_id`: the DCI stream to reset (RTS2RTS).
    pub const DCI_STREAM_CHANNEL_ID: u64 = 1 << 0;
    /// `qos_queue_group_id`.
    pub const QOS_QUEUE_GROUP_ID: u64 = 1 << 1;
    /// The primary path's UDP source port (RTS2RTS).
    pub const UDP_SPORT: u64 = 1 << 2;
}

/// Byte offset of the QP context extension in RTS2RTS_QP's input when `qpc_ext` is set
/// (rdma-core's `rts2rts_qp_in.qpc_data_ext`, bit 0x880).
pub const RTS2RTS_QPC_EXT_BYTE: usize = 0x110;

layout! {
    /// The QP context extension (rdma-core's `qpc_ext`, 0xc0 bytes).
    pub struct QpcExt("qpc_ext", 0xc0) {
        /// Memory-to-memory offload enabled.
        mmo: bool @ 0x02 [0x1],
        /// A DCI stream channel (its reset, with
        /// [`qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID`]).
        dci_stream_channel_id: u16 @ 0x10 [0x10],
        /// NIC queue group the requester (send) side sends under (0 = none; with
        /// [`qpc_opt_mask_32::QOS_QUEUE_GROUP_ID`]).
        qos_queue_group_id_requester: u32 @ 0x20 [0x20],
        /// NIC queue group the responder side sends under (0 = none).
        qos_queue_group_id_responder: u32 @ 0x40 [0x20],
    }
}

/// Values of [`Qpc::atomic_mode`] (`MLX5_ATOMIC_MODE_*`, shifted down).
pub mod atomic_mode {
    /// InfiniBand-compatible 8-byte atomics.
    pub const IB_COMP: u8 = 0x1;
    /// 8-byte atomics in host endianness.
    pub const UP_TO_8B: u8 = 0x3;
}

layout! {
    /// Address path (`ads`): how the QP reaches its peer. For RoCE, the source GID index, the
    /// destination GID or IP, the peer's MAC and the UDP source port.
    pub struct Ads("ads", 0x2c) {
        /// Force loopback: packets go back to this port without reaching the wire.
        fl: bool @ 0x00 [0x1],
        /// Free adaptive routing.
        free_ar: bool @ 0x01 [0x1],
        /// P_Key table index.
        pkey_index: u16 @ 0x10 [0x10],
        /// Plane index (multi-plane ports).
        plane_index: u8 @ 0x20 [0x8],
        /// A global route header is present (always for RoCE).
        grh: bool @ 0x28 [0x1],
        /// Source path bits (InfiniBand LID).
        mlid: u8 @ 0x29 [0x7],
        /// Remote LID (InfiniBand only).
        rlid: u16 @ 0x30 [0x10],
        /// Local ACK timeout: 4.096 us << value (0 = infinite).
        ack_timeout: u8 @ 0x40 [0x5],
        /// Index of the source GID in the port's RoCE address table.
        src_addr_index: u8 @ 0x48 [0x8],
        /// Static rate limit code (0 = port rate).
        stat_rate: u8 @ 0x54 [0x4],
        /// IP hop limit / TTL.
        hop_limit: u8 @ 0x58 [0x8],
        /// Traffic class.
        tclass: u8 @ 0x64 [0x8],
        /// IPv6 flow label.
        flow_label: u32 @ 0x6c [0x14],
        /// Force the DSCP from `dscp`.
        f_dscp: bool @ 0x104 [0x1],
        /// Force the ECN bits from `ecn`.
        f_ecn: bool @ 0x105 [0x1],
        /// Force the Ethernet priority from `eth_prio`.
        f_eth_prio: bool @ 0x107 [0x1],
        /// ECN bits of the IP header.
        ecn: u8 @ 0x108 [0x2],
        /// DSCP of the IP header.
        dscp: u8 @ 0x10a [0x6],
        /// RoCE v2 UDP source port (used when the RoCE cap `sw_r_roce_src_udp_port` is set).
        udp_sport: u16 @ 0x110 [0x10],
        /// VLAN drop eligible indicator.
        dei_cfi: bool @ 0x120 [0x1],
        /// Ethernet priority (PCP).
        eth_prio: u8 @ 0x121 [0x3],
        /// Service level.
        sl: u8 @ 0x124 [0x4],
        /// Port number (1-based).
        vhca_port_num: u8 @ 0x128 [0x8],
        /// Peer MAC address, bits 47:32.
        rmac_47_32: u16 @ 0x130 [0x10],
        /// Peer MAC address, bits 31:0.
        rmac_31_0: u32 @ 0x140 [0x20],
    }
    arrays {
        /// Byte `index` (0..16) of the remote GID (RoCE: an IPv6 or IPv4-mapped address), in
        /// network order.
        rgid_rip: u8 @ 0x80 [0x8],
    }
}

impl<T: AsRef<[u8]>> Ads<T> {
    /// The 16 bytes of the remote GID in network order.
    pub fn rgid(&self) -> [u8; 16] {
        let mut gid = [0; 16];
        gid.copy_from_slice(&self.as_bytes()[0x10..0x20]);
        gid
    }

    /// The peer's MAC address.
    pub fn rmac(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac[..2].copy_from_slice(&self.rmac_47_32().to_be_bytes());
        mac[2..].copy_from_slice(&self.rmac_31_0().to_be_bytes());
        mac
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ads<T> {
    /// Sets the remote GID from its 16 bytes in network order.
    pub fn set_rgid(&mut self, gid: [u8; 16]) -> &mut Self {
        self.as_bytes_mut()[0x10..0x20].copy_from_slice(&gid);
        self
    }

    /// Sets the peer's MAC address.
    pub fn set_rmac(&mut self, mac: [u8; 6]) -> &mut Self {
        self.set_rmac_47_32(u16::from_be_bytes([mac[0], mac[1]]));
        self.set_rmac_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
    }
}

layout! {
    /// QP context (`qpc`): service type, queues, PSNs, retry and RDMA limits, the address paths.
    pub struct Qpc("qpc", 0xe8) {
        /// QP state (see [`state`]); read back by QUERY_QP.
        state: u8 @ 0x00 [0x4],
        /// LAG port the QP sends on (0 = default).
        lag_tx_port_affinity: u8 @ 0x04 [0x4],
        /// Service type (see [`service_type`]).
        st: u8 @ 0x08 [0x8],
        /// Isolate the QP on its own virtual lane / traffic class.
        isolate_vl_tc: bool @ 0x12 [0x1],
        /// Path migration state (see [`pm_state`]).
        pm_state: u8 @ 0x13 [0x2],
        /// Requester end-to-end credit mode.
        req_e2e_credit_mode: u8 @ 0x16 [0x2],
        /// Offload type.
        offload_type: u8 @ 0x18 [0x4],
        /// Padding of received data.
        end_padding_mode: u8 @ 0x1c [0x2],
        /// WQEs carry a signature the device checks.
        wq_signature: bool @ 0x20 [0x1],
        /// Block loopback of multicast.
        block_lb_mc: bool @ 0x21 [0x1],
        /// Atomic-like write enabled.
        atomic_like_write_en: bool @ 0x22 [0x1],
        /// Latency sensitive.
        latency_sensitive: bool @ 0x23 [0x1],
        /// Drain on signature error.
        drain_sigerr: bool @ 0x25 [0x1],
        /// Protection domain of the QP and of every memory key its WQEs use.
        pd: u32 @ 0x28 [0x18],
        /// Path MTU (see [`mtu`]).
        mtu: u8 @ 0x40 [0x3],
        /// Log2 of the largest message in bytes.
        log_msg_max: u8 @ 0x43 [0x5],
        /// Log2 of the number of receive WQEs (own receive ring).
        log_rq_size: u8 @ 0x49 [0x4],
        /// Log2 of the receive WQE stride in 16-byte units.
        log_rq_stride: u8 @ 0x4d [0x3],
        /// The QP has no send queue.
        no_sq: bool @ 0x50 [0x1],
        /// Log2 of the number of send WQEBBs.
        log_sq_size: u8 @ 0x51 [0x4],
        /// Retransmission mode.
        retry_mode: u8 @ 0x56 [0x2],
        /// Timestamp format of the QP's CQEs (0 free running, 1 default, 2 real time).
        ts_format: u8 @ 0x58 [0x2],
        /// The reserved LKey may be used.
        rlky: bool @ 0x5b [0x1],
        /// Upper-layer stateless offload mode.
        ulp_stateless_offload_mode: u8 @ 0x5c [0x4],
        /// Q counter set the QP counts into.
        counter_set_id: u8 @ 0x60 [0x8],
        /// UAR page whose doorbell register rings the send queue.
        uar_page: u32 @ 0x68 [0x18],
        /// Where the send queue's producer counter comes from ([`send_dbr_mode`]): the doorbell
        /// record (0), or the doorbells alone. Linux's mlx5_ifc.h leaves these bits reserved;
        /// rdma-core's tests (`SwQpc` in tests/mlx5_prm_structs.py) name them.
        send_dbr_mode: u8 @ 0x80 [0x2],
        /// User index written into CQEs (CQE version 1).
        user_index: u32 @ 0x88 [0x18],
        /// Log2 of the work queue buffer's page size minus 12.
        log_page_size: u8 @ 0xa3 [0x5],
        /// Peer QP number (destination QP of every packet).
        remote_qpn: u32 @ 0xa8 [0x18],
        /// Log2 of how many packets may go before an ACK is requested.
        log_ack_req_freq: u8 @ 0x380 [0x4],
        /// Log2 of outstanding RDMA reads and atomics as requester.
        log_sra_max: u8 @ 0x388 [0x3],
        /// Transport retries before a send fails (0..=7).
        retry_count: u8 @ 0x38d [0x3],
        /// RNR retries before a send fails (0..=6; 7 = infinite).
        rnr_retry: u8 @ 0x390 [0x3],
        /// Fast retransmit enable.
        fre: bool @ 0x394 [0x1],
        /// RNR retries left (read back).
        cur_rnr_retry: u8 @ 0x395 [0x3],
        /// Transport retries left (read back).
        cur_retry_count: u8 @ 0x398 [0x3],
        /// PSN of the next packet sent.
        next_send_psn: u32 @ 0x3c8 [0x18],
        /// Log2 of a DC initiator's stream channels (DCI streams; 0: an ordinary DCI), as
        /// mlx5_ib's `create_dci` sets it for `MLX5_QP_FLAG_DCI_STREAM`.
        log_num_dci_stream_channels: u8 @ 0x3e3 [0x5],
        /// CQ of the send queue's completions.
        cqn_snd: u32 @ 0x3e8 [0x18],
        /// Log2 of the errored streams a DC initiator with streams takes before it moves to
        /// error (`create_dci`).
        log_num_dci_errored_streams: u8 @ 0x403 [0x5],
        /// Source QP number in the DETH (UD only).
        deth_sqpn: u32 @ 0x408 [0x18],
        /// Last acknowledged PSN (read back).
        last_acked_psn: u32 @ 0x448 [0x18],
        /// Send sequence number (read back).
        ssn: u32 @ 0x468 [0x18],
        /// Log2 of outstanding RDMA reads and atomics as responder.
        log_rra_max: u8 @ 0x488 [0x3],
        /// Atomic mode (see [`atomic_mode`]).
        atomic_mode: u8 @ 0x48c [0x4],
        /// Remote read enable: peers may RDMA READ through this QP.
        rre: bool @ 0x490 [0x1],
        /// Remote write enable: peers may RDMA WRITE through this QP.
        rwe: bool @ 0x491 [0x1],
        /// Remote atomic enable: peers may issue atomics through this QP.
        rae: bool @ 0x492 [0x1],
        /// Offset of the work queue buffer in its first page, in 64-byte units.
        page_offset: u8 @ 0x494 [0x6],
        /// Cross-channel slave (receive).
        cd_slave_receive: bool @ 0x49d [0x1],
        /// Cross-channel slave (send).
        cd_slave_send: bool @ 0x49e [0x1],
        /// Cross-channel master.
        cd_master: bool @ 0x49f [0x1],
        /// RNR NAK timer code this QP sends as responder (0..=31).
        min_rnr_nak: u8 @ 0x4a3 [0x5],
        /// PSN expected of the next packet received.
        next_rcv_psn: u32 @ 0x4a8 [0x18],
        /// XRC domain.
        xrcd: u32 @ 0x4c8 [0x18],
        /// CQ of the receive completions.
        cqn_rcv: u32 @ 0x4e8 [0x18],
        /// Bus address of the doorbell record (receive counter at +0, send counter at +4).
        dbr_addr: u64 @ 0x500 [0x40],
        /// Q_Key (datagram service).
        q_key: u32 @ 0x540 [0x20],
        /// Receive queue kind (see [`rq_type`]).
        rq_type: u8 @ 0x565 [0x3],
        /// SRQ, RMP or XRQ number when `rq_type` is [`rq_type::SRQ`].
        srqn_rmpn_xrqn: u32 @ 0x568 [0x18],
        /// Responder message sequence number (read back).
        rmsn: u32 @ 0x588 [0x18],
        /// Send WQEBBs the device consumed (read back).
        hw_sq_wqebb_counter: u16 @ 0x5a0 [0x10],
        /// Send WQEBBs software posted (read back).
        sw_sq_wqebb_counter: u16 @ 0x5b0 [0x10],
        /// Receive WQEs the device consumed (read back).
        hw_rq_counter: u32 @ 0x5c0 [0x20],
        /// Receive WQEs software posted (read back).
        sw_rq_counter: u32 @ 0x5e0 [0x20],
        /// Compressed scatter/gather (CQE scatter) enable.
        cgs: bool @ 0x62f [0x1],
        /// Requester CQE scatter size.
        cs_req: u8 @ 0x630 [0x8],
        /// Responder CQE scatter size.
        cs_res: u8 @ 0x638 [0x8],
        /// DC access key.
        dc_access_key: u64 @ 0x640 [0x40],
        /// `dbr_umem_id` names a registered umem instead of `dbr_addr`.
        dbr_umem_valid: bool @ 0x683 [0x1],
        /// Umem holding the doorbell record (with `dbr_umem_valid`); `dbr_addr` is then the
        /// record's offset in it.
        dbr_umem_id: u32 @ 0x720 [0x20],
    }
    nested {
        /// Primary address path.
        primary_address_path: Ads @ 0xc0,
        /// Alternate address path (automatic path migration).
        secondary_address_path: Ads @ 0x220,
    }
}

layout! {
    /// CREATE_QP input: the QP context, then the page addresses of the work queue buffer
    /// (receive ring first, then the send ring).
    pub struct CreateQpIn("create_qp_in", 0x110) {
        /// Command opcode: [`Opcode::CreateQp`](crate::cmd::Opcode::CreateQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP context extension follows the context.
        qpc_ext: bool @ 0x40 [0x1],
        /// A QP number asked for (0 = any).
        input_qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]).
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options (0 = none).
        ece: u32 @ 0xa0 [0x20],
        /// Offset of the work queue buffer in its umem, in bytes.
        wq_umem_offset: u64 @ 0x800 [0x40],
        /// Umem holding the work queue buffer.
        wq_umem_id: u32 @ 0x840 [0x20],
        /// `wq_umem_id` is used instead of `pas`.
        wq_umem_valid: bool @ 0x860 [0x1],
    }
    nested {
        /// QP context.
        qpc: Qpc @ 0xc0,
    }
    arrays {
        /// Bus addresses of the work queue buffer's pages, in order.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_QP output.
    pub struct CreateQpOut("create_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// The new QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Enhanced connection establishment options accepted.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// QUERY_QP input.
    pub struct QueryQpIn("query_qp_in", 0x10) {
        /// Command opcode: [`Opcode::QueryQp`](crate::cmd::Opcode::QueryQp).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Ask for the context extension too.
        qpc_ext: bool @ 0x40 [0x1],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// QUERY_QP output: the QP's context, state included (the page list that may follow is not
    /// part of the fixed size).
    pub struct QueryQpOut("query_qp_out", 0x1d0) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Optional attributes in force.
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options in force.
        ece: u32 @ 0xa0 [0x20],
    }
    nested {
        /// QP context.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// RST2INIT_QP input: the QP transition's attributes in `qpc`.
    pub struct Rst2initQpIn("rst2init_qp_in", 0x110) {
        /// Command opcode: [`Opcode::Rst2initQp`](crate::cmd::Opcode::Rst2initQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]); mandatory ones need no bit.
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options (0 = none).
        ece: u32 @ 0xa0 [0x20],
    }
    nested {
        /// QP context carrying the transition's attributes.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// RST2INIT_QP output.
    pub struct Rst2initQpOut("rst2init_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Enhanced connection establishment options accepted.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// INIT2INIT_QP input: optional attributes (access, P_Key index, port, Q_Key) changed in
    /// INIT, as rdma_cm's accept does (`cma_modify_qp_init`); the same layout as RST2INIT_QP.
    /// With `qpc_ext`, a [`QpcExt`] follows the input at [`RTS2RTS_QPC_EXT_BYTE`], as in
    /// RTS2RTS_QP (rdma-core's `modify_ib_qp_sched_elem_init`).
    pub struct Init2initQpIn("init2init_qp_in", 0x110) {
        /// Command opcode: [`Opcode::Init2initQp`](crate::cmd::Opcode::Init2initQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP context extension follows the input.
        qpc_ext: bool @ 0x40 [0x1],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]); mandatory ones need no bit.
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options (0 = none).
        ece: u32 @ 0xa0 [0x20],
        /// Optional attributes given in the context extension (see [`qpc_opt_mask_32`]).
        opt_param_mask_95_32: u64 @ 0x840 [0x40],
    }
    nested {
        /// QP context carrying the transition's attributes.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// INIT2INIT_QP output.
    pub struct Init2initQpOut("init2init_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Enhanced connection establishment options accepted.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// INIT2RTR_QP input: the QP transition's attributes in `qpc`.
    pub struct Init2rtrQpIn("init2rtr_qp_in", 0x110) {
        /// Command opcode: [`Opcode::Init2rtrQp`](crate::cmd::Opcode::Init2rtrQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]); mandatory ones need no bit.
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options (0 = none).
        ece: u32 @ 0xa0 [0x20],
    }
    nested {
        /// QP context carrying the transition's attributes.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// INIT2RTR_QP output.
    pub struct Init2rtrQpOut("init2rtr_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Enhanced connection establishment options accepted.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// RTR2RTS_QP input: the QP transition's attributes in `qpc`.
    pub struct Rtr2rtsQpIn("rtr2rts_qp_in", 0x110) {
        /// Command opcode: [`Opcode::Rtr2rtsQp`](crate::cmd::Opcode::Rtr2rtsQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]); mandatory ones need no bit.
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options (0 = none).
        ece: u32 @ 0xa0 [0x20],
    }
    nested {
        /// QP context carrying the transition's attributes.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// RTR2RTS_QP output.
    pub struct Rtr2rtsQpOut("rtr2rts_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Enhanced connection establishment options accepted.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// RTS2RTS_QP input: the QP transition's attributes in `qpc`. With `qpc_ext`, a
    /// [`QpcExt`] follows the input at [`RTS2RTS_QPC_EXT_BYTE`] (rdma-core's
    /// `mlx5dv_dci_stream_id_reset`, which names its attributes in `opt_param_mask_95_32`).
    pub struct Rts2rtsQpIn("rts2rts_qp_in", 0x110) {
        /// Command opcode: [`Opcode::Rts2rtsQp`](crate::cmd::Opcode::Rts2rtsQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP context extension follows the input.
        qpc_ext: bool @ 0x40 [0x1],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]); mandatory ones need no bit.
        opt_param_mask: u32 @ 0x80 [0x20],
        /// Enhanced connection establishment options (0 = none).
        ece: u32 @ 0xa0 [0x20],
        /// Optional attributes given in the context extension (see [`qpc_opt_mask_32`]).
        opt_param_mask_95_32: u64 @ 0x840 [0x40],
    }
    nested {
        /// QP context carrying the transition's attributes.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// RTS2RTS_QP output.
    pub struct Rts2rtsQpOut("rts2rts_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Enhanced connection establishment options accepted.
        ece: u32 @ 0x60 [0x20],
    }
}

layout! {
    /// SQERR2RTS_QP input: the QP transition's attributes in `qpc`.
    pub struct Sqerr2rtsQpIn("sqerr2rts_qp_in", 0x110) {
        /// Command opcode: [`Opcode::Sqerr2rtsQp`](crate::cmd::Opcode::Sqerr2rtsQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
        /// Optional attributes given in `qpc` (see [`optpar`]); mandatory ones need no bit.
        opt_param_mask: u32 @ 0x80 [0x20],
    }
    nested {
        /// QP context carrying the transition's attributes.
        qpc: Qpc @ 0xc0,
    }
}

layout! {
    /// SQERR2RTS_QP output.
    pub struct Sqerr2rtsQpOut("sqerr2rts_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// 2ERR_QP input: move the QP to the error state (from any state but reset).
    pub struct Qp2errIn("qp_2err_in", 0x10) {
        /// Command opcode: [`Opcode::Qp2errQp`](crate::cmd::Opcode::Qp2errQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// 2ERR_QP output.
    pub struct Qp2errOut("qp_2err_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// 2RST_QP input: move the QP to reset (from any state).
    pub struct Qp2rstIn("qp_2rst_in", 0x10) {
        /// Command opcode: [`Opcode::Qp2rstQp`](crate::cmd::Opcode::Qp2rstQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// 2RST_QP output.
    pub struct Qp2rstOut("qp_2rst_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// DESTROY_QP input.
    pub struct DestroyQpIn("destroy_qp_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyQp`](crate::cmd::Opcode::DestroyQp).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP's number.
        qpn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_QP output.
    pub struct DestroyQpOut("destroy_qp_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// XRC SRQ context (`xrc_srqc`): a shared receive queue of linked-list WQEs (next segment,
    /// then data segments) that XRC target QPs of one XRC domain draw from.
    pub struct XrcSrqc("xrc_srqc", 0x40) {
        /// State (0 = good, 1 = error); read back by QUERY_XRC_SRQ.
        state: u8 @ 0x00 [0x4],
        /// Log2 of the number of WQEs.
        log_xrc_srq_size: u8 @ 0x04 [0x4],
        /// WQEs carry a signature.
        wq_signature: bool @ 0x20 [0x1],
        /// Physically contiguous buffer.
        cont_srq: bool @ 0x21 [0x1],
        /// Reserved lkey allowed in data segments.
        rlky: bool @ 0x23 [0x1],
        /// Cyclic WQEs without a next segment.
        basic_cyclic_rcv_wqe: bool @ 0x24 [0x1],
        /// Log2 of the WQE stride in 16-byte units.
        log_rq_stride: u8 @ 0x25 [0x3],
        /// The XRC domain.
        xrcd: u32 @ 0x28 [0x18],
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: u8 @ 0x40 [0x6],
        /// The doorbell record is a DevX umem.
        dbr_umem_valid: bool @ 0x47 [0x1],
        /// Completion queue of the XRC SRQ's receives.
        cqn: u32 @ 0x48 [0x18],
        /// `user_index` is the XRC SRQ number.
        user_index_equal_xrc_srqn: bool @ 0x80 [0x1],
        /// Log2 of the buffer's page size, less 12.
        log_page_size: u8 @ 0x82 [0x6],
        /// Index CQEs carry for receives of this XRC SRQ.
        user_index: u32 @ 0x88 [0x18],
        /// Protection domain of the WQEs' memory keys.
        pd: u32 @ 0xc8 [0x18],
        /// Limit (low watermark) that raises an event when the posted WQEs fall below it.
        lwm: u16 @ 0xe0 [0x10],
        /// WQE counter.
        wqe_cnt: u16 @ 0xf0 [0x10],
        /// Doorbell record address, bits 63..32.
        db_record_addr_h: u32 @ 0x140 [0x20],
        /// Doorbell record address, bits 31..2.
        db_record_addr_l: u32 @ 0x160 [0x1e],
    }
}

layout! {
    /// CREATE_XRC_SRQ input: the context, then the buffer's page addresses.
    pub struct CreateXrcSrqIn("create_xrc_srq_in", 0x110) {
        /// Command opcode: [`Opcode::CreateXrcSrq`](crate::cmd::Opcode::CreateXrcSrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The buffer is a DevX umem.
        xrc_srq_umem_valid: bool @ 0x2e0 [0x1],
    }
    nested {
        /// The new XRC SRQ's context.
        xrc_srq_context_entry: XrcSrqc @ 0x80,
    }
    arrays {
        /// Bus addresses of the buffer's pages, each aligned to the context's page size.
        pas: u64 @ 0x880 [0x40],
    }
}

layout! {
    /// CREATE_XRC_SRQ output.
    pub struct CreateXrcSrqOut("create_xrc_srq_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new XRC SRQ (shares the SRQ and RMP number space).
        xrc_srqn: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DESTROY_XRC_SRQ input.
    pub struct DestroyXrcSrqIn("destroy_xrc_srq_in", 0x10) {
        /// Command opcode: [`Opcode::DestroyXrcSrq`](crate::cmd::Opcode::DestroyXrcSrq).
        opcode: u16 @ 0x00 [0x10],
        /// User context id of the issuer (0 = the function itself).
        uid: u16 @ 0x10 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The XRC SRQ's number.
        xrc_srqn: u32 @ 0x48 [0x18],
    }
}
