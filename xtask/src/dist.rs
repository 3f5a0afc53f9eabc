//! `cargo xtask dist`: the desktop app as a Debian package.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::cmd::{cargo, check, step, target_dir};
use crate::frontend;
use crate::toolchain::{ensure_desktop_toolchain, ensure_js_toolchain};

/// The desktop app as a Debian package: the release binary with the editor
/// built in, a desktop entry (which also claims `sluice://` links), icons.
/// Built with `dpkg-deb`; nothing is downloaded.
pub(crate) fn build() -> Result<PathBuf> {
    ensure_desktop_toolchain()?;
    ensure_js_toolchain()?;
    let ui = frontend::build()?;
    step("building the desktop app (release, with the editor built in)");
    check(
        cargo()
            .args(["build", "--release", "-p", "sluice-desktop", "--locked"])
            .env("SLUICE_EMBED_UI", &ui),
    )?;
    let target = target_dir()?;
    let version = env!("CARGO_PKG_VERSION");
    let root = target.join("dist").join(format!("sluice_{version}_amd64"));
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let bin_dir = root.join("usr/bin");
    std::fs::create_dir_all(&bin_dir)?;
    let bin = bin_dir.join("sluice-desktop");
    std::fs::copy(target.join("release/sluice-desktop"), &bin)?;
    // Symbols are a third of the binary and no use to a user.
    check(Command::new("strip").arg("--strip-unneeded").arg(&bin))?;
    let apps = root.join("usr/share/applications");
    std::fs::create_dir_all(&apps)?;
    std::fs::write(
        apps.join("sluice.desktop"),
        "[Desktop Entry]\nType=Application\nName=Sluice\nGenericName=Workflow engine\n\
         Comment=Local-first workflows: draw, run and watch them on your own machine\n\
         Exec=sluice-desktop %u\nIcon=sluice\nTerminal=false\nCategories=Development;Utility;\n\
         MimeType=x-scheme-handler/sluice;\nStartupWMClass=sluice-desktop\n",
    )?;
    for (size, file) in [
        ("32x32", "32x32.png"),
        ("64x64", "64x64.png"),
        ("128x128", "128x128.png"),
        ("256x256", "128x128@2x.png"),
        ("512x512", "512x512.png"),
    ] {
        let dir = root.join(format!("usr/share/icons/hicolor/{size}/apps"));
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(Path::new("assets/icons").join(file), dir.join("sluice.png"))?;
    }
    let installed_kb = dir_size(&root.join("usr"))? / 1024;
    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    std::fs::write(
        debian.join("control"),
        format!(
            "Package: sluice\nVersion: {version}\nArchitecture: amd64\nMaintainer: Sluice <sluice@localhost>\n\
             Installed-Size: {installed_kb}\n\
             Depends: libwebkit2gtk-4.1-0, libgtk-3-0, libayatana-appindicator3-1\n\
             Section: devel\nPriority: optional\n\
             Description: Sluice, a local-first workflow engine\n \
             Draw workflows as nodes and connections, run them on your own machine, and\n \
             watch every run. The engine runs inside the app and keeps serving schedules,\n \
             file triggers and webhooks while the window is closed.\n"
        ),
    )?;
    let deb = target
        .join("dist")
        .join(format!("sluice_{version}_amd64.deb"));
    check(
        Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group", "-Zxz", "-z9"])
            .arg(&root)
            .arg(&deb),
    )?;
    let size = std::fs::metadata(&deb)?.len();
    eprintln!(
        "package: {} ({:.1} MB; {:.1} MB installed)",
        deb.display(),
        size as f64 / 1e6,
        installed_kb as f64 / 1e3
    );
    Ok(deb)
}

fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
