//! The canvas's publish panel: every edit is saved as the draft at once,
//! and what runs (webhooks, schedules, runs by id) changes only here: the
//! panel says whether the draft is what runs, what publishing would change,
//! and the problems that stop it; Publish and Unpublish act on it.

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
        html! {
            <section class="publish-panel" data-state={key}>
                <h2>{ "Publish" }</h2>
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
                    if state.published {
                        <button class="unpublish-button" disabled={p.busy}
                            title="Turn the triggers off until it is published again"
                            onclick={link.callback(|_| Msg::Unpublish)}>{ "Unpublish" }</button>
                    }
                </p>
            </section>
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
