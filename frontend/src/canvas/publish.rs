//! The canvas's publish panel: every edit is saved as the draft at once,
//! and what runs (webhooks, schedules, runs by id) changes only here: the
//! panel says whether the draft is what runs, what publishing would change,
//! and the problems that stop it; Publish and Unpublish act on it. Edits
//! from peers are called out ("3 changes from Bob not yet published here")
//! and Review shows every change from what runs, per node and field, code
//! as a line diff.

use serde_json::json;
use sluice_api::{PublishMode, PublishState};
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use yew::prelude::*;

use super::Canvas;
use crate::net;

pub enum Msg {
    /// Ask the engine where the draft stands (soon: edits come in bursts).
    Refresh,
    /// The delayed refresh is due (`generation`: the request it belongs to).
    Due(u64),
    Loaded(Result<PublishState, String>),
    Publish,
    Unpublish,
    Done(Result<PublishState, String>),
    /// Show or hide what publishing would change.
    Review,
    /// The published version's workflow (what the review compares with).
    ReviewBase(String, Result<serde_json::Value, String>),
    /// Give the shared worker the published version / take it back.
    Deploy,
    Undeploy,
    Deployed(Result<sluice_api::DeployState, String>),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Publish(msg)
    }
}

/// The publish part of the canvas's state.
#[derive(Default)]
pub struct Publishing {
    pub state: Option<PublishState>,
    /// A publish or unpublish on its way.
    busy: bool,
    /// Refresh requests; only the newest one's timer fetches.
    generation: u64,
    /// What the last publish or unpublish answered, when it failed.
    error: Option<String>,
    /// The review is open.
    reviewing: bool,
    /// The published workflow the review compares with, by its version.
    base: Option<(String, Result<serde_json::Value, String>)>,
}

/// How long after an edit the panel asks again.
const REFRESH_AFTER_MS: i32 = 300;

impl Canvas {
    pub(super) fn on_publish(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Refresh => {
                self.publishing.generation += 1;
                let generation = self.publishing.generation;
                let link = ctx.link().clone();
                let due = Closure::once_into_js(move || link.send_message(Msg::Due(generation)));
                if let Some(w) = web_sys::window() {
                    w.set_timeout_with_callback_and_timeout_and_arguments_0(
                        due.unchecked_ref(),
                        REFRESH_AFTER_MS,
                    )
                    .ok();
                }
                false
            }
            Msg::Due(generation) => {
                if generation == self.publishing.generation {
                    Canvas::fetch_publish_state(ctx);
                }
                false
            }
            Msg::Loaded(result) => match result {
                Ok(state) => {
                    self.publishing.state = Some(state);
                    if self.publishing.reviewing {
                        self.fetch_review_base(ctx);
                    }
                    true
                }
                Err(e) => {
                    self.publishing.error = Some(e);
                    true
                }
            },
            Msg::Publish | Msg::Unpublish => {
                let publish = matches!(msg, Msg::Publish);
                let state = self.publishing.state.as_ref();
                let path = format!(
                    "/api/v1/workflows/{}/{}",
                    ctx.props().workflow,
                    if publish { "publish" } else { "unpublish" }
                );
                // Exactly the version shown (its summary and problems),
                // not whatever the draft became since.
                let body = match (publish, state) {
                    (true, Some(s)) => json!({"version": s.draft_version}),
                    _ => json!({}),
                };
                self.publishing.busy = true;
                self.publishing.error = None;
                ctx.link().send_future(async move {
                    Msg::Done(net::call_as("POST", &path, Some(&body)).await)
                });
                true
            }
            Msg::Review => {
                self.publishing.reviewing = !self.publishing.reviewing;
                if self.publishing.reviewing {
                    self.fetch_review_base(ctx);
                }
                true
            }
            Msg::ReviewBase(version, result) => {
                self.publishing.base = Some((version, result));
                true
            }
            Msg::Deploy | Msg::Undeploy => {
                let method = if matches!(msg, Msg::Deploy) {
                    "POST"
                } else {
                    "DELETE"
                };
                let path = format!("/api/v1/workflows/{}/deploy", ctx.props().workflow);
                self.publishing.busy = true;
                self.publishing.error = None;
                ctx.link().send_future(async move {
                    Msg::Deployed(net::call_as(method, &path, None).await)
                });
                true
            }
            Msg::Deployed(result) => {
                self.publishing.busy = false;
                match result {
                    Ok(d) => {
                        self.status = match &d.version {
                            Some(_) => "deployed to the shared worker".into(),
                            None => "undeployed".into(),
                        };
                    }
                    Err(e) => self.publishing.error = Some(e),
                }
                Canvas::fetch_publish_state(ctx);
                true
            }
            Msg::Done(result) => {
                self.publishing.busy = false;
                match result {
                    Ok(state) => {
                        self.status = if state.published {
                            "published".into()
                        } else {
                            "unpublished".into()
                        };
                        self.publishing.state = Some(state);
                        if self.history.is_open() {
                            ctx.link().send_message(super::history::Msg::Refresh);
                        }
                    }
                    Err(e) => {
                        self.publishing.error = Some(e);
                        Canvas::fetch_publish_state(ctx);
                    }
                }
                true
            }
        }
    }

    /// Fetches the published version to review against, unless it is the
    /// one already here.
    fn fetch_review_base(&self, ctx: &Context<Self>) {
        let Some(version) = self
            .publishing
            .state
            .as_ref()
            .filter(|s| s.published)
            .and_then(|s| s.published_version.clone())
        else {
            return;
        };
        if matches!(&self.publishing.base, Some((v, Ok(_))) if *v == version) {
            return;
        }
        let path = format!(
            "/api/v1/workflows/{}/versions/{}",
            js_sys::encode_uri_component(&ctx.props().workflow),
            js_sys::encode_uri_component(&version)
        );
        ctx.link().send_future(async move {
            Msg::ReviewBase(version, net::call("GET", &path, None).await)
        });
    }

    /// What publishing the draft would change, node by node.
    fn review_view(&self, state: &PublishState) -> Html {
        use crate::review::{Line, NodeChange, Review};
        let Some(editor) = self.editor.as_ref() else {
            return Html::default();
        };
        let base = match (&self.publishing.base, state.published) {
            (_, false) => None,
            (Some((v, Ok(wf))), true) if Some(v) == state.published_version.as_ref() => Some(wf),
            (Some((_, Err(e))), true) => {
                return html! { <p class="review-error" role="alert">{ e }</p> };
            }
            _ => return html! { <p class="review" data-state="loading">{ "Loading…" }</p> },
        };
        let draft = serde_json::to_value(&editor.wf).unwrap_or_default();
        let review = Review::of(base, &draft);
        if review.is_empty() {
            return html! { <p class="review" data-state="empty">{ "Nothing to publish." }</p> };
        }
        let show = |v: &Option<serde_json::Value>| match v {
            None => "—".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        let field = |f: &crate::review::FieldChange| {
            let body = match &f.lines {
                Some(lines) => html! {
                    <pre class="diff">{ for lines.iter().map(|l| match l {
                        Line::Same(t) => html! { <span class="same">{ format!("  {t}\n") }</span> },
                        Line::Removed(t) => html! { <del>{ format!("- {t}\n") }</del> },
                        Line::Added(t) => html! { <ins>{ format!("+ {t}\n") }</ins> },
                    }) }</pre>
                },
                None => html! {
                    <span class="change"><del>{ show(&f.before) }</del>{ " → " }<ins>{ show(&f.after) }</ins></span>
                },
            };
            html! { <li class="review-field" data-path={f.path.clone()}><code>{ &f.path }</code>{ " " }{ body }</li> }
        };
        let nodes = review.nodes.iter().map(|n| {
            let (key, word) = match n.change {
                NodeChange::Added => ("added", "added"),
                NodeChange::Removed => ("removed", "removed"),
                NodeChange::Changed => ("changed", "changed"),
            };
            html! {
                <section class="review-node" data-node={n.node.clone()} data-change={key}>
                    <h3>{ format!("{} · {word}", n.node) }</h3>
                    if n.change == NodeChange::Changed {
                        <ul>{ for n.fields.iter().map(field) }</ul>
                    }
                </section>
            }
        });
        html! {
            <div class="review">
                { for nodes }
                if !review.workflow.is_empty() {
                    <section class="review-node" data-node="" data-change="workflow">
                        <h3>{ "Workflow" }</h3>
                        <ul>{ for review.workflow.iter().map(field) }</ul>
                    </section>
                }
            </div>
        }
    }

    pub(super) fn fetch_publish_state(ctx: &Context<Self>) {
        let path = format!("/api/v1/workflows/{}/publish", ctx.props().workflow);
        ctx.link()
            .send_future(async move { Msg::Loaded(net::call_as("GET", &path, None).await) });
    }

    /// The panel: what runs against the draft, and the buttons.
    pub(super) fn publish_panel(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let p = &self.publishing;
        let Some(state) = &p.state else {
            return html! {
                <section class="publish-panel" data-state="loading"><h2>{ "Publish" }</h2></section>
            };
        };
        let up_to_date = state.up_to_date();
        let (key, line) = if up_to_date {
            ("live", "Published: the draft is what runs.".to_string())
        } else if state.published {
            (
                "changed",
                format!(
                    "Edits not published yet: {}. What runs is the version published {}.",
                    state.summary,
                    state
                        .published_at_us
                        .map(super::runs::when)
                        .unwrap_or_else(|| "earlier".into())
                ),
            )
        } else {
            (
                "unpublished",
                "Not published: its triggers are off; Run tries the draft.".to_string(),
            )
        };
        let problems = state
            .problems
            .iter()
            .map(|pr| html! { <li>{ pr.to_string() }</li> });
        let blocked = !state.problems.is_empty();
        let auto = (state.mode == PublishMode::OnValidIdle).then(|| html! {
            <p class="publish-mode">{ "Publishes by itself once the draft is valid and nobody has edited it for a while." }</p>
        });
        // A peer's edits wait for this machine's user: said first.
        let from_peers = (!state.from_peers.is_empty()).then(|| {
            let n: u32 = state.from_peers.iter().map(|f| f.versions).sum();
            let names: Vec<&str> = state.from_peers.iter().map(|f| f.peer.as_str()).collect();
            html! {
                <p class="peer-review" role="status">
                    { format!("{n} change{} from {} not yet published here: review {}, then publish.",
                        if n == 1 { "" } else { "s" }, names.join(", "), if n == 1 { "it" } else { "them" }) }
                </p>
            }
        });
        let review = (p.reviewing && !up_to_date).then(|| self.review_view(state));
        html! {
            <section class="publish-panel" data-state={key}>
                <h2>{ "Publish" }</h2>
                { for from_peers }
                <p class="publish-status">{ line }</p>
                if blocked && !up_to_date {
                    <p class="publish-blocked">{ "Fix these to publish:" }</p>
                    <ul class="publish-problems" role="alert">{ for problems }</ul>
                }
                if let Some(e) = &p.error {
                    <p class="publish-error" role="alert">{ e }</p>
                }
                { for auto }
                { self.settings_view(ctx) }
                <p class="publish-actions">
                    <button class="publish-button" disabled={up_to_date || blocked || p.busy}
                        title={if blocked { "The draft has problems" } else { "Make the draft what runs" }}
                        onclick={link.callback(|_| Msg::Publish)}>
                        { if p.busy { "Publishing…" } else { "Publish" } }
                    </button>
                    if !up_to_date {
                        <button class="review-button" aria-expanded={p.reviewing.to_string()}
                            title="What publishing would change, per node and field"
                            onclick={link.callback(|_| Msg::Review)}>
                            { if p.reviewing { "Hide review" } else { "Review" } }
                        </button>
                    }
                    if state.published {
                        <button class="unpublish-button" disabled={p.busy}
                            title="Turn the triggers off until it is published again"
                            onclick={link.callback(|_| Msg::Unpublish)}>{ "Unpublish" }</button>
                    }
                </p>
                { self.deploy_view(ctx, state) }
                { for review }
            </section>
        }
    }

    /// Where the workflow's schedules and webhooks run: here, or on the
    /// shared worker (deployed), and the buttons that move them.
    fn deploy_view(&self, ctx: &Context<Self>, state: &PublishState) -> Html {
        if !state.worker {
            return Html::default();
        }
        let link = ctx.link();
        let busy = self.publishing.busy;
        let short = |v: &str| v.chars().take(8).collect::<String>();
        let (key, line) = match (&state.deployed_version, &state.published_version) {
            (Some(d), Some(p)) if d == p => (
                "deployed",
                format!(
                    "Deployed to the shared worker ({}, {}): its schedules and webhooks run there, \
                     also while this machine is off.",
                    short(d),
                    state
                        .deployed_at_us
                        .map(super::runs::when)
                        .unwrap_or_default()
                ),
            ),
            (Some(d), _) => (
                "behind",
                format!(
                    "The shared worker runs an older version ({}): deploy again to give it what is published.",
                    short(d)
                ),
            ),
            (None, _) => (
                "local",
                "Not deployed: its schedules and webhooks run on this machine.".to_string(),
            ),
        };
        let current =
            state.deployed_version.is_some() && state.deployed_version == state.published_version;
        html! {
            <div class="deploy" data-state={key}>
                <p class="deploy-status">{ line }</p>
                <p class="publish-actions">
                    <button class="deploy-button" disabled={!state.published || current || busy}
                        title={if state.published { "Give the shared worker the published version: its schedules and webhooks run there" } else { "Publish first: the worker runs the published version" }}
                        onclick={link.callback(|_| Msg::Deploy)}>{ "Deploy" }</button>
                    if state.deployed_version.is_some() {
                        <button class="undeploy-button" disabled={busy}
                            title="Stop it on the worker: its schedules fire on this machine again"
                            onclick={link.callback(|_| Msg::Undeploy)}>{ "Undeploy" }</button>
                    }
                </p>
            </div>
        }
    }

    /// The workflow's settings that change how its runs behave.
    fn settings_view(&self, ctx: &Context<Self>) -> Html {
        let Some(editor) = self.shown() else {
            return Html::default();
        };
        let settings = editor.wf.settings();
        let viewing = self.viewing();
        let on_strict = ctx.link().callback(|e: Event| {
            let input: web_sys::HtmlInputElement = e.target_unchecked_into();
            super::Msg::Act(crate::state::Action::SetSetting {
                key: "strict".into(),
                value: Some(serde_json::Value::Bool(input.checked())),
            })
        });
        let on_mode = ctx.link().callback(|e: Event| {
            let select: web_sys::HtmlSelectElement = e.target_unchecked_into();
            super::Msg::Act(crate::state::Action::SetSetting {
                key: "publish".into(),
                value: Some(serde_json::Value::String(select.value())),
            })
        });
        let auto = settings.publish == PublishMode::OnValidIdle;
        html! {
            <details class="workflow-settings">
                <summary>{ "Settings" }</summary>
                <fieldset disabled={viewing}>
                    <label class="check" title="A template that reads a field that is not there fails the step, naming the template and the path, instead of giving null">
                        <input id="setting-strict" type="checkbox" checked={settings.strict} onchange={on_strict} />
                        { " Strict templates: a missing field is an error" }
                    </label>
                    <label for="setting-publish">{ "Publish" }</label>
                    <select id="setting-publish" onchange={on_mode}>
                        <option value="manual" selected={!auto}>{ "by hand (Publish)" }</option>
                        <option value="on_valid_idle" selected={auto}>{ "by itself, when valid and idle" }</option>
                    </select>
                </fieldset>
            </details>
        }
    }
}
