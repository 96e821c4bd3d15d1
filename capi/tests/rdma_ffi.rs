//! The RDMA verbs called from Rust through the same `extern "C"` symbols a C program links:
//! two emulated functions with a connected RC queue pair each, RDMA WRITE and READ verified,
//! SENDs received on another thread than the one posting them, and the boundary's refusals.

use cxdirect_c::*;
use std::ffi::{c_int, CStr};
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

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

const ALL: u32 = CXD_ACCESS_LOCAL_WRITE | CXD_ACCESS_REMOTE_READ | CXD_ACCESS_REMOTE_WRITE;
const LEN: usize = 1 << 16;

/// One side: device, RDMA, PD, CQ, a region and a QP.
#[derive(Clone, Copy)]
struct Side {
    dev: *mut cxd_device,
    rdma: *mut cxd_rdma,
    pd: *mut cxd_pd,
    cq: *mut cxd_cq,
    mr: *mut cxd_mr,
    qp: *mut cxd_qp,
    info: cxd_mr_info,
}

// SAFETY: the handles are the library's, usable from any thread (one caller at a time per
// queue pair and completion queue, which the tests keep to).
unsafe impl Send for Side {}

fn side(dev: *mut cxd_device, ip: &CStr) -> Side {
    let mut s = Side {
        dev,
        rdma: null_mut(),
        pd: null_mut(),
        cq: null_mut(),
        mr: null_mut(),
        qp: null_mut(),
        info: cxd_mr_info::default(),
    };
    // SAFETY: valid out-pointers and handles just returned.
    unsafe {
        ok(cxd_rdma_open(dev, ip.as_ptr(), &mut s.rdma));
        ok(cxd_pd_alloc(s.rdma, &mut s.pd));
        ok(cxd_cq_create(s.rdma, 1024, &mut s.cq));
        ok(cxd_mr_alloc(s.pd, LEN, ALL, &mut s.mr));
        ok(cxd_mr_query(s.mr, &mut s.info));
        let mut caps = std::mem::zeroed::<cxd_qp_caps>();
        ok(cxd_qp_caps_default(&mut caps));
        caps.max_recv_wr = 512;
        caps.max_send_wr = 256;
        ok(cxd_qp_create(s.pd, s.cq, null_mut(), &caps, &mut s.qp));
    }
    s
}

fn connected() -> (Side, Side) {
    let (mut a, mut b) = (null_mut(), null_mut());
    // SAFETY: valid out-pointers and handles just returned.
    unsafe {
        ok(cxd_open_emulated_pair(&mut a, &mut b));
        let (a, b) = (side(a, c"10.1.0.1"), side(b, c"10.1.0.2"));
        let (mut ea, mut eb) = (cxd_endpoint::default(), cxd_endpoint::default());
        ok(cxd_qp_endpoint(a.qp, &mut ea));
        ok(cxd_qp_endpoint(b.qp, &mut eb));
        ok(cxd_qp_connect(a.qp, &eb, null()));
        ok(cxd_qp_connect(b.qp, &ea, null()));
        (a, b)
    }
}

fn close(s: Side) {
    // SAFETY: handles this library returned, no other call using them.
    unsafe {
        ok(cxd_qp_destroy(s.qp));
        ok(cxd_mr_dereg(s.mr));
        ok(cxd_cq_destroy(s.cq));
        ok(cxd_pd_dealloc(s.pd));
        ok(cxd_rdma_close(s.rdma));
        ok(cxd_device_close(s.dev));
    }
}

/// Polls `want` for one completion, running `other`'s model with empty polls meanwhile.
fn wait(want: &Side, other: &Side) -> cxd_wc {
    let start = Instant::now();
    let mut wc = [cxd_wc::default(); 1];
    loop {
        // SAFETY: room for one completion; handles this library returned.
        unsafe {
            if ok(cxd_cq_poll(want.cq, wc.as_mut_ptr(), 1)) == 1 {
                return wc[0];
            }
            ok(cxd_cq_poll(other.cq, null_mut(), 0));
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no completion");
    }
}

fn post(qp: *mut cxd_qp, wr: &cxd_send_wr) {
    // SAFETY: one request whose list outlives the call.
    unsafe { ok(cxd_qp_post_send(qp, wr, 1, null_mut())) };
}

fn rdma(wr_id: u64, opcode: u32, sge: &cxd_sge, remote: u64, rkey: u32) -> cxd_send_wr {
    cxd_send_wr {
        wr_id,
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: CXD_SEND_SIGNALED,
        imm_data: 0,
        remote_addr: remote,
        rkey,
        inline_length: 0,
        inline_data: null(),
        compare_add: 0,
        swap: 0,
    }
}

#[test]
fn write_then_read_back_64_kib_through_the_c_symbols() {
    let (a, b) = connected();
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 256) as u8).collect();
    // SAFETY: handles this library returned; buffers of the lengths given.
    unsafe {
        ok(cxd_mr_write(a.mr, 0, data.as_ptr().cast(), LEN));
        let sge = cxd_sge {
            addr: a.info.addr,
            length: LEN as u32,
            lkey: a.info.lkey,
        };
        post(
            a.qp,
            &rdma(1, CXD_WR_RDMA_WRITE, &sge, b.info.addr, b.info.rkey),
        );
        let wc = wait(&a, &b);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (1, CXD_WC_SUCCESS, CXD_WC_RDMA_WRITE)
        );
        let mut got = vec![0u8; LEN];
        ok(cxd_mr_read(b.mr, 0, got.as_mut_ptr().cast(), LEN));
        assert!(got == data, "WRITE landed other bytes");

        // Zero a's copy, READ it back from b.
        ok(cxd_mr_write(a.mr, 0, vec![0u8; LEN].as_ptr().cast(), LEN));
        post(
            a.qp,
            &rdma(2, CXD_WR_RDMA_READ, &sge, b.info.addr, b.info.rkey),
        );
        let wc = wait(&a, &b);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
            (2, CXD_WC_SUCCESS, CXD_WC_RDMA_READ, LEN as u32)
        );
        ok(cxd_mr_read(a.mr, 0, got.as_mut_ptr().cast(), LEN));
        assert!(got == data, "READ brought other bytes");

        // A bad remote key completes with a remote access error, never a success.
        post(
            a.qp,
            &rdma(3, CXD_WR_RDMA_WRITE, &sge, b.info.addr, b.info.rkey ^ 0x100),
        );
        let wc = wait(&a, &b);
        assert_eq!((wc.wr_id, wc.status), (3, CXD_WC_REM_ACCESS_ERR));
    }
    close(a);
    close(b);
}

#[test]
fn sends_posted_on_one_thread_are_received_on_another() {
    const N: u64 = 300;
    let (a, b) = connected();
    // SAFETY: handles this library returned; each list outlives its call.
    unsafe {
        let slot = cxd_sge {
            addr: b.info.addr,
            length: 64,
            lkey: b.info.lkey,
        };
        let recvs: Vec<cxd_recv_wr> = (0..N)
            .map(|i| cxd_recv_wr {
                wr_id: i,
                sg_list: &slot,
                num_sge: 1,
                reserved: 0,
            })
            .collect();
        assert_eq!(
            cxd_qp_post_recv(b.qp, recvs.as_ptr(), N as u32, null_mut()),
            N as c_int
        );
    }
    let receiver = std::thread::spawn(move || {
        let mut next = 0;
        let mut wc = [cxd_wc::default(); 32];
        let start = Instant::now();
        while next < N {
            // SAFETY: b's CQ is polled on this thread only; room for 32 completions.
            let n = ok(unsafe { cxd_cq_poll(b.cq, wc.as_mut_ptr(), 32) });
            for w in &wc[..n as usize] {
                assert_eq!(
                    (w.wr_id, w.status, w.opcode),
                    (next, CXD_WC_SUCCESS, CXD_WC_RECV)
                );
                assert_eq!(w.imm_data, next as u32 * 3);
                next += 1;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{next} of {N} came"
            );
        }
        b
    });
    let mut completed = 0;
    let mut wc = [cxd_wc::default(); 32];
    for i in 0..N {
        let wr = cxd_send_wr {
            wr_id: 1000 + i,
            sg_list: null(),
            num_sge: 0,
            opcode: CXD_WR_SEND_WITH_IMM,
            send_flags: CXD_SEND_SIGNALED | CXD_SEND_INLINE,
            imm_data: i as u32 * 3,
            remote_addr: 0,
            rkey: 0,
            inline_length: 8,
            inline_data: (&i as *const u64).cast(),
            compare_add: 0,
            swap: 0,
        };
        loop {
            // SAFETY: a's QP and CQ are used on this thread only.
            let rc = unsafe { cxd_qp_post_send(a.qp, &wr, 1, null_mut()) };
            if rc == Error::QueueFull as c_int {
                // SAFETY: as above.
                completed += ok(unsafe { cxd_cq_poll(a.cq, wc.as_mut_ptr(), 32) });
                continue;
            }
            ok(rc);
            break;
        }
    }
    let start = Instant::now();
    while completed < N as c_int {
        // SAFETY: as above.
        completed += ok(unsafe { cxd_cq_poll(a.cq, wc.as_mut_ptr(), 32) });
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{completed} sends completed"
        );
    }
    let b = receiver.join().expect("the receiving thread");
    close(a);
    close(b);
}

#[test]
fn refusals_name_their_cause_and_change_nothing() {
    let (a, b) = connected();
    // SAFETY: handles this library returned, or NULL and wrong kinds on purpose.
    unsafe {
        assert_eq!(cxd_qp_post_send(a.qp, null(), 0, null_mut()), 0);
        assert_eq!(
            cxd_qp_post_send(a.qp, null(), 1, null_mut()),
            Error::Null as c_int
        );
        assert_eq!(
            cxd_cq_poll(a.qp.cast(), null_mut(), 0),
            Error::InvalidHandle as c_int
        );
        assert_eq!(
            cxd_mr_alloc(a.pd, 4096, CXD_ACCESS_REMOTE_WRITE, &mut null_mut()),
            Error::Config as c_int,
            "{}",
            last_error()
        );
        assert_eq!(
            cxd_mr_alloc(a.pd, 4096, 1 << 9, &mut null_mut()),
            Error::InvalidArgument as c_int
        );
        let mut params = std::mem::zeroed::<cxd_connect_params>();
        ok(cxd_connect_params_default(&mut params));
        params.mtu = 9;
        let remote = cxd_endpoint::default();
        assert_eq!(
            cxd_qp_connect(a.qp, &remote, &params),
            Error::Config as c_int
        );
        // A QP and CQ of different devices.
        let mut qp = null_mut();
        let mut caps = std::mem::zeroed::<cxd_qp_caps>();
        ok(cxd_qp_caps_default(&mut caps));
        assert_eq!(
            cxd_qp_create(a.pd, b.cq, null_mut(), &caps, &mut qp),
            Error::InvalidArgument as c_int
        );
        assert!(qp.is_null());
        assert_eq!(
            cxd_mr_read(a.mr, LEN as u64 * 4, [0u8; 4].as_mut_ptr().cast(), 4),
            Error::Device as c_int
        );
    }
    close(a);
    close(b);
}

#[test]
fn a_shared_receive_queue_reports_its_limit_once_per_arming() {
    let (a, b) = connected();
    // SAFETY: valid out-pointers, handles this library returned, lists that outlive the calls.
    unsafe {
        let mut srq = null_mut();
        ok(cxd_srq_create(b.pd, 32, 1, &mut srq));
        let mut caps = std::mem::zeroed::<cxd_qp_caps>();
        ok(cxd_qp_caps_default(&mut caps));
        let (mut qa, mut qb) = (null_mut(), null_mut());
        ok(cxd_qp_create(a.pd, a.cq, null_mut(), &caps, &mut qa));
        ok(cxd_qp_create(b.pd, b.cq, srq, &caps, &mut qb));
        let (mut ea, mut eb) = (cxd_endpoint::default(), cxd_endpoint::default());
        ok(cxd_qp_endpoint(qa, &mut ea));
        ok(cxd_qp_endpoint(qb, &mut eb));
        ok(cxd_qp_connect(qa, &eb, null()));
        ok(cxd_qp_connect(qb, &ea, null()));
        let rsge = cxd_sge {
            addr: b.info.addr,
            length: 64,
            lkey: b.info.lkey,
        };
        let recvs: Vec<cxd_recv_wr> = (0..10)
            .map(|i| cxd_recv_wr {
                wr_id: i,
                sg_list: &rsge,
                num_sge: 1,
                reserved: 0,
            })
            .collect();
        assert_eq!(
            ok(cxd_srq_post_recv(srq, recvs.as_ptr(), 10, null_mut())),
            10
        );
        ok(cxd_srq_arm_limit(srq, 5));
        let ssge = cxd_sge {
            addr: a.info.addr,
            length: 16,
            lkey: a.info.lkey,
        };
        let mut reached = Vec::new();
        for i in 0..8 {
            let mut wr = rdma(i, CXD_WR_SEND, &ssge, 0, 0);
            wr.remote_addr = 0;
            post(qa, &wr);
            assert_eq!(wait(&a, &b).status, CXD_WC_SUCCESS);
            assert_eq!(wait(&b, &a).wr_id, i);
            reached.push(ok(cxd_srq_limit_reached(srq)));
        }
        // Posted 10, 9, ... after each: below 5 first after the sixth receive (4 left).
        assert_eq!(reached, [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(cxd_srq_arm_limit(srq, 1 << 20), Error::Config as c_int);
        assert_eq!(cxd_srq_limit_reached(null_mut()), Error::Null as c_int);
        assert_eq!(
            cxd_srq_limit_reached(qb.cast()),
            Error::InvalidHandle as c_int
        );
        assert!(ok(cxd_rdma_event_fd(b.rdma)) >= 0);
        ok(cxd_qp_destroy(qa));
        ok(cxd_qp_destroy(qb));
        ok(cxd_srq_destroy(srq));
        assert_eq!(cxd_srq_limit_reached(srq), Error::Closed as c_int);
    }
    close(a);
    close(b);
}
