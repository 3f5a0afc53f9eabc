//! What the process tests share: `sluice serve` started as a process, an
//! HTTP client, and one-shot `sluice` commands on a data dir.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

pub struct Serve {
    pub child: Child,
    pub base: String,
    pub token: String,
}

pub fn start(data: &Path) -> Serve {
    start_with(data, Command::new(SLUICE)).0
}

/// Starts `sluice serve` through `cmd` (the binary, or a wrapper such as
/// `prlimit` with the binary as its argument); also returns what it printed
/// before the sign-in line.
pub fn start_with(data: &Path, mut cmd: Command) -> (Serve, Vec<String>) {
    let mut child = cmd
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLUICE_DATA_DIR", data)
        // Peers on loopback only, never reaching for a relay.
        .env("SLUICE_PEERS_LISTEN", "127.0.0.1:0")
        .env("SLUICE_PEERS_RELAYS", "none")
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
    let mut printed = vec![first];
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.starts_with("editor ");
        printed.push(line);
        if done {
            break;
        }
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let token = std::fs::read_to_string(data.join("api-token"))
        .unwrap()
        .trim()
        .to_string();
    (Serve { child, base, token }, printed)
}

pub fn client() -> reqwest::Client {
    sluice_nodes::http::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

pub fn open(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(SLUICE)
        .args(args)
        .env("SLUICE_DATA_DIR", data)
        .output()
        .unwrap()
}

/// Stores and publishes `wf` on the running engine.
pub async fn put_workflow(c: &reqwest::Client, s: &Serve, wf: &serde_json::Value) {
    let id = wf["id"].as_str().unwrap();
    let r = c
        .put(format!("{}/api/v1/workflows/{id}?publish=true", s.base))
        .bearer_auth(&s.token)
        .json(wf)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
}

/// `GET /api/v1/{path}` with the token, as JSON.
pub async fn get_json(c: &reqwest::Client, s: &Serve, path: &str) -> serde_json::Value {
    c.get(format!("{}/api/v1/{path}", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// An answer to one webhook request of a load test.
pub struct HookAnswer {
    pub status: u16,
    /// The run it names (`X-Sluice-Run`), if one was made.
    pub run: Option<String>,
    pub body: serde_json::Value,
}

/// `POST {base}/hook/{workflow}/go` with `{"n": n}`. None once the engine is
/// gone: no answer, or one cut off (only a complete answer acknowledges a
/// run).
pub async fn post_hook(
    c: &reqwest::Client,
    base: &str,
    workflow: &str,
    n: u64,
) -> Option<HookAnswer> {
    let r = c
        .post(format!("{base}/hook/{workflow}/go"))
        .json(&serde_json::json!({"n": n}))
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    let run = r
        .headers()
        .get("x-sluice-run")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = r.json().await.ok()?;
    Some(HookAnswer { status, run, body })
}
