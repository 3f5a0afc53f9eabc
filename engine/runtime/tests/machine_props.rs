//! Property tests of the pure state machine on random DAGs: every run
//! terminates; each node runs exactly as often as a naive reference
//! evaluator says (and is skipped exactly when it says zero); and the output
//! does not depend on the order in which ready steps are executed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::kinds::Kind;
use sluice_model::template::{NoOutputs, Scope};
use sluice_nodes::{BoxFuture, Call, Host};
use sluice_runtime::machine::{Action, Event, Run, Status, StepKey};
use sluice_runtime::{Plan, Role};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random DAG of data.set, flow.if (constant conditions), flow.merge and
/// output.end nodes after one manual trigger, plus the reference count of
/// activations per node.
fn random_workflow(seed: u64) -> (Workflow, Vec<usize>) {
    let mut rng = Rng(seed | 1);
    let n = 3 + rng.below(12);
    let mut nodes = vec![json!({"id": "n0", "kind": "trigger.manual"})];
    let mut kinds = vec!["trigger"];
    let mut conds = vec![false];
    let mut edges: Vec<(usize, &str, usize)> = Vec::new();
    for i in 1..n {
        let kind = match rng.below(10) {
            0..=3 => "set",
            4..=5 => "if",
            6..=7 => "merge",
            _ => "end",
        };
        let cond = rng.below(2) == 0;
        nodes.push(match kind {
            "set" => json!({"id": format!("n{i}"), "kind": "data.set",
                "config": {"values": {"at": i, "prev": "{{ input.at }}"}}}),
            "if" => json!({"id": format!("n{i}"), "kind": "flow.if", "config": {"condition": format!("{{{{ {cond} }}}}")}}),
            "merge" => json!({"id": format!("n{i}"), "kind": "flow.merge",
                "config": {"mode": if rng.below(2) == 0 { "all" } else { "append" }}}),
            _ => json!({"id": format!("n{i}"), "kind": "output.end"}),
        });
        kinds.push(kind);
        conds.push(cond);
        let sources: Vec<usize> = (0..i).filter(|&j| kinds[j] != "end").collect();
        let fan_in = 1 + rng.below(if kind == "merge" { 3 } else { 2 });
        for _ in 0..fan_in {
            let j = sources[rng.below(sources.len())];
            let port = if kinds[j] == "if" {
                if rng.below(2) == 0 { "true" } else { "false" }
            } else {
                "out"
            };
            if !edges.contains(&(j, port, i)) {
                edges.push((j, port, i));
            }
        }
    }
    // Reference: how many messages reach each node (nodes are in topological order).
    let mut count = vec![0usize; n];
    count[0] = 1;
    for i in 1..n {
        let arriving: usize = edges
            .iter()
            .filter(|(_, _, to)| *to == i)
            .map(|&(from, port, _)| {
                let emits = match kinds[from] {
                    "if" => port == if conds[from] { "true" } else { "false" },
                    _ => port == "out",
                };
                if emits { count[from] } else { 0 }
            })
            .sum();
        count[i] = if kinds[i] == "merge" {
            usize::from(arriving > 0)
        } else {
            arriving
        };
    }
    let edges: Vec<Value> = edges
        .iter()
        .map(|(f, p, t)| json!({"from": format!("n{f}:{p}"), "to": format!("n{t}")}))
        .collect();
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "p", "nodes": nodes, "edges": edges}),
    )
    .expect("generated workflow parses");
    (wf, count)
}

struct NoHost;

impl Host for NoHost {
    fn log(&self, _: &str, _: &str) {}
    fn subworkflow(
        &self,
        _: String,
        _: Option<String>,
        _: Arc<Value>,
        _: bool,
    ) -> BoxFuture<'_, sluice_nodes::Result<Value>> {
        Box::pin(async { Err(sluice_nodes::Error::terminal("no sub-workflows here")) })
    }
}

struct Trace {
    status: Status,
    output: Value,
    activations: BTreeMap<usize, usize>,
    /// Skipped instances: (node, lineage).
    skipped: BTreeSet<(usize, String)>,
    steps: BTreeSet<StepKey>,
}

/// Drives a run to the end, executing ready steps in an order chosen by `seed`.
fn drive(plan: &Arc<Plan>, seed: u64, input: Value) -> Trace {
    let mut rng = Rng(seed | 1);
    let (mut run, actions) = Run::start(plan.clone(), 0, Arc::new(input));
    let mut ready: Vec<(StepKey, Arc<Value>)> = Vec::new();
    let mut trace = Trace {
        status: Status::Running,
        output: Value::Null,
        activations: BTreeMap::new(),
        skipped: BTreeSet::new(),
        steps: BTreeSet::new(),
    };
    let absorb =
        |actions: Vec<Action>, ready: &mut Vec<(StepKey, Arc<Value>)>, trace: &mut Trace| {
            for a in actions {
                match a {
                    Action::Start { key, input, .. } => {
                        *trace.activations.entry(key.node).or_default() += 1;
                        assert!(
                            trace.steps.insert(key.clone()),
                            "step {key:?} started twice"
                        );
                        ready.push((key, input));
                    }
                    Action::Skipped { node, lineage } => {
                        let l = lineage.to_string();
                        assert!(
                            trace.skipped.insert((node, l.clone())),
                            "node {node} skipped twice in lineage {l:?}"
                        );
                    }
                    Action::Finish { status, output, .. } => {
                        assert_eq!(trace.status, Status::Running, "finished twice");
                        trace.status = status;
                        trace.output = output;
                    }
                    Action::Retry { .. } | Action::Abort { .. } => panic!("no failures expected"),
                }
            }
        };
    absorb(actions, &mut ready, &mut trace);
    let mut budget = 10_000;
    let io = sluice_nodes::Io::default();
    while !ready.is_empty() {
        budget -= 1;
        assert!(budget > 0, "run does not terminate");
        let (key, input) = ready.swap_remove(rng.below(ready.len()));
        let node = &plan.nodes[key.node];
        let call = Call {
            kind: node.kind,
            node_id: &node.id,
            config: &node.config,
            scope: Scope {
                input,
                nodes: Arc::new(NoOutputs),
                ..Scope::with_input(Value::Null)
            },
            first_started_at_us: 0,
            host: &NoHost,
            jq: None,
            io: &io,
        };
        let outputs = sluice_nodes::execute_pure(&call)
            .expect("pure kind")
            .expect("node succeeds");
        let actions = run.apply(Event::Succeeded { key, outputs });
        absorb(actions, &mut ready, &mut trace);
    }
    trace
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn runs_terminate_match_the_reference_and_ignore_scheduling(seed in any::<u64>(), a in any::<u64>(), b in any::<u64>()) {
        let (wf, reference) = random_workflow(seed);
        let plan = Plan::new(wf.clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let ta = drive(&plan, a, json!({"at": 0}));
        let tb = drive(&plan, b, json!({"at": 0}));
        prop_assert_eq!(ta.status, Status::Succeeded);
        for (i, &expected) in reference.iter().enumerate() {
            let ran = ta.activations.get(&i).copied().unwrap_or(0);
            prop_assert_eq!(ran, expected, "node n{} ran {} times, reference says {}", i, ran, expected);
            prop_assert_eq!(ta.skipped.contains(&(i, String::new())), expected == 0, "node n{} skip state", i);
        }
        prop_assert!(plan.nodes.iter().all(|n| n.role != Role::Trigger || n.id.as_ref() == "n0"));
        prop_assert_eq!(&ta.output, &tb.output);
        prop_assert_eq!(&ta.steps, &tb.steps);
        prop_assert_eq!(&ta.skipped, &tb.skipped);
    }
}

/// trigger → split (k elements, random concurrency) → random body DAG →
/// join (fed by some body nodes) → end. Returns the workflow, the body's
/// per-element reference counts (by node index), and the join's index.
fn random_split_workflow(seed: u64) -> (Workflow, Vec<usize>, usize) {
    let mut rng = Rng(seed | 1);
    let body = 1 + rng.below(8);
    let concurrency = 1 + rng.below(4);
    let mut nodes = vec![
        json!({"id": "n0", "kind": "trigger.manual"}),
        json!({"id": "n1", "kind": "flow.split", "config": {"concurrency": concurrency}}),
    ];
    let mut kinds = vec!["trigger", "split"];
    let mut conds = vec![false, false];
    let mut edges: Vec<(usize, &str, usize)> = vec![(0, "out", 1)];
    for i in 2..2 + body {
        let kind = match rng.below(9) {
            0..=3 => "set",
            4..=5 => "if",
            6..=7 => "merge",
            _ => "end",
        };
        let cond = rng.below(2) == 0;
        nodes.push(match kind {
            "set" => json!({"id": format!("n{i}"), "kind": "data.set", "config": {"values": {"at": i, "v": "{{ input }}"}}}),
            "if" => json!({"id": format!("n{i}"), "kind": "flow.if", "config": {"condition": format!("{{{{ {cond} }}}}")}}),
            "merge" => json!({"id": format!("n{i}"), "kind": "flow.merge", "config": {"mode": "append"}}),
            _ => json!({"id": format!("n{i}"), "kind": "output.end"}),
        });
        kinds.push(kind);
        conds.push(cond);
        let sources: Vec<usize> = (1..i).filter(|&j| kinds[j] != "end").collect();
        for _ in 0..1 + rng.below(2) {
            let j = sources[rng.below(sources.len())];
            let port = if kinds[j] == "if" {
                if rng.below(2) == 0 { "true" } else { "false" }
            } else {
                "out"
            };
            if !edges.contains(&(j, port, i)) {
                edges.push((j, port, i));
            }
        }
    }
    let join = 2 + body;
    let feeders: Vec<usize> = (2..join).filter(|&j| kinds[j] != "end").collect();
    if feeders.is_empty() {
        edges.push((1, "out", join));
    } else {
        for _ in 0..1 + rng.below(2) {
            let j = feeders[rng.below(feeders.len())];
            let port = if kinds[j] == "if" {
                if conds[j] { "true" } else { "false" }
            } else {
                "out"
            };
            if !edges.contains(&(j, port, join)) {
                edges.push((j, port, join));
            }
        }
    }
    nodes.push(json!({"id": format!("n{join}"), "kind": "flow.join"}));
    nodes.push(json!({"id": format!("n{}", join + 1), "kind": "output.end"}));
    edges.push((join, "out", join + 1));
    // Per element: the split delivers one message to its body.
    let mut count = vec![0usize; join];
    count[1] = 1;
    for i in 2..join {
        let arriving: usize = edges
            .iter()
            .filter(|(_, _, to)| *to == i)
            .map(|&(from, port, _)| {
                let emits = match kinds[from] {
                    "if" => port == if conds[from] { "true" } else { "false" },
                    _ => port == "out",
                };
                if emits { count[from] } else { 0 }
            })
            .sum();
        count[i] = if kinds[i] == "merge" {
            usize::from(arriving > 0)
        } else {
            arriving
        };
    }
    let edges: Vec<Value> = edges
        .iter()
        .map(|(f, p, t)| json!({"from": format!("n{f}:{p}"), "to": format!("n{t}")}))
        .collect();
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "s", "nodes": nodes, "edges": edges}),
    )
    .expect("generated workflow parses");
    (wf, count, join)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn splits_run_their_body_once_per_element_whatever_the_schedule(
        seed in any::<u64>(), k in 0usize..6, a in any::<u64>(), b in any::<u64>(),
    ) {
        let (wf, per_element, join) = random_split_workflow(seed);
        let plan = Plan::new(wf).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let input = Value::Array((0..k).map(|i| json!(i)).collect());
        let ta = drive(&plan, a, input.clone());
        let tb = drive(&plan, b, input);
        prop_assert_eq!(ta.status, Status::Succeeded);
        for (i, &per) in per_element.iter().enumerate().skip(2) {
            let ran = ta.activations.get(&i).copied().unwrap_or(0);
            prop_assert_eq!(ran, per * k, "body node n{} ran {} times for {} elements", i, ran, k);
            let skips = ta.skipped.iter().filter(|(n, _)| *n == i).count();
            prop_assert_eq!(skips, if per == 0 { k } else { 0 }, "body node n{} skips", i);
        }
        prop_assert_eq!(ta.activations.get(&join).copied(), Some(1));
        prop_assert_eq!(ta.activations.get(&(join + 1)).copied(), Some(1));
        // The joined array has one entry per element that reached the join.
        let joined = ta.output[format!("n{}", join + 1)].as_array().map(Vec::len);
        let reaching = plan.graph.incoming[join]
            .iter()
            .map(|&e| {
                let edge = &plan.graph.edges[e];
                let src = edge.from;
                let emits = match plan.nodes[src].kind {
                    Kind::If => {
                        let cond = plan.workflow.nodes[src].config["condition"] == "{{ true }}";
                        edge.from_port == if cond { "true" } else { "false" }
                    }
                    _ => true,
                };
                if src == 1 { 1 } else if emits { per_element[src] } else { 0 }
            })
            .sum::<usize>();
        prop_assert_eq!(joined, Some(reaching * k));
        prop_assert_eq!(&ta.output, &tb.output);
        prop_assert_eq!(&ta.steps, &tb.steps);
        prop_assert_eq!(&ta.skipped, &tb.skipped);
    }
}
