//! `cargo xtask bench editor`: the editor on a 1,000-node, 1,500-edge
//! workflow in real headless Chromium, measured in the page.
//!
//! - Time to first render and first paint: `performance.mark`s the editor
//!   sets when the opened workflow is first drawn (`sluice:first-render`)
//!   and two animation frames later (`sluice:first-paint`), from the
//!   navigation's start: loading and compiling the editor, syncing the
//!   document over the WebSocket, validating, laying out, drawing.
//! - Frames while panning and while dragging a node: one pointer move per
//!   animation frame, dispatched in the page. A frame's work is from the
//!   event to the DOM updated and style and layout done (forced by a
//!   layout read); the interval is the time between animation frames
//!   (16.7 ms at 60 Hz when nothing is dropped). Both fitted (all 1,000
//!   nodes on screen) and at 100%.
//!
//! Needs the built editor (`cargo xtask frontend`), `chromium` and
//! `chromedriver`; `cargo xtask bench editor` sees to all three.

#[path = "../tests/browser/mod.rs"]
mod browser;
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

const NODES: usize = 1000;
const EDGES: usize = 1500;
const FRAMES: usize = 120;

/// A deterministic random DAG: a spanning tree plus extra forward edges,
/// laid out on a grid like a large hand-made workflow.
fn big_workflow() -> Value {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let cols = 40;
    let mut nodes = vec![json!({"id": "n0", "kind": "trigger.manual", "position": [0, 0]})];
    for i in 1..NODES {
        let (col, row) = (i % cols, i / cols);
        let position = json!([col as f64 * 300.0, row as f64 * 140.0]);
        let node = match i % 3 {
            0 => json!({"id": format!("n{i}"), "kind": "data.set", "label": format!("Set {i}"),
                        "config": {"values": {"step": i, "ok": true}}, "position": position}),
            1 => json!({"id": format!("n{i}"), "kind": "util.log",
                        "config": {"message": format!("at {i}: {{{{ input }}}}")}, "position": position}),
            _ => json!({"id": format!("n{i}"), "kind": "data.transform",
                        "config": {"jq": "{n: .step}"}, "position": position}),
        };
        nodes.push(node);
    }
    let mut edges = std::collections::BTreeSet::new();
    for i in 1..NODES {
        // From an earlier node, mostly a near one (as real graphs are).
        let from = i - 1 - next(i.min(60));
        edges.insert((from, i));
    }
    while edges.len() < EDGES {
        let to = 2 + next(NODES - 2);
        let from = 1 + next(to - 1);
        edges.insert((from, to));
    }
    let edges: Vec<Value> = edges
        .into_iter()
        .map(|(f, t)| json!({"from": format!("n{f}"), "to": format!("n{t}")}))
        .collect();
    json!({"format": "sluice.workflow/v1", "id": "big", "name": "Big", "nodes": nodes, "edges": edges})
}

/// Drives one gesture in the page: pointer down at `from` (client
/// coordinates, or the centre of `selector`), then a move per animation
/// frame; returns each frame's work and the intervals between frames.
const GESTURE: &str = r#"
const [selector, sx, sy, dx, dy, frames, done] = arguments;
const svg = document.querySelector('svg.surface');
let x = sx, y = sy;
let node = null;
if (selector === '@nearest-node') {
  // The node whose box is nearest the middle of the canvas.
  const c = svg.getBoundingClientRect();
  const [cx, cy] = [c.left + c.width / 2, c.top + c.height / 2];
  let best = Infinity;
  for (const g of document.querySelectorAll('g.node')) {
    const r = g.querySelector('rect.box').getBoundingClientRect();
    const d = Math.hypot(r.left + r.width / 2 - cx, r.top + r.height / 2 - cy);
    if (d < best) { best = d; node = g; }
  }
} else if (selector) {
  node = document.querySelector(selector).closest('g.node');
}
if (node) {
  const r = node.querySelector('rect.box').getBoundingClientRect();
  x = r.left + r.width / 2; y = r.top + r.height / 2;
}
const before = node && node.getAttribute('transform');
const hit = document.elementFromPoint(x, y);
const target = hit || svg;
const ev = (type) => new PointerEvent(type, {clientX: x, clientY: y, bubbles: true, cancelable: true,
  pointerId: 1, pointerType: 'mouse', isPrimary: true, button: 0, buttons: type === 'pointerup' ? 0 : 1});
target.dispatchEvent(ev('pointerdown'));
const work = [], intervals = [];
let last = null, i = 0;
const settle = () => Promise.resolve().then(() => Promise.resolve()).then(() => Promise.resolve());
function frame(ts) {
  if (last !== null) intervals.push(ts - last);
  last = ts;
  const t0 = performance.now();
  x += dx; y += dy;
  svg.dispatchEvent(ev('pointermove'));
  // The editor renders in a microtask; then force style and layout.
  settle().then(() => {
    svg.getBoundingClientRect();
    void document.body.offsetHeight;
    work.push(performance.now() - t0);
    if (++i < frames) requestAnimationFrame(frame);
    else {
      svg.dispatchEvent(ev('pointerup'));
      const on = hit && hit.closest('[data-node]');
      done({work, intervals, hit: on ? on.getAttribute('data-node') : (hit ? hit.tagName : null),
            moved: node ? node.getAttribute('transform') !== before : null,
            at: [x, y], node: node && node.getAttribute('data-node')});
    }
  });
}
requestAnimationFrame(frame);
"#;

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

async fn gesture(
    c: &Client,
    name: &str,
    selector: Option<&str>,
    from: (f64, f64),
    step: (f64, f64),
) {
    let out = c
        .execute_async(
            GESTURE,
            vec![
                json!(selector),
                json!(from.0),
                json!(from.1),
                json!(step.0),
                json!(step.1),
                json!(FRAMES),
            ],
        )
        .await
        .expect("the gesture script");
    let work = numbers(&out["work"]);
    let intervals = numbers(&out["intervals"]);
    println!(
        "{name:<34} work p50 {:>6.2} ms  p95 {:>6.2} ms  max {:>6.2} ms | frame interval p50 {:>5.1} ms  p95 {:>5.1} ms  ({} frames, started on {}{})",
        percentile(&work, 0.5),
        percentile(&work, 0.95),
        percentile(&work, 1.0),
        percentile(&intervals, 0.5),
        percentile(&intervals, 0.95),
        work.len(),
        out["hit"].as_str().unwrap_or("?"),
        match out["moved"].as_bool() {
            Some(true) => ", which moved",
            Some(false) => ", WHICH DID NOT MOVE",
            None => "",
        },
    );
    if selector.is_some() {
        assert_eq!(
            out["moved"],
            json!(true),
            "{name}: the node did not move: {out}"
        );
    }
}

async fn zoom(c: &Client) -> f64 {
    let t: String = c
        .execute(
            "return document.querySelector('g.world').getAttribute('transform')",
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_string();
    t.rsplit("scale(")
        .next()
        .and_then(|s| s.trim_end_matches(')').parse().ok())
        .unwrap_or(1.0)
}

#[tokio::main]
async fn main() {
    let (s, codes) = browser::editor_server().await;
    let wf = big_workflow();
    assert_eq!(wf["nodes"].as_array().unwrap().len(), NODES);
    assert_eq!(wf["edges"].as_array().unwrap().len(), EDGES);
    s.put_workflow(wf).await;
    let driver = browser::driver().await;
    let c = browser::browser(&driver).await;
    c.goto(&format!("{}/ui/login?code={}", s.base, codes.issue()))
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css("ul.workflows"))
        .await
        .unwrap();
    println!(
        "editor benchmark: {NODES} nodes, {EDGES} edges, headless Chromium {}x{} ({} cores)",
        1400,
        900,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // Three cold opens (a new document each time; the wasm is cached by
    // the browser after the first, as for a returning user).
    for attempt in 1..=3 {
        c.goto("about:blank").await.unwrap();
        c.goto(&format!("{}/#/w/big", s.base)).await.unwrap();
        let marks = c
            .execute_async(
                r#"const done = arguments[0];
                   const poll = () => {
                     const p = performance.getEntriesByName('sluice:first-paint')[0];
                     if (p) done({
                       loaded: performance.getEntriesByName('sluice:workflow-loaded')[0]?.startTime,
                       render: performance.getEntriesByName('sluice:first-render')[0]?.startTime,
                       paint: p.startTime,
                       nodes: document.querySelectorAll('g.node').length,
                       edges: document.querySelectorAll('path.edge').length});
                     else setTimeout(poll, 5);
                   };
                   poll();"#,
                vec![],
            )
            .await
            .expect("the editor did not draw the workflow");
        println!(
            "open #{attempt}: workflow loaded {:>6.0} ms, first render {:>6.0} ms, first paint {:>6.0} ms after navigation ({} nodes, {} edges drawn)",
            marks["loaded"].as_f64().unwrap_or(f64::NAN),
            marks["render"].as_f64().unwrap_or(f64::NAN),
            marks["paint"].as_f64().unwrap_or(f64::NAN),
            marks["nodes"],
            marks["edges"],
        );
        assert_eq!(marks["nodes"].as_u64(), Some(NODES as u64));
    }
    // Let the fit settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let z = zoom(&c).await;
    let rect = c
        .execute(
            "const r = document.querySelector('svg.surface').getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![],
        )
        .await
        .unwrap();
    let r = numbers(&rect);
    println!("fitted: zoom {:.0}%", z * 100.0);
    gesture(
        &c,
        "pan, fitted (1,000 nodes visible)",
        None,
        (r[0] + 4.0, r[1] + 4.0),
        (3.0, 2.0),
    )
    .await;
    gesture(
        &c,
        "drag a node, fitted",
        Some("g.node[data-node='n500'] rect.box"),
        (0.0, 0.0),
        (2.0, 1.0),
    )
    .await;
    // Zoom to 100% around a node in the middle of the graph (one the drag
    // above did not touch), which then stays under the pointer.
    let anchor = numbers(
        &c.execute(
            "const r = document.querySelector(\"g.node[data-node='n520'] rect.box\").getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![],
        )
        .await
        .unwrap(),
    );
    let delta = (1.0 / z).ln() / 0.0015;
    c.execute(
        "const [x, y, d] = arguments; document.querySelector('svg.surface').dispatchEvent(new WheelEvent('wheel', {clientX: x, clientY: y, deltaY: -d, bubbles: true, cancelable: true}));",
        vec![json!(anchor[0] + anchor[2] / 2.0), json!(anchor[1] + anchor[3] / 2.0), json!(delta)],
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("zoomed: {:.0}%", zoom(&c).await * 100.0);
    // Pan from the gap left of that node (background), over the graph.
    let at = numbers(
        &c.execute(
            "const r = document.querySelector(\"g.node[data-node='n520'] rect.box\").getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![],
        )
        .await
        .unwrap(),
    );
    gesture(
        &c,
        "pan at 100%",
        None,
        (at[0] - 40.0, at[1] + at[3] / 2.0),
        (-3.0, -2.0),
    )
    .await;
    gesture(
        &c,
        "drag a node at 100%",
        Some("@nearest-node"),
        (0.0, 0.0),
        (2.0, 1.0),
    )
    .await;
    let png = c.screenshot().await.unwrap();
    let shot = browser::artifacts().join("editor-bench-1000.png");
    std::fs::write(&shot, png).unwrap();
    println!("screenshot: {}", shot.display());
    c.close().await.ok();
}
