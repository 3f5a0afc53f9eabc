//! Installing what the tasks need when it is missing: rustup targets and
//! components, Debian packages, tauri-driver, and the wasm-bindgen version
//! Cargo.lock pins.

use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd::{cargo, check, output, step};

/// Installs a rustup target when it is missing.
pub(crate) fn ensure_target(target: &str) -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if !installed.lines().any(|l| l.trim() == target) {
        step(&format!("installing rustup target {target}"));
        check(Command::new("rustup").args(["target", "add", target]))?;
    }
    Ok(())
}

pub(crate) fn ensure_components() -> Result<()> {
    let installed = output(Command::new("rustup").args(["component", "list", "--installed"]))?;
    for c in ["rustfmt", "clippy"] {
        if !installed.lines().any(|l| l.starts_with(c)) {
            step(&format!("installing rustup component {c}"));
            check(Command::new("rustup").args(["component", "add", c]))?;
        }
    }
    Ok(())
}

/// What building the sandbox's JavaScript runtime (engine/sandbox/build.rs)
/// needs: QuickJS is C, compiled by clang for wasm32-unknown-unknown.
pub(crate) fn ensure_js_toolchain() -> Result<()> {
    ensure_target("wasm32-unknown-unknown")?;
    ensure_apt_all(&js_toolchain_packages())
}

/// The Debian packages of [`ensure_js_toolchain`].
pub(crate) fn js_toolchain_packages() -> Vec<Apt> {
    vec![
        Apt::command("clang", "clang"),
        Apt::command("llvm-ar", "llvm"),
    ]
}

/// The restate-server version the worker is built and tested against.
pub(crate) const RESTATE_SERVER: &str = "1.7.12";

/// A restate-server binary for the worker's tests and benchmarks: the npm
/// package `@restatedev/restate-server` (which ships it), installed under
/// the target dir on first use. Returns the binary's path.
pub(crate) fn ensure_restate_server() -> Result<std::path::PathBuf> {
    npm_package(
        "restate-server",
        "@restatedev/restate-server",
        RESTATE_SERVER,
        "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server",
    )
}

/// The axe-core version the editor's accessibility audit runs.
pub(crate) const AXE_CORE: &str = "4.14.1";

/// axe-core (the accessibility rules engine) for the editor's end-to-end
/// audit, installed under the target dir on first use. Returns the path of
/// `axe.min.js`, which the test injects into the page.
pub(crate) fn ensure_axe() -> Result<std::path::PathBuf> {
    npm_package(
        "axe-core",
        "axe-core",
        AXE_CORE,
        "node_modules/axe-core/axe.min.js",
    )
}

/// npm `package`@`version`, installed once into `<target>/<dir>` (a stamp
/// file marks the version done): the path of its file `file` there.
fn npm_package(dir: &str, package: &str, version: &str, file: &str) -> Result<std::path::PathBuf> {
    let dir = crate::cmd::target_dir()?.join(dir);
    let path = dir.join(file);
    let stamp = dir.join(format!("installed-{version}"));
    if path.exists() && stamp.exists() {
        return Ok(path);
    }
    ensure_apt("npm", "npm")?;
    step(&format!(
        "installing {package} {version} (npm) into {}",
        dir.display()
    ));
    std::fs::create_dir_all(&dir)?;
    check(
        std::process::Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("{package}@{version}")),
    )?;
    anyhow::ensure!(
        path.exists(),
        "npm installed {package} but {} is missing",
        path.display()
    );
    std::fs::write(&stamp, b"")?;
    Ok(path)
}

/// The Node-RED version the webhook benchmark compares against.
pub(crate) const NODE_RED: &str = "5.0.7";

/// Node-RED for the webhook benchmark, installed from npm under the target
/// dir on first use, with Node 24 from npm (the `node` package) when the
/// system's Node is older than Node-RED needs (22.9). Returns the node
/// binary to run it with and its `red.js`.
pub(crate) fn ensure_node_red() -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let dir = crate::cmd::target_dir()?.join("node-red");
    let red = dir.join("node_modules/node-red/red.js");
    let own_node = dir.join("node_modules/node/bin/node");
    let system =
        output(Command::new("sh").args(["-c", "node --version 2>/dev/null"])).unwrap_or_default();
    let recent = system
        .trim()
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0))
        .take(2)
        .collect::<Vec<_>>();
    let system_ok = matches!(recent.as_slice(), [major, minor] if (*major, *minor) >= (22, 9));
    let node = if system_ok {
        std::path::PathBuf::from("node")
    } else {
        own_node.clone()
    };
    let stamp = dir.join(format!("installed-{NODE_RED}"));
    if red.exists() && stamp.exists() && (system_ok || own_node.exists()) {
        return Ok((node, red));
    }
    ensure_apt("npm", "npm")?;
    step(&format!(
        "installing Node-RED {NODE_RED}{} (npm) into {}",
        if system_ok { "" } else { " and Node 24" },
        dir.display()
    ));
    std::fs::create_dir_all(&dir)?;
    let mut npm = std::process::Command::new("npm");
    npm.args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .arg(format!("node-red@{NODE_RED}"));
    if !system_ok {
        npm.arg("node@24");
    }
    check(&mut npm)?;
    anyhow::ensure!(
        red.exists() && (system_ok || own_node.exists()),
        "npm installed Node-RED but {} or {} is missing",
        red.display(),
        own_node.display()
    );
    std::fs::write(&stamp, b"")?;
    Ok((node, red))
}

/// What the desktop app (`src-tauri`, Tauri 2 on WebKitGTK) needs to build,
/// and to be driven end to end: Xvfb, WebKitWebDriver and tauri-driver.
pub(crate) fn ensure_desktop_toolchain() -> Result<()> {
    ensure_apt_all(&desktop_packages())?;
    ensure_tauri_driver()
}

/// The Debian packages of [`ensure_desktop_toolchain`].
pub(crate) fn desktop_packages() -> Vec<Apt> {
    let mut needs = vec![Apt::command("pkg-config", "pkg-config")];
    for (module, package) in [
        ("webkit2gtk-4.1", "libwebkit2gtk-4.1-dev"),
        ("gtk+-3.0", "libgtk-3-dev"),
        ("ayatana-appindicator3-0.1", "libayatana-appindicator3-dev"),
        ("librsvg-2.0", "librsvg2-dev"),
        ("dbus-1", "libdbus-1-dev"),
    ] {
        needs.push(Apt::probe(
            &format!("pkg-config --exists {module}"),
            module,
            package,
        ));
    }
    needs.extend([
        Apt::command("Xvfb", "xvfb"),
        Apt::command("xauth", "xauth"),
        Apt::command("WebKitWebDriver", "webkit2gtk-driver"),
        // A window manager, to close the app's window as a user does.
        Apt::command("openbox", "openbox"),
        Apt::command("wmctrl", "wmctrl"),
        // A session bus and a notification server with a command line: the
        // single instance, link hand-over and notification clicks run over them.
        Apt::command("dbus-daemon", "dbus"),
        Apt::command("dunst", "dunst"),
    ]);
    needs
}

/// The tauri-driver the desktop's end-to-end test drives the app with.
pub(crate) fn ensure_tauri_driver() -> Result<()> {
    // tauri-driver has no --version: ask cargo what it installed.
    let installed = output(cargo().args(["install", "--list"])).unwrap_or_default();
    if !installed.contains(&format!("tauri-driver v{TAURI_DRIVER}:")) {
        step(&format!("installing tauri-driver {TAURI_DRIVER}"));
        check(cargo().args([
            "install",
            "tauri-driver",
            "--version",
            TAURI_DRIVER,
            "--locked",
        ]))?;
    }
    Ok(())
}

/// The tauri-driver the desktop's end-to-end test runs against.
const TAURI_DRIVER: &str = "2.1.0";

/// Installs a Debian package when its command is missing (as root only).
pub(crate) fn ensure_apt(command: &str, package: &'static str) -> Result<()> {
    ensure_apt_all(&[Apt::command(command, package)])
}

/// A Debian package, and how to tell it is there.
pub(crate) struct Apt {
    /// A shell command that succeeds when what the package gives is there.
    probe: String,
    /// What is missing otherwise, for the error.
    what: String,
    package: &'static str,
}

impl Apt {
    /// Needed for `command`.
    pub(crate) fn command(command: &str, package: &'static str) -> Apt {
        Apt::probe(&format!("command -v {command}"), command, package)
    }

    /// Needed unless the shell command `probe` succeeds.
    pub(crate) fn probe(probe: &str, what: &str, package: &'static str) -> Apt {
        Apt {
            probe: probe.to_string(),
            what: what.to_string(),
            package,
        }
    }

    fn present(&self) -> Result<bool> {
        Ok(Command::new("sh")
            .args(["-c", &self.probe])
            .output()?
            .status
            .success())
    }
}

/// Installs the packages of `needs` that are missing, in one `apt-get
/// install` (as root only): each call of its own paid apt's and dpkg's
/// fixed costs again, a minute and more of a fresh machine's CI.
pub(crate) fn ensure_apt_all(needs: &[Apt]) -> Result<()> {
    let mut missing: Vec<&Apt> = Vec::new();
    for need in needs {
        if !need.present()? && !missing.iter().any(|m| m.package == need.package) {
            missing.push(need);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|m| m.package).collect();
    let root = output(Command::new("id").arg("-u"))?.trim() == "0";
    if !root {
        let what: Vec<String> = missing
            .iter()
            .map(|m| format!("`{}` (Debian package `{}`)", m.what, m.package))
            .collect();
        bail!("missing: {}; install them", what.join(", "));
    }
    step(&format!("installing {} (apt-get)", packages.join(" ")));
    // No questions: a package that asks (debconf) would hang CI.
    let install = || {
        let mut c = Command::new("apt-get");
        c.args(["install", "-y"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    if !install().status()?.success() {
        check(Command::new("apt-get").arg("update"))?;
        check(&mut install())?;
    }
    Ok(())
}

/// The wasm-bindgen version in Cargo.lock: the CLI must match it exactly.
pub(crate) fn locked_wasm_bindgen() -> Result<String> {
    let lock = std::fs::read_to_string("Cargo.lock")?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"wasm-bindgen\""
            && let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \""))
        {
            return Ok(v.trim_end_matches('"').to_string());
        }
    }
    bail!("wasm-bindgen is not in Cargo.lock")
}
