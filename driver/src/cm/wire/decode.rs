//! Reading a received MAD into a [`Message`]: every field through a `hw::cm` layout over exactly
//! 256 bytes, reserved values refused.

use super::{
    Dreq, Gid, IdPair, Message, Mra, ParseError, Parsed, Path, PrivateData, Rej, Rep, Req,
};
use cxdirect_hw::cm::{
    self as hw, attr, CmDrep, CmDreq, CmMra, CmRej, CmRep, CmReq, CmRtu, MadHdr, MAD_SIZE,
};

fn pd(mad: &[u8], range: core::ops::Range<usize>) -> PrivateData {
    PrivateData::new(mad.get(range).unwrap_or(&[])).unwrap_or_default()
}

fn gid(mad: &[u8], range: core::ops::Range<usize>) -> Gid {
    let mut g = [0; 16];
    if let Some(src) = mad.get(range) {
        if src.len() == 16 {
            g.copy_from_slice(src);
        }
    }
    g
}

fn check_response(field: &'static str, v: u8) -> Result<u8, ParseError> {
    if v > hw::msg_response::OTHER {
        Err(ParseError::Reserved {
            field,
            value: v.into(),
        })
    } else {
        Ok(v)
    }
}

/// Parses a received MAD. Checks what `mad.c: validate_mad` and ib_cm's agent registration
/// check (base version, class, class version, method), then the attribute and its fields.
pub fn parse(mad: &[u8]) -> Result<Parsed, ParseError> {
    if mad.len() != MAD_SIZE {
        return Err(ParseError::BadLength(mad.len()));
    }
    let hdr = MadHdr::new(mad).map_err(|_| ParseError::BadLength(mad.len()))?;
    if hdr.base_version() != hw::BASE_VERSION {
        return Err(ParseError::BaseVersion(hdr.base_version()));
    }
    if hdr.mgmt_class() != hw::MGMT_CLASS_CM {
        return Err(ParseError::Class(hdr.mgmt_class()));
    }
    if hdr.class_version() != hw::CM_CLASS_VERSION {
        return Err(ParseError::ClassVersion(hdr.class_version()));
    }
    if hdr.method() != hw::METHOD_SEND {
        return Err(ParseError::Method(hdr.method()));
    }
    let tid = hdr.tid();
    let bad = |_| ParseError::BadLength(mad.len());
    let message = match hdr.attr_id() {
        attr::REQ => Message::Req(parse_req(mad)?),
        attr::REP => {
            let m = CmRep::new(mad).map_err(bad)?;
            Message::Rep(Rep {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                local_q_key: m.local_q_key(),
                local_qpn: m.local_qpn(),
                local_eecn: m.local_ee_context_number(),
                starting_psn: m.starting_psn(),
                responder_resources: m.responder_resources(),
                initiator_depth: m.initiator_depth(),
                target_ack_delay: m.target_ack_delay(),
                failover_accepted: m.failover_accepted(),
                flow_control: m.end_to_end_flow_control(),
                rnr_retry_count: m.rnr_retry_count(),
                srq: m.srq(),
                local_ca_guid: m.local_ca_guid(),
                private_data: pd(mad, CmRep::<()>::PRIVATE_DATA),
            })
        }
        attr::RTU => {
            let m = CmRtu::new(mad).map_err(bad)?;
            Message::Rtu(IdPair {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                private_data: pd(mad, CmRtu::<()>::PRIVATE_DATA),
            })
        }
        attr::DREP => {
            let m = CmDrep::new(mad).map_err(bad)?;
            Message::Drep(IdPair {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                private_data: pd(mad, CmDrep::<()>::PRIVATE_DATA),
            })
        }
        attr::DREQ => {
            let m = CmDreq::new(mad).map_err(bad)?;
            Message::Dreq(Dreq {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                remote_qpn: m.remote_qpn_eecn(),
                private_data: pd(mad, CmDreq::<()>::PRIVATE_DATA),
            })
        }
        attr::REJ => {
            let m = CmRej::new(mad).map_err(bad)?;
            let ari_len = m.rejected_info_length();
            if usize::from(ari_len) > CmRej::<()>::ARI.len() {
                return Err(ParseError::BadLength2 {
                    field: "rejected_info_length",
                    len: ari_len.into(),
                    max: CmRej::<()>::ARI.len(),
                });
            }
            let mut ari = [0; 72];
            if let Some(src) = mad.get(CmRej::<()>::ARI) {
                ari.copy_from_slice(src);
            }
            Message::Rej(Rej {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                message_rejected: check_response("message_rejected", m.message_rejected())?,
                reason: m.reason(),
                ari_len,
                ari,
                private_data: pd(mad, CmRej::<()>::PRIVATE_DATA),
            })
        }
        attr::MRA => {
            let m = CmMra::new(mad).map_err(bad)?;
            Message::Mra(Mra {
                local_comm_id: m.local_comm_id(),
                remote_comm_id: m.remote_comm_id(),
                message_mraed: check_response("message_mraed", m.message_mraed())?,
                service_timeout: m.service_timeout(),
                private_data: pd(mad, CmMra::<()>::PRIVATE_DATA),
            })
        }
        a @ (attr::SIDR_REQ | attr::SIDR_REP | attr::LAP | attr::APR | attr::CLASS_PORT_INFO) => {
            return Err(ParseError::UnsupportedAttribute(a))
        }
        a => return Err(ParseError::UnknownAttribute(a)),
    };
    Ok(Parsed { tid, message })
}

fn parse_req(mad: &[u8]) -> Result<Req, ParseError> {
    let m = CmReq::new(mad).map_err(|_| ParseError::BadLength(mad.len()))?;
    let tst = m.transport_service_type();
    // IBTA table 106: 2 is reserved; 3 means "see extended transport type", of which only 1
    // (XRC, `cm_req_get_qp_type`) is defined.
    if tst == 2 || (tst == 3 && m.extended_transport_type() != 1) {
        return Err(ParseError::Reserved {
            field: "transport_service_type",
            value: tst.into(),
        });
    }
    let mtu = m.path_packet_payload_mtu();
    if !(1..=5).contains(&mtu) {
        return Err(ParseError::Reserved {
            field: "path_packet_payload_mtu",
            value: mtu.into(),
        });
    }
    let path = |alt: bool| Path {
        local_lid: if alt {
            m.alternate_local_port_lid()
        } else {
            m.primary_local_port_lid()
        },
        remote_lid: if alt {
            m.alternate_remote_port_lid()
        } else {
            m.primary_remote_port_lid()
        },
        local_gid: gid(
            mad,
            if alt {
                CmReq::<()>::ALTERNATE_LOCAL_PORT_GID
            } else {
                CmReq::<()>::PRIMARY_LOCAL_PORT_GID
            },
        ),
        remote_gid: gid(
            mad,
            if alt {
                CmReq::<()>::ALTERNATE_REMOTE_PORT_GID
            } else {
                CmReq::<()>::PRIMARY_REMOTE_PORT_GID
            },
        ),
        flow_label: if alt {
            m.alternate_flow_label()
        } else {
            m.primary_flow_label()
        },
        packet_rate: if alt {
            m.alternate_packet_rate()
        } else {
            m.primary_packet_rate()
        },
        traffic_class: if alt {
            m.alternate_traffic_class()
        } else {
            m.primary_traffic_class()
        },
        hop_limit: if alt {
            m.alternate_hop_limit()
        } else {
            m.primary_hop_limit()
        },
        sl: if alt {
            m.alternate_sl()
        } else {
            m.primary_sl()
        },
        subnet_local: if alt {
            m.alternate_subnet_local()
        } else {
            m.primary_subnet_local()
        },
        local_ack_timeout: if alt {
            m.alternate_local_ack_timeout()
        } else {
            m.primary_local_ack_timeout()
        },
    };
    Ok(Req {
        local_comm_id: m.local_comm_id(),
        service_id: m.service_id(),
        local_ca_guid: m.local_ca_guid(),
        local_q_key: m.local_q_key(),
        local_qpn: m.local_qpn(),
        responder_resources: m.responder_resources(),
        local_eecn: m.local_eecn(),
        initiator_depth: m.initiator_depth(),
        remote_eecn: m.remote_eecn(),
        remote_cm_response_timeout: m.remote_cm_response_timeout(),
        transport_service_type: tst,
        flow_control: m.end_to_end_flow_control(),
        starting_psn: m.starting_psn(),
        local_cm_response_timeout: m.local_cm_response_timeout(),
        retry_count: m.retry_count(),
        pkey: m.partition_key(),
        path_mtu: mtu,
        rdc_exists: m.rdc_exists(),
        rnr_retry_count: m.rnr_retry_count(),
        max_cm_retries: m.max_cm_retries(),
        srq: m.srq(),
        extended_transport_type: m.extended_transport_type(),
        primary: path(false),
        alternate: path(true),
        sap_supported: m.sap_supported(),
        private_data: pd(mad, CmReq::<()>::PRIVATE_DATA),
    })
}
