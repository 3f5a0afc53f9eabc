//! The side panel's parts: a node's config form generated from its kind's
//! JSON Schema, the code editor, and collapsible JSON.

use serde_json::Value;
use wasm_bindgen::JsCast;
use web_sys::{HtmlTextAreaElement, KeyboardEvent};
use yew::prelude::*;

pub use crate::fields::resolve;
use crate::fields::{Shape, child_path, parse, show};
use crate::state::carry_caret;

/// The credential picker's "Create new…" choice.
const NEW_CREDENTIAL: &str = "+new";

/// What a field's control reports: the new value, or `None` to remove it.
pub type OnValue = Callback<Option<Value>>;

/// One config field of one node, to be drawn by its schema.
pub struct Field<'a> {
    pub node: &'a str,
    pub name: &'a str,
    /// The field's schema, `$ref`s resolved ([`resolve`]).
    pub prop: &'a Value,
    pub value: Option<Value>,
    pub required: bool,
    /// The stored credentials, offered by credential fields.
    pub credentials: &'a [sluice_api::CredentialEntry],
    /// The credential kinds the node takes (all, when empty).
    pub accept: &'static [&'static str],
    /// "Create new…" picked in a credential field.
    pub new_credential: Callback<()>,
    /// Text typed into this field that is not (yet) a value, kept while
    /// the node is not shown so that nothing typed is lost.
    pub kept: Option<String>,
    pub set: OnValue,
    pub keep: Callback<Option<String>>,
    /// The field's value on the last run's data, when it is a template.
    pub preview: Option<Html>,
}

impl Field<'_> {
    /// The field's control, chosen by its schema. Every control writes as
    /// you type (not on blur: a click elsewhere may never blur it).
    pub fn view(self) -> Html {
        let Field {
            node,
            name,
            prop,
            value,
            required,
            credentials,
            accept,
            new_credential,
            kept,
            set,
            keep,
            preview,
        } = self;
        let help = prop["description"]
            .as_str()
            .map(|d| html! { <small class="help">{ crate::looks::rich(d) }</small> });
        let title = prop["title"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| crate::text::label(name));
        let ty = match &prop["type"] {
            Value::Array(types) => types
                .iter()
                .find(|t| *t != "null")
                .cloned()
                .unwrap_or(Value::Null),
            t => t.clone(),
        };
        let options: Option<Vec<String>> = crate::fields::choices(prop);
        let input_id = format!("cfg-{name}");
        let hint = templated(prop).then(|| html! {
            <small class="hint">{ "Templates: " }<code>{ "{{ input.field }}" }</code>{ ", " }<code>{ "{{ vars.name }}" }</code>{ ", " }<code>{ "{{ nodes.<node id>.field }}" }</code></small>
        });
        let control = if name == "credential" || name.ends_with("_credential") {
            // A picker over the stored credentials (names only: values are
            // write-only), keeping a name that is not stored (yet) selectable.
            let current = value
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            // Those of a kind the node takes; a name that is not stored
            // (yet) stays selectable.
            let fits: Vec<&sluice_api::CredentialEntry> = credentials
                .iter()
                .filter(|c| accept.is_empty() || accept.contains(&c.kind.as_str()))
                .collect();
            let known = fits.iter().any(|c| c.name == current);
            // Named, but stored with a kind this node does not take.
            let wrong_kind = credentials
                .iter()
                .find(|c| c.name == current && !fits.iter().any(|f| f.name == c.name))
                .map(|c| crate::credentials::kind_title(&c.kind).to_string());
            let was = current.clone();
            let onchange = Callback::from(move |e: Event| {
                let select: web_sys::HtmlSelectElement = e.target_unchecked_into();
                let v = select.value();
                if v == NEW_CREDENTIAL {
                    // The picker shows the current one until the new one exists.
                    select.set_value(&was);
                    new_credential.emit(());
                    return;
                }
                set.emit((!v.is_empty()).then_some(Value::String(v)));
            });
            html! {
                <select id={input_id.clone()} class="credential" {onchange}>
                    <option value="" selected={current.is_empty()}>{ if fits.is_empty() { "(none stored yet)" } else { "(none)" } }</option>
                    { for fits.iter().map(|c| html! {
                        <option value={c.name.clone()} selected={c.name == current}>
                            { format!("{} · {}", c.name, crate::credentials::kind_title(&c.kind)) }
                        </option>
                    }) }
                    if !current.is_empty() && !known {
                        <option value={current.clone()} selected=true>{
                            match &wrong_kind {
                                Some(kind) => format!("{current} ({kind}: not a kind this node takes)"),
                                None => format!("{current} (not stored)"),
                            }
                        }</option>
                    }
                    <option value={NEW_CREDENTIAL}>{ "＋ Create new credential…" }</option>
                </select>
            }
        } else if let Some(options) = options {
            let current = value
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let onchange = Callback::from(move |e: Event| {
                let select: web_sys::HtmlSelectElement = e.target_unchecked_into();
                let v = select.value();
                set.emit((!v.is_empty()).then_some(Value::String(v)));
            });
            html! {
                <select id={input_id.clone()} {onchange}>
                    if !required { <option value="" selected={current.is_empty()}>{ "(default)" }</option> }
                    { for options.iter().map(|o| html! { <option value={o.clone()} selected={*o == current}>{ o }</option> }) }
                </select>
            }
        } else if ty == "boolean" {
            let checked = value.as_ref().and_then(Value::as_bool).unwrap_or(false);
            let onchange = Callback::from(move |e: Event| {
                let input: web_sys::HtmlInputElement = e.target_unchecked_into();
                set.emit(Some(Value::Bool(input.checked())));
            });
            html! { <input id={input_id.clone()} type="checkbox" {checked} {onchange} /> }
        } else if ty == "string" {
            let text = value
                .as_ref()
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if sluice_model::doc::TEXT_FIELDS.contains(&name) {
                let on_change = Callback::from(move |v: String| set.emit(Some(Value::String(v))));
                html! { <CodeEditor id={input_id.clone()} value={text} {on_change} /> }
            } else {
                let long = matches!(name, "body" | "text" | "html" | "message" | "condition");
                if long {
                    let oninput = Callback::from(move |e: InputEvent| {
                        let a: HtmlTextAreaElement = e.target_unchecked_into();
                        set.emit(Some(Value::String(a.value())));
                    });
                    html! { <textarea id={input_id.clone()} class="mono" rows="4" value={text} {oninput} /> }
                } else {
                    let oninput = Callback::from(move |e: InputEvent| {
                        let i: web_sys::HtmlInputElement = e.target_unchecked_into();
                        set.emit(Some(Value::String(i.value())));
                    });
                    html! { <input id={input_id.clone()} value={text} {oninput} /> }
                }
            }
        } else {
            // Numbers, objects, arrays, templates of any type: text that
            // becomes a value as soon as it is one (see [`Shape`]).
            let shape = Shape::of(&ty);
            html! {
                <TextField id={input_id.clone()} {shape} {value} {kept} on_value={set} on_kept={keep} />
            }
        };
        html! {
            <div class="field" key={format!("{node}/{name}")} data-field={name.to_string()}>
                <label for={input_id} title={name.to_string()}>{ title }{ if required { " *" } else { "" } }</label>
                { control }
                { for preview }
                { for hint }
                { for help }
            </div>
        }
    }
}

// ---------------------------------------------------------------------------
// Fields typed as text that become values

#[derive(Properties, PartialEq)]
pub struct TextFieldProps {
    pub id: String,
    pub shape: Shape,
    pub value: Option<Value>,
    #[prop_or_default]
    pub kept: Option<String>,
    pub on_value: OnValue,
    pub on_kept: Callback<Option<String>>,
}

/// A field typed as text: each keystroke that makes a value writes it;
/// text that is not a value stays as typed, with where and why next to
/// it, and is kept (`on_kept`) so that leaving the node loses nothing.
pub struct TextField {
    text: String,
}

impl Component for TextField {
    type Message = String;
    type Properties = TextFieldProps;

    fn create(ctx: &Context<Self>) -> Self {
        let p = ctx.props();
        let text = p.kept.clone().unwrap_or_else(|| {
            p.value
                .as_ref()
                .map(|v| show(p.shape, v))
                .unwrap_or_default()
        });
        TextField { text }
    }

    fn changed(&mut self, ctx: &Context<Self>, old: &TextFieldProps) -> bool {
        let p = ctx.props();
        // The value changed elsewhere (a peer, undo, a file): show it,
        // unless the text here already says it (our own write coming back,
        // in the user's own formatting).
        if p.value != old.value && parse(p.shape, &self.text) != Ok(p.value.clone()) {
            self.text = p
                .value
                .as_ref()
                .map(|v| show(p.shape, v))
                .unwrap_or_default();
            if p.kept.is_some() {
                p.on_kept.emit(None);
            }
        }
        true
    }

    fn update(&mut self, ctx: &Context<Self>, text: String) -> bool {
        let p = ctx.props();
        match parse(p.shape, &text) {
            Ok(v) => {
                if p.kept.is_some() {
                    p.on_kept.emit(None);
                }
                p.on_value.emit(v);
            }
            Err(_) => p.on_kept.emit(Some(text.clone())),
        }
        self.text = text;
        true
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let p = ctx.props();
        let error = parse(p.shape, &self.text).err();
        let class = classes!("mono", error.is_some().then_some("invalid"));
        let control = if p.shape.multiline() {
            let oninput = ctx.link().callback(|e: InputEvent| {
                let a: HtmlTextAreaElement = e.target_unchecked_into();
                a.value()
            });
            let rows = self.text.lines().count().clamp(2, 12).to_string();
            html! { <textarea id={p.id.clone()} data-shape={p.shape.name()} {class} {rows} spellcheck="false" value={self.text.clone()} {oninput} aria-invalid={error.is_some().to_string()} /> }
        } else {
            let oninput = ctx.link().callback(|e: InputEvent| {
                let i: web_sys::HtmlInputElement = e.target_unchecked_into();
                i.value()
            });
            html! { <input id={p.id.clone()} data-shape={p.shape.name()} {class} inputmode="decimal" value={self.text.clone()} {oninput} aria-invalid={error.is_some().to_string()} /> }
        };
        html! {
            <>
                { control }
                if let Some(e) = error {
                    <small class="syntax-error" role="alert" data-line={e.line.to_string()} data-column={e.column.to_string()}>{ e.to_string() }</small>
                }
            </>
        }
    }
}

/// Whether a field takes `{{ … }}` templates (its description says so, or
/// it is free text).
fn templated(prop: &Value) -> bool {
    prop["description"].as_str().is_some_and(|d| {
        let d = d.to_lowercase();
        (d.contains("template") || d.contains("{{")) && !d.contains("not a template")
    })
}

pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// The code editor

#[derive(Properties, PartialEq)]
pub struct CodeProps {
    pub id: String,
    pub value: String,
    pub on_change: Callback<String>,
}

/// A code editor on a plain textarea: monospace, line numbers, Tab and
/// Shift+Tab indent and dedent, Enter keeps the indentation. The text is
/// the node's Loro text, so a change from another window arrives while
/// typing: the caret is carried over it rather than thrown to the end.
pub struct CodeEditor {
    area: NodeRef,
    gutter: NodeRef,
    /// Where the caret goes after the next render (set when someone else's
    /// edit replaces the text under it).
    caret: Option<(u32, u32)>,
}

pub enum CodeMsg {
    Input,
    Scroll,
}

const INDENT: &str = "  ";

impl CodeEditor {
    fn area(&self) -> Option<HtmlTextAreaElement> {
        self.area.cast::<HtmlTextAreaElement>()
    }
}

impl Component for CodeEditor {
    type Message = CodeMsg;
    type Properties = CodeProps;

    fn create(_ctx: &Context<Self>) -> Self {
        CodeEditor {
            area: NodeRef::default(),
            gutter: NodeRef::default(),
            caret: None,
        }
    }

    fn changed(&mut self, ctx: &Context<Self>, old: &CodeProps) -> bool {
        if let Some(area) = self.area() {
            let shown = area.value();
            let new = &ctx.props().value;
            let focused = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.active_element())
                .is_some_and(|el| el == *area.unchecked_ref::<web_sys::Element>());
            if focused && shown != *new {
                let start = area.selection_start().ok().flatten().unwrap_or(0);
                let end = area.selection_end().ok().flatten().unwrap_or(start);
                self.caret = Some((
                    carry_caret(&shown, new, start),
                    carry_caret(&shown, new, end),
                ));
            }
        }
        ctx.props() != old
    }

    fn rendered(&mut self, _ctx: &Context<Self>, _first: bool) {
        if let (Some((s, e)), Some(area)) = (self.caret.take(), self.area()) {
            area.set_selection_range(s, e).ok();
        }
    }

    fn update(&mut self, ctx: &Context<Self>, msg: CodeMsg) -> bool {
        let Some(area) = self.area() else {
            return false;
        };
        match msg {
            CodeMsg::Input => {
                ctx.props().on_change.emit(area.value());
                false
            }
            CodeMsg::Scroll => {
                if let Some(g) = self.gutter.cast::<web_sys::Element>() {
                    g.set_scroll_top(area.scroll_top());
                }
                false
            }
        }
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let lines = ctx.props().value.split('\n').count().max(1);
        let link = ctx.link();
        let onkeydown = {
            let area = self.area.clone();
            let link = link.clone();
            Callback::from(move |e: KeyboardEvent| {
                if let Some(area) = area.cast::<HtmlTextAreaElement>()
                    && edit_key(&area, &e)
                {
                    link.send_message(CodeMsg::Input);
                }
            })
        };
        html! {
            <div class="code">
                <div class="gutter" ref={self.gutter.clone()} aria-hidden="true">
                    { for (1..=lines).map(|n| html! { <div>{ n }</div> }) }
                </div>
                <textarea id={ctx.props().id.clone()} ref={self.area.clone()} class="mono" rows="10"
                    spellcheck="false" autocapitalize="off" autocomplete="off"
                    value={ctx.props().value.clone()}
                    oninput={link.callback(|_| CodeMsg::Input)}
                    onkeydown={onkeydown}
                    onscroll={link.callback(|_| CodeMsg::Scroll)} />
            </div>
        }
    }
}

/// A key that edits the code (Tab, Shift+Tab, Enter), carried out at once,
/// inside the key event: the browser's own handling is prevented before the
/// event returns, and the edit lands where the caret is now, before any
/// later key. (Done in a component update, which may run after the event,
/// Enter's default newline slipped in beside ours.) True when the text changed.
fn edit_key(area: &HtmlTextAreaElement, e: &KeyboardEvent) -> bool {
    let text = area.value();
    let start = area.selection_start().ok().flatten().unwrap_or(0);
    let end = area.selection_end().ok().flatten().unwrap_or(start);
    let units: Vec<u16> = text.encode_utf16().collect();
    let line_start = units[..start as usize]
        .iter()
        .rposition(|&c| c == u16::from(b'\n'))
        .map_or(0, |i| i + 1) as u32;
    match e.key().as_str() {
        "Tab" if !e.shift_key() => {
            e.prevent_default();
            area.set_range_text_with_start_and_end_and_mode(INDENT, start, end, "end")
                .ok();
        }
        "Tab" => {
            e.prevent_default();
            let line = &units[line_start as usize..];
            let spaces = line
                .iter()
                .take(INDENT.len())
                .take_while(|&&c| c == u16::from(b' '))
                .count() as u32;
            if spaces == 0 {
                return false;
            }
            area.set_range_text_with_start_and_end("", line_start, line_start + spaces)
                .ok();
            let s = start.saturating_sub(spaces).max(line_start);
            area.set_selection_range(s, end.saturating_sub(spaces).max(s))
                .ok();
        }
        "Enter" if !(e.ctrl_key() || e.meta_key()) => {
            e.prevent_default();
            let indent: String =
                String::from_utf16_lossy(&units[line_start as usize..start as usize])
                    .chars()
                    .take_while(|c| *c == ' ' || *c == '\t')
                    .collect();
            area.set_range_text_with_start_and_end_and_mode(
                &format!("\n{indent}"),
                start,
                end,
                "end",
            )
            .ok();
        }
        _ => return false,
    }
    true
}

// ---------------------------------------------------------------------------
// JSON as a collapsible tree

#[derive(Properties, PartialEq)]
pub struct JsonProps {
    pub value: Value,
    #[prop_or_default]
    pub class: Classes,
    /// The expression that reaches `value` in a template (`input`,
    /// `nodes.fetch`): its keys then copy the expression that reaches them.
    #[prop_or_default]
    pub root: Option<String>,
}

/// A JSON value as a tree: objects and arrays fold (`<details>`), the first
/// two levels open; leaves colored by type. With a `root`, a click on a key
/// copies the template that reads it (`{{ nodes.fetch.body.id }}`).
#[component]
pub fn JsonTree(props: &JsonProps) -> Html {
    let copied = use_state(|| None::<String>);
    let copy = {
        let copied = copied.clone();
        Callback::from(move |expr: String| {
            // A failed write (no permission) still shows the expression.
            crate::looks::copy_text(&expr);
            copied.set(Some(expr));
        })
    };
    let cx = Tree {
        copy: props.root.is_some().then_some(copy),
    };
    html! {
        <div class={classes!("json", props.class.clone())}>
            { cx.node(None, props.root.clone(), &props.value, 0) }
            if let Some(expr) = &*copied {
                <p class="copied" role="status">{ "Copied " }<code>{ expr }</code></p>
            }
        </div>
    }
}

struct Tree {
    copy: Option<Callback<String>>,
}

impl Tree {
    fn key(&self, key: Option<&str>, path: &Option<String>) -> Option<Html> {
        let key = key?;
        Some(match (&self.copy, path) {
            (Some(copy), Some(path)) => {
                let expr = format!("{{{{ {path} }}}}");
                let onclick = {
                    let (copy, expr) = (copy.clone(), expr.clone());
                    Callback::from(move |_: MouseEvent| copy.emit(expr.clone()))
                };
                html! { <button type="button" class="key" data-path={expr.clone()} title={format!("Copy {expr}")} {onclick}>{ format!("{key}: ") }</button> }
            }
            _ => html! { <span class="key">{ format!("{key}: ") }</span> },
        })
    }

    fn node(&self, key: Option<&str>, path: Option<String>, v: &Value, depth: usize) -> Html {
        let label = self.key(key, &path);
        let child = |k: &str| path.as_deref().map(|p| crate::fields::key_path(p, k));
        let item = |i: &str| path.as_deref().map(|p| child_path(p, i));
        match v {
            // The key beside the fold, not inside its <summary>: a button
            // inside another control is not reachable as itself.
            Value::Object(map) if !map.is_empty() => html! {
                <div class="branch">
                    { for label }
                    <details open={depth < 2}>
                        <summary>{ format!("{{…}} {} keys", map.len()) }</summary>
                        <div class="children">{ for map.iter().map(|(k, v)| self.node(Some(k), child(k), v, depth + 1)) }</div>
                    </details>
                </div>
            },
            Value::Array(items) if !items.is_empty() => html! {
                <div class="branch">
                    { for label }
                    <details open={depth < 2}>
                        <summary>{ format!("[…] {} items", items.len()) }</summary>
                        <div class="children">{ for items.iter().enumerate().map(|(i, v)| { let k = i.to_string(); self.node(Some(&k), item(&k), v, depth + 1) }) }</div>
                    </details>
                </div>
            },
            leaf => {
                let class = match leaf {
                    Value::String(_) => "str",
                    Value::Number(_) => "num",
                    Value::Bool(_) => "bool",
                    Value::Null => "null",
                    _ => "empty",
                };
                html! { <div class="leaf">{ for label }<span class={class}>{ leaf.to_string() }</span></div> }
            }
        }
    }
}
