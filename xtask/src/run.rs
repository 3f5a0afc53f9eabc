//! `cargo xtask run`: the release binary with the editor built in, the
//! example workflows run through it, then the desktop app when there is a
//! display, else `sluice serve`.

use std::process::Command;

use anyhow::Result;

use crate::cmd::{cargo, check, step, target_dir};
use crate::frontend;
use crate::toolchain::{ensure_desktop_toolchain, ensure_js_toolchain};

pub(crate) fn run(extra: &[String]) -> Result<()> {
    ensure_js_toolchain()?;
    let dist = frontend::build()?;
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
