//! The HCA life cycle (enable, ISSI, pages, init, teardown, disable), the health state behind
//! the init segment, the port (PAOS, PMTU) and the NIC vport context.

use super::{bad_param, input_as, output_as, CmdError, CmdResult, Core, Syndrome};
use crate::counters::get;
use crate::function::hca::set_oper;
pub(crate) use crate::function::hca::HcaState;
use crate::fw::pages;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::hca::{
    query_pages_op_mod, EnableHcaIn, QueryAdapterIn, QueryAdapterOut, QueryIssiOut, QueryPagesIn,
    QueryPagesOut, SetDriverVersionIn, SetIssiIn, TeardownHcaOut, DRIVER_VERSION_BYTES, PSID_BYTES,
};
use cxdirect_hw::reg::{
    self, AccessRegisterIn, AccessRegisterOut, Eth2863CntrsGrpDataLayout,
    Eth8023CntrsGrpDataLayout, PaosReg, PfccReg, PmtuReg, PpcntReg,
};
use cxdirect_hw::vport::{
    ModifyNicVportContextIn, QueryHcaVportPkeyIn, QueryHcaVportPkeyOut, QueryNicVportContextIn,
    QueryNicVportContextOut, QueryVportCounterIn, QueryVportCounterOut, QueryVportStateIn,
    QueryVportStateOut, TrafficCounter, DEFAULT_PKEY, PKEY_INDEX_ALL, VPORT_STATE_DOWN,
    VPORT_STATE_UP,
};

/// PPCNT counter groups the model answers (every one Linux's mlx5e reads without PCAM, and the
/// InfiniBand port counters mlx5_ib reads for the RDMA core's PortCounters).
const PPCNT_GROUPS: &[u8] = &[
    reg::ppcnt_grp::IEEE_802_3,
    reg::ppcnt_grp::RFC_2863,
    reg::ppcnt_grp::RFC_2819,
    reg::ppcnt_grp::RFC_3635,
    reg::ppcnt_grp::ETHERNET_EXTENDED,
    reg::ppcnt_grp::ETHERNET_DISCARD,
    reg::ppcnt_grp::PER_PRIORITY,
    reg::ppcnt_grp::PER_TRAFFIC_CLASS,
    reg::ppcnt_grp::PHYSICAL_LAYER,
    reg::ppcnt_grp::PER_TRAFFIC_CLASS_CONGESTION,
    reg::ppcnt_grp::PHYSICAL_LAYER_STATISTICAL,
    reg::ppcnt_grp::INFINIBAND_PORT_COUNTERS,
];

/// The node description the NODE_DESC register holds (NUL-padded to 64 bytes): what an RDMA
/// stack shows as the device's `node_desc`.
pub(crate) const NODE_DESCRIPTION: &[u8] = b"MT4125 ConnectX6DX cxdirect device model";
/// Bytes of the NODE_DESC register (`struct mlx5_reg_node_desc` in Linux's mlx5_ib).
const NODE_DESC_BYTES: usize = 64;

/// The port's node GUID: its MAC address widened to EUI-64 (`ff:fe` in the middle), as
/// ConnectX firmware derives it. The system image GUID is the same (one function per port).
/// `mac` holds the address in its low 48 bits.
pub(crate) fn node_guid(mac: u64) -> u64 {
    let oui = (mac >> 24) & 0xff_ffff;
    let nic = mac & 0xff_ffff;
    (oui << 40) | (0xfffe << 24) | nic
}

/// The board's PSID (parameter set id) QUERY_ADAPTER reports.
pub(crate) const BOARD_PSID: &[u8] = b"CXDIRECT_EMU_01";
/// IEEE vendor id (OUI) QUERY_ADAPTER reports: Mellanox's.
pub(crate) const IEEE_VENDOR_ID: u32 = 0x00_02c9;
/// PCI vendor id of the adapter's vendor-specific data.
pub(crate) const VSD_VENDOR_ID: u16 = 0x15b3;

pub(crate) fn enable_hca(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(EnableHcaIn<&[u8]>, input);
    if cmd.function_id() != 0 {
        return Err(bad_param(
            Syndrome::BadFunctionId,
            "ENABLE_HCA for another function",
        ));
    }
    core.hca.state = HcaState::Enabled;
    Ok(())
}

pub(crate) fn disable_hca(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(cxdirect_hw::hca::DisableHcaIn<&[u8]>, input);
    if cmd.function_id() != 0 {
        return Err(bad_param(
            Syndrome::BadFunctionId,
            "DISABLE_HCA for another function",
        ));
    }
    destroy_all_objects(core);
    let held = core.pages.held();
    if held == 0 {
        log::info!(
            "function {}: DISABLE_HCA with every firmware page returned",
            core.port_name()
        );
    } else {
        log::warn!(
            "function {}: DISABLE_HCA with {held} firmware pages never returned",
            core.port_name()
        );
    }
    core.hca.pages_leaked += held as u64;
    core.pages.clear();
    core.hca.state = HcaState::Disabled;
    core.hca.issi = 0;
    Ok(())
}

pub(crate) fn set_driver_version(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetDriverVersionIn<&[u8]>, input);
    let mut text = [0u8; DRIVER_VERSION_BYTES];
    for (i, byte) in text.iter_mut().enumerate() {
        *byte = cmd.driver_version(i).unwrap_or(0);
    }
    core.hca.driver_version = text;
    Ok(())
}

pub(crate) fn query_adapter(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let _ = input_as!(QueryAdapterIn<&[u8]>, input);
    let _ = core;
    let mut out = output_as!(QueryAdapterOut<&mut [u8]>, output);
    let mut block = out.query_adapter_struct_mut();
    block
        .set_ieee_vendor_id(IEEE_VENDOR_ID)
        .set_vsd_vendor_id(VSD_VENDOR_ID);
    for i in 0..PSID_BYTES {
        let _ = block.set_vsd_contd_psid(i, BOARD_PSID.get(i).copied().unwrap_or(0));
    }
    Ok(())
}

pub(crate) fn query_issi(core: &mut Core, output: &mut [u8]) -> CmdResult {
    let mut out = output_as!(QueryIssiOut<&mut [u8]>, output);
    out.set_current_issi(core.hca.issi)
        .set_supported_issi_dw0(0b11);
    Ok(())
}

pub(crate) fn set_issi(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(SetIssiIn<&[u8]>, input);
    if cmd.current_issi() > 1 {
        return Err(bad_param(
            Syndrome::BadIssi,
            "only ISSI 0 and 1 are supported",
        ));
    }
    core.hca.issi = cmd.current_issi();
    Ok(())
}

pub(crate) fn query_pages(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryPagesIn<&[u8]>, input);
    if cmd.function_id() != 0 {
        return Err(bad_param(
            Syndrome::BadFunctionId,
            "QUERY_PAGES for another function",
        ));
    }
    let given = core.pages.total_given as i64;
    let boot = i64::from(core.cfg.boot_pages);
    let init = i64::from(core.cfg.init_pages);
    let pages = match cmd.op_mod() {
        query_pages_op_mod::BOOT => (boot - given).max(0),
        query_pages_op_mod::INIT => (boot + init - given).max(0),
        query_pages_op_mod::REGULAR => i64::from(core.pages.regular_request),
        _ => {
            return Err(bad_param(
                Syndrome::BadOpMod,
                "QUERY_PAGES op_mod must be 1, 2 or 3",
            ))
        }
    };
    let mut out = output_as!(QueryPagesOut<&mut [u8]>, output);
    out.set_function_id(0).set_num_pages_signed(pages as i32);
    Ok(())
}

pub(crate) fn init_hca(core: &mut Core) -> CmdResult {
    let needed = u64::from(core.cfg.boot_pages + core.cfg.init_pages);
    if core.pages.total_given < needed {
        return Err(CmdError::new(
            CmdStatus::BadSystemState,
            Syndrome::PagesMissing,
            "INIT_HCA before all boot and init pages were given",
        ));
    }
    // The firmware keeps the capabilities it was configured with in its own pages.
    let caps = core.hca.caps.current_general.to_vec();
    let slot = pages::store_new_context(core, &caps)?;
    core.hca.caps.context_slot = Some(slot);
    core.hca.state = HcaState::Initialized;
    if core.port.admin_up {
        set_oper(core, core.wire.is_some());
    }
    Ok(())
}

pub(crate) fn teardown_hca(core: &mut Core, output: &mut [u8]) -> CmdResult {
    destroy_all_objects(core);
    if let Some(slot) = core.hca.caps.context_slot.take() {
        core.pages.free_slot(slot);
    }
    core.pages.regular_request = 0;
    set_oper(core, false);
    core.hca.state = HcaState::TornDown;
    if let Ok(mut out) = TeardownHcaOut::new(&mut output[..]) {
        out.set_force_state(0);
    }
    Ok(())
}

/// Drops every object (teardown, disable): their contexts leave the firmware pages.
fn destroy_all_objects(core: &mut Core) {
    let mut slots = Vec::new();
    slots.extend(core.res.eqs.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.cqs.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.sqs.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.rqs.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.rmps.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.mkeys.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.qps.iter().map(|(_, o)| o.slot));
    slots.extend(core.res.ud_qps.iter().map(|(_, o)| o.slot));
    for slot in slots {
        core.pages.free_slot(slot);
    }
    core.res = crate::objects::Resources::new(&core.cfg);
}

pub(crate) fn access_reg(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(AccessRegisterIn<&[u8]>, input);
    let write = match cmd.op_mod() {
        reg::ACCESS_REG_OP_MOD_WRITE => true,
        reg::ACCESS_REG_OP_MOD_READ => false,
        _ => {
            return Err(bad_param(
                Syndrome::BadOpMod,
                "ACCESS_REG op_mod must be 0 (write) or 1 (read)",
            ))
        }
    };
    let data = &input[AccessRegisterIn::<&[u8]>::SIZE..];
    let reply_len = output
        .len()
        .saturating_sub(AccessRegisterOut::<&[u8]>::SIZE);
    let mut reply = vec![0u8; reply_len];
    match cmd.register_id() {
        reg::REG_PAOS => {
            let req = PaosReg::new(data)
                .map_err(|_| bad_param(Syndrome::BadRegister, "PAOS data too short"))?;
            if write && req.ase() {
                match req.admin_status() {
                    reg::PORT_STATUS_UP => core.port.admin_up = true,
                    reg::PORT_STATUS_DOWN => core.port.admin_up = false,
                    _ => {
                        return Err(bad_param(
                            Syndrome::BadRegister,
                            "PAOS admin_status must be 1 (up) or 2 (down)",
                        ))
                    }
                }
                let up = core.port.admin_up
                    && core.wire.is_some()
                    && core.hca.state == HcaState::Initialized;
                set_oper(core, up);
            }
            if let Ok(mut r) = PaosReg::new(&mut reply[..]) {
                r.set_local_port(1)
                    .set_admin_status(if core.port.admin_up {
                        reg::PORT_STATUS_UP
                    } else {
                        reg::PORT_STATUS_DOWN
                    })
                    .set_oper_status(if core.port.oper_up {
                        reg::PORT_STATUS_UP
                    } else {
                        reg::PORT_STATUS_DOWN
                    });
            }
        }
        reg::REG_PMTU => {
            let req = PmtuReg::new(data)
                .map_err(|_| bad_param(Syndrome::BadRegister, "PMTU data too short"))?;
            if write {
                let mtu = req.admin_mtu();
                if mtu < 68 || mtu > core.port.max_mtu {
                    return Err(bad_param(
                        Syndrome::BadRegister,
                        "PMTU admin_mtu outside 68..=max_mtu",
                    ));
                }
                core.port.admin_mtu = mtu;
            }
            if let Ok(mut r) = PmtuReg::new(&mut reply[..]) {
                r.set_local_port(1)
                    .set_max_mtu(core.port.max_mtu)
                    .set_admin_mtu(core.port.admin_mtu)
                    .set_oper_mtu(core.port.admin_mtu);
            }
        }
        reg::REG_PTYS => super::port_speed::ptys(core, write, data, &mut reply)?,
        reg::REG_PPCNT if !write => {
            let req = PpcntReg::new(data)
                .map_err(|_| bad_param(Syndrome::BadRegister, "PPCNT data too short"))?;
            let grp = req.grp();
            if !PPCNT_GROUPS.contains(&grp) {
                return Err(bad_param(
                    Syndrome::BadRegister,
                    "PPCNT counter group not modelled",
                ));
            }
            let prio_tc = req.prio_tc();
            if let Ok(mut r) = PpcntReg::new(&mut reply[..]) {
                r.set_local_port(1).set_grp(grp).set_prio_tc(prio_tc);
            }
            // Groups other than IEEE 802.3 and RFC 2863 read as zeros: the model counts
            // nothing they hold (no errors, pauses or per-priority traffic).
            if grp == reg::ppcnt_grp::RFC_2863 {
                let set = reply
                    .get_mut(reg::PPCNT_COUNTER_SET_OFFSET..)
                    .unwrap_or(&mut []);
                if let Ok(mut c) = Eth2863CntrsGrpDataLayout::new(set) {
                    // The port's side of the wire: frames that found its receive FIFO full
                    // were discarded there, before any steering or queue saw them, as a
                    // ConnectX's port buffer discards what it has no room for.
                    let port = core
                        .wire
                        .as_ref()
                        .and_then(|(wire, port)| wire.counters(*port).ok())
                        .unwrap_or_default();
                    let in_octets = port.rx_bytes + port.dropped_bytes;
                    c.set_if_in_octets_high((in_octets >> 32) as u32)
                        .set_if_in_octets_low(in_octets as u32)
                        .set_if_in_discards_high((port.dropped >> 32) as u32)
                        .set_if_in_discards_low(port.dropped as u32)
                        .set_if_out_octets_high((port.tx_bytes >> 32) as u32)
                        .set_if_out_octets_low(port.tx_bytes as u32);
                }
            }
            if grp == reg::ppcnt_grp::IEEE_802_3 {
                let set = reply
                    .get_mut(reg::PPCNT_COUNTER_SET_OFFSET..)
                    .unwrap_or(&mut []);
                if let Ok(mut c) = Eth8023CntrsGrpDataLayout::new(set) {
                    let n = &core.counters;
                    let (tx_f, tx_b) = (get(&n.tx_frames), get(&n.tx_bytes));
                    let (rx_f, rx_b) = (get(&n.rx_delivered), get(&n.rx_bytes));
                    c.set_a_frames_transmitted_ok_high((tx_f >> 32) as u32)
                        .set_a_frames_transmitted_ok_low(tx_f as u32)
                        .set_a_octets_transmitted_ok_high((tx_b >> 32) as u32)
                        .set_a_octets_transmitted_ok_low(tx_b as u32)
                        .set_a_frames_received_ok_high((rx_f >> 32) as u32)
                        .set_a_frames_received_ok_low(rx_f as u32)
                        .set_a_octets_received_ok_high((rx_b >> 32) as u32)
                        .set_a_octets_received_ok_low(rx_b as u32);
                }
            }
        }
        reg::REG_PFCC => {
            let req = PfccReg::new(data)
                .map_err(|_| bad_param(Syndrome::BadRegister, "PFCC data too short"))?;
            // The wire never congests: pause settings are kept and reported, and change nothing.
            if write {
                core.port.pause_tx = req.pptx();
                core.port.pause_rx = req.pprx();
                let (mtx, mrx) = (req.prio_mask_tx(), req.prio_mask_rx());
                core.port.pfc_tx = (core.port.pfc_tx & !mtx) | (req.pfctx() & mtx);
                core.port.pfc_rx = (core.port.pfc_rx & !mrx) | (req.pfcrx() & mrx);
            }
            if let Ok(mut r) = PfccReg::new(&mut reply[..]) {
                r.set_local_port(1)
                    .set_pptx(core.port.pause_tx)
                    .set_pprx(core.port.pause_rx)
                    .set_pfctx(core.port.pfc_tx)
                    .set_pfcrx(core.port.pfc_rx);
            }
        }
        reg::REG_QTCT => super::ets::qtct(core, write, data, &mut reply)?,
        reg::REG_QETCR => super::ets::qetcr(core, write, data, &mut reply)?,
        reg::REG_HOST_ENDIANNESS => {}
        // Read only: the description is the firmware's own.
        reg::REG_NODE_DESC if !write => {
            let n = NODE_DESCRIPTION.len().min(reply.len());
            reply[..n].copy_from_slice(&NODE_DESCRIPTION[..n]);
            if reply.len() < NODE_DESC_BYTES {
                return Err(bad_param(Syndrome::BadRegister, "NODE_DESC reads 64 bytes"));
            }
        }
        other => {
            log::info!(
                "function {}: ACCESS_REG register {other:#06x} not modelled",
                core.port_name()
            );
            return Err(bad_param(Syndrome::BadRegister, "register not modelled"));
        }
    }
    let mut out = output_as!(AccessRegisterOut<&mut [u8]>, output);
    let _ = &mut out;
    let start = AccessRegisterOut::<&[u8]>::SIZE;
    output[start..start + reply.len()].copy_from_slice(&reply);
    Ok(())
}

/// Refuses a vport other than the function's own: the model has no VFs or scalable
/// functions, so its e-switch holds one vport.
pub(crate) fn check_own_vport(other_vport: bool, vport_number: u16) -> CmdResult {
    if other_vport || vport_number != 0 {
        return Err(bad_param(
            Syndrome::BadVport,
            "only the function's own vport (0) is modelled",
        ));
    }
    Ok(())
}

pub(crate) fn query_nic_vport_context(
    core: &mut Core,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let cmd = input_as!(QueryNicVportContextIn<&[u8]>, input);
    check_own_vport(cmd.other_vport(), cmd.vport_number())?;
    let mut out = output_as!(QueryNicVportContextOut<&mut [u8]>, output);
    let mut ctx = out.nic_vport_context_mut();
    ctx.set_mtu(core.port.vport_mtu)
        .set_promisc_uc(core.port.promisc_uc)
        .set_promisc_mc(core.port.promisc_mc)
        .set_promisc_all(core.port.promisc_all)
        .set_roce_en(core.port.roce_en)
        .set_disable_uc_local_lb(core.port.disable_uc_local_lb)
        .set_disable_mc_local_lb(core.port.disable_mc_local_lb)
        .set_node_guid(node_guid(core.port.mac))
        .set_system_image_guid(node_guid(core.port.mac));
    ctx.permanent_address_mut().set_mac(core.port.mac);
    Ok(())
}

/// QUERY_HCA_VPORT_PKEY: the port's P_Key table (`128 << pkey_table_size` entries) holds the
/// default P_Key at index 0 and nothing else, as on any Ethernet port; Linux's RDMA core reads
/// index 0 when it registers a RoCE device.
pub(crate) fn query_hca_vport_pkey(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryHcaVportPkeyIn<&[u8]>, input);
    check_own_vport(cmd.other_vport(), cmd.vport_number())?;
    if cmd.port_num() > 1 {
        return Err(bad_param(Syndrome::BadVport, "no such port"));
    }
    let entries = 128usize << core.hca.caps.general().pkey_table_size().min(8);
    let index = usize::from(cmd.pkey_index());
    let (first, count) = if cmd.pkey_index() == PKEY_INDEX_ALL {
        (0, entries)
    } else if index < entries {
        (index, 1)
    } else {
        return Err(bad_param(
            Syndrome::BadPkeyIndex,
            "P_Key index past the table",
        ));
    };
    let header = <QueryHcaVportPkeyOut as cxdirect_hw::Layout>::SIZE;
    if output.len() < header + count * 4 {
        return Err(CmdError::new(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort,
            "output shorter than the P_Keys asked for",
        ));
    }
    let mut out = output_as!(QueryHcaVportPkeyOut<&mut [u8]>, output);
    for i in 0..count {
        let pkey = if first + i == 0 { DEFAULT_PKEY } else { 0 };
        out.set_pkey(i, u32::from(pkey))
            .map_err(|_| bad_param(Syndrome::OutputTooShort, "P_Key array"))?;
    }
    Ok(())
}

pub(crate) fn modify_nic_vport_context(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(ModifyNicVportContextIn<&[u8]>, input);
    check_own_vport(cmd.other_vport(), cmd.vport_number())?;
    let select = cmd.field_select();
    let ctx = cmd.nic_vport_context();
    if select.mtu() {
        let mtu = ctx.mtu();
        if mtu < 68 || mtu > core.port.max_mtu {
            return Err(bad_param(
                Syndrome::BadVport,
                "vport MTU outside 68..=max_mtu",
            ));
        }
        core.port.vport_mtu = mtu;
    }
    if select.promisc() {
        core.port.promisc_uc = ctx.promisc_uc();
        core.port.promisc_mc = ctx.promisc_mc();
        core.port.promisc_all = ctx.promisc_all();
    }
    if select.permanent_address() {
        core.port.mac = ctx.permanent_address().mac();
    }
    if select.roce_en() {
        core.port.roce_en = ctx.roce_en();
    }
    // mlx5_nic_vport_update_local_lb selects each bit only when its cap is advertised.
    if select.disable_uc_local_lb() {
        core.port.disable_uc_local_lb = ctx.disable_uc_local_lb();
    }
    if select.disable_mc_local_lb() {
        core.port.disable_mc_local_lb = ctx.disable_mc_local_lb();
    }
    Ok(())
}

pub(crate) fn query_vport_state(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryVportStateIn<&[u8]>, input);
    check_own_vport(cmd.other_vport(), cmd.vport_number())?;
    let mut out = output_as!(QueryVportStateOut<&mut [u8]>, output);
    let state = |up| if up { VPORT_STATE_UP } else { VPORT_STATE_DOWN };
    out.set_admin_state(state(core.port.admin_up))
        .set_state(state(core.port.oper_up));
    Ok(())
}

pub(crate) fn query_vport_counter(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(QueryVportCounterIn<&[u8]>, input);
    check_own_vport(cmd.other_vport(), cmd.vport_number())?;
    let n = &core.counters;
    let pairs = [
        (get(&n.rx_unicast_frames), get(&n.rx_unicast_bytes)),
        (get(&n.tx_unicast_frames), get(&n.tx_unicast_bytes)),
        (get(&n.rx_multicast_frames), get(&n.rx_multicast_bytes)),
        (get(&n.tx_multicast_frames), get(&n.tx_multicast_bytes)),
        (get(&n.rx_broadcast_frames), get(&n.rx_broadcast_bytes)),
        (get(&n.tx_broadcast_frames), get(&n.tx_broadcast_bytes)),
        (
            get(&n.rx_rdma_unicast_frames),
            get(&n.rx_rdma_unicast_bytes),
        ),
        (
            get(&n.tx_rdma_unicast_frames),
            get(&n.tx_rdma_unicast_bytes),
        ),
        (
            get(&n.rx_rdma_multicast_frames),
            get(&n.rx_rdma_multicast_bytes),
        ),
        (
            get(&n.tx_rdma_multicast_frames),
            get(&n.tx_rdma_multicast_bytes),
        ),
    ];
    let mut out = output_as!(QueryVportCounterOut<&mut [u8]>, output);
    let set = |mut c: TrafficCounter<&mut [u8]>, (packets, octets): (u64, u64)| {
        c.set_packets(packets).set_octets(octets);
    };
    set(out.received_eth_unicast_mut(), pairs[0]);
    set(out.transmitted_eth_unicast_mut(), pairs[1]);
    set(out.received_eth_multicast_mut(), pairs[2]);
    set(out.transmitted_eth_multicast_mut(), pairs[3]);
    set(out.received_eth_broadcast_mut(), pairs[4]);
    set(out.transmitted_eth_broadcast_mut(), pairs[5]);
    set(out.received_ib_unicast_mut(), pairs[6]);
    set(out.transmitted_ib_unicast_mut(), pairs[7]);
    set(out.received_ib_multicast_mut(), pairs[8]);
    set(out.transmitted_ib_multicast_mut(), pairs[9]);
    Ok(())
}
