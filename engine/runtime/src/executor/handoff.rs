//! Handing runs to the shared worker (`sluice worker`, behind a Restate
//! server): the run is recorded here first (`executor = worker`), then sent
//! to the Restate ingress with its pinned definition and input, with the run
//! id as the idempotency key (a hand-off sent twice starts one run). A
//! mirror task per run reads the worker's entries back into this engine's
//! journal (steps, logs, the finish) as they happen, so history, the run
//! view and live events show a worker run like a local one. A failure to
//! hand off is the run's failure at once, saying which and what to do:
//! never a run queued forever.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_api::{
    ProgressFrom, RUN_SERVICE, RunError, StepStatus, WORKER_PROTOCOL, WorkerAbout, WorkerEntry,
    WorkerHealth, WorkerProgress, WorkerRun,
};
use sluice_nodes as nodes;
use sluice_store::{LogLine, Record, RecordKind};
use tokio::sync::{mpsc, oneshot};

use super::driver::Wake;
use super::{Engine, Error, Outcome, RunHandle, RunResult, Slot, tracing_log};
use crate::events::{LiveEvent, What};

/// Where runs are handed off (`[worker]` in config.toml).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerTarget {
    /// The Restate ingress, e.g. `http://worker.lan:8080`.
    pub ingress: String,
    /// The Restate admin API (`http://worker.lan:9070`): cancelling a worker
    /// run needs it.
    pub admin: Option<String>,
    /// Extra headers on every request (an auth header from a credential).
    pub headers: Vec<(String, String)>,
}

/// How soon a running worker run's entries are first read (then, while
/// nothing new comes, less and less often, down to once a second).
const FIRST_POLL: Duration = Duration::from_millis(250);

/// What a run that asks for the worker says when none is configured.
pub const NO_WORKER: &str = "this run is set to run on the shared worker (`run_on: worker`), \
     but no worker is configured: set `[worker] ingress = \"http://HOST:8080\"` in config.toml \
     (see docs/worker.md), or run it here (`run_on: local`)";

/// The client side of the worker.
pub(super) struct Worker {
    target: WorkerTarget,
    /// Why no request can be made (the `[worker] auth` credential is
    /// missing or unusable): every hand-off fails with it.
    problem: Option<String>,
    client: reqwest::Client,
    /// Runs handed off from this engine and not yet finished here.
    in_flight: std::sync::atomic::AtomicU64,
}

/// Why a request to the worker failed.
pub(super) enum Fault {
    /// It will not work by trying again (no worker registered, refused).
    Fatal(String),
    /// The ingress did not answer; it may later.
    Transient(String),
    /// A request reached the ingress, and its answer was lost midway: the
    /// run may be under way there (ask again: it attaches).
    Lost(String),
}

impl Worker {
    pub(super) fn new(mut target: WorkerTarget) -> Worker {
        target.ingress = target.ingress.trim_end_matches('/').to_string();
        if let Some(a) = &mut target.admin {
            *a = a.trim_end_matches('/').to_string();
        }
        // The engine's TLS provider, before any client is built.
        nodes::http::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        Worker {
            target,
            problem: None,
            client,
            in_flight: Default::default(),
        }
    }

    /// The worker of `[worker]` in config.toml (None: no ingress set), its
    /// `auth` credential resolved from this engine's vault.
    pub(super) async fn from_settings(
        store: &sluice_store::Store,
        settings: &nodes::WorkerSettings,
    ) -> Option<Worker> {
        let ingress = settings.ingress.clone()?;
        let mut target = WorkerTarget {
            ingress,
            admin: settings.admin.clone(),
            headers: Vec::new(),
        };
        let mut problem = None;
        if let Some(name) = &settings.auth {
            let set_it = format!(
                "set it with `sluice credentials set {name} --kind bearer` (or basic, header), \
                 then restart the engine"
            );
            match store.get_credential(name).await {
                Ok(Some((kind, value))) => match nodes::http::credential_header(&kind, &value) {
                    Some((n, v)) => target.headers.push((
                        n.as_str().to_string(),
                        v.to_str().unwrap_or_default().to_string(),
                    )),
                    None => {
                        problem = Some(format!(
                            "`[worker] auth` credential `{name}` is a `{kind}` credential (or \
                             holds characters a header cannot carry): it must be bearer, basic or header"
                        ))
                    }
                },
                Ok(None) => {
                    problem = Some(format!(
                        "`[worker] auth` names credential `{name}`, which does not exist: {set_it}"
                    ))
                }
                Err(e) => {
                    problem = Some(format!(
                        "`[worker] auth` credential `{name}` cannot be read: {e}"
                    ))
                }
            }
        }
        let mut worker = Worker::new(target);
        worker.problem = problem;
        Some(worker)
    }

    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let mut rb = self.client.request(method, url);
        for (k, v) in &self.target.headers {
            rb = rb.header(k, v);
        }
        rb
    }

    /// Calls `path` (`Service/key/handler`) on the ingress with `body`; the
    /// answer as `T`. `what` names what was refused, in the error.
    pub(super) async fn call<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
        what: &str,
    ) -> Result<T, Fault> {
        self.usable()?;
        let url = format!("{}/{path}", self.target.ingress);
        let mut req = self.request(reqwest::Method::POST, url);
        // A handler without input takes no body at all.
        let body = serde_json::to_value(body).unwrap_or(Value::Null);
        if !body.is_null() {
            req = req.json(&body);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(self.refused(status, &text, what));
        }
        serde_json::from_str(&text)
            .map_err(|e| Fault::Fatal(format!("the worker's answer to {path} does not read: {e}")))
    }

    fn usable(&self) -> Result<(), Fault> {
        match &self.problem {
            Some(p) => Err(Fault::Fatal(p.clone())),
            None => Ok(()),
        }
    }

    fn unreachable(&self, e: &reqwest::Error) -> Fault {
        Fault::Transient(format!(
            "the Restate ingress at {} did not answer ({}): start restate-server there, \
             or fix `[worker] ingress` in config.toml",
            self.target.ingress,
            error_chain(e)
        ))
    }

    /// Starts the run and waits for its answer (every entry, when they fit
    /// in a page). Idempotent: the run id is the Restate workflow's key, so
    /// a second call for it finds it started (409) and attaches instead
    /// (Restate refuses an `Idempotency-Key` on workflow handlers for that
    /// reason).
    async fn call_run(&self, run: &WorkerRun) -> Result<Option<WorkerProgress>, Fault> {
        self.usable()?;
        let url = format!("{}/{RUN_SERVICE}/{}/run", self.target.ingress, run.run_id);
        let lost = |e: &reqwest::Error| {
            Fault::Lost(format!(
                "the Restate ingress at {} dropped the run's answer ({})",
                self.target.ingress,
                error_chain(e)
            ))
        };
        let resp = match self
            .request(reqwest::Method::POST, url)
            .json(run)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(self.unreachable(&e)),
            Err(e) => return Err(lost(&e)),
        };
        let status = resp.status();
        let body = resp.text().await.map_err(|e| lost(&e))?;
        if status.is_success() {
            return Ok(serde_json::from_str(&body).ok());
        }
        if status == reqwest::StatusCode::CONFLICT {
            return self.attach(&run.run_id).await;
        }
        Err(self.refused(status, &body, "the run"))
    }

    fn refused(&self, status: reqwest::StatusCode, body: &str, what: &str) -> Fault {
        let message = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| body.chars().take(300).collect());
        if status == reqwest::StatusCode::NOT_FOUND {
            Fault::Fatal(format!(
                "no Sluice worker is registered with the Restate server at {} ({message}): \
                 start `sluice worker --restate-admin http://HOST:9070` next to it (docs/worker.md)",
                self.target.ingress
            ))
        } else if status.is_server_error() && status != reqwest::StatusCode::INTERNAL_SERVER_ERROR {
            Fault::Transient(format!(
                "the Restate ingress at {} answered HTTP {status}: {message}",
                self.target.ingress
            ))
        } else {
            Fault::Fatal(format!(
                "the Restate ingress at {} refused {what} (HTTP {status}): {message}",
                self.target.ingress
            ))
        }
    }

    /// The run's entries from `from` on.
    async fn progress(&self, run_id: &str, from: u64) -> Result<WorkerProgress, Fault> {
        self.call(
            &format!("{RUN_SERVICE}/{run_id}/progress"),
            &ProgressFrom { from },
            "the run",
        )
        .await
    }

    /// Resolves when the run's invocation has ended (with its error, if the
    /// worker failed it before recording a finish): its answer, every entry
    /// when they fit in one page (None: an answer that does not read).
    async fn attach(&self, run_id: &str) -> Result<Option<WorkerProgress>, Fault> {
        let url = format!(
            "{}/restate/workflow/{RUN_SERVICE}/{run_id}/attach",
            self.target.ingress
        );
        let resp = self
            .request(reqwest::Method::GET, url)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if status.is_success() {
            return Ok(serde_json::from_str(&body).ok());
        }
        Err(self.refused(status, &body, "the run"))
    }

    /// The worker's version, or why it cannot say.
    async fn about(&self) -> Result<WorkerAbout, Fault> {
        self.call(&format!("{RUN_SERVICE}/-/about"), &Value::Null, "the run")
            .await
    }

    /// Asks Restate to cancel the invocation (needs `[worker] admin`).
    async fn cancel(&self, invocation: &str) -> Result<(), String> {
        let Some(admin) = &self.target.admin else {
            return Err(
                "cancelling a run on the worker needs the Restate admin API: set \
                 `[worker] admin = \"http://HOST:9070\"` in config.toml"
                    .into(),
            );
        };
        let url = format!("{admin}/invocations/{invocation}/cancel");
        let resp = self
            .request(reqwest::Method::PATCH, url)
            .send()
            .await
            .map_err(|e| format!("the Restate admin API at {admin}: {}", error_chain(&e)))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!(
                "the Restate admin API at {admin} refused to cancel {invocation}: HTTP {}",
                resp.status()
            ))
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = inner.source();
    }
    s
}

type Attach = Pin<Box<dyn Future<Output = Result<Option<WorkerProgress>, Fault>> + Send>>;

impl Engine {
    /// Mirrors a run handed to the worker: sends it (again: idempotent) and
    /// reads its entries back from `next` on until it finishes. `fresh`: just
    /// recorded, so a worker that cannot be reached fails it at once (a
    /// resumed run may already run there: it is waited for instead).
    pub(super) fn spawn_mirror(
        &self,
        mut slot: Slot,
        run: WorkerRun,
        next: u64,
        fresh: bool,
    ) -> RunHandle {
        let id = slot.id.clone();
        let claim = slot.claim;
        let (own_tx, own_rx) = oneshot::channel();
        let Some(tx) = slot.tx.take() else {
            return RunHandle {
                id,
                done: Outcome::Own(own_rx),
            };
        };
        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        if let Some(a) = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&id)
        {
            a.wake = Some(wake_tx);
        }
        let engine = self.clone();
        let run_id = id.clone();
        tokio::spawn(async move {
            let workflow = run.workflow.clone();
            let mirror = Mirror {
                engine: engine.clone(),
                run_id: Arc::from(run.run_id.as_str()),
                workflow: Arc::from(run.workflow.as_str()),
                next,
                last_at_us: run.created_at_us,
            };
            let counter = engine.inner.worker.as_ref().map(|w| &w.in_flight);
            if let Some(c) = counter {
                c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let result = mirror.run(run, fresh, wake_rx).await;
            if let Some(c) = counter {
                c.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            engine
                .inner
                .metrics
                .run_finished(&workflow, result.status.as_str());
            engine.forget(&run_id, claim);
            if tx.receiver_count() > 0 {
                tx.send_replace(Some(Arc::new(result.clone())));
            }
            own_tx.send(result).ok();
            drop(slot);
        });
        RunHandle {
            id,
            done: Outcome::Own(own_rx),
        }
    }

    /// Where hand-off stands (`GET /api/v1/worker`): configured, reachable,
    /// registered, its version, runs in flight, and what is wrong.
    pub async fn worker_health(&self) -> WorkerHealth {
        let Some(worker) = self.inner.worker.as_ref() else {
            return WorkerHealth {
                ingress: None,
                reachable: false,
                registered: false,
                version: None,
                protocol: None,
                in_flight: 0,
                problem: Some(NO_WORKER.to_string()),
            };
        };
        let in_flight = worker.in_flight.load(std::sync::atomic::Ordering::Relaxed);
        let mut health = WorkerHealth {
            ingress: Some(worker.target.ingress.clone()),
            reachable: false,
            registered: false,
            version: None,
            protocol: None,
            in_flight,
            problem: None,
        };
        match worker.about().await {
            Ok(about) => {
                health.reachable = true;
                health.registered = true;
                if about.protocol != WORKER_PROTOCOL {
                    health.problem = Some(format!(
                        "version skew: this engine speaks worker protocol {WORKER_PROTOCOL} \
                         (Sluice {}), the worker {} (Sluice {}): run the same Sluice version on both",
                        env!("CARGO_PKG_VERSION"),
                        about.protocol,
                        about.version
                    ));
                }
                health.version = Some(about.version);
                health.protocol = Some(about.protocol);
            }
            Err(Fault::Transient(m) | Fault::Lost(m)) => health.problem = Some(m),
            Err(Fault::Fatal(m)) => {
                health.reachable = true;
                health.problem = Some(m);
            }
        }
        health
    }

    /// The hand-off of a recorded run.
    pub(super) fn worker_run(
        &self,
        run_id: &str,
        plan: &crate::plan::Plan,
        trigger: &str,
        input: Value,
        created_at_us: i64,
    ) -> WorkerRun {
        WorkerRun {
            protocol: WORKER_PROTOCOL,
            engine_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: run_id.to_string(),
            workflow: plan.workflow.id.clone(),
            definition: plan.definition.shared_text().to_string(),
            trigger: trigger.to_string(),
            input,
            created_at_us,
            draft: plan.draft,
            reuse: Vec::new(),
        }
    }
}

struct Mirror {
    engine: Engine,
    run_id: Arc<str>,
    workflow: Arc<str>,
    /// The index of the next entry to read (also its journal seq).
    next: u64,
    /// The latest time the worker stamped on what it recorded (from the
    /// run's creation on): when a run read back after the fact ended.
    last_at_us: i64,
}

impl Mirror {
    async fn run(
        mut self,
        run: WorkerRun,
        fresh: bool,
        mut wake: mpsc::UnboundedReceiver<Wake>,
    ) -> RunResult {
        let engine = self.engine.clone();
        let Some(worker) = engine.inner.worker.as_ref() else {
            return self.fail(NO_WORKER.to_string()).await;
        };
        if fresh {
            self.emit(
                What::RunStarted {
                    trigger: run.trigger.clone(),
                    draft: run.draft,
                    executor: sluice_api::RunOn::Worker,
                },
                nodes::now_us(),
            );
        }
        // A run the worker started for a deployment is only read back:
        // sending it would start it again once Restate has forgotten it.
        let adopted = sluice_api::deployed_run(&run.run_id);
        let run = Arc::new(run);
        let mut invocation = String::new();
        // One request starts the run and waits for its answer; asked again
        // (after an answer was lost, or an engine restart) it attaches.
        let call = |engine: Engine, run: Arc<WorkerRun>| -> Attach {
            Box::pin(async move {
                match engine.inner.worker.as_ref() {
                    Some(w) if sluice_api::deployed_run(&run.run_id) => w.attach(&run.run_id).await,
                    Some(w) => w.call_run(&run).await,
                    None => Err(Fault::Fatal(NO_WORKER.into())),
                }
            })
        };
        let mut attach: Attach = call(self.engine.clone(), run.clone());
        // Until the ingress took it, a fresh run that cannot be handed off
        // fails at once, saying why.
        let mut taken = adopted || !fresh;
        let mut ended: Option<String> = None;
        // A run shorter than the first poll is read back from its answer
        // alone: no request per poll to the worker while it runs.
        let mut poll = FIRST_POLL;
        loop {
            let mut woke_by_attach = false;
            let mut answer = None;
            tokio::select! {
                r = &mut attach => {
                    attach = Box::pin(std::future::pending());
                    woke_by_attach = true;
                    match r {
                        Ok(page) => {
                            ended = Some(String::new());
                            answer = page;
                        }
                        Err(Fault::Fatal(m) | Fault::Transient(m)) if !taken => {
                            return self.fail(m).await;
                        }
                        Err(Fault::Fatal(m)) => ended = Some(m),
                        Err(Fault::Transient(m) | Fault::Lost(m)) => {
                            taken = true;
                            tracing_log(&format!("run {}: {m}; asking again", self.run_id));
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            attach = call(self.engine.clone(), run.clone());
                        }
                    }
                }
                _ = tokio::time::sleep(poll) => {}
                w = wake.recv(), if !wake.is_closed() => {
                    if let Some(Wake::Signal(_, reply)) = w {
                        // Nothing parks a run on the worker: refused at
                        // once (dropped, the caller would try again for
                        // seconds, then call the engine busy).
                        reply
                            .send(Err(Error::NotWaiting {
                                run: self.run_id.to_string(),
                                why: "it runs on the shared worker, where nothing waits for a decision"
                                    .into(),
                            }))
                            .ok();
                    } else if let Some(Wake::Cancel) = w {
                        if invocation.is_empty()
                            && let Ok(page) = worker.progress(&self.run_id, self.next).await
                        {
                            invocation = page.invocation.unwrap_or_default();
                        }
                        let cancelled = if invocation.is_empty() {
                            Err("its Restate invocation is not known yet: cancel it again in a moment".to_string())
                        } else {
                            worker.cancel(&invocation).await
                        };
                        if let Err(m) = cancelled {
                            tracing_log(&format!("run {}: {m}", self.run_id));
                        }
                    }
                }
            }
            if let Some(page) = answer
                && page.from <= self.next
                && page.from + page.entries.len() as u64 == page.total
            {
                let seen = usize::try_from(self.next - page.from).unwrap_or(usize::MAX);
                for entry in page.entries.into_iter().skip(seen) {
                    match self.apply(entry).await {
                        Ok(Some(result)) => return result,
                        Ok(None) => {}
                        Err(e) => return self.fail(format!("engine error: {e}")).await,
                    }
                }
            }
            match worker.progress(&self.run_id, self.next).await {
                Ok(page) => {
                    if let Some(i) = page.invocation.filter(|_| invocation.is_empty()) {
                        invocation = i;
                    }
                    let got = !page.entries.is_empty();
                    for entry in page.entries {
                        match self.apply(entry).await {
                            Ok(Some(result)) => return result,
                            Ok(None) => {}
                            Err(e) => return self.fail(format!("engine error: {e}")).await,
                        }
                    }
                    poll = if got {
                        FIRST_POLL
                    } else {
                        (poll * 2).min(Duration::from_secs(1))
                    };
                    if got && woke_by_attach {
                        // More may follow in the next page.
                        continue;
                    }
                    if let Some(m) = &ended
                        && !got
                    {
                        // The invocation is over and left no finish: the worker
                        // failed it before it could record one.
                        let m = if adopted && self.next == 0 && page.total == 0 {
                            "the worker no longer holds this run (Restate kept it for less \
                             time than this engine was away)"
                                .into()
                        } else if m.is_empty() {
                            "the worker ended the run without recording how it finished".into()
                        } else {
                            format!("the worker failed the run: {m}")
                        };
                        return self.fail(m).await;
                    }
                }
                Err(Fault::Fatal(m)) if ended.is_some() => return self.fail(m).await,
                Err(Fault::Fatal(m) | Fault::Transient(m) | Fault::Lost(m)) => {
                    tracing_log(&format!("run {}: {m}", self.run_id));
                }
            }
        }
    }

    fn emit(&self, what: What, at_us: i64) {
        let event = LiveEvent {
            run: self.run_id.clone(),
            workflow: self.workflow.clone(),
            at_us,
            what,
        };
        self.engine.inner.events.send(event).ok();
    }

    /// Journals one entry; the run's result when it is the finish.
    async fn apply(&mut self, entry: WorkerEntry) -> super::Result<Option<RunResult>> {
        let seq = self.next;
        self.next += 1;
        let blobs = self.engine.store().blobs().clone();
        let now = nodes::now_us();
        let record = |kind, node: &str, lineage: &str, activation: &str, attempt, at_us| Record {
            run_id: self.run_id.clone(),
            seq,
            kind,
            node: Arc::from(node),
            lineage: lineage.to_string(),
            activation: activation.to_string(),
            attempt,
            at_us,
            data: None,
            input: None,
            error: None,
            duration_us: None,
        };
        let listening = self.engine.inner.events.receiver_count() > 0;
        match entry {
            WorkerEntry::Started {
                node,
                lineage,
                activation,
                attempt,
                input,
            } => {
                let mut rec = record(
                    RecordKind::Started,
                    &node,
                    &lineage,
                    &activation,
                    attempt,
                    now,
                );
                rec.data = Some(blobs.store_value(&input)?);
                self.engine.store().journal().append(rec).await?;
                if listening {
                    self.emit(
                        What::StepStarted {
                            node: Arc::from(node.as_str()),
                            lineage,
                            activation,
                            attempt,
                        },
                        now,
                    );
                }
            }
            WorkerEntry::Succeeded {
                node,
                lineage,
                activation,
                attempt,
                input,
                outputs,
                at_us,
                duration_us,
            } => {
                self.last_at_us = self.last_at_us.max(at_us.unwrap_or(0));
                let at_us = at_us.unwrap_or(now);
                let mut rec = record(
                    RecordKind::Succeeded,
                    &node,
                    &lineage,
                    &activation,
                    attempt,
                    at_us,
                );
                rec.data = Some(blobs.store_value(&outputs)?);
                rec.input = input.map(|v| blobs.store_value(&v)).transpose()?;
                rec.duration_us = Some(duration_us);
                self.engine.store().journal().append(rec).await?;
                if listening {
                    self.emit(
                        What::StepFinished {
                            node: Arc::from(node.as_str()),
                            lineage,
                            activation,
                            attempt,
                            status: StepStatus::Succeeded,
                            duration_us,
                            error: None,
                        },
                        at_us,
                    );
                }
            }
            WorkerEntry::Failed {
                node,
                lineage,
                activation,
                attempt,
                input,
                message,
                retryable,
                at_us,
                duration_us,
            } => {
                self.last_at_us = self.last_at_us.max(at_us.unwrap_or(0));
                let at_us = at_us.unwrap_or(now);
                let mut rec = record(
                    RecordKind::Failed,
                    &node,
                    &lineage,
                    &activation,
                    attempt,
                    at_us,
                );
                rec.input = input.map(|v| blobs.store_value(&v)).transpose()?;
                rec.duration_us = Some(duration_us);
                rec.error = Some(RunError {
                    node: None,
                    message: message.clone(),
                    retryable: Some(retryable),
                    attempts: None,
                });
                self.engine.store().journal().append(rec).await?;
                if listening {
                    self.emit(
                        What::StepFinished {
                            node: Arc::from(node.as_str()),
                            lineage,
                            activation,
                            attempt,
                            status: StepStatus::Failed,
                            duration_us,
                            error: Some(message),
                        },
                        at_us,
                    );
                }
            }
            WorkerEntry::Skipped { node, lineage } => {
                let rec = record(RecordKind::Skipped, &node, &lineage, "", 0, now);
                self.engine.store().journal().append(rec).await?;
                if listening {
                    self.emit(
                        What::StepSkipped {
                            node: Arc::from(node.as_str()),
                            lineage,
                        },
                        now,
                    );
                }
            }
            WorkerEntry::Log {
                node,
                lineage,
                level,
                message,
                at_us,
            } => {
                let at_us = at_us.unwrap_or(now);
                if listening {
                    self.emit(
                        What::Log {
                            node: Arc::from(node.as_str()),
                            lineage: lineage.clone(),
                            level: level.clone(),
                            message: message.clone(),
                        },
                        at_us,
                    );
                }
                let line = LogLine {
                    run_id: self.run_id.clone(),
                    node,
                    lineage,
                    level,
                    message,
                    at_us,
                };
                self.engine.store().journal().log(line).await?;
            }
            WorkerEntry::Finished {
                status,
                output,
                error,
                respond,
            } => {
                let result = RunResult {
                    id: self.run_id.to_string(),
                    status,
                    output,
                    error,
                    respond: respond.map(Arc::new),
                };
                // Read back live, it ends now; adopted after the fact (a
                // deployment's run), at the latest time the worker stamped.
                let at_us = if sluice_api::deployed_run(&self.run_id) {
                    self.last_at_us
                } else {
                    now
                };
                let result = self
                    .engine
                    .end_run_at(&self.run_id, &self.workflow, result, at_us)
                    .await?;
                return Ok(Some(result));
            }
        }
        Ok(None)
    }

    /// Ends the run here as failed with `message` (the worker never ran it,
    /// or failed it without a finish).
    async fn fail(&self, message: String) -> RunResult {
        let error = RunError::of_run(format!("worker: {message}"));
        self.engine
            .end_run_failed(&self.run_id, &self.workflow, error)
            .await
    }
}
