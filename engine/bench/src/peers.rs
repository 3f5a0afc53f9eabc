//! `cargo xtask bench peers`: two engines on loopback (relays off), each
//! with its own data dir and iroh endpoint, in this process.
//!
//! - join of a 1,000-node workflow (ticket to the workflow stored on the
//!   joiner), beside the floor: the same document's bytes over a fresh iroh
//!   connection with no Sluice in between;
//! - edit propagation engine to engine (an editor's edit merged and persisted
//!   on one engine until the other has merged and persisted it), both ways,
//!   p50 / p99, beside the floor: a frame of the same size echoed over iroh;
//! - memory on the sharer per connected peer: `--clients N TICKET` runs N
//!   joined peers in a child process, and the sharer measures its own RSS.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;
use sluice_model::Workflow;
use sluice_model::doc::WorkflowDoc;
use sluice_peers::wire::{self, Frame};
use sluice_peers::{Peers, PeersOptions, Relays, Ticket};
use sluice_runtime::executor::DocEvent;
use sluice_runtime::{Engine, Options, Plan};

const NODES: usize = 1000;
const EDITS: usize = 1000;
const JOINS: usize = 10;
const CLIENTS: usize = 50;

fn big_workflow() -> Result<Workflow> {
    let mut nodes = vec![json!({"id": "start", "kind": "trigger.manual"})];
    let mut edges = Vec::new();
    let mut prev = "start".to_string();
    for i in 0..NODES - 1 {
        let id = format!("n{i}");
        nodes.push(
            json!({"id": id, "kind": "data.set", "label": format!("Set {i}"),
            "position": [i as f64 * 10.0, 50.0],
            "config": {"values": {"n": "{{ input.n }}", "step": i, "note": "some text to carry"}}}),
        );
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    Ok(Workflow::from_value(json!({
        "format": "sluice.workflow/v1", "id": "big", "name": "Big",
        "nodes": nodes, "edges": edges
    }))?)
}

fn options(name: &str) -> PeersOptions {
    PeersOptions {
        listen: Some("127.0.0.1:0".parse().expect("an address")),
        relays: Relays::None,
        name: name.into(),
    }
}

async fn engine(dir: &std::path::Path, name: &str) -> Result<(Engine, Peers)> {
    let engine = Engine::open(dir, Options::default()).await?;
    let peers = Peers::start(engine.clone(), dir, options(name)).await?;
    Ok((engine, peers))
}

fn pct(mut v: Vec<Duration>, p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A bare iroh endpoint on loopback.
async fn endpoint() -> Result<iroh::Endpoint> {
    Ok(iroh::Endpoint::builder(iroh::endpoint::presets::Minimal)
        .secret_key(iroh::SecretKey::generate())
        .relay_mode(iroh::RelayMode::Disabled)
        .portmapper_config(iroh::endpoint::PortmapperConfig::Disabled)
        .net_report_config(iroh::NetReportConfig::minimal())
        .clear_ip_transports()
        .bind_addr("127.0.0.1:0")?
        .alpns(vec![b"bench/echo".to_vec()])
        .bind()
        .await?)
}

/// One edit on an editor's copy: a node moved. Returns the update.
fn edit(editor: &WorkflowDoc, i: usize) -> Result<Vec<u8>> {
    let before = editor.version();
    let id = format!("n{}", (i * 7919) % (NODES - 1));
    let nodes = editor.loro().get_map("nodes");
    let Some(loro::ValueOrContainer::Container(loro::Container::Map(node))) = nodes.get(&id) else {
        bail!("node {id} missing");
    };
    node.insert("position", json!([i as f64, (i % 97) as f64]).to_string())?;
    editor.loro().commit();
    Ok(editor.updates_since(&before)?)
}

/// Edits made by an editor window on `from` until `to` has merged each:
/// the latencies.
async fn propagation(
    from: &Engine,
    to: &Engine,
    peer: u64,
    offset: usize,
) -> Result<Vec<Duration>> {
    let (bytes, _) = from.doc_updates("big", &[]).await?;
    let editor = WorkflowDoc::from_bytes(&bytes)?;
    editor.loro().set_peer_id(peer)?;
    let origin = from.new_origin();
    let mut events = to.doc_events();
    let mut out = Vec::with_capacity(EDITS);
    for i in 0..EDITS {
        // Values no earlier pass wrote: every edit changes something.
        let update = edit(&editor, offset + i)?;
        let t = Instant::now();
        anyhow::ensure!(
            from.import_doc_update_from("big", &update, origin).await?,
            "edit {i} changed nothing"
        );
        loop {
            match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
                Ok(Ok(DocEvent::Update { workflow, .. })) if &*workflow == "big" => break,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => bail!("events: {e}"),
                Err(_) => bail!("edit {i} did not arrive within 5 s"),
            }
        }
        out.push(t.elapsed());
    }
    Ok(out)
}

/// The floor: `len` bytes echoed over an iroh stream, `n` times.
async fn echo_floor(len: usize, n: usize) -> Result<Vec<Duration>> {
    let (a, b) = (endpoint().await?, endpoint().await?);
    let addr = b.addr();
    let server = tokio::spawn(async move {
        let conn = b.accept().await.context("the endpoint closed")?.await?;
        let (mut tx, mut rx) = conn.accept_bi().await?;
        loop {
            let Ok(f) = wire::read_frame(&mut rx, wire::MAX_FRAME).await else {
                break;
            };
            wire::write_frame(&mut tx, &f).await?;
        }
        anyhow::Ok(())
    });
    let conn = a.connect(addr, b"bench/echo").await?;
    let (mut tx, mut rx) = conn.open_bi().await?;
    let frame = Frame::Update {
        seq: 1,
        bytes: vec![7; len],
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        wire::write_frame(&mut tx, &frame).await?;
        wire::read_frame(&mut rx, wire::MAX_FRAME).await?;
        out.push(t.elapsed());
    }
    conn.close(0u32.into(), b"");
    server.abort();
    Ok(out)
}

/// The floor of a join: connect and move `len` bytes one way.
async fn transfer_floor(len: usize) -> Result<Duration> {
    let (a, b) = (endpoint().await?, endpoint().await?);
    let addr = b.addr();
    let server = tokio::spawn(async move {
        let conn = b.accept().await.context("the endpoint closed")?.await?;
        let (mut tx, mut rx) = conn.accept_bi().await?;
        let f = wire::read_frame(&mut rx, 64).await?;
        wire::write_frame(
            &mut tx,
            &Frame::Update {
                seq: 0,
                bytes: vec![7; len],
            },
        )
        .await?;
        drop(f);
        conn.closed().await;
        anyhow::Ok(())
    });
    let t = Instant::now();
    let conn = a.connect(addr, b"bench/echo").await?;
    let (mut tx, mut rx) = conn.open_bi().await?;
    wire::write_frame(&mut tx, &Frame::Ack { seq: 1 }).await?;
    wire::read_frame(&mut rx, wire::MAX_FRAME).await?;
    let took = t.elapsed();
    conn.close(0u32.into(), b"");
    server.abort();
    Ok(took)
}

/// `--clients N TICKET`: N peers joined with the ticket, reading whatever
/// comes, until stdin closes. Prints `ready` once all are in.
async fn clients(n: usize, ticket: &str) -> Result<()> {
    let t = Ticket::decode(ticket)?;
    let mut held = Vec::new();
    for _ in 0..n {
        let ep = endpoint().await?;
        let conn = ep.connect(t.addr.clone(), wire::ALPN).await?;
        let (mut tx, mut rx) = conn.open_bi().await?;
        wire::write_frame(
            &mut tx,
            &Frame::Hello {
                workflow: t.workflow.clone(),
                share: t.share.clone(),
                secret: t.secret.to_vec(),
                name: "bench".into(),
                version: Vec::new(),
            },
        )
        .await?;
        match wire::read_frame(&mut rx, wire::MAX_FRAME).await? {
            Frame::Welcome { .. } => {}
            other => bail!("not let in: {other:?}"),
        }
        let reader = tokio::spawn(async move {
            while wire::read_frame(&mut rx, wire::MAX_FRAME).await.is_ok() {}
        });
        held.push((ep, conn, tx, reader));
    }
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(held);
    Ok(())
}

/// `--hub`: a sharer alone in its process (so its memory is its own): the
/// 1,000-node workflow shared, the ticket printed; each `edit` line on
/// stdin makes 20 edits that go to every peer; EOF ends it.
async fn hub() -> Result<()> {
    use std::io::BufRead;
    let dir = tempfile::tempdir()?;
    let (a, peers) = engine(dir.path(), "Hub").await?;
    let plan = Plan::new(big_workflow()?)?;
    a.save_workflow(&plan).await?;
    let share = peers
        .share("big", sluice_api::Role::Editor, None, None)
        .await?;
    let (bytes, _) = a.doc_updates("big", &[]).await?;
    let editor = WorkflowDoc::from_bytes(&bytes)?;
    editor.loro().set_peer_id(303)?;
    println!("{}", share.ticket);
    let mut n = 0;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if line.is_err() || tx.send(()).is_err() {
                break;
            }
        }
    });
    while rx.recv().await.is_some() {
        for _ in 0..20 {
            a.import_doc_update("big", &edit(&editor, 3_000_000 + n)?)
                .await?;
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let connected = peers
            .shares("big")
            .await?
            .peers
            .iter()
            .filter(|p| p.connected)
            .count();
        println!("{connected}");
    }
    peers.shutdown().await;
    Ok(())
}

fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The sharer's memory with no peer and with `CLIENTS` peers, each after
/// 20 edits relayed: (before KiB, after KiB, peers connected).
fn memory_per_peer() -> Result<(u64, u64, usize)> {
    use std::io::{BufRead, Write};
    let exe = std::env::current_exe()?;
    let mut hub = std::process::Command::new(&exe)
        .arg("--hub")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut out = std::io::BufReader::new(hub.stdout.take().context("hub stdout")?);
    let mut hub_in = hub.stdin.take().context("hub stdin")?;
    let mut line = String::new();
    out.read_line(&mut line)?;
    let ticket = line.trim().to_string();
    let mut ask = |out: &mut std::io::BufReader<_>| -> Result<usize> {
        writeln!(hub_in, "edit")?;
        let mut l = String::new();
        out.read_line(&mut l)?;
        Ok(l.trim().parse()?)
    };
    ask(&mut out)?;
    let before = rss_of(hub.id());
    let mut clients = std::process::Command::new(&exe)
        .args(["--clients", &CLIENTS.to_string(), &ticket])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut ready = String::new();
    std::io::BufReader::new(clients.stdout.take().context("clients stdout")?)
        .read_line(&mut ready)?;
    anyhow::ensure!(ready.trim() == "ready", "the clients said {ready:?}");
    let connected = ask(&mut out)?;
    let after = rss_of(hub.id());
    drop(clients.stdin.take());
    clients.wait()?;
    drop(hub_in);
    hub.wait()?;
    Ok((before, after, connected))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--hub") {
        return hub().await;
    }
    if args.get(1).map(String::as_str) == Some("--clients") {
        let n: usize = args.get(2).context("--clients N TICKET")?.parse()?;
        return clients(n, args.get(3).context("--clients N TICKET")?).await;
    }
    let (da, db) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let (a, peers_a) = engine(da.path(), "Ada").await?;
    let plan = Plan::new(big_workflow()?)?;
    a.save_workflow(&plan).await?;
    let (doc, _) = a.doc_updates("big", &[]).await?;
    let share = peers_a
        .share("big", sluice_api::Role::Editor, None, None)
        .await?;

    // Joins: each by a fresh engine (its own data dir and key).
    let mut joins = Vec::new();
    let mut floors = Vec::new();
    for _ in 0..JOINS {
        let dir = tempfile::tempdir()?;
        let (e, p) = engine(dir.path(), "Joiner").await?;
        let t = Instant::now();
        p.join(&share.ticket).await?;
        joins.push(t.elapsed());
        anyhow::ensure!(
            e.store().get_workflow("big").await?.is_some(),
            "the joined workflow is not stored"
        );
        p.shutdown().await;
        floors.push(transfer_floor(doc.len()).await?);
    }

    // Propagation both ways between A and a joined B.
    let (b, peers_b) = engine(db.path(), "Bob").await?;
    peers_b.join(&share.ticket).await?;
    let a_to_b = propagation(&a, &b, 101, 0).await?;
    let b_to_a = propagation(&b, &a, 202, 1_000_000).await?;
    let update_len = {
        let (bytes, _) = a.doc_updates("big", &[]).await?;
        let ed = WorkflowDoc::from_bytes(&bytes)?;
        edit(&ed, 1)?.len()
    };
    let floor = echo_floor(update_len, EDITS).await?;
    let (va, vb) = (a.doc_version("big").await?, b.doc_version("big").await?);
    anyhow::ensure!(va == vb, "the two engines did not converge");

    // Memory per connected peer, on a sharer alone in its process.
    let (before, after, connected) = memory_per_peer()?;

    println!("peers benchmark (two engines on loopback, relays off; release build):");
    let jm = pct(joins.clone(), 50);
    println!(
        "  join of a {NODES}-node workflow ({:.0} KiB of document), p50 / max of {JOINS}: {:.1} / {:.1} ms   (target < 200 ms); \
         floor (connect + the same bytes over iroh): {:.1} ms, ratio {:.1}x",
        doc.len() as f64 / 1024.0,
        ms(jm),
        ms(pct(joins, 100)),
        ms(pct(floors.clone(), 50)),
        ms(jm) / ms(pct(floors, 50)).max(1e-9)
    );
    let p50f = pct(floor.clone(), 50);
    for (name, v) in [("A → B", a_to_b), ("B → A", b_to_a)] {
        println!(
            "  edit propagation {name} (merged + persisted on both), p50 / p99 of {EDITS}: {:.2} / {:.2} ms   (target p50 < 5 ms); {:.1}x the floor",
            ms(pct(v.clone(), 50)),
            ms(pct(v.clone(), 99)),
            ms(pct(v, 50)) / ms(p50f).max(1e-9)
        );
    }
    println!(
        "  floor: a {update_len}-byte frame echoed over iroh, p50 / p99: {:.3} / {:.3} ms",
        ms(p50f),
        ms(pct(floor, 99))
    );
    println!(
        "  sharer memory per connected peer ({connected} peers, 20 edits relayed to each): {:.0} KiB (RSS {:.1} MiB with none, {:.1} MiB with them)",
        (after.saturating_sub(before)) as f64 / connected.max(1) as f64,
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    peers_a.shutdown().await;
    peers_b.shutdown().await;
    Ok(())
}
