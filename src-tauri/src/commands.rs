//! The app's commands: thin wrappers over the engine, for the window's
//! scripts and the native menus (which call the same functions).

use std::path::{Path, PathBuf};

use serde::Serialize;
use sluice_model::Workflow;
use sluice_runtime::Plan;
use tauri::{AppHandle, Runtime, State};

use crate::Desktop;

/// Why a command failed. A script receives its message as a string (what
/// the commands have always rejected with); the native menus show it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the engine is stopped")]
    Stopped,
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not a workflow (not JSON, or not the format).
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: sluice_model::workflow::ParseError,
    },
    /// The workflow does not validate.
    #[error("{}: {source}", path.display())]
    Invalid {
        path: PathBuf,
        source: sluice_runtime::Invalid,
    },
    #[error("no workflow `{0}`")]
    NoWorkflow(String),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] sluice_runtime::executor::Error),
    #[error(transparent)]
    Link(#[from] crate::links::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// As its message: the same string the commands rejected with before
/// they had a type.
impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What the app is doing.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Status {
    /// The trigger port (`http://127.0.0.1:4260`).
    pub url: String,
    pub data_dir: PathBuf,
    pub active_runs: usize,
    pub version: String,
}

#[tauri::command]
pub fn status(state: State<'_, Desktop>) -> Result<Status> {
    state
        .with(|h| Status {
            url: h.base_url(),
            data_dir: h.data_dir.clone(),
            active_runs: h.engine.active_runs(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .ok_or(Error::Stopped)
}

/// Imports a workflow file (`*.flow.json`); returns its id. A workflow
/// with that id is replaced, as `sluice import` does.
pub async fn import_file(state: &Desktop, path: &Path) -> Result<String> {
    let engine = state.engine().ok_or(Error::Stopped)?;
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
    let wf = Workflow::from_json(&text).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let id = wf.id.clone();
    let plan = Plan::new(wf).map_err(|source| Error::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    engine.save_workflow_as(&plan, Some("import")).await?;
    Ok(id)
}

/// Writes workflow `id` to `path` (whole or not at all).
pub async fn export_file(state: &Desktop, id: &str, path: &Path) -> Result<()> {
    let engine = state.engine().ok_or(Error::Stopped)?;
    let (text, _) = engine
        .workflow_text(id)
        .await?
        .ok_or_else(|| Error::NoWorkflow(id.to_string()))?;
    let tmp = path.with_extension("json.part");
    if let Err(source) = tokio::fs::write(&tmp, text.as_bytes()).await {
        return Err(Error::Write { path: tmp, source });
    }
    tokio::fs::rename(&tmp, path)
        .await
        .map_err(|source| Error::Write {
            path: path.to_path_buf(),
            source,
        })
}

#[tauri::command]
pub async fn import_workflow(state: State<'_, Desktop>, path: PathBuf) -> Result<String> {
    import_file(&state, &path).await
}

#[tauri::command]
pub async fn export_workflow(state: State<'_, Desktop>, id: String, path: PathBuf) -> Result<()> {
    export_file(&state, &id, &path).await
}

/// Opens a `sluice://` link in the window.
#[tauri::command]
pub fn open<R: Runtime>(app: AppHandle<R>, link: String) -> Result<()> {
    crate::links::parse(&link)?;
    crate::open_link(&app, &link);
    Ok(())
}
