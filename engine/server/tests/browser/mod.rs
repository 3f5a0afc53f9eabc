//! Real headless Chromium for the editor's tests and benchmark: Debian's
//! `chromium` and `chromedriver`, driven over WebDriver with fantoccini.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// The built editor (`cargo xtask frontend`).
pub fn ui_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dist = target.join("frontend/dist");
    assert!(
        dist.join("pkg/sluice_bg.wasm").is_file(),
        "the editor is not built in {}: run `cargo xtask frontend` (cargo xtask test does)",
        dist.display()
    );
    dist
}

/// A real trigger port serving the built editor, and the one-time codes
/// that sign a browser in to it.
pub async fn editor_server() -> (crate::common::Server, std::sync::Arc<sluice_server::Codes>) {
    editor_peer(None).await
}

/// An editor server whose engine is also a peer named `peer`, when given.
pub async fn editor_peer(
    peer: Option<&str>,
) -> (crate::common::Server, std::sync::Arc<sluice_server::Codes>) {
    let codes = std::sync::Arc::new(sluice_server::Codes::default());
    let ui = ui_dir();
    let s = {
        let codes = codes.clone();
        crate::common::server_full(
            move |o| {
                o.codes = codes;
                o.ui_dir = Some(ui);
            },
            peer,
        )
        .await
    };
    (s, codes)
}

/// An editor server whose engine hands runs and deployments to the
/// Restate ingress at `ingress` (`[worker] ingress`).
pub async fn editor_with_worker(
    ingress: String,
) -> (crate::common::Server, std::sync::Arc<sluice_server::Codes>) {
    let codes = std::sync::Arc::new(sluice_server::Codes::default());
    let ui = ui_dir();
    let s = {
        let codes = codes.clone();
        crate::common::server_engine(
            move |e| {
                e.worker = Some(sluice_runtime::WorkerTarget {
                    ingress,
                    admin: None,
                    headers: Vec::new(),
                });
            },
            move |o| {
                o.codes = codes;
                o.ui_dir = Some(ui);
            },
            None,
        )
        .await
    };
    (s, codes)
}

pub fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// chromedriver on a free port, killed on drop.
pub struct Driver {
    child: Child,
    pub url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

pub async fn driver() -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian package chromium-driver; cargo xtask test installs it)");
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "chromedriver did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Driver { child, url }
}

pub async fn browser(driver: &Driver) -> Client {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .unwrap_or("chromium");
    let binary = String::from_utf8(
        Command::new("sh")
            .args(["-c", &format!("command -v {chromium}")])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary.trim(),
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1400,900"]
        }),
    );
    // The page's console, for `console_errors`.
    caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// chromedriver's log of the page's console (`POST /session/{id}/se/log`):
/// each call returns what was logged since the previous one.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &reqwest::Url,
        session: Option<&str>,
    ) -> Result<reqwest::Url, <reqwest::Url as std::str::FromStr>::Err> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &reqwest::Url) -> (axum::http::Method, Option<String>) {
        (
            axum::http::Method::POST,
            Some(r#"{"type": "browser"}"#.into()),
        )
    }
}

/// The errors the page logged to its console since the last call
/// (uncaught exceptions, failed loads, `console.error`).
pub async fn console_errors(c: &Client) -> Vec<String> {
    let log = c
        .issue_cmd(BrowserLog)
        .await
        .expect("the browser's console log");
    log.as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Ends a browser session, failing the test on any console error but
/// those `expected` names (a part of their message each, with the reason
/// at the call: a refusal the test provokes on purpose).
pub async fn finish(c: &Client, expected: &[&str]) {
    let errors = console_errors(c).await;
    c.clone().close().await.ok();
    let unexpected: Vec<&String> = errors
        .iter()
        .filter(|e| !expected.iter().any(|x| e.contains(x)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "the page logged console errors:\n{}",
        unexpected
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
