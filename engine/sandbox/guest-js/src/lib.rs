//! The JavaScript runtime behind `code.js`: QuickJS (through rquickjs) as a
//! WebAssembly module the sandbox runs with a fresh instance per call.
//!
//! - `wizer-initialize` creates the runtime and context and installs
//!   `console` and `Math.random`; the host snapshots the instance right after
//!   (Wizer), so a call starts with a ready JS context instead of building
//!   one.
//! - `sluice_alloc(len)` gives the host room for the source and the input;
//!   `sluice_run(source, input, seed)` runs the code and returns where the
//!   answer is: `o` + the output JSON, or `e` + an error object
//!   (`{"name", "message", "line"?, "column"?}`; lines and columns are in
//!   the user's source).
//! - Imports: `sluice.log(level, ptr, len)` and rquickjs's clock
//!   (`env.__rquickjs_host_now_us`). Nothing else: no files, no sockets, no
//!   environment, not even WASI.
#![allow(clippy::missing_safety_doc)]

mod jq;

use std::cell::RefCell;

use rquickjs::function::Func;
use rquickjs::{CaughtError, Context, Ctx, Function, Promise, Runtime, Value};

#[link(wasm_import_module = "env")]
unsafe extern "C" {
    /// The host's clock, in microseconds since the Unix epoch (the import
    /// rquickjs declares too).
    #[link_name = "__rquickjs_host_now_us"]
    fn host_now_us() -> f64;
}

/// Now, in microseconds since the Unix epoch.
pub(crate) fn now_us() -> f64 {
    // SAFETY: a host function with no arguments.
    unsafe { host_now_us() }
}

#[link(wasm_import_module = "sluice")]
unsafe extern "C" {
    /// A log line: level 0 debug, 1 info, 2 warn, 3 error; UTF-8 text.
    #[link_name = "log"]
    fn host_log(level: u32, ptr: *const u8, len: usize);
}

/// The file name errors and stack traces give the user's code.
const FILE: &str = "code.js";
/// QuickJS stops recursion (with a RangeError) before the 1 MiB stack ends.
const MAX_STACK: usize = 768 << 10;

/// Installed once, before the snapshot. The helpers are taken off the global
/// object, so user code only sees `console` and `Math.random`.
const PRELUDE: &str = r#"(() => {
  const log = globalThis.__sluice_log, rnd = globalThis.__sluice_random;
  delete globalThis.__sluice_log;
  delete globalThis.__sluice_random;
  const show = (v) => {
    if (typeof v === "string") return v;
    if (v instanceof Error) return v.name + ": " + v.message;
    if (typeof v === "function") return "[function " + (v.name || "anonymous") + "]";
    if (typeof v === "bigint") return v + "n";
    if (typeof v === "symbol" || v === undefined) return String(v);
    try {
      const s = JSON.stringify(v);
      return s === undefined ? String(v) : s;
    } catch (e) {
      return String(v);
    }
  };
  const at = (level) => (...args) => { log(level, args.map(show).join(" ")); };
  globalThis.console = Object.freeze({
    debug: at(0), log: at(1), info: at(1), warn: at(2), error: at(3),
  });
  Object.defineProperty(Math, "random", {
    value: function random() { return rnd(); }, writable: true, configurable: true,
  });
})();"#;

/// n8n's semantics (items, expressions, core nodes) as the global `n8n`,
/// for workflows imported from n8n.
const N8N: &str = include_str!("n8n.js");

struct Js {
    // Dropped in this order: the context before its runtime.
    context: Context,
    _runtime: Runtime,
}

thread_local! {
    static JS: RefCell<Option<Js>> = const { RefCell::new(None) };
    /// Math.random's state, seeded by the host on every call (a snapshot
    /// would otherwise give every call the same numbers).
    static RNG: RefCell<u64> = const { RefCell::new(0x9E37_79B9_7F4A_7C15) };
    /// The last answer; lives until the instance is dropped.
    static ANSWER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn log(level: u32, message: &str) {
    // SAFETY: the host reads `len` bytes at `ptr` during the call.
    unsafe { host_log(level, message.as_ptr(), message.len()) }
}

/// wyrand: small, fast, good enough for Math.random.
fn random() -> f64 {
    RNG.with(|s| {
        let mut s = s.borrow_mut();
        *s = s.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(*s) * u128::from(*s ^ 0xe703_7ed1_a0b4_28db);
        let r = ((t >> 64) as u64) ^ (t as u64);
        (r >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[unsafe(export_name = "wizer-initialize")]
pub extern "C" fn initialize() {
    let runtime = Runtime::new().expect("a QuickJS runtime");
    runtime.set_max_stack_size(MAX_STACK);
    let context = Context::full(&runtime).expect("a QuickJS context");
    context.with(|ctx| {
        let globals = ctx.globals();
        globals
            .set(
                "__sluice_log",
                Func::from(|level: u32, message: String| log(level.min(3), &message)),
            )
            .expect("__sluice_log");
        globals
            .set("__sluice_random", Func::from(random))
            .expect("__sluice_random");
        ctx.eval::<(), _>(PRELUDE).expect("the prelude");
        ctx.eval::<(), _>(N8N).expect("the n8n library");
    });
    // Garbage from the set-up is not worth snapshotting.
    runtime.run_gc();
    JS.with(|js| {
        *js.borrow_mut() = Some(Js {
            context,
            _runtime: runtime,
        })
    });
}

/// Room for `len` bytes the host writes (never freed: the instance is
/// thrown away after one call).
#[unsafe(no_mangle)]
pub extern "C" fn sluice_alloc(len: usize) -> *mut u8 {
    let mut buf = Vec::<u8>::with_capacity(len.max(1));
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr
}

/// Runs `source` (a function body) on `input` (JSON text). Returns the
/// answer's address in the high 32 bits and its length in the low 32.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_run(
    source: *const u8,
    source_len: usize,
    input: *const u8,
    input_len: usize,
    seed: u64,
) -> u64 {
    // SAFETY: the host wrote these ranges through `sluice_alloc`.
    let (source, input) = unsafe {
        (
            std::slice::from_raw_parts(source, source_len),
            std::slice::from_raw_parts(input, input_len),
        )
    };
    RNG.with(|s| *s.borrow_mut() = seed);
    // Without a snapshot (benchmarks), every instance starts QuickJS itself.
    if JS.with(|js| js.borrow().is_none()) {
        initialize();
    }
    let answer = match (std::str::from_utf8(source), std::str::from_utf8(input)) {
        (Ok(source), Ok(input)) => run(source, input),
        _ => error_answer("TypeError", "the source or the input is not UTF-8", None),
    };
    ANSWER.with(|a| {
        let mut a = a.borrow_mut();
        *a = answer;
        ((a.as_ptr() as u64) << 32) | a.len() as u64
    })
}

/// Runs the jq `program` on `input` (JSON text): `o` + a JSON array of the
/// outputs (at most `max_outputs`), or `e` + an error object. Same memory
/// convention as [`sluice_run`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_jq(
    program: *const u8,
    program_len: usize,
    input: *const u8,
    input_len: usize,
    max_outputs: u32,
) -> u64 {
    // SAFETY: the host wrote these ranges through `sluice_alloc`.
    let (program, input) = unsafe {
        (
            std::slice::from_raw_parts(program, program_len),
            std::slice::from_raw_parts(input, input_len),
        )
    };
    let answer = match (std::str::from_utf8(program), std::str::from_utf8(input)) {
        (Ok(program), Ok(input)) => match jq::run(program, input, max_outputs as usize) {
            Ok(json) => {
                let mut out = Vec::with_capacity(json.len() + 1);
                out.push(b'o');
                out.extend_from_slice(json.as_bytes());
                out
            }
            Err(message) => error_answer("jq", &message, None),
        },
        _ => error_answer("jq", "the program or the input is not UTF-8", None),
    };
    ANSWER.with(|a| {
        let mut a = a.borrow_mut();
        *a = answer;
        ((a.as_ptr() as u64) << 32) | a.len() as u64
    })
}

fn run(source: &str, input: &str) -> Vec<u8> {
    JS.with(|js| {
        let js = js.borrow();
        let Some(js) = js.as_ref() else {
            return error_answer("Error", "the runtime was not initialized", None);
        };
        js.context.with(|ctx| match call(&ctx, source, input) {
            Ok(json) => {
                let mut out = Vec::with_capacity(json.len() + 1);
                out.push(b'o');
                out.extend_from_slice(json.as_bytes());
                out
            }
            Err(e) => describe(&ctx, e),
        })
    })
}

/// The wrapper puts the body on the line after this one, so a line in the
/// wrapped text is one more than in the user's source.
const HEAD: &str = "(async function (input) {\n";

fn call<'js>(ctx: &Ctx<'js>, source: &str, input: &str) -> Result<String, CaughtError<'js>> {
    use rquickjs::CatchResultExt;
    let mut text = String::with_capacity(HEAD.len() + source.len() + 4);
    text.push_str(HEAD);
    text.push_str(source);
    text.push_str("\n})");
    let mut options = rquickjs::context::EvalOptions::default();
    options.global = true;
    options.strict = false;
    options.filename = Some(FILE.into());
    let f: Function = ctx.eval_with_options(text, options).catch(ctx)?;
    let input: Value = ctx.json_parse(input).catch(ctx)?;
    let promise: Promise = f.call((input,)).catch(ctx)?;
    let value: Value = match promise.finish::<Value>() {
        Err(rquickjs::Error::WouldBlock) => {
            return Err(CaughtError::Error(rquickjs::Error::new_from_js_message(
                "promise",
                "value",
                "the code is waiting for something that never happens (an await that never settles)",
            )));
        }
        other => other.catch(ctx)?,
    };
    let json = ctx.json_stringify(value).catch(ctx)?;
    Ok(match json {
        Some(s) => s.to_string().catch(ctx)?,
        None => "null".into(),
    })
}

fn describe<'js>(ctx: &Ctx<'js>, e: CaughtError<'js>) -> Vec<u8> {
    match e {
        CaughtError::Exception(ex) => {
            let name: Option<String> = ex.get("name").ok();
            let message = ex.message().unwrap_or_default();
            let place = ex.stack().as_deref().and_then(place_in_source).or_else(|| {
                // Syntax errors carry their place as properties.
                let line: Option<u32> = ex.get("lineNumber").ok();
                let column: Option<u32> = ex.get("columnNumber").ok();
                line.zip(column)
                    .and_then(|(l, c)| (l > 1).then(|| (l - 1, c)))
            });
            error_answer(name.as_deref().unwrap_or("Error"), &message, place)
        }
        CaughtError::Value(v) => {
            // `throw "text"` or `throw {…}`: say what was thrown.
            let shown = ctx
                .json_stringify(v.clone())
                .ok()
                .flatten()
                .and_then(|s| s.to_string().ok())
                .or_else(|| v.as_string().and_then(|s| s.to_string().ok()))
                .unwrap_or_else(|| format!("a {}", v.type_name()));
            error_answer("Error", &format!("uncaught {shown}"), None)
        }
        CaughtError::Error(e) => error_answer("Error", &e.to_string(), None),
    }
}

/// The first frame of the stack in the user's code, as (line, column) of
/// their source.
fn place_in_source(stack: &str) -> Option<(u32, u32)> {
    let marker = format!("{FILE}:");
    for line in stack.lines() {
        let Some(at) = line.find(&marker) else {
            continue;
        };
        let rest = &line[at + marker.len()..];
        let mut parts = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty());
        let l: u32 = parts.next()?.parse().ok()?;
        let c: u32 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        if l > 1 {
            return Some((l - 1, c));
        }
    }
    None
}

fn error_answer(name: &str, message: &str, place: Option<(u32, u32)>) -> Vec<u8> {
    let mut out = String::from("e{\"name\":");
    quote(&mut out, name);
    out.push_str(",\"message\":");
    quote(&mut out, message);
    if let Some((line, column)) = place {
        out.push_str(&format!(",\"line\":{line},\"column\":{column}"));
    }
    out.push('}');
    out.into_bytes()
}

/// A JSON string literal (no serde in the guest: smaller and faster).
fn quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}
