use super::common;
use cxdirect_hw::*;

pub fn checks() -> usize {
    check_layouts!(cq::Cqc, cq::CreateCqIn, cq::CreateCqOut, cq::DestroyCqIn)
}
