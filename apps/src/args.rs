//! A small, dependency-free command-line reader shared by the programs: `--name value` and
//! `--flag` options, with errors that say which option was wrong and show the usage.

use std::collections::HashMap;

/// Parsed options: every `--name value` (repeatable) and bare `--flag`.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, Vec<String>>,
    flags: Vec<String>,
}

impl Args {
    /// Parses `argv` (without the program name). `flags` lists the options that take no value.
    pub fn parse(argv: impl IntoIterator<Item = String>, flags: &[&str]) -> Result<Self, String> {
        let mut args = Args::default();
        let mut it = argv.into_iter();
        while let Some(arg) = it.next() {
            let Some(name) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument `{arg}`"));
            };
            if flags.contains(&name) {
                args.flags.push(name.to_string());
                continue;
            }
            let value = it
                .next()
                .ok_or_else(|| format!("option --{name} needs a value"))?;
            args.values.entry(name.to_string()).or_default().push(value);
        }
        Ok(args)
    }

    /// Every value given for `--name`.
    pub fn all(&self, name: &str) -> &[String] {
        self.values.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The last value given for `--name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.all(name).last().map(String::as_str)
    }

    /// The value of `--name` parsed as `T`, or `default` when absent.
    pub fn parse_or<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("option --{name}: cannot parse `{v}`")),
        }
    }

    /// Whether the bare `--flag` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// Names of options given that are not in `known` (value options) or `flags`.
    pub fn unknown(&self, known: &[&str], flags: &[&str]) -> Vec<String> {
        let mut out: Vec<String> = self
            .values
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        out.extend(
            self.flags
                .iter()
                .filter(|f| !flags.contains(&f.as_str()))
                .cloned(),
        );
        out
    }
}
