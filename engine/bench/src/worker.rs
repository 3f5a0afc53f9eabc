//! `cargo xtask bench worker`: a 3-step run executed here against the same
//! run handed off to the shared worker (restate-server + `sluice worker`,
//! mirrored back into this engine's history), beside raw Restate: a no-op
//! handler called through the same ingress. Latency p50/p99 one at a time,
//! and runs/s with 64 in flight; Sluice's overhead is the handed-off run
//! over the raw call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use restate_sdk::prelude::*;
use restate_sdk::service::IntoServiceDefinition;
use serde_json::json;
use sluice_api::RunOn;
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status, WorkerTarget};

/// restate-server as the worker's tests run it (a watchdog kills it when
/// this process ends).
#[path = "../../worker/tests/support/mod.rs"]
mod restate;

const SEQUENTIAL: usize = 200;
const CONCURRENT_RUNS: usize = 1000;
const IN_FLIGHT: usize = 64;

/// Raw Restate's cost: a handler that does nothing.
struct Noop;

#[restate_sdk::service]
impl Noop {
    #[handler]
    async fn run(&self, _ctx: Context<'_>, input: String) -> HandlerResult<String> {
        Ok(input)
    }
}

/// Raw Restate's cost for what a hand-off uses: a workflow sent, then
/// attached to.
struct NoopFlow;

#[restate_sdk::workflow]
impl NoopFlow {
    #[handler]
    async fn run(&self, _ctx: WorkflowContext<'_>, input: String) -> HandlerResult<String> {
        Ok(input)
    }
}

/// trigger → data.set → data.set → output.end: three steps.
fn three_steps(run_on: &str) -> Result<Arc<Plan>> {
    let wf = Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": format!("bench-{run_on}"),
        "settings": {"run_on": run_on},
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "a", "kind": "data.set", "config": {"values": {"n": "{{ input.n }}"}}},
            {"id": "b", "kind": "data.set", "config": {"values": {"twice": "{{ input.n }}{{ input.n }}"}}},
            {"id": "end", "kind": "output.end"}
        ],
        "edges": [{"from": "t", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "end"}]
    }))?;
    Ok(Plan::new(wf)?)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Figures {
    p50: Duration,
    p90: Duration,
    p99: Duration,
    per_sec: f64,
}

/// Latencies of `SEQUENTIAL` calls one at a time, then runs/s of
/// `CONCURRENT_RUNS` with `IN_FLIGHT` at once.
async fn measure<F, Fut>(call: F) -> Result<Figures>
where
    F: Fn(usize) -> Fut + Clone,
    Fut: std::future::Future<Output = Result<()>>,
{
    for i in 0..20 {
        call(i).await?;
    }
    let mut lat = Vec::with_capacity(SEQUENTIAL);
    for i in 0..SEQUENTIAL {
        let t = Instant::now();
        call(i).await?;
        lat.push(t.elapsed());
    }
    lat.sort();
    let t = Instant::now();
    let results: Vec<Result<()>> = futures::stream::iter(0..CONCURRENT_RUNS)
        .map(|i| call(i + SEQUENTIAL))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let elapsed = t.elapsed();
    for r in results {
        r?;
    }
    Ok(Figures {
        p50: percentile(&lat, 0.5),
        p90: percentile(&lat, 0.9),
        p99: percentile(&lat, 0.99),
        per_sec: CONCURRENT_RUNS as f64 / elapsed.as_secs_f64(),
    })
}

async fn run_once(engine: &Engine, plan: &Arc<Plan>, on: RunOn, n: usize) -> Result<()> {
    let h = engine
        .start_on(
            plan.clone(),
            None,
            Arc::new(json!({"n": n})),
            Some(on),
            false,
        )
        .await?;
    let r = h.wait().await;
    anyhow::ensure!(r.status == Status::Succeeded, "run failed: {:?}", r.error);
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let base = dir.path().join("restate");
    let restate = tokio::task::spawn_blocking(move || restate::Restate::start(&base)).await?;

    // The worker, on its own data dir, registered with the admin API.
    let worker_engine = Engine::open(&dir.path().join("worker"), Options::default()).await?;
    let worker = sluice_worker::start(
        worker_engine,
        sluice_worker::WorkerOptions {
            listen: "127.0.0.1:0".parse()?,
            advertise: None,
            restate_admin: Some(restate.admin.clone()),
            hooks: None,
            restate_ingress: restate.ingress.clone(),
        },
    )
    .await?;

    // Raw Restate: a no-op service on an endpoint of its own.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let noop_addr = listener.local_addr()?;
    let endpoint = Endpoint::builder()
        .bind(Noop.into_service_definition())
        .bind(NoopFlow.into_service_definition())
        .build();
    tokio::spawn(async move { HttpServer::new(endpoint).serve(listener).await });
    sluice_worker::register(&restate.admin, &format!("http://{noop_addr}")).await?;

    let engine = Engine::open(
        &dir.path().join("desktop"),
        Options {
            worker: Some(WorkerTarget {
                ingress: restate.ingress.clone(),
                admin: Some(restate.admin.clone()),
                headers: Vec::new(),
            }),
            ..Options::default()
        },
    )
    .await?;
    let local = three_steps("local")?;
    let handed = three_steps("worker")?;
    let client = reqwest::Client::new();
    let noop_url = format!("{}/Noop/run", restate.ingress);

    let raw = measure(|n| {
        let (client, url) = (client.clone(), noop_url.clone());
        async move {
            let resp = client.post(&url).json(&format!("{n}")).send().await?;
            anyhow::ensure!(resp.status().is_success(), "no-op: {}", resp.status());
            resp.bytes().await?;
            Ok(())
        }
    })
    .await?;
    let flow = measure(|n| {
        let (client, ingress) = (client.clone(), restate.ingress.clone());
        async move {
            let key = format!("k{n}-{}", std::process::id());
            let resp = client
                .post(format!("{ingress}/NoopFlow/{key}/run/send"))
                .json(&format!("{n}"))
                .send()
                .await?;
            anyhow::ensure!(
                resp.status().is_success(),
                "no-op workflow: {}",
                resp.status()
            );
            resp.bytes().await?;
            let resp = client
                .get(format!("{ingress}/restate/workflow/NoopFlow/{key}/attach"))
                .send()
                .await?;
            anyhow::ensure!(resp.status().is_success(), "attach: {}", resp.status());
            resp.bytes().await?;
            Ok(())
        }
    })
    .await?;
    let here = measure(|n| {
        let (engine, plan) = (engine.clone(), local.clone());
        async move { run_once(&engine, &plan, RunOn::Local, n).await }
    })
    .await?;
    let off = measure(|n| {
        let (engine, plan) = (engine.clone(), handed.clone());
        async move { run_once(&engine, &plan, RunOn::Worker, n).await }
    })
    .await?;

    println!(
        "a 3-step run (data.set, data.set, output.end), {SEQUENTIAL} one at a time, then \
         {CONCURRENT_RUNS} with {IN_FLIGHT} in flight; restate-server with 4 partitions, all on this machine"
    );
    println!(
        "{:<46} {:>10} {:>10} {:>10} {:>10}",
        "", "p50", "p90", "p99", "runs/s @64"
    );
    for (name, f) in [
        ("raw Restate (no-op handler, same ingress)", &raw),
        ("raw Restate (no-op workflow, send + attach)", &flow),
        ("Sluice, local", &here),
        ("Sluice, handed off to the worker", &off),
    ] {
        println!(
            "{name:<46} {:>10} {:>10} {:>10} {:>10.0}",
            ms(f.p50),
            ms(f.p90),
            ms(f.p99),
            f.per_sec
        );
    }
    for (base, f) in [("no-op handler", &raw), ("no-op workflow", &flow)] {
        println!(
            "handed off over raw Restate ({base}): p50 {:.2}x, p99 {:.2}x, {:.2}x fewer runs/s",
            off.p50.as_secs_f64() / f.p50.as_secs_f64(),
            off.p99.as_secs_f64() / f.p99.as_secs_f64(),
            f.per_sec / off.per_sec
        );
    }
    worker.stop().await;
    drop(restate);
    Ok(())
}
