//! cxdirect-apps: DPDK-like programs built on cxdirect — testpmd, pingpong, info, devbind,
//! shared-rx, dmabuf-rx and bench. Nothing is implemented here yet.
