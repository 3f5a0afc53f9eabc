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
/// How long a credential check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);
/// Tool calls one reply may ask for.
const MAX_TOOL_CALLS: usize = 16;
/// Default and most rounds of tool calls.
const TOOL_ROUNDS: u32 = 8;
/// The most of a tool's output sent back to the model.
const MAX_TOOL_RESULT_BYTES: usize = 256 << 10;

/// The address `path` under the server credential `name` names, checked
/// against the network policy, and the headers that carry its key.
async fn endpoint(call: &Call<'_>, name: &str, path: &str) -> Result<(Url, HeaderMap)> {
    let cred = call.host.credential(name).await?;
    if cred.kind != "openai" {
        return Err(Error::terminal(format!(
            "{KIND}: credential `{name}` is a `{}` credential; ai.chat needs an `openai` one",
            cred.kind
        )));
    }
    let base = cred.value["base_url"].as_str().unwrap_or_default().trim();
    let url_text = format!("{}/{path}", base.trim_end_matches('/'));
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
    let (_, policy) = call.io.http_client_and_policy()?;
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
    Ok((url, headers))
}

/// Checks an `openai` credential: `GET {base_url}/models` with its key,
/// which costs nothing and fails on a wrong key or address. The config is
/// an `ai.chat` one; only its `credential` is read.
pub async fn check(call: &Call<'_>) -> Result<String> {
    let cfg = config::<AiChatConfig>(call)?;
    let (url, headers) = endpoint(call, &cfg.credential, "models").await?;
    let (client, _) = call.io.http_client_and_policy()?;
    let exchange = async {
        let mut resp = client
            .get(url.clone())
            .headers(headers)
            .send()
            .await
            .map_err(|e| send_error(&e))?;
        let status = resp.status();
        let body = read_capped(&mut resp, MAX_REPLY_BYTES)
            .await
            .map_err(Error::retryable)?;
        if !status.is_success() {
            let (message, code) = server_error(&body);
            let mut text = format!("{KIND}: {url} answered {status}");
            for part in [code, message].into_iter().flatten() {
                text.push_str(": ");
                text.push_str(&part);
            }
            return Err(Error {
                message: text,
                retryable: status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS,
            });
        }
        let models = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["data"].as_array().map(Vec::len));
        Ok(match models {
            Some(n) => format!("{url} answered {status}: {n} models available"),
            None => format!("{url} answered {status}"),
        })
    };
    match tokio::time::timeout(CHECK_TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(Error::retryable(format!(
            "{KIND}: {url} did not answer within {} s",
            CHECK_TIMEOUT.as_secs()
        ))),
    }
}

pub async fn chat(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<AiChatConfig>(call)?;
    let (url, headers) = endpoint(call, &cfg.credential, "chat/completions").await?;
    let (client, _) = call.io.http_client_and_policy()?;
    let mut request = request_body(&cfg)?;
    let tools = offered_tools(call, &cfg).await?;
    if !tools.is_empty() {
        request["tools"] = Value::Array(tools.iter().map(|t| t.wire.clone()).collect());
    }
    let rounds_allowed = cfg.max_tool_rounds.unwrap_or(TOOL_ROUNDS);
    let timeout = Duration::from_millis(cfg.timeout_ms.unwrap_or(TIMEOUT_MS));
    let mut total: Option<Usage> = None;
    let mut rounds = 0u32;
    let reply = loop {
        let body = &request;
        let reply = with_retries(call, || async {
            let send = client
                .post(url.clone())
                .headers(headers.clone())
                .json(body)
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
            let t = total.get_or_insert(Usage {
                input: 0,
                output: 0,
            });
            t.input += u.input;
            t.output += u.output;
        }
        if !reply.text.is_empty() {
            call.host.log("info", &reply.text);
        }
        if reply.tool_calls.is_empty() {
            break reply;
        }
        if rounds >= rounds_allowed {
            return Err(Error::terminal(format!(
                "{KIND}: the model still calls tools after {rounds_allowed} round{}",
                if rounds_allowed == 1 { "" } else { "s" }
            )));
        }
        let messages = request["messages"]
            .as_array_mut()
            .ok_or_else(|| Error::terminal(format!("{KIND}: no messages")))?;
        messages.push(json!({
            "role": "assistant",
            "content": if reply.text.is_empty() { Value::Null } else { Value::String(reply.text.clone()) },
            "tool_calls": reply.tool_calls.iter().map(ToolCall::wire).collect::<Vec<_>>(),
        }));
        for (i, tc) in reply.tool_calls.iter().enumerate() {
            let result = run_tool(call, &tools, rounds, i, tc).await?;
            messages.push(json!({"role": "tool", "tool_call_id": tc.id, "content": result}));
        }
        rounds += 1;
        if rounds >= rounds_allowed {
            // The last round: the model answers now.
            request["tool_choice"] = json!("none");
        }
    };
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
        total.map_or(Value::Null, |u| {
            json!({"input_tokens": u.input, "output_tokens": u.output, "total_tokens": u.input + u.output})
        }),
    );
    if !tools.is_empty() {
        output.insert("rounds".into(), json!(rounds));
        let mut transcript = request["messages"].as_array().cloned().unwrap_or_default();
        transcript.push(json!({"role": "assistant", "content": reply.text}));
        output.insert("transcript".into(), Value::Array(transcript));
    }
    out(Arc::new(Value::Object(output)))
}

/// A workflow the model may call.
struct Tool {
    name: String,
    workflow: String,
    input_schema: Value,
    /// As the request lists it.
    wire: Value,
}

/// The tools of the config, each with what its workflow says it takes.
async fn offered_tools(call: &Call<'_>, cfg: &AiChatConfig) -> Result<Vec<Tool>> {
    let mut tools = Vec::with_capacity(cfg.tools.len());
    for t in &cfg.tools {
        let spec = call.host.workflow_tool(&t.workflow).await?;
        let mut function = json!({"name": t.name(), "parameters": spec.input_schema});
        if let Some(d) = t.description.clone().or(spec.description) {
            function["description"] = Value::String(d);
        }
        tools.push(Tool {
            name: t.name().to_string(),
            workflow: t.workflow.clone(),
            input_schema: spec.input_schema,
            wire: json!({"type": "function", "function": function}),
        });
    }
    Ok(tools)
}

/// Runs one tool call; the text that goes back to the model (a refusal
/// the model can act on is text too: a tool it does not have, arguments
/// that do not fit, a tool run that failed).
async fn run_tool(
    call: &Call<'_>,
    tools: &[Tool],
    round: u32,
    index: usize,
    tc: &ToolCall,
) -> Result<String> {
    let refusal = |message: String| {
        call.host.log(
            "warn",
            &format!("{KIND}: tool call `{}`: {message}", tc.name),
        );
        Ok(json!({"error": message}).to_string())
    };
    let Some(tool) = tools.iter().find(|t| t.name == tc.name) else {
        return refusal(format!("there is no tool named `{}`", tc.name));
    };
    let args: Value = match serde_json::from_str(if tc.arguments.trim().is_empty() {
        "{}"
    } else {
        &tc.arguments
    }) {
        Ok(v) => v,
        Err(e) => return refusal(format!("the arguments are not JSON: {e}")),
    };
    if let Err(e) = crate::schema::check(&tool.input_schema, &args) {
        return refusal(format!(
            "the arguments do not fit the tool's input_schema: {}",
            e.replace("config.schema", "input_schema")
        ));
    }
    // The same call (round, place, tool and arguments) of a step run again
    // finds its run again instead of starting another.
    let digest = blake3::hash(format!("{}\0{}", tc.name, canonical(&args)).as_bytes());
    let key = format!("tool/{round}/{index}/{}", &digest.to_hex()[..16]);
    match call
        .host
        .tool_call(key, tool.workflow.clone(), Arc::new(args))
        .await
    {
        Ok(output) => {
            let mut text = output.to_string();
            if text.len() > MAX_TOOL_RESULT_BYTES {
                let mut end = MAX_TOOL_RESULT_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str("…(truncated)");
            }
            Ok(text)
        }
        Err(e) if e.retryable => Err(e),
        Err(e) => refusal(format!("the tool failed: {}", e.message)),
    }
}

/// JSON text with object keys sorted: the same arguments give the same text.
fn canonical(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
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
    tool_calls: Vec<ToolCall>,
}

/// A tool the model asked to call.
#[derive(Debug, Default, Clone, PartialEq)]
struct ToolCall {
    id: String,
    name: String,
    /// JSON text, as the model wrote it.
    arguments: String,
}

impl ToolCall {
    fn wire(&self) -> Value {
        json!({"id": self.id, "type": "function",
            "function": {"name": self.name, "arguments": self.arguments}})
    }
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
    // Tool calls come in fragments: by `index` (a fragment with an `id`
    // and no index starts a new call: older Ollama).
    for tc in choice["delta"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let at = match tc["index"].as_u64() {
            Some(i) => usize::try_from(i).unwrap_or(usize::MAX),
            None if tc["id"].is_string() => reply.tool_calls.len(),
            None => reply.tool_calls.len().saturating_sub(1),
        };
        if at >= MAX_TOOL_CALLS {
            return Err(Error::terminal(format!(
                "{KIND}: the model asked for more than {MAX_TOOL_CALLS} tool calls at once"
            )));
        }
        while reply.tool_calls.len() <= at {
            reply.tool_calls.push(ToolCall::default());
        }
        let call = &mut reply.tool_calls[at];
        if let Some(id) = tc["id"].as_str() {
            call.id = id.to_string();
        }
        if let Some(name) = tc["function"]["name"].as_str() {
            call.name.push_str(name);
        }
        if let Some(args) = tc["function"]["arguments"].as_str() {
            call.arguments.push_str(args);
        }
    }
    let piece = choice["delta"]["content"].as_str().unwrap_or_default();
    reply.text.push_str(piece);
    Ok(piece.to_string())
}

/// A whole (not streamed) completion.
fn completion(v: &Value) -> Result<Reply> {
    let choice = &v["choices"][0];
    let message = &choice["message"];
    let text = match &message["content"] {
        Value::String(t) => t.as_str(),
        Value::Null if message["tool_calls"].is_array() => "",
        _ => {
            return Err(Error::terminal(format!(
                "{KIND}: the server's answer has no `choices[0].message.content`"
            )));
        }
    };
    let tool_calls = choice["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .take(MAX_TOOL_CALLS)
        .map(|tc| ToolCall {
            id: tc["id"].as_str().unwrap_or_default().to_string(),
            name: tc["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            arguments: tc["function"]["arguments"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        })
        .collect();
    Ok(Reply {
        text: text.to_string(),
        model: v["model"].as_str().map(str::to_string),
        finish_reason: choice["finish_reason"].as_str().map(str::to_string),
        usage: usage(&v["usage"]),
        tool_calls,
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
    crate::http::request_error(KIND, e)
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
