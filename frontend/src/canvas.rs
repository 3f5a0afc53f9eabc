//! The canvas: one workflow as SVG, synced as a Loro document, with its
//! runs and the other people looking at it.
//!
//! The component holds the workflow's document in a [`DocSync`] (plain
//! data, tested natively). Gestures become [`Action`]s on the [`Editor`];
//! when the workflow changed, the new workflow is applied to the document
//! (minimal operations; a drag writes only the moved positions) and
//! exactly the new operations go to the engine as `doc.update`. Updates
//! from others are imported and the canvas redrawn from the document,
//! keeping the view and the selection.
//!
//! This file is the component's shell: its state, its messages, creating
//! and tearing down, the edit path (`act`, `save`) and the surface. Each
//! other concern has a module holding its part of the state (a field of
//! [`Canvas`]), its messages (a variant of [`Msg`]), and an `impl Canvas`
//! block with its handler and its views, since they read the shown editor
//! and edit through `act`:
//! - `gestures`: pointer and keyboard;
//! - `palette`: the node kinds and the quick-add box;
//! - `inspector_host`: the right-hand panel and the node form;
//! - `runs`: running, the runs list and the shown run;
//! - `history`: the version history and a past version shown;
//! - `testing`: run one node, pinned test data, a webhook's test URL.
//!
//! Drawing is split so that panning and zooming never re-render the graph
//! (see [`crate::scene`]).

mod gestures;
mod history;
mod inspector_host;
mod menu;
mod node_view;
mod notes;
mod palette;
mod publish;
mod sharing;
pub use sharing::link_state;
mod runs;
mod testing;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use sluice_api::CredentialEntry;
use sluice_api::ws::{ClientMessage, Frame, ServerMessage};
use sluice_model::validate;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{Element, KeyboardEvent, PointerEvent, WheelEvent};
use yew::prelude::*;

use self::gestures::{Drag, Gestures};
use self::history::History;
use self::inspector_host::InspectorHost;
use self::palette::Palette;
use self::publish::Publishing;
use self::runs::{RunView, Runs};
use self::testing::Testing;
use crate::net::Socket;
use crate::scene::{self, Scene, SceneView, curve, port_at};
use crate::state::{Action, Change, Editor, NODE_H, NODE_W, Rect};
use crate::sync::{DocSync, Inbound};

#[derive(Properties, PartialEq)]
pub struct Props {
    pub workflow: String,
    /// A run to show as it ran (`#/w/<workflow>/r/<run>`).
    #[prop_or_default]
    pub run: Option<String>,
    /// A node to select (`#/w/<workflow>/n/<node>`).
    #[prop_or_default]
    pub node: Option<String>,
    /// `node` is to be open in the node view (`#/w/<workflow>/v/<node>`).
    #[prop_or_default]
    pub view: bool,
    /// Changes with every route here, so a node asked for again is.
    #[prop_or_default]
    pub route: u64,
}

pub enum Msg {
    /// A text frame from the socket, as it came.
    Server(String),
    Closed,
    /// Refresh this viewer's presence before it expires.
    Heartbeat,
    /// Send the pointer position held back by the rate limit.
    FlushCursor,
    /// The page is going away (or into the back-forward cache): close the
    /// socket now, so the others stop seeing this viewer at once.
    Leave,
    Down(PointerEvent),
    Move(PointerEvent),
    Up(PointerEvent),
    /// The pointer was taken away (a touch scrolled, the window lost it):
    /// whatever was being dragged stays where it was.
    Cancel,
    Wheel(WheelEvent),
    Key(KeyboardEvent),
    KeyUp(KeyboardEvent),
    Fit,
    /// Centre the canvas on this world point (a click in the minimap).
    CenterOn(f64, f64),
    /// An edit from the inspector.
    Act(Action),
    /// A field's text that is not a value yet, to keep (or to drop).
    KeepText {
        node: String,
        field: String,
        text: Option<String>,
    },
    /// The node panel's tab: its parameters (false) or its settings.
    NodeTab(bool),
    /// Open the new-credential form for this node's field.
    NewCredential {
        node: String,
        field: String,
    },
    /// The new-credential form closed, with the name saved (if any).
    CredentialDone(Option<String>),
    /// Show (or hide) the keyboard shortcuts.
    Shortcuts(bool),
    /// A choice in the node panel's connect controls: 0 the source, 1 the
    /// target, 2 this node's port.
    ConnectChoice(u8, String),
    /// Show (or hide) the node panel's connect controls.
    ConnectOpen(bool),
    Undo,
    Redo,
    /// Back to editing from a past version or a run opened from the list.
    CloseRun,
    Credentials(Result<Vec<CredentialEntry>, String>),
    /// Who this install is (the name others see in presence).
    Me(Result<sluice_api::Me, String>),
    Palette(palette::Msg),
    Menu(menu::Msg),
    Runs(runs::Msg),
    History(history::Msg),
    Publish(publish::Msg),
    Share(sharing::Msg),
    Testing(testing::Msg),
    NodeView(node_view::Msg),
    Note(notes::Msg),
}

/// A listener on the window (event name, callback), removed on destroy.
type PageListener = (&'static str, Closure<dyn FnMut(web_sys::Event)>);

pub struct Canvas {
    /// The document, the edits on their way, presence.
    sync: DocSync,
    /// The live workflow, once the document arrived.
    editor: Option<Editor>,
    socket: Option<Socket>,
    status: String,
    /// Node id → problems, from the model's validation.
    problems: BTreeMap<String, Vec<String>>,
    /// Why the last gesture was refused (shown until the next one).
    refused: Option<String>,
    gestures: Gestures,
    palette: Palette,
    inspector: InspectorHost,
    runs: Runs,
    history: History,
    publishing: Publishing,
    sharing: sharing::Sharing,
    testing: Testing,
    svg: NodeRef,
    fitted: bool,
    /// The keyboard shortcuts are shown (`?`).
    shortcuts: bool,
    /// The right-click menu, when open.
    menu: Option<menu::Menu>,
    menu_ref: NodeRef,
    /// Focus the menu's first item after the next render.
    focus_menu: bool,
    /// The surface's size (read on gestures, not in every render).
    view_size: (f64, f64),
    _heartbeat: Option<(i32, Closure<dyn FnMut()>)>,
    /// Keys anywhere on the page (not only with focus inside the editor:
    /// a click on a button that then disappears leaves the focus on the
    /// body).
    _keys: Option<Closure<dyn FnMut(KeyboardEvent)>>,
    _keys_up: Option<Closure<dyn FnMut(KeyboardEvent)>>,
    _page: Vec<PageListener>,
    /// Bumped whenever what the scene shows changes.
    generation: u64,
    scene: RefCell<(u64, Rc<Scene>)>,
    /// The node opened over the canvas with its input and output.
    node_view: node_view::NodeView,
    /// An element (CSS selector) to give the focus after the next render:
    /// where a dialog that closed was opened from.
    focus_after_render: Option<String>,
    /// The sticky note being written in (its id), and its text box
    /// (focused after the next render when `focus_note`).
    editing_note: Option<String>,
    focus_note: bool,
    note_ref: NodeRef,
    /// A node the URL asked to select (and, with `pending_view`, to open
    /// in the node view), once the workflow is there.
    pending_node: Option<String>,
    pending_view: bool,
    /// The node, whether its view is open, and the run the URL names now:
    /// they follow the selection, the node view and the run opened from
    /// the list.
    url_node: Option<String>,
    url_view: bool,
    url_run: Option<String>,
    /// The run opened from the list (pinned), or the one the URL asked for
    /// while it loads.
    open_run: Option<String>,
}

fn random_peer() -> u64 {
    let hi = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    let lo = (js_sys::Math::random() * f64::from(u32::MAX)) as u64;
    (hi << 32) | lo
}

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
        self.history.view.is_some() || self.runs.run.as_ref().is_some_and(|r| r.pinned.is_some())
    }

    /// The editor the canvas shows: a past version's, a pinned run's, else
    /// the live one.
    fn shown(&self) -> Option<&Editor> {
        if let Some(v) = &self.history.view {
            return Some(&v.editor);
        }
        match self.runs.run.as_ref().and_then(|r| r.pinned.as_ref()) {
            Some(p) => Some(p),
            None => self.editor.as_ref(),
        }
    }

    fn shown_mut(&mut self) -> Option<&mut Editor> {
        if let Some(v) = &mut self.history.view {
            return Some(&mut v.editor);
        }
        match self.runs.run.as_mut().and_then(|r| r.pinned.as_mut()) {
            Some(p) => Some(p),
            None => self.editor.as_mut(),
        }
    }

    fn touch(&mut self) {
        self.generation += 1;
    }

    fn send(&mut self, message: &ClientMessage) {
        if let Some(socket) = &self.socket
            && let Err(e) = socket.send(message)
        {
            self.status = format!("cannot send to the engine: {e}");
        }
    }

    /// Whether nothing shown can be changed here: a past run or version,
    /// or a workflow joined as a viewer.
    fn read_only(&self) -> bool {
        self.viewing()
            || self
                .sharing
                .link
                .as_ref()
                .is_some_and(|l| l.role == sluice_api::Role::Viewer)
    }

    /// Applies an action; saves and sends the workflow when it changed.
    fn act(&mut self, action: Action) -> bool {
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
        // A viewer's copy: the sharer would refuse its edits, so they are
        // not made here either (the copy stays the sharer's).
        if let Some(l) = self
            .sharing
            .link
            .as_ref()
            .filter(|l| l.role == sluice_api::Role::Viewer)
            && !matches!(
                action,
                Action::Select { .. }
                    | Action::SelectBox { .. }
                    | Action::ClearSelection
                    | Action::SelectAll
            )
        {
            self.refused = Some(format!(
                "you joined this workflow as a viewer: {}'s edits show here, yours are not made",
                l.host_name
            ));
            return true;
        }
        let Some(editor) = self.shown_mut() else {
            return false;
        };
        let before = editor.selected.clone();
        let result = editor.reduce(action);
        let selection_changed = self.shown().is_some_and(|e| e.selected != before);
        // A new-credential form belongs to the node it was opened on.
        if selection_changed
            && let Some((node, _)) = &self.inspector.credential_form
            && !self.shown().is_some_and(|e| e.selected.contains(node))
        {
            self.inspector.credential_form = None;
        }
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
                self.save();
                if selection_changed {
                    self.announce();
                }
                true
            }
            Ok(Change::Positions) => {
                self.touch();
                self.save_positions();
                true
            }
            Err(reason) => {
                self.refused = Some(reason);
                true
            }
        }
    }

    /// The editor's workflow into the document; the new operations out.
    fn save(&mut self) {
        let Some(editor) = &self.editor else {
            return;
        };
        let before = match self.sync.apply(&editor.wf) {
            Ok(Some(before)) => before,
            Ok(None) => return,
            Err(e) => {
                self.status = format!("could not apply the edit: {e}");
                return;
            }
        };
        self.problems = problems(editor);
        self.send_since(&before);
    }

    /// A drag: only the selected nodes' positions into the document.
    fn save_positions(&mut self) {
        let Some(editor) = &self.editor else {
            return;
        };
        let moved = editor
            .wf
            .nodes
            .iter()
            .filter(|n| editor.selected.contains(&n.id));
        match self.sync.set_positions(moved) {
            Ok(Some(before)) => self.send_since(&before),
            Ok(None) => {}
            Err(_) => self.save(),
        }
    }

    /// Sends the operations made since `before` to the engine.
    fn send_since(&mut self, before: &loro::VersionVector) {
        if self.socket.is_some()
            && let Some(update) = self.sync.update(before)
        {
            self.status = "saving…".into();
            self.send(&update);
        }
    }

    /// The workflow from the document, keeping the view and the selection.
    fn reload(&mut self) {
        match self.sync.reload(&mut self.editor) {
            Ok(false) => {}
            Ok(true) => {
                // The first full picture of the workflow: for `cargo xtask
                // bench editor`, and anyone profiling the page.
                if let Some(p) = web_sys::window().and_then(|w| w.performance()) {
                    p.mark("sluice:workflow-loaded").ok();
                }
            }
            Err(e) => {
                self.status = format!("the workflow cannot be shown: {e}");
                return;
            }
        }
        if let Some(editor) = &self.editor {
            self.problems = problems(editor);
        }
        self.select_pending();
        self.forget_missing();
        self.touch();
    }

    /// What refers to a node or a note that the workflow no longer has (a
    /// peer deleted it, a version was restored): closed or forgotten.
    fn forget_missing(&mut self) {
        self.forget_missing_notes();
        let has = |id: &str| {
            self.editor
                .as_ref()
                .is_some_and(|e| e.wf.nodes.iter().any(|n| n.id == id))
        };
        if self.node_view.open.as_deref().is_some_and(|id| !has(id)) {
            self.node_view.open = None;
        }
        if self
            .inspector
            .credential_form
            .as_ref()
            .is_some_and(|(node, _)| !has(node))
        {
            self.inspector.credential_form = None;
        }
    }

    /// Selects the node the URL named, once the workflow has it.
    fn select_pending(&mut self) {
        // In what is shown: a pinned run's workflow, else the live one.
        if self.shown().is_none() {
            return;
        }
        let Some(node) = self.pending_node.take() else {
            return;
        };
        let view = std::mem::take(&mut self.pending_view);
        let Some(editor) = self.shown_mut() else {
            return;
        };
        if editor.wf.nodes.iter().any(|n| n.id == node) {
            editor.selected = std::iter::once(node.clone()).collect();
            self.touch();
            if view {
                self.on_node_view(node_view::Msg::Open(node));
            } else {
                self.node_view.open = None;
            }
        }
    }

    /// Keeps the URL on what is open: `/r/<run>` the run opened from the
    /// list, `/n/<node>` the selected node, `/v/<node>` the node open in the
    /// node view (replacing the history entry: selecting is not a step back
    /// should undo).
    fn follow_selection_in_url(&mut self, ctx: &Context<Self>) {
        if self.pending_node.is_some() {
            return;
        }
        let Some(shown) = self.shown() else {
            return;
        };
        let (selected, view) = match &self.node_view.open {
            Some(open) => (Some(open.clone()), true),
            None => (
                (shown.selected.len() == 1)
                    .then(|| shown.selected.iter().next().cloned())
                    .flatten(),
                false,
            ),
        };
        if selected == self.url_node && view == self.url_view && self.open_run == self.url_run {
            return;
        }
        self.url_node = selected.clone();
        self.url_view = view;
        self.url_run = self.open_run.clone();
        let Some(w) = web_sys::window() else {
            return;
        };
        let route = crate::route::WorkflowRoute {
            workflow: ctx.props().workflow.clone(),
            run: self.url_run.clone(),
            node: selected,
            view,
        };
        let url = format!("#{}", route.to_hash(crate::app::encode));
        if let Ok(h) = w.history() {
            h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url))
                .ok();
        }
    }

    /// The live editor's selection, for presence.
    fn my_selection(&self) -> Vec<String> {
        self.editor
            .as_ref()
            .map(|e| e.selected.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Tells the others what this viewer selected and where its pointer is.
    fn announce(&mut self) {
        let message = self.sync.announce(self.my_selection());
        self.send(&message);
    }

    /// Sends the pointer position held back by the rate limit, if any.
    fn send_cursor(&mut self) {
        if let Some(message) = self.sync.cursor(self.my_selection(), now_ms()) {
            self.send(&message);
        }
    }

    fn on_server(&mut self, ctx: &Context<Self>, text: &str) -> bool {
        // A frame that is neither a document message nor a run event this
        // editor knows (a newer engine's) is not for it: ignored, as any
        // message of an unknown type always was.
        let Ok(frame) = serde_json::from_str::<Frame>(text) else {
            return false;
        };
        let msg = match frame {
            Frame::Run(event) => return self.on_run_event(ctx, &event),
            Frame::Doc(ServerMessage::Error { message, .. }) => {
                self.status = message;
                return true;
            }
            Frame::Doc(msg) => msg,
        };
        match self.sync.receive(&msg) {
            Some(Inbound::Refused(e)) => {
                self.status = format!("a bad update from the engine: {e}");
                true
            }
            Some(Inbound::Doc { synced, reply }) => {
                // The draft changed (ours arrived, or someone else's edit).
                ctx.link().send_message(publish::Msg::Refresh);
                if synced {
                    if let Some(reply) = reply {
                        self.send(&reply);
                    }
                    self.status = "saved".into();
                    self.announce();
                }
                self.reload();
                true
            }
            Some(Inbound::Acked { all }) => {
                if all {
                    self.status = "saved".into();
                    ctx.link().send_message(publish::Msg::Refresh);
                    if std::mem::take(&mut self.runs.run_when_saved) {
                        ctx.link().send_message(runs::Msg::Run);
                    }
                }
                true
            }
            Some(Inbound::Presence { selections }) => {
                if selections {
                    self.touch();
                }
                true
            }
            // Errors were handled above.
            None => false,
        }
    }

    /// The scene for the current state, rebuilt only when it changed.
    fn scene(&self) -> Rc<Scene> {
        let mut cache = self.scene.borrow_mut();
        if cache.0 != self.generation
            && let Some(editor) = self.shown()
        {
            let marks = self
                .runs
                .run
                .as_ref()
                .filter(|_| self.history.view.is_none())
                .map(RunView::marks);
            let mut seen_by: HashMap<String, Vec<String>> = HashMap::new();
            for v in self.sync.others().values() {
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
        let sync = DocSync::new(&ctx.props().workflow, random_peer());
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
            Ok(s) => match s.send(&sync.subscribe()) {
                Ok(()) => (Some(s), "connecting…".to_string()),
                Err(e) => (None, format!("cannot subscribe: {e}")),
            },
            Err(e) => (None, format!("cannot connect: {e}")),
        };
        Canvas::fetch_runs(ctx);
        if let Some(run) = &ctx.props().run {
            ctx.link().send_message(runs::Msg::Open(run.clone()));
        }
        ctx.link().send_future(async {
            Msg::Credentials(crate::net::call_as("GET", "/api/v1/credentials", None).await)
        });
        ctx.link()
            .send_future(async { Msg::Me(crate::net::call_as("GET", "/api/v1/me", None).await) });
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
            sync,
            editor: None,
            socket,
            status,
            problems: BTreeMap::new(),
            refused: None,
            gestures: Gestures::default(),
            palette: Palette::default(),
            inspector: InspectorHost::default(),
            runs: Runs::default(),
            history: History::default(),
            publishing: Publishing::default(),
            sharing: {
                let mut sharing = sharing::Sharing::default();
                sharing.start(ctx.link());
                ctx.link().send_message(sharing::Msg::Refresh);
                sharing
            },
            testing: Testing::default(),
            svg: NodeRef::default(),
            fitted: false,
            shortcuts: false,
            menu: None,
            menu_ref: NodeRef::default(),
            focus_menu: false,
            view_size: (1200.0, 800.0),
            _heartbeat: heartbeat,
            _keys: keys,
            _keys_up: keys_up,
            _page: page,
            generation: 1,
            scene: RefCell::new((0, Rc::default())),
            node_view: node_view::NodeView::default(),
            focus_after_render: None,
            editing_note: None,
            focus_note: false,
            note_ref: NodeRef::default(),
            pending_node: ctx.props().node.clone(),
            pending_view: ctx.props().view,
            url_node: ctx.props().node.clone(),
            url_view: ctx.props().view,
            url_run: ctx.props().run.clone(),
            open_run: ctx.props().run.clone(),
        }
    }

    fn changed(&mut self, ctx: &Context<Self>, old: &Props) -> bool {
        // The run the URL names, against the one shown: the canvas may have
        // moved the URL on its own (replaceState), so compare with what is
        // open, not with the last props.
        if ctx.props().route != old.route || ctx.props().run != old.run {
            match &ctx.props().run {
                Some(run) if self.open_run.as_ref() != Some(run) => {
                    self.open_run = Some(run.clone());
                    ctx.link().send_message(runs::Msg::Open(run.clone()));
                }
                None if self.open_run.is_some() => {
                    ctx.link().send_message(Msg::CloseRun);
                }
                _ => {}
            }
        }
        if (ctx.props().route != old.route
            || ctx.props().node != old.node
            || ctx.props().view != old.view)
            && ctx.props().node.is_some()
            && (ctx.props().node != self.url_node || ctx.props().view != self.url_view)
        {
            self.pending_node = ctx.props().node.clone();
            self.pending_view = ctx.props().view;
            self.select_pending();
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
        self.palette.rendered();
        if let Some(css) = self.focus_after_render.take()
            && let Some(el) = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.query_selector(&css).ok().flatten())
        {
            // An SVG node is focusable too (`focus` is on every element
            // that can take it; the cast only reaches the method).
            el.unchecked_into::<web_sys::HtmlElement>().focus().ok();
        }
        if std::mem::take(&mut self.focus_note)
            && let Some(area) = self.note_ref.cast::<web_sys::HtmlTextAreaElement>()
        {
            area.focus().ok();
        }
        self.follow_selection_in_url(ctx);
        if std::mem::take(&mut self.focus_menu)
            && let Some(first) = self
                .menu_ref
                .cast::<Element>()
                .and_then(|m| m.query_selector("button").ok().flatten())
                .and_then(|b| b.dyn_into::<web_sys::HtmlElement>().ok())
        {
            first.focus().ok();
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
            Msg::Server(text) => self.on_server(ctx, &text),
            Msg::Closed => {
                self.status = "disconnected: reload to reconnect".into();
                self.socket = None;
                true
            }
            Msg::Leave => {
                if self.socket.is_some() {
                    let message = self.sync.leave();
                    self.send(&message);
                    self.socket = None;
                }
                false
            }
            Msg::FlushCursor => {
                if let Some(message) = self.sync.flush_cursor(self.my_selection(), now_ms()) {
                    self.send(&message);
                }
                false
            }
            Msg::Heartbeat => {
                if self.socket.is_some() && self.editor.is_some() {
                    self.announce();
                }
                false
            }
            Msg::Down(e) => self.on_down(e),
            Msg::Move(e) => self.on_move(ctx, e),
            Msg::Up(e) => self.on_up(e),
            Msg::Cancel => self.on_cancel(),
            Msg::Wheel(e) => self.on_wheel(e),
            Msg::Key(e) => self.on_key(ctx, e),
            Msg::KeyUp(e) => self.on_key_up(e),
            Msg::Act(action) => self.act(action),
            Msg::KeepText { node, field, text } => {
                self.on_keep_text(node, field, text);
                false
            }
            Msg::ConnectOpen(open) => {
                self.inspector.connect_open = open;
                true
            }
            Msg::ConnectChoice(which, value) => {
                match which {
                    0 => self.inspector.connect_from = value,
                    1 => self.inspector.connect_to = value,
                    _ => self.inspector.connect_port = value,
                }
                true
            }
            Msg::Shortcuts(show) => {
                let changed = self.shortcuts != show;
                self.shortcuts = show;
                changed
            }
            Msg::NodeTab(settings) => {
                let changed = self.inspector.settings_tab != settings;
                self.inspector.settings_tab = settings;
                changed
            }
            Msg::NewCredential { node, field } => {
                self.inspector.credential_form = Some((node, field));
                true
            }
            Msg::CredentialDone(saved) => self.on_credential_done(ctx, saved),
            Msg::Undo | Msg::Redo => {
                if self.viewing() {
                    return false;
                }
                match self.sync.undo(matches!(msg, Msg::Redo)) {
                    Ok(Some(before)) => {
                        self.reload();
                        self.send_since(&before);
                        true
                    }
                    Ok(None) => false,
                    Err(e) => {
                        self.status = format!("cannot undo: {e}");
                        true
                    }
                }
            }
            Msg::CloseRun if self.history.view.is_some() => {
                self.history.view = None;
                self.touch();
                true
            }
            Msg::CloseRun => {
                if let Some(run) = &mut self.runs.run {
                    run.pinned = None;
                }
                self.runs.run = None;
                self.open_run = None;
                self.touch();
                true
            }
            Msg::Credentials(result) => self.on_credentials(result),
            Msg::Me(result) => {
                if let Ok(me) = result {
                    self.sync.set_name(&me.name);
                    // Tell the others now, not at the next heartbeat.
                    ctx.link().send_message(Msg::Heartbeat);
                }
                false
            }
            Msg::Palette(msg) => self.on_palette(msg),
            Msg::Menu(msg) => self.on_menu(ctx, msg),
            Msg::Runs(msg) => self.on_runs(ctx, msg),
            Msg::History(msg) => self.on_history(ctx, msg),
            Msg::Publish(msg) => self.on_publish(ctx, msg),
            Msg::Share(msg) => self.on_share(ctx, msg),
            Msg::Testing(msg) => self.on_testing(ctx, msg),
            Msg::NodeView(msg) => self.on_node_view(msg),
            Msg::Note(msg) => self.on_note(msg),
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
        let overlay = match &self.gestures.drag {
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
            // The connection a node dropped now would go into.
            Drag::Palette {
                edge: Some(edge), ..
            }
            | Drag::Nodes {
                edge: Some(edge), ..
            } => scene
                .edges
                .iter()
                .find(|e| e.index == *edge)
                .map(|e| html! { <path class="edge drop-target" d={e.d.clone()} /> })
                .unwrap_or_default(),
            _ => html! {},
        };
        let ghost = match &self.gestures.drag {
            Drag::Palette {
                kind,
                now: Some((x, y)),
                ..
            } => html! {
                <div class="ghost" style={format!("left: {}px; top: {}px", x - NODE_W / 2.0, y - NODE_H / 2.0)}>{ kind }</div>
            },
            Drag::Field {
                expr,
                now: Some((x, y)),
                ..
            } => html! {
                <div class="field-ghost" style={format!("left: {}px; top: {}px", x + 8.0, y + 8.0)}>{ expr }</div>
            },
            _ => html! {},
        };
        let cursors = self.sync.others().values().filter_map(|o| {
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
        let version_banner = self.version_banner(ctx);
        let banner = self.run_banner(ctx);
        let quick = self.quick_add(ctx);
        // Boxes only when zoomed far out on a big graph: labels too small
        // to read cost more to paint than they show.
        let far = (v.zoom < 0.45 && scene.nodes.len() > 150) || v.zoom < 0.2;
        html! {
            <div class="editor"
                onpointermove={link.callback(Msg::Move)}
                onpointerup={link.callback(Msg::Up)}
                onpointercancel={link.callback(|_: PointerEvent| Msg::Cancel)}>
                { self.palette_view(ctx) }
                <div class="canvas">
                    <svg ref={self.svg.clone()} tabindex="0" class={classes!("surface", far.then_some("far"), self.viewing().then_some("viewing"))}
                        aria-label="Workflow canvas"
                        onpointerdown={link.callback(Msg::Down)}
                        ondblclick={link.callback(palette::Msg::QuickAdd)}
                        oncontextmenu={link.callback(menu::Msg::Open)}
                        onwheel={link.callback(Msg::Wheel)}>
                        <defs>
                            { crate::looks::icon_symbols() }
                            <pattern id="grid" width="20" height="20" patternUnits="userSpaceOnUse"
                                patternTransform={format!("translate({} {}) scale({})", v.x, v.y, v.zoom)}>
                                <circle cx="1" cy="1" r="1" class="grid-dot" />
                            </pattern>
                        </defs>
                        <rect class="grid" width="100%" height="100%" fill="url(#grid)" />
                        <g class="world" transform={format!("translate({} {}) scale({})", v.x, v.y, v.zoom)}>
                            { self.notes_view(ctx, editor) }
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
                    // A stable wrapper, so showing it redraws nothing else.
                    <div class="shortcuts-host">{ for self.shortcuts.then(|| shortcuts_view(ctx)) }</div>
                    <div class="menu-host">{ for self.menu_view(ctx) }</div>
                    <div class="status" data-status={self.status.clone()}>
                        { &self.status }{ format!(" · {:.0}%", v.zoom * 100.0) }
                        { if self.sync.others().is_empty() { String::new() } else { format!(" · {} more here", self.sync.others().len()) } }
                    </div>
                </div>
                { ghost }
                { self.inspector_view(ctx, editor) }
                // A stable wrapper, so opening it redraws nothing else.
                <div class="node-view-host">{ self.node_view(ctx) }</div>
            </div>
        }
    }
}

/// Every keyboard shortcut of the canvas (`?` shows them).
pub const SHORTCUTS: &[(&str, &str)] = &[
    ("?", "Show or hide these shortcuts"),
    ("/", "Search the nodes to add"),
    (
        "Double click",
        "Add a node where you clicked; on a node, open it with its input and output",
    ),
    ("Ctrl + Enter", "Run the draft"),
    ("Ctrl + A", "Select every node"),
    ("Ctrl + C / Ctrl + V", "Copy / paste the selected nodes"),
    ("Ctrl + D", "Duplicate the selected nodes"),
    ("Delete / Backspace", "Delete the selected nodes"),
    ("Ctrl + Z", "Undo"),
    ("Ctrl + Shift + Z / Ctrl + Y", "Redo"),
    ("F", "Fit the workflow in view"),
    ("Space + drag", "Pan the canvas"),
    ("Wheel", "Zoom"),
    ("Shift + click", "Add a node to the selection"),
    (
        "Escape",
        "Clear the selection, close a run or a past version",
    ),
];

fn shortcuts_view(ctx: &Context<Canvas>) -> Html {
    html! {
        <div class="shortcuts" role="dialog" aria-label="Keyboard shortcuts">
            <h2>{ "Keyboard shortcuts" }</h2>
            <table>
                { for SHORTCUTS.iter().map(|(keys, what)| html! {
                    <tr><th scope="row"><kbd>{ *keys }</kbd></th><td>{ *what }</td></tr>
                }) }
            </table>
            <button type="button" class="close-shortcuts" onclick={ctx.link().callback(|_| Msg::Shortcuts(false))}>{ "Close" }</button>
        </div>
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
