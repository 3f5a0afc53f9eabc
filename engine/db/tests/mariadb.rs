//! db.query's reach into a real MariaDB started by the test: types
//! round-trip through JSON, parameters stay data, the caps and the timeout
//! hold, a killed connection or a restarted server is replaced, a
//! transaction is all or nothing.

#[path = "support/db.rs"]
mod db;
#[path = "support/servers.rs"]
mod servers;

use db::{exec, named, named_with_bytes, pools, req, rows};

use std::time::{Duration, Instant};

use serde_json::json;
use servers::{DATABASE, MariaDb, PASSWORD, USER};
use sluice_db::{Mode, Param, Params, Server, Target, Tls};

fn target(db: &MariaDb) -> Target {
    Target::MySql(Server {
        host: "127.0.0.1".into(),
        port: Some(db.port),
        database: DATABASE.into(),
        username: USER.into(),
        password: Some(PASSWORD.into()),
        tls: Tls::Prefer,
        ca_pem: None,
    })
}

#[tokio::test]
async fn types_round_trip_and_parameters_stay_data() {
    let db = MariaDb::start();
    let (p, t) = (pools(), target(&db));
    let none = Params::default();
    exec(
        &p,
        &t,
        "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, b BOOLEAN, ti TINYINT, i INT,
           bi BIGINT, ub BIGINT UNSIGNED, f FLOAT, d DOUBLE, n DECIMAL(40,10), vc VARCHAR(50),
           tx TEXT, bl BLOB, dt DATE, tm TIME(6), dtm DATETIME(6), ts TIMESTAMP(6) NULL,
           e ENUM('sad','happy'), bits BIT(8), y YEAR, js JSON, nul VARCHAR(5),
           cs VARCHAR(10) COLLATE utf8mb4_bin)",
        &none,
    )
    .await;
    let params = named_with_bytes(
        json!({
            "b": true, "ti": -5, "i": "42", "bi": -9_007_199_254_740_993i64,
            "ub": 18_446_744_073_709_551_615u64, "f": 1.5, "d": 0.1,
            "n": "123456789012345678901234567890.0123456789",
            "vc": "x'); DROP TABLE t; -- \\ \u{1F600}", "tx": "' OR '1'='1", "dt": "2024-02-29",
            "tm": "-26:03:04.5", "dtm": "2024-02-29 13:45:07.25", "ts": "2024-02-29 13:45:07.5",
            "e": "happy", "bits": 5, "y": 2024, "js": {"a": [1, null]}, "nul": null, "cs": "Case"
        }),
        "bl",
        vec![0, 1, 0xfe, 0xff],
    );
    let (n, id) = exec(
        &p,
        &t,
        "INSERT INTO t (b, ti, i, bi, ub, f, d, n, vc, tx, bl, dt, tm, dtm, ts, e, bits, y, js, nul,
           cs)
         VALUES (:b, :ti, :i, :bi, :ub, :f, :d, :n, :vc, :tx, :bl, :dt, :tm, :dtm, :ts, :e,
           :bits, :y, :js, :nul, :cs)",
        &params,
    )
    .await;
    assert_eq!((n, id), (1, Some(1)));
    let got = rows(&p, &t, "SELECT * FROM t", &none).await;
    assert_eq!(
        got,
        vec![json!({
            "id": 1, "b": true, "ti": -5, "i": 42, "bi": -9_007_199_254_740_993i64,
            "ub": 18_446_744_073_709_551_615u64, "f": 1.5, "d": 0.1,
            "n": "123456789012345678901234567890.0123456789",
            "vc": "x'); DROP TABLE t; -- \\ \u{1F600}", "tx": "' OR '1'='1",
            "bl": {"$bytes": "AAH+/w==", "size": 4}, "dt": "2024-02-29", "tm": "-26:03:04.5",
            "dtm": "2024-02-29T13:45:07.25", "ts": "2024-02-29T13:45:07.5Z", "e": "happy",
            "bits": 5, "y": 2024,
            // MariaDB's JSON is LONGTEXT on the wire: the text, as stored.
            "js": "{\"a\":[1,null]}", "nul": null, "cs": "Case"
        })]
    );
    // The table survived the value that tried to drop it; a value meant to
    // widen a WHERE matches nothing.
    let got = rows(
        &p,
        &t,
        "SELECT id FROM t WHERE tx = :x",
        &named(json!({"x": "' OR '1'='1' -- "})),
    )
    .await;
    assert!(got.is_empty());
    // Positional `?` and the count check.
    let pos = Params::Positional(vec![Param::Json(json!(2))]);
    assert_eq!(
        rows(&p, &t, "SELECT ? + 1 AS n", &pos).await,
        vec![json!({"n": 3})]
    );
    let err = p
        .run(&t, &req("SELECT ?, ?", &pos, Mode::Query))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("the SQL takes 2 parameters (`?`), but params gives 1"),
        "{err}"
    );
    let err = p
        .run(&t, &req("SELEC 1", &none, Mode::Query))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("mysql error 1064"), "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn caps_timeouts_lost_connections_and_transactions() {
    let mut db = MariaDb::start();
    let (p, t) = (pools(), target(&db));
    let none = Params::default();
    let mut capped = req("SELECT seq FROM seq_1_to_100000", &none, Mode::Query);
    capped.max_rows = 10;
    let err = p.run(&t, &capped).await.unwrap_err();
    assert!(
        err.to_string().contains("more than 10 rows (`max_rows`)"),
        "{err}"
    );

    let mut slow = req("SELECT SLEEP(30) AS s", &none, Mode::Query);
    slow.timeout = Duration::from_millis(400);
    let started = Instant::now();
    let err = p.run(&t, &slow).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("ran longer than"), "{err}");
    let running = db
        .sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP%'");
    assert_eq!(running.trim(), "0", "{}", db.log());

    assert_eq!(
        rows(&p, &t, "SELECT 1 AS one", &none).await,
        vec![json!({"one": 1})]
    );
    // Kill our connection from the server side; the next statement gets a
    // new one.
    let ids = db.sql("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'sluice'");
    assert!(!ids.trim().is_empty());
    for id in ids.lines() {
        db.sql(&format!("KILL {id}"));
    }
    assert_eq!(
        rows(&p, &t, "SELECT 2 AS two", &none).await,
        vec![json!({"two": 2})]
    );
    db.restart();
    assert_eq!(
        rows(&p, &t, "SELECT 3 AS three", &none).await,
        vec![json!({"three": 3})]
    );

    exec(
        &p,
        &t,
        "CREATE TABLE acct (id INT PRIMARY KEY, balance INT UNSIGNED) ENGINE=InnoDB",
        &none,
    )
    .await;
    exec(&p, &t, "INSERT INTO acct VALUES (1, 100), (2, 0)", &none).await;
    let amount = named(json!({"amount": 500}));
    let err = p
        .run_many(
            &t,
            &[
                req(
                    "UPDATE acct SET balance = balance + :amount WHERE id = 2",
                    &amount,
                    Mode::Execute,
                ),
                req(
                    "UPDATE acct SET balance = balance - :amount WHERE id = 1",
                    &amount,
                    Mode::Execute,
                ),
            ],
            true,
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("statements[1]: mysql error"),
        "{err}"
    );
    assert_eq!(
        rows(&p, &t, "SELECT balance FROM acct ORDER BY id", &none).await,
        vec![json!({"balance": 100}), json!({"balance": 0})]
    );

    let Target::MySql(mut s) = t.clone() else {
        unreachable!()
    };
    s.password = Some("wrong-pw-1234".into());
    let err = p
        .run(&Target::MySql(s), &req("SELECT 1", &none, Mode::Query))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("Access denied"), "{err}");
    assert!(!err.to_string().contains("wrong-pw-1234"), "{err}");
}
