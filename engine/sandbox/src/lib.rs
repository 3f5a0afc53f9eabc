//! The sandbox: user code as WebAssembly components on wasmtime, with hard
//! limits and no ambient authority.
//!
//! - One shared [`wasmtime::Engine`] with the pooling allocator (instances
//!   and memories come from preallocated slots, memories are copy-on-write
//!   images); a fresh instance per invocation, so nothing leaks between runs.
//! - Components are compiled once and cached on disk (serialized, keyed by
//!   the component's hash and the wasmtime version), and kept pre-linked in
//!   memory.
//! - Limits per invocation: wall-clock time (epoch interruption; a guest
//!   also yields to other tasks at every tick, so a busy guest never starves
//!   the engine), memory (a resource limiter that traps on the growth past
//!   the limit), and output (stdout/stderr are captured, bounded, and
//!   truncated with a note).
//! - No capabilities unless granted: no preopened directories, no sockets,
//!   no name lookups, an empty environment. Host functions are
//!   capabilities granted per node: today `log` (see `wit/node.wit`); the
//!   [`Capabilities`] seam is where e.g. an allow-listed HTTP client goes.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime::{ResourceLimiter, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

mod grant;
mod js;
pub use grant::NotGranted;
pub use js::{
    AnswerError, JsError, OutputError, decode_js_answer, fuzz_guest_output, parse_output,
};

wasmtime::component::bindgen!({
    path: "wit",
    world: "node",
    exports: { default: async },
});

/// How often the epoch advances: the granularity of time limits, and how
/// often a running guest yields to other tasks.
const TICK: Duration = Duration::from_millis(5);
/// Invocations that can run at once (pool slots).
const SLOTS: u32 = 256;
/// The most memory any guest may be given.
pub const MAX_MEMORY: usize = 512 << 20;

/// Limits of one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for instantiation plus the call.
    pub timeout: Duration,
    /// Linear memory, in bytes.
    pub memory: usize,
    /// Captured stdout plus stderr, in bytes; the rest is dropped.
    pub output: usize,
    /// Fuel: roughly one unit per WebAssembly instruction, for instantiation
    /// plus the call. `None`: only the time limit bounds the work. Unlike
    /// time, fuel stops the same code at the same point on every machine.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(5),
            memory: 64 << 20,
            output: 64 << 10,
            fuel: None,
        }
    }
}

/// Receives a guest's log lines as they are written.
pub type LogSink = Arc<dyn Fn(LogLine) + Send + Sync>;

/// Host capabilities granted to one invocation.
#[derive(Clone, Default)]
pub struct Capabilities {
    /// Whether the guest's `log` calls are kept (stdout and stderr always
    /// are, within the output limit).
    pub log: bool,
    /// Where log lines go as they are written (`log` calls, and stdout and
    /// stderr line by line), so they reach the run log live and survive a
    /// guest that is then stopped. Without one they are collected in
    /// [`Outcome::logs`].
    pub sink: Option<LogSink>,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("log", &self.log)
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

/// A log line a guest wrote (through `log`, stdout or stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: String,
    pub message: String,
}

/// What an invocation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The guest's answer: its output JSON text, or its error message. The
    /// message is the guest's own (data it returned, shown to the user as
    /// it is), not a failure of the sandbox: those are [`Error`].
    pub result: Result<String, String>,
    /// Without a [`Capabilities::sink`]: `log` calls, stdout lines (`info`)
    /// and stderr lines (`warn`), in the order written.
    pub logs: Vec<LogLine>,
    /// Output bytes dropped beyond [`Limits::output`].
    pub dropped_output: usize,
}

/// Why an invocation (or loading a component, or starting the sandbox)
/// failed. The limits and [`Error::Trap`] are the guest's doing;
/// [`Error::Host`] is the sandbox's own.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// wasmtime refused the bytes (its error says why).
    #[error("not a valid WebAssembly component for the sluice:node world: {0:#}")]
    Invalid(#[source] wasmtime::Error),
    /// No component with this id was loaded.
    #[error("no component {0} was loaded")]
    Unknown(String),
    #[error("stopped at the time limit of {} ms", .0.as_millis())]
    TimeLimit(Duration),
    #[error("stopped at the memory limit of {} MiB", .0 >> 20)]
    MemoryLimit(usize),
    #[error("stopped at the fuel limit of {0} units")]
    FuelLimit(u64),
    #[error("the guest crashed: {0}")]
    Trap(#[from] Crash),
    /// The guest called something it is not granted (a file, a socket, a
    /// timer): the message names the call.
    #[error(transparent)]
    NotGranted(NotGranted),
    #[error("sandbox: {0}")]
    Host(#[from] HostError),
}

/// How a guest crashed.
#[derive(Debug, thiserror::Error)]
pub enum Crash {
    /// The guest's call stack ran out.
    #[error("call stack exhausted: recursion or data nested too deeply")]
    StackExhausted(#[source] wasmtime::Error),
    /// A jq program recursed past the runtime's stack (see
    /// [`Sandbox::run_jq`]).
    #[error("call stack exhausted: the program recursed too deeply")]
    ProgramTooDeep(#[source] wasmtime::Error),
    /// A WebAssembly trap: its kind and the first line of wasmtime's
    /// message (wasm backtraces follow on later lines).
    #[error("{trap}: {}", first_line(source))]
    Trap {
        trap: wasmtime::Trap,
        #[source]
        source: wasmtime::Error,
    },
    /// Any other failure of the call.
    #[error("{0:#}")]
    Other(#[source] wasmtime::Error),
    /// The JavaScript runtime answered with something malformed.
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

/// A failure of the sandbox itself (not of the guest): starting the
/// engine or its threads, the compile cache, the JavaScript runtime.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// wasmtime's engine or linker could not be set up.
    #[error("{0:#}")]
    Engine(#[source] wasmtime::Error),
    #[error("cannot start the epoch thread: {0}")]
    EpochThread(#[source] std::io::Error),
    #[error("cannot start the sandbox threads: {0}")]
    Threads(#[source] std::io::Error),
    #[error("cannot create {}: {source}", path.display())]
    CacheDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the sandbox is shut down")]
    ShutDown,
    /// The task running the guest panicked or was cancelled.
    #[error("the guest's task ended: {0}")]
    TaskEnded(#[source] tokio::task::JoinError),
    /// [`Sandbox::with_js_runtime`] needs the only handle to a new sandbox.
    #[error("the sandbox is shared")]
    Shared,
    /// The task preparing the JavaScript runtime panicked.
    #[error("preparing the JavaScript runtime: {0}")]
    JsTask(#[source] tokio::task::JoinError),
    /// Preparing the JavaScript runtime failed at `step` (compiling,
    /// linking, snapshotting…).
    #[error("the JavaScript runtime: {step}: {source:#}")]
    JsRuntime {
        step: &'static str,
        #[source]
        source: wasmtime::Error,
    },
}

/// Building a guest crate failed ([`build_component`]).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot run cargo: {0}")]
    Cargo(#[source] std::io::Error),
    #[error("building {} failed (is the wasm32-wasip2 target installed?)", .0.display())]
    Failed(PathBuf),
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The time limit was hit (carried through wasmtime's error).
#[derive(Debug, thiserror::Error)]
#[error("time limit")]
struct TimeLimitHit;

/// The memory limit was hit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit")]
struct MemoryLimitHit;

/// The wasmtime engine, the linker and the compiled components. Cheap to
/// clone; share one per process.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    /// Guests run on threads of their own: however busy they are, the
    /// engine's runtime (other steps, runs, the API) never waits for them.
    runtime: Option<tokio::runtime::Runtime>,
    linker: Linker<GuestState>,
    cache_dir: Option<PathBuf>,
    loaded: Mutex<HashMap<String, NodePre<GuestState>>>,
    /// The JavaScript runtime, prepared on first use.
    js: tokio::sync::OnceCell<js::JsRuntime>,
    /// Which runtime: the built-in one, or another (engine comparisons).
    js_source: js::JsSource,
    /// One permit per instance slot of the pool: a call waits for a free
    /// slot (within its time limit) instead of failing when all are taken.
    slots: Arc<tokio::sync::Semaphore>,
    stop: Arc<AtomicBool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping a runtime blocks, which an async context forbids.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Aborts a guest's task when the step awaiting it goes away.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("cache_dir", &self.inner.cache_dir)
            .finish()
    }
}

/// Per-invocation state: WASI (no capabilities), the output capture, the
/// limiter and the log.
struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    output: Arc<Mutex<Captured>>,
    caps: Capabilities,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl NodeImports for GuestState {
    fn log(&mut self, level: String, message: String) {
        if !self.caps.log {
            return;
        }
        let level = match level.as_str() {
            "debug" | "info" | "warn" | "error" => level.as_str(),
            _ => "info",
        };
        lock(&self.output).log(level, &message);
    }
}

/// The longest log line kept; longer ones are cut.
const MAX_LINE: usize = 4096;

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

struct Limiter {
    memory: usize,
    hit: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory {
            self.hit = true;
            return Err(wasmtime::Error::new(MemoryLimitHit));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// Captured output shared by stdout and stderr: bounded; past the bound,
/// writes succeed (the guest goes on) and the bytes are counted, not kept.
#[derive(Clone)]
struct Capture {
    inner: Arc<Mutex<Captured>>,
    stream: u8,
}

/// The guest's log lines: sent to the sink as they complete, or kept.
#[derive(Default)]
struct Captured {
    sink: Option<LogSink>,
    /// Lines kept when there is no sink.
    lines: Vec<LogLine>,
    /// The unfinished last line of stdout (0) and stderr (1).
    partial: [Vec<u8>; 2],
    kept: usize,
    cap: usize,
    dropped: usize,
}

fn lock(m: &Mutex<Captured>) -> std::sync::MutexGuard<'_, Captured> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Captured {
    fn emit(&mut self, line: LogLine) {
        match &self.sink {
            Some(sink) => sink(line),
            None => self.lines.push(line),
        }
    }

    /// A `log` call: counted against the output limit like stdout, so a
    /// guest cannot flood the journal either way.
    fn log(&mut self, level: &str, message: &str) {
        let len = message.len() + 1;
        if self.kept + len > self.cap {
            self.dropped += len;
            return;
        }
        self.kept += len;
        let message = truncate(message.to_string(), MAX_LINE);
        self.emit(LogLine {
            level: level.into(),
            message,
        });
    }

    fn push(&mut self, stream: u8, buf: &[u8]) {
        let room = self.cap.saturating_sub(self.kept);
        let take = room.min(buf.len());
        self.dropped += buf.len() - take;
        if take == 0 {
            return;
        }
        self.kept += take;
        let i = usize::from(stream == 2);
        self.partial[i].extend_from_slice(&buf[..take]);
        while let Some(nl) = self.partial[i].iter().position(|b| *b == b'\n') {
            let rest = self.partial[i].split_off(nl + 1);
            let line = std::mem::replace(&mut self.partial[i], rest);
            self.emit_line(i, &line[..nl]);
        }
    }

    fn emit_line(&mut self, i: usize, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let level = if i == 0 { "info" } else { "warn" };
        self.emit(LogLine {
            level: level.into(),
            message: text.trim_end_matches('\r').to_string(),
        });
    }

    /// Sends the unfinished lines and the truncation note.
    fn finish(&mut self, limit: usize) {
        for i in 0..2 {
            let line = std::mem::take(&mut self.partial[i]);
            if !line.is_empty() {
                self.emit_line(i, &line);
            }
        }
        if self.dropped > 0 {
            let message = format!(
                "output truncated: {} bytes beyond the {} KiB limit were dropped",
                self.dropped,
                limit >> 10
            );
            self.emit(LogLine {
                level: "warn".into(),
                message,
            });
        }
    }
}

/// Part of the fuzz target (see `js::fuzz_guest_output`): a guest's
/// writes and log calls, cut from the bytes, must be kept up to the output
/// limit, counted past it, and split into lines without losing a byte.
#[doc(hidden)]
pub fn fuzz_capture(data: &[u8]) {
    let cap = data.first().map_or(0, |b| usize::from(*b) * 8);
    let mut c = Captured {
        cap,
        ..Captured::default()
    };
    let (mut written, mut newlines, mut logs) = (0, 0, 0);
    let mut rest = data;
    while let Some((&head, tail)) = rest.split_first() {
        let n = usize::from(head & 0x3f).min(tail.len());
        let (chunk, after) = tail.split_at(n);
        if head & 0x80 != 0 {
            let message = String::from_utf8_lossy(chunk);
            written += message.len() + 1;
            logs += 1;
            c.log("info", &message);
        } else {
            newlines += chunk.iter().filter(|b| **b == b'\n').count();
            written += n;
            c.push(if head & 0x40 == 0 { 1 } else { 2 }, chunk);
        }
        rest = after;
    }
    assert!(c.kept <= cap, "kept {} beyond the limit {cap}", c.kept);
    assert_eq!(c.kept + c.dropped, written, "every byte kept or counted");
    c.finish(cap);
    if c.dropped == 0 {
        // Every line ended by a newline, plus at most one unfinished line
        // per stream.
        let lines = c.lines.len() - logs;
        assert!(
            (newlines..=newlines + 2).contains(&lines),
            "{lines} lines from {newlines} newlines"
        );
    } else {
        let last = c.lines.last().expect("the truncation note");
        assert!(last.message.starts_with("output truncated: "));
    }
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        lock(&self.inner).push(self.stream, buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl wasmtime_wasi::cli::IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for Capture {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl Sandbox {
    /// A sandbox caching compiled components in `cache_dir` (none: compile
    /// on every start of the process).
    pub fn new(cache_dir: Option<&Path>) -> Result<Sandbox, Error> {
        let host = |e: wasmtime::Error| Error::Host(HostError::Engine(e));
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(SLOTS)
            .total_core_instances(SLOTS * 8)
            .total_memories(SLOTS * 2)
            .total_tables(SLOTS * 4)
            .total_stacks(SLOTS)
            .max_core_instances_per_component(32)
            .max_memories_per_component(4)
            .max_tables_per_component(8)
            .max_memory_size(MAX_MEMORY)
            // Reset the first 4 MiB of a used memory by copying back its
            // dirty pages instead of `madvise`: unmapping pages interrupts
            // every core running the process (TLB shootdowns), which kept
            // throughput flat however many cores ran guests (code.js:
            // 3,100 → 23,700 calls/s on 2 cores, 64 at a time).
            .linear_memory_keep_resident(4 << 20)
            .table_keep_resident(1 << 20);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            // Always on, so a node can set a fuel limit; a call without one
            // gets u64::MAX. Costs about 5% per call (docs/benchmarks.md).
            .consume_fuel(true)
            .memory_reservation(MAX_MEMORY as u64)
            .memory_guard_size(32 << 20)
            .memory_init_cow(true)
            // Room for QuickJS to hit its own stack limit (a RangeError the
            // code can see) before the wasm stack runs out (a trap).
            .max_wasm_stack(4 << 20)
            .async_stack_size(5 << 20)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(host)?;
        // Only what a code node is granted (DESIGN §4): see grant.rs.
        let linker = grant::granted_linker(&engine).map_err(host)?;
        let stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("sluice-sandbox-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| Error::Host(HostError::EpochThread(e)))?;
        }
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("sluice-sandbox")
            .enable_all()
            .build()
            .map_err(|e| Error::Host(HostError::Threads(e)))?;
        if let Some(dir) = cache_dir {
            std::fs::create_dir_all(dir).map_err(|source| {
                Error::Host(HostError::CacheDir {
                    path: dir.to_path_buf(),
                    source,
                })
            })?;
        }
        Ok(Sandbox {
            inner: Arc::new(Inner {
                engine,
                runtime: Some(runtime),
                linker,
                cache_dir: cache_dir.map(Path::to_path_buf),
                loaded: Mutex::new(HashMap::new()),
                js: tokio::sync::OnceCell::new(),
                js_source: js::JsSource::default(),
                slots: Arc::new(tokio::sync::Semaphore::new(SLOTS as usize)),
                stop,
            }),
        })
    }

    /// The id of a component (its blake3 hash, hex).
    pub fn id_of(bytes: &[u8]) -> String {
        blake3::hash(bytes).to_hex().to_string()
    }

    /// Makes a component ready to run: from memory, else from the disk
    /// cache, else compiled (and cached). Returns its id.
    pub fn load(&self, bytes: &[u8]) -> Result<String, Error> {
        let id = Sandbox::id_of(bytes);
        if self.loaded().contains_key(&id) {
            return Ok(id);
        }
        let component = self.compile_cached(&id, bytes)?;
        // The granted interfaces, and a stop for each `wasi:*` function it
        // imports beyond them (see grant.rs).
        let linker = grant::linker_for(&self.inner.linker, &component).map_err(Error::Invalid)?;
        let pre = linker.instantiate_pre(&component).map_err(Error::Invalid)?;
        let pre = NodePre::new(pre).map_err(Error::Invalid)?;
        self.loaded().insert(id.clone(), pre);
        Ok(id)
    }

    /// Whether component `id` is ready to run.
    pub fn is_loaded(&self, id: &str) -> bool {
        self.loaded().contains_key(id)
    }

    fn loaded(&self) -> std::sync::MutexGuard<'_, HashMap<String, NodePre<GuestState>>> {
        self.inner.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    // Deserializing a compiled component is `unsafe` in wasmtime: see below.
    #[allow(unsafe_code)]
    fn compile_cached(&self, id: &str, bytes: &[u8]) -> Result<Component, Error> {
        let engine = &self.inner.engine;
        let file = self
            .inner
            .cache_dir
            .as_ref()
            .map(|d| cache_file(d, engine, "", id));
        if let Some(file) = &file
            && verified(file)
        {
            // SAFETY: the file is one this sandbox serialized into its own
            // cache dir (named by the component's hash and this build), not
            // user input, and its bytes are the ones written (`verified`);
            // wasmtime also checks that it was produced by a compatible
            // engine and configuration.
            if let Ok(c) = unsafe { Component::deserialize_file(engine, file) } {
                return Ok(c);
            }
        }
        let component = Component::new(engine, bytes).map_err(Error::Invalid)?;
        // SAFETY (deserialize_file): as above; this process has just
        // written the file.
        Ok(cache_compiled(
            file.as_deref(),
            component,
            Component::serialize,
            |f| unsafe { Component::deserialize_file(engine, f) },
        ))
    }

    /// Runs component `id` once on `input` (JSON text) in a fresh instance,
    /// on the sandbox's own threads.
    pub async fn run(
        &self,
        id: &str,
        input: &str,
        limits: Limits,
        caps: Capabilities,
    ) -> Result<Outcome, Error> {
        let Some(rt) = &self.inner.runtime else {
            return Err(Error::Host(HostError::ShutDown));
        };
        let this = self.clone();
        let (id, input) = (id.to_string(), input.to_string());
        let handle = rt.spawn(async move { this.run_here(&id, &input, limits, caps).await });
        let _abort = AbortOnDrop(handle.abort_handle());
        handle
            .await
            .map_err(|e| Error::Host(HostError::TaskEnded(e)))?
    }

    /// Waits for a free instance slot.
    pub(crate) async fn slot(&self) -> wasmtime::Result<tokio::sync::SemaphorePermit<'_>> {
        self.inner
            .slots
            .acquire()
            .await
            .map_err(|_| wasmtime::Error::msg("the sandbox is shut down"))
    }

    async fn run_here(
        &self,
        id: &str,
        input: &str,
        limits: Limits,
        caps: Capabilities,
    ) -> Result<Outcome, Error> {
        let pre = self
            .loaded()
            .get(id)
            .cloned()
            .ok_or_else(|| Error::Unknown(id.to_string()))?;
        let captured = Arc::new(Mutex::new(Captured {
            cap: limits.output,
            sink: caps.sink.clone(),
            ..Captured::default()
        }));
        // No preopens, no environment, no network, no name lookups.
        let wasi = WasiCtxBuilder::new()
            .stdout(Capture {
                inner: captured.clone(),
                stream: 1,
            })
            .stderr(Capture {
                inner: captured.clone(),
                stream: 2,
            })
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut store = Store::new(
            &self.inner.engine,
            GuestState {
                wasi,
                table: ResourceTable::new(),
                limiter: Limiter {
                    memory: limits.memory.min(MAX_MEMORY),
                    hit: false,
                },
                output: captured.clone(),
                caps,
            },
        );
        store.limiter(|s| &mut s.limiter);
        set_fuel(&mut store, limits.fuel);
        let deadline = Instant::now() + limits.timeout;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Err(wasmtime::Error::new(TimeLimitHit))
            } else {
                // Let other tasks run, then go on.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        let work = async {
            let _slot = self.slot().await?;
            let node = pre.instantiate_async(&mut store).await?;
            node.call_run(&mut store, input).await
        };
        // Epoch deadlines fire only while wasm runs; this one ends the call
        // wherever it is, waiting in a host function (a WASI sleep or poll)
        // included. Dropping `work` cancels it: wasmtime resumes the parked
        // fiber with an error, its stack returns to the pool, and dropping
        // the store below returns the instance slot.
        let result = match tokio::time::timeout_at(deadline.into(), work).await {
            Ok(r) => r,
            Err(_elapsed) => Err(wasmtime::Error::new(TimeLimitHit)),
        };
        let hit_memory = store.data().limiter.hit;
        drop(store);
        let (logs, dropped) = {
            let mut c = lock(&captured);
            c.finish(limits.output);
            (std::mem::take(&mut c.lines), c.dropped)
        };
        match result {
            Ok(answer) => Ok(Outcome {
                result: answer,
                logs,
                dropped_output: dropped,
            }),
            Err(e) => Err(classify(e, hit_memory, limits)),
        }
    }
}

/// Gives a store its fuel: the limit, or as good as unlimited.
fn set_fuel<T>(store: &mut Store<T>, fuel: Option<u64>) {
    // Cannot fail: fuel is on in every sandbox engine.
    store.set_fuel(fuel.unwrap_or(u64::MAX)).ok();
}

/// The key of a compiled module in the disk cache: the module's hash and
/// everything that makes wasmtime's compiled code differ (its version, the
/// engine's settings, the host CPU's features). A file from another build
/// gets another name, so it is never even tried.
fn cache_file(dir: &Path, engine: &Engine, prefix: &str, id: &str) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join(format!("{prefix}{id}-{:016x}.cwasm", h.finish()))
}

/// Writes a fresh compile to its cache `file` and runs it from there: the
/// code is then mapped (shared and reclaimable) rather than held in the
/// heap. Without a cache, or if writing fails, the compile in memory is
/// used. Then hands back the memory compiling freed.
pub(crate) fn cache_compiled<T>(
    file: Option<&Path>,
    compiled: T,
    serialize: impl FnOnce(&T) -> wasmtime::Result<Vec<u8>>,
    load: impl FnOnce(&Path) -> wasmtime::Result<T>,
) -> T {
    let stored = file.filter(|f| serialize(&compiled).is_ok_and(|b| write_atomically(f, &b)));
    let compiled = match stored.map(load) {
        Some(Ok(mapped)) => mapped,
        _ => compiled,
    };
    release_freed_memory();
    compiled
}

/// Hands freed memory back to the system. Compiling a module allocates
/// tens of MiB that the allocator would otherwise keep for the life of the
/// process (the desktop app measured 39 MiB held after preparing code.js).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's own
    // arenas to the system; it takes no pointers.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

fn classify(e: wasmtime::Error, hit_memory: bool, limits: Limits) -> Error {
    if e.downcast_ref::<TimeLimitHit>().is_some() {
        return Error::TimeLimit(limits.timeout);
    }
    if let Some(n) = e.downcast_ref::<NotGranted>() {
        return Error::NotGranted(n.clone());
    }
    if hit_memory || e.downcast_ref::<MemoryLimitHit>().is_some() {
        return Error::MemoryLimit(limits.memory);
    }
    if let Some(&trap) = e.downcast_ref::<wasmtime::Trap>() {
        if trap == wasmtime::Trap::OutOfFuel {
            return Error::FuelLimit(limits.fuel.unwrap_or(u64::MAX));
        }
        if trap == wasmtime::Trap::StackOverflow {
            return Error::Trap(Crash::StackExhausted(e));
        }
        return Error::Trap(Crash::Trap { trap, source: e });
    }
    Error::Trap(Crash::Other(e))
}

/// The first line of an error's message (wasm backtraces follow on later
/// lines).
fn first_line(e: &wasmtime::Error) -> String {
    format!("{e}")
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Writes a cache file whole or not at all: a crash never leaves half a
/// file behind. Its BLAKE3 hash goes beside it (`<file>.b3`), so that a
/// file changed or damaged on disk is never loaded (see [`verified`]):
/// compiled code is run as it is, so its bytes must be the ones written.
fn write_atomically(file: &Path, bytes: &[u8]) -> bool {
    let put = |path: &Path, bytes: &[u8]| {
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_ok()
    };
    put(file, bytes) && put(&hash_file(file), blake3::hash(bytes).to_hex().as_bytes())
}

fn hash_file(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".b3");
    PathBuf::from(name)
}

/// An exclusive lock on a cache entry (`<file>.lock`), held while it is
/// looked up and, if missing, compiled and written; `None` if the lock
/// file cannot be used (then nothing waits).
pub(crate) fn lock_cache_entry(file: &Path) -> Option<std::fs::File> {
    let mut name = file.as_os_str().to_owned();
    name.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(PathBuf::from(name))
        .ok()?;
    lock.lock().ok()?;
    Some(lock)
}

/// Whether a cache file exists and hashes to what was written beside it.
pub(crate) fn verified(file: &Path) -> bool {
    let (Ok(expected), Ok(bytes)) = (std::fs::read(hash_file(file)), std::fs::read(file)) else {
        return false;
    };
    blake3::hash(&bytes).to_hex().as_bytes() == expected.as_slice()
}

/// Builds a Rust guest crate into a component (`cargo build --release
/// --target wasm32-wasip2`) and returns its bytes: for the tests, the
/// benchmark and tools that build the samples. `artifact` is the crate's
/// library name (`order_total`).
pub fn build_component(
    manifest: &Path,
    target_dir: &Path,
    artifact: &str,
) -> Result<Vec<u8>, BuildError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir)
        // A caller built under clippy (`cargo xtask test` lints as it
        // builds) would hand its lint wrapper on to the guest's own build.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .status()
        .map_err(BuildError::Cargo)?;
    if !status.success() {
        return Err(BuildError::Failed(manifest.to_path_buf()));
    }
    let path = target_dir.join(format!("wasm32-wasip2/release/{artifact}.wasm"));
    std::fs::read(&path).map_err(|source| BuildError::Read { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages keep wasmtime's whole chain (`{:#}`), as they did when
    /// they were strings, and the error is kept as the source.
    #[test]
    fn messages_show_and_keep_wasmtime_errors() {
        let chain = || wasmtime::Error::msg("root cause").context("outer");
        let e = Error::Invalid(chain());
        assert_eq!(
            e.to_string(),
            "not a valid WebAssembly component for the sluice:node world: outer: root cause"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            Error::Trap(Crash::Other(chain())).to_string(),
            "the guest crashed: outer: root cause"
        );
        let trap = Crash::Trap {
            trap: wasmtime::Trap::UnreachableCodeReached,
            source: wasmtime::Error::msg("first line\nbacktrace"),
        };
        assert_eq!(
            Error::Trap(trap).to_string(),
            format!(
                "the guest crashed: {}: first line",
                wasmtime::Trap::UnreachableCodeReached
            )
        );
        let host = HostError::JsRuntime {
            step: "linking",
            source: chain(),
        };
        assert_eq!(
            Error::Host(host).to_string(),
            "sandbox: the JavaScript runtime: linking: outer: root cause"
        );
    }
}
