//! `cargo xtask test`: what CI runs. Format check, the wasm32 check of the
//! pure crates, the editor, and the whole test suite built with clippy's
//! lints (`-D warnings`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd::{cargo, check, output, step};
use crate::frontend;
use crate::toolchain::{
    Apt, desktop_packages, ensure_apt_all, ensure_components, ensure_restate_server, ensure_target,
    ensure_tauri_driver, js_toolchain_packages,
};

pub(crate) fn run() -> Result<()> {
    ensure_components()?;
    // Every Debian package in one apt-get call.
    let mut packages = js_toolchain_packages();
    packages.extend([
        // The email tests talk to a real SMTP server: Python's aiosmtpd.
        Apt::probe(
            "/usr/bin/python3 -c 'import aiosmtpd'",
            "aiosmtpd (Python)",
            "python3-aiosmtpd",
        ),
        // db.query's tests start a real PostgreSQL and a real MariaDB.
        Apt::probe(
            "ls /usr/lib/postgresql/*/bin/initdb",
            "PostgreSQL",
            "postgresql",
        ),
        Apt::command("mariadbd", "mariadb-server"),
        // The vault tests use a real Secret Service on a private session bus.
        Apt::command("dbus-daemon", "dbus"),
        Apt::command("gnome-keyring-daemon", "gnome-keyring"),
        Apt::command("secret-tool", "libsecret-tools"),
        // The editor's end-to-end tests: Debian's Chromium through chromedriver.
        Apt::command("chromium", "chromium"),
        Apt::command("chromedriver", "chromium-driver"),
    ]);
    packages.extend(desktop_packages());
    ensure_apt_all(&packages)?;
    // The JavaScript runtime's and the editor's target; the sandbox tests
    // build their guest component for WASI preview 2.
    ensure_target("wasm32-unknown-unknown")?;
    ensure_target("wasm32-wasip2")?;
    ensure_tauri_driver()?;
    // The worker's tests run a real restate-server.
    let restate = ensure_restate_server()?;
    let axe = crate::toolchain::ensure_axe()?;
    step("cargo fmt --check");
    check(cargo().args(["fmt", "--all", "--check"]))?;
    step(
        "cargo check -p sluice-model -p sluice-core -p sluice-api --target wasm32-unknown-unknown (the pure crates stay pure)",
    );
    // Checked, not built: what would not compile for the browser is found
    // either way, and the editor's own build below compiles what it uses.
    check(cargo().args([
        "check",
        "-p",
        "sluice-model",
        "-p",
        "sluice-core",
        "-p",
        "sluice-api",
        "--target",
        "wasm32-unknown-unknown",
        "--locked",
    ]))?;
    // The editor, built as users get it, for its end-to-end tests.
    frontend::build()?;
    step("cargo test --workspace, every target linted by clippy -D warnings");
    // Clippy lints the workspace's crates while they are built for the
    // tests (clippy's driver is rustc with its lints added, so what it
    // builds is what rustc would), as `cargo clippy --workspace
    // --all-targets -- -D warnings` does: `cargo test` builds the same
    // targets (libraries, binaries, tests and examples; there are no
    // benches). A separate `cargo clippy` compiled every dependency a
    // second time, in check mode, which the test build could not reuse
    // (docs/benchmarks.md: CI from a clean clone).
    // Engines the tests start (in-process or as `sluice serve`) run their
    // peer endpoint on loopback with no relays: tests bind loopback only
    // and never reach for the internet. The peers tests set this themselves.
    check(
        cargo()
            .args(["test", "--workspace", "--locked"])
            .env("RUSTC_WORKSPACE_WRAPPER", clippy_driver()?)
            .env("CLIPPY_ARGS", clippy_args(&["-D", "warnings"]))
            .env("SLUICE_PEERS_LISTEN", "127.0.0.1:0")
            .env("SLUICE_PEERS_RELAYS", "none")
            .env("SLUICE_RESTATE_SERVER", &restate)
            .env("SLUICE_AXE", &axe),
    )?;
    step("all checks passed");
    Ok(())
}

/// The toolchain's clippy driver (`<sysroot>/bin/clippy-driver`), which
/// `cargo clippy` puts in front of rustc for the workspace's crates.
fn clippy_driver() -> Result<PathBuf> {
    let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
    let driver = Path::new(sysroot.trim()).join("bin/clippy-driver");
    if !driver.is_file() {
        bail!(
            "no clippy driver at {}: is the clippy component installed?",
            driver.display()
        );
    }
    Ok(driver)
}

/// Arguments for clippy's driver, written as `cargo clippy -- ARGS` hands
/// them over (`CLIPPY_ARGS`, each followed by `__CLIPPY_HACKERY__`).
fn clippy_args(args: &[&str]) -> String {
    args.iter()
        .map(|a| format!("{a}__CLIPPY_HACKERY__"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn clippy_args_are_written_as_cargo_clippy_writes_them() {
        assert_eq!(
            super::clippy_args(&["-D", "warnings"]),
            "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
        );
    }
}
