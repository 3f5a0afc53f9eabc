//! The sandbox against a real component (tests/guest, built for
//! wasm32-wasip2 once per test binary and compiled once into a disk cache):
//! results, time and memory limits, denied capabilities, bounded output,
//! traps that fail only their own invocation, and many at once.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sluice_sandbox::{Capabilities, Error, Limits, Sandbox};

/// The test guest's bytes, built once.
fn guest() -> &'static [u8] {
    static GUEST: OnceLock<Vec<u8>> = OnceLock::new();
    GUEST.get_or_init(|| {
        let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/guest/Cargo.toml");
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("guest");
        sluice_sandbox::build_component(&manifest, &target, "sluice_test_guest").unwrap()
    })
}

fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasm-cache")
}

/// One sandbox per test binary, with the guest loaded.
fn sandbox() -> (&'static Sandbox, String) {
    static SANDBOX: OnceLock<(Sandbox, String)> = OnceLock::new();
    let (s, id) = SANDBOX.get_or_init(|| {
        let s = Sandbox::new(Some(&cache_dir())).unwrap();
        let id = s.load(guest()).unwrap();
        (s, id)
    });
    (s, id.clone())
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

#[tokio::test]
async fn computes_results_and_logs() {
    let (s, id) = sandbox();
    let out = s
        .run(&id, r#"{"n": 1}"#, limits(5000), caps())
        .await
        .unwrap();
    assert_eq!(out.result, Ok(r#"{"echo": {"n": 1}}"#.to_string()));
    let out = s
        .run(&id, r#"{"do": "log"}"#, limits(5000), caps())
        .await
        .unwrap();
    let lines: Vec<(&str, &str)> = out
        .logs
        .iter()
        .map(|l| (l.level.as_str(), l.message.as_str()))
        .collect();
    assert!(
        lines.contains(&("info", "hello from the guest")),
        "{lines:?}"
    );
    assert!(lines.contains(&("info", "to stdout")), "{lines:?}");
    assert!(lines.contains(&("warn", "to stderr")), "{lines:?}");
    // An error the guest returns is its answer, not a crash.
    let out = s
        .run(&id, r#"{"do": "fail"}"#, limits(5000), caps())
        .await
        .unwrap();
    assert_eq!(out.result, Err("the guest says no".to_string()));
}

#[tokio::test]
async fn an_endless_loop_stops_at_the_time_limit_and_never_blocks_the_engine() {
    let (s, id) = sandbox();
    let t = Instant::now();
    let err = s
        .run(&id, r#"{"do": "loop"}"#, limits(300), caps())
        .await
        .unwrap_err();
    let took = t.elapsed();
    assert!(matches!(err, Error::TimeLimit(_)), "{err}");
    assert_eq!(err.to_string(), "stopped at the time limit of 300 ms");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );

    // More endless loops than the sandbox has threads, for 3 s: a call made
    // meanwhile still runs, because a looping guest yields at every tick.
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let id = id.clone();
            tokio::spawn(async move { s.run(&id, r#"{"do": "loop"}"#, limits(3000), caps()).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    let out = s.run(&id, "[2]", limits(5000), caps()).await.unwrap();
    let quick = t.elapsed();
    assert_eq!(out.result, Ok(r#"{"echo": [2]}"#.to_string()));
    let mut loops_took = Vec::new();
    for l in loops {
        let r = l.await.unwrap();
        assert!(matches!(r, Err(Error::TimeLimit(_))), "{r:?}");
        loops_took.push(t.elapsed());
    }
    assert!(
        quick < Duration::from_millis(1000),
        "a call behind 4 endless loops took {quick:?} (the loops ended {loops_took:?} after it started)"
    );
}

#[tokio::test]
async fn allocating_without_bound_stops_at_the_memory_limit() {
    let (s, id) = sandbox();
    let lim = Limits {
        memory: 32 << 20,
        ..limits(10_000)
    };
    let err = s
        .run(&id, r#"{"do": "alloc"}"#, lim, caps())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MemoryLimit(_)), "{err}");
    assert_eq!(err.to_string(), "stopped at the memory limit of 32 MiB");
}

#[tokio::test]
async fn files_sockets_and_the_environment_are_out_of_reach() {
    let (s, id) = sandbox();
    let out = s
        .run(&id, r#"{"do": "passwd"}"#, limits(5000), caps())
        .await
        .unwrap();
    let text = out.result.unwrap();
    assert!(text.contains("denied"), "{text}");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Sockets are not linked at all: the first socket call stops the guest
    // with an error naming it.
    let err = s
        .run(
            &id,
            &format!(r#"{{"do": "socket", "port": {port}}}"#),
            limits(5000),
            caps(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotGranted(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with("wasi:sockets/") && message.contains("has no network"),
        "{message}"
    );
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "the guest reached a socket");

    // The host has an environment (cargo runs tests with PATH and its own
    // CARGO_* variables); the guest sees none of it.
    assert!(std::env::var_os("PATH").is_some() && std::env::var_os("CARGO").is_some());
    let out = s
        .run(&id, r#"{"do": "env"}"#, limits(5000), caps())
        .await
        .unwrap();
    assert_eq!(out.result, Ok(r#"{"vars": 0, "home": false}"#.to_string()));
}

#[tokio::test]
async fn an_output_flood_is_truncated() {
    let (s, id) = sandbox();
    let out = s
        .run(&id, r#"{"do": "flood"}"#, limits(10_000), caps())
        .await
        .unwrap();
    assert_eq!(out.result, Ok(r#"{"flooded": true}"#.to_string()));
    assert!(out.dropped_output > 9 << 20, "{}", out.dropped_output);
    let kept: usize = out
        .logs
        .iter()
        .filter(|l| l.message.starts_with('x'))
        .map(|l| l.message.len() + 1)
        .sum();
    assert!(kept <= Limits::default().output, "{kept}");
    assert!(
        out.logs
            .last()
            .unwrap()
            .message
            .starts_with("output truncated:"),
        "{:?}",
        out.logs.last()
    );
}

#[tokio::test]
async fn a_trap_fails_only_its_own_invocation() {
    let (s, id) = sandbox();
    let err = s
        .run(&id, r#"{"do": "trap"}"#, limits(5000), caps())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Trap(_)), "{err}");
    assert!(err.to_string().contains("unreachable"), "{err}");
    // Fresh instance: the next call is unaffected.
    let out = s.run(&id, "[1]", limits(5000), caps()).await.unwrap();
    assert_eq!(out.result, Ok(r#"{"echo": [1]}"#.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_at_once_complete_without_starving_others() {
    let (s, id) = sandbox();
    let started = Instant::now();
    // 200 at once: every tenth loops until its 3 s limit, the others answer
    // at once. The answers must not wait for the loops.
    let mut tasks = Vec::new();
    for i in 0..200 {
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let input = if i % 10 == 0 {
                r#"{"do": "loop"}"#.to_string()
            } else {
                format!("{i}")
            };
            let r = s.run(&id, &input, limits(3000), caps()).await;
            (i, r, started.elapsed())
        }));
    }
    let (mut last_quick, mut first_loop) = (Duration::ZERO, Duration::MAX);
    for t in tasks {
        let (i, r, at) = t.await.unwrap();
        if i % 10 == 0 {
            assert!(matches!(r, Err(Error::TimeLimit(_))), "{i}: {r:?}");
            first_loop = first_loop.min(at);
        } else {
            assert_eq!(r.unwrap().result, Ok(format!("{{\"echo\": {i}}}")));
            last_quick = last_quick.max(at);
        }
    }
    assert!(
        last_quick < first_loop && last_quick < Duration::from_millis(2000),
        "the last of 180 quick calls finished at {last_quick:?}, the first endless loop was stopped at {first_loop:?}"
    );
}

#[tokio::test]
async fn fuel_stops_the_same_work_at_the_same_point() {
    let (s, id) = sandbox();
    let lim = Limits {
        fuel: Some(1_000_000),
        ..limits(10_000)
    };
    let err = s
        .run(&id, r#"{"do": "loop"}"#, lim, caps())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FuelLimit(1_000_000)), "{err}");
    assert_eq!(
        err.to_string(),
        "stopped at the fuel limit of 1000000 units"
    );
    // Enough fuel for the work: the answer, as without a limit.
    let lim = Limits {
        fuel: Some(50_000_000),
        ..limits(10_000)
    };
    let out = s.run(&id, "[3]", lim, caps()).await.unwrap();
    assert_eq!(out.result, Ok(r#"{"echo": [3]}"#.to_string()));
}

#[tokio::test]
async fn without_the_log_capability_log_calls_are_dropped() {
    let (s, id) = sandbox();
    let no_log = Capabilities {
        log: false,
        sink: None,
    };
    let out = s
        .run(&id, r#"{"do": "log"}"#, limits(5000), no_log)
        .await
        .unwrap();
    let lines: Vec<&str> = out.logs.iter().map(|l| l.message.as_str()).collect();
    assert!(!lines.contains(&"hello from the guest"), "{lines:?}");
    // stdout and stderr are not the capability: kept.
    assert!(lines.contains(&"to stdout"), "{lines:?}");
}

#[tokio::test]
async fn bad_modules_are_refused_and_compiled_ones_are_cached() {
    let (s, id) = sandbox();
    let err = s.load(b"not wasm").unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    // A core module is not a component.
    let core = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
    assert!(matches!(s.load(&core), Err(Error::Invalid(_))));
    assert!(matches!(
        s.run("nope", "1", limits(100), caps()).await,
        Err(Error::Unknown(_))
    ));
    // The compiled guest is on disk, and a new sandbox loads it from there.
    let cached = std::fs::read_dir(cache_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with(&id));
    assert!(cached);
    let t = Instant::now();
    let other = Sandbox::new(Some(&cache_dir())).unwrap();
    assert_eq!(other.load(guest()).unwrap(), id);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let out = other.run(&id, "2", limits(5000), caps()).await.unwrap();
    assert_eq!(out.result, Ok(r#"{"echo": 2}"#.to_string()));
}

#[tokio::test]
async fn log_lines_reach_a_sink_live_even_from_a_guest_that_is_then_stopped() {
    let (s, id) = sandbox();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let caps = Capabilities {
        log: true,
        sink: Some(std::sync::Arc::new(move |line| {
            tx.send((Instant::now(), line)).ok();
        })),
    };
    let t = Instant::now();
    let err = s
        .run(&id, r#"{"do": "chatty-loop"}"#, limits(500), caps)
        .await
        .unwrap_err();
    let ended = Instant::now();
    assert!(matches!(err, Error::TimeLimit(_)), "{err}");
    let mut got = Vec::new();
    while let Ok((at, line)) = rx.try_recv() {
        got.push((at, line.level, line.message));
    }
    let messages: Vec<&str> = got.iter().map(|g| g.2.as_str()).collect();
    assert_eq!(
        messages,
        ["starting", "stdout before the loop", "stderr too"]
    );
    // Delivered while the guest ran, not when it ended.
    assert!(
        got.iter()
            .all(|g| g.0 < t + Duration::from_millis(400) && g.0 < ended)
    );
    assert_eq!(got[2].1, "warn");
}

/// A guest that sleeps in WASI waits in a host function, where epoch
/// deadlines never fire: it ran 20 s under a 1 s limit, and 260 of them held
/// every instance slot. The host's own deadline now ends it at its limit,
/// and the slots come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_blocked_in_a_host_call_stops_at_its_time_limit() {
    let (s, id) = sandbox();
    // Waiting is not granted: a sleep stops at once, naming the call.
    let t = Instant::now();
    let err = s
        .run(&id, r#"{"do": "sleep"}"#, limits(1000), caps())
        .await
        .unwrap_err();
    let took = t.elapsed();
    assert!(matches!(err, Error::NotGranted(_)), "{err}");
    assert!(
        err.to_string()
            .starts_with("wasi:clocks/monotonic-clock.subscribe-duration is not available"),
        "{err}"
    );
    assert!(took < Duration::from_millis(900), "{took:?}");

    // More sleepers than the pool has slots, all at once: each ends quickly,
    // and a quick call after them finds a slot.
    let t = Instant::now();
    let sleepers: Vec<_> = (0..260)
        .map(|_| {
            let id = id.clone();
            tokio::spawn(
                async move { s.run(&id, r#"{"do": "sleep"}"#, limits(1000), caps()).await },
            )
        })
        .collect();
    for sleeper in sleepers {
        let r = sleeper.await.unwrap();
        assert!(matches!(r, Err(Error::NotGranted(_))), "{r:?}");
    }
    let all = t.elapsed();
    assert!(all < Duration::from_secs(6), "260 sleepers took {all:?}");
    let out = s.run(&id, "[3]", limits(5000), caps()).await.unwrap();
    assert_eq!(out.result, Ok(r#"{"echo": [3]}"#.to_string()));
}

/// Compiled code in the cache runs as it is: a file changed on disk (by
/// damage, or by anyone who can write there) is not loaded but compiled
/// again and rewritten. (It was loaded without a check.)
#[tokio::test]
async fn a_changed_cache_file_is_never_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let first = Sandbox::new(Some(dir.path())).unwrap();
    let id = first.load(guest()).unwrap();
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(&id) && !name.ends_with(".b3")
        })
        .expect("the compiled guest is cached");
    // (It runs mapped from that file: let it go before changing the file.)
    drop(first);
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let other = Sandbox::new(Some(dir.path())).unwrap();
    assert_eq!(other.load(guest()).unwrap(), id);
    let out = other.run(&id, "4", limits(5000), caps()).await.unwrap();
    assert_eq!(out.result, Ok(r#"{"echo": 4}"#.to_string()));
    let rewritten = std::fs::read(&file).unwrap();
    assert!(rewritten != bytes, "the changed file was kept");
}
