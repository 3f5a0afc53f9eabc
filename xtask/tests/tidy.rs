//! The layering rules as a test (the way rust-analyzer's tidy tests keep
//! its architecture): which crates may use which I/O libraries, that the
//! pure crates stay pure all the way down, that every source file says what
//! it is on its first line, and that no crate declares a dependency it does
//! not use. Each rule names the file or crate that breaks it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// This machine's target triple (the platform dependencies resolve for).
fn host() -> String {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}

/// `cargo metadata` of the workspace, resolved for this machine.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", &host()])
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

struct Workspace {
    meta: Value,
}

impl Workspace {
    fn packages(&self) -> &Vec<Value> {
        self.meta["packages"].as_array().unwrap()
    }

    fn members(&self) -> Vec<&Value> {
        let ids: BTreeSet<&str> = self.meta["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        self.packages()
            .iter()
            .filter(|p| ids.contains(p["id"].as_str().unwrap()))
            .collect()
    }

    /// Direct dependencies of `pkg` that are built into it (not dev).
    fn direct(pkg: &Value) -> Vec<String> {
        pkg["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Every package `name` links, transitively, through normal
    /// dependencies (what its library carries into whatever uses it).
    fn closure(&self, name: &str) -> BTreeSet<String> {
        let nodes = self.meta["resolve"]["nodes"].as_array().unwrap();
        let by_id: BTreeMap<&str, &Value> = nodes
            .iter()
            .map(|n| (n["id"].as_str().unwrap(), n))
            .collect();
        let names: BTreeMap<&str, &str> = self
            .packages()
            .iter()
            .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
            .collect();
        let start = self
            .members()
            .into_iter()
            .find(|p| p["name"] == name)
            .map(|p| p["id"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no workspace crate {name}"));
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        let mut linked = BTreeSet::new();
        while let Some(id) = todo.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(node) = by_id.get(id.as_str()) else {
                continue;
            };
            for dep in node["deps"].as_array().unwrap() {
                let normal = dep["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null());
                if normal {
                    let id = dep["pkg"].as_str().unwrap();
                    linked.insert(names.get(id).copied().unwrap_or(id).to_string());
                    todo.push(id.to_string());
                }
            }
        }
        linked
    }
}

/// Crates only the named workspace crates may depend on directly.
const CONFINED: &[(&[&str], &[&str])] = &[
    // HTTP serving: the trigger port, the shared worker's hook port (which
    // answers with the trigger port's own code, `sluice_server::hook`), and
    // the benchmarks that load them.
    (
        &["axum", "hyper", "hyper-util", "tower", "tower-http"],
        &["sluice-server", "sluice-worker", "sluice-bench"],
    ),
    // Restate: the shared worker (its HTTP endpoint is the SDK's).
    (&["restate-sdk"], &["sluice-worker", "sluice-bench"]),
    // SQL: the store (the engine's own SQLite), the users' databases that
    // db.query reaches (sluice-db), and the benchmark of the store's commit
    // floor.
    (&["sqlx"], &["sluice-store", "sluice-db", "sluice-bench"]),
    // The desktop shell.
    (&["tauri", "tauri-build"], &["sluice-desktop"]),
    // Peer-to-peer networking: the peers crate (tests dial it by hand).
    (&["iroh"], &["sluice-peers", "sluice-bench"]),
    // WebAssembly execution: the sandbox.
    (
        &["wasmtime", "wasmtime-wasi", "wasmtime-wizer"],
        &["sluice-sandbox"],
    ),
];

/// Crates that do I/O or bring an async runtime: none of them may be linked,
/// even transitively, into the pure crates.
const IO: &[&str] = &[
    "tokio",
    "mio",
    "socket2",
    "hyper",
    "axum",
    "reqwest",
    "sqlx",
    "libsqlite3-sys",
    "wasmtime",
    "lettre",
    "notify",
    "tauri",
    "iroh",
    "directories",
    "tempfile",
];

/// The pure crates: no I/O, build for wasm32.
const PURE: &[&str] = &["sluice-model", "sluice-core", "sluice-api"];

fn confined_violations(ws: &Workspace) -> Vec<String> {
    let mut out = Vec::new();
    for pkg in ws.members() {
        let name = pkg["name"].as_str().unwrap();
        for dep in Workspace::direct(pkg) {
            for (crates, allowed) in CONFINED {
                if crates.contains(&dep.as_str()) && !allowed.contains(&name) {
                    out.push(format!(
                        "{name} depends on {dep}, which only {} may use",
                        allowed.join(" and ")
                    ));
                }
            }
        }
    }
    out
}

fn purity_violations(ws: &Workspace) -> Vec<String> {
    let mut out = Vec::new();
    for pure in PURE {
        let linked = ws.closure(pure);
        for io in IO {
            if linked.contains(*io) {
                out.push(format!(
                    "{pure} links {io} (an I/O crate), directly or through another crate"
                ));
            }
        }
    }
    out
}

#[test]
fn io_crates_stay_in_their_layers() {
    let ws = Workspace { meta: metadata() };
    let mut problems = confined_violations(&ws);
    problems.extend(purity_violations(&ws));
    assert!(
        problems.is_empty(),
        "layering broken:\n  {}",
        problems.join("\n  ")
    );
}

/// The Rust files git tracks (so generated and ignored files are left out).
fn tracked_rust_files() -> Vec<PathBuf> {
    let out = Command::new("git")
        .current_dir(root())
        .args(["ls-files", "-z", "*.rs"])
        .output()
        .expect("git ls-files runs");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(|p| root().join(p))
        .filter(|p| p.exists())
        .collect()
}

#[test]
fn every_source_file_starts_with_what_it_is() {
    let mut missing = Vec::new();
    for file in tracked_rust_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if !first.starts_with("//!") {
            missing.push(file.strip_prefix(root()).unwrap().display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "files without a `//!` first line:\n  {}",
        missing.join("\n  ")
    );
}

/// Dependencies used only for their features or a link, never named in
/// code: (crate, dependency, why).
const USED_WITHOUT_A_NAME: &[(&str, &str, &str)] = &[
    (
        "sluice-frontend",
        "getrandom",
        "its wasm_js feature gives loro randomness in the browser",
    ),
    (
        "sluice-desktop",
        "serde_json",
        "tauri::generate_context! expands to paths through it",
    ),
];

fn rust_files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `ident` appears in `text` as a whole word.
fn names(text: &str, ident: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(ident).any(|(i, _)| {
        !word(text[..i].chars().next_back()) && !word(text[i + ident.len()..].chars().next())
    })
}

fn unused_dependencies(ws: &Workspace) -> Vec<String> {
    let mut out = Vec::new();
    for pkg in ws.members() {
        let name = pkg["name"].as_str().unwrap();
        let dir = Path::new(pkg["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .to_path_buf();
        let read = |dirs: &[&str], files: &[&str]| -> String {
            let mut paths = Vec::new();
            for d in dirs {
                rust_files_under(&dir.join(d), &mut paths);
            }
            for f in files {
                paths.push(dir.join(f));
            }
            paths
                .iter()
                .filter_map(|p| std::fs::read_to_string(p).ok())
                .collect::<Vec<_>>()
                .join("\n")
        };
        let lib = read(&["src"], &[]);
        let build = read(&[], &["build.rs"]);
        let dev = read(&["tests", "benches", "examples"], &[]);
        for dep in pkg["dependencies"].as_array().unwrap() {
            let dep_name = dep["rename"]
                .as_str()
                .unwrap_or_else(|| dep["name"].as_str().unwrap());
            if USED_WITHOUT_A_NAME
                .iter()
                .any(|(c, d, _)| *c == name && *d == dep_name)
            {
                continue;
            }
            let kind = dep["kind"].as_str();
            let used = match kind {
                None => names(&lib, &dep_name.replace('-', "_")),
                Some("build") => names(&build, &dep_name.replace('-', "_")),
                // Tests may also use the library's own code paths.
                Some(_) => names(&format!("{dev}\n{lib}"), &dep_name.replace('-', "_")),
            };
            if !used {
                out.push(format!(
                    "{name}: `{dep_name}` ({}) is never named in its code",
                    kind.unwrap_or("normal")
                ));
            }
        }
    }
    out
}

#[test]
fn no_crate_declares_a_dependency_it_does_not_use() {
    let ws = Workspace { meta: metadata() };
    let unused = unused_dependencies(&ws);
    assert!(
        unused.is_empty(),
        "unused dependencies:\n  {}",
        unused.join("\n  ")
    );
}
