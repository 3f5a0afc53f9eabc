//! The step host ([`StepHost`]): what a node may ask of the engine while
//! it runs: its idempotency key, credentials (whose secrets are then masked
//! in all the step produces), blobs, log lines, and sub-workflows (bounded
//! in depth, found again after a crash by an id derived from the step).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sluice_model::kinds::Kind;
use sluice_nodes as nodes;
use sluice_nodes::Host;
use sluice_nodes::redact::Redactor;

use super::{Engine, RunResult};
use crate::machine::{Msg, Status};
use crate::plan::Plan;

/// The host side of one step execution.
pub(super) struct StepHost {
    pub(super) engine: Engine,
    /// The plan of the step's run (its workflow, for sub-workflow limits).
    pub(super) plan: Arc<Plan>,
    pub(super) idem: Idem,
    pub(super) logs: Mutex<Vec<(String, String)>>,
    /// The secrets of the credentials this step asked for.
    pub(super) secrets: Mutex<Redactor>,
    /// A step of a run driven elsewhere (the shared worker): it cannot start
    /// sub-workflows on this engine.
    pub(super) remote: bool,
    /// Bytes of live text sent so far (see `log_live`).
    pub(super) live_bytes: std::sync::atomic::AtomicUsize,
    /// The step permit it runs under, given back while a tool call waits.
    pub(super) permit: Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
}

/// A step's idempotency key `run/node/lineage/activation`, written out
/// when first asked for: most steps (the pure kinds) never ask, and
/// formatting it was a tenth of what starting such a step cost.
pub(super) struct Idem {
    text: std::sync::OnceLock<String>,
    /// The run, the node and the step, to write it from.
    parts: Option<(Arc<str>, Arc<str>, crate::machine::StepKey)>,
}

impl Idem {
    /// A key known already (a step of a run driven elsewhere, a test call).
    pub(super) fn known(text: String) -> Idem {
        Idem {
            text: std::sync::OnceLock::from(text),
            parts: None,
        }
    }

    /// The key of `step` of `run`, at node `node`.
    pub(super) fn of(run: Arc<str>, node: Arc<str>, step: crate::machine::StepKey) -> Idem {
        Idem {
            text: std::sync::OnceLock::new(),
            parts: Some((run, node, step)),
        }
    }

    pub(super) fn as_str(&self) -> &str {
        self.text.get_or_init(|| match &self.parts {
            Some((run, node, step)) => {
                format!("{run}/{node}/{}/{}", step.lineage, step.activation)
            }
            None => String::new(),
        })
    }
}

/// The most live text one step sends (the whole text is journaled anyway).
const MAX_LIVE_BYTES: usize = 1 << 20;

/// What a sub-workflow call on the shared worker fails with.
pub const NO_REMOTE_SUBWORKFLOWS: &str = "sub-workflows do not run on the shared worker yet; \
     set the calling workflow's `settings.run_on` to \"local\"";

/// A blob written by a step, masked for the step's secrets on the way in.
struct StepBlob {
    writer: sluice_store::BytesWriter,
    redact: Option<nodes::redact::StreamRedactor>,
}

impl nodes::BlobWriter for StepBlob {
    fn write(&mut self, bytes: &[u8]) -> nodes::Result<()> {
        let result = match &mut self.redact {
            Some(r) => {
                let safe = r.push(bytes);
                self.writer.write(&safe)
            }
            None => self.writer.write(bytes),
        };
        result.map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))
    }

    fn finish(mut self: Box<Self>) -> nodes::Result<(String, u64)> {
        if let Some(r) = self.redact.take() {
            let tail = r.finish();
            self.writer
                .write(&tail)
                .map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))?;
        }
        self.writer
            .finish()
            .map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))
    }
}

impl Host for StepHost {
    fn idempotency_key(&self) -> &str {
        self.idem.as_str()
    }

    fn credential<'a>(
        &'a self,
        name: &'a str,
    ) -> nodes::BoxFuture<'a, nodes::Result<nodes::Credential>> {
        Box::pin(async move {
            let found = self
                .engine
                .store()
                .get_credential(name)
                .await
                .map_err(|e| match e {
                    // A key that does not open the vault will not next time either.
                    sluice_store::Error::Vault(_) => {
                        nodes::Error::terminal(format!("credential `{name}`: {e}"))
                    }
                    _ => nodes::Error::retryable(format!("credential `{name}`: {e}")),
                })?;
            let Some((kind, value)) = found else {
                return Err(nodes::Error::terminal(if self.remote {
                    format!(
                        "credential `{name}` does not exist on the shared worker: set it in \
                         the worker's data dir (`sluice --data-dir DIR credentials set {name} --kind KIND`)"
                    )
                } else {
                    format!("credential `{name}` does not exist")
                }));
            };
            if let Ok(mut secrets) = self.secrets.lock() {
                secrets.extend(nodes::redact::secrets_of(&kind, &value));
            }
            Ok(nodes::Credential {
                name: name.to_string(),
                kind,
                value,
            })
        })
    }

    fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        match self.secrets.lock() {
            Ok(s) if !s.is_empty() => {
                let mut stream = s.stream();
                let mut out = stream.push(bytes);
                out.extend(stream.finish());
                out
            }
            _ => bytes.to_vec(),
        }
    }

    fn blob_writer(&self) -> nodes::Result<Box<dyn nodes::BlobWriter>> {
        let writer = self
            .engine
            .store()
            .blobs()
            .bytes_writer()
            .map_err(|e| nodes::Error::retryable(format!("blob store: {e}")))?;
        let redact = self
            .secrets
            .lock()
            .ok()
            .filter(|s| !s.is_empty())
            .map(|s| s.stream());
        Ok(Box::new(StepBlob { writer, redact }))
    }

    fn blob_path(&self, hash: &str) -> nodes::Result<PathBuf> {
        self.engine
            .store()
            .blobs()
            .blob_path(hash)
            .map_err(|e| nodes::Error::terminal(format!("blob `{hash}`: {e}")))
    }

    fn log_live(&self, level: &str, text: &str) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.remote || self.engine.inner.events.receiver_count() == 0 {
            return;
        }
        if self.live_bytes.fetch_add(text.len(), Relaxed) + text.len() > MAX_LIVE_BYTES {
            return;
        }
        let text = match self.secrets.lock() {
            Ok(s) if !s.is_empty() => s.redact_str(text).into_owned(),
            _ => text.to_string(),
        };
        // The key is `run/node/lineage/activation`.
        let mut parts = self.idem.as_str().splitn(4, '/');
        let (Some(run), Some(node), Some(lineage)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let event = crate::events::LiveEvent {
            run: run.into(),
            workflow: self.plan.workflow.id.as_str().into(),
            at_us: nodes::now_us(),
            what: crate::events::What::Stream {
                node: node.into(),
                lineage: lineage.to_string(),
                level: level.to_string(),
                text,
            },
        };
        // Nobody listening, or a slow listener: never waits.
        self.engine.inner.events.send(event).ok();
    }

    fn ai_usage(&self, model: &str, input_tokens: u64, output_tokens: u64) {
        self.engine.inner.metrics.ai_tokens(
            &self.plan.workflow.id,
            model,
            input_tokens,
            output_tokens,
        );
    }

    fn log(&self, level: &str, message: &str) {
        if let Ok(mut logs) = self.logs.lock()
            && logs.len() < 1000
        {
            logs.push((level.to_string(), message.chars().take(8192).collect()));
        }
    }

    fn subworkflow(
        &self,
        workflow: String,
        trigger: Option<String>,
        input: Msg,
        wait: bool,
    ) -> nodes::BoxFuture<'_, nodes::Result<Value>> {
        // The child's id derives from this step's idempotency key: after a
        // crash the same child is found again instead of started twice.
        let child_id = format!(
            "r{}",
            &blake3::hash(self.idem.as_str().as_bytes()).to_hex()[..24]
        );
        self.child_run(child_id, workflow, trigger, input, wait)
    }

    fn tool_call(
        &self,
        key: String,
        workflow: String,
        input: Msg,
    ) -> nodes::BoxFuture<'_, nodes::Result<Value>> {
        // One child per (step, call): the step's idempotency key and the
        // call's key, so a step run again finds its calls' children.
        let child_id = format!(
            "r{}",
            &blake3::hash(format!("{}#{key}", self.idem.as_str()).as_bytes()).to_hex()[..24]
        );
        Box::pin(async move {
            // The step's permit is not held while the child runs: steps
            // waiting on their tools must never starve the tools' steps.
            let held = self.permit.lock().ok().and_then(|mut p| p.take());
            let had = held.is_some();
            drop(held);
            let result = self.child_run(child_id, workflow, None, input, true).await;
            if had
                && let Ok(p) = self.engine.inner.permits.clone().acquire_owned().await
                && let Ok(mut slot) = self.permit.lock()
            {
                *slot = Some(p);
            }
            result
        })
    }

    fn workflow_tool<'a>(
        &'a self,
        workflow: &'a str,
    ) -> nodes::BoxFuture<'a, nodes::Result<nodes::ToolSpec>> {
        Box::pin(async move {
            if self.remote {
                return Err(nodes::Error::terminal(NO_REMOTE_SUBWORKFLOWS));
            }
            let plan = self
                .engine
                .workflow(workflow)
                .await
                .map_err(|e| nodes::Error::terminal(format!("tool `{workflow}`: {e}")))?;
            let mut entries = plan
                .nodes
                .iter()
                .filter(|n| n.kind == Kind::WorkflowTrigger);
            let (Some(entry), None) = (entries.next(), entries.next()) else {
                return Err(nodes::Error::terminal(format!(
                    "tool `{workflow}`: a tool workflow has exactly one trigger.workflow"
                )));
            };
            let Some(sluice_model::kinds::Trigger::Workflow(t)) = &entry.trigger else {
                return Err(nodes::Error::terminal(format!(
                    "tool `{workflow}`: its trigger.workflow has no config"
                )));
            };
            let input_schema = t.input_schema.clone().ok_or_else(|| {
                nodes::Error::terminal(format!(
                    "tool `{workflow}`: its trigger.workflow `{}` needs an `input_schema` \
                     (what the model is told the tool takes)",
                    entry.id
                ))
            })?;
            Ok(nodes::ToolSpec {
                description: t.description.clone(),
                input_schema,
            })
        })
    }
}

impl StepHost {
    /// Runs (or finds again, after a crash or a retry) the child run
    /// `child_id` of `workflow`; with `wait`, resolves to its output.
    fn child_run(
        &self,
        child_id: String,
        workflow: String,
        trigger: Option<String>,
        input: Msg,
        wait: bool,
    ) -> nodes::BoxFuture<'_, nodes::Result<Value>> {
        Box::pin(async move {
            if self.remote {
                return Err(nodes::Error::terminal(NO_REMOTE_SUBWORKFLOWS));
            }
            let engine = &self.engine;
            let parent = self.idem.as_str().split('/').next().map(str::to_string);
            let existing = engine
                .store()
                .get_run(&child_id)
                .await
                .map_err(|e| nodes::Error::retryable(e.to_string()))?;
            let handle =
                match existing {
                    // Parked at an approval: wait for it to end.
                    Some(row) if row.status == Status::Waiting => {
                        if !wait {
                            return Ok(json!({"run_id": row.id}));
                        }
                        let ended = engine.wait_for_end(&row.id).await.map_err(|e| {
                            nodes::Error::retryable(format!("flow.subworkflow: {e}"))
                        })?;
                        return child_result(ended, &workflow);
                    }
                    Some(row) if row.status != Status::Running => {
                        return child_result(
                            RunResult {
                                id: row.id,
                                status: row.status,
                                output: row.output.unwrap_or(Value::Null),
                                error: row.error,
                                respond: None,
                            },
                            &workflow,
                        );
                    }
                    Some(_) => engine.resume(&child_id).await,
                    None => {
                        // A new child: bounded in depth (a workflow calling itself
                        // would otherwise start runs without end) and counted
                        // against the engine's run limit like any new run.
                        let run_id = parent.as_deref().unwrap_or_default();
                        let limit = engine.inner.max_subworkflow_depth;
                        let mut chain = engine
                            .lineage(run_id, &self.plan.workflow.id, limit)
                            .await
                            .map_err(|e| nodes::Error::retryable(e.to_string()))?;
                        if chain.len() > limit {
                            chain.reverse();
                            chain.push(workflow.clone());
                            return Err(nodes::Error::terminal(format!(
                                "flow.subworkflow: sub-workflow depth limit {limit} reached: {}",
                                chain.join(" → ")
                            )));
                        }
                        engine.admit().map_err(|e| {
                            nodes::Error::retryable(format!("flow.subworkflow: {e}"))
                        })?;
                        let plan = engine.workflow(&workflow).await.map_err(|e| {
                            nodes::Error::terminal(format!("flow.subworkflow: {e}"))
                        })?;
                        // Default entry: the called workflow's only `trigger.workflow`.
                        let mut called = plan
                            .nodes
                            .iter()
                            .filter(|n| n.kind == Kind::WorkflowTrigger);
                        let trigger = match (trigger, called.next(), called.next()) {
                            (Some(t), _, _) => Some(t),
                            (None, Some(only), None) => Some(only.id.to_string()),
                            (None, _, _) => None,
                        };
                        engine
                            .start_with_id(child_id, plan, trigger.as_deref(), input, parent)
                            .await
                    }
                }
                .map_err(|e| nodes::Error::terminal(format!("flow.subworkflow: {e}")))?;
            if !wait {
                return Ok(json!({"run_id": handle.id}));
            }
            let mut ended = handle.wait().await;
            if ended.status == Status::Waiting {
                // The child parked at an approval: this step waits on (a
                // task, no permit) until it ends.
                ended = engine
                    .wait_for_end(&ended.id)
                    .await
                    .map_err(|e| nodes::Error::retryable(format!("flow.subworkflow: {e}")))?;
            }
            child_result(ended, &workflow)
        })
    }
}

fn child_result(r: RunResult, workflow: &str) -> nodes::Result<Value> {
    match r.status {
        Status::Succeeded => Ok(r.output),
        _ => Err(nodes::Error::terminal(format!(
            "sub-workflow `{workflow}` (run {}) {}: {}",
            r.id,
            r.status.as_str(),
            r.error
                .as_ref()
                .map_or("no error message", |e| e.message.as_str())
        ))),
    }
}
