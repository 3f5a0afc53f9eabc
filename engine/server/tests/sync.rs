//! Document sync over the real WebSocket: editors exchange version vectors,
//! get what they lack, send and receive live updates through the engine
//! (which persists them), see each other's presence, and bad messages
//! change nothing.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::doc::{Presence, WorkflowDoc, decode_version, encode_version};
use tokio_tungstenite::tungstenite::Message;

mod common;
use common::{Server, Socket, server};

fn flow() -> Value {
    json!({"format": "sluice.workflow/v1", "id": "shared", "name": "Shared", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "shape", "kind": "data.transform", "config": {"jq": "{a: .a}"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "shape"}, {"from": "shape", "to": "end"}]})
}

async fn send(socket: &mut Socket, v: Value) {
    socket.send(Message::text(v.to_string())).await.unwrap();
}

/// The next message of `kind` (others, e.g. relayed presence, are skipped).
async fn next_of(socket: &mut Socket, kind: &str) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .unwrap_or_else(|_| panic!("no `{kind}` within 10 s"))
            .expect("socket open")
            .unwrap();
        let Message::Text(text) = msg else { continue };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        if v["type"] == kind {
            return v;
        }
    }
}

/// Nothing of `kind` arrives within a short while.
async fn quiet(socket: &mut Socket, kind: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Some(Ok(Message::Text(text)))) =
        tokio::time::timeout_at(deadline, socket.next()).await
    {
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        assert_ne!(v["type"], kind, "unexpected {v}");
    }
}

fn bytes(v: &Value, field: &str) -> Vec<u8> {
    B64.decode(v[field].as_str().unwrap()).unwrap()
}

/// An editor: connects, subscribes from `doc`'s version, merges what the
/// engine sends, and sends back what the engine lacks.
async fn editor(s: &Server, doc: &WorkflowDoc) -> Socket {
    let mut socket = s.ws("events=none").await;
    send(
        &mut socket,
        json!({"type": "doc.subscribe", "workflow": "shared",
               "version": B64.encode(encode_version(&doc.version()))}),
    )
    .await;
    let sync = next_of(&mut socket, "doc.sync").await;
    doc.import(&bytes(&sync, "update")).unwrap();
    let theirs = decode_version(&bytes(&sync, "version")).unwrap();
    let missing = doc.updates_since(&theirs).unwrap();
    if doc.version() != theirs {
        send(
            &mut socket,
            json!({"type": "doc.update", "workflow": "shared", "update": B64.encode(missing), "ref": "catch-up"}),
        )
        .await;
        next_of(&mut socket, "doc.ack").await;
    }
    socket
}

/// Applies `edit` to `doc` and sends the operations; waits for the ack.
async fn edit(socket: &mut Socket, doc: &WorkflowDoc, edit: impl FnOnce(&mut Value), r: u32) {
    let before = doc.version();
    let mut v = doc.to_value();
    edit(&mut v);
    assert!(doc.apply(&Workflow::from_value(v).unwrap()).unwrap());
    send(
        socket,
        json!({"type": "doc.update", "workflow": "shared",
               "update": B64.encode(doc.updates_since(&before).unwrap()), "ref": r}),
    )
    .await;
    let ack = next_of(socket, "doc.ack").await;
    assert_eq!(ack["ref"], r);
}

/// An API call without a body, its JSON answer parsed.
async fn call<T: serde::de::DeserializeOwned>(
    s: &Server,
    method: reqwest::Method,
    path: &str,
) -> T {
    s.api(method, path)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn stored(s: &Server) -> Workflow {
    Workflow::from_value(read_draft(s).await.0).unwrap()
}

#[tokio::test]
async fn editors_sync_live_through_the_engine() {
    let s = server().await;
    s.put_workflow(flow()).await;

    let a_doc = WorkflowDoc::new();
    let b_doc = WorkflowDoc::new();
    let mut a = editor(&s, &a_doc).await;
    let mut b = editor(&s, &b_doc).await;
    assert_eq!(a_doc.to_value(), b_doc.to_value());
    assert_eq!(
        a_doc.to_workflow().unwrap(),
        Workflow::from_value(flow()).unwrap()
    );

    // A edits; B gets it live; A does not get its own edit back.
    edit(
        &mut a,
        &a_doc,
        |v| v["nodes"][1]["label"] = json!("from A"),
        1,
    )
    .await;
    let up = next_of(&mut b, "doc.update").await;
    b_doc.import(&bytes(&up, "update")).unwrap();
    assert_eq!(b_doc.to_value(), a_doc.to_value());
    quiet(&mut a, "doc.update").await;
    // Persisted: the API reads it (through the document).
    assert_eq!(stored(&s).await.nodes[1].label.as_deref(), Some("from A"));

    // Concurrent edits to different fields: both survive everywhere.
    let (a_before, b_before) = (a_doc.version(), b_doc.version());
    let mut va = a_doc.to_value();
    va["nodes"][1]["config"]["jq"] = json!("{a: .a, from: \"A\"}");
    a_doc.apply(&Workflow::from_value(va).unwrap()).unwrap();
    let mut vb = b_doc.to_value();
    vb["name"] = json!("Renamed by B");
    b_doc.apply(&Workflow::from_value(vb).unwrap()).unwrap();
    for (socket, doc, before, r) in [(&mut a, &a_doc, a_before, 2), (&mut b, &b_doc, b_before, 3)] {
        send(
            socket,
            json!({"type": "doc.update", "workflow": "shared",
                   "update": B64.encode(doc.updates_since(&before).unwrap()), "ref": r}),
        )
        .await;
    }
    let to_b = next_of(&mut b, "doc.update").await;
    b_doc.import(&bytes(&to_b, "update")).unwrap();
    let to_a = next_of(&mut a, "doc.update").await;
    a_doc.import(&bytes(&to_a, "update")).unwrap();
    assert_eq!(a_doc.to_value(), b_doc.to_value());
    let merged = stored(&s).await;
    assert_eq!(merged.name, "Renamed by B");
    assert_eq!(merged.nodes[1].config["jq"], json!("{a: .a, from: \"A\"}"));

    // A JSON save through the API reaches the editors as operations.
    let mut v = serde_json::to_value(&merged).unwrap();
    v["nodes"][0]["label"] = json!("saved by a script");
    s.put_workflow(v).await;
    let up = next_of(&mut a, "doc.update").await;
    a_doc.import(&bytes(&up, "update")).unwrap();
    assert_eq!(
        a_doc.to_workflow().unwrap().nodes[0].label.as_deref(),
        Some("saved by a script")
    );
}

#[tokio::test]
async fn an_editor_back_from_offline_exchanges_only_what_is_missing() {
    let s = server().await;
    s.put_workflow(flow()).await;
    let c_doc = WorkflowDoc::new();
    let c = editor(&s, &c_doc).await;
    drop(c);
    // Offline, C edits; meanwhile A edits online.
    let c_before = c_doc.version();
    let mut v = c_doc.to_value();
    v["nodes"][2]["label"] = json!("offline edit");
    c_doc.apply(&Workflow::from_value(v).unwrap()).unwrap();
    assert_ne!(c_doc.version(), c_before);
    let a_doc = WorkflowDoc::new();
    let mut a = editor(&s, &a_doc).await;
    edit(
        &mut a,
        &a_doc,
        |v| v["nodes"][0]["label"] = json!("online edit"),
        1,
    )
    .await;

    // C comes back: subscribes from its version, gets A's edit, sends its own.
    let mut c = s.ws("events=none").await;
    send(
        &mut c,
        json!({"type": "doc.subscribe", "workflow": "shared",
               "version": B64.encode(encode_version(&c_doc.version()))}),
    )
    .await;
    let sync = next_of(&mut c, "doc.sync").await;
    let missing = bytes(&sync, "update");
    // Only what C lacks (A's one edit), not the whole document.
    let everything = a_doc.updates_since(&Default::default()).unwrap();
    assert!(
        missing.len() < everything.len() / 2,
        "{} of {} bytes",
        missing.len(),
        everything.len()
    );
    let c_had = c_doc.to_value();
    c_doc.import(&missing).unwrap();
    assert_ne!(c_doc.to_value(), c_had, "A's edit arrived");
    let theirs = decode_version(&bytes(&sync, "version")).unwrap();
    send(
        &mut c,
        json!({"type": "doc.update", "workflow": "shared",
               "update": B64.encode(c_doc.updates_since(&theirs).unwrap()), "ref": "back"}),
    )
    .await;
    next_of(&mut c, "doc.ack").await;
    let up = next_of(&mut a, "doc.update").await;
    a_doc.import(&bytes(&up, "update")).unwrap();
    assert_eq!(a_doc.to_value(), c_doc.to_value());
    let wf = stored(&s).await;
    assert_eq!(wf.nodes[0].label.as_deref(), Some("online edit"));
    assert_eq!(wf.nodes[2].label.as_deref(), Some("offline edit"));
}

#[tokio::test]
async fn presence_is_relayed_and_cleared_when_a_viewer_leaves() {
    let s = server().await;
    s.put_workflow(flow()).await;
    let (a_doc, b_doc) = (WorkflowDoc::new(), WorkflowDoc::new());
    let mut a = editor(&s, &a_doc).await;
    let mut b = editor(&s, &b_doc).await;
    let mut a_presence = Presence::new(30_000);
    let mut b_view = Presence::new(30_000);

    let update = a_presence.set("ana", &json!({"node": "shape", "cursor": [10, 4]}));
    send(
        &mut a,
        json!({"type": "presence", "workflow": "shared", "update": B64.encode(update)}),
    )
    .await;
    let p = next_of(&mut b, "presence").await;
    b_view.apply(&bytes(&p, "update")).unwrap();
    assert_eq!(
        b_view.states()["ana"],
        json!({"node": "shape", "cursor": [10, 4]})
    );
    // Presence is not the document: nothing was stored.
    assert!(stored(&s).await == Workflow::from_value(flow()).unwrap());

    // A newcomer gets everyone's presence with its first sync.
    let mut c = s.ws("events=none").await;
    send(
        &mut c,
        json!({"type": "doc.subscribe", "workflow": "shared"}),
    )
    .await;
    let sync = next_of(&mut c, "doc.sync").await;
    let mut c_view = Presence::new(30_000);
    c_view.apply(&bytes(&sync, "presence")).unwrap();
    assert!(c_view.states().contains_key("ana"));

    // A leaves: the others are told.
    drop(a);
    let p = next_of(&mut b, "presence").await;
    b_view.apply(&bytes(&p, "update")).unwrap();
    assert!(
        !b_view.states().contains_key("ana"),
        "{:?}",
        b_view.states()
    );
}

#[tokio::test]
async fn bad_messages_are_answered_and_change_nothing() {
    let s = server().await;
    s.put_workflow(flow()).await;
    let doc = WorkflowDoc::new();
    let mut a = editor(&s, &doc).await;
    let before = stored(&s).await;

    send(
        &mut a,
        json!({"type": "doc.update", "workflow": "shared", "update": "%%%", "ref": 1}),
    )
    .await;
    let e = next_of(&mut a, "error").await;
    assert_eq!(e["ref"], 1);
    assert!(e["message"].as_str().unwrap().contains("base64"), "{e}");

    send(
        &mut a,
        json!({"type": "doc.update", "workflow": "shared", "update": B64.encode(b"not a loro update"), "ref": 2}),
    )
    .await;
    let e = next_of(&mut a, "error").await;
    assert_eq!(e["ref"], 2);
    assert!(e["message"].as_str().unwrap().contains("shared"), "{e}");

    // An update that would rename the workflow's id is refused.
    let other = WorkflowDoc::from_bytes(&doc.snapshot().unwrap()).unwrap();
    let from = other.version();
    let mut v = other.to_value();
    v["id"] = json!("hijacked");
    other.apply(&Workflow::from_value(v).unwrap()).unwrap();
    send(
        &mut a,
        json!({"type": "doc.update", "workflow": "shared",
               "update": B64.encode(other.updates_since(&from).unwrap()), "ref": 3}),
    )
    .await;
    let e = next_of(&mut a, "error").await;
    assert!(e["message"].as_str().unwrap().contains("hijacked"), "{e}");

    send(&mut a, json!({"type": "no.such", "workflow": "shared"})).await;
    assert!(
        next_of(&mut a, "error").await["message"]
            .as_str()
            .unwrap()
            .contains("no.such")
    );
    a.send(Message::text("{not json")).await.unwrap();
    next_of(&mut a, "error").await;

    // Still connected, and the document is what it was.
    assert_eq!(stored(&s).await, before);
    edit(
        &mut a,
        &doc,
        |v| v["nodes"][1]["label"] = json!("still works"),
        9,
    )
    .await;
    assert_eq!(
        stored(&s).await.nodes[1].label.as_deref(),
        Some("still works")
    );
}

#[tokio::test]
async fn versions_and_runs_pinned_to_them_over_the_api() {
    let s = server().await;
    s.put_workflow(flow()).await;
    let run: Value = s
        .api(reqwest::Method::POST, "/workflows/shared/runs")
        .json(&json!({"input": {"a": 1}, "wait": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let pinned = run["version"]
        .as_str()
        .expect("a pinned version")
        .to_string();
    let mut v2 = flow();
    v2["nodes"][1]["config"]["jq"] = json!("{a: .a, v: 2}");
    s.put_workflow(v2.clone()).await;

    // The run's workflow, exactly as it ran.
    let r = s
        .api(
            reqwest::Method::GET,
            &format!("/runs/{}/workflow", run["id"].as_str().unwrap()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-sluice-version"].to_str().unwrap(), pinned);
    let ran = Workflow::from_json(&r.text().await.unwrap()).unwrap();
    assert_eq!(ran, Workflow::from_value(flow()).unwrap());
    let at: Workflow = call(
        &s,
        reqwest::Method::GET,
        &format!("/workflows/shared/versions/{pinned}"),
    )
    .await;
    assert_eq!(at, ran);

    // History, then a restore that becomes the newest version.
    let list: Value = call(&s, reqwest::Method::GET, "/workflows/shared/versions").await;
    // Each PUT here also published, and a publish closes its version: two.
    let n = list.as_array().unwrap().len();
    assert_eq!(n, 2, "{list}");
    assert_eq!(list[0]["message"], "api");
    assert_eq!(list[0]["summary"], "changed shape (config.jq)", "{list}");
    assert!(
        list[n - 1]["summary"].as_str().unwrap().contains("added"),
        "{list}"
    );
    let restored: Value = call(
        &s,
        reqwest::Method::POST,
        &format!("/workflows/shared/versions/{pinned}/restore"),
    )
    .await;
    assert_eq!(stored(&s).await, ran);
    let list: Value = call(
        &s,
        reqwest::Method::GET,
        "/workflows/shared/versions?limit=1",
    )
    .await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["version"], restored["version"]);
    assert_eq!(list[0]["summary"], "changed shape (config.jq)");
    assert_eq!(list[0]["message"], format!("restore {pinned}"));

    // Not a version: a 400 that names it.
    let r = s
        .api(reqwest::Method::GET, "/workflows/shared/versions/77@1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("77@1"));
    let r = s
        .api(reqwest::Method::GET, "/workflows/nope/versions")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::NOT_FOUND);
}

/// GET the draft: its JSON and the version it is.
async fn read_draft(s: &Server) -> (Value, String) {
    let r = s
        .api(reqwest::Method::GET, "/workflows/shared")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let version = r.headers()["x-sluice-version"]
        .to_str()
        .unwrap()
        .to_string();
    (r.json().await.unwrap(), version)
}

/// PUT a draft (`query` without `?`): the status, the answer and the
/// `x-sluice-version` it names.
async fn save(s: &Server, query: &str, wf: &Value) -> (u16, Value, Option<String>) {
    let r = s
        .api(reqwest::Method::PUT, &format!("/workflows/shared?{query}"))
        .json(wf)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let version = r
        .headers()
        .get("x-sluice-version")
        .map(|v| v.to_str().unwrap().to_string());
    (status, r.json().await.unwrap(), version)
}

fn node_ids(wf: &Value) -> Vec<&str> {
    let mut ids: Vec<&str> = wf["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// A script reads the draft, an editor window changes it, then the script
/// saves what it made from its (now older) copy. With `base` (the version
/// it read), the two edits are merged, as the CRDT merges any concurrent
/// edits; without it, the save is "make the draft exactly this" and undoes
/// the window's edit, which is what lost a peer's edit before.
#[tokio::test]
async fn a_save_made_from_an_older_version_keeps_the_edits_made_since() {
    let s = server().await;
    s.put_workflow(flow()).await;
    let (mut mine, base) = read_draft(&s).await;

    // Meanwhile, in an editor window: a new node, and shape's jq changed.
    let doc = WorkflowDoc::new();
    let mut window = editor(&s, &doc).await;
    edit(
        &mut window,
        &doc,
        |v| {
            v["nodes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"id": "audit", "kind": "util.log", "config": {"message": "seen"}}));
            v["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!({"from": "shape", "to": "audit"}));
            v["nodes"][1]["config"]["jq"] = json!("{a: .a, window: true}");
        },
        1,
    )
    .await;

    // The script's change, made from what it read: a node of its own,
    // `end` gone, and a new name.
    mine["name"] = json!("Shared by a script");
    mine["nodes"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["id"] != "end");
    mine["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "notify", "kind": "output.end"}));
    mine["edges"] = json!([{"from": "t", "to": "shape"}, {"from": "shape", "to": "notify"}]);

    // A base that is not one of the workflow's versions changes nothing.
    for bad in ["77@1", "not-a-version"] {
        let (status, answer, _) = save(&s, &format!("base={bad}"), &mine).await;
        assert_eq!(status, 400, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("shared") && message.contains(bad),
            "{message}"
        );
    }
    let (now, at) = read_draft(&s).await;
    assert_eq!(node_ids(&now), ["audit", "end", "shape", "t"]);

    let (status, answer, version) = save(&s, &format!("base={base}"), &mine).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({"id": "shared", "nodes": 4, "merged": true}));
    let (merged, head) = read_draft(&s).await;
    assert_eq!(version.as_deref(), Some(head.as_str()));
    assert_ne!(head, at);
    // Both edits: the window's node and jq, the script's node, name and
    // deletion; the window's edge to `audit` and the script's to `notify`.
    assert_eq!(node_ids(&merged), ["audit", "notify", "shape", "t"]);
    assert_eq!(merged["name"], "Shared by a script");
    let shape = merged["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == "shape")
        .unwrap();
    assert_eq!(shape["config"]["jq"], "{a: .a, window: true}");
    let edges: Vec<(&str, &str)> = merged["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["from"].as_str().unwrap(), e["to"].as_str().unwrap()))
        .collect();
    for e in [("t", "shape"), ("shape", "audit"), ("shape", "notify")] {
        assert!(edges.contains(&e), "{e:?} in {edges:?}");
    }
    // The window gets the script's part live, and holds the same draft.
    let up = next_of(&mut window, "doc.update").await;
    doc.import(&bytes(&up, "update")).unwrap();
    assert_eq!(
        doc.to_workflow().unwrap(),
        Workflow::from_value(merged.clone()).unwrap()
    );

    // Saved from the version it is now: a plain save, nothing to merge.
    let mut next = merged.clone();
    next["name"] = json!("Shared, again");
    let (status, answer, version) = save(&s, &format!("base={head}"), &next).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({"id": "shared", "nodes": 4}));
    let (again, head) = read_draft(&s).await;
    assert_eq!(version.as_deref(), Some(head.as_str()));
    assert_eq!(
        Workflow::from_value(again).unwrap(),
        Workflow::from_value(next).unwrap()
    );

    // Without a base, the draft becomes exactly the body: an old copy
    // undoes what came after it.
    let (status, _, _) = save(&s, "", &mine).await;
    assert_eq!(status, 200);
    assert_eq!(node_ids(&read_draft(&s).await.0), ["notify", "shape", "t"]);
}

#[tokio::test]
async fn a_module_that_is_not_a_component_is_refused() {
    let s = server().await;
    let r = s
        .api(reqwest::Method::POST, "/modules")
        .body(b"\0asm not a component".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::BAD_REQUEST);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("not a valid WebAssembly component")
    );
}
