//! Match definers as rdma-core's DR uses them: with definer format 22 in
//! `match_definer_format_supported`, a matcher whose mask the format takes whole (here an
//! outer source MAC) is built on one MATCH_DEFINER object (`dr_matcher_create_definer_objs`,
//! `dr_devx_create_definer`): its rules are MATCH entries naming the definer, each holding the
//! rule's 32-byte `ste_def22_v1` tag and placed at the CRC of that tag in the matcher's hash
//! table (`dr_ste_calc_hash_index`, `DR_STE_HTBL_TYPE_MATCH`); the table's anchor names the
//! definer as the next lookup type, with no byte mask.

use cxdirect_emu::testkit::dr::{domain, dr_caps};
use cxdirect_emu::testkit::dr_receive::{
    arrive_at, create_sw_table, flow_tag, forward_root_to, frame_from, plugged, receiver,
    OTHER_SMAC, SMAC,
};
use cxdirect_emu::testkit::flow_tables::{alloc_counter, query_counter};
use cxdirect_emu::testkit::ste::{self as tb, Builder};
use cxdirect_emu::testkit::tunnel_frame::tunnelled_frame;
use cxdirect_emu::testkit::{refused, CmdFail, Cq, Host};
use cxdirect_emu::Syndrome;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::definer::CreateMatchDefinerIn;
use cxdirect_hw::general_obj::{obj_type, GeneralObjInCmdHdr};

/// `DR_MATCHER_DEFINER_22`.
const DEF22: u16 = 22;
/// `DR_MATCHER_DEFINER_24`.
const DEF24: u16 = 24;
/// `DR_STE_V1_LU_TYPE_MATCH`.
const LU_MATCH: u16 = 0x0400;
/// `DR_STE_V1_LU_TYPE_DONT_CARE`.
const DONT_CARE: u16 = 0x000f;
/// Slots of the matcher's hash table.
const SLOTS: u64 = 8;

/// The `ste_def22_v1` tag of an outer source MAC (`outer_smac_47_16` at byte 24,
/// `outer_smac_15_0` at byte 28), as `dr_ste_v1_build_def22_tag` writes it.
fn smac_tag(smac: [u8; 6]) -> [u8; 32] {
    let mut t = [0u8; 32];
    t[24..30].copy_from_slice(&smac);
    t
}

/// CREATE_GENERAL_OBJECT of a match definer as `dr_devx_create_definer` fills it.
fn create_definer(h: &mut Host, format: u16, mask: [u8; 32], ctrl: u8) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateGeneralObject, 0, 0x90);
    let mut cmd = CreateMatchDefinerIn::new(&mut input[..]).expect("layout");
    cmd.set_obj_type(obj_type::MATCH_DEFINER)
        .set_format_id(format);
    for (i, &b) in mask.iter().enumerate() {
        cmd.set_match_mask(i, b).expect("in the layout");
    }
    cmd.set_select_and_high_mask(0, ctrl)
        .expect("in the layout");
    let out = h.exec(&input, 0x10)?;
    Ok(u32::from_be_bytes(out[8..12].try_into().expect("4 bytes")))
}

fn destroy_definer(h: &mut Host, id: u32) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::DestroyGeneralObject, 0, 0x10);
    GeneralObjInCmdHdr::new(&mut input[..])
        .expect("layout")
        .set_obj_type(obj_type::MATCH_DEFINER)
        .set_obj_id(id);
    h.exec(&input, 0x10).map(|_| ())
}

/// rdma-core's `dr_crc32_slice8_calc`: the reflected CRC-32 from 0 without a final inversion,
/// byte-swapped; from the standard CRC-32 by its affinity (zero-init sum of d is std(d) xor
/// std of as many zeros).
fn dr_crc32(data: &[u8]) -> u32 {
    (crc32fast::hash(data) ^ crc32fast::hash(&vec![0u8; data.len()])).swap_bytes()
}

/// A DR table with one smac matcher on definer `definer`: the table's anchor (always hit into
/// the matcher's table of [`SLOTS`] slots, next lookup type the definer), the rule at the slot
/// its tag hashes to (flow tag 0x55, counting into `counter`, hitting `dest`), every other
/// slot an always-miss entry, and the matcher's end anchor (always miss to `default`).
fn definer_table(
    base: u64,
    definer: u32,
    counter: u32,
    dest: u64,
    default: u64,
) -> Vec<(u64, Builder)> {
    tagged_definer_table(base, definer, smac_tag(SMAC), counter, dest, default)
}

/// [`definer_table`] with the rule's tag `tag`.
fn tagged_definer_table(
    base: u64,
    definer: u32,
    tag: [u8; 32],
    counter: u32,
    dest: u64,
    default: u64,
) -> Vec<(u64, Builder)> {
    let (anchor, matcher, end) = (base, base + 0x1000, base + 0x2000);
    let lu = LU_MATCH | definer as u16;
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(0, lu, matcher, SLOTS);
    let slot = u64::from(dr_crc32(&tag)) % SLOTS;
    let mut entries = vec![(anchor, a)];
    for i in 0..SLOTS {
        let mut e = Builder::init(lu, 0);
        if i == slot {
            e.match_tag(tag)
                .action(0, &tb::flow_tag(0x55))
                .counter(counter)
                .hit(dest, 1)
                .miss(end);
        } else {
            e.always_miss(end);
        }
        entries.push((matcher + 64 * i, e));
    }
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(default);
    entries.push((end, e));
    entries
}

fn smac_mask() -> [u8; 32] {
    smac_tag([0xff; 6])
}

#[test]
fn definer_formats_and_the_object_type_are_offered_with_software_steering_only() {
    for sw in [false, true] {
        let mut h = plugged(sw);
        let caps = dr_caps(&mut h);
        let formats = [0, 2, 6, 16, DEF22, DEF24, 25, 26, 28, 33]
            .iter()
            .fold(0u64, |bits, f| bits | 1 << f);
        assert_eq!(caps.definer_formats, if sw { formats } else { 0 });
        assert_eq!(h.offers_obj_type(obj_type::MATCH_DEFINER), sw);
        if !sw {
            refused(
                create_definer(&mut h, DEF22, smac_mask(), 0),
                CmdStatus::BadParameter,
                Syndrome::UnknownObjType,
            );
        }
    }
}

#[test]
fn create_takes_offered_formats_and_masks_on_projected_fields_only() {
    let mut h = plugged(true);
    let id = create_definer(&mut h, DEF22, smac_mask(), 0).expect("format 22 on smac");
    assert!(
        (0x20..0xff).contains(&id),
        "numbered above the legacy lookup types, within an entry's 8 bits: {id:#x}"
    );
    let second = create_definer(&mut h, DEF22, smac_mask(), 0).expect("a second one");
    assert_ne!(second, id);
    // Format 1 is not offered.
    refused(
        create_definer(&mut h, 1, smac_mask(), 0),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    // qp_type (bits 0x64..0x66) is not projected: refused, never ignored.
    let mut mask = smac_mask();
    mask[12] = 0x0c;
    refused(
        create_definer(&mut h, DEF22, mask, 0),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    // A caller-built selector in a predefined format.
    refused(
        create_definer(&mut h, DEF22, smac_mask(), 1),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    destroy_definer(&mut h, id).expect("destroy");
    refused(
        destroy_definer(&mut h, id),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    destroy_definer(&mut h, second).expect("destroy");
}

#[test]
fn a_matcher_on_one_definer_steers_by_source_mac() {
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let rx = receiver(&mut h);
    let counter = alloc_counter(&mut h);
    let definer = create_definer(&mut h, DEF22, smac_mask(), 0).expect("definer");
    dr.write(
        &mut h,
        definer_table(base, definer, counter, rx.tir_icm, caps.rx_drop),
    );
    let table = create_sw_table(&mut h, caps.max_ft_level - 1, base).expect("sw_owner table");
    forward_root_to(&mut h, table);

    let mut cq = rx.cq;
    let frames = [frame_from(SMAC), frame_from(OTHER_SMAC), frame_from(SMAC)];
    let got = arrive_at(&mut h, &mut cq, &frames);
    assert_eq!(
        got.cqes.len(),
        2,
        "the frames from the rule's smac reach the TIR"
    );
    for cqe in &got.cqes {
        assert_eq!(flow_tag(cqe), 0x55, "the MATCH entry's FLOW_TAG action");
    }
    assert_eq!(
        got.steer_drops, 1,
        "the other smac missed to the end anchor and the drop address"
    );
    assert_eq!(got.sw_steering_errors, 0);
    assert_eq!(query_counter(&mut h, counter).0, 2);

    // Entries naming a destroyed definer: the frame is dropped and counted, not delivered.
    destroy_definer(&mut h, definer).expect("destroy");
    let got = arrive_at(&mut h, &mut cq, &[frame_from(SMAC)]);
    assert!(got.cqes.is_empty());
    assert_eq!(got.sw_steering_errors, 1);
}

/// A domain whose software-owned table, behind the receive root, holds one rule on a definer
/// of `format` with `mask`, matching `tag` (flow tag 0x55, to a receiver's TIR, counting);
/// the rest is dropped. Returns the rule's counter and the receiver's CQ.
fn one_rule_on(h: &mut Host, format: u16, mask: [u8; 32], tag: [u8; 32]) -> (u32, Cq) {
    let mut dr = domain(h);
    let (caps, base) = (dr.caps, dr.base);
    let rx = receiver(h);
    let counter = alloc_counter(h);
    let definer = create_definer(h, format, mask, 0).expect("definer");
    dr.write(
        h,
        tagged_definer_table(base, definer, tag, counter, rx.tir_icm, caps.rx_drop),
    );
    let table = create_sw_table(h, caps.max_ft_level - 1, base).expect("sw_owner table");
    forward_root_to(h, table);
    (counter, rx.cq)
}

/// A VXLAN frame (outer IPv4/UDP to port 4789) with VNI `vni` carrying [`frame_from`]'s.
fn vxlan_frame(vni: u32) -> Vec<u8> {
    let inner = frame_from(SMAC);
    let udp_len = (8 + 8 + inner.len()) as u16;
    let mut tunnel = vec![
        0xc0,
        0x00,
        0x12,
        0xb5,
        (udp_len >> 8) as u8,
        udp_len as u8,
        0,
        0,
    ];
    let vni = vni.to_be_bytes();
    tunnel.extend_from_slice(&[0x08, 0, 0, 0, vni[1], vni[2], vni[3], 0]);
    tunnelled_frame(17, &tunnel, &inner)
}

/// A matcher on a VXLAN VNI as DPDK's mlx5 PMD builds it through rdma-core's DR: format 25,
/// `tunnel_header_1` (the VNI and the reserved byte after it, mask 0xffffff00) and the outer
/// UDP destination port. The model refused such a definer before (it did not project the
/// tunnel header words), which DPDK's testpmd met at start in the rig.
#[test]
fn a_format_25_matcher_steers_vxlan_frames_by_their_vni() {
    let mut h = plugged(true);
    let mut mask = [0u8; 32];
    mask[16..19].fill(0xff);
    mask[26..28].fill(0xff);
    let mut tag = [0u8; 32];
    tag[16..19].copy_from_slice(&[0x12, 0x34, 0x56]);
    tag[26..28].copy_from_slice(&4789u16.to_be_bytes());
    let (counter, mut cq) = one_rule_on(&mut h, 25, mask, tag);
    let frames = [
        vxlan_frame(0x12_3456),
        vxlan_frame(0x12_3457),
        frame_from(SMAC),
    ];
    let got = arrive_at(&mut h, &mut cq, &frames);
    assert_eq!(got.cqes.len(), 1, "only the rule's VNI reaches the TIR");
    assert_eq!(flow_tag(&got.cqes[0]), 0x55);
    assert_eq!(
        got.steer_drops, 2,
        "the other VNI and the plain frame missed"
    );
    assert_eq!(got.sw_steering_errors, 0);
    assert_eq!(query_counter(&mut h, counter).0, 1);
}

/// A GTP-U G-PDU (UDP port 2152, version 1, PT) with `teid`, carrying [`frame_from`]'s IPv4
/// packet.
fn gtpu_frame(teid: u32) -> Vec<u8> {
    let inner = frame_from(SMAC);
    let packet = &inner[14..];
    let udp_len = (8 + 8 + packet.len()) as u16;
    let mut tunnel = vec![0xc0, 0x00, 0x08, 0x68];
    tunnel.extend_from_slice(&udp_len.to_be_bytes());
    tunnel.extend_from_slice(&[0, 0, 0x30, 0xff]);
    tunnel.extend_from_slice(&(packet.len() as u16).to_be_bytes());
    tunnel.extend_from_slice(&teid.to_be_bytes());
    tunnelled_frame(17, &tunnel, packet)
}

/// A matcher on a GTP-U TEID as rdma-core's DR builds it for DPDK's `gtp teid is N` in a
/// software-steering group: format 28, `flex_gtpu_teid` and the outer UDP destination port.
/// The model refused such a definer before (it did not project the TEID), which the commands
/// the rig's testpmd sent showed once the model parsed GTP-U.
#[test]
fn a_format_28_matcher_steers_gtpu_frames_by_their_teid() {
    let mut h = plugged(true);
    let mut mask = [0u8; 32];
    mask[4..8].fill(0xff);
    mask[26..28].fill(0xff);
    let mut tag = [0u8; 32];
    tag[4..8].copy_from_slice(&0x0012_3456u32.to_be_bytes());
    tag[26..28].copy_from_slice(&2152u16.to_be_bytes());
    let (counter, mut cq) = one_rule_on(&mut h, 28, mask, tag);
    let frames = [
        gtpu_frame(0x12_3456),
        gtpu_frame(0x12_3457),
        vxlan_frame(0x12_3456),
    ];
    let got = arrive_at(&mut h, &mut cq, &frames);
    assert_eq!(got.cqes.len(), 1, "only the rule's TEID reaches the TIR");
    assert_eq!(
        got.steer_drops, 2,
        "the other TEID and the VXLAN frame missed"
    );
    assert_eq!(got.sw_steering_errors, 0);
    assert_eq!(query_counter(&mut h, counter).0, 1);
}

/// An IPv6/UDP frame from `src` to `dst` (64 bytes of payload, ports 0x1234 to 0x1000: not
/// RoCE's 4791).
fn ipv6_frame(src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut f = frame_from(SMAC);
    f.truncate(12);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 72, 17, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&[0x12, 0x34, 0x10, 0x00, 0, 72, 0, 0]);
    f.resize(f.len() + 64, 0x5a);
    f
}

#[test]
fn an_ipv6_matcher_chains_a_source_and_a_destination_definer() {
    // rdma-core's pair for IPv6 source and destination: a format 26 entry per rule hitting a
    // table of format 6 entries (`dr_matcher_set_definer_builders`).
    let (src, dst) = (
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0x20; 16],
    );
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let rx = receiver(&mut h);
    let mut mask = [0u8; 32];
    mask[..16].fill(0xff);
    let d26 = create_definer(&mut h, 26, mask, 0).expect("format 26");
    let d6 = create_definer(&mut h, 6, mask, 0).expect("format 6");
    let (lu26, lu6) = (LU_MATCH | d26 as u16, LU_MATCH | d6 as u16);
    let (anchor, first, second, end) = (base, base + 0x1000, base + 0x2000, base + 0x3000);
    let mut tag26 = [0u8; 32];
    tag26[..16].copy_from_slice(&src);
    let mut tag6 = [0u8; 32];
    tag6[..16].copy_from_slice(&dst);
    let slot = |tag: &[u8; 32]| u64::from(dr_crc32(tag)) % SLOTS;
    let mut entries = Vec::new();
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(0, lu26, first, SLOTS);
    entries.push((anchor, a));
    for (table, lu, tag) in [(first, lu26, tag26), (second, lu6, tag6)] {
        for i in 0..SLOTS {
            let mut e = Builder::init(lu, 0);
            if i != slot(&tag) {
                e.always_miss(end);
            } else if lu == lu26 {
                e.match_tag(tag)
                    .next_lu_type(lu6)
                    .hit(second, SLOTS)
                    .miss(end);
            } else {
                e.match_tag(tag)
                    .action(0, &tb::flow_tag(0x66))
                    .hit(rx.tir_icm, 1)
                    .miss(end);
            }
            entries.push((table + 64 * i, e));
        }
    }
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(caps.rx_drop);
    entries.push((end, e));
    dr.write(&mut h, entries);
    let table = create_sw_table(&mut h, caps.max_ft_level - 1, base).expect("sw_owner table");
    forward_root_to(&mut h, table);

    let mut other_dst = dst;
    other_dst[15] ^= 1;
    let frames = [
        ipv6_frame(src, dst),
        ipv6_frame(src, other_dst),
        ipv6_frame(dst, dst),
    ];
    let mut cq = rx.cq;
    let got = arrive_at(&mut h, &mut cq, &frames);
    assert_eq!(got.cqes.len(), 1, "only the frame matching both definers");
    assert_eq!(flow_tag(&got.cqes[0]), 0x66);
    assert_eq!((got.steer_drops, got.sw_steering_errors), (2, 0));
}

/// A matcher on the integrity bits as rdma-core's DR builds it for DPDK's integrity item
/// (`l3_ok` over IPv4: the hardware's `l3_ok` and `ipv4_checksum_ok`): format 0 with the
/// outer `ipv4_checksum_ok` and `l3_ok` bits (0xf2, 0xf6), which `dr_ste_v1_build_def0_tag`
/// fills when the flow table page's bitmask support has `outer_l4_checksum_ok`
/// (`definer_supp_checksum`). The model refused such a definer before (it did not project the
/// bits).
#[test]
fn a_format_0_matcher_on_the_integrity_bits_takes_only_good_ipv4_headers() {
    let mut h = plugged(true);
    let page = h.query_cap(cxdirect_hw::hca::cap_type::FLOW_TABLE, true);
    let caps = cxdirect_hw::caps::FlowTableNicCap::new(&page[0x10..]).expect("layout");
    assert!(
        caps.ft_field_bitmask_support_2_nic_receive()
            .outer_l4_checksum_ok(),
        "rdma-core's definer_supp_checksum"
    );
    let mut mask = [0u8; 32];
    mask[30] = 0x22;
    let (counter, mut cq) = one_rule_on(&mut h, 0, mask, mask);
    let good = frame_from(SMAC);
    let mut bad_checksum = good.clone();
    bad_checksum[24] ^= 0x5a;
    let mut not_ip = good.clone();
    not_ip[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let got = arrive_at(&mut h, &mut cq, &[good, bad_checksum, not_ip]);
    assert_eq!(got.cqes.len(), 1, "only the good header reaches the TIR");
    assert_eq!(flow_tag(&got.cqes[0]), 0x55);
    assert_eq!(got.steer_drops, 2);
    assert_eq!(got.sw_steering_errors, 0);
    assert_eq!(query_counter(&mut h, counter).0, 1);
}
