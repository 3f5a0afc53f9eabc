//! The sandbox side of the engine: getting the script runtime (`code.js`,
//! `data.transform`, jq) ready before the first script needs it, and
//! storing WebAssembly components for `code.wasm` nodes.

use sluice_model::kinds::Kind;

use super::{Engine, Error, Result};
use crate::plan::Plan;

impl Engine {
    /// Gets the script runtime for `code.js` and `data.transform` ready (from the compile
    /// cache in about a millisecond; the first time on a machine,
    /// pre-initialized and compiled in a few seconds), so the first script
    /// does not wait for it. `sluice serve` calls it in the background.
    pub async fn prepare_code(&self) -> Result<()> {
        let sandbox = self
            .inner
            .io
            .sandbox()
            .map_err(Error::SandboxUnavailable)?
            .clone();
        sandbox
            .prepare_js()
            .await
            .map_err(|e| Error::Sandbox(Box::new(e)))
    }

    /// Prepares the script runtime ([`Engine::prepare_code`]) once a
    /// stored workflow has an enabled `code.js` or `data.transform` node (jq
    /// runs in the same runtime): at once if one does,
    /// else as soon as a workflow gets one. Until then the sandbox is not
    /// even started, so an engine without scripts carries none of its
    /// memory. Returns after preparing, or when the engine's change channel
    /// closes. `sluice serve` and the desktop app run it in the background.
    pub async fn prepare_code_when_used(&self) -> Result<()> {
        let mut changes = self.workflow_changes();
        let uses_js = |plan: &Plan| {
            plan.nodes
                .iter()
                .any(|n| matches!(n.kind, Kind::Js | Kind::Transform) && !n.disabled)
        };
        let mut any = false;
        for row in self.store().list_workflows().await? {
            if self.workflow(&row.id).await.is_ok_and(|p| uses_js(&p)) {
                any = true;
                break;
            }
        }
        while !any {
            any = match changes.recv().await {
                Ok(id) => self.workflow(&id).await.is_ok_and(|p| uses_js(&p)),
                // Missed changes: look again at the next one.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => false,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            };
        }
        self.prepare_code().await
    }

    /// Stores a WebAssembly component for `code.wasm` nodes in the blob
    /// store, after checking that it is one (it is compiled now, and cached).
    /// Returns its hash, which nodes name in `config.module`.
    pub async fn add_module(&self, bytes: Vec<u8>) -> Result<String> {
        let sandbox = self
            .inner
            .io
            .sandbox()
            .map_err(Error::SandboxUnavailable)?
            .clone();
        let (id, bytes) =
            tokio::task::spawn_blocking(move || sandbox.load(&bytes).map(|id| (id, bytes)))
                .await
                .map_err(Error::ModuleCheck)?
                .map_err(|e| Error::Sandbox(Box::new(e)))?;
        let mut w = self.store().blobs().bytes_writer()?;
        w.write(&bytes)?;
        let (hash, _) = w.finish()?;
        debug_assert_eq!(hash, id);
        Ok(hash)
    }
}
