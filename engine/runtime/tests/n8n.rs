//! n8n workflows, exported the way n8n 2.x writes them (`tests/n8n/*.json`),
//! imported and run: each run's output is what n8n gives for that input
//! (each leaf node's items' JSON), asserted exactly.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::n8n::{Report, convert};
use sluice_runtime::{Engine, Options, Plan, RunResult, Status};

fn import(file: &str) -> (Workflow, Report) {
    let path = format!("{}/tests/n8n/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let imported = convert(&v, &|_| false).unwrap();
    let wf = Workflow::from_value(imported.workflow.clone())
        .unwrap_or_else(|e| panic!("{file}: {e}\n{:#}", imported.workflow));
    (wf, imported.report)
}

async fn run(file: &str, trigger: &str, input: Value) -> (RunResult, Report) {
    let (wf, report) = import(file);
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let plan = Plan::new(wf.clone()).unwrap_or_else(|e| panic!("{file}: {e:?}\n{wf:#?}"));
    let handle = engine
        .start(plan, Some(trigger), Arc::new(input))
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap();
    if std::env::var_os("N8N_DEBUG").is_some() {
        eprintln!("{}", serde_json::to_string_pretty(&wf).unwrap());
        let row = engine.store().get_run(&r.id).await.unwrap().unwrap();
        let detail = engine.run_detail(&row).await.unwrap();
        eprintln!("{}", serde_json::to_string_pretty(&detail).unwrap());
    }
    assert_eq!(r.status, Status::Succeeded, "{file}: {:?}", r.error);
    (r, report)
}

fn request(body: Value, query: Value) -> Value {
    json!({"method": "POST", "path": "orders", "query": query,
           "headers": {"content-type": "application/json"}, "body": body})
}

#[tokio::test]
async fn webhook_set_respond() {
    let (r, report) = run(
        "webhook-set-respond.json",
        "webhook_hook",
        request(
            json!({"name": "ada", "qty": 3, "item": "mug", "price": 2.5}),
            json!({"source": "app"}),
        ),
    )
    .await;
    assert_eq!(report.id, "order-total");
    assert!(report.nodes.iter().all(|n| n.converted), "{report:?}");
    assert_eq!(
        report.webhooks[0].sluice, "/hook/order-total/orders",
        "{report:?}"
    );
    assert_eq!(
        r.respond.as_deref(),
        Some(&json!({
            "status": 201,
            "headers": {"X-Order-Source": "app"},
            "body": {"customer": "ADA", "total": 7.5, "summary": "3 x mug for ada",
                     "shipping": {"express": true}}
        }))
    );
}

const MANUAL: &str = "when_clicking_execute_workflow_start";

#[tokio::test]
async fn if_with_string_and_number_conditions() {
    let (r, _) = run(
        "if-string-number.json",
        MANUAL,
        json!([{"id": 1, "country": "DE", "amount": 150},
               {"id": 2, "country": "DE", "amount": 50},
               {"id": 3, "country": "FR", "amount": 500}]),
    )
    .await;
    assert_eq!(
        r.output,
        json!({
            "big_german_order_2_result": [{"id": 1, "country": "DE", "amount": 150, "tier": "big-de"}],
            "other_order_result": [
                {"id": 2, "country": "DE", "amount": 50, "tier": "small", "note": "DE-2"},
                {"id": 3, "country": "FR", "amount": 500, "tier": "big", "note": "FR-3"}]
        })
    );
}

#[tokio::test]
async fn switch_with_a_fallback_output() {
    let (r, _) = run(
        "switch.json",
        MANUAL,
        json!([{"id": 1, "status": "new"}, {"id": 2, "status": "PAID"},
               {"id": 3, "status": "shipped"}, {"id": 4, "status": "lost"},
               {"id": 5, "status": "new"}]),
    )
    .await;
    assert_eq!(
        r.output,
        json!({
            // As n8n 2.20.12 gives it: the rules' own `caseSensitive: true`
            // wins over the node's "Ignore Case", so "PAID" falls through.
            "new_orders_result": [{"id": 1, "status": "new"}, {"id": 5, "status": "new"}],
            "shipping_result": [{"id": 3, "status": "shipped"}],
            "unknown_result": [{"id": 2, "status": "PAID"}, {"id": 4, "status": "lost"}]
        })
    );
}

#[tokio::test]
async fn merge_appends() {
    let (r, _) = run("merge-append.json", MANUAL, Value::Null).await;
    assert_eq!(
        r.output,
        json!({"merge_result": [
            {"name": "Ada", "kind": "customer"}, {"name": "Bob", "kind": "customer"},
            {"name": "Acme", "kind": "supplier"}]})
    );
}

#[tokio::test]
async fn merge_combines_by_position() {
    let (r, _) = run("merge-by-position.json", MANUAL, Value::Null).await;
    assert_eq!(
        r.output,
        json!({"merge_result": [{"name": "Ada", "age": 36}, {"name": "Bob", "age": 41}]})
    );
}

#[tokio::test]
async fn code_in_both_modes() {
    let (r, _) = run(
        "code-both-modes.json",
        MANUAL,
        json!([{"sku": "A", "price": 10, "qty": 1}, {"sku": "B", "price": 5, "qty": 6},
               {"sku": "C", "price": 20, "qty": 1}]),
    )
    .await;
    assert_eq!(
        r.output,
        json!({"label_result": [
            {"sku": "A", "price": 10, "qty": 1, "share": 17, "label": "A: 17%", "position": 0, "first": "A"},
            {"sku": "B", "price": 5, "qty": 6, "share": 50, "label": "B: 50%", "position": 1, "first": "A"},
            {"sku": "C", "price": 20, "qty": 1, "share": 33, "label": "C: 33%", "position": 2, "first": "A"}]})
    );
}

#[tokio::test]
async fn split_out_and_aggregate() {
    let (r, _) = run(
        "splitout-aggregate.json",
        MANUAL,
        json!({"order": 7, "lines": [{"sku": "A", "qty": 2, "price": 3},
                                     {"sku": "B", "qty": 1, "price": 10}]}),
    )
    .await;
    assert_eq!(
        r.output,
        json!({"order_result": [{"total": 16, "skus": "A, B", "order": 7}]})
    );
}

#[tokio::test]
async fn schedule_trigger_items() {
    let (wf, _) = import("schedule.json");
    let trigger = wf
        .nodes
        .iter()
        .find(|n| n.kind == "trigger.schedule")
        .unwrap();
    assert_eq!(trigger.config["cron"], json!("0 30 9 */1 * *"));
    let (r, _) = run(
        "schedule.json",
        "schedule_trigger_at",
        json!({"scheduled_at": "2024-03-01T09:30:00Z"}),
    )
    .await;
    assert_eq!(
        r.output,
        json!({"greeting_result": [{"greeting": "Good morning, it is Friday 01 March 2024",
                                    "hour": "09", "weekend": false}]})
    );
}

#[tokio::test]
async fn wait_then_go_on() {
    let started = std::time::Instant::now();
    let (r, _) = run("wait.json", MANUAL, json!({"id": 5})).await;
    assert!(started.elapsed() >= Duration::from_secs(1));
    let year: i64 = time_year();
    assert_eq!(
        r.output,
        json!({"stamp_result": [{"waited": true, "year": year, "id": 5}]})
    );
}

/// This year (UTC), as `$now.year` gives it.
fn time_year() -> i64 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // Days to civil year (H. Hinnant).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(m <= 2)
}

/// The shop API: answers each order with a ticket and what it received.
async fn shop() -> String {
    use axum::extract::{Json, Query};
    use axum::http::HeaderMap;
    use std::collections::BTreeMap;
    async fn order(
        headers: HeaderMap,
        Query(q): Query<BTreeMap<String, String>>,
        Json(body): Json<Value>,
    ) -> Json<Value> {
        let rid = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Json(
            json!({"ticket": format!("T-{}-{}", body["id"], q.get("batch").cloned().unwrap_or_default()),
                    "received": {"body": body, "query": q, "request_id": rid}}),
        )
    }
    let app = axum::Router::new().route("/orders", axum::routing::post(order));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test]
async fn http_request_with_a_json_body_expression() {
    let base = shop().await;
    let (r, report) = run(
        "http-json-body.json",
        MANUAL,
        json!([
            {"base": base, "id": 1, "name": "Ada", "lines": [{"sku": "A", "qty": 2}]},
            {"base": base, "id": 2, "name": "Bob", "lines": [{"sku": "B", "qty": 1}, {"sku": "C", "qty": 3}]}
        ]),
    )
    .await;
    assert!(report.nodes.iter().all(|n| n.converted), "{report:?}");
    assert_eq!(
        r.output,
        json!({"confirmation_result": [
            {"confirmation": "T-1-1", "customer": "Ada", "echo": {
                "body": {"id": 1, "customer": "Ada", "lines": [{"sku": "A", "qty": 2}], "rush": false},
                "query": {"source": "n8n", "batch": "1"}, "request_id": "order-1"}},
            {"confirmation": "T-2-2", "customer": "Bob", "echo": {
                "body": {"id": 2, "customer": "Bob", "lines": [{"sku": "B", "qty": 1}, {"sku": "C", "qty": 3}], "rush": true},
                "query": {"source": "n8n", "batch": "2"}, "request_id": "order-2"}}
        ]})
    );
}

#[tokio::test]
async fn execute_workflow_runs_the_imported_workflow_it_calls() {
    let (child, child_report) = import("price-lines.json");
    assert_eq!(child_report.id, "price-lines");
    let (parent, report) = import("order-with-prices.json");
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("calls the workflow `price-lines`")),
        "{report:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    engine
        .save_workflow_as(&Plan::new(child).unwrap(), Some("import"))
        .await
        .unwrap();
    let handle = engine
        .start(
            Plan::new(parent).unwrap(),
            Some(MANUAL),
            Arc::new(json!([{"qty": 2, "price": 3}, {"qty": 1, "price": 10}])),
        )
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap();
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    assert_eq!(r.output, json!({"aggregate_result": [{"total": [6, 10]}]}));
}

/// A plain SMTP server (Python's aiosmtpd) writing each message it gets
/// as a JSON line.
const SMTP: &str = r#"
import asyncio, json, sys
from email import message_from_bytes, policy
from aiosmtpd.smtp import SMTP
class Handler:
    async def handle_DATA(self, server, session, envelope):
        msg = message_from_bytes(envelope.content, policy=policy.default)
        with open(sys.argv[1], "a") as f:
            f.write(json.dumps({"from": str(msg["From"]), "to": envelope.rcpt_tos,
                "subject": str(msg["Subject"]),
                "text": msg.get_body(preferencelist=("plain",)).get_content().rstrip()}) + "\n")
        return "250 2.0.0 queued"
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(Handler()), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"#;

#[tokio::test]
async fn send_email_sends_one_message_per_item() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("smtp.py"), SMTP).unwrap();
    let received = dir.path().join("received.jsonl");
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut child = tokio::process::Command::new(python)
        .arg(dir.path().join("smtp.py"))
        .arg(&received)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with aiosmtpd (cargo xtask test installs python3-aiosmtpd)");
    let mut line = String::new();
    tokio::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();

    let (wf, report) = import("send-email.json");
    assert_eq!(report.credentials[0].name, "smtp-account");
    assert_eq!(report.credentials[0].kind, "smtp");
    let engine = Engine::open(&dir.path().join("data"), Options::default())
        .await
        .unwrap();
    engine
        .store()
        .put_credential(
            "smtp-account",
            "smtp",
            &json!({"host": "127.0.0.1", "port": port, "security": "none"}),
        )
        .await
        .unwrap();
    let handle = engine
        .start(
            Plan::new(wf).unwrap(),
            Some(MANUAL),
            Arc::new(json!([{"id": 1, "name": "Ada", "email": "ada@example.org"},
                            {"id": 2, "name": "Bob", "email": "bob@example.org"}])),
        )
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .unwrap();
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    let items = r.output["send_email_result"].as_array().unwrap().clone();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["accepted"], json!(["ada@example.org"]));
    assert_eq!(
        items[1]["envelope"],
        json!({"from": "shop@example.com", "to": ["bob@example.org"]})
    );
    assert_eq!(items[0]["response"], json!("250 2.0.0 queued"));
    let got: Vec<Value> = std::fs::read_to_string(&received)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        got,
        vec![
            json!({"from": "shop@example.com", "to": ["ada@example.org"], "subject": "Order 1",
                   "text": "Hello Ada, your order 1 is on its way."}),
            json!({"from": "shop@example.com", "to": ["bob@example.org"], "subject": "Order 2",
                   "text": "Hello Bob, your order 2 is on its way."}),
        ]
    );
}

#[tokio::test]
async fn a_webhook_answering_with_the_last_node_answers_with_its_first_item() {
    let path = format!(
        "{}/tests/n8n/webhook-set-respond.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Without the Respond to Webhook node, answering "when the last node
    // finishes" with its first item's JSON (n8n's default for that mode).
    v["nodes"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["name"] != "Respond to Webhook");
    v["connections"]
        .as_object_mut()
        .unwrap()
        .remove("Edit Fields");
    v["nodes"][0]["parameters"]["responseMode"] = json!("lastNode");
    v["nodes"][0]["parameters"]["options"] = json!({"responseCode": 202});
    let imported = convert(&v, &|_| false).unwrap();
    let wf = Workflow::from_value(imported.workflow).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(dir.path(), Options::default()).await.unwrap();
    let r = engine
        .start(
            Plan::new(wf).unwrap(),
            Some("webhook_hook"),
            Arc::new(request(
                json!({"name": "bo", "qty": 1, "item": "pen", "price": 4}),
                json!({}),
            )),
        )
        .await
        .unwrap()
        .wait()
        .await;
    assert_eq!(r.status, Status::Succeeded, "{:?}", r.error);
    let respond = r.respond.unwrap();
    assert_eq!(respond["status"], json!(202));
    assert_eq!(
        respond["body"],
        json!({"customer": "BO", "total": 4, "summary": "1 x pen for bo", "shipping": {"express": false}})
    );
}
