//! The code kinds end to end.
//!
//! - `code.js`: a script as a node, its console in the run log, its errors
//!   naming the node and the line, a runaway script failing only its own
//!   step (handled through the error port while a sibling succeeds).
//! - `code.wasm`: the sample component (assets/examples/wasm-guest, built
//!   for wasm32-wasip2 once per test binary) stored with
//!   `Engine::add_module`, run as a node, its log in the run log, and bad
//!   modules refused with an error that names them; a component that
//!   loops, hogs memory, burns its fuel or traps fails only its own step,
//!   and one without the `log` capability logs nothing.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};

/// The sandbox's misbehaving test component (engine/sandbox/tests/guest):
/// loops, allocates, traps or logs on request.
fn misbehaving() -> &'static [u8] {
    static GUEST: OnceLock<Vec<u8>> = OnceLock::new();
    GUEST.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let manifest = root.join("engine/sandbox/tests/guest/Cargo.toml");
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-guest");
        sluice_sandbox::build_component(&manifest, &target, "sluice_test_guest").unwrap()
    })
}

fn sample() -> &'static [u8] {
    static SAMPLE: OnceLock<Vec<u8>> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let manifest = root.join("assets/examples/wasm-guest/Cargo.toml");
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-guest");
        sluice_sandbox::build_component(&manifest, &target, "order_total").unwrap()
    })
}

/// Options sharing one compile cache across the tests (the JavaScript
/// runtime is pre-initialized and compiled once, not per data dir).
fn options() -> Options {
    Options {
        wasm_cache: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache")),
        ..Options::default()
    }
}

fn plan(nodes: Value, edges: Value) -> Arc<Plan> {
    Plan::new(
        Workflow::from_value(json!({
            "format": "sluice.workflow/v1", "id": "js", "nodes": nodes, "edges": edges
        }))
        .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_script_runs_as_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), options()).await.unwrap();
    let source = "console.log(`pricing ${input.items.length} items`);\n\
                  const total = input.items.reduce((s, i) => s + i.price * (i.qty ?? 1), 0);\n\
                  return { total, currency: 'EUR' };";
    let flow = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "price", "kind": "code.js", "config": {"source": source}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "t", "to": "price"}, {"from": "price", "to": "end"}]),
    );
    let order = json!({"items": [{"price": 2.5, "qty": 2}, {"price": 10.0}]});
    let run = engine.start(flow, None, Arc::new(order)).await.unwrap();
    let id = run.id.clone();
    let result = run.wait().await;
    assert_eq!(result.status, Status::Succeeded, "{:?}", result.error);
    assert_eq!(
        result.output,
        json!({"end": {"total": 15, "currency": "EUR"}})
    );
    let logs = engine.store().run_logs(&id).await.unwrap();
    assert!(
        logs.iter()
            .any(|l| l.node == "price" && l.message == "pricing 2 items"),
        "{logs:?}"
    );

    // `config.input` is a template; `{{ }}` in the source is not.
    let flow = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "c", "kind": "code.js", "config": {
                "source": "return [input, '{{ input }}']", "input": "{{ input.name }}!"}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "t", "to": "c"}, {"from": "c", "to": "end"}]),
    );
    let result = engine
        .start(flow, None, Arc::new(json!({"name": "ada"})))
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(result.output, json!({"end": ["ada!", "{{ input }}"]}));
}

#[tokio::test]
async fn a_script_with_ports_sends_on_the_ports_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), options()).await.unwrap();
    let source = "const ok = input.filter(n => n > 0);\n\
                  const bad = input.filter(n => n <= 0);\n\
                  return { valid: ok.length ? ok : null, invalid: bad.length ? bad : undefined };";
    let flow = |source: &str| {
        plan(
            json!([
                {"id": "t", "kind": "trigger.manual"},
                {"id": "sort", "kind": "code.js", "config": {"source": source, "ports": ["valid", "invalid"]}},
                {"id": "good", "kind": "output.end"},
                {"id": "bad", "kind": "output.end"},
                {"id": "after_bad", "kind": "util.log", "config": {"message": "bad ones"}},
                {"id": "logged", "kind": "output.end"}]),
            json!([{"from": "t", "to": "sort"}, {"from": "sort:valid", "to": "good"},
                   {"from": "sort:invalid", "to": "bad"}, {"from": "sort:invalid", "to": "after_bad"},
                   {"from": "after_bad", "to": "logged"}]),
        )
    };
    let run = |input: Value, source: &'static str| {
        let engine = &engine;
        async move {
            engine
                .start(flow(source), None, Arc::new(input))
                .await
                .unwrap()
                .wait()
                .await
        }
    };
    let both = run(json!([3, -1, 5]), source).await;
    assert_eq!(both.status, Status::Succeeded, "{:?}", both.error);
    assert_eq!(
        both.output,
        json!({"good": [3, 5], "bad": [-1], "logged": [-1]})
    );
    // A port left out (or null) sends nothing: what follows it is skipped.
    let one = run(json!([3, 5]), source).await;
    assert_eq!(one.output, json!({"good": [3, 5]}));
    // Not an object, or a port the node does not have: the step fails.
    let wrong = run(json!([1]), "return [1];").await;
    assert_eq!(wrong.status, Status::Failed);
    assert!(
        wrong
            .error
            .unwrap()
            .message
            .contains("return an object with a message per port"),
    );
    let unknown = run(json!([1]), "return { valid: 1, maybe: 2 };").await;
    assert!(
        unknown
            .error
            .unwrap()
            .message
            .contains("port `maybe`, which is not one of its ports (valid, invalid)")
    );
    // An edge from a port the node does not declare is refused up front.
    let bad = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "js", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "sort", "kind": "code.js", "config": {"source": "return {}", "ports": ["a"]}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "sort"}, {"from": "sort", "to": "end"}]}),
    )
    .unwrap();
    let err = Plan::new(bad).unwrap_err();
    assert!(
        format!("{err:?}").contains("has no output port `out`"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_failing_script_fails_only_its_step() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), options()).await.unwrap();
    // A thrown error names the node, the message and the line.
    let flow = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "check", "kind": "code.js", "config": {
                "source": "if (input.qty < 0) {\n  throw new RangeError(`bad qty ${input.qty}`)\n}\nreturn input"}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "t", "to": "check"}, {"from": "check", "to": "end"}]),
    );
    let result = engine
        .start(flow, None, Arc::new(json!({"qty": -1})))
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(result.status, Status::Failed);
    let error = result.error.unwrap();
    assert_eq!(error.node.as_deref(), Some("check"));
    let message = error.message.as_str();
    assert!(
        message.contains("RangeError: bad qty -1 (at line 2, column"),
        "{message}"
    );

    // A runaway script and a crash each fail their own step (handled
    // through the error port); a sibling branch runs to the end.
    let flow = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "spin", "kind": "code.js", "on_error": "route",
             "config": {"source": "while (true) {}", "timeout_ms": 300}},
            {"id": "hog", "kind": "code.js", "on_error": "route",
             "config": {"source": "const a = []; for (;;) a.push(new Uint8Array(1 << 20))", "memory_mb": 8}},
            {"id": "deep", "kind": "code.js", "on_error": "route",
             "config": {"source": "let a = []; for (let i = 0; i < 200000; i++) a = [a]; return a"}},
            {"id": "fine", "kind": "code.js", "config": {"source": "return input * 2"}},
            {"id": "spun", "kind": "output.end"},
            {"id": "hogged", "kind": "output.end"},
            {"id": "crashed", "kind": "output.end"},
            {"id": "end", "kind": "output.end"}]),
        json!([
            {"from": "t", "to": "spin"}, {"from": "spin:error", "to": "spun"},
            {"from": "t", "to": "hog"}, {"from": "hog:error", "to": "hogged"},
            {"from": "t", "to": "deep"}, {"from": "deep:error", "to": "crashed"},
            {"from": "t", "to": "fine"}, {"from": "fine", "to": "end"}]),
    );
    let result = engine
        .start(flow, None, Arc::new(json!(21)))
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(result.status, Status::Succeeded, "{:?}", result.error);
    assert_eq!(result.output["end"], json!(42));
    let message = |node: &str| {
        result.output[node]["error"]["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        message("spun").contains("time limit of 300 ms"),
        "{}",
        message("spun")
    );
    assert!(
        message("hogged").contains("memory limit of 8 MiB"),
        "{}",
        message("hogged")
    );
    assert!(
        message("crashed").contains("nested too deeply"),
        "{}",
        message("crashed")
    );

    // Bad limits are refused before anything runs.
    let invalid = Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": "x", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "c", "kind": "code.js", "config": {"source": "return 1", "timeout_ms": 0}}],
        "edges": [{"from": "t", "to": "c"}]
    }))
    .unwrap();
    let problems = Plan::new(invalid).unwrap_err().to_string();
    assert!(problems.contains("timeout_ms"), "{problems}");
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
    let engine = Engine::open(dir.path(), options()).await.unwrap();
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
    let engine = Engine::open(dir.path(), options()).await.unwrap();
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

#[tokio::test]
async fn a_misbehaving_component_fails_only_its_own_step() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), options()).await.unwrap();
    let bad = engine.add_module(misbehaving().to_vec()).await.unwrap();
    let good = engine.add_module(sample().to_vec()).await.unwrap();
    let node = |id: &str, config: Value| {
        let mut config = config;
        config["module"] = json!(bad);
        json!({"id": id, "kind": "code.wasm", "on_error": "route", "config": config})
    };
    let flow = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            node("spin", json!({"input": {"do": "loop"}, "timeout_ms": 300})),
            node("hog", json!({"input": {"do": "alloc"}, "memory_mb": 16})),
            node("burn", json!({"input": {"do": "loop"}, "fuel": 1_000_000})),
            node("crash", json!({"input": {"do": "trap"}})),
            node("quiet", json!({"input": {"do": "log"}, "log": false})),
            {"id": "total", "kind": "code.wasm", "config": {"module": good}},
            {"id": "spun", "kind": "output.end"},
            {"id": "hogged", "kind": "output.end"},
            {"id": "burnt", "kind": "output.end"},
            {"id": "crashed", "kind": "output.end"},
            {"id": "end", "kind": "output.end"}]),
        json!([
            {"from": "t", "to": "spin"}, {"from": "spin:error", "to": "spun"},
            {"from": "t", "to": "hog"}, {"from": "hog:error", "to": "hogged"},
            {"from": "t", "to": "burn"}, {"from": "burn:error", "to": "burnt"},
            {"from": "t", "to": "crash"}, {"from": "crash:error", "to": "crashed"},
            {"from": "t", "to": "quiet"},
            {"from": "t", "to": "total"}, {"from": "total", "to": "end"}]),
    );
    let order = json!({"items": [{"sku": "a", "price": 4.0, "qty": 3}]});
    let run = engine.start(flow, None, Arc::new(order)).await.unwrap();
    let id = run.id.clone();
    let result = run.wait().await;
    assert_eq!(result.status, Status::Succeeded, "{:?}", result.error);
    assert_eq!(result.output["end"]["total"], json!(12.0));
    let message = |node: &str| {
        result.output[node]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    for (node, expected) in [
        ("spun", "stopped at the time limit of 300 ms"),
        ("hogged", "stopped at the memory limit of 16 MiB"),
        ("burnt", "stopped at the fuel limit of 1000000 units"),
        ("crashed", "the guest crashed: "),
    ] {
        assert!(
            message(node).contains(expected),
            "{node}: {:?}",
            result.output[node]
        );
    }
    let logs = engine.store().run_logs(&id).await.unwrap();
    let quiet: Vec<&str> = logs
        .iter()
        .filter(|l| l.node == "quiet")
        .map(|l| l.message.as_str())
        .collect();
    // Without the log capability its `log` calls are gone; its stdout is
    // not a capability and is kept.
    assert!(!quiet.contains(&"hello from the guest"), "{quiet:?}");
    assert!(quiet.contains(&"to stdout"), "{quiet:?}");
}

#[tokio::test]
async fn the_javascript_runtime_is_prepared_once_a_workflow_has_a_script() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), options()).await.unwrap();
    let e = engine.clone();
    let waiting = tokio::spawn(async move { e.prepare_code_when_used().await });
    // Workflows without an enabled script: nothing is prepared.
    let plain = Plan::new(
        Workflow::from_value(json!({
            "format": "sluice.workflow/v1", "id": "plain", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "off", "kind": "code.js", "disabled": true, "config": {"source": "return 1"}},
                {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "t", "to": "end"}]
        }))
        .unwrap(),
    )
    .unwrap();
    engine.save_workflow(&plain).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "prepared with no script in sight");
    // A workflow gets a script: prepared.
    let scripted = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "double", "kind": "code.js", "config": {"source": "return input * 2"}}]),
        json!([{"from": "t", "to": "double"}]),
    );
    engine.save_workflow(&scripted).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(120), waiting)
        .await
        .expect("prepared once a script was stored")
        .unwrap()
        .unwrap();
    // At a later start, a stored script is seen at once.
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        engine.prepare_code_when_used(),
    )
    .await
    .expect("a stored script is found at start")
    .unwrap();
}
