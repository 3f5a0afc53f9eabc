//! [`Io`]: what the I/O kinds share across an engine (the settings, one
//! HTTP client, one sandbox), each made on first use.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use sluice_core::StepError;

use crate::net::{NetPolicy, OwnAddresses};
use crate::{Settings, http};

/// A shared resource that cannot be made. [`Io`] keeps it, so every step
/// that needs the resource reports the same failure (hence the `Arc`s).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The HTTP client: a bad `tls.extra_roots` file, a bad `[http] allow`
    /// or `deny` entry, the TLS setup.
    #[error(transparent)]
    Http(Arc<http::ClientError>),
    /// The sandbox for `code.js`, `code.wasm` and `data.transform`.
    #[error(transparent)]
    Sandbox(Arc<sluice_sandbox::Error>),
}

/// Engine-wide resources for the I/O kinds: the settings and a shared HTTP
/// client (one connection pool for every request), built on first use.
pub struct Io {
    pub settings: Arc<Settings>,
    http: OnceLock<Result<(reqwest::Client, NetPolicy), Error>>,
    /// The trigger port's addresses, once bound: `http.request` may not
    /// call them.
    own: OwnAddresses,
    /// The wasmtime sandbox for `code.js` and `code.wasm`, started on first use.
    sandbox: OnceLock<Result<sluice_sandbox::Sandbox, Error>>,
    /// Where compiled components are cached (None: not cached on disk).
    wasm_cache: Option<PathBuf>,
    /// `db.query`'s connection pools.
    db: OnceLock<sluice_db::Pools>,
}

impl std::fmt::Debug for Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Io")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for Io {
    fn default() -> Self {
        Io::new(Settings::default())
    }
}

impl Io {
    pub fn new(settings: Settings) -> Io {
        http::install_crypto_provider();
        Io {
            settings: Arc::new(settings),
            http: OnceLock::new(),
            own: OwnAddresses::default(),
            sandbox: OnceLock::new(),
            wasm_cache: None,
            db: OnceLock::new(),
        }
    }

    /// Caches compiled components in `dir`.
    pub fn with_wasm_cache(mut self, dir: PathBuf) -> Io {
        self.wasm_cache = Some(dir);
        self
    }

    /// The shared sandbox (one wasmtime engine for every code step).
    pub fn sandbox(&self) -> crate::Result<&sluice_sandbox::Sandbox> {
        self.sandbox
            .get_or_init(|| {
                sluice_sandbox::Sandbox::new(self.wasm_cache.as_deref())
                    .map_err(|e| Error::Sandbox(Arc::new(e)))
            })
            .as_ref()
            .map_err(|e| StepError::terminal(e.to_string()))
    }

    /// `db.query`'s pools: one per database, shared by every run.
    pub fn db_pools(&self) -> &sluice_db::Pools {
        self.db.get_or_init(|| {
            let d = &self.settings.db;
            sluice_db::Pools::new(sluice_db::PoolSettings {
                max_connections: d.max_connections.clamp(1, 64),
                idle_close: d.idle_close,
                connect_timeout: d.connect_timeout,
            })
        })
    }

    /// The shared HTTP client; an error names a bad `tls.extra_roots` file
    /// or `[http] allow`/`deny` entry.
    pub fn http_client(&self) -> crate::Result<&reqwest::Client> {
        self.http_client_and_policy().map(|(c, _)| c)
    }

    /// The shared client and the policy of where it may connect (which
    /// `http.request` checks at every hop).
    pub fn http_client_and_policy(&self) -> crate::Result<(&reqwest::Client, &NetPolicy)> {
        self.http()
            .map(|(c, p)| (c, p))
            .map_err(|e| StepError::terminal(e.to_string()))
    }

    /// The addresses the trigger port listens on: `http.request` refuses
    /// them (a workflow fed by a webhook caller must not call the API).
    pub fn set_own_addresses(&self, addrs: Vec<std::net::SocketAddr>) {
        self.own.set(addrs);
    }

    /// Where the trigger port listens (empty until it is bound).
    pub fn own_addresses(&self) -> Vec<std::net::SocketAddr> {
        self.own.get()
    }

    /// Builds the client now, so a bad setting is reported at start.
    pub fn check(&self) -> Result<(), Error> {
        self.http().map(|_| ()).map_err(Clone::clone)
    }

    fn http(&self) -> Result<&(reqwest::Client, NetPolicy), &Error> {
        self.http
            .get_or_init(|| {
                let built = || -> Result<_, http::ClientError> {
                    let h = &self.settings.http;
                    let policy = NetPolicy::new(&h.allow, &h.deny, self.own.clone())?;
                    let client = http::build_client(&self.settings, &policy)?;
                    Ok((client, policy))
                };
                built().map_err(|e| Error::Http(Arc::new(e)))
            })
            .as_ref()
    }
}
