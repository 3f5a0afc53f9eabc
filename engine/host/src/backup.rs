//! `sluice backup` and `sluice restore`: a data dir as one archive.
//!
//! The archive is a gzip'd tar holding `sluice-backup.json` (what it is),
//! `sluice.db` (a consistent snapshot: SQLite's `VACUUM INTO`, taken while
//! an engine may be running), `blobs/`, `config.toml`, the workflows folder
//! when it is the data dir's own, and `vault.key` only when asked for. The
//! API token, the peer identity and lock files are never in it: a restored
//! data dir gets its own.
//!
//! Restore writes into an empty (or new) dir only, accepts only the names
//! above (no path leaves the dir), and checks the database before it
//! answers: an archive that is not a Sluice backup, or is damaged, leaves
//! nothing behind.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What `sluice-backup.json` says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub format: String,
    /// The Sluice that wrote it.
    pub version: String,
    pub created_at_us: i64,
    /// Whether `vault.key` is inside (credentials can be read after a
    /// restore only with it, or with the original key put back by hand).
    pub with_key: bool,
    pub runs: u64,
    pub blobs: u64,
}

pub const FORMAT: &str = "sluice.backup/v1";
const MANIFEST: &str = "sluice-backup.json";

/// Why a backup or restore failed; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Engine(#[from] sluice_runtime::executor::Error),
    #[error("{0}")]
    Store(#[from] sluice_store::Error),
    #[error(
        "{}: not empty: restore into a new or empty folder (nothing was written)",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("{}: not a Sluice backup: {why}", path.display())]
    NotABackup { path: PathBuf, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What [`backup`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub manifest: Manifest,
    pub bytes: u64,
    /// Credentials are stored but the key was left out.
    pub credentials_need_key: bool,
}

/// Writes the data dir behind `engine` to `file` (replacing it only once
/// the archive is complete); the vault key only when `with_key`.
pub async fn backup(
    engine: &sluice_runtime::Engine,
    file: &Path,
    with_key: bool,
) -> Result<Written> {
    let store = engine.store();
    let dir = store.data_dir().to_path_buf();
    let parent = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let staging = tempfile::Builder::new()
        .prefix(".sluice-backup-")
        .tempdir_in(&parent)
        .map_err(io(&parent))?;
    let db = staging.path().join("sluice.db");
    store.snapshot_into(&db).await?;
    let key = if with_key {
        store.vault_key().await?
    } else {
        None
    };
    let credentials_need_key = !with_key && !store.list_credentials().await?.is_empty();
    let facts = store.storage().await?;
    let manifest = Manifest {
        format: FORMAT.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        created_at_us: sluice_nodes::now_us(),
        with_key: key.is_some(),
        runs: facts.runs,
        blobs: facts.blobs,
    };
    let file = file.to_path_buf();
    let m = manifest.clone();
    let bytes = tokio::task::spawn_blocking(move || write_archive(&dir, &db, &file, &m, key))
        .await
        .map_err(|e| Error::Io {
            path: PathBuf::from("backup"),
            source: std::io::Error::other(e),
        })??;
    Ok(Written {
        manifest,
        bytes,
        credentials_need_key,
    })
}

fn write_archive(
    dir: &Path,
    db: &Path,
    file: &Path,
    manifest: &Manifest,
    key: Option<String>,
) -> Result<u64> {
    let parent = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".sluice-backup-")
        .suffix(".part")
        .tempfile_in(parent)
        .map_err(io(parent))?;
    let gz = flate2::write::GzEncoder::new(tmp.as_file(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    let text = serde_json::to_vec_pretty(manifest).map_err(|e| Error::Io {
        path: file.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    append_bytes(&mut tar, MANIFEST, &text, file)?;
    tar.append_path_with_name(db, "sluice.db").map_err(io(db))?;
    let config = dir.join("config.toml");
    if config.is_file() {
        tar.append_path_with_name(&config, "config.toml")
            .map_err(io(&config))?;
    }
    for sub in ["blobs", "workflows"] {
        let p = dir.join(sub);
        if p.is_dir() {
            append_tree(&mut tar, &p, Path::new(sub))?;
        }
    }
    if let Some(k) = key {
        append_bytes(&mut tar, "vault.key", k.trim().as_bytes(), file)?;
    }
    let gz = tar.into_inner().map_err(io(file))?;
    let f = gz.finish().map_err(io(file))?;
    f.sync_all().map_err(io(file))?;
    let bytes = f.metadata().map_err(io(file))?.len();
    tmp.persist(file).map_err(|e| Error::Io {
        path: file.to_path_buf(),
        source: e.error,
    })?;
    Ok(bytes)
}

fn append_bytes<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    bytes: &[u8],
    file: &Path,
) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes.len() as u64);
    h.set_mode(0o600);
    h.set_cksum();
    tar.append_data(&mut h, name, bytes).map_err(io(file))
}

/// Files under `src` as `name/...`, skipping temp folders.
fn append_tree<W: Write>(tar: &mut tar::Builder<W>, src: &Path, name: &Path) -> Result<()> {
    for entry in std::fs::read_dir(src).map_err(io(src))? {
        let entry = entry.map_err(io(src))?;
        let path = entry.path();
        let file_name = entry.file_name();
        if file_name == "tmp" || file_name.to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            append_tree(tar, &path, &name.join(&file_name))?;
        } else if kind.is_file() {
            match tar.append_path_with_name(&path, name.join(&file_name)) {
                Ok(()) => {}
                // A blob collected while the backup ran: nothing in the
                // snapshot can need it (it was unreferenced for an hour).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
    }
    Ok(())
}

/// Whether `name` (a path inside the archive) is one restore writes.
fn allowed(name: &Path) -> bool {
    let parts: Vec<&str> = name
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str().unwrap_or("\0"),
            _ => "\0",
        })
        .collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match parts.as_slice() {
        [MANIFEST | "sluice.db" | "config.toml" | "vault.key"] => true,
        ["blobs", shard, rest] => hex(shard, 2) && hex(rest, 62),
        ["workflows", file] => file.ends_with(".flow.json") && !file.starts_with('.'),
        _ => false,
    }
}

/// What [`restore`] put in place.
#[derive(Debug, Clone)]
pub struct Restored {
    pub manifest: Manifest,
    pub runs: u64,
    pub unfinished: u64,
}

/// Restores `file` into `dir` (new or empty). On any error the dir is left
/// as it was found (empty, or removed when restore created it).
pub async fn restore(file: &Path, dir: &Path) -> Result<Restored> {
    let created = match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::NotEmpty(dir.to_path_buf()));
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            true
        }
        Err(e) => return Err(io(dir)(e)),
    };
    let result = restore_into(file, dir).await;
    if result.is_err() {
        // Leave nothing half-restored behind.
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                let removed = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                if let Err(err) = removed {
                    eprintln!("sluice: cannot remove {}: {err}", p.display());
                }
            }
        }
        if created && let Err(err) = std::fs::remove_dir(dir) {
            eprintln!("sluice: cannot remove {}: {err}", dir.display());
        }
    }
    result
}

async fn restore_into(file: &Path, dir: &Path) -> Result<Restored> {
    let (f, d) = (file.to_path_buf(), dir.to_path_buf());
    let manifest = tokio::task::spawn_blocking(move || extract(&f, &d))
        .await
        .map_err(|e| Error::Io {
            path: file.to_path_buf(),
            source: std::io::Error::other(e),
        })??;
    let store = sluice_store::Store::open(dir).await?;
    let check = store.integrity_check().await?;
    if check != "ok" {
        return Err(Error::NotABackup {
            path: file.to_path_buf(),
            why: format!("its database is damaged ({check})"),
        });
    }
    let facts = store.storage().await?;
    store.journal().flush().await?;
    Ok(Restored {
        manifest,
        runs: facts.runs,
        unfinished: facts.running,
    })
}

fn extract(file: &Path, dir: &Path) -> Result<Manifest> {
    let not_backup = |why: String| Error::NotABackup {
        path: file.to_path_buf(),
        why,
    };
    let f = std::fs::File::open(file).map_err(io(file))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut manifest: Option<Manifest> = None;
    let mut has_db = false;
    let entries = archive
        .entries()
        .map_err(|e| not_backup(format!("not a gzip'd tar archive ({e})")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| not_backup(format!("damaged archive ({e})")))?;
        let name = entry
            .path()
            .map_err(|e| not_backup(format!("a bad name in the archive ({e})")))?
            .into_owned();
        if !entry.header().entry_type().is_file() {
            continue;
        }
        if !allowed(&name) {
            return Err(not_backup(format!(
                "it holds `{}`, which a Sluice backup never does",
                name.display()
            )));
        }
        if name == Path::new(MANIFEST) {
            let mut text = String::new();
            entry
                .take(1 << 20)
                .read_to_string(&mut text)
                .map_err(|e| not_backup(format!("unreadable {MANIFEST} ({e})")))?;
            let m: Manifest =
                serde_json::from_str(&text).map_err(|e| not_backup(format!("{MANIFEST}: {e}")))?;
            if m.format != FORMAT {
                return Err(not_backup(format!(
                    "format `{}`; this Sluice reads `{FORMAT}`",
                    m.format
                )));
            }
            manifest = Some(m);
            continue;
        }
        if manifest.is_none() {
            return Err(not_backup(format!("{MANIFEST} does not come first")));
        }
        has_db |= name == Path::new("sluice.db");
        let dest = dir.join(&name);
        if let Some(p) = dest.parent() {
            std::fs::create_dir_all(p).map_err(io(p))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut out = options.open(&dest).map_err(io(&dest))?;
        std::io::copy(&mut entry, &mut out)
            .map_err(|e| not_backup(format!("damaged archive at `{}` ({e})", name.display())))?;
        out.sync_all().map_err(io(&dest))?;
    }
    let manifest = manifest.ok_or_else(|| not_backup(format!("no {MANIFEST}")))?;
    if !has_db {
        return Err(not_backup("no sluice.db".into()));
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_data_dirs_own_names_are_restored() {
        for ok in [
            "sluice.db",
            "config.toml",
            "vault.key",
            "sluice-backup.json",
            "workflows/orders.flow.json",
            "blobs/ab/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd",
        ] {
            assert!(allowed(Path::new(ok)), "{ok}");
        }
        for bad in [
            "../sluice.db",
            "/etc/passwd",
            "api-token",
            "peer.key",
            "blobs/ab/../../x",
            "blobs/zz/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd",
            "blobs/AB/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd",
            "blobs/ab/0123456789abcdef0123456789abcdef0123456789abcdef012345678",
            "workflows/../../x.flow.json",
            "workflows/a/b.flow.json",
            "workflows/.hidden.flow.json",
        ] {
            assert!(!allowed(Path::new(bad)), "{bad}");
        }
    }
}
