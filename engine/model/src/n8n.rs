//! Importing n8n workflows: a file in n8n's export format (`nodes` of
//! `n8n-nodes-base.*` types, `connections` by node name) becomes a Sluice
//! workflow that computes what n8n computes.
//!
//! n8n runs each node once per execution over a list of items; so does the
//! import. A message between imported nodes is that list
//! (`[{"json": {...}, "paired": {...}}]`), and each n8n node becomes a
//! `code.js` node calling the sandbox's `n8n` library (items, paired items,
//! expressions, the node's logic) with the node's parameters as n8n wrote
//! them. Triggers become Sluice triggers followed by a node that makes their
//! message into items; waits and webhook answers become Sluice's own kinds;
//! each leaf gets an `output.end` giving its items' JSON. A node that cannot
//! be converted stays, disabled (passing its items on), with a note saying
//! what to do; the [`Report`] lists those and the credentials to create.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

/// An n8n workflow made into a Sluice workflow.
#[derive(Debug, Clone)]
pub struct Import {
    /// The Sluice workflow (`sluice.workflow/v1`).
    pub workflow: Value,
    pub report: Report,
}

/// What the import did, for people.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Report {
    /// The new workflow's id.
    pub id: String,
    /// The n8n workflow's name.
    pub name: String,
    /// Each n8n node and what it became.
    pub nodes: Vec<NodeReport>,
    /// Credentials to create before the workflow can run.
    pub credentials: Vec<CredentialNeed>,
    /// Webhook addresses: n8n's path and Sluice's.
    pub webhooks: Vec<WebhookMove>,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeReport {
    /// The node's name in n8n.
    pub name: String,
    /// Its n8n type (`n8n-nodes-base.if`).
    #[serde(rename = "type")]
    pub n8n_type: String,
    /// The Sluice node holding its items.
    pub id: String,
    /// False: kept disabled (see `note`).
    pub converted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CredentialNeed {
    /// The name to create it under (the n8n credential's name, as a slug).
    pub name: String,
    /// Its Sluice kind (`smtp`), or the n8n type when Sluice has no kind for it.
    pub kind: String,
    pub n8n_type: String,
    /// The n8n nodes that use it.
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WebhookMove {
    pub method: String,
    /// n8n's address: `/webhook/<path>`.
    pub n8n: String,
    /// Sluice's: `/hook/<workflow id>/<path>`.
    pub sluice: String,
}

impl Report {
    /// Nodes that were not converted.
    pub fn not_converted(&self) -> impl Iterator<Item = &NodeReport> {
        self.nodes.iter().filter(|n| !n.converted)
    }

    /// The report as text, for the CLI.
    pub fn text(&self) -> String {
        let mut out = format!(
            "imported the n8n workflow \"{}\" as `{}` ({} n8n nodes)\n",
            self.name,
            self.id,
            self.nodes.len()
        );
        let done: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.converted)
            .map(|n| format!("{} → {}", n.name, n.id))
            .collect();
        if !done.is_empty() {
            out += &format!("  converted: {}\n", done.join(", "));
        }
        let missing: Vec<&NodeReport> = self.not_converted().collect();
        if !missing.is_empty() {
            out += &format!(
                "  not converted ({}), kept disabled (they pass their items on):\n",
                missing.len()
            );
            for n in missing {
                out += &format!(
                    "    - \"{}\" ({}): {}\n",
                    n.name,
                    n.n8n_type,
                    n.note.as_deref().unwrap_or("")
                );
            }
        }
        for w in &self.webhooks {
            out += &format!("  webhook: {} {} (in n8n: {})\n", w.method, w.sluice, w.n8n);
        }
        if !self.credentials.is_empty() {
            out += "  credentials to create (n8n's are not imported):\n";
            for c in &self.credentials {
                out += &format!(
                    "    - `{}` for {}: sluice credentials set {} --kind {} --json '{{...}}'\n",
                    c.name,
                    c.nodes.join(", "),
                    c.name,
                    c.kind
                );
            }
        }
        for n in &self.notes {
            out += &format!("  note: {n}\n");
        }
        out
    }
}

/// Whether `v` is an n8n workflow export: `nodes` whose `type`s are n8n's,
/// and `connections`.
pub fn is_n8n(v: &Value) -> bool {
    let Some(nodes) = v.get("nodes").and_then(Value::as_array) else {
        return false;
    };
    v.get("connections").is_some_and(Value::is_object)
        && !nodes.is_empty()
        && nodes.iter().all(|n| {
            n.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.contains("n8n-nodes-") || t.starts_with("@n8n/"))
        })
}

/// A slug of `s` for ids: lower case, runs of other characters as `sep`.
fn slug(s: &str, sep: char) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with(sep) {
            out.push(sep);
        }
    }
    while out.ends_with(sep) {
        out.pop();
    }
    out.truncate(48);
    while out.ends_with(sep) {
        out.pop();
    }
    out
}

/// The workflow id an n8n workflow named `name` gets: its slug, with `-2`,
/// `-3`… when `taken` says the id is in use.
pub fn workflow_id(name: &str, taken: &dyn Fn(&str) -> bool) -> String {
    let mut base = slug(name, '-');
    if base.is_empty() || !base.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        base = format!("n8n-{base}").trim_end_matches('-').to_string();
    }
    // `resume` is the approval links' path on the trigger port.
    if base == "resume" {
        base = "resume-workflow".into();
    }
    if !taken(&base) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|id| !taken(id))
        .unwrap_or(base)
}

const BASE: &str = "n8n-nodes-base.";

/// The short type (`if` for `n8n-nodes-base.if`).
fn short(t: &str) -> &str {
    t.strip_prefix(BASE).unwrap_or(t)
}

/// Names of nodes an expression or code refers to: `$('X')`, `$("X")`,
/// `$node["X"]`, `$node.X`, `$items("X")`.
pub fn referenced_nodes(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let b = text.as_bytes();
    let mut push = |s: String| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    let quoted_after = |at: usize| -> Option<String> {
        let mut i = at;
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let q = *b.get(i)?;
        if q != b'\'' && q != b'"' && q != b'`' {
            return None;
        }
        let rest = &text[i + 1..];
        let end = rest.find(q as char)?;
        Some(rest[..end].to_string())
    };
    for (i, _) in text.match_indices("$(") {
        if let Some(n) = quoted_after(i + 2) {
            push(n);
        }
    }
    for (i, _) in text.match_indices("$items(") {
        if let Some(n) = quoted_after(i + 7) {
            push(n);
        }
    }
    for (i, _) in text.match_indices("$node[") {
        if let Some(n) = quoted_after(i + 6) {
            push(n);
        }
    }
    for (i, _) in text.match_indices("$node.") {
        let rest = &text[i + 6..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        if !name.is_empty() {
            push(name);
        }
    }
    out
}

/// What n8n expressions use that the import cannot give, with what to do.
fn unsupported_in(text: &str) -> Option<&'static str> {
    [
        (
            "$evaluateExpression",
            "`$evaluateExpression` is not available: compute the value in a Code node",
        ),
        (
            "$getWorkflowStaticData",
            "workflow static data is not kept between runs: store it in a file or database",
        ),
        ("$fromAI", "`$fromAI` (AI agent tools) is not available"),
        (
            "$secrets",
            "external secrets are not available: use a Sluice credential",
        ),
        (
            "$jmespath",
            "`$jmespath` is not available: use a Code node or data.transform (jq)",
        ),
        (
            "$env",
            "environment variables are not available to workflows",
        ),
        (
            "this.helpers",
            "n8n's helpers (`this.helpers`) are not available in Code nodes",
        ),
        ("require(", "`require` is not available in Code nodes"),
    ]
    .into_iter()
    .find(|(needle, _)| text.contains(needle))
    .map(|(_, why)| why)
}

/// The Sluice credential kind for an n8n credential type.
fn credential_kind(n8n: &str) -> Option<&'static str> {
    Some(match n8n {
        "smtp" => "smtp",
        "httpHeaderAuth" => "header",
        "httpQueryAuth" => "query",
        "httpBasicAuth" => "basic",
        "httpBearerAuth" => "bearer",
        "postgres" => "postgres",
        "mySql" => "mysql",
        "openAiApi" => "openai",
        _ => return None,
    })
}

struct N8nNode<'a> {
    name: String,
    n8n_type: String,
    params: Value,
    position: Option<[f64; 2]>,
    disabled: bool,
    raw: &'a Value,
}

/// How one n8n node came out.
struct Made {
    /// The Sluice node its incoming connections go to.
    entry: String,
    /// The Sluice node holding its items (and sending on its outputs).
    items: String,
    /// Sluice port for each n8n output index.
    ports: Vec<String>,
    /// A trigger (not a leaf that needs an exit).
    trigger: bool,
    /// It answers the webhook (Respond to Webhook).
    responds: bool,
    /// A Merge: its items node takes one input per n8n input.
    merges: bool,
}

struct Builder {
    nodes: Vec<Value>,
    edges: Vec<Value>,
    ids: HashSet<String>,
}

impl Builder {
    fn fresh(&mut self, want: &str) -> String {
        let base = if want.is_empty() {
            "node".to_string()
        } else {
            want.to_string()
        };
        let mut id = base.clone();
        let mut n = 2;
        while self.ids.contains(&id) {
            id = format!("{base}_{n}");
            n += 1;
        }
        self.ids.insert(id.clone());
        id
    }

    fn edge(&mut self, from: &str, port: &str, to: &str) {
        let from = if port == "out" {
            from.to_string()
        } else {
            format!("{from}:{port}")
        };
        self.edges.push(json!({"from": from, "to": to}));
    }
}

/// The Sluice nodes of an n8n node that does I/O once per item.
struct PerItem<'a> {
    /// The n8n node's Sluice id (its items).
    id: &'a str,
    name: &'a str,
    /// What each item asks for (`requests`, `messages`), for the node ids.
    what: &'a str,
    /// The `code.js` config computing one request per item.
    requests: Value,
    /// The Sluice kind doing it, and its config (reading `input.*`).
    call: (&'a str, Value),
    /// The answers' key in the shaping node's input (`responses`).
    answers: &'a str,
    /// The `code.js` source making the answers n8n's items.
    shape: String,
    at: &'a dyn Fn(f64) -> Value,
}

impl Builder {
    /// `<id>_<what>` computes one request per item, `flow.split` hands them
    /// one at a time to the call, `flow.join` gathers the answers in order,
    /// and `id` makes them n8n's items (given `{<answers>, "requests"}`).
    fn per_item(&mut self, p: PerItem<'_>) -> Made {
        let requests = self.fresh(&format!("{}_{}", p.id, p.what));
        let each = self.fresh(&format!("{}_each", p.id));
        let call = self.fresh(&format!("{}_call", p.id));
        let all = self.fresh(&format!("{}_all", p.id));
        let (kind, cfg) = p.call;
        self.nodes.extend([
            json!({"id": requests, "kind": "code.js", "label": format!("{} ({})", p.name, p.what),
                "position": (p.at)(-440.0), "config": p.requests}),
            json!({"id": each, "kind": "flow.split", "label": format!("{} (each item)", p.name),
                "position": (p.at)(-330.0), "config": {"concurrency": 1}}),
            json!({"id": call, "kind": kind, "label": format!("{} ({kind})", p.name),
                "position": (p.at)(-220.0), "config": cfg}),
            json!({"id": all, "kind": "flow.join", "label": format!("{} (all)", p.name),
                "position": (p.at)(-110.0)}),
            json!({"id": p.id, "kind": "code.js", "label": p.name, "position": (p.at)(0.0),
                "config": {"source": p.shape, "timeout_ms": 30000, "input": {
                    p.answers: "{{ input }}", "requests": format!("{{{{ nodes.{requests} }}}}")}}}),
        ]);
        self.edge(&requests, "out", &each);
        self.edge(&each, "out", &call);
        self.edge(&call, "out", &all);
        self.edge(&all, "out", p.id);
        Made::out(&requests, p.id)
    }
}

impl Builder {
    /// The node after a trigger making its message into n8n's items (its
    /// `source` calls the library); the triggers in `from` lead to it.
    fn adapter(
        &mut self,
        id: &str,
        name: &str,
        position: Value,
        source: String,
        from: &[String],
    ) -> Made {
        self.nodes.push(
            json!({"id": id, "kind": "code.js", "label": name, "position": position,
            "config": {"source": source, "timeout_ms": 30000}}),
        );
        for t in from {
            self.edge(t, "out", id);
        }
        Made {
            trigger: true,
            ..Made::out(id, id)
        }
    }
}

impl Made {
    /// One output, `out`: entered at `entry`, its items at `items`.
    fn out(entry: &str, items: &str) -> Made {
        Made {
            entry: entry.to_string(),
            items: items.to_string(),
            ports: vec!["out".into()],
            trigger: false,
            responds: false,
            merges: false,
        }
    }
}

fn js_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn js_value(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into())
}

/// Converts an n8n workflow export. `taken` says which workflow ids exist.
pub fn convert(v: &Value, taken: &dyn Fn(&str) -> bool) -> Result<Import, String> {
    if !is_n8n(v) {
        return Err(
            "not an n8n workflow export (it needs `nodes` of n8n types and `connections`)".into(),
        );
    }
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("imported from n8n")
        .to_string();
    let id = workflow_id(&name, taken);
    let mut report = Report {
        id: id.clone(),
        name: name.clone(),
        ..Report::default()
    };
    let timezone = v
        .pointer("/settings/timezone")
        .and_then(Value::as_str)
        .filter(|t| *t != "DEFAULT")
        .map(str::to_string);

    let mut list: Vec<N8nNode> = Vec::new();
    let mut notes: Vec<Value> = Vec::new();
    for n in v["nodes"].as_array().into_iter().flatten() {
        let n8n_type = n["type"].as_str().unwrap_or_default().to_string();
        let position = n["position"]
            .as_array()
            .and_then(|p| Some([p.first()?.as_f64()?, p.get(1)?.as_f64()?]));
        if short(&n8n_type) == "stickyNote" {
            notes.push(json!({
                "id": crate::doc::note_id(notes.len()),
                "text": n.pointer("/parameters/content").and_then(Value::as_str).unwrap_or_default(),
                "position": position,
                "size": [n.pointer("/parameters/width").cloned().unwrap_or(json!(240)),
                         n.pointer("/parameters/height").cloned().unwrap_or(json!(160))],
            }));
            continue;
        }
        let node_name = n["name"].as_str().unwrap_or_default().to_string();
        if node_name.is_empty() {
            return Err(format!("a node of type {n8n_type} has no name"));
        }
        if list.iter().any(|x| x.name == node_name) {
            return Err(format!("two nodes are named \"{node_name}\""));
        }
        list.push(N8nNode {
            name: node_name,
            n8n_type,
            params: n.get("parameters").cloned().unwrap_or_else(|| json!({})),
            position,
            disabled: n.get("disabled").and_then(Value::as_bool).unwrap_or(false),
            raw: n,
        });
    }

    // Connections: (source name, output index) → [(target name, input index)].
    let mut conns: BTreeMap<(String, usize), Vec<(String, usize)>> = BTreeMap::new();
    if let Some(map) = v["connections"].as_object() {
        for (src, by_type) in map {
            for (i, outs) in by_type["main"].as_array().into_iter().flatten().enumerate() {
                for c in outs.as_array().into_iter().flatten() {
                    let Some(dst) = c["node"].as_str() else {
                        continue;
                    };
                    let idx = c["index"].as_u64().unwrap_or(0) as usize;
                    conns
                        .entry((src.clone(), i))
                        .or_default()
                        .push((dst.to_string(), idx));
                }
            }
            for kind in by_type.as_object().into_iter().flatten().map(|(k, _)| k) {
                if kind != "main" {
                    report.notes.push(format!(
                        "\"{src}\" has `{kind}` connections (AI sub-nodes): they are not imported"
                    ));
                }
            }
        }
    }
    let has_respond = list
        .iter()
        .any(|n| short(&n.n8n_type) == "respondToWebhook");

    let mut b = Builder {
        nodes: Vec::new(),
        edges: Vec::new(),
        ids: HashSet::new(),
    };
    let mut made: HashMap<String, Made> = HashMap::new();
    // The main id of each node first, so references resolve in any order.
    let mut main_id: HashMap<String, String> = HashMap::new();
    for n in &list {
        let want = slug(&n.name, '_');
        let id = b.fresh(&want);
        main_id.insert(n.name.clone(), id);
    }
    let mut creds: BTreeMap<String, CredentialNeed> = BTreeMap::new();

    for n in &list {
        let id = main_id[&n.name].clone();
        let t = short(&n.n8n_type).to_string();
        let pos = n.position;
        let at = |dx: f64| pos.map(|p| json!([p[0] + dx, p[1]])).unwrap_or(Value::Null);
        let params_text = n.params.to_string();
        let mut note: Option<String> = None;

        // Credentials it names.
        if let Some(cs) = n.raw.get("credentials").and_then(Value::as_object) {
            for (ctype, c) in cs {
                let cname = c["name"].as_str().unwrap_or(ctype);
                let key = slug(cname, '-');
                let key = if key.is_empty() {
                    slug(ctype, '-')
                } else {
                    key
                };
                let e = creds.entry(key.clone()).or_insert_with(|| CredentialNeed {
                    name: key.clone(),
                    kind: credential_kind(ctype).unwrap_or(ctype).to_string(),
                    n8n_type: ctype.clone(),
                    nodes: Vec::new(),
                });
                e.nodes.push(n.name.clone());
            }
        }

        // What its expressions and code refer to.
        let mut text = params_text.clone();
        if let Some(code) = n.params.get("jsCode").and_then(Value::as_str) {
            text.push_str(code);
        }
        let refs = referenced_nodes(&text);
        let unknown: Vec<&String> = refs.iter().filter(|r| !main_id.contains_key(*r)).collect();
        if let Some(why) = unsupported_in(&text) {
            note = Some(why.to_string());
        } else if let Some(r) = unknown.first() {
            note = Some(format!(
                "it refers to a node \"{r}\" that the workflow does not have"
            ));
        }
        let mut nodes_input = Map::new();
        for r in refs.iter().filter(|r| main_id.contains_key(*r)) {
            nodes_input.insert(r.clone(), json!(format!("{{{{ nodes.{} }}}}", main_id[r])));
        }
        let input = |items: &str| {
            json!({
                "items": items,
                "node": n.name,
                "nodes": Value::Object(nodes_input.clone()),
                "execution": {"id": "{{ run.id }}"},
            })
        };
        let code_node = |source: String, ports: &[&str], input: Value| {
            let mut cfg = json!({"source": source, "timeout_ms": 30000});
            // None: the message itself.
            if !input.is_null() {
                cfg["input"] = input;
            }
            if !ports.is_empty() {
                cfg["ports"] = json!(ports);
            }
            cfg
        };
        let call = |f: &str| -> String {
            format!(
                "// n8n: \"{}\" ({} v{})\nreturn n8n.{f}(input, {});",
                n.name.replace('\n', " "),
                n.n8n_type,
                n.raw.get("typeVersion").cloned().unwrap_or(json!(1)),
                js_value(&n.params)
            )
        };
        let push = |b: &mut Builder, node: Value| b.nodes.push(node);
        let simple = |f: &str| call(f);

        let (nodes_before, edges_before) = (b.nodes.len(), b.edges.len());
        let result: Result<Made, String> = (|| {
            Ok(match t.as_str() {
                "manualTrigger" | "executeWorkflowTrigger" => {
                    let trig = b.fresh(&format!("{id}_start"));
                    let kind = if t == "manualTrigger" {
                        "trigger.manual"
                    } else {
                        "trigger.workflow"
                    };
                    push(
                        &mut b,
                        json!({"id": trig, "kind": kind, "label": n.name, "position": at(-220.0)}),
                    );
                    let src = format!(
                        "// n8n: \"{}\" ({}): the run's input as items\nreturn n8n.trigger(input, {});",
                        n.name,
                        n.n8n_type,
                        js_string(&n.name)
                    );
                    b.adapter(&id, &n.name, at(0.0), src, &[trig])
                }
                "webhook" => {
                    let method = n.params["httpMethod"]
                        .as_str()
                        .unwrap_or("GET")
                        .to_uppercase();
                    let path = n.params["path"]
                        .as_str()
                        .unwrap_or_default()
                        .trim_matches('/')
                        .to_string();
                    if path.is_empty() || path.contains(':') {
                        return Err(format!(
                            "its path `{path}` {}: set a fixed path on the Sluice trigger",
                            if path.is_empty() {
                                "is empty"
                            } else {
                                "has route parameters, which Sluice webhooks do not take"
                            }
                        ));
                    }
                    let mode = n.params["responseMode"].as_str().unwrap_or("onReceived");
                    let respond = if mode == "onReceived" {
                        "immediately"
                    } else {
                        "when_finished"
                    };
                    if mode == "onReceived" {
                        report.notes.push(format!(
                            "\"{}\" answered at once in n8n (200 {{\"message\": \"Workflow was started\"}}); Sluice answers 202 with the run id",
                            n.name
                        ));
                    }
                    if mode == "responseNode" && !has_respond {
                        report.notes.push(format!(
                            "\"{}\" waits for a Respond to Webhook node the workflow does not have",
                            n.name
                        ));
                    }
                    let trig = b.fresh(&format!("{id}_hook"));
                    push(
                        &mut b,
                        json!({"id": trig, "kind": "trigger.webhook", "label": n.name, "position": at(-220.0),
                        "config": {"method": method, "path": path, "respond": respond}}),
                    );
                    report.webhooks.push(WebhookMove {
                        method: method.clone(),
                        n8n: format!("/webhook/{path}"),
                        sluice: format!("/hook/{}/{path}", report.id),
                    });
                    let src = format!(
                        "// n8n: \"{}\" ({}): the request as n8n's item\nreturn n8n.webhook(input, {}, {});",
                        n.name,
                        n.n8n_type,
                        js_string(&n.name),
                        js_string(&format!("/hook/{}/{path}", report.id))
                    );
                    b.adapter(&id, &n.name, at(0.0), src, &[trig])
                }
                "scheduleTrigger" | "cron" => {
                    let crons = schedule_crons(&n.params)?;
                    let mut triggers = Vec::new();
                    for (k, cron) in crons.iter().enumerate() {
                        let trig = b.fresh(&format!(
                            "{id}_at{}",
                            if k == 0 { String::new() } else { k.to_string() }
                        ));
                        let mut cfg = json!({"cron": cron});
                        if let Some(tz) = &timezone {
                            cfg["timezone"] = json!(tz);
                        }
                        push(
                            &mut b,
                            json!({"id": trig, "kind": "trigger.schedule", "label": n.name,
                            "position": at(-220.0), "config": cfg}),
                        );
                        triggers.push(trig);
                    }
                    let src = format!(
                        "// n8n: \"{}\" ({}): the time it fired as n8n's item\nreturn n8n.schedule(input && input.scheduled_at, {});",
                        n.name,
                        n.n8n_type,
                        js_string(&n.name)
                    );
                    b.adapter(&id, &n.name, at(0.0), src, &triggers)
                }
                "set" | "noOp" | "splitOut" | "aggregate" | "filter" => {
                    let f = match t.as_str() {
                        "set" => "set",
                        "noOp" => "noOp",
                        "splitOut" => "splitOut",
                        "aggregate" => "aggregate",
                        _ => "filter",
                    };
                    let src = if f == "noOp" {
                        format!(
                            "// n8n: \"{}\" ({}): passes its items on\nreturn n8n.noOp(input);",
                            n.name, n.n8n_type
                        )
                    } else {
                        simple(f)
                    };
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(src, &[], input("{{ input }}"))}),
                    );
                    Made::out(&id, &id)
                }
                "if" => {
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(simple("if"), &["true", "false"], input("{{ input }}"))}),
                    );
                    Made {
                        entry: id.clone(),
                        items: id.clone(),
                        ports: vec!["true".into(), "false".into()],
                        trigger: false,
                        responds: false,
                        merges: false,
                    }
                }
                "switch" => {
                    let p = &n.params;
                    let count = if p["mode"] == "expression" {
                        p["numberOutputs"].as_u64().unwrap_or(4) as usize
                    } else {
                        p.pointer("/rules/values")
                            .or_else(|| p.pointer("/rules/rules"))
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len)
                    };
                    let mut ports: Vec<String> = (0..count).map(|k| format!("output{k}")).collect();
                    if p.pointer("/options/fallbackOutput").and_then(Value::as_str) == Some("extra")
                    {
                        ports.push("fallback".into());
                    }
                    let mut names: Vec<&str> = ports.iter().map(String::as_str).collect();
                    if !names.contains(&"fallback") {
                        names.push("fallback");
                    }
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(simple("switch"), &names, input("{{ input }}"))}),
                    );
                    Made {
                        entry: id.clone(),
                        items: id.clone(),
                        ports,
                        trigger: false,
                        responds: false,
                        merges: false,
                    }
                }
                "merge" => {
                    let wait = b.fresh(&format!("{id}_inputs"));
                    push(
                        &mut b,
                        json!({"id": wait, "kind": "flow.merge", "label": format!("{} (inputs)", n.name),
                        "position": at(-160.0), "config": {"mode": "all"}}),
                    );
                    // Its inputs are filled in below, once the edges are known.
                    let src = format!(
                        "// n8n: \"{}\" ({} v{})\nreturn n8n.merge(input.inputs, {}, {});",
                        n.name,
                        n.n8n_type,
                        n.raw.get("typeVersion").cloned().unwrap_or(json!(1)),
                        js_value(&n.params),
                        js_string(&n.name)
                    );
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(src, &[], json!({"inputs": []}))}),
                    );
                    b.edge(&wait, "out", &id);
                    Made {
                        entry: wait,
                        items: id.clone(),
                        ports: vec!["out".into()],
                        trigger: false,
                        responds: false,
                        merges: true,
                    }
                }
                "code" => {
                    let lang = n.params["language"].as_str().unwrap_or("javaScript");
                    if lang != "javaScript" {
                        return Err(format!(
                            "its code is {lang}: only JavaScript Code nodes are converted; rewrite it in JavaScript"
                        ));
                    }
                    let mode = n.params["mode"].as_str().unwrap_or("runOnceForAllItems");
                    let code = n.params["jsCode"]
                        .as_str()
                        .unwrap_or("return $input.all();");
                    let src = format!(
                        "// n8n: \"{}\" ({}, {mode}): the node's code, as n8n runs it\n\
                         return await n8n.code(input, {}, async ({{ $json, $input, $, $node, $now, $today, $items, \
                         $execution, $workflow, $itemIndex, $runIndex, $vars, $prevNode, $binary, DateTime, Duration, \
                         item }}, items) => (async () => {{\n{code}\n}})());",
                        n.name,
                        n.n8n_type,
                        js_string(mode)
                    );
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(src, &[], input("{{ input }}"))}),
                    );
                    Made::out(&id, &id)
                }
                "respondToWebhook" => {
                    let reply = b.fresh(&format!("{id}_reply"));
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(simple("respond"), &["respond", "out"], input("{{ input }}"))}),
                    );
                    let mut headers = Map::new();
                    for h in n
                        .params
                        .pointer("/options/responseHeaders/entries")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(hn) = h["name"].as_str() {
                            headers.insert(
                                hn.to_string(),
                                json!(format!("{{{{ input.headers[{}] }}}}", js_string(hn))),
                            );
                        }
                    }
                    if n.params["respondWith"] == "text" {
                        headers.insert(
                            "content-type".into(),
                            json!("{{ input.headers['content-type'] }}"),
                        );
                    }
                    if n.params["respondWith"] == "redirect" {
                        headers.insert("location".into(), json!("{{ input.headers.location }}"));
                    }
                    push(
                        &mut b,
                        json!({"id": reply, "kind": "output.respond", "label": format!("{} (answer)", n.name),
                        "position": at(220.0),
                        "config": {"status": "{{ input.status }}", "headers": headers, "body": "{{ input.body }}"}}),
                    );
                    b.edge(&id, "respond", &reply);
                    Made {
                        entry: id.clone(),
                        items: id.clone(),
                        ports: vec!["out".into()],
                        trigger: false,
                        responds: true,
                        merges: false,
                    }
                }
                "wait" => {
                    let p = &n.params;
                    let resume = p["resume"].as_str().unwrap_or("timeInterval");
                    let cfg = match resume {
                        "timeInterval" => {
                            let amount = p["amount"].as_f64().unwrap_or(1.0);
                            let unit = p["unit"].as_str().unwrap_or("hours");
                            let ms = amount
                                * match unit {
                                    "seconds" => 1e3,
                                    "minutes" => 6e4,
                                    "hours" => 3.6e6,
                                    "days" => 8.64e7,
                                    other => {
                                        return Err(format!("its wait unit `{other}` is unknown"));
                                    }
                                };
                            json!({"duration_ms": ms.round() as u64})
                        }
                        "specificTime" => {
                            let at = p["dateTime"].as_str().unwrap_or_default();
                            if at.starts_with('=') {
                                return Err("it waits until a time given by an expression: set `until` on the flow.wait by hand".into());
                            }
                            json!({"until": at})
                        }
                        other => {
                            return Err(format!(
                                "it waits for `{other}`: use a flow.approval (a one-time resume link) instead"
                            ));
                        }
                    };
                    push(
                        &mut b,
                        json!({"id": id, "kind": "flow.wait", "label": n.name, "position": at(0.0), "config": cfg}),
                    );
                    Made::out(&id, &id)
                }
                "httpRequest" => {
                    let p = &n.params;
                    if p["authentication"]
                        .as_str()
                        .is_some_and(|a| a == "predefinedCredentialType")
                    {
                        return Err(format!(
                            "it signs in with n8n's `{}` credential: make a Sluice credential and set it on an http.request",
                            p["nodeCredentialType"].as_str().unwrap_or("predefined")
                        ));
                    }
                    let content = p["contentType"].as_str().unwrap_or("json");
                    let send_body = p["sendBody"].as_bool().unwrap_or(false);
                    if send_body && !matches!(content, "json" | "form-urlencoded" | "raw") {
                        return Err(format!(
                            "its `{content}` body is not converted: send it with an http.request by hand"
                        ));
                    }
                    if p["sendHeaders"].as_bool().unwrap_or(false) && p["specifyHeaders"] == "json"
                    {
                        return Err(
                            "its headers are a JSON expression: list them one by one".into()
                        );
                    }
                    let mut headers = Map::new();
                    for h in p
                        .pointer("/headerParameters/parameters")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(hn) = h["name"].as_str().filter(|x| !x.is_empty()) {
                            headers.insert(
                                hn.to_string(),
                                json!(format!("{{{{ input.headers[{}] }}}}", js_string(hn))),
                            );
                        }
                    }
                    let never_error = p
                        .pointer("/options/response/response/neverError")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    let mut cfg = json!({"method": "{{ input.method }}", "url": "{{ input.url }}", "headers": headers,
                        "fail_on_status": !never_error});
                    if let Some(t) = p.pointer("/options/timeout").and_then(Value::as_u64) {
                        cfg["timeout_ms"] = json!(t);
                    }
                    if send_body {
                        cfg["body"] = json!("{{ input.body }}");
                        cfg["body_type"] = json!(match content {
                            "form-urlencoded" => "form",
                            "raw" => "text",
                            _ => "json",
                        });
                    }
                    if p["authentication"] == "genericCredentialType"
                        && let Some(cs) = n.raw.get("credentials").and_then(Value::as_object)
                        && let Some((_, c)) = cs.iter().next()
                    {
                        let cname = slug(c["name"].as_str().unwrap_or_default(), '-');
                        if !cname.is_empty() {
                            cfg["credential"] = json!(cname);
                        }
                    }
                    b.per_item(PerItem {
                        id: &id,
                        name: &n.name,
                        what: "requests",
                        requests: code_node(simple("httpRequests"), &[], input("{{ input }}")),
                        call: ("http.request", cfg),
                        answers: "responses",
                        shape: format!(
                            "// n8n: \"{}\" ({} v{}): the responses as n8n's items\nreturn n8n.httpResponses(input, {}, {});",
                            n.name,
                            n.n8n_type,
                            n.raw.get("typeVersion").cloned().unwrap_or(json!(1)),
                            js_value(&n.params),
                            js_string(&n.name)
                        ),
                        at: &at,
                    })
                }
                "emailSend" => {
                    if n.params["operation"].as_str().is_some_and(|o| o != "send") {
                        return Err("only sending is converted (not sending and waiting for a reply): use a flow.approval for the reply".into());
                    }
                    if n.params.pointer("/options/attachments").is_some() {
                        return Err("its attachments are binary data, which imported workflows do not carry: attach them with an email.send by hand".into());
                    }
                    let cred = n
                        .raw
                        .get("credentials")
                        .and_then(Value::as_object)
                        .and_then(|cs| cs.values().next())
                        .map(|c| slug(c["name"].as_str().unwrap_or("smtp"), '-'))
                        .filter(|c| !c.is_empty())
                        .unwrap_or_else(|| "smtp".into());
                    b.per_item(PerItem {
                        id: &id,
                        name: &n.name,
                        what: "messages",
                        requests: code_node(simple("emailRequests"), &[], input("{{ input }}")),
                        call: (
                            "email.send",
                            json!({"credential": cred, "from": "{{ input.from }}",
                                "to": "{{ input.to }}", "cc": "{{ input.cc }}", "bcc": "{{ input.bcc }}",
                                "reply_to": "{{ input.reply_to }}", "subject": "{{ input.subject }}",
                                "text": "{{ input.text }}", "html": "{{ input.html }}"}),
                        ),
                        answers: "results",
                        shape: format!(
                            "// n8n: \"{}\" ({}): the results as n8n's items\nreturn n8n.emailResults(input, {});",
                            n.name,
                            n.n8n_type,
                            js_string(&n.name)
                        ),
                        at: &at,
                    })
                }
                "executeWorkflow" => {
                    let p = &n.params;
                    if p["source"].as_str().is_some_and(|s| s != "database") {
                        return Err("it runs a workflow given as JSON, a file or a URL: import that workflow and call it by id".into());
                    }
                    let target = p.pointer("/workflowId/cachedResultName").and_then(Value::as_str)
                        .map(|name| workflow_id(name, &|_| false))
                        .ok_or_else(|| format!(
                            "it calls the n8n workflow `{}`, whose name the export does not say: import that workflow and set its id here",
                            p.pointer("/workflowId/value").and_then(Value::as_str).or_else(|| p["workflowId"].as_str()).unwrap_or("?")
                        ))?;
                    report.notes.push(format!(
                        "\"{}\" calls the workflow `{target}`: import it too (its n8n export), under that id",
                        n.name
                    ));
                    if p["mode"] == "each" {
                        return Err("it runs the workflow once per item: use a flow.split before a flow.subworkflow".into());
                    }
                    let wait = p
                        .pointer("/options/waitForSubWorkflow")
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    let given = b.fresh(&format!("{id}_items"));
                    push(
                        &mut b,
                        json!({"id": given, "kind": "code.js", "label": format!("{} (items)", n.name),
                        "position": at(-320.0), "config": code_node(
                            format!("// n8n: \"{}\": the items it gives the workflow\nreturn n8n.noOp(input);", n.name),
                            &[], Value::Null)}),
                    );
                    let call_id = b.fresh(&format!("{id}_run"));
                    push(
                        &mut b,
                        json!({"id": call_id, "kind": "flow.subworkflow", "label": format!("{} (run)", n.name),
                        "position": at(-160.0),
                        "config": {"workflow": target, "input": "{{ input | map(attribute='json') | list }}", "wait": wait}}),
                    );
                    let src = if wait {
                        format!(
                            "// n8n: \"{}\" ({}): the workflow's last items\nreturn n8n.subworkflowItems(input, {});",
                            n.name,
                            n.n8n_type,
                            js_string(&n.name)
                        )
                    } else {
                        format!(
                            "// n8n: \"{}\" ({}): passes its items on\nreturn n8n.noOp(input.items);",
                            n.name, n.n8n_type
                        )
                    };
                    let prev = format!("{{{{ nodes.{given} }}}}");
                    push(
                        &mut b,
                        json!({"id": id, "kind": "code.js", "label": n.name, "position": at(0.0),
                        "config": code_node(src, &[], json!({"output": "{{ input }}", "items": prev}))}),
                    );
                    b.edge(&given, "out", &call_id);
                    b.edge(&call_id, "out", &id);
                    Made::out(&given, &id)
                }
                _ => return Err(format!("Sluice has no counterpart for {}", n.n8n_type)),
            })
        })();

        let m = match result {
            Ok(m) if note.is_none() => {
                report.nodes.push(NodeReport {
                    name: n.name.clone(),
                    n8n_type: n.n8n_type.clone(),
                    id: id.clone(),
                    converted: true,
                    note: None,
                });
                m
            }
            other => {
                let why = match other {
                    Err(e) => e,
                    Ok(_) => note.clone().unwrap_or_default(),
                };
                // Whatever was made for it goes; a disabled pass-through stays.
                b.nodes.truncate(nodes_before);
                b.edges.truncate(edges_before);
                let outputs = conns
                    .keys()
                    .filter(|(s, _)| *s == n.name)
                    .map(|(_, i)| *i)
                    .max()
                    .map_or(1, |m| m + 1);
                let ports: Vec<String> = (0..outputs).map(|_| "out".to_string()).collect();
                let is_trigger = n.n8n_type.to_lowercase().contains("trigger") || t == "webhook";
                let kind = if is_trigger {
                    "trigger.manual"
                } else {
                    "code.js"
                };
                let mut node = json!({"id": id, "kind": kind, "label": n.name, "position": at(0.0), "disabled": true,
                    "notes": format!("Not converted from n8n ({}): {why}", n.n8n_type)});
                if !is_trigger {
                    node["config"] = json!({"source": format!(
                        "// n8n: \"{}\" ({}) was not converted: {why}\n// n8n parameters:\n// {}\nreturn input;",
                        n.name, n.n8n_type, n.params.to_string().replace('\n', " ")
                    )});
                }
                b.nodes.push(node);
                report.nodes.push(NodeReport {
                    name: n.name.clone(),
                    n8n_type: n.n8n_type.clone(),
                    id: id.clone(),
                    converted: false,
                    note: Some(why),
                });
                Made {
                    entry: id.clone(),
                    items: id.clone(),
                    ports,
                    trigger: is_trigger,
                    responds: false,
                    merges: false,
                }
            }
        };
        let _ = n.disabled;
        made.insert(n.name.clone(), m);
    }

    // n8n's own disabled nodes stay disabled.
    for n in &list {
        if n.disabled
            && let Some(node) = b
                .nodes
                .iter_mut()
                .find(|x| x["id"] == json!(main_id[&n.name]))
        {
            node["disabled"] = json!(true);
        }
    }

    // Connections become edges; a Merge learns which node feeds which input.
    let mut merge_inputs: HashMap<String, BTreeMap<usize, String>> = HashMap::new();
    let mut has_out: HashSet<String> = HashSet::new();
    for ((src, out_idx), targets) in &conns {
        let (Some(s), true) = (made.get(src), true) else {
            continue;
        };
        let port = s
            .ports
            .get(*out_idx)
            .cloned()
            .unwrap_or_else(|| "out".into());
        for (dst, in_idx) in targets {
            let Some(d) = made.get(dst) else { continue };
            has_out.insert(src.clone());
            b.edge(&s.items, &port, &d.entry);
            if d.merges {
                merge_inputs
                    .entry(d.items.clone())
                    .or_default()
                    .insert(*in_idx, s.items.clone());
            }
        }
    }
    for (merge, inputs) in merge_inputs {
        let n = inputs.keys().max().map_or(0, |m| m + 1);
        let list: Vec<Value> = (0..n)
            .map(|k| match inputs.get(&k) {
                Some(src) => json!(format!("{{{{ input.{src} }}}}")),
                None => Value::Null,
            })
            .collect();
        if let Some(node) = b.nodes.iter_mut().find(|x| x["id"] == json!(merge)) {
            node["config"]["input"] = json!({"inputs": list});
        }
    }

    // Each leaf's items are the workflow's output; a webhook that answers
    // with the last node gets its answer there.
    let last_node_mode = list
        .iter()
        .find(|n| short(&n.n8n_type) == "webhook")
        .and_then(|n| {
            (n.params["responseMode"] == "lastNode").then(|| {
                (
                    n.params["responseData"]
                        .as_str()
                        .unwrap_or("firstEntryJson")
                        .to_string(),
                    n.params
                        .pointer("/options/responseCode")
                        .and_then(Value::as_u64)
                        .unwrap_or(200),
                )
            })
        });
    for n in &list {
        let m = &made[&n.name];
        if has_out.contains(&n.name) || m.trigger && !has_out.contains(&n.name) && list.len() > 1 {
            continue;
        }
        let end = b.fresh(&format!("{}_result", main_id[&n.name]));
        let pos = n
            .position
            .map(|p| json!([p[0] + 240.0, p[1] + 120.0]))
            .unwrap_or(Value::Null);
        b.nodes.push(
            json!({"id": end, "kind": "output.end", "label": format!("{} (result)", n.name),
            "position": pos, "config": {"value": "{{ input | map(attribute='json') | list }}"}}),
        );
        for port in m.ports.iter().collect::<HashSet<_>>() {
            b.edge(&m.items, port, &end);
        }
        if let Some((data, status)) = &last_node_mode
            && !m.responds
        {
            let reply = b.fresh(&format!("{}_answer", main_id[&n.name]));
            let body = match data.as_str() {
                "allEntries" => json!("{{ input | map(attribute='json') | list }}"),
                "noData" => json!(""),
                _ => json!("{{ input[0].json if input else {} }}"),
            };
            b.nodes.push(json!({"id": reply, "kind": "output.respond", "label": format!("{} (answer)", n.name),
                "position": n.position.map(|p| json!([p[0] + 240.0, p[1] - 120.0])).unwrap_or(Value::Null),
                "config": {"status": status, "body": body}}));
            b.edge(&m.items, &m.ports[0], &reply);
        }
    }

    report.credentials = creds.into_values().collect();
    let mut wf = json!({
        "format": "sluice.workflow/v1",
        "id": id,
        "name": name,
        "nodes": b.nodes,
        "edges": b.edges,
    });
    // Where it came from, and its sticky notes.
    let mut origin = json!({"source": "n8n"});
    if let Some(n8n_id) = v.get("id") {
        origin["id"] = n8n_id.clone();
    }
    wf["imported"] = origin;
    if !notes.is_empty() {
        wf["notes"] = json!(notes);
    }
    Ok(Import {
        workflow: wf,
        report,
    })
}

/// Sluice cron expressions (seconds first) for a Schedule Trigger's rules.
fn schedule_crons(params: &Value) -> Result<Vec<String>, String> {
    // The old Cron node: `triggerTimes.item`.
    if let Some(items) = params
        .pointer("/triggerTimes/item")
        .and_then(Value::as_array)
    {
        return items
            .iter()
            .map(|i| {
                let h = i["hour"].as_u64().unwrap_or(0);
                let m = i["minute"].as_u64().unwrap_or(0);
                match i["mode"].as_str().unwrap_or("everyDay") {
                    "everyDay" => Ok(format!("0 {m} {h} * * *")),
                    "everyHour" => Ok(format!("0 {m} * * * *")),
                    "everyMinute" => Ok("0 * * * * *".to_string()),
                    "everyWeek" => Ok(format!(
                        "0 {m} {h} * * {}",
                        i["weekday"].as_str().unwrap_or("1")
                    )),
                    "everyMonth" => Ok(format!(
                        "0 {m} {h} {} * *",
                        i["dayOfMonth"].as_u64().unwrap_or(1)
                    )),
                    "custom" => cron6(i["cronExpression"].as_str().unwrap_or_default()),
                    other => Err(format!("its Cron mode `{other}` is not converted")),
                }
            })
            .collect();
    }
    let rules = params
        .pointer("/rule/interval")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| vec![json!({})]);
    rules
        .iter()
        .map(|r| {
            let num = |k: &str, d: u64| r[k].as_u64().unwrap_or(d);
            let h = num("triggerAtHour", 0);
            let m = num("triggerAtMinute", 0);
            Ok(match r["field"].as_str().unwrap_or("days") {
                "seconds" => format!("*/{} * * * * *", num("secondsInterval", 30)),
                "minutes" => format!("0 */{} * * * *", num("minutesInterval", 5)),
                "hours" => format!("0 {m} */{} * * *", num("hoursInterval", 1)),
                "days" => format!("0 {m} {h} */{} * *", num("daysInterval", 1)),
                "weeks" => {
                    let days: Vec<String> = r["triggerAtDay"]
                        .as_array()
                        .map(|d| {
                            d.iter()
                                .filter_map(Value::as_u64)
                                .map(|x| x.to_string())
                                .collect()
                        })
                        .filter(|d: &Vec<String>| !d.is_empty())
                        .unwrap_or_else(|| vec!["0".into()]);
                    if num("weeksInterval", 1) != 1 {
                        return Err(
                            "it runs every few weeks: Sluice's cron can only say every week".into(),
                        );
                    }
                    format!("0 {m} {h} * * {}", days.join(","))
                }
                "months" => format!(
                    "0 {m} {h} {} */{} *",
                    num("triggerAtDayOfMonth", 1),
                    num("monthsInterval", 1)
                ),
                "cronExpression" => return cron6(r["expression"].as_str().unwrap_or_default()),
                other => return Err(format!("its schedule `{other}` is not converted")),
            })
        })
        .collect()
}

/// A 5- or 6-field cron as Sluice's 6 (seconds first).
fn cron6(expr: &str) -> Result<String, String> {
    let fields = expr.split_whitespace().count();
    match fields {
        5 => Ok(format!("0 {}", expr.trim())),
        6 => Ok(expr.trim().to_string()),
        _ => Err(format!(
            "its cron expression `{expr}` does not have 5 or 6 fields"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_slugs_with_a_suffix_when_taken() {
        assert_eq!(
            workflow_id("Orders → Slack (v2)", &|_| false),
            "orders-slack-v2"
        );
        assert_eq!(
            workflow_id("Orders", &|id| id == "orders" || id == "orders-2"),
            "orders-3"
        );
        assert_eq!(workflow_id("!!!", &|_| false), "n8n");
        assert_eq!(workflow_id("resume", &|_| false), "resume-workflow");
    }

    #[test]
    fn references_are_found() {
        assert_eq!(
            referenced_nodes(
                "={{ $('Get user').item.json.id + $node[\"Set\"].json.x + $node.Webhook.json }} $items('A B')"
            ),
            vec![
                "Get user".to_string(),
                "A B".into(),
                "Set".into(),
                "Webhook".into()
            ]
        );
    }

    #[test]
    fn schedules_become_cron() {
        let p = json!({"rule": {"interval": [
            {"field": "hours", "hoursInterval": 2, "triggerAtMinute": 15},
            {"field": "weeks", "triggerAtDay": [1, 5], "triggerAtHour": 9},
            {"field": "cronExpression", "expression": "0 9 * * 1-5"},
            {}]}});
        assert_eq!(
            schedule_crons(&p).unwrap(),
            vec![
                "0 15 */2 * * *",
                "0 0 9 * * 1,5",
                "0 0 9 * * 1-5",
                "0 0 0 */1 * *"
            ]
        );
    }
}
