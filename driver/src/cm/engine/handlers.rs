//! What each received message does (`cm.c`: `cm_req_handler`, `cm_rep_handler`,
//! `cm_rtu_handler`, `cm_rej_handler`, `cm_mra_handler`, `cm_dreq_handler`, `cm_drep_handler`
//! and their duplicate paths; `cma.c: cma_ib_req_handler` for the rdma_cm checks of a REQ).

use super::{Cm, Conn, State, QPN_MASK};
use crate::cm::timing::{ack_timeout, convert_to_ms, MRA_SERVICE_TIMEOUT};
use crate::cm::wire::{CmaHeader, Dreq, IdPair, Message, Mra, PrivateData, Rej, Rep, Req};
use crate::cm::{
    CmAddress, ConnId, ConnectRequest, Event, QpAttributes, ReceiveError, CMA_HDR_SIZE,
};
use cxdirect_hw::cm::{attr, msg_response, port_space, rej_reason};
use std::time::Duration;

type Received = Result<Option<Event>, ReceiveError>;

impl Cm {
    /// `cm_issue_rej`: a REJ built from the received message alone (no connection kept): the
    /// received local ID becomes the remote one, and the word where a reply carries the
    /// remote ID becomes the local one; the received TID is echoed.
    fn issue_rej(
        &mut self,
        to: CmAddress,
        tid: u64,
        (rcv_local, rcv_remote): (u32, u32),
        reason: u16,
        rejected: u8,
        ari: &[u8],
    ) {
        let mut a = [0u8; 72];
        let n = ari.len().min(72);
        a[..n].copy_from_slice(&ari[..n]);
        let rej = Rej {
            local_comm_id: rcv_remote,
            remote_comm_id: rcv_local,
            message_rejected: rejected,
            reason,
            ari_len: n as u8,
            ari: a,
            private_data: PrivateData::EMPTY,
        };
        self.queue(to, Message::Rej(rej).encode(tid));
    }

    /// `ib_send_cm_dreq` on a connection found stale by a new REQ or REP.
    fn dreq_stale(&mut self, i: usize) {
        let c = *self.slot(i);
        if c.state == State::Established {
            // Only fails in another state, which was just checked.
            let _ = self.disconnect(ConnId(c.local_id));
        }
    }

    fn mra(c: &Conn, rejected: u8) -> Message {
        Message::Mra(Mra {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            message_mraed: rejected,
            service_timeout: MRA_SERVICE_TIMEOUT,
            private_data: PrivateData::EMPTY,
        })
    }

    pub(super) fn on_req(
        &mut self,
        from: CmAddress,
        tid: u64,
        rcv_remote: u32,
        req: &Req,
    ) -> Received {
        // `cm_match_req`: a duplicate is a REQ whose (local ID, CA GUID) a connection already
        // holds as its remote pair. `cm_enter_timewait` takes a connection out of the remote
        // tables, so one in timewait matches neither this nor the stale check below.
        if let Some(i) = self.conns.iter().position(|c| {
            c.is_some_and(|c| {
                c.state != State::Timewait
                    && c.remote_id == req.local_comm_id
                    && c.remote_guid == req.local_ca_guid
            })
        }) {
            let c = *self.slot(i);
            // `cm_dup_req_handler`: the MRA again from MRA_REQ_SENT, nothing otherwise (a REP
            // outstanding is retried by its own timer).
            if c.state == State::ReqRcvd {
                self.queue(from, Self::mra(&c, msg_response::REQ).encode(c.tid));
            }
            return Err(ReceiveError::Duplicate {
                id: ConnId(c.local_id),
                attr: attr::REQ,
            });
        }
        // Stale (`cm_insert_remote_qpn`): the (CA GUID, QPN) pair belongs to a live connection.
        if let Some(i) = self.conns.iter().position(|c| {
            c.is_some_and(|c| {
                c.state != State::Timewait
                    && c.remote_guid == req.local_ca_guid
                    && c.remote_qpn == req.local_qpn
                    && c.remote_id != 0
            })
        }) {
            self.issue_rej(
                from,
                tid,
                (req.local_comm_id, rcv_remote),
                rej_reason::STALE_CONN,
                msg_response::REQ,
                &[],
            );
            self.dreq_stale(i);
            return Err(ReceiveError::Refused(rej_reason::STALE_CONN));
        }
        // `cm_find_listen` by exact service ID: rdma_cm listens on (RDMA_PS_TCP, port).
        let port = req.service_id as u16;
        let ps = (req.service_id >> 16) as u16;
        if req.service_id >> 32 != 0 || ps != port_space::TCP || !self.listeners.contains(&port) {
            self.issue_rej(
                from,
                tid,
                (req.local_comm_id, rcv_remote),
                rej_reason::INVALID_SERVICE_ID,
                msg_response::REQ,
                &[],
            );
            return Err(ReceiveError::Refused(rej_reason::INVALID_SERVICE_ID));
        }
        // `cm_init_av_by_path` fails when the REQ names a GID this port does not hold: REJ
        // INVALID_GID with our GID as ARI, from a connection not yet numbered (local ID 0).
        let me = self.me;
        if req.primary.remote_gid != me.gid() {
            let gid = me.gid();
            self.issue_rej(
                from,
                tid,
                (req.local_comm_id, 0),
                rej_reason::INVALID_GID,
                msg_response::REQ,
                &gid,
            );
            return Err(ReceiveError::Refused(rej_reason::INVALID_GID));
        }
        // rdma_cm: `cma_save_ip_info` needs a valid header, `cma_ib_check_req_qp_type` an RC
        // REQ for the TCP port space; a failure makes ib_cm reject with CONSUMER_DEFINED.
        let pd = req.private_data.as_slice();
        let cma = match CmaHeader::decode(pd) {
            Ok(h) if req.transport_service_type == 0 => h,
            _ => {
                self.issue_rej(
                    from,
                    tid,
                    (req.local_comm_id, 0),
                    rej_reason::CONSUMER_DEFINED,
                    msg_response::REQ,
                    &[],
                );
                return Err(ReceiveError::Refused(rej_reason::CONSUMER_DEFINED));
            }
        };
        let Some(slot) = self.free_slot() else {
            return Err(ReceiveError::TableFull);
        };
        let local_id = self.new_comm_id();
        // `cm_format_paths_from_req` takes one from the ACK timeout for the packet lifetime,
        // `cm_init_av_by_path` adds it back.
        let av_timeout = req.primary.local_ack_timeout.saturating_sub(1) + 1;
        let qp = QpAttributes {
            remote_qpn: req.local_qpn & QPN_MASK,
            remote_gid: req.primary.local_gid,
            local_gid: req.primary.remote_gid,
            hop_limit: req.primary.hop_limit,
            traffic_class: req.primary.traffic_class,
            flow_label: req.primary.flow_label,
            sl: req.primary.sl,
            path_mtu: req.path_mtu,
            rq_psn: 0,
            sq_psn: req.starting_psn,
            max_dest_rd_atomic: 0,
            max_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: av_timeout,
            retry_count: req.retry_count,
            rnr_retry: req.rnr_retry_count,
        };
        self.conns[slot] = Some(Conn {
            local_id,
            remote_id: req.local_comm_id,
            state: State::ReqRcvd,
            peer: from,
            remote_guid: req.local_ca_guid,
            remote_qpn: req.local_qpn,
            local_qpn: 0,
            tid,
            // `cm_req_handler`: the passive side answers within the active side's local
            // response time, and retries as often as the REQ says.
            timeout_ms: convert_to_ms(req.local_cm_response_timeout),
            max_cm_retries: req.max_cm_retries,
            port,
            av_timeout,
            qp,
            retx: None,
            timewait_until: None,
        });
        Ok(Some(Event::ConnectRequest(ConnectRequest {
            id: ConnId(local_id),
            port,
            from,
            cma,
            remote_ca_guid: req.local_ca_guid,
            remote_qpn: req.local_qpn,
            starting_psn: req.starting_psn,
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            path_mtu: req.path_mtu,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            srq: req.srq,
            private_data: PrivateData::new(pd.get(CMA_HDR_SIZE..).unwrap_or(&[]))
                .unwrap_or_default(),
        })))
    }

    pub(super) fn on_rep(&mut self, from: CmAddress, tid: u64, rep: &Rep) -> Received {
        let Some(i) = self.acquire(rep.remote_comm_id, 0) else {
            // `cm_dup_rep_handler`: our RTU was lost; send it again from ESTABLISHED.
            return match self.acquire(rep.remote_comm_id, rep.local_comm_id) {
                Some(j) => {
                    let c = *self.slot(j);
                    if c.state == State::Established {
                        let rtu = IdPair {
                            local_comm_id: c.local_id,
                            remote_comm_id: c.remote_id,
                            private_data: PrivateData::EMPTY,
                        };
                        self.queue(from, Message::Rtu(rtu).encode(c.tid));
                    }
                    Err(ReceiveError::Duplicate {
                        id: ConnId(c.local_id),
                        attr: attr::REP,
                    })
                }
                None => Err(ReceiveError::UnknownConnection {
                    attr: attr::REP,
                    local: rep.local_comm_id,
                    remote: rep.remote_comm_id,
                }),
            };
        };
        let c = *self.slot(i);
        if !matches!(c.state, State::ReqSent | State::MraReqRcvd) {
            return Err(ReceiveError::Unexpected {
                id: ConnId(c.local_id),
                attr: attr::REP,
                state: c.state.name(),
            });
        }
        // Another connection already holds this remote pair: a duplicate REP.
        if self.conns.iter().flatten().any(|o| {
            o.local_id != c.local_id
                && o.state != State::Timewait
                && o.remote_id == rep.local_comm_id
                && o.remote_guid == rep.local_ca_guid
        }) {
            return Err(ReceiveError::Duplicate {
                id: ConnId(c.local_id),
                attr: attr::REP,
            });
        }
        if let Some(j) = self.conns.iter().position(|o| {
            o.is_some_and(|o| {
                o.local_id != c.local_id
                    && o.state != State::Timewait
                    && o.remote_id != 0
                    && o.remote_guid == rep.local_ca_guid
                    && o.remote_qpn == rep.local_qpn
            })
        }) {
            self.issue_rej(
                from,
                tid,
                (rep.local_comm_id, rep.remote_comm_id),
                rej_reason::STALE_CONN,
                msg_response::REP,
                &[],
            );
            self.dreq_stale(j);
            return Err(ReceiveError::Refused(rej_reason::STALE_CONN));
        }
        let c = self.slot_mut(i);
        c.remote_id = rep.local_comm_id;
        c.remote_guid = rep.local_ca_guid;
        c.remote_qpn = rep.local_qpn;
        // `cm_rep_handler`: the peer's responder resources bound our initiator depth and
        // the other way round; its PSN is our send PSN; the ACK timeout now counts its delay.
        c.av_timeout = ack_timeout(rep.target_ack_delay, c.av_timeout.saturating_sub(1));
        c.qp.remote_qpn = rep.local_qpn;
        c.qp.sq_psn = rep.starting_psn;
        c.qp.max_rd_atomic = rep.responder_resources;
        c.qp.max_dest_rd_atomic = rep.initiator_depth;
        c.qp.rnr_retry = rep.rnr_retry_count;
        c.qp.timeout = c.av_timeout;
        // rdma_cm (`cma_rep_recv`) programs the QP and sends the RTU: ESTABLISHED.
        c.state = State::Established;
        c.retx = None;
        let c = *c;
        let rtu = IdPair {
            local_comm_id: c.local_id,
            remote_comm_id: c.remote_id,
            private_data: PrivateData::EMPTY,
        };
        self.queue(c.peer, Message::Rtu(rtu).encode(c.tid));
        Ok(Some(Event::Established {
            id: ConnId(c.local_id),
            qp: c.qp,
            private_data: rep.private_data,
        }))
    }

    pub(super) fn on_rtu(&mut self, rtu: &IdPair) -> Received {
        let Some(i) = self.acquire(rtu.remote_comm_id, rtu.local_comm_id) else {
            return Err(ReceiveError::UnknownConnection {
                attr: attr::RTU,
                local: rtu.local_comm_id,
                remote: rtu.remote_comm_id,
            });
        };
        let c = self.slot_mut(i);
        if !matches!(c.state, State::RepSent | State::MraRepRcvd) {
            return Err(ReceiveError::Duplicate {
                id: ConnId(c.local_id),
                attr: attr::RTU,
            });
        }
        c.state = State::Established;
        c.retx = None;
        Ok(Some(Event::Established {
            id: ConnId(c.local_id),
            qp: c.qp,
            private_data: rtu.private_data,
        }))
    }

    pub(super) fn on_rej(&mut self, now: Duration, rej: &Rej) -> Received {
        // `cm_acquire_rejected_id`.
        let found = if rej.reason == rej_reason::TIMEOUT {
            let mut g = [0u8; 8];
            g.copy_from_slice(&rej.ari[..8]);
            let guid = u64::from_be_bytes(g);
            self.conns.iter().position(|c| {
                c.is_some_and(|c| c.remote_guid == guid && c.remote_id == rej.local_comm_id)
            })
        } else if rej.message_rejected == msg_response::REQ {
            self.acquire(rej.remote_comm_id, 0)
        } else {
            self.acquire(rej.remote_comm_id, rej.local_comm_id)
        };
        let Some(i) = found else {
            return Err(ReceiveError::UnknownConnection {
                attr: attr::REJ,
                local: rej.local_comm_id,
                remote: rej.remote_comm_id,
            });
        };
        let c = *self.slot(i);
        let id = ConnId(c.local_id);
        match c.state {
            State::ReqSent
            | State::MraReqRcvd
            | State::RepSent
            | State::MraRepRcvd
            | State::ReqRcvd => {
                if rej.reason == rej_reason::STALE_CONN {
                    self.enter_timewait(i, now);
                } else {
                    self.conns[i] = None;
                }
            }
            State::DreqSent | State::Established => self.enter_timewait(i, now),
            State::Timewait => {
                return Err(ReceiveError::Unexpected {
                    id,
                    attr: attr::REJ,
                    state: c.state.name(),
                })
            }
        }
        Ok(Some(Event::Rejected {
            id,
            reason: rej.reason,
            private_data: rej.private_data,
        }))
    }

    pub(super) fn on_mra(&mut self, now: Duration, mra: &Mra) -> Received {
        // `cm_acquire_mraed_id`.
        let found = match mra.message_mraed {
            msg_response::REQ => self.acquire(mra.remote_comm_id, 0),
            _ => self.acquire(mra.remote_comm_id, mra.local_comm_id),
        };
        let Some(i) = found else {
            return Err(ReceiveError::UnknownConnection {
                attr: attr::MRA,
                local: mra.local_comm_id,
                remote: mra.remote_comm_id,
            });
        };
        let c = self.slot_mut(i);
        let id = ConnId(c.local_id);
        // `cm_mra_handler`: the outstanding message now waits the service timeout plus the
        // ACK timeout (`ib_modify_mad`), once.
        let timeout = convert_to_ms(mra.service_timeout) + convert_to_ms(c.av_timeout);
        let next = match (c.state, mra.message_mraed) {
            (State::ReqSent, msg_response::REQ) => State::MraReqRcvd,
            (State::RepSent, msg_response::REP) => State::MraRepRcvd,
            (State::MraReqRcvd | State::MraRepRcvd, _) => {
                return Err(ReceiveError::Duplicate {
                    id,
                    attr: attr::MRA,
                })
            }
            (s, _) => {
                return Err(ReceiveError::Unexpected {
                    id,
                    attr: attr::MRA,
                    state: s.name(),
                })
            }
        };
        c.state = next;
        if let Some(r) = c.retx.as_mut() {
            r.timeout_ms = timeout;
            r.deadline = Some(now + Duration::from_millis(timeout));
        }
        Ok(None)
    }

    pub(super) fn on_dreq(
        &mut self,
        now: Duration,
        from: CmAddress,
        tid: u64,
        dreq: &Dreq,
    ) -> Received {
        let Some(i) = self.acquire(dreq.remote_comm_id, dreq.local_comm_id) else {
            // `cm_issue_drep`: answer anyway, so the peer stops retrying.
            let drep = IdPair {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: PrivateData::EMPTY,
            };
            self.queue(from, Message::Drep(drep).encode(tid));
            return Err(ReceiveError::UnknownConnection {
                attr: attr::DREQ,
                local: dreq.local_comm_id,
                remote: dreq.remote_comm_id,
            });
        };
        let c = *self.slot(i);
        let id = ConnId(c.local_id);
        if c.local_qpn != dreq.remote_qpn {
            return Err(ReceiveError::QpnMismatch {
                id,
                got: dreq.remote_qpn,
                expected: c.local_qpn,
            });
        }
        let drep = |tid| {
            Message::Drep(IdPair {
                local_comm_id: c.local_id,
                remote_comm_id: c.remote_id,
                private_data: PrivateData::EMPTY,
            })
            .encode(tid)
        };
        match c.state {
            State::RepSent | State::MraRepRcvd | State::Established | State::DreqSent => {}
            State::Timewait => {
                // The DREP was lost: send it again (`cm_dreq_handler`, TIMEWAIT).
                self.queue(from, drep(c.tid));
                return Err(ReceiveError::Duplicate {
                    id,
                    attr: attr::DREQ,
                });
            }
            s => {
                return Err(ReceiveError::Unexpected {
                    id,
                    attr: attr::DREQ,
                    state: s.name(),
                })
            }
        }
        // DREQ_RCVD; rdma_cm reports DISCONNECTED and its consumer's rdma_disconnect sends the
        // DREP (`ib_send_cm_drep` -> timewait). Done here at once: nothing is left to decide.
        self.slot_mut(i).tid = tid;
        self.queue(c.peer, drep(tid));
        self.enter_timewait(i, now);
        Ok(Some(Event::Disconnected {
            id,
            timed_out: false,
        }))
    }

    pub(super) fn on_drep(&mut self, now: Duration, drep: &IdPair) -> Received {
        let Some(i) = self.acquire(drep.remote_comm_id, drep.local_comm_id) else {
            return Err(ReceiveError::UnknownConnection {
                attr: attr::DREP,
                local: drep.local_comm_id,
                remote: drep.remote_comm_id,
            });
        };
        let c = *self.slot(i);
        let id = ConnId(c.local_id);
        if c.state != State::DreqSent {
            return Err(ReceiveError::Unexpected {
                id,
                attr: attr::DREP,
                state: c.state.name(),
            });
        }
        self.enter_timewait(i, now);
        Ok(Some(Event::Disconnected {
            id,
            timed_out: false,
        }))
    }
}
