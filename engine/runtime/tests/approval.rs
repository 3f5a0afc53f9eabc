//! `flow.approval`: runs that park until a decision (or a timeout), on the
//! real executor with a real SQLite journal.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_api::{Decision, StepStatus};
use sluice_model::Workflow;
use sluice_runtime::executor::{Error, Signal};
use sluice_runtime::{Engine, Options, Plan, Status};

fn workflow(id: &str, nodes: Value, edges: Value) -> Arc<Plan> {
    let wf = Workflow::from_value(
        json!({"format": "sluice.workflow/v1", "id": id, "nodes": nodes, "edges": edges}),
    )
    .unwrap();
    Plan::new(wf).unwrap()
}

/// trigger → approve → yes | no | late
fn approval(config: Value) -> Arc<Plan> {
    workflow(
        "ship",
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "approve", "kind": "flow.approval", "config": config},
            {"id": "yes", "kind": "output.end"},
            {"id": "no", "kind": "output.end"},
            {"id": "late", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "approve"},
            {"from": "approve:approved", "to": "yes"},
            {"from": "approve:rejected", "to": "no"},
            {"from": "approve:timeout", "to": "late"}
        ]),
    )
}

async fn engine(dir: &std::path::Path) -> Engine {
    Engine::open(dir, Options::default()).await.unwrap()
}

/// Starts a run and waits until it parks.
async fn parked(engine: &Engine, plan: Arc<Plan>, input: Value) -> String {
    let handle = engine.start(plan, None, Arc::new(input)).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), handle.wait())
        .await
        .unwrap();
    assert_eq!(r.status, Status::Waiting, "{r:?}");
    r.id
}

async fn ended(engine: &Engine, run: &str) -> sluice_runtime::RunResult {
    tokio::time::timeout(Duration::from_secs(30), engine.wait_for_end(run))
        .await
        .expect("the run ends")
        .unwrap()
}

/// The ids of the runs listed as waiting.
async fn waiting_runs(engine: &Engine) -> Vec<String> {
    let filter = sluice_runtime::RunFilter {
        status: Some(Status::Waiting),
        limit: 10,
        ..Default::default()
    };
    let rows = engine.store().find_runs(&filter).await.unwrap();
    rows.into_iter().map(|r| r.id).collect()
}

fn decide(decision: Decision, body: Value) -> Signal {
    Signal::decide(None, decision, body)
}

#[tokio::test]
async fn a_parked_run_holds_nothing_and_a_signal_resumes_it_with_the_body_as_output() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let plan = approval(json!({"message": "Ship order {{ input.order }}?"}));
    let run = parked(&engine, plan, json!({"order": 42})).await;
    // Parked: no driver, no task; the run says what it waits for.
    assert_eq!(engine.active_runs(), 0);
    let row = engine.store().get_run(&run).await.unwrap().unwrap();
    assert_eq!(row.status, Status::Waiting);
    let detail = engine.run_detail(&row).await.unwrap();
    assert_eq!(detail.run.waiting.len(), 1, "{:?}", detail.run);
    let w = &detail.run.waiting[0];
    assert_eq!(w.node, "approve");
    assert_eq!(w.message.as_deref(), Some("Ship order 42?"));
    assert_eq!(w.timeout_at_us, None);
    let url = w.resume_url.as_deref().unwrap();
    assert!(url.contains("/hook/resume/"), "{url}");
    let step = detail.steps.iter().find(|s| s.node == "approve").unwrap();
    assert_eq!(step.status, StepStatus::Waiting);
    // Listed as waiting, not among the runs to resume at start.
    assert_eq!(waiting_runs(&engine).await, vec![run.clone()]);
    assert!(engine.store().unfinished_runs().await.unwrap().is_empty());

    let done = engine
        .signal(&run, decide(Decision::Approved, json!({"by": "ann"})))
        .await
        .unwrap();
    assert_eq!(
        (done.node.as_str(), done.decision),
        ("approve", Decision::Approved)
    );
    let r = ended(&engine, &run).await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output, json!({"yes": {"by": "ann"}}));
    // Decided once: a second signal finds nothing waiting.
    let again = engine
        .signal(&run, decide(Decision::Rejected, json!({})))
        .await;
    assert!(
        matches!(&again, Err(Error::NotWaiting { why, .. }) if why == "it already succeeded"),
        "{again:?}"
    );
    // The run view: the step succeeded with the body on `approved`.
    let row = engine.store().get_run(&run).await.unwrap().unwrap();
    let detail = engine.run_detail(&row).await.unwrap();
    assert!(detail.run.waiting.is_empty());
    let step = detail.steps.iter().find(|s| s.node == "approve").unwrap();
    assert_eq!(step.status, StepStatus::Succeeded);
    assert_eq!(step.output, Some(json!({"approved": {"by": "ann"}})));
}

#[tokio::test]
async fn a_rejection_goes_out_on_rejected_and_skips_approved() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let run = parked(&engine, approval(json!({})), json!(1)).await;
    engine
        .signal(&run, decide(Decision::Rejected, json!({"why": "too late"})))
        .await
        .unwrap();
    let r = ended(&engine, &run).await;
    assert_eq!(r.output, json!({"no": {"why": "too late"}}));
}

#[tokio::test]
async fn the_timeout_port_fires_and_a_timeout_can_fail_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let waking = tokio::spawn(engine.clone().keep_waking());
    let run = parked(
        &engine,
        approval(json!({"timeout_ms": 300})),
        json!({"n": 1}),
    )
    .await;
    let row = engine.store().get_run(&run).await.unwrap().unwrap();
    let detail = engine.run_detail(&row).await.unwrap();
    let w = &detail.run.waiting[0];
    assert_eq!(w.timeout_at_us, Some(w.since_us + 300_000));
    // The input goes out on `timeout`.
    let r = ended(&engine, &run).await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output, json!({"late": {"n": 1}}));
    // `on_timeout: fail`: the step fails, naming the wait.
    let run = parked(
        &engine,
        approval(json!({"timeout_ms": "{{ input.ms }}", "on_timeout": "fail"})),
        json!({"ms": 200}),
    )
    .await;
    let r = ended(&engine, &run).await;
    assert_eq!(r.status, Status::Failed);
    let err = r.error.unwrap();
    assert_eq!(err.node.as_deref(), Some("approve"));
    assert_eq!(err.message, "no decision within 200 ms");
    waking.abort();
}

#[tokio::test]
async fn a_parked_run_survives_a_restart_and_a_timeout_that_passed_meanwhile_fires_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (run, late) = {
        let engine = engine(dir.path()).await;
        let run = parked(&engine, approval(json!({})), json!("a")).await;
        let late = parked(&engine, approval(json!({"timeout_ms": 100})), json!("b")).await;
        engine.store().journal().flush().await.unwrap();
        (run, late)
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let engine = engine(dir.path()).await;
    // Nothing to resume at start: both are parked.
    assert!(engine.resume_all().await.unwrap().is_empty());
    let waking = tokio::spawn(engine.clone().keep_waking());
    assert_eq!(ended(&engine, &late).await.output, json!({"late": "b"}));
    engine
        .signal(&run, decide(Decision::Approved, json!("ok")))
        .await
        .unwrap();
    let r = ended(&engine, &run).await;
    assert_eq!(r.output, json!({"yes": "ok"}));
    // The approval started once: replaying it did not start it again.
    let records = engine.store().run_records(&run).await.unwrap();
    let started = records
        .iter()
        .filter(|r| &*r.node == "approve" && r.kind == sluice_store::RecordKind::Started)
        .count();
    assert_eq!(started, 1);
    waking.abort();
}

#[tokio::test]
async fn two_signals_at_once_decide_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    for _ in 0..5 {
        let run = parked(&engine, approval(json!({})), json!(null)).await;
        let a = engine.signal(&run, decide(Decision::Approved, json!("a")));
        let b = engine.signal(&run, decide(Decision::Rejected, json!("b")));
        let (a, b) = tokio::join!(a, b);
        assert!(a.is_ok() != b.is_ok(), "{a:?} {b:?}");
        let r = ended(&engine, &run).await;
        let expect = if a.is_ok() {
            json!({"yes": "a"})
        } else {
            json!({"no": "b"})
        };
        assert_eq!(r.output, expect);
    }
}

#[tokio::test]
async fn a_signal_while_another_branch_runs_goes_to_the_running_driver() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let plan = workflow(
        "both",
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "approve", "kind": "flow.approval"},
            {"id": "nap", "kind": "flow.wait", "config": {"duration_ms": 400}},
            {"id": "ok", "kind": "output.end"},
            {"id": "slept", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "approve"}, {"from": "t", "to": "nap"},
            {"from": "approve:approved", "to": "ok"}, {"from": "nap", "to": "slept"}
        ]),
    );
    let handle = engine.start(plan, None, Arc::new(json!(7))).await.unwrap();
    let run = handle.id.clone();
    // The approval waits while `nap` runs: the driver is still there.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(engine.active_runs(), 1);
    engine
        .signal(
            &run,
            Signal::decide(Some("approve".into()), Decision::Approved, json!("yes")),
        )
        .await
        .unwrap();
    let r = handle.wait().await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output, json!({"ok": "yes", "slept": 7}));
}

#[tokio::test]
async fn signals_that_fit_nothing_are_refused_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let plan = workflow(
        "two",
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "a", "kind": "flow.approval"},
            {"id": "b", "kind": "flow.approval"},
            {"id": "m", "kind": "flow.merge"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "a"}, {"from": "t", "to": "b"},
            {"from": "a:approved", "to": "m"}, {"from": "b:approved", "to": "m"},
            {"from": "m", "to": "end"}
        ]),
    );
    let run = parked(&engine, plan, json!(0)).await;
    let some = engine
        .signal(&run, decide(Decision::Approved, json!(1)))
        .await;
    assert!(
        matches!(&some, Err(Error::AmbiguousWait { waits, .. }) if waits == &["a", "b"]),
        "{some:?}"
    );
    let wrong = engine
        .signal(
            &run,
            Signal::decide(Some("c".into()), Decision::Approved, json!(1)),
        )
        .await;
    assert!(
        matches!(&wrong, Err(Error::NotWaiting { why, .. }) if why == "it does not wait for a decision at `c`"),
        "{wrong:?}"
    );
    let missing = engine
        .signal("r-none", decide(Decision::Approved, json!(1)))
        .await;
    assert!(matches!(missing, Err(Error::RunNotFound(_))), "{missing:?}");
    // One decided, the run parks again for the other.
    for (node, body) in [("a", 1), ("b", 2)] {
        engine
            .signal(
                &run,
                Signal::decide(Some(node.into()), Decision::Approved, json!(body)),
            )
            .await
            .unwrap();
    }
    let r = ended(&engine, &run).await;
    assert_eq!(r.output, json!({"end": {"a": 1, "b": 2}}));
}

#[tokio::test]
async fn a_parked_run_can_be_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let run = parked(&engine, approval(json!({})), json!(0)).await;
    // Not over: it cannot be retried.
    let retried = engine.retry_from_start(&run).await;
    assert!(
        matches!(retried, Err(Error::StillRunning(_))),
        "{retried:?}"
    );
    assert!(engine.cancel_waiting(&run).await.unwrap());
    let r = ended(&engine, &run).await;
    assert_eq!(r.status, Status::Cancelled);
    assert!(engine.store().open_waits(&run).await.unwrap().is_empty());
    assert!(!engine.cancel_waiting(&run).await.unwrap());
}

#[tokio::test]
async fn an_earlier_step_gets_the_resume_link_and_the_token_names_its_approval() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let plan = workflow(
        "mail",
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "mail", "kind": "data.set", "config": {"values": {"link": "{{ run.resume.approve }}"}}},
            {"id": "approve", "kind": "flow.approval"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "mail"}, {"from": "mail", "to": "approve"},
            {"from": "approve:approved", "to": "end"}
        ]),
    );
    let run = parked(&engine, plan, json!({})).await;
    let records = engine.store().run_records(&run).await.unwrap();
    let mail = records
        .iter()
        .find(|r| &*r.node == "mail" && r.kind == sluice_store::RecordKind::Succeeded)
        .unwrap();
    let outputs = mail.data.as_ref().and_then(|d| d.value()).unwrap();
    let link = outputs[0][1]["link"].as_str().unwrap().to_string();
    let row = engine.store().get_run(&run).await.unwrap().unwrap();
    let detail = engine.run_detail(&row).await.unwrap();
    assert_eq!(
        detail.run.waiting[0].resume_url.as_deref(),
        Some(link.as_str())
    );
    let token = link.rsplit('/').next().unwrap();
    assert_eq!(
        engine.read_resume_token(token),
        Some((run.clone(), "approve".to_string(), String::new()))
    );
    // Anything else is nobody's: a changed payload, a changed MAC, junk,
    // another data dir's link.
    let (payload, mac) = token.split_once('.').unwrap();
    let mut bad_mac = mac.to_string();
    bad_mac.replace_range(0..1, if mac.starts_with('A') { "B" } else { "A" });
    for forged in [
        format!("{payload}.{bad_mac}"),
        format!("{}.{mac}", &payload[1..]),
        "x".repeat(5000),
        String::new(),
        ".".into(),
    ] {
        assert_eq!(engine.read_resume_token(&forged), None, "{forged}");
    }
    let other_dir = tempfile::tempdir().unwrap();
    let other = self::engine(other_dir.path()).await;
    assert_eq!(other.read_resume_token(token), None);
}

#[tokio::test]
async fn a_parent_waits_for_its_child_parked_at_an_approval() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let child = workflow(
        "child",
        json!([
            {"id": "t", "kind": "trigger.workflow"},
            {"id": "approve", "kind": "flow.approval"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "approve"}, {"from": "approve:approved", "to": "end"}]),
    );
    engine.save_workflow(&child).await.unwrap();
    let parent = workflow(
        "parent",
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "call", "kind": "flow.subworkflow", "config": {"workflow": "child"}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "call"}, {"from": "call", "to": "end"}]),
    );
    let handle = engine
        .start(parent, None, Arc::new(json!(1)))
        .await
        .unwrap();
    // The child parks; the parent's step waits on.
    let child_run = loop {
        if let Some(id) = waiting_runs(&engine).await.pop() {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    engine
        .signal(&child_run, decide(Decision::Approved, json!({"ok": true})))
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), handle.wait())
        .await
        .unwrap();
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    assert_eq!(r.output, json!({"end": {"end": {"ok": true}}}));
}

#[tokio::test]
async fn each_element_of_a_split_waits_with_its_own_link() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let plan = workflow(
        "each",
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "each", "kind": "flow.split"},
            {"id": "approve", "kind": "flow.approval", "config": {"message": "Item {{ input }}?"}},
            {"id": "all", "kind": "flow.join"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "each"}, {"from": "each", "to": "approve"},
            {"from": "approve:approved", "to": "all"}, {"from": "approve:rejected", "to": "all"},
            {"from": "all", "to": "end"}
        ]),
    );
    let run = parked(&engine, plan, json!(["a", "b"])).await;
    let row = engine.store().get_run(&run).await.unwrap().unwrap();
    let detail = engine.run_detail(&row).await.unwrap();
    let mut waits: Vec<(String, String)> = detail
        .run
        .waiting
        .iter()
        .map(|w| (w.lineage.clone(), w.message.clone().unwrap()))
        .collect();
    waits.sort();
    assert_eq!(
        waits,
        vec![
            ("0".into(), "Item a?".into()),
            ("1".into(), "Item b?".into())
        ]
    );
    // Each by its own link.
    for (w, decision) in detail
        .run
        .waiting
        .iter()
        .zip([Decision::Approved, Decision::Rejected])
    {
        let token = w.resume_url.as_deref().unwrap().rsplit('/').next().unwrap();
        let (r, node, lineage) = engine.read_resume_token(token).unwrap();
        assert_eq!((r.as_str(), node.as_str()), (run.as_str(), "approve"));
        assert_eq!(lineage, w.lineage);
        let signal = Signal {
            lineage: Some(lineage),
            ..Signal::decide(Some(node), decision, json!(w.lineage))
        };
        engine.signal(&run, signal).await.unwrap();
    }
    let r = ended(&engine, &run).await;
    assert_eq!(r.status, Status::Succeeded, "{r:?}");
    let mut got: Vec<String> = r.output["end"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    got.sort();
    assert_eq!(got, vec!["0", "1"]);
}

/// A cancel that reaches a run while its driver is parking it (committing
/// the journal, marking it parked) is not dropped with the driver: every
/// cancel the engine accepted ends its run `cancelled`. The runs are
/// cancelled at staggered moments around their parking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_comes_while_a_run_parks_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    let plan = approval(json!({}));
    for i in 0..60u64 {
        let handle = engine
            .start(plan.clone(), None, Arc::new(json!({"i": i})))
            .await
            .unwrap();
        let run = handle.id.clone();
        tokio::time::sleep(Duration::from_micros(i * 50)).await;
        let accepted = engine.cancel(&run) || engine.cancel_waiting(&run).await.unwrap();
        assert!(accepted, "run {i}: the cancel was refused");
        let r = tokio::time::timeout(Duration::from_secs(10), engine.wait_for_end(&run))
            .await
            .unwrap_or_else(|_| panic!("run {i}: cancelled, yet it did not end"))
            .unwrap();
        assert_eq!(r.status, Status::Cancelled, "run {i}: {r:?}");
    }
    assert_eq!(engine.active_runs(), 0);
    assert!(waiting_runs(&engine).await.is_empty());
}

#[tokio::test]
async fn resume_links_point_where_the_trigger_port_can_be_reached() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path()).await;
    // No port bound (`sluice run`): the default port on this machine.
    assert_eq!(engine.public_url(), "http://127.0.0.1:4260");
    engine.set_trigger_addresses(vec!["127.0.0.1:5555".parse().unwrap()]);
    assert_eq!(engine.public_url(), "http://127.0.0.1:5555");
    // Listening on every interface: the link names the machine, never
    // `0.0.0.0` or `[::]`, which no one else can open.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_ascii_lowercase();
    for any in ["[::]:5555", "0.0.0.0:5555"] {
        engine.set_trigger_addresses(vec![any.parse().unwrap()]);
        assert_eq!(engine.public_url(), format!("http://{host}:5555"), "{any}");
    }
    let run = parked(&engine, approval(json!({})), json!({})).await;
    let row = engine.store().get_run(&run).await.unwrap().unwrap();
    let detail = engine.run_detail(&row).await.unwrap();
    let url = detail.run.waiting[0].resume_url.clone().unwrap();
    assert!(
        url.starts_with(&format!("http://{host}:5555/hook/resume/")),
        "{url}"
    );
}
