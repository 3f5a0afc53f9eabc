//! The node view: one node opened over the canvas with its input, its
//! parameters and its output side by side (n8n's layout). Input and output
//! show as a table, JSON or a schema; the side panes are resizable and the
//! view goes full screen on demand. A field of the input dragged onto a
//! parameter writes the template that reads it there (`{{ input.id }}`);
//! a click on a field copies that template instead.

use serde_json::Value;
use wasm_bindgen::JsCast;
use web_sys::{Element, PointerEvent};
use yew::prelude::*;

use super::Canvas;
use super::gestures::Drag;
use crate::data_view::{self, Entry, Table};

/// How a pane shows its message.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Table,
    Json,
    Schema,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Table, Mode::Json, Mode::Schema];

    fn name(self) -> &'static str {
        match self {
            Mode::Table => "Table",
            Mode::Json => "JSON",
            Mode::Schema => "Schema",
        }
    }
}

pub enum Msg {
    Open(String),
    Close,
    Full(bool),
    /// A pane's mode: the input (false) or the output (true).
    Mode(bool, Mode),
    /// A field pressed: a drag may start.
    Press(String, PointerEvent),
    /// A field clicked (no drag): copy its template.
    Copy(String),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::NodeView(msg)
    }
}

/// The node view's part of the canvas's state.
#[derive(Default)]
pub struct NodeView {
    /// The node open in the view.
    pub open: Option<String>,
    full: bool,
    input_mode: Mode,
    output_mode: Mode,
    /// The template last copied, for the status line.
    copied: Option<String>,
    /// The click that ends a drag is not a copy (the next press clears it).
    swallow_click: bool,
}

impl Canvas {
    /// The node open in the view, when the shown workflow has it.
    pub(super) fn open_view_node(&self) -> Option<&sluice_model::Node> {
        let id = self.node_view.open.as_ref()?;
        self.shown()?.wf.nodes.iter().find(|n| &n.id == id)
    }

    pub(super) fn on_node_view(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Open(node) => {
                if let Some(editor) = &mut self.editor
                    && editor.wf.nodes.iter().any(|n| n.id == node)
                {
                    editor.selected = std::iter::once(node.clone()).collect();
                    self.node_view.open = Some(node);
                    self.node_view.copied = None;
                    // Into the dialog: its Close button.
                    self.focus_after_render = Some(".node-view-close".into());
                    self.touch();
                }
            }
            Msg::Close => {
                // Back to the node it was opened on.
                if let Some(id) = self.node_view.open.take() {
                    self.focus_after_render = Some(format!("g.node[data-node='{id}']"));
                }
            }
            Msg::Full(full) => self.node_view.full = full,
            Msg::Mode(output, mode) => {
                if output {
                    self.node_view.output_mode = mode;
                } else {
                    self.node_view.input_mode = mode;
                }
            }
            Msg::Press(expr, e) => {
                if e.button() != 0 {
                    return false;
                }
                if let Some(el) = e.target().and_then(|t| t.dyn_into::<Element>().ok()) {
                    el.set_pointer_capture(e.pointer_id()).ok();
                }
                self.node_view.swallow_click = false;
                self.gestures.drag = Drag::Field {
                    expr,
                    start: (f64::from(e.client_x()), f64::from(e.client_y())),
                    now: None,
                };
                return false;
            }
            Msg::Copy(expr) => {
                if std::mem::take(&mut self.node_view.swallow_click) {
                    return false;
                }
                crate::looks::copy_text(&expr);
                self.node_view.copied = Some(expr);
            }
        }
        true
    }

    /// A field dropped at the pointer: into the parameter under it (a text
    /// box or text area of the node's form), at its caret or at its end,
    /// as if typed there. Anywhere else, nothing.
    pub(super) fn drop_field(&mut self, expr: &str, e: &PointerEvent) -> bool {
        self.node_view.swallow_click = true;
        let Some(target) = super::gestures::under(e).and_then(|el| {
            el.closest(".node-panel .field input, .node-panel .field textarea")
                .ok()
                .flatten()
        }) else {
            return true;
        };
        let (text, selection) = if let Some(i) = target.dyn_ref::<web_sys::HtmlInputElement>() {
            if !matches!(i.type_().as_str(), "text" | "" | "url" | "search") {
                return true;
            }
            let sel = focused(&target)
                .then(|| Some((i.selection_start().ok()??, i.selection_end().ok()??)))
                .flatten();
            (i.value(), sel)
        } else if let Some(a) = target.dyn_ref::<web_sys::HtmlTextAreaElement>() {
            let sel = focused(&target)
                .then(|| Some((a.selection_start().ok()??, a.selection_end().ok()??)))
                .flatten();
            (a.value(), sel)
        } else {
            return true;
        };
        let (value, caret) = data_view::insert(&text, expr, selection);
        if let Some(i) = target.dyn_ref::<web_sys::HtmlInputElement>() {
            i.set_value(&value);
            i.focus().ok();
            i.set_selection_range(caret, caret).ok();
        } else if let Some(a) = target.dyn_ref::<web_sys::HtmlTextAreaElement>() {
            a.set_value(&value);
            a.focus().ok();
            a.set_selection_range(caret, caret).ok();
        }
        // The field's own input handler writes it, as for typing.
        let init = web_sys::InputEventInit::new();
        init.set_bubbles(true);
        init.set_input_type("insertFromDrop");
        if let Ok(ev) = web_sys::InputEvent::new_with_event_init_dict("input", &init) {
            target.dispatch_event(&ev).ok();
        }
        true
    }

    /// The view, when a node is open in it.
    pub(super) fn node_view(&self, ctx: &Context<Self>) -> Html {
        let Some(n) = self.open_view_node() else {
            return Html::default();
        };
        let link = ctx.link();
        let full = self.node_view.full;
        // The input: what "Run this node" runs it on (the last run's, or
        // pinned test data).
        let data = self.test_data(&n.id);
        let input_source = data
            .input
            .as_ref()
            .map(|input| self.input_source(&n.id, input));
        let input = match &data.input {
            Some(v) => self.pane_body(ctx, v, "input", self.node_view.input_mode, true),
            None => html! {
                <p class="empty">{ "No input yet: run the workflow, or pin test data on the node before this one." }</p>
            },
        };
        // The output: its last test here, else the shown run's.
        let (output, output_source) = match (self.tested_output(&n.id), self.run_output(&n.id)) {
            (Some(o), _) => (Some(o.clone()), Some("from its test".to_string())),
            (None, Some((run, o))) => (Some(o), Some(format!("from run {run}"))),
            (None, None) => (None, None),
        };
        let root = crate::fields::key_path("nodes", &n.id);
        let output = match &output {
            Some(Value::Object(ports)) => html! {
                <>{ for ports.iter().map(|(port, msg)| html! {
                    <div class="port-output" data-port={port.clone()}>
                        if ports.len() > 1 || port != "out" {
                            <span class="port-name">{ format!("on {port}") }</span>
                        }
                        { self.pane_body(ctx, msg, &root, self.node_view.output_mode, false) }
                    </div>
                }) }</>
            },
            Some(other) => self.pane_body(ctx, other, &root, self.node_view.output_mode, false),
            None => {
                html! { <p class="empty">{ "No output yet: Run this node, or run the workflow." }</p> }
            }
        };
        let label = n.label.clone().unwrap_or_else(|| n.id.clone());
        let title = sluice_model::kinds::spec(&n.kind).map_or("Unknown kind", |k| k.title());
        html! {
            <>
            <div class="node-view-veil" aria-hidden="true" onclick={link.callback(|_| Msg::Close)}></div>
            <div class={classes!("node-view", full.then_some("full"))} role="dialog" aria-modal="true"
                aria-label={format!("{label}: input, parameters and output")} data-node={n.id.clone()}>
                <header class="node-view-head">
                    { crate::looks::icon(&n.kind) }
                    <h2>{ &label }</h2>
                    <span class="kind-title">{ title }</span>
                    <span class="spacer"></span>
                    if let Some(expr) = &self.node_view.copied {
                        <span class="copied" role="status">{ "Copied " }<code>{ expr }</code></span>
                    }
                    <button type="button" class="node-view-full" aria-pressed={full.to_string()}
                        onclick={link.callback(move |_| Msg::Full(!full))}>
                        { if full { "Exit full screen" } else { "Full screen" } }
                    </button>
                    <button type="button" class="node-view-close" onclick={link.callback(|_| Msg::Close)}>{ "Close" }</button>
                </header>
                <div class="node-view-body">
                    <section class="pane input-pane" aria-label="Input">
                        { self.pane_head(ctx, "Input", false, input_source) }
                        <div class="pane-body">{ input }</div>
                    </section>
                    // `inspector`: the node's form keeps the side panel's looks.
                    <section class="pane params-pane inspector" aria-label="Parameters">
                        { self.node_form_for_view(ctx, n) }
                    </section>
                    <section class="pane output-pane" aria-label="Output">
                        { self.pane_head(ctx, "Output", true, output_source) }
                        <div class="pane-body">{ output }</div>
                    </section>
                </div>
            </div>
            </>
        }
    }

    fn pane_head(
        &self,
        ctx: &Context<Self>,
        name: &str,
        output: bool,
        source: Option<String>,
    ) -> Html {
        let current = if output {
            self.node_view.output_mode
        } else {
            self.node_view.input_mode
        };
        let link = ctx.link();
        let which = if output { "output" } else { "input" };
        html! {
            <div class="pane-head">
                <h3>{ name }</h3>
                if let Some(s) = source { <span class="source">{ s }</span> }
                <div class="modes" role="tablist" aria-label={format!("Show the {which} as")}>
                    { for Mode::ALL.iter().map(|&m| html! {
                        <button type="button" role="tab" aria-selected={(m == current).to_string()}
                            class={classes!("mode", format!("mode-{}", m.name().to_lowercase()), (m == current).then_some("selected"))}
                            onclick={link.callback(move |_| Msg::Mode(output, m))}>{ m.name() }</button>
                    }) }
                </div>
            </div>
        }
    }

    /// A message shown in `mode`; `draggable` fields carry their template.
    fn pane_body(
        &self,
        ctx: &Context<Self>,
        v: &Value,
        root: &str,
        mode: Mode,
        draggable: bool,
    ) -> Html {
        let link = ctx.link();
        let chip = |label: Html, path: &str| {
            let expr = data_view::template(path);
            let press = {
                let expr = expr.clone();
                link.callback(move |e: PointerEvent| Msg::Press(expr.clone(), e))
            };
            let copy = {
                let expr = expr.clone();
                link.callback(move |_| Msg::Copy(expr.clone()))
            };
            html! {
                // A press keeps the focus where it is (a parameter's box
                // and its caret, where the field will go).
                <button type="button" class="field-chip" data-expr={expr.clone()}
                    onmousedown={Callback::from(|e: MouseEvent| e.prevent_default())}
                    title={if draggable { format!("Drag onto a parameter, or click to copy {expr}") } else { format!("Click to copy {expr}") }}
                    onpointerdown={draggable.then_some(press)} onclick={copy}>{ label }</button>
            }
        };
        match mode {
            Mode::Json => {
                html! { <crate::inspector::JsonTree value={v.clone()} root={Some(root.to_string())} /> }
            }
            Mode::Table => {
                let Table {
                    columns,
                    rows,
                    more,
                } = data_view::table(v, root);
                html! {
                    <div class="table-wrap">
                        <table class="data-table">
                            <thead><tr>{ for columns.iter().map(|(name, path)| html! {
                                <th scope="col">{ chip(html! { { name } }, path) }</th>
                            }) }</tr></thead>
                            <tbody>{ for rows.iter().map(|row| html! {
                                <tr>{ for row.iter().map(|c| html! { <td>{ c }</td> }) }</tr>
                            }) }</tbody>
                        </table>
                        if more > 0 { <p class="more">{ format!("{more} more rows") }</p> }
                    </div>
                }
            }
            Mode::Schema => {
                let entries = data_view::schema(v, root);
                if entries.is_empty() {
                    return html! { <p class="scalar">{ data_view::cell(v) }</p> };
                }
                html! {
                    <ul class="schema">{ for entries.iter().map(|Entry { depth, key, path, ty, example }| html! {
                        <li style={format!("padding-left: {}rem", *depth as f64 * 1.1)} data-type={*ty}>
                            { chip(html! { { key } }, path) }
                            <span class="type">{ *ty }</span>
                            <span class="example">{ example }</span>
                        </li>
                    }) }</ul>
                }
            }
        }
    }
}

fn focused(el: &Element) -> bool {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.active_element())
        .is_some_and(|a| &a == el)
}
