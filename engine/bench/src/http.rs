//! `cargo xtask bench http`: 1,000 `http.request` calls to a local server
//! through a `flow.split` with concurrency 32, every step journaled, against
//! the same 1,000 calls made with raw reqwest at the same concurrency (the
//! engine's own client, so both sides pool connections alike). The
//! difference, per call, is what the engine adds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use serde_json::json;
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};

const CALLS: usize = 1000;
const CONCURRENCY: usize = 32;
const ROUNDS: usize = 7;

/// Connections the server accepted (pooling shows as a small number).
static ACCEPTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn server() -> Result<std::net::SocketAddr> {
    use axum::extract::Path;
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(|_| {
        ACCEPTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let app = axum::Router::new().route(
        "/item/{i}",
        axum::routing::get(|Path(i): Path<u64>| async move {
            axum::Json(json!({"id": i, "name": format!("item {i}"), "price": i * 3}))
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

fn workflow(addr: std::net::SocketAddr) -> Result<Arc<Plan>> {
    let wf = Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": "bench-http",
        "nodes": [
            {"id": "start", "kind": "trigger.manual"},
            {"id": "each", "kind": "flow.split", "config": {"concurrency": CONCURRENCY}},
            {"id": "get", "kind": "http.request", "config": {"url": format!("http://{addr}/item/{{{{ input }}}}")}},
            {"id": "all", "kind": "flow.join"},
            {"id": "end", "kind": "output.end", "config": {"value": "{{ input | length }}"}}
        ],
        "edges": [
            {"from": "start", "to": "each"}, {"from": "each", "to": "get"},
            {"from": "get", "to": "all"}, {"from": "all", "to": "end"}
        ]
    }))?;
    Ok(Plan::new(wf)?)
}

async fn raw(client: &reqwest::Client, addr: std::net::SocketAddr) -> Result<Duration> {
    let t = Instant::now();
    let results: Vec<Result<serde_json::Value>> = futures::stream::iter(0..CALLS)
        .map(|i| async move {
            let resp = client
                .get(format!("http://{addr}/item/{i}"))
                .send()
                .await?
                .error_for_status()?;
            Ok(resp.json().await?)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(t.elapsed())
}

async fn engine_run(engine: &Engine, plan: &Arc<Plan>) -> Result<Duration> {
    let items: Vec<usize> = (0..CALLS).collect();
    let t = Instant::now();
    let r = engine
        .start(plan.clone(), None, Arc::new(json!(items)))
        .await?
        .wait()
        .await;
    let elapsed = t.elapsed();
    anyhow::ensure!(r.status == Status::Succeeded, "run failed: {:?}", r.error);
    anyhow::ensure!(r.output["end"] == json!(CALLS), "output: {}", r.output);
    Ok(elapsed)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> Result<()> {
    let addr = server().await?;
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(dir.path(), Options::default()).await?;
    let plan = workflow(addr)?;
    let io = sluice_nodes::Io::default();
    let client = io.http_client().map_err(|e| anyhow::anyhow!(e.message))?;

    // Warm both paths (connections, plan, SQLite pages), then alternate.
    raw(client, addr).await?;
    engine_run(&engine, &plan).await?;
    let mut raws = Vec::new();
    let mut runs = Vec::new();
    let (mut raw_conns, mut run_conns) = (0, 0);
    let accepted = || ACCEPTED.load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..ROUNDS {
        let before = accepted();
        raws.push(raw(client, addr).await?);
        raw_conns += accepted() - before;
        let before = accepted();
        runs.push(engine_run(&engine, &plan).await?);
        run_conns += accepted() - before;
    }
    let (raw_t, run_t) = (median(raws), median(runs));
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / CALLS as f64;
    let added = per_call(run_t) - per_call(raw_t);
    println!(
        "http.request through flow.split (concurrency {CONCURRENCY}), {CALLS} calls to a loopback server, median of {ROUNDS}:"
    );
    println!(
        "  raw reqwest:        {:>8.1} ms total, {:>6.1} µs per call (wall / calls)",
        raw_t.as_secs_f64() * 1e3,
        per_call(raw_t)
    );
    println!(
        "  sluice workflow:    {:>8.1} ms total, {:>6.1} µs per call (every step journaled)",
        run_t.as_secs_f64() * 1e3,
        per_call(run_t)
    );
    println!("  added by the engine: {added:>6.1} µs per call (target < 50 µs)");
    println!(
        "  new connections in {ROUNDS} rounds: raw {raw_conns}, workflow {run_conns} (both pool)"
    );
    Ok(())
}
