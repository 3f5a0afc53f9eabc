//! The shared worker under kills, with real processes: a restate-server, a
//! `sluice worker` and a `sluice run --on worker` (or `sluice serve`) engine. A handed-off run
//! whose second step blocks on a loopback server loses nothing when the
//! worker is SIGKILLed mid-step (or restate-server is, and restarted on its
//! base dir): the run finishes, the step that finished before the kill ran
//! once, and the step in flight ran again with the same idempotency key.
//! And `sluice deploy` through the CLI: the worker's hook port answers the
//! deployed webhook, and `--stop` takes it down.

#[path = "../../worker/tests/support/mod.rs"]
mod restate;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// What the loopback server saw: (path, idempotency key), in order.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A loopback HTTP/1.1 server: `/a` answers at once; the first `/b` is held
/// (never answered: its caller dies), later ones answer at once.
fn blocking_server() -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let log = log.clone();
            std::thread::spawn(move || {
                use std::io::{BufRead, BufReader, Read, Write};
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).ok();
                let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                let (mut key, mut len) = (String::new(), 0usize);
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                    let lower = h.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("idempotency-key:") {
                        key = v.trim().to_string();
                    }
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).ok();
                let first_b = {
                    let mut seen = log.lock().unwrap();
                    seen.push((path.clone(), key));
                    path == "/b" && seen.iter().filter(|(p, _)| p == "/b").count() == 1
                };
                if first_b {
                    // Held until the process ends: the worker dies meanwhile.
                    std::thread::sleep(Duration::from_secs(3600));
                }
                let out = format!("{{\"path\":\"{path}\"}}");
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{out}",
                    out.len()
                )
                .ok();
            });
        }
    });
    (url, seen)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `sluice worker` process, killed when dropped (a failed test leaves none).
/// Its hook port is the second field.
struct WorkerProcess(Child, u16);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// `sluice worker` on `port`, registered with `admin`.
fn worker(data: &Path, port: u16, server: &restate::Restate) -> WorkerProcess {
    std::fs::create_dir_all(data).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.join("worker.log"))
        .unwrap();
    let hooks = free_port();
    let mut child = Command::new(SLUICE)
        .args(["worker", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--restate-admin", &server.admin])
        .args(["--restate-ingress", &server.ingress])
        .args(["--hooks", &format!("127.0.0.1:{hooks}")])
        .env("SLUICE_DATA_DIR", data)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // Registered once it printed so.
    let registered = lines
        .by_ref()
        .any(|line| line.is_ok_and(|l| l.starts_with("registered with")));
    if !registered {
        let log = std::fs::read_to_string(data.join("worker.log")).unwrap_or_default();
        panic!("sluice worker ended before registering; it said: {log}");
    }
    std::thread::spawn(move || for _ in lines {});
    WorkerProcess(child, hooks)
}

fn workflow(url: &str) -> String {
    serde_json::json!({
        "format": "sluice.workflow/v1", "id": "killme",
        "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "a", "kind": "http.request", "config": {"method": "POST", "url": format!("{url}/a")}},
            {"id": "b", "kind": "http.request", "config": {"method": "POST", "url": format!("{url}/b")}},
            {"id": "end", "kind": "output.end", "config": {"value": {"a": "{{ nodes.a.body.path }}", "b": "{{ input.body.path }}"}}}
        ],
        "edges": [{"from": "t", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "end"}]
    })
    .to_string()
}

/// Kills what `kill` kills while step `b` is in flight; checks the run ends
/// as if nothing happened.
fn survives(kill: impl FnOnce(&mut restate::Restate, &mut WorkerProcess, &Path, u16)) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = restate::Restate::start(&dir.path().join("restate"));
    let worker_dir = dir.path().join("worker");
    let port = free_port();
    let mut w = worker(&worker_dir, port, &server);
    let engine_dir = dir.path().join("engine");
    std::fs::create_dir_all(&engine_dir).unwrap();
    std::fs::write(
        engine_dir.join("config.toml"),
        format!("[worker]\ningress = \"{}\"\n", server.ingress),
    )
    .unwrap();
    let (url, seen) = blocking_server();
    let flow = dir.path().join("killme.flow.json");
    std::fs::write(&flow, workflow(&url)).unwrap();
    let run = Command::new(SLUICE)
        .args(["run", flow.to_str().unwrap(), "--on", "worker"])
        .env("SLUICE_DATA_DIR", &engine_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut run = run;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.lock().unwrap().iter().any(|(p, _)| p == "/b") {
        if Instant::now() > deadline || run.try_wait().unwrap().is_some() {
            run.kill().ok();
            let out = run.wait_with_output().unwrap();
            panic!(
                "step b was never called; sluice run said: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(&mut server, &mut w, &worker_dir, port);
    let deadline = Instant::now() + Duration::from_secs(90);
    while run.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            run.kill().ok();
            let out = run.wait_with_output().unwrap();
            panic!(
                "sluice run did not finish in 90 s after the kill; it said: {}\nrestate: {}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(server.base.join("restate.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "sluice run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let output: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(output, serde_json::json!({"end": {"a": "/a", "b": "/b"}}));
    let seen = seen.lock().unwrap().clone();
    let a: Vec<_> = seen.iter().filter(|(p, _)| p == "/a").collect();
    let b: Vec<_> = seen.iter().filter(|(p, _)| p == "/b").collect();
    assert_eq!(a.len(), 1, "the finished step ran once: {seen:?}");
    assert_eq!(b.len(), 2, "the step in flight ran again: {seen:?}");
    assert!(
        !b[0].1.is_empty() && b[0].1 == b[1].1,
        "one idempotency key: {seen:?}"
    );
    assert!(b[0].1.ends_with("/b//0"), "{seen:?}");
    drop(w);
}

#[test]
fn a_worker_killed_mid_step_loses_nothing() {
    survives(|server, w, worker_dir, port| {
        w.0.kill().unwrap();
        w.0.wait().unwrap();
        *w = worker(worker_dir, port, server);
    });
}

#[test]
fn a_restate_server_killed_mid_step_and_restarted_loses_nothing() {
    survives(|server, _w, _dir, _port| server.restart());
}

#[test]
fn sluice_deploy_puts_a_webhook_on_the_workers_port_and_stop_takes_it_down() {
    let dir = tempfile::tempdir().unwrap();
    let server = restate::Restate::start(&dir.path().join("restate"));
    let w = worker(&dir.path().join("worker"), free_port(), &server);
    let engine_dir = dir.path().join("engine");
    std::fs::create_dir_all(&engine_dir).unwrap();
    let sluice = |args: &[&str]| {
        Command::new(SLUICE)
            .args(args)
            .env("SLUICE_DATA_DIR", &engine_dir)
            .output()
            .unwrap()
    };
    let flow = dir.path().join("greet.flow.json");
    std::fs::write(
        &flow,
        serde_json::json!({
            "format": "sluice.workflow/v1", "id": "greet",
            "nodes": [
                {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "hi", "respond": "when_finished"}},
                {"id": "end", "kind": "output.end", "config": {"value": {"hello": "{{ input.body.name }}"}}}
            ],
            "edges": [{"from": "hook", "to": "end"}]
        })
        .to_string(),
    )
    .unwrap();
    let o = sluice(&["import", flow.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // No worker configured yet: said, with what to set.
    let o = sluice(&["deploy", "greet"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[worker] ingress"), "{err}");

    std::fs::write(
        engine_dir.join("config.toml"),
        format!(
            "[worker]\ningress = \"{}\"\nadmin = \"{}\"\n",
            server.ingress, server.admin
        ),
    )
    .unwrap();
    let o = sluice(&["deploy", "greet"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("deployed `greet`") && out.contains("POST /hook/greet/hi"),
        "{out}"
    );

    let call = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", w.1)).unwrap();
        use std::io::{Read, Write};
        let body = r#"{"name":"Ada"}"#;
        write!(
            s,
            "POST /hook/greet/hi HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    };
    let answer = call();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#"{"end":{"hello":"Ada"}}"#), "{answer}");

    let o = sluice(&["deploy", "greet", "--stop"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("is not deployed"));
    std::thread::sleep(Duration::from_millis(1100));
    let answer = call();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

/// `METHOD path` with a bearer token and a JSON body on a loopback port:
/// the status and the body.
fn http(port: u16, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// The engine as `sluice serve`: the run is started through its API, the
/// worker is SIGKILLed mid-step and started again; the run still finishes
/// as if nothing happened.
#[test]
fn a_run_handed_off_by_sluice_serve_survives_a_worker_kill() {
    let dir = tempfile::tempdir().unwrap();
    let server = restate::Restate::start(&dir.path().join("restate"));
    let worker_dir = dir.path().join("worker");
    let worker_port = free_port();
    let mut w = worker(&worker_dir, worker_port, &server);
    let engine_dir = dir.path().join("engine");
    std::fs::create_dir_all(&engine_dir).unwrap();
    std::fs::write(
        engine_dir.join("config.toml"),
        format!(
            "[worker]\ningress = \"{}\"\nadmin = \"{}\"\n",
            server.ingress, server.admin
        ),
    )
    .unwrap();
    let (url, seen) = blocking_server();
    let api = free_port();
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let serve = Command::new(SLUICE)
        .args(["serve", "--listen", &format!("127.0.0.1:{api}")])
        .env("SLUICE_DATA_DIR", &engine_dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let serve = WorkerProcess(serve, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let token = loop {
        let token = std::fs::read_to_string(engine_dir.join("api-token")).unwrap_or_default();
        if !token.is_empty()
            && std::net::TcpStream::connect(("127.0.0.1", api)).is_ok()
            && http(api, "GET", "/api/v1/health", token.trim(), "").0 == 200
        {
            break token.trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "sluice serve did not come up: {}",
            std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let (status, body) = http(
        api,
        "PUT",
        "/api/v1/workflows/killme?publish=true",
        &token,
        &workflow(&url),
    );
    assert!(status == 200 || status == 201, "{status} {body}");
    let (status, body) = http(
        api,
        "POST",
        "/api/v1/workflows/killme/runs",
        &token,
        r#"{"input": {}, "run_on": "worker"}"#,
    );
    assert!((200..300).contains(&status), "{status} {body}");
    let run: serde_json::Value = serde_json::from_str(&body).unwrap();
    let run_id = run["id"].as_str().unwrap().to_string();

    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.lock().unwrap().iter().any(|(p, _)| p == "/b") {
        assert!(Instant::now() < deadline, "step b was never called");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SIGKILL mid-step, then a new worker on the same address.
    w.0.kill().unwrap();
    w.0.wait().unwrap();
    w = worker(&worker_dir, worker_port, &server);

    let deadline = Instant::now() + Duration::from_secs(90);
    let detail = loop {
        let (_, body) = http(api, "GET", &format!("/api/v1/runs/{run_id}"), &token, "");
        let detail: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if detail["status"] != "running" && !detail["status"].is_null() {
            break detail;
        }
        assert!(Instant::now() < deadline, "the run did not finish: {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(detail["status"], "succeeded", "{detail}");
    assert_eq!(detail["executor"], "worker", "{detail}");
    assert_eq!(
        detail["output"],
        serde_json::json!({"end": {"a": "/a", "b": "/b"}})
    );
    let seen = seen.lock().unwrap().clone();
    let a = seen.iter().filter(|(p, _)| p == "/a").count();
    let b: Vec<_> = seen.iter().filter(|(p, _)| p == "/b").collect();
    assert_eq!(a, 1, "the finished step ran once: {seen:?}");
    assert_eq!(b.len(), 2, "the step in flight ran again: {seen:?}");
    assert_eq!(b[0].1, b[1].1, "one idempotency key: {seen:?}");
    drop((w, serve));
}
