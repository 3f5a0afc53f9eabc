//! Workflows as documents (DESIGN §6): every change to a workflow is an
//! operation on its Loro document, persisted as an appended update,
//! compacted into a snapshot in the background, and relayed live to every
//! subscriber ([`Engine::doc_events`]). The stored workflow JSON is
//! materialized from the document (at once for JSON saves, 200 ms later for
//! merged updates), and records the document version it was written from:
//! runs pin that version.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_api::{Changes, VersionEntry};
use sluice_model::Workflow;
use sluice_model::doc::{Presence, WorkflowDoc, authors};
use sluice_store::VersionMark;
use tokio::sync::broadcast;

use super::{Engine, tracing_log};
use super::{Error, Result};
use crate::plan::Plan;

/// The engine's workflow documents: what is loaded, what is ahead of its
/// stored JSON, who is looking, and the channel that relays changes. One
/// value, owned by the engine; the operations are [`Engine`] methods below.
pub(super) struct Documents {
    /// Workflow documents in memory, by workflow id (one writer at a time).
    docs: tokio::sync::Mutex<HashMap<String, DocState>>,
    /// Workflows whose document is ahead of their stored JSON.
    dirty: Mutex<HashSet<String>>,
    /// Document updates and presence, for live subscribers.
    events: broadcast::Sender<DocEvent>,
    /// Who is looking at which workflow (ephemeral, never stored).
    presence: Mutex<HashMap<String, Presence>>,
    version_gap_secs: i64,
    /// Per workflow, a count of draft changes: a pending publish-when-idle
    /// goes ahead only if no change came after the one that scheduled it.
    idle: Mutex<HashMap<String, u64>>,
}

impl Documents {
    pub(super) fn new(version_gap_secs: i64) -> Documents {
        Documents {
            docs: tokio::sync::Mutex::new(HashMap::new()),
            dirty: Mutex::new(HashSet::new()),
            events: broadcast::channel(4096).0,
            presence: Mutex::new(HashMap::new()),
            version_gap_secs,
            idle: Mutex::new(HashMap::new()),
        }
    }
}

/// A workflow document and where its stored form stands.
pub(super) struct DocState {
    doc: WorkflowDoc,
    /// The last update stored.
    last_seq: i64,
    /// Updates stored since the last snapshot.
    pending: usize,
    /// A background compaction is under way.
    compacting: bool,
    /// The id the document holds when it differs from the workflow's id
    /// here (a workflow joined from a peer whose id was taken here): the
    /// document keeps the sharer's id, the stored JSON has this one.
    alias: Option<String>,
}

impl DocState {
    /// `wf` as the document must hold it (under its alias).
    fn for_doc<'w>(&self, wf: &'w Workflow) -> std::borrow::Cow<'w, Workflow> {
        match &self.alias {
            Some(a) if wf.id != *a => {
                let mut w = wf.clone();
                w.id = a.clone();
                std::borrow::Cow::Owned(w)
            }
            _ => std::borrow::Cow::Borrowed(wf),
        }
    }

    /// The document's workflow under the id it has here.
    fn to_local(&self, id: &str, mut wf: Workflow) -> Workflow {
        if self.alias.as_deref() == Some(wf.id.as_str()) {
            wf.id = id.to_string();
        }
        wf
    }
}

/// Updates after which a document is compacted into a snapshot.
const COMPACT_AFTER: usize = 100;

/// How long after a merged update its workflow JSON is written (edits in a
/// burst, like a node being dragged, are written once).
const MATERIALIZE_AFTER: Duration = Duration::from_millis(200);

/// Presence entries not refreshed for this long disappear (milliseconds).
const PRESENCE_TIMEOUT_MS: i64 = 30_000;

/// What [`Engine::save_draft_onto`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftSaved {
    /// The workflow was stored before.
    pub existed: bool,
    /// The draft had moved on from the caller's base: its edit was merged
    /// with what came since, so the draft is not exactly what it sent.
    pub merged: bool,
    /// The draft's document version now.
    pub version: String,
    /// How many nodes the draft has now.
    pub nodes: usize,
}

/// A change to a document, for live subscribers (editors, peers).
#[derive(Debug, Clone)]
pub enum DocEvent {
    /// New operations (a Loro update) on workflow `workflow`.
    Update {
        workflow: Arc<str>,
        bytes: Arc<[u8]>,
        /// Who sent it (0: the engine itself: a JSON save, a file, a restore).
        origin: u64,
    },
    /// Presence (Loro ephemeral store update): who looks at what.
    Presence {
        workflow: Arc<str>,
        bytes: Arc<[u8]>,
        origin: u64,
    },
}

impl DocEvent {
    pub fn workflow(&self) -> &str {
        match self {
            DocEvent::Update { workflow, .. } | DocEvent::Presence { workflow, .. } => workflow,
        }
    }

    pub fn origin(&self) -> u64 {
        match self {
            DocEvent::Update { origin, .. } | DocEvent::Presence { origin, .. } => *origin,
        }
    }
}

impl Engine {
    /// Stores a workflow (its canonical text, as planned) and publishes it:
    /// its triggers and runs by id run it from now on. Returns whether it
    /// replaced a version.
    pub async fn save_workflow(&self, plan: &Plan) -> Result<bool> {
        self.save_workflow_as(plan, None).await
    }

    /// [`Engine::save_workflow`], recording where the edit came from
    /// (`api`, `import`, `file`…) in the version it makes. Credentials are
    /// not checked here (an import may come before its credentials); a run
    /// that needs a missing one is refused when it starts.
    pub async fn save_workflow_as(&self, plan: &Plan, origin: Option<&str>) -> Result<bool> {
        let existed = self.save_draft(plan, origin).await?;
        let id = &plan.workflow.id;
        let (text, version) = self
            .store()
            .get_workflow_at(id)
            .await?
            .ok_or_else(|| Error::WorkflowNotFound(id.clone()))?;
        self.store()
            .publish_workflow(id, &text, version.as_deref(), sluice_nodes::now_us())
            .await?;
        self.workflow_changed(id);
        Ok(existed)
    }

    /// Stores a workflow as its draft (what the editor shows and its Run
    /// runs), leaving what runs as it is. Returns whether it replaced a
    /// version. The draft becomes exactly `plan`: edits made since the
    /// caller read it are undone (see [`Engine::save_draft_onto`]).
    pub async fn save_draft(&self, plan: &Plan, origin: Option<&str>) -> Result<bool> {
        Ok(self.save_draft_onto(plan, origin, None).await?.existed)
    }

    /// [`Engine::save_draft`] by a caller that read the draft at document
    /// version `base` (the `x-sluice-version` a GET gave it). If the draft
    /// is still at `base`, the same. If it moved on (a peer's edit, another
    /// window's, the file on disk), `plan` becomes the operations that turn
    /// the document *as of `base`* into it, merged with what came since:
    /// both edits are kept, as the CRDT merges any two concurrent edits,
    /// instead of the later save undoing the other. A `base` that is not
    /// one of the workflow's versions is refused and changes nothing.
    pub async fn save_draft_onto(
        &self,
        plan: &Plan,
        origin: Option<&str>,
        base: Option<&str>,
    ) -> Result<DraftSaved> {
        let id = &plan.workflow.id;
        let existed = self.store().get_workflow(id).await?.is_some();
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        let before = state.doc.version();
        let parent = state.doc.head();
        if let Some(base) = base.filter(|b| existed && *b != parent) {
            let fork = state.doc.at(base).map_err(|_| Error::UnknownBase {
                id: id.clone(),
                base: base.chars().take(80).collect(),
            })?;
            let from = fork.version();
            let update = if fork
                .apply_as(&state.for_doc(&plan.workflow), origin)
                .map_err(Error::Doc)?
            {
                Some(fork.updates_since(&from).map_err(Error::Doc)?)
            } else {
                None
            };
            drop(docs);
            if let Some(update) = update {
                self.import_update(id, &update, 0, origin).await?;
                // The caller and the file mirror want the merged JSON now.
                self.materialize(id).await?;
            }
            let (text, version) = self
                .store()
                .get_workflow_at(id)
                .await?
                .ok_or_else(|| Error::WorkflowNotFound(id.clone()))?;
            let nodes = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("nodes")?.as_array().map(Vec::len))
                .unwrap_or(0);
            return Ok(DraftSaved {
                existed,
                merged: true,
                version: version.unwrap_or_default(),
                nodes,
            });
        }
        // The new JSON becomes the fewest operations on the document.
        let changed = state
            .doc
            .apply_as(&state.for_doc(&plan.workflow), origin)
            .map_err(Error::Doc)?;
        let head = state.doc.head();
        if changed {
            let update = state.doc.updates_since(&before).map_err(Error::Doc)?;
            let author = authors(&before, &state.doc.version());
            let mark = VersionMark {
                parent: &parent,
                version: &head,
                author: &author,
                message: origin,
                gap_us: self.gap_us(),
            };
            let seq = self
                .store()
                .put_workflow_update(id, &plan.workflow.name, &plan.definition, &update, &mark)
                .await?;
            state.last_seq = seq;
            state.pending += 1;
            self.maybe_compact(id, state);
            self.broadcast(DocEvent::Update {
                workflow: id.as_str().into(),
                bytes: update.into(),
                origin: 0,
            });
        } else {
            self.store()
                .put_workflow_at(id, &plan.workflow.name, &plan.definition, Some(&head))
                .await?;
        }
        // A merged update waiting to be materialized is covered by this write.
        self.dirty().remove(id.as_str());
        drop(docs);
        self.draft_changed(id, &plan.workflow);
        self.workflow_changed(id);
        Ok(DraftSaved {
            existed,
            merged: false,
            version: head,
            nodes: plan.workflow.nodes.len(),
        })
    }

    /// Deletes a stored workflow (its runs stay). Returns whether it existed.
    pub async fn delete_workflow(&self, id: &str) -> Result<bool> {
        let mut docs = self.inner.documents.docs.lock().await;
        let existed = self.store().delete_workflow(id).await?;
        docs.remove(id);
        drop(docs);
        self.workflow_changed(id);
        Ok(existed)
    }

    /// Merges a document update from an editor or a peer into workflow
    /// `id`, persists it, and stores the workflow it now holds. Bytes that
    /// are not an update, or that would change the workflow's id, are
    /// refused and change nothing. Returns whether anything changed.
    pub async fn import_doc_update(&self, id: &str, bytes: &[u8]) -> Result<bool> {
        self.import_doc_update_from(id, bytes, 0).await
    }

    /// [`Engine::import_doc_update`] from subscriber `origin` (its own
    /// updates are not sent back to it).
    pub async fn import_doc_update_from(
        &self,
        id: &str,
        bytes: &[u8],
        origin: u64,
    ) -> Result<bool> {
        self.import_update(id, bytes, origin, None).await
    }

    /// [`Engine::import_doc_update_from`] for an update a peer made: the
    /// version it makes names the peer (`peer <label>`), and the draft it
    /// changes does not publish itself (see [`Engine::unpublished_from_peers`]).
    pub async fn import_peer_update(
        &self,
        id: &str,
        bytes: &[u8],
        origin: u64,
        label: &str,
    ) -> Result<bool> {
        let message = format!("{}{label}", super::publish::PEER_PREFIX);
        self.import_update(id, bytes, origin, Some(&message)).await
    }

    /// A fresh subscriber id: the origin of one editor's or peer's updates,
    /// so they are not sent back to it (0 is the engine itself).
    pub fn new_origin(&self) -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn gap_us(&self) -> i64 {
        self.inner
            .documents
            .version_gap_secs
            .saturating_mul(1_000_000)
    }

    async fn import_update(
        &self,
        id: &str,
        bytes: &[u8],
        origin: u64,
        message: Option<&str>,
    ) -> Result<bool> {
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        let before = state.doc.version();
        let parent = state.doc.head();
        let imported = state.doc.import(bytes);
        let fresh = state.doc.version();
        if imported.is_ok() && fresh == before {
            return Ok(false);
        }
        let checked = imported
            .map_err(Error::Doc)
            .and_then(|()| match state.doc.id() {
                Some(new_id) if new_id != state.alias.as_deref().unwrap_or(id) => {
                    Err(Error::DocRenamed {
                        id: id.to_string(),
                        renamed: new_id,
                    })
                }
                _ => Ok(()),
            });
        if let Err(e) = checked {
            // Whatever got in is dropped: the stored document is the truth.
            docs.remove(id);
            return Err(e);
        }
        // The update is durable now; the workflow JSON follows shortly (or
        // at once when something needs it: see `materialize`).
        let update = state.doc.updates_since(&before).map_err(Error::Doc)?;
        let (head, author) = (state.doc.head(), authors(&before, &fresh));
        let mark = VersionMark {
            parent: &parent,
            version: &head,
            author: &author,
            message,
            gap_us: self.gap_us(),
        };
        state.last_seq = self.store().append_doc_update(id, &update, &mark).await?;
        state.pending += 1;
        self.maybe_compact(id, state);
        self.broadcast(DocEvent::Update {
            workflow: id.into(),
            bytes: update.into(),
            origin,
        });
        drop(docs);
        if self.dirty().insert(id.to_string()) {
            let engine = self.clone();
            let id = id.to_string();
            tokio::spawn(async move {
                tokio::time::sleep(MATERIALIZE_AFTER).await;
                if let Err(e) = engine.materialize(&id).await {
                    tracing_log(&format!("workflow {id}: {e}"));
                }
            });
        }
        Ok(true)
    }

    /// Applies `wf` (an edit made elsewhere, e.g. a file changed on disk)
    /// as the operations that turn the document *as of `base`* into `wf`,
    /// so edits made since `base` (by editors, peers) are kept, not undone.
    /// Returns whether anything changed.
    pub async fn apply_edit_at(
        &self,
        id: &str,
        base: &str,
        wf: &Workflow,
        origin: &str,
    ) -> Result<bool> {
        let update = {
            let mut docs = self.inner.documents.docs.lock().await;
            let state = self.doc_state(&mut docs, id).await?;
            let fork = state.doc.at(base).map_err(Error::Doc)?;
            let from = fork.version();
            if !fork
                .apply_as(&state.for_doc(wf), Some(origin))
                .map_err(Error::Doc)?
            {
                return Ok(false);
            }
            fork.updates_since(&from).map_err(Error::Doc)?
        };
        let changed = self.import_update(id, &update, 0, Some(origin)).await?;
        // Planning and the file mirror want the JSON now, not in 200 ms.
        self.materialize(id).await?;
        Ok(changed)
    }

    /// Writes the JSON of a workflow whose document moved ahead of it, and
    /// tells the triggers. A no-op for workflows that are up to date.
    pub async fn materialize(&self, id: &str) -> Result<()> {
        let mut docs = self.inner.documents.docs.lock().await;
        if !self.dirty().remove(id) {
            return Ok(());
        }
        let state = self.doc_state(&mut docs, id).await?;
        let wf = state.to_local(id, state.doc.to_workflow().map_err(Error::Doc)?);
        // A document is stored (and mirrored) as JSON only when it names
        // this workflow and its nodes by slugs. Other problems (a field
        // still being typed) are allowed in the stored JSON: runs refuse it
        // with the problem named.
        if let Err(e) = check_identity(id, &wf) {
            self.dirty().insert(id.to_string());
            return Err(e);
        }
        let head = state.doc.head();
        self.store()
            .put_workflow_at(id, &wf.name, &wf.to_json_pretty(), Some(&head))
            .await?;
        drop(docs);
        self.draft_changed(id, &wf);
        self.workflow_changed(id);
        Ok(())
    }

    /// Brings every stored workflow JSON up to its document (after a crash
    /// between a document update and its materialization).
    pub(super) async fn materialize_stale(&self) -> Result<()> {
        for id in self.store().stale_workflows().await? {
            self.dirty().insert(id.clone());
            self.materialize(&id).await?;
        }
        Ok(())
    }

    /// What changed in workflow `id` from document version `from` to `to`
    /// (`""`: the empty document).
    pub async fn summarize(&self, id: &str, from: &str, to: &str) -> Result<Changes> {
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        Ok(state.doc.summarize(from, to)?)
    }

    /// Draft changes per workflow (see [`Engine::draft_changed`]).
    pub(super) fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.inner
            .documents
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Workflows whose document is ahead of their stored JSON.
    fn dirty(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.inner
            .documents
            .dirty
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether workflow `id`'s document is ahead of its stored JSON.
    pub(super) fn is_dirty(&self, id: &str) -> bool {
        self.dirty().contains(id)
    }

    /// The stored JSON of workflow `id`, brought up to its document first,
    /// with the document version it holds (None: no such workflow).
    pub async fn workflow_text(&self, id: &str) -> Result<Option<(String, Option<String>)>> {
        self.materialize(id).await?;
        Ok(self.store().get_workflow_at(id).await?)
    }

    /// Everything of workflow `id`'s document a peer at `since` lacks (all
    /// of it for an empty `since`), with the current version vector.
    pub async fn doc_updates(&self, id: &str, since: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        let since = if since.is_empty() {
            Default::default()
        } else {
            sluice_model::doc::decode_version(since).map_err(Error::Doc)?
        };
        let bytes = state.doc.updates_since(&since).map_err(Error::Doc)?;
        Ok((
            bytes,
            sluice_model::doc::encode_version(&state.doc.version()),
        ))
    }

    /// Document changes from now on, for every workflow.
    pub fn doc_events(&self) -> tokio::sync::broadcast::Receiver<DocEvent> {
        self.inner.documents.events.subscribe()
    }

    fn broadcast(&self, event: DocEvent) {
        // Nobody listening is fine.
        let _ = self.inner.documents.events.send(event);
    }

    /// Merges a presence update (Loro ephemeral store) from subscriber
    /// `origin` into workflow `id`'s presence and relays it. Returns the
    /// keys it set, so they can be cleared when the subscriber leaves.
    pub fn presence_update(&self, id: &str, bytes: &[u8], origin: u64) -> Result<Vec<String>> {
        let keys = {
            let mut all = self
                .inner
                .documents
                .presence
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let p = all
                .entry(id.to_string())
                .or_insert_with(|| Presence::new(PRESENCE_TIMEOUT_MS));
            p.apply(bytes).map_err(Error::Doc)?
        };
        self.broadcast(DocEvent::Presence {
            workflow: id.into(),
            bytes: bytes.into(),
            origin,
        });
        Ok(keys)
    }

    /// The names of those who have workflow `id` open in an editor now
    /// (from their presence), sorted, each once.
    pub fn editors(&self, id: &str) -> Vec<String> {
        let all = self
            .inner
            .documents
            .presence
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = all
            .get(id)
            .map(|p| {
                p.states()
                    .values()
                    .filter_map(|v| v.get("name")?.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names.dedup();
        names
    }

    /// Everyone's presence on workflow `id`, encoded (for a new subscriber).
    pub fn presence_state(&self, id: &str) -> Vec<u8> {
        let all = self
            .inner
            .documents
            .presence
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.get(id).map(Presence::encode_all).unwrap_or_default()
    }

    /// Clears presence `keys` of a subscriber that left, and tells the others.
    pub fn presence_leave(&self, id: &str, keys: &[String], origin: u64) {
        if keys.is_empty() {
            return;
        }
        let bytes = {
            let mut all = self
                .inner
                .documents
                .presence
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let Some(p) = all.get_mut(id) else { return };
            let bytes = p.remove(keys);
            if p.is_empty() {
                all.remove(id);
            }
            bytes
        };
        self.broadcast(DocEvent::Presence {
            workflow: id.into(),
            bytes: bytes.into(),
            origin,
        });
    }

    /// The versions of workflow `id`, newest first, `limit` from `offset`,
    /// each with what it changed.
    pub async fn history(&self, id: &str, offset: u32, limit: u32) -> Result<Vec<VersionEntry>> {
        self.require_workflow(id).await?;
        let rows = self.store().list_versions(id, offset, limit).await?;
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        rows.into_iter()
            .map(|r| {
                let changes = state
                    .doc
                    .summarize(&r.parent, &r.version)
                    .map_err(Error::Doc)?;
                Ok(VersionEntry {
                    summary: changes.to_string(),
                    changes,
                    version: r.version,
                    parent: r.parent,
                    author: r.author,
                    message: r.message,
                    started_at_us: r.started_at_us,
                    at_us: r.at_us,
                    edits: r.edits,
                    published_at_us: r.published_at_us,
                })
            })
            .collect()
    }

    /// Workflow `id` exactly as it was at document version `version`
    /// (from [`Engine::history`] or a run's pinned version).
    pub async fn workflow_at(&self, id: &str, version: &str) -> Result<Workflow> {
        self.require_workflow(id).await?;
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        let past = state.doc.at(version).map_err(Error::Doc)?;
        Ok(state.to_local(id, past.to_workflow().map_err(Error::Doc)?))
    }

    /// Makes workflow `id` what it was at `version`, as new operations on
    /// top (history is never rewritten; the restore is a version of its
    /// own). Returns the new version.
    pub async fn restore_version(&self, id: &str, version: &str) -> Result<String> {
        let wf = self.workflow_at(id, version).await?;
        let plan = Plan::new(wf)?;
        self.save_draft(&plan, Some(&format!("restore {version}")))
            .await?;
        let mut docs = self.inner.documents.docs.lock().await;
        Ok(self.doc_state(&mut docs, id).await?.doc.head())
    }

    async fn require_workflow(&self, id: &str) -> Result<()> {
        if self.store().get_workflow(id).await?.is_none() && !self.is_dirty(id) {
            return Err(Error::WorkflowNotFound(id.to_string()));
        }
        Ok(())
    }

    /// The cached document of `id`, loaded from the store on first use. A
    /// workflow stored before documents existed gets one made from its JSON.
    async fn doc_state<'a>(
        &self,
        docs: &'a mut HashMap<String, DocState>,
        id: &str,
    ) -> Result<&'a mut DocState> {
        // Every document operation comes through here (API, WebSocket,
        // files, peers): an id that is not a slug names no workflow, and
        // could name a path.
        check_id(id)?;
        if !docs.contains_key(id) {
            let corrupt = |e: sluice_model::doc::DocError| Error::Corrupt {
                run: format!("document of workflow {id}"),
                message: e.to_string(),
            };
            let stored = self.store().load_doc(id).await?;
            let doc = WorkflowDoc::new();
            doc.set_version_gap(self.inner.documents.version_gap_secs);
            if let Some(snapshot) = &stored.snapshot {
                doc.import(snapshot).map_err(corrupt)?;
            }
            for (_, update) in &stored.updates {
                doc.import(update).map_err(corrupt)?;
            }
            let mut state = DocState {
                doc,
                last_seq: stored.updates.last().map_or(stored.upto_seq, |u| u.0),
                pending: stored.updates.len(),
                compacting: false,
                alias: self.store().doc_alias(id).await?,
            };
            if stored.snapshot.is_none()
                && stored.updates.is_empty()
                && let Some(text) = self.store().get_workflow(id).await?
                && let Ok(wf) = Workflow::from_json(&text)
                && state
                    .doc
                    .apply_as(&wf, Some("import"))
                    .map_err(Error::Doc)?
            {
                let all = state.doc.snapshot().map_err(Error::Doc)?;
                let head = state.doc.head();
                let author = authors(&Default::default(), &state.doc.version());
                let mark = VersionMark {
                    parent: "",
                    version: &head,
                    author: &author,
                    message: Some("import"),
                    gap_us: -1,
                };
                state.last_seq = self
                    .store()
                    .put_workflow_update(id, &wf.name, &text, &all, &mark)
                    .await?;
                state.pending = 1;
            }
            docs.insert(id.to_string(), state);
        }
        docs.get_mut(id)
            .ok_or_else(|| Error::WorkflowNotFound(id.to_string()))
    }

    /// Folds the updates so far into a snapshot, in the background: the
    /// edit that crosses the threshold does not wait for it. The store
    /// swaps updates for the snapshot in one transaction, so a crash at any
    /// point loses nothing.
    fn maybe_compact(&self, id: &str, state: &mut DocState) {
        if state.pending < COMPACT_AFTER || state.compacting {
            return;
        }
        state.compacting = true;
        let engine = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            if let Err(e) = engine.compact(&id).await {
                tracing_log(&format!("compacting workflow {id}: {e}"));
            }
        });
    }

    /// Compacts workflow `id`'s stored document now.
    pub async fn compact(&self, id: &str) -> Result<()> {
        let (snapshot, upto) = {
            let mut docs = self.inner.documents.docs.lock().await;
            let Some(state) = docs.get_mut(id) else {
                return Ok(());
            };
            state.compacting = false;
            let snapshot = state.doc.snapshot().map_err(Error::Doc)?;
            let folded = state.pending;
            state.pending = 0;
            (snapshot, (state.last_seq, folded))
        };
        // Outside the lock: edits go on while the snapshot is written.
        if let Err(e) = self.store().compact_doc(id, &snapshot, upto.0).await {
            // Nothing was lost; try again with the next edit.
            if let Some(state) = self.inner.documents.docs.lock().await.get_mut(id) {
                state.pending += upto.1;
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Loads workflow `id`'s document (from SQLite unless cached) and returns
    /// its version vector, encoded.
    pub async fn doc_version(&self, id: &str) -> Result<Vec<u8>> {
        let mut docs = self.inner.documents.docs.lock().await;
        let state = self.doc_state(&mut docs, id).await?;
        Ok(sluice_model::doc::encode_version(&state.doc.version()))
    }

    /// The current version (frontiers, `counter@peer,…`) of workflow `id`.
    pub async fn doc_head(&self, id: &str) -> Result<String> {
        let mut docs = self.inner.documents.docs.lock().await;
        Ok(self.doc_state(&mut docs, id).await?.doc.head())
    }

    /// The bytes workflow `id`'s document takes in the database.
    pub async fn doc_size(&self, id: &str) -> Result<u64> {
        Ok(self.store().doc_size(id).await?)
    }

    /// Forgets the in-memory documents (the next use loads them from the
    /// store): what a restart does.
    pub async fn drop_doc_cache(&self) {
        self.inner.documents.docs.lock().await.clear();
    }
}

/// Refuses an id that is not a workflow id (a slug).
fn check_id(id: &str) -> Result<()> {
    if sluice_model::validate::is_slug(id) {
        Ok(())
    } else {
        Err(Error::NotWorkflowId(id.chars().take(80).collect()))
    }
}

/// A materialized document must name workflow `id` and its nodes by slugs.
fn check_identity(id: &str, wf: &Workflow) -> Result<()> {
    if wf.id != id {
        return Err(Error::DocNamesOther {
            id: id.to_string(),
            named: wf.id.chars().take(80).collect(),
        });
    }
    if let Some(n) = wf
        .nodes
        .iter()
        .find(|n| !sluice_model::validate::is_slug(&n.id))
    {
        return Err(Error::NodeIdNotSlug {
            workflow: id.to_string(),
            node: n.id.chars().take(80).collect(),
        });
    }
    Ok(())
}
