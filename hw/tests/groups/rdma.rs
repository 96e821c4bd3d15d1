use super::common;
use cxdirect_hw::*;

pub fn checks() -> usize {
    check_layouts!(
        qp::Ads,
        qp::Qpc,
        qp::CreateQpIn,
        qp::CreateQpOut,
        qp::Rst2initQpIn,
        qp::Rst2initQpOut,
        qp::Init2rtrQpIn,
        qp::Init2rtrQpOut,
        qp::Rtr2rtsQpIn,
        qp::Rtr2rtsQpOut,
        qp::Rts2rtsQpIn,
        qp::Rts2rtsQpOut,
        qp::Sqerr2rtsQpIn,
        qp::Sqerr2rtsQpOut,
        qp::Qp2errIn,
        qp::Qp2errOut,
        qp::Qp2rstIn,
        qp::Qp2rstOut,
        qp::QueryQpIn,
        qp::QueryQpOut,
        qp::DestroyQpIn,
        qp::DestroyQpOut,
        roce::RoceCap,
        roce::RoceAddrLayout,
        roce::SetRoceAddressIn,
        roce::SetRoceAddressOut,
        roce::QueryRoceAddressIn,
        roce::QueryRoceAddressOut,
    )
}
