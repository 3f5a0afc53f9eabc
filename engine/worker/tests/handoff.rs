//! Handing runs to the shared worker, end to end with a real restate-server
//! and worker endpoint: a handed-off run's steps (input, output, attempt,
//! duration) and logs are mirrored into the engine's own history; the worker
//! uses its own vault and says so when a credential is missing; a hand-off
//! sent twice is one run; and every way the hand-off can fail fails the run
//! at once, saying which and what to do.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sluice_api::{RunOn, RunStatus, WORKER_PROTOCOL, WorkerRun};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, WorkerTarget};

struct Setup {
    _dir: tempfile::TempDir,
    restate: support::Restate,
    worker: sluice_worker::Worker,
    worker_engine: Engine,
}

async fn setup(register: bool) -> Setup {
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
            restate_admin: register.then(|| restate.admin.clone()),
            hooks: None,
            restate_ingress: restate.ingress.clone(),
        },
    )
    .await
    .unwrap();
    Setup {
        _dir: dir,
        restate,
        worker,
        worker_engine,
    }
}

async fn engine_for(ingress: Option<String>) -> (tempfile::TempDir, Engine) {
    engine_with(ingress, None).await
}

async fn engine_with(
    ingress: Option<String>,
    admin: Option<String>,
) -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        worker: ingress.map(|ingress| WorkerTarget {
            ingress,
            admin,
            headers: Vec::new(),
        }),
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await.unwrap();
    (dir, engine)
}

fn plan(wf: Value) -> Arc<Plan> {
    Plan::new(Workflow::from_value(wf).unwrap()).unwrap()
}

async fn run_on_worker(engine: &Engine, plan: Arc<Plan>, input: Value) -> RunResult {
    let handle = engine
        .start_on(plan, None, Arc::new(input), Some(RunOn::Worker), false)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .expect("the worker run ends")
}

/// A loopback HTTP server that counts requests and answers `{"n": count}`,
/// checking the bearer token it is sent.
async fn counting_server() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/count",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let counter = counter.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                axum::Json(json!({"n": n, "auth": auth}))
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

fn http_workflow(url: &str) -> Value {
    json!({
        "format": "sluice.workflow/v1", "id": "calls",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "prep", "kind": "data.set", "config": {"values": {"who": "{{ input.who }}"}}},
            {"id": "note", "kind": "util.log", "config": {"message": "calling for {{ input.who }}"}},
            {"id": "call", "kind": "http.request",
             "config": {"method": "POST", "url": url, "credential": "api", "body": "{{ input }}"}},
            {"id": "end", "kind": "output.end",
             "config": {"value": {"n": "{{ input.body.n }}", "auth": "{{ input.body.auth }}"}}}
        ],
        "edges": [
            {"from": "t", "to": "prep"}, {"from": "prep", "to": "note"},
            {"from": "note", "to": "call"}, {"from": "call", "to": "end"}
        ]
    })
}

#[tokio::test]
async fn a_handed_off_run_is_mirrored_with_its_steps_and_uses_the_workers_vault() {
    let s = setup(true).await;
    let (url, hits) = counting_server().await;
    let (_dir, engine) = engine_for(Some(s.restate.ingress.clone())).await;

    // The worker has no `api` credential yet: the run fails naming it and
    // where to set it (the engine's own vault is never sent).
    engine
        .store()
        .put_credential("api", "bearer", &json!({"token": "engine-side"}))
        .await
        .unwrap();
    let r = run_on_worker(&engine, plan(http_workflow(&url)), json!({"who": "Ada"})).await;
    assert_eq!(r.status, RunStatus::Failed);
    let e = r.error.unwrap();
    assert_eq!(e.node.as_deref(), Some("call"));
    assert!(
        e.message
            .contains("credential `api` does not exist on the shared worker"),
        "{}",
        e.message
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    s.worker_engine
        .store()
        .put_credential("api", "bearer", &json!({"token": "worker-side"}))
        .await
        .unwrap();
    let r = run_on_worker(&engine, plan(http_workflow(&url)), json!({"who": "Ada"})).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    // The worker's credential authenticated the call, masked in the output.
    assert_eq!(r.output, json!({"end": {"n": 1, "auth": "Bearer ***"}}));
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // The run is in this engine's history as a worker run, with every step.
    let row = engine.store().get_run(&r.id).await.unwrap().unwrap();
    assert_eq!(row.executor, RunOn::Worker);
    let summary = sluice_runtime::report::run_summary(&row);
    assert_eq!(
        serde_json::to_value(&summary).unwrap()["executor"],
        "worker"
    );
    let records = engine.store().run_records(&r.id).await.unwrap();
    let detail = sluice_runtime::report::run_detail(&row, &records);
    let steps: Vec<(&str, &str)> = detail
        .steps
        .iter()
        .map(|s| (s.node.as_str(), s.status.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("t", "succeeded"),
            ("prep", "succeeded"),
            ("note", "succeeded"),
            ("call", "succeeded"),
            ("end", "succeeded")
        ]
    );
    let call = detail.steps.iter().find(|s| s.node == "call").unwrap();
    assert_eq!(call.attempt, Some(1));
    assert_eq!(call.input.as_ref().unwrap()["who"], "Ada");
    assert!(call.duration_us.unwrap() > 0);
    let logs = engine.store().run_logs(&r.id).await.unwrap();
    assert!(
        logs.iter()
            .any(|l| l.node == "note" && l.message == "calling for Ada"),
        "{logs:?}"
    );
    // The health view sees the worker, and nothing in flight any more.
    let health = engine.worker_health().await;
    assert!(health.reachable && health.registered, "{health:?}");
    assert_eq!(health.protocol, Some(WORKER_PROTOCOL));
    assert_eq!(health.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(health.in_flight, 0);
    assert_eq!(health.problem, None);
    s.worker.stop().await;
}

#[tokio::test]
async fn a_worker_run_is_cancelled_through_the_restate_admin_api() {
    let s = setup(true).await;
    let (_dir, engine) = engine_with(
        Some(s.restate.ingress.clone()),
        Some(s.restate.admin.clone()),
    )
    .await;
    let p = plan(json!({
        "format": "sluice.workflow/v1", "id": "slow",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 60000}},
            {"id": "end", "kind": "output.end"}
        ],
        "edges": [{"from": "t", "to": "w"}, {"from": "w", "to": "end"}]
    }));
    let handle = engine
        .start_on(p, None, Arc::new(json!(1)), Some(RunOn::Worker), false)
        .await
        .unwrap();
    let id = handle.id.clone();
    // Cancel once the wait is in flight on the worker.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let records = engine.store().run_records(&id).await.unwrap();
        if records.iter().any(|r| &*r.node == "w") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the wait never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(engine.worker_health().await.in_flight, 1);
    // A decision for it is refused at once, saying why (it used to be
    // dropped by the mirror and tried again for 5 s, then "busy").
    let decided = engine
        .signal(
            &id,
            sluice_runtime::executor::Signal::decide(
                None,
                sluice_api::Decision::Approved,
                json!({}),
            ),
        )
        .await;
    match decided {
        Err(sluice_runtime::executor::Error::NotWaiting { run, why }) => {
            assert_eq!(run, id);
            assert!(why.contains("shared worker"), "{why}");
        }
        other => panic!("a decision for a worker run: {other:?}"),
    }
    assert!(engine.cancel(&id));
    let r = tokio::time::timeout(Duration::from_secs(30), handle.wait())
        .await
        .expect("cancelled in time");
    assert_eq!(r.status, RunStatus::Cancelled, "{:?}", r.error);
    let row = engine.store().get_run(&id).await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Cancelled);
    s.worker.stop().await;
}

#[tokio::test]
async fn a_hand_off_sent_twice_is_one_run() {
    let s = setup(true).await;
    let (url, hits) = counting_server().await;
    s.worker_engine
        .store()
        .put_credential("api", "bearer", &json!({"token": "t"}))
        .await
        .unwrap();
    let p = plan(http_workflow(&url));
    let run = WorkerRun {
        protocol: WORKER_PROTOCOL,
        engine_version: "test".into(),
        run_id: "r-twice".into(),
        workflow: "calls".into(),
        definition: p.definition.shared_text().to_string(),
        trigger: "t".into(),
        input: json!({"who": "Bob"}),
        created_at_us: 1,
        draft: false,
        reuse: Vec::new(),
    };
    let client = reqwest::Client::new();
    let url = format!("{}/SluiceRun/r-twice/run/send", s.restate.ingress);
    for _ in 0..2 {
        let resp = client.post(&url).json(&run).send().await.unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
    }
    // Both attach to the one run.
    let out = client
        .get(format!(
            "{}/restate/workflow/SluiceRun/r-twice/attach",
            s.restate.ingress
        ))
        .send()
        .await
        .unwrap();
    assert!(out.status().is_success());
    let resp = client.post(&url).json(&run).send().await.unwrap();
    assert!(resp.status().is_success() || resp.status().as_u16() == 409);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the step ran once");
    s.worker.stop().await;
}

#[tokio::test]
async fn every_failed_hand_off_fails_the_run_at_once_saying_what_to_do() {
    let wf = json!({
        "format": "sluice.workflow/v1", "id": "w",
        "nodes": [{"id": "t", "kind": "trigger.manual"}, {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "end"}]
    });

    // No worker configured.
    let (_d1, engine) = engine_for(None).await;
    let r = run_on_worker(&engine, plan(wf.clone()), json!(1)).await;
    assert_eq!(r.status, RunStatus::Failed);
    let m = r.error.unwrap().message;
    assert!(m.contains("no worker is configured"), "{m}");
    assert!(m.contains("[worker] ingress"), "{m}");
    let health = engine.worker_health().await;
    assert_eq!(health.ingress, None);
    assert!(health.problem.unwrap().contains("no worker is configured"));

    // An ingress nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (_d2, engine) = engine_for(Some(format!("http://127.0.0.1:{port}"))).await;
    let t0 = std::time::Instant::now();
    let r = run_on_worker(&engine, plan(wf.clone()), json!(1)).await;
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(r.status, RunStatus::Failed);
    let m = r.error.unwrap().message;
    assert!(m.contains("did not answer"), "{m}");
    assert!(m.contains("start restate-server there"), "{m}");
    let health = engine.worker_health().await;
    assert!(!health.reachable && !health.registered, "{health:?}");
    assert!(health.problem.unwrap().contains("did not answer"));

    // A Restate server with no Sluice worker registered.
    let s = setup(false).await;
    let (_d3, engine) = engine_for(Some(s.restate.ingress.clone())).await;
    let r = run_on_worker(&engine, plan(wf.clone()), json!(1)).await;
    assert_eq!(r.status, RunStatus::Failed);
    let m = r.error.unwrap().message;
    assert!(m.contains("no Sluice worker is registered"), "{m}");
    assert!(m.contains("sluice worker --restate-admin"), "{m}");
    let health = engine.worker_health().await;
    assert!(health.reachable && !health.registered, "{health:?}");
    assert!(
        health
            .problem
            .unwrap()
            .contains("no Sluice worker is registered")
    );

    // Version skew: a worker refuses a run in a protocol it does not speak.
    sluice_worker::register(&s.restate.admin, &s.worker.uri)
        .await
        .unwrap();
    let p = plan(wf);
    let run = WorkerRun {
        protocol: WORKER_PROTOCOL + 1,
        engine_version: "9.9.9".into(),
        run_id: "r-skew".into(),
        workflow: "w".into(),
        definition: p.definition.shared_text().to_string(),
        trigger: "t".into(),
        input: json!(1),
        created_at_us: 1,
        draft: false,
        reuse: Vec::new(),
    };
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/SluiceRun/r-skew/run", s.restate.ingress))
        .json(&run)
        .send()
        .await
        .unwrap();
    assert!(!resp.status().is_success());
    let body = resp.text().await.unwrap();
    assert!(body.contains("version skew"), "{body}");
    assert!(body.contains("Sluice 9.9.9"), "{body}");
    s.worker.stop().await;
}

/// `[worker] auth` names a credential whose header every request to the
/// ingress carries (for a Restate behind an authenticating proxy); a
/// missing one fails the run naming it and how to set it.
#[tokio::test]
async fn the_ingress_auth_header_comes_from_a_named_credential() {
    // A stand-in proxy on loopback that records what it is sent and knows
    // no service.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let record = record.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_string();
            record.lock().unwrap().push(auth);
            (
                axum::http::StatusCode::NOT_FOUND,
                "{\"message\":\"no such service\"}",
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.ok();
    });
    let wf = json!({
        "format": "sluice.workflow/v1", "id": "w",
        "nodes": [{"id": "t", "kind": "trigger.manual"}, {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "t", "to": "end"}]
    });
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options::default();
    options.settings.worker = sluice_nodes::WorkerSettings {
        ingress: Some(format!("http://{addr}")),
        admin: None,
        auth: Some("gate".into()),
    };

    // Not set yet: the run fails naming it.
    let engine = Engine::open(dir.path(), options.clone()).await.unwrap();
    let r = run_on_worker(&engine, plan(wf.clone()), json!(1)).await;
    let m = r.error.unwrap().message;
    assert!(
        m.contains("credential `gate`") && m.contains("sluice credentials set gate"),
        "{m}"
    );
    assert!(seen.lock().unwrap().is_empty(), "nothing sent without it");
    engine
        .store()
        .put_credential("gate", "bearer", &json!({"token": "proxy-secret"}))
        .await
        .unwrap();
    drop(engine);

    // Set: every request carries it.
    let engine = Engine::open(dir.path(), options).await.unwrap();
    let r = run_on_worker(&engine, plan(wf), json!(1)).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(
        r.error
            .unwrap()
            .message
            .contains("no Sluice worker is registered")
    );
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|a| a == "Bearer proxy-secret"), "{seen:?}");
}

/// Retrying a worker run works where it ran: from the start it is handed
/// off again; from the failed step it is handed off with the steps that
/// finished, which the worker takes over without running them again.
#[tokio::test]
async fn a_worker_run_retried_from_its_failed_step_runs_only_the_rest_on_the_worker() {
    let s = setup(true).await;
    let hits = Arc::new(AtomicUsize::new(0));
    let flaky = Arc::new(AtomicUsize::new(0));
    let (h, f) = (hits.clone(), flaky.clone());
    let app = axum::Router::new()
        .route(
            "/count",
            axum::routing::post(move || {
                let h = h.clone();
                async move { axum::Json(json!({"n": h.fetch_add(1, Ordering::SeqCst) + 1})) }
            }),
        )
        .route(
            "/flaky",
            axum::routing::post(move || {
                let f = f.clone();
                async move {
                    if f.fetch_add(1, Ordering::SeqCst) == 0 {
                        (axum::http::StatusCode::BAD_REQUEST, "not yet").into_response()
                    } else {
                        axum::Json(json!({"ok": true})).into_response()
                    }
                }
            }),
        );
    use axum::response::IntoResponse;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.ok();
    });
    let (_d, engine) = engine_for(Some(s.restate.ingress.clone())).await;
    let wf = json!({
        "format": "sluice.workflow/v1", "id": "twice",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "first", "kind": "http.request", "config": {"method": "POST", "url": format!("http://{addr}/count")}},
            {"id": "second", "kind": "http.request", "config": {"method": "POST", "url": format!("http://{addr}/flaky")}},
            {"id": "end", "kind": "output.end", "config": {"value": {"n": "{{ nodes.first.body.n }}", "ok": "{{ input.body.ok }}"}}}
        ],
        "edges": [{"from": "t", "to": "first"}, {"from": "first", "to": "second"}, {"from": "second", "to": "end"}]
    });
    let failed = run_on_worker(&engine, plan(wf), json!({})).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    let handle = engine.retry_from_failed(&failed.id).await.unwrap();
    let retried = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap();
    assert_eq!(retried.status, RunStatus::Succeeded, "{retried:?}");
    assert_eq!(retried.output, json!({"end": {"n": 1, "ok": true}}));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the finished step was taken over"
    );
    assert_eq!(flaky.load(Ordering::SeqCst), 2, "the failed step ran again");
    let row = engine.store().get_run(&retried.id).await.unwrap().unwrap();
    assert_eq!(row.executor, RunOn::Worker);
    let records = engine.store().run_records(&retried.id).await.unwrap();
    assert!(records.iter().any(|r| &*r.node == "first"), "{records:?}");

    // From the start: handed off again, every step runs.
    let handle = engine.retry_from_start(&failed.id).await.unwrap();
    let again = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap();
    assert_eq!(again.status, RunStatus::Succeeded, "{again:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let row = engine.store().get_run(&again.id).await.unwrap().unwrap();
    assert_eq!(row.executor, RunOn::Worker);
}

/// A run of hundreds of entries (more than one page, many state chunks) is
/// mirrored back whole: every step of every item, in order.
#[tokio::test]
async fn a_long_worker_run_is_mirrored_back_whole() {
    let s = setup(true).await;
    let (_d, engine) = engine_for(Some(s.restate.ingress.clone())).await;
    let items: Vec<u64> = (1..=150).collect();
    let wf = json!({
        "format": "sluice.workflow/v1", "id": "long",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "each", "kind": "flow.split", "config": {"items": "{{ input.items }}"}},
            {"id": "note", "kind": "util.log", "config": {"message": "item {{ input }}"}},
            {"id": "double", "kind": "data.set", "config": {"values": {"v": "{{ input * 2 }}"}}},
            {"id": "all", "kind": "flow.join"},
            {"id": "end", "kind": "output.end"}
        ],
        "edges": [{"from": "t", "to": "each"}, {"from": "each", "to": "note"},
                  {"from": "note", "to": "double"}, {"from": "double", "to": "all"},
                  {"from": "all", "to": "end"}]
    });
    let r = run_on_worker(&engine, plan(wf), json!({"items": items})).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    assert_eq!(
        r.output["end"].as_array().map(Vec::len),
        Some(150),
        "{:?}",
        r.output
    );
    let records = engine.store().run_records(&r.id).await.unwrap();
    let doubled = records
        .iter()
        .filter(|rec| &*rec.node == "double" && rec.kind == sluice_store::RecordKind::Succeeded)
        .count();
    assert_eq!(doubled, 150, "every item's step came back");
    let logs = engine.store().run_logs(&r.id).await.unwrap();
    assert_eq!(logs.len(), 150, "every item's log line came back once");
    // Record seqs are the worker's entry indexes: strictly increasing.
    assert!(records.windows(2).all(|w| w[0].seq < w[1].seq));
}
