use super::common;
use cxdirect_hw::*;

pub fn checks() -> usize {
    check_layouts!(
        cmd::CmdIn,
        cmd::CmdOut,
        cmd::CmdLayout,
        cmd::CmdMailbox,
        init_seg::HealthBuffer,
        init_seg::InitSeg,
        wqe::CtrlSeg,
        wqe::EthSeg,
        wqe::DataSeg,
        wqe::InlineSeg,
        wqe::RaddrSeg,
        wqe::AtomicSeg,
        wqe::SrqNextSeg,
        wqe::DatagramSeg,
        umr::UmrCtrlSeg,
        umr::Klm,
        cqe::Cqe64,
        cqe::ErrCqe,
        cqe::MiniCqe8,
        cqe::MiniCqe8Csum,
        eqe::Eqe,
        eqe::EqeComp,
        eqe::EqeCmd,
        eqe::EqePageReq,
        eqe::EqeQpSrq,
        eqe::EqeCqErr,
        eqe::EqePortState,
    )
}
