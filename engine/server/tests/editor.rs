//! The editor end to end, in real headless Chromium (Debian's `chromium`
//! and `chromedriver`, driven over WebDriver with fantoccini) against a
//! real trigger port serving the built editor (`cargo xtask frontend`,
//! which `cargo xtask test` runs first). Screenshots go to `artifacts/`.

mod browser;
mod common;

use std::time::{Duration, Instant};

use browser::{artifacts, browser, driver, editor_peer, editor_server, editor_with_worker, finish};
use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

/// Picks `value` in the select `css`.
async fn choose(c: &Client, css: &str, value: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .select_by_value(value)
        .await
        .unwrap();
}

/// A double click on `css` (two presses at its centre).
async fn double_click(c: &Client, css: &str) {
    click_at(c, css, 0.0, 0.0, 2).await
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
    let target = c.find(Locator::Css(to)).await.unwrap();
    press_and_move(
        c,
        from,
        PointerAction::MoveToElement {
            element: target,
            duration: Some(Duration::from_millis(150)),
            x: 0.0,
            y: 0.0,
        },
    )
    .await
}

async fn drag_by(c: &Client, what: &str, dx: f64, dy: f64) {
    press_and_move(
        c,
        what,
        PointerAction::MoveBy {
            duration: Some(Duration::from_millis(150)),
            x: dx,
            y: dy,
        },
    )
    .await
}

/// Presses the mouse on the centre of `css`, makes `to`, and lets go.
async fn press_and_move(c: &Client, css: &str, to: PointerAction) {
    let element = c.find(Locator::Css(css)).await.unwrap();
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
        .then(to)
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(actions).await.unwrap();
}

/// Clicks `clicks` times at `(x, y)` from the centre of `css` (WebDriver
/// offsets are from the element's centre).
async fn click_at(c: &Client, css: &str, x: f64, y: f64, clicks: usize) {
    let element = c.find(Locator::Css(css)).await.unwrap();
    let mut actions = MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
        element,
        duration: None,
        x,
        y,
    });
    for _ in 0..clicks {
        actions = actions
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            });
    }
    c.perform_actions(actions).await.unwrap();
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(artifacts().join(format!("editor-{name}.png")), png).unwrap();
}

/// The docs' screenshots of the editor (`docs/images/editor-<name>-light.png`
/// and `-dark.png`), taken by the tests so they stay true: the page as it
/// is, then in the dark theme (set on the page only, not chosen).
async fn doc_screenshots(c: &Client, name: &str) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/images");
    let was = c
        .execute("return document.documentElement.dataset.theme;", vec![])
        .await
        .unwrap();
    for theme in ["light", "dark"] {
        c.execute(
            "document.documentElement.dataset.theme = arguments[0];",
            vec![json!(theme)],
        )
        .await
        .unwrap();
        // Two frames: the styles applied and painted.
        c.execute_async(
            "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done(true)));",
            vec![],
        )
        .await
        .unwrap();
        let png = c.screenshot().await.unwrap();
        std::fs::write(dir.join(format!("editor-{name}-{theme}.png")), png).unwrap();
    }
    c.execute(
        "document.documentElement.dataset.theme = arguments[0];",
        vec![was],
    )
    .await
    .unwrap();
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
    let (s, codes) = editor_server().await;
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
    click(&a, "button.kind[data-kind='util.log']").await;
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
    finish(&a, &[]).await;
    finish(&b, &[]).await;
}

/// The class of `css` ("" while it is missing or being re-rendered).
async fn class_of(c: &Client, css: &str) -> String {
    match c.find(Locator::Css(css)).await {
        Ok(el) => el.attr("class").await.ok().flatten().unwrap_or_default(),
        Err(_) => String::new(),
    }
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
async fn a_node_without_connections_dragged_onto_one_goes_into_it() {
    let (s, codes) = editor_server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "splice", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "set", "kind": "data.set", "config": {"values": {"a": 1}}, "position": [720, 0]},
        {"id": "log", "kind": "util.log", "config": {"message": "hi"}, "position": [360, 240]}],
        "edges": [{"from": "start", "to": "set"}]}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "splice").await;
    // Onto the connection's middle (a straight line: start and set are level).
    drag(
        &a,
        "g.node[data-node='log'] rect.box",
        "path.edge[data-edge='0']",
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "log went into start → set",
        || async { stored_edges(&s, "splice").await == ["start → log", "log → set"] },
    )
    .await;
    // One undo takes back the move and the splice together.
    click(&a, "svg.surface").await;
    key_chord(&a, CONTROL, "z").await;
    eventually(Duration::from_secs(5), "undone in one step", || async {
        let wf = stored(&s, "splice").await;
        stored_edges(&s, "splice").await == ["start → set"]
            && wf["nodes"][2]["position"] == json!([360.0, 240.0])
    })
    .await;
}

#[tokio::test]
async fn configure_run_read_undo_and_see_a_failure() {
    let (s, codes) = editor_server().await;
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
    click(&a, "g.node[data-node='set'] rect.box").await;
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
    click(&a, "#node-label").await;
    eventually(Duration::from_secs(5), "the new config stored", || async {
        stored(&s, "flow").await["nodes"][1]["config"]["values"]["n"] == 2
    })
    .await;

    // Run it and read the output, in the run panel and on the node.
    click(&a, ".run-button").await;
    eventually(Duration::from_secs(10), "the run to finish", || async {
        text_of(&a, ".run-status")
            .await
            .is_some_and(|t| t != "running")
    })
    .await;
    let status = text(&a, ".run-status").await;
    assert_eq!(status, "succeeded");
    let output = text(&a, ".run-output").await;
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
    let step_output = text(&a, ".step-output").await;
    assert!(step_output.contains("n: 2"), "{step_output}");
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
    click(&a, "svg.surface").await;
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
    click(&a, ".run-button").await;
    // Generous: the whole suite's browsers share two cores.
    eventually(Duration::from_secs(20), "the failed run", || async {
        class_of(&a, "g.node[data-node='explode']")
            .await
            .contains("run-failed")
            && a.find(Locator::Css(".run-error")).await.is_ok()
    })
    .await;
    let error = text(&a, ".run-error").await;
    assert!(
        error.contains("explode") && error.contains("nope"),
        "{error}"
    );
    assert_eq!(text(&a, ".run-status").await, "failed");
    screenshot(&a, "failed").await;
    // Retry from the failed step: a new run of the same pinned version
    // that reuses `start` (journaled, not run again) and fails again.
    click(&a, ".run .retry-failed").await;
    eventually(Duration::from_secs(10), "the retry, failed too", || async {
        a.find_all(Locator::Css("button.run-row.run-failed"))
            .await
            .unwrap()
            .len()
            == 2
    })
    .await;
    let runs: Value = s
        .api(reqwest::Method::GET, "/runs?workflow=boom")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let retry = &runs.as_array().unwrap()[0];
    let detail: Value = s
        .api(
            reqwest::Method::GET,
            &format!("/runs/{}", retry["id"].as_str().unwrap()),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
    assert_eq!(detail["status"], "failed");
    let explode = detail["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|st| st["node"] == "explode")
        .unwrap();
    assert_eq!(explode["status"], "failed", "{detail}");
    finish(&a, &[]).await;
    finish(&b, &[]).await;
}

async fn value_of(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap()
        .unwrap_or_default()
}

/// The text of `css`, found again if a render replaced it meanwhile.
async fn text(c: &Client, css: &str) -> String {
    for _ in 0..40 {
        if let Some(t) = text_of(c, css).await {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no text at {css}");
}

/// The text of `css`, or None when it is missing or was just re-rendered.
async fn text_of(c: &Client, css: &str) -> Option<String> {
    c.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.unwrap().len()
}

/// Clicks `css` once it is there (up to 5 s), finding it again if a render replaced it
/// meanwhile.
async fn click(c: &Client, css: &str) {
    for _ in 0..100 {
        if let Ok(el) = c.find(Locator::Css(css)).await {
            match el.click().await {
                Ok(_) => return,
                Err(fantoccini::error::CmdError::Standard(e))
                    if e.error == fantoccini::error::ErrorStatus::StaleElementReference => {}
                Err(e) => panic!("clicking {css}: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("could not click {css}");
}

/// Node ids of a kind in the stored workflow.
async fn nodes_of_kind(s: &common::Server, id: &str, kind: &str) -> Vec<String> {
    stored(s, id).await["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == kind)
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

/// One key pressed and released, sent to whatever has the focus.
async fn press(c: &Client, key: &str) {
    use fantoccini::actions::{KeyAction, KeyActions};
    let k = key.chars().next().unwrap();
    let actions = KeyActions::new("keys".into())
        .then(KeyAction::Down { value: k })
        .then(KeyAction::Up { value: k });
    c.perform_actions(actions).await.unwrap();
}

const END: &str = "\u{E010}";
const HOME: &str = "\u{E011}";

/// Whether the element's box lies inside the canvas's.
async fn inside_canvas(c: &Client, css: &str) -> bool {
    let (cx, cy, cw, ch) = c
        .find(Locator::Css("svg.surface"))
        .await
        .unwrap()
        .rectangle()
        .await
        .unwrap();
    let (x, y, w, h) = c
        .find(Locator::Css(css))
        .await
        .unwrap()
        .rectangle()
        .await
        .unwrap();
    x >= cx && y >= cy && x + w <= cx + cw && y + h <= cy + ch
}

#[tokio::test]
async fn a_click_in_the_minimap_centres_the_canvas_there() {
    let (s, codes) = editor_server().await;
    // Twelve nodes (the minimap shows from 12) in a row too long to fit.
    let nodes: Vec<Value> = (0..12)
        .map(|i| {
            let id = if i == 0 { "start".to_string() } else { format!("n{i}") };
            if i == 0 {
                json!({"id": id, "kind": "trigger.manual", "position": [0, 0]})
            } else {
                json!({"id": id, "kind": "data.set", "config": {"values": {"i": i}}, "position": [i * 3000, 0]})
            }
        })
        .collect();
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "long", "nodes": nodes, "edges": []}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "long").await;
    let last = "g.node[data-node='n11'] rect.box";
    eventually(Duration::from_secs(5), "the minimap", || async {
        count(&a, "svg.minimap").await == 1
    })
    .await;
    assert!(
        !inside_canvas(&a, last).await,
        "the last node is off screen at first"
    );
    let minimap = a.find(Locator::Css("svg.minimap")).await.unwrap();
    let (_, _, w, _) = minimap.rectangle().await.unwrap();
    click_at(&a, "svg.minimap", w / 2.0 - 4.0, 0.0, 1).await;
    eventually(
        Duration::from_secs(2),
        "the last node on screen after a click at the minimap's right end",
        || async { inside_canvas(&a, last).await },
    )
    .await;
    screenshot(&a, "minimap").await;
    finish(&a, &[]).await;
}

#[tokio::test]
async fn typing_together_presence_runs_list_run_view_and_adding_nodes() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "code", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "js", "kind": "code.js", "config": {"source": "return {n: input.n * 2};"}, "position": [320, 0]},
            {"id": "end", "kind": "output.end", "position": [640, 0]}],
        "edges": [{"from": "start", "to": "js"}, {"from": "js", "to": "end"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    let b = browser(&driver).await;
    open(&a, &s, &codes, "code").await;
    open(&b, &s, &codes, "code").await;

    // Presence: a's pointer and a's selection show in b.
    click(&a, "g.node[data-node='js'] rect.box").await;
    let surface = a.find(Locator::Css("svg.surface")).await.unwrap();
    let (sx, sy, sw, sh) = surface.rectangle().await.unwrap();
    a.perform_actions(
        MouseActions::new("mouse".into()).then(PointerAction::MoveToElement {
            element: surface,
            duration: Some(Duration::from_millis(200)),
            x: 40.0,
            y: 120.0,
        }),
    )
    .await
    .unwrap();
    // Both windows show the same view, so a's pointer (the last position,
    // not one held back by the rate limit) lands on the same spot in b.
    let pointer = (sx + sw / 2.0 + 40.0, sy + sh / 2.0 + 120.0);
    eventually(
        Duration::from_secs(1),
        "a's cursor in b, where a's pointer is",
        || async {
            match b.find(Locator::Css("g.cursor path")).await {
                Ok(el) => {
                    let (x, y, _, _) = el.rectangle().await.unwrap();
                    (x - pointer.0).abs() < 3.0 && (y - pointer.1).abs() < 3.0
                }
                Err(_) => false,
            }
        },
    )
    .await;
    eventually(Duration::from_secs(1), "a's selection in b", || async {
        count(&b, "g.node[data-node='js'] rect.seen").await == 1
    })
    .await;
    // Named as this install's user (`[user] name`, else the OS user).
    let name = s
        .api(reqwest::Method::GET, "/me")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!name.starts_with("viewer "), "{name}");
    eventually(
        Duration::from_secs(2),
        "a's name on its cursor in b",
        || async {
            text_of(&b, "g.cursor")
                .await
                .is_some_and(|t| t.contains(&name))
        },
    )
    .await;
    screenshot(&b, "presence").await;

    // Two people typing in the same code: each sees the other within a second.
    click(&b, "g.node[data-node='js'] rect.box").await;
    let code_a = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css("#cfg-source"))
        .await
        .unwrap();
    code_a.click().await.unwrap();
    key_chord(&a, CONTROL, END).await;
    code_a.send_keys("\n// from a").await.unwrap();
    let typed = Instant::now();
    eventually(Duration::from_secs(1), "a's typing in b", || async {
        value_of(&b, "#cfg-source").await.contains("// from a")
    })
    .await;
    eprintln!("b showed a's typing after {:?}", typed.elapsed());
    let code_b = b.find(Locator::Css("#cfg-source")).await.unwrap();
    code_b.click().await.unwrap();
    key_chord(&b, CONTROL, HOME).await;
    code_b.send_keys("// from b\n").await.unwrap();
    eventually(Duration::from_secs(1), "b's typing in a", || async {
        let v = value_of(&a, "#cfg-source").await;
        v.starts_with("// from b\n") && v.ends_with("// from a")
    })
    .await;
    // Tab indents (it does not leave the editor), and Enter keeps the indentation.
    // (At the end of the text first: where b's insertion left a's caret
    // is the caret-carrying's business, not this check's.)
    key_chord(&a, CONTROL, END).await;
    code_a.send_keys("\n\u{E004}x\ny").await.unwrap();
    let want = "// from b\nreturn {n: input.n * 2};\n// from a\n  x\n  y";
    let started = Instant::now();
    loop {
        let source = stored(&s, "code").await["nodes"][1]["config"]["source"].clone();
        if source == want {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the code stored is {source}, a shows {:?}, b shows {:?}",
            value_of(&a, "#cfg-source").await,
            value_of(&b, "#cfg-source").await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        value_of(&b, "#cfg-source").await,
        "// from b\nreturn {n: input.n * 2};\n// from a\n  x\n  y"
    );
    assert_eq!(
        count(&a, ".code .gutter div").await,
        5,
        "a line number per line"
    );
    screenshot(&a, "code").await;

    // A run started in a shows up live in b's runs list.
    let input = a.find(Locator::Css("#run-input")).await.unwrap();
    input.click().await.unwrap();
    key_chord(&a, CONTROL, "a").await;
    input.send_keys(r#"{"n": 21}"#).await.unwrap();
    click(&a, ".run-button").await;
    // The first code.js run on a machine also prepares the JavaScript
    // runtime (Wizer and a compile: seconds, more while the other browser
    // tests share the two cores).
    eventually(Duration::from_secs(30), "the run in b's list", || async {
        b.find(Locator::Css("button.run-row.run-succeeded"))
            .await
            .is_ok()
    })
    .await;
    // b opens it: the run view shows the pinned workflow, statuses, output.
    click(&b, "button.run-row").await;
    let banner = b
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".run-banner"))
        .await
        .unwrap();
    assert!(banner.text().await.unwrap().contains("succeeded"));
    eventually(
        Duration::from_secs(5),
        "statuses in the run view",
        || async {
            class_of(&b, "g.node[data-node='js']")
                .await
                .contains("run-succeeded")
        },
    )
    .await;
    click(&b, "g.node[data-node='js'] rect.box").await;
    eventually(Duration::from_secs(5), "the step's output", || async {
        text_of(&b, ".step-output")
            .await
            .is_some_and(|t| t.contains("n: 42"))
    })
    .await;
    // Read-only: the form is disabled in a past run.
    assert!(
        b.find(Locator::Css(".node-panel fieldset"))
            .await
            .unwrap()
            .attr("disabled")
            .await
            .unwrap()
            .is_some(),
        "the form of a past run is read-only"
    );
    screenshot(&b, "run-view").await;
    // Retry from the start: a new run, in both lists.
    click(&b, ".run-banner .retry-start").await;
    eventually(
        Duration::from_secs(5),
        "the retry in both lists",
        || async {
            count(&a, "button.run-row").await == 2 && count(&b, "button.run-row").await == 2
        },
    )
    .await;
    // Esc goes back to editing.
    press(&b, "\u{E00C}").await;
    eventually(Duration::from_secs(2), "the run view closed", || async {
        count(&b, ".run-banner").await == 0
    })
    .await;
    // A link to a run (`#/w/<workflow>/r/<run>`, what the desktop app's
    // notifications open) shows that run.
    let first = a
        .find(Locator::Css(
            "button.run-row:last-child, li:last-child > button.run-row",
        ))
        .await
        .unwrap()
        .attr("data-run")
        .await
        .unwrap()
        .unwrap();
    b.goto(&format!("{}/#/w/code/r/{first}", s.base))
        .await
        .unwrap();
    let started = Instant::now();
    while !text_of(&b, ".run-banner")
        .await
        .is_some_and(|t| t.contains(&first) && t.contains("succeeded"))
    {
        if started.elapsed() >= Duration::from_secs(5) {
            screenshot(&b, "linked-run").await;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the linked run {first} is not shown: at {}, banner {:?}, status {:?}",
            b.current_url().await.unwrap(),
            text_of(&b, ".run-banner").await,
            text_of(&b, ".status").await
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    press(&b, "\u{E00C}").await;

    // The runs list shows a page of 20, live; "Older runs" shows the rest.
    for n in 0..24 {
        let r = s
            .client
            .post(format!("{}/api/v1/workflows/code/runs", s.base))
            .bearer_auth(&s.token)
            .json(&json!({"input": {"n": n}}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    eventually(
        Duration::from_secs(10),
        "a page of 20 runs and an older-runs button",
        || async {
            count(&a, "button.run-row").await == 20 && count(&a, "button.older-runs").await == 1
        },
    )
    .await;
    click(&a, "button.older-runs").await;
    eventually(
        Duration::from_secs(5),
        "all 26 runs, and no older-runs button",
        || async {
            count(&a, "button.run-row").await == 26 && count(&a, "button.older-runs").await == 0
        },
    )
    .await;

    // Quick add: double click on the background, type, Enter.
    let surface = a.find(Locator::Css("svg.surface")).await.unwrap();
    let (_, _, w, h) = surface.rectangle().await.unwrap();
    click_at(&a, "svg.surface", -w / 2.0 + 60.0, h / 2.0 - 60.0, 2).await;
    let quick = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".quick-add input"))
        .await
        .unwrap();
    quick.send_keys("log\u{E007}").await.unwrap();
    eventually(
        Duration::from_secs(5),
        "the quick-added node stored",
        || async { nodes_of_kind(&s, "code", "util.log").await.len() == 1 },
    )
    .await;

    // Drag from the palette onto the canvas.
    drag(&a, "button.kind[data-kind='data.set']", "svg.surface").await;
    eventually(
        Duration::from_secs(5),
        "the dragged-in node stored",
        || async { nodes_of_kind(&s, "code", "data.set").await.len() == 1 },
    )
    .await;
    // `/` searches the palette.
    press(&a, "/").await;
    let active = a.active_element().await.unwrap();
    assert_eq!(
        active.attr("class").await.unwrap().as_deref(),
        Some("palette-search")
    );
    active.send_keys("transform").await.unwrap();
    eventually(Duration::from_secs(2), "the palette filtered", || async {
        count(&a, ".palette button.kind[data-kind='data.transform']").await == 1
            && count(&a, ".palette button.kind[data-kind='util.log']").await == 0
    })
    .await;
    screenshot(&a, "added").await;

    // Version history: view the first version, then restore it.
    click(&a, ".history-toggle").await;
    eventually(Duration::from_secs(5), "the versions listed", || async {
        count(&a, ".versions li").await >= 2
    })
    .await;
    let versions = a
        .find_all(Locator::Css(".versions .view-version"))
        .await
        .unwrap();
    versions.last().unwrap().click().await.unwrap();
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".version-banner"))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the first version on the canvas",
        || async { count(&a, "g.node").await == 3 },
    )
    .await;
    screenshot(&a, "version").await;
    click(&a, ".version-banner .restore").await;
    eventually(Duration::from_secs(5), "the restore stored", || async {
        let wf = stored(&s, "code").await;
        wf["nodes"].as_array().unwrap().len() == 3
            && wf["nodes"][1]["config"]["source"] == "return {n: input.n * 2};"
    })
    .await;
    eventually(
        Duration::from_secs(2),
        "the restore in both windows",
        || async {
            count(&a, ".version-banner").await == 0
                && count(&a, "g.node").await == 3
                && count(&b, "g.node").await == 3
        },
    )
    .await;
    // A window that goes away leaves no ghost behind.
    assert_eq!(count(&a, "g.cursor").await, 1, "b's pointer is shown");
    b.goto("about:blank").await.unwrap();
    eventually(Duration::from_secs(2), "b gone from a", || async {
        count(&a, "g.cursor").await == 0 && !text(&a, ".status").await.contains("more here")
    })
    .await;
    finish(&a, &[]).await;
    finish(&b, &[]).await;
}

#[tokio::test]
async fn the_list_renames_duplicates_deletes_exports_and_imports() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "alpha", "name": "Alpha", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]}], "edges": []
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    a.goto(&format!("{}/ui/login?code={}", s.base, codes.issue()))
        .await
        .unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("li[data-id='alpha']"))
        .await
        .unwrap();
    let status_of = |id: &'static str| {
        let s = &s;
        async move {
            s.api(reqwest::Method::GET, &format!("/workflows/{id}"))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };

    // Rename in place: Enter keeps it.
    click(&a, "li[data-id='alpha'] .rename-button").await;
    let input = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css("input.rename"))
        .await
        .unwrap();
    key_chord(&a, CONTROL, "a").await;
    input.send_keys("Alpha Two\u{E007}").await.unwrap();
    eventually(Duration::from_secs(5), "the new name stored", || async {
        stored(&s, "alpha").await["name"] == "Alpha Two"
    })
    .await;
    eventually(Duration::from_secs(2), "the new name listed", || async {
        text_of(&a, "button.workflow[data-id='alpha'] .name")
            .await
            .is_some_and(|t| t == "Alpha Two")
    })
    .await;

    // Duplicate: a new id, the same graph.
    click(&a, "li[data-id='alpha'] .duplicate").await;
    eventually(Duration::from_secs(5), "the copy stored", || async {
        status_of("alpha-copy").await == 200
    })
    .await;
    let copy = stored(&s, "alpha-copy").await;
    assert_eq!(copy["name"], "Alpha Two (copy)");
    assert_eq!(copy["nodes"], stored(&s, "alpha").await["nodes"]);

    // Delete asks first.
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css("li[data-id='alpha-copy'] .delete"))
        .await
        .unwrap();
    click(&a, "li[data-id='alpha-copy'] .delete").await;
    a.accept_alert().await.unwrap();
    eventually(Duration::from_secs(5), "the copy deleted", || async {
        status_of("alpha-copy").await == 404
    })
    .await;

    // Export offers the file.
    click(&a, "li[data-id='alpha'] .export").await;
    eventually(Duration::from_secs(5), "the export", || async {
        text_of(&a, ".notice")
            .await
            .is_some_and(|t| t == "exported alpha.flow.json")
    })
    .await;

    // Import never overwrites: the taken id gets a suffix. A bad file says why.
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("alpha.flow.json");
    std::fs::write(
        &good,
        serde_json::to_string(&json!({
            "format": "sluice.workflow/v1", "id": "alpha", "name": "Imported", "nodes": [
                {"id": "start", "kind": "trigger.manual"}, {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "start", "to": "end"}]
        }))
        .unwrap(),
    )
    .unwrap();
    a.find(Locator::Css("#import"))
        .await
        .unwrap()
        .send_keys(good.to_str().unwrap())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the import stored", || async {
        status_of("alpha-2").await == 200
    })
    .await;
    assert_eq!(stored(&s, "alpha-2").await["name"], "Imported");
    assert_eq!(
        stored(&s, "alpha").await["name"],
        "Alpha Two",
        "the original stays"
    );
    // An n8n export is converted by the engine; the notice says what to do.
    let n8n = dir.path().join("n8n-notify.json");
    std::fs::write(&n8n, include_str!("../../cli/tests/n8n/notify-team.json")).unwrap();
    a.find(Locator::Css("#import"))
        .await
        .unwrap()
        .send_keys(n8n.to_str().unwrap())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the n8n import stored", || async {
        status_of("notify-the-team").await == 200
    })
    .await;
    let notice = text_of(&a, ".notice").await.unwrap_or_default();
    assert!(
        notice
            .starts_with("imported n8n-notify.json (n8n) as notify-the-team; kept disabled: Slack"),
        "{notice}"
    );
    assert!(
        notice.contains("credentials to create: slack-account (slackApi), smtp-account (smtp)"),
        "{notice}"
    );
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, "{ not json").unwrap();
    a.find(Locator::Css("#import"))
        .await
        .unwrap()
        .send_keys(bad.to_str().unwrap())
        .await
        .unwrap();
    let error = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".error"))
        .await
        .unwrap();
    let text = error.text().await.unwrap();
    assert!(text.contains("broken.json is not JSON"), "{text}");
    screenshot(&a, "list").await;
    finish(&a, &[]).await;
}

/// Signed in, the browser sends nothing of its session to another server
/// on this machine (another port of 127.0.0.1): the session lives in the
/// editor origin's storage and travels as a header, not as a cookie, which
/// browsers send to every port of a host. (Issue 16: a replayed cookie read
/// credentials metadata and wrote workflows for 30 days.)
#[tokio::test]
async fn another_local_port_never_receives_the_session() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (s, codes) = editor_server().await;
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = other.local_addr().unwrap().port();
    let seen = tokio::spawn(async move {
        let (mut conn, _) = other.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .await
            .ok();
        String::from_utf8_lossy(&head).to_string()
    });
    let driver = driver().await;
    let a = browser(&driver).await;
    // Signed in: the editor lists workflows (through the API, with the session).
    a.goto(&format!("{}/ui/login?code={}", s.base, codes.issue()))
        .await
        .unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("ul.workflows"))
        .await
        .unwrap();
    a.goto(&format!("http://127.0.0.1:{other_port}/"))
        .await
        .unwrap();
    let head = tokio::time::timeout(Duration::from_secs(10), seen)
        .await
        .expect("the other server was asked")
        .unwrap();
    let lower = head.to_ascii_lowercase();
    assert!(
        !lower.contains("sluice_session") && !lower.contains("\r\ncookie:"),
        "the other port received: {head}"
    );
    // The other port (the test's recorder) is gone when the browser asks it for a favicon.
    finish(
        &a,
        &["favicon.ico - Failed to load resource: net::ERR_CONNECTION_REFUSED"],
    )
    .await;
}

/// A loopback HTTP server that answers `{}` to everything and records the
/// path of every request, in order.
async fn recorder() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf);
                let path = head.split(' ').nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(path);
                conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                )
                .await
                .ok();
            });
        }
    });
    (port, seen)
}

#[tokio::test]
async fn editing_a_published_webhook_workflow_changes_nothing_live_until_published() {
    let (s, codes) = editor_server().await;
    let (port, seen) = recorder().await;
    let url = |path: &str| format!("http://127.0.0.1:{port}/{path}");
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "live", "nodes": [
            {"id": "start", "kind": "trigger.webhook", "position": [0, 0],
             "config": {"method": "POST", "path": "new", "respond": "when_finished"}},
            {"id": "call", "kind": "http.request", "position": [320, 0],
             "config": {"method": "GET", "url": url("orders")}},
            {"id": "end", "kind": "output.end", "position": [640, 0]}],
        "edges": [{"from": "start", "to": "call"}, {"from": "call", "to": "end"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "live").await;
    eventually(
        Duration::from_secs(10),
        "the panel says it is live",
        || async { attr(&a, ".publish-panel", "data-state").await.as_deref() == Some("live") },
    )
    .await;

    // Traffic all along the edit: every call must succeed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let (client, base, stop) = (s.client.clone(), s.base.clone(), stop.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client
                    .post(format!("{base}/hook/live/new"))
                    .json(&json!({}))
                    .send()
                    .await
                    .unwrap();
                statuses.push(r.status().as_u16());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            statuses
        })
    };

    // Retype the URL, one key at a time, and empty the webhook's path.
    click(&a, "g.node[data-node='call'] rect.box").await;
    let field = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-panel[data-node='call'] #cfg-url"))
        .await
        .unwrap();
    field.click().await.unwrap();
    key_chord(&a, CONTROL, "a").await;
    field.send_keys(&url("invoices")).await.unwrap();
    eventually(
        Duration::from_secs(5),
        "the new URL in the draft",
        || async { stored(&s, "live").await["nodes"][1]["config"]["url"] == url("invoices") },
    )
    .await;
    click(&a, "g.node[data-node='start'] rect.box").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-panel[data-node='start'] #cfg-path"))
        .await
        .unwrap();
    type_over(&a, &s, "\u{E003}").await; // Backspace: the path is empty
    // A draft with problems cannot be published.
    eventually(Duration::from_secs(5), "publishing blocked", || async {
        count(&a, ".publish-problems li").await > 0
            && attr(&a, ".publish-button", "disabled").await.is_some()
    })
    .await;
    screenshot(&a, "publish-blocked").await;
    type_over(&a, &s, "new").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = traffic.await.unwrap();
    assert!(statuses.len() >= 10, "only {} calls", statuses.len());
    assert!(
        statuses.iter().all(|&st| st == 200),
        "the endpoint went down during the edit: {statuses:?}"
    );
    {
        let seen = seen.lock().unwrap();
        assert!(
            !seen.is_empty() && seen.iter().all(|p| p == "/orders"),
            "a request went to another URL during the edit: {seen:?}"
        );
    }

    // Publish: the new URL is live.
    eventually(
        Duration::from_secs(5),
        "unpublished edits shown",
        || async {
            attr(&a, ".publish-panel", "data-state").await.as_deref() == Some("changed")
                && text_of(&a, ".publish-status")
                    .await
                    .is_some_and(|t| t.contains("call (config.url)"))
        },
    )
    .await;
    screenshot(&a, "publish-changed").await;
    click(&a, ".publish-button").await;
    eventually(Duration::from_secs(5), "published", || async {
        attr(&a, ".publish-panel", "data-state").await.as_deref() == Some("live")
    })
    .await;
    let r = s
        .hook(reqwest::Method::POST, "live/new")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        seen.lock().unwrap().last().map(String::as_str),
        Some("/invoices")
    );

    // Unpublish: the webhook answers 404; the draft stays.
    click(&a, ".unpublish-button").await;
    eventually(Duration::from_secs(5), "unpublished", || async {
        attr(&a, ".publish-panel", "data-state").await.as_deref() == Some("unpublished")
    })
    .await;
    let r = s
        .hook(reqwest::Method::POST, "live/new")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        stored(&s, "live").await["nodes"][1]["config"]["url"],
        url("invoices")
    );
    finish(&a, &[]).await;
}

/// An attribute of `css` (None when it is missing or being re-rendered).
async fn attr(c: &Client, css: &str, name: &str) -> Option<String> {
    c.find(Locator::Css(css))
        .await
        .ok()?
        .attr(name)
        .await
        .ok()?
}

/// What a field's control is, read from the page (the form is generated
/// from each kind's schema, so the test asks the page, not a list).
#[derive(Debug, Clone, PartialEq)]
enum Control {
    Credential,
    Options(Vec<String>),
    Checkbox,
    Code,
    Text,
    /// A field typed as text that becomes a value (`data-shape`).
    Shaped(String),
}

async fn control_of(c: &Client, panel: &str, field: &str) -> Control {
    let css = format!("{panel} .field[data-field='{field}'] #cfg-{field}");
    let el = c.find(Locator::Css(&css)).await.unwrap();
    let tag = el.tag_name().await.unwrap();
    let class = el.attr("class").await.unwrap().unwrap_or_default();
    if let Some(shape) = el.attr("data-shape").await.unwrap() {
        return Control::Shaped(shape);
    }
    match tag.as_str() {
        "select" if class.contains("credential") => Control::Credential,
        "select" => {
            let mut values = Vec::new();
            for o in el.find_all(Locator::Css("option")).await.unwrap() {
                values.push(o.attr("value").await.unwrap().unwrap_or_default());
            }
            Control::Options(values)
        }
        "input" if el.attr("type").await.unwrap().as_deref() == Some("checkbox") => {
            Control::Checkbox
        }
        "textarea"
            if c.find(Locator::Css(&format!(
                "{panel} .field[data-field='{field}'] .code"
            )))
            .await
            .is_ok() =>
        {
            Control::Code
        }
        _ => Control::Text,
    }
}

/// A field typed into: its name, control, the text typed, the value it stands for.
type Typed = (String, Control, String, Value);

/// What to type into a control, and the value it must store.
fn typing_for(field: &str, control: &Control) -> (String, Value) {
    match control {
        Control::Text | Control::Code => {
            let t = format!("{field} \"q\" \\ {{{{ input.x }}}} é");
            (t.clone(), json!(t))
        }
        Control::Shaped(shape) => match shape.as_str() {
            "integer" => ("42".into(), json!(42)),
            "number" => ("2.5".into(), json!(2.5)),
            "object" => (
                r#"{"x-id": "{{ input.id }}"}"#.into(),
                json!({"x-id": "{{ input.id }}"}),
            ),
            "array" => (
                r#"[{"port": "big", "condition": "{{ input.n > 1 }}"}]"#.into(),
                json!([{"port": "big", "condition": "{{ input.n > 1 }}"}]),
            ),
            // A template, shown and stored exactly as typed (no quotes).
            _ if field == "condition" => (
                "{{ input.body.total > 100 }}".into(),
                json!("{{ input.body.total > 100 }}"),
            ),
            _ => (
                r#"{"id": "{{ input.id }}", "n": 2}"#.into(),
                json!({"id": "{{ input.id }}", "n": 2}),
            ),
        },
        _ => unreachable!("not typed: {control:?}"),
    }
}

#[tokio::test]
async fn every_field_of_every_kind_keeps_what_is_typed_when_focus_leaves_at_once() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "fields", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]}],
        "edges": []
    }))
    .await;
    // One credential of each kind a node takes: a picker offers only those.
    for (name, kind, value) in [
        ("picked", "bearer", json!({"token": "t"})),
        (
            "picked-mail",
            "smtp",
            json!({"host": "127.0.0.1", "port": 25, "security": "none"}),
        ),
        (
            "picked-ai",
            "openai",
            json!({"base_url": "http://127.0.0.1:9/v1"}),
        ),
        (
            "picked-db",
            "postgres",
            json!({"host": "127.0.0.1", "database": "d", "username": "u"}),
        ),
    ] {
        let r = s
            .api(reqwest::Method::PUT, &format!("/credentials/{name}"))
            .json(&json!({"kind": kind, "value": value}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "fields").await;

    // node id → field → (control, what was typed, the value it stands for)
    let mut expected: Vec<(String, Vec<Typed>)> = Vec::new();
    let kinds: Vec<&str> = sluice_model::catalog().iter().map(|k| k.kind).collect();
    let mut fields_typed = 0;
    for kind in &kinds {
        // A click on the palette adds the node and selects it: for the
        // previous node, focus leaves its last field this very moment.
        let before = count(&a, "g.node").await;
        click(&a, &format!(".palette button.kind[data-kind='{kind}']")).await;
        eventually(Duration::from_secs(5), "the node added", || async {
            count(&a, "g.node").await == before + 1
        })
        .await;
        let node = loop {
            if let Some(id) = attr(&a, ".node-panel", "data-node").await
                && !expected.iter().any(|(n, _)| *n == id)
                && id != "start"
            {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        let panel = format!(".node-panel[data-node='{node}']");
        let mut names = Vec::new();
        for f in a
            .find_all(Locator::Css(&format!("{panel} .field")))
            .await
            .unwrap()
        {
            names.push(f.attr("data-field").await.unwrap().unwrap());
        }
        let mut typed = Vec::new();
        for name in names {
            let control = control_of(&a, &panel, &name).await;
            let css = format!("{panel} #cfg-{name}");
            let el = a.find(Locator::Css(&css)).await.unwrap();
            let (text, value) = match &control {
                Control::Credential => {
                    let mut offered = Vec::new();
                    for o in el.find_all(Locator::Css("option")).await.unwrap() {
                        offered.push(o.attr("value").await.unwrap().unwrap_or_default());
                    }
                    let pick = offered
                        .iter()
                        .find(|v| v.starts_with("picked"))
                        .unwrap_or_else(|| panic!("{node}.{name} offers {offered:?}"))
                        .clone();
                    el.select_by_value(&pick).await.unwrap();
                    (pick.clone(), json!(pick))
                }
                Control::Options(values) => {
                    let last = values.last().unwrap().clone();
                    el.select_by_value(&last).await.unwrap();
                    (last.clone(), json!(last))
                }
                Control::Checkbox => {
                    let was = el.is_selected().await.unwrap();
                    el.click().await.unwrap();
                    (String::new(), json!(!was))
                }
                _ => {
                    let (text, value) = typing_for(&name, &control);
                    el.click().await.unwrap();
                    key_chord(&a, CONTROL, "a").await;
                    el.send_keys(&text).await.unwrap();
                    (text, value)
                }
            };
            fields_typed += 1;
            typed.push((name, control, text, value));
        }
        expected.push((node, typed));
    }
    // The last node's last field: focus leaves by a click on the canvas.
    click_at(&a, "svg.surface", 0.0, 200.0, 1).await;
    assert!(fields_typed >= 40, "only {fields_typed} fields");

    // Everything typed is stored, exactly.
    let check = |wf: &Value| -> Result<(), String> {
        for (node, fields) in &expected {
            let n = wf["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["id"] == node.as_str())
                .ok_or(format!("no node {node}"))?;
            for (name, control, text, value) in fields {
                if n["config"][name] != *value {
                    return Err(format!(
                        "{node}.{name} ({control:?}, typed {text:?}): stored {}, expected {value}",
                        n["config"][name]
                    ));
                }
            }
        }
        Ok(())
    };
    let started = Instant::now();
    loop {
        match check(&stored(&s, "fields").await) {
            Ok(()) => break,
            Err(e) if started.elapsed() > Duration::from_secs(10) => panic!("{e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }

    // A JSON mistake: said where it is, next to the field; the text stays,
    // also after leaving the node and coming back; nothing is stored.
    let http = nodes_of_kind(&s, "fields", "http.request").await[0].clone();
    press(&a, "f").await; // fit: every node on screen
    select_node(&a, &http).await;
    let headers = format!(".node-panel[data-node='{http}'] #cfg-headers");
    let bad = "{\"a\": 1,, \"b\": 2}";
    let el = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(&headers))
        .await
        .unwrap();
    el.click().await.unwrap();
    key_chord(&a, CONTROL, "a").await;
    el.send_keys(bad).await.unwrap();
    let error_css =
        format!(".node-panel[data-node='{http}'] .field[data-field='headers'] .syntax-error");
    eventually(Duration::from_secs(5), "the syntax error shown", || async {
        text_of(&a, &error_css)
            .await
            .is_some_and(|t| t.starts_with("line 1, column 9:"))
    })
    .await;
    screenshot(&a, "field-syntax-error").await;
    select_node(&a, "start").await;
    select_node(&a, &http).await;
    eventually(Duration::from_secs(5), "the mistaken text kept", || async {
        c_value(&a, &headers).await.as_deref() == Some(bad)
            && text_of(&a, &error_css).await.is_some()
    })
    .await;
    assert_eq!(
        stored(&s, "fields").await["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == http.as_str())
            .unwrap()["config"]["headers"],
        json!({"x-id": "{{ input.id }}"}),
        "a mistake is not stored"
    );
    finish(&a, &[]).await;

    // A new window shows exactly what was typed.
    let b = browser(&driver).await;
    open(&b, &s, &codes, "fields").await;
    press(&b, "f").await;
    for (node, fields) in &expected {
        select_node(&b, node).await;
        let panel = format!(".node-panel[data-node='{node}']");
        b.wait()
            .at_most(Duration::from_secs(5))
            .for_element(Locator::Css(&panel))
            .await
            .unwrap();
        for (name, control, text, value) in fields {
            let css = format!("{panel} #cfg-{name}");
            let el = b.find(Locator::Css(&css)).await.unwrap();
            match control {
                Control::Checkbox => {
                    assert_eq!(
                        json!(el.is_selected().await.unwrap()),
                        *value,
                        "{node}.{name}"
                    )
                }
                // An object or array: the same JSON (laid out afresh).
                _ if text.starts_with(['{', '[']) && !text.starts_with("{{") => {
                    let shown = c_value(&b, &css).await.unwrap_or_default();
                    assert_eq!(
                        serde_json::from_str::<Value>(&shown).ok().as_ref(),
                        Some(value),
                        "{node}.{name} ({control:?}) shows {shown:?}"
                    );
                }
                // Text, templates, numbers: exactly what was typed.
                _ => assert_eq!(
                    c_value(&b, &css).await.as_deref(),
                    Some(text.as_str()),
                    "{node}.{name} ({control:?}) is not shown as typed"
                ),
            }
        }
    }
    finish(&b, &[]).await;
}

/// Selects a node with a click on its label (on a fitted canvas of many
/// nodes the label covers the box's centre, where WebDriver clicks).
async fn select_node(c: &Client, node: &str) {
    click(c, &format!("g.node[data-node='{node}'] text.label")).await;
    c.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(&format!(".node-panel[data-node='{node}']")))
        .await
        .unwrap();
}

/// The `value` property of `css` (None while it is missing).
async fn c_value(c: &Client, css: &str) -> Option<String> {
    c.find(Locator::Css(css))
        .await
        .ok()?
        .prop("value")
        .await
        .ok()?
}

#[tokio::test]
async fn a_browser_that_is_not_signed_in_is_told_how_to_sign_in() {
    let (s, codes) = editor_server().await;
    let driver = driver().await;
    let a = browser(&driver).await;
    // A bookmark, in a browser that never signed in.
    a.goto(&format!("{}/#/w/anything", s.base)).await.unwrap();
    let page = a
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("main.sign-in"))
        .await
        .unwrap();
    let text = page.text().await.unwrap();
    assert!(text.contains("sluice open"), "{text}");
    assert_eq!(count(&a, "form.new").await, 0, "nothing that looks usable");
    assert_eq!(count(&a, "svg.surface").await, 0);
    screenshot(&a, "sign-in").await;
    // A session that ended (here: one signed with another token).
    a.execute(
        "localStorage.setItem('sluice_session', arguments[0])",
        vec![json!(format!(
            "{}.{}.{}",
            "ab".repeat(16),
            u32::MAX,
            "00".repeat(32)
        ))],
    )
    .await
    .unwrap();
    // One navigation that loads the page anew (another query): a reload
    // sent right behind a navigation raced it ("aborted by navigation").
    a.goto(&format!("{}/?session-ended", s.base)).await.unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("main.sign-in"))
        .await
        .unwrap();
    assert_eq!(count(&a, "form.new").await, 0);
    // Signing in from a link works from there.
    a.goto(&format!("{}/ui/login?code={}", s.base, codes.issue()))
        .await
        .unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("ul.workflows"))
        .await
        .unwrap();
    assert_eq!(count(&a, "main.sign-in").await, 0);
    // The page learns it is not signed in from the API's 401s, which
    // the browser logs.
    finish(&a, &["401 (Unauthorized)"]).await;
}

#[tokio::test]
async fn listen_for_a_test_call_pin_it_run_one_node_and_preview_templates() {
    let (s, codes) = editor_server().await;
    let (port, seen) = recorder().await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "piece", "nodes": [
            {"id": "start", "kind": "trigger.webhook", "position": [0, 0],
             "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
            {"id": "call", "kind": "http.request", "position": [320, 0],
             "config": {"method": "GET", "url": format!("http://127.0.0.1:{port}/orders/{{{{ input.body.id }}}}")}},
            {"id": "end", "kind": "output.end", "position": [640, 0]}],
        "edges": [{"from": "start", "to": "call"}, {"from": "call", "to": "end"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "piece").await;

    // The webhook's URLs, and a test call heard by the editor.
    click(&a, "g.node[data-node='start'] rect.box").await;
    let production = text(&a, ".webhook-url.production .url").await;
    assert!(production.ends_with("/hook/piece/orders"), "{production}");
    assert!(production.starts_with("POST http://"), "{production}");
    let test_url = text(&a, ".webhook-url.test .url").await;
    assert!(test_url.ends_with("/hook-test/piece/orders"), "{test_url}");
    click(&a, ".node-test button.listen").await;
    let started = Instant::now();
    loop {
        let r = s
            .client
            .post(format!("{}/hook-test/piece/orders?via=test", s.base))
            .json(&json!({"id": 3}))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never heard");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eventually(
        Duration::from_secs(5),
        "the call shown as the output",
        || async {
            text_of(&a, ".node-test .test-output")
                .await
                .is_some_and(|t| t.contains("via"))
        },
    )
    .await;
    // It is what Run runs on now: the trigger's message, not a guess.
    let run_input: Value = serde_json::from_str(&value_of(&a, "#run-input").await).unwrap();
    assert_eq!(run_input["body"], json!({"id": 3}));
    assert_eq!(run_input["query"], json!({"via": "test"}));
    assert!(seen.lock().unwrap().is_empty(), "a test call started a run");
    screenshot(&a, "listened").await;

    // Pinned: kept with the draft.
    click(&a, ".node-test button.pin").await;
    eventually(
        Duration::from_secs(5),
        "the pinned output stored",
        || async {
            stored(&s, "piece").await["pinned"]["start"]["out"]["body"] == json!({"id": 3})
        },
    )
    .await;

    // The next node: its URL previews on the pinned data; run it alone.
    click(&a, "g.node[data-node='call'] rect.box").await;
    eventually(Duration::from_secs(5), "the URL previewed", || async {
        text_of(&a, ".field[data-field='url'] .preview-value")
            .await
            .is_some_and(|t| t.contains(&format!("127.0.0.1:{port}/orders/3")))
    })
    .await;
    click(&a, ".node-test button.run-node").await;
    eventually(Duration::from_secs(10), "the node ran", || async {
        text_of(&a, ".node-test .test-status").await.as_deref() == Some("succeeded")
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), vec!["/orders/3".to_string()]);
    screenshot(&a, "run-this-node").await;
    // A key of its output copies the template that reads it.
    click(
        &a,
        ".node-test .test-output button.key[data-path='{{ nodes.call.status }}']",
    )
    .await;
    eventually(Duration::from_secs(5), "the path copied", || async {
        text_of(&a, ".node-test .test-output .copied")
            .await
            .is_some_and(|t| t.contains("{{ nodes.call.status }}"))
    })
    .await;

    // A reference to something the data does not have is marked.
    let url_field = a
        .find(Locator::Css(".node-panel[data-node='call'] #cfg-url"))
        .await
        .unwrap();
    url_field.click().await.unwrap();
    url_field.send_keys(END).await.unwrap();
    url_field
        .send_keys("?x={{ input.body.nope }}")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the missing path marked",
        || async {
            text_of(&a, ".field[data-field='url'] .undefined")
                .await
                .is_some_and(|t| t.contains("input.body.nope"))
        },
    )
    .await;
    screenshot(&a, "preview-undefined").await;
    finish(&a, &[]).await;
}

/// Two engines, each a peer with its own editor: Ada shares from the
/// Share panel, Bob joins by pasting the ticket, Bob's edit shows in Ada's
/// editor within a second, and Ada reviews it and publishes it.
#[tokio::test]
async fn share_join_and_edit_live_across_two_engines() {
    let (s1, codes1) = editor_peer(Some("Ada")).await;
    let (s2, codes2) = editor_peer(Some("Bob")).await;
    s1.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "e2e", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "end", "kind": "output.end", "position": [320, 0]}],
        "edges": [{"from": "start", "to": "end"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    let b = browser(&driver).await;
    open(&a, &s1, &codes1, "e2e").await;

    // Ada: Share → a ticket.
    click(&a, ".share-toggle").await;
    click(&a, ".create-share").await;
    // The first share starts this engine's peer endpoint: generous, as the
    // whole suite runs at once on CI's two cores.
    let ticket_box = a
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("#share-ticket"))
        .await
        .unwrap();
    let ticket = ticket_box.prop("value").await.unwrap().unwrap();
    assert!(ticket.starts_with("sluice"), "{ticket}");
    screenshot(&a, "share").await;

    // Bob: the workflow list, Join with the ticket.
    b.goto(&format!("{}/ui/login?code={}", s2.base, codes2.issue()))
        .await
        .unwrap();
    b.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("ul.workflows"))
        .await
        .unwrap();
    b.find(Locator::Css("#join-ticket"))
        .await
        .unwrap()
        .send_keys(&ticket)
        .await
        .unwrap();
    click(&b, ".join-button").await;
    b.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("g.node[data-node='end']"))
        .await
        .unwrap();
    let state = b
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(
            ".share-panel .peer-link[data-state='connected']",
        ))
        .await
        .unwrap();
    assert!(state.text().await.unwrap().contains("Joined from Ada"));
    // Ada's panel lists Bob, connected.
    a.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(".peers .peer[data-connected='true']"))
        .await
        .unwrap();

    // Bob moves a node: Ada's editor shows it within a second.
    let before = a
        .find(Locator::Css("g.node[data-node='end']"))
        .await
        .unwrap()
        .attr("transform")
        .await
        .unwrap();
    drag_by(&b, "g.node[data-node='end'] rect.box", 120.0, 140.0).await;
    let moved_at = Instant::now();
    eventually(
        Duration::from_secs(1),
        "Bob's move in Ada's editor",
        || async {
            a.find(Locator::Css("g.node[data-node='end']"))
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
        "Ada's editor showed Bob's move after {:?}",
        moved_at.elapsed()
    );

    // Ada is told, reviews and publishes.
    let banner = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".peer-review"))
        .await
        .unwrap();
    assert!(banner.text().await.unwrap().contains("from Bob"));
    click(&a, ".review-button").await;
    let change = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(
            ".review-node[data-node='end'] .review-field[data-path='position']",
        ))
        .await
        .unwrap();
    assert!(change.text().await.unwrap().contains("→"));
    screenshot(&a, "peer-review").await;
    click(&a, ".publish-button").await;
    eventually(
        Duration::from_secs(5),
        "published on Ada's engine",
        || async {
            let state: Value = s1
                .api(reqwest::Method::GET, "/workflows/e2e/publish")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            state["draft_version"] == state["published_version"]
                && state.get("from_peers").is_none()
        },
    )
    .await;
    // What runs on Bob's machine is untouched: nothing is published there.
    let state: Value = s2
        .api(reqwest::Method::GET, "/workflows/e2e/publish")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["published"], false);
    finish(&a, &[]).await;
    finish(&b, &[]).await;
}

/// A viewer's editor shows the sharer's edits live and makes none of its
/// own: a drag is refused on the spot, visibly.
#[tokio::test]
async fn a_viewers_editor_follows_the_sharer_and_refuses_edits() {
    let (s1, _codes1) = editor_peer(Some("Ada")).await;
    let (s2, codes2) = editor_peer(Some("Vic")).await;
    s1.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "e2e", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "end", "kind": "output.end", "position": [320, 0]}],
        "edges": [{"from": "start", "to": "end"}]
    }))
    .await;
    let share: Value = s1
        .api(reqwest::Method::POST, "/workflows/e2e/shares")
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let joined = s2
        .api(reqwest::Method::POST, "/peers/join")
        .json(&json!({"ticket": share["ticket"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(joined.status(), 201);
    let driver = driver().await;
    let v = browser(&driver).await;
    open(&v, &s2, &codes2, "e2e").await;
    v.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(
            ".share-panel .peer-link[data-state='connected']",
        ))
        .await
        .unwrap();
    drag_by(&v, "g.node[data-node='end'] rect.box", 120.0, 140.0).await;
    screenshot(&v, "viewer").await;
    let refused = v
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".refused"))
        .await
        .unwrap();
    assert!(refused.text().await.unwrap().contains("as a viewer"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        stored(&s1, "e2e").await["nodes"][1]["position"],
        json!([320.0, 0.0])
    );
    // Ada's edit shows in the viewer's editor.
    let before = v
        .find(Locator::Css("g.node[data-node='end']"))
        .await
        .unwrap()
        .attr("transform")
        .await
        .unwrap();
    let mut wf = stored(&s1, "e2e").await;
    wf["nodes"][1]["position"] = json!([640, 200]);
    let r = s1
        .api(reqwest::Method::PUT, "/workflows/e2e")
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    eventually(
        Duration::from_secs(2),
        "Ada's move in the viewer's editor",
        || async {
            v.find(Locator::Css("g.node[data-node='end']"))
                .await
                .unwrap()
                .attr("transform")
                .await
                .unwrap()
                != before
        },
    )
    .await;
    finish(&v, &[]).await;
}

/// With a shared worker configured, the publish panel says where the
/// workflow's schedules and webhooks run and offers Deploy; a worker that
/// does not answer is said in the panel, naming its address.
#[tokio::test(flavor = "multi_thread")]
async fn the_publish_panel_offers_deploy_and_says_when_the_worker_does_not_answer() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ingress = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (s, codes) = editor_with_worker(ingress.clone()).await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "nightly", "nodes": [
            {"id": "start", "kind": "trigger.schedule", "position": [0, 0], "config": {"cron": "0 0 2 * * *"}},
            {"id": "end", "kind": "output.end", "position": [320, 0]}],
        "edges": [{"from": "start", "to": "end"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "nightly").await;
    eventually(
        Duration::from_secs(10),
        "the deploy part of the panel",
        || async { attr(&a, ".deploy", "data-state").await.as_deref() == Some("local") },
    )
    .await;
    assert!(
        text(&a, ".deploy-status")
            .await
            .contains("run on this machine"),
        "{}",
        text(&a, ".deploy-status").await
    );
    click(&a, ".deploy-button").await;
    eventually(
        Duration::from_secs(15),
        "the worker's failure in the panel",
        || async {
            text_of(&a, ".publish-error")
                .await
                .is_some_and(|t| t.contains("did not answer") && t.contains(&ingress))
        },
    )
    .await;
    screenshot(&a, "deploy-unreachable").await;
    assert_eq!(
        attr(&a, ".deploy", "data-state").await.as_deref(),
        Some("local")
    );
    // The deploy the test makes fail on purpose.
    finish(&a, &["502 (Bad Gateway)"]).await;
}

#[tokio::test]
async fn a_run_waits_at_an_approval_in_the_run_view_and_approve_resumes_it() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({
        "format": "sluice.workflow/v1", "id": "ship", "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
            {"id": "approve", "kind": "flow.approval", "config": {"message": "Ship order {{ input.order }}?"}, "position": [320, 0]},
            {"id": "yes", "kind": "output.end", "position": [640, 0]},
            {"id": "no", "kind": "output.end", "position": [640, 200]}],
        "edges": [{"from": "start", "to": "approve"}, {"from": "approve:approved", "to": "yes"},
            {"from": "approve:rejected", "to": "no"}]
    }))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "ship").await;
    let input = a.find(Locator::Css("#run-input")).await.unwrap();
    input.click().await.unwrap();
    key_chord(&a, CONTROL, "a").await;
    input.send_keys(r#"{"order": 42}"#).await.unwrap();
    click(&a, ".run-button").await;
    // Parked: the run view says so, with the question and the buttons.
    eventually(Duration::from_secs(10), "the run to wait", || async {
        text_of(&a, ".run-status").await.as_deref() == Some("waiting")
    })
    .await;
    eventually(Duration::from_secs(10), "the approval shown", || async {
        text_of(&a, ".approval[data-node='approve'] .approval-message")
            .await
            .as_deref()
            == Some("Ship order 42?")
    })
    .await;
    eventually(
        Duration::from_secs(5),
        "the node marked waiting",
        || async {
            class_of(&a, "g.node[data-node='approve']")
                .await
                .contains("run-waiting")
        },
    )
    .await;
    screenshot(&a, "approval-waiting").await;
    let comment = a.find(Locator::Css(".approval-comment")).await.unwrap();
    comment.send_keys("looks right").await.unwrap();
    click(&a, ".approval[data-node='approve'] button.approve").await;
    eventually(Duration::from_secs(10), "the run to finish", || async {
        text_of(&a, ".run-status").await.as_deref() == Some("succeeded")
    })
    .await;
    let output: Value = serde_json::from_str(&text(&a, ".run-output").await).unwrap();
    assert_eq!(
        output,
        json!({"yes": {"decision": "approved", "by": "editor", "comment": "looks right"}})
    );
    assert_eq!(count(&a, ".approval").await, 0);
    finish(&a, &[]).await;
}

/// The built editor has a favicon (a browser asks for one on every load;
/// a missing one is a console error each time).
#[tokio::test]
async fn the_editor_page_names_its_favicon_and_it_is_served() {
    let (s, _) = editor_server().await;
    let page = s
        .client
        .get(format!("{}/", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(r#"<link rel="icon" type="image/png" href="/favicon.png">"#),
        "{page}"
    );
    let r = s
        .client
        .get(format!("{}/favicon.png", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "image/png");
    let bytes = r.bytes().await.unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
}

/// Types `text` into `css` after deleting what it holds.
/// Replaces the webhook path of `live`'s `start` (Ctrl+A, then `keys`;
/// a lone Backspace empties it) until the draft has it. The field is found
/// afresh on each try: under CI's load the panel was once drawn again
/// between finding the field and typing in it (a stale element).
async fn type_over(c: &Client, s: &common::Server, keys: &str) {
    let want = if keys == "\u{E003}" { "" } else { keys };
    eventually(
        Duration::from_secs(10),
        "the path typed into the draft",
        || async {
            if let Ok(path) = c
                .find(Locator::Css(".node-panel[data-node='start'] #cfg-path"))
                .await
                && path.click().await.is_ok()
            {
                key_chord(c, CONTROL, "a").await;
                path.send_keys(keys).await.ok();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            stored(s, "live").await["nodes"][0]["config"]["path"] == want
        },
    )
    .await;
}

async fn retype(c: &Client, css: &str, text: &str) {
    let el = c.find(Locator::Css(css)).await.unwrap();
    el.click().await.unwrap();
    let held = el.prop("value").await.unwrap().unwrap_or_default();
    // End, then one backspace per character held.
    let mut keys = "\u{E010}".to_string();
    keys.push_str(&"\u{E003}".repeat(held.chars().count()));
    keys.push_str(text);
    el.send_keys(&keys).await.unwrap();
}

/// The `data-kind` of the palette's entries, in order.
async fn palette_kinds(c: &Client) -> Vec<String> {
    let mut kinds = Vec::new();
    for b in c
        .find_all(Locator::Css(".palette button.kind"))
        .await
        .unwrap()
    {
        if let Ok(Some(k)) = b.attr("data-kind").await {
            kinds.push(k);
        }
    }
    kinds
}

#[tokio::test]
async fn kinds_have_names_and_icons_are_found_by_synonym_and_description_and_settings_have_a_tab() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "looks", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "call", "kind": "http.request", "config": {"url": "http://127.0.0.1:9/x"}, "position": [300, 0]}],
        "edges": [{"from": "start", "to": "call"}]}))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "looks").await;

    // Nodes and palette entries read as names, each with its icon.
    assert_eq!(
        text(&a, "g.node[data-node='call'] text.kind").await,
        "HTTP request"
    );
    assert_eq!(
        attr(&a, "g.node[data-node='call'] use.icon", "href")
            .await
            .as_deref(),
        Some("#icon-http.request")
    );
    assert!(count(&a, "symbol#icon-http\\.request path").await >= 1);
    assert_eq!(
        text(&a, ".palette button.kind[data-kind='flow.if'] .kind-title").await,
        "Condition"
    );
    assert_eq!(
        count(&a, ".palette button.kind svg.icon").await,
        sluice_model::catalog().len()
    );

    // Search by synonym, by description, and a miss with a suggestion.
    for (query, first) in [
        ("if", "flow.if"),
        ("api", "http.request"),
        ("cron", "trigger.schedule"),
    ] {
        retype(&a, ".palette-search", query).await;
        eventually(
            Duration::from_secs(3),
            &format!("`{query}` finds {first} first"),
            || async { palette_kinds(&a).await.first().map(String::as_str) == Some(first) },
        )
        .await;
    }
    retype(&a, ".palette-search", "one-time link").await;
    eventually(
        Duration::from_secs(3),
        "a search by description",
        || async { palette_kinds(&a).await == ["flow.approval"] },
    )
    .await;
    // Typed fast through a miss: no key is lost (the box keeps its focus).
    retype(&a, ".palette-search", "zzzzzzzz").await;
    eventually(
        Duration::from_secs(3),
        "every key typed through a miss kept",
        || async { value_of(&a, ".palette-search").await == "zzzzzzzz" },
    )
    .await;
    retype(&a, ".palette-search", "shedule").await;
    eventually(Duration::from_secs(3), "a miss says so", || async {
        text_of(&a, ".palette .no-match").await.is_some_and(|t| {
            t.contains("No node matches “shedule”") && t.contains("Did you mean Schedule?")
        })
    })
    .await;
    assert!(palette_kinds(&a).await.is_empty());
    click(&a, ".palette .no-match .suggestion").await;
    eventually(
        Duration::from_secs(3),
        "the suggestion searched",
        || async {
            palette_kinds(&a).await.first().map(String::as_str) == Some("trigger.schedule")
        },
    )
    .await;
    screenshot(&a, "palette-suggestion").await;
    doc_screenshots(&a, "palette").await;

    // Field labels and help are written for people.
    select_node(&a, "call").await;
    assert_eq!(
        text(&a, ".node-panel label[for='cfg-fail_on_status']").await,
        "Fail on status"
    );
    assert_eq!(text(&a, ".node-panel .node-title").await, "call");
    let helps = a.find_all(Locator::Css(".node-panel .help")).await.unwrap();
    assert!(!helps.is_empty());
    for h in helps {
        let t = h.text().await.unwrap();
        assert!(!t.contains('`'), "raw Markdown in help: {t}");
    }
    assert!(count(&a, ".node-panel .summary code").await >= 1);

    // The settings tab: retries, failures, time limit, notes, switched off.
    click(&a, "#tab-settings").await;
    retype(&a, "#node-retry-attempts", "4").await;
    retype(&a, "#node-retry-backoff", "50").await;
    choose(&a, "#node-on-error", "route").await;
    retype(&a, "#node-timeout", "1500").await;
    retype(&a, "#node-notes", "Ask **Ana** first").await;
    click(&a, "#node-disabled").await;
    eventually(Duration::from_secs(5), "the settings stored", || async {
        let wf = stored(&s, "looks").await;
        let call = wf["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == "call")
            .cloned()
            .unwrap();
        call["retry"] == json!({"max_attempts": 4, "backoff_ms": 50})
            && call["on_error"] == "route"
            && call["timeout_ms"] == 1500
            && call["notes"] == "Ask **Ana** first"
            && call["disabled"] == true
    })
    .await;
    assert_eq!(text(&a, ".notes-preview strong").await, "Ana");
    eventually(
        Duration::from_secs(3),
        "the node drawn switched off",
        || async {
            class_of(&a, "g.node[data-node='call']")
                .await
                .contains("disabled")
        },
    )
    .await;
    screenshot(&a, "node-settings").await;
    doc_screenshots(&a, "node-settings").await;
    // Back to the parameters: the config is still there.
    click(&a, "#tab-parameters").await;
    assert_eq!(value_of(&a, "#cfg-url").await, "http://127.0.0.1:9/x");
    finish(&a, &[]).await;
}

/// The accessibility audit: axe-core (`SLUICE_AXE`, its `axe.min.js`,
/// installed by `cargo xtask test`) run in the page against WCAG 2.1 A and
/// AA. Returns the serious and critical violations, and prints the rest.
async fn audit(c: &Client, what: &str) -> Vec<String> {
    let path = std::env::var("SLUICE_AXE").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR")
            .unwrap_or_else(|_| format!("{}/../../target", env!("CARGO_MANIFEST_DIR")));
        format!("{target}/axe-core/node_modules/axe-core/axe.min.js")
    });
    let axe = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("axe-core at {path} (`cargo xtask test` installs it; or set SLUICE_AXE): {e}")
    });
    c.execute(&format!("{axe}\nreturn typeof axe;"), vec![])
        .await
        .unwrap();
    let found = c
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
               axe.run(document, {resultTypes: ["violations"],
                                  runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}})
                 .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                     nodes: v.nodes.slice(0, 4).map(n => n.target.join(" ") + " " + (n.failureSummary || "").replace(/\s+/g, " "))}))))
                 .catch(e => done([{id: "axe-failed", impact: "critical", help: String(e), nodes: []}]));"#,
            vec![],
        )
        .await
        .unwrap();
    let mut serious = Vec::new();
    for v in found.as_array().cloned().unwrap_or_default() {
        let line = format!(
            "{what}: {} ({}): {} at {}",
            v["id"], v["impact"], v["help"], v["nodes"]
        );
        if matches!(v["impact"].as_str(), Some("serious" | "critical")) {
            serious.push(line);
        } else {
            eprintln!("accessibility (minor): {line}");
        }
    }
    serious
}

#[tokio::test]
async fn the_editor_passes_an_accessibility_audit_in_light_and_dark_and_lists_its_shortcuts() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "audit", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "check", "kind": "flow.if", "config": {"condition": "{{ input.n > 1 }}"}, "position": [300, 0]},
        {"id": "call", "kind": "http.request", "config": {"url": "http://127.0.0.1:9/x"}, "position": [600, 0]}],
        "edges": [{"from": "start", "to": "check"}, {"from": "check:true", "to": "call"}]}))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "audit").await;
    let mut serious = Vec::new();
    select_node(&a, "call").await;
    serious.extend(audit(&a, "editor, a node selected").await);
    click(&a, "#tab-settings").await;
    serious.extend(audit(&a, "editor, node settings").await);

    // `?` lists every shortcut; Escape closes it.
    click(&a, "svg.surface").await;
    press(&a, "?").await;
    eventually(Duration::from_secs(3), "the shortcuts shown", || async {
        text_of(&a, ".shortcuts").await.is_some_and(|t| {
            t.contains("Keyboard shortcuts") && t.contains("Run the draft") && t.contains("Undo")
        })
    })
    .await;
    serious.extend(audit(&a, "editor, shortcuts").await);
    screenshot(&a, "shortcuts").await;
    press(&a, "\u{E00C}").await;
    eventually(Duration::from_secs(3), "the shortcuts closed", || async {
        count(&a, ".shortcuts").await == 0
    })
    .await;

    // Dark: chosen in the header (System → Light → Dark), kept across a reload.
    assert_eq!(
        attr(&a, ".theme-toggle", "data-theme-choice")
            .await
            .as_deref(),
        Some("system")
    );
    click(&a, ".theme-toggle").await;
    click(&a, ".theme-toggle").await;
    eventually(Duration::from_secs(3), "the dark theme", || async {
        attr(&a, "html", "data-theme").await.as_deref() == Some("dark")
    })
    .await;
    a.refresh().await.unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("g.node[data-node='start']"))
        .await
        .unwrap();
    assert_eq!(
        attr(&a, "html", "data-theme").await.as_deref(),
        Some("dark")
    );
    assert_eq!(
        attr(&a, ".theme-toggle", "data-theme-choice")
            .await
            .as_deref(),
        Some("dark")
    );
    select_node(&a, "call").await;
    serious.extend(audit(&a, "editor, dark").await);
    screenshot(&a, "dark").await;
    click(&a, ".back").await;
    a.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("ul.workflows"))
        .await
        .unwrap();
    serious.extend(audit(&a, "workflow list, dark").await);
    click(&a, ".theme-toggle").await;
    eventually(
        Duration::from_secs(3),
        "back to the system's theme",
        || async {
            attr(&a, ".theme-toggle", "data-theme-choice")
                .await
                .as_deref()
                == Some("system")
        },
    )
    .await;
    serious.extend(audit(&a, "workflow list, light").await);
    click(&a, "a.runs-link").await;
    a.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(".runs-table"))
        .await
        .unwrap();
    serious.extend(audit(&a, "runs page").await);
    finish(&a, &[]).await;
    assert!(
        serious.is_empty(),
        "serious accessibility violations:\n{}",
        serious.join("\n")
    );
}

#[tokio::test]
async fn a_new_install_welcomes_with_templates_that_open_run_and_show_in_the_list() {
    let (s, codes) = editor_server().await;
    let driver = driver().await;
    let a = browser(&driver).await;
    a.goto(&format!("{}/ui/login?code={}", s.base, codes.issue()))
        .await
        .unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(".welcome"))
        .await
        .unwrap();
    assert_eq!(text(&a, ".welcome h2").await, "Welcome to Sluice");
    assert_eq!(count(&a, ".welcome button.template").await, 6);
    assert!(count(&a, ".welcome button.template svg.icon").await >= 6);
    screenshot(&a, "welcome").await;
    doc_screenshots(&a, "welcome").await;

    // A template opens as a new workflow (a draft), and runs.
    click(&a, "button.template[data-template='answer-a-webhook']").await;
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("g.node[data-node='hook']"))
        .await
        .unwrap();
    assert!(
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/w/answer-a-webhook")
    );
    let input = a.find(Locator::Css("#run-input")).await.unwrap();
    input.click().await.unwrap();
    key_chord(&a, CONTROL, "a").await;
    input
        .send_keys(r#"{"method": "POST", "body": {"name": "Ana"}}"#)
        .await
        .unwrap();
    click(&a, ".run-button").await;
    eventually(
        Duration::from_secs(10),
        "the template's run succeeded",
        || async { text_of(&a, ".run-status").await.as_deref() == Some("succeeded") },
    )
    .await;
    assert!(text(&a, ".run-output").await.contains("Hello Ana!"));
    let wf = stored(&s, "answer-a-webhook").await;
    assert_eq!(wf["name"], "Answer a webhook");

    // The same template again: a second workflow, never the first replaced.
    click(&a, ".back").await;
    a.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("li.workflow-row[data-id='answer-a-webhook']"))
        .await
        .unwrap();
    // The list: the last run's status, and who is editing (nobody now).
    eventually(
        Duration::from_secs(5),
        "the last run in the list",
        || async {
            text_of(&a, "li.workflow-row[data-id='answer-a-webhook'] .last-run")
                .await
                .is_some_and(|t| t.starts_with("succeeded") && t.contains("just now"))
        },
    )
    .await;
    assert_eq!(
        count(&a, ".welcome").await,
        0,
        "no welcome once there is a workflow"
    );
    click(&a, ".more-templates summary").await;
    click(
        &a,
        ".more-templates button.template[data-template='answer-a-webhook']",
    )
    .await;
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("g.node[data-node='hook']"))
        .await
        .unwrap();
    assert!(
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/w/answer-a-webhook-2")
    );
    assert_eq!(
        stored(&s, "answer-a-webhook").await["name"],
        "Answer a webhook"
    );
    finish(&a, &[]).await;
}

#[tokio::test]
async fn the_runs_page_lists_every_workflows_runs_filters_them_by_url_and_stays_live() {
    let (s, codes) = editor_server().await;
    for (id, step) in [
        (
            "alpha",
            json!({"id": "check", "kind": "data.transform", "config": {"jq": "if .ok then . else error(\"bad input\") end"}}),
        ),
        (
            "beta",
            json!({"id": "check", "kind": "data.set", "config": {"values": {"seen": true}}}),
        ),
    ] {
        s.put_workflow(json!({"format": "sluice.workflow/v1", "id": id, "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0, 0]}, step],
            "edges": [{"from": "start", "to": "check"}]}))
            .await;
    }
    let run = |wf: &'static str, input: Value| {
        let req = s
            .api(reqwest::Method::POST, &format!("/workflows/{wf}/runs"))
            .json(&json!({"input": input, "wait": true}));
        async move {
            let r = req.send().await.unwrap();
            common::json_of(r).await["id"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    run("alpha", json!({"ok": true, "order": "A-17"})).await;
    run("alpha", json!({"ok": false})).await;
    let beta_run = run("beta", json!({})).await;
    assert!(!beta_run.is_empty());

    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "alpha").await;
    click(&a, ".back").await;
    click(&a, "a.runs-link").await;
    eventually(Duration::from_secs(10), "three runs listed", || async {
        count(&a, "tr.runs-row").await == 3
            && text_of(&a, ".runs-count").await.as_deref() == Some("3 runs")
    })
    .await;
    assert!(text(&a, ".runs-table").await.contains("published"));

    // A filter moves the URL and the list.
    choose(&a, "#runs-status", "failed").await;
    eventually(Duration::from_secs(5), "the failed run only", || async {
        count(&a, "tr.runs-row").await == 1
    })
    .await;
    assert!(
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/runs?status=failed")
    );
    assert!(
        text(&a, "tr.runs-row .run-error")
            .await
            .contains("bad input")
    );
    click(&a, ".clear-filters").await;
    retype(&a, "#runs-text", "a-17").await;
    click(&a, ".runs-search").await;
    eventually(
        Duration::from_secs(5),
        "found by text in its input",
        || async { count(&a, "tr.runs-row").await == 1 },
    )
    .await;
    assert!(
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/runs?text=a-17")
    );
    click(&a, ".clear-filters").await;

    // Live: a run started elsewhere shows up without a reload.
    eventually(Duration::from_secs(5), "the filters cleared", || async {
        count(&a, "tr.runs-row").await == 3
    })
    .await;
    run("beta", json!({})).await;
    eventually(
        Duration::from_secs(10),
        "the new run counted live",
        || async { text_of(&a, ".runs-count").await.as_deref() == Some("4 runs") },
    )
    .await;
    screenshot(&a, "runs").await;
    doc_screenshots(&a, "runs").await;

    // A link opens the page filtered, and a run opens in its workflow.
    a.goto(&format!("{}/#/runs?workflow=beta", s.base))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "beta's runs only", || async {
        count(&a, "tr.runs-row").await == 2
    })
    .await;
    assert_eq!(value_of(&a, "#runs-workflow").await, "beta");
    click(&a, &format!("tr.runs-row[data-run='{beta_run}'] .open-run")).await;
    a.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(".run-banner"))
        .await
        .unwrap();
    assert!(
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with(&format!("#/w/beta/r/{beta_run}"))
    );
    finish(&a, &[]).await;
}

/// The stored workflow's node `id`.
async fn stored_node(s: &common::Server, wf: &str, id: &str) -> Option<Value> {
    stored(s, wf).await["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"] == id)
        .cloned()
}

/// The stored workflow's edges as `from[:port] → to`.
async fn stored_edges(s: &common::Server, wf: &str) -> Vec<String> {
    stored(s, wf).await["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} → {}",
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn right_click_menus_the_plus_on_a_port_and_keyboard_only_adding_and_connecting() {
    let (s, codes) = editor_server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "habits", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "first", "kind": "data.set", "config": {"values": {"a": 1}}, "position": [300, 0]}],
        "edges": [{"from": "start", "to": "first"}]}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "habits").await;
    let right_click = |css: &'static str| {
        let a = a.clone();
        async move {
            let el = a.find(Locator::Css(css)).await.unwrap();
            a.execute(
                "arguments[0].dispatchEvent(new MouseEvent('contextmenu', {bubbles: true, cancelable: true, \
                 clientX: arguments[0].getBoundingClientRect().x + 20, clientY: arguments[0].getBoundingClientRect().y + 20}));",
                vec![serde_json::to_value(&el).unwrap()],
            )
            .await
            .unwrap();
        }
    };

    // On a node: switch it off.
    right_click("g.node[data-node='first'] rect.box").await;
    eventually(Duration::from_secs(3), "the node's menu", || async {
        text_of(&a, ".context-menu").await.is_some_and(|t| {
            t.contains("Settings")
                && t.contains("Duplicate")
                && t.contains("Switch off")
                && t.contains("Delete")
        })
    })
    .await;
    screenshot(&a, "context-menu").await;
    click(&a, ".context-menu button[data-item='Switch off']").await;
    eventually(Duration::from_secs(5), "switched off", || async {
        stored_node(&s, "habits", "first")
            .await
            .is_some_and(|n| n["disabled"] == true)
    })
    .await;
    assert_eq!(count(&a, ".context-menu").await, 0, "the menu closes");

    // On the connection: delete it.
    right_click("path.edge[data-edge='0']").await;
    click(&a, ".context-menu button[data-item='Delete connection']").await;
    eventually(Duration::from_secs(5), "the connection deleted", || async {
        stored_edges(&s, "habits").await.is_empty()
    })
    .await;

    // On the canvas: add a node there.
    right_click("svg.surface rect.grid").await;
    click(&a, ".context-menu button[data-item='Add a node here']").await;
    let quick = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".quick-add input"))
        .await
        .unwrap();
    quick.send_keys("wait\u{E007}").await.unwrap();
    eventually(
        Duration::from_secs(5),
        "the node added from the menu",
        || async { nodes_of_kind(&s, "habits", "flow.wait").await.len() == 1 },
    )
    .await;

    // The "+" on a port (of the selected node): the node picked follows it.
    select_node(&a, "start").await;
    click(&a, "g.node[data-node='start'] .port-add[data-add='out']").await;
    let quick = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".quick-add input"))
        .await
        .unwrap();
    assert!(
        quick
            .attr("placeholder")
            .await
            .unwrap()
            .unwrap_or_default()
            .contains("Add after start"),
    );
    quick.send_keys("log\u{E007}").await.unwrap();
    eventually(
        Duration::from_secs(5),
        "added after start, connected",
        || async {
            let logs = nodes_of_kind(&s, "habits", "util.log").await;
            logs.len() == 1 && stored_edges(&s, "habits").await == [format!("start → {}", logs[0])]
        },
    )
    .await;
    let log = nodes_of_kind(&s, "habits", "util.log").await.remove(0);

    // Keyboard only: `/`, a name, Enter adds a node; its panel connects it.
    click(&a, "svg.surface rect.grid").await;
    press(&a, "/").await;
    a.active_element()
        .await
        .unwrap()
        .send_keys("respond\u{E007}")
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "added by keyboard", || async {
        nodes_of_kind(&s, "habits", "output.respond").await.len() == 1
    })
    .await;
    let reply = nodes_of_kind(&s, "habits", "output.respond")
        .await
        .remove(0);
    a.execute("document.querySelector('.connect-open').focus();", vec![])
        .await
        .unwrap();
    press(&a, "\u{E007}").await;
    let from = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(&format!(
            ".node-panel[data-node='{reply}'] #connect-from"
        )))
        .await
        .unwrap();
    // Typed into the focused select, as a keyboard user picks an option.
    from.send_keys(&log).await.unwrap();
    eventually(Duration::from_secs(3), "the source picked", || async {
        value_of(&a, "#connect-from").await == format!("{log}:out")
    })
    .await;
    a.execute("document.querySelector('.connect-in').focus();", vec![])
        .await
        .unwrap();
    press(&a, "\u{E007}").await;
    eventually(Duration::from_secs(5), "connected by keyboard", || async {
        stored_edges(&s, "habits")
            .await
            .contains(&format!("{log} → {reply}"))
    })
    .await;

    // Tidy up from the canvas menu: columns by depth.
    right_click("svg.surface rect.grid").await;
    click(&a, ".context-menu button[data-item='Tidy up']").await;
    eventually(Duration::from_secs(5), "tidied", || async {
        let x = |id: String| {
            let s = &s;
            async move {
                stored_node(s, "habits", &id).await.unwrap()["position"][0]
                    .as_f64()
                    .unwrap()
            }
        };
        let (start, l, r) = (
            x("start".into()).await,
            x(log.clone()).await,
            x(reply.clone()).await,
        );
        l == start + 280.0 && r == start + 560.0
    })
    .await;
    // Two nodes selected: align their tops.
    select_node(&a, "first").await;
    let wait_node = nodes_of_kind(&s, "habits", "flow.wait").await.remove(0);
    // Shift+Enter on a focused node adds it to the selection.
    a.execute(
        "document.querySelector(arguments[0]).focus();",
        vec![json!(format!("g.node[data-node='{wait_node}']"))],
    )
    .await
    .unwrap();
    {
        use fantoccini::actions::{KeyAction, KeyActions};
        a.perform_actions(
            KeyActions::new("keys".into())
                .then(KeyAction::Down { value: '\u{E008}' })
                .then(KeyAction::Down { value: '\u{E007}' })
                .then(KeyAction::Up { value: '\u{E007}' })
                .then(KeyAction::Up { value: '\u{E008}' }),
        )
        .await
        .unwrap();
    }
    eventually(Duration::from_secs(3), "two selected", || async {
        count(&a, "g.node.selected").await == 2
    })
    .await;
    right_click("g.node[data-node='first'] rect.box").await;
    click(&a, ".context-menu button[data-item='Align top']").await;
    eventually(Duration::from_secs(5), "aligned tops", || async {
        let y = |id: &str| {
            let (s, id) = (&s, id.to_string());
            async move { stored_node(s, "habits", &id).await.unwrap()["position"][1].as_f64() }
        };
        y("first").await == y(&wait_node).await
    })
    .await;

    // A node reached by Tab: Enter selects it; arrows move it.
    a.execute(
        "document.querySelector(\"g.node[data-node='first']\").focus();",
        vec![],
    )
    .await
    .unwrap();
    press(&a, "\u{E007}").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-panel[data-node='first']"))
        .await
        .unwrap();
    let before = stored_node(&s, "habits", "first").await.unwrap()["position"].clone();
    a.execute(
        "document.querySelector(\"g.node[data-node='first']\").focus();",
        vec![],
    )
    .await
    .unwrap();
    press(&a, "\u{E014}").await; // ArrowRight
    eventually(
        Duration::from_secs(5),
        "moved right by the arrow key",
        || async {
            stored_node(&s, "habits", "first").await.unwrap()["position"][0].as_f64()
                == before[0].as_f64().map(|x| x + 20.0)
        },
    )
    .await;
    finish(&a, &[]).await;
}

/// The box of `css`: (x, y, width, height).
async fn rect_of(c: &Client, css: &str) -> (f64, f64, f64, f64) {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .rectangle()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_layout_keeps_palette_canvas_and_inspector_side_by_side_from_1000_to_2560_wide_and_stacks_them_when_narrow()
 {
    let (s, codes) = editor_server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "sizes", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]}], "edges": []}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "sizes").await;
    for (w, h) in [(1000u32, 700u32), (1280, 720), (1920, 1080), (2560, 1440)] {
        a.set_window_size(w, h).await.unwrap();
        eventually(
            Duration::from_secs(10),
            &format!("the layout at {w}×{h}"),
            || async {
                // The viewport is the window less its frame, read from the
                // page on every look: the resize may not have reached it yet.
                let (iw, ih) = viewport(&a).await;
                let palette = rect_of(&a, "aside.palette").await;
                let canvas = rect_of(&a, ".canvas").await;
                let inspector = rect_of(&a, "aside.inspector").await;
                // Side by side, in order, nothing over another, all inside the
                // window, and the canvas keeps most of the room.
                palette.0 >= 0.0
                    && palette.0 + palette.2 <= canvas.0 + 0.5
                    && canvas.0 + canvas.2 <= inspector.0 + 0.5
                    && inspector.0 + inspector.2 <= iw + 0.5
                    && canvas.2 >= 0.45 * iw
                    && canvas.3 >= ih - 120.0
                    && palette.2 >= 120.0
                    && inspector.2 >= 220.0
            },
        )
        .await;
        // No banner covers a side panel: the status sits inside the canvas.
        let status = rect_of(&a, ".status").await;
        let canvas = rect_of(&a, ".canvas").await;
        assert!(
            status.0 >= canvas.0 && status.0 + status.2 <= canvas.0 + canvas.2 + 0.5,
            "the status bar leaves the canvas at {w}×{h}"
        );
    }
    // Narrower: stacked, palette over canvas over panel, full width, in
    // the window, the canvas keeping the most height.
    a.set_window_size(700, 900).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the stacked layout at 700 wide",
        || async {
            let (iw, ih) = viewport(&a).await;
            let palette = rect_of(&a, "aside.palette").await;
            let canvas = rect_of(&a, ".canvas").await;
            let inspector = rect_of(&a, "aside.inspector").await;
            palette.1 + palette.3 <= canvas.1 + 0.5
                && canvas.1 + canvas.3 <= inspector.1 + 0.5
                && inspector.1 + inspector.3 <= ih + 0.5
                && [palette, canvas, inspector]
                    .iter()
                    .all(|r| r.0 >= 0.0 && r.0 + r.2 <= iw + 0.5 && r.2 >= iw - 2.0)
                && canvas.3 >= 0.35 * ih
                && canvas.3 >= inspector.3
        },
    )
    .await;
    screenshot(&a, "narrow").await;
    a.set_window_size(1400, 900).await.unwrap();
    finish(&a, &[]).await;
}

/// The page's viewport: `innerWidth`, `innerHeight`.
async fn viewport(c: &Client) -> (f64, f64) {
    let inner = c
        .execute("return [innerWidth, innerHeight];", vec![])
        .await
        .unwrap();
    (inner[0].as_f64().unwrap(), inner[1].as_f64().unwrap())
}

/// An API on loopback that takes `Bearer tok-e2e-1` on `/api/me`, and
/// what `Authorization` each call brought.
async fn guarded_api() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/api/me",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let log = log.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                log.lock().unwrap().push(auth.clone());
                if auth == "Bearer tok-e2e-1" {
                    (axum::http::StatusCode::OK, r#"{"me":"ana"}"#)
                } else {
                    (
                        axum::http::StatusCode::UNAUTHORIZED,
                        r#"{"error":"who are you?"}"#,
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (port, seen)
}

#[tokio::test]
async fn credentials_are_made_tested_changed_and_picked_in_the_editor_and_the_url_names_the_node() {
    let (s, codes) = editor_server().await;
    let (port, seen) = guarded_api().await;
    let url = format!("http://127.0.0.1:{port}/api/me");
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "fetch", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "get", "kind": "http.request", "position": [320, 0],
         "config": {"method": "GET", "url": url}}],
        "edges": [{"from": "start", "to": "get"}]}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "fetch").await;
    click(&a, ".back").await;
    click(&a, "a.credentials-link").await;
    eventually(Duration::from_secs(10), "the empty page", || async {
        text_of(&a, ".credentials-page .empty").await.as_deref() == Some("No credentials yet.")
    })
    .await;

    // A new one, with the wrong token: saved, and its test says the server refused.
    click(&a, ".new-credential").await;
    retype(&a, "#cred-name", "api-token").await;
    choose(&a, "#cred-kind", "bearer").await;
    retype(&a, "#cred-token", "nope-nope-9").await;
    retype(&a, "#cred-test-url", &url).await;
    click(&a, ".save-credential").await;
    eventually(Duration::from_secs(10), "the refused test", || async {
        text_of(&a, ".cred-test[data-state='failed']")
            .await
            .is_some_and(|t| t.contains("401"))
    })
    .await;
    let refused = text(&a, ".cred-test").await;
    assert!(!refused.contains("nope-nope-9"), "{refused}");
    click(&a, ".close-credential").await;
    eventually(Duration::from_secs(5), "listed", || async {
        count(&a, ".credential-row[data-name='api-token']").await == 1
    })
    .await;
    assert!(
        text(&a, ".credential-row .cred-type")
            .await
            .contains("Bearer token")
    );
    assert_eq!(text(&a, ".credential-row .unused").await, "not used");

    // Changed: the form shows no value, and what is typed replaces it.
    click(&a, ".credential-row .edit").await;
    assert_eq!(value_of(&a, "#cred-token").await, "");
    retype(&a, "#cred-token", "tok-e2e-1").await;
    retype(&a, "#cred-test-url", &url).await;
    click(&a, ".save-credential").await;
    eventually(Duration::from_secs(10), "the passed test", || async {
        text_of(&a, ".cred-test[data-state='ok']")
            .await
            .is_some_and(|t| t.contains(&format!("{url} answered 200")))
    })
    .await;
    click(&a, ".close-credential").await;
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["Bearer nope-nope-9", "Bearer tok-e2e-1"],
        "one call per test, with the credential"
    );

    // The node in the URL opens it; the picker makes a new credential of a
    // kind the node takes and puts it in the field.
    a.goto(&format!("{}/#/w/fetch/n/get", s.base))
        .await
        .unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(".node-panel[data-node='get']"))
        .await
        .unwrap();
    let offered = text(&a, "#cfg-credential").await;
    assert!(offered.contains("api-token · Bearer token"), "{offered}");
    choose(&a, "#cfg-credential", "+new").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-panel .cred-dialog #cred-kind"))
        .await
        .unwrap();
    let kinds = text(&a, ".node-panel #cred-kind").await;
    assert!(
        kinds.contains("Bearer token") && kinds.contains("Query parameter"),
        "{kinds}"
    );
    assert!(
        !kinds.contains("SMTP") && !kinds.contains("PostgreSQL"),
        "only what http.request takes: {kinds}"
    );
    retype(&a, "#cred-name", "api-token-2").await;
    retype(&a, "#cred-token", "tok-e2e-1").await;
    retype(&a, "#cred-test-url", &url).await;
    click(&a, ".save-credential").await;
    eventually(Duration::from_secs(10), "tested from the node", || async {
        text_of(&a, ".node-panel .cred-test[data-state='ok']")
            .await
            .is_some()
    })
    .await;
    click(&a, ".node-panel .close-credential").await;
    eventually(Duration::from_secs(5), "the node uses it", || async {
        stored_node(&s, "fetch", "get")
            .await
            .is_some_and(|n| n["config"]["credential"] == "api-token-2")
    })
    .await;
    assert_eq!(value_of(&a, "#cfg-credential").await, "api-token-2");
    // The run uses it.
    click(&a, ".run-button").await;
    eventually(Duration::from_secs(10), "the run's call", || async {
        seen.lock().unwrap().len() == 4
    })
    .await;
    assert_eq!(seen.lock().unwrap()[3], "Bearer tok-e2e-1");
    // The selection moves the URL.
    select_node(&a, "start").await;
    eventually(Duration::from_secs(5), "the URL names the node", || async {
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/w/fetch/n/start")
    })
    .await;

    // The page says where each is used, and links there.
    a.goto(&format!("{}/#/credentials", s.base)).await.unwrap();
    eventually(Duration::from_secs(10), "used by the node", || async {
        text_of(&a, ".credential-row[data-name='api-token-2'] .uses")
            .await
            .is_some_and(|t| t.contains("fetch › get (draft)"))
    })
    .await;
    click(&a, ".credential-row[data-name='api-token'] .test-url").await;
    retype(&a, ".credential-row[data-name='api-token'] .test-url", &url).await;
    click(&a, ".credential-row[data-name='api-token'] .test").await;
    eventually(Duration::from_secs(10), "tested from the list", || async {
        text_of(
            &a,
            ".credential-row[data-name='api-token'] .cred-test[data-state='ok']",
        )
        .await
        .is_some()
    })
    .await;
    // The form for a mail server, beside the list, for the docs.
    click(&a, ".new-credential").await;
    choose(&a, "#cred-kind", "smtp").await;
    eventually(Duration::from_secs(5), "the SMTP fields", || async {
        count(&a, "#cred-security").await == 1 && count(&a, "#cred-token").await == 0
    })
    .await;
    retype(&a, "#cred-name", "mail").await;
    retype(&a, "#cred-host", "smtp.example.com").await;
    doc_screenshots(&a, "credentials").await;
    // The page and its form pass the audit, in both themes.
    let mut serious = audit(&a, "credentials").await;
    a.execute("document.documentElement.dataset.theme = 'dark';", vec![])
        .await
        .unwrap();
    serious.extend(audit(&a, "credentials, dark").await);
    a.execute("document.documentElement.dataset.theme = 'light';", vec![])
        .await
        .unwrap();
    assert!(serious.is_empty(), "{}", serious.join("\n"));
    // Saved as shown (the security box's first choice included), then
    // tested: nothing listens on that port, and the test says where.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    retype(&a, "#cred-host", "127.0.0.1").await;
    retype(&a, "#cred-port", &closed_port.to_string()).await;
    click(&a, ".save-credential").await;
    eventually(Duration::from_secs(20), "the mail server test", || async {
        text_of(&a, ".cred-test[data-state='failed']")
            .await
            .is_some_and(|t| t.contains(&format!("127.0.0.1:{closed_port}")))
    })
    .await;
    click(&a, ".close-credential").await;
    eventually(Duration::from_secs(5), "the mail server listed", || async {
        count(&a, ".credential-row[data-name='mail']").await == 1
    })
    .await;
    click(&a, ".credential-row[data-name='api-token-2'] .uses a").await;
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(".node-panel[data-node='get']"))
        .await
        .unwrap();
    assert!(
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/w/fetch/n/get")
    );
    // No value ever reached the page's API answers.
    let listed = s
        .api(reqwest::Method::GET, "/credentials")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !listed.contains("tok-e2e-1") && !listed.contains("nope-nope-9"),
        "{listed}"
    );
    finish(&a, &[]).await;
}

#[tokio::test]
async fn the_node_view_shows_input_parameters_and_output_and_a_field_dragged_onto_a_parameter_is_used()
 {
    let (s, codes) = editor_server().await;
    let (port, seen) = recorder().await;
    let base = format!("http://127.0.0.1:{port}/orders/");
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "orders", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "call", "kind": "http.request", "position": [320, 0],
         "config": {"method": "GET", "url": base}}],
        "edges": [{"from": "start", "to": "call"}]}),
    )
    .await;
    // A run of the draft, so the node has an input and an output to show.
    let r = s
        .api(reqwest::Method::POST, "/workflows/orders/runs")
        .json(
            &json!({"input": {"id": 42, "customer": {"name": "Ana", "vip": true},
                                "lines": [{"sku": "A-1"}, {"sku": "B-2"}]},
                      "wait": true, "draft": true}),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    assert_eq!(seen.lock().unwrap().as_slice(), ["/orders/"]);

    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "orders").await;
    select_node(&a, "call").await;
    click(&a, ".node-panel[data-node='call'] .open-node-view").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(
            ".node-view[data-node='call'] .params-pane #cfg-url",
        ))
        .await
        .unwrap();
    // The form is in the view, not twice.
    assert_eq!(count(&a, "#cfg-url").await, 1);
    // Input as a table (one row: the message), then as a schema.
    eventually(Duration::from_secs(10), "the run's input", || async {
        text_of(&a, ".input-pane .data-table")
            .await
            .is_some_and(|t| t.contains("42"))
    })
    .await;
    let heads = text(&a, ".input-pane .data-table thead").await;
    assert!(
        heads.contains("id") && heads.contains("customer") && heads.contains("lines"),
        "{heads}"
    );
    assert!(
        text(&a, ".input-pane .source")
            .await
            .starts_with("from run ")
    );
    click(&a, ".input-pane .mode-schema").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(
            ".input-pane .field-chip[data-expr='{{ input.customer.name }}']",
        ))
        .await
        .unwrap();
    let schema = text(&a, ".input-pane .schema").await;
    assert!(
        schema.contains("lines") && schema.contains("2 items") && schema.contains("sku"),
        "{schema}"
    );
    click(&a, ".input-pane .mode-json").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".input-pane .json"))
        .await
        .unwrap();
    click(&a, ".input-pane .mode-schema").await;
    // The output of that run, by the node's own expression.
    eventually(Duration::from_secs(5), "the run's output", || async {
        text_of(&a, ".output-pane .data-table thead")
            .await
            .is_some_and(|t| t.contains("status"))
    })
    .await;
    assert_eq!(
        attr(&a, ".output-pane .data-table th .field-chip", "data-expr")
            .await
            .as_deref(),
        Some("{{ nodes.call.status }}")
    );
    doc_screenshots(&a, "node-view").await;

    // Drag `id` from the input onto the URL: the template lands at its end.
    drag(
        &a,
        ".input-pane .field-chip[data-expr='{{ input.id }}']",
        ".node-view #cfg-url",
    )
    .await;
    let want = format!("{base}{{{{ input.id }}}}");
    eventually(
        Duration::from_secs(5),
        "the URL reads the field",
        || async {
            stored_node(&s, "orders", "call")
                .await
                .is_some_and(|n| n["config"]["url"] == want.as_str())
        },
    )
    .await;
    assert_eq!(value_of(&a, ".node-view #cfg-url").await, want);
    // Dropped where the caret is, when the box has the focus: inside the
    // header's quotes here.
    retype(&a, ".node-view #cfg-headers", r#"{"x-order": ""}"#).await;
    a.execute(
        "const t = document.querySelector('.node-view #cfg-headers'); t.focus(); t.setSelectionRange(13, 13);",
        vec![],
    )
    .await
    .unwrap();
    drag(
        &a,
        ".input-pane .field-chip[data-expr='{{ input.id }}']",
        ".node-view #cfg-headers",
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "the header reads the field",
        || async {
            stored_node(&s, "orders", "call")
                .await
                .is_some_and(|n| n["config"]["headers"] == json!({"x-order": "{{ input.id }}"}))
        },
    )
    .await;
    // A click (no drag) copies instead, and says so.
    click(
        &a,
        ".input-pane .field-chip[data-expr='{{ input.customer.name }}']",
    )
    .await;
    assert!(
        text(&a, ".node-view .copied")
            .await
            .contains("{{ input.customer.name }}")
    );
    assert_eq!(
        value_of(&a, ".node-view #cfg-url").await,
        want,
        "a click writes nothing"
    );

    // Run this node, from the view: it calls the URL with the input's id.
    click(&a, ".node-view .run-node").await;
    eventually(Duration::from_secs(10), "the node's call", || async {
        seen.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(seen.lock().unwrap()[1], "/orders/42");
    eventually(Duration::from_secs(5), "its output shown", || async {
        text_of(&a, ".output-pane .source").await.as_deref() == Some("from its test")
    })
    .await;
    // Full screen, then Escape closes the view and the panel is back.
    click(&a, ".node-view-full").await;
    assert!(class_of(&a, ".node-view").await.contains("full"));
    a.find(Locator::Css(".node-view-close"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".inspector .node-panel[data-node='call']"))
        .await
        .unwrap();
    assert_eq!(count(&a, ".node-view").await, 0);
    // A double click on a node opens it too; Escape closes it.
    double_click(&a, "g.node[data-node='call'] text.label").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-view[data-node='call']"))
        .await
        .unwrap();
    // The URL names the open view, so a reload (or the link) opens it again.
    let ends_with = |tail: &'static str| {
        let a = &a;
        move || async move { a.current_url().await.unwrap().as_str().ends_with(tail) }
    };
    eventually(
        Duration::from_secs(5),
        "the URL names the node view",
        ends_with("#/w/orders/v/call"),
    )
    .await;
    a.refresh().await.unwrap();
    a.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(
            ".node-view[data-node='call'] .params-pane #cfg-url",
        ))
        .await
        .unwrap();
    let serious = audit(&a, "node view").await;
    assert!(serious.is_empty(), "{}", serious.join("\n"));
    click(&a, ".node-view .mode-table").await;
    press(&a, "\u{E00C}").await;
    eventually(Duration::from_secs(5), "closed by Escape", || async {
        count(&a, ".node-view").await == 0
    })
    .await;
    eventually(
        Duration::from_secs(5),
        "the URL names the node, not its view",
        ends_with("#/w/orders/n/call"),
    )
    .await;
    assert!(
        stored_node(&s, "orders", "call").await.is_some(),
        "Escape deleted nothing"
    );

    // The workflow's run uses the dragged field too.
    let r = s
        .api(reqwest::Method::POST, "/workflows/orders/runs")
        .json(&json!({"input": {"id": 7}, "wait": true, "draft": true}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(seen.lock().unwrap().last().unwrap(), "/orders/7");
    finish(&a, &[]).await;
}

/// The stored workflow's sticky notes.
async fn stored_notes(s: &common::Server, wf: &str) -> Vec<Value> {
    stored(s, wf).await["notes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn sticky_notes_are_added_written_in_markdown_moved_resized_and_deleted() {
    let (s, codes) = editor_server().await;
    // One note as an n8n import writes it.
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "notes", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "first", "kind": "data.set", "config": {"values": {"a": 1}}, "position": [300, 0]}],
        "edges": [{"from": "start", "to": "first"}],
        "notes": [{"text": "Imported *from n8n*", "position": [0, 200], "size": [260, 100]}]}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "notes").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".sticky[data-note='note-0'] .sticky-body em"))
        .await
        .unwrap();
    assert_eq!(
        text(&a, ".sticky[data-note='note-0'] .sticky-body").await,
        "Imported from n8n"
    );

    // From the canvas's menu: a note, written in at once, in Markdown.
    let grid = a.find(Locator::Css("svg.surface rect.grid")).await.unwrap();
    a.execute(
        "arguments[0].dispatchEvent(new MouseEvent('contextmenu', {bubbles: true, cancelable: true, \
         clientX: arguments[0].getBoundingClientRect().x + 500, clientY: arguments[0].getBoundingClientRect().y + 60}));",
        vec![serde_json::to_value(&grid).unwrap()],
    )
    .await
    .unwrap();
    click(&a, ".context-menu button[data-item='Add a sticky note']").await;
    let area = a
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(
            ".sticky:not([data-note='note-0']) textarea.sticky-text",
        ))
        .await
        .unwrap();
    assert_eq!(
        a.active_element()
            .await
            .unwrap()
            .attr("class")
            .await
            .unwrap()
            .as_deref(),
        Some("sticky-text"),
        "the new note has the focus"
    );
    area.send_keys("# Plan\n**Check** the totals\n\n- one\n- two")
        .await
        .unwrap();
    // A click on the canvas ends the writing.
    click_at(&a, "svg.surface rect.grid", 0.0, 250.0, 1).await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(
            ".sticky:not([data-note='note-0']) .sticky-body strong",
        ))
        .await
        .unwrap();
    assert_eq!(
        text(&a, ".sticky:not([data-note='note-0']) .heading").await,
        "Plan"
    );
    assert_eq!(
        text(&a, ".sticky:not([data-note='note-0']) strong").await,
        "Check"
    );
    assert_eq!(count(&a, ".sticky:not([data-note='note-0']) li").await, 2);
    eventually(Duration::from_secs(5), "the note stored", || async {
        stored_notes(&s, "notes")
            .await
            .get(1)
            .is_some_and(|n| n["text"] == "# Plan\n**Check** the totals\n\n- one\n- two")
    })
    .await;
    let before = stored_notes(&s, "notes").await[1].clone();
    doc_screenshots(&a, "sticky-note").await;

    // Dragged by its body: moved; by its corner: resized (one edit each).
    drag_by(
        &a,
        ".sticky:not([data-note='note-0']) .sticky-body",
        120.0,
        80.0,
    )
    .await;
    eventually(Duration::from_secs(5), "moved", || async {
        let n = stored_notes(&s, "notes").await[1].clone();
        n["position"][0].as_f64() > before["position"][0].as_f64()
            && n["position"][1].as_f64() > before["position"][1].as_f64()
            && n["size"] == before["size"]
    })
    .await;
    drag_by(
        &a,
        ".sticky:not([data-note='note-0']) .sticky-resize",
        100.0,
        60.0,
    )
    .await;
    eventually(Duration::from_secs(5), "resized", || async {
        let n = stored_notes(&s, "notes").await[1].clone();
        n["size"][0].as_f64() > before["size"][0].as_f64()
            && n["size"][1].as_f64() > before["size"][1].as_f64()
    })
    .await;
    // The nodes stay above the notes: a node is still selected by a click.
    select_node(&a, "first").await;

    // A double click writes in it again; Escape ends that, changing nothing.
    double_click(&a, ".sticky[data-note='note-0'] .sticky-body").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".sticky[data-note='note-0'] textarea"))
        .await
        .unwrap();
    assert_eq!(count(&a, ".quick-add").await, 0, "no quick add from a note");
    press(&a, "\u{E00C}").await;
    eventually(Duration::from_secs(5), "writing ended", || async {
        count(&a, ".sticky textarea").await == 0
    })
    .await;
    assert_eq!(
        stored_notes(&s, "notes").await[0]["text"],
        "Imported *from n8n*"
    );

    // Shift + S adds one in the middle of the view; × deletes one.
    a.execute("document.querySelector('svg.surface').focus()", vec![])
        .await
        .unwrap();
    key_chord(&a, "\u{E008}", "S").await;
    eventually(Duration::from_secs(5), "a third note", || async {
        stored_notes(&s, "notes").await.len() == 3
    })
    .await;
    press(&a, "\u{E00C}").await;
    // From the keyboard: Tab reaches a note, an arrow moves it.
    let at = stored_notes(&s, "notes").await[0]["position"].clone();
    a.execute(
        "document.querySelector(\".sticky[data-note='note-0']\").focus()",
        vec![],
    )
    .await
    .unwrap();
    press(&a, "\u{E014}").await;
    eventually(Duration::from_secs(5), "moved by the keyboard", || async {
        let now = stored_notes(&s, "notes").await[0]["position"].clone();
        now[0].as_f64() == at[0].as_f64().map(|x| x + 20.0) && now[1].as_f64() == at[1].as_f64()
    })
    .await;
    let first = stored_node(&s, "notes", "first")
        .await
        .expect("not deleted");
    assert_eq!(
        first["position"][0].as_f64(),
        Some(300.0),
        "the selected node stayed"
    );
    click(&a, ".sticky[data-note='note-0'] .sticky-delete").await;
    eventually(
        Duration::from_secs(5),
        "the imported note deleted",
        || async {
            let notes = stored_notes(&s, "notes").await;
            notes.len() == 2 && notes[0]["text"] == "# Plan\n**Check** the totals\n\n- one\n- two"
        },
    )
    .await;
    let serious = audit(&a, "sticky notes").await;
    assert!(serious.is_empty(), "{}", serious.join("\n"));
    finish(&a, &[]).await;
}

#[tokio::test]
async fn a_node_dropped_from_the_palette_onto_a_connection_goes_into_it() {
    let (s, codes) = editor_server().await;
    s.put_workflow(
        json!({"format": "sluice.workflow/v1", "id": "between", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "end", "kind": "output.end", "position": [600, 0]}],
        "edges": [{"from": "start", "to": "end"}]}),
    )
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "between").await;
    drag(
        &a,
        "button.kind[data-kind='util.log']",
        "path.edge[data-edge='0']",
    )
    .await;
    eventually(
        Duration::from_secs(5),
        "the log between the two",
        || async {
            let logs = nodes_of_kind(&s, "between", "util.log").await;
            logs.len() == 1 && {
                let log = &logs[0];
                let mut edges = stored_edges(&s, "between").await;
                edges.sort();
                let mut want = vec![format!("start → {log}"), format!("{log} → end")];
                want.sort();
                edges == want
            }
        },
    )
    .await;
    // Dropped away from any connection, a node stands on its own.
    drag(
        &a,
        "button.kind[data-kind='data.set']",
        "svg.surface rect.grid",
    )
    .await;
    eventually(Duration::from_secs(5), "a set on its own", || async {
        nodes_of_kind(&s, "between", "data.set").await.len() == 1
    })
    .await;
    assert_eq!(stored_edges(&s, "between").await.len(), 2);
    finish(&a, &[]).await;
}

#[tokio::test]
async fn a_runs_log_shows_levels_and_filters_by_level_node_and_text() {
    let (s, codes) = editor_server().await;
    s.put_workflow(json!({"format": "sluice.workflow/v1", "id": "logs", "nodes": [
        {"id": "start", "kind": "trigger.manual", "position": [0, 0]},
        {"id": "look", "kind": "util.log", "config": {"message": "looking up {{ input.id }}", "level": "debug"}, "position": [300, 0]},
        {"id": "total", "kind": "util.log", "config": {"message": "total is zero", "level": "warn"}, "position": [600, 0]},
        {"id": "who", "kind": "util.log", "config": {"message": "no customer", "level": "error"}, "position": [900, 0]}],
        "edges": [{"from": "start", "to": "look"}, {"from": "look", "to": "total"}, {"from": "total", "to": "who"}]}))
    .await;
    let driver = driver().await;
    let a = browser(&driver).await;
    open(&a, &s, &codes, "logs").await;
    retype(&a, "#run-input", r#"{"id": 7}"#).await;
    click(&a, ".run-button").await;
    eventually(Duration::from_secs(10), "the run's log", || async {
        count(&a, ".run-logs .log-line").await == 3
    })
    .await;
    let levels: Vec<String> = {
        let mut v = Vec::new();
        for l in a
            .find_all(Locator::Css(".run-logs .log-line"))
            .await
            .unwrap()
        {
            v.push(l.attr("data-level").await.unwrap().unwrap_or_default());
        }
        v
    };
    assert_eq!(levels, ["debug", "warn", "error"]);
    assert!(text(&a, ".run-logs .log-line[data-level='debug'] .message").await == "looking up 7");
    assert!(text(&a, ".run-logs summary").await.contains("1 error"));
    // By level, by node, by text.
    choose(&a, "#log-level", "2").await;
    eventually(Duration::from_secs(5), "warnings and errors", || async {
        count(&a, ".run-logs .log-line").await == 2
    })
    .await;
    choose(&a, "#log-node", "who").await;
    eventually(Duration::from_secs(5), "one node's", || async {
        count(&a, ".run-logs .log-line").await == 1
    })
    .await;
    choose(&a, "#log-level", "0").await;
    choose(&a, "#log-node", "").await;
    retype(&a, "#log-text", "ZERO").await;
    eventually(Duration::from_secs(5), "by text", || async {
        count(&a, ".run-logs .log-line").await == 1
            && text_of(&a, ".run-logs .log-line .message").await.as_deref() == Some("total is zero")
    })
    .await;
    // A line's node selects it (and the URL names it).
    click(&a, ".run-logs .log-line .log-node").await;
    a.wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css(".node-panel[data-node='total']"))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the URL names it", || async {
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/w/logs/n/total")
    })
    .await;
    let serious = audit(&a, "run log").await;
    assert!(serious.is_empty(), "{}", serious.join("\n"));

    // The run opened from the list is in the URL too, with the node.
    let run = attr(&a, ".runs-panel .run-row", "data-run")
        .await
        .expect("the run in the list");
    click(&a, &format!(".run-row[data-run='{run}']")).await;
    eventually(Duration::from_secs(5), "the URL names the run", || async {
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with(&format!("#/w/logs/r/{run}/n/total"))
    })
    .await;
    click(&a, ".close-run").await;
    eventually(Duration::from_secs(5), "the run left the URL", || async {
        a.current_url()
            .await
            .unwrap()
            .as_str()
            .ends_with("#/w/logs/n/total")
    })
    .await;
    // A link to the run and a node opens both; a link without the run
    // closes it.
    a.goto(&format!("{}/#/w/logs/r/{run}/n/who", s.base))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the run and the node opened by a link",
        || async {
            count(&a, ".close-run").await == 1
                && count(&a, ".node-panel[data-node='who']").await == 1
        },
    )
    .await;
    a.goto(&format!("{}/#/w/logs", s.base)).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the run closed by a link",
        || async { count(&a, ".close-run").await == 0 },
    )
    .await;
    finish(&a, &[]).await;
}
