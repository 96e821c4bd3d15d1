//! Flow meters as rdma-core's `mlx5dv_dr_action_create_flow_meter` builds and uses them, in the
//! shape of its `test_flow_meter`: a FLOW_METER general object created as
//! `dr_devx_create_meter` fills it (`active`, `return_reg_id`, the destination table's type and
//! number, the parameters) and queried for the ICM address its rule's entry hits
//! (`dr_devx_query_meter`); a rule table whose rule hits the meter, and the destination table
//! with one rule per color on the return register (`metadata_reg_c_<n>` in misc2, an
//! STEERING_REGISTERS_0 lookup), each counting and delivering to its own queue (receive) or
//! letting the frame out or dropping it (transmit). `dr_devx_modify_meter` changes the
//! buckets.

use cxdirect_emu::testkit::dr::{domain, Domain};
use cxdirect_emu::testkit::dr_receive::{
    create_sw_table, forward_root_to, frame_from, plugged, receiver, smac_table, Receiver,
    DONT_CARE, SMAC,
};
use cxdirect_emu::testkit::flow_tables::{alloc_counter, destroy_table, query_counter};
use cxdirect_emu::testkit::plug::Plug;
use cxdirect_emu::testkit::ste::Builder;
use cxdirect_emu::testkit::{refused, CmdFail, Host};
use cxdirect_emu::{EmuConfig, Syndrome};
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow;
use cxdirect_hw::general_obj::{obj_type, GeneralObjInCmdHdr};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::meter::{color, modify_field, CreateFlowMeterIn, QueryFlowMeterOut};
use cxdirect_hw::qos::QosCap;

const NIC_RX: u8 = flow::FLOW_TABLE_TYPE_NIC_RX;
const NIC_TX: u8 = flow::FLOW_TABLE_TYPE_NIC_TX;
/// rdma-core's register lookup (dr_ste_v1.h `DR_STE_V1_LU_TYPE_STEERING_REGISTERS_0`): reg_c_0
/// to reg_c_3, four bytes each.
const REGISTERS_0: u16 = 0x010f;
/// The return register the tests use: the lowest `flow_meter_reg_id` offers, as
/// `get_first_flow_meter_reg_id` picks it.
const REG: u8 = 2;
/// reg_c_2's bytes in a STEERING_REGISTERS_0 tag, as a byte mask.
const REG_BYTE_MASK: u16 = 0x00f0;

/// What `dr_devx_create_meter` sends: the bucket sizes and rates as (mantissa, exponent).
#[derive(Clone, Copy)]
struct MeterAttr {
    active: bool,
    return_reg: u8,
    table_type: u8,
    table: u32,
    cbs: (u8, u8),
    cir: (u8, u8),
}

fn fill(cmd: &mut CreateFlowMeterIn<&mut [u8]>, a: &MeterAttr) {
    cmd.set_obj_type(obj_type::FLOW_METER)
        .set_active(a.active)
        .set_return_reg_id(a.return_reg)
        .set_table_type(a.table_type)
        .set_destination_table_id(a.table)
        // test_flow_meter's FlowMeterParams: valid, bucket_overflow, start color green.
        .set_valid(true)
        .set_bucket_overflow(true)
        .set_start_color(color::GREEN as u8)
        .set_meter_mode(1)
        .set_cbs_mantissa(a.cbs.0)
        .set_cbs_exponent(a.cbs.1)
        .set_cir_mantissa(a.cir.0)
        .set_cir_exponent(a.cir.1);
}

fn create_meter(h: &mut Host, a: &MeterAttr) -> Result<u32, CmdFail> {
    let mut input = Host::input(
        Opcode::CreateGeneralObject,
        0,
        CreateFlowMeterIn::<&[u8]>::SIZE,
    );
    fill(
        &mut CreateFlowMeterIn::new(&mut input[..]).expect("layout"),
        a,
    );
    let out = h.exec(&input, 0x10)?;
    Ok(u32::from_be_bytes(out[8..12].try_into().expect("4 bytes")))
}

/// `dr_devx_modify_meter`: the select bits, `active` and the whole parameters.
fn modify_meter(h: &mut Host, id: u32, select: u64, a: &MeterAttr) -> Result<(), CmdFail> {
    let mut input = Host::input(
        Opcode::ModifyGeneralObject,
        0,
        CreateFlowMeterIn::<&[u8]>::SIZE,
    );
    {
        let mut cmd = CreateFlowMeterIn::new(&mut input[..]).expect("layout");
        fill(&mut cmd, a);
        cmd.set_obj_id(id).set_modify_field_select(select);
    }
    h.exec(&input, 0x10).map(|_| ())
}

fn header(opcode: Opcode, id: u32) -> Vec<u8> {
    let mut input = Host::input(opcode, 0, 0x10);
    GeneralObjInCmdHdr::new(&mut input[..])
        .expect("layout")
        .set_obj_type(obj_type::FLOW_METER)
        .set_obj_id(id);
    input
}

fn query_meter(h: &mut Host, id: u32) -> Result<Vec<u8>, CmdFail> {
    h.exec(
        &header(Opcode::QueryGeneralObject, id),
        QueryFlowMeterOut::<&[u8]>::SIZE,
    )
}

/// The meter's ICM address, as `dr_devx_query_meter` reads it (receive and transmit agree).
fn meter_icm(h: &mut Host, id: u32) -> u64 {
    let out = query_meter(h, id).expect("QUERY_GENERAL_OBJECT");
    let q = QueryFlowMeterOut::new(&out[..]).expect("layout");
    let icm = q.sw_steering_icm_address_rx();
    assert!(icm != 0 && icm < 1 << 40 && icm % 64 == 0, "{icm:#x}");
    assert_eq!(q.sw_steering_icm_address_tx(), icm);
    icm
}

/// The destination table's entries from `base`: its anchor (always hit into a matcher on the
/// return register), one rule per `(color, counter, hit)` chained by their miss addresses as
/// colliding rules of one slot are, and the end anchor missing to `default`.
fn color_table(base: u64, rules: &[(u32, u32, u64)], default: u64) -> Vec<(u64, Builder)> {
    let (anchor, end) = (base, base + 0x1000);
    let rule_at = |i: usize| base + 0x2000 + 0x40 * i as u64;
    let mut a = Builder::init(DONT_CARE, 0);
    a.always_hit_htbl(REG_BYTE_MASK, REGISTERS_0, rule_at(0), 1);
    let mut entries = vec![(anchor, a)];
    for (i, &(c, counter, hit)) in rules.iter().enumerate() {
        let mut tag = [0u8; 16];
        tag[8..12].copy_from_slice(&c.to_be_bytes());
        let mut mask = [0u8; 16];
        mask[8..12].fill(0xff);
        let miss = if i + 1 < rules.len() {
            rule_at(i + 1)
        } else {
            end
        };
        let mut rule = Builder::init(REGISTERS_0, 0);
        rule.bit_mask(mask)
            .tag(tag)
            .counter(counter)
            .hit(hit, 1)
            .miss(miss);
        entries.push((rule_at(i), rule));
    }
    let mut e = Builder::init(DONT_CARE, 0);
    e.always_miss(default);
    entries.push((end, e));
    entries
}

/// Frames delivered to `rx` so far.
fn delivered(h: &mut Host, rx: &mut Receiver) -> usize {
    std::iter::from_fn(|| h.poll_cq(&mut rx.cq)).count()
}

#[test]
fn the_type_and_its_registers_are_offered_with_software_steering_only() {
    for sw_steering in [false, true] {
        let mut h = plugged(sw_steering);
        assert_eq!(h.offers_obj_type(obj_type::FLOW_METER), sw_steering);
        let qos = h.query_cap(cap_type::QOS, true);
        let q = QosCap::new(&qos[0x10..]).expect("layout");
        assert_eq!(q.flow_meter_old(), sw_steering);
        assert_eq!(q.flow_meter(), sw_steering);
        // get_first_flow_meter_reg_id: the lowest register offered.
        let regs = q.flow_meter_reg_id();
        assert_eq!(
            if sw_steering {
                regs.trailing_zeros()
            } else {
                8
            },
            u32::from(if sw_steering { REG } else { 8 })
        );
    }
    let mut h = plugged(false);
    let table = cxdirect_emu::testkit::flow_tables::create_table(&mut h, 1, 0, None)
        .expect("CREATE_FLOW_TABLE");
    refused(
        create_meter(
            &mut h,
            &MeterAttr {
                active: true,
                return_reg: REG,
                table_type: NIC_RX,
                table,
                cbs: (1, 8),
                cir: (1, 31),
            },
        ),
        CmdStatus::BadParameter,
        Syndrome::UnknownObjType,
    );
}

#[test]
fn received_frames_are_colored_by_the_committed_bucket_and_its_rate() {
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let level = caps.max_ft_level - 1;
    let mut queues = [receiver(&mut h), receiver(&mut h), receiver(&mut h)];
    let counters = [
        alloc_counter(&mut h),
        alloc_counter(&mut h),
        alloc_counter(&mut h),
    ];
    let colors = [color::GREEN, color::YELLOW, color::RED];
    let rules: Vec<_> = (0..3)
        .map(|i| (colors[i], counters[i], queues[i].tir_icm))
        .collect();
    let colored_base = base + 0x8000;
    dr.write(&mut h, color_table(colored_base, &rules, caps.rx_drop));
    let colored = create_sw_table(&mut h, level, colored_base).expect("destination table");
    // 256 bytes of committed burst and a rate of 10^9 / 2^31 bytes a second (none to speak
    // of while the test runs).
    let frame = frame_from(SMAC);
    let mut attr = MeterAttr {
        active: true,
        return_reg: REG,
        table_type: NIC_RX,
        table: colored,
        cbs: (1, 8),
        cir: (1, 31),
    };
    let meter = create_meter(&mut h, &attr).expect("CREATE_GENERAL_OBJECT of a flow meter");
    let icm = meter_icm(&mut h, meter);
    let out = query_meter(&mut h, meter).expect("QUERY");
    let q = QueryFlowMeterOut::new(&out[..]).expect("layout");
    assert_eq!(
        (
            q.active(),
            q.return_reg_id(),
            q.table_type(),
            q.destination_table_id()
        ),
        (true, REG, NIC_RX, colored)
    );
    assert_eq!(
        (
            q.valid(),
            q.bucket_overflow(),
            q.start_color(),
            q.meter_mode()
        ),
        (true, true, color::GREEN as u8, 1)
    );
    assert_eq!(
        (
            q.cbs_mantissa(),
            q.cbs_exponent(),
            q.cir_mantissa(),
            q.cir_exponent()
        ),
        (1, 8, 1, 31)
    );
    let rule_counter = alloc_counter(&mut h);
    dr.write(&mut h, smac_table(base, 0, rule_counter, icm, caps.rx_drop));
    let table = create_sw_table(&mut h, level, base).expect("rule table");
    forward_root_to(&mut h, table);

    // 256, 192, 128, 64 and 0 bytes left are not below zero: five green; the sixth finds the
    // committed bucket below zero and the excess bucket (of size 0, full) at zero: yellow;
    // the rest red.
    let n = 256 / frame.len() + 1;
    h.arrive(&vec![frame.clone(); n + 3]);
    let got: Vec<usize> = queues.iter_mut().map(|q| delivered(&mut h, q)).collect();
    assert_eq!(got, vec![n, 1, 2], "green, yellow, red");
    for (i, &c) in counters.iter().enumerate() {
        assert_eq!(query_counter(&mut h, c).0, got[i] as u64);
    }
    assert_eq!(query_counter(&mut h, rule_counter).0, n as u64 + 3);

    // A committed rate of 10^9 bytes a second refills the 256 bytes within a microsecond.
    attr.cir = (1, 0);
    modify_meter(&mut h, meter, modify_field::CIR, &attr).expect("MODIFY_GENERAL_OBJECT");
    let out = query_meter(&mut h, meter).expect("QUERY");
    let q = QueryFlowMeterOut::new(&out[..]).expect("layout");
    assert_eq!((q.cir_mantissa(), q.cir_exponent()), (1, 0));
    assert_eq!(
        (q.cbs_mantissa(), q.cbs_exponent()),
        (1, 8),
        "CBS unchanged"
    );
    std::thread::sleep(std::time::Duration::from_millis(2));
    h.arrive(std::slice::from_ref(&frame));
    assert_eq!(delivered(&mut h, &mut queues[0]), 1, "green again");

    // Deactivated, the meter writes no color: reg_c_2 stays 0, which is red's value.
    modify_meter(
        &mut h,
        meter,
        modify_field::ACTIVE,
        &MeterAttr {
            active: false,
            ..attr
        },
    )
    .expect("MODIFY active");
    h.arrive(std::slice::from_ref(&frame));
    assert_eq!(delivered(&mut h, &mut queues[2]), 1);
    assert_eq!(delivered(&mut h, &mut queues[0]), 0);

    // The destination table is held while the meter lives; afterwards its address drops.
    refused(
        destroy_table(&mut h, colored),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    h.exec(&header(Opcode::DestroyGeneralObject, meter), 0x10)
        .expect("DESTROY_GENERAL_OBJECT");
    refused(
        query_meter(&mut h, meter),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    let before = h.dev.counters();
    h.arrive(&[frame]);
    assert!(queues
        .iter_mut()
        .map(|q| delivered(&mut h, q))
        .all(|n| n == 0));
    assert_eq!(h.dev.counters().rx_steer_drops - before.rx_steer_drops, 1);
    destroy_table(&mut h, colored).expect("released");
}

/// A transmit domain's color table: green out, red dropped, each counted.
fn transmit_colors(p: &mut Plug, dom: &mut Domain, at: u64) -> (u32, [u32; 2]) {
    let caps = dom.caps;
    let counters = [alloc_counter(&mut p.h), alloc_counter(&mut p.h)];
    dom.write(
        &mut p.h,
        color_table(
            at,
            &[
                (color::GREEN, counters[0], caps.tx_allow),
                (color::RED, counters[1], caps.tx_drop),
            ],
            caps.tx_drop,
        ),
    );
    let table =
        cxdirect_emu::testkit::dr::create_sw_table(&mut p.h, NIC_TX, caps.max_ft_level - 1, at)
            .expect("transmit destination table");
    (table, counters)
}

#[test]
fn sent_frames_are_colored_on_transmit_and_red_ones_dropped() {
    let mut p = Plug::new(EmuConfig::default());
    let mut dom = domain(&mut p.h);
    let caps = dom.caps;
    let at = dom.base + 0x8000;
    let (colored, [green, red]) = transmit_colors(&mut p, &mut dom, at);
    let meter = create_meter(
        &mut p.h,
        &MeterAttr {
            active: true,
            return_reg: REG,
            table_type: NIC_TX,
            table: colored,
            // No committed burst: one frame while the bucket is at zero, then red, as
            // test_flow_meter's meter (cbs_mantissa 0) colors a fast sender.
            cbs: (0, 0),
            cir: (1, 31),
        },
    )
    .expect("CREATE on a transmit table");
    let icm = meter_icm(&mut p.h, meter);
    let rule_counter = alloc_counter(&mut p.h);
    dom.write(
        &mut p.h,
        smac_table(dom.base, 0, rule_counter, icm, caps.tx_allow),
    );
    dom.transmit_table(&mut p.h);
    let frame = frame_from(SMAC);
    assert_eq!(p.send(&frame), Some(frame.clone()), "green: out");
    // The excess bucket (size 0) takes the second; its color, yellow, has no rule: the end
    // anchor drops it.
    assert_eq!(p.send(&frame), None, "yellow: no rule, dropped");
    assert_eq!(p.send(&frame), None, "red: dropped");
    assert_eq!(p.send(&frame), None, "red: dropped");
    assert_eq!(query_counter(&mut p.h, green).0, 1);
    assert_eq!(query_counter(&mut p.h, red).0, 2);
    assert_eq!(query_counter(&mut p.h, rule_counter).0, 4);
}

#[test]
fn bad_meters_are_refused_and_change_nothing() {
    let mut h = plugged(true);
    let rx_table = cxdirect_emu::testkit::flow_tables::create_table(&mut h, 1, 0, None)
        .expect("CREATE_FLOW_TABLE");
    let good = MeterAttr {
        active: true,
        return_reg: REG,
        table_type: NIC_RX,
        table: rx_table,
        cbs: (1, 8),
        cir: (1, 6),
    };
    let bad = [
        // reg_c_0 and reg_c_1 are not offered, nor registers past reg_c_7.
        MeterAttr {
            return_reg: 0,
            ..good
        },
        MeterAttr {
            return_reg: 9,
            ..good
        },
        // FDB tables are not modelled.
        MeterAttr {
            table_type: flow::FLOW_TABLE_TYPE_FDB,
            ..good
        },
    ];
    for attr in &bad {
        refused(
            create_meter(&mut h, attr),
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams,
        );
    }
    for attr in [
        MeterAttr {
            table: 0x00ab_cdef,
            ..good
        },
        // A receive table named as a transmit one.
        MeterAttr {
            table_type: NIC_TX,
            ..good
        },
    ] {
        refused(
            create_meter(&mut h, &attr),
            CmdStatus::BadResource,
            Syndrome::NoSuchObject,
        );
    }
    let meter = create_meter(&mut h, &good).expect("a good meter");
    // A select bit past EIR names nothing MODIFY may change: refused, nothing changed.
    refused(
        modify_meter(
            &mut h,
            meter,
            modify_field::CIR | 1 << 5,
            &MeterAttr {
                cir: (9, 9),
                ..good
            },
        ),
        CmdStatus::BadParameter,
        Syndrome::BadSteeringParams,
    );
    let out = query_meter(&mut h, meter).expect("QUERY");
    let q = QueryFlowMeterOut::new(&out[..]).expect("layout");
    assert_eq!((q.cir_mantissa(), q.cir_exponent()), (1, 6));
    refused(
        modify_meter(&mut h, meter + 1, modify_field::CIR, &good),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
}
