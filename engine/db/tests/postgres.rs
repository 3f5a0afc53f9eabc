//! db.query's reach into a real PostgreSQL started by the test: every type
//! round-trips through JSON, parameters stay data, the caps and the timeout
//! hold (and leave the pool usable), a connection killed or a server
//! restarted is replaced, a transaction is all or nothing.

#[path = "support/db.rs"]
mod db;
#[path = "support/servers.rs"]
mod servers;

use db::{exec, named, named_with_bytes, pools, req, rows};

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use servers::{DATABASE, PASSWORD, Postgres, USER};
use sluice_db::{Mode, Outcome, Param, Params, PoolSettings, Pools, Server, Target, Tls};

fn target(pg: &Postgres) -> Target {
    Target::Postgres(Server {
        host: "127.0.0.1".into(),
        port: Some(pg.port),
        database: DATABASE.into(),
        username: USER.into(),
        password: Some(PASSWORD.into()),
        tls: Tls::Prefer,
        ca_pem: None,
    })
}

#[tokio::test]
async fn every_type_round_trips_through_json() {
    let pg = Postgres::start();
    let (p, t) = (pools(), target(&pg));
    let none = Params::default();
    exec(&p, &t, "CREATE TYPE mood AS ENUM ('sad', 'happy')", &none).await;
    exec(
        &p,
        &t,
        "CREATE DOMAIN positive AS integer CHECK (VALUE > 0)",
        &none,
    )
    .await;
    exec(
        &p,
        &t,
        "CREATE TABLE t (id serial PRIMARY KEY, b boolean, i2 smallint, i4 integer, i8 bigint,
           f4 real, f8 double precision, n numeric(40,10), txt text, vc varchar(20), ch char(3),
           js json, jb jsonb, by bytea, u uuid, d date, tm time, ts timestamp, tz timestamptz,
           ip inet, ia integer[], ta text[], e mood, pos positive, nul text)",
        &none,
    )
    .await;
    let by = vec![0u8, 1, 2, 0xfe, 0xff];
    let params = named_with_bytes(
        json!({
            "b": true, "i2": -12, "i4": "42", "i8": 9_007_199_254_740_993i64, "f4": 1.5, "f8": 0.1,
            "n": "123456789012345678901234567890.0123456789",
            "txt": "héllo 'quoted' \"x\" :not_a_param $1 \\ \u{1F600}",
            "vc": "short", "ch": "ab", "js": {"a": [1, 2.5, null]}, "jb": {"k": null, "n": 1},
            "u": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "d": "2024-02-29", "tm": "13:45:07.25",
            "ts": "2024-02-29T13:45:07.5", "tz": "2024-02-29T13:45:07.5+02:00", "ip": "192.168.1.5",
            "ia": [1, null, 3], "ta": ["a", "b,c"], "e": "happy", "pos": 7, "nul": null
        }),
        "by",
        by.clone(),
    );
    let (n, _) = exec(
        &p,
        &t,
        "INSERT INTO t (b, i2, i4, i8, f4, f8, n, txt, vc, ch, js, jb, by, u, d, tm, ts, tz, ip,
           ia, ta, e, pos, nul)
         VALUES (:b, :i2, :i4, :i8, :f4, :f8, :n, :txt, :vc, :ch, :js, :jb, :by, :u, :d, :tm,
           :ts, :tz, :ip, :ia, :ta, :e, :pos, :nul)",
        &params,
    )
    .await;
    assert_eq!(n, 1);
    let got = rows(&p, &t, "SELECT * FROM t", &none).await;
    assert_eq!(
        got,
        vec![json!({
            "id": 1, "b": true, "i2": -12, "i4": 42, "i8": 9_007_199_254_740_993i64,
            "f4": 1.5, "f8": 0.1, "n": "123456789012345678901234567890.0123456789",
            "txt": "héllo 'quoted' \"x\" :not_a_param $1 \\ \u{1F600}",
            "vc": "short", "ch": "ab ", "js": {"a": [1, 2.5, null]}, "jb": {"k": null, "n": 1},
            "by": {"$bytes": "AAEC/v8=", "size": 5},
            "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "d": "2024-02-29",
            "tm": "13:45:07.25", "ts": "2024-02-29T13:45:07.5", "tz": "2024-02-29T11:45:07.5Z",
            "ip": "192.168.1.5", "ia": [1, null, 3], "ta": ["a", "b,c"], "e": "happy",
            "pos": 7, "nul": null
        })]
    );
    // What the server computes reads as faithfully: intervals, records,
    // 2-D arrays, special floats, infinities, NULLs of every type.
    let got = rows(
        &p,
        &t,
        "SELECT interval '1 year 2 months 3 days 04:05:06.5' AS iv, ROW(1, 'a') AS rec,
                ARRAY[[1,2],[3,4]] AS m, 'NaN'::float8 AS nan, 'infinity'::timestamptz AS inf,
                NULL::int AS ni, '-0.5'::numeric AS half, 1e-7::numeric AS tiny,
                '10.0.0.0/8'::cidr AS net, '2024-03-01 10:00:00-05'::timestamptz AS east",
        &none,
    )
    .await;
    assert_eq!(
        got,
        vec![json!({
            "iv": "P1Y2M3DT4H5M6.5S", "rec": [1, "a"], "m": [[1, 2], [3, 4]], "nan": "NaN",
            "inf": "infinity", "ni": null, "half": "-0.5", "tiny": "0.0000001",
            "net": "10.0.0.0/8", "east": "2024-03-01T15:00:00Z"
        })]
    );
    // Positional parameters, and columns reported with their types.
    let pos = Params::Positional(vec![Param::Json(json!(2)), Param::Json(json!("x"))]);
    match p
        .run(
            &t,
            &req("SELECT $1::int + 1 AS n, $2 || 'y' AS s", &pos, Mode::Query),
        )
        .await
        .unwrap()
    {
        Outcome::Rows { rows, columns } => {
            assert_eq!(Value::Object(rows[0].clone()), json!({"n": 3, "s": "xy"}));
            let names: Vec<(&str, &str)> = columns
                .iter()
                .map(|c| (c.name.as_str(), c.type_name.as_str()))
                .collect();
            assert_eq!(names, vec![("n", "INT4"), ("s", "TEXT")]);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn parameters_stay_data_and_bad_ones_are_named() {
    let pg = Postgres::start();
    let (p, t) = (pools(), target(&pg));
    let none = Params::default();
    exec(
        &p,
        &t,
        "CREATE TABLE users (id int PRIMARY KEY, name text)",
        &none,
    )
    .await;
    for (id, name) in [
        (1, "x'); DROP TABLE users; --"),
        (2, "' OR '1'='1"),
        (3, "$1; DELETE FROM users"),
        (4, ":id"),
    ] {
        exec(
            &p,
            &t,
            "INSERT INTO users VALUES (:id, :name)",
            &named(json!({"id": id, "name": name})),
        )
        .await;
    }
    let got = rows(&p, &t, "SELECT name FROM users ORDER BY id", &none).await;
    assert_eq!(
        got,
        vec![
            json!({"name": "x'); DROP TABLE users; --"}),
            json!({"name": "' OR '1'='1"}),
            json!({"name": "$1; DELETE FROM users"}),
            json!({"name": ":id"}),
        ]
    );
    // A value meant to widen a WHERE matches nothing.
    let got = rows(
        &p,
        &t,
        "SELECT id FROM users WHERE name = :n",
        &named(json!({"n": "' OR '1'='1' --"})),
    )
    .await;
    assert!(got.is_empty());

    let err = p
        .run(
            &t,
            &req(
                "INSERT INTO users VALUES (:id, :name)",
                &named(json!({"id": "seven", "name": "x"})),
                Mode::Execute,
            ),
        )
        .await
        .unwrap_err();
    assert!(!err.is_retryable());
    assert!(
        err.to_string()
            .contains("params.id: expected an integer, got a string (\"seven\") (the SQL's parameter has type INT4)"),
        "{err}"
    );
    let err = p
        .run(
            &t,
            &req(
                "SELECT $1::int, $2::int",
                &Params::Positional(vec![Param::Json(json!(1))]),
                Mode::Query,
            ),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("the SQL takes 2 parameters ($1 … $2), but params gives 1"),
        "{err}"
    );
    let err = p
        .run(
            &t,
            &req("SELECT id\nFROM users\nWHER id = 1", &none, Mode::Query),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("syntax error"), "{err}");
    assert!(err.to_string().contains("at line 3, column 6"), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("postgres 127.0.0.1:{}/app: ", pg.port)),
        "{err}"
    );
    let err = p
        .run(
            &t,
            &req(
                "INSERT INTO users VALUES (1, 'again')",
                &none,
                Mode::Execute,
            ),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("error 23505"), "{err}");
    assert!(
        err.to_string().contains("Key (id)=(1) already exists"),
        "{err}"
    );
    assert!(!err.to_string().contains(PASSWORD));
}

#[tokio::test]
async fn caps_and_timeouts_stop_the_statement_and_the_pool_goes_on() {
    let pg = Postgres::start();
    let (p, t) = (pools(), target(&pg));
    let none = Params::default();
    let mut capped = req(
        "SELECT g FROM generate_series(1, 100000) g",
        &none,
        Mode::Query,
    );
    capped.max_rows = 10;
    let err = p.run(&t, &capped).await.unwrap_err();
    assert!(
        err.to_string().contains("more than 10 rows (`max_rows`)"),
        "{err}"
    );
    assert!(!err.is_retryable());

    let mut big = req(
        "SELECT repeat('x', 1000) AS s FROM generate_series(1, 100)",
        &none,
        Mode::Query,
    );
    big.max_bytes = 10_000;
    let err = p.run(&t, &big).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("more than 10000 bytes (`max_bytes`)"),
        "{err}"
    );

    let mut slow = req("SELECT pg_sleep(30)", &none, Mode::Query);
    slow.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let err = p.run(&t, &slow).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("ran longer than"), "{err}");
    // The server stopped it: nothing sleeps on.
    let sleeping = pg.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%'",
        DATABASE,
    );
    assert_eq!(sleeping.trim(), "0");

    // Every pool still answers.
    for r in [capped, big, slow] {
        let mut again = r.clone();
        again.sql = "SELECT 1 AS one";
        assert!(matches!(
            p.run(&t, &again).await.unwrap(),
            Outcome::Rows { .. }
        ));
    }
}

#[tokio::test]
async fn a_killed_connection_or_a_restarted_server_is_replaced() {
    let mut pg = Postgres::start();
    let (p, t) = (pools(), target(&pg));
    let none = Params::default();
    assert_eq!(
        rows(&p, &t, "SELECT 1 AS one", &none).await,
        vec![json!({"one": 1})]
    );
    let killed = pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'sluice'",
        DATABASE,
    );
    assert_eq!(killed.trim(), "1");
    assert_eq!(
        rows(&p, &t, "SELECT 2 AS two", &none).await,
        vec![json!({"two": 2})]
    );
    pg.restart();
    assert_eq!(
        rows(&p, &t, "SELECT 3 AS three", &none).await,
        vec![json!({"three": 3})]
    );

    // A wrong password is refused for good, and not echoed.
    let Target::Postgres(mut s) = t.clone() else {
        unreachable!()
    };
    s.password = Some("wrong-pw-1234".into());
    let err = p
        .run(&Target::Postgres(s), &req("SELECT 1", &none, Mode::Query))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("password authentication failed"),
        "{err}"
    );
    assert!(!err.to_string().contains("wrong-pw-1234"), "{err}");
}

#[tokio::test]
async fn a_transaction_is_all_or_nothing_and_idle_connections_close() {
    let pg = Postgres::start();
    let p = Pools::new(PoolSettings {
        max_connections: 2,
        idle_close: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(10),
    });
    let t = target(&pg);
    let none = Params::default();
    exec(
        &p,
        &t,
        "CREATE TABLE acct (id int PRIMARY KEY, balance int CHECK (balance >= 0))",
        &none,
    )
    .await;
    exec(&p, &t, "INSERT INTO acct VALUES (1, 100), (2, 0)", &none).await;
    let transfer = |amount: i64| named(json!({"amount": amount}));
    let moved = transfer(30);
    let ok = p
        .run_many(
            &t,
            &[
                req(
                    "UPDATE acct SET balance = balance - :amount WHERE id = 1",
                    &moved,
                    Mode::Execute,
                ),
                req(
                    "UPDATE acct SET balance = balance + :amount WHERE id = 2",
                    &moved,
                    Mode::Execute,
                ),
                req("SELECT balance FROM acct ORDER BY id", &moved, Mode::Query),
            ],
            true,
        )
        .await
        .unwrap();
    assert_eq!(ok.len(), 3);
    let too_much = transfer(500);
    let err = p
        .run_many(
            &t,
            &[
                req(
                    "UPDATE acct SET balance = balance + :amount WHERE id = 2",
                    &too_much,
                    Mode::Execute,
                ),
                req(
                    "UPDATE acct SET balance = balance - :amount WHERE id = 1",
                    &too_much,
                    Mode::Execute,
                ),
            ],
            true,
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("statements[1]: postgres error 23514"),
        "{err}"
    );
    assert_eq!(
        rows(&p, &t, "SELECT balance FROM acct ORDER BY id", &none).await,
        vec![json!({"balance": 70}), json!({"balance": 30})]
    );
    assert!(p.connections() > 0);
    let start = Instant::now();
    while p.connections() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "idle connections stay open"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
