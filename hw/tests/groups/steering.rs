use super::common;
use cxdirect_hw::definer::*;
use cxdirect_hw::flow::*;
use cxdirect_hw::meter::*;
use cxdirect_hw::mkey::*;
use cxdirect_hw::modify_header::*;
use cxdirect_hw::reformat::*;
use cxdirect_hw::reg::*;
use cxdirect_hw::sampler::*;
use cxdirect_hw::vport::*;

pub fn checks() -> usize {
    let checks = check_layouts!(
        Ipv4Layout,
        Ipv6Layout,
        Ipv6LayoutIpv4LayoutAuto,
        FteMatchSetLyr24,
        FteMatchSetMisc,
        FteMatchSetMisc2,
        FteMatchSetMisc3,
        FteMatchParam,
        FlowTableContext,
        CreateFlowTableIn,
        CreateFlowTableOut,
        DestroyFlowTableIn,
        CreateFlowGroupIn,
        CreateFlowGroupOut,
        DestroyFlowGroupIn,
        DestFormatStruct,
        FlowCounterList,
        DestFormatStructFlowCounterListAuto,
        FlowContext,
        SetFteIn,
        AllocFlowCounterIn,
        AllocFlowCounterOut,
        DeallocFlowCounterIn,
        QueryFlowCounterIn,
        QueryFlowCounterOut,
        DeleteFteIn,
        SetFlowTableRootIn,
        ModifyFlowTableIn,
        MacAddressLayout,
        NicVportContext,
        QueryNicVportContextIn,
        QueryNicVportContextOut,
        ModifyNicVportFieldSelect,
        ModifyNicVportContextIn,
        QueryVportStateIn,
        QueryVportStateOut,
        AccessRegisterIn,
        AccessRegisterOut,
        PaosReg,
        PmtuReg,
        PtysReg,
        PfccReg,
        QtctReg,
        QetcReg,
        EtsTcnConfigReg,
        PpcntReg,
        Eth8023CntrsGrpDataLayout,
        Eth2863CntrsGrpDataLayout,
        TrafficCounter,
        QueryVportCounterIn,
        QueryVportCounterOut,
        Mkc,
        CreateMkeyIn,
        CreateMkeyOut,
        QueryMkeyIn,
        QueryMkeyOut,
        QuerySpecialContextsOut,
        DestroyMkeyIn,
        Mtt,
        QueryFlowTableIn,
        QueryFlowTableOut,
        AllocPacketReformatContextIn,
        PacketReformatContextIn,
        AllocPacketReformatContextOut,
        DeallocPacketReformatContextIn,
        AllocModifyHeaderContextIn,
        AllocModifyHeaderContextOut,
        DeallocModifyHeaderContextIn,
        SetActionIn,
        CopyActionIn,
        CreateFlowSamplerIn,
        QueryFlowSamplerOut,
        CreateFlowMeterIn,
        QueryFlowMeterOut,
        CreateMatchDefinerIn,
    );
    helpers();
    checks
}

/// The helpers outside the field tables: MAC and address joins, the destination and MTT entry
/// encodings, memory key numbering, the split access mode, and the views that reach the lists
/// after a nested context.
fn helpers() {
    // MAC addresses split across two fields.
    let mut m = FteMatchSetLyr24::zeroed();
    m.set_smac(0x0102_0304_0506).set_dmac(0xa1a2_a3a4_a5a6);
    assert_eq!(m.smac_47_16(), 0x0102_0304);
    assert_eq!(m.smac_15_0(), 0x0506);
    assert_eq!(m.dmac(), 0xa1a2_a3a4_a5a6);
    assert_eq!(&m.as_bytes()[..6], &[1, 2, 3, 4, 5, 6]);
    // IPv4 sits in the last dword of the 128-bit slot.
    m.src_ipv4_src_ipv6_mut()
        .ipv4_layout_mut()
        .set_ipv4(0xc0a8_0001);
    assert_eq!(&m.as_bytes()[0x2c..0x30], &[0xc0, 0xa8, 0, 1]);
    m.dst_ipv4_dst_ipv6_mut()
        .ipv6_layout_mut()
        .set_addr([0xfe; 16]);
    assert_eq!(m.dst_ipv4_dst_ipv6().ipv6_layout().ipv6(15), Ok(0xfe));

    let mut mac = MacAddressLayout::zeroed();
    mac.set_mac(0x0a0b_0c0d_0e0f);
    assert_eq!(mac.as_bytes(), &[0, 0, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
    assert_eq!(mac.mac(), 0x0a0b_0c0d_0e0f);

    // A destination entry as u64 reads back through the dest_format_struct layout.
    let entry = dest_format_entry(FLOW_DESTINATION_TYPE_TIR, 0x12_3456);
    let mut buf = vec![0u8; <SetFteIn>::SIZE + 2 * DEST_FORMAT_SIZE];
    let mut fte = SetFteIn::new(&mut buf[..]).unwrap();
    fte.flow_context_mut()
        .set_action(FLOW_CONTEXT_ACTION_FWD_DEST)
        .set_destination_list_size(2);
    let mut ctx = fte.flow_context_all_mut();
    assert_eq!(ctx.destination_capacity(), 2);
    ctx.set_destination(1, entry).unwrap();
    assert!(ctx.set_destination(2, entry).is_err());
    let ctx = fte.flow_context_all();
    let dest = ctx.destination_entry(1).unwrap();
    assert_eq!(dest.destination_type(), FLOW_DESTINATION_TYPE_TIR);
    assert_eq!(dest.destination_id(), 0x12_3456);
    assert_eq!(&buf[0x348..0x34c], &[2, 0x12, 0x34, 0x56]);

    // The allowed list after a nested vport context.
    let mut buf = vec![0u8; <QueryNicVportContextOut>::SIZE + 8];
    let mut out = QueryNicVportContextOut::new(&mut buf[..]).unwrap();
    out.nic_vport_context_all_mut()
        .set_current_uc_mac_address(0, 0x0a0b_0c0d_0e0f)
        .unwrap();
    assert_eq!(
        &buf[0x110..0x118],
        &[0, 0, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]
    );

    // Memory keys.
    assert_eq!(mkey_from_index(0x12_3456, 0x78), 0x1234_5678);
    assert_eq!(mkey_to_index(0x1234_5678), 0x12_3456);
    assert_eq!(mkey_variant(0x1234_5678), 0x78);
    let mut mkc = Mkc::zeroed();
    mkc.set_access_mode(MKC_ACCESS_MODE_MEMIC);
    assert_eq!((mkc.access_mode_4_2(), mkc.access_mode_1_0()), (1, 1));
    assert_eq!(mkc.access_mode(), MKC_ACCESS_MODE_MEMIC);
    mkc.set_access_mode(MKC_ACCESS_MODE_MTT);
    assert_eq!((mkc.access_mode_4_2(), mkc.access_mode_1_0()), (0, 1));

    // MTT entries: read is rd_en (bit 0), write is wr_en (bit 1), low address byte dropped.
    let mut mtt = Mtt::zeroed();
    mtt.set_entry(mtt_entry(0x1234_5678_9abc_def0, true, false));
    assert!(mtt.rd_en() && !mtt.wr_en());
    assert_eq!(mtt.addr(), 0x1234_5678_9abc_de00);
    mtt.set_entry(mtt_entry(0x1000, false, true));
    assert!(!mtt.rd_en() && mtt.wr_en());
    assert_eq!(mtt.ptag_31_8(), 0x10);
    assert_eq!(mtt.entry(), 0x1002);

    let mut buf = vec![0u8; <CreateMkeyIn>::SIZE + 2 * MTT_ENTRY_SIZE];
    let mut mk = CreateMkeyIn::new(&mut buf[..]).unwrap();
    assert_eq!(mk.mtt_capacity(), 2);
    mk.set_mtt(1, mtt_entry(0xdead_b000, true, true)).unwrap();
    assert!(mk.set_mtt(2, 0).is_err());
    assert_eq!(mk.mtt(1), Ok(0xdead_b003));
    assert_eq!(mk.klm_pas_mtt(3), Ok(0xdead_b003));

    let mut q = QueryMkeyOut::zeroed();
    q.set_translation(3, 0x1003).unwrap();
    assert_eq!(q.bsf1_klm1_pas_mtt2_3(15), Ok(0x03));
    assert!(q.translation(4).is_err());

    // PAOS inside ACCESS_REG data.
    let mut buf = [0u8; <AccessRegisterIn>::SIZE + <PaosReg>::SIZE];
    AccessRegisterIn::new(&mut buf[..])
        .unwrap()
        .set_register_id(REG_PAOS)
        .set_op_mod(ACCESS_REG_OP_MOD_WRITE);
    PaosReg::new(&mut buf[<AccessRegisterIn>::SIZE..])
        .unwrap()
        .set_local_port(1)
        .set_admin_status(PORT_STATUS_UP)
        .set_ase(true);
    let areg = AccessRegisterIn::new(&buf[..]).unwrap();
    assert_eq!(areg.register_data(0), Ok(0x0001_0100));
    assert_eq!(areg.register_data(1), Ok(0x8000_0000));
}
