//! The credentials vault: values encrypted at rest with XChaCha20-Poly1305
//! under a 32-byte key that is never inside the database, so a copied
//! `sluice.db` reveals nothing.
//!
//! Where the key lives is decided once, when the first credential is stored:
//! - in the OS keyring (macOS Keychain, Windows Credential Manager, the
//!   Secret Service on Linux desktops) when one answers; `vault.keyring`
//!   beside the database then records which keyring entry holds it (a name,
//!   not the key);
//! - otherwise in `vault.key` beside the database (mode 0600), which is what
//!   a headless machine without a keyring gets.
//!
//! `SLUICE_VAULT_KEY=keyring|file|auto` (default `auto`) overrides the
//! choice for a new vault. An existing vault is always opened where it is;
//! if its keyring cannot be reached the error says so rather than quietly
//! starting a new key.

use std::io::Write;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::{Error, Result};

/// The keyring service name of Sluice's entries.
pub const KEYRING_SERVICE: &str = "sluice";
const KEY_FILE: &str = "vault.key";
const MARKER_FILE: &str = "vault.keyring";

/// Where a new vault's key goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHome {
    /// The OS keyring when one answers, else the key file.
    Auto,
    /// Always the key file.
    File,
    /// Always the OS keyring (an error when there is none).
    Keyring,
}

impl KeyHome {
    /// `SLUICE_VAULT_KEY`: `auto` (default), `file` or `keyring`.
    pub fn from_env() -> Result<KeyHome> {
        match std::env::var("SLUICE_VAULT_KEY").as_deref() {
            Err(_) | Ok("") | Ok("auto") => Ok(KeyHome::Auto),
            Ok("file") => Ok(KeyHome::File),
            Ok("keyring") => Ok(KeyHome::Keyring),
            Ok(other) => Err(Error::Vault(format!(
                "SLUICE_VAULT_KEY is `{other}`; use auto, file or keyring"
            ))),
        }
    }
}

pub(crate) struct Vault {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(***)")
    }
}

/// Writes a fresh key without ever exposing a partial or replaced one: a
/// private temp file, fsynced, hard-linked into place (fails if a key
/// appeared meanwhile), then the directory fsynced.
fn create_key(dir: &Path, path: &Path) -> std::io::Result<()> {
    let key = random_hex(32).map_err(|e| std::io::Error::other(e.to_string()))?;
    write_new(dir, path, key.as_bytes())
}

/// The data dir's key for resume links (see `Store::resume_key`).
pub(crate) fn resume_key(dir: &Path) -> Result<[u8; 32]> {
    let path = dir.join("resume.key");
    let read = |path: &Path| -> Result<Option<[u8; 32]>> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let bytes = hex::decode(text.trim()).ok().filter(|b| b.len() == 32);
                let key = bytes.ok_or_else(|| {
                    Error::Vault(format!("{} is not a 64-digit hex key", path.display()))
                })?;
                Ok(Some(key.try_into().unwrap_or([0; 32])))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Vault(format!("reading {}: {e}", path.display()))),
        }
    };
    if let Some(key) = read(&path)? {
        return Ok(key);
    }
    create_key(dir, &path).map_err(|e| Error::Vault(format!("writing {}: {e}", path.display())))?;
    read(&path)?.ok_or_else(|| Error::Vault(format!("{} vanished", path.display())))
}

fn random_hex(n: usize) -> Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| Error::Vault(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// Creates `path` with `content` (mode 0600) unless it exists; never shows
/// a partial file.
fn write_new(dir: &Path, path: &Path, content: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("vault"),
        std::process::id()
    ));
    // A stale temp file may have loose permissions: never reuse it.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(&tmp)?;
    f.write_all(content)?;
    f.sync_all()?;
    let linked = std::fs::hard_link(&tmp, path);
    std::fs::remove_file(&tmp)?;
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    std::fs::File::open(dir)?.sync_all()
}

/// The key of an existing vault, as stored (hex); None when there is no
/// vault yet. For `sluice backup --with-key`.
pub(crate) fn key_hex(dir: &Path) -> Result<Option<String>> {
    let file = dir.join(KEY_FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => return Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(Error::Io { path: file, source }),
    }
    let marker = dir.join(MARKER_FILE);
    match std::fs::read_to_string(&marker) {
        Ok(account) => Ok(Some(os_keyring::read(account.trim())?.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: marker,
            source,
        }),
    }
}

impl Vault {
    /// Finds the key (file or keyring), creating it in `home` when there is
    /// none yet. Refuses to make a new key when credentials already exist:
    /// they would never decrypt. Blocking (the keyring may be slow).
    pub(crate) fn open(dir: &Path, credentials_stored: bool, home: KeyHome) -> Result<Vault> {
        let file = dir.join(KEY_FILE);
        let marker = dir.join(MARKER_FILE);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |e: std::io::Error| Error::Io { path, source: e }
        };
        let hex_key = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::read_to_string(&marker) {
                    Ok(account) => os_keyring::read(account.trim())?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        if credentials_stored {
                            return Err(Error::Vault(format!(
                                "{} is missing but credentials are stored: restore the key file",
                                file.display()
                            )));
                        }
                        match new_key(dir, home)? {
                            Some(key) => key,
                            None => {
                                create_key(dir, &file).map_err(io(&file))?;
                                // Whoever won a race to create it, everyone
                                // uses what is on disk.
                                std::fs::read_to_string(&file).map_err(io(&file))?
                            }
                        }
                    }
                    Err(e) => return Err(io(&marker)(e)),
                }
            }
            Err(e) => return Err(io(&file)(e)),
        };
        let key = hex::decode(hex_key.trim())
            .map_err(|_| Error::Vault("the vault key is not hex".into()))?;
        let cipher = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| Error::Vault("the vault key must hold 32 bytes".into()))?;
        Ok(Vault { cipher })
    }

    /// Encrypts `plaintext`, bound to `name` (a ciphertext moved to another
    /// name does not decrypt). Returns (nonce, ciphertext).
    pub(crate) fn seal(&self, name: &str, plaintext: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).map_err(|e| Error::Vault(e.to_string()))?;
        let ct = self
            .cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plaintext,
                    aad: name.as_bytes(),
                },
            )
            .map_err(|_| Error::Vault("encryption failed".into()))?;
        Ok((nonce.to_vec(), ct))
    }

    pub(crate) fn open_sealed(&self, name: &str, nonce: &[u8], ct: &[u8]) -> Result<Vec<u8>> {
        let nonce: [u8; 24] = nonce
            .try_into()
            .map_err(|_| Error::Vault(format!("credential `{name}`: bad nonce")))?;
        self.cipher
            .decrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: ct,
                    aad: name.as_bytes(),
                },
            )
            .map_err(|_| {
                Error::Vault(format!(
                    "credential `{name}` does not decrypt with this vault's key"
                ))
            })
    }
}

/// A new key in the keyring (`Some`), or `None` for the key file.
fn new_key(dir: &Path, home: KeyHome) -> Result<Option<String>> {
    if home == KeyHome::File {
        return Ok(None);
    }
    let key = random_hex(32)?;
    // A fresh account name per vault: a second process racing to create the
    // vault writes its own entry and loses the marker race, never our key.
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let account = format!("vault key of {} ({})", real.display(), random_hex(4)?);
    if let Err(e) = os_keyring::write(&account, &key) {
        return match home {
            KeyHome::Keyring => Err(e),
            _ => Ok(None),
        };
    }
    let marker = dir.join(MARKER_FILE);
    write_new(dir, &marker, format!("{account}\n").as_bytes()).map_err(|source| Error::Io {
        path: marker.clone(),
        source,
    })?;
    let winner = std::fs::read_to_string(&marker).map_err(|source| Error::Io {
        path: marker.clone(),
        source,
    })?;
    if winner.trim() != account {
        os_keyring::remove(&account);
        return os_keyring::read(winner.trim()).map(Some);
    }
    Ok(Some(key))
}

/// The OS keyring, through the `keyring` crate.
mod os_keyring {
    use super::KEYRING_SERVICE;
    use crate::{Error, Result};

    fn entry(account: &str) -> Result<::keyring::Entry> {
        ::keyring::Entry::new(KEYRING_SERVICE, account)
            .map_err(|e| Error::Vault(format!("OS keyring: {e}")))
    }

    pub(super) fn write(account: &str, key: &str) -> Result<()> {
        let e = entry(account)?;
        e.set_password(key)
            .map_err(|e| Error::Vault(format!("OS keyring: {e}")))?;
        // Read back: some keyrings accept a write they cannot keep.
        match e.get_password() {
            Ok(k) if k == key => Ok(()),
            Ok(_) => Err(Error::Vault("OS keyring: the key read back differs".into())),
            Err(err) => Err(Error::Vault(format!("OS keyring: {err}"))),
        }
    }

    pub(super) fn read(account: &str) -> Result<String> {
        entry(account)?.get_password().map_err(|e| {
            Error::Vault(format!(
                "the vault key is in the OS keyring (service `{KEYRING_SERVICE}`, account \
                 `{account}`, recorded in vault.keyring) and cannot be read: {e}"
            ))
        })
    }

    pub(super) fn remove(account: &str) {
        if let Ok(e) = entry(account) {
            // Best effort: an orphan entry only costs a line in the keyring.
            e.delete_credential().ok();
        }
    }
}
