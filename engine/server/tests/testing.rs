//! Testing a piece of a workflow over the API, against real loopback
//! servers: one node of the draft run on given data, pinned test data (draft
//! runs use it, published runs never), a webhook's test URL, strict
//! templates, and the editor's template preview checked against what runs
//! produce on the same data.

use std::sync::{Arc, Mutex};

use axum::Json;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_api::{NodeTested, RunDetail, RunOutcome, StepStatus, TestCall};
use sluice_model::preview::{Data, preview};
use sluice_model::template::Missing;

mod common;
use common::{Server, server};

/// A loopback server that answers `POST /echo` with the JSON it got and
/// counts the calls.
async fn echo() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(move |Json(body): Json<Value>| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(body.clone());
                Json(json!({"echo": body}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/echo", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (url, seen)
}

async fn put(s: &Server, wf: &Value, publish: bool) -> reqwest::Response {
    let id = wf["id"].as_str().unwrap();
    let q = if publish { "?publish=true" } else { "" };
    s.api(Method::PUT, &format!("/workflows/{id}{q}"))
        .json(wf)
        .send()
        .await
        .unwrap()
}

async fn run(s: &Server, id: &str, input: Value, draft: bool) -> RunOutcome {
    let r = s
        .api(Method::POST, &format!("/workflows/{id}/runs"))
        .json(&json!({"wait": true, "draft": draft, "input": input}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    r.json().await.unwrap()
}

async fn runs_of(s: &Server, id: &str) -> Vec<Value> {
    s.api(Method::GET, &format!("/runs?workflow={id}"))
        .send()
        .await
        .unwrap()
        .json::<Vec<Value>>()
        .await
        .unwrap()
}

#[tokio::test]
async fn run_this_node_runs_one_node_of_the_draft_on_the_data_given() {
    let s = server().await;
    let (url, seen) = echo().await;
    let wf = json!({"format": "sluice.workflow/v1", "id": "one", "nodes": [
        {"id": "start", "kind": "trigger.manual"},
        {"id": "user", "kind": "data.set", "config": {"values": {"name": "{{ input.name }}"}}},
        {"id": "call", "kind": "http.request", "config": {"method": "POST", "url": url,
            "body": {"id": "{{ input.id }}", "name": "{{ nodes.user.name }}"}}},
        {"id": "log", "kind": "util.log", "config": {"message": "got {{ input.body.echo.id }}"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "start", "to": "user"}, {"from": "user", "to": "call"},
                  {"from": "call", "to": "log"}, {"from": "log", "to": "end"}]});
    // A draft, never published: the test runs the draft.
    assert_eq!(put(&s, &wf, false).await.status(), StatusCode::CREATED);
    let r = s
        .api(Method::POST, "/workflows/one/nodes/call/test")
        .json(&json!({"input": {"id": 7}, "nodes": {"user": {"name": "Ada"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let t: NodeTested = r.json().await.unwrap();
    assert_eq!(t.status, StepStatus::Succeeded, "{t:?}");
    assert_eq!(
        t.output.as_ref().unwrap()["out"]["body"],
        json!({"echo": {"id": 7, "name": "Ada"}})
    );
    // Exactly one request, and only this node ran: no run, nothing after it.
    assert_eq!(*seen.lock().unwrap(), vec![json!({"id": 7, "name": "Ada"})]);
    assert!(runs_of(&s, "one").await.is_empty());

    // Its logs come back; a node's error is the answer's, not the call's.
    let t: NodeTested = s
        .api(Method::POST, "/workflows/one/nodes/log/test")
        .json(&json!({"input": {"body": {"echo": {"id": 9}}}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.logs.len(), 1, "{t:?}");
    assert_eq!(t.logs[0].message, "got 9");
    let bad = json!({"format": "sluice.workflow/v1", "id": "one", "nodes": [
        {"id": "start", "kind": "trigger.manual"},
        {"id": "call", "kind": "http.request", "config": {"method": "GET",
            "url": "http://127.0.0.1:9/nothing-listens", "timeout_ms": 2000}}],
        "edges": [{"from": "start", "to": "call"}]});
    assert!(put(&s, &bad, false).await.status().is_success());
    let t: NodeTested = s
        .api(Method::POST, "/workflows/one/nodes/call/test")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.status, StepStatus::Failed);
    let e = t.error.unwrap();
    assert_eq!(e.node.as_deref(), Some("call"));
    assert_eq!(e.retryable, Some(true), "{e:?}");

    // Naming what is not there.
    let r = s
        .api(Method::POST, "/workflows/one/nodes/nope/test")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().await.unwrap().contains("no node `nope`"));
    let r = s
        .api(Method::POST, "/workflows/one/nodes/call/test")
        .json(&json!({"inptu": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("inptu"));
}

#[tokio::test]
async fn pinned_output_is_used_by_draft_runs_and_never_by_published_ones() {
    let s = server().await;
    let (url, seen) = echo().await;
    let wf = json!({"format": "sluice.workflow/v1", "id": "pin", "nodes": [
        {"id": "start", "kind": "trigger.manual"},
        {"id": "call", "kind": "http.request", "config": {"method": "POST", "url": url, "body": {"real": true}}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ nodes.call.body }}"}}],
        "edges": [{"from": "start", "to": "call"}, {"from": "call", "to": "end"}],
        "pinned": {"call": {"out": {"status": 200, "body": {"pinned": true}}}}});
    assert_eq!(put(&s, &wf, true).await.status(), StatusCode::CREATED);
    let draft = run(&s, "pin", json!({}), true).await;
    assert_eq!(draft.output, json!({"end": {"pinned": true}}));
    assert!(seen.lock().unwrap().is_empty(), "a pinned node ran");
    let published = run(&s, "pin", json!({}), false).await;
    assert_eq!(published.output, json!({"end": {"echo": {"real": true}}}));
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Pinned data names a node and its ports, or the workflow is invalid.
    for (pinned, field) in [
        (json!({"nope": {"out": {}}}), "pinned.nope"),
        (json!({"call": {"sideways": {}}}), "pinned.call.sideways"),
        (json!({"call": 3}), "pinned.call"),
        (json!([]), "pinned"),
    ] {
        let mut bad = wf.clone();
        bad["pinned"] = pinned;
        let r = put(&s, &bad, false).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body: Value = r.json().await.unwrap();
        assert!(
            body["error"]["detail"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["field"] == field),
            "{field}: {body}"
        );
    }
}

#[tokio::test]
async fn strict_workflows_fail_naming_the_template_and_the_path() {
    let s = server().await;
    let mut wf = json!({"format": "sluice.workflow/v1", "id": "strict", "nodes": [
        {"id": "start", "kind": "trigger.manual"},
        {"id": "set", "kind": "data.set", "config": {"values": {"x": "{{ input.totl }}", "y": "{{ input.total }}"}}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "start", "to": "set"}, {"from": "set", "to": "end"}],
        "settings": {"strict": true}});
    assert!(put(&s, &wf, true).await.status().is_success());
    let out = run(&s, "strict", json!({"total": 5}), false).await;
    assert_eq!(out.status.as_str(), "failed");
    let e = out.error.unwrap();
    assert_eq!(e.node.as_deref(), Some("set"));
    assert!(
        e.message
            .contains("`input.totl` is missing, in `{{ input.totl }}`"),
        "{}",
        e.message
    );
    // Not strict: the missing field is null, as before.
    wf["settings"]["strict"] = json!(false);
    assert!(put(&s, &wf, true).await.status().is_success());
    let out = run(&s, "strict", json!({"total": 5}), false).await;
    assert_eq!(out.output, json!({"end": {"x": null, "y": 5}}));
    // A setting that is not a boolean is named.
    wf["settings"]["strict"] = json!("yes");
    let r = put(&s, &wf, false).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("settings.strict"));
}

#[tokio::test]
async fn the_preview_is_what_a_run_produces_on_the_same_data() {
    let s = server().await;
    let expressions = [
        "{{ input.id }}",
        "{{ input.items | length }}",
        "{{ input.items[0].sku }}",
        "{{ input.total > 100 }}",
        "{{ input.total * 2 }}",
        "Order {{ input.id }} for {{ input.customer.name }}",
        "{{ input.customer.name | upper }}",
        "{{ nodes.order.tier }}",
        "{{ nodes.order.count + 1 }}",
        "{{ run.workflow }}",
        "{{ run.trigger }}",
        "{{ run.id }}",
        "{{ run.started_at }}",
        "{{ vars.currency }}",
        "{{ input.total ~ ' ' ~ vars.currency }}",
        "{{ input.items | map(attribute='sku') | list }}",
        "{{ input.items | selectattr('gift') | list | length }}",
        "{% for i in input.items %}{{ i.sku }}{% if not loop.last %},{% endif %}{% endfor %}",
        "{{ input.customer }}",
        "{{ input.missing }}",
        "{{ input.customer.vip if input.customer.vip else 'regular' }}",
        "{{ input.items | map(attribute='qty') | sum }}",
        "{{ 'gold' if nodes.order.count > 1 else 'basic' }}",
        "{{ input.tags | join('|') }}",
        "{{ input.id | string | length }}",
        "{{ input[\"customer\"][\"name\"] }}",
    ];
    let values: serde_json::Map<String, Value> = expressions
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("e{i}"), json!(e)))
        .collect();
    let wf = json!({"format": "sluice.workflow/v1", "id": "preview", "vars": {"currency": "EUR"},
        "nodes": [
            {"id": "start", "kind": "trigger.manual"},
            {"id": "order", "kind": "data.set", "config": {"values": {
                "tier": "gold", "count": "{{ input.items | length }}"}, "keep_input": true}},
            {"id": "check", "kind": "data.set", "config": {"values": values}},
            {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "start", "to": "order"}, {"from": "order", "to": "check"},
                  {"from": "check", "to": "end"}]});
    s.put_workflow(wf.clone()).await;
    let input = json!({"id": 42, "total": 150.5, "customer": {"name": "Ada", "vip": false},
        "items": [{"sku": "a-1", "qty": 2, "gift": true}, {"sku": "b-2", "qty": 1}],
        "tags": ["new", "web"]});
    let out = run(&s, "preview", input, false).await;
    assert_eq!(out.status.as_str(), "succeeded", "{:?}", out.error);
    let detail: RunDetail = s
        .api(Method::GET, &format!("/runs/{}", out.id))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // What the editor does: the node's data in that run, then each field.
    let scope = Data::of_run(&detail, "check").scope(&wf["vars"]);
    let produced = &out.output["end"];
    for (i, e) in expressions.iter().enumerate() {
        let p = preview(&json!(e), &scope, Missing::Null);
        assert_eq!(
            p.value.as_ref().ok(),
            Some(&produced[format!("e{i}")]),
            "preview of {e}"
        );
        let expect_missing: &[&str] = if e.contains("input.missing") {
            &["input.missing"]
        } else {
            &[]
        };
        assert_eq!(p.missing, expect_missing, "{e}");
    }
    assert!(expressions.len() >= 20);
    // A typo is marked; strict mode makes it the error a run would give.
    let p = preview(&json!("{{ input.custmer.name }}"), &scope, Missing::Error);
    assert_eq!(p.missing, ["input.custmer"]);
    assert!(
        p.value
            .unwrap_err()
            .to_string()
            .contains("`input.custmer` is missing")
    );
}

#[tokio::test]
async fn a_webhook_test_url_answers_only_while_an_editor_listens() {
    let s = server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "hooked", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "end"}]}),
    )
    .await;
    let test_call = || {
        s.client
            .post(format!("{}/hook-test/hooked/orders?src=test", s.base))
            .json(&json!({"id": 5}))
            .send()
    };
    let r = test_call().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().await.unwrap().contains("Listen for a test call"));

    let listen = {
        let req = s.api(Method::POST, "/workflows/hooked/nodes/hook/listen");
        tokio::spawn(async move { req.send().await.unwrap() })
    };
    // The call that arrives once the editor listens is heard, once.
    let started = std::time::Instant::now();
    loop {
        let r = test_call().await.unwrap();
        if r.status() == StatusCode::OK {
            break;
        }
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(started.elapsed().as_secs() < 10, "never heard");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let heard = listen.await.unwrap();
    assert_eq!(heard.status(), StatusCode::OK);
    let call: TestCall = heard.json().await.unwrap();
    assert_eq!(call.node, "hook");
    assert_eq!(call.message["body"], json!({"id": 5}));
    assert_eq!(call.message["query"], json!({"src": "test"}));
    assert_eq!(call.message["method"], "POST");
    assert_eq!(test_call().await.unwrap().status(), StatusCode::NOT_FOUND);
    // No run started; the production URL still runs the published version.
    assert!(runs_of(&s, "hooked").await.is_empty());
    let r = s
        .hook(Method::POST, "hooked/orders")
        .json(&json!({"id": 6}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Only webhooks have a test URL.
    let r = s
        .api(Method::POST, "/workflows/hooked/nodes/end/listen")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}
