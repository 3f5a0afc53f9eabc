//! DESIGN §3's rules on the shared worker: the same cases as the local
//! executor's (`engine/runtime/tests/semantics/rules.rs`), each handed off
//! by a real engine to a real restate-server and `sluice worker` endpoint,
//! mirrored back, with the same exact outputs.

mod support;

use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use sluice_api::RunOn;
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Status, WorkerTarget};

/// One restate-server and one worker endpoint for every test here, on a
/// thread (and runtime) of their own that lives as long as the process.
struct Shared {
    ingress: String,
    admin: String,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let dir = tempfile::tempdir().expect("tempdir");
            let restate = support::Restate::start(&dir.path().join("restate"));
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async {
                let engine = Engine::open(&dir.path().join("worker"), Options::default())
                    .await
                    .expect("worker engine");
                let worker = sluice_worker::start(
                    engine,
                    sluice_worker::WorkerOptions {
                        listen: "127.0.0.1:0".parse().expect("addr"),
                        advertise: None,
                        restate_admin: Some(restate.admin.clone()),
                        hooks: None,
                        restate_ingress: restate.ingress.clone(),
                    },
                )
                .await
                .expect("worker");
                tx.send(Shared {
                    ingress: restate.ingress.clone(),
                    admin: restate.admin.clone(),
                })
                .expect("send");
                // Serve until the process ends.
                std::future::pending::<()>().await;
                drop((worker, restate, dir));
            });
        });
        rx.recv().expect("the worker started")
    })
}

struct Harness {
    _dir: tempfile::TempDir,
    engine: Engine,
}

async fn harness() -> Harness {
    let s = shared();
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        worker: Some(WorkerTarget {
            ingress: s.ingress.clone(),
            admin: Some(s.admin.clone()),
            headers: Vec::new(),
        }),
        ..Options::default()
    };
    let engine = Engine::open(dir.path(), options).await.unwrap();
    Harness { _dir: dir, engine }
}

fn plan(nodes: Value, edges: Value) -> Arc<Plan> {
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": "t", "nodes": nodes, "edges": edges}),
    )
    .unwrap();
    Plan::new(wf).unwrap()
}

async fn run_with(
    h: &Harness,
    nodes: Value,
    edges: Value,
    trigger: Option<&str>,
    input: Value,
) -> RunResult {
    let handle = h
        .engine
        .start_on(
            plan(nodes, edges),
            trigger,
            Arc::new(input),
            Some(RunOn::Worker),
            false,
        )
        .await
        .unwrap();
    let id = handle.id.clone();
    let r = tokio::time::timeout(std::time::Duration::from_secs(120), handle.wait())
        .await
        .unwrap();
    // It ran on the worker and its record here says so.
    let row = h.engine.store().get_run(&id).await.unwrap().unwrap();
    assert_eq!(row.executor, RunOn::Worker);
    assert_eq!(row.status, r.status);
    r
}

#[track_caller]
fn ok(r: &RunResult, expect: Value) {
    assert_eq!(r.status, Status::Succeeded, "error: {:?}", r.error);
    assert_eq!(r.output, expect);
}

#[macro_use]
#[path = "../../runtime/tests/semantics/rules.rs"]
mod rules;

/// Each rule as a test on the worker.
macro_rules! worker_tests {
    ($($name:ident),* $(,)?) => {
        mod rules_worker {
            $(
                #[tokio::test]
                async fn $name() {
                    let h = super::harness().await;
                    super::rules::$name(&h).await;
                }
            )*
        }
    };
}
each_rule!(worker_tests);
