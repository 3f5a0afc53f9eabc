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
    /// The credentials' names, offered by credential fields.
    credentials: Vec<String>,
    /// Text typed into a node's field that is not a value yet (a JSON
    /// object with a syntax error), by node and field: shown again, with
    /// its error, when the node is selected again.
    kept: std::collections::HashMap<(String, String), String>,
}

impl Canvas {
    /// `GET /credentials` answered.
    pub(super) fn on_credentials(&mut self, result: Result<Vec<CredentialEntry>, String>) -> bool {
        if let Ok(list) = result {
            self.inspector.credentials = list.into_iter().map(|c| c.name).collect();
            return true;
        }
        false
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
        let node = selected.map(|n| self.node_form(ctx, n));
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
        html! {
            <section class="node-panel" key={n.id.clone()} data-node={n.id.clone()}>
                <h2>{ &n.id }</h2>
                <p class="summary"><code>{ &n.kind }</code>{ " · " }{ spec.map(|k| k.summary).unwrap_or("unknown kind") }</p>
                { for problems }
                { for test }
                { for step }
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
