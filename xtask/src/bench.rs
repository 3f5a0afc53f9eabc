//! `cargo xtask bench`: the benchmarks of docs/benchmarks.md. Most run a
//! binary of `engine/bench`; the webhook one loads `sluice serve` and
//! Node-RED with wrk (`bench/webhook.rs`).

use anyhow::{Result, bail};

use crate::cmd::{cargo, check, step, target_dir};
use crate::frontend;
use crate::toolchain::{ensure_apt, ensure_js_toolchain, ensure_target};

mod desktop;
mod memory;
mod soak;
mod webhook;

pub(crate) fn run(which: &str, args: &[String]) -> Result<()> {
    ensure_js_toolchain()?;
    match which {
        "engine" => {
            step(
                "engine benchmark (release build): durable steps/s, step overhead, SQLite commit floor",
            );
            run_bench_bin("sluice-bench-engine")
        }
        "webhook" => webhook::run(args),
        "run-cost" => {
            step(
                "one webhook-shaped run in-process (release build): allocations, bytes and CPU per run, by thread",
            );
            run_bench_bin("sluice-bench-run-cost")
        }
        "soak" => soak::run(args),
        "http" => {
            step(
                "http.request benchmark (release build): 1,000 calls via flow.split vs raw reqwest",
            );
            run_bench_bin("sluice-bench-http")
        }
        "docs" => {
            step("workflow document benchmark (release build): load, merge + persist, size");
            run_bench_bin("sluice-bench-docs")
        }
        "peers" => {
            step(
                "peers benchmark (release build): join of a 1,000-node workflow, edit propagation engine to engine, memory per peer",
            );
            run_bench_bin("sluice-bench-peers")
        }
        "sandbox" => {
            ensure_target("wasm32-wasip2")?;
            step(
                "sandbox benchmark (release build): code.js and code.wasm: prepare, cache, call, throughput",
            );
            run_bench_bin("sluice-bench-sandbox")
        }
        "js-engines" => {
            ensure_target("wasm32-wasip1")?;
            step("building Boa for wasm32-wasip1 (engine/sandbox/guest-boa), for the comparison");
            let target = target_dir()?.join("sluice-boa");
            check(
                cargo()
                    .args([
                        "build",
                        "--release",
                        "--locked",
                        "--target",
                        "wasm32-wasip1",
                    ])
                    .args(["--manifest-path", "engine/sandbox/guest-boa/Cargo.toml"])
                    .arg("--target-dir")
                    .arg(&target),
            )?;
            let boa = target.join("wasm32-wasip1/release/sluice_js_boa.wasm");
            step("QuickJS vs Boa (release build): size, prepare, warm call, throughput");
            run_bench_bin_with(
                "sluice-bench-sandbox",
                &["--engines", &boa.to_string_lossy()],
            )
        }
        "editor" => {
            ensure_apt("chromium", "chromium")?;
            ensure_apt("chromedriver", "chromium-driver")?;
            frontend::build()?;
            step(
                "editor benchmark (release build): 1,000 nodes / 1,500 edges in headless Chromium, measured in the page",
            );
            check(cargo().args([
                "run",
                "--release",
                "--locked",
                "-p",
                "sluice-server",
                "--example",
                "bench_editor",
            ]))
        }
        "desktop" => desktop::run(),
        "worker" => {
            let restate = crate::toolchain::ensure_restate_server()?;
            step(
                "shared worker benchmark (release build): a 3-step run here vs handed off to restate-server + sluice worker, beside a raw Restate no-op",
            );
            let bin = release_bin("sluice-bench-worker")?;
            check(std::process::Command::new(bin).env("SLUICE_RESTATE_SERVER", &restate))
        }
        other => {
            bail!(
                "unknown benchmark `{other}` (available: engine, webhook, run-cost, soak, http, docs, peers, sandbox, js-engines, editor, desktop, worker)"
            )
        }
    }
}

/// Runs one of the benchmark binaries (`engine/bench`), built in release.
fn run_bench_bin(bin: &str) -> Result<()> {
    run_bench_bin_with(bin, &[])
}

fn run_bench_bin_with(bin: &str, args: &[&str]) -> Result<()> {
    let path = release_bin(bin)?;
    check(std::process::Command::new(&path).args(args))
}

/// Builds one release binary of the benches (`sluice` or an `engine/bench`
/// binary) and returns its path. Every bench builds with the same package
/// set, so features unify the same way for all of them: `bench run-cost`
/// after `bench webhook` (and the reverse) reuses the build instead of
/// rebuilding the dependencies for a different feature set (minutes on two
/// cores).
pub(crate) fn release_bin(bin: &str) -> Result<std::path::PathBuf> {
    check(cargo().args([
        "build",
        "--release",
        "--locked",
        "-p",
        "sluice-cli",
        "-p",
        "sluice-bench",
        "--bin",
        bin,
    ]))?;
    Ok(crate::cmd::target_dir()?.join("release").join(bin))
}
