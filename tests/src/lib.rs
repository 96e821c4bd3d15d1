//! cxdirect-tests: end-to-end tests of the driver against the device model, and the QEMU rig
//! (`tests/qemu/`) that runs the model behind vfio-user under a real guest kernel. The library
//! holds what several test files share.

pub mod events;
pub mod rdma_side;
pub mod setup;
pub mod traffic_class;

/// A 128-byte UDP/IPv4 frame to destination port `dport` carrying `seq` (big-endian at byte
/// 42) and a payload derived from it, with valid checksums.
pub fn udp_frame(seq: u32, dport: u16) -> Vec<u8> {
    udp_frame_sized(128, seq, 4000, dport)
}

/// A UDP/IPv4 frame of `len` bytes (at least 46) from source port `sport` to `dport`, carrying
/// `seq` (big-endian at byte 42) and a payload derived from it, with valid checksums.
pub fn udp_frame_sized(len: usize, seq: u32, sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[46..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(i as u8);
    }
    cxdirect_emu::packet::insert_checksums(&mut f, true, true).unwrap();
    f
}

/// A dmabuf of `size` bytes (a multiple of 4096): a udmabuf when the host can export one, else
/// a memfd named `memfd_name`.
pub fn dmabuf(size: u64, memfd_name: &str) -> std::sync::Arc<cxdirect_dma::DmaBuf> {
    use cxdirect_dma::{export, DmaBuf};
    match export::udmabuf(size) {
        Ok(u) => DmaBuf::import_with_backing(u.dmabuf, u.memfd, 0).unwrap(),
        Err(_) => DmaBuf::from_memfd(export::memfd(memfd_name, size).unwrap()).unwrap(),
    }
}

/// Sends `count` frames ([`udp_frame`] 0..count to port 9000) from `tx` and returns how many
/// `rx` received. Meant for the inline-executing emulated pair, where a burst has reached the
/// peer's ring when `tx_burst` returns.
pub fn send_and_receive(
    tx: &mut cxdirect::TxQueue<cxdirect_apps::emulated::EmuBackend>,
    pool: &cxdirect::Mempool,
    rx: &mut cxdirect::RxQueue<cxdirect_apps::emulated::EmuBackend>,
    count: u32,
) -> usize {
    let mut batch: Vec<cxdirect::Mbuf> = (0..count)
        .map(|i| {
            let mut m = pool.alloc().expect("tx buffer");
            m.set_data(&udp_frame(i, 9000))
                .expect("frame fits a buffer");
            m
        })
        .collect();
    for _ in 0..100 {
        if batch.is_empty() {
            break;
        }
        tx.tx_burst(&mut batch);
    }
    let mut got = Vec::new();
    while rx.rx_burst(&mut got, 64).unwrap() > 0 {}
    got.len()
}

/// Sends every buffer of `batch` on `tx`, retrying what a full ring refuses; panics (naming
/// how many are left) when 1,000 bursts do not drain it.
pub fn send_all(
    tx: &mut cxdirect::TxQueue<cxdirect_apps::emulated::EmuBackend>,
    batch: &mut Vec<cxdirect::Mbuf>,
) {
    for _ in 0..1000 {
        if batch.is_empty() {
            return;
        }
        tx.tx_burst(batch);
    }
    panic!("send stalled with {} frames left", batch.len());
}
