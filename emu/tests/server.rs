//! The vfio-user server's backend driven directly, without a socket or QEMU: config space and
//! BAR0 plumbing into the model, BAR access splitting, MSI-X eventfds with masking, DMA maps of
//! memfd pages into the model's IOMMU, reset, and the cross-process cable.

use cxdirect_emu::device::{MmioError, MSIX_PBA_OFFSET};
use cxdirect_emu::pci;
use cxdirect_emu::server;
use cxdirect_emu::wire::{PortId, Wire};
use cxdirect_emu::{Device, EmuConfig, ExecMode};
use cxdirect_hw::init_seg;
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{memfd_create, MFdFlags};
use server::backend::EmuBackend;
use server::bar::{self, MmioTarget, FIRST_UAR_OFFSET};
use server::bridge::Bridge;
use server::layout::{BAR0_REGION, CONFIG_REGION};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_UNMASK,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_INTX_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

const MSIX: u32 = VFIO_PCI_MSIX_IRQ_INDEX;
const EVENTFD_TRIGGER: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;

fn backend() -> EmuBackend {
    let cfg = EmuConfig {
        exec: ExecMode::Threaded,
        ..EmuConfig::default()
    };
    EmuBackend::new("test", Device::loopback(cfg))
}

fn config_u16(b: &mut EmuBackend, offset: u64) -> u16 {
    let mut buf = [0u8; 2];
    b.region_read(CONFIG_REGION, offset, &mut buf).unwrap();
    u16::from_le_bytes(buf)
}

fn enable_memory(b: &mut EmuBackend) {
    let command = pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER;
    b.region_write(CONFIG_REGION, pci::REG_COMMAND, &command.to_le_bytes())
        .unwrap();
}

fn bar_read(b: &mut EmuBackend, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    b.region_read(BAR0_REGION, offset, &mut buf).unwrap();
    buf
}

fn eventfd() -> (EventFd, File) {
    let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
    let dup = File::from(efd.as_fd().try_clone_to_owned().unwrap());
    (efd, dup)
}

/// Reads and resets the eventfd counter; 0 when it was not signalled.
fn take(efd: &EventFd) -> u64 {
    efd.read().unwrap_or(0)
}

fn memfd(len: u64) -> File {
    let file = File::from(memfd_create("server-test", MFdFlags::MFD_CLOEXEC).unwrap());
    file.set_len(len).unwrap();
    file
}

#[test]
fn config_space_comes_from_the_model() {
    let mut b = backend();
    assert_eq!(config_u16(&mut b, pci::REG_VENDOR_ID), 0x15b3);
    assert_eq!(config_u16(&mut b, pci::REG_DEVICE_ID), 0x101d);
    // MSI-X capability, 64 vectors, table and PBA in BAR0.
    assert_eq!(config_u16(&mut b, pci::MSIX_CAP_OFFSET) & 0xff, 0x11);
    assert_eq!(
        config_u16(&mut b, pci::MSIX_CAP_OFFSET + pci::MSIX_MSG_CTRL) & 0x7ff,
        63
    );
    // The whole space in one read, as QEMU does at realize.
    let mut all = vec![0u8; 4096];
    b.region_read(CONFIG_REGION, 0, &mut all).unwrap();
    assert_eq!(&all[0..4], &[0xb3, 0x15, 0x1d, 0x10]);
    // Writes reach the model: memory decoding turns BAR0 reads from all-ones into registers.
    assert_eq!(bar_read(&mut b, 0, 4), vec![0xff; 4]);
    enable_memory(&mut b);
    assert_ne!(
        config_u16(&mut b, pci::REG_COMMAND) & pci::COMMAND_MEMORY_SPACE,
        0
    );
    let rev = u32::from_be_bytes(
        bar_read(&mut b, init_seg::FW_REV as u64, 4)
            .try_into()
            .unwrap(),
    );
    assert_eq!((rev & 0xffff, rev >> 16), (22, 39));
    // Past the end, and absent regions, are refused (an error reply, not a panic).
    let mut buf = [0u8; 4];
    assert!(b.region_read(CONFIG_REGION, 4094, &mut buf).is_err());
    assert!(b.region_read(BAR0_REGION, 32 << 20, &mut buf).is_err());
    assert!(b.region_read(2, 0, &mut buf).is_err());
    assert!(b.region_write(6, 0, &buf).is_err());
    assert!(b.region_read(BAR0_REGION, u64::MAX - 1, &mut buf).is_err());
    assert!(b.stats().refused >= 5);
}

#[test]
fn bar0_reads_of_any_size_agree_with_dword_reads() {
    let mut b = backend();
    enable_memory(&mut b);
    let dwords = bar_read(&mut b, 0, 8);
    for (offset, len) in [
        (0u64, 1usize),
        (1, 1),
        (2, 2),
        (1, 2),
        (3, 4),
        (0, 8),
        (0, 3),
    ] {
        let got = bar_read(&mut b, offset, len);
        assert_eq!(
            got,
            dwords[offset as usize..offset as usize + len],
            "read of {len} at {offset}"
        );
    }
    // A large read (a generic client's) is served too.
    let block = bar_read(&mut b, 0, 64);
    assert_eq!(&block[..8], &dwords[..]);
}

#[test]
fn bar0_writes_program_the_command_queue_address() {
    let mut b = backend();
    enable_memory(&mut b);
    // One 8-byte store over CMDQ_ADDR_H and CMDQ_ADDR_L_SZ: the init segment takes dwords, so
    // the server splits it.
    let mut both = Vec::new();
    both.extend_from_slice(&0x12u32.to_be_bytes());
    both.extend_from_slice(&0x3456_7000u32.to_be_bytes());
    b.region_write(BAR0_REGION, init_seg::CMDQ_ADDR_H as u64, &both)
        .unwrap();
    let high = bar_read(&mut b, init_seg::CMDQ_ADDR_H as u64, 4);
    let low = bar_read(&mut b, init_seg::CMDQ_ADDR_L_SZ as u64, 4);
    assert_eq!(u32::from_be_bytes(high.try_into().unwrap()), 0x12);
    assert_eq!(
        u32::from_be_bytes(low.try_into().unwrap()) & 0xffff_f000,
        0x3456_7000
    );
    // A 1-byte store to a register is dropped and counted, not an error.
    b.region_write(BAR0_REGION, init_seg::CMD_DBELL as u64, &[1])
        .unwrap();
    assert_eq!(b.stats().mmio_refused, 1);
}

/// Records every access the splitter makes; refuses 8-byte stores below `refuse_qwords_below`.
struct Recorder {
    writes: Mutex<Vec<(u64, usize)>>,
    refuse_qwords_below: u64,
}

impl Recorder {
    fn new(refuse_qwords_below: u64) -> Self {
        Self {
            writes: Mutex::new(Vec::new()),
            refuse_qwords_below,
        }
    }

    fn take(&self) -> Vec<(u64, usize)> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }
}

impl MmioTarget for Recorder {
    fn bar_size(&self) -> u64 {
        32 << 20
    }

    fn mmio_read(&self, _offset: u64, buf: &mut [u8]) -> Result<(), MmioError> {
        buf.fill(0xab);
        Ok(())
    }

    fn mmio_write(&self, offset: u64, data: &[u8]) -> Result<(), MmioError> {
        self.writes.lock().unwrap().push((offset, data.len()));
        if data.len() == 8 && offset < self.refuse_qwords_below {
            return Err(MmioError::BadWidth {
                offset,
                len: data.len(),
            });
        }
        Ok(())
    }
}

#[test]
fn writes_are_split_and_blueflame_copies_pass_whole() {
    let r = Recorder::new(0);
    let bf = FIRST_UAR_OFFSET + 0x800;

    // A 64-byte BlueFlame copy at the start of a half: whole.
    let out = bar::write(&r, bf, &[0u8; 64]).unwrap();
    assert_eq!(r.take(), vec![(bf, 64)]);
    assert_eq!((out.pieces, out.refused), (1, 0));
    // 256 bytes filling the second half: whole.
    bar::write(&r, bf + 256, &[0u8; 256]).unwrap();
    assert_eq!(r.take(), vec![(bf + 256, 256)]);
    // 128 bytes straddling the halves: eight bytes at a time.
    bar::write(&r, bf + 192, &[0u8; 128]).unwrap();
    let pieces = r.take();
    assert_eq!(pieces.len(), 16);
    assert!(pieces.iter().all(|&(o, l)| l == 8 && o % 8 == 0));
    // Doorbell-sized stores pass as they are.
    for len in [4usize, 8] {
        bar::write(&r, FIRST_UAR_OFFSET + 0x20, &vec![0u8; len]).unwrap();
        assert_eq!(r.take(), vec![(FIRST_UAR_OFFSET + 0x20, len)]);
    }
    // The init segment gets dwords only.
    bar::write(&r, 0x10, &[0u8; 16]).unwrap();
    assert_eq!(r.take(), vec![(0x10, 4), (0x14, 4), (0x18, 4), (0x1c, 4)]);
    // Misaligned: natural pieces.
    bar::write(&r, FIRST_UAR_OFFSET + 3, &[0u8; 6]).unwrap();
    assert_eq!(
        r.take(),
        vec![
            (FIRST_UAR_OFFSET + 3, 1),
            (FIRST_UAR_OFFSET + 4, 4),
            (FIRST_UAR_OFFSET + 8, 1)
        ]
    );
    // Out of range: refused whole, nothing reaches the target.
    assert!(bar::write(&r, (32 << 20) - 4, &[0u8; 8]).is_err());
    assert!(r.take().is_empty());
}

#[test]
fn qwords_refused_for_width_are_retried_as_dwords() {
    let r = Recorder::new(u64::MAX);
    let out = bar::write(&r, FIRST_UAR_OFFSET + 0x40, &[0u8; 8]).unwrap();
    assert_eq!(
        r.take(),
        vec![
            (FIRST_UAR_OFFSET + 0x40, 8),
            (FIRST_UAR_OFFSET + 0x40, 4),
            (FIRST_UAR_OFFSET + 0x44, 4)
        ]
    );
    assert_eq!((out.pieces, out.refused), (3, 0));
    // Reads that are not aligned dwords or qwords are built from dword reads.
    let mut buf = [0u8; 3];
    bar::read(&r, 5, &mut buf).unwrap();
    assert_eq!(buf, [0xab; 3]);
}

#[test]
fn msix_eventfds_fire_mask_and_show_pending_in_the_pba() {
    let mut b = backend();
    enable_memory(&mut b);
    let (efd, file) = eventfd();
    b.set_irqs(MSIX, EVENTFD_TRIGGER, 3, 1, vec![file]).unwrap();
    assert_eq!(b.irqs().armed(), 1);

    // DATA_NONE | TRIGGER fires the vector, as the device would.
    let fire = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    b.set_irqs(MSIX, fire, 3, 1, vec![]).unwrap();
    assert_eq!(take(&efd), 1);

    // Masked: firing sets the pending bit, which the PBA page of BAR0 shows.
    b.set_irqs(
        MSIX,
        VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK,
        3,
        1,
        vec![],
    )
    .unwrap();
    b.set_irqs(MSIX, fire, 3, 1, vec![]).unwrap();
    assert_eq!(take(&efd), 0);
    assert!(b.irqs().is_pending(3));
    let pba = bar_read(&mut b, MSIX_PBA_OFFSET, 8);
    assert_eq!(u64::from_le_bytes(pba.try_into().unwrap()), 1 << 3);
    assert_eq!(bar_read(&mut b, MSIX_PBA_OFFSET, 1), vec![1 << 3]);

    // Unmasked: the pending message goes out.
    b.set_irqs(
        MSIX,
        VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK,
        3,
        1,
        vec![],
    )
    .unwrap();
    assert_eq!(take(&efd), 1);
    assert_eq!(bar_read(&mut b, MSIX_PBA_OFFSET, 8), vec![0; 8]);

    // The model's own signals go through the same sink.
    use cxdirect_emu::irq::InterruptSink;
    b.irqs().signal(3);
    assert_eq!(take(&efd), 1);

    // No fds: the vector loses its eventfd; count 0: the whole index is disabled.
    b.set_irqs(MSIX, EVENTFD_TRIGGER, 3, 1, vec![]).unwrap();
    assert_eq!(b.irqs().armed(), 0);
    b.set_irqs(MSIX, fire, 3, 1, vec![]).unwrap();
    assert_eq!(take(&efd), 0);
    let (_e2, f2) = eventfd();
    b.set_irqs(MSIX, EVENTFD_TRIGGER, 0, 1, vec![f2]).unwrap();
    b.set_irqs(MSIX, fire, 0, 0, vec![]).unwrap();
    assert_eq!(b.irqs().armed(), 0);
}

#[test]
fn bad_set_irqs_requests_are_refused() {
    let mut b = backend();
    let fire = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    // Past the 64 vectors, and wrapping.
    assert!(b.set_irqs(MSIX, fire, 63, 2, vec![]).is_err());
    assert!(b.set_irqs(MSIX, fire, u32::MAX, 2, vec![]).is_err());
    // Two actions at once, or no data type.
    let two = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK;
    assert!(b.set_irqs(MSIX, two, 0, 1, vec![]).is_err());
    assert!(b
        .set_irqs(MSIX, VFIO_IRQ_SET_ACTION_TRIGGER, 0, 1, vec![])
        .is_err());
    // Fewer fds than vectors.
    let (_e, f) = eventfd();
    assert!(b.set_irqs(MSIX, EVENTFD_TRIGGER, 0, 2, vec![f]).is_err());
    // Not an eventfd.
    assert!(b
        .set_irqs(MSIX, EVENTFD_TRIGGER, 0, 1, vec![memfd(4096)])
        .is_err());
    // INTx has no vectors: disabling is fine, anything else is refused.
    assert!(b
        .set_irqs(VFIO_PCI_INTX_IRQ_INDEX, fire, 0, 0, vec![])
        .is_ok());
    assert!(b
        .set_irqs(VFIO_PCI_INTX_IRQ_INDEX, fire, 0, 1, vec![])
        .is_err());
    assert_eq!(b.irqs().armed(), 0);
}

#[test]
fn dma_maps_of_discontiguous_pages_reach_the_model() {
    let mut b = backend();
    let file = memfd(4 * 4096);
    let iova = 0x10_0000_0000u64;
    // Two pages, one at a time, the second page of the file at the lower IOVA.
    let rw = DmaMapFlags::READ_WRITE;
    b.dma_map(rw, 2 * 4096, iova, 4096, Some(file.try_clone().unwrap()))
        .unwrap();
    b.dma_map(rw, 0, iova + 4096, 4096, Some(file.try_clone().unwrap()))
        .unwrap();
    assert_eq!(b.memory().len(), 2);
    let iommu = b.device().iommu();
    // Each page is its own mapping in the model's IOMMU (which resolves an access inside one
    // mapping: an access spanning the two pages is refused there).
    assert!(iommu.is_mapped(iova, 4096, true));
    assert!(iommu.is_mapped(iova + 4096, 4096, true));

    // The device reads what the client wrote, and the client sees what the device wrote.
    file.write_all_at(b"guest data", 2 * 4096 + 16).unwrap();
    let mut buf = [0u8; 10];
    iommu.read(iova + 16, &mut buf).unwrap();
    assert_eq!(&buf, b"guest data");
    iommu.write(iova + 4096 + 8, b"device!").unwrap();
    let mut back = [0u8; 7];
    file.read_exact_at(&mut back, 8).unwrap();
    assert_eq!(&back, b"device!");

    // Read-only mappings refuse device writes.
    b.dma_map(
        DmaMapFlags::READ,
        4096,
        iova + 0x10000,
        4096,
        Some(file.try_clone().unwrap()),
    )
    .unwrap();
    assert!(b.device().iommu().write(iova + 0x10000, b"x").is_err());

    // Unmapping half a mapping is refused; a range covering both pages removes both.
    assert!(b.dma_unmap(DmaUnmapFlags::empty(), iova, 2048).is_err());
    b.dma_unmap(DmaUnmapFlags::empty(), iova, 8192).unwrap();
    assert!(!b.device().iommu().is_mapped(iova, 1, false));
    assert_eq!(b.memory().len(), 1);
    b.dma_unmap(DmaUnmapFlags::UNMAP_ALL, 0, 0).unwrap();
    assert!(b.memory().is_empty());
    assert_eq!(b.device().iommu().mapping_count(), 0);
}

#[test]
fn bad_dma_maps_are_refused() {
    let mut b = backend();
    let rw = DmaMapFlags::READ_WRITE;
    // No file descriptor (guest memory that is not shared, or a QEMU ROM): accepted so the
    // client's set-up goes on, but the device cannot reach it.
    b.dma_map(rw, 0, 0x100_0000, 4096, None).unwrap();
    assert_eq!(b.memory().unreachable(), 1);
    assert!(!b.device().iommu().is_mapped(0x100_0000, 1, false));
    assert_eq!(b.stats().dma_maps_without_fd, 1);
    assert!(b.dma_map(rw, 0, 0x100_0800, 4096, None).is_err(), "overlap");
    b.dma_unmap(DmaUnmapFlags::empty(), 0x100_0000, 4096)
        .unwrap();
    assert!(b.memory().is_empty());
    // Beyond the end of the file (would be SIGBUS on touch).
    assert!(b
        .dma_map(rw, 4096, 0x1000, 4096, Some(memfd(4096)))
        .is_err());
    // Zero size, wrapping IOVA, no access.
    assert!(b.dma_map(rw, 0, 0x1000, 0, Some(memfd(4096))).is_err());
    assert!(b
        .dma_map(rw, 0, u64::MAX - 100, 4096, Some(memfd(4096)))
        .is_err());
    assert!(b
        .dma_map(DmaMapFlags::empty(), 0, 0x1000, 4096, Some(memfd(4096)))
        .is_err());
    // Overlapping an existing mapping.
    b.dma_map(rw, 0, 0x1000, 8192, Some(memfd(8192))).unwrap();
    assert!(b.dma_map(rw, 0, 0x2000, 4096, Some(memfd(4096))).is_err());
    // Dirty tracking is not offered.
    assert!(b
        .dma_unmap(DmaUnmapFlags::GET_DIRTY_PAGE_INFO, 0x1000, 8192)
        .is_err());
    assert_eq!(b.memory().len(), 1);
}

#[test]
fn reset_returns_the_function_to_power_on_but_keeps_dma() {
    let mut b = backend();
    enable_memory(&mut b);
    b.dma_map(DmaMapFlags::READ_WRITE, 0, 0x1000, 4096, Some(memfd(4096)))
        .unwrap();
    b.reset().unwrap();
    assert_eq!(
        config_u16(&mut b, pci::REG_COMMAND) & pci::COMMAND_MEMORY_SPACE,
        0
    );
    assert_eq!(b.device().iommu().mapping_count(), 1);
    assert_eq!(b.stats().resets, 1);
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cxdirect-server-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_cable_carries_frames_between_two_wires() {
    let dir = temp_dir("cable");
    let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
    let wire_a = std::sync::Arc::new(Wire::pair());
    let wire_b = std::sync::Arc::new(Wire::pair());
    let bridge_b = Bridge::start(wire_b.clone(), PortId::B, &b, &a).unwrap();
    let bridge_a = Bridge::start(wire_a.clone(), PortId::B, &a, &b).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(bridge_a.is_connected() && bridge_b.is_connected()) {
        assert!(Instant::now() < deadline, "the bridges never connected");
        std::thread::sleep(Duration::from_millis(10));
    }
    let frame: Vec<u8> = (0..60u8).collect();
    wire_a.transmit(PortId::A, &frame).unwrap();
    let mut got = Vec::new();
    assert!(wire_b
        .wait_for_frames(PortId::A, Duration::from_secs(5))
        .unwrap());
    assert!(wire_b.receive(PortId::A, &mut got).unwrap());
    assert_eq!(got, frame);
    // And back.
    let reply: Vec<u8> = (0..64u8).rev().collect();
    wire_b.transmit(PortId::A, &reply).unwrap();
    assert!(wire_a
        .wait_for_frames(PortId::A, Duration::from_secs(5))
        .unwrap());
    assert!(wire_a.receive(PortId::A, &mut got).unwrap());
    assert_eq!(got, reply);
    bridge_a.stop();
    bridge_b.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
