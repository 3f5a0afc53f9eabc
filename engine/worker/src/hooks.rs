//! The worker's hook port: `ANY /hook/{workflow}/{path}` for deployed
//! workflows, with the trigger port's checks and answers (the same
//! signatures, respond modes and status codes, from `sluice_server::hook`).
//! The deployment comes from its `SluiceDeploy` object through the Restate
//! ingress (cached for a second, so an undeploy stops a webhook within a
//! second on every worker); the run starts there, durably, before the
//! caller is answered.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::any;
use serde_json::Value;
use sluice_api::{DEPLOY_SERVICE, RUN_SERVICE, WorkerEntry, WorkerProgress};
use sluice_core::Plan;
use sluice_model::kinds::Respond;
use sluice_server::ApiError;
use sluice_server::hook::{self, Replays};

use crate::deploy::{Current, Fire, plan_of};

/// How long a deployment read from Restate is used before asking again.
const FRESH: Duration = Duration::from_secs(1);

/// The largest request body a hook takes (as on the trigger port).
pub const BODY_LIMIT: usize = 16 * 1024 * 1024;

/// Webhook calls handled at once; past it a caller gets 429 (and
/// `Retry-After`), never an unbounded queue of runs behind the worker.
pub const MAX_CALLS: usize = 1024;

/// A deployment as read: when, and its plan (None: not deployed).
type Read = (Instant, Option<Arc<Plan>>);

/// The hook port's state.
pub struct Hooks {
    ingress: String,
    client: reqwest::Client,
    /// Per workflow: when it was read, and its plan (None: not deployed).
    deployed: Mutex<HashMap<String, Read>>,
    replays: Replays,
    calls: tokio::sync::Semaphore,
    /// How long a `when_finished` call waits before answering 202.
    pub wait: Duration,
}

impl Hooks {
    pub fn new(ingress: &str) -> Hooks {
        sluice_nodes::http::install_crypto_provider();
        Hooks {
            ingress: ingress.trim_end_matches('/').to_string(),
            client: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
            deployed: Mutex::default(),
            replays: Replays::default(),
            calls: tokio::sync::Semaphore::new(MAX_CALLS),
            wait: Duration::from_secs(30),
        }
    }

    pub fn router(self: Arc<Self>) -> axum::Router {
        axum::Router::new()
            .route("/hook/{workflow}/{*path}", any(call))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(self)
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> ApiError {
        eprintln!(
            "sluice worker: hook: the Restate ingress at {}: {e}",
            self.ingress
        );
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the worker cannot reach its Restate server: try again later",
        )
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(StatusCode, String), ApiError> {
        let mut req = self.client.post(format!("{}/{path}", self.ingress));
        // A handler without input takes no body at all.
        if !body.is_null() {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(|e| self.unavailable(e))?;
        let status = StatusCode::from_u16(resp.status().as_u16())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Ok((status, resp.text().await.unwrap_or_default()))
    }

    /// The deployed plan of `workflow`, if any.
    async fn plan(&self, workflow: &str) -> Result<Option<Arc<Plan>>, ApiError> {
        if let Some((at, plan)) = self
            .deployed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(workflow)
            && at.elapsed() < FRESH
        {
            return Ok(plan.clone());
        }
        let (status, body) = self
            .post(&format!("{DEPLOY_SERVICE}/{workflow}/get"), &Value::Null)
            .await?;
        if !status.is_success() {
            return Err(self.unavailable(format!("HTTP {status}: {body}")));
        }
        let current: Option<Current> =
            serde_json::from_str(&body).map_err(|e| self.unavailable(e))?;
        let plan = match current {
            None => None,
            Some(c) => match plan_of(workflow, &c.definition) {
                Ok(p) => Some(p),
                Err(e) => return Err(self.unavailable(e)),
            },
        };
        let mut deployed = self.deployed.lock().unwrap_or_else(|e| e.into_inner());
        if deployed.len() > 4096 {
            deployed.clear();
        }
        deployed.insert(workflow.to_string(), (Instant::now(), plan.clone()));
        Ok(plan)
    }

    /// Waits up to [`Hooks::wait`] for the run's finish.
    async fn finish(&self, run_id: &str) -> Option<WorkerEntry> {
        let attach = self
            .client
            .get(format!(
                "{}/restate/workflow/{RUN_SERVICE}/{run_id}/attach",
                self.ingress
            ))
            .timeout(self.wait)
            .send()
            .await;
        let answer: Option<WorkerProgress> = match attach {
            Ok(resp) if resp.status().is_success() => resp.json().await.ok(),
            _ => return None,
        };
        // A short run's answer holds every entry, its finish last.
        if let Some(last) = answer.and_then(|a| a.entries.into_iter().last())
            && matches!(last, WorkerEntry::Finished { .. })
        {
            return Some(last);
        }
        let (status, body) = self
            .post(&format!("{RUN_SERVICE}/{run_id}/finish"), &Value::Null)
            .await
            .ok()?;
        if !status.is_success() {
            return None;
        }
        serde_json::from_str::<Option<WorkerEntry>>(&body)
            .ok()
            .flatten()
    }
}

/// Workflow ids are slugs; anything else is no webhook (and never reaches
/// a Restate URL).
fn slug(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[allow(clippy::too_many_arguments)]
async fn call(
    State(h): State<Arc<Hooks>>,
    Path((workflow, path)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = path.trim_matches('/').to_string();
    let no_hook = || {
        ApiError::not_found(format!(
            "no deployed webhook for {method} /hook/{workflow}/{path}"
        ))
    };
    if !slug(&workflow) {
        return Err(no_hook());
    }
    let Ok(_call) = h.calls.try_acquire() else {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("the worker is handling {MAX_CALLS} webhook calls: try again later"),
        ));
    };
    let plan = h.plan(&workflow).await?.ok_or_else(no_hook)?;
    let (trigger, config) = hook::find_trigger(&plan, &method, &path).ok_or_else(no_hook)?;
    hook::verify(config, &method, &uri, &headers, &body, &h.replays)?;
    let message = hook::message(config, &method, &path, &query, &headers, &body)?;
    let fire = serde_json::to_value(Fire {
        trigger: trigger.to_string(),
        input: message,
    })
    .map_err(ApiError::internal)?;
    let (status, answer) = h
        .post(&format!("{DEPLOY_SERVICE}/{workflow}/fire"), &fire)
        .await?;
    if status == StatusCode::NOT_FOUND {
        // Undeployed since it was read.
        return Err(no_hook());
    }
    if !status.is_success() {
        return Err(h.unavailable(format!("HTTP {status}: {answer}")));
    }
    let run_id: String = serde_json::from_str(&answer).map_err(|e| h.unavailable(e))?;
    if config.respond == Respond::Immediately {
        return Ok(hook::accepted(&run_id));
    }
    match h.finish(&run_id).await {
        Some(WorkerEntry::Finished {
            status,
            output,
            respond,
            ..
        }) => Ok(hook::answer(
            &run_id,
            status,
            output,
            respond.map(std::sync::Arc::new),
        )),
        // Still running (or its finish could not be read): follow it by id.
        _ => Ok(hook::accepted(&run_id)),
    }
}
