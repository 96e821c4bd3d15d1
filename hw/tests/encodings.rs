//! Encodings beyond plain fields: dword bitfields agree with the byte layouts, doorbell values
//! match the manual's formulas, and helpers round the way the device counts.

use cxdirect_hw::cmd::{self, CmdLayout, CmdStatus, DeliveryStatus, Opcode};
use cxdirect_hw::cqe::{self, CqeOpcode};
use cxdirect_hw::doorbell::{CqArm, EqDoorbell};
use cxdirect_hw::eqe::{self, Eqe, EventType};
use cxdirect_hw::init_seg::{self, CmdifRevFwSub, CmdqAddrLowSize, FwRev, InitSeg, Initializing};
use cxdirect_hw::wqe::{self, EthSeg};

#[test]
fn init_segment_dwords_agree_with_the_byte_layout() {
    let mut seg = InitSeg::zeroed();
    let addr_l = CmdqAddrLowSize::new()
        .with_cmdq_addr_l(0xabcde)
        .with_nic_interface(init_seg::nic_interface::SW_RESET)
        .with_log_cmdq_size(5)
        .with_log_cmdq_stride(6);
    let at = init_seg::CMDQ_ADDR_L_SZ;
    seg.as_bytes_mut()[at..at + 4].copy_from_slice(&addr_l.into_bits().to_be_bytes());
    assert_eq!(seg.cmdq_addr_l(), 0xabcde);
    assert_eq!(seg.nic_interface(), 7);
    assert_eq!(seg.log_cmdq_size(), 5);
    assert_eq!(seg.log_cmdq_stride(), 6);
    assert_eq!(addr_l.address_low(), 0xabcd_e000);

    let rev = FwRev::new().with_major(22).with_minor(31);
    seg.as_bytes_mut()[init_seg::FW_REV..4].copy_from_slice(&rev.into_bits().to_be_bytes());
    assert_eq!((seg.fw_rev_major(), seg.fw_rev_minor()), (22, 31));

    let sub = CmdifRevFwSub::new()
        .with_cmdif_rev(init_seg::CMDIF_REV)
        .with_fw_rev_subminor(1010);
    let at = init_seg::CMDIF_REV_FW_SUB;
    seg.as_bytes_mut()[at..at + 4].copy_from_slice(&sub.into_bits().to_be_bytes());
    assert_eq!((seg.cmdif_rev(), seg.fw_rev_subminor()), (5, 1010));

    let init = Initializing::new().with_initializing(true);
    assert_eq!(init.into_bits(), 0x8000_0000);
    let at = init_seg::INITIALIZING;
    seg.as_bytes_mut()[at..at + 4].copy_from_slice(&init.into_bits().to_be_bytes());
    assert!(seg.initializing() && !seg.fw_reset_supported());

    seg.health_mut()
        .set_synd(init_seg::health_syndrome::HW_FATAL_ERR)
        .set_fw_ver(0x1234);
    assert_eq!(seg.as_bytes()[init_seg::HEALTH_SYND], 8);
    let at = init_seg::HEALTH_FW_VER;
    assert_eq!(&seg.as_bytes()[at..at + 4], &0x1234u32.to_be_bytes());
    seg.set_health_counter(0x0102_0304);
    let at = init_seg::HEALTH_COUNTER;
    assert_eq!(&seg.as_bytes()[at..at + 4], &[1, 2, 3, 4]);
}

#[test]
fn cq_doorbell_is_sn_cmd_ci_then_cqn() {
    // sn << 28 | cmd << 24 | ci in the high word, cqn in the low word.
    let arm = CqArm::new().with_sn(2).with_cmd(1).with_ci(0x12_3456);
    assert_eq!(arm.into_bits(), 2 << 28 | 1 << 24 | 0x12_3456);
    assert_eq!(arm.doorbell(0x77), (0x2112_3456u64 << 32) | 0x77);
}

#[test]
fn eq_doorbell_is_eqn_over_ci() {
    let db = EqDoorbell::new().with_eqn(3).with_ci(0x00ab_cdef);
    assert_eq!(db.into_bits(), 3 << 24 | 0xab_cdef);
}

#[test]
fn cqe_ownership_follows_the_pass_parity() {
    let log_size = 4; // 16 entries
                      // First pass: the device writes owner 0.
    assert!(cqe::sw_owns((CqeOpcode::RespSend as u8) << 4, 0, log_size));
    assert!(!cqe::sw_owns(
        (CqeOpcode::RespSend as u8) << 4 | 1,
        0,
        log_size
    ));
    // Second pass: owner 1.
    assert!(cqe::sw_owns((CqeOpcode::Req as u8) << 4 | 1, 16, log_size));
    // An untouched slot is never software's on the first pass.
    assert!(!cqe::sw_owns(cqe::CQE_INITIAL_OP_OWN, 0, log_size));
    assert!(
        !cqe::sw_owns(0xf0, 0, log_size),
        "invalid opcode is never owned"
    );
}

#[test]
fn cqe_op_own_fields_decode() {
    let mut cqe = cqe::Cqe64::zeroed();
    cqe.as_bytes_mut()[0x3f] = 0xd0 | 0b1100 | 0b10 | 1;
    assert_eq!(cqe.opcode(), CqeOpcode::ReqErr as u8);
    assert_eq!(cqe.cqe_format(), cqe::cqe_format::COMPRESSED);
    assert!(cqe.se() && cqe.owner());
    cqe.as_bytes_mut()[0x1d] = 2 << 4 | 2 << 2 | 1;
    assert_eq!(cqe.l4_hdr_type(), cqe::l4_hdr_type::UDP);
    assert_eq!(cqe.l3_hdr_type(), cqe::l3_hdr_type::IPV4);
    assert!(cqe.has_vlan());
}

#[test]
fn eqe_views_read_the_event_data() {
    let mut eqe = Eqe::zeroed();
    eqe.set_event_type(EventType::PageRequest as u8);
    eqe.page_req_mut()
        .set_func_id(0)
        .set_num_pages((-5i32) as u32);
    assert_eq!(eqe.page_req().num_pages_signed(), -5);
    assert_eq!(&eqe.as_bytes()[0x24..0x28], &(-5i32).to_be_bytes());
    eqe.qp_srq_mut().set_qp_srq_n(0x42);
    assert_eq!(&eqe.as_bytes()[0x38..0x3c], &[0, 0, 0, 0x42]);
    assert_eq!(eqe::event_bit(EventType::SrqRqLimit), 1 << 0x14);
    assert_eq!(EventType::try_from(0x14), Ok(EventType::SrqRqLimit));
    assert!(EventType::try_from(0x99).is_err());
}

#[test]
fn ethernet_segment_vlan_insertion_shares_the_inline_header_word() {
    let mut eth = EthSeg::zeroed();
    assert_eq!(eth.vlan_insert(), None);
    eth.set_vlan_insert(0x2064);
    assert_eq!(eth.vlan_insert(), Some(0x2064));
    assert_eq!(eth.inline_hdr_sz(), wqe::ETH_WQE_INSERT_VLAN);
    eth.set_l3_csum(true).set_l4_csum(true);
    assert_eq!(eth.as_bytes()[4], 0xc0);
}

#[test]
fn wqe_sizes_round_up_to_units() {
    assert_eq!(wqe::inline_seg_ds(0), 1);
    assert_eq!(wqe::inline_seg_ds(12), 1);
    assert_eq!(wqe::inline_seg_ds(13), 2);
    assert_eq!(wqe::wqebbs(4), 1);
    assert_eq!(wqe::wqebbs(5), 2);
    let mut ctrl = wqe::CtrlSeg::zeroed();
    ctrl.set_ce(wqe::completion::ALWAYS)
        .set_se(true)
        .set_fm(wqe::fence_mode::SMALL_AND_FENCE);
    assert_eq!(ctrl.as_bytes()[11], 4 << 5 | 2 << 2 | 1 << 1);
}

#[test]
fn command_entry_inline_parts_and_status() {
    let mut entry = CmdLayout::zeroed();
    entry
        .set_inline_input(&[1; 20])
        .set_status_own((DeliveryStatus::TokenError as u8) << 1 | 1);
    assert_eq!(entry.inline_input(), [1; 16]);
    assert_eq!(entry.inline_output(), [0; 16]);
    assert!(entry.owned_by_hw());
    assert_eq!(
        DeliveryStatus::try_from(entry.delivery_status_raw()),
        Ok(DeliveryStatus::TokenError)
    );
    assert_eq!(cmd::mailbox_blocks(16), 0);
    assert_eq!(cmd::mailbox_blocks(17), 1);
    assert_eq!(cmd::mailbox_blocks(16 + 512 * 40), 40);
    assert_eq!(cmd::xor8(&[0x0f, 0xf0, 0xff]), 0);
}

#[test]
fn codes_have_manual_names_and_reject_unknown_values() {
    assert_eq!(Opcode::CreateCq.name(), "CREATE_CQ");
    assert_eq!(Opcode::try_from(0x90d), Ok(Opcode::ModifyRmp));
    let err = Opcode::try_from(0x7777).unwrap_err();
    assert_eq!(err.to_string(), "unknown opcode 0x7777");
    assert_eq!(
        CmdStatus::BadResourceState.to_string(),
        "BAD_RES_STATE (0x9)"
    );
    // Every code converts back to itself.
    for op in Opcode::ALL {
        assert_eq!(Opcode::try_from(*op as u16), Ok(*op));
    }
    for st in CmdStatus::ALL {
        assert_eq!(CmdStatus::try_from(*st as u8), Ok(*st));
    }
}

#[test]
fn short_buffers_are_refused_and_arrays_are_bounded() {
    let short = [0u8; 10];
    let err = cmd::CmdOut::new(&short[..]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "buffer of 10 bytes is too short for `mbox_out`, which needs 16 bytes"
    );
    let entry = CmdLayout::zeroed();
    assert!(entry.inline_data(31).is_ok());
    assert!(
        entry.inline_data(32).is_ok(),
        "out_ptr bytes follow the inline output"
    );
    assert!(entry.inline_data(48).is_err());
}

#[test]
fn mini_cqe_arrays_sit_inside_their_session() {
    use cqe::{mini_array_slot, MINI_CQES_PER_SLOT};
    // Linux and DPDK read the first array right after the title, the next ones every eight
    // slots (the second is seven slots after the first).
    assert_eq!(mini_array_slot(0), 1);
    assert_eq!(mini_array_slot(7), 1);
    assert_eq!(mini_array_slot(8), 8);
    assert_eq!(mini_array_slot(15), 8);
    assert_eq!(mini_array_slot(16), 16);
    for count in 2..=256u32 {
        let last = mini_array_slot(count - 1);
        assert!(last < count, "session of {count}: array at slot {last}");
        let arrays = (0..count)
            .map(mini_array_slot)
            .collect::<std::collections::BTreeSet<_>>();
        assert_eq!(arrays.len() as u32, count.div_ceil(MINI_CQES_PER_SLOT));
    }
    let mut mini = cqe::MiniCqe8::zeroed();
    mini.set_rx_hash_result(0x0102_0304).set_byte_cnt(60);
    assert_eq!(mini.as_bytes(), &[1, 2, 3, 4, 0, 0, 0, 60]);
    let csum = cqe::MiniCqe8Csum::new(mini.as_bytes()).expect("8 bytes");
    assert_eq!(
        (csum.checksum(), csum.stridx(), csum.byte_cnt()),
        (0x0102, 0x0304, 60)
    );
}

#[test]
fn op_own_helpers_agree_with_the_cqe_table() {
    use cxdirect_hw::cqe::op_own;
    let mut cqe = cqe::Cqe64::zeroed();
    cqe.set_opcode(CqeOpcode::RespErr as u8)
        .set_cqe_format(cqe::cqe_format::COMPRESSED)
        .set_se(true)
        .set_owner(true);
    let byte = cqe.as_bytes()[op_own::BYTE];
    assert_eq!(op_own::BYTE, 0x3f);
    assert_eq!(op_own::opcode(byte), CqeOpcode::RespErr as u8);
    assert_eq!(op_own::format(byte), cqe::cqe_format::COMPRESSED);
    assert_eq!(op_own::owner(byte), 1);
    assert_eq!(
        (op_own::OPCODE_MASK, op_own::FORMAT_MASK, op_own::OWNER_MASK),
        (0xf0, 0x0c, 0x01)
    );
    let built = op_own::with(CqeOpcode::Invalid as u8, 1);
    cqe.as_bytes_mut()[op_own::BYTE] = built;
    assert_eq!(cqe.opcode(), CqeOpcode::Invalid as u8);
    assert_eq!(cqe.cqe_format(), 0);
    assert!(cqe.owner() && !cqe.se());
    assert_eq!(built, cqe::CQE_INITIAL_OP_OWN);
}

#[test]
fn field_lookup_returns_the_table_row() {
    use cxdirect_hw::layout::field;
    use cxdirect_hw::Layout;
    const BYTE_CNT: cxdirect_hw::FieldInfo = field::<cqe::Cqe64>("byte_cnt");
    let row = cqe::Cqe64::FIELDS
        .iter()
        .find(|f| f.name == "byte_cnt")
        .unwrap();
    assert_eq!(BYTE_CNT, *row);
    assert_eq!((BYTE_CNT.dword_byte(), BYTE_CNT.dword_shift()), (0x2c, 0));
    assert!(BYTE_CNT.in_one_dword() && !BYTE_CNT.in_one_byte());
    let l4 = field::<cqe::Cqe64>("l4_hdr_type");
    assert_eq!((l4.byte(), l4.byte_shift(), l4.mask()), (0x1d, 4, 0x7));
    let qpn = field::<cqe::Cqe64>("qpn");
    assert_eq!(
        (qpn.dword_byte(), qpn.dword_shift(), qpn.mask()),
        (0x38, 0, 0xff_ffff)
    );
}
