//! `cargo xtask bench webhook`: the webhook path measured beside its floor
//! and its peer in one run, on one machine, with one load generator (wrk).
//!
//! - the HTTP floor: `GET /api/v1/health` on the same `sluice serve` (the
//!   same accept loop, router and security layers; no engine work);
//! - Sluice's webhook, webhook → data.set → output.respond, answered
//!   `when_finished` (every step journaled, the run committed with
//!   `synchronous=FULL` before the answer) and `immediately` (answered once
//!   the run is recorded);
//! - Node-RED 5.0.7 with the equivalent flow (http in → change → http
//!   response; it keeps nothing), from npm under the target dir, on Node 24
//!   from npm when the system's Node is too old for it.
//!
//! At 64 and 256 connections, with a small body and with 1 KiB and 64 KiB
//! ones, plus the bytes Sluice writes to storage per run. It prints every
//! figure and the ratios; docs/benchmarks.md keeps them.
//!
//! Then start-up: from launching `sluice serve` to its first answered
//! webhook, on a data dir holding 1,000 published workflows and 1,000,000
//! finished runs (made once by `sluice-bench-populate`, kept under the target
//! dir).
//!
//! Options: `--secs N` (per measurement, default 10), `--flame FILE.svg`
//! (perf + inferno: a flame graph of `sluice serve` under the main load),
//! `--no-startup`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::memory;
use crate::cmd::{cargo, check, output, step, target_dir};
use crate::toolchain::{ensure_apt, ensure_node_red};

/// The workflow of the main figure, and its `immediately` twin.
const WORKFLOW: &str = r#"{"format": "sluice.workflow/v1", "id": "bench", "nodes": [
    {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "RESPOND"}},
    {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
    {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
    "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}"#;

/// The same flow in Node-RED: http in → change (JSONata) → http response.
const NODE_RED_FLOW: &str = r#"[
  {"id": "t1", "type": "tab", "label": "bench"},
  {"id": "in", "type": "http in", "z": "t1", "url": "/orders", "method": "post", "upload": false, "wires": [["set"]]},
  {"id": "set", "type": "change", "z": "t1", "rules": [{"t": "set", "p": "payload", "pt": "msg", "to": "{\"id\": payload.id, \"tier\": \"gold\"}", "tot": "jsonata"}], "wires": [["out"]]},
  {"id": "out", "type": "http response", "z": "t1", "statusCode": "200", "headers": {}, "wires": []}
]"#;

struct Options {
    secs: u32,
    flame: Option<PathBuf>,
    startup: bool,
}

fn options(args: &[String]) -> Result<Options> {
    let mut o = Options {
        secs: 10,
        flame: None,
        startup: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => o.secs = it.next().context("--secs N")?.parse()?,
            "--flame" => o.flame = Some(PathBuf::from(it.next().context("--flame FILE.svg")?)),
            "--no-startup" => o.startup = false,
            other => {
                bail!("unknown option {other} (webhook: --secs N, --flame FILE.svg, --no-startup)")
            }
        }
    }
    Ok(o)
}

pub(super) fn run(args: &[String]) -> Result<()> {
    let opts = options(args)?;
    ensure_apt("wrk", "wrk")?;
    ensure_apt("curl", "curl")?;
    let (node, red) = ensure_node_red()?;
    let bin = release_sluice()?;
    let scratch = std::env::temp_dir().join(format!("sluice-bench-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = measure(&opts, &bin, &node, &red, &scratch);
    std::fs::remove_dir_all(&scratch).ok();
    result?;
    if opts.startup {
        startup(&bin)?;
    }
    Ok(())
}

/// Builds the `sluice` binary (release) and returns its path.
pub(super) fn release_sluice() -> Result<PathBuf> {
    step("building the sluice binary (release)");
    super::release_bin("sluice")
}

/// Bumped when the populated data dir must be made again.
const STARTUP_DATA: &str = "v1";

/// Time from launching `sluice serve` to its first answered webhook, on a
/// data dir of 1,000 workflows and 1,000,000 runs: five launches.
fn startup(bin: &Path) -> Result<()> {
    let data = populated_data()?;
    step("start-up: launch `sluice serve` to its first answered webhook, five times");
    let mut took = Vec::new();
    for _ in 0..5 {
        let mut cmd = Command::new(bin);
        cmd.arg("serve");
        took.push(launch_to_first_webhook(cmd, &data, |c, addr| {
            c.args(["--listen", &addr.to_string()]);
        })?);
    }
    let first = took[0];
    took.sort_by(f64::total_cmp);
    println!(
        "start-up, 1,000 workflows and 1,000,000 runs: launch to first answered webhook {:.0} ms median of five (first {first:.0} ms, fastest {:.0} ms; target < 50 ms)",
        took[2], took[0]
    );
    Ok(())
}

/// Launches `cmd` on the data dir `data`, listening on a free loopback port
/// (`listen` tells it which), and times it to its first answered webhook
/// (`POST /hook/w0/orders`, one of the populated workflows): milliseconds.
pub(super) fn launch_to_first_webhook(
    mut cmd: Command,
    data: &Path,
    listen: impl FnOnce(&mut Command, SocketAddr),
) -> Result<f64> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    listen(&mut cmd, addr);
    let started = Instant::now();
    let mut child = cmd
        .env("SLUICE_DATA_DIR", data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let answered = loop {
        if post_ok(addr, "/hook/w0/orders", r#"{"id": 1, "total": 250}"#) {
            break Some(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    child.kill().ok();
    child.wait().ok();
    let answered =
        answered.context("the launched program did not answer its webhook within 30 s")?;
    Ok(answered.as_secs_f64() * 1e3)
}

/// A data dir of 1,000 workflows (`w0`… each with a webhook at `orders`)
/// and 1,000,000 finished runs, made once and kept under the target dir.
pub(super) fn populated_data() -> Result<PathBuf> {
    let dir = target_dir()?.join("bench-startup");
    let migrations =
        std::fs::read_dir(crate::cmd::project_root().join("engine/store/migrations"))?.count();
    let stamp = dir.join(format!("populated-{STARTUP_DATA}-{migrations}"));
    let data = dir.join("data");
    if !stamp.exists() {
        std::fs::remove_dir_all(&dir).ok();
        step(
            "making a data dir of 1,000 workflows and 1,000,000 runs (once; kept under the target dir)",
        );
        let populate = super::release_bin("sluice-bench-populate")?;
        check(Command::new(populate).arg(&data))?;
        std::fs::write(&stamp, b"")?;
    }
    Ok(data)
}

fn measure(opts: &Options, bin: &Path, node: &Path, red: &Path, scratch: &Path) -> Result<()> {
    // Every line measures the webhook path alone: no retention pass deletes
    // the earlier lines' runs under a later line (by the 1 KiB line the
    // lines before have made over a million runs, ten times the default
    // keep_max). Retention under load has its own figures: `cargo xtask
    // bench soak`.
    let data = scratch.join("sluice");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("config.toml"), "[runs]\nprune_every = \"1h\"\n")?;
    let sluice = Sluice::start(bin, &data)?;
    for (id, respond) in [("bench", "when_finished"), ("bench-now", "immediately")] {
        let wf = WORKFLOW
            .replace("\"bench\"", &format!("\"{id}\""))
            .replace("RESPOND", respond);
        sluice.put_workflow(id, &wf)?;
    }
    let nodered = NodeRed::start(node, red, &scratch.join("node-red"))?;
    std::thread::sleep(Duration::from_millis(500));
    let idle_rss_kb = memory::rss_kb(sluice.child.id())?;

    let bodies = Bodies::write(scratch)?;
    let floor = Target::get(
        "HTTP floor (GET /api/v1/health)",
        format!("{}/api/v1/health", sluice.base),
        Some(format!("Authorization: Bearer {}", sluice.token)),
    );
    let finished = Target::post(
        "Sluice, when_finished",
        format!("{}/hook/bench/orders", sluice.base),
    );
    let immediately = Target::post(
        "Sluice, immediately",
        format!("{}/hook/bench-now/orders", sluice.base),
    );
    let nr = Target::post("Node-RED 5.0.7", format!("{}/orders", nodered.base));
    let wrk = Wrk {
        secs: opts.secs,
        sluice_pid: sluice.child.id(),
    };

    let mut table = Vec::new();
    for conns in [64, 256] {
        for t in [&floor, &finished, &immediately, &nr] {
            let flame = (conns == 64 && std::ptr::eq(t, &finished))
                .then_some(opts.flame.as_deref())
                .flatten();
            let m = wrk.measure(t, conns, &bodies.small, flame)?;
            if std::ptr::eq(t, &immediately) {
                // Its runs go on after their answers: let them end before
                // the next measurement.
                sluice.wait_idle()?;
            }
            table.push((t.label.clone(), conns, "small", m));
        }
    }
    for (size, body) in [("1 KiB", &bodies.kib), ("64 KiB", &bodies.kib64)] {
        for t in [&finished, &nr] {
            let m = wrk.measure(t, 64, body, None)?;
            table.push((t.label.clone(), 64, size, m));
        }
    }
    let db = sluice.database_bytes()?;
    let runs = sluice.runs()?;
    drop(nodered);
    drop(sluice);

    println!();
    println!(
        "webhook → data.set → output.respond; wrk -t2, {} s per line after a 2 s warm-up; release build",
        opts.secs
    );
    println!(
        "{:<34} {:>5} {:>7} {:>11} {:>9} {:>9} {:>8} {:>12}",
        "", "conns", "body", "requests/s", "p50 ms", "p99 ms", "non-2xx", "written/run"
    );
    for (label, conns, body, m) in &table {
        println!(
            "{label:<34} {conns:>5} {body:>7} {:>11.0} {:>9.2} {:>9.2} {:>8} {:>12}",
            m.rps,
            m.p50_ms,
            m.p99_ms,
            m.non_2xx,
            m.written_per_request
                .map(|b| format!("{:.0} B", b))
                .unwrap_or_default()
        );
    }
    let find = |label: &str, conns: u32, body: &str| {
        table
            .iter()
            .find(|(l, c, b, _)| l == label && *c == conns && *b == body)
            .map(|(_, _, _, m)| m)
            .context("a measurement is missing")
    };
    println!();
    for conns in [64, 256] {
        let f = find(&floor.label, conns, "small")?;
        let s = find(&finished.label, conns, "small")?;
        let i = find(&immediately.label, conns, "small")?;
        let n = find(&nr.label, conns, "small")?;
        println!(
            "{conns} connections: when_finished {:.0}% of the HTTP floor (target ≥ 40%), {:.2}× Node-RED (target ≥ 3×); immediately {:.0}% of the floor, {:.2}× Node-RED",
            100.0 * s.rps / f.rps,
            s.rps / n.rps,
            100.0 * i.rps / f.rps,
            i.rps / n.rps,
        );
    }
    for size in ["1 KiB", "64 KiB"] {
        let s = find(&finished.label, 64, size)?;
        let n = find(&nr.label, 64, size)?;
        println!(
            "{size} bodies, 64 connections: when_finished {:.2}× Node-RED",
            s.rps / n.rps
        );
    }
    let main = find(&finished.label, 64, "small")?;
    println!(
        "p99 at 64 connections, when_finished: {:.2} ms (target < 5 ms)",
        main.p99_ms
    );
    println!(
        "database: {:.0} bytes per run kept ({} runs, {:.1} MB with its WAL)",
        db as f64 / runs.max(1) as f64,
        runs,
        db as f64 / 1e6
    );
    println!(
        "idle RSS of sluice serve: {:.1} MB",
        idle_rss_kb as f64 / 1024.0
    );
    Ok(())
}

/// The request bodies: JSON objects of about 25 bytes, 1 KiB and 64 KiB.
struct Bodies {
    small: PathBuf,
    kib: PathBuf,
    kib64: PathBuf,
}

impl Bodies {
    fn write(dir: &Path) -> Result<Bodies> {
        let body = |size: usize| {
            let head = r#"{"id": 7, "total": 250, "note": ""#;
            let pad = size.saturating_sub(head.len() + 2);
            format!("{head}{}\"}}", "x".repeat(pad))
        };
        let write = |name: &str, text: String| -> Result<PathBuf> {
            let p = dir.join(name);
            std::fs::write(&p, text)?;
            Ok(p)
        };
        Ok(Bodies {
            small: write("small.json", r#"{"id": 7, "total": 250}"#.to_string())?,
            kib: write("1k.json", body(1024))?,
            kib64: write("64k.json", body(64 * 1024))?,
        })
    }
}

struct Target {
    label: String,
    url: String,
    post: bool,
    header: Option<String>,
}

impl Target {
    fn get(label: &str, url: String, header: Option<String>) -> Target {
        Target {
            label: label.into(),
            url,
            post: false,
            header,
        }
    }
    fn post(label: &str, url: String) -> Target {
        Target {
            label: label.into(),
            url,
            post: true,
            header: None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Measured {
    pub(super) rps: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    non_2xx: u64,
    /// Bytes the server process caused to be written to storage, per request.
    written_per_request: Option<f64>,
}

struct Wrk {
    secs: u32,
    sluice_pid: u32,
}

impl Wrk {
    fn measure(
        &self,
        t: &Target,
        conns: u32,
        body: &Path,
        flame: Option<&Path>,
    ) -> Result<Measured> {
        let script = body.with_extension(format!("{}.lua", if t.post { "post" } else { "get" }));
        let lua = if t.post {
            format!(
                "local f = io.open(\"{}\", \"rb\")\nwrk.method = \"POST\"\nwrk.body = f:read(\"*a\")\nf:close()\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
                body.display()
            )
        } else {
            String::new()
        };
        std::fs::write(&script, lua)?;
        let wrk = |secs: u32| {
            let mut cmd = Command::new("wrk");
            cmd.args([
                "-t2",
                &format!("-c{conns}"),
                &format!("-d{secs}s"),
                "--latency",
                "-s",
            ])
            .arg(&script);
            if let Some(h) = &t.header {
                cmd.args(["-H", h]);
            }
            cmd.arg(&t.url);
            cmd
        };
        check(wrk(2).stdout(Stdio::null()))?;
        step(&format!(
            "{}: {conns} connections, {} body, {} s",
            t.label,
            body.file_name().unwrap_or_default().to_string_lossy(),
            self.secs
        ));
        let sluice = t.url.contains("/hook/");
        let before = if sluice {
            write_bytes(self.sluice_pid).ok()
        } else {
            None
        };
        let perf = match flame {
            Some(_) => Some(
                Command::new("perf")
                    .args([
                        "record",
                        "-F",
                        "499",
                        "--call-graph",
                        "dwarf,16384",
                        "-q",
                        "-o",
                    ])
                    .arg(std::env::temp_dir().join("sluice-bench-perf.data"))
                    .args(["-p", &self.sluice_pid.to_string(), "--", "sleep"])
                    .arg(format!("{}", self.secs.min(5)))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("perf (apt install linux-perf)")?,
            ),
            None => None,
        };
        let out = output(&mut wrk(self.secs))?;
        if let (Some(mut p), Some(svg)) = (perf, flame) {
            p.wait()?;
            flame_graph(svg)?;
        }
        let after = if sluice {
            write_bytes(self.sluice_pid).ok()
        } else {
            None
        };
        let m = parse_wrk(&out).with_context(|| format!("reading wrk's output:\n{out}"))?;
        let requests = parse_requests(&out).unwrap_or(0);
        Ok(Measured {
            written_per_request: match (before, after) {
                (Some(b), Some(a)) if requests > 0 => Some((a - b) as f64 / requests as f64),
                _ => None,
            },
            ..m
        })
    }
}

/// `perf script` of the last recording, folded and drawn by inferno.
fn flame_graph(svg: &Path) -> Result<()> {
    let installed = output(cargo().args(["install", "--list"])).unwrap_or_default();
    if !installed.contains("inferno v0.12.8:") {
        step("installing inferno 0.12.8 (flame graphs)");
        check(cargo().args([
            "install",
            "inferno",
            "--version",
            "0.12.8",
            "--locked",
            "--no-default-features",
            "--features",
            "cli",
        ]))?;
    }
    let data = std::env::temp_dir().join("sluice-bench-perf.data");
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let collapse = Command::new("inferno-collapse-perf")
        .stdin(script.stdout.context("perf script stdout")?)
        .stdout(Stdio::piped())
        .spawn()?;
    let folded = collapse.wait_with_output()?.stdout;
    let mut flame = Command::new("inferno-flamegraph")
        .args([
            "--title",
            "sluice serve: webhook → data.set → output.respond, when_finished, 64 connections",
        ])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(svg)?)
        .spawn()?;
    flame
        .stdin
        .take()
        .context("inferno stdin")?
        .write_all(&folded)?;
    flame.wait()?;
    std::fs::remove_file(&data).ok();
    eprintln!("flame graph: {}", svg.display());
    Ok(())
}

/// Bytes a process caused to be sent to storage (`/proc/<pid>/io`).
fn write_bytes(pid: u32) -> Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .context("no write_bytes")?
        .trim()
        .parse()
        .map_err(Into::into)
}

pub(super) fn parse_wrk(out: &str) -> Result<Measured> {
    let field = |prefix: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .and_then(|l| l.split_whitespace().nth(1))
            .with_context(|| format!("no `{prefix}` line"))
    };
    let non_2xx = out
        .lines()
        .find(|l| l.contains("Non-2xx"))
        .and_then(|l| l.split(':').nth(1))
        .map(|n| n.trim().parse().unwrap_or(0))
        .unwrap_or(0)
        + out
            .lines()
            .find(|l| l.trim_start().starts_with("Socket errors:"))
            .map(|l| {
                l.split(',')
                    .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                    .sum::<u64>()
            })
            .unwrap_or(0);
    Ok(Measured {
        rps: field("Requests/sec:")?.parse()?,
        p50_ms: millis(field("50%")?)?,
        p99_ms: millis(field("99%")?)?,
        non_2xx,
        written_per_request: None,
    })
}

/// "N requests in 10.00s, ..."
fn parse_requests(out: &str) -> Option<u64> {
    out.lines()
        .find(|l| l.contains(" requests in "))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// wrk's latencies: "812.00us", "5.10ms", "1.02s".
fn millis(text: &str) -> Result<f64> {
    let (n, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix("m") {
        (n, 60e3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1e3)
    } else {
        bail!("a latency without a unit: {text}")
    };
    Ok(n.parse::<f64>()? * scale)
}

/// `sluice serve` on a loopback port of its own, in a new data dir.
pub(super) struct Sluice {
    pub(super) child: Child,
    pub(super) base: String,
    pub(super) token: String,
    data: PathBuf,
}

impl Sluice {
    pub(super) fn start(bin: &Path, data: &Path) -> Result<Sluice> {
        std::fs::create_dir_all(data)?;
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("SLUICE_DATA_DIR", data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().context("serve stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().context("serve printed nothing")??;
        std::thread::spawn(move || lines.for_each(drop));
        let base = first
            .strip_prefix("listening on ")
            .with_context(|| format!("unexpected serve output: {first}"))?
            .to_string();
        let token = std::fs::read_to_string(data.join("api-token"))?
            .trim()
            .to_string();
        Ok(Sluice {
            child,
            base,
            token,
            data: data.to_path_buf(),
        })
    }

    pub(super) fn curl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("curl")
            .args([
                "-sf",
                "-H",
                &format!("Authorization: Bearer {}", self.token),
            ])
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!(
                "curl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub(super) fn put_workflow(&self, id: &str, wf: &str) -> Result<()> {
        self.curl(&[
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            wf,
            &format!("{}/api/v1/workflows/{id}?publish=true", self.base),
        ])
        .map(drop)
        .with_context(|| format!("storing the bench workflow {id}"))
    }

    /// Waits until no run is in progress (`sluice_runs_active 0`).
    fn wait_idle(&self) -> Result<()> {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            let metrics = self.curl(&[&format!("{}/metrics", self.base)])?;
            if metrics.lines().any(|l| l == "sluice_runs_active 0") {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("runs were still in progress 120 s after the load stopped")
    }

    /// Runs recorded, from the metrics' counters.
    fn runs(&self) -> Result<u64> {
        let metrics = self.curl(&[&format!("{}/metrics", self.base)])?;
        Ok(metrics
            .lines()
            .filter(|l| l.starts_with("sluice_runs_total{"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum())
    }

    /// The database and its WAL on disk.
    fn database_bytes(&self) -> Result<u64> {
        let mut total = 0;
        for f in ["sluice.db", "sluice.db-wal"] {
            total += std::fs::metadata(self.data.join(f)).map_or(0, |m| m.len());
        }
        Ok(total)
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Node-RED with the bench flow, on a free loopback port, editor off.
struct NodeRed {
    child: Child,
    base: String,
}

impl NodeRed {
    fn start(node: &Path, red: &Path, dir: &Path) -> Result<NodeRed> {
        std::fs::create_dir_all(dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        std::fs::write(dir.join("flows.json"), NODE_RED_FLOW)?;
        std::fs::write(
            dir.join("settings.js"),
            format!(
                "module.exports = {{ uiPort: {port}, uiHost: \"127.0.0.1\", flowFile: \"flows.json\", \
                 httpAdminRoot: false, credentialSecret: false, \
                 diagnostics: {{ enabled: false }}, telemetry: {{ enabled: false }}, \
                 logging: {{ console: {{ level: \"warn\", metrics: false, audit: false }} }} }};\n"
            ),
        )?;
        let child = Command::new(node)
            .arg(red)
            .arg("--settings")
            .arg(dir.join("settings.js"))
            .arg("--userDir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting Node-RED with {}", node.display()))?;
        let nr = NodeRed {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let t = Instant::now();
        loop {
            if post_ok(addr, "/orders", r#"{"id": 1}"#) {
                return Ok(nr);
            }
            if t.elapsed() > Duration::from_secs(60) {
                bail!("Node-RED did not answer POST /orders within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for NodeRed {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// One POST over a fresh connection; true when it is answered 200.
pub(super) fn post_ok(addr: SocketAddr, path: &str, body: &str) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrk_output() {
        let out = "Running 10s test @ http://127.0.0.1:1/hook/bench/orders
  2 threads and 64 connections
  Latency Distribution
     50%    5.10ms
     75%  812.00us
     90%    1.02s
     99%   10.31ms
  119580 requests in 10.00s, 20.87MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 4
Requests/sec:  11958.00
";
        let m = parse_wrk(out).unwrap();
        assert_eq!(m.rps, 11958.0);
        assert_eq!(m.p50_ms, 5.10);
        assert_eq!(m.p99_ms, 10.31);
        assert_eq!(m.non_2xx, 9);
        assert_eq!(parse_requests(out), Some(119580));
        assert_eq!(millis("812.00us").unwrap(), 0.812);
        assert_eq!(millis("1.02s").unwrap(), 1020.0);
        assert!(millis("12").is_err());
    }
}
