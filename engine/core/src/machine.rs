//! The run state machine (pure, deterministic): given the plan and the
//! events so far, which steps run next. `apply(event) -> Vec<Action>`; the
//! executor carries the actions out (runs nodes, journals, sets timers) and
//! the same machine drives replays after a crash.
//!
//! Vocabulary (DESIGN §3): a *lineage* is the list of split indices a message
//! descends from; an *instance* is one node within one lineage; a *step* is
//! one activation of an instance (one arriving message), tried one or more
//! *attempts*. An instance is *settled* when no more messages can reach it;
//! settled with no activation means *skipped*.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

// Fx, not SipHash: the keys are node indices and split indices (nothing an
// outsider can pick), and SipHash on them was ~3% of a webhook run's
// instructions (`cargo xtask bench run-cost` under callgrind).
use rustc_hash::FxHashMap as HashMap;

use serde_json::{Map, Value, json};
use sluice_model::OnError;
use sluice_model::kinds::{Kind, MergeMode};

use crate::plan::{Plan, Role};

/// A message: shared, never copied between steps.
pub type Msg = Arc<Value>;

/// One level of lineage: element `idx` of the split activation `act`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seg {
    pub act: Activation,
    pub idx: u32,
}

/// Which message(s) led to a step within its lineage; empty for the first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Activation(pub Vec<u32>);

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lineage(pub Vec<Seg>);

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("0")?;
        for n in &self.0 {
            write!(f, ".{n}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Lineage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            if !seg.act.0.is_empty() {
                write!(f, "{}~", seg.act.to_string().replace('.', "-"))?;
            }
            write!(f, "{}", seg.idx)?;
        }
        Ok(())
    }
}

impl Activation {
    pub fn parse(s: &str) -> Option<Activation> {
        let mut parts = s.split('.');
        if parts.next()? != "0" {
            return None;
        }
        parts
            .map(|p| p.parse().ok())
            .collect::<Option<Vec<u32>>>()
            .map(Activation)
    }
}

impl Lineage {
    pub fn parse(s: &str) -> Option<Lineage> {
        if s.is_empty() {
            return Some(Lineage::default());
        }
        s.split('.')
            .map(|seg| match seg.split_once('~') {
                Some((act, idx)) => Some(Seg {
                    act: Activation::parse(&act.replace('-', "."))?,
                    idx: idx.parse().ok()?,
                }),
                None => Some(Seg {
                    act: Activation::default(),
                    idx: seg.parse().ok()?,
                }),
            })
            .collect::<Option<Vec<_>>>()
            .map(Lineage)
    }

    fn child(&self, act: &Activation, idx: u32) -> Lineage {
        let mut l = self.0.clone();
        l.push(Seg {
            act: act.clone(),
            idx,
        });
        Lineage(l)
    }

    fn parent(&self) -> Lineage {
        Lineage(self.0[..self.0.len().saturating_sub(1)].to_vec())
    }
}

/// Identifies a step within a run: `node/lineage/activation`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepKey {
    pub node: usize,
    pub lineage: Lineage,
    pub activation: Activation,
}

/// The outputs of earlier nodes on the path of a message (`nodes.<id>`).
#[derive(Debug)]
pub struct Hist {
    pub node: usize,
    pub output: Msg,
    pub parents: Vec<Arc<Hist>>,
}

impl Hist {
    /// Visits the outputs on the path of a message, nearest first (depth
    /// first, parents in order, each once), until `visit` returns true.
    /// What `nodes.<id>` reads is the first output of that node met so.
    pub fn walk(hist: Option<&Arc<Hist>>, mut visit: impl FnMut(&Hist) -> bool) {
        let mut stack: Vec<Arc<Hist>> = hist.into_iter().cloned().collect();
        let mut seen: std::collections::HashSet<*const Hist> = std::collections::HashSet::new();
        while let Some(h) = stack.pop() {
            if !seen.insert(Arc::as_ptr(&h)) {
                continue;
            }
            if h.node != usize::MAX && visit(&h) {
                return;
            }
            stack.extend(h.parents.iter().rev().cloned());
        }
    }

    /// The outputs `nodes.<id>` reads on the path of a message, by node
    /// index, nearest first (what a driver sends along with a step that
    /// runs elsewhere).
    pub fn path_outputs(hist: Option<&Arc<Hist>>) -> Vec<(usize, Msg)> {
        let mut out: Vec<(usize, Msg)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        Hist::walk(hist, |h| {
            if seen.insert(h.node) {
                out.push((h.node, h.output.clone()));
            }
            false
        });
        out
    }
}

pub use crate::error::StepError;

/// What happens to a run.
#[derive(Debug, Clone)]
pub enum Event {
    Succeeded {
        key: StepKey,
        outputs: Vec<(String, Msg)>,
    },
    Failed {
        key: StepKey,
        error: StepError,
    },
    /// The backoff of a failed step has elapsed.
    RetryDue {
        key: StepKey,
    },
    Cancel,
}

/// What the executor must do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Run a node. `hist` is what `nodes.<id>` sees.
    Start {
        key: StepKey,
        attempt: u32,
        input: Msg,
        hist: Option<Arc<Hist>>,
    },
    /// Apply `Event::RetryDue` after the delay.
    Retry {
        key: StepKey,
        attempt: u32,
        delay_ms: u64,
    },
    /// An instance settled without running.
    Skipped { node: usize, lineage: Lineage },
    /// Stop these in-flight steps (the run failed or was cancelled).
    Abort { keys: Vec<StepKey> },
    /// The run is over.
    Finish {
        status: Status,
        output: Value,
        error: Option<RunError>,
        /// The value of the first `output.respond` reached: `{status, headers, body}`.
        respond: Option<Msg>,
    },
}

use sluice_api::RunError;
/// Where a run is: the one run status type, shared with the store, the
/// live events, the API and the editor.
pub use sluice_api::RunStatus as Status;

#[derive(Debug)]
struct Instance {
    /// Incoming edges (or, for a join, the split scope) not yet settled.
    pending: usize,
    /// Steps started and not finished (including ones waiting to retry).
    running: usize,
    activations: usize,
    /// Merge and join: what arrived, with its ordering key.
    buffered: Vec<(BufKey, Msg, Option<Arc<Hist>>)>,
    fired: bool,
    done: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct BufKey {
    /// Join: the split activation and element index.
    seg: Option<Seg>,
    edge_pos: usize,
    activation: Activation,
    source: usize,
}

#[derive(Debug)]
struct Step {
    input: Msg,
    hist: Option<Arc<Hist>>,
    attempt: u32,
}

#[derive(Debug, Default)]
struct SplitState {
    queued: VecDeque<(Activation, u32, Msg, Option<Arc<Hist>>)>,
    live_children: usize,
    /// The split's instance no longer holds its lineage open (see
    /// [`Run::release_split`]).
    released: bool,
    /// Split activations in the order they finished (deterministic per journal).
    acts: Vec<(Activation, Option<Arc<Hist>>)>,
}

/// The state of one run.
#[derive(Debug)]
pub struct Run {
    plan: Arc<Plan>,
    status: Status,
    instances: HashMap<(usize, Lineage), Instance>,
    /// Unsettled instances per lineage.
    live: HashMap<Lineage, usize>,
    steps: BTreeMap<StepKey, Step>,
    splits: HashMap<(usize, Lineage), SplitState>,
    /// The split stack of each open child lineage.
    child_scope: HashMap<Lineage, Vec<usize>>,
    /// Exit values by (exit node, lineage, activation).
    exits: BTreeMap<(usize, Lineage, Activation), Msg>,
    /// The first `output.respond` reached, if any.
    first_respond: Option<StepKey>,
    error: Option<RunError>,
}

impl Run {
    /// Starts a run at `entry` with `input`.
    pub fn start(plan: Arc<Plan>, entry: usize, input: Msg) -> (Run, Vec<Action>) {
        let mut run = Run {
            plan,
            status: Status::Running,
            instances: HashMap::default(),
            live: HashMap::default(),
            steps: BTreeMap::new(),
            splits: HashMap::default(),
            child_scope: HashMap::default(),
            exits: BTreeMap::new(),
            first_respond: None,
            error: None,
        };
        let mut actions = Vec::new();
        let root = Lineage::default();
        run.open_lineage(&root);
        // The entry trigger gets the input; every other trigger settles unused.
        let key = StepKey {
            node: entry,
            lineage: root.clone(),
            activation: Activation::default(),
        };
        run.begin_step(key, input, None, &mut actions);
        let members = run
            .plan
            .members
            .get(&Vec::new())
            .cloned()
            .unwrap_or_default();
        let mut work: Vec<(usize, Lineage)> =
            members.into_iter().map(|n| (n, root.clone())).collect();
        run.settle(&mut work, &mut actions);
        (run, actions)
    }

    pub fn status(&self) -> Status {
        self.status
    }

    pub fn plan(&self) -> &Arc<Plan> {
        &self.plan
    }

    /// The first `output.respond` step reached, if any.
    pub fn first_respond(&self) -> Option<&StepKey> {
        self.first_respond.as_ref()
    }

    /// Steps started and not finished (in flight or waiting to retry).
    pub fn in_flight(&self) -> impl Iterator<Item = (&StepKey, u32)> {
        self.steps.iter().map(|(k, s)| (k, s.attempt))
    }

    /// The input of a step that is in flight.
    pub fn step_input(&self, key: &StepKey) -> Option<&Msg> {
        self.steps.get(key).map(|s| &s.input)
    }

    pub fn apply(&mut self, event: Event) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.status != Status::Running {
            return actions;
        }
        match event {
            Event::Succeeded { key, outputs } => self.succeeded(key, outputs, &mut actions),
            Event::Failed { key, error } => self.failed(key, error, &mut actions),
            Event::RetryDue { key } => {
                if let Some(step) = self.steps.get(&key) {
                    actions.push(Action::Start {
                        key: key.clone(),
                        attempt: step.attempt,
                        input: step.input.clone(),
                        hist: step.hist.clone(),
                    });
                }
            }
            Event::Cancel => {
                self.status = Status::Cancelled;
                self.error = Some(RunError::of_run("the run was cancelled"));
                self.abort_all(&mut actions);
                self.finish(&mut actions);
            }
        }
        actions
    }

    fn open_lineage(&mut self, lineage: &Lineage) {
        let scope = self.scope_of(lineage);
        let members = self.plan.members.get(&scope).cloned().unwrap_or_default();
        for &n in &members {
            let pending = match self.plan.nodes[n].role {
                Role::Join { .. } => 1,
                _ => self.plan.graph.incoming[n].len(),
            };
            self.instances.insert(
                (n, lineage.clone()),
                Instance {
                    pending,
                    running: 0,
                    activations: 0,
                    buffered: Vec::new(),
                    fired: false,
                    done: false,
                },
            );
        }
        self.live.insert(lineage.clone(), members.len());
    }

    /// The split stack a lineage belongs to, recovered from its instances.
    fn scope_of(&self, lineage: &Lineage) -> Vec<usize> {
        // The scope has one split per lineage segment; find it through the
        // split that created the innermost segment.
        if lineage.0.is_empty() {
            return Vec::new();
        }
        // Walk: the split owning each segment is recorded when the child opens.
        self.child_scope.get(lineage).cloned().unwrap_or_default()
    }

    fn begin_step(
        &mut self,
        key: StepKey,
        input: Msg,
        hist: Option<Arc<Hist>>,
        actions: &mut Vec<Action>,
    ) {
        if let Some(inst) = self.instances.get_mut(&(key.node, key.lineage.clone())) {
            inst.running += 1;
            inst.activations += 1;
        }
        actions.push(Action::Start {
            key: key.clone(),
            attempt: 1,
            input: input.clone(),
            hist: hist.clone(),
        });
        self.steps.insert(
            key,
            Step {
                input,
                hist,
                attempt: 1,
            },
        );
    }

    fn succeeded(&mut self, key: StepKey, outputs: Vec<(String, Msg)>, actions: &mut Vec<Action>) {
        let Some(step) = self.steps.remove(&key) else {
            return;
        };
        let node = &self.plan.nodes[key.node];
        let mut work = Vec::new();
        // `step` is dropped with this block: by the time the run may finish
        // (in `settle`), nothing here still holds its input.
        {
            let step = step;
            match node.role {
                Role::Exit => {
                    let value = outputs
                        .into_iter()
                        .next()
                        .map(|(_, v)| v)
                        .unwrap_or_else(|| step.input.clone());
                    if node.kind == Kind::Respond && self.first_respond.is_none() {
                        self.first_respond = Some(key.clone());
                    }
                    self.exits.insert(
                        (key.node, key.lineage.clone(), key.activation.clone()),
                        value,
                    );
                }
                // Elements on `out`; an error routed to `error` is an ordinary emission.
                Role::Split { concurrency } if outputs.iter().all(|(p, _)| p == "out") => {
                    let arr = outputs
                        .into_iter()
                        .next()
                        .map(|(_, v)| v)
                        .unwrap_or_else(|| Arc::new(Value::Array(Vec::new())));
                    let hist = Some(Arc::new(Hist {
                        node: key.node,
                        output: arr.clone(),
                        parents: step.hist.into_iter().collect(),
                    }));
                    let state = self
                        .splits
                        .entry((key.node, key.lineage.clone()))
                        .or_default();
                    state.acts.push((key.activation.clone(), hist.clone()));
                    for (i, item) in arr.as_array().into_iter().flatten().enumerate() {
                        state.queued.push_back((
                            key.activation.clone(),
                            i as u32,
                            Arc::new(item.clone()),
                            hist.clone(),
                        ));
                    }
                    self.pump_split(key.node, &key.lineage, concurrency, &mut work, actions);
                }
                _ => {
                    for (port, msg) in outputs {
                        let hist = Some(Arc::new(Hist {
                            node: key.node,
                            output: msg.clone(),
                            parents: step.hist.iter().cloned().collect(),
                        }));
                        self.emit(&key, &port, msg, hist, &mut work, actions);
                    }
                }
            }
        }
        if let Some(inst) = self.instances.get_mut(&(key.node, key.lineage.clone())) {
            inst.running -= 1;
        }
        work.push((key.node, key.lineage));
        self.settle(&mut work, actions);
    }

    fn failed(&mut self, key: StepKey, error: StepError, actions: &mut Vec<Action>) {
        let node = &self.plan.nodes[key.node];
        let Some(step) = self.steps.get_mut(&key) else {
            return;
        };
        let max = node.retry.max_attempts().max(1);
        if error.retryable && step.attempt < max {
            step.attempt += 1;
            actions.push(Action::Retry {
                key: key.clone(),
                attempt: step.attempt,
                delay_ms: node.retry.delay_ms(step.attempt),
            });
            return;
        }
        let err = RunError {
            node: Some(node.id.to_string()),
            message: error.message,
            retryable: Some(error.retryable),
            attempts: Some(step.attempt),
        };
        match node.on_error {
            OnError::Fail => {
                self.status = Status::Failed;
                self.error = Some(err);
                self.abort_all(actions);
                self.finish(actions);
            }
            OnError::Continue | OnError::Route => {
                let port = if node.on_error == OnError::Route {
                    "error"
                } else {
                    "out"
                };
                let input = (*step.input).clone();
                let msg = Arc::new(json!({"error": err, "input": input}));
                self.succeeded(key, vec![(port.to_string(), msg)], actions);
            }
        }
    }

    /// Delivers a message on every edge of `port`.
    fn emit(
        &mut self,
        from: &StepKey,
        port: &str,
        msg: Msg,
        hist: Option<Arc<Hist>>,
        work: &mut Vec<(usize, Lineage)>,
        actions: &mut Vec<Action>,
    ) {
        let plan = self.plan.clone();
        for &e in &plan.graph.outgoing[from.node] {
            let edge = &plan.graph.edges[e];
            if edge.from_port != port {
                continue;
            }
            self.deliver(
                e,
                &from.lineage,
                &from.activation,
                from.node,
                msg.clone(),
                hist.clone(),
                work,
                actions,
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        edge: usize,
        lineage: &Lineage,
        src_act: &Activation,
        source: usize,
        msg: Msg,
        hist: Option<Arc<Hist>>,
        work: &mut Vec<(usize, Lineage)>,
        actions: &mut Vec<Action>,
    ) {
        let plan = self.plan.clone();
        let to = plan.graph.edges[edge].to;
        let edge_pos = plan.graph.incoming[to]
            .iter()
            .position(|&x| x == edge)
            .unwrap_or(0);
        match plan.nodes[to].role {
            Role::Join { .. } => {
                // Buffer in the parent lineage's join instance.
                let Some(seg) = lineage.0.last().cloned() else {
                    return;
                };
                let parent = lineage.parent();
                if let Some(inst) = self.instances.get_mut(&(to, parent)) {
                    let key = BufKey {
                        seg: Some(seg),
                        edge_pos,
                        activation: src_act.clone(),
                        source,
                    };
                    inst.buffered.push((key, msg, hist));
                }
            }
            Role::Merge(mode) => {
                let key = BufKey {
                    seg: None,
                    edge_pos,
                    activation: src_act.clone(),
                    source,
                };
                let Some(inst) = self.instances.get_mut(&(to, lineage.clone())) else {
                    return;
                };
                if mode == MergeMode::First {
                    if !inst.fired {
                        inst.fired = true;
                        let step = StepKey {
                            node: to,
                            lineage: lineage.clone(),
                            activation: Activation::default(),
                        };
                        self.begin_step(step, msg, hist, actions);
                    }
                } else {
                    inst.buffered.push((key, msg, hist));
                }
                work.push((to, lineage.clone()));
            }
            _ => {
                let activation = if plan.graph.incoming[to].len() == 1 {
                    src_act.clone()
                } else {
                    let mut a = src_act.0.clone();
                    a.push(edge_pos as u32);
                    Activation(a)
                };
                let step = StepKey {
                    node: to,
                    lineage: lineage.clone(),
                    activation,
                };
                self.begin_step(step, msg, hist, actions);
            }
        }
    }

    /// Starts queued split elements while the split's concurrency allows.
    fn pump_split(
        &mut self,
        split: usize,
        lineage: &Lineage,
        concurrency: usize,
        work: &mut Vec<(usize, Lineage)>,
        actions: &mut Vec<Action>,
    ) {
        let plan = self.plan.clone();
        loop {
            let Some(state) = self.splits.get_mut(&(split, lineage.clone())) else {
                return;
            };
            if state.live_children >= concurrency {
                return;
            }
            let Some((act, idx, item, hist)) = state.queued.pop_front() else {
                return;
            };
            let child = lineage.child(&act, idx);
            let mut scope = plan.nodes[split].scope.clone();
            scope.push(split);
            // Without members only joins are downstream: the element goes straight to them.
            let has_members = plan.members.get(&scope).is_some_and(|m| !m.is_empty());
            if has_members {
                if let Some(state) = self.splits.get_mut(&(split, lineage.clone())) {
                    state.live_children += 1;
                }
                self.child_scope.insert(child.clone(), scope.clone());
                self.open_lineage(&child);
            }
            for &e in &plan.graph.outgoing[split] {
                if plan.graph.edges[e].from_port == "out" {
                    let to = plan.graph.edges[e].to;
                    self.deliver(
                        e,
                        &child,
                        &Activation::default(),
                        split,
                        item.clone(),
                        hist.clone(),
                        work,
                        actions,
                    );
                    if let Some(inst) = self.instances.get_mut(&(to, child.clone())) {
                        inst.pending = inst.pending.saturating_sub(1);
                    }
                }
            }
            for &n in plan.members.get(&scope).map(Vec::as_slice).unwrap_or(&[]) {
                work.push((n, child.clone()));
            }
        }
    }

    /// Settles every instance in `work` that can no longer receive messages,
    /// propagating to what depends on it.
    fn settle(&mut self, work: &mut Vec<(usize, Lineage)>, actions: &mut Vec<Action>) {
        let plan = self.plan.clone();
        while let Some((node, lineage)) = work.pop() {
            if self.status != Status::Running {
                return;
            }
            let Some(inst) = self.instances.get_mut(&(node, lineage.clone())) else {
                continue;
            };
            if inst.done || inst.pending > 0 || inst.running > 0 {
                continue;
            }
            match plan.nodes[node].role {
                Role::Merge(mode) if !inst.fired && !inst.buffered.is_empty() => {
                    inst.fired = true;
                    let mut buffered = std::mem::take(&mut inst.buffered);
                    buffered.sort_by(|a, b| a.0.cmp(&b.0));
                    let (msg, hist) = merge_messages(&plan, mode, buffered);
                    let key = StepKey {
                        node,
                        lineage: lineage.clone(),
                        activation: Activation::default(),
                    };
                    self.begin_step(key, msg, hist, actions);
                    continue;
                }
                Role::Join { split } if !inst.fired => {
                    inst.fired = true;
                    let mut buffered = std::mem::take(&mut inst.buffered);
                    buffered.sort_by(|a, b| a.0.cmp(&b.0));
                    let acts = self
                        .splits
                        .get(&(split, lineage.clone()))
                        .map(|s| s.acts.clone())
                        .unwrap_or_default();
                    let mut acts = acts;
                    acts.sort_by(|a, b| a.0.cmp(&b.0));
                    for (act, split_hist) in acts {
                        // Taken out of the buffer, an element's message is
                        // usually no longer shared (its history goes with it):
                        // moved into the array rather than deep-copied.
                        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut buffered)
                            .into_iter()
                            .partition(|(k, _, _)| k.seg.as_ref().is_some_and(|s| s.act == act));
                        buffered = rest;
                        let items: Vec<Value> = mine
                            .into_iter()
                            .map(|(_, m, hist)| {
                                drop(hist);
                                Arc::unwrap_or_clone(m)
                            })
                            .collect();
                        let key = StepKey {
                            node,
                            lineage: lineage.clone(),
                            activation: act,
                        };
                        self.begin_step(key, Arc::new(Value::Array(items)), split_hist, actions);
                    }
                    work.push((node, lineage));
                    continue;
                }
                _ => {}
            }
            let Some(inst) = self.instances.get_mut(&(node, lineage.clone())) else {
                continue;
            };
            inst.done = true;
            if inst.activations == 0 {
                actions.push(Action::Skipped {
                    node,
                    lineage: lineage.clone(),
                });
            }
            // Downstream instances in the same lineage lose one pending edge.
            for &e in &plan.graph.outgoing[node] {
                let to = plan.graph.edges[e].to;
                // Joins wait for the whole split; a split's elements open lineages of their own.
                if matches!(plan.nodes[to].role, Role::Join { .. })
                    || (matches!(plan.nodes[node].role, Role::Split { .. })
                        && plan.graph.edges[e].from_port == "out")
                {
                    continue;
                }
                if let Some(t) = self.instances.get_mut(&(to, lineage.clone())) {
                    t.pending = t.pending.saturating_sub(1);
                    work.push((to, lineage.clone()));
                }
            }
            if let Role::Split { .. } = plan.nodes[node].role {
                self.check_split_complete(node, &lineage, work);
                // Its elements may still run: it holds its lineage open
                // until they are done.
                self.release_split(node, &lineage, work, actions);
            } else {
                self.settled_in(&lineage, work, actions);
            }
        }
    }

    /// One more instance of `lineage` settled: the last one completes it.
    fn settled_in(
        &mut self,
        lineage: &Lineage,
        work: &mut Vec<(usize, Lineage)>,
        actions: &mut Vec<Action>,
    ) {
        let left = self.live.get_mut(lineage).map(|n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == Some(0) {
            self.lineage_complete(lineage, work, actions);
        }
    }

    /// A split instance counts as settled in its lineage once it has
    /// settled and every element it started has completed (and none is
    /// queued). Without this a split with no join after it let its lineage,
    /// and so the run, end while its elements were still to run.
    fn release_split(
        &mut self,
        split: usize,
        lineage: &Lineage,
        work: &mut Vec<(usize, Lineage)>,
        actions: &mut Vec<Action>,
    ) {
        let settled = self
            .instances
            .get(&(split, lineage.clone()))
            .is_some_and(|i| i.done);
        if !settled {
            return;
        }
        let state = self.splits.entry((split, lineage.clone())).or_default();
        if state.released || state.live_children > 0 || !state.queued.is_empty() {
            return;
        }
        state.released = true;
        self.settled_in(lineage, work, actions);
    }

    fn lineage_complete(
        &mut self,
        lineage: &Lineage,
        work: &mut Vec<(usize, Lineage)>,
        actions: &mut Vec<Action>,
    ) {
        self.live.remove(lineage);
        let Some(seg_owner) = self
            .child_scope
            .remove(lineage)
            .and_then(|s| s.last().copied())
        else {
            // The root lineage: the run is over.
            if self.status == Status::Running {
                self.status = Status::Succeeded;
                self.finish(actions);
            }
            return;
        };
        let parent = lineage.parent();
        // Drop the finished lineage's instances: their state is no longer needed.
        let plan = self.plan.clone();
        let mut scope = plan.nodes[seg_owner].scope.clone();
        scope.push(seg_owner);
        for &n in plan.members.get(&scope).map(Vec::as_slice).unwrap_or(&[]) {
            self.instances.remove(&(n, lineage.clone()));
            // A split inside it: its elements are done (it was released).
            self.splits.remove(&(n, lineage.clone()));
        }
        if let Some(state) = self.splits.get_mut(&(seg_owner, parent.clone())) {
            state.live_children -= 1;
        }
        let concurrency = match plan.nodes[seg_owner].role {
            Role::Split { concurrency } => concurrency,
            _ => 1,
        };
        self.pump_split(seg_owner, &parent, concurrency, work, actions);
        self.check_split_complete(seg_owner, &parent, work);
        self.release_split(seg_owner, &parent, work, actions);
    }

    /// When a split instance has settled and all its elements are done, its
    /// joins in that lineage can fire.
    fn check_split_complete(
        &mut self,
        split: usize,
        lineage: &Lineage,
        work: &mut Vec<(usize, Lineage)>,
    ) {
        let settled = self
            .instances
            .get(&(split, lineage.clone()))
            .is_some_and(|i| i.done);
        let idle = self
            .splits
            .get(&(split, lineage.clone()))
            .is_none_or(|s| s.live_children == 0 && s.queued.is_empty());
        if !(settled && idle) {
            return;
        }
        let plan = self.plan.clone();
        let scope = &plan.nodes[split].scope;
        for &n in plan.members.get(scope).map(Vec::as_slice).unwrap_or(&[]) {
            if plan.nodes[n].role == (Role::Join { split })
                && let Some(inst) = self.instances.get_mut(&(n, lineage.clone()))
                && inst.pending > 0
            {
                inst.pending = 0;
                work.push((n, lineage.clone()));
            }
        }
    }

    fn abort_all(&mut self, actions: &mut Vec<Action>) {
        let keys: Vec<StepKey> = self.steps.keys().cloned().collect();
        self.steps.clear();
        if !keys.is_empty() {
            actions.push(Action::Abort { keys });
        }
    }

    /// The run output: exit values keyed by exit node id. Taken once, at
    /// the end: values nobody else holds any more move instead of being copied.
    fn take_output(&mut self) -> Value {
        let mut out = Map::new();
        let mut by_node: BTreeMap<usize, Vec<Msg>> = BTreeMap::new();
        for ((node, _, _), v) in std::mem::take(&mut self.exits) {
            by_node.entry(node).or_default().push(v);
        }
        let owned = |v: Msg| Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone());
        for (node, mut values) in by_node {
            let n = &self.plan.nodes[node];
            let v = if n.scope.is_empty() && values.len() == 1 {
                owned(values.remove(0))
            } else {
                Value::Array(values.into_iter().map(owned).collect())
            };
            out.insert(n.id.to_string(), v);
        }
        Value::Object(out)
    }

    fn finish(&mut self, actions: &mut Vec<Action>) {
        let respond = self.first_respond.as_ref().and_then(|k| {
            self.exits
                .get(&(k.node, k.lineage.clone(), k.activation.clone()))
                .cloned()
        });
        actions.push(Action::Finish {
            status: self.status,
            output: self.take_output(),
            error: self.error.clone(),
            respond,
        });
    }
}

fn merge_messages(
    plan: &Plan,
    mode: MergeMode,
    buffered: Vec<(BufKey, Msg, Option<Arc<Hist>>)>,
) -> (Msg, Option<Arc<Hist>>) {
    let parents: Vec<Arc<Hist>> = buffered.iter().filter_map(|(_, _, h)| h.clone()).collect();
    let hist = match parents.len() {
        0 => None,
        1 => parents.into_iter().next(),
        _ => Some(Arc::new(Hist {
            node: usize::MAX,
            output: Arc::new(Value::Null),
            parents,
        })),
    };
    let msg = match mode {
        MergeMode::Append | MergeMode::First => {
            Value::Array(buffered.into_iter().map(|(_, m, _)| (*m).clone()).collect())
        }
        MergeMode::All => {
            let mut grouped: Vec<(usize, Vec<Value>)> = Vec::new();
            for (k, m, _) in buffered {
                match grouped.iter_mut().find(|(s, _)| *s == k.source) {
                    Some((_, v)) => v.push((*m).clone()),
                    None => grouped.push((k.source, vec![(*m).clone()])),
                }
            }
            let mut out = Map::new();
            for (source, mut values) in grouped {
                let v = if values.len() == 1 {
                    values.remove(0)
                } else {
                    Value::Array(values)
                };
                out.insert(plan.nodes[source].id.to_string(), v);
            }
            Value::Object(out)
        }
    };
    (Arc::new(msg), hist)
}
