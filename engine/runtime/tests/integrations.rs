//! The integration kinds against real servers on loopback: an axum HTTP
//! server, a real SMTP server (Python's aiosmtpd, with STARTTLS and implicit
//! TLS on a test certificate), real files. Plus the redaction guarantee: a
//! credential's value never lands anywhere in the data dir.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Settings, Status};

// ---- harness ---------------------------------------------------------------

struct Harness {
    dir: tempfile::TempDir,
    engine: Engine,
}

async fn harness_with(settings: Settings) -> Harness {
    harness_in(tempfile::tempdir().unwrap(), settings).await
}

/// The data dir is `<dir>/data`; tests put servers and folders beside it.
async fn harness_in(dir: tempfile::TempDir, settings: Settings) -> Harness {
    let engine = Engine::open(
        &dir.path().join("data"),
        Options {
            settings,
            ..Options::default()
        },
    )
    .await
    .unwrap();
    Harness { dir, engine }
}

async fn harness() -> Harness {
    harness_with(Settings::default()).await
}

fn plan(nodes: Value, edges: Value) -> Arc<Plan> {
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "t", "nodes": nodes, "edges": edges}),
    )
    .unwrap();
    Plan::new(wf).unwrap()
}

async fn run(h: &Harness, nodes: Value, edges: Value, input: Value) -> RunResult {
    let handle = h
        .engine
        .start(plan(nodes, edges), None, Arc::new(input))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), handle.wait())
        .await
        .unwrap()
}

/// trigger → one node → output.end `out`.
async fn one(h: &Harness, kind: &str, node: Value, input: Value) -> RunResult {
    let mut n = node;
    n["id"] = json!("n");
    n["kind"] = json!(kind);
    run(
        h,
        json!([{"id": "t", "kind": "trigger.manual"}, n, {"id": "out", "kind": "output.end"}]),
        json!([{"from": "t", "to": "n"}, {"from": "n", "to": "out"}]),
        input,
    )
    .await
}

#[track_caller]
fn output(r: &RunResult) -> &Value {
    assert_eq!(r.status, Status::Succeeded, "error: {:?}", r.error);
    &r.output["out"]
}

#[track_caller]
fn failure(r: &RunResult) -> (String, u64) {
    assert_eq!(r.status, Status::Failed, "output: {}", r.output);
    let e = r.error.as_ref().unwrap();
    (e.message.clone(), e.attempts.map_or(0, u64::from))
}

// ---- the HTTP server -------------------------------------------------------

#[derive(Clone, Default)]
struct Seen {
    /// Idempotency keys of requests to `/flaky/{key}`, in arrival order.
    flaky: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

async fn echo(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or("?"))))
        .collect();
    axum::Json(json!({
        "method": method.as_str(),
        "path": uri.path(),
        "query": uri.query(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    }))
    .into_response()
}

fn redirect(status: StatusCode, to: &str) -> Response {
    (status, [("location", to.to_string())]).into_response()
}

async fn http_server() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app =
        Router::new()
            .route("/echo", axum::routing::any(echo))
            .route(
                "/hops/{n}",
                axum::routing::any(|UrlPath(n): UrlPath<u32>| async move {
                    if n == 0 {
                        redirect(StatusCode::FOUND, "/echo")
                    } else {
                        redirect(StatusCode::TEMPORARY_REDIRECT, &format!("/hops/{}", n - 1))
                    }
                }),
            )
            .route(
                "/echo-bytes",
                axum::routing::any(
                    |headers: HeaderMap, Query(q): Query<HashMap<String, usize>>| async move {
                        // The caller's Authorization sent back as binary,
                        // `repeat` times with odd-sized filler between.
                        let auth = headers
                            .get("authorization")
                            .map(|v| v.as_bytes().to_vec())
                            .unwrap_or_default();
                        let mut body = auth.clone();
                        for i in 1..q.get("repeat").copied().unwrap_or(1) {
                            body.extend(std::iter::repeat_n(b'.', 997 + i % 13));
                            body.extend(&auth);
                        }
                        ([("content-type", "application/octet-stream")], body)
                    },
                ),
            )
            .route(
                "/redirect",
                axum::routing::any(|Query(q): Query<HashMap<String, String>>| async move {
                    redirect(StatusCode::FOUND, &q["to"])
                }),
            )
            .route(
                "/see-other",
                axum::routing::post(|| async { redirect(StatusCode::SEE_OTHER, "/echo") }),
            )
            .route(
                "/elsewhere",
                axum::routing::any(move || async move {
                    // Same server, other origin (another host name).
                    redirect(
                        StatusCode::FOUND,
                        &format!("http://localhost:{}/echo", addr.port()),
                    )
                }),
            )
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route(
                "/huge",
                axum::routing::get(|Query(q): Query<HashMap<String, String>>| async move {
                    let mb: usize = q.get("mb").and_then(|m| m.parse().ok()).unwrap_or(1);
                    let ct = q
                        .get("type")
                        .cloned()
                        .unwrap_or_else(|| "application/octet-stream".into());
                    let chunk = Bytes::from(vec![b'x'; 1 << 20]);
                    let stream = futures::stream::iter(
                        (0..mb).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
                    );
                    (
                        [("content-type", ct)],
                        axum::body::Body::from_stream(stream),
                    )
                        .into_response()
                }),
            )
            .route(
                "/status/{code}",
                axum::routing::any(|UrlPath(code): UrlPath<u16>| async move {
                    (
                        StatusCode::from_u16(code).unwrap(),
                        format!("status {code}"),
                    )
                        .into_response()
                }),
            )
            .route(
                "/latin1",
                axum::routing::get(|| async {
                    (
                        [("content-type", "text/plain; charset=iso-8859-1")],
                        vec![b'c', b'a', b'f', 0xe9],
                    )
                }),
            )
            .route(
                "/png",
                axum::routing::get(|| async {
                    (
                        [("content-type", "image/png")],
                        vec![0x89, b'P', b'N', b'G'],
                    )
                }),
            )
            .route(
                "/flaky/{key}",
                axum::routing::any(
                    |State(seen): State<Seen>,
                     UrlPath(key): UrlPath<String>,
                     headers: HeaderMap| async move {
                        let idem = headers
                            .get("idempotency-key")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string();
                        let mut flaky = seen.flaky.lock().unwrap();
                        let calls = flaky.entry(key).or_default();
                        calls.push(idem);
                        if calls.len() == 1 {
                            (StatusCode::INTERNAL_SERVER_ERROR, "try again").into_response()
                        } else {
                            axum::Json(json!({"calls": calls.len()})).into_response()
                        }
                    },
                ),
            )
            .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

// ---- http.request ----------------------------------------------------------

#[tokio::test]
async fn http_methods_json_query_headers_and_bodies() {
    let (addr, _) = http_server().await;
    let h = harness().await;
    let url = format!("http://{addr}/echo");

    let r = one(
        &h,
        "http.request",
        json!({"config": {
            "method": "post", "url": url,
            "query": {"q": "a b", "n": 3, "tag": ["x", "y"]},
            "headers": {"X-Order": "{{ input.id }}"},
            "body": {"id": "{{ input.id }}", "total": "{{ input.total }}"}
        }}),
        json!({"id": "o-7", "total": 120}),
    )
    .await;
    let out = output(&r);
    assert_eq!(out["status"], 200);
    assert_eq!(out["url"], json!(format!("{url}?q=a+b&n=3&tag=x&tag=y")));
    assert_eq!(out["headers"]["content-type"], "application/json");
    let echo = &out["body"];
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["query"], "q=a+b&n=3&tag=x&tag=y");
    assert_eq!(echo["headers"]["x-order"], "o-7");
    assert_eq!(echo["headers"]["content-type"], "application/json");
    assert_eq!(
        serde_json::from_str::<Value>(echo["body"].as_str().unwrap()).unwrap(),
        json!({"id": "o-7", "total": 120})
    );
    // The step's idempotency key goes along by default.
    let idem = echo["headers"]["idempotency-key"].as_str().unwrap();
    assert!(idem.starts_with(&format!("{}/n/", r.id)), "{idem}");

    for (kind, body, ct, sent) in [
        (
            "form",
            json!({"a": "1 2", "b": ["x", "y"]}),
            "application/x-www-form-urlencoded",
            "a=1+2&b=x&b=y",
        ),
        (
            "text",
            json!("plain words"),
            "text/plain; charset=utf-8",
            "plain words",
        ),
        (
            "bytes",
            json!({"$bytes": "aGVsbG8=", "size": 5}),
            "application/octet-stream",
            "hello",
        ),
    ] {
        let r = one(
            &h,
            "http.request",
            json!({"config": {"method": "PUT", "url": url, "body": body, "body_type": kind}}),
            json!(null),
        )
        .await;
        let echo = &output(&r)["body"];
        assert_eq!(echo["method"], "PUT", "{kind}");
        assert_eq!(echo["headers"]["content-type"], ct, "{kind}");
        assert_eq!(echo["body"], sent, "{kind}");
    }

    // Bodies by content type: text in its charset, binary as base64.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/latin1")}}),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["body"], "café");
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/png")}}),
        json!(null),
    )
    .await;
    assert_eq!(
        output(&r)["body"],
        json!({"$bytes": base64::engine::general_purpose::STANDARD.encode([0x89, b'P', b'N', b'G']), "size": 4, "content_type": "image/png"})
    );
}

#[tokio::test]
async fn http_redirects_are_followed_within_the_limit() {
    let (addr, _) = http_server().await;
    let h = harness().await;
    let r = one(
        &h,
        "http.request",
        json!({"config": {"method": "PUT", "url": format!("http://{addr}/hops/3"), "body": "kept"}}),
        json!(null),
    )
    .await;
    let out = output(&r);
    assert_eq!(out["url"], json!(format!("http://{addr}/echo")));
    // 307 keeps method and body; the final 302 after a PUT keeps PUT too.
    assert_eq!(out["body"]["method"], "PUT");
    assert_eq!(out["body"]["body"], "kept");

    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/hops/3"), "max_redirects": 2}}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.contains("more than 2 redirects"), "{msg}");
    assert_eq!(attempts, 1, "a redirect loop is not retried");

    let r = one(
        &h,
        "http.request",
        json!({"config": {"method": "POST", "url": format!("http://{addr}/see-other"), "body": {"a": 1}}}),
        json!(null),
    )
    .await;
    let echo = &output(&r)["body"];
    assert_eq!(echo["method"], "GET", "303 turns the request into a GET");
    assert_eq!(echo["body"], "");

    // max_redirects 0: the redirect itself is the answer.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/hops/0"), "max_redirects": 0}}),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["status"], 302);
    assert_eq!(output(&r)["headers"]["location"], "/echo");
}

/// The SSRF policy (config.toml `[http] allow`/`deny`): the engine's own
/// trigger port, metadata addresses and names that resolve to this machine
/// are refused by default, at the first hop and at every redirect, without
/// a retry; the allow list lifts it.
#[tokio::test]
async fn http_request_may_not_call_the_trigger_port_metadata_or_names_that_point_here() {
    let (addr, _) = http_server().await;
    // A second server stands in for the engine's own trigger port.
    let (own, _) = http_server().await;
    let h = harness().await;
    h.engine.set_trigger_addresses(vec![own]);
    let call = |url: String| {
        json!({"config": {"url": url, "timeout_ms": 2000},
               "retry": {"max_attempts": 3, "backoff_ms": 1}})
    };
    let refused = |r: &RunResult, says: &str| {
        let (msg, attempts) = failure(r);
        assert!(msg.contains(says), "{msg}");
        assert!(
            msg.contains("[http] allow"),
            "the error says how to allow it: {msg}"
        );
        assert_eq!(attempts, 1, "a refusal is not retried: {msg}");
    };

    // The own port, however it is spelled.
    for url in [
        format!("http://{own}/api/v1/workflows"),
        format!("http://localhost:{}/api/v1/workflows", own.port()),
        format!("http://[::ffff:127.0.0.1]:{}/", own.port()),
        format!("http://0.0.0.0:{}/", own.port()),
    ] {
        let r = one(&h, "http.request", call(url), json!(null)).await;
        refused(&r, "own trigger port");
    }
    // Cloud metadata: refused before any connection is tried (no network
    // here: a connection attempt would time out, not be refused).
    let r = one(
        &h,
        "http.request",
        call("http://169.254.169.254/latest/meta-data/".into()),
        json!(null),
    )
    .await;
    refused(&r, "169.254.169.254 is a link-local address");
    // A redirect to either is refused at its hop.
    for to in [
        "http://169.254.169.254/latest/meta-data/".to_string(),
        format!("http://{own}/api/v1/workflows"),
    ] {
        let r = one(
            &h,
            "http.request",
            call(format!("http://{addr}/redirect?to={to}")),
            json!(null),
        )
        .await;
        refused(&r, "http.request may not call it");
    }
    // Other loopback ports stay callable, by address or as localhost.
    let r = one(
        &h,
        "http.request",
        call(format!("http://localhost:{}/echo", addr.port())),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["status"], 200);

    // A DNS name (not `localhost`) that the system resolves to loopback:
    // the machine's own name usually is one (Debian's /etc/hosts maps it to
    // 127.0.1.1), and Debian's and Docker's /etc/hosts have `ip6-localhost`.
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = [hostname.trim(), "ip6-localhost", "ip6-loopback"]
        .into_iter()
        .filter(|n| !n.is_empty() && *n != "localhost")
        .find(|n| {
            std::net::ToSocketAddrs::to_socket_addrs(&(*n, 80)).is_ok_and(|a| {
                let a: Vec<_> = a.collect();
                !a.is_empty() && a.iter().all(|a| a.ip().is_loopback())
            })
        });
    match name {
        Some(name) => {
            eprintln!("`{name}` resolves to loopback here");
            let r = one(
                &h,
                "http.request",
                call(format!("http://{name}:{}/echo", addr.port())),
                json!(null),
            )
            .await;
            refused(&r, "an address of this machine");
        }
        None => eprintln!(
            "skipped the name-to-loopback case: no name resolves to loopback here (net.rs's unit tests cover it with a fixed answer)"
        ),
    }

    // The allow list lifts each refusal.
    let mut settings = Settings::default();
    settings.http.allow = vec!["127.0.0.0/8".into(), "169.254.169.254".into()];
    let allowed = harness_with(settings).await;
    allowed.engine.set_trigger_addresses(vec![own]);
    let r = one(
        &allowed,
        "http.request",
        call(format!("http://{own}/echo")),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["status"], 200);
    let r = one(
        &allowed,
        "http.request",
        json!({"config": {"url": "http://169.254.169.254/", "timeout_ms": 300}}),
        json!(null),
    )
    .await;
    let (msg, _) = failure(&r);
    assert!(
        !msg.contains("may not call"),
        "allowed, so it was tried: {msg}"
    );

    // And the deny list adds to the defaults; a bad entry is named at start.
    let mut settings = Settings::default();
    settings.http.deny = vec![format!("{}", addr.ip())];
    let denied = harness_with(settings).await;
    let r = one(
        &denied,
        "http.request",
        call(format!("http://{addr}/echo")),
        json!(null),
    )
    .await;
    refused(&r, "denied by config.toml [http] deny");
    let mut settings = Settings::default();
    settings.http.deny = vec!["not a host/99".into()];
    let bad = harness_with(settings).await;
    let e = bad.engine.check_settings().unwrap_err().to_string();
    assert!(e.contains("[http] deny: `not a host/99`"), "{e}");
}

#[tokio::test]
async fn http_slow_huge_and_failing_responses() {
    let (addr, _) = http_server().await;
    let h = harness().await;

    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/slow"), "timeout_ms": 200},
               "retry": {"max_attempts": 2, "backoff_ms": 10}}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.contains("timed out after 200 ms"), "{msg}");
    assert_eq!(attempts, 2, "timeouts are retried");

    // 48 MiB of binary streams into the blob store.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/huge?mb=48")}}),
        json!(null),
    )
    .await;
    let body = &output(&r)["body"];
    assert_eq!(body["size"], 48 << 20);
    assert_eq!(body["content_type"], "application/octet-stream");
    let hash = body["$blob"].as_str().unwrap();
    let path = h.engine.store().blobs().blob_path(hash).unwrap();
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes.len(), 48 << 20);
    assert_eq!(blake3::hash(&bytes).to_hex().as_str(), hash);

    // A JSON body over the limit is refused, naming the limit.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/huge?mb=3&type=application/json"), "max_response_bytes": 1048576}}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(
        msg.contains("larger than max_response_bytes (1048576)"),
        "{msg}"
    );
    assert_eq!(attempts, 1);

    // 4xx is terminal, 5xx is retried; fail_on_status: false emits the status.
    let retry = json!({"max_attempts": 3, "backoff_ms": 5});
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/status/404")}, "retry": retry}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(
        msg.contains("404 Not Found") && msg.contains("status 404"),
        "{msg}"
    );
    assert_eq!(attempts, 1);
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/status/503")}, "retry": retry}),
        json!(null),
    )
    .await;
    assert_eq!(failure(&r).1, 3);
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/status/429")}, "retry": retry}),
        json!(null),
    )
    .await;
    assert_eq!(failure(&r).1, 3, "429 is retried");
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/status/404"), "fail_on_status": false}}),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["status"], 404);
    assert_eq!(output(&r)["body"], "status 404");

    // Connection refused: retryable, and the error names the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://127.0.0.1:{port}/x")}, "retry": {"max_attempts": 2, "backoff_ms": 5}}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert_eq!(attempts, 2);
}

#[tokio::test]
async fn http_retries_reuse_the_idempotency_key() {
    let (addr, seen) = http_server().await;
    let h = harness().await;
    // Three parallel elements, each failing once: every element's retry
    // carries its own step's key, and no two elements share one.
    let r = run(
        &h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "each", "kind": "flow.split"},
            {"id": "call", "kind": "http.request",
             "config": {"method": "POST", "url": format!("http://{addr}/flaky/{{{{ input }}}}")},
             "retry": {"max_attempts": 3, "backoff_ms": 5}},
            {"id": "all", "kind": "flow.join"},
            {"id": "out", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "each"}, {"from": "each", "to": "call"},
               {"from": "call", "to": "all"}, {"from": "all", "to": "out"}]),
        json!(["a", "b", "c"]),
    )
    .await;
    let out = &r.output["out"];
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    assert_eq!(out.as_array().unwrap().len(), 3);
    let flaky = seen.flaky.lock().unwrap();
    let mut keys = Vec::new();
    for k in ["a", "b", "c"] {
        let calls = &flaky[k];
        assert_eq!(calls.len(), 2, "{k}: one failure, one success");
        assert_eq!(calls[0], calls[1], "{k}: the retry reuses the key");
        assert!(
            calls[0].starts_with(&format!("{}/call/", r.id)),
            "{}",
            calls[0]
        );
        keys.push(calls[0].clone());
    }
    keys.dedup();
    assert_eq!(keys.len(), 3, "each element has its own key");
}

/// A step that acts on the world starts only once its run and its Started
/// record are committed: when the request arrives, the journal (read on
/// another connection, which sees only what is committed) already holds
/// both, also for a run started for its result (whose row is otherwise
/// queued, not waited for). Otherwise a crash right after the call leaves
/// an effect that no run records, and the caller's retry makes it again
/// under a new run's idempotency key.
#[tokio::test(flavor = "multi_thread")]
async fn an_effect_is_made_only_after_its_run_and_step_are_committed() {
    let h = harness().await;
    // What the journal held when each request arrived: (run, Started found).
    type Seen = Arc<Mutex<Vec<(String, bool)>>>;
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route(
            "/effect",
            axum::routing::post(
                |State((engine, seen)): State<(Engine, Seen)>, headers: HeaderMap| async move {
                    let key = headers["idempotency-key"].to_str().unwrap().to_string();
                    let run = key.split('/').next().unwrap().to_string();
                    let records = engine.store().run_records(&run).await.unwrap_or_default();
                    let started = engine.store().get_run(&run).await.unwrap().is_some()
                        && records.iter().any(|r| {
                            &*r.node == "call" && r.kind == sluice_store::RecordKind::Started
                        });
                    seen.lock().unwrap().push((run, started));
                    "ok"
                },
            ),
        )
        .with_state((h.engine.clone(), seen.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let p = plan(
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "set", "kind": "data.set", "config": {"values": {"x": 1}}},
            {"id": "call", "kind": "http.request", "config": {"method": "POST",
             "url": format!("http://{addr}/effect"), "idempotency_key": true, "response": "text"}},
            {"id": "out", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "set"}, {"from": "set", "to": "call"}, {"from": "call", "to": "out"}]),
    );
    for i in 0..20 {
        let handle = if i % 2 == 0 {
            h.engine
                .start_for_result(p.clone(), None, Arc::new(json!({})))
                .await
        } else {
            h.engine.start(p.clone(), None, Arc::new(json!({}))).await
        }
        .unwrap();
        let r = tokio::time::timeout(Duration::from_secs(30), handle.wait())
            .await
            .unwrap();
        assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 20);
    let untraced: Vec<&String> = seen.iter().filter(|(_, ok)| !ok).map(|(r, _)| r).collect();
    assert!(
        untraced.is_empty(),
        "effects made before their run and step were committed: {untraced:?}"
    );
}

/// An HTTPS server for 127.0.0.1 with a certificate from the test CA: it
/// answers every request with a small JSON body and closes.
async fn https_server(cert: &Path, key: &Path) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A refused handshake (an untrusting client) just ends here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = br#"{"secure": true}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                tls.write_all(head.as_bytes()).await.ok();
                tls.write_all(body).await.ok();
                tls.shutdown().await.ok();
            });
        }
    });
    addr
}

#[tokio::test]
async fn https_with_an_extra_root_and_refused_without_it() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, cert, key) = test_pki(pki.path());
    let addr = https_server(&cert, &key).await;
    let url = format!("https://{addr}/x");

    let mut settings = Settings::default();
    settings.tls.extra_roots = vec![ca];
    let h = harness_with(settings).await;
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": url}}),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["body"], json!({"secure": true}));

    // The system's roots alone do not know the test CA: refused, not retried.
    let h = harness().await;
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": url}, "retry": {"max_attempts": 3, "backoff_ms": 5}}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.to_lowercase().contains("certificate"), "{msg}");
    assert_eq!(attempts, 1, "{msg}");

    // A bad extra root is reported naming the file.
    let bad = pki.path().join("not-a-cert.pem");
    std::fs::write(&bad, "hello").unwrap();
    let mut settings = Settings::default();
    settings.tls.extra_roots = vec![bad];
    let h = harness_with(settings).await;
    assert!(
        h.engine
            .check_settings()
            .unwrap_err()
            .to_string()
            .contains("not-a-cert.pem")
    );
}

// ---- credentials and redaction --------------------------------------------

/// Every file under `dir`, read raw (SQLite main file, WAL, blobs, key file).
fn grep_dir(dir: &Path, needles: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                for n in needles {
                    if memchr_find(&bytes, n.as_bytes()) {
                        hits.push(format!("{} contains {n:?}", p.display()));
                    }
                }
            }
        }
    }
    hits
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn credentials_authenticate_and_never_reach_the_data_dir() {
    let (addr, _) = http_server().await;
    let h = harness().await;
    let store = h.engine.store();
    let token = "tok-9f8e7d6c5b4a";
    let password = "pw-Zq81!x y";
    let header_value = "hdr-0a1b2c3d4e5f";
    let query_value = "qry-77665544";
    store
        .put_credential("api", "bearer", &json!({"token": token}))
        .await
        .unwrap();
    store
        .put_credential(
            "login",
            "basic",
            &json!({"username": "ann", "password": password}),
        )
        .await
        .unwrap();
    store
        .put_credential(
            "key",
            "header",
            &json!({"name": "X-Api-Key", "value": header_value}),
        )
        .await
        .unwrap();
    store
        .put_credential(
            "qk",
            "query",
            &json!({"name": "api_key", "value": query_value}),
        )
        .await
        .unwrap();

    let url = format!("http://{addr}/echo");
    let call = |cred: &str| json!({"config": {"url": url, "credential": cred}});
    // The echo server sends the secret straight back: the step's output,
    // as journaled, must show it masked.
    let r = one(&h, "http.request", call("api"), json!(null)).await;
    assert_eq!(output(&r)["body"]["headers"]["authorization"], "Bearer ***");
    let r = one(&h, "http.request", call("login"), json!(null)).await;
    assert_eq!(output(&r)["body"]["headers"]["authorization"], "Basic ***");
    let r = one(&h, "http.request", call("key"), json!(null)).await;
    assert_eq!(output(&r)["body"]["headers"]["x-api-key"], "***");
    let r = one(&h, "http.request", call("qk"), json!(null)).await;
    assert_eq!(output(&r)["body"]["query"], "api_key=***");
    assert_eq!(output(&r)["url"], json!(format!("{url}?api_key=***")));
    let steps = sluice_runtime::report::steps(&store.run_records(&r.id).await.unwrap());
    assert!(!serde_json::to_string(&steps).unwrap().contains(query_value));

    // A credential never follows a redirect to another origin.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/elsewhere"), "credential": "api"}}),
        json!(null),
    )
    .await;
    assert!(output(&r)["body"]["headers"].get("authorization").is_none());
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/elsewhere"),
                          "headers": {"Authorization": "Bearer typed-in", "Cookie": "s=1", "X-Keep": "yes"}}}),
        json!(null),
    )
    .await;
    let headers = &output(&r)["body"]["headers"];
    assert!(
        headers.get("authorization").is_none() && headers.get("cookie").is_none(),
        "{headers}"
    );
    assert_eq!(headers["x-keep"], "yes");

    // Binary bodies are masked before they are base64-encoded.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/echo-bytes"), "credential": "api"}}),
        json!(null),
    )
    .await;
    let b64 = output(&r)["body"]["$bytes"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
        b"Bearer ***"
    );
    // ... and streamed into blobs (the secret straddles chunk boundaries).
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/echo-bytes?repeat=3000"), "credential": "api"}}),
        json!(null),
    )
    .await;
    let hash = output(&r)["body"]["$blob"].as_str().unwrap().to_string();
    let blob = std::fs::read(store.blobs().blob_path(&hash).unwrap()).unwrap();
    assert!(!memchr_find(&blob, token.as_bytes()));
    assert_eq!(
        blob.windows(10).filter(|w| w == b"Bearer ***").count(),
        3000
    );

    // Errors are masked too: a failing call whose URL holds the query secret.
    let r = one(
        &h,
        "http.request",
        json!({"config": {"url": format!("http://{addr}/status/400"), "credential": "qk"}}),
        json!(null),
    )
    .await;
    let (msg, _) = failure(&r);
    assert!(msg.contains("api_key=***"), "{msg}");

    // Wrong kind and missing credentials are refused before the run starts,
    // naming the node.
    let wrong = h
        .engine
        .start(
            plan(
                json!([{"id": "t", "kind": "trigger.manual"},
                       {"id": "mail", "kind": "email.send", "config": {"credential": "api", "to": "a@b.c", "text": "x"}}]),
                json!([{"from": "t", "to": "mail"}]),
            ),
            None,
            Arc::new(json!(null)),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("mail") && wrong.contains("`bearer` credential"),
        "{wrong}"
    );
    let missing = h
        .engine
        .start(
            plan(
                json!([{"id": "t", "kind": "trigger.manual"},
                       {"id": "get", "kind": "http.request", "config": {"url": url, "credential": "nope"}}]),
                json!([{"from": "t", "to": "get"}]),
            ),
            None,
            Arc::new(json!(null)),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("get") && missing.contains("credential `nope` does not exist"),
        "{missing}"
    );

    // Now grep every byte the engine wrote.
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("ann:{password}"));
    let hits = grep_dir(
        &h.dir.path().join("data"),
        &[
            token,
            password,
            header_value,
            query_value,
            basic.as_str(),
            "pw-Zq81%21x",
        ],
    );
    assert!(hits.is_empty(), "secrets leaked: {hits:#?}");
}

// ---- files -----------------------------------------------------------------

async fn file_harness() -> (Harness, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let allowed = root.path().join("allowed");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&allowed).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let mut settings = Settings::default();
    settings.files.allow = vec![allowed.clone()];
    (harness_in(root, settings).await, allowed, outside)
}

#[tokio::test]
async fn files_round_trip_in_every_format() {
    let (h, allowed, _) = file_harness().await;
    let rows = json!([{"sku": "A-1", "qty": 2, "note": "red, large"}, {"sku": "B-2", "qty": 5}]);
    let steps = json!([
        {"id": "t", "kind": "trigger.manual"},
        {"id": "w_json", "kind": "file.write", "config": {"path": "out/data.json", "content": "{{ input }}", "create_dirs": true}},
        {"id": "w_csv", "kind": "file.write", "config": {"path": "out/rows.csv", "content": "{{ nodes.t.rows }}"}},
        {"id": "w_txt", "kind": "file.write", "config": {"path": "out/note.txt", "content": "hello {{ nodes.t.rows[0].sku }}"}},
        {"id": "r_json", "kind": "file.read", "config": {"path": "out/data.json"}},
        {"id": "r_csv", "kind": "file.read", "config": {"path": "out/rows.csv"}},
        {"id": "r_txt", "kind": "file.read", "config": {"path": "{{ nodes.w_txt.path }}"}},
        {"id": "r_bytes", "kind": "file.read", "config": {"path": "out/note.txt", "format": "bytes"}},
        {"id": "all", "kind": "flow.merge", "config": {"mode": "all"}},
        {"id": "out", "kind": "output.end"}
    ]);
    let edges = json!([
        {"from": "t", "to": "w_json"}, {"from": "w_json", "to": "w_csv"}, {"from": "w_csv", "to": "w_txt"},
        {"from": "w_txt", "to": "r_json"}, {"from": "w_txt", "to": "r_csv"}, {"from": "w_txt", "to": "r_txt"},
        {"from": "w_txt", "to": "r_bytes"},
        {"from": "r_json", "to": "all"}, {"from": "r_csv", "to": "all"}, {"from": "r_txt", "to": "all"},
        {"from": "r_bytes", "to": "all"}, {"from": "all", "to": "out"}
    ]);
    let r = run(&h, steps, edges, json!({"rows": rows})).await;
    let out = output(&r);
    assert_eq!(out["r_json"]["content"], json!({"rows": rows}));
    assert_eq!(
        out["r_csv"]["content"],
        json!([{"sku": "A-1", "qty": "2", "note": "red, large"}, {"sku": "B-2", "qty": "5", "note": ""}])
    );
    assert_eq!(out["r_txt"]["content"], "hello A-1");
    assert_eq!(
        out["r_bytes"]["content"]["$bytes"],
        base64::engine::general_purpose::STANDARD.encode("hello A-1")
    );
    let real = std::fs::canonicalize(&allowed).unwrap();
    assert_eq!(
        out["r_txt"]["path"],
        json!(real.join("out/note.txt").display().to_string())
    );
    assert_eq!(
        std::fs::read_to_string(allowed.join("out/rows.csv")).unwrap(),
        "sku,qty,note\nA-1,2,\"red, large\"\nB-2,5,\n"
    );
    // A new file gets the mode any new file gets here (not a temp file's 0600).
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(allowed.join("plain.txt"), "x").unwrap();
    let mode = |p: &str| {
        std::fs::metadata(allowed.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("out/note.txt"), mode("plain.txt"));
    // No temp files are left beside the targets.
    let names: Vec<String> = std::fs::read_dir(allowed.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");

    // A large binary file travels as a blob, and writes back byte for byte.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(allowed.join("big.bin"), &big).unwrap();
    let r = run(
        &h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "r", "kind": "file.read", "config": {"path": "big.bin", "format": "bytes"}},
            {"id": "w", "kind": "file.write", "config": {"path": "copy.bin", "format": "bytes", "content": "{{ input.content }}"}},
            {"id": "out", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "r"}, {"from": "r", "to": "w"}, {"from": "w", "to": "out"}]),
        json!(null),
    )
    .await;
    assert_eq!(output(&r)["size"], big.len());
    assert_eq!(std::fs::read(allowed.join("copy.bin")).unwrap(), big);

    // if_exists: fail keeps the file; bad JSON names line and column.
    std::fs::write(allowed.join("bad.json"), "{\n  \"a\": 1,\n  oops\n}").unwrap();
    let r = one(
        &h,
        "file.read",
        json!({"config": {"path": "bad.json"}}),
        json!(null),
    )
    .await;
    let (msg, _) = failure(&r);
    assert!(msg.contains("not valid JSON (line 3, column 3)"), "{msg}");
    let r = one(
        &h,
        "file.write",
        json!({"config": {"path": "out/note.txt", "content": "new", "if_exists": "fail"}}),
        json!(null),
    )
    .await;
    assert!(failure(&r).0.contains("exists"));
    assert_eq!(
        std::fs::read_to_string(allowed.join("out/note.txt")).unwrap(),
        "hello A-1"
    );
}

#[tokio::test]
async fn files_outside_the_allowed_folders_are_refused() {
    let (h, allowed, outside) = file_harness().await;
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(&outside, allowed.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), allowed.join("alias.txt")).unwrap();
    let abs = outside.join("secret.txt").display().to_string();
    for path in [
        "../outside/secret.txt",
        abs.as_str(),
        "escape/secret.txt",
        "alias.txt",
    ] {
        let r = one(
            &h,
            "file.read",
            json!({"config": {"path": path}}),
            json!(null),
        )
        .await;
        let (msg, attempts) = failure(&r);
        assert!(msg.contains("outside the allowed folders"), "{path}: {msg}");
        assert!(
            msg.contains(&format!("`{path}`")),
            "the error names the path: {msg}"
        );
        assert_eq!(attempts, 1);
        let r = one(
            &h,
            "file.write",
            json!({"config": {"path": path, "content": "pwned"}}),
            json!(null),
        )
        .await;
        assert!(
            failure(&r).0.contains("outside the allowed folders"),
            "{path}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "nothing was written outside"
    );

    // No allowed folders at all: refused with the setting to change.
    let h2 = harness().await;
    let r = one(
        &h2,
        "file.read",
        json!({"config": {"path": "/etc/hostname"}}),
        json!(null),
    )
    .await;
    assert!(failure(&r).0.contains("[files] allow"));
}

// ---- email.send over a real SMTP server -------------------------------------

const SMTP_SERVER: &str = r#"
import asyncio, base64, json, ssl, sys
from email import message_from_bytes, policy
from aiosmtpd.smtp import SMTP, AuthResult

out_path, mode, cert, key = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

class Handler:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("busy"):
            return "451 4.3.0 mailbox busy, try later"
        if address.startswith("nobody"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        msg = message_from_bytes(envelope.content, policy=policy.default)
        text = msg.get_body(preferencelist=("plain",))
        html = msg.get_body(preferencelist=("html",))
        rec = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "tls": session.ssl is not None
                   or server.transport.get_extra_info("ssl_object") is not None,
            "auth": session.authenticated,
            "from": str(msg["From"]), "to": str(msg["To"]), "cc": str(msg["Cc"] or ""),
            "bcc": str(msg["Bcc"] or ""), "subject": str(msg["Subject"]),
            "message_id": str(msg["Message-ID"]),
            "text": text.get_content() if text else None,
            "html": html.get_content() if html else None,
            "attachments": [
                {"filename": a.get_filename(), "content_type": a.get_content_type(),
                 "data": base64.b64encode(a.get_payload(decode=True)).decode()}
                for a in msg.iter_attachments()
            ],
        }
        with open(out_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return "250 2.0.0 queued as 42"

def authenticator(server, session, envelope, mechanism, auth_data):
    ok = auth_data.login == b"mailer" and auth_data.password == b"smtp-pw-31337"
    # handled=False: a refusal is answered 535 (aiosmtpd's default, True,
    # leaves it unanswered and the client waits).
    return AuthResult(success=ok, handled=False)

async def main():
    ctx = None
    if mode != "none":
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
    def factory():
        if mode == "starttls":
            return SMTP(Handler(), tls_context=ctx, require_starttls=True,
                        authenticator=authenticator, auth_require_tls=True)
        return SMTP(Handler(), authenticator=authenticator, auth_require_tls=False)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", 0,
                                      ssl=ctx if mode == "tls" else None)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"#;

struct Smtp {
    child: tokio::process::Child,
    port: u16,
    received: PathBuf,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        self.child.start_kill().ok();
    }
}

impl Smtp {
    fn messages(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.received)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A CA and a server certificate for 127.0.0.1 signed by it.
fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (ca, crt, k) = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    );
    std::fs::write(&ca, ca_cert.pem()).unwrap();
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (ca, crt, k)
}

async fn smtp_server(dir: &Path, mode: &str, cert: &Path, key: &Path) -> Smtp {
    use tokio::io::AsyncBufReadExt;
    let script = dir.join("smtp_server.py");
    std::fs::write(&script, SMTP_SERVER).unwrap();
    let received = dir.join(format!("received-{mode}.jsonl"));
    // Debian's interpreter, where python3-aiosmtpd installs (a pyenv or
    // venv python3 earlier on PATH would not see it).
    let python = std::env::var("SLUICE_TEST_PYTHON").unwrap_or_else(|_| {
        if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3".into()
        } else {
            "python3".into()
        }
    });
    let mut child = tokio::process::Command::new(python)
        .arg(&script)
        .arg(&received)
        .arg(mode)
        .arg(cert)
        .arg(key)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with aiosmtpd (cargo xtask test installs python3-aiosmtpd)");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::BufReader::new(stdout).read_line(&mut line),
    )
    .await
    .expect("the SMTP server did not start")
    .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("SMTP server said {line:?}"));
    Smtp {
        child,
        port,
        received,
    }
}

#[tokio::test]
async fn email_is_delivered_field_by_field() {
    let h = harness().await;
    let smtp = smtp_server(h.dir.path(), "none", Path::new("-"), Path::new("-")).await;
    h.engine
        .store()
        .put_credential(
            "mail",
            "smtp",
            &json!({"host": "127.0.0.1", "port": smtp.port, "security": "none"}),
        )
        .await
        .unwrap();
    let r = one(
        &h,
        "email.send",
        json!({"config": {
            "credential": "mail",
            "from": "Sluice <robot@example.org>",
            "to": ["Ann <ann@example.org>", "bob@example.org"],
            "cc": "carol@example.org",
            "bcc": ["dave@example.org"],
            "subject": "Order {{ input.id }} shipped",
            "text": "Hello {{ input.name }}, order {{ input.id }} is on its way.",
            "html": "<p>Hello <b>{{ input.name }}</b></p>",
            "attachments": [
                {"filename": "order.json", "content": "{{ input | tojson }}", "content_type": "application/json"},
                {"filename": "logo.png", "content": {"$bytes": "iVBORw0=", "size": 5, "content_type": "image/png"}}
            ]
        }}),
        json!({"id": "o-42", "name": "Ann"}),
    )
    .await;
    let out = output(&r).clone();
    let msgs = smtp.messages();
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert_eq!(m["mail_from"], "robot@example.org");
    assert_eq!(
        m["rcpt_tos"],
        json!([
            "ann@example.org",
            "bob@example.org",
            "carol@example.org",
            "dave@example.org"
        ])
    );
    assert_eq!(m["from"], "Sluice <robot@example.org>");
    assert_eq!(m["to"], "Ann <ann@example.org>, bob@example.org");
    assert_eq!(m["cc"], "carol@example.org");
    assert_eq!(m["bcc"], "", "Bcc is not in the headers");
    assert_eq!(m["subject"], "Order o-42 shipped");
    assert_eq!(
        m["text"].as_str().unwrap().trim_end(),
        "Hello Ann, order o-42 is on its way."
    );
    assert_eq!(
        m["html"].as_str().unwrap().trim_end(),
        "<p>Hello <b>Ann</b></p>"
    );
    assert_eq!(m["message_id"], out["message_id"]);
    assert!(
        out["message_id"]
            .as_str()
            .unwrap()
            .ends_with("@example.org>")
    );
    assert_eq!(out["accepted"], m["rcpt_tos"]);
    assert!(
        out["response"].as_str().unwrap().starts_with("250"),
        "{out}"
    );
    let atts = m["attachments"].as_array().unwrap();
    assert_eq!(atts.len(), 2);
    assert_eq!(atts[0]["filename"], "order.json");
    assert_eq!(atts[0]["content_type"], "application/json");
    let order = base64::engine::general_purpose::STANDARD
        .decode(atts[0]["data"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&order).unwrap(),
        json!({"id": "o-42", "name": "Ann"})
    );
    assert_eq!(atts[1]["filename"], "logo.png");
    assert_eq!(atts[1]["content_type"], "image/png");
    assert_eq!(atts[1]["data"], "iVBORw0=");

    // 4xx: retried; 5xx: not.
    let retry = json!({"max_attempts": 3, "backoff_ms": 5});
    let r = one(
        &h,
        "email.send",
        json!({"config": {"credential": "mail", "from": "a@example.org", "to": "busy@example.org", "text": "x"}, "retry": retry}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.contains("451") || msg.contains("mailbox busy"), "{msg}");
    assert_eq!(attempts, 3);
    let r = one(
        &h,
        "email.send",
        json!({"config": {"credential": "mail", "from": "a@example.org", "to": "nobody@example.org", "text": "x"}, "retry": retry}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.contains("550") || msg.contains("no such user"), "{msg}");
    assert_eq!(attempts, 1);
    assert_eq!(smtp.messages().len(), 1, "nothing else was delivered");
}

#[tokio::test]
async fn email_over_starttls_and_tls_with_auth() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, cert, key) = test_pki(pki.path());
    let mut settings = Settings::default();
    settings.tls.extra_roots = vec![ca];
    let h = harness_with(settings).await;
    for mode in ["starttls", "tls"] {
        let smtp = smtp_server(h.dir.path(), mode, &cert, &key).await;
        let name = format!("mail-{mode}");
        h.engine
            .store()
            .put_credential(
                &name,
                "smtp",
                &json!({"host": "127.0.0.1", "port": smtp.port, "security": mode,
                        "username": "mailer", "password": "smtp-pw-31337"}),
            )
            .await
            .unwrap();
        let r = one(
            &h,
            "email.send",
            json!({"config": {"credential": name, "from": "robot@example.org", "to": "ann@example.org",
                              "subject": "secure", "text": "over {{ input }}"}}),
            json!(mode),
        )
        .await;
        output(&r);
        let msgs = smtp.messages();
        assert_eq!(msgs.len(), 1, "{mode}");
        assert_eq!(msgs[0]["tls"], true, "{mode}");
        assert_eq!(msgs[0]["auth"], true, "{mode}");
        assert_eq!(
            msgs[0]["text"].as_str().unwrap().trim_end(),
            format!("over {mode}")
        );
    }
    // Without the test CA the certificate is refused (terminal, not retried).
    let h2 = harness().await;
    let smtp = smtp_server(h2.dir.path(), "starttls", &cert, &key).await;
    h2.engine
        .store()
        .put_credential(
            "m",
            "smtp",
            &json!({"host": "127.0.0.1", "port": smtp.port, "security": "starttls",
                    "username": "mailer", "password": "smtp-pw-31337"}),
        )
        .await
        .unwrap();
    let r = one(
        &h2,
        "email.send",
        json!({"config": {"credential": "m", "from": "a@example.org", "to": "ann@example.org", "text": "x"},
               "retry": {"max_attempts": 3, "backoff_ms": 5}}),
        json!(null),
    )
    .await;
    let (msg, attempts) = failure(&r);
    assert!(msg.to_lowercase().contains("certificate"), "{msg}");
    assert_eq!(attempts, 1);
    assert!(smtp.messages().is_empty());
    let hits = grep_dir(&h.dir.path().join("data"), &["smtp-pw-31337"]);
    assert!(hits.is_empty(), "{hits:?}");
}

#[tokio::test]
async fn an_email_sent_before_an_approval_carries_its_resume_link() {
    let h = harness().await;
    let smtp = smtp_server(h.dir.path(), "none", Path::new("-"), Path::new("-")).await;
    h.engine
        .store()
        .put_credential(
            "mail",
            "smtp",
            &json!({"host": "127.0.0.1", "port": smtp.port, "security": "none"}),
        )
        .await
        .unwrap();
    let handle = h
        .engine
        .start(
            plan(
                json!([
                    {"id": "t", "kind": "trigger.manual"},
                    {"id": "ask", "kind": "email.send", "config": {
                        "credential": "mail", "from": "robot@example.org", "to": "boss@example.org",
                        "subject": "Ship order {{ input.id }}?",
                        "text": "Approve: {{ run.resume.approve }}"}},
                    {"id": "approve", "kind": "flow.approval"},
                    {"id": "ship", "kind": "output.end", "config": {"value": "{{ input }}"}}
                ]),
                json!([
                    {"from": "t", "to": "ask"}, {"from": "ask", "to": "approve"},
                    {"from": "approve:approved", "to": "ship"}
                ]),
            ),
            None,
            Arc::new(json!({"id": "o-7"})),
        )
        .await
        .unwrap();
    let run = handle.id.clone();
    assert_eq!(handle.wait().await.status, Status::Waiting);
    let msgs = smtp.messages();
    assert_eq!(msgs.len(), 1);
    let text = msgs[0]["text"].as_str().unwrap().trim_end().to_string();
    let link = text.strip_prefix("Approve: ").unwrap();
    let token = link.rsplit('/').next().unwrap();
    let (named_run, node, lineage) = h.engine.read_resume_token(token).unwrap();
    assert_eq!(
        (named_run.as_str(), node.as_str(), lineage.as_str()),
        (run.as_str(), "approve", "")
    );
    h.engine
        .signal(
            &run,
            sluice_runtime::executor::Signal {
                node: Some(node),
                lineage: Some(lineage),
                activation: None,
                kind: sluice_runtime::executor::SignalKind::Decide(
                    sluice_api::Decision::Approved,
                    json!({"by": "boss"}),
                ),
            },
        )
        .await
        .unwrap();
    let r = h.engine.wait_for_end(&run).await.unwrap();
    assert_eq!(r.output, json!({"ship": {"by": "boss"}}));
    // The email was sent once, before the run parked.
    assert_eq!(smtp.messages().len(), 1);
}

// ---- testing credentials (the editor's Credentials page) -------------------

/// A server that takes `Bearer good-token-1` on `/private` and, as an
/// OpenAI-compatible one, lists two models on `/v1/models` for `sk-good`.
async fn guarded_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route(
            "/private",
            axum::routing::get(|headers: HeaderMap| async move {
                match headers.get("authorization").and_then(|v| v.to_str().ok()) {
                    Some("Bearer good-token-1") => (StatusCode::OK, "welcome".to_string()),
                    // A server that echoes what it got, as some do.
                    other => (
                        StatusCode::UNAUTHORIZED,
                        format!("bad credentials: {other:?}"),
                    ),
                }
            }),
        )
        .route(
            "/v1/models",
            axum::routing::get(|headers: HeaderMap| async move {
                if headers.get("authorization").and_then(|v| v.to_str().ok())
                    == Some("Bearer sk-good")
                {
                    axum::Json(json!({"object": "list", "data": [
                        {"id": "small", "object": "model"}, {"id": "large", "object": "model"}]}))
                    .into_response()
                } else {
                    (
                        StatusCode::UNAUTHORIZED,
                        axum::Json(json!({"error": {"message": "Incorrect API key provided",
                                                    "code": "invalid_api_key"}})),
                    )
                        .into_response()
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test]
async fn credentials_are_tested_against_their_servers_and_their_uses_are_found() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, cert, key) = test_pki(pki.path());
    let mut settings = Settings::default();
    settings.tls.extra_roots = vec![ca];
    let h = harness_with(settings).await;
    let store = h.engine.store();
    let addr = guarded_server().await;

    // HTTP: a GET of the URL given, with the credential; 2xx is ok.
    store
        .put_credential("good", "bearer", &json!({"token": "good-token-1"}))
        .await
        .unwrap();
    store
        .put_credential("bad", "bearer", &json!({"token": "wrong-token-2"}))
        .await
        .unwrap();
    let url = format!("http://{addr}/private");
    let t = h
        .engine
        .test_credential("good", Some(url.clone()))
        .await
        .unwrap();
    assert!(t.ok, "{}", t.message);
    assert_eq!(t.message, format!("{url} answered 200"));
    let t = h
        .engine
        .test_credential("bad", Some(url.clone()))
        .await
        .unwrap();
    assert!(!t.ok);
    assert!(t.message.contains("401"), "{}", t.message);
    assert!(
        !t.message.contains("wrong-token-2"),
        "masked: {}",
        t.message
    );
    // No URL given and none to borrow: the caller is told what to give.
    let err = h.engine.test_credential("good", None).await.unwrap_err();
    assert!(err.to_string().contains("give a URL"), "{err}");
    // The URL of an http.request node that uses it, written out.
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "fetch",
        "nodes": [{"id": "t", "kind": "trigger.manual"},
                  {"id": "get", "kind": "http.request", "config": {"url": url, "credential": "good"}},
                  {"id": "templated", "kind": "http.request",
                   "config": {"url": "{{ input.url }}", "credential": "bad"}}],
        "edges": [{"from": "t", "to": "get"}, {"from": "t", "to": "templated"}]}))
    .unwrap();
    h.engine
        .save_draft(&Plan::new(wf).unwrap(), None)
        .await
        .unwrap();
    // Only a published workflow's URL is borrowed: a draft may be a peer's
    // edit, and the secret must not go where only a peer said.
    let err = h.engine.test_credential("good", None).await.unwrap_err();
    assert!(err.to_string().contains("give a URL"), "{err}");
    h.engine.publish("fetch", None).await.unwrap();
    let t = h.engine.test_credential("good", None).await.unwrap();
    assert!(t.ok, "{}", t.message);
    let err = h.engine.test_credential("bad", None).await.unwrap_err();
    assert!(err.to_string().contains("give a URL"), "{err}");
    let uses = h.engine.credential_uses().await.unwrap();
    let of = |name: &str| {
        uses.get(name)
            .map(|u| {
                u.iter()
                    .map(|u| {
                        format!(
                            "{}/{} {} draft={} published={}",
                            u.workflow, u.node, u.kind, u.draft, u.published
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        of("good"),
        ["fetch/get http.request draft=true published=true"]
    );
    assert_eq!(
        of("bad"),
        ["fetch/templated http.request draft=true published=true"]
    );
    assert!(of("mail").is_empty());

    // OpenAI-compatible: the model list, which costs nothing.
    store
        .put_credential(
            "ai",
            "openai",
            &json!({"base_url": format!("http://{addr}/v1"), "api_key": "sk-good"}),
        )
        .await
        .unwrap();
    store
        .put_credential(
            "ai-bad",
            "openai",
            &json!({"base_url": format!("http://{addr}/v1"), "api_key": "sk-nope-nope"}),
        )
        .await
        .unwrap();
    let t = h.engine.test_credential("ai", None).await.unwrap();
    assert!(t.ok, "{}", t.message);
    assert!(t.message.ends_with("2 models available"), "{}", t.message);
    let t = h.engine.test_credential("ai-bad", None).await.unwrap();
    assert!(!t.ok);
    assert!(
        t.message.contains("401") && t.message.contains("Incorrect API key"),
        "{}",
        t.message
    );

    // SMTP: a handshake, STARTTLS and the login; nothing is sent.
    let smtp = smtp_server(h.dir.path(), "starttls", &cert, &key).await;
    for (name, password, ok) in [
        ("mail", "smtp-pw-31337", true),
        ("mail-bad", "not-the-pw-9", false),
    ] {
        store
            .put_credential(
                name,
                "smtp",
                &json!({"host": "127.0.0.1", "port": smtp.port, "security": "starttls",
                        "username": "mailer", "password": password}),
            )
            .await
            .unwrap();
        let t = h.engine.test_credential(name, None).await.unwrap();
        assert_eq!(t.ok, ok, "{name}: {}", t.message);
        assert!(!t.message.contains(password), "{}", t.message);
        if ok {
            assert!(t.message.contains("login of mailer"), "{}", t.message);
        } else {
            assert!(t.message.contains("535"), "{}", t.message);
        }
    }
    assert!(smtp.messages().is_empty(), "a test sends nothing");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    store
        .put_credential(
            "nowhere",
            "smtp",
            &json!({"host": "127.0.0.1", "port": port, "security": "none"}),
        )
        .await
        .unwrap();
    let t = h.engine.test_credential("nowhere", None).await.unwrap();
    assert!(!t.ok);
    assert!(
        t.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        t.message
    );

    let err = h.engine.test_credential("missing", None).await.unwrap_err();
    assert_eq!(err.to_string(), "credential `missing` not found");
    // Tests leave nothing of the secrets behind.
    let hits = grep_dir(
        &h.dir.path().join("data"),
        &[
            "good-token-1",
            "wrong-token-2",
            "sk-good",
            "smtp-pw-31337",
            "not-the-pw-9",
        ],
    );
    assert!(hits.is_empty(), "{hits:?}");
}
