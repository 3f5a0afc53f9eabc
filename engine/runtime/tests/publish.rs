//! Drafts and publish on the real engine: what runs is the published
//! version; a draft with problems cannot be published; a workflow that
//! publishes by itself does so only when its draft is valid and idle.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::executor::Error;
use sluice_runtime::{Engine, Options, Plan};

fn flow(tag: &str, settings: Value) -> Workflow {
    Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "w", "settings": settings,
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "tag", "kind": "data.set", "config": {"values": {"tag": tag}}}],
        "edges": [{"from": "t", "to": "tag"}]}),
    )
    .unwrap()
}

/// The tag of the plan that runs (None: nothing published).
async fn live_tag(engine: &Engine) -> Option<String> {
    match engine.workflow("w").await {
        Ok(plan) => plan.workflow.nodes[1].config["values"]["tag"]
            .as_str()
            .map(str::to_string),
        Err(Error::NotPublished(_)) => None,
        Err(e) => panic!("{e}"),
    }
}

async fn open() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    (dir, engine)
}

#[tokio::test]
async fn a_draft_with_problems_is_not_published_and_what_runs_stays() {
    let (_dir, engine) = open().await;
    let v1 = flow("v1", json!({}));
    engine
        .save_workflow(&Plan::new(v1.clone()).unwrap())
        .await
        .unwrap();
    assert_eq!(live_tag(&engine).await.as_deref(), Some("v1"));

    // An edit made elsewhere (an editor, a file) that does not validate.
    let mut bad = v1.clone();
    bad.nodes[1].kind = "flow.iff".into();
    let base = engine.doc_head("w").await.unwrap();
    assert!(
        engine
            .apply_edit_at("w", &base, &bad, "test")
            .await
            .unwrap()
    );

    match engine.publish("w", None).await {
        Err(Error::Invalid(invalid)) => {
            assert_eq!(invalid.0[0].node.as_deref(), Some("tag"), "{invalid}");
            assert_eq!(invalid.0[0].field.as_deref(), Some("kind"), "{invalid}");
        }
        other => panic!("published a draft with problems: {other:?}"),
    }
    assert_eq!(live_tag(&engine).await.as_deref(), Some("v1"));
    let state = engine.publish_state("w").await.unwrap();
    assert!(!state.up_to_date() && state.published, "{state:?}");
    assert_eq!(state.problems.len(), 1, "{state:?}");
    assert!(matches!(engine.draft("w").await, Err(Error::Invalid(_))));

    // Unpublished: nothing runs by id; publishing the draft still refused.
    assert!(engine.unpublish("w").await.unwrap());
    assert!(!engine.unpublish("w").await.unwrap());
    assert_eq!(live_tag(&engine).await, None);
    assert!(matches!(
        engine.unpublish("nope").await,
        Err(Error::WorkflowNotFound(_))
    ));
}

/// Waits (at most `within`) until the live tag is `want`.
async fn wait_live(engine: &Engine, want: Option<&str>, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if live_tag(engine).await.as_deref() == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "live tag {:?}, want {want:?} within {within:?}",
            live_tag(engine).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn on_valid_idle_publishes_a_valid_draft_once_nobody_edits_it() {
    let (_dir, engine) = open().await;
    let auto = json!({"publish": "on_valid_idle", "publish_idle_secs": 1});
    let v1 = flow("v1", auto.clone());
    engine
        .save_draft(&Plan::new(v1.clone()).unwrap(), Some("test"))
        .await
        .unwrap();
    assert_eq!(
        live_tag(&engine).await,
        None,
        "published before the idle time"
    );
    let took = wait_live(&engine, Some("v1"), Duration::from_secs(10)).await;
    assert!(
        took >= Duration::from_millis(700),
        "published after {took:?}"
    );

    // Edits every 300 ms keep postponing it; then it goes out.
    for i in 0..6 {
        let wf = flow(&format!("v2-{i}"), auto.clone());
        engine
            .save_draft(&Plan::new(wf).unwrap(), Some("test"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(live_tag(&engine).await.as_deref(), Some("v1"), "edit {i}");
    }
    wait_live(&engine, Some("v2-5"), Duration::from_secs(10)).await;

    // A draft with problems is never published by itself.
    let mut bad = flow("v3", auto.clone());
    bad.nodes[1].kind = "flow.iff".into();
    let base = engine.doc_head("w").await.unwrap();
    engine
        .apply_edit_at("w", &base, &bad, "test")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(live_tag(&engine).await.as_deref(), Some("v2-5"));

    // Manual (the default) never publishes by itself.
    engine
        .save_draft(&Plan::new(flow("v4", json!({}))).unwrap(), Some("test"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(live_tag(&engine).await.as_deref(), Some("v2-5"));
}

#[test]
fn a_draft_waiting_to_publish_itself_still_does_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let auto = json!({"publish": "on_valid_idle", "publish_idle_secs": 1});
    // The first process saves a valid draft and stops before it is idle
    // long enough: its timer dies with it.
    {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
            engine
                .save_draft(&Plan::new(flow("v1", auto.clone())).unwrap(), Some("test"))
                .await
                .unwrap();
            engine.store().journal().flush().await.unwrap();
        });
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(live_tag(&engine).await, None, "nothing scheduled it yet");
        // What a service does at start (sluice_host::Host::start).
        assert_eq!(engine.schedule_idle_publishes().await.unwrap(), 1);
        wait_live(&engine, Some("v1"), Duration::from_secs(10)).await;
        assert_eq!(engine.schedule_idle_publishes().await.unwrap(), 0);
    });
}

/// A file trigger this engine would not arm (its folder outside `[files]
/// allow`, missing, or none allowed) keeps its workflow from being
/// published, naming the node and the field: published, it would never
/// fire, and said so only in the server's log.
#[tokio::test]
async fn a_file_trigger_that_could_not_watch_its_folder_is_not_published() {
    let dir = tempfile::tempdir().unwrap();
    let (allowed, elsewhere) = (dir.path().join("inbox"), dir.path().join("elsewhere"));
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let watching = |folder: &std::path::Path| {
        Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "watch", "nodes": [
            {"id": "files", "kind": "trigger.file", "config": {"path": folder.display().to_string()}},
            {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "files", "to": "end"}]}))
        .unwrap()
    };
    let refused = |engine: &Engine| {
        let engine = engine.clone();
        async move {
            let state = engine.publish_state("watch").await.unwrap();
            let problems: Vec<String> = state.problems.iter().map(|p| p.to_string()).collect();
            match engine.publish("watch", None).await {
                Err(Error::Invalid(invalid)) => {
                    assert_eq!(invalid.0.len(), 1, "{invalid}");
                    assert_eq!(invalid.0[0].node.as_deref(), Some("files"));
                    assert_eq!(invalid.0[0].field.as_deref(), Some("config.path"));
                    assert_eq!(problems, [invalid.0[0].to_string()]);
                    invalid.0[0].message.clone()
                }
                other => panic!("published a file trigger that cannot watch: {other:?}"),
            }
        }
    };

    // No folder allowed at all.
    let engine = Engine::open(&dir.path().join("a"), Options::default())
        .await
        .unwrap();
    engine
        .save_draft(&Plan::new(watching(&allowed)).unwrap(), None)
        .await
        .unwrap();
    assert!(refused(&engine).await.contains("[files] allow"));

    // Allowed folders, but this one is outside them, or missing.
    let mut options = Options::default();
    options.settings.files.allow = vec![allowed.clone()];
    let engine = Engine::open(&dir.path().join("b"), options).await.unwrap();
    for (folder, says) in [
        (elsewhere.clone(), "outside"),
        (allowed.join("gone"), "No such file"),
    ] {
        engine
            .save_draft(&Plan::new(watching(&folder)).unwrap(), None)
            .await
            .unwrap();
        let message = refused(&engine).await;
        assert!(message.contains(says), "{folder:?}: {message}");
    }
    assert!(matches!(
        engine.workflow("watch").await,
        Err(Error::NotPublished(_))
    ));

    // Inside: published, and a switched-off trigger is not looked at.
    engine
        .save_draft(&Plan::new(watching(&allowed)).unwrap(), None)
        .await
        .unwrap();
    engine.publish("watch", None).await.unwrap();
    let mut off = watching(&elsewhere);
    off.nodes[0].disabled = true;
    engine
        .save_draft(&Plan::new(off).unwrap(), None)
        .await
        .unwrap();
    engine.publish("watch", None).await.unwrap();
}
