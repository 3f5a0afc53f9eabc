//! Store tests on real SQLite files with the real migrations.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sluice_store::{
    CredentialRow, Error, LogLine, NewRun, Record, RecordKind, RunError, RunFilter, RunStatus,
    Store, Stored, VersionMark, VersionRow,
};

mod common;
use common::{open, timed};

fn new_run(id: &str, created_at_us: i64) -> NewRun {
    NewRun {
        id: id.into(),
        workflow_id: "wf".into(),
        definition: r#"{"format":"sluice.workflow/v1","nodes":[]}"#.into(),
        trigger: "start".into(),
        input: Arc::new(json!({"n": created_at_us})),
        created_at_us,
        parent_run: None,
        doc_version: None,
        draft: false,
        executor: Default::default(),
    }
}

fn record(run: &str, seq: u64, kind: RecordKind, data: Option<Stored>) -> Record {
    Record {
        run_id: run.into(),
        seq,
        kind,
        node: "node".into(),
        lineage: String::new(),
        activation: "0".into(),
        attempt: 0,
        at_us: 1_000 + seq as i64,
        data,
        input: None,
        error: None,
        duration_us: None,
    }
}

/// Compares a record read back with the one appended, values resolved.
#[track_caller]
fn assert_same_record(store: &Store, got: &Record, want: &Record) {
    let value = |s: &Option<Stored>| {
        s.as_ref()
            .map(|s| store.blobs().resolve(s).expect("resolve"))
    };
    assert_eq!(
        (
            &got.run_id,
            got.seq,
            got.kind,
            &got.node,
            &got.lineage,
            &got.activation,
            got.attempt,
            got.at_us,
            &got.error,
            got.duration_us
        ),
        (
            &want.run_id,
            want.seq,
            want.kind,
            &want.node,
            &want.lineage,
            &want.activation,
            want.attempt,
            want.at_us,
            &want.error,
            want.duration_us
        )
    );
    assert!(
        matches!(got.data, None | Some(Stored::Loaded(_))),
        "reads return loaded values"
    );
    assert_eq!(value(&got.data), value(&want.data));
    assert_eq!(value(&got.input), value(&want.input));
}

fn big_value() -> Value {
    // About 2 MB of JSON: past the inline limit (1 MiB).
    let items: Vec<Value> = (0..20_000)
        .map(|i| json!({"i": i, "text": "x".repeat(80)}))
        .collect();
    Value::Array(items)
}

fn blob_files(store: &Store) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for shard in std::fs::read_dir(store.blobs().dir())? {
        let shard = shard?;
        if shard.file_name() == "tmp" {
            continue;
        }
        for f in std::fs::read_dir(shard.path())? {
            files.push(f?.path());
        }
    }
    Ok(files)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_opened_at_once_on_a_new_data_dir_both_open() -> Result<()> {
    // Two processes started together on a fresh data dir (`sluice serve`
    // and a `sluice runs list`, the app and a script) migrate the same new
    // database: neither may fail half-way with "table … already exists".
    timed(async {
        for _ in 0..20 {
            let dir = tempfile::tempdir()?;
            let (a, b, c) = tokio::join!(
                Store::open(dir.path()),
                Store::open(dir.path()),
                Store::open(dir.path())
            );
            let (a, _b, _c) = (a?, b?, c?);
            a.put_workflow("w", "W", "{}").await?;
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn open_twice_runs_migrations_once() -> Result<()> {
    timed(async {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path()).await?;
        store.put_workflow("a", "First", r#"{"v":1}"#).await?;
        drop(store);
        let store = Store::open(dir.path()).await?;
        assert_eq!(
            store.get_workflow("a").await?.as_deref(),
            Some(r#"{"v":1}"#)
        );
        // A second store on the same dir at the same time also works.
        let other = Store::open(dir.path()).await?;
        other.put_workflow("a", "Renamed", r#"{"v":2}"#).await?;
        let list = store.list_workflows().await?;
        assert_eq!(list.len(), 1);
        assert_eq!(
            (list[0].id.as_str(), list[0].name.as_str()),
            ("a", "Renamed")
        );
        assert!(list[0].updated_at_us > 0);
        assert_eq!(
            store.get_workflow("a").await?.as_deref(),
            Some(r#"{"v":2}"#)
        );
        assert_eq!(store.get_workflow("missing").await?, None);
        assert!(store.data_dir().join("sluice.db").exists());
        Ok(())
    })
    .await
}

/// Writing a run row builds no temporary b-tree: the status CHECK used to be
/// `status IN (four names)`, which SQLite checks through a table it builds
/// and drops on every insert (7% of a webhook run's instructions). The rule
/// itself still holds.
#[tokio::test]
async fn a_run_row_is_checked_without_a_temporary_table() -> Result<()> {
    use sqlx::{Connection, Row};
    timed(async {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path()).await?;
        store.create_run(&new_run("r1", 1)).await?;
        let mut c = sqlx::SqliteConnection::connect(&format!(
            "sqlite://{}",
            dir.path().join("sluice.db").display()
        ))
        .await?;
        let program = sqlx::query(
            "EXPLAIN INSERT INTO runs (id, workflow_id, definition, \"trigger\", input, created_at_us, status) \
             VALUES ('r2', 'wf', '#x', 'start', '{}', 2, 'running')",
        )
        .fetch_all(&mut c)
        .await?;
        let ops: Vec<String> = program.iter().map(|r| r.get::<String, _>("opcode")).collect();
        assert!(ops.iter().any(|o| o == "Insert"), "{ops:?}");
        assert!(
            !ops.iter().any(|o| o == "OpenEphemeral"),
            "a run insert builds a temporary table: {ops:?}"
        );
        let refused = sqlx::query("UPDATE runs SET status = 'bogus' WHERE id = 'r1'")
            .execute(&mut c)
            .await
            .expect_err("an unknown status is refused");
        assert!(refused.to_string().contains("CHECK"), "{refused}");
        for status in ["succeeded", "failed", "cancelled", "running"] {
            sqlx::query("UPDATE runs SET status = ? WHERE id = 'r1'")
                .bind(status)
                .execute(&mut c)
                .await?;
        }
        let check: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&mut c)
            .await?;
        assert_eq!(check, "ok");
        drop(c);
        drop(store);
        // And it opens again (the edit is a migration, run once).
        let store = Store::open(dir.path()).await?;
        assert!(store.get_run("r1").await?.is_some());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn run_and_journal_survive_reopen() -> Result<()> {
    timed(async {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path()).await?;
        let mut run = new_run("r1", 42);
        run.parent_run = Some("r0".into());
        store.create_run(&run).await?;
        let journal = store.journal();
        let blobs = store.blobs();
        let records = vec![
            record(
                "r1",
                1,
                RecordKind::Started,
                Some(blobs.store_value(&json!({"in": 1}))?),
            ),
            Record {
                lineage: "3.1".into(),
                activation: "0.1".into(),
                attempt: 2,
                duration_us: Some(1234),
                ..record(
                    "r1",
                    2,
                    RecordKind::Succeeded,
                    Some(blobs.store_value(&big_value())?),
                )
            },
            Record {
                error: Some(RunError {
                    retryable: Some(false),
                    ..RunError::of_run("boom")
                }),
                input: Some(blobs.store_value(&json!({"step": "input"}))?),
                ..record("r1", 3, RecordKind::Failed, None)
            },
            record(
                "r1",
                5,
                RecordKind::Skipped,
                Some(Stored::Loaded(Arc::new(json!("loaded")))),
            ),
        ];
        for r in &records {
            journal.append(r.clone()).await?;
        }
        journal
            .log(LogLine {
                run_id: "r1".into(),
                node: "node".into(),
                lineage: "3".into(),
                level: "info".into(),
                message: "hello".into(),
                at_us: 7,
            })
            .await?;
        let output = blobs.store_value(&json!({"end": [1, 2]}))?;
        let noted = RunError {
            node: Some("end".into()),
            message: "a note".into(),
            retryable: Some(true),
            attempts: Some(3),
        };
        journal
            .finish_run(
                "r1",
                RunStatus::Succeeded,
                Some(output),
                Some(noted.clone()),
                99,
            )
            .await?;
        drop(journal);
        drop(store);

        let store = Store::open(dir.path()).await?;
        let got = store.run_records("r1").await?;
        assert_eq!(got.len(), records.len());
        for (got, want) in got.iter().zip(&records) {
            assert_same_record(&store, got, want);
        }
        let row = store.get_run("r1").await?.context("run row")?;
        assert_eq!(row.id, "r1");
        assert_eq!(row.workflow_id, run.workflow_id);
        assert_eq!(row.definition, run.definition.text());
        assert_eq!(row.trigger, run.trigger);
        assert_eq!(row.input, run.input);
        assert_eq!(row.status, RunStatus::Succeeded);
        assert_eq!(row.output, Some(json!({"end": [1, 2]})));
        assert_eq!(row.error, Some(noted));
        assert_eq!(row.created_at_us, 42);
        assert_eq!(row.finished_at_us, Some(99));
        assert_eq!(row.parent_run.as_deref(), Some("r0"));
        let logs = store.run_logs("r1").await?;
        assert_eq!(logs.len(), 1);
        assert_eq!(
            (
                logs[0].lineage.as_str(),
                logs[0].message.as_str(),
                logs[0].at_us
            ),
            ("3", "hello", 7)
        );
        assert!(store.get_run("nope").await?.is_none());
        assert!(store.run_records("nope").await?.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn big_values_go_to_shared_blob_files() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        let v = big_value();
        let a = store.blobs().store_value(&v)?;
        let Stored::Blob(hash) = &a else {
            bail!("2 MB value stored as {a:?}");
        };
        assert_eq!(hash.len(), 64);
        assert_eq!(store.blobs().load_value(hash)?, v);
        let b = store.blobs().store_value(&v)?;
        assert!(matches!(&b, Stored::Blob(h) if h == hash));
        assert_eq!(
            blob_files(&store)?.len(),
            1,
            "equal values share one blob file"
        );
        let size = std::fs::metadata(&blob_files(&store)?[0])?.len();
        assert!(size > 900_000, "blob holds the JSON text ({size} bytes)");

        // A big run input goes to the same blob and reads back.
        let mut run = new_run("big", 1);
        run.input = Arc::new(v.clone());
        store.create_run(&run).await?;
        assert_eq!(blob_files(&store)?.len(), 1);
        assert_eq!(*store.get_run("big").await?.context("run")?.input, v);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn load_value_refuses_paths() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        for bad in ["../etc/passwd", "../../sluice.db", "/etc/passwd"] {
            assert!(
                matches!(store.blobs().load_value(bad), Err(Error::InvalidHash(_))),
                "{bad}"
            );
        }
        // Nor can a forged blob reference get in through the journal.
        store.create_run(&new_run("r", 1)).await?;
        let rec = record(
            "r",
            1,
            RecordKind::Started,
            Some(Stored::Blob("../etc/passwd".into())),
        );
        assert!(matches!(
            store.journal().append(rec).await,
            Err(Error::InvalidHash(_))
        ));
        let rec = record(
            "r",
            1,
            RecordKind::Started,
            Some(Stored::Inline("@abc".into())),
        );
        assert!(matches!(
            store.journal().append(rec).await,
            Err(Error::InvalidInline)
        ));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn list_runs_newest_first() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        for (id, at) in [("a", 10), ("b", 30), ("c", 20), ("d", 30)] {
            store.create_run(&new_run(id, at)).await?;
        }
        let ids =
            |rows: Vec<sluice_store::RunRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(store.list_runs(10).await?), ["d", "b", "c", "a"]);
        assert_eq!(ids(store.list_runs(2).await?), ["d", "b"]);
        assert!(store.list_runs(0).await?.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn unfinished_runs_are_the_running_ones_oldest_first() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        for (id, at) in [("a", 4), ("b", 3), ("c", 2), ("d", 1)] {
            store.create_run(&new_run(id, at)).await?;
        }
        let journal = store.journal();
        journal
            .finish_run("a", RunStatus::Failed, None, Some(RunError::of_run("x")), 5)
            .await?;
        journal
            .finish_run("c", RunStatus::Cancelled, None, None, 5)
            .await?;
        let ids: Vec<String> = store
            .unfinished_runs()
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, ["d", "b"]);
        let a = store.get_run("a").await?.context("a")?;
        assert_eq!((a.status.as_str(), a.finished_at_us), ("failed", Some(5)));
        assert!(
            store
                .get_run("b")
                .await?
                .context("b")?
                .finished_at_us
                .is_none()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn finish_run_checks_status_and_run() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        let journal = store.journal();
        assert!(matches!(
            journal
                .finish_run("x", RunStatus::Running, None, None, 1)
                .await,
            Err(Error::InvalidStatus(_))
        ));
        assert!(matches!(
            journal.finish_run("x", RunStatus::Succeeded, None, None, 1).await,
            Err(Error::RunNotFound(id)) if id == "x"
        ));
        assert!(matches!(store.create_run(&new_run("r", 1)).await, Ok(())));
        assert!(
            matches!(
                store.create_run(&new_run("r", 1)).await,
                Err(Error::Journal(_))
            ),
            "duplicate run id"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn flush_waits_for_queued_writes() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        store.create_run(&new_run("r", 1)).await?;
        let journal = store.journal();
        for seq in 1..=50 {
            journal
                .append(record(
                    "r",
                    seq,
                    RecordKind::Started,
                    Some(Stored::Inline(seq.to_string())),
                ))
                .await?;
            journal
                .log(LogLine {
                    run_id: "r".into(),
                    node: "n".into(),
                    lineage: String::new(),
                    level: "info".into(),
                    message: format!("line {seq}"),
                    at_us: 0,
                })
                .await?;
        }
        journal.flush().await?;
        let got = store.run_records("r").await?;
        assert_eq!(got.len(), 50);
        assert!(got.iter().zip(1..).all(|(r, seq)| r.seq == seq
            && r.data.as_ref().and_then(Stored::value) == Some(Arc::new(json!(seq)))));
        let logs = store.run_logs("r").await?;
        assert_eq!(
            logs.iter().map(|l| l.message.clone()).collect::<Vec<_>>(),
            (1..=50).map(|i| format!("line {i}")).collect::<Vec<_>>()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_bad_write_fails_alone() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        store.create_run(&new_run("good", 1)).await?;
        store.create_run(&new_run("bad", 2)).await?;
        let journal = store.journal();
        journal
            .append(record("good", 1, RecordKind::Started, None))
            .await?;
        journal
            .append(record("bad", 1, RecordKind::Started, None))
            .await?;
        journal
            .append(record("bad", 1, RecordKind::Started, None))
            .await?; // duplicate seq
        journal
            .append(record("ghost", 1, RecordKind::Started, None))
            .await?; // no such run
        journal
            .append(record("good", 2, RecordKind::Succeeded, None))
            .await?;
        match journal.flush().await {
            Err(Error::WritesLost { count: 2, .. }) => {}
            other => bail!("flush: {other:?}"),
        }
        journal
            .flush()
            .await
            .context("losses are reported once per flush")?;
        assert_eq!(store.run_records("good").await?.len(), 2);
        assert_eq!(store.run_records("bad").await?.len(), 1);
        journal
            .finish_run("good", RunStatus::Succeeded, None, None, 3)
            .await?;
        match journal
            .finish_run("bad", RunStatus::Succeeded, None, None, 3)
            .await
        {
            Err(Error::WritesLost { count: 1, .. }) => {}
            other => bail!("finish_run(bad): {other:?}"),
        }
        assert_eq!(
            store.get_run("bad").await?.context("bad")?.status,
            RunStatus::Succeeded
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn ten_thousand_appends_then_flush() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        store.create_run(&new_run("r", 1)).await?;
        let journal = store.journal();
        let data = store
            .blobs()
            .store_value(&json!({"payload": "x".repeat(100)}))?;
        let start = Instant::now();
        for seq in 1..=10_000 {
            journal
                .append(record("r", seq, RecordKind::Succeeded, Some(data.clone())))
                .await?;
        }
        journal.flush().await?;
        let elapsed = start.elapsed();
        eprintln!(
            "10000 appends + flush: {elapsed:?} ({:.0} rows/s)",
            10_000.0 / elapsed.as_secs_f64()
        );
        let got = store.run_records("r").await?;
        assert_eq!(got.len(), 10_000);
        assert!(got.iter().zip(1..).all(|(r, seq)| r.seq == seq));
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_keep_per_run_order() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        let mut tasks = tokio::task::JoinSet::new();
        for r in 0..8 {
            let store = store.clone();
            tasks.spawn(async move {
                let id = format!("run{r}");
                store.create_run(&new_run(&id, r)).await?;
                let journal = store.journal();
                for seq in 1..=2_000 {
                    let data = Stored::Inline(format!("{{\"seq\":{seq}}}"));
                    journal
                        .append(record(&id, seq, RecordKind::Started, Some(data)))
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
        for r in 0..8 {
            let got = store.run_records(&format!("run{r}")).await?;
            assert_eq!(got.len(), 2_000);
            assert!(got.iter().zip(1..).all(|(rec, seq)| rec.seq == seq));
        }
        assert!(store.unfinished_runs().await?.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn many_finishes_in_one_batch_and_one_unknown_run() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        for i in 0..40 {
            store.queue_run(&new_run(&format!("r{i}"), i)).await?;
        }
        let journal = store.journal();
        // Queued together, so the writer sees them in one batch.
        let finishes = (0..40).map(|i| {
            let journal = journal.clone();
            async move {
                let status = if i % 2 == 0 {
                    RunStatus::Succeeded
                } else {
                    RunStatus::Failed
                };
                journal
                    .finish_run(&format!("r{i}"), status, None, None, 100 + i)
                    .await
            }
        });
        let unknown = journal.finish_run("ghost", RunStatus::Succeeded, None, None, 1);
        let (results, ghost) = tokio::join!(futures::future::join_all(finishes), unknown);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert!(matches!(ghost, Err(Error::RunNotFound(id)) if id == "ghost"));
        for i in 0..40 {
            let row = store.get_run(&format!("r{i}")).await?.context("run")?;
            assert_eq!(
                row.status.as_str(),
                if i % 2 == 0 { "succeeded" } else { "failed" }
            );
            assert_eq!(row.finished_at_us, Some(100 + i));
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_definition_first_seen_in_a_failed_batch_is_stored_later() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        store.create_run(&new_run("dup", 1)).await?;
        let fresh_def = r#"{"format":"sluice.workflow/v1","nodes":[2]}"#;
        let with_def = |id: &str| NewRun {
            definition: fresh_def.into(),
            ..new_run(id, 2)
        };
        // The only run pinning the new definition fails (its id is taken):
        // its batch rolls back, definition and all.
        assert!(store.create_run(&with_def("dup")).await.is_err());
        // So the writer must not count the text as stored.
        store.create_run(&with_def("later")).await?;
        assert_eq!(
            store.get_run("later").await?.context("run")?.definition,
            fresh_def
        );
        // Runs queued together share a batch; one bad run fails only itself.
        let (bad, good) = (with_def("dup"), with_def("fresh"));
        let (bad, good) = tokio::join!(store.create_run(&bad), store.create_run(&good));
        assert!(bad.is_err());
        good?;
        assert_eq!(
            store.get_run("fresh").await?.context("run")?.definition,
            fresh_def
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_definition_is_stored_once_for_all_its_runs() -> Result<()> {
    timed(async {
        let (dir, store) = open().await?;
        for i in 0..5 {
            store.create_run(&new_run(&format!("same{i}"), i)).await?;
        }
        let other = NewRun {
            definition: r#"{"format":"sluice.workflow/v1","nodes":[1]}"#.into(),
            ..new_run("other", 9)
        };
        store.create_run(&other).await?;
        assert_eq!(
            store.get_run("same3").await?.context("run")?.definition,
            new_run("x", 0).definition.text()
        );
        assert_eq!(
            store.get_run("other").await?.context("run")?.definition,
            other.definition.text()
        );
        let db = sqlx::SqlitePool::connect(&format!(
            "sqlite://{}",
            dir.path().join("data/sluice.db").display()
        ))
        .await?;
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM definitions")
            .fetch_one(&db)
            .await?;
        assert_eq!(n, 2);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn credentials_round_trip_encrypted_and_bound_to_their_name() -> Result<()> {
    timed(async {
        let (dir, store) = open().await?;
        store.put_credential("api", "bearer", &json!({"token": "tok-123"})).await?;
        assert_eq!(store.get_credential("api").await?, Some(("bearer".into(), json!({"token": "tok-123"}))));
        assert_eq!(store.get_credential("nope").await?, None);
        // A ciphertext copied under another name does not decrypt.
        let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", dir.path().join("data/sluice.db").display())).await?;
        sqlx::query("INSERT INTO credentials (name, kind, nonce, secret, updated_at_us) SELECT 'copy', kind, nonce, secret, 0 FROM credentials WHERE name = 'api'")
            .execute(&db)
            .await?;
        assert!(matches!(store.get_credential("copy").await, Err(Error::Vault(_))));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("data/vault.key"))?.permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // The key lives beside the database, and a reopened store reads the same key.
        drop(store);
        let again = Store::open(&dir.path().join("data")).await?;
        assert_eq!(again.get_credential("api").await?.map(|(_, v)| v), Some(json!({"token": "tok-123"})));
        // A lost key is an error, never a silently new key.
        drop(again);
        std::fs::remove_file(dir.path().join("data/vault.key"))?;
        // (The store opens; the vault refuses on first use.)
        let store = Store::open(&dir.path().join("data")).await?;
        let err = store.get_credential("api").await.unwrap_err();
        assert!(err.to_string().contains("is missing but credentials are stored"), "{err}");
        assert!(!dir.path().join("data/vault.key").exists());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn the_journal_checkpoints_its_wal_as_it_goes() -> Result<()> {
    timed(async {
        let (dir, store) = open().await?;
        store.create_run(&new_run("r", 1)).await?;
        let journal = store.journal();
        // 300 commits of 100 records: without checkpoints the WAL would
        // hold every page of every commit (over 8 MB here).
        for wave in 0..300u64 {
            for i in 1..=100 {
                let seq = wave * 100 + i;
                let data = Stored::Inline(json!({"seq": seq, "pad": "y".repeat(100)}).to_string());
                journal
                    .append(record("r", seq, RecordKind::Succeeded, Some(data)))
                    .await?;
            }
            journal.flush().await?;
        }
        assert_eq!(store.run_records("r").await?.len(), 30_000);
        let wal = std::fs::metadata(dir.path().join("data/sluice.db-wal"))?.len();
        assert!(
            wal < 4 << 20,
            "the WAL grew to {wal} bytes: it is not checkpointed"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn documents_and_their_versions_read_back() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        let mark = |parent, version, author, message| VersionMark {
            parent,
            version,
            author,
            message,
            gap_us: 3_600_000_000,
        };
        let seq = store
            .put_workflow_update(
                "wf",
                "WF",
                r#"{"v":1}"#,
                b"u1",
                &mark("", "v1", "alice", Some("api")),
            )
            .await?;
        assert_eq!(seq, 1);
        // The same author soon after, from the same place: the same version.
        store
            .append_doc_update("wf", b"u2", &mark("v1", "v2", "alice", Some("api")))
            .await?;
        // Another author: a new version.
        store
            .append_doc_update("wf", b"u3", &mark("v2", "v3", "bob", None))
            .await?;
        let versions = store.list_versions("wf", 0, 10).await?;
        let seen: Vec<_> = versions
            .iter()
            .map(|v| {
                (
                    v.seq,
                    v.parent.as_str(),
                    v.version.as_str(),
                    v.author.as_str(),
                    v.message.as_deref(),
                    v.edits,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (2, "v2", "v3", "bob", None, 1),
                (1, "", "v2", "alice", Some("api"), 2)
            ]
        );
        let VersionRow {
            started_at_us,
            at_us,
            ..
        } = versions[1];
        assert!(0 < started_at_us && started_at_us <= at_us);
        assert_eq!(store.list_versions("wf", 1, 10).await?, versions[1..]);

        assert_eq!(
            store.get_workflow_at("wf").await?,
            Some((r#"{"v":1}"#.to_string(), Some("v1".to_string())))
        );
        store.put_workflow("plain", "Plain", r#"{"v":0}"#).await?;
        assert_eq!(
            store.get_workflow_at("plain").await?,
            Some((r#"{"v":0}"#.to_string(), None))
        );
        assert_eq!(store.get_workflow_at("missing").await?, None);

        let doc = store.load_doc("wf").await?;
        assert_eq!((doc.snapshot, doc.upto_seq), (None, 0));
        assert_eq!(
            doc.updates,
            [
                (1, b"u1".to_vec()),
                (2, b"u2".to_vec()),
                (3, b"u3".to_vec())
            ]
        );
        store.compact_doc("wf", b"snap", 2).await?;
        let doc = store.load_doc("wf").await?;
        assert_eq!(
            (doc.snapshot.as_deref(), doc.upto_seq),
            (Some(&b"snap"[..]), 2)
        );
        assert_eq!(doc.updates, [(3, b"u3".to_vec())]);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn credentials_are_listed_by_name_without_values() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        store
            .put_credential("b", "basic", &json!({"user": "u"}))
            .await?;
        store
            .put_credential("a", "bearer", &json!({"token": "t"}))
            .await?;
        let list = store.list_credentials().await?;
        let names: Vec<_> = list
            .iter()
            .map(|CredentialRow { name, kind, .. }| (name.as_str(), kind.as_str()))
            .collect();
        assert_eq!(names, [("a", "bearer"), ("b", "basic")]);
        assert!(list.iter().all(|c| c.updated_at_us > 0));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn runs_are_found_by_workflow_status_trigger_and_cursor() -> Result<()> {
    timed(async {
        let (_dir, store) = open().await?;
        for (id, at, workflow, trigger) in [
            ("a", 10, "wf", "start"),
            ("b", 20, "wf", "cron"),
            ("c", 30, "other", "cron"),
            ("d", 40, "wf", "cron"),
        ] {
            store
                .create_run(&NewRun {
                    workflow_id: workflow.into(),
                    trigger: trigger.into(),
                    doc_version: Some(format!("v-{id}")),
                    ..new_run(id, at)
                })
                .await?;
        }
        store
            .journal()
            .finish_run(
                "d",
                RunStatus::Failed,
                None,
                Some(RunError::of_run("x")),
                50,
            )
            .await?;
        let ids =
            |rows: Vec<sluice_store::RunRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
        let find = |workflow: Option<&str>, status: Option<&str>, before: Option<&str>| RunFilter {
            workflow: workflow.map(Into::into),
            status: status.map(|s| s.parse().unwrap()),
            before: before.map(Into::into),
            limit: 10,
            ..Default::default()
        };
        assert_eq!(
            ids(store.find_runs(&find(None, None, None)).await?),
            ["d", "c", "b", "a"]
        );
        assert_eq!(
            ids(store.find_runs(&find(Some("wf"), None, None)).await?),
            ["d", "b", "a"]
        );
        assert_eq!(
            ids(store
                .find_runs(&find(Some("wf"), Some("running"), None))
                .await?),
            ["b", "a"]
        );
        assert_eq!(
            ids(store.find_runs(&find(None, None, Some("c"))).await?),
            ["b", "a"]
        );
        let failed = store.find_runs(&find(None, Some("failed"), None)).await?;
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].error, Some(RunError::of_run("x")));
        assert_eq!(failed[0].finished_at_us, Some(50));
        assert_eq!(failed[0].doc_version.as_deref(), Some("v-d"));
        assert_eq!(failed[0].definition, new_run("d", 0).definition.text());

        let latest = store
            .latest_run_for_trigger("wf", "cron")
            .await?
            .context("a cron run")?;
        assert_eq!(latest.id, "d");
        assert_eq!(
            store
                .latest_run_for_trigger("wf", "start")
                .await?
                .map(|r| r.id)
                .as_deref(),
            Some("a")
        );
        assert!(
            store
                .latest_run_for_trigger("other", "start")
                .await?
                .is_none()
        );
        Ok(())
    })
    .await
}

/// A step's input (or outputs) that was journaled before in the run is
/// written as a reference and read back as the value; a sealed run (created
/// with its journal, its logs and its end in one write) reads back like any
/// other, from the one row it is written as (its records packed into
/// `runs.steps`, none in `journal`); a reference to nothing earlier is named
/// as corrupt.
#[tokio::test]
async fn references_and_sealed_runs_read_back_as_values() -> Result<()> {
    timed(async {
        use sluice_store::{RunEnd, ValueRef};
        use sqlx::Connection;
        let (dir, store) = open().await?;
        let run = new_run("sealed", 7);
        let out = |seq: u64, port: &str| ValueRef::Output {
            seq,
            port: port.into(),
        };
        let trigger = Record {
            input: Some(Stored::Ref(ValueRef::RunInput)),
            ..record(
                "sealed",
                0,
                RecordKind::Succeeded,
                Some(Stored::Refs(vec![("out".into(), ValueRef::RunInput)])),
            )
        };
        let set = Record {
            input: Some(Stored::Ref(out(0, "out"))),
            ..record(
                "sealed",
                1,
                RecordKind::Succeeded,
                Some(Stored::Inline(
                    r#"[["out",{"n":7,"tier":"gold"}],["other/port",2]]"#.into(),
                )),
            )
        };
        let route = Record {
            input: Some(Stored::Ref(out(1, "other/port"))),
            ..record(
                "sealed",
                2,
                RecordKind::Succeeded,
                Some(Stored::Refs(vec![
                    ("yes".into(), out(1, "out")),
                    ("no".into(), ValueRef::RunInput),
                ])),
            )
        };
        let log = LogLine {
            run_id: "sealed".into(),
            node: "set".into(),
            lineage: String::new(),
            level: "info".into(),
            message: "hello".into(),
            at_us: 9,
        };
        let end = RunEnd {
            status: RunStatus::Succeeded,
            output: Some(Stored::Inline(r#"{"done":true}"#.into())),
            error: None,
            finished_at_us: 11,
        };
        store
            .seal_run(&run, vec![trigger, set, route], vec![log], end)
            .await?;
        let row = store.get_run("sealed").await?.context("the sealed run")?;
        assert_eq!(row.status, RunStatus::Succeeded);
        assert_eq!(row.output, Some(json!({"done": true})));
        assert_eq!(row.finished_at_us, Some(11));
        let records = store.run_records("sealed").await?;
        let value = |s: &Option<Stored>| s.as_ref().and_then(Stored::value).map(|v| (*v).clone());
        assert_eq!(records.len(), 3);
        assert_eq!(value(&records[0].input), Some(json!({"n": 7})));
        assert_eq!(value(&records[0].data), Some(json!([["out", {"n": 7}]])));
        assert_eq!(value(&records[1].input), Some(json!({"n": 7})));
        assert_eq!(value(&records[2].input), Some(json!(2)));
        assert_eq!(
            value(&records[2].data),
            Some(json!([["yes", {"n": 7, "tier": "gold"}], ["no", {"n": 7}]]))
        );
        assert_eq!(store.run_logs("sealed").await?.len(), 1);
        let mut c = sqlx::SqliteConnection::connect(&format!(
            "sqlite://{}",
            dir.path().join("data/sluice.db").display()
        ))
        .await?;
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM journal WHERE run_id = 'sealed'")
            .fetch_one(&mut c)
            .await?;
        let steps: Option<String> =
            sqlx::query_scalar("SELECT steps FROM runs WHERE id = 'sealed'")
                .fetch_one(&mut c)
                .await?;
        assert_eq!(rows, 0, "a sealed run's records are not rows of their own");
        assert!(steps.is_some_and(|s| s.contains("other/port")));
        // A packed journal that is damaged is named, not half read.
        sqlx::query("UPDATE runs SET steps = '[[0, 3, \"start\"' WHERE id = 'sealed'")
            .execute(&mut c)
            .await?;
        match store.run_records("sealed").await {
            Err(Error::Corrupt { table, key, .. }) => {
                assert_eq!((table, key.as_str()), ("runs", "sealed (steps)"));
            }
            other => bail!("expected a corrupt packed journal, got {other:?}"),
        }

        // A reference to a record that is not there.
        store.create_run(&new_run("bad", 8)).await?;
        let dangling = Record {
            input: Some(Stored::Ref(out(5, "out"))),
            ..record("bad", 0, RecordKind::Succeeded, None)
        };
        store.journal().append(dangling).await?;
        store.journal().flush().await?;
        match store.run_records("bad").await {
            Err(Error::Corrupt { key, detail, .. }) => {
                assert_eq!(key, "bad/0");
                assert!(detail.contains("5/out"), "{detail}");
            }
            other => bail!("expected a corrupt record, got {other:?}"),
        }
        Ok(())
    })
    .await
}

/// A `sluice.db` that is not Sluice's is refused at open and left byte for
/// byte as it was: garbage, another program's SQLite database, and one
/// written by a newer Sluice.
#[tokio::test]
async fn foreign_damaged_and_newer_databases_are_refused_and_left_alone() -> Result<()> {
    timed(async {
        use sqlx::Connection;
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let db = data.join("sluice.db");

        std::fs::write(&db, b"these are my notes, not a database\n".repeat(200))?;
        let before = std::fs::read(&db)?;
        let e = Store::open(&data).await.unwrap_err().to_string();
        assert!(e.contains("not a database Sluice can read") && e.contains("sluice restore"), "{e}");
        assert_eq!(std::fs::read(&db)?, before, "left as it was");

        std::fs::remove_file(&db)?;
        {
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", db.display())).await?;
            sqlx::query("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)").execute(&mut c).await?;
            sqlx::query("INSERT INTO notes (text) VALUES ('mine')").execute(&mut c).await?;
            c.close().await?;
        }
        let before = std::fs::read(&db)?;
        let e = Store::open(&data).await.unwrap_err().to_string();
        assert!(e.contains("not Sluice's (its tables: notes)"), "{e}");
        assert_eq!(std::fs::read(&db)?, before, "left as it was");
        assert!(!data.join("sluice.db-wal").exists());

        std::fs::remove_file(&db)?;
        let store = Store::open(&data).await?;
        store.journal().flush().await?;
        drop(store);
        {
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await?;
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES (9999, 'from the future', 1, x'00', 0)",
            )
            .execute(&mut c)
            .await?;
            c.close().await?;
        }
        let e = Store::open(&data).await.unwrap_err().to_string();
        assert!(e.contains("written by a newer Sluice (database schema 9999"), "{e}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_data_dir_from_before_the_pin_counts_has_its_runs_counted() -> Result<()> {
    timed(async {
        use sqlx::Connection;
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data)?;
        let db = data.join("sluice.db");
        // The hash this Sluice stores `new_run`'s definition under.
        let h1: String = {
            let (other, store) = open().await?;
            store.create_run(&new_run("x", 1)).await?;
            drop(store);
            let mut c = sqlx::SqliteConnection::connect(&format!(
                "sqlite://{}",
                other.path().join("data/sluice.db").display()
            ))
            .await?;
            sqlx::query_scalar("SELECT hash FROM definitions").fetch_one(&mut c).await?
        };
        // A database as the last Sluice without `definition_pins` left it
        // (its migrations, 0001 to 0015), holding runs of two stored
        // definitions and one row from before definitions were stored apart.
        {
            let all = sqlx::migrate::Migrator::new(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"),
            )
            .await?;
            let before = sqlx::migrate::Migrator {
                migrations: std::borrow::Cow::Owned(
                    all.iter().filter(|m| m.version <= 15).cloned().collect(),
                ),
                ..sqlx::migrate::Migrator::DEFAULT
            };
            let mut c =
                sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", db.display()))
                    .await?;
            before.run(&mut c).await?;
            sqlx::query("INSERT INTO definitions (hash, text) VALUES (?, ?), ('h2', '{\"v\":2}')")
                .bind(&h1)
                .bind(&*new_run("x", 1).definition)
                .execute(&mut c)
                .await?;
            let pinned_h1 = format!("#{h1}");
            for (id, definition) in [("a", &*pinned_h1), ("b", &pinned_h1), ("c", "#h2"), ("d", "{\"v\":0}")] {
                sqlx::query(
                    "INSERT INTO runs (id, workflow_id, definition, \"trigger\", input, status, created_at_us) \
                     VALUES (?, 'wf', ?, 'start', '{}', 'succeeded', 1)",
                )
                .bind(id)
                .bind(definition)
                .execute(&mut c)
                .await?;
            }
            c.close().await?;
        }
        let store = Store::open(&data).await?;
        store.journal().flush().await?;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display())).await?;
        let pins: Vec<(String, i64)> =
            sqlx::query_as("SELECT hash, runs FROM definition_pins ORDER BY hash")
                .fetch_all(&mut c)
                .await?;
        let mut expected = vec![(h1.clone(), 2), ("h2".to_string(), 1)];
        expected.sort();
        assert_eq!(pins, expected);
        let index: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND name = 'runs_definition'",
        )
        .fetch_one(&mut c)
        .await?;
        assert_eq!(index, 0, "the index the counts replace is gone");
        // The writer goes on from the counts the migration made.
        store.create_run(&new_run("e", 2)).await?;
        let runs: i64 = sqlx::query_scalar("SELECT runs FROM definition_pins WHERE hash = ?")
            .bind(&h1)
            .fetch_one(&mut c)
            .await?;
        assert_eq!(runs, 3);
        Ok(())
    })
    .await
}
