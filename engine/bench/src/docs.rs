//! `cargo xtask bench docs`: a 1,000-node workflow document in SQLite —
//! load time, one remote edit merged and persisted, and the stored size
//! after 10,000 edits (with compaction).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;
use sluice_model::Workflow;
use sluice_model::doc::WorkflowDoc;
use sluice_runtime::{Engine, Options, Plan};

const NODES: usize = 1000;
const EDITS: usize = 10_000;

fn big_workflow() -> Result<Workflow> {
    let mut nodes = vec![json!({"id": "start", "kind": "trigger.manual"})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..NODES - 1 {
        let id = format!("n{i}");
        let node = if i % 4 == 0 {
            json!({"id": id, "kind": "data.transform", "position": [i as f64 * 10.0, 0.0],
                   "config": {"jq": format!("{{id: .id, step: {i}}}\n| .extra = \"{}\"", "x".repeat(40))}})
        } else {
            json!({"id": id, "kind": "data.set", "label": format!("Set {i}"), "position": [i as f64 * 10.0, 50.0],
                   "config": {"values": {"n": "{{ input.n }}", "step": i, "note": "some text to carry"}, "keep_input": true}})
        };
        nodes.push(node);
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    Ok(Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": "big", "name": "Big",
        "nodes": nodes, "edges": edges
    }))?)
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// One edit on the editor's copy, made directly on its Loro document (as
/// the editor's canvas does when a node is dragged); returns the update.
fn edit(editor: &WorkflowDoc, i: usize) -> Result<Vec<u8>> {
    let before = editor.version();
    let n = 1 + (i * 7919) % (NODES - 1);
    let id = format!("n{}", n - 1);
    let nodes = editor.loro().get_map("nodes");
    let Some(loro::ValueOrContainer::Container(loro::Container::Map(node))) = nodes.get(&id) else {
        anyhow::bail!("node {id} missing");
    };
    node.insert("position", json!([i as f64, (i % 97) as f64]).to_string())?;
    editor.loro().commit();
    Ok(editor.updates_since(&before)?)
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Every edit its own version: the worst case for the version index
    // (each merge writes a row) and for listing the history.
    let options = Options {
        version_gap_secs: -1,
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await?;
    let wf = big_workflow()?;
    let plan = Plan::new(wf)?;
    engine.save_workflow(&plan).await?;

    let mut loads = Vec::new();
    for _ in 0..20 {
        engine.drop_doc_cache().await;
        let t = Instant::now();
        engine.doc_version("big").await?;
        loads.push(t.elapsed());
    }

    let (bytes, _) = engine.doc_updates("big", &[]).await?;
    let editor = WorkflowDoc::from_bytes(&bytes)?;
    editor.loro().set_peer_id(4242)?;
    let mut merges = Vec::with_capacity(EDITS);
    for i in 0..EDITS {
        let update = edit(&editor, i)?;
        let t = Instant::now();
        engine.import_doc_update("big", &update).await?;
        merges.push(t.elapsed());
    }
    let size = engine.doc_size("big").await?;
    let stored = engine
        .store()
        .get_workflow("big")
        .await?
        .unwrap_or_default();
    engine.drop_doc_cache().await;
    let t = Instant::now();
    engine.doc_version("big").await?;
    let load_after = t.elapsed();
    let mut listings = Vec::new();
    let mut listed = 0;
    for _ in 0..20 {
        let t = Instant::now();
        listed = engine.history("big", 0, 50).await?.len();
        listings.push(t.elapsed());
    }
    anyhow::ensure!(listed == 50, "history lists {listed} versions");
    let mut views = Vec::new();
    let old = engine.history("big", 5_000, 1).await?;
    for _ in 0..20 {
        let t = Instant::now();
        engine.workflow_at("big", &old[0].version).await?;
        views.push(t.elapsed());
    }
    let (bytes, _) = engine.doc_updates("big", &[]).await?;
    anyhow::ensure!(
        WorkflowDoc::from_bytes(&bytes)?.to_value() == editor.to_value(),
        "the engine's document differs from the editor's"
    );

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("workflow document benchmark ({NODES} nodes; release build):");
    println!(
        "  load from SQLite (snapshot + updates), p50 of 20: {:>7.2} ms   (target < 50 ms)",
        ms(p50(loads))
    );
    println!(
        "  one remote edit merged + persisted, p50 / p99 of {EDITS}: {:.3} / {:.3} ms   (target < 1 ms)",
        ms(p50(merges.clone())),
        ms(p99(merges))
    );
    println!(
        "  document on disk after {EDITS} edits: {:.1} KiB (workflow JSON: {:.1} KiB); load then: {:.2} ms",
        size as f64 / 1024.0,
        stored.len() as f64 / 1024.0,
        ms(load_after)
    );
    println!(
        "  history: newest 50 of {} versions with summaries, p50 of 20: {:.2} ms; the workflow as of version 5,000: {:.2} ms",
        EDITS + 1,
        ms(p50(listings)),
        ms(p50(views))
    );
    Ok(())
}
