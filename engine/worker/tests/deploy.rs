//! Deploying a workflow to the shared worker, end to end with a real
//! restate-server, a real worker endpoint and hook port, and a real desktop
//! engine that is stopped while the worker runs the workflow: the deployed
//! schedule fires on time from Restate's timer, the deployed webhook
//! answers on the worker's port (signed, as on the trigger port), and both
//! runs come into the desktop's history once it runs again. Undeploying
//! stops both.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_api::{RunOn, RunStatus};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, WorkerTarget};

async fn counting_server() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/count",
        axum::routing::post(move || {
            let counter = counter.clone();
            async move {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                axum::Json(json!({ "n": n }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.ok();
    });
    (format!("http://{addr}/count"), hits)
}

/// A schedule that fires once, at `at` (UTC, whole seconds), and a signed
/// webhook, both calling the counting server.
fn workflow(url: &str, at: jiff::Timestamp) -> Value {
    let t = at.to_zoned(jiff::tz::TimeZone::UTC);
    let cron = format!(
        "{} {} {} {} {} * {}",
        t.second(),
        t.minute(),
        t.hour(),
        t.day(),
        t.month(),
        t.year()
    );
    json!({
        "format": "sluice.workflow/v1", "id": "ops",
        "nodes": [
            {"id": "clock", "kind": "trigger.schedule", "config": {"cron": cron}},
            {"id": "hook", "kind": "trigger.webhook",
             "config": {"method": "POST", "path": "ping", "respond": "when_finished", "secret": "s3cret"}},
            {"id": "call", "kind": "http.request", "config": {"method": "POST", "url": url, "body": "{{ input }}"}},
            {"id": "end", "kind": "output.end", "config": {"value": {"n": "{{ input.body.n }}"}}}
        ],
        "edges": [{"from": "clock", "to": "call"}, {"from": "hook", "to": "call"}, {"from": "call", "to": "end"}]
    })
}

async fn desktop(dir: &std::path::Path, restate: &support::Restate) -> Engine {
    let options = Options {
        worker: Some(WorkerTarget {
            ingress: restate.ingress.clone(),
            admin: Some(restate.admin.clone()),
            headers: Vec::new(),
        }),
        ..Options::default()
    };
    Engine::open(dir, options).await.unwrap()
}

async fn wait_for(mut cond: impl AsyncFnMut() -> bool, what: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signed(body: &str, path: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sig = sluice_server::hook::sign_v1(
        "s3cret",
        t,
        &sluice_server::hook::Signed {
            method: "POST",
            path,
            query: "",
            content_type: b"application/json",
            body: body.as_bytes(),
        },
    );
    format!("t={t},v1={sig}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployed_schedule_and_webhook_run_on_the_worker_while_the_desktop_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("restate");
    let restate = tokio::task::spawn_blocking(move || support::Restate::start(&base))
        .await
        .unwrap();
    let worker_engine = Engine::open(&dir.path().join("worker"), Options::default())
        .await
        .unwrap();
    let worker = sluice_worker::start(
        worker_engine.clone(),
        sluice_worker::WorkerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            restate_admin: Some(restate.admin.clone()),
            hooks: Some("127.0.0.1:0".parse().unwrap()),
            restate_ingress: restate.ingress.clone(),
        },
    )
    .await
    .unwrap();
    let hooks = worker.hooks.expect("the hook port");
    let (url, hits) = counting_server().await;
    let desk_dir = dir.path().join("desktop");

    // Deploy from the desktop, then stop it.
    let at = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 5).unwrap();
    let engine = desktop(&desk_dir, &restate).await;
    let plan = Plan::new(Workflow::from_value(workflow(&url, at)).unwrap()).unwrap();
    engine.save_workflow(&plan).await.unwrap();
    let state = engine.deploy("ops").await.unwrap();
    let version = state.version.clone().expect("deployed");
    assert_eq!(
        state.next_fires,
        vec![("clock".to_string(), at.to_string())],
        "{state:?}"
    );
    assert_eq!(state.webhooks, vec!["POST /hook/ops/ping".to_string()]);
    assert_eq!(
        engine.deploy_state("ops").await.unwrap().version,
        Some(version.clone())
    );
    let publish = engine.publish_state("ops").await.unwrap();
    assert!(publish.worker);
    assert_eq!(publish.deployed_version, Some(version.clone()));
    drop(engine);

    // The schedule fires on time, on the worker.
    wait_for(
        async || hits.load(Ordering::SeqCst) >= 1,
        "the deployed schedule's fire",
        30,
    )
    .await;
    let late = jiff::Timestamp::now().duration_since(at);
    assert!(
        late >= jiff::SignedDuration::ZERO && late < jiff::SignedDuration::from_secs(3),
        "fired {late:?} after its time"
    );

    // The webhook answers on the worker's port, signed as on the trigger port.
    let client = reqwest::Client::new();
    let hook_url = format!("http://{hooks}/hook/ops/ping");
    let body = r#"{"who":"ops"}"#;
    let unsigned = client
        .post(&hook_url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401, "{:?}", unsigned.text().await);
    let resp = client
        .post(&hook_url)
        .header("content-type", "application/json")
        .header("x-sluice-signature", signed(body, "/hook/ops/ping"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let hook_run = resp.headers()["x-sluice-run"].to_str().unwrap().to_string();
    assert!(sluice_api::deployed_run(&hook_run), "{hook_run}");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer, json!({"end": {"n": 2}}));
    let nothing = client
        .post(format!("http://{hooks}/hook/ops/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(nothing.status(), 404);
    assert_eq!(hits.load(Ordering::SeqCst), 2, "each ran once");

    // The desktop runs again (a while later): both runs come into its history.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let engine = desktop(&desk_dir, &restate).await;
    assert_eq!(engine.sync_deployments().await.unwrap(), 2);
    assert_eq!(engine.sync_deployments().await.unwrap(), 0, "adopted once");
    let store = engine.store().clone();
    wait_for(
        async || {
            let runs = store.list_runs(10).await.unwrap();
            runs.len() == 2 && runs.iter().all(|r| r.status == RunStatus::Succeeded)
        },
        "both runs mirrored to their end",
        30,
    )
    .await;
    let runs = store.list_runs(10).await.unwrap();
    for r in &runs {
        assert_eq!(r.executor, RunOn::Worker);
        // When it ended on the worker, not when it was read back here.
        let took = r.finished_at_us.unwrap() - r.created_at_us;
        assert!(
            (0..2_000_000).contains(&took),
            "run {} took {took} µs",
            r.id
        );
        assert_eq!(r.doc_version.as_deref(), Some(version.as_str()));
        let records = store.run_records(&r.id).await.unwrap();
        assert!(
            records.iter().any(|rec| &*rec.node == "call"),
            "run {} has its steps: {records:?}",
            r.id
        );
    }
    let scheduled = runs
        .iter()
        .find(|r| r.trigger == "clock")
        .expect("the schedule's run");
    assert_eq!(scheduled.input["scheduled_at"], json!(at.to_string()));
    let hooked = runs
        .iter()
        .find(|r| r.trigger == "hook")
        .expect("the webhook's run");
    assert_eq!(hooked.id, hook_run);
    assert_eq!(hooked.input["body"], json!({"who": "ops"}));
    assert_eq!(hooked.output, Some(json!({"end": {"n": 2}})));

    // Undeployed: the worker's webhook is gone (within its one-second cache).
    let state = engine.undeploy("ops").await.unwrap();
    assert_eq!(state.version, None);
    assert_eq!(
        engine.publish_state("ops").await.unwrap().deployed_version,
        None
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let gone = client
        .post(&hook_url)
        .header("content-type", "application/json")
        .header("x-sluice-signature", signed(body, "/hook/ops/ping"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert_eq!(engine.sync_deployments().await.unwrap(), 0);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    worker.stop().await;
    drop(restate);
}

#[tokio::test]
async fn deploying_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    // No worker configured.
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let plan = Plan::new(
        Workflow::from_value(workflow("http://127.0.0.1:9/x", jiff::Timestamp::now())).unwrap(),
    )
    .unwrap();
    engine.save_workflow(&plan).await.unwrap();
    let e = engine.deploy("ops").await.unwrap_err().to_string();
    assert!(
        e.contains("no worker is configured") && e.contains("[worker] ingress"),
        "{e}"
    );
    drop(engine);
    // A worker that does not answer.
    let options = Options {
        worker: Some(WorkerTarget {
            ingress: "http://127.0.0.1:9".into(),
            admin: None,
            headers: Vec::new(),
        }),
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await.unwrap();
    let e = engine.deploy("ops").await.unwrap_err().to_string();
    assert!(
        e.contains("did not answer") && e.contains("http://127.0.0.1:9"),
        "{e}"
    );
    assert_eq!(
        engine.deploy_state("ops").await.unwrap().version,
        None,
        "nothing recorded"
    );
    // Not published: nothing to deploy.
    engine.unpublish("ops").await.unwrap();
    let e = engine.deploy("ops").await.unwrap_err().to_string();
    assert!(e.contains("not published"), "{e}");
}

/// Every second, its occurrence and how many it reports missed.
fn every_second() -> Value {
    json!({
        "format": "sluice.workflow/v1", "id": "tick",
        "nodes": [
            {"id": "clock", "kind": "trigger.schedule", "config": {"cron": "* * * * * *"}},
            {"id": "end", "kind": "output.end", "config": {"value": {"at": "{{ input.scheduled_at }}"}}}
        ],
        "edges": [{"from": "clock", "to": "end"}]
    })
}

async fn start_worker(
    engine: &Engine,
    restate: &support::Restate,
    listen: std::net::SocketAddr,
) -> sluice_worker::Worker {
    sluice_worker::start(
        engine.clone(),
        sluice_worker::WorkerOptions {
            listen,
            advertise: None,
            restate_admin: Some(restate.admin.clone()),
            hooks: None,
            restate_ingress: restate.ingress.clone(),
        },
    )
    .await
    .unwrap()
}

/// The occurrences the deployment's runs fired for, with `missed`, as this
/// engine has adopted them.
async fn fires(engine: &Engine) -> Vec<(jiff::Timestamp, u64)> {
    engine.sync_deployments().await.unwrap();
    let mut out: Vec<(jiff::Timestamp, u64)> = engine
        .store()
        .list_runs(1000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            (
                r.input["scheduled_at"].as_str().unwrap().parse().unwrap(),
                r.input["missed"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployed_schedule_neither_misses_nor_doubles_across_worker_and_server_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("restate");
    let mut restate = tokio::task::spawn_blocking(move || support::Restate::start(&base))
        .await
        .unwrap();
    let worker_engine = Engine::open(&dir.path().join("worker"), Options::default())
        .await
        .unwrap();
    let mut worker = start_worker(&worker_engine, &restate, "127.0.0.1:0".parse().unwrap()).await;
    let listen = worker.addr;
    let engine = desktop(&dir.path().join("desktop"), &restate).await;
    let plan = Plan::new(Workflow::from_value(every_second()).unwrap()).unwrap();
    engine.save_workflow(&plan).await.unwrap();
    engine.deploy("tick").await.unwrap();
    let wait_fires = async |n: usize, engine: &Engine| {
        wait_for(async || fires(engine).await.len() >= n, "fires", 60).await;
    };
    wait_fires(2, &engine).await;

    // The worker goes away for two seconds, and comes back on its address.
    worker.stop().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    worker = start_worker(&worker_engine, &restate, listen).await;
    let before = fires(&engine).await.len();
    wait_fires(before + 2, &engine).await;

    // restate-server is SIGKILLed and restarted on its base dir.
    restate = tokio::task::spawn_blocking(move || {
        restate.restart();
        restate
    })
    .await
    .unwrap();
    let before = fires(&engine).await.len();
    wait_fires(before + 2, &engine).await;
    engine.undeploy("tick").await.unwrap();
    let store = engine.store().clone();
    wait_for(
        async || {
            fires(&engine).await;
            let runs = store.list_runs(1000).await.unwrap();
            runs.iter().all(|r| r.status == RunStatus::Succeeded)
        },
        "every fire mirrored to its end",
        60,
    )
    .await;

    // Every occurrence from the first to the last is accounted for exactly
    // once: fired, or counted in the late fire before it as missed.
    let fired = fires(&engine).await;
    for pair in fired.windows(2) {
        let ((a, missed), (b, _)) = (pair[0], pair[1]);
        assert_eq!(
            b.duration_since(a),
            jiff::SignedDuration::from_secs(1 + missed as i64),
            "between {a} (missed {missed}) and {b}: {fired:?}"
        );
    }
    worker.stop().await;
    drop(restate);
}
