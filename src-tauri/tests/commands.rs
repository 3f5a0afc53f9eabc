//! The app's commands through Tauri's IPC, on the mock runtime, over a real
//! engine (a data dir in a temp folder, a real port).

use serde_json::{Value, json};
use sluice_desktop::{Desktop, with_commands};
use sluice_host::{Host, HostOptions};
use tauri::Manager;
use tauri::test::{INVOKE_KEY, get_ipc_response, mock_builder, mock_context, noop_assets};
use tauri::webview::InvokeRequest;

fn request(cmd: &str, body: Value) -> InvokeRequest {
    request_from("tauri://localhost", cmd, body)
}

fn request_from(url: &str, cmd: &str, body: Value) -> InvokeRequest {
    InvokeRequest {
        cmd: cmd.into(),
        callback: tauri::ipc::CallbackFn(0),
        error: tauri::ipc::CallbackFn(1),
        url: url.parse().unwrap(),
        body: tauri::ipc::InvokeBody::Json(body),
        headers: Default::default(),
        invoke_key: INVOKE_KEY.to_string(),
    }
}

#[test]
fn status_import_and_export_go_to_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = HostOptions::new(dir.path().join("data"));
    options.listen = "127.0.0.1:0".parse().unwrap();
    let host = tauri::async_runtime::block_on(Host::start(options)).unwrap();
    let engine = host.engine.clone();
    let base = host.base_url();
    let app = with_commands(mock_builder())
        .manage(Desktop::new(host))
        .build(mock_context(noop_assets()))
        .unwrap();
    let window = tauri::WebviewWindowBuilder::new(&app, "main", Default::default())
        .build()
        .unwrap();

    let status: Value = get_ipc_response(&window, request("status", json!({})))
        .unwrap()
        .deserialize()
        .unwrap();
    assert_eq!(status["url"], base.as_str());
    assert_eq!(status["active_runs"], 0);
    assert_eq!(
        status["data_dir"],
        dir.path().join("data").to_str().unwrap()
    );

    // Import a file: the engine has the workflow.
    let file = dir.path().join("hello.flow.json");
    std::fs::write(
        &file,
        json!({"format": "sluice.workflow/v1", "id": "hello", "name": "Hello", "nodes": [
            {"id": "start", "kind": "trigger.manual"}, {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "start", "to": "end"}]})
        .to_string(),
    )
    .unwrap();
    let id: String = get_ipc_response(&window, request("import_workflow", json!({"path": file})))
        .unwrap()
        .deserialize()
        .unwrap();
    assert_eq!(id, "hello");
    let stored = tauri::async_runtime::block_on(engine.workflow_text("hello"))
        .unwrap()
        .unwrap()
        .0;
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["name"], "Hello");

    // A broken file: an error naming it, nothing stored.
    let bad = dir.path().join("bad.flow.json");
    std::fs::write(&bad, "{\"format\": \"sluice.workflow/v1\", \"id\": ").unwrap();
    let err =
        get_ipc_response(&window, request("import_workflow", json!({"path": bad}))).unwrap_err();
    assert!(err.to_string().contains("bad.flow.json"), "{err}");

    // Export: the file holds the workflow, whole.
    let out = dir.path().join("out.flow.json");
    get_ipc_response(
        &window,
        request("export_workflow", json!({"id": "hello", "path": out})),
    )
    .unwrap();
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(exported, stored);
    let err = get_ipc_response(
        &window,
        request("export_workflow", json!({"id": "nope", "path": out})),
    )
    .unwrap_err();
    assert!(err.to_string().contains("no workflow `nope`"), "{err}");

    // Links are checked before anything opens.
    let err = get_ipc_response(
        &window,
        request("open", json!({"link": "sluice://delete/x"})),
    )
    .unwrap_err();
    assert!(err.to_string().contains("unknown kind"), "{err}");

    // Stopped: the commands say so instead of failing strangely.
    app.state::<Desktop>().stop();
    let err = get_ipc_response(&window, request("status", json!({}))).unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
}

/// The window shows the editor from the engine's port, a remote origin to
/// Tauri: under the app's real access control list (capabilities/), no
/// script there can call a command (export a workflow to any path, say),
/// while the app's own bundled page can.
#[test]
fn only_the_bundled_page_may_call_commands() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = HostOptions::new(dir.path().join("data"));
    options.listen = "127.0.0.1:0".parse().unwrap();
    let host = tauri::async_runtime::block_on(Host::start(options)).unwrap();
    let editor = format!("{}/", host.base_url());
    let app = with_commands(mock_builder())
        .manage(Desktop::new(host))
        .build(sluice_desktop::context())
        .unwrap();
    let window = tauri::WebviewWindowBuilder::new(&app, "main", Default::default())
        .build()
        .unwrap();
    let out = dir.path().join("stolen.flow.json");
    for (cmd, body) in [
        ("status", json!({})),
        ("export_workflow", json!({"id": "x", "path": out})),
        ("import_workflow", json!({"path": "/etc/passwd"})),
        ("open", json!({"link": "sluice://workflow/x"})),
    ] {
        for url in [editor.as_str(), "https://evil.example/"] {
            let err = get_ipc_response(&window, request_from(url, cmd, body.clone())).unwrap_err();
            assert!(
                err.to_string().contains("not allowed"),
                "{cmd} from {url}: {err}"
            );
        }
    }
    assert!(!out.exists());
    // The bundled page (the local origin) may.
    let status: Value = get_ipc_response(&window, request("status", json!({})))
        .unwrap()
        .deserialize()
        .unwrap();
    assert_eq!(status["active_runs"], 0);
    // Another window is granted nothing, even from the local origin.
    let other = tauri::WebviewWindowBuilder::new(&app, "other", Default::default())
        .build()
        .unwrap();
    let err = get_ipc_response(&other, request("status", json!({}))).unwrap_err();
    assert!(err.to_string().contains("not allowed"), "{err}");
}

#[test]
fn the_webview_draws_on_the_cpu_only_without_a_gpu_or_when_told() {
    use sluice_desktop::{Rendering, choose_rendering};
    let choose = |setting, gpu| choose_rendering(setting, gpu).unwrap();
    assert_eq!(choose(None, true), Rendering::Gpu);
    assert_eq!(choose(None, false), Rendering::Cpu);
    assert_eq!(choose(Some("auto"), false), Rendering::Cpu);
    assert_eq!(choose(Some("on"), false), Rendering::Gpu);
    assert_eq!(choose(Some(" off "), true), Rendering::Cpu);
    let err = choose_rendering(Some("yes"), true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SLUICE_WEBVIEW_GPU=yes: expected on, off or auto"
    );
}
