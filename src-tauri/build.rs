//! Tauri's build step (the config is at the repository root) and the
//! embedded editor (see `sluice-embed-ui`).

fn main() {
    sluice_embed_ui::generate();
    // The app's commands are governed by capabilities (capabilities/): a
    // window gets only what a capability grants it.
    let manifest = tauri_build::AppManifest::new().commands(&[
        "status",
        "import_workflow",
        "export_workflow",
        "open",
    ]);
    tauri_build::try_build(
        tauri_build::Attributes::new()
            .config_path("../tauri.conf.json")
            .app_manifest(manifest),
    )
    .expect("tauri-build (tauri.conf.json at the repository root)");
}
