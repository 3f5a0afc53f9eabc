//! Builds the JavaScript runtime (`guest-js`: QuickJS for
//! wasm32-unknown-unknown) from source, for `code.js`. It has a workspace
//! and target dir of its own (`<target>/sluice-js`), so it never contends
//! with this build's lock, features or flags. `SLUICE_JS_WASM=FILE` uses a
//! prebuilt runtime instead (packaging).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("sluice_js.wasm");
    let guest = manifest.join("guest-js");
    for file in [
        "src/lib.rs",
        "src/n8n.js",
        "src/jq.rs",
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
    ] {
        println!("cargo:rerun-if-changed={}", guest.join(file).display());
    }
    println!("cargo:rerun-if-env-changed=SLUICE_JS_WASM");
    if let Ok(prebuilt) = std::env::var("SLUICE_JS_WASM") {
        println!("cargo:rerun-if-changed={prebuilt}");
        if let Err(e) = std::fs::copy(&prebuilt, &out) {
            panic!("SLUICE_JS_WASM={prebuilt}: {e}");
        }
        return;
    }
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../target"))
        .join("sluice-js");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&guest)
        .args(["build", "--release", "--locked", "--quiet"])
        .args(["--target", "wasm32-unknown-unknown", "--target-dir"])
        .arg(&target_dir);
    // This build's settings are not the guest's: its flags, wrappers
    // (clippy), sanitizers (cargo fuzz), C flags and target would leak into
    // a build for another target. Only what finds the tools and the
    // registry is passed on (and the jobserver, to share the cores).
    cmd.env_clear();
    for (key, value) in std::env::vars_os() {
        let Some(k) = key.to_str() else { continue };
        let keep = matches!(
            k,
            "PATH"
                | "HOME"
                | "USER"
                | "TMPDIR"
                | "TMP"
                | "TEMP"
                | "LANG"
                | "CARGO_HOME"
                | "RUSTUP_HOME"
                | "RUSTUP_TOOLCHAIN"
                | "CARGO_MAKEFLAGS"
                | "HTTP_PROXY"
                | "HTTPS_PROXY"
                | "NO_PROXY"
                | "http_proxy"
                | "https_proxy"
                | "no_proxy"
        ) || [
            "CARGO_NET_",
            "CARGO_HTTP_",
            "CARGO_REGISTRIES_",
            "CARGO_REGISTRY_",
            "SSL_CERT_",
            "LC_",
        ]
        .iter()
        .any(|p| k.starts_with(p));
        if keep {
            cmd.env(&key, &value);
        }
    }
    let status = cmd.status();
    match status {
        Ok(s) if s.success() => {}
        Ok(_) | Err(_) => panic!(
            "building the JavaScript runtime ({}) failed. It needs clang and llvm-ar \
             (apt-get install clang) and the wasm32-unknown-unknown target (rustup target \
             add wasm32-unknown-unknown); `cargo xtask test` installs both. ({status:?})",
            guest.display()
        ),
    }
    let built = target_dir.join("wasm32-unknown-unknown/release/sluice_js.wasm");
    if let Err(e) = std::fs::copy(&built, &out) {
        panic!("{}: {e}", built.display());
    }
}
