//! Validation: every problem of a workflow at once, each naming the node or
//! edge and the field it is about.

use std::collections::HashSet;

use serde_json::Value;

use crate::graph::{Graph, ScopeError};
use crate::kinds::{self, Kind};
use crate::template;
use crate::workflow::{FORMAT, OnError, Workflow};

pub use sluice_api::Problem;

/// The workflow id the trigger port keeps for resume links
/// (`/hook/resume/{token}`, see `flow.approval`).
pub const RESERVED_ID: &str = "resume";

fn problem(node: Option<&str>, field: Option<&str>, message: impl Into<String>) -> Problem {
    Problem {
        node: node.map(str::to_string),
        edge: None,
        field: field.map(str::to_string),
        message: message.into(),
    }
}

fn edge_problem(edge: usize, field: &str, message: impl Into<String>) -> Problem {
    Problem {
        node: None,
        edge: Some(edge),
        field: Some(field.to_string()),
        message: message.into(),
    }
}

/// Largest `settings.concurrency` (runs of one workflow at once).
pub const MAX_CONCURRENCY: u64 = 100_000;

/// Node ids and port names: letters, digits, `-` and `_`, starting with a letter or digit.
pub fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `pinned`: test data by node id, then output port (see the plan).
fn check_pinned(wf: &Workflow, pinned: &Value, out: &mut Vec<Problem>) {
    let Some(map) = pinned.as_object() else {
        out.push(problem(
            None,
            Some("pinned"),
            "must be an object: node id → output port → message",
        ));
        return;
    };
    for (id, ports) in map {
        let field = format!("pinned.{id}");
        let Some(node) = wf.nodes.iter().find(|n| n.id == *id) else {
            out.push(problem(
                None,
                Some(field.as_str()),
                format!("there is no node `{id}` to pin data for"),
            ));
            continue;
        };
        let Some(ports) = ports.as_object().filter(|p| !p.is_empty()) else {
            out.push(problem(
                Some(id.as_str()),
                Some(field.as_str()),
                "must be an object of output port → message, like {\"out\": {…}}",
            ));
            continue;
        };
        let known = kinds::spec(&node.kind).map(|k| k.output_ports(&node.config));
        for (port, msg) in ports {
            if known.as_ref().is_some_and(|k| !k.contains(port)) {
                out.push(problem(
                    Some(id.as_str()),
                    Some(format!("{field}.{port}").as_str()),
                    format!("`{}` has no output `{port}`", node.id),
                ));
            }
            if crate::value::deeper_than(msg, crate::value::MAX_DEPTH) {
                out.push(problem(
                    Some(id.as_str()),
                    Some(format!("{field}.{port}").as_str()),
                    format!(
                        "is nested more than {} levels deep",
                        crate::value::MAX_DEPTH
                    ),
                ));
            }
        }
    }
}

/// Checks a workflow and returns every problem found (empty: valid).
pub fn validate(wf: &Workflow) -> Vec<Problem> {
    let mut out = Vec::new();
    if wf.format != FORMAT {
        out.push(problem(
            None,
            Some("format"),
            format!("is `{}`, expected `{FORMAT}`", wf.format),
        ));
    }
    if !is_slug(&wf.id) {
        out.push(problem(
            None,
            Some("id"),
            format!("`{}` is not a slug (letters, digits, `-`, `_`)", wf.id),
        ));
    }
    if wf.id == RESERVED_ID {
        out.push(problem(
            None,
            Some("id"),
            "`resume` is reserved: the trigger port answers resume links at /hook/resume/",
        ));
    }

    if let Some(settings) = wf.extra.get("settings") {
        match settings.as_object() {
            None => out.push(problem(None, Some("settings"), "must be an object")),
            Some(m) => {
                if let Some(c) = m.get("concurrency")
                    && c.as_u64()
                        .is_none_or(|c| !(1..=MAX_CONCURRENCY).contains(&c))
                {
                    out.push(problem(
                        None,
                        Some("settings.concurrency"),
                        format!("must be a whole number from 1 to {MAX_CONCURRENCY}"),
                    ));
                }
                if let Some(p) = m.get("publish")
                    && serde_json::from_value::<sluice_api::PublishMode>(p.clone()).is_err()
                {
                    out.push(problem(
                        None,
                        Some("settings.publish"),
                        format!("is {p}: expected \"manual\" or \"on_valid_idle\""),
                    ));
                }
                if let Some(v) = m.get("run_on")
                    && serde_json::from_value::<sluice_api::RunOn>(v.clone()).is_err()
                {
                    out.push(problem(
                        None,
                        Some("settings.run_on"),
                        format!("is {v}: expected \"local\" or \"worker\""),
                    ));
                }
                if let Some(v) = m.get("strict")
                    && !v.is_boolean()
                {
                    out.push(problem(
                        None,
                        Some("settings.strict"),
                        format!("is {v}: expected true or false"),
                    ));
                }
                if let Some(runs) = m.get("runs") {
                    check_retention(runs, &mut out);
                }
                if let Some(n) = m.get("publish_idle_secs")
                    && n.as_u64()
                        .is_none_or(|n| !(1..=crate::workflow::MAX_PUBLISH_IDLE_SECS).contains(&n))
                {
                    out.push(problem(
                        None,
                        Some("settings.publish_idle_secs"),
                        format!(
                            "must be a whole number of seconds from 1 to {}",
                            crate::workflow::MAX_PUBLISH_IDLE_SECS
                        ),
                    ));
                }
            }
        }
    }
    if let Some(pinned) = wf.extra.get("pinned") {
        check_pinned(wf, pinned, &mut out);
    }
    let mut seen = HashSet::new();
    for n in &wf.nodes {
        let node = Some(n.id.as_str());
        if !is_slug(&n.id) {
            out.push(problem(
                node,
                Some("id"),
                "is not a slug (letters, digits, `-`, `_`; at most 64)",
            ));
        }
        if !seen.insert(n.id.as_str()) {
            out.push(problem(node, Some("id"), "is used by more than one node"));
        }
        if let Some(r) = &n.retry {
            if r.max_attempts == Some(0) {
                out.push(problem(
                    node,
                    Some("retry.max_attempts"),
                    "must be at least 1",
                ));
            }
            if r.factor.is_some_and(|f| !(f.is_finite() && f >= 1.0)) {
                out.push(problem(node, Some("retry.factor"), "must be a number ≥ 1"));
            }
        }
        if kinds::spec(&n.kind).is_some_and(|k| k.id == Kind::Split)
            && n.on_error == Some(OnError::Continue)
        {
            out.push(problem(
                node,
                Some("on_error"),
                "a flow.split cannot `continue` after an error (the error is not a list to split): \
                 use `route` and connect its `error` port",
            ));
        }
        let Some(spec) = kinds::spec(&n.kind) else {
            let known: Vec<&str> = kinds::catalog().iter().map(|k| k.kind).collect();
            out.push(problem(
                node,
                Some("kind"),
                format!("unknown kind `{}` (known: {})", n.kind, known.join(", ")),
            ));
            continue;
        };
        if spec.id == Kind::Approval && n.timeout_ms.is_some() {
            // The step runs no task a node timeout could stop.
            out.push(problem(
                node,
                Some("timeout_ms"),
                "a flow.approval waits for a decision: set its `config.timeout_ms` (and \
                 `config.on_timeout`) instead",
            ));
        }
        if !n.config.is_object() {
            out.push(problem(node, Some("config"), "must be an object"));
            continue;
        }
        if let Err(e) = spec.check_config(&n.config) {
            let field = if e.path.is_empty() {
                "config".to_string()
            } else {
                format!("config.{}", e.path)
            };
            out.push(problem(node, Some(&field), e.message));
        }
        if !spec.is_trigger {
            check_templates(&n.config, "config", spec.raw_fields, &mut |field, msg| {
                out.push(problem(node, Some(field), msg));
            });
        }
    }

    let graph = Graph::new(wf);
    for (i, e) in wf.edges.iter().enumerate() {
        let (src, dst) = (e.source(), e.target());
        match graph.by_id.get(src.node) {
            None => out.push(edge_problem(
                i,
                "from",
                format!("node `{}` does not exist", src.node),
            )),
            Some(&from) => {
                if let Some(spec) = graph.kinds[from] {
                    let node = &wf.nodes[from];
                    let mut ports = spec.output_ports(&node.config);
                    if !spec.is_trigger && !spec.is_exit() {
                        ports.push("error".into());
                    }
                    if !ports.iter().any(|p| p == src.port) {
                        let list = if ports.is_empty() {
                            "none".to_string()
                        } else {
                            ports.join(", ")
                        };
                        out.push(edge_problem(
                            i,
                            "from",
                            format!(
                                "node `{}` ({}) has no output port `{}` (ports: {list})",
                                src.node, spec.kind, src.port
                            ),
                        ));
                    } else if src.port == "error"
                        && node.on_error.is_some_and(|o| o != OnError::Route)
                    {
                        out.push(edge_problem(
                            i,
                            "from",
                            format!(
                                "node `{}` has an `error` edge but `on_error` is not `route`",
                                src.node
                            ),
                        ));
                    }
                }
            }
        }
        match graph.by_id.get(dst.node) {
            None => out.push(edge_problem(
                i,
                "to",
                format!("node `{}` does not exist", dst.node),
            )),
            Some(&to) => {
                if let Some(spec) = graph.kinds[to] {
                    if spec.is_trigger {
                        out.push(edge_problem(
                            i,
                            "to",
                            format!(
                                "node `{}` is a trigger ({}): triggers take no incoming edges",
                                dst.node, spec.kind
                            ),
                        ));
                    } else if dst.port != "in" {
                        out.push(edge_problem(
                            i,
                            "to",
                            format!(
                                "node `{}` has no input port `{}` (ports: in)",
                                dst.node, dst.port
                            ),
                        ));
                    }
                }
            }
        }
    }

    if !wf
        .nodes
        .iter()
        .any(|n| kinds::spec(&n.kind).is_some_and(|k| k.is_trigger))
    {
        out.push(problem(
            None,
            Some("nodes"),
            "has no trigger: add a `trigger.*` node as an entry point",
        ));
    }

    match graph.topo_order() {
        Err(cycle) => {
            let mut names: Vec<&str> = cycle.iter().map(|&i| graph.ids[i].as_str()).collect();
            if let Some(first) = names.first().copied() {
                names.push(first);
            }
            out.push(problem(None, Some("edges"), format!("cycle: {}", names.join(" → "))));
        }
        Ok(order) => match graph.scopes(&order) {
            Ok(_) => check_node_refs(wf, &graph, &mut out),
            Err(ScopeError::JoinOutsideSplit { join }) => out.push(problem(
                Some(&graph.ids[join]),
                None,
                "flow.join is not inside a flow.split: nothing to join",
            )),
            Err(ScopeError::Mixed { node, a, b }) => out.push(problem(
                Some(&graph.ids[node]),
                None,
                format!(
                    "receives messages from `{}` and `{}`, which run inside different flow.split scopes; \
                     close the split with a flow.join first",
                    graph.ids[a], graph.ids[b]
                ),
            )),
        },
    }
    out
}

/// Reports templates that read `nodes.<id>` of a node that does not exist,
/// or that does not run before the node reading it (not upstream of it):
/// either is always empty, and a typo should not be a silent `null`.
fn check_node_refs(wf: &Workflow, graph: &Graph, out: &mut Vec<Problem>) {
    for (i, n) in wf.nodes.iter().enumerate() {
        let Some(spec) = graph.kinds[i] else { continue };
        if spec.is_trigger {
            continue;
        }
        let mut refs = Vec::new();
        collect_refs(&n.config, "config", spec.raw_fields, &mut refs);
        if refs.is_empty() {
            continue;
        }
        let upstream = graph.upstream(i);
        for (field, id) in refs {
            let message = match graph.by_id.get(&id) {
                None => format!("`nodes.{id}`: there is no node `{id}`"),
                Some(j) if !upstream.contains(j) => format!(
                    "`nodes.{id}`: node `{id}` does not run before this one (it is not upstream \
                     of it), so this is always empty"
                ),
                Some(_) => continue,
            };
            out.push(problem(Some(&n.id), Some(&field), message));
        }
    }
}

/// `(field path, node id)` for every `nodes.<id>` read by the templates of
/// a config.
fn collect_refs(v: &Value, path: &str, raw: &[&str], out: &mut Vec<(String, String)>) {
    match v {
        Value::String(s) => {
            for id in template::node_refs(s) {
                out.push((path.to_string(), id));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_refs(item, &format!("{path}[{i}]"), &[], out);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                if !raw.contains(&k.as_str()) {
                    collect_refs(item, &format!("{path}.{k}"), &[], out);
                }
            }
        }
        _ => {}
    }
}

/// Reports template syntax errors in every string of a config.
fn check_templates(v: &Value, path: &str, raw: &[&str], report: &mut dyn FnMut(&str, String)) {
    match v {
        Value::String(s) => {
            if let Err(e) = template::check(s) {
                report(path, e.to_string());
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_templates(item, &format!("{path}[{i}]"), &[], report);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                if raw.contains(&k.as_str()) {
                    continue;
                }
                check_templates(item, &format!("{path}.{k}"), &[], report);
            }
        }
        _ => {}
    }
}

/// The credentials a workflow's nodes refer to: `(node id, credential name,
/// accepted kinds)`.
pub fn credential_refs(wf: &Workflow) -> Vec<(&str, &str, &'static [&'static str])> {
    wf.nodes
        .iter()
        .filter(|n| !n.disabled)
        .filter_map(|n| {
            let kinds = kinds::spec(&n.kind)?.id.credential_kinds();
            let name = n.config.get("credential")?.as_str()?;
            (!kinds.is_empty()).then_some((n.id.as_str(), name, kinds))
        })
        .collect()
}

/// Checks the credentials a workflow names against the vault: `lookup`
/// gives the stored kind of a credential, `None` when there is none. Values
/// never enter this check.
pub fn check_credentials(wf: &Workflow, lookup: impl Fn(&str) -> Option<String>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (node, name, accepted) in credential_refs(wf) {
        match lookup(name) {
            None => problems.push(problem(
                Some(node),
                Some("config.credential"),
                format!(
                    "credential `{name}` does not exist (create it with `sluice credentials set \
                     {name} --kind {} --json ...`)",
                    accepted[0]
                ),
            )),
            Some(kind) if !accepted.contains(&kind.as_str()) => problems.push(problem(
                Some(node),
                Some("config.credential"),
                format!(
                    "credential `{name}` is a `{kind}` credential; this node needs {}",
                    accepted
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            )),
            Some(_) => {}
        }
    }
    problems
}

/// `settings.runs`: the workflow's own retention of finished runs, each
/// field checked on its own so the problem names it.
fn check_retention(runs: &Value, out: &mut Vec<Problem>) {
    let Some(m) = runs.as_object() else {
        out.push(problem(
            None,
            Some("settings.runs"),
            format!(
                "is {runs}: expected an object like {{\"keep_for\": \"14d\", \"keep_max\": 1000}}"
            ),
        ));
        return;
    };
    for (key, v) in m {
        let field = format!("settings.runs.{key}");
        let bad = match key.as_str() {
            "keep_for" | "keep_failed_for" => {
                serde_json::from_value::<sluice_api::KeepFor>(v.clone()).err()
            }
            "keep_max" => serde_json::from_value::<sluice_api::KeepMax>(v.clone()).err(),
            _ => {
                out.push(problem(
                    None,
                    Some(&field),
                    "is not a retention setting: expected keep_for, keep_max or keep_failed_for",
                ));
                continue;
            }
        };
        if let Some(e) = bad {
            out.push(problem(None, Some(&field), format!("is {v}: {e}")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};

    #[track_caller]
    fn check(text: &str, expect: Expect) {
        let wf = Workflow::from_json(text).unwrap();
        let problems: Vec<String> = validate(&wf).iter().map(ToString::to_string).collect();
        expect.assert_eq(&problems.join("\n"));
    }

    #[test]
    fn valid_workflow_has_no_problems() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "ok", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "c", "kind": "flow.if", "config": {"condition": "{{ input.total > 100 }}"}},
                {"id": "e", "kind": "output.end"}],
              "edges": [{"from": "t", "to": "c"}, {"from": "c:true", "to": "e"}]}"#,
            expect![""],
        );
    }

    #[test]
    fn an_approval_times_out_by_its_config() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "a", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "ok", "kind": "flow.approval", "timeout_ms": 5}],
              "edges": [{"from": "t", "to": "ok"}]}"#,
            expect![
                "node `ok` timeout_ms: a flow.approval waits for a decision: set its `config.timeout_ms` (and `config.on_timeout`) instead"
            ],
        );
    }

    #[test]
    fn the_resume_id_is_kept_for_resume_links() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "resume", "nodes": [
                {"id": "t", "kind": "trigger.manual"}]}"#,
            expect![
                "workflow id: `resume` is reserved: the trigger port answers resume links at /hook/resume/"
            ],
        );
    }

    #[test]
    fn reports_every_problem_at_once() {
        check(
            r#"{"format": "sluice.workflow/v2", "id": "bad id", "nodes": [
                {"id": "a", "kind": "data.set", "config": {"values": {"x": "{{ input. }}"}}},
                {"id": "a", "kind": "data.sett"},
                {"id": "s", "kind": "flow.split", "config": {"concurrency": 0}},
                {"id": "e", "kind": "output.end"}],
              "edges": [{"from": "a", "to": "ghost"}, {"from": "a:nope", "to": "e"},
                        {"from": "e", "to": "a"}, {"from": "a", "to": "s:side"}]}"#,
            expect![[r#"
                workflow format: is `sluice.workflow/v2`, expected `sluice.workflow/v1`
                workflow id: `bad id` is not a slug (letters, digits, `-`, `_`)
                node `a` config.values.x: syntax error: unexpected end of input, expected identifier or integer (template line 1)
                node `a` id: is used by more than one node
                node `a` kind: unknown kind `data.sett` (known: trigger.manual, trigger.workflow, trigger.webhook, trigger.schedule, trigger.file, trigger.error, flow.if, flow.switch, flow.merge, flow.split, flow.join, flow.wait, flow.approval, flow.subworkflow, data.set, data.transform, http.request, email.send, ai.chat, db.query, file.read, file.write, code.js, code.wasm, util.log, output.end, output.respond)
                node `s` config.concurrency: must be at least 1
                edges[0] to: node `ghost` does not exist
                edges[1] from: node `a` (data.set) has no output port `nope` (ports: out, error)
                edges[2] from: node `e` (output.end) has no output port `out` (ports: none)
                edges[3] to: node `s` has no input port `side` (ports: in)
                workflow nodes: has no trigger: add a `trigger.*` node as an entry point
                workflow edges: cycle: a → e → a"#]],
        );
    }

    #[test]
    fn trigger_with_incoming_edge() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
                {"id": "t", "kind": "trigger.manual"}, {"id": "u", "kind": "trigger.manual"}],
              "edges": [{"from": "t", "to": "u"}]}"#,
            expect![
                "edges[0] to: node `u` is a trigger (trigger.manual): triggers take no incoming edges"
            ],
        );
    }

    #[test]
    fn join_outside_split() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
                {"id": "t", "kind": "trigger.manual"}, {"id": "j", "kind": "flow.join"}],
              "edges": [{"from": "t", "to": "j"}]}"#,
            expect!["node `j`: flow.join is not inside a flow.split: nothing to join"],
        );
    }

    #[test]
    fn split_cannot_continue_after_an_error() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "s", "kind": "flow.split", "on_error": "continue"}],
              "edges": [{"from": "t", "to": "s"}]}"#,
            expect![
                "node `s` on_error: a flow.split cannot `continue` after an error (the error is not a list to split): use `route` and connect its `error` port"
            ],
        );
    }

    #[test]
    fn references_to_missing_or_later_nodes_are_named() {
        check(
            r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
                {"id": "t", "kind": "trigger.manual"},
                {"id": "fetch", "kind": "data.set", "config": {"values": {"a": 1}}},
                {"id": "use", "kind": "data.set", "config": {"values": {
                    "ok": "{{ nodes.fetch.a }}", "typo": "{{ nodes.fecth.a }}",
                    "later": "total {{ nodes.after.n + 1 }}", "self": "{{ nodes.use }}",
                    "all": "{% for k in nodes %}{{ k }}{% endfor %}"}}},
                {"id": "after", "kind": "data.set", "config": {"values": {"b": "{{ nodes.fetch }}"}}},
                {"id": "side", "kind": "util.log", "config": {"message": "{{ nodes.after.b }}"}}],
              "edges": [{"from": "t", "to": "fetch"}, {"from": "fetch", "to": "use"},
                        {"from": "use", "to": "after"}, {"from": "t", "to": "side"}]}"#,
            expect![[r#"
                node `use` config.values.typo: `nodes.fecth`: there is no node `fecth`
                node `use` config.values.later: `nodes.after`: node `after` does not run before this one (it is not upstream of it), so this is always empty
                node `use` config.values.self: `nodes.use`: node `use` does not run before this one (it is not upstream of it), so this is always empty
                node `side` config.message: `nodes.after`: node `after` does not run before this one (it is not upstream of it), so this is always empty"#]],
        );
    }
}
