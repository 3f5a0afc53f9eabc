//! The trigger port as an attacker meets it: a real server on loopback, and
//! every attack that once worked (issue 16) or that held, so that they stay
//! held. An attack is a request, a workflow or a guest; none of them may
//! crash or stall the engine, read secrets or reach outside the data dir
//! and the allowed folders (DESIGN §8, docs/api.md "Security").
//!
//! Elsewhere, against the parts they attack:
//! - a guest blocked in WASI past its limit: engine/sandbox/tests/sandbox.rs;
//! - runaway jq (and its CPU check): engine/runtime/tests/jq.rs;
//! - 2,000 idle connections against a process with few descriptors:
//!   engine/cli/tests/serve.rs;
//! - file triggers outside `[files] allow`: engine/triggers/tests/triggers.rs;
//! - an allowed folder that contains the data dir: engine/nodes/src/settings.rs;
//! - replayed and altered webhook signatures: tests/api.rs `webhook_signatures`;
//! - the session as a header, never a cookie: tests/ui.rs.

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::doc::WorkflowDoc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use common::{Server, json_of, server, server_with};

fn hook_flow(id: &str, nodes: Value, edges: Value) -> Value {
    json!({"format": "sluice.workflow/v1", "id": id, "nodes": nodes, "edges": edges})
}

async fn healthy(s: &Server) {
    let r = s
        .api(Method::GET, "/health")
        .send()
        .await
        .expect("the server answers");
    assert_eq!(r.status(), StatusCode::OK);
}

/// An anonymous caller picks the depth of a jq recursion: the step fails,
/// the caller gets a generic 500, and the engine serves on. (The jq thread
/// overflowed its stack and aborted the process, at every restart again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_cannot_crash_the_engine_through_jq() {
    let s = server().await;
    s.put_workflow(hook_flow(
        "fact",
        json!([
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "n"}},
            {"id": "f", "kind": "data.transform", "config": {
                "jq": "def fact: if . <= 1 then 1 else . * (. - 1 | fact) end; .body.n | fact"}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "hook", "to": "f"}, {"from": "f", "to": "end"}]),
    ))
    .await;
    let r = s
        .hook(Method::POST, "fact/n")
        .json(&json!({"n": 10_000_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = r.text().await.unwrap();
    assert!(
        !body.contains("stack"),
        "the caller learns only that it failed: {body}"
    );
    healthy(&s).await;
    let r = s
        .hook(Method::POST, "fact/n")
        .json(&json!({"n": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json_of(r).await, json!({"end": 120}));
}

/// A workflow that calls itself stops at the depth limit; meanwhile, an
/// unrelated webhook is answered. (The recursion held every step permit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_calling_itself_stalls_nothing() {
    let s = server().await;
    s.put_workflow(hook_flow(
        "rec",
        json!([
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
            {"id": "called", "kind": "trigger.workflow"},
            {"id": "again", "kind": "flow.subworkflow", "config": {"workflow": "rec"}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "hook", "to": "again"}, {"from": "called", "to": "again"},
               {"from": "again", "to": "end"}]),
    ))
    .await;
    s.put_workflow(hook_flow(
        "other",
        json!([
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "x"}},
            {"id": "t", "kind": "data.transform", "config": {"jq": ".body.a * 2"}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "hook", "to": "t"}, {"from": "t", "to": "end"}]),
    ))
    .await;
    for _ in 0..4 {
        let r = s.hook(Method::POST, "rec/go").send().await.unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    let r = s
        .hook(Method::POST, "other/x")
        .json(&json!({"a": 21}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json_of(r).await, json!({"end": 42}));
    // Every recursion ends, failed at the limit.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let runs = json_of(
            s.api(Method::GET, "/runs?workflow=rec&status=running")
                .send()
                .await
                .unwrap(),
        )
        .await;
        if runs.as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(Instant::now() < deadline, "still running: {runs}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failed = json_of(
        s.api(Method::GET, "/runs?workflow=rec&status=failed&limit=200")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let messages: Vec<&str> = failed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["error"]["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("sub-workflow depth limit 16 reached")),
        "{messages:?}"
    );
}

/// A document update over the WebSocket for a workflow id that is a path:
/// refused, not listed, and nothing is stored under that id. (It was
/// acknowledged, listed and mirrored outside the workflows folder.)
#[tokio::test]
async fn a_document_id_cannot_be_a_path() {
    let s = server().await;
    let evil = "../../../../elsewhere/x";
    let doc = WorkflowDoc::new();
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": evil,
        "nodes": [{"id": "t", "kind": "trigger.manual"}], "edges": []}))
    .unwrap();
    doc.apply_as(&wf, None).unwrap();
    let update = doc.updates_since(&Default::default()).unwrap();
    let mut ws = s.ws("events=none").await;
    ws.send(Message::text(
        json!({"type": "doc.update", "workflow": evil,
               "update": base64::engine::general_purpose::STANDARD.encode(&update), "ref": 1})
        .to_string(),
    ))
    .await
    .unwrap();
    let answer = loop {
        let m = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("an answer")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["type"] != "presence" {
                break v;
            }
        }
    };
    assert_ne!(answer["type"], "doc.ack", "{answer}");
    assert!(
        answer.to_string().contains("is not a workflow id"),
        "{answer}"
    );
    let list = json_of(s.api(Method::GET, "/workflows").send().await.unwrap()).await;
    assert!(!list.to_string().contains("elsewhere"), "{list}");
    // The API refuses such ids too.
    let r = s
        .api(Method::GET, "/workflows/..%2F..%2Fx/versions")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
}

/// Callers' credentials never reach the journal: `Authorization`, `Cookie`
/// and friends are stored masked unless the trigger keeps them; the data
/// dir is the owner's alone.
#[tokio::test]
async fn webhook_credentials_are_masked_and_the_data_dir_is_private() {
    let s = server().await;
    let flow = |keep: Value| {
        hook_flow(
            "h",
            json!([
                {"id": "hook", "kind": "trigger.webhook", "config": {"path": "in", "keep_headers": keep}},
                {"id": "end", "kind": "output.end", "config": {"value": "{{ input.headers }}"}}]),
            json!([{"from": "hook", "to": "end"}]),
        )
    };
    s.put_workflow(flow(json!([]))).await;
    let send = || {
        s.hook(Method::POST, "h/in")
            .header("authorization", "Bearer caller-secret")
            .header("cookie", "sid=caller-cookie")
            .header("x-api-key", "caller-key")
            .header("x-trace", "visible")
            .json(&json!({}))
            .send()
    };
    let r = send().await.unwrap();
    let run_id = r.headers()["x-sluice-run"].to_str().unwrap().to_string();
    let out = json_of(r).await;
    let headers = &out["end"];
    assert_eq!(headers["authorization"], "***", "{out}");
    assert_eq!(headers["cookie"], "***");
    assert_eq!(headers["x-api-key"], "***");
    assert_eq!(headers["x-trace"], "visible");
    let run = json_of(
        s.api(Method::GET, &format!("/runs/{run_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(!run.to_string().contains("caller-secret"), "{run}");
    // Nothing in the data dir holds them (the answer came after the run's
    // finish was committed).
    for file in walk(s._dir.path()) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for secret in ["caller-secret", "caller-cookie", "caller-key"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} in {}",
                file.display()
            );
        }
    }
    // A trigger that needs one keeps it.
    s.put_workflow(flow(json!(["Authorization"]))).await;
    let out = json_of(send().await.unwrap()).await;
    assert_eq!(out["end"]["authorization"], "Bearer caller-secret");
    assert_eq!(out["end"]["cookie"], "***");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(s._dir.path()), 0o700);
        assert_eq!(mode(&s._dir.path().join("sluice.db")), 0o600);
        assert_eq!(mode(&s._dir.path().join("api-token")), 0o600);
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A step's error tells what exists on the machine (`file.read`: whether a
/// file exists, where a link points): the anonymous caller gets a generic
/// answer, the run keeps the error for the owner.
#[tokio::test]
async fn anonymous_callers_get_generic_errors() {
    let s = server().await;
    s.put_workflow(hook_flow(
        "peek",
        json!([
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "p"}},
            {"id": "read", "kind": "file.read", "config": {"path": "{{ input.body.path }}"}},
            {"id": "end", "kind": "output.end"}]),
        json!([{"from": "hook", "to": "read"}, {"from": "read", "to": "end"}]),
    ))
    .await;
    let r = s
        .hook(Method::POST, "peek/p")
        .json(&json!({"path": "/etc/hostname"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = r.text().await.unwrap();
    assert!(
        !body.contains("hostname") && !body.contains("allow"),
        "{body}"
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    let run_id = v["error"]["detail"]["run_id"].as_str().unwrap();
    let run = json_of(
        s.api(Method::GET, &format!("/runs/{run_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(
        run["error"]["message"]
            .as_str()
            .unwrap()
            .contains("file.read"),
        "{run}"
    );
}

/// A client that connects and sends nothing, or stops half way through its
/// headers, is closed at the header timeout; connections past the cap
/// close the oldest idle one, so a webhook is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_connections_are_closed_and_capped() {
    let s = server_with(|o| {
        o.header_read_timeout = Duration::from_millis(800);
        o.max_connections = 50;
    })
    .await;
    s.put_workflow(hook_flow(
        "ping",
        json!([
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "p"}},
            {"id": "end", "kind": "output.end", "config": {"value": "pong"}}]),
        json!([{"from": "hook", "to": "end"}]),
    ))
    .await;
    // Silent, and half a request.
    let mut silent = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut slow = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    slow.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let t = Instant::now();
    for conn in [&mut silent, &mut slow] {
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("closed by the server")
            .unwrap_or(0);
        assert_eq!(n, 0, "closed without an answer");
    }
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    // Far more idle connections than the cap: a webhook is still answered.
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(tokio::net::TcpStream::connect(s.addr).await.unwrap());
    }
    let t = Instant::now();
    let r = s.hook(Method::POST, "ping/p").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json_of(r).await, json!({"end": "pong"}));
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    drop(idle);
}

/// What held when tried (issue 16) stays held: the API needs the token,
/// foreign Hosts and Origins are refused, static files stay in their
/// folder, and file nodes stay in the allowed folders.
#[tokio::test]
async fn what_held_still_holds() {
    let allowed = tempfile::tempdir().unwrap();
    std::fs::write(allowed.path().join("ok.txt"), "fine").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("/etc/hostname", allowed.path().join("link")).unwrap();
    let s = server_with(|_| {}).await;
    // No token, a wrong one.
    let r = s
        .client
        .get(format!("{}/api/v1/workflows", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = s
        .client
        .get(format!("{}/api/v1/workflows", s.base))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A rebinding page (foreign Host), a cross-site page (foreign Origin).
    let r = s
        .api(Method::GET, "/workflows")
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = s
        .api(Method::DELETE, "/workflows/x")
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Static files: nothing outside the editor's folder.
    for path in ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"] {
        let r = s
            .client
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_ne!(r.status(), StatusCode::OK, "{path}");
    }
    // File nodes: nothing outside the allowed folders, by path or by link.
    let allow = [allowed.path().to_path_buf()];
    for given in ["../../../../etc/passwd", "/etc/passwd", "link"] {
        let e = sluice_nodes::files::resolve_read("file.read", &allow, given).unwrap_err();
        assert!(
            e.message.contains("outside the allowed folders"),
            "{given}: {}",
            e.message
        );
    }
    assert!(sluice_nodes::files::resolve_read("file.read", &allow, "ok.txt").is_ok());
}

/// Values nested deeply, from a caller or built by a workflow, never make a
/// run unreadable (every reader of JSON stops at 128 levels): a run's input
/// and every step's output are at most 100 levels deep. A deeper body is
/// refused at the door, and a step that builds a deeper value fails, naming
/// the limit, while its run stays readable.
#[tokio::test]
async fn deep_values_never_make_a_run_unreadable() {
    let s = server().await;
    s.put_workflow(hook_flow(
        "deep",
        json!([
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "in"}},
            {"id": "wrap", "kind": "data.set", "config": {
                "values": {"v": "{{ [[[[[[[[[[[[[[[[[[[[input.body]]]]]]]]]]]]]]]]]]]] }}"}}},
            {"id": "end", "kind": "output.end", "config": {"value": "{{ input }}"}}]),
        json!([{"from": "hook", "to": "wrap"}, {"from": "wrap", "to": "end"}]),
    ))
    .await;
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    for n in [100, 127, 5000] {
        let r = s
            .hook(Method::POST, "deep/in")
            .header("content-type", "application/json")
            .body(nested(n))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{n}");
        let text = r.text().await.unwrap();
        assert!(text.contains("nested"), "{n}: {text}");
    }
    // Within the limit, but deeper once wrapped: the step fails, and the
    // run, its input and its steps can all be read back.
    let r = s
        .hook(Method::POST, "deep/in")
        .header("content-type", "application/json")
        .body(nested(90))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let run_id = r.headers()["x-sluice-run"].to_str().unwrap().to_string();
    let run = json_of(
        s.api(Method::GET, &format!("/runs/{run_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(run["status"], "failed", "{run}");
    let text = run.to_string();
    assert!(text.contains("nested more than 100 levels"), "{text}");
    let r = s
        .hook(Method::POST, "deep/in")
        .header("content-type", "application/json")
        .body(nested(60))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
