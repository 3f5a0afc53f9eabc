//! The catalog of node kinds: for each kind its config schema (one source of
//! truth, derived from the config types with schemars), its ports, and the
//! check that a node's config fits.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The built-in kinds. Code that treats kinds differently matches on this
/// (or asks the [`KindSpec`]), never on a kind's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    ManualTrigger,
    WorkflowTrigger,
    WebhookTrigger,
    ScheduleTrigger,
    FileTrigger,
    ErrorTrigger,
    If,
    Switch,
    Merge,
    Split,
    Join,
    Wait,
    Approval,
    Subworkflow,
    Set,
    Transform,
    HttpRequest,
    EmailSend,
    AiChat,
    DbQuery,
    FileRead,
    FileWrite,
    Js,
    Wasm,
    Log,
    End,
    Respond,
}

impl Kind {
    /// This kind's entry in the catalog.
    pub fn spec(self) -> &'static KindSpec {
        // The catalog lists the kinds in declaration order (a test checks).
        &CATALOG[self as usize]
    }

    /// The kind's name in workflow files (`http.request`).
    pub fn name(self) -> &'static str {
        self.spec().kind
    }

    /// Computes its output from its input and config alone: no I/O, no side
    /// effects, no waiting; running it again gives the same result.
    pub fn is_pure(self) -> bool {
        use Kind::*;
        self.spec().is_trigger
            || matches!(
                self,
                Join | Merge | If | Switch | Split | Set | Log | End | Respond
            )
    }

    /// Only waits (a timer, another run): holds no step permit while it does.
    pub fn only_waits(self) -> bool {
        matches!(self, Kind::Wait | Kind::Approval | Kind::Subworkflow)
    }

    /// The credential kinds a node of this kind accepts (empty: it takes none).
    pub fn credential_kinds(self) -> &'static [&'static str] {
        match self {
            Kind::HttpRequest => &["bearer", "basic", "header", "query"],
            Kind::EmailSend => &["smtp"],
            Kind::AiChat => &["openai"],
            Kind::DbQuery => &["postgres", "mysql"],
            _ => &[],
        }
    }
}

/// Everything the engine and the editor need to know about one kind.
#[derive(Debug, Clone, Copy)]
pub struct KindSpec {
    pub id: Kind,
    pub kind: &'static str,
    pub category: &'static str,
    pub summary: &'static str,
    /// An entry point: has no input and may not receive edges.
    pub is_trigger: bool,
    /// Output ports that always exist (`flow.switch` adds one per case).
    pub outputs: &'static [&'static str],
    /// Config keys whose strings are not templates (programs, code).
    pub raw_fields: &'static [&'static str],
    schema: fn() -> Value,
    check: fn(&Value) -> Result<(), ConfigError>,
}

/// A config that does not fit its kind's schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct ConfigError {
    /// Path inside the config, e.g. `cases[1].port`; empty for the whole config.
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl KindSpec {
    /// The JSON Schema of this kind's `config`.
    pub fn config_schema(&self) -> Value {
        (self.schema)()
    }

    /// Checks a config against the schema and the kind's own rules.
    pub fn check_config(&self, config: &Value) -> Result<(), ConfigError> {
        (self.check)(config)
    }

    /// Whether the node has an input port.
    pub fn has_input(&self) -> bool {
        !self.is_trigger
    }

    /// The output ports of a node of this kind with this config.
    pub fn output_ports(&self, config: &Value) -> Vec<String> {
        let mut ports: Vec<String> = Vec::new();
        if self.id == Kind::Js
            && let Some(own) = config.get("ports").and_then(Value::as_array)
            && !own.is_empty()
        {
            ports.extend(own.iter().filter_map(Value::as_str).map(str::to_string));
            ports.push("error".to_string());
            return ports;
        }
        if self.id == Kind::Switch
            && let Some(cases) = config.get("cases").and_then(Value::as_array)
        {
            ports.extend(
                cases
                    .iter()
                    .filter_map(|c| c.get("port")?.as_str().map(str::to_string)),
            );
        }
        ports.extend(self.outputs.iter().map(|p| p.to_string()));
        ports
    }

    /// Whether this is an exit (`output.*`): its messages form the run output.
    pub fn is_exit(&self) -> bool {
        self.kind.starts_with("output.")
    }

    /// The schema document the API and the editor publish for this kind.
    pub fn describe(&self) -> Value {
        serde_json::json!({
            "kind": self.kind,
            "category": self.category,
            "title": self.title(),
            "summary": self.summary,
            "synonyms": self.synonyms(),
            "trigger": self.is_trigger,
            "inputs": if self.is_trigger { vec![] } else { vec!["in"] },
            "outputs": self.outputs,
            "config_schema": self.config_schema(),
        })
    }
}

mod names;
pub use names::{Search, search};

/// Looks a kind up by name.
pub fn spec(kind: &str) -> Option<&'static KindSpec> {
    CATALOG.iter().find(|k| k.kind == kind)
}

/// All kinds, in documentation order.
pub fn catalog() -> &'static [KindSpec] {
    CATALOG
}

fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

fn check_as<T: Config>(config: &Value) -> Result<(), ConfigError> {
    let typed: T = serde_path_to_error::deserialize(config).map_err(config_error)?;
    typed.validate()
}

fn config_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> ConfigError {
    let path = e.path().to_string();
    ConfigError::new(
        if path == "." { String::new() } else { path },
        e.into_inner().to_string(),
    )
}

/// A kind's config type: what a node's `config` is checked as when a
/// workflow is validated, and, with its templates evaluated, what the node
/// receives when it runs ([`parse`]).
pub trait Config: DeserializeOwned {
    /// Rules a schema cannot say (or that we want to say more clearly).
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    /// The config built from an object whose shape it is sure of, its
    /// values moved in: serde, reading a `Value`, builds every map inside
    /// it again (a `data.set`'s values, a respond's body: a run's message),
    /// hashing each key once more. `Err` gives the object back untouched
    /// for serde, which reads it or names what is wrong. What this takes,
    /// serde would read to the same config (`kinds` tests check).
    fn from_object(object: Map<String, Value>) -> Result<Self, Map<String, Value>> {
        Err(object)
    }
}

/// Reads a config as its kind's type and checks its rules. Runs use it on
/// the config with its templates evaluated, so a template that gives a value
/// of the wrong type is named like a wrong literal (`config.url: invalid type…`).
pub fn parse<T: Config>(config: Value) -> Result<T, ConfigError> {
    // Most configs are well formed: read them straight, and only read a
    // bad one again tracking the path, to name the field that is wrong
    // (the tracking costs more than the read on every step of a run).
    let typed: T = match T::deserialize(&config) {
        Ok(typed) => typed,
        Err(_) => serde_path_to_error::deserialize(config).map_err(config_error)?,
    };
    typed.validate()?;
    Ok(typed)
}

/// Like [`parse`], taking the config's values instead of copying them (a
/// `data.set`'s values, a respond's body: a run's messages), for a config
/// that can be had again: `again` gives it once more to name the field
/// that is wrong when it is not well formed.
pub fn parse_owned<T: Config, E>(
    config: Value,
    again: impl FnOnce() -> Result<Value, E>,
) -> Result<Result<T, ConfigError>, E> {
    let config = match config {
        Value::Object(object) => match T::from_object(object) {
            Ok(typed) => return Ok(typed.validate().map(|()| typed)),
            Err(object) => Value::Object(object),
        },
        other => other,
    };
    let typed: T = match T::deserialize(config) {
        Ok(typed) => typed,
        Err(_) => match serde_path_to_error::deserialize(again()?) {
            Ok(typed) => typed,
            Err(e) => return Ok(Err(config_error(e))),
        },
    };
    Ok(typed.validate().map(|()| typed))
}

/// A trigger's config, read once when a workflow is planned: the edges that
/// start runs (the trigger port, schedules, file watches, error triggers)
/// read these, never the JSON.
#[derive(Debug)]
pub enum Trigger {
    Manual(ManualTrigger),
    Workflow(WorkflowTrigger),
    Webhook(WebhookTrigger),
    Schedule(ScheduleTrigger),
    File(FileTrigger),
    Error(ErrorTrigger),
}

impl Trigger {
    /// The typed config of a trigger node (None: `kind` is not a trigger).
    pub fn parse(kind: Kind, config: &Value) -> Option<Result<Trigger, ConfigError>> {
        let config = config.clone();
        Some(match kind {
            Kind::ManualTrigger => parse(config).map(Trigger::Manual),
            Kind::WorkflowTrigger => parse(config).map(Trigger::Workflow),
            Kind::WebhookTrigger => parse(config).map(Trigger::Webhook),
            Kind::ScheduleTrigger => parse(config).map(Trigger::Schedule),
            Kind::FileTrigger => parse(config).map(Trigger::File),
            Kind::ErrorTrigger => parse(config).map(Trigger::Error),
            _ => return None,
        })
    }
}

/// For `Option<Value>` fields whose absence means a default (`{{ input }}`):
/// a field that is present stays present even when it is (or a template
/// evaluates to) `null`, which serde would otherwise read as absent.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

macro_rules! kind {
    ($id:ident, $kind:literal, $cat:literal, $ty:ty, trigger, $summary:literal) => {
        KindSpec {
            id: Kind::$id,
            kind: $kind,
            category: $cat,
            summary: $summary,
            is_trigger: true,
            outputs: &["out"],
            raw_fields: &[],
            schema: schema_of::<$ty>,
            check: check_as::<$ty>,
        }
    };
    ($id:ident, $kind:literal, $cat:literal, $ty:ty, [$($port:literal),*], raw [$($raw:literal),*], $summary:literal) => {
        KindSpec {
            id: Kind::$id,
            kind: $kind,
            category: $cat,
            summary: $summary,
            is_trigger: false,
            outputs: &[$($port),*],
            raw_fields: &[$($raw),*],
            schema: schema_of::<$ty>,
            check: check_as::<$ty>,
        }
    };
}

static CATALOG: &[KindSpec] = &[
    kind!(
        ManualTrigger,
        "trigger.manual",
        "trigger",
        ManualTrigger,
        trigger,
        "Starts a run by hand (`sluice run`, the editor's Run button, the API)."
    ),
    kind!(
        WorkflowTrigger,
        "trigger.workflow",
        "trigger",
        WorkflowTrigger,
        trigger,
        "Starts a run when another workflow calls this one with `flow.subworkflow`."
    ),
    kind!(
        WebhookTrigger,
        "trigger.webhook",
        "trigger",
        WebhookTrigger,
        trigger,
        "Starts a run for each matching request to `/hook/{workflow}/{path}` on the trigger port."
    ),
    kind!(
        ScheduleTrigger,
        "trigger.schedule",
        "trigger",
        ScheduleTrigger,
        trigger,
        "Starts a run on a cron schedule (with seconds)."
    ),
    kind!(
        FileTrigger,
        "trigger.file",
        "trigger",
        FileTrigger,
        trigger,
        "Starts a run when files in a folder are created, modified or removed."
    ),
    kind!(
        ErrorTrigger,
        "trigger.error",
        "trigger",
        ErrorTrigger,
        trigger,
        "Starts a run when a run of another workflow fails."
    ),
    kind!(If, "flow.if", "flow", IfConfig, ["true", "false"], raw [],
        "Passes the message on `true` or `false` by a condition; the other port is skipped."),
    kind!(Switch, "flow.switch", "flow", SwitchConfig, ["default"], raw [],
        "Passes the message on the first case whose condition holds, else on `default`."),
    kind!(Merge, "flow.merge", "flow", MergeConfig, ["out"], raw [],
        "Waits for every incoming edge (delivered or skipped) and combines the messages."),
    kind!(Split, "flow.split", "flow", SplitConfig, ["out"], raw [],
        "Emits one message per element of an array; downstream nodes run once per element."),
    kind!(Join, "flow.join", "flow", JoinConfig, ["out"], raw [],
        "Collects the messages of one split back into an array ordered by index."),
    kind!(Wait, "flow.wait", "flow", WaitConfig, ["out"], raw [],
        "Waits for a duration or until a time, then passes the message on. Survives restarts."),
    kind!(Approval, "flow.approval", "flow", ApprovalConfig, ["approved", "rejected", "timeout"], raw [],
        "Waits for a person or another program to decide (a one-time link, the API, the CLI, the editor); the run is parked meanwhile, holding nothing."),
    kind!(Subworkflow, "flow.subworkflow", "flow", SubworkflowConfig, ["out"], raw [],
        "Runs another workflow with this message (or `input`) and emits its output. Calls nest at most 16 deep."),
    kind!(Set, "data.set", "data", SetConfig, ["out"], raw [],
        "Builds an object from templates (merged over the input with `keep_input`)."),
    kind!(
        Transform,
        "data.transform",
        "data",
        TransformConfig,
        ["out"],
        raw["jq"],
        "Transforms the message with a jq program, run in the sandbox within `[sandbox] timeout_ms` and 512 MiB."
    ),
    kind!(
        HttpRequest,
        "http.request",
        "integration",
        HttpRequestConfig,
        ["out", "error"],
        raw["credential"],
        "Sends an HTTP request; emits the status, headers and body (parsed by content type)."
    ),
    kind!(
        EmailSend,
        "email.send",
        "integration",
        EmailConfig,
        ["out", "error"],
        raw["credential"],
        "Sends an email over SMTP with an `smtp` credential."
    ),
    kind!(
        AiChat,
        "ai.chat",
        "integration",
        AiChatConfig,
        ["out", "error"],
        raw["credential"],
        "Asks a language model (any OpenAI-compatible server, an `openai` credential); its tokens stream into the run log; a JSON Schema makes the reply an object."
    ),
    kind!(
        DbQuery,
        "db.query",
        "integration",
        DbQueryConfig,
        ["out", "error"],
        raw["credential", "sql", "statements"],
        "Runs SQL against a SQLite file or a PostgreSQL / MySQL / MariaDB server, with parameters bound as values (never spliced into the SQL); emits the rows, or how many rows changed."
    ),
    kind!(FileRead, "file.read", "integration", FileReadConfig, ["out", "error"], raw [],
        "Reads a file inside the allowed folders as text, JSON, CSV or bytes."),
    kind!(FileWrite, "file.write", "integration", FileWriteConfig, ["out", "error"], raw [],
        "Writes a file inside the allowed folders, atomically (temp file, then rename)."),
    kind!(
        Js,
        "code.js",
        "code",
        JsConfig,
        ["out", "error"],
        raw["source"],
        "Runs JavaScript in the sandbox: `input` in scope, `return` the output."
    ),
    kind!(
        Wasm,
        "code.wasm",
        "code",
        WasmConfig,
        ["out", "error"],
        raw["module"],
        "Runs a WebAssembly component (the `sluice:node` world) in the sandbox: JSON in, JSON out."
    ),
    kind!(Log, "util.log", "util", LogConfig, ["out"], raw [],
        "Writes a line to the run log and passes the message on."),
    kind!(End, "output.end", "output", EndConfig, [], raw [],
        "An exit: its value becomes the run output under this node's id."),
    kind!(Respond, "output.respond", "output", RespondConfig, [], raw [],
        "An exit that also decides the HTTP response of a webhook run."),
];

// ---- trigger configs ----------------------------------------------------

/// No config needed; `input_schema` documents (and checks) the expected input.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManualTrigger {
    /// A JSON Schema the run input is shown against in the editor.
    #[serde(default)]
    pub input_schema: Option<Value>,
}
impl Config for ManualTrigger {}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowTrigger {
    /// What the workflow does, for a model that may call it as a tool
    /// (`ai.chat` `tools`).
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON Schema of the input it takes: a model calling it as a tool
    /// is told it, and its arguments are checked against it.
    #[serde(default)]
    pub input_schema: Option<Value>,
}
impl Config for WorkflowTrigger {
    fn validate(&self) -> Result<(), ConfigError> {
        match &self.input_schema {
            Some(s) if !s.is_object() && !s.is_boolean() => Err(ConfigError::new(
                "input_schema",
                "must be a JSON Schema (an object)",
            )),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookTrigger {
    /// HTTP method to match.
    #[serde(default = "default_post")]
    pub method: HttpMethod,
    /// Path under `/hook/{workflow}/`.
    pub path: String,
    /// Answer at once (202 with the run id) or when the run has finished.
    #[serde(default)]
    pub respond: Respond,
    /// When set, requests must be signed with it: `X-Sluice-Signature:
    /// t=<unix seconds>,v1=<hex HMAC-SHA256>` over the timestamp, method,
    /// path, query, content type and body (see docs/api.md), within five
    /// minutes of its timestamp and at most once.
    #[serde(default)]
    pub secret: Option<String>,
    /// The signature scheme: `v1` (default), or `v0` (`sha256=<HMAC of the
    /// body alone>`: weaker, since a captured request can be replayed and
    /// its method, path and query changed; for senders that cannot do v1).
    #[serde(default)]
    pub signature: SignatureScheme,
    /// Headers kept as sent in the run's message. `authorization`,
    /// `cookie`, `proxy-authorization`, `x-api-key` and the signature are
    /// otherwise stored as `"***"` (present, value masked), so credentials
    /// of callers never reach the journal.
    #[serde(default)]
    pub keep_headers: Vec<String>,
}

/// How webhook requests are signed.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SignatureScheme {
    #[default]
    V1,
    V0,
}
impl Config for WebhookTrigger {
    fn validate(&self) -> Result<(), ConfigError> {
        let p = self.path.trim_matches('/');
        if p.is_empty() || p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return Err(ConfigError::new(
                "path",
                "must be a relative path like `orders` or `orders/new`",
            ));
        }
        Ok(())
    }
}

fn default_post() -> HttpMethod {
    HttpMethod::Post
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
    Options,
}

impl HttpMethod {
    /// The method as sent on the wire (`POST`).
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
            HttpMethod::Head => "HEAD",
            HttpMethod::Options => "OPTIONS",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Respond {
    Immediately,
    #[default]
    WhenFinished,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleTrigger {
    /// Cron expression with seconds: `sec min hour day-of-month month day-of-week`.
    pub cron: String,
    /// IANA time zone, e.g. `Europe/Paris`; default UTC.
    #[serde(default)]
    pub timezone: Option<String>,
}
impl Config for ScheduleTrigger {
    fn validate(&self) -> Result<(), ConfigError> {
        let fields = self.cron.split_whitespace().count();
        if !(6..=7).contains(&fields) {
            return Err(ConfigError::new(
                "cron",
                format!("expected 6 or 7 fields (seconds first), found {fields}"),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileTrigger {
    /// Folder to watch.
    pub path: String,
    /// Only files whose name matches, e.g. `*.csv`.
    #[serde(default)]
    pub glob: Option<String>,
    /// Which changes start a run.
    #[serde(default = "default_file_events")]
    pub events: Vec<FileEvent>,
    #[serde(default)]
    pub debounce_ms: Option<u64>,
}
impl Config for FileTrigger {}

fn default_file_events() -> Vec<FileEvent> {
    vec![FileEvent::Created, FileEvent::Modified]
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileEvent {
    Created,
    Modified,
    Removed,
}

impl FileEvent {
    /// The event's name, as written in the config and in the run's message.
    pub fn as_str(self) -> &'static str {
        match self {
            FileEvent::Created => "created",
            FileEvent::Modified => "modified",
            FileEvent::Removed => "removed",
        }
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorTrigger {
    /// Only failures of these workflows (default: every other workflow).
    #[serde(default)]
    pub workflows: Option<Vec<String>>,
}
impl Config for ErrorTrigger {}

// ---- flow ------------------------------------------------------------------

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IfConfig {
    /// A template; the message goes to `true` when it is truthy.
    pub condition: Value,
}
impl Config for IfConfig {}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchConfig {
    /// Checked in order; the first that holds takes the message.
    pub cases: Vec<SwitchCase>,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchCase {
    /// Output port name for this case.
    pub port: String,
    /// A template; truthy means this case matches.
    pub condition: Value,
}

impl Config for SwitchConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, case) in self.cases.iter().enumerate() {
            if !crate::validate::is_slug(&case.port) {
                return Err(ConfigError::new(
                    format!("cases[{i}].port"),
                    format!(
                        "`{}` is not a port name (letters, digits, `-`, `_`)",
                        case.port
                    ),
                ));
            }
            if case.port == "default" || case.port == "error" || !seen.insert(case.port.as_str()) {
                return Err(ConfigError::new(
                    format!("cases[{i}].port"),
                    format!("port `{}` is used twice or reserved", case.port),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MergeConfig {
    #[serde(default)]
    pub mode: MergeMode,
}
impl Config for MergeConfig {}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MergeMode {
    /// `{ "<source node id>": message, ... }`
    #[default]
    All,
    /// An array of the messages in edge order.
    Append,
    /// The first message that arrives; later ones are ignored.
    First,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SplitConfig {
    /// Template giving the array to split (default `{{ input }}`).
    #[serde(default, deserialize_with = "present")]
    pub items: Option<Value>,
    /// How many elements are processed at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
}
impl Config for SplitConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 {
            return Err(ConfigError::new("concurrency", "must be at least 1"));
        }
        Ok(())
    }
}

fn default_concurrency() -> u32 {
    8
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinConfig {}
impl Config for JoinConfig {}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitConfig {
    /// How long to wait (a number, or a template giving one).
    #[serde(default)]
    pub duration_ms: Option<Value>,
    /// Wait until this RFC 3339 time (or a template giving one).
    #[serde(default)]
    pub until: Option<Value>,
}
impl Config for WaitConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        match (&self.duration_ms, &self.until) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                "",
                "set `duration_ms` or `until`, not both",
            )),
            (None, None) => Err(ConfigError::new("", "set `duration_ms` or `until`")),
            (Some(Value::Number(n)), None) if n.as_u64().is_none() => Err(ConfigError::new(
                "duration_ms",
                "must be a whole number of milliseconds ≥ 0",
            )),
            _ => Ok(()),
        }
    }
}

/// A `flow.approval`: the run waits (parked: no task, no memory) until a
/// signal decides, or its timeout passes.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// What is asked, shown with the Approve and Reject buttons, on the
    /// page of the resume link and in the run (a template).
    #[serde(default)]
    pub message: Option<String>,
    /// The longest wait for a decision, in milliseconds from when the step
    /// started (a number, or a template giving one); absent: no limit.
    #[serde(default)]
    pub timeout_ms: Option<Value>,
    /// What a timeout does: `port` (the input goes out on `timeout`) or
    /// `fail` (the step fails; the node's `on_error` decides what follows).
    #[serde(default)]
    pub on_timeout: OnTimeout,
}
impl Config for ApprovalConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        match &self.timeout_ms {
            Some(Value::Number(n)) if n.as_u64().is_none() => Err(ConfigError::new(
                "timeout_ms",
                "must be a whole number of milliseconds ≥ 0",
            )),
            _ => Ok(()),
        }
    }
}

/// What a `flow.approval` does when no decision came in time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// The input goes out on the `timeout` port.
    #[default]
    Port,
    /// The step fails ("no decision within …").
    Fail,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubworkflowConfig {
    /// Id of the workflow to run.
    pub workflow: String,
    /// Input for the called workflow (default: this node's input).
    #[serde(default, deserialize_with = "present")]
    pub input: Option<Value>,
    /// Wait for the called run and emit its output (default), or emit `{"run_id"}` at once.
    #[serde(default = "default_true")]
    pub wait: bool,
    /// Which trigger of the called workflow to start (default: its `trigger.workflow`).
    #[serde(default)]
    pub trigger: Option<String>,
}
impl Config for SubworkflowConfig {}

fn default_true() -> bool {
    true
}

// ---- integrations ----------------------------------------------------------

fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%")
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequestConfig {
    /// HTTP method (default `GET`).
    #[serde(default)]
    pub method: Option<String>,
    /// An `http://` or `https://` URL.
    pub url: String,
    /// Request headers (values are templates).
    #[serde(default)]
    pub headers: Map<String, Value>,
    /// Query parameters added to the URL; an array value repeats the key.
    #[serde(default)]
    pub query: Map<String, Value>,
    /// The body: any JSON value (sent as JSON), a string (text), an object
    /// with `body_type: "form"`, or `{"$bytes"}` / `{"$blob"}` data.
    #[serde(default, deserialize_with = "present")]
    pub body: Option<Value>,
    /// How to encode `body` (default: text for strings, bytes for binary values, else JSON).
    #[serde(default)]
    pub body_type: Option<BodyType>,
    /// Name of a `bearer`, `basic`, `header` or `query` credential.
    #[serde(default)]
    pub credential: Option<String>,
    /// Deadline for the whole exchange (default `[http] timeout_ms`, 30 s).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Redirects to follow (default `[http] max_redirects`, 10; 0 = none).
    #[serde(default)]
    pub max_redirects: Option<u32>,
    /// Largest JSON or text body (default `[http] max_response_bytes`, 16 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// How to read the body: by content type (`auto`), or forced.
    #[serde(default)]
    pub response: ResponseAs,
    /// Fail on 4xx (not retried, except 408 and 429) and 5xx (retried).
    /// With `false` every status is emitted on `out`.
    #[serde(default = "default_true")]
    pub fail_on_status: bool,
    /// Send the step's idempotency key as `Idempotency-Key`.
    #[serde(default = "default_true")]
    pub idempotency_key: bool,
}
impl Config for HttpRequestConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(m) = &self.method
            && !is_template(m)
            && (m.is_empty() || !m.chars().all(|c| c.is_ascii_alphabetic()))
        {
            return Err(ConfigError::new(
                "method",
                format!("`{m}` is not an HTTP method"),
            ));
        }
        let url = self.url.trim();
        if url.is_empty() {
            return Err(ConfigError::new("url", "must not be empty"));
        }
        if !url.starts_with('{') && !is_template(url.split('/').next().unwrap_or_default()) {
            let lower = url.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                return Err(ConfigError::new(
                    "url",
                    format!("`{url}` must start with http:// or https://"),
                ));
            }
        }
        if matches!(self.body_type, Some(BodyType::Form))
            && matches!(&self.body, Some(v) if !v.is_object() && !v.is_string())
        {
            return Err(ConfigError::new("body", "a form body must be an object"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BodyType {
    Json,
    Form,
    Text,
    Bytes,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ResponseAs {
    /// JSON for `application/json` and `*+json`, text for `text/*` and XML,
    /// bytes otherwise.
    #[default]
    Auto,
    Json,
    Text,
    /// Base64 inline up to `[http] inline_bytes`, else a blob reference.
    Bytes,
}

/// An `ai.chat`: one chat completion.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AiChatConfig {
    /// Name of an `openai` credential: the server's `base_url`
    /// (`https://api.openai.com/v1`; Ollama: `http://127.0.0.1:11434/v1`)
    /// and its `api_key` (none for a local server).
    pub credential: String,
    /// The model, as the server names it (`gpt-4o-mini`, `llama3.2`).
    pub model: String,
    /// The system message: who the model is and how it answers.
    #[serde(default)]
    pub system: Option<String>,
    /// Earlier turns of the conversation, sent between the system and the
    /// user message: `[{"role": "user"|"assistant", "content": "…"}]` (or
    /// a template giving that array).
    #[serde(default)]
    pub messages: Option<Value>,
    /// The user message: what is asked.
    pub user: String,
    /// Sampling temperature, 0 to 2 (default: the server's).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The most tokens the reply may have (default: the server's).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// A JSON Schema the reply must match: the model is asked for JSON of
    /// that shape, and the reply is parsed and checked against it (the
    /// output's `value`).
    #[serde(default)]
    pub schema: Option<Value>,
    /// How long one request may take, in milliseconds (default 300000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Workflows the model may call: each runs (as a sub-workflow run, at
    /// its `trigger.workflow`, which needs an `input_schema`) with the
    /// arguments the model gives, and its output goes back to the model.
    #[serde(default)]
    pub tools: Vec<AiTool>,
    /// The most rounds of tool calls before the model must answer
    /// (default 8, at most 32).
    #[serde(default)]
    pub max_tool_rounds: Option<u32>,
}

/// A workflow an `ai.chat` model may call.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AiTool {
    /// The workflow's id.
    pub workflow: String,
    /// The name the model calls it by (default: the workflow id).
    #[serde(default)]
    pub name: Option<String>,
    /// What it does (default: its trigger.workflow's `description`).
    #[serde(default)]
    pub description: Option<String>,
}

impl AiTool {
    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.workflow)
    }
}

impl Config for AiChatConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.model.trim().is_empty() {
            return Err(ConfigError::new("model", "must name a model"));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(ConfigError::new("temperature", "must be between 0 and 2"));
        }
        if self.max_tokens == Some(0) {
            return Err(ConfigError::new("max_tokens", "must be at least 1"));
        }
        if self.timeout_ms == Some(0) {
            return Err(ConfigError::new("timeout_ms", "must be at least 1"));
        }
        if let Some(schema) = &self.schema
            && !schema.is_object()
        {
            return Err(ConfigError::new("schema", "must be a JSON Schema object"));
        }
        if let Some(n) = self.max_tool_rounds
            && !(1..=32).contains(&n)
        {
            return Err(ConfigError::new("max_tool_rounds", "must be from 1 to 32"));
        }
        let mut names = std::collections::HashSet::new();
        for (i, t) in self.tools.iter().enumerate() {
            let name = t.name();
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !ok {
                return Err(ConfigError::new(
                    format!("tools[{i}].name"),
                    "a tool's name is 1 to 64 letters, digits, `_` or `-`",
                ));
            }
            if !names.insert(name) {
                return Err(ConfigError::new(
                    format!("tools[{i}].name"),
                    format!("two tools are named `{name}`"),
                ));
            }
        }
        if let Some(Value::Array(turns)) = &self.messages {
            for (i, turn) in turns.iter().enumerate() {
                check_turn(turn).map_err(|m| ConfigError::new(format!("messages[{i}]"), m))?;
            }
        } else if let Some(other) = &self.messages
            && !other.is_string()
        {
            return Err(ConfigError::new(
                "messages",
                "must be an array of {role, content} (or a template giving one)",
            ));
        }
        Ok(())
    }
}

/// One earlier turn of an `ai.chat` conversation: `{"role", "content"}`,
/// the role `user` or `assistant` (or `system`).
pub fn check_turn(turn: &Value) -> Result<(), String> {
    let role = turn.get("role").and_then(Value::as_str);
    if !matches!(role, Some("user" | "assistant" | "system")) {
        return Err("`role` must be user, assistant or system".into());
    }
    if !turn.get("content").is_some_and(Value::is_string) {
        return Err("`content` must be a string".into());
    }
    if turn.as_object().is_some_and(|o| o.len() > 2) {
        return Err("only `role` and `content` are sent".into());
    }
    Ok(())
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    /// Name of an `smtp` credential.
    pub credential: String,
    /// Sender address (default: the credential's username, if it is an address).
    #[serde(default)]
    pub from: Option<String>,
    /// Recipients: a string (comma-separated) or an array of strings.
    #[serde(default)]
    pub to: Option<Value>,
    #[serde(default)]
    pub cc: Option<Value>,
    #[serde(default)]
    pub bcc: Option<Value>,
    #[serde(default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub subject: Option<String>,
    /// Plain-text body.
    #[serde(default)]
    pub text: Option<String>,
    /// HTML body (with `text`, the message carries both).
    #[serde(default)]
    pub html: Option<String>,
    /// Files to attach: `[{"filename", "content", "content_type"?}]`; `content`
    /// is text, or `{"$bytes"}` / `{"$blob"}` data from an earlier node.
    #[serde(default)]
    pub attachments: Option<Value>,
}
impl Config for EmailConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.to.is_none() && self.cc.is_none() && self.bcc.is_none() {
            return Err(ConfigError::new("to", "set `to`, `cc` or `bcc`"));
        }
        if self.text.is_none() && self.html.is_none() && self.attachments.is_none() {
            return Err(ConfigError::new(
                "text",
                "set `text`, `html` or `attachments`",
            ));
        }
        Ok(())
    }
}

/// `db.query`: one SQL statement, or several in one transaction, against a
/// SQLite file or a database server.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DbQueryConfig {
    /// Name of a `postgres` or `mysql` credential: the server, the database
    /// and who connects. Set this or `sqlite`.
    #[serde(default)]
    pub credential: Option<String>,
    /// A SQLite database file inside `[files] allow` (a relative path is
    /// relative to the first allowed folder). Set this or `credential`.
    #[serde(default)]
    pub sqlite: Option<String>,
    /// Create the SQLite file if it does not exist (default: it must).
    #[serde(default)]
    pub create: bool,
    /// The statement. Not a template: values go in `params`, which are sent
    /// to the server apart from the SQL, so no value can change what the SQL
    /// does.
    #[serde(default)]
    pub sql: Option<String>,
    /// Values for the statement's placeholders, each a template: an object
    /// for `:name` placeholders, or an array for the server's own (`$1, $2`
    /// in PostgreSQL, `?` in MySQL and SQLite). `{"$bytes": …}` data fills
    /// binary columns.
    #[serde(default)]
    pub params: Option<Value>,
    /// `query` (default): emit the rows the statement returns; `execute`:
    /// emit how many rows it changed.
    #[serde(default)]
    pub mode: DbMode,
    /// Several statements run in one transaction instead of `sql`: all of
    /// them take effect, or (on any error, or a crash) none. Each has its
    /// `sql` and `mode`, and takes its `:name` values from `params` (an
    /// object); the output's `results` has one entry per statement.
    #[serde(default)]
    pub statements: Vec<DbStatement>,
    /// More rows than this fails the step (default 1000, at most 1000000).
    #[serde(default)]
    pub max_rows: Option<u64>,
    /// Rows adding up to more JSON than this fail the step (default
    /// 16777216, 16 MiB; at most 268435456).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// How long the statement (all of them, with `statements`) may run, in
    /// milliseconds (default 30000); the server stops it then.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// One statement of a `db.query` transaction.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DbStatement {
    /// The statement (not a template); its `:name` placeholders take their
    /// values from the node's `params`.
    pub sql: String,
    #[serde(default)]
    pub mode: DbMode,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DbMode {
    /// The rows: `{"rows": [{…}], "row_count", "columns"}`.
    #[default]
    Query,
    /// The count: `{"rows_affected", "last_insert_id"?}`.
    Execute,
}

impl DbQueryConfig {
    pub const MAX_ROWS: u64 = 1_000_000;
    pub const MAX_BYTES: u64 = 256 << 20;
}

fn check_params(path: &str, params: &Option<Value>) -> Result<(), ConfigError> {
    match params {
        None | Some(Value::Array(_)) | Some(Value::Object(_)) | Some(Value::Null) => Ok(()),
        // A template giving the whole array or object.
        Some(Value::String(s)) if s.contains("{{") => Ok(()),
        Some(_) => Err(ConfigError::new(
            path,
            "an object (for `:name` placeholders) or an array (for `$1` / `?`)",
        )),
    }
}

impl Config for DbQueryConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        match (&self.credential, &self.sqlite) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "sqlite",
                    "set `credential` (a server) or `sqlite` (a file), not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    "credential",
                    "set `credential` (a `postgres` or `mysql` credential) or `sqlite` (a file)",
                ));
            }
            (Some(c), None) if c.trim().is_empty() => {
                return Err(ConfigError::new("credential", "must name a credential"));
            }
            (None, Some(p)) if p.trim().is_empty() => {
                return Err(ConfigError::new("sqlite", "must name a file"));
            }
            _ => {}
        }
        if self.create && self.sqlite.is_none() {
            return Err(ConfigError::new("create", "only for a `sqlite` file"));
        }
        match (&self.sql, self.statements.is_empty()) {
            (Some(_), false) => {
                return Err(ConfigError::new(
                    "statements",
                    "set `sql` (one statement) or `statements` (a transaction), not both",
                ));
            }
            (None, true) => return Err(ConfigError::new("sql", "set the SQL to run")),
            (Some(sql), true) if sql.trim().is_empty() => {
                return Err(ConfigError::new("sql", "set the SQL to run"));
            }
            _ => {}
        }
        check_params("params", &self.params)?;
        if !self.statements.is_empty() && matches!(self.params, Some(Value::Array(_))) {
            return Err(ConfigError::new(
                "params",
                "with `statements`, params is an object: each statement takes the `:name` \
                 values it uses",
            ));
        }
        for (i, st) in self.statements.iter().enumerate() {
            if st.sql.trim().is_empty() {
                return Err(ConfigError::new(
                    format!("statements[{i}].sql"),
                    "set the SQL to run",
                ));
            }
        }
        if let Some(n) = self.max_rows
            && !(1..=Self::MAX_ROWS).contains(&n)
        {
            return Err(ConfigError::new(
                "max_rows",
                format!("must be from 1 to {}", Self::MAX_ROWS),
            ));
        }
        if let Some(n) = self.max_bytes
            && !(1..=Self::MAX_BYTES).contains(&n)
        {
            return Err(ConfigError::new(
                "max_bytes",
                format!("must be from 1 to {}", Self::MAX_BYTES),
            ));
        }
        if self.timeout_ms == Some(0) {
            return Err(ConfigError::new("timeout_ms", "must be at least 1"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    Text,
    Json,
    /// An array of objects, one per row after the header row.
    Csv,
    /// `{"$bytes"}` inline, or `{"$blob"}` for large files.
    Bytes,
}

/// `code.js`: JavaScript (QuickJS in WebAssembly), run in the sandbox.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsConfig {
    /// The body of an async function: `input` (the message) is in scope,
    /// `return` gives the output (any JSON value; nothing is `null`),
    /// `await` works, `console.log` writes to the run log. Not a template.
    pub source: String,
    /// The value given as `input` (default `{{ input }}`, the message).
    #[serde(default, deserialize_with = "present")]
    pub input: Option<Value>,
    /// Wall-clock limit in milliseconds (default `[sandbox] timeout_ms`, 5,000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Memory limit in MiB (default `[sandbox] memory_mb`, 64; at most 512).
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Fuel limit: about one unit per WebAssembly instruction executed.
    /// Unlike the time limit it stops the same code at the same point on
    /// every machine. Default: none.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// Grants the `log` capability: the code's log calls (`console.log`)
    /// reach the run log. With `false` they are dropped.
    #[serde(default = "default_true")]
    pub log: bool,
    /// Output ports instead of `out` (as Node-RED's function node has
    /// outputs): the code returns an object with a message per port
    /// (`{"valid": [...], "invalid": [...]}`); a port it leaves out, or sets
    /// to `null`, sends nothing (what follows it is skipped).
    #[serde(default)]
    pub ports: Vec<String>,
}
impl Config for JsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, port) in self.ports.iter().enumerate() {
            if !crate::validate::is_slug(port) {
                return Err(ConfigError::new(
                    format!("ports[{i}]"),
                    format!("`{port}` is not a port name (letters, digits, `-`, `_`)"),
                ));
            }
            if port == "error" || !seen.insert(port.as_str()) {
                return Err(ConfigError::new(
                    format!("ports[{i}]"),
                    format!("port `{port}` is used twice or reserved"),
                ));
            }
        }
        check_limits(self.timeout_ms, self.memory_mb, self.fuel)
    }
}

fn check_limits(
    timeout_ms: Option<u64>,
    memory_mb: Option<u64>,
    fuel: Option<u64>,
) -> Result<(), ConfigError> {
    if fuel == Some(0) {
        return Err(ConfigError::new("fuel", "must be at least 1"));
    }
    if matches!(timeout_ms, Some(t) if t == 0 || t > 600_000) {
        return Err(ConfigError::new("timeout_ms", "must be 1 to 600000"));
    }
    if matches!(memory_mb, Some(m) if m == 0 || m > 512) {
        return Err(ConfigError::new("memory_mb", "must be 1 to 512"));
    }
    Ok(())
}

/// `code.wasm`: a user-supplied component, run in the sandbox.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WasmConfig {
    /// The component: the hash `sluice modules add FILE` (or
    /// `POST /api/v1/modules`) printed (64 hex digits).
    pub module: String,
    /// The message passed to the component (default `{{ input }}`).
    #[serde(default, deserialize_with = "present")]
    pub input: Option<Value>,
    /// Wall-clock limit in milliseconds (default `[sandbox] timeout_ms`, 5,000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Memory limit in MiB (default `[sandbox] memory_mb`, 64; at most 512).
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Fuel limit: about one unit per WebAssembly instruction executed.
    /// Unlike the time limit it stops the same code at the same point on
    /// every machine. Default: none.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// Grants the `log` capability: the code's log calls (`console.log`)
    /// reach the run log. With `false` they are dropped.
    #[serde(default = "default_true")]
    pub log: bool,
}
impl Config for WasmConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.module.len() != 64 || !self.module.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(ConfigError::new(
                "module",
                format!(
                    "`{}` is not a module hash (64 hex digits, from `sluice modules add`)",
                    self.module
                ),
            ));
        }
        check_limits(self.timeout_ms, self.memory_mb, self.fuel)
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadConfig {
    /// A path inside a folder listed in `[files] allow` (relative paths are
    /// relative to the first one).
    pub path: String,
    /// Default: from the extension (`.json`, `.csv`), else text.
    #[serde(default)]
    pub format: Option<FileFormat>,
}
impl Config for FileReadConfig {}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWriteConfig {
    /// A path inside a folder listed in `[files] allow`.
    pub path: String,
    /// Default: from the extension (`.json`, `.csv`), else text.
    #[serde(default)]
    pub format: Option<FileFormat>,
    /// What to write (default `{{ input }}`).
    #[serde(default, deserialize_with = "present")]
    pub content: Option<Value>,
    /// Replace an existing file (default) or fail.
    #[serde(default)]
    pub if_exists: IfExists,
    /// Create missing folders (inside the allowed folder).
    #[serde(default)]
    pub create_dirs: bool,
}
impl Config for FileWriteConfig {}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IfExists {
    #[default]
    Overwrite,
    Fail,
}

// ---- data, util, output ----------------------------------------------------

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetConfig {
    /// Each value is a template (strings anywhere inside are evaluated).
    pub values: Map<String, Value>,
    /// Merge the values over the input object instead of replacing it.
    #[serde(default)]
    pub keep_input: bool,
}
impl Config for SetConfig {
    fn from_object(mut object: Map<String, Value>) -> Result<Self, Map<String, Value>> {
        let keep_input = match object.get("keep_input") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(object),
        };
        let fits = object.len() == 1 + usize::from(object.contains_key("keep_input"))
            && object.get("values").is_some_and(Value::is_object);
        if !fits {
            return Err(object);
        }
        match object.remove("values") {
            Some(Value::Object(values)) => Ok(SetConfig { values, keep_input }),
            _ => Err(object),
        }
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    /// A jq program; the input is the message. Several results become an array.
    pub jq: String,
}
impl Config for TransformConfig {}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A template for the log line.
    pub message: Value,
    #[serde(default)]
    pub level: LogLevel,
}
impl Config for LogConfig {}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// The level as written in the config and in the run log.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndConfig {
    /// The output value (default `{{ input }}`).
    #[serde(default, deserialize_with = "present")]
    pub value: Option<Value>,
}
impl Config for EndConfig {
    fn from_object(mut object: Map<String, Value>) -> Result<Self, Map<String, Value>> {
        if object.keys().any(|k| k != "value") {
            return Err(object);
        }
        Ok(EndConfig {
            value: object.remove("value"),
        })
    }
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondConfig {
    /// HTTP status (a number or a template), default 200.
    #[serde(default)]
    pub status: Option<Value>,
    /// Response headers (values are templates).
    #[serde(default)]
    pub headers: Map<String, Value>,
    /// Response body (default `{{ input }}`).
    #[serde(default, deserialize_with = "present")]
    pub body: Option<Value>,
}
impl Config for RespondConfig {
    fn from_object(mut object: Map<String, Value>) -> Result<Self, Map<String, Value>> {
        let fits = object
            .keys()
            .all(|k| matches!(k.as_str(), "status" | "headers" | "body"))
            && object.get("headers").is_none_or(Value::is_object);
        if !fits {
            return Err(object);
        }
        Ok(RespondConfig {
            // As serde reads an `Option`: null is none.
            status: object.remove("status").filter(|s| !s.is_null()),
            headers: match object.remove("headers") {
                Some(Value::Object(headers)) => headers,
                _ => Map::new(),
            },
            // As `present` reads it: null is a null body.
            body: object.remove("body"),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(Value::Number(n)) = &self.status
            && !n.as_u64().is_some_and(|s| (200..=599).contains(&s))
        {
            return Err(ConfigError::new(
                "status",
                "must be an HTTP status between 200 and 599",
            ));
        }
        Ok(())
    }
}

/// The node reference in Markdown, generated from the catalog (`docs/nodes.md`).
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Node reference\n\n<!-- Generated from the schemas in engine/model/src/kinds.rs by \
         `cargo xtask docs`; a test fails when this file is stale. -->\n\n\
         Every node has `id`, `kind`, `config` and optionally `position`, `label`, `disabled`, \
         `retry`, `on_error`, `timeout_ms` and `notes` (see [workflow-format.md](workflow-format.md)). \
         Strings in `config` are templates unless noted (see [semantics.md](semantics.md)).\n",
    );
    for spec in CATALOG {
        out.push_str(&format!(
            "\n## `{}` — {}\n\n{}\n\n",
            spec.kind,
            spec.title(),
            spec.summary
        ));
        out.push_str(&format!(
            "- In the editor: **{}** ![icon](../assets/node-icons/{}.svg), also found by {}\n",
            spec.title(),
            spec.kind,
            spec.synonyms()
                .iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let inputs = if spec.is_trigger {
            "none (entry point)"
        } else {
            "`in`"
        };
        let mut outputs: Vec<String> = spec.outputs.iter().map(|p| format!("`{p}`")).collect();
        if spec.kind == "flow.switch" {
            outputs.insert(0, "one per case".into());
        }
        let outputs = if outputs.is_empty() {
            "none (exit)".to_string()
        } else {
            outputs.join(", ")
        };
        out.push_str(&format!("- Input: {inputs}\n- Outputs: {outputs}\n"));
        if !spec.raw_fields.is_empty() {
            let raw: Vec<String> = spec.raw_fields.iter().map(|f| format!("`{f}`")).collect();
            out.push_str(&format!("- Not templated: {}\n", raw.join(", ")));
        }
        let schema = spec.config_schema();
        let props = schema.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match props {
            Some(props) if !props.is_empty() => {
                out.push_str("\n| config | type | required | description |\n|---|---|---|---|\n");
                for (name, p) in props {
                    let req = if required.contains(&name.as_str()) {
                        "yes"
                    } else {
                        "no"
                    };
                    let desc = p
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .replace('\n', " ");
                    out.push_str(&format!(
                        "| `{name}` | {} | {req} | {desc} |\n",
                        type_name(p, &schema)
                    ));
                }
            }
            _ => out.push_str("\nNo config.\n"),
        }
    }
    out
}

fn type_name(p: &Value, root: &Value) -> String {
    if let Some(r) = p.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        let def = root.get("$defs").and_then(|d| d.get(name));
        if let Some(values) = def.and_then(enum_values) {
            return values;
        }
        return name.to_string();
    }
    if let Some(values) = enum_values(p) {
        return values;
    }
    match p.get("type") {
        Some(Value::String(t)) if t == "array" => {
            let item = p
                .get("items")
                .map(|i| type_name(i, root))
                .unwrap_or_else(|| "any".into());
            format!("array of {item}")
        }
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ => match p.get("anyOf").and_then(Value::as_array) {
            Some(alts) => alts
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .map(|a| type_name(a, root))
                .collect::<Vec<_>>()
                .join(" or "),
            None => "any".into(),
        },
    }
}

fn enum_values(p: &Value) -> Option<String> {
    let values: Vec<&Value> = match p.get("enum").and_then(Value::as_array) {
        Some(e) => e.iter().collect(),
        None => {
            // Documented variants come as `const`s, undocumented ones grouped
            // in an `enum`: together, in declaration order.
            let alts = p.get("oneOf")?.as_array()?;
            let mut all = Vec::new();
            for a in alts {
                match (a.get("const"), a.get("enum").and_then(Value::as_array)) {
                    (Some(c), _) => all.push(c),
                    (None, Some(e)) => all.extend(e.iter()),
                    (None, None) => return None,
                }
            }
            all
        }
    };
    let v: Vec<String> = values
        .iter()
        .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
        .collect();
    Some(v.join(" / "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `parse_owned` (which takes `from_object`'s way when it can) reads
    /// every sample exactly as `parse` (serde alone) does, errors included;
    /// what `from_object` declines it gives back untouched. Returns how
    /// many samples took the quick way.
    fn read_as_serde_does<T: Config + std::fmt::Debug>(samples: &[Value]) -> usize {
        let mut quick = 0;
        for v in samples {
            let Value::Object(object) = v.clone() else {
                panic!("{v} is not an object")
            };
            match T::from_object(object) {
                Ok(_) => quick += 1,
                Err(back) => assert_eq!(&Value::Object(back), v, "given back untouched"),
            }
            // Debug tells `Some(Null)` from `None`, as the nodes do.
            let read = |r: Result<T, ConfigError>| r.map(|t| format!("{t:?}"));
            let owned = parse_owned::<T, ()>(v.clone(), || Ok(v.clone())).unwrap();
            assert_eq!(read(owned), read(parse::<T>(v.clone())), "{v}");
        }
        quick
    }

    #[test]
    fn configs_built_from_their_objects_read_as_serde_reads_them() {
        let set = [
            json!({"values": {"id": 7, "tier": "gold"}}),
            json!({"values": {}, "keep_input": true}),
            json!({"keep_input": false, "values": {"a": [1, {"b": null}]}}),
            json!({"values": {}, "keep_input": "yes"}),
            json!({"values": {}, "keep_input": null}),
            json!({"values": 3}),
            json!({"values": null}),
            json!({"values": {}, "extra": 1}),
            json!({"keep_input": true}),
            json!({}),
        ];
        assert_eq!(read_as_serde_does::<SetConfig>(&set), 3);
        let end = [
            json!({}),
            json!({"value": null}),
            json!({"value": {"a": [1, 2]}}),
            json!({"value": 1, "extra": 2}),
        ];
        assert_eq!(read_as_serde_does::<EndConfig>(&end), 3);
        let respond = [
            json!({}),
            json!({"status": 200, "headers": {"x-a": "b"}, "body": {"id": 7}}),
            json!({"status": null, "body": null}),
            json!({"status": "201"}),
            json!({"status": 700}),
            json!({"status": 199.5}),
            json!({"headers": {}}),
            json!({"headers": null}),
            json!({"headers": 3}),
            json!({"body": [1, "x"]}),
            json!({"bodyy": 1}),
        ];
        assert_eq!(read_as_serde_does::<RespondConfig>(&respond), 8);
    }

    #[test]
    fn the_catalog_lists_the_kinds_in_declaration_order() {
        for (i, spec) in catalog().iter().enumerate() {
            assert_eq!(spec.id as usize, i, "{}", spec.kind);
            assert_eq!(spec.id.spec().kind, spec.kind);
        }
        assert_eq!(Kind::Respond.name(), "output.respond");
    }

    #[test]
    fn methods_read_as_they_are_written() {
        for m in ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] {
            let parsed: HttpMethod = serde_json::from_value(json!(m)).unwrap();
            assert_eq!(parsed.as_str(), m);
        }
    }

    #[test]
    fn a_present_null_stays_present() {
        let cfg: EndConfig = parse(json!({"value": null})).unwrap();
        assert_eq!(cfg.value, Some(Value::Null));
        let cfg: EndConfig = parse(json!({})).unwrap();
        assert_eq!(cfg.value, None);
        let err = parse::<HttpRequestConfig>(json!({"url": 5})).unwrap_err();
        assert_eq!(err.path, "url");
        assert!(err.message.contains("invalid type"), "{err}");
    }

    #[test]
    fn every_kind_has_an_object_schema() {
        for spec in catalog() {
            let s = spec.config_schema();
            assert_eq!(s["type"], "object", "{}", spec.kind);
        }
    }

    #[test]
    fn config_errors_name_the_field() {
        let err = spec("flow.split")
            .unwrap()
            .check_config(&json!({"concurrency": "lots"}))
            .unwrap_err();
        assert_eq!(err.path, "concurrency");
        let err = spec("flow.switch")
            .unwrap()
            .check_config(&json!({"cases": [{"port": "a", "condition": "1"}, {"port": "a", "condition": "2"}]}))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cases[1].port: port `a` is used twice or reserved"
        );
        let err = spec("data.set")
            .unwrap()
            .check_config(&json!({"vals": {}}))
            .unwrap_err();
        assert!(err.message.contains("unknown field `vals`"), "{err}");
    }

    #[test]
    fn switch_ports_come_from_cases() {
        let cfg = json!({"cases": [{"port": "big", "condition": "{{ input > 10 }}"}]});
        assert_eq!(
            spec("flow.switch").unwrap().output_ports(&cfg),
            ["big", "default"]
        );
    }

    #[test]
    fn docs_are_generated_from_the_schemas() {
        let on_disk = include_str!("../../../docs/nodes.md");
        assert!(
            on_disk == reference_markdown(),
            "docs/nodes.md is stale: run `cargo xtask docs` and commit the result"
        );
    }
}
