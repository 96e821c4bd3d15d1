use super::common;
#[allow(unused_imports)]
use cxdirect_hw::*;

pub fn checks() -> usize {
    check_layouts!()
}
