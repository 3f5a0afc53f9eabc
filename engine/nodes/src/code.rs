//! The code kinds, both run in the sandbox (`engine/sandbox`) with the
//! node's limits and a fresh instance per call; log lines reach the run log
//! as they are written.
//!
//! - `code.js`: the `source` is the body of an async function with `input`
//!   in scope, run by QuickJS compiled to WebAssembly.
//! - `code.wasm`: a user-supplied WebAssembly component (the `sluice:node`
//!   world, `engine/sandbox/wit/node.wit`). The module is a blob (by hash)
//!   in the blob store, compiled once per process (and cached on disk).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_sandbox::{Capabilities, Error as SandboxError, Limits, LogLine, Outcome};

use sluice_model::kinds::{JsConfig, WasmConfig};

use crate::{Call, Error, Outputs, Result, config, out};

pub(crate) async fn js(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<JsConfig>(call)?;
    let sandbox = call.io.sandbox()?;
    let input = input_json(call, cfg.input)?;
    let limits = limits(call, cfg.timeout_ms, cfg.memory_mb, cfg.fuel);
    let outcome = with_live_log(call, cfg.log, |caps| {
        sandbox.run_js(&cfg.source, &input, limits, caps)
    })
    .await;
    let outputs = output(outcome)?;
    if cfg.ports.is_empty() {
        return Ok(outputs);
    }
    by_port(outputs, &cfg.ports)
}

/// With `ports`, the returned object holds a message per port.
fn by_port(outputs: Outputs, ports: &[String]) -> Result<Outputs> {
    let value = outputs
        .into_iter()
        .next()
        .map(|(_, v)| v)
        .unwrap_or_else(|| Arc::new(Value::Null));
    let Value::Object(map) = &*value else {
        return Err(Error::terminal(format!(
            "the code has ports ({}): return an object with a message per port, not {}",
            ports.join(", "),
            crate::type_name(&value)
        )));
    };
    let mut out = Vec::with_capacity(map.len());
    for (port, msg) in map {
        if !ports.iter().any(|p| p == port) {
            return Err(Error::terminal(format!(
                "the code returned a message for port `{port}`, which is not one of its ports ({})",
                ports.join(", ")
            )));
        }
        if !msg.is_null() {
            out.push((port.clone(), Arc::new(msg.clone())));
        }
    }
    Ok(out)
}

pub(crate) async fn wasm(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<WasmConfig>(call)?;
    let module = cfg.module.to_ascii_lowercase();
    let sandbox = call.io.sandbox()?;
    if !sandbox.is_loaded(&module) {
        let path = call.host.blob_path(&module).map_err(|e| {
            Error::terminal(format!(
                "module {module}: {} (add it with `sluice modules add FILE`)",
                e.message
            ))
        })?;
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| Error::terminal(format!("module {module}: cannot read it: {e}")))?;
        let sb = sandbox.clone();
        // Compiling is CPU work: off the async threads.
        let id = tokio::task::spawn_blocking(move || sb.load(&bytes))
            .await
            .map_err(|e| Error::terminal(format!("module {module}: {e}")))?
            .map_err(|e| Error::terminal(format!("module {module}: {e}")))?;
        if id != module {
            return Err(Error::terminal(format!(
                "module {module}: the stored bytes hash to {id} (the blob store is damaged)"
            )));
        }
    }
    let input = input_json(call, cfg.input)?;
    let limits = limits(call, cfg.timeout_ms, cfg.memory_mb, cfg.fuel);
    let outcome = with_live_log(call, cfg.log, |caps| {
        sandbox.run(&module, &input, limits, caps)
    })
    .await;
    output(outcome)
}

/// `config.input` (evaluated) or the message, as JSON text.
fn input_json(call: &Call<'_>, input: Option<Value>) -> Result<String> {
    let text = match &input {
        Some(v) => serde_json::to_string(v),
        None => serde_json::to_string(&*call.scope.input),
    };
    text.map_err(|e| Error::terminal(format!("the input is not JSON: {e}")))
}

/// The node's limits, defaulting to `[sandbox]`.
fn limits(
    call: &Call<'_>,
    timeout_ms: Option<u64>,
    memory_mb: Option<u64>,
    fuel: Option<u64>,
) -> Limits {
    let defaults = &call.io.settings.sandbox;
    Limits {
        timeout: Duration::from_millis(timeout_ms.unwrap_or(defaults.timeout_ms)),
        memory: (memory_mb.unwrap_or(defaults.memory_mb) as usize) << 20,
        fuel,
        ..Limits::default()
    }
}

/// Runs `invoke` with a log sink that forwards lines to the run log as the
/// guest writes them, so they survive a guest then stopped at a limit.
async fn with_live_log<F>(
    call: &Call<'_>,
    log: bool,
    invoke: impl FnOnce(Capabilities) -> F,
) -> std::result::Result<Outcome, SandboxError>
where
    F: Future<Output = std::result::Result<Outcome, SandboxError>>,
{
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<LogLine>();
    let caps = Capabilities {
        log,
        sink: Some(Arc::new(move |line| {
            tx.send(line).ok();
        })),
    };
    let run = invoke(caps);
    tokio::pin!(run);
    let result = loop {
        tokio::select! {
            Some(line) = lines.recv() => call.host.log(&line.level, &line.message),
            result = &mut run => break result,
        }
    };
    while let Ok(line) = lines.try_recv() {
        call.host.log(&line.level, &line.message);
    }
    result
}

fn output(outcome: std::result::Result<Outcome, SandboxError>) -> Result<Outputs> {
    let outcome = outcome.map_err(|e| Error::terminal(e.to_string()))?;
    match outcome.result {
        Ok(text) => {
            let value =
                sluice_sandbox::parse_output(&text).map_err(|e| Error::terminal(e.to_string()))?;
            out(Arc::new(value))
        }
        Err(message) => Err(Error::terminal(message)),
    }
}
