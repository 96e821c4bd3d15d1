//! The model read as Linux's mlx5_core reads it: each test is a divergence the kernel's own
//! driver exposed, sent with the lengths and fields that driver uses (its layouts are the
//! `mlx5_ifc.h` ones, whose output sizes are not always our driver's).

use cxdirect_emu::testkit::{CmdFail, Cq, Host, Sq};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::{CmdHcaCap, FlowTableNicCap};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::hca::{self, query_pages_op_mod, QueryAdapterOut, SetDriverVersionIn, PSID_BYTES};

const MEM: usize = 64 << 20;

/// Size of `enable_hca_out` and `disable_hca_out` in `mlx5_ifc.h`: status, syndrome and one
/// reserved dword.
const ENABLE_HCA_OUT_BYTES: usize = 12;

fn host() -> Host {
    Host::new(Device::loopback(EmuConfig::default()), MEM)
}

#[test]
fn enable_and_disable_hca_accept_their_twelve_byte_outputs() {
    let mut h = host();
    h.start_cmdif();
    h.exec(&Host::input(Opcode::EnableHca, 0, 16), ENABLE_HCA_OUT_BYTES)
        .expect("ENABLE_HCA with a 12-byte output");
    // The function really is enabled: the commands of the enabled state are answered.
    let out = h
        .exec(&Host::input(Opcode::QueryIssi, 0, 16), 0x70)
        .expect("QUERY_ISSI after ENABLE_HCA");
    assert_eq!(
        hca::QueryIssiOut::new(&out[..])
            .unwrap()
            .supported_issi_dw0()
            & 0b11,
        0b11
    );
    assert_eq!(h.query_pages(query_pages_op_mod::BOOT), 16);
    h.exec(
        &Host::input(Opcode::DisableHca, 0, 16),
        ENABLE_HCA_OUT_BYTES,
    )
    .expect("DISABLE_HCA with a 12-byte output");
    // And disabled again: only ENABLE_HCA is accepted.
    assert_eq!(
        h.exec(&Host::input(Opcode::QueryIssi, 0, 16), 0x70),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
}

#[test]
fn a_refused_command_never_reads_as_success() {
    let mut h = host();
    h.start_cmdif();
    h.exec(&Host::input(Opcode::EnableHca, 0, 16), ENABLE_HCA_OUT_BYTES)
        .unwrap();
    // QUERY_ISSI's output is 0x70 bytes: 12 cannot hold it, and the status says so.
    assert_eq!(
        h.exec(&Host::input(Opcode::QueryIssi, 0, 16), ENABLE_HCA_OUT_BYTES),
        Err(CmdFail::status(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort
        ))
    );
    // A command refused for the HCA's state, with a 12-byte output, still carries its status.
    assert_eq!(
        h.exec(&Host::input(Opcode::AllocPd, 0, 16), ENABLE_HCA_OUT_BYTES),
        Err(CmdFail::status(
            CmdStatus::BadSystemState,
            Syndrome::WrongHcaState
        ))
    );
    // An output too short for the status itself cannot carry a command status: the entry's
    // delivery status reports the output length instead.
    assert!(matches!(
        h.exec(&Host::input(Opcode::Nop, 0, 16), 4),
        Err(CmdFail::Delivery(_))
    ));
}

/// ENABLE_HCA, ISSI 1, boot pages, the capabilities set as read, init pages and INIT_HCA: the
/// bring-up up to where Linux starts asking what the device can do.
fn initialized_host() -> Host {
    let h = host();
    h.start_cmdif();
    initialized_host_on(h)
}

/// As [`initialized_host`], on a host whose command interface already runs.
fn initialized_host_on(mut h: Host) -> Host {
    h.exec(&Host::input(Opcode::EnableHca, 0, 16), ENABLE_HCA_OUT_BYTES)
        .unwrap();
    let mut set_issi = Host::input(Opcode::SetIssi, 0, 16);
    hca::SetIssiIn::new(&mut set_issi[..])
        .unwrap()
        .set_current_issi(1);
    h.exec(&set_issi, 16).unwrap();
    let boot = h.query_pages(query_pages_op_mod::BOOT);
    h.give_pages(boot as usize).unwrap();
    let caps = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    let mut set = Host::input(Opcode::SetHcaCap, 0, 0x1010);
    set[0x10..0x110].copy_from_slice(&caps[0x10..0x110]);
    h.exec(&set, 16).unwrap();
    let init = h.query_pages(query_pages_op_mod::INIT);
    h.give_pages(init as usize).unwrap();
    h.simple(Opcode::InitHca, 0).unwrap();
    h
}

#[test]
fn set_driver_version_is_answered_and_kept() {
    let mut h = initialized_host();
    let general = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    assert!(
        CmdHcaCap::new(&general[0x10..]).unwrap().driver_version(),
        "driver_version is advertised"
    );
    let text = b"Linux,mlx5_core,6.12.117";
    let mut input = Host::input(
        Opcode::SetDriverVersion,
        0,
        SetDriverVersionIn::<&[u8]>::SIZE,
    );
    let mut cmd = SetDriverVersionIn::new(&mut input[..]).unwrap();
    for (i, &b) in text.iter().enumerate() {
        cmd.set_driver_version(i, b).unwrap();
    }
    h.exec(&input, 16).expect("SET_DRIVER_VERSION");
    assert_eq!(h.dev.driver_version(), "Linux,mlx5_core,6.12.117");
}

#[test]
fn the_flow_table_capabilities_nic_flow_table_advertises_are_answered() {
    let mut h = initialized_host();
    let general = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&general[0x10..]).unwrap().nic_flow_table());
    // Linux asks for the current values only (op_mod 0xf).
    let op_mod = hca::query_cap_op_mod(hca::cap_type::FLOW_TABLE, true);
    assert_eq!(op_mod, 0xf);
    let out = h
        .exec(&Host::input(Opcode::QueryHcaCap, op_mod, 16), 0x1010)
        .expect("QUERY_HCA_CAP for the flow table capabilities");
    let caps = FlowTableNicCap::new(&out[0x10..]).unwrap();
    let rx = caps.flow_table_properties_nic_receive();
    assert!(rx.ft_support());
    // Without a settable root no received frame would ever reach the tables.
    assert!(rx.modify_root());
    // Linux 6.12's NIC receive tree reaches level 66 (the anchor table) with every chained
    // priority in it (emu/tests/raw_flow.rs).
    assert!(
        rx.max_ft_level() >= 66,
        "max_ft_level {}",
        rx.max_ft_level()
    );
    assert_eq!(rx.log_max_ft_size(), 16);
    assert!(rx.log_max_ft_num() > 0 && rx.log_max_flow() > 0 && rx.log_max_destination() > 0);
    // The chaining capabilities fs_core needs for its bypass, ethtool and leftovers
    // priorities (`FS_CHAINING_CAPS`), which the model implements: in-place entry changes,
    // identified miss tables, MODIFY_FLOW_TABLE.
    assert!(rx.flow_modify_en() && rx.identified_miss_table_mode() && rx.flow_table_modify());
    // Flow counters on receive entries (emu/tests/flow_counters.rs).
    assert!(rx.flow_counter());
    // Transmit tables with the same chaining capabilities, which fs_core's egress priorities
    // need (`FS_CHAINING_CAPS_EGRESS`; emu/tests/tx_steering.rs).
    let tx = caps.flow_table_properties_nic_transmit();
    assert!(tx.ft_support() && tx.modify_root() && tx.flow_modify_en());
    assert!(tx.identified_miss_table_mode() && tx.flow_table_modify() && tx.flow_counter());
}

#[test]
fn query_adapter_reports_the_board() {
    let mut h = initialized_host();
    let out = h
        .exec(
            &Host::input(Opcode::QueryAdapter, 0, 16),
            QueryAdapterOut::<&[u8]>::SIZE,
        )
        .expect("QUERY_ADAPTER");
    let out = QueryAdapterOut::new(&out[..]).unwrap();
    let block = out.query_adapter_struct();
    assert_eq!(block.vsd_vendor_id(), 0x15b3);
    let psid: Vec<u8> = (0..PSID_BYTES)
        .map(|i| block.vsd_contd_psid(i).unwrap())
        .take_while(|&b| b != 0)
        .collect();
    assert!(!psid.is_empty(), "the PSID is not empty");
    assert!(psid.iter().all(|b| b.is_ascii_graphic()), "{psid:?}");
}

#[test]
fn every_page_comes_back_after_a_bring_up_that_failed_past_init_hca() {
    let mut h = initialized_host();
    let held = h.dev.firmware_pages_held();
    assert!(held >= 80);
    // Linux's failed probe: no TEARDOWN_HCA, the pages taken back in chunks, then DISABLE_HCA.
    let mut back = 0;
    loop {
        let got = h.take_pages(32);
        if got == 0 {
            break;
        }
        back += got;
    }
    assert_eq!(back, held, "every page came back");
    assert_eq!(h.dev.firmware_pages_held(), 0);
    h.exec(
        &Host::input(Opcode::DisableHca, 0, 16),
        ENABLE_HCA_OUT_BYTES,
    )
    .expect("DISABLE_HCA");
    assert_eq!(h.dev.firmware_pages_leaked(), 0);
    // And the function comes up again from there.
    let mut again = initialized_host_on(h);
    again
        .simple(Opcode::AllocPd, 0)
        .expect("ALLOC_PD after the second INIT_HCA");
}

#[test]
fn pages_holding_objects_stay_with_the_device_when_taken_early() {
    let mut h = host();
    h.bring_up();
    let held = h.dev.firmware_pages_held();
    while h.take_pages(32) > 0 {}
    // The EQ's context keeps its page (and the HCA its own): the function still works.
    assert!(h.dev.firmware_pages_held() >= 1);
    assert!(h.dev.firmware_pages_held() < held);
    h.simple(Opcode::AllocPd, 0).expect("still initialized");
}

/// An IPv4/TCP message: Ethernet, IPv4 (identification `ip_id`) and TCP (sequence `seq`, flags
/// `flags`) headers, then `payload` bytes of a pattern; lengths as Linux leaves them in a TSO
/// message (the whole message's), checksums zero.
fn tcp_message(payload: usize, ip_id: u16, seq: u32, flags: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(54 + payload);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00]);
    let total = (20 + 20 + payload) as u16;
    f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8]);
    f.extend_from_slice(&ip_id.to_be_bytes());
    f.extend_from_slice(&[0x40, 0, 64, 6, 0, 0, 192, 168, 77, 1, 192, 168, 77, 2]);
    f.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0x01, 0xf5, 0, 0, 0, 0]);
    f.extend((0..payload).map(|i| (i * 7 + i / 251) as u8));
    f
}

#[test]
fn tso_sends_one_tcp_message_as_mss_sized_segments() {
    use cxdirect_emu::packet;
    use cxdirect_hw::cqe::{Cqe64, CqeOpcode};

    let mut h = host();
    h.bring_up();
    let eth = h.query_cap(hca::cap_type::ETHERNET_OFFLOADS, true);
    let max_lso = cxdirect_hw::caps::PerProtocolNetworkingOffloadCaps::new(&eth[0x10..])
        .unwrap()
        .max_lso_cap();
    assert!(
        max_lso >= 16,
        "max_lso_cap {max_lso}: Linux's 64 KiB messages fit"
    );

    let TsoLoop {
        key,
        mut tx_cq,
        mut sq,
        mut rx_cq,
        bufs,
    } = tso_loop(&mut h, 8);

    const HEADERS: usize = 54;
    const MSS: usize = 1448;
    // FIN, PSH, ACK and CWR: FIN and PSH belong on the last segment only, CWR on the first only.
    let flags = 0x80 | 0x10 | 0x08 | 0x01;
    let message = tcp_message(4000, 0x1234, 0xffff_f000, flags);
    post_tso(&mut h, &mut sq, key, &message, HEADERS, MSS as u16, true);
    let cqe = h.poll_cq(&mut tx_cq).expect("send completion");
    assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8, "the TSO WQE completed");

    let payload = &message[HEADERS..];
    let sizes = [MSS, MSS, payload.len() - 2 * MSS];
    for (i, &size) in sizes.iter().enumerate() {
        let cqe = h.poll_cq(&mut rx_cq).expect("a segment arrived");
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.byte_cnt() as usize, HEADERS + size, "segment {i}: length");
        assert!(c.l3_ok() && c.l4_ok(), "segment {i}: checksums verified");
        let seg = h.read(bufs[i], HEADERS + size);
        assert_eq!(&seg[..12], &message[..12], "segment {i}: MACs replicated");
        assert_eq!(
            u16::from_be_bytes([seg[16], seg[17]]) as usize,
            20 + 20 + size,
            "segment {i}: IPv4 total length"
        );
        assert_eq!(
            u16::from_be_bytes([seg[18], seg[19]]),
            0x1234 + i as u16,
            "segment {i}: IPv4 identification advanced"
        );
        assert_eq!(
            u32::from_be_bytes([seg[38], seg[39], seg[40], seg[41]]),
            0xffff_f000u32.wrapping_add((i * MSS) as u32),
            "segment {i}: TCP sequence advanced (and wrapped)"
        );
        let want_flags = match i {
            0 => 0x80 | 0x10,
            2 => 0x10 | 0x08 | 0x01,
            _ => 0x10,
        };
        assert_eq!(seg[47], want_flags, "segment {i}: TCP flags");
        assert_eq!(
            &seg[HEADERS..],
            &payload[i * MSS..i * MSS + size],
            "segment {i}: its share of the payload"
        );
        let parsed = packet::parse(&seg);
        assert!(packet::ipv4_header_checksum_ok(&seg, &parsed));
        assert!(packet::l4_checksum_ok(&seg, &parsed));
    }
    assert!(h.poll_cq(&mut rx_cq).is_none(), "three segments, no more");
}

#[test]
fn a_drop_rq_without_a_protection_domain_is_created_and_receives_nothing() {
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    // mlx5e's drop RQ: a cyclic RQ whose work queue names no PD.
    let pd = h.pd;
    h.pd = 0;
    let mut rq = h.create_rq(cq.cqn, 0, None);
    h.pd = pd;
    h.steer_all_to(rq.rqn);
    let buf = h.alloc(2048, 64);
    h.post_recv(&mut rq, buf, 2048, key);
    h.arrive(&[cxdirect_emu::testkit::udp_frame(64, 1)]);
    // The buffer's key belongs to another PD: the receive fails protection, nothing lands.
    let cqe = h.poll_cq(&mut cq).expect("a completion");
    assert_ne!(
        cqe[63] >> 4,
        cxdirect_hw::cqe::CqeOpcode::RespSend as u8,
        "no frame is received through a queue without a PD"
    );
    assert!(h.read(buf, 64).iter().all(|&b| b == 0));
}

#[test]
fn the_command_that_creates_the_command_eq_gets_no_completion_event() {
    use cxdirect_hw::eqe::EventType;
    let mut h = initialized_host();
    let out = h.simple(Opcode::AllocUar, 0).unwrap();
    h.uar = hca::AllocUarOut::new(&out[..]).unwrap().uar();
    // Linux creates its command EQ while it still polls: CREATE_EQ completes by polling only,
    // and an event for it, read once the EQ is armed, would complete a later command early.
    h.create_async_eq(6, 1 << EventType::Cmd as u8);
    let events = h.drain_eq();
    assert!(
        events
            .iter()
            .all(|(kind, _, _)| *kind != EventType::Cmd as u8),
        "no CMD event for the CREATE_EQ itself: {events:?}"
    );
    // From the next command on, each completion is announced.
    h.simple(Opcode::Nop, 0).unwrap();
    let events = h.drain_eq();
    assert_eq!(
        events
            .iter()
            .filter(|(kind, _, _)| *kind == EventType::Cmd as u8)
            .count(),
        1,
        "one CMD event for the NOP: {events:?}"
    );
}

/// ACCESS_REG read of register `id` with `data` (the register's bytes), `reg_bytes` long.
fn read_register(h: &mut Host, id: u16, data: &[u8], reg_bytes: usize) -> Result<Vec<u8>, CmdFail> {
    use cxdirect_hw::reg::{AccessRegisterIn, ACCESS_REG_OP_MOD_READ};
    let mut input = Host::input(Opcode::AccessReg, ACCESS_REG_OP_MOD_READ, 0x10 + reg_bytes);
    AccessRegisterIn::new(&mut input[..])
        .unwrap()
        .set_register_id(id);
    input[0x10..0x10 + data.len()].copy_from_slice(data);
    h.exec(&input, 0x10 + reg_bytes)
        .map(|out| out[0x10..].to_vec())
}

#[test]
fn ptys_and_ppcnt_are_answered_as_mlx5e_reads_them() {
    use cxdirect_hw::reg::{
        ppcnt_grp, Eth8023CntrsGrpDataLayout, PpcntReg, PtysReg, PPCNT_COUNTER_SET_OFFSET,
        PTYS_PROTO_MASK_ETH, REG_PPCNT, REG_PTYS,
    };
    let mut h = host();
    h.bring_up();
    // PTYS: the Ethernet protocols of the port, as mlx5e reads them for the link speed.
    let mut ptys = PtysReg::zeroed();
    ptys.set_local_port(1).set_proto_mask(PTYS_PROTO_MASK_ETH);
    let out = read_register(&mut h, REG_PTYS, ptys.as_bytes(), 0x40).expect("PTYS read");
    let ptys = PtysReg::new(&out[..]).unwrap();
    assert_ne!(ptys.eth_proto_capability(), 0, "some protocol is supported");
    assert_eq!(ptys.eth_proto_admin(), ptys.eth_proto_capability());
    // PPCNT: every group mlx5e reads is answered; the IEEE 802.3 group counts what was sent.
    let frames = [
        udp_frame_to(&[0xff; 6], 100),
        udp_frame_to(&[0x02, 0, 0, 0, 0, 7], 200),
    ];
    send_frames(&mut h, &frames);
    for grp in [
        ppcnt_grp::IEEE_802_3,
        ppcnt_grp::RFC_2863,
        ppcnt_grp::RFC_2819,
        ppcnt_grp::RFC_3635,
        ppcnt_grp::ETHERNET_EXTENDED,
        ppcnt_grp::PER_PRIORITY,
        ppcnt_grp::PHYSICAL_LAYER,
    ] {
        let mut req = PpcntReg::zeroed();
        req.set_local_port(1).set_grp(grp);
        let out = read_register(&mut h, REG_PPCNT, req.as_bytes(), 0x100)
            .unwrap_or_else(|e| panic!("PPCNT group {grp:#x}: {e:?}"));
        if grp == ppcnt_grp::IEEE_802_3 {
            let c = Eth8023CntrsGrpDataLayout::new(&out[PPCNT_COUNTER_SET_OFFSET..]).unwrap();
            assert_eq!(c.a_frames_transmitted_ok_low(), 2);
            assert_eq!(
                c.a_octets_transmitted_ok_low() as usize,
                frames[0].len() + frames[1].len()
            );
        }
    }
}

/// mlx5e's `rx_discards_phy` (PPCNT's RFC 2863 group, `if_in_discards`): frames that reach
/// the port while its receive buffer (the wire's FIFO) is full are discarded there and counted,
/// as DPDK's testpmd sending faster than the receiving function drains showed in the rig
/// (before, they were counted only on the wire, and the receiver's counters lost them).
#[test]
fn frames_a_full_port_buffer_discards_are_counted_as_mlx5e_reads_them() {
    use cxdirect_emu::wire::{PortId, Wire, WireConfig};
    use cxdirect_hw::reg::{
        ppcnt_grp, Eth2863CntrsGrpDataLayout, PpcntReg, PPCNT_COUNTER_SET_OFFSET, REG_PPCNT,
    };
    use std::sync::Arc;
    let dev = Device::new(EmuConfig::default());
    let wire = WireConfig {
        fifo_capacity: 2,
        ..WireConfig::default()
    };
    dev.attach(
        Arc::new(Wire::loopback_with(wire).unwrap()),
        PortId::LOOPBACK,
        &[],
    );
    let mut h = Host::new(dev, MEM);
    h.bring_up();
    // Five frames behind one doorbell: the port's FIFO takes two, the other three find it full.
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 6);
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|i| udp_frame_to(&[0x02, 0, 0, 0, 0, 7], 100 + 10 * i))
        .collect();
    let mut last = Vec::new();
    for frame in &frames {
        let payload = h.alloc(frame.len() as u64, 64);
        last = h.build_send(&sq, frame, payload, key, true);
        h.write_wqe(&mut sq, &last);
    }
    h.ring(&mut sq, &last, false);
    for _ in &frames {
        h.poll_cq(&mut cq).expect("send completion");
    }
    let mut req = PpcntReg::zeroed();
    req.set_local_port(1).set_grp(ppcnt_grp::RFC_2863);
    let out = read_register(&mut h, REG_PPCNT, req.as_bytes(), 0x100).expect("PPCNT RFC 2863");
    let c = Eth2863CntrsGrpDataLayout::new(&out[PPCNT_COUNTER_SET_OFFSET..]).unwrap();
    let total: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(
        c.if_in_discards_low(),
        3,
        "three frames found the buffer full"
    );
    assert_eq!(c.if_in_discards_high(), 0);
    assert_eq!(
        c.if_in_octets_low() as usize,
        total,
        "every frame reached the port"
    );
    assert_eq!(c.if_out_octets_low() as usize, total);
}

/// A UDP test frame to destination MAC `dst` with `payload` bytes.
fn udp_frame_to(dst: &[u8; 6], payload: usize) -> Vec<u8> {
    let mut f = cxdirect_emu::testkit::udp_frame(payload, 3);
    f[..6].copy_from_slice(dst);
    f
}

/// Sends `frames` on a fresh SQ of `h` (a loopback host: they come back to its port).
fn send_frames(h: &mut Host, frames: &[Vec<u8>]) {
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    let tisn = h.create_tis();
    let mut sq = h.create_sq(cq.cqn, tisn, 6);
    for frame in frames {
        let payload = h.alloc(frame.len() as u64, 64);
        let wqe = h.build_send(&sq, frame, payload, key, true);
        h.post(&mut sq, &wqe, false);
        let cqe = h.poll_cq(&mut cq).expect("send completion");
        assert_eq!(cqe[63] >> 4, cxdirect_hw::cqe::CqeOpcode::Req as u8);
    }
}

#[test]
fn query_vport_counter_counts_each_cast_both_ways() {
    use cxdirect_hw::vport::{QueryVportCounterIn, QueryVportCounterOut};
    let mut h = host();
    h.bring_up();
    let frames = [
        udp_frame_to(&[0xff; 6], 100),
        udp_frame_to(&[0x01, 0, 0x5e, 0, 0, 1], 150),
        udp_frame_to(&[0x02, 0, 0, 0, 0, 7], 200),
        udp_frame_to(&[0x02, 0, 0, 0, 0, 8], 250),
    ];
    send_frames(&mut h, &frames);
    let input = Host::input(
        Opcode::QueryVportCounter,
        0,
        QueryVportCounterIn::<&[u8]>::SIZE,
    );
    let out = h
        .exec(&input, QueryVportCounterOut::<&[u8]>::SIZE)
        .expect("QUERY_VPORT_COUNTER");
    let out = QueryVportCounterOut::new(&out[..]).unwrap();
    let len = |i: usize| frames[i].len() as u64;
    // Sent, and (over the loopback wire) received: one broadcast, one multicast, two unicast.
    for (c, packets, octets) in [
        (out.transmitted_eth_broadcast(), 1, len(0)),
        (out.received_eth_broadcast(), 1, len(0)),
        (out.transmitted_eth_multicast(), 1, len(1)),
        (out.received_eth_multicast(), 1, len(1)),
        (out.transmitted_eth_unicast(), 2, len(2) + len(3)),
        (out.received_eth_unicast(), 2, len(2) + len(3)),
    ] {
        assert_eq!((c.packets(), c.octets()), (packets, octets));
    }
    assert_eq!(out.received_errors().packets(), 0);
}

#[test]
fn an_sq_naming_tis_zero_is_created_and_sends() {
    let mut h = host();
    h.bring_up();
    // mlx5e's internal SQ (ICOSQ) names no TIS: tis_num_0 is 0.
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    let mut sq = h.create_sq(cq.cqn, 0, 6);
    let frame = udp_frame_to(&[0x02, 0, 0, 0, 0, 9], 64);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&sq, &frame, payload, key, true);
    h.post(&mut sq, &wqe, false);
    let cqe = h.poll_cq(&mut cq).expect("send completion");
    assert_eq!(cqe[63] >> 4, cxdirect_hw::cqe::CqeOpcode::Req as u8);
}

#[test]
fn modify_tir_changes_the_self_loopback_block_and_refuses_lro() {
    use cxdirect_emu::testkit::rc::{lone_host, take_frames, GID_A, MAC_A};
    use cxdirect_hw::tir::{ModifyTirIn, SELF_LB_BLOCK_UNICAST};
    // One function alone on a pair wire with its vport's local loopback on, as
    // mlx5e_test_loopback_setup leaves it: its SQ's frames to its own MAC stay inside and
    // meet its TIR of the same transport domain (self loopback).
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    h.update_local_lb(true);
    let mut cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let tirn = h.steer_all_to(rq.rqn);
    let key = h.create_mkey(true, true);
    for _ in 0..2 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    let frame = udp_frame_to(&MAC_A, 100);
    // self_lb_block 0, as mlx5e creates its TIRs: its own frame is not taken.
    send_frames(&mut h, std::slice::from_ref(&frame));
    assert!(h.poll_cq(&mut cq).is_none(), "self loopback not allowed");
    let modify = |h: &mut Host, bits: u8| {
        let mut input = Host::input(Opcode::ModifyTir, 0, ModifyTirIn::<&[u8]>::SIZE);
        {
            let mut cmd = ModifyTirIn::new(&mut input[..]).unwrap();
            cmd.set_tirn(tirn);
            cmd.bitmask_mut().set_self_lb_en(true);
            cmd.ctx_mut().set_self_lb_block(bits);
        }
        h.exec(&input, 16).expect("MODIFY_TIR self_lb_en");
    };
    // mlx5e_modify_tirs_lb(mdev, true, false) (the loopback self-test): BLOCK_UNICAST set
    // allows the own unicast frame back.
    modify(&mut h, SELF_LB_BLOCK_UNICAST);
    send_frames(&mut h, std::slice::from_ref(&frame));
    assert!(h.poll_cq(&mut cq).is_some(), "self loopback allowed");
    // mlx5e_modify_tirs_lb(mdev, false, false) (its cleanup): refused again.
    modify(&mut h, 0);
    send_frames(&mut h, std::slice::from_ref(&frame));
    assert!(
        h.poll_cq(&mut cq).is_none(),
        "self loopback not allowed again"
    );
    assert!(take_frames(&wire).is_empty(), "nothing left on the cable");
    // Packet merging is not modelled: asking for it is refused, asking it off is fine.
    let mut lro = Host::input(Opcode::ModifyTir, 0, ModifyTirIn::<&[u8]>::SIZE);
    {
        let mut cmd = ModifyTirIn::new(&mut lro[..]).unwrap();
        cmd.set_tirn(tirn);
        cmd.bitmask_mut().set_packet_merge(true);
        cmd.ctx_mut().set_lro_enable_mask(1);
    }
    assert_eq!(
        h.exec(&lro, 16),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams
        ))
    );
    ModifyTirIn::new(&mut lro[..])
        .unwrap()
        .ctx_mut()
        .set_lro_enable_mask(0);
    h.exec(&lro, 16).expect("packet merging off");
}

#[test]
fn a_loopback_plug_brings_frames_back_from_the_cable_past_any_self_loopback_bits() {
    use cxdirect_hw::tir::{ModifyTirIn, SELF_LB_BLOCK_MULTICAST, SELF_LB_BLOCK_UNICAST};
    // What a plug returns left the device: no transport domain goes with it, so the TIR takes
    // it with its self_lb_block bits clear or set.
    let mut h = host();
    h.bring_up();
    let mut cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let tirn = h.steer_all_to(rq.rqn);
    let key = h.create_mkey(true, true);
    for _ in 0..2 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, key);
    }
    let frame = udp_frame_to(&[0x02, 0, 0, 0, 0, 7], 100);
    send_frames(&mut h, std::slice::from_ref(&frame));
    assert!(h.poll_cq(&mut cq).is_some(), "bits clear: received");
    let mut input = Host::input(Opcode::ModifyTir, 0, ModifyTirIn::<&[u8]>::SIZE);
    {
        let mut cmd = ModifyTirIn::new(&mut input[..]).unwrap();
        cmd.set_tirn(tirn);
        cmd.bitmask_mut().set_self_lb_en(true);
        cmd.ctx_mut()
            .set_self_lb_block(SELF_LB_BLOCK_UNICAST | SELF_LB_BLOCK_MULTICAST);
    }
    h.exec(&input, 16).expect("MODIFY_TIR self_lb_en");
    send_frames(&mut h, std::slice::from_ref(&frame));
    assert!(h.poll_cq(&mut cq).is_some(), "bits set: received");
}

#[test]
fn pfcc_is_read_and_written_back() {
    use cxdirect_hw::reg::{AccessRegisterIn, PfccReg, ACCESS_REG_OP_MOD_WRITE, REG_PFCC};
    let mut h = host();
    h.bring_up();
    let mut req = PfccReg::zeroed();
    req.set_local_port(1);
    let out = read_register(&mut h, REG_PFCC, req.as_bytes(), 0x20).expect("PFCC read");
    assert!(!PfccReg::new(&out[..]).unwrap().pptx());
    let mut input = Host::input(Opcode::AccessReg, ACCESS_REG_OP_MOD_WRITE, 0x30);
    AccessRegisterIn::new(&mut input[..])
        .unwrap()
        .set_register_id(REG_PFCC);
    PfccReg::new(&mut input[0x10..])
        .unwrap()
        .set_local_port(1)
        .set_pptx(true)
        .set_pprx(true);
    h.exec(&input, 0x30).expect("PFCC write");
    let out = read_register(&mut h, REG_PFCC, req.as_bytes(), 0x20).unwrap();
    let r = PfccReg::new(&out[..]).unwrap();
    assert!(r.pptx() && r.pprx());
}

#[test]
fn modify_rqt_moves_an_indirect_tir_from_the_drop_rq_to_the_channels() {
    use cxdirect_hw::tir::{CreateRqtIn, CreateRqtOut, CreateTirIn, CreateTirOut, ModifyRqtIn};
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(true, true);
    // mlx5e's RSS table first points at the drop RQ, then, once the channels are open, at them.
    let mut drop_cq = h.create_cq(6);
    let drop_rq = h.create_rq(drop_cq.cqn, 0, None);
    let mut cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let mut input = Host::input(Opcode::CreateRqt, 0, 0x110 + 4);
    {
        let mut cmd = CreateRqtIn::new(&mut input[..]).unwrap();
        cmd.rqt_context_mut()
            .set_rqt_max_size(4)
            .set_rqt_actual_size(1);
        cmd.set_rq_num(0, drop_rq.rqn).unwrap();
    }
    let out = h.exec(&input, 16).unwrap();
    let rqtn = CreateRqtOut::new(&out[..]).unwrap().rqtn();
    let mut input = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut input[..])
        .unwrap()
        .ctx_mut()
        .set_disp_type(1)
        .set_indirect_table(rqtn)
        .set_transport_domain(h.td);
    let out = h.exec(&input, 16).unwrap();
    let tirn = CreateTirOut::new(&out[..]).unwrap().tirn();
    h.steer_to_tir(tirn);
    let buf = h.alloc(2048, 64);
    h.post_recv(&mut rq, buf, 2048, key);

    let mut modify = Host::input(Opcode::ModifyRqt, 0, 0x110 + 8);
    {
        let mut cmd = ModifyRqtIn::new(&mut modify[..]).unwrap();
        cmd.set_rqtn(rqtn);
        cmd.bitmask_mut().set_rqn_list(true);
        cmd.ctx_mut().set_rqt_max_size(4).set_rqt_actual_size(1);
        cmd.set_rq_num(0, rq.rqn).unwrap();
    }
    h.exec(&modify, 16).expect("MODIFY_RQT");
    let frame = udp_frame_to(&[0x02, 0, 0, 0, 0, 7], 100);
    h.arrive(std::slice::from_ref(&frame));
    let cqe = h
        .poll_cq(&mut cq)
        .expect("the frame reached the channel's RQ");
    assert_eq!(cqe[63] >> 4, cxdirect_hw::cqe::CqeOpcode::RespSend as u8);
    assert_eq!(h.read(buf, frame.len()), frame);
    assert!(h.poll_cq(&mut drop_cq).is_none());
    // The drop RQ is no longer referenced: it can go; the channel's RQ cannot while listed.
    let mut destroy = Host::input(Opcode::DestroyRq, 0, 16);
    destroy[8..12].copy_from_slice(&drop_rq.rqn.to_be_bytes());
    h.exec(&destroy, 16)
        .expect("DESTROY_RQ of the unlisted drop RQ");
    // More entries than the table's maximum are refused.
    {
        let mut cmd = ModifyRqtIn::new(&mut modify[..]).unwrap();
        cmd.ctx_mut().set_rqt_actual_size(5);
    }
    assert_eq!(
        h.exec(&modify, 16),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams
        ))
    );
}

#[test]
fn query_sq_reports_the_state_mlx5e_recovers_from() {
    use cxdirect_hw::wq::{QuerySqIn, QuerySqOut};
    let mut h = host();
    h.bring_up();
    let cq = h.create_cq(6);
    let tisn = h.create_tis();
    let sq = h.create_sq(cq.cqn, tisn, 6);
    let mut input = Host::input(Opcode::QuerySq, 0, QuerySqIn::<&[u8]>::SIZE);
    QuerySqIn::new(&mut input[..]).unwrap().set_sqn(sq.sqn);
    let out = h.exec(&input, QuerySqOut::<&[u8]>::SIZE).expect("QUERY_SQ");
    let out = QuerySqOut::new(&out[..]).unwrap();
    let ctx = out.sq_context();
    assert_eq!(ctx.state(), 1, "ready");
    assert_eq!(ctx.cqn(), cq.cqn);
    assert_eq!(ctx.tis_num_0(), tisn);
}

#[test]
fn the_receive_cqe_carries_the_packets_checksum_for_checksum_complete() {
    use cxdirect_emu::packet::ones_complement_sum;
    use cxdirect_hw::cqe::Cqe64;
    let mut h = host();
    h.bring_up();
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    let buf = h.alloc(2048, 64);
    h.post_recv(&mut rq, buf, 2048, key);
    let frame = udp_frame_to(&[0x02, 0, 0, 0, 0, 7], 101);
    h.arrive(std::slice::from_ref(&frame));
    let cqe = h.poll_cq(&mut cq).expect("received");
    let c = Cqe64::new(&cqe[..]).unwrap();
    // mlx5e sets skb->csum from it (CHECKSUM_COMPLETE): the sum of everything after the
    // Ethernet header, so the IP header (whose own checksum is right) sums to 0xffff and the
    // rest is the UDP segment's sum.
    assert_eq!(c.check_sum(), ones_complement_sum(&frame[14..], 0));
    assert_ne!(c.check_sum(), 0);
    let ip_header = ones_complement_sum(&frame[14..34], 0);
    assert_eq!(ip_header, 0xffff);
    assert_eq!(
        c.check_sum(),
        ones_complement_sum(&frame[34..], ip_header),
        "the packet's sum chains the header's and the segment's"
    );
}

/// What the TSO tests send and receive through.
struct TsoLoop {
    /// A memory key for all of the host's memory.
    key: u32,
    tx_cq: Cq,
    sq: Sq,
    rx_cq: Cq,
    /// The receive buffers posted, 2048 bytes each, in the order frames fill them.
    bufs: Vec<u64>,
}

/// An SQ and an RQ (every frame steered to it), each with its CQ, all of 2^6 entries, and
/// `buffers` receive buffers posted, on the brought-up `h`.
fn tso_loop(h: &mut Host, buffers: usize) -> TsoLoop {
    let key = h.create_mkey(true, true);
    let tx_cq = h.create_cq(6);
    let tisn = h.create_tis();
    let sq = h.create_sq(tx_cq.cqn, tisn, 6);
    let rx_cq = h.create_cq(6);
    let mut rq = h.create_rq(rx_cq.cqn, 6, None);
    h.steer_all_to(rq.rqn);
    let bufs: Vec<u64> = (0..buffers).map(|_| h.alloc(2048, 64)).collect();
    for &b in &bufs {
        h.post_recv(&mut rq, b, 2048, key);
    }
    TsoLoop {
        key,
        tx_cq,
        sq,
        rx_cq,
        bufs,
    }
}

/// Posts `message` (its first `headers` bytes inline: control, Ethernet with two header bytes,
/// the rest of the headers, one data segment for the payload) as one TSO WQE with `mss` on
/// `sq`, asking for the L4 checksums and, with `l3_csum`, the IPv4 header's.
fn post_tso(
    h: &mut Host,
    sq: &mut Sq,
    key: u32,
    message: &[u8],
    headers: usize,
    mss: u16,
    l3_csum: bool,
) {
    use cxdirect_hw::wqe::{self, CtrlSeg, DataSeg, EthSeg};
    let payload_iova = h.alloc(message.len() as u64, 64);
    h.write(payload_iova, &message[headers..]);
    let inline_tail = headers - 2;
    let ds = 2 + inline_tail.div_ceil(16) + 1;
    let mut w = vec![0u8; ds.div_ceil(4) * 64];
    CtrlSeg::new(&mut w[..16])
        .unwrap()
        .set_opcode(wqe::opcode::LSO)
        .set_wqe_index(sq.pi)
        .set_qpn_or_sqn(sq.sqn)
        .set_ds(ds as u8)
        .set_ce(2);
    EthSeg::new(&mut w[16..32])
        .unwrap()
        .set_l3_csum(l3_csum)
        .set_l4_csum(true)
        .set_mss(mss)
        .set_inline_hdr_sz(headers as u16);
    w[30..32].copy_from_slice(&message[..2]);
    w[32..32 + inline_tail].copy_from_slice(&message[2..headers]);
    let at = 32 + inline_tail.div_ceil(16) * 16;
    DataSeg::new(&mut w[at..at + 16])
        .unwrap()
        .set_byte_count((message.len() - headers) as u32)
        .set_lkey(key)
        .set_addr(payload_iova);
    h.post(sq, &w, false);
}

#[test]
fn tso_over_ipv6_sets_each_segments_payload_length() {
    use cxdirect_emu::packet;
    use cxdirect_hw::cqe::{Cqe64, CqeOpcode};
    let mut h = host();
    h.bring_up();
    let TsoLoop {
        key,
        mut tx_cq,
        mut sq,
        mut rx_cq,
        bufs,
    } = tso_loop(&mut h, 4);
    // Ethernet, IPv6 (payload length of the whole message), TCP with PSH and ACK.
    const HEADERS: usize = 14 + 40 + 20;
    const MSS: usize = 1000;
    let payload = 2500;
    let mut m = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x86, 0xdd];
    m.extend_from_slice(&[0x60, 0, 0, 0]);
    m.extend_from_slice(&((20 + payload) as u16).to_be_bytes());
    m.extend_from_slice(&[6, 64]);
    m.extend_from_slice(&[0xfd; 16]);
    m.extend_from_slice(&[0xfe; 16]);
    m.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51, 0, 0, 0, 100, 0, 0, 0, 0, 0x50, 0x18]);
    m.extend_from_slice(&[0x01, 0xf5, 0, 0, 0, 0]);
    m.extend((0..payload).map(|i| (i % 253) as u8));
    post_tso(&mut h, &mut sq, key, &m, HEADERS, MSS as u16, false);
    let cqe = h.poll_cq(&mut tx_cq).expect("send completion");
    assert_eq!(cqe[63] >> 4, CqeOpcode::Req as u8);
    for (i, size) in [MSS, MSS, payload - 2 * MSS].into_iter().enumerate() {
        let cqe = h.poll_cq(&mut rx_cq).expect("a segment arrived");
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.byte_cnt() as usize, HEADERS + size);
        let seg = h.read(bufs[i], HEADERS + size);
        assert_eq!(
            u16::from_be_bytes([seg[18], seg[19]]) as usize,
            20 + size,
            "segment {i}: IPv6 payload length"
        );
        assert_eq!(
            u32::from_be_bytes([seg[58], seg[59], seg[60], seg[61]]),
            100 + (i * MSS) as u32
        );
        assert_eq!(
            seg[67] & 0x08 != 0,
            i == 2,
            "segment {i}: PSH only on the last"
        );
        let parsed = packet::parse(&seg);
        assert!(
            packet::l4_checksum_ok(&seg, &parsed),
            "segment {i}: TCP checksum"
        );
        assert_eq!(
            &seg[HEADERS..],
            &m[HEADERS + i * MSS..HEADERS + i * MSS + size]
        );
    }
}

/// mlx5_ib reads the node description from the NODE_DESC register (64 bytes) when it
/// registers a RoCE device, and fails the probe if the read is refused.
#[test]
fn node_desc_is_read_as_mlx5_ib_reads_it() {
    use cxdirect_hw::reg::REG_NODE_DESC;
    let mut h = host();
    h.bring_up();
    let out = read_register(&mut h, REG_NODE_DESC, &[0u8; 64], 64).expect("NODE_DESC read");
    let text = out.split(|&b| b == 0).next().unwrap();
    assert!(
        std::str::from_utf8(text).unwrap().contains("ConnectX6DX"),
        "description {text:?}"
    );
    assert_eq!(out.len(), 64);
    assert!(out[text.len()..].iter().all(|&b| b == 0), "NUL-padded");
}

/// mlx5_ib takes the node GUID and the system image GUID of an Ethernet port from the NIC
/// vport context: both are the port's MAC widened to EUI-64, not zero.
#[test]
fn the_nic_vport_context_carries_the_node_guid() {
    use cxdirect_hw::vport::{QueryNicVportContextIn, QueryNicVportContextOut};
    let mut h = host();
    h.bring_up();
    let input = Host::input(
        Opcode::QueryNicVportContext,
        0,
        <QueryNicVportContextIn as cxdirect_hw::Layout>::SIZE,
    );
    let out = h
        .exec(
            &input,
            <QueryNicVportContextOut as cxdirect_hw::Layout>::SIZE,
        )
        .unwrap();
    let out = QueryNicVportContextOut::new(&out[..]).unwrap();
    let ctx = out.nic_vport_context();
    let mac = ctx.permanent_address().mac();
    let guid = ctx.node_guid();
    assert_eq!(
        guid,
        ((mac >> 24) << 40) | (0xfffe << 24) | (mac & 0xff_ffff),
        "node GUID {guid:#x} from MAC {mac:#x}"
    );
    assert_eq!(ctx.system_image_guid(), guid);
}

/// A RoCE device as mlx5_ib probes it: RoCE on by default, XRC reported (mlx5_ib refuses the
/// device without it) and two XRC domains allocated and freed; UMR reported able to load
/// translations (the reserved lkey usable for the list), and the free keys of every order
/// Linux's mkey cache fills (`set_cache_mkc`) are made.
#[test]
fn a_roce_device_reports_xrc_domains_and_umr_translation_loads() {
    use cxdirect_hw::hca::{AllocXrcdOut, DeallocXrcdIn};
    let mut h = host();
    h.bring_up();
    let caps = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&caps[0x10..]).unwrap();
    assert!(caps.roce(), "RoCE is on by default");
    assert!(caps.xrc());
    assert_ne!(caps.log_max_xrcd(), 0);
    assert!(!caps.umr_modify_entity_size_disabled());
    assert!(caps.umr_ptr_rlky());
    let pd = h.pd;
    for order in 2..=16u32 {
        let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
        let mut cmd = cxdirect_hw::mkey::CreateMkeyIn::new(&mut input[..]).unwrap();
        cmd.memory_key_mkey_entry_mut()
            .set_lr(true)
            .set_pd(pd)
            .set_qpn(0xff_ffff)
            .set_free(true)
            .set_umr_en(true)
            .set_access_mode(cxdirect_hw::mkey::MKC_ACCESS_MODE_MTT)
            .set_translations_octword_size((1 << order) / 2)
            .set_log_page_size(12)
            .set_mkey_7_0(order as u8);
        h.exec(&input, 16).expect("a cache key of every order");
    }
    let mut xrcds = Vec::new();
    for _ in 0..2 {
        let out = h.simple(Opcode::AllocXrcd, 0).expect("ALLOC_XRCD");
        xrcds.push(AllocXrcdOut::new(&out[..]).unwrap().xrcd());
    }
    assert_ne!(xrcds[0], xrcds[1]);
    for &xrcd in &xrcds {
        let mut input = Host::input(Opcode::DeallocXrcd, 0, 16);
        DeallocXrcdIn::new(&mut input[..]).unwrap().set_xrcd(xrcd);
        h.exec(&input, 16).expect("DEALLOC_XRCD");
        // Freed once: a second free names no domain.
        assert_eq!(
            h.exec(&input, 16),
            Err(CmdFail::status(
                CmdStatus::BadResource,
                Syndrome::NoSuchObject
            ))
        );
    }
}

/// mlx5_ib reads the RoCE page's `l3_type` as `MLX5_ROCE_L3_TYPE_IPV4_CAP` (bit 1) and
/// `_IPV6_CAP` (bit 2): a port without both is raw Ethernet to it, with no RoCE GIDs, and its
/// registration then fails (a port without MADs that claims a MAD size).
#[test]
fn the_roce_page_advertises_ipv4_and_ipv6_gids_as_mlx5_ib_reads_them() {
    use cxdirect_hw::roce::RoceCap;
    let mut h = host();
    h.bring_up();
    let page = h.query_cap(hca::cap_type::ROCE, true);
    let roce = RoceCap::new(&page[0x10..]).unwrap();
    assert_eq!(roce.l3_type() & 0b110, 0b110, "IPv4 and IPv6 bits");
    assert_eq!(roce.roce_version() & (1 << 2), 1 << 2, "RoCE v2 bit");
}

/// A page for a small ring and an 8-byte doorbell record.
fn ring_and_dbr(h: &mut Host) -> (u64, u64) {
    (h.alloc(4096, 4096), h.alloc(8, 64))
}

/// CREATE_XRC_SRQ as mlx5_ib sends it for its device-wide XRC SRQ (s0) before the first QP:
/// two 32-byte WQEs, one page, the XRC domain, PD and CQ it names.
fn create_xrc_srq(h: &mut Host, xrcd: u32, cqn: u32) -> Result<u32, CmdFail> {
    use cxdirect_hw::qp::{CreateXrcSrqIn, CreateXrcSrqOut};
    let (buf, dbr) = ring_and_dbr(h);
    let mut input = Host::input(Opcode::CreateXrcSrq, 0, 0x110 + 8);
    let mut cmd = CreateXrcSrqIn::new(&mut input[..]).unwrap();
    cmd.xrc_srq_context_entry_mut()
        .set_log_xrc_srq_size(1)
        .set_log_rq_stride(1)
        .set_log_page_size(0)
        .set_xrcd(xrcd)
        .set_cqn(cqn)
        .set_pd(h.pd)
        .set_db_record_addr_h((dbr >> 32) as u32)
        .set_db_record_addr_l((dbr as u32) >> 2);
    cmd.set_pas(0, buf).unwrap();
    let out = h.exec(&input, 16)?;
    Ok(CreateXrcSrqOut::new(&out[..]).unwrap().xrc_srqn())
}

/// mlx5_ib makes an XRC SRQ and a basic SRQ (an RMP) before its first QP, the MAD layer's
/// GSI QP included, and keeps both in one SRQ number space: the two numbers differ, and the
/// XRC SRQ holds its XRC domain and CQ until destroyed.
#[test]
fn an_xrc_srq_is_created_as_mlx5_ib_creates_its_own_and_holds_its_domain() {
    use cxdirect_hw::hca::{AllocXrcdOut, DeallocXrcdIn};
    use cxdirect_hw::qp::DestroyXrcSrqIn;
    let mut h = host();
    h.bring_up();
    let cq = h.create_cq(1);
    let out = h.simple(Opcode::AllocXrcd, 0).unwrap();
    let xrcd = AllocXrcdOut::new(&out[..]).unwrap().xrcd();
    let srqn = create_xrc_srq(&mut h, xrcd, cq.cqn).expect("CREATE_XRC_SRQ");
    let (rmpn, _) = h.create_rmp(1, 0);
    assert_ne!(srqn, rmpn, "XRC SRQs and RMPs share one number space");
    // An unknown XRC domain is refused.
    assert_eq!(
        create_xrc_srq(&mut h, xrcd + 100, cq.cqn),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    let mut free_xrcd = Host::input(Opcode::DeallocXrcd, 0, 16);
    DeallocXrcdIn::new(&mut free_xrcd[..])
        .unwrap()
        .set_xrcd(xrcd);
    assert!(h.exec(&free_xrcd, 16).is_err(), "domain held by the SRQ");
    let mut destroy = Host::input(Opcode::DestroyXrcSrq, 0, 16);
    DestroyXrcSrqIn::new(&mut destroy[..])
        .unwrap()
        .set_xrc_srqn(srqn);
    h.exec(&destroy, 16).expect("DESTROY_XRC_SRQ");
    assert!(h.exec(&destroy, 16).is_err(), "destroyed once");
    h.exec(&free_xrcd, 16)
        .expect("domain free once the SRQ is gone");
}

/// The MAD layer opens a GSI QP (QP1) on every RoCE port, and mlx5_ib creates it as a
/// hardware QP of service type QP1: a kernel QP (fre, rlky) with its own receive ring, then
/// RST2INIT with the port, P_Key index and Q_Key, INIT2RTR and RTR2RTS with no optional
/// attribute (Linux's opt_mask table has none for QP1) and the MTU Linux gives special QPs.
/// Its send doorbell runs the WQEs posted.
#[test]
fn the_gsi_qp_walks_to_rts_as_the_mad_layer_opens_it() {
    use cxdirect_hw::qp::{
        service_type, state, CreateQpIn, CreateQpOut, Qp2errIn, Qpc, Rst2initQpIn,
    };
    const IB_QP1_QKEY: u32 = 0x8001_0000;
    const MTU_256: u8 = 1;
    let mut h = host();
    h.bring_up();
    let cq = h.create_cq(6);
    let (buf, dbr) = ring_and_dbr(&mut h);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8);
    let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
    cmd.qpc_mut()
        .set_st(service_type::QP1)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_cqn_snd(cq.cqn)
        .set_cqn_rcv(cq.cqn)
        .set_log_rq_size(3)
        .set_log_rq_stride(2)
        .set_log_sq_size(3)
        .set_ts_format(1)
        .set_dbr_addr(dbr);
    cmd.set_pas(0, buf).unwrap();
    let out = h.exec(&input, 16).expect("CREATE_QP of a GSI QP");
    let qpn = CreateQpOut::new(&out[..]).unwrap().qpn();
    let step = |h: &mut Host, opcode: Opcode, fill: &dyn Fn(&mut Qpc<&mut [u8]>)| {
        let mut input = Host::input(opcode, 0, 0x110);
        let mut cmd = Rst2initQpIn::new(&mut input[..]).unwrap();
        cmd.set_qpn(qpn);
        let mut ctx = cmd.qpc_mut();
        ctx.set_st(service_type::QP1)
            .set_pm_state(3)
            .set_mtu(MTU_256)
            .set_log_msg_max(8);
        ctx.primary_address_path_mut().set_vhca_port_num(1);
        fill(&mut ctx);
        h.exec(&input, 16)
    };
    step(&mut h, Opcode::Rst2initQp, &|c| {
        c.set_q_key(IB_QP1_QKEY);
    })
    .expect("RST2INIT");
    step(&mut h, Opcode::Init2rtrQp, &|_| {}).expect("INIT2RTR");
    step(&mut h, Opcode::Rtr2rtsQp, &|c| {
        c.set_next_send_psn(0x123);
    })
    .expect("RTR2RTS");
    let mut query = Host::input(Opcode::QueryQp, 0, 16);
    Qp2errIn::new(&mut query[..]).unwrap().set_qpn(qpn);
    let out = h.exec(&query, 0x1d0).expect("QUERY_QP");
    let ctx = Qpc::new(&out[0x18..]).unwrap();
    assert_eq!(ctx.st(), service_type::QP1);
    assert_eq!(ctx.primary_address_path().vhca_port_num(), 1);
    assert_eq!(ctx.state(), state::RTS);
    assert_eq!(ctx.q_key(), IB_QP1_QKEY);
    assert_eq!(ctx.next_send_psn(), 0x123);
    // The GSI QP carries MADs: a send doorbell runs its WQE. This one is a lone control
    // segment, without the datagram segment a MAD needs (mlx5_ib `handle_qpt_hw_gsi`): it
    // completes with a local QP operation error and the send queue goes to SQER, from which
    // SQERR2RTS brings it back.
    let mut wqe = [0u8; 16];
    wqe[0..4].copy_from_slice(&0x0au32.to_be_bytes());
    wqe[4..8].copy_from_slice(&((qpn << 8) | 1).to_be_bytes());
    wqe[11] = 2 << 2;
    let rq_bytes = 8 * 64;
    h.write(buf + rq_bytes, &wqe);
    h.write_be32(dbr + 4, 1);
    let refused = h.dev.counters().bad_doorbells;
    let doorbell = h.uar_base() + cxdirect_hw::doorbell::UAR_BF_OFFSET as u64;
    h.dev.mmio_write(doorbell, &wqe[..8]).expect("doorbell");
    assert_eq!(
        h.dev.counters().bad_doorbells,
        refused,
        "the doorbell is taken"
    );
    let mut cq = cq;
    let cqe = h.poll_cq(&mut cq).expect("an error completion");
    let err = cxdirect_hw::cqe::ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(err.opcode(), cxdirect_hw::cqe::CqeOpcode::ReqErr as u8);
    assert_eq!(
        err.syndrome(),
        cxdirect_hw::cqe::CqeSyndrome::LocalQpOperation as u8
    );
    assert_eq!(err.qpn(), qpn);
    let out = h.exec(&query, 0x1d0).expect("QUERY_QP");
    assert_eq!(Qpc::new(&out[0x18..]).unwrap().state(), state::SQER);
    step(&mut h, Opcode::Sqerr2rtsQp, &|_| {}).expect("SQERR2RTS");
    // An optional attribute is refused: QP1 takes none.
    let mut input = Host::input(Opcode::Rts2rtsQp, 0, 0x110);
    Rst2initQpIn::new(&mut input[..])
        .unwrap()
        .set_qpn(qpn)
        .set_opt_param_mask(cxdirect_hw::qp::optpar::RNR_TIMEOUT);
    assert!(h.exec(&input, 16).is_err());
    let mut destroy = Host::input(Opcode::DestroyQp, 0, 16);
    Qp2errIn::new(&mut destroy[..]).unwrap().set_qpn(qpn);
    h.exec(&destroy, 16).expect("DESTROY_QP");
    assert_eq!(h.dev.qp_count(), 0);
}

/// A driver that tears the function down with its QPs still there (a GSI QP and an RC QP)
/// gets every firmware page back: TEARDOWN_HCA frees the QPs' contexts as it does every other
/// object's.
#[test]
fn teardown_returns_the_pages_of_qps_left_behind() {
    use cxdirect_hw::qp::{service_type, CreateQpIn};
    let mut h = host();
    h.bring_up();
    let cq = h.create_cq(6);
    for st in [service_type::QP1, service_type::RC] {
        let (buf, dbr) = ring_and_dbr(&mut h);
        let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 8);
        let mut cmd = CreateQpIn::new(&mut input[..]).unwrap();
        cmd.qpc_mut()
            .set_st(st)
            .set_pm_state(3)
            .set_pd(h.pd)
            .set_uar_page(h.uar)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_log_rq_size(3)
            .set_log_rq_stride(2)
            .set_log_sq_size(3)
            .set_dbr_addr(dbr);
        cmd.set_pas(0, buf).unwrap();
        h.exec(&input, 16).expect("CREATE_QP");
    }
    assert_eq!(h.dev.qp_count(), 2);
    // Every page given comes back after TEARDOWN_HCA (checked inside), none is lost.
    h.teardown();
    assert_eq!(h.dev.firmware_pages_held(), 0);
    assert_eq!(h.dev.firmware_pages_leaked(), 0);
}

/// The RDMA core reads P_Key index 0 of every port when mlx5_ib registers a RoCE device
/// (QUERY_HCA_VPORT_PKEY, one entry, a 20-byte output), and fails the registration when the
/// read is refused. An Ethernet port's table holds the default P_Key there and nothing else.
#[test]
fn query_hca_vport_pkey_answers_the_default_pkey_as_the_rdma_core_reads_it() {
    use cxdirect_hw::vport::QueryHcaVportPkeyIn;
    let mut h = host();
    h.bring_up();
    let query = |h: &mut Host, index: u16, outlen: usize| {
        let mut input = Host::input(Opcode::QueryHcaVportPkey, 0, 16);
        QueryHcaVportPkeyIn::new(&mut input[..])
            .unwrap()
            .set_pkey_index(index);
        h.exec(&input, outlen)
    };
    let out = query(&mut h, 0, 16 + 4).expect("P_Key 0");
    assert_eq!(u32::from_be_bytes(out[16..20].try_into().unwrap()), 0xffff);
    let out = query(&mut h, 1, 16 + 4).expect("P_Key 1");
    assert_eq!(u32::from_be_bytes(out[16..20].try_into().unwrap()), 0);
    // The whole table: 128 entries (pkey_table_size 0), the default one first.
    let out = query(&mut h, 0xffff, 16 + 128 * 4).expect("whole table");
    assert_eq!(u32::from_be_bytes(out[16..20].try_into().unwrap()), 0xffff);
    assert!(out[20..].iter().all(|&b| b == 0));
    assert_eq!(
        query(&mut h, 0xffff, 16 + 4),
        Err(CmdFail::status(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort
        ))
    );
    assert_eq!(
        query(&mut h, 128, 16 + 4),
        Err(CmdFail::status(
            CmdStatus::BadParameter,
            Syndrome::BadPkeyIndex
        ))
    );
}

/// When the RDMA core registers a RoCE device it asks the port's performance management
/// agent for its ClassPortInfo; mlx5_ib answers that from the vport counters when
/// `vport_counters` is reported, and otherwise forwards the MAD to the firmware (MAD_IFC, which
/// an Ethernet port does not serve). The counters it would read are answered.
#[test]
fn vport_counters_are_reported_so_mlx5_ib_serves_port_counter_mads_itself() {
    let mut h = host();
    h.bring_up();
    let caps = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    assert!(CmdHcaCap::new(&caps[0x10..]).unwrap().vport_counters());
    let input = Host::input(Opcode::QueryVportCounter, 0, 0x20);
    h.exec(&input, 0x210).expect("QUERY_VPORT_COUNTER");
}

/// Reading a RoCE port's error counters (`/sys/class/infiniband/*/ports/1/counters/`) makes
/// the RDMA core ask for PMA PortCounters, which mlx5_ib answers from the PPCNT InfiniBand port
/// counters group (0x20). The model's port sees none of those errors: zeros, not a refusal.
#[test]
fn ppcnt_answers_the_infiniband_port_counters_mlx5_ib_reads() {
    use cxdirect_hw::reg::{ppcnt_grp, PpcntReg, REG_PPCNT};
    let mut h = host();
    h.bring_up();
    let mut req = PpcntReg::zeroed();
    req.set_local_port(1)
        .set_grp(ppcnt_grp::INFINIBAND_PORT_COUNTERS);
    let out = read_register(&mut h, REG_PPCNT, req.as_bytes(), 0x100).expect("PPCNT group 0x20");
    let reply = PpcntReg::new(&out[..]).unwrap();
    assert_eq!(reply.grp(), ppcnt_grp::INFINIBAND_PORT_COUNTERS);
    assert!(out[cxdirect_hw::reg::PPCNT_COUNTER_SET_OFFSET..]
        .iter()
        .all(|&b| b == 0));
}

/// A cyclic RQ of 16 one-segment WQEs on a fresh CQ with the given `end_padding_mode`.
fn create_rq_padded(h: &mut Host, end_padding_mode: u8) -> Result<Vec<u8>, CmdFail> {
    use cxdirect_hw::wq::CreateRqIn;
    let cq = h.create_cq(6);
    let buf = h.alloc(4096, 4096);
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateRq, 0, 0x110 + 8);
    let mut cmd = CreateRqIn::new(&mut input[..]).expect("layout");
    cmd.ctx_mut()
        .set_cqn(cq.cqn)
        .wq_mut()
        .set_wq_type(1)
        .set_end_padding_mode(end_padding_mode)
        .set_pd(h.pd)
        .set_dbr_addr(dbr)
        .set_log_wq_stride(4)
        .set_log_wq_sz(4);
    cmd.set_pas(0, buf).expect("room");
    h.exec(&input, 16)
}

/// mlx5e_build_rq_param asks every RQ for end padding to a cache line (end_padding_mode 1,
/// MLX5_WQ_END_PAD_MODE_ALIGN, offered by the end_pad capability); 2 and 3 are reserved and
/// refused, as a ConnectX refuses a reserved mode.
#[test]
fn an_rq_pads_to_a_cache_line_as_mlx5e_asks_and_a_reserved_padding_mode_is_refused() {
    let mut h = host();
    h.bring_up();
    assert!(create_rq_padded(&mut h, 1).is_ok());
    for mode in [2, 3] {
        assert_eq!(
            create_rq_padded(&mut h, mode),
            Err(CmdFail::status(
                CmdStatus::BadParameter,
                Syndrome::BadWqParams
            )),
            "end_padding_mode {mode}"
        );
    }
}

/// mlx5_ib sizes a QP's queues up to `log_max_qp_sz` (`calc_sq_size`) and writes their `ilog2`
/// into the QP context's 4-bit `log_sq_size`/`log_rq_size` (and an SRQ's into `log_srq_size`):
/// a report above 15 lets a 2^16-entry queue reach the device as `log_sq_size` 0, as NVMe over
/// RDMA's integrity QPs did. A ConnectX-6 Dx reports 2^15 (`max_qp_wr` 32,768).
#[test]
fn queue_size_limits_fit_the_four_bit_context_fields_mlx5_ib_fills() {
    let mut h = initialized_host();
    let general = h.query_cap(hca::cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&general[0x10..]).unwrap();
    assert_eq!(caps.log_max_qp_sz(), 15);
    assert_eq!(caps.log_max_srq_sz(), 15);
}
