use super::common;
use cxdirect_hw::*;

pub fn checks() -> usize {
    check_layouts!(
        cm::MadHdr,
        cm::CmReq,
        cm::CmMra,
        cm::CmRej,
        cm::CmRep,
        cm::CmRtu,
        cm::CmDreq,
        cm::CmDrep,
        cm::CmaHdr,
    )
}
