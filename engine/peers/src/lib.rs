//! Peers over iroh (DESIGN §6, docs/peers.md): this install's node key,
//! its iroh endpoint, sharing a workflow's document with capability
//! tickets, and live sync with the peers that joined.
//!
//! The sharer is the hub: every joiner holds one connection to it per
//! joined workflow ([`link`]), and the sharer relays each peer's updates to
//! the others and to its own editor windows ([`hub`]). Roles are enforced
//! by the sharer. A peer's edits change the draft only: what runs on a
//! machine is what that machine's user published.

mod hub;
mod lazy;
mod link;
mod pump;
pub mod ticket;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use iroh::endpoint::{Connection, PortmapperConfig, presets};
use iroh::protocol::Router;
use iroh::{Endpoint, NetReportConfig, RelayMap, RelayMode, RelayUrl, SecretKey};
use sluice_api::{
    Joined, LinkEntry, PeerEntry, PeersInfo, Role, ShareCreated, ShareEntry, Shares, TicketInfo,
};
use sluice_runtime::Engine;
use tokio::task::JoinHandle;

pub use lazy::LazyPeers;
pub use ticket::{Ticket, TicketError};

/// The node key's file in the data dir (mode 0600, never synced).
pub const KEY_FILE: &str = "peer.key";

/// The port the endpoint bound last time (reused when free).
const PORT_FILE: &str = "peer.port";

/// Most peers connected to this engine at once (all workflows).
const MAX_SESSIONS: usize = 256;

/// Most connections in their opening exchange at once (each has 5 s).
const MAX_PENDING: usize = 128;

/// Why a peers operation failed. Messages name the thing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config.toml [peers] {field}: {message}")]
    Settings {
        field: &'static str,
        message: String,
    },
    #[error("starting the peer endpoint: {0}")]
    Bind(String),
    #[error("workflow `{0}` not found")]
    WorkflowNotFound(String),
    #[error("share `{0}` not found")]
    ShareNotFound(String),
    #[error("peer `{peer}` has not joined workflow `{workflow}`")]
    PeerNotFound { workflow: String, peer: String },
    #[error("ticket: {0}")]
    Ticket(#[from] TicketError),
    #[error("joining `{workflow}` from {host}: {reason}")]
    Join {
        workflow: String,
        host: String,
        reason: String,
    },
    #[error("store: {0}")]
    Store(#[from] sluice_store::Error),
    #[error("engine: {0}")]
    Engine(#[from] sluice_runtime::executor::Error),
}

impl Error {
    /// Whether the caller asked for something missing (an API 404).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Error::WorkflowNotFound(_) | Error::ShareNotFound(_) | Error::PeerNotFound { .. }
        )
    }

    /// Whether the caller's request was at fault (an API 400).
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Ticket(_) | Error::Join { .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which relays the endpoint uses to reach peers behind NATs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relays {
    /// n0's public relays.
    Default,
    /// None: direct addresses only (a LAN, loopback, tests).
    None,
    /// Self-hosted relays.
    Custom(Vec<RelayUrl>),
}

/// How to start the endpoint.
#[derive(Debug, Clone)]
pub struct PeersOptions {
    /// Where to listen (None: every interface, IPv4 and IPv6, a free port).
    pub listen: Option<SocketAddr>,
    pub relays: Relays,
    /// The name peers see.
    pub name: String,
}

impl PeersOptions {
    /// From config.toml's `[peers]` and `[user]`. `None` when peers are
    /// off.
    pub fn from_settings(s: &sluice_nodes::settings::Settings) -> Result<Option<PeersOptions>> {
        let p = &s.peers;
        if !p.enabled {
            return Ok(None);
        }
        // The environment wins over config.toml (tests, one-off runs).
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let listen_env = env("SLUICE_PEERS_LISTEN");
        let relays_env = env("SLUICE_PEERS_RELAYS").map(sluice_nodes::settings::Relays::Named);
        let listen = match listen_env.as_deref().or(p.listen.as_deref()).map(str::trim) {
            None | Some("") => None,
            Some(l) => Some(l.parse().map_err(|e| Error::Settings {
                field: "listen",
                message: format!("`{l}` is not an address like 0.0.0.0:0 ({e})"),
            })?),
        };
        let url = |u: &str| -> Result<RelayUrl> {
            u.parse().map_err(|e| Error::Settings {
                field: "relays",
                message: format!("`{u}` is not a relay URL ({e})"),
            })
        };
        let relays = match relays_env.as_ref().unwrap_or(&p.relays) {
            sluice_nodes::settings::Relays::Named(n) if n == "default" => Relays::Default,
            sluice_nodes::settings::Relays::Named(n) if n == "none" => Relays::None,
            sluice_nodes::settings::Relays::Named(n) => Relays::Custom(vec![url(n)?]),
            sluice_nodes::settings::Relays::List(l) => {
                Relays::Custom(l.iter().map(|u| url(u)).collect::<Result<_>>()?)
            }
        };
        Ok(Some(PeersOptions {
            listen,
            relays,
            name: s.user.display_name(),
        }))
    }
}

/// This install as a peer: the endpoint, its shares' live sessions and its
/// links to workflows joined from others. Cheap to clone.
#[derive(Clone)]
pub struct Peers {
    shared: Arc<Shared>,
    router: Arc<Router>,
}

/// What the hub's sessions and the links share.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) endpoint: Endpoint,
    pub(crate) name: String,
    /// Peers connected to this engine's shared workflows.
    pub(crate) sessions: Mutex<Vec<Session>>,
    pub(crate) slots: Arc<tokio::sync::Semaphore>,
    /// Connections still in their opening exchange.
    pub(crate) pending: Arc<tokio::sync::Semaphore>,
    /// Workflows joined from peers, by local id.
    links: Mutex<HashMap<String, LinkHandle>>,
}

/// A peer connected to one of this engine's workflows.
pub(crate) struct Session {
    pub(crate) id: u64,
    pub(crate) workflow: String,
    pub(crate) peer: String,
    pub(crate) share: String,
    pub(crate) conn: Connection,
}

/// A joined workflow's link task and where it stands.
struct LinkHandle {
    task: JoinHandle<()>,
    status: Arc<link::Status>,
    row: sluice_store::LinkRow,
}

impl Shared {
    /// Closes the live sessions `matches` picks, telling the peer why.
    pub(crate) fn close_sessions(&self, reason: &str, matches: impl Fn(&Session) -> bool) {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        for s in sessions.iter().filter(|s| matches(s)) {
            s.conn.close(1u32.into(), reason.as_bytes());
        }
    }
}

/// Loads the node key from `dir`, creating it (mode 0600) the first time.
pub fn node_key(dir: &Path) -> Result<SecretKey> {
    let path = dir.join(KEY_FILE);
    let err = |source| Error::Key {
        path: path.clone(),
        source,
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let bytes = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a node key (32 bytes); move it away to make a new identity",
                ))
            })?;
            Ok(SecretKey::from_bytes(&bytes))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| err(std::io::Error::other(e.to_string())))?;
            std::fs::create_dir_all(dir).map_err(err)?;
            // Written whole under a temporary name, then renamed: never half a key.
            let tmp = dir.join(format!("{KEY_FILE}.tmp"));
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            {
                use std::io::Write;
                let mut f = o.open(&tmp).map_err(err)?;
                f.write_all(&bytes).map_err(err)?;
                f.sync_all().map_err(err)?;
            }
            // Another process may have made one meanwhile: the first wins.
            match std::fs::hard_link(&tmp, &path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::remove_file(&tmp).ok();
                    return node_key(dir);
                }
                Err(e) => return Err(err(e)),
            }
            std::fs::remove_file(&tmp).ok();
            Ok(SecretKey::from_bytes(&bytes))
        }
        Err(e) => Err(err(e)),
    }
}

/// Binds an endpoint with `key` on `addrs`.
async fn bind(
    key: &SecretKey,
    relays: &Relays,
    addrs: &[SocketAddr],
) -> std::result::Result<Endpoint, String> {
    let mut b = Endpoint::builder(presets::Minimal)
        .secret_key(key.clone())
        .alpns(vec![wire::ALPN.to_vec()]);
    b = match relays {
        Relays::None => b
            .relay_mode(RelayMode::Disabled)
            .portmapper_config(PortmapperConfig::Disabled)
            .net_report_config(NetReportConfig::minimal()),
        Relays::Default => b.relay_mode(RelayMode::Default),
        Relays::Custom(urls) => b.relay_mode(RelayMode::Custom(
            urls.iter().cloned().collect::<RelayMap>(),
        )),
    };
    b = b.clear_ip_transports();
    for a in addrs {
        b = b.bind_addr(*a).map_err(|e| format!("{a}: {e}"))?;
    }
    b.bind().await.map_err(|e| {
        let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        format!("{}: {e}", addrs.join(", "))
    })
}

/// A display name as received from a peer: no control characters, at most
/// 64 characters, never empty.
pub(crate) fn clean_name(name: &str) -> String {
    let s: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(sluice_nodes::settings::MAX_NAME_CHARS)
        .collect();
    let s = s.trim();
    if s.is_empty() {
        "someone".to_string()
    } else {
        s.to_string()
    }
}

/// How a peer is named in the versions its edits make: `NAME (id…)`.
pub(crate) fn peer_label(name: &str, peer: &str) -> String {
    let short: String = peer.chars().take(10).collect();
    format!("{name} ({short})")
}

pub(crate) fn now_us() -> i64 {
    sluice_nodes::now_us()
}

impl Peers {
    /// Starts the endpoint (it answers at once: nothing waits for a relay)
    /// and the links of every workflow joined before.
    pub async fn start(engine: Engine, dir: &Path, options: PeersOptions) -> Result<Peers> {
        let key = node_key(dir)?;
        // The port of the last start, so peers that joined find this engine
        // again at the address their ticket holds.
        let port_file = dir.join(PORT_FILE);
        let last = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok());
        let port = match options.listen {
            Some(l) if l.port() != 0 => l.port(),
            _ => last.unwrap_or(0),
        };
        let at = |port: u16| -> Vec<SocketAddr> {
            match options.listen {
                Some(l) => vec![SocketAddr::new(l.ip(), port)],
                None => vec![
                    SocketAddr::from(([0, 0, 0, 0], port)),
                    SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)),
                ],
            }
        };
        let mut tries = vec![at(port)];
        if options.listen.is_none() {
            tries.push(at(port)[..1].to_vec()); // no IPv6 here
        }
        if port != 0 && options.listen.is_none_or(|l| l.port() == 0) {
            tries.push(at(0));
            if options.listen.is_none() {
                tries.push(at(0)[..1].to_vec());
            }
        }
        let mut endpoint = None;
        let mut last_error = String::new();
        for addrs in tries {
            match bind(&key, &options.relays, &addrs).await {
                Ok(ep) => {
                    endpoint = Some(ep);
                    break;
                }
                Err(e) => last_error = e,
            }
        }
        let endpoint = endpoint.ok_or(Error::Bind(last_error))?;
        if let Some(bound) = endpoint.bound_sockets().first() {
            std::fs::write(&port_file, bound.port().to_string()).ok();
        }
        let shared = Arc::new(Shared {
            engine,
            endpoint: endpoint.clone(),
            name: options.name,
            sessions: Mutex::new(Vec::new()),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_SESSIONS)),
            pending: Arc::new(tokio::sync::Semaphore::new(MAX_PENDING)),
            links: Mutex::new(HashMap::new()),
        });
        let router = Router::builder(endpoint)
            .accept(wire::ALPN, hub::Hub::new(shared.clone()))
            .spawn();
        let peers = Peers {
            shared,
            router: Arc::new(router),
        };
        for row in peers.shared.engine.store().list_links().await? {
            peers.spawn_link(row, None);
        }
        // A joined workflow deleted here takes its link with it (the store
        // dropped the link's row with the workflow).
        {
            let shared = Arc::downgrade(&peers.shared);
            let mut changes = peers.shared.engine.workflow_changes();
            tokio::spawn(async move {
                loop {
                    let id = match changes.recv().await {
                        Ok(id) => id,
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return,
                    };
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    let linked = shared
                        .links
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .contains_key(&id);
                    if !linked {
                        continue;
                    }
                    let gone = matches!(shared.engine.store().list_links().await,
                        Ok(links) if !links.iter().any(|l| l.workflow_id == id));
                    if gone
                        && let Some(h) = shared
                            .links
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&id)
                    {
                        h.task.abort();
                    }
                }
            });
        }
        Ok(peers)
    }

    /// This install's peer id.
    pub fn id(&self) -> String {
        self.shared.endpoint.id().to_z32()
    }

    /// The engine behind these peers.
    pub fn engine(&self) -> &Engine {
        &self.shared.engine
    }

    /// Where peers can reach this endpoint: its known addresses, else the
    /// bound sockets (an unspecified one as loopback).
    fn addr(&self) -> iroh::EndpointAddr {
        let addr = self.shared.endpoint.addr();
        if addr.ip_addrs().next().is_some() {
            return addr;
        }
        let mut addr = addr;
        for s in self.shared.endpoint.bound_sockets() {
            let s = if s.ip().is_unspecified() {
                if s.is_ipv4() {
                    SocketAddr::from(([127, 0, 0, 1], s.port()))
                } else {
                    SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, s.port()))
                }
            } else {
                s
            };
            addr = addr.with_ip_addr(s);
        }
        addr
    }

    /// This install as a peer, with its joined workflows.
    pub fn info(&self) -> PeersInfo {
        let links = self.shared.links.lock().unwrap_or_else(|e| e.into_inner());
        let mut links: Vec<LinkEntry> = links.values().map(LinkHandle::entry).collect();
        links.sort_by(|a, b| a.workflow.cmp(&b.workflow));
        PeersInfo {
            enabled: true,
            id: Some(self.id()),
            name: self.shared.name.clone(),
            addrs: self.addr().ip_addrs().map(ToString::to_string).collect(),
            links,
        }
    }

    /// Shares workflow `id`: a new capability with `role`, good for
    /// `expires_in_s` seconds and `uses` joins (default: no limit).
    pub async fn share(
        &self,
        id: &str,
        role: Role,
        expires_in_s: Option<u64>,
        uses: Option<u32>,
    ) -> Result<ShareCreated> {
        let engine = &self.shared.engine;
        if engine.store().get_workflow(id).await?.is_none() {
            return Err(Error::WorkflowNotFound(id.to_string()));
        }
        let mut raw = [0u8; 40];
        getrandom::fill(&mut raw).map_err(|e| Error::Bind(format!("randomness: {e}")))?;
        let (share_id, secret) = raw.split_at(8);
        let share_id = hex::encode(share_id);
        let secret: [u8; 32] = secret.try_into().unwrap_or([0; 32]);
        let now = now_us();
        let expires = expires_in_s.map(|s| {
            now.saturating_add(
                i64::try_from(s)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1_000_000),
            )
        });
        engine
            .store()
            .create_share(&sluice_store::NewShare {
                id: &share_id,
                workflow_id: id,
                role: role.as_str(),
                secret_hash: *blake3::hash(&secret).as_bytes(),
                created_at_us: now,
                expires_at_us: expires,
                uses: uses.map(i64::from),
            })
            .await?;
        let ticket = Ticket {
            addr: self.addr(),
            name: self.shared.name.clone(),
            workflow: id.to_string(),
            share: share_id.clone(),
            secret,
            role: role.as_str().to_string(),
        };
        Ok(ShareCreated {
            id: share_id,
            ticket: ticket.encode(),
            link: ticket.link(),
        })
    }

    /// Workflow `id`'s shares and the peers that joined through them.
    pub async fn shares(&self, id: &str) -> Result<Shares> {
        let store = self.shared.engine.store();
        if store.get_workflow(id).await?.is_none() {
            return Err(Error::WorkflowNotFound(id.to_string()));
        }
        let connected: Vec<String> = {
            let s = self
                .shared
                .sessions
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            s.iter()
                .filter(|s| s.workflow == id)
                .map(|s| s.peer.clone())
                .collect()
        };
        let role = |r: &str| Role::parse(r).unwrap_or(Role::Viewer);
        let shares = store
            .list_shares(id)
            .await?
            .into_iter()
            .map(|s| ShareEntry {
                id: s.id,
                role: role(&s.role),
                created_at_us: s.created_at_us,
                expires_at_us: s.expires_at_us,
                uses_left: s.uses_left,
                revoked_at_us: s.revoked_at_us,
            })
            .collect();
        let peers = store
            .list_grants(id)
            .await?
            .into_iter()
            .map(|g| PeerEntry {
                connected: connected.contains(&g.peer),
                peer: g.peer,
                name: g.name,
                role: role(&g.role),
                share: g.share_id,
                joined_at_us: g.joined_at_us,
                last_seen_us: g.last_seen_us,
                removed_at_us: g.removed_at_us,
            })
            .collect();
        Ok(Shares { shares, peers })
    }

    /// Revokes a share: the peers that joined through it are disconnected
    /// now and refused from now on.
    pub async fn revoke(&self, share: &str) -> Result<()> {
        self.shared
            .engine
            .store()
            .revoke_share(share, now_us())
            .await?
            .ok_or_else(|| Error::ShareNotFound(share.to_string()))?;
        self.shared
            .close_sessions("the share was revoked", |s| s.share == share);
        Ok(())
    }

    /// Removes peer `peer` from workflow `id`: disconnected now, refused
    /// from now on (a share made later can let it back).
    pub async fn remove_peer(&self, id: &str, peer: &str) -> Result<()> {
        if !self
            .shared
            .engine
            .store()
            .remove_peer(id, peer, now_us())
            .await?
        {
            return Err(Error::PeerNotFound {
                workflow: id.to_string(),
                peer: peer.to_string(),
            });
        }
        self.shared
            .close_sessions("you were removed from this workflow", |s| {
                s.workflow == id && s.peer == peer
            });
        Ok(())
    }

    /// What a ticket shares, read without joining or contacting anyone.
    pub async fn describe(&self, text: &str) -> Result<TicketInfo> {
        let t = Ticket::decode(text)?;
        let host = t.addr.id.to_z32();
        let joined = self
            .shared
            .engine
            .store()
            .list_links()
            .await?
            .into_iter()
            .find(|l| l.host == host && l.remote_workflow == t.workflow)
            .map(|l| l.workflow_id);
        Ok(TicketInfo {
            host,
            host_name: clean_name(&t.name),
            workflow: t.workflow.chars().take(128).collect(),
            role: Role::parse(&t.role).unwrap_or(Role::Viewer),
            addrs: t.addr.ip_addrs().map(ToString::to_string).collect(),
            joined,
        })
    }

    /// Joins the workflow a ticket shares: connects, takes the whole
    /// document, and keeps the link live (reconnecting with backoff) from
    /// then on. The workflow keeps its id here; nothing of it is published
    /// and its triggers stay disarmed until this machine's user publishes.
    pub async fn join(&self, text: &str) -> Result<Joined> {
        let ticket = Ticket::decode(text)?;
        let host = ticket.addr.id.to_z32();
        let id = ticket.workflow.clone();
        let join_err = |reason: String| Error::Join {
            workflow: id.clone(),
            host: ticket.name.clone(),
            reason,
        };
        if !sluice_model::validate::is_slug(&id) {
            return Err(join_err(format!("`{id}` is not a workflow id")));
        }
        if host == self.id() {
            return Err(join_err("this ticket is this install's own share".into()));
        }
        let store = self.shared.engine.store();
        let links = store.list_links().await?;
        // Joined before from this sharer: the same local workflow. Else its
        // id, or the first free `id-2`, `id-3`… (never a local workflow).
        let known = links
            .iter()
            .find(|l| l.host == host && l.remote_workflow == id)
            .map(|l| l.workflow_id.clone());
        let local = match known.clone() {
            Some(l) => l,
            None => {
                let mut n = 1;
                loop {
                    let candidate = if n == 1 {
                        id.clone()
                    } else {
                        format!("{id}-{n}")
                    };
                    let taken = links.iter().any(|l| l.workflow_id == candidate)
                        || store.get_workflow(&candidate).await?.is_some();
                    if !taken && sluice_model::validate::is_slug(&candidate) {
                        break candidate;
                    }
                    n += 1;
                    if n > 1000 {
                        return Err(join_err("no free id for it here".into()));
                    }
                }
            }
        };
        let row = sluice_store::LinkRow {
            workflow_id: local.clone(),
            ticket: ticket.encode(),
            host,
            host_name: clean_name(&ticket.name),
            remote_workflow: id.clone(),
            role: ticket.role.clone(),
            joined_at_us: now_us(),
        };
        // Stored first: the document learns from it which id it holds.
        store.put_link(&row).await?;
        // The first connection is made here, so a refusal is the answer.
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.spawn_link(row.clone(), Some(tx));
        let answer = match rx.await {
            Ok(r) => r,
            Err(_) => Err("the link stopped".into()),
        };
        match answer {
            Ok(welcome_role) => {
                let mut row = row;
                row.role = welcome_role;
                store.put_link(&row).await?;
                if let Some(h) = self
                    .shared
                    .links
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(&local)
                {
                    h.row = row.clone();
                }
                Ok(Joined {
                    workflow: local,
                    host_name: row.host_name,
                    role: Role::parse(&row.role).unwrap_or(Role::Viewer),
                })
            }
            Err(reason) => {
                self.stop_link(&local);
                if known.is_none() {
                    store.delete_link(&local).await?;
                }
                Err(join_err(reason))
            }
        }
    }

    fn spawn_link(
        &self,
        row: sluice_store::LinkRow,
        first: Option<tokio::sync::oneshot::Sender<Result<String, String>>>,
    ) {
        let status = Arc::new(link::Status::new());
        let task = tokio::spawn(link::run(
            self.shared.clone(),
            row.clone(),
            status.clone(),
            first,
        ));
        let old = self
            .shared
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(row.workflow_id.clone(), LinkHandle { task, status, row });
        if let Some(old) = old {
            old.task.abort();
        }
    }

    fn stop_link(&self, id: &str) {
        if let Some(h) = self
            .shared
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        {
            h.task.abort();
        }
    }

    /// Stops: closes every connection and the endpoint.
    pub async fn shutdown(&self) {
        let links: Vec<LinkHandle> = self
            .shared
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, h)| h)
            .collect();
        for h in links {
            h.task.abort();
        }
        self.shared.close_sessions("the engine stopped", |_| true);
        if let Err(e) = self.router.shutdown().await {
            eprintln!("sluice: stopping peers: {e}");
        }
    }
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers").field("id", &self.id()).finish()
    }
}

impl LinkHandle {
    fn entry(&self) -> LinkEntry {
        let (state, error) = self.status.get();
        LinkEntry {
            workflow: self.row.workflow_id.clone(),
            host: self.row.host.clone(),
            host_name: self.row.host_name.clone(),
            role: Role::parse(&self.row.role).unwrap_or(Role::Viewer),
            state,
            error,
            waiting: self.status.waiting.load(Ordering::Relaxed),
        }
    }
}

/// A counter of local edits sent and not yet acknowledged.
pub(crate) type Waiting = AtomicU32;
