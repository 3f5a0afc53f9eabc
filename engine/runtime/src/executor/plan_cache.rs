//! The plan cache: [`Engine::workflow`] reuses a workflow's published plan
//! for a second without reading, then while the published text is still the
//! one it was built from. Changes through this engine evict it at once and are
//! announced to the triggers ([`Engine::workflow_changes`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_model::Workflow;

use super::{Engine, Error, Result};
use crate::plan::Plan;

impl Engine {
    /// The published plan of workflow `id`: what its triggers, and runs by
    /// id, run ([`Engine::draft`] is the one being edited).
    /// [`Error::NotPublished`] when nothing is published.
    pub async fn workflow(&self, id: &str) -> Result<Arc<Plan>> {
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
        // A change that lands while this reads must not be undone by caching
        // what was read before it (a schedule firing as its workflow is
        // disabled would keep the old plan, and the triggers would re-arm
        // it).
        let generation = self.inner.plans_generation.load(Ordering::SeqCst);
        let (text, version) = self
            .store()
            .get_published(id)
            .await?
            .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))?
            .ok_or_else(|| Error::NotPublished(id.to_string()))?;
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
                let wf = Workflow::from_json(&text).map_err(|source| Error::StoredWorkflow {
                    id: id.to_string(),
                    source,
                })?;
                Plan::new_at(wf, version)?
            }
        };
        // Cache only what round-trips (a stored text that is the plan's own).
        if *plan.definition == *text {
            let mut plans = self.inner.plans.lock().unwrap_or_else(|e| e.into_inner());
            if self.inner.plans_generation.load(Ordering::SeqCst) != generation {
                return Ok(plan);
            }
            if plans.len() >= 1024 {
                plans.clear();
            }
            plans.insert(id.to_string(), (Instant::now(), plan.clone()));
        }
        Ok(plan)
    }

    /// Tells the engine's services (triggers) that a workflow was created,
    /// changed or deleted.
    pub fn workflow_changed(&self, id: &str) {
        self.inner.plans_generation.fetch_add(1, Ordering::SeqCst);
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
}

/// How long a cached plan is trusted without reading its stored text.
const PLAN_RECHECK: Duration = Duration::from_secs(1);
