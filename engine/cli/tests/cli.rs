//! The `sluice` command as scripts see it: exit codes, stdout, stderr.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn sluice(data: &Path, args: &[&str]) -> Output {
    Command::new(SLUICE)
        .args(args)
        .env("SLUICE_DATA_DIR", data)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn malformed_json_exits_2_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "bad.flow.json",
        "{\n  \"format\": \"sluice.workflow/v1\",\n  \"id\": oops\n}",
    );
    for cmd in ["validate", "run"] {
        let o = sluice(dir.path(), &[cmd, &f]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        assert_eq!(
            stderr(&o).trim(),
            format!("{f}: at id, line 3, column 9: expected value")
        );
    }
}

#[test]
fn invalid_workflow_exits_2_listing_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "w.flow.json",
        r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "x", "kind": "data.transform", "config": {"jq": ".a |"}},
            {"id": "y", "kind": "nope"}],
          "edges": [{"from": "t", "to": "x"}, {"from": "x", "to": "ghost"}]}"#,
    );
    let o = sluice(dir.path(), &["validate", &f]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!("{f}: invalid workflow (2 problems):")),
        "{err}"
    );
    assert!(err.contains("node `y` kind: unknown kind `nope`"), "{err}");
    assert!(
        err.contains("edges[1] to: node `ghost` does not exist"),
        "{err}"
    );
    // Once those are fixed, the jq program is checked too.
    let f = write(
        dir.path(),
        "w2.flow.json",
        r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "x", "kind": "data.transform", "config": {"jq": ".a |"}}],
          "edges": [{"from": "t", "to": "x"}]}"#,
    );
    let o = sluice(dir.path(), &["validate", &f]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("node `x` config.jq: jq syntax error: line 1, column 5"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_prints_output_and_exit_1_names_the_failing_node() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "w.flow.json",
        r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "check", "kind": "flow.if", "config": {"condition": "{{ input.ok }}"}},
            {"id": "done", "kind": "output.end", "config": {"value": {"n": "{{ input.n }}"}}},
            {"id": "boom", "kind": "data.transform", "config": {"jq": "error(\"not ok\")"}}],
          "edges": [{"from": "t", "to": "check"}, {"from": "check:true", "to": "done"},
                    {"from": "check:false", "to": "boom"}]}"#,
    );
    let o = sluice(
        dir.path(),
        &["run", &f, "--input", r#"{"ok": true, "n": 7}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out, json!({"done": {"n": 7}}));

    let o = sluice(dir.path(), &["run", &f, "--input", r#"{"ok": false}"#]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("failed at node `boom`: data.transform: jq runtime error: \"not ok\""),
        "{err}"
    );

    // The workflow is now stored as a draft: runs by id run what is
    // published, so it runs by id once published.
    let o = sluice(
        dir.path(),
        &["run", "w", "--input", r#"{"ok": true, "n": 1}"#],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`w` is not published"),
        "{}",
        stderr(&o)
    );
    let o = sluice(dir.path(), &["publish", "w"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(
        dir.path(),
        &["run", "w", "--input", r#"{"ok": true, "n": 1}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // Runs are listed newest first, with the --json shape scripts rely on.
    let o = sluice(dir.path(), &["runs", "list", "--json"]);
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["output"], json!({"done": {"n": 1}}));
    assert_eq!(runs[1]["status"], "failed");
    assert_eq!(runs[1]["error"]["node"], "boom");
    for r in runs {
        assert_eq!(r["workflow"], "w");
        assert!(r.get("steps").is_none());
    }
    let id = runs[1]["id"].as_str().unwrap();
    let o = sluice(dir.path(), &["runs", "show", id, "--json"]);
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in ["id", "workflow", "status", "output", "error", "steps"] {
        assert!(run.get(key).is_some(), "runs show --json lacks {key}");
    }
    let steps: Vec<(String, String)> = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["node"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [
        ("t", "succeeded"),
        ("check", "succeeded"),
        ("done", "skipped"),
        ("boom", "failed"),
    ];
    for (node, status) in expected {
        assert!(
            steps.contains(&(node.to_string(), status.to_string())),
            "{node} {status} in {steps:?}"
        );
    }
    let boom = run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == "boom")
        .unwrap();
    assert_eq!(boom["input"], json!({"ok": false}));
    assert_eq!(boom["attempt"], 1);
    assert!(boom["duration_us"].is_number());
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = sluice(dir.path(), &["run"]);
    assert_eq!(o.status.code(), Some(2));
    let o = sluice(dir.path(), &["run", "no-such-workflow"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("workflow `no-such-workflow` not found"),
        "{}",
        stderr(&o)
    );
    let f = write(
        dir.path(),
        "hello.flow.json",
        include_str!("../../../assets/examples/hello.flow.json"),
    );
    let o = sluice(dir.path(), &["run", &f, "--input", "{\"a\": "]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--input: invalid JSON at line 1, column 6"),
        "{}",
        stderr(&o)
    );
    let o = sluice(dir.path(), &["run", &f, "--trigger", "greet"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("node `greet` is not a trigger"),
        "{}",
        stderr(&o)
    );
    let o = sluice(dir.path(), &["runs", "show", "r-nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn examples_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/examples");
    let input = format!("@{}", root.join("orders.input.json").display());
    let o = sluice(
        dir.path(),
        &[
            "run",
            root.join("orders.flow.json").to_str().unwrap(),
            "--input",
            &input,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        json!({"done": {"orders": 3, "gold": 2}})
    );
    let o = sluice(
        dir.path(),
        &[
            "run",
            root.join("hello.flow.json").to_str().unwrap(),
            "--input",
            &input,
        ],
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        json!({"done": {"greeting": "Hello Ada!"}})
    );
}

#[test]
fn a_100000_deep_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "hello.flow.json",
        include_str!("../../../assets/examples/hello.flow.json"),
    );
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let input = write(dir.path(), "deep.json", &deep);
    // One argument may not exceed 128 KiB: the command line gets 10,000 levels.
    let shallower = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for arg in [shallower, format!("@{input}")] {
        let o = sluice(dir.path(), &["run", &f, "--input", &arg]);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("invalid JSON at line 1, column 128: recursion limit exceeded"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn import_then_export_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "hello.flow.json",
        include_str!("../../../assets/examples/hello.flow.json"),
    );
    let o = sluice(dir.path(), &["import", &f]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "imported workflow `hello` (4 nodes)"
    );
    let o = sluice(dir.path(), &["export", "hello"]);
    assert_eq!(o.status.code(), Some(0));
    let exported: Value = serde_json::from_slice(&o.stdout).unwrap();
    let original: Value =
        serde_json::from_str(include_str!("../../../assets/examples/hello.flow.json")).unwrap();
    assert_eq!(exported, original);
    let out = dir.path().join("out.flow.json");
    let o = sluice(
        dir.path(),
        &["export", "hello", "--out", out.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&std::fs::read_to_string(&out).unwrap()).unwrap(),
        original
    );
    let o = sluice(dir.path(), &["export", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn credentials_set_list_rm() {
    let dir = tempfile::tempdir().unwrap();
    let o = sluice(
        dir.path(),
        &[
            "credentials",
            "set",
            "gh",
            "--kind",
            "bearer",
            "--json",
            r#"{"token": "hunter2-secret"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let file = write(
        dir.path(),
        "smtp.json",
        r#"{"host": "mail", "port": 587, "security": "starttls"}"#,
    );
    let o = sluice(
        dir.path(),
        &[
            "credentials",
            "set",
            "mail",
            "--kind",
            "smtp",
            "--json",
            &format!("@{file}"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(dir.path(), &["credentials", "list"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("gh")
            && out.contains("bearer")
            && out.contains("mail")
            && out.contains("smtp"),
        "{out}"
    );
    assert!(!out.contains("hunter2"));
    let o = sluice(
        dir.path(),
        &[
            "credentials",
            "set",
            "x",
            "--kind",
            "basic",
            "--json",
            r#"{"username": "hunter2-secret"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
    let o = sluice(
        dir.path(),
        &[
            "credentials",
            "set",
            "x",
            "--kind",
            "bearer",
            "--json",
            r#"{"token": "hunter2-secret""#,
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
    let o = sluice(dir.path(), &["credentials", "rm", "gh"]);
    assert_eq!(o.status.code(), Some(0));
    let o = sluice(dir.path(), &["credentials", "rm", "gh"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn versions_list_show_restore_and_the_workflow_a_run_ran() {
    let dir = tempfile::tempdir().unwrap();
    let original = include_str!("../../../assets/examples/hello.flow.json");
    let f = write(dir.path(), "hello.flow.json", original);
    let o = sluice(dir.path(), &["run", &f, "--input", r#"{"name": "Ada"}"#]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(dir.path(), &["import", &f]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(
        dir.path(),
        &["run", "hello", "--input", r#"{"name": "Ada"}"#],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let runs: Value =
        serde_json::from_slice(&sluice(dir.path(), &["runs", "list", "--json"]).stdout).unwrap();
    let pinned_run = runs[0]["id"].as_str().unwrap().to_string();

    // A second version, from another origin.
    let mut changed: Value = serde_json::from_str(original).unwrap();
    changed["name"] = json!("Hello again");
    let f2 = write(dir.path(), "changed.flow.json", &changed.to_string());
    let o = sluice(dir.path(), &["import", &f2]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let o = sluice(dir.path(), &["versions", "list", "hello", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let versions: Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = versions.as_array().unwrap();
    assert!(list.len() >= 2, "{versions}");
    assert_eq!(list[0]["summary"], "set name");
    let oldest = list.last().unwrap()["version"]
        .as_str()
        .unwrap()
        .to_string();
    let o = sluice(dir.path(), &["versions", "list", "hello"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("set name") && text.contains("import"),
        "{text}"
    );

    let o = sluice(dir.path(), &["versions", "show", "hello", &oldest]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        serde_json::from_str::<Value>(original).unwrap()
    );
    let o = sluice(dir.path(), &["versions", "restore", "hello", &oldest]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let exported: Value =
        serde_json::from_slice(&sluice(dir.path(), &["export", "hello"]).stdout).unwrap();
    assert_eq!(exported, serde_json::from_str::<Value>(original).unwrap());

    // The run made before the change shows the workflow as it ran.
    let o = sluice(dir.path(), &["runs", "show", &pinned_run, "--workflow"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ran: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        ran["name"],
        serde_json::from_str::<Value>(original).unwrap()["name"]
    );
    let show: Value = serde_json::from_slice(
        &sluice(dir.path(), &["runs", "show", &pinned_run, "--json"]).stdout,
    )
    .unwrap();
    assert!(show["version"].is_string(), "{show}");

    let o = sluice(dir.path(), &["versions", "show", "hello", "9@9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("9@9"), "{}", stderr(&o));
}

#[test]
fn modules_add_refuses_what_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "bad.wasm", "\0asm not really");
    let o = sluice(dir.path(), &["modules", "add", &f]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("bad.wasm") && err.contains("not a valid WebAssembly component"),
        "{err}"
    );
}

#[test]
fn import_publishes_and_draft_publish_unpublish_decide_what_runs() {
    let dir = tempfile::tempdir().unwrap();
    let original = include_str!("../../../assets/examples/hello.flow.json");
    let mut wf: Value = serde_json::from_str(original).unwrap();
    let f = write(dir.path(), "hello.flow.json", original);
    let o = sluice(dir.path(), &["import", &f]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let greet = |data: &Path| {
        let o = sluice(data, &["run", "hello", "--input", r#"{"name": "Ada"}"#]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let before = greet(dir.path());

    // A draft import: runs by id still run the published version.
    wf["name"] = json!("Hello, drafted");
    let last = wf["nodes"].as_array().unwrap().len() - 1;
    wf["nodes"][last]["config"] = json!({"value": "drafted"});
    let f2 = write(dir.path(), "draft.flow.json", &wf.to_string());
    let o = sluice(dir.path(), &["import", "--draft", &f2]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("as its draft"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(greet(dir.path()), before);
    // Export shows the draft (what is being edited).
    let exported: Value =
        serde_json::from_slice(&sluice(dir.path(), &["export", "hello"]).stdout).unwrap();
    assert_eq!(exported["name"], "Hello, drafted");

    let o = sluice(dir.path(), &["publish", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("published `hello` at "));
    let after = greet(dir.path());
    assert_ne!(after, before);
    assert!(after.to_string().contains("drafted"), "{after}");
    let o = sluice(dir.path(), &["versions", "list", "hello"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("PUBLISHED") && text.contains("yes"), "{text}");

    let o = sluice(dir.path(), &["unpublish", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(dir.path(), &["run", "hello", "--input", "{}"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is not published"), "{}", stderr(&o));
    let o = sluice(dir.path(), &["publish", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("`nope` not found"), "{}", stderr(&o));
}

/// `sluice ARGS` with `stdin` piped in.
fn sluice_with_stdin(data: &Path, args: &[&str], stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(SLUICE)
        .args(args)
        .env("SLUICE_DATA_DIR", data)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn run_ids_lists_filters_prefixes_completions_and_secrets_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "hello.flow.json",
        include_str!("../../../assets/examples/hello.flow.json"),
    );
    // `run` says which run it started, on stderr (stdout stays the output).
    let o = sluice(dir.path(), &["run", &f, "--input", "{}"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let id = err
        .split_whitespace()
        .find(|w| w.starts_with('r') && w.len() > 10)
        .unwrap_or_else(|| panic!("no run id in {err}"))
        .to_string();
    assert!(err.contains("Ctrl-C cancels it"), "{err}");
    serde_json::from_slice::<Value>(&o.stdout).unwrap();

    // A unique prefix names the run; an ambiguous or unknown one is refused.
    let o = sluice(dir.path(), &["runs", "show", &id[..8], "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["draft"], true, "a file runs as the draft");
    let o = sluice(dir.path(), &["run", &f, "--input", "{}"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(dir.path(), &["runs", "show", "r"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is the start of several runs"),
        "{}",
        stderr(&o)
    );
    let o = sluice(dir.path(), &["runs", "show", "zz"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("run `zz` not found"), "{}", stderr(&o));

    // The list: start time, duration, draft; filters.
    let o = sluice(dir.path(), &["runs", "list"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.starts_with("RUN") && text.contains("STARTED"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.ends_with("draft")).count(),
        2,
        "{text}"
    );
    let count = |args: &[&str]| {
        let mut all = vec!["runs", "list", "--json"];
        all.extend_from_slice(args);
        let o = sluice(dir.path(), &all);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count(&[]), 2);
    assert_eq!(count(&["--workflow", "hello"]), 2);
    assert_eq!(count(&["--workflow", "other"]), 0);
    assert_eq!(count(&["--status", "succeeded"]), 2);
    assert_eq!(count(&["--status", "failed"]), 0);
    assert_eq!(count(&["--since", "1h"]), 2);
    assert_eq!(count(&["--since", "2099-01-01T00:00:00Z"]), 0);
    let o = sluice(dir.path(), &["runs", "list", "--status", "done"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--status"), "{}", stderr(&o));
    let o = sluice(dir.path(), &["runs", "list", "--since", "yesterday"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--since `yesterday`"), "{}", stderr(&o));

    // Workflows, with what is published.
    let o = sluice(dir.path(), &["workflows", "list"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("hello") && l.trim_end().ends_with("no")),
        "{text}"
    );
    let o = sluice(dir.path(), &["publish", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice(dir.path(), &["workflows", "list", "--json"]);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list[0]["id"], "hello");
    assert_eq!(list[0]["published"], true);
    assert_eq!(list[0]["published_version"], list[0]["draft_version"]);

    // Completions for a shell.
    let o = sluice(dir.path(), &["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    let script = String::from_utf8_lossy(&o.stdout);
    assert!(
        script.contains("_sluice") && script.contains("publish"),
        "{script}"
    );

    // A secret from stdin, never from the command line.
    let o = sluice_with_stdin(
        dir.path(),
        &["credentials", "set", "gh", "--kind", "bearer"],
        r#"{"token": "from-stdin"}"#,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sluice_with_stdin(
        dir.path(),
        &[
            "credentials",
            "set",
            "gh2",
            "--kind",
            "bearer",
            "--json",
            "-",
        ],
        "{not json",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid JSON at line 1"),
        "{}",
        stderr(&o)
    );
    let o = sluice(dir.path(), &["credentials", "list"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("gh") && !text.contains("gh2"), "{text}");
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_run_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "slow.flow.json",
        r#"{"format": "sluice.workflow/v1", "id": "slow", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 60000}},
            {"id": "end", "kind": "output.end"}],
          "edges": [{"from": "t", "to": "w"}, {"from": "w", "to": "end"}]}"#,
    );
    let mut child = Command::new(SLUICE)
        .args(["run", &f])
        .env("SLUICE_DATA_DIR", dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The run is durably recorded when `run` names it on stderr: then SIGINT.
    let stderr_pipe = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr_pipe).lines() {
            let line = line.unwrap_or_default();
            if line.contains("started (Ctrl-C cancels it)") {
                tx.send(()).ok();
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
        child.kill().ok();
        panic!("the run never started: {}", reader.join().unwrap());
    }
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = reader.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cancelling run") && err.contains("cancelled"),
        "{err}"
    );
    let runs: Value =
        serde_json::from_slice(&sluice(dir.path(), &["runs", "list", "--json"]).stdout).unwrap();
    assert_eq!(runs[0]["status"], "cancelled", "{runs}");
}

/// Retention end to end: `config.toml [runs]` and a workflow's
/// `settings.runs`, `sluice storage`, `sluice storage prune`, and bad
/// settings named by file and line or by field.
#[test]
fn storage_reports_and_prune_keeps_what_each_workflow_asks() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("config.toml"), "[runs]\nkeep_max = 1\n").unwrap();
    let flow = |id: &str, settings: Value| {
        json!({
            "format": "sluice.workflow/v1", "id": id, "name": id, "settings": settings,
            "nodes": [
                {"id": "start", "kind": "trigger.manual"},
                {"id": "end", "kind": "output.end", "config": {"value": "{{ input }}"}}
            ],
            "edges": [{"from": "start", "to": "end"}]
        })
        .to_string()
    };
    for (id, settings) in [
        ("chatty", json!({})),
        ("kept", json!({"runs": {"keep_max": 3, "keep_for": "90d"}})),
    ] {
        let f = write(dir.path(), &format!("{id}.flow.json"), &flow(id, settings));
        let o = sluice(&data, &["import", &f]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        for n in 0..5 {
            let o = sluice(&data, &["run", id, "--input", &format!(r#"{{"n": {n}}}"#)]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        }
    }
    let report = |data: &Path| {
        let o = sluice(data, &["storage", "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    };
    let r = report(&data);
    assert_eq!(r["runs"]["total"], 10, "{r:#}");
    assert_eq!(r["database"]["incremental"], true);
    assert_eq!(
        r["retention"],
        json!({"keep_for": "14d", "keep_max": 1, "keep_failed_for": "30d"})
    );
    assert_eq!(
        r["overrides"],
        json!([{"workflow": "kept", "retention": {"keep_for": "90d", "keep_max": 3, "keep_failed_for": "30d"}}])
    );

    let o = sluice(&data, &["storage", "prune", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let pruned: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(pruned["runs_deleted"], 4 + 2, "{pruned:#}");
    let inputs = |id: &str| {
        let o = sluice(&data, &["runs", "list", "--workflow", id, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let runs: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        runs.iter()
            .map(|r| r["output"]["end"]["n"].as_i64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(inputs("chatty"), [4], "the newest run is kept");
    assert_eq!(inputs("kept"), [4, 3, 2]);
    let text = String::from_utf8_lossy(&sluice(&data, &["storage"]).stdout).into_owned();
    assert!(text.contains("runs       4 kept, 0 in progress"), "{text}");
    assert!(text.contains("kept: keep_for 90d, keep_max 3"), "{text}");

    // Bad retention: config.toml by line, a workflow by field.
    std::fs::write(
        data.join("config.toml"),
        "[runs]\nkeep_for = \"two weeks\"\n",
    )
    .unwrap();
    let o = sluice(&data, &["storage"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("config.toml:2:") && stderr(&o).contains("is not a span"),
        "{}",
        stderr(&o)
    );
    let f = write(
        dir.path(),
        "bad.flow.json",
        &flow("bad", json!({"runs": {"keep_max": -1}})),
    );
    let o = sluice(&data, &["validate", &f]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("settings.runs.keep_max"),
        "{}",
        stderr(&o)
    );
}
