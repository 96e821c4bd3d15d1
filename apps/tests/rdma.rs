//! The RDMA programs end to end on two emulated ports: krping validating every ping, and
//! rdma-perf printing perftest's columns and its summary for each operation and mode.

use std::process::Command;

const KRPING: &str = env!("CARGO_BIN_EXE_cxdirect-krping");
const RDMA_PERF: &str = env!("CARGO_BIN_EXE_cxdirect-rdma-perf");

/// Runs program `bin` with `args`; returns its exit status, stdout and stderr.
fn run(bin: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(bin).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The value of `key=` in a summary line.
fn field<'a>(summary: &'a str, key: &str) -> &'a str {
    summary
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {summary:?}"))
}

/// The `srq: ` line of side `who` (`server` or `client`).
fn srq_line<'a>(stdout: &'a str, who: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(who)?.strip_prefix(" srq: "))
        .unwrap_or_else(|| panic!("no {who} srq line in {stdout}"))
}

#[test]
fn krping_emu_pair_validates_1000_pings_from_a_shallow_srq_refilled_on_its_limit_event() {
    let (code, stdout, stderr) = run(
        KRPING,
        &["--device", "emu-pair", "--count", "1000", "--validate"],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let last = stdout.lines().last().unwrap();
    assert!(last.starts_with("summary: "), "{stdout}");
    // The fields first, in order, then the SRQ's.
    let keys: Vec<&str> = last
        .split_whitespace()
        .skip(1)
        .map(|w| w.split('=').next().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "count",
            "size",
            "validated",
            "errors",
            "usec_per_iter",
            "srq_limit_events"
        ]
    );
    assert_eq!(field(last, "count"), "1000");
    assert_eq!(field(last, "size"), "64");
    assert_eq!(field(last, "validated"), "yes");
    assert_eq!(field(last, "errors"), "0");
    assert!(field(last, "usec_per_iter").parse::<f64>().unwrap() > 0.0);
    // 2,000 messages into each side's SRQ of 16 receives, refilled to 16 after each limit
    // event: at most 16 messages from one refill to the next.
    let events: u64 = field(last, "srq_limit_events").parse().unwrap();
    assert!(events >= 2 * (2000 - 16) / 16, "{last}");
    let mut sum = 0;
    for who in ["server", "client"] {
        let line = srq_line(&stdout, who);
        assert_eq!((field(line, "depth"), field(line, "limit")), ("16", "4"));
        let side: u64 = field(line, "limit_events").parse().unwrap();
        // The events were taken on the async event vector's eventfd.
        assert!(
            field(line, "interrupts").parse::<u64>().unwrap() > 0,
            "{line}"
        );
        sum += side;
    }
    assert_eq!(sum, events);
}

#[test]
fn krping_srq_0_receives_on_the_queue_pairs_own_receive_queue() {
    let (code, stdout, stderr) = run(
        KRPING,
        &[
            "--device",
            "emu-pair",
            "--count",
            "200",
            "--validate",
            "--srq",
            "0",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let last = stdout.lines().last().unwrap();
    assert_eq!(
        (
            field(last, "count"),
            field(last, "errors"),
            field(last, "srq_limit_events")
        ),
        ("200", "0", "0")
    );
    assert!(!stdout.contains(" srq: "), "{stdout}");
}

#[test]
fn krping_verbose_prints_rpings_data_from_both_sides() {
    let (code, stdout, stderr) = run(
        KRPING,
        &[
            "--device",
            "emu-pair",
            "--count",
            "3",
            "--size",
            "40",
            "--verbose",
            "--validate",
            "--emu-exec",
            "inline",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let pings: Vec<&str> = stdout.lines().filter(|l| l.contains("ping data")).collect();
    assert_eq!(
        pings,
        [
            "server ping data (64B max): |rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ|",
            "ping data (64B max): |rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ|",
            "server ping data (64B max): |rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[|",
            "ping data (64B max): |rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[|",
            "server ping data (64B max): |rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\|",
            "ping data (64B max): |rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\|",
        ]
    );
    assert!(stdout.contains("server: LID 0x0000, QPN 0x"), "{stdout}");
}

#[test]
fn krping_moves_buffers_larger_than_the_path_mtu_from_memfd_memory() {
    let (code, stdout, stderr) = run(
        KRPING,
        &[
            "--device",
            "emu-pair",
            "--count",
            "20",
            "--size",
            "70000",
            "--validate",
            "--memory",
            "memfd",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let last = stdout.lines().last().unwrap();
    assert_eq!(
        (
            field(last, "count"),
            field(last, "size"),
            field(last, "errors")
        ),
        ("20", "70000", "0")
    );
}

#[test]
fn rdma_perf_prints_perftests_columns_and_a_summary_for_each_op_and_mode() {
    for op in ["write", "read", "send"] {
        for mode in ["bw", "lat"] {
            let args = [
                "--device", "emu-pair", "--op", op, "--mode", mode, "--size", "64", "--iters",
                "300",
            ];
            let (code, stdout, stderr) = run(RDMA_PERF, &args);
            assert_eq!(code, 0, "{op} {mode}: {stdout}{stderr}");
            let lines: Vec<&str> = stdout.lines().collect();
            let header = if mode == "bw" {
                " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
            } else {
                " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]"
            };
            let at = lines
                .iter()
                .position(|l| l.starts_with(header))
                .unwrap_or_else(|| panic!("{op} {mode}: no header in\n{stdout}"));
            // The report line: the size, the iterations, then the figures, all numbers.
            let report: Vec<&str> = lines[at + 1].split_whitespace().collect();
            assert_eq!(
                &report[..2],
                ["64", "300"],
                "{op} {mode}: {}",
                lines[at + 1]
            );
            let columns = if mode == "bw" { 5 } else { 9 };
            assert_eq!(report.len(), columns, "{op} {mode}: {}", lines[at + 1]);
            // Every figure a number; the first (peak bandwidth, or the shortest time) above 0.
            let figures: Vec<f64> = report[2..].iter().map(|v| v.parse().unwrap()).collect();
            assert!(
                figures[0] > 0.0 && figures.iter().all(|&x| x >= 0.0),
                "{op} {mode}: {}",
                lines[at + 1]
            );
            let summary = lines.last().unwrap();
            assert!(summary.starts_with("summary: "), "{op} {mode}: {stdout}");
            assert_eq!((field(summary, "op"), field(summary, "mode")), (op, mode));
            assert_eq!(
                (field(summary, "size"), field(summary, "iters")),
                ("64", "300")
            );
            assert!(
                stdout.contains(" local address: LID 0x0000 QPN 0x"),
                "{stdout}"
            );
        }
    }
}

#[test]
fn rdma_perf_spreads_a_bandwidth_run_over_queue_pairs_on_an_inline_model() {
    let (code, stdout, stderr) = run(
        RDMA_PERF,
        &[
            "--device",
            "emu-pair",
            "--op",
            "send",
            "--mode",
            "bw",
            "--size",
            "2048",
            "--iters",
            "500",
            "--qps",
            "3",
            "--emu-exec",
            "inline",
            "--inline",
            "0",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(stdout.matches(" remote address: ").count(), 3, "{stdout}");
    let summary = stdout.lines().last().unwrap();
    assert_eq!(
        (field(summary, "qps"), field(summary, "iters")),
        ("3", "500")
    );
    assert!(field(summary, "bw_avg_gbps").parse::<f64>().unwrap() > 0.0);
}
