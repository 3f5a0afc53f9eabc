//! `cargo xtask frontend`: the editor (frontend/, Yew) built for the
//! browser and the desktop webview, as `sluice serve` and the app embed it.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;

use crate::cmd::{cargo, check, output, step, target_dir};
use crate::toolchain::{ensure_target, locked_wasm_bindgen};

/// Builds the editor (frontend/, Yew) into `<target>/frontend/dist`:
/// `cargo build` for wasm32-unknown-unknown, `wasm-bindgen` (installed at
/// the exact version in Cargo.lock), `wasm-opt` when it is there, and the
/// static files. `sluice serve` finds it there.
pub(crate) fn build() -> Result<PathBuf> {
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
