//! `ai.chat` against an OpenAI-compatible server on loopback that speaks the
//! real wire format: `POST /v1/chat/completions`, server-sent events of
//! `chat.completion.chunk` objects with the usage last and `[DONE]`, error
//! answers as OpenAI writes them, `Retry-After`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Status};

/// What the test server answers, one per request, in order.
enum Reply {
    /// The content streamed in these pieces, `gap` apart, then the usage.
    Stream {
        pieces: Vec<&'static str>,
        gap: Duration,
        usage: (u64, u64),
    },
    /// Streamed pieces, then the connection ends: no finish, no `[DONE]`.
    Cut(Vec<&'static str>),
    /// An error answer.
    Status {
        code: u16,
        retry_after: Option<&'static str>,
        body: Value,
    },
    /// One JSON completion (not streamed).
    Json(Value),
    /// A streamed call of tool `name`, its arguments in these pieces.
    Tool {
        id: &'static str,
        name: &'static str,
        args: Vec<&'static str>,
    },
}

#[derive(Default)]
struct Server {
    script: Mutex<VecDeque<Reply>>,
    /// Each request: its body, its Authorization header, when it came.
    seen: Mutex<Vec<(Value, Option<String>, Instant)>>,
}

impl Server {
    fn requests(&self) -> Vec<(Value, Option<String>, Instant)> {
        self.seen.lock().unwrap().clone()
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let c = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "test-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {c}\n\n")
}

async fn completions(
    axum::extract::State(s): axum::extract::State<Arc<Server>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string());
    s.seen.lock().unwrap().push((request, auth, Instant::now()));
    let next = s.script.lock().unwrap().pop_front();
    match next {
        None => (StatusCode::INTERNAL_SERVER_ERROR, "script exhausted").into_response(),
        Some(Reply::Status {
            code,
            retry_after,
            body,
        }) => {
            let mut r = (StatusCode::from_u16(code).unwrap(), axum::Json(body)).into_response();
            if let Some(ra) = retry_after {
                r.headers_mut().insert("retry-after", ra.parse().unwrap());
            }
            r
        }
        Some(Reply::Json(v)) => axum::Json(v).into_response(),
        Some(Reply::Stream { pieces, gap, usage }) => {
            let stream = async_stream(pieces, gap, Some(usage));
            sse(stream)
        }
        Some(Reply::Cut(pieces)) => sse(async_stream(pieces, Duration::ZERO, None)),
        Some(Reply::Tool { id, name, args }) => {
            let mut events = vec![chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
                None,
            )];
            for a in args {
                events.push(chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}),
                    None,
                ));
            }
            events.push(chunk(json!({}), Some("tool_calls")));
            let u = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                "model": "test-model", "choices": [],
                "usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}});
            events.push(format!("data: {u}\n\n"));
            events.push("data: [DONE]\n\n".to_string());
            sse(futures::stream::iter(events.into_iter().map(Ok)))
        }
    }
}

/// The events of a streamed reply (`usage`: the full ending; None: cut).
fn async_stream(
    pieces: Vec<&'static str>,
    gap: Duration,
    usage: Option<(u64, u64)>,
) -> impl futures::Stream<Item = Result<String, std::io::Error>> {
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for p in pieces {
        events.push(chunk(json!({"content": p}), None));
    }
    if let Some((input, output)) = usage {
        events.push(chunk(json!({}), Some("stop")));
        let u = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "test-model", "choices": [],
            "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}});
        events.push(format!("data: {u}\n\n"));
        events.push("data: [DONE]\n\n".to_string());
    }
    futures::stream::unfold(
        (events.into_iter(), true),
        move |(mut it, first)| async move {
            let e = it.next()?;
            if !first {
                tokio::time::sleep(gap).await;
            }
            Some((Ok(e), (it, false)))
        },
    )
}

fn sse(
    stream: impl futures::Stream<Item = Result<String, std::io::Error>> + Send + 'static,
) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn serve(script: Vec<Reply>) -> (String, Arc<Server>) {
    let server = Arc::new(Server {
        script: Mutex::new(script.into()),
        ..Server::default()
    });
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(completions))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), server)
}

struct Harness {
    _dir: tempfile::TempDir,
    engine: Engine,
}

async fn harness(base_url: &str, api_key: Option<&str>) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let mut cred = json!({"base_url": base_url});
    if let Some(k) = api_key {
        cred["api_key"] = json!(k);
    }
    engine
        .store()
        .put_credential("llm", "openai", &cred)
        .await
        .unwrap();
    Harness { _dir: dir, engine }
}

async fn ask(h: &Harness, config: Value, input: Value) -> RunResult {
    let mut config = config;
    config["credential"] = json!("llm");
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "t", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "ask", "kind": "ai.chat", "config": config},
        {"id": "out", "kind": "output.end"}
    ], "edges": [{"from": "t", "to": "ask"}, {"from": "ask", "to": "out"}]}))
    .unwrap();
    let handle = h
        .engine
        .start(Plan::new(wf).unwrap(), None, Arc::new(input))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap()
}

fn stream(pieces: Vec<&'static str>, usage: (u64, u64)) -> Reply {
    Reply::Stream {
        pieces,
        gap: Duration::ZERO,
        usage,
    }
}

#[tokio::test]
async fn tokens_stream_into_the_live_log_and_the_usage_is_counted() {
    let (url, server) = serve(vec![Reply::Stream {
        pieces: vec!["Hel", "lo, ", "wor", "ld"],
        gap: Duration::from_millis(40),
        usage: (12, 5),
    }])
    .await;
    let h = harness(&url, Some("sk-test-123")).await;
    let mut events = h.engine.subscribe();
    let r = ask(
        &h,
        json!({"model": "test-model", "system": "You are {{ input.who }}.",
            "user": "Greet {{ input.name }}", "temperature": 0.2, "max_tokens": 50}),
        json!({"who": "terse", "name": "the world"}),
    )
    .await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(
        r.output["out"],
        json!({"text": "Hello, world", "model": "test-model", "finish_reason": "stop",
            "usage": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}})
    );
    // The pieces were live before the step finished, in order.
    let mut live = Vec::new();
    let mut finished = false;
    while let Ok(e) = events.try_recv() {
        match e.what {
            sluice_api::What::Stream { node, text, .. } if &*node == "ask" => {
                assert!(!finished, "a piece after the step finished");
                live.push(text);
            }
            sluice_api::What::StepFinished { node, .. } if &*node == "ask" => finished = true,
            _ => {}
        }
    }
    assert_eq!(live, ["Hel", "lo, ", "wor", "ld"]);
    // Journaled: the whole text, once.
    let logs = h.engine.store().run_logs(&r.id).await.unwrap();
    let lines: Vec<&str> = logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(lines, ["Hello, world"]);
    // What went over the wire.
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let (req, auth, _) = &seen[0];
    assert_eq!(auth.as_deref(), Some("Bearer sk-test-123"));
    assert_eq!(
        *req,
        json!({"model": "test-model", "stream": true, "stream_options": {"include_usage": true},
            "temperature": 0.2, "max_tokens": 50, "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Greet the world"}]})
    );
    let metrics = h.engine.metrics();
    for line in [
        "sluice_ai_tokens_total{workflow=\"t\",model=\"test-model\",direction=\"input\"} 12\n",
        "sluice_ai_tokens_total{workflow=\"t\",model=\"test-model\",direction=\"output\"} 5\n",
    ] {
        assert!(metrics.contains(line), "{metrics}");
    }
}

#[tokio::test]
async fn a_schema_makes_the_reply_a_checked_object() {
    let schema = json!({"type": "object", "required": ["name", "age"], "additionalProperties": false,
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}});
    let (url, server) = serve(vec![
        stream(vec!["{\"name\": \"Ada\",", " \"age\": 36}"], (20, 8)),
        // Malformed JSON from the model.
        stream(vec!["{\"name\": \"Ada\", \"age\": "], (20, 8)),
        // JSON of the wrong shape.
        stream(vec!["{\"name\": 5, \"age\": 36}"], (20, 8)),
    ])
    .await;
    let h = harness(&url, None).await;
    let config = json!({"model": "m", "user": "Who?", "schema": schema});
    let r = ask(&h, config.clone(), json!({})).await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output["out"]["value"], json!({"name": "Ada", "age": 36}));
    let (req, auth, _) = &server.requests()[0];
    assert_eq!(*auth, None, "no key, no Authorization");
    assert_eq!(
        req["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": true}})
    );
    let r = ask(&h, config.clone(), json!({})).await;
    assert_eq!(r.status, Status::Failed);
    let e = r.error.unwrap();
    assert_eq!(e.node.as_deref(), Some("ask"));
    assert!(
        e.message
            .starts_with("ai.chat: the reply is not the JSON config.schema asks for"),
        "{e:?}"
    );
    assert_eq!(e.retryable, Some(false));
    let r = ask(&h, config, json!({})).await;
    let e = r.error.unwrap();
    assert!(
        e.message
            .starts_with("ai.chat: the reply does not match config.schema")
            && e.message.contains("/name"),
        "{e:?}"
    );
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_tried_again_as_the_server_asks() {
    let (url, server) = serve(vec![
        Reply::Status {
            code: 429,
            retry_after: Some("1"),
            body: json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
        },
        Reply::Status {
            code: 503,
            retry_after: None,
            body: json!({"error": "loading model"}),
        },
        Reply::Cut(vec!["Hal"]),
        stream(vec!["Hello"], (3, 1)),
    ])
    .await;
    let h = harness(&url, Some("sk-test-123")).await;
    let r = ask(&h, json!({"model": "m", "user": "Hi"}), json!({})).await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output["out"]["text"], "Hello");
    let seen = server.requests();
    assert_eq!(seen.len(), 4);
    let waited = seen[1].2 - seen[0].2;
    assert!(
        waited >= Duration::from_millis(950) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // One attempt of the step: the node asked again itself, and said so.
    let records = h.engine.store().run_records(&r.id).await.unwrap();
    assert!(records.iter().all(|r| r.attempt == 1));
    let logs = h.engine.store().run_logs(&r.id).await.unwrap();
    let warned: Vec<&str> = logs
        .iter()
        .filter(|l| l.level == "warn")
        .map(|l| l.message.as_str())
        .collect();
    assert_eq!(warned.len(), 3, "{warned:?}");
    assert!(
        warned[0].contains("429 Too Many Requests: Rate limit reached")
            && warned[0].contains("trying again in 1 s (request 2 of 4)"),
        "{warned:?}"
    );
    assert!(
        warned[1].contains("503 Service Unavailable: loading model"),
        "{warned:?}"
    );
    assert!(
        warned[2].contains("the stream ended before the reply did"),
        "{warned:?}"
    );
}

#[tokio::test]
async fn answers_no_retry_can_change_fail_at_once() {
    let (url, server) = serve(vec![
        Reply::Status {
            code: 401,
            retry_after: None,
            body: json!({"error": {"message": "Incorrect API key provided: sk-test-123", "code": "invalid_api_key"}}),
        },
        Reply::Status {
            code: 429,
            retry_after: None,
            body: json!({"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}),
        },
        Reply::Status {
            code: 429,
            retry_after: Some("3600"),
            body: json!({"error": {"message": "slow down"}}),
        },
    ])
    .await;
    let h = harness(&url, Some("sk-test-123")).await;
    let config = json!({"model": "m", "user": "Hi"});
    let r = ask(&h, config.clone(), json!({})).await;
    let e = r.error.unwrap();
    // The key the server echoed is masked.
    assert_eq!(
        e.message,
        "ai.chat: the server answered 401 Unauthorized: Incorrect API key provided: ***"
    );
    assert_eq!(e.retryable, Some(false));
    let e = ask(&h, config.clone(), json!({})).await.error.unwrap();
    assert!(e.message.contains("exceeded your current quota"), "{e:?}");
    assert_eq!(e.retryable, Some(false));
    // A wait longer than the node waits: retryable, for the node's policy.
    let e = ask(&h, config, json!({})).await.error.unwrap();
    assert!(e.message.contains("asks to wait 3600 s"), "{e:?}");
    assert_eq!(e.retryable, Some(true));
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn earlier_turns_go_between_the_system_and_the_user_message() {
    let (url, server) = serve(vec![stream(vec!["Paris."], (9, 2))]).await;
    let h = harness(&url, None).await;
    let r = ask(
        &h,
        json!({"model": "m", "system": "Be brief.", "user": "And of {{ input.next }}?",
            "messages": "{{ input.history }}"}),
        json!({"next": "France", "history": [
            {"role": "user", "content": "Capital of Italy?"},
            {"role": "assistant", "content": "Rome."}]}),
    )
    .await;
    assert_eq!(r.output["out"]["text"], "Paris.", "{r:?}");
    assert_eq!(
        server.requests()[0].0["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital of Italy?"},
            {"role": "assistant", "content": "Rome."},
            {"role": "user", "content": "And of France?"}])
    );
    // A turn that is not one: the step fails, naming it.
    let r = ask(
        &h,
        json!({"model": "m", "user": "x", "messages": "{{ input.history }}"}),
        json!({"history": [{"role": "robot", "content": "beep"}]}),
    )
    .await;
    assert_eq!(
        r.error.unwrap().message,
        "config.messages[0]: `role` must be user, assistant or system"
    );
}

#[tokio::test]
async fn a_server_that_answers_one_json_completion_is_read_too() {
    let (url, _server) = serve(vec![Reply::Json(json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "llama3.2",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Bonjour"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    }))])
    .await;
    let h = harness(&url, None).await;
    let r = ask(&h, json!({"model": "llama3.2", "user": "Hi"}), json!({})).await;
    assert_eq!(
        r.output["out"],
        json!({"text": "Bonjour", "model": "llama3.2", "finish_reason": "stop",
            "usage": {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6}})
    );
}

#[tokio::test]
async fn the_credential_must_be_an_openai_one() {
    let (url, _server) = serve(vec![]).await;
    let h = harness(&url, None).await;
    h.engine
        .store()
        .put_credential(
            "mail",
            "smtp",
            &json!({"host": "h", "port": 25, "security": "none"}),
        )
        .await
        .unwrap();
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "t", "nodes": [
        {"id": "t", "kind": "trigger.manual"},
        {"id": "ask", "kind": "ai.chat", "config": {"credential": "mail", "model": "m", "user": "Hi"}}
    ], "edges": [{"from": "t", "to": "ask"}]}))
    .unwrap();
    let refused = h
        .engine
        .start(Plan::new(wf).unwrap(), None, Arc::new(json!({})))
        .await
        .unwrap_err();
    let sluice_runtime::executor::Error::Invalid(problems) = refused else {
        panic!("{refused:?}");
    };
    let text: Vec<String> = problems.0.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 1, "{text:?}");
    assert!(
        text[0].starts_with("node `ask` config.credential:") && text[0].contains("openai"),
        "{text:?}"
    );
}

/// A tool workflow: `lookup-order` looks an order up by id.
async fn lookup_tool(h: &Harness) {
    let child = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "lookup-order", "nodes": [
        {"id": "t", "kind": "trigger.workflow", "config": {
            "description": "Finds an order by its id.",
            "input_schema": {"type": "object", "required": ["id"], "additionalProperties": false,
                "properties": {"id": {"type": "string"}}}}},
        {"id": "find", "kind": "data.set", "config": {"values": {"id": "{{ input.id }}", "status": "shipped"}}},
        {"id": "order", "kind": "output.end"}
    ], "edges": [{"from": "t", "to": "find"}, {"from": "find", "to": "order"}]}))
    .unwrap();
    h.engine
        .save_workflow(&Plan::new(child).unwrap())
        .await
        .unwrap();
}

async fn runs_of(h: &Harness, workflow: &str) -> Vec<sluice_store::RunRow> {
    h.engine
        .store()
        .find_runs(&sluice_runtime::RunFilter {
            workflow: Some(workflow.into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_tool_call_runs_a_workflow_and_its_output_goes_back_to_the_model() {
    let (url, server) = serve(vec![
        Reply::Tool {
            id: "call_1",
            name: "lookup-order",
            args: vec!["{\"id\":", " \"A1\"}"],
        },
        stream(vec!["Order A1 has shipped."], (50, 6)),
    ])
    .await;
    let h = harness(&url, None).await;
    lookup_tool(&h).await;
    let r = ask(
        &h,
        json!({"model": "m", "user": "Where is order A1?", "tools": [{"workflow": "lookup-order"}]}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    let out = &r.output["out"];
    assert_eq!(out["text"], "Order A1 has shipped.");
    assert_eq!(out["rounds"], 1);
    assert_eq!(
        out["usage"],
        json!({"input_tokens": 80, "output_tokens": 16, "total_tokens": 96})
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    // The model was told the tool: its name, what it does, what it takes.
    assert_eq!(
        seen[0].0["tools"],
        json!([{"type": "function", "function": {"name": "lookup-order",
            "description": "Finds an order by its id.",
            "parameters": {"type": "object", "required": ["id"], "additionalProperties": false,
                "properties": {"id": {"type": "string"}}}}}])
    );
    // Then got the call back with the tool run's output.
    let messages = seen[1].0["messages"].as_array().unwrap();
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "lookup-order", "arguments": "{\"id\": \"A1\"}"}}]})
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], "call_1");
    let result: Value = serde_json::from_str(messages[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result, json!({"order": {"id": "A1", "status": "shipped"}}));
    // The tool ran once, as a child of this run; the transcript has it all.
    let children = runs_of(&h, "lookup-order").await;
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].parent_run.as_deref(), Some(r.id.as_str()));
    let roles: Vec<&str> = out["transcript"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
}

#[tokio::test]
async fn bad_tool_calls_go_back_to_the_model_and_rounds_are_bounded() {
    let (url, server) = serve(vec![
        // Arguments that do not fit the tool's input_schema.
        Reply::Tool {
            id: "call_1",
            name: "lookup-order",
            args: vec!["{\"id\": 5}"],
        },
        // A tool it does not have.
        Reply::Tool {
            id: "call_2",
            name: "delete-everything",
            args: vec!["{}"],
        },
        // The last round: still calling.
        Reply::Tool {
            id: "call_3",
            name: "lookup-order",
            args: vec!["{\"id\": \"B2\"}"],
        },
    ])
    .await;
    let h = harness(&url, None).await;
    lookup_tool(&h).await;
    let r = ask(
        &h,
        json!({"model": "m", "user": "?", "tools": [{"workflow": "lookup-order"}], "max_tool_rounds": 2}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, Status::Failed);
    assert_eq!(
        r.error.unwrap().message,
        "ai.chat: the model still calls tools after 2 rounds"
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 3);
    let tool_result = |req: &Value| -> Value {
        let last = req["messages"].as_array().unwrap().last().unwrap().clone();
        serde_json::from_str(last["content"].as_str().unwrap()).unwrap()
    };
    let bad_args = tool_result(&seen[1].0);
    assert!(
        bad_args["error"]
            .as_str()
            .unwrap()
            .starts_with("the arguments do not fit the tool's input_schema"),
        "{bad_args}"
    );
    assert_eq!(
        tool_result(&seen[2].0),
        json!({"error": "there is no tool named `delete-everything`"})
    );
    // The last round is told to answer.
    assert_eq!(seen[2].0["tool_choice"], "none");
    assert_eq!(seen[0].0.get("tool_choice"), None);
    // Refused calls ran nothing.
    assert!(runs_of(&h, "lookup-order").await.is_empty());
}

#[tokio::test]
async fn a_tool_needs_an_input_schema() {
    let (url, _server) = serve(vec![]).await;
    let h = harness(&url, None).await;
    let child = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "bare", "nodes": [
        {"id": "t", "kind": "trigger.workflow"}, {"id": "o", "kind": "output.end"}
    ], "edges": [{"from": "t", "to": "o"}]}),
    )
    .unwrap();
    h.engine
        .save_workflow(&Plan::new(child).unwrap())
        .await
        .unwrap();
    let r = ask(
        &h,
        json!({"model": "m", "user": "?", "tools": [{"workflow": "bare"}]}),
        json!({}),
    )
    .await;
    assert_eq!(
        r.error.unwrap().message,
        "tool `bare`: its trigger.workflow `t` needs an `input_schema` (what the model is told the tool takes)"
    );
}

#[tokio::test]
async fn tool_runs_do_not_starve_for_step_permits() {
    // One step permit: the ai.chat step gives it back while its tool runs
    // (a tool workflow with a step that needs a permit).
    let (url, _server) = serve(vec![
        Reply::Tool {
            id: "call_1",
            name: "slow",
            args: vec!["{}"],
        },
        stream(vec!["done"], (1, 1)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(
        dir.path(),
        Options {
            max_concurrent_steps: 1,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    engine
        .store()
        .put_credential("llm", "openai", &json!({"base_url": url}))
        .await
        .unwrap();
    let h = Harness { _dir: dir, engine };
    let child = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "slow", "nodes": [
        {"id": "t", "kind": "trigger.workflow", "config": {"input_schema": {"type": "object"}}},
        {"id": "think", "kind": "data.transform", "config": {"jq": "{thought: 42}"}},
        {"id": "o", "kind": "output.end"}
    ], "edges": [{"from": "t", "to": "think"}, {"from": "think", "to": "o"}]}),
    )
    .unwrap();
    h.engine
        .save_workflow(&Plan::new(child).unwrap())
        .await
        .unwrap();
    let r = ask(
        &h,
        json!({"model": "m", "user": "?", "tools": [{"workflow": "slow"}]}),
        json!({}),
    )
    .await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output["out"]["text"], "done");
}
