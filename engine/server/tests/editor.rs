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

async fn class_of(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .attr("class")
        .await
        .unwrap()
        .unwrap_or_default()
}

async fn key_chord(c: &Client, modifier: &str, key: &str) {
    use fantoccini::actions::{KeyAction, KeyActions};
    let actions = KeyActions::new("keys".into())
        .then(KeyAction::Down {
            value: modifier.chars().next().unwrap(),
        })
        .then(KeyAction::Down {
            value: key.chars().next().unwrap(),
        })
        .then(KeyAction::Up {
            value: key.chars().next().unwrap(),
        })
        .then(KeyAction::Up {
            value: modifier.chars().next().unwrap(),
        });
    c.perform_actions(actions).await.unwrap();
}

/// WebDriver's Control key.
const CONTROL: &str = "\u{E009}";

#[tokio::test]
async fn configure_run_read_undo_and_see_a_failure() {
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
        "format": "sluice.workflow/v1", "id": "flow", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "set", "kind": "data.set", "config": {"values": {"ok": true}}, "position": [320, 0]},
            {"id": "end", "kind": "output.end", "position": [640, 0]}],
        "edges": [{"from": "start", "to": "set"}, {"from": "set", "to": "end"}]
    }))
    .await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "boom", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "explode", "kind": "data.transform", "config": {"jq": "error(\"nope\")"}, "position": [320, 0]},
            {"id": "end", "kind": "output.end", "position": [640, 0]}],
        "edges": [{"from": "start", "to": "explode"}, {"from": "explode", "to": "end"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    let b = browser(&driver).await;
    open(&a, &s, &codes, "flow").await;
    open(&b, &s, &codes, "flow").await;

    // Configure `set` through its form: the JSON of `values`.
    a.find(Locator::Css("g.node[data-node='set'] rect.box"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let values = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-panel[data-node='set'] #cfg-values"))
        .await
        .unwrap();
    // Select all and type over it (a clear would first remove the field).
    values.click().await.unwrap();
    key_chord(&a, CONTROL, "a").await;
    values.send_keys(r#"{"ok": true, "n": 2}"#).await.unwrap();
    a.find(Locator::Css("#node-label"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the new config stored", || async {
        stored(&s, "flow").await["nodes"][1]["config"]["values"]["n"] == 2
    })
    .await;

    // Run it and read the output, in the run panel and on the node.
    a.find(Locator::Css(".run-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the run to finish", || async {
        a.find(Locator::Css(".run-status")).await.is_ok()
    })
    .await;
    let status = a
        .find(Locator::Css(".run-status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(status, "succeeded");
    let output = a
        .find(Locator::Css(".run-output"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let output: Value = serde_json::from_str(&output).unwrap();
    assert_eq!(output, json!({"end": {"ok": true, "n": 2}}));
    eventually(
        Duration::from_secs(5),
        "the step statuses on the canvas",
        || async {
            class_of(&a, "g.node[data-node='set']")
                .await
                .contains("run-succeeded")
        },
    )
    .await;
    let step_output = a
        .find(Locator::Css(".step-output"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(step_output.contains("\"n\": 2"), "{step_output}");
    screenshot(&a, "run").await;

    // Undo in one window undoes only its own edit.
    let position = |wf: &Value, id: &str| {
        wf["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .unwrap()["position"]
            .clone()
    };
    drag_by(&a, "g.node[data-node='end'] rect.box", 0.0, 160.0).await;
    eventually(Duration::from_secs(5), "a's move stored", || async {
        position(&stored(&s, "flow").await, "end") != json!([640.0, 0.0])
    })
    .await;
    drag_by(&b, "g.node[data-node='start'] rect.box", 0.0, 200.0).await;
    eventually(Duration::from_secs(5), "b's move stored", || async {
        position(&stored(&s, "flow").await, "start") != json!([0.0, 0.0])
    })
    .await;
    let b_moved = position(&stored(&s, "flow").await, "start");
    // Focus a's canvas (a click on the background), then Ctrl+Z.
    a.find(Locator::Css("svg.surface"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    key_chord(&a, CONTROL, "z").await;
    eventually(Duration::from_secs(5), "the undo stored", || async {
        position(&stored(&s, "flow").await, "end") == json!([640.0, 0.0])
    })
    .await;
    assert_eq!(
        position(&stored(&s, "flow").await, "start"),
        b_moved,
        "b's edit must stay"
    );
    // The config edit before the move is still there, and redo brings the move back.
    assert_eq!(
        stored(&s, "flow").await["nodes"][1]["config"]["values"]["n"],
        2
    );
    key_chord(&a, CONTROL, "y").await;
    eventually(Duration::from_secs(5), "the redo stored", || async {
        position(&stored(&s, "flow").await, "end") != json!([640.0, 0.0])
    })
    .await;

    // A failing run shows the failing node in red, with its error.
    a.goto(&format!("{}/#/w/boom", s.base)).await.unwrap();
    a.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("g.node[data-node='explode']"))
        .await
        .unwrap();
    a.find(Locator::Css(".run-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the failed run", || async {
        class_of(&a, "g.node[data-node='explode']")
            .await
            .contains("run-failed")
    })
    .await;
    let error = a
        .find(Locator::Css(".run-error"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        error.contains("explode") && error.contains("nope"),
        "{error}"
    );
    assert_eq!(
        a.find(Locator::Css(".run-status"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "failed"
    );
    screenshot(&a, "failed").await;
    a.close().await.ok();
    b.close().await.ok();
}
