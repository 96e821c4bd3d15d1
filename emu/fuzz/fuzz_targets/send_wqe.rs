//! A hostile driver's send queue: arbitrary WQE bytes in the ring, an arbitrary producer
//! index, fetched or written as BlueFlame. The model must complete, fail with an error CQE, or
//! refuse the doorbell — never panic, hang, or touch memory outside the IOMMU. Opcodes come
//! from the input bytes, so every send opcode the model knows (NOP, SEND, LSO, enhanced
//! multi-packet send) is reached along with unknown ones.

#![no_main]

use cxdirect_emu::testkit::Host;
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::doorbell::UAR_BF_OFFSET;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (control, wqes) = data.split_at(2);
    let mut host = Host::new(Device::loopback(EmuConfig::default()), 4 << 20);
    host.bring_up();
    let key = host.create_mkey(control[1] & 1 != 0, true);
    let mut cq = host.create_cq(4);
    let tisn = host.create_tis();
    // Bit 2 lets the SQ take enhanced multi-packet WQEs, so both parsers are fuzzed.
    let sq = host
        .try_create_sq(cq.cqn, tisn, 4, control[1] & 4 != 0)
        .expect("CREATE_SQ");
    let mut rx_cq = host.create_cq(4);
    let mut rq = host.create_rq(rx_cq.cqn, 4, None);
    host.steer_all_to(rq.rqn);
    for _ in 0..8 {
        let buf = host.alloc(2048, 64);
        host.post_recv(&mut rq, buf, 2048, key);
    }
    // Up to the whole 16-WQEBB ring from the input; the rest stays zero.
    let ring = &wqes[..wqes.len().min(16 * 64)];
    host.write(sq.buf, ring);
    let pi = u16::from(control[0]);
    host.write_be32(sq.dbr + 4, u32::from(pi));
    let reg = host.uar_base() + UAR_BF_OFFSET as u64;
    let mut first = [0u8; 64];
    first[..ring.len().min(64)].copy_from_slice(&ring[..ring.len().min(64)]);
    let bytes: &[u8] = if control[1] & 2 != 0 {
        &first
    } else {
        &first[..8]
    };
    let _ = host.dev.mmio_write(reg, bytes);
    while host.poll_cq(&mut cq).is_some() {}
    while host.poll_cq(&mut rx_cq).is_some() {}
});
