//! Durability: a `sluice run` child process is SIGKILLed mid-run at several
//! points (inside waits, between steps of parallel branches); `sluice runs
//! resume` on the same data dir finishes the run with the same output as an
//! uninterrupted run, and no step whose completion was journaled before the
//! kill runs again.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

const WORKFLOW: &str = r#"{
  "format": "sluice.workflow/v1",
  "id": "crashy",
  "nodes": [
    {"id": "t", "kind": "trigger.manual"},
    {"id": "each", "kind": "flow.split", "config": {"concurrency": 2}},
    {"id": "a", "kind": "data.set", "config": {"values": {"n": "{{ input }}", "sq": "{{ input * input }}"}}},
    {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 120}},
    {"id": "b", "kind": "data.set", "config": {"values": {"n": "{{ input.n }}", "total": "{{ input.sq + 1 }}"}}},
    {"id": "side", "kind": "data.set", "config": {"values": {"side": "{{ input }}"}}},
    {"id": "side2", "kind": "data.set", "config": {"values": {"side2": "{{ input.side }}"}}},
    {"id": "all", "kind": "flow.join"},
    {"id": "end", "kind": "output.end"},
    {"id": "side_end", "kind": "output.end"}
  ],
  "edges": [
    {"from": "t", "to": "each"}, {"from": "each", "to": "a"}, {"from": "a", "to": "w"},
    {"from": "w", "to": "b"}, {"from": "b", "to": "all"}, {"from": "all", "to": "end"},
    {"from": "t", "to": "side"}, {"from": "side", "to": "side2"}, {"from": "side2", "to": "side_end"}
  ]
}"#;

fn sluice(data: &Path, args: &[&str]) -> std::process::Output {
    Command::new(SLUICE)
        .args(args)
        .env("SLUICE_DATA_DIR", data)
        .output()
        .unwrap()
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn exec_counts(log: &Path) -> HashMap<String, usize> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut counts = HashMap::new();
    for line in text.lines() {
        let key = line.rsplit_once(' ').map(|(k, _)| k).unwrap_or(line);
        *counts.entry(key.to_string()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn killed_runs_resume_without_redoing_finished_steps() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("crashy.flow.json");
    std::fs::write(&flow, WORKFLOW).unwrap();
    let flow = flow.to_str().unwrap();
    let input = "[1, 2, 3, 4, 5, 6]";

    let reference_dir = dir.path().join("reference");
    let reference = json_of(&sluice(&reference_dir, &["run", flow, "--input", input]));
    assert_eq!(
        reference["end"][5],
        serde_json::json!({"n": 6, "total": 37})
    );

    // Kill after this many step executions: early, inside the first waits,
    // between branch steps, and near the end.
    for kill_at in [2, 5, 9, 14, 20] {
        let data = dir.path().join(format!("kill-{kill_at}"));
        let log = dir.path().join(format!("exec-{kill_at}.log"));
        let mut child = Command::new(SLUICE)
            .args(["run", flow, "--input", input])
            .env("SLUICE_DATA_DIR", &data)
            .env("SLUICE_TEST_EXEC_LOG", &log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let n: usize = exec_counts(&log).values().sum();
            if n >= kill_at || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let runs = json_of(&sluice(&data, &["runs", "list", "--json"]));
        let run = runs[0]["id"].as_str().unwrap().to_string();
        let before = json_of(&sluice(&data, &["runs", "show", &run, "--json"]));
        assert_eq!(
            before["status"], "running",
            "kill at {kill_at}: the kill came too late to test anything"
        );
        let finished: Vec<String> = before["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"] == "succeeded")
            .map(|s| {
                format!(
                    "{run}/{}/{}/{}",
                    s["node"].as_str().unwrap(),
                    s["lineage"].as_str().unwrap(),
                    s["activation"].as_str().unwrap()
                )
            })
            .collect();

        let resumed = Command::new(SLUICE)
            .args(["runs", "resume"])
            .env("SLUICE_DATA_DIR", &data)
            .env("SLUICE_TEST_EXEC_LOG", &log)
            .output()
            .unwrap();
        assert!(
            resumed.status.success(),
            "kill at {kill_at}: {}",
            String::from_utf8_lossy(&resumed.stderr)
        );

        let after = json_of(&sluice(&data, &["runs", "show", &run, "--json"]));
        assert_eq!(after["status"], "succeeded", "kill at {kill_at}");
        assert_eq!(after["output"], reference, "kill at {kill_at}");
        let counts = exec_counts(&log);
        for key in &finished {
            assert_eq!(
                counts.get(key),
                Some(&1),
                "kill at {kill_at}: finished step {key} ran again"
            );
        }
        for (key, n) in &counts {
            assert!(*n <= 2, "kill at {kill_at}: step {key} ran {n} times");
        }
    }
}

#[test]
fn a_wait_counts_from_its_first_start_across_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("wait.flow.json");
    std::fs::write(
        &flow,
        r#"{"format": "sluice.workflow/v1", "id": "wait", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 2000}},
            {"id": "end", "kind": "output.end"}],
          "edges": [{"from": "t", "to": "w"}, {"from": "w", "to": "end"}]}"#,
    )
    .unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("exec.log");
    let mut child = Command::new(SLUICE)
        .args(["run", flow.to_str().unwrap(), "--input", "{\"k\": 1}"])
        .env("SLUICE_DATA_DIR", &data)
        .env("SLUICE_TEST_EXEC_LOG", &log)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !exec_counts(&log).keys().any(|k| k.contains("/w/")) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let wait_started = Instant::now();
    std::thread::sleep(Duration::from_millis(800));
    child.kill().unwrap();
    child.wait().unwrap();

    let resumed = Command::new(SLUICE)
        .args(["runs", "resume"])
        .env("SLUICE_DATA_DIR", &data)
        .output()
        .unwrap();
    let total = wait_started.elapsed();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    // The wait ends 2 s after it first started, not 2 s after the restart.
    assert!(total >= Duration::from_millis(1900), "{total:?}");
    assert!(
        total < Duration::from_millis(2700),
        "the wait started over: {total:?}"
    );
    let runs = json_of(&sluice(&data, &["runs", "list", "--json"]));
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["output"], serde_json::json!({"end": {"k": 1}}));
}
