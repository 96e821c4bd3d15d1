//! cxdirect-tests: end-to-end tests of the driver against the device model, and the QEMU rig
//! (`tests/qemu/`) that runs the model behind vfio-user under a real guest kernel. Nothing is
//! implemented here yet.
