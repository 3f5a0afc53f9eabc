//! `GET /api/v1/ws`: live run events and document sync over one WebSocket.
//!
//! Run events are JSON objects (`run_started`, `step_finished`…), filtered
//! per workflow (`?workflow=ID`) or per run (`?run=ID`); `?events=none`
//! turns them off for a client that only edits.
//!
//! Document sync (DESIGN §6) is opt-in per workflow, as JSON text frames
//! with binary payloads in base64 (the types are `sluice_api::ws`; see docs/api.md):
//! - client `{"type":"doc.subscribe","workflow","version"?}` (its Loro
//!   version vector) → server `{"type":"doc.sync","workflow","update",
//!   "version","presence"}`: everything the client lacks, the server's
//!   version vector (the client answers with a `doc.update` of what the
//!   server lacks), and everyone's presence;
//! - client `{"type":"doc.update","workflow","update","ref"?}` → merged,
//!   persisted, relayed to every other subscriber as `doc.update`, and
//!   acknowledged with `{"type":"doc.ack","workflow","ref"}` once durable;
//! - `{"type":"presence","workflow","update"}` both ways (Loro ephemeral
//!   store updates; a client's entries are cleared when it leaves);
//! - `{"type":"doc.unsubscribe","workflow"}`.
//!
//! Bad messages get `{"type":"error","message","ref"}` and change nothing.
//! A client that cannot keep up with run events is dropped (close code
//! 1008); one that falls behind on documents gets a full `doc.sync` again.
//! The engine never waits for a client.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::Value;
use sluice_api::ws::{ClientMessage, ServerMessage};
use sluice_runtime::Engine;
use sluice_runtime::events::LiveEvent;
use sluice_runtime::executor::DocEvent;
use tokio::sync::broadcast::error::RecvError;

use crate::AppState;

/// Longest a single send may take before the client counts as stuck.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Close code "policy violation": used for clients that fall behind.
const TOO_SLOW: u16 = 1008;
/// Most workflows one connection may follow.
const MAX_SUBSCRIPTIONS: usize = 256;

#[derive(Debug, Deserialize, Default)]
pub(crate) struct Filter {
    workflow: Option<String>,
    run: Option<String>,
    /// `none`: no run events on this socket.
    events: Option<String>,
}

impl Filter {
    fn wants(&self, e: &LiveEvent) -> bool {
        self.events.as_deref() != Some("none")
            && self.workflow.as_deref().is_none_or(|w| *e.workflow == *w)
            && self.run.as_deref().is_none_or(|r| *e.run == *r)
    }
}

#[utoipa::path(get, path = "/api/v1/ws", tag = "runs",
    params(("workflow" = Option<String>, Query, description = "Only this workflow's run events"),
        ("run" = Option<String>, Query, description = "Only this run's events"),
        ("events" = Option<String>, Query, description = "`none`: no run events (document sync only)")),
    responses((status = 101, description = "WebSocket of JSON live events (run_started, step_started, step_finished, step_skipped, log, run_finished) \
        and document sync (doc.subscribe, doc.sync, doc.update, doc.ack, presence; see docs/api.md)")))]
pub(crate) async fn ws(
    State(s): State<AppState>,
    Query(filter): Query<Filter>,
    upgrade: WebSocketUpgrade,
) -> Response {
    // Subscribe before the upgrade completes: nothing after this request is missed.
    let rx = s.engine.subscribe();
    let docs = s.engine.doc_events();
    let engine = s.engine.clone();
    // The editor offers `sluice` (and its session as a second subprotocol,
    // checked by the token middleware); a browser closes a socket whose
    // server picks none of what it offered.
    upgrade.protocols(["sluice"]).on_upgrade(move |socket| {
        let id = engine.new_origin();
        let client = Client {
            engine,
            id,
            socket,
            subscribed: HashMap::new(),
        };
        client.pump(rx, docs, filter)
    })
}

struct Client {
    engine: Engine,
    id: u64,
    socket: WebSocket,
    /// Followed workflows → the presence keys this client set there.
    subscribed: HashMap<String, Vec<String>>,
}

/// What the loop does after handling something.
enum Next {
    Go,
    Stop,
}

impl Client {
    async fn pump(
        mut self,
        mut rx: tokio::sync::broadcast::Receiver<LiveEvent>,
        mut docs: tokio::sync::broadcast::Receiver<DocEvent>,
        filter: Filter,
    ) {
        loop {
            let next = tokio::select! {
                event = rx.recv() => match event {
                    Ok(event) if filter.wants(&event) => match serde_json::to_string(&event) {
                        Ok(text) => self.send(text).await,
                        Err(_) => Next::Go,
                    },
                    Ok(_) => Next::Go,
                    Err(RecvError::Lagged(missed)) => {
                        let frame = CloseFrame { code: TOO_SLOW, reason: format!("too slow: {missed} events missed").into() };
                        // The client may already be unreachable; closing is best effort.
                        tokio::time::timeout(SEND_TIMEOUT, self.socket.send(Message::Close(Some(frame)))).await.ok();
                        Next::Stop
                    }
                    Err(RecvError::Closed) => Next::Stop,
                },
                event = docs.recv() => match event {
                    Ok(event) => self.relay(event).await,
                    Err(RecvError::Lagged(_)) => self.resync_all().await,
                    Err(RecvError::Closed) => Next::Stop,
                },
                incoming = self.socket.recv() => match incoming {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => Next::Stop,
                    Some(Ok(Message::Text(text))) => self.handle(text.as_str()).await,
                    Some(Ok(_)) => Next::Go,
                },
            };
            if let Next::Stop = next {
                break;
            }
        }
        for (workflow, keys) in std::mem::take(&mut self.subscribed) {
            self.engine.presence_leave(&workflow, &keys, self.id);
        }
    }

    async fn send(&mut self, text: String) -> Next {
        match tokio::time::timeout(SEND_TIMEOUT, self.socket.send(Message::Text(text.into()))).await
        {
            Ok(Ok(())) => Next::Go,
            // Gone, or stuck: either way this client is done.
            _ => Next::Stop,
        }
    }

    async fn send_message(&mut self, m: ServerMessage) -> Next {
        match serde_json::to_string(&m) {
            Ok(text) => self.send(text).await,
            Err(_) => Next::Go,
        }
    }

    /// A document change from the engine: sent on unless it is for a
    /// workflow this client does not follow or came from this client.
    async fn relay(&mut self, event: DocEvent) -> Next {
        if event.origin() == self.id || !self.subscribed.contains_key(event.workflow()) {
            return Next::Go;
        }
        let msg = match &event {
            DocEvent::Update {
                workflow, bytes, ..
            } => ServerMessage::Update {
                workflow: workflow.to_string(),
                update: B64.encode(bytes),
            },
            DocEvent::Presence {
                workflow, bytes, ..
            } => ServerMessage::Presence {
                workflow: workflow.to_string(),
                update: B64.encode(bytes),
            },
        };
        self.send_message(msg).await
    }

    /// After missing document events: everything again (imports dedupe).
    async fn resync_all(&mut self) -> Next {
        let ids: Vec<String> = self.subscribed.keys().cloned().collect();
        for id in ids {
            if let Next::Stop = self.sync(&id, &[]).await {
                return Next::Stop;
            }
        }
        Next::Go
    }

    async fn sync(&mut self, workflow: &str, since: &[u8]) -> Next {
        match self.engine.doc_updates(workflow, since).await {
            Ok((update, version)) => {
                let presence = self.engine.presence_state(workflow);
                self.send_message(ServerMessage::Sync {
                    workflow: workflow.to_string(),
                    update: B64.encode(update),
                    version: B64.encode(version),
                    presence: B64.encode(presence),
                })
                .await
            }
            Err(e) => {
                self.send_message(ServerMessage::Error {
                    workflow: Some(workflow.to_string()),
                    message: e.to_string(),
                    reference: None,
                })
                .await
            }
        }
    }

    async fn handle(&mut self, text: &str) -> Next {
        let (msg, reference) = match decode(text) {
            Ok(m) => m,
            Err(Refused { reference, message }) => return self.error(reference, message).await,
        };
        match msg {
            Incoming::Subscribe { workflow, since } => {
                if !self.subscribed.contains_key(&workflow)
                    && self.subscribed.len() >= MAX_SUBSCRIPTIONS
                {
                    return self
                        .error(
                            reference,
                            format!("at most {MAX_SUBSCRIPTIONS} workflows per connection"),
                        )
                        .await;
                }
                self.subscribed.entry(workflow.clone()).or_default();
                self.sync(&workflow, &since).await
            }
            Incoming::Unsubscribe { workflow } => {
                if let Some(keys) = self.subscribed.remove(&workflow) {
                    self.engine.presence_leave(&workflow, &keys, self.id);
                }
                Next::Go
            }
            Incoming::Update { workflow, update } => {
                match self
                    .engine
                    .import_doc_update_from(&workflow, &update, self.id)
                    .await
                {
                    Ok(_) => {
                        self.send_message(ServerMessage::Ack {
                            workflow,
                            reference,
                        })
                        .await
                    }
                    Err(e) => {
                        self.error(reference, format!("workflow `{workflow}`: {e}"))
                            .await
                    }
                }
            }
            Incoming::Presence { workflow, update } => {
                if !self.subscribed.contains_key(&workflow) {
                    return self
                        .error(
                            reference,
                            format!("subscribe to `{workflow}` before sending presence"),
                        )
                        .await;
                }
                match self.engine.presence_update(&workflow, &update, self.id) {
                    Ok(keys) => {
                        let mine = self.subscribed.entry(workflow).or_default();
                        for k in keys {
                            if !mine.contains(&k) {
                                mine.push(k);
                            }
                        }
                        Next::Go
                    }
                    Err(e) => self.error(reference, e.to_string()).await,
                }
            }
        }
    }

    async fn error(&mut self, reference: Option<Value>, message: String) -> Next {
        self.send_message(ServerMessage::Error {
            workflow: None,
            message,
            reference,
        })
        .await
    }
}

/// A client's text frame, decoded: what it asks, with its base64 payload
/// as bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// Follow `workflow`; `since` is the client's version vector (empty: it has nothing).
    Subscribe {
        workflow: String,
        since: Vec<u8>,
    },
    Unsubscribe {
        workflow: String,
    },
    /// A Loro update to merge into `workflow`'s document.
    Update {
        workflow: String,
        update: Vec<u8>,
    },
    /// A Loro ephemeral-store update: the client's presence.
    Presence {
        workflow: String,
        update: Vec<u8>,
    },
}

/// A frame that says nothing the server can act on: the error to send
/// back, with the frame's `ref` when it had one (even when the rest is bad).
#[derive(Debug, PartialEq)]
pub struct Refused {
    pub reference: Option<Value>,
    pub message: String,
}

/// Decode one text frame from a client (untrusted: any page that got the
/// token, or a buggy editor). Never panics; the payloads are only decoded
/// here, not applied.
pub fn decode(text: &str) -> Result<(Incoming, Option<Value>), Refused> {
    let value: Value = serde_json::from_str(text).map_err(|e| Refused {
        reference: None,
        message: format!("not JSON: {e}"),
    })?;
    let reference = value.get("ref").cloned();
    let refuse = |message: String| Refused {
        reference: reference.clone(),
        message,
    };
    let msg: ClientMessage =
        serde_json::from_value(value).map_err(|e| refuse(format!("bad message: {e}")))?;
    let payload = |field: &str, text: Option<&str>| -> Result<Vec<u8>, Refused> {
        match text {
            None | Some("") => Ok(Vec::new()),
            Some(s) => B64
                .decode(s)
                .map_err(|e| refuse(format!("`{field}` is not base64: {e}"))),
        }
    };
    let msg = match msg {
        ClientMessage::Subscribe {
            workflow, version, ..
        } => Incoming::Subscribe {
            since: payload("version", version.as_deref())?,
            workflow,
        },
        ClientMessage::Unsubscribe { workflow, .. } => Incoming::Unsubscribe { workflow },
        ClientMessage::Update {
            workflow, update, ..
        } => Incoming::Update {
            update: payload("update", Some(&update))?,
            workflow,
        },
        ClientMessage::Presence {
            workflow, update, ..
        } => Incoming::Presence {
            update: payload("update", Some(&update))?,
            workflow,
        },
    };
    Ok((msg, reference))
}
