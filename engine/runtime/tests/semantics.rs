//! One small workflow per rule of DESIGN §3, run on the real executor with a
//! real SQLite journal, each with its exact expected output.

use std::sync::Arc;

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Status};

struct Harness {
    _dir: tempfile::TempDir,
    engine: Engine,
    /// Start runs as a caller that waits for their result does
    /// (`start_for_result`: a run of a plan that runs in one go executes
    /// on the caller's task and is recorded whole when it ends).
    for_result: bool,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    Harness {
        _dir: dir,
        engine,
        for_result: false,
    }
}

fn plan(nodes: Value, edges: Value) -> Arc<Plan> {
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "t", "nodes": nodes, "edges": edges}),
    )
    .unwrap();
    Plan::new(wf).unwrap()
}

async fn run_with(
    h: &Harness,
    nodes: Value,
    edges: Value,
    trigger: Option<&str>,
    input: Value,
) -> RunResult {
    let plan = plan(nodes, edges);
    let handle = if h.for_result {
        h.engine
            .start_for_result(plan, trigger, Arc::new(input))
            .await
    } else {
        h.engine.start(plan, trigger, Arc::new(input)).await
    }
    .unwrap();
    // Generous: the first jq step of a fresh machine prepares the script
    // runtime (compiled once per machine, tens of seconds in a debug build).
    let result = tokio::time::timeout(std::time::Duration::from_secs(120), handle.wait())
        .await
        .unwrap();
    // What was recorded is what the caller was told, and the run view
    // has every step.
    let run = h.engine.store().get_run(&result.id).await.unwrap().unwrap();
    assert_eq!(run.status, result.status, "run {}", result.id);
    if result.status == Status::Succeeded {
        assert_eq!(run.output.as_ref(), Some(&result.output));
    }
    let records = h.engine.store().run_records(&result.id).await.unwrap();
    assert!(!records.is_empty(), "run {} has no journal", result.id);
    result
}

#[track_caller]
fn ok(r: &RunResult, expect: Value) {
    assert_eq!(r.status, Status::Succeeded, "error: {:?}", r.error);
    assert_eq!(r.output, expect);
}

#[macro_use]
#[path = "semantics/rules.rs"]
mod rules;
use rules::failing;

/// Each rule as a test on the local executor.
macro_rules! local_tests {
    ($($name:ident),* $(,)?) => {
        mod rules_local {
            $(
                #[tokio::test]
                async fn $name() {
                    let h = super::harness().await;
                    super::rules::$name(&h).await;
                }
            )*
        }
    };
}
each_rule!(local_tests);

/// Each rule again, started by a caller that waits for the result.
macro_rules! for_result_tests {
    ($($name:ident),* $(,)?) => {
        mod rules_for_result {
            $(
                #[tokio::test]
                async fn $name() {
                    let mut h = super::harness().await;
                    h.for_result = true;
                    super::rules::$name(&h).await;
                }
            )*
        }
    };
}
each_rule!(for_result_tests);
/// The futures a run in one go is awaited through stay small. A future is
/// moved into each future that awaits it (and axum boxes a webhook
/// handler's once more), so a run's whole state inlined in them is copied
/// level by level on every request: the webhook handler's was 18 KB while
/// the driver's future was not boxed, and a change that doubled that at
/// each level (to 426 KB) took the webhook from 20,000 to 8,000 requests/s.
#[tokio::test]
async fn a_run_in_one_go_is_awaited_through_small_futures() {
    let h = harness().await;
    let plan = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "set", "kind": "data.set", "config": {"values": {"a": 1}}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "t", "to": "set"}, {"from": "set", "to": "end"}]),
    );
    assert!(plan.in_one_go);
    let start = h.engine.start_for_result(plan, None, Arc::new(json!({})));
    let size = std::mem::size_of_val(&start);
    assert!(size <= 2048, "start_for_result's future is {size} bytes");
    let result = start.await.unwrap().wait().await;
    ok(&result, json!({"end": {"a": 1}}));
}

#[tokio::test]
async fn subworkflow_runs_a_stored_workflow() {
    let h = harness().await;
    let child = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "child", "nodes": [
        {"id": "by_hand", "kind": "trigger.manual"},
        {"id": "called", "kind": "trigger.workflow"},
        {"id": "res", "kind": "output.end", "config": {"value": "{{ input.n * 10 }}"}}],
        "edges": [{"from": "called", "to": "res"}]}),
    )
    .unwrap();
    h.engine
        .save_workflow(&Plan::new(child).unwrap())
        .await
        .unwrap();
    let r = run_with(
        &h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "call", "kind": "flow.subworkflow", "config": {"workflow": "child"}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "call"}, {"from": "call", "to": "end"}]),
        None,
        json!({"n": 4}),
    )
    .await;
    ok(&r, json!({"end": {"res": 40}}));
}

#[tokio::test]
async fn a_retried_subworkflow_step_attaches_to_its_child_instead_of_running_it_twice() {
    let h = harness().await;
    let child = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "slow-child", "nodes": [
        {"id": "called", "kind": "trigger.workflow"},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 300}},
        {"id": "res", "kind": "output.end"}],
        "edges": [{"from": "called", "to": "w"}, {"from": "w", "to": "res"}]}),
    )
    .unwrap();
    h.engine
        .save_workflow(&Plan::new(child).unwrap())
        .await
        .unwrap();
    let r = run_with(
        &h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "call", "kind": "flow.subworkflow", "config": {"workflow": "slow-child"},
             "timeout_ms": 100, "retry": {"max_attempts": 5, "backoff_ms": 10, "factor": 1}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "call"}, {"from": "call", "to": "end"}]),
        None,
        json!({"n": 1}),
    )
    .await;
    ok(&r, json!({"end": {"res": {"n": 1}}}));
    // One child run, whose wait step started exactly once.
    let runs = h.engine.store().list_runs(10).await.unwrap();
    let children: Vec<_> = runs
        .iter()
        .filter(|r| r.workflow_id == "slow-child")
        .collect();
    assert_eq!(children.len(), 1);
    let records = h.engine.store().run_records(&children[0].id).await.unwrap();
    let waits = records
        .iter()
        .filter(|r| &*r.node == "w" && r.kind == sluice_store::RecordKind::Started)
        .count();
    assert_eq!(waits, 1);
}

#[tokio::test]
async fn cancel_stops_in_flight_steps_and_ends_the_run_cancelled() {
    let h = harness().await;
    let handle = h
        .engine
        .start(
            plan(
                json!([
                    {"id": "t", "kind": "trigger.manual"},
                    {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 60000}},
                    {"id": "end", "kind": "output.end"},
                    {"id": "quick", "kind": "output.end", "config": {"value": "done"}}
                ]),
                json!([{"from": "t", "to": "w"}, {"from": "w", "to": "end"}, {"from": "t", "to": "quick"}]),
            ),
            None,
            Arc::new(json!(null)),
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(h.engine.cancel(&handle.id));
    let id = handle.id.clone();
    let r = tokio::time::timeout(std::time::Duration::from_secs(5), handle.wait())
        .await
        .unwrap();
    assert_eq!(r.status, Status::Cancelled);
    assert_eq!(r.output, json!({"quick": "done"}));
    assert_eq!(
        serde_json::to_value(&r.error).unwrap(),
        json!({"message": "the run was cancelled"})
    );
    let row = h.engine.store().get_run(&id).await.unwrap().unwrap();
    assert_eq!(row.status, Status::Cancelled);
    assert!(!h.engine.cancel(&id), "a finished run cannot be cancelled");
}

#[tokio::test]
async fn a_jq_program_that_builds_a_very_deep_value_fails_its_step() {
    let h = harness().await;
    let r = run_with(
        &h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "deep", "kind": "data.transform", "config": {"jq": "reduce range(100000) as $i (null; [.])"}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "deep"}, {"from": "deep", "to": "end"}]),
        None,
        json!(null),
    )
    .await;
    assert_eq!(r.status, Status::Failed);
    // Refused by depth, or (this deep) by the guest's stack while it drops
    // the value: either way in the sandbox, never on an engine thread.
    let message = r.error.unwrap().message;
    assert!(
        message.starts_with("data.transform: ") && message.contains("nested"),
        "{message}"
    );
}

/// JSON has no Infinity or NaN. jaq divides by zero into them, and they
/// used to come out as `null`: an order total over zero items silently
/// became nothing. Now the step fails and says where and why.
#[tokio::test]
async fn a_jq_number_json_cannot_hold_fails_its_step_and_says_where() {
    let h = harness().await;
    let transform = |jq: &str| {
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "avg", "kind": "data.transform", "config": {"jq": jq}},
            {"id": "end", "kind": "output.end"}
        ])
    };
    let edges = json!([{"from": "t", "to": "avg"}, {"from": "avg", "to": "end"}]);
    let input = json!({"total": 10, "items": 0, "lines": [{"n": 1}, {"n": 0}]});
    for (jq, where_, what) in [
        ("{id: 7, avg: (.total / .items)}", ".avg", "Infinity"),
        ("{id: 7, avg: (-.total / .items)}", ".avg", "-Infinity"),
        (
            "[.lines[] | {\"per item\": (.n / .n)}]",
            "[1].\"per item\"",
            "NaN",
        ),
        ("1, (.total / .items)", "output 2", "Infinity"),
    ] {
        let r = run_with(&h, transform(jq), edges.clone(), None, input.clone()).await;
        assert_eq!(r.status, Status::Failed, "{jq}: {:?}", r.output);
        let message = r.error.unwrap().message;
        assert!(
            message.starts_with("data.transform: ")
                && message.contains(where_)
                && message.contains(what)
                && message.contains("division by zero"),
            "{jq}: {message}"
        );
    }
    // Checked inside the program, they are ordinary values.
    let r = run_with(
        &h,
        transform("{avg: (if .items == 0 then null else .total / .items end), inf: (.total / .items | isinfinite)}"),
        edges,
        None,
        input,
    )
    .await;
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    assert_eq!(r.output, json!({"end": {"avg": null, "inf": true}}));
}

async fn put(h: &Harness, wf: Value) {
    let plan = Plan::new(Workflow::from_value(wf).unwrap()).unwrap();
    h.engine.save_workflow(&plan).await.unwrap();
}

#[tokio::test]
async fn a_failed_run_fires_error_triggers() {
    let h = harness().await;
    put(&h, json!({"format": "sluice.workflow/v1", "id": "on-failure", "nodes": [
        {"id": "failed", "kind": "trigger.error"},
        {"id": "report", "kind": "output.end", "config": {"value": "{{ input.workflow }}/{{ input.node }}: {{ input.error.message }}"}}],
        "edges": [{"from": "failed", "to": "report"}]}))
    .await;
    let (nodes, edges) = failing("fail");
    let r = run_with(&h, nodes, edges, None, json!(1)).await;
    assert_eq!(r.status, Status::Failed);
    // The error workflow runs on its own; wait for it.
    let mut found = None;
    for _ in 0..200 {
        let runs = h.engine.store().list_runs(10).await.unwrap();
        if let Some(run) = runs
            .iter()
            .find(|r| r.workflow_id == "on-failure" && r.status != Status::Running)
        {
            found = Some(run.clone());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let run = found.expect("the error workflow ran");
    assert_eq!(run.status, Status::Succeeded);
    assert_eq!(
        run.output,
        Some(json!({"report": "t/boom: data.transform: jq runtime error: \"nope\""}))
    );
    assert_eq!(run.input["run_id"], json!(r.id));
}

#[tokio::test]
async fn retry_from_start_and_from_the_failed_step() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("exec.log");
    let options = Options {
        exec_log: Some(log.clone()),
        ..Options::default()
    };
    let engine = Engine::open(&dir.path().join("data"), options)
        .await
        .unwrap();
    let h = Harness {
        _dir: dir,
        engine,
        for_result: false,
    };
    let child = |ok: bool| {
        let last = if ok {
            json!({"id": "res", "kind": "output.end", "config": {"value": "{{ input.n + 1 }}"}})
        } else {
            json!({"id": "res", "kind": "data.transform", "config": {"jq": "error(\"down\")"}})
        };
        json!({"format": "sluice.workflow/v1", "id": "flaky", "nodes": [
            {"id": "called", "kind": "trigger.workflow"}, last],
            "edges": [{"from": "called", "to": "res"}]})
    };
    put(&h, child(false)).await;
    let nodes = json!([
        {"id": "t", "kind": "trigger.manual"},
        {"id": "a", "kind": "data.set", "config": {"values": {"n": "{{ input.n * 10 }}"}}},
        {"id": "call", "kind": "flow.subworkflow", "config": {"workflow": "flaky"}},
        {"id": "end", "kind": "output.end"}
    ]);
    let edges = json!([{"from": "t", "to": "a"}, {"from": "a", "to": "call"}, {"from": "call", "to": "end"}]);
    let failed = run_with(&h, nodes, edges, None, json!({"n": 4})).await;
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.error.as_ref().unwrap().node.as_deref(), Some("call"));

    // Still broken: a retry from the start fails the same way and runs `a` again.
    let again = h
        .engine
        .retry_from_start(&failed.id)
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(again.status, Status::Failed);

    put(&h, child(true)).await;
    let fixed = h
        .engine
        .retry_from_failed(&failed.id)
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(fixed.status, Status::Succeeded, "{:?}", fixed.error);
    assert_eq!(fixed.output, json!({"end": {"res": 41}}));
    assert_ne!(fixed.id, failed.id);

    let text = std::fs::read_to_string(&log).unwrap();
    let ran = |run: &str, node: &str| {
        text.lines()
            .filter(|l| l.starts_with(&format!("{run}/{node}/")))
            .count()
    };
    assert_eq!(ran(&failed.id, "a"), 1);
    assert_eq!(
        ran(&again.id, "a"),
        1,
        "retry from start runs everything again"
    );
    assert_eq!(ran(&fixed.id, "t"), 0, "finished steps are reused, not run");
    assert_eq!(ran(&fixed.id, "a"), 0, "finished steps are reused, not run");
    assert_eq!(ran(&fixed.id, "call"), 1);
    // A running or unknown run cannot be retried.
    assert!(h.engine.retry_from_failed("r-nope").await.is_err());
}

#[tokio::test]
async fn workflow_concurrency_queues_runs_beyond_the_limit() {
    let h = harness().await;
    let wf = |concurrency: u64| {
        Workflow::from_value(
            json!({"format": "sluice.workflow/v1", "id": "one-at-a-time",
            "settings": {"concurrency": concurrency}, "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 100}},
            {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "t", "to": "w"}, {"from": "w", "to": "end"}]}),
        )
        .unwrap()
    };
    let limited = Plan::new(wf(1)).unwrap();
    let t0 = std::time::Instant::now();
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(
            h.engine
                .start(limited.clone(), None, Arc::new(json!(i)))
                .await
                .unwrap(),
        );
    }
    for (i, handle) in handles.into_iter().enumerate() {
        ok(&handle.wait().await, json!({"end": i}));
    }
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(300),
        "one at a time: {:?}",
        t0.elapsed()
    );

    let wide = Plan::new(wf(3)).unwrap();
    let t0 = std::time::Instant::now();
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(
            h.engine
                .start(wide.clone(), None, Arc::new(json!(i)))
                .await
                .unwrap(),
        );
    }
    for handle in handles {
        assert_eq!(handle.wait().await.status, Status::Succeeded);
    }
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(300),
        "three at once: {:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn runs_beyond_the_engine_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        max_active_runs: 2,
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await.unwrap();
    let slow = plan(
        json!([{"id": "t", "kind": "trigger.manual"}, {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 200}}]),
        json!([{"from": "t", "to": "w"}]),
    );
    let a = engine
        .start(slow.clone(), None, Arc::new(json!(1)))
        .await
        .unwrap();
    let b = engine
        .start(slow.clone(), None, Arc::new(json!(2)))
        .await
        .unwrap();
    let err = engine
        .start(slow.clone(), None, Arc::new(json!(3)))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the engine has 2 runs in progress, its limit: try again later"
    );
    a.wait().await;
    b.wait().await;
    assert!(engine.start(slow, None, Arc::new(json!(4))).await.is_ok());
}

#[tokio::test]
async fn a_run_cancelled_while_queued_ends_without_running() {
    let h = harness().await;
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "single",
        "settings": {"concurrency": 1}, "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 300}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "w"}, {"from": "w", "to": "end"}]}))
    .unwrap();
    let plan = Plan::new(wf).unwrap();
    let first = h
        .engine
        .start(plan.clone(), None, Arc::new(json!(1)))
        .await
        .unwrap();
    let queued = h
        .engine
        .start(plan, None, Arc::new(json!(2)))
        .await
        .unwrap();
    assert!(h.engine.cancel(&queued.id));
    let t0 = std::time::Instant::now();
    let r = queued.wait().await;
    assert_eq!(r.status, Status::Cancelled);
    assert_eq!(r.output, json!({}));
    ok(&first.wait().await, json!({"end": 1}));
    assert!(t0.elapsed() < std::time::Duration::from_millis(1000));
    let steps = h.engine.store().run_records(&r.id).await.unwrap();
    assert!(steps.is_empty(), "nothing ran: {steps:?}");
}

#[tokio::test]
async fn an_absurd_concurrency_is_a_validation_error() {
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "w",
        "settings": {"concurrency": 4611686018427387904u64}, "nodes": [{"id": "t", "kind": "trigger.manual"}]}))
    .unwrap();
    let err = Plan::new(wf).unwrap_err();
    assert_eq!(
        err.0[0].to_string(),
        "workflow settings.concurrency: must be a whole number from 1 to 100000"
    );
}

#[tokio::test]
async fn a_workflow_that_calls_itself_stops_at_the_depth_limit_and_starves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Few step permits: before the limit, waiting parents held them all.
    let options = Options {
        max_concurrent_steps: 4,
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await.unwrap();
    let h = Harness {
        _dir: dir,
        engine,
        for_result: false,
    };
    put(
        &h,
        json!({"format": "sluice.workflow/v1", "id": "rec", "nodes": [
            {"id": "by_hand", "kind": "trigger.manual"},
            {"id": "called", "kind": "trigger.workflow"},
            {"id": "again", "kind": "flow.subworkflow", "config": {"workflow": "rec"}},
            {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "by_hand", "to": "again"}, {"from": "called", "to": "again"},
                      {"from": "again", "to": "end"}]}),
    )
    .await;
    let rec = h.engine.workflow("rec").await.unwrap();
    let rec = h
        .engine
        .start(rec, Some("by_hand"), Arc::new(json!({})))
        .await
        .unwrap();
    // An unrelated run whose step needs a permit finishes meanwhile.
    let other = run_with(
        &h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "x", "kind": "data.transform", "config": {"jq": ".n + 1"}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "x"}, {"from": "x", "to": "end"}]),
        None,
        json!({"n": 1}),
    )
    .await;
    ok(&other, json!({"end": 2}));
    let rec = tokio::time::timeout(std::time::Duration::from_secs(30), rec.wait())
        .await
        .expect("the recursion ends");
    assert_eq!(rec.status, Status::Failed);
    let message = rec.error.as_ref().unwrap().message.as_str();
    assert!(
        message.contains("sub-workflow depth limit 16 reached: rec → rec"),
        "{message}"
    );
    // Exactly the top-level run and 16 nested ones exist.
    let filter = sluice_store::RunFilter {
        workflow: Some("rec".into()),
        limit: 100,
        ..Default::default()
    };
    let runs = h.engine.store().find_runs(&filter).await.unwrap();
    assert_eq!(runs.len(), 17);
}
