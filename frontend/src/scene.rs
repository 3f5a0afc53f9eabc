//! What the canvas draws, and drawing it fast.
//!
//! A [`Scene`] is plain data: every node's box, label, ports and run
//! status, and every edge's curve. The canvas rebuilds it only when the
//! workflow, the selection, the problems or a run change; panning and
//! zooming only move the `<g>` around it, so the scene component is not
//! rendered again at all ([`SceneProps`] compares by pointer). When it is
//! rendered (a node dragged), each node is its own component with props
//! compared by value, so only the nodes that changed are diffed further.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use sluice_api::{RunError, StepStatus};
use sluice_model::kinds;
use yew::prelude::*;

use crate::state::{Editor, NODE_H, NODE_W, Rect};

/// One node as drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeItem {
    pub id: String,
    pub x: f64,
    pub y: f64,
    pub label: String,
    /// The label is not the id: the id (what templates name) is shown too.
    pub labelled: bool,
    pub kind: String,
    /// The kind's display name (`Condition`).
    pub kind_title: &'static str,
    /// Switched off (`disabled`): drawn faded, passes its input on.
    pub disabled: bool,
    pub category: &'static str,
    pub ports: Vec<String>,
    pub has_input: bool,
    pub selected: bool,
    pub invalid: bool,
    /// The status of its part of the run shown (`run-succeeded`…).
    pub run: Option<String>,
    pub badge: Option<String>,
    /// Hover text: problems, the step's error.
    pub title: String,
    /// Other viewers who selected it (their colors).
    pub seen_by: Vec<String>,
}

/// One edge as drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct EdgeItem {
    pub index: usize,
    pub d: String,
    pub error: bool,
}

#[derive(Debug, Default, PartialEq)]
pub struct Scene {
    pub nodes: Vec<Rc<NodeItem>>,
    pub edges: Vec<EdgeItem>,
    /// Every node's box as one path, for the minimap.
    pub mini: String,
    /// The world rectangle around every node (None when there are none).
    pub bounds: Option<Rect>,
}

/// A node's part of a run, as the canvas shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepMark {
    pub status: StepStatus,
    pub attempt: u32,
    pub duration_us: Option<u64>,
    pub error: Option<String>,
}

/// Builds the scene of `editor`'s workflow in O(nodes + edges).
pub fn build(
    editor: &Editor,
    problems: &BTreeMap<String, Vec<String>>,
    steps: Option<&BTreeMap<String, StepMark>>,
    seen_by: &HashMap<String, Vec<String>>,
) -> Scene {
    let positions = editor.positions();
    // Node id → its item, for the edges' ends.
    let mut item_of: HashMap<&str, usize> = HashMap::with_capacity(editor.wf.nodes.len());
    let mut nodes = Vec::with_capacity(editor.wf.nodes.len());
    for n in &editor.wf.nodes {
        let Some(&(x, y)) = positions.get(&n.id) else {
            continue;
        };
        let spec = kinds::spec(&n.kind);
        let ports = spec.map(|k| k.output_ports(&n.config)).unwrap_or_default();
        let step = steps.and_then(|s| s.get(&n.id));
        let mut title = problems
            .get(&n.id)
            .map(|p| p.join("\n"))
            .unwrap_or_default();
        if let Some(err) = step.and_then(|st| st.error.as_ref()) {
            if !title.is_empty() {
                title.push('\n');
            }
            title.push_str(err);
        }
        let badge = step.map(|st| {
            let text = match (st.status, st.duration_us) {
                (StepStatus::Succeeded, Some(d)) => format!("✓ {}", duration(d)),
                (StepStatus::Failed, _) => "✗ failed".to_string(),
                (StepStatus::Running, _) => "● running".to_string(),
                (StepStatus::Waiting, _) => "… waiting".to_string(),
                (other, _) => other.to_string(),
            };
            if st.attempt > 1 {
                format!("{text} · try {}", st.attempt)
            } else {
                text
            }
        });
        nodes.push(Rc::new(NodeItem {
            id: n.id.clone(),
            x,
            y,
            label: n.label.clone().unwrap_or_else(|| n.id.clone()),
            labelled: n.label.as_ref().is_some_and(|l| *l != n.id),
            kind: n.kind.clone(),
            kind_title: spec.map_or("unknown kind", |k| k.title()),
            disabled: n.disabled,
            category: spec.map_or("unknown", |k| k.category),
            ports,
            has_input: spec.is_some_and(|k| k.has_input()),
            selected: editor.selected.contains(&n.id),
            invalid: problems.contains_key(&n.id),
            run: step.map(|st| format!("run-{}", st.status)),
            badge,
            title,
            seen_by: seen_by.get(&n.id).cloned().unwrap_or_default(),
        }));
        item_of.insert(n.id.as_str(), nodes.len() - 1);
    }
    let edges = editor
        .wf
        .edges
        .iter()
        .enumerate()
        .filter_map(|(index, e)| {
            let (s, t) = (e.source(), e.target());
            let from = positions.get(s.node)?;
            let to = positions.get(t.node)?;
            let (x1, y1) = port_at(*from, &nodes[*item_of.get(s.node)?].ports, s.port);
            Some(EdgeItem {
                index,
                d: curve(x1, y1, to.0, to.1 + NODE_H / 2.0),
                error: s.port == "error",
            })
        })
        .collect();
    let mut mini = String::with_capacity(nodes.len() * 28);
    for n in &nodes {
        mini.push_str(&format!("M{} {}h{NODE_W}v{NODE_H}h-{NODE_W}z", n.x, n.y));
    }
    let bounds = nodes
        .iter()
        .map(|n| Rect {
            x: n.x,
            y: n.y,
            w: NODE_W,
            h: NODE_H,
        })
        .reduce(|a, b| a.union(&b));
    Scene {
        nodes,
        edges,
        mini,
        bounds,
    }
}

#[derive(Properties)]
pub struct SceneProps {
    pub scene: Rc<Scene>,
}

impl PartialEq for SceneProps {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.scene, &other.scene)
    }
}

#[component]
pub fn SceneView(props: &SceneProps) -> Html {
    let scene = &props.scene;
    html! {
        <>
            <g class="edges">
                { for scene.edges.iter().map(|e| html! {
                    <path key={e.index} class={classes!("edge", e.error.then_some("error"))}
                        data-edge={e.index.to_string()} d={e.d.clone()} />
                }) }
            </g>
            <g class="nodes">
                { for scene.nodes.iter().map(|n| html! { <NodeView key={n.id.clone()} item={n.clone()} /> }) }
            </g>
        </>
    }
}

#[derive(Properties, PartialEq)]
pub struct NodeProps {
    pub item: Rc<NodeItem>,
}

#[component]
pub fn NodeView(props: &NodeProps) -> Html {
    let n = &*props.item;
    let outs = n.ports.iter().map(|p| {
        let (px, py) = port_at((0.0, 0.0), &n.ports, p);
        html! {
            <>
                <g class="port out" data-port={p.clone()}>
                    <circle cx={px.to_string()} cy={py.to_string()} r="7" />
                    if n.ports.len() > 1 {
                        { " " }<text x={(px - 10.0).to_string()} y={(py + 4.0).to_string()} class="port-label">{ p }</text>
                    }
                </g>
                // Add a node after this port, on the selected node only
                // (a thousand nodes' worth would weigh on every frame; no
                // <title>: its text would count as the node's text).
                if n.selected {
                    <g class="port-add" data-add={p.clone()}>
                        <circle cx={(px + 20.0).to_string()} cy={py.to_string()} r="8" />
                        <path d={format!("M {} {py} h 8 M {} {} v 8", px + 16.0, px + 20.0, py - 4.0)} />
                    </g>
                }
            </>
        }
    });
    let seen = n.seen_by.iter().enumerate().map(|(i, color)| {
        html! {
            <rect class="seen" x={(-4.0 - 3.0 * i as f64).to_string()} y={(-4.0 - 3.0 * i as f64).to_string()}
                width={(NODE_W + 8.0 + 6.0 * i as f64).to_string()} height={(NODE_H + 8.0 + 6.0 * i as f64).to_string()}
                rx="11" style={format!("stroke: {color}")} />
        }
    });
    html! {
        <g class={classes!("node", n.category, n.selected.then_some("selected"), n.invalid.then_some("invalid"), n.disabled.then_some("disabled"), n.run.clone())}
            data-node={n.id.clone()} transform={format!("translate({} {})", n.x, n.y)}
            tabindex="0" role="button" aria-pressed={n.selected.to_string()}
            aria-label={accessible_name(n)}>
            if !n.title.is_empty() {
                <title>{ &n.title }</title>
            }
            { for seen }
            <rect class="box" width={NODE_W.to_string()} height={NODE_H.to_string()} rx="8" />
            { crate::looks::icon_at(&n.kind, 12.0, 20.0, 24.0) }
            // Spaces between the texts: the node's text reads as words
            // (its accessible name must contain it, WCAG "label in name").
            <text class="label" x="46" y="28">{ &n.label }</text>{ " " }
            if n.labelled {
                <text class="node-id" x="2" y="-6">{ &n.id }</text>{ " " }
            }
            <text class="kind" x="46" y="46">{ n.kind_title }</text>{ " " }
            if let Some(badge) = &n.badge {
                <text class="badge" x={(NODE_W - 4.0).to_string()} y="-6">{ badge }</text>{ " " }
            }
            if n.has_input {
                <g class="port in" data-port="in">
                    <circle cx="0" cy={(NODE_H / 2.0).to_string()} r="7" />
                </g>
            }
            { for outs }
        </g>
    }
}

/// A node's name for assistive technology: its text in the order it is
/// drawn (problems, label, id, kind, badge, port names: a name that leaves
/// some out fails WCAG's "label in name"), then its state.
fn accessible_name(n: &NodeItem) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if !n.title.is_empty() {
        parts.push(&n.title);
    }
    parts.push(&n.label);
    if n.labelled {
        parts.push(&n.id);
    }
    parts.push(n.kind_title);
    if let Some(b) = &n.badge {
        parts.push(b);
    }
    if n.ports.len() > 1 {
        parts.extend(n.ports.iter().map(String::as_str));
    }
    let mut name = parts.join(" ");
    if n.disabled {
        name.push_str(", switched off");
    }
    name
}

/// Where output `port` sits on a node at `at`: spread along the right side.
/// Where output `port` of a node at `at` is drawn (the state's, which
/// the hit test of connections measures against too).
pub use crate::state::port_at;

/// A horizontal S-curve between two points: the path of
/// [`crate::state::edge_controls`], so what is drawn is what is hit.
pub fn curve(x1: f64, y1: f64, x2: f64, y2: f64) -> String {
    let (c1, c2) = crate::state::edge_controls((x1, y1), (x2, y2));
    format!(
        "M {x1} {y1} C {} {}, {} {}, {x2} {y2}",
        c1.0, c1.1, c2.0, c2.1
    )
}

pub fn duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..1_000_000 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.1}s", us as f64 / 1e6),
    }
}

/// A step or run error: its message (and node).
pub fn error_text(e: &RunError) -> String {
    match &e.node {
        Some(node) => format!("{node}: {}", e.message),
        None => e.message.clone(),
    }
}
