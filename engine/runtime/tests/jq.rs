//! jq programs that once took the engine down (issue 16): a program that
//! recurses without end overflowed the jq thread's stack and aborted the
//! process (and, resumed at the next start, aborted it again); one that
//! loops was reported failed while its thread spun on. Now jq runs in the
//! sandbox: each ends as a failed step with an error naming the limit, the
//! engine keeps running, and nothing is left spinning.
//!
//! One test in its own binary, so that its CPU check sees only its own
//! threads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Status};

fn transform(jq: &str) -> Arc<Plan> {
    Plan::new(
        Workflow::from_value(json!({
            "format": "sluice.workflow/v1", "id": "jq", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "x", "kind": "data.transform", "config": {"jq": jq}},
                {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "t", "to": "x"}, {"from": "x", "to": "end"}]
        }))
        .unwrap(),
    )
    .unwrap()
}

async fn run(engine: &Engine, jq: &str, input: Value) -> RunResult {
    let handle = engine
        .start(transform(jq), None, Arc::new(input))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .expect("the run ends")
}

#[track_caller]
fn failed_with(r: &RunResult, expect: &str) {
    assert_eq!(r.status, Status::Failed, "{jq:?}", jq = r.output);
    let message = r.error.as_ref().unwrap().message.as_str();
    assert!(
        message.contains("data.transform") && message.contains(expect),
        "{message}"
    );
}

/// CPU time of this process's live threads, from /proc (schedstat: the
/// first field is nanoseconds on a CPU).
fn cpu_time() -> Duration {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_jq_programs_fail_their_step_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options {
        wasm_cache: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache")),
        ..Options::default()
    };
    options.settings.sandbox.timeout_ms = 1_000;
    let engine = Engine::open(dir.path(), options).await.unwrap();
    engine.prepare_code().await.unwrap();

    // Recursion without end: the guest's stack, not the engine's.
    let r = run(&engine, "def f: 1 + f; f", json!(null)).await;
    failed_with(&r, "call stack exhausted");
    // The webhook-shaped one: the caller picks the depth.
    let fact = "def fact: if . <= 1 then 1 else . * (. - 1 | fact) end; .body.n | fact";
    let r = run(&engine, fact, json!({"body": {"n": 10_000_000}})).await;
    failed_with(&r, "call stack exhausted");
    let r = run(&engine, fact, json!({"body": {"n": 5}})).await;
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    assert_eq!(r.output, json!({"end": 120}));
    // A loop: stopped at the time limit, really stopped.
    let r = run(&engine, "last(range(1e18))", json!(null)).await;
    failed_with(&r, "stopped at the time limit of 1000 ms");
    // Memory without bound.
    let r = run(&engine, "[range(1e10) | tostring] | length", json!(null)).await;
    failed_with(&r, "limit");
    // A value nested deeper than the engine stores.
    let r = run(&engine, "reduce range(10000) as $i (0; [.])", json!(null)).await;
    failed_with(&r, "nested more than 100 levels deep");
    // Runtime errors still read as before.
    let r = run(&engine, "error(\"down\")", json!(null)).await;
    failed_with(&r, "jq runtime error");
    let r = run(&engine, "now | type", json!(null)).await;
    assert_eq!(r.output, json!({"end": "number"}), "{:?}", r.error);

    // The engine keeps serving.
    let r = run(&engine, "[.[] * 2]", json!([1, 2, 3])).await;
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    assert_eq!(r.output, json!({"end": [2, 4, 6]}));

    // Nothing is left spinning: over two idle seconds the process uses
    // almost no CPU (a leaked jq thread would use all of one core).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_time();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_time() - before;
    assert!(
        used < Duration::from_millis(400),
        "{used:?} of CPU while idle"
    );
}
