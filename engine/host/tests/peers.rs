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
    put_draft(host, wf, "").await
}

/// `PUT /workflows/{id}{query}` with `wf`, which must be taken.
async fn put_draft(host: &Host, wf: &Value, query: &str) {
    let id = wf["id"].as_str().unwrap();
    let (status, v) = call(
        host,
        reqwest::Method::PUT,
        &format!("/workflows/{id}{query}"),
        Some(wf.clone()),
    )
    .await;
    assert!(status < 300, "PUT {id}{query}: {v}");
}

/// The draft and the document version it is (`x-sluice-version`).
async fn read_draft(host: &Host, id: &str) -> (Value, String) {
    let r = client()
        .get(format!("{}/api/v1/workflows/{id}", host.base_url()))
        .bearer_auth(&host.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let version = r.headers()["x-sluice-version"]
        .to_str()
        .unwrap()
        .to_string();
    (r.json().await.unwrap(), version)
}

/// Saves `wf`, made from the draft at `base`, as the draft: edits that
/// came in since (a peer's) are merged with it, not undone.
async fn save_draft_onto(host: &Host, wf: &Value, base: &str) {
    put_draft(host, wf, &format!("?base={base}")).await
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

    // Nothing shared nor joined yet: no endpoint, no key. Asking for this
    // install as a peer starts it.
    assert!(!da.path().join("peer.key").exists());
    let info = get(&a, "/peers").await;
    // The node key: created once, 0600, and it is the peer id.
    let key = std::fs::metadata(da.path().join("peer.key")).unwrap();
    assert_eq!(key.len(), 32);
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777,
        0o600
    );
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

    // Edits on both sides, each made from the draft as it was read: each
    // adds a node. Bob's reaches Ada before she saves hers, made from her
    // older copy (the order that lost an edit when a save replaced the
    // draft whole): hers is merged with his, not made over it.
    let (mut on_a, a_base) = read_draft(&a, "orders").await;
    on_a["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "from_a", "kind": "output.end"}));
    on_a["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "hook", "to": "from_a"}));
    let (mut on_b, b_base) = read_draft(&b, "orders").await;
    on_b["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "from_b", "kind": "output.end"}));
    on_b["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "hook", "to": "from_b"}));
    save_draft_onto(&b, &on_b, &b_base).await;
    eventually(Duration::from_secs(20), "Bob's edit on A", || async {
        node_ids(&wf_of(&a, "orders").await).contains(&"from_b".to_string())
    })
    .await;
    save_draft_onto(&a, &on_a, &a_base).await;
    // Generous: the whole suite runs at once on CI's two cores (a run there
    // once took longer than 5 s); a lost edit still fails here.
    eventually(
        Duration::from_secs(20),
        "both edits on both sides",
        || async {
            converged(&a, &b, "orders").await
                && node_ids(&wf_of(&a, "orders").await) == ["end", "from_a", "from_b", "hook"]
        },
    )
    .await;
    // And truly at once, from the same converged copy on each side.
    let (mut on_a, a_base) = read_draft(&a, "orders").await;
    on_a["name"] = json!("Orders (at once)");
    let (mut on_b, b_base) = read_draft(&b, "orders").await;
    on_b["nodes"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["id"] != "from_a");
    on_b["edges"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["to"] != "from_a");
    tokio::join!(
        save_draft_onto(&a, &on_a, &a_base),
        save_draft_onto(&b, &on_b, &b_base)
    );
    eventually(
        Duration::from_secs(20),
        "both concurrent edits on both sides",
        || async {
            let wf = wf_of(&a, "orders").await;
            converged(&a, &b, "orders").await
                && wf["name"] == "Orders (at once)"
                && node_ids(&wf) == ["end", "from_b", "hook"]
        },
    )
    .await;

    // A later edit reaches the other engine too (how fast is measured by
    // `cargo xtask bench peers`, not here: a timing bound in a test only
    // measures how loaded the machine running it is).
    wf = wf_of(&b, "orders").await;
    wf["name"] = json!("Orders (Bob)");
    save_draft(&b, &wf).await;
    eventually(Duration::from_secs(20), "B's rename reaches A", || async {
        wf_of(&a, "orders").await["name"] == "Orders (Bob)"
    })
    .await;

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

async fn link_state(host: &Host, id: &str) -> Value {
    let info = get(host, "/peers").await;
    info["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["workflow"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

fn with_secret(ticket: &str, secret: [u8; 32]) -> String {
    let mut t = sluice_peers::Ticket::decode(ticket).unwrap();
    t.secret = secret;
    t.encode()
}

async fn add_node(host: &Host, id: &str, node: &str) {
    let (mut wf, base) = read_draft(host, id).await;
    wf["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": node, "kind": "output.end"}));
    wf["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "hook", "to": node}));
    save_draft_onto(host, &wf, &base).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_bad_tickets_revoked_and_removed_peers_are_refused() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(dirs[0].path(), "Ada").await;
    let b = start(dirs[1].path(), "Bob").await;
    let c = start(dirs[2].path(), "Cy").await;
    save_draft(&a, &workflow()).await;

    // A viewer sees the workflow; its edits change nothing on the sharer.
    let viewer = share(&a, "orders", json!({"role": "viewer"})).await;
    let (status, joined) = join(&b, viewer["ticket"].as_str().unwrap()).await;
    assert_eq!(status, 201, "{joined}");
    assert_eq!(joined["role"], "viewer");
    let before = a.engine.doc_version("orders").await.unwrap();
    add_node(&b, "orders", "sneaky").await;
    // The sharer's own edit still reaches the viewer.
    add_node(&a, "orders", "from_a").await;
    eventually(
        Duration::from_secs(5),
        "A's edit reaches the viewer",
        || async { node_ids(&wf_of(&b, "orders").await).contains(&"from_a".to_string()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let on_a = node_ids(&wf_of(&a, "orders").await);
    assert_eq!(on_a, ["end", "from_a", "hook"], "a viewer's edit got in");
    assert_ne!(a.engine.doc_version("orders").await.unwrap(), before);

    // One use: the first joiner gets in, the second is refused.
    let once = share(&a, "orders", json!({"role": "editor", "uses": 1})).await;
    let once_ticket = once["ticket"].as_str().unwrap();
    // A wrong secret is refused and spends nothing.
    let (status, err) = join(&c, &with_secret(once_ticket, [0; 32])).await;
    assert_eq!(status, 400, "{err}");
    assert!(err.to_string().contains("wrong secret"), "{err}");
    assert!(get(&c, "/workflows").await.as_array().unwrap().is_empty());
    let (status, joined) = join(&c, once_ticket).await;
    assert_eq!(status, 201, "{joined}");
    let dir_d = tempfile::tempdir().unwrap();
    let d = start(dir_d.path(), "Dee").await;
    let (status, err) = join(&d, once_ticket).await;
    assert_eq!(status, 400);
    assert!(err.to_string().contains("used up"), "{err}");
    // An expired ticket.
    let expired = share(&a, "orders", json!({"role": "editor", "expires_in_s": 0})).await;
    let (status, err) = join(&d, expired["ticket"].as_str().unwrap()).await;
    assert_eq!(status, 400);
    assert!(err.to_string().contains("expired"), "{err}");
    assert!(get(&d, "/workflows").await.as_array().unwrap().is_empty());

    // Revoking the viewer's share closes its live connection at once and
    // refuses it afterwards.
    let r = call(
        &a,
        reqwest::Method::DELETE,
        &format!("/shares/{}", viewer["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(r.0, 204, "{}", r.1);
    eventually(Duration::from_secs(5), "B's link is refused", || async {
        link_state(&b, "orders").await["state"] == "refused"
    })
    .await;
    let shares = get(&a, "/workflows/orders/shares").await;
    let bob = shares["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Bob")
        .unwrap();
    assert_eq!(bob["connected"], false, "{shares}");
    let b2 = tempfile::tempdir().unwrap();
    drop(b2);
    // Rejoining with the revoked ticket (after deleting the copy) is refused.
    let (status, _) = call(&b, reqwest::Method::DELETE, "/workflows/orders", None).await;
    assert!(status < 300);
    let (status, err) = join(&b, viewer["ticket"].as_str().unwrap()).await;
    assert_eq!(status, 400);
    assert!(err.to_string().contains("revoked"), "{err}");

    // Removing a peer: disconnected, and its ticket no longer lets it in.
    let cy = get(&c, "/peers").await["id"].as_str().unwrap().to_string();
    let r = call(
        &a,
        reqwest::Method::DELETE,
        &format!("/workflows/orders/peers/{cy}"),
        None,
    )
    .await;
    assert_eq!(r.0, 204, "{}", r.1);
    eventually(Duration::from_secs(5), "C's link is refused", || async {
        link_state(&c, "orders").await["state"] == "refused"
    })
    .await;
    add_node(&c, "orders", "after_removal").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!node_ids(&wf_of(&a, "orders").await).contains(&"after_removal".to_string()));
    // Unknown shares and peers are 404s.
    assert_eq!(
        call(&a, reqwest::Method::DELETE, "/shares/nope", None)
            .await
            .0,
        404
    );
    assert_eq!(
        call(
            &a,
            reqwest::Method::DELETE,
            "/workflows/orders/peers/nope",
            None
        )
        .await
        .0,
        404
    );

    for h in [a, b, c, d] {
        h.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_edits_merge_when_the_two_meet_again_after_restarts() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(da.path(), "Ada").await;
    let b = start(db.path(), "Bob").await;
    save_draft(&a, &workflow()).await;
    let s = share(&a, "orders", json!({"role": "editor"})).await;
    assert_eq!(join(&b, s["ticket"].as_str().unwrap()).await.0, 201);

    // The joiner goes away; the sharer edits; the sharer goes away too.
    b.stop().await.unwrap();
    add_node(&a, "orders", "from_a").await;
    a.stop().await.unwrap();
    // The joiner comes back alone and edits offline (a laptop on a train).
    let b = start(db.path(), "Bob").await;
    add_node(&b, "orders", "from_b").await;
    eventually(
        Duration::from_secs(5),
        "B knows A is away, with an edit waiting",
        || async {
            let l = link_state(&b, "orders").await;
            l["state"] == "reconnecting" && l["waiting"].as_u64() >= Some(1)
        },
    )
    .await;
    // The sharer comes back (on the port it had): both keep all edits.
    let a = start(da.path(), "Ada").await;
    eventually(
        Duration::from_secs(15),
        "both edits on both sides",
        || async {
            converged(&a, &b, "orders").await
                && node_ids(&wf_of(&a, "orders").await) == ["end", "from_a", "from_b", "hook"]
        },
    )
    .await;
    assert_eq!(link_state(&b, "orders").await["state"], "connected");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_peer_edits_through_the_hub_and_presence_comes_and_goes() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = start(dirs[0].path(), "Ada").await;
    let b = start(dirs[1].path(), "Bob").await;
    let c = start(dirs[2].path(), "Cy").await;
    save_draft(&a, &workflow()).await;
    let s = share(&a, "orders", json!({"role": "editor"})).await;
    assert_eq!(join(&b, s["ticket"].as_str().unwrap()).await.0, 201);
    assert_eq!(join(&c, s["ticket"].as_str().unwrap()).await.0, 201);
    add_node(&c, "orders", "from_c").await;
    eventually(
        Duration::from_secs(5),
        "C's edit reaches B through A",
        || async { converged(&b, &c, "orders").await && converged(&a, &b, "orders").await },
    )
    .await;
    assert!(node_ids(&wf_of(&b, "orders").await).contains(&"from_c".to_string()));

    // Presence set on C (an editor window there) shows on A and B, and
    // clears when C goes away.
    let mut p = sluice_model::doc::Presence::new(30_000);
    let bytes = p.set("viewer-c", &json!({"name": "Cy", "selected": ["hook"]}));
    let origin = c.engine.new_origin();
    c.engine.presence_update("orders", &bytes, origin).unwrap();
    let sees = |h: &Host| {
        let mut seen = sluice_model::doc::Presence::new(30_000);
        seen.apply(&h.engine.presence_state("orders")).ok();
        seen.states().contains_key("viewer-c")
    };
    eventually(
        Duration::from_secs(5),
        "C's presence on A and B",
        || async { sees(&a) && sees(&b) },
    )
    .await;
    c.stop().await.unwrap();
    eventually(Duration::from_secs(5), "C's presence cleared", || async {
        !sees(&a) && !sees(&b)
    })
    .await;
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// A peer that speaks the protocol by hand (and so can break it).
struct Raw {
    ep: iroh::Endpoint,
}

impl Raw {
    async fn new() -> Raw {
        let ep = iroh::Endpoint::builder(iroh::endpoint::presets::Minimal)
            .secret_key(iroh::SecretKey::generate())
            .relay_mode(iroh::RelayMode::Disabled)
            .portmapper_config(iroh::endpoint::PortmapperConfig::Disabled)
            .net_report_config(iroh::NetReportConfig::minimal())
            .clear_ip_transports()
            .bind_addr("127.0.0.1:0")
            .unwrap()
            .bind()
            .await
            .unwrap();
        Raw { ep }
    }

    async fn open(
        &self,
        ticket: &str,
    ) -> (
        iroh::endpoint::Connection,
        iroh::endpoint::SendStream,
        iroh::endpoint::RecvStream,
    ) {
        let t = sluice_peers::Ticket::decode(ticket).unwrap();
        let conn = self.ep.connect(t.addr, wire::ALPN).await.unwrap();
        let (tx, rx) = conn.open_bi().await.unwrap();
        (conn, tx, rx)
    }

    /// Joins with `ticket`: the welcome's update and version.
    async fn join(
        &self,
        ticket: &str,
    ) -> (
        iroh::endpoint::Connection,
        iroh::endpoint::SendStream,
        iroh::endpoint::RecvStream,
        Vec<u8>,
    ) {
        let t = sluice_peers::Ticket::decode(ticket).unwrap();
        let (conn, mut tx, mut rx) = self.open(ticket).await;
        wire::write_frame(
            &mut tx,
            &Frame::Hello {
                workflow: t.workflow,
                share: t.share,
                secret: t.secret.to_vec(),
                name: "Mallory\u{7}".repeat(40),
                version: Vec::new(),
            },
        )
        .await
        .unwrap();
        match wire::read_frame(&mut rx, wire::MAX_FRAME).await.unwrap() {
            Frame::Welcome { update, .. } => (conn, tx, rx, update),
            other => panic!("not let in: {other:?}"),
        }
    }
}

use sluice_peers::wire::{self, Frame};

/// A valid update on top of `doc` that adds node `node` (or renames the
/// workflow to `rename`).
fn update_adding(doc: &[u8], node: &str, rename: Option<&str>) -> Vec<u8> {
    let d = sluice_model::doc::WorkflowDoc::from_bytes(doc).unwrap();
    let before = d.version();
    let mut wf = serde_json::to_value(d.to_workflow().unwrap()).unwrap();
    wf["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": node, "kind": "output.end"}));
    if let Some(id) = rename {
        wf["id"] = json!(id);
    }
    let wf = sluice_model::Workflow::from_json(&wf.to_string()).unwrap();
    assert!(d.apply(&wf).unwrap());
    d.updates_since(&before).unwrap()
}

/// Reads frames until an answer to `seq` (skipping relayed updates and presence).
async fn answer_to(rx: &mut iroh::endpoint::RecvStream, seq: u64) -> Frame {
    loop {
        let f = tokio::time::timeout(
            Duration::from_secs(5),
            wire::read_frame(rx, wire::MAX_FRAME),
        )
        .await
        .expect("an answer")
        .unwrap();
        match &f {
            Frame::Ack { seq: s } | Frame::Rejected { seq: s, .. } if *s == seq => return f,
            _ => {}
        }
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_breaks_the_rules_changes_nothing() {
    let da = tempfile::tempdir().unwrap();
    let a = start(da.path(), "Ada").await;
    save_draft(&a, &workflow()).await;
    let viewer = share(&a, "orders", json!({"role": "viewer"})).await;
    let editor = share(&a, "orders", json!({"role": "editor"})).await;
    let (viewer, editor) = (
        viewer["ticket"].as_str().unwrap(),
        editor["ticket"].as_str().unwrap(),
    );
    let before = (
        a.engine.doc_version("orders").await.unwrap(),
        wf_of(&a, "orders").await,
    );
    let unchanged = || async {
        (
            a.engine.doc_version("orders").await.unwrap(),
            wf_of(&a, "orders").await,
        ) == before
    };

    // A viewer that sends an edit anyway is refused by the sharer.
    let raw = Raw::new().await;
    let (_conn, mut tx, mut rx, doc) = raw.join(viewer).await;
    wire::write_frame(
        &mut tx,
        &Frame::Update {
            seq: 1,
            bytes: update_adding(&doc, "sneaky", None),
        },
    )
    .await
    .unwrap();
    let f = answer_to(&mut rx, 1).await;
    assert!(
        matches!(&f, Frame::Rejected { reason, .. } if reason.contains("viewer")),
        "{f:?}"
    );
    assert!(unchanged().await);
    // Its name arrives cleaned: no control characters, at most 64 characters.
    let shares = get(&a, "/workflows/orders/shares").await;
    let name = shares["peers"][0]["name"].as_str().unwrap();
    assert!(
        name.chars().count() <= 64 && !name.contains('\u{7}'),
        "{name}"
    );

    // An editor's garbage update, and one that renames the workflow, are
    // refused and change nothing; the session goes on.
    let raw = Raw::new().await;
    let (_conn, mut tx, mut rx, doc) = raw.join(editor).await;
    wire::write_frame(
        &mut tx,
        &Frame::Update {
            seq: 1,
            bytes: vec![0x6c; 300],
        },
    )
    .await
    .unwrap();
    assert!(matches!(
        answer_to(&mut rx, 1).await,
        Frame::Rejected { .. }
    ));
    wire::write_frame(
        &mut tx,
        &Frame::Update {
            seq: 2,
            bytes: update_adding(&doc, "x", Some("stolen")),
        },
    )
    .await
    .unwrap();
    assert!(matches!(
        answer_to(&mut rx, 2).await,
        Frame::Rejected { .. }
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(unchanged().await, "a refused update changed the workflow");
    // A valid edit on the same session still works.
    wire::write_frame(
        &mut tx,
        &Frame::Update {
            seq: 3,
            bytes: update_adding(&doc, "fine", None),
        },
    )
    .await
    .unwrap();
    assert!(matches!(answer_to(&mut rx, 3).await, Frame::Ack { seq: 3 }));
    eventually(Duration::from_secs(2), "the valid edit lands", || async {
        node_ids(&wf_of(&a, "orders").await).contains(&"fine".to_string())
    })
    .await;
    let before = (
        a.engine.doc_version("orders").await.unwrap(),
        wf_of(&a, "orders").await,
    );
    let unchanged = || async {
        (
            a.engine.doc_version("orders").await.unwrap(),
            wf_of(&a, "orders").await,
        ) == before
    };

    // Garbage frames, huge lengths and opening frames mid-session end the
    // session and change nothing; memory does not grow with what peers
    // announce.
    let rss = rss_kib();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..60u32 {
        let raw_conn = Raw::new().await;
        let (conn, mut tx, mut rx) = raw_conn.open(editor).await;
        match i % 4 {
            // A length far over the limit, then nothing.
            0 => tx.write_all(&u32::MAX.to_be_bytes()).await.unwrap(),
            // Random bytes of the announced length.
            1 => {
                let len = (next() % 2000) as usize + 1;
                let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                tx.write_all(&(len as u32).to_be_bytes()).await.unwrap();
                tx.write_all(&bytes).await.unwrap();
            }
            // A hello just under the limit that never finishes.
            2 => {
                tx.write_all(&(wire::MAX_HELLO).to_be_bytes())
                    .await
                    .unwrap();
                tx.write_all(&[1; 100]).await.unwrap();
            }
            // A welcome where a hello belongs.
            _ => wire::write_frame(
                &mut tx,
                &Frame::Welcome {
                    role: "editor".into(),
                    name: "x".into(),
                    update: vec![1; 10],
                    version: vec![],
                    presence: vec![],
                },
            )
            .await
            .unwrap(),
        }
        if i % 4 != 2 {
            // The sharer ends it: no welcome ever comes.
            let r = tokio::time::timeout(
                Duration::from_secs(5),
                wire::read_frame(&mut rx, wire::MAX_FRAME),
            )
            .await;
            assert!(!matches!(r, Ok(Ok(Frame::Welcome { .. }))), "{r:?}");
        }
        conn.close(0u32.into(), b"");
    }
    // Mid-session: a hello again, then random bytes as a frame.
    let raw = Raw::new().await;
    let (_conn, mut tx, mut rx, _) = raw.join(editor).await;
    wire::write_frame(
        &mut tx,
        &Frame::Hello {
            workflow: "orders".into(),
            share: String::new(),
            secret: vec![],
            name: String::new(),
            version: vec![],
        },
    )
    .await
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if wire::read_frame(&mut rx, wire::MAX_FRAME).await.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(r.is_ok(), "the session was not ended");
    assert!(unchanged().await);
    let grown = rss_kib().saturating_sub(rss);
    assert!(grown < 64 << 10, "memory grew by {grown} KiB");
    // The sharer still serves: a fresh joiner gets in.
    let db = tempfile::tempdir().unwrap();
    let b = start(db.path(), "Bob").await;
    assert_eq!(join(&b, editor).await.0, 201);
    assert_eq!(wf_of(&b, "orders").await, wf_of(&a, "orders").await);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// Calls the `orders` webhook on `host`: the run's output.
async fn hook(host: &Host) -> (u16, Value) {
    let r = client()
        .post(format!("{}/hook/orders/orders", host.base_url()))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_code_runs_nowhere_until_that_machines_user_publishes_it() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(da.path(), "Ada").await;
    let b = start(db.path(), "Bob").await;
    // Published on A, and set to publish itself once idle for a second.
    let wf = json!({"format": "sluice.workflow/v1", "id": "orders",
        "settings": {"publish": "on_valid_idle", "publish_idle_secs": 1},
        "nodes": [
            {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
            {"id": "price", "kind": "code.js", "config": {"source": "return { v: 1 };"}},
            {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "price"}, {"from": "price", "to": "end"}]});
    save_draft(&a, &wf).await;
    assert_eq!(
        post(&a, "/workflows/orders/publish", json!({})).await.0,
        200
    );
    let (status, out) = hook(&a).await;
    assert_eq!((status, &out), (200, &json!({"end": {"v": 1}})));

    let s = share(&a, "orders", json!({"role": "editor"})).await;
    assert_eq!(join(&b, s["ticket"].as_str().unwrap()).await.0, 201);
    // Joined: nothing published on B, whatever the workflow says.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        get(&b, "/workflows/orders/publish").await["published"],
        false
    );
    assert_eq!(hook(&b).await.0, 404);

    // Bob changes the code.
    let mut edited = wf_of(&b, "orders").await;
    edited["nodes"][1]["config"]["source"] = json!("return { v: 2, by: 'bob' };");
    save_draft(&b, &edited).await;
    eventually(
        Duration::from_secs(2),
        "Bob's code reaches A's draft",
        || async {
            wf_of(&a, "orders").await["nodes"][1]["config"]["source"]
                .as_str()
                .unwrap()
                .contains("bob")
        },
    )
    .await;
    // Well past the idle delay, A still runs its own published code.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(hook(&a).await, (200, json!({"end": {"v": 1}})));
    let state = get(&a, "/workflows/orders/publish").await;
    assert_eq!(state["from_peers"][0]["versions"], 1, "{state}");
    assert!(
        state["summary"].as_str().unwrap().contains("price"),
        "{state}"
    );
    // A restart does not publish it either.
    a.stop().await.unwrap();
    let a = start(da.path(), "Ada").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(hook(&a).await, (200, json!({"end": {"v": 1}})));

    // A's user publishes: now it runs, and nothing waits for review.
    assert_eq!(
        post(&a, "/workflows/orders/publish", json!({})).await.0,
        200
    );
    assert_eq!(hook(&a).await, (200, json!({"end": {"v": 2, "by": "bob"}})));
    let state = get(&a, "/workflows/orders/publish").await;
    assert!(state.get("from_peers").is_none(), "{state}");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_workflow_whose_id_is_taken_here_gets_another_and_syncs() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(da.path(), "Ada").await;
    let b = start(db.path(), "Bob").await;
    save_draft(&a, &workflow()).await;
    // Bob has an `orders` of his own.
    let mut mine = workflow();
    mine["name"] = json!("Bob's own orders");
    save_draft(&b, &mine).await;

    let s = share(&a, "orders", json!({"role": "editor"})).await;
    let (status, joined) = join(&b, s["ticket"].as_str().unwrap()).await;
    assert_eq!(status, 201, "{joined}");
    assert_eq!(joined["workflow"], "orders-2");
    assert_eq!(wf_of(&b, "orders").await["name"], "Bob's own orders");
    let copy = wf_of(&b, "orders-2").await;
    assert_eq!(copy["id"], "orders-2");
    assert_eq!(copy["name"], "Orders");
    // Joining again lands on the same copy.
    let (status, again) = join(&b, s["ticket"].as_str().unwrap()).await;
    assert_eq!((status, &again["workflow"]), (201, &json!("orders-2")));

    // Edits both ways: Bob's (under his id) reach Ada's `orders`, and hers
    // his `orders-2`; neither side's id changes.
    add_node(&b, "orders-2", "from_b").await;
    add_node(&a, "orders", "from_a").await;
    eventually(
        Duration::from_secs(5),
        "both edits on both sides",
        || async {
            let (on_a, on_b) = (wf_of(&a, "orders").await, wf_of(&b, "orders-2").await);
            node_ids(&on_a) == ["end", "from_a", "from_b", "hook"]
                && node_ids(&on_b) == node_ids(&on_a)
                && on_a["id"] == "orders"
                && on_b["id"] == "orders-2"
        },
    )
    .await;
    assert_eq!(
        a.engine.doc_version("orders").await.unwrap(),
        b.engine.doc_version("orders-2").await.unwrap()
    );
    // The copy is mirrored as its own file, under its id here.
    let file = b.workflows.join("orders-2.flow.json");
    eventually(Duration::from_secs(5), "the mirrored file", || async {
        std::fs::read_to_string(&file)
            .is_ok_and(|t| t.contains("\"orders-2\"") && t.contains("from_a"))
    })
    .await;
    // Bob deletes his copy: the link goes with it, and Ada's next edit
    // does not bring it back.
    let (status, _) = call(&b, reqwest::Method::DELETE, "/workflows/orders-2", None).await;
    assert!(status < 300);
    eventually(Duration::from_secs(5), "the link gone", || async {
        link_state(&b, "orders-2").await.is_null()
    })
    .await;
    add_node(&a, "orders", "after_delete").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        call(&b, reqwest::Method::GET, "/workflows/orders-2", None)
            .await
            .0,
        404
    );
    // Bob's own workflow was never touched.
    assert_eq!(node_ids(&wf_of(&b, "orders").await), ["end", "hook"]);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// An engine that never shared nor joined has no endpoint (its memory is
/// an idle engine's largest part): it starts at the first use of the peers
/// API, and at the engine's start once there is a share a peer may come back
/// for, or a workflow joined from a peer.
#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_starts_when_first_needed() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start(a_dir.path(), "Ann").await;
    let lazy = a.peers.clone().expect("peers are on");
    assert!(lazy.started().is_none(), "started with nothing to share");
    save_draft(&a, &workflow()).await;
    assert!(lazy.started().is_none());
    let ticket = share(&a, "orders", json!({"role": "editor"})).await;
    assert!(lazy.started().is_some(), "sharing starts it");

    let b = start(b_dir.path(), "Bob").await;
    assert!(b.peers.as_ref().unwrap().started().is_none());
    let (status, v) = join(&b, ticket["ticket"].as_str().unwrap()).await;
    assert_eq!(status, 201, "{v}");
    assert!(
        b.peers.as_ref().unwrap().started().is_some(),
        "joining starts it"
    );

    // Restarted, both start it at once: Ann has a share, Bob a link.
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    let a = start(a_dir.path(), "Ann").await;
    let b = start(b_dir.path(), "Bob").await;
    assert!(
        a.peers.as_ref().unwrap().started().is_some(),
        "a share waits for peers"
    );
    assert!(
        b.peers.as_ref().unwrap().started().is_some(),
        "a link reconnects"
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
