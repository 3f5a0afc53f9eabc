//! The side panel's parts: a node's config form generated from its kind's
//! JSON Schema, the code editor, and collapsible JSON.

use serde_json::{Value, json};
use wasm_bindgen::JsCast;
use web_sys::{HtmlTextAreaElement, KeyboardEvent};
use yew::prelude::*;

use crate::state::carry_caret;

/// `$ref` to `#/$defs/…`, and `Option<T>` written as `anyOf [T, null]`.
pub fn resolve(schema: &Value, prop: &Value) -> Value {
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

/// What a field's control reports: the new value, or `None` to remove it.
pub type OnValue = Callback<Option<Value>>;

/// One config field's control, chosen by its schema.
pub fn field(
    name: &str,
    prop: &Value,
    value: Option<Value>,
    required: bool,
    credentials: &[String],
    set: OnValue,
) -> Html {
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
        let mut names: Vec<String> = credentials.to_vec();
        if !current.is_empty() && !names.contains(&current) {
            names.push(current.clone());
        }
        let onchange = Callback::from(move |e: Event| {
            let select: web_sys::HtmlSelectElement = e.target_unchecked_into();
            let v = select.value();
            set.emit((!v.is_empty()).then_some(Value::String(v)));
        });
        html! {
            <select id={input_id.clone()} class="credential" {onchange}>
                <option value="" selected={current.is_empty()}>{ if names.is_empty() { "(no credentials stored)" } else { "(none)" } }</option>
                { for names.iter().map(|c| html! { <option value={c.clone()} selected={*c == current}>{ c }</option> }) }
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
    } else if ty == "integer" || ty == "number" {
        let shown = value.as_ref().map(|v| v.to_string()).unwrap_or_default();
        let integer = ty == "integer";
        let oninput = Callback::from(move |e: InputEvent| {
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
            set.emit(v);
        });
        html! { <input id={input_id.clone()} type="number" value={shown} {oninput} /> }
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
        // Objects, arrays, templates of any type: JSON, applied when valid.
        let text = value.as_ref().map(pretty).unwrap_or_default();
        let onchange = Callback::from(move |e: Event| {
            let a: HtmlTextAreaElement = e.target_unchecked_into();
            let text = a.value();
            if text.trim().is_empty() {
                return set.emit(None);
            }
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => set.emit(Some(v)),
                Err(_) => set.emit(Some(Value::String(text))),
            }
        });
        html! { <textarea id={input_id.clone()} class="mono" rows="4" value={text} {onchange} /> }
    };
    html! {
        <div class="field" data-field={name.to_string()}>
            <label for={input_id}>{ name }{ if required { " *" } else { "" } }</label>
            { control }
            { for hint }
            { for help }
        </div>
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
}

/// A JSON value as a tree: objects and arrays fold (`<details>`), the first
/// two levels open; leaves colored by type.
#[component]
pub fn JsonTree(props: &JsonProps) -> Html {
    html! {
        <div class={classes!("json", props.class.clone())}>{ tree(None, &props.value, 0) }</div>
    }
}

fn tree(key: Option<&str>, v: &Value, depth: usize) -> Html {
    let key = key.map(|k| html! { <span class="key">{ format!("{k}: ") }</span> });
    match v {
        Value::Object(map) if !map.is_empty() => html! {
            <details open={depth < 2}>
                <summary>{ for key }{ format!("{{…}} {} keys", map.len()) }</summary>
                <div class="children">{ for map.iter().map(|(k, v)| tree(Some(k), v, depth + 1)) }</div>
            </details>
        },
        Value::Array(items) if !items.is_empty() => html! {
            <details open={depth < 2}>
                <summary>{ for key }{ format!("[…] {} items", items.len()) }</summary>
                <div class="children">{ for items.iter().enumerate().map(|(i, v)| tree(Some(&i.to_string()), v, depth + 1)) }</div>
            </details>
        },
        leaf => {
            let class = match leaf {
                Value::String(_) => "str",
                Value::Number(_) => "num",
                Value::Bool(_) => "bool",
                Value::Null => "null",
                _ => "empty",
            };
            html! { <div class="leaf">{ for key }<span class={class}>{ leaf.to_string() }</span></div> }
        }
    }
}
