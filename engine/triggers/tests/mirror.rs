//! The workflows folder with real files and real notify watches: document
//! edits reach the files, file edits reach the documents, both at once keep
//! both, garbage changes nothing, and the engine's own writes never echo.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::doc::WorkflowDoc;
use sluice_runtime::{Engine, Options, Plan};
use sluice_triggers::{Mirror, Report};
use tokio::sync::broadcast::Receiver;

fn flow(id: &str) -> Value {
    json!({"format": "sluice.workflow/v1", "id": id, "name": "Mirrored", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "shape", "kind": "data.transform", "config": {"jq": "{a: .a}"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "shape"}, {"from": "shape", "to": "end"}]})
}

struct Setup {
    _data: tempfile::TempDir,
    _folder: tempfile::TempDir,
    engine: Engine,
    dir: PathBuf,
    reports: Receiver<Report>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn setup() -> Setup {
    let data = tempfile::tempdir().unwrap();
    let folder = tempfile::tempdir().unwrap();
    let engine = Engine::open(data.path(), Options::default()).await.unwrap();
    let dir = folder.path().canonicalize().unwrap();
    let (reports, task) = start(&engine, &dir);
    Setup {
        _data: data,
        _folder: folder,
        engine,
        dir,
        reports,
        task,
    }
}

fn start(engine: &Engine, dir: &Path) -> (Receiver<Report>, tokio::task::JoinHandle<()>) {
    let mirror = Mirror::new(engine.clone(), dir).unwrap();
    let reports = mirror.reports();
    let task = tokio::spawn(async move {
        mirror.run().await.unwrap();
    });
    (reports, task)
}

/// The next report that `pick` accepts (others are skipped).
async fn wait_for(
    reports: &mut Receiver<Report>,
    what: &str,
    pick: impl Fn(&Report) -> bool,
) -> Report {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, reports.recv()).await {
            Ok(Ok(r)) if pick(&r) => return r,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("reports: {e}"),
            Err(_) => panic!("no {what} within 10 s"),
        }
    }
}

/// No report that `pick` accepts within half a second.
async fn none_of(reports: &mut Receiver<Report>, pick: impl Fn(&Report) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Ok(r)) = tokio::time::timeout_at(deadline, reports.recv()).await {
        assert!(!pick(&r), "unexpected {r:?}");
    }
}

async fn save(engine: &Engine, v: Value) {
    engine
        .save_workflow(&Plan::new(Workflow::from_value(v).unwrap()).unwrap())
        .await
        .unwrap();
}

async fn stored(engine: &Engine, id: &str) -> Workflow {
    let (text, _) = engine.workflow_text(id).await.unwrap().unwrap();
    Workflow::from_json(&text).unwrap()
}

fn read(dir: &Path, id: &str) -> Workflow {
    Workflow::from_json(&std::fs::read_to_string(dir.join(format!("{id}.flow.json"))).unwrap())
        .unwrap()
}

/// Writes a file the way an editor would (in place, its own formatting).
fn write(dir: &Path, id: &str, v: &Value) {
    std::fs::write(
        dir.join(format!("{id}.flow.json")),
        serde_json::to_string(v).unwrap(),
    )
    .unwrap();
}

fn written(id: &str) -> impl Fn(&Report) -> bool + '_ {
    move |r| matches!(r, Report::Written { id: w } if w == id)
}

fn read_in(id: &str) -> impl Fn(&Report) -> bool + '_ {
    move |r| matches!(r, Report::Read { id: w, .. } if w == id)
}

#[tokio::test]
async fn document_edits_reach_the_file_and_file_edits_the_document() {
    let mut s = setup().await;
    save(&s.engine, flow("orders")).await;
    wait_for(&mut s.reports, "the file", written("orders")).await;
    let text = std::fs::read_to_string(s.dir.join("orders.flow.json")).unwrap();
    assert_eq!(
        Workflow::from_json(&text).unwrap(),
        Workflow::from_value(flow("orders")).unwrap()
    );
    // Stable formatting: the canonical pretty JSON, ending in a newline.
    assert!(
        text.ends_with("}\n") && text.contains("\n  \"nodes\": ["),
        "{text}"
    );
    // Our own write did not come back as an edit.
    none_of(&mut s.reports, |r| matches!(r, Report::Read { .. })).await;

    // A text editor changes a label: the document gets it.
    let mut v = flow("orders");
    v["nodes"][1]["label"] = json!("edited on disk");
    write(&s.dir, "orders", &v);
    wait_for(&mut s.reports, "the edit read", read_in("orders")).await;
    // Then the file is rewritten in the canonical formatting.
    wait_for(&mut s.reports, "the rewrite", written("orders")).await;
    assert_eq!(
        stored(&s.engine, "orders").await.nodes[1].label.as_deref(),
        Some("edited on disk")
    );
    let h = s.engine.history("orders", 0, 1).await.unwrap();
    assert_eq!(h[0].message.as_deref(), Some("file"));
    assert_eq!(h[0].summary, "changed shape (label)");

    // A document edit rewrites the file, and only that part of it changes.
    let before = std::fs::read_to_string(s.dir.join("orders.flow.json")).unwrap();
    let mut v2 = serde_json::to_value(stored(&s.engine, "orders").await).unwrap();
    v2["nodes"][2]["label"] = json!("done");
    save(&s.engine, v2).await;
    wait_for(&mut s.reports, "the rewrite", written("orders")).await;
    let after = std::fs::read_to_string(s.dir.join("orders.flow.json")).unwrap();
    // A git diff shows two lines: `"kind": …` gains a comma, `"label"` is new.
    let (b, a): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    let prefix = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
    let suffix = b
        .iter()
        .rev()
        .zip(a.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    assert_eq!(a.len(), b.len() + 1, "{after}");
    assert_eq!(a.len() - prefix - suffix, 2, "{after}");
    assert_eq!(
        read(&s.dir, "orders").nodes[2].label.as_deref(),
        Some("done")
    );
}

#[tokio::test]
async fn a_file_edit_and_a_document_edit_at_the_same_moment_both_survive() {
    let mut s = setup().await;
    save(&s.engine, flow("both")).await;
    wait_for(&mut s.reports, "the file", written("both")).await;

    // An editor renames the workflow while someone edits the file's jq.
    let (bytes, _) = s.engine.doc_updates("both", &[]).await.unwrap();
    let editor = WorkflowDoc::from_bytes(&bytes).unwrap();
    let before = editor.version();
    let mut v = editor.to_value();
    v["name"] = json!("Renamed in the editor");
    editor.apply(&Workflow::from_value(v).unwrap()).unwrap();
    let mut on_disk = flow("both");
    on_disk["nodes"][1]["config"]["jq"] = json!("{a: .a, b: .b}");
    write(&s.dir, "both", &on_disk);
    s.engine
        .import_doc_update("both", &editor.updates_since(&before).unwrap())
        .await
        .unwrap();

    // Both end up in the document and in the file.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let doc = stored(&s.engine, "both").await;
        let file = read(&s.dir, "both");
        let done = |w: &Workflow| {
            w.name == "Renamed in the editor" && w.nodes[1].config["jq"] == json!("{a: .a, b: .b}")
        };
        if done(&doc) && done(&file) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "doc {doc:?}\nfile {file:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn garbage_on_disk_is_reported_and_changes_nothing() {
    let mut s = setup().await;
    save(&s.engine, flow("g")).await;
    wait_for(&mut s.reports, "the file", written("g")).await;
    let path = s.dir.join("g.flow.json");

    std::fs::write(
        &path,
        "{\n  \"format\": \"sluice.workflow/v1\",\n  \"id\": \"g\",\n  oops\n}",
    )
    .unwrap();
    let r = wait_for(&mut s.reports, "a report", |r| {
        matches!(r, Report::Invalid { .. })
    })
    .await;
    let Report::Invalid { file, message } = &r else {
        unreachable!()
    };
    assert_eq!(file, &path);
    assert!(message.contains("line 4"), "{message}");
    assert_eq!(
        stored(&s.engine, "g").await,
        Workflow::from_value(flow("g")).unwrap()
    );
    // The user's file is left for them to fix, even when the workflow changes.
    let mut v = flow("g");
    v["name"] = json!("changed meanwhile");
    save(&s.engine, v.clone()).await;
    none_of(&mut s.reports, written("g")).await;
    assert!(std::fs::read_to_string(&path).unwrap().contains("oops"));

    // Valid JSON that is not a valid workflow: reported with the problem.
    let mut bad = v.clone();
    bad["nodes"][1]["kind"] = json!("no.such.kind");
    write(&s.dir, "g", &bad);
    let r = wait_for(&mut s.reports, "a report", |r| {
        matches!(r, Report::Invalid { .. })
    })
    .await;
    assert!(r.to_string().contains("no.such.kind"), "{r}");
    // A file whose id is not its name.
    write(&s.dir, "g", &flow("other"));
    let r = wait_for(&mut s.reports, "a report", |r| {
        matches!(r, Report::Invalid { .. })
    })
    .await;
    assert!(r.to_string().contains("`other`"), "{r}");
    assert_eq!(stored(&s.engine, "g").await.name, "changed meanwhile");

    // Fixed: read in.
    let mut fixed = v;
    fixed["nodes"][0]["label"] = json!("fixed");
    write(&s.dir, "g", &fixed);
    wait_for(&mut s.reports, "the fix read", read_in("g")).await;
    assert_eq!(
        stored(&s.engine, "g").await.nodes[0].label.as_deref(),
        Some("fixed")
    );
}

#[tokio::test]
async fn new_files_import_and_deleted_files_keep_their_workflow() {
    let mut s = setup().await;
    write(&s.dir, "fresh", &flow("fresh"));
    let r = wait_for(&mut s.reports, "the import", read_in("fresh")).await;
    assert_eq!(
        r,
        Report::Read {
            id: "fresh".into(),
            created: true
        }
    );
    assert_eq!(
        stored(&s.engine, "fresh").await,
        Workflow::from_value(flow("fresh")).unwrap()
    );

    std::fs::remove_file(s.dir.join("fresh.flow.json")).unwrap();
    wait_for(
        &mut s.reports,
        "the deletion",
        |r| matches!(r, Report::FileDeleted { id } if id == "fresh"),
    )
    .await;
    assert!(s.engine.workflow_text("fresh").await.unwrap().is_some());
    // The file comes back at the workflow's next change.
    let mut v = flow("fresh");
    v["name"] = json!("still here");
    save(&s.engine, v).await;
    wait_for(&mut s.reports, "the file", written("fresh")).await;
    assert_eq!(read(&s.dir, "fresh").name, "still here");

    // Deleting the workflow deletes its file.
    s.engine.delete_workflow("fresh").await.unwrap();
    wait_for(
        &mut s.reports,
        "the removal",
        |r| matches!(r, Report::Removed { id } if id == "fresh"),
    )
    .await;
    assert!(!s.dir.join("fresh.flow.json").exists());
}

#[tokio::test]
async fn at_start_files_edited_while_down_are_read_and_stale_files_rewritten() {
    let mut s = setup().await;
    save(&s.engine, flow("a")).await;
    save(&s.engine, flow("b")).await;
    wait_for(&mut s.reports, "a", written("a")).await;
    wait_for(&mut s.reports, "b", written("b")).await;
    s.task.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;

    // While the mirror is down: a's file is edited, b's workflow is.
    let mut a = flow("a");
    a["nodes"][1]["label"] = json!("edited while down");
    write(&s.dir, "a", &a);
    let mut b = flow("b");
    b["name"] = json!("changed while down");
    save(&s.engine, b).await;

    let (mut reports, task) = start(&s.engine, &s.dir);
    s.task = task;
    wait_for(&mut reports, "a read", read_in("a")).await;
    wait_for(&mut reports, "b written", written("b")).await;
    assert_eq!(
        stored(&s.engine, "a").await.nodes[1].label.as_deref(),
        Some("edited while down")
    );
    assert_eq!(read(&s.dir, "b").name, "changed while down");
    // And b's file was not read back as an edit of b.
    assert_eq!(stored(&s.engine, "b").await.name, "changed while down");
}

/// The label of node `shape` in the published version (what runs).
async fn published_label(engine: &Engine, id: &str) -> Option<String> {
    engine.workflow(id).await.unwrap().workflow.nodes[1]
        .label
        .clone()
}

#[tokio::test]
async fn a_file_edit_is_the_draft_unless_file_edits_publish() {
    let mut s = setup().await;
    save(&s.engine, flow("orders")).await;
    wait_for(&mut s.reports, "the file", written("orders")).await;
    let mut v = flow("orders");
    v["nodes"][1]["label"] = json!("edited on disk");
    write(&s.dir, "orders", &v);
    wait_for(&mut s.reports, "the edit read", read_in("orders")).await;
    assert_eq!(
        stored(&s.engine, "orders").await.nodes[1].label.as_deref(),
        Some("edited on disk")
    );
    assert_eq!(published_label(&s.engine, "orders").await, None, "a draft");
    // A new file is a new workflow's draft: nothing of it runs.
    write(&s.dir, "fresh", &flow("fresh"));
    wait_for(&mut s.reports, "the new file read", read_in("fresh")).await;
    assert!(matches!(
        s.engine.workflow("fresh").await,
        Err(sluice_runtime::executor::Error::NotPublished(_))
    ));

    // `[workflows] publish_file_edits = true`: a file edit is what runs.
    let data = tempfile::tempdir().unwrap();
    let folder = tempfile::tempdir().unwrap();
    let mut options = Options::default();
    options.settings.workflows.publish_file_edits = true;
    let engine = Engine::open(data.path(), options).await.unwrap();
    let dir = folder.path().canonicalize().unwrap();
    let (mut reports, task) = start(&engine, &dir);
    save(&engine, flow("orders")).await;
    wait_for(&mut reports, "the file", written("orders")).await;
    write(&dir, "orders", &v);
    wait_for(&mut reports, "the edit read", read_in("orders")).await;
    assert_eq!(
        published_label(&engine, "orders").await.as_deref(),
        Some("edited on disk")
    );
    task.abort();
}
