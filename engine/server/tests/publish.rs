//! Drafts and publish over the API: what a workflow's webhooks and runs by
//! id run is its published version; a stored draft changes nothing there
//! until it is published; unpublishing takes its webhooks down.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_api::{PublishState, RunDetail, RunOutcome, RunStarted, VersionEntry, WorkflowEntry};

mod common;
use common::{Server, json_of, server};

fn flow(tag: &str) -> Value {
    json!({"format": "sluice.workflow/v1", "id": "orders", "name": "Orders", "nodes": [
        {"id": "hook", "kind": "trigger.webhook",
         "config": {"method": "POST", "path": "new", "respond": "when_finished"}},
        {"id": "t", "kind": "trigger.manual"},
        {"id": "tag", "kind": "data.set", "config": {"values": {"tag": tag}}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "tag"}, {"from": "t", "to": "tag"},
                  {"from": "tag", "to": "end"}]})
}

/// What the webhook answers: its status, and the tag when it ran.
async fn call_hook(s: &Server) -> (StatusCode, Option<String>) {
    let r = s
        .hook(Method::POST, "orders/new")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    (status, body["end"]["tag"].as_str().map(str::to_string))
}

async fn put(s: &Server, wf: &Value, publish: bool) -> StatusCode {
    s.api(
        Method::PUT,
        &format!(
            "/workflows/orders{}",
            if publish { "?publish=true" } else { "" }
        ),
    )
    .json(wf)
    .send()
    .await
    .unwrap()
    .status()
}

async fn state(s: &Server) -> PublishState {
    let r = s
        .api(Method::GET, "/workflows/orders/publish")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

async fn run(s: &Server, draft: bool) -> RunOutcome {
    let r = s
        .api(Method::POST, "/workflows/orders/runs")
        .json(&json!({"wait": true, "draft": draft, "trigger": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_draft_changes_what_runs_only_when_published() {
    let s = server().await;
    assert_eq!(put(&s, &flow("v1"), true).await, StatusCode::CREATED);
    assert_eq!(call_hook(&s).await, (StatusCode::OK, Some("v1".into())));
    let st = state(&s).await;
    assert!(st.up_to_date(), "{st:?}");

    // A stored draft: the webhook and runs by id still run v1.
    assert_eq!(put(&s, &flow("v2"), false).await, StatusCode::OK);
    assert_eq!(call_hook(&s).await, (StatusCode::OK, Some("v1".into())));
    let published = run(&s, false).await;
    assert_eq!(published.output["end"]["tag"], "v1");
    // The editor's Run runs the draft, and the run says so.
    let draft = run(&s, true).await;
    assert_eq!(draft.output["end"]["tag"], "v2");
    let detail: RunDetail = get(&s, &format!("/runs/{}", draft.id)).await;
    assert!(detail.run.draft, "{detail:?}");
    let detail: RunDetail = get(&s, &format!("/runs/{}", published.id)).await;
    assert!(!detail.run.draft);
    // A retry of a draft run is a draft run, of the same version.
    let r = s
        .api(Method::POST, &format!("/runs/{}/retry", draft.id))
        .json(&json!({"from": "start"}))
        .send()
        .await
        .unwrap();
    let retry: RunStarted = r.json().await.unwrap();
    assert!(retry.draft);
    assert_eq!(retry.version, draft.version);

    // What publishing would change, and nothing blocks it.
    let st = state(&s).await;
    assert!(!st.up_to_date() && st.published, "{st:?}");
    assert!(
        st.changes
            .nodes_changed
            .get("tag")
            .is_some_and(|f| f.contains("config.values")),
        "{st:?}"
    );
    assert!(st.problems.is_empty(), "{st:?}");
    let listed: Vec<WorkflowEntry> = get(&s, "/workflows").await;
    assert_eq!(
        listed[0].draft_version.as_deref(),
        Some(st.draft_version.as_str())
    );
    assert_ne!(listed[0].published_version, listed[0].draft_version);

    // Publish: v2 is live.
    let r = s
        .api(Method::POST, "/workflows/orders/publish")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let st: PublishState = r.json().await.unwrap();
    assert!(st.up_to_date(), "{st:?}");
    assert_eq!(call_hook(&s).await, (StatusCode::OK, Some("v2".into())));
    let versions: Vec<VersionEntry> = get(&s, "/workflows/orders/versions").await;
    let marked: Vec<&str> = versions
        .iter()
        .filter(|v| v.published_at_us.is_some())
        .map(|v| v.version.as_str())
        .collect();
    assert!(marked.contains(&st.draft_version.as_str()), "{versions:?}");
    assert_eq!(marked.len(), 2, "both publishes are marked: {versions:?}");

    // Publishing an older version by its id brings it back.
    let first = versions.last().unwrap().version.clone();
    let r = s
        .api(Method::POST, "/workflows/orders/publish")
        .json(&json!({"version": first}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    assert_eq!(call_hook(&s).await, (StatusCode::OK, Some("v1".into())));
    let r = s
        .api(Method::POST, "/workflows/orders/publish")
        .json(&json!({"version": "7@7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(call_hook(&s).await, (StatusCode::OK, Some("v1".into())));

    // Unpublish: the webhook is gone, runs by id are refused, the draft stays.
    let r = s
        .api(Method::POST, "/workflows/orders/unpublish")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let st: PublishState = r.json().await.unwrap();
    assert!(!st.published, "{st:?}");
    assert_eq!(call_hook(&s).await.0, StatusCode::NOT_FOUND);
    let r = s
        .api(Method::POST, "/workflows/orders/runs")
        .json(&json!({"wait": true, "trigger": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let message = json_of(r).await["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("is not published"), "{message}");
    assert_eq!(run(&s, true).await.output["end"]["tag"], "v2");
    let r = s
        .api(Method::POST, "/workflows/nope/publish")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_new_workflow_stored_as_a_draft_has_no_webhook_until_published() {
    let s = server().await;
    assert_eq!(put(&s, &flow("v1"), false).await, StatusCode::CREATED);
    assert_eq!(call_hook(&s).await.0, StatusCode::NOT_FOUND);
    let st = state(&s).await;
    assert!(!st.published && st.changes.nodes_added.len() == 4, "{st:?}");
    let r = s
        .api(Method::POST, "/workflows/orders/publish")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(call_hook(&s).await, (StatusCode::OK, Some("v1".into())));
}

/// `GET /api/v1{path}`, decoded.
async fn get<T: serde::de::DeserializeOwned>(s: &Server, path: &str) -> T {
    let r = s.api(Method::GET, path).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "GET {path}");
    r.json().await.unwrap()
}

/// Deploying needs a shared worker: without one the API says so and what
/// to set, and records nothing.
#[tokio::test]
async fn deploying_without_a_worker_says_what_to_set() {
    let s = server().await;
    assert_eq!(put(&s, &flow("a"), true).await, StatusCode::CREATED);
    let r = s
        .api(Method::POST, "/workflows/orders/deploy")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("[worker] ingress"), "{message}");
    let got: sluice_api::DeployState = get(&s, "/workflows/orders/deploy").await;
    assert_eq!(got.version, None);
    let st = state(&s).await;
    assert!(!st.worker);
    assert_eq!(st.deployed_version, None);
}
