//! What the database tests share: pools, requests, and reading outcomes.

#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;
use sluice_db::{Mode, Outcome, Param, Params, PoolSettings, Pools, Request, Target};

/// Small pools that keep their connections.
pub fn pools() -> Pools {
    Pools::new(PoolSettings {
        max_connections: 2,
        idle_close: Duration::from_secs(300),
        connect_timeout: Duration::from_secs(10),
    })
}

/// `:name` parameters from a JSON object.
pub fn named(pairs: Value) -> Params {
    Params::Named(
        pairs
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), Param::Json(v.clone())))
            .collect(),
    )
}

/// `named`, with bytes added under `name`.
pub fn named_with_bytes(pairs: Value, name: &str, bytes: Vec<u8>) -> Params {
    let Params::Named(mut list) = named(pairs) else {
        unreachable!()
    };
    list.push((name.into(), Param::Bytes(bytes)));
    Params::Named(list)
}

pub fn req<'a>(sql: &'a str, params: &'a Params, mode: Mode) -> Request<'a> {
    Request {
        sql,
        params,
        mode,
        max_rows: 1000,
        max_bytes: 16 << 20,
        timeout: Duration::from_secs(30),
    }
}

/// The rows a query returns.
pub async fn rows(p: &Pools, t: &Target, sql: &str, params: &Params) -> Vec<Value> {
    match p.run(t, &req(sql, params, Mode::Query)).await.unwrap() {
        Outcome::Rows { rows, .. } => rows.into_iter().map(Value::Object).collect(),
        other => panic!("{other:?}"),
    }
}

/// Rows affected and the last insert id.
pub async fn exec(p: &Pools, t: &Target, sql: &str, params: &Params) -> (u64, Option<i64>) {
    match p.run(t, &req(sql, params, Mode::Execute)).await.unwrap() {
        Outcome::Executed {
            rows_affected,
            last_insert_id,
        } => (rows_affected, last_insert_id),
        other => panic!("{other:?}"),
    }
}
