//! The C programs in `tests/c/`, compiled with the system C compiler against the header and
//! the shared library this build made, then run (and run again under valgrind, and linked
//! through pkg-config, where those are installed: ignored with the reason otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The folder cargo put this build's `libcxdirect_c.so` and `libcxdirect_c.a` in: the one the
/// test binary itself runs from (`<target>/<profile>/deps/`), where `cargo test` builds the
/// library's every crate type before it builds the tests (`cargo build` then copies them one
/// level up, which `cargo test` does not).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .expect("the test binary's folder")
        .to_path_buf();
    assert!(
        dir.join("libcxdirect_c.so").exists(),
        "{} has no libcxdirect_c.so: run through `cargo test -p cxdirect-c`, which builds it",
        dir.display()
    );
    dir
}

/// Compiles `tests/c/<name>.c` into an executable linked against `libcxdirect_c.so` (found at
/// run time through an rpath), returning its path. `$CC` names the compiler (default `cc`).
fn compile(name: &str) -> PathBuf {
    compile_source(&format!("tests/c/{name}.c"), name)
}

/// Compiles `examples/<name>.c` as [`compile`] does.
fn compile_example(name: &str) -> PathBuf {
    compile_source(&format!("examples/{name}.c"), &format!("example-{name}"))
}

/// Compiles the C file at `source` (relative to the crate) into `c-<name>`.
fn compile_source(source: &str, name: &str) -> PathBuf {
    // Tests run in parallel: each program is built once, not written while another runs it.
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = library_dir();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-{name}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&cc)
        .args([
            "-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-pthread",
        ])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join(source))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&lib)
        // DT_RPATH, not DT_RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets, which may
        // name a stale copy of the library in the profile folder.
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lcxdirect_c")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}` ({e}); install one or set CC")
        });
    assert!(
        output.status.success(),
        "{cc} failed on {source}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    built.push((name.to_string(), out.clone()));
    out
}

fn run(mut command: Command, what: &str) -> String {
    let output = command
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn burst_c_sends_and_verifies_1000_frames_and_checks_error_codes() {
    let exe = compile("burst");
    let stdout = run(Command::new(&exe), "tests/c/burst.c");
    assert!(stdout.contains("1000 frames sent and verified"), "{stdout}");
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/burst.c under it \
              (apt-get install -y valgrind)"
)]
fn burst_c_is_clean_under_valgrind() {
    let exe = compile("burst");
    let mut command = Command::new("valgrind");
    command
        .args(["--error-exitcode=1", "--leak-check=full", "--quiet"])
        .arg(&exe);
    let stdout = run(command, "tests/c/burst.c under valgrind");
    assert!(stdout.contains("1000 frames sent and verified"), "{stdout}");
}

/// Runs `exe` under valgrind's memcheck with a full leak check: any error fails it.
fn under_valgrind(exe: &Path, what: &str) -> String {
    let mut command = Command::new("valgrind");
    command
        .args(["--error-exitcode=1", "--leak-check=full", "--quiet"])
        .arg(exe);
    run(command, &format!("{what} under valgrind"))
}

const RDMA_DONE: &str =
    "rdma verbs verified: SEND, WRITE, READ, inline, memfd region, SRQ and its limit, errors";

#[test]
fn rdma_c_moves_and_verifies_every_verb_and_checks_error_codes() {
    let stdout = run(Command::new(compile("rdma")), "tests/c/rdma.c");
    assert!(stdout.contains(RDMA_DONE), "{stdout}");
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/rdma.c under it \
              (apt-get install -y valgrind)"
)]
fn rdma_c_is_clean_under_valgrind() {
    let stdout = under_valgrind(&compile("rdma"), "tests/c/rdma.c");
    assert!(stdout.contains(RDMA_DONE), "{stdout}");
}

#[test]
fn inplace_c_builds_and_checks_frames_through_the_data_pointer() {
    let stdout = run(Command::new(compile("inplace")), "tests/c/inplace.c");
    assert!(
        stdout.contains("256 frames built and checked in place"),
        "{stdout}"
    );
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/inplace.c under it \
              (apt-get install -y valgrind)"
)]
fn inplace_c_is_clean_under_valgrind() {
    let stdout = under_valgrind(&compile("inplace"), "tests/c/inplace.c");
    assert!(
        stdout.contains("256 frames built and checked in place"),
        "{stdout}"
    );
}

const TXRX_CLEAN: &str =
    "summary: tx=2000 rx=2000 lost=0 corrupt=0 duplicate=0 oerrors=0 imissed=0 mpps=";

#[test]
fn txrx_example_sends_and_verifies_as_testpmd_does() {
    let mut command = Command::new(compile_example("txrx"));
    command.args(["2000", "64", "32"]);
    let stdout = run(command, "examples/txrx.c");
    assert!(stdout.contains(TXRX_CLEAN), "{stdout}");
    assert!(
        stdout.contains("verify: good 2000 corrupt 0 duplicate 0 gaps 0 reordered 0"),
        "{stdout}"
    );
    // Frames of every length up to a full one, in bursts of another size.
    let mut command = Command::new(compile_example("txrx"));
    command.args(["500", "1514", "7"]);
    let stdout = run(command, "examples/txrx.c with 1514-byte frames");
    assert!(
        stdout.contains("summary: tx=500 rx=500 lost=0 corrupt=0 duplicate=0"),
        "{stdout}"
    );
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs examples/txrx.c under it \
              (apt-get install -y valgrind)"
)]
fn txrx_example_is_clean_under_valgrind() {
    let mut command = Command::new("valgrind");
    command
        .args(["--error-exitcode=1", "--leak-check=full", "--quiet"])
        .arg(compile_example("txrx"))
        .args(["2000", "64", "32"]);
    let stdout = run(command, "examples/txrx.c under valgrind");
    assert!(stdout.contains(TXRX_CLEAN), "{stdout}");
}

#[test]
fn rdma_ping_example_reads_writes_and_validates() {
    for (count, size, line) in [
        (
            "50",
            "4096",
            "summary: pings=50 size=4096 validated=50 errors=0",
        ),
        (
            "3",
            "65536",
            "summary: pings=3 size=65536 validated=3 errors=0",
        ),
        ("3", "1", "summary: pings=3 size=1 validated=3 errors=0"),
    ] {
        let mut command = Command::new(compile_example("rdma_ping"));
        command.args([count, size]);
        let stdout = run(command, "examples/rdma_ping.c");
        assert!(stdout.contains(line), "{stdout}");
    }
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs examples/rdma_ping.c under it \
              (apt-get install -y valgrind)"
)]
fn rdma_ping_example_is_clean_under_valgrind() {
    let mut command = Command::new("valgrind");
    command
        .args(["--error-exitcode=1", "--leak-check=full", "--quiet"])
        .arg(compile_example("rdma_ping"))
        .args(["20", "4096"]);
    let stdout = run(command, "examples/rdma_ping.c under valgrind");
    assert!(
        stdout.contains("summary: pings=20 size=4096 validated=20 errors=0"),
        "{stdout}"
    );
}

#[test]
#[cfg_attr(
    not(has_pkg_config),
    ignore = "pkg-config is not installed: this test links tests/c/burst.c with the flags it \
              gives (apt-get install -y pkg-config)"
)]
fn burst_c_links_statically_through_pkg_config() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // An installed layout: PREFIX/include/cxdirect.h, PREFIX/lib/libcxdirect_c.a (a link to
    // this build's, which is large), PREFIX/lib/pkgconfig/cxdirect.pc from pkgconfig.sh.
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-prefix");
    let _ = std::fs::remove_dir_all(&prefix);
    let pcdir = prefix.join("lib/pkgconfig");
    std::fs::create_dir_all(&pcdir).expect("make the prefix");
    std::fs::create_dir_all(prefix.join("include")).expect("make the prefix");
    std::fs::copy(
        crate_dir.join("include/cxdirect.h"),
        prefix.join("include/cxdirect.h"),
    )
    .expect("install the header");
    std::os::unix::fs::symlink(
        library_dir().join("libcxdirect_c.a"),
        prefix.join("lib/libcxdirect_c.a"),
    )
    .expect("install the static library");
    let mut script = Command::new("sh");
    script.arg(crate_dir.join("pkgconfig.sh")).arg(&prefix);
    let pc = run(script, "capi/pkgconfig.sh");
    std::fs::write(pcdir.join("cxdirect.pc"), pc).expect("write cxdirect.pc");

    let mut pkg_config = Command::new("pkg-config");
    pkg_config
        .env("PKG_CONFIG_PATH", &pcdir)
        .args(["--static", "--cflags", "--libs", "cxdirect"]);
    let flags = run(pkg_config, "pkg-config --static --cflags --libs cxdirect");
    assert!(flags.contains("-lcxdirect_c"), "{flags}");

    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-burst-static");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut compile = Command::new(&cc);
    compile
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg(crate_dir.join("tests/c/burst.c"))
        .arg("-o")
        .arg(&exe)
        .args(flags.split_whitespace());
    run(
        compile,
        "the C compiler on tests/c/burst.c with pkg-config's flags",
    );
    let stdout = run(Command::new(&exe), "tests/c/burst.c, linked statically");
    assert!(stdout.contains("1000 frames sent and verified"), "{stdout}");
}

#[test]
fn quickstart_c_runs_and_is_the_readme_example() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = std::fs::read_to_string(crate_dir.join("tests/c/quickstart.c"))
        .expect("read tests/c/quickstart.c");
    let readme = std::fs::read_to_string(crate_dir.join("README.md")).expect("read README.md");
    let block = readme
        .split("```c\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("capi/README.md has a ```c block");
    assert_eq!(
        block, example,
        "capi/README.md's C example differs from tests/c/quickstart.c; make them the same"
    );
    let exe = compile("quickstart");
    let stdout = run(Command::new(&exe), "tests/c/quickstart.c");
    assert_eq!(stdout, "received 32 frames\n");
}

const FLOW_DONE: &str = "flow.c: 64 steered frames with offloads, RSS, EtherType and VLAN checked";

#[test]
fn flow_c_steers_checks_offloads_and_refuses_bad_matches() {
    let stdout = run(Command::new(compile("flow")), "tests/c/flow.c");
    assert!(stdout.contains(FLOW_DONE), "{stdout}");
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/flow.c under it \
              (apt-get install -y valgrind)"
)]
fn flow_c_is_clean_under_valgrind() {
    let stdout = under_valgrind(&compile("flow"), "tests/c/flow.c");
    assert!(stdout.contains(FLOW_DONE), "{stdout}");
}

const INTERRUPT_DONE: &str = "interrupt.c: 5 wake-ups from poll(), each by its frame";

#[test]
fn interrupt_c_sleeps_in_poll_until_a_frame_arrives() {
    let stdout = run(Command::new(compile("interrupt")), "tests/c/interrupt.c");
    assert!(stdout.contains(INTERRUPT_DONE), "{stdout}");
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/interrupt.c under it \
              (apt-get install -y valgrind)"
)]
fn interrupt_c_is_clean_under_valgrind() {
    let stdout = under_valgrind(&compile("interrupt"), "tests/c/interrupt.c");
    assert!(stdout.contains(INTERRUPT_DONE), "{stdout}");
}

const SHARED_DONE: &str =
    "shared.c: 500 frames through a shared ring of 128, 5 limit events, refilled";

#[test]
fn shared_c_refills_a_shared_ring_at_its_limit_events() {
    let stdout = run(Command::new(compile("shared")), "tests/c/shared.c");
    assert!(stdout.contains(SHARED_DONE), "{stdout}");
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/shared.c under it \
              (apt-get install -y valgrind)"
)]
fn shared_c_is_clean_under_valgrind() {
    let stdout = under_valgrind(&compile("shared"), "tests/c/shared.c");
    assert!(stdout.contains(SHARED_DONE), "{stdout}");
}

const MEMORY_DONE: &str = "memory.c: 100 frames each way through a pool in the program's memfd";

#[test]
fn memory_c_runs_a_port_on_the_programs_memfd() {
    let stdout = run(Command::new(compile("memory")), "tests/c/memory.c");
    assert!(stdout.contains(MEMORY_DONE), "{stdout}");
}

#[test]
#[cfg_attr(
    not(has_valgrind),
    ignore = "valgrind is not installed: this test runs tests/c/memory.c under it \
              (apt-get install -y valgrind)"
)]
fn memory_c_is_clean_under_valgrind() {
    let stdout = under_valgrind(&compile("memory"), "tests/c/memory.c");
    assert!(stdout.contains(MEMORY_DONE), "{stdout}");
}
