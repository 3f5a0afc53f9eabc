//! `sluice-bench-populate DIR [WORKFLOWS] [RUNS]`: a data dir as a long-time
//! user's, for `cargo xtask bench webhook`'s start-up figures: WORKFLOWS
//! published workflows (default 1,000; `w0` answers `POST /hook/w0/orders`)
//! and RUNS finished runs (default 1,000,000), each with its three journal
//! records. A few hundred runs go through the engine itself; the rest are
//! copies of them made with SQL (new ids, spread over the past year), so the
//! tables and indexes are the shapes the engine writes.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, Status};
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

/// Runs made by the engine; the others are copies of these.
const REAL_RUNS: usize = 500;

fn workflow(i: usize) -> Result<Arc<Plan>> {
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": format!("w{i}"),
        "name": format!("Workflow {i}"), "nodes": [
        {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
        {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
        {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
        "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}),
    )?;
    Ok(Plan::new(wf)?)
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(
        args.next()
            .context("usage: sluice-bench-populate DIR [WORKFLOWS] [RUNS]")?,
    );
    let workflows: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1_000);
    let runs: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    std::fs::create_dir_all(&dir)?;
    let t = std::time::Instant::now();
    {
        let engine = Engine::open(&dir, Options::default()).await?;
        for i in 0..workflows {
            let plan = workflow(i)?;
            engine.save_workflow(&plan).await?;
            engine.publish(&plan.workflow.id, None).await?;
        }
        let plan = engine.workflow("w0").await?;
        for n in 0..REAL_RUNS.min(runs) {
            let input = json!({"method": "POST", "path": "orders", "query": {}, "headers": {},
                "body": {"id": n, "total": 250}});
            let r = engine
                .start_for_result(plan.clone(), Some("hook"), Arc::new(input))
                .await?
                .wait()
                .await;
            anyhow::ensure!(r.status == Status::Succeeded, "run failed: {:?}", r.error);
        }
        engine.store().journal().flush().await?;
    }
    eprintln!(
        "{workflows} workflows and {REAL_RUNS} runs through the engine in {:?}",
        t.elapsed()
    );
    let copies = runs.saturating_sub(REAL_RUNS).div_ceil(REAL_RUNS);
    if copies > 0 {
        let mut conn = SqliteConnectOptions::new()
            .filename(dir.join("sluice.db"))
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(false)
            .connect()
            .await?;
        let year_us: i64 = 365 * 24 * 3600 * 1_000_000;
        let sql = format!(
            "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {copies}), \
             real AS (SELECT * FROM runs WHERE id NOT LIKE '%-c%') \
             INSERT INTO runs (id, workflow_id, definition, \"trigger\", input, status, output, error, \
                created_at_us, finished_at_us, parent_run, doc_version, draft, executor) \
             SELECT real.id || '-c' || k.n, real.workflow_id, real.definition, real.\"trigger\", real.input, \
                real.status, real.output, real.error, real.created_at_us - k.n * ({year_us} / {copies}), \
                real.finished_at_us - k.n * ({year_us} / {copies}), real.parent_run, real.doc_version, \
                real.draft, real.executor FROM real, k"
        );
        let mut tx = sqlx::Connection::begin(&mut conn).await?;
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await?;
        let sql = format!(
            "WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {copies}) \
             INSERT INTO journal (run_id, seq, kind, node, lineage, activation, attempt, at_us, data, error, duration_us, input) \
             SELECT j.run_id || '-c' || k.n, j.seq, j.kind, j.node, j.lineage, j.activation, j.attempt, \
                j.at_us - k.n * ({year_us} / {copies}), j.data, j.error, j.duration_us, j.input \
             FROM journal j, k WHERE j.run_id NOT LIKE '%-c%'"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await?;
        // The copies pin their definitions as the engine's writer counts.
        sqlx::query(
            "INSERT OR REPLACE INTO definition_pins (hash, runs) \
             SELECT substr(definition, 2), COUNT(*) FROM runs \
             WHERE definition LIKE '#%' GROUP BY definition",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&mut conn)
            .await?;
    }
    eprintln!(
        "{workflows} workflows, {} runs in {} ({:?})",
        REAL_RUNS + copies * REAL_RUNS,
        dir.display(),
        t.elapsed()
    );
    Ok(())
}
