//! Sluice's shared worker: `sluice worker` serves a Restate service endpoint
//! (restate-sdk) with two services, [`run::SluiceRun`] (a Restate workflow
//! per handed-off run, driving the same pure state machine as the local
//! executor, Restate keeping the journal) and [`step::SluiceStep`] (one
//! durable invocation per step attempt with I/O), and [`deploy::SluiceDeploy`]
//! (a virtual object per deployed workflow: its schedules as durable
//! timers, the runs of its webhooks, which [`hooks`] serves on a port of
//! its own, and the log of the runs it started). Nodes run on an engine
//! over the worker's own data dir (vault, blobs, settings); the worker keeps
//! no run state of its own, so killing it at any point loses nothing.

pub mod deploy;
pub mod hooks;
pub mod run;
pub mod step;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use restate_sdk::prelude::*;
use restate_sdk::service::IntoServiceDefinition;
use sluice_runtime::Engine;
use tokio::sync::oneshot;

/// How `sluice worker` serves.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Where the service endpoint listens.
    pub listen: SocketAddr,
    /// The base URL Restate reaches this worker at (default `http://<listen>`).
    pub advertise: Option<String>,
    /// The Restate admin API to register with (`http://HOST:9070`).
    pub restate_admin: Option<String>,
    /// Where deployed workflows' webhooks are served (None: not served).
    pub hooks: Option<SocketAddr>,
    /// The Restate ingress the hook port starts runs through.
    pub restate_ingress: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve deployed webhooks on {addr}: {source}")]
    Hooks {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot register with the Restate admin API at {admin}: {message}")]
    Register { admin: String, message: String },
}

/// A running worker endpoint.
pub struct Worker {
    pub addr: SocketAddr,
    /// The deployment URI Restate invokes (one per build: `<base>/sluice/<build>`).
    pub uri: String,
    /// Where deployed webhooks are served, when they are.
    pub hooks: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    hooks_task: Option<tokio::task::JoinHandle<()>>,
}

impl Worker {
    /// Stops serving (in-flight invocations are retried by Restate).
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            s.send(()).ok();
        }
        if let Some(t) = self.hooks_task.take() {
            t.abort();
        }
        // A task that panicked has stopped serving all the same.
        (&mut self.task).await.ok();
    }
}

/// An id of this build: a new Restate deployment per build, so invocations
/// in flight stay on the code they started with.
pub fn build_id() -> String {
    let exe = std::env::current_exe().and_then(std::fs::read);
    match exe {
        Ok(bytes) => blake3::hash(&bytes).to_hex()[..12].to_string(),
        Err(_) => env!("CARGO_PKG_VERSION").replace('.', "-"),
    }
}

/// Serves the worker's services with `engine` running the steps, and
/// registers the deployment when an admin API is given.
pub async fn start(engine: Engine, options: WorkerOptions) -> Result<Worker, Error> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Listen {
        addr: options.listen,
        source,
    })?;
    let base = options
        .advertise
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));
    let uri = format!(
        "{}/sluice/{}-{}",
        base.trim_end_matches('/'),
        env!("CARGO_PKG_VERSION"),
        build_id()
    );
    let runs = run::SluiceRun {
        engine: engine.clone(),
    }
    .into_service_definition();
    // A node may take long (the step's own timeout bounds it): Restate must
    // not abort a live step for want of journal traffic.
    let steps = step::SluiceStep {
        engine,
        plans: Mutex::new(HashMap::new()),
    }
    .into_service_definition()
    .options(
        ServiceOptions::new()
            .inactivity_timeout(Duration::from_secs(3600))
            .abort_timeout(Duration::from_secs(3600))
            .ingress_private(true),
    );
    let deploys = deploy::SluiceDeploy.into_service_definition();
    let endpoint = Endpoint::builder()
        .bind(runs)
        .bind(steps)
        .bind(deploys)
        .build();
    let (hooks, hooks_task) = match options.hooks {
        None => (None, None),
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|source| Error::Hooks { addr: at, source })?;
            let addr = listener
                .local_addr()
                .map_err(|source| Error::Hooks { addr: at, source })?;
            let router = Arc::new(hooks::Hooks::new(&options.restate_ingress)).router();
            let task = tokio::spawn(async move {
                axum::serve(listener, router).await.ok();
            });
            (Some(addr), Some(task))
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        HttpServer::new(endpoint)
            .serve_with_cancel(listener, async move {
                stopped.await.ok();
            })
            .await;
    });
    let worker = Worker {
        addr,
        uri,
        hooks,
        stop: Some(stop),
        task,
        hooks_task,
    };
    if let Some(admin) = &options.restate_admin {
        register(admin, &worker.uri).await?;
    }
    Ok(worker)
}

/// Registers `uri` as a deployment with the Restate admin API.
pub async fn register(admin: &str, uri: &str) -> Result<(), Error> {
    let admin = admin.trim_end_matches('/');
    let err = |message: String| Error::Register {
        admin: admin.to_string(),
        message,
    };
    sluice_nodes::http::install_crypto_provider();
    let resp = reqwest::Client::new()
        .post(format!("{admin}/deployments"))
        .json(&serde_json::json!({ "uri": uri }))
        .send()
        .await
        .map_err(|e| err(format!("{e} (is restate-server running there?)")))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let body = resp.text().await.unwrap_or_default();
    Err(err(format!("HTTP {status}: {body}")))
}
