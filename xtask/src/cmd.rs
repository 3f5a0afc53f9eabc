//! What every task shares: where the project and its target dir are, and
//! running a command (cargo or another) while saying what is going on.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The checkout `cargo xtask` was run in: `cargo run` tells the program it
/// runs where its package is (`CARGO_MANIFEST_DIR`), and that comes first.
/// The path compiled in is only a fallback: a target dir shared by two
/// checkouts (CI's cache) can hand one checkout an xtask binary built in
/// the other, which cargo finds fresh, and which would then work on, or
/// fail to find, the other checkout.
pub(crate) fn project_root() -> PathBuf {
    root_of(std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from))
}

fn root_of(manifest_dir: Option<PathBuf>) -> PathBuf {
    let xtask = manifest_dir.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    xtask
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// When this `cargo xtask` started: each step says how far in it begins,
/// so a slow CI run shows where its time went.
static STARTED: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// Starts the clock [`step`] reads.
pub(crate) fn start_clock() {
    std::sync::LazyLock::force(&STARTED);
}

pub(crate) fn step(what: &str) {
    let secs = STARTED.elapsed().as_secs();
    eprintln!("\x1b[1m==> [{}:{:02}] {what}\x1b[0m", secs / 60, secs % 60);
}

/// A cargo command that builds as one started from a shell would.
///
/// `cargo xtask` runs this binary with the variables cargo gives a
/// package's own programs (`CARGO_MANIFEST_DIR` = xtask's, `CARGO_PKG_NAME`
/// = `xtask`, ...). Build scripts that watch those variables (ring's does)
/// saw them change between a build started here and one started from a
/// shell, ran again, and took everything above them with them: a bench
/// after a release build by hand rebuilt most of the workspace (ten
/// minutes on two cores), and a test run by hand after `cargo xtask test`
/// rebuilt it for tests. Nested builds now see a shell's variables.
pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if is_set_for_xtask(name) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// The variables `cargo run` sets for the program it runs, which a shell
/// does not have.
fn is_set_for_xtask(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

pub(crate) fn check(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("failed ({status}): {cmd:?}");
    }
    Ok(())
}

pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn target_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    Ok(project_root().join("target"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_the_checkout_cargo_ran_in_not_the_one_compiled_in() {
        assert_eq!(
            root_of(Some(PathBuf::from("/elsewhere/clone/xtask"))),
            Path::new("/elsewhere/clone")
        );
        // Without it (xtask run by hand), the compiled-in checkout.
        assert_eq!(
            root_of(None),
            Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
        );
    }

    #[test]
    fn nested_cargo_runs_without_the_variables_cargo_run_set_for_xtask() {
        // This test binary runs with them (cargo test sets them too).
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let cmd = cargo();
        let removed: Vec<_> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO_PKG_VERSION"] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} kept: {removed:?}"
            );
        }
        // What cargo needs to find itself and the target dir stays.
        assert!(
            !removed
                .iter()
                .any(|r| r == "CARGO" || r == "CARGO_TARGET_DIR")
        );
        assert!(!is_set_for_xtask("CARGO_HOME") && !is_set_for_xtask("CARGO_INCREMENTAL"));
    }
}
