//! The editor end to end, in real headless Chromium (Debian's `chromium`
//! and `chromedriver`, driven over WebDriver with fantoccini) against a
//! real trigger port serving the built editor (`cargo xtask frontend`,
//! which `cargo xtask test` runs first). Screenshots go to `artifacts/`.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

fn ui_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dist = target.join("frontend/dist");
    assert!(
        dist.join("pkg/sluice_bg.wasm").is_file(),
        "the editor is not built in {}: run `cargo xtask frontend` (cargo xtask test does)",
        dist.display()
    );
    dist
}

fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

async fn driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian package chromium-driver; cargo xtask test installs it)");
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "chromedriver did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Driver { child, url }
}

async fn browser(driver: &Driver) -> Client {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .unwrap_or("chromium");
    let binary = String::from_utf8(
        Command::new("sh")
            .args(["-c", &format!("command -v {chromium}")])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary.trim(),
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1400,900"]
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Signs the browser in with a fresh one-time code and opens a workflow.
async fn open(c: &Client, s: &common::Server, codes: &sluice_server::Codes, workflow: &str) {
    c.goto(&format!("{}/ui/login?code={}", s.base, codes.issue()))
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("ul.workflows"))
        .await
        .unwrap();
    c.goto(&format!("{}/#/w/{workflow}", s.base)).await.unwrap();
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("g.node[data-node='start']"))
        .await
        .unwrap();
}

async fn drag(c: &Client, from: &str, to: &str) {
    let source = c.find(Locator::Css(from)).await.unwrap();
    let target = c.find(Locator::Css(to)).await.unwrap();
    let actions = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element: source,
            duration: None,
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveToElement {
            element: target,
            duration: Some(Duration::from_millis(150)),
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(actions).await.unwrap();
}

async fn drag_by(c: &Client, what: &str, dx: f64, dy: f64) {
    let element = c.find(Locator::Css(what)).await.unwrap();
    let actions = MouseActions::new("mouse".into())
        .then(PointerAction::MoveToElement {
            element,
            duration: None,
            x: 0.0,
            y: 0.0,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveBy {
            duration: Some(Duration::from_millis(150)),
            x: dx,
            y: dy,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(actions).await.unwrap();
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(artifacts().join(format!("editor-{name}.png")), png).unwrap();
}

async fn stored(s: &common::Server, id: &str) -> Value {
    s.api(reqwest::Method::GET, &format!("/workflows/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `check` for up to `within`.
async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < within,
            "{what} did not happen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn edits_on_the_canvas_reach_the_engine_and_other_windows() {
    let codes = Arc::new(sluice_server::Codes::default());
    let ui = ui_dir();
    let s = {
        let codes = codes.clone();
        common::server_with(move |o| {
            o.codes = codes;
            o.ui_dir = Some(ui);
        })
        .await
    };
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "e2e", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "set", "kind": "data.set", "config": {"values": {"ok": true}}, "position": [320, 0]},
            {"id": "end", "kind": "output.end", "position": [640, 0]}],
        "edges": []
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    let b = browser(&driver).await;
    open(&a, &s, &codes, "e2e").await;
    open(&b, &s, &codes, "e2e").await;

    // Connect start → set → end by dragging from output ports.
    drag(
        &a,
        "g.node[data-node='start'] g.port.out",
        "g.node[data-node='set'] rect.box",
    )
    .await;
    drag(
        &a,
        "g.node[data-node='set'] g.port.out",
        "g.node[data-node='end'] rect.box",
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "the edges reaching the engine",
        || async {
            let wf = stored(&s, "e2e").await;
            let edges: Vec<(String, String)> = wf["edges"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e["from"].as_str().unwrap().into(),
                        e["to"].as_str().unwrap().into(),
                    )
                })
                .collect();
            edges == [("start".into(), "set".into()), ("set".into(), "end".into())]
        },
    )
    .await;
    // The other window draws them too.
    eventually(
        Duration::from_secs(2),
        "the edges in the other window",
        || async { b.find_all(Locator::Css("path.edge")).await.unwrap().len() == 2 },
    )
    .await;

    // A connection that cannot be: refused, visibly, and nothing changes.
    drag(
        &a,
        "g.node[data-node='end'] rect.box",
        "g.node[data-node='end'] rect.box",
    )
    .await;
    drag(
        &a,
        "g.node[data-node='set'] g.port.out",
        "g.node[data-node='start'] rect.box",
    )
    .await;
    let refused = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".refused"))
        .await
        .unwrap();
    assert!(refused.text().await.unwrap().contains("trigger"));
    screenshot(&a, "refused").await;
    assert_eq!(
        stored(&s, "e2e").await["edges"].as_array().unwrap().len(),
        2
    );

    // A node moved in one window moves in the other within a second.
    let before = b
        .find(Locator::Css("g.node[data-node='end']"))
        .await
        .unwrap()
        .attr("transform")
        .await
        .unwrap();
    drag_by(&a, "g.node[data-node='end'] rect.box", 120.0, 140.0).await;
    let moved_at = Instant::now();
    eventually(
        Duration::from_secs(1),
        "the move in the other window",
        || async {
            b.find(Locator::Css("g.node[data-node='end']"))
                .await
                .unwrap()
                .attr("transform")
                .await
                .unwrap()
                != before
        },
    )
    .await;
    eprintln!(
        "the other window showed the move after {:?}",
        moved_at.elapsed()
    );
    screenshot(&b, "other-window").await;
    // The stored position is on the grid.
    eventually(
        Duration::from_secs(5),
        "the snapped position stored",
        || async {
            let wf = stored(&s, "e2e").await;
            let end = wf["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["id"] == "end")
                .cloned()
                .unwrap();
            let [x, y] = [
                end["position"][0].as_f64().unwrap(),
                end["position"][1].as_f64().unwrap(),
            ];
            x > 640.0 && y > 0.0 && x % 20.0 == 0.0 && y % 20.0 == 0.0
        },
    )
    .await;

    // A node added from the palette lands in the workflow.
    a.find(Locator::Css("button.kind[data-kind='util.log']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the added node stored", || async {
        let wf = stored(&s, "e2e").await;
        wf["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["kind"] == "util.log")
    })
    .await;
    eventually(
        Duration::from_secs(2),
        "the added node in the other window",
        || async { b.find_all(Locator::Css("g.node")).await.unwrap().len() == 4 },
    )
    .await;
    screenshot(&a, "canvas").await;
    a.close().await.ok();
    b.close().await.ok();
}
