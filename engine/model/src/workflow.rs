//! The `sluice.workflow/v1` document: types, parsing with precise error
//! positions, and serialization that keeps fields this version does not know.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The format tag every workflow file carries.
pub const FORMAT: &str = "sluice.workflow/v1";

/// A workflow: nodes and the edges between their ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub format: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub nodes: Vec<Node>,
    #[serde(default)]
    pub edges: Vec<Edge>,
    /// Fields this version does not know, kept for the round trip.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One node of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    pub kind: String,
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    pub config: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn is_empty_object(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty())
}

/// How often and how patiently a failing node is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Total attempts, the first one included (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Delay before the second attempt (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
    /// Each later delay is the previous one times this factor (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
}

impl RetryPolicy {
    /// Longest delay between two attempts, whatever the factor says.
    pub const MAX_DELAY_MS: u64 = 24 * 3600 * 1000;

    pub fn max_attempts(&self) -> u32 {
        self.max_attempts.unwrap_or(3)
    }
    pub fn backoff_ms(&self) -> u64 {
        self.backoff_ms.unwrap_or(200)
    }
    pub fn factor(&self) -> f64 {
        self.factor.unwrap_or(2.0)
    }

    /// Delay before attempt `next` (2 = the first retry).
    pub fn delay_ms(&self, next: u32) -> u64 {
        let exp = next.saturating_sub(2).min(64) as i32;
        let d = self.backoff_ms() as f64 * self.factor().max(0.0).powi(exp);
        if d.is_finite() {
            (d as u64).min(Self::MAX_DELAY_MS)
        } else {
            Self::MAX_DELAY_MS
        }
    }
}

/// What happens when a node still fails after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Fail the run (the default).
    #[default]
    Fail,
    /// Emit `{"error", "input"}` on the `out` port.
    Continue,
    /// Emit `{"error", "input"}` on the `error` port.
    Route,
}

/// A connection from one node's output port to another node's input port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One side of an edge: a node and one of its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    pub node: &'a str,
    pub port: &'a str,
}

impl Endpoint<'_> {
    fn parse<'a>(s: &'a str, default_port: &'a str) -> Endpoint<'a> {
        match s.split_once(':') {
            Some((node, port)) => Endpoint { node, port },
            None => Endpoint {
                node: s,
                port: default_port,
            },
        }
    }
}

impl Edge {
    pub fn new(from: impl Into<String>, to: impl Into<String>) -> Self {
        Edge {
            from: from.into(),
            to: to.into(),
            extra: Map::new(),
        }
    }
    /// The output side (`node` or `node:port`, default port `out`).
    pub fn source(&self) -> Endpoint<'_> {
        Endpoint::parse(&self.from, "out")
    }
    /// The input side (`node` or `node:port`, default port `in`).
    pub fn target(&self) -> Endpoint<'_> {
        Endpoint::parse(&self.to, "in")
    }
}

/// Why a workflow document could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}line {line}, column {column}: {message}", path.as_deref().map(|p| format!("at {p}, ")).unwrap_or_default())]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    /// Where in the document, e.g. `nodes[2] (id "check").retry.max_attempts`.
    pub path: Option<String>,
    pub message: String,
}

/// A workflow's `settings` object, typed. It stays in [`Workflow::extra`]
/// (unknown settings round-trip); [`crate::validate`] reports bad values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How many runs of this workflow execute at once.
    pub concurrency: Option<u64>,
    /// When the draft becomes what runs.
    pub publish: sluice_api::PublishMode,
    /// `on_valid_idle`: seconds without an edit before a valid draft is published.
    pub publish_idle_secs: u64,
    /// A field a template reads that is not there is an error naming the
    /// template and the path, not null (`settings.strict`; new workflows
    /// made in the editor have it on).
    pub strict: bool,
    /// Where the workflow's runs execute (`settings.run_on`): on this
    /// machine, or handed off to the shared worker.
    pub run_on: sluice_api::RunOn,
    /// How long this workflow's finished runs are kept, over the engine's
    /// `config.toml [runs]` (`settings.runs`).
    pub runs: sluice_api::RetentionOverride,
}

/// `settings.publish_idle_secs` when it is not set.
pub const DEFAULT_PUBLISH_IDLE_SECS: u64 = 10;

/// The largest `settings.publish_idle_secs` (a day).
pub const MAX_PUBLISH_IDLE_SECS: u64 = 86_400;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: None,
            publish: sluice_api::PublishMode::Manual,
            publish_idle_secs: DEFAULT_PUBLISH_IDLE_SECS,
            strict: false,
            run_on: sluice_api::RunOn::Local,
            runs: sluice_api::RetentionOverride::default(),
        }
    }
}

impl Workflow {
    /// The workflow's settings; a value that is not valid reads as its default.
    pub fn settings(&self) -> Settings {
        let Some(s) = self.extra.get("settings").and_then(Value::as_object) else {
            return Settings::default();
        };
        let d = Settings::default();
        Settings {
            concurrency: s.get("concurrency").and_then(Value::as_u64),
            publish: s
                .get("publish")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or(d.publish),
            publish_idle_secs: s
                .get("publish_idle_secs")
                .and_then(Value::as_u64)
                .filter(|n| (1..=MAX_PUBLISH_IDLE_SECS).contains(n))
                .unwrap_or(d.publish_idle_secs),
            strict: s.get("strict").and_then(Value::as_bool).unwrap_or(d.strict),
            run_on: s
                .get("run_on")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or(d.run_on),
            runs: s
                .get("runs")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or(d.runs),
        }
    }

    /// Reads a workflow from JSON text. Syntax errors carry line and column;
    /// type errors also carry the path of the bad field.
    pub fn from_json(text: &str) -> Result<Workflow, ParseError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let result: Result<Workflow, _> = serde_path_to_error::deserialize(&mut de);
        let wf = match result {
            Ok(wf) => wf,
            Err(e) => {
                let path = e.path().to_string();
                let inner = e.into_inner();
                let path = (path != "." && !path.is_empty()).then(|| describe_path(text, &path));
                return Err(ParseError {
                    line: inner.line(),
                    column: inner.column(),
                    path,
                    message: strip_position(&inner.to_string()),
                });
            }
        };
        if let Err(inner) = de.end() {
            return Err(ParseError {
                line: inner.line(),
                column: inner.column(),
                path: None,
                message: strip_position(&inner.to_string()),
            });
        }
        Ok(wf)
    }

    /// Reads a workflow from an already-parsed JSON value.
    pub fn from_value(value: Value) -> Result<Workflow, ParseError> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            ParseError {
                line: 0,
                column: 0,
                path: (path != ".").then_some(path),
                message: e.into_inner().to_string(),
            }
        })
    }

    /// The canonical text form: two-space indentation, fields in a stable order.
    pub fn to_json_pretty(&self) -> String {
        // Serializing plain data to a String cannot fail.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

/// serde_json appends " at line L column C" to its messages; we report those separately.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Turns `nodes[2].retry` into `nodes[2] (id "check").retry` when the node id can be read.
fn describe_path(text: &str, path: &str) -> String {
    let Some(rest) = path.strip_prefix("nodes[") else {
        return path.to_string();
    };
    let Some((idx, tail)) = rest.split_once(']') else {
        return path.to_string();
    };
    let Ok(idx) = idx.parse::<usize>() else {
        return path.to_string();
    };
    let id = serde_json::from_str::<Value>(text).ok().and_then(|v| {
        v.get("nodes")?
            .get(idx)?
            .get("id")?
            .as_str()
            .map(str::to_string)
    });
    match id {
        Some(id) => format!("nodes[{idx}] (id \"{id}\"){tail}"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{
  "format": "sluice.workflow/v1",
  "id": "order-intake",
  "name": "Order intake",
  "x-editor": {"zoom": 1.5},
  "nodes": [
    {"id": "hook", "kind": "trigger.manual", "position": [0, 0], "x-note": "keep me"},
    {"id": "reply", "kind": "output.end", "config": {"value": "{{ input }}"}, "retry": {"max_attempts": 2}}
  ],
  "edges": [{"from": "hook", "to": "reply", "x-color": "red"}]
}"#;

    #[test]
    fn round_trip_keeps_unknown_fields() {
        let wf = Workflow::from_json(EXAMPLE).unwrap();
        assert_eq!(wf.extra["x-editor"], serde_json::json!({"zoom": 1.5}));
        assert_eq!(wf.nodes[0].extra["x-note"], "keep me");
        assert_eq!(wf.edges[0].extra["x-color"], "red");
        let text = wf.to_json_pretty();
        let again = Workflow::from_json(&text).unwrap();
        assert_eq!(wf, again);
        assert_eq!(text, again.to_json_pretty(), "serialization is stable");
        // Nothing is added: defaults are not written out.
        assert!(
            text.contains(
                r#""retry": {
        "max_attempts": 2
      }"#
            ),
            "{text}"
        );
    }

    #[test]
    fn syntax_error_has_line_and_column() {
        let err = Workflow::from_json("{\n  \"format\": \"x\",\n  \"id\": oops\n}").unwrap_err();
        assert_eq!((err.line, err.column), (3, 9));
        assert_eq!(err.to_string(), "at id, line 3, column 9: expected value");
    }

    #[test]
    fn type_error_names_node_and_field() {
        let text = r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
            {"id": "a", "kind": "trigger.manual"},
            {"id": "b", "kind": "output.end", "retry": {"max_attempts": "three"}}]}"#;
        let err = Workflow::from_json(text).unwrap_err();
        assert_eq!(
            err.path.as_deref(),
            Some("nodes[1] (id \"b\").retry.max_attempts")
        );
        assert_eq!(err.line, 3);
        assert!(
            err.message.contains("invalid type: string \"three\""),
            "{err}"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let text = format!(r#"{{"format": "x", "id": "w", "nodes": [], "deep": {deep}}}"#);
        let err = Workflow::from_json(&text).unwrap_err();
        assert!(err.message.contains("recursion limit exceeded"), "{err}");
    }

    #[test]
    fn trailing_garbage_is_rejected() {
        let err = Workflow::from_json(r#"{"format": "x", "id": "w", "nodes": []} x"#).unwrap_err();
        assert_eq!(err.message, "trailing characters");
    }

    #[test]
    fn endpoints_default_ports() {
        let e = Edge::new("check:true", "both");
        assert_eq!(
            e.source(),
            Endpoint {
                node: "check",
                port: "true"
            }
        );
        assert_eq!(
            e.target(),
            Endpoint {
                node: "both",
                port: "in"
            }
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            max_attempts: Some(5),
            backoff_ms: Some(100),
            factor: None,
        };
        assert_eq!(
            [p.delay_ms(2), p.delay_ms(3), p.delay_ms(4)],
            [100, 200, 400]
        );
        let huge = RetryPolicy {
            max_attempts: Some(100),
            backoff_ms: Some(u64::MAX),
            factor: Some(1e300),
        };
        assert_eq!(huge.delay_ms(99), RetryPolicy::MAX_DELAY_MS);
    }
}
