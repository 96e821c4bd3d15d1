//! DC initiator streams (DCI streams) at the command interface: the stream counts CREATE_QP
//! gives a DCI, and the reset of an errored stream by RTS2RTS_QP.
//!
//! Linux 6.12's mlx5_ib writes `log_num_dci_stream_channels` and
//! `log_num_dci_errored_streams` into a DCI's context for `MLX5_QP_FLAG_DCI_STREAM`
//! (`create_dci`), which it takes only while both `log_max_dci_*` caps are non-zero
//! (`process_vendor_flags`). rdma-core's `mlx5dv_dci_stream_id_reset` resets a stream by
//! RTS2RTS_QP with `qpc_ext` set, `MLX5_QPC_OPT_MASK_32_DCI_STREAM_CHANNEL_ID` in
//! `opt_param_mask_95_32` and the stream in the context extension's `dci_stream_channel_id`
//! (rdma-core's `rts2rts_qp_in.qpc_data_ext`, after the 0x110 bytes of Linux's input).

use super::{bad_param, CmdError, CmdResult, Syndrome};
use crate::objects::dc::DciStreams;
use crate::objects::limits::{LOG_MAX_DCI_ERRORED_STREAMS, LOG_MAX_DCI_STREAM_CHANNELS};
use crate::objects::rc::Qp;
use cxdirect_hw::layout::Layout;
use cxdirect_hw::qp::{
    qpc_opt_mask_32, service_type, Qpc, QpcExt, Rts2rtsQpIn, RTS2RTS_QPC_EXT_BYTE,
};

/// The streams CREATE_QP's context `ctx` gives a QP of service `service`: `None` for an
/// ordinary DCI (both counts 0) or another service; counts past the caps, or on a QP that is
/// not a DCI, are refused.
pub(super) fn streams_at_create(
    service: u8,
    ctx: &Qpc<&[u8]>,
) -> Result<Option<DciStreams>, CmdError> {
    let (channels, errored) = (
        ctx.log_num_dci_stream_channels(),
        ctx.log_num_dci_errored_streams(),
    );
    if channels == 0 && errored == 0 {
        return Ok(None);
    }
    if service != service_type::DCI {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "DCI stream counts on a QP that is not a DCI",
        ));
    }
    if channels > LOG_MAX_DCI_STREAM_CHANNELS || errored > LOG_MAX_DCI_ERRORED_STREAMS {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "DCI stream counts above log_max_dci_stream_channels or log_max_dci_errored_streams",
        ));
    }
    Ok(Some(DciStreams::new(channels, errored)))
}

/// The attributes of RTS2RTS_QP's context extension (`input`) applied to `next`: a stream
/// reset takes the stream out of error. The extension must be there (`qpc_ext` and the input
/// long enough), the QP a DCI with that stream in error; an
/// extension attribute the model does not take is refused.
pub(super) fn rts2rts_extension(input: &[u8], next: &mut Qp) -> CmdResult {
    let cmd = Rts2rtsQpIn::new(input).map_err(|_| {
        bad_param(
            Syndrome::BadQpParams,
            "RTS2RTS_QP input shorter than its context",
        )
    })?;
    // The UDP source port is the path's, not the extension's (`super::udp_sport`); the
    // extension's other attribute the model takes, the QoS queue groups, is
    // `fw::scheduling`'s.
    let mask = cmd.opt_param_mask_95_32() & !qpc_opt_mask_32::UDP_SPORT;
    let taken = qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID | qpc_opt_mask_32::QOS_QUEUE_GROUP_ID;
    if mask & !taken != 0 {
        return Err(bad_param(
            Syndrome::BadQpOptParam,
            "opt_param_mask_95_32 names an attribute the model does not take",
        ));
    }
    if mask & qpc_opt_mask_32::DCI_STREAM_CHANNEL_ID == 0 {
        return Ok(());
    }
    let ext = input
        .get(RTS2RTS_QPC_EXT_BYTE..RTS2RTS_QPC_EXT_BYTE + <QpcExt as Layout>::SIZE)
        .filter(|_| cmd.qpc_ext())
        .ok_or(bad_param(
            Syndrome::BadQpParams,
            "a stream reset without the QP context extension",
        ))?;
    let stream = QpcExt::new(ext)
        .map_err(|_| bad_param(Syndrome::BadQpParams, "QP context extension"))?
        .dci_stream_channel_id();
    let Some(streams) = next.dci_streams.as_mut() else {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "a stream reset on a QP without DCI streams",
        ));
    };
    // rdma-core's DCI stream test (`dci_reset_stream_id` in tests/mlx5_base.py) expects the
    // reset of a stream that is not in error to fail.
    if !streams.reset(stream) {
        return Err(bad_param(
            Syndrome::BadQpParams,
            "a stream reset of a stream not in error",
        ));
    }
    Ok(())
}
