//! Workflows as Loro documents (DESIGN §6): every edit is an operation, and
//! edits from several windows or peers merge.
//!
//! Layout of the document:
//! - `meta` (map): every top-level field except `nodes` and `edges`, one
//!   entry per field.
//! - `nodes` (map): node id → a mergeable map with one entry per node field
//!   (`kind`, `position`, `label`, `retry`, unknown fields…), `order` (the
//!   node's place in the file), and `config`, a mergeable map with one entry
//!   per config key. Code (`config.source`, `config.jq`) is Loro text, so two
//!   people typing in it merge character by character.
//! - `edges` (map): `"<from> -> <to>"` → the edge's fields and its `order`.
//! - `notes` (map): sticky note id → a mergeable map with one entry per
//!   field (`text`, `position`, `size`…) and its `order`: two people moving
//!   one note and writing in another, or one moving a note while another
//!   writes in it, all merge; the same field written twice resolves like any
//!   other entry. (Plain entries, not Loro text: documents from before the
//!   notes map move their notes here on their first edit, and two editors
//!   doing that at once write the same values, where two texts would each
//!   insert the whole note.) A note without an `id` in the file gets
//!   `note-<index>`.
//!
//! Plain entries hold their value as JSON text: exact round trip (key order,
//! big integers), and a concurrent change to one field never mixes with
//! another field. Different nodes, and different fields of one node, never
//! conflict; the same field set twice concurrently resolves the same way on
//! every peer (Loro's last-writer-wins by Lamport time and peer).
//!
//! A merge can leave an edge whose node was deleted, or two concurrently
//! added edges that close a cycle. [`WorkflowDoc::to_value`] repairs both
//! deterministically (edges are kept in file order; one that dangles or
//! closes a cycle is dropped), so every peer reads the same valid graph.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use loro::{
    CommitOptions, Container, ContainerID, ExportMode, Frontiers, ID, Index, LoroDoc, LoroMap,
    LoroText, LoroValue, UpdateOptions, ValueOrContainer, VersionVector, event::Diff,
};
use serde_json::{Map, Value};
pub use sluice_api::Changes;

use crate::workflow::Workflow;

/// Config keys held as Loro text (character-level merge).
pub const TEXT_FIELDS: &[&str] = &["source", "jq", "sql"];

const META: &str = "meta";
const NODES: &str = "nodes";
const EDGES: &str = "edges";
const NOTES: &str = "notes";
const CONFIG: &str = "config";
const ORDER: &str = "order";

/// One author's consecutive edits this many seconds apart or closer form
/// one version (Loro also merges them into one change locally).
pub const VERSION_GAP_SECS: i64 = 10;

#[derive(Debug, thiserror::Error)]
pub enum DocError {
    #[error("document: {0}")]
    Loro(String),
    #[error("the document does not hold a valid workflow: {0}")]
    Invalid(String),
}

fn loro_err(e: impl std::fmt::Display) -> DocError {
    DocError::Loro(e.to_string())
}

/// A workflow held as a Loro document.
#[derive(Debug)]
pub struct WorkflowDoc {
    doc: LoroDoc,
}

impl Default for WorkflowDoc {
    fn default() -> Self {
        WorkflowDoc::new()
    }
}

fn json_text(v: &Value) -> LoroValue {
    LoroValue::String(v.to_string().into())
}

/// A plain entry's JSON (entries are JSON text; anything else is read as
/// the nearest JSON so a foreign writer cannot make the document unreadable).
fn entry_json(v: &ValueOrContainer) -> Option<Value> {
    match v {
        ValueOrContainer::Value(LoroValue::String(s)) => {
            Some(serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string())))
        }
        ValueOrContainer::Value(LoroValue::Null) => None,
        ValueOrContainer::Value(LoroValue::Bool(b)) => Some(Value::Bool(*b)),
        ValueOrContainer::Value(LoroValue::I64(i)) => Some(Value::from(*i)),
        ValueOrContainer::Value(LoroValue::Double(d)) => {
            serde_json::Number::from_f64(*d).map(Value::Number)
        }
        ValueOrContainer::Container(Container::Text(t)) => Some(Value::String(t.to_string())),
        _ => None,
    }
}

fn child_map(v: Option<ValueOrContainer>) -> Option<LoroMap> {
    match v {
        Some(ValueOrContainer::Container(Container::Map(m))) => Some(m),
        _ => None,
    }
}

fn keys_of(map: &LoroMap) -> Vec<String> {
    let mut keys: Vec<String> = map.keys().map(|k| k.to_string()).collect();
    keys.sort();
    keys
}

/// Sets `key` to `value` (as JSON text) unless it already holds it.
fn set_entry(map: &LoroMap, key: &str, value: &Value) -> Result<bool, DocError> {
    if let Some(current) = map.get(key)
        && matches!(current, ValueOrContainer::Value(_))
        && entry_json(&current).as_ref() == Some(value)
    {
        return Ok(false);
    }
    map.insert(key, json_text(value)).map_err(loro_err)?;
    Ok(true)
}

/// Deletes the keys of `map` not in `keep`.
fn prune(map: &LoroMap, keep: &HashSet<&str>) -> Result<bool, DocError> {
    let mut changed = false;
    for k in keys_of(map) {
        if !keep.contains(k.as_str()) {
            map.delete(&k).map_err(loro_err)?;
            changed = true;
        }
    }
    Ok(changed)
}

fn edge_key(edge: &Value) -> Option<String> {
    Some(format!(
        "{} -> {}",
        edge.get("from")?.as_str()?,
        edge.get("to")?.as_str()?
    ))
}

impl WorkflowDoc {
    pub fn new() -> WorkflowDoc {
        let doc = LoroDoc::new();
        // Versions (see [`WorkflowDoc::history`]) carry their time, and one
        // peer's edits within `VERSION_GAP_SECS` of each other are one version.
        doc.set_record_timestamp(true);
        doc.set_change_merge_interval(VERSION_GAP_SECS);
        WorkflowDoc { doc }
    }

    /// How far apart (seconds) one peer's consecutive edits may be and still
    /// count as one version; negative keeps every commit its own version.
    pub fn set_version_gap(&self, secs: i64) {
        self.doc.set_change_merge_interval(secs);
    }

    /// A document holding `wf`, written by peer `peer`.
    pub fn from_workflow(wf: &Workflow, peer: u64) -> Result<WorkflowDoc, DocError> {
        let d = WorkflowDoc::new();
        d.doc.set_peer_id(peer).map_err(loro_err)?;
        d.apply(wf)?;
        Ok(d)
    }

    /// Loads a document from a snapshot or updates.
    pub fn from_bytes(bytes: &[u8]) -> Result<WorkflowDoc, DocError> {
        let d = WorkflowDoc::new();
        d.import(bytes)?;
        Ok(d)
    }

    /// The underlying Loro document.
    pub fn loro(&self) -> &LoroDoc {
        &self.doc
    }

    /// Merges updates from a peer. Bytes that are not a Loro update are
    /// refused and change nothing; importing the same update twice is a
    /// no-op.
    pub fn import(&self, bytes: &[u8]) -> Result<(), DocError> {
        self.doc.import(bytes).map(|_| ()).map_err(loro_err)
    }

    /// Everything this document has that a peer at `since` lacks.
    pub fn updates_since(&self, since: &VersionVector) -> Result<Vec<u8>, DocError> {
        self.doc
            .export(ExportMode::updates(since))
            .map_err(loro_err)
    }

    /// The whole document, compacted.
    pub fn snapshot(&self) -> Result<Vec<u8>, DocError> {
        self.doc.export(ExportMode::Snapshot).map_err(loro_err)
    }

    /// The workflow id the document holds (cheap: one entry).
    pub fn id(&self) -> Option<String> {
        let v = self.doc.get_map(META).get("id")?;
        entry_json(&v)?.as_str().map(str::to_string)
    }

    pub fn version(&self) -> VersionVector {
        self.doc.oplog_vv()
    }

    /// Makes the document hold `wf` with the fewest operations: only fields
    /// that differ are written, code is updated by a text diff, and nothing
    /// is written when nothing changed. Returns whether anything changed.
    pub fn apply(&self, wf: &Workflow) -> Result<bool, DocError> {
        self.apply_as(wf, None)
    }

    /// [`WorkflowDoc::apply`], recording `message` (where the edit came
    /// from: "api", "file", "restore 12@345"…) in the version it makes.
    pub fn apply_as(&self, wf: &Workflow, message: Option<&str>) -> Result<bool, DocError> {
        let value = serde_json::to_value(wf).map_err(|e| DocError::Invalid(e.to_string()))?;
        let Value::Object(mut top) = value else {
            return Err(DocError::Invalid("a workflow must be an object".into()));
        };
        let nodes = match top.remove("nodes") {
            Some(Value::Array(n)) => n,
            _ => Vec::new(),
        };
        let edges = match top.remove("edges") {
            Some(Value::Array(e)) => e,
            _ => Vec::new(),
        };
        // Sticky notes have their own map; anything else under `notes`
        // (not an array) stays a plain top-level field.
        let notes = match top.remove(NOTES) {
            Some(Value::Array(n)) => n,
            Some(other) => {
                top.insert(NOTES.into(), other);
                Vec::new()
            }
            None => Vec::new(),
        };
        let mut changed = false;

        let meta = self.doc.get_map(META);
        for (k, v) in &top {
            changed |= set_entry(&meta, k, v)?;
        }
        changed |= prune(&meta, &top.keys().map(String::as_str).collect())?;

        let doc_nodes = self.doc.get_map(NODES);
        let mut ids = HashSet::new();
        // Keep the current order when the file's order agrees with it.
        let orders = self.node_orders();
        let current_order: Vec<String> = orders.iter().map(|(_, id)| id.clone()).collect();
        let wanted_order: Vec<&str> = nodes
            .iter()
            .filter_map(|n| n.get("id").and_then(Value::as_str))
            .collect();
        // Sets, not scans: a thousand-node workflow is applied on every
        // edit in the editor.
        let wanted_set: HashSet<&str> = wanted_order.iter().copied().collect();
        let current_set: HashSet<&str> = current_order.iter().map(String::as_str).collect();
        let reorder = current_order
            .iter()
            .map(String::as_str)
            .filter(|id| wanted_set.contains(id))
            .ne(wanted_order
                .iter()
                .copied()
                .filter(|id| current_set.contains(id)));
        let mut next = max_order(orders.iter().map(|(o, _)| *o)) + 1.0;
        for (i, node) in nodes.iter().enumerate() {
            let Value::Object(fields) = node else {
                continue;
            };
            let Some(id) = fields.get("id").and_then(Value::as_str) else {
                continue;
            };
            ids.insert(id);
            let existed = doc_nodes.get(id).is_some();
            let nmap = doc_nodes.ensure_mergeable_map(id).map_err(loro_err)?;
            let mut keep: HashSet<&str> = HashSet::from([ORDER, CONFIG]);
            for (k, v) in fields {
                if k == "id" || k == CONFIG {
                    continue;
                }
                keep.insert(k);
                changed |= set_entry(&nmap, k, v)?;
            }
            // A node created again resurfaces its old fields: drop them.
            changed |= prune(&nmap, &keep)?;
            let order = if reorder {
                Some(i as f64)
            } else if !existed || nmap.get(ORDER).is_none() {
                next += 1.0;
                Some(next - 1.0)
            } else {
                None
            };
            if let Some(o) = order {
                changed |= set_entry(&nmap, ORDER, &Value::from(o))?;
            }
            let config = fields
                .get(CONFIG)
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
            changed |= self.apply_config(&nmap, &config)?;
        }
        changed |= prune(&doc_nodes, &ids)?;

        let doc_edges = self.doc.get_map(EDGES);
        let mut keys = HashSet::new();
        let entries = self.edge_entries();
        let current_edges: Vec<String> = entries.iter().map(|(_, k, _)| k.clone()).collect();
        let wanted_edges: Vec<String> = edges.iter().filter_map(edge_key).collect();
        let wanted_edge_set: HashSet<&String> = wanted_edges.iter().collect();
        let current_edge_set: HashSet<&String> = current_edges.iter().collect();
        let reorder_edges = current_edges
            .iter()
            .filter(|k| wanted_edge_set.contains(k))
            .ne(wanted_edges.iter().filter(|k| current_edge_set.contains(k)));
        let mut next_edge = max_order(entries.iter().map(|(o, _, _)| *o)) + 1.0;
        for (i, edge) in edges.iter().enumerate() {
            let Some(key) = edge_key(edge) else {
                continue;
            };
            let mut stored = edge.clone();
            let old_order = child_value(&doc_edges, &key).and_then(|v| v.get(ORDER).cloned());
            let order = match (reorder_edges, old_order) {
                (true, _) => Value::from(i as f64),
                (false, Some(o)) => o,
                (false, None) => {
                    next_edge += 1.0;
                    Value::from(next_edge - 1.0)
                }
            };
            if let Value::Object(m) = &mut stored {
                m.insert(ORDER.into(), order);
            }
            changed |= set_entry(&doc_edges, &key, &stored)?;
            keys.insert(key);
        }
        changed |= prune(&doc_edges, &keys.iter().map(String::as_str).collect())?;
        changed |= self.apply_notes(&notes)?;

        if changed {
            match message {
                Some(m) => self.doc.commit_with(CommitOptions::new().commit_msg(m)),
                None => self.doc.commit(),
            }
        }
        Ok(changed)
    }

    /// Sets one plain field of node `id` (such as `position` or `label`):
    /// the fast path for small, frequent edits like dragging, which
    /// [`WorkflowDoc::apply`] would pay a whole-workflow comparison for.
    /// False when the value is unchanged; an error for a node the document
    /// does not hold or a field that is not plain (`id`, `config`).
    pub fn set_node_field(&self, id: &str, field: &str, value: &Value) -> Result<bool, DocError> {
        if matches!(field, "id" | CONFIG | ORDER) {
            return Err(DocError::Invalid(format!(
                "node field `{field}` cannot be set on its own"
            )));
        }
        let nodes = self.doc.get_map(NODES);
        let Some(node) = child_map(nodes.get(id)) else {
            return Err(DocError::Invalid(format!("no node `{id}` in the workflow")));
        };
        let changed = set_entry(&node, field, value)?;
        if changed {
            self.doc.commit();
        }
        Ok(changed)
    }

    fn apply_config(&self, node: &LoroMap, config: &Value) -> Result<bool, DocError> {
        let empty = Map::new();
        let fields = config.as_object().unwrap_or(&empty);
        let cmap = node.ensure_mergeable_map(CONFIG).map_err(loro_err)?;
        let mut changed = false;
        for (k, v) in fields {
            match (TEXT_FIELDS.contains(&k.as_str()), v) {
                (true, Value::String(s)) => {
                    // A plain entry in the way (an old value): replace it.
                    if let Some(ValueOrContainer::Value(_)) = cmap.get(k) {
                        cmap.delete(k).map_err(loro_err)?;
                    }
                    let text: LoroText = cmap.ensure_mergeable_text(k).map_err(loro_err)?;
                    if text.to_string() != *s {
                        text.update(s, UpdateOptions::default())
                            .map_err(|e| DocError::Loro(format!("config.{k}: {e:?}")))?;
                        changed = true;
                    }
                }
                _ => changed |= set_entry(&cmap, k, v)?,
            }
        }
        changed |= prune(&cmap, &fields.keys().map(String::as_str).collect())?;
        Ok(changed)
    }

    /// Makes the `notes` map hold `notes` (the file's array): fields one by
    /// one, the order by place in the array. Ids are made unique (a
    /// repeated one gets `-2`, `-3`…).
    fn apply_notes(&self, notes: &[Value]) -> Result<bool, DocError> {
        let doc_notes = self.doc.get_map(NOTES);
        let mut changed = false;
        let mut ids: HashSet<String> = HashSet::new();
        for (i, note) in notes.iter().enumerate() {
            // A note that is not an object is kept as its text.
            let fields = match note {
                Value::Object(m) => m.clone(),
                Value::String(t) => {
                    Map::from_iter([("text".to_string(), Value::String(t.clone()))])
                }
                other => Map::from_iter([("text".to_string(), Value::String(other.to_string()))]),
            };
            let base = fields
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| note_id(i), str::to_string);
            let mut id = base.clone();
            let mut n = 2;
            while ids.contains(&id) {
                id = format!("{base}-{n}");
                n += 1;
            }
            let nmap = doc_notes.ensure_mergeable_map(&id).map_err(loro_err)?;
            let mut keep: HashSet<&str> = HashSet::from([ORDER]);
            for (k, v) in &fields {
                // `id` is the key; `order` is the document's own.
                if k == "id" || k == ORDER {
                    continue;
                }
                keep.insert(k);
                changed |= set_entry(&nmap, k, v)?;
            }
            changed |= prune(&nmap, &keep)?;
            changed |= set_entry(&nmap, ORDER, &Value::from(i as f64))?;
            ids.insert(id);
        }
        changed |= prune(&doc_notes, &ids.iter().map(String::as_str).collect())?;
        Ok(changed)
    }

    /// The sticky notes, in order, each with its `id` first.
    fn notes_value(&self) -> Vec<Value> {
        let notes_map = self.doc.get_map(NOTES);
        let mut notes: Vec<(f64, String, Value)> = Vec::new();
        for id in keys_of(&notes_map) {
            let Some(nmap) = child_map(notes_map.get(&id)) else {
                continue;
            };
            let mut note = Map::new();
            note.insert("id".into(), Value::String(id.clone()));
            let mut order = f64::MAX;
            for k in keys_of(&nmap) {
                let Some(v) = nmap.get(&k).and_then(|v| entry_json(&v)) else {
                    continue;
                };
                if k == ORDER {
                    order = v.as_f64().unwrap_or(f64::MAX);
                } else {
                    note.insert(k, v);
                }
            }
            notes.push((order, id, Value::Object(note)));
        }
        notes.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        notes.into_iter().map(|(_, _, v)| v).collect()
    }

    /// `(order, id)` of every node, in file order (a node without an order
    /// sorts last, as `f64::MAX`).
    fn node_orders(&self) -> Vec<(f64, String)> {
        let nodes = self.doc.get_map(NODES);
        let mut ids: Vec<(f64, String)> = keys_of(&nodes)
            .into_iter()
            .map(|id| {
                let o = child_map(nodes.get(&id))
                    .and_then(|m| m.get(ORDER))
                    .and_then(|v| entry_json(&v))
                    .and_then(|v| v.as_f64())
                    .unwrap_or(f64::MAX);
                (o, id)
            })
            .collect();
        ids.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        ids
    }

    fn edge_entries(&self) -> Vec<(f64, String, Value)> {
        let edges = self.doc.get_map(EDGES);
        let mut out: Vec<(f64, String, Value)> = keys_of(&edges)
            .into_iter()
            .filter_map(|k| {
                let v = child_value(&edges, &k)?;
                let o = v.get(ORDER).and_then(Value::as_f64).unwrap_or(f64::MAX);
                Some((o, k, v))
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        out
    }

    /// The workflow JSON the document holds, repaired (see the module docs).
    pub fn to_value(&self) -> Value {
        let mut wf = self.raw_value();
        repair(&mut wf);
        wf
    }

    /// The workflow JSON as merged, before [`repair`].
    pub fn raw_value(&self) -> Value {
        let mut top = Map::new();
        let meta = self.doc.get_map(META);
        for k in keys_of(&meta) {
            if let Some(v) = meta.get(&k).and_then(|v| entry_json(&v)) {
                top.insert(k, v);
            }
        }
        let nodes_map = self.doc.get_map(NODES);
        let mut nodes = Vec::new();
        for (_, id) in self.node_orders() {
            let Some(nmap) = child_map(nodes_map.get(&id)) else {
                continue;
            };
            let mut node = Map::new();
            node.insert("id".into(), Value::String(id.clone()));
            for k in keys_of(&nmap) {
                if k == ORDER {
                    continue;
                }
                if k == CONFIG {
                    let mut config = Map::new();
                    if let Some(cmap) = child_map(nmap.get(CONFIG)) {
                        for ck in keys_of(&cmap) {
                            if let Some(v) = cmap.get(&ck).and_then(|v| entry_json(&v)) {
                                config.insert(ck, v);
                            }
                        }
                    }
                    node.insert(CONFIG.into(), Value::Object(config));
                    continue;
                }
                if let Some(v) = nmap.get(&k).and_then(|v| entry_json(&v)) {
                    node.insert(k, v);
                }
            }
            nodes.push(Value::Object(node));
        }
        let edges: Vec<Value> = self
            .edge_entries()
            .into_iter()
            .map(|(_, _, mut v)| {
                if let Value::Object(m) = &mut v {
                    m.remove(ORDER);
                }
                v
            })
            .collect();
        let notes = self.notes_value();
        if !notes.is_empty() {
            top.insert(NOTES.into(), Value::Array(notes));
        }
        let mut wf = Value::Object(top);
        wf["nodes"] = Value::Array(nodes);
        wf["edges"] = Value::Array(edges);
        wf
    }

    /// The workflow the document holds, repaired and parsed.
    pub fn to_workflow(&self) -> Result<Workflow, DocError> {
        Workflow::from_value(self.to_value()).map_err(|e| DocError::Invalid(e.to_string()))
    }
}

/// The id a sticky note without one gets: its place in the file.
pub fn note_id(index: usize) -> String {
    format!("note-{index}")
}

/// The highest order given (-1 when none; unordered entries do not count).
fn max_order(orders: impl Iterator<Item = f64>) -> f64 {
    orders.filter(|o| *o < f64::MAX).fold(-1.0, f64::max)
}

fn child_value(map: &LoroMap, key: &str) -> Option<Value> {
    map.get(key).and_then(|v| entry_json(&v))
}

/// Drops, in file order, each edge that names a missing node or closes a
/// cycle. Returns the dropped edges' descriptions. Deterministic: the same
/// JSON gives the same result on every peer.
pub fn repair(wf: &mut Value) -> Vec<String> {
    let ids: BTreeSet<String> = wf["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|n| n.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let node_of = |end: &Value| -> Option<String> {
        end.as_str()
            .map(|s| s.split(':').next().unwrap_or(s).to_string())
    };
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut dropped = Vec::new();
    let Some(edges) = wf.get_mut("edges").and_then(Value::as_array_mut) else {
        return dropped;
    };
    edges.retain(|e| {
        let (Some(from), Some(to)) = (node_of(&e["from"]), node_of(&e["to"])) else {
            dropped.push(format!("{e}: not an edge"));
            return false;
        };
        if !ids.contains(&from) || !ids.contains(&to) {
            dropped.push(format!("{from} -> {to}: a node is gone"));
            return false;
        }
        if from == to || reaches(&graph, &to, &from) {
            dropped.push(format!("{from} -> {to}: would close a cycle"));
            return false;
        }
        graph.entry(from).or_default().push(to);
        true
    });
    dropped
}

fn reaches(graph: &BTreeMap<String, Vec<String>>, from: &str, to: &str) -> bool {
    let mut stack = vec![from.to_string()];
    let mut seen: HashMap<String, ()> = HashMap::new();
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n.clone(), ()).is_some() {
            continue;
        }
        if let Some(next) = graph.get(&n) {
            stack.extend(next.iter().cloned());
        }
    }
    false
}

/// A version vector as bytes, for the wire.
pub fn encode_version(v: &VersionVector) -> Vec<u8> {
    v.encode()
}

/// A version vector from [`encode_version`]'s bytes.
pub fn decode_version(bytes: &[u8]) -> Result<VersionVector, DocError> {
    VersionVector::decode(bytes).map_err(loro_err)
}

/// A version (frontiers) as text: `counter@peer` ids joined by `,`, sorted.
pub fn format_version(f: &Frontiers) -> String {
    let mut ids: Vec<ID> = f.iter().collect();
    ids.sort_by_key(|id| (id.peer, id.counter));
    ids.iter()
        .map(|id| format!("{}@{}", id.counter, id.peer))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses [`format_version`]'s text (the empty text is the empty document).
pub fn parse_version(s: &str) -> Result<Frontiers, DocError> {
    let bad = || DocError::Invalid(format!("`{s}` is not a version (expected counter@peer,…)"));
    let mut ids = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (counter, peer) = part.split_once('@').ok_or_else(bad)?;
        ids.push(ID::new(
            peer.parse().map_err(|_| bad())?,
            counter.parse().map_err(|_| bad())?,
        ));
    }
    Ok(Frontiers::from(ids))
}

impl WorkflowDoc {
    /// The current version (frontiers) as text.
    pub fn head(&self) -> String {
        format_version(&self.doc.oplog_frontiers())
    }

    /// The document as it was at `version`, which must be in its history.
    pub fn at(&self, version: &str) -> Result<WorkflowDoc, DocError> {
        let f = parse_version(version)?;
        self.check_known(&f, version)?;
        let doc = self.doc.fork_at(&f).map_err(loro_err)?;
        doc.set_record_timestamp(true);
        doc.set_change_merge_interval(VERSION_GAP_SECS);
        Ok(WorkflowDoc { doc })
    }

    fn check_known(&self, f: &Frontiers, text: &str) -> Result<(), DocError> {
        let vv = self.doc.oplog_vv();
        for id in f.iter() {
            if !vv.includes_id(id) {
                return Err(DocError::Invalid(format!(
                    "version `{text}` is not in this workflow's history"
                )));
            }
        }
        Ok(())
    }

    /// What changed from version `from` to version `to` (both in the
    /// history; `""` is the empty document).
    pub fn summarize(&self, from: &str, to: &str) -> Result<Changes, DocError> {
        let a = parse_version(from)?;
        let b = parse_version(to)?;
        self.check_known(&a, from)?;
        self.check_known(&b, to)?;
        let diff = self.doc.diff(&a, &b).map_err(loro_err)?;
        let mut s = Changes::default();
        let mut edges_set = BTreeSet::new();
        let mut edges_removed = BTreeSet::new();
        let mut fields = BTreeSet::new();
        let mut added = BTreeSet::new();
        let mut removed = BTreeSet::new();
        for (cid, d) in diff.iter() {
            let Diff::Map(m) = d else {
                // Text (code, a note) edits: attributed through the path.
                if let Some((node, field)) = self.node_field(cid) {
                    s.nodes_changed.entry(node).or_default().insert(field);
                } else if self.in_notes(cid) {
                    fields.insert(NOTES.to_string());
                }
                continue;
            };
            let keys = m.updated.iter().map(|(k, v)| (k.to_string(), v.is_some()));
            match cid {
                ContainerID::Root { name, .. } if name.as_str() == NODES => {
                    for (k, set) in keys {
                        if set {
                            added.insert(k)
                        } else {
                            removed.insert(k)
                        };
                    }
                }
                ContainerID::Root { name, .. } if name.as_str() == EDGES => {
                    for (k, set) in keys {
                        if set {
                            edges_set.insert(k)
                        } else {
                            edges_removed.insert(k)
                        };
                    }
                }
                ContainerID::Root { name, .. } if name.as_str() == META => {
                    fields.extend(keys.map(|(k, _)| k));
                }
                ContainerID::Root { name, .. } if name.as_str() == NOTES => {
                    fields.insert(NOTES.to_string());
                }
                _ if self.in_notes(cid) => {
                    fields.insert(NOTES.to_string());
                }
                _ => {
                    let Some((node, field)) = self.node_field(cid) else {
                        continue;
                    };
                    let entry = s.nodes_changed.entry(node).or_default();
                    for (k, _) in keys {
                        if k == ORDER {
                            continue;
                        }
                        entry.insert(if field.is_empty() {
                            k
                        } else {
                            format!("{field}.{k}")
                        });
                    }
                }
            }
        }
        s.nodes_changed
            .retain(|n, f| !added.contains(n) && !removed.contains(n) && !f.is_empty());
        s.nodes_added = added.into_iter().collect();
        s.nodes_removed = removed.into_iter().collect();
        s.edges_set = edges_set.into_iter().collect();
        s.edges_removed = edges_removed.into_iter().collect();
        s.fields_changed = fields.into_iter().collect();
        Ok(s)
    }

    /// Whether a container is (inside) a sticky note.
    fn in_notes(&self, cid: &ContainerID) -> bool {
        self.doc.get_path_to_container(cid).is_some_and(
            |path| matches!(path.first(), Some((_, Index::Key(k))) if k.as_str() == NOTES),
        )
    }

    /// For a container inside a node: the node id and the field path within
    /// it (`""` for the node map itself, `config`, `config.source`).
    fn node_field(&self, cid: &ContainerID) -> Option<(String, String)> {
        let path = self.doc.get_path_to_container(cid)?;
        let keys: Vec<String> = path
            .iter()
            .filter_map(|(_, i)| match i {
                Index::Key(k) => Some(k.to_string()),
                _ => None,
            })
            .collect();
        if keys.first().map(String::as_str) != Some(NODES) {
            return None;
        }
        let node = keys.get(1)?.clone();
        Some((node, keys[2..].join(".")))
    }
}

/// Who is looking at a workflow and where (cursor, selection): Loro's
/// ephemeral store, never part of the document. Each key is one viewer;
/// entries not refreshed within the timeout disappear.
#[derive(Debug)]
pub struct Presence {
    store: loro::awareness::EphemeralStore,
}

impl Presence {
    pub fn new(timeout_ms: i64) -> Presence {
        Presence {
            store: loro::awareness::EphemeralStore::new(timeout_ms),
        }
    }

    /// Merges a peer's encoded update (Loro's ephemeral-store encoding).
    /// Returns the keys it sets or clears.
    ///
    /// The sender's clock decides nothing: an entry counts from when it
    /// arrived here. Loro's own `apply` trusts the timestamp in the update,
    /// so an entry stamped in the future never expired (a peer could pile
    /// them up) and one stamped near `i64::MIN` overflowed its arithmetic
    /// (found by the `doc_update` fuzz target). The update is decoded here
    /// (values depth-limited by Loro's own decoder) and applied entry by
    /// entry, as if set locally.
    pub fn apply(&mut self, bytes: &[u8]) -> Result<Vec<String>, DocError> {
        #[derive(serde::Deserialize)]
        struct Entry {
            key: String,
            value: Option<LoroValue>,
            #[allow(dead_code)] // the sender's clock: ignored
            timestamp: i64,
        }
        let entries: Vec<Entry> = postcard::from_bytes(bytes)
            .map_err(|e| DocError::Invalid(format!("presence update: {e}")))?;
        self.store.remove_outdated();
        let mut keys = Vec::with_capacity(entries.len());
        for Entry { key, value, .. } in entries {
            match value {
                Some(v) => self.store.set(&key, v),
                None => self.store.delete(&key),
            }
            keys.push(key);
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Sets this viewer's entry `key` to `value`; returns the update to send.
    pub fn set(&mut self, key: &str, value: &Value) -> Vec<u8> {
        let v: LoroValue = serde_json::from_value(value.clone()).unwrap_or(LoroValue::Null);
        self.store.set(key, v);
        self.store.encode(key)
    }

    /// Everything current, encoded.
    pub fn encode_all(&self) -> Vec<u8> {
        self.store.encode_all()
    }

    /// Clears `keys`; returns the update that tells the others.
    pub fn remove(&mut self, keys: &[String]) -> Vec<u8> {
        for k in keys {
            self.store.delete(k);
        }
        let out = self.store.encode_all();
        self.store.remove_outdated();
        out
    }

    /// The current entries (key → value as JSON).
    pub fn states(&self) -> BTreeMap<String, Value> {
        self.store
            .get_all_states()
            .into_iter()
            .map(|(k, v)| (k, serde_json::to_value(&v).unwrap_or(Value::Null)))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.store.keys().is_empty()
    }
}

/// The peers that wrote the operations between `before` and `after`
/// (decimal peer ids, sorted, joined by `,`).
pub fn authors(before: &VersionVector, after: &VersionVector) -> String {
    let mut peers: Vec<u64> = after
        .iter()
        .filter(|(peer, end)| before.get(peer).is_none_or(|b| b < end))
        .map(|(peer, _)| *peer)
        .collect();
    peers.sort_unstable();
    peers
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
