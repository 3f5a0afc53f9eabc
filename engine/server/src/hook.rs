//! Webhooks: `ANY /hook/{workflow}/{path}` starts a run at the matching
//! `trigger.webhook` with the request as its message. The only routes
//! without a token: a trigger may demand an HMAC signature instead.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use serde_json::{Map, Value, json};
use sluice_model::kinds::{Respond, SignatureScheme, Trigger, WebhookTrigger};
use sluice_runtime::{Plan, Status};

use crate::error::parse_json;
use crate::{ApiError, AppState};

pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        // Before the webhooks: `resume` is not a workflow's id here.
        .route(
            "/hook/resume/{token}",
            axum::routing::get(crate::resume::resume_page).post(crate::resume::resume),
        )
        .route("/hook/{workflow}/{*path}", any(hook))
        .route("/hook-test/{workflow}/{*path}", any(test_hook))
}

/// Editors waiting for one call to a webhook's test URL
/// (`/hook-test/{workflow}/{path}`), by workflow and trigger node: the
/// newest wait for a trigger replaces an older one.
#[derive(Default)]
pub(crate) struct Listeners {
    waiting: std::sync::Mutex<
        std::collections::HashMap<(String, String), tokio::sync::oneshot::Sender<Value>>,
    >,
}

impl Listeners {
    /// Waits for the next test call to `node` of `workflow`.
    pub(crate) fn listen(
        &self,
        workflow: &str,
        node: &str,
    ) -> tokio::sync::oneshot::Receiver<Value> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        // Waits whose editor gave up (closed, timed out) go.
        waiting.retain(|_, tx| !tx.is_closed());
        waiting.insert((workflow.to_string(), node.to_string()), tx);
        rx
    }

    /// Hands `message` to whoever waits for `node`; false when nobody does.
    fn deliver(&self, workflow: &str, node: &str, message: Value) -> bool {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        match waiting.remove(&(workflow.to_string(), node.to_string())) {
            Some(tx) => tx.send(message).is_ok(),
            None => false,
        }
    }
}

#[utoipa::path(post, path = "/hook-test/{workflow}/{path}", tag = "webhooks",
    params(("workflow" = String, Path, description = "Workflow id"), ("path" = String, Path, description = "The draft trigger's `path`")),
    request_body(content = Object, description = "Any body, as for the webhook itself"),
    responses((status = 200, description = "The call was shown in the editor that listens for it; no run starts"),
        (status = 401, description = "Missing or wrong `X-Sluice-Signature`"),
        (status = 404, description = "No editor is listening for a test call to this webhook")),
    security(()))]
/// A webhook's test URL: while an editor listens ("Listen for a test
/// call"), one request to it becomes the trigger's message shown in the
/// editor, checked as the draft's trigger would check it. No run starts.
pub(crate) async fn test_hook(
    State(s): State<AppState>,
    Path((workflow, path)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = path.trim_matches('/').to_string();
    let nobody = || {
        ApiError::not_found(format!(
            "nobody is listening for a test call to {method} /hook-test/{workflow}/{path}: \
             press \"Listen for a test call\" on the webhook in the editor first"
        ))
    };
    let plan = match s.engine.draft(&workflow).await {
        Ok(plan) => plan,
        Err(sluice_runtime::executor::Error::Store(e)) => return Err(e.into()),
        Err(_) => return Err(nobody()),
    };
    let (trigger, config) = find_trigger(&plan, &method, &path).ok_or_else(nobody)?;
    check_signature(&s, config, &method, &uri, &headers, &body)?;
    let message = message(config, &method, &path, &query, &headers, &body)?;
    if !s.listeners.deliver(&workflow, trigger, message) {
        return Err(nobody());
    }
    Ok(Json(json!({"received": true, "node": trigger, "test": true})).into_response())
}

/// Checks the signature a trigger with a secret demands.
fn check_signature(
    s: &AppState,
    config: &WebhookTrigger,
    method: &Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(), ApiError> {
    verify(config, method, uri, headers, body, &s.replays)
}

/// Checks the signature a trigger with a secret demands, refusing a
/// signature seen before in `replays` (the trigger port's, or the shared
/// worker's hook port's).
pub fn verify(
    config: &WebhookTrigger,
    method: &Method,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &Bytes,
    replays: &Replays,
) -> Result<(), ApiError> {
    let Some(secret) = &config.secret else {
        return Ok(());
    };
    if config.signature == SignatureScheme::V0 {
        return check_signature_v0(secret, headers, body);
    }
    let signed = Signed {
        method: method.as_str(),
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        content_type: headers
            .get(header::CONTENT_TYPE)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default(),
        body,
    };
    check_signature_v1(secret, headers, &signed, replays, now_secs())
}

/// The trigger's message for a request: method, path, query, the headers
/// it keeps, and the body parsed by its type.
pub fn message(
    config: &WebhookTrigger,
    method: &Method,
    path: &str,
    query: &BTreeMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let keep: Vec<String> = config
        .keep_headers
        .iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    let body = parse_body(
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
        body,
    )?;
    // Built in place: `json!` would serialize each part (the headers and
    // the parsed body included) into a copy of itself.
    let query = query
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let mut message = Map::with_capacity(5);
    message.insert("method".into(), Value::String(method.as_str().into()));
    message.insert("path".into(), Value::String(path.into()));
    message.insert("query".into(), Value::Object(query));
    message.insert("headers".into(), header_map(headers, &keep));
    message.insert("body".into(), body);
    Ok(Value::Object(message))
}

/// Header carrying `sha256=<hex hmac of the body>` for triggers with a secret.
pub const SIGNATURE_HEADER: &str = "x-sluice-signature";

#[utoipa::path(post, path = "/hook/{workflow}/{path}", tag = "webhooks",
    params(("workflow" = String, Path, description = "Workflow id"), ("path" = String, Path, description = "The trigger's `path`")),
    request_body(content = Object, description = "Any body: JSON, form, text or bytes; it becomes `body` of the message"),
    responses((status = 200, description = "`when_finished`: the run output, or the first `output.respond`"),
        (status = 202, description = "`immediately`, or still running after 30 s: `{run_id}`"),
        (status = 401, description = "Missing or wrong `X-Sluice-Signature`"), (status = 404, description = "No such webhook"),
        (status = 413, description = "Body too large"), (status = 429, description = "Too many runs in progress"),
        (status = 500, description = "The run failed: the error names the node"),
        (status = 503, description = "The data dir cannot be written (read-only, I/O error): new runs are refused until it can"),
        (status = 507, description = "The data dir's disk is full: new runs are refused until there is space")),
    security(()))]
pub(crate) async fn hook(
    State(s): State<AppState>,
    Path((workflow, path)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = path.trim_matches('/').to_string();
    // One answer for an unknown workflow, an invalid one, or no such trigger:
    // callers without a token learn nothing about what exists.
    let no_hook =
        || ApiError::not_found(format!("no webhook for {method} /hook/{workflow}/{path}"));
    let plan = match s.engine.workflow(&workflow).await {
        Ok(plan) => plan,
        Err(sluice_runtime::executor::Error::Store(e)) => return Err(e.into()),
        Err(_) => return Err(no_hook()),
    };
    let (trigger, config) = find_trigger(&plan, &method, &path).ok_or_else(no_hook)?;
    check_signature(&s, config, &method, &uri, &headers, &body)?;
    let message = message(config, &method, &path, &query, &headers, &body)?;
    let immediately = config.respond == Respond::Immediately;
    let trigger = trigger.to_string();
    // `immediately` acknowledges the run: it must be on disk first.
    // `when_finished` answers after the run's finish, which commits it.
    let input = Arc::new(message);
    // A workflow that cannot start (a credential it names is missing) is the
    // owner's problem, not the caller's: 500, like a failed run, and the
    // reason stays with the owner (the server's log).
    let cannot_start = |e: sluice_runtime::executor::Error| match e {
        sluice_runtime::executor::Error::Invalid(_) => {
            eprintln!("sluice: webhook {workflow}/{path}: the workflow cannot start: {e}");
            ApiError::internal("the workflow cannot start")
        }
        other => other.into(),
    };
    if immediately {
        // A workflow of pure steps only (`Plan::in_one_go`) runs to its end
        // here, in microseconds, and is recorded in one write, finished,
        // before the answer: one commit instead of the creation's and then
        // the finish's. Any other run is answered once its creation is
        // committed, and goes on on its own.
        let handle = if plan.in_one_go {
            s.engine.start_for_result(plan, Some(&trigger), input).await
        } else {
            s.engine.start(plan, Some(&trigger), input).await
        }
        .map_err(cannot_start)?;
        return Ok(accepted(&handle.id));
    }
    let handle = s
        .engine
        .start_for_result(plan, Some(&trigger), input)
        .await
        .map_err(cannot_start)?;
    let run_id = handle.id.clone();
    let Ok(result) = tokio::time::timeout(s.options.webhook_timeout, handle.wait()).await else {
        // Still running: the caller gets the id to follow it, so the run
        // must be on disk first (its creation was only queued).
        s.engine.store().journal().flush().await?;
        return Ok(accepted(&run_id));
    };
    if result.status == Status::Waiting {
        // Parked at an approval (committed): the id, to follow it.
        return Ok(accepted(&run_id));
    }
    // A run that failed because the data dir could not take its values
    // (a blob the disk had no room for) is the engine's storage failing,
    // not the workflow: the caller gets what a refused run gets.
    if result.status == Status::Failed
        && let Some(f) = s.engine.store().write_failure()
    {
        let e = sluice_runtime::executor::Error::Storage {
            reason: f.reason,
            full: f.full,
        };
        let mut resp = ApiError::from(e).into_response();
        set_run_id(&mut resp, &run_id);
        return Ok(resp);
    }
    Ok(answer(
        &run_id,
        result.status,
        result.output,
        result.respond,
    ))
}

/// A `when_finished` webhook's answer for a run that ended: its first
/// `output.respond`, else its output; a failed run is a 500 naming only the
/// run (a step's error can tell what exists on this machine: a file's path,
/// a host's name; the run holds it for the owner).
pub fn answer(
    run_id: &str,
    status: Status,
    output: Value,
    respond_with: Option<Arc<Value>>,
) -> Response {
    if status != Status::Succeeded {
        let mut resp = ApiError::internal(format!("run {run_id} {}", status.as_str()))
            .with_detail(json!({"run_id": run_id}))
            .into_response();
        set_run_id(&mut resp, run_id);
        return resp;
    }
    match respond_with {
        Some(r) => respond(&r, run_id),
        None => {
            let mut resp = Json(output).into_response();
            set_run_id(&mut resp, run_id);
            resp
        }
    }
}

/// The webhook trigger of `plan` for this method and path: its id and config.
pub fn find_trigger<'a>(
    plan: &'a Plan,
    method: &Method,
    path: &str,
) -> Option<(&'a str, &'a WebhookTrigger)> {
    plan.nodes.iter().find_map(|n| match &n.trigger {
        Some(Trigger::Webhook(c)) if !n.disabled => {
            (c.method.as_str().eq_ignore_ascii_case(method.as_str())
                && c.path.trim_matches('/') == path)
                .then_some((&*n.id, c))
        }
        _ => None,
    })
}

/// What a v1 signature covers, besides its timestamp.
pub struct Signed<'a> {
    pub method: &'a str,
    /// The request path as sent (`/hook/{workflow}/{path}`).
    pub path: &'a str,
    /// The raw query string, without `?` (empty when none).
    pub query: &'a str,
    pub content_type: &'a [u8],
    pub body: &'a [u8],
}

/// How far a v1 signature's timestamp may be from the server's clock.
pub const SIGNATURE_WINDOW_SECS: u64 = 300;

/// The v1 signature of a request at `t`: hex HMAC-SHA256 over
/// `v1\n{t}\n{METHOD}\n{path}\n{query}\n{content type}\n{body}`.
pub fn sign_v1(secret: &str, t: u64, r: &Signed<'_>) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes any key length");
    mac.update(format!("v1\n{t}\n{}\n{}\n{}\n", r.method, r.path, r.query).as_bytes());
    mac.update(r.content_type);
    mac.update(b"\n");
    mac.update(r.body);
    hex::encode(mac.finalize().into_bytes())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

type Seen = (
    std::collections::HashSet<[u8; 32]>,
    std::collections::VecDeque<(u64, [u8; 32])>,
);

/// Signatures seen within the window: a captured request cannot be sent
/// again. Bounded: past the bound, the oldest are forgotten (they are the
/// nearest to leaving the window anyway).
#[derive(Default)]
pub struct Replays {
    seen: std::sync::Mutex<Seen>,
}

impl Replays {
    const MAX: usize = 1 << 20;

    /// True the first time `sig` (at `t`) is seen within the window.
    fn first_use(&self, sig: &[u8], t: u64, now: u64) -> bool {
        let key = key_of(sig);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (set, order) = &mut *seen;
        while let Some(&(at, old)) = order.front() {
            if at + SIGNATURE_WINDOW_SECS < now || order.len() >= Self::MAX {
                order.pop_front();
                set.remove(&old);
            } else {
                break;
            }
        }
        if !set.insert(key) {
            return false;
        }
        order.push_back((t, key));
        true
    }
}

/// A fixed-size key for a signature (SHA-256 of its bytes).
fn key_of(sig: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(sig).into()
}

fn check_signature_v1(
    secret: &str,
    headers: &HeaderMap,
    signed: &Signed<'_>,
    replays: &Replays,
    now: u64,
) -> Result<(), ApiError> {
    let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m.to_string());
    let given = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            unauthorized("missing X-Sluice-Signature: t=<unix seconds>,v1=<hex hmac>")
        })?;
    let mut t = None;
    let mut v1 = None;
    for part in given.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.trim().parse::<u64>().ok(),
            Some(("v1", v)) => v1 = Some(v.trim()),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return Err(unauthorized(
            "X-Sluice-Signature must be `t=<unix seconds>,v1=<hex hmac>`",
        ));
    };
    if t.abs_diff(now) > SIGNATURE_WINDOW_SECS {
        return Err(unauthorized(
            "X-Sluice-Signature's timestamp is more than 5 minutes from the server's clock",
        ));
    }
    let expected = sign_v1(secret, t, signed);
    if !crate::security::same(expected.as_bytes(), v1.to_ascii_lowercase().as_bytes()) {
        return Err(unauthorized(
            "X-Sluice-Signature does not match the request",
        ));
    }
    if !replays.first_use(expected.as_bytes(), t, now) {
        return Err(unauthorized("X-Sluice-Signature was used already"));
    }
    Ok(())
}

/// The weaker v0 form (`signature: "v0"`): an HMAC of the body alone.
fn check_signature_v0(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m.to_string());
    let given = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| unauthorized("missing X-Sluice-Signature: sha256=<hex hmac of the body>"))?;
    let hex_sig = given
        .strip_prefix("sha256=")
        .ok_or_else(|| unauthorized("X-Sluice-Signature must start with `sha256=`"))?;
    let sig =
        hex::decode(hex_sig.trim()).map_err(|_| unauthorized("X-Sluice-Signature is not hex"))?;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
        .map_err(|e| ApiError::internal(format!("hmac: {e}")))?;
    mac.update(body);
    mac.verify_slice(&sig)
        .map_err(|_| unauthorized("X-Sluice-Signature does not match the body"))
}

/// Headers that carry a caller's credentials: stored masked unless the
/// trigger keeps them (`keep_headers`).
const SENSITIVE: [&str; 5] = [
    "authorization",
    "cookie",
    "proxy-authorization",
    "x-api-key",
    SIGNATURE_HEADER,
];

/// Request headers as a JSON object (lower-case names; repeated headers
/// joined by ", "), credentials masked as `***` unless in `keep`.
fn header_map(headers: &HeaderMap, keep: &[String]) -> Value {
    let mut out = Map::new();
    for (name, value) in headers {
        let masked = SENSITIVE.contains(&name.as_str()) && !keep.iter().any(|k| k == name.as_str());
        let v = if masked {
            "***".to_string()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        match out.get_mut(name.as_str()) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(&v);
            }
            _ => {
                out.insert(name.as_str().to_string(), Value::String(v));
            }
        }
    }
    Value::Object(out)
}

/// The body by content type: JSON, form fields, text, or `{"base64"}` bytes.
/// It is always under `body`: a request can never set other fields of the message.
/// `content_type` is the request's header (empty when it had none).
pub fn parse_body(content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || mime.ends_with("+json") {
        return parse_json(body);
    }
    if mime == "application/x-www-form-urlencoded" {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|e| ApiError::bad_request(format!("invalid form body: {e}")))?;
        let mut out = Map::new();
        for (k, v) in pairs {
            out.insert(k, Value::String(v));
        }
        return Ok(Value::Object(out));
    }
    if (mime.starts_with("text/") || mime.is_empty())
        && let Ok(text) = std::str::from_utf8(body)
    {
        return Ok(Value::String(text.to_string()));
    }
    Ok(json!({"base64": base64::engine::general_purpose::STANDARD.encode(body)}))
}

/// An `output.respond` value as the HTTP response.
pub fn respond(r: &Value, run_id: &str) -> Response {
    let status = r["status"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    let mut resp = match &r["body"] {
        Value::String(s) => (status, s.clone()).into_response(),
        Value::Null => status.into_response(),
        // Serialized from the run's value, not from a copy of it (`Json`).
        other => match serde_json::to_vec(other) {
            Ok(json) => (
                status,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                json,
            )
                .into_response(),
            Err(e) => ApiError::internal(format!("the response body: {e}")).into_response(),
        },
    };
    if let Some(h) = r["headers"].as_object() {
        for (k, v) in h {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(k.as_str()), HeaderValue::try_from(v))
            {
                resp.headers_mut().insert(name, value);
            }
        }
    }
    set_run_id(&mut resp, run_id);
    resp
}

/// `202 {"run_id"}`: the run started (or still runs).
pub fn accepted(run_id: &str) -> Response {
    let mut resp = (StatusCode::ACCEPTED, Json(json!({"run_id": run_id}))).into_response();
    set_run_id(&mut resp, run_id);
    resp
}

/// Names the run in `X-Sluice-Run`.
pub fn set_run_id(resp: &mut Response, run_id: &str) {
    if let Ok(v) = HeaderValue::try_from(run_id) {
        resp.headers_mut().insert("x-sluice-run", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names lower-case, a repeated header joined in order, credentials
    /// masked unless kept.
    #[test]
    fn header_map_joins_repeats_and_masks_credentials() {
        let mut h = HeaderMap::new();
        h.append("X-Tag", HeaderValue::from_static("a"));
        h.append("x-tag", HeaderValue::from_static("b"));
        h.append("x-tag", HeaderValue::from_static("c"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret"),
        );
        h.insert("x-api-key", HeaderValue::from_static("k"));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let got = header_map(&h, &["x-api-key".to_string()]);
        assert_eq!(
            got,
            json!({"x-tag": "a, b, c", "authorization": "***", "x-api-key": "k",
                   "content-type": "application/json"})
        );
    }
}
