//! Flow meters: CREATE, MODIFY, QUERY and DESTROY_GENERAL_OBJECT of type FLOW_METER. A meter
//! names one flow table: every packet a steering entry sends to the meter's ICM address is
//! colored by the meter's buckets ([`crate::objects::meter`]), the color written into
//! `reg_c_<return_reg_id>`, and goes on to that table (`crate::steering` and
//! `crate::transmit_steering` carry it on; the ICM address is `sw_steering::terminals`'s).
//!
//! Read from rdma-core's dr_action.c and dr_devx.c: `mlx5dv_dr_action_create_flow_meter`
//! refuses a root destination table and a domain without software steering, then
//! `dr_devx_create_meter` sends the object with `active`, `return_reg_id` (the caller's
//! `reg_c_index`), the destination table's type and number and the caller's parameters, and
//! `dr_devx_query_meter` reads `sw_steering_icm_address_rx` and `_tx`, which the action's rules
//! hit (`DR_ACTION_TYP_METER`); `dr_devx_modify_meter` sends MODIFY_GENERAL_OBJECT with the
//! caller's `modify_field_select`, `active` and parameters. DPDK's mlx5 PMD drives the same
//! object through these calls (`mlx5_flow_meter.c`), with the fields its
//! `MLX5_FLOW_METER_OBJ_MODIFY_FIELD_*` bits name.
//!
//! Meters are modelled on NIC receive and transmit tables (FDB tables are not modelled);
//! `return_reg_id` must be one of the registers `flow_meter_reg_id` offers.

use super::steering::{table_of, table_of_mut};
use super::{
    bad_param, bad_res, input_as, output_as, table_full, CmdError, CmdResult, Core, Syndrome,
};
use crate::objects::meter::{FlowMeter, MeterParams};
use cxdirect_hw::flow::{FLOW_TABLE_TYPE_NIC_RX, FLOW_TABLE_TYPE_NIC_TX};
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};
use cxdirect_hw::meter::{modify_field, CreateFlowMeterIn, QueryFlowMeterOut};
use std::time::Instant;

fn steering_param(what: &'static str) -> CmdError {
    bad_param(Syndrome::BadSteeringParams, what)
}

fn params_of(cmd: &CreateFlowMeterIn<&[u8]>) -> MeterParams {
    MeterParams {
        valid: cmd.valid(),
        bucket_overflow: cmd.bucket_overflow(),
        start_color: cmd.start_color(),
        both_buckets_on_green: cmd.both_buckets_on_green(),
        meter_mode: cmd.meter_mode(),
        cbs_exponent: cmd.cbs_exponent(),
        cbs_mantissa: cmd.cbs_mantissa(),
        cir_exponent: cmd.cir_exponent(),
        cir_mantissa: cmd.cir_mantissa(),
        ebs_exponent: cmd.ebs_exponent(),
        ebs_mantissa: cmd.ebs_mantissa(),
        eir_exponent: cmd.eir_exponent(),
        eir_mantissa: cmd.eir_mantissa(),
    }
}

/// CREATE_GENERAL_OBJECT of a flow meter: the destination table must exist with the meter's
/// type (NIC receive or transmit) and the return register must be offered; the table is held
/// while the meter lives.
pub(crate) fn create(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateFlowMeterIn<&[u8]>, input);
    let table_type = cmd.table_type();
    if table_type != FLOW_TABLE_TYPE_NIC_RX && table_type != FLOW_TABLE_TYPE_NIC_TX {
        return Err(steering_param(
            "flow meters are modelled on NIC receive and transmit tables only (table_type 0, 1)",
        ));
    }
    let return_reg = cmd.return_reg_id();
    let offered = core.hca.caps.qos().flow_meter_reg_id();
    if return_reg > 7 || offered & (1 << return_reg) == 0 {
        return Err(steering_param(
            "a flow meter's return_reg_id must name a register flow_meter_reg_id offers",
        ));
    }
    let table = cmd.destination_table_id();
    table_of(core, table, table_type)?;
    let meter = FlowMeter::new(
        cmd.active(),
        return_reg,
        (table_type, table),
        params_of(&cmd),
        Instant::now(),
    );
    let id = core
        .res
        .meters
        .insert(meter)
        .ok_or(table_full("flow meter table full"))?;
    table_of_mut(core, table, table_type)?.referenced += 1;
    output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
    Ok(())
}

/// MODIFY_GENERAL_OBJECT of a flow meter: `active` and the bucket sizes and rates that
/// `modify_field_select` names; the rest stays. A select bit the model does not know is
/// refused, and nothing changes.
pub(crate) fn modify(core: &mut Core, input: &[u8]) -> CmdResult {
    let cmd = input_as!(CreateFlowMeterIn<&[u8]>, input);
    let select = cmd.modify_field_select();
    let known = modify_field::ACTIVE
        | modify_field::CBS
        | modify_field::CIR
        | modify_field::EBS
        | modify_field::EIR;
    if select & !known != 0 {
        return Err(steering_param(
            "a flow meter's modify_field_select names a field that cannot change",
        ));
    }
    let meter = core.res.meters.get_mut(cmd.obj_id()).ok_or(no_meter())?;
    let new = params_of(&cmd);
    let mut params = meter.params;
    if select & modify_field::CBS != 0 {
        (params.cbs_exponent, params.cbs_mantissa) = (new.cbs_exponent, new.cbs_mantissa);
    }
    if select & modify_field::CIR != 0 {
        (params.cir_exponent, params.cir_mantissa) = (new.cir_exponent, new.cir_mantissa);
    }
    if select & modify_field::EBS != 0 {
        (params.ebs_exponent, params.ebs_mantissa) = (new.ebs_exponent, new.ebs_mantissa);
    }
    if select & modify_field::EIR != 0 {
        (params.eir_exponent, params.eir_mantissa) = (new.eir_exponent, new.eir_mantissa);
    }
    if select & modify_field::ACTIVE != 0 {
        meter.active = cmd.active();
    }
    meter.set_params(params);
    Ok(())
}

/// QUERY_GENERAL_OBJECT of a flow meter: as CREATE and MODIFY left it, with the ICM address
/// its entries hit (the same address both ways).
pub(crate) fn query(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    let meter = core.res.meters.get(id).ok_or(no_meter())?;
    let address = crate::sw_steering::terminals::meter_address(id);
    let p = meter.params;
    output_as!(QueryFlowMeterOut<&mut [u8]>, output)
        .set_obj_id(id)
        .set_active(meter.active)
        .set_return_reg_id(meter.return_reg)
        .set_table_type(meter.table_type)
        .set_destination_table_id(meter.destination_table)
        .set_valid(p.valid)
        .set_bucket_overflow(p.bucket_overflow)
        .set_start_color(p.start_color)
        .set_both_buckets_on_green(p.both_buckets_on_green)
        .set_meter_mode(p.meter_mode)
        .set_cbs_exponent(p.cbs_exponent)
        .set_cbs_mantissa(p.cbs_mantissa)
        .set_cir_exponent(p.cir_exponent)
        .set_cir_mantissa(p.cir_mantissa)
        .set_ebs_exponent(p.ebs_exponent)
        .set_ebs_mantissa(p.ebs_mantissa)
        .set_eir_exponent(p.eir_exponent)
        .set_eir_mantissa(p.eir_mantissa)
        .set_sw_steering_icm_address_rx(address)
        .set_sw_steering_icm_address_tx(address);
    Ok(())
}

/// DESTROY_GENERAL_OBJECT of a flow meter: releases its table. Entries still hitting its
/// address afterwards drop what reaches it.
pub(crate) fn destroy(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    let meter = core.res.meters.remove(id).ok_or(no_meter())?;
    if let Some(t) = core.res.flow_tables.get_mut(meter.destination_table) {
        t.referenced = t.referenced.saturating_sub(1);
    }
    Ok(())
}

fn no_meter() -> CmdError {
    bad_res("no flow meter of that number")
}
