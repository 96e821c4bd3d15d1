//! The reviewed rules of a command comparison, read from a small TOML file
//! (`docs/command-diff.toml`): how commands of one opcode are told apart (`[[role]]`), which
//! fields are compared only for being set (`[[normalise]]`), and which differences are
//! deliberate (`[[allow]]`). Every entry carries a one-line `reason`.
//!
//! The file is read by a parser of the subset it needs: `#` comments, `[[role]]`,
//! `[[normalise]]` and `[[allow]]` headers, and `key = "string"` or `key = ["string", ...]`
//! lines (one line each). Anything else is an error, so a typo never silently drops a rule.

use thiserror::Error;

/// How the commands of one opcode are told apart before they are paired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// The opcode's name (`CREATE_QP`).
    pub command: String,
    /// Fields (globs allowed, `op_mod` for the header's) whose values make up the role.
    pub fields: Vec<String>,
    /// Why these fields tell the commands apart.
    pub reason: String,
}

/// What a normalising rule compares instead of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Normalise {
    /// Only whether the field is set (not zero) on each side: object numbers, addresses,
    /// sizes each driver chooses.
    Presence,
}

/// A normalising rule: fields matching `field` in commands matching `command` are compared as
/// `rule` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormaliseRule {
    /// A command key or opcode glob (`*` for every command).
    pub command: String,
    /// A field path glob (`*.cqn*`).
    pub field: String,
    /// How the values are compared.
    pub rule: Normalise,
    /// Why the values differ per object or per driver.
    pub reason: String,
}

/// A deliberate difference: any of `fields` in any of `commands`, for one reason (`command`
/// and `field` in the file may each be one string or a list, so differences of one reason
/// stay one entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    /// Command key (`CREATE_QP[qpc.st=0x0]`) or opcode globs.
    pub commands: Vec<String>,
    /// Field path globs, or `(only linux)`, `(only cxdirect)`, `(bring-up order)`, `(status)`.
    pub fields: Vec<String>,
    /// Why the difference is deliberate (cite the Linux function).
    pub reason: String,
}

/// The rules of one comparison.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// Roles, at most one per opcode.
    pub roles: Vec<Role>,
    /// Normalising rules, first match wins.
    pub normalise: Vec<NormaliseRule>,
    /// Deliberate differences.
    pub allow: Vec<Allow>,
}

/// A rules file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RulesError {
    /// A line the subset does not cover.
    #[error("line {line}: {what}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// An entry without a key it needs.
    #[error("the [[{table}]] entry ending at line {line} lacks `{key}`")]
    Missing {
        /// The table.
        table: &'static str,
        /// The missing key.
        key: &'static str,
        /// Where the entry ends.
        line: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TomlValue {
    Str(String),
    List(Vec<String>),
}

/// Parses a `"..."` string with `\"` and `\\` escapes at the start of `s`; returns it and the
/// rest.
fn parse_string(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &s[i + 2..])),
            '\\' => match chars.next()?.1 {
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    None
}

fn parse_value(s: &str) -> Option<TomlValue> {
    let s = s.trim();
    if s.starts_with('"') {
        let (text, rest) = parse_string(s)?;
        return rest.trim().is_empty().then_some(TomlValue::Str(text));
    }
    let mut rest = s.strip_prefix('[')?.trim_start();
    let mut items = Vec::new();
    loop {
        if let Some(after) = rest.strip_prefix(']') {
            return after.trim().is_empty().then_some(TomlValue::List(items));
        }
        let (item, after) = parse_string(rest)?;
        items.push(item);
        rest = after.trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after.trim_start();
        } else if !rest.starts_with(']') {
            return None;
        }
    }
}

/// Strips a `#` comment that is not inside a string.
fn strip_comment(line: &str) -> &str {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            '\\' if in_string => escaped = !escaped,
            '"' if !escaped => in_string = !in_string,
            '#' if !in_string => return &line[..i],
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    line
}

type Entry = (&'static str, Vec<(String, TomlValue)>, usize);

fn take_str(
    entry: &[(String, TomlValue)],
    table: &'static str,
    key: &'static str,
    line: usize,
) -> Result<String, RulesError> {
    match entry.iter().find(|(k, _)| k == key) {
        Some((_, TomlValue::Str(s))) => Ok(s.clone()),
        Some(_) => Err(RulesError::Syntax {
            line,
            what: format!("`{key}` of [[{table}]] must be a string"),
        }),
        None => Err(RulesError::Missing { table, key, line }),
    }
}

fn take_list(
    entry: &[(String, TomlValue)],
    table: &'static str,
    key: &'static str,
    line: usize,
) -> Result<Vec<String>, RulesError> {
    match entry.iter().find(|(k, _)| k == key) {
        Some((_, TomlValue::Str(s))) => Ok(vec![s.clone()]),
        Some((_, TomlValue::List(l))) if !l.is_empty() => Ok(l.clone()),
        Some(_) => Err(RulesError::Syntax {
            line,
            what: format!("`{key}` of [[{table}]] must not be an empty list"),
        }),
        None => Err(RulesError::Missing { table, key, line }),
    }
}

impl Rules {
    /// Parses a rules file's text.
    ///
    /// # Errors
    ///
    /// A line outside the subset, an unknown table or key, or an entry missing a key.
    pub fn parse(text: &str) -> Result<Self, RulesError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let s = strip_comment(raw).trim();
            if s.is_empty() {
                continue;
            }
            if let Some(name) = s.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")) {
                let table = match name.trim() {
                    "role" => "role",
                    "normalise" => "normalise",
                    "allow" => "allow",
                    other => {
                        return Err(RulesError::Syntax {
                            line,
                            what: format!("unknown table [[{other}]]"),
                        })
                    }
                };
                entries.push((table, Vec::new(), line));
                continue;
            }
            let Some((key, value)) = s.split_once('=') else {
                return Err(RulesError::Syntax {
                    line,
                    what: "expected `key = value` or a [[table]] header".into(),
                });
            };
            let key = key.trim().to_owned();
            let value = parse_value(value).ok_or_else(|| RulesError::Syntax {
                line,
                what: format!("`{key}`: expected \"string\" or [\"string\", ...] on one line"),
            })?;
            let Some((table, fields, end)) = entries.last_mut() else {
                return Err(RulesError::Syntax {
                    line,
                    what: "a key before any [[table]]".into(),
                });
            };
            let known: &[&str] = match *table {
                "role" => &["command", "fields", "reason"],
                "normalise" => &["command", "field", "rule", "reason"],
                _ => &["command", "field", "reason"],
            };
            if !known.contains(&key.as_str()) {
                return Err(RulesError::Syntax {
                    line,
                    what: format!("unknown key `{key}` in [[{table}]]"),
                });
            }
            fields.push((key, value));
            *end = line;
        }
        let mut rules = Rules::default();
        for (table, entry, line) in entries {
            let reason = take_str(&entry, table, "reason", line)?;
            if table == "allow" {
                rules.allow.push(Allow {
                    commands: take_list(&entry, table, "command", line)?,
                    fields: take_list(&entry, table, "field", line)?,
                    reason,
                });
                continue;
            }
            let command = take_str(&entry, table, "command", line)?;
            match table {
                "role" => {
                    let fields = match entry.iter().find(|(k, _)| k == "fields") {
                        Some((_, TomlValue::List(l))) => l.clone(),
                        Some((_, TomlValue::Str(s))) => vec![s.clone()],
                        None => {
                            return Err(RulesError::Missing {
                                table,
                                key: "fields",
                                line,
                            })
                        }
                    };
                    rules.roles.push(Role {
                        command,
                        fields,
                        reason,
                    });
                }
                "normalise" => {
                    let field = take_str(&entry, table, "field", line)?;
                    let rule = match take_str(&entry, table, "rule", line)?.as_str() {
                        "presence" => Normalise::Presence,
                        other => {
                            return Err(RulesError::Syntax {
                                line,
                                what: format!("unknown rule {other:?} (expected \"presence\")"),
                            })
                        }
                    };
                    rules.normalise.push(NormaliseRule {
                        command,
                        field,
                        rule,
                        reason,
                    });
                }
                _ => unreachable!("allow entries are read above"),
            }
        }
        Ok(rules)
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    // Iterative matching with one backtrack point: the last `*` seen.
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subset_parses_and_refuses_the_rest() {
        let rules = Rules::parse(
            r#"
# roles
[[role]]
command = "CREATE_QP"   # by service type
fields = ["qpc.st"]
reason = "RC and UD QPs are different objects"

[[normalise]]
command = "*"
field = "*.cqn*"
rule = "presence"
reason = "object numbers differ per run"

[[allow]]
command = "CREATE_CQ"
field = "cq_context.cq_period"
reason = "a \"quoted\" reason # not a comment"
"#,
        )
        .unwrap();
        assert_eq!(rules.roles[0].fields, vec!["qpc.st".to_string()]);
        assert_eq!(rules.normalise[0].rule, Normalise::Presence);
        assert_eq!(rules.allow[0].reason, "a \"quoted\" reason # not a comment");
        assert!(matches!(
            Rules::parse("[[allow]]\ncommand = \"X\"\nfield = \"y\"\n"),
            Err(RulesError::Missing { key: "reason", .. })
        ));
        assert!(matches!(
            Rules::parse("[[allow]]\ncomand = \"X\"\n"),
            Err(RulesError::Syntax { line: 2, .. })
        ));
        assert!(matches!(
            Rules::parse("[[allowed]]\n"),
            Err(RulesError::Syntax { line: 1, .. })
        ));
        assert!(matches!(
            Rules::parse(
                "[[normalise]]\ncommand=\"*\"\nfield=\"x\"\nrule=\"ignore\"\nreason=\"r\""
            ),
            Err(RulesError::Syntax { .. })
        ));
    }

    #[test]
    fn globs() {
        assert!(glob("*", "anything.at.all"));
        assert!(glob("*.cqn*", "qpc.cqn_snd"));
        assert!(!glob("*.cqn*", "cqn"));
        assert!(glob("pas", "pas"));
        assert!(!glob("pas", "pas2"));
        assert!(glob("CREATE_*", "CREATE_QP[qpc.st=0x0]"));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
    }
}
