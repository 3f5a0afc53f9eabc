//! Drafts and publish (DESIGN §6): a workflow's document is its draft,
//! saved as it is edited; what its triggers, API calls and CLI runs by id
//! run is its **published** version, which changes only when someone
//! publishes (or, for `settings.publish: "on_valid_idle"`, when the draft is
//! valid and nobody has edited it for a while). The editor's Run runs the
//! draft ([`Engine::draft`]), marked as such in the run.

use std::sync::Arc;
use std::time::Duration;

use sluice_api::{Changes, Problem, PublishMode, PublishState};
use sluice_model::Workflow;
use sluice_model::kinds::Kind;
use sluice_nodes as nodes;

use super::{Engine, Error, Result, tracing_log};
use crate::plan::{Invalid, Plan};

impl Engine {
    /// The plan of workflow `id`'s draft: the document as it stands now,
    /// valid or not (an invalid draft is an [`Error::Invalid`] naming every
    /// problem). Its runs are marked as draft runs.
    pub async fn draft(&self, id: &str) -> Result<Arc<Plan>> {
        let (text, version) = self
            .workflow_text(id)
            .await?
            .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))?;
        let wf = Workflow::from_json(&text).map_err(|source| Error::StoredWorkflow {
            id: id.to_string(),
            source,
        })?;
        Ok(Plan::build(wf, version, true)?)
    }

    /// Publishes workflow `id` at document `version` (default: the draft as
    /// it stands): from now on its triggers, and runs by id, run that
    /// version. A draft with problems (validation, missing credentials) is
    /// refused with every problem named ([`Error::Invalid`]), and what runs
    /// stays as it was.
    pub async fn publish(&self, id: &str, version: Option<&str>) -> Result<PublishState> {
        let (wf, version) = match version {
            Some(v) => (self.workflow_at(id, v).await?, v.to_string()),
            None => {
                // The text and the version it was written from, read together:
                // the document may move on meanwhile, but this pair is what
                // gets published.
                let (text, version) = self
                    .workflow_text(id)
                    .await?
                    .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))?;
                let wf = Workflow::from_json(&text).map_err(|source| Error::StoredWorkflow {
                    id: id.to_string(),
                    source,
                })?;
                let version = match version {
                    Some(v) => v,
                    None => self.doc_head(id).await?,
                };
                (wf, version)
            }
        };
        let plan = Plan::new_at(wf, Some(version.clone()))?;
        self.check_credentials(&plan.workflow).await?;
        let unwatched = self.unwatched_folders(&plan.workflow);
        if !unwatched.is_empty() {
            return Err(Error::Invalid(Invalid(unwatched)));
        }
        if !self
            .store()
            .publish_workflow(id, &plan.definition, Some(&version), nodes::now_us())
            .await?
        {
            return Err(Error::WorkflowNotFound(id.to_string()));
        }
        self.workflow_changed(id);
        self.publish_state(id).await
    }

    /// Withdraws workflow `id`'s published version: its triggers disarm
    /// (its webhooks answer 404) and runs by id are refused, until it is
    /// published again. The draft stays. Returns whether it was published.
    pub async fn unpublish(&self, id: &str) -> Result<bool> {
        if self.store().get_published(id).await?.is_none() {
            return Err(Error::WorkflowNotFound(id.to_string()));
        }
        let was = self.store().unpublish_workflow(id).await?;
        self.workflow_changed(id);
        Ok(was)
    }

    /// Where workflow `id`'s draft stands against what runs: the versions,
    /// what publishing would change, and what would stop it.
    pub async fn publish_state(&self, id: &str) -> Result<PublishState> {
        let (text, draft_version) = self
            .workflow_text(id)
            .await?
            .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))?;
        let draft_version = match draft_version {
            Some(v) => v,
            None => self.doc_head(id).await?,
        };
        let row = self
            .store()
            .list_workflows()
            .await?
            .into_iter()
            .find(|w| w.id == id)
            .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))?;
        let (problems, mode) = match Workflow::from_json(&text) {
            Ok(wf) => {
                let mode = wf.settings().publish;
                (self.problems(wf).await?, mode)
            }
            Err(e) => (
                vec![Problem {
                    node: None,
                    edge: None,
                    field: None,
                    message: e.to_string(),
                }],
                PublishMode::Manual,
            ),
        };
        let changes = match (&row.published_version, row.published) {
            (Some(p), true) if *p == draft_version => Changes::default(),
            (Some(p), true) => self.summarize(id, p, &draft_version).await?,
            _ => self.summarize(id, "", &draft_version).await?,
        };
        let deployed = self.store().deployment(id).await?;
        Ok(PublishState {
            id: id.to_string(),
            summary: changes.to_string(),
            changes,
            draft_version,
            published: row.published,
            published_version: row.published_version,
            published_at_us: row.published_at_us,
            problems,
            mode,
            from_peers: self.unpublished_from_peers(id).await?,
            worker: self.inner.worker.is_some(),
            deployed_version: deployed.as_ref().and_then(|d| d.version.clone()),
            deployed_at_us: deployed
                .as_ref()
                .filter(|d| d.version.is_some())
                .and_then(|d| d.deployed_at_us),
        })
    }

    /// Every problem that keeps `wf` from running here: validation,
    /// credentials this engine does not have, and file triggers whose
    /// folder it would not watch (`POST /validate`, a draft's publish state).
    pub async fn problems(&self, wf: Workflow) -> Result<Vec<Problem>> {
        let mut problems = match Plan::new(wf.clone()) {
            Ok(_) => Vec::new(),
            Err(Invalid(p)) => p,
        };
        match self.check_credentials(&wf).await {
            Ok(()) => {}
            Err(Error::Invalid(Invalid(p))) => problems.extend(p),
            Err(e) => return Err(e),
        }
        problems.extend(self.unwatched_folders(&wf));
        Ok(problems)
    }

    /// The file triggers of `wf` this engine would not arm: their folder is
    /// outside `[files] allow` (or none is allowed), missing, or not a
    /// folder. Published, they would never fire, and say so only in the
    /// server's log.
    fn unwatched_folders(&self, wf: &Workflow) -> Vec<Problem> {
        let allow = &self.settings().files.allow;
        wf.nodes
            .iter()
            .filter(|n| !n.disabled && n.kind == Kind::FileTrigger.name())
            .filter_map(|n| {
                let path = n.config.get("path").and_then(|p| p.as_str())?;
                let refused =
                    nodes::files::resolve_dir(Kind::FileTrigger.name(), allow, path).err()?;
                Some(Problem {
                    node: Some(n.id.clone()),
                    edge: None,
                    field: Some("config.path".into()),
                    message: refused.message,
                })
            })
            .collect()
    }

    /// Called whenever workflow `id`'s draft changed: for a workflow that
    /// publishes itself (`settings.publish: "on_valid_idle"`), schedules a
    /// publish once nobody has edited it for `settings.publish_idle_secs`.
    /// A later edit supersedes the pending one (it counts from that edit).
    pub(super) fn draft_changed(&self, id: &str, wf: &Workflow) {
        let settings = wf.settings();
        let generation = {
            let mut idle = self.idle();
            let g = idle.entry(id.to_string()).or_insert(0);
            *g += 1;
            *g
        };
        if settings.publish != PublishMode::OnValidIdle {
            return;
        }
        let engine = self.clone();
        let id = id.to_string();
        let wait = Duration::from_secs(settings.publish_idle_secs);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let current = engine.idle().get(&id).copied();
            if current != Some(generation) {
                return; // edited since: that edit's own timer decides
            }
            if let Err(e) = engine.publish_if_idle(&id).await {
                tracing_log(&format!("workflow {id}: cannot publish by itself: {e}"));
            }
        });
    }

    /// At start: every workflow that publishes by itself and whose draft
    /// is not what runs gets its idle timer again (a timer dies with the
    /// process that set it). Returns how many were scheduled.
    pub async fn schedule_idle_publishes(&self) -> Result<usize> {
        let mut scheduled = 0;
        for row in self.store().list_workflows().await? {
            if row.published && row.published_version == row.doc_version {
                continue;
            }
            let Some((text, _)) = self.workflow_text(&row.id).await? else {
                continue;
            };
            let Ok(wf) = Workflow::from_json(&text) else {
                continue;
            };
            if wf.settings().publish == PublishMode::OnValidIdle {
                self.draft_changed(&row.id, &wf);
                scheduled += 1;
            }
        }
        Ok(scheduled)
    }

    /// Publishes workflow `id`'s draft if it still publishes by itself, is
    /// valid, and is not what runs already.
    async fn publish_if_idle(&self, id: &str) -> Result<()> {
        let state = match self.publish_state(id).await {
            Ok(s) => s,
            // Deleted meanwhile: nothing to publish.
            Err(Error::WorkflowNotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        // A peer's edit is code that would run here: it waits for this
        // machine's user, whatever the workflow says.
        if state.mode != PublishMode::OnValidIdle
            || state.up_to_date()
            || !state.problems.is_empty()
            || !state.from_peers.is_empty()
        {
            return Ok(());
        }
        self.publish(id, Some(&state.draft_version)).await?;
        Ok(())
    }

    /// The peers whose edits are in workflow `id`'s draft and not yet
    /// published here, in the order they first edited.
    pub async fn unpublished_from_peers(&self, id: &str) -> Result<Vec<sluice_api::FromPeer>> {
        let mut out: Vec<sluice_api::FromPeer> = Vec::new();
        for message in self.store().unpublished_peer_versions(id).await? {
            let peer = message
                .strip_prefix(PEER_PREFIX)
                .unwrap_or(&message)
                .to_string();
            match out.iter_mut().find(|f| f.peer == peer) {
                Some(f) => f.versions = f.versions.saturating_add(1),
                None => out.push(sluice_api::FromPeer { peer, versions: 1 }),
            }
        }
        Ok(out)
    }
}

/// How the versions a peer's edits make are marked (their origin message).
pub const PEER_PREFIX: &str = "peer ";
