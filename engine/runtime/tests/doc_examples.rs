//! The worked examples in docs/semantics.md are run: after each ```json
//! workflow, every `<!-- check {"input", "trigger"?, "output", "failed_at"?} -->`
//! line is one run whose output must match. The docs cannot drift.

use std::sync::Arc;

use serde_json::Value;
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};

const DOC: &str = include_str!("../../../docs/semantics.md");

struct Example {
    line: usize,
    workflow: String,
    checks: Vec<Value>,
}

fn examples() -> Vec<Example> {
    let lines: Vec<&str> = DOC.lines().collect();
    let mut out: Vec<Example> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("```json") {
            let start = i + 1;
            let mut j = start;
            while !lines[j].starts_with("```") {
                j += 1;
            }
            out.push(Example {
                line: i + 1,
                workflow: lines[start..j].join("\n"),
                checks: Vec::new(),
            });
            i = j;
        } else if let Some(rest) = lines[i].strip_prefix("<!-- check ") {
            let json = rest
                .strip_suffix(" -->")
                .unwrap_or_else(|| panic!("line {}: unterminated check", i + 1));
            let check: Value =
                serde_json::from_str(json).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
            out.last_mut()
                .unwrap_or_else(|| panic!("line {}: check before any example", i + 1))
                .checks
                .push(check);
        }
        i += 1;
    }
    out
}

#[tokio::test]
async fn worked_examples_in_semantics_md_hold() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let examples = examples();
    let checked: usize = examples.iter().map(|e| e.checks.len()).sum();
    assert!(checked >= 15, "only {checked} checks found");
    for ex in examples.iter().filter(|e| !e.checks.is_empty()) {
        let wf = Workflow::from_json(&ex.workflow)
            .unwrap_or_else(|e| panic!("example at line {}: {e}", ex.line));
        let plan = Plan::new(wf).unwrap_or_else(|e| panic!("example at line {}: {e}", ex.line));
        for check in &ex.checks {
            let trigger = check.get("trigger").and_then(Value::as_str);
            let handle = engine
                .start(plan.clone(), trigger, Arc::new(check["input"].clone()))
                .await
                .unwrap();
            let r = handle.wait().await;
            assert_eq!(
                r.output, check["output"],
                "example at line {}, input {}",
                ex.line, check["input"]
            );
            match check.get("failed_at") {
                Some(node) => {
                    assert_eq!(r.status, Status::Failed, "example at line {}", ex.line);
                    assert_eq!(
                        r.error.as_ref().and_then(|e| e.node.as_deref()),
                        node.as_str(),
                        "example at line {}",
                        ex.line
                    );
                }
                None => assert_eq!(
                    r.status,
                    Status::Succeeded,
                    "example at line {}: {:?}",
                    ex.line,
                    r.error
                ),
            }
        }
    }
}
