-- Credentials, encrypted at rest (XChaCha20-Poly1305, key in vault.key).
CREATE TABLE credentials (
    name          TEXT PRIMARY KEY,
    kind          TEXT NOT NULL,
    nonce         BLOB NOT NULL,
    secret        BLOB NOT NULL,
    updated_at_us INTEGER NOT NULL
) WITHOUT ROWID;
