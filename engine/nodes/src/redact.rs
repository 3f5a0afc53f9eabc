//! Redaction of credential values: every place a step could leak a secret it
//! was given (its output, its error, its log lines, a body streamed to the
//! blob store) passes through a [`Redactor`] holding the secrets that step
//! used, in every form they travel in (plain, base64 for basic auth, percent
//! encoded for query strings).

use std::borrow::Cow;

use base64::Engine as _;
use memchr::memmem;
use serde_json::Value;

/// What replaces a secret.
pub const MASK: &str = "***";

/// The strings to hide for one credential value.
pub fn secrets_of(kind: &str, value: &Value) -> Vec<String> {
    let field = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    match kind {
        "bearer" => out.push(field("token").to_string()),
        "basic" => {
            out.push(field("password").to_string());
            let pair = format!("{}:{}", field("username"), field("password"));
            out.push(base64::engine::general_purpose::STANDARD.encode(pair));
        }
        "header" => out.push(field("value").to_string()),
        "query" => out.push(field("value").to_string()),
        "openai" => out.push(field("api_key").to_string()),
        "postgres" | "mysql" => out.push(field("password").to_string()),
        "smtp" => {
            out.push(field("password").to_string());
            // AUTH PLAIN / LOGIN forms, should a server echo them.
            let plain = format!("\0{}\0{}", field("username"), field("password"));
            out.push(base64::engine::general_purpose::STANDARD.encode(plain));
            out.push(base64::engine::general_purpose::STANDARD.encode(field("password")));
        }
        _ => {}
    }
    let mut encoded = Vec::new();
    for s in &out {
        let pct = percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
        if pct != *s {
            encoded.push(pct);
        }
        let form: String = serde_urlencoded::to_string([("", s.as_str())])
            .unwrap_or_default()
            .trim_start_matches('=')
            .to_string();
        if form != *s {
            encoded.push(form);
        }
    }
    out.extend(encoded);
    out.retain(|s| !s.is_empty());
    out
}

/// A set of secrets to mask.
#[derive(Default, Clone)]
pub struct Redactor {
    /// Longest first, so a secret containing another is masked whole.
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut r = Redactor::default();
        r.extend(secrets);
        r
    }

    pub fn extend(&mut self, secrets: impl IntoIterator<Item = String>) {
        for s in secrets {
            if !s.is_empty() && !self.secrets.contains(&s) {
                self.secrets.push(s);
            }
        }
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    fn longest(&self) -> usize {
        self.secrets.first().map_or(0, String::len)
    }

    pub fn redact_str<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if !self.secrets.iter().any(|x| s.contains(x.as_str())) {
            return Cow::Borrowed(s);
        }
        let mut out = s.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        Cow::Owned(out)
    }

    /// The value with every secret in its strings (and keys) masked; `None`
    /// when nothing needed masking, so the caller keeps its shared copy.
    pub fn redact_value(&self, v: &Value) -> Option<Value> {
        if self.is_empty() || !self.touches(v) {
            return None;
        }
        Some(self.mask(v))
    }

    fn touches(&self, v: &Value) -> bool {
        match v {
            Value::String(s) => self.secrets.iter().any(|x| s.contains(x.as_str())),
            Value::Array(a) => a.iter().any(|v| self.touches(v)),
            Value::Object(m) => m.iter().any(|(k, v)| {
                self.secrets.iter().any(|x| k.contains(x.as_str())) || self.touches(v)
            }),
            _ => false,
        }
    }

    fn mask(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.redact_str(s).into_owned()),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.mask(v)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (self.redact_str(k).into_owned(), self.mask(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// A redactor for a byte stream (secrets may straddle chunks).
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            finders: self
                .secrets
                .iter()
                .map(|s| memmem::Finder::new(s.as_bytes()).into_owned())
                .collect(),
            keep: self.longest().saturating_sub(1),
            pending: Vec::new(),
        }
    }
}

/// Masks secrets in a stream of bytes, holding back just enough of the end
/// of each chunk that a secret split across chunks is still seen whole.
pub struct StreamRedactor {
    finders: Vec<memmem::Finder<'static>>,
    keep: usize,
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// Takes a chunk; returns the bytes that are safe to write now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.finders.is_empty() {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let mut buf = std::mem::take(&mut self.pending);
        for f in &self.finders {
            buf = replace_all(&buf, f);
        }
        let split = buf.len().saturating_sub(self.keep);
        self.pending = buf.split_off(split);
        buf
    }

    /// The held-back tail, at the end of the stream.
    pub fn finish(self) -> Vec<u8> {
        self.pending
    }
}

fn replace_all(haystack: &[u8], finder: &memmem::Finder<'_>) -> Vec<u8> {
    let needle = finder.needle().len();
    let mut out = Vec::with_capacity(haystack.len());
    let mut at = 0;
    while let Some(i) = finder.find(&haystack[at..]) {
        out.extend_from_slice(&haystack[at..at + i]);
        out.extend_from_slice(MASK.as_bytes());
        at += i + needle;
    }
    out.extend_from_slice(&haystack[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_masked_in_strings_and_keys() {
        let r = Redactor::new(secrets_of("bearer", &json!({"token": "s3cr3t-tok"})));
        let v = json!({"a": "Bearer s3cr3t-tok", "s3cr3t-tok": [1, "x s3cr3t-tok y"], "n": 3});
        assert_eq!(
            r.redact_value(&v).unwrap(),
            json!({"a": "Bearer ***", "***": [1, "x *** y"], "n": 3})
        );
        assert!(r.redact_value(&json!({"a": "clean"})).is_none());
    }

    #[test]
    fn basic_and_query_forms_are_covered() {
        let r = Redactor::new(secrets_of(
            "basic",
            &json!({"username": "ann", "password": "p&ss word"}),
        ));
        let header = base64::engine::general_purpose::STANDARD.encode("ann:p&ss word");
        assert_eq!(r.redact_str(&format!("Basic {header}")), "Basic ***");
        assert_eq!(r.redact_str("?pw=p%26ss+word"), "?pw=***");
        assert_eq!(r.redact_str("?pw=p%26ss%20word"), "?pw=***");
    }

    #[test]
    fn a_secret_split_across_chunks_is_masked() {
        let r = Redactor::new(["abcdef".to_string()]);
        for cut in 0..=12 {
            let text = b"xxabcdefyyabcdef";
            let mut s = r.stream();
            let mut out = s.push(&text[..cut.min(text.len())]);
            out.extend(s.push(&text[cut.min(text.len())..]));
            out.extend(s.finish());
            assert_eq!(out, b"xx***yy***", "cut at {cut}");
        }
    }
}
