//! The trigger port's accept loop (instead of `axum::serve`): HTTP/1.1 via
//! hyper with a header-read timeout, a cap on open connections that evicts
//! the oldest idle one, and accept errors that back off instead of spinning.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::Service as HyperService;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// Connection limits (from [`crate::Options`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Open connections (WebSockets included) beyond which the oldest idle
    /// one is closed for a new one, or the new one is refused.
    pub max_connections: usize,
    /// A client must send a complete request head within this long after
    /// connecting or after its previous response (also the keep-alive idle timeout).
    pub header_read_timeout: Duration,
}

/// Serves `app` until `shutdown` resolves, then stops accepting, closes idle
/// connections, lets requests in progress finish and returns.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = http1::Builder::new();
    // Without a timer hyper silently ignores its header timeout (and panics
    // if one is configured).
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let registry = Arc::new(Registry::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(());
    let mut backoff = Backoff::default();
    let mut refusing = false;
    let mut next_id: u64 = 0;
    let mut shutdown = pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => {
                    backoff.reset();
                    tcp
                }
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // EMFILE and the like: the connection stays queued and
                    // accept fails again at once, so free a descriptor if a
                    // connection is idle, and wait before trying again.
                    if is_out_of_files(&e) {
                        registry.evict_oldest_idle();
                    }
                    let wait = backoff.next();
                    if wait == Backoff::MIN {
                        eprintln!("sluice: accepting a connection failed: {e}; retrying");
                    }
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(wait) => continue,
                    }
                }
            },
        };
        let Some((conn, slot)) = registry.admit(next_id, limits.max_connections) else {
            // At the cap and every connection is busy: close the new one.
            if !std::mem::replace(&mut refusing, true) {
                eprintln!(
                    "sluice: {} connections open, all busy; refusing new ones",
                    limits.max_connections
                );
            }
            drop(tcp);
            continue;
        };
        refusing = false;
        next_id += 1;
        tcp.set_nodelay(true).ok(); // optional, see notes §4
        let io = TokioIo::new(Io {
            tcp,
            conn: Arc::clone(&conn),
            _slot: slot,
        });
        let service = ConnService {
            app: TowerToHyperService::new(app.clone()),
            conn: Arc::clone(&conn),
        };
        let connection = http.serve_connection(io, service).with_upgrades();
        tokio::spawn(drive(connection, conn, stop_rx.clone(), done_rx.clone()));
    }
    // Stop accepting: the port closes, new connects are refused.
    drop(listener);
    stop_tx.send_replace(true);
    drop(stop_rx);
    drop(done_rx);
    // Every connection task holds a `done_rx`; WebSockets are not waited for.
    done_tx.closed().await;
}

type Connection = http1::UpgradeableConnection<TokioIo<Io>, ConnService>;

/// Runs one connection until it ends, it is evicted, or the server stops.
async fn drive(
    connection: Connection,
    conn: Arc<Conn>,
    mut stop: watch::Receiver<bool>,
    _done: watch::Receiver<()>,
) {
    let mut connection = pin!(connection);
    tokio::select! {
        biased;
        // Polled first: a request whose head has already arrived is read
        // (and counted as in flight) before the check below.
        _ = connection.as_mut() => return,
        () = conn.evict.notified() => {}
        Ok(_) = stop.wait_for(|stop| *stop) => {}
    }
    if conn.is_idle() {
        // Idle keep-alive, or still reading a head: close the socket now.
        // (graceful_shutdown would wait for a partial head.)
        return;
    }
    // A request is in flight: finish it; hyper then closes the connection.
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

const EVICTED: usize = 1 << (usize::BITS - 1);
const UPGRADED: usize = 1 << (usize::BITS - 2);

/// One connection as the accept loop and its task see it.
#[derive(Default)]
struct Conn {
    /// Requests in flight (low bits; a request is in flight from the service
    /// call until its response is on the socket) plus EVICTED / UPGRADED.
    state: AtomicUsize,
    /// Responses hyper has finished with whose last bytes may still be in
    /// its write buffer; cleared by the next flush (see `Io::poll_flush`).
    unflushed: AtomicUsize,
    /// Told when the accept loop picks this connection to close.
    evict: Notify,
}

impl Conn {
    /// No request in flight and not a WebSocket.
    fn is_idle(&self) -> bool {
        self.state.load(Ordering::Acquire) & !EVICTED == 0
    }

    fn is_evicted(&self) -> bool {
        self.state.load(Ordering::Acquire) & EVICTED != 0
    }

    /// Claims this connection for closing if it is idle, and tells its task.
    fn try_evict(&self) -> bool {
        let claimed = self
            .state
            .compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if claimed {
            self.evict.notify_one(); // stores a permit if the task is not waiting yet
        }
        claimed
    }
}

/// Open connections, oldest first.
#[derive(Default)]
struct Registry {
    conns: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection, first closing the oldest idle one when at
    /// `cap`; `None` when at the cap with nothing idle.
    fn admit(self: &Arc<Self>, id: u64, cap: usize) -> Option<(Arc<Conn>, Slot)> {
        let mut conns = self.lock();
        if conns.len() >= cap {
            // Connections already told to close hold their socket a moment
            // longer: do not close another one for them.
            let closing = conns.values().filter(|c| c.is_evicted()).count();
            if conns.len() - closing >= cap && !conns.values().any(|c| c.try_evict()) {
                return None;
            }
        }
        let conn = Arc::new(Conn::default());
        conns.insert(id, Arc::clone(&conn));
        Some((
            conn,
            Slot {
                id,
                registry: Arc::clone(self),
            },
        ))
    }

    fn evict_oldest_idle(&self) -> bool {
        self.lock().values().any(|c| c.try_evict())
    }
}

/// A connection's place in the registry, freed when its socket closes.
struct Slot {
    id: u64,
    registry: Arc<Registry>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

/// The socket with its slot. hyper hands this object to a WebSocket on
/// upgrade, so an open WebSocket keeps counting against the cap.
struct Io {
    tcp: TcpStream,
    conn: Arc<Conn>,
    _slot: Slot,
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored() // hyper picks writev vs. flatten from this
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.tcp).poll_flush(cx);
        // hyper flushes the socket only once its own write buffer is empty:
        // every response it has finished with is now wholly on the socket.
        if flushed.is_ready() {
            let done = this.conn.unflushed.swap(0, Ordering::AcqRel);
            if done > 0 {
                this.conn.state.fetch_sub(done, Ordering::AcqRel);
            }
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The router, counting the requests in flight on its connection.
struct ConnService {
    app: TowerToHyperService<Router>,
    conn: Arc<Conn>,
}

impl HyperService<Request<Incoming>> for ConnService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.conn.state.fetch_add(1, Ordering::AcqRel);
        let in_flight = InFlight(Arc::clone(&self.conn));
        // (ConnectInfo, if ever needed: req.extensions_mut().insert(axum::extract::ConnectInfo(peer)))
        let response = self.app.call(req);
        Box::pin(async move {
            let Ok(response) = response.await; // Result<_, Infallible> (irrefutable since Rust 1.82)
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                // A WebSocket: never idle again (and never evicted).
                in_flight.0.state.fetch_or(UPGRADED, Ordering::AcqRel);
            }
            Ok::<_, Infallible>(response.map(|body| TrackedBody {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// Dropped by hyper with the response body, once its last bytes are in
/// hyper's write buffer.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.unflushed.fetch_add(1, Ordering::AcqRel);
    }
}

/// A response body that ends its request's "in flight" when dropped.
struct TrackedBody {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        // axum's Body is Unpin (a Pin<Box<dyn Body>> inside).
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint() // keeps Content-Length
    }
}

/// 10 ms doubling to 1 s.
#[derive(Default)]
struct Backoff(Duration);

impl Backoff {
    const MIN: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    fn reset(&mut self) {
        self.0 = Duration::ZERO;
    }

    fn next(&mut self) -> Duration {
        self.0 = (self.0 * 2).clamp(Self::MIN, Self::MAX);
        self.0
    }
}

/// Errors about one connection only (Linux's accept also reports network
/// errors pending on the new socket): try the next one at once.
fn is_connection_error(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted
            | ConnectionReset
            | ConnectionRefused
            | Interrupted
            | WouldBlock
            | NetworkDown
            | NetworkUnreachable
            | HostUnreachable
            | TimedOut
            | PermissionDenied
    )
}

/// Out of descriptors (or socket memory): closing an idle connection helps.
#[cfg(unix)]
fn is_out_of_files(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

#[cfg(not(unix))]
fn is_out_of_files(_: &io::Error) -> bool {
    true
}
