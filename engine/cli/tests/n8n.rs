//! `sluice import` of an n8n export: converted into a new workflow whose id
//! is a slug of the n8n name (suffixed when taken), a report naming what
//! was not converted and the credentials to create; `--strict` imports
//! nothing and exits 1 when a node could not be converted.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn sluice(data: &Path, args: &[&str]) -> Output {
    Command::new(SLUICE)
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_n8n_export_is_imported_with_a_report_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = format!("{}/tests/n8n/notify-team.json", env!("CARGO_MANIFEST_DIR"));

    // --strict: a node is not converted, so nothing is imported.
    let o = sluice(&data, &["import", "--strict", &file]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("nothing was imported (--strict)"),
        "{}",
        text(&o.stderr)
    );
    let o = sluice(&data, &["export", "notify-the-team"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o.stdout));

    let o = sluice(&data, &["import", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let report = text(&o.stdout);
    assert!(report.contains("as `notify-the-team`"), "{report}");
    assert!(
        report.contains("\"Slack\" (n8n-nodes-base.slack): Sluice has no counterpart"),
        "{report}"
    );
    assert!(
        report.contains("sluice credentials set smtp-account --kind smtp"),
        "{report}"
    );
    assert!(report.contains("`slack-account`"), "{report}");

    // Imported again: a new workflow beside it.
    let o = sluice(&data, &["import", "--json", &file]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let again: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["id"], json!("notify-the-team-2"));
    let slack = again["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "Slack")
        .unwrap();
    assert_eq!(slack["converted"], json!(false));

    // The workflow runs as far as it can: the Slack node passes its items
    // on, disabled, and the mail fails for want of its credential.
    let o = sluice(
        &data,
        &[
            "run",
            "notify-the-team",
            "--input",
            r#"{"id": 7, "name": "Ada"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("credential `smtp-account` does not exist"),
        "{}",
        text(&o.stderr)
    );
    // The exported workflow keeps the sticky note and the Slack node's note.
    let o = sluice(&data, &["export", "notify-the-team"]);
    let wf: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        wf["notes"][0]["text"],
        json!("## Notify\nPosts to Slack, then mails the team.")
    );
    let node = wf["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["label"] == "Slack")
        .unwrap();
    assert_eq!(node["disabled"], json!(true));
    assert!(
        node["notes"]
            .as_str()
            .unwrap()
            .starts_with("Not converted from n8n"),
        "{node}"
    );
}
