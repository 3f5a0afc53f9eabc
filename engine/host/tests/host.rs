//! The engine host as `sluice serve` and the desktop app use it: a real
//! data dir, a real port, started, used, stopped and started again.

use std::time::Duration;

use serde_json::json;
use sluice_host::{Host, HostError, HostOptions};

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
    let r = c
        .put(format!("{}/api/v1/workflows/ping", host.base_url()))
        .bearer_auth(&host.token)
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
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
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/#/w/ping");
    assert!(r.headers().contains_key("set-cookie"));
    assert_eq!(c.get(&login).send().await.unwrap().status(), 403);

    // One engine per data dir.
    let err = Host::start(options(dir.path())).await.err().unwrap();
    assert!(
        matches!(&err, HostError::Usage(m) if m.contains("in use")),
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
        matches!(&err, HostError::Usage(m) if m.starts_with("cannot listen on 127.0.0.1:")),
        "{err}"
    );
    // The lock was released with the failed start.
    let host = Host::start(options(dir.path())).await.unwrap();
    host.stop().await.unwrap();
}
