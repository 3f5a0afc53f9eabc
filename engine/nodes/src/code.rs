//! `code.wasm`: a user-supplied WebAssembly component (the `sluice:node`
//! world, `engine/sandbox/wit/node.wit`) run in the sandbox. The module is a
//! blob (by hash) in the blob store; it is compiled once per process (and
//! cached on disk), then every invocation gets a fresh instance with the
//! node's limits. Its `log` calls, stdout and stderr go to the run log.

use serde_json::Value;
use sluice_sandbox::{Capabilities, Limits};

use crate::{Call, Error, Outputs, Result, config, out};

pub(crate) async fn wasm(call: &Call<'_>) -> Result<Outputs> {
    let module = call
        .raw
        .get("module")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::terminal("config.module: missing"))?
        .to_ascii_lowercase();
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
    let evaluated = config(call)?;
    let input = match evaluated.get("input") {
        Some(v) => v.clone(),
        None => (*call.scope.input).clone(),
    };
    let input = serde_json::to_string(&input)
        .map_err(|e| Error::terminal(format!("the input is not JSON: {e}")))?;
    let defaults = &call.io.settings.sandbox;
    let num = |field: &str| call.raw.get(field).and_then(Value::as_u64);
    let limits = Limits {
        timeout: std::time::Duration::from_millis(num("timeout_ms").unwrap_or(defaults.timeout_ms)),
        memory: (num("memory_mb").unwrap_or(defaults.memory_mb) as usize) << 20,
        ..Limits::default()
    };
    // Log lines reach the run log as the guest writes them (and survive a
    // guest stopped at a limit).
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<sluice_sandbox::LogLine>();
    let caps = Capabilities {
        log: true,
        sink: Some(std::sync::Arc::new(move |line| {
            tx.send(line).ok();
        })),
    };
    let run = sandbox.run(&module, &input, limits, caps);
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
    let outcome = result.map_err(|e| Error::terminal(e.to_string()))?;
    match outcome.result {
        Ok(text) => {
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| Error::terminal(format!("the module's output is not JSON: {e}")))?;
            out(std::sync::Arc::new(value))
        }
        Err(message) => Err(Error::terminal(message)),
    }
}
