//! Background triggers: `trigger.schedule` (cron with seconds, in a time
//! zone) and `trigger.file` (a watched folder). [`Triggers::run`] arms the
//! triggers of every workflow's **published** version and re-arms them when
//! a publish changes it ([`Engine::workflow_changed`]); edits to a draft
//! leave them alone, and an unpublished workflow has none armed.
//!
//! Missed schedules: a schedule remembers its last fire through its runs.
//! When the engine starts and occurrences were missed while it was down,
//! the trigger fires **once** at start with `missed` set to how many were
//! missed (coalesced, never a burst), then keeps its normal pace.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod files;
pub mod mirror;
pub mod schedule;

use std::collections::HashMap;
use std::sync::Arc;

use sluice_model::kinds::Trigger;
use sluice_runtime::{Engine, Plan};
use tokio::task::AbortHandle;

pub use mirror::{Mirror, Report};
pub use schedule::parse_cron;

/// A trigger that cannot be armed (reported, and the workflow's other
/// triggers armed all the same).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Schedule(#[from] schedule::Error),
    #[error(transparent)]
    File(#[from] files::Error),
}

struct Armed {
    plan: Arc<Plan>,
    deployed: bool,
    handles: Vec<AbortHandle>,
}

/// Arms and re-arms triggers for an engine.
pub struct Triggers {
    engine: Engine,
    /// Per workflow: the published plan armed, whether it is deployed to
    /// the shared worker (whose timers fire its schedules instead), and the
    /// tasks running its triggers.
    armed: HashMap<String, Armed>,
}

impl std::fmt::Debug for Triggers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Triggers")
            .field("armed", &self.armed.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Drop for Triggers {
    fn drop(&mut self) {
        for armed in self.armed.values() {
            for h in &armed.handles {
                h.abort();
            }
        }
    }
}

impl Triggers {
    pub fn new(engine: Engine) -> Triggers {
        Triggers {
            engine,
            armed: HashMap::new(),
        }
    }

    /// Arms everything, then follows workflow changes until the engine's
    /// change channel closes or the task is dropped.
    pub async fn run(mut self) {
        let mut changes = self.engine.workflow_changes();
        self.arm_all().await;
        loop {
            match changes.recv().await {
                Ok(id) => self.rearm(&id).await,
                // Missed some changes: re-read everything.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => self.arm_all().await,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Arms the triggers of every stored workflow.
    pub async fn arm_all(&mut self) {
        let rows = match self.engine.store().list_workflows().await {
            Ok(rows) => rows,
            Err(e) => return warn(&format!("cannot list workflows to arm their triggers: {e}")),
        };
        for row in rows {
            self.arm_workflow(&row.id, true).await;
        }
    }

    /// Disarms a workflow's triggers and arms them again from its stored version.
    pub async fn rearm(&mut self, id: &str) {
        self.arm_workflow(id, false).await;
    }

    /// `catch_up`: missed schedules fire once (at start, not after an edit).
    async fn arm_workflow(&mut self, id: &str, catch_up: bool) {
        // Deleted, unpublished (or invalid): nothing to arm.
        let plan = self.engine.workflow(id).await.ok();
        let deployed = self.engine.deployed(id).await;
        if let (Some(plan), Some(armed)) = (&plan, self.armed.get(id))
            && armed.deployed == deployed
            && (Arc::ptr_eq(plan, &armed.plan)
                || (plan.definition == armed.plan.definition && plan.version == armed.plan.version))
        {
            // The draft changed, not what runs: the schedules keep their pace.
            return;
        }
        if let Some(armed) = self.armed.remove(id) {
            for h in armed.handles {
                h.abort();
            }
        }
        let Some(plan) = plan else { return };
        let handles = self.arm(&plan, catch_up, deployed);
        self.armed.insert(
            id.to_string(),
            Armed {
                plan,
                deployed,
                handles,
            },
        );
    }

    /// `deployed`: the shared worker fires the schedules (from Restate's
    /// timers); file triggers watch this machine's folders, so they stay.
    fn arm(&self, plan: &Arc<Plan>, catch_up: bool, deployed: bool) -> Vec<AbortHandle> {
        let mut handles = Vec::new();
        for node in plan.nodes.iter().filter(|n| !n.disabled) {
            let armed: Result<AbortHandle, Error> = match &node.trigger {
                Some(Trigger::Schedule(_)) if deployed => continue,
                Some(Trigger::Schedule(cfg)) => schedule::arm(
                    self.engine.clone(),
                    plan.clone(),
                    node.id.clone(),
                    cfg,
                    catch_up,
                )
                .map_err(Error::from),
                Some(Trigger::File(cfg)) => {
                    files::arm(self.engine.clone(), plan.clone(), node.id.clone(), cfg)
                        .map_err(Error::from)
                }
                _ => continue,
            };
            match armed {
                Ok(h) => handles.push(h),
                Err(e) => warn(&format!(
                    "workflow `{}` trigger `{}`: {e}",
                    plan.workflow.id, node.id
                )),
            }
        }
        handles
    }
}

fn warn(msg: &str) {
    eprintln!("sluice: {msg}");
}
