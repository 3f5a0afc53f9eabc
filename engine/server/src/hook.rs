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
use sluice_runtime::{Plan, Status};

use crate::error::parse_json;
use crate::{ApiError, AppState};

pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/hook/{workflow}/{*path}", any(hook))
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
        (status = 500, description = "The run failed: the error names the node")),
    security(()))]
pub(crate) async fn hook(
    State(s): State<AppState>,
    Path((workflow, path)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    method: Method,
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
    if let Some(secret) = config.get("secret").and_then(Value::as_str) {
        check_signature(secret, &headers, &body)?;
    }
    let message = json!({
        "method": method.as_str(),
        "path": path,
        "query": query,
        "headers": header_map(&headers),
        "body": parse_body(&headers, &body)?,
    });
    // `immediately` acknowledges the run: it must be on disk first.
    // `when_finished` answers after the run's finish, which commits it.
    let input = Arc::new(message);
    // A workflow that cannot start (a credential it names is missing) is the
    // owner's problem, not the caller's: 500, like a failed run.
    let cannot_start = |e: sluice_runtime::executor::Error| match e {
        sluice_runtime::executor::Error::Invalid(_) => {
            ApiError::internal(format!("the workflow cannot start: {e}"))
        }
        other => other.into(),
    };
    if config.get("respond").and_then(Value::as_str) == Some("immediately") {
        let handle = s
            .engine
            .start(plan, Some(&trigger), input)
            .await
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
    if result.status != Status::Succeeded {
        let mut resp = ApiError::internal(format!(
            "run {} {}{}: {}",
            result.id,
            result.status.as_str(),
            result
                .error
                .as_ref()
                .and_then(|e| e["node"].as_str())
                .map(|n| format!(" at node `{n}`"))
                .unwrap_or_default(),
            result
                .error
                .as_ref()
                .and_then(|e| e["message"].as_str())
                .unwrap_or("no message"),
        ))
        .with_detail(json!({"run_id": result.id, "error": result.error}))
        .into_response();
        set_run_id(&mut resp, &run_id);
        return Ok(resp);
    }
    Ok(match result.respond {
        Some(r) => respond(&r, &run_id),
        None => {
            let mut resp = Json(result.output).into_response();
            set_run_id(&mut resp, &run_id);
            resp
        }
    })
}

/// The webhook trigger of `plan` for this method and path: its id and config.
fn find_trigger(plan: &Plan, method: &Method, path: &str) -> Option<(String, Value)> {
    plan.nodes.iter().find_map(|n| {
        if n.kind != "trigger.webhook" || n.disabled {
            return None;
        }
        let c = &n.raw_config;
        let m = c.get("method").and_then(Value::as_str).unwrap_or("POST");
        let p = c
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim_matches('/');
        (m.eq_ignore_ascii_case(method.as_str()) && p == path)
            .then(|| (n.id.to_string(), c.clone()))
    })
}

fn check_signature(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
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

/// Request headers as a JSON object (lower-case names; repeated headers joined by ", ").
fn header_map(headers: &HeaderMap) -> Value {
    let mut out = Map::new();
    for (name, value) in headers {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
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
fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct
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
fn respond(r: &Value, run_id: &str) -> Response {
    let status = r["status"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(s as u16).ok())
        .unwrap_or(StatusCode::OK);
    let mut resp = match &r["body"] {
        Value::String(s) => (status, s.clone()).into_response(),
        Value::Null => status.into_response(),
        other => (status, Json(other.clone())).into_response(),
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

fn accepted(run_id: &str) -> Response {
    let mut resp = (StatusCode::ACCEPTED, Json(json!({"run_id": run_id}))).into_response();
    set_run_id(&mut resp, run_id);
    resp
}

fn set_run_id(resp: &mut Response, run_id: &str) {
    if let Ok(v) = HeaderValue::try_from(run_id) {
        resp.headers_mut().insert("x-sluice-run", v);
    }
}
