//! The capability set the model reports (QUERY_HCA_CAP) and accepts (SET_HCA_CAP).
//!
//! Maximum and current values start equal except where the driver is expected to choose
//! (command checksums default off). Every limit reported here is enforced by the command
//! handlers, so a driver that trusts the caps stays inside them.

use super::{bad_param, input_as, CmdError, CmdResult, Core, Syndrome};
pub(crate) use crate::function::caps::{LOG_MAX_FLOW_DESTINATION, MAX_FT_LEVEL};
use cxdirect_hw::caps::{atomic_endianness, AtomicCaps, CmdHcaCap};
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::hca::{cap_type, SetHcaCapIn};
use cxdirect_hw::layout::{read_field, FieldKind, Layout};

pub(crate) use crate::objects::limits::{
    LOG_MAX_CQ_SZ, LOG_MAX_EQ_SZ, LOG_MAX_MRW_SZ, LOG_MAX_RQT_SIZE, LOG_MAX_WQ_SZ,
};
use cxdirect_hw::roce::RoceCap;

/// Fields SET_HCA_CAP may change (up to their maximum value).
const SETTABLE_GENERAL: &[&str] = &[
    "cmdif_checksum",
    "log_uar_page_sz",
    "uar_4k",
    "cache_line_128byte",
    "driver_version",
    "disable_link_up",
    "log_max_qp",
    "pkey_table_size",
];

/// QUERY_HCA_CAP: op_mod = cap_type << 1 | current.
pub(crate) fn query_hca_cap(core: &mut Core, op_mod: u16, output: &mut [u8]) -> CmdResult {
    let current = op_mod & 1 == 1;
    let kind = op_mod >> 1;
    let page: &[u8] = match kind {
        cap_type::GENERAL_DEVICE if current => &core.hca.caps.current_general,
        cap_type::GENERAL_DEVICE => &core.hca.caps.max_general,
        cap_type::ETHERNET_OFFLOADS => &core.hca.caps.ethernet,
        cap_type::FLOW_TABLE => &core.hca.caps.flow_table[..],
        cap_type::ROCE if core.cfg.roce && current => &core.hca.caps.current_roce,
        cap_type::ROCE if core.cfg.roce => &core.hca.caps.max_roce,
        cap_type::ATOMIC if core.cfg.roce && current => &core.hca.caps.current_atomic,
        cap_type::ATOMIC if core.cfg.roce => &core.hca.caps.max_atomic,
        cap_type::ODP if core.cfg.roce && core.cfg.odp => &core.hca.caps.odp,
        cap_type::QOS => &core.hca.caps.qos,
        cap_type::DEVICE_MEM if core.memic.is_some() || core.icm.is_some() => {
            &core.hca.caps.device_mem
        }
        cap_type::GENERAL_DEVICE_2 => &core.hca.caps.general_2,
        cap_type::ESWITCH_FLOW_TABLE => &super::eswitch::FLOW_TABLE_PAGE,
        cap_type::ESWITCH => &super::eswitch::ESWITCH_PAGE,
        _ => {
            return Err(bad_param(
                Syndrome::BadOpMod,
                "capability type not modelled",
            ))
        }
    };
    let page = page.to_vec();
    // The output must hold the page as laid out, not the whole 4 KiB union: rdma-core's DEVX
    // tests read the general page with an output of 0x810 bytes (`QueryCmdHcaCapOut` in
    // tests/mlx5_prm_structs.py), as mlx5_core and libmlx5 read it with 0x1010.
    let at = 0x80 / 8; // query_hca_cap_out.capability
    let Some(dst) = output.get_mut(at..at + page.len()) else {
        return Err(CmdError::new(
            CmdStatus::BadOutputLength,
            Syndrome::OutputTooShort,
            "output shorter than the capability page",
        ));
    };
    dst.copy_from_slice(&page);
    Ok(())
}

/// SET_HCA_CAP: only the settable general fields may change, each up to its maximum.
pub(crate) fn set_hca_cap(core: &mut Core, op_mod: u16, input: &[u8]) -> CmdResult {
    if u64::from(core.cfg.boot_pages) > core.pages.total_given {
        return Err(super::bad_sys_state(
            "SET_HCA_CAP before the boot pages were given",
        ));
    }
    let cmd = input_as!(SetHcaCapIn<&[u8]>, input);
    let requested = &cmd.capability().into_inner()[..0x100];
    match op_mod >> 1 {
        cap_type::GENERAL_DEVICE => {
            let current = core.hca.caps.current_general;
            let max = core.hca.caps.max_general;
            for field in CmdHcaCap::FIELDS
                .iter()
                .filter(|f| f.kind == FieldKind::Scalar)
            {
                let want = read_field(requested, field.bit_offset, field.width);
                if want == read_field(&current, field.bit_offset, field.width) {
                    continue;
                }
                if !SETTABLE_GENERAL.contains(&field.name) {
                    return Err(bad_param(
                        Syndrome::CapReadOnly,
                        "SET_HCA_CAP changed a read-only capability",
                    ));
                }
                if want > read_field(&max, field.bit_offset, field.width)
                    && field.name != "log_uar_page_sz"
                {
                    return Err(bad_param(
                        Syndrome::CapAboveMax,
                        "SET_HCA_CAP asked for more than the maximum",
                    ));
                }
            }
            let mut next = current;
            for field in CmdHcaCap::FIELDS
                .iter()
                .filter(|f| SETTABLE_GENERAL.contains(&f.name))
            {
                let want = read_field(requested, field.bit_offset, field.width);
                cxdirect_hw::layout::write_field(&mut next, field.bit_offset, field.width, want);
            }
            core.hca.caps.current_general = next;
            let _ = <CmdHcaCap as Layout>::SIZE;
            Ok(())
        }
        cap_type::ETHERNET_OFFLOADS => {
            if requested != &core.hca.caps.ethernet[..] {
                return Err(bad_param(
                    Syndrome::CapReadOnly,
                    "Ethernet offload capabilities are read-only",
                ));
            }
            Ok(())
        }
        cap_type::ROCE if core.cfg.roce => {
            let want = RoceCap::new(requested)
                .map_err(|_| bad_param(Syndrome::InputTooShort, "RoCE capability page"))?
                .sw_r_roce_src_udp_port();
            let mut next = RoceCap::new(core.hca.caps.current_roce)
                .map_err(|_| bad_param(Syndrome::InputTooShort, "RoCE capability page"))?;
            next.set_sw_r_roce_src_udp_port(want);
            // Only the UDP source port choice is settable.
            if requested != next.as_bytes() {
                return Err(bad_param(
                    Syndrome::CapReadOnly,
                    "SET_HCA_CAP changed a read-only RoCE capability",
                ));
            }
            core.hca.caps.current_roce = next.into_inner();
            Ok(())
        }
        cap_type::ATOMIC if core.cfg.roce => {
            let want = AtomicCaps::new(requested)
                .map_err(|_| bad_param(Syndrome::InputTooShort, "atomic capability page"))?
                .atomic_req_8b_endianness_mode();
            if want != atomic_endianness::BIG_ENDIAN && want != atomic_endianness::HOST {
                return Err(bad_param(
                    Syndrome::CapAboveMax,
                    "SET_HCA_CAP asked for an atomic result order the device lacks",
                ));
            }
            // Linux sends a page that is zero but for the mode; every other field is
            // read-only and ignored, as a ConnectX does.
            let mut next = AtomicCaps::new(core.hca.caps.current_atomic)
                .map_err(|_| bad_param(Syndrome::InputTooShort, "atomic capability page"))?;
            next.set_atomic_req_8b_endianness_mode(want);
            core.hca.caps.current_atomic = next.into_inner();
            Ok(())
        }
        // mlx5_core's `handle_hca_cap_odp` sends the current page back with the per-transport
        // caps it wants raised to their maximum (`ODP_CAP_SET_MAX`): a page asking for nothing
        // beyond the maximum is accepted, and the page stays what it is (maximum and current
        // are one here).
        cap_type::ODP if core.cfg.roce && core.cfg.odp => {
            let max = &core.hca.caps.odp;
            if requested
                .iter()
                .zip(max.iter())
                .any(|(want, have)| want & !have != 0)
            {
                return Err(bad_param(
                    Syndrome::CapAboveMax,
                    "SET_HCA_CAP asked for an ODP capability the device lacks",
                ));
            }
            Ok(())
        }
        // Nothing in the second general page is settable (`sw_vhca_id_valid` is not
        // offered, so mlx5_core's `handle_hca_cap_2` never sets it): the page as it is is
        // accepted, any change refused.
        cap_type::GENERAL_DEVICE_2 => {
            if requested != &core.hca.caps.general_2[..] {
                return Err(bad_param(
                    Syndrome::CapReadOnly,
                    "SET_HCA_CAP changed a read-only HCA_CAP_2 capability",
                ));
            }
            Ok(())
        }
        _ => Err(bad_param(
            Syndrome::BadOpMod,
            "capability type not modelled",
        )),
    }
}
