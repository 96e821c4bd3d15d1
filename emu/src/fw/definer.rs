//! Match definers: CREATE and DESTROY_GENERAL_OBJECT of type MATCH_DEFINER. A definer is a
//! predefined format and a mask over the format's 32-byte tag; software steering entries name
//! it by its number, and the walk projects packets through it (`sw_steering::definer`).
//!
//! Read from rdma-core's dr_matcher.c and dr_devx.c: when `match_definer_format_supported`
//! offers a format that takes a matcher's whole mask, `dr_matcher_create_definer_objs` sends
//! CREATE_GENERAL_OBJECT with the format and the mask in the format's tag layout
//! (`dr_devx_create_definer`: `format_id` and `match_mask_dw_7_0`, the rest zero) and puts the
//! object's number in the low byte of the entries' lookup type; destroying the matcher
//! destroys the definer after its rules. Neither rdma-core nor Linux queries or modifies one.
//!
//! The model takes the predefined formats it offers (0, 2, 6, 16, 22, 24, 25, 26, 28, 33) and refuses a mask that selects
//! a field it does not project, or a selector of a caller-built format, rather than ignore it.
//! Steering entries live in ICM, out of the model's sight: destroying a definer entries still
//! name is accepted, and a walk reaching such an entry drops the packet.

use super::Syndrome;
use super::{bad_param, bad_res, input_as, output_as, table_full, CmdError, CmdResult, Core};
use crate::objects::MatchDefiner;
use crate::sw_steering::definer::unprojected_mask;
use cxdirect_hw::definer::{CreateMatchDefinerIn, DEFINER_TAG_BYTES};
use cxdirect_hw::general_obj::{GeneralObjInCmdHdr, GeneralObjOutCmdHdr};

fn definer_param(what: &'static str) -> CmdError {
    bad_param(Syndrome::BadSteeringParams, what)
}

/// CREATE_GENERAL_OBJECT of a match definer: an offered predefined format, a mask within the
/// fields the model projects for it, no caller-built selectors.
pub(crate) fn create(core: &mut Core, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cmd = input_as!(CreateMatchDefinerIn<&[u8]>, input);
    let format = cmd.format_id();
    let offered = core.hca.caps.general().match_definer_format_supported();
    if format >= 64 || offered & (1 << format) == 0 {
        return Err(definer_param(
            "match definer format not offered in match_definer_format_supported",
        ));
    }
    if cmd.modify_field_select() != 0 {
        return Err(definer_param(
            "CREATE of a match definer takes no modify_field_select",
        ));
    }
    let mut mask = [0u8; DEFINER_TAG_BYTES];
    for (i, byte) in mask.iter_mut().enumerate() {
        *byte = cmd.match_mask(i).map_err(|_| bad_input())?;
    }
    for i in 0..DEFINER_TAG_BYTES {
        if cmd.select_and_high_mask(i).map_err(|_| bad_input())? != 0 {
            return Err(definer_param(
                "a predefined definer format takes its mask in match_mask_dw_7_0 alone: the \
                 control words and match_mask_dw_11_8 must be zero",
            ));
        }
    }
    if let Some(field) = unprojected_mask(format, &mask) {
        return Err(bad_param(Syndrome::BadSteeringParams, field));
    }
    let id = core
        .res
        .definers
        .insert(MatchDefiner { format, mask })
        .ok_or(table_full("match definer table full (223 definers)"))?;
    output_as!(GeneralObjOutCmdHdr<&mut [u8]>, output).set_obj_id(id);
    Ok(())
}

/// DESTROY_GENERAL_OBJECT of a match definer.
pub(crate) fn destroy(core: &mut Core, input: &[u8]) -> CmdResult {
    let id = input_as!(GeneralObjInCmdHdr<&[u8]>, input).obj_id();
    core.res
        .definers
        .remove(id)
        .map(|_| ())
        .ok_or(bad_res("no match definer of that number"))
}

fn bad_input() -> CmdError {
    definer_param("CREATE of a match definer shorter than its layout")
}
