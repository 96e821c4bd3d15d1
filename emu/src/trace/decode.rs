//! Decoding a command's input field by field through the `cxdirect-hw` layouts: each opcode's
//! input layout, its nested contexts through their own tables, arrays element by element, and
//! every bit no layout declares reported as it is, so that nothing a driver sets goes unseen.

use cxdirect_hw::caps::{CmdHcaCap, FlowTableNicCap, PerProtocolNetworkingOffloadCaps};
use cxdirect_hw::cmd::{CmdIn, Opcode};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::layout::{read_field, FieldInfo, FieldKind, Layout};
use cxdirect_hw::roce::RoceCap;
use cxdirect_hw::{cq, eq, flow, hca, mkey, qp, reg, roce, srq, tir, vport, wq, xrq};

/// One decoded field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldData {
    /// A scalar of up to 64 bits, or the undeclared bits of one dword.
    Scalar(u64),
    /// An array of bytes (addresses, names), trailing zero bytes left out.
    Bytes(Vec<u8>),
    /// An array of wider elements (page addresses, RQ numbers), trailing zeros left out.
    Array(Vec<u64>),
}

/// A command input taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedInput {
    /// The opcode, raw.
    pub opcode: u16,
    /// The operation modifier.
    pub op_mod: u16,
    /// Every field that is not zero, in layout order, named by its path (`cq_context.cqe_sz`).
    /// Bits no layout declares appear as `PATH+0xBYTE` (the dword at that byte offset of the
    /// enclosing layout, with the declared bits masked off).
    pub fields: Vec<(String, FieldData)>,
}

/// The header fields every input has, named in the record itself rather than among its fields.
const HEADER: &[&str] = &["opcode", "op_mod"];

/// The table of `opcode`'s input layout; the bare header for commands whose input is only that.
fn input_fields(opcode: Opcode) -> &'static [FieldInfo] {
    use Opcode as O;
    match opcode {
        O::EnableHca => hca::EnableHcaIn::FIELDS,
        O::DisableHca => hca::DisableHcaIn::FIELDS,
        O::QueryIssi => hca::QueryIssiIn::FIELDS,
        O::SetIssi => hca::SetIssiIn::FIELDS,
        O::QueryPages => hca::QueryPagesIn::FIELDS,
        O::ManagePages => hca::ManagePagesIn::FIELDS,
        O::QueryHcaCap => hca::QueryHcaCapIn::FIELDS,
        O::QueryAdapter => hca::QueryAdapterIn::FIELDS,
        O::SetDriverVersion => hca::SetDriverVersionIn::FIELDS,
        O::SetHcaCap => hca::SetHcaCapIn::FIELDS,
        O::InitHca => hca::InitHcaIn::FIELDS,
        O::TeardownHca => hca::TeardownHcaIn::FIELDS,
        O::AccessReg => reg::AccessRegisterIn::FIELDS,
        O::QueryNicVportContext => vport::QueryNicVportContextIn::FIELDS,
        O::ModifyNicVportContext => vport::ModifyNicVportContextIn::FIELDS,
        O::QueryHcaVportPkey => vport::QueryHcaVportPkeyIn::FIELDS,
        O::QueryVportState => vport::QueryVportStateIn::FIELDS,
        O::QueryEswVportContext => cxdirect_hw::eswitch::QueryEswVportContextIn::FIELDS,
        O::QueryEswFunctions => cxdirect_hw::eswitch::QueryEswFunctionsIn::FIELDS,
        O::QueryVportCounter => vport::QueryVportCounterIn::FIELDS,
        O::AllocUar => hca::AllocUarIn::FIELDS,
        O::DeallocUar => hca::DeallocUarIn::FIELDS,
        O::AllocPd => hca::AllocPdIn::FIELDS,
        O::DeallocPd => hca::DeallocPdIn::FIELDS,
        O::DeallocXrcd => hca::DeallocXrcdIn::FIELDS,
        O::AllocTransportDomain => hca::AllocTransportDomainIn::FIELDS,
        O::DeallocTransportDomain => hca::DeallocTransportDomainIn::FIELDS,
        O::CreateEq => eq::CreateEqIn::FIELDS,
        O::DestroyEq => eq::DestroyEqIn::FIELDS,
        O::CreateCq => cq::CreateCqIn::FIELDS,
        O::DestroyCq => cq::DestroyCqIn::FIELDS,
        O::CreateSq => wq::CreateSqIn::FIELDS,
        O::ModifySq => wq::ModifySqIn::FIELDS,
        O::QuerySq => wq::QuerySqIn::FIELDS,
        O::DestroySq => wq::DestroySqIn::FIELDS,
        O::CreateRq => wq::CreateRqIn::FIELDS,
        O::ModifyRq => wq::ModifyRqIn::FIELDS,
        O::QueryRq => wq::QueryRqIn::FIELDS,
        O::DestroyRq => wq::DestroyRqIn::FIELDS,
        O::CreateRmp => wq::CreateRmpIn::FIELDS,
        O::ModifyRmp => wq::ModifyRmpIn::FIELDS,
        O::QueryRmp => wq::QueryRmpIn::FIELDS,
        O::DestroyRmp => wq::DestroyRmpIn::FIELDS,
        O::CreateTis => tir::CreateTisIn::FIELDS,
        O::DestroyTis => tir::DestroyTisIn::FIELDS,
        O::CreateTir => tir::CreateTirIn::FIELDS,
        O::ModifyTir => tir::ModifyTirIn::FIELDS,
        O::DestroyTir => tir::DestroyTirIn::FIELDS,
        O::CreateRqt => tir::CreateRqtIn::FIELDS,
        O::ModifyRqt => tir::ModifyRqtIn::FIELDS,
        O::DestroyRqt => tir::DestroyRqtIn::FIELDS,
        O::CreateFlowTable => flow::CreateFlowTableIn::FIELDS,
        O::DestroyFlowTable => flow::DestroyFlowTableIn::FIELDS,
        O::CreateFlowGroup => flow::CreateFlowGroupIn::FIELDS,
        O::DestroyFlowGroup => flow::DestroyFlowGroupIn::FIELDS,
        O::SetFlowTableEntry => flow::SetFteIn::FIELDS,
        O::DeleteFlowTableEntry => flow::DeleteFteIn::FIELDS,
        O::SetFlowTableRoot => flow::SetFlowTableRootIn::FIELDS,
        O::ModifyFlowTable => flow::ModifyFlowTableIn::FIELDS,
        O::AllocFlowCounter => flow::AllocFlowCounterIn::FIELDS,
        O::DeallocFlowCounter => flow::DeallocFlowCounterIn::FIELDS,
        O::QueryFlowCounter => flow::QueryFlowCounterIn::FIELDS,
        O::CreateMkey => mkey::CreateMkeyIn::FIELDS,
        O::QueryMkey => mkey::QueryMkeyIn::FIELDS,
        O::DestroyMkey => mkey::DestroyMkeyIn::FIELDS,
        O::DeallocQCounter => cxdirect_hw::counters::DeallocQCounterIn::FIELDS,
        O::QueryQCounter => cxdirect_hw::counters::QueryQCounterIn::FIELDS,
        O::SetPpRateLimit => cxdirect_hw::qos::SetPpRateLimitIn::FIELDS,
        O::CreateSchedulingElement => cxdirect_hw::qos::CreateSchedulingElementIn::FIELDS,
        O::ModifySchedulingElement => cxdirect_hw::qos::ModifySchedulingElementIn::FIELDS,
        O::QuerySchedulingElement => cxdirect_hw::qos::QuerySchedulingElementIn::FIELDS,
        O::DestroySchedulingElement => cxdirect_hw::qos::DestroySchedulingElementIn::FIELDS,
        // The header only: the body after it is the object type's.
        O::CreateGeneralObject
        | O::ModifyGeneralObject
        | O::QueryGeneralObject
        | O::DestroyGeneralObject => cxdirect_hw::general_obj::GeneralObjInCmdHdr::FIELDS,
        O::AllocMemic => cxdirect_hw::memic::AllocMemicIn::FIELDS,
        O::DeallocMemic => cxdirect_hw::memic::DeallocMemicIn::FIELDS,
        O::ModifyMemic => cxdirect_hw::memic::ModifyMemicIn::FIELDS,
        O::CreateQp => qp::CreateQpIn::FIELDS,
        O::Rst2initQp => qp::Rst2initQpIn::FIELDS,
        O::Init2initQp => qp::Init2initQpIn::FIELDS,
        O::Init2rtrQp => qp::Init2rtrQpIn::FIELDS,
        O::Rtr2rtsQp => qp::Rtr2rtsQpIn::FIELDS,
        O::Rts2rtsQp => qp::Rts2rtsQpIn::FIELDS,
        O::Sqerr2rtsQp => qp::Sqerr2rtsQpIn::FIELDS,
        O::SqdRtsQp => qp::Sqerr2rtsQpIn::FIELDS,
        O::Qp2errQp => qp::Qp2errIn::FIELDS,
        O::Qp2rstQp => qp::Qp2rstIn::FIELDS,
        O::QueryQp => qp::QueryQpIn::FIELDS,
        O::DestroyQp => qp::DestroyQpIn::FIELDS,
        O::CreateXrcSrq => qp::CreateXrcSrqIn::FIELDS,
        O::ArmXrcSrq => srq::ArmXrcSrqIn::FIELDS,
        O::QueryXrcSrq => srq::QueryXrcSrqIn::FIELDS,
        O::DestroyXrcSrq => qp::DestroyXrcSrqIn::FIELDS,
        O::CreateXrq => xrq::CreateXrqIn::FIELDS,
        O::QueryXrq => xrq::QueryXrqIn::FIELDS,
        O::ArmXrq => xrq::ArmXrqIn::FIELDS,
        O::DestroyXrq => xrq::DestroyXrqIn::FIELDS,
        O::SetRoceAddress => roce::SetRoceAddressIn::FIELDS,
        O::AttachToMcg => cxdirect_hw::mcg::AttachToMcgIn::FIELDS,
        O::DetachFromMcg => cxdirect_hw::mcg::DetachFromMcgIn::FIELDS,
        O::QueryRoceAddress => roce::QueryRoceAddressIn::FIELDS,
        O::CreateUctx => cxdirect_hw::devx::CreateUctxIn::FIELDS,
        O::DestroyUctx => cxdirect_hw::devx::DestroyUctxIn::FIELDS,
        O::CreateUmem => cxdirect_hw::devx::CreateUmemIn::FIELDS,
        O::DestroyUmem => cxdirect_hw::devx::DestroyUmemIn::FIELDS,
        _ => CmdIn::FIELDS,
    }
}

/// The capability layout a SET_HCA_CAP op_mod names (`cap_type << 1`, see
/// `hca::set_cap_op_mod`); `None` for a type no layout describes (its bits are then reported
/// raw).
fn capability_fields(op_mod: u16) -> Option<&'static [FieldInfo]> {
    match op_mod >> 1 {
        cap_type::GENERAL_DEVICE => Some(CmdHcaCap::FIELDS),
        cap_type::ETHERNET_OFFLOADS => Some(PerProtocolNetworkingOffloadCaps::FIELDS),
        cap_type::ROCE => Some(RoceCap::FIELDS),
        cap_type::FLOW_TABLE => Some(FlowTableNicCap::FIELDS),
        _ => None,
    }
}

/// The register layout an ACCESS_REG input's `register_id` names.
fn register_fields(register_id: u16) -> Option<&'static [FieldInfo]> {
    match register_id {
        reg::REG_PAOS => Some(reg::PaosReg::FIELDS),
        reg::REG_PMTU => Some(reg::PmtuReg::FIELDS),
        reg::REG_PTYS => Some(reg::PtysReg::FIELDS),
        reg::REG_PPCNT => Some(reg::PpcntReg::FIELDS),
        reg::REG_PFCC => Some(reg::PfccReg::FIELDS),
        reg::REG_QTCT => Some(reg::QtctReg::FIELDS),
        reg::REG_QETCR => Some(reg::QetcReg::FIELDS),
        _ => None,
    }
}

/// Decodes a whole command input (inline part and mailbox data). An input too short for the
/// header decodes as opcode 0 with its bytes reported raw.
pub fn decode_input(input: &[u8]) -> DecodedInput {
    // Read as far as the input goes: an input shorter than the 16-byte header still names its
    // opcode (the firmware refuses it for its length).
    let be16 = |at: usize| {
        input
            .get(at..at + 2)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
    };
    let opcode = be16(0);
    let op_mod = be16(6);
    let table = Opcode::try_from(opcode).map_or(CmdIn::FIELDS, input_fields);
    // Unions and register contents are chosen by the header, as the firmware chooses them.
    let register_id = if opcode == Opcode::AccessReg as u16 {
        reg::AccessRegisterIn::new(input)
            .map(|r| r.register_id())
            .unwrap_or(0)
    } else {
        0
    };
    let choose = |path: &str| -> Choice {
        match (Opcode::try_from(opcode), path) {
            (Ok(Opcode::SetHcaCap), "capability") => match capability_fields(op_mod) {
                Some(fields) => Choice::Layout(fields),
                None => Choice::Raw,
            },
            (Ok(Opcode::AccessReg), "register_data") => match register_fields(register_id) {
                Some(fields) => Choice::Layout(fields),
                None => Choice::Default,
            },
            _ => Choice::Default,
        }
    };
    let mut fields = Vec::new();
    walk(table, input, "", true, &choose, &mut fields);
    DecodedInput {
        opcode,
        op_mod,
        fields,
    }
}

/// How a nested layout or array at a given path is decoded.
enum Choice {
    /// Through its declared layout (or element by element, for an array).
    Default,
    /// Through this table instead (a union member or a register chosen by the header).
    Layout(&'static [FieldInfo]),
    /// Through no table: every non-zero dword reported raw.
    Raw,
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Marks bits `bit..bit + width` of `covered` (one mask per big-endian dword).
fn cover(covered: &mut [u32], bit: usize, width: usize) {
    for b in bit..bit + width {
        if let Some(word) = covered.get_mut(b / 32) {
            *word |= 1 << (31 - b % 32);
        }
    }
}

/// Decodes `buf` through `table` (`buf` is the whole view: the input at the top, the nested
/// layout's bytes below it), appending every non-zero field to `out` under `prefix`.
fn walk(
    table: &'static [FieldInfo],
    buf: &[u8],
    prefix: &str,
    top: bool,
    choose: &dyn Fn(&str) -> Choice,
    out: &mut Vec<(String, FieldData)>,
) {
    let mut covered = vec![0u32; buf.len() / 4];
    if top {
        for f in CmdIn::FIELDS {
            cover(&mut covered, f.bit_offset, f.width);
        }
    }
    // Members of a union sit at one offset: the first is decoded, the others only mark their
    // bits as declared (they read the same bytes another way).
    let mut nested_at: Vec<usize> = Vec::new();
    for f in table {
        let path = join(prefix, f.name);
        match f.kind {
            FieldKind::Scalar => {
                let end = f.bit_offset - f.bit_offset % 32 + if f.in_one_dword() { 32 } else { 64 };
                if end > buf.len() * 8 {
                    continue;
                }
                cover(&mut covered, f.bit_offset, f.width);
                if top && HEADER.contains(&f.name) {
                    continue;
                }
                let value = read_field(buf, f.bit_offset, f.width);
                if value != 0 {
                    out.push((path, FieldData::Scalar(value)));
                }
            }
            FieldKind::Nested => {
                let start = f.bit_offset / 8;
                let len = f.width / 8;
                if buf.len() < start + len {
                    continue;
                }
                // A nested layout that closes its parent takes the parent's variable tail too
                // (SET_FLOW_TABLE_ENTRY's destinations follow its flow context): its own
                // arrays continue there, as the firmware reads them.
                let last = !table.iter().any(|g| g.bit_offset >= f.bit_offset + f.width);
                let has_array = f.nested.iter().any(|g| g.kind == FieldKind::Array);
                let view = if last && has_array {
                    &buf[start..]
                } else {
                    &buf[start..start + len]
                };
                cover(&mut covered, f.bit_offset, view.len() * 8);
                match choose(&path) {
                    Choice::Layout(fields) => {
                        // A chosen union member stands for the whole union: name it by the
                        // union's path.
                        if !nested_at.contains(&f.bit_offset) {
                            walk(fields, view, &path, false, choose, out);
                        }
                    }
                    Choice::Raw => {
                        if !nested_at.contains(&f.bit_offset) {
                            walk(&[], view, &path, false, choose, out);
                        }
                    }
                    Choice::Default => {
                        if !nested_at.contains(&f.bit_offset) {
                            walk(f.nested, view, &path, false, choose, out);
                        }
                    }
                }
                nested_at.push(f.bit_offset);
            }
            FieldKind::Array => {
                let start = f.bit_offset / 8;
                let Some(rest) = buf.get(start..) else {
                    continue;
                };
                cover(&mut covered, f.bit_offset, rest.len() * 8);
                if let Choice::Layout(fields) = choose(&path) {
                    walk(fields, rest, &path, false, choose, out);
                    continue;
                }
                let step = f.width / 8;
                let mut elements: Vec<u64> = rest
                    .chunks_exact(step)
                    .map(|c| c.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
                    .collect();
                while elements.last() == Some(&0) {
                    elements.pop();
                }
                if elements.is_empty() {
                    continue;
                }
                let data = if step == 1 {
                    FieldData::Bytes(elements.iter().map(|&b| b as u8).collect())
                } else {
                    FieldData::Array(elements)
                };
                out.push((path, data));
            }
        }
    }
    for (i, mask) in covered.iter().enumerate() {
        let word = u32::from_be_bytes([buf[i * 4], buf[i * 4 + 1], buf[i * 4 + 2], buf[i * 4 + 3]]);
        let stray = word & !mask;
        if stray != 0 {
            out.push((
                format!("{prefix}+{:#x}", i * 4),
                FieldData::Scalar(u64::from(stray)),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxdirect_hw::cq::CreateCqIn;
    use cxdirect_hw::hca::{set_cap_op_mod, SetHcaCapIn};

    fn field<'a>(d: &'a DecodedInput, name: &str) -> Option<&'a FieldData> {
        d.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    #[test]
    fn create_cq_decodes_its_context_and_page_list() {
        let mut buf = vec![0u8; <CreateCqIn as Layout>::SIZE + 16];
        let mut cmd = CreateCqIn::new(&mut buf[..]).unwrap();
        cmd.set_opcode(Opcode::CreateCq as u16);
        cmd.cq_context_mut().set_log_cq_size(6).set_c_eqn(3);
        cmd.set_pas(0, 0x1000).unwrap();
        let d = decode_input(&buf);
        assert_eq!(d.opcode, Opcode::CreateCq as u16);
        assert_eq!(
            field(&d, "cq_context.log_cq_size"),
            Some(&FieldData::Scalar(6))
        );
        assert_eq!(field(&d, "cq_context.c_eqn"), Some(&FieldData::Scalar(3)));
        assert_eq!(field(&d, "pas"), Some(&FieldData::Array(vec![0x1000])));
        // Zero fields and the header are left out.
        assert!(field(&d, "opcode").is_none());
        assert!(field(&d, "cq_context.cqe_sz").is_none());
        assert_eq!(d.fields.len(), 3, "{:?}", d.fields);
    }

    #[test]
    fn bits_no_layout_declares_are_reported_raw() {
        let mut buf = vec![0u8; <CreateCqIn as Layout>::SIZE];
        CreateCqIn::new(&mut buf[..])
            .unwrap()
            .set_opcode(Opcode::CreateCq as u16);
        // Dword 3 of the header (`reserved_at_60` in every create input) and a dword
        // of the CQ context that no field claims.
        buf[0x0c] = 0x80;
        buf[0x10 + 0x33] = 1;
        let d = decode_input(&buf);
        assert_eq!(field(&d, "+0xc"), Some(&FieldData::Scalar(0x8000_0000)));
        assert_eq!(field(&d, "cq_context+0x30"), Some(&FieldData::Scalar(1)));
    }

    #[test]
    fn set_hca_cap_decodes_the_capability_its_op_mod_names() {
        let mut buf = vec![0u8; <SetHcaCapIn as Layout>::SIZE];
        let mut cmd = SetHcaCapIn::new(&mut buf[..]).unwrap();
        cmd.set_opcode(Opcode::SetHcaCap as u16)
            .set_op_mod(set_cap_op_mod(cap_type::GENERAL_DEVICE));
        cmd.capability_mut()
            .cmd_hca_cap_mut()
            .set_log_max_qp(10)
            .set_cmdif_checksum(1);
        let d = decode_input(&buf);
        assert_eq!(
            field(&d, "capability.log_max_qp"),
            Some(&FieldData::Scalar(10))
        );
        assert_eq!(
            field(&d, "capability.cmdif_checksum"),
            Some(&FieldData::Scalar(1))
        );
        assert!(d
            .fields
            .iter()
            .all(|(n, _)| !n.contains("per_protocol") && !n.contains("flow_table_nic")));
    }

    #[test]
    fn flow_entry_destinations_follow_the_flow_context() {
        use cxdirect_hw::flow::{dest_format_entry, SetFteIn};
        let mut buf = vec![0u8; <SetFteIn as Layout>::SIZE + 8];
        let mut cmd = SetFteIn::new(&mut buf[..]).unwrap();
        cmd.set_opcode(Opcode::SetFlowTableEntry as u16);
        cmd.flow_context_mut().set_destination_list_size(1);
        // The first destination sits just past the fixed part (as the driver and the
        // firmware's steering code place it).
        let at = <SetFteIn as Layout>::SIZE;
        buf[at..at + 8].copy_from_slice(&dest_format_entry(2, 7).to_be_bytes());
        let d = decode_input(&buf);
        assert_eq!(
            field(&d, "flow_context.destination"),
            Some(&FieldData::Array(vec![dest_format_entry(2, 7)]))
        );
        assert!(
            d.fields.iter().all(|(n, _)| !n.contains('+')),
            "{:?}",
            d.fields
        );
    }

    #[test]
    fn short_and_unknown_inputs_never_panic() {
        assert_eq!(decode_input(&[]).fields, vec![]);
        let d = decode_input(&[0xff, 0xff, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(d.opcode, 0xffff);
        assert_eq!(field(&d, "+0x8"), Some(&FieldData::Scalar(0x0102_0304)));
        // Every opcode's layout against inputs of every short length.
        for op in Opcode::ALL {
            for len in [0usize, 4, 8, 16, 17, 0x40, 0x111] {
                let mut buf = vec![0xa5u8; len];
                if len >= 2 {
                    buf[..2].copy_from_slice(&(*op as u16).to_be_bytes());
                }
                let _ = decode_input(&buf);
            }
        }
    }
}
