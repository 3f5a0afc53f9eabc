//! `http.request`: one HTTP call through the engine's shared client.
//!
//! Redirects are followed here (not by reqwest) so the limit is per node,
//! credentials never follow a redirect to another origin, and `303` turns
//! the request into a `GET`. Bodies are read in chunks against limits: JSON
//! and text are parsed into the message, binary bodies above
//! `inline_bytes` stream into the blob store and never sit in memory whole.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde_json::{Map, Value, json};

use crate::binary::{self, Data};
use crate::net::NetPolicy;
use crate::settings::Settings;
use sluice_model::kinds::{BodyType, HttpRequestConfig, ResponseAs};

use crate::{Call, Error, Outputs, Result, config, out, type_name};

const KIND: &str = "http.request";

/// Makes ring the process's default rustls provider (once; a provider that
/// is already installed stays). Clients built elsewhere in the process, with
/// `reqwest::Client::new()`, need one.
pub fn install_crypto_provider() {
    // Err means a provider is already installed: fine.
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
}

/// Why the shared client cannot be built: a `tls.extra_roots` file (named)
/// that is not usable, or the TLS or client setup.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("tls.extra_roots: {}: {source}", path.display())]
    ReadRoots {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tls.extra_roots: {}: {source}", path.display())]
    ParseRoot {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("tls.extra_roots: {}: {source}", path.display())]
    AddRoot {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("tls.extra_roots: {}: no PEM certificate in the file", path.display())]
    NoCertificate { path: PathBuf },
    #[error("TLS setup: {0}")]
    Tls(#[source] rustls::Error),
    #[error("HTTP client setup: {0}")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Policy(#[from] crate::net::RuleError),
}

/// Builds the shared client: rustls on ring, the system's roots plus
/// `tls.extra_roots`, no automatic redirects, every name resolved through
/// `policy` (which drops the addresses it refuses).
pub(crate) fn build_client(
    settings: &Settings,
    policy: &NetPolicy,
) -> std::result::Result<reqwest::Client, ClientError> {
    let roots = root_store(settings)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ClientError::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(policy.resolver())
        .user_agent(settings.http.user_agent.clone())
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()
        .map_err(ClientError::Client)
}

/// The system's root certificates plus the configured extra ones.
pub fn root_store(settings: &Settings) -> std::result::Result<rustls::RootCertStore, ClientError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system certificates are skipped: one bad file must not
    // take HTTPS down.
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    for path in &settings.tls.extra_roots {
        let pem = std::fs::read(path).map_err(|source| ClientError::ReadRoots {
            path: path.clone(),
            source,
        })?;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|source| ClientError::ParseRoot {
                path: path.clone(),
                source,
            })?;
            roots.add(cert).map_err(|source| ClientError::AddRoot {
                path: path.clone(),
                source,
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(ClientError::NoCertificate { path: path.clone() });
        }
    }
    Ok(roots)
}

/// The request body, kept re-sendable for `307`/`308` redirects and retries.
enum Body {
    None,
    /// Bytes and their default content type.
    Bytes(bytes::Bytes, Option<String>),
    /// A blob file and its content type.
    File(std::path::PathBuf, Option<String>),
}

pub async fn request(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<HttpRequestConfig>(call)?;
    let defaults = &call.io.settings.http;
    let (client, policy) = call.io.http_client_and_policy()?;

    let method = match &cfg.method {
        None => Method::GET,
        Some(m) => Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes())
            .map_err(|_| Error::terminal(format!("{KIND}: method `{m}` is not an HTTP method")))?,
    };
    let url_text = cfg.url.trim();
    let mut url = Url::parse(url_text)
        .map_err(|e| Error::terminal(format!("{KIND}: url `{url_text}` is not valid: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::terminal(format!(
            "{KIND}: url scheme `{}` is not supported (use http or https)",
            url.scheme()
        )));
    }
    if !cfg.query.is_empty() {
        let mut pairs = url.query_pairs_mut();
        for (k, v) in &cfg.query {
            for item in query_values(k, v)? {
                pairs.append_pair(k, &item);
            }
        }
    }
    let mut headers = HeaderMap::new();
    {
        for (k, v) in &cfg.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| Error::terminal(format!("{KIND}: `{k}` is not a header name")))?;
            let text = scalar_text(v).ok_or_else(|| {
                Error::terminal(format!(
                    "{KIND}: header `{k}` must be a string, number or boolean, got {}",
                    type_name(v)
                ))
            })?;
            let value = HeaderValue::from_str(&text).map_err(|_| {
                Error::terminal(format!(
                    "{KIND}: header `{k}` has characters a header cannot carry"
                ))
            })?;
            headers.append(name, value);
        }
    }

    // Credential headers are kept apart: they never follow a redirect to
    // another origin.
    let mut secret_headers = HeaderMap::new();
    if let Some(name) = cfg.credential.as_deref() {
        let cred = call.host.credential(name).await?;
        let field = |k: &str| {
            cred.value
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let bad = || {
            Error::terminal(format!(
                "{KIND}: credential `{name}` has characters a header cannot carry"
            ))
        };
        match cred.kind.as_str() {
            "bearer" | "basic" | "header" => {
                let (n, v) = credential_header(&cred.kind, &cred.value).ok_or_else(bad)?;
                secret_headers.insert(n, sensitive(v));
            }
            "query" => {
                url.query_pairs_mut()
                    .append_pair(&field("name"), &field("value"));
            }
            other => {
                return Err(Error::terminal(format!(
                    "{KIND}: credential `{name}` is a `{other}` credential; \
                     HTTP needs bearer, basic, header or query"
                )));
            }
        }
    }
    if cfg.idempotency_key
        && !headers.contains_key("idempotency-key")
        && !call.host.idempotency_key().is_empty()
        && let Ok(v) = HeaderValue::from_str(call.host.idempotency_key())
    {
        headers.insert("idempotency-key", v);
    }

    let body = body_of(call, &cfg)?;
    let default_ct = match &body {
        Body::None => None,
        Body::Bytes(_, ct) | Body::File(_, ct) => {
            Some(ct.as_deref().unwrap_or("application/octet-stream"))
        }
    };
    if let Some(ct) = default_ct
        && !headers.contains_key(header::CONTENT_TYPE)
    {
        let v = HeaderValue::from_str(ct).map_err(|_| {
            Error::terminal(format!("{KIND}: content type `{ct}` is not a header value"))
        })?;
        headers.insert(header::CONTENT_TYPE, v);
    }

    let timeout_ms = cfg.timeout_ms.unwrap_or(defaults.timeout_ms);
    let max_redirects = cfg
        .max_redirects
        .map(u64::from)
        .unwrap_or(defaults.max_redirects as u64);
    let limits = Limits {
        max_response: cfg
            .max_response_bytes
            .unwrap_or(defaults.max_response_bytes),
        max_download: defaults
            .max_download_bytes
            .max(cfg.max_response_bytes.unwrap_or(0)),
        inline: defaults.inline_bytes,
    };
    let mode = cfg.response;
    let fail_on_status = cfg.fail_on_status;

    let shown_method = method.clone();
    let shown_url = strip_userinfo(&url);
    let exchange = async {
        let mut method = method;
        let mut url = url;
        let mut body = body;
        let origin = url.origin();
        let mut redirects = 0u64;
        loop {
            // Every hop: a redirect may point anywhere.
            policy
                .check_url(&url)
                .map_err(|r| Error::terminal(format!("{KIND}: {r}")))?;
            let mut req = client.request(method.clone(), url.clone());
            if url.origin() == origin {
                req = req.headers(headers.clone()).headers(secret_headers.clone());
            } else {
                // Like browsers and curl: authority does not travel to
                // another origin, whether from a credential or typed in.
                let mut h = headers.clone();
                for name in [
                    header::AUTHORIZATION,
                    header::COOKIE,
                    header::PROXY_AUTHORIZATION,
                ] {
                    h.remove(name);
                }
                req = req.headers(h);
            }
            req = match &body {
                Body::None => req,
                Body::Bytes(b, _) => req.body(b.clone()),
                Body::File(path, _) => {
                    let f = tokio::fs::File::open(path).await.map_err(|e| {
                        Error::retryable(format!("{KIND}: reading the body blob: {e}"))
                    })?;
                    req.body(reqwest::Body::from(f))
                }
            };
            let resp = req.send().await.map_err(|e| send_error(&e))?;
            let status = resp.status();
            if status.is_redirection()
                && max_redirects > 0
                && let Some(location) = resp.headers().get(header::LOCATION)
            {
                redirects += 1;
                if redirects > max_redirects {
                    return Err(Error::terminal(format!(
                        "{KIND}: more than {max_redirects} redirects (last to {})",
                        String::from_utf8_lossy(location.as_bytes())
                    )));
                }
                let location = location.to_str().map_err(|_| {
                    Error::terminal(format!("{KIND}: redirect with an unreadable Location"))
                })?;
                let next = url.join(location).map_err(|e| {
                    Error::terminal(format!(
                        "{KIND}: redirect to `{location}` is not a valid URL: {e}"
                    ))
                })?;
                if !matches!(next.scheme(), "http" | "https") {
                    return Err(Error::terminal(format!(
                        "{KIND}: redirect to a `{}` URL refused",
                        next.scheme()
                    )));
                }
                let to_get = status == StatusCode::SEE_OTHER
                    || (matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                        && method == Method::POST);
                if to_get {
                    if method != Method::HEAD {
                        method = Method::GET;
                    }
                    body = Body::None;
                    headers.remove(header::CONTENT_TYPE);
                }
                url = next;
                continue;
            }
            return read_response(call, resp, mode, &limits, fail_on_status, &method).await;
        }
    };
    match tokio::time::timeout(Duration::from_millis(timeout_ms), exchange).await {
        Ok(result) => result.map(|v| out(Arc::new(v)))?,
        Err(_) => Err(Error::retryable(format!(
            "{KIND}: {shown_method} {shown_url} timed out after {timeout_ms} ms"
        ))),
    }
}

/// The header a `bearer`, `basic` or `header` credential puts on a
/// request (None: another kind, or characters a header cannot carry).
pub fn credential_header(kind: &str, value: &Value) -> Option<(HeaderName, HeaderValue)> {
    let field = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
    match kind {
        "bearer" => Some((
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", field("token"))).ok()?,
        )),
        "basic" => {
            let pair = format!("{}:{}", field("username"), field("password"));
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            Some((
                header::AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {encoded}")).ok()?,
            ))
        }
        "header" => Some((
            HeaderName::from_bytes(field("name").as_bytes()).ok()?,
            HeaderValue::from_str(field("value")).ok()?,
        )),
        _ => None,
    }
}

fn sensitive(mut v: HeaderValue) -> HeaderValue {
    v.set_sensitive(true);
    v
}

fn strip_userinfo(url: &Url) -> String {
    let mut u = url.clone();
    // Only fails for URLs that cannot have credentials anyway.
    u.set_username("").ok();
    u.set_password(None).ok();
    u.to_string()
}

struct Limits {
    max_response: u64,
    max_download: u64,
    inline: u64,
}

fn query_values(key: &str, v: &Value) -> Result<Vec<String>> {
    match v {
        Value::Null => Ok(vec![]),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                scalar_text(i).ok_or_else(|| {
                    Error::terminal(format!(
                        "{KIND}: query `{key}` items must be strings, numbers or booleans"
                    ))
                })
            })
            .collect(),
        other => scalar_text(other).map(|s| vec![s]).ok_or_else(|| {
            Error::terminal(format!(
                "{KIND}: query `{key}` must be a string, number, boolean or array, got {}",
                type_name(other)
            ))
        }),
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn body_of(call: &Call<'_>, cfg: &HttpRequestConfig) -> Result<Body> {
    let body = match &cfg.body {
        None | Some(Value::Null) => return Ok(Body::None),
        Some(b) => b,
    };
    let body_type = cfg.body_type.unwrap_or(match body {
        Value::String(_) => BodyType::Text,
        v if binary::is_binary(v) => BodyType::Bytes,
        _ => BodyType::Json,
    });
    Ok(match body_type {
        BodyType::Json => Body::Bytes(
            serde_json::to_vec(body)
                .map_err(|e| Error::terminal(e.to_string()))?
                .into(),
            Some("application/json".into()),
        ),
        BodyType::Text => {
            let text = match body {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Body::Bytes(
                text.into_bytes().into(),
                Some("text/plain; charset=utf-8".into()),
            )
        }
        BodyType::Form => {
            let Value::Object(fields) = body else {
                return Err(Error::terminal(format!(
                    "{KIND}: a form body must be an object, got {}",
                    type_name(body)
                )));
            };
            let mut pairs: Vec<(String, String)> = Vec::new();
            for (k, v) in fields {
                for item in query_values(k, v)? {
                    pairs.push((k.clone(), item));
                }
            }
            let encoded = serde_urlencoded::to_string(&pairs)
                .map_err(|e| Error::terminal(format!("{KIND}: form body: {e}")))?;
            Body::Bytes(
                encoded.into_bytes().into(),
                Some("application/x-www-form-urlencoded".into()),
            )
        }
        BodyType::Bytes => {
            match binary::data_of(body, call.host, true, &format!("{KIND}: body"))? {
                Data::Bytes(b) => {
                    Body::Bytes(b.into(), binary::content_type(body).map(str::to_string))
                }
                Data::File { path, .. } => {
                    Body::File(path, binary::content_type(body).map(str::to_string))
                }
            }
        }
    })
}

fn send_error(e: &reqwest::Error) -> Error {
    request_error(KIND, e)
}

/// A request of node kind `kind` that failed: terminal or retryable, its
/// message naming the kind and every cause.
pub(crate) fn request_error(kind: &str, e: &reqwest::Error) -> Error {
    // A destination the policy refused (in the resolver) is terminal and
    // says only why: retrying will not make it allowed.
    if let Some(refused) = crate::net::refusal_in(e) {
        return Error::terminal(format!("{kind}: {refused}"));
    }
    // reqwest's message names the URL; the step's redactor masks any
    // credential in it.
    let mut msg = format!("{kind}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    if e.is_builder() || crate::is_tls_failure(e) {
        Error::terminal(msg)
    } else {
        Error::retryable(msg)
    }
}

/// How the body becomes part of the message.
#[derive(PartialEq)]
enum As {
    Json,
    Text,
    Bytes,
}

fn classify(content_type: Option<&str>) -> As {
    let Some(ct) = content_type else {
        return As::Bytes;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json" || essence.ends_with("+json") {
        As::Json
    } else if essence.starts_with("text/")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/xml"
                | "application/javascript"
                | "application/x-www-form-urlencoded"
                | "application/x-ndjson"
        )
    {
        As::Text
    } else {
        As::Bytes
    }
}

async fn read_response(
    call: &Call<'_>,
    mut resp: reqwest::Response,
    mode: ResponseAs,
    limits: &Limits,
    fail_on_status: bool,
    method: &Method,
) -> Result<Value> {
    let status = resp.status();
    let url = strip_userinfo(resp.url());
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let headers = headers_json(resp.headers());

    if fail_on_status && (status.is_client_error() || status.is_server_error()) {
        let snippet = read_limited(&mut resp, 4096).await.unwrap_or_default();
        let snippet = String::from_utf8_lossy(&snippet);
        let snippet = snippet.trim();
        let msg = format!(
            "{KIND}: {method} {url} answered {status}{}{snippet}",
            if snippet.is_empty() { "" } else { ": " }
        );
        let retryable = status.is_server_error()
            || status == StatusCode::REQUEST_TIMEOUT
            || status == StatusCode::TOO_MANY_REQUESTS;
        return Err(if retryable {
            Error::retryable(msg)
        } else {
            Error::terminal(msg)
        });
    }

    let kind = match mode {
        ResponseAs::Json => As::Json,
        ResponseAs::Text => As::Text,
        ResponseAs::Bytes => As::Bytes,
        ResponseAs::Auto => classify(content_type.as_deref()),
    };
    let body = match kind {
        As::Json | As::Text => {
            let bytes = read_limited(&mut resp, limits.max_response)
                .await
                .map_err(|e| e.in_context(&url))?;
            if bytes.len() as u64 > limits.max_response {
                return Err(Error::terminal(format!(
                    "{KIND}: the response from {url} is larger than max_response_bytes ({}); \
                     set `response: \"bytes\"` to store it as a blob",
                    limits.max_response
                )));
            }
            let text = decode_text(&bytes, content_type.as_deref());
            if kind == As::Text {
                Value::String(text)
            } else if text.trim().is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).map_err(|e| {
                    Error::terminal(format!(
                        "{KIND}: the response from {url} is not valid JSON (line {}, column {}): {e}",
                        e.line(),
                        e.column()
                    ))
                })?
            }
        }
        As::Bytes => download(call, &mut resp, limits, content_type.as_deref(), &url).await?,
    };
    Ok(json!({
        "status": status.as_u16(),
        "headers": headers,
        "body": body,
        "url": url,
    }))
}

fn headers_json(h: &HeaderMap) -> Value {
    let mut m: Map<String, Value> = Map::new();
    for (name, value) in h {
        let v = Value::String(String::from_utf8_lossy(value.as_bytes()).into_owned());
        match m.get_mut(name.as_str()) {
            None => {
                m.insert(name.as_str().to_string(), v);
            }
            Some(Value::Array(a)) => a.push(v),
            Some(prev) => {
                let first = prev.take();
                *prev = Value::Array(vec![first, v]);
            }
        }
    }
    Value::Object(m)
}

fn decode_text(bytes: &[u8], content_type: Option<&str>) -> String {
    let charset = content_type.and_then(|ct| {
        ct.split(';')
            .skip(1)
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"))
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
    });
    let encoding = charset
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = encoding.decode(bytes);
    text.into_owned()
}

struct ReadError(Error);

impl ReadError {
    fn in_context(self, url: &str) -> Error {
        Error {
            message: format!("{} (reading the response from {url})", self.0.message),
            retryable: self.0.retryable,
        }
    }
}

/// Reads at most `limit + 1` bytes (one more tells the caller it was over).
async fn read_limited(resp: &mut reqwest::Response, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| ReadError(send_error(&e)))? {
        let room = (limit + 1).saturating_sub(buf.len() as u64) as usize;
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() as u64 > limit {
            break;
        }
    }
    Ok(buf)
}

/// A binary body: inline when small, else streamed into a blob.
async fn download(
    call: &Call<'_>,
    resp: &mut reqwest::Response,
    limits: &Limits,
    content_type: Option<&str>,
    url: &str,
) -> Result<Value> {
    let mut buf: Vec<u8> = Vec::new();
    let mut writer: Option<Box<dyn crate::BlobWriter>> = None;
    let mut total: u64 = 0;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ReadError(send_error(&e)).in_context(url))?
    {
        total += chunk.len() as u64;
        if total > limits.max_download {
            return Err(Error::terminal(format!(
                "{KIND}: the response from {url} is larger than {} bytes",
                limits.max_download
            )));
        }
        match &mut writer {
            Some(w) => w.write(&chunk)?,
            None => {
                buf.extend_from_slice(&chunk);
                if buf.len() as u64 > limits.inline {
                    let mut w = call.host.blob_writer()?;
                    w.write(&buf)?;
                    buf = Vec::new();
                    writer = Some(w);
                }
            }
        }
    }
    Ok(match writer {
        None => binary::inline(&call.host.mask(&buf), content_type),
        Some(w) => {
            let (hash, size) = w.finish()?;
            binary::blob_ref(&hash, size, content_type)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_decide_the_body_form() {
        assert!(classify(Some("application/json; charset=utf-8")) == As::Json);
        assert!(classify(Some("application/problem+json")) == As::Json);
        assert!(classify(Some("text/html")) == As::Text);
        assert!(classify(Some("application/xml")) == As::Text);
        assert!(classify(Some("image/png")) == As::Bytes);
        assert!(classify(None) == As::Bytes);
    }

    #[test]
    fn text_is_decoded_by_its_charset() {
        assert_eq!(
            decode_text(
                &[0x63, 0x61, 0x66, 0xe9],
                Some("text/plain; charset=ISO-8859-1")
            ),
            "café"
        );
        assert_eq!(decode_text("café".as_bytes(), Some("text/plain")), "café");
    }
}
