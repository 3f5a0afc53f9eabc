//! The built-in node kinds. A node gets its (compiled) config, its input and
//! a [`Host`] for side channels (logs, sub-workflows) and returns messages per
//! output port, or an error that says whether retrying can help.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod ai;
pub mod binary;
mod code;
mod db;
pub mod email;
pub mod files;
pub mod http;
pub mod io;
pub mod net;
pub mod redact;
mod schema;
pub mod settings;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use io::Io;
pub use settings::{Settings, WorkerSettings};

use serde_json::{Map, Value};
use sluice_model::kinds::{
    self, EndConfig, IfConfig, Kind, LogConfig, RespondConfig, SetConfig, SplitConfig,
    SubworkflowConfig, SwitchConfig, TransformConfig, WaitConfig,
};
use sluice_model::template::{self, Compiled, Scope};

pub type Msg = Arc<Value>;

/// A node failure: terminal (never retried) or retryable (the core's
/// [`sluice_core::StepError`]).
pub use sluice_core::StepError as Error;
/// jq checking lives in the core (plans check programs); nodes run them.
pub use sluice_core::jq;

pub type Result<T, E = Error> = std::result::Result<T, E>;
pub type Outputs = Vec<(String, Msg)>;
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A credential as a node receives it (decrypted; never journaled).
#[derive(Clone)]
pub struct Credential {
    pub name: String,
    pub kind: String,
    pub value: Value,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({} {}, ***)", self.kind, self.name)
    }
}

/// A blob being written: bytes in, content hash and size out.
pub trait BlobWriter: Send {
    fn write(&mut self, bytes: &[u8]) -> Result<()>;
    /// Makes the blob durable; returns its hash and size.
    fn finish(self: Box<Self>) -> Result<(String, u64)>;
}

/// A workflow offered to a model as a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub description: Option<String>,
    /// The JSON Schema of its input.
    pub input_schema: Value,
}

/// What a node may ask of the engine.
pub trait Host: Send + Sync {
    /// Appends a line to the run log.
    fn log(&self, level: &str, message: &str);
    /// Runs another workflow; with `wait`, resolves to its output.
    fn subworkflow(
        &self,
        workflow: String,
        trigger: Option<String>,
        input: Msg,
        wait: bool,
    ) -> BoxFuture<'_, Result<Value>>;
    /// The step's stable idempotency key `run/node/lineage/activation`
    /// (the same for every attempt).
    fn idempotency_key(&self) -> &str {
        ""
    }
    /// A credential by name. Its secrets are masked (`***`) in everything
    /// the step produces: output, error, logs and blobs.
    fn credential<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Credential>> {
        Box::pin(async move {
            Err(Error::terminal(format!(
                "credential `{name}`: this host has no credentials"
            )))
        })
    }
    /// `bytes` with the step's secrets masked (for binary data that goes
    /// into the message base64-encoded, where masking the text cannot see it).
    fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        bytes.to_vec()
    }
    /// Runs workflow `workflow` (at its `trigger.workflow`) for a tool call
    /// of this step, and resolves to its output; `key` tells the step's
    /// calls apart, so the step run again finds each call's run again.
    fn tool_call(
        &self,
        _key: String,
        workflow: String,
        _input: Msg,
    ) -> BoxFuture<'_, Result<Value>> {
        Box::pin(async move {
            Err(Error::terminal(format!(
                "tool `{workflow}`: this host runs no workflows"
            )))
        })
    }
    /// What a workflow offered as a tool takes and does (its
    /// `trigger.workflow`'s `input_schema` and `description`).
    fn workflow_tool<'a>(&'a self, workflow: &'a str) -> BoxFuture<'a, Result<ToolSpec>> {
        Box::pin(async move {
            Err(Error::terminal(format!(
                "tool `{workflow}`: this host runs no workflows"
            )))
        })
    }
    /// Text as a step produces it (a model's tokens): shown live to whoever
    /// watches the run, not journaled (log the whole text with `log`).
    fn log_live(&self, _level: &str, _text: &str) {}
    /// Tokens a model call used (the engine's metrics).
    fn ai_usage(&self, _model: &str, _input_tokens: u64, _output_tokens: u64) {}
    /// Starts a new blob in the blob store.
    fn blob_writer(&self) -> Result<Box<dyn BlobWriter>> {
        Err(Error::terminal("this host has no blob store"))
    }
    /// The file holding a stored blob.
    fn blob_path(&self, hash: &str) -> Result<PathBuf> {
        Err(Error::terminal(format!(
            "blob {hash}: this host has no blob store"
        )))
    }
}

/// Whether an error chain holds a TLS failure (a certificate the server
/// cannot prove, a handshake refused): retrying will not help.
pub(crate) fn is_tls_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && inner.downcast_ref::<rustls::Error>().is_some()
        {
            return true;
        }
        // Connectors box their errors in types of their own; rustls's
        // messages for a failed verification or handshake are distinctive.
        let text = err.to_string();
        if text.contains("invalid peer certificate")
            || text.contains("peer is incompatible")
            || text.contains("received fatal alert")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// One invocation of a node.
pub struct Call<'a> {
    pub kind: Kind,
    pub node_id: &'a str,
    /// The config with templates compiled; the node reads it, evaluated, as
    /// its kind's config type ([`config`]).
    pub config: &'a Compiled,
    pub scope: Scope,
    /// When attempt 1 of this step started (unix µs): waits count from it.
    pub first_started_at_us: i64,
    pub host: &'a dyn Host,
    pub jq: Option<Arc<jq::Program>>,
    pub io: &'a Io,
}

/// Runs a node. Pure kinds complete without awaiting.
pub async fn execute(call: Call<'_>) -> Result<Outputs> {
    if let Some(result) = execute_pure(&call) {
        return result;
    }
    match call.kind {
        Kind::Wait => wait(&call).await,
        // Parked by the run's driver (see `approval`), never executed.
        Kind::Approval => Err(Error::terminal(
            "flow.approval waits for a decision; it runs only as a step of a run",
        )),
        Kind::Subworkflow => subworkflow(&call).await,
        Kind::Transform => transform(&call).await,
        Kind::HttpRequest => http::request(&call).await,
        Kind::EmailSend => email::send(&call).await,
        Kind::AiChat => ai::chat(&call).await,
        Kind::DbQuery => db::query(&call).await,
        Kind::FileRead => files::read(&call).await,
        Kind::FileWrite => files::write(&call).await,
        Kind::Js => code::js(&call).await,
        Kind::Wasm => code::wasm(&call).await,
        other => Err(Error::terminal(format!(
            "node kind `{}` cannot run in this build",
            other.name()
        ))),
    }
}

/// Checks that a credential works with one kind-specific exchange, made by
/// the node kind that uses it, through the same clients, network policy and
/// masking as a run: `http.request` calls its URL with the credential (an
/// answer outside 2xx fails), `db.query` runs `SELECT 1`, `email.send`
/// connects and logs in without sending, `ai.chat` lists the models. What
/// the server said, on success.
pub async fn check_credential(call: Call<'_>) -> Result<String> {
    match call.kind {
        Kind::HttpRequest => {
            let outputs = http::request(&call).await?;
            let msg = outputs.first().map(|(_, m)| m.clone()).unwrap_or_default();
            let status = msg["status"].as_u64().unwrap_or_default();
            let url = msg["url"].as_str().unwrap_or_default();
            Ok(format!("{url} answered {status}"))
        }
        Kind::DbQuery => {
            db::query(&call).await?;
            Ok("the server took the login and answered `SELECT 1`".to_string())
        }
        Kind::EmailSend => email::check(&call).await,
        Kind::AiChat => ai::check(&call).await,
        other => Err(Error::terminal(format!(
            "node kind `{}` uses no credentials",
            other.name()
        ))),
    }
}

pub(crate) fn out(msg: Msg) -> Result<Outputs> {
    Ok(vec![("out".to_string(), msg)])
}

/// The node's config as its kind's type, with its templates evaluated. A
/// template that gives a value of the wrong type is a terminal error naming
/// the field, like a wrong value written in the file.
pub(crate) fn config<T: kinds::Config>(call: &Call<'_>) -> Result<T> {
    let owned = |v: Arc<Value>| Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone());
    let value = owned(call.config.eval(&call.scope)?);
    // Templates are pure: a config that is not well formed is evaluated
    // again only to name the field that is wrong.
    let again = || call.config.eval(&call.scope).map(owned);
    kinds::parse_owned(value, again)?.map_err(|e| {
        Error::terminal(if e.path.is_empty() {
            format!("config: {}", e.message)
        } else {
            format!("config.{}: {}", e.path, e.message)
        })
    })
}

/// Whether a node of `kind` computes its output from its input and config
/// alone (no I/O, no side effects, no waiting).
pub fn is_pure(kind: Kind) -> bool {
    kind.is_pure()
}

/// Runs a pure kind; `None` for the others.
pub fn execute_pure(call: &Call<'_>) -> Option<Result<Outputs>> {
    if !call.kind.is_pure() {
        return None;
    }
    let input = || call.scope.input.clone();
    Some(match call.kind {
        k if k.spec().is_trigger => out(input()),
        Kind::Join | Kind::Merge => out(input()),
        Kind::If => config::<IfConfig>(call).map(|cfg| {
            let port = if template::truthy(&cfg.condition) {
                "true"
            } else {
                "false"
            };
            vec![(port.to_string(), input())]
        }),
        Kind::Switch => config::<SwitchConfig>(call).map(|cfg| {
            let port = cfg
                .cases
                .into_iter()
                .find(|c| template::truthy(&c.condition))
                .map(|c| c.port)
                .unwrap_or_else(|| "default".into());
            vec![(port, input())]
        }),
        Kind::Split => (|| {
            let items = match config::<SplitConfig>(call)?.items {
                None => input(),
                Some(v) => Arc::new(v),
            };
            if !items.is_array() {
                return Err(Error::terminal(format!(
                    "flow.split: `items` must be an array, got {}",
                    type_name(&items)
                )));
            }
            out(items)
        })(),
        Kind::Set => (|| {
            let cfg = config::<SetConfig>(call)?;
            if !cfg.keep_input {
                return out(Arc::new(Value::Object(cfg.values)));
            }
            let mut base = match &*call.scope.input {
                Value::Object(m) => m.clone(),
                Value::Null => Map::new(),
                other => {
                    return Err(Error::terminal(format!(
                        "data.set: `keep_input` needs an object input, got {}",
                        type_name(other)
                    )));
                }
            };
            base.extend(cfg.values);
            out(Arc::new(Value::Object(base)))
        })(),
        Kind::Log => config::<LogConfig>(call).and_then(|cfg| {
            let message = match cfg.message {
                Value::String(s) => s,
                other => other.to_string(),
            };
            call.host.log(cfg.level.as_str(), &message);
            out(input())
        }),
        Kind::End => config::<EndConfig>(call).and_then(|cfg| match cfg.value {
            None => out(input()),
            Some(v) => out(Arc::new(v)),
        }),
        Kind::Respond => (|| {
            let cfg = config::<RespondConfig>(call)?;
            let status = match &cfg.status {
                None | Some(Value::Null) => 200,
                Some(v) => v
                    .as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                    .filter(|s| (200..=599).contains(s))
                    .ok_or_else(|| {
                        Error::terminal(format!(
                            "output.respond: status `{v}` is not an HTTP status"
                        ))
                    })?,
            };
            let body = match cfg.body {
                Some(body) => body,
                None => (*call.scope.input).clone(),
            };
            // Built in place: `json!` would copy the body (a run's message).
            let mut response = Map::with_capacity(3);
            response.insert("status".into(), Value::from(status));
            response.insert("headers".into(), Value::Object(cfg.headers));
            response.insert("body".into(), body);
            out(Arc::new(Value::Object(response)))
        })(),
        _ => return None,
    })
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

async fn wait(call: &Call<'_>) -> Result<Outputs> {
    let now_us = now_us();
    let until_us = wait_until_us(call)?;
    if until_us > now_us {
        tokio::time::sleep(Duration::from_micros((until_us - now_us) as u64)).await;
    }
    out(call.scope.input.clone())
}

/// When a `flow.wait` step is due (Unix micros): its `duration_ms` after
/// the step's first attempt started, or its `until` time. A driver with
/// durable timers (the shared worker) sleeps until then itself.
pub fn wait_until_us(call: &Call<'_>) -> Result<i64> {
    let cfg = config::<WaitConfig>(call)?;
    Ok(if let Some(d) = &cfg.duration_ms {
        let ms = d
            .as_u64()
            .or_else(|| d.as_str().and_then(|s| s.trim().parse().ok()))
            .ok_or_else(|| {
                Error::terminal(format!(
                    "flow.wait: duration_ms `{d}` is not a number of milliseconds"
                ))
            })?;
        call.first_started_at_us
            .saturating_add((ms as i64).saturating_mul(1000))
    } else {
        let until = cfg
            .until
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or_default();
        let t = time::OffsetDateTime::parse(until, &time::format_description::well_known::Rfc3339)
            .map_err(|e| {
                Error::terminal(format!(
                    "flow.wait: until `{until}` is not an RFC 3339 time: {e}"
                ))
            })?;
        (t.unix_timestamp_nanos() / 1000) as i64
    })
}

/// What a `flow.approval` step waits for, its templates evaluated.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    /// What is asked.
    pub message: Option<String>,
    /// When the timeout fires (unix µs): `timeout_ms` after the step's
    /// first attempt started; None: never.
    pub deadline_us: Option<i64>,
    pub on_timeout: kinds::OnTimeout,
}

/// Reads a `flow.approval` step's config (see [`Approval`]).
pub fn approval(call: &Call<'_>) -> Result<Approval> {
    let cfg = config::<kinds::ApprovalConfig>(call)?;
    let deadline_us = match &cfg.timeout_ms {
        None | Some(Value::Null) => None,
        Some(t) => {
            let ms = t
                .as_u64()
                .or_else(|| t.as_str().and_then(|s| s.trim().parse().ok()))
                .ok_or_else(|| {
                    Error::terminal(format!(
                        "config.timeout_ms: `{t}` is not a number of milliseconds"
                    ))
                })?;
            Some(
                call.first_started_at_us
                    .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX).saturating_mul(1000)),
            )
        }
    };
    Ok(Approval {
        message: cfg.message,
        deadline_us,
        on_timeout: cfg.on_timeout,
    })
}

async fn subworkflow(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<SubworkflowConfig>(call)?;
    let input = match cfg.input {
        Some(v) => Arc::new(v),
        None => call.scope.input.clone(),
    };
    let result = call
        .host
        .subworkflow(cfg.workflow, cfg.trigger, input, cfg.wait)
        .await?;
    out(Arc::new(result))
}

/// Most memory a jq program may use (its input, the values it builds);
/// its time limit is `[sandbox] timeout_ms`.
const JQ_MEMORY: usize = 512 << 20;
/// Most outputs a jq program may produce.
const JQ_MAX_OUTPUTS: u32 = 10_000;

/// Runs the node's jq program in the sandbox (jaq in WebAssembly): a
/// program that recurses without end, loops or allocates without bound is
/// stopped there, at a limit the error names, and takes no engine thread
/// with it. The program was checked when the workflow was planned.
async fn transform(call: &Call<'_>) -> Result<Outputs> {
    let program = match &call.jq {
        Some(p) => p.source.clone(),
        None => {
            let code = config::<TransformConfig>(call)?.jq;
            jq::Program::compile(&code).map_err(Error::terminal)?.source
        }
    };
    let input = serde_json::to_string(&*call.scope.input)
        .map_err(|e| Error::terminal(format!("data.transform: the input is not JSON: {e}")))?;
    let limits = sluice_sandbox::Limits {
        timeout: Duration::from_millis(call.io.settings.sandbox.timeout_ms),
        memory: JQ_MEMORY,
        ..sluice_sandbox::Limits::default()
    };
    let sandbox = call.io.sandbox()?;
    let answer = sandbox
        .run_jq(&program, &input, JQ_MAX_OUTPUTS, limits)
        .await
        .map_err(|e| match e {
            sluice_sandbox::Error::Host(m) => {
                Error::retryable(format!("data.transform: the sandbox failed: {m}"))
            }
            sluice_sandbox::Error::Trap(m) => {
                Error::terminal(format!("data.transform: the jq program crashed: {m}"))
            }
            other => Error::terminal(format!("data.transform: jq program {other}")),
        })?
        .map_err(|e| Error::terminal(format!("data.transform: {e}")))?;
    let values = sluice_sandbox::parse_output(&answer)
        .map_err(|e| Error::terminal(format!("data.transform: {e}")))?;
    let v = match values {
        Value::Array(mut values) if values.len() == 1 => values.remove(0),
        Value::Array(values) => Value::Array(values),
        other => other,
    };
    out(Arc::new(v))
}

/// This machine's name as others on its network may reach it (a DNS
/// label or a dotted name; `None` when the system gives none that fits a
/// URL).
pub fn host_name() -> Option<String> {
    let name = whoami::hostname().ok()?;
    let name = name.trim().trim_end_matches('.');
    let fits = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    fits.then(|| name.to_ascii_lowercase())
}

/// Unix microseconds now (negative before 1970). Read straight from the
/// clock: going through `time::OffsetDateTime` built a calendar date and
/// divided an i128 for each of a webhook run's eleven timestamps (~3,100
/// instructions per request).
pub fn now_us() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let micros = |d: std::time::Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(after) => micros(after),
        Err(e) => -micros(e.duration()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn now_us_is_the_clock_in_microseconds_as_time_reads_it() {
        let us = |t: time::OffsetDateTime| t.unix_timestamp_nanos() / 1000;
        let before = us(time::OffsetDateTime::now_utc());
        let now = i128::from(super::now_us());
        let after = us(time::OffsetDateTime::now_utc());
        assert!(
            before <= now && now <= after,
            "{before} <= {now} <= {after}"
        );
    }
}
