//! Runs as JSON for people and scripts (`sluice runs show --json`, the API):
//! the run row, and one entry per step attempt rebuilt from the journal.

use serde_json::{Value, json};
use sluice_store::{Record, RecordKind, RunRow, Stored};

/// A run without its steps: `id`, `workflow`, `trigger`, `status`, `output`, `error`, times,
/// and `version`, the workflow document version it ran (null for a run of a file).
pub fn run_summary(r: &RunRow) -> Value {
    json!({
        "id": r.id,
        "workflow": r.workflow_id,
        "trigger": r.trigger,
        "status": r.status,
        "output": r.output,
        "error": r.error,
        "created_at_us": r.created_at_us,
        "finished_at_us": r.finished_at_us,
        "version": r.doc_version,
    })
}

/// Step attempts from journal records: one entry per (node, lineage, activation, attempt).
pub fn steps(records: &[Record]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut index: std::collections::HashMap<(String, String, String, u32), usize> =
        Default::default();
    for r in records {
        let key = (
            r.node.to_string(),
            r.lineage.clone(),
            r.activation.clone(),
            r.attempt,
        );
        let value = |s: &Option<Stored>| s.as_ref().and_then(Stored::value).map(|v| (*v).clone());
        match r.kind {
            RecordKind::Skipped => out.push(json!({
                "node": &*r.node, "lineage": r.lineage, "status": "skipped", "at_us": r.at_us,
            })),
            RecordKind::Started => {
                // A second start of the same attempt: the first was cut short by a crash.
                if let Some(&i) = index.get(&key)
                    && out[i]["status"] == "running"
                {
                    out[i]["status"] = json!("interrupted");
                }
                index.insert(key, out.len());
                out.push(json!({
                    "node": &*r.node, "lineage": r.lineage, "activation": r.activation, "attempt": r.attempt,
                    "status": "running", "started_at_us": r.at_us, "input": value(&r.data),
                }));
            }
            RecordKind::Succeeded | RecordKind::Failed => {
                let i = match index.get(&key) {
                    Some(&i) => i,
                    // A pure step: journaled once, after it ran, with its input.
                    None => {
                        out.push(json!({
                            "node": &*r.node, "lineage": r.lineage, "activation": r.activation, "attempt": r.attempt,
                            "status": "running",
                            "started_at_us": r.at_us - r.duration_us.unwrap_or(0),
                            "input": value(&r.input),
                        }));
                        out.len() - 1
                    }
                };
                let step = &mut out[i];
                step["finished_at_us"] = json!(r.at_us);
                step["duration_us"] = json!(r.duration_us);
                if r.kind == RecordKind::Succeeded {
                    step["status"] = json!("succeeded");
                    step["output"] = value(&r.data)
                        .map(|pairs| {
                            let mut m = serde_json::Map::new();
                            for p in pairs.as_array().into_iter().flatten() {
                                m.insert(p[0].as_str().unwrap_or("out").to_string(), p[1].clone());
                            }
                            Value::Object(m)
                        })
                        .unwrap_or(Value::Null);
                } else {
                    step["status"] = json!("failed");
                    step["error"] = r.error.clone().unwrap_or(Value::Null);
                }
            }
        }
    }
    out
}
