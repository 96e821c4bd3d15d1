//! A port's flow rules, receive interrupts, shared receive ring and pool in the program's
//! memory, called from Rust through the same `extern "C"` symbols a C program links.

use cxdirect_c::*;
use std::ffi::{c_int, CStr};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: cxd_last_error returns a NUL-terminated string that lives until the thread's
    // next failing call.
    unsafe { CStr::from_ptr(cxd_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn ok(rc: c_int) -> c_int {
    assert!(rc >= 0, "call failed with {rc}: {}", last_error());
    rc
}

/// The emulated pair, started: A with `cfg`, B with `cfg` and `b_flags`, `b_queues` receive
/// queues.
struct Pair {
    devices: [*mut cxd_device; 2],
    ports: [*mut cxd_port; 2],
    txq: *mut cxd_txq,
    rxqs: Vec<*mut cxd_rxq>,
    pool: *mut cxd_mempool,
}

fn pair(b_queues: u16, b_flags: u32) -> Pair {
    pair_with(b_queues, b_flags, 0)
}

fn pair_with(b_queues: u16, b_flags: u32, shared_ring: u32) -> Pair {
    let mut p = Pair {
        devices: [null_mut(); 2],
        ports: [null_mut(); 2],
        txq: null_mut(),
        rxqs: vec![null_mut(); usize::from(b_queues)],
        pool: null_mut(),
    };
    // SAFETY: valid local out-pointers and handles just returned.
    unsafe {
        let [a, b] = &mut p.devices;
        ok(cxd_open_emulated_pair(a, b));
        let mut cfg = std::mem::zeroed::<cxd_port_config>();
        ok(cxd_port_config_default(&mut cfg));
        cfg.ring_size = 128;
        cfg.pool_buffers = 1024;
        ok(cxd_port_start(p.devices[0], &cfg, &mut p.ports[0]));
        cfg.rx_queues = b_queues;
        cfg.flags |= b_flags;
        cfg.shared_ring_size = shared_ring;
        cfg.shared_limit = shared_ring / 4;
        ok(cxd_port_start(p.devices[1], &cfg, &mut p.ports[1]));
        ok(cxd_port_txq(p.ports[0], 0, &mut p.txq));
        ok(cxd_port_mempool(p.ports[0], &mut p.pool));
        for (i, q) in p.rxqs.iter_mut().enumerate() {
            ok(cxd_port_rxq(p.ports[1], i as u16, q));
        }
    }
    p
}

fn close(p: Pair) {
    // SAFETY: handles returned by `pair`, no other call using them.
    unsafe {
        for i in 0..2 {
            ok(cxd_port_close(p.ports[i]));
            ok(cxd_device_close(p.devices[i]));
        }
    }
}

/// Sends one frame of EtherType `ethertype` from A.
fn send(p: &Pair, ethertype: u16) {
    let mut f = [0u8; 64];
    f[..6].fill(0xff);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    let mut m = null_mut();
    // SAFETY: live handles, a local out-pointer and buffer.
    unsafe {
        ok(cxd_mbuf_alloc(p.pool, &mut m));
        ok(cxd_mbuf_set_data(m, f.as_ptr().cast(), f.len()));
        assert_eq!(ok(cxd_tx_burst(p.txq, &mut m, 1)), 1);
    }
}

/// Takes what receive queue `q` of B holds now: the frames' count (freed).
fn drain(p: &Pair, q: usize) -> usize {
    let mut got = [null_mut(); 32];
    // SAFETY: room for 32 handles; each received handle is freed once.
    unsafe {
        let n = ok(cxd_rx_burst(p.rxqs[q], got.as_mut_ptr(), 32)) as usize;
        for &m in &got[..n] {
            ok(cxd_mbuf_free(m));
        }
        n
    }
}

fn ethertype_rule(ethertype: u16) -> cxd_flow_match {
    cxd_flow_match {
        kind: CXD_FLOW_ETHERTYPE,
        ethertype,
        ..cxd_flow_match::default()
    }
}

#[test]
fn an_ethertype_rule_steers_to_its_queue_until_destroyed() {
    let p = pair(2, 0);
    let mut flow = null_mut();
    // SAFETY: live handles and local out-pointers.
    unsafe {
        ok(cxd_flow_create(
            p.ports[1],
            &ethertype_rule(0x88b6),
            1,
            &mut flow,
        ));
        for _ in 0..16 {
            send(&p, 0x88b6);
        }
        let mut got = [0; 2];
        for _ in 0..1000 {
            got[0] += drain(&p, 0);
            got[1] += drain(&p, 1);
        }
        assert_eq!(got, [0, 16], "every frame of the EtherType on queue 1");
        ok(cxd_flow_destroy(flow));
        assert_eq!(cxd_flow_destroy(flow), Error::Closed as c_int);
    }
    close(p);
}

#[test]
fn refused_matches_have_their_codes_and_install_nothing() {
    let p = pair(1, 0);
    let mut flow = null_mut();
    let ip = |version, protocol, fields| cxd_flow_match {
        kind: CXD_FLOW_IP,
        ip_version: version,
        protocol,
        fields,
        dst_port: 53,
        ..cxd_flow_match::default()
    };
    // SAFETY: live handles, local structs and out-pointers; NULLs where the test says so.
    unsafe {
        let cases = [
            (ip(4, 99, 0), Error::InvalidArgument, "protocol"),
            (ip(7, CXD_FLOW_UDP, 0), Error::InvalidArgument, "ip_version"),
            (ip(4, CXD_FLOW_UDP, 0x40), Error::InvalidArgument, "fields"),
            (
                ip(4, CXD_FLOW_ICMP, CXD_FLOW_DST_PORT),
                Error::Config,
                "port",
            ),
            (ip(6, CXD_FLOW_ICMP, 0), Error::Config, "ip"),
            (
                cxd_flow_match {
                    fields: CXD_FLOW_DST_PORT,
                    ..ethertype_rule(0x0806)
                },
                Error::InvalidArgument,
                "fields",
            ),
        ];
        for (rule, code, word) in cases {
            assert_eq!(
                cxd_flow_create(p.ports[1], &rule, 0, &mut flow),
                code as c_int,
                "{rule:?}"
            );
            assert!(last_error().contains(word), "{word}: {}", last_error());
            assert!(flow.is_null());
        }
        let good = ip(4, CXD_FLOW_UDP, CXD_FLOW_DST_PORT);
        assert_eq!(
            cxd_flow_create(p.ports[1], &good, 1, &mut flow),
            Error::InvalidArgument as c_int
        );
        assert_eq!(
            cxd_flow_create(p.ports[1], null(), 0, &mut flow),
            Error::Null as c_int
        );
        assert_eq!(
            cxd_flow_create(p.ports[1], &good, 0, null_mut()),
            Error::Null as c_int
        );
        assert_eq!(
            cxd_flow_create(p.txq.cast(), &good, 0, &mut flow),
            Error::InvalidHandle as c_int
        );
        // The port still takes a good rule, which closes with it.
        ok(cxd_flow_create(p.ports[1], &good, 0, &mut flow));
        close(p);
        assert_eq!(cxd_flow_destroy(flow), Error::Closed as c_int);
    }
}

#[test]
fn an_armed_queue_fires_once_per_arming() {
    let p = pair(1, CXD_PORT_RX_INTERRUPTS);
    let q = p.rxqs[0];
    // SAFETY: live handles.
    unsafe {
        assert!(ok(cxd_rxq_interrupt_fd(q)) >= 0);
        // Not armed: a frame fires nothing.
        send(&p, 0x88b5);
        assert_eq!(cxd_rxq_interrupt_ack(q), 0);
        assert_eq!(drain(&p, 0), 1);
        for _ in 0..3 {
            ok(cxd_rxq_interrupt_arm(q));
            assert_eq!(cxd_rxq_interrupt_ack(q), 0, "nothing came yet");
            send(&p, 0x88b5);
            assert_eq!(
                cxd_rxq_interrupt_ack(q),
                1,
                "the frame fired the armed queue"
            );
            assert_eq!(cxd_rxq_interrupt_ack(q), 0, "once");
            assert_eq!(drain(&p, 0), 1);
        }
    }
    close(p);
    let p = pair(1, 0);
    // SAFETY: live handles.
    unsafe {
        assert_eq!(cxd_rxq_interrupt_fd(p.rxqs[0]), Error::Config as c_int);
        assert_eq!(cxd_rxq_interrupt_ack(p.rxqs[0]), Error::Config as c_int);
        assert_eq!(cxd_rxq_interrupt_arm(null_mut()), Error::Null as c_int);
    }
    close(p);
}

#[test]
fn a_shared_ring_reports_its_limit_and_takes_refills() {
    let p = pair_with(2, CXD_PORT_RX_INTERRUPTS, 64);
    let port = p.ports[1];
    // SAFETY: live handles and a local out-pointer.
    unsafe {
        assert_eq!(cxd_port_shared_outstanding(port), 63);
        assert!(ok(cxd_port_event_fd(port)) >= 0);
        // A shared queue has its interrupt too.
        ok(cxd_rxq_interrupt_arm(p.rxqs[0]));
        for _ in 0..50 {
            send(&p, 0x88b5);
        }
        let received: usize = (0..1000).map(|_| drain(&p, 0) + drain(&p, 1)).sum();
        assert_eq!(received, 50);
        assert_eq!(cxd_rxq_interrupt_ack(p.rxqs[0]), 1);
        let mut posted = u32::MAX;
        assert_eq!(cxd_port_shared_limit_reached(port, &mut posted), 1);
        assert!(posted < 16, "{posted}");
        assert_eq!(cxd_port_shared_limit_reached(port, null_mut()), 0);
        assert_eq!(cxd_port_shared_refill(port), 50);
        assert_eq!(cxd_port_shared_arm_limit(port, 64), Error::Config as c_int);
        ok(cxd_port_shared_arm_limit(port, 16));
        assert_eq!(cxd_port_shared_limit_reached(port, null_mut()), 0);
        assert_eq!(
            cxd_port_shared_refill(p.ports[0]),
            Error::Config as c_int,
            "a port with a ring per queue"
        );
    }
    close(p);
}

#[test]
fn a_port_on_a_memfd_receives_into_it() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let len = 128 * 2048u64;
    let memfd = cxdirect_dma::export::memfd("cxdirect-c-pool", len).expect("a memfd");
    let file = std::fs::File::from(memfd.try_clone().expect("a second descriptor"));
    let (mut a, mut b) = (null_mut(), null_mut());
    let (mut port_a, mut port_b) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers, handles just returned, a live descriptor.
    unsafe {
        ok(cxd_open_emulated_pair(&mut a, &mut b));
        let mut cfg = std::mem::zeroed::<cxd_port_config>();
        ok(cxd_port_config_default(&mut cfg));
        cfg.ring_size = 64;
        cfg.pool_buffers = 512;
        ok(cxd_port_start(a, &cfg, &mut port_a));
        assert_eq!(
            cxd_port_start_on_memory(b, &cfg, memfd.as_raw_fd(), 0, len * 2, &mut port_b),
            Error::InvalidArgument as c_int
        );
        ok(cxd_port_start_on_memory(
            b,
            &cfg,
            memfd.as_raw_fd(),
            0,
            len,
            &mut port_b,
        ));
        let mut p = Pair {
            devices: [a, b],
            ports: [port_a, port_b],
            txq: null_mut(),
            rxqs: vec![null_mut()],
            pool: null_mut(),
        };
        ok(cxd_port_txq(port_a, 0, &mut p.txq));
        ok(cxd_port_mempool(port_a, &mut p.pool));
        ok(cxd_port_rxq(port_b, 0, &mut p.rxqs[0]));
        let mut info = cxd_mempool_info::default();
        let mut pool_b = null_mut();
        ok(cxd_port_mempool(port_b, &mut pool_b));
        ok(cxd_mempool_info_get(pool_b, &mut info));
        assert_eq!(info.capacity, 128);
        for _ in 0..10 {
            send(&p, 0x88b7);
            let mut m = null_mut();
            while ok(cxd_rx_burst(p.rxqs[0], &mut m, 1)) == 0 {}
            let mut at = 0u64;
            ok(cxd_mbuf_memory_offset(m, &mut at));
            let mut seen = [0u8; 14];
            file.read_exact_at(&mut seen, at).expect("read the memfd");
            assert_eq!(&seen[12..14], &[0x88, 0xb7], "the frame is in the memfd");
            ok(cxd_mbuf_free(m));
        }
        close(p);
    }
}

/// The traffic class and link speed calls on a running port: the link at 1 Gb/s and back, a
/// speed the port lacks refused with the offered ones named, priority 3 in class 3 with a
/// rate limit, ETS shares of 75 and 25 with the rest at 0%, and selections that are refused
/// (shares not adding up to 100, a kind with a percent it does not take, an unknown kind).
#[test]
fn a_ports_traffic_classes_and_link_speed_are_set_through_the_c_calls() {
    let p = pair(1, 0);
    let port = p.ports[0];
    // SAFETY: a port handle from `pair`, valid local out-pointers and arrays.
    unsafe {
        let mut mbps = 0u32;
        ok(cxd_port_link_speed(port, &mut mbps));
        assert_eq!(mbps, 100_000);
        ok(cxd_port_set_link_speed(port, 1_000));
        ok(cxd_port_link_speed(port, &mut mbps));
        assert_eq!(mbps, 1_000);
        assert_eq!(
            cxd_port_set_link_speed(port, 56_000),
            Error::Config as c_int
        );
        assert!(
            last_error().contains("1000, 10000, 25000, 40000, 50000, 100000"),
            "{}",
            last_error()
        );
        ok(cxd_port_set_link_speed(port, 0));
        ok(cxd_port_link_speed(port, &mut mbps));
        assert_eq!(mbps, 100_000);

        ok(cxd_port_set_priority_class(port, 3, 3));
        ok(cxd_port_set_class_rate_limit(port, 3, 100));
        ok(cxd_port_set_class_rate_limit(port, 3, 0));
        assert!(cxd_port_set_priority_class(port, 8, 0) < 0);

        let ets = |percent| cxd_class_selection {
            kind: CXD_CLASS_ETS,
            percent,
        };
        let mut classes = [ets(0); 8];
        classes[0] = ets(75);
        classes[3] = ets(25);
        ok(cxd_port_set_class_selection(port, classes.as_ptr(), 8));
        let mut held = [cxd_class_settings::default(); 8];
        assert_eq!(cxd_port_class_settings(port, held.as_mut_ptr(), 8), 8);
        let chosen: Vec<(u8, u8)> = held.iter().map(|c| (c.group, c.percent)).collect();
        assert_eq!(
            chosen,
            vec![
                (1, 75),
                (0, 16),
                (0, 16),
                (1, 25),
                (0, 16),
                (0, 16),
                (0, 16),
                (0, 20)
            ],
            "mlx5e's groups and shares: six classes at 0% split 100% among them"
        );
        let mut prio_tc = [0u8; 8];
        ok(cxd_port_priority_classes(port, prio_tc.as_mut_ptr()));
        assert_eq!(prio_tc[3], 3);
        classes[3] = ets(20);
        assert!(cxd_port_set_class_selection(port, classes.as_ptr(), 8) < 0);
        assert!(last_error().contains("100"), "{}", last_error());
        classes[3] = cxd_class_selection {
            kind: CXD_CLASS_STRICT,
            percent: 25,
        };
        assert!(cxd_port_set_class_selection(port, classes.as_ptr(), 8) < 0);
        classes[3] = cxd_class_selection {
            kind: 9,
            percent: 0,
        };
        assert!(cxd_port_set_class_selection(port, classes.as_ptr(), 8) < 0);
        assert!(cxd_port_set_class_selection(port, null(), 8) < 0);
    }
    close(p);
}
