//! AV-to-QP mappings (general object AV_QP_MAPPING, 0x3a) as rdma-core's
//! `_mlx5dv_map_ah_to_qp` (providers/mlx5/verbs.c) creates them through DEVX: offered by the
//! `general_obj_types` bit libmlx5 checks, the QP number it was given and the address handle's
//! service level, source GID index and destination GID; destroyed with the handle. The QP may
//! belong to another user context (rdma-core's `test_dc_ah_to_qp_mapping` names the server's
//! DCI from the client's handle), and destroying it leaves the mapping
//! (mlx5dv_map_ah_to_qp(3)).

use cxdirect_emu::testkit::rc::{lone_host, GID_A, MAC_A};
use cxdirect_emu::testkit::{refused, CmdFail, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::av_qp_mapping::{CreateAvQpMappingIn, QueryAvQpMappingOut};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::general_obj::{general_obj_types_bit, obj_type, GeneralObjOutCmdHdr};
use cxdirect_hw::hca::cap_type;

const MEM: usize = 4 << 20;
const PEER_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 9];

fn create(h: &mut Host, uid: u16, qpn: u32, src_addr_index: u8) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateGeneralObject, 0, 0x50);
    let mut cmd = CreateAvQpMappingIn::new(&mut input[..]).unwrap();
    cmd.set_obj_type(obj_type::AV_QP_MAPPING)
        .set_qpn(qpn)
        .set_sl_or_eth_prio(3)
        .set_src_addr_index(src_addr_index);
    for (i, byte) in PEER_GID.into_iter().enumerate() {
        cmd.set_rgid_or_rip(i, byte).unwrap();
    }
    let out = h.exec_as(uid, &input, 0x10)?;
    Ok(GeneralObjOutCmdHdr::new(&out[..]).unwrap().obj_id())
}

/// The bit libmlx5 checks is set; a mapping made by one user context names a QP another
/// created, reads back as given, outlives its QP, is refused to the other context's DESTROY,
/// and is gone after its own.
#[test]
fn a_mapping_is_kept_as_libmlx5_made_it_and_destroyed_by_its_owner() {
    let mut h = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A).0;
    let general = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let types = CmdHcaCap::new(&general[0x10..0x1010])
        .unwrap()
        .general_obj_types();
    assert_ne!(types & general_obj_types_bit(obj_type::AV_QP_MAPPING), 0);

    let (client, server) = (h.create_uctx(0).unwrap(), h.create_uctx(0).unwrap());
    let cq = h.create_cq(4);
    let qp = h.create_rc_qp(&cq, 4, 4, None);
    let id = create(&mut h, client, qp.qpn, 0).expect("CREATE of an AV_QP_MAPPING");
    h.destroy_qp(qp.qpn);
    let out = h
        .general_object_by_id(
            Opcode::QueryGeneralObject,
            obj_type::AV_QP_MAPPING,
            client,
            id,
            0x50,
        )
        .unwrap();
    let got = QueryAvQpMappingOut::new(&out[..]).unwrap();
    assert_eq!(
        (
            got.obj_id(),
            got.qpn(),
            got.sl_or_eth_prio(),
            got.src_addr_index()
        ),
        (id, qp.qpn, 3, 0)
    );
    let gid: Vec<u8> = (0..16).map(|i| got.rgid_or_rip(i).unwrap()).collect();
    assert_eq!(gid, PEER_GID);
    refused(
        h.general_object_by_id(
            Opcode::DestroyGeneralObject,
            obj_type::AV_QP_MAPPING,
            server,
            id,
            0x10,
        ),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    h.general_object_by_id(
        Opcode::DestroyGeneralObject,
        obj_type::AV_QP_MAPPING,
        client,
        id,
        0x10,
    )
    .unwrap();
    refused(
        h.general_object_by_id(
            Opcode::QueryGeneralObject,
            obj_type::AV_QP_MAPPING,
            client,
            id,
            0x50,
        ),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
}

/// A mapping naming no QP, or a source GID past the port's table, is refused and nothing is
/// kept.
#[test]
fn a_mapping_naming_what_does_not_exist_is_refused() {
    let mut h = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A).0;
    let uid = h.create_uctx(0).unwrap();
    refused(
        create(&mut h, uid, 0x12_3456, 0),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    let cq = h.create_cq(4);
    let qp = h.create_rc_qp(&cq, 4, 4, None);
    refused(
        create(&mut h, uid, qp.qpn, 200),
        CmdStatus::BadParameter,
        Syndrome::BadQpParams,
    );
    let id = create(&mut h, uid, qp.qpn, 1).unwrap();
    assert_eq!(id, 1, "the refused CREATEs took no number");
}
