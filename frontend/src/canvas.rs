//! The canvas: one workflow as SVG, synced as a Loro document.
//!
//! The component holds the workflow's `WorkflowDoc`. Gestures become
//! [`Action`]s on the [`Editor`]; when the workflow changed, the new
//! workflow is applied to the document (minimal operations) and exactly the
//! new operations go to the engine as `doc.update`. Updates from others are
//! imported and the canvas redrawn from the document, keeping the view and
//! the selection.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sluice_model::doc::{WorkflowDoc, decode_version, encode_version};
use sluice_model::{kinds, validate};
use wasm_bindgen::JsCast;
use web_sys::{Element, KeyboardEvent, PointerEvent, WheelEvent};
use yew::prelude::*;

use crate::net::{self, Socket};
use crate::state::{Action, Change, Editor, NODE_H, NODE_W, Rect};

#[derive(Properties, PartialEq)]
pub struct Props {
    pub workflow: String,
}

pub enum Msg {
    Server(Value),
    Closed,
    Down(PointerEvent),
    Move(PointerEvent),
    Up(PointerEvent),
    Wheel(WheelEvent),
    Key(KeyboardEvent),
    Add(String),
    Fit,
    /// An edit from the inspector.
    Act(Action),
    Undo,
    Redo,
    RunInput(String),
    Run,
    Ran(Result<Value, String>),
    RunDetail(Result<Value, String>),
}

/// One node's part of the last run: its last attempt.
#[derive(Clone, Debug)]
struct StepView {
    status: String,
    attempt: u64,
    duration_us: Option<u64>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<Value>,
}

/// The last run started from this window.
struct RunView {
    id: String,
    status: String,
    output: Value,
    error: Value,
    steps: BTreeMap<String, StepView>,
}

/// What the pointer is doing.
enum Drag {
    None,
    Pan {
        last: (f64, f64),
    },
    Nodes {
        last: (f64, f64),
        moved: bool,
    },
    Band {
        start: (f64, f64),
        now: (f64, f64),
        additive: bool,
    },
    Wire {
        from: String,
        port: String,
        now: (f64, f64),
    },
}

pub struct Canvas {
    doc: WorkflowDoc,
    editor: Option<Editor>,
    socket: Option<Socket>,
    drag: Drag,
    /// Node id → problems, from the model's validation.
    problems: BTreeMap<String, Vec<String>>,
    /// Why the last connection was refused (shown until the next gesture).
    refused: Option<String>,
    status: String,
    clipboard: Option<String>,
    svg: NodeRef,
    next_ref: u64,
    fitted: bool,
    /// Undo and redo of this window's own edits only (Loro's UndoManager
    /// skips imported operations).
    undo: loro::UndoManager,
    /// A drag is one undo step.
    grouping: bool,
    run_input: String,
    run: Option<RunView>,
    running: bool,
}

fn random_peer() -> u64 {
    let hi = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    let lo = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (hi << 32) | lo
}

impl Canvas {
    fn point(&self, e: &web_sys::MouseEvent) -> (f64, f64) {
        let rect = self
            .svg
            .cast::<Element>()
            .map(|svg| svg.get_bounding_client_rect());
        let (left, top) = rect.map_or((0.0, 0.0), |r| (r.left(), r.top()));
        (
            f64::from(e.client_x()) - left,
            f64::from(e.client_y()) - top,
        )
    }

    fn size(&self) -> (f64, f64) {
        self.svg
            .cast::<Element>()
            .map(|svg| svg.get_bounding_client_rect())
            .map_or((1200.0, 800.0), |r| (r.width(), r.height()))
    }

    /// Applies an action; saves and sends the workflow when it changed.
    fn act(&mut self, ctx: &Context<Self>, action: Action) -> bool {
        let Some(editor) = &mut self.editor else {
            return false;
        };
        match editor.reduce(action) {
            Ok(Change::None) => false,
            Ok(Change::View) => true,
            Ok(Change::Workflow) => {
                self.save(ctx);
                true
            }
            Err(reason) => {
                self.refused = Some(reason);
                true
            }
        }
    }

    /// The editor's workflow into the document; the new operations out.
    fn save(&mut self, ctx: &Context<Self>) {
        let Some(editor) = &self.editor else {
            return;
        };
        let before = self.doc.version();
        match self.doc.apply(&editor.wf) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                self.status = format!("could not apply the edit: {e}");
                return;
            }
        }
        self.problems = problems(editor);
        self.send_since(ctx, &before);
    }

    /// Sends the operations made since `before` to the engine.
    fn send_since(&mut self, ctx: &Context<Self>, before: &loro::VersionVector) {
        if let (Ok(update), Some(socket)) = (self.doc.updates_since(before), &self.socket) {
            self.next_ref += 1;
            socket.send(&json!({
                "type": "doc.update", "workflow": ctx.props().workflow,
                "update": net::b64(&update), "ref": self.next_ref.to_string()
            }));
            self.status = "saving…".into();
        }
    }

    /// The workflow from the document, keeping the view and the selection.
    fn reload(&mut self) {
        let wf = match self.doc.to_workflow() {
            Ok(wf) => wf,
            Err(e) => {
                self.status = format!("the workflow cannot be shown: {e}");
                return;
            }
        };
        match &mut self.editor {
            Some(editor) => {
                editor.wf = wf;
                let ids: Vec<String> = editor.wf.nodes.iter().map(|n| n.id.clone()).collect();
                editor.selected.retain(|id| ids.contains(id));
            }
            None => self.editor = Some(Editor::new(wf)),
        }
        if let Some(editor) = &self.editor {
            self.problems = problems(editor);
        }
    }

    fn on_server(&mut self, ctx: &Context<Self>, msg: Value) -> bool {
        let field = |k: &str| msg.get(k).and_then(Value::as_str).unwrap_or_default();
        match field("type") {
            "doc.sync" | "doc.update" => {
                let imported = net::unb64(field("update"))
                    .and_then(|b| self.doc.import(&b).map_err(|e| e.to_string()));
                if let Err(e) = imported {
                    self.status = format!("a bad update from the engine: {e}");
                    return true;
                }
                if field("type") == "doc.sync" {
                    // Send what the engine lacks (edits made while away).
                    if let Ok(theirs) = net::unb64(field("version"))
                        .and_then(|b| decode_version(&b).map_err(|e| e.to_string()))
                        && let Ok(update) = self.doc.updates_since(&theirs)
                        && theirs != self.doc.version()
                        && let Some(socket) = &self.socket
                    {
                        socket.send(&json!({
                            "type": "doc.update", "workflow": ctx.props().workflow,
                            "update": net::b64(&update)
                        }));
                    }
                    self.status = "saved".into();
                }
                self.reload();
                true
            }
            "doc.ack" => {
                if field("ref") == self.next_ref.to_string() {
                    self.status = "saved".into();
                }
                true
            }
            "error" => {
                self.status = field("message").to_string();
                true
            }
            _ => false,
        }
    }
}

fn problems(editor: &Editor) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in validate(&editor.wf) {
        if let Some(node) = p.node {
            let text = match p.field {
                Some(f) => format!("{f}: {}", p.message),
                None => p.message,
            };
            out.entry(node).or_default().push(text);
        }
    }
    out
}

/// What is under the pointer: a port, a node, or the background. By
/// position, not the event's target: the surface captures the pointer
/// during a drag, so every event then targets it.
fn hit(e: &web_sys::MouseEvent) -> (Option<String>, Option<String>) {
    let under = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.element_from_point(e.client_x() as f32, e.client_y() as f32));
    let Some(target) = under.or_else(|| e.target().and_then(|t| t.dyn_into::<Element>().ok()))
    else {
        return (None, None);
    };
    let port = target
        .closest("[data-port]")
        .ok()
        .flatten()
        .and_then(|el| el.get_attribute("data-port"));
    let node = target
        .closest("[data-node]")
        .ok()
        .flatten()
        .and_then(|el| el.get_attribute("data-node"));
    (node, port)
}

impl Component for Canvas {
    type Message = Msg;
    type Properties = Props;

    fn create(ctx: &Context<Self>) -> Self {
        let doc = WorkflowDoc::new();
        doc.loro().set_peer_id(random_peer()).ok();
        let undo = loro::UndoManager::new(doc.loro());
        let on_message = ctx.link().callback(Msg::Server);
        let on_close = ctx.link().callback(|()| Msg::Closed);
        let socket = Socket::open(move |v| on_message.emit(v), move || on_close.emit(()));
        let (socket, status) = match socket {
            Ok(s) => {
                s.send(&json!({
                    "type": "doc.subscribe", "workflow": ctx.props().workflow,
                    "version": net::b64(&encode_version(&doc.version()))
                }));
                (Some(s), "connecting…".to_string())
            }
            Err(e) => (None, format!("cannot connect: {e}")),
        };
        Canvas {
            doc,
            editor: None,
            socket,
            drag: Drag::None,
            problems: BTreeMap::new(),
            refused: None,
            status,
            clipboard: None,
            svg: NodeRef::default(),
            next_ref: 0,
            fitted: false,
            undo,
            grouping: false,
            run_input: "{}".into(),
            run: None,
            running: false,
        }
    }

    fn rendered(&mut self, ctx: &Context<Self>, _first: bool) {
        // Fit once the surface exists (its size is only known then).
        if !self.fitted && self.editor.is_some() && self.svg.get().is_some() {
            self.fitted = true;
            ctx.link().send_message(Msg::Fit);
        }
    }

    fn update(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Server(v) => self.on_server(ctx, v),
            Msg::Closed => {
                self.status = "disconnected: reload to reconnect".into();
                self.socket = None;
                true
            }
            Msg::Down(e) => {
                self.refused = None;
                let at = self.point(&e);
                if let Some(svg) = self.svg.cast::<Element>() {
                    svg.set_pointer_capture(e.pointer_id()).ok();
                }
                let Some(editor) = &self.editor else {
                    return false;
                };
                let world = editor.viewport.to_world(at.0, at.1);
                match hit(&e) {
                    (Some(node), Some(port)) if port != "in" => {
                        self.drag = Drag::Wire {
                            from: node,
                            port,
                            now: world,
                        };
                        true
                    }
                    (Some(node), _) => {
                        if !editor.selected.contains(&node) || e.shift_key() {
                            self.act(
                                ctx,
                                Action::Select {
                                    id: node,
                                    additive: e.shift_key(),
                                },
                            );
                        }
                        self.drag = Drag::Nodes {
                            last: world,
                            moved: false,
                        };
                        self.grouping = self.undo.group_start().is_ok();
                        true
                    }
                    (None, _) if e.shift_key() => {
                        self.drag = Drag::Band {
                            start: world,
                            now: world,
                            additive: true,
                        };
                        true
                    }
                    (None, _) => {
                        self.act(ctx, Action::ClearSelection);
                        self.drag = if e.alt_key() || e.button() == 1 {
                            Drag::Band {
                                start: world,
                                now: world,
                                additive: false,
                            }
                        } else {
                            Drag::Pan { last: at }
                        };
                        true
                    }
                }
            }
            Msg::Move(e) => {
                let at = self.point(&e);
                let Some(editor) = &mut self.editor else {
                    return false;
                };
                let world = editor.viewport.to_world(at.0, at.1);
                match &mut self.drag {
                    Drag::None => false,
                    Drag::Pan { last } => {
                        editor.viewport.pan(at.0 - last.0, at.1 - last.1);
                        *last = at;
                        true
                    }
                    Drag::Nodes { last, moved } => {
                        let (dx, dy) = (world.0 - last.0, world.1 - last.1);
                        *last = world;
                        *moved = true;
                        self.act(ctx, Action::MoveSelected { dx, dy })
                    }
                    Drag::Band { now, .. } | Drag::Wire { now, .. } => {
                        *now = world;
                        true
                    }
                }
            }
            Msg::Up(e) => {
                let drag = std::mem::replace(&mut self.drag, Drag::None);
                let grouped = std::mem::take(&mut self.grouping);
                match drag {
                    Drag::Nodes { moved, .. } => {
                        if moved {
                            self.act(ctx, Action::SnapSelected);
                        }
                        if grouped {
                            self.undo.group_end();
                        }
                        true
                    }
                    Drag::Band {
                        start,
                        now,
                        additive,
                    } => {
                        let rect = Rect::spanning(start, now);
                        self.act(ctx, Action::SelectBox { rect, additive })
                    }
                    Drag::Wire { from, port, .. } => {
                        match hit(&e) {
                            (Some(to), _) if to != from => {
                                self.act(ctx, Action::Connect { from, port, to });
                            }
                            _ => {}
                        }
                        true
                    }
                    _ => true,
                }
            }
            Msg::Wheel(e) => {
                e.prevent_default();
                let at = self.point(&e);
                let Some(editor) = &mut self.editor else {
                    return false;
                };
                let factor = (-e.delta_y() * 0.0015).exp();
                editor.viewport.zoom_at(at.0, at.1, factor);
                true
            }
            Msg::Key(e) => {
                let typing = e
                    .target()
                    .and_then(|t| t.dyn_into::<Element>().ok())
                    .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA"));
                if typing {
                    return false;
                }
                let command = e.ctrl_key() || e.meta_key();
                let key = e.key();
                let action = match (command, key.as_str()) {
                    (false, "Delete" | "Backspace") => Some(Action::DeleteSelected),
                    (false, "Escape") => Some(Action::ClearSelection),
                    (true, "a") => Some(Action::SelectAll),
                    (true, "z" | "Z") => {
                        ctx.link()
                            .send_message(if e.shift_key() { Msg::Redo } else { Msg::Undo });
                        None
                    }
                    (true, "y") => {
                        ctx.link().send_message(Msg::Redo);
                        None
                    }
                    (true, "Enter") => {
                        ctx.link().send_message(Msg::Run);
                        None
                    }
                    (true, "d") => Some(Action::DuplicateSelected),
                    (true, "c") => {
                        if let Some(editor) = &self.editor {
                            let text = editor.copy_selected();
                            if let Some(w) = web_sys::window() {
                                let _ = w.navigator().clipboard().write_text(&text);
                            }
                            self.clipboard = Some(text);
                        }
                        None
                    }
                    (true, "v") => self.clipboard.clone().map(|json| {
                        let (w, h) = self.size();
                        let at = self
                            .editor
                            .as_ref()
                            .map_or((0.0, 0.0), |ed| ed.viewport.to_world(w / 3.0, h / 3.0));
                        Action::Paste { json, at }
                    }),
                    (false, "f") => {
                        ctx.link().send_message(Msg::Fit);
                        None
                    }
                    _ => return false,
                };
                e.prevent_default();
                match action {
                    Some(a) => self.act(ctx, a),
                    None => false,
                }
            }
            Msg::Add(kind) => {
                let (w, h) = self.size();
                let Some(editor) = &self.editor else {
                    return false;
                };
                let at = editor.viewport.to_world(w / 2.0 - NODE_W / 2.0, h / 2.0);
                self.act(ctx, Action::AddNode { kind, at })
            }
            Msg::Act(action) => self.act(ctx, action),
            Msg::Undo | Msg::Redo => {
                let before = self.doc.version();
                let done = if matches!(msg, Msg::Undo) {
                    self.undo.undo()
                } else {
                    self.undo.redo()
                };
                match done {
                    Ok(true) => {
                        self.reload();
                        self.send_since(ctx, &before);
                        true
                    }
                    Ok(false) => false,
                    Err(e) => {
                        self.status = format!("cannot undo: {e}");
                        true
                    }
                }
            }
            Msg::RunInput(text) => {
                self.run_input = text;
                false
            }
            Msg::Run => {
                let input: Value = match serde_json::from_str(&self.run_input) {
                    Ok(v) => v,
                    Err(e) => {
                        self.status = format!("the run input is not JSON: {e}");
                        return true;
                    }
                };
                self.running = true;
                let path = format!("/api/v1/workflows/{}/runs", ctx.props().workflow);
                ctx.link().send_future(async move {
                    let body = json!({"input": input, "wait": true});
                    Msg::Ran(net::call("POST", &path, Some(&body)).await)
                });
                true
            }
            Msg::Ran(result) => {
                self.running = false;
                match result {
                    Ok(run) => {
                        let id = run["id"].as_str().unwrap_or_default().to_string();
                        self.run = Some(RunView {
                            id: id.clone(),
                            status: run["status"].as_str().unwrap_or("running").to_string(),
                            output: run["output"].clone(),
                            error: run["error"].clone(),
                            steps: BTreeMap::new(),
                        });
                        ctx.link().send_future(async move {
                            Msg::RunDetail(
                                net::call("GET", &format!("/api/v1/runs/{id}"), None).await,
                            )
                        });
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::RunDetail(result) => {
                match (result, &mut self.run) {
                    (Ok(detail), Some(run)) => {
                        run.status = detail["status"].as_str().unwrap_or(&run.status).to_string();
                        run.output = detail["output"].clone();
                        run.error = detail["error"].clone();
                        for step in detail["steps"].as_array().into_iter().flatten() {
                            let Some(node) = step["node"].as_str() else {
                                continue;
                            };
                            run.steps.insert(
                                node.to_string(),
                                StepView {
                                    status: step["status"].as_str().unwrap_or_default().to_string(),
                                    attempt: step["attempt"].as_u64().unwrap_or(1),
                                    duration_us: step["duration_us"].as_u64(),
                                    input: step.get("input").cloned(),
                                    output: step.get("output").cloned(),
                                    error: step.get("error").cloned(),
                                },
                            );
                        }
                    }
                    (Err(e), _) => self.status = e,
                    _ => {}
                }
                true
            }
            Msg::Fit => {
                let (w, h) = self.size();
                let Some(editor) = &mut self.editor else {
                    return false;
                };
                if let Some(bounds) = editor.bounds() {
                    editor.viewport.fit(bounds, w, h);
                }
                true
            }
        }
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let palette = kinds::catalog().iter().map(|k| {
            let kind = k.kind.to_string();
            let onclick = link.callback(move |_| Msg::Add(kind.clone()));
            html! {
                <li><button class="kind" data-kind={k.kind} title={k.summary} {onclick}>
                    <span class={classes!("dot", k.category)}></span>{ k.kind }
                </button></li>
            }
        });
        let Some(editor) = &self.editor else {
            return html! { <div class="canvas loading">{ &self.status }</div> };
        };
        let v = editor.viewport;
        let positions = editor.positions();
        let edges = editor.wf.edges.iter().enumerate().filter_map(|(i, e)| {
            let (s, t) = (e.source(), e.target());
            let from = positions.get(s.node)?;
            let to = positions.get(t.node)?;
            let source = editor.wf.nodes.iter().find(|n| n.id == s.node)?;
            let ports = kinds::spec(&source.kind)
                .map(|k| k.output_ports(&source.config))
                .unwrap_or_default();
            let (x1, y1) = port_at(*from, &ports, s.port);
            let (x2, y2) = (to.0, to.1 + NODE_H / 2.0);
            let d = curve(x1, y1, x2, y2);
            Some(html! {
                <path class={classes!("edge", (s.port == "error").then_some("error"))}
                    data-edge={i.to_string()} d={d} />
            })
        });
        let nodes = editor.wf.nodes.iter().filter_map(|n| {
            let &(x, y) = positions.get(&n.id)?;
            let spec = kinds::spec(&n.kind);
            let ports = spec
                .map(|k| k.output_ports(&n.config))
                .unwrap_or_default();
            let selected = editor.selected.contains(&n.id);
            let problems = self.problems.get(&n.id);
            let title = problems.map(|p| p.join("\n")).unwrap_or_default();
            let outs = ports.iter().map(|p| {
                let (px, py) = port_at((x, y), &ports, p);
                html! {
                    <g class="port out" data-port={p.clone()}>
                        <circle cx={(px - x).to_string()} cy={(py - y).to_string()} r="7" />
                        if ports.len() > 1 {
                            <text x={(px - x - 10.0).to_string()} y={(py - y + 4.0).to_string()} class="port-label">{ p }</text>
                        }
                    </g>
                }
            });
            let input = spec.is_some_and(|k| k.has_input()).then(|| html! {
                <g class="port in" data-port="in">
                    <circle cx="0" cy={(NODE_H / 2.0).to_string()} r="7" />
                </g>
            });
            let category = spec.map_or("unknown", |k| k.category);
            let step = self.run.as_ref().and_then(|r| r.steps.get(&n.id));
            let run_class = step.map(|st| format!("run-{}", st.status));
            let badge = step.map(|st| {
                let text = match (st.status.as_str(), st.duration_us) {
                    ("succeeded", Some(d)) => format!("✓ {}", duration(d)),
                    ("failed", _) => "✗ failed".to_string(),
                    (other, _) => other.to_string(),
                };
                let text = if st.attempt > 1 { format!("{text} · try {}", st.attempt) } else { text };
                html! { <text class="badge" x={(NODE_W - 10.0).to_string()} y="18">{ text }</text> }
            });
            let title = match step.and_then(|st| st.error.as_ref()) {
                Some(err) => format!("{title}\n{}", error_text(err)),
                None => title,
            };
            Some(html! {
                <g class={classes!("node", category, selected.then_some("selected"), problems.map(|_| "invalid"), run_class)}
                    data-node={n.id.clone()} transform={format!("translate({x} {y})")}>
                    <title>{ title }</title>
                    <rect class="box" width={NODE_W.to_string()} height={NODE_H.to_string()} rx="8" />
                    <text class="label" x="14" y="26">{ n.label.clone().unwrap_or_else(|| n.id.clone()) }</text>
                    <text class="kind" x="14" y="46">{ &n.kind }</text>
                    { for badge }
                    { for input }
                    { for outs }
                </g>
            })
        });
        let overlay = match &self.drag {
            Drag::Band { start, now, .. } => {
                let r = Rect::spanning(*start, *now);
                html! { <rect class="band" x={r.x.to_string()} y={r.y.to_string()} width={r.w.to_string()} height={r.h.to_string()} /> }
            }
            Drag::Wire { from, port, now } => {
                let source = editor.wf.nodes.iter().find(|n| &n.id == from);
                let ports = source
                    .and_then(|s| kinds::spec(&s.kind).map(|k| k.output_ports(&s.config)))
                    .unwrap_or_default();
                match positions.get(from) {
                    Some(at) => {
                        let (x1, y1) = port_at(*at, &ports, port);
                        html! { <path class="edge wire" d={curve(x1, y1, now.0, now.1)} /> }
                    }
                    None => html! {},
                }
            }
            _ => html! {},
        };
        let refused = self
            .refused
            .as_ref()
            .map(|r| html! { <div class="refused" role="alert">{ r }</div> });
        html! {
            <div class="editor">
                <aside class="palette">
                    <h2>{ "Nodes" }</h2>
                    <ul>{ for palette }</ul>
                </aside>
                <div class="canvas">
                    <svg ref={self.svg.clone()} tabindex="0" class="surface"
                        onpointerdown={link.callback(Msg::Down)}
                        onpointermove={link.callback(Msg::Move)}
                        onpointerup={link.callback(Msg::Up)}
                        onwheel={link.callback(Msg::Wheel)}
                        onkeydown={link.callback(Msg::Key)}>
                        <defs>
                            <pattern id="grid" width="20" height="20" patternUnits="userSpaceOnUse"
                                patternTransform={format!("translate({} {}) scale({})", v.x, v.y, v.zoom)}>
                                <circle cx="1" cy="1" r="1" class="grid-dot" />
                            </pattern>
                        </defs>
                        <rect class="grid" width="100%" height="100%" fill="url(#grid)" />
                        <g class="world" transform={format!("translate({} {}) scale({})", v.x, v.y, v.zoom)}>
                            { for edges }
                            { for nodes }
                            { overlay }
                        </g>
                    </svg>
                    { for refused }
                    <div class="status" data-status={self.status.clone()}>
                        { &self.status }{ format!(" · {:.0}%", v.zoom * 100.0) }
                    </div>
                </div>
                { self.inspector(ctx, editor) }
            </div>
        }
    }
}

impl Canvas {
    /// The right-hand panel: running the workflow, and the selected node's
    /// form and its part of the last run.
    fn inspector(&self, ctx: &Context<Self>, editor: &Editor) -> Html {
        let link = ctx.link();
        let oninput = link.callback(|e: InputEvent| {
            let area: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
            Msg::RunInput(area.value())
        });
        let run = self.run.as_ref().map(|r| {
            let error = (!r.error.is_null()).then(|| html! {
                <pre class="run-error" role="alert">{ error_text(&r.error) }</pre>
            });
            html! {
                <div class={classes!("run", format!("run-{}", r.status))} data-run={r.id.clone()}>
                    <p><strong class="run-status">{ &r.status }</strong>{ " · " }<code>{ &r.id }</code></p>
                    { for error }
                    <h3>{ "Output" }</h3>
                    <pre class="run-output">{ pretty(&r.output) }</pre>
                </div>
            }
        });
        let selected = (editor.selected.len() == 1)
            .then(|| editor.selected.iter().next())
            .flatten()
            .and_then(|id| editor.wf.nodes.iter().find(|n| &n.id == id));
        let node = selected.map(|n| self.node_form(ctx, n));
        html! {
            <aside class="inspector">
                <section class="run-panel">
                    <h2>{ "Run" }</h2>
                    <label for="run-input">{ "Input (JSON)" }</label>
                    <textarea id="run-input" class="mono" rows="3" value={self.run_input.clone()} {oninput} />
                    <button class="run-button" disabled={self.running}
                        onclick={link.callback(|_| Msg::Run)}>
                        { if self.running { "Running…" } else { "Run ⌃⏎" } }
                    </button>
                    { for run }
                </section>
                { for node }
            </aside>
        }
    }

    fn node_form(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        let link = ctx.link();
        let spec = kinds::spec(&n.kind);
        let id = n.id.clone();
        let on_label = {
            let id = id.clone();
            link.callback(move |e: InputEvent| {
                let input: web_sys::HtmlInputElement = e.target_unchecked_into();
                Msg::Act(Action::SetLabel {
                    node: id.clone(),
                    label: input.value(),
                })
            })
        };
        let problems = self.problems.get(&n.id).map(|ps| html! {
            <ul class="problems" role="alert">{ for ps.iter().map(|p| html! { <li>{ p }</li> }) }</ul>
        });
        let schema = spec.map(|k| k.config_schema()).unwrap_or(Value::Null);
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let fields = schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, prop)| {
                let prop = resolve(&schema, prop);
                let value = n.config.get(name).cloned();
                field(
                    link,
                    &id,
                    name,
                    &prop,
                    value,
                    required.contains(&name.as_str()),
                )
            });
        let step = self.run.as_ref().and_then(|r| r.steps.get(&n.id)).map(|st| {
            let error = st.error.as_ref().map(|e| html! { <pre class="step-error">{ error_text(e) }</pre> });
            html! {
                <div class="step">
                    <h3>{ format!("Last run: {}", st.status) }</h3>
                    { for error }
                    <details open=true><summary>{ "Input" }</summary>
                        <pre class="step-input">{ st.input.as_ref().map(pretty).unwrap_or_default() }</pre></details>
                    <details open=true><summary>{ "Output" }</summary>
                        <pre class="step-output">{ st.output.as_ref().map(pretty).unwrap_or_default() }</pre></details>
                </div>
            }
        });
        html! {
            <section class="node-panel" data-node={n.id.clone()}>
                <h2>{ &n.id }</h2>
                <p class="summary"><code>{ &n.kind }</code>{ " · " }{ spec.map(|k| k.summary).unwrap_or("unknown kind") }</p>
                { for problems }
                <label for="node-label">{ "Label" }</label>
                <input id="node-label" value={n.label.clone().unwrap_or_default()} placeholder={n.id.clone()} oninput={on_label} />
                <form class="config" onsubmit={Callback::from(|e: SubmitEvent| e.prevent_default())}>
                    { for fields }
                </form>
                { for step }
            </section>
        }
    }
}

/// `$ref` to `#/$defs/…`, and `Option<T>` written as `anyOf [T, null]`.
fn resolve(schema: &Value, prop: &Value) -> Value {
    let deref = |p: &Value| -> Value {
        match p.get("$ref").and_then(Value::as_str) {
            Some(r) => r
                .strip_prefix("#/$defs/")
                .and_then(|name| schema["$defs"].get(name))
                .cloned()
                .unwrap_or(Value::Null),
            None => p.clone(),
        }
    };
    let mut out = deref(prop);
    if let Some(any) = prop.get("anyOf").and_then(Value::as_array)
        && let Some(inner) = any.iter().find(|a| a.get("type") != Some(&json!("null")))
    {
        out = deref(inner);
    }
    if let (Some(d), Value::Object(o)) = (prop.get("description"), &mut out) {
        o.entry("description").or_insert(d.clone());
    }
    out
}

/// One config field's control, chosen by its schema.
fn field(
    link: &yew::html::Scope<Canvas>,
    node: &str,
    name: &str,
    prop: &Value,
    value: Option<Value>,
    required: bool,
) -> Html {
    let set = {
        let (node, name) = (node.to_string(), name.to_string());
        move |value: Option<Value>| {
            Msg::Act(Action::SetConfig {
                node: node.clone(),
                field: name.clone(),
                value,
            })
        }
    };
    let help = prop["description"]
        .as_str()
        .map(|d| html! { <small>{ d }</small> });
    let ty = match &prop["type"] {
        Value::Array(types) => types
            .iter()
            .find(|t| *t != "null")
            .cloned()
            .unwrap_or(Value::Null),
        t => t.clone(),
    };
    let options: Option<Vec<String>> = prop["enum"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .or_else(|| {
            prop["oneOf"].as_array().map(|alts| {
                alts.iter()
                    .filter_map(|a| {
                        a["const"]
                            .as_str()
                            .or_else(|| a["enum"].get(0).and_then(Value::as_str))
                    })
                    .map(str::to_string)
                    .collect()
            })
        })
        .filter(|o: &Vec<String>| !o.is_empty());
    let input_id = format!("cfg-{name}");
    let control = if let Some(options) = options {
        let current = value
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let onchange = link.callback(move |e: Event| {
            let select: web_sys::HtmlSelectElement = e.target_unchecked_into();
            let v = select.value();
            set(if v.is_empty() {
                None
            } else {
                Some(Value::String(v))
            })
        });
        html! {
            <select id={input_id.clone()} {onchange}>
                if !required { <option value="" selected={current.is_empty()}>{ "(default)" }</option> }
                { for options.iter().map(|o| html! { <option value={o.clone()} selected={*o == current}>{ o }</option> }) }
            </select>
        }
    } else if ty == "boolean" {
        let checked = value.as_ref().and_then(Value::as_bool).unwrap_or(false);
        let onchange = link.callback(move |e: Event| {
            let input: web_sys::HtmlInputElement = e.target_unchecked_into();
            set(Some(Value::Bool(input.checked())))
        });
        html! { <input id={input_id.clone()} type="checkbox" {checked} {onchange} /> }
    } else if ty == "integer" || ty == "number" {
        let shown = value.as_ref().map(|v| v.to_string()).unwrap_or_default();
        let integer = ty == "integer";
        let oninput = link.callback(move |e: InputEvent| {
            let input: web_sys::HtmlInputElement = e.target_unchecked_into();
            let text = input.value();
            let v = if text.trim().is_empty() {
                None
            } else if integer {
                text.trim().parse::<i64>().ok().map(Value::from)
            } else {
                text.trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
            };
            set(v)
        });
        html! { <input id={input_id.clone()} type="number" value={shown} {oninput} /> }
    } else if ty == "string" {
        let text = value
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let long = matches!(
            name,
            "source" | "jq" | "body" | "text" | "html" | "message" | "condition"
        );
        let oninput = link.callback(move |e: InputEvent| {
            let v = if long {
                let a: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
                a.value()
            } else {
                let i: web_sys::HtmlInputElement = e.target_unchecked_into();
                i.value()
            };
            set(Some(Value::String(v)))
        });
        if long {
            html! { <textarea id={input_id.clone()} class="mono" rows="6" value={text} {oninput} /> }
        } else {
            html! { <input id={input_id.clone()} value={text} {oninput} /> }
        }
    } else {
        // Objects, arrays, templates of any type: JSON, applied when valid.
        let text = value.as_ref().map(pretty).unwrap_or_default();
        let onchange = link.callback(move |e: Event| {
            let a: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
            let text = a.value();
            if text.trim().is_empty() {
                return set(None);
            }
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => set(Some(v)),
                Err(_) => set(Some(Value::String(text))),
            }
        });
        html! { <textarea id={input_id.clone()} class="mono" rows="4" value={text} {onchange} /> }
    };
    html! {
        <div class="field" data-field={name.to_string()}>
            <label for={input_id}>{ name }{ if required { " *" } else { "" } }</label>
            { control }
            { for help }
        </div>
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A step or run error: its message (and node), else the JSON.
fn error_text(e: &Value) -> String {
    match (e["node"].as_str(), e["message"].as_str()) {
        (Some(node), Some(m)) => format!("{node}: {m}"),
        (None, Some(m)) => m.to_string(),
        _ => e
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string()),
    }
}

fn duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..1_000_000 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.1}s", us as f64 / 1e6),
    }
}

/// Where output `port` sits on a node at `at`: spread along the right side.
fn port_at(at: (f64, f64), ports: &[String], port: &str) -> (f64, f64) {
    let i = ports.iter().position(|p| p == port).unwrap_or(0);
    let n = ports.len().max(1);
    (
        at.0 + NODE_W,
        at.1 + NODE_H * (i as f64 + 1.0) / (n as f64 + 1.0),
    )
}

/// A horizontal S-curve between two points.
fn curve(x1: f64, y1: f64, x2: f64, y2: f64) -> String {
    let bend = ((x2 - x1).abs() / 2.0).max(40.0);
    format!(
        "M {x1} {y1} C {} {y1}, {} {y2}, {x2} {y2}",
        x1 + bend,
        x2 - bend
    )
}
