//! Binary data inside JSON messages. Small data travels inline as base64,
//! large data as a reference to a blob in the engine's blob store:
//!
//! ```json
//! {"$bytes": "iVBORw0KGgo…", "size": 1234, "content_type": "image/png"}
//! {"$blob": "<64 hex blake3 hash>", "size": 73400320, "content_type": "application/zip"}
//! ```
//!
//! Nodes that take data (`file.write` with format `bytes`, `email.send`
//! attachments, `http.request` bodies with `body_type: "bytes"`) accept both.

use std::io::Read;
use std::path::PathBuf;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::{Error, Host, Result, type_name};

pub fn inline(bytes: &[u8], content_type: Option<&str>) -> Value {
    let mut v = json!({
        "$bytes": base64::engine::general_purpose::STANDARD.encode(bytes),
        "size": bytes.len(),
    });
    if let Some(ct) = content_type {
        v["content_type"] = json!(ct);
    }
    v
}

pub fn blob_ref(hash: &str, size: u64, content_type: Option<&str>) -> Value {
    let mut v = json!({"$blob": hash, "size": size});
    if let Some(ct) = content_type {
        v["content_type"] = json!(ct);
    }
    v
}

/// Data to send or write: in memory, or a blob file.
#[derive(Debug)]
pub enum Data {
    Bytes(Vec<u8>),
    File { path: PathBuf, size: u64 },
}

impl Data {
    pub fn len(&self) -> u64 {
        match self {
            Data::Bytes(b) => b.len() as u64,
            Data::File { size, .. } => *size,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads it all into memory, refusing more than `limit` bytes.
    pub fn into_bytes(self, limit: u64, what: &str) -> Result<Vec<u8>> {
        match self {
            Data::Bytes(b) => Ok(b),
            Data::File { path, size } => {
                if size > limit {
                    return Err(Error::terminal(format!(
                        "{what}: {size} bytes is more than the limit of {limit}"
                    )));
                }
                let mut buf = Vec::with_capacity(size as usize);
                std::fs::File::open(&path)
                    .and_then(|f| f.take(limit + 1).read_to_end(&mut buf))
                    .map_err(|e| Error::retryable(format!("{what}: reading blob: {e}")))?;
                Ok(buf)
            }
        }
    }
}

/// The content type recorded on a binary value, if any.
pub fn content_type(v: &Value) -> Option<&str> {
    v.get("content_type").and_then(Value::as_str)
}

/// Whether `v` is a `$bytes` or `$blob` value.
pub fn is_binary(v: &Value) -> bool {
    v.get("$bytes").is_some_and(Value::is_string) || v.get("$blob").is_some_and(Value::is_string)
}

/// Binary data from a `$bytes`/`$blob` value; a plain string is taken as
/// base64 when `strings_are_base64`, else as UTF-8 text.
pub fn data_of(v: &Value, host: &dyn Host, strings_are_base64: bool, what: &str) -> Result<Data> {
    if let Some(b64) = v.get("$bytes").and_then(Value::as_str) {
        return decode_b64(b64, what).map(Data::Bytes);
    }
    if let Some(hash) = v.get("$blob").and_then(Value::as_str) {
        let path = host.blob_path(hash)?;
        let size = std::fs::metadata(&path)
            .map_err(|e| Error::terminal(format!("{what}: blob {hash}: {e}")))?
            .len();
        return Ok(Data::File { path, size });
    }
    match v {
        Value::String(s) if strings_are_base64 => decode_b64(s, what).map(Data::Bytes),
        Value::String(s) => Ok(Data::Bytes(s.as_bytes().to_vec())),
        other => Err(Error::terminal(format!(
            "{what}: expected {} or a {{\"$bytes\"}} / {{\"$blob\"}} value, got {}",
            if strings_are_base64 {
                "a base64 string"
            } else {
                "a string"
            },
            type_name(other)
        ))),
    }
}

fn decode_b64(s: &str, what: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| Error::terminal(format!("{what}: not valid base64: {e}")))
}
