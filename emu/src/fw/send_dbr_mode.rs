//! CREATE_QP's `send_dbr_mode`: whether a QP's send ring is counted by its doorbell record or,
//! without one, by the doorbells themselves (`engine::send_counter`). The HCA_CAP_2 page offers
//! the doorbell-less register (`send_dbr_mode_no_dbr_ext`) for up to
//! `2^log_max_send_dbr_less_qp_sq` QPs, and not the counter kept inside the device
//! (`send_dbr_mode_no_dbr_int` 0).

use super::{bad_param, CmdError, Core, Syndrome};
use crate::objects::limits::LOG_MAX_SEND_DBR_LESS_QP;
use crate::objects::rc::SendCounter;
use cxdirect_hw::cmd::CmdStatus;
use cxdirect_hw::qp::{send_dbr_mode, Qpc};

/// How the QP `ctx` creates counts its send ring; `has_sq` says whether it has one.
pub(super) fn at_create(
    core: &Core,
    ctx: &Qpc<&[u8]>,
    has_sq: bool,
) -> Result<SendCounter, CmdError> {
    match ctx.send_dbr_mode() {
        send_dbr_mode::DBR_VALID => Ok(SendCounter::Record),
        send_dbr_mode::NO_DBR_EXT if !has_sq => Err(bad_param(
            Syndrome::BadQpParams,
            "send_dbr_mode NO_DBR_EXT on a QP without a send queue: it has no send doorbell",
        )),
        send_dbr_mode::NO_DBR_EXT => {
            let held = core
                .res
                .qps
                .iter()
                .chain(core.res.ud_qps.iter())
                .filter(|(_, qp)| matches!(qp.send_counter, SendCounter::Doorbells(_)))
                .count();
            if held >= 1usize << LOG_MAX_SEND_DBR_LESS_QP {
                return Err(CmdError::new(
                    CmdStatus::NoResources,
                    Syndrome::TableFull,
                    "2^log_max_send_dbr_less_qp_sq QPs without a send doorbell record exist",
                ));
            }
            Ok(SendCounter::Doorbells(0))
        }
        send_dbr_mode::NO_DBR_INT => Err(bad_param(
            Syndrome::BadQpParams,
            "send_dbr_mode NO_DBR_INT is not offered (send_dbr_mode_no_dbr_int 0 in HCA_CAP_2)",
        )),
        _ => Err(bad_param(
            Syndrome::BadQpParams,
            "send_dbr_mode 3 is reserved",
        )),
    }
}
