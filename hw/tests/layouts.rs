//! Every layout's size and fields against the reference headers, and a round trip through every
//! field's accessors and raw bits.

#[macro_use]
mod common;

mod groups {
    use super::common;
    use cxdirect_hw::*;

    pub fn queues() -> usize {
        check_layouts!(cq::Cqc, cq::CreateCqIn, cq::CreateCqOut, cq::DestroyCqIn)
    }
}

#[test]
fn queue_layouts_match_mlx5_ifc() {
    groups::queues();
}
