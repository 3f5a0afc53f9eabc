//! `cargo xtask bench soak`: a long run of mixed load on `sluice serve`
//! with retention on, to show that memory and the data dir level off
//! instead of growing with the number of runs; and, first, the webhook p99
//! with and without a pruning pass under way.
//!
//! - Retention A/B: `orders` (webhook → data.set → output.respond,
//!   `when_finished`) under wrk (-t2 -c64, 10 s) with nothing to prune,
//!   then with its `settings.runs.keep_max` lowered so a pass deletes the
//!   backlog while wrk runs; twice, alternating.
//! - Soak: `orders` at a paced rate (wrk's `delay()`: 16 connections, a
//!   request every 2 ms each) and `uploads` (bodies past the 1 MiB inline
//!   limit, each different, so every run stores a blob: one connection, a
//!   request every 250 ms), with `[runs] keep_max = 20000` (`uploads`:
//!   100), `prune_every = "10s"`, `collect_blobs_every = "2m"`,
//!   `blob_grace = "1m"`. Every 10 s: the RSS of `sluice serve`, the data
//!   dir's bytes (database, WAL, blobs) and the runs kept. Printed as a
//!   table and drawn as an SVG chart (`--svg FILE`, default
//!   docs/images/soak.svg).
//!
//! Options: `--minutes N` (default 60), `--svg FILE`, `--no-ab`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::memory;
use super::webhook::{Sluice, parse_wrk};
use crate::cmd::{output, project_root, step};
use crate::toolchain::ensure_apt;

const ORDERS: &str = r#"{"format": "sluice.workflow/v1", "id": "orders", "settings": {"runs": RUNS}, "nodes": [
    {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
    {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
    {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
  "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}"#;

const UPLOADS: &str = r#"{"format": "sluice.workflow/v1", "id": "uploads", "settings": {"runs": {"keep_max": 100}}, "nodes": [
    {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "upload", "respond": "when_finished"}},
    {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": {"size": "{{ input.body.note | length }}"}}}],
  "edges": [{"from": "hook", "to": "reply"}]}"#;

const CONFIG: &str = r#"[runs]
keep_max = 20000
prune_every = "10s"
collect_blobs_every = "2m"
blob_grace = "1m"
"#;

struct Options {
    minutes: u64,
    svg: PathBuf,
    ab: bool,
}

fn options(args: &[String]) -> Result<Options> {
    let mut o = Options {
        minutes: 60,
        svg: project_root().join("docs/images/soak.svg"),
        ab: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--minutes" => {
                o.minutes = it
                    .next()
                    .context("--minutes needs a number")?
                    .parse()
                    .context("--minutes")?;
            }
            "--svg" => o.svg = it.next().context("--svg needs a file")?.into(),
            "--no-ab" => o.ab = false,
            other => bail!("bench soak: unknown option {other} (--minutes N, --svg FILE, --no-ab)"),
        }
    }
    Ok(o)
}

pub(super) fn run(args: &[String]) -> Result<()> {
    let opts = options(args)?;
    ensure_apt("wrk", "wrk")?;
    ensure_apt("curl", "curl")?;
    let bin = super::webhook::release_sluice()?;
    let scratch = std::env::temp_dir().join(format!("sluice-bench-soak-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = soak(&opts, &bin, &scratch);
    std::fs::remove_dir_all(&scratch).ok();
    result
}

fn soak(opts: &Options, bin: &Path, scratch: &Path) -> Result<()> {
    let orders = |runs: &str| ORDERS.replace("RUNS", runs);
    let small = scratch.join("small.json");
    std::fs::write(&small, r#"{"id": 7, "total": 250, "note": "soak"}"#)?;

    if opts.ab {
        // An engine of its own whose only passes are the ones asked for.
        let data = scratch.join("ab");
        std::fs::create_dir_all(&data)?;
        std::fs::write(data.join("config.toml"), "[runs]\nprune_every = \"1h\"\n")?;
        let sluice = Sluice::start(bin, &data)?;
        step("webhook p99 with and without a pruning pass under way (wrk -t2 -c64, 10 s each)");
        let post = lua_post(scratch, "ab", &small, None)?;
        let url = format!("{}/hook/orders/orders", sluice.base);
        let mut lines = Vec::new();
        for round in 1..=2 {
            sluice.put_workflow("orders", &orders(r#"{"keep_max": "unlimited"}"#))?;
            let quiet = wrk(&post, 64, 10, &url)?;
            let backlog = runs_kept(&sluice)?;
            // Now most of the backlog goes, while wrk loads the port.
            sluice.put_workflow("orders", &orders(r#"{"keep_max": 1000}"#))?;
            let load = spawn_wrk(&post, 64, 10, &url)?;
            std::thread::sleep(Duration::from_millis(500));
            let started = Instant::now();
            let pruned = sluice.curl(&[
                "-X",
                "POST",
                &format!("{}/api/v1/storage/prune", sluice.base),
            ])?;
            let took = started.elapsed();
            let pruning = parse_wrk(&String::from_utf8_lossy(&load.wait_with_output()?.stdout))?;
            let deleted = json_number(&pruned, "runs_deleted").context("no runs_deleted")?;
            lines.push(format!(
                "round {round}: no pruning {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms | a pass deleting {} of {backlog} runs in {:.1} s under the same load: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
                quiet.rps,
                quiet.p50_ms,
                quiet.p99_ms,
                deleted,
                took.as_secs_f64(),
                pruning.rps,
                pruning.p50_ms,
                pruning.p99_ms
            ));
        }
        for l in &lines {
            println!("{l}");
        }
        drop(sluice);
        std::fs::remove_dir_all(&data)?;
    }

    let data = scratch.join("data");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("config.toml"), CONFIG)?;
    let sluice = Sluice::start(bin, &data)?;

    step(&format!(
        "soak: {} min of paced mixed load with retention on (keep_max 20000, uploads 100, a pass every 10 s)",
        opts.minutes
    ));
    sluice.put_workflow("orders", &orders("{}"))?;
    sluice.put_workflow("uploads", UPLOADS)?;
    let orders_lua = lua_post(scratch, "orders", &small, Some(2))?;
    let uploads_lua = lua_uploads(scratch)?;
    let total = Duration::from_secs(opts.minutes * 60);
    let mut loads = vec![
        spawn_wrk(
            &orders_lua,
            16,
            opts.minutes * 60,
            &format!("{}/hook/orders/orders", sluice.base),
        )?,
        spawn_wrk(
            &uploads_lua,
            1,
            opts.minutes * 60,
            &format!("{}/hook/uploads/upload", sluice.base),
        )?,
    ];
    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    while started.elapsed() < total {
        std::thread::sleep(Duration::from_secs(10));
        let s = Sample {
            minutes: started.elapsed().as_secs_f64() / 60.0,
            rss_mb: memory::rss_kb(sluice.child.id())? as f64 / 1024.0,
            dir_mb: dir_bytes(&data) as f64 / 1e6,
            runs: runs_kept(&sluice)?,
        };
        if samples.len().is_multiple_of(6) {
            println!(
                "{:6.1} min  RSS {:6.1} MB  data dir {:8.1} MB  runs kept {:>7}",
                s.minutes, s.rss_mb, s.dir_mb, s.runs
            );
        }
        samples.push(s);
    }
    let mut served = 0u64;
    for l in loads.drain(..) {
        let out = l.wait_with_output()?;
        served += requests(&String::from_utf8_lossy(&out.stdout));
    }
    drop(sluice);
    let (rss, dir) = (
        samples.iter().map(|s| s.rss_mb).collect::<Vec<_>>(),
        samples.iter().map(|s| s.dir_mb).collect::<Vec<_>>(),
    );
    let thirds = |v: &[f64]| {
        let n = v.len() / 3;
        let max = |s: &[f64]| s.iter().copied().fold(0.0, f64::max);
        (max(&v[n..2 * n]), max(&v[2 * n..]))
    };
    let (rss_mid, rss_end) = thirds(&rss);
    let (dir_mid, dir_end) = thirds(&dir);
    println!();
    println!(
        "soak, {} min, {served} requests ({:.0}/s): RSS peak {rss_mid:.1} MB in the middle third, {rss_end:.1} MB in the last ({:+.1}%); data dir peak {dir_mid:.1} MB in the middle third, {dir_end:.1} MB in the last ({:+.1}%)",
        opts.minutes,
        served as f64 / total.as_secs_f64(),
        100.0 * (rss_end - rss_mid) / rss_mid.max(1e-9),
        100.0 * (dir_end - dir_mid) / dir_mid.max(1e-9),
    );
    std::fs::create_dir_all(opts.svg.parent().context("--svg has no folder")?)?;
    std::fs::write(&opts.svg, chart(&samples, opts.minutes))?;
    println!("chart: {}", opts.svg.display());
    Ok(())
}

struct Sample {
    minutes: f64,
    rss_mb: f64,
    dir_mb: f64,
    runs: u64,
}

/// A wrk script posting `body`, each connection pausing `delay_ms` between
/// requests (none: as fast as answers come).
fn lua_post(scratch: &Path, name: &str, body: &Path, delay_ms: Option<u32>) -> Result<PathBuf> {
    let path = scratch.join(format!("{name}.lua"));
    let mut lua = format!(
        "local f = io.open(\"{}\", \"rb\")\nwrk.method = \"POST\"\nwrk.body = f:read(\"*a\")\nf:close()\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
        body.display()
    );
    if let Some(ms) = delay_ms {
        lua.push_str(&format!("function delay() return {ms} end\n"));
    }
    std::fs::write(&path, lua)?;
    Ok(path)
}

/// Bodies past the inline limit, each one different (a counter at the
/// front), one every 250 ms.
fn lua_uploads(scratch: &Path) -> Result<PathBuf> {
    let path = scratch.join("uploads.lua");
    std::fs::write(
        &path,
        r#"local pad = string.rep("u", 1100 * 1024)
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, '{"n": ' .. n .. ', "note": "' .. n .. pad .. '"}')
end
function delay() return 250 end
"#,
    )?;
    Ok(path)
}

fn wrk(script: &Path, conns: u32, secs: u64, url: &str) -> Result<super::webhook::Measured> {
    let out = output(&mut wrk_cmd(script, conns, secs, url))?;
    parse_wrk(&out).with_context(|| format!("reading wrk's output:\n{out}"))
}

fn spawn_wrk(script: &Path, conns: u32, secs: u64, url: &str) -> Result<Child> {
    Ok(wrk_cmd(script, conns, secs, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?)
}

fn wrk_cmd(script: &Path, conns: u32, secs: u64, url: &str) -> Command {
    let mut cmd = Command::new("wrk");
    cmd.args([
        if conns > 1 { "-t2" } else { "-t1" },
        &format!("-c{conns}"),
        &format!("-d{secs}s"),
        "--timeout",
        "30s",
        "--latency",
        "-s",
    ])
    .arg(script)
    .arg(url);
    cmd
}

fn requests(out: &str) -> u64 {
    out.lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn runs_kept(sluice: &Sluice) -> Result<u64> {
    let report = sluice.curl(&[&format!("{}/api/v1/storage", sluice.base)])?;
    // `runs.total` is the report's only "total".
    json_number(&report, "total").context("no runs.total in the storage report")
}

/// The number after the first `"key":` in JSON text (xtask has no JSON
/// parser; the reports it reads are flat enough).
fn json_number(text: &str, key: &str) -> Option<u64> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Bytes under `dir` (the database, its WAL, blobs).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Two panels over time: RSS and the data dir, in MB.
fn chart(samples: &[Sample], minutes: u64) -> String {
    let (w, h, pad) = (720.0, 200.0, 48.0);
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#fff"/>
"##,
        2.0 * h + 40.0
    );
    type Panel = (&'static str, &'static str, fn(&Sample) -> f64);
    let panels: [Panel; 2] = [
        ("RSS of sluice serve (MB)", "#2563eb", |s| s.rss_mb),
        ("data dir: database, WAL, blobs (MB)", "#16a34a", |s| {
            s.dir_mb
        }),
    ];
    for (i, (title, color, value)) in panels.iter().enumerate() {
        let top = 10.0 + i as f64 * (h + 20.0);
        let max = samples.iter().map(value).fold(1.0, f64::max) * 1.1;
        let x = |m: f64| pad + (w - 2.0 * pad) * m / minutes.max(1) as f64;
        let y = |v: f64| top + h - 24.0 - (h - 48.0) * v / max;
        let points: Vec<String> = samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.minutes), y(value(s))))
            .collect();
        svg.push_str(&format!(
            r##"<text x="{pad}" y="{:.0}" font-weight="bold">{title}</text>
<line x1="{pad}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#999"/>
<line x1="{pad}" y1="{:.1}" x2="{pad}" y2="{:.1}" stroke="#999"/>
<text x="4" y="{:.1}">{:.0}</text><text x="4" y="{:.1}">0</text>
<text x="{:.1}" y="{:.1}" text-anchor="end">{minutes} min</text>
<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>
"##,
            top + 14.0,
            y(0.0),
            x(minutes as f64),
            y(0.0),
            y(max),
            y(0.0),
            y(max) + 4.0,
            max,
            y(0.0) + 4.0,
            x(minutes as f64),
            y(0.0) + 16.0,
            points.join(" ")
        ));
    }
    svg.push_str("</svg>\n");
    svg
}
