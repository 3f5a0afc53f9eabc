//! `trigger.file`: a watched folder (notify, debounced). Each created,
//! modified or removed file whose name matches the glob starts a run with
//! `{"event", "path", "name"}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_full::notify::event::{ModifyKind, RenameMode};
use notify_debouncer_full::notify::{EventKind, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use serde_json::json;
use sluice_model::kinds::{FileTrigger, Kind};
use sluice_runtime::{Engine, Plan};
use tokio::task::AbortHandle;

const DEFAULT_DEBOUNCE_MS: u64 = 200;

/// A file trigger that cannot be armed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The folder is missing or not allowed (`[files] allow`): the
    /// message names it.
    #[error(transparent)]
    Folder(sluice_nodes::Error),
    #[error("cannot watch `{}`: {source}", dir.display())]
    Watch {
        dir: PathBuf,
        source: notify_debouncer_full::notify::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn arm(
    engine: Engine,
    plan: Arc<Plan>,
    trigger: Arc<str>,
    cfg: &FileTrigger,
) -> Result<AbortHandle> {
    // Only folders the user allowed (`[files] allow`), like the file nodes:
    // a workflow cannot watch, and learn the file names of, anything else.
    let dir = sluice_nodes::files::resolve_dir(
        Kind::FileTrigger.name(),
        &engine.settings().files.allow,
        &cfg.path,
    )
    .map_err(Error::Folder)?;
    let glob = cfg.glob.clone();
    let events: Vec<&'static str> = cfg.events.iter().map(|e| e.as_str()).collect();
    let debounce = Duration::from_millis(cfg.debounce_ms.unwrap_or(DEFAULT_DEBOUNCE_MS).max(1));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(debounce, None, move |res: DebounceEventResult| {
        // The receiver is gone only when the trigger was disarmed.
        tx.send(res).ok();
    })
    .map_err(|source| Error::Watch {
        dir: dir.clone(),
        source,
    })?;
    debouncer
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|source| Error::Watch {
            dir: dir.clone(),
            source,
        })?;
    let task = tokio::spawn(async move {
        // Owned by the task: aborting the task drops it and stops the watch.
        let _debouncer = debouncer;
        while let Some(res) = rx.recv().await {
            let Ok(batch) = res else { continue };
            for ev in batch {
                for (change, path) in classify(&ev.event.kind, &ev.event.paths) {
                    if !events.contains(&change) || !matches_glob(glob.as_deref(), &path) {
                        continue;
                    }
                    let name = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let message =
                        json!({"event": change, "path": path.display().to_string(), "name": name});
                    // Like a schedule fire, an event is not refused by the engine's
                    // run limit (it would be lost): it gets an id of its own.
                    let id = sluice_runtime::executor::new_run_id();
                    if let Err(e) = engine
                        .start_with_id(id, plan.clone(), Some(&trigger), Arc::new(message), None)
                        .await
                    {
                        crate::warn(&format!(
                            "workflow `{}` file trigger `{trigger}`: {e}",
                            plan.workflow.id
                        ));
                    }
                }
            }
        }
    });
    Ok(task.abort_handle())
}

/// What happened to which path. The debouncer stitches a rename into one
/// event: the old name is removed, the new one created.
fn classify(kind: &EventKind, paths: &[PathBuf]) -> Vec<(&'static str, PathBuf)> {
    let all = |c: &'static str| paths.iter().map(|p| (c, p.clone())).collect();
    match kind {
        EventKind::Create(_) => all("created"),
        EventKind::Remove(_) => all("removed"),
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if paths.len() == 2 => {
            vec![("removed", paths[0].clone()), ("created", paths[1].clone())]
        }
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => all("removed"),
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => all("created"),
        EventKind::Modify(ModifyKind::Metadata(_)) | EventKind::Modify(ModifyKind::Name(_)) => {
            Vec::new()
        }
        EventKind::Modify(_) => all("modified"),
        _ => Vec::new(),
    }
}

/// `*` (any run of characters) and `?` (one character) on the file name.
fn matches_glob(glob: Option<&str>, path: &Path) -> bool {
    let Some(glob) = glob else { return true };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    wildcard(glob.as_bytes(), name.as_bytes())
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    // Iterative matcher with one backtrack point: linear in practice, no recursion.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (g, name, ok) in [
            ("*.csv", "a.csv", true),
            ("*.csv", "a.csv.tmp", false),
            ("report-??.txt", "report-01.txt", true),
            ("report-??.txt", "report-1.txt", false),
            ("*", "", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
        ] {
            assert_eq!(wildcard(g.as_bytes(), name.as_bytes()), ok, "{g} {name}");
        }
    }
}
