//! Starting runs: [`Engine::start`] (refused beyond the active-run limit),
//! [`Engine::start_for_result`] (created with its finish) and
//! [`Engine::start_with_id`] (deterministic ids: schedule fires,
//! sub-workflows, error triggers, retries). Each records the run, then
//! hands it to a driver.

use std::sync::Arc;

use sluice_api::RunOn;
use sluice_model::kinds::Kind;
use sluice_nodes as nodes;
use sluice_store::NewRun;

use super::driver::run_info;
use super::replay::Replay;
use super::{Engine, Error, Result, RunHandle, new_run_id};
use crate::machine::{Msg, Run};
use crate::plan::Plan;

impl Engine {
    /// Starts a run; returns once the run is durably recorded.
    pub async fn start(
        &self,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
    ) -> Result<RunHandle> {
        self.admit()?;
        self.admit_storage().await?;
        self.start_detached(plan, trigger, input, true, None).await
    }

    /// Like [`Engine::start`] (or [`Engine::start_for_result`] with
    /// `for_result`), executing where `on` says instead of where the
    /// workflow's `settings.run_on` does.
    pub async fn start_on(
        &self,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
        on: Option<RunOn>,
        for_result: bool,
    ) -> Result<RunHandle> {
        self.admit()?;
        self.admit_storage().await?;
        if for_result && plan.in_one_go {
            // Boxed, so that the caller's future (a webhook handler's, which
            // axum boxes again) holds a pointer, not this run's whole state.
            return Box::pin(self.start_inner(new_run_id(), plan, trigger, input, None, false, on))
                .await;
        }
        self.start_detached(plan, trigger, input, !for_result, on)
            .await
    }

    /// Like [`Engine::start`] for callers that answer only when the run has
    /// ended (a `when_finished` webhook, a waiting API call): the run's
    /// creation is committed with its finish instead of before its first
    /// step, saving one commit round trip. A crash before the finish loses a
    /// run nobody was told about.
    ///
    /// A run of a plan that runs in one go (`Plan::in_one_go`: pure steps
    /// only, nothing to wait for) executes here, on the caller's task, and
    /// is recorded whole in one write when it ends: the handle returned
    /// holds its result already. A caller that goes away midway drops it
    /// whole (nothing of it was written, nobody was told of it).
    pub async fn start_for_result(
        &self,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
    ) -> Result<RunHandle> {
        self.start_on(plan, trigger, input, None, true).await
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
        self.start_inner(id, plan, trigger, input, parent, true, None)
            .await
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
        on: Option<RunOn>,
    ) -> Result<RunHandle> {
        let engine = self.clone();
        let trigger = trigger.map(str::to_string);
        tokio::spawn(async move {
            engine
                .start_inner(
                    new_run_id(),
                    plan,
                    trigger.as_deref(),
                    input,
                    None,
                    durable,
                    on,
                )
                .await
        })
        .await
        .map_err(Error::StartTask)?
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_inner(
        &self,
        id: String,
        plan: Arc<Plan>,
        trigger: Option<&str>,
        input: Msg,
        parent: Option<String>,
        durable: bool,
        on: Option<RunOn>,
    ) -> Result<RunHandle> {
        let entry = plan.entry(trigger)?;
        if sluice_model::value::deeper_than(&input, sluice_model::value::MAX_DEPTH) {
            return Err(Error::InputTooDeep);
        }
        let executor = on.unwrap_or_else(|| plan.workflow.settings().run_on);
        // A worker run's credentials are the worker's (it resolves them by
        // name from its own vault and fails the run clearly when one is missing).
        if executor == RunOn::Local {
            self.check_credentials(&plan.workflow).await?;
        }
        if executor == RunOn::Worker
            && let Some(node) = plan.nodes.iter().find(|n| n.kind == Kind::Approval)
        {
            // Nothing parks a run on the worker (yet): refused before it starts.
            return Err(Error::ApprovalOnWorker {
                node: node.id.to_string(),
            });
        }
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
            draft: plan.draft,
            executor,
        };
        if executor == RunOn::Worker {
            // Recorded before it is sent: the mirror (or, after a restart,
            // resume) hands it off idempotently under its id.
            self.store().create_run(&new_run).await?;
            let trigger = plan.nodes[entry].id.to_string();
            let run = self.worker_run(
                &id,
                &plan,
                &trigger,
                Arc::unwrap_or_clone(input),
                created_at_us,
            );
            return Ok(self.spawn_mirror(slot, run, 0, true));
        }
        let info = run_info(self, &id, &plan, &plan.nodes[entry].id, created_at_us);
        if !durable && plan.in_one_go {
            let (run, actions) = Run::start(plan, entry, input);
            return Ok(self
                .drive_in_one_go(slot, run, actions, info, fires_errors, new_run)
                .await);
        }
        if durable {
            self.store().create_run(&new_run).await?;
        } else {
            self.store().queue_run(&new_run).await?;
        }
        let (run, actions) = Run::start(plan, entry, input);
        Ok(self.spawn_driver(slot, run, actions, Replay::default(), info, fires_errors))
    }
}
