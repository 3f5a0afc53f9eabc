//! `GET /api/v1/ws`: live events over a WebSocket, filtered per workflow
//! (`?workflow=ID`) or per run (`?run=ID`). A client that cannot keep up is
//! dropped (close code 1008), the engine never waits for it.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use serde::Deserialize;
use sluice_runtime::events::LiveEvent;
use tokio::sync::broadcast::error::RecvError;

use crate::AppState;

/// Longest a single send may take before the client counts as stuck.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Close code "policy violation": used for clients that fall behind.
const TOO_SLOW: u16 = 1008;

#[derive(Debug, Deserialize, Default)]
pub(crate) struct Filter {
    workflow: Option<String>,
    run: Option<String>,
}

impl Filter {
    fn wants(&self, e: &LiveEvent) -> bool {
        self.workflow.as_deref().is_none_or(|w| *e.workflow == *w)
            && self.run.as_deref().is_none_or(|r| *e.run == *r)
    }
}

#[utoipa::path(get, path = "/api/v1/ws", tag = "runs",
    params(("workflow" = Option<String>, Query, description = "Only this workflow's events"),
        ("run" = Option<String>, Query, description = "Only this run's events")),
    responses((status = 101, description = "WebSocket of JSON live events (run_started, step_started, step_finished, step_skipped, log, run_finished)")))]
pub(crate) async fn ws(
    State(s): State<AppState>,
    Query(filter): Query<Filter>,
    upgrade: WebSocketUpgrade,
) -> Response {
    // Subscribe before the upgrade completes: nothing after this request is missed.
    let rx = s.engine.subscribe();
    upgrade.on_upgrade(move |socket| pump(socket, rx, filter))
}

async fn pump(
    mut socket: WebSocket,
    mut rx: tokio::sync::broadcast::Receiver<LiveEvent>,
    filter: Filter,
) {
    loop {
        tokio::select! {
            event = rx.recv() => match event {
                Ok(event) => {
                    if !filter.wants(&event) {
                        continue;
                    }
                    let Ok(text) = serde_json::to_string(&event) else { continue };
                    match tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(text.into()))).await {
                        Ok(Ok(())) => {}
                        // Gone, or stuck: either way this client is done.
                        _ => return,
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    let frame = CloseFrame { code: TOO_SLOW, reason: format!("too slow: {missed} events missed").into() };
                    // The client may already be unreachable; closing is best effort.
                    tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(Some(frame)))).await.ok();
                    return;
                }
                Err(RecvError::Closed) => return,
            },
            incoming = socket.recv() => match incoming {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}
