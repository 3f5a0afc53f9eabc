//! `code.wasm` end to end: the sample component (assets/examples/wasm-guest,
//! built for wasm32-wasip2 once per test binary) stored with
//! `Engine::add_module`, run as a node, its log in the run log, and bad
//! modules refused with an error that names them.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};

fn sample() -> &'static [u8] {
    static SAMPLE: OnceLock<Vec<u8>> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let manifest = root.join("assets/examples/wasm-guest/Cargo.toml");
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-guest");
        sluice_sandbox::build_component(&manifest, &target, "order_total").unwrap()
    })
}

fn flow(module: &str) -> Arc<Plan> {
    Plan::new(
        Workflow::from_value(json!({
            "format": "sluice.workflow/v1", "id": "orders", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "total", "kind": "code.wasm", "config": {"module": module, "timeout_ms": 2000}},
                {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "t", "to": "total"}, {"from": "total", "to": "end"}]
        }))
        .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_component_runs_as_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let module = engine.add_module(sample().to_vec()).await.unwrap();
    assert_eq!(module.len(), 64);
    // The same bytes, the same hash (stored once).
    assert_eq!(engine.add_module(sample().to_vec()).await.unwrap(), module);

    let order =
        json!({"items": [{"sku": "a", "price": 2.5, "qty": 2}, {"sku": "b", "price": 10.0}]});
    let run = engine
        .start(flow(&module), None, Arc::new(order))
        .await
        .unwrap();
    let id = run.id.clone();
    let result = run.wait().await;
    assert_eq!(result.status, Status::Succeeded, "{:?}", result.error);
    assert_eq!(
        result.output,
        json!({"end": {"total": 15.0, "count": 3, "currency": "EUR"}})
    );
    let logs = engine.store().run_logs(&id).await.unwrap();
    assert!(
        logs.iter()
            .any(|l| l.node == "total" && l.message == "3 item(s), total 15"),
        "{logs:?}"
    );

    // The component's own error fails the step with its message.
    let bad = json!({"items": [{"sku": "z", "price": -1.0}]});
    let run = engine
        .start(flow(&module), None, Arc::new(bad))
        .await
        .unwrap();
    let result = run.wait().await;
    assert_eq!(result.status, Status::Failed);
    let error = result.error.unwrap().to_string();
    assert!(error.contains("item z has a negative price"), "{error}");
}

#[tokio::test]
async fn missing_and_invalid_modules_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let err = engine
        .add_module(b"\0asm garbage".to_vec())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not a valid WebAssembly component"),
        "{err}"
    );

    let missing = "ab".repeat(32);
    let run = engine
        .start(flow(&missing), None, Arc::new(Value::Null))
        .await
        .unwrap();
    let result = run.wait().await;
    assert_eq!(result.status, Status::Failed);
    let error = result.error.unwrap().to_string();
    assert!(
        error.contains(&missing) && error.contains("sluice modules add"),
        "{error}"
    );

    // Config problems are caught before anything runs.
    let invalid = Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": "x", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "c", "kind": "code.wasm", "config": {"module": "nope", "memory_mb": 4096}}],
        "edges": [{"from": "t", "to": "c"}]
    }))
    .unwrap();
    let problems = Plan::new(invalid).unwrap_err().to_string();
    assert!(problems.contains("module"), "{problems}");
}
