//! The trigger port (DESIGN §5): webhooks at `/hook/{workflow}/{path}` and the
//! REST API at `/api/v1`, with the security defaults a careful user expects:
//! a bearer token for the API, Host and Origin checks against DNS rebinding
//! and cross-site requests, and body limits.
//!
//! Architecture invariant: only this crate knows HTTP; errors are mapped to
//! HTTP responses once, in [`ApiError`].
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod accept;
mod api;
mod error;
pub mod hook;
mod live;
mod openapi;
mod peers;
mod resume;
mod security;
mod ui;

pub use ui::Codes;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use sluice_runtime::Engine;

pub use error::ApiError;
pub use live::{Incoming, Refused, decode as decode_ws_message};
pub use security::{ensure_token, ensure_token_new};

/// The port Sluice listens on when none is given (127.0.0.1 only).
pub const DEFAULT_PORT: u16 = 4260;

/// Server settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The address the listener is bound to (for the Host check).
    pub listen: SocketAddr,
    /// Largest request body, in bytes (413 beyond).
    pub body_limit: usize,
    /// How long a `when_finished` webhook waits before answering 202.
    pub webhook_timeout: Duration,
    /// The editor's built files (`index.html`, `pkg/`), served at `/`.
    pub ui_dir: Option<std::path::PathBuf>,
    /// The editor built into the binary (path → bytes), served when there
    /// is no `ui_dir` (release builds embed it: `cargo xtask run`).
    pub ui_embedded: &'static [(&'static str, &'static [u8])],
    /// One-time sign-in codes for the editor (`/ui/login?code=…`).
    pub codes: Arc<Codes>,
    /// Open connections (WebSockets included) beyond which the oldest idle
    /// one is closed for a new one, or the new one refused when none is idle.
    pub max_connections: usize,
    /// A client must send complete request headers within this long after
    /// connecting or after its previous response (the keep-alive idle
    /// timeout too).
    pub header_read_timeout: Duration,
    /// This install as a peer, started at its first use (None: peers are off).
    pub peers: Option<sluice_peers::LazyPeers>,
}

impl Options {
    pub fn new(listen: SocketAddr) -> Options {
        Options {
            listen,
            body_limit: 16 * 1024 * 1024,
            webhook_timeout: Duration::from_secs(30),
            ui_dir: None,
            ui_embedded: &[],
            codes: Arc::new(Codes::default()),
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(30),
            peers: None,
        }
    }
}

/// What every handler reads, behind one `Arc`: axum clones the state for
/// each layer and extractor of every request, and one reference count
/// (rather than one per field, shared between the workers' caches) is what
/// each clone then costs.
#[derive(Clone)]
struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

struct Shared {
    engine: Engine,
    token: Arc<str>,
    codes: Arc<Codes>,
    options: Arc<Options>,
    /// Webhook signatures already used (replays are refused).
    replays: Arc<hook::Replays>,
    /// Editors waiting for a call to a webhook's test URL.
    listeners: Arc<hook::Listeners>,
}

/// The whole HTTP surface.
pub fn router(engine: Engine, token: &str, options: Options) -> Router {
    let body_limit = options.body_limit;
    let state = AppState(Arc::new(Shared {
        engine,
        token: Arc::from(token),
        codes: options.codes.clone(),
        options: Arc::new(options),
        replays: Arc::default(),
        listeners: Arc::default(),
    }));
    let protect = |r: Router<AppState>| {
        r.route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::require_token,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::check_host_and_origin,
        ))
    };
    let api = protect(api::routes());
    // Bound to loopback only, nobody elsewhere can call a webhook: then a
    // foreign Host can only be a DNS-rebinding web page.
    let hooks = if state.options.listen.ip().is_loopback() {
        hook::routes().route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::check_host,
        ))
    } else {
        hook::routes()
    };
    let metrics = protect(Router::new().route("/metrics", axum::routing::get(api::metrics)));
    // The editor: signing in and its files, behind the Host check only
    // (the fallback checks it itself).
    let ui = Router::new()
        .route("/ui/login", axum::routing::get(ui::login))
        .fallback(ui::static_file)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::check_host,
        ));
    Router::new()
        .nest("/api/v1", api)
        .merge(metrics)
        .route("/openapi.json", axum::routing::get(openapi::document))
        .merge(hooks)
        .merge(ui)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            request_timeout,
        ))
        .with_state(state)
}

/// No request takes longer than the webhook wait plus a margin: a handler
/// stuck on I/O answers 408 instead of holding the connection forever.
async fn request_timeout(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let limit = state.options.webhook_timeout + Duration::from_secs(30);
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "the request took too long",
        )
        .into_response(),
    }
}

/// Serves until `shutdown` resolves, then stops accepting, closes idle
/// connections and lets requests in progress finish. Connections are bounded
/// (`max_connections`, the oldest idle one closed for a new one) and must
/// send their request headers in time (`header_read_timeout`): idle or
/// silent clients cannot use up the process's file descriptors.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Engine,
    token: &str,
    options: Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = accept::Limits {
        max_connections: options.max_connections.max(1),
        header_read_timeout: options.header_read_timeout,
    };
    let app = router(engine, token, options);
    accept::run(listener, app, limits, shutdown).await;
    Ok(())
}

/// Raises the soft limit on open files to the hard one (as Go does at
/// start): connections, the store and file watches share it. Returns the
/// soft limit in force.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit; getrlimit writes only into it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut want = lim.rlim_max.min(1 << 20);
    if cfg!(target_os = "macos") {
        want = want.min(10_240); // OPEN_MAX: macOS refuses more
    }
    if want > lim.rlim_cur {
        let new = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: a valid rlimit; only the soft limit is raised, never above the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
            lim.rlim_cur = want;
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
    Ok(lim.rlim_cur as u64)
}

/// The connection cap that leaves room under an open-files limit of
/// `nofile` for the store, the journal, the caches and outbound requests.
pub fn connection_cap(wanted: usize, nofile: u64) -> usize {
    let nofile = usize::try_from(nofile).unwrap_or(usize::MAX);
    let reserve = (nofile / 8).max(256);
    wanted.min(nofile.saturating_sub(reserve)).max(1)
}

/// Whether binding this address exposes the port beyond this machine.
pub fn is_exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Reads the token of a data dir (for clients such as tests and the CLI).
pub fn read_token(data_dir: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(data_dir.join("api-token"))?
        .trim()
        .to_string())
}
