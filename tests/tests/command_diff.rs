//! Linux's commands side by side with cxdirect's, on every `cargo test`: the driver runs its
//! jobs against a model recording its commands, and the comparison against the QEMU rig's
//! trace of Linux (tests/fixtures/linux-commands-a.jsonl.gz) must find no difference that
//! docs/command-diff.toml does not name with a reason.

#[path = "command_trace.rs"]
#[allow(dead_code)]
mod command_trace;

use cxdirect_apps::cmd_diff::rules::Rules;
use cxdirect_apps::cmd_diff::{compare, parse_trace, TracedCommand};

fn fixture(name: &str) -> Vec<TracedCommand> {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = if name.ends_with(".gz") {
        use std::io::Read;
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("the fixture"))
            .read_to_string(&mut text)
            .expect("the fixture decompresses");
        text
    } else {
        std::fs::read_to_string(&path).expect("the fixture")
    };
    parse_trace(&text).expect("it parses")
}

fn rules() -> Rules {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/command-diff.toml");
    Rules::parse(&std::fs::read_to_string(path).expect("the rules file")).expect("valid rules")
}

fn ours() -> Vec<TracedCommand> {
    let [a, _] = command_trace::run_jobs();
    parse_trace(&a.join("\n")).expect("our trace parses")
}

#[test]
fn every_difference_from_linux_is_fixed_or_named_with_a_reason() {
    let linux = fixture("linux-commands-a.jsonl.gz");
    let report = compare(&linux, &ours(), &rules());
    let unexplained: Vec<String> = report
        .differences
        .iter()
        .filter(|d| d.allowed.is_none())
        .map(ToString::to_string)
        .collect();
    println!("{}", report.figures());
    assert!(unexplained.is_empty(), "{unexplained:#?}");
    assert!(report.commands_compared > 90, "{}", report.figures());
}

#[test]
fn the_checked_in_cxdirect_trace_is_what_the_driver_sends() {
    // The rig compares a fresh Linux trace against this file; it must not go stale. To renew
    // it: CXDIRECT_COMMAND_TRACE_DIR=DIR cargo test -p cxdirect-tests --test command_trace,
    // then copy DIR/cxdirect-commands-a.jsonl to tests/fixtures/.
    let report = compare(&fixture("cxdirect-commands-a.jsonl"), &ours(), &rules());
    let lines: Vec<String> = report.differences.iter().map(ToString::to_string).collect();
    assert!(lines.is_empty(), "{lines:#?}");
}
