//! One live document session over a QUIC stream, the same on both ends:
//! frames from the other side are merged (persisted before they are
//! acknowledged), this engine's changes to the workflow are sent on, and a
//! side that falls behind the engine's document events is resynced from
//! version vectors instead of buffered.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_runtime::Engine;
use sluice_runtime::executor::DocEvent;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::Waiting;
use crate::wire::{Frame, MAX_FRAME, WireError, read_frame, write_frame};

/// Longest one frame may take to send before the other side counts as stuck.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Frames read ahead of the session loop (the reader waits beyond this, and
/// QUIC flow control holds the sender back).
const READ_AHEAD: usize = 16;

/// What a session may do and how it names the other side.
pub(crate) struct Pump<'a> {
    pub engine: &'a Engine,
    /// The workflow's id on this machine.
    pub workflow: &'a str,
    /// This session's origin: its own updates are not sent back to it.
    pub origin: u64,
    /// The other side, as the versions its edits make name it.
    pub label: String,
    /// Whether the other side's updates are merged (a viewer's are not).
    pub accept_updates: bool,
    /// Whether this side's updates are sent (a viewer sends none).
    pub send_updates: bool,
    /// Ask for acknowledgements of what this side sends (and count them).
    pub waiting: Option<&'a Waiting>,
    /// The version vector the other side is known to have: a resync sends
    /// what it lacks from there.
    pub resync_from: Vec<u8>,
    /// On the sharer: the peer whose grant is checked before each update
    /// is merged (a revocation takes effect at the next update even before
    /// the connection closes).
    pub grant_of: Option<&'a str>,
    /// On the joiner: the link is checked before each update is merged (a
    /// copy deleted here is not brought back by the sharer's next edit).
    pub linked: bool,
}

/// Why a session ended.
#[derive(Debug)]
pub(crate) enum End {
    /// The other side went away, or its stream failed.
    Gone(String),
    /// The other side broke the protocol.
    Protocol(String),
    /// This side could not send in time.
    Stuck,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Gone(e) => write!(f, "disconnected: {e}"),
            End::Protocol(e) => write!(f, "protocol error: {e}"),
            End::Stuck => write!(f, "the other side stopped reading"),
        }
    }
}

/// Reads frames on a task of its own (reading is not cancel-safe inside a
/// `select!`), at most [`READ_AHEAD`] ahead.
pub(crate) fn spawn_reader<R>(
    mut recv: R,
) -> (
    mpsc::Receiver<Result<Frame, WireError>>,
    tokio::task::JoinHandle<()>,
)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let task = tokio::spawn(async move {
        loop {
            let frame = read_frame(&mut recv, MAX_FRAME).await;
            let stop = frame.is_err();
            if tx.send(frame).await.is_err() || stop {
                break;
            }
        }
    });
    (rx, task)
}

pub(crate) async fn send<W: AsyncWrite + Unpin>(w: &mut W, f: &Frame) -> Result<(), End> {
    match tokio::time::timeout(SEND_TIMEOUT, write_frame(w, f)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(End::Gone(e.to_string())),
        Err(_) => Err(End::Stuck),
    }
}

impl Pump<'_> {
    /// Runs the session until either side ends it. `docs` was subscribed
    /// before the opening exchange, so nothing in between is missed.
    pub(crate) async fn run<W: AsyncWrite + Unpin>(
        &self,
        send_half: &mut W,
        frames: &mut mpsc::Receiver<Result<Frame, WireError>>,
        mut docs: tokio::sync::broadcast::Receiver<DocEvent>,
        presence_keys: &mut Vec<String>,
    ) -> End {
        let mut seq = 0u64;
        loop {
            let step = tokio::select! {
                frame = frames.recv() => match frame {
                    None => Err(End::Gone("the stream ended".into())),
                    Some(Err(WireError::Closed)) => Err(End::Gone("the stream ended".into())),
                    Some(Err(e @ (WireError::TooLong { .. } | WireError::Malformed(_)))) => Err(End::Protocol(e.to_string())),
                    Some(Err(e)) => Err(End::Gone(e.to_string())),
                    Some(Ok(f)) => self.handle(f, send_half, presence_keys).await,
                },
                event = docs.recv() => match event {
                    Ok(event) => self.relay(event, send_half, &mut seq).await,
                    Err(RecvError::Lagged(_)) => self.resync(send_half, &mut seq).await,
                    Err(RecvError::Closed) => Err(End::Gone("the engine stopped".into())),
                },
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    fn next_seq(&self, seq: &mut u64) -> u64 {
        match self.waiting {
            Some(w) => {
                *seq += 1;
                w.fetch_add(1, Ordering::Relaxed);
                *seq
            }
            None => 0,
        }
    }

    async fn relay<W: AsyncWrite + Unpin>(
        &self,
        event: DocEvent,
        w: &mut W,
        seq: &mut u64,
    ) -> Result<(), End> {
        if event.origin() == self.origin || event.workflow() != self.workflow {
            return Ok(());
        }
        match event {
            DocEvent::Update { bytes, .. } => {
                if !self.send_updates {
                    return Ok(());
                }
                let seq = self.next_seq(seq);
                send(
                    w,
                    &Frame::Update {
                        seq,
                        bytes: bytes.to_vec(),
                    },
                )
                .await
            }
            DocEvent::Presence { bytes, .. } => {
                send(
                    w,
                    &Frame::Presence {
                        bytes: bytes.to_vec(),
                    },
                )
                .await
            }
        }
    }

    /// After missing document events: everything the other side may lack.
    async fn resync<W: AsyncWrite + Unpin>(&self, w: &mut W, seq: &mut u64) -> Result<(), End> {
        if !self.send_updates {
            return Ok(());
        }
        let (bytes, _) = self
            .engine
            .doc_updates(self.workflow, &self.resync_from)
            .await
            .map_err(|e| End::Gone(format!("reading the document: {e}")))?;
        let seq = self.next_seq(seq);
        send(w, &Frame::Update { seq, bytes }).await
    }

    async fn handle<W: AsyncWrite + Unpin>(
        &self,
        frame: Frame,
        w: &mut W,
        presence_keys: &mut Vec<String>,
    ) -> Result<(), End> {
        match frame {
            Frame::Update { seq, bytes } => {
                if !self.accept_updates {
                    return send(
                        w,
                        &Frame::Rejected {
                            seq,
                            reason: "viewers cannot edit this workflow".into(),
                        },
                    )
                    .await;
                }
                if let Some(peer) = self.grant_of {
                    let role = self
                        .engine
                        .store()
                        .peer_role(self.workflow, peer)
                        .await
                        .map_err(|e| End::Gone(format!("reading grants: {e}")))?;
                    if role.as_deref() != Some("editor") {
                        return Err(End::Protocol("no longer allowed to edit".into()));
                    }
                }
                if self.linked
                    && !self
                        .engine
                        .store()
                        .has_link(self.workflow)
                        .await
                        .map_err(|e| End::Gone(format!("reading links: {e}")))?
                {
                    return Err(End::Gone("the workflow was deleted here".into()));
                }
                let answer = match self
                    .engine
                    .import_peer_update(self.workflow, &bytes, self.origin, &self.label)
                    .await
                {
                    Ok(_) => Frame::Ack { seq },
                    Err(e) => Frame::Rejected {
                        seq,
                        reason: e.to_string(),
                    },
                };
                if seq == 0 && matches!(answer, Frame::Ack { .. }) {
                    return Ok(());
                }
                send(w, &answer).await
            }
            Frame::Ack { .. } | Frame::Rejected { .. } => {
                if let Some(w) = self.waiting {
                    // Never below zero, whatever the other side claims.
                    let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        Some(n.saturating_sub(1))
                    });
                }
                Ok(())
            }
            Frame::Presence { bytes } => {
                // Bad presence is dropped; it changes nothing.
                if let Ok(keys) = self
                    .engine
                    .presence_update(self.workflow, &bytes, self.origin)
                {
                    for k in keys {
                        if !presence_keys.contains(&k) && presence_keys.len() < 64 {
                            presence_keys.push(k);
                        }
                    }
                }
                Ok(())
            }
            Frame::Hello { .. } | Frame::Welcome { .. } | Frame::Refused { .. } => Err(
                End::Protocol("an opening frame in the middle of a session".into()),
            ),
        }
    }
}
