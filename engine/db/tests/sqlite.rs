//! db.query on a SQLite file: values round-trip by storage class, a
//! connection cannot reach another file (ATTACH, VACUUM INTO), a runaway
//! statement is interrupted at its timeout, a missing file is an error
//! unless `create`.

use std::time::{Duration, Instant};

#[path = "support/db.rs"]
mod db;

use db::{pools, req, rows};
use serde_json::{Value, json};
use sluice_db::{Mode, Outcome, Param, Params, Target};

#[tokio::test]
async fn values_round_trip_by_storage_class() {
    let dir = tempfile::tempdir().unwrap();
    let t = Target::Sqlite {
        path: dir.path().join("app.db"),
        create: true,
    };
    let p = pools();
    let none = Params::default();
    p.run(
        &t,
        &req(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, ok BOOLEAN, n INTEGER, f REAL, s TEXT, b BLOB, j TEXT, z TEXT)",
            &none,
            Mode::Execute,
        ),
    )
    .await
    .unwrap();
    let params = Params::Named(vec![
        ("ok".into(), Param::Json(json!(true))),
        ("n".into(), Param::Json(json!(-9_007_199_254_740_993i64))),
        ("f".into(), Param::Json(json!(0.1))),
        ("s".into(), Param::Json(json!("x'); DROP TABLE t; --"))),
        ("b".into(), Param::Bytes(vec![0, 0xff])),
        ("j".into(), Param::Json(json!({"a": [1]}))),
        ("z".into(), Param::Json(Value::Null)),
    ]);
    match p
        .run(
            &t,
            &req(
                "INSERT INTO t (ok, n, f, s, b, j, z) VALUES (:ok, :n, :f, :s, :b, :j, :z)",
                &params,
                Mode::Execute,
            ),
        )
        .await
        .unwrap()
    {
        Outcome::Executed {
            rows_affected,
            last_insert_id,
        } => assert_eq!((rows_affected, last_insert_id), (1, Some(1))),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rows(&p, &t, "SELECT * FROM t", &none).await,
        vec![json!({
            "id": 1, "ok": true, "n": -9_007_199_254_740_993i64, "f": 0.1,
            "s": "x'); DROP TABLE t; --", "b": {"$bytes": "AP8=", "size": 2},
            "j": "{\"a\":[1]}", "z": null
        })]
    );
    let pos = Params::Positional(vec![Param::Json(json!(20)), Param::Json(json!(1))]);
    assert_eq!(
        rows(&p, &t, "SELECT ? + ?2 AS n", &pos).await,
        vec![json!({"n": 21})]
    );
}

#[tokio::test]
async fn no_other_file_is_reachable_and_runaway_statements_stop() {
    let dir = tempfile::tempdir().unwrap();
    let t = Target::Sqlite {
        path: dir.path().join("app.db"),
        create: true,
    };
    let p = pools();
    let none = Params::default();
    let outside = dir.path().join("outside.db");
    for sql in [
        format!("ATTACH DATABASE '{}' AS o", outside.display()),
        format!("VACUUM INTO '{}'", outside.display()),
    ] {
        let err = p
            .run(&t, &req(&sql, &none, Mode::Execute))
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{sql}: {err}");
        assert!(!outside.exists(), "{sql} wrote {}", outside.display());
    }

    let mut slow = req(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        &none,
        Mode::Query,
    );
    slow.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = p.run(&t, &slow).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("ran longer than"), "{err}");
    assert!(err.is_retryable());
    // The next statement on the pool is not interrupted.
    assert_eq!(
        rows(&p, &t, "SELECT 1 AS one", &none).await,
        vec![json!({"one": 1})]
    );

    let missing = Target::Sqlite {
        path: dir.path().join("missing.db"),
        create: false,
    };
    let err = p
        .run(&missing, &req("SELECT 1", &none, Mode::Query))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("missing.db"), "{err}");
    assert!(!dir.path().join("missing.db").exists());
}
