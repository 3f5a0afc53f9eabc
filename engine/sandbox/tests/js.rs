//! `code.js` in the sandbox: QuickJS in WebAssembly, pre-initialized with
//! Wizer once per cache dir (shared by every test binary run), with a fresh
//! instance per call: results, errors with their place in the source, time
//! and memory limits, nothing to reach the machine with, bounded output,
//! crashes that fail only their own call, and many calls at once.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sluice_sandbox::{Capabilities, Error, Limits, LogLine, Sandbox};

fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache");
        Sandbox::new(Some(&dir)).unwrap()
    })
}

fn caps() -> Capabilities {
    Capabilities {
        log: true,
        sink: None,
    }
}

fn limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        ..Limits::default()
    }
}

async fn js(source: &str, input: &str) -> Result<String, String> {
    sandbox()
        .run_js(source, input, limits(5000), caps())
        .await
        .unwrap()
        .result
}

#[tokio::test]
async fn computes_results() {
    assert_eq!(
        js("return input.a + input.b", r#"{"a": 2, "b": 3}"#).await,
        Ok("5".into())
    );
    // No return: undefined is null.
    assert_eq!(js("input.a = 1", "{}").await, Ok("null".into()));
    assert_eq!(
        js(
            "return input.items.map(i => ({ ...i, total: i.qty * i.price }))",
            r#"{"items": [{"qty": 2, "price": 1.5}, {"qty": 1, "price": 10}]}"#
        )
        .await,
        Ok(r#"[{"qty":2,"price":1.5,"total":3},{"qty":1,"price":10,"total":10}]"#.into())
    );
    // `await` works: the body is an async function.
    assert_eq!(
        js(
            "const v = await Promise.resolve(input); return [v, typeof v]",
            r#""s""#
        )
        .await,
        Ok(r#"["s","string"]"#.into())
    );
    // Unicode both ways.
    assert_eq!(
        js("return input + ' ✓'", r#""grüße""#).await,
        Ok(r#""grüße ✓""#.into())
    );
    // Date.now is the real clock; Math.random differs between calls.
    let now = js("return Date.now()", "null").await.unwrap();
    let now: f64 = now.parse().unwrap();
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    assert!(
        (real - now).abs() < 5_000.0,
        "Date.now() = {now}, real {real}"
    );
    let a = js("return Math.random()", "null").await.unwrap();
    let b = js("return Math.random()", "null").await.unwrap();
    assert_ne!(a, b, "every call must get its own random numbers");
    let r: f64 = a.parse().unwrap();
    assert!((0.0..1.0).contains(&r));
}

#[tokio::test]
async fn nothing_leaks_between_calls() {
    assert_eq!(
        js(
            "globalThis.secret = input; Object.prototype.polluted = 1; return 1",
            r#""pw""#
        )
        .await,
        Ok("1".into())
    );
    assert_eq!(
        js("return [typeof secret, ({}).polluted ?? null]", "null").await,
        Ok(r#"["undefined",null]"#.into())
    );
}

#[tokio::test]
async fn console_goes_to_the_log() {
    let out = sandbox()
        .run_js(
            "console.log('hello', 1, {a: [1, 2]}, null, undefined);\n\
             console.warn('careful'); console.error(new TypeError('bad')); console.debug(2n);\n\
             return 'done'",
            "null",
            limits(5000),
            caps(),
        )
        .await
        .unwrap();
    assert_eq!(out.result, Ok(r#""done""#.into()));
    let line = |level: &str, message: &str| LogLine {
        level: level.into(),
        message: message.into(),
    };
    assert_eq!(
        out.logs,
        vec![
            line("info", r#"hello 1 {"a":[1,2]} null undefined"#),
            line("warn", "careful"),
            line("error", "TypeError: bad"),
            line("debug", "2n"),
        ]
    );
    // Without the capability the lines are dropped.
    let out = sandbox()
        .run_js(
            "console.log('x'); return 1",
            "null",
            limits(5000),
            Capabilities::default(),
        )
        .await
        .unwrap();
    assert!(out.logs.is_empty());
}

#[tokio::test]
async fn errors_name_the_place_in_the_source() {
    let err = js(
        "const a = 1;\nconst b = input.missing.field;\nreturn b",
        "{}",
    )
    .await
    .unwrap_err();
    assert!(err.starts_with("TypeError: "), "{err}");
    assert!(err.contains("at line 2, column"), "{err}");
    let err = js("\n\nthrow new RangeError('too big: ' + input)", "7")
        .await
        .unwrap_err();
    assert!(
        err.starts_with("RangeError: too big: 7 (at line 3"),
        "{err}"
    );
    // A rejected await is the same as a throw.
    let err = js("await Promise.reject(new Error('no'))", "null")
        .await
        .unwrap_err();
    assert!(err.starts_with("Error: no"), "{err}");
    // Syntax errors, found before anything runs.
    let err = js("let x = ;", "null").await.unwrap_err();
    assert!(err.starts_with("SyntaxError: "), "{err}");
    assert!(err.contains("at line 1"), "{err}");
    let err = js("const ok = 1;\nreturn {", "null").await.unwrap_err();
    assert!(err.starts_with("SyntaxError: "), "{err}");
    // Throwing something that is not an Error.
    assert_eq!(
        js("throw {code: 42}", "null").await.unwrap_err(),
        r#"Error: uncaught {"code":42}"#
    );
    // Unknown names.
    let err = js("return nope + 1", "null").await.unwrap_err();
    assert!(err.starts_with("ReferenceError: "), "{err}");
    assert!(err.contains("nope"), "{err}");
    // An await that can never settle is an error, not a hang.
    let err = js("await new Promise(() => {})", "null").await.unwrap_err();
    assert!(err.contains("never settles"), "{err}");
    // Outputs JSON cannot hold.
    let err = js("const a = {}; a.self = a; return a", "null")
        .await
        .unwrap_err();
    assert!(err.starts_with("TypeError: "), "{err}");
    let err = js("return 10n", "null").await.unwrap_err();
    assert!(err.starts_with("TypeError: "), "{err}");
    // Runaway recursion is stopped by QuickJS, cleanly, in plain calls and
    // through native functions (callbacks, JSON).
    for source in [
        "function f(n) { return f(n + 1) + 1 }\nreturn f(0)",
        "function f(n) { return [n].map(m => f(m + 1)) }\nreturn f(0)",
        "function f(n) { return JSON.stringify({toJSON: () => f(n + 1)}) }\nreturn f(0)",
        "function f(n) { return [2, 1].sort(() => f(n + 1)) }\nreturn f(0)",
    ] {
        let err = js(source, "null").await.unwrap_err();
        assert!(err.starts_with("RangeError: "), "{source}: {err}");
    }
    // So is input nested too deeply.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    // Data nested too deeply, in or out, exhausts the stack: a clean
    // failure of that call alone.
    for (source, input) in [
        ("return input", deep.as_str()),
        (
            "let a = []; for (let i = 0; i < 100000; i++) a = [a]; return a",
            "null",
        ),
    ] {
        let err = sandbox()
            .run_js(source, input, limits(5000), caps())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Trap(_)), "{err:?}");
        assert!(err.to_string().contains("nested too deeply"), "{err}");
    }
    // The sandbox is fine afterwards.
    assert_eq!(js("return 1", "null").await, Ok("1".into()));
}

#[tokio::test]
async fn an_endless_loop_stops_at_the_time_limit_and_others_go_on() {
    let s = sandbox();
    s.prepare_js().await.unwrap();
    let started = Instant::now();
    let looping = tokio::spawn(async move {
        s.run_js("while (true) {}", "null", limits(1500), caps())
            .await
    });
    // Meanwhile other calls finish quickly.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..20 {
        let t = Instant::now();
        let out = s
            .run_js("return input * 2", &i.to_string(), limits(5000), caps())
            .await;
        assert_eq!(out.unwrap().result, Ok((i * 2).to_string()));
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "call {i} took {:?}",
            t.elapsed()
        );
    }
    let err = looping.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::TimeLimit(_)), "{err:?}");
    assert_eq!(err.to_string(), "stopped at the time limit of 1500 ms");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(4),
        "{took:?}"
    );
    // A loop inside a promise chain is stopped too.
    let err = s
        .run_js("await null; for (;;) {}", "null", limits(200), caps())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimeLimit(_)), "{err:?}");
}

#[tokio::test]
async fn fuel_stops_a_script_at_the_same_point_every_time() {
    let fuel = |n| Limits {
        fuel: Some(n),
        ..limits(30_000)
    };
    // A counter the script keeps in its output as it goes: where fuel ends
    // is where it stopped, and it is the same on every run.
    let source = "for (let i = 0; ; i++) { if (i % 1000 === 0) console.log(i) }";
    let mut stopped_at = Vec::new();
    for _ in 0..2 {
        let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let seen = last.clone();
        let caps = Capabilities {
            log: true,
            sink: Some(std::sync::Arc::new(move |l: LogLine| {
                *seen.lock().unwrap() = l.message;
            })),
        };
        let err = sandbox()
            .run_js(source, "null", fuel(20_000_000), caps)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::FuelLimit(20_000_000)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "stopped at the fuel limit of 20000000 units"
        );
        stopped_at.push(last.lock().unwrap().clone());
    }
    assert!(!stopped_at[0].is_empty(), "the script logged nothing");
    assert_eq!(
        stopped_at[0], stopped_at[1],
        "fuel stopped at different points"
    );
    // Enough fuel: the answer.
    let out = sandbox()
        .run_js(
            "return input.a + input.b",
            r#"{"a": 2, "b": 3}"#,
            fuel(20_000_000),
            caps(),
        )
        .await
        .unwrap();
    assert_eq!(out.result, Ok("5".into()));
}

#[tokio::test]
async fn allocating_without_bound_stops_at_the_memory_limit() {
    let limits = Limits {
        memory: 16 << 20,
        ..limits(10_000)
    };
    for source in [
        "const keep = []; for (;;) keep.push(new Array(100000).fill(keep.length));",
        "const keep = []; for (;;) keep.push(new Uint8Array(1 << 20));",
        // Catching the failure does not help: the step still fails.
        "const keep = []; try { for (;;) keep.push('y'.repeat(1 << 20) + keep.length) } catch (e) { return 'caught' }",
    ] {
        let err = sandbox()
            .run_js(source, "null", limits, caps())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::MemoryLimit(_)), "{source}: {err:?}");
        assert_eq!(err.to_string(), "stopped at the memory limit of 16 MiB");
    }
    // A limit below what the runtime needs to start says so too.
    let tiny = Limits {
        memory: 1 << 20,
        ..limits
    };
    let err = sandbox()
        .run_js("return 1", "null", tiny, caps())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MemoryLimit(_)), "{err:?}");
    // Below the limit, big data is fine.
    let out = sandbox()
        .run_js("return 'z'.repeat(4 << 20).length", "null", limits, caps())
        .await
        .unwrap();
    assert_eq!(out.result, Ok((4 << 20).to_string()));
}

#[tokio::test]
async fn nothing_reaches_the_machine() {
    // The module imports a clock and the log, nothing else: no WASI, so no
    // files, sockets, environment or arguments, whatever the script does.
    let mut imports = sandbox().js_imports().await.unwrap();
    imports.sort();
    assert_eq!(imports, vec!["env.__rquickjs_host_now_us", "sluice.log"]);
    // And the language has no way in either.
    assert_eq!(
        js(
            "return [typeof require, typeof process, typeof std, typeof os, typeof fetch, \
             typeof XMLHttpRequest, typeof WebSocket, typeof Deno, typeof Bun, typeof scriptArgs]",
            "null"
        )
        .await,
        Ok(r#"["undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined"]"#.into())
    );
    for source in [
        "return await import('/etc/passwd')",
        "const fs = await import('fs'); return fs.readFileSync('/etc/passwd', 'utf8')",
        "const os = await import('os'); return os.getenv('HOME')",
        "return require('net').connect(80, '127.0.0.1')",
        "return std.loadFile('/etc/passwd')",
        "return process.env",
    ] {
        let err = js(source, "null").await.unwrap_err();
        assert!(!err.contains("root:"), "{source}: {err}");
        assert!(
            err.starts_with("ReferenceError: ")
                || err.starts_with("TypeError: ")
                || err.contains("module"),
            "{source}: {err}"
        );
    }
}

#[tokio::test]
async fn an_output_flood_is_truncated() {
    let out = sandbox()
        .run_js(
            "for (let i = 0; i < 200000; i++) console.log('line ' + i + ' ' + 'x'.repeat(100)); return 'survived'",
            "null",
            limits(20_000),
            caps(),
        )
        .await
        .unwrap();
    assert_eq!(out.result, Ok(r#""survived""#.into()));
    let kept: usize = out.logs.iter().map(|l| l.message.len() + 1).sum();
    assert!(kept <= (64 << 10) + 200, "kept {kept} bytes");
    assert!(out.dropped_output > 10 << 20, "{}", out.dropped_output);
    let last = out.logs.last().unwrap();
    assert_eq!(last.level, "warn");
    assert!(
        last.message.starts_with("output truncated: "),
        "{}",
        last.message
    );
    assert!(out.logs[0].message.starts_with("line 0 "));
    // One huge line is cut, not kept whole.
    let out = sandbox()
        .run_js(
            "console.log('y'.repeat(50000)); return 1",
            "null",
            limits(5000),
            caps(),
        )
        .await
        .unwrap();
    assert!(
        out.logs[0].message.len() <= 4096 + 3,
        "{}",
        out.logs[0].message.len()
    );
}

#[tokio::test]
async fn many_calls_at_once_do_not_starve_others() {
    let s = sandbox();
    s.prepare_js().await.unwrap();
    let started = Instant::now();
    // 200 calls, each busy for 20 ms of wall-clock time.
    let busy = "const end = Date.now() + 20; let n = 0; while (Date.now() < end) n++; return input";
    let batch = tokio::spawn(async move {
        let calls = (0..200).map(|i| {
            let input = i.to_string();
            async move { s.run_js(busy, &input, limits(30_000), caps()).await }
        });
        let outs = futures_join_all(calls).await;
        (outs, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let quick = s
        .run_js("return 'quick'", "null", limits(30_000), caps())
        .await
        .unwrap();
    let quick_done = started.elapsed();
    assert_eq!(quick.result, Ok(r#""quick""#.into()));
    let (outs, batch_done) = batch.await.unwrap();
    for (i, out) in outs.into_iter().enumerate() {
        assert_eq!(out.unwrap().result, Ok(i.to_string()));
    }
    assert!(
        quick_done < batch_done,
        "a call made during the batch finished at {quick_done:?}, after the batch ({batch_done:?})"
    );
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
