//! Sluice on the desktop: the engine in-process with its trigger port, the
//! editor in a window, a tray icon, and the OS around it (single instance,
//! `sluice://` links, notifications, native file dialogs, start at login).
//!
//! The window shows the editor from the engine's own port, signed in with a
//! one-time code like the link `sluice serve` prints, so the desktop and the
//! browser are the same editor. Closing the window hides it: schedules,
//! file triggers and webhooks keep working until *Quit* in the tray, which
//! stops the engine cleanly (steps in flight finish or are journaled).
//!
//! Like `sluice serve`, the app honours `SLUICE_DATA_DIR` (default: the
//! platform's data folder) and `SLUICE_LISTEN` (default `127.0.0.1:4260`).

pub mod commands;
pub mod links;

use std::sync::Mutex;
use std::time::Duration;

use sluice_host::{Host, HostOptions};
use tauri::menu::{CheckMenuItem, Menu, MenuItem, PredefinedMenuItem, Submenu};
use tauri::tray::TrayIconBuilder;
use tauri::{AppHandle, Manager, RunEvent, Runtime, WebviewUrl, WebviewWindowBuilder, WindowEvent};
use tauri_plugin_autostart::ManagerExt as _;
use tauri_plugin_deep_link::DeepLinkExt as _;
use tauri_plugin_dialog::{DialogExt as _, MessageDialogKind};
use tauri_plugin_notification::NotificationExt as _;

use crate::links::Link;

pub const MAIN: &str = "main";

static READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// When the app started (the first call, from `run`).
fn started() -> std::time::Instant {
    *STARTED.get_or_init(std::time::Instant::now)
}
pub const TRAY: &str = "sluice-tray";

/// Why the app cannot start as configured.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SLUICE_WEBVIEW_GPU={0}: expected on, off or auto")]
    Rendering(String),
    /// `SLUICE_DATA_DIR`, `SLUICE_LISTEN`, or the engine itself.
    #[error(transparent)]
    Host(#[from] sluice_host::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the webview draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    /// WebKit's GPU compositing (its default).
    Gpu,
    /// No accelerated compositing: the page is painted on the CPU.
    Cpu,
}

/// Chooses how the webview draws: `SLUICE_WEBVIEW_GPU` (`on`, `off`, or
/// `auto`, the default) decides; `auto` turns GPU compositing off when the
/// machine has no GPU render node, where OpenGL would be Mesa's software
/// rasterizer: slower than WebKit's CPU painting, and about 80 MB more
/// memory in the web process (measured under Xvfb, docs/benchmarks.md).
/// A user's own `WEBKIT_DISABLE_COMPOSITING_MODE` always wins.
pub fn choose_rendering(setting: Option<&str>, has_render_node: bool) -> Result<Rendering> {
    match setting.map(str::trim) {
        None | Some("" | "auto") => Ok(if has_render_node {
            Rendering::Gpu
        } else {
            Rendering::Cpu
        }),
        Some("on") => Ok(Rendering::Gpu),
        Some("off") => Ok(Rendering::Cpu),
        Some(other) => Err(Error::Rendering(other.to_string())),
    }
}

/// Whether a GPU render node (`/dev/dri/renderD*`) exists.
fn has_render_node() -> bool {
    std::fs::read_dir("/dev/dri").is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
    })
}

/// Applies [`choose_rendering`] through WebKit's environment, which its
/// processes read when they start.
// `set_var` is `unsafe` because another thread could read the environment
// at the same time: see the SAFETY note.
#[allow(unsafe_code)]
fn configure_webview() {
    if cfg!(not(target_os = "linux"))
        || std::env::var_os("WEBKIT_DISABLE_COMPOSITING_MODE").is_some()
    {
        return;
    }
    let setting = std::env::var("SLUICE_WEBVIEW_GPU").ok();
    let gpu = has_render_node();
    let rendering = choose_rendering(setting.as_deref(), gpu).unwrap_or_else(|e| {
        eprintln!("sluice: {e}; using auto");
        if gpu { Rendering::Gpu } else { Rendering::Cpu }
    });
    if rendering == Rendering::Cpu {
        // SAFETY: called first thing in `run`, before Tauri, GTK, WebKit or
        // the engine start a thread: nothing reads the environment yet.
        unsafe { std::env::set_var("WEBKIT_DISABLE_COMPOSITING_MODE", "1") };
    }
}

/// The editor built into the binary (`SLUICE_EMBED_UI` at build time).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/ui_files.rs"));
}

/// What the app holds: the running engine (None once stopped).
pub struct Desktop {
    host: Mutex<Option<Host>>,
}

impl Desktop {
    pub fn new(host: Host) -> Desktop {
        Desktop {
            host: Mutex::new(Some(host)),
        }
    }

    /// Runs `f` on the host while it runs.
    pub fn with<T>(&self, f: impl FnOnce(&Host) -> T) -> Option<T> {
        self.host
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(f)
    }

    pub fn engine(&self) -> Option<sluice_runtime::Engine> {
        self.with(|h| h.engine.clone())
    }

    /// A signed-in URL of the editor at `then` (`/`, `/#/w/ID`…).
    pub fn url(&self, then: &str) -> Option<tauri::Url> {
        self.with(|h| h.login_url(then))
            .and_then(|u| u.parse().ok())
    }

    /// Stops the engine (once): no new requests, the journal flushed.
    pub fn stop(&self) {
        let host = self.host.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(host) = host {
            let stopped = tauri::async_runtime::block_on(host.stop());
            if let Err(e) = stopped {
                eprintln!("sluice: stopping the engine: {e}");
            }
        }
    }
}

/// How the engine starts: `SLUICE_DATA_DIR`, `SLUICE_LISTEN`,
/// `SLUICE_UI_DIR`, else the built-in editor, else the checkout's build.
pub fn host_options() -> Result<HostOptions> {
    let dir = sluice_host::default_data_dir()?;
    let mut options = HostOptions::new(dir);
    if let Some(listen) = sluice_host::listen_from_env()? {
        options.listen = listen;
    }
    options.ui_embedded = embedded::UI_FILES;
    options.ui_dir = std::env::var_os("SLUICE_UI_DIR")
        .filter(|d| !d.is_empty())
        .map(Into::into)
        .or_else(|| {
            let built = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/frontend/dist");
            (embedded::UI_FILES.is_empty() && built.join("index.html").is_file()).then_some(built)
        });
    Ok(options)
}

fn show_main<R: Runtime>(app: &AppHandle<R>) {
    if let Some(w) = app.get_webview_window(MAIN) {
        let _ = w.unminimize();
        let _ = w.show();
        let _ = w.set_focus();
    }
}

/// Shows `then` in the main window (creating the window if it is gone).
pub fn navigate<R: Runtime>(app: &AppHandle<R>, then: &str) {
    let Some(url) = app.state::<Desktop>().url(then) else {
        return;
    };
    match app.get_webview_window(MAIN) {
        Some(w) => {
            let _ = w.navigate(url);
        }
        None => {
            if let Err(e) = open_window(app, url) {
                eprintln!("sluice: cannot open the window: {e}");
            }
        }
    }
    show_main(app);
}

/// The title of the editor's sign-in page (frontend/src/app.rs).
const SIGN_IN_TITLE: &str = "Sign in — Sluice";

/// At most one automatic sign-in every 10 s: a link that does not sign in
/// must not loop.
fn may_sign_in_again() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = started().elapsed().as_secs() + 10;
    let last = LAST.load(Ordering::SeqCst);
    now >= last + 10
        && LAST
            .compare_exchange(last, now, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
}

fn open_window<R: Runtime, M: Manager<R>>(app: &M, url: tauri::Url) -> tauri::Result<()> {
    WebviewWindowBuilder::new(app, MAIN, WebviewUrl::External(url))
        .title("Sluice")
        .inner_size(1280.0, 820.0)
        .min_inner_size(720.0, 480.0)
        .on_document_title_changed(|window, title| {
            // The window's title follows the editor's ("orders — Sluice").
            let _ = window.set_title(&title);
            // The editor says it is not signed in (its session ended: the
            // token was replaced): sign the window in again rather than
            // show the page that asks for `sluice open`.
            if title == SIGN_IN_TITLE && may_sign_in_again() {
                navigate(window.app_handle(), "/");
            }
            // The editor sets it once its first frame is painted: for
            // `cargo xtask bench desktop`, the end of a cold start.
            if title.ends_with("— Sluice")
                && std::env::var_os("SLUICE_STARTUP_TIMING").is_some()
                && !READY.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                println!("ready {} ms", started().elapsed().as_millis());
            }
        })
        .build()?;
    Ok(())
}

/// Opens a `sluice://` link: a workflow, a run, or the app.
pub(crate) fn open_link<R: Runtime>(app: &AppHandle<R>, url: &str) {
    let link = match links::parse(url) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sluice: {e}");
            return;
        }
    };
    let Some(engine) = app.state::<Desktop>().engine() else {
        return;
    };
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let then = match link {
            Link::Home => "/".to_string(),
            Link::Workflow(id) => format!("/#/w/{id}"),
            // The editor asks first (who shares what, which role).
            Link::Join(ticket) => format!("/#/join/{ticket}"),
            Link::Run(id) => match engine.store().get_run(&id).await {
                Ok(Some(run)) => format!("/#/w/{}/r/{id}", run.workflow_id),
                _ => {
                    eprintln!("sluice: no run `{id}`");
                    "/".to_string()
                }
            },
        };
        let handle = app.clone();
        let _ = app.run_on_main_thread(move || navigate(&handle, &then));
    });
}

fn build_menus<R: Runtime>(app: &tauri::App<R>) -> tauri::Result<()> {
    let handle = app.handle();
    let file = Submenu::with_items(
        handle,
        "File",
        true,
        &[
            &MenuItem::with_id(handle, "new", "New workflow", true, Some("CmdOrCtrl+N"))?,
            &MenuItem::with_id(handle, "import", "Import…", true, Some("CmdOrCtrl+O"))?,
            &MenuItem::with_id(handle, "export", "Export…", true, Some("CmdOrCtrl+S"))?,
            &PredefinedMenuItem::separator(handle)?,
            &MenuItem::with_id(handle, "close", "Close window", true, Some("CmdOrCtrl+W"))?,
            &MenuItem::with_id(handle, "quit", "Quit Sluice", true, Some("CmdOrCtrl+Q"))?,
        ],
    )?;
    // Undo and redo go to the editor (its own undo: only your edits);
    // the clipboard items are the webview's.
    let edit = Submenu::with_items(
        handle,
        "Edit",
        true,
        &[
            &MenuItem::with_id(handle, "undo", "Undo", true, Some("CmdOrCtrl+Z"))?,
            &MenuItem::with_id(handle, "redo", "Redo", true, Some("CmdOrCtrl+Shift+Z"))?,
            &PredefinedMenuItem::separator(handle)?,
            &PredefinedMenuItem::cut(handle, None)?,
            &PredefinedMenuItem::copy(handle, None)?,
            &PredefinedMenuItem::paste(handle, None)?,
            &PredefinedMenuItem::select_all(handle, None)?,
        ],
    )?;
    let view = Submenu::with_items(
        handle,
        "View",
        true,
        &[
            &MenuItem::with_id(handle, "zoom-in", "Zoom in", true, Some("CmdOrCtrl+="))?,
            &MenuItem::with_id(handle, "zoom-out", "Zoom out", true, Some("CmdOrCtrl+-"))?,
            &MenuItem::with_id(
                handle,
                "zoom-reset",
                "Actual size",
                true,
                Some("CmdOrCtrl+0"),
            )?,
            &MenuItem::with_id(handle, "fit", "Fit workflow", true, None::<&str>)?,
            &PredefinedMenuItem::separator(handle)?,
            &MenuItem::with_id(handle, "workflows", "All workflows", true, None::<&str>)?,
        ],
    )?;
    app.set_menu(Menu::with_items(handle, &[&file, &edit, &view])?)?;

    let autostart = app.autolaunch().is_enabled().unwrap_or(false);
    let tray_menu = Menu::with_items(
        handle,
        &[
            &MenuItem::with_id(handle, "show", "Open Sluice", true, None::<&str>)?,
            &MenuItem::with_id(
                handle,
                "status",
                "Engine running · no runs active",
                false,
                None::<&str>,
            )?,
            &PredefinedMenuItem::separator(handle)?,
            &CheckMenuItem::with_id(
                handle,
                "autostart",
                "Start at login",
                true,
                autostart,
                None::<&str>,
            )?,
            &PredefinedMenuItem::separator(handle)?,
            &MenuItem::with_id(handle, "quit", "Quit Sluice", true, None::<&str>)?,
        ],
    )?;
    let mut tray = TrayIconBuilder::with_id(TRAY)
        .menu(&tray_menu)
        .tooltip("Sluice");
    if let Some(icon) = app.default_window_icon() {
        tray = tray.icon(icon.clone());
    }
    tray.build(app)?;
    // The tray's status line follows the engine (a tray cannot be asked).
    let status = tray_menu
        .get("status")
        .and_then(|i| i.as_menuitem().cloned());
    let handle = handle.clone();
    tauri::async_runtime::spawn(async move {
        let mut shown = usize::MAX;
        while let Some(active) = handle.state::<Desktop>().with(|h| h.engine.active_runs()) {
            if active != shown {
                shown = active;
                let text = match active {
                    0 => "Engine running · no runs active".to_string(),
                    1 => "Engine running · 1 run active".to_string(),
                    n => format!("Engine running · {n} runs active"),
                };
                if let Some(item) = &status {
                    let _ = item.set_text(&text);
                }
                if let Some(tray) = handle.tray_by_id(TRAY) {
                    let _ = tray.set_tooltip(Some(&text));
                    let _ = tray.set_title((active > 0).then(|| active.to_string()));
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    Ok(())
}

/// The workflow the window shows (`#/w/<id>…`), if any.
fn current_workflow<R: Runtime>(app: &AppHandle<R>) -> Option<String> {
    let url = app.get_webview_window(MAIN)?.url().ok()?;
    links::workflow_of_fragment(url.fragment()?)
}

/// Sends a key to the editor, as if typed (its shortcuts do the rest).
fn key<R: Runtime>(app: &AppHandle<R>, key: &str, ctrl: bool, shift: bool) {
    if let Some(w) = app.get_webview_window(MAIN) {
        let _ = w.eval(format!(
            "document.dispatchEvent(new KeyboardEvent('keydown', {{key: {key:?}, ctrlKey: {ctrl}, shiftKey: {shift}, bubbles: true}}))"
        ));
    }
}

fn on_menu<R: Runtime>(app: &AppHandle<R>, id: &str) {
    match id {
        "show" => show_main(app),
        "quit" => {
            app.state::<Desktop>().stop();
            app.exit(0);
        }
        "close" => {
            if let Some(w) = app.get_webview_window(MAIN) {
                let _ = w.hide();
            }
        }
        "new" | "workflows" => {
            navigate(app, "/");
            if id == "new"
                && let Some(w) = app.get_webview_window(MAIN)
            {
                let _ =
                    w.eval("setTimeout(() => document.getElementById('new-name')?.focus(), 300)");
            }
        }
        "undo" => key(app, "z", true, false),
        "redo" => key(app, "z", true, true),
        "fit" => key(app, "f", false, false),
        "zoom-in" | "zoom-out" | "zoom-reset" => {
            if let Some(w) = app.get_webview_window(MAIN) {
                let zoom = app.state::<ViewZoom>();
                let mut z = zoom.0.lock().unwrap_or_else(|e| e.into_inner());
                *z = match id {
                    "zoom-in" => (*z * 1.1).min(3.0),
                    "zoom-out" => (*z / 1.1).max(0.5),
                    _ => 1.0,
                };
                let _ = w.set_zoom(*z);
            }
        }
        "import" => import_with_dialog(app),
        "export" => export_with_dialog(app),
        "autostart" => {
            let launch = app.autolaunch();
            let on = launch.is_enabled().unwrap_or(false);
            let done = if on {
                launch.disable()
            } else {
                launch.enable()
            };
            if let Err(e) = done {
                eprintln!("sluice: start at login: {e}");
            }
        }
        _ => {}
    }
}

/// The window's zoom factor (View menu).
struct ViewZoom(Mutex<f64>);

fn import_with_dialog<R: Runtime>(app: &AppHandle<R>) {
    let app = app.clone();
    // Blocking dialogs never on the main thread.
    std::thread::spawn(move || {
        let Some(file) = app
            .dialog()
            .file()
            .set_title("Import a workflow")
            .add_filter("Sluice workflow", &["json"])
            .blocking_pick_file()
        else {
            return;
        };
        let Ok(path) = file.into_path() else {
            return;
        };
        let state = app.state::<Desktop>();
        match tauri::async_runtime::block_on(commands::import_file(&state, &path)) {
            Ok(id) => {
                let handle = app.clone();
                let _ = app.run_on_main_thread(move || navigate(&handle, &format!("/#/w/{id}")));
            }
            Err(e) => {
                app.dialog()
                    .message(e.to_string())
                    .kind(MessageDialogKind::Error)
                    .title("Import failed")
                    .blocking_show();
            }
        }
    });
}

fn export_with_dialog<R: Runtime>(app: &AppHandle<R>) {
    let Some(id) = current_workflow(app) else {
        app.dialog()
            .message("Open a workflow first: Export saves the one in the window.")
            .kind(MessageDialogKind::Info)
            .title("Export")
            .show(|_| {});
        return;
    };
    let app = app.clone();
    std::thread::spawn(move || {
        let Some(file) = app
            .dialog()
            .file()
            .set_title("Export the workflow")
            .set_file_name(format!("{id}.flow.json"))
            .add_filter("Sluice workflow", &["json"])
            .blocking_save_file()
        else {
            return;
        };
        let Ok(path) = file.into_path() else {
            return;
        };
        let state = app.state::<Desktop>();
        if let Err(e) = tauri::async_runtime::block_on(commands::export_file(&state, &id, &path)) {
            app.dialog()
                .message(e.to_string())
                .kind(MessageDialogKind::Error)
                .title("Export failed")
                .blocking_show();
        }
    });
}

/// An OS notification for every failed run; clicking it opens the run.
fn notify_failures<R: Runtime>(app: &AppHandle<R>) {
    let Some(engine) = app.state::<Desktop>().engine() else {
        return;
    };
    let opened = app.clone();
    let _ = app.notification().on_action(move |action| {
        if action.action_id() == "tap"
            && let Some(run) = action.notification().and_then(|n| {
                n.extra()
                    .get("run")
                    .and_then(|v| v.as_str().map(str::to_string))
            })
        {
            open_link(&opened, &format!("sluice://run/{run}"));
        }
    });
    let app = app.clone();
    tauri::async_runtime::spawn(async move {
        let mut events = engine.subscribe();
        loop {
            let event = match events.recv().await {
                Ok(e) => e,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            };
            if let sluice_runtime::events::What::RunFinished {
                status: sluice_runtime::Status::Failed,
                error,
            } = &event.what
            {
                let message = error
                    .as_ref()
                    .map(|e| match &e.node {
                        Some(n) => format!("{n}: {}", e.message),
                        None => e.message.clone(),
                    })
                    .unwrap_or_else(|| "the run failed".into());
                let shown = app
                    .notification()
                    .builder()
                    .title(format!("{} failed", event.workflow))
                    .body(message)
                    .extra("run", event.run.to_string())
                    .show();
                if let Err(e) = shown {
                    eprintln!("sluice: notification: {e}");
                }
            }
        }
    });
}

/// The app's builder with its commands (what the tests drive with the
/// mock runtime).
pub fn with_commands<R: Runtime>(builder: tauri::Builder<R>) -> tauri::Builder<R> {
    builder.invoke_handler(tauri::generate_handler![
        commands::status,
        commands::import_workflow,
        commands::export_workflow,
        commands::open
    ])
}

/// The app's context: tauri.conf.json, the bundled page and the access
/// control list built from capabilities/ (what the tests check windows
/// against, on the mock runtime).
pub fn context<R: Runtime>() -> tauri::Context<R> {
    tauri::generate_context!("../tauri.conf.json")
}

/// Starts the app; returns when it quits.
pub fn run() {
    started();
    configure_webview();
    let builder = tauri::Builder::default()
        // First: a second launch hands its arguments (a `sluice://` link)
        // to this one and exits.
        .plugin(tauri_plugin_single_instance::init(|app, argv, _cwd| {
            let link = argv.iter().skip(1).find(|a| a.starts_with("sluice:"));
            match link {
                Some(url) => open_link(app, url),
                None => show_main(app),
            }
        }))
        .plugin(tauri_plugin_deep_link::init())
        .plugin(tauri_plugin_notification::init())
        .plugin(tauri_plugin_dialog::init())
        .plugin(tauri_plugin_autostart::init(
            tauri_plugin_autostart::MacosLauncher::LaunchAgent,
            Some(vec!["--hidden"]),
        ))
        .manage(ViewZoom(Mutex::new(1.0)))
        .on_window_event(|window, event| {
            // Closing the window keeps the engine: hide it.
            if let WindowEvent::CloseRequested { api, .. } = event
                && window.label() == MAIN
            {
                api.prevent_close();
                let _ = window.hide();
            }
        })
        .on_menu_event(|app, event| on_menu(app, event.id().as_ref()))
        .setup(|app| {
            let options = host_options()?;
            let host = tauri::async_runtime::block_on(Host::start(options))?;
            println!("listening on {}", host.base_url());
            println!("data dir {}", host.data_dir.display());
            let start = host.login_url("/");
            app.manage(Desktop::new(host));
            let hidden = std::env::args().any(|a| a == "--hidden");
            open_window(app, start.parse()?)?;
            if hidden && let Some(w) = app.get_webview_window(MAIN) {
                let _ = w.hide();
            }
            build_menus(app)?;
            notify_failures(app.handle());
            // `sluice://` links: registered with the desktop, and the one
            // this process was started with.
            if let Err(e) = app.deep_link().register_all() {
                eprintln!("sluice: cannot register sluice:// links: {e}");
            }
            if let Ok(Some(urls)) = app.deep_link().get_current() {
                for url in urls {
                    open_link(app.handle(), url.as_str());
                }
            }
            let handle = app.handle().clone();
            app.deep_link().on_open_url(move |event| {
                for url in event.urls() {
                    open_link(&handle, url.as_str());
                }
            });
            Ok(())
        });
    let app = match with_commands(builder).build(context()) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("sluice: cannot start: {e}");
            std::process::exit(2);
        }
    };
    app.run(|app, event| {
        if let RunEvent::ExitRequested { code, api, .. } = event {
            // The last window closing is not quitting (the engine keeps
            // working); `Quit` passes a code.
            if code.is_none() {
                api.prevent_exit();
            } else {
                app.state::<Desktop>().stop();
            }
        }
    });
}
