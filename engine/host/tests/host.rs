//! The engine host as `sluice serve` and the desktop app use it: a real
//! data dir, a real port, started, used, stopped and started again.

use std::time::Duration;

use serde_json::json;
use sluice_host::{Error, Host, HostOptions};

fn options(dir: &std::path::Path) -> HostOptions {
    let mut o = HostOptions::new(dir.to_path_buf());
    o.listen = "127.0.0.1:0".parse().unwrap();
    o
}

fn client() -> reqwest::Client {
    sluice_nodes::http::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Stores a workflow through the API, and publishes it.
async fn put_workflow(c: &reqwest::Client, host: &Host, wf: &serde_json::Value) {
    let r = c
        .put(format!(
            "{}/api/v1/workflows/{}?publish=true",
            host.base_url(),
            wf["id"].as_str().unwrap()
        ))
        .bearer_auth(&host.token)
        .json(wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

#[tokio::test]
async fn starts_serves_refuses_a_second_engine_stops_and_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::start(options(dir.path())).await.unwrap();
    assert!(host.is_serving());
    assert!(host.addr.ip().is_loopback() && host.addr.port() != 0);
    assert_eq!(host.workflows, dir.path().join("workflows"));
    let c = client();
    let r = c
        .get(format!("{}/api/v1/health", host.base_url()))
        .bearer_auth(&host.token)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    // A workflow through the API, and a webhook that answers.
    let wf = json!({"format": "sluice.workflow/v1", "id": "ping", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "ping", "respond": "when_finished"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "end"}]});
    put_workflow(&c, &host, &wf).await;
    let r = c
        .post(format!("{}/hook/ping/ping", host.base_url()))
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // The sign-in link lands where it was asked to, and only once.
    let login = host.login_url("/#/w/ping");
    assert!(login.contains("then=/%23/w/ping"), "{login}");
    let r = c.get(&login).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let page = r.text().await.unwrap();
    assert!(page.contains("location.replace(\"/#/w/ping\")"), "{page}");
    assert!(
        page.contains("localStorage.setItem(\"sluice_session\""),
        "{page}"
    );
    assert_eq!(c.get(&login).send().await.unwrap().status(), 403);

    // One engine per data dir.
    let err = Host::start(options(dir.path())).await.err().unwrap();
    assert!(
        matches!(&err, Error::InUse { .. }) && err.is_usage() && err.to_string().contains("in use"),
        "{err}"
    );

    // Stopped: the port is closed, the lock released, the workflow kept.
    let base = host.base_url();
    host.stop().await.unwrap();
    assert!(c.get(format!("{base}/api/v1/health")).send().await.is_err());
    let again = Host::start(options(dir.path())).await.unwrap();
    let r = c
        .get(format!("{}/api/v1/workflows/ping", again.base_url()))
        .bearer_auth(&again.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    again.stop().await.unwrap();
}

#[tokio::test]
async fn a_busy_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(dir.path());
    o.listen = taken.local_addr().unwrap();
    let err = Host::start(o).await.err().unwrap();
    assert!(
        matches!(&err, Error::Bind { .. })
            && err.is_usage()
            && err.to_string().starts_with("cannot listen on 127.0.0.1:"),
        "{err}"
    );
    // The lock was released with the failed start.
    let host = Host::start(options(dir.path())).await.unwrap();
    host.stop().await.unwrap();
}

/// `[server]` in config.toml sets the port's limits: the body limit (413),
/// how long `when_finished` waits (then 202 with the run id), and the
/// engine's run limit (429).
#[tokio::test]
async fn server_limits_come_from_config_toml() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.toml"),
        "[server]\nbody_limit_bytes = 1024\nwait_ms = 300\nmax_active_runs = 1\n",
    )
    .unwrap();
    let host = Host::start(options(dir.path())).await.unwrap();
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "slow", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "go", "respond": "when_finished"}},
        {"id": "nap", "kind": "flow.wait", "config": {"duration_ms": 1500}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "nap"}, {"from": "nap", "to": "end"}]});
    put_workflow(&c, &host, &wf).await;
    let hook = format!("{}/hook/slow/go", host.base_url());

    let r = c
        .post(&hook)
        .json(&json!({"pad": "x".repeat(2048)}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413, "a 2 KiB body over a 1 KiB limit");

    let started = std::time::Instant::now();
    let r = c.post(&hook).json(&json!({"n": 1})).send().await.unwrap();
    let waited = started.elapsed();
    assert_eq!(r.status(), 202, "the run outlives the 300 ms wait");
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["run_id"]
            .as_str()
            .is_some_and(|id| id.starts_with('r')),
        "{body}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(1400),
        "answered after {waited:?}, not after the configured 300 ms"
    );

    // That run is still in progress, and the limit is one run.
    let r = c.post(&hook).json(&json!({"n": 2})).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    host.stop().await.unwrap();
}

#[tokio::test]
async fn a_zero_limit_in_config_toml_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "[server]\nwait_ms = 0\n").unwrap();
    let err = Host::start(options(dir.path())).await.err().unwrap();
    let text = err.to_string();
    assert!(
        matches!(&err, Error::Settings(_)) && err.is_usage() && text.contains("config.toml:2:"),
        "{text}"
    );
}
