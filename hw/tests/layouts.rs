//! Every layout's size and fields against the reference headers, and a round trip through every
//! field's accessors and raw bits.

#[macro_use]
mod common;

#[path = "groups/cm.rs"]
mod cm;
#[path = "groups/device.rs"]
mod device;
#[path = "groups/hca.rs"]
mod hca;
#[path = "groups/queues.rs"]
mod queues;
#[path = "groups/rdma.rs"]
mod rdma;
#[path = "groups/steering.rs"]
mod steering;

#[test]
fn hca_layouts_match_reference() {
    hca::checks();
}

#[test]
fn queue_layouts_match_reference() {
    queues::checks();
}

#[test]
fn steering_layouts_match_reference() {
    steering::checks();
}

#[test]
fn device_layouts_match_reference() {
    device::checks();
}

#[test]
fn rdma_layouts_match_reference() {
    rdma::checks();
}

#[test]
fn cm_layouts_match_reference() {
    cm::checks();
}

#[test]
fn at_least_300_field_checks_in_all() {
    let total = hca::checks()
        + queues::checks()
        + steering::checks()
        + device::checks()
        + rdma::checks()
        + cm::checks();
    println!("{total} field checks against the reference headers");
    assert!(total >= 300, "only {total} field checks");
}
