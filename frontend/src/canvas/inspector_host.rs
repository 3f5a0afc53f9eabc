//! The canvas's right-hand panel: the selected node's form (from its
//! kind's schema, see [`crate::inspector`]) and its part of the shown run,
//! then the run panel, the version history and the runs list.

use serde_json::Value;
use sluice_api::CredentialEntry;
use sluice_model::kinds;
use yew::prelude::*;

use super::Canvas;
use crate::inspector::{field, resolve};
use crate::state::{Action, Editor};

/// The inspector's part of the canvas's state.
#[derive(Default)]
pub struct InspectorHost {
    /// The credentials' names, offered by credential fields.
    credentials: Vec<String>,
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
                        super::Msg::Act(Action::SetConfig {
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
                    &self.inspector.credentials,
                    set,
                )
            });
        let step = self.run_step(n);
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
