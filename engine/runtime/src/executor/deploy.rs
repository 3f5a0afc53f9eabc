//! Deploying workflows to the shared worker: [`Engine::deploy`] gives it
//! the published version to own (its schedules fire there from Restate's
//! durable timers, its webhooks answer on the worker's hook port), and
//! [`Engine::follow_deployments`] adopts the runs the worker started into
//! this engine's history, whenever this engine runs: each is recorded
//! (`executor = worker`) and mirrored back like a handed-off run, never
//! sent. While deployed, the workflow's schedules do not fire here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_api::{
    DEPLOY_SERVICE, DeployState, Deployed, DeployedRun, DeployedRuns, Deployment, RUN_SERVICE,
    RunOn, WORKER_PROTOCOL, WorkerRun,
};
use sluice_store::{Definition, NewRun};

use super::handoff::{Fault, Worker};
use super::{Engine, Error, Result, tracing_log};

/// How often a running engine reads its deployments' run logs.
const FOLLOW_EVERY: Duration = Duration::from_secs(2);

fn worker_error(f: Fault) -> Error {
    match f {
        Fault::Fatal(m) | Fault::Transient(m) | Fault::Lost(m) => Error::Worker(m),
    }
}

impl Engine {
    fn worker(&self) -> Result<&Worker> {
        self.inner.worker.as_ref().ok_or(Error::NoWorker)
    }

    /// Gives the shared worker workflow `id`'s published version to own.
    pub async fn deploy(&self, id: &str) -> Result<DeployState> {
        // What is wrong with the workflow first (missing, not published),
        // then with where it would go.
        let plan = self.workflow(id).await?;
        if let Some(node) = plan
            .nodes
            .iter()
            .find(|n| n.kind == sluice_model::kinds::Kind::Approval)
        {
            // Nothing parks a run on the worker (yet).
            return Err(Error::ApprovalOnWorker {
                node: node.id.to_string(),
            });
        }
        let worker = self.worker()?;
        let version = match &plan.version {
            Some(v) => v.clone(),
            None => self.doc_head(id).await?,
        };
        let deployment = Deployment {
            protocol: WORKER_PROTOCOL,
            engine_version: env!("CARGO_PKG_VERSION").to_string(),
            workflow: id.to_string(),
            version,
            definition: plan.definition.shared_text().to_string(),
        };
        let deployed: Deployed = worker
            .call(
                &format!("{DEPLOY_SERVICE}/{id}/deploy"),
                &deployment,
                "the deployment",
            )
            .await
            .map_err(worker_error)?;
        self.store()
            .set_deployment(id, Some(&deployed.version), deployed.deployed_at_us)
            .await?;
        // Its schedules are the worker's now: the triggers here let go.
        self.workflow_changed(id);
        Ok(DeployState {
            workflow: id.to_string(),
            version: Some(deployed.version),
            deployed_at_us: Some(deployed.deployed_at_us),
            next_fires: deployed.next_fires,
            webhooks: deployed.webhooks,
        })
    }

    /// Stops workflow `id`'s deployment: its schedules fire here again.
    /// The runs it started still come into history.
    pub async fn undeploy(&self, id: &str) -> Result<DeployState> {
        let worker = self.worker()?;
        let _: bool = worker
            .call(
                &format!("{DEPLOY_SERVICE}/{id}/undeploy"),
                &Value::Null,
                "the undeployment",
            )
            .await
            .map_err(worker_error)?;
        if self.store().deployment(id).await?.is_some() {
            self.store()
                .set_deployment(id, None, sluice_nodes::now_us())
                .await?;
        }
        self.workflow_changed(id);
        Ok(DeployState {
            workflow: id.to_string(),
            version: None,
            deployed_at_us: None,
            next_fires: Vec::new(),
            webhooks: Vec::new(),
        })
    }

    /// What this engine knows of workflow `id`'s deployment (no request to
    /// the worker).
    pub async fn deploy_state(&self, id: &str) -> Result<DeployState> {
        let row = self.store().deployment(id).await?;
        Ok(DeployState {
            workflow: id.to_string(),
            version: row.as_ref().and_then(|r| r.version.clone()),
            deployed_at_us: row
                .as_ref()
                .filter(|r| r.version.is_some())
                .and_then(|r| r.deployed_at_us),
            next_fires: Vec::new(),
            webhooks: Vec::new(),
        })
    }

    /// Whether workflow `id` is deployed (its schedules fire on the worker).
    pub async fn deployed(&self, id: &str) -> bool {
        matches!(self.store().deployment(id).await, Ok(Some(r)) if r.version.is_some())
    }

    /// Reads every deployment's run log from where it was left and adopts
    /// the runs not yet here; how many were adopted.
    pub async fn sync_deployments(&self) -> Result<usize> {
        let Some(worker) = self.inner.worker.as_ref() else {
            return Ok(0);
        };
        let mut adopted = 0;
        let mut definitions: HashMap<String, Arc<str>> = HashMap::new();
        for row in self.store().deployments().await? {
            let wf = &row.workflow_id;
            let mut from = u64::try_from(row.log_read).unwrap_or(0);
            loop {
                let page: DeployedRuns = worker
                    .call(
                        &format!("{DEPLOY_SERVICE}/{wf}/log"),
                        &json!({ "from": from }),
                        "the log read",
                    )
                    .await
                    .map_err(worker_error)?;
                if page.from > from {
                    tracing_log(&format!(
                        "deployment `{wf}`: {} runs were dropped from the worker's log before \
                         this engine read them (it keeps the newest {})",
                        page.from - from,
                        page.total.min(page.from)
                    ));
                }
                for r in &page.runs {
                    if self.adopt(worker, wf, r, &mut definitions).await? {
                        adopted += 1;
                    }
                }
                from = page.from + page.runs.len() as u64;
                self.store()
                    .set_deployment_read(wf, i64::try_from(from).unwrap_or(i64::MAX))
                    .await?;
                if page.runs.is_empty() || from >= page.total {
                    if row.version.is_none() && from >= page.total {
                        self.store().forget_deployment(wf).await?;
                    }
                    break;
                }
            }
        }
        Ok(adopted)
    }

    /// Records run `r` of deployment `workflow` (unless it is here already)
    /// and mirrors it back.
    async fn adopt(
        &self,
        worker: &Worker,
        workflow: &str,
        r: &DeployedRun,
        definitions: &mut HashMap<String, Arc<str>>,
    ) -> Result<bool> {
        if !sluice_api::deployed_run(&r.run_id) || self.store().run_exists(&r.run_id).await? {
            return Ok(false);
        }
        let definition = match definitions.get(&r.version) {
            Some(d) => d.clone(),
            None => {
                let text: String = worker
                    .call(
                        &format!("{RUN_SERVICE}/{}/definition", r.run_id),
                        &Value::Null,
                        "the definition read",
                    )
                    .await
                    .map_err(worker_error)?;
                let text: Arc<str> = Arc::from(text);
                definitions.insert(r.version.clone(), text.clone());
                text
            }
        };
        let Ok(slot) = self.claim(&r.run_id) else {
            return Ok(false);
        };
        self.store()
            .create_run(&NewRun {
                id: r.run_id.clone(),
                workflow_id: workflow.to_string(),
                definition: Definition::new(definition.clone()),
                trigger: r.trigger.clone(),
                input: Arc::new(r.input.clone()),
                created_at_us: r.created_at_us,
                parent_run: None,
                doc_version: Some(r.version.clone()),
                draft: false,
                executor: RunOn::Worker,
            })
            .await?;
        let run = WorkerRun {
            protocol: WORKER_PROTOCOL,
            engine_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: r.run_id.clone(),
            workflow: workflow.to_string(),
            definition: definition.to_string(),
            trigger: r.trigger.clone(),
            input: r.input.clone(),
            created_at_us: r.created_at_us,
            draft: false,
            reuse: Vec::new(),
        };
        // Announced as started here; the mirror never sends a deployed run.
        drop(self.spawn_mirror(slot, run, 0, true));
        Ok(true)
    }

    /// Adopts the deployments' runs now and every two seconds, until the
    /// task is dropped (the host runs it beside the triggers).
    pub async fn follow_deployments(self) {
        let mut said: Option<String> = None;
        loop {
            match self.sync_deployments().await {
                Ok(_) => said = None,
                Err(e) => {
                    // Said once per new problem, not every two seconds.
                    let m = e.to_string();
                    if said.as_deref() != Some(m.as_str()) {
                        tracing_log(&format!("deployments: {m}"));
                        said = Some(m);
                    }
                }
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
        }
    }
}
