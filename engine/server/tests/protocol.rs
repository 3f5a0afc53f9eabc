//! The wire protocol over real server output: every body the API sends and
//! every frame on its WebSocket decodes into the `sluice-api` types the
//! editor and the CLI read them with, losslessly (decoded, then encoded
//! again, it is the same JSON), and the OpenAPI document describes them.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use reqwest::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sluice_api::ws::{Frame, ServerMessage};
use sluice_api::{
    CredentialEntry, CredentialStored, ErrorBody, Health, LogLine, Restored, RunDetail, RunOutcome,
    RunStarted, RunStatus, RunSummary, StepStatus, Stored, Validation, VersionEntry, What,
    WorkflowEntry,
};
use tokio_tungstenite::tungstenite::Message;

mod common;
use common::{json_of, server, server_full};

/// `v` read as a `T`, checked to lose nothing.
#[track_caller]
fn decodes_as<T: DeserializeOwned + Serialize>(v: &Value) -> T {
    let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(
        &serde_json::to_value(&t).unwrap(),
        v,
        "decoding lost something"
    );
    t
}

fn flow(closed_port: u16) -> Value {
    json!({"format": "sluice.workflow/v1", "id": "proto", "name": "Protocol", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "check", "kind": "flow.if", "config": {"condition": "{{ input.big }}"}},
        {"id": "big", "kind": "util.log", "config": {"message": "big {{ input.n }}"}},
        {"id": "small", "kind": "data.set", "config": {"values": {"small": true}}},
        {"id": "each", "kind": "flow.split", "config": {"items": "{{ [1, 2] }}"}},
        {"id": "call", "kind": "http.request", "on_error": "continue",
         "config": {"url": format!("http://127.0.0.1:{closed_port}/")}},
        {"id": "all", "kind": "flow.join"},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "check"}, {"from": "check:true", "to": "big"},
                  {"from": "check:false", "to": "small"}, {"from": "big", "to": "each"},
                  {"from": "each", "to": "call"}, {"from": "call", "to": "all"},
                  {"from": "all", "to": "end"}]})
}

#[tokio::test]
async fn every_api_body_and_ws_frame_decodes_into_the_api_types() {
    let s = server().await;
    // A port nothing listens on: the HTTP steps fail, and continue.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    s.put_workflow(flow(port)).await;
    let mut ws = s.ws("workflow=proto").await;
    ws.send(Message::text(
        json!({"type": "doc.subscribe", "workflow": "proto", "ref": 1}).to_string(),
    ))
    .await
    .unwrap();

    let r = s
        .api(Method::POST, "/workflows/proto/runs")
        .json(&json!({"input": {"big": true, "n": 3}, "wait": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let outcome: RunOutcome = decodes_as(&json_of(r).await);
    assert_eq!(outcome.status, RunStatus::Succeeded, "{outcome:?}");

    // Every frame until the run's end: a document sync, then run events.
    let mut frames = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("a frame within 20 s")
            .unwrap()
            .unwrap();
        let Message::Text(text) = msg else { continue };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        let frame: Frame = decodes_as(&v);
        let done = matches!(&frame, Frame::Run(e) if matches!(e.what, What::RunFinished { .. }));
        frames.push(frame);
        if done {
            break;
        }
    }
    assert!(
        matches!(&frames[0], Frame::Doc(ServerMessage::Sync { workflow, .. }) if workflow == "proto"),
        "{:?}",
        frames[0]
    );
    let kinds: Vec<&str> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Run(e) => Some(match &e.what {
                What::RunStarted { .. } => "run_started",
                What::StepStarted { .. } => "step_started",
                What::StepFinished { .. } => "step_finished",
                What::StepSkipped { .. } => "step_skipped",
                What::StepWaiting { .. } => "step_waiting",
                What::RunWaiting {} => "run_waiting",
                What::Log { .. } => "log",
                What::Stream { .. } => "stream",
                What::RunFinished { .. } => "run_finished",
            }),
            Frame::Doc(_) => None,
        })
        .collect();
    for kind in [
        "run_started",
        "step_started",
        "step_finished",
        "step_skipped",
        "log",
        "run_finished",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    // A bad message gets a typed error that echoes its ref.
    ws.send(Message::text(
        json!({"type": "doc.update", "workflow": "proto", "update": "%%%", "ref": 9}).to_string(),
    ))
    .await
    .unwrap();
    let error = loop {
        let Some(Ok(Message::Text(text))) = ws.next().await else {
            panic!("socket closed")
        };
        let frame: Frame = decodes_as(&serde_json::from_str(text.as_str()).unwrap());
        if let Frame::Doc(e @ ServerMessage::Error { .. }) = frame {
            break e;
        }
    };
    assert!(
        matches!(&error, ServerMessage::Error { reference: Some(r), .. } if *r == json!(9)),
        "{error:?}"
    );

    let detail: RunDetail = decodes_as(
        &json_of(
            s.api(Method::GET, &format!("/runs/{}", outcome.id))
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    let statuses: Vec<StepStatus> = detail.steps.iter().map(|st| st.status).collect();
    for st in [
        StepStatus::Succeeded,
        StepStatus::Failed,
        StepStatus::Skipped,
    ] {
        assert!(statuses.contains(&st), "no {st} step in {statuses:?}");
    }
    let runs: Vec<RunSummary> = decodes_as(
        &json_of(
            s.api(Method::GET, "/runs?workflow=proto")
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    assert_eq!(runs[0], detail.run);
    let logs: Vec<LogLine> = decodes_as(
        &json_of(
            s.api(Method::GET, &format!("/runs/{}/logs", outcome.id))
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    assert_eq!(logs[0].message, "big 3");
    let workflows: Vec<WorkflowEntry> =
        decodes_as(&json_of(s.api(Method::GET, "/workflows").send().await.unwrap()).await);
    assert_eq!(workflows[0].id, "proto");
    let versions: Vec<VersionEntry> = decodes_as(
        &json_of(
            s.api(Method::GET, "/workflows/proto/versions")
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    let first = versions.last().expect("a version");
    assert!(
        first.changes.nodes_added.iter().any(|n| n == "check"),
        "{first:?}"
    );
    assert_eq!(first.summary, first.changes.to_string());
    let r = s
        .api(
            Method::POST,
            &format!("/workflows/proto/versions/{}/restore", first.version),
        )
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let restored: Restored = decodes_as(&json_of(r).await);
    assert_eq!(restored.id, "proto");
    // A failed run's error, typed: the node, the message, the attempts.
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "fails", "name": "Fails", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "boom", "kind": "data.transform", "config": {"jq": "error(\"no\")"}}],
        "edges": [{"from": "t", "to": "boom"}]}),
    )
    .await;
    let r = s
        .api(Method::POST, "/workflows/fails/runs")
        .json(&json!({"wait": true}))
        .send()
        .await
        .unwrap();
    let failed: RunOutcome = decodes_as(&json_of(r).await);
    let error = failed.error.expect("the run's error");
    assert_eq!(
        (error.node.as_deref(), error.attempts, error.retryable),
        (Some("boom"), Some(1), Some(false)),
        "{error:?}"
    );
    let detail: RunDetail = decodes_as(
        &json_of(
            s.api(Method::GET, &format!("/runs/{}", failed.id))
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    let step = detail.steps.iter().find(|st| st.node == "boom").unwrap();
    assert_eq!(
        step.error.as_ref().map(|e| e.message.as_str()),
        Some(error.message.as_str())
    );
    let r = s
        .api(Method::PUT, "/credentials/token")
        .json(&json!({"kind": "bearer", "value": {"token": "t0ps3cret"}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let stored: CredentialStored = decodes_as(&json_of(r).await);
    assert_eq!(
        (stored.name.as_str(), stored.kind.as_str()),
        ("token", "bearer")
    );
    let health: Health =
        decodes_as(&json_of(s.api(Method::GET, "/health").send().await.unwrap()).await);
    assert_eq!(health.status, "ok");
    let me: sluice_api::Me =
        decodes_as(&json_of(s.api(Method::GET, "/me").send().await.unwrap()).await);
    assert!(!me.name.is_empty());
    let r = s
        .api(Method::PUT, "/workflows/proto")
        .json(&flow(port))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let put: Stored = decodes_as(&json_of(r).await);
    assert_eq!((put.id.as_str(), put.nodes), ("proto", 8));
    let mut bad = flow(port);
    bad["nodes"][1]["kind"] = json!("flow.iff");
    for (body, valid) in [
        (flow(port), true),
        (bad, false),
        (json!({"format": 3}), false),
    ] {
        let r = s
            .api(Method::POST, "/validate")
            .json(&body)
            .send()
            .await
            .unwrap();
        let v: Validation = decodes_as(&json_of(r).await);
        assert_eq!(v.valid, valid, "{v:?}");
        assert_eq!(v.problems.is_empty(), valid, "{v:?}");
    }
    let creds: Vec<CredentialEntry> =
        decodes_as(&json_of(s.api(Method::GET, "/credentials").send().await.unwrap()).await);
    assert_eq!(
        (creds[0].name.as_str(), creds[0].kind.as_str()),
        ("token", "bearer")
    );
    let r = s
        .api(Method::POST, &format!("/runs/{}/retry", outcome.id))
        .json(&json!({"from": "start"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let retry: RunStarted = decodes_as(&json_of(r).await);
    assert_eq!(retry.retry_of.as_deref(), Some(outcome.id.as_str()));
    let r = s.api(Method::GET, "/runs/nope").send().await.unwrap();
    assert_eq!(r.status(), 404);
    let error: ErrorBody = decodes_as(&json_of(r).await);
    assert_eq!(error.error.message, "run `nope` not found");
}

#[tokio::test]
async fn the_openapi_document_describes_the_api_types() {
    let s = server().await;
    let doc: Value = s
        .client
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let schemas = &doc["components"]["schemas"];
    for name in [
        "RunDetail",
        "RunSummary",
        "Step",
        "RunStatus",
        "StepStatus",
        "RunStarted",
        "LogLine",
        "WorkflowEntry",
        "VersionEntry",
        "Changes",
        "Restored",
        "RunError",
        "PublishState",
        "Stored",
        "Validation",
        "ModuleAdded",
        "SetCredential",
        "CredentialStored",
        "Health",
        "SignInLink",
        "Me",
        "ShareCreated",
        "Shares",
        "Joined",
        "TicketInfo",
        "PeersInfo",
        "FromPeer",
        "Signalled",
        "Waiting",
    ] {
        assert!(schemas.get(name).is_some(), "no schema {name}: {schemas}");
    }
    let status = &schemas["RunStatus"];
    assert_eq!(
        status["enum"],
        json!(["running", "waiting", "succeeded", "failed", "cancelled"]),
        "{status}"
    );
    let ok = &doc["paths"]["/api/v1/runs/{id}"]["get"]["responses"]["200"]["content"]["application/json"]
        ["schema"];
    assert_eq!(ok["$ref"], "#/components/schemas/RunDetail", "{ok}");
}

/// The peers routes' bodies, between two engines that are peers.
#[tokio::test]
async fn every_peers_body_decodes_into_the_api_types() {
    use sluice_api::{Joined, PeersInfo, PublishState, ShareCreated, Shares, TicketInfo};
    let a = server_full(|_| {}, Some("Ada")).await;
    let b = server_full(|_| {}, Some("Bob")).await;
    a.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "shared", "nodes": [
        {"id": "t", "kind": "trigger.manual"}, {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "end"}]}),
    )
    .await;
    let r = a
        .api(Method::POST, "/workflows/shared/shares")
        .json(&json!({"role": "editor", "expires_in_s": 3600, "uses": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let share: ShareCreated = decodes_as(&json_of(r).await);
    let r = b
        .api(Method::POST, "/peers/tickets")
        .json(&json!({"ticket": share.link}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let info: TicketInfo = decodes_as(&json_of(r).await);
    assert_eq!(
        (info.workflow.as_str(), info.host_name.as_str()),
        ("shared", "Ada")
    );
    let r = b
        .api(Method::POST, "/peers/join")
        .json(&json!({"ticket": share.ticket}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let joined: Joined = decodes_as(&json_of(r).await);
    assert_eq!(joined.workflow, "shared");
    let shares: Shares = decodes_as(
        &json_of(
            a.api(Method::GET, "/workflows/shared/shares")
                .send()
                .await
                .unwrap(),
        )
        .await,
    );
    assert_eq!(shares.peers[0].name, "Bob");
    let peers: PeersInfo =
        decodes_as(&json_of(b.api(Method::GET, "/peers").send().await.unwrap()).await);
    assert_eq!(peers.links[0].host_name, "Ada");
    // The sharer's publish state names the peer once it edits.
    let mut wf: Value = json_of(
        b.api(Method::GET, "/workflows/shared")
            .send()
            .await
            .unwrap(),
    )
    .await;
    wf["name"] = json!("Renamed by Bob");
    let r = b
        .api(Method::PUT, "/workflows/shared")
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let state: PublishState = decodes_as(
            &json_of(
                a.api(Method::GET, "/workflows/shared/publish")
                    .send()
                    .await
                    .unwrap(),
            )
            .await,
        );
        if !state.from_peers.is_empty() {
            assert!(state.from_peers[0].peer.starts_with("Bob ("), "{state:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Bob's edit never reached Ada"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Errors are the API's error body: a damaged ticket, an unknown share.
    let r = b
        .api(Method::POST, "/peers/join")
        .json(&json!({"ticket": "sluicexyz"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let error: ErrorBody = decodes_as(&json_of(r).await);
    assert!(
        error.error.message.contains("ticket"),
        "{}",
        error.error.message
    );
    let r = a.api(Method::DELETE, "/shares/nope").send().await.unwrap();
    assert_eq!(r.status(), 404);
    let _: ErrorBody = decodes_as(&json_of(r).await);
    // Peers off: 409, said as such.
    let off = server().await;
    let r = off
        .api(Method::GET, "/workflows/x/shares")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let error: ErrorBody = decodes_as(&json_of(r).await);
    assert!(error.error.message.contains("peers are off"));
}
