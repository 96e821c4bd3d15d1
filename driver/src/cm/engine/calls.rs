//! What the consumer asks: connect (`rdma_connect` -> `cma_connect_ib` -> `ib_send_cm_req`),
//! accept (`rdma_accept` -> `cma_accept_ib` -> `ib_send_cm_rep`), reject (`rdma_reject`) and
//! disconnect (`rdma_disconnect` -> `ib_send_cm_dreq`).

use super::{Cm, Conn, Retx, State, QPN_MASK};
use crate::cm::timing::{ack_timeout, convert_to_ms};
use crate::cm::wire::{
    pd_size, CmaHeader, Dreq, Message, Path, PrivateData, Rej, Rep, Req, CMA_HDR_SIZE,
};
use crate::cm::{CmAddress, CmError, ConnId, QpAttributes, QpParams, Stage};
use cxdirect_hw::cm::{msg_response, port_space, rej_reason, service_id};

impl Cm {
    /// Starts a connection to `dest_ip`:`dest_port` from `src_port`: builds the REQ as
    /// `cma_connect_ib` and `cm_format_req` do and sends it at the next [`Cm::poll`].
    /// `private_data` follows the 36-byte `cma_hdr` (at most 56 bytes).
    pub fn connect(
        &mut self,
        dest_ip: std::net::Ipv4Addr,
        dest_port: u16,
        src_port: u16,
        qp: &QpParams,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let room = pd_size::REQ - CMA_HDR_SIZE;
        if private_data.len() > room {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: room,
            });
        }
        if qp.qpn > QPN_MASK {
            return Err(CmError::BadQpn(qp.qpn));
        }
        let slot = self.free_slot().ok_or(CmError::TableFull {
            max: self.me.limits.max_connections,
        })?;
        let local_id = self.new_comm_id();
        let psn = (self.next_rand() >> 40) as u32 & QPN_MASK;
        let me = self.me;
        let peer = CmAddress::ipv4(dest_ip);
        let mut pd = [0u8; pd_size::REQ];
        pd[..CMA_HDR_SIZE].copy_from_slice(
            &CmaHeader {
                src_ip: me.ip,
                dst_ip: dest_ip,
                src_port,
            }
            .encode(),
        );
        pd[CMA_HDR_SIZE..CMA_HDR_SIZE + private_data.len()].copy_from_slice(private_data);
        let routed = me.hop_limit > 1;
        let req = Req {
            local_comm_id: local_id,
            service_id: service_id(port_space::TCP, dest_port),
            local_ca_guid: me.node_guid,
            local_q_key: 0,
            local_qpn: qp.qpn,
            responder_resources: qp.responder_resources,
            local_eecn: 0,
            initiator_depth: qp.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: me.cm_response_timeout,
            transport_service_type: 0,
            flow_control: false,
            starting_psn: psn,
            local_cm_response_timeout: me.cm_response_timeout,
            retry_count: qp.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: me.path_mtu,
            rdc_exists: false,
            rnr_retry_count: qp.rnr_retry_count.min(7),
            max_cm_retries: me.max_cm_retries,
            srq: qp.srq,
            extended_transport_type: 0,
            primary: Path {
                // `cm_format_req`: permissive LIDs when the path is routed (hop limit > 1).
                local_lid: if routed { 0xffff } else { 0 },
                remote_lid: if routed { 0xffff } else { 0 },
                local_gid: me.gid(),
                remote_gid: peer.gid,
                // `cma_get_roce_udp_flow_label` for IPv4: sport * 31 + dport, 20 bits.
                flow_label: (u32::from(src_port) * 31 + u32::from(dest_port)) & 0x000f_ffff,
                packet_rate: 0,
                traffic_class: me.traffic_class,
                hop_limit: me.hop_limit,
                sl: me.sl,
                subnet_local: !routed,
                local_ack_timeout: ack_timeout(me.ack_delay, me.packet_life_time),
            },
            alternate: Path::default(),
            sap_supported: false,
            private_data: PrivateData::new(&pd).unwrap_or_default(),
        };
        let tid = self.form_tid(local_id);
        // `ib_send_cm_req`: 2 x packet lifetime + the remote's response time.
        let timeout_ms =
            2 * convert_to_ms(me.packet_life_time) + convert_to_ms(me.cm_response_timeout);
        let qp_attrs = QpAttributes {
            remote_qpn: 0,
            remote_gid: peer.gid,
            local_gid: me.gid(),
            hop_limit: me.hop_limit,
            traffic_class: me.traffic_class,
            flow_label: req.primary.flow_label,
            sl: me.sl,
            path_mtu: me.path_mtu,
            rq_psn: psn,
            sq_psn: 0,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_count: req.retry_count,
            rnr_retry: 0,
        };
        self.conns[slot] = Some(Conn {
            local_id,
            remote_id: 0,
            state: State::ReqSent,
            peer,
            remote_guid: 0,
            remote_qpn: 0,
            local_qpn: qp.qpn,
            tid,
            timeout_ms,
            max_cm_retries: me.max_cm_retries,
            port: dest_port,
            // `cm_init_av_by_path`: packet lifetime + 1 until the REP's ACK delay refines it.
            av_timeout: me.packet_life_time + 1,
            qp: qp_attrs,
            retx: Some(Retx {
                mad: Message::Req(req).encode(tid),
                stage: Stage::Req,
                timeout_ms,
                retries_left: me.max_cm_retries,
                attempts: 0,
                first_sent: None,
                deadline: None,
            }),
            timewait_until: None,
        });
        Ok(ConnId(local_id))
    }

    /// Accepts a [`ConnectRequest`](crate::cm::ConnectRequest): the REP (built as `cma_accept_ib` / `cm_format_rep`
    /// do) goes out at the next [`Cm::poll`] and is retried until the RTU. Returns the QP
    /// attributes to program now (RTR, then RTS), before the peer starts sending.
    pub fn accept(
        &mut self,
        id: ConnId,
        qp: &QpParams,
        private_data: &[u8],
    ) -> Result<QpAttributes, CmError> {
        if private_data.len() > pd_size::REP {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: pd_size::REP,
            });
        }
        if qp.qpn > QPN_MASK {
            return Err(CmError::BadQpn(qp.qpn));
        }
        let i = self.find_id(id).ok_or(CmError::UnknownConnection(id))?;
        let state = self.slot(i).state;
        if state != State::ReqRcvd {
            return Err(CmError::InvalidState {
                id,
                op: "accept",
                state: state.name(),
            });
        }
        let psn = (self.next_rand() >> 40) as u32 & QPN_MASK;
        let me = self.me;
        let c = self.slot_mut(i);
        let rep = Rep {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            local_q_key: 0,
            local_qpn: qp.qpn,
            local_eecn: 0,
            starting_psn: psn,
            responder_resources: qp.responder_resources,
            initiator_depth: qp.initiator_depth,
            target_ack_delay: me.ack_delay,
            failover_accepted: 0,
            flow_control: false,
            rnr_retry_count: qp.rnr_retry_count.min(7),
            srq: qp.srq,
            local_ca_guid: me.node_guid,
            private_data: PrivateData::new(private_data).unwrap_or_default(),
        };
        c.local_qpn = qp.qpn;
        c.qp.rq_psn = psn;
        c.qp.max_dest_rd_atomic = qp.responder_resources;
        c.qp.max_rd_atomic = qp.initiator_depth;
        c.state = State::RepSent;
        c.retx = Some(Retx {
            mad: Message::Rep(rep).encode(c.tid),
            stage: Stage::Rep,
            timeout_ms: c.timeout_ms,
            retries_left: c.max_cm_retries,
            attempts: 0,
            first_sent: None,
            deadline: None,
        });
        Ok(c.qp)
    }

    /// Refuses a [`ConnectRequest`](crate::cm::ConnectRequest) with REJ CONSUMER_DEFINED (`rdma_reject`), and forgets it.
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        if private_data.len() > pd_size::REJ {
            return Err(CmError::PrivateDataTooLong {
                len: private_data.len(),
                max: pd_size::REJ,
            });
        }
        let i = self.find_id(id).ok_or(CmError::UnknownConnection(id))?;
        let c = *self.slot(i);
        if c.state != State::ReqRcvd {
            return Err(CmError::InvalidState {
                id,
                op: "reject",
                state: c.state.name(),
            });
        }
        // `cm_format_rej` from MRA_REQ_SENT: our local ID, message REJected = REQ.
        let rej = Rej {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            message_rejected: msg_response::REQ,
            reason: rej_reason::CONSUMER_DEFINED,
            ari_len: 0,
            ari: [0; 72],
            private_data: PrivateData::new(private_data).unwrap_or_default(),
        };
        self.queue(c.peer, Message::Rej(rej).encode(c.tid));
        // `cm_reset_to_idle`: no timewait for a connection that never was.
        self.conns[i] = None;
        Ok(())
    }

    /// Disconnects an established connection: a DREQ naming the peer's QP, retried until a
    /// DREP (`ib_send_cm_dreq`); [`Event::Disconnected`](crate::cm::Event::Disconnected) follows.
    pub fn disconnect(&mut self, id: ConnId) -> Result<(), CmError> {
        let i = self.find_id(id).ok_or(CmError::UnknownConnection(id))?;
        let c = *self.slot(i);
        if c.state != State::Established {
            return Err(CmError::InvalidState {
                id,
                op: "disconnect",
                state: c.state.name(),
            });
        }
        let dreq = Dreq {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            remote_qpn: c.remote_qpn,
            private_data: PrivateData::EMPTY,
        };
        let tid = self.form_tid(c.local_id);
        let c = self.slot_mut(i);
        c.state = State::DreqSent;
        c.retx = Some(Retx {
            mad: Message::Dreq(dreq).encode(tid),
            stage: Stage::Dreq,
            timeout_ms: c.timeout_ms,
            retries_left: c.max_cm_retries,
            attempts: 0,
            first_sent: None,
            deadline: None,
        });
        Ok(())
    }
}
