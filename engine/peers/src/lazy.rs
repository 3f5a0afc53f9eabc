//! [`LazyPeers`]: this install as a peer, started when first needed.

use std::path::PathBuf;
use std::sync::Arc;

use sluice_runtime::Engine;

use crate::{Peers, PeersOptions, Result};

/// This install as a peer, its endpoint started the first time it is
/// needed: at the engine's start when the data dir holds something a peer
/// may come back for (a share not revoked, a peer that joined, a workflow
/// joined from a peer), else at the first use of the peers API (sharing,
/// joining, asking for this install's id). An engine that never shares
/// nor joins never pays for the endpoint (its sockets, DNS resolver, port
/// mapping and relay client: most of an idle engine's memory otherwise).
/// Cheap to clone.
#[derive(Clone)]
pub struct LazyPeers {
    inner: Arc<Inner>,
}

struct Inner {
    /// How to start it; None for one started already ([`LazyPeers::from`]).
    start: Option<(Engine, PathBuf, PeersOptions)>,
    started: tokio::sync::OnceCell<Peers>,
}

impl LazyPeers {
    /// Peers for `engine` with its data dir `dir`, not started yet.
    pub fn new(engine: Engine, dir: PathBuf, options: PeersOptions) -> LazyPeers {
        LazyPeers {
            inner: Arc::new(Inner {
                start: Some((engine, dir, options)),
                started: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// The peers, started now if they were not (once, however many ask at
    /// once; a failed start is tried again by the next caller).
    pub async fn get(&self) -> Result<&Peers> {
        self.inner
            .started
            .get_or_try_init(|| async {
                let (engine, dir, options) = self
                    .inner
                    .start
                    .clone()
                    .expect("a LazyPeers without start options is started at creation");
                Peers::start(engine, &dir, options).await
            })
            .await
    }

    /// The peers if they were started.
    pub fn started(&self) -> Option<&Peers> {
        self.inner.started.get()
    }

    /// Starts the peers now if a peer may come back for something of this
    /// install (see [`LazyPeers`]); returns whether it did.
    pub async fn start_if_needed(&self) -> Result<bool> {
        let Some((engine, _, _)) = &self.inner.start else {
            return Ok(true);
        };
        if engine.store().has_peer_state().await? {
            self.get().await?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl From<Peers> for LazyPeers {
    fn from(peers: Peers) -> LazyPeers {
        LazyPeers {
            inner: Arc::new(Inner {
                start: None,
                started: tokio::sync::OnceCell::new_with(Some(peers)),
            }),
        }
    }
}

impl std::fmt::Debug for LazyPeers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.started() {
            Some(p) => p.fmt(f),
            None => f.write_str("LazyPeers (not started)"),
        }
    }
}
