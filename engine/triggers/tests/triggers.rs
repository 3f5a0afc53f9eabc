//! Schedules and file triggers against a real engine, real SQLite, real files.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options};
use sluice_triggers::Triggers;

async fn put(engine: &Engine, wf: Value) {
    let plan = sluice_runtime::Plan::new(Workflow::from_value(wf).unwrap()).unwrap();
    engine.save_workflow(&plan).await.unwrap();
}

fn every_second() -> Value {
    json!({"format": "sluice.workflow/v1", "id": "tick", "nodes": [
        {"id": "clock", "kind": "trigger.schedule", "config": {"cron": "* * * * * *", "timezone": "Europe/Paris"}},
        {"id": "end", "kind": "output.end", "config": {"value": {"at": "{{ input.scheduled_at }}", "missed": "{{ input.missed }}"}}}],
        "edges": [{"from": "clock", "to": "end"}]})
}

async fn finished_runs(engine: &Engine, workflow: &str) -> Vec<Value> {
    let runs = engine.store().list_runs(1000).await.unwrap();
    let mut out: Vec<Value> = runs
        .into_iter()
        .filter(|r| r.workflow_id == workflow && r.status == sluice_runtime::Status::Succeeded)
        .map(|r| r.output.unwrap_or(Value::Null))
        .collect();
    out.reverse();
    out
}

async fn wait_for(mut cond: impl AsyncFnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_fires_every_second_and_catches_up_once_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    put(&engine, every_second()).await;
    let triggers = tokio::spawn(Triggers::new(engine.clone()).run());
    wait_for(
        async || finished_runs(&engine, "tick").await.len() >= 2,
        "two fires",
    )
    .await;
    triggers.abort();
    // Disarmed: let any fire in progress settle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fired = finished_runs(&engine, "tick").await;
    let times: Vec<jiff::Timestamp> = fired
        .iter()
        .map(|o| o["end"]["at"].as_str().unwrap().parse().unwrap())
        .collect();
    for pair in times.windows(2) {
        assert_eq!(
            (pair[1] - pair[0]).get_seconds(),
            1,
            "one fire per second: {times:?}"
        );
    }

    // Down for 3 seconds: at the next start the schedule fires once for the
    // missed occurrences (not three times), then keeps its pace.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let before = fired.len();
    let engine2 = Engine::open(dir.path(), Options::default()).await.unwrap();
    let triggers = tokio::spawn(Triggers::new(engine2.clone()).run());
    wait_for(
        async || finished_runs(&engine2, "tick").await.len() > before,
        "the catch-up fire",
    )
    .await;
    let after = finished_runs(&engine2, "tick").await;
    let catch_up = &after[before]["end"];
    assert!(catch_up["missed"].as_u64().unwrap() >= 2, "{catch_up}");
    triggers.abort();
}

/// A workflow deployed to the shared worker has its schedules fired there
/// (from Restate's timers): here they stay off until it is undeployed.
#[tokio::test(flavor = "multi_thread")]
async fn a_deployed_workflows_schedule_fires_on_the_worker_not_here() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    put(&engine, every_second()).await;
    // As `Engine::deploy` records it once the worker took it.
    engine
        .store()
        .set_deployment("tick", Some("v1"), 1)
        .await
        .unwrap();
    let triggers = tokio::spawn(Triggers::new(engine.clone()).run());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        finished_runs(&engine, "tick").await.is_empty(),
        "fired here while deployed"
    );
    // Undeployed: the schedule is this engine's again.
    engine
        .store()
        .set_deployment("tick", None, 2)
        .await
        .unwrap();
    engine.workflow_changed("tick");
    wait_for(
        async || !finished_runs(&engine, "tick").await.is_empty(),
        "a fire after undeploying",
    )
    .await;
    triggers.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_trigger_fires_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let mut options = Options::default();
    options.settings.files.allow = vec![inbox.clone()];
    let engine = Engine::open(&dir.path().join("data"), options)
        .await
        .unwrap();
    put(
        &engine,
        json!({"format": "sluice.workflow/v1", "id": "files", "nodes": [
            {"id": "watch", "kind": "trigger.file", "config": {
                "path": inbox.display().to_string(), "glob": "*.csv", "events": ["created", "removed"], "debounce_ms": 50}},
            {"id": "end", "kind": "output.end", "config": {"value": "{{ input.event }} {{ input.name }}"}}],
            "edges": [{"from": "watch", "to": "end"}]}),
    )
    .await;
    let triggers = tokio::spawn(Triggers::new(engine.clone()).run());
    // Let the watch be set up before touching files.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(inbox.join("orders.csv"), "id\n1\n").unwrap();
    std::fs::write(inbox.join("ignored.txt"), "x").unwrap();
    wait_for(
        async || {
            finished_runs(&engine, "files")
                .await
                .contains(&json!({"end": "created orders.csv"}))
        },
        "the created event",
    )
    .await;
    std::fs::remove_file(inbox.join("orders.csv")).unwrap();
    wait_for(
        async || {
            finished_runs(&engine, "files")
                .await
                .contains(&json!({"end": "removed orders.csv"}))
        },
        "the removed event",
    )
    .await;
    let all = finished_runs(&engine, "files").await;
    assert!(
        all.iter()
            .all(|o| !o["end"].as_str().unwrap().contains("ignored.txt")),
        "{all:?}"
    );
    triggers.abort();
}

/// A file trigger watches only a folder the user allowed (`[files] allow`),
/// like the file nodes: it cannot watch, and hand out the file names of,
/// anything else. (It watched any folder before.)
#[tokio::test(flavor = "multi_thread")]
async fn a_file_trigger_outside_the_allowed_folders_is_not_armed() {
    let dir = tempfile::tempdir().unwrap();
    let (allowed, elsewhere) = (dir.path().join("allowed"), dir.path().join("elsewhere"));
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let mut options = Options::default();
    options.settings.files.allow = vec![allowed.clone()];
    let engine = Engine::open(&dir.path().join("data"), options)
        .await
        .unwrap();
    let watch = |id: &str, folder: &std::path::Path| {
        json!({"format": "sluice.workflow/v1", "id": id, "nodes": [
            {"id": "watch", "kind": "trigger.file", "config": {
                "path": folder.display().to_string(), "debounce_ms": 50}},
            {"id": "end", "kind": "output.end", "config": {"value": "{{ input.name }}"}}],
            "edges": [{"from": "watch", "to": "end"}]})
    };
    put(&engine, watch("outside", &elsewhere)).await;
    put(&engine, watch("inside", &allowed)).await;
    let triggers = tokio::spawn(Triggers::new(engine.clone()).run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(elsewhere.join("secret.txt"), "x").unwrap();
    std::fs::write(allowed.join("fine.txt"), "x").unwrap();
    wait_for(
        async || {
            finished_runs(&engine, "inside")
                .await
                .contains(&json!({"end": "fine.txt"}))
        },
        "the allowed folder's event",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(finished_runs(&engine, "outside").await.is_empty());
    triggers.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn changing_a_workflow_rearms_its_triggers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let triggers = tokio::spawn(Triggers::new(engine.clone()).run());
    tokio::time::sleep(Duration::from_millis(100)).await;
    put(&engine, every_second()).await;
    wait_for(
        async || !finished_runs(&engine, "tick").await.is_empty(),
        "a fire after the workflow appeared",
    )
    .await;
    let mut off = every_second();
    off["nodes"][0]["disabled"] = json!(true);
    put(&engine, off).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = finished_runs(&engine, "tick").await.len();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(
        finished_runs(&engine, "tick").await.len(),
        n,
        "a disabled schedule does not fire"
    );
    triggers.abort();
}

#[tokio::test]
async fn a_draft_leaves_the_schedule_armed_until_it_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let triggers = tokio::spawn(Triggers::new(engine.clone()).run());
    tokio::time::sleep(Duration::from_millis(100)).await;
    put(&engine, every_second()).await;
    wait_for(
        async || !finished_runs(&engine, "tick").await.is_empty(),
        "a fire of the published schedule",
    )
    .await;
    // A draft that disables the schedule: it goes on firing.
    let mut off = every_second();
    off["nodes"][0]["disabled"] = json!(true);
    let plan = sluice_runtime::Plan::new(Workflow::from_value(off).unwrap()).unwrap();
    engine.save_draft(&plan, Some("test")).await.unwrap();
    let n = finished_runs(&engine, "tick").await.len();
    wait_for(
        async || finished_runs(&engine, "tick").await.len() >= n + 2,
        "fires while the draft has it disabled",
    )
    .await;
    // Published: it stops.
    engine.publish("tick", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = finished_runs(&engine, "tick").await.len();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(
        finished_runs(&engine, "tick").await.len(),
        n,
        "published: disabled"
    );
    // An earlier version published again fires again; unpublishing stops it.
    put(&engine, every_second()).await;
    let n = finished_runs(&engine, "tick").await.len();
    wait_for(
        async || finished_runs(&engine, "tick").await.len() > n,
        "a fire after publishing it enabled",
    )
    .await;
    engine.unpublish("tick").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = finished_runs(&engine, "tick").await.len();
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(
        finished_runs(&engine, "tick").await.len(),
        n,
        "unpublished: off"
    );
    triggers.abort();
}
