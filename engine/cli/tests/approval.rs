//! `flow.approval` across a SIGKILL, decided from each source: the resume
//! link, the API, `sluice runs signal` (through the running engine, and on
//! its own with no engine running), and the timeout.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Serve, client, get_json, open, put_workflow, start};

fn ship() -> Value {
    json!({"format": "sluice.workflow/v1", "id": "ship", "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "order"}},
        {"id": "approve", "kind": "flow.approval", "config": {
            "message": "Ship {{ input.body.n }}?", "timeout_ms": "{{ input.body.timeout_ms }}"}},
        {"id": "yes", "kind": "output.end"},
        {"id": "no", "kind": "output.end"},
        {"id": "late", "kind": "output.end", "config": {"value": "{{ input.body.n }}"}}
    ], "edges": [
        {"from": "hook", "to": "approve"},
        {"from": "approve:approved", "to": "yes"},
        {"from": "approve:rejected", "to": "no"},
        {"from": "approve:timeout", "to": "late"}
    ]})
}

async fn order(c: &reqwest::Client, s: &Serve, body: Value) -> String {
    let r = c
        .post(format!("{}/hook/ship/order", s.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    let v: Value = r.json().await.unwrap();
    v["run_id"].as_str().unwrap().to_string()
}

/// The run once its status is `status`.
async fn run_when(c: &reqwest::Client, s: &Serve, id: &str, status: &str) -> Value {
    for _ in 0..1000 {
        let run = get_json(c, s, &format!("runs/{id}")).await;
        if run["status"] == status {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("run {id} never became {status}");
}

#[tokio::test]
async fn a_run_parked_at_an_approval_survives_a_sigkill_and_is_decided_from_each_source() {
    let dir = tempfile::tempdir().unwrap();
    let c = client();
    let mut s = start(dir.path());
    put_workflow(&c, &s, &ship()).await;
    let by_link = order(&c, &s, json!({"n": 1, "timeout_ms": null})).await;
    let by_api = order(&c, &s, json!({"n": 2, "timeout_ms": null})).await;
    let by_cli = order(&c, &s, json!({"n": 3, "timeout_ms": null})).await;
    let timing_out = order(&c, &s, json!({"n": 4, "timeout_ms": 2000})).await;
    let link = run_when(&c, &s, &by_link, "waiting").await["waiting"][0]["resume_url"]
        .as_str()
        .unwrap()
        .to_string();
    // The link names the trigger port it was made on.
    assert!(
        link.starts_with(&format!("{}/hook/resume/", s.base)),
        "{link}"
    );
    let token = link.rsplit('/').next().unwrap().to_string();
    for id in [&by_api, &by_cli, &timing_out] {
        run_when(&c, &s, id, "waiting").await;
    }

    // SIGKILL, then a new engine on the same data dir.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let mut s = start(dir.path());
    let waiting = get_json(&c, &s, "runs?status=waiting").await;
    let mut ids: Vec<&str> = waiting
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expect = vec![&*by_link, &*by_api, &*by_cli, &*timing_out];
    expect.sort_unstable();
    assert_eq!(ids, expect);
    // Parked runs hold nothing: no driver after the restart.
    let metrics = c
        .get(format!("{}/metrics", s.base))
        .bearer_auth(&s.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("sluice_runs_active 0\n"), "{metrics}");

    // The link made before the kill, on the new port: once.
    let post_link = || {
        c.post(format!("{}/hook/resume/{token}", s.base))
            .json(&json!({"via": "link"}))
            .send()
    };
    assert_eq!(post_link().await.unwrap().status(), reqwest::StatusCode::OK);
    let run = run_when(&c, &s, &by_link, "succeeded").await;
    assert_eq!(run["output"], json!({"yes": {"via": "link"}}));
    assert_eq!(
        post_link().await.unwrap().status(),
        reqwest::StatusCode::GONE
    );

    // The API.
    let r = c
        .post(format!("{}/api/v1/runs/{by_api}/signal", s.base))
        .bearer_auth(&s.token)
        .json(&json!({"via": "api"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let run = run_when(&c, &s, &by_api, "succeeded").await;
    assert_eq!(run["output"], json!({"yes": {"via": "api"}}));

    // The CLI, through the running engine.
    let out = open(
        dir.path(),
        &[
            "runs",
            "signal",
            &by_cli,
            "--reject",
            "--json",
            r#"{"via": "cli"}"#,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["decision"], "rejected");
    let run = run_when(&c, &s, &by_cli, "succeeded").await;
    assert_eq!(run["output"], json!({"no": {"via": "cli"}}));

    // The timeout: its deadline came from before the kill.
    let run = run_when(&c, &s, &timing_out, "succeeded").await;
    assert_eq!(run["output"], json!({"late": 4}));
    s.child.kill().unwrap();
    s.child.wait().unwrap();
}

#[tokio::test]
async fn without_a_running_engine_the_cli_runs_parks_and_decides() {
    let dir = tempfile::tempdir().unwrap();
    let wf = dir.path().join("desk.flow.json");
    std::fs::write(
        &wf,
        json!({"format": "sluice.workflow/v1", "id": "desk", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "approve", "kind": "flow.approval"},
            {"id": "end", "kind": "output.end"}
        ], "edges": [{"from": "t", "to": "approve"}, {"from": "approve:approved", "to": "end"}]})
        .to_string(),
    )
    .unwrap();
    let data = dir.path().join("data");
    let out = open(&data, &["import", wf.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = open(&data, &["run", "desk", "--input", "{}"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("waits for a decision"), "{stderr}");
    let out = open(&data, &["runs", "list", "--status", "waiting", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let id = list[0]["id"].as_str().unwrap().to_string();
    let out = open(&data, &["runs", "show", &id, "--json"]);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["waiting"][0]["node"], "approve", "{run}");
    let out = open(
        &data,
        &["runs", "signal", &id, "--json", r#"{"via": "offline"}"#],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = open(&data, &["runs", "show", &id, "--json"]);
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["output"], json!({"end": {"via": "offline"}}));
    // Decided once.
    let out = open(&data, &["runs", "signal", &id]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already succeeded"), "{stderr}");
}
