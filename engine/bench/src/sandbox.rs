//! `cargo xtask bench sandbox`: the sandbox's two guests.
//!
//! - `code.js`: pre-initializing (Wizer) and compiling the JavaScript
//!   runtime, loading it from the disk cache, the first call, one call warm
//!   (fresh instance + compile + run `return input.a + input.b` + output),
//!   and calls per second with many at once.
//! - `code.wasm` with the sample component (assets/examples/wasm-guest,
//!   built here for wasm32-wasip2): compile, load from the disk cache, one
//!   invocation warm, and throughput.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use sluice_sandbox::{Capabilities, Limits, Sandbox};

fn build_sample() -> Result<Vec<u8>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = root.join("assets/examples/wasm-guest/Cargo.toml");
    let target = std::env::temp_dir().join("sluice-bench-wasm-guest");
    sluice_sandbox::build_component(&manifest, &target, "order_total").map_err(anyhow::Error::msg)
}

fn pct(mut v: Vec<Duration>, p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

async fn throughput<F, Fut>(n: usize, call: F) -> Result<Duration>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    for _ in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let fut = call();
        tasks.spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(t.elapsed())
}

async fn bench_js() -> Result<()> {
    let cache = tempfile::tempdir()?;
    let sandbox = Sandbox::new(Some(cache.path()))?;
    let t = Instant::now();
    sandbox.prepare_js().await?;
    let prepare = t.elapsed();
    let mut loads = Vec::new();
    let mut firsts = Vec::new();
    let (source, input) = ("return input.a + input.b", r#"{"a": 2, "b": 3}"#);
    let limits = Limits::default();
    let caps = Capabilities {
        log: true,
        sink: None,
    };
    for _ in 0..10 {
        let other = Sandbox::new(Some(cache.path()))?;
        let t = Instant::now();
        other.prepare_js().await?;
        loads.push(t.elapsed());
        let t = Instant::now();
        let out = other.run_js(source, input, limits, caps.clone()).await?;
        firsts.push(t.elapsed());
        ensure!(out.result.as_deref() == Ok("5"), "{:?}", out.result);
    }
    for _ in 0..200 {
        sandbox.run_js(source, input, limits, caps.clone()).await?;
    }
    let mut warm = Vec::new();
    for _ in 0..5000 {
        let t = Instant::now();
        let out = sandbox.run_js(source, input, limits, caps.clone()).await?;
        warm.push(t.elapsed());
        ensure!(out.result.as_deref() == Ok("5"), "{:?}", out.result);
    }
    let n = 20_000;
    let all = throughput(n, || {
        let (s, caps) = (sandbox.clone(), caps.clone());
        async move {
            let out = s.run_js(source, input, limits, caps).await?;
            ensure!(out.result.as_deref() == Ok("5"), "{:?}", out.result);
            Ok(())
        }
    })
    .await?;
    println!("code.js benchmark (QuickJS in WebAssembly, `{source}`; release build):");
    println!(
        "  pre-initialize (Wizer) and compile the runtime, once per install: {:.0} ms",
        ms(prepare)
    );
    println!(
        "  load it from the disk cache, p50 of 10: {:.2} ms",
        ms(pct(loads, 50))
    );
    println!(
        "  first call after loading, p50 of 10: {:.0} µs",
        us(pct(firsts, 50))
    );
    println!(
        "  one call warm (fresh instance + compile + run + output), p50 / p99 of 5000: {:.0} / {:.0} µs",
        us(pct(warm.clone(), 50)),
        us(pct(warm, 99))
    );
    println!(
        "  {n} calls, 64 at a time, on {} cores: {:.0} per second",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        n as f64 / all.as_secs_f64()
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One engine in one configuration, for `--engines`.
async fn measure_engine(label: &str, wasm: Vec<u8>, snapshot: bool) -> Result<()> {
    let size = wasm.len();
    let cache = tempfile::tempdir()?;
    let sandbox = Sandbox::with_js_runtime(Some(cache.path()), wasm, snapshot)?;
    let t = Instant::now();
    sandbox.prepare_js().await?;
    let prepare = t.elapsed();
    let (source, input) = ("return input.a + input.b", r#"{"a": 2, "b": 3}"#);
    let (limits, caps) = (Limits::default(), Capabilities::default());
    for _ in 0..20 {
        let out = sandbox.run_js(source, input, limits, caps.clone()).await?;
        ensure!(
            out.result.as_deref() == Ok("5"),
            "{label}: {:?}",
            out.result
        );
    }
    let mut warm = Vec::new();
    for _ in 0..1000 {
        let t = Instant::now();
        sandbox.run_js(source, input, limits, caps.clone()).await?;
        warm.push(t.elapsed());
    }
    let n = 3000;
    let all = throughput(n, || {
        let (s, caps) = (sandbox.clone(), caps.clone());
        async move {
            s.run_js(source, input, limits, caps).await?;
            Ok(())
        }
    })
    .await?;
    println!(
        "| {label} | {:.1} MB | {:.1} s | {:.0} µs | {:.0} µs | {:.0} |",
        size as f64 / 1e6,
        prepare.as_secs_f64(),
        us(pct(warm.clone(), 50)),
        us(pct(warm, 99)),
        n as f64 / all.as_secs_f64()
    );
    Ok(())
}

/// QuickJS (ours) against Boa (`engine/sandbox/guest-boa`, built for
/// wasm32-wasip1), each with and without the Wizer snapshot.
async fn compare_engines(boa: &str) -> Result<()> {
    let boa = std::fs::read(boa)?;
    let quickjs = Sandbox::builtin_js_runtime().to_vec();
    println!(
        "JavaScript engines compared (`return input.a + input.b`, fresh instance per call; release build):"
    );
    println!();
    println!(
        "| engine | module | prepare (Wizer + compile) | warm p50 | warm p99 | calls/s, 64 at a time |"
    );
    println!("|---|---|---|---|---|---|");
    measure_engine("QuickJS, Wizer snapshot", quickjs.clone(), true).await?;
    measure_engine("QuickJS, no snapshot", quickjs, false).await?;
    measure_engine("Boa, Wizer snapshot", boa.clone(), true).await?;
    measure_engine("Boa, no snapshot", boa, false).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, boa] = args.as_slice()
        && flag == "--engines"
    {
        return compare_engines(boa).await;
    }
    bench_js().await?;
    println!();
    bench_wasm().await
}

async fn bench_wasm() -> Result<()> {
    let bytes = build_sample()?;
    let cache = tempfile::tempdir()?;
    let t = Instant::now();
    let sandbox = Sandbox::new(Some(cache.path()))?;
    let engine_start = t.elapsed();
    let t = Instant::now();
    let id = sandbox.load(&bytes)?;
    let compile = t.elapsed();
    let mut cached = Vec::new();
    for _ in 0..10 {
        let other = Sandbox::new(Some(cache.path()))?;
        let t = Instant::now();
        other.load(&bytes)?;
        cached.push(t.elapsed());
    }
    let input = r#"{"items": [{"sku": "a", "price": 2.5, "qty": 2}, {"sku": "b", "price": 10.0}]}"#;
    let limits = Limits::default();
    let caps = Capabilities {
        log: true,
        sink: None,
    };
    for _ in 0..100 {
        sandbox.run(&id, input, limits, caps.clone()).await?;
    }
    let mut warm = Vec::new();
    for _ in 0..2000 {
        let t = Instant::now();
        let out = sandbox.run(&id, input, limits, caps.clone()).await?;
        warm.push(t.elapsed());
        ensure!(out.result.is_ok(), "{:?}", out.result);
    }
    let n = 5000;
    let all = throughput(n, || {
        let (s, id, caps) = (sandbox.clone(), id.clone(), caps.clone());
        async move {
            let out = s.run(&id, input, limits, caps).await?;
            ensure!(out.result.is_ok(), "{:?}", out.result);
            Ok(())
        }
    })
    .await?;
    println!(
        "code.wasm sandbox benchmark (sample component {} KiB; release build):",
        bytes.len() / 1024
    );
    println!(
        "  sandbox start (engine, pools, linker): {:.1} ms",
        ms(engine_start)
    );
    println!("  compile the component (Cranelift): {:.1} ms", ms(compile));
    println!(
        "  load it from the disk cache, p50 of 10: {:.2} ms",
        ms(pct(cached, 50))
    );
    println!(
        "  one invocation warm (fresh instance + call + output), p50 / p99 of 2000: {:.0} / {:.0} µs",
        us(pct(warm.clone(), 50)),
        us(pct(warm, 99))
    );
    println!(
        "  {n} invocations, 64 at a time: {:.0} per second",
        n as f64 / all.as_secs_f64()
    );
    Ok(())
}
