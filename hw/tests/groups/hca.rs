use super::common;
use cxdirect_hw::*;

pub fn checks() -> usize {
    let n = check_layouts!(
        hca::EnableHcaIn,
        hca::DisableHcaIn,
        hca::QueryIssiIn,
        hca::QueryIssiOut,
        hca::SetIssiIn,
        hca::QueryPagesIn,
        hca::QueryPagesOut,
        hca::ManagePagesIn,
        hca::ManagePagesOut,
        hca::InitHcaIn,
        hca::TeardownHcaIn,
        hca::TeardownHcaOut,
        hca::HcaCapUnion,
        hca::QueryHcaCapIn,
        hca::QueryHcaCapOut,
        hca::SetHcaCapIn,
        hca::AllocUarIn,
        hca::AllocUarOut,
        hca::DeallocUarIn,
        hca::AllocPdIn,
        hca::AllocPdOut,
        hca::DeallocPdIn,
        hca::AllocTransportDomainIn,
        hca::AllocTransportDomainOut,
        hca::DeallocTransportDomainIn,
        caps::CmdHcaCap,
        caps::PerProtocolNetworkingOffloadCaps,
        caps::FlowTablePropLayout,
        caps::FlowTableNicCap,
        hca::SetDriverVersionIn,
        hca::QueryAdapterIn,
        hca::QueryAdapterParamBlock,
        hca::QueryAdapterOut,
        eq::Eqc,
        eq::CreateEqIn,
        eq::CreateEqOut,
        eq::DestroyEqIn,
        qos::QosCap,
        eswitch::ESwitchCap,
        eswitch::FlowTableESwitchCap,
        eswitch::QueryEswVportContextIn,
        eswitch::EswVportContext,
        eswitch::QueryEswVportContextOut,
        eswitch::QueryEswFunctionsIn,
        eswitch::HostParamsContext,
        eswitch::QueryEswFunctionsOut,
        qos::SetPpRateLimitContext,
        qos::SetPpRateLimitIn,
        qos::SetPpRateLimitOut,
        qos::SchedulingContext,
        qos::CreateSchedulingElementIn,
        qos::CreateSchedulingElementOut,
        qos::ModifySchedulingElementIn,
        qos::DestroySchedulingElementIn,
        qos::QuerySchedulingElementIn,
        qos::QuerySchedulingElementOut,
        qos::SchedElemObjIn,
        qos::SchedElemObjOut,
        memic::DeviceMemCap,
        memic::AllocMemicIn,
        memic::AllocMemicOut,
        memic::DeallocMemicIn,
        memic::DeallocMemicOut,
        memic::ModifyMemicIn,
        memic::ModifyMemicOut,
        sw_icm::CreateSwIcmIn,
        sw_icm::QuerySwIcmOut,
    );
    helpers();
    nested_views();
    n
}

/// The op_mod helpers, constants and signed page counts.
fn helpers() {
    use hca::{cap_type, query_cap_op_mod, set_cap_op_mod};
    assert_eq!(query_cap_op_mod(cap_type::GENERAL_DEVICE, false), 0x0);
    assert_eq!(query_cap_op_mod(cap_type::GENERAL_DEVICE, true), 0x1);
    assert_eq!(query_cap_op_mod(cap_type::ETHERNET_OFFLOADS, false), 0x2);
    assert_eq!(query_cap_op_mod(cap_type::ETHERNET_OFFLOADS, true), 0x3);
    // libmlx5's `get_hca_general_caps_2`: (0x20 << 1) | HCA_CAP_OPMOD_GET_CUR.
    assert_eq!(query_cap_op_mod(cap_type::GENERAL_DEVICE_2, true), 0x41);
    assert_eq!(query_cap_op_mod(cap_type::GENERAL_DEVICE_2, false), 0x40);
    assert_eq!(set_cap_op_mod(cap_type::ROCE), 0x8);
    assert_eq!(hca::query_pages_op_mod::BOOT, 1);
    assert_eq!(hca::query_pages_op_mod::INIT, 2);
    assert_eq!(hca::query_pages_op_mod::REGULAR, 3);
    assert_eq!(hca::manage_pages_op_mod::ALLOC_FAIL, 0);
    assert_eq!(hca::manage_pages_op_mod::GIVE, 1);
    assert_eq!(hca::manage_pages_op_mod::TAKE, 2);

    let mut out = hca::QueryPagesOut::zeroed();
    out.set_num_pages_signed(-5);
    assert_eq!(out.num_pages(), 0xffff_fffb);
    assert_eq!(out.num_pages_signed(), -5);
    assert_eq!(&out.as_bytes()[0xc..0x10], &[0xff, 0xff, 0xff, 0xfb]);

    assert_eq!(eq::event_bitmask(&[]), 0);
    assert_eq!(
        eq::event_bitmask(&[0x0, 0xa, 0xb, 0x22]),
        (1 << 0xa) | (1 << 0xb) | (1 << 0x22) | 1
    );
    assert_eq!(eq::event_bit(64), 0);
    let mut create = eq::CreateEqIn::zeroed();
    create.set_event_bitmask(eq::event_bitmask(&[0xa]));
    assert_eq!(&create.as_bytes()[0x58..0x60], &[0, 0, 0, 0, 0, 0, 0x04, 0]);
}

/// Nested capability views land where the header puts them, and page arrays extend past the
/// fixed part.
fn nested_views() {
    let mut out = hca::QueryHcaCapOut::zeroed();
    out.capability_mut()
        .cmd_hca_cap_mut()
        .set_log_max_qp(0x11)
        .set_port_type(caps::port_type::ETHERNET);
    // log_max_qp: bit 0x9b of cmd_hca_cap, which starts at byte 0x10 of the output.
    assert_eq!(out.as_bytes()[0x10 + 0x13], 0x11);
    assert_eq!(out.capability().cmd_hca_cap().log_max_qp(), 0x11);
    assert_eq!(out.capability().cmd_hca_cap().port_type(), 1);
    out.capability_mut()
        .per_protocol_networking_offload_caps_mut()
        .set_wqe_inline_mode(caps::wqe_inline_mode::NOT_REQUIRED);
    assert_eq!(out.as_bytes()[0x10 + 0x2] & 0x30, 0x20);

    let mut mailbox = [0u8; hca::ManagePagesIn::<()>::SIZE + 3 * 8];
    let mut give = hca::ManagePagesIn::new(&mut mailbox[..]).unwrap();
    give.set_op_mod(hca::manage_pages_op_mod::GIVE)
        .set_input_num_entries(3);
    assert_eq!(give.pas_capacity(), 3);
    for i in 0..3 {
        give.set_pas(i, 0x1_0000_0000 + i as u64 * 0x1000).unwrap();
    }
    assert!(give.set_pas(3, 0).is_err());
    assert_eq!(give.pas(2).unwrap(), 0x1_0000_2000);
    assert_eq!(&mailbox[0x20..0x28], &[0, 0, 0, 0x01, 0, 0, 0x20, 0]);
}
