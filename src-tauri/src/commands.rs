//! The app's commands: thin wrappers over the engine, for the window's
//! scripts and the native menus (which call the same functions).

use std::path::{Path, PathBuf};

use serde::Serialize;
use sluice_model::Workflow;
use sluice_runtime::Plan;
use tauri::{AppHandle, Runtime, State};

use crate::Desktop;

/// What the app is doing.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Status {
    /// The trigger port (`http://127.0.0.1:4260`).
    pub url: String,
    pub data_dir: PathBuf,
    pub active_runs: usize,
    pub version: String,
}

fn stopped() -> String {
    "the engine is stopped".to_string()
}

#[tauri::command]
pub fn status(state: State<'_, Desktop>) -> Result<Status, String> {
    state
        .with(|h| Status {
            url: h.base_url(),
            data_dir: h.data_dir.clone(),
            active_runs: h.engine.active_runs(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })
        .ok_or_else(stopped)
}

/// Imports a workflow file (`*.flow.json`); returns its id. A workflow
/// with that id is replaced, as `sluice import` does.
pub async fn import_file(state: &Desktop, path: &Path) -> Result<String, String> {
    let engine = state.engine().ok_or_else(stopped)?;
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let wf = Workflow::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let id = wf.id.clone();
    let plan = Plan::new(wf).map_err(|e| format!("{}: {e}", path.display()))?;
    engine
        .save_workflow_as(&plan, Some("import"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(id)
}

/// Writes workflow `id` to `path` (whole or not at all).
pub async fn export_file(state: &Desktop, id: &str, path: &Path) -> Result<(), String> {
    let engine = state.engine().ok_or_else(stopped)?;
    let (text, _) = engine
        .workflow_text(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no workflow `{id}`"))?;
    let tmp = path.with_extension("json.part");
    tokio::fs::write(&tmp, text.as_bytes())
        .await
        .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    tokio::fs::rename(&tmp, path)
        .await
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[tauri::command]
pub async fn import_workflow(state: State<'_, Desktop>, path: PathBuf) -> Result<String, String> {
    import_file(&state, &path).await
}

#[tauri::command]
pub async fn export_workflow(
    state: State<'_, Desktop>,
    id: String,
    path: PathBuf,
) -> Result<(), String> {
    export_file(&state, &id, &path).await
}

/// Opens a `sluice://` link in the window.
#[tauri::command]
pub fn open<R: Runtime>(app: AppHandle<R>, link: String) -> Result<(), String> {
    crate::links::parse(&link)?;
    crate::open_link(&app, &link);
    Ok(())
}
