//! `cargo xtask test`: what CI runs. Format check, clippy `-D warnings`,
//! the wasm32 build of the pure crates, the editor, and the whole test suite.

use anyhow::Result;

use crate::cmd::{cargo, check, step};
use crate::frontend;
use crate::toolchain::{
    ensure_apt, ensure_apt_probe, ensure_components, ensure_desktop_toolchain, ensure_js_toolchain,
    ensure_restate_server, ensure_target,
};

pub(crate) fn run() -> Result<()> {
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
    // db.query's tests start a real PostgreSQL and a real MariaDB.
    ensure_apt_probe(
        "ls /usr/lib/postgresql/*/bin/initdb",
        "PostgreSQL",
        "postgresql",
    )?;
    ensure_apt("mariadbd", "mariadb-server")?;
    // The vault tests use a real Secret Service on a private session bus.
    ensure_apt("dbus-daemon", "dbus")?;
    ensure_apt("gnome-keyring-daemon", "gnome-keyring")?;
    ensure_apt("secret-tool", "libsecret-tools")?;
    // The editor's end-to-end tests: Debian's Chromium through chromedriver.
    ensure_apt("chromium", "chromium")?;
    ensure_apt("chromedriver", "chromium-driver")?;
    ensure_desktop_toolchain()?;
    // The worker's tests run a real restate-server.
    let restate = ensure_restate_server()?;
    let axe = crate::toolchain::ensure_axe()?;
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
        "cargo build -p sluice-model -p sluice-core -p sluice-api --target wasm32-unknown-unknown (the pure crates stay pure)",
    );
    check(cargo().args([
        "build",
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
    step("cargo test --workspace");
    // Engines the tests start (in-process or as `sluice serve`) run their
    // peer endpoint on loopback with no relays: tests bind loopback only
    // and never reach for the internet. The peers tests set this themselves.
    check(
        cargo()
            .args(["test", "--workspace", "--locked"])
            .env("SLUICE_PEERS_LISTEN", "127.0.0.1:0")
            .env("SLUICE_PEERS_RELAYS", "none")
            .env("SLUICE_RESTATE_SERVER", &restate)
            .env("SLUICE_AXE", &axe),
    )?;
    step("all checks passed");
    Ok(())
}
