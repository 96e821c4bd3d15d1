//! The session against the perftest stand-in of [`super::fake`], in both roles, for each
//! test; and against a peer that misbehaves.

use super::fake::{fake_keys, play, FakeSpec, Transcript};
use super::session::{run_session, Agreed, Channel, Local, Measured, Role, SessionError, Test};
use super::wire::{Keys, WireError, WireReport};
use crate::rdma_perf::{BwReport, LatReport};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A device side that records what the session asked of it.
struct Stub {
    qps: usize,
    agreed: Option<Agreed>,
    connected_to: Vec<Keys>,
    receives_posted: Arc<AtomicBool>,
    measured: u32,
    measure_result: Measured,
}

impl Stub {
    fn new(qps: usize, lat: bool) -> Self {
        Self {
            qps,
            agreed: None,
            connected_to: Vec::new(),
            receives_posted: Arc::new(AtomicBool::new(false)),
            measured: 0,
            measure_result: if lat {
                let mut s = vec![2000u64; 10];
                Measured::Lat(LatReport::from_samples(2, &mut s, 2).unwrap())
            } else {
                Measured::Bw(BwReport {
                    size: 65536,
                    iters: 1000,
                    peak_gbps: 9.5,
                    avg_gbps: 9.25,
                    msg_rate_mpps: 0.0176,
                })
            },
        }
    }
}

/// This side's keys for queue pair `i`.
fn our_keys(i: usize) -> Keys {
    Keys {
        lid: 0,
        out_reads: 1,
        qpn: 0x20 + i as u32,
        psn: 0x12_3456,
        rkey: 0xabcd,
        vaddr: 0x1_0000 + i as u64 * 0x1000,
        gid: Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 78, 1]),
        srqn: 0,
    }
}

impl Local for Stub {
    fn prepare(&mut self, agreed: &Agreed) -> Result<Vec<Keys>, String> {
        self.agreed = Some(agreed.clone());
        Ok((0..self.qps).map(our_keys).collect())
    }

    fn connect(&mut self, remote: &[Keys], _agreed: &Agreed) -> Result<(), String> {
        self.connected_to = remote.to_vec();
        Ok(())
    }

    fn post_receives(&mut self) -> Result<(), String> {
        self.receives_posted.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn measure(&mut self, _remote: &[Keys]) -> Result<Measured, String> {
        self.measured += 1;
        Ok(self.measure_result)
    }
}

/// Runs our side as `role` against the fake playing `spec`; returns both ends' results.
fn session(
    role: Role,
    spec: FakeSpec,
    stub: &mut Stub,
) -> (
    Result<super::session::Outcome, SessionError>,
    Result<Transcript, String>,
) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let posted = stub.receives_posted.clone();
    let test = spec.test;
    let send_server = test == Test::SendBw && role == Role::Server;
    let fake = std::thread::spawn(move || {
        play(theirs, &spec, |_| {
            // ib_send_bw's client starts sending only after the server posted its receives.
            if send_server {
                assert!(
                    posted.load(Ordering::SeqCst),
                    "receives not posted before the run"
                );
            }
        })
    });
    let outcome = {
        let mut channel = Channel::new(ours, role);
        run_session(&mut channel, test, 3, stub)
    };
    (outcome, fake.join().unwrap())
}

fn run(test: Test, role: Role, qps: usize) -> (super::session::Outcome, Transcript, Stub) {
    let mut spec = FakeSpec::new(test, role == Role::Server);
    spec.qps = qps;
    let mut stub = Stub::new(qps, test == Test::WriteLat);
    let (outcome, transcript) = session(role, spec, &mut stub);
    (outcome.unwrap(), transcript.unwrap(), stub)
}

/// How many key messages each program trades with `q` queue pairs (see `super::session`).
fn key_messages(test: Test, q: usize) -> usize {
    match test {
        Test::WriteBw | Test::ReadBw => 2 * q + 3,
        Test::SendBw => 2 * q + 3,
        Test::WriteLat => 2 * q + 2,
    }
}

#[test]
fn every_test_in_both_roles_trades_what_perftest_trades() {
    for test in [Test::WriteBw, Test::ReadBw, Test::SendBw, Test::WriteLat] {
        for role in [Role::Server, Role::Client] {
            let qps = if test == Test::WriteLat { 1 } else { 2 };
            let (outcome, t, stub) = run(test, role, qps);
            let what = format!("{test:?} as {role:?}");
            // Version 6.24, NUL-padded to 16 bytes.
            assert_eq!(t.version, b"6.24\0\0\0\0\0\0\0\0\0\0\0\0", "{what}");
            assert_eq!(
                t.sizes,
                [4096u32.to_be_bytes(), 64u32.to_be_bytes()],
                "{what}"
            );
            assert_eq!(&t.mtu, b"3\0", "{what}");
            assert_eq!(t.keys.len(), key_messages(test, qps), "{what}");
            for k in &t.keys {
                assert_eq!(k.len(), 108, "{what}");
                let parsed = Keys::from_wire(k).unwrap();
                assert!(
                    (0..qps).any(|i| parsed == our_keys(i)),
                    "{what}: {parsed:?}"
                );
            }
            assert_eq!(t.trailing, 0, "{what}");
            // Our side took the fake's keys and agreed on its sizes and MTU.
            assert_eq!(stub.connected_to.len(), qps, "{what}");
            for (i, k) in stub.connected_to.iter().enumerate() {
                assert_eq!(k.to_wire(), fake_keys(i), "{what}");
            }
            let agreed = stub.agreed.unwrap();
            assert_eq!(agreed.peer_version.text, "6.24");
            assert_eq!(
                (agreed.cycle_buffer, agreed.cache_line, agreed.mtu),
                (4096, 64, 3)
            );
            let runs = match (test, role) {
                (Test::WriteBw | Test::ReadBw, Role::Server) => 0,
                _ => 1,
            };
            assert_eq!(stub.measured, runs, "{what}");
            assert_eq!(
                stub.receives_posted.load(Ordering::SeqCst),
                test == Test::SendBw && role == Role::Server,
                "{what}"
            );
            match (test, role) {
                (Test::WriteBw | Test::ReadBw, Role::Server) => {
                    // The client's report, as it sent it.
                    let r = outcome.peer_report.unwrap();
                    assert_eq!((r.size, r.iters), (65536, 5000), "{what}");
                    assert_eq!((r.bw_peak, r.bw_avg, r.msg_rate), (11.5, 11.25, 0.021));
                    assert!(t.report.iter().all(|f| *f == [0; 8]), "{what}");
                }
                (Test::WriteBw | Test::ReadBw, Role::Client) => {
                    let want = WireReport {
                        size: 65536,
                        iters: 1000,
                        bw_peak: 9.5,
                        bw_avg: 9.25,
                        msg_rate: 0.0176,
                    };
                    assert_eq!(t.report, want.fields().to_vec(), "{what}");
                    assert_eq!(t.report[0], 65536u64.to_be_bytes());
                }
                _ => assert!(t.report.is_empty(), "{what}"),
            }
        }
    }
}

#[test]
fn the_smaller_mtu_and_the_larger_sizes_are_kept() {
    let mut spec = FakeSpec::new(Test::WriteBw, true);
    spec.mtu = *b"2\0";
    spec.cycle_buffer = 65536;
    spec.cache_line = 32;
    spec.version = b"6.29";
    let mut stub = Stub::new(1, false);
    let (outcome, t) = session(Role::Server, spec, &mut stub);
    let a = outcome.unwrap().agreed;
    assert_eq!((a.mtu, a.cycle_buffer, a.cache_line), (2, 65536, 64));
    assert_eq!(a.peer_version.text, "6.29");
    t.unwrap();
    // A peer naming no valid MTU leaves ours.
    let mut spec = FakeSpec::new(Test::WriteBw, true);
    spec.mtu = *b"7\0";
    let mut stub = Stub::new(1, false);
    let (outcome, _) = session(Role::Server, spec, &mut stub);
    assert_eq!(outcome.unwrap().agreed.mtu, 3);
}

/// A peer's bad messages end the session with an error naming what was wrong.
#[test]
fn a_misbehaving_peer_is_a_clear_error() {
    let cases: Vec<(FakeSpec, &str)> = vec![
        (
            FakeSpec {
                version: b"5.60",
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "older than 5.70",
        ),
        (
            FakeSpec {
                version: b"\xffperf",
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "holds no version number",
        ),
        (
            FakeSpec {
                cycle_buffer: 0,
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "cycle buffer of 0 bytes",
        ),
        (
            FakeSpec {
                cycle_buffer: u32::MAX,
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "out of range",
        ),
        (
            FakeSpec {
                mtu: *b"x\0",
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "MTU message",
        ),
        (
            FakeSpec {
                keys_override: Some({
                    let mut k = fake_keys(0);
                    k[10] = b'g';
                    k
                }),
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "QPN",
        ),
        (
            FakeSpec {
                keys_override: Some(vec![b'7'; 108]),
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "key message",
        ),
        (
            FakeSpec {
                keys_override: Some({
                    // IPv6 GID against our IPv4-mapped one.
                    let mut k = fake_keys(0);
                    k[80..85].copy_from_slice(b"fe:80");
                    k
                }),
                ..FakeSpec::new(Test::WriteBw, true)
            },
            "different IP versions",
        ),
    ];
    for (spec, says) in cases {
        let mut stub = Stub::new(1, false);
        let (outcome, _) = session(Role::Server, spec.clone(), &mut stub);
        let e = outcome.unwrap_err().to_string();
        assert!(e.contains(says), "{spec:?}: {e}");
        assert_eq!(stub.measured, 0);
    }
}

#[test]
fn a_peer_that_leaves_mid_exchange_is_a_clear_error() {
    // The peer sends half a key message and closes.
    for cut in [0usize, 10, 20, 31, 40, 107] {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let peer = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut buf = [0u8; 16];
            theirs.write_all(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0").unwrap();
            theirs.read_exact(&mut buf).unwrap();
            let mut four = [0u8; 4];
            for n in [4096u32, 64] {
                theirs.write_all(&n.to_be_bytes()).unwrap();
                theirs.read_exact(&mut four).unwrap();
            }
            theirs.write_all(b"3\0").unwrap();
            theirs.read_exact(&mut [0u8; 2]).unwrap();
            theirs.write_all(&fake_keys(0)[..cut]).unwrap();
        });
        let mut stub = Stub::new(1, false);
        let mut channel = Channel::new(ours, Role::Server);
        let e = run_session(&mut channel, Test::ReadBw, 3, &mut stub).unwrap_err();
        peer.join().unwrap();
        assert!(matches!(e, SessionError::Closed("keys")), "{cut}: {e}");
        assert!(e.to_string().contains("closed the connection"), "{e}");
    }
}

#[test]
fn wire_errors_read_as_such() {
    let e = Keys::from_wire(&[0u8; 3]).unwrap_err();
    assert_eq!(e, WireError::NotText(3));
}
