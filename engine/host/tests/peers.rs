//! Peers between real engines: two (or three) hosts in one process, each
//! with its own data dir, trigger port and iroh endpoint on loopback with
//! relays off, talking through their HTTP APIs as users and the CLI do.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_host::{Host, HostOptions};

fn client() -> reqwest::Client {
    sluice_nodes::http::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// An engine on `dir` named `name`, its peer endpoint on loopback.
async fn start(dir: &Path, name: &str) -> Host {
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "[user]\nname = \"{name}\"\n\n[peers]\nlisten = \"127.0.0.1:0\"\nrelays = \"none\"\n"
        ),
    )
    .unwrap();
    let mut o = HostOptions::new(dir.to_path_buf());
    o.listen = "127.0.0.1:0".parse().unwrap();
    Host::start(o).await.unwrap()
}

async fn call(
    host: &Host,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = client()
        .request(method, format!("{}/api/v1{path}", host.base_url()))
        .bearer_auth(&host.token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(host: &Host, path: &str) -> Value {
    let (status, v) = call(host, reqwest::Method::GET, path, None).await;
    assert_eq!(status, 200, "GET {path}: {v}");
    v
}

async fn post(host: &Host, path: &str, body: Value) -> (u16, Value) {
    call(host, reqwest::Method::POST, path, Some(body)).await
}

/// Saves `wf` as the draft (what the editor does), not published.
async fn save_draft(host: &Host, wf: &Value) {
    let id = wf["id"].as_str().unwrap();
    let (status, v) = call(
        host,
        reqwest::Method::PUT,
        &format!("/workflows/{id}"),
        Some(wf.clone()),
    )
    .await;
    assert!(status < 300, "PUT {id}: {v}");
}

fn workflow() -> Value {
    json!({"format": "sluice.workflow/v1", "id": "orders", "name": "Orders", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "end"}]})
}

async fn share(host: &Host, id: &str, body: Value) -> Value {
    let (status, v) = post(host, &format!("/workflows/{id}/shares"), body).await;
    assert_eq!(status, 201, "{v}");
    v
}

async fn join(host: &Host, ticket: &str) -> (u16, Value) {
    post(host, "/peers/join", json!({ "ticket": ticket })).await
}

/// Waits up to `within` for `check` to hold, polling.
async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn node_ids(wf: &Value) -> Vec<String> {
    let mut ids: Vec<String> = wf["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

async fn wf_of(host: &Host, id: &str) -> Value {
    get(host, &format!("/workflows/{id}")).await
}

async fn converged(a: &Host, b: &Host, id: &str) -> bool {
    let (va, vb) = (
        a.engine.doc_version(id).await.unwrap(),
        b.engine.doc_version(id).await.unwrap(),
    );
    va == vb && wf_of(a, id).await == wf_of(b, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_join_edit_both_ways_and_converge() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (start(da.path(), "Ada").await, start(db.path(), "Bob").await);
    let mut wf = workflow();
    save_draft(&a, &wf).await;
    let (status, _) = post(&a, "/workflows/orders/publish", json!({})).await;
    assert_eq!(status, 200);

    // The node key: created once, 0600, and it is the peer id.
    let key = std::fs::metadata(da.path().join("peer.key")).unwrap();
    assert_eq!(key.len(), 32);
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777,
        0o600
    );
    let info = get(&a, "/peers").await;
    assert_eq!(info["enabled"], true);
    assert_eq!(info["name"], "Ada");

    let s = share(&a, "orders", json!({"role": "editor"})).await;
    let ticket = s["ticket"].as_str().unwrap();
    assert_eq!(s["link"], format!("sluice://join/{ticket}"));
    let (status, joined) = join(&b, s["link"].as_str().unwrap()).await;
    assert_eq!(status, 201, "{joined}");
    assert_eq!(joined["workflow"], "orders");
    assert_eq!(joined["host_name"], "Ada");
    assert_eq!(joined["role"], "editor");

    // The joiner has the whole workflow, as a draft: nothing published
    // there, its webhook not armed.
    assert_eq!(wf_of(&b, "orders").await, wf_of(&a, "orders").await);
    let state = get(&b, "/workflows/orders/publish").await;
    assert_eq!(state["published"], false, "{state}");
    let r = client()
        .post(format!("{}/hook/orders/orders", b.base_url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    // The sharer lists the peer, connected, by name.
    let shares = get(&a, "/workflows/orders/shares").await;
    assert_eq!(shares["peers"][0]["name"], "Bob", "{shares}");
    assert_eq!(shares["peers"][0]["connected"], true);
    assert_eq!(shares["peers"][0]["peer"], get(&b, "/peers").await["id"]);

    // Concurrent edits on both sides: each adds a node.
    let mut on_a = wf_of(&a, "orders").await;
    on_a["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "from_a", "kind": "output.end"}));
    on_a["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "hook", "to": "from_a"}));
    let mut on_b = wf_of(&b, "orders").await;
    on_b["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "from_b", "kind": "output.end"}));
    on_b["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "hook", "to": "from_b"}));
    tokio::join!(save_draft(&a, &on_a), save_draft(&b, &on_b));
    eventually(
        Duration::from_secs(5),
        "both edits on both sides",
        || async {
            converged(&a, &b, "orders").await
                && node_ids(&wf_of(&a, "orders").await) == ["end", "from_a", "from_b", "hook"]
        },
    )
    .await;

    // An edit reaches the other engine within a second.
    wf = wf_of(&b, "orders").await;
    wf["name"] = json!("Orders (Bob)");
    let t = Instant::now();
    save_draft(&b, &wf).await;
    eventually(Duration::from_secs(1), "B's rename reaches A", || async {
        wf_of(&a, "orders").await["name"] == "Orders (Bob)"
    })
    .await;
    assert!(t.elapsed() < Duration::from_secs(1));

    // On the sharer, the peer's edits wait for its user: the published
    // version is the one from before, and the publish state names Bob.
    let state = get(&a, "/workflows/orders/publish").await;
    assert_eq!(state["published"], true);
    assert!(
        state["from_peers"][0]["peer"]
            .as_str()
            .unwrap()
            .starts_with("Bob ("),
        "{state}"
    );
    // The version history says who made which version, from which peer.
    let versions = get(&a, "/workflows/orders/versions").await;
    assert!(versions.to_string().contains("peer Bob ("), "{versions}");

    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
