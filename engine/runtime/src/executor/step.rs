//! One execution of a step ([`Prepared`]): its host, its template scope
//! (`input`, `nodes.<id>` along the message's path, `run`, `vars`), and
//! the report of how it went, with the step's secrets masked in everything
//! it produced before anything is journaled.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_model::template::{NodeOutputs, Scope};
use sluice_nodes as nodes;
use sluice_nodes::redact::Redactor;

use super::driver::{Done, Driver};
use super::host::{Idem, StepHost};
use crate::machine::{Hist, Msg, StepKey};
use crate::plan::{Plan, PlanNode};

/// What a node returned: its messages by output port, or its error.
pub(super) type StepResult = nodes::Result<Vec<(String, Msg)>>;

/// One execution of a step, ready to call the node.
pub(super) struct Prepared {
    host: StepHost,
    scope: Scope,
    pub(super) started: Instant,
}

impl Prepared {
    pub(super) fn new(
        driver: &Driver,
        key: &StepKey,
        attempt: u32,
        input: &Msg,
        hist: Option<Arc<Hist>>,
    ) -> Prepared {
        let plan = &driver.plan;
        let node = &plan.nodes[key.node];
        let idem = Idem::of(driver.run_id.clone(), node.id.clone(), key.clone());
        if let Some(log) = &driver.engine.inner.exec_log {
            use std::io::Write;
            if let Ok(mut f) = log.lock() {
                // Test hook only: a failed write just means a missing count.
                writeln!(f, "{} {attempt}", idem.as_str()).ok();
            }
        }
        Prepared {
            host: StepHost {
                engine: driver.engine.clone(),
                plan: plan.clone(),
                idem,
                logs: Mutex::new(Vec::new()),
                secrets: Mutex::new(Redactor::default()),
                remote: false,
                live_bytes: Default::default(),
                permit: Mutex::new(None),
            },
            scope: Scope {
                input: input.clone(),
                nodes: Arc::new(HistView {
                    plan: plan.clone(),
                    hist,
                }),
                run: driver.run_info.clone(),
                vars: plan.vars.clone(),
            },
            started: Instant::now(),
        }
    }

    /// A step outside any run: "Run this node" (see `test_node.rs`).
    pub(super) fn detached(
        engine: &super::Engine,
        plan: Arc<Plan>,
        idem: String,
        scope: Scope,
    ) -> Prepared {
        Prepared::outside(engine, plan, idem, scope, false)
    }

    /// A step of a run driven elsewhere (see `remote_step.rs`).
    pub(super) fn remote(
        engine: &super::Engine,
        plan: Arc<Plan>,
        idem: String,
        scope: Scope,
    ) -> Prepared {
        Prepared::outside(engine, plan, idem, scope, true)
    }

    fn outside(
        engine: &super::Engine,
        plan: Arc<Plan>,
        idem: String,
        scope: Scope,
        remote: bool,
    ) -> Prepared {
        Prepared {
            host: StepHost {
                engine: engine.clone(),
                plan,
                idem: Idem::known(idem),
                logs: Mutex::new(Vec::new()),
                secrets: Mutex::new(Redactor::default()),
                remote,
                live_bytes: Default::default(),
                permit: Mutex::new(None),
            },
            scope,
            started: Instant::now(),
        }
    }

    pub(super) fn call<'a>(
        &'a self,
        node: &'a PlanNode,
        first_started_at_us: i64,
    ) -> nodes::Call<'a> {
        nodes::Call {
            kind: node.kind,
            node_id: &node.id,
            config: &node.config,
            scope: self.scope.clone(),
            first_started_at_us,
            host: &self.host,
            jq: node.jq.clone(),
            io: &self.host.engine.inner.io,
        }
    }

    /// Runs the step under `permit` (given back while a tool call waits);
    /// returns it after.
    pub(super) fn hold(&self, permit: Option<tokio::sync::OwnedSemaphorePermit>) {
        if let Ok(mut slot) = self.host.permit.lock() {
            *slot = permit;
        }
    }

    /// The permit the step holds, if any, to drop.
    pub(super) fn release(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.host.permit.lock().ok().and_then(|mut p| p.take())
    }

    /// The report of a finished step; `input` for steps journaled only now.
    pub(super) fn done(
        self,
        key: StepKey,
        attempt: u32,
        result: nodes::Result<Vec<(String, Msg)>>,
        input: Option<Msg>,
    ) -> Done {
        let started = self.started;
        let (result, logs) = self.finish(result);
        Done {
            key,
            attempt,
            started,
            result,
            logs,
            input,
            stored: None,
        }
    }

    /// What the step produced, made safe to keep and show: an output
    /// nested too deep is an error, and the secrets of the credentials it
    /// used are masked in its outputs, error and logs.
    pub(super) fn finish(self, result: StepResult) -> (StepResult, Vec<(String, String)>) {
        let mut logs = self.host.logs.into_inner().unwrap_or_default();
        let secrets = self.host.secrets.into_inner().unwrap_or_default();
        let mut result = result;
        // Every value in a run stays readable (see `sluice_model::value`): a
        // node that built a deeper one fails here, before it is journaled.
        if let Ok(outputs) = &result
            && let Some((port, _)) = outputs.iter().find(|(_, msg)| {
                sluice_model::value::deeper_than(msg, sluice_model::value::MAX_DEPTH)
            })
        {
            result = Err(nodes::Error::terminal(format!(
                "output `{port}` is nested more than {} levels deep (the limit for values in a run)",
                sluice_model::value::MAX_DEPTH
            )));
        }
        // A step that used a credential: mask its secrets in all it produced
        // before anything reaches the journal, the events or the caller.
        if !secrets.is_empty() {
            match &mut result {
                Ok(outputs) => {
                    for (_, msg) in outputs.iter_mut() {
                        if let Some(masked) = secrets.redact_value(msg) {
                            *msg = Arc::new(masked);
                        }
                    }
                }
                Err(e) => e.message = secrets.redact_str(&e.message).into_owned(),
            }
            for (_, line) in logs.iter_mut() {
                *line = secrets.redact_str(line).into_owned();
            }
        }
        (result, logs)
    }
}

/// `nodes.<id>` for a step: the outputs on the path of its message.
#[derive(Debug)]
struct HistView {
    plan: Arc<Plan>,
    hist: Option<Arc<Hist>>,
}

impl HistView {
    fn walk(&self, visit: impl FnMut(&Hist) -> bool) {
        Hist::walk(self.hist.as_ref(), visit)
    }
}

impl NodeOutputs for HistView {
    fn get(&self, id: &str) -> Option<Msg> {
        let target = self.plan.node_index(id)?;
        let mut found = None;
        self.walk(|h| {
            if h.node == target {
                found = Some(h.output.clone());
                true
            } else {
                false
            }
        });
        found
    }

    fn ids(&self) -> Vec<String> {
        let mut ids = Vec::new();
        self.walk(|h| {
            let id = self.plan.nodes[h.node].id.to_string();
            if !ids.contains(&id) {
                ids.push(id);
            }
            false
        });
        ids
    }
}
