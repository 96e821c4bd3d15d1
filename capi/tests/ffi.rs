//! The C interface called from Rust through the same `extern "C"` symbols a C program links:
//! traffic between the emulated pair (also with the two queues on two threads), and the
//! boundary's refusals.

use cxdirect_c::*;
use std::ffi::{c_int, c_void, CStr};
use std::ptr::null_mut;

fn last_error() -> String {
    // SAFETY: cxd_last_error returns a NUL-terminated string that lives until the thread's
    // next failing call.
    unsafe { CStr::from_ptr(cxd_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn ok(rc: c_int) {
    assert!(rc >= 0, "call failed with {rc}: {}", last_error());
}

/// Two started ports of the emulated pair, and their queues and pools.
struct Pair {
    devices: [*mut cxd_device; 2],
    ports: [*mut cxd_port; 2],
    txq: *mut cxd_txq,
    rxq: *mut cxd_rxq,
    pools: [*mut cxd_mempool; 2],
}

// SAFETY: the handles are the library's, usable from any thread (one caller at a time per
// queue, which the tests keep to).
unsafe impl Send for Pair {}

fn pair() -> Pair {
    let mut p = Pair {
        devices: [null_mut(); 2],
        ports: [null_mut(); 2],
        txq: null_mut(),
        rxq: null_mut(),
        pools: [null_mut(); 2],
    };
    // SAFETY: every pointer passed is a valid local out-pointer or a handle just returned.
    unsafe {
        let [a, b] = &mut p.devices;
        ok(cxd_open_emulated_pair(a, b));
        let mut cfg = std::mem::zeroed::<cxd_port_config>();
        ok(cxd_port_config_default(&mut cfg));
        cfg.ring_size = 128;
        cfg.pool_buffers = 512;
        for i in 0..2 {
            ok(cxd_port_start(p.devices[i], &cfg, &mut p.ports[i]));
            ok(cxd_port_mempool(p.ports[i], &mut p.pools[i]));
        }
        ok(cxd_port_txq(p.ports[0], 0, &mut p.txq));
        ok(cxd_port_rxq(p.ports[1], 0, &mut p.rxq));
    }
    p
}

fn close(p: Pair) {
    // SAFETY: handles returned by `pair`.
    unsafe {
        for i in 0..2 {
            ok(cxd_port_close(p.ports[i]));
            ok(cxd_device_close(p.devices[i]));
        }
    }
}

fn frame(seq: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64 + (seq as usize % 64)];
    f[..6].fill(0xff);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f.iter_mut().enumerate().skip(18) {
        *b = (seq as usize * 3 + i) as u8;
    }
    f
}

/// Sends frames `first..first + count` on `txq`, allocating from `pool`.
fn send(txq: *mut cxd_txq, pool: *mut cxd_mempool, first: u32, count: u32) {
    let mut pending: Vec<*mut cxd_mbuf> = Vec::new();
    let mut next = first;
    let count = first + count;
    while next < count || !pending.is_empty() {
        while pending.len() < 32 && next < count {
            let mut m = null_mut();
            let f = frame(next);
            // SAFETY: `pool` is a live handle, `m` a local out-pointer, `f` a live buffer.
            unsafe {
                ok(cxd_mbuf_alloc(pool, &mut m));
                ok(cxd_mbuf_set_data(m, f.as_ptr().cast(), f.len()));
            }
            pending.push(m);
            next += 1;
        }
        // SAFETY: `pending` holds `len` handles the caller owns.
        let sent = unsafe { cxd_tx_burst(txq, pending.as_mut_ptr(), pending.len() as u16) };
        ok(sent);
        pending.drain(..sent as usize);
        std::thread::yield_now();
    }
}

/// Receives frames `first..first + count` on `rxq`, checking each against `frame(seq)` in
/// order.
fn receive(rxq: *mut cxd_rxq, first: u32, count: u32) {
    let mut next = first;
    let count = first + count;
    let mut idle = 0u64;
    while next < count {
        let mut got = [null_mut(); 32];
        // SAFETY: `got` has room for 32 handles.
        let n = unsafe { cxd_rx_burst(rxq, got.as_mut_ptr(), 32) };
        ok(n);
        idle = if n == 0 { idle + 1 } else { 0 };
        assert!(idle < 10_000_000, "stalled after {next} frames");
        for &m in &got[..n as usize] {
            let want = frame(next);
            let mut buf = vec![0u8; 256];
            // SAFETY: `m` was just received; `buf` has room for 256 bytes.
            unsafe {
                assert_eq!(cxd_mbuf_len(m), want.len() as c_int);
                assert_eq!(
                    cxd_mbuf_read(m, 0, buf.as_mut_ptr().cast(), buf.len()),
                    want.len() as c_int
                );
                assert_eq!(&buf[..want.len()], &want[..], "frame {next}");
                ok(cxd_mbuf_free(m));
            }
            next += 1;
        }
    }
}

#[test]
fn frames_cross_the_pair_in_order() {
    let p = pair();
    // In rounds no larger than the receive ring (128), since nothing receives while sending.
    for round in 0..3 {
        send(p.txq, p.pools[0], round * 100, 100);
        receive(p.rxq, round * 100, 100);
    }
    let mut stats = cxd_port_stats::default();
    // SAFETY: a live port handle and a local out-pointer.
    unsafe { ok(cxd_port_stats_get(p.ports[1], &mut stats)) };
    assert_eq!(stats.ipackets, 300);
    close(p);
}

#[test]
fn a_sender_and_a_receiver_on_two_threads() {
    let p = pair();
    let (txq, pool) = (p.txq as usize, p.pools[0] as usize);
    // The sender stays within one receive ring (128) of the receiver, so that nothing is
    // dropped however the two threads are scheduled.
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = received.clone();
    let sender = std::thread::spawn(move || {
        for round in 0..40 {
            while seen.load(std::sync::atomic::Ordering::Acquire) < round * 50 {
                std::thread::yield_now();
            }
            send(
                txq as *mut cxd_txq,
                pool as *mut cxd_mempool,
                round * 50,
                50,
            );
        }
    });
    for round in 0..40 {
        receive(p.rxq, round * 50, 50);
        received.store((round + 1) * 50, std::sync::atomic::Ordering::Release);
    }
    sender.join().expect("the sender thread");
    close(p);
}

#[test]
fn refusals_have_their_codes_and_change_nothing() {
    let p = pair();
    // SAFETY: every pointer is a live handle, a handle let go of on purpose (which the library
    // must refuse), NULL, or a local out-pointer.
    unsafe {
        let mut m = null_mut();
        ok(cxd_mbuf_alloc(p.pools[0], &mut m));
        let mut info = cxd_mempool_info::default();
        ok(cxd_mempool_info_get(p.pools[0], &mut info));
        let free = info.available;

        assert_eq!(cxd_mempool_put(p.pools[1], m), Error::WrongPool as c_int);
        assert!(last_error().contains("another pool"), "{}", last_error());
        ok(cxd_mbuf_free(m));
        assert_eq!(cxd_mbuf_free(m), Error::DoubleFree as c_int);
        assert_eq!(cxd_mempool_put(p.pools[0], m), Error::DoubleFree as c_int);
        ok(cxd_mempool_info_get(p.pools[0], &mut info));
        assert_eq!(info.available, free + 1, "the buffer went back once");

        let mut arr = [null_mut(); 300];
        assert_eq!(
            cxd_rx_burst(p.rxq, arr.as_mut_ptr(), 300),
            Error::BurstTooLarge as c_int
        );
        assert!(arr.iter().all(|m| m.is_null()));
        assert_eq!(
            cxd_rx_burst(null_mut(), arr.as_mut_ptr(), 1),
            Error::Null as c_int
        );
        assert_eq!(
            cxd_port_close(p.txq.cast::<cxd_port>()),
            Error::InvalidHandle as c_int
        );
        assert_eq!(cxd_device_close(p.devices[0]), Error::Busy as c_int);

        // An mbuf handle passed where a port is expected (its tag bits mark it).
        ok(cxd_mbuf_alloc(p.pools[0], &mut m));
        ok(cxd_mbuf_free(m));
        ok(cxd_mbuf_alloc(p.pools[0], &mut m));
        assert_eq!(
            cxd_port_close(m.cast::<cxd_port>()),
            Error::InvalidHandle as c_int
        );
        ok(cxd_mbuf_free(m));

        let mut dev = null_mut();
        let address = c"0000:ff:1f.7";
        assert_eq!(
            cxd_open_pci(address.as_ptr(), &mut dev),
            Error::Open as c_int
        );
        assert!(last_error().contains("0000:ff:1f.7"), "{}", last_error());
        assert!(dev.is_null());
        assert_eq!(
            cxd_open_pci(std::ptr::null(), &mut dev),
            Error::Null as c_int
        );

        let names = CStr::from_ptr(cxd_error_name(Error::WrongPool as c_int));
        assert_eq!(names.to_str(), Ok("CXD_ERROR_WRONG_POOL"));
    }
    let ports = p.ports;
    close(p);
    // SAFETY: closed handles stay readable; the library must refuse them.
    unsafe {
        assert_eq!(cxd_port_close(ports[0]), Error::Closed as c_int);
        let mut stats = cxd_port_stats::default();
        assert_eq!(
            cxd_port_stats_get(ports[1], &mut stats),
            Error::Closed as c_int
        );
    }
}

#[test]
fn the_version_matches_the_macros() {
    // SAFETY: cxd_version returns a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(cxd_version()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        v,
        format!("{CXD_VERSION_MAJOR}.{CXD_VERSION_MINOR}.{CXD_VERSION_PATCH}")
    );
    assert_eq!(v, env!("CARGO_PKG_VERSION"));
}

#[test]
fn a_refused_configuration_names_its_field_and_leaves_the_device_usable() {
    // SAFETY: local out-pointers and handles just returned.
    unsafe {
        let (mut a, mut b) = (null_mut(), null_mut());
        ok(cxd_open_emulated_pair(&mut a, &mut b));
        let mut cfg = std::mem::zeroed::<cxd_port_config>();
        ok(cxd_port_config_default(&mut cfg));
        let mut port = null_mut();

        // Checked here, before the device is touched: it stays usable.
        cfg.inline_mode = 9;
        assert_eq!(cxd_port_start(a, &cfg, &mut port), Error::Config as c_int);
        assert!(last_error().contains("inline_mode"), "{}", last_error());

        // Checked by the driver against the device (PortConfig::validate), after bring-up and
        // before the port takes the device: it stays brought up, and a good start follows.
        ok(cxd_port_config_default(&mut cfg));
        cfg.ring_size = 100;
        assert_eq!(cxd_port_start(a, &cfg, &mut port), Error::Config as c_int);
        assert!(last_error().contains("ring_size"), "{}", last_error());
        assert!(port.is_null());
        cfg.ring_size = 1 << 20;
        assert_eq!(cxd_port_start(a, &cfg, &mut port), Error::Config as c_int);
        ok(cxd_port_config_default(&mut cfg));
        cfg.ring_size = 128;
        cfg.pool_buffers = 512;
        ok(cxd_port_start(a, &cfg, &mut port));
        ok(cxd_port_close(port));
        // Its port closed, the device is spent.
        assert_eq!(cxd_port_start(a, &cfg, &mut port), Error::Busy as c_int);
        assert!(last_error().contains("open it again"), "{}", last_error());
        ok(cxd_device_close(a));
        // A device brought up by a refused start, never started, is torn down on close.
        cfg.mtu = 10;
        assert_eq!(cxd_port_start(b, &cfg, &mut port), Error::Config as c_int);
        ok(cxd_device_close(b));
    }
}

#[test]
fn packets_are_written_and_read_in_place_through_the_data_pointer() {
    let p = pair();
    // SAFETY: handles this library returned; the data pointers are used only while their
    // mbufs are held, within the capacity returned.
    unsafe {
        let mut m = null_mut();
        ok(cxd_mbuf_alloc(p.pools[0], &mut m));
        let mut data: *mut c_void = null_mut();
        let capacity = cxd_mbuf_data(m, &mut data);
        assert!(capacity >= 1514, "{capacity}");
        assert!(!data.is_null());
        let frame = std::slice::from_raw_parts_mut(data.cast::<u8>(), 100);
        frame[..6].fill(0xff);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        for (i, b) in frame[14..].iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        let expected = frame.to_vec();
        ok(cxd_mbuf_set_len(m, 100));
        assert_eq!(cxd_mbuf_len(m), 100);
        assert_eq!(
            cxd_mbuf_set_len(m, capacity as usize + 1),
            Error::TooLong as c_int
        );
        assert_eq!(cxd_mbuf_len(m), 100);
        let mut burst = [m];
        while cxd_tx_burst(p.txq, burst.as_mut_ptr(), 1) == 0 {}
        // Sent: the handle is stale, and so is any use of its data pointer.
        assert_eq!(cxd_mbuf_data(m, &mut data), Error::DoubleFree as c_int);

        let mut got = [null_mut(); 1];
        let start = std::time::Instant::now();
        while ok_count(cxd_rx_burst(p.rxq, got.as_mut_ptr(), 1)) == 0 {
            assert!(start.elapsed().as_secs() < 20, "nothing received");
        }
        let mut rx: *mut c_void = null_mut();
        assert!(cxd_mbuf_data(got[0], &mut rx) >= 100);
        assert_eq!(cxd_mbuf_len(got[0]), 100);
        assert_eq!(
            std::slice::from_raw_parts(rx.cast::<u8>(), 100),
            &expected[..]
        );
        // Shrunk in place: the copy API sees the same bytes.
        ok(cxd_mbuf_set_len(got[0], 20));
        let mut copy = [0u8; 20];
        assert_eq!(cxd_mbuf_read(got[0], 0, copy.as_mut_ptr().cast(), 20), 20);
        assert_eq!(copy[..], expected[..20]);
        assert_eq!(cxd_mbuf_data(got[0], null_mut()), Error::Null as c_int);
        ok(cxd_mbuf_free(got[0]));
    }
    close(p);
}

fn ok_count(rc: c_int) -> c_int {
    ok(rc);
    rc
}
