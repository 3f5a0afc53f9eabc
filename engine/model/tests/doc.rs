//! Workflows as Loro documents: exact round trips, minimal operations,
//! concurrent edits that all survive, deterministic repair, and seeded
//! random peers over a network that delays, duplicates and reorders.

use std::collections::VecDeque;

use serde_json::{Value, json};
use sluice_model::doc::{WorkflowDoc, repair};
use sluice_model::{Workflow, validate};

fn wf(v: Value) -> Workflow {
    Workflow::from_value(v).unwrap()
}

fn base() -> Workflow {
    wf(json!({
        "format": "sluice.workflow/v1", "id": "orders", "name": "Orders",
        "vars": {"zeta": 1, "alpha": [1, 2, {"b": 2, "a": 1}]},
        "x-team": "ops",
        "nodes": [
            {"id": "start", "kind": "trigger.manual", "position": [0.0, 0.0]},
            {"id": "shape", "kind": "data.transform", "config": {"jq": "{id: .id,\n total: .total}"}},
            {"id": "tag", "kind": "data.set", "label": "Tag it",
             "config": {"values": {"z": "{{ input.id }}", "a": 1, "big": 18446744073709551615u64}, "keep_input": true},
             "retry": {"max_attempts": 3, "backoff_ms": 200, "factor": 2.0}, "x-note": {"k": "v"}},
            {"id": "done", "kind": "output.end"}
        ],
        "edges": [
            {"from": "start", "to": "shape"},
            {"from": "shape", "to": "tag", "x-color": "red"},
            {"from": "tag", "to": "done"}
        ]
    }))
}

/// Another peer's copy of `a`.
fn copy_of(a: &WorkflowDoc, peer: u64) -> WorkflowDoc {
    let d = WorkflowDoc::from_bytes(&a.snapshot().unwrap()).unwrap();
    d.loro().set_peer_id(peer).unwrap();
    d
}

fn sync(a: &WorkflowDoc, b: &WorkflowDoc) {
    b.import(&a.updates_since(&b.version()).unwrap()).unwrap();
    a.import(&b.updates_since(&a.version()).unwrap()).unwrap();
}

#[test]
fn a_workflow_round_trips_exactly() {
    let w = base();
    let d = WorkflowDoc::from_workflow(&w, 1).unwrap();
    let back = d.to_workflow().unwrap();
    assert_eq!(back, w);
    // Through bytes, on another peer.
    let d2 = WorkflowDoc::from_bytes(&d.snapshot().unwrap()).unwrap();
    assert_eq!(d2.to_workflow().unwrap(), w);
    // Key order inside values is kept (values are stored as JSON text).
    let v = d2.to_value();
    let values = &v["nodes"][2]["config"]["values"];
    assert_eq!(
        values.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["z", "a", "big"]
    );
    assert_eq!(values["big"], json!(18446744073709551615u64));
}

#[test]
fn applying_is_minimal() {
    let w = base();
    let d = WorkflowDoc::from_workflow(&w, 1).unwrap();
    let v0 = d.version();
    assert!(
        !d.apply(&w).unwrap(),
        "the same workflow again writes nothing"
    );
    assert_eq!(d.version(), v0);

    let mut v = serde_json::to_value(&w).unwrap();
    v["nodes"][2]["config"]["keep_input"] = json!(false);
    assert!(d.apply(&wf(v.clone())).unwrap());
    let update = d.updates_since(&v0).unwrap();
    assert!(
        update.len() < 200,
        "one field changed: {} bytes",
        update.len()
    );

    // Code changes travel as a text diff, not a new string.
    let v1 = d.version();
    v["nodes"][1]["config"]["jq"] = json!("{id: .id,\n total: .total,\n n: 1}");
    d.apply(&wf(v.clone())).unwrap();
    assert!(d.updates_since(&v1).unwrap().len() < 200);
    assert_eq!(d.to_workflow().unwrap(), wf(v));
}

#[test]
fn one_field_set_alone_equals_applying_the_whole_workflow() {
    let a = WorkflowDoc::from_workflow(&base(), 1).unwrap();
    let b = copy_of(&a, 2);
    let pos = json!([128.0, -64.5]);
    assert!(a.set_node_field("shape", "position", &pos).unwrap());
    // Unchanged: no operation, no new version.
    let v = a.version();
    assert!(!a.set_node_field("shape", "position", &pos).unwrap());
    assert_eq!(a.version(), v);
    // The same as the slow path, and it syncs like any edit.
    let mut w = base();
    w.nodes[1].position = Some([128.0, -64.5]);
    assert_eq!(a.to_workflow().unwrap(), w);
    assert!(!a.apply(&w).unwrap(), "apply sees nothing left to do");
    sync(&a, &b);
    assert_eq!(b.to_workflow().unwrap(), w);
    // Wrong node or a field that is not plain: an error naming it, no change.
    let e = a.set_node_field("nope", "position", &pos).unwrap_err();
    assert!(e.to_string().contains("`nope`"), "{e}");
    let e = a.set_node_field("shape", "config", &json!({})).unwrap_err();
    assert!(e.to_string().contains("`config`"), "{e}");
    assert_eq!(a.to_workflow().unwrap(), w);
}

#[test]
fn concurrent_edits_to_different_nodes_and_fields_all_survive() {
    let a = WorkflowDoc::from_workflow(&base(), 1).unwrap();
    let b = copy_of(&a, 2);
    let c = copy_of(&a, 3);

    // a: a field of `tag`; b: another field of `tag` and the code of `shape`
    // (at its start); c: the code of `shape` (at its end) and a new node.
    let mut va = a.to_value();
    va["nodes"][2]["label"] = json!("Tag (renamed)");
    a.apply(&wf(va)).unwrap();
    let mut vb = b.to_value();
    vb["nodes"][2]["config"]["keep_input"] = json!(false);
    vb["nodes"][1]["config"]["jq"] = json!("# by b\n{id: .id,\n total: .total}");
    b.apply(&wf(vb)).unwrap();
    let mut vc = c.to_value();
    vc["nodes"][1]["config"]["jq"] = json!("{id: .id,\n total: .total} # by c");
    vc["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "log", "kind": "util.log", "config": {"message": "hi"}}));
    vc["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "tag", "to": "log"}));
    c.apply(&wf(vc)).unwrap();

    sync(&a, &b);
    sync(&b, &c);
    sync(&a, &c);
    let merged = a.to_value();
    assert_eq!(merged, b.to_value());
    assert_eq!(merged, c.to_value());
    assert_eq!(merged["nodes"][2]["label"], "Tag (renamed)");
    assert_eq!(merged["nodes"][2]["config"]["keep_input"], false);
    assert_eq!(
        merged["nodes"][1]["config"]["jq"],
        "# by b\n{id: .id,\n total: .total} # by c"
    );
    assert_eq!(merged["nodes"][4]["id"], "log");
    assert!(validate(&wf(merged)).is_empty());
}

#[test]
fn an_edge_to_a_node_deleted_concurrently_is_dropped_everywhere() {
    let a = WorkflowDoc::from_workflow(&base(), 1).unwrap();
    let b = copy_of(&a, 2);
    // a deletes `done`; b wires `shape` to `done` as well.
    let mut va = a.to_value();
    va["nodes"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["id"] != "done");
    va["edges"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["to"] != "done");
    a.apply(&wf(va)).unwrap();
    let mut vb = b.to_value();
    vb["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "shape", "to": "done"}));
    b.apply(&wf(vb)).unwrap();
    sync(&a, &b);
    let (ma, mb) = (a.to_value(), b.to_value());
    assert_eq!(ma, mb);
    assert!(
        ma["edges"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["to"] != "done")
    );
    assert!(validate(&wf(ma)).is_empty());
}

#[test]
fn concurrent_edges_closing_a_cycle_are_repaired_the_same_way() {
    let w = wf(json!({
        "format": "sluice.workflow/v1", "id": "c",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "p", "kind": "util.log", "config": {"message": "p"}},
            {"id": "q", "kind": "util.log", "config": {"message": "q"}}
        ],
        "edges": [{"from": "t", "to": "p"}, {"from": "t", "to": "q"}]
    }));
    let a = WorkflowDoc::from_workflow(&w, 1).unwrap();
    let b = copy_of(&a, 2);
    let mut va = a.to_value();
    va["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "p", "to": "q"}));
    a.apply(&wf(va)).unwrap();
    let mut vb = b.to_value();
    vb["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "q", "to": "p"}));
    b.apply(&wf(vb)).unwrap();
    sync(&a, &b);
    let (ma, mb) = (a.to_value(), b.to_value());
    assert_eq!(ma, mb);
    assert_eq!(
        ma["edges"].as_array().unwrap().len(),
        3,
        "one of the two is dropped"
    );
    assert!(validate(&wf(ma)).is_empty());
    // The repair itself is a pure function of the JSON.
    let mut cyclic = json!({"nodes": [{"id": "x"}, {"id": "y"}],
        "edges": [{"from": "x", "to": "y"}, {"from": "y:out", "to": "x"}, {"from": "x", "to": "gone"}]});
    let dropped = repair(&mut cyclic);
    assert_eq!(dropped.len(), 2, "{dropped:?}");
    assert_eq!(cyclic["edges"], json!([{"from": "x", "to": "y"}]));
}

#[test]
fn imports_are_idempotent_and_garbage_changes_nothing() {
    let a = WorkflowDoc::from_workflow(&base(), 1).unwrap();
    let b = WorkflowDoc::new();
    let update = a.updates_since(&b.version()).unwrap();
    b.import(&update).unwrap();
    let once = (b.to_value(), b.version());
    b.import(&update).unwrap();
    assert_eq!((b.to_value(), b.version()), once);
    for garbage in [
        &b"not loro"[..],
        &[],
        &update[..update.len() / 2],
        &[0xff; 64],
    ] {
        assert!(b.import(garbage).is_err() || b.version() == once.1);
        assert_eq!((b.to_value(), b.version()), once);
    }
    let mut flipped = update.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x5a;
    let fresh = WorkflowDoc::new();
    let _ = fresh.import(&flipped);
    assert_eq!(
        fresh.to_value()["nodes"],
        json!([]),
        "a corrupt update adds nothing"
    );
}

// ---- seeded random peers ----------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn ids(v: &Value, pred: impl Fn(&Value) -> bool) -> Vec<String> {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| pred(n))
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

fn has_path(v: &Value, from: &str, to: &str) -> bool {
    let mut stack = vec![from.to_string()];
    let mut seen = std::collections::HashSet::new();
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if !seen.insert(n.clone()) {
            continue;
        }
        for e in v["edges"].as_array().unwrap() {
            if e["from"].as_str().unwrap().split(':').next() == Some(n.as_str()) {
                stack.push(
                    e["to"]
                        .as_str()
                        .unwrap()
                        .split(':')
                        .next()
                        .unwrap()
                        .to_string(),
                );
            }
        }
    }
    false
}

/// One local edit, made the way the editor or the API would: on the JSON,
/// keeping it valid, then applied to the document.
fn random_edit(rng: &mut Rng, peer: usize, counter: &mut usize, v: &mut Value) {
    let not_exit = |n: &Value| n["kind"] != "output.end";
    let not_trigger = |n: &Value| !n["kind"].as_str().unwrap().starts_with("trigger.");
    let editable = |n: &Value| n["kind"] != "trigger.manual";
    match rng.below(7) {
        0 => {
            *counter += 1;
            let id = format!("n{peer}-{counter}");
            let node = match rng.below(4) {
                0 => json!({"id": id, "kind": "data.set", "config": {"values": {"k": *counter}}}),
                1 => json!({"id": id, "kind": "data.transform", "config": {"jq": "."}}),
                2 => json!({"id": id, "kind": "util.log", "config": {"message": "m"}}),
                _ => json!({"id": id, "kind": "output.end"}),
            };
            let sources = ids(v, not_exit);
            let from = sources[rng.below(sources.len())].clone();
            v["nodes"].as_array_mut().unwrap().push(node);
            v["edges"]
                .as_array_mut()
                .unwrap()
                .push(json!({"from": from, "to": id}));
        }
        1 => {
            let victims = ids(v, editable);
            if victims.is_empty() {
                return;
            }
            let id = victims[rng.below(victims.len())].clone();
            v["nodes"]
                .as_array_mut()
                .unwrap()
                .retain(|n| n["id"] != json!(id));
            v["edges"].as_array_mut().unwrap().retain(|e| {
                e["from"].as_str().unwrap().split(':').next() != Some(&id)
                    && e["to"].as_str().unwrap().split(':').next() != Some(&id)
            });
        }
        2 => {
            let sets = ids(v, |n| n["kind"] == "data.set");
            if let Some(id) = sets.get(rng.below(sets.len().max(1))) {
                let n = v["nodes"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|n| n["id"] == json!(id))
                    .unwrap();
                n["config"]["values"][format!("p{peer}")] = json!(rng.below(1000));
            }
        }
        3 => {
            let code = ids(v, |n| n["kind"] == "data.transform");
            if let Some(id) = code.get(rng.below(code.len().max(1))) {
                let n = v["nodes"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|n| n["id"] == json!(id))
                    .unwrap();
                // Whole comment lines keep any merge a valid program.
                let jq = n["config"]["jq"].as_str().unwrap().to_string();
                n["config"]["jq"] = json!(format!("{jq}\n# edit by {peer}"));
            }
        }
        4 => {
            let froms = ids(v, not_exit);
            let tos = ids(v, not_trigger);
            if tos.is_empty() {
                return;
            }
            let (from, to) = (&froms[rng.below(froms.len())], &tos[rng.below(tos.len())]);
            let exists = v["edges"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["from"] == json!(from) && e["to"] == json!(to));
            // The editor refuses an edge that closes a cycle.
            if from != to && !exists && !has_path(v, to, from) {
                v["edges"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"from": from, "to": to}));
            }
        }
        5 => {
            let edges = v["edges"].as_array_mut().unwrap();
            if !edges.is_empty() {
                let i = rng.below(edges.len());
                edges.remove(i);
            }
        }
        _ => {
            let all = ids(v, |_| true);
            let id = &all[rng.below(all.len())];
            let n = v["nodes"]
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .find(|n| n["id"] == json!(id))
                .unwrap();
            n["position"] = json!([rng.below(2000) as f64, rng.below(2000) as f64]);
        }
    }
}

struct Msg {
    at: u64,
    to: usize,
    bytes: Vec<u8>,
}

/// Returns how many edges the merge left for [`repair`] to drop.
fn run_peers(seed: u64, peers: usize, ticks: u64) -> usize {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let start = wf(json!({
        "format": "sluice.workflow/v1", "id": "fuzz",
        "nodes": [{"id": "start", "kind": "trigger.manual"}, {"id": "end", "kind": "output.end"}],
        "edges": [{"from": "start", "to": "end"}]
    }));
    let origin = WorkflowDoc::from_workflow(&start, 1000).unwrap();
    let snapshot = origin.snapshot().unwrap();
    let docs: Vec<WorkflowDoc> = (0..peers)
        .map(|p| {
            let d = WorkflowDoc::from_bytes(&snapshot).unwrap();
            d.loro().set_peer_id(p as u64 + 1).unwrap();
            d
        })
        .collect();
    let mut counters = vec![0usize; peers];
    let mut net: VecDeque<Msg> = VecDeque::new();
    for now in 0..ticks {
        let p = rng.below(peers);
        if rng.chance(70) {
            let before = docs[p].version();
            let mut v = docs[p].to_value();
            random_edit(&mut rng, p, &mut counters[p], &mut v);
            docs[p].apply(&wf(v)).unwrap();
            let update = docs[p].updates_since(&before).unwrap();
            for q in (0..peers).filter(|q| *q != p) {
                let copies = if rng.chance(15) { 2 } else { 1 };
                for _ in 0..copies {
                    net.push_back(Msg {
                        at: now + rng.below(12) as u64,
                        to: q,
                        bytes: update.clone(),
                    });
                }
            }
        }
        // Deliver what is due, in random order.
        let mut due: Vec<Msg> = Vec::new();
        net.retain(|m| {
            if m.at <= now {
                due.push(Msg {
                    at: m.at,
                    to: m.to,
                    bytes: m.bytes.clone(),
                });
                false
            } else {
                true
            }
        });
        while !due.is_empty() {
            let m = due.swap_remove(rng.below(due.len()));
            docs[m.to].import(&m.bytes).unwrap();
        }
    }
    // The network drains, in random order.
    let mut rest: Vec<Msg> = net.into_iter().collect();
    while !rest.is_empty() {
        let m = rest.swap_remove(rng.below(rest.len()));
        docs[m.to].import(&m.bytes).unwrap();
    }
    let first = docs[0].to_value();
    for (i, d) in docs.iter().enumerate() {
        assert_eq!(
            d.version(),
            docs[0].version(),
            "seed {seed}: peer {i} version"
        );
        assert_eq!(d.to_value(), first, "seed {seed}: peer {i} differs");
    }
    let repaired = repair(&mut docs[0].raw_value()).len();
    let merged = wf(first.clone());
    let problems = validate(&merged);
    assert!(problems.is_empty(), "seed {seed}: {problems:?}\n{first:#}");
    repaired
}

#[test]
fn random_peers_over_a_bad_network_converge_on_a_valid_workflow() {
    let mut repaired = 0;
    for seed in 0..24 {
        repaired += run_peers(seed, 3 + (seed as usize % 3), 150);
    }
    // The seeds do produce merges that need repair (dangling or cyclic edges).
    assert!(repaired > 0);
}

#[test]
fn versions_are_viewed_and_summarized_exactly() {
    let w0 = base();
    let d = WorkflowDoc::new();
    d.set_version_gap(-1);
    d.loro().set_peer_id(7).unwrap();
    assert!(d.apply_as(&w0, Some("import")).unwrap());
    let v0 = d.head();

    // A second version: a config edit, a code edit, a new node and edge, a rename.
    let mut v = serde_json::to_value(&w0).unwrap();
    v["name"] = json!("Orders v2");
    v["nodes"][2]["config"]["keep_input"] = json!(false);
    v["nodes"][1]["config"]["jq"] = json!("{id: .id,\n total: .total, n: 1}");
    v["nodes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "log", "kind": "output.end"}));
    v["edges"]
        .as_array_mut()
        .unwrap()
        .push(json!({"from": "tag", "to": "log"}));
    let w1 = wf(v.clone());
    assert!(d.apply_as(&w1, Some("api")).unwrap());
    let v1 = d.head();

    // A third: a node removed (and its edge).
    v["nodes"].as_array_mut().unwrap().remove(3);
    v["edges"].as_array_mut().unwrap().remove(2);
    let w2 = wf(v);
    assert!(d.apply_as(&w2, Some("api")).unwrap());

    let v2 = d.head();
    assert_ne!(v1, v2);

    let s1 = d.summarize(&v0, &v1).unwrap();
    assert_eq!(s1.nodes_added, vec!["log"]);
    assert_eq!(s1.edges_set, vec!["tag -> log"]);
    assert_eq!(s1.fields_changed, vec!["name"]);
    assert!(
        s1.nodes_changed["tag"].contains("config.keep_input"),
        "{s1:?}"
    );
    assert!(s1.nodes_changed["shape"].contains("config.jq"), "{s1:?}");
    assert_eq!(s1.nodes_changed.len(), 2, "{s1:?}");
    let s2 = d.summarize(&v1, &v2).unwrap();
    assert_eq!(s2.nodes_removed, vec!["done"]);
    assert_eq!(s2.edges_removed, vec!["tag -> done"]);
    assert!(s2.to_string().contains("removed done"), "{s2}");
    // From nothing: everything is added.
    let s0 = d.summarize("", &v0).unwrap();
    assert_eq!(s0.nodes_added, vec!["done", "shape", "start", "tag"]);
    // Versions survive a trip through updates (how the engine stores them).
    let again = WorkflowDoc::from_bytes(&d.updates_since(&Default::default()).unwrap()).unwrap();
    assert_eq!(again.summarize(&v0, &v1).unwrap(), s1);

    // The past, exactly.
    assert_eq!(d.at(&v0).unwrap().to_workflow().unwrap(), w0);
    assert_eq!(d.at(&v1).unwrap().to_workflow().unwrap(), w1);
    // Restoring is new operations on top: history only grows.
    assert!(d.apply_as(&w0, Some("restore")).unwrap());
    assert_eq!(d.to_workflow().unwrap(), w0);
    assert_eq!(d.at(&v1).unwrap().to_workflow().unwrap(), w1);
    assert_eq!(d.at(&v2).unwrap().to_workflow().unwrap(), w2);

    // Versions that are not in the history are refused by name.
    let err = d.at("99@12345").unwrap_err().to_string();
    assert!(err.contains("99@12345"), "{err}");
    assert!(d.at("garbage").is_err());
}

/// A document is data from peers and browsers: containers nested
/// absurdly deep (built one level at a time, as an attacker's own Loro
/// would) are imported, read, summarized and exported without overflowing
/// the stack. Run on a thread with 256 KiB of stack, an eighth of a tokio
/// worker's, where any recursion over the nesting would overflow.
#[test]
fn deeply_nested_containers_cannot_overflow_the_stack() {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let wf = base();
            let attacker = WorkflowDoc::from_workflow(&wf, 7).unwrap();
            let before = attacker.loro().oplog_vv();
            let mut map = attacker
                .loro()
                .get_map("meta")
                .insert_container("deep", loro::LoroMap::new())
                .unwrap();
            for _ in 0..5_000 {
                map = map.insert_container("d", loro::LoroMap::new()).unwrap();
            }
            let mut list = attacker
                .loro()
                .get_map("meta")
                .insert_container("deeper", loro::LoroList::new())
                .unwrap();
            for _ in 0..5_000 {
                list = list.insert_container(0, loro::LoroList::new()).unwrap();
            }
            attacker.loro().commit();
            let update = attacker.updates_since(&before).unwrap();
            let snapshot = attacker.snapshot().unwrap();

            let victim = WorkflowDoc::from_workflow(&wf, 8).unwrap();
            victim
                .import(&attacker.updates_since(&Default::default()).unwrap())
                .unwrap();
            victim.import(&update).unwrap();
            assert_eq!(victim.to_workflow().unwrap().id, wf.id);
            let _ = victim.raw_value();
            let again = WorkflowDoc::from_bytes(&snapshot).unwrap();
            assert_eq!(again.to_workflow().unwrap().id, wf.id);
            let _ = again.snapshot().unwrap();
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A presence update's timestamps come from the sender's clock: an entry
/// stamped far in the future must still expire by this machine's clock,
/// and one stamped near `i64::MIN` must not overflow (found by the
/// `doc_update` fuzz target; `fuzz/regressions/doc_update/`).
#[test]
fn presence_entries_expire_by_the_local_clock_whatever_their_timestamp() {
    use sluice_model::doc::Presence;
    // Loro's encoding: a list of (key, Option<value>, timestamp).
    let update = |key: &str, ts: i64| {
        postcard::to_allocvec(&vec![(key, Some(loro::LoroValue::from("here")), ts)]).unwrap()
    };
    let mut p = Presence::new(50);
    assert_eq!(p.apply(&update("future", i64::MAX)).unwrap(), ["future"]);
    assert_eq!(p.apply(&update("past", i64::MIN)).unwrap(), ["past"]);
    assert_eq!(p.apply(&update("stale", 0)).unwrap(), ["stale"]);
    assert_eq!(
        p.states().keys().collect::<Vec<_>>(),
        ["future", "past", "stale"]
    );
    std::thread::sleep(std::time::Duration::from_millis(120));
    // Any update sweeps out what has not been refreshed within the timeout.
    p.apply(&update("now", 0)).unwrap();
    assert_eq!(p.states().keys().collect::<Vec<_>>(), ["now"]);
    // A deletion clears a key; garbage is an error naming what it is.
    let gone = postcard::to_allocvec(&vec![("now", None::<loro::LoroValue>, 0i64)]).unwrap();
    assert_eq!(p.apply(&gone).unwrap(), ["now"]);
    assert!(p.is_empty());
    let e = p.apply(&[0xff, 0xff]).unwrap_err();
    assert!(e.to_string().contains("presence update"), "{e}");
}

#[test]
fn sticky_notes_merge_note_by_note_and_field_by_field() {
    let mut v = serde_json::to_value(base()).unwrap();
    v["notes"] = json!([
        {"id": "plan", "text": "# Plan\nCheck the totals", "position": [0, 200], "size": [240, 140]},
        {"text": "no id yet", "position": [400, 200], "color": 3}
    ]);
    let a = WorkflowDoc::from_workflow(&wf(v), 1).unwrap();
    let notes = a.to_value()["notes"].clone();
    // A note without an id gets one from its place; other keys are kept.
    assert_eq!(notes[0]["id"], "plan");
    assert_eq!(notes[1]["id"], "note-1");
    assert_eq!(notes[1]["color"], 3);
    assert_eq!(notes[0]["text"], "# Plan\nCheck the totals");
    let b = copy_of(&a, 2);
    let c = copy_of(&a, 3);
    // a writes in plan, b moves it and resizes the other,
    // c deletes the other note and adds one.
    let mut va = a.to_value();
    va["notes"][0]["text"] = json!("# Plan (a)\nCheck the totals");
    a.apply(&wf(va)).unwrap();
    let mut vb = b.to_value();
    vb["notes"][0]["position"] = json!([40, 260]);
    vb["notes"][1]["size"] = json!([300, 100]);
    b.apply(&wf(vb)).unwrap();
    let mut vc = c.to_value();
    vc["notes"] =
        json!([vc["notes"][0].clone(), {"id": "n-c", "text": "by c", "position": [0, 0]}]);
    c.apply(&wf(vc)).unwrap();
    sync(&a, &b);
    sync(&b, &c);
    sync(&a, &c);
    let merged = a.to_value();
    assert_eq!(merged, b.to_value());
    assert_eq!(merged, c.to_value());
    let notes = merged["notes"].as_array().unwrap();
    let ids: Vec<&str> = notes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["plan", "n-c"]);
    assert_eq!(notes[0]["text"], "# Plan (a)\nCheck the totals");
    assert_eq!(notes[0]["position"], json!([40, 260]));
    // What changed is told as the `notes` field.
    let before = b.head();
    let mut vb = b.to_value();
    vb["notes"][1]["text"] = json!("by c, then b");
    b.apply(&wf(vb)).unwrap();
    let changes = b.summarize(&before, &b.head()).unwrap();
    assert_eq!(changes.fields_changed, ["notes"], "{changes:?}");
    assert!(changes.nodes_changed.is_empty(), "{changes:?}");
    // A document from before the notes map (its notes a plain top-level
    // entry) moves them on its first edit, and two editors doing that at
    // once agree: nothing doubled.
    let old = WorkflowDoc::new();
    old.loro().set_peer_id(7).unwrap();
    let meta = old.loro().get_map("meta");
    for (k, v) in serde_json::to_value(base()).unwrap().as_object().unwrap() {
        if k != "nodes" && k != "edges" {
            meta.insert(k, v.to_string()).unwrap();
        }
    }
    meta.insert(
        "notes",
        json!([{"text": "Old note", "position": [1, 2]}]).to_string(),
    )
    .unwrap();
    old.loro().commit();
    assert_eq!(old.to_value()["notes"][0]["text"], "Old note");
    let (x, y) = (copy_of(&old, 8), copy_of(&old, 9));
    for d in [&x, &y] {
        let mut v = d.to_value();
        v["name"] = json!(format!("edited by {}", d.loro().peer_id()));
        d.apply(&wf(v)).unwrap();
    }
    sync(&x, &y);
    assert_eq!(x.to_value(), y.to_value());
    let notes = x.to_value()["notes"].clone();
    assert_eq!(
        notes,
        json!([{"id": "note-0", "position": [1, 2], "text": "Old note"}])
    );
    // Repeated ids are made unique, each once.
    let mut v = a.to_value();
    v["notes"] =
        json!([{"id": "a-2", "text": "1"}, {"id": "a", "text": "2"}, {"id": "a", "text": "3"}]);
    a.apply(&wf(v)).unwrap();
    let ids: Vec<String> = a.to_value()["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["a-2", "a", "a-3"]);
    assert!(!a.apply(&wf(a.to_value())).unwrap(), "stable once unique");
    // Applying what the document says changes nothing; no notes, no key.
    assert!(!a.apply(&wf(a.to_value())).unwrap());
    let mut none = a.to_value();
    none.as_object_mut().unwrap().remove("notes");
    assert!(a.apply(&wf(none)).unwrap());
    assert!(a.to_value().get("notes").is_none());
}
