//! cxdirect's side of the command comparison: the driver runs the jobs Linux's mlx5 drivers run
//! in the QEMU rig (bring-up, an Ethernet port with RSS and flow rules on split and on shared
//! receive queues, the RDMA objects PD, MR, CQ, SRQ and an RC QP through RTS, then teardown)
//! against a model recording its commands, and writes one trace per function to
//! `$CXDIRECT_COMMAND_TRACE_DIR` (default: this test's scratch folder), for
//! `cxdirect-cmd-diff --cxdirect FILE`.

use cxdirect::rdma::{
    CompletionQueue, ConnectParams, GsiQueuePair, MemoryRegion, ProtectionDomain, QpCaps,
    RcQueuePair, Roce, SharedReceiveQueue, SrqCaps, UdQueuePair,
};
use cxdirect::{ClassSelection, Device, KeyAccess, Port, PortConfig, SharedRxConfig};
use cxdirect_apps::cmd_diff::rules::Rules;
use cxdirect_apps::cmd_diff::{compare, parse_trace, TracedCommand};
use cxdirect_apps::emulated::EmuBackend;
use cxdirect_emu::{CommandTrace, Device as Model, EmuConfig, ExecMode};
use cxdirect_tests::setup::bring_up_patient;
use std::path::PathBuf;

const ALL: KeyAccess = KeyAccess {
    read: true,
    write: true,
    remote_read: true,
    remote_write: true,
    remote_atomic: true,
};

/// Where the traces go.
fn trace_dir() -> PathBuf {
    std::env::var_os("CXDIRECT_COMMAND_TRACE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

/// An Ethernet port: four receive queues hashed by RSS, UDP ports 9000.. steered to them by
/// flow rules, each queue on its own ring (`shared` off) or all on one shared ring.
fn ethernet(dev: Device<EmuBackend>, shared: bool) -> Device<EmuBackend> {
    let mut started = Port::start(
        dev,
        PortConfig {
            rx_queues: 4,
            ring_size: 64,
            pool_buffers: 1024,
            udp_port_queues: Some(9000),
            shared_rx: shared.then_some(SharedRxConfig {
                ring_size: 256,
                limit: 64,
            }),
            ..PortConfig::default()
        },
    )
    .expect("port");
    if shared {
        let _ = started.port.take_shared_rx().expect("shared ring handles");
    }
    drop(started.queues);
    started.port.close().expect("port close")
}

/// One function's RDMA objects, connected to the peer's QP through RTS.
struct Rdma {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    srq: SharedReceiveQueue<EmuBackend>,
    mr: MemoryRegion,
    qp: RcQueuePair<EmuBackend>,
}

fn rdma(dev: &mut Device<EmuBackend>, roce: &Roce) -> Rdma {
    let pd = ProtectionDomain::alloc(dev).expect("PD");
    let mut cq = CompletionQueue::create(dev, 256).expect("CQ");
    let srq = SharedReceiveQueue::create(
        dev,
        &pd,
        SrqCaps {
            max_wr: 64,
            max_sge: 1,
        },
    )
    .expect("SRQ");
    let mr = MemoryRegion::alloc(dev, &pd, 1 << 16, ALL).expect("MR");
    let qp = RcQueuePair::create(dev, &pd, &mut cq, None, QpCaps::default(), roce).expect("QP");
    Rdma {
        pd,
        cq,
        srq,
        mr,
        qp,
    }
}

fn destroy(dev: &mut Device<EmuBackend>, r: Rdma) {
    let Rdma {
        pd,
        mut cq,
        srq,
        mr,
        qp,
    } = r;
    qp.destroy(dev, &mut cq).expect("QP destroy");
    srq.destroy(dev).expect("SRQ destroy");
    mr.deregister(dev).expect("MR deregister");
    cq.destroy(dev).expect("CQ destroy");
    pd.dealloc(dev).expect("PD dealloc");
}

/// The general services QP (QP1) as ib_mad opens it on a RoCE port, and a UD QP through RTS
/// as perftest's UD runs make one.
fn datagrams(dev: &mut Device<EmuBackend>, roce: &Roce, r: &mut Rdma) {
    let gsi = GsiQueuePair::create(dev, &r.pd, roce, 64).expect("GSI QP");
    let mut ud =
        UdQueuePair::create(dev, &r.pd, &mut r.cq, None, QpCaps::default(), roce).expect("UD QP");
    ud.activate(dev, 0x1111_1111).expect("UD activate");
    ud.destroy(dev, &mut r.cq).expect("UD destroy");
    gsi.destroy(dev).expect("GSI destroy");
}

/// The port's traffic classes and link speed as the rig's `dcb` and `ethtool` checks set them
/// on function A through mlx5e: each priority in its own class, two ETS classes at 70% and 30%
/// with the rest strict, a class rate limit set and lifted, the link at 1 Gb/s and back at
/// 100 Gb/s (as `ethtool -s DEV speed 100000 autoneg off`).
fn traffic_classes(dev: &mut Device<EmuBackend>) {
    for prio in 0..8 {
        dev.set_priority_class(prio, prio).expect("QTCT");
    }
    let mut classes = [ClassSelection::Strict; 8];
    classes[0] = ClassSelection::Ets(70);
    classes[1] = ClassSelection::Ets(30);
    dev.set_class_selection(&classes)
        .expect("QETCR groups and shares");
    dev.set_class_rate_limit(0, Some(100))
        .expect("QETCR rate limit");
    dev.set_class_rate_limit(0, None)
        .expect("QETCR limit lifted");
    dev.set_link_speed(Some(1_000)).expect("PTYS 1 Gb/s");
    dev.set_link_speed(Some(100_000)).expect("PTYS 100 Gb/s");
}

/// Runs the jobs on a fresh pair of functions and returns each function's trace.
pub fn run_jobs() -> [Vec<String>; 2] {
    let traces = [CommandTrace::memory(), CommandTrace::memory()];
    let cfg = |trace: &CommandTrace| EmuConfig {
        roce: true,
        exec: ExecMode::Threaded,
        command_trace: Some(trace.clone()),
        ..EmuConfig::default()
    };
    let (a, b) = Model::pair(cfg(&traces[0]), cfg(&traces[1]));
    let mut da = ethernet(bring_up_patient(&a, "a"), false);
    traffic_classes(&mut da);
    let mut db = ethernet(bring_up_patient(&b, "b"), true);
    let roce_a = Roce::enable(&mut da, "10.0.0.1".parse().unwrap()).expect("RoCE a");
    let roce_b = Roce::enable(&mut db, "10.0.0.2".parse().unwrap()).expect("RoCE b");
    let mut ra = rdma(&mut da, &roce_a);
    let mut rb = rdma(&mut db, &roce_b);
    let (ea, eb) = (ra.qp.local_endpoint(), rb.qp.local_endpoint());
    ra.qp
        .connect(&mut da, &eb, ConnectParams::default())
        .expect("connect a");
    rb.qp
        .connect(&mut db, &ea, ConnectParams::default())
        .expect("connect b");
    datagrams(&mut da, &roce_a, &mut ra);
    destroy(&mut da, ra);
    destroy(&mut db, rb);
    da.teardown().expect("teardown a");
    db.teardown().expect("teardown b");
    traces.map(|t| t.lines())
}

fn opcodes(trace: &[TracedCommand]) -> Vec<&str> {
    trace.iter().map(|c| c.opcode.as_str()).collect()
}

fn rules() -> Rules {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/command-diff.toml");
    Rules::parse(&std::fs::read_to_string(path).expect("the rules file")).expect("valid rules")
}

#[test]
fn the_driver_jobs_are_traced_and_written_per_function() {
    let [a, b] = run_jobs();
    let dir = trace_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, lines) in [("a", &a), ("b", &b)] {
        let path = dir.join(format!("cxdirect-commands-{name}.jsonl"));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        println!(
            "function {name}: {} commands in {}",
            lines.len(),
            path.display()
        );
    }
    let ta = parse_trace(&a.join("\n")).expect("trace a parses");
    let tb = parse_trace(&b.join("\n")).expect("trace b parses");
    for t in [&ta, &tb] {
        let ops = opcodes(t);
        for op in [
            "ENABLE_HCA",
            "INIT_HCA",
            "CREATE_EQ",
            "CREATE_CQ",
            "CREATE_SQ",
            "CREATE_RQ",
            "CREATE_TIS",
            "CREATE_TIR",
            "CREATE_RQT",
            "CREATE_FLOW_TABLE",
            "CREATE_FLOW_GROUP",
            "SET_FLOW_TABLE_ENTRY",
            "SET_ROCE_ADDRESS",
            "ALLOC_PD",
            "CREATE_MKEY",
            "CREATE_RMP",
            "CREATE_QP",
            "RST2INIT_QP",
            "INIT2RTR_QP",
            "RTR2RTS_QP",
            "DESTROY_QP",
            "TEARDOWN_HCA",
            "DISABLE_HCA",
        ] {
            assert!(ops.contains(&op), "{op} missing from {ops:?}");
        }
        // The driver's commands all succeed on a well-behaved model; one function each.
        assert!(t.iter().all(|c| c.status == "OK"), "a refused command");
        assert!(t.iter().all(|c| c.function == t[0].function));
    }
    // The RC QP is created by service type RC (0), its context decoded field by field.
    let qp = ta.iter().find(|c| c.opcode == "CREATE_QP").unwrap();
    assert!(qp.fields.keys().any(|k| k.starts_with("qpc.")));
    assert!(!qp.fields.contains_key("qpc.st"), "RC is service type 0");
    // Function b draws its receive queues from one shared ring (an RMP); function a does not.
    let rmps = |t: &[TracedCommand]| t.iter().filter(|c| c.opcode == "CREATE_RMP").count();
    assert!(rmps(&tb) > rmps(&ta));
}

#[test]
fn two_runs_of_the_jobs_compare_clean_under_the_reviewed_rules() {
    // What differs from run to run (object numbers, addresses) is normalised by the rules; the
    // same driver running the same jobs must then show no difference at all.
    let [a1, _] = run_jobs();
    let [a2, _] = run_jobs();
    let (t1, t2) = (
        parse_trace(&a1.join("\n")).unwrap(),
        parse_trace(&a2.join("\n")).unwrap(),
    );
    let report = compare(&t1, &t2, &rules());
    let lines: Vec<String> = report.differences.iter().map(ToString::to_string).collect();
    assert!(lines.is_empty(), "{lines:#?}");
    assert_eq!(report.commands_compared, t1.len());
    println!("{}", report.figures());
}
