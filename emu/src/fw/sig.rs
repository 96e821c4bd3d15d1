//! Protection signature variables: CREATE_PSV and DESTROY_PSV, as Linux's
//! `mlx5_core_create_psv` (two per integrity key, memory and wire, from
//! `mlx5_alloc_integrity_descs`) and `mlx5_core_destroy_psv` send them. SET_PSV WQEs load them
//! and signature keys name them in their BSF (`crate::signature`).

use super::{bad_param, bad_res, input_as, output_as, table_full, CmdResult, Core, Syndrome};
use crate::objects::signature::Psv;
use cxdirect_hw::sig::{CreatePsvIn, CreatePsvOut, DestroyPsvIn, MAX_PSVS};

/// CREATE_PSV: `num_psv` (1 to 4) PSVs in protection domain `pd`, all or none.
pub(crate) fn create_psv(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreatePsvIn<&[u8]>, input);
    let (count, pd) = (cmd.num_psv(), cmd.pd());
    if count == 0 || count > MAX_PSVS {
        return Err(bad_param(
            Syndrome::BadMkeyParams,
            "CREATE_PSV makes one to four PSVs",
        ));
    }
    if !core.res.pds.contains(pd) {
        return Err(bad_res("PSV protection domain does not exist"));
    }
    let mut made = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let psv = Psv {
            pd,
            ..Psv::default()
        };
        match core.res.psvs.insert(psv) {
            Some(index) => made.push(index),
            None => {
                for index in made {
                    core.res.psvs.remove(index);
                }
                return Err(table_full("PSV table full"));
            }
        }
    }
    let mut out = output_as!(CreatePsvOut<&mut [u8]>, output);
    let index = |i: usize| made.get(i).copied().unwrap_or(0);
    out.set_psv0_index(index(0))
        .set_psv1_index(index(1))
        .set_psv2_index(index(2))
        .set_psv3_index(index(3));
    Ok(())
}

/// DESTROY_PSV.
pub(crate) fn destroy_psv(core: &mut Core, input: &[u8]) -> CmdResult {
    let psvn = input_as!(DestroyPsvIn<&[u8]>, input).psvn();
    core.res.psvs.remove(psvn).ok_or(bad_res("no such PSV"))?;
    Ok(())
}
