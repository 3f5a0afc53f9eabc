//! The workflows folder (DESIGN §6): every stored workflow mirrored to
//! `<dir>/<id>.flow.json`, and edits to those files (a text editor, a
//! `git pull`) turned into operations on the workflow's document.
//!
//! Rules:
//! - **Out**: a workflow that changes is written to its file (debounced,
//!   atomically: temp file, fsync, rename) in the canonical, stable
//!   formatting, so a git diff shows only what changed.
//! - **In**: a file whose content differs from what was last written or
//!   read becomes the operations that turn the document *as of the version
//!   the file was written from* into the file's workflow: edits made
//!   meanwhile in an editor survive. A new file imports a new workflow.
//!   What a file edit changes is the **draft**: what runs changes when the
//!   user publishes, unless `[workflows] publish_file_edits = true`.
//! - **No echo**: the mirror remembers the hash of what it wrote; its own
//!   writes are recognized and ignored.
//! - **Bad files change nothing**: invalid JSON (reported with line and
//!   column), a workflow that does not validate, or a file whose `id` is not
//!   its name is reported and the document is left as it was.
//! - **Deleting a file never deletes a workflow**: it is reported, and the
//!   file comes back at the workflow's next change. Deleting the workflow
//!   (API, CLI) deletes its file, unless the file holds edits not yet read.
//! - **Restarts**: what was last written and read is kept in
//!   `<data-dir>/mirror.json`; at start, files changed while the engine was
//!   down are read in, and files behind their workflow are rewritten.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use serde::{Deserialize, Serialize};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Plan};
use tokio::sync::broadcast::error::RecvError;

const SUFFIX: &str = ".flow.json";
/// Edits to files within this window are read once.
const FILE_DEBOUNCE: Duration = Duration::from_millis(100);
/// Changes to a workflow within this window are written once.
const WRITE_DEBOUNCE: Duration = Duration::from_millis(150);

/// Why the mirror cannot start (or go on) watching its folder.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot create {}: {source}", dir.display())]
    CreateDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// The folder's real path cannot be found.
    #[error("{}: {source}", dir.display())]
    Resolve {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot watch {}: {source}", dir.display())]
    Watch {
        dir: PathBuf,
        source: notify_debouncer_full::notify::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the mirror did or refused, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// A workflow's file was (re)written.
    Written { id: String },
    /// A file's edit was merged into its workflow (`created`: a new one).
    Read { id: String, created: bool },
    /// A file that changes nothing: reported, document untouched.
    Invalid { file: PathBuf, message: String },
    /// A workflow's file was deleted; the workflow is kept.
    FileDeleted { id: String },
    /// A workflow was deleted, and so was its file.
    Removed { id: String },
    /// Something went wrong writing or reading (I/O, the engine).
    Failed { file: PathBuf, message: String },
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Report::Written { id } => write!(f, "wrote {id}{SUFFIX}"),
            Report::Read { id, created: true } => {
                write!(f, "imported new workflow `{id}` from its file")
            }
            Report::Read { id, .. } => write!(f, "merged the edit of {id}{SUFFIX}"),
            Report::Invalid { file, message } => {
                write!(f, "{}: {message} (nothing changed)", file.display())
            }
            Report::FileDeleted { id } => write!(
                f,
                "{id}{SUFFIX} was deleted; workflow `{id}` is kept (delete it with the API or the editor); \
                 its file comes back at its next change"
            ),
            Report::Removed { id } => write!(f, "workflow `{id}` was deleted, and so was its file"),
            Report::Failed { file, message } => write!(f, "{}: {message}", file.display()),
        }
    }
}

/// What the mirror knows of each file: the hash of the content last
/// written or read, and the document version that content was at.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    dir: PathBuf,
    files: BTreeMap<String, Synced>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Synced {
    hash: String,
    version: Option<String>,
}

/// The folder mirror of an engine's workflows.
pub struct Mirror {
    engine: Engine,
    dir: PathBuf,
    state_file: PathBuf,
    state: State,
    reports: tokio::sync::broadcast::Sender<Report>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror").field("dir", &self.dir).finish()
    }
}

fn hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

impl Mirror {
    /// A mirror of `engine`'s workflows in `dir` (created if missing).
    pub fn new(engine: Engine, dir: &Path) -> Result<Mirror> {
        std::fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let dir = dir.canonicalize().map_err(|source| Error::Resolve {
            dir: dir.to_path_buf(),
            source,
        })?;
        let state_file = engine.store().data_dir().join("mirror.json");
        let state = std::fs::read_to_string(&state_file)
            .ok()
            .and_then(|t| serde_json::from_str::<State>(&t).ok())
            .filter(|s| s.dir == dir)
            .unwrap_or_else(|| State {
                dir: dir.clone(),
                files: BTreeMap::new(),
            });
        Ok(Mirror {
            engine,
            dir,
            state_file,
            state,
            reports: tokio::sync::broadcast::channel(256).0,
        })
    }

    /// What the mirror does from now on.
    pub fn reports(&self) -> tokio::sync::broadcast::Receiver<Report> {
        self.reports.subscribe()
    }

    fn report(&self, r: Report) {
        match &r {
            Report::Invalid { .. } | Report::FileDeleted { .. } | Report::Failed { .. } => {
                crate::warn(&r.to_string())
            }
            _ => {}
        }
        self.reports.send(r).ok();
    }

    /// The file of workflow `id`; only a slug names one, so no id can
    /// reach outside the folder (`..`, `/`).
    fn path_of(&self, id: &str) -> Option<PathBuf> {
        sluice_model::validate::is_slug(id).then(|| self.dir.join(format!("{id}{SUFFIX}")))
    }

    /// The workflow id a file in the folder mirrors, if it is one.
    fn id_of(&self, path: &Path) -> Option<String> {
        if path.parent()? != self.dir {
            return None;
        }
        let name = path.file_name()?.to_str()?;
        let id = name.strip_suffix(SUFFIX)?;
        sluice_model::validate::is_slug(id).then(|| id.to_string())
    }

    /// Syncs the folder with the engine, then follows both until the
    /// engine's change channel closes or the task is dropped.
    pub async fn run(mut self) -> Result<()> {
        let (tx, mut files) = tokio::sync::mpsc::unbounded_channel::<DebounceEventResult>();
        let watch_error = |source| Error::Watch {
            dir: self.dir.clone(),
            source,
        };
        let mut debouncer = new_debouncer(FILE_DEBOUNCE, None, move |res| {
            tx.send(res).ok();
        })
        .map_err(watch_error)?;
        debouncer
            .watch(&self.dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        let mut changes = self.engine.workflow_changes();
        self.reconcile().await;
        let mut pending: HashSet<String> = HashSet::new();
        let mut flush_at: Option<tokio::time::Instant> = None;
        loop {
            let deadline =
                flush_at.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                batch = files.recv() => {
                    let Some(Ok(batch)) = batch else {
                        if batch.is_none() { return Ok(()) }
                        continue;
                    };
                    let mut paths: Vec<PathBuf> = batch
                        .into_iter()
                        .flat_map(|e| e.event.paths)
                        .collect();
                    paths.sort();
                    paths.dedup();
                    for p in paths {
                        if let Some(id) = self.id_of(&p) {
                            self.file_changed(&id).await;
                        }
                    }
                }
                change = changes.recv() => match change {
                    Ok(id) => {
                        pending.insert(id);
                        flush_at.get_or_insert_with(|| tokio::time::Instant::now() + WRITE_DEBOUNCE);
                    }
                    Err(RecvError::Lagged(_)) => {
                        // Missed some: check them all.
                        if let Ok(all) = self.engine.store().list_workflows().await {
                            pending.extend(all.into_iter().map(|w| w.id));
                        }
                        flush_at.get_or_insert_with(|| tokio::time::Instant::now() + WRITE_DEBOUNCE);
                    }
                    Err(RecvError::Closed) => return Ok(()),
                },
                () = tokio::time::sleep_until(deadline), if flush_at.is_some() => {
                    flush_at = None;
                    let mut ids: Vec<String> = pending.drain().collect();
                    ids.sort();
                    for id in ids {
                        self.write_out(&id).await;
                    }
                }
            }
        }
    }

    /// At start: read files edited while the engine was down, import new
    /// ones, and write every workflow whose file is missing or behind.
    async fn reconcile(&mut self) {
        let stored: Vec<String> = match self.engine.store().list_workflows().await {
            Ok(all) => all.into_iter().map(|w| w.id).collect(),
            Err(e) => {
                self.report(Report::Failed {
                    file: self.dir.clone(),
                    message: e.to_string(),
                });
                return;
            }
        };
        let mut on_disk: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| self.id_of(&e.path()))
                    .collect()
            })
            .unwrap_or_default();
        on_disk.sort();
        for id in &on_disk {
            self.file_changed(id).await;
        }
        // Missing files are written; files read in (or unchanged) are
        // brought up to their document.
        for id in stored {
            self.write_out(&id).await;
        }
    }

    /// A file changed (or appeared, or went away).
    async fn file_changed(&mut self, id: &str) {
        let Some(path) = self.path_of(id) else {
            return;
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.state.files.remove(id).is_some() {
                    self.save_state();
                    if matches!(self.engine.store().get_workflow(id).await, Ok(Some(_))) {
                        self.report(Report::FileDeleted { id: id.to_string() });
                    }
                }
                return;
            }
            Err(e) => {
                self.report(Report::Failed {
                    file: path,
                    message: format!("cannot read: {e}"),
                });
                return;
            }
        };
        let h = hash(&text);
        let known = self.state.files.get(id).cloned();
        if known.as_ref().is_some_and(|k| k.hash == h) {
            // Our own write, or nothing new.
            return;
        }
        let invalid = |message: String| Report::Invalid {
            file: path.clone(),
            message,
        };
        let wf = match Workflow::from_json(&text) {
            Ok(wf) => wf,
            Err(e) => return self.report(invalid(e.to_string())),
        };
        if wf.id != id {
            return self.report(invalid(format!(
                "the file's `id` is `{}`, its name says `{id}` (rename one of them)",
                wf.id
            )));
        }
        let plan = match Plan::new(wf) {
            Ok(p) => p,
            Err(e) => return self.report(invalid(e.to_string())),
        };
        let current = match self.engine.workflow_text(id).await {
            Ok(c) => c,
            Err(e) => {
                return self.report(Report::Failed {
                    file: path,
                    message: e.to_string(),
                });
            }
        };
        let created = current.is_none();
        let same = current
            .as_ref()
            .and_then(|(t, _)| Workflow::from_json(t).ok())
            .is_some_and(|w| w == plan.workflow);
        let result = match (&current, known.and_then(|k| k.version)) {
            _ if same => Ok(false),
            // Edits made since the file was written are kept.
            (Some(_), Some(base)) => {
                self.engine
                    .apply_edit_at(id, &base, &plan.workflow, "file")
                    .await
            }
            _ => self
                .engine
                .save_draft(&plan, Some("file"))
                .await
                .map(|_| true),
        };
        // A file edit is the draft, unless the user deploys with files.
        let result = match result {
            Ok(true) if self.engine.settings().workflows.publish_file_edits => {
                self.engine.publish(id, None).await.map(|_| true)
            }
            other => other,
        };
        match result {
            Ok(changed) => {
                let version = self.engine.doc_head(id).await.ok();
                self.state
                    .files
                    .insert(id.to_string(), Synced { hash: h, version });
                self.save_state();
                if changed {
                    self.report(Report::Read {
                        id: id.to_string(),
                        created,
                    });
                }
            }
            Err(e) => self.report(Report::Failed {
                file: path,
                message: e.to_string(),
            }),
        }
    }

    /// Writes workflow `id`'s file if it differs from the workflow (or
    /// removes it when the workflow is gone).
    async fn write_out(&mut self, id: &str) {
        let Some(path) = self.path_of(id) else {
            return self.report(Report::Failed {
                file: self.dir.clone(),
                message: format!("`{id}` is not a workflow id; it has no file"),
            });
        };
        let current = match self.engine.workflow_text(id).await {
            Ok(c) => c,
            Err(e) => {
                return self.report(Report::Failed {
                    file: path,
                    message: e.to_string(),
                });
            }
        };
        let on_disk = std::fs::read_to_string(&path).ok();
        let Some((text, version)) = current else {
            // Deleted: the file goes too, unless it holds unread edits.
            let known = self.state.files.remove(id);
            self.save_state();
            if let (Some(k), Some(disk)) = (known, on_disk)
                && k.hash == hash(&disk)
            {
                match std::fs::remove_file(&path) {
                    Ok(()) => self.report(Report::Removed { id: id.to_string() }),
                    Err(e) => self.report(Report::Failed {
                        file: path,
                        message: format!("cannot remove: {e}"),
                    }),
                }
            }
            return;
        };
        let text = if text.ends_with('\n') {
            text
        } else {
            format!("{text}\n")
        };
        let h = hash(&text);
        if let Some(disk) = &on_disk
            && hash(disk) != h
            && self
                .state
                .files
                .get(id)
                .is_none_or(|k| k.hash != hash(disk))
        {
            // The file changed and was not read yet (its event is on the
            // way): read it first so its edit is merged, not overwritten.
            self.file_changed(id).await;
            if self
                .state
                .files
                .get(id)
                .is_some_and(|k| k.hash == hash(disk))
            {
                return Box::pin(self.write_out(id)).await;
            }
            // An invalid file stays as the user left it (it was reported).
            return;
        }
        if on_disk.as_deref() != Some(text.as_str()) {
            if let Err(e) = write_atomic(&path, &text) {
                return self.report(Report::Failed {
                    file: path,
                    message: format!("cannot write: {e}"),
                });
            }
            self.report(Report::Written { id: id.to_string() });
        }
        self.state
            .files
            .insert(id.to_string(), Synced { hash: h, version });
        self.save_state();
    }

    fn save_state(&self) {
        let Ok(text) = serde_json::to_string_pretty(&self.state) else {
            return;
        };
        if let Err(e) = write_atomic(&self.state_file, &text) {
            crate::warn(&format!("cannot write {}: {e}", self.state_file.display()));
        }
    }
}

/// Temp file in the same folder, fsync, rename, fsync the folder: readers
/// see the old file or the new one, never half of one.
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            d.sync_all().ok();
        }
        Ok(())
    })();
    if result.is_err() {
        std::fs::remove_file(&tmp).ok();
    }
    result
}
