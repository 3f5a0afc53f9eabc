//! `/api/v1`: workflows, runs, node kinds, health.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;
use sluice_api::{
    CredentialEntry, CredentialStored, DeployState, Health, LogLine, ModuleAdded, Publish,
    PublishState, Restored, Retry, RetryFrom, RunDetail, RunOutcome, RunStarted, RunStatus,
    RunSummary, SetCredential, StartRun, Stored, TestCall, TestNode, Validation, VersionEntry,
    WorkflowEntry,
};
use sluice_model::Workflow;
use sluice_runtime::{Plan, report};

use crate::error::parse_json;
use crate::{ApiError, AppState};

pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/health", get(health))
        .route("/me", get(me))
        .route("/ws", get(crate::live::ws))
        .route("/node-kinds", get(node_kinds))
        .route("/workflows", get(list_workflows))
        .route(
            "/workflows/{id}",
            get(get_workflow).put(put_workflow).delete(delete_workflow),
        )
        .route(
            "/workflows/{id}/publish",
            get(publish_state).post(publish_workflow),
        )
        .route("/workflows/{id}/unpublish", post(unpublish_workflow))
        .route(
            "/workflows/{id}/deploy",
            get(deploy_state)
                .post(deploy_workflow)
                .delete(undeploy_workflow),
        )
        .route("/workflows/{id}/versions", get(list_versions))
        .route("/workflows/{id}/versions/{version}", get(get_version))
        .route(
            "/workflows/{id}/versions/{version}/restore",
            post(restore_version),
        )
        .route("/validate", post(validate_workflow))
        .route("/import/n8n", post(import_n8n))
        .route("/workflows/{id}/runs", post(start_run))
        .route("/runs", get(list_runs))
        .route("/runs/{id}", get(get_run))
        .route("/runs/{id}/cancel", post(cancel_run))
        .route("/runs/{id}/retry", post(retry_run))
        .route("/runs/{id}/signal", post(crate::resume::signal_run))
        .route("/runs/{id}/logs", get(run_logs))
        .route("/runs/{id}/workflow", get(run_workflow))
        .route("/modules", post(add_module))
        .route(
            "/credentials",
            get(list_credentials).post(create_credential),
        )
        .route(
            "/credentials/{name}",
            axum::routing::put(put_credential)
                .patch(patch_credential)
                .delete(delete_credential),
        )
        .route("/credentials/{name}/test", post(test_credential))
        .route("/sign-in-links", post(crate::ui::new_sign_in_link))
        .route("/workflows/{id}/nodes/{node}/test", post(test_node))
        .route(
            "/workflows/{id}/nodes/{node}/listen",
            post(listen_for_test_call),
        )
        .route(
            "/workflows/{id}/shares",
            get(crate::peers::list_shares).post(crate::peers::create_share),
        )
        .route(
            "/shares/{share}",
            axum::routing::delete(crate::peers::revoke_share),
        )
        .route(
            "/workflows/{id}/peers/{peer}",
            axum::routing::delete(crate::peers::remove_peer),
        )
        .route("/peers", get(crate::peers::info))
        .route("/peers/join", post(crate::peers::join))
        .route("/peers/tickets", post(crate::peers::describe_ticket))
        .route("/worker", get(worker_health))
        .route("/storage", get(storage))
        .route("/storage/prune", post(prune))
}

#[utoipa::path(get, path = "/api/v1/storage", tag = "engine",
    responses((status = 200, description = "What the data dir holds (database, WAL, blobs, runs per workflow), the retention in force and what the last pruning pass removed (docs/storage.md)", body = sluice_api::StorageReport)))]
pub(crate) async fn storage(
    State(s): State<AppState>,
) -> Result<Json<sluice_api::StorageReport>, ApiError> {
    Ok(Json(s.engine.storage().await?))
}

#[utoipa::path(post, path = "/api/v1/storage/prune", tag = "engine",
    responses((status = 200, description = "Prunes now, as the engine does every minute: finished runs retention lets go, blobs nothing refers to, free pages back to the OS", body = sluice_api::PruneReport)))]
pub(crate) async fn prune(
    State(s): State<AppState>,
) -> Result<Json<sluice_api::PruneReport>, ApiError> {
    Ok(Json(s.engine.prune(true).await?))
}

#[utoipa::path(get, path = "/api/v1/worker", tag = "engine",
    responses((status = 200, description = "The shared worker runs are handed to: configured, reachable, registered, its version, runs in flight, what is wrong (docs/worker.md)", body = sluice_api::WorkerHealth)))]
pub(crate) async fn worker_health(State(s): State<AppState>) -> Json<sluice_api::WorkerHealth> {
    Json(s.engine.worker_health().await)
}

#[utoipa::path(get, path = "/api/v1/health", tag = "engine",
    responses((status = 200, description = "The engine is up", body = Health)))]
pub(crate) async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/nodes/{node}/test", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id"), ("node" = String, Path, description = "Node id")),
    request_body(content = TestNode, description = "The input, and the `nodes.<id>` messages its templates read", content_type = "application/json"),
    responses((status = 200, description = "The node of the draft ran once (not a run: nothing is journaled)", body = sluice_api::NodeTested),
        (status = 400, description = "The draft has problems (`error.detail` lists each), or the body is not a TestNode"),
        (status = 404, description = "No such workflow or node")))]
pub(crate) async fn test_node(
    State(s): State<AppState>,
    Path((id, node)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<sluice_api::NodeTested>, ApiError> {
    let req: TestNode = match parse_json(&body)? {
        Value::Null => TestNode::default(),
        v => serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("body: {e}")))?,
    };
    Ok(Json(s.engine.test_node(&id, &node, req).await?))
}

/// The longest wait for a test call.
const LISTEN_MAX: std::time::Duration = std::time::Duration::from_secs(120);

#[utoipa::path(post, path = "/api/v1/workflows/{id}/nodes/{node}/listen", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id"), ("node" = String, Path, description = "A `trigger.webhook` node of the draft")),
    responses((status = 200, description = "One call to `/hook-test/{id}/{path}` arrived: its message", body = TestCall),
        (status = 400, description = "The node is not a webhook trigger, or the draft has problems"),
        (status = 404, description = "No such workflow or node"),
        (status = 408, description = "No test call came in time")))]
/// Waits for one call to a webhook's test URL (`/hook-test/{id}/{path}`,
/// with the draft's method and path) and answers with its message.
pub(crate) async fn listen_for_test_call(
    State(s): State<AppState>,
    Path((id, node)): Path<(String, String)>,
) -> Result<Json<TestCall>, ApiError> {
    let plan = s.engine.draft(&id).await?;
    let index = plan
        .node_index(&node)
        .ok_or_else(|| ApiError::not_found(format!("workflow `{id}` has no node `{node}`")))?;
    if !matches!(
        plan.nodes[index].trigger,
        Some(sluice_model::kinds::Trigger::Webhook(_))
    ) {
        return Err(ApiError::bad_request(format!(
            "`{node}` is not a webhook trigger: only webhooks have a test URL"
        )));
    }
    let waiting = s.listeners.listen(&id, &node);
    // Inside the server's own limit on a request.
    let limit = (s.options.webhook_timeout + std::time::Duration::from_secs(20)).min(LISTEN_MAX);
    match tokio::time::timeout(limit, waiting).await {
        Ok(Ok(message)) => Ok(Json(TestCall { node, message })),
        // Replaced by a newer wait for the same trigger.
        Ok(Err(_)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "another editor started listening for this webhook",
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "no test call came within {} s: listen again",
                limit.as_secs()
            ),
        )),
    }
}

#[utoipa::path(get, path = "/api/v1/me", tag = "engine",
    responses((status = 200, description = "Who this install is to others: its display name", body = sluice_api::Me)))]
pub(crate) async fn me(State(s): State<AppState>) -> Json<sluice_api::Me> {
    Json(sluice_api::Me {
        name: s.engine.settings().user.display_name(),
    })
}

#[utoipa::path(get, path = "/api/v1/node-kinds", tag = "engine",
    responses((status = 200, description = "Every node kind with its config JSON Schema and ports")))]
pub(crate) async fn node_kinds() -> Json<Value> {
    Json(Value::Array(
        sluice_model::catalog()
            .iter()
            .map(|k| k.describe())
            .collect(),
    ))
}

#[utoipa::path(get, path = "/api/v1/workflows", tag = "workflows",
    responses((status = 200, description = "Every stored workflow", body = Vec<WorkflowEntry>)))]
pub(crate) async fn list_workflows(
    State(s): State<AppState>,
) -> Result<Json<Vec<WorkflowEntry>>, ApiError> {
    let rows = s.engine.store().list_workflows().await?;
    let mut list = Vec::with_capacity(rows.len());
    for w in rows {
        let editing = s.engine.editors(&w.id);
        list.push(w.into_entry(editing)?);
    }
    Ok(Json(list))
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The workflow (`sluice.workflow/v1` JSON)"), (status = 404, description = "No such workflow")))]
pub(crate) async fn get_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (text, version) = s
        .engine
        .workflow_text(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("workflow `{id}` not found")))?;
    Ok(workflow_response(text, version))
}

/// Workflow JSON text as the body, its document version (if any) in the
/// `x-sluice-version` header.
fn workflow_response(text: String, version: Option<String>) -> Response {
    let mut resp = (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response();
    if let Some(v) = version.and_then(|v| axum::http::HeaderValue::from_str(&v).ok()) {
        resp.headers_mut().insert("x-sluice-version", v);
    }
    resp
}

/// A stored run, or 404.
async fn find_run(s: &AppState, id: &str) -> Result<sluice_store::RunRow, ApiError> {
    s.engine
        .store()
        .get_run(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run `{id}` not found")))
}

#[derive(Debug, Deserialize)]
pub(crate) struct Page {
    #[serde(default)]
    offset: u32,
    limit: Option<u32>,
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}/publish", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The draft against what runs: versions, what publishing would change, \
        the problems that block it", body = PublishState),
        (status = 404, description = "No such workflow")))]
pub(crate) async fn publish_state(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<PublishState>, ApiError> {
    Ok(Json(s.engine.publish_state(&id).await?))
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/publish", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    request_body(content = Publish, description = "`version`: the document version to publish (default: the draft)", content_type = "application/json"),
    responses((status = 200, description = "Published: its triggers and runs by id run it from now on", body = PublishState),
        (status = 400, description = "The version has problems (`error.detail` lists each) or is not one of this workflow's"),
        (status = 404, description = "No such workflow")))]
pub(crate) async fn publish_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<PublishState>, ApiError> {
    let req: Publish = match parse_json(&body)? {
        Value::Null => Publish::default(),
        v => serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("body: {e}")))?,
    };
    Ok(Json(s.engine.publish(&id, req.version.as_deref()).await?))
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/unpublish", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "Unpublished: its triggers are off (its webhooks answer 404) and runs by id \
        are refused until it is published again; the draft stays", body = PublishState),
        (status = 404, description = "No such workflow")))]
pub(crate) async fn unpublish_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<PublishState>, ApiError> {
    s.engine.unpublish(&id).await?;
    // Off means off everywhere: the worker's schedules and webhooks too.
    if s.engine.deployed(&id).await {
        s.engine.undeploy(&id).await.map_err(|e| {
            ApiError::from(e).with_prefix("unpublished here, but the worker still runs it: ")
        })?;
    }
    Ok(Json(s.engine.publish_state(&id).await?))
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}/deploy", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "The version deployed to the shared worker, as this engine last set it", body = DeployState)))]
pub(crate) async fn deploy_state(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<DeployState>, ApiError> {
    Ok(Json(s.engine.deploy_state(&id).await?))
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/deploy", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "Deployed: the worker owns the published version (its schedules fire there, \
        its webhooks answer on the worker's hook port); their runs come into this engine's history", body = DeployState),
        (status = 404, description = "No such workflow"),
        (status = 409, description = "Not published, or no worker configured (`[worker] ingress`)"),
        (status = 502, description = "The worker refused it (a schedule that never fires, a version skew) or cannot be reached")))]
pub(crate) async fn deploy_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<DeployState>, ApiError> {
    Ok(Json(s.engine.deploy(&id).await?))
}

#[utoipa::path(delete, path = "/api/v1/workflows/{id}/deploy", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 200, description = "Undeployed: the worker's schedules stop and its webhooks answer 404; \
        this engine's schedules fire again", body = DeployState),
        (status = 409, description = "No worker configured"),
        (status = 502, description = "The worker cannot be reached")))]
pub(crate) async fn undeploy_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<DeployState>, ApiError> {
    Ok(Json(s.engine.undeploy(&id).await?))
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}/versions", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id"),
        ("offset" = Option<u32>, Query, description = "Skip this many (newest first)"),
        ("limit" = Option<u32>, Query, description = "At most this many (default 50, at most 500)")),
    responses((status = 200, description = "Newest first: each version is one author's burst of edits; \
        `summary` says what it changed", body = Vec<VersionEntry>),
        (status = 404, description = "No such workflow")))]
pub(crate) async fn list_versions(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(page): Query<Page>,
) -> Result<Json<Vec<VersionEntry>>, ApiError> {
    let limit = page.limit.unwrap_or(50).clamp(1, 500);
    Ok(Json(s.engine.history(&id, page.offset, limit).await?))
}

#[utoipa::path(get, path = "/api/v1/workflows/{id}/versions/{version}", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id"),
        ("version" = String, Path, description = "A version (`counter@peer`, from the versions list or a run's `version`)")),
    responses((status = 200, description = "The workflow exactly as it was at that version"),
        (status = 400, description = "Not a version of this workflow"), (status = 404, description = "No such workflow")))]
pub(crate) async fn get_version(
    State(s): State<AppState>,
    Path((id, version)): Path<(String, String)>,
) -> Result<Json<Workflow>, ApiError> {
    Ok(Json(s.engine.workflow_at(&id, &version).await?))
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/versions/{version}/restore", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id"),
        ("version" = String, Path, description = "The version to go back to")),
    responses((status = 200, description = "The new version, made of new operations on top \
        (history is never rewritten, and the restore itself can be undone the same way)", body = Restored),
        (status = 400, description = "Not a version of this workflow, or it no longer validates"),
        (status = 404, description = "No such workflow")))]
pub(crate) async fn restore_version(
    State(s): State<AppState>,
    Path((id, version)): Path<(String, String)>,
) -> Result<Json<Restored>, ApiError> {
    let version = s.engine.restore_version(&id, &version).await?;
    Ok(Json(Restored { id, version }))
}

#[utoipa::path(post, path = "/api/v1/modules", tag = "workflows",
    request_body(content = Vec<u8>, description = "A WebAssembly component (the `sluice:node` world)", content_type = "application/wasm"),
    responses((status = 201, description = "Its hash, for `config.module` of `code.wasm` nodes", body = ModuleAdded),
        (status = 400, description = "Not a component of the `sluice:node` world (the message says why)")))]
pub(crate) async fn add_module(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<ModuleAdded>), ApiError> {
    let module = s.engine.add_module(body.to_vec()).await?;
    Ok((StatusCode::CREATED, Json(ModuleAdded { module })))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/workflow", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The workflow exactly as this run ran it (its pinned definition); \
        header `x-sluice-version` names its document version when it has one"),
        (status = 404, description = "No such run")))]
pub(crate) async fn run_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let row = find_run(&s, &id).await?;
    Ok(workflow_response(row.definition, row.doc_version))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PutQuery {
    #[serde(default)]
    publish: bool,
    /// The document version the body was made from.
    base: Option<String>,
}

#[utoipa::path(put, path = "/api/v1/workflows/{id}", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id; must match the body's `id`"),
        ("publish" = Option<bool>, Query, description = "Also publish it (default: it is stored as the draft, and what runs stays as it was)"),
        ("base" = Option<String>, Query, description = "The document version the body was made from (the `x-sluice-version` of the GET it \
            started from): edits made since then (a peer's, another window's, the file's) are merged with it, not undone. \
            Without it the draft becomes exactly the body")),
    request_body(content = Object, description = "A `sluice.workflow/v1` workflow", content_type = "application/json"),
    responses((status = 201, description = "Created", body = Stored), (status = 200, description = "Replaced, or merged (`merged`); the header \
            `x-sluice-version` names the draft's version now", body = Stored),
        (status = 400, description = "Invalid JSON or workflow (`error.detail` lists every problem), or a `base` that is not one of its versions")))]
pub(crate) async fn put_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<PutQuery>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let value = parse_json(&body)?;
    let wf =
        Workflow::from_value(value).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    if wf.id != id {
        return Err(ApiError::bad_request(format!(
            "the body's id `{}` does not match the URL's `{id}`",
            wf.id
        )));
    }
    let plan = Plan::new(wf).map_err(sluice_runtime::executor::Error::from)?;
    let saved = s
        .engine
        .save_draft_onto(&plan, Some("api"), query.base.as_deref())
        .await?;
    if query.publish {
        s.engine.publish(&id, None).await?;
    }
    let status = if saved.existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut resp = (
        status,
        Json(Stored {
            id,
            nodes: saved.nodes,
            merged: saved.merged,
        }),
    )
        .into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&saved.version) {
        resp.headers_mut().insert("x-sluice-version", v);
    }
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportQuery {
    #[serde(default)]
    publish: bool,
    #[serde(default)]
    strict: bool,
}

#[utoipa::path(post, path = "/api/v1/import/n8n", tag = "workflows",
    params(("publish" = Option<bool>, Query, description = "Also publish it (default: it is stored as the draft)"),
        ("strict" = Option<bool>, Query, description = "Import nothing (409) when a node cannot be converted")),
    request_body(content = Object, description = "An n8n workflow export (`nodes`, `connections`)", content_type = "application/json"),
    responses((status = 201, description = "Imported as a new workflow: the report (`id`, each node and what it became, \
        the credentials to create, the webhook addresses, notes)", body = Object),
        (status = 400, description = "Not JSON, or not an n8n export"),
        (status = 409, description = "`strict`, and a node could not be converted: the report as `error.detail`")))]
pub(crate) async fn import_n8n(
    State(s): State<AppState>,
    Query(query): Query<ImportQuery>,
    body: Bytes,
) -> Result<(StatusCode, Json<sluice_model::n8n::Report>), ApiError> {
    let value = parse_json(&body)?;
    let taken: std::collections::HashSet<String> = s
        .engine
        .store()
        .list_workflows()
        .await
        .map_err(sluice_runtime::executor::Error::from)?
        .into_iter()
        .map(|w| w.id)
        .collect();
    let imported = sluice_model::n8n::convert(&value, &|id| taken.contains(id))
        .map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    let missing = imported.report.not_converted().count();
    if query.strict && missing > 0 {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{missing} node(s) could not be converted; nothing was imported"),
        )
        .with_detail(serde_json::to_value(&imported.report).unwrap_or_default()));
    }
    let wf = Workflow::from_value(imported.workflow)
        .map_err(|e| ApiError::internal(format!("the converted workflow: {e}")))?;
    let plan = Plan::new(wf).map_err(sluice_runtime::executor::Error::from)?;
    s.engine.save_draft(&plan, Some("import from n8n")).await?;
    if query.publish {
        s.engine.publish(&imported.report.id, None).await?;
    }
    Ok((StatusCode::CREATED, Json(imported.report)))
}

#[utoipa::path(post, path = "/api/v1/validate", tag = "workflows",
    request_body(content = Object, description = "A `sluice.workflow/v1` workflow", content_type = "application/json"),
    responses((status = 200, description = "Every problem, each naming its node or edge and field, \
        including credentials that do not exist in this engine's vault", body = Validation),
        (status = 400, description = "The body is not JSON")))]
pub(crate) async fn validate_workflow(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<Json<Validation>, ApiError> {
    let value = parse_json(&body)?;
    let wf = match Workflow::from_value(value) {
        Ok(wf) => wf,
        Err(e) => {
            return Ok(Json(Validation {
                valid: false,
                problems: vec![sluice_api::Problem {
                    node: None,
                    edge: None,
                    field: None,
                    message: e.to_string(),
                }],
            }));
        }
    };
    let problems = s.engine.problems(wf).await?;
    Ok(Json(Validation {
        valid: problems.is_empty(),
        problems,
    }))
}

#[utoipa::path(delete, path = "/api/v1/workflows/{id}", tag = "workflows",
    params(("id" = String, Path, description = "Workflow id")),
    responses((status = 204, description = "Deleted (its runs stay)"), (status = 404, description = "No such workflow")))]
pub(crate) async fn delete_workflow(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if s.engine.delete_workflow(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("workflow `{id}` not found")))
    }
}

#[utoipa::path(post, path = "/api/v1/workflows/{id}/runs", tag = "runs",
    params(("id" = String, Path, description = "Workflow id")),
    request_body(content = StartRun, description = "The input, the trigger (optional) and whether to wait", content_type = "application/json"),
    responses((status = 202, description = "Started (`version`: the workflow document version it runs)", body = RunStarted),
        (status = 200, description = "With `wait`: the finished run with its output", body = RunOutcome),
        (status = 404, description = "No such workflow"), (status = 429, description = "Too many runs in progress")))]
pub(crate) async fn start_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: StartRun = match parse_json(&body)? {
        Value::Null => StartRun::default(),
        v => serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("body: {e}")))?,
    };
    let plan = if req.draft {
        s.engine.draft(&id).await?
    } else {
        s.engine.workflow(&id).await?
    };
    let version = plan.version.clone();
    let handle = s
        .engine
        .start_on(
            plan,
            req.trigger.as_deref(),
            Arc::new(req.input),
            req.run_on,
            false,
        )
        .await?;
    let started = RunStarted {
        id: handle.id.clone(),
        status: RunStatus::Running,
        version: version.clone(),
        retry_of: None,
        draft: req.draft,
    };
    if !req.wait {
        return Ok((StatusCode::ACCEPTED, Json(started)).into_response());
    }
    // Bounded like a webhook: a long run answers 202 and goes on.
    match tokio::time::timeout(s.options.webhook_timeout, handle.wait()).await {
        // Parked at an approval: not over, like a run still running.
        Ok(r) if r.status == RunStatus::Waiting => Ok((
            StatusCode::ACCEPTED,
            Json(RunStarted {
                status: RunStatus::Waiting,
                ..started
            }),
        )
            .into_response()),
        Ok(r) => {
            let outcome = RunOutcome {
                id: r.id,
                workflow: id,
                status: r.status,
                output: r.output,
                error: r.error,
                version,
            };
            Ok((StatusCode::OK, Json(outcome)).into_response())
        }
        Err(_) => Ok((StatusCode::ACCEPTED, Json(started)).into_response()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListRuns {
    #[serde(default = "default_limit")]
    limit: u32,
    workflow: Option<String>,
    status: Option<String>,
    /// Pagination: the id of the last run of the previous page.
    before: Option<String>,
    /// Only runs started at this trigger node.
    trigger: Option<String>,
    /// Only runs started at or after this time (microseconds since the epoch).
    since_us: Option<i64>,
    /// `true`: only runs of drafts; `false`: only of published versions.
    draft: Option<bool>,
    /// Only runs whose input or output holds this text (any case).
    text: Option<String>,
}

fn default_limit() -> u32 {
    50
}

#[utoipa::path(get, path = "/api/v1/runs", tag = "runs",
    params(("workflow" = Option<String>, Query, description = "Only this workflow's runs"),
        ("status" = Option<String>, Query, description = "running, waiting, succeeded, failed or cancelled"),
        ("limit" = Option<u32>, Query, description = "Page size, 1–1000 (default 50)"),
        ("before" = Option<String>, Query, description = "Cursor: the id of the last run of the previous page"),
        ("trigger" = Option<String>, Query, description = "Only runs started at this trigger node"),
        ("since_us" = Option<i64>, Query, description = "Only runs started at or after this time (microseconds since the epoch)"),
        ("draft" = Option<bool>, Query, description = "true: only runs of drafts (the editor's Run); false: only of published versions"),
        ("text" = Option<String>, Query, description = "Only runs whose input or output holds this text (any case; values of 1 MiB and more are not searched)")),
    responses((status = 200, description = "Runs, newest first, without steps", body = Vec<RunSummary>)))]
pub(crate) async fn list_runs(
    State(s): State<AppState>,
    q: Result<Query<ListRuns>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<RunSummary>>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let status = q
        .status
        .map(|st| st.parse::<RunStatus>())
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let filter = sluice_store::RunFilter {
        workflow: q.workflow,
        status,
        before: q.before,
        since_us: q.since_us,
        trigger: q.trigger,
        draft: q.draft,
        text: q.text,
        limit: q.limit.clamp(1, 1000),
    };
    let rows = s.engine.store().find_runs(&filter).await?;
    Ok(Json(rows.iter().map(report::run_summary).collect()))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The run with every step attempt (input, output, error, timings)", body = RunDetail), (status = 404, description = "No such run")))]
pub(crate) async fn get_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<RunDetail>, ApiError> {
    let row = find_run(&s, &id).await?;
    Ok(Json(s.engine.run_detail(&row).await?))
}

#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 202, description = "Cancelling"), (status = 404, description = "No such run"), (status = 409, description = "Not running here")))]
pub(crate) async fn cancel_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if s.engine.cancel(&id) || s.engine.cancel_waiting(&id).await? {
        return Ok(StatusCode::ACCEPTED);
    }
    match s.engine.store().get_run(&id).await? {
        None => Err(ApiError::not_found(format!("run `{id}` not found"))),
        Some(row) if row.status == RunStatus::Running => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("run `{id}` is not being driven by this engine (it resumes at the next start)"),
        )),
        Some(row) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "run `{id}` already {}: only a running run can be cancelled",
                row.status
            ),
        )),
    }
}

#[utoipa::path(post, path = "/api/v1/runs/{id}/retry", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    request_body(content = Retry, description = "`from`: `failed` (default) reuses every finished step; `start` runs it all again", content_type = "application/json"),
    responses((status = 202, description = "The new run", body = RunStarted), (status = 400, description = "Still running")))]
pub(crate) async fn retry_run(
    State(s): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<RunStarted>), ApiError> {
    let req: Retry = match parse_json(&body)? {
        Value::Null => Retry::default(),
        v => serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("body: {e}")))?,
    };
    let original = find_run(&s, &id).await?;
    let handle = match req.from {
        RetryFrom::Failed => s.engine.retry_from_failed(&id).await?,
        RetryFrom::Start => s.engine.retry_from_start(&id).await?,
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(RunStarted {
            id: handle.id,
            status: RunStatus::Running,
            // A retry runs the version its run pinned.
            version: original.doc_version,
            retry_of: Some(id),
            draft: original.draft,
        }),
    ))
}

#[utoipa::path(get, path = "/api/v1/runs/{id}/logs", tag = "runs",
    params(("id" = String, Path, description = "Run id")),
    responses((status = 200, description = "The run's log, oldest first", body = Vec<LogLine>), (status = 404, description = "No such run")))]
pub(crate) async fn run_logs(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Vec<LogLine>>, ApiError> {
    if s.engine.store().get_run(&id).await?.is_none() {
        return Err(ApiError::not_found(format!("run `{id}` not found")));
    }
    let lines = s.engine.store().run_logs(&id).await?;
    Ok(Json(
        lines
            .into_iter()
            .map(|l| LogLine {
                node: l.node,
                lineage: l.lineage,
                level: l.level,
                message: l.message,
                at_us: l.at_us,
            })
            .collect(),
    ))
}

/// `/metrics`: Prometheus text format (needs the token, like the API).
#[utoipa::path(get, path = "/metrics", tag = "engine",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub(crate) async fn metrics(State(s): State<AppState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        s.engine.metrics(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/api/v1/credentials", tag = "credentials",
    responses((status = 200, description = "Every credential by name: never the values", body = Vec<CredentialEntry>)))]
pub(crate) async fn list_credentials(
    State(s): State<AppState>,
) -> Result<Json<Vec<CredentialEntry>>, ApiError> {
    let rows = s.engine.store().list_credentials().await?;
    let mut uses = s.engine.credential_uses().await?;
    Ok(Json(
        rows.into_iter()
            .map(|c| CredentialEntry {
                used_by: uses.remove(&c.name).unwrap_or_default(),
                name: c.name,
                kind: c.kind,
                updated_at_us: c.updated_at_us,
            })
            .collect(),
    ))
}

#[utoipa::path(post, path = "/api/v1/credentials", tag = "credentials",
    request_body(content = sluice_api::NewCredential, description = "`{name, kind, value}`; the value is write-only", content_type = "application/json"),
    responses((status = 201, description = "Created", body = CredentialStored),
        (status = 400, description = "A bad name, an unknown kind or a value of the wrong shape (the error names the field, never the value)"),
        (status = 409, description = "A credential of that name exists (PUT replaces one)")))]
/// Creates a credential, never replacing one: what the editor's "New
/// credential" sends, so a stale list cannot overwrite a credential in use.
pub(crate) async fn create_credential(
    State(s): State<AppState>,
    body: Bytes,
) -> Result<(StatusCode, Json<CredentialStored>), ApiError> {
    let req: sluice_api::NewCredential = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid credential body at line {}, column {}",
            e.line(),
            e.column()
        ))
    })?;
    let name = req.name;
    if !sluice_model::validate::is_slug(&name) {
        return Err(ApiError::bad_request(format!(
            "credential name `{name}` must be letters, digits, `-` and `_`"
        )));
    }
    sluice_model::credentials::check(&req.kind, &req.value)
        .map_err(|e| ApiError::bad_request(format!("credential `{name}` ({}): {e}", req.kind)))?;
    if !s
        .engine
        .store()
        .create_credential(&name, &req.kind, &req.value)
        .await?
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("a credential `{name}` exists already: change it, or pick another name"),
        ));
    }
    Ok((
        StatusCode::CREATED,
        Json(CredentialStored {
            name,
            kind: req.kind,
        }),
    ))
}

#[utoipa::path(patch, path = "/api/v1/credentials/{name}", tag = "credentials",
    params(("name" = String, Path, description = "Credential name")),
    request_body(content = sluice_api::PatchCredential, description = "`{value: {field: new value}}`: the fields given replace the stored ones (`null` removes an optional field), the others are kept; write-only", content_type = "application/json"),
    responses((status = 200, description = "Changed", body = CredentialStored),
        (status = 400, description = "The changed value has the wrong shape (the error names the field, never the value)"),
        (status = 404, description = "No such credential")))]
/// Changes some fields of a credential's value and keeps the others, so an
/// editor can change a host without knowing the password.
pub(crate) async fn patch_credential(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<CredentialStored>, ApiError> {
    let req: sluice_api::PatchCredential = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid credential body at line {}, column {}",
            e.line(),
            e.column()
        ))
    })?;
    // Read, change, write only if nothing was written in between (another
    // PATCH of another field, a PUT, a DELETE; in this process or a CLI's):
    // else read again, so no concurrent change is lost or brought back.
    let kind = loop {
        let read = s
            .engine
            .store()
            .get_credential_sealed(&name)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("credential `{name}` not found")))?;
        let (kind, mut value) = (read.kind, read.value);
        let Value::Object(fields) = &mut value else {
            return Err(ApiError::bad_request(format!(
                "credential `{name}`: its stored value is not an object; set it whole with PUT"
            )));
        };
        for (key, v) in &req.value {
            if v.is_null() {
                fields.remove(key);
            } else {
                fields.insert(key.clone(), v.clone());
            }
        }
        sluice_model::credentials::check(&kind, &value)
            .map_err(|e| ApiError::bad_request(format!("credential `{name}` ({kind}): {e}")))?;
        if s.engine
            .store()
            .replace_credential_if(&name, &kind, &value, &read.token)
            .await?
        {
            break kind;
        }
    };
    Ok(Json(CredentialStored { name, kind }))
}

#[utoipa::path(post, path = "/api/v1/credentials/{name}/test", tag = "credentials",
    params(("name" = String, Path, description = "Credential name")),
    request_body(content = sluice_api::TestCredential, description = "Optional: `{url}` to call with an HTTP credential", content_type = "application/json"),
    responses((status = 200, description = "The test ran: `ok` says whether the server took the credential, `message` what it said (secrets masked)", body = sluice_api::CredentialTested),
        (status = 400, description = "The test cannot be made (an HTTP credential with no URL to call)"),
        (status = 404, description = "No such credential")))]
/// Tests a stored credential against the server it is for: an HTTP call,
/// an SMTP handshake and login, a database `SELECT 1`, an OpenAI model list.
pub(crate) async fn test_credential(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<sluice_api::CredentialTested>, ApiError> {
    let req: sluice_api::TestCredential = match parse_json(&body)? {
        Value::Null => Default::default(),
        v => serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("body: {e}")))?,
    };
    Ok(Json(s.engine.test_credential(&name, req.url).await?))
}

#[utoipa::path(put, path = "/api/v1/credentials/{name}", tag = "credentials",
    params(("name" = String, Path, description = "Credential name (letters, digits, `-`, `_`)")),
    request_body(content = SetCredential, description = "`{kind, value}`; the value is write-only", content_type = "application/json"),
    responses((status = 201, description = "Created", body = CredentialStored), (status = 200, description = "Replaced", body = CredentialStored),
        (status = 400, description = "Unknown kind or a value of the wrong shape (the error names the field, never the value)")))]
pub(crate) async fn put_credential(
    State(s): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<CredentialStored>), ApiError> {
    if !sluice_model::validate::is_slug(&name) {
        return Err(ApiError::bad_request(format!(
            "credential name `{name}` must be letters, digits, `-` and `_`"
        )));
    }
    // Parse errors would quote the body: name only where it failed.
    let req: SetCredential = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid credential body at line {}, column {}",
            e.line(),
            e.column()
        ))
    })?;
    sluice_model::credentials::check(&req.kind, &req.value)
        .map_err(|e| ApiError::bad_request(format!("credential `{name}` ({}): {e}", req.kind)))?;
    let existed = s
        .engine
        .store()
        .list_credentials()
        .await?
        .iter()
        .any(|c| c.name == name);
    s.engine
        .store()
        .put_credential(&name, &req.kind, &req.value)
        .await?;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(CredentialStored {
            name,
            kind: req.kind,
        }),
    ))
}

#[utoipa::path(delete, path = "/api/v1/credentials/{name}", tag = "credentials",
    params(("name" = String, Path, description = "Credential name")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such credential")))]
pub(crate) async fn delete_credential(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if s.engine.store().delete_credential(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "credential `{name}` not found"
        )))
    }
}
