//! The comparison on small hand-made traces.

use super::*;

/// One trace line.
fn line(seq: u64, opcode: &str, op_mod: u64, fields: &str) -> String {
    format!(
        "{{\"seq\":{seq},\"function\":\"02:cd:00:00:00:01\",\"opcode\":\"{opcode}\",\"op_mod\":{op_mod},\"status\":\"OK\",\"syndrome\":0,\"in\":{{{fields}}}}}"
    )
}

fn trace(lines: &[String]) -> Vec<TracedCommand> {
    parse_trace(&lines.join("\n")).expect("a well-formed trace")
}

const RULES: &str = r#"
[[role]]
command = "CREATE_QP"
fields = ["qpc.st"]
reason = "service types are different objects"

[[role]]
command = "QUERY_HCA_CAP"
fields = ["op_mod"]
reason = "each op_mod asks for another capability page"

[[normalise]]
command = "CREATE_CQ"
field = "pas"
rule = "presence"
reason = "page addresses differ per run"

[[normalise]]
command = "*"
field = "*.cqn*"
rule = "presence"
reason = "object numbers differ per run"

[[allow]]
command = "CREATE_CQ"
field = "cq_context.cq_period"
reason = "moderation chosen per driver"
"#;

fn rules() -> Rules {
    Rules::parse(RULES).unwrap()
}

#[test]
fn identical_traces_compare_clean() {
    let t = trace(&[
        line(
            0,
            "CREATE_CQ",
            0,
            "\"cq_context.log_cq_size\":6,\"pas\":[4096]",
        ),
        line(1, "CREATE_QP", 0, "\"qpc.st\":0,\"qpc.cqn_snd\":3"),
    ]);
    let r = compare(&t, &t, &rules());
    assert_eq!(r.commands_compared, 2);
    assert_eq!(r.differences, vec![]);
    // Status, log_cq_size and pas of the CQ; status and cqn_snd of the QP.
    assert_eq!(r.fields_compared, 5);
    assert_eq!(r.fields_normalised, 2);
    assert_eq!(r.unexplained(), 0);
}

#[test]
fn a_value_that_differs_and_a_field_one_side_leaves_zero_are_found() {
    let l = trace(&[line(
        0,
        "CREATE_CQ",
        0,
        "\"cq_context.log_cq_size\":6,\"cq_context.oi\":1",
    )]);
    let c = trace(&[line(0, "CREATE_CQ", 0, "\"cq_context.log_cq_size\":7")]);
    let r = compare(&l, &c, &rules());
    let lines: Vec<String> = r.differences.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        vec![
            "CREATE_CQ#0 cq_context.log_cq_size: linux=0x6 cxdirect=0x7",
            "CREATE_CQ#0 cq_context.oi: linux=0x1 cxdirect=0",
        ]
    );
    assert_eq!(r.unexplained(), 2);
}

#[test]
fn an_allowed_difference_is_counted_but_does_not_fail() {
    let l = trace(&[line(0, "CREATE_CQ", 0, "\"cq_context.cq_period\":16")]);
    let c = trace(&[line(0, "CREATE_CQ", 0, "")]);
    let r = compare(&l, &c, &rules());
    assert_eq!(r.differences.len(), 1);
    assert_eq!(r.differences[0].allowed, Some(0));
    assert_eq!(r.allowed(), 1);
    assert_eq!(r.unexplained(), 0);
    assert!(r.unused_allows.is_empty());
}

#[test]
fn normalised_fields_compare_only_for_being_set() {
    let l = trace(&[line(
        0,
        "CREATE_QP",
        0,
        "\"qpc.cqn_snd\":3,\"qpc.cqn_rcv\":3",
    )]);
    let c = trace(&[line(0, "CREATE_QP", 0, "\"qpc.cqn_snd\":9")]);
    let r = compare(&l, &c, &rules());
    let lines: Vec<String> = r.differences.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        vec!["CREATE_QP[qpc.st=0x0]#0 qpc.cqn_rcv: linux=0x3 cxdirect=0"]
    );
    assert_eq!(r.fields_normalised, 2);
}

#[test]
fn a_missing_command_is_a_difference_and_roles_pair_by_service_type() {
    // Linux makes a UD QP (st 3) then an RC QP (st 0); cxdirect only the RC QP.
    let l = trace(&[
        line(0, "CREATE_QP", 0, "\"qpc.st\":3,\"qpc.log_sq_size\":6"),
        line(1, "CREATE_QP", 0, "\"qpc.log_sq_size\":8"),
    ]);
    let c = trace(&[line(0, "CREATE_QP", 0, "\"qpc.log_sq_size\":8")]);
    let r = compare(&l, &c, &rules());
    let lines: Vec<String> = r.differences.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        vec!["CREATE_QP[qpc.st=0x3]#0 (only linux): linux=seq 0 cxdirect=-"]
    );
    assert_eq!(r.commands_compared, 1);
    assert_eq!(r.unexplained(), 1);
    assert_eq!(r.unused_allows, vec![0]);
}

#[test]
fn a_status_that_differs_is_a_difference() {
    let l = trace(&[line(0, "NOP", 0, "")]);
    let c = vec![TracedCommand {
        status: "BAD_OP".into(),
        syndrome: 0x0c0d_0001,
        ..l[0].clone()
    }];
    let r = compare(&l, &c, &rules());
    assert_eq!(
        r.differences[0].to_string(),
        "NOP#0 (status): linux=OK syndrome 0x0 cxdirect=BAD_OP syndrome 0xc0d0001"
    );
}

#[test]
fn the_bring_up_order_is_compared() {
    let l = trace(&[
        line(0, "ENABLE_HCA", 0, ""),
        line(1, "QUERY_ISSI", 0, ""),
        line(2, "QUERY_HCA_CAP", 1, ""),
        line(3, "QUERY_HCA_CAP", 3, ""),
        line(4, "INIT_HCA", 0, ""),
    ]);
    let c = trace(&[
        line(0, "ENABLE_HCA", 0, ""),
        line(1, "QUERY_HCA_CAP", 1, ""),
        line(2, "QUERY_ISSI", 0, ""),
        line(3, "INIT_HCA", 0, ""),
    ]);
    let r = compare(&l, &c, &rules());
    let lines: Vec<String> = r.differences.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        vec![
            "QUERY_HCA_CAP[op_mod=0x3]#0 (only linux): linux=seq 3 cxdirect=-",
            "QUERY_ISSI#0 (bring-up order): linux=position 1 cxdirect=elsewhere",
            "QUERY_ISSI#0 (bring-up order): linux=elsewhere cxdirect=position 2",
        ]
    );
}

#[test]
fn malformed_traces_are_refused_with_their_line() {
    let e = parse_trace("\n{\"seq\":0}\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(parse_trace("not json").is_err());
    let bad_field = line(0, "NOP", 0, "\"x\":{\"y\":1}");
    assert!(parse_trace(&bad_field).is_err());
}
