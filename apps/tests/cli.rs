//! The programs' command lines: `--help` with its option groups, usage errors that exit 2 and
//! name the flag and the reason, and testpmd's summary line.

use std::process::Command;

/// Runs program `bin` with `args`; returns its exit status, stdout and stderr.
fn run(bin: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(bin).args(args).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const TESTPMD: &str = env!("CARGO_BIN_EXE_cxdirect-testpmd");
const PINGPONG: &str = env!("CARGO_BIN_EXE_cxdirect-pingpong");
const INFO: &str = env!("CARGO_BIN_EXE_cxdirect-info");
const DEVBIND: &str = env!("CARGO_BIN_EXE_cxdirect-devbind");
const SHARED_RX: &str = env!("CARGO_BIN_EXE_cxdirect-shared-rx");
const DMABUF_RX: &str = env!("CARGO_BIN_EXE_cxdirect-dmabuf-rx");
const DEVMEM_RX: &str = env!("CARGO_BIN_EXE_cxdirect-devmem-rx");
const BENCH: &str = env!("CARGO_BIN_EXE_cxdirect-bench");
const FAULTS: &str = env!("CARGO_BIN_EXE_cxdirect-faults");
const KRPING: &str = env!("CARGO_BIN_EXE_cxdirect-krping");
const RDMA_PERF: &str = env!("CARGO_BIN_EXE_cxdirect-rdma-perf");

#[test]
fn every_program_prints_its_help_in_groups() {
    let device_group = [
        "Devices:",
        "--device <SPEC>",
        "--iommu-mode <MODE>",
        "--emu-exec <MODE>",
    ];
    let programs: [(&str, &str, &[&str]); 11] = [
        (
            TESTPMD,
            "cxdirect-testpmd",
            &[
                "Traffic:",
                "--burst <N>",
                "--flows <N>",
                "Queues:",
                "--txq <N>",
                "Run:",
                "--verify",
            ],
        ),
        (
            PINGPONG,
            "cxdirect-pingpong",
            &["Traffic:", "--size <BYTES>", "Run:"],
        ),
        (INFO, "cxdirect-info", &["Run:", "--init-timeout-ms <MS>"]),
        (
            DEVBIND,
            "cxdirect-devbind",
            &["Actions", "-b, --bind <BDF>", "--sysfs <PATH>"],
        ),
        (
            SHARED_RX,
            "cxdirect-shared-rx",
            &[
                "Traffic:",
                "--burst <N>",
                "--size <BYTES>",
                "Queues:",
                "--lwm <N>",
            ],
        ),
        (
            DMABUF_RX,
            "cxdirect-dmabuf-rx",
            &["Traffic:", "--source <SOURCE>", "Run:"],
        ),
        (
            DEVMEM_RX,
            "cxdirect-devmem-rx",
            &[
                "Traffic:",
                "--source <SOURCE>",
                "--header-bytes <N>",
                "--flow <FLOW>",
                "Run:",
                "--validate",
                "--hold <N>",
                "--bench <ROUNDS>",
            ],
        ),
        (
            BENCH,
            "cxdirect-bench",
            &["Run:", "--rounds <N>", "Callgrind run:", "--packet-bursts"],
        ),
        (
            FAULTS,
            "cxdirect-faults",
            &["Run:", "--injections <N>", "--class <NAME>"],
        ),
        (
            KRPING,
            "cxdirect-krping",
            &[
                "--server",
                "--client",
                "Traffic:",
                "--size <N>",
                "--count <N>",
                "--memory <KIND>",
                "Run:",
                "--validate",
                "--verbose",
                "--port <PORT>",
            ],
        ),
        (
            RDMA_PERF,
            "cxdirect-rdma-perf",
            &[
                "Traffic:",
                "--op <OP>",
                "--mode <MODE>",
                "--size <N>",
                "--inline <N>",
                "--qps <N>",
                "Run:",
                "--iters <N>",
            ],
        ),
    ];
    for (bin, name, wanted) in programs {
        let (code, stdout, stderr) = run(bin, &["--help"]);
        assert_eq!((code, stderr.as_str()), (0, ""), "{name}");
        assert!(
            stdout.contains(&format!("Usage: {name} ")),
            "{name}:\n{stdout}"
        );
        let opens_ports = !matches!(
            name,
            "cxdirect-devbind" | "cxdirect-bench" | "cxdirect-faults"
        );
        let device: &[&str] = if opens_ports { &device_group } else { &[] };
        for text in device.iter().chain(wanted) {
            assert!(stdout.contains(text), "{name}: no {text:?} in\n{stdout}");
        }
        // Every option says what it is on its own line: no option without its help.
        for line in stdout.lines().filter(|l| l.trim_start().starts_with('-')) {
            let words = line.split_whitespace().count();
            assert!(words >= 3, "{name}: an option without help: {line:?}");
        }
    }
    // The same flag has the same help in every program that takes it.
    let burst_line = |bin| {
        let (_, stdout, _) = run(bin, &["--help"]);
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with("--burst"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap()
    };
    assert_eq!(burst_line(TESTPMD), burst_line(SHARED_RX));
    assert!(burst_line(TESTPMD).contains("(1..=256)"));
}

#[test]
fn usage_errors_exit_2_and_say_which_flag_and_why() {
    let emu = ["--device", "emu"];
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            TESTPMD,
            &["--flows", "0"],
            &["'--flows <N>'", "0 is not in 1..=65535"],
        ),
        (TESTPMD, &["--burst", "0"], &["'--burst <N>'", "1..=256"]),
        (
            TESTPMD,
            &["--burst", "257"],
            &["'--burst <N>'", "257 is not in 1..=256"],
        ),
        (TESTPMD, &["--txq", "0"], &["'--txq <N>'", "1..=64"]),
        (
            TESTPMD,
            &["--emu-device-threads", "3"],
            &["'--emu-device-threads <N>'", "1..=2"],
        ),
        (TESTPMD, &["--rxq", "65"], &["'--rxq <N>'", "1..=64"]),
        (
            TESTPMD,
            &["--packets", "0"],
            &["'--packets <N>'", "0 is not in 1.."],
        ),
        (
            TESTPMD,
            &["--txpkts", "64,40"],
            &["'--txpkts <L[,L...]>'", "52..=9018"],
        ),
        (
            TESTPMD,
            &["--ring", "1000"],
            &["'--ring <N>'", "power of two"],
        ),
        (
            TESTPMD,
            &["--duration", "0"],
            &["'--duration <S>'", "above 0"],
        ),
        (
            TESTPMD,
            &["--duration", "1", "--packets", "9"],
            &["--duration", "cannot be used with"],
        ),
        (
            TESTPMD,
            &["--inline-max", "901"],
            &["'--inline-max <BYTES>'", "18..=900"],
        ),
        (
            TESTPMD,
            &["--forward-mode", "teleport"],
            &["'--forward-mode <MODE>'", "txonly"],
        ),
        (
            TESTPMD,
            &["--forward-mode", "io", "--verify"],
            &["--verify", "txonly"],
        ),
        (TESTPMD, &["--frobnicate"], &["'--frobnicate'"]),
        (
            TESTPMD,
            &["--device", "emu", "--device", "emu", "--device", "emu"],
            &["--device", "one or two"],
        ),
        (
            SHARED_RX,
            &["--queues", "17"],
            &["'--queues <N>'", "1..=16"],
        ),
        (SHARED_RX, &["--lwm", "512"], &["--lwm 512", "below --ring"]),
        (
            SHARED_RX,
            &["--size", "51"],
            &["'--size <BYTES>'", "52..=1514"],
        ),
        (
            SHARED_RX,
            &["--pace", "fast"],
            &["'--pace <HOW>'", "credits"],
        ),
        (
            PINGPONG,
            &["--iterations", "0"],
            &["'--iterations <N>'", "1.."],
        ),
        (
            PINGPONG,
            &["--inline", "maybe"],
            &["'--inline <ON|OFF>'", "on, off"],
        ),
        (PINGPONG, &[], &["--device", "emu-pair"]),
        (
            DMABUF_RX,
            &["--source", "memfd", "--size", "4096"],
            &["'--size <BYTES>'", "1 MiB"],
        ),
        (
            DMABUF_RX,
            &["--source", "tape"],
            &["'--source <SOURCE>'", "udmabuf"],
        ),
        (
            DMABUF_RX,
            &["--size", "1048576"],
            &["--source <SOURCE>", "required"],
        ),
        (
            DEVMEM_RX,
            &["--source", "memfd", "--header-bytes", "96"],
            &["'--header-bytes <N>'", "power of two from 64 to 1024"],
        ),
        (
            DEVMEM_RX,
            &["--source", "memfd", "--flow", "tcp:80"],
            &["'--flow <FLOW>'", "udp:PORT"],
        ),
        (
            DEVMEM_RX,
            &["--source", "memfd", "--flow", "udp:0"],
            &["'--flow <FLOW>'", "1..=65535"],
        ),
        (
            INFO,
            &["--init-timeout-ms", "0"],
            &["'--init-timeout-ms <MS>'", "1.."],
        ),
        (
            INFO,
            &["--iommu-mode", "off"],
            &["'--iommu-mode <MODE>'", "type1"],
        ),
        (
            KRPING,
            &["--device", "emu-pair", "--size", "8"],
            &["'--size <N>'", "16..=16777216"],
        ),
        (
            KRPING,
            &["--device", "emu-pair", "--server"],
            &["emu-pair runs both sides", "leave out --server"],
        ),
        (
            KRPING,
            &["--device", "0000:06:00.0"],
            &["--server or --client"],
        ),
        (
            KRPING,
            &["--device", "emu-pair", "--server", "--client"],
            &["'--server' cannot be used with '--client'"],
        ),
        (
            RDMA_PERF,
            &["--device", "emu-pair", "--op", "write", "--mode", "fast"],
            &["'--mode <MODE>'", "bw, lat"],
        ),
        (
            RDMA_PERF,
            &["--device", "emu", "--op", "write", "--mode", "bw"],
            &["--device", "emu-pair, or two PCI addresses"],
        ),
        (
            RDMA_PERF,
            &[
                "--device", "emu-pair", "--op", "read", "--mode", "lat", "--inline", "8",
            ],
            &["--inline", "no data to inline"],
        ),
    ];
    for (bin, args, wanted) in cases {
        // The port programs need a device: every case but the device ones gets `emu`.
        let mut argv: Vec<&str> = Vec::new();
        if [TESTPMD, SHARED_RX, PINGPONG, DMABUF_RX, DEVMEM_RX, INFO].contains(bin)
            && !args.contains(&"--device")
        {
            argv.extend(emu);
        }
        argv.extend(*args);
        let (code, stdout, stderr) = run(bin, &argv);
        assert_eq!((code, stdout.as_str()), (2, ""), "{argv:?}: {stderr}");
        for text in *wanted {
            assert!(stderr.contains(text), "{argv:?}: no {text:?} in\n{stderr}");
        }
        assert!(stderr.contains("try '--help'"), "{argv:?}: {stderr}");
    }
    let no_device = [
        (TESTPMD, &[][..]),
        (INFO, &[]),
        (SHARED_RX, &[]),
        (DMABUF_RX, &["--source", "memfd"]),
        (DEVMEM_RX, &["--source", "memfd"]),
    ];
    for (bin, args) in no_device {
        let (code, _, stderr) = run(bin, args);
        assert_eq!(code, 2, "{bin}: {stderr}");
        assert!(stderr.contains("--device <SPEC>"), "{bin}: {stderr}");
    }
    for (bin, args, wanted) in [
        (BENCH, &["--rounds", "4"][..], "'--rounds <N>'"),
        (BENCH, &["--packets", "5"], "--callgrind"),
        (FAULTS, &["--injections", "0"], "'--injections <N>'"),
        (FAULTS, &["--class", "gremlins"], "tx_error_cqe"),
        (TESTPMD, &["--device", "emu-trio"], "'--device <SPEC>'"),
    ] {
        let (code, _, stderr) = run(bin, args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
    }
}

/// testpmd's last line, whose format scripts read: `summary: tx=N rx=N lost=N corrupt=N
/// duplicate=N oerrors=N imissed=N mpps=X.XXX`.
fn summary_fields(stdout: &str) -> Vec<(String, String)> {
    let line = stdout.lines().last().unwrap_or_default();
    let fields = line
        .strip_prefix("summary: ")
        .unwrap_or_else(|| panic!("{stdout}"));
    fields
        .split(' ')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{line}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn testpmd_with_four_send_queues_reports_no_reorder_as_duplicates() {
    // Flows pinned to send queues: each flow leaves in order, whichever queue the threaded model
    // serves first.
    let (code, stdout, stderr) = run(
        TESTPMD,
        &[
            "--device",
            "emu",
            "--emu-exec",
            "threaded",
            "--txq",
            "4",
            "--rxq",
            "1",
            "--packets",
            "20000",
            "--verify",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let fields = summary_fields(&stdout);
    let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "tx",
            "rx",
            "lost",
            "corrupt",
            "duplicate",
            "oerrors",
            "imissed",
            "mpps"
        ]
    );
    let value = |k: &str| fields.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(
        ["tx", "rx", "lost", "corrupt", "duplicate"].map(value),
        ["20000", "20000", "0", "0", "0"]
    );
    let mpps = value("mpps");
    assert!(
        mpps.parse::<f64>().is_ok() && mpps.split_once('.').unwrap().1.len() == 3,
        "{mpps}"
    );
    assert!(
        stdout.contains(
            "verify: good 20000 corrupt 0 duplicate 0 gaps 0 reordered 0 out-of-window 0"
        ),
        "{stdout}"
    );
}

#[test]
fn testpmd_with_four_queue_pairs_on_two_device_threads_loses_nothing() {
    // Receive-side scaling spreads the four flows over the four receive queues unevenly: the
    // generator keeps no more in flight than one ring, so no queue runs out of buffers.
    let (code, stdout, stderr) = run(
        TESTPMD,
        &[
            "--device",
            "emu-pair",
            "--emu-device-threads",
            "2",
            "--txq",
            "4",
            "--rxq",
            "4",
            "--packets",
            "40000",
            "--verify",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let fields = summary_fields(&stdout);
    let value = |k: &str| fields.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(
        ["tx", "rx", "lost", "corrupt", "duplicate", "imissed"].map(value),
        ["40000", "40000", "0", "0", "0", "0"]
    );
}

#[test]
fn testpmd_with_tso_sends_packets_larger_than_the_mtu_and_verifies_every_segment() {
    // Sizes 9000, 3000 and 1514 cut at MSS 1448 make 7, 3 and 2 segments: 12 per 3 packets.
    let (code, stdout, stderr) = run(
        TESTPMD,
        &[
            "--device",
            "emu-pair",
            "--tso",
            "1448",
            "--txpkts",
            "9000,3000,1514",
            "--txq",
            "2",
            "--rxq",
            "2",
            "--packets",
            "3000",
            "--verify",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("tso: 3000 packets handed over as 12000 segments of MSS 1448"),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("verify: good 3000 corrupt 0 duplicate 0 gaps 0 reordered 0 out-of-window 0"),
        "{stdout}"
    );
    let fields = summary_fields(&stdout);
    let value = |k: &str| fields.iter().find(|(key, _)| key == k).unwrap().1.clone();
    assert_eq!(
        ["tx", "rx", "lost", "oerrors", "imissed"].map(value),
        ["12000", "12000", "0", "0", "0"]
    );
    // Too small a packet, and an MSS no 1500-byte MTU frame holds.
    for (args, wanted) in [
        (
            &["--tso", "1448", "--txpkts", "60"][..],
            "at least 64 bytes",
        ),
        (&["--tso", "1461"], "'--tso <MSS>'"),
    ] {
        let mut argv = vec!["--device", "emu"];
        argv.extend(args);
        let (code, _, stderr) = run(TESTPMD, &argv);
        assert_ne!(code, 0, "{argv:?}");
        assert!(stderr.contains(wanted), "{argv:?}: {stderr}");
    }
}

#[test]
fn devmem_rx_verifies_a_stream_split_between_host_and_dmabuf_memory() {
    // 4 MiB of stream in 1458-byte packets: 42 bytes of headers and 86 of payload in each
    // 128-byte header buffer, 1372 in the dmabuf; 300 tokens held back at any time.
    let (code, stdout, stderr) = run(
        DEVMEM_RX,
        &[
            "--device",
            "emu-pair",
            "--source",
            "memfd",
            "--size",
            "4194304",
            "--header-bytes",
            "128",
            "--flow",
            "udp:5201",
            "--validate",
            "--hold",
            "300",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let fields = summary_fields(&stdout);
    let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "source",
            "packets",
            "payload_bytes",
            "header_bytes",
            "verified",
            "errors",
            "tokens_max",
            "mbps"
        ]
    );
    let value = |k: &str| fields.iter().find(|(key, _)| key == k).unwrap().1.clone();
    let packets: u64 = value("packets").parse().unwrap();
    // 4194304 = 2876 full packets of 1458 stream bytes and one of 1496.
    assert_eq!(packets, 2877);
    assert_eq!(
        ["source", "payload_bytes", "verified", "errors"].map(value),
        ["memfd", "4194304", "yes", "0"]
    );
    assert_eq!(value("header_bytes"), (packets * 128).to_string());
    let held: u64 = value("tokens_max").parse().unwrap();
    assert!((300..=300 + 64).contains(&held), "{held}");
    assert!(stdout.contains("imissed=0"), "{stdout}");
}

#[test]
fn devmem_rx_bench_prints_split_and_plain_figures() {
    let (code, stdout, stderr) = run(
        DEVMEM_RX,
        &[
            "--device", "emu-pair", "--source", "memfd", "--size", "2097152", "--bench", "5",
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for name in [
        "devmem_rx_split_ns",
        "devmem_rx_plain_ns",
        "devmem_rx_split_over_plain",
        "devmem_give_back_ns",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("metric {name}=")))
            .unwrap_or_else(|| panic!("no {name} in\n{stdout}"));
        let value: f64 = line.split('=').nth(1).unwrap().parse().unwrap();
        assert!(value > 0.0, "{line}");
    }
    assert!(stdout.contains("metric devmem_cpu_copied_bytes_per_payload_byte=0.0000"));
}
