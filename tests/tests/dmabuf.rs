//! Memory keys over imported dmabuf memory, through the driver and the model: the MTT the
//! driver programs, receiving into and sending from the imported pages, write protection,
//! revocation under traffic, and a 1 GiB registration.
//!
//! The buffer is a udmabuf where the host has `/dev/udmabuf`, and a memfd otherwise (the
//! import, mapping and key paths are the same; the QEMU rig runs real udmabufs).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cxdirect::{
    Device, KeyAccess, Mbuf, MemoryKey, Port, PortConfig, Queues, RxQueue, Started, TxQueue,
};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_dma::{export, DmaBuf, DmaBufMapping, DmaBufMode};
use cxdirect_emu::{Device as Model, EmuConfig};
use cxdirect_tests::setup::bring_up_patient;
use cxdirect_tests::udp_frame;

const PAGE: u64 = 4096;

fn map(
    dev: &Device<EmuBackend>,
    buf: &Arc<DmaBuf>,
    offset: u64,
    len: u64,
    mode: DmaBufMode,
) -> Arc<DmaBufMapping> {
    let (iommu, iovas) = dev.dma();
    Arc::new(buf.map(iommu, &iovas, offset, len, mode).unwrap())
}

#[test]
fn the_mtt_of_a_range_inside_a_dmabuf_is_its_trimmed_page_list() {
    let model = Model::new(EmuConfig::default());
    let mut dev = bring_up_patient(&model, "mtt");
    let keys_before = model.object_counts()[5];
    let mappings_before = model.iommu().mapping_count();
    let buf = cxdirect_tests::dmabuf(16 * PAGE, "test");
    // 300 bytes into page 1, ending 1,000 bytes into page 6.
    let (offset, len) = (PAGE + 300, 5 * PAGE - 300 + 1000);
    let mapping = map(&dev, &buf, offset, len, DmaBufMode::Pinned);
    let pages = mapping.pages();
    assert_eq!(pages.iovas.len(), 6);
    assert_eq!(pages.first_offset, 300);
    assert_eq!(pages.last_tail, (PAGE - 1000) as usize);

    let key = MemoryKey::register(&mut dev, &mapping, KeyAccess::READ_ONLY).unwrap();
    assert_eq!(mapping.keys(), 1);
    let seen = model
        .memory_key(key.lkey())
        .expect("the model holds the key");
    assert_eq!(seen.access_mode, 1, "MTT mode");
    assert_eq!(
        seen.start,
        mapping.iova(),
        "starts at the range's first byte"
    );
    assert_eq!(seen.len, len, "covers exactly the range");
    assert_eq!(seen.log_page_size, 12);
    // Bare page addresses, as Linux's `reg_create` writes them without the `pg` capability:
    // the key's `lr`/`lw` say what it allows, not the entries' rd_en/wr_en bits.
    let expected: Vec<u64> = pages.iovas.clone();
    assert_eq!(seen.mtt, expected, "one bare entry per page, in order");
    assert!(!seen.pg_access, "no page-access mode");
    assert!(seen.local_read && !seen.local_write);
    assert_eq!(key.entries(), 6);

    key.deregister(&mut dev).unwrap();
    assert_eq!(mapping.keys(), 0);
    assert_eq!(model.object_counts()[5], keys_before);
    drop(mapping);
    assert_eq!(
        model.iommu().mapping_count(),
        mappings_before,
        "the range is unmapped"
    );
    dev.teardown().unwrap();
}

struct Pair {
    tx_port: Port<EmuBackend>,
    tx: TxQueue<EmuBackend>,
    /// The sending port's receive queue (for packets sent back from the dmabuf).
    echo_rx: RxQueue<EmuBackend>,
    rx_port: Port<EmuBackend>,
    rx: RxQueue<EmuBackend>,
    /// The receiving port's send queue (it sends from the dmabuf pool).
    echo_tx: TxQueue<EmuBackend>,
    rx_model: Model,
    mapping: Arc<DmaBufMapping>,
}

fn pair(mode: DmaBufMode, access: KeyAccess) -> Pair {
    let (a, b) = Model::pair(EmuConfig::default(), EmuConfig::default());
    let da = bring_up_patient(&a, "tx");
    let db = bring_up_patient(&b, "rx");
    let buf = cxdirect_tests::dmabuf(256 * 2048, "test");
    let mapping = map(&db, &buf, 0, 256 * 2048, mode);
    let base = PortConfig {
        ring_size: 64,
        pool_buffers: 1024,
        ..PortConfig::default()
    };
    let Started {
        port: tx_port,
        queues: Queues {
            tx: mut a_tx,
            rx: mut a_rx,
        },
    } = Port::start(da, base.clone()).unwrap();
    let Started {
        port: rx_port,
        queues: Queues {
            tx: mut b_tx,
            rx: mut b_rx,
        },
    } = Port::start(
        db,
        PortConfig {
            pool_memory: Some(mapping.clone()),
            pool_access: access,
            ..base
        },
    )
    .unwrap();
    assert_eq!(
        rx_port.pool().capacity(),
        256,
        "the pool is the dmabuf range"
    );
    Pair {
        tx_port,
        tx: a_tx.remove(0),
        echo_rx: a_rx.remove(0),
        rx_port,
        rx: b_rx.remove(0),
        echo_tx: b_tx.remove(0),
        rx_model: b,
        mapping,
    }
}

fn send_all(tx: &mut TxQueue<EmuBackend>, mut batch: Vec<Mbuf>) {
    let mut spins = 0;
    while !batch.is_empty() {
        tx.tx_burst(&mut batch);
        spins += 1;
        assert!(spins < 100_000, "send stalled");
    }
}

fn receive(rx: &mut RxQueue<EmuBackend>) -> Vec<Mbuf> {
    let mut got = Vec::new();
    while rx.rx_burst(&mut got, 32).unwrap() > 0 {}
    got
}

impl Pair {
    fn send(&mut self, first: u32, count: u32) {
        let batch: Vec<Mbuf> = (first..first + count)
            .map(|seq| {
                let mut m = self.tx_port.pool().alloc().unwrap();
                m.set_data(&udp_frame(seq, 7000)).unwrap();
                m
            })
            .collect();
        send_all(&mut self.tx, batch);
    }
}

#[test]
fn packets_land_in_the_dmabuf_and_are_sent_from_it() {
    let mut p = pair(DmaBufMode::Pinned, KeyAccess::READ_WRITE);
    let before = p.rx_model.counters();
    p.send(0, 40);
    let got = receive(&mut p.rx);
    assert_eq!(got.len(), 40);
    for (seq, m) in got.iter().enumerate() {
        let want = udp_frame(seq as u32, 7000);
        // Read straight from the exported memory, not through the mbuf.
        let mut seen = vec![0u8; want.len()];
        p.mapping.read(m.memory_offset(), &mut seen).unwrap();
        assert_eq!(seen, want, "packet {seq} is in the dmabuf at its buffer");
        assert_eq!(m.to_vec(), want);
    }
    let after = p.rx_model.counters();
    assert_eq!(after.payload_writes - before.payload_writes, 40);

    // Send the same buffers back out: the device gathers from the imported pages.
    send_all(&mut p.echo_tx, got);
    let mut echoed = Vec::new();
    for _ in 0..10_000 {
        p.echo_rx.rx_burst(&mut echoed, 64).unwrap();
        if echoed.len() == 40 {
            break;
        }
    }
    assert_eq!(echoed.len(), 40);
    for (seq, m) in echoed.iter().enumerate() {
        assert_eq!(m.to_vec(), udp_frame(seq as u32, 7000), "echo {seq}");
    }
    drop(echoed);
    p.rx_port.close().unwrap().teardown().unwrap();
    p.tx_port.close().unwrap().teardown().unwrap();
}

#[test]
fn a_receive_through_a_key_without_write_access_is_a_local_protection_error() {
    let mut p = pair(DmaBufMode::Pinned, KeyAccess::READ_ONLY);
    let watched = p
        .rx_model
        .iommu()
        .watch(p.mapping.iova(), p.mapping.len() as u64);
    p.send(0, 1);
    let got = receive(&mut p.rx);
    assert!(got.is_empty());
    let stats = p.rx.stats();
    assert_eq!(stats.errors, 1, "{stats:?}");
    assert_eq!(stats.last_error_syndrome, 0x04, "local protection");
    assert_eq!(
        watched.load(Ordering::Relaxed),
        0,
        "the device wrote nothing into the read-only pages"
    );
    p.rx_port.close().unwrap().teardown().unwrap();
}

#[test]
fn a_revoked_dmabuf_is_never_touched_again_and_its_queue_reports_errors() {
    let mut p = pair(DmaBufMode::Revocable, KeyAccess::READ_WRITE);
    p.send(0, 10);
    assert_eq!(receive(&mut p.rx).len(), 10, "traffic before revocation");

    // The exporter announces the memory goes away; the importer revokes.
    p.mapping.request_revoke();
    assert!(p.mapping.revoke_requested());
    let pool_key = p.rx_port.pool().lkey();
    let invalidated = p.rx_port.device().revoke_memory(&p.mapping).unwrap();
    assert_eq!(invalidated, 1, "the pool's key");
    assert!(p.mapping.is_revoked());
    assert!(
        p.rx_model.memory_key(pool_key).is_none(),
        "the key is gone from the device"
    );
    let watched = p
        .rx_model
        .iommu()
        .watch(p.mapping.iova(), p.mapping.len() as u64);

    p.send(10, 20);
    let got = receive(&mut p.rx);
    assert!(got.is_empty(), "nothing is received into revoked memory");
    let stats = p.rx.stats();
    assert!(stats.errors >= 1, "{stats:?}");
    assert_eq!(stats.last_error_syndrome, 0x04);
    assert_eq!(
        watched.load(Ordering::Relaxed),
        0,
        "zero device accesses to the revoked pages"
    );
    assert!(
        p.mapping.read(0, &mut [0u8; 4]).is_err(),
        "the CPU view is gone too"
    );
    // Closing destroys what is left; the revoked key is not destroyed twice.
    drop(p.rx);
    p.rx_port.close().unwrap().teardown().unwrap();
}

#[test]
fn a_one_gib_registration_spans_many_mailboxes_and_deregistration_frees_everything() {
    let model = Model::new(EmuConfig::default());
    let mut dev = bring_up_patient(&model, "big");
    let pages_before = model.firmware_pages_held();
    let keys_before = model.object_counts()[5];
    let mappings_before = model.iommu().mapping_count();
    // A memfd: 1 GiB of address space, no memory until touched.
    let buf = DmaBuf::from_memfd(export::memfd("one-gib", 1 << 30).unwrap()).unwrap();
    let mapping = map(&dev, &buf, 0, 1 << 30, DmaBufMode::Pinned);
    let key = MemoryKey::register(&mut dev, &mapping, KeyAccess::READ_WRITE).unwrap();
    assert_eq!(key.entries(), 262_144);
    assert_eq!(key.len(), 1 << 30);
    let seen = model.memory_key(key.lkey()).unwrap();
    assert_eq!(seen.mtt.len(), 262_144);
    assert_eq!(seen.mtt.first(), Some(&mapping.iova()));
    assert_eq!(seen.mtt.last(), Some(&(mapping.iova() + (1 << 30) - PAGE)));
    let lkey = key.lkey();
    key.deregister(&mut dev).unwrap();
    assert_eq!(model.object_counts()[5], keys_before);
    assert!(model.memory_key(lkey).is_none());
    drop(mapping);
    assert_eq!(model.iommu().mapping_count(), mappings_before);
    assert_eq!(model.firmware_pages_held(), pages_before);
    let report = dev.teardown().unwrap();
    assert_eq!(report.pages_kept, 0);
}

#[test]
fn revoking_the_pool_stops_its_queues_first_and_new_memory_restarts_them() {
    let Pair {
        tx_port,
        mut tx,
        echo_rx,
        mut rx_port,
        rx,
        echo_tx,
        rx_model,
        mapping,
    } = pair(DmaBufMode::Revocable, KeyAccess::READ_WRITE);
    let mut send = |first: u32, count: u32| {
        let batch = (first..first + count)
            .map(|seq| {
                let mut m = tx_port.pool().alloc().unwrap();
                m.set_data(&udp_frame(seq, 7000)).unwrap();
                m
            })
            .collect();
        send_all(&mut tx, batch);
    };
    let mut queues = Queues {
        tx: vec![echo_tx],
        rx: vec![rx],
    };
    // Ten frames completed and not yet taken when the exporter asks for the memory back.
    send(0, 10);
    assert!(!rx_port.pool_revoke_requested());
    mapping.request_revoke();
    assert!(rx_port.pool_revoke_requested());
    let old_pool = rx_port.pool().clone();
    let r = rx_port.revoke_pool(&mut queues).unwrap();
    assert_eq!(r.keys, 1, "the pool's key");
    assert_eq!(
        r.drained_cqes, 10,
        "completed frames are taken, not delivered"
    );
    assert_eq!(r.flushed, 64, "every posted buffer, once");
    assert!(mapping.is_revoked() && rx_port.pool_revoked());
    assert_eq!(
        old_pool.available(),
        old_pool.capacity(),
        "all back, none twice"
    );
    assert!(queues.rx[0].in_error() && queues.tx[0].in_error());
    assert!(
        rx_port.recover_rx(&mut queues.rx[0]).is_err(),
        "no restart over revoked memory"
    );
    assert!(rx_port.revoke_pool(&mut queues).is_err(), "revoked already");

    // Frames arriving now are dropped by the device, which never touches the old pages.
    let watched = rx_model.iommu().watch(mapping.iova(), mapping.len() as u64);
    let drops = rx_model.counters().rx_steer_drops;
    send(10, 5);
    assert!(receive(&mut queues.rx[0]).is_empty());
    assert_eq!(rx_model.counters().rx_steer_drops - drops, 5);
    assert_eq!(watched.load(Ordering::Relaxed), 0);

    // The application imports the buffer again and gives the port the new mapping.
    let again = map(
        rx_port.device(),
        mapping.dmabuf(),
        0,
        256 * 2048,
        DmaBufMode::Revocable,
    );
    rx_port
        .replace_pool_memory(&mut queues, again.clone())
        .unwrap();
    assert!(!rx_port.pool_revoked());
    assert_eq!(rx_port.pool().capacity(), 256);
    assert_eq!(queues.rx[0].posted(), 64);
    send(100, 20);
    let got = receive(&mut queues.rx[0]);
    assert_eq!(got.len(), 20, "traffic resumed on the new memory");
    for (i, m) in got.iter().enumerate() {
        let want = udp_frame(100 + i as u32, 7000);
        let mut seen = vec![0u8; want.len()];
        again.read(m.memory_offset(), &mut seen).unwrap();
        assert_eq!(seen, want, "in the new mapping");
    }
    drop(got);
    drop(queues);
    rx_port.close().unwrap().teardown().unwrap();
    drop((tx, echo_rx));
    tx_port.close().unwrap().teardown().unwrap();
    assert_eq!(old_pool.available(), old_pool.capacity());
}
