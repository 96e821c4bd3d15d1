//! cxdirect-cmd-diff: sets Linux's and cxdirect's command traces of the same jobs side by side
//! (`cxdirect-emu-server --trace-commands`, `EmuConfig::command_trace`), prints one line per
//! field one side sets differently, and fails unless every difference is named in the reviewed
//! rules file.
//!
//! Exit status: 0 when every difference is allowed, 1 when one is not, 2 when a file cannot be
//! read.

use clap::Parser;
use cxdirect_apps::cmd_diff::rules::Rules;
use cxdirect_apps::cmd_diff::{compare, parse_trace, TracedCommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Compares Linux's and cxdirect's command traces of the model
#[derive(Parser, Debug)]
#[command(name = "cxdirect-cmd-diff", version)]
#[command(
    after_help = "Each trace is one JSON object per line, as cxdirect-emu-server --trace-commands writes it.\nExit status: 0 every difference allowed, 1 a difference not allowed, 2 a file that cannot be read."
)]
struct Cli {
    /// Linux's trace (mlx5_core, mlx5e, mlx5_ib on the model)
    #[arg(long, value_name = "FILE")]
    linux: PathBuf,
    /// cxdirect's trace of the same jobs
    #[arg(long, value_name = "FILE")]
    cxdirect: PathBuf,
    /// The reviewed rules: roles, normalisations and allowed differences
    #[arg(long, value_name = "FILE", default_value = "docs/command-diff.toml")]
    rules: PathBuf,
    /// Compare only the commands of this function (a MAC address as the traces write it)
    #[arg(long, value_name = "MAC")]
    function: Option<String>,
    /// Also print the allowed differences' reasons and the allow entries that matched nothing
    #[arg(short, long)]
    verbose: bool,
}

fn read_trace(path: &Path, function: Option<&str>) -> Result<Vec<TracedCommand>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut trace = parse_trace(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(f) = function {
        trace.retain(|c| c.function == f);
    }
    let mut functions: Vec<&str> = trace.iter().map(|c| c.function.as_str()).collect();
    functions.sort_unstable();
    functions.dedup();
    if functions.len() > 1 {
        return Err(format!(
            "{}: commands of {} functions ({}); choose one with --function",
            path.display(),
            functions.len(),
            functions.join(", ")
        ));
    }
    Ok(trace)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let loaded = (|| -> Result<_, String> {
        let rules_text = std::fs::read_to_string(&cli.rules)
            .map_err(|e| format!("{}: {e}", cli.rules.display()))?;
        let rules =
            Rules::parse(&rules_text).map_err(|e| format!("{}: {e}", cli.rules.display()))?;
        let linux = read_trace(&cli.linux, cli.function.as_deref())?;
        let ours = read_trace(&cli.cxdirect, cli.function.as_deref())?;
        Ok((rules, linux, ours))
    })();
    let (rules, linux, ours) = match loaded {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cxdirect-cmd-diff: {e}");
            return ExitCode::from(2);
        }
    };
    let report = compare(&linux, &ours, &rules);
    for d in &report.differences {
        match d.allowed {
            Some(i) if cli.verbose => println!("allowed {d} ({})", rules.allow[i].reason),
            Some(_) => println!("allowed {d}"),
            None => println!("DIFF    {d}"),
        }
    }
    if cli.verbose {
        for &i in &report.unused_allows {
            let a = &rules.allow[i];
            println!(
                "note: allow entry {} {} matched nothing",
                a.commands.join(","),
                a.fields.join(",")
            );
        }
    }
    println!("{}", report.figures());
    if report.unexplained() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
