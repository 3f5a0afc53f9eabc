//! Peers from the command line, between two `sluice serve` processes:
//! `sluice share` and `sluice join` go through each data dir's running
//! engine, and a sharer killed (SIGKILL) in the middle of a peer's edits
//! keeps every edit it acknowledged.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_peers::wire::{self, Frame};

mod support;
use support::{Serve, client, open, start};

fn text(o: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

async fn workflow(s: &Serve, id: &str) -> (u16, Value) {
    let r = client()
        .get(format!("{}/api/v1/workflows/{id}", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn put_draft(s: &Serve, wf: &Value) {
    let r = client()
        .put(format!(
            "{}/api/v1/workflows/{}",
            s.base,
            wf["id"].as_str().unwrap()
        ))
        .bearer_auth(&s.token)
        .json(wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

fn orders() -> Value {
    json!({"format": "sluice.workflow/v1", "id": "orders", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders"}},
        {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "hook", "to": "end"}]})
}

#[tokio::test(flavor = "multi_thread")]
async fn share_and_join_from_the_command_line() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // No engine yet: said clearly.
    let o = open(da.path(), &["share", "orders"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).1.contains("no engine is running"),
        "{:?}",
        text(&o)
    );

    let mut a = start(da.path());
    let mut b = start(db.path());
    put_draft(&a, &orders()).await;
    let o = open(da.path(), &["share", "orders", "--role", "owner"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--role"), "{:?}", text(&o));
    let o = open(da.path(), &["share", "orders", "--expires", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--expires"), "{:?}", text(&o));
    let o = open(da.path(), &["share", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("`nope` not found"), "{:?}", text(&o));

    let o = open(
        da.path(),
        &["share", "orders", "--expires", "1h", "--uses", "1"],
    );
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let ticket = text(&o).0.trim().to_string();
    assert!(
        ticket.starts_with("sluice") && !ticket.contains(' '),
        "{ticket}"
    );
    assert!(text(&o).1.contains("sluice://join/"), "{:?}", text(&o));

    let o = open(db.path(), &["join", &format!("sluice://join/{ticket}")]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    assert!(text(&o).0.contains("joined `orders`"), "{:?}", text(&o));
    assert_eq!(workflow(&b, "orders").await, workflow(&a, "orders").await);
    // A damaged ticket is refused, saying so.
    let o = open(db.path(), &["join", "sluiceabc"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("ticket"), "{:?}", text(&o));

    a.child.kill().unwrap();
    b.child.kill().unwrap();
    a.child.wait().unwrap();
    b.child.wait().unwrap();
}

/// A peer speaking the protocol directly, so the test sees each
/// acknowledgement.
async fn endpoint() -> iroh::Endpoint {
    iroh::Endpoint::builder(iroh::endpoint::presets::Minimal)
        .secret_key(iroh::SecretKey::generate())
        .relay_mode(iroh::RelayMode::Disabled)
        .portmapper_config(iroh::endpoint::PortmapperConfig::Disabled)
        .net_report_config(iroh::NetReportConfig::minimal())
        .clear_ip_transports()
        .bind_addr("127.0.0.1:0")
        .unwrap()
        .bind()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sharer_killed_mid_sync_keeps_every_edit_it_acknowledged() {
    let da = tempfile::tempdir().unwrap();
    let mut a = start(da.path());
    put_draft(&a, &orders()).await;
    let o = open(da.path(), &["share", "orders"]);
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let ticket = sluice_peers::Ticket::decode(&text(&o).0).unwrap();

    let ep = endpoint().await;
    let conn = ep.connect(ticket.addr.clone(), wire::ALPN).await.unwrap();
    let (mut tx, mut rx) = conn.open_bi().await.unwrap();
    wire::write_frame(
        &mut tx,
        &Frame::Hello {
            workflow: "orders".into(),
            share: ticket.share.clone(),
            secret: ticket.secret.to_vec(),
            name: "Bob".into(),
            version: Vec::new(),
        },
    )
    .await
    .unwrap();
    let Frame::Welcome { update, .. } = wire::read_frame(&mut rx, wire::MAX_FRAME).await.unwrap()
    else {
        panic!("not let in")
    };
    let doc = sluice_model::doc::WorkflowDoc::from_bytes(&update).unwrap();

    // Edits stream in (one node each); acknowledgements are counted as
    // they come, and the sharer is killed while they flow.
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let reader = tokio::spawn(async move {
        while let Ok(f) = wire::read_frame(&mut rx, wire::MAX_FRAME).await {
            if let Frame::Ack { seq } = f {
                acked_tx.send(seq).ok();
            }
        }
    });
    let mut acked = Vec::new();
    let mut sent = 0u64;
    for seq in 1..=400u64 {
        let before = doc.version();
        let mut wf = serde_json::to_value(doc.to_workflow().unwrap()).unwrap();
        wf["nodes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"id": format!("n{seq}"), "kind": "output.end"}));
        doc.apply(&sluice_model::Workflow::from_json(&wf.to_string()).unwrap())
            .unwrap();
        let bytes = doc.updates_since(&before).unwrap();
        if wire::write_frame(&mut tx, &Frame::Update { seq, bytes })
            .await
            .is_err()
        {
            break;
        }
        sent = seq;
        while let Ok(s) = acked_rx.try_recv() {
            acked.push(s);
        }
        if acked.len() >= 50 && a.child.try_wait().unwrap().is_none() {
            a.child.kill().unwrap(); // SIGKILL
            a.child.wait().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(s) = acked_rx.try_recv() {
        acked.push(s);
    }
    reader.abort();
    assert!(
        acked.len() >= 50,
        "only {} of {sent} acknowledged",
        acked.len()
    );
    assert!(
        (acked.len() as u64) < sent,
        "killed after everything was acknowledged"
    );

    // Back up: every acknowledged edit is there.
    let mut a = start(da.path());
    let (status, wf) = workflow(&a, "orders").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = wf["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    for seq in &acked {
        assert!(
            ids.contains(&format!("n{seq}").as_str()),
            "acknowledged edit n{seq} lost"
        );
    }
    a.child.kill().unwrap();
    a.child.wait().unwrap();
}
