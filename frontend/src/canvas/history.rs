//! The canvas's version history: the panel listing who changed what when,
//! a past version shown read-only on the canvas, and restoring it.

use serde_json::{Value, json};
use sluice_api::{Restored, VersionEntry};
use yew::prelude::*;

use super::Canvas;
use super::runs::when;
use crate::net;
use crate::state::Editor;

pub enum Msg {
    /// Show or hide the version history.
    Toggle,
    Versions(Result<Vec<VersionEntry>, String>),
    /// Show a past version on the canvas, read-only.
    View(String),
    Loaded(String, Result<Value, String>),
    Restore(String),
    Restored(Result<Restored, String>),
    /// Fetch the list again (a publish marked a version).
    Refresh,
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
    versions: Option<Vec<VersionEntry>>,
    /// The past version shown on the canvas.
    pub view: Option<VersionView>,
}

impl History {
    /// Whether the version history is open.
    pub fn is_open(&self) -> bool {
        self.versions.is_some()
    }
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
                    Ok(list) => self.history.versions = Some(list),
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
                            .find(|v| v.version == version)
                            .map(|v| v.summary.clone())
                            .unwrap_or_default();
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
            Msg::Refresh => {
                Canvas::fetch_versions(ctx);
                false
            }
            Msg::Restore(version) => {
                let path = format!(
                    "/api/v1/workflows/{}/versions/{}/restore",
                    ctx.props().workflow,
                    js_sys::encode_uri_component(&version)
                );
                ctx.link().send_future(async move {
                    Msg::Restored(net::call_as("POST", &path, Some(&json!({}))).await)
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
            .send_future(async move { Msg::Versions(net::call_as("GET", &path, None).await) });
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
            let version = v.version.clone();
            let author = match (v.author.as_str(), v.message.as_deref()) {
                (a, _) if a == me => "you".to_string(),
                (_, Some(m)) => m.to_string(),
                ("", None) => "someone".to_string(),
                (a, None) => format!("peer {}", a.get(..6).unwrap_or(a)),
            };
            let current = self.history.view.as_ref().is_some_and(|w| w.version == version);
            let view = {
                let version = version.clone();
                link.callback(move |_| Msg::View(version.clone()))
            };
            html! {
                <li class={classes!("version", current.then_some("current"))} data-version={version.clone()}>
                    <button class="view-version" onclick={view}>
                        <span class="when">{ when(v.at_us) }</span>
                        <span class="who">{ author }</span>
                        <span class="what">{ &v.summary }</span>
                        if v.published_at_us.is_some() {
                            <span class="published-mark" title="This version was published">{ "published" }</span>
                        }
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
