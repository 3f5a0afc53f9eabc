//! The run driver: one task per run carrying out the state machine's
//! actions (journal, start steps, timers, abort, finish) and feeding the
//! machine what happened, in order. Pure kinds run on the driver itself;
//! the others on a task each under the engine's step permits.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use serde_json::Value;
use sluice_api::{RunError, StepStatus};
use sluice_nodes as nodes;
use sluice_store::{Committed, LogLine, Record, RecordKind, Stored, ValueRef};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::replay::Replay;
use super::step::Prepared;
use super::{Engine, Error, Outcome, Result, RunHandle, RunResult, Slot};
use crate::events::{LiveEvent, What};
use crate::machine::{Action, Activation, Event, Hist, Msg, Run, Status, StepError, StepKey};
use crate::plan::Plan;

impl Engine {
    /// Hands a recorded (or replayed) run to a driver task of its own,
    /// queued behind its workflow's concurrency limit if it has one.
    pub(super) fn spawn_driver(
        &self,
        slot: Slot,
        run: Run,
        actions: Vec<Action>,
        replay: Replay,
        info: RunInfo,
        fires_errors: bool,
    ) -> RunHandle {
        let (handle, driven) = self.driver(slot, run, actions, replay, info, fires_errors, None);
        if let Some(driven) = driven {
            tokio::spawn(driven);
        }
        handle
    }

    /// Drives a run of a plan that runs in one go (`Plan::in_one_go`) on
    /// the caller's task, from start to end, and records it in one write
    /// when it ends (`new_run` was not recorded before). If the caller goes
    /// away midway, nothing of the run was written and nobody was told of
    /// it: it is dropped whole.
    pub(super) async fn drive_in_one_go(
        &self,
        slot: Slot,
        run: Run,
        actions: Vec<Action>,
        info: RunInfo,
        fires_errors: bool,
        new_run: sluice_store::NewRun,
    ) -> RunHandle {
        let sealed = Sealed {
            run: new_run,
            records: Vec::new(),
            logs: Vec::new(),
        };
        let (handle, driven) = self.driver(
            slot,
            run,
            actions,
            Replay::default(),
            info,
            fires_errors,
            Some(sealed),
        );
        if let Some(driven) = driven {
            driven.await;
        }
        handle
    }

    /// A run's driver and what carries it out to the end (None: the slot
    /// was used already, nothing to drive).
    #[allow(clippy::too_many_arguments)]
    fn driver(
        &self,
        mut slot: Slot,
        run: Run,
        actions: Vec<Action>,
        replay: Replay,
        info: RunInfo,
        fires_errors: bool,
        sealed: Option<Sealed>,
    ) -> (
        RunHandle,
        Option<impl std::future::Future<Output = ()> + Send + 'static>,
    ) {
        let id = slot.id.clone();
        let workflow = info.workflow.to_string();
        let (own_tx, own_rx) = oneshot::channel();
        let handle = RunHandle {
            id: id.clone(),
            done: Outcome::Own(own_rx),
        };
        let Some(tx) = slot.tx.take() else {
            // A slot is used once; an empty one has nothing to drive.
            return (handle, None);
        };
        let mut driver = Driver::new(self.clone(), Arc::from(id.as_str()), run, replay, info);
        driver.sealed = sealed;
        driver.claim = slot.claim;
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
        let limit = self.workflow_limit(&driver.plan);
        let driven = async move {
            // Whatever happens (a caller that stops polling a run driven on
            // its task included), the run stops being active here.
            let active = Forget {
                engine: engine.clone(),
                id,
                claim: slot.claim,
            };
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
            // Boxed: the driver's future is large (kilobytes: every await of
            // a run's life is in it), and a future is moved into each one
            // that awaits it; unboxed, it made the futures above it (the
            // run's task; for a run in one go, the webhook handler's, which
            // axum boxes again) 18 KB, copied level by level on every request.
            let result = Box::pin(driver.drive(actions)).await;
            drop(permit);
            if result.status.is_finished() {
                engine
                    .inner
                    .metrics
                    .run_finished(&workflow, result.status.as_str());
            }
            // The finish is durable now: a later resume sees it and refuses.
            drop(active);
            if fires_errors && result.status == Status::Failed {
                // Started (durably) before the result is reported: a process that
                // exits right after resumes them at its next start. On a task of
                // their own, so a caller that goes away cannot stop them halfway.
                let (engine, workflow, result) = (engine.clone(), workflow, result.clone());
                let fired =
                    tokio::spawn(
                        async move { engine.fire_error_triggers(&workflow, &result).await },
                    );
                fired.await.ok();
            }
            if tx.receiver_count() > 0 {
                tx.send_replace(Some(Arc::new(result.clone())));
            }
            // The caller may not be waiting.
            own_tx.send(result).ok();
            drop(slot);
        };
        (handle, Some(driven))
    }
}

/// Removes a run from the engine's active runs when dropped.
struct Forget {
    engine: Engine,
    id: String,
    claim: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.engine.forget(&self.id, self.claim);
    }
}

/// A run not recorded yet (see [`Engine::drive_in_one_go`]): its creation,
/// journal and logs, written in one go when it ends.
pub(super) struct Sealed {
    run: sluice_store::NewRun,
    records: Vec<Record>,
    logs: Vec<LogLine>,
}

/// What a driver knows of its run: its workflow, its trigger, and the
/// template context `run` (see [`sluice_model::preview::run_info`], which
/// the editor's preview uses too).
///
/// A plan with approvals outside splits adds `run.resume.<node id>`: each
/// one's resume link, known from the start so that an earlier step (an
/// email) can send it.
pub(super) fn run_info(
    engine: &Engine,
    id: &str,
    plan: &Plan,
    trigger: &str,
    started_at_us: i64,
) -> RunInfo {
    let info = RunInfo {
        context: Arc::new(Value::Null),
        workflow: Arc::from(plan.workflow.id.as_str()),
        trigger: trigger.to_string(),
    };
    if !plan.uses_run {
        // No template of this plan can read `run` (see `Plan::uses_run`).
        return info;
    }
    let mut context =
        sluice_model::preview::run_info(id, &plan.workflow.id, trigger, started_at_us);
    let mut resume = serde_json::Map::new();
    for node in &plan.nodes {
        if node.kind == sluice_model::kinds::Kind::Approval && node.scope.is_empty() {
            match engine.resume_url(id, &node.id, "") {
                Ok(url) => {
                    resume.insert(node.id.to_string(), Value::String(url));
                }
                Err(e) => super::tracing_log(&format!("run {id}: no resume link: {e}")),
            }
        }
    }
    if !resume.is_empty()
        && let Value::Object(m) = &mut context
    {
        m.insert("resume".into(), Value::Object(resume));
    }
    RunInfo {
        context: Arc::new(context),
        ..info
    }
}

/// What a driver knows of its run from the start.
pub(super) struct RunInfo {
    /// The template context `run` (null when no template can read it).
    context: Arc<Value>,
    workflow: Arc<str>,
    /// The trigger node's id.
    trigger: String,
}

/// The optional parts of a journal record.
#[derive(Default)]
struct Extra<'a> {
    /// The step input, for steps journaled only after they ran.
    input: Option<&'a Value>,
    error: Option<RunError>,
    duration_us: Option<i64>,
    /// `data` already serialized (by the step's own task, off the driver),
    /// or references to values journaled before.
    stored: Option<Stored>,
    /// `input` as a reference to a value journaled before.
    input_ref: Option<ValueRef>,
    /// Return what resolves once the record is committed (not sealed runs).
    committed: bool,
}

/// Values of a run journaled so far that a later step may get again (the
/// run's input, steps' outputs), most recent last: a step whose input, or
/// output, is one of them (the same message, shared) journals a reference
/// instead of a copy. Bounded: older ones are forgotten.
///
/// Held weakly: a message the run no longer needs is freed as before, and
/// the last holder of one can still take it without a copy (an exit taking
/// a 50 MB message). A weak reference keeps the allocation's address taken,
/// so a new message never has the address of one remembered here.
#[derive(Default)]
struct Journaled {
    values: VecDeque<(std::sync::Weak<Value>, ValueRef)>,
}

impl Journaled {
    const KEEP: usize = 64;

    fn remember(&mut self, msg: &Msg, at: ValueRef) {
        if self.find(msg).is_some() {
            return;
        }
        if self.values.len() >= Self::KEEP {
            self.values.pop_front();
        }
        self.values.push_back((Arc::downgrade(msg), at));
    }

    /// Where `v` was journaled, if it is one of the values held (the same
    /// allocation: equal copies are not looked for).
    fn find(&self, v: &Value) -> Option<&ValueRef> {
        self.values
            .iter()
            .find(|(m, _)| std::ptr::eq(m.as_ptr(), v))
            .map(|(_, at)| at)
    }

    /// Every output as a reference, when each of them is one.
    fn outputs(&self, outputs: &[(String, Msg)]) -> Option<Vec<(String, ValueRef)>> {
        if outputs.is_empty() {
            return None;
        }
        outputs
            .iter()
            .map(|(port, m)| self.find(m).map(|at| (port.clone(), at.clone())))
            .collect()
    }
}

/// What a finished step task reports back.
pub(super) struct Done {
    pub(super) key: StepKey,
    pub(super) attempt: u32,
    pub(super) started: Instant,
    pub(super) result: Result<Vec<(String, Msg)>, StepError>,
    pub(super) logs: Vec<(String, String)>,
    /// Steps journaled only after they ran (pure kinds): their input.
    pub(super) input: Option<Msg>,
    /// The outputs, serialized by the step's task (see [`Extra::stored`]).
    pub(super) stored: Option<Stored>,
}

pub(super) enum Wake {
    Step(Done),
    RetryDue(StepKey),
    Cancel,
    /// A decision (or the timeout) for a waiting `flow.approval`.
    Signal(super::waits::Signal, super::waits::Reply),
}

/// A `flow.approval` step waiting for its decision (see [`Driver::park_step`]).
struct ParkedStep {
    attempt: u32,
    input: Msg,
    on_timeout: sluice_model::kinds::OnTimeout,
    /// Its `timeout_ms`, for the timeout's error.
    deadline_us: Option<i64>,
    since_us: i64,
}

pub(super) struct Driver {
    pub(super) engine: Engine,
    pub(super) run_id: Arc<str>,
    run: Run,
    pub(super) plan: Arc<Plan>,
    seq: u64,
    // Fx: keyed by the run's own steps (node indices, split indices), which
    // nobody outside picks.
    first_started: FxHashMap<StepKey, i64>,
    tasks: JoinSet<()>,
    handles: FxHashMap<StepKey, tokio::task::AbortHandle>,
    tx: mpsc::UnboundedSender<Wake>,
    rx: mpsc::UnboundedReceiver<Wake>,
    /// Steps that finished on the driver itself, not yet applied.
    ready: VecDeque<Wake>,
    pub(super) run_info: Arc<Value>,
    workflow: Arc<str>,
    /// The run's records and logs, kept until it ends (it was not recorded
    /// yet: see [`Engine::drive_in_one_go`]); None once recorded.
    sealed: Option<Sealed>,
    journaled: Journaled,
    /// Approval steps waiting for a decision.
    parked: FxHashMap<StepKey, ParkedStep>,
    /// Retries whose timer is running.
    retries_pending: usize,
    /// The claim this driver drives the run under (see `Engine::claim`).
    claim: u64,
}

impl Driver {
    fn new(engine: Engine, run_id: Arc<str>, run: Run, replay: Replay, info: RunInfo) -> Driver {
        let plan = run.plan().clone();
        let (tx, rx) = mpsc::unbounded_channel();
        let RunInfo {
            context: run_info,
            workflow,
            trigger,
        } = info;
        if let Some(first) = replay.first_wake {
            // Handled before the driver can park again (see `drive`).
            tx.send(first).ok();
        }
        let driver = Driver {
            engine,
            run_id,
            run,
            plan,
            seq: replay.next_seq,
            first_started: replay.first_started,
            tasks: JoinSet::new(),
            handles: FxHashMap::default(),
            tx,
            rx,
            ready: Default::default(),
            run_info,
            workflow,
            sealed: None,
            journaled: Journaled::default(),
            parked: FxHashMap::default(),
            retries_pending: 0,
            claim: 0,
        };
        let draft = driver.plan.draft;
        driver.emit(
            What::RunStarted {
                trigger,
                draft,
                executor: sluice_api::RunOn::Local,
            },
            nodes::now_us(),
        );
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
    ) -> Result<Option<Committed>> {
        let Extra {
            input,
            error,
            duration_us,
            stored,
            input_ref,
            committed,
        } = extra;
        let (node, lineage, activation) = self.key_strings(key);
        let blobs = self.engine.store().blobs();
        let data = match stored {
            Some(s) => Some(s),
            None => data.map(|v| blobs.store_value(v)).transpose()?,
        };
        let input = match input_ref {
            Some(at) => Some(Stored::Ref(at)),
            None => input.map(|v| blobs.store_value(v)).transpose()?,
        };
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
                        StepStatus::Succeeded
                    } else {
                        StepStatus::Failed
                    },
                    duration_us: duration_us.unwrap_or(0),
                    error: error.as_ref().map(|e| e.message.clone()),
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
        match &mut self.sealed {
            Some(sealed) => sealed.records.push(rec),
            None if committed => {
                return Ok(Some(
                    self.engine.store().journal().append_committed(rec).await?,
                ));
            }
            None => self.engine.store().journal().append(rec).await?,
        }
        Ok(None)
    }

    /// Records the run and what it kept so far (see [`Sealed`]) and goes on
    /// journaling as other runs do: before a step that has effects or waits.
    async fn unseal(&mut self) -> Result<()> {
        let Some(sealed) = self.sealed.take() else {
            return Ok(());
        };
        let store = self.engine.store();
        store.queue_run(&sealed.run).await?;
        for rec in sealed.records {
            store.journal().append(rec).await?;
        }
        for line in sealed.logs {
            store.journal().log(line).await?;
        }
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
        // Anything else queued (a signal that took up a parked run) is
        // handled once the actions are carried out.
        match self.rx.try_recv() {
            Ok(Wake::Cancel) => actions = self.run.apply(Event::Cancel),
            Ok(other) => self.ready.push_back(other),
            Err(_) => {}
        }
        loop {
            match self.carry_out(std::mem::take(&mut actions)).await {
                Ok(Some(result)) => return result,
                Ok(None) => {}
                Err(e) => return Box::pin(self.internal_failure(e)).await,
            }
            let wake = match self.ready.pop_front() {
                Some(w) => Some(w),
                None if self.only_waits_for_decisions() => match self.rx.try_recv() {
                    Ok(w) => Some(w),
                    // Nothing can happen but a decision: the run parks.
                    Err(mpsc::error::TryRecvError::Empty) => {
                        match Box::pin(self.park_run()).await {
                            Ok(Some(result)) => return result,
                            // A wake came while it parked: it goes on.
                            Ok(None) => continue,
                            Err(e) => return Box::pin(self.internal_failure(e)).await,
                        }
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                },
                None => self.rx.recv().await,
            };
            let Some(wake) = wake else {
                return self.internal_failure(Error::StepChannelClosed).await;
            };
            let event = match wake {
                Wake::RetryDue(key) => {
                    self.retries_pending = self.retries_pending.saturating_sub(1);
                    Event::RetryDue { key }
                }
                Wake::Cancel => Event::Cancel,
                Wake::Step(done) => {
                    self.handles.remove(&done.key);
                    match self.step_done(done).await {
                        Ok(event) => event,
                        Err(e) => return Box::pin(self.internal_failure(e)).await,
                    }
                }
                Wake::Signal(signal, reply) => match Box::pin(self.decide(signal)).await {
                    Ok(Ok((event, signalled))) => {
                        reply.send(Ok(signalled)).ok();
                        event
                    }
                    Ok(Err(refused)) => {
                        reply.send(Err(refused)).ok();
                        continue;
                    }
                    Err(e) => {
                        let failed = Error::Corrupt {
                            run: self.run_id.to_string(),
                            message: format!("the decision could not be recorded: {e}"),
                        };
                        reply.send(Err(failed)).ok();
                        return Box::pin(self.internal_failure(e)).await;
                    }
                },
            };
            actions = self.run.apply(event);
        }
    }

    /// Whether all the run has left is waiting for decisions: approvals
    /// waiting, and no step, retry or finished step in flight.
    fn only_waits_for_decisions(&self) -> bool {
        !self.parked.is_empty()
            && self.handles.is_empty()
            && self.retries_pending == 0
            && self.ready.is_empty()
            && self.sealed.is_none()
    }

    /// Journals a finished step (its logs, its record) and gives the event
    /// that tells the machine.
    async fn step_done(&mut self, mut done: Done) -> Result<Event> {
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
                let input_ref = done
                    .input
                    .as_deref()
                    .and_then(|v| self.journaled.find(v))
                    .cloned();
                let stored = match self.journaled.outputs(outputs) {
                    Some(refs) => Some(Stored::Refs(refs)),
                    None => done.stored.take(),
                };
                let extra = Extra {
                    input: done.input.as_deref(),
                    error: None,
                    duration_us: duration,
                    stored,
                    input_ref,
                    committed: false,
                };
                let journaled = self
                    .journal(
                        RecordKind::Succeeded,
                        &done.key,
                        done.attempt,
                        Some(outputs.as_slice()),
                        extra,
                    )
                    .await;
                // This record's seq: the one just taken.
                let seq = self.seq - 1;
                for (port, m) in outputs {
                    self.journaled.remember(
                        m,
                        ValueRef::Output {
                            seq,
                            port: port.clone(),
                        },
                    );
                }
                journaled
            }
            Err(e) => {
                let err = RunError {
                    node: None,
                    message: e.message.clone(),
                    retryable: Some(e.retryable),
                    attempts: None,
                };
                let input_ref = done
                    .input
                    .as_deref()
                    .and_then(|v| self.journaled.find(v))
                    .cloned();
                let extra = Extra {
                    input: done.input.as_deref(),
                    error: Some(err),
                    duration_us: duration,
                    stored: None,
                    input_ref,
                    committed: false,
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
        logged.and(journaled)?;
        Ok(match done.result {
            Ok(outputs) => Event::Succeeded {
                key: done.key,
                outputs,
            },
            Err(error) => Event::Failed {
                key: done.key,
                error,
            },
        })
    }

    /// Parks an approval step: its Started record (not again for a step
    /// replayed after a restart), its `waits` row, and the step kept here
    /// until a signal decides it.
    async fn park_step(
        &mut self,
        key: StepKey,
        attempt: u32,
        input: Msg,
        hist: Option<Arc<Hist>>,
        first_started_at_us: i64,
        replayed: bool,
    ) -> Result<()> {
        self.unseal().await?;
        if !replayed {
            let stored = self.journaled.find(&input).cloned().map(Stored::Ref);
            self.journal(
                RecordKind::Started,
                &key,
                attempt,
                Some(&*input),
                Extra {
                    stored,
                    ..Extra::default()
                },
            )
            .await?;
        }
        let node = &self.plan.nodes[key.node];
        let step = Prepared::new(self, &key, attempt, &input, hist);
        let approval = match nodes::approval(&step.call(node, first_started_at_us)) {
            Ok(a) => a,
            Err(e) => {
                // A template that does not evaluate: the step fails.
                self.ready
                    .push_back(Wake::Step(step.done(key, attempt, Err(e), None)));
                return Ok(());
            }
        };
        let (node_id, lineage, activation) = self.key_strings(&key);
        self.engine
            .store()
            .journal()
            .open_wait(sluice_store::Wait {
                key: sluice_store::WaitKey {
                    run_id: self.run_id.clone(),
                    node: node_id.clone(),
                    lineage: lineage.clone().into(),
                    activation: activation.clone().into(),
                },
                since_us: first_started_at_us,
                deadline_us: approval.deadline_us,
                message: approval.message.clone(),
            })
            .await?;
        if approval.deadline_us.is_some() {
            // Committed before the timeout task looks for it.
            self.engine.store().journal().flush().await?;
            self.engine.waits_changed();
        }
        self.emit(
            What::StepWaiting {
                node: node_id,
                lineage,
                activation,
            },
            nodes::now_us(),
        );
        self.parked.insert(
            key,
            ParkedStep {
                attempt,
                input,
                on_timeout: approval.on_timeout,
                deadline_us: approval.deadline_us,
                since_us: first_started_at_us,
            },
        );
        Ok(())
    }

    /// Decides a parked approval: its record (the signal's body on the
    /// decision's port, or the timeout's), committed, and its wait closed.
    /// Outer error: the engine failed; inner: the signal is refused.
    async fn decide(
        &mut self,
        signal: super::waits::Signal,
    ) -> Result<Result<(Event, sluice_api::Signalled)>> {
        use super::waits::SignalKind;
        let key = match self.find_parked(&signal) {
            Ok(key) => key,
            Err(refused) => return Ok(Err(refused)),
        };
        let parked = self.parked.remove(&key).expect("found above");
        let (node_id, lineage, activation) = self.key_strings(&key);
        let (result, decision) = match signal.kind {
            SignalKind::Decide(decision, body) => (
                Ok(vec![(decision.port().to_string(), Arc::new(body))]),
                decision,
            ),
            SignalKind::Timeout => {
                let waited = parked
                    .deadline_us
                    .map_or(0, |d| (d - parked.since_us).max(0) / 1000);
                let result = match parked.on_timeout {
                    sluice_model::kinds::OnTimeout::Port => {
                        Ok(vec![("timeout".to_string(), parked.input.clone())])
                    }
                    sluice_model::kinds::OnTimeout::Fail => Err(nodes::Error::terminal(format!(
                        "no decision within {waited} ms"
                    ))),
                };
                (result, sluice_api::Decision::Rejected)
            }
        };
        let mut step = Prepared::new(self, &key, parked.attempt, &parked.input, None);
        step.started = Instant::now();
        let done = step.done(key.clone(), parked.attempt, result, None);
        let event = self.step_done(done).await?;
        let journal = self.engine.store().journal();
        journal
            .close_wait(sluice_store::WaitKey {
                run_id: self.run_id.clone(),
                node: node_id.clone(),
                lineage: lineage.clone().into(),
                activation: activation.clone().into(),
            })
            .await?;
        // The decision is durable before it is acknowledged.
        journal.flush().await?;
        Ok(Ok((
            event,
            sluice_api::Signalled {
                run_id: self.run_id.to_string(),
                node: node_id.to_string(),
                lineage,
                decision,
            },
        )))
    }

    /// The parked step a signal names (by node, lineage, activation; the
    /// only one when it names none).
    fn find_parked(&self, signal: &super::waits::Signal) -> Result<StepKey> {
        let matching: Vec<&StepKey> = self
            .parked
            .keys()
            .filter(|k| {
                let (node, lineage, activation) = self.key_strings(k);
                signal.node.as_deref().is_none_or(|n| *node == *n)
                    && signal.lineage.as_deref().is_none_or(|l| lineage == l)
                    && signal.activation.as_deref().is_none_or(|a| activation == a)
            })
            .collect();
        match matching.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(Error::NotWaiting {
                run: self.run_id.to_string(),
                why: match &signal.node {
                    Some(n) => format!("it does not wait for a decision at `{n}`"),
                    None => "it does not wait for a decision".to_string(),
                },
            }),
            several => {
                let mut nodes: Vec<String> = several
                    .iter()
                    .map(|k| {
                        let (node, lineage, _) = self.key_strings(k);
                        if lineage.is_empty() {
                            node.to_string()
                        } else {
                            format!("{node} (lineage {lineage})")
                        }
                    })
                    .collect();
                nodes.sort();
                nodes.dedup();
                Err(Error::AmbiguousWait {
                    run: self.run_id.to_string(),
                    waits: nodes,
                })
            }
        }
    }

    /// Ends the driver of a run that only waits for decisions: everything
    /// journaled is committed, then the run is marked parked; a signal (or
    /// the timeout) takes it up again from its journal. A cancel or a
    /// decision that reached this driver while it was parking is not
    /// dropped with it: the run is unparked and this driver goes on with
    /// it (None).
    async fn park_run(&mut self) -> Result<Option<RunResult>> {
        let journal = self.engine.store().journal();
        journal.flush().await?;
        journal.park(&self.run_id, nodes::now_us()).await?;
        let late = self
            .engine
            .let_go_of_parked(&self.run_id, self.claim, &mut self.rx);
        if !late.is_empty() {
            journal.unpark(&self.run_id).await?;
            self.ready.extend(late);
            return Ok(None);
        }
        self.emit(What::RunWaiting {}, nodes::now_us());
        Ok(Some(RunResult {
            id: self.run_id.to_string(),
            status: Status::Waiting,
            output: Value::Null,
            error: None,
            respond: None,
        }))
    }

    async fn write_logs(&mut self, done: &Done) -> Result<()> {
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
            match &mut self.sealed {
                Some(sealed) => sealed.logs.push(line),
                None => self.engine.store().journal().log(line).await?,
            }
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
                    let replayed = self.first_started.contains_key(&key);
                    let first = *self
                        .first_started
                        .entry(key.clone())
                        .or_insert_with(nodes::now_us);
                    let node = &self.plan.nodes[key.node];
                    if node.kind == sluice_model::kinds::Kind::Approval
                        && !node.disabled
                        && !self.plan.pinned.contains_key(&key.node)
                    {
                        // Rare paths are boxed: they would grow every run's future.
                        Box::pin(self.park_step(key, attempt, input, hist, first, replayed))
                            .await?;
                        continue;
                    }
                    // A run's first step is its trigger, given the run's
                    // input (recorded with the run itself).
                    if node.role == crate::plan::Role::Trigger && self.seq == 0 {
                        self.journaled.remember(&input, ValueRef::RunInput);
                    }
                    let mut committed = None;
                    let acts = !node.kind.only_waits();
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
                        Box::pin(self.unseal()).await?;
                        // Started records hold the step's input. A step that acts on
                        // the world (anything but a timer or a child run, which
                        // is recorded itself) starts only once its Started
                        // record, and so its run, is committed: an effect is
                        // never made by a step a crash could leave untraced,
                        // and a step in flight resumes under the same
                        // idempotency key instead of a new run's.
                        let stored = self.journaled.find(&input).cloned().map(Stored::Ref);
                        committed = self
                            .journal(
                                RecordKind::Started,
                                &key,
                                attempt,
                                Some(&*input),
                                Extra {
                                    stored,
                                    committed: acts,
                                    ..Extra::default()
                                },
                            )
                            .await?;
                    }
                    self.spawn_step(key, attempt, input, hist, first, committed);
                }
                Action::Retry { key, delay_ms, .. } => {
                    // A run that waits is recorded while it does.
                    Box::pin(self.unseal()).await?;
                    self.retries_pending += 1;
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
                    let result = RunResult {
                        id: self.run_id.to_string(),
                        status,
                        output,
                        error,
                        respond,
                    };
                    let result = match self.sealed.take() {
                        Some(Sealed { run, records, logs }) => {
                            self.engine
                                .end_sealed_run(
                                    &self.run_id,
                                    &run,
                                    records,
                                    logs,
                                    &self.workflow,
                                    result,
                                )
                                .await?
                        }
                        None => {
                            self.engine
                                .end_run(&self.run_id, &self.workflow, result)
                                .await?
                        }
                    };
                    self.tasks.abort_all();
                    return Ok(Some(result));
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
        committed: Option<Committed>,
    ) {
        let node = &self.plan.nodes[key.node];
        let step = Prepared::new(self, &key, attempt, &input, hist);
        let inline = if node.disabled {
            // A disabled node passes its input on `out`; a disabled
            // approval approves it at once.
            let port = match node.kind {
                sluice_model::kinds::Kind::Approval => "approved",
                _ => "out",
            };
            Some(Ok(vec![(port.to_string(), input.clone())]))
        } else if let Some(pinned) = self.plan.pinned.get(&key.node) {
            // Test data pinned in the editor (draft runs only): the node
            // is not run, its output is what was pinned.
            Some(Ok(pinned.clone()))
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
            if let Some(committed) = committed
                && let Err(e) = committed.wait().await
            {
                let error = nodes::Error::terminal(format!(
                    "not run: the journal could not record that it started ({e})"
                ));
                let done = step.done(key, attempt, Err(error), None);
                tx.send(Wake::Step(done)).ok();
                return;
            }
            let permit = if waits {
                None
            } else {
                permits.acquire_owned().await.ok()
            };
            // Durations count the node's own time, not the wait for a permit.
            let mut step = step;
            step.started = Instant::now();
            step.hold(permit);
            let node = &plan.nodes[key.node];
            let fut = nodes::execute(step.call(node, first_started_at_us));
            let result = match node.timeout_ms {
                Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), fut).await {
                    Ok(r) => r,
                    Err(_) => Err(nodes::Error::retryable(format!("timed out after {ms} ms"))),
                },
                None => fut.await,
            };
            drop(step.release());
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
        // The failure is recorded against the run, so the run must be.
        if let Err(e) = self.unseal().await {
            super::tracing_log(&format!("run {}: could not record it: {e}", self.run_id));
        }
        let error = RunError::of_run(format!("engine error: {e}"));
        self.engine
            .end_run_failed(&self.run_id, &self.workflow, error)
            .await
    }
}
