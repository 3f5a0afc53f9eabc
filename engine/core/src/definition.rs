//! [`Definition`]: a workflow's JSON text as runs pin it, with its hash.

use std::sync::Arc;

/// A workflow definition as runs pin it: the JSON text and its BLAKE3 hash,
/// computed once. A plan holds one and every run of that plan shares it, so
/// starting a run neither copies nor hashes the text; the journal writer
/// stores each distinct text once (the `definitions` table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    text: Arc<str>,
    hash: Arc<str>,
}

impl Definition {
    pub fn new(text: impl Into<Arc<str>>) -> Definition {
        let text = text.into();
        let hash = blake3::hash(text.as_bytes()).to_hex().as_str().into();
        Definition { text, hash }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text, shared.
    pub fn shared_text(&self) -> &Arc<str> {
        &self.text
    }

    /// The lowercase hex BLAKE3 hash of the text.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The hash, shared.
    pub fn shared_hash(&self) -> &Arc<str> {
        &self.hash
    }
}

impl std::ops::Deref for Definition {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl From<String> for Definition {
    fn from(text: String) -> Definition {
        Definition::new(text)
    }
}

impl From<&str> for Definition {
    fn from(text: &str) -> Definition {
        Definition::new(text)
    }
}
