//! A validated workflow compiled for running: roles, policies, scopes and
//! compiled templates, shared (`Arc<Plan>`) by every run of one version.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use sluice_model::graph::Graph;
use sluice_model::kinds::{self, Kind, MergeConfig, MergeMode, SplitConfig, TransformConfig};
use sluice_model::template::{self, Compiled};
use sluice_model::{OnError, Problem, RetryPolicy, Workflow, validate};

use crate::definition::Definition;
use crate::jq;

/// How the state machine treats a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Trigger,
    Normal,
    Merge(MergeMode),
    Split {
        concurrency: usize,
    },
    /// Collects the elements of the split at this node index.
    Join {
        split: usize,
    },
    Exit,
}

#[derive(Debug)]
pub struct PlanNode {
    pub id: Arc<str>,
    pub kind: Kind,
    pub role: Role,
    pub retry: RetryPolicy,
    pub on_error: OnError,
    pub timeout_ms: Option<u64>,
    pub disabled: bool,
    /// The node config with its templates compiled (a node reads it,
    /// evaluated, as its kind's config type).
    pub config: Compiled,
    /// A trigger's typed config (None for the other kinds).
    pub trigger: Option<kinds::Trigger>,
    /// `data.transform`: the compiled jq program.
    pub jq: Option<Arc<jq::Program>>,
    /// Split nodes this node runs inside, outermost first.
    pub scope: Vec<usize>,
}

/// Everything a run needs to know about its workflow, computed once.
#[derive(Debug)]
pub struct Plan {
    pub workflow: Workflow,
    /// The workflow JSON this plan was built from (pinned in each run).
    pub definition: Definition,
    /// The document version `definition` was written from (pinned in each
    /// run too); None for a workflow that is not a stored document.
    pub version: Option<String>,
    /// Built from the workflow's draft (the document as being edited), not
    /// its published version: its runs are marked as draft runs.
    pub draft: bool,
    pub graph: Graph,
    pub nodes: Vec<PlanNode>,
    pub order: Vec<usize>,
    /// Nodes per scope (key: the split stack), in topological order.
    pub members: HashMap<Vec<usize>, Vec<usize>>,
    /// The workflow's `vars` (template context `vars`).
    pub vars: Arc<Value>,
    /// `settings.concurrency`: how many runs of this workflow execute at once.
    pub concurrency: Option<usize>,
    /// Test data pinned in the editor (`pinned` in the file: node id →
    /// output port → message), by node index: a draft run takes a pinned
    /// node's output as given instead of running it. Empty in a plan of a
    /// published version: published runs never use test data.
    pub pinned: HashMap<usize, Vec<(String, Arc<Value>)>>,
    /// Every node pure (or disabled), none a split, none retried, and no
    /// run limit: a run goes from start to end without waiting for anything,
    /// in at most one step per node. The engine runs such a run on its
    /// caller's task and records it in one write when it ends.
    pub in_one_go: bool,
    /// Some node's config mentions `run` (in a template, or anywhere: a
    /// sound over-approximation, since a template can only read the `run`
    /// context by naming it). A run of a plan without it builds no `run`
    /// context: most webhooks never read it, and building it (the id, the
    /// start time as RFC 3339) was ~4% of a webhook run's instructions.
    pub uses_run: bool,
}

/// Why a run cannot start at the trigger asked for (or at none named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("node `{0}` is not a trigger")]
    NotATrigger(String),
    #[error("no node `{node}` in workflow `{workflow}`")]
    NoSuchNode { node: String, workflow: String },
    #[error(
        "workflow `{workflow}` has several triggers ({}): choose one (`--trigger`, or `trigger` in the API)",
        .triggers.join(", ")
    )]
    Ambiguous {
        workflow: String,
        triggers: Vec<String>,
    },
}

/// Why a workflow cannot be planned.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid workflow:\n{}", .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
pub struct Invalid(pub Vec<Problem>);

/// `pinned` of a workflow, by node index (validation checked its shape).
fn pinned_outputs(workflow: &Workflow, graph: &Graph) -> HashMap<usize, Vec<(String, Arc<Value>)>> {
    let Some(Value::Object(pinned)) = workflow.extra.get("pinned") else {
        return HashMap::new();
    };
    pinned
        .iter()
        .filter_map(|(id, ports)| {
            let i = *graph.by_id.get(id.as_str())?;
            let ports = ports.as_object()?;
            Some((
                i,
                ports
                    .iter()
                    .map(|(port, msg)| (port.clone(), Arc::new(msg.clone())))
                    .collect(),
            ))
        })
        .collect()
}

impl Plan {
    pub fn new(workflow: Workflow) -> Result<Arc<Plan>, Invalid> {
        Plan::new_at(workflow, None)
    }

    /// A plan of `workflow` as of document version `version`.
    pub fn new_at(workflow: Workflow, version: Option<String>) -> Result<Arc<Plan>, Invalid> {
        Plan::build(workflow, version, false)
    }

    /// A plan of `workflow` at `version` whose runs are marked as runs of
    /// the draft (`draft`) or of the published version.
    pub fn build(
        workflow: Workflow,
        version: Option<String>,
        draft: bool,
    ) -> Result<Arc<Plan>, Invalid> {
        let problems = validate(&workflow);
        if !problems.is_empty() {
            return Err(Invalid(problems));
        }
        let definition = Definition::new(workflow.to_json_pretty());
        let graph = Graph::new(&workflow);
        let order = graph.topo_order().map_err(|_| Invalid(vec![]))?;
        let scopes = graph.scopes(&order).map_err(|_| Invalid(vec![]))?;
        let mut nodes = Vec::with_capacity(workflow.nodes.len());
        let mut problems = Vec::new();
        let missing = if workflow.settings().strict {
            template::Missing::Error
        } else {
            template::Missing::Null
        };
        for (i, n) in workflow.nodes.iter().enumerate() {
            let Some(spec) = graph.kinds[i] else { continue };
            // The config was checked as its kind's type by `validate`; the
            // roles read their settings (and defaults) from that type.
            let config_problem = |e: kinds::ConfigError| Problem {
                node: Some(n.id.clone()),
                edge: None,
                field: Some(format!("config.{}", e.path)),
                message: e.message,
            };
            let trigger = match kinds::Trigger::parse(spec.id, &n.config).transpose() {
                Ok(t) => t,
                Err(e) => {
                    problems.push(config_problem(e));
                    continue;
                }
            };
            let role = match spec.id {
                _ if spec.is_trigger => Role::Trigger,
                _ if spec.is_exit() => Role::Exit,
                Kind::Merge => match kinds::parse::<MergeConfig>(n.config.clone()) {
                    Ok(c) => Role::Merge(c.mode),
                    Err(e) => {
                        problems.push(config_problem(e));
                        continue;
                    }
                },
                Kind::Split => match kinds::parse::<SplitConfig>(n.config.clone()) {
                    Ok(c) => Role::Split {
                        concurrency: c.concurrency as usize,
                    },
                    Err(e) => {
                        problems.push(config_problem(e));
                        continue;
                    }
                },
                Kind::Join => {
                    let split = graph.incoming[i]
                        .first()
                        .and_then(|&e| graph.edge_scope(e, &scopes).last().copied())
                        .unwrap_or(usize::MAX);
                    Role::Join { split }
                }
                _ => Role::Normal,
            };
            let has_error_edges = graph.outgoing[i]
                .iter()
                .any(|&e| graph.edges[e].from_port == "error");
            let on_error = n.on_error.unwrap_or(if has_error_edges {
                OnError::Route
            } else {
                OnError::Fail
            });
            let config = match template::compile(&n.config, spec.raw_fields, missing) {
                Ok(c) => c,
                Err((path, e)) => {
                    problems.push(Problem {
                        node: Some(n.id.clone()),
                        edge: None,
                        field: Some(format!("config.{path}")),
                        message: e.to_string(),
                    });
                    continue;
                }
            };
            let jq = if spec.id == Kind::Transform {
                let code = match kinds::parse::<TransformConfig>(n.config.clone()) {
                    Ok(c) => c.jq,
                    Err(e) => {
                        problems.push(config_problem(e));
                        continue;
                    }
                };
                match jq::Program::compile(&code) {
                    Ok(f) => Some(Arc::new(f)),
                    Err(message) => {
                        problems.push(Problem {
                            node: Some(n.id.clone()),
                            edge: None,
                            field: Some("config.jq".into()),
                            message,
                        });
                        continue;
                    }
                }
            } else {
                None
            };
            nodes.push(PlanNode {
                jq,
                id: Arc::from(n.id.as_str()),
                kind: spec.id,
                trigger,
                role,
                retry: n.retry.unwrap_or(RetryPolicy {
                    max_attempts: Some(1),
                    backoff_ms: None,
                    factor: None,
                }),
                on_error,
                timeout_ms: n.timeout_ms,
                disabled: n.disabled,
                config,
                scope: scopes[i].clone(),
            });
        }
        if !problems.is_empty() {
            return Err(Invalid(problems));
        }
        let mut members: HashMap<Vec<usize>, Vec<usize>> = HashMap::new();
        for &i in &order {
            members.entry(scopes[i].clone()).or_default().push(i);
        }
        let vars = Arc::new(
            workflow
                .extra
                .get("vars")
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default())),
        );
        let concurrency = workflow
            .extra
            .get("settings")
            .and_then(|s| s.get("concurrency"))
            .and_then(Value::as_u64)
            .map(|c| c.clamp(1, sluice_model::validate::MAX_CONCURRENCY) as usize);
        let pinned = if draft {
            pinned_outputs(&workflow, &graph)
        } else {
            HashMap::new()
        };
        let in_one_go = concurrency.is_none()
            && nodes.iter().all(|n| {
                (n.disabled || n.kind.is_pure())
                    && !matches!(n.role, Role::Split { .. })
                    && n.retry.max_attempts() <= 1
            });
        let uses_run = workflow.nodes.iter().any(|n| mentions(&n.config, "run"));
        Ok(Arc::new(Plan {
            in_one_go,
            uses_run,
            pinned,
            concurrency,
            workflow,
            definition,
            version,
            draft,
            graph,
            nodes,
            order,
            members,
            vars,
        }))
    }

    pub fn node_index(&self, id: &str) -> Option<usize> {
        self.graph.by_id.get(id).copied()
    }

    /// The trigger a run starts at: the one named, else the only
    /// `trigger.manual`, else the only trigger.
    pub fn entry(&self, name: Option<&str>) -> Result<usize, EntryError> {
        let triggers: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].role == Role::Trigger)
            .collect();
        if let Some(name) = name {
            return match self.node_index(name) {
                Some(i) if self.nodes[i].role == Role::Trigger => Ok(i),
                Some(_) => Err(EntryError::NotATrigger(name.to_string())),
                None => Err(EntryError::NoSuchNode {
                    node: name.to_string(),
                    workflow: self.workflow.id.clone(),
                }),
            };
        }
        let manual: Vec<usize> = triggers
            .iter()
            .copied()
            .filter(|&i| self.nodes[i].kind == Kind::ManualTrigger)
            .collect();
        match (manual.as_slice(), triggers.as_slice()) {
            ([one], _) | ([], [one]) => Ok(*one),
            _ => Err(EntryError::Ambiguous {
                workflow: self.workflow.id.clone(),
                triggers: triggers
                    .iter()
                    .map(|&i| self.nodes[i].id.to_string())
                    .collect(),
            }),
        }
    }
}

/// Whether `word` appears in any key or string of `v`.
fn mentions(v: &Value, word: &str) -> bool {
    match v {
        Value::String(s) => s.contains(word),
        Value::Array(items) => items.iter().any(|i| mentions(i, word)),
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| k.contains(word) || mentions(v, word)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn plan(set: Value) -> Arc<Plan> {
        let wf = Workflow::from_value(json!({
            "format": "sluice.workflow/v1", "id": "w",
            "nodes": [
                {"id": "start", "kind": "trigger.manual"},
                {"id": "set", "kind": "data.set", "config": {"values": set}}
            ],
            "edges": [{"from": "start", "to": "set"}]
        }))
        .expect("a workflow");
        Plan::new(wf).expect("a valid plan")
    }

    #[test]
    fn a_plan_knows_whether_a_template_can_read_run() {
        assert!(!plan(json!({"id": "{{ input.id }}", "tier": "gold"})).uses_run);
        assert!(plan(json!({"id": "{{ run.id }}"})).uses_run);
        assert!(plan(json!({"at": "started {{ run['started_at'] }}"})).uses_run);
        assert!(plan(json!({"nested": [{"x": "{{ run.trigger }}"}]})).uses_run);
        // Over-approximated: the word anywhere counts.
        assert!(plan(json!({"note": "running"})).uses_run);
    }
}
