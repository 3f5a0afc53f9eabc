//! `sluice serve` as a process: it prints where it listens, answers with the
//! token from the data dir, stops cleanly on SIGTERM, and after a SIGKILL
//! under load every run it acknowledged (202) completes on restart.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

struct Serve {
    child: Child,
    base: String,
    token: String,
}

fn start(data: &Path) -> Serve {
    let mut child = Command::new(SLUICE)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLUICE_DATA_DIR", data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().unwrap().unwrap();
    let base = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected: {first}"))
        .to_string();
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let token = std::fs::read_to_string(data.join("api-token"))
        .unwrap()
        .trim()
        .to_string();
    Serve { child, base, token }
}

fn client() -> reqwest::Client {
    sluice_nodes::http::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_answers_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let r = client()
        .get(format!("{}/api/v1/health", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    #[cfg(unix)]
    {
        let pid = s.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = s.child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "{status:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_webhook_runs_complete_after_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let c = client();
    let wf = json!({"format": "sluice.workflow/v1", "id": "acks", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"path": "go", "respond": "immediately"}},
        {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 300}},
        {"id": "end", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}],
        "edges": [{"from": "hook", "to": "w"}, {"from": "w", "to": "end"}]});
    let r = c
        .put(format!("{}/api/v1/workflows/acks", s.base))
        .bearer_auth(&s.token)
        .json(&wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let mut acked = Vec::new();
    for n in 0..60 {
        let r = c
            .post(format!("{}/hook/acks/go", s.base))
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let v: Value = r.json().await.unwrap();
        acked.push((v["run_id"].as_str().unwrap().to_string(), n));
    }
    s.child.kill().unwrap(); // SIGKILL, with runs waiting
    s.child.wait().unwrap();

    let mut s = start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    for (id, n) in &acked {
        loop {
            let run: Value = c
                .get(format!("{}/api/v1/runs/{id}", s.base))
                .bearer_auth(&s.token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if run["status"] == "succeeded" {
                assert_eq!(run["output"], json!({"end": n}));
                break;
            }
            assert_eq!(run["status"], "running", "run {id}: {run}");
            assert!(
                Instant::now() < deadline,
                "run {id} did not complete after the restart"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_dir_is_driven_by_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(dir.path());
    let o = Command::new(SLUICE)
        .args(["runs", "resume"])
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is in use by another"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Reading is fine while serve runs.
    let o = Command::new(SLUICE)
        .args(["runs", "list"])
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    // The lock dies with the process, even a killed one.
    let o = Command::new(SLUICE)
        .args(["runs", "resume"])
        .env("SLUICE_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
