//! Building a [`Message`] into a MAD as ib_cm's `cm_format_*` functions do.

use super::{Mad, Message};
use cxdirect_hw::cm::{
    self as hw, attr, CmDrep, CmDreq, CmMra, CmRej, CmRep, CmReq, CmRtu, MadHdr, MAD_SIZE,
};

/// The header every CM message starts with (`cm.c: cm_format_mad_hdr`): base version 1,
/// class CM, class version 2, method SEND, status 0, the attribute and the TID.
fn header(mad: &mut Mad, attr_id: u16, tid: u64) {
    let mut h = MadHdr::new(&mut mad[..]).unwrap_or_else(|_| unreachable!("256 >= 24 bytes"));
    h.set_base_version(hw::BASE_VERSION)
        .set_mgmt_class(hw::MGMT_CLASS_CM)
        .set_class_version(hw::CM_CLASS_VERSION)
        .set_method(hw::METHOD_SEND)
        .set_attr_id(attr_id)
        .set_tid(tid);
}

fn put(mad: &mut Mad, range: core::ops::Range<usize>, data: &[u8]) {
    let n = data.len().min(range.len());
    mad[range.start..range.start + n].copy_from_slice(&data[..n]);
}

impl Message {
    /// Builds the MAD, with `tid` in its header. Private data longer than the message's room
    /// is cut to it (the `Cm` API refuses it before it gets here).
    pub fn encode(&self, tid: u64) -> Mad {
        let mut mad = [0u8; MAD_SIZE];
        // Views over a 256-byte array never fail to build.
        macro_rules! view {
            ($l:ident) => {
                $l::new(&mut mad[..]).unwrap_or_else(|_| unreachable!("256-byte MAD"))
            };
        }
        match self {
            Message::Req(r) => {
                header(&mut mad, attr::REQ, tid);
                let mut m = view!(CmReq);
                m.set_local_comm_id(r.local_comm_id)
                    .set_service_id(r.service_id)
                    .set_local_ca_guid(r.local_ca_guid)
                    .set_local_q_key(r.local_q_key)
                    .set_local_qpn(r.local_qpn)
                    .set_responder_resources(r.responder_resources)
                    .set_local_eecn(r.local_eecn)
                    .set_initiator_depth(r.initiator_depth)
                    .set_remote_eecn(r.remote_eecn)
                    .set_remote_cm_response_timeout(r.remote_cm_response_timeout)
                    .set_transport_service_type(r.transport_service_type)
                    .set_end_to_end_flow_control(r.flow_control)
                    .set_starting_psn(r.starting_psn)
                    .set_local_cm_response_timeout(r.local_cm_response_timeout)
                    .set_retry_count(r.retry_count)
                    .set_partition_key(r.pkey)
                    .set_path_packet_payload_mtu(r.path_mtu)
                    .set_rdc_exists(r.rdc_exists)
                    .set_rnr_retry_count(r.rnr_retry_count)
                    .set_max_cm_retries(r.max_cm_retries)
                    .set_srq(r.srq)
                    .set_extended_transport_type(r.extended_transport_type)
                    .set_primary_local_port_lid(r.primary.local_lid)
                    .set_primary_remote_port_lid(r.primary.remote_lid)
                    .set_primary_flow_label(r.primary.flow_label)
                    .set_primary_packet_rate(r.primary.packet_rate)
                    .set_primary_traffic_class(r.primary.traffic_class)
                    .set_primary_hop_limit(r.primary.hop_limit)
                    .set_primary_sl(r.primary.sl)
                    .set_primary_subnet_local(r.primary.subnet_local)
                    .set_primary_local_ack_timeout(r.primary.local_ack_timeout)
                    .set_alternate_local_port_lid(r.alternate.local_lid)
                    .set_alternate_remote_port_lid(r.alternate.remote_lid)
                    .set_alternate_flow_label(r.alternate.flow_label)
                    .set_alternate_packet_rate(r.alternate.packet_rate)
                    .set_alternate_traffic_class(r.alternate.traffic_class)
                    .set_alternate_hop_limit(r.alternate.hop_limit)
                    .set_alternate_sl(r.alternate.sl)
                    .set_alternate_subnet_local(r.alternate.subnet_local)
                    .set_alternate_local_ack_timeout(r.alternate.local_ack_timeout)
                    .set_sap_supported(r.sap_supported);
                put(
                    &mut mad,
                    CmReq::<()>::PRIMARY_LOCAL_PORT_GID,
                    &r.primary.local_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::PRIMARY_REMOTE_PORT_GID,
                    &r.primary.remote_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::ALTERNATE_LOCAL_PORT_GID,
                    &r.alternate.local_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::ALTERNATE_REMOTE_PORT_GID,
                    &r.alternate.remote_gid,
                );
                put(
                    &mut mad,
                    CmReq::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Rep(r) => {
                header(&mut mad, attr::REP, tid);
                let mut m = view!(CmRep);
                m.set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_local_q_key(r.local_q_key)
                    .set_local_qpn(r.local_qpn)
                    .set_local_ee_context_number(r.local_eecn)
                    .set_starting_psn(r.starting_psn)
                    .set_responder_resources(r.responder_resources)
                    .set_initiator_depth(r.initiator_depth)
                    .set_target_ack_delay(r.target_ack_delay)
                    .set_failover_accepted(r.failover_accepted)
                    .set_end_to_end_flow_control(r.flow_control)
                    .set_rnr_retry_count(r.rnr_retry_count)
                    .set_srq(r.srq)
                    .set_local_ca_guid(r.local_ca_guid);
                put(
                    &mut mad,
                    CmRep::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Rtu(r) => {
                header(&mut mad, attr::RTU, tid);
                view!(CmRtu)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id);
                put(
                    &mut mad,
                    CmRtu::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Drep(r) => {
                header(&mut mad, attr::DREP, tid);
                view!(CmDrep)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id);
                put(
                    &mut mad,
                    CmDrep::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Dreq(r) => {
                header(&mut mad, attr::DREQ, tid);
                view!(CmDreq)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_remote_qpn_eecn(r.remote_qpn);
                put(
                    &mut mad,
                    CmDreq::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Rej(r) => {
                header(&mut mad, attr::REJ, tid);
                view!(CmRej)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_message_rejected(r.message_rejected)
                    .set_rejected_info_length(r.ari_len.min(72))
                    .set_reason(r.reason);
                let n = usize::from(r.ari_len.min(72));
                put(&mut mad, CmRej::<()>::ARI, &r.ari[..n]);
                put(
                    &mut mad,
                    CmRej::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
            Message::Mra(r) => {
                header(&mut mad, attr::MRA, tid);
                view!(CmMra)
                    .set_local_comm_id(r.local_comm_id)
                    .set_remote_comm_id(r.remote_comm_id)
                    .set_message_mraed(r.message_mraed)
                    .set_service_timeout(r.service_timeout);
                put(
                    &mut mad,
                    CmMra::<()>::PRIVATE_DATA,
                    r.private_data.as_slice(),
                );
            }
        }
        mad
    }
}
