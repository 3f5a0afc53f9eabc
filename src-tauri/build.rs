//! Tauri's build step (the config is at the repository root) and the
//! embedded editor (see `sluice-embed-ui`).

fn main() {
    sluice_embed_ui::generate();
    tauri_build::try_build(tauri_build::Attributes::new().config_path("../tauri.conf.json"))
        .expect("tauri-build (tauri.conf.json at the repository root)");
}
