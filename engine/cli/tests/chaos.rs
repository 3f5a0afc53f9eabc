//! Chaos: a real `sluice serve` under webhook load is SIGKILLed at random
//! moments and started again on the same data dir, over and over.
//!
//! Two workflows call a loopback "side effect" server (it counts every
//! request by run and node): `sync` answers when finished, `async` answers
//! at once and calls two effects in a row after a wait. At every kill the
//! journal must pass `PRAGMA integrity_check`, and the effect steps it holds
//! as succeeded are noted with the server's counts at that moment. After
//! each restart every run acknowledged so far finishes before new load
//! comes (one kill in four instead lands while the engine resumes). At the
//! end every run acknowledged to a client has finished as it should, every
//! run in the journal has finished, no effect the journal held as done was
//! ever called again (a step killed mid-call may be called twice: that is
//! at-least-once, and counted), and the counts add up.
//!
//! `SLUICE_CHAOS_KILLS` sets the number of kills (default 4 here; `cargo
//! xtask chaos` runs 100 in a release build); `SLUICE_CHAOS_SEED` replays a
//! run's kill moments. The totals are printed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use sqlx::ConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;

mod support;
use support::{Serve, client, start};

/// Calls the effect server has seen, by `run/node`.
type Counts = Arc<Mutex<HashMap<String, u32>>>;

async fn effect_server() -> (String, Counts) {
    let counts: Counts = Arc::default();
    let app = axum::Router::new()
        .route(
            "/effect",
            axum::routing::post(|State(c): State<Counts>, Json(v): Json<Value>| async move {
                let key = format!(
                    "{}/{}",
                    v["run"].as_str().unwrap_or("?"),
                    v["node"].as_str().unwrap_or("?")
                );
                *c.lock().unwrap().entry(key).or_default() += 1;
                Json(json!({"ok": true}))
            }),
        )
        .with_state(counts.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/effect"), counts)
}

fn effect(id: &str, url: &str) -> Value {
    json!({"id": id, "kind": "http.request", "config": {
        "method": "POST", "url": url,
        "body": {"run": "{{ run.id }}", "node": id, "n": "{{ input.body.n }}"}}})
}

fn workflows(url: &str) -> [Value; 2] {
    let mut e2 = effect("effect2", url);
    e2["config"]["body"]["n"] = json!("{{ nodes.hook.body.n }}");
    let keep_all = json!({"runs": {"keep_max": "unlimited"}});
    let mut e3 = effect("effect3", url);
    e3["config"]["body"]["n"] = json!("{{ nodes.hook.body.n }}");
    [
        // Every run is kept: the long form makes more than retention's
        // default 100,000 per workflow, and the checks read them all.
        json!({"format": "sluice.workflow/v1", "id": "sync", "settings": keep_all, "nodes": [
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "when_finished"}},
            effect("effect1", url),
            {"id": "reply", "kind": "output.respond", "config": {"status": 200,
                "body": {"n": "{{ nodes.hook.body.n }}", "effect": "{{ input.status }}"}}}],
            "edges": [{"from": "hook", "to": "effect1"}, {"from": "effect1", "to": "reply"}]}),
        json!({"format": "sluice.workflow/v1", "id": "async", "settings": keep_all, "nodes": [
            {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
            {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 30}},
            e2, e3,
            {"id": "end", "kind": "output.end", "config": {"value": "{{ nodes.hook.body.n }}"}}],
            "edges": [{"from": "hook", "to": "w"}, {"from": "w", "to": "effect2"},
                      {"from": "effect2", "to": "effect3"}, {"from": "effect3", "to": "end"}]}),
    ]
}

/// The effects of each workflow.
fn effects_of(workflow: &str) -> &'static [&'static str] {
    match workflow {
        "sync" => &["effect1"],
        _ => &["effect2", "effect3"],
    }
}

/// A run a client was answered for: its id, workflow and `n`.
#[derive(Debug, Clone)]
struct Acked {
    id: String,
    workflow: &'static str,
    n: u64,
}

/// Webhook load from `clients` tasks until `stop`; what was acknowledged.
fn load(
    c: &reqwest::Client,
    base: &str,
    clients: u64,
    first_n: u64,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Vec<Acked>>> {
    (0..clients)
        .map(|k| {
            let (c, base, stop) = (c.clone(), base.to_string(), stop.clone());
            tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut n = first_n + k * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let workflow = if n.is_multiple_of(3) { "async" } else { "sync" };
                    let Some(support::HookAnswer { status, run, body }) =
                        support::post_hook(&c, &base, workflow, n).await
                    else {
                        break; // the engine is gone
                    };
                    let Some(id) = run else {
                        // Refused before a run was made (too many in progress).
                        assert!(matches!(status, 429 | 503), "{status} {body}");
                        continue;
                    };
                    match workflow {
                        "sync" => {
                            assert_eq!(status, 200, "{body}");
                            assert_eq!(body, json!({"n": n, "effect": 200}));
                        }
                        _ => assert_eq!(status, 202, "{body}"),
                    }
                    acked.push(Acked { id, workflow, n });
                }
                acked
            })
        })
        .collect()
}

/// The journal of a stopped engine: `PRAGMA integrity_check`, then the
/// effect steps it holds as succeeded, by `run/node`.
async fn inspect(data: &Path) -> BTreeSet<String> {
    let mut db = SqliteConnectOptions::new()
        .filename(data.join("sluice.db"))
        .connect()
        .await
        .unwrap();
    let check: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(check, ["ok"], "the journal is damaged");
    let done: Vec<(String, String)> =
        sqlx::query_as("SELECT run_id, node FROM journal WHERE kind = 2 AND node LIKE 'effect%'")
            .fetch_all(&mut db)
            .await
            .unwrap();
    done.into_iter().map(|(r, n)| format!("{r}/{n}")).collect()
}

/// Every run in the journal: id, workflow, status (read beside a running
/// engine too: the journal is in WAL mode).
async fn runs(data: &Path) -> Vec<(String, String, String)> {
    let mut db = SqliteConnectOptions::new()
        .filename(data.join("sluice.db"))
        .connect()
        .await
        .unwrap();
    sqlx::query_as("SELECT id, workflow_id, status FROM runs")
        .fetch_all(&mut db)
        .await
        .unwrap()
}

/// Waits (up to 60 s) until no run is in progress and every acknowledged
/// run has succeeded; how many acknowledged runs that is.
async fn all_finish(data: &Path, acked: &[Acked]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let runs = runs(data).await;
        let status: HashMap<&str, &str> = runs
            .iter()
            .map(|(id, _, st)| (id.as_str(), st.as_str()))
            .collect();
        let running = runs.iter().filter(|r| r.2 == "running").count();
        let unfinished: Vec<&Acked> = acked
            .iter()
            .filter(|a| status.get(a.id.as_str()) != Some(&"succeeded"))
            .collect();
        if running == 0 && unfinished.is_empty() {
            return acked.len();
        }
        if Instant::now() > deadline {
            let lost: Vec<_> = unfinished
                .iter()
                .map(|a| (a.id.as_str(), status.get(a.id.as_str()).copied()))
                .take(10)
                .collect();
            panic!(
                "after a restart {running} runs are still running and {} acknowledged runs \
                 have not succeeded, e.g. {lost:?}",
                unfinished.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_runs_finish_and_no_finished_effect_repeats_across_random_sigkills() {
    let kills: usize = std::env::var("SLUICE_CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let mut seed: u64 = std::env::var("SLUICE_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("chaos: {kills} kills, SLUICE_CHAOS_SEED={seed}");
    let dir = tempfile::tempdir().unwrap();
    let (url, counts) = effect_server().await;
    let c = client();

    let mut s: Serve = start(dir.path());
    for wf in workflows(&url) {
        support::put_workflow(&c, &s, &wf).await;
    }
    let mut acked: Vec<Acked> = Vec::new();
    // At each kill: the effects the journal held as done, and their counts then.
    let mut done_at_kill: Vec<(BTreeSet<String>, HashMap<String, u32>)> = Vec::new();
    let started = Instant::now();
    let (mut during_resume, mut checked) = (0, 0);
    for k in 0..kills {
        // One kill in four lands while the engine resumes what the last
        // one cut off, before any new load.
        if k > 0 && xorshift(&mut seed).is_multiple_of(4) {
            let wait = xorshift(&mut seed) % 150;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            s.child.kill().unwrap(); // SIGKILL
            s.child.wait().unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let done = inspect(dir.path()).await;
            done_at_kill.push((done, counts.lock().unwrap().clone()));
            s = start(dir.path());
            during_resume += 1;
            continue;
        }
        // After a restart, every run acknowledged so far finishes.
        checked += all_finish(dir.path(), &acked).await;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = load(&c, &s.base, 16, (k as u64 + 1) * 100_000_000, &stop);
        // A random moment: 150 ms to 1.2 s into the load.
        let wait = 150 + xorshift(&mut seed) % 1050;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        s.child.kill().unwrap(); // SIGKILL
        s.child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            acked.extend(t.await.unwrap());
        }
        // Calls already on their way have landed; none can start now.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let done = inspect(dir.path()).await;
        done_at_kill.push((done, counts.lock().unwrap().clone()));
        s = start(dir.path());
    }
    checked += all_finish(dir.path(), &acked).await;
    assert!(
        acked.len() > 40 * kills,
        "too little load to mean anything: {} runs acknowledged over {kills} kills",
        acked.len()
    );

    // Every acknowledged run finishes, as it should.
    let deadline = Instant::now() + Duration::from_secs(60);
    for a in &acked {
        loop {
            let run = support::get_json(&c, &s, &format!("runs/{}", a.id)).await;
            match run["status"].as_str() {
                Some("succeeded") => {
                    if a.workflow == "async" {
                        assert_eq!(run["output"], json!({"end": a.n}), "{run}");
                    }
                    break;
                }
                Some("running") | Some("waiting") if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => panic!(
                    "acknowledged run {} ({}) did not finish: {run}",
                    a.id, a.workflow
                ),
            }
        }
    }
    // So does every run the engine took, answered or not.
    loop {
        let unfinished = runs(dir.path())
            .await
            .into_iter()
            .filter(|(_, _, status)| status == "running")
            .count();
        if unfinished == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{unfinished} runs still running after the last restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let last = inspect(dir.path()).await;
    let runs = runs(dir.path()).await;
    let counts = counts.lock().unwrap().clone();

    // The counts add up: every acknowledged run is in the journal, every run
    // there succeeded and called each of its effects at least once, and every
    // call the server saw was made by a run in the journal.
    let by_id: BTreeMap<&str, (&str, &str)> = runs
        .iter()
        .map(|(id, wf, st)| (id.as_str(), (wf.as_str(), st.as_str())))
        .collect();
    for a in &acked {
        assert!(
            by_id.contains_key(a.id.as_str()),
            "acknowledged run {} is not in the journal",
            a.id
        );
    }
    let mut expected_effects = BTreeSet::new();
    for (id, (wf, status)) in &by_id {
        assert_eq!(*status, "succeeded", "run {id} of `{wf}`");
        for node in effects_of(wf) {
            let key = format!("{id}/{node}");
            assert!(
                counts.get(&key).is_some_and(|n| *n >= 1),
                "{key} was never called"
            );
            assert!(last.contains(&key), "{key} is not journaled as done");
            expected_effects.insert(key);
        }
    }
    let strays: Vec<&String> = counts
        .keys()
        .filter(|k| !expected_effects.contains(*k))
        .collect();
    assert!(
        strays.is_empty(),
        "calls by no run in the journal: {strays:?}"
    );

    // No effect the journal held as done at a kill was called again later.
    let mut repeated_after_done = Vec::new();
    for (done, then) in &done_at_kill {
        for key in done {
            let before = then.get(key).copied().unwrap_or(0);
            assert!(
                before >= 1,
                "{key} was journaled as done without being called"
            );
            if counts[key] != before {
                repeated_after_done.push(key.clone());
            }
        }
    }
    assert!(
        repeated_after_done.is_empty(),
        "effects called again after they were journaled as done: {repeated_after_done:?}"
    );
    let calls: u32 = counts.values().sum();
    let twice = counts.values().filter(|n| **n > 1).count();
    let answered_sync = acked.iter().filter(|a| a.workflow == "sync").count();
    println!(
        "chaos totals after {kills} SIGKILLs ({during_resume} of them while resuming) in {:.1} s: \
         {checked} checks that an acknowledged run had finished (each, after every restart that followed it); {} runs acknowledged ({answered_sync} answered when finished, {} accepted), \
         {} runs in the journal ({} taken but never answered), all succeeded; {} effects, {calls} calls, \
         {twice} called twice because the kill came mid-call, 0 repeated after being journaled; \
         integrity_check ok {} times",
        started.elapsed().as_secs_f64(),
        acked.len(),
        acked.len() - answered_sync,
        by_id.len(),
        by_id.len() - acked.len(),
        expected_effects.len(),
        kills + 1,
    );
}
