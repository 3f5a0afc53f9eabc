//! The credentials vault: values encrypted at rest with XChaCha20-Poly1305.
//! The key is 32 random bytes in `<data-dir>/vault.key` (mode 0600), beside
//! the database and never inside it, so a copied `sluice.db` reveals nothing.
//! (An OS keyring, where one exists, is the planned home of the key; on a
//! headless Linux machine there is none, hence the file.)

use std::io::Write;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::{Error, Result};

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
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = dir.join(format!(".vault.key.{}.tmp", std::process::id()));
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
    f.write_all(hex::encode(key).as_bytes())?;
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

impl Vault {
    /// Reads the key, creating it (mode 0600) on first use. Refuses to make a
    /// new key when credentials already exist: they would never decrypt.
    pub(crate) fn open(dir: &Path, credentials_stored: bool) -> Result<Vault> {
        let path = dir.join("vault.key");
        let io = |e: std::io::Error| Error::Io {
            path: path.clone(),
            source: e,
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if credentials_stored {
                    return Err(Error::Vault(format!(
                        "{} is missing but credentials are stored: restore the key file",
                        path.display()
                    )));
                }
                create_key(dir, &path).map_err(io)?;
                // Whoever won a race to create it, everyone uses what is on disk.
                std::fs::read_to_string(&path).map_err(io)?
            }
            Err(e) => return Err(io(e)),
        };
        let key =
            hex::decode(text.trim()).map_err(|_| Error::Vault("vault.key is not hex".into()))?;
        let cipher = XChaCha20Poly1305::new_from_slice(&key)
            .map_err(|_| Error::Vault("vault.key must hold 32 bytes".into()))?;
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
                    "credential `{name}` does not decrypt with this vault.key"
                ))
            })
    }
}
