// Shared by the build scripts that probe the host for the tools some tests need (each
// includes this file), so that those tests are ignored, with the reason, where a tool is
// missing, and run where it is present, rather than passing having checked nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// For each `(cfg, program)`: declares `cfg` and sets it when `PATH` holds an executable
/// `program`; the probe runs again when `PATH` or a directory on it changes.
fn probe_host_tools(tools: &[(&str, &str)]) {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=../build-support/host_tools.rs");
    println!("cargo::rerun-if-env-changed=PATH");
    for (cfg, program) in tools {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if find_in_path(program) {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}

/// Whether `PATH` holds an executable `name`. Each existing `PATH` directory is watched, so the
/// probe runs again when a program is installed there. A missing path is never watched: cargo
/// counts a missing path as changed, which would rebuild the crate on every build.
fn find_in_path(name: &str) -> bool {
    let build_dirs = build_dirs();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut found = false;
    let mut watched: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(&path) {
        // The build's own folders change with every build: watching them would rerun the
        // probe (and rebuild the crate) each time.
        let ours = build_dirs
            .iter()
            .any(|own| own.starts_with(&dir) || dir.starts_with(own));
        if !dir.is_absolute() || !dir.is_dir() || ours || watched.contains(&dir) {
            continue;
        }
        if let Some(shown) = dir.to_str() {
            println!("cargo::rerun-if-changed={shown}");
        }
        found |= is_executable(&dir.join(name));
        watched.push(dir);
    }
    found
}

/// The package's folder and the build's output folder.
fn build_dirs() -> Vec<PathBuf> {
    ["CARGO_MANIFEST_DIR", "OUT_DIR"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect()
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
