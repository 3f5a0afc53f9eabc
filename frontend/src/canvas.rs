//! The canvas: one workflow as SVG, synced as a Loro document, with its
//! runs and the other people looking at it.
//!
//! The component holds the workflow's `WorkflowDoc`. Gestures become
//! [`Action`]s on the [`Editor`]; when the workflow changed, the new
//! workflow is applied to the document (minimal operations; a drag writes
//! only the moved positions) and exactly the new operations go to the
//! engine as `doc.update`. Updates from others are imported and the canvas
//! redrawn from the document, keeping the view and the selection.
//!
//! Drawing is split so that panning and zooming never re-render the graph
//! (see [`crate::scene`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde_json::{Value, json};
use sluice_model::doc::{Presence, WorkflowDoc, decode_version, encode_version};
use sluice_model::{kinds, validate};
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{Element, KeyboardEvent, PointerEvent, WheelEvent};
use yew::prelude::*;

use crate::inspector::{JsonTree, field, resolve};
use crate::net::{self, Socket};
use crate::scene::{self, Scene, SceneView, StepMark, curve, error_text, port_at};
use crate::state::{Action, Change, Editor, NODE_H, NODE_W, Rect};

#[derive(Properties, PartialEq)]
pub struct Props {
    pub workflow: String,
    /// A run to show as it ran (`#/w/<workflow>/r/<run>`).
    #[prop_or_default]
    pub run: Option<String>,
}

pub enum Msg {
    Server(Value),
    Closed,
    Down(PointerEvent),
    Move(PointerEvent),
    Up(PointerEvent),
    Wheel(WheelEvent),
    Key(KeyboardEvent),
    KeyUp(KeyboardEvent),
    /// A palette entry clicked (added at the middle of the view).
    Add(String),
    /// A palette entry pressed: it may be dragged onto the canvas.
    PaletteDown(String, PointerEvent),
    Search(String),
    SearchKey(KeyboardEvent),
    /// Double click on the background: quick-add at that point.
    QuickAdd(web_sys::MouseEvent),
    QuickSearch(String),
    QuickKey(KeyboardEvent),
    QuickPick(String),
    QuickClose,
    Fit,
    /// Centre the canvas on this world point (a click in the minimap).
    CenterOn(f64, f64),
    /// An edit from the inspector.
    Act(Action),
    Undo,
    Redo,
    RunInput(String),
    Run,
    /// A run started; true when it is a retry (it keeps the pinned view).
    Started(Result<Value, String>, bool),
    /// A run's detail (`GET /runs/{id}`) arrived.
    Detail(Result<Value, String>),
    Logs(String, Result<Value, String>),
    Runs(Result<Value, String>),
    /// Show the next page of older runs.
    OlderRuns,
    OlderRunsLoaded(Result<Value, String>),
    /// Open a run from the list: its pinned workflow, read-only.
    OpenRun(String),
    Pinned(String, Result<Value, String>),
    CloseRun,
    Retry(&'static str),
    Credentials(Result<Value, String>),
    /// Show or hide the version history.
    History,
    Versions(Result<Value, String>),
    /// Show a past version on the canvas, read-only.
    ViewVersion(String),
    VersionLoaded(String, Result<Value, String>),
    Restore(String),
    Restored(Result<Value, String>),
    /// Refresh this viewer's presence before it expires.
    Heartbeat,
    /// Send the pointer position held back by the rate limit.
    FlushCursor,
    /// The page is going away (or into the back-forward cache): close the
    /// socket now, so the others stop seeing this viewer at once.
    Leave,
}

/// One node's part of the shown run: its last attempt.
#[derive(Clone, Debug, Default)]
struct StepView {
    mark: Option<StepMark>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<Value>,
}

/// The run shown on the canvas: the last one started here (over the live
/// workflow), or one opened from the list (over its pinned version).
struct RunView {
    id: String,
    status: String,
    output: Value,
    error: Value,
    steps: BTreeMap<String, StepView>,
    logs: Vec<Value>,
    /// The workflow as this run ran it, when opened from the list.
    pinned: Option<Editor>,
    version: Option<String>,
}

impl RunView {
    fn new(id: String) -> RunView {
        RunView {
            id,
            status: "running".into(),
            output: Value::Null,
            error: Value::Null,
            steps: BTreeMap::new(),
            logs: Vec::new(),
            pinned: None,
            version: None,
        }
    }

    fn marks(&self) -> BTreeMap<String, StepMark> {
        self.steps
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.mark.clone()?)))
            .collect()
    }

    fn apply_detail(&mut self, detail: &Value) {
        self.status = detail["status"]
            .as_str()
            .unwrap_or(&self.status)
            .to_string();
        self.output = detail["output"].clone();
        self.error = detail["error"].clone();
        if let Some(v) = detail["version"].as_str() {
            self.version = Some(v.to_string());
        }
        for step in detail["steps"].as_array().into_iter().flatten() {
            let Some(node) = step["node"].as_str() else {
                continue;
            };
            let error = step.get("error").cloned();
            self.steps.insert(
                node.to_string(),
                StepView {
                    mark: Some(StepMark {
                        status: step["status"].as_str().unwrap_or_default().to_string(),
                        attempt: step["attempt"].as_u64().unwrap_or(1),
                        duration_us: step["duration_us"].as_u64(),
                        error: error.as_ref().map(error_text),
                    }),
                    input: step.get("input").cloned(),
                    output: step.get("output").cloned(),
                    error,
                },
            );
        }
    }
}

/// A past version shown on the canvas.
struct VersionView {
    version: String,
    summary: String,
    editor: Editor,
}

/// A row of the runs list.
#[derive(Clone, Debug)]
struct RunRow {
    id: String,
    status: String,
    trigger: String,
    created_at_us: u64,
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
    /// A palette entry being dragged in (screen point of the page).
    Palette {
        kind: String,
        start: (f64, f64),
        now: Option<(f64, f64)>,
    },
}

/// Another viewer, from presence.
#[derive(Clone, Debug, PartialEq)]
struct Viewer {
    name: String,
    color: String,
    cursor: Option<(f64, f64)>,
    selected: Vec<String>,
}

/// A listener on the window (event name, callback), removed on destroy.
type PageListener = (&'static str, Closure<dyn FnMut(web_sys::Event)>);

/// The quick-add box (double click on the background).
struct QuickAdd {
    screen: (f64, f64),
    world: (f64, f64),
    query: String,
}

pub struct Canvas {
    doc: WorkflowDoc,
    editor: Option<Editor>,
    socket: Option<Socket>,
    drag: Drag,
    /// Node id → problems, from the model's validation.
    problems: BTreeMap<String, Vec<String>>,
    /// Why the last gesture was refused (shown until the next one).
    refused: Option<String>,
    status: String,
    clipboard: Option<String>,
    svg: NodeRef,
    search_box: NodeRef,
    quick_box: NodeRef,
    next_ref: u64,
    /// The last of this window's updates the engine confirmed durable.
    acked_ref: u64,
    /// Run pressed while edits were still on their way: run once they land,
    /// so a run always runs what the window shows.
    run_when_saved: bool,
    fitted: bool,
    /// Undo and redo of this window's own edits only (Loro's UndoManager
    /// skips imported operations).
    undo: loro::UndoManager,
    /// A drag is one undo step.
    grouping: bool,
    run_input: String,
    run: Option<RunView>,
    running: bool,
    /// The runs list, newest first: at most `runs_shown` rows.
    runs: Vec<RunRow>,
    /// Rows the list shows: a page, plus a page per "Older runs".
    runs_shown: usize,
    /// Older runs exist beyond the list (the last page was full, or live
    /// runs pushed rows off its end).
    runs_more: bool,
    credentials: Vec<String>,
    /// The version history, when open.
    versions: Option<Vec<Value>>,
    version_view: Option<VersionView>,
    search: String,
    quick: Option<QuickAdd>,
    /// A palette drag just ended: the click that follows (until this
    /// time, ms) is not an add.
    swallow_click_until: f64,
    /// Focus the quick-add box after the next render.
    focus_quick: bool,
    /// The surface's size (read on gestures, not in every render).
    view_size: (f64, f64),
    workflow: String,
    presence: Presence,
    me: String,
    others: BTreeMap<String, Viewer>,
    last_cursor_ms: f64,
    /// The latest pointer position not yet sent (rate limit), and whether
    /// a flush is scheduled.
    pending_cursor: Option<(f64, f64)>,
    flush_scheduled: bool,
    _heartbeat: Option<(i32, Closure<dyn FnMut()>)>,
    /// Keys anywhere on the page (not only with focus inside the editor:
    /// a click on a button that then disappears leaves the focus on the
    /// body).
    _keys: Option<Closure<dyn FnMut(KeyboardEvent)>>,
    _keys_up: Option<Closure<dyn FnMut(KeyboardEvent)>>,
    /// Space is held: a drag anywhere pans.
    space: bool,
    _page: Vec<PageListener>,
    /// Bumped whenever what the scene shows changes.
    generation: u64,
    scene: RefCell<(u64, Rc<Scene>)>,
}

fn random_peer() -> u64 {
    let hi = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    let lo = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (hi << 32) | lo
}

const COLORS: &[&str] = &[
    "#e8590c", "#2b8a3e", "#5f3dc4", "#c2255c", "#1971c2", "#e67700", "#0b7285", "#862e9c",
];

fn now_ms() -> f64 {
    js_sys::Date::now()
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

    /// Reads the surface's size (a layout read: on gestures only).
    fn size(&mut self) -> (f64, f64) {
        if let Some(r) = self
            .svg
            .cast::<Element>()
            .map(|svg| svg.get_bounding_client_rect())
        {
            self.view_size = (r.width(), r.height());
        }
        self.view_size
    }

    /// Whether something read-only is shown: a past version, or a run
    /// opened from the list.
    fn viewing(&self) -> bool {
        self.version_view.is_some() || self.run.as_ref().is_some_and(|r| r.pinned.is_some())
    }

    /// The editor the canvas shows: a past version's, a pinned run's, else
    /// the live one.
    fn shown(&self) -> Option<&Editor> {
        if let Some(v) = &self.version_view {
            return Some(&v.editor);
        }
        match self.run.as_ref().and_then(|r| r.pinned.as_ref()) {
            Some(p) => Some(p),
            None => self.editor.as_ref(),
        }
    }

    fn shown_mut(&mut self) -> Option<&mut Editor> {
        if let Some(v) = &mut self.version_view {
            return Some(&mut v.editor);
        }
        match self.run.as_mut().and_then(|r| r.pinned.as_mut()) {
            Some(p) => Some(p),
            None => self.editor.as_mut(),
        }
    }

    fn fetch_versions(ctx: &Context<Self>) {
        let path = format!(
            "/api/v1/workflows/{}/versions?limit=30",
            ctx.props().workflow
        );
        ctx.link()
            .send_future(async move { Msg::Versions(net::call("GET", &path, None).await) });
    }

    fn touch(&mut self) {
        self.generation += 1;
    }

    /// Applies an action; saves and sends the workflow when it changed.
    fn act(&mut self, ctx: &Context<Self>, action: Action) -> bool {
        let viewing = self.viewing();
        if viewing
            && !matches!(
                action,
                Action::Select { .. }
                    | Action::SelectBox { .. }
                    | Action::ClearSelection
                    | Action::SelectAll
            )
        {
            self.refused = Some("this is a past run: go back to editing to change it".into());
            return true;
        }
        let Some(editor) = self.shown_mut() else {
            return false;
        };
        let before = editor.selected.clone();
        let result = editor.reduce(action);
        let selection_changed = self.shown().is_some_and(|e| e.selected != before);
        match result {
            Ok(Change::None) => false,
            Ok(Change::View) => {
                self.touch();
                if selection_changed {
                    self.announce();
                }
                true
            }
            Ok(Change::Workflow) => {
                self.touch();
                self.save(ctx);
                if selection_changed {
                    self.announce();
                }
                true
            }
            Ok(Change::Positions) => {
                self.touch();
                self.save_positions(ctx);
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

    /// A drag: only the selected nodes' positions into the document.
    fn save_positions(&mut self, ctx: &Context<Self>) {
        let Some(editor) = &self.editor else {
            return;
        };
        let before = self.doc.version();
        let mut changed = false;
        for node in editor
            .wf
            .nodes
            .iter()
            .filter(|n| editor.selected.contains(&n.id))
        {
            let value = serde_json::to_value(node.position).unwrap_or(Value::Null);
            match self.doc.set_node_field(&node.id, "position", &value) {
                Ok(c) => changed |= c,
                Err(_) => return self.save(ctx),
            }
        }
        if changed {
            self.send_since(ctx, &before);
        }
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
                let ids: std::collections::HashSet<&str> =
                    editor.wf.nodes.iter().map(|n| n.id.as_str()).collect();
                editor.selected.retain(|id| ids.contains(id.as_str()));
            }
            None => {
                self.editor = Some(Editor::new(wf));
                // The first full picture of the workflow: for `cargo xtask
                // bench editor`, and anyone profiling the page.
                if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
                    p.mark("sluice:workflow-loaded").ok();
                }
            }
        }
        if let Some(editor) = &self.editor {
            self.problems = problems(editor);
        }
        self.touch();
    }

    /// Tells the others what this viewer selected and where its pointer is.
    fn announce(&mut self) {
        let selected: Vec<String> = self
            .editor
            .as_ref()
            .map(|e| e.selected.iter().cloned().collect())
            .unwrap_or_default();
        let cursor = self
            .presence
            .states()
            .get(&self.me)
            .and_then(|v| v.get("cursor").cloned())
            .unwrap_or(Value::Null);
        self.publish(json!({"selected": selected, "cursor": cursor}));
    }

    fn send_cursor(&mut self) {
        let Some((x, y)) = self.pending_cursor.take() else {
            return;
        };
        self.last_cursor_ms = now_ms();
        let selected: Vec<String> = self
            .editor
            .as_ref()
            .map(|e| e.selected.iter().cloned().collect())
            .unwrap_or_default();
        self.publish(json!({"cursor": [x, y], "selected": selected}));
    }

    fn publish(&mut self, mut state: Value) {
        let n = u64::from_str_radix(&self.me[..self.me.len().min(8)], 16).unwrap_or(0);
        state["name"] = json!(format!("viewer {}", &self.me[..self.me.len().min(4)]));
        state["color"] = json!(COLORS[(n % COLORS.len() as u64) as usize]);
        let update = self.presence.set(&self.me, &state);
        if let Some(socket) = &self.socket {
            socket.send(&json!({
                "type": "presence", "workflow": self.workflow,
                "update": net::b64(&update)
            }));
        }
    }

    /// Others' presence, as viewers; true when the scene must change
    /// (someone's selection did).
    fn read_presence(&mut self) -> bool {
        let before: Vec<(String, Vec<String>)> = self
            .others
            .iter()
            .map(|(k, v)| (k.clone(), v.selected.clone()))
            .collect();
        self.others = self
            .presence
            .states()
            .into_iter()
            .filter(|(k, _)| *k != self.me)
            .map(|(k, v)| {
                let cursor = v["cursor"]
                    .as_array()
                    .and_then(|c| Some((c.first()?.as_f64()?, c.get(1)?.as_f64()?)));
                let viewer = Viewer {
                    name: v["name"].as_str().unwrap_or("someone").to_string(),
                    color: v["color"].as_str().unwrap_or("#888").to_string(),
                    cursor,
                    selected: v["selected"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect(),
                };
                (k, viewer)
            })
            .collect();
        let after: Vec<(String, Vec<String>)> = self
            .others
            .iter()
            .map(|(k, v)| (k.clone(), v.selected.clone()))
            .collect();
        before != after
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
                    if let Ok(bytes) = net::unb64(field("presence"))
                        && !bytes.is_empty()
                    {
                        self.presence.apply(&bytes).ok();
                        self.read_presence();
                    }
                    self.status = "saved".into();
                    self.announce();
                }
                self.reload();
                true
            }
            "doc.ack" => {
                if let Ok(r) = field("ref").parse::<u64>() {
                    self.acked_ref = self.acked_ref.max(r);
                }
                if self.acked_ref >= self.next_ref {
                    self.status = "saved".into();
                    if std::mem::take(&mut self.run_when_saved) {
                        ctx.link().send_message(Msg::Run);
                    }
                }
                true
            }
            "presence" => {
                if let Ok(bytes) = net::unb64(field("update")) {
                    self.presence.apply(&bytes).ok();
                    if self.read_presence() {
                        self.touch();
                    }
                }
                true
            }
            "error" => {
                self.status = field("message").to_string();
                true
            }
            "run_started" | "step_started" | "step_finished" | "step_skipped" | "log"
            | "run_finished" => self.on_run_event(ctx, &msg),
            _ => false,
        }
    }

    /// A live run event of this workflow: the runs list, and the shown run.
    fn on_run_event(&mut self, ctx: &Context<Self>, e: &Value) -> bool {
        let run = e["run"].as_str().unwrap_or_default().to_string();
        let ty = e["type"].as_str().unwrap_or_default();
        match ty {
            "run_started" if !self.runs.iter().any(|r| r.id == run) => {
                self.runs.insert(
                    0,
                    RunRow {
                        id: run.clone(),
                        status: "running".into(),
                        trigger: e["trigger"].as_str().unwrap_or_default().to_string(),
                        created_at_us: e["at_us"].as_u64().unwrap_or(0),
                    },
                );
                if self.runs.len() > self.runs_shown {
                    self.runs.truncate(self.runs_shown);
                    self.runs_more = true;
                }
            }
            "run_finished" => {
                if let Some(r) = self.runs.iter_mut().find(|r| r.id == run) {
                    r.status = e["status"].as_str().unwrap_or_default().to_string();
                }
            }
            _ => {}
        }
        let Some(shown) = self.run.as_mut().filter(|r| r.id == run) else {
            return ty == "run_started" || ty == "run_finished";
        };
        let node = e["node"].as_str().unwrap_or_default().to_string();
        match ty {
            "step_started" => {
                let step = shown.steps.entry(node).or_default();
                step.mark = Some(StepMark {
                    status: "running".into(),
                    attempt: e["attempt"].as_u64().unwrap_or(1),
                    duration_us: None,
                    error: None,
                });
            }
            "step_finished" => {
                let step = shown.steps.entry(node).or_default();
                step.mark = Some(StepMark {
                    status: e["status"].as_str().unwrap_or_default().to_string(),
                    attempt: e["attempt"].as_u64().unwrap_or(1),
                    duration_us: e["duration_us"].as_u64(),
                    error: e["error"].as_str().map(str::to_string),
                });
            }
            "step_skipped" => {
                shown.steps.entry(node).or_default().mark = Some(StepMark {
                    status: "skipped".into(),
                    attempt: 1,
                    duration_us: None,
                    error: None,
                });
            }
            "log" => shown.logs.push(e.clone()),
            "run_finished" => {
                shown.status = e["status"].as_str().unwrap_or_default().to_string();
                self.fetch_detail(ctx, &run);
            }
            _ => {}
        }
        self.touch();
        true
    }

    fn fetch_detail(&self, ctx: &Context<Self>, id: &str) {
        let path = format!("/api/v1/runs/{id}");
        ctx.link().send_future(async move {
            let detail = net::call("GET", &path, None).await;
            Msg::Detail(detail)
        });
        let id = id.to_string();
        ctx.link().send_future(async move {
            let logs = net::call("GET", &format!("/api/v1/runs/{id}/logs"), None).await;
            Msg::Logs(id, logs)
        });
    }

    fn fetch_runs(ctx: &Context<Self>) {
        let path = format!(
            "/api/v1/runs?workflow={}&limit={RUNS_PAGE}",
            ctx.props().workflow
        );
        ctx.link()
            .send_future(async move { Msg::Runs(net::call("GET", &path, None).await) });
    }

    /// The scene for the current state, rebuilt only when it changed.
    fn scene(&self) -> Rc<Scene> {
        let mut cache = self.scene.borrow_mut();
        if cache.0 != self.generation
            && let Some(editor) = self.shown()
        {
            let marks = self
                .run
                .as_ref()
                .filter(|_| self.version_view.is_none())
                .map(RunView::marks);
            let mut seen_by: HashMap<String, Vec<String>> = HashMap::new();
            for v in self.others.values() {
                for id in &v.selected {
                    seen_by.entry(id.clone()).or_default().push(v.color.clone());
                }
            }
            let problems = if self.viewing() {
                BTreeMap::new()
            } else {
                self.problems.clone()
            };
            *cache = (
                self.generation,
                Rc::new(scene::build(editor, &problems, marks.as_ref(), &seen_by)),
            );
        }
        cache.1.clone()
    }

    fn palette_matches(&self, query: &str) -> Vec<&'static kinds::KindSpec> {
        let q = query.trim().to_lowercase();
        // Matches in the kind's name first, then its category, then its
        // summary; catalog order within each.
        let mut ranked: Vec<(u8, &'static kinds::KindSpec)> = kinds::catalog()
            .iter()
            .filter_map(|k| {
                let rank = if q.is_empty() || k.kind.contains(&q) {
                    0
                } else if k.category.contains(&q) {
                    1
                } else if k.summary.to_lowercase().contains(&q) {
                    2
                } else {
                    return None;
                };
                Some((rank, k))
            })
            .collect();
        ranked.sort_by_key(|(rank, _)| *rank);
        ranked.into_iter().map(|(_, k)| k).collect()
    }

    fn add_at_center(&mut self, ctx: &Context<Self>, kind: String) -> bool {
        let (w, h) = self.size();
        let Some(editor) = &self.editor else {
            return false;
        };
        let at = editor.viewport.to_world(w / 2.0 - NODE_W / 2.0, h / 2.0);
        self.act(ctx, Action::AddNode { kind, at })
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
    let Some(target) = under(e) else {
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

fn under(e: &web_sys::MouseEvent) -> Option<Element> {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.element_from_point(e.client_x() as f32, e.client_y() as f32))
        .or_else(|| e.target().and_then(|t| t.dyn_into::<Element>().ok()))
}

/// Marks `sluice:first-render` now and `sluice:first-paint` two animation
/// frames later (the first frame with the workflow has been painted by
/// then), for `cargo xtask bench editor` and anyone profiling the page.
fn mark_first_paint() {
    let Some(w) = web_sys::window() else {
        return;
    };
    if let Some(p) = w.performance() {
        p.mark("sluice:first-render").ok();
    }
    let second = Closure::once_into_js(|| {
        if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
            p.mark("sluice:first-paint").ok();
        }
    });
    let first = Closure::once_into_js(move || {
        if let Some(w) = web_sys::window() {
            w.request_animation_frame(second.unchecked_ref()).ok();
        }
    });
    w.request_animation_frame(first.unchecked_ref()).ok();
}

fn focus(r: &NodeRef) {
    if let Some(el) = r.cast::<web_sys::HtmlElement>() {
        el.focus().ok();
    }
}

impl Component for Canvas {
    type Message = Msg;
    type Properties = Props;

    fn create(ctx: &Context<Self>) -> Self {
        let doc = WorkflowDoc::new();
        let peer = random_peer();
        doc.loro().set_peer_id(peer).ok();
        let undo = loro::UndoManager::new(doc.loro());
        let on_message = ctx.link().callback(Msg::Server);
        let on_close = ctx.link().callback(|()| Msg::Closed);
        let query = format!(
            "workflow={}",
            js_sys::encode_uri_component(&ctx.props().workflow)
        );
        let socket = Socket::open(
            &query,
            move |v| on_message.emit(v),
            move || on_close.emit(()),
        );
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
        Canvas::fetch_runs(ctx);
        if let Some(run) = &ctx.props().run {
            ctx.link().send_message(Msg::OpenRun(run.clone()));
        }
        ctx.link().send_future(async {
            Msg::Credentials(net::call("GET", "/api/v1/credentials", None).await)
        });
        // Presence entries expire after 30 s: refresh every 10.
        let heartbeat = {
            let link = ctx.link().clone();
            let tick = Closure::<dyn FnMut()>::new(move || link.send_message(Msg::Heartbeat));
            web_sys::window()
                .and_then(|w| {
                    w.set_interval_with_callback_and_timeout_and_arguments_0(
                        tick.as_ref().unchecked_ref(),
                        10_000,
                    )
                    .ok()
                })
                .map(|id| (id, tick))
        };
        let listen = |event: &str, make: fn(KeyboardEvent) -> Msg| {
            let link = ctx.link().clone();
            let on_key = Closure::<dyn FnMut(KeyboardEvent)>::new(move |e: KeyboardEvent| {
                link.send_message(make(e))
            });
            web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| {
                    d.add_event_listener_with_callback(event, on_key.as_ref().unchecked_ref())
                        .ok()
                })
                .map(|()| on_key)
        };
        let keys = listen("keydown", Msg::Key);
        let mut page: Vec<PageListener> = Vec::new();
        if let Some(w) = web_sys::window() {
            let link = ctx.link().clone();
            let hide =
                Closure::<dyn FnMut(web_sys::Event)>::new(move |_| link.send_message(Msg::Leave));
            // Back from the back-forward cache: the socket is gone; start
            // over rather than show a stale workflow.
            let show = Closure::<dyn FnMut(web_sys::Event)>::new(|e: web_sys::Event| {
                let persisted = js_sys::Reflect::get(&e, &"persisted".into())
                    .ok()
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false);
                if persisted && let Some(w) = web_sys::window() {
                    w.location().reload().ok();
                }
            });
            for (event, listener) in [("pagehide", hide), ("pageshow", show)] {
                if w.add_event_listener_with_callback(event, listener.as_ref().unchecked_ref())
                    .is_ok()
                {
                    page.push((event, listener));
                }
            }
        }
        let keys_up = listen("keyup", Msg::KeyUp);
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
            search_box: NodeRef::default(),
            quick_box: NodeRef::default(),
            next_ref: 0,
            acked_ref: 0,
            run_when_saved: false,
            fitted: false,
            undo,
            grouping: false,
            run_input: "{}".into(),
            run: None,
            running: false,
            runs: Vec::new(),
            runs_shown: RUNS_PAGE,
            runs_more: false,
            credentials: Vec::new(),
            versions: None,
            version_view: None,
            search: String::new(),
            quick: None,
            swallow_click_until: 0.0,
            focus_quick: false,
            view_size: (1200.0, 800.0),
            workflow: ctx.props().workflow.clone(),
            presence: Presence::new(30_000),
            me: format!("{peer:016x}"),
            others: BTreeMap::new(),
            last_cursor_ms: 0.0,
            pending_cursor: None,
            flush_scheduled: false,
            _heartbeat: heartbeat,
            _keys: keys,
            _keys_up: keys_up,
            space: false,
            _page: page,
            generation: 1,
            scene: RefCell::new((0, Rc::default())),
        }
    }

    fn changed(&mut self, ctx: &Context<Self>, old: &Props) -> bool {
        if ctx.props().run != old.run
            && let Some(run) = &ctx.props().run
        {
            ctx.link().send_message(Msg::OpenRun(run.clone()));
        }
        true
    }

    fn destroy(&mut self, _ctx: &Context<Self>) {
        if let Some(w) = web_sys::window() {
            for (event, listener) in &self._page {
                w.remove_event_listener_with_callback(event, listener.as_ref().unchecked_ref())
                    .ok();
            }
        }
        if let Some(d) = web_sys::window().and_then(|w| w.document()) {
            for (event, listener) in [("keydown", &self._keys), ("keyup", &self._keys_up)] {
                if let Some(on_key) = listener {
                    d.remove_event_listener_with_callback(event, on_key.as_ref().unchecked_ref())
                        .ok();
                }
            }
        }
        if let (Some((id, _)), Some(w)) = (&self._heartbeat, web_sys::window()) {
            w.clear_interval_with_handle(*id);
        }
    }

    fn rendered(&mut self, ctx: &Context<Self>, _first: bool) {
        if std::mem::take(&mut self.focus_quick) {
            focus(&self.quick_box);
        }
        // Fit once the surface exists (its size is only known then).
        if !self.fitted && self.editor.is_some() && self.svg.get().is_some() {
            self.fitted = true;
            ctx.link().send_message(Msg::Fit);
            mark_first_paint();
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
            Msg::Leave => {
                if self.socket.is_some() {
                    let update = self.presence.remove(std::slice::from_ref(&self.me));
                    if let Some(socket) = &self.socket {
                        socket.send(&json!({
                            "type": "presence", "workflow": self.workflow,
                            "update": net::b64(&update)
                        }));
                    }
                    self.socket = None;
                }
                false
            }
            Msg::FlushCursor => {
                self.flush_scheduled = false;
                self.send_cursor();
                false
            }
            Msg::Heartbeat => {
                if self.socket.is_some() && self.editor.is_some() {
                    self.announce();
                }
                false
            }
            Msg::Down(e) => {
                self.refused = None;
                self.quick = None;
                self.size();
                let at = self.point(&e);
                if let Some(svg) = self.svg.cast::<Element>() {
                    svg.set_pointer_capture(e.pointer_id()).ok();
                }
                let viewing = self.viewing();
                let Some(editor) = self.shown() else {
                    return false;
                };
                let world = editor.viewport.to_world(at.0, at.1);
                let selected = editor.selected.clone();
                if self.space {
                    self.drag = Drag::Pan { last: at };
                    return true;
                }
                match hit(&e) {
                    (Some(node), Some(port)) if port != "in" && !viewing => {
                        self.drag = Drag::Wire {
                            from: node,
                            port,
                            now: world,
                        };
                        true
                    }
                    (Some(node), _) => {
                        if !selected.contains(&node) || e.shift_key() {
                            self.act(
                                ctx,
                                Action::Select {
                                    id: node,
                                    additive: e.shift_key(),
                                },
                            );
                        }
                        if !viewing {
                            self.drag = Drag::Nodes {
                                last: world,
                                moved: false,
                            };
                            self.grouping = self.undo.group_start().is_ok();
                        }
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
            Msg::PaletteDown(kind, e) => {
                if let Some(el) = e.target().and_then(|t| t.dyn_into::<Element>().ok()) {
                    el.set_pointer_capture(e.pointer_id()).ok();
                }
                self.drag = Drag::Palette {
                    kind,
                    start: (f64::from(e.client_x()), f64::from(e.client_y())),
                    now: None,
                };
                false
            }
            Msg::Move(e) => {
                let at = self.point(&e);
                if let Drag::Palette { start, now, .. } = &mut self.drag {
                    let p = (f64::from(e.client_x()), f64::from(e.client_y()));
                    if now.is_some() || (p.0 - start.0).hypot(p.1 - start.1) > 4.0 {
                        *now = Some(p);
                        return true;
                    }
                    return false;
                }
                let Some(world) = self.shown().map(|e| e.viewport.to_world(at.0, at.1)) else {
                    return false;
                };
                let mut drag = std::mem::replace(&mut self.drag, Drag::None);
                let changed = match &mut drag {
                    Drag::None | Drag::Palette { .. } => false,
                    Drag::Pan { last } => {
                        if let Some(editor) = self.shown_mut() {
                            editor.viewport.pan(at.0 - last.0, at.1 - last.1);
                        }
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
                };
                self.drag = drag;
                // The cursor for the others, at most 20 times a second;
                // the last position is always sent (a trailing flush).
                if !self.viewing() {
                    self.pending_cursor = Some(world);
                    if now_ms() - self.last_cursor_ms > 50.0 {
                        self.send_cursor();
                    } else if !self.flush_scheduled {
                        self.flush_scheduled = true;
                        let link = ctx.link().clone();
                        let flush =
                            Closure::once_into_js(move || link.send_message(Msg::FlushCursor));
                        if let Some(w) = web_sys::window() {
                            w.set_timeout_with_callback_and_timeout_and_arguments_0(
                                flush.unchecked_ref(),
                                60,
                            )
                            .ok();
                        }
                    }
                }
                changed
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
                    Drag::Palette { kind, now, .. } => {
                        let Some(_) = now else {
                            return false;
                        };
                        self.swallow_click_until = now_ms() + 400.0;
                        let on_canvas = under(&e)
                            .and_then(|el| el.closest(".surface").ok().flatten())
                            .is_some();
                        if on_canvas && !self.viewing() {
                            let at = self.point(&e);
                            if let Some(editor) = &self.editor {
                                let (x, y) = editor.viewport.to_world(at.0, at.1);
                                let at = (x - NODE_W / 2.0, y - NODE_H / 2.0);
                                self.act(ctx, Action::AddNode { kind, at });
                            }
                        }
                        true
                    }
                    Drag::Pan { .. } | Drag::None => true,
                }
            }
            Msg::Wheel(e) => {
                e.prevent_default();
                let at = self.point(&e);
                let Some(editor) = self.shown_mut() else {
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
                    .is_some_and(|el| {
                        matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT")
                    });
                let command = e.ctrl_key() || e.meta_key();
                let key = e.key();
                if typing && !(command && key == "Enter") {
                    return false;
                }
                let action = match (command, key.as_str()) {
                    (false, " ") => {
                        self.space = true;
                        e.prevent_default();
                        return false;
                    }
                    (false, "Delete" | "Backspace") => Some(Action::DeleteSelected),
                    (false, "Escape") if self.version_view.is_some() => {
                        self.version_view = None;
                        self.touch();
                        return true;
                    }
                    (false, "Escape") if self.viewing() => {
                        ctx.link().send_message(Msg::CloseRun);
                        None
                    }
                    (false, "Escape") => Some(Action::ClearSelection),
                    (false, "/") => {
                        focus(&self.search_box);
                        None
                    }
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
                        if let Some(editor) = self.shown() {
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
            Msg::KeyUp(e) => {
                if e.key() == " " {
                    self.space = false;
                }
                false
            }
            Msg::Add(kind) => {
                if now_ms() < self.swallow_click_until {
                    return false;
                }
                self.add_at_center(ctx, kind)
            }
            Msg::Search(q) => {
                self.search = q;
                true
            }
            Msg::SearchKey(e) => match e.key().as_str() {
                "Enter" => {
                    let first = self.palette_matches(&self.search).first().map(|k| k.kind);
                    match first {
                        Some(kind) => self.add_at_center(ctx, kind.to_string()),
                        None => false,
                    }
                }
                "Escape" => {
                    self.search.clear();
                    focus(&self.svg);
                    true
                }
                _ => false,
            },
            Msg::QuickAdd(e) => {
                if self.viewing() || hit(&e).0.is_some() {
                    return false;
                }
                let at = self.point(&e);
                let Some(editor) = &self.editor else {
                    return false;
                };
                self.quick = Some(QuickAdd {
                    screen: at,
                    world: editor.viewport.to_world(at.0, at.1),
                    query: String::new(),
                });
                self.focus_quick = true;
                true
            }
            Msg::QuickSearch(q) => {
                if let Some(quick) = &mut self.quick {
                    quick.query = q;
                }
                true
            }
            Msg::QuickKey(e) => match e.key().as_str() {
                "Enter" => {
                    e.prevent_default();
                    let first = self.quick.as_ref().and_then(|q| {
                        self.palette_matches(&q.query)
                            .first()
                            .map(|k| k.kind.to_string())
                    });
                    match first {
                        Some(kind) => Component::update(self, ctx, Msg::QuickPick(kind)),
                        None => false,
                    }
                }
                "Escape" => Component::update(self, ctx, Msg::QuickClose),
                _ => false,
            },
            Msg::QuickPick(kind) => {
                let Some(quick) = self.quick.take() else {
                    return false;
                };
                let at = (quick.world.0, quick.world.1 - NODE_H / 2.0);
                self.act(ctx, Action::AddNode { kind, at });
                focus(&self.svg);
                true
            }
            Msg::QuickClose => {
                self.quick = None;
                focus(&self.svg);
                true
            }
            Msg::Act(action) => self.act(ctx, action),
            Msg::Undo | Msg::Redo => {
                if self.viewing() {
                    return false;
                }
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
            Msg::Run if self.acked_ref < self.next_ref && self.socket.is_some() => {
                // Edits still on their way to the engine: run after them.
                self.run_when_saved = true;
                self.running = true;
                true
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
                    let body = json!({"input": input});
                    Msg::Started(net::call("POST", &path, Some(&body)).await, false)
                });
                true
            }
            Msg::Started(result, retry) => {
                self.running = false;
                match result {
                    Ok(run) => {
                        let id = run["id"].as_str().unwrap_or_default().to_string();
                        // A retry keeps the pinned workflow it runs.
                        let pinned = self.run.take().and_then(|r| r.pinned).filter(|_| retry);
                        let mut view = RunView::new(id.clone());
                        view.pinned = pinned;
                        self.run = Some(view);
                        self.touch();
                        // It may be over already: read what happened so far.
                        self.fetch_detail(ctx, &id);
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::Detail(result) => {
                match result {
                    Ok(detail) => {
                        let id = detail["id"].as_str().unwrap_or_default();
                        if let Some(r) = self.runs.iter_mut().find(|r| r.id == id) {
                            r.status = detail["status"].as_str().unwrap_or_default().to_string();
                        }
                        if let Some(run) = self.run.as_mut().filter(|r| r.id == id) {
                            run.apply_detail(&detail);
                            self.touch();
                        }
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::Logs(id, result) => {
                if let (Ok(Value::Array(lines)), Some(run)) =
                    (result, self.run.as_mut().filter(|r| r.id == id))
                {
                    run.logs = lines;
                    return true;
                }
                false
            }
            Msg::Runs(result) => {
                match result {
                    Ok(list) => {
                        self.runs = run_rows(&list);
                        self.runs_shown = RUNS_PAGE;
                        self.runs_more = self.runs.len() >= RUNS_PAGE;
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::OlderRuns => {
                let mut path = format!(
                    "/api/v1/runs?workflow={}&limit={RUNS_PAGE}",
                    ctx.props().workflow
                );
                if let Some(last) = self.runs.last() {
                    path.push_str(&format!("&before={}", last.id));
                }
                ctx.link().send_future(async move {
                    Msg::OlderRunsLoaded(net::call("GET", &path, None).await)
                });
                false
            }
            Msg::OlderRunsLoaded(result) => {
                match result {
                    Ok(list) => {
                        let page = run_rows(&list);
                        self.runs_more = page.len() >= RUNS_PAGE;
                        for r in page {
                            // A run can be on both sides of a page boundary
                            // that live runs moved.
                            if !self.runs.iter().any(|x| x.id == r.id) {
                                self.runs.push(r);
                            }
                        }
                        self.runs_shown = self.runs.len().max(RUNS_PAGE);
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::OpenRun(id) => {
                let path = format!("/api/v1/runs/{id}/workflow");
                ctx.link().send_future(async move {
                    let wf = net::call("GET", &path, None).await;
                    Msg::Pinned(id, wf)
                });
                false
            }
            Msg::Pinned(id, result) => {
                let wf = result
                    .and_then(|v| sluice_model::Workflow::from_value(v).map_err(|e| e.to_string()));
                match wf {
                    Ok(wf) => {
                        let mut pinned = Editor::new(wf);
                        if let Some(live) = &self.editor {
                            pinned.viewport = live.viewport;
                        }
                        let mut view = RunView::new(id.clone());
                        view.pinned = Some(pinned);
                        self.run = Some(view);
                        self.touch();
                        self.fetch_detail(ctx, &id);
                    }
                    Err(e) => self.status = format!("cannot show run {id}: {e}"),
                }
                true
            }
            Msg::CloseRun if self.version_view.is_some() => {
                self.version_view = None;
                self.touch();
                true
            }
            Msg::CloseRun => {
                if let Some(run) = &mut self.run {
                    run.pinned = None;
                }
                self.run = None;
                self.touch();
                true
            }
            Msg::Retry(from) => {
                let Some(run) = &self.run else {
                    return false;
                };
                let path = format!("/api/v1/runs/{}/retry", run.id);
                self.running = true;
                ctx.link().send_future(async move {
                    let body = json!({"from": from});
                    Msg::Started(net::call("POST", &path, Some(&body)).await, true)
                });
                true
            }
            Msg::Credentials(result) => {
                if let Ok(list) = result {
                    self.credentials = list
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["name"].as_str().map(str::to_string))
                        .collect();
                    return true;
                }
                false
            }
            Msg::History => {
                if self.versions.take().is_none() {
                    self.versions = Some(Vec::new());
                    Canvas::fetch_versions(ctx);
                }
                true
            }
            Msg::Versions(result) => {
                match result {
                    Ok(Value::Array(list)) => self.versions = Some(list),
                    Ok(_) => {}
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::ViewVersion(version) => {
                let path = format!(
                    "/api/v1/workflows/{}/versions/{}",
                    ctx.props().workflow,
                    js_sys::encode_uri_component(&version)
                );
                ctx.link().send_future(async move {
                    let wf = net::call("GET", &path, None).await;
                    Msg::VersionLoaded(version, wf)
                });
                false
            }
            Msg::VersionLoaded(version, result) => {
                let wf = result
                    .and_then(|v| sluice_model::Workflow::from_value(v).map_err(|e| e.to_string()));
                match wf {
                    Ok(wf) => {
                        let mut editor = Editor::new(wf);
                        if let Some(live) = &self.editor {
                            editor.viewport = live.viewport;
                        }
                        let summary = self
                            .versions
                            .iter()
                            .flatten()
                            .find(|v| v["version"] == version.as_str())
                            .and_then(|v| v["summary"].as_str())
                            .unwrap_or_default()
                            .to_string();
                        self.version_view = Some(VersionView {
                            version,
                            summary,
                            editor,
                        });
                        self.touch();
                    }
                    Err(e) => self.status = format!("cannot show version {version}: {e}"),
                }
                true
            }
            Msg::Restore(version) => {
                let path = format!(
                    "/api/v1/workflows/{}/versions/{}/restore",
                    ctx.props().workflow,
                    js_sys::encode_uri_component(&version)
                );
                ctx.link().send_future(async move {
                    Msg::Restored(net::call("POST", &path, Some(&json!({}))).await)
                });
                false
            }
            Msg::Restored(result) => {
                match result {
                    Ok(_) => {
                        // The restore arrives as a document update, like
                        // any edit; the history gains a version.
                        self.version_view = None;
                        self.touch();
                        self.status = "restored".into();
                        if self.versions.is_some() {
                            Canvas::fetch_versions(ctx);
                        }
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::CenterOn(wx, wy) => {
                let (w, h) = self.size();
                let Some(editor) = self.shown_mut() else {
                    return false;
                };
                editor.viewport.center_on(wx, wy, w, h);
                true
            }
            Msg::Fit => {
                let (w, h) = self.size();
                let Some(editor) = self.shown_mut() else {
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
        let Some(editor) = self.shown() else {
            return html! { <div class="canvas loading">{ &self.status }</div> };
        };
        let v = editor.viewport;
        let scene = self.scene();
        let overlay = match &self.drag {
            Drag::Band { start, now, .. } => {
                let r = Rect::spanning(*start, *now);
                html! { <rect class="band" x={r.x.to_string()} y={r.y.to_string()} width={r.w.to_string()} height={r.h.to_string()} /> }
            }
            Drag::Wire { from, port, now } => scene
                .nodes
                .iter()
                .find(|n| &n.id == from)
                .map(|n| {
                    let (x1, y1) = port_at((n.x, n.y), &n.ports, port);
                    html! { <path class="edge wire" d={curve(x1, y1, now.0, now.1)} /> }
                })
                .unwrap_or_default(),
            _ => html! {},
        };
        let ghost = match &self.drag {
            Drag::Palette {
                kind,
                now: Some((x, y)),
                ..
            } => html! {
                <div class="ghost" style={format!("left: {}px; top: {}px", x - NODE_W / 2.0, y - NODE_H / 2.0)}>{ kind }</div>
            },
            _ => html! {},
        };
        let cursors = self.others.values().filter_map(|o| {
            let (x, y) = o.cursor?;
            Some(html! {
                <g class="cursor" transform={format!("translate({x} {y}) scale({})", 1.0 / v.zoom)} style={format!("color: {}", o.color)}>
                    <path d="M0 0 L0 16 L4.5 12 L8 19 L10.5 18 L7 11 L12.5 11 Z" />
                    <text x="14" y="22">{ &o.name }</text>
                </g>
            })
        });
        let refused = self
            .refused
            .as_ref()
            .map(|r| html! { <div class="refused" role="alert">{ r }</div> });
        let version_banner = self.version_view.as_ref().map(|v| {
            let version = v.version.clone();
            html! {
                <div class="run-banner version-banner" role="status">
                    <span>{ "Version " }<code>{ &v.version }</code>{ " · " }{ &v.summary }</span>
                    <button class="restore" onclick={link.callback(move |_| Msg::Restore(version.clone()))}>{ "Restore this version" }</button>
                    <button class="close-run" onclick={link.callback(|_| Msg::CloseRun)}>{ "Back to editing (Esc)" }</button>
                </div>
            }
        });
        let banner = self.run.as_ref().filter(|r| r.pinned.is_some() && self.version_view.is_none()).map(|r| {
            let failed = r.status == "failed";
            html! {
                <div class={classes!("run-banner", format!("run-{}", r.status))} role="status">
                    <span>{ "Run " }<code>{ &r.id }</code>{ " · " }<strong>{ &r.status }</strong>
                        { r.version.as_ref().map(|v| format!(" · version {v}")).unwrap_or_default() }</span>
                    if failed {
                        <button class="retry-failed" onclick={link.callback(|_| Msg::Retry("failed"))}>{ "Retry from failed step" }</button>
                    }
                    <button class="retry-start" disabled={r.status == "running"} onclick={link.callback(|_| Msg::Retry("start"))}>{ "Retry from start" }</button>
                    <button class="close-run" onclick={link.callback(|_| Msg::CloseRun)}>{ "Back to editing (Esc)" }</button>
                </div>
            }
        });
        let quick = self.quick.as_ref().map(|q| {
            let matches = self.palette_matches(&q.query);
            html! {
                <div class="quick-add" style={format!("left: {}px; top: {}px", q.screen.0, q.screen.1)}>
                    <input ref={self.quick_box.clone()} class="quick-search" placeholder="Add a node…" value={q.query.clone()}
                        aria-label="Search node kinds"
                        oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); Msg::QuickSearch(i.value()) })}
                        onkeydown={link.callback(Msg::QuickKey)} />
                    <ul>
                        { for matches.iter().take(8).map(|k| {
                            let kind = k.kind.to_string();
                            html! { <li><button class="kind" data-kind={k.kind} onclick={link.callback(move |_| Msg::QuickPick(kind.clone()))}>
                                <span class={classes!("dot", k.category)}></span>{ k.kind }</button></li> }
                        }) }
                    </ul>
                </div>
            }
        });
        // Boxes only when zoomed far out on a big graph: labels too small
        // to read cost more to paint than they show.
        let far = (v.zoom < 0.45 && scene.nodes.len() > 150) || v.zoom < 0.2;
        html! {
            <div class="editor"
                onpointermove={link.callback(Msg::Move)}
                onpointerup={link.callback(Msg::Up)}>
                { self.palette(ctx) }
                <div class="canvas">
                    <svg ref={self.svg.clone()} tabindex="0" class={classes!("surface", far.then_some("far"), self.viewing().then_some("viewing"))}
                        aria-label="Workflow canvas"
                        onpointerdown={link.callback(Msg::Down)}
                        ondblclick={link.callback(Msg::QuickAdd)}
                        onwheel={link.callback(Msg::Wheel)}>
                        <defs>
                            <pattern id="grid" width="20" height="20" patternUnits="userSpaceOnUse"
                                patternTransform={format!("translate({} {}) scale({})", v.x, v.y, v.zoom)}>
                                <circle cx="1" cy="1" r="1" class="grid-dot" />
                            </pattern>
                        </defs>
                        <rect class="grid" width="100%" height="100%" fill="url(#grid)" />
                        <g class="world" transform={format!("translate({} {}) scale({})", v.x, v.y, v.zoom)}>
                            <SceneView scene={scene.clone()} />
                            { overlay }
                            { for cursors }
                        </g>
                    </svg>
                    { minimap(ctx, &scene, editor, self.view_size) }
                    { for banner }
                    { for version_banner }
                    { for refused }
                    { for quick }
                    <div class="status" data-status={self.status.clone()}>
                        { &self.status }{ format!(" · {:.0}%", v.zoom * 100.0) }
                        { if self.others.is_empty() { String::new() } else { format!(" · {} more here", self.others.len()) } }
                    </div>
                </div>
                { ghost }
                { self.inspector(ctx, editor) }
            </div>
        }
    }
}

/// The whole graph small, with the visible part framed; shown for graphs
/// too big to see at once. A click centres the canvas on that point.
fn minimap(ctx: &Context<Canvas>, scene: &Scene, editor: &Editor, (w, h): (f64, f64)) -> Html {
    if scene.nodes.len() < 12 {
        return html! {};
    }
    // From the scene: `Editor::bounds` would lay the graph out again on
    // every pan frame.
    let Some(bounds) = scene.bounds else {
        return html! {};
    };
    let view = {
        let (x0, y0) = editor.viewport.to_world(0.0, 0.0);
        let (x1, y1) = editor.viewport.to_world(w, h);
        Rect::spanning((x0, y0), (x1, y1))
    };
    let all = bounds.union(&view);
    let pad = 40.0;
    let shown = Rect {
        x: all.x - pad,
        y: all.y - pad,
        w: all.w + 2.0 * pad,
        h: all.h + 2.0 * pad,
    };
    let view_box = format!("{} {} {} {}", shown.x, shown.y, shown.w, shown.h);
    let onclick = ctx.link().batch_callback(move |e: MouseEvent| {
        // Not `current_target`: Yew delegates events to its root.
        let rect = e
            .target()
            .and_then(|t| t.dyn_into::<Element>().ok())
            .and_then(|el| el.closest("svg.minimap").ok().flatten())
            .map(|el| el.get_bounding_client_rect())?;
        let at = (
            f64::from(e.client_x()) - rect.left(),
            f64::from(e.client_y()) - rect.top(),
        );
        let (wx, wy) = shown.point_in_view_box(at, (rect.width(), rect.height()));
        Some(Msg::CenterOn(wx, wy))
    });
    html! {
        <svg class="minimap" viewBox={view_box} preserveAspectRatio="xMidYMid meet" aria-hidden="true" {onclick}>
            <path class="mini-nodes" d={scene.mini.clone()} />
            <rect class="mini-view" x={view.x.to_string()} y={view.y.to_string()} width={view.w.to_string()} height={view.h.to_string()} />
        </svg>
    }
}

impl Canvas {
    fn palette(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let matches = self.palette_matches(&self.search);
        let mut groups: Vec<(&str, Vec<&kinds::KindSpec>)> = Vec::new();
        for k in matches {
            match groups.iter_mut().find(|(c, _)| *c == k.category) {
                Some((_, list)) => list.push(k),
                None => groups.push((k.category, vec![k])),
            }
        }
        let groups = groups.into_iter().map(|(category, list)| {
            html! {
                <li class="category">
                    <h3>{ category }</h3>
                    <ul>
                        { for list.into_iter().map(|k| {
                            let kind = k.kind.to_string();
                            let onclick = { let kind = kind.clone(); link.callback(move |_| Msg::Add(kind.clone())) };
                            let onpointerdown = link.callback(move |e: PointerEvent| Msg::PaletteDown(kind.clone(), e));
                            html! {
                                <li><button class="kind" data-kind={k.kind} title={k.summary} {onclick} {onpointerdown}>
                                    <span class={classes!("dot", k.category)}></span>{ k.kind }
                                </button></li>
                            }
                        }) }
                    </ul>
                </li>
            }
        });
        html! {
            <aside class="palette">
                <h2>{ "Nodes" }</h2>
                <input ref={self.search_box.clone()} class="palette-search" type="search" placeholder="Search ( / )"
                    aria-label="Search node kinds" value={self.search.clone()}
                    oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); Msg::Search(i.value()) })}
                    onkeydown={link.callback(Msg::SearchKey)} />
                <ul class="categories">{ for groups }</ul>
            </aside>
        }
    }

    /// The right-hand panel: running the workflow, the runs, and the
    /// selected node's form and its part of the shown run.
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
            let retry = (r.pinned.is_none() && r.status != "running").then(|| html! {
                <p class="retry">
                    if r.status == "failed" {
                        <button class="retry-failed" onclick={link.callback(|_| Msg::Retry("failed"))}>{ "Retry from failed step" }</button>
                    }
                    <button class="retry-start" onclick={link.callback(|_| Msg::Retry("start"))}>{ "Retry from start" }</button>
                </p>
            });
            html! {
                <div class={classes!("run", format!("run-{}", r.status))} data-run={r.id.clone()}>
                    <p><strong class="run-status">{ &r.status }</strong>{ " · " }<code>{ &r.id }</code></p>
                    { for error }
                    { for retry }
                    <h3>{ "Output" }</h3>
                    <pre class="run-output">{ crate::inspector::pretty(&r.output) }</pre>
                </div>
            }
        });
        let runs = self.runs.iter().map(|r| {
            let id = r.id.clone();
            let current = self.run.as_ref().is_some_and(|s| s.id == r.id);
            html! {
                <li><button class={classes!("run-row", format!("run-{}", r.status), current.then_some("current"))}
                    data-run={r.id.clone()} onclick={link.callback(move |_| Msg::OpenRun(id.clone()))}>
                    <span class="dot"></span>
                    <span class="when">{ when(r.created_at_us) }</span>
                    <span class="trigger">{ &r.trigger }</span>
                    <span class="status-text">{ &r.status }</span>
                </button></li>
            }
        });
        let selected = (editor.selected.len() == 1)
            .then(|| editor.selected.iter().next())
            .flatten()
            .and_then(|id| editor.wf.nodes.iter().find(|n| &n.id == id));
        let node = selected.map(|n| self.node_form(ctx, n));
        html! {
            <aside class="inspector">
                { for node }
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
                { self.history(ctx) }
                <section class="runs-panel">
                    <h2>{ "Runs" }</h2>
                    if self.runs.is_empty() {
                        <p class="summary">{ "No runs yet." }</p>
                    }
                    <ul class="runs">{ for runs }</ul>
                    if self.runs_more {
                        <button class="older-runs" onclick={link.callback(|_| Msg::OlderRuns)}>
                            { "Older runs" }
                        </button>
                    }
                </section>
            </aside>
        }
    }

    /// The version history: who changed what when, to view or restore.
    fn history(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let me = self.doc.loro().peer_id().to_string();
        let rows = self.versions.iter().flatten().map(|v| {
            let version = v["version"].as_str().unwrap_or_default().to_string();
            let author = match (v["author"].as_str(), v["message"].as_str()) {
                (Some(a), _) if a == me => "you".to_string(),
                (_, Some(m)) => m.to_string(),
                (Some(a), None) => format!("peer {}", &a[..a.len().min(6)]),
                _ => "someone".to_string(),
            };
            let current = self.version_view.as_ref().is_some_and(|w| w.version == version);
            let view = {
                let version = version.clone();
                link.callback(move |_| Msg::ViewVersion(version.clone()))
            };
            html! {
                <li class={classes!("version", current.then_some("current"))} data-version={version.clone()}>
                    <button class="view-version" onclick={view}>
                        <span class="when">{ when(v["at_us"].as_u64().unwrap_or(0)) }</span>
                        <span class="who">{ author }</span>
                        <span class="what">{ v["summary"].as_str().unwrap_or_default() }</span>
                    </button>
                </li>
            }
        });
        html! {
            <section class="history-panel">
                <h2>
                    <button class="history-toggle" aria-expanded={self.versions.is_some().to_string()}
                        onclick={link.callback(|_| Msg::History)}>
                        { if self.versions.is_some() { "▾ History" } else { "▸ History" } }
                    </button>
                </h2>
                if self.versions.is_some() {
                    <ol class="versions">{ for rows }</ol>
                }
            </section>
        }
    }

    fn node_form(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        let link = ctx.link();
        let spec = kinds::spec(&n.kind);
        let id = n.id.clone();
        let viewing = self.viewing();
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
        let problems = (!viewing)
            .then(|| self.problems.get(&n.id))
            .flatten()
            .map(|ps| html! {
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
                let set = {
                    let (node, name) = (id.clone(), name.clone());
                    link.callback(move |value: Option<Value>| {
                        Msg::Act(Action::SetConfig {
                            node: node.clone(),
                            field: name.clone(),
                            value,
                        })
                    })
                };
                field(
                    name,
                    &prop,
                    value,
                    required.contains(&name.as_str()),
                    &self.credentials,
                    set,
                )
            });
        let step = self.run.as_ref().and_then(|r| {
            let st = r.steps.get(&n.id)?;
            let logs: Vec<&Value> = r.logs.iter().filter(|l| l["node"] == n.id.as_str()).collect();
            let status = st.mark.as_ref().map_or("", |m| m.status.as_str()).to_string();
            Some(html! {
                <div class="step">
                    <h3>{ format!("This run: {status}") }</h3>
                    if let Some(e) = &st.error {
                        <pre class="step-error">{ error_text(e) }</pre>
                    }
                    <details open=true><summary>{ "Input" }</summary>
                        <div class="step-input">{ st.input.as_ref().map(|v| html! { <JsonTree value={v.clone()} /> }).unwrap_or_default() }</div></details>
                    <details open=true><summary>{ "Output" }</summary>
                        <div class="step-output">{ st.output.as_ref().map(|v| html! { <JsonTree value={v.clone()} /> }).unwrap_or_default() }</div></details>
                    if !logs.is_empty() {
                        <details open=true><summary>{ format!("Logs ({})", logs.len()) }</summary>
                            <ol class="logs">{ for logs.iter().map(|l| html! {
                                <li class={l["level"].as_str().unwrap_or("info").to_string()}>{ l["message"].as_str().unwrap_or_default() }</li>
                            }) }</ol></details>
                    }
                </div>
            })
        });
        html! {
            <section class="node-panel" data-node={n.id.clone()}>
                <h2>{ &n.id }</h2>
                <p class="summary"><code>{ &n.kind }</code>{ " · " }{ spec.map(|k| k.summary).unwrap_or("unknown kind") }</p>
                { for step }
                { for problems }
                <fieldset disabled={viewing}>
                    <label for="node-label">{ "Label" }</label>
                    <input id="node-label" value={n.label.clone().unwrap_or_default()} placeholder={n.id.clone()} oninput={on_label} />
                    <form class="config" onsubmit={Callback::from(|e: SubmitEvent| e.prevent_default())}>
                        { for fields }
                    </form>
                </fieldset>
            </section>
        }
    }
}

/// A run's start time, as the local clock shows it.
fn when(us: u64) -> String {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(us as f64 / 1000.0));
    let today = js_sys::Date::new_0().to_date_string() == date.to_date_string();
    let time = format!(
        "{:02}:{:02}:{:02}",
        date.get_hours(),
        date.get_minutes(),
        date.get_seconds()
    );
    if today {
        time
    } else {
        format!("{}-{:02} {time}", date.get_month() + 1, date.get_date())
    }
}

/// Runs per page of the runs list.
const RUNS_PAGE: usize = 20;

/// The runs list rows of a `GET /api/v1/runs` answer.
fn run_rows(list: &Value) -> Vec<RunRow> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|r| RunRow {
            id: r["id"].as_str().unwrap_or_default().to_string(),
            status: r["status"].as_str().unwrap_or_default().to_string(),
            trigger: r["trigger"].as_str().unwrap_or_default().to_string(),
            created_at_us: r["created_at_us"].as_u64().unwrap_or(0),
        })
        .collect()
}
