//! Embeds the editor (see `sluice-embed-ui`).

fn main() {
    sluice_embed_ui::generate();
}
