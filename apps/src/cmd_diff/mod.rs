//! Two command traces side by side: Linux's mlx5 drivers and cxdirect running the same jobs on
//! the model (`cxdirect-emu-server --trace-commands`, `EmuConfig::command_trace`).
//!
//! Commands are paired by their *key*: the opcode, plus the values of the fields a `[[role]]`
//! rule names (CREATE_QP by service type, CREATE_MKEY by access mode, QUERY_HCA_CAP by op_mod,
//! ...); within one key each of cxdirect's commands pairs with the Linux command of that key
//! it differs from least (Linux's trace holds many runs of each job; the earliest wins a tie,
//! so the bring-up sequence pairs by order). For each pair every field either side sets is compared
//! (a field one side leaves out is zero there); `[[normalise]]` rules compare per-object
//! values (object numbers, addresses, sizes each driver picks) only for being set. A command
//! with no partner, a different status, and a bring-up command out of order are differences
//! too. Each difference is either named by an `[[allow]]` entry or makes the comparison fail.

pub mod rules;

use rules::{glob, Normalise, Rules};
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

/// One field's value as a trace records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A scalar.
    Num(u64),
    /// A byte array, as hex.
    Text(String),
    /// An array of wider elements.
    List(Vec<u64>),
}

impl Value {
    /// Whether the value is zero (an absent field reads as zero).
    pub fn is_zero(&self) -> bool {
        match self {
            Value::Num(n) => *n == 0,
            Value::Text(t) => t.bytes().all(|b| b == b'0'),
            Value::List(l) => l.iter().all(|&e| e == 0),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(n) => write!(f, "{n:#x}"),
            Value::Text(t) => write!(f, "\"{t}\""),
            Value::List(l) => {
                let shown: Vec<String> = l.iter().take(4).map(|e| format!("{e:#x}")).collect();
                if l.len() > 4 {
                    write!(f, "[{}, ... {} entries]", shown.join(", "), l.len())
                } else {
                    write!(f, "[{}]", shown.join(", "))
                }
            }
        }
    }
}

/// One command of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedCommand {
    /// Position in its trace.
    pub seq: u64,
    /// The function that executed it (its MAC address).
    pub function: String,
    /// The opcode's name (or `0x...` for one the model does not know).
    pub opcode: String,
    /// The operation modifier.
    pub op_mod: u64,
    /// The status the function answered.
    pub status: String,
    /// The syndrome it answered.
    pub syndrome: u64,
    /// The decoded input's non-zero fields.
    pub fields: BTreeMap<String, Value>,
}

/// A trace that cannot be read.
#[derive(Debug, Error)]
#[error("line {line}: {what}")]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

fn field_value(v: &serde_json::Value) -> Option<Value> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().map(Value::Num),
        serde_json::Value::String(s) => Some(Value::Text(s.clone())),
        serde_json::Value::Array(a) => a
            .iter()
            .map(serde_json::Value::as_u64)
            .collect::<Option<Vec<_>>>()
            .map(Value::List),
        _ => None,
    }
}

/// Parses a trace: one JSON object per line, as the model writes them; blank lines are skipped.
///
/// # Errors
///
/// A line that is not such an object.
pub fn parse_trace(text: &str) -> Result<Vec<TracedCommand>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |what: String| TraceError { line: i + 1, what };
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| err(format!("not JSON: {e}")))?;
        let text_of = |k: &str| -> Result<String, TraceError> {
            v.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| err(format!("no string `{k}`")))
        };
        let num_of = |k: &str| -> Result<u64, TraceError> {
            v.get(k)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| err(format!("no number `{k}`")))
        };
        let mut fields = BTreeMap::new();
        let input = v
            .get("in")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| err("no object `in`".into()))?;
        for (name, value) in input {
            let value =
                field_value(value).ok_or_else(|| err(format!("field {name}: not a value")))?;
            fields.insert(name.clone(), value);
        }
        out.push(TracedCommand {
            seq: num_of("seq")?,
            function: text_of("function")?,
            opcode: text_of("opcode")?,
            op_mod: num_of("op_mod")?,
            status: text_of("status")?,
            syndrome: num_of("syndrome")?,
            fields,
        });
    }
    Ok(out)
}

/// The two sides of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Linux's mlx5 drivers.
    Linux,
    /// cxdirect.
    Cxdirect,
}

/// One difference between the two traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The command key (`CREATE_QP[qpc.st=0x0]`).
    pub key: String,
    /// Which command of that key (0 for the first).
    pub index: usize,
    /// The field, or `(only linux)`, `(only cxdirect)`, `(status)`, `(bring-up order)`.
    pub field: String,
    /// Linux's side, as text.
    pub linux: String,
    /// cxdirect's side, as text.
    pub cxdirect: String,
    /// The `[[allow]]` entry that names it (index into [`Rules::allow`]).
    pub allowed: Option<usize>,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{} {}: linux={} cxdirect={}",
            self.key, self.index, self.field, self.linux, self.cxdirect
        )
    }
}

/// What a comparison found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Commands in Linux's trace.
    pub linux_commands: usize,
    /// Commands in cxdirect's trace.
    pub cxdirect_commands: usize,
    /// Pairs of commands compared.
    pub commands_compared: usize,
    /// Fields compared over all pairs (each field either side sets, plus the status).
    pub fields_compared: usize,
    /// Of those, fields a `[[normalise]]` rule compared only for being set.
    pub fields_normalised: usize,
    /// Every difference, in the order found.
    pub differences: Vec<Difference>,
    /// `[[allow]]` entries that named no difference (stale, or for jobs not run).
    pub unused_allows: Vec<usize>,
}

impl Report {
    /// Differences an `[[allow]]` entry names.
    pub fn allowed(&self) -> usize {
        self.differences
            .iter()
            .filter(|d| d.allowed.is_some())
            .count()
    }

    /// Differences no entry names: the comparison fails when there is one.
    pub fn unexplained(&self) -> usize {
        self.differences.len() - self.allowed()
    }

    /// The closing figures, one line.
    pub fn figures(&self) -> String {
        format!(
            "commands: linux {} cxdirect {}, compared {}; fields compared {} (normalised {}); differences found {}, allowed {}, unexplained {}",
            self.linux_commands,
            self.cxdirect_commands,
            self.commands_compared,
            self.fields_compared,
            self.fields_normalised,
            self.differences.len(),
            self.allowed(),
            self.unexplained()
        )
    }
}

/// The bring-up: every command up to and including the first INIT_HCA, whose order both
/// drivers must keep (the firmware's boot protocol).
pub const BRING_UP_END: &str = "INIT_HCA";

/// The key that pairs `cmd`: its opcode, plus its role's values when a `[[role]]` names it.
pub fn key_of(cmd: &TracedCommand, rules: &Rules) -> String {
    let Some(role) = rules.roles.iter().find(|r| r.command == cmd.opcode) else {
        return cmd.opcode.clone();
    };
    let mut parts = Vec::new();
    for pattern in &role.fields {
        if pattern == "op_mod" {
            parts.push(format!("op_mod={:#x}", cmd.op_mod));
        } else if pattern.contains('*') {
            for (name, value) in &cmd.fields {
                if glob(pattern, name) && !value.is_zero() {
                    parts.push(format!("{name}={value}"));
                }
            }
        } else {
            let value = cmd.fields.get(pattern).cloned().unwrap_or(Value::Num(0));
            parts.push(format!("{pattern}={value}"));
        }
    }
    format!("{}[{}]", cmd.opcode, parts.join(","))
}

fn allow_for(rules: &Rules, key: &str, opcode: &str, field: &str) -> Option<usize> {
    rules.allow.iter().position(|a| {
        a.commands.iter().any(|c| glob(c, key) || glob(c, opcode))
            && a.fields.iter().any(|f| glob(f, field))
    })
}

fn normalise_for(rules: &Rules, key: &str, opcode: &str, field: &str) -> Option<Normalise> {
    rules
        .normalise
        .iter()
        .find(|n| (glob(&n.command, key) || glob(&n.command, opcode)) && glob(&n.field, field))
        .map(|n| n.rule)
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "0".to_owned(), Value::to_string)
}

/// Longest common subsequence of two key lists: which positions of each lie on it.
fn on_lcs(a: &[String], b: &[String]) -> (Vec<bool>, Vec<bool>) {
    let (n, m) = (a.len(), b.len());
    let mut len = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            len[i][j] = if a[i] == b[j] {
                len[i + 1][j + 1] + 1
            } else {
                len[i + 1][j].max(len[i][j + 1])
            };
        }
    }
    let (mut ina, mut inb) = (vec![false; n], vec![false; m]);
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            ina[i] = true;
            inb[j] = true;
            i += 1;
            j += 1;
        } else if len[i + 1][j] >= len[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    (ina, inb)
}

/// One field of a pair: name, Linux's value, cxdirect's, whether normalised, whether equal.
type Verdict<'a> = (&'a str, Option<&'a Value>, Option<&'a Value>, bool, bool);

/// Each field either side sets to non-zero, with both values, whether a `[[normalise]]` rule
/// compared it for being set only, and whether the two sides agree.
fn field_verdicts<'a>(
    l: &'a TracedCommand,
    c: &'a TracedCommand,
    key: &str,
    rules: &Rules,
) -> Vec<Verdict<'a>> {
    let mut names: Vec<&String> = l.fields.keys().chain(c.fields.keys()).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let (lv, cv) = (l.fields.get(name), c.fields.get(name));
        let lz = lv.is_none_or(Value::is_zero);
        let cz = cv.is_none_or(Value::is_zero);
        if lz && cz {
            continue;
        }
        let (normalised, same) = match normalise_for(rules, key, &l.opcode, name) {
            Some(Normalise::Presence) => (true, lz == cz),
            None => (false, lv == cv),
        };
        out.push((name.as_str(), lv, cv, normalised, same));
    }
    out
}

/// How far apart two commands of one key are: first how many of their differences (fields
/// and the status) no `[[allow]]` rule names, then how many differences in all.
fn distance(l: &TracedCommand, c: &TracedCommand, key: &str, rules: &Rules) -> (usize, usize) {
    let mut unexplained = 0;
    let mut all = 0;
    if l.status != c.status {
        all += 1;
        unexplained += usize::from(allow_for(rules, key, &l.opcode, "(status)").is_none());
    }
    for (name, ..) in field_verdicts(l, c, key, rules).iter().filter(|v| !v.4) {
        all += 1;
        unexplained += usize::from(allow_for(rules, key, &l.opcode, name).is_none());
    }
    (unexplained, all)
}

/// Pairs the commands of one key. Linux's trace holds many runs of each job (every perftest
/// and pingpong run creates its own PD, CQ, QP), cxdirect's one: each of cxdirect's commands,
/// in order, pairs with the not yet paired Linux command of its key whose differences from it
/// the rules leave least unexplained, then that differs in the fewest fields (the earliest on
/// a tie), so a job is compared with the run of Linux's that did the same thing; a command
/// the rules allow to be cxdirect's alone is left alone rather than paired with one whose
/// differences they do not explain. What is left over on either side has no partner. Returned in Linux's
/// order, cxdirect's unpaired commands last.
fn pair_within_key(
    linux: &[TracedCommand],
    cxdirect: &[TracedCommand],
    ls: &[usize],
    cs: &[usize],
    key: &str,
    rules: &Rules,
) -> Vec<(Option<usize>, Option<usize>)> {
    let mut partner: Vec<Option<usize>> = vec![None; ls.len()];
    let mut lonely = Vec::new();
    for &c in cs {
        let cmd = &cxdirect[c];
        let best = ls
            .iter()
            .enumerate()
            .filter(|(i, _)| partner[*i].is_none())
            .map(|(i, &l)| (distance(&linux[l], cmd, key, rules), i))
            .min();
        // A command the rules allow to stand alone stays alone rather than pair with one
        // whose differences they do not explain.
        let alone_allowed = allow_for(rules, key, &cmd.opcode, "(only cxdirect)").is_some();
        match best {
            Some(((unexplained, _), _)) if unexplained > 0 && alone_allowed => lonely.push(c),
            Some((_, i)) => partner[i] = Some(c),
            None => lonely.push(c),
        }
    }
    ls.iter()
        .zip(partner)
        .map(|(&l, c)| (Some(l), c))
        .chain(lonely.into_iter().map(|c| (None, Some(c))))
        .collect()
}

/// Compares Linux's trace with cxdirect's under `rules`.
pub fn compare(linux: &[TracedCommand], cxdirect: &[TracedCommand], rules: &Rules) -> Report {
    let mut report = Report {
        linux_commands: linux.len(),
        cxdirect_commands: cxdirect.len(),
        ..Report::default()
    };
    let keyed = |trace: &[TracedCommand]| -> Vec<String> {
        trace.iter().map(|c| key_of(c, rules)).collect()
    };
    let (lkeys, ckeys) = (keyed(linux), keyed(cxdirect));

    // Group by key, keys in order of first appearance (Linux's first).
    let mut order: Vec<String> = Vec::new();
    let mut groups: BTreeMap<String, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for (side, keys) in [(0, &lkeys), (1, &ckeys)] {
        for (i, k) in keys.iter().enumerate() {
            let g = groups.entry(k.clone()).or_insert_with(|| {
                order.push(k.clone());
                (Vec::new(), Vec::new())
            });
            if side == 0 {
                g.0.push(i);
            } else {
                g.1.push(i);
            }
        }
    }

    let push = |report: &mut Report, key: &str, opcode: &str, index, field: &str, l, c| {
        let allowed = allow_for(rules, key, opcode, field);
        report.differences.push(Difference {
            key: key.to_owned(),
            index,
            field: field.to_owned(),
            linux: l,
            cxdirect: c,
            allowed,
        });
    };

    for key in &order {
        let (ls, cs) = &groups[key];
        let pairs = pair_within_key(linux, cxdirect, ls, cs, key, rules);
        for (index, pair) in pairs.into_iter().enumerate() {
            let (l, c) = match pair {
                (Some(l), Some(c)) => (&linux[l], &cxdirect[c]),
                (Some(l), None) => {
                    let cmd = &linux[l];
                    let l = format!("seq {}", cmd.seq);
                    push(
                        &mut report,
                        key,
                        &cmd.opcode,
                        index,
                        "(only linux)",
                        l,
                        "-".into(),
                    );
                    continue;
                }
                (None, Some(c)) => {
                    let cmd = &cxdirect[c];
                    let c = format!("seq {}", cmd.seq);
                    push(
                        &mut report,
                        key,
                        &cmd.opcode,
                        index,
                        "(only cxdirect)",
                        "-".into(),
                        c,
                    );
                    continue;
                }
                (None, None) => continue,
            };
            report.commands_compared += 1;
            let opcode = &l.opcode;
            report.fields_compared += 1;
            if l.status != c.status {
                push(
                    &mut report,
                    key,
                    opcode,
                    index,
                    "(status)",
                    format!("{} syndrome {:#x}", l.status, l.syndrome),
                    format!("{} syndrome {:#x}", c.status, c.syndrome),
                );
            }
            for (name, lv, cv, normalised, same) in field_verdicts(l, c, key, rules) {
                report.fields_compared += 1;
                if normalised {
                    report.fields_normalised += 1;
                }
                if !same {
                    push(&mut report, key, opcode, index, name, show(lv), show(cv));
                }
            }
        }
    }

    // The bring-up's order, over the keys both bring-ups hold.
    let bring_up = |trace: &[TracedCommand], keys: &[String]| -> Option<Vec<(usize, String)>> {
        let end = trace.iter().position(|c| c.opcode == BRING_UP_END)?;
        Some(keys[..=end].iter().cloned().enumerate().collect())
    };
    if let (Some(lb), Some(cb)) = (bring_up(linux, &lkeys), bring_up(cxdirect, &ckeys)) {
        let lset: Vec<&String> = lb.iter().map(|(_, k)| k).collect();
        let cset: Vec<&String> = cb.iter().map(|(_, k)| k).collect();
        let lb: Vec<(usize, String)> = lb
            .iter()
            .filter(|(_, k)| cset.contains(&k))
            .cloned()
            .collect();
        let cb: Vec<(usize, String)> = cb
            .iter()
            .filter(|(_, k)| lset.contains(&k))
            .cloned()
            .collect();
        let lk: Vec<String> = lb.iter().map(|(_, k)| k.clone()).collect();
        let ck: Vec<String> = cb.iter().map(|(_, k)| k.clone()).collect();
        let (lon, con) = on_lcs(&lk, &ck);
        for ((pos, k), on) in lb.iter().zip(lon) {
            if !on {
                let opcode = &linux[*pos].opcode;
                let l = format!("position {pos}");
                push(
                    &mut report,
                    k,
                    opcode,
                    0,
                    "(bring-up order)",
                    l,
                    "elsewhere".into(),
                );
            }
        }
        for ((pos, k), on) in cb.iter().zip(con) {
            if !on {
                let opcode = &cxdirect[*pos].opcode;
                let c = format!("position {pos}");
                push(
                    &mut report,
                    k,
                    opcode,
                    0,
                    "(bring-up order)",
                    "elsewhere".into(),
                    c,
                );
            }
        }
    }

    report.unused_allows = (0..rules.allow.len())
        .filter(|i| !report.differences.iter().any(|d| d.allowed == Some(*i)))
        .collect();
    report
}

#[cfg(test)]
mod tests;
