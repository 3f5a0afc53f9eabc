//! The local executor: drives the state machine with tokio, runs nodes, and
//! journals every step in SQLite before and after it runs (pure kinds, which
//! have no side effects: once, after it ran, with its input). After a crash,
//! [`Engine::resume`] replays the journal into a fresh state machine and
//! carries on: finished steps are never run again; steps that were in flight
//! run again with the same idempotency key.
//!
//! The engine's parts, one module each: [`Engine`] and its shared state here;
//! `start` (new runs), `replay` (resuming from the journal), `retry`,
//! `error_triggers`, `admission` (run limits, sub-workflow depth,
//! credentials), `plan_cache` (`Engine::workflow`), `driver` (one task per
//! run carrying out the machine's actions), `step` (one execution of a
//! step), `host` (`StepHost`: what a node may ask of the engine), `code`
//! (the script runtime and WebAssembly modules) and `documents`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use sluice_api::RunError;
use sluice_nodes as nodes;
use sluice_store::Store;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

mod admission;
mod code;
mod credentials;
mod deploy;
mod documents;
mod driver;
mod error_triggers;
mod handoff;
mod host;
mod plan_cache;
mod publish;
mod remote_step;
mod replay;
mod retention;
mod retry;
mod start;
mod step;
mod test_node;
mod waits;

use documents::Documents;
pub use documents::{DocEvent, DraftSaved};
use driver::Wake;
pub use handoff::WorkerTarget;
pub use remote_step::{RemoteStep, RemoteStepReport};
pub use sluice_api::VersionEntry;
pub use waits::{Signal, SignalKind};

use crate::events::LiveEvent;
use crate::machine::Status;
use crate::plan::{Invalid, Plan};

/// A blob the disk had no room for is the storage failing, as a failed
/// commit is: refused the same way (507), not an engine fault (500).
impl From<sluice_store::Error> for Error {
    fn from(e: sluice_store::Error) -> Error {
        match e.storage_failure() {
            Some(full) => Error::Storage {
                reason: e.to_string(),
                full,
            },
            None => Error::Store(e),
        }
    }
}

/// Errors of the executor (not of runs: a failed run is a [`RunResult`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(sluice_store::Error),
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The trigger asked for cannot start a run (or none was named and
    /// the workflow has several).
    #[error(transparent)]
    Entry(#[from] sluice_core::EntryError),
    #[error("run `{0}` not found")]
    RunNotFound(String),
    /// Deploying (or handing off) needs a shared worker and none is configured.
    #[error("{}", handoff::NO_WORKER)]
    NoWorker,
    /// The shared worker refused or could not be reached (the message says
    /// which and what to do).
    #[error("worker: {0}")]
    Worker(String),
    #[error("workflow `{0}` not found")]
    WorkflowNotFound(String),
    #[error("credential `{0}` not found")]
    CredentialNotFound(String),
    /// A credential test that cannot be made as asked (no URL to call...).
    #[error("{0}")]
    CredentialTest(String),
    #[error("workflow `{workflow}` has no node `{node}`")]
    NodeNotFound { workflow: String, node: String },
    /// The workflow exists, but no version of it is published: its
    /// triggers are off and runs by id are refused.
    #[error(
        "workflow `{0}` is not published: publish it (the editor's Publish, `sluice publish {0}`) \
         or run its draft"
    )]
    NotPublished(String),
    #[error("run `{run}`: the journal cannot be replayed: {message}")]
    Corrupt { run: String, message: String },
    /// The data dir cannot be written (disk full, read-only, I/O error):
    /// new runs are refused until it can; reads go on.
    #[error(
        "the data dir cannot be written ({reason}): new runs are refused until it can{}; runs and their history can still be read",
        if *full { " (free some disk space)" } else { "" }
    )]
    Storage { reason: String, full: bool },
    /// Too many runs in progress: try again later.
    #[error("the engine has {0} runs in progress, its limit: try again later")]
    Busy(usize),
    /// A run's input nested deeper than any value in a run may be.
    #[error(
        "the run's input is nested more than {} levels deep (the limit for values in a run)",
        sluice_model::value::MAX_DEPTH
    )]
    InputTooDeep,
    /// A `[files] allow` entry contains the compiled-code cache, so
    /// workflows could change code the engine runs.
    #[error(
        "`[files] allow` entry {} contains the compiled-code cache {}: workflows could \
         change code the engine runs; allow a folder beside it",
        .allowed.display(),
        .cache.display()
    )]
    CacheAllowed { allowed: PathBuf, cache: PathBuf },
    /// A retry of a run that has not ended.
    #[error("run `{0}` is still running")]
    StillRunning(String),
    /// A resume of a run that has ended.
    #[error("run `{run}` already {status}: nothing to resume")]
    AlreadyEnded { run: String, status: Status },
    /// A signal for a run that waits for no such decision.
    #[error("run `{run}` waits for nothing this decides: {why}")]
    NotWaiting { run: String, why: String },
    /// A signal for a run in progress that this engine does not drive.
    #[error(
        "run `{0}` is running, but not in this process (a `sluice run` drives it, or it resumes at the next start): decide it there, or once it waits here"
    )]
    DrivenElsewhere(String),
    /// A signal that names no approval, for a run that waits at several.
    #[error("run `{run}` waits for decisions at {}: say which (`node`)", .waits.join(", "))]
    AmbiguousWait { run: String, waits: Vec<String> },
    /// A workflow with an approval set to run on the shared worker.
    #[error(
        "node `{node}` is a flow.approval, which runs only on this machine, not on the shared worker"
    )]
    ApprovalOnWorker { node: String },
    /// A stored workflow's text does not parse.
    #[error("stored workflow `{id}`: {source}")]
    StoredWorkflow {
        id: String,
        #[source]
        source: sluice_model::ParseError,
    },
    /// The sandbox (script runtime, WebAssembly components) cannot start.
    #[error(transparent)]
    SandboxUnavailable(nodes::Error),
    /// The sandbox refused: the script runtime could not be prepared, or
    /// the bytes are not a component. (A `sluice_sandbox::Error`, boxed:
    /// this crate does not depend on the sandbox crate itself.)
    #[error(transparent)]
    Sandbox(Box<dyn std::error::Error + Send + Sync>),
    /// The task checking a module ended without an answer (it panicked).
    #[error(transparent)]
    ModuleCheck(tokio::task::JoinError),
    /// The task recording a new run ended without an answer (it panicked).
    #[error("starting the run: {0}")]
    StartTask(#[source] tokio::task::JoinError),
    /// A run's driver lost its step channel (an engine bug).
    #[error("step channel closed")]
    StepChannelClosed,
    /// A document operation failed (bytes that are not an update, an
    /// unknown version...).
    #[error(transparent)]
    Doc(#[from] sluice_model::doc::DocError),
    /// A save names, as the version it was made from, one that is not in
    /// the workflow's history (cut to 80 characters).
    #[error(
        "workflow `{id}`: base `{base}` is not one of its versions (send the `x-sluice-version` its GET gave)"
    )]
    UnknownBase { id: String, base: String },
    /// A document update would change its workflow's id.
    #[error("the update renames workflow `{id}` to `{renamed}`")]
    DocRenamed { id: String, renamed: String },
    /// Not a workflow id (a slug); the id is cut to 80 characters.
    #[error("`{0}` is not a workflow id (letters, digits, `-`, `_`; at most 64)")]
    NotWorkflowId(String),
    /// A document names a workflow other than its own (cut to 80 characters).
    #[error("the document of workflow `{id}` names itself `{named}`")]
    DocNamesOther { id: String, named: String },
    /// A document's node id is not a slug (cut to 80 characters).
    #[error("workflow `{workflow}`: node id `{node}` is not a slug")]
    NodeIdNotSlug { workflow: String, node: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub id: String,
    pub status: Status,
    pub output: Value,
    pub error: Option<RunError>,
    /// The first `output.respond` reached (`{status, headers, body}`), if any:
    /// it decides the HTTP response of a webhook run.
    pub respond: Option<std::sync::Arc<Value>>,
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Steps running at once across all runs.
    pub max_concurrent_steps: usize,
    /// Append `<idempotency key> <attempt>` to this file each time a step
    /// executes, to count side effects (the crash tests do; default none).
    pub exec_log: Option<PathBuf>,
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
    pub wasm_cache: Option<PathBuf>,
    /// The shared worker runs are handed to (`[worker]` in config.toml);
    /// None: a run that asks for the worker fails at once, saying so.
    pub worker: Option<WorkerTarget>,
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
            worker: None,
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
    /// Bumped by every `workflow_changed`: a plan read before a change is
    /// not cached after it (see `plan_cache.rs`).
    plans_generation: std::sync::atomic::AtomicU64,
    /// Per-workflow run limits (`settings.concurrency`), by workflow id.
    limits: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
    /// Runs being driven, so a second resume attaches instead of driving
    /// twice. Keyed by ids the engine minted, so hashed with Fx (SipHash
    /// guards maps whose keys others choose; it was 2 of a webhook run's
    /// ~9 SipHash passes).
    active: Mutex<rustc_hash::FxHashMap<String, Active>>,
    /// Workflow documents, their versions and presence.
    documents: Documents,
    /// Where runs are handed off, and the client that does it.
    worker: Option<handoff::Worker>,
    /// What the last retention pass did (`retention.rs`).
    last_prune: Mutex<Option<sluice_api::PruneReport>>,
    /// When `admit_storage` last tried a write while storage was failing.
    last_probe: Mutex<Option<Instant>>,
    /// Held by a retention pass.
    prune_lock: tokio::sync::Mutex<()>,
    /// Told when an approval with a timeout starts waiting (`waits.rs`).
    waits_changed: tokio::sync::Notify,
    /// The data dir's key for resume links, once read.
    resume_key: std::sync::OnceLock<[u8; 32]>,
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
        error: Some(RunError::of_run(
            "the engine stopped before the run finished",
        )),
        respond: None,
    }
}

/// A run being driven in this engine.
struct Active {
    done: watch::Receiver<Option<Arc<RunResult>>>,
    /// The driver's wake-up channel, once it runs. Wakes are sent with the
    /// active runs' lock held (see [`Engine::let_go_of_parked`]).
    wake: Option<mpsc::UnboundedSender<Wake>>,
    /// Which claim this is: a driver that ends removes its own entry, never
    /// the one a newer driver of the same run made meanwhile.
    claim: u64,
}

/// The right to drive a run: at most one driver per run in an engine.
struct Slot {
    engine: Engine,
    id: String,
    claim: u64,
    tx: Option<watch::Sender<Option<Arc<RunResult>>>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Never used (the run could not be started or replayed): free the id.
        if self.tx.is_some() {
            self.engine.forget(&self.id, self.claim);
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
            return Err(Error::CacheAllowed {
                allowed: allowed.clone(),
                cache: wasm_cache,
            });
        }
        let exec_log = options.exec_log.as_ref().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
                .map(Mutex::new)
        });
        let worker = match options.worker.clone() {
            Some(target) => Some(handoff::Worker::new(target)),
            None => handoff::Worker::from_settings(&store, &options.settings.worker).await,
        };
        let engine = Engine {
            inner: Arc::new(Inner {
                worker,
                store,
                permits: Arc::new(Semaphore::new(options.max_concurrent_steps.max(1))),
                exec_log,
                io: nodes::Io::new(options.settings).with_wasm_cache(wasm_cache),
                active: Mutex::default(),
                documents: Documents::new(options.version_gap_secs),
                max_active_runs: options.max_active_runs.max(1),
                max_subworkflow_depth: options.max_subworkflow_depth,
                metrics: Default::default(),
                events: tokio::sync::broadcast::channel(options.event_capacity.max(1)).0,
                changes: tokio::sync::broadcast::channel(1024).0,
                limits: Mutex::new(HashMap::new()),
                plans: Mutex::new(HashMap::new()),
                plans_generation: std::sync::atomic::AtomicU64::new(0),
                last_prune: Mutex::new(None),
                last_probe: Mutex::new(None),
                prune_lock: tokio::sync::Mutex::new(()),
                waits_changed: tokio::sync::Notify::new(),
                resume_key: std::sync::OnceLock::new(),
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
        static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let claim = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, done) = watch::channel(None);
        active.insert(
            id.to_string(),
            Active {
                done,
                wake: None,
                claim,
            },
        );
        Ok(Slot {
            engine: self.clone(),
            id: id.to_string(),
            claim,
            tx: Some(tx),
        })
    }

    /// A run's row, or `RunNotFound`.
    async fn run_row(&self, id: &str) -> Result<sluice_store::RunRow> {
        self.store()
            .get_run(id)
            .await?
            .ok_or_else(|| Error::RunNotFound(id.to_string()))
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

    /// Records how a run ended (its output stored, as a blob when large),
    /// announces it and gives its result: how every driver ends a run.
    async fn end_run(
        &self,
        run: &Arc<str>,
        workflow: &Arc<str>,
        result: RunResult,
    ) -> Result<RunResult> {
        self.end_run_at(run, workflow, result, nodes::now_us())
            .await
    }

    /// [`Engine::end_run`] of a run that ended at `at_us` (a worker run
    /// read back after the fact).
    async fn end_run_at(
        &self,
        run: &Arc<str>,
        workflow: &Arc<str>,
        result: RunResult,
        at_us: i64,
    ) -> Result<RunResult> {
        let stored = self.store().blobs().store_value(&result.output)?;
        self.store()
            .journal()
            .finish_run(
                run,
                result.status,
                Some(stored),
                result.error.clone(),
                at_us,
            )
            .await?;
        self.announce_end(run, workflow, &result);
        Ok(result)
    }

    /// [`Engine::end_run`] of a run not recorded before (see
    /// `Engine::drive_in_one_go`): the run, its journal, its logs and how it
    /// ended, in one write.
    async fn end_sealed_run(
        &self,
        run_id: &Arc<str>,
        run: &sluice_store::NewRun,
        records: Vec<sluice_store::Record>,
        logs: Vec<sluice_store::LogLine>,
        workflow: &Arc<str>,
        result: RunResult,
    ) -> Result<RunResult> {
        let output = self.store().blobs().store_value(&result.output)?;
        let end = sluice_store::RunEnd {
            status: result.status,
            output: Some(output),
            error: result.error.clone(),
            finished_at_us: nodes::now_us(),
        };
        self.store().seal_run(run, records, logs, end).await?;
        self.announce_end(run_id, workflow, &result);
        Ok(result)
    }

    /// Ends a run as failed when its driver cannot go on. Best effort: the
    /// journal itself may be what failed.
    async fn end_run_failed(
        &self,
        run: &Arc<str>,
        workflow: &Arc<str>,
        error: sluice_api::RunError,
    ) -> RunResult {
        if let Err(e) = self
            .store()
            .journal()
            .finish_run(
                run,
                Status::Failed,
                None,
                Some(error.clone()),
                nodes::now_us(),
            )
            .await
        {
            tracing_log(&format!("run {run}: could not record the failure: {e}"));
        }
        let result = RunResult {
            id: run.to_string(),
            status: Status::Failed,
            output: serde_json::Value::Null,
            error: Some(error),
            respond: None,
        };
        self.announce_end(run, workflow, &result);
        result
    }

    /// Publishes `run_finished` (never waits; nobody listening is fine).
    fn announce_end(&self, run: &Arc<str>, workflow: &Arc<str>, result: &RunResult) {
        let event = crate::events::LiveEvent {
            run: run.clone(),
            workflow: workflow.clone(),
            at_us: nodes::now_us(),
            what: crate::events::What::RunFinished {
                status: result.status,
                error: result.error.clone(),
            },
        };
        self.inner.events.send(event).ok();
    }

    /// Run `id` is no longer driven by claim `claim` (a newer claim of the
    /// same run, made after this one let go of it, stays).
    fn forget(&self, id: &str, claim: u64) {
        let mut active = self.inner.active.lock().unwrap_or_else(|e| e.into_inner());
        if active.get(id).is_some_and(|a| a.claim == claim) {
            active.remove(id);
        }
    }

    /// The driver of a run that just parked (claim `claim`) lets go of it:
    /// under the lock every wake is sent with, it takes the wakes that came
    /// while it was parking, and only when there are none is the run no
    /// longer active here. So a wake is never lost in between: it is either
    /// taken here (and the driver goes on with it) or, sent later, finds
    /// the run parked and takes it up again from its journal.
    fn let_go_of_parked(
        &self,
        id: &str,
        claim: u64,
        rx: &mut mpsc::UnboundedReceiver<Wake>,
    ) -> Vec<Wake> {
        let mut active = self.inner.active.lock().unwrap_or_else(|e| e.into_inner());
        let mut late = Vec::new();
        while let Ok(w) = rx.try_recv() {
            late.push(w);
        }
        if late.is_empty() && active.get(id).is_some_and(|a| a.claim == claim) {
            active.remove(id);
        }
        late
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Builds what the settings describe (the HTTP client with its extra
    /// root certificates) now, so a bad setting is reported at start.
    pub fn check_settings(&self) -> std::result::Result<(), nodes::io::Error> {
        self.inner.io.check()
    }

    /// The settings the engine runs with.
    pub fn settings(&self) -> &nodes::Settings {
        &self.inner.io.settings
    }

    /// Where this engine's trigger port listens: `http.request` steps may
    /// not call it (see `sluice_nodes::net`).
    pub fn set_trigger_addresses(&self, addrs: Vec<std::net::SocketAddr>) {
        self.inner.io.set_own_addresses(addrs);
    }
}

/// The compile cache shared by every data dir of this user on this machine
/// (the compiled script runtime is the same for all of them, so it is
/// compiled once): `SLUICE_WASM_CACHE`, else the platform's cache dir
/// (`~/.cache/sluice/wasm` on Linux).
fn machine_wasm_cache() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SLUICE_WASM_CACHE").filter(|d| !d.is_empty()) {
        return Some(dir.into());
    }
    directories::ProjectDirs::from("dev", "sluice", "sluice").map(|d| d.cache_dir().join("wasm"))
}

/// Whether folder `outer` contains `inner` (or is it), by their real paths
/// where they exist.
fn contains(outer: &Path, inner: &Path) -> bool {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    real(inner).starts_with(real(outer))
}

/// A fresh run id: time-ordered, unique within and across processes.
pub fn new_run_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Read once: `process::id` is a system call (glibc caches no pid), one
    // per webhook request when it was read here each time.
    static PID: std::sync::LazyLock<u64> =
        std::sync::LazyLock::new(|| u64::from(std::process::id() & 0xfffff));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = nodes::now_us();
    // Time-ordered, unique within and across processes (pid + counter):
    // "r" + 13, 5 and 4 hex digits, written by hand (`format!`'s padding
    // machinery was a run's costliest string).
    let mut id = String::with_capacity(23);
    id.push('r');
    push_hex(&mut id, t as u64, 13);
    push_hex(&mut id, *PID, 5);
    push_hex(&mut id, n & 0xffff, 4);
    id
}

/// Appends `v` in lower-case hex, zero-padded to `digits` (as
/// `{:0digits$x}` does: never cut).
fn push_hex(out: &mut String, v: u64, digits: u32) {
    let needed = (64 - v.leading_zeros()).div_ceil(4);
    for i in (0..digits.max(needed)).rev() {
        let d = ((v >> (4 * i)) & 0xf) as u8;
        out.push(char::from(if d < 10 { b'0' + d } else { b'a' + d - 10 }));
    }
}

fn tracing_log(msg: &str) {
    eprintln!("sluice: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_hex_as_format_writes_them() {
        for (v, digits) in [(0, 13), (0x1_8c2f_0a3b_4c5d, 13), (u64::MAX, 4), (0xabc, 5)] {
            let mut out = String::new();
            push_hex(&mut out, v, digits);
            assert_eq!(out, format!("{v:0w$x}", w = digits as usize));
        }
        let (a, b) = (new_run_id(), new_run_id());
        assert_eq!(a.len(), 23, "{a}");
        assert!(a.starts_with('r') && a[1..].bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        // This process's id, in the 5 digits after the time.
        let pid = format!("{:05x}", std::process::id() & 0xfffff);
        assert_eq!(&a[14..19], pid, "{a}");
        assert_eq!(&b[14..19], pid, "{b}");
    }
}
