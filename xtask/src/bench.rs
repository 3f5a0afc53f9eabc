//! `cargo xtask bench`: the benchmarks of docs/benchmarks.md. Most run a
//! binary of `engine/bench`; the webhook one loads `sluice serve` with wrk.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd::{cargo, check, output, step, target_dir};
use crate::frontend;
use crate::toolchain::{ensure_apt, ensure_js_toolchain, ensure_target};

mod desktop;
mod memory;

pub(crate) fn run(which: &str) -> Result<()> {
    ensure_js_toolchain()?;
    match which {
        "engine" => {
            step(
                "engine benchmark (release build): durable steps/s, step overhead, SQLite commit floor",
            );
            run_bench_bin("sluice-bench-engine")
        }
        "webhook" => webhook(),
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
            check(
                cargo()
                    .args(["run", "--release", "--locked", "-p", "sluice-bench"])
                    .args(["--bin", "sluice-bench-worker"])
                    .env("SLUICE_RESTATE_SERVER", &restate),
            )
        }
        other => {
            bail!(
                "unknown benchmark `{other}` (available: engine, webhook, http, docs, peers, sandbox, js-engines, editor, desktop, worker)"
            )
        }
    }
}

/// Runs one of the benchmark binaries (`engine/bench`), built in release.
fn run_bench_bin(bin: &str) -> Result<()> {
    run_bench_bin_with(bin, &[])
}

fn run_bench_bin_with(bin: &str, args: &[&str]) -> Result<()> {
    check(
        cargo()
            .args([
                "run",
                "--release",
                "--locked",
                "-p",
                "sluice-bench",
                "--bin",
                bin,
                "--",
            ])
            .args(args),
    )
}

/// wrk against `sluice serve`: webhook → data.set → output.respond, answered
/// when the run has finished, every step journaled durably.
fn webhook() -> Result<()> {
    use std::io::{BufRead, BufReader};
    ensure_apt("wrk", "wrk")?;
    step("building the sluice binary (release)");
    check(cargo().args([
        "build",
        "--release",
        "-p",
        "sluice-cli",
        "--bin",
        "sluice",
        "--locked",
    ]))?;
    let bin = target_dir()?.join("release").join("sluice");
    let data = std::env::temp_dir().join(format!("sluice-bench-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&data)?;
    let mut serve = Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLUICE_DATA_DIR", &data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = serve.stdout.take().context("serve stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().context("serve printed nothing")??;
    std::thread::spawn(move || for _ in lines {});
    let base = first
        .strip_prefix("listening on ")
        .context("unexpected serve output")?
        .to_string();
    let result = (|| -> Result<()> {
        let token = std::fs::read_to_string(data.join("api-token"))?
            .trim()
            .to_string();
        let wf = r#"{"format": "sluice.workflow/v1", "id": "bench", "nodes": [
            {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
            {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
            {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
            "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}"#;
        let put = Command::new("curl")
            .args([
                "-sf",
                "-X",
                "PUT",
                "-H",
                &format!("Authorization: Bearer {token}"),
                "-H",
                "Content-Type: application/json",
            ])
            .args([
                "--data-binary",
                wf,
                &format!("{base}/api/v1/workflows/bench?publish=true"),
            ])
            .output()?;
        if !put.status.success() {
            bail!(
                "could not store the bench workflow: {}",
                String::from_utf8_lossy(&put.stdout)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let idle_rss_kb = memory::rss_kb(serve.id())?;
        let script = data.join("post.lua");
        std::fs::write(
            &script,
            "wrk.method = \"POST\"\nwrk.body = '{\"id\": 7, \"total\": 250}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
        )?;
        step("warm-up: wrk 3 s");
        check(
            Command::new("wrk")
                .args(["-t2", "-c64", "-d3s", "-s"])
                .arg(&script)
                .arg(format!("{base}/hook/bench/orders"))
                .stdout(std::process::Stdio::null()),
        )?;
        step("wrk -t2 -c64 -d10s --latency (webhook → data.set → output.respond, when_finished)");
        let out = output(
            Command::new("wrk")
                .args(["-t2", "-c64", "-d10s", "--latency", "-s"])
                .arg(&script)
                .arg(format!("{base}/hook/bench/orders")),
        )?;
        println!("{out}");
        let pick = |prefix: &str| {
            out.lines()
                .find(|l| l.trim_start().starts_with(prefix))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        };
        let non2xx = out
            .lines()
            .find(|l| l.contains("Non-2xx"))
            .map(str::trim)
            .unwrap_or("none");
        println!(
            "{{\"requests_per_s\": \"{}\", \"p50\": \"{}\", \"p99\": \"{}\", \"non_2xx\": \"{non2xx}\", \"idle_rss_mb\": {:.1}}}",
            pick("Requests/sec:").unwrap_or_default(),
            pick("50%").unwrap_or_default(),
            pick("99%").unwrap_or_default(),
            idle_rss_kb as f64 / 1024.0
        );
        Ok(())
    })();
    serve.kill().ok();
    serve.wait().ok();
    std::fs::remove_dir_all(&data).ok();
    result
}
