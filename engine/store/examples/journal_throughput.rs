//! Journal write throughput: N concurrent runs append records (with a
//! realistic small payload) and finish; prints rows/s.
//!
//! `cargo run --release -p sluice-store --example journal_throughput [runs] [records per run] [payload bytes]`

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::json;
use sluice_store::{NewRun, Record, RecordKind, RunStatus, Store};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let runs = args.next().transpose()?.unwrap_or(16);
    let per_run = args.next().transpose()?.unwrap_or(12_500);
    let payload = args.next().transpose()?.unwrap_or(200);
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path()).await?;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for r in 0..runs {
        let store = store.clone();
        tasks.spawn(async move {
            let id = format!("run-{r:04}");
            store
                .create_run(&NewRun {
                    id: id.clone(),
                    workflow_id: "bench".into(),
                    definition: "{}".into(),
                    trigger: "start".into(),
                    input: Arc::new(json!({})),
                    created_at_us: r as i64,
                    parent_run: None,
                    doc_version: None,
                    draft: false,
                    executor: Default::default(),
                })
                .await?;
            let journal = store.journal();
            let run_id: Arc<str> = id.as_str().into();
            let node: Arc<str> = "http".into();
            for seq in 0..per_run as u64 {
                let value = json!({"seq": seq, "body": "x".repeat(payload)});
                let data = store.blobs().store_value(&value)?;
                journal
                    .append(Record {
                        run_id: run_id.clone(),
                        seq,
                        kind: if seq % 2 == 0 {
                            RecordKind::Started
                        } else {
                            RecordKind::Succeeded
                        },
                        node: node.clone(),
                        lineage: (seq / 2).to_string(),
                        activation: "0".into(),
                        attempt: 0,
                        at_us: seq as i64,
                        data: Some(data),
                        input: None,
                        error: None,
                        duration_us: Some(10),
                    })
                    .await?;
            }
            journal
                .finish_run(&id, RunStatus::Succeeded, None, None, 0)
                .await?;
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = start.elapsed();
    let rows = runs * per_run;
    println!(
        "{rows} journal rows from {runs} runs ({payload} B payload) in {elapsed:.2?}: {:.0} rows/s",
        rows as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
