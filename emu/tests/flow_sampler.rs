//! Flow samplers as rdma-core's `mlx5dv_dr_action_create_flow_sampler` builds and uses them on
//! a NIC receive domain: a sample table made as `dr_action_create_sampler_term_tbl` makes it
//! (a firmware termination table at `max_ft_level - 1`, one always-hit entry forwarding to a
//! TIR and counting), a FLOW_SAMPLER general object created as `dr_devx_create_flow_sampler`
//! fills it (`ignore_flow_level`, the ratio, both table numbers) and queried for the ICM
//! address its rule's entry hits (`dr_devx_query_flow_sampler`); every frame goes on to the
//! default table, one in `sample_ratio` is also copied to the sample table.

use cxdirect_emu::testkit::dr::{domain, dr_caps};
use cxdirect_emu::testkit::dr_receive::{
    create_sw_table, forward_root_to, frame_from, plugged, receiver, smac_table, SMAC,
};
use cxdirect_emu::testkit::flow_tables::{
    alloc_counter, destroy_table, query_counter, set_entry, smac_group,
};
use cxdirect_emu::testkit::{refused, CmdFail, Host};
use cxdirect_emu::Syndrome;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow;
use cxdirect_hw::general_obj::{obj_type, GeneralObjInCmdHdr};
use cxdirect_hw::sampler::{CreateFlowSamplerIn, QueryFlowSamplerOut};

const NIC_RX: u8 = flow::FLOW_TABLE_TYPE_NIC_RX;

/// `dr_action_create_sampler_term_tbl`: a termination table at `level` whose one entry (no
/// match criteria) forwards to TIR `tirn` and counts in `counter`.
fn sample_table(h: &mut Host, level: u8, tirn: u32, counter: u32) -> u32 {
    let mut input = Host::input(Opcode::CreateFlowTable, 0, 0x40);
    {
        let mut cmd = flow::CreateFlowTableIn::new(&mut input[..]).expect("layout");
        cmd.set_table_type(NIC_RX);
        cmd.flow_table_context_mut()
            .set_termination_table(true)
            .set_level(level);
    }
    let out = h.exec(&input, 16).expect("CREATE_FLOW_TABLE");
    let table = flow::CreateFlowTableOut::new(&out[..])
        .expect("layout")
        .table_id();
    let group = smac_group(h, NIC_RX, table, 0, false).expect("CREATE_FLOW_GROUP");
    set_entry(
        h,
        NIC_RX,
        table,
        (group, 0),
        None,
        flow::FLOW_CONTEXT_ACTION_FWD_DEST | flow::FLOW_CONTEXT_ACTION_COUNT,
        Some((flow::FLOW_DESTINATION_TYPE_TIR, tirn)),
        Some(counter),
    )
    .expect("SET_FLOW_TABLE_ENTRY");
    table
}

/// What `dr_devx_create_flow_sampler` sends.
#[derive(Clone, Copy)]
struct SamplerAttr {
    table_type: u8,
    level: u8,
    ignore_flow_level: bool,
    sample_ratio: u32,
    sample_table: u32,
    default_table: u32,
}

fn create_sampler(h: &mut Host, a: &SamplerAttr) -> Result<u32, CmdFail> {
    let mut input = Host::input(Opcode::CreateGeneralObject, 0, 0x38);
    CreateFlowSamplerIn::new(&mut input[..])
        .expect("layout")
        .set_obj_type(obj_type::FLOW_SAMPLER)
        .set_table_type(a.table_type)
        .set_level(a.level)
        .set_ignore_flow_level(a.ignore_flow_level)
        .set_sample_ratio(a.sample_ratio)
        .set_sample_table_id(a.sample_table)
        .set_default_table_id(a.default_table);
    let out = h.exec(&input, 0x10)?;
    Ok(u32::from_be_bytes(out[8..12].try_into().expect("4 bytes")))
}

/// The general object header of a flow sampler command (QUERY, DESTROY).
fn header(opcode: Opcode, id: u32) -> Vec<u8> {
    let mut input = Host::input(opcode, 0, 0x10);
    GeneralObjInCmdHdr::new(&mut input[..])
        .expect("layout")
        .set_obj_type(obj_type::FLOW_SAMPLER)
        .set_obj_id(id);
    input
}

fn query_sampler(h: &mut Host, id: u32) -> Result<Vec<u8>, CmdFail> {
    h.exec(&header(Opcode::QueryGeneralObject, id), 0x38)
}

fn destroy_sampler(h: &mut Host, id: u32) -> Result<(), CmdFail> {
    h.exec(&header(Opcode::DestroyGeneralObject, id), 0x10)
        .map(|_| ())
}

#[test]
fn the_type_is_offered_with_software_steering_only() {
    for sw_steering in [false, true] {
        let mut h = plugged(sw_steering);
        assert_eq!(h.offers_obj_type(obj_type::FLOW_SAMPLER), sw_steering);
        // The receive tables' `log_max_ft_sampler_num`, which DPDK's mlx5 PMD reads before it
        // offers its `sample` action (`sampler_en`); none on transmit, where the model
        // samples nothing.
        let page = h.query_cap(cxdirect_hw::hca::cap_type::FLOW_TABLE, true);
        let f = cxdirect_hw::caps::FlowTableNicCap::new(&page[0x10..]).expect("layout");
        let rx = f
            .flow_table_properties_nic_receive()
            .log_max_ft_sampler_num();
        assert_eq!(rx > 0, sw_steering);
        assert_eq!(
            f.flow_table_properties_nic_transmit()
                .log_max_ft_sampler_num(),
            0
        );
    }
    let mut h = plugged(false);
    let table = cxdirect_emu::testkit::flow_tables::create_table(&mut h, 1, 0, None)
        .expect("CREATE_FLOW_TABLE");
    let attr = SamplerAttr {
        table_type: NIC_RX,
        level: 0,
        ignore_flow_level: false,
        sample_ratio: 2,
        sample_table: table,
        default_table: table,
    };
    refused(
        create_sampler(&mut h, &attr),
        CmdStatus::BadParameter,
        Syndrome::UnknownObjType,
    );
}

#[test]
fn every_frame_goes_on_to_the_default_table_and_one_in_the_ratio_is_copied() {
    let mut h = plugged(true);
    let mut dr = domain(&mut h);
    let (caps, base) = (dr.caps, dr.base);
    let level = caps.max_ft_level - 1;
    let (sampled, passed) = (receiver(&mut h), receiver(&mut h));
    let (sample_counter, default_counter, rule_counter) = (
        alloc_counter(&mut h),
        alloc_counter(&mut h),
        alloc_counter(&mut h),
    );
    let sample = sample_table(&mut h, level, sampled.tirn, sample_counter);
    // The default table: a domain table whose rule counts and delivers to `passed`.
    let default_base = base + 0x4000;
    dr.write(
        &mut h,
        smac_table(
            default_base,
            0,
            default_counter,
            passed.tir_icm,
            caps.rx_drop,
        ),
    );
    let default = create_sw_table(&mut h, level, default_base).expect("default table");
    let sampler = create_sampler(
        &mut h,
        &SamplerAttr {
            table_type: NIC_RX,
            level,
            ignore_flow_level: true,
            sample_ratio: 4,
            sample_table: sample,
            default_table: default,
        },
    )
    .expect("CREATE_GENERAL_OBJECT of a flow sampler");
    let out = query_sampler(&mut h, sampler).expect("QUERY_GENERAL_OBJECT");
    let q = QueryFlowSamplerOut::new(&out[..]).expect("layout");
    let icm = q.sw_steering_icm_address_rx();
    assert!(icm != 0 && icm < 1 << 40 && icm % 64 == 0, "{icm:#x}");
    assert_eq!(q.sw_steering_icm_address_tx(), icm);
    assert_eq!(
        (q.sample_ratio(), q.sample_table_id(), q.default_table_id()),
        (4, sample, default)
    );
    assert!(q.ignore_flow_level());
    // The rule's table: its smac rule hits the sampler.
    dr.write(&mut h, smac_table(base, 0, rule_counter, icm, caps.rx_drop));
    let table = create_sw_table(&mut h, level, base).expect("rule table");
    forward_root_to(&mut h, table);

    let before = h.dev.counters();
    h.arrive(&vec![frame_from(SMAC); 9]);
    let mut passed_cq = passed.cq;
    assert_eq!(
        std::iter::from_fn(|| h.poll_cq(&mut passed_cq)).count(),
        9,
        "every frame reaches the default table's TIR"
    );
    let mut cq = sampled.cq;
    assert_eq!(
        std::iter::from_fn(|| h.poll_cq(&mut cq)).count(),
        2,
        "the 4th and 8th frames are copied to the sample table's TIR"
    );
    assert_eq!(query_counter(&mut h, rule_counter).0, 9);
    assert_eq!(query_counter(&mut h, default_counter).0, 9);
    assert_eq!(query_counter(&mut h, sample_counter).0, 2);
    let after = h.dev.counters();
    assert_eq!(after.rx_steer_drops, before.rx_steer_drops);
    assert_eq!(after.rx_sw_steering_errors, before.rx_sw_steering_errors);

    // The tables are held while the sampler lives; afterwards its address drops.
    refused(
        destroy_table(&mut h, sample),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    destroy_sampler(&mut h, sampler).expect("DESTROY_GENERAL_OBJECT");
    refused(
        query_sampler(&mut h, sampler),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    h.arrive(&[frame_from(SMAC)]);
    assert!(
        h.poll_cq(&mut passed_cq).is_none(),
        "a destroyed sampler drops"
    );
    assert_eq!(h.dev.counters().rx_steer_drops - after.rx_steer_drops, 1);
}

#[test]
fn bad_samplers_are_refused() {
    let mut h = plugged(true);
    let level = dr_caps(&mut h).max_ft_level - 1;
    let rx = receiver(&mut h);
    let counter = alloc_counter(&mut h);
    let sample = sample_table(&mut h, level, rx.tirn, counter);
    let good = SamplerAttr {
        table_type: NIC_RX,
        level,
        ignore_flow_level: true,
        sample_ratio: 2,
        sample_table: sample,
        default_table: sample,
    };
    let bad = [
        SamplerAttr {
            sample_ratio: 0,
            ..good
        },
        SamplerAttr {
            table_type: flow::FLOW_TABLE_TYPE_NIC_TX,
            ..good
        },
        // Tables at the sampler's own level, without ignore_flow_level.
        SamplerAttr {
            ignore_flow_level: false,
            ..good
        },
    ];
    for attr in &bad {
        refused(
            create_sampler(&mut h, attr),
            CmdStatus::BadParameter,
            Syndrome::BadSteeringParams,
        );
    }
    refused(
        create_sampler(
            &mut h,
            &SamplerAttr {
                default_table: 0x00ab_cdef,
                ..good
            },
        ),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    // Deeper tables need no ignore_flow_level.
    create_sampler(
        &mut h,
        &SamplerAttr {
            level: level - 1,
            ignore_flow_level: false,
            ..good
        },
    )
    .expect("tables deeper than the sampler");
}
