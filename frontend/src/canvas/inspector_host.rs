//! The canvas's right-hand panel: the selected node's form (from its
//! kind's schema, see [`crate::inspector`]) and its part of the shown run,
//! then the run panel, the version history and the runs list.

use serde_json::Value;
use sluice_api::CredentialEntry;
use sluice_model::kinds;
use sluice_model::preview::{Preview, preview};
use sluice_model::template::{self, Missing};
use yew::prelude::*;

use super::Canvas;
use crate::inspector::{Field, resolve};
use crate::state::{Action, Editor};

/// The inspector's part of the canvas's state.
#[derive(Default)]
pub struct InspectorHost {
    /// The stored credentials, offered by credential fields.
    credentials: Vec<CredentialEntry>,
    /// The new-credential form is open for this node's field.
    pub credential_form: Option<(String, String)>,
    /// Text typed into a node's field that is not a value yet (a JSON
    /// object with a syntax error), by node and field: shown again, with
    /// its error, when the node is selected again.
    kept: std::collections::HashMap<(String, String), String>,
    /// The node panel shows the node's settings instead of its parameters.
    pub settings_tab: bool,
    /// The connect controls' choices: a source `node:port`, a target node,
    /// this node's port.
    pub connect_from: String,
    pub connect_to: String,
    pub connect_port: String,
    /// The connect controls are shown.
    pub connect_open: bool,
}

impl Canvas {
    /// `GET /credentials` answered.
    pub(super) fn on_credentials(&mut self, result: Result<Vec<CredentialEntry>, String>) -> bool {
        if let Ok(list) = result {
            self.inspector.credentials = list;
            return true;
        }
        false
    }

    /// The new-credential form closed: a saved one goes into the field it
    /// was made for, and the picker lists it.
    pub(super) fn on_credential_done(
        &mut self,
        ctx: &Context<Self>,
        saved: Option<String>,
    ) -> bool {
        let Some((node, field)) = self.inspector.credential_form.take() else {
            return true;
        };
        // Back where the form was asked for: the node's picker.
        self.focus_after_render = Some(format!(".node-panel[data-node='{node}'] #cfg-{field}"));
        if let Some(name) = saved {
            ctx.link().send_future(async {
                super::Msg::Credentials(
                    crate::net::call_as("GET", "/api/v1/credentials", None).await,
                )
            });
            self.act(Action::SetConfig {
                node,
                field,
                value: Some(Value::String(name)),
            });
        }
        true
    }

    /// The new-credential form, over the node panel.
    fn credential_dialog(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        let Some((node, _)) = &self.inspector.credential_form else {
            return Html::default();
        };
        if node != &n.id {
            return Html::default();
        }
        let accept: Vec<String> = kinds::spec(&n.kind)
            .map(|k| k.id.credential_kinds())
            .unwrap_or_default()
            .iter()
            .map(|k| k.to_string())
            .collect();
        let taken: Vec<String> = self
            .inspector
            .credentials
            .iter()
            .map(|c| c.name.clone())
            .collect();
        // The node's own URL, written out, is what an HTTP credential made
        // for it is tested against.
        let test_url = n
            .config
            .get("url")
            .and_then(Value::as_str)
            .filter(|u| !u.contains("{{") && !u.contains("{%"))
            .unwrap_or_default()
            .to_string();
        html! {
            <div class="cred-dialog" role="dialog" aria-label="New credential">
                <crate::credentials::CredentialForm {accept} {taken} {test_url}
                    on_done={ctx.link().callback(super::Msg::CredentialDone)} />
            </div>
        }
    }

    /// A field's text that is not a value yet, kept (or dropped).
    pub(super) fn on_keep_text(&mut self, node: String, field: String, text: Option<String>) {
        match text {
            Some(t) => self.inspector.kept.insert((node, field), t),
            None => self.inspector.kept.remove(&(node, field)),
        };
    }

    /// The right-hand panel: running the workflow, the runs, and the
    /// selected node's form and its part of the shown run.
    pub(super) fn inspector_view(&self, ctx: &Context<Self>, editor: &Editor) -> Html {
        let selected = (editor.selected.len() == 1)
            .then(|| editor.selected.iter().next())
            .flatten()
            .and_then(|id| editor.wf.nodes.iter().find(|n| &n.id == id));
        // A node open in the node view has its form there, not twice.
        let node = selected
            .filter(|n| self.node_view.open.as_ref() != Some(&n.id))
            .map(|n| self.node_form(ctx, n));
        html! {
            <aside class="inspector">
                { self.publish_panel(ctx) }
                { self.share_panel(ctx) }
                { for node }
                { self.run_panel(ctx) }
                { self.history_panel(ctx) }
                { self.runs_list(ctx) }
            </aside>
        }
    }

    /// The node's panel: its title, test, run data and form.
    pub(super) fn node_form_for_view(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        self.node_form(ctx, n)
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
                super::Msg::Act(Action::SetLabel {
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
        // What template fields preview on: this node's data in the latest
        // run that reached it, with pinned test data over it.
        let preview_scope = Some(self.test_data(&n.id))
            .filter(|d| d.input.is_some() || !d.nodes.is_empty())
            .and_then(|d| {
                let wf = &self.shown()?.wf;
                let vars = wf.extra.get("vars").cloned().unwrap_or(Value::Null);
                let missing = if wf.settings().strict {
                    Missing::Error
                } else {
                    Missing::Null
                };
                Some((d.scope(&vars), missing))
            });
        let raw_fields = spec.map_or(&[][..], |k| k.raw_fields);
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
                let preview = preview_scope
                    .as_ref()
                    .filter(|_| !raw_fields.contains(&name.as_str()))
                    .and_then(|(scope, missing)| {
                        let v = value.as_ref().filter(|v| template::has_template(v))?;
                        Some(preview_view(&preview(v, scope, *missing)))
                    });
                let set = {
                    let (node, name) = (id.clone(), name.clone());
                    link.callback(move |value: Option<Value>| {
                        super::Msg::Act(Action::SetConfig {
                            node: node.clone(),
                            field: name.clone(),
                            value,
                        })
                    })
                };
                let keep = {
                    let (node, name) = (id.clone(), name.clone());
                    link.callback(move |text: Option<String>| super::Msg::KeepText {
                        node: node.clone(),
                        field: name.clone(),
                        text,
                    })
                };
                Field {
                    node: &id,
                    name,
                    prop: &prop,
                    value,
                    required: required.contains(&name.as_str()),
                    credentials: &self.inspector.credentials,
                    accept: spec.map(|k| k.id.credential_kinds()).unwrap_or_default(),
                    new_credential: {
                        let (node, field) = (id.clone(), name.clone());
                        link.callback(move |()| super::Msg::NewCredential {
                            node: node.clone(),
                            field: field.clone(),
                        })
                    },
                    kept: self
                        .inspector
                        .kept
                        .get(&(id.clone(), name.clone()))
                        .cloned(),
                    set,
                    keep,
                    preview,
                }
                .view()
            });
        let step = self.run_step(n);
        let test = (!viewing).then(|| self.test_panel(ctx, n));
        let settings_tab = self.inspector.settings_tab;
        let tab = |settings: bool, text: &'static str| {
            let selected = settings == settings_tab;
            html! {
                <button type="button" role="tab" class={classes!("tab", selected.then_some("selected"))}
                    id={if settings { "tab-settings" } else { "tab-parameters" }}
                    aria-selected={selected.to_string()} aria-controls="node-tab-panel"
                    onclick={link.callback(move |_| super::Msg::NodeTab(settings))}>{ text }</button>
            }
        };
        let title = spec.map_or("Unknown kind", |k| k.title());
        let body = if settings_tab {
            settings_form(ctx, n)
        } else {
            html! {
                <>
                    <label for="node-label">{ "Label" }</label>
                    <input id="node-label" value={n.label.clone().unwrap_or_default()} placeholder={n.id.clone()} oninput={on_label} />
                    <form class="config" onsubmit={Callback::from(|e: SubmitEvent| e.prevent_default())}>
                        { for fields }
                    </form>
                    { self.connect_view(ctx, n) }
                </>
            }
        };
        html! {
            <section class="node-panel" key={n.id.clone()} data-node={n.id.clone()}>
                <div class="node-head">
                    <h2 class={classes!("node-title", spec.map(|k| k.category))}>
                        { crate::looks::icon(&n.kind) }
                        <span>{ n.label.clone().unwrap_or_else(|| n.id.clone()) }</span>
                    </h2>
                    if self.open_view_node().is_none() {
                        <button type="button" class="open-node-view" title="Open with its input and output side by side"
                            onclick={{ let id = n.id.clone(); link.callback(move |_| super::node_view::Msg::Open(id.clone())) }}>{ "Open ⤢" }</button>
                    }
                </div>
                <p class="summary">
                    <strong>{ title }</strong>{ " · " }
                    { spec.map(|k| crate::looks::rich(k.summary)).unwrap_or_default() }
                    { " " }<code class="kind-name" title="kind">{ &n.kind }</code>
                    if n.label.is_some() { { " " }<code class="node-id" title="node id (what templates name)">{ &n.id }</code> }
                </p>
                if n.disabled { <p class="off-note">{ "Switched off: it passes its input on unchanged." }</p> }
                { for problems }
                { for test }
                { for step }
                <div class="tabs" role="tablist" aria-label="Node">
                    { tab(false, "Parameters") }
                    { tab(true, "Settings") }
                </div>
                <fieldset disabled={viewing} id="node-tab-panel" role="tabpanel"
                    aria-labelledby={if settings_tab { "tab-settings" } else { "tab-parameters" }}>
                    { body }
                </fieldset>
                { self.credential_dialog(ctx, n) }
            </section>
        }
    }
}

impl Canvas {
    /// Connecting without a pointer: from another node's output to this
    /// one, or from this one to another node.
    fn connect_view(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        let Some(editor) = self.shown() else {
            return Html::default();
        };
        let link = ctx.link();
        // Listed only when asked for: every other node's ports, drawn on
        // every frame of a drag, would cost a thousand-node workflow.
        if !self.inspector.connect_open {
            return html! {
                <div class="connect closed">
                    <button type="button" class="connect-open" onclick={link.callback(|_| super::Msg::ConnectOpen(true))}>{ "Connect…" }</button>
                </div>
            };
        }
        let spec = kinds::spec(&n.kind);
        let my_ports = spec.map(|k| k.output_ports(&n.config)).unwrap_or_default();
        let has_input = spec.is_some_and(|k| k.has_input());
        let sources: Vec<(String, String)> = editor
            .wf
            .nodes
            .iter()
            .filter(|o| o.id != n.id)
            .flat_map(|o| {
                let ports = kinds::spec(&o.kind)
                    .map(|k| k.output_ports(&o.config))
                    .unwrap_or_default();
                ports.into_iter().map(move |p| (o.id.clone(), p))
            })
            .collect();
        let targets: Vec<String> = editor
            .wf
            .nodes
            .iter()
            .filter(|o| o.id != n.id && kinds::spec(&o.kind).is_some_and(|k| k.has_input()))
            .map(|o| o.id.clone())
            .collect();
        let from_value = Some(self.inspector.connect_from.clone())
            .filter(|v| sources.iter().any(|(id, p)| format!("{id}:{p}") == *v))
            .or_else(|| sources.first().map(|(id, p)| format!("{id}:{p}")))
            .unwrap_or_default();
        let to_value = Some(self.inspector.connect_to.clone())
            .filter(|v| targets.contains(v))
            .or_else(|| targets.first().cloned())
            .unwrap_or_default();
        let port_value = Some(self.inspector.connect_port.clone())
            .filter(|v| my_ports.contains(v))
            .or_else(|| my_ports.first().cloned())
            .unwrap_or_default();
        let me = n.id.clone();
        let connect_in = {
            let (me, from) = (me.clone(), from_value.clone());
            link.callback(move |_| {
                let (node, port) = from.rsplit_once(':').unwrap_or((&from, "out"));
                super::Msg::Act(Action::Connect {
                    from: node.to_string(),
                    port: port.to_string(),
                    to: me.clone(),
                })
            })
        };
        let connect_out = {
            let (to, port) = (to_value.clone(), port_value.clone());
            link.callback(move |_| {
                super::Msg::Act(Action::Connect {
                    from: me.clone(),
                    port: port.clone(),
                    to: to.clone(),
                })
            })
        };
        let on_from = link.callback(move |e: Event| {
            let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
            super::Msg::ConnectChoice(0, s.value())
        });
        let on_to = link.callback(move |e: Event| {
            let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
            super::Msg::ConnectChoice(1, s.value())
        });
        let on_port = link.callback(move |e: Event| {
            let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
            super::Msg::ConnectChoice(2, s.value())
        });
        html! {
            <fieldset class="connect">
                <legend>{ "Connect" }</legend>
                <button type="button" class="connect-close" onclick={link.callback(|_| super::Msg::ConnectOpen(false))}>{ "Close" }</button>
                if has_input && !sources.is_empty() {
                    <label for="connect-from">{ "From another node" }</label>
                    <div class="row">
                        <select id="connect-from" onchange={on_from}>
                            { for sources.iter().map(|(id, p)| {
                                let v = format!("{id}:{p}");
                                html! { <option value={v.clone()} selected={v == from_value}>{ if p == "out" { id.clone() } else { format!("{id} ({p})") } }</option> }
                            }) }
                        </select>
                        <button type="button" class="connect-in" onclick={connect_in}>{ "Connect" }</button>
                    </div>
                }
                if !my_ports.is_empty() && !targets.is_empty() {
                    <label for="connect-to">{ "To another node" }</label>
                    <div class="row">
                        if my_ports.len() > 1 {
                            <select id="connect-port" aria-label="From this node's port" onchange={on_port}>
                                { for my_ports.iter().map(|p| html! { <option value={p.clone()} selected={*p == port_value}>{ p }</option> }) }
                            </select>
                        }
                        <select id="connect-to" onchange={on_to}>
                            { for targets.iter().map(|t| html! { <option value={t.clone()} selected={*t == to_value}>{ t }</option> }) }
                        </select>
                        <button type="button" class="connect-out" onclick={connect_out}>{ "Connect" }</button>
                    </div>
                }
            </fieldset>
        }
    }
}

/// The node's settings beside its config: switched off, retries, what a
/// failure does, its time limit, and notes.
fn settings_form(ctx: &Context<Canvas>, n: &sluice_model::Node) -> Html {
    let link = ctx.link();
    let setter = |key: &'static str| {
        let node = n.id.clone();
        link.callback(move |value: Option<Value>| {
            super::Msg::Act(Action::SetNodeSetting {
                node: node.clone(),
                key: key.to_string(),
                value,
            })
        })
    };
    let number = |e: &InputEvent| -> Option<Option<Value>> {
        let i: web_sys::HtmlInputElement = e.target_unchecked_into();
        let text = i.value();
        let text = text.trim();
        if text.is_empty() {
            return Some(None);
        }
        // Not a number yet (a lone `-`, `1e`): nothing changes.
        let v: Value = serde_json::from_str(text).ok()?;
        v.is_number().then_some(Some(v))
    };
    let on_disabled = {
        let set = setter("disabled");
        Callback::from(move |e: Event| {
            let i: web_sys::HtmlInputElement = e.target_unchecked_into();
            set.emit(Some(Value::Bool(i.checked())));
        })
    };
    let retry = n.retry.unwrap_or(sluice_model::RetryPolicy {
        max_attempts: None,
        backoff_ms: None,
        factor: None,
    });
    let retry_field = |field: &'static str| {
        let set = setter("retry");
        let current = serde_json::to_value(retry).unwrap_or_default();
        Callback::from(move |e: InputEvent| {
            let Some(v) = number(&e) else { return };
            let mut r = current.clone();
            if let Some(m) = r.as_object_mut() {
                match v {
                    Some(v) => m.insert(field.to_string(), v),
                    None => m.remove(field),
                };
            }
            set.emit(Some(r));
        })
    };
    let on_timeout = {
        let set = setter("timeout_ms");
        Callback::from(move |e: InputEvent| {
            if let Some(v) = number(&e) {
                set.emit(v);
            }
        })
    };
    let on_error = {
        let set = setter("on_error");
        Callback::from(move |e: Event| {
            let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
            let v = s.value();
            set.emit((!v.is_empty()).then_some(Value::String(v)));
        })
    };
    let on_notes = {
        let set = setter("notes");
        Callback::from(move |e: InputEvent| {
            let a: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
            set.emit(Some(Value::String(a.value())));
        })
    };
    let on_error_now = n
        .on_error
        .and_then(|o| serde_json::to_value(o).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let notes = n
        .extra
        .get("notes")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let num = |v: Option<String>| v.unwrap_or_default();
    html! {
        <form class="settings" onsubmit={Callback::from(|e: SubmitEvent| e.prevent_default())}>
            <div class="setting check">
                <input id="node-disabled" type="checkbox" checked={n.disabled} onchange={on_disabled} />
                <label for="node-disabled">{ "Switched off" }</label>
                <small class="help">{ "The node does not run; its input passes on unchanged." }</small>
            </div>
            <fieldset class="retry">
                <legend>{ "Retry when it fails" }</legend>
                <label for="node-retry-attempts">{ "Attempts (the first included)" }</label>
                <input id="node-retry-attempts" type="number" min="1" step="1" placeholder={if n.retry.is_some() { "3" } else { "1 (no retry)" }}
                    value={num(retry.max_attempts.map(|v| v.to_string()))} oninput={retry_field("max_attempts")} />
                <label for="node-retry-backoff">{ "First delay (ms)" }</label>
                <input id="node-retry-backoff" type="number" min="0" step="1" placeholder="200"
                    value={num(retry.backoff_ms.map(|v| v.to_string()))} oninput={retry_field("backoff_ms")} />
                <label for="node-retry-factor">{ "Each later delay ×" }</label>
                <input id="node-retry-factor" type="number" min="0" step="any" placeholder="2"
                    value={num(retry.factor.map(|v| v.to_string()))} oninput={retry_field("factor")} />
            </fieldset>
            <div class="setting">
                <label for="node-on-error">{ "When it still fails" }</label>
                <select id="node-on-error" onchange={on_error}>
                    <option value="" selected={on_error_now.is_empty() || on_error_now == "fail"}>{ "Fail the run" }</option>
                    <option value="continue" selected={on_error_now == "continue"}>{ "Go on: the error and input on its output" }</option>
                    <option value="route" selected={on_error_now == "route"}>{ "Send the error and input to its error port" }</option>
                </select>
            </div>
            <div class="setting">
                <label for="node-timeout">{ "Time limit (ms)" }</label>
                <input id="node-timeout" type="number" min="1" step="1" placeholder="none"
                    value={num(n.timeout_ms.map(|v| v.to_string()))} oninput={on_timeout} />
            </div>
            <div class="setting">
                <label for="node-notes">{ "Notes" }</label>
                <textarea id="node-notes" rows="4" placeholder="What this node is for (Markdown)" value={notes.clone()} oninput={on_notes} />
                if !notes.trim().is_empty() {
                    <div class="notes-preview">{ for notes.lines().map(|l| html! { <p>{ crate::looks::rich(l) }</p> }) }</div>
                }
            </div>
        </form>
    }
}

/// A template field's value on the latest run's data, and what it reads
/// that the data does not have (in red).
fn preview_view(p: &Preview) -> Html {
    let value = match &p.value {
        Ok(v) => html! { <code class="preview-value">{ v.to_string() }</code> },
        Err(e) => html! { <span class="preview-error">{ e.to_string() }</span> },
    };
    html! {
        <div class="preview" title="This field's value on the last run's data">
            <span class="preview-label">{ "= " }</span>{ value }
            if !p.missing.is_empty() {
                <ul class="undefined" role="alert">
                    { for p.missing.iter().map(|m| html! {
                        <li><code>{ m }</code>{ " is not in the last run's data" }</li>
                    }) }
                </ul>
            }
        </div>
    }
}
