//! The canvas's version history: the panel listing who changed what when,
//! a past version shown read-only on the canvas, and restoring it.

use serde_json::{Value, json};
use yew::prelude::*;

use super::Canvas;
use super::runs::when;
use crate::net;
use crate::state::Editor;

pub enum Msg {
    /// Show or hide the version history.
    Toggle,
    Versions(Result<Value, String>),
    /// Show a past version on the canvas, read-only.
    View(String),
    Loaded(String, Result<Value, String>),
    Restore(String),
    Restored(Result<Value, String>),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::History(msg)
    }
}

/// The history part of the canvas's state.
#[derive(Default)]
pub struct History {
    /// The version history, when open.
    versions: Option<Vec<Value>>,
    /// The past version shown on the canvas.
    pub view: Option<VersionView>,
}

/// A past version shown on the canvas.
pub struct VersionView {
    version: String,
    summary: String,
    pub editor: Editor,
}

impl Canvas {
    pub(super) fn on_history(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Toggle => {
                if self.history.versions.take().is_none() {
                    self.history.versions = Some(Vec::new());
                    Canvas::fetch_versions(ctx);
                }
                true
            }
            Msg::Versions(result) => {
                match result {
                    Ok(Value::Array(list)) => self.history.versions = Some(list),
                    Ok(_) => {}
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::View(version) => {
                let path = format!(
                    "/api/v1/workflows/{}/versions/{}",
                    ctx.props().workflow,
                    js_sys::encode_uri_component(&version)
                );
                ctx.link().send_future(async move {
                    let wf = net::call("GET", &path, None).await;
                    Msg::Loaded(version, wf)
                });
                false
            }
            Msg::Loaded(version, result) => {
                let wf = result
                    .and_then(|v| sluice_model::Workflow::from_value(v).map_err(|e| e.to_string()));
                match wf {
                    Ok(wf) => {
                        let mut editor = Editor::new(wf);
                        if let Some(live) = &self.editor {
                            editor.viewport = live.viewport;
                        }
                        let summary = self
                            .history
                            .versions
                            .iter()
                            .flatten()
                            .find(|v| v["version"] == version.as_str())
                            .and_then(|v| v["summary"].as_str())
                            .unwrap_or_default()
                            .to_string();
                        self.history.view = Some(VersionView {
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
                        self.history.view = None;
                        self.touch();
                        self.status = "restored".into();
                        if self.history.versions.is_some() {
                            Canvas::fetch_versions(ctx);
                        }
                    }
                    Err(e) => self.status = e,
                }
                true
            }
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

    /// The banner over a past version shown on the canvas.
    pub(super) fn version_banner(&self, ctx: &Context<Self>) -> Option<Html> {
        let link = ctx.link();
        self.history.view.as_ref().map(|v| {
            let version = v.version.clone();
            html! {
                <div class="run-banner version-banner" role="status">
                    <span>{ "Version " }<code>{ &v.version }</code>{ " · " }{ &v.summary }</span>
                    <button class="restore" onclick={link.callback(move |_| Msg::Restore(version.clone()))}>{ "Restore this version" }</button>
                    <button class="close-run" onclick={link.callback(|_| super::Msg::CloseRun)}>{ "Back to editing (Esc)" }</button>
                </div>
            }
        })
    }

    /// The version history: who changed what when, to view or restore.
    pub(super) fn history_panel(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let me = self.sync.doc().loro().peer_id().to_string();
        let versions = &self.history.versions;
        let rows = versions.iter().flatten().map(|v| {
            let version = v["version"].as_str().unwrap_or_default().to_string();
            let author = match (v["author"].as_str(), v["message"].as_str()) {
                (Some(a), _) if a == me => "you".to_string(),
                (_, Some(m)) => m.to_string(),
                (Some(a), None) => format!("peer {}", &a[..a.len().min(6)]),
                _ => "someone".to_string(),
            };
            let current = self.history.view.as_ref().is_some_and(|w| w.version == version);
            let view = {
                let version = version.clone();
                link.callback(move |_| Msg::View(version.clone()))
            };
            html! {
                <li class={classes!("version", current.then_some("current"))} data-version={version.clone()}>
                    <button class="view-version" onclick={view}>
                        <span class="when">{ when(v["at_us"].as_i64().unwrap_or(0)) }</span>
                        <span class="who">{ author }</span>
                        <span class="what">{ v["summary"].as_str().unwrap_or_default() }</span>
                    </button>
                </li>
            }
        });
        html! {
            <section class="history-panel">
                <h2>
                    <button class="history-toggle" aria-expanded={versions.is_some().to_string()}
                        onclick={link.callback(|_| Msg::Toggle)}>
                        { if versions.is_some() { "▾ History" } else { "▸ History" } }
                    </button>
                </h2>
                if versions.is_some() {
                    <ol class="versions">{ for rows }</ol>
                }
            </section>
        }
    }
}
