//! `cargo xtask bench desktop`: the desktop app's launch time (to the
//! editor painted, and to its first answered webhook), idle memory and
//! package size, measured under Xvfb.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::memory::tree_memory;
use crate::cmd::{step, target_dir};
use crate::dist;

/// The desktop app's figures: the .deb's size, the time from launch to the
/// editor painted in the window (the page sets its title two animation
/// frames after its first render; the app prints when it sees that), and
/// the idle memory of the whole app (its process and the webview's).
pub(super) fn run() -> Result<()> {
    let deb = dist::build()?;
    let app = target_dir()?.join("release/sluice-desktop");
    let n = (90..200)
        .find(|n| !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists())
        .context("a free X display")?;
    let display = format!(":{n}");
    let mut xvfb = Command::new("Xvfb")
        .args([
            display.as_str(),
            "-screen",
            "0",
            "1400x900x24",
            "-nolisten",
            "tcp",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let socket = PathBuf::from(format!("/tmp/.X11-unix/X{n}"));
    let t = std::time::Instant::now();
    while !socket.exists() && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let result = (|| -> Result<()> {
        step("desktop benchmark (release build, Xvfb 1400x900, software rendering)");
        let mut starts = Vec::new();
        // (RSS, PSS) in KiB after the first launch and after a later one.
        let mut memory = Vec::new();
        // One data dir: launch 1 is a new install (it creates the stores
        // and prepares the JavaScript runtime), the others are a returning
        // user's.
        let data =
            std::env::temp_dir().join(format!("sluice-bench-desktop-{}", std::process::id()));
        std::fs::create_dir_all(&data)?;
        for round in 1..=4 {
            let started = std::time::Instant::now();
            let mut child = std::process::Command::new(&app)
                .env("DISPLAY", &display)
                .env("SLUICE_DATA_DIR", &data)
                .env("SLUICE_LISTEN", "127.0.0.1:0")
                .env("SLUICE_STARTUP_TIMING", "1")
                .env_remove("DBUS_SESSION_BUS_ADDRESS")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()?;
            let stdout = child.stdout.take().context("app stdout")?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    if line.starts_with("ready ") {
                        tx.send(()).ok();
                    }
                }
            });
            let ready = rx.recv_timeout(std::time::Duration::from_secs(30));
            let took = started.elapsed();
            if ready.is_err() {
                child.kill().ok();
                bail!("the app did not show the editor within 30 s");
            }
            eprintln!(
                "launch {round}: editor painted {} ms after the launch",
                took.as_millis()
            );
            starts.push(took.as_secs_f64() * 1e3);
            if round == 1 || round == 4 {
                std::thread::sleep(std::time::Duration::from_secs(10));
                memory.push(tree_memory(child.id())?);
            }
            child.kill().ok();
            child.wait().ok();
        }
        std::fs::remove_dir_all(&data).ok();
        // Launch to the first answered webhook, on a data dir of 1,000
        // workflows and 1,000,000 runs: what a caller waits for when the
        // app starts at login.
        let populated = super::webhook::populated_data()?;
        step("desktop: launch to its first answered webhook, five times");
        let mut hooks = Vec::new();
        for _ in 0..5 {
            let mut cmd = Command::new(&app);
            cmd.env("DISPLAY", &display)
                .env_remove("DBUS_SESSION_BUS_ADDRESS");
            hooks.push(super::webhook::launch_to_first_webhook(
                cmd,
                &populated,
                |c, addr| {
                    c.env("SLUICE_LISTEN", addr.to_string());
                },
            )?);
        }
        let hook_first = hooks[0];
        hooks.sort_by(f64::total_cmp);
        let floor = webkit_floor(&display)?;
        let first = starts.remove(0);
        starts.sort_by(f64::total_cmp);
        let size = std::fs::metadata(&deb)?.len() as f64 / 1e6;
        println!("desktop app (release, Xvfb, software rendering):");
        println!(
            "  launch to editor painted: first {first:.0} ms, median of the next three {:.0} ms (target < 1,000 ms)",
            starts[1]
        );
        let mb = |kb: u64| kb as f64 / 1024.0;
        println!(
            "  idle memory, app + webview processes, 10 s after start (PSS counts shared libraries once) (target < 150 MB):"
        );
        for (what, (rss, pss)) in [
            ("a returning launch", memory[1]),
            ("the first launch", memory[0]),
        ] {
            println!("    {what}: {:.0} MB RSS, {:.0} MB PSS", mb(rss), mb(pss));
        }
        println!(
            "    for scale, WebKitGTK's own MiniBrowser on about:blank, same settings: {:.0} MB RSS, {:.0} MB PSS",
            mb(floor.0),
            mb(floor.1)
        );
        println!(
            "  launch to first answered webhook, 1,000 workflows and 1,000,000 runs: median of five {:.0} ms (first {hook_first:.0} ms, fastest {:.0} ms; target < 300 ms)",
            hooks[2], hooks[0]
        );
        println!("  .deb: {size:.1} MB (target < 15 MB)");
        Ok(())
    })();
    xvfb.kill().ok();
    xvfb.wait().ok();
    result
}

/// The memory of the smallest WebKitGTK app there is, WebKit's own
/// MiniBrowser on a blank page (with the rendering the app would choose
/// here), 10 s after start: (RSS, PSS) in KiB. What a WebKitGTK webview
/// costs before any app or page.
fn webkit_floor(display: &str) -> Result<(u64, u64)> {
    let mini = Path::new("/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser");
    if !mini.exists() {
        bail!(
            "{} is missing (package libwebkit2gtk-4.1-0)",
            mini.display()
        );
    }
    let mut cmd = Command::new(mini);
    cmd.arg("about:blank")
        .env("DISPLAY", display)
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // The app draws on the CPU when there is no GPU render node: so here.
    let gpu = std::fs::read_dir("/dev/dri").is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
    });
    if !gpu {
        cmd.env("WEBKIT_DISABLE_COMPOSITING_MODE", "1");
    }
    let mut child = cmd.spawn()?;
    std::thread::sleep(std::time::Duration::from_secs(10));
    let measured = tree_memory(child.id());
    child.kill().ok();
    child.wait().ok();
    measured
}
