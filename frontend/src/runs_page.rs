//! The runs page (`#/runs?…`): every workflow's runs, newest first, with
//! filters (workflow, status, trigger, draft or published, time, text in
//! the input or output) that the URL follows, durations, and a count kept
//! live by the run events of the WebSocket.

use sluice_api::{RunSummary, WorkflowEntry};
use yew::prelude::*;

use crate::net;
use crate::runs_query::{RunsQuery, Since};

/// How many runs the page lists.
const LIMIT: u32 = 200;

#[derive(Properties, PartialEq)]
pub struct Props {
    pub query: RunsQuery,
    /// The filters changed: the app moves the URL.
    pub on_query: Callback<RunsQuery>,
    /// A run picked: open it on its workflow.
    pub on_open: Callback<(String, String)>,
}

pub enum Msg {
    Listed(u64, Result<Vec<RunSummary>, String>),
    Workflows(Result<Vec<WorkflowEntry>, String>),
    /// A run event arrived: list again soon.
    Event,
    Refresh,
}

pub struct RunsPage {
    runs: Vec<RunSummary>,
    workflows: Vec<WorkflowEntry>,
    error: Option<String>,
    loading: bool,
    /// Answers to older requests are dropped.
    asked: u64,
    /// A refresh is scheduled (events come in bursts).
    refresh_due: bool,
    _socket: Option<net::Socket>,
}

impl Component for RunsPage {
    type Message = Msg;
    type Properties = Props;

    fn create(ctx: &Context<Self>) -> Self {
        let link = ctx.link().clone();
        let socket = net::Socket::open(
            "",
            move |text| {
                if text.contains("\"run_started\"") || text.contains("\"run_finished\"") {
                    link.send_message(Msg::Event);
                }
            },
            || {},
        )
        .ok();
        ctx.link().send_future(async {
            Msg::Workflows(net::call_as("GET", "/api/v1/workflows", None).await)
        });
        let mut page = RunsPage {
            runs: Vec::new(),
            workflows: Vec::new(),
            error: None,
            loading: true,
            asked: 0,
            refresh_due: false,
            _socket: socket,
        };
        page.list(ctx);
        page
    }

    fn changed(&mut self, ctx: &Context<Self>, old: &Props) -> bool {
        if ctx.props().query != old.query {
            self.list(ctx);
        }
        true
    }

    fn update(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Listed(n, result) => {
                if n != self.asked {
                    return false;
                }
                self.loading = false;
                match result {
                    Ok(runs) => {
                        self.runs = runs;
                        self.error = None;
                    }
                    Err(e) => self.error = Some(e),
                }
                true
            }
            Msg::Workflows(Ok(list)) => {
                self.workflows = list;
                true
            }
            Msg::Workflows(Err(_)) => false,
            Msg::Event => {
                if !self.refresh_due {
                    self.refresh_due = true;
                    ctx.link().send_future(async {
                        gloo_sleep(300).await;
                        Msg::Refresh
                    });
                }
                false
            }
            Msg::Refresh => {
                self.refresh_due = false;
                self.list(ctx);
                false
            }
        }
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let q = &ctx.props().query;
        let set = |f: fn(&mut RunsQuery, String)| {
            let (q, on) = (q.clone(), ctx.props().on_query.clone());
            Callback::from(move |e: Event| {
                let v = value_of(&e);
                let mut next = q.clone();
                f(&mut next, v);
                on.emit(next);
            })
        };
        let on_text = {
            let (q, on) = (q.clone(), ctx.props().on_query.clone());
            Callback::from(move |e: SubmitEvent| {
                e.prevent_default();
                let text = web_sys::window()
                    .and_then(|w| w.document())
                    .and_then(|d| d.get_element_by_id("runs-text"))
                    .and_then(|el| {
                        wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlInputElement>(el).ok()
                    })
                    .map(|i| i.value())
                    .unwrap_or_default();
                let mut next = q.clone();
                next.text = Some(text.trim().to_string()).filter(|t| !t.is_empty());
                on.emit(next);
            })
        };
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let triggers: Vec<String> = {
            let mut t: Vec<String> = self.runs.iter().map(|r| r.trigger.clone()).collect();
            if let Some(current) = &q.trigger {
                t.push(current.clone());
            }
            t.sort();
            t.dedup();
            t
        };
        let filtered = *q != RunsQuery::default();
        let count = if self.loading {
            "Loading…".to_string()
        } else if self.runs.len() as u32 >= LIMIT {
            format!("The newest {LIMIT} runs")
        } else {
            match self.runs.len() {
                0 => "No runs".to_string(),
                1 => "1 run".to_string(),
                n => format!("{n} runs"),
            }
        };
        let rows = self.runs.iter().map(|r| {
            let (wf, id) = (r.workflow.clone(), r.id.clone());
            let on_open = ctx.props().on_open.clone();
            let onclick = Callback::from(move |_| on_open.emit((wf.clone(), id.clone())));
            let took = r
                .finished_at_us
                .map(|f| crate::scene::duration((f - r.created_at_us).max(0) as u64))
                .unwrap_or_else(|| "…".into());
            html! {
                <tr class={classes!("runs-row", format!("run-{}", r.status.as_str()))} data-run={r.id.clone()}>
                    <td><span class="dot" aria-hidden="true"></span>{ r.status.as_str() }</td>
                    <td><button class="open-run" {onclick} title={format!("Open run {} in {}", r.id, r.workflow)}>{ &r.workflow }</button></td>
                    <td><code>{ &r.trigger }</code></td>
                    <td>{ if r.draft { "draft" } else { "published" } }</td>
                    <td title={r.created_at_us.to_string()}>{ time_of(r.created_at_us) }</td>
                    <td class="took">{ took }</td>
                    <td class="run-error">{ r.error.as_ref().map(crate::scene::error_text).unwrap_or_default() }</td>
                </tr>
            }
        });
        let status_now = opt(&q.status);
        let since_now = q.since.map(|s| s.as_str().to_string()).unwrap_or_default();
        let draft_now = q.draft.map(|d| d.to_string()).unwrap_or_default();
        html! {
            <main class="runs-page">
                <h2>{ "Runs" }</h2>
                <form class="run-filters" aria-label="Filter runs" onsubmit={on_text}>
                    <label>{ "Workflow" }
                        <select id="runs-workflow" onchange={set(|q, v| q.workflow = Some(v).filter(|v| !v.is_empty()))}>
                            <option value="" selected={q.workflow.is_none()}>{ "All" }</option>
                            { for self.workflows.iter().map(|w| html! {
                                <option value={w.id.clone()} selected={q.workflow.as_deref() == Some(&w.id)}>{ &w.name }</option>
                            }) }
                        </select>
                    </label>
                    <label>{ "Status" }
                        <select id="runs-status" onchange={set(|q, v| q.status = Some(v).filter(|v| !v.is_empty()))}>
                            <option value="" selected={status_now.is_empty()}>{ "Any" }</option>
                            { for ["running", "waiting", "succeeded", "failed", "cancelled"].into_iter().map(|s| html! {
                                <option value={s} selected={status_now == s}>{ s }</option>
                            }) }
                        </select>
                    </label>
                    <label>{ "Trigger" }
                        <select id="runs-trigger" onchange={set(|q, v| q.trigger = Some(v).filter(|v| !v.is_empty()))}>
                            <option value="" selected={q.trigger.is_none()}>{ "Any" }</option>
                            { for triggers.iter().map(|t| html! {
                                <option value={t.clone()} selected={q.trigger.as_deref() == Some(t.as_str())}>{ t }</option>
                            }) }
                        </select>
                    </label>
                    <label>{ "Version" }
                        <select id="runs-draft" onchange={set(|q, v| q.draft = v.parse().ok())}>
                            <option value="" selected={draft_now.is_empty()}>{ "Draft or published" }</option>
                            <option value="false" selected={draft_now == "false"}>{ "Published" }</option>
                            <option value="true" selected={draft_now == "true"}>{ "Draft" }</option>
                        </select>
                    </label>
                    <label>{ "Started" }
                        <select id="runs-since" onchange={set(|q, v| q.since = Since::ALL.into_iter().find(|s| s.as_str() == v))}>
                            <option value="" selected={since_now.is_empty()}>{ "Any time" }</option>
                            { for Since::ALL.into_iter().map(|s| html! {
                                <option value={s.as_str()} selected={since_now == s.as_str()}>{ format!("In {}", s.label()) }</option>
                            }) }
                        </select>
                    </label>
                    <label>{ "Text in input or output" }
                        <input id="runs-text" type="search" value={opt(&q.text)} placeholder="e.g. an order id" />
                    </label>
                    <button type="submit" class="runs-search">{ "Search" }</button>
                    if filtered {
                        <button type="button" class="clear-filters" onclick={{ let on = ctx.props().on_query.clone(); Callback::from(move |_| on.emit(RunsQuery::default())) }}>{ "Clear filters" }</button>
                    }
                </form>
                <p class="runs-count" role="status" aria-live="polite">{ count }</p>
                if let Some(e) = &self.error { <p class="error" role="alert">{ e }</p> }
                <table class="runs-table">
                    <thead><tr>
                        <th scope="col">{ "Status" }</th><th scope="col">{ "Workflow" }</th><th scope="col">{ "Trigger" }</th>
                        <th scope="col">{ "Version" }</th><th scope="col">{ "Started" }</th><th scope="col">{ "Took" }</th><th scope="col">{ "Error" }</th>
                    </tr></thead>
                    <tbody>{ for rows }</tbody>
                </table>
            </main>
        }
    }
}

impl RunsPage {
    fn list(&mut self, ctx: &Context<Self>) {
        self.asked += 1;
        let n = self.asked;
        let now_us = (js_sys::Date::now() * 1000.0) as i64;
        let path = ctx.props().query.api_path(now_us, LIMIT);
        ctx.link()
            .send_future(async move { Msg::Listed(n, net::call_as("GET", &path, None).await) });
    }
}

fn value_of(e: &Event) -> String {
    let target = e.target();
    if let Some(s) = target
        .as_ref()
        .and_then(|t| wasm_bindgen::JsCast::dyn_ref::<web_sys::HtmlSelectElement>(t))
    {
        return s.value();
    }
    target
        .as_ref()
        .and_then(|t| wasm_bindgen::JsCast::dyn_ref::<web_sys::HtmlInputElement>(t))
        .map(|i| i.value())
        .unwrap_or_default()
}

/// A run's start as local date and time (`2026-12-05 14:03:07`).
fn time_of(us: i64) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(us as f64 / 1000.0));
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        d.get_full_year(),
        d.get_month() + 1,
        d.get_date(),
        d.get_hours(),
        d.get_minutes(),
        d.get_seconds()
    )
}

/// Resolves after `ms` milliseconds.
async fn gloo_sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
                .ok();
        }
    });
    wasm_bindgen_futures::JsFuture::from(promise).await.ok();
}
