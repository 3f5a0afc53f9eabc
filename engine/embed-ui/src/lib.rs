//! Embeds the editor in a binary when `SLUICE_EMBED_UI` names its built
//! files (`cargo xtask run` and `cargo xtask dist` set it to
//! `target/frontend/dist`). Without it nothing is embedded, and the binary
//! serves the editor from disk.

use std::path::{Path, PathBuf};

fn files(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if path.is_dir() {
            files(&path, &format!("{prefix}{name}/"), out);
        } else {
            out.push((format!("{prefix}{name}"), path));
        }
    }
}

/// Writes `$OUT_DIR/ui_files.rs` with `pub static UI_FILES: &[(&str, &[u8])]`:
/// every file under `SLUICE_EMBED_UI` (path relative to it, bytes), or none
/// when the variable is unset. Call it from a build script and
/// `include!(concat!(env!("OUT_DIR"), "/ui_files.rs"))`.
pub fn generate() {
    println!("cargo:rerun-if-env-changed=SLUICE_EMBED_UI");
    let mut found = Vec::new();
    if let Some(dir) = std::env::var_os("SLUICE_EMBED_UI") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("index.html").is_file(),
            "SLUICE_EMBED_UI={}: no index.html there (cargo xtask frontend builds it)",
            dir.display()
        );
        println!("cargo:rerun-if-changed={}", dir.display());
        files(&dir, "", &mut found);
    }
    let mut code = String::from("pub static UI_FILES: &[(&str, &[u8])] = &[\n");
    for (name, path) in &found {
        println!("cargo:rerun-if-changed={}", path.display());
        code.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("ui_files.rs");
    std::fs::write(out, code).expect("writing ui_files.rs");
}
