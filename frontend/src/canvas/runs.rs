//! The canvas's runs: running the workflow, the runs list (live, paged),
//! and the shown run (its statuses on the nodes, its output, a run opened
//! from the list over its pinned workflow, retries).

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_api::{
    Decision, LiveEvent, LogLine, Retry, RetryFrom, RunDetail, RunError, RunOn, RunStarted,
    RunStatus, RunSummary, Signalled, StartRun, StepStatus, Waiting, What,
};
use yew::prelude::*;

use super::Canvas;
use crate::net;
use crate::scene::{StepMark, error_text};
use crate::state::Editor;

/// Runs per page of the runs list.
const RUNS_PAGE: usize = 20;

pub enum Msg {
    Input(String),
    Run,
    /// A run started; true when it is a retry (it keeps the pinned view).
    Started(Result<RunStarted, String>, bool),
    /// A run's detail (`GET /runs/{id}`) arrived.
    Detail(Result<RunDetail, String>),
    /// The newest run's detail, for previews only.
    PreviewDetail(Result<RunDetail, String>),
    Logs(String, Result<Vec<LogLine>, String>),
    /// The first page of the runs list arrived.
    Loaded(Result<Vec<RunSummary>, String>),
    /// Show the next page of older runs.
    Older,
    OlderLoaded(Result<Vec<RunSummary>, String>),
    /// Open a run from the list: its pinned workflow, read-only.
    Open(String),
    Pinned(String, Result<Value, String>),
    Retry(RetryFrom),
    /// The comment typed for the shown run's approvals.
    Comment(String),
    /// Approve or reject an approval (node, lineage) of the shown run.
    Decide(String, String, Decision),
    Decided(String, Result<Signalled, String>),
    /// The log view's filter changed.
    LogFilter(crate::log_filter::LogFilter),
    /// Select the node a log line is from.
    LogNode(String),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Runs(msg)
    }
}

/// The runs part of the canvas's state.
pub struct Runs {
    /// The run input (JSON text).
    input: String,
    /// The input was typed here (not prefilled from a trigger's message).
    input_typed: bool,
    /// The run shown on the canvas.
    pub run: Option<RunView>,
    running: bool,
    /// Run pressed while edits were still on their way: run once they land,
    /// so a run always runs what the window shows.
    pub run_when_saved: bool,
    /// The runs list, newest first: at most `shown` rows.
    rows: Vec<RunRow>,
    /// Rows the list shows: a page, plus a page per "Older runs".
    shown: usize,
    /// Older runs exist beyond the list (the last page was full, or live
    /// runs pushed rows off its end).
    more: bool,
    /// The latest run whose detail arrived (the shown run, or the newest
    /// in the list): what template fields preview on.
    pub preview: Option<RunDetail>,
    /// What the shown run's log view shows.
    log_filter: crate::log_filter::LogFilter,
}

impl Runs {
    /// The Run input becomes `message` (a trigger's message: for a webhook,
    /// its method, query, headers and body), unless one was typed.
    pub fn prefill_input(&mut self, message: &Value) {
        if !self.input_typed {
            self.input = crate::inspector::pretty(message);
        }
    }

    /// Prefills the Run input with the message the trigger of `run` started it with.
    fn prefill_from(&mut self, run: &RunDetail) {
        if let Some(m) = run
            .steps
            .iter()
            .find(|s| s.node == run.run.trigger)
            .and_then(sluice_model::preview::message_of)
        {
            self.prefill_input(m);
        }
    }

    /// `node`'s output in the shown run (messages by port).
    pub fn step_output(&self, node: &str) -> Option<Value> {
        self.run.as_ref()?.steps.get(node)?.output.clone()
    }
}

impl Default for Runs {
    fn default() -> Runs {
        Runs {
            input: "{}".into(),
            input_typed: false,
            run: None,
            running: false,
            run_when_saved: false,
            rows: Vec::new(),
            shown: RUNS_PAGE,
            more: false,
            preview: None,
            log_filter: Default::default(),
        }
    }
}

/// One node's part of the shown run: its last attempt.
#[derive(Clone, Debug, Default)]
pub struct StepView {
    mark: Option<StepMark>,
    input: Option<Value>,
    output: Option<Value>,
    error: Option<RunError>,
}

/// The run shown on the canvas: the last one started here (over the live
/// workflow), or one opened from the list (over its pinned version).
pub struct RunView {
    id: String,
    status: RunStatus,
    output: Value,
    error: Option<RunError>,
    steps: BTreeMap<String, StepView>,
    logs: Vec<LogLine>,
    /// The workflow as this run ran it, when opened from the list.
    pub pinned: Option<Editor>,
    version: Option<String>,
    /// The approvals it waits at.
    waiting: Vec<Waiting>,
    /// The comment sent with a decision.
    comment: String,
    /// A decision on its way.
    deciding: bool,
}

impl RunView {
    fn new(id: String) -> RunView {
        RunView {
            id,
            status: RunStatus::Running,
            output: Value::Null,
            error: None,
            steps: BTreeMap::new(),
            logs: Vec::new(),
            pinned: None,
            version: None,
            waiting: Vec::new(),
            comment: String::new(),
            deciding: false,
        }
    }

    pub fn marks(&self) -> BTreeMap<String, StepMark> {
        self.steps
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.mark.clone()?)))
            .collect()
    }

    fn apply_detail(&mut self, detail: &RunDetail) {
        let run = &detail.run;
        self.status = run.status;
        self.output = run.output.clone();
        self.error = run.error.clone();
        if let Some(v) = &run.version {
            self.version = Some(v.clone());
        }
        self.waiting = run.waiting.clone();
        for step in &detail.steps {
            self.steps.insert(
                step.node.clone(),
                StepView {
                    mark: Some(StepMark {
                        status: step.status,
                        attempt: step.attempt.unwrap_or(1),
                        duration_us: step.duration_us.and_then(|d| u64::try_from(d).ok()),
                        error: step.error.as_ref().map(error_text),
                    }),
                    input: step.input.clone(),
                    output: step.output.clone(),
                    error: step.error.clone(),
                },
            );
        }
    }
}

/// A row of the runs list.
#[derive(Clone, Debug)]
struct RunRow {
    id: String,
    status: RunStatus,
    trigger: String,
    /// Microseconds since the Unix epoch.
    created_at_us: i64,
    /// It ran the draft.
    draft: bool,
    /// It ran on the shared worker (mirrored here).
    worker: bool,
}

impl Canvas {
    pub(super) fn on_runs(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Input(text) => {
                self.runs.input = text;
                self.runs.input_typed = true;
                false
            }
            Msg::Run if self.sync.pending() && self.socket.is_some() => {
                // Edits still on their way to the engine: run after them.
                self.runs.run_when_saved = true;
                self.runs.running = true;
                true
            }
            Msg::Run => {
                let input: Value = match serde_json::from_str(&self.runs.input) {
                    Ok(v) => v,
                    Err(e) => {
                        self.status = format!("the run input is not JSON: {e}");
                        return true;
                    }
                };
                self.runs.running = true;
                let path = format!("/api/v1/workflows/{}/runs", ctx.props().workflow);
                ctx.link().send_future(async move {
                    // The editor runs what is being edited: the draft.
                    let body = serde_json::to_value(StartRun {
                        input,
                        draft: true,
                        ..StartRun::default()
                    })
                    .unwrap_or_default();
                    Msg::Started(net::call_as("POST", &path, Some(&body)).await, false)
                });
                true
            }
            Msg::Started(result, retry) => {
                self.runs.running = false;
                match result {
                    Ok(run) => {
                        let id = run.id;
                        // A retry keeps the pinned workflow it runs.
                        let pinned = self
                            .runs
                            .run
                            .take()
                            .and_then(|r| r.pinned)
                            .filter(|_| retry);
                        let mut view = RunView::new(id.clone());
                        // The URL names a run opened over its own workflow
                        // (a retry of one); the draft's run is not one.
                        self.open_run = pinned.is_some().then(|| id.clone());
                        view.pinned = pinned;
                        self.runs.run = Some(view);
                        self.touch();
                        // It may be over already: read what happened so far.
                        self.fetch_detail(ctx, &id);
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::Detail(result) => {
                match result {
                    Ok(detail) => {
                        let id = detail.run.id.as_str();
                        if let Some(r) = self.runs.rows.iter_mut().find(|r| r.id == id) {
                            r.status = detail.run.status;
                        }
                        if let Some(run) = self.runs.run.as_mut().filter(|r| r.id == id) {
                            run.apply_detail(&detail);
                            self.touch();
                        }
                        self.runs.preview = Some(detail);
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::Logs(id, result) => {
                if let (Ok(lines), Some(run)) =
                    (result, self.runs.run.as_mut().filter(|r| r.id == id))
                {
                    run.logs = lines;
                    return true;
                }
                false
            }
            Msg::PreviewDetail(result) => {
                if self.runs.preview.is_some() {
                    return false;
                }
                if let Ok(run) = &result {
                    self.runs.prefill_from(run);
                }
                self.runs.preview = result.ok();
                true
            }
            Msg::Loaded(result) => {
                match result {
                    Ok(list) => {
                        if self.runs.preview.is_none()
                            && let Some(newest) = list.first()
                        {
                            let path = format!("/api/v1/runs/{}", newest.id);
                            ctx.link().send_future(async move {
                                Msg::PreviewDetail(net::call_as("GET", &path, None).await)
                            });
                        }
                        self.runs.rows = run_rows(list);
                        self.runs.shown = RUNS_PAGE;
                        self.runs.more = self.runs.rows.len() >= RUNS_PAGE;
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::Older => {
                let mut path = format!(
                    "/api/v1/runs?workflow={}&limit={RUNS_PAGE}",
                    ctx.props().workflow
                );
                if let Some(last) = self.runs.rows.last() {
                    path.push_str(&format!("&before={}", last.id));
                }
                ctx.link().send_future(async move {
                    Msg::OlderLoaded(net::call_as("GET", &path, None).await)
                });
                false
            }
            Msg::OlderLoaded(result) => {
                match result {
                    Ok(list) => {
                        let page = run_rows(list);
                        let runs = &mut self.runs;
                        runs.more = page.len() >= RUNS_PAGE;
                        for r in page {
                            // A run can be on both sides of a page boundary
                            // that live runs moved.
                            if !runs.rows.iter().any(|x| x.id == r.id) {
                                runs.rows.push(r);
                            }
                        }
                        runs.shown = runs.rows.len().max(RUNS_PAGE);
                    }
                    Err(e) => self.status = e,
                }
                true
            }
            Msg::Open(id) => {
                let path = format!("/api/v1/runs/{id}/workflow");
                ctx.link().send_future(async move {
                    let wf = net::call("GET", &path, None).await;
                    Msg::Pinned(id, wf)
                });
                false
            }
            Msg::Pinned(id, result) => {
                let wf = result
                    .and_then(|v| sluice_model::Workflow::from_value(v).map_err(|e| e.to_string()));
                match wf {
                    Ok(wf) => {
                        let mut pinned = Editor::new(wf);
                        if let Some(live) = &self.editor {
                            pinned.viewport = live.viewport;
                            // The node looked at stays selected, when the
                            // run's workflow has it: its step shows at once.
                            pinned.selected = live
                                .selected
                                .iter()
                                .filter(|id| pinned.wf.nodes.iter().any(|n| &n.id == *id))
                                .cloned()
                                .collect();
                        }
                        // A node the URL named, selected when it exists here.
                        if let Some(node) = self.pending_node.take()
                            && pinned.wf.nodes.iter().any(|n| n.id == node)
                        {
                            pinned.selected = std::iter::once(node).collect();
                        }
                        let mut view = RunView::new(id.clone());
                        view.pinned = Some(pinned);
                        self.runs.run = Some(view);
                        self.open_run = Some(id.clone());
                        self.touch();
                        self.fetch_detail(ctx, &id);
                    }
                    Err(e) => {
                        self.status = format!("cannot show run {id}: {e}");
                        // Not shown: the URL stops naming it.
                        if self.open_run.as_ref() == Some(&id) {
                            self.open_run = None;
                        }
                    }
                }
                true
            }
            Msg::Comment(text) => {
                if let Some(run) = self.runs.run.as_mut() {
                    run.comment = text;
                }
                false
            }
            Msg::LogFilter(filter) => {
                let changed = self.runs.log_filter != filter;
                self.runs.log_filter = filter;
                changed
            }
            Msg::LogNode(node) => self.act(crate::state::Action::Select {
                id: node,
                additive: false,
            }),
            Msg::Decide(node, lineage, decision) => {
                let Some(run) = self.runs.run.as_mut() else {
                    return false;
                };
                run.deciding = true;
                let id = run.id.clone();
                let path = format!(
                    "/api/v1/runs/{id}/signal?node={node}&lineage={lineage}&decision={}",
                    decision.port()
                );
                let mut body = serde_json::json!({"decision": decision.port(), "by": "editor"});
                if !run.comment.trim().is_empty() {
                    body["comment"] = Value::String(run.comment.trim().to_string());
                }
                ctx.link().send_future(async move {
                    Msg::Decided(id, net::call_as("POST", &path, Some(&body)).await)
                });
                true
            }
            Msg::Decided(id, result) => {
                if let Some(run) = self.runs.run.as_mut().filter(|r| r.id == id) {
                    run.deciding = false;
                    if result.is_ok() {
                        run.comment.clear();
                    }
                }
                if let Err(e) = result {
                    self.status = e;
                }
                self.fetch_detail(ctx, &id);
                true
            }
            Msg::Retry(from) => {
                let Some(run) = &self.runs.run else {
                    return false;
                };
                let path = format!("/api/v1/runs/{}/retry", run.id);
                self.runs.running = true;
                ctx.link().send_future(async move {
                    let body = serde_json::to_value(Retry { from }).unwrap_or_default();
                    Msg::Started(net::call_as("POST", &path, Some(&body)).await, true)
                });
                true
            }
        }
    }

    /// A live run event of this workflow: the runs list, and the shown run.
    pub(super) fn on_run_event(&mut self, ctx: &Context<Self>, e: &LiveEvent) -> bool {
        let run = &*e.run;
        let runs = &mut self.runs;
        match &e.what {
            What::RunStarted {
                trigger,
                draft,
                executor,
            } if !runs.rows.iter().any(|r| r.id == run) => {
                runs.rows.insert(
                    0,
                    RunRow {
                        id: run.to_string(),
                        status: RunStatus::Running,
                        trigger: trigger.clone(),
                        created_at_us: e.at_us,
                        draft: *draft,
                        worker: *executor == RunOn::Worker,
                    },
                );
                if runs.rows.len() > runs.shown {
                    runs.rows.truncate(runs.shown);
                    runs.more = true;
                }
            }
            What::RunFinished { status, .. } => {
                if let Some(r) = runs.rows.iter_mut().find(|r| r.id == run) {
                    r.status = *status;
                }
            }
            What::RunWaiting {} => {
                if let Some(r) = runs.rows.iter_mut().find(|r| r.id == run) {
                    r.status = RunStatus::Waiting;
                }
            }
            What::RunStarted { .. } => {
                // Taken up again after waiting.
                if let Some(r) = runs.rows.iter_mut().find(|r| r.id == run) {
                    r.status = RunStatus::Running;
                }
            }
            _ => {}
        }
        let Some(shown) = runs.run.as_mut().filter(|r| r.id == run) else {
            return matches!(
                e.what,
                What::RunStarted { .. } | What::RunFinished { .. } | What::RunWaiting {}
            );
        };
        match &e.what {
            What::StepStarted { node, attempt, .. } => {
                let step = shown.steps.entry(node.to_string()).or_default();
                step.mark = Some(StepMark {
                    status: StepStatus::Running,
                    attempt: *attempt,
                    duration_us: None,
                    error: None,
                });
            }
            What::StepFinished {
                node,
                attempt,
                status,
                duration_us,
                error,
                ..
            } => {
                let step = shown.steps.entry(node.to_string()).or_default();
                step.mark = Some(StepMark {
                    status: *status,
                    attempt: *attempt,
                    duration_us: u64::try_from(*duration_us).ok(),
                    error: error.clone(),
                });
            }
            What::StepSkipped { node, .. } => {
                shown.steps.entry(node.to_string()).or_default().mark = Some(StepMark {
                    status: StepStatus::Skipped,
                    attempt: 1,
                    duration_us: None,
                    error: None,
                });
            }
            What::Log {
                node,
                lineage,
                level,
                message,
            } => {
                // The whole text of what was streamed replaces it.
                shown.logs.retain(|l| {
                    !(l.node == **node && l.lineage == *lineage && l.level.ends_with(" streaming"))
                });
                shown.logs.push(LogLine {
                    node: node.to_string(),
                    lineage: lineage.clone(),
                    level: level.clone(),
                    message: message.clone(),
                    at_us: e.at_us,
                });
            }
            What::Stream {
                node,
                lineage,
                level,
                text,
            } => {
                // Text as it comes: one growing line per step (the whole
                // text replaces it when the step's logs are read).
                let streaming = format!("{level} streaming");
                match shown.logs.last_mut() {
                    Some(l)
                        if l.node == **node && l.lineage == *lineage && l.level == streaming =>
                    {
                        l.message.push_str(text);
                    }
                    _ => shown.logs.push(LogLine {
                        node: node.to_string(),
                        lineage: lineage.clone(),
                        level: streaming,
                        message: text.clone(),
                        at_us: e.at_us,
                    }),
                }
            }
            What::StepWaiting { node, .. } => {
                let step = shown.steps.entry(node.to_string()).or_default();
                let attempt = step.mark.as_ref().map_or(1, |m| m.attempt);
                step.mark = Some(StepMark {
                    status: StepStatus::Waiting,
                    attempt,
                    duration_us: None,
                    error: None,
                });
            }
            What::RunWaiting {} => {
                shown.status = RunStatus::Waiting;
                self.fetch_detail(ctx, run);
            }
            What::RunFinished { status, .. } => {
                shown.status = *status;
                shown.waiting.clear();
                self.fetch_detail(ctx, run);
            }
            What::RunStarted { .. } => {
                if shown.status == RunStatus::Waiting {
                    shown.status = RunStatus::Running;
                }
            }
        }
        self.touch();
        true
    }

    fn fetch_detail(&self, ctx: &Context<Self>, id: &str) {
        let path = format!("/api/v1/runs/{id}");
        ctx.link().send_future(async move {
            let detail = net::call_as("GET", &path, None).await;
            Msg::Detail(detail)
        });
        let id = id.to_string();
        ctx.link().send_future(async move {
            let logs = net::call_as("GET", &format!("/api/v1/runs/{id}/logs"), None).await;
            Msg::Logs(id, logs)
        });
    }

    pub(super) fn fetch_runs(ctx: &Context<Self>) {
        let path = format!(
            "/api/v1/runs?workflow={}&limit={RUNS_PAGE}",
            ctx.props().workflow
        );
        ctx.link()
            .send_future(async move { Msg::Loaded(net::call_as("GET", &path, None).await) });
    }

    /// The banner over a run opened from the list.
    pub(super) fn run_banner(&self, ctx: &Context<Self>) -> Option<Html> {
        let link = ctx.link();
        self.runs.run.as_ref().filter(|r| r.pinned.is_some() && self.history.view.is_none()).map(|r| {
            let failed = r.status == RunStatus::Failed;
            html! {
                <div class={classes!("run-banner", format!("run-{}", r.status))} role="status">
                    <span>{ "Run " }<code>{ &r.id }</code>{ " · " }<strong>{ r.status.as_str() }</strong>
                        { r.version.as_ref().map(|v| format!(" · version {v}")).unwrap_or_default() }</span>
                    if failed {
                        <button class="retry-failed" onclick={link.callback(|_| Msg::Retry(RetryFrom::Failed))}>{ "Retry from failed step" }</button>
                    }
                    <button class="retry-start" disabled={!r.status.is_finished()} onclick={link.callback(|_| Msg::Retry(RetryFrom::Start))}>{ "Retry from start" }</button>
                    <button class="close-run" onclick={link.callback(|_| super::Msg::CloseRun)}>{ "Back to editing (Esc)" }</button>
                </div>
            }
        })
    }

    /// Running the workflow: its input, the button, the shown run.
    /// The shown run's log: every line with its time, level and node,
    /// filtered by level, node and text; a line's node is a button that
    /// selects it.
    fn log_view(&self, ctx: &Context<Self>, logs: &[LogLine]) -> Html {
        use crate::log_filter::{LEVELS, counts, rank};
        if logs.is_empty() {
            return html! { <p class="no-logs">{ "No log lines." }</p> };
        }
        let link = ctx.link();
        let filter = self.runs.log_filter.clone();
        let counts = counts(logs);
        let mut nodes: Vec<&str> = logs.iter().map(|l| l.node.as_str()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let shown: Vec<&LogLine> = logs.iter().filter(|l| filter.shows(l)).collect();
        let on_level = {
            let filter = filter.clone();
            link.callback(move |e: Event| {
                let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
                let mut f = filter.clone();
                f.min = s.value().parse().unwrap_or(0);
                Msg::LogFilter(f)
            })
        };
        let on_node = {
            let filter = filter.clone();
            link.callback(move |e: Event| {
                let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
                let mut f = filter.clone();
                f.node = s.value();
                Msg::LogFilter(f)
            })
        };
        let on_text = {
            let filter = filter.clone();
            link.callback(move |e: InputEvent| {
                let i: web_sys::HtmlInputElement = e.target_unchecked_into();
                let mut f = filter.clone();
                f.text = i.value();
                Msg::LogFilter(f)
            })
        };
        let level_names = [
            "everything",
            "info and above",
            "warnings and errors",
            "errors only",
        ];
        html! {
            <details class="run-logs" open=true>
                <summary>{ format!("Logs ({})", logs.len()) }
                    { for LEVELS.iter().enumerate().skip(2).filter(|(i, _)| counts[*i] > 0).map(|(i, l)| html! {
                        <span class="log-count" data-level={*l}>{ format!(" · {} {l}", counts[i]) }</span>
                    }) }
                </summary>
                <div class="log-filters">
                    <label for="log-level">{ "Show" }</label>
                    <select id="log-level" onchange={on_level}>
                        { for level_names.iter().enumerate().map(|(i, name)| {
                            let n: usize = counts[i..].iter().sum();
                            html! { <option value={i.to_string()} selected={filter.min == i}>{ format!("{name} ({n})") }</option> }
                        }) }
                    </select>
                    <label for="log-node">{ "from" }</label>
                    <select id="log-node" onchange={on_node}>
                        <option value="" selected={filter.node.is_empty()}>{ "every node" }</option>
                        { for nodes.iter().map(|n| html! { <option value={n.to_string()} selected={filter.node == *n}>{ *n }</option> }) }
                    </select>
                    <input id="log-text" type="search" placeholder="Text in the line" aria-label="Text in the line"
                        value={filter.text.clone()} oninput={on_text} />
                </div>
                if shown.is_empty() {
                    <p class="no-logs">{ "No line matches." }</p>
                } else {
                    <ol class="log-lines">{ for shown.iter().map(|l| {
                        let node = l.node.clone();
                        let level = LEVELS[rank(&l.level)];
                        html! {
                            <li class="log-line" data-level={level}>
                                <time>{ clock(l.at_us) }</time>
                                <span class="level">{ level }</span>
                                <button type="button" class="log-node" title={format!("Select {node}")}
                                    onclick={link.callback(move |_| Msg::LogNode(node.clone()))}>{ &l.node }</button>
                                if !l.lineage.is_empty() { <span class="lineage" title="Item">{ format!("[{}]", l.lineage) }</span> }
                                <span class="message">{ &l.message }</span>
                            </li>
                        }
                    }) }</ol>
                }
            </details>
        }
    }

    pub(super) fn run_panel(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let oninput = link.callback(|e: InputEvent| {
            let area: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
            Msg::Input(area.value())
        });
        let run = self.runs.run.as_ref().map(|r| {
            let error = r.error.as_ref().map(|e| html! {
                <pre class="run-error" role="alert">{ error_text(e) }</pre>
            });
            let retry = (r.pinned.is_none() && r.status.is_finished()).then(|| html! {
                <p class="retry">
                    if r.status == RunStatus::Failed {
                        <button class="retry-failed" onclick={link.callback(|_| Msg::Retry(RetryFrom::Failed))}>{ "Retry from failed step" }</button>
                    }
                    <button class="retry-start" onclick={link.callback(|_| Msg::Retry(RetryFrom::Start))}>{ "Retry from start" }</button>
                </p>
            });
            let oncomment = link.callback(|e: InputEvent| {
                let area: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
                Msg::Comment(area.value())
            });
            let approvals = (!r.waiting.is_empty()).then(|| {
                let waits = r.waiting.iter().map(|w| {
                    let (n1, l1) = (w.node.clone(), w.lineage.clone());
                    let (n2, l2) = (w.node.clone(), w.lineage.clone());
                    let label = if w.lineage.is_empty() {
                        w.node.clone()
                    } else {
                        format!("{} (item {})", w.node, w.lineage)
                    };
                    html! {
                        <div class="approval" data-node={w.node.clone()} role="group" aria-label={format!("Approval {label}")}>
                            <p class="approval-message">{ w.message.clone().unwrap_or_else(|| "Waiting for a decision.".into()) }</p>
                            <p class="summary">{ format!("{label} · waiting since {}", when(w.since_us)) }
                                { w.timeout_at_us.map(|t| format!(" · times out at {}", when(t))).unwrap_or_default() }</p>
                            <button class="approve" disabled={r.deciding}
                                onclick={link.callback(move |_| Msg::Decide(n1.clone(), l1.clone(), Decision::Approved))}>{ "Approve" }</button>
                            <button class="reject" disabled={r.deciding}
                                onclick={link.callback(move |_| Msg::Decide(n2.clone(), l2.clone(), Decision::Rejected))}>{ "Reject" }</button>
                        </div>
                    }
                });
                html! {
                    <section class="approvals">
                        <h3>{ "Waiting for a decision" }</h3>
                        <label for="approval-comment">{ "Comment (optional)" }</label>
                        <textarea id="approval-comment" class="approval-comment" rows="2" value={r.comment.clone()} oninput={oncomment.clone()} />
                        { for waits }
                    </section>
                }
            });
            html! {
                <div class={classes!("run", format!("run-{}", r.status))} data-run={r.id.clone()}>
                    <p><strong class="run-status">{ r.status.as_str() }</strong>{ " · " }<code>{ &r.id }</code></p>
                    { for approvals }
                    { for error }
                    { for retry }
                    <h3>{ "Output" }</h3>
                    <pre class="run-output">{ crate::inspector::pretty(&r.output) }</pre>
                    { self.log_view(ctx, &r.logs) }
                </div>
            }
        });
        let running = self.runs.running;
        html! {
            <section class="run-panel">
                <h2>{ "Run" }</h2>
                <label for="run-input">{ "Input: the trigger's message (JSON)" }</label>
                <textarea id="run-input" class="mono" rows="3" value={self.runs.input.clone()} {oninput} />
                <button class="run-button" disabled={running}
                    onclick={link.callback(|_| Msg::Run)}>
                    { if running { "Running…" } else { "Run draft ⌃⏎" } }
                </button>
                { for run }
            </section>
        }
    }

    /// The runs list, newest first.
    pub(super) fn runs_list(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let rows = self.runs.rows.iter().map(|r| {
            let id = r.id.clone();
            let current = self.runs.run.as_ref().is_some_and(|s| s.id == r.id);
            html! {
                <li><button class={classes!("run-row", format!("run-{}", r.status), current.then_some("current"))}
                    data-run={r.id.clone()} onclick={link.callback(move |_| Msg::Open(id.clone()))}>
                    <span class="dot"></span>
                    <span class="when">{ when(r.created_at_us) }</span>
                    <span class="trigger">{ &r.trigger }</span>
                    <span class="status-text">{ r.status.as_str() }</span>
                    if r.draft {
                        <span class="draft-mark" title="It ran the draft, not the published version">{ "draft" }</span>
                    }
                    if r.worker {
                        <span class="worker-mark" title="It ran on the shared worker; its steps and logs are mirrored here">{ "worker" }</span>
                    }
                </button></li>
            }
        });
        html! {
            <section class="runs-panel">
                <h2>{ "Runs" }</h2>
                if self.runs.rows.is_empty() {
                    <p class="summary">{ "No runs yet." }</p>
                }
                <ul class="runs">{ for rows }</ul>
                if self.runs.more {
                    <button class="older-runs" onclick={link.callback(|_| Msg::Older)}>
                        { "Older runs" }
                    </button>
                }
            </section>
        }
    }

    /// Node `n`'s part of the shown run: status, input, output, logs.
    /// Node `node`'s output (by port) and the run it is from: the shown
    /// run's, else the latest run's (what templates preview on).
    pub(super) fn run_output(&self, node: &str) -> Option<(String, Value)> {
        if let Some(r) = &self.runs.run
            && let Some(o) = r.steps.get(node).and_then(|s| s.output.as_ref())
        {
            return Some((r.id.clone(), o.clone()));
        }
        let p = self.runs.preview.as_ref()?;
        let step = p
            .steps
            .iter()
            .rev()
            .find(|s| s.node == node && s.output.is_some())?;
        Some((p.run.id.clone(), step.output.clone()?))
    }

    /// Where `input`, node `node`'s test input, comes from: the latest run
    /// (its id), or pinned test data.
    pub(super) fn input_source(&self, node: &str, input: &Value) -> String {
        match &self.runs.preview {
            Some(p)
                if sluice_model::preview::Data::of_run(p, node).input.as_ref() == Some(input) =>
            {
                format!("from run {}", p.run.id)
            }
            _ => "from pinned test data".to_string(),
        }
    }

    pub(super) fn run_step(&self, n: &sluice_model::Node) -> Option<Html> {
        self.runs.run.as_ref().and_then(|r| {
            let st = r.steps.get(&n.id)?;
            let logs: Vec<&LogLine> = r.logs.iter().filter(|l| l.node == n.id).collect();
            let status = st.mark.as_ref().map_or("", |m| m.status.as_str());
            Some(html! {
                <div class="step">
                    <h3>{ format!("This run: {status}") }</h3>
                    if let Some(e) = &st.error {
                        <pre class="step-error">{ error_text(e) }</pre>
                    }
                    <details open=true><summary>{ "Input" }</summary>
                        <div class="step-input">{ st.input.as_ref().map(|v| html! { <crate::inspector::JsonTree value={v.clone()} root={Some("input".to_string())} /> }).unwrap_or_default() }</div></details>
                    <details open=true><summary>{ "Output" }</summary>
                        <div class="step-output">{ st.output.as_ref().map(|v| output_tree(&n.id, v)).unwrap_or_default() }</div></details>
                    if !logs.is_empty() {
                        <details open=true><summary>{ format!("Logs ({})", logs.len()) }</summary>
                            <ol class="logs">{ for logs.iter().map(|l| html! {
                                <li class={l.level.clone()}>{ &l.message }</li>
                            }) }</ol></details>
                    }
                </div>
            })
        })
    }
}

/// A step's output: the message it sent, under the port it went out on.
/// Its keys copy `{{ nodes.<id>.… }}`, which reads the message itself (the
/// port is not part of the path).
pub(super) fn output_tree(node: &str, output: &Value) -> Html {
    match output {
        Value::Object(ports) => html! {
            <>
                { for ports.iter().map(|(port, message)| html! {
                    <div class="port-output" data-port={port.clone()}>
                        <span class="port-name" title="The output port it went out on">{ format!("on {port}") }</span>
                        <crate::inspector::JsonTree value={message.clone()} root={Some(crate::fields::key_path("nodes", node))} />
                    </div>
                }) }
            </>
        },
        other => html! { <crate::inspector::JsonTree value={other.clone()} /> },
    }
}

/// A log line's time of day, to the millisecond.
fn clock(us: i64) -> String {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(us as f64 / 1000.0));
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        date.get_hours(),
        date.get_minutes(),
        date.get_seconds(),
        date.get_milliseconds()
    )
}

/// A run's (or a version's) time, as the local clock shows it.
pub(super) fn when(us: i64) -> String {
    let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(us as f64 / 1000.0));
    let today = js_sys::Date::new_0().to_date_string() == date.to_date_string();
    let time = format!(
        "{:02}:{:02}:{:02}",
        date.get_hours(),
        date.get_minutes(),
        date.get_seconds()
    );
    if today {
        time
    } else {
        format!("{}-{:02} {time}", date.get_month() + 1, date.get_date())
    }
}

/// The runs list rows of a `GET /api/v1/runs` answer.
fn run_rows(list: Vec<RunSummary>) -> Vec<RunRow> {
    list.into_iter()
        .map(|r| RunRow {
            id: r.id,
            status: r.status,
            trigger: r.trigger,
            created_at_us: r.created_at_us,
            draft: r.draft,
            worker: r.executor == RunOn::Worker,
        })
        .collect()
}
