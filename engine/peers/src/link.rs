//! The joiner's side: one task per joined workflow that connects to the
//! sharer, exchanges what each side lacks (version vectors), streams edits
//! both ways, and reconnects with backoff after either side restarts. A
//! refusal (revoked, removed) ends it for good.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_runtime::executor::DocEvent;
use tokio::sync::broadcast::error::RecvError;

use sluice_api::LinkState;
use sluice_store::LinkRow;

use crate::pump::{Pump, send, spawn_reader};
use crate::wire::{Frame, MAX_FRAME, read_frame};
use crate::{Shared, Ticket, Waiting, clean_name, peer_label};

/// How long connecting and the opening exchange may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where a link stands, for the API.
pub(crate) struct Status {
    state: Mutex<(LinkState, Option<String>)>,
    pub(crate) waiting: Waiting,
}

impl Status {
    pub(crate) fn new() -> Status {
        Status {
            state: Mutex::new((LinkState::Reconnecting, None)),
            waiting: Waiting::new(0),
        }
    }

    pub(crate) fn get(&self) -> (LinkState, Option<String>) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, state: LinkState, error: Option<String>) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (state, error);
    }
}

/// How one connection attempt ended.
enum Outcome {
    /// The sharer said no: stop.
    Refused(String),
    /// Connected, then lost (or never connected): try again.
    Lost { error: String, was_live: bool },
}

/// Runs a link until it is refused or aborted. `first` hears how the first
/// attempt went (the role granted, or why not), for `join`.
pub(crate) async fn run(
    shared: Arc<Shared>,
    row: LinkRow,
    status: Arc<Status>,
    mut first: Option<tokio::sync::oneshot::Sender<Result<String, String>>>,
) {
    let ticket = match Ticket::decode(&row.ticket) {
        Ok(t) => t,
        Err(e) => {
            status.set(LinkState::Refused, Some(e.to_string()));
            if let Some(f) = first.take() {
                f.send(Err(e.to_string())).ok();
            }
            return;
        }
    };
    let mut backoff = FIRST_BACKOFF;
    // Edits made here while not connected wait, and are counted for the
    // editor ("offline, 3 edits waiting").
    let counter = {
        let (mut events, status, id) = (
            shared.engine.doc_events(),
            status.clone(),
            row.workflow_id.clone(),
        );
        AbortOnDrop(tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(DocEvent::Update { workflow, .. })
                        if *workflow == *id && status.get().0 != LinkState::Connected =>
                    {
                        status.waiting.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
            }
        }))
    };
    let _counter = counter;
    loop {
        match attempt(&shared, &row, &ticket, &status, &mut first).await {
            Outcome::Refused(reason) => {
                status.set(LinkState::Refused, Some(reason.clone()));
                if let Some(f) = first.take() {
                    f.send(Err(reason)).ok();
                }
                return;
            }
            Outcome::Lost { error, was_live } => {
                status.set(LinkState::Reconnecting, Some(error.clone()));
                // A first join that cannot connect is an answer, not a retry.
                if let Some(f) = first.take() {
                    f.send(Err(error)).ok();
                    return;
                }
                if was_live {
                    backoff = FIRST_BACKOFF;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

async fn attempt(
    shared: &Shared,
    row: &LinkRow,
    ticket: &Ticket,
    status: &Status,
    first: &mut Option<tokio::sync::oneshot::Sender<Result<String, String>>>,
) -> Outcome {
    let lost = |error: String| Outcome::Lost {
        error,
        was_live: false,
    };
    let engine = &shared.engine;
    let conn = match tokio::time::timeout(
        CONNECT_TIMEOUT,
        shared
            .endpoint
            .connect(ticket.addr.clone(), crate::wire::ALPN),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return lost(format!("cannot connect to {}: {e}", row.host_name)),
        Err(_) => return lost(format!("{} did not answer", row.host_name)),
    };
    let (mut tx, rx) = match conn.open_bi().await {
        Ok(s) => s,
        Err(e) => return lost(e.to_string()),
    };
    let mut rx = rx;
    // What this side has (nothing, the first time).
    let version = if engine
        .store()
        .get_workflow(&row.workflow_id)
        .await
        .ok()
        .flatten()
        .is_some()
    {
        engine
            .doc_version(&row.workflow_id)
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let hello = Frame::Hello {
        workflow: row.remote_workflow.clone(),
        share: ticket.share.clone(),
        secret: ticket.secret.to_vec(),
        name: shared.name.clone(),
        version,
    };
    if let Err(e) = send(&mut tx, &hello).await {
        return lost(e.to_string());
    }
    let answer = match tokio::time::timeout(CONNECT_TIMEOUT, read_frame(&mut rx, MAX_FRAME)).await {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => return lost(format!("{}: {e}", row.host_name)),
        Err(_) => return lost(format!("{} did not answer", row.host_name)),
    };
    let (role, host_name, update, host_version, presence) = match answer {
        Frame::Welcome {
            role,
            name,
            update,
            version,
            presence,
        } => (role, clean_name(&name), update, version, presence),
        Frame::Refused { reason } => return Outcome::Refused(reason),
        _ => return lost("the sharer broke the protocol".into()),
    };
    // Subscribed before merging: local edits from here on are sent.
    let docs = engine.doc_events();
    let origin = engine.new_origin();
    let label = peer_label(&host_name, &row.host);
    if let Err(e) = engine
        .import_peer_update(&row.workflow_id, &update, origin, &label)
        .await
    {
        return Outcome::Refused(format!("the shared document cannot be merged here: {e}"));
    }
    // The joined workflow's JSON exists before `join` answers.
    if let Err(e) = engine.materialize(&row.workflow_id).await {
        return Outcome::Refused(format!("the shared workflow cannot be stored here: {e}"));
    }
    let mut keys = Vec::new();
    if !presence.is_empty()
        && let Ok(k) = engine.presence_update(&row.workflow_id, &presence, origin)
    {
        keys = k;
    }
    let editor = role == "editor";
    // What the sharer lacks: edits made here while apart.
    // The edits counted while offline travel as this one catch-up.
    status.waiting.store(0, Ordering::Relaxed);
    if editor {
        match engine.doc_updates(&row.workflow_id, &host_version).await {
            Ok((bytes, _)) if !bytes.is_empty() => {
                status.waiting.store(1, Ordering::Relaxed);
                if let Err(e) = send(
                    &mut tx,
                    &Frame::Update {
                        seq: u64::MAX,
                        bytes,
                    },
                )
                .await
                {
                    return lost(e.to_string());
                }
            }
            _ => {}
        }
    }
    // Presence of this machine's windows, for the sharer.
    let mine = engine.presence_state(&row.workflow_id);
    if !mine.is_empty() {
        send(&mut tx, &Frame::Presence { bytes: mine }).await.ok();
    }
    status.set(LinkState::Connected, None);
    if let Some(f) = first.take() {
        f.send(Ok(role.clone())).ok();
    }
    let (mut frames, reader) = spawn_reader(rx);
    let pump = Pump {
        engine,
        workflow: &row.workflow_id,
        origin,
        label,
        // The sharer is trusted to relay; what it sends is a draft here too.
        accept_updates: true,
        send_updates: editor,
        waiting: Some(&status.waiting),
        resync_from: host_version,
        grant_of: None,
        linked: true,
    };
    let end = pump.run(&mut tx, &mut frames, docs, &mut keys).await;
    reader.abort();
    engine.presence_leave(&row.workflow_id, &keys, origin);
    // The sharer closes with a reason when it revokes: that is a refusal.
    let reason = conn.close_reason().map(|r| r.to_string());
    conn.close(0u32.into(), b"bye");
    match (end, reason) {
        (_, Some(r)) if r.contains("revoked") || r.contains("removed") => Outcome::Refused(r),
        (e, _) => Outcome::Lost {
            error: e.to_string(),
            was_live: true,
        },
    }
}

/// Aborts a task when dropped (the link's helpers end with it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Status").finish_non_exhaustive()
    }
}
