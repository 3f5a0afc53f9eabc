//! `code.js`: JavaScript on QuickJS compiled to WebAssembly (`guest-js`,
//! built from source by `build.rs`).
//!
//! The runtime is pre-initialized with Wizer on first use: instantiated
//! once, its `wizer-initialize` creates the JS runtime and context, and the
//! instance's memory and globals become a new module, compiled and cached
//! on disk like any component. Every call then gets a fresh instance of that
//! snapshot (a copy-on-write memory image from the pool), so it starts with
//! a ready context and nothing leaks from one call to the next.
//!
//! The module imports exactly two functions, both below: `sluice.log` and
//! rquickjs's clock. It has no WASI at all, so there is nothing to reach
//! files, sockets or the environment with.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use wasmtime::{Caller, Extern, InstancePre, Linker, Module, Store, UpdateDeadline};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use crate::{
    Capabilities, Captured, Crash, Error, HostError, Limiter, Limits, MAX_MEMORY, Outcome, Sandbox,
    TimeLimitHit, cache_compiled, cache_file, classify, lock, set_fuel,
};

/// The runtime as built (before Wizer).
static RUNTIME_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sluice_js.wasm"));

/// A JavaScript error from user code: its name and message, and where in
/// the user's source it was thrown (when known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsError {
    pub name: String,
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

impl std::fmt::Display for JsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.message)?;
        match (self.line, self.column) {
            (Some(l), Some(c)) if c > 0 => write!(f, " (at line {l}, column {c})"),
            (Some(l), _) => write!(f, " (at line {l})"),
            _ => Ok(()),
        }
    }
}

/// What is wrong with the bytes the JavaScript runtime answered with.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("the JavaScript runtime returned nothing")]
    Empty,
    #[error("the JavaScript runtime returned invalid UTF-8: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    #[error("the JavaScript runtime returned a broken error: {0}")]
    BrokenError(#[source] serde_json::Error),
    #[error("the JavaScript runtime returned an unknown answer (tag byte {0:#04x})")]
    UnknownTag(u8),
}

/// What is wrong with a guest's output.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("the output is nested more than 128 levels deep")]
    TooDeep(#[source] serde_json::Error),
    #[error("the output is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
}

/// Turns the bytes the JS runtime answered with into the output JSON text
/// or the code's error. Anything malformed is an error naming the problem,
/// never a panic: this is the host side of guest I/O (see `fuzz/`).
pub fn decode_js_answer(bytes: &[u8]) -> Result<Result<String, JsError>, AnswerError> {
    let (tag, rest) = bytes.split_first().ok_or(AnswerError::Empty)?;
    let text = std::str::from_utf8(rest).map_err(AnswerError::Utf8)?;
    match tag {
        b'o' => Ok(Ok(text.to_string())),
        b'e' => {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(AnswerError::BrokenError)?;
            let field = |k: &str| v.get(k).and_then(serde_json::Value::as_str);
            let number = |k: &str| {
                v.get(k)
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
            };
            Ok(Err(JsError {
                name: field("name").unwrap_or("Error").to_string(),
                message: field("message").unwrap_or_default().to_string(),
                line: number("line"),
                column: number("column"),
            }))
        }
        &other => Err(AnswerError::UnknownTag(other)),
    }
}

/// A guest's output (JSON text) as a value; the error says what is wrong
/// with it. Shared by `code.js` and `code.wasm`, and fuzzed (see `fuzz/`).
pub fn parse_output(text: &str) -> Result<serde_json::Value, OutputError> {
    serde_json::from_str(text).map_err(|e| {
        if e.to_string().starts_with("recursion limit exceeded") {
            OutputError::TooDeep(e)
        } else {
            OutputError::NotJson(e)
        }
    })
}

/// The fuzz target's body (`fuzz/fuzz_targets/guest_output.rs`), here so
/// that the unit tests run it too: bytes from a guest, decoded and parsed
/// the way `code.js` and `code.wasm` steps do.
#[doc(hidden)]
pub fn fuzz_guest_output(data: &[u8]) {
    match decode_js_answer(data) {
        Ok(Ok(text)) => {
            if let Ok(value) = parse_output(&text) {
                // What parses must print back as JSON that parses the same.
                let again = serde_json::to_string(&value).expect("a value prints");
                assert_eq!(parse_output(&again).ok(), Some(value));
            }
        }
        Ok(Err(e)) => {
            let shown = e.to_string();
            assert!(shown.starts_with(&e.name));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_output(text);
    }
    // A pointer and length the guest hands back (its answer, a log line),
    // into a memory made of the rest of the bytes.
    if let Some((head, memory)) = data.split_first_chunk::<8>() {
        let packed = u64::from_le_bytes(*head);
        let (ptr, len) = ((packed >> 32) as u32, packed as u32);
        match guest_bytes(memory, ptr, len) {
            Some(bytes) => assert_eq!(bytes.len(), len as usize),
            None => assert!(ptr as usize + len as usize > memory.len()),
        }
    }
    // What a guest writes to stdout, stderr and its log.
    crate::fuzz_capture(data);
}

/// Per-call state: the limiter and the log capture.
pub(crate) struct JsState {
    limiter: Limiter,
    output: Arc<Mutex<Captured>>,
    caps: Capabilities,
}

/// The JavaScript runtime a sandbox uses.
pub(crate) struct JsSource {
    wasm: std::borrow::Cow<'static, [u8]>,
    /// Pre-initialize with Wizer (otherwise every instance starts the JS
    /// engine itself).
    snapshot: bool,
    /// Not ours: its other imports (WASI) are answered with zeros.
    foreign: bool,
}

impl Default for JsSource {
    fn default() -> Self {
        JsSource {
            wasm: std::borrow::Cow::Borrowed(RUNTIME_WASM),
            snapshot: true,
            foreign: false,
        }
    }
}

/// Answers every import the linker lacks with zeros: a foreign runtime's
/// WASI calls (randomness, clocks) succeed and do nothing.
fn define_missing_as_zeros(linker: &mut Linker<JsState>, module: &Module) -> wasmtime::Result<()> {
    use wasmtime::{ExternType, Val};
    for import in module.imports() {
        let ExternType::Func(ty) = import.ty() else {
            continue;
        };
        if matches!(
            (import.module(), import.name()),
            ("sluice", "log") | ("env", "__rquickjs_host_now_us")
        ) {
            continue;
        }
        linker.func_new(import.module(), import.name(), ty, |_, _, results| {
            for r in results.iter_mut() {
                *r = match r {
                    Val::I64(_) => Val::I64(0),
                    Val::F32(_) => Val::F32(0),
                    Val::F64(_) => Val::F64(0),
                    _ => Val::I32(0),
                };
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The snapshot, compiled and pre-linked.
pub(crate) struct JsRuntime {
    pre: InstancePre<JsState>,
}

fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<JsState>> {
    let mut linker = Linker::new(engine);
    linker.func_wrap(
        "sluice",
        "log",
        |mut caller: Caller<'_, JsState>, level: u32, ptr: u32, len: u32| {
            let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
                return;
            };
            let (data, state) = memory.data_and_store_mut(&mut caller);
            let Some(bytes) = guest_bytes(data, ptr, len) else {
                return;
            };
            if !state.caps.log {
                return;
            }
            let level = match level {
                0 => "debug",
                1 => "info",
                2 => "warn",
                _ => "error",
            };
            lock(&state.output).log(level, &String::from_utf8_lossy(bytes));
        },
    )?;
    linker.func_wrap("env", "__rquickjs_host_now_us", || -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_micros() as f64)
    })?;
    Ok(linker)
}

fn new_store(engine: &wasmtime::Engine, limits: Limits, caps: Capabilities) -> Store<JsState> {
    let output = Arc::new(Mutex::new(Captured {
        cap: limits.output,
        sink: caps.sink.clone(),
        ..Captured::default()
    }));
    let mut store = Store::new(
        engine,
        JsState {
            limiter: Limiter {
                memory: limits.memory.min(MAX_MEMORY),
                hit: false,
            },
            output,
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
            Ok(UpdateDeadline::Yield(1))
        }
    });
    store
}

/// Reads a wizened instance's state for the snapshot.
struct Snapshotting<'a> {
    store: &'a mut Store<JsState>,
    instance: wasmtime::Instance,
}

impl InstanceState for Snapshotting<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        use wasmtime::Val;
        let global = self.instance.get_global(&mut *self.store, name);
        match global.map(|g| g.get(&mut *self.store)) {
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // Wizer only asks for the globals it exported itself.
            _ => SnapshotVal::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => contents(&[]),
        }
    }
}

impl Sandbox {
    /// Prepares the JavaScript runtime now (it is otherwise prepared on
    /// the first `code.js` call): from the disk cache in about a
    /// millisecond, else pre-initialized and compiled (seconds, once).
    pub async fn prepare_js(&self) -> Result<(), Error> {
        self.js().await.map(|_| ())
    }

    /// What the JavaScript runtime imports, as `module.name`: everything a
    /// script could ever reach outside its own memory.
    pub async fn js_imports(&self) -> Result<Vec<String>, Error> {
        let js = self.js().await?;
        Ok(js
            .pre
            .module()
            .imports()
            .map(|i| format!("{}.{}", i.module(), i.name()))
            .collect())
    }

    /// A sandbox running another JavaScript runtime with guest-js's
    /// interface, with or without the Wizer snapshot: for benchmarks that
    /// compare engines (`cargo xtask bench js-engines`), not for users.
    #[doc(hidden)]
    pub fn with_js_runtime(
        cache_dir: Option<&std::path::Path>,
        wasm: Vec<u8>,
        snapshot: bool,
    ) -> Result<Sandbox, Error> {
        let sandbox = Sandbox::new(cache_dir)?;
        let mut inner =
            Arc::try_unwrap(sandbox.inner).map_err(|_| Error::Host(HostError::Shared))?;
        let foreign = wasm.as_slice() != RUNTIME_WASM;
        inner.js_source = JsSource {
            wasm: std::borrow::Cow::Owned(wasm),
            snapshot,
            foreign,
        };
        Ok(Sandbox {
            inner: Arc::new(inner),
        })
    }

    /// The built-in JavaScript runtime's module, as built (before Wizer).
    #[doc(hidden)]
    pub fn builtin_js_runtime() -> &'static [u8] {
        RUNTIME_WASM
    }

    async fn js(&self) -> Result<&JsRuntime, Error> {
        self.inner
            .js
            .get_or_try_init(|| async {
                let this = self.clone();
                let handle = tokio::runtime::Handle::current();
                tokio::task::spawn_blocking(move || this.build_js(&handle))
                    .await
                    .map_err(|e| Error::Host(HostError::JsTask(e)))?
            })
            .await
    }

    // Deserializing a compiled module is `unsafe` in wasmtime: see below.
    #[allow(unsafe_code)]
    fn build_js(&self, rt: &tokio::runtime::Handle) -> Result<JsRuntime, Error> {
        let engine = &self.inner.engine;
        let fail = |step: &'static str, source: wasmtime::Error| {
            Error::Host(HostError::JsRuntime { step, source })
        };
        let source = &self.inner.js_source;
        let mut linker = linker(engine).map_err(|e| fail("linking", e))?;
        if source.foreign {
            let raw = Module::new(engine, &source.wasm).map_err(|e| fail("compiling", e))?;
            define_missing_as_zeros(&mut linker, &raw).map_err(|e| fail("linking", e))?;
        }
        let file = self.inner.cache_dir.as_ref().map(|d| {
            let prefix = if source.snapshot { "js-" } else { "js-raw-" };
            cache_file(d, engine, prefix, &Sandbox::id_of(&source.wasm))
        });
        // One process (and one engine) prepares it; the others wait here
        // and then load what it cached, instead of all compiling at once.
        let _preparing = file.as_deref().and_then(crate::lock_cache_entry);
        let cached = file.as_ref().filter(|f| crate::verified(f)).and_then(|f| {
            // SAFETY: the file is one this sandbox serialized into its own
            // cache dir (named by the runtime's hash and this build), not
            // user input, and its bytes are the ones written (`verified`);
            // wasmtime also checks that it was produced by a compatible
            // engine and configuration.
            unsafe { Module::deserialize_file(engine, f) }.ok()
        });
        let module = match cached {
            Some(m) => m,
            None => {
                let module = if source.snapshot {
                    let snapshot = rt.block_on(self.wizen(&linker))?;
                    Module::new(engine, &snapshot).map_err(|e| fail("compiling the snapshot", e))?
                } else {
                    Module::new(engine, &source.wasm).map_err(|e| fail("compiling", e))?
                };
                // SAFETY (deserialize_file): as above; this process has
                // just written the file.
                cache_compiled(file.as_deref(), module, Module::serialize, |f| unsafe {
                    Module::deserialize_file(engine, f)
                })
            }
        };
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| fail("linking", e))?;
        Ok(JsRuntime { pre })
    }

    /// Runs the runtime's initializer once and snapshots the result.
    async fn wizen(&self, linker: &Linker<JsState>) -> Result<Vec<u8>, Error> {
        let fail = |step: &'static str, source: wasmtime::Error| {
            Error::Host(HostError::JsRuntime { step, source })
        };
        let wizer = Wizer::new();
        let (cx, instrumented) = wizer
            .instrument(&self.inner.js_source.wasm)
            .map_err(|e| fail("instrumenting", e))?;
        let engine = &self.inner.engine;
        let module = Module::new(engine, &instrumented).map_err(|e| fail("compiling", e))?;
        let limits = Limits {
            timeout: std::time::Duration::from_secs(60),
            memory: MAX_MEMORY,
            output: 64 << 10,
            fuel: None,
        };
        let mut store = new_store(engine, limits, Capabilities::default());
        let instance = linker
            .instantiate_async(&mut store, &module)
            .await
            .map_err(|e| fail("instantiating", e))?;
        let init = instance
            .get_typed_func::<(), ()>(&mut store, wizer.get_init_func())
            .map_err(|e| fail("finding the initializer", e))?;
        init.call_async(&mut store, ())
            .await
            .map_err(|e| fail("initializing", e))?;
        wizer
            .snapshot(
                &cx,
                &mut Snapshotting {
                    store: &mut store,
                    instance,
                },
            )
            .await
            .map_err(|e| fail("snapshotting", e))
    }

    /// Runs `source` (a JavaScript function body with `input` in scope) on
    /// `input` (JSON text) in a fresh instance of the runtime, on the
    /// sandbox's own threads. `Outcome::result` is the output JSON text, or
    /// the code's error (see [`JsError`]) as text.
    pub async fn run_js(
        &self,
        source: &str,
        input: &str,
        limits: Limits,
        caps: Capabilities,
    ) -> Result<Outcome, Error> {
        let Some(rt) = &self.inner.runtime else {
            return Err(Error::Host(HostError::ShutDown));
        };
        let this = self.clone();
        let (source, input) = (source.to_string(), input.to_string());
        let handle = rt.spawn(async move { this.run_js_here(&source, &input, limits, caps).await });
        let _abort = crate::AbortOnDrop(handle.abort_handle());
        handle
            .await
            .map_err(|e| Error::Host(HostError::TaskEnded(e)))?
    }

    async fn run_js_here(
        &self,
        source: &str,
        input: &str,
        limits: Limits,
        caps: Capabilities,
    ) -> Result<Outcome, Error> {
        let js = self.js().await?;
        let mut store = new_store(&self.inner.engine, limits, caps);
        let output = store.data().output.clone();
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let deadline = Instant::now() + limits.timeout;
        let entry = Entry::Js { seed };
        let result = call(self, js, &mut store, source, input, entry, deadline).await;
        let hit_memory = store.data().limiter.hit;
        drop(store);
        let (logs, dropped) = {
            let mut c = lock(&output);
            c.finish(limits.output);
            (std::mem::take(&mut c.lines), c.dropped)
        };
        match result {
            Ok(bytes) => {
                let answer = decode_js_answer(&bytes).map_err(Crash::Answer)?;
                Ok(Outcome {
                    result: answer.map_err(|e| e.to_string()),
                    logs,
                    dropped_output: dropped,
                })
            }
            Err(e) => Err(classify(e, hit_memory, limits)),
        }
    }
}

/// Which of the runtime's entry points a call uses.
#[derive(Clone, Copy)]
enum Entry {
    /// `sluice_run(source, input, seed)`: JavaScript.
    Js { seed: u64 },
    /// `sluice_jq(program, input, max_outputs)`: jq.
    Jq { max_outputs: u32 },
}

impl Sandbox {
    /// Runs the jq `program` on `input` (JSON text) in a fresh instance of
    /// the script runtime (jaq), under `limits`: a program that recurses
    /// without end exhausts the guest's stack, one that loops stops at the
    /// time limit, and neither touches the engine's own threads. The inner
    /// result is the JSON array of the outputs (at most `max_outputs`), or
    /// the program's own error message (data it produced, like
    /// [`Outcome::result`]'s, not a failure of the sandbox).
    pub async fn run_jq(
        &self,
        program: &str,
        input: &str,
        max_outputs: u32,
        limits: Limits,
    ) -> Result<Result<String, String>, Error> {
        let Some(rt) = &self.inner.runtime else {
            return Err(Error::Host(HostError::ShutDown));
        };
        let this = self.clone();
        let (program, input) = (program.to_string(), input.to_string());
        let handle = rt.spawn(async move {
            let js = this.js().await?;
            let mut store = new_store(&this.inner.engine, limits, Capabilities::default());
            let entry = Entry::Jq { max_outputs };
            let deadline = Instant::now() + limits.timeout;
            let result = call(&this, js, &mut store, &program, &input, entry, deadline).await;
            let hit_memory = store.data().limiter.hit;
            drop(store);
            match result {
                Ok(bytes) => match decode_js_answer(&bytes).map_err(Crash::Answer)? {
                    Ok(json) => Ok(Ok(json)),
                    Err(e) => Ok(Err(e.message)),
                },
                // The runtime's shadow stack sits at the bottom of its
                // memory (`--stack-first`): jaq recursing past it wraps
                // around to an address out of bounds. Nothing else in our
                // own runtime touches memory it does not own.
                Err(e)
                    if e.downcast_ref::<wasmtime::Trap>()
                        == Some(&wasmtime::Trap::MemoryOutOfBounds) =>
                {
                    Err(Error::Trap(Crash::ProgramTooDeep(e)))
                }
                Err(e) => Err(classify(e, hit_memory, limits)),
            }
        });
        let _abort = crate::AbortOnDrop(handle.abort_handle());
        handle
            .await
            .map_err(|e| Error::Host(HostError::TaskEnded(e)))?
    }
}

/// Instantiates the runtime in a free slot and calls `entry`, ending at
/// `deadline` wherever it is (see `Sandbox::run_here`).
async fn call(
    sandbox: &Sandbox,
    js: &JsRuntime,
    store: &mut Store<JsState>,
    source: &str,
    input: &str,
    entry: Entry,
    deadline: Instant,
) -> wasmtime::Result<Vec<u8>> {
    let work = async {
        let _slot = sandbox.slot().await?;
        call_in_slot(js, store, source, input, entry).await
    };
    match tokio::time::timeout_at(deadline.into(), work).await {
        Ok(r) => r,
        Err(_elapsed) => Err(wasmtime::Error::new(TimeLimitHit)),
    }
}

async fn call_in_slot(
    js: &JsRuntime,
    store: &mut Store<JsState>,
    source: &str,
    input: &str,
    entry: Entry,
) -> wasmtime::Result<Vec<u8>> {
    let instance = js.pre.instantiate_async(&mut *store).await?;
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| wasmtime::Error::msg("the runtime exports no memory"))?;
    let alloc = instance.get_typed_func::<u32, u32>(&mut *store, "sluice_alloc")?;
    let mut put = async |bytes: &[u8]| -> wasmtime::Result<(u32, u32)> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| wasmtime::Error::msg("the source or input is over 4 GiB"))?;
        let ptr = alloc.call_async(&mut *store, len).await?;
        memory.write(&mut *store, ptr as usize, bytes)?;
        Ok((ptr, len))
    };
    let (sp, sl) = put(source.as_bytes()).await?;
    let (ip, il) = put(input.as_bytes()).await?;
    let packed = match entry {
        Entry::Js { seed } => {
            let run = instance
                .get_typed_func::<(u32, u32, u32, u32, u64), u64>(&mut *store, "sluice_run")?;
            run.call_async(&mut *store, (sp, sl, ip, il, seed)).await?
        }
        Entry::Jq { max_outputs } => {
            let run = instance
                .get_typed_func::<(u32, u32, u32, u32, u32), u64>(&mut *store, "sluice_jq")?;
            run.call_async(&mut *store, (sp, sl, ip, il, max_outputs))
                .await?
        }
    };
    let (ptr, len) = ((packed >> 32) as u32, packed as u32);
    guest_bytes(memory.data(&*store), ptr, len)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| wasmtime::Error::msg("the runtime answered outside its memory"))
}

/// The bytes a guest points at in its own memory, if they are all in it.
fn guest_bytes(memory: &[u8], ptr: u32, len: u32) -> Option<&[u8]> {
    let ptr = ptr as usize;
    memory.get(ptr..ptr.checked_add(len as usize)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decode() {
        assert_eq!(
            decode_js_answer(b"o{\"a\":1}").unwrap(),
            Ok("{\"a\":1}".into())
        );
        let e =
            decode_js_answer(br#"e{"name":"TypeError","message":"x is null","line":3,"column":7}"#)
                .unwrap()
                .unwrap_err();
        assert_eq!(e.to_string(), "TypeError: x is null (at line 3, column 7)");
        let e = decode_js_answer(br#"e{"message":"m"}"#)
            .unwrap()
            .unwrap_err();
        assert_eq!(e.to_string(), "Error: m");
        let answer_error = |bytes: &[u8]| decode_js_answer(bytes).unwrap_err().to_string();
        assert_eq!(answer_error(b""), "the JavaScript runtime returned nothing");
        assert_eq!(
            answer_error(b"x1"),
            "the JavaScript runtime returned an unknown answer (tag byte 0x78)"
        );
        assert!(
            answer_error(b"e{").starts_with("the JavaScript runtime returned a broken error: ")
        );
        assert!(
            answer_error(b"o\xff").starts_with("the JavaScript runtime returned invalid UTF-8: ")
        );
        assert_eq!(
            parse_output(&format!("{}{}", "[".repeat(200), "]".repeat(200)))
                .unwrap_err()
                .to_string(),
            "the output is nested more than 128 levels deep"
        );
        assert!(
            parse_output("{\"a\":")
                .unwrap_err()
                .to_string()
                .starts_with("the output is not JSON: ")
        );
    }

    /// The fuzz target's body over random and mutated answers: a quick,
    /// deterministic stand-in for `cargo fuzz run guest_output`.
    #[test]
    fn guest_output_survives_garbage() {
        let seeds: [&[u8]; 7] = [
            b"o{\"total\":15,\"items\":[1,2.5,\"x\",null,true,{\"\\u00e9\":[]}]}",
            br#"e{"name":"RangeError","message":"bad","line":4294967296,"column":-1}"#,
            b"o\"\\ud800\"",
            b"o1e999999",
            b"o[[[[[[[[[[]]]]]]]]]]",
            b"e{\"name\":1,\"message\":[2]}",
            // Found by `cargo fuzz run guest_output`: without serde_json's
            // `float_roundtrip`, this number came back one ulp off.
            b"o10013358428028034712600133584280280347126441",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for seed in seeds {
            fuzz_guest_output(seed);
            for _ in 0..2000 {
                let mut data = seed.to_vec();
                for _ in 0..(next() % 4 + 1) {
                    let r = next();
                    let at = (r as usize >> 8) % (data.len() + 1);
                    match r % 3 {
                        0 if at < data.len() => data[at] = (r >> 32) as u8,
                        1 => data.insert(at, (r >> 40) as u8),
                        _ if at < data.len() => {
                            data.remove(at);
                        }
                        _ => {}
                    }
                }
                fuzz_guest_output(&data);
            }
        }
        for len in 0..64 {
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            fuzz_guest_output(&data);
        }
    }
}
