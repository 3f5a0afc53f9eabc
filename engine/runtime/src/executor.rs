//! The local executor: drives the state machine with tokio, runs nodes, and
//! journals every step in SQLite before and after it runs (pure kinds, which
//! have no side effects: once, after it ran, with its input). After a crash,
//! [`Engine::resume`] replays the journal into a fresh state machine and
//! carries on: finished steps are never run again; steps that were in flight
//! run again with the same idempotency key.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::kinds::{Kind, Trigger};
use sluice_model::template::{NodeOutputs, Scope};
use sluice_nodes::redact::Redactor;
use sluice_nodes::{self as nodes, Host};
use sluice_store::{LogLine, NewRun, Record, RecordKind, Store, Stored};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

mod documents;

use documents::DocState;
pub use documents::{DocEvent, VersionEntry};

use crate::events::{LiveEvent, What};
use crate::machine::{
    Action, Activation, Event, Hist, Lineage, Msg, Run, Status, StepError, StepKey,
};
use crate::plan::{Invalid, Plan, PlanNode};

/// Errors of the executor (not of runs: a failed run is a [`RunResult`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] sluice_store::Error),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The trigger asked for cannot start a run (or none was named and
    /// the workflow has several).
    #[error(transparent)]
    Entry(#[from] sluice_core::EntryError),
    #[error("{0}")]
    Usage(String),
    #[error("run `{0}` not found")]
    RunNotFound(String),
    #[error("workflow `{0}` not found")]
    WorkflowNotFound(String),
    #[error("run `{run}`: the journal cannot be replayed: {message}")]
    Corrupt { run: String, message: String },
    /// Too many runs in progress: try again later.
    #[error("the engine has {0} runs in progress, its limit: try again later")]
    Busy(usize),
    /// A run's input nested deeper than any value in a run may be.
    #[error(
        "the run's input is nested more than {} levels deep (the limit for values in a run)",
        sluice_model::value::MAX_DEPTH
    )]
    InputTooDeep,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub id: String,
    pub status: Status,
    pub output: Value,
    pub error: Option<Value>,
    /// The first `output.respond` reached (`{status, headers, body}`), if any:
    /// it decides the HTTP response of a webhook run.
    pub respond: Option<Value>,
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Steps running at once across all runs.
    pub max_concurrent_steps: usize,
    /// Append `<idempotency key> <attempt>` to this file each time a step
    /// executes, to count side effects (the crash tests do; default none).
    pub exec_log: Option<std::path::PathBuf>,
    /// Runs in progress (executing or waiting for their workflow's
    /// concurrency) beyond which new runs are refused with `Error::Busy`.
    pub max_active_runs: usize,
    /// How many live events a subscriber may fall behind before it lags.
    pub event_capacity: usize,
    /// How deep sub-workflows may nest: a run at this depth (its top-level
    /// ancestor is depth 0) cannot start another sub-workflow.
    pub max_subworkflow_depth: usize,
    /// One peer's edits this many seconds apart or closer are one version
    /// of a workflow (negative: every edit is a version).
    pub version_gap_secs: i64,
    /// User settings (`config.toml`): allowed folders, HTTP and SMTP defaults.
    pub settings: nodes::Settings,
    /// Where compiled WebAssembly (components, the script runtime) is
    /// cached; default `SLUICE_WASM_CACHE`, else the user's cache dir
    /// (`~/.cache/sluice/wasm`), else `<data-dir>/cache/wasm`. Engines
    /// share one: files are written atomically, named by content and
    /// wasmtime version, verified by hash before loading, and prepared by
    /// one engine at a time.
    pub wasm_cache: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrent_steps: 256,
            exec_log: None,
            max_active_runs: 10_000,
            event_capacity: crate::events::CAPACITY,
            max_subworkflow_depth: 16,
            version_gap_secs: sluice_model::doc::VERSION_GAP_SECS,
            settings: nodes::Settings::default(),
            wasm_cache: None,
        }
    }
}

/// The engine: cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    permits: Arc<Semaphore>,
    /// Test hook: append each step execution to this file (counts side effects).
    exec_log: Option<Mutex<std::fs::File>>,
    /// Settings and the shared HTTP client for the I/O kinds.
    io: nodes::Io,
    max_active_runs: usize,
    max_subworkflow_depth: usize,
    metrics: crate::metrics::Metrics,
    events: tokio::sync::broadcast::Sender<LiveEvent>,
    /// Ids of workflows created, changed or deleted (triggers re-arm on them).
    changes: tokio::sync::broadcast::Sender<String>,
    /// Plans of stored workflows, by id (checked against the stored text).
    plans: Mutex<HashMap<String, (Instant, Arc<Plan>)>>,
    /// Per-workflow run limits (`settings.concurrency`), by workflow id.
    limits: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
    /// Runs being driven, so a second resume attaches instead of driving twice.
    active: Mutex<HashMap<String, Active>>,
    /// Workflow documents in memory, by workflow id (one writer at a time).
    docs: tokio::sync::Mutex<HashMap<String, DocState>>,
    /// Workflows whose document is ahead of their stored JSON.
    dirty: Mutex<HashSet<String>>,
    /// Document updates and presence, for live subscribers.
    doc_events: tokio::sync::broadcast::Sender<DocEvent>,
    /// Who is looking at which workflow (ephemeral, never stored).
    presence: Mutex<HashMap<String, sluice_model::doc::Presence>>,
    version_gap_secs: i64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("data_dir", &self.inner.store.data_dir())
            .finish()
    }
}

/// A run being driven; `wait` for its result.
#[derive(Debug)]
pub struct RunHandle {
    pub id: String,
    done: Outcome,
}

/// How a handle learns the result: the handle that started the driver owns
/// it (no copy of a large output); handles that attached later share one.
#[derive(Debug)]
enum Outcome {
    Own(oneshot::Receiver<RunResult>),
    Attached(watch::Receiver<Option<Arc<RunResult>>>),
}

impl RunHandle {
    pub async fn wait(self) -> RunResult {
        let RunHandle { id, done } = self;
        match done {
            Outcome::Own(rx) => rx.await.unwrap_or_else(|_| stopped(&id)),
            Outcome::Attached(mut rx) => match rx.wait_for(Option::is_some).await {
                Ok(result) => result.as_deref().cloned().unwrap_or_else(|| stopped(&id)),
                Err(_) => stopped(&id),
            },
        }
    }
}

fn stopped(id: &str) -> RunResult {
    RunResult {
        id: id.to_string(),
        status: Status::Failed,
        output: Value::Null,
        error: Some(json!({"message": "the engine stopped before the run finished"})),
        respond: None,
    }
}

/// A run being driven in this engine.
struct Active {
    done: watch::Receiver<Option<Arc<RunResult>>>,
    /// The driver's wake-up channel, once it runs.
    wake: Option<mpsc::UnboundedSender<Wake>>,
}

/// The right to drive a run: at most one driver per run in an engine.
struct Slot {
    engine: Engine,
    id: String,
    tx: Option<watch::Sender<Option<Arc<RunResult>>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Never used (the run could not be started or replayed): free the id.
        if self.tx.is_some() {
            self.engine.forget(&self.id);
        }
    }
}

impl Engine {
    pub async fn open(data_dir: &Path, options: Options) -> Result<Engine> {
        let store = Store::open(data_dir).await?;
        let wasm_cache = options
            .wasm_cache
            .clone()
            .or_else(machine_wasm_cache)
            .unwrap_or_else(|| store.data_dir().join("cache").join("wasm"));
        // Compiled code in the cache is run as it is: no workflow may write
        // there (nor into the data dir, which Settings::load checks).
        if let Some(allowed) = options
            .settings
            .files
            .allow
            .iter()
            .find(|a| contains(a, &wasm_cache))
        {
            return Err(Error::Usage(format!(
                "`[files] allow` entry {} contains the compiled-code cache {}: workflows could \
                 change code the engine runs; allow a folder beside it",
                allowed.display(),
                wasm_cache.display()
            )));
        }
        let exec_log = options.exec_log.as_ref().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
                .map(Mutex::new)
        });
        let engine = Engine {
            inner: Arc::new(Inner {
                store,
                permits: Arc::new(Semaphore::new(options.max_concurrent_steps.max(1))),
                exec_log,
                io: nodes::Io::new(options.settings).with_wasm_cache(wasm_cache),
                active: Mutex::new(HashMap::new()),
                docs: tokio::sync::Mutex::new(HashMap::new()),
                dirty: Mutex::new(HashSet::new()),
                doc_events: tokio::sync::broadcast::channel(4096).0,
                presence: Mutex::new(HashMap::new()),
                version_gap_secs: options.version_gap_secs,
                max_active_runs: options.max_active_runs.max(1),
                max_subworkflow_depth: options.max_subworkflow_depth,
                metrics: Default::default(),
                events: tokio::sync::broadcast::channel(options.event_capacity.max(1)).0,
                changes: tokio::sync::broadcast::channel(1024).0,
                limits: Mutex::new(HashMap::new()),
                plans: Mutex::new(HashMap::new()),
            }),
        };
        engine.materialize_stale().await?;
        Ok(engine)
    }

    /// Claims the right to drive `id`, or attaches to the driver that has it.
    fn claim(&self, id: &str) -> Result<Slot, RunHandle> {
        let mut active = self.inner.active.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = active.get(id) {
            return Err(RunHandle {
                id: id.to_string(),
                done: Outcome::Attached(a.done.clone()),
            });
        }
        let (tx, done) = watch::channel(None);
        active.insert(id.to_string(), Active { done, wake: None });
        Ok(Slot {
            engine: self.clone(),
            id: id.to_string(),
            tx: Some(tx),
        })
    }

    /// The semaphore limiting runs of this plan's workflow, if it has a limit.
    fn workflow_limit(&self, plan: &Plan) -> Option<Arc<Semaphore>> {
        let limit = plan.concurrency?;
        let mut limits = self.inner.limits.lock().unwrap_or_else(|e| e.into_inner());
        let entry = limits
            .entry(plan.workflow.id.clone())
            .or_insert_with(|| (limit, Arc::new(Semaphore::new(limit))));
        if entry.0 != limit {
            // The limit changed: new runs share a new semaphore; runs holding
            // permits of the old one finish under it.
            *entry = (limit, Arc::new(Semaphore::new(limit)));
        }
        Some(entry.1.clone())
    }

    /// A new run of the same pinned workflow version with the same trigger
    /// and input as `run_id`.
    pub async fn retry_from_start(&self, run_id: &str) -> Result<RunHandle> {
        let (row, plan) = self.ended_run(run_id).await?;
        self.start_with_id(
            new_run_id(),
            plan,
            Some(&row.trigger),
            row.input.clone(),
            None,
        )
        .await
    }

    /// A new run that reuses every step `run_id` finished (their journal
    /// records are copied, so they are replayed, not executed) and runs the
    /// rest: the failed step and what follows it.
    pub async fn retry_from_failed(&self, run_id: &str) -> Result<RunHandle> {
        let (row, _plan) = self.ended_run(run_id).await?;
        let records = self.store().run_records(run_id).await?;
        let finished: HashSet<(&str, &str, &str)> = records
            .iter()
            .filter(|r| r.kind == RecordKind::Succeeded)
            .map(|r| (&*r.node, r.lineage.as_str(), r.activation.as_str()))
            .collect();
        let id = new_run_id();
        self.store()
            .create_run(&NewRun {
                id: id.clone(),
                workflow_id: row.workflow_id.clone(),
                definition: row.definition.clone().into(),
                trigger: row.trigger.clone(),
                input: row.input.clone(),
                created_at_us: nodes::now_us(),
                parent_run: None,
                doc_version: row.doc_version.clone(),
            })
            .await?;
        let run: Arc<str> = Arc::from(id.as_str());
        let mut seq = 0;
        for rec in &records {
            let reused = matches!(rec.kind, RecordKind::Started | RecordKind::Succeeded)
                && finished.contains(&(&*rec.node, rec.lineage.as_str(), rec.activation.as_str()));
            if reused {
                self.store()
                    .journal()
                    .append(Record {
                        run_id: run.clone(),
                        seq,
                        ..rec.clone()
                    })
                    .await?;
                seq += 1;
            }
        }
        self.store().journal().flush().await?;
        self.resume(&id).await
    }

    /// A run that has ended, with its pinned plan.
    async fn ended_run(&self, run_id: &str) -> Result<(sluice_store::RunRow, Arc<Plan>)> {
        let row = self
            .store()
            .get_run(run_id)
            .await?
            .ok_or_else(|| Error::RunNotFound(run_id.to_string()))?;
        if row.status == "running" {
            return Err(Error::Usage(format!("run `{run_id}` is still running")));
        }
        let wf = Workflow::from_json(&row.definition).map_err(|e| Error::Corrupt {
            run: run_id.to_string(),
            message: e.to_string(),
        })?;
        Ok((row, Plan::new(wf)?))
    }

    /// Starts every `trigger.error` that watches `workflow` (its `workflows`
    /// list, or every other workflow when it has none) with the failure.
    /// Runs started this way never fire error triggers themselves: no cascades.
    pub async fn fire_error_triggers(&self, workflow: &str, failed: &RunResult) {
        let message = Arc::new(json!({
            "run_id": failed.id,
            "workflow": workflow,
            "node": failed.error.as_ref().and_then(|e| e.get("node")).cloned().unwrap_or(Value::Null),
            "error": failed.error,
        }));
        let rows = match self.store().list_workflows().await {
            Ok(rows) => rows,
            Err(e) => {
                return tracing_log(&format!(
                    "run {}: cannot look for error triggers: {e}",
                    failed.id
                ));
            }
        };
        for row in rows {
            let Ok(plan) = self.workflow(&row.id).await else {
                continue;
            };
            for node in plan.nodes.iter().filter(|n| !n.disabled) {
                let Some(Trigger::Error(cfg)) = &node.trigger else {
                    continue;
                };
                let watched = match &cfg.workflows {
                    Some(list) => list.iter().any(|w| w == workflow),
                    None => row.id != workflow,
                };
                if !watched {
                    continue;
                }
                let started = self
                    .start_with_id(
                        new_run_id(),
                        plan.clone(),
                        Some(&node.id),
                        message.clone(),
                        None,
                    )
                    .await;
                if let Err(e) = started {
                    tracing_log(&format!("error trigger {}/{}: {e}", row.id, node.id));
                }
            }
        }
    }

    /// Deletes a stored workflow (its runs stay). Returns whether it existed.
    pub async fn delete_workflow(&self, id: &str) -> Result<bool> {
        let mut docs = self.inner.docs.lock().await;
        let existed = self.store().delete_workflow(id).await?;
        docs.remove(id);
        drop(docs);
        self.workflow_changed(id);
        Ok(existed)
    }

    /// Tells the engine's services (triggers) that a workflow was created,
    /// changed or deleted.
    pub fn workflow_changed(&self, id: &str) {
        self.inner
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        // Nobody listening (no triggers running) is fine.
        self.inner.changes.send(id.to_string()).ok();
    }

    /// Workflow ids as they change.
    pub fn workflow_changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.inner.changes.subscribe()
    }

    /// Live events of every run from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<LiveEvent> {
        self.inner.events.subscribe()
    }

    /// How many runs this engine is driving right now.
    pub fn active_runs(&self) -> usize {
        self.inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// The Prometheus text exposition of the engine's metrics.
    pub fn metrics(&self) -> String {
        let active = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        self.inner.metrics.render(active)
    }

    /// Cancels a run this engine is driving: in-flight steps are stopped and
    /// the run ends `cancelled`. Returns false when the run is not active here.
    pub fn cancel(&self, id: &str) -> bool {
        let active = self.inner.active.lock().unwrap_or_else(|e| e.into_inner());
        match active.get(id).and_then(|a| a.wake.as_ref()) {
            Some(wake) => wake.send(Wake::Cancel).is_ok(),
            None => false,
        }
    }

    fn forget(&self, id: &str) {
        self.inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Builds what the settings describe (the HTTP client with its extra
    /// root certificates) now, so a bad setting is reported at start.
    pub fn check_settings(&self) -> std::result::Result<(), String> {
        self.inner.io.check()
    }

    /// The settings the engine runs with.
    pub fn settings(&self) -> &nodes::Settings {
        &self.inner.io.settings
    }

    /// Gets the script runtime for `code.js` and `data.transform` ready (from the compile
    /// cache in about a millisecond; the first time on a machine,
    /// pre-initialized and compiled in a few seconds), so the first script
    /// does not wait for it. `sluice serve` calls it in the background.
    pub async fn prepare_code(&self) -> Result<()> {
        let sandbox = self
            .inner
            .io
            .sandbox()
            .map_err(|e| Error::Usage(e.message))?
            .clone();
        sandbox
            .prepare_js()
            .await
            .map_err(|e| Error::Usage(e.to_string()))
    }

    /// Prepares the script runtime ([`Engine::prepare_code`]) once a
    /// stored workflow has an enabled `code.js` or `data.transform` node (jq
    /// runs in the same runtime): at once if one does,
    /// else as soon as a workflow gets one. Until then the sandbox is not
    /// even started, so an engine without scripts carries none of its
    /// memory. Returns after preparing, or when the engine's change channel
    /// closes. `sluice serve` and the desktop app run it in the background.
    pub async fn prepare_code_when_used(&self) -> Result<()> {
        let mut changes = self.workflow_changes();
        let uses_js = |plan: &Plan| {
            plan.nodes
                .iter()
                .any(|n| matches!(n.kind, Kind::Js | Kind::Transform) && !n.disabled)
        };
        let mut any = false;
        for row in self.store().list_workflows().await? {
            if self.workflow(&row.id).await.is_ok_and(|p| uses_js(&p)) {
                any = true;
                break;
            }
        }
        while !any {
            any = match changes.recv().await {
                Ok(id) => self.workflow(&id).await.is_ok_and(|p| uses_js(&p)),
                // Missed changes: look again at the next one.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => false,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            };
        }
        self.prepare_code().await
    }

    /// Stores a WebAssembly component for `code.wasm` nodes in the blob
    /// store, after checking that it is one (it is compiled now, and cached).
    /// Returns its hash, which nodes name in `config.module`.
    pub async fn add_module(&self, bytes: Vec<u8>) -> Result<String> {
        let sandbox = self
            .inner
            .io
            .sandbox()
            .map_err(|e| Error::Usage(e.message))?
            .clone();
        let (id, bytes) =
            tokio::task::spawn_blocking(move || sandbox.load(&bytes).map(|id| (id, bytes)))
                .await
                .map_err(|e| Error::Usage(e.to_string()))?
                .map_err(|e| Error::Usage(e.to_string()))?;
        let mut w = self.store().blobs().bytes_writer()?;
        w.write(&bytes)?;
        let (hash, _) = w.finish()?;
        debug_assert_eq!(hash, id);
        Ok(hash)
    }

    /// Checks the credentials a workflow names: each must exist with a kind
    /// its node accepts. Problems name the node.
    pub async fn check_credentials(&self, workflow: &Workflow) -> Result<()> {
        let refs = sluice_model::validate::credential_refs(workflow);
        if refs.is_empty() {
            return Ok(());
        }
        let stored: HashMap<String, String> = self
            .store()
            .list_credentials()
            .await?
            .into_iter()
            .map(|c| (c.name, c.kind))
            .collect();
        let problems =
            sluice_model::validate::check_credentials(workflow, |n| stored.get(n).cloned());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(Invalid(problems)))
        }
    }

    /// Loads a stored workflow by id.
    pub async fn workflow(&self, id: &str) -> Result<Arc<Plan>> {
        if self.is_dirty(id) {
            self.materialize(id).await?;
        }
        // Planning (parse, validate, compile templates and jq) is costly, and
        // so is a read per webhook: a plan is reused for a second without
        // looking, then while the stored text is the one it was built from.
        // Changes through this engine evict it at once (`workflow_changed`).
        if let Some((checked, plan)) = self
            .inner
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            && checked.elapsed() < PLAN_RECHECK
        {
            return Ok(plan.clone());
        }
        let (text, version) = self
            .store()
            .get_workflow_at(id)
            .await?
            .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))?;
        let cached = self
            .inner
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .map(|(_, p)| p.clone());
        let plan = match cached {
            Some(plan) if *plan.definition == *text && plan.version == version => plan,
            _ => {
                let wf = Workflow::from_json(&text)
                    .map_err(|e| Error::Usage(format!("stored workflow `{id}`: {e}")))?;
                Plan::new_at(wf, version)?
            }
        };
        // Cache only what round-trips (a stored text that is the plan's own).
        if *plan.definition == *text {
            let mut plans = self.inner.plans.lock().unwrap_or_else(|e| e.into_inner());
            if plans.len() >= 1024 {
                plans.clear();
            }
            plans.insert(id.to_string(), (Instant::now(), plan.clone()));
        }
        Ok(plan)
    }

    /// Starts a run; returns once the run is durably recorded.
    pub async fn start(
        &self,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
    ) -> Result<RunHandle> {
        self.admit()?;
        self.start_detached(plan, trigger, input, true).await
    }

    /// Refuses a new run (top-level, or a new sub-workflow) while the engine
    /// holds `max_active_runs`. Schedule fires, error triggers, retries and
    /// resumes belong to work already admitted and are not refused.
    fn admit(&self) -> Result<()> {
        let active = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        if active >= self.inner.max_active_runs {
            return Err(Error::Busy(active));
        }
        Ok(())
    }

    /// The workflows of a run and its ancestors, the run's own first, read
    /// from the parent links of the run rows (at most `limit` of them). A
    /// run whose row is not yet committed is a top-level run (only those
    /// are queued rather than created), so the walk ends there.
    async fn lineage(&self, run_id: &str, own_workflow: &str, limit: usize) -> Result<Vec<String>> {
        let mut chain = vec![own_workflow.to_string()];
        let mut parent = match self.store().get_run(run_id).await? {
            Some(row) => row.parent_run,
            None => None,
        };
        while let Some(id) = parent {
            if chain.len() > limit {
                break;
            }
            match self.store().get_run(&id).await? {
                Some(row) => {
                    chain.push(row.workflow_id);
                    parent = row.parent_run;
                }
                None => break,
            }
        }
        Ok(chain)
    }

    /// Creates and spawns a run on a task of its own: a caller that goes away
    /// midway (an HTTP client hanging up) cannot leave a run recorded but
    /// never driven.
    async fn start_detached(
        &self,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
        durable: bool,
    ) -> Result<RunHandle> {
        let engine = self.clone();
        let trigger = trigger.map(str::to_string);
        tokio::spawn(async move {
            engine
                .start_inner(new_run_id(), plan, trigger.as_deref(), input, None, durable)
                .await
        })
        .await
        .map_err(|e| Error::Usage(format!("starting the run: {e}")))?
    }

    /// Like [`Engine::start`] for callers that answer only when the run has
    /// ended (a `when_finished` webhook, a waiting API call): the run's
    /// creation is committed with its finish instead of before its first
    /// step, saving one commit round trip. A crash before the finish loses a
    /// run nobody was told about.
    pub async fn start_for_result(
        &self,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
    ) -> Result<RunHandle> {
        self.admit()?;
        self.start_detached(plan, trigger, input, false).await
    }

    /// Starts a run under a chosen id (deterministic ids make starts
    /// idempotent: a schedule fire, a sub-workflow call). If a run with this
    /// id is being driven, attaches to it. Not subject to the active-run limit.
    pub async fn start_with_id(
        &self,
        id: String,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
        parent: Option<String>,
    ) -> Result<RunHandle> {
        self.start_inner(id, plan, trigger, input, parent, true)
            .await
    }

    async fn start_inner(
        &self,
        id: String,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
        parent: Option<String>,
        durable: bool,
    ) -> Result<RunHandle> {
        let entry = plan.entry(trigger)?;
        if sluice_model::value::deeper_than(&input, sluice_model::value::MAX_DEPTH) {
            return Err(Error::InputTooDeep);
        }
        self.check_credentials(&plan.workflow).await?;
        let slot = match self.claim(&id) {
            Ok(slot) => slot,
            Err(attached) => return Ok(attached),
        };
        let created_at_us = nodes::now_us();
        let fires_errors = parent.is_none() && plan.nodes[entry].kind != Kind::ErrorTrigger;
        let new_run = NewRun {
            id: id.clone(),
            workflow_id: plan.workflow.id.clone(),
            definition: sluice_store::Definition::from_hashed(
                plan.definition.shared_text().clone(),
                plan.definition.shared_hash().clone(),
            ),
            trigger: plan.nodes[entry].id.to_string(),
            input: input.clone(),
            created_at_us,
            parent_run: parent,
            doc_version: plan.version.clone(),
        };
        if durable {
            self.store().create_run(&new_run).await?;
        } else {
            self.store().queue_run(&new_run).await?;
        }
        let info = run_info(&id, &plan, &plan.nodes[entry].id, created_at_us);
        let (run, actions) = Run::start(plan, entry, input);
        Ok(self.spawn_driver(slot, run, actions, Replay::default(), info, fires_errors))
    }

    /// Resumes every unfinished run, oldest first. A parent whose
    /// sub-workflow step is still in flight attaches to its child's driver.
    pub async fn resume_all(&self) -> Result<Vec<RunHandle>> {
        let mut handles = Vec::new();
        for row in self.store().unfinished_runs().await? {
            // One run that cannot be replayed must not keep the others (or
            // the whole engine) from starting: report it and go on.
            match self.resume(&row.id).await {
                Ok(h) => handles.push(h),
                Err(e) => tracing_log(&format!("run {} cannot be resumed: {e}", row.id)),
            }
        }
        Ok(handles)
    }

    /// Rebuilds a run from its journal and drives it to the end.
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle> {
        let slot = match self.claim(run_id) {
            Ok(slot) => slot,
            Err(attached) => return Ok(attached),
        };
        let row = self
            .store()
            .get_run(run_id)
            .await?
            .ok_or_else(|| Error::RunNotFound(run_id.to_string()))?;
        if row.status != "running" {
            return Err(Error::Usage(format!(
                "run `{run_id}` already {}: nothing to resume",
                row.status
            )));
        }
        let corrupt = |message: String| Error::Corrupt {
            run: run_id.to_string(),
            message,
        };
        let wf = Workflow::from_json(&row.definition).map_err(|e| corrupt(e.to_string()))?;
        let plan = Plan::new(wf)?;
        let entry = plan
            .entry(Some(&row.trigger))
            .map_err(|e| corrupt(e.to_string()))?;
        let records = self.store().run_records(run_id).await?;
        let (mut run, actions) = Run::start(plan.clone(), entry, row.input.clone());
        let mut replay = Replay::default();
        // Skips already journaled are not written again.
        for rec in records.iter().filter(|r| r.kind == RecordKind::Skipped) {
            if let Some(key) = parse_key(&plan, rec) {
                replay.skipped.insert((key.node, key.lineage));
            }
        }
        replay.absorb(actions);
        for rec in &records {
            replay.next_seq = replay.next_seq.max(rec.seq + 1);
            let Some(key) = parse_key(&plan, rec) else {
                return Err(corrupt(format!(
                    "record {} names an unknown step {}/{}",
                    rec.seq, rec.node, rec.lineage
                )));
            };
            match rec.kind {
                RecordKind::Started => {
                    replay.first_started.entry(key.clone()).or_insert(rec.at_us);
                    if matches!(replay.pending.get(&key), Some(Pending::Retry { .. })) {
                        let acts = run.apply(Event::RetryDue { key: key.clone() });
                        replay.absorb(acts);
                    }
                }
                RecordKind::Succeeded => {
                    let outputs = decode_outputs(rec).map_err(corrupt)?;
                    replay.pending.remove(&key);
                    let acts = run.apply(Event::Succeeded { key, outputs });
                    replay.absorb(acts);
                }
                RecordKind::Failed => {
                    let message = rec
                        .error
                        .as_ref()
                        .and_then(|e| e["message"].as_str())
                        .unwrap_or("")
                        .to_string();
                    let retryable = rec
                        .error
                        .as_ref()
                        .and_then(|e| e["retryable"].as_bool())
                        .unwrap_or(false);
                    replay.pending.remove(&key);
                    replay.failed_at.insert(key.clone(), rec.at_us);
                    let acts = run.apply(Event::Failed {
                        key,
                        error: StepError { message, retryable },
                    });
                    replay.absorb(acts);
                }
                RecordKind::Skipped => {
                    replay.skipped.insert((key.node, key.lineage));
                }
            }
        }
        // What is left: steps in flight at the crash, retries not yet due, or the end.
        let mut actions = Vec::new();
        for (key, p) in std::mem::take(&mut replay.pending) {
            actions.push(match p {
                Pending::Start {
                    attempt,
                    input,
                    hist,
                } => Action::Start {
                    key,
                    attempt,
                    input,
                    hist,
                },
                Pending::Retry { attempt, delay_ms } => {
                    let due = replay
                        .failed_at
                        .get(&key)
                        .copied()
                        .unwrap_or_else(nodes::now_us)
                        + delay_ms as i64 * 1000;
                    let left = ((due - nodes::now_us()).max(0) / 1000) as u64;
                    Action::Retry {
                        key,
                        attempt,
                        delay_ms: left,
                    }
                }
            });
        }
        actions.append(&mut replay.skips_to_write);
        if let Some(finish) = replay.finish.take() {
            actions.push(finish);
        }
        let info = run_info(run_id, &plan, &row.trigger, row.created_at_us);
        let fires_errors = row.parent_run.is_none() && plan.nodes[entry].kind != Kind::ErrorTrigger;
        Ok(self.spawn_driver(slot, run, actions, replay, info, fires_errors))
    }

    fn spawn_driver(
        &self,
        mut slot: Slot,
        run: Run,
        actions: Vec<Action>,
        replay: Replay,
        info: Value,
        fires_errors: bool,
    ) -> RunHandle {
        let id = slot.id.clone();
        let workflow = info["workflow"].as_str().unwrap_or_default().to_string();
        let (own_tx, own_rx) = oneshot::channel();
        let Some(tx) = slot.tx.take() else {
            // A slot is used once; an empty one has nothing to drive.
            return RunHandle {
                id,
                done: Outcome::Own(own_rx),
            };
        };
        let driver = Driver::new(self.clone(), Arc::from(id.as_str()), run, replay, info);
        if let Some(a) = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&id)
        {
            a.wake = Some(driver.tx.clone());
        }
        let engine = self.clone();
        let run_id = id.clone();
        let limit = self.workflow_limit(&driver.plan);
        tokio::spawn(async move {
            // Queued until the workflow's concurrency allows it to execute.
            let permit = match limit {
                Some(sem) => {
                    engine.inner.metrics.queued(1);
                    let p = sem.acquire_owned().await.ok();
                    engine.inner.metrics.queued(-1);
                    p
                }
                None => None,
            };
            let result = driver.drive(actions).await;
            drop(permit);
            engine
                .inner
                .metrics
                .run_finished(&workflow, result.status.as_str());
            // The finish is durable now: a later resume sees it and refuses.
            engine.forget(&run_id);
            if fires_errors && result.status == Status::Failed {
                // Started (durably) before the result is reported: a process that
                // exits right after resumes them at its next start.
                engine.fire_error_triggers(&workflow, &result).await;
            }
            if tx.receiver_count() > 0 {
                tx.send_replace(Some(Arc::new(result.clone())));
            }
            // The caller may not be waiting.
            own_tx.send(result).ok();
            drop(slot);
        });
        RunHandle {
            id,
            done: Outcome::Own(own_rx),
        }
    }
}

/// The compile cache shared by every data dir of this user on this machine
/// (the compiled script runtime is the same for all of them, so it is
/// compiled once): `SLUICE_WASM_CACHE`, else the platform's cache dir
/// (`~/.cache/sluice/wasm` on Linux).
fn machine_wasm_cache() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("SLUICE_WASM_CACHE").filter(|d| !d.is_empty()) {
        return Some(dir.into());
    }
    directories::ProjectDirs::from("dev", "sluice", "sluice").map(|d| d.cache_dir().join("wasm"))
}

/// Whether folder `outer` contains `inner` (or is it), by their real paths
/// where they exist.
fn contains(outer: &std::path::Path, inner: &std::path::Path) -> bool {
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    real(inner).starts_with(real(outer))
}

/// How long a cached plan is trusted without reading its stored text.
const PLAN_RECHECK: Duration = Duration::from_secs(1);

/// The template context `run`: `id`, `workflow`, `trigger`, `started_at` (RFC 3339).
fn run_info(id: &str, plan: &Plan, trigger: &str, started_at_us: i64) -> Value {
    let started_at =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(started_at_us) * 1000)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            });
    json!({"id": id, "workflow": plan.workflow.id, "trigger": trigger, "started_at": started_at})
}

/// A fresh run id: time-ordered, unique within and across processes.
pub fn new_run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = nodes::now_us();
    // Time-ordered, unique within and across processes (pid + counter).
    format!(
        "r{:013x}{:05x}{:04x}",
        t,
        std::process::id() & 0xfffff,
        n & 0xffff
    )
}

/// What a replay found still to do.
#[derive(Default)]
struct Replay {
    next_seq: u64,
    pending: std::collections::BTreeMap<StepKey, Pending>,
    first_started: HashMap<StepKey, i64>,
    failed_at: HashMap<StepKey, i64>,
    skipped: HashSet<(usize, Lineage)>,
    skips_to_write: Vec<Action>,
    finish: Option<Action>,
}

enum Pending {
    Start {
        attempt: u32,
        input: Msg,
        hist: Option<Arc<Hist>>,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
    },
}

impl Replay {
    fn absorb(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Start {
                    key,
                    attempt,
                    input,
                    hist,
                } => {
                    self.pending.insert(
                        key,
                        Pending::Start {
                            attempt,
                            input,
                            hist,
                        },
                    );
                }
                Action::Retry {
                    key,
                    attempt,
                    delay_ms,
                } => {
                    self.pending
                        .insert(key, Pending::Retry { attempt, delay_ms });
                }
                Action::Skipped { node, lineage } => {
                    if !self.skipped.contains(&(node, lineage.clone())) {
                        self.skips_to_write.push(Action::Skipped { node, lineage });
                    }
                }
                Action::Abort { keys } => {
                    for k in keys {
                        self.pending.remove(&k);
                    }
                }
                finish @ Action::Finish { .. } => self.finish = Some(finish),
            }
        }
    }
}

fn parse_key(plan: &Plan, rec: &Record) -> Option<StepKey> {
    Some(StepKey {
        node: plan.node_index(&rec.node)?,
        lineage: Lineage::parse(&rec.lineage)?,
        activation: if rec.kind == RecordKind::Skipped {
            Activation::default()
        } else {
            Activation::parse(&rec.activation)?
        },
    })
}

fn decode_outputs(rec: &Record) -> Result<Vec<(String, Msg)>, String> {
    let v = rec
        .data
        .as_ref()
        .and_then(Stored::value)
        .ok_or_else(|| format!("record {} has no outputs", rec.seq))?;
    let pairs = v
        .as_array()
        .ok_or_else(|| format!("record {}: outputs are not an array", rec.seq))?;
    pairs
        .iter()
        .map(|p| {
            let port = p
                .get(0)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("record {}: bad output", rec.seq))?;
            Ok((
                port.to_string(),
                Arc::new(p.get(1).cloned().unwrap_or(Value::Null)),
            ))
        })
        .collect()
}

/// The optional parts of a journal record.
#[derive(Default)]
struct Extra<'a> {
    /// The step input, for steps journaled only after they ran.
    input: Option<&'a Value>,
    error: Option<Value>,
    duration_us: Option<i64>,
    /// `data` already serialized (by the step's own task, off the driver).
    stored: Option<Stored>,
}

/// What a finished step task reports back.
struct Done {
    key: StepKey,
    attempt: u32,
    started: Instant,
    result: Result<Vec<(String, Msg)>, StepError>,
    logs: Vec<(String, String)>,
    /// Steps journaled only after they ran (pure kinds): their input.
    input: Option<Msg>,
    /// The outputs, serialized by the step's task (see [`Extra::stored`]).
    stored: Option<Stored>,
}

enum Wake {
    Step(Done),
    RetryDue(StepKey),
    Cancel,
}

struct Driver {
    engine: Engine,
    run_id: Arc<str>,
    run: Run,
    plan: Arc<Plan>,
    seq: u64,
    first_started: HashMap<StepKey, i64>,
    tasks: JoinSet<()>,
    handles: HashMap<StepKey, tokio::task::AbortHandle>,
    tx: mpsc::UnboundedSender<Wake>,
    rx: mpsc::UnboundedReceiver<Wake>,
    /// Steps that finished on the driver itself, not yet applied.
    ready: std::collections::VecDeque<Wake>,
    run_info: Arc<Value>,
    workflow: Arc<str>,
}

impl Driver {
    fn new(engine: Engine, run_id: Arc<str>, run: Run, replay: Replay, info: Value) -> Driver {
        let plan = run.plan().clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let workflow: Arc<str> = Arc::from(info["workflow"].as_str().unwrap_or_default());
        let trigger = info["trigger"].as_str().unwrap_or_default().to_string();
        let run_info = Arc::new(info);
        let driver = Driver {
            engine,
            run_id,
            run,
            plan,
            seq: replay.next_seq,
            first_started: replay.first_started,
            tasks: JoinSet::new(),
            handles: HashMap::new(),
            tx,
            rx,
            ready: Default::default(),
            run_info,
            workflow,
        };
        driver.emit(What::RunStarted { trigger }, nodes::now_us());
        driver
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    fn key_strings(&self, key: &StepKey) -> (Arc<str>, String, String) {
        (
            self.plan.nodes[key.node].id.clone(),
            key.lineage.to_string(),
            key.activation.to_string(),
        )
    }

    async fn journal<T: serde::Serialize + ?Sized>(
        &mut self,
        kind: RecordKind,
        key: &StepKey,
        attempt: u32,
        data: Option<&T>,
        extra: Extra<'_>,
    ) -> Result<()> {
        let Extra {
            input,
            error,
            duration_us,
            stored,
        } = extra;
        let (node, lineage, activation) = self.key_strings(key);
        let blobs = self.engine.store().blobs();
        let data = match stored {
            Some(s) => Some(s),
            None => data.map(|v| blobs.store_value(v)).transpose()?,
        };
        let input = input.map(|v| blobs.store_value(v)).transpose()?;
        let at_us = nodes::now_us();
        if self.engine.inner.events.receiver_count() > 0 {
            let what = match kind {
                RecordKind::Started => What::StepStarted {
                    node: node.clone(),
                    lineage: lineage.clone(),
                    activation: activation.clone(),
                    attempt,
                },
                RecordKind::Succeeded | RecordKind::Failed => What::StepFinished {
                    node: node.clone(),
                    lineage: lineage.clone(),
                    activation: activation.clone(),
                    attempt,
                    status: if kind == RecordKind::Succeeded {
                        "succeeded"
                    } else {
                        "failed"
                    },
                    duration_us: duration_us.unwrap_or(0),
                    error: error
                        .as_ref()
                        .and_then(|e| e["message"].as_str())
                        .map(str::to_string),
                },
                RecordKind::Skipped => What::StepSkipped {
                    node: node.clone(),
                    lineage: lineage.clone(),
                },
            };
            self.emit(what, at_us);
        }
        let rec = Record {
            run_id: self.run_id.clone(),
            seq: self.next_seq(),
            kind,
            node,
            lineage,
            activation,
            attempt,
            at_us,
            data,
            input,
            error,
            duration_us,
        };
        self.engine.store().journal().append(rec).await?;
        Ok(())
    }

    /// Publishes a live event (nobody listening costs nothing; a slow
    /// listener lags, the run never waits).
    fn emit(&self, what: What, at_us: i64) {
        let event = LiveEvent {
            run: self.run_id.clone(),
            workflow: self.workflow.clone(),
            at_us,
            what,
        };
        // No receivers is not an error: events are best effort by design.
        self.engine.inner.events.send(event).ok();
    }

    async fn drive(mut self, mut actions: Vec<Action>) -> RunResult {
        // Cancelled while queued (workflow concurrency): end before starting.
        if let Ok(Wake::Cancel) = self.rx.try_recv() {
            actions = self.run.apply(Event::Cancel);
        }
        loop {
            match self.carry_out(std::mem::take(&mut actions)).await {
                Ok(Some(result)) => return result,
                Ok(None) => {}
                Err(e) => return self.internal_failure(e).await,
            }
            let wake = match self.ready.pop_front() {
                Some(w) => Some(w),
                None => self.rx.recv().await,
            };
            let Some(wake) = wake else {
                return self
                    .internal_failure(Error::Usage("step channel closed".into()))
                    .await;
            };
            let event = match wake {
                Wake::RetryDue(key) => Event::RetryDue { key },
                Wake::Cancel => Event::Cancel,
                Wake::Step(mut done) => {
                    self.handles.remove(&done.key);
                    let took = done.started.elapsed();
                    self.engine
                        .inner
                        .metrics
                        .step_finished(self.plan.nodes[done.key.node].kind.name(), took);
                    let duration = Some(took.as_micros() as i64);
                    let logged = self.write_logs(&done).await;
                    let journaled = match &done.result {
                        // Serialized straight from the shared messages: `[[port, value], ...]`.
                        Ok(outputs) => {
                            let extra = Extra {
                                input: done.input.as_deref(),
                                error: None,
                                duration_us: duration,
                                stored: done.stored.take(),
                            };
                            self.journal(
                                RecordKind::Succeeded,
                                &done.key,
                                done.attempt,
                                Some(outputs.as_slice()),
                                extra,
                            )
                            .await
                        }
                        Err(e) => {
                            let err = json!({"message": e.message, "retryable": e.retryable});
                            let extra = Extra {
                                input: done.input.as_deref(),
                                error: Some(err),
                                duration_us: duration,
                                stored: None,
                            };
                            self.journal(
                                RecordKind::Failed,
                                &done.key,
                                done.attempt,
                                None::<&Value>,
                                extra,
                            )
                            .await
                        }
                    };
                    if let Err(e) = logged.and(journaled) {
                        return self.internal_failure(e).await;
                    }
                    match done.result {
                        Ok(outputs) => Event::Succeeded {
                            key: done.key,
                            outputs,
                        },
                        Err(error) => Event::Failed {
                            key: done.key,
                            error,
                        },
                    }
                }
            };
            actions = self.run.apply(event);
        }
    }

    async fn write_logs(&self, done: &Done) -> Result<()> {
        for (level, message) in &done.logs {
            let line = LogLine {
                run_id: self.run_id.clone(),
                node: self.plan.nodes[done.key.node].id.to_string(),
                lineage: done.key.lineage.to_string(),
                level: level.clone(),
                message: message.clone(),
                at_us: nodes::now_us(),
            };
            if self.engine.inner.events.receiver_count() > 0 {
                let what = What::Log {
                    node: self.plan.nodes[done.key.node].id.clone(),
                    lineage: line.lineage.clone(),
                    level: line.level.clone(),
                    message: line.message.clone(),
                };
                self.emit(what, line.at_us);
            }
            self.engine.store().journal().log(line).await?;
        }
        Ok(())
    }

    /// Carries out actions; returns the result when the run is over.
    async fn carry_out(&mut self, actions: Vec<Action>) -> Result<Option<RunResult>> {
        for action in actions {
            match action {
                Action::Start {
                    key,
                    attempt,
                    input,
                    hist,
                } => {
                    let first = *self
                        .first_started
                        .entry(key.clone())
                        .or_insert_with(nodes::now_us);
                    let node = &self.plan.nodes[key.node];
                    if node.disabled || node.kind.is_pure() {
                        // Pure steps run at once and have no side effects: they
                        // are journaled once, after they ran, with their input.
                        if self.engine.inner.events.receiver_count() > 0 {
                            let (node, lineage, activation) = self.key_strings(&key);
                            self.emit(
                                What::StepStarted {
                                    node,
                                    lineage,
                                    activation,
                                    attempt,
                                },
                                nodes::now_us(),
                            );
                        }
                    } else {
                        self.journal(
                            RecordKind::Started,
                            &key,
                            attempt,
                            Some(&*input),
                            Extra::default(),
                        )
                        .await?;
                    }
                    self.spawn_step(key, attempt, input, hist, first);
                }
                Action::Retry { key, delay_ms, .. } => {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        // The run may be over: then nobody listens.
                        tx.send(Wake::RetryDue(key)).ok();
                    });
                }
                Action::Skipped { node, lineage } => {
                    let key = StepKey {
                        node,
                        lineage,
                        activation: Activation::default(),
                    };
                    self.journal(
                        RecordKind::Skipped,
                        &key,
                        0,
                        None::<&Value>,
                        Extra::default(),
                    )
                    .await?;
                }
                Action::Abort { keys } => {
                    for k in keys {
                        if let Some(h) = self.handles.remove(&k) {
                            h.abort();
                        }
                    }
                }
                Action::Finish {
                    status,
                    output,
                    error,
                    respond,
                } => {
                    let stored = self.engine.store().blobs().store_value(&output)?;
                    self.engine
                        .store()
                        .journal()
                        .finish_run(
                            &self.run_id,
                            status.as_str(),
                            Some(stored),
                            error.clone(),
                            nodes::now_us(),
                        )
                        .await?;
                    self.tasks.abort_all();
                    self.emit(
                        What::RunFinished {
                            status: status.as_str(),
                            error: error.clone(),
                        },
                        nodes::now_us(),
                    );
                    return Ok(Some(RunResult {
                        id: self.run_id.to_string(),
                        status,
                        output,
                        error,
                        respond,
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Runs a step: pure kinds (and disabled nodes) at once on the driver,
    /// with no task or channel hop; the others on a task of their own.
    fn spawn_step(
        &mut self,
        key: StepKey,
        attempt: u32,
        input: Msg,
        hist: Option<Arc<Hist>>,
        first_started_at_us: i64,
    ) {
        let node = &self.plan.nodes[key.node];
        let step = Prepared::new(self, &key, attempt, &input, hist);
        let inline = if node.disabled {
            Some(Ok(vec![("out".to_string(), input.clone())]))
        } else {
            nodes::execute_pure(&step.call(node, first_started_at_us))
        };
        if let Some(result) = inline {
            self.ready
                .push_back(Wake::Step(step.done(key, attempt, result, Some(input))));
            return;
        }
        let plan = self.plan.clone();
        let permits = self.engine.inner.permits.clone();
        let blobs = self.engine.store().blobs().clone();
        let tx = self.tx.clone();
        let handle_key = key.clone();
        // Kinds that only wait (for a timer, for a child run) hold no step
        // permit: parents waiting on children must never starve the steps
        // those children (or unrelated runs) need.
        let waits = node.kind.only_waits();
        let handle = self.tasks.spawn(async move {
            let permit = if waits {
                None
            } else {
                permits.acquire_owned().await.ok()
            };
            // Durations count the node's own time, not the wait for a permit.
            let mut step = step;
            step.started = Instant::now();
            let node = &plan.nodes[key.node];
            let fut = nodes::execute(step.call(node, first_started_at_us));
            let result = match node.timeout_ms {
                Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), fut).await {
                    Ok(r) => r,
                    Err(_) => Err(nodes::Error::retryable(format!("timed out after {ms} ms"))),
                },
                None => fut.await,
            };
            drop(permit);
            let mut done = step.done(key, attempt, result, None);
            // Serialize the outputs here, in parallel with other steps, so
            // the run's driver (one task per run) only queues them. A failure
            // leaves it to the driver, which reports it.
            if let Ok(outputs) = &done.result {
                done.stored = blobs.store_value(outputs.as_slice()).ok();
            }
            // The driver may be gone (run aborted): nothing to report then.
            tx.send(Wake::Step(done)).ok();
        });
        self.handles.insert(handle_key, handle);
    }

    async fn internal_failure(&mut self, e: Error) -> RunResult {
        self.tasks.abort_all();
        let error = json!({"message": format!("engine error: {e}")});
        // Best effort: the journal itself may be what failed.
        if let Err(e2) = self
            .engine
            .store()
            .journal()
            .finish_run(
                &self.run_id,
                "failed",
                None,
                Some(error.clone()),
                nodes::now_us(),
            )
            .await
        {
            tracing_log(&format!(
                "run {}: could not record the failure: {e2}",
                self.run_id
            ));
        }
        RunResult {
            id: self.run_id.to_string(),
            status: Status::Failed,
            output: Value::Null,
            error: Some(error),
            respond: None,
        }
    }
}

/// One execution of a step, ready to call the node.
struct Prepared {
    host: StepHost,
    scope: Scope,
    started: Instant,
}

impl Prepared {
    fn new(
        driver: &Driver,
        key: &StepKey,
        attempt: u32,
        input: &Msg,
        hist: Option<Arc<Hist>>,
    ) -> Prepared {
        let plan = &driver.plan;
        let node = &plan.nodes[key.node];
        let idem = format!(
            "{}/{}/{}/{}",
            driver.run_id, node.id, key.lineage, key.activation
        );
        if let Some(log) = &driver.engine.inner.exec_log {
            use std::io::Write;
            if let Ok(mut f) = log.lock() {
                // Test hook only: a failed write just means a missing count.
                writeln!(f, "{idem} {attempt}").ok();
            }
        }
        Prepared {
            host: StepHost {
                engine: driver.engine.clone(),
                plan: plan.clone(),
                idem,
                logs: Mutex::new(Vec::new()),
                secrets: Mutex::new(Redactor::default()),
            },
            scope: Scope {
                input: input.clone(),
                nodes: Arc::new(HistView {
                    plan: plan.clone(),
                    hist,
                }),
                run: driver.run_info.clone(),
                vars: plan.vars.clone(),
            },
            started: Instant::now(),
        }
    }

    fn call<'a>(&'a self, node: &'a PlanNode, first_started_at_us: i64) -> nodes::Call<'a> {
        nodes::Call {
            kind: node.kind,
            node_id: &node.id,
            config: &node.config,
            scope: self.scope.clone(),
            first_started_at_us,
            host: &self.host,
            jq: node.jq.clone(),
            io: &self.host.engine.inner.io,
        }
    }

    /// The report of a finished step; `input` for steps journaled only now.
    fn done(
        self,
        key: StepKey,
        attempt: u32,
        result: nodes::Result<Vec<(String, Msg)>>,
        input: Option<Msg>,
    ) -> Done {
        let mut logs = self.host.logs.into_inner().unwrap_or_default();
        let secrets = self.host.secrets.into_inner().unwrap_or_default();
        let mut result = result;
        // Every value in a run stays readable (see `sluice_model::value`): a
        // node that built a deeper one fails here, before it is journaled.
        if let Ok(outputs) = &result
            && let Some((port, _)) = outputs.iter().find(|(_, msg)| {
                sluice_model::value::deeper_than(msg, sluice_model::value::MAX_DEPTH)
            })
        {
            result = Err(nodes::Error::terminal(format!(
                "output `{port}` is nested more than {} levels deep (the limit for values in a run)",
                sluice_model::value::MAX_DEPTH
            )));
        }
        // A step that used a credential: mask its secrets in all it produced
        // before anything reaches the journal, the events or the caller.
        if !secrets.is_empty() {
            match &mut result {
                Ok(outputs) => {
                    for (_, msg) in outputs.iter_mut() {
                        if let Some(masked) = secrets.redact_value(msg) {
                            *msg = Arc::new(masked);
                        }
                    }
                }
                Err(e) => e.message = secrets.redact_str(&e.message).into_owned(),
            }
            for (_, line) in logs.iter_mut() {
                *line = secrets.redact_str(line).into_owned();
            }
        }
        Done {
            key,
            attempt,
            started: self.started,
            result,
            logs,
            input,
            stored: None,
        }
    }
}

fn tracing_log(msg: &str) {
    eprintln!("sluice: {msg}");
}

/// `nodes.<id>` for a step: the outputs on the path of its message.
#[derive(Debug)]
struct HistView {
    plan: Arc<Plan>,
    hist: Option<Arc<Hist>>,
}

impl HistView {
    fn walk(&self, mut visit: impl FnMut(&Hist) -> bool) {
        let mut stack: Vec<Arc<Hist>> = self.hist.iter().cloned().collect();
        let mut seen: HashSet<*const Hist> = HashSet::new();
        while let Some(h) = stack.pop() {
            if !seen.insert(Arc::as_ptr(&h)) {
                continue;
            }
            if h.node != usize::MAX && visit(&h) {
                return;
            }
            stack.extend(h.parents.iter().rev().cloned());
        }
    }
}

impl NodeOutputs for HistView {
    fn get(&self, id: &str) -> Option<Msg> {
        let target = self.plan.node_index(id)?;
        let mut found = None;
        self.walk(|h| {
            if h.node == target {
                found = Some(h.output.clone());
                true
            } else {
                false
            }
        });
        found
    }

    fn ids(&self) -> Vec<String> {
        let mut ids = Vec::new();
        self.walk(|h| {
            let id = self.plan.nodes[h.node].id.to_string();
            if !ids.contains(&id) {
                ids.push(id);
            }
            false
        });
        ids
    }
}

struct StepHost {
    engine: Engine,
    /// The plan of the step's run (its workflow, for sub-workflow limits).
    plan: Arc<Plan>,
    idem: String,
    logs: Mutex<Vec<(String, String)>>,
    /// The secrets of the credentials this step asked for.
    secrets: Mutex<Redactor>,
}

/// A blob written by a step, masked for the step's secrets on the way in.
struct StepBlob {
    writer: sluice_store::BytesWriter,
    redact: Option<nodes::redact::StreamRedactor>,
}

impl nodes::BlobWriter for StepBlob {
    fn write(&mut self, bytes: &[u8]) -> nodes::Result<()> {
        let result = match &mut self.redact {
            Some(r) => {
                let safe = r.push(bytes);
                self.writer.write(&safe)
            }
            None => self.writer.write(bytes),
        };
        result.map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))
    }

    fn finish(mut self: Box<Self>) -> nodes::Result<(String, u64)> {
        if let Some(r) = self.redact.take() {
            let tail = r.finish();
            self.writer
                .write(&tail)
                .map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))?;
        }
        self.writer
            .finish()
            .map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))
    }
}

impl Host for StepHost {
    fn idempotency_key(&self) -> &str {
        &self.idem
    }

    fn credential<'a>(
        &'a self,
        name: &'a str,
    ) -> nodes::BoxFuture<'a, nodes::Result<nodes::Credential>> {
        Box::pin(async move {
            let found = self
                .engine
                .store()
                .get_credential(name)
                .await
                .map_err(|e| match e {
                    // A key that does not open the vault will not next time either.
                    sluice_store::Error::Vault(_) => {
                        nodes::Error::terminal(format!("credential `{name}`: {e}"))
                    }
                    _ => nodes::Error::retryable(format!("credential `{name}`: {e}")),
                })?;
            let Some((kind, value)) = found else {
                return Err(nodes::Error::terminal(format!(
                    "credential `{name}` does not exist"
                )));
            };
            if let Ok(mut secrets) = self.secrets.lock() {
                secrets.extend(nodes::redact::secrets_of(&kind, &value));
            }
            Ok(nodes::Credential {
                name: name.to_string(),
                kind,
                value,
            })
        })
    }

    fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        match self.secrets.lock() {
            Ok(s) if !s.is_empty() => {
                let mut stream = s.stream();
                let mut out = stream.push(bytes);
                out.extend(stream.finish());
                out
            }
            _ => bytes.to_vec(),
        }
    }

    fn blob_writer(&self) -> nodes::Result<Box<dyn nodes::BlobWriter>> {
        let writer = self
            .engine
            .store()
            .blobs()
            .bytes_writer()
            .map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))?;
        let redact = self
            .secrets
            .lock()
            .ok()
            .filter(|s| !s.is_empty())
            .map(|s| s.stream());
        Ok(Box::new(StepBlob { writer, redact }))
    }

    fn blob_path(&self, hash: &str) -> nodes::Result<std::path::PathBuf> {
        self.engine
            .store()
            .blobs()
            .blob_path(hash)
            .map_err(|e| nodes::Error::terminal(format!("blob `{hash}`: {e}")))
    }

    fn log(&self, level: &str, message: &str) {
        if let Ok(mut logs) = self.logs.lock()
            && logs.len() < 1000
        {
            logs.push((level.to_string(), message.chars().take(8192).collect()));
        }
    }

    fn subworkflow(
        &self,
        workflow: String,
        trigger: Option<String>,
        input: Msg,
        wait: bool,
    ) -> nodes::BoxFuture<'_, nodes::Result<Value>> {
        Box::pin(async move {
            let engine = &self.engine;
            // The child's id derives from this step's idempotency key: after a
            // crash the same child is found again instead of started twice.
            let child_id = format!("r{}", &blake3::hash(self.idem.as_bytes()).to_hex()[..24]);
            let parent = self.idem.split('/').next().map(str::to_string);
            let existing = engine
                .store()
                .get_run(&child_id)
                .await
                .map_err(|e| nodes::Error::retryable(e.to_string()))?;
            let handle = match existing {
                Some(row) if row.status != "running" => {
                    return child_result(
                        RunResult {
                            id: row.id,
                            status: match row.status.as_str() {
                                "succeeded" => Status::Succeeded,
                                "cancelled" => Status::Cancelled,
                                _ => Status::Failed,
                            },
                            output: row.output.unwrap_or(Value::Null),
                            error: row.error,
                            respond: None,
                        },
                        &workflow,
                    );
                }
                Some(_) => engine.resume(&child_id).await,
                None => {
                    // A new child: bounded in depth (a workflow calling itself
                    // would otherwise start runs without end) and counted
                    // against the engine's run limit like any new run.
                    let run_id = parent.as_deref().unwrap_or_default();
                    let limit = engine.inner.max_subworkflow_depth;
                    let mut chain = engine
                        .lineage(run_id, &self.plan.workflow.id, limit)
                        .await
                        .map_err(|e| nodes::Error::retryable(e.to_string()))?;
                    if chain.len() > limit {
                        chain.reverse();
                        chain.push(workflow.clone());
                        return Err(nodes::Error::terminal(format!(
                            "flow.subworkflow: sub-workflow depth limit {limit} reached: {}",
                            chain.join(" → ")
                        )));
                    }
                    engine
                        .admit()
                        .map_err(|e| nodes::Error::retryable(format!("flow.subworkflow: {e}")))?;
                    let plan = engine
                        .workflow(&workflow)
                        .await
                        .map_err(|e| nodes::Error::terminal(format!("flow.subworkflow: {e}")))?;
                    // Default entry: the called workflow's only `trigger.workflow`.
                    let mut called = plan
                        .nodes
                        .iter()
                        .filter(|n| n.kind == Kind::WorkflowTrigger);
                    let trigger = match (trigger, called.next(), called.next()) {
                        (Some(t), _, _) => Some(t),
                        (None, Some(only), None) => Some(only.id.to_string()),
                        (None, _, _) => None,
                    };
                    engine
                        .start_with_id(child_id, plan, trigger.as_deref(), input, parent)
                        .await
                }
            }
            .map_err(|e| nodes::Error::terminal(format!("flow.subworkflow: {e}")))?;
            if !wait {
                return Ok(json!({"run_id": handle.id}));
            }
            child_result(handle.wait().await, &workflow)
        })
    }
}

fn child_result(r: RunResult, workflow: &str) -> nodes::Result<Value> {
    match r.status {
        Status::Succeeded => Ok(r.output),
        _ => Err(nodes::Error::terminal(format!(
            "sub-workflow `{workflow}` (run {}) {}: {}",
            r.id,
            r.status.as_str(),
            r.error
                .as_ref()
                .and_then(|e| e["message"].as_str())
                .unwrap_or("no error message")
        ))),
    }
}
