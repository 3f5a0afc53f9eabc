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

impl Vault {
    /// Reads the key, creating it (mode 0600, atomically) on first use.
    pub(crate) fn open(dir: &Path) -> Result<Vault> {
        let path = dir.join("vault.key");
        let io = |e: std::io::Error| Error::Io {
            path: path.clone(),
            source: e,
        };
        let key = match std::fs::read_to_string(&path) {
            Ok(text) => {
                hex::decode(text.trim()).map_err(|_| Error::Vault("vault.key is not hex".into()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = vec![0u8; 32];
                getrandom::fill(&mut key).map_err(|e| Error::Vault(e.to_string()))?;
                let tmp = dir.join(".vault.key.tmp");
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create(true).truncate(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    options.mode(0o600);
                }
                let mut f = options.open(&tmp).map_err(io)?;
                f.write_all(hex::encode(&key).as_bytes()).map_err(io)?;
                f.sync_all().map_err(io)?;
                std::fs::rename(&tmp, &path).map_err(io)?;
                key
            }
            Err(e) => return Err(io(e)),
        };
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
