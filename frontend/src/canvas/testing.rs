//! Testing one piece of a workflow from the node panel: "Run this node" on
//! the input it last received (or on pinned data), pinning a node's output
//! as test data for the nodes after it, and a webhook's URLs with "Listen
//! for a test call", whose message becomes the node's output and the Run
//! input.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use sluice_api::{NodeTested, StepStatus, TestCall, TestNode};
use sluice_model::preview::Data;
use yew::prelude::*;

use super::Canvas;
use crate::net;
use crate::scene::error_text;
use crate::state::Action;

pub enum Msg {
    /// Run the node, once, on its test data.
    RunNode(String),
    Tested(String, Result<NodeTested, String>),
    /// Wait for one call to the webhook's test URL.
    Listen(String),
    Heard(String, Result<TestCall, String>),
    /// Pin the node's last output (from a test or the shown run).
    Pin(String),
    Unpin(String),
    /// Copy a URL.
    Copy(String),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Testing(msg)
    }
}

/// The testing part of the canvas's state.
#[derive(Default)]
pub struct Testing {
    /// The last test of each node (or the call its test URL received).
    results: BTreeMap<String, NodeTested>,
    /// Nodes being run, and webhooks listening.
    busy: BTreeMap<String, &'static str>,
    /// Why the last test or listen of a node did not happen.
    errors: BTreeMap<String, String>,
    copied: Option<String>,
}

impl Canvas {
    /// What "Run this node" runs `node` on: its data in the latest run
    /// that reached it, with pinned outputs over it (an upstream node's
    /// pinned message is also the input, when it feeds this node).
    pub(super) fn test_data(&self, node: &str) -> Data {
        let mut data = self
            .runs
            .preview
            .as_ref()
            .map(|run| Data::of_run(run, node))
            .unwrap_or_default();
        let Some(editor) = self.shown() else {
            return data;
        };
        if let Some(Value::Object(pinned)) = editor.wf.extra.get("pinned") {
            for (id, ports) in pinned {
                let Some((_, message)) = ports.as_object().and_then(|p| p.iter().next()) else {
                    continue;
                };
                data.nodes.insert(id.clone(), message.clone());
                for e in &editor.wf.edges {
                    let (from, to) = (e.source(), e.target());
                    if from.node == id.as_str()
                        && to.node == node
                        && let Some(m) = ports.get(from.port)
                    {
                        data.input = Some(m.clone());
                    }
                }
            }
        }
        data
    }

    /// Node `node`'s output (by port) in its last test here.
    pub(super) fn tested_output(&self, node: &str) -> Option<&Value> {
        self.testing.results.get(node)?.output.as_ref()
    }

    pub(super) fn on_testing(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        let workflow = ctx.props().workflow.clone();
        match msg {
            Msg::RunNode(node) => {
                let data = self.test_data(&node);
                let body = serde_json::to_value(TestNode {
                    input: data.input.unwrap_or(Value::Object(Map::new())),
                    nodes: data.nodes,
                })
                .unwrap_or_default();
                self.testing.busy.insert(node.clone(), "running");
                self.testing.errors.remove(&node);
                let path = format!("/api/v1/workflows/{workflow}/nodes/{node}/test");
                ctx.link().send_future(async move {
                    Msg::Tested(node, net::call_as("POST", &path, Some(&body)).await)
                });
                true
            }
            Msg::Tested(node, result) => {
                self.testing.busy.remove(&node);
                match result {
                    Ok(tested) => {
                        self.testing.results.insert(node, tested);
                    }
                    Err(e) => {
                        self.testing.errors.insert(node, e);
                    }
                }
                true
            }
            Msg::Listen(node) => {
                self.testing.busy.insert(node.clone(), "listening");
                self.testing.errors.remove(&node);
                let path = format!("/api/v1/workflows/{workflow}/nodes/{node}/listen");
                ctx.link().send_future(async move {
                    Msg::Heard(node, net::call_as("POST", &path, None).await)
                });
                true
            }
            Msg::Heard(node, result) => {
                self.testing.busy.remove(&node);
                match result {
                    Ok(call) => {
                        // The call is the trigger's message: its output, and
                        // what the Run button runs on.
                        self.runs.prefill_input(&call.message);
                        let mut output = Map::new();
                        output.insert("out".into(), call.message);
                        self.testing.results.insert(
                            node.clone(),
                            NodeTested {
                                node,
                                status: StepStatus::Succeeded,
                                output: Some(Value::Object(output)),
                                error: None,
                                logs: Vec::new(),
                                duration_us: 0,
                            },
                        );
                    }
                    Err(e) => {
                        self.testing.errors.insert(node, e);
                    }
                }
                true
            }
            Msg::Pin(node) => {
                let output = self
                    .testing
                    .results
                    .get(&node)
                    .and_then(|t| t.output.clone())
                    .or_else(|| self.runs.step_output(&node));
                match output {
                    Some(output) => self.act(Action::SetPinned {
                        node,
                        output: Some(output),
                    }),
                    None => false,
                }
            }
            Msg::Unpin(node) => self.act(Action::SetPinned { node, output: None }),
            Msg::Copy(text) => {
                // Without permission the text is still shown, to copy by hand.
                crate::looks::copy_text(&text);
                self.testing.copied = Some(text);
                true
            }
        }
    }

    /// The node panel's test section.
    pub(super) fn test_panel(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        let link = ctx.link();
        let id = n.id.clone();
        let busy = self.testing.busy.get(&id).copied();
        let pinned = self
            .shown()
            .and_then(|e| e.wf.extra.get("pinned"))
            .and_then(|p| p.get(&id))
            .cloned();
        let result = self.testing.results.get(&id);
        let can_pin = result.and_then(|r| r.output.as_ref()).is_some()
            || self.runs.step_output(&id).is_some();
        let data = self.test_data(&id);
        let source = if data.input.is_some() {
            "on the input it last received"
        } else {
            "on an empty input (run the workflow once, or pin the output of the node before it)"
        };
        let webhook = (n.kind == "trigger.webhook").then(|| self.webhook_urls(ctx, n));
        let on = |make: fn(String) -> Msg| {
            let id = id.clone();
            link.callback(move |_| make(id.clone()))
        };
        html! {
            <section class="node-test" data-node={id.clone()}>
                <h3>{ "Test" }</h3>
                { for webhook }
                <p class="test-actions">
                    <button class="run-node" disabled={busy.is_some()} title={format!("Runs only this node, {source}")}
                        onclick={on(Msg::RunNode)}>
                        { if busy == Some("running") { "Running…" } else { "Run this node" } }
                    </button>
                    if pinned.is_some() {
                        <button class="unpin" onclick={on(Msg::Unpin)} title="Run it again instead of using the pinned data">{ "Unpin output" }</button>
                    } else {
                        <button class="pin" disabled={!can_pin} onclick={on(Msg::Pin)}
                            title="Keep this output as test data for the nodes after it (draft runs use it; published runs never)">{ "Pin output" }</button>
                    }
                </p>
                if let Some(e) = self.testing.errors.get(&id) {
                    <p class="test-error" role="alert">{ e }</p>
                }
                if let Some(p) = &pinned {
                    <details class="pinned-output" open=true>
                        <summary>{ "Pinned output (draft runs use it instead of running the node)" }</summary>
                        { super::runs::output_tree(&id, p) }
                    </details>
                }
                if let Some(r) = result {
                    <div class={classes!("test-result", format!("test-{}", r.status.as_str()))}>
                        <p><strong class="test-status">{ r.status.as_str() }</strong>
                            { format!(" · {:.1} ms", r.duration_us as f64 / 1000.0) }</p>
                        if let Some(e) = &r.error {
                            <pre class="step-error">{ error_text(e) }</pre>
                        }
                        if let Some(out) = &r.output {
                            <div class="test-output">{ super::runs::output_tree(&id, out) }</div>
                        }
                        if !r.logs.is_empty() {
                            <ol class="logs">{ for r.logs.iter().map(|l| html! { <li class={l.level.clone()}>{ &l.message }</li> }) }</ol>
                        }
                    </div>
                }
            </section>
        }
    }

    /// A webhook's production and test URLs, and "Listen for a test call".
    fn webhook_urls(&self, ctx: &Context<Self>, n: &sluice_model::Node) -> Html {
        let link = ctx.link();
        let origin = web_sys::window()
            .and_then(|w| w.location().origin().ok())
            .unwrap_or_default();
        let path = n
            .config
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim_matches('/')
            .to_string();
        let method = n
            .config
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("POST")
            .to_string();
        let workflow = &ctx.props().workflow;
        let production = format!("{origin}/hook/{workflow}/{path}");
        let test = format!("{origin}/hook-test/{workflow}/{path}");
        let listening = self.testing.busy.get(&n.id) == Some(&"listening");
        let row = |class: &'static str, label: &'static str, url: String, title: &'static str| {
            let copy = {
                let url = url.clone();
                link.callback(move |_| Msg::Copy(url.clone()))
            };
            html! {
                <div class={classes!("webhook-url", class)} title={title}>
                    <span class="url-label">{ label }</span>
                    <code class="url">{ format!("{method} {url}") }</code>
                    <button class="copy" onclick={copy}>{ "Copy" }</button>
                </div>
            }
        };
        let id = n.id.clone();
        html! {
            <div class="webhook-urls">
                { row("production", "Production", production, "Runs the published version") }
                { row("test", "Test", test, "Only while listening: the call is shown here, no run starts") }
                <button class="listen" disabled={listening} onclick={link.callback(move |_| Msg::Listen(id.clone()))}>
                    { if listening { "Listening for a test call…" } else { "Listen for a test call" } }
                </button>
                if let Some(c) = &self.testing.copied {
                    <p class="copied" role="status">{ "Copied " }<code>{ c }</code></p>
                }
            </div>
        }
    }
}
