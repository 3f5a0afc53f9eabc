//! `cargo xtask bench engine`: durable steps per second, per-step overhead,
//! and the SQLite commit floor with the same durability settings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

/// trigger → `sets` × data.set → output.end
fn linear_workflow(sets: usize) -> Result<Arc<Plan>> {
    let mut nodes = vec![json!({"id": "start", "kind": "trigger.manual"})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..sets {
        let id = format!("set{i}");
        nodes.push(json!({"id": id, "kind": "data.set", "config": {"values": {"n": "{{ input.n }}", "step": i}}}));
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    nodes.push(json!({"id": "end", "kind": "output.end"}));
    edges.push(json!({"from": prev, "to": "end"}));
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "bench", "nodes": nodes, "edges": edges}),
    )?;
    Ok(Plan::new(wf)?)
}

const STEPS_PER_RUN: usize = 12;
const LONG_SETS: usize = 100;

/// Latencies of `n` runs of `plan`, one at a time.
async fn sequential(engine: &Engine, plan: &Arc<Plan>, n: usize) -> Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let h = engine
            .start(plan.clone(), None, Arc::new(json!({"n": i})))
            .await?;
        let r = h.wait().await;
        anyhow::ensure!(r.status == Status::Succeeded, "run failed: {:?}", r.error);
        out.push(t.elapsed());
    }
    out.sort();
    Ok(out)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(dir.path(), Options::default()).await?;
    let plan = linear_workflow(10)?;
    let long = linear_workflow(LONG_SETS)?;

    // (b) per-step overhead, one run at a time, no contention. A run also
    // pays fixed costs (the durable create and finish commits), so:
    // - end-to-end: latency of a 12-step run / 12;
    // - marginal: what each extra step adds, from 12-step and 102-step runs.
    let short_runs = sequential(&engine, &plan, 300).await?;
    let long_runs = sequential(&engine, &long, 100).await?;
    let per_step: Vec<Duration> = short_runs
        .iter()
        .map(|d| *d / STEPS_PER_RUN as u32)
        .collect();
    let extra = (LONG_SETS - 10) as u32;
    let marginal_p50 =
        percentile(&long_runs, 0.5).saturating_sub(percentile(&short_runs, 0.5)) / extra;
    let long_steps = (LONG_SETS + 2) as u32;

    // (a) throughput: many runs in flight at once.
    let runs = 3000;
    let in_flight = 256;
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    let sem = Arc::new(tokio::sync::Semaphore::new(in_flight));
    for i in 0..runs {
        let permit = sem.clone().acquire_owned().await?;
        let (engine, plan) = (engine.clone(), plan.clone());
        set.spawn(async move {
            let h = engine.start(plan, None, Arc::new(json!({"n": i}))).await;
            let r = match h {
                Ok(h) => Some(h.wait().await),
                Err(_) => None,
            };
            drop(permit);
            r.is_some_and(|r| r.status == Status::Succeeded)
        });
    }
    let mut ok = 0;
    while let Some(r) = set.join_next().await {
        if r? {
            ok += 1;
        }
    }
    let elapsed = t.elapsed();
    anyhow::ensure!(ok == runs, "{} of {runs} runs failed", runs - ok);
    let steps_per_s = (runs * STEPS_PER_RUN) as f64 / elapsed.as_secs_f64();

    // (c) the commit floor: one tiny transaction per commit, same pragmas.
    let mut conn = SqliteConnectOptions::new()
        .filename(dir.path().join("floor.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .connect()
        .await?;
    sqlx::query("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        .execute(&mut conn)
        .await?;
    let n = 2000;
    let t = Instant::now();
    for i in 0..n {
        sqlx::query("INSERT INTO t (k, v) VALUES (?, 'x')")
            .bind(i)
            .execute(&mut conn)
            .await?;
    }
    let commits_per_s = n as f64 / t.elapsed().as_secs_f64();

    let report: Value = json!({
        "durable_steps_per_s": steps_per_s.round(),
        "runs": runs, "steps_per_run": STEPS_PER_RUN, "in_flight": in_flight,
        "step_overhead_end_to_end_p50_us": percentile(&per_step, 0.5).as_micros(),
        "step_overhead_end_to_end_p99_us": percentile(&per_step, 0.99).as_micros(),
        "step_overhead_marginal_p50_us": marginal_p50.as_micros(),
        "step_overhead_102_step_runs_p50_us": (percentile(&long_runs, 0.5) / long_steps).as_micros(),
        "step_overhead_102_step_runs_p99_us": (percentile(&long_runs, 0.99) / long_steps).as_micros(),
        "run_12_steps_p50_us": percentile(&short_runs, 0.5).as_micros(),
        "run_102_steps_p50_us": percentile(&long_runs, 0.5).as_micros(),
        "sqlite_commits_per_s": commits_per_s.round(),
        "ratio_steps_to_commit_floor": (steps_per_s / commits_per_s * 10.0).round() / 10.0,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
