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
    // The editor's Run runs what the document now says (its draft).
    let plan = engine.draft("doc").await.unwrap();
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
    // Compaction runs in the background: the edit that crossed the
    // threshold did not wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let stored_doc = engine.store().load_doc("doc").await.unwrap();
        if stored_doc.snapshot.is_some() && stored_doc.updates.len() < 100 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not compacted: {} updates",
            stored_doc.updates.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
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
        .append_doc_update(
            "doc",
            &editor.updates_since(&before).unwrap(),
            &sluice_store::VersionMark {
                parent: "",
                version: &editor.head(),
                author: "11",
                message: None,
                gap_us: 0,
            },
        )
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

fn every_edit_a_version() -> Options {
    Options {
        version_gap_secs: -1,
        ..Options::default()
    }
}

#[tokio::test]
async fn runs_pin_the_version_they_ran() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), every_edit_a_version())
        .await
        .unwrap();
    save(&engine, sample("first")).await;
    let first = engine.doc_head("doc").await.unwrap();
    let run1 = engine
        .start(
            engine.workflow("doc").await.unwrap(),
            None,
            Arc::new(json!({"a": 1})),
        )
        .await
        .unwrap();
    let id1 = run1.id.clone();
    run1.wait().await;
    save(&engine, sample("second")).await;
    let second = engine.doc_head("doc").await.unwrap();
    assert_ne!(first, second);
    let run2 = engine
        .start(
            engine.workflow("doc").await.unwrap(),
            None,
            Arc::new(json!({"a": 2})),
        )
        .await
        .unwrap();
    let id2 = run2.id.clone();
    run2.wait().await;

    let row1 = engine.store().get_run(&id1).await.unwrap().unwrap();
    let row2 = engine.store().get_run(&id2).await.unwrap().unwrap();
    assert_eq!(row1.doc_version.as_deref(), Some(first.as_str()));
    assert_eq!(row2.doc_version.as_deref(), Some(second.as_str()));
    // The workflow exactly as each run ran it, from the document's history.
    assert_eq!(
        engine.workflow_at("doc", &first).await.unwrap(),
        workflow(sample("first"))
    );
    assert_eq!(
        Workflow::from_json(&row1.definition).unwrap(),
        workflow(sample("first"))
    );
    // A merged edit is pinned too: the run plans the merged JSON and its version.
    let editor = client(&engine, 21).await;
    let before = editor.version();
    let mut v = editor.to_value();
    v["nodes"][1]["label"] = json!("merged");
    editor.apply(&workflow(v.clone())).unwrap();
    engine
        .import_doc_update("doc", &editor.updates_since(&before).unwrap())
        .await
        .unwrap();
    let plan = engine.draft("doc").await.unwrap();
    let head = engine.doc_head("doc").await.unwrap();
    assert_eq!(plan.version.as_deref(), Some(head.as_str()));
    assert_eq!(engine.workflow_at("doc", &head).await.unwrap(), workflow(v));
}

#[tokio::test]
async fn history_lists_versions_and_restore_adds_one() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), every_edit_a_version())
        .await
        .unwrap();
    for label in ["one", "two", "three"] {
        engine
            .save_workflow_as(&Plan::new(workflow(sample(label))).unwrap(), Some("api"))
            .await
            .unwrap();
    }
    let h = engine.history("doc", 0, 50).await.unwrap();
    assert_eq!(h.len(), 3, "{h:#?}");
    assert_eq!(h[0].summary, "changed shape (label)");
    assert!(
        h[2].summary.contains("added out, shape, t"),
        "{}",
        h[2].summary
    );
    assert_eq!(h[0].message.as_deref(), Some("api"));
    // Paging.
    let page = engine.history("doc", 1, 1).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].version, h[1].version);

    let oldest = h[2].version.clone();
    let head = engine.restore_version("doc", &oldest).await.unwrap();
    assert_eq!(stored(&engine).await, workflow(sample("one")));
    let h2 = engine.history("doc", 0, 50).await.unwrap();
    assert_eq!(h2.len(), 4);
    assert_eq!(h2[0].version, head);
    assert_eq!(
        h2[0].message.as_deref(),
        Some(format!("restore {oldest}").as_str())
    );
    // Nothing was rewritten: the versions in between are still there.
    assert_eq!(
        engine.workflow_at("doc", &h[0].version).await.unwrap(),
        workflow(sample("three"))
    );
    // After a restart too.
    engine.drop_doc_cache().await;
    assert_eq!(engine.history("doc", 0, 50).await.unwrap().len(), 4);

    // Unknown versions and workflows are named.
    let e = engine
        .workflow_at("doc", "5@999")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("5@999"), "{e}");
    assert!(engine.history("nope", 0, 5).await.is_err());
}

#[tokio::test]
async fn an_edit_based_on_an_old_version_keeps_newer_edits() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    save(&engine, sample("first")).await;
    let base = engine.doc_head("doc").await.unwrap();
    // Meanwhile an editor renames the workflow.
    let editor = client(&engine, 31).await;
    let before = editor.version();
    let mut v = editor.to_value();
    v["name"] = json!("Renamed in the editor");
    editor.apply(&workflow(v)).unwrap();
    engine
        .import_doc_update("doc", &editor.updates_since(&before).unwrap())
        .await
        .unwrap();
    // A file written from `base` changes the jq program.
    let mut file = sample("first");
    file["nodes"][1]["config"]["jq"] = json!("{a: .a, b: 2}");
    assert!(
        engine
            .apply_edit_at("doc", &base, &workflow(file), "file")
            .await
            .unwrap()
    );
    let now = stored(&engine).await;
    assert_eq!(now.name, "Renamed in the editor");
    assert_eq!(now.nodes[1].config["jq"], json!("{a: .a, b: 2}"));
}

#[tokio::test]
async fn subscribers_get_every_change_with_its_origin() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let mut events = engine.doc_events();
    save(&engine, sample("first")).await;
    let ev = events.recv().await.unwrap();
    assert_eq!((ev.workflow(), ev.origin()), ("doc", 0));
    let mirror = WorkflowDoc::new();
    let sluice_runtime::executor::DocEvent::Update { bytes, .. } = ev else {
        panic!("an update")
    };
    mirror.import(&bytes).unwrap();
    assert_eq!(mirror.to_workflow().unwrap(), workflow(sample("first")));

    let editor = client(&engine, 41).await;
    let before = editor.version();
    let mut v = editor.to_value();
    v["nodes"][0]["label"] = json!("go");
    editor.apply(&workflow(v.clone())).unwrap();
    engine
        .import_doc_update_from("doc", &editor.updates_since(&before).unwrap(), 77)
        .await
        .unwrap();
    let ev = events.recv().await.unwrap();
    assert_eq!(ev.origin(), 77);
    let sluice_runtime::executor::DocEvent::Update { bytes, .. } = ev else {
        panic!("an update")
    };
    mirror.import(&bytes).unwrap();
    assert_eq!(mirror.to_workflow().unwrap(), workflow(v));
}

#[tokio::test]
async fn one_authors_burst_of_edits_is_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    // (Drafts, as the API stores them: a publish closes a version.)
    for label in ["a", "b", "c"] {
        engine
            .save_draft(&Plan::new(workflow(sample(label))).unwrap(), Some("api"))
            .await
            .unwrap();
    }
    let h = engine.history("doc", 0, 50).await.unwrap();
    assert_eq!(h.len(), 1, "{h:#?}");
    assert_eq!(h[0].edits, 3);
    assert_eq!(h[0].parent, "");
    assert_eq!(
        engine.workflow_at("doc", &h[0].version).await.unwrap(),
        workflow(sample("c"))
    );
    // Another origin starts a new version.
    engine
        .save_workflow_as(&Plan::new(workflow(sample("d"))).unwrap(), Some("file"))
        .await
        .unwrap();
    let h = engine.history("doc", 0, 50).await.unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].summary, "changed shape (label)");
    assert_eq!(h[0].parent, h[1].version);
}

/// The child process of [`a_crash_during_compaction_loses_nothing`]: merges
/// edits one by one, printing each once it is durable, until it is killed.
async fn crash_child(dir: &str) {
    use std::io::Write;
    let engine = Engine::open(std::path::Path::new(dir), Options::default())
        .await
        .unwrap();
    let editor = client(&engine, rand_peer()).await;
    let start: usize = std::env::var("SLUICE_CRASH_FROM").unwrap().parse().unwrap();
    for i in start.. {
        let before = editor.version();
        let mut v = editor.to_value();
        v["vars"][format!("e{i}")] = json!(i);
        editor.apply(&workflow(v)).unwrap();
        engine
            .import_doc_update("doc", &editor.updates_since(&before).unwrap())
            .await
            .unwrap();
        let mut out = std::io::stdout().lock();
        writeln!(out, "acked {i}").unwrap();
        out.flush().unwrap();
    }
}

fn rand_peer() -> u64 {
    // Distinct per process: two children must never share a Loro peer id.
    u64::from(std::process::id()) << 20 | 0x5eed
}

/// A big document, so a compaction takes long enough to be killed in.
fn big_sample() -> Value {
    let mut v = sample("big");
    let nodes = v["nodes"].as_array_mut().unwrap();
    for i in 0..300 {
        nodes.push(
            json!({"id": format!("pad{i}"), "kind": "data.set", "label": "x".repeat(200),
                          "config": {"values": {"n": i, "text": "y".repeat(200)}}}),
        );
    }
    v
}

#[tokio::test]
async fn a_crash_during_compaction_loses_nothing() {
    if let Ok(dir) = std::env::var("SLUICE_CRASH_CHILD") {
        return crash_child(&dir).await;
    }
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
        save(&engine, big_sample()).await;
    }
    let mut acked = 0usize;
    // Kill points around the compaction threshold (every 100 merges, in the
    // background), and between.
    for (round, after) in [101usize, 102, 103, 105, 110, 140, 199, 201]
        .into_iter()
        .enumerate()
    {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "a_crash_during_compaction_loses_nothing",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SLUICE_CRASH_CHILD", dir.path())
            .env("SLUICE_CRASH_FROM", acked.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let target = acked + after;
        let mut last = None;
        for line in stdout.lines() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("acked ") {
                let n: usize = n.parse().unwrap();
                last = Some(n);
                if n + 1 >= target {
                    break;
                }
            }
        }
        // SIGKILL: no destructors, no flush, whatever was in flight stays so.
        child.kill().unwrap();
        child.wait().unwrap();
        let last = last.unwrap_or_else(|| panic!("round {round}: the child acked nothing"));
        acked = last + 1;

        // Everything acknowledged is there, in the document and the JSON.
        let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
        let doc = client(&engine, 99).await;
        let vars = doc.to_value()["vars"].clone();
        for i in 0..acked {
            assert_eq!(
                vars[format!("e{i}")],
                json!(i),
                "round {round}: edit {i} lost"
            );
        }
        let stored = stored(&engine).await;
        assert_eq!(stored.nodes.len(), 303);
        let json_vars = serde_json::to_value(&stored).unwrap()["vars"].clone();
        assert_eq!(json_vars[format!("e{}", acked - 1)], json!(acked - 1));
    }
}
