//! A peer device's BAR opened for peer-to-peer DMA ([`PeerBar`]) against `FakeSys`: the BAR
//! checks (not memory, not mappable, too small) and the dmabuf export with its refusals, each
//! message saying what to do.

use cxdirect::backend::vfio::sys::RegionInfo;
use cxdirect::backend::vfio::testing::FakeSys;
use cxdirect::backend::vfio::{IommuMode, PeerBar, PeerBarError, VfioError};
use vfio_bindings::bindings::vfio as k;

const BDF: &str = "0000:00:05.0";
/// ivshmem-plain's IDs: the peer is not a ConnectX, and that is fine.
const IVSHMEM: (u16, u16) = (0x1af4, 0x1110);
const BAR2_LEN: u64 = 64 << 20;

/// A function with a 64 MiB mappable memory BAR 2 and config space whose BAR registers say
/// memory, bound to vfio-pci.
fn peer_host() -> FakeSys {
    let fake = FakeSys::connectx(BDF);
    fake.set_ids(BDF, IVSHMEM.0, IVSHMEM.1);
    set_bar(&fake, 2, BAR2_LEN, true);
    fake
}

fn set_bar(fake: &FakeSys, bar: u32, size: u64, mmap: bool) {
    let rw = k::VFIO_REGION_INFO_FLAG_READ | k::VFIO_REGION_INFO_FLAG_WRITE;
    fake.set_region(RegionInfo {
        index: bar,
        flags: if mmap {
            rw | k::VFIO_REGION_INFO_FLAG_MMAP
        } else {
            rw
        },
        size,
        offset: u64::from(bar) << 40,
    });
}

fn open(fake: &FakeSys, bar: u32, len: u64) -> Result<PeerBar<FakeSys>, PeerBarError> {
    PeerBar::open(BDF, bar, len, IommuMode::Type1, fake.clone())
}

fn open_err(fake: &FakeSys, bar: u32, len: u64) -> PeerBarError {
    match open(fake, bar, len) {
        Ok(peer) => panic!("opened unexpectedly: {peer:?}"),
        Err(e) => e,
    }
}

#[test]
fn a_memory_bar_of_any_vendor_opens_and_exports_its_range() {
    let fake = peer_host();
    let peer = open(&fake, 2, BAR2_LEN).expect("open");
    assert_eq!((peer.bar(), peer.size()), (2, BAR2_LEN));
    let fd = peer
        .export(0, BAR2_LEN, |_| Some(BAR2_LEN))
        .expect("export");
    let len = std::fs::File::from(fd).metadata().expect("stat").len();
    assert_eq!(len, BAR2_LEN);
    assert!(fake
        .log()
        .iter()
        .any(|l| l.starts_with("VFIO_DEVICE_FEATURE_DMA_BUF") && l.ends_with("2 0x0+0x4000000")));
}

#[test]
fn a_bar_that_is_not_implemented_is_not_memory() {
    let fake = peer_host();
    let err = open_err(&fake, 1, 1 << 20);
    assert!(
        matches!(err, PeerBarError::NotMemory { bar: 1, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("is not implemented") && text.contains("choose a memory BAR"),
        "{text}"
    );
}

#[test]
fn an_io_port_bar_is_not_memory() {
    let fake = peer_host();
    set_bar(&fake, 4, 256, false);
    // BAR 4's register at config offset 0x20: bit 0 set, an I/O port BAR.
    fake.write_region(
        k::VFIO_PCI_CONFIG_REGION_INDEX,
        0x20,
        &0xc001u32.to_le_bytes(),
    );
    let text = open_err(&fake, 4, 4096).to_string();
    assert!(
        text.contains("is an I/O port BAR") && text.contains("\"Memory at\""),
        "{text}"
    );
}

#[test]
fn a_bar_vfio_pci_will_not_map_is_refused() {
    let fake = peer_host();
    set_bar(&fake, 0, 256, false);
    let text = open_err(&fake, 0, 4096).to_string();
    assert!(
        text.contains("cannot be mapped") && text.contains("choose a memory BAR"),
        "{text}"
    );
}

#[test]
fn a_bar_smaller_than_asked_names_the_most_that_fits() {
    let fake = peer_host();
    let err = open_err(&fake, 2, 2 * BAR2_LEN);
    assert!(
        matches!(err, PeerBarError::TooSmall { size: BAR2_LEN, asked, .. } if asked == 2 * BAR2_LEN),
        "{err:?}"
    );
    assert!(err
        .to_string()
        .contains(&format!("ask for at most {BAR2_LEN} bytes (--size)")));
    // And a range past the end at export time.
    let peer = open(&fake, 2, BAR2_LEN).expect("open");
    let err = peer.export(4096, BAR2_LEN, |_| None).unwrap_err();
    assert!(matches!(err, PeerBarError::TooSmall { .. }), "{err:?}");
}

#[test]
fn a_dmabuf_smaller_than_asked_is_refused() {
    let fake = peer_host();
    let peer = open(&fake, 2, BAR2_LEN).expect("open");
    let err = peer
        .export(0, BAR2_LEN, |_| Some(BAR2_LEN / 2))
        .unwrap_err();
    assert!(
        matches!(err, PeerBarError::ShortExport { got, asked: BAR2_LEN, .. } if got == BAR2_LEN / 2),
        "{err:?}"
    );
    assert!(err.to_string().contains("ask for less"));
}

#[test]
fn a_kernel_without_dmabuf_export_is_named() {
    let fake = peer_host();
    let peer = open(&fake, 2, BAR2_LEN).expect("open");
    fake.fail("VFIO_DEVICE_FEATURE_DMA_BUF", libc::ENOTTY);
    let err = peer.export(0, BAR2_LEN, |_| None).unwrap_err();
    assert!(
        matches!(
            err,
            PeerBarError::ExportRefused {
                errno: libc::ENOTTY,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("Linux 6.19") && text.contains("CONFIG_VFIO_PCI_DMABUF"),
        "{text}"
    );
}

#[test]
fn an_exporter_the_kernel_refuses_says_why() {
    for (errno, says) in [
        (libc::EOPNOTSUPP, "CONFIG_PCI_P2PDMA"),
        (libc::ENODEV, "memory decoding"),
        (libc::EINVAL, "whole pages"),
    ] {
        let fake = peer_host();
        let peer = open(&fake, 2, BAR2_LEN).expect("open");
        fake.fail("VFIO_DEVICE_FEATURE_DMA_BUF", errno);
        let text = peer.export(0, BAR2_LEN, |_| None).unwrap_err().to_string();
        assert!(
            text.contains(says) && text.contains(&format!("({errno}: ")),
            "{text}"
        );
    }
}

#[test]
fn a_peer_not_bound_to_vfio_pci_says_how_to_bind_it() {
    let fake = peer_host();
    fake.bind_driver(BDF, Some("ivshmem"));
    let err = open_err(&fake, 2, BAR2_LEN);
    assert!(
        matches!(err, PeerBarError::Vfio(VfioError::NotBoundToVfio { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("driver_override"));
}

#[test]
fn bar_numbers_past_five_do_not_exist() {
    let fake = peer_host();
    let err = open_err(&fake, 6, 4096);
    assert!(
        matches!(err, PeerBarError::NoSuchBar { bar: 6, .. }),
        "{err:?}"
    );
}
