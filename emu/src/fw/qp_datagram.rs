//! The transitions of datagram QPs: unreliable datagram (UD) QPs and the general services QP
//! (QP1) as Linux's mlx5_ib moves them (`__mlx5_ib_modify_qp` and its `opt_mask` table in
//! `drivers/infiniband/hw/mlx5/qp.c`).
//!
//! RST2INIT carries the port, the P_Key index and the Q_Key (QP1: `IB_QP1_QKEY`), without
//! optional-parameter bits. For UD the table then allows the P_Key index and Q_Key at
//! INIT2RTR and the Q_Key at RTR2RTS, RTS2RTS and SQERR2RTS; it has no entry for QP1 (no
//! optional attribute). Every transition carries the MTU mlx5_ib writes for these QPs, 4096
//! for UD and 256 for QP1, whatever the port's: a datagram is limited by the port when it is
//! sent, not by the context. The counter set is taken as for RC.

use super::{bad_param, CmdError, CmdResult, Syndrome};
use crate::objects::limits::LOG_MAX_MSG;
use crate::objects::rc::Qp;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::qp::{mtu, optpar, service_type, Qpc};

/// The optional attributes transition `opcode` takes for a datagram QP of service `service`.
pub(crate) fn optional(opcode: Opcode, service: u8) -> u32 {
    const COUNTER: u32 = optpar::COUNTER_SET_ID;
    let ud = service == service_type::UD;
    let table = match opcode {
        Opcode::Init2initQp if ud => optpar::PKEY_INDEX | optpar::Q_KEY | optpar::PRI_PORT,
        Opcode::Init2rtrQp if ud => optpar::PKEY_INDEX | optpar::Q_KEY,
        Opcode::Rtr2rtsQp | Opcode::Rts2rtsQp | Opcode::Sqerr2rtsQp if ud => optpar::Q_KEY,
        _ => 0,
    };
    // mlx5_ib binds a counter set with its own bit, after the table filtered the rest.
    let counter = match opcode {
        Opcode::Rst2initQp | Opcode::Init2rtrQp | Opcode::Rts2rtsQp => COUNTER,
        _ => 0,
    };
    table | counter
}

fn missing(what: &'static str) -> CmdError {
    bad_param(Syndrome::MissingQpAttribute, what)
}

/// Reads a datagram QP's transition attributes from `ctx` into `qp` (only the optional ones
/// `mask` names); fails without side effects.
pub(crate) fn apply(opcode: Opcode, mask: u32, ctx: &Qpc<&[u8]>, qp: &mut Qp) -> CmdResult {
    // The counter set: always at RST2INIT, later only with its optional-parameter bit.
    if opcode == Opcode::Rst2initQp || mask & optpar::COUNTER_SET_ID != 0 {
        qp.counter_set = u32::from(ctx.counter_set_id());
    }
    let code = ctx.mtu();
    if code != 0 {
        if mtu::bytes(code).is_none() {
            return Err(bad_param(Syndrome::BadPathMtu, "unknown MTU code"));
        }
        if ctx.log_msg_max() > LOG_MAX_MSG {
            return Err(bad_param(
                Syndrome::BadQpParams,
                "log_msg_max above log_max_msg",
            ));
        }
        qp.mtu = code;
        qp.log_msg_max = ctx.log_msg_max();
    }
    let ads = ctx.primary_address_path();
    match opcode {
        Opcode::Rst2initQp => {
            if ads.vhca_port_num() != 1 {
                return Err(missing("RST2INIT without port 1 in the primary path"));
            }
            qp.path.port = ads.vhca_port_num();
            qp.path.pkey_index = ads.pkey_index();
            qp.q_key = ctx.q_key();
        }
        Opcode::Init2initQp | Opcode::Init2rtrQp if mask & optpar::PKEY_INDEX != 0 => {
            qp.path.pkey_index = ads.pkey_index();
        }
        Opcode::Rtr2rtsQp => qp.next_send_psn = ctx.next_send_psn(),
        _ => {}
    }
    if mask & optpar::Q_KEY != 0 {
        qp.q_key = ctx.q_key();
    }
    // mlx5_ib writes `deth_sqpn` again at every transition of a QP created with it
    // (`__mlx5_ib_modify_qp`); only a UD QP carries it (CREATE_QP refused it elsewhere).
    if qp.service == service_type::UD && ctx.deth_sqpn() != 0 {
        qp.deth_sqpn = ctx.deth_sqpn();
    }
    Ok(())
}
