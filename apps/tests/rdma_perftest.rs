//! rdma-perf speaking perftest's out-of-band exchange against itself on emu-pair: a server
//! and a client, each on its own thread and port, over loopback TCP, for each of the four
//! perftest programs it plays (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat`).

use std::process::Command;

const RDMA_PERF: &str = env!("CARGO_BIN_EXE_cxdirect-rdma-perf");

/// Runs rdma-perf with `args`; returns its exit status, stdout and stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(RDMA_PERF).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The value of `key=` in a line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

/// Each side's `summary:` and `perftest:` lines, client first.
fn sides(stdout: &str) -> Vec<(&str, &str)> {
    let summaries: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("summary: "))
        .collect();
    let exchanges: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("perftest: "))
        .collect();
    assert_eq!((summaries.len(), exchanges.len()), (2, 2), "{stdout}");
    summaries.into_iter().zip(exchanges).collect()
}

#[test]
fn every_perftest_program_runs_between_two_sides_on_emu_pair() {
    for (program, op, mode, size, iters, qps, exec) in [
        (
            "ib_write_bw",
            "write",
            "bw",
            "65536",
            "200",
            "1",
            "threaded",
        ),
        ("ib_write_bw", "write", "bw", "100", "300", "2", "inline"),
        ("ib_read_bw", "read", "bw", "65536", "200", "1", "threaded"),
        ("ib_read_bw", "read", "bw", "300", "300", "2", "threaded"),
        ("ib_send_bw", "send", "bw", "4096", "1000", "2", "threaded"),
        ("ib_write_lat", "write", "lat", "2", "300", "1", "threaded"),
        ("ib_write_lat", "write", "lat", "4096", "100", "1", "inline"),
    ] {
        let args = [
            "--device",
            "emu-pair",
            "--perftest",
            "--op",
            op,
            "--mode",
            mode,
            "--size",
            size,
            "--iters",
            iters,
            "--qps",
            qps,
            "--emu-exec",
            exec,
        ];
        let (code, stdout, stderr) = run(&args);
        assert_eq!(code, 0, "{args:?}: {stdout}{stderr}");
        let sides = sides(&stdout);
        for ((summary, exchange), role) in sides.iter().zip(["client", "server"]) {
            let what = format!("{program} {role} {args:?}");
            assert_eq!(field(exchange, "test"), program, "{what}");
            assert_eq!(field(exchange, "role"), role, "{what}");
            assert_eq!(field(exchange, "peer_version"), "6.24", "{what}");
            assert_eq!(field(summary, "op"), op, "{what}");
            assert_eq!(field(summary, "mode"), mode, "{what}");
            assert_eq!(field(summary, "size"), size, "{what}");
            assert_eq!(field(summary, "iters"), iters, "{what}");
            if mode == "bw" {
                let avg: f64 = field(summary, "bw_avg_gbps").parse().unwrap();
                assert!(avg > 0.0, "{what}: {summary}");
            } else {
                let typical: f64 = field(summary, "t_typical_usec").parse().unwrap();
                assert!(typical > 0.0, "{what}: {summary}");
            }
        }
        // A WRITE or READ server prints the report its client sent it.
        if program == "ib_write_bw" || program == "ib_read_bw" {
            assert_eq!(sides[0].0, sides[1].0, "{stdout}");
        }
        // The addresses each side printed are the other's.
        let addr = |prefix: &str| -> Vec<&str> {
            stdout
                .lines()
                .filter_map(|l| l.strip_prefix(prefix))
                .collect()
        };
        let (local, remote) = (addr(" local address: "), addr(" remote address: "));
        let q: usize = qps.parse().unwrap();
        assert_eq!(local.len(), 2 * q, "{stdout}");
        assert_eq!(local[..q], remote[q..], "{stdout}");
        assert_eq!(remote[..q], local[q..], "{stdout}");
    }
}

#[test]
fn perftest_options_that_cannot_run_are_usage_errors() {
    for (args, says) in [
        (
            &[
                "--device",
                "emu-pair",
                "--perftest",
                "--op",
                "read",
                "--mode",
                "lat",
            ][..],
            "ib_write_lat",
        ),
        (
            &[
                "--device",
                "emu-pair",
                "--perftest",
                "--server",
                "--op",
                "write",
                "--mode",
                "bw",
            ][..],
            "runs both sides",
        ),
        (
            &[
                "--device",
                "06:00.0",
                "--perftest",
                "--op",
                "write",
                "--mode",
                "bw",
            ][..],
            "--server or --client",
        ),
        (
            &[
                "--device",
                "06:00.0",
                "--perftest",
                "--client",
                "--op",
                "write",
                "--mode",
                "bw",
            ][..],
            "--address",
        ),
        (
            &[
                "--device",
                "06:00.0",
                "--perftest",
                "--server",
                "--op",
                "write",
                "--mode",
                "bw",
            ][..],
            "--local-address",
        ),
        (
            &[
                "--device", "emu-pair", "--server", "--op", "write", "--mode", "bw",
            ][..],
            "are for --perftest",
        ),
    ] {
        let (code, stdout, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
