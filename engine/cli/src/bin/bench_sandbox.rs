//! `cargo xtask bench sandbox`: the `code.wasm` sandbox with the sample
//! component (assets/examples/wasm-guest, built here for wasm32-wasip2):
//! compile, load from the disk cache, one invocation warm (fresh instance +
//! call), and throughput with many at once.

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

#[tokio::main]
async fn main() -> Result<()> {
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
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    for _ in 0..n {
        let (s, id, sem, caps) = (sandbox.clone(), id.clone(), sem.clone(), caps.clone());
        tasks.spawn(async move {
            let _p = sem.acquire().await?;
            s.run(&id, input, limits, caps)
                .await
                .map_err(anyhow::Error::from)
        });
    }
    while let Some(r) = tasks.join_next().await {
        ensure!(r??.result.is_ok());
    }
    let all = t.elapsed();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
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
