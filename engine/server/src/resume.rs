//! Deciding approvals (`flow.approval`): the one-time resume link
//! `/hook/resume/{token}` (no API token: the link is the credential) and
//! `POST /api/v1/runs/{id}/signal`.
//!
//! A link's GET shows what is asked with Approve and Reject buttons and
//! decides nothing (mail scanners and link previews fetch links); its POST
//! decides. The request body becomes the approval's output; the decision
//! is `?decision=`, else the body's `decision` field, else `approved`.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::Value;
use sluice_api::{Decision, Signalled};
use sluice_runtime::executor::{Error as EngineError, Signal};

use crate::error::parse_json;
use crate::hook::parse_body;
use crate::{ApiError, AppState};

/// The decision a signal asks for: `?decision=`, else the body's
/// `decision` field, else approved.
fn decision(query: &BTreeMap<String, String>, body: &Value) -> Result<Decision, ApiError> {
    if let Some(d) = query.get("decision") {
        return Decision::parse(d).ok_or_else(|| {
            ApiError::bad_request(format!("decision `{d}`: expected approved or rejected"))
        });
    }
    // Absent: approved. Present, it must say which: a typo must not approve.
    match body.get("decision") {
        None | Some(Value::Null) => Ok(Decision::Approved),
        Some(d) => d.as_str().and_then(Decision::parse).ok_or_else(|| {
            ApiError::bad_request(format!(
                "body.decision `{d}`: expected \"approved\" or \"rejected\""
            ))
        }),
    }
}

/// What a link names, or the one answer for every token this data dir did
/// not make (a caller learns nothing about which runs exist).
fn read_token(s: &AppState, token: &str) -> Result<(String, String, String), ApiError> {
    s.engine.read_resume_token(token).ok_or_else(|| {
        let shown: String = token.chars().take(80).collect();
        ApiError::not_found(format!("no such resume link: `{shown}`"))
    })
}

/// Why a link decides nothing now: 410 once its approval was decided or
/// its run ended; 409 while the run has not reached the approval yet (a
/// link sent by an earlier step, opened early).
async fn not_waiting(s: &AppState, run: &str, node: &str, lineage: &str) -> ApiError {
    let gone = || {
        ApiError::new(
            StatusCode::GONE,
            "this link was used already: its approval was decided (or its run ended)",
        )
    };
    let Ok(Some(row)) = s.engine.store().get_run(run).await else {
        return gone();
    };
    if row.status.is_finished() {
        return gone();
    }
    let decided = s
        .engine
        .store()
        .run_records(run)
        .await
        .is_ok_and(|records| {
            records.iter().any(|r| {
                &*r.node == node
                    && r.lineage == lineage
                    && matches!(
                        r.kind,
                        sluice_store::RecordKind::Succeeded | sluice_store::RecordKind::Failed
                    )
            })
        });
    if decided {
        return gone();
    }
    ApiError::new(
        StatusCode::CONFLICT,
        "this approval is not waiting yet: its run has not reached it; open the link again later",
    )
}

#[utoipa::path(get, path = "/hook/resume/{token}", tag = "runs",
    params(("token" = String, Path, description = "The token of a resume link (`run.resume.<node>`, `waiting[].resume_url`)")),
    responses((status = 200, description = "A page showing what is asked, with Approve and Reject; decides nothing"),
        (status = 404, description = "No such link"), (status = 410, description = "Decided already, or the run ended")),
    security(()))]
pub(crate) async fn resume_page(
    State(s): State<AppState>,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let (run, node, lineage) = read_token(&s, &token)?;
    let waits = s.engine.store().open_waits(&run).await?;
    let Some(wait) = waits
        .iter()
        .find(|w| *w.key.node == *node && *w.key.lineage == *lineage)
    else {
        return Err(not_waiting(&s, &run, &node, &lineage).await);
    };
    let message = wait
        .message
        .as_deref()
        .unwrap_or("A workflow waits for your decision.");
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>Approval: {node}</title>\
         <style>body{{font:16px system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem;color:#1b1f24}}\
         p.meta{{color:#57606a;font-size:14px}}textarea{{width:100%;min-height:5rem;font:inherit}}\
         button{{font:inherit;padding:.5rem 1.25rem;margin:.75rem .5rem 0 0;border-radius:6px;border:1px solid #8c959f;cursor:pointer}}\
         button.approve{{background:#1f883d;color:#fff;border-color:#1a7f37}}button.reject{{background:#fff;color:#cf222e}}</style>\
         </head><body><h1>Approval</h1><p>{message}</p>\
         <p class=\"meta\">Run <code>{run}</code>, step <code>{node}</code>. This link works once.</p>\
         <form method=\"post\"><label for=\"comment\">Comment (optional)</label>\
         <textarea id=\"comment\" name=\"comment\"></textarea>\
         <button class=\"approve\" name=\"decision\" value=\"approved\">Approve</button>\
         <button class=\"reject\" name=\"decision\" value=\"rejected\">Reject</button></form></body></html>",
        node = escape(&node),
        message = escape(message),
        run = escape(&run),
    );
    let mut resp = Html(page).into_response();
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    Ok(resp)
}

#[utoipa::path(post, path = "/hook/resume/{token}", tag = "runs",
    params(("token" = String, Path, description = "The token of a resume link"),
        ("decision" = Option<String>, Query, description = "approved (default) or rejected; else the body's `decision`")),
    request_body(content = Object, description = "Any body (JSON, form, text): the approval's output"),
    responses((status = 200, description = "Decided", body = Signalled),
        (status = 404, description = "No such link"), (status = 410, description = "Used already, or the run ended")),
    security(()))]
pub(crate) async fn resume(
    State(s): State<AppState>,
    Path(token): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (run, node, lineage) = read_token(&s, &token)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let form = content_type.starts_with("application/x-www-form-urlencoded");
    let body = parse_body(content_type, &body)?;
    let decided = decision(&query, &body)?;
    let signal = Signal {
        node: Some(node.clone()),
        lineage: Some(lineage.clone()),
        activation: None,
        ..Signal::decide(None, decided, body)
    };
    let done = match s.engine.signal(&run, signal).await {
        Ok(done) => done,
        Err(EngineError::NotWaiting { .. } | EngineError::RunNotFound(_)) => {
            return Err(not_waiting(&s, &run, &node, &lineage).await);
        }
        Err(e) => return Err(e.into()),
    };
    if form {
        // The page's own buttons: a page back.
        let word = match done.decision {
            Decision::Approved => "approved",
            Decision::Rejected => "rejected",
        };
        return Ok(Html(format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Decided</title></head>\
             <body style=\"font:16px system-ui,sans-serif;max-width:36rem;margin:3rem auto\">\
             <h1>Thank you</h1><p>You {word} step <code>{}</code> of run <code>{}</code>.</p></body></html>",
            escape(&done.node),
            escape(&done.run_id)
        ))
        .into_response());
    }
    Ok(Json(done).into_response())
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct SignalQuery {
    node: Option<String>,
    lineage: Option<String>,
    activation: Option<String>,
    decision: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/runs/{id}/signal", tag = "runs",
    params(("id" = String, Path, description = "Run id"),
        ("node" = Option<String>, Query, description = "The approval's node (needed when several wait)"),
        ("lineage" = Option<String>, Query, description = "Its split lineage (\"\" outside splits)"),
        ("decision" = Option<String>, Query, description = "approved (default) or rejected; else the body's `decision`")),
    request_body(content = Object, description = "JSON: the approval's output"),
    responses((status = 200, description = "Decided (committed)", body = Signalled),
        (status = 404, description = "No such run"),
        (status = 409, description = "It waits for no such decision (ended, decided already, or waits at several nodes: name one)")))]
pub(crate) async fn signal_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<SignalQuery>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Result<Json<Signalled>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let body = parse_json(&body)?;
    let query: BTreeMap<String, String> = q
        .decision
        .map(|d| ("decision".to_string(), d))
        .into_iter()
        .collect();
    let decided = decision(&query, &body)?;
    let signal = Signal {
        node: q.node,
        lineage: q.lineage,
        activation: q.activation,
        ..Signal::decide(None, decided, body)
    };
    Ok(Json(s.engine.signal(&id, signal).await?))
}

/// Text made safe inside HTML.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
