//! The sharer's side of `sluice/doc/1`: a peer opens one stream, says
//! hello (which workflow, the share's secret, its name, its version), is
//! let in by its grant or by redeeming the share, gets what it lacks, and
//! from then on edits flow both ways through this engine, which relays
//! them to its editor windows and its other peers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use iroh::endpoint::Connection;
use iroh::protocol::{AcceptError, ProtocolHandler};
use sluice_store::Redeem;

use crate::pump::{End, Pump, send, spawn_reader};
use crate::wire::{Frame, MAX_HELLO, read_frame};
use crate::{Session, Shared, clean_name, now_us, peer_label};

/// How long a peer has to open its stream and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

#[derive(Clone)]
pub(crate) struct Hub {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hub")
    }
}

impl Hub {
    pub(crate) fn new(shared: Arc<Shared>) -> Hub {
        Hub { shared }
    }
}

impl ProtocolHandler for Hub {
    async fn accept(&self, conn: Connection) -> Result<(), AcceptError> {
        // Bounded: connections that have not said hello yet, and peers let
        // in, each have their own limit, so strangers holding connections
        // open cannot keep the peers with grants out.
        let Ok(pending) = self.shared.pending.clone().try_acquire_owned() else {
            conn.close(2u32.into(), b"too many connections");
            return Ok(());
        };
        if let Err(reason) = self.session(&conn, pending).await {
            conn.close(1u32.into(), reason.as_bytes());
        }
        Ok(())
    }
}

impl Hub {
    /// One peer's session; the error is why it ended, for the peer.
    async fn session(
        &self,
        conn: &Connection,
        pending: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(), String> {
        let engine = &self.shared.engine;
        let peer = conn.remote_id().to_z32();
        let (mut tx, mut rx) = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi())
            .await
            .map_err(|_| "no stream opened".to_string())?
            .map_err(|e| e.to_string())?;
        let hello = tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut rx, MAX_HELLO))
            .await
            .map_err(|_| "no hello".to_string())?
            .map_err(|e| e.to_string())?;
        let Frame::Hello {
            workflow,
            share,
            secret,
            name,
            version,
        } = hello
        else {
            return Err("the first frame must be a hello".into());
        };
        let name = clean_name(&name);
        let refuse = |reason: String| Frame::Refused { reason };
        // Let in by its grant, else by the share's secret.
        let store = engine.store();
        let role = match store.peer_role(&workflow, &peer).await {
            Ok(Some(role)) => Ok(role),
            Ok(None) => store
                .redeem_share(&Redeem {
                    workflow_id: &workflow,
                    share_id: &share,
                    secret: &secret,
                    peer: &peer,
                    name: &name,
                    at_us: now_us(),
                })
                .await
                .map_err(|e| format!("store: {e}"))?
                .map_err(|r| r.to_string()),
            Err(e) => return Err(format!("store: {e}")),
        };
        let role = match role {
            Ok(r) => r,
            Err(reason) => {
                send(&mut tx, &refuse(reason.clone())).await.ok();
                tx.finish().ok();
                // Let the refusal reach the peer before the connection goes.
                tokio::time::timeout(Duration::from_secs(2), conn.closed())
                    .await
                    .ok();
                return Err(reason);
            }
        };
        if store
            .get_workflow(&workflow)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            let reason = format!("workflow `{workflow}` is no longer here");
            send(&mut tx, &refuse(reason.clone())).await.ok();
            return Err(reason);
        }
        drop(pending);
        let Ok(_slot) = self.shared.slots.clone().try_acquire_owned() else {
            let reason = "too many peers connected".to_string();
            send(&mut tx, &refuse(reason.clone())).await.ok();
            return Err(reason);
        };
        store
            .touch_peer(&workflow, &peer, &name, now_us())
            .await
            .map_err(|e| e.to_string())?;
        // Subscribed before the document is read: nothing in between is missed.
        let docs = engine.doc_events();
        let (update, current) = match engine.doc_updates(&workflow, &version).await {
            Ok(u) => u,
            Err(e) => {
                let reason = format!("cannot sync: {e}");
                send(&mut tx, &refuse(reason.clone())).await.ok();
                return Err(reason);
            }
        };
        send(
            &mut tx,
            &Frame::Welcome {
                role: role.clone(),
                name: self.shared.name.clone(),
                update,
                version: current,
                presence: engine.presence_state(&workflow),
            },
        )
        .await
        .map_err(|e| e.to_string())?;

        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let share = share_of(&self.shared, &workflow, &peer)
            .await
            .unwrap_or(share);
        self.shared
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Session {
                id,
                workflow: workflow.clone(),
                peer: peer.clone(),
                share,
                conn: conn.clone(),
            });
        let (mut frames, reader) = spawn_reader(rx);
        let origin = engine.new_origin();
        let mut keys = Vec::new();
        let pump = Pump {
            engine,
            workflow: &workflow,
            origin,
            label: peer_label(&name, &peer),
            accept_updates: role == "editor",
            send_updates: true,
            waiting: None,
            resync_from: version,
            grant_of: Some(&peer),
            linked: false,
        };
        let end = pump.run(&mut tx, &mut frames, docs, &mut keys).await;
        reader.abort();
        engine.presence_leave(&workflow, &keys, origin);
        self.shared
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| s.id != id);
        store
            .touch_peer(&workflow, &peer, &name, now_us())
            .await
            .ok();
        match end {
            End::Gone(_) => Ok(()),
            e => Err(e.to_string()),
        }
    }
}

/// The share a peer's grant came through (its hello may name another).
async fn share_of(shared: &Shared, workflow: &str, peer: &str) -> Option<String> {
    shared
        .engine
        .store()
        .list_grants(workflow)
        .await
        .ok()?
        .into_iter()
        .find(|g| g.peer == peer)
        .map(|g| g.share_id)
}
