//! What the server announces: the VFIO PCI regions and IRQ indices of one modelled function.
//!
//! The layout follows the kernel's `vfio-pci`, which is what QEMU's `vfio-user-pci` expects to
//! talk to: nine regions indexed as `VFIO_PCI_*_REGION_INDEX` and five IRQ indices
//! (`VFIO_PCI_*_IRQ_INDEX`). Only two regions have a size:
//!
//! | index | region | size | flags |
//! |---|---|---|---|
//! | 0 | BAR0 | the model's BAR0 (32 MiB) | read, write; **never** mmap: every access must reach the model |
//! | 7 | config space | 4096 bytes | read, write |
//! | 1-6, 8 | BAR1 (BAR0's upper half), BAR2-5, ROM, VGA | 0 | none |
//!
//! IRQ indices: INTx and MSI report a count of 0 (the function has no interrupt pin and no MSI
//! capability, as its config space says), MSI-X reports the model's vector count, and the error
//! and request indices report 0 (no AER, no device request notifications).

use crate::Device;
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_AUTOMASKED, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE,
    VFIO_IRQ_INFO_NORESIZE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_PCI_REQ_IRQ_INDEX,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{IrqInfo, ServerRegion};

/// Region index of BAR0.
pub const BAR0_REGION: u32 = VFIO_PCI_BAR0_REGION_INDEX;
/// Region index of PCI configuration space.
pub const CONFIG_REGION: u32 = VFIO_PCI_CONFIG_REGION_INDEX;
/// Number of regions announced (every VFIO PCI index, most of them empty).
pub const REGION_COUNT: u32 = VFIO_PCI_NUM_REGIONS;
/// IRQ index of MSI-X.
pub const MSIX_IRQ: u32 = VFIO_PCI_MSIX_IRQ_INDEX;
/// Size of PCI Express configuration space in bytes.
pub const CONFIG_SPACE_SIZE: u64 = crate::pci::CONFIG_SPACE_SIZE as u64;

/// The regions of `device`, in index order, as the `vfio_user` server announces them.
///
/// BAR0 is offered without `VFIO_REGION_INFO_FLAG_MMAP` and without a sparse-mmap capability:
/// a region the client may map goes straight into the guest and its accesses never reach the
/// model, which would silently lose every register write.
pub fn regions(device: &Device) -> Vec<ServerRegion> {
    (0..REGION_COUNT)
        .map(|index| {
            let (size, flags) = match index {
                BAR0_REGION => (
                    device.bar0_size(),
                    VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
                ),
                CONFIG_REGION => (
                    CONFIG_SPACE_SIZE,
                    VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
                ),
                _ => (0, 0),
            };
            ServerRegion {
                region_info: vfio_region_info {
                    argsz: std::mem::size_of::<vfio_region_info>() as u32,
                    flags,
                    index,
                    cap_offset: 0,
                    size,
                    offset: 0,
                },
                sparse_areas: Vec::new(),
                mmap_fd: None,
            }
        })
        .collect()
}

/// Size of region `index` as announced (0 for an absent region or an index past the end).
pub fn region_size(device: &Device, index: u32) -> u64 {
    match index {
        BAR0_REGION => device.bar0_size(),
        CONFIG_REGION => CONFIG_SPACE_SIZE,
        _ => 0,
    }
}

/// The IRQ indices, in index order, for a function with `msix_vectors` MSI-X vectors.
///
/// MSI-X is `EVENTFD | MASKABLE` without `NORESIZE`: vectors can be given eventfds one at a
/// time while MSI-X stays enabled (QEMU then updates single vectors instead of tearing the
/// whole index down), and `SET_IRQS` MASK/UNMASK actions are honoured. INTx carries the flags
/// the kernel reports for it even with a count of 0.
pub fn irqs(msix_vectors: u16) -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| {
            let (flags, count) = match index {
                VFIO_PCI_INTX_IRQ_INDEX => (
                    VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED,
                    0,
                ),
                VFIO_PCI_MSI_IRQ_INDEX => (VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE, 0),
                VFIO_PCI_MSIX_IRQ_INDEX => (
                    VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_MASKABLE,
                    u32::from(msix_vectors),
                ),
                VFIO_PCI_ERR_IRQ_INDEX | VFIO_PCI_REQ_IRQ_INDEX => (VFIO_IRQ_INFO_EVENTFD, 0),
                _ => (0, 0),
            };
            IrqInfo {
                index,
                flags,
                count,
            }
        })
        .collect()
}
