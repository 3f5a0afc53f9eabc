//! Project automation, so that a clean clone needs exactly two commands:
//! `cargo xtask run` and `cargo xtask test`. Each step says what it does and
//! installs what it needs (rustup targets, tools) when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

  run               build the engine and the editor, run the example workflows, then the desktop
                    app when there is a display, else `sluice serve` (the editor in a browser)
  test              fmt check, clippy -D warnings, the whole test suite, wasm32 build of the model and the core
  dist              build the desktop app's .deb into target/dist
  bench [engine|webhook|http|docs|sandbox|js-engines|editor|desktop]
                    print the engine figures, or load the trigger port with wrk (docs/benchmarks.md)
  docs              regenerate docs/nodes.md from the node schemas
  frontend          build the editor into target/frontend/dist
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("test") => test(),
        Some("bench") => bench(args.get(1).map(String::as_str).unwrap_or("engine")),
        Some("docs") => docs(),
        Some("frontend") => build_frontend().map(|_| ()),
        Some("dist") => dist().map(|_| ()),
        _ => {
            eprint!("{USAGE}");
            std::process::exit(2);
        }
    }
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn step(what: &str) {
    eprintln!("\x1b[1m==> {what}\x1b[0m");
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn check(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("failed ({status}): {cmd:?}");
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs a rustup target when it is missing.
fn ensure_target(target: &str) -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if !installed.lines().any(|l| l.trim() == target) {
        step(&format!("installing rustup target {target}"));
        check(Command::new("rustup").args(["target", "add", target]))?;
    }
    Ok(())
}

fn ensure_components() -> Result<()> {
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
fn ensure_js_toolchain() -> Result<()> {
    ensure_target("wasm32-unknown-unknown")?;
    ensure_apt("clang", "clang")?;
    ensure_apt("llvm-ar", "llvm")
}

/// What the desktop app (`src-tauri`, Tauri 2 on WebKitGTK) needs to build,
/// and to be driven end to end: Xvfb, WebKitWebDriver and tauri-driver.
fn ensure_desktop_toolchain() -> Result<()> {
    ensure_apt("pkg-config", "pkg-config")?;
    for (module, package) in [
        ("webkit2gtk-4.1", "libwebkit2gtk-4.1-dev"),
        ("gtk+-3.0", "libgtk-3-dev"),
        ("ayatana-appindicator3-0.1", "libayatana-appindicator3-dev"),
        ("librsvg-2.0", "librsvg2-dev"),
        ("dbus-1", "libdbus-1-dev"),
    ] {
        ensure_apt_probe(&format!("pkg-config --exists {module}"), module, package)?;
    }
    ensure_apt("Xvfb", "xvfb")?;
    ensure_apt("xauth", "xauth")?;
    ensure_apt("WebKitWebDriver", "webkit2gtk-driver")?;
    // A window manager, to close the app's window as a user does.
    ensure_apt("openbox", "openbox")?;
    ensure_apt("wmctrl", "wmctrl")?;
    // A session bus and a notification server with a command line: the
    // single instance, link hand-over and notification clicks run over them.
    ensure_apt("dbus-daemon", "dbus")?;
    ensure_apt("dunst", "dunst")?;
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

fn test() -> Result<()> {
    ensure_components()?;
    ensure_js_toolchain()?;
    // The sandbox tests build their guest component for WASI preview 2.
    ensure_target("wasm32-wasip2")?;
    // The email tests talk to a real SMTP server: Python's aiosmtpd.
    ensure_apt_probe(
        "/usr/bin/python3 -c 'import aiosmtpd'",
        "aiosmtpd (Python)",
        "python3-aiosmtpd",
    )?;
    // The vault tests use a real Secret Service on a private session bus.
    ensure_apt("dbus-daemon", "dbus")?;
    ensure_apt("gnome-keyring-daemon", "gnome-keyring")?;
    ensure_apt("secret-tool", "libsecret-tools")?;
    // The editor's end-to-end tests: Debian's Chromium through chromedriver.
    ensure_apt("chromium", "chromium")?;
    ensure_apt("chromedriver", "chromium-driver")?;
    ensure_desktop_toolchain()?;
    step("cargo fmt --check");
    check(cargo().args(["fmt", "--all", "--check"]))?;
    step("cargo clippy --workspace --all-targets -- -D warnings");
    check(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]))?;
    step(
        "cargo build -p sluice-model -p sluice-core --target wasm32-unknown-unknown (the pure crates stay pure)",
    );
    check(cargo().args([
        "build",
        "-p",
        "sluice-model",
        "-p",
        "sluice-core",
        "--target",
        "wasm32-unknown-unknown",
        "--locked",
    ]))?;
    // The editor, built as users get it, for its end-to-end tests.
    build_frontend()?;
    step("cargo test --workspace");
    check(cargo().args(["test", "--workspace", "--locked"]))?;
    step("all checks passed");
    Ok(())
}

fn run(extra: &[String]) -> Result<()> {
    ensure_js_toolchain()?;
    let dist = build_frontend()?;
    step("building the sluice binary (release, with the editor built in)");
    check(
        cargo()
            .args(["build", "--release", "-p", "sluice-cli", "--locked"])
            .env("SLUICE_EMBED_UI", &dist),
    )?;
    let bin = target_dir()?.join("release").join("sluice");
    if !extra.is_empty() {
        return check(Command::new(&bin).args(extra));
    }
    for example in [
        "assets/examples/hello.flow.json",
        "assets/examples/orders.flow.json",
    ] {
        step(&format!("sluice validate {example}"));
        check(Command::new(&bin).args(["validate", example]))?;
        step(&format!("sluice run {example}"));
        check(Command::new(&bin).args([
            "run",
            example,
            "--input",
            "@assets/examples/orders.input.json",
        ]))?;
    }
    step("sluice runs list (the journal in the data dir)");
    check(Command::new(&bin).args(["runs", "list"]))?;
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|d| !d.is_empty()));
    if display {
        ensure_desktop_toolchain()?;
        step("building the desktop app (release, with the editor built in)");
        check(
            cargo()
                .args(["build", "--release", "-p", "sluice-desktop", "--locked"])
                .env("SLUICE_EMBED_UI", &dist),
        )?;
        let app = target_dir()?.join("release").join("sluice-desktop");
        eprintln!(
            "\nA display is available: starting the desktop app ({}). Closing its window keeps \
             the engine running; quit from the tray icon.",
            app.display()
        );
        return check(&mut Command::new(app));
    }
    eprintln!(
        "\nNo display (DISPLAY and WAYLAND_DISPLAY are unset): serving the editor in the browser instead."
    );
    eprintln!(
        "\nThe engine stores runs in its data dir (override with --data-dir or SLUICE_DATA_DIR)."
    );
    eprintln!(
        "Try: {} runs show <RUN>   |   {} run FILE --input '{{...}}'",
        bin.display(),
        bin.display()
    );
    step("sluice serve: the engine in the background, with the editor (Ctrl-C stops it)");
    check(Command::new(&bin).arg("serve"))
}

/// The wasm-bindgen version in Cargo.lock: the CLI must match it exactly.
fn locked_wasm_bindgen() -> Result<String> {
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

/// Builds the editor (frontend/, Yew) into `<target>/frontend/dist`:
/// `cargo build` for wasm32-unknown-unknown, `wasm-bindgen` (installed at
/// the exact version in Cargo.lock), `wasm-opt` when it is there, and the
/// static files. `sluice serve` finds it there.
fn build_frontend() -> Result<PathBuf> {
    ensure_target("wasm32-unknown-unknown")?;
    let version = locked_wasm_bindgen()?;
    let have = output(Command::new("wasm-bindgen").arg("--version")).unwrap_or_default();
    if have.split_whitespace().nth(1) != Some(version.as_str()) {
        step(&format!(
            "installing wasm-bindgen-cli {version} (matches Cargo.lock)"
        ));
        check(cargo().args(["install", "wasm-bindgen-cli", "--version", &version]))?;
    }
    step("building the editor (frontend/, wasm32-unknown-unknown, profile web)");
    check(cargo().args([
        "build",
        "--profile",
        "web",
        "--locked",
        "-p",
        "sluice-frontend",
        "--target",
        "wasm32-unknown-unknown",
    ]))?;
    let target = target_dir()?;
    let dist = target.join("frontend").join("dist");
    let pkg = dist.join("pkg");
    std::fs::create_dir_all(&pkg)?;
    check(
        Command::new("wasm-bindgen")
            // The name section is a fifth of the module and only names
            // functions in stack traces.
            .args([
                "--target",
                "web",
                "--no-typescript",
                "--remove-name-section",
                "--remove-producers-section",
                "--out-name",
                "sluice",
            ])
            .arg("--out-dir")
            .arg(&pkg)
            .arg(target.join("wasm32-unknown-unknown/web/sluice_frontend.wasm")),
    )?;
    let wasm = pkg.join("sluice_bg.wasm");
    if Command::new("sh")
        .args(["-c", "command -v wasm-opt"])
        .output()?
        .status
        .success()
    {
        step("wasm-opt -Oz");
        let optimized = pkg.join("sluice_bg.opt.wasm");
        let ok = Command::new("wasm-opt")
            .args([
                "-Oz",
                "--enable-bulk-memory",
                "--enable-nontrapping-float-to-int",
            ])
            .arg(&wasm)
            .arg("-o")
            .arg(&optimized)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            std::fs::rename(&optimized, &wasm)?;
        } else {
            eprintln!("wasm-opt failed; keeping the unoptimized module");
        }
    }
    for entry in std::fs::read_dir("frontend/static")? {
        let entry = entry?;
        std::fs::copy(entry.path(), dist.join(entry.file_name()))?;
    }
    eprintln!(
        "editor built: {} ({} KiB of wasm)",
        dist.display(),
        std::fs::metadata(&wasm)?.len() / 1024
    );
    Ok(dist)
}

fn target_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    Ok(project_root().join("target"))
}

fn bench(which: &str) -> Result<()> {
    ensure_js_toolchain()?;
    match which {
        "engine" => {
            step(
                "engine benchmark (release build): durable steps/s, step overhead, SQLite commit floor",
            );
            run_bench_bin("sluice-bench-engine")
        }
        "webhook" => bench_webhook(),
        "http" => {
            step(
                "http.request benchmark (release build): 1,000 calls via flow.split vs raw reqwest",
            );
            run_bench_bin("sluice-bench-http")
        }
        "docs" => {
            step("workflow document benchmark (release build): load, merge + persist, size");
            run_bench_bin("sluice-bench-docs")
        }
        "sandbox" => {
            ensure_target("wasm32-wasip2")?;
            step(
                "sandbox benchmark (release build): code.js and code.wasm: prepare, cache, call, throughput",
            );
            run_bench_bin("sluice-bench-sandbox")
        }
        "js-engines" => {
            ensure_target("wasm32-wasip1")?;
            step("building Boa for wasm32-wasip1 (engine/sandbox/guest-boa), for the comparison");
            let target = target_dir()?.join("sluice-boa");
            check(
                cargo()
                    .args([
                        "build",
                        "--release",
                        "--locked",
                        "--target",
                        "wasm32-wasip1",
                    ])
                    .args(["--manifest-path", "engine/sandbox/guest-boa/Cargo.toml"])
                    .arg("--target-dir")
                    .arg(&target),
            )?;
            let boa = target.join("wasm32-wasip1/release/sluice_js_boa.wasm");
            step("QuickJS vs Boa (release build): size, prepare, warm call, throughput");
            run_bench_bin_with(
                "sluice-bench-sandbox",
                &["--engines", &boa.to_string_lossy()],
            )
        }
        "editor" => {
            ensure_apt("chromium", "chromium")?;
            ensure_apt("chromedriver", "chromium-driver")?;
            build_frontend()?;
            step(
                "editor benchmark (release build): 1,000 nodes / 1,500 edges in headless Chromium, measured in the page",
            );
            check(cargo().args([
                "run",
                "--release",
                "--locked",
                "-p",
                "sluice-server",
                "--example",
                "bench_editor",
            ]))
        }
        "desktop" => bench_desktop(),
        other => {
            bail!(
                "unknown benchmark `{other}` (available: engine, webhook, http, docs, sandbox, js-engines, editor, desktop)"
            )
        }
    }
}

/// Runs one of the benchmark binaries (`engine/bench`), built in release.
fn run_bench_bin(bin: &str) -> Result<()> {
    run_bench_bin_with(bin, &[])
}

fn run_bench_bin_with(bin: &str, args: &[&str]) -> Result<()> {
    check(
        cargo()
            .args([
                "run",
                "--release",
                "--locked",
                "-p",
                "sluice-bench",
                "--bin",
                bin,
                "--",
            ])
            .args(args),
    )
}

/// Installs a Debian package when its command is missing (as root only).
fn ensure_apt(command: &str, package: &str) -> Result<()> {
    ensure_apt_probe(&format!("command -v {command}"), command, package)
}

/// Installs a Debian package unless the shell command `probe` succeeds.
fn ensure_apt_probe(probe: &str, what: &str, package: &str) -> Result<()> {
    if Command::new("sh")
        .args(["-c", probe])
        .output()?
        .status
        .success()
    {
        return Ok(());
    }
    let root = output(Command::new("id").arg("-u"))?.trim() == "0";
    if !root {
        bail!("`{what}` is missing: install the Debian package `{package}`");
    }
    step(&format!("installing {package} (apt-get)"));
    if !Command::new("apt-get")
        .args(["install", "-y", package])
        .status()?
        .success()
    {
        check(Command::new("apt-get").arg("update"))?;
        check(Command::new("apt-get").args(["install", "-y", package]))?;
    }
    Ok(())
}

/// wrk against `sluice serve`: webhook → data.set → output.respond, answered
/// when the run has finished, every step journaled durably.
fn bench_webhook() -> Result<()> {
    use std::io::{BufRead, BufReader};
    ensure_apt("wrk", "wrk")?;
    step("building the sluice binary (release)");
    check(cargo().args([
        "build",
        "--release",
        "-p",
        "sluice-cli",
        "--bin",
        "sluice",
        "--locked",
    ]))?;
    let bin = target_dir()?.join("release").join("sluice");
    let data = std::env::temp_dir().join(format!("sluice-bench-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&data)?;
    let mut serve = Command::new(&bin)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SLUICE_DATA_DIR", &data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = serve.stdout.take().context("serve stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().context("serve printed nothing")??;
    std::thread::spawn(move || for _ in lines {});
    let base = first
        .strip_prefix("listening on ")
        .context("unexpected serve output")?
        .to_string();
    let result = (|| -> Result<()> {
        let token = std::fs::read_to_string(data.join("api-token"))?
            .trim()
            .to_string();
        let wf = r#"{"format": "sluice.workflow/v1", "id": "bench", "nodes": [
            {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
            {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
            {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
            "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}"#;
        let put = Command::new("curl")
            .args([
                "-sf",
                "-X",
                "PUT",
                "-H",
                &format!("Authorization: Bearer {token}"),
                "-H",
                "Content-Type: application/json",
            ])
            .args([
                "--data-binary",
                wf,
                &format!("{base}/api/v1/workflows/bench"),
            ])
            .output()?;
        if !put.status.success() {
            bail!(
                "could not store the bench workflow: {}",
                String::from_utf8_lossy(&put.stdout)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
        let idle_rss_kb = rss_kb(serve.id())?;
        let script = data.join("post.lua");
        std::fs::write(
            &script,
            "wrk.method = \"POST\"\nwrk.body = '{\"id\": 7, \"total\": 250}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
        )?;
        step("warm-up: wrk 3 s");
        check(
            Command::new("wrk")
                .args(["-t2", "-c64", "-d3s", "-s"])
                .arg(&script)
                .arg(format!("{base}/hook/bench/orders"))
                .stdout(std::process::Stdio::null()),
        )?;
        step("wrk -t2 -c64 -d10s --latency (webhook → data.set → output.respond, when_finished)");
        let out = output(
            Command::new("wrk")
                .args(["-t2", "-c64", "-d10s", "--latency", "-s"])
                .arg(&script)
                .arg(format!("{base}/hook/bench/orders")),
        )?;
        println!("{out}");
        let pick = |prefix: &str| {
            out.lines()
                .find(|l| l.trim_start().starts_with(prefix))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        };
        let non2xx = out
            .lines()
            .find(|l| l.contains("Non-2xx"))
            .map(str::trim)
            .unwrap_or("none");
        println!(
            "{{\"requests_per_s\": \"{}\", \"p50\": \"{}\", \"p99\": \"{}\", \"non_2xx\": \"{non2xx}\", \"idle_rss_mb\": {:.1}}}",
            pick("Requests/sec:").unwrap_or_default(),
            pick("50%").unwrap_or_default(),
            pick("99%").unwrap_or_default(),
            idle_rss_kb as f64 / 1024.0
        );
        Ok(())
    })();
    serve.kill().ok();
    serve.wait().ok();
    std::fs::remove_dir_all(&data).ok();
    result
}

/// The desktop app as a Debian package: the release binary with the editor
/// built in, a desktop entry (which also claims `sluice://` links), icons.
/// Built with `dpkg-deb`; nothing is downloaded.
fn dist() -> Result<PathBuf> {
    ensure_desktop_toolchain()?;
    ensure_js_toolchain()?;
    let ui = build_frontend()?;
    step("building the desktop app (release, with the editor built in)");
    check(
        cargo()
            .args(["build", "--release", "-p", "sluice-desktop", "--locked"])
            .env("SLUICE_EMBED_UI", &ui),
    )?;
    let target = target_dir()?;
    let version = env!("CARGO_PKG_VERSION");
    let root = target.join("dist").join(format!("sluice_{version}_amd64"));
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let bin_dir = root.join("usr/bin");
    std::fs::create_dir_all(&bin_dir)?;
    let bin = bin_dir.join("sluice-desktop");
    std::fs::copy(target.join("release/sluice-desktop"), &bin)?;
    // Symbols are a third of the binary and no use to a user.
    check(Command::new("strip").arg("--strip-unneeded").arg(&bin))?;
    let apps = root.join("usr/share/applications");
    std::fs::create_dir_all(&apps)?;
    std::fs::write(
        apps.join("sluice.desktop"),
        "[Desktop Entry]\nType=Application\nName=Sluice\nGenericName=Workflow engine\n\
         Comment=Local-first workflows: draw, run and watch them on your own machine\n\
         Exec=sluice-desktop %u\nIcon=sluice\nTerminal=false\nCategories=Development;Utility;\n\
         MimeType=x-scheme-handler/sluice;\nStartupWMClass=sluice-desktop\n",
    )?;
    for (size, file) in [
        ("32x32", "32x32.png"),
        ("64x64", "64x64.png"),
        ("128x128", "128x128.png"),
        ("256x256", "128x128@2x.png"),
        ("512x512", "512x512.png"),
    ] {
        let dir = root.join(format!("usr/share/icons/hicolor/{size}/apps"));
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(Path::new("assets/icons").join(file), dir.join("sluice.png"))?;
    }
    let installed_kb = dir_size(&root.join("usr"))? / 1024;
    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    std::fs::write(
        debian.join("control"),
        format!(
            "Package: sluice\nVersion: {version}\nArchitecture: amd64\nMaintainer: Sluice <sluice@localhost>\n\
             Installed-Size: {installed_kb}\n\
             Depends: libwebkit2gtk-4.1-0, libgtk-3-0, libayatana-appindicator3-1\n\
             Section: devel\nPriority: optional\n\
             Description: Sluice, a local-first workflow engine\n \
             Draw workflows as nodes and connections, run them on your own machine, and\n \
             watch every run. The engine runs inside the app and keeps serving schedules,\n \
             file triggers and webhooks while the window is closed.\n"
        ),
    )?;
    let deb = target
        .join("dist")
        .join(format!("sluice_{version}_amd64.deb"));
    check(
        Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group", "-Zxz", "-z9"])
            .arg(&root)
            .arg(&deb),
    )?;
    let size = std::fs::metadata(&deb)?.len();
    eprintln!(
        "package: {} ({:.1} MB; {:.1} MB installed)",
        deb.display(),
        size as f64 / 1e6,
        installed_kb as f64 / 1e3
    );
    Ok(deb)
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// The desktop app's figures: the .deb's size, the time from launch to the
/// editor painted in the window (the page sets its title two animation
/// frames after its first render; the app prints when it sees that), and
/// the idle memory of the whole app (its process and the webview's).
fn bench_desktop() -> Result<()> {
    let deb = dist()?;
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

/// A process's proportional set size: its share of every page it maps.
fn pss_kb(pid: u32) -> Result<u64> {
    proc_kb(pid, "smaps_rollup", "Pss:")
}

/// `measure` summed over a process and every process below it (the
/// webview's).
fn tree_kb(root: u32, measure: fn(u32) -> Result<u64>) -> Result<u64> {
    let mut parent_of = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The field after the ")" that ends the command name: state, ppid.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok())
            {
                parent_of.insert(pid, ppid);
            }
        }
    }
    let in_tree = |mut pid: u32| {
        while pid > 1 {
            if pid == root {
                return true;
            }
            pid = parent_of.get(&pid).copied().unwrap_or(0);
        }
        false
    };
    Ok(parent_of
        .keys()
        .filter(|&&p| in_tree(p))
        .filter_map(|&p| measure(p).ok())
        .sum())
}

fn rss_kb(pid: u32) -> Result<u64> {
    proc_kb(pid, "status", "VmRSS:")
}

/// The KiB figure on the line starting with `key` in `/proc/<pid>/<file>`.
fn proc_kb(pid: u32, file: &str, key: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}"))?;
    let line = text
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("no {key} in /proc/{pid}/{file}"))?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("no value after {key}"))?
        .parse()?)
}

/// (RSS, PSS) in KiB of a process and every process below it.
fn tree_memory(root: u32) -> Result<(u64, u64)> {
    Ok((tree_kb(root, rss_kb)?, tree_kb(root, pss_kb)?))
}

fn docs() -> Result<()> {
    step("writing docs/nodes.md from the node schemas");
    std::fs::write("docs/nodes.md", sluice_model::kinds::reference_markdown())?;
    Ok(())
}
