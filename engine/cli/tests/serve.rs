//! `sluice serve` as a process: it prints where it listens, answers with the
//! token from the data dir, stops cleanly on SIGTERM, and after a SIGKILL
//! every run it acknowledged (202, or 200 when finished) is there on
//! restart, completed, also under load.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{SLUICE, client, open, start, start_with};

#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let r = client()
        .get(format!("{}/api/v1/health", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    #[cfg(unix)]
    {
        let pid = s.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = s.child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_webhook_runs_complete_after_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "acks", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 300}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "w"}, {"from": "w", "to": "end"}]});
    support::put_workflow(&c, &s, &wf).await;

    let mut acked = Vec::new();
    for n in 0..60 {
        let r = c
            .post(format!("{}/hook/acks/go", s.base))
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let v: Value = r.json().await.unwrap();
        acked.push((v["run_id"].as_str().unwrap().to_string(), n));
    }
    s.child.kill().unwrap(); // SIGKILL, with runs waiting
    s.child.wait().unwrap();

    let mut s = start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    for (id, n) in &acked {
        loop {
            let run = support::get_json(&c, &s, &format!("runs/{id}")).await;
            if run["status"] == "succeeded" {
                assert_eq!(run["output"], json!({"end": n}));
                break;
            }
            assert_eq!(run["status"], "running", "run {id}: {run}");
            assert!(
                Instant::now() < deadline,
                "run {id} did not complete after the restart"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_dir_is_driven_by_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let o = Command::new(SLUICE)
        .args(["runs", "resume"])
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is in use by another"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Reading is fine while serve runs.
    let o = Command::new(SLUICE)
        .args(["runs", "list"])
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    // The lock dies with the process, even a killed one.
    let o = Command::new(SLUICE)
        .args(["runs", "resume"])
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The token is printed when it is created, and never again.
#[tokio::test(flavor = "multi_thread")]
async fn the_token_is_shown_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, printed) = start_with(dir.path(), Command::new(SLUICE));
    assert!(printed.iter().any(|l| l.contains(&s.token)), "{printed:?}");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let (mut s, printed) = start_with(dir.path(), Command::new(SLUICE));
    assert!(!printed.iter().any(|l| l.contains(&s.token)), "{printed:?}");
    assert!(
        printed.iter().any(|l| l.contains("`sluice token`")),
        "{printed:?}"
    );
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let o = Command::new(SLUICE)
        .arg("token")
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), s.token);
}

/// 2,000 idle connections against a server with few file descriptors (a
/// soft and hard limit of 512, as on many desktops): the oldest idle ones
/// are closed for new ones, so a webhook is still answered. (Before, the
/// process ran out of descriptors at a few hundred and answered nothing.)
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_idle_connections_do_not_stop_a_webhook() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        panic!("prlimit (util-linux) is needed for this test");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=512:512", "--", SLUICE]);
    let (mut s, _) = start_with(dir.path(), cmd);
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "ping", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "p"}},
        {"id": "end", "kind": "output.end", "config": {"value": "pong"}}],
        "edges": [{"from": "hook", "to": "end"}]});
    support::put_workflow(&c, &s, &wf).await;
    let addr: std::net::SocketAddr = s.base.trim_start_matches("http://").parse().unwrap();
    let mut idle = Vec::new();
    for _ in 0..2000 {
        match tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(conn)) => idle.push(conn),
            other => panic!("connection {} failed: {other:?}", idle.len()),
        }
    }
    let t = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.post(format!("{}/hook/ping/p", s.base)).send(),
    )
    .await
    .expect("the webhook answers")
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"end": "pong"}));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(idle);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// `sluice open` (alias `login`) as a user runs it beside `sluice serve`.
#[tokio::test(flavor = "multi_thread")]
async fn open_prints_a_fresh_sign_in_link_from_the_running_engine() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing serves the data dir yet: said, with what to do.
    let o = open(dir.path(), &["open", "--print"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no engine is running") && err.contains("sluice serve"),
        "{err}"
    );

    let mut s = start(dir.path());
    let c = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (args, lands) in [
        (&["open", "--print"][..], "location.replace(\"/\")"),
        (
            &["login", "--print", "orders"][..],
            "location.replace(\"/#/w/orders\")",
        ),
    ] {
        let o = open(dir.path(), args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let link = String::from_utf8(o.stdout).unwrap().trim().to_string();
        assert!(
            link.starts_with(&format!("{}/ui/login?code=", s.base)),
            "{link}"
        );
        // The link signs a browser in, once; then it says what to run.
        let r = c.get(&link).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let page = r.text().await.unwrap();
        assert!(
            page.contains("localStorage.setItem") && page.contains(lands),
            "{page}"
        );
        let r = c.get(&link).send().await.unwrap();
        assert_eq!(r.status(), 403);
        let page = r.text().await.unwrap();
        assert!(page.contains("<code>sluice open</code>"), "{page}");
        assert!(!page.contains("Restart"), "{page}");
    }
    // Every link is new: two in a row differ.
    let a = open(dir.path(), &["open", "--print"]).stdout;
    let b = open(dir.path(), &["open", "--print"]).stdout;
    assert_ne!(a, b);

    // Stopped: the engine's address is gone with it.
    #[cfg(unix)]
    {
        let pid = s.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        assert!(s.child.wait().unwrap().success());
        assert!(!dir.path().join("serve.json").exists());
        let o = open(dir.path(), &["open", "--print"]);
        assert_eq!(o.status.code(), Some(1));
    }
    // Killed: the file it left names an address nothing answers on.
    let mut s = start(dir.path());
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert!(dir.path().join("serve.json").exists());
    let o = open(dir.path(), &["open", "--print"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no engine is running"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn publish_and_unpublish_go_through_the_running_engine() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "tick", "nodes": [
        {"id": "clock", "kind": "trigger.schedule", "config": {"cron": "* * * * * *"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "clock", "to": "end"}]});
    let put = |wf: Value| {
        c.put(format!("{}/api/v1/workflows/tick", s.base))
            .bearer_auth(&s.token)
            .json(&wf)
            .send()
    };
    assert!(put(wf.clone()).await.unwrap().status().is_success());
    let runs = || async {
        c.get(format!("{}/api/v1/runs?workflow=tick&limit=500", s.base))
            .bearer_auth(&s.token)
            .send()
            .await
            .unwrap()
            .json::<Vec<Value>>()
            .await
            .unwrap()
            .len()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(runs().await, 0, "a draft's schedule ran");

    // Published from the command line: the running engine's schedule arms now.
    let o = open(dir.path(), &["publish", "tick"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("through the engine at"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs().await == 0 {
        assert!(
            Instant::now() < deadline,
            "the schedule never fired after publishing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Unpublished the same way: it stops.
    let o = open(dir.path(), &["unpublish", "tick"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = runs().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        runs().await,
        after,
        "the schedule still fires after unpublishing"
    );
    let o = open(dir.path(), &["unpublish", "tick"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("was not published"));

    // A refusal is the engine's, named: a version this workflow never had.
    let o = open(dir.path(), &["publish", "tick", "--version", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nope"), "{err}");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// Webhooks under load from 32 clients, answered `when_finished` (a
/// workflow that runs in one go, recorded whole when it ends) and
/// `immediately` (one that waits, answered once its creation is committed;
/// one that runs in one go, answered once it is recorded finished); the
/// engine is SIGKILLed mid-load. After a restart every
/// run whose request was answered is there and ends as it should, and no
/// run of the one-go workflow is half-recorded.
#[tokio::test(flavor = "multi_thread")]
async fn every_acknowledged_webhook_run_survives_a_sigkill_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let c = client();
    let put = |wf: Value| {
        let (c, s) = (&c, &s);
        async move { support::put_workflow(c, s, &wf).await }
    };
    put(json!({"format": "sluice.workflow/v1", "id": "fast", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "when_finished"}},
        {"id": "set", "kind": "data.set", "config": {"values": {"n": "{{ input.body.n }}", "double": "{{ input.body.n * 2 }}"}}},
        {"id": "say", "kind": "util.log", "config": {"message": "n is {{ input.n }}"}},
        {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": {"n": "{{ input.n }}", "double": "{{ input.double }}"}}}],
        "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "say"}, {"from": "say", "to": "reply"}]}))
    .await;
    put(json!({"format": "sluice.workflow/v1", "id": "later", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 50}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "w"}, {"from": "w", "to": "end"}]}))
    .await;
    put(json!({"format": "sluice.workflow/v1", "id": "now", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
        {"id": "set", "kind": "data.set", "config": {"values": {"n": "{{ input.body.n }}"}}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.n }}"}}],
        "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "end"}]}))
    .await;

    // (run id, workflow, n) of every answered request.
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for k in 0..32u64 {
        let (c, base, acked, stop) = (c.clone(), s.base.clone(), acked.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut n = k * 1_000_000;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let wf = match n % 4 {
                    0 => "later",
                    1 => "now",
                    _ => "fast",
                };
                let Some(support::HookAnswer {
                    status,
                    run: Some(id),
                    body,
                }) = support::post_hook(&c, &base, wf, n).await
                else {
                    break; // the engine is gone
                };
                if wf == "fast" {
                    assert_eq!(status, 200, "{body}");
                    assert_eq!(body, json!({"n": n, "double": n * 2}));
                } else {
                    assert_eq!(status, 202, "{body}");
                }
                acked.lock().unwrap().push((id, wf, n));
            }
        }));
    }
    // Under load for a while, then killed mid-flight.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.child.kill().unwrap(); // SIGKILL
    s.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in clients {
        t.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let fast = acked.iter().filter(|(_, wf, _)| *wf == "fast").count();
    assert!(
        fast > 100 && acked.len() > fast,
        "too little load to mean anything: {} runs answered, {fast} of them when finished",
        acked.len()
    );

    let mut s = start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    for (id, wf, n) in &acked {
        loop {
            let run = support::get_json(&c, &s, &format!("runs/{id}")).await;
            if run["status"] == "succeeded" {
                if *wf == "fast" {
                    let output = run["output"].to_string();
                    assert!(output.contains(&format!("\"double\":{}", n * 2)), "{run}");
                    let steps = run["steps"].as_array().unwrap();
                    assert_eq!(steps.len(), 4, "run {id}: {run}");
                    let logs = support::get_json(&c, &s, &format!("runs/{id}/logs")).await;
                    assert!(logs.to_string().contains(&format!("n is {n}")), "{logs}");
                } else {
                    assert_eq!(run["output"], json!({"end": n}), "{run}");
                }
                break;
            }
            assert!(
                *wf == "later" && run["status"] == "running",
                "run {id} of {wf}: {run}"
            );
            assert!(
                Instant::now() < deadline,
                "run {id} did not complete after the restart"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // All or nothing: no run of the one-go workflows is left half-recorded.
    for wf in ["fast", "now"] {
        let path = format!("runs?workflow={wf}&status=running&limit=1000");
        let runs = support::get_json(&c, &s, &path).await;
        assert_eq!(runs, json!([]), "{wf}: {runs}");
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// A serving engine prunes by itself (`[runs] keep_max`), and reports its
/// storage to the token holder only.
#[tokio::test(flavor = "multi_thread")]
async fn a_serving_engine_prunes_its_run_history_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "[runs]\nkeep_max = 3\n").unwrap();
    let mut s = start(dir.path());
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "hits", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "when_finished"}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "end"}]});
    support::put_workflow(&c, &s, &wf).await;
    for n in 0..10 {
        let r = c
            .post(format!("{}/hook/hits/go", s.base))
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let storage = format!("{}/api/v1/storage", s.base);
    let r = c.get(&storage).send().await.unwrap();
    assert_eq!(r.status(), 401, "the storage report needs the token");

    let deadline = Instant::now() + Duration::from_secs(30);
    let report = loop {
        let report = support::get_json(&c, &s, "storage").await;
        if report["runs"]["total"] == 3 {
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "the engine did not prune by itself: {report:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(report["last_prune"]["runs_deleted"], 7, "{report:#}");
    assert_eq!(
        report["runs"]["by_workflow"],
        json!([{"workflow": "hits", "runs": 3}])
    );
    let runs = support::get_json(&c, &s, "runs?workflow=hits").await;
    let outputs: Vec<Value> = runs["runs"]
        .as_array()
        .or(runs.as_array())
        .unwrap()
        .iter()
        .map(|r| r["output"]["end"].clone())
        .collect();
    assert_eq!(outputs, [json!(9), json!(8), json!(7)], "the newest stay");
    let r = c
        .post(format!("{}/api/v1/storage/prune", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let again: Value = r.json().await.unwrap();
    assert_eq!(again["runs_deleted"], 0, "{again:#}");
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// All finished runs of `base`'s engine (or of a data dir, through the
/// CLI), by id: status and output.
async fn finished_runs(c: &reqwest::Client, base: &str, token: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut url = format!("{base}/api/v1/runs?limit=500");
        if let Some(b) = &before {
            url.push_str(&format!("&before={b}"));
        }
        let page: Value = c
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let runs = page["runs"].as_array().or(page.as_array()).unwrap().clone();
        if runs.is_empty() {
            break;
        }
        before = runs.last().unwrap()["id"].as_str().map(str::to_string);
        for r in runs {
            if r["status"] != "running" {
                out.push((
                    r["id"].as_str().unwrap().to_string(),
                    json!([r["status"], r["output"]]),
                ));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `sluice backup` of an engine under load, restored into a new dir: the
/// same finished runs, the vault key only when asked for, the runs that
/// were waiting finish there; restore refuses a dir that is not empty and
/// an archive that is not a backup, leaving nothing behind.
#[tokio::test(flavor = "multi_thread")]
async fn a_backup_taken_under_load_restores_the_same_finished_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut s = start(&data);
    let c = client();
    let quick = json!({"format": "sluice.workflow/v1", "id": "quick", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "when_finished"}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "end"}]});
    let slow = json!({"format": "sluice.workflow/v1", "id": "slow", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 6000}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "w"}, {"from": "w", "to": "end"}]});
    support::put_workflow(&c, &s, &quick).await;
    support::put_workflow(&c, &s, &slow).await;
    let o = Command::new(SLUICE)
        .args([
            "credentials",
            "set",
            "api",
            "--kind",
            "bearer",
            "--json",
            r#"{"token": "s3cret"}"#,
        ])
        .env("SLUICE_DATA_DIR", &data)
        .env("SLUICE_VAULT_KEY", "file")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let mut waiting = Vec::new();
    for n in 0..5 {
        let r: Value = c
            .post(format!("{}/hook/slow/go", s.base))
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        waiting.push(r["run_id"].as_str().unwrap().to_string());
    }
    // Load while the backup is taken.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for k in 0..4 {
        let (c, base, stop) = (c.clone(), s.base.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut n = k * 1_000_000;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = c
                    .post(format!("{base}/hook/quick/go"))
                    .json(&json!({"n": n}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                n += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = finished_runs(&c, &s.base, &s.token).await;
    let archive = tmp.path().join("backup.tar.gz");
    let o = support::open(&data, &["backup", archive.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(said.contains("the vault key is not inside"), "{said}");
    let o = support::open(
        &data,
        &[
            "backup",
            "--with-key",
            tmp.path().join("keyed.tar.gz").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    let source_after = finished_runs(&c, &s.base, &s.token).await;
    s.child.kill().unwrap();
    s.child.wait().unwrap();

    // Restore: the finished runs are those the source had finished when
    // the backup was taken (each exactly as the source has it), the runs
    // that were waiting resume, the key is there only when asked for.
    let restored = tmp.path().join("restored");
    let o = support::open(&restored, &["restore", archive.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("5 to resume"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(!restored.join("vault.key").exists());
    assert!(
        !restored.join("api-token").exists(),
        "a restore gets its own token"
    );
    let mut r = start(&restored);
    let got = finished_runs(&c, &r.base, &r.token).await;
    let source: std::collections::HashMap<_, _> = source_after.iter().cloned().collect();
    for run in &before {
        assert!(
            got.contains(run),
            "{} was finished before the backup",
            run.0
        );
    }
    for (id, v) in &got {
        assert_eq!(source.get(id), Some(v), "{id} as the source has it");
    }
    assert!(
        got.len() > before.len(),
        "runs finished during the backup are in it too"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in &waiting {
        loop {
            let run = support::get_json(&c, &r, &format!("runs/{id}")).await;
            if run["status"] == "succeeded" {
                break;
            }
            assert!(Instant::now() < deadline, "{id} did not resume: {run}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    r.child.kill().unwrap();
    r.child.wait().unwrap();
    let keyed = tmp.path().join("keyed");
    let o = support::open(
        &keyed,
        &["restore", tmp.path().join("keyed.tar.gz").to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(keyed.join("vault.key"))
            .unwrap()
            .trim(),
        std::fs::read_to_string(data.join("vault.key"))
            .unwrap()
            .trim()
    );
    let o = support::open(&keyed, &["credentials", "list"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("api"));

    // Refusals leave things as they were.
    let o = support::open(&keyed, &["restore", archive.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not empty"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(keyed.join("vault.key").exists());
    let junk = tmp.path().join("junk.tar.gz");
    std::fs::write(&junk, b"this is not an archive").unwrap();
    let fresh = tmp.path().join("fresh");
    let o = support::open(&fresh, &["restore", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a Sluice backup"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!fresh.exists(), "a failed restore leaves nothing behind");
}

/// The data dir's disk fills up under a serving engine: new runs get 507
/// naming the reason, reads go on, it recovers by itself once space is
/// free again, and every run acknowledged before is there after a restart.
/// Needs a small filesystem: a tmpfs mounted as root (skipped, saying so,
/// where that is not allowed).
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_refuses_new_runs_with_507_keeps_reads_and_recovers() {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let mnt = disk.path().to_path_buf();
    let data = mnt.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut s = start(&data);
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "hits", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "when_finished"}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "end"}]});
    support::put_workflow(&c, &s, &wf).await;
    let hit = |n: u64| {
        c.post(format!("{}/hook/hits/go", s.base))
            .json(&json!({"n": n, "pad": "x".repeat(2000)}))
            .send()
    };
    let mut acked = Vec::new();
    for n in 0..20 {
        let r = hit(n).await.unwrap();
        assert_eq!(r.status(), 200);
        acked.push(r.headers()["x-sluice-run"].to_str().unwrap().to_string());
    }

    let filler = disk.fill(0);
    let mut refused = None;
    for n in 100..400 {
        let r = hit(n).await.unwrap();
        match r.status().as_u16() {
            200 => acked.push(r.headers()["x-sluice-run"].to_str().unwrap().to_string()),
            507 => {
                refused = Some(r.json::<Value>().await.unwrap());
                break;
            }
            // A run admitted just before the disk filled fails to record.
            500 => {}
            other => panic!("unexpected {other}"),
        }
    }
    let refused = refused.expect("no 507 while the disk was full");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot be written") && message.contains("free some disk space"),
        "{message}"
    );
    let r = c
        .get(format!("{}/api/v1/runs/{}", s.base, acked[0]))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "reads go on");
    assert_eq!(hit(1000).await.unwrap().status(), 507, "still refused");

    // Space returns: the engine takes runs again by itself.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = hit(2000).await.unwrap();
        if r.status() == 200 {
            acked.push(r.headers()["x-sluice-run"].to_str().unwrap().to_string());
            break;
        }
        assert!(Instant::now() < deadline, "did not recover: {}", r.status());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();

    let mut s = start(&data);
    for id in &acked {
        let run = support::get_json(&c, &s, &format!("runs/{id}")).await;
        assert_eq!(run["status"], "succeeded", "{id}: {run}");
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

/// A 16 MiB tmpfs (a small disk to fill), unmounted when dropped. None,
/// saying why, where it cannot be mounted (it needs root).
struct SmallDisk {
    _dir: tempfile::TempDir,
    mnt: std::path::PathBuf,
}

impl SmallDisk {
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("small");
        std::fs::create_dir(&mnt).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
            .arg(&mnt)
            .stderr(std::process::Stdio::null())
            .status();
        if !matches!(mounted, Ok(s) if s.success()) {
            eprintln!("skipped: cannot mount a 16 MiB tmpfs here (needs root) to fill a disk");
            return None;
        }
        Some(SmallDisk { _dir: dir, mnt })
    }

    fn path(&self) -> &std::path::Path {
        &self.mnt
    }

    /// Fills the disk with a file, then gives `leave` bytes back; the file.
    fn fill(&self, leave: u64) -> std::path::PathBuf {
        use std::io::Write;
        let filler = self.mnt.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _synced = f.sync_all();
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(leave)).unwrap();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _unmounted = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

/// A webhook body too big to keep inline goes to the blob store; when the
/// disk has no room for it (though the journal still has room for small
/// runs) the request gets 507 naming the cause, not a 500; runs that fit go
/// on, and once space returns the big one is taken again by itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_blob_the_disk_has_no_room_for_is_a_507_and_recovers() {
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let data = disk.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut s = start(&data);
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "big", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "when_finished"}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "end"}]});
    support::put_workflow(&c, &s, &wf).await;
    let hit = |n: u64, pad: usize| {
        c.post(format!("{}/hook/big/go", s.base))
            .json(&json!({"n": n, "pad": "x".repeat(pad)}))
            .send()
    };
    // 3 MiB: a blob.
    let r = hit(1, 3 << 20).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    // Room for small runs, not for a 3 MiB blob.
    let filler = disk.fill(1 << 20);
    let r = hit(2, 3 << 20).await.unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 507, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("blobs") && message.contains("free some disk space"),
        "{message}"
    );
    // The refusal holds until a probe (a 64 KiB file) finds room: there is,
    // for small runs; a big one is refused again, each time.
    let r = hit(3, 10).await.unwrap();
    assert_eq!(r.status(), 200, "a small run fits");
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"end": 3}));
    let r = hit(4, 3 << 20).await.unwrap();
    assert_eq!(r.status(), 507);

    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = hit(5, 3 << 20).await.unwrap();
        if r.status() == 200 {
            assert_eq!(r.json::<Value>().await.unwrap(), json!({"end": 5}));
            break;
        }
        assert_eq!(r.status(), 507);
        assert!(Instant::now() < deadline, "did not recover");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}
