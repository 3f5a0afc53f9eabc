//! `cargo xtask fuzz [TARGET…] [--secs N]`: every fuzz target (or the ones
//! named) under libFuzzer for N seconds each (default 60), starting from
//! and growing its corpus in `fuzz/corpus/<target>/`, then minimized
//! (`cargo fuzz cmin`) so that it stays small enough to commit.
//!
//! cargo-fuzz is installed when missing. libFuzzer's instrumentation flags
//! are stable; without a sanitizer (`-s none`: Sluice has no `unsafe` of
//! its own in these paths) no nightly toolchain is needed, and what the
//! fuzzer looks for is what DESIGN §8 forbids: panics, stack overflows,
//! hangs (`-timeout`) and runaway memory (`-rss_limit_mb`). A crash stops
//! the run and names its input: copy it to `fuzz/regressions/<target>/`
//! with a name saying what it found, where `cargo xtask test` replays it.

use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd::{cargo, check, output, step};
use crate::toolchain::ensure_apt;

/// The cargo-fuzz release the targets are built with.
const CARGO_FUZZ: &str = "0.13.2";

const TARGETS: &[&str] = &[
    "workflow",
    "doc_update",
    "webhook_body",
    "ws_message",
    "template",
    "jq",
    "guest_output",
    "peer_frames",
];

pub fn run(args: &[String]) -> Result<()> {
    let mut secs = 60u64;
    let mut only = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => {
                secs = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|s| *s > 0)
                    .ok_or_else(|| anyhow::anyhow!("--secs takes a number of seconds"))?;
            }
            t if TARGETS.contains(&t) => only.push(t),
            other => bail!(
                "unknown fuzz target or option `{other}`; targets: {}",
                TARGETS.join(", ")
            ),
        }
    }
    let targets: Vec<&str> = if only.is_empty() {
        TARGETS.to_vec()
    } else {
        only
    };
    ensure_cargo_fuzz()?;
    // Its own target dir, beside the fuzz crate: instrumented builds share
    // nothing with the others, and kept out of `CARGO_TARGET_DIR` they do
    // not grow the cache CI reuses.
    let target_dir = crate::cmd::project_root().join("fuzz").join("target");
    // Built first, where its progress shows; each run then reuses it.
    step("building the fuzz targets (instrumented, release; the first build takes a while)");
    check(
        Command::new("cargo")
            .args(["fuzz", "build", "--sanitizer", "none", "--target-dir"])
            .arg(&target_dir),
    )?;
    let mut summary = Vec::new();
    for t in &targets {
        step(&format!("fuzzing `{t}` for {secs} s (fuzz/corpus/{t})"));
        let corpus = format!("fuzz/corpus/{t}");
        std::fs::create_dir_all(&corpus)?;
        let before = std::fs::read_dir(&corpus)?.count();
        let out = Command::new("cargo")
            .args(["fuzz", "run", "--sanitizer", "none", "--target-dir"])
            .arg(&target_dir)
            .args([*t, corpus.as_str(), "--"])
            .arg(format!("-max_total_time={secs}"))
            .args(["-timeout=10", "-rss_limit_mb=4096", "-max_len=65536"])
            .arg("-print_final_stats=1")
            .output()?;
        let log = String::from_utf8_lossy(&out.stderr);
        let runs = log
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .map(str::trim)
            .unwrap_or("?")
            .to_string();
        let after = std::fs::read_dir(&corpus)?.count();
        if !out.status.success() {
            eprintln!("{log}");
            let artifact = log
                .lines()
                .find_map(|l| l.split("Test unit written to ").nth(1))
                .unwrap_or("(see the log above)");
            bail!(
                "fuzz target `{t}` crashed after {runs} runs; the input is {artifact}.\n\
                 Copy it to fuzz/regressions/{t}/<what-it-found>, fix the cause, and \
                 `cargo xtask test` replays it from then on."
            );
        }
        // Kept small enough to commit: the fewest inputs with the same coverage.
        let minimized = Command::new("cargo")
            .args(["fuzz", "cmin", "--sanitizer", "none", "--target-dir"])
            .arg(&target_dir)
            .args([
                *t,
                corpus.as_str(),
                "--",
                "-timeout=10",
                "-rss_limit_mb=4096",
            ])
            .output()?;
        if !minimized.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&minimized.stderr));
            bail!("minimizing fuzz/corpus/{t} failed");
        }
        let kept = std::fs::read_dir(&corpus)?.count();
        summary.push(format!(
            "{t:<14} {runs:>10} runs in {secs} s, corpus {before} -> {after} inputs ({kept} after cmin), no crash"
        ));
    }
    step("fuzzing done");
    for line in summary {
        println!("{line}");
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> Result<()> {
    // libFuzzer is C++, built by libfuzzer-sys.
    ensure_apt("c++", "g++")?;
    let installed = output(cargo().args(["install", "--list"])).unwrap_or_default();
    if !installed.contains(&format!("cargo-fuzz v{CARGO_FUZZ}:")) {
        step(&format!("installing cargo-fuzz {CARGO_FUZZ}"));
        check(cargo().args(["install", "cargo-fuzz", "--version", CARGO_FUZZ, "--locked"]))?;
    }
    Ok(())
}
