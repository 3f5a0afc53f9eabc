//! The desktop app end to end: the real binary on a private X server
//! (Xvfb), driven over WebDriver through tauri-driver and Debian's
//! WebKitWebDriver (`cargo xtask test` installs all three and builds the
//! editor first). A private session bus (dbus-daemon) carries the single
//! instance, `sluice://` link hand-over and notifications, shown by a real
//! notification server (dunst) that the test clicks through `dunstctl`.
//! A screenshot goes to `artifacts/desktop.png`.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child in its own process group, killed with everything it started
/// (the app outlives its WebDriver session on Linux).
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status()
            .ok();
        self.0.wait().ok();
    }
}

fn spawn_group(cmd: &mut Command) -> Group {
    Group(
        cmd.process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
    )
}

/// Xvfb on a display nobody uses.
fn xvfb() -> (Group, String) {
    let n = (90..200)
        .find(|n| {
            !std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                && !std::path::Path::new(&format!("/tmp/.X{n}-lock")).exists()
        })
        .expect("a free X display");
    let display = format!(":{n}");
    let server = spawn_group(Command::new("Xvfb").args([
        display.as_str(),
        "-screen",
        "0",
        "1400x900x24",
        "-nolisten",
        "tcp",
    ]));
    wait_file(
        std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")),
        "Xvfb",
    );
    (server, display)
}

/// Waits for a server's socket file to appear.
fn wait_file(socket: &std::path::Path, what: &str) {
    let started = Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn wait_port(port: u16, what: &str) {
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what} did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < within,
            "{what} did not happen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn text_of(c: &Client, css: &str) -> Option<String> {
    c.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A private session bus; returns it and its address.
fn session_bus(dir: &std::path::Path) -> (Group, String) {
    let socket = dir.join("bus");
    let address = format!("unix:path={}", socket.display());
    let bus = spawn_group(Command::new("dbus-daemon").args([
        "--session",
        "--nofork",
        "--nopidfile",
        &format!("--address={address}"),
    ]));
    wait_file(&socket, "dbus-daemon");
    (bus, address)
}

#[tokio::test]
async fn the_window_edits_and_runs_and_closing_it_keeps_webhooks_answering() {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let ui = target.join("frontend/dist");
    assert!(
        ui.join("index.html").is_file(),
        "the editor is not built in {}: run `cargo xtask frontend` (cargo xtask test does)",
        ui.display()
    );
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let (_x, display) = xvfb();
    let (_bus, bus) = session_bus(home.path());
    // The desktop around the app: where it registers its link handler
    // (never the real user's folders), and a notification server.
    let desktop_env = |cmd: &mut Command| {
        cmd.env("DISPLAY", &display)
            .env("DBUS_SESSION_BUS_ADDRESS", &bus)
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .env("SLUICE_DATA_DIR", data.path())
            .env("SLUICE_LISTEN", format!("127.0.0.1:{port}"))
            .env("SLUICE_UI_DIR", &ui);
    };
    let mut dunst = Command::new("dunst");
    desktop_env(&mut dunst);
    let _notifications = spawn_group(&mut dunst);
    // A window manager, so that closing the window is what a user does: the
    // manager asks the window to close (WM_DELETE_WINDOW).
    let _wm = spawn_group(Command::new("openbox").env("DISPLAY", &display));
    let (driver_port, native_port) = (free_port(), free_port());
    // The app inherits this environment through the drivers.
    let mut driver = Command::new("tauri-driver");
    driver.args([
        "--port",
        &driver_port.to_string(),
        "--native-port",
        &native_port.to_string(),
    ]);
    desktop_env(&mut driver);
    let _driver = spawn_group(&mut driver);
    wait_port(driver_port, "tauri-driver").await;
    // tauri-driver forwards the session to WebKitWebDriver, which it starts
    // itself: a session asked for before that listens is dropped.
    wait_port(native_port, "WebKitWebDriver").await;
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("wry"));
    caps.insert(
        "tauri:options".into(),
        json!({"application": env!("CARGO_BIN_EXE_sluice-desktop"), "args": []}),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .expect("a WebDriver session on the app");

    // The window opens on the editor, signed in: the workflow list. The
    // window passes through the sign-in page, which navigates on: a look
    // that lands during that unload fails (WebKit's "NoSuchFrame"), so
    // every kind of failed look is tried again, not only "not there yet".
    eventually(
        Duration::from_secs(30),
        "the editor in the window",
        || async { c.find(Locator::Css("ul.workflows")).await.is_ok() },
    )
    .await;
    // Its session gone (as when the API token is replaced): the window
    // signs in again by itself, and never stays on the sign-in page.
    c.execute(
        "localStorage.removeItem('sluice_session'); location.reload();",
        vec![],
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "signed in again", || async {
        c.execute(
                "return !!localStorage.getItem('sluice_session') && !!document.querySelector('ul.workflows');",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    })
    .await;
    assert!(text_of(&c, "main.sign-in").await.is_none());
    // Create a workflow, add an end, connect, run, read the output.
    c.find(Locator::Css("#new-name"))
        .await
        .unwrap()
        .send_keys("Desk check")
        .await
        .unwrap();
    c.find(Locator::Css(".new button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("g.node[data-node='start']"))
        .await
        .unwrap();
    c.find(Locator::Css("button.kind[data-kind='output.end']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let end = c
        .wait()
        .at_most(Duration::from_secs(5))
        .for_element(Locator::Css("g.node[data-node='end'] rect.box"))
        .await
        .unwrap();
    drop(end);
    // WebKitWebDriver moves to SVG elements poorly: move by viewport
    // coordinates, from the port's centre to the target box's.
    let centre = |css: &'static str| {
        let c = &c;
        async move {
            let v = c
                .execute(
                    "const r = document.querySelector(arguments[0]).getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2];",
                    vec![json!(css)],
                )
                .await
                .unwrap();
            (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
        }
    };
    let from = centre("g.node[data-node='start'] g.port.out circle").await;
    let to = centre("g.node[data-node='end'] rect.box").await;
    c.perform_actions(
        MouseActions::new("mouse".into())
            .then(PointerAction::MoveTo {
                duration: None,
                x: from.0.round(),
                y: from.1.round(),
            })
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::MoveTo {
                duration: Some(Duration::from_millis(200)),
                x: to.0.round(),
                y: to.1.round(),
            })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            }),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(5), "the edge", || async {
        c.find_all(Locator::Css("path.edge"))
            .await
            .map(|e| e.len())
            .unwrap_or(0)
            == 1
    })
    .await;
    c.find(Locator::Css(".run-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(15), "the run to succeed", || async {
        text_of(&c, ".run-status").await.as_deref() == Some("succeeded")
    })
    .await;
    let output: Value = serde_json::from_str(&text_of(&c, ".run-output").await.unwrap()).unwrap();
    assert_eq!(output, json!({"end": {}}), "{output}");
    let title = c.title().await.unwrap();
    assert_eq!(title, "desk-check — Sluice");
    std::fs::write(
        artifacts().join("desktop.png"),
        c.screenshot().await.unwrap(),
    )
    .unwrap();

    // Close the window: the engine keeps serving webhooks.
    let token = std::fs::read_to_string(data.path().join("api-token"))
        .unwrap()
        .trim()
        .to_string();
    sluice_nodes::http::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let r = http
        .put(format!("{base}/api/v1/workflows/hook?publish=true"))
        .bearer_auth(&token)
        .json(&json!({"format": "sluice.workflow/v1", "id": "hook", "nodes": [
            {"id": "in", "kind": "trigger.webhook", "config": {"method": "POST", "path": "ping", "respond": "when_finished"}},
            {"id": "out", "kind": "output.end"}],
            "edges": [{"from": "in", "to": "out"}]}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let windows = || {
        String::from_utf8(
            Command::new("wmctrl")
                .arg("-l")
                .env("DISPLAY", &display)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    assert!(windows().contains("desk-check — Sluice"), "{}", windows());
    let closed = Command::new("wmctrl")
        .args(["-c", "desk-check — Sluice"])
        .env("DISPLAY", &display)
        .status()
        .unwrap();
    assert!(closed.success());
    eventually(
        Duration::from_secs(5),
        "the window gone from the screen",
        || async { !windows().contains("Sluice") },
    )
    .await;
    let r = http
        .post(format!("{base}/hook/hook/ping"))
        .json(&json!({"n": 7}))
        .send()
        .await
        .expect("the webhook answers with the window closed");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["out"]["body"]["n"], 7, "{body}");

    // The app registered itself for sluice:// links.
    let handler = std::fs::read_dir(home.path().join("data/applications"))
        .expect("the app's link handler")
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .find(|text| text.contains("x-scheme-handler/sluice"));
    assert!(handler.is_some(), "no .desktop file for sluice:// links");

    // A failed run: a notification; clicking it shows the window on that run.
    let r = http
        .put(format!("{base}/api/v1/workflows/boom?publish=true"))
        .bearer_auth(&token)
        .json(&json!({"format": "sluice.workflow/v1", "id": "boom", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "explode", "kind": "data.transform", "config": {"jq": "error(\"the sky fell\")"}}],
            "edges": [{"from": "t", "to": "explode"}]}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let run: Value = http
        .post(format!("{base}/api/v1/workflows/boom/runs"))
        .bearer_auth(&token)
        .json(&json!({"input": {}, "wait": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    let run_id = run["id"].as_str().unwrap().to_string();
    let dunstctl = |args: &[&str]| {
        let mut cmd = Command::new("dunstctl");
        cmd.args(args);
        desktop_env(&mut cmd);
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    eventually(
        Duration::from_secs(10),
        "the failure notification",
        || async { dunstctl(&["count", "displayed"]) == "1" },
    )
    .await;
    dunstctl(&["action", "0"]);
    eventually(
        Duration::from_secs(10),
        "the window shown on the failed run",
        || async {
            let url = c
                .current_url()
                .await
                .map(|u| u.to_string())
                .unwrap_or_default();
            url.ends_with(&format!("#/w/boom/r/{run_id}")) && windows().contains("Sluice")
        },
    )
    .await;
    eventually(Duration::from_secs(10), "the run view", || async {
        text_of(&c, ".run-status").await.as_deref() == Some("failed")
    })
    .await;

    // A second launch hands its link to this one and exits; this one shows
    // the workflow.
    let mut second = Command::new(env!("CARGO_BIN_EXE_sluice-desktop"));
    second.arg("sluice://w/desk-check");
    desktop_env(&mut second);
    let second = tokio::task::spawn_blocking(move || second.output().unwrap());
    let second = tokio::time::timeout(Duration::from_secs(20), second)
        .await
        .expect("the second launch exits")
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    eventually(
        Duration::from_secs(10),
        "the linked workflow in the window",
        || async {
            let url = c
                .current_url()
                .await
                .map(|u| u.to_string())
                .unwrap_or_default();
            url.ends_with("#/w/desk-check")
        },
    )
    .await;
    eventually(Duration::from_secs(10), "the workflow's title", || async {
        c.title().await.is_ok_and(|t| t == "desk-check — Sluice")
    })
    .await;

    // A `sluice://join/` link: the window asks first, saying who shares
    // which workflow with which role (here a share of this install's own,
    // which it declines).
    let r = http
        .post(format!("{base}/api/v1/workflows/desk-check/shares"))
        .bearer_auth(&token)
        .json(&json!({"role": "viewer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let share: serde_json::Value = r.json().await.unwrap();
    let mut third = Command::new(env!("CARGO_BIN_EXE_sluice-desktop"));
    third.arg(share["link"].as_str().unwrap());
    desktop_env(&mut third);
    let third = tokio::task::spawn_blocking(move || third.output().unwrap());
    let third = tokio::time::timeout(Duration::from_secs(20), third)
        .await
        .expect("the third launch exits")
        .unwrap();
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    eventually(Duration::from_secs(10), "the join question", || async {
        text_of(&c, ".join-ask")
            .await
            .is_some_and(|t| t.contains("shares the workflow “desk-check” with you as viewer"))
    })
    .await;
    c.find(Locator::Css(".cancel-join"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the question gone", || async {
        c.find(Locator::Css(".join-ask")).await.is_err()
    })
    .await;

    // Ending the session ends the app (the driver's doing); the process
    // groups take anything left.
    c.close().await.ok();
}
