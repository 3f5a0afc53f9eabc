//! `cargo xtask bench run-cost`: what one webhook-shaped run (trigger →
//! data.set → output.respond, `when_finished`, so driven in one go) costs
//! the engine in-process, without HTTP or a load generator in the way:
//! heap allocations and bytes per run (counted, so exact), and CPU per run
//! on the tokio workers and on the journal writer under 64 runs in flight.
//! The counts move by a handful between runs of the same binary, where wrk's
//! requests/s move by ±15%: this is the A/B measure for the webhook path's
//! levers (`perf stat -e instructions:u` on `--sequential` adds instructions).

use std::alloc::{GlobalAlloc, Layout};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};

/// Counts allocations while `COUNTING` is set (one relaxed load otherwise),
/// over the allocator `sluice` itself runs on (`sluice_alloc`).
struct Counting;

static MI: sluice_alloc::Mimalloc = sluice_alloc::Mimalloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// A global allocator is an unsafe trait: the only unsafe code in the bench.
// SAFETY: every call is passed on to mimalloc unchanged.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCS.fetch_add(1, Relaxed);
            BYTES.fetch_add(layout.size() as u64, Relaxed);
        }
        // SAFETY: the caller's layout, as GlobalAlloc requires.
        unsafe { MI.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `alloc` above with this layout.
        unsafe { MI.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCS.fetch_add(1, Relaxed);
            BYTES.fetch_add(new_size as u64, Relaxed);
        }
        // SAFETY: as for `alloc`; `ptr` came from it with `layout`.
        unsafe { MI.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The webhook bench's workflow (`cargo xtask bench webhook`).
fn plan() -> Result<Arc<Plan>> {
    let wf = Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": "bench",
        "nodes": [
            {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
            {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
            {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}
        ],
        "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]
    }))?;
    Ok(Plan::new(wf)?)
}

/// The message the trigger port builds for wrk's request.
fn message(i: u64) -> Arc<Value> {
    Arc::new(json!({
        "method": "POST", "path": "orders", "query": {},
        "headers": {"content-type": "application/json"},
        "body": {"id": i, "total": 250, "note": "x"},
    }))
}

async fn one(engine: &Engine, plan: &Arc<Plan>, i: u64) -> Result<()> {
    let h = engine
        .start_for_result(plan.clone(), Some("hook"), message(i))
        .await?;
    let r = h.wait().await;
    anyhow::ensure!(r.status == Status::Succeeded, "run failed: {:?}", r.error);
    anyhow::ensure!(r.respond.is_some(), "no output.respond reached");
    Ok(())
}

/// CPU time (user + sys, in clock ticks) of this process's threads, by name.
fn thread_ticks() -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for t in std::fs::read_dir("/proc/self/task")? {
        let dir = t?.path();
        let name = std::fs::read_to_string(dir.join("comm"))?
            .trim()
            .to_string();
        let stat = std::fs::read_to_string(dir.join("stat"))?;
        // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').context("stat without comm")?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
        *out.entry(name).or_default() += ticks;
    }
    Ok(out)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sequential_only = args.iter().any(|a| a == "--sequential");
    // `--runs N`: how many runs the sequential part counts (5,000).
    let n: u64 = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).context("--runs takes a number")?.parse()?,
        None => 5000,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let engine = Engine::open(dir.path(), Options::default()).await?;
        let plan = plan()?;
        for i in 0..n.min(1000) {
            one(&engine, &plan, i).await?;
        }

        // One run at a time: allocations per run (the writer's included).
        COUNTING.store(true, Relaxed);
        let t = Instant::now();
        for i in 0..n {
            one(&engine, &plan, i).await?;
        }
        let seq = t.elapsed();
        COUNTING.store(false, Relaxed);
        let allocs = ALLOCS.load(Relaxed) as f64 / n as f64;
        let bytes = BYTES.load(Relaxed) as f64 / n as f64;
        let mut report = json!({
            "allocations_per_run": (allocs * 10.0).round() / 10.0,
            "allocated_bytes_per_run": bytes.round(),
            "sequential_run_us": (seq.as_secs_f64() * 1e6 / n as f64 * 10.0).round() / 10.0,
        });
        if !sequential_only {
            // 64 runs in flight, as wrk's 64 connections: CPU per run by thread.
            let secs = Duration::from_secs(5);
            let before = thread_ticks()?;
            let t = Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for c in 0..64u64 {
                let (engine, plan) = (engine.clone(), plan.clone());
                set.spawn(async move {
                    let mut done = 0u64;
                    while t.elapsed() < secs {
                        one(&engine, &plan, c * 1_000_000 + done).await?;
                        done += 1;
                    }
                    anyhow::Ok(done)
                });
            }
            let mut runs = 0;
            while let Some(r) = set.join_next().await {
                runs += r??;
            }
            let elapsed = t.elapsed();
            let after = thread_ticks()?;
            // /proc counts in USER_HZ ticks, 100 a second on Linux.
            let tick_us = 1e6 / 100.0;
            let mut cpu = serde_json::Map::new();
            for (name, ticks) in &after {
                let used = ticks - before.get(name).copied().unwrap_or(0);
                if used > 0 {
                    cpu.insert(
                        name.clone(),
                        json!((used as f64 * tick_us / runs as f64 * 10.0).round() / 10.0),
                    );
                }
            }
            report["runs_per_s_64_in_flight"] =
                json!((runs as f64 / elapsed.as_secs_f64()).round());
            report["cpu_us_per_run_by_thread"] = Value::Object(cpu);
        }
        println!("{}", serde_json::to_string_pretty(&report)?);
        anyhow::Ok(())
    })
}
