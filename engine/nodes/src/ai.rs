//! `ai.chat`: one chat completion against an OpenAI-compatible server
//! (OpenAI, Ollama, llama.cpp's server, vLLM), streamed: each piece of the
//! reply goes to the run's live log as it comes (`Host::log_live`), and the
//! whole reply is one log line when the step ends.
//!
//! The wire: `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`; the answer is server-sent events, each
//! `data:` a `chat.completion.chunk` (`choices[0].delta.content`), the usage
//! in the last one, then `data: [DONE]`. A server that answers one JSON
//! completion instead is read as such. 408, 429 and 5xx answers (and a
//! stream cut short) are tried again here, waiting what `Retry-After` asks
//! (or a growing backoff), a few times within a bound; other 4xx are final.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url};
use serde_json::{Map, Value, json};
use sluice_model::kinds::AiChatConfig;

use crate::{Call, Error, Outputs, Result, config, out};

const KIND: &str = "ai.chat";

/// Requests per step, the first included.
const ATTEMPTS: u32 = 4;
/// The longest wait between two requests; a server asking for more is
/// left to the node's own retry policy (the error is retryable).
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Default time for one request, streaming included.
const TIMEOUT_MS: u64 = 300_000;
/// The most a reply may hold (its events, all of them).
const MAX_REPLY_BYTES: usize = 8 << 20;
/// The longest line of the event stream.
const MAX_LINE_BYTES: usize = 1 << 20;

pub async fn chat(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<AiChatConfig>(call)?;
    let name = cfg.credential.as_str();
    let cred = call.host.credential(name).await?;
    if cred.kind != "openai" {
        return Err(Error::terminal(format!(
            "{KIND}: credential `{name}` is a `{}` credential; ai.chat needs an `openai` one",
            cred.kind
        )));
    }
    let base = cred.value["base_url"].as_str().unwrap_or_default().trim();
    let url_text = format!("{}/chat/completions", base.trim_end_matches('/'));
    let url = Url::parse(&url_text).map_err(|e| {
        Error::terminal(format!(
            "{KIND}: credential `{name}`: base_url `{base}` is not a URL: {e}"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::terminal(format!(
            "{KIND}: credential `{name}`: base_url must be http or https"
        )));
    }
    let (client, policy) = call.io.http_client_and_policy()?;
    policy
        .check_url(&url)
        .map_err(|r| Error::terminal(format!("{KIND}: {r}")))?;
    let mut headers = HeaderMap::new();
    if let Some(key) = cred.value["api_key"].as_str().filter(|k| !k.is_empty()) {
        let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            Error::terminal(format!(
                "{KIND}: credential `{name}`: api_key has characters a header cannot carry"
            ))
        })?;
        v.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, v);
    }
    let request = request_body(&cfg)?;
    let timeout = Duration::from_millis(cfg.timeout_ms.unwrap_or(TIMEOUT_MS));
    let reply = with_retries(call, || async {
        let send = client
            .post(url.clone())
            .headers(headers.clone())
            .json(&request)
            .send();
        match tokio::time::timeout(timeout, exchange(call, send)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Retry(
                format!(
                    "{KIND}: no complete answer within {} ms",
                    timeout.as_millis()
                ),
                None,
            )),
        }
    })
    .await?;
    if let Some(u) = &reply.usage {
        call.host.ai_usage(&cfg.model, u.input, u.output);
    }
    if !reply.text.is_empty() {
        call.host.log("info", &reply.text);
    }
    let mut output = Map::new();
    output.insert("text".into(), Value::String(reply.text.clone()));
    if let Some(schema) = &cfg.schema {
        output.insert("value".into(), structured(&reply.text, schema)?);
    }
    output.insert(
        "model".into(),
        Value::String(reply.model.unwrap_or_else(|| cfg.model.clone())),
    );
    output.insert(
        "finish_reason".into(),
        reply.finish_reason.map_or(Value::Null, Value::String),
    );
    output.insert(
        "usage".into(),
        reply.usage.map_or(Value::Null, |u| {
            json!({"input_tokens": u.input, "output_tokens": u.output, "total_tokens": u.input + u.output})
        }),
    );
    out(Arc::new(Value::Object(output)))
}

/// The request: the messages, the model's settings, and the schema the
/// reply must match.
fn request_body(cfg: &AiChatConfig) -> Result<Value> {
    let mut messages = Vec::new();
    if let Some(system) = cfg.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    match &cfg.messages {
        None | Some(Value::Null) => {}
        Some(Value::Array(turns)) => {
            for (i, turn) in turns.iter().enumerate() {
                sluice_model::kinds::check_turn(turn)
                    .map_err(|m| Error::terminal(format!("{KIND}: config.messages[{i}]: {m}")))?;
                messages.push(turn.clone());
            }
        }
        Some(other) => {
            return Err(Error::terminal(format!(
                "{KIND}: config.messages: an array of {{role, content}}, not {}",
                crate::type_name(other)
            )));
        }
    }
    messages.push(json!({"role": "user", "content": cfg.user}));
    let mut body = json!({
        "model": cfg.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(t) = cfg.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = cfg.max_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(schema) = &cfg.schema {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": true},
        });
    }
    Ok(body)
}

/// The reply parsed as JSON and checked against the schema.
fn structured(text: &str, schema: &Value) -> Result<Value> {
    // Some models wrap JSON in a Markdown fence despite being asked not to.
    let trimmed = text.trim();
    let inner = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|t| t.strip_suffix("```"))
        .unwrap_or(trimmed);
    let value: Value = serde_json::from_str(inner).map_err(|e| {
        Error::terminal(format!(
            "{KIND}: the reply is not the JSON config.schema asks for ({e}): {}",
            preview(text)
        ))
    })?;
    crate::schema::check(schema, &value).map_err(|e| {
        Error::terminal(format!(
            "{KIND}: the reply does not match config.schema: {e}"
        ))
    })?;
    Ok(value)
}

fn preview(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// Tokens a reply used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Usage {
    input: u64,
    output: u64,
}

/// A whole reply.
#[derive(Debug, Default)]
struct Reply {
    text: String,
    model: Option<String>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

/// Why a request did not give a reply.
enum Failure {
    /// Worth another request: the message, and how long the server asked
    /// to wait (`Retry-After`).
    Retry(String, Option<Duration>),
    /// Final.
    Stop(Error),
}

/// Sends, and again while it fails in a way another request may not.
async fn with_retries<F, Fut>(call: &Call<'_>, mut send: F) -> Result<Reply>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<Reply, Failure>>,
{
    let mut attempt = 1;
    loop {
        let (message, asked) = match send().await {
            Ok(reply) => return Ok(reply),
            Err(Failure::Stop(e)) => return Err(e),
            Err(Failure::Retry(message, asked)) => (message, asked),
        };
        let wait = asked.unwrap_or(Duration::from_millis(500 << (attempt - 1)));
        if attempt >= ATTEMPTS {
            return Err(Error::retryable(format!(
                "{message} (after {ATTEMPTS} requests)"
            )));
        }
        if wait > MAX_WAIT {
            return Err(Error::retryable(format!(
                "{message}; the server asks to wait {} s, more than {} s",
                wait.as_secs(),
                MAX_WAIT.as_secs()
            )));
        }
        let line = format!(
            "{message}; trying again in {} (request {} of {ATTEMPTS})",
            seconds(wait),
            attempt + 1
        );
        call.host.log("warn", &line);
        call.host.log_live("warn", &format!("\n[{line}]\n"));
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// One request and its answer.
async fn exchange(
    call: &Call<'_>,
    send: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
) -> std::result::Result<Reply, Failure> {
    let mut resp = send.await.map_err(|e| match send_error(&e) {
        e if e.retryable => Failure::Retry(e.message, None),
        e => Failure::Stop(e),
    })?;
    let status = resp.status();
    if !status.is_success() {
        let asked = retry_after(resp.headers(), std::time::SystemTime::now());
        let body = read_capped(&mut resp, 64 << 10).await.unwrap_or_default();
        let (message, code) = server_error(&body);
        let what = format!(
            "{KIND}: the server answered {status}{}",
            message.map(|m| format!(": {m}")).unwrap_or_default()
        );
        let again = matches!(
            status,
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS
        ) || status.is_server_error();
        return Err(if again && code.as_deref() != Some("insufficient_quota") {
            Failure::Retry(what, asked)
        } else {
            Failure::Stop(Error::terminal(what))
        });
    }
    let streamed = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if !streamed {
        let body = read_capped(&mut resp, MAX_REPLY_BYTES)
            .await
            .map_err(|e| Failure::Retry(e, None))?;
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            Failure::Stop(Error::terminal(format!(
                "{KIND}: the server's answer is not a chat completion ({e})"
            )))
        })?;
        return completion(&v).map_err(Failure::Stop);
    }
    let mut events = Sse::default();
    let mut reply = Reply::default();
    let mut done = false;
    let mut read = 0usize;
    let mut data = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Failure::Retry(send_error(&e).message, None))?
    {
        read += chunk.len();
        if read > MAX_REPLY_BYTES {
            return Err(Failure::Stop(Error::terminal(format!(
                "{KIND}: the reply passed {} MiB",
                MAX_REPLY_BYTES >> 20
            ))));
        }
        events.push(&chunk, &mut data).map_err(Failure::Stop)?;
        for payload in data.drain(..) {
            if payload.trim() == "[DONE]" {
                done = true;
                continue;
            }
            let piece = apply_chunk(&mut reply, &payload).map_err(Failure::Stop)?;
            if !piece.is_empty() {
                call.host.log_live("info", &piece);
            }
        }
    }
    if !done && reply.finish_reason.is_none() {
        return Err(Failure::Retry(
            format!("{KIND}: the stream ended before the reply did"),
            None,
        ));
    }
    Ok(reply)
}

/// A streamed chunk into the reply; returns the text it added.
fn apply_chunk(reply: &mut Reply, payload: &str) -> Result<String> {
    let v: Value = serde_json::from_str(payload).map_err(|e| {
        Error::terminal(format!(
            "{KIND}: an event of the stream is not JSON ({e}): {}",
            preview(payload)
        ))
    })?;
    if let Some(err) = v.get("error") {
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| err.as_str())
            .unwrap_or("no message");
        return Err(Error::retryable(format!(
            "{KIND}: the server failed mid-reply: {message}"
        )));
    }
    if let Some(m) = v.get("model").and_then(Value::as_str) {
        reply.model.get_or_insert_with(|| m.to_string());
    }
    if let Some(u) = usage(&v["usage"]) {
        reply.usage = Some(u);
    }
    let choice = &v["choices"][0];
    if let Some(reason) = choice["finish_reason"].as_str() {
        reply.finish_reason = Some(reason.to_string());
    }
    let piece = choice["delta"]["content"].as_str().unwrap_or_default();
    reply.text.push_str(piece);
    Ok(piece.to_string())
}

/// A whole (not streamed) completion.
fn completion(v: &Value) -> Result<Reply> {
    let choice = &v["choices"][0];
    let text = choice["message"]["content"].as_str().ok_or_else(|| {
        Error::terminal(format!(
            "{KIND}: the server's answer has no `choices[0].message.content`"
        ))
    })?;
    Ok(Reply {
        text: text.to_string(),
        model: v["model"].as_str().map(str::to_string),
        finish_reason: choice["finish_reason"].as_str().map(str::to_string),
        usage: usage(&v["usage"]),
    })
}

fn usage(u: &Value) -> Option<Usage> {
    Some(Usage {
        input: u.get("prompt_tokens")?.as_u64()?,
        output: u.get("completion_tokens")?.as_u64()?,
    })
}

/// The message and code of an error answer: OpenAI's and vLLM's
/// `{"error": {"message", "code"}}`, Ollama's `{"error": "…"}`.
fn server_error(body: &[u8]) -> (Option<String>, Option<String>) {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        return ((!text.is_empty()).then(|| preview(text)), None);
    };
    let err = &v["error"];
    let message = err["message"]
        .as_str()
        .or_else(|| err.as_str())
        .map(preview);
    let code = err["code"]
        .as_str()
        .or_else(|| err["type"].as_str())
        .map(str::to_string);
    (message, code)
}

/// How long a server asks to wait: OpenAI's `retry-after-ms`, else
/// `Retry-After` in seconds or as an HTTP date.
fn retry_after(h: &HeaderMap, now: std::time::SystemTime) -> Option<Duration> {
    if let Some(ms) = h
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
    {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(1e9)));
    }
    let text = h.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

async fn read_capped(
    resp: &mut reqwest::Response,
    max: usize,
) -> std::result::Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| send_error(&e).message)? {
        if body.len() + chunk.len() > max {
            body.extend_from_slice(&chunk[..max - body.len()]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn send_error(e: &reqwest::Error) -> Error {
    if let Some(refused) = crate::net::refusal_in(e) {
        return Error::terminal(format!("{KIND}: {refused}"));
    }
    let mut msg = format!("{KIND}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    if e.is_builder() || crate::is_tls_failure(e) {
        Error::terminal(msg)
    } else {
        Error::retryable(msg)
    }
}

/// Server-sent events: the `data:` of each event of a byte stream, in
/// pieces as they come (an event may be split anywhere).
#[derive(Default)]
pub struct Sse {
    line: Vec<u8>,
    data: Option<String>,
}

impl Sse {
    /// Reads `bytes`; each event completed is added to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<String>) -> Result<()> {
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() >= MAX_LINE_BYTES {
                    return Err(Error::terminal(format!(
                        "{KIND}: a line of the event stream passed {} MiB",
                        MAX_LINE_BYTES >> 20
                    )));
                }
                self.line.push(b);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                // The end of an event.
                if let Some(data) = self.data.take() {
                    out.push(data);
                }
            } else if let Some(rest) = line.strip_prefix(b"data:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                let text = std::str::from_utf8(rest).map_err(|_| {
                    Error::terminal(format!("{KIND}: the event stream is not UTF-8"))
                })?;
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(text);
                    }
                    None => self.data = Some(text.to_string()),
                }
            }
            // Comments (`:`), `event:`, `id:`, `retry:`: nothing to read.
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_are_read_whole() {
        let stream = b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line one\ndata: line two\n\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut sse = Sse::default();
            let mut out = Vec::new();
            sse.push(&stream[..cut], &mut out).unwrap();
            sse.push(&stream[cut..], &mut out).unwrap();
            assert_eq!(
                out,
                ["{\"a\":1}", "line one\nline two", "[DONE]"],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let h = |name: &'static str, v: &str| {
            let mut m = HeaderMap::new();
            m.insert(name, HeaderValue::from_str(v).unwrap());
            m
        };
        assert_eq!(
            retry_after(&h("retry-after", "2"), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&h("retry-after", "1.5"), now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(&h("retry-after-ms", "250"), now),
            Some(Duration::from_millis(250))
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(3));
        assert_eq!(
            retry_after(&h("retry-after", &later), now),
            Some(Duration::from_secs(3))
        );
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(3));
        assert_eq!(
            retry_after(&h("retry-after", &earlier), now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(&h("retry-after", "soon"), now), None);
        assert_eq!(retry_after(&h("retry-after", "-1"), now), None);
    }

    #[test]
    fn error_answers_of_each_server_are_read() {
        assert_eq!(
            server_error(br#"{"error": {"message": "Rate limit", "code": "rate_limit_exceeded"}}"#),
            (
                Some("Rate limit".into()),
                Some("rate_limit_exceeded".into())
            )
        );
        assert_eq!(
            server_error(br#"{"error": "model 'x' not found"}"#),
            (Some("model 'x' not found".into()), None)
        );
        assert_eq!(
            server_error(b"Bad Gateway"),
            (Some("Bad Gateway".into()), None)
        );
        assert_eq!(server_error(b""), (None, None));
    }
}
