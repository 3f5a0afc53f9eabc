//! Workflow documents in the engine: saves become minimal document updates
//! stored with the workflow JSON in one transaction, remote updates merge
//! and persist, bad ones change nothing, and compaction keeps everything.

use std::sync::Arc;

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::doc::WorkflowDoc;
use sluice_runtime::{Engine, Options, Plan};

fn workflow(v: Value) -> Workflow {
    Workflow::from_value(v).unwrap()
}

fn sample(label: &str) -> Value {
    json!({
        "format": "sluice.workflow/v1", "id": "doc", "name": "Doc",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "shape", "kind": "data.transform", "label": label, "config": {"jq": "{a: .a}"}},
            {"id": "out", "kind": "output.end"}
        ],
        "edges": [{"from": "t", "to": "shape"}, {"from": "shape", "to": "out"}]
    })
}

async fn save(engine: &Engine, v: Value) {
    engine
        .save_workflow(&Plan::new(workflow(v)).unwrap())
        .await
        .unwrap();
}

/// The workflow JSON as stored, once the engine has written what its
/// document holds (it does so 200 ms after an edit, or when asked).
async fn stored(engine: &Engine) -> Workflow {
    engine.materialize("doc").await.unwrap();
    Workflow::from_json(&engine.store().get_workflow("doc").await.unwrap().unwrap()).unwrap()
}

/// The engine's document, as a client would get it.
async fn client(engine: &Engine, peer: u64) -> WorkflowDoc {
    let (bytes, _) = engine.doc_updates("doc", &[]).await.unwrap();
    let d = WorkflowDoc::from_bytes(&bytes).unwrap();
    d.loro().set_peer_id(peer).unwrap();
    d
}

#[tokio::test]
async fn saves_are_minimal_updates_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    save(&engine, sample("first")).await;
    let size_one = engine.doc_size("doc").await.unwrap();
    save(&engine, sample("second")).await;
    let grew = engine.doc_size("doc").await.unwrap() - size_one;
    assert!(grew < 200, "a one-field change stored {grew} bytes");
    // The same JSON again stores no update.
    save(&engine, sample("second")).await;
    assert_eq!(engine.doc_size("doc").await.unwrap() - size_one, grew);

    // A new engine on the same data dir loads the document from SQLite.
    drop(engine);
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let doc = client(&engine, 7).await;
    assert_eq!(doc.to_workflow().unwrap(), workflow(sample("second")));
}

#[tokio::test]
async fn a_remote_edit_merges_persists_and_replans() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    save(&engine, sample("first")).await;
    let editor = client(&engine, 42).await;
    let before = editor.version();
    let mut v = editor.to_value();
    v["nodes"][1]["config"]["jq"] = json!("{a: .a, b: 2}");
    editor.apply(&workflow(v)).unwrap();
    let update = editor.updates_since(&before).unwrap();
    assert!(engine.import_doc_update("doc", &update).await.unwrap());
    assert!(
        !engine.import_doc_update("doc", &update).await.unwrap(),
        "the same update twice changes nothing"
    );
    let wf = stored(&engine).await;
    assert_eq!(wf.nodes[1].config["jq"], "{a: .a, b: 2}");
    // The engine runs what the document now says.
    let plan = engine.workflow("doc").await.unwrap();
    let r = engine
        .start(plan, None, Arc::new(json!({"a": 1})))
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(r.output["out"], json!({"a": 1, "b": 2}));

    // A concurrent API save and the editor's edit both survive.
    let before = editor.version();
    let mut v = editor.to_value();
    v["nodes"][1]["label"] = json!("from the editor");
    editor.apply(&workflow(v)).unwrap();
    let mut api = sample("first");
    api["nodes"][1]["config"]["jq"] = json!("{a: .a, b: 2}");
    api["name"] = json!("Renamed by the API");
    save(&engine, api).await;
    engine
        .import_doc_update("doc", &editor.updates_since(&before).unwrap())
        .await
        .unwrap();
    let wf = stored(&engine).await;
    assert_eq!(wf.name, "Renamed by the API");
    assert_eq!(wf.nodes[1].label.as_deref(), Some("from the editor"));
}

#[tokio::test]
async fn bad_updates_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    save(&engine, sample("first")).await;
    let json_before = engine.store().get_workflow("doc").await.unwrap();
    let size_before = engine.doc_size("doc").await.unwrap();
    let e = engine
        .import_doc_update("doc", b"certainly not a loro update")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("document"), "{e}");
    // An update that would change the workflow's id is refused too.
    let editor = client(&engine, 9).await;
    let before = editor.version();
    let mut v = editor.to_value();
    v["id"] = json!("other");
    editor.apply(&workflow(v)).unwrap();
    let e = engine
        .import_doc_update("doc", &editor.updates_since(&before).unwrap())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("renames"), "{e}");
    assert_eq!(
        engine.store().get_workflow("doc").await.unwrap(),
        json_before
    );
    assert_eq!(engine.doc_size("doc").await.unwrap(), size_before);
    let fresh = client(&engine, 10).await;
    assert_eq!(fresh.to_workflow().unwrap(), workflow(sample("first")));
}

#[tokio::test]
async fn compaction_keeps_every_edit() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    for i in 0..250 {
        save(&engine, sample(&format!("edit {i}"))).await;
    }
    let stored_doc = engine.store().load_doc("doc").await.unwrap();
    assert!(stored_doc.snapshot.is_some(), "compacted");
    assert!(
        stored_doc.updates.len() < 100,
        "{}",
        stored_doc.updates.len()
    );
    // Everything is still there after a restart.
    engine.drop_doc_cache().await;
    let doc = client(&engine, 3).await;
    assert_eq!(doc.to_workflow().unwrap(), workflow(sample("edit 249")));
    assert_eq!(stored(&engine).await, workflow(sample("edit 249")));
}

#[tokio::test]
async fn a_workflow_stored_before_documents_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let text = workflow(sample("legacy")).to_json_pretty();
    engine
        .store()
        .put_workflow("doc", "Doc", &text)
        .await
        .unwrap();
    let doc = client(&engine, 5).await;
    assert_eq!(doc.to_workflow().unwrap(), workflow(sample("legacy")));
    assert!(engine.store().load_doc("doc").await.unwrap().updates.len() == 1);
}

#[tokio::test]
async fn merged_edits_reach_the_stored_json_lazily_and_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    save(&engine, sample("first")).await;
    let editor = client(&engine, 11).await;
    let before = editor.version();
    let mut v = editor.to_value();
    v["nodes"][1]["label"] = json!("dragged");
    editor.apply(&workflow(v)).unwrap();
    engine
        .import_doc_update("doc", &editor.updates_since(&before).unwrap())
        .await
        .unwrap();
    // Written shortly after, without anyone asking.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = engine.store().get_workflow("doc").await.unwrap().unwrap();
        if Workflow::from_json(&text).unwrap().nodes[1]
            .label
            .as_deref()
            == Some("dragged")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never materialized");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // A crash between the update and the JSON: the next start catches up.
    let before = editor.version();
    let mut v = editor.to_value();
    v["nodes"][1]["label"] = json!("after the crash");
    editor.apply(&workflow(v)).unwrap();
    engine
        .store()
        .append_doc_update("doc", &editor.updates_since(&before).unwrap())
        .await
        .unwrap();
    drop(engine);
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let text = engine.store().get_workflow("doc").await.unwrap().unwrap();
    assert_eq!(
        Workflow::from_json(&text).unwrap().nodes[1]
            .label
            .as_deref(),
        Some("after the crash")
    );
}
