//! The trigger port over real HTTP: a server on 127.0.0.1:0, a real client.

use std::time::Duration;

use hmac::{KeyInit, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};

use sluice_runtime::{Engine, Options};

mod common;
use common::{json_of, server, server_with};

fn webhook_flow(respond: &str, with_respond: bool) -> Value {
    let mut nodes = vec![
        json!({"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": respond}}),
        json!({"id": "check", "kind": "flow.if", "config": {"condition": "{{ input.body.total > 100 }}"}}),
        json!({"id": "gold", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}}),
        json!({"id": "boom", "kind": "data.transform", "config": {"jq": "error(\"too small\")"}}),
    ];
    let mut edges = vec![
        json!({"from": "hook", "to": "check"}),
        json!({"from": "check:true", "to": "gold"}),
        json!({"from": "check:false", "to": "boom"}),
    ];
    if with_respond {
        nodes.push(json!({"id": "reply", "kind": "output.respond", "config": {
            "status": 201, "headers": {"x-tier": "{{ input.tier }}"}, "body": "{{ input }}"}}));
        edges.push(json!({"from": "gold", "to": "reply"}));
    } else {
        nodes.push(json!({"id": "done", "kind": "output.end"}));
        edges.push(json!({"from": "gold", "to": "done"}));
    }
    json!({"format": "sluice.workflow/v1", "id": "orders", "nodes": nodes, "edges": edges})
}

#[tokio::test]
async fn the_api_needs_the_token() {
    let s = server().await;
    let r = s
        .client
        .get(format!("{}/api/v1/health", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = s
        .client
        .get(format!("{}/api/v1/health", s.base))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(json_of(r).await["error"]["message"], "wrong API token");
    let r = s.api(reqwest::Method::GET, "/health").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json_of(r).await["status"], "ok");
}

#[tokio::test]
async fn foreign_host_and_origin_are_refused() {
    let s = server().await;
    let r = s
        .api(reqwest::Method::GET, "/health")
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = s
        .api(reqwest::Method::GET, "/health")
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let own = format!("http://{}", s.addr);
    let r = s
        .api(reqwest::Method::GET, "/health")
        .header("Origin", own)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = s
        .api(reqwest::Method::GET, "/health")
        .header("Host", format!("localhost:{}", s.addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn workflows_crud_and_validation() {
    let s = server().await;
    let wf = webhook_flow("when_finished", false);
    let r = s
        .api(reqwest::Method::PUT, "/workflows/orders")
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = s
        .api(reqwest::Method::PUT, "/workflows/orders")
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let got = json_of(
        s.api(reqwest::Method::GET, "/workflows/orders")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(got["nodes"].as_array().unwrap().len(), 5);
    let list = json_of(
        s.api(reqwest::Method::GET, "/workflows")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(list[0]["id"], "orders");

    let mut bad = wf.clone();
    bad["nodes"][1]["kind"] = json!("flow.iff");
    let r = s
        .api(reqwest::Method::PUT, "/workflows/orders")
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let err = json_of(r).await;
    assert_eq!(err["error"]["detail"][0]["node"], "check");
    assert_eq!(err["error"]["detail"][0]["field"], "kind");

    let r = s
        .api(reqwest::Method::PUT, "/workflows/other")
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .api(reqwest::Method::PUT, "/workflows/orders")
        .header("content-type", "application/json")
        .body("{\"format\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        json_of(r).await["error"]["message"],
        "invalid JSON body at line 1, column 11: EOF while parsing a value"
    );

    let r = s
        .api(reqwest::Method::DELETE, "/workflows/orders")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = s
        .api(reqwest::Method::GET, "/workflows/orders")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn runs_through_the_api() {
    let s = server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "double", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "d", "kind": "data.set", "config": {"values": {"n": "{{ input.n * 2 }}"}}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "d"}, {"from": "d", "to": "end"}]}),
    )
    .await;
    let r = s
        .api(reqwest::Method::POST, "/workflows/double/runs")
        .json(&json!({"input": {"n": 21}, "wait": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let run = json_of(r).await;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["output"], json!({"end": {"n": 42}}));
    let id = run["id"].as_str().unwrap();
    let full = json_of(
        s.api(reqwest::Method::GET, &format!("/runs/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let steps = full["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[1]["node"], "d");
    assert_eq!(steps[1]["input"], json!({"n": 21}));
    assert_eq!(steps[1]["output"], json!({"out": {"n": 42}}));
    let list = json_of(
        s.api(reqwest::Method::GET, "/runs?limit=5")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(list[0]["id"], id);

    let r = s
        .api(reqwest::Method::POST, "/workflows/double/runs")
        .json(&json!({"input": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let r = s
        .api(reqwest::Method::POST, "/workflows/nope/runs")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = s
        .api(reqwest::Method::POST, "/workflows/double/runs")
        .json(&json!({"inptu": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        json_of(r).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `inptu`")
    );
}

#[tokio::test]
async fn cancel_through_the_api() {
    let s = server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "slow", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 60000}}],
        "edges": [{"from": "t", "to": "w"}]}),
    )
    .await;
    let run = json_of(
        s.api(reqwest::Method::POST, "/workflows/slow/runs")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = run["id"].as_str().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = s
        .api(reqwest::Method::POST, &format!("/runs/{id}/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let mut status = Value::Null;
    for _ in 0..100 {
        status = json_of(
            s.api(reqwest::Method::GET, &format!("/runs/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await["status"]
            .clone();
        if status != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, "cancelled");
    let r = s
        .api(reqwest::Method::POST, &format!("/runs/{id}/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn webhook_when_finished_uses_the_first_respond() {
    let s = server().await;
    s.put_workflow(webhook_flow("when_finished", true)).await;
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .json(&json!({"id": "a1", "total": 250}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["x-tier"], "gold");
    assert!(r.headers().contains_key("x-sluice-run"));
    assert_eq!(json_of(r).await, json!({"id": "a1", "tier": "gold"}));
    // A failing run: 500 with the run's id, and not its error (the caller
    // may be anyone); the run holds the error, naming the node.
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .json(&json!({"id": "a2", "total": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let err = json_of(r).await;
    let run_id = err["error"]["detail"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(err["error"]["message"], format!("run {run_id} failed"));
    let run = json_of(
        s.api(reqwest::Method::GET, &format!("/runs/{run_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(run["error"]["node"], "boom", "{run}");
}

#[tokio::test]
async fn webhook_without_respond_returns_the_run_output() {
    let s = server().await;
    s.put_workflow(webhook_flow("when_finished", false)).await;
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .json(&json!({"id": "a1", "total": 250}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        json_of(r).await,
        json!({"done": {"id": "a1", "tier": "gold"}})
    );
    // Wrong method or path: 404.
    let r = s
        .hook(reqwest::Method::GET, "orders/orders")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = s
        .hook(reqwest::Method::POST, "orders/elsewhere")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // Invalid JSON: 400 naming the problem.
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .header("content-type", "application/json")
        .body("{\"id\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        json_of(r).await["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid JSON body at line 1, column 7")
    );
}

#[tokio::test]
async fn webhook_immediately_answers_202_and_the_run_completes() {
    let s = server().await;
    s.put_workflow(webhook_flow("immediately", false)).await;
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .json(&json!({"id": "a9", "total": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let id = json_of(r).await["run_id"].as_str().unwrap().to_string();
    let mut run = Value::Null;
    for _ in 0..100 {
        run = json_of(
            s.api(reqwest::Method::GET, &format!("/runs/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        if run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["output"], json!({"done": {"id": "a9", "tier": "gold"}}));
    // The message: method, path, query, headers, body; nothing else.
    let trigger = &run["steps"][0]["input"];
    let keys: Vec<&str> = trigger
        .as_object()
        .expect("the message is an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["method", "path", "query", "headers", "body"]);
    assert_eq!(trigger["query"], json!({}));
    assert_eq!(trigger["method"], "POST");
    assert_eq!(trigger["path"], "orders");
    assert_eq!(trigger["body"], json!({"id": "a9", "total": 500}));
    assert_eq!(trigger["headers"]["content-type"], "application/json");
}

#[tokio::test]
async fn webhook_bodies_by_content_type() {
    let s = server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "echo", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "in"}},
        {"id": "out", "kind": "output.end", "config": {"value": {"body": "{{ input.body }}", "query": "{{ input.query }}"}}}],
        "edges": [{"from": "hook", "to": "out"}]}))
    .await;
    let r = s
        .hook(reqwest::Method::POST, "echo/in?x=1")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a=1&b=two+words")
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        json!({"out": {"body": {"a": "1", "b": "two words"}, "query": {"x": "1"}}})
    );
    let r = s
        .hook(reqwest::Method::POST, "echo/in")
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(r).await["out"]["body"], "hello");
    let r = s
        .hook(reqwest::Method::POST, "echo/in")
        .header("content-type", "application/octet-stream")
        .body(vec![0u8, 159, 146, 150])
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await["out"]["body"],
        json!({"base64": "AJ+Slg=="})
    );
}

#[tokio::test]
async fn webhook_signatures() {
    let s = server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "signed", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "in", "secret": "s3cret"}},
        {"id": "out", "kind": "output.end", "config": {"value": "{{ input.body }}"}}],
        "edges": [{"from": "hook", "to": "out"}]}),
    )
    .await;
    let body = br#"{"ok": true}"#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sign = |t: u64, query: &str| {
        let signed = sluice_server::hook::Signed {
            method: "POST",
            path: "/hook/signed/in",
            query,
            content_type: b"application/json",
            body,
        };
        format!(
            "t={t},v1={}",
            sluice_server::hook::sign_v1("s3cret", t, &signed)
        )
    };
    let send = |sig: Option<String>, query: &'static str| {
        let url = if query.is_empty() {
            "signed/in".to_string()
        } else {
            format!("signed/in?{query}")
        };
        let mut req = s
            .hook(reqwest::Method::POST, &url)
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(sig) = sig {
            req = req.header("x-sluice-signature", sig);
        }
        req.send()
    };
    let r = send(Some(sign(now, "")), "").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(json_of(r).await, json!({"out": {"ok": true}}));
    // The same signed request again: a replay.
    let r = send(Some(sign(now, "")), "").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.text().await.unwrap().contains("used already"));
    // A query added to a signed request, a stale timestamp, a bad MAC, none.
    let r = send(Some(sign(now - 1, "")), "admin=1").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = send(Some(sign(now - 3600, "")), "").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.text().await.unwrap().contains("5 minutes"));
    let r = send(Some(format!("t={now},v1={}", "00".repeat(32))), "")
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = send(None, "").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // The signed query is accepted.
    let r = send(Some(sign(now - 2, "a=1")), "a=1").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The old form only where the trigger asks for it (documented weaker).
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(body);
    let v0 = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let r = send(Some(v0.clone()), "").await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "signed", "nodes": [
        {"id": "hook", "kind": "trigger.webhook",
         "config": {"path": "in", "secret": "s3cret", "signature": "v0"}},
        {"id": "out", "kind": "output.end", "config": {"value": "{{ input.body }}"}}],
        "edges": [{"from": "hook", "to": "out"}]}),
    )
    .await;
    let r = send(Some(v0), "").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let s = server_with(|o| o.body_limit = 1024).await;
    s.put_workflow(webhook_flow("when_finished", false)).await;
    let big = json!({"id": "x".repeat(4096), "total": 1});
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn logs_and_retry_through_the_api() {
    let s = server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "logged", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "say", "kind": "util.log", "config": {"message": "hello {{ input.who }}", "level": "warn"}},
        {"id": "check", "kind": "data.transform", "config": {"jq": "if .ok then . else error(\"not ok\") end"}}],
        "edges": [{"from": "t", "to": "say"}, {"from": "say", "to": "check"}]}))
    .await;
    let run = json_of(
        s.api(reqwest::Method::POST, "/workflows/logged/runs")
            .json(&json!({"input": {"who": "Ada", "ok": false}, "wait": true}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(run["status"], "failed");
    let id = run["id"].as_str().unwrap();
    let logs = json_of(
        s.api(reqwest::Method::GET, &format!("/runs/{id}/logs"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(logs[0]["node"], "say");
    assert_eq!(logs[0]["level"], "warn");
    assert_eq!(logs[0]["message"], "hello Ada");
    for from in ["failed", "start"] {
        let r = s
            .api(reqwest::Method::POST, &format!("/runs/{id}/retry"))
            .json(&json!({"from": from}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        let retry = json_of(r).await;
        assert_eq!(retry["retry_of"], id);
        assert_ne!(retry["id"], id);
    }
    let r = s
        .api(reqwest::Method::GET, "/runs/r-nope/logs")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_full_engine_answers_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(
        dir.path(),
        Options {
            max_active_runs: 1,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let token = sluice_server::ensure_token(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let t = token.clone();
    tokio::spawn(async move {
        sluice_server::serve(
            listener,
            engine,
            &t,
            sluice_server::Options::new(addr),
            std::future::pending(),
        )
        .await
        .unwrap();
    });
    sluice_nodes::http::install_crypto_provider();
    let c = reqwest::Client::new();
    let wf = json!({"format": "sluice.workflow/v1", "id": "busy", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 300}}],
        "edges": [{"from": "hook", "to": "w"}]});
    c.put(format!("http://{addr}/api/v1/workflows/busy?publish=true"))
        .bearer_auth(&token)
        .json(&wf)
        .send()
        .await
        .unwrap();
    let r = c
        .post(format!("http://{addr}/hook/busy/go"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let r = c
        .post(format!("http://{addr}/hook/busy/go"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "1");
}

#[tokio::test]
async fn metrics_in_prometheus_format() {
    let s = server().await;
    s.put_workflow(webhook_flow("when_finished", false)).await;
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .json(&json!({"id": "a", "total": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = s
        .client
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = s
        .client
        .get(format!("{}/metrics", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = r.text().await.unwrap();
    assert!(
        text.contains("sluice_runs_total{workflow=\"orders\",status=\"succeeded\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("sluice_step_duration_seconds_count{kind=\"data.set\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("sluice_runs_active 0\n"), "{text}");
    assert!(text.contains("# TYPE sluice_runs_queued gauge\n"), "{text}");
}

#[tokio::test]
async fn live_events_over_the_websocket_in_order() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let s = server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "live", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "say", "kind": "util.log", "config": {"message": "hi"}},
        {"id": "no", "kind": "flow.if", "config": {"condition": "{{ false }}"}},
        {"id": "never", "kind": "output.end"},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "say"}, {"from": "say", "to": "end"}, {"from": "t", "to": "no"},
                  {"from": "no:true", "to": "never"}]}))
    .await;
    let url = format!("ws://{}/api/v1/ws?workflow=live", s.addr);
    // Without the token: refused before the upgrade.
    let err = tokio_tungstenite::connect_async(url.clone())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("401"), "{err}");

    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", s.token).parse().unwrap(),
    );
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    // Another workflow's events are filtered out.
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "other", "nodes": [
        {"id": "t", "kind": "trigger.manual"}], "edges": []}),
    )
    .await;
    s.api(reqwest::Method::POST, "/workflows/other/runs")
        .json(&json!({"wait": true}))
        .send()
        .await
        .unwrap();
    let run = json_of(
        s.api(reqwest::Method::POST, "/workflows/live/runs")
            .json(&json!({"wait": true}))
            .send()
            .await
            .unwrap(),
    )
    .await;

    let mut seen = Vec::new();
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .unwrap()
    {
        let v: Value = serde_json::from_str(msg.unwrap().to_text().unwrap()).unwrap();
        assert_eq!(v["workflow"], "live");
        assert_eq!(v["run"], run["id"]);
        let label = match v["node"].as_str() {
            Some(node) => format!("{} {node}", v["type"].as_str().unwrap()),
            None => v["type"].as_str().unwrap().to_string(),
        };
        let done = v["type"] == "run_finished";
        seen.push(label);
        if done {
            break;
        }
    }
    let pos = |l: &str| {
        seen.iter()
            .position(|x| x == l)
            .unwrap_or_else(|| panic!("no `{l}` in {seen:?}"))
    };
    assert_eq!(seen[0], "run_started");
    assert!(pos("step_started t") < pos("step_finished t"));
    assert!(pos("step_finished t") < pos("step_started say"));
    assert!(pos("step_started say") < pos("log say"));
    assert!(pos("log say") < pos("step_finished say"));
    assert!(pos("step_finished no") < pos("step_skipped never"));
    assert_eq!(seen.last().unwrap(), "run_finished");
}

async fn get_at(s: &common::Server, path: &str) -> Value {
    json_of(s.api(reqwest::Method::GET, path).send().await.unwrap()).await
}

#[tokio::test]
async fn runs_can_be_filtered_and_paged() {
    let s = server().await;
    for id in ["a", "b"] {
        s.put_workflow(json!({"format": "sluice.workflow/v1", "id": id, "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "c", "kind": "data.transform", "config": {"jq": "if . then . else error(\"no\") end"}}],
            "edges": [{"from": "t", "to": "c"}]}))
        .await;
    }
    for (wf, input) in [
        ("a", true),
        ("a", false),
        ("b", true),
        ("a", true),
        ("a", true),
    ] {
        s.api(reqwest::Method::POST, &format!("/workflows/{wf}/runs"))
            .json(&json!({"input": input, "wait": true}))
            .send()
            .await
            .unwrap();
    }
    let get = |q: &'static str| {
        let req = s.api(reqwest::Method::GET, &format!("/runs?{q}"));
        async move { json_of(req.send().await.unwrap()).await }
    };
    let a = get("workflow=a").await;
    assert_eq!(a.as_array().unwrap().len(), 4);
    let failed = get("workflow=a&status=failed").await;
    assert_eq!(failed.as_array().unwrap().len(), 1);
    // Pages of two, newest first, with no overlap and nothing lost.
    let page1 = get("workflow=a&limit=2").await;
    let cursor = page1[1]["id"].as_str().unwrap().to_string();
    let page2 = json_of(
        s.api(
            reqwest::Method::GET,
            &format!("/runs?workflow=a&limit=2&before={cursor}"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    let ids: Vec<&str> = page1
        .as_array()
        .unwrap()
        .iter()
        .chain(page2.as_array().unwrap())
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let all: Vec<&str> = a
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, all);
    let r = s
        .api(reqwest::Method::GET, "/runs?status=weird")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .api(reqwest::Method::GET, "/runs?limit=lots")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        json_of(r).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit")
    );

    // The workflow list names each one's newest run (and none for one
    // that never ran).
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "c", "nodes": [
        {"id": "t", "kind": "trigger.manual"}], "edges": []}))
        .await;
    s.api(reqwest::Method::POST, "/workflows/a/runs")
        .json(&json!({"input": false, "wait": true}))
        .send()
        .await
        .unwrap();
    let newest_a = get("workflow=a&limit=1").await;
    let list = json_of(
        s.api(reqwest::Method::GET, "/workflows")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let entry = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|w| w["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(entry("a")["last_run"]["id"], newest_a[0]["id"]);
    assert_eq!(entry("a")["last_run"]["status"], "failed");
    assert!(
        entry("a")["last_run"]["finished_at_us"].as_i64().unwrap()
            >= entry("a")["last_run"]["created_at_us"].as_i64().unwrap()
    );
    assert_eq!(entry("b")["last_run"]["status"], "succeeded");
    assert!(entry("c").get("last_run").is_none(), "{list}");
    assert!(
        entry("c").get("editing").is_none(),
        "nobody edits it: {list}"
    );

    // Filters by trigger, version, time and text.
    let n = |v: &Value| v.as_array().unwrap().len();
    assert_eq!(
        n(&get("text=TRUE&workflow=a").await),
        3,
        "input or output holds `true`"
    );
    assert_eq!(n(&get("text=nowhere").await), 0);
    assert_eq!(n(&get("trigger=t").await), 6);
    assert_eq!(n(&get("trigger=other").await), 0);
    assert_eq!(n(&get("draft=false").await), 6);
    assert_eq!(n(&get("draft=true").await), 0);
    let later = newest_a[0]["created_at_us"].as_i64().unwrap() + 1;
    assert_eq!(n(&get_at(&s, &format!("/runs?since_us={later}")).await), 0);
    assert_eq!(
        n(&get_at(&s, &format!("/runs?since_us={}", later - 1)).await),
        1
    );
}

#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let s = server().await;
    let r = s
        .client
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let doc = json_of(r).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(
        doc["components"]["securitySchemes"]["token"]["scheme"],
        "bearer"
    );
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 12, "{:?}", paths.keys().collect::<Vec<_>>());
    // Every documented operation exists on the server: with the token it is
    // never 404 for an unknown route or 405 for a wrong method.
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            let url = path
                .replace("{id}", "nope")
                .replace("{workflow}", "nope")
                .replace("{path}", "nope")
                .replace("{token}", "nope")
                .replace("{name}", "nope");
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = s
                .client
                .request(m, format!("{}{url}", s.base))
                .bearer_auth(&s.token)
                .send()
                .await
                .unwrap();
            assert_ne!(
                r.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            if r.status() == StatusCode::NOT_FOUND {
                // A 404 from a handler names the missing thing; the router's own 404 is empty.
                let body = r.text().await.unwrap();
                assert!(
                    body.contains("nope"),
                    "{method} {path} is not routed: {body:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_websocket_client_that_falls_behind_is_dropped_and_runs_go_on() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        event_capacity: 8,
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await.unwrap();
    let token = sluice_server::ensure_token(dir.path()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let t = token.clone();
    let e = engine.clone();
    tokio::spawn(async move {
        sluice_server::serve(
            listener,
            e,
            &t,
            sluice_server::Options::new(addr),
            std::future::pending(),
        )
        .await
        .unwrap();
    });
    let mut req = format!("ws://{addr}/api/v1/ws")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();

    // 40 pure steps in a row: far more events than the 8 a subscriber may lag.
    let mut nodes = vec![json!({"id": "t", "kind": "trigger.manual"})];
    let mut edges = Vec::new();
    for i in 0..40 {
        nodes.push(
            json!({"id": format!("s{i}"), "kind": "data.set", "config": {"values": {"i": i}}}),
        );
        edges.push(json!({"from": if i == 0 { "t".to_string() } else { format!("s{}", i - 1) }, "to": format!("s{i}")}));
    }
    let wf = sluice_model::Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "chatty", "nodes": nodes, "edges": edges}),
    )
    .unwrap();
    let plan = sluice_runtime::Plan::new(wf).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), async {
        engine
            .start(plan, None, std::sync::Arc::new(json!(null)))
            .await
            .unwrap()
            .wait()
            .await
    })
    .await
    .expect("the run never waits for a slow subscriber");
    assert_eq!(r.status, sluice_runtime::Status::Succeeded);

    let mut closed = None;
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .unwrap()
    {
        match msg {
            Ok(tokio_tungstenite::tungstenite::Message::Close(frame)) => {
                closed = frame;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let frame = closed.expect("a close frame");
    assert_eq!(frame.code, CloseCode::Policy);
    assert!(frame.reason.contains("too slow"), "{}", frame.reason);
}

#[tokio::test]
async fn credentials_are_write_only_and_never_stored_in_clear() {
    let s = server().await;
    let secret = "s3cr3t-V4LUE-that-must-not-leak";
    let put = |name: &str, body: Value| {
        s.api(reqwest::Method::PUT, &format!("/credentials/{name}"))
            .json(&body)
            .send()
    };
    let r = put(
        "github",
        json!({"kind": "bearer", "value": {"token": secret}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = put(
        "github",
        json!({"kind": "bearer", "value": {"token": secret}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = put("mail", json!({"kind": "smtp", "value": {"host": "h", "port": 25, "security": "starttls", "password": secret}})).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // A wrong shape names the field, never the value.
    let r = put(
        "bad",
        json!({"kind": "basic", "value": {"username": secret}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let msg = json_of(r).await["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(msg, "credential `bad` (basic): missing field `password`");
    let r = put(
        "bad",
        json!({"kind": "smtp", "value": {"host": "h", "port": secret, "security": "tls"}}),
    )
    .await
    .unwrap();
    let msg = json_of(r).await["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!msg.contains(secret), "{msg}");
    let r = put("bad", json!({"kind": "oauth", "value": {}}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);

    let list = json_of(
        s.api(reqwest::Method::GET, "/credentials")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["name"], "github");
    assert_eq!(list[0]["kind"], "bearer");
    assert_eq!(list[0]["used_by"], json!([]));
    assert!(!list.to_string().contains(secret));

    // POST creates, never replaces.
    let post = |body: Value| {
        s.api(reqwest::Method::POST, "/credentials")
            .json(&body)
            .send()
    };
    let r = post(
        json!({"name": "github", "kind": "basic", "value": {"username": "u", "password": "p"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let r = post(json!({"name": "fresh", "kind": "bearer", "value": {"token": "t"}}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = post(json!({"name": "no good", "kind": "bearer", "value": {"token": "t"}}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .api(reqwest::Method::DELETE, "/credentials/fresh")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    // PATCH changes the fields given and keeps the rest (the password here),
    // checking the whole value again.
    let patch = |name: &str, body: Value| {
        s.api(reqwest::Method::PATCH, &format!("/credentials/{name}"))
            .json(&body)
            .send()
    };
    let r = patch(
        "mail",
        json!({"value": {"port": 2525, "username": "robot"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = patch("mail", json!({"value": {"security": "sometimes"}}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let msg = json_of(r).await["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.starts_with("credential `mail` (smtp): security:"),
        "{msg}"
    );
    let r = patch("mail", json!({"value": {"host": null}}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "host is required");
    let r = patch("nobody", json!({"value": {}})).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = patch("mail", json!({"value": {}, "kind": "bearer"}))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "the kind stays");
    // A mail server on a port nothing listens on: the test says so, with the
    // port the PATCH set and the password kept (the login is what fails
    // first on a real server; here the connection is refused).
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let r = patch(
        "mail",
        json!({"value": {"host": "127.0.0.1", "port": port, "security": "none"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let t = json_of(
        s.api(reqwest::Method::POST, "/credentials/mail/test")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(t["ok"], false, "{t}");
    assert!(
        t["message"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{port}")),
        "{t}"
    );
    // An HTTP credential with no URL to call, and one that does not exist.
    let r = s
        .api(reqwest::Method::POST, "/credentials/github/test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        json_of(r).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("give a URL")
    );
    let r = s
        .api(reqwest::Method::POST, "/credentials/github/test")
        .json(&json!({"url": "file:///etc/passwd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .api(reqwest::Method::POST, "/credentials/nobody/test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // Nothing in the data dir holds the value in clear: database, WAL, blobs, key files.
    tokio::time::sleep(Duration::from_millis(100)).await;
    fn scan(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
        let mut hits = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                hits.extend(scan(&path, needle));
            } else if std::fs::read(&path)
                .unwrap()
                .windows(needle.len())
                .any(|w| w == needle)
            {
                hits.push(path);
            }
        }
        hits
    }
    assert_eq!(
        scan(s._dir.path(), secret.as_bytes()),
        Vec::<std::path::PathBuf>::new()
    );

    let r = s
        .api(reqwest::Method::DELETE, "/credentials/github")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = s
        .api(reqwest::Method::DELETE, "/credentials/github")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn webhooks_on_a_loopback_server_refuse_a_foreign_host() {
    let s = server().await;
    s.put_workflow(webhook_flow("when_finished", false)).await;
    let r = s
        .hook(reqwest::Method::POST, "orders/orders")
        .header("Host", "rebound.example")
        .json(&json!({"id": "a", "total": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

/// The run's JSON once its status is `status`.
async fn run_when(s: &common::Server, id: &str, status: &str) -> Value {
    for _ in 0..500 {
        let run = json_of(
            s.api(reqwest::Method::GET, &format!("/runs/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        if run["status"] == status {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("run {id} never became {status}");
}

#[tokio::test]
async fn an_approval_is_decided_once_by_its_link_or_by_the_api() {
    let s = server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "ship", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "order"}},
        {"id": "approve", "kind": "flow.approval", "config": {"message": "Ship <b>{{ input.body.n }}</b>?"}},
        {"id": "yes", "kind": "output.end"},
        {"id": "no", "kind": "output.end"}
    ], "edges": [
        {"from": "hook", "to": "approve"},
        {"from": "approve:approved", "to": "yes"},
        {"from": "approve:rejected", "to": "no"}
    ]}))
    .await;
    let start = || async {
        let r = s
            .hook(reqwest::Method::POST, "ship/order")
            .json(&json!({"n": 7}))
            .send()
            .await
            .unwrap();
        // A `when_finished` webhook whose run parks: 202 with its id.
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        json_of(r).await["run_id"].as_str().unwrap().to_string()
    };
    let id = start().await;
    let run = run_when(&s, &id, "waiting").await;
    assert_eq!(run["waiting"][0]["node"], "approve", "{run}");
    assert_eq!(run["waiting"][0]["message"], "Ship <b>7</b>?");
    let link = run["waiting"][0]["resume_url"].as_str().unwrap();
    let token = link.rsplit('/').next().unwrap().to_string();
    let listed = json_of(
        s.api(reqwest::Method::GET, "/runs?status=waiting")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id.as_str());

    // The link's page decides nothing, and shows the question escaped.
    let page = s
        .client
        .get(format!("{}/hook/resume/{token}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(html.contains("Ship &lt;b&gt;7&lt;/b&gt;?"), "{html}");
    assert!(html.contains(">Approve</button>") && html.contains(">Reject</button>"));
    run_when(&s, &id, "waiting").await;
    // Its POST decides, with the body as the approval's output; once.
    let post = |token: String| {
        s.client
            .post(format!("{}/hook/resume/{token}", s.base))
            .json(&json!({"ok": true}))
            .send()
    };
    let r = post(token.clone()).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        json_of(r).await,
        json!({"run_id": id, "node": "approve", "lineage": "", "decision": "approved"})
    );
    let run = run_when(&s, &id, "succeeded").await;
    assert_eq!(run["output"], json!({"yes": {"ok": true}}));
    let again = post(token.clone()).await.unwrap();
    assert_eq!(again.status(), StatusCode::GONE);
    // A token this data dir did not make is nobody's.
    let forged = format!("{}x", &token[..token.len() - 1]);
    for bad in [forged.as_str(), "nope", "a.b"] {
        let r = post(bad.to_string()).await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{bad}");
    }

    // The page's own form: the decision and comment are the output.
    let id = start().await;
    run_when(&s, &id, "waiting").await;
    let token = {
        let run = run_when(&s, &id, "waiting").await;
        let link = run["waiting"][0]["resume_url"]
            .as_str()
            .unwrap()
            .to_string();
        link.rsplit('/').next().unwrap().to_string()
    };
    let r = s
        .client
        .post(format!("{}/hook/resume/{token}", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("comment=not+today&decision=rejected")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("You rejected step"));
    let run = run_when(&s, &id, "succeeded").await;
    assert_eq!(
        run["output"],
        json!({"no": {"comment": "not today", "decision": "rejected"}})
    );

    // The API: with the token only, and refused once decided.
    let id = start().await;
    run_when(&s, &id, "waiting").await;
    let unsigned = s
        .client
        .post(format!("{}/api/v1/runs/{id}/signal", s.base))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED);
    let signal = |q: &str| {
        s.api(reqwest::Method::POST, &format!("/runs/{id}/signal{q}"))
            .json(&json!({"why": "no stock"}))
            .send()
    };
    // A decision that says neither is refused, never taken as approval.
    let r = s
        .api(reqwest::Method::POST, &format!("/runs/{id}/signal"))
        .json(&json!({"decision": "deny"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    run_when(&s, &id, "waiting").await;
    let r = signal("?node=other").await.unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(
        json_of(r).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not wait for a decision at `other`")
    );
    let r = signal("?decision=rejected").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let run = run_when(&s, &id, "succeeded").await;
    assert_eq!(run["output"], json!({"no": {"why": "no stock"}}));
    let r = signal("").await.unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(
        json_of(r).await["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already succeeded")
    );
    let r = s
        .api(reqwest::Method::POST, "/runs/r-nope/signal")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_n8n_export_is_imported_through_the_api_and_its_webhook_answers_as_in_n8n() {
    let s = server().await;
    let export: Value = serde_json::from_str(include_str!(
        "../../runtime/tests/n8n/webhook-set-respond.json"
    ))
    .unwrap();
    let r = s
        .api(reqwest::Method::POST, "/import/n8n?publish=true")
        .json(&export)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let report = json_of(r).await;
    assert_eq!(report["id"], "order-total", "{report}");
    assert_eq!(
        report["webhooks"][0],
        json!({"method": "POST", "n8n": "/webhook/orders", "sluice": "/hook/order-total/orders"})
    );
    // n8n's webhook, at Sluice's address: what n8n answers.
    let r = s
        .hook(reqwest::Method::POST, "order-total/orders?source=app")
        .json(&json!({"name": "ada", "qty": 3, "item": "mug", "price": 2.5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["x-order-source"], "app");
    assert_eq!(
        json_of(r).await,
        json!({"customer": "ADA", "total": 7.5, "summary": "3 x mug for ada", "shipping": {"express": true}})
    );
    // Imported again: a second workflow, not a replacement.
    let r = s
        .api(reqwest::Method::POST, "/import/n8n")
        .json(&export)
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(r).await["id"], "order-total-2");
    // Not an n8n export: 400.
    let r = s
        .api(reqwest::Method::POST, "/import/n8n")
        .json(&json!({"nodes": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // strict, with a node that cannot be converted: 409, nothing stored.
    let mut partial = export.clone();
    partial["name"] = json!("Partly convertible");
    partial["nodes"][1]["type"] = json!("n8n-nodes-base.airtable");
    let r = s
        .api(reqwest::Method::POST, "/import/n8n?strict=true")
        .json(&partial)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let body = json_of(r).await;
    assert_eq!(
        body["error"]["detail"]["nodes"][1]["converted"],
        json!(false),
        "{body}"
    );
    let r = s
        .api(reqwest::Method::GET, "/workflows/partly-convertible")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// PATCHes of different fields of one credential, sent at once, all land:
/// each writes only onto the value it read, else it reads again. (They
/// used to read, change and write blindly, so one undid another.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_patches_sent_at_once_all_land() {
    let s = server().await;
    let r = s
        .api(reqwest::Method::PUT, "/credentials/mail")
        .json(&json!({"kind": "smtp", "value": {"host": "mail.example", "port": 25, "security": "none"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // Values are write-only over the API: read them as the nodes do.
    let reader = Engine::open(s._dir.path(), Options::default())
        .await
        .unwrap();
    let patch = |body: Value| {
        s.api(reqwest::Method::PATCH, "/credentials/mail")
            .json(&body)
            .send()
    };
    for round in 0..20 {
        let (a, b, c) = tokio::join!(
            patch(json!({"value": {"username": format!("user{round}")}})),
            patch(json!({"value": {"password": format!("pw{round}")}})),
            patch(json!({"value": {"port": 1000 + round}})),
        );
        for r in [a, b, c] {
            assert_eq!(r.unwrap().status(), StatusCode::OK);
        }
        let (kind, value) = reader
            .store()
            .get_credential("mail")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kind, "smtp");
        assert_eq!(
            value,
            json!({"host": "mail.example", "port": 1000 + round, "security": "none",
                   "username": format!("user{round}"), "password": format!("pw{round}")}),
            "round {round}"
        );
    }
    // A PATCH after a DELETE does not bring the credential back.
    let r = s
        .api(reqwest::Method::DELETE, "/credentials/mail")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = patch(json!({"value": {"port": 26}})).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(
        reader
            .store()
            .get_credential("mail")
            .await
            .unwrap()
            .is_none()
    );
}
