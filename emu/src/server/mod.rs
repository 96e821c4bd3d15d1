//! The vfio-user server that puts the modelled ConnectX-6 Dx behind QEMU's `vfio-user-pci`.
//!
//! The `cxdirect-emu-server` binary is a thin `main` over [`app::run`]; the integration tests
//! drive the backend directly. Built with the `server` feature (on by default), which brings in
//! the vfio-user dependencies.
//!
//! The protocol itself (framing, version negotiation, region and IRQ info replies) comes from the
//! `vfio_user` crate's [`Server`](vfio_user::Server). What the crate leaves to us is the device:
//!
//! | piece | module | what it does |
//! |---|---|---|
//! | regions and IRQ indices | [`layout`] | the nine VFIO PCI regions (BAR0 trapped, config space, the rest absent) and five IRQ indices (MSI-X with the model's vector count) |
//! | BAR0 accesses | [`bar`] | splits whatever access size the client sends into accesses the model's registers take |
//! | BlueFlame copies | [`blueflame`] | puts a copy QEMU forwards eight bytes at a time back together, as write combining would have delivered it |
//! | MSI-X | [`irq`] | the client's eventfds, `SET_IRQS` trigger/mask/unmask semantics, the pending bits the PBA shows |
//! | DMA | [`dma`] | maps each client file once and enters every DMA map into the model's IOMMU as a window of it (the only `unsafe` here) |
//! | the backend | [`backend`] | [`ServerBackend`](vfio_user::ServerBackend) over one [`Device`](crate::Device) |
//! | sessions | [`session`] | the listening socket, waiting for a client, running one connection, why it ended |
//! | cross-process cable | [`bridge`] | `--wire pair:OTHER.sock`: frames between two server processes over a side channel |
//! | command line | [`cli`] | options and their checks |
//! | the program | [`app`] | builds the functions, serves every socket on its own thread, decides when to stop |

pub mod app;
pub mod backend;
pub mod bar;
pub mod blueflame;
pub mod bridge;
pub mod cli;
pub mod dma;
pub mod irq;
pub mod layout;
pub mod logger;
pub mod session;
