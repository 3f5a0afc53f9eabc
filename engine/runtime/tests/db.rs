//! `db.query` in workflows, against a real PostgreSQL and a real MariaDB
//! started by the test and SQLite files: values from templates travel as
//! parameters, runs share one pool per database, the password never reaches
//! the journal, SQLite files stay inside `[files] allow`.

#[path = "../../db/tests/support/servers.rs"]
mod servers;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use servers::{DATABASE, MariaDb, PASSWORD, Postgres, USER};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Status};

async fn engine(dir: &std::path::Path) -> Engine {
    let mut settings = sluice_nodes::Settings::default();
    std::fs::create_dir_all(dir.join("files")).unwrap();
    settings.files.allow = vec![dir.join("files")];
    Engine::open(
        &dir.join("data"),
        Options {
            settings,
            ..Options::default()
        },
    )
    .await
    .unwrap()
}

async fn run(engine: &Engine, nodes: Value, input: Value) -> RunResult {
    let mut all = vec![json!({"id": "t", "kind": "trigger.manual"})];
    let mut edges = Vec::new();
    let mut prev = "t".to_string();
    for n in nodes.as_array().unwrap() {
        let id = n["id"].as_str().unwrap().to_string();
        all.push(n.clone());
        edges.push(json!({"from": prev, "to": id}));
        prev = id;
    }
    all.push(json!({"id": "out", "kind": "output.end"}));
    edges.push(json!({"from": prev, "to": "out"}));
    let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "db",
        "nodes": all, "edges": edges}))
    .unwrap();
    let handle = engine
        .start(Plan::new(wf).unwrap(), None, Arc::new(input))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap()
}

/// Every byte the engine keeps on disk, to search for secrets.
fn disk_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                all.extend(std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    all
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn workflows_write_and_read_postgres_and_mariadb_and_the_password_stays_out_of_the_journal() {
    let pg = Postgres::start();
    let maria = MariaDb::start();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let server = |port: u16| {
        json!({"host": "127.0.0.1", "port": port, "database": DATABASE, "username": USER,
               "password": PASSWORD, "tls": "prefer"})
    };
    engine
        .store()
        .put_credential("pg", "postgres", &server(pg.port))
        .await
        .unwrap();
    engine
        .store()
        .put_credential("maria", "mysql", &server(maria.port))
        .await
        .unwrap();
    pg.psql(
        "CREATE TABLE orders (id serial PRIMARY KEY, customer text, total numeric(10,2), items jsonb)",
        DATABASE,
    );
    maria.sql(&format!(
        "CREATE TABLE {DATABASE}.orders (id INT AUTO_INCREMENT PRIMARY KEY, customer TEXT, \
         total DECIMAL(10,2))"
    ));

    for (cred, items) in [("pg", json!("{{ input.items }}")), ("maria", Value::Null)] {
        let mut insert_params =
            json!({"customer": "{{ input.customer }}", "total": "{{ input.total }}"});
        let insert_sql = if items.is_null() {
            "INSERT INTO orders (customer, total) VALUES (:customer, :total)"
        } else {
            insert_params["items"] = items;
            "INSERT INTO orders (customer, total, items) VALUES (:customer, :total, :items) RETURNING id"
        };
        let r = run(
            &engine,
            json!([
                {"id": "save", "kind": "db.query", "config": {
                    "credential": cred, "sql": insert_sql, "params": insert_params,
                    "mode": if cred == "pg" { "query" } else { "execute" }}},
                {"id": "read", "kind": "db.query", "config": {
                    "credential": cred,
                    "sql": "SELECT customer, total FROM orders WHERE customer = :c",
                    "params": {"c": "{{ nodes.t.customer }}"}}}
            ]),
            json!({"customer": "Robert'); DROP TABLE orders; --", "total": 12.5,
                   "items": [{"sku": "A-1", "qty": 2}]}),
        )
        .await;
        assert_eq!(r.status, Status::Succeeded, "{cred}: {:?}", r.error);
        assert_eq!(
            r.output["out"],
            json!({"row_count": 1,
                   "rows": [{"customer": "Robert'); DROP TABLE orders; --", "total": "12.50"}],
                   "columns": [
                       {"name": "customer", "type": "TEXT"},
                       {"name": "total", "type": if cred == "pg" { "NUMERIC" } else { "DECIMAL" }}]}),
            "{cred}"
        );
    }
    assert_eq!(
        pg.psql("SELECT items::text FROM orders", DATABASE).trim(),
        r#"[{"qty": 2, "sku": "A-1"}]"#
    );

    // Twenty runs at once share the pool: at most 4 connections.
    let runs = (0..20).map(|i| {
        run(
            &engine,
            json!([{"id": "q", "kind": "db.query", "config": {
                "credential": "pg", "sql": "SELECT pg_sleep(0.05), :i::int AS i",
                "params": {"i": "{{ input.i }}"}}}]),
            json!({"i": i}),
        )
    });
    let results = futures::future::join_all(runs).await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
        assert_eq!(r.output["out"]["rows"][0]["i"], json!(i));
    }
    let open = pg.psql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sluice'",
        DATABASE,
    );
    let open: u32 = open.trim().parse().unwrap();
    assert!((1..=4).contains(&open), "{open} connections");

    // A failing statement names the node, the database and the SQL's line;
    // with `on_error: continue`, the run goes on with it.
    let r = run(
        &engine,
        json!([{"id": "bad", "kind": "db.query", "on_error": "continue", "config": {
            "credential": "pg", "sql": "SELECT *\nFROM nowhere"}}]),
        json!({}),
    )
    .await;
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    let message = r.output["out"]["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("relation \"nowhere\" does not exist"),
        "{message}"
    );
    assert!(message.contains("line 2, column 6"), "{message}");
    let r = run(
        &engine,
        json!([{"id": "wrong", "kind": "db.query", "config": {
            "credential": "maria", "sql": "SELECT 1", "params": [1, 2]}}]),
        json!({}),
    )
    .await;
    assert_eq!(r.status, Status::Failed);
    let err = r.error.unwrap();
    assert_eq!(err.node.as_deref(), Some("wrong"), "{err:?}");
    assert!(
        err.message
            .contains("the SQL takes no parameters, but params gives 2"),
        "{}",
        err.message
    );

    // Testing the credentials (the editor's Credentials page): a login and
    // `SELECT 1` on each server; a wrong password is an answer, not an
    // error, and the answer never carries the password.
    for cred in ["pg", "maria"] {
        let t = engine.test_credential(cred, None).await.unwrap();
        assert!(t.ok, "{cred}: {}", t.message);
        assert!(t.message.contains("SELECT 1"), "{}", t.message);
    }
    for (name, kind, port) in [
        ("pg-wrong", "postgres", pg.port),
        ("maria-wrong", "mysql", maria.port),
    ] {
        let mut value = server(port);
        value["password"] = json!("wrong-Pa55word-77");
        engine
            .store()
            .put_credential(name, kind, &value)
            .await
            .unwrap();
        let t = engine.test_credential(name, None).await.unwrap();
        assert!(!t.ok, "{name}: {}", t.message);
        assert!(
            t.message.to_lowercase().contains("password") || t.message.contains("denied"),
            "{name}: {}",
            t.message
        );
        assert!(!t.message.contains("wrong-Pa55word-77"), "{}", t.message);
    }

    drop(engine);
    let disk = disk_bytes(dir.path());
    assert!(!disk.is_empty());
    assert!(
        !contains(&disk, PASSWORD),
        "the password is on disk in clear"
    );
}

#[tokio::test]
async fn sqlite_files_stay_inside_the_allowed_folders() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let r = run(
        &engine,
        json!([
            {"id": "make", "kind": "db.query", "config": {"sqlite": "shop.db", "create": true,
                "statements": [
                    {"sql": "CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, qty INTEGER)", "mode": "execute"},
                    {"sql": "INSERT INTO stock VALUES (:sku, :qty)", "mode": "execute"},
                    {"sql": "SELECT * FROM stock", "mode": "query"}],
                "params": {"sku": "{{ input.sku }}", "qty": "{{ input.qty }}"}}}
        ]),
        json!({"sku": "A-1", "qty": 3}),
    )
    .await;
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    assert_eq!(
        r.output["out"],
        json!({"results": [
            {"rows_affected": 0},
            {"rows_affected": 1, "last_insert_id": 1},
            {"row_count": 1, "rows": [{"sku": "A-1", "qty": 3}],
             "columns": [{"name": "sku", "type": "TEXT"}, {"name": "qty", "type": "INTEGER"}]}
        ]})
    );
    assert!(dir.path().join("files/shop.db").exists());

    // Outside the allowed folder: by `..`, by an absolute path, by a
    // symlink; and a file that is not there without `create`.
    std::os::unix::fs::symlink(dir.path().join("data"), dir.path().join("files/link")).unwrap();
    std::fs::write(dir.path().join("outside.db"), b"").unwrap();
    for (path, create, says) in [
        ("../outside.db", false, "outside the allowed folders"),
        ("../new.db", true, "outside the allowed folders"),
        ("/etc/passwd", false, "outside the allowed folders"),
        ("link/sluice.db", false, "outside the allowed folders"),
        ("link/new.db", true, "outside the allowed folders"),
        ("missing.db", false, "missing.db"),
    ] {
        let r = run(
            &engine,
            json!([{"id": "q", "kind": "db.query", "config": {"sqlite": path, "create": create,
                "sql": "CREATE TABLE x (a)", "mode": "execute"}}]),
            json!({}),
        )
        .await;
        assert_eq!(r.status, Status::Failed, "{path}");
        let err = r.error.unwrap();
        assert!(err.message.contains(says), "{path}: {}", err.message);
    }
    assert_eq!(std::fs::read(dir.path().join("outside.db")).unwrap(), b"");
    assert!(!dir.path().join("new.db").exists());
    assert!(!dir.path().join("data/new.db").exists());
    assert!(!dir.path().join("files/missing.db").exists());
}
