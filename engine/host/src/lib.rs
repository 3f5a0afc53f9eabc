//! The engine as a long-running service: what `sluice serve` runs, and what
//! the desktop app runs in-process.
//!
//! [`Host::start`] locks the data dir (one process per data dir), opens the
//! engine, binds the trigger port, resumes unfinished runs, arms schedules
//! and file watches, mirrors the workflows folder and serves the API, the
//! webhooks and the editor. [`Host::stop`] stops accepting, lets the steps
//! in flight finish or journals them, and flushes the journal: unfinished
//! runs resume at the next start.

pub mod backup;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluice_runtime::{Engine, Options, Settings};
use sluice_server::Codes;
use tokio::task::JoinHandle;

/// Why the engine cannot start (or stop cleanly). [`Error::is_usage`]
/// tells what the user can fix from what went wrong inside.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no home directory: pass --data-dir or set SLUICE_DATA_DIR")]
    NoHome,
    #[error("SLUICE_LISTEN={value}: not an address like 127.0.0.1:4260 ({source})")]
    Listen {
        value: String,
        source: std::net::AddrParseError,
    },
    #[error("cannot create {}: {source}", path.display())]
    CreateDataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {}: {source}", path.display())]
    OpenLock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the data dir {} is in use by another Sluice (`sluice serve`, `sluice runs resume` or the app)",
        dir.display()
    )]
    InUse { dir: PathBuf },
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `config.toml` cannot be used (the message names file and line).
    #[error(transparent)]
    Settings(#[from] sluice_nodes::settings::Error),
    /// What the settings describe cannot be built (a bad extra root).
    #[error(transparent)]
    CheckSettings(#[from] sluice_nodes::io::Error),
    #[error("peers: {0}")]
    Peers(#[source] sluice_peers::Error),
    #[error("cannot open the data dir {}: {source}", dir.display())]
    OpenEngine {
        dir: PathBuf,
        source: sluice_runtime::executor::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    WriteToken {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The bound socket's address cannot be read.
    #[error(transparent)]
    BoundAddr(std::io::Error),
    /// The workflows folder cannot be created or read.
    #[error(transparent)]
    Workflows(#[from] sluice_triggers::mirror::Error),
    /// The unfinished runs cannot be listed or resumed.
    #[error(transparent)]
    Resume(sluice_runtime::executor::Error),
    /// The journal cannot be flushed at stop.
    #[error(transparent)]
    Flush(sluice_runtime::executor::Error),
    #[error("the trigger port failed: {0}")]
    Serve(#[source] std::io::Error),
    /// The server's task panicked or was cancelled.
    #[error("the trigger port failed: {0}")]
    ServeTask(#[source] tokio::task::JoinError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the user can fix it (a busy data dir or port, bad settings
    /// or environment), as opposed to a failure inside.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::NoHome
                | Error::Listen { .. }
                | Error::InUse { .. }
                | Error::Settings(_)
                | Error::CheckSettings(_)
                | Error::Peers(sluice_peers::Error::Settings { .. } | sluice_peers::Error::Bind(_))
                | Error::Bind { .. }
                | Error::Workflows(_)
        )
    }
}

/// How to start.
#[derive(Debug, Clone)]
pub struct HostOptions {
    pub data_dir: PathBuf,
    /// The trigger port's address (`127.0.0.1:4260` by default; port 0
    /// picks a free one).
    pub listen: SocketAddr,
    /// The workflows folder (default `<data-dir>/workflows`).
    pub workflows: Option<PathBuf>,
    /// The editor's files on disk (wins over `ui_embedded`).
    pub ui_dir: Option<PathBuf>,
    /// The editor built into the binary.
    pub ui_embedded: &'static [(&'static str, &'static [u8])],
}

impl HostOptions {
    pub fn new(data_dir: PathBuf) -> HostOptions {
        HostOptions {
            data_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], sluice_server::DEFAULT_PORT)),
            workflows: None,
            ui_dir: None,
            ui_embedded: &[],
        }
    }
}

/// The platform's data dir for Sluice (`~/.local/share/sluice` on Linux),
/// unless `SLUICE_DATA_DIR` says otherwise.
pub fn default_data_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("SLUICE_DATA_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    directories::ProjectDirs::from("dev", "sluice", "sluice")
        .map(|p| p.data_dir().to_path_buf())
        .ok_or(Error::NoHome)
}

/// `SLUICE_LISTEN`, parsed, when set.
pub fn listen_from_env() -> Result<Option<SocketAddr>> {
    match std::env::var("SLUICE_LISTEN") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|source| Error::Listen { value: v, source }),
        _ => Ok(None),
    }
}

/// Takes the data dir's lock: one engine process per data dir.
pub fn lock_data_dir(dir: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateDataDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join("lock");
    let file = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
    {
        Ok(f) => f,
        Err(source) => return Err(Error::OpenLock { path, source }),
    };
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::InUse {
            dir: dir.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(Error::Lock { path, source }),
    }
}

/// Opens the engine on `dir` with its `settings.toml`.
pub async fn open_engine(dir: &Path) -> Result<Engine> {
    let settings = Settings::load(dir)?;
    let options = Options {
        max_active_runs: usize::try_from(settings.server.max_active_runs.get())
            .unwrap_or(usize::MAX),
        settings,
        ..Options::default()
    };
    Engine::open(dir, options)
        .await
        .map_err(|source| Error::OpenEngine {
            dir: dir.to_path_buf(),
            source,
        })
}

/// Binds the trigger port with a backlog of 1024 (tokio's bind asks for
/// 128), so a burst of connections waits in the kernel instead of failing.
fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// A running engine with its trigger port.
pub struct Host {
    pub engine: Engine,
    /// The address to reach the port at (loopback when bound to all
    /// interfaces).
    pub addr: SocketAddr,
    /// The address actually bound.
    pub bound: SocketAddr,
    pub token: String,
    /// Whether the token was created by this start (shown this once).
    pub token_is_new: bool,
    pub codes: Arc<Codes>,
    pub data_dir: PathBuf,
    pub workflows: PathBuf,
    /// Runs resumed at start.
    pub resumed: usize,
    /// Whether the editor is served.
    pub has_ui: bool,
    /// This install as a peer, started when first needed (None: `[peers]
    /// enabled = false`).
    pub peers: Option<sluice_peers::LazyPeers>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: JoinHandle<std::io::Result<()>>,
    tasks: Vec<JoinHandle<()>>,
    _lock: std::fs::File,
}

impl Host {
    /// Starts everything; see the module docs. Must run inside a tokio
    /// runtime.
    pub async fn start(options: HostOptions) -> Result<Host> {
        let dir = options.data_dir.clone();
        let lock = lock_data_dir(&dir)?;
        let engine = open_engine(&dir).await?;
        engine.check_settings()?;
        let (token, token_is_new) =
            sluice_server::ensure_token_new(&dir).map_err(|source| Error::WriteToken {
                path: dir.join("api-token"),
                source,
            })?;
        let listener = bind(options.listen).map_err(|source| Error::Bind {
            addr: options.listen,
            source,
        })?;
        let bound = listener.local_addr().map_err(Error::BoundAddr)?;
        // Before any run resumes: no step may call the trigger port.
        engine.set_trigger_addresses(vec![bound]);
        // 0.0.0.0 / [::] accept every interface; the API answers loopback names.
        let addr = if bound.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], bound.port()))
        } else {
            bound
        };
        let mut server_options = sluice_server::Options::new(bound);
        let limits = &engine.settings().server;
        server_options.body_limit =
            usize::try_from(limits.body_limit_bytes.get()).unwrap_or(usize::MAX);
        server_options.webhook_timeout = Duration::from_millis(limits.wait_ms.get());
        // Connections are bounded under the open-files limit (raised to
        // its hard limit first), so idle clients cannot starve the store.
        #[cfg(unix)]
        let nofile = sluice_server::raise_open_files_limit().unwrap_or(1024);
        #[cfg(not(unix))]
        let nofile = 8192;
        server_options.max_connections = sluice_server::connection_cap(
            usize::try_from(limits.max_connections.get()).unwrap_or(usize::MAX),
            nofile,
        );
        server_options.header_read_timeout = Duration::from_millis(limits.header_timeout_ms.get());
        // This install as a peer (config.toml [peers]): started now when a
        // peer may come back for something (shares, joined workflows), else
        // at the first use of the peers API. The endpoint answers at once,
        // nothing waits for a relay.
        let peers = match sluice_peers::PeersOptions::from_settings(engine.settings())
            .map_err(Error::Peers)?
        {
            Some(o) => {
                let lazy = sluice_peers::LazyPeers::new(engine.clone(), dir.clone(), o);
                lazy.start_if_needed().await.map_err(Error::Peers)?;
                Some(lazy)
            }
            None => None,
        };
        server_options.peers = peers.clone();
        server_options.ui_dir = options.ui_dir.clone();
        server_options.ui_embedded = options.ui_embedded;
        let has_ui = server_options.ui_dir.is_some() || !server_options.ui_embedded.is_empty();
        let codes = server_options.codes.clone();
        // The workflows folder: files in, files out.
        let folder = options.workflows.unwrap_or_else(|| dir.join("workflows"));
        let mirror = sluice_triggers::Mirror::new(engine.clone(), &folder)?;
        let resumed = engine.resume_all().await.map_err(Error::Resume)?;
        // Drafts that were to publish themselves when the last process
        // stopped: their idle timers start again.
        if let Err(e) = engine.schedule_idle_publishes().await {
            eprintln!("sluice: drafts that publish themselves: {e}");
        }
        let resumed_count = resumed.len();
        let mut tasks = Vec::new();
        for h in resumed {
            tasks.push(tokio::spawn(async move {
                h.wait().await;
            }));
        }
        // The JavaScript runtime, ready before the first code.js step needs
        // it, once a workflow has one (an engine without scripts never pays
        // its memory).
        {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = engine.prepare_code_when_used().await {
                    eprintln!("sluice: code.js: {e}");
                }
            }));
        }
        // Run history retention: finished runs past `[runs]` go, with
        // their blobs, and free pages go back to the OS.
        tasks.push(tokio::spawn(engine.clone().keep_pruning()));
        // Approvals' timeouts, as they fall due (those that passed while
        // stopped fire now).
        tasks.push(tokio::spawn(engine.clone().keep_waking()));
        // Runs the shared worker started for deployed workflows, into history.
        tasks.push(tokio::spawn(engine.clone().follow_deployments()));
        // Schedules and file watches, re-armed as workflows change.
        tasks.push(tokio::spawn(
            sluice_triggers::Triggers::new(engine.clone()).run(),
        ));
        tasks.push(tokio::spawn(async move {
            if let Err(e) = mirror.run().await {
                eprintln!("sluice: workflows folder: {e}");
            }
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = {
            let (engine, token) = (engine.clone(), token.clone());
            tokio::spawn(async move {
                sluice_server::serve(listener, engine, &token, server_options, async {
                    stopped.await.ok();
                })
                .await
            })
        };
        // Where `sluice open` finds this engine (and asks it for a link).
        let serve_file = dir.join(SERVE_FILE);
        if let Err(e) = write_serve_file(&serve_file, addr) {
            eprintln!(
                "sluice: cannot write {} (`sluice open` will not find this engine): {e}",
                serve_file.display()
            );
        }
        Ok(Host {
            engine,
            addr,
            bound,
            token,
            token_is_new,
            codes,
            data_dir: dir,
            workflows: folder,
            resumed: resumed_count,
            has_ui,
            peers,
            stop: Some(stop),
            server,
            tasks,
            _lock: lock,
        })
    }

    /// The base URL of the trigger port.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A link that signs a browser (or the app's window) in to the editor,
    /// once; `then` is where it lands (`/` or `/#/w/<id>`).
    pub fn login_url(&self, then: &str) -> String {
        let code = self.codes.issue();
        if then == "/" || then.is_empty() {
            format!("{}/ui/login?code={code}", self.base_url())
        } else {
            format!(
                "{}/ui/login?code={code}&then={}",
                self.base_url(),
                percent_encoding::utf8_percent_encode(then, QUERY_VALUE)
            )
        }
    }

    /// Whether the server is still serving (it stops only when told to, or
    /// on an error).
    pub fn is_serving(&self) -> bool {
        !self.server.is_finished()
    }

    /// Stops: no new requests, the steps in flight finish or are journaled,
    /// the journal is flushed. Unfinished runs resume at the next start.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
        match std::fs::remove_file(self.data_dir.join(SERVE_FILE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("sluice: cannot remove {SERVE_FILE}: {e}"),
        }
        let served = (&mut self.server).await;
        if let Some(p) = self.peers.as_ref().and_then(|p| p.started()) {
            p.shutdown().await;
        }
        for t in &self.tasks {
            t.abort();
        }
        self.engine
            .store()
            .journal()
            .flush()
            .await
            .map_err(|e| Error::Flush(e.into()))?;
        match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Serve(e)),
            Err(e) => Err(Error::ServeTask(e)),
        }
    }

    /// Returns when the server stopped by itself (an error), for a caller
    /// that also waits for signals.
    pub async fn serving(&self) {
        while !self.server.is_finished() {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }
}

/// The file in the data dir that says where its running engine listens
/// (`{"url": …, "pid": …}`), written at start and removed at stop: how
/// `sluice open` reaches the engine. A file left by a crash names an
/// address nothing answers on, which `sluice open` reports as such.
pub const SERVE_FILE: &str = "serve.json";

/// What [`SERVE_FILE`] holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServeFile {
    /// The trigger port's base URL (loopback when bound to all interfaces).
    pub url: String,
    /// The engine's process id.
    pub pid: u32,
}

/// Writes [`SERVE_FILE`] whole or not at all (a temporary file, renamed).
fn write_serve_file(path: &Path, addr: SocketAddr) -> std::io::Result<()> {
    let body = serde_json::to_vec_pretty(&ServeFile {
        url: format!("http://{addr}"),
        pid: std::process::id(),
    })?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

/// Where the engine serving `dir` listens, from its [`SERVE_FILE`]: `None`
/// when no engine has written one (none is running, or it stopped).
pub fn read_serve_file(dir: &Path) -> std::io::Result<Option<ServeFile>> {
    match std::fs::read(dir.join(SERVE_FILE)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a `then=` query value keeps as is: unreserved characters and `/`.
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
