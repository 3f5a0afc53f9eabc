//! Retention on real SQLite files: which runs go, what goes with them
//! (steps, logs, pinned definitions, blobs), and what always stays.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::json;
use sluice_api::{KeepFor, KeepMax, Retention, RunStatus};
use sluice_store::{LogLine, NewRun, Record, RecordKind, RunError, Store, Stored};
use sqlx::Connection;
use tempfile::TempDir;

const DAY_US: i64 = 86_400 * 1_000_000;
const NOW: i64 = 1_000 * DAY_US;

mod common;
use common::{open, timed};

fn definition(version: u32) -> String {
    format!(r#"{{"format":"sluice.workflow/v1","id":"wf","name":"v{version}","nodes":[]}}"#)
}

/// A run of `wf` started `age_days` before [`NOW`], with a step and a log
/// line, ended with `status` (or still running).
async fn run(
    store: &Store,
    id: &str,
    age_days: i64,
    status: RunStatus,
    version: u32,
    parent: Option<&str>,
) -> Result<()> {
    let created = NOW - age_days * DAY_US;
    store
        .create_run(&NewRun {
            id: id.into(),
            workflow_id: "wf".into(),
            definition: definition(version).into(),
            trigger: "start".into(),
            input: Arc::new(json!({"run": id})),
            created_at_us: created,
            parent_run: parent.map(str::to_string),
            doc_version: None,
            draft: false,
            executor: Default::default(),
        })
        .await?;
    let j = store.journal();
    j.append(Record {
        run_id: id.into(),
        seq: 1,
        kind: RecordKind::Succeeded,
        node: "start".into(),
        lineage: String::new(),
        activation: "0".into(),
        attempt: 0,
        at_us: created,
        data: Some(Stored::Loaded(Arc::new(json!([["out", {"run": id}]])))),
        input: None,
        error: None,
        duration_us: Some(1),
    })
    .await?;
    j.log(LogLine {
        run_id: id.into(),
        node: "start".into(),
        lineage: String::new(),
        level: "info".into(),
        message: format!("hello from {id}"),
        at_us: created,
    })
    .await?;
    if status != RunStatus::Running {
        let error = (status == RunStatus::Failed).then(|| RunError::of_run("boom"));
        j.finish_run(id, status, None, error, created + 1).await?;
    }
    j.flush().await?;
    Ok(())
}

/// A succeeded step record of `run` with `data` as its outputs.
fn step(run: &str, seq: u64, node: &str, data: Stored) -> Record {
    Record {
        run_id: run.into(),
        seq,
        kind: RecordKind::Succeeded,
        node: node.into(),
        lineage: String::new(),
        activation: "0".into(),
        attempt: 0,
        at_us: NOW,
        data: Some(data),
        input: None,
        error: None,
        duration_us: None,
    }
}

/// A run of `wf` recorded whole when it ended ([`Store::seal_run`]).
fn sealed_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        workflow_id: "wf".into(),
        definition: definition(1).into(),
        trigger: "start".into(),
        input: Arc::new(json!({"run": id})),
        created_at_us: NOW,
        parent_run: None,
        doc_version: None,
        draft: false,
        executor: Default::default(),
    }
}

/// How a sealed run of these tests ends.
fn succeeded_now() -> sluice_store::RunEnd {
    sluice_store::RunEnd {
        status: RunStatus::Succeeded,
        output: None,
        error: None,
        finished_at_us: NOW,
    }
}

async fn prune(store: &Store, r: &Retention) -> Result<sluice_store::Deleted> {
    let mut total = sluice_store::Deleted::default();
    let Some(cut) = store.cutoffs("wf", r, NOW).await? else {
        return Ok(total);
    };
    loop {
        let p = store.prunable_runs("wf", &cut, 2).await?;
        if p.runs.is_empty() {
            return Ok(total);
        }
        let d = store.delete_runs(p).await?;
        total.runs += d.runs;
        total.definitions += d.definitions;
    }
}

async fn count(dir: &TempDir, sql: &str) -> Result<i64> {
    let mut c = sqlx::SqliteConnection::connect(&format!(
        "sqlite://{}",
        dir.path().join("data/sluice.db").display()
    ))
    .await?;
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    Ok(sqlx::query_scalar(sql).fetch_one(&mut c).await?)
}

async fn text(dir: &TempDir, sql: &str) -> Result<String> {
    let mut c = sqlx::SqliteConnection::connect(&format!(
        "sqlite://{}",
        dir.path().join("data/sluice.db").display()
    ))
    .await?;
    let sql = sqlx::AssertSqlSafe(sql.to_string());
    Ok(sqlx::query_scalar(sql).fetch_one(&mut c).await?)
}

async fn kept(store: &Store) -> Result<Vec<String>> {
    let mut ids: Vec<String> = store
        .list_runs(1_000)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    ids.sort();
    Ok(ids)
}

#[tokio::test]
async fn old_runs_go_with_their_steps_logs_and_versions_and_what_must_stay_stays() -> Result<()> {
    timed(async {
        let (dir, store) = open().await?;
        // Version 1 is pinned only by old runs; version 2 by a kept one too.
        run(&store, "a-old-ok", 20, RunStatus::Succeeded, 1, None).await?;
        run(&store, "b-old-cancelled", 19, RunStatus::Cancelled, 1, None).await?;
        run(&store, "c-old-failed", 20, RunStatus::Failed, 2, None).await?;
        run(&store, "d-ancient-failed", 40, RunStatus::Failed, 1, None).await?;
        run(&store, "e-old-running", 25, RunStatus::Running, 2, None).await?;
        run(
            &store,
            "f-child-of-running",
            25,
            RunStatus::Succeeded,
            1,
            Some("e-old-running"),
        )
        .await?;
        run(&store, "g-new-ok", 1, RunStatus::Succeeded, 2, None).await?;
        let r = Retention {
            keep_for: KeepFor::Span(Duration::from_secs(14 * 86_400)),
            keep_max: KeepMax::Unlimited,
            keep_failed_for: KeepFor::Span(Duration::from_secs(30 * 86_400)),
        };
        let deleted = prune(&store, &r).await?;
        assert_eq!(deleted.runs, 3, "a, b, d");
        assert_eq!(
            kept(&store).await?,
            [
                "c-old-failed",
                "e-old-running",
                "f-child-of-running",
                "g-new-ok"
            ]
        );
        for gone in ["a-old-ok", "b-old-cancelled", "d-ancient-failed"] {
            assert!(store.get_run(gone).await?.is_none(), "{gone}");
            assert!(store.run_records(gone).await?.is_empty(), "{gone}'s steps");
            assert!(store.run_logs(gone).await?.is_empty(), "{gone}'s logs");
        }
        assert_eq!(store.run_records("c-old-failed").await?.len(), 1);
        assert_eq!(store.run_logs("c-old-failed").await?.len(), 1);
        // Version 1 is still pinned by the child of the running run.
        assert_eq!(deleted.definitions, 0);
        assert_eq!(count(&dir, "SELECT COUNT(*) FROM definitions").await?, 2);

        // The parent ends: its child may go now, and version 1 with it.
        store
            .journal()
            .finish_run(
                "e-old-running",
                RunStatus::Succeeded,
                None,
                None,
                NOW - 25 * DAY_US,
            )
            .await?;
        let deleted = prune(&store, &r).await?;
        assert_eq!(deleted.runs, 2, "e and f");
        assert_eq!(deleted.definitions, 1, "version 1: no run pins it");
        assert_eq!(count(&dir, "SELECT COUNT(*) FROM definitions").await?, 1);
        assert_eq!(kept(&store).await?, ["c-old-failed", "g-new-ok"]);

        // A new run of version 1 stores it again (the writer forgot it).
        run(&store, "h-v1-again", 0, RunStatus::Succeeded, 1, None).await?;
        assert_eq!(count(&dir, "SELECT COUNT(*) FROM definitions").await?, 2);
        let row = store.get_run("h-v1-again").await?.context("h")?;
        assert!(row.definition.contains("\"v1\""), "{}", row.definition);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn keep_max_keeps_the_newest_runs_of_each_workflow() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        for i in 0..7 {
            run(
                &store,
                &format!("r{i}"),
                7 - i,
                RunStatus::Succeeded,
                1,
                None,
            )
            .await?;
        }
        run(&store, "running", 30, RunStatus::Running, 1, None).await?;
        let r = Retention {
            keep_for: KeepFor::Forever,
            keep_max: KeepMax::Runs(3),
            keep_failed_for: KeepFor::Forever,
        };
        let deleted = prune(&store, &r).await?;
        // The three newest stay, and the run in progress whatever its age.
        assert_eq!(deleted.runs, 4);
        assert_eq!(kept(&store).await?, ["r4", "r5", "r6", "running"]);
        // keep_max 0 keeps no finished run.
        let none = Retention {
            keep_max: KeepMax::Runs(0),
            ..r
        };
        prune(&store, &none).await?;
        assert_eq!(kept(&store).await?, ["running"]);
        assert_eq!(store.workflows_with_runs().await?, ["wf"]);
        Ok(())
    })
    .await
}

/// Definitions whose `definition_pins` count is not the number of runs
/// pinning them, either way (a count too low lets retention delete a
/// definition a run still shows).
async fn miscounted_pins(dir: &TempDir) -> Result<i64> {
    count(
        dir,
        "SELECT (SELECT COUNT(*) FROM definition_pins p \
                 WHERE p.runs != (SELECT COUNT(*) FROM runs WHERE definition = '#' || p.hash)) \
              + (SELECT COUNT(*) FROM (SELECT DISTINCT definition FROM runs WHERE definition LIKE '#%') \
                 WHERE substr(definition, 2) NOT IN (SELECT hash FROM definition_pins))",
    )
    .await
}

#[tokio::test]
async fn pins_count_the_committed_runs_of_each_definition_whatever_the_path() -> Result<()> {
    timed(async {
        let (dir, store) = open().await?;
        // Runs created then finished, and a run recorded whole.
        for (id, version) in [("a", 1), ("b", 1), ("c", 2)] {
            run(&store, id, 10, RunStatus::Succeeded, version, None).await?;
        }
        store
            .seal_run(
                &sealed_run("sealed"),
                vec![step(
                    "sealed",
                    1,
                    "a",
                    Stored::Loaded(Arc::new(json!([["out", 1]]))),
                )],
                Vec::new(),
                succeeded_now(),
            )
            .await?;
        assert_eq!(
            count(&dir, "SELECT SUM(runs) FROM definition_pins").await?,
            4
        );
        assert_eq!(miscounted_pins(&dir).await?, 0);

        // A batch with a bad run is written again command by command: the
        // good run queued before it (written, then rolled back with the
        // batch) pins once, the bad run not at all.
        let mut good = sealed_run("d");
        good.definition = definition(2).into();
        let mut dup = sealed_run("a");
        dup.definition = definition(2).into();
        let (good, dup) = tokio::join!(store.create_run(&good), store.create_run(&dup));
        assert!(dup.is_err(), "the id is taken");
        good?;
        assert_eq!(
            count(&dir, "SELECT SUM(runs) FROM definition_pins").await?,
            5
        );
        assert_eq!(miscounted_pins(&dir).await?, 0);

        // Retention unpins what it deletes; a definition with no pin left
        // goes, its count with it, and one still pinned stays.
        let r = Retention {
            keep_for: KeepFor::Forever,
            keep_max: KeepMax::Runs(2),
            keep_failed_for: KeepFor::Forever,
        };
        let deleted = prune(&store, &r).await?;
        // a, b and c (10 days old) go; d (running, v2) and sealed (v1) stay.
        assert_eq!(deleted.runs, 3);
        assert_eq!(kept(&store).await?, ["d", "sealed"]);
        assert_eq!(deleted.definitions, 0, "v1 by sealed, v2 by d");
        assert_eq!(miscounted_pins(&dir).await?, 0);
        assert_eq!(
            count(&dir, "SELECT SUM(runs) FROM definition_pins").await?,
            2
        );
        store
            .journal()
            .finish_run("d", RunStatus::Succeeded, None, None, NOW)
            .await?;
        let none = Retention {
            keep_max: KeepMax::Runs(0),
            ..r
        };
        let deleted = prune(&store, &none).await?;
        assert_eq!(deleted.runs, 2);
        assert_eq!(deleted.definitions, 2);
        assert_eq!(count(&dir, "SELECT COUNT(*) FROM definitions").await?, 0);
        assert_eq!(
            count(&dir, "SELECT COUNT(*) FROM definition_pins").await?,
            0
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn blobs_no_kept_value_refers_to_are_collected_and_the_rest_stay() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        // A large value (a blob of its own) holding a reference to binary
        // data; binary data referred to by a step; an orphan; a module.
        let bytes_blob = |data: &[u8]| -> Result<String> {
            let mut w = store.blobs().bytes_writer()?;
            w.write(data)?;
            Ok(w.finish()?.0)
        };
        let nested = bytes_blob(b"nested binary data")?;
        let referenced = bytes_blob(b"referenced binary data")?;
        let orphan = bytes_blob(b"nobody refers to this")?;
        let module = bytes_blob(b"\0asm\x01\0\0\0")?;
        let big = json!({
            "file": {"$blob": nested, "size": 18},
            "pad": "x".repeat(sluice_store::INLINE_LIMIT),
        });
        let Stored::Blob(big_hash) = store.blobs().store_value(&big)? else {
            anyhow::bail!("a value past the inline limit is a blob");
        };
        run(&store, "kept", 0, RunStatus::Succeeded, 1, None).await?;
        let j = store.journal();
        for (seq, data) in [
            (2, Stored::Blob(big_hash.clone())),
            (
                3,
                Stored::Loaded(Arc::new(
                    json!([["out", {"$blob": referenced, "size": 22}]]),
                )),
            ),
        ] {
            j.append(step("kept", seq, &format!("n{seq}"), data))
                .await?;
        }
        j.flush().await?;
        // A run recorded whole (its journal packed into its row) keeps the
        // blobs its steps refer to the same way.
        let sealed_big = json!({"pad": "y".repeat(sluice_store::INLINE_LIMIT)});
        let Stored::Blob(sealed_hash) = store.blobs().store_value(&sealed_big)? else {
            anyhow::bail!("a value past the inline limit is a blob");
        };
        let sealed_ref = bytes_blob(b"binary data a sealed run refers to")?;
        store
            .seal_run(
                &sealed_run("sealed"),
                vec![
                    step("sealed", 1, "a", Stored::Blob(sealed_hash.clone())),
                    step(
                        "sealed",
                        2,
                        "b",
                        Stored::Loaded(Arc::new(
                            json!([["out", {"$blob": sealed_ref, "size": 34}]]),
                        )),
                    ),
                ],
                Vec::new(),
                succeeded_now(),
            )
            .await?;
        let exists = |h: &str| store.blobs().blob_path(h).is_ok();

        // Within the grace nothing goes.
        let c = store.collect_blobs().await?;
        assert_eq!((c.blobs, c.bytes), (0, 0));
        let c = store.collect_blobs_older_than(Duration::ZERO).await?;
        assert_eq!((c.blobs, c.bytes), (1, 21), "only the orphan");
        assert!(!exists(&orphan));
        for h in [
            &nested,
            &referenced,
            &module,
            &big_hash,
            &sealed_hash,
            &sealed_ref,
        ] {
            assert!(exists(h), "{h}");
        }

        // The run goes: its blobs are garbage now, the module stays.
        let all = Retention {
            keep_for: KeepFor::Forever,
            keep_max: KeepMax::Runs(0),
            keep_failed_for: KeepFor::Forever,
        };
        assert_eq!(prune(&store, &all).await?.runs, 2);
        let c = store.collect_blobs_older_than(Duration::ZERO).await?;
        assert_eq!(c.blobs, 5);
        for h in [&nested, &referenced, &big_hash, &sealed_hash, &sealed_ref] {
            assert!(!exists(h), "{h}");
        }
        assert!(exists(&module));

        // A value stored again finds its blob fresh: the grace starts over.
        let stale = bytes_blob(b"stored long ago")?;
        let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 3_600);
        let set_old = || -> Result<()> {
            std::fs::OpenOptions::new()
                .write(true)
                .open(store.blobs().blob_path(&stale)?)?
                .set_modified(two_hours_ago)?;
            Ok(())
        };
        set_old()?;
        assert_eq!(bytes_blob(b"stored long ago")?, stale);
        assert_eq!(store.collect_blobs().await?.blobs, 0);
        assert!(exists(&stale));
        set_old()?;
        assert_eq!(store.collect_blobs().await?.blobs, 1);
        assert!(!exists(&stale));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn free_pages_go_back_to_the_os_and_the_report_adds_up() -> Result<()> {
    timed(async {
        let (dir, store) = open().await?;
        for i in 0..40 {
            run(
                &store,
                &format!("r{i:02}"),
                20,
                RunStatus::Succeeded,
                1,
                None,
            )
            .await?;
            // Some weight per run: a 20 KiB step output.
            store
                .journal()
                .append(step(
                    &format!("r{i:02}"),
                    2,
                    "heavy",
                    Stored::Loaded(Arc::new(json!([["out", "y".repeat(20_000)]]))),
                ))
                .await?;
        }
        run(&store, "live", 0, RunStatus::Running, 1, None).await?;
        let before = store.storage().await?;
        assert!(before.incremental, "a new database vacuums incrementally");
        assert_eq!((before.runs, before.running), (41, 1));
        assert_eq!(before.by_workflow, [("wf".to_string(), 41)]);
        assert_eq!(before.oldest_started_at_us, Some(NOW - 20 * DAY_US));

        let r = Retention {
            keep_for: KeepFor::Span(Duration::from_secs(86_400)),
            ..Retention::DEFAULT
        };
        assert_eq!(prune(&store, &r).await?.runs, 40);
        let free = store.free_pages().await?;
        assert!(free * before.page_size > 40 * 20_000, "{free} free pages");
        let returned = store.return_free_pages(u32::MAX).await?;
        assert_eq!(returned, free * before.page_size);
        let after = store.storage().await?;
        assert_eq!(after.free_pages, 0);
        assert!(
            after.pages < before.pages,
            "{} < {}",
            after.pages,
            before.pages
        );
        assert_eq!((after.runs, after.running), (1, 1));
        assert_eq!(text(&dir, "PRAGMA integrity_check").await?, "ok");
        Ok(())
    })
    .await
}
