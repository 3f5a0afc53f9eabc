//! A 50 MB input message runs through several steps without the process
//! holding several copies of it: peak RSS stays well under two copies.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const MB: usize = 1024 * 1024;

const WORKFLOW: &str = r#"{
  "format": "sluice.workflow/v1",
  "id": "big",
  "nodes": [
    {"id": "t", "kind": "trigger.manual"},
    {"id": "check", "kind": "flow.if", "config": {"condition": "{{ input | length > 10 }}"}},
    {"id": "count", "kind": "data.set", "config": {"values": {"items": "{{ input | length }}"}}},
    {"id": "pass", "kind": "util.log", "config": {"message": "got {{ input | length }} items"}},
    {"id": "all", "kind": "output.end"},
    {"id": "summary", "kind": "output.end"}
  ],
  "edges": [
    {"from": "t", "to": "check"}, {"from": "check:true", "to": "pass"},
    {"from": "pass", "to": "all"}, {"from": "check:true", "to": "count"},
    {"from": "count", "to": "summary"}
  ]
}"#;

/// Peak resident memory of a running process, in bytes.
fn peak_rss(pid: u32) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[test]
fn fifty_megabyte_input_is_not_copied_around() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("big.flow.json");
    std::fs::write(&flow, WORKFLOW).unwrap();
    let input = dir.path().join("input.json");
    let item = format!("\"{}\"", "x".repeat(MB - 2));
    let items = vec![item; 50];
    std::fs::write(&input, format!("[{}]", items.join(","))).unwrap();

    let mut child = Command::new(SLUICE)
        .args([
            "run",
            flow.to_str().unwrap(),
            "--input",
            &format!("@{}", input.display()),
        ])
        .env("SLUICE_DATA_DIR", dir.path().join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        out
    });
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(p) = peak_rss(pid) {
            peak = peak.max(p);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = reader.join().unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");

    let output: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(output["summary"], serde_json::json!({"items": 50}));
    assert_eq!(output["all"].as_array().unwrap().len(), 50);
    assert_eq!(output["all"][49].as_str().unwrap().len(), MB - 2);
    // One copy of the message is 50 MiB; the process itself ~15 MiB.
    assert!(
        peak > 50 * MB,
        "peak {} MiB: the measurement missed the run",
        peak / MB
    );
    assert!(
        peak < 100 * MB,
        "peak RSS {} MiB for a 50 MiB message",
        peak / MB
    );
}
