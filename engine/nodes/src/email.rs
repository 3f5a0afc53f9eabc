//! `email.send`: one message over SMTP (lettre), with an `smtp` credential.
//!
//! The Message-ID derives from the step's idempotency key, so a retried or
//! resumed step sends a message with the same id and receivers can spot the
//! duplicate. SMTP 4xx replies and connection failures are retryable; 5xx
//! replies, bad addresses and TLS failures are not.

use std::sync::Arc;
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, Mailboxes, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde_json::{Value, json};

use crate::binary;
use sluice_model::kinds::EmailConfig;

use crate::{Call, Error, Outputs, Result, config, out, type_name};

const KIND: &str = "email.send";

fn addresses(value: Option<&Value>, field: &str) -> Result<Vec<Mailbox>> {
    let parse = |s: &str| -> Result<Vec<Mailbox>> {
        if s.trim().is_empty() {
            return Ok(vec![]);
        }
        s.parse::<Mailboxes>()
            .map(|m| m.into_iter().collect())
            .map_err(|e| Error::terminal(format!("{KIND}: {field}: `{s}` is not an address: {e}")))
    };
    match value {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::String(s)) => parse(s),
        Some(Value::Array(items)) => {
            let mut all = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => all.extend(parse(s)?),
                    other => {
                        return Err(Error::terminal(format!(
                            "{KIND}: {field}: addresses must be strings, got {}",
                            type_name(other)
                        )));
                    }
                }
            }
            Ok(all)
        }
        Some(other) => Err(Error::terminal(format!(
            "{KIND}: {field} must be a string or an array of strings, got {}",
            type_name(other)
        ))),
    }
}

/// An SMTP server as a credential names it, with a transport to it.
struct Server {
    host: String,
    port: u16,
    username: Option<String>,
    timeout: Duration,
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

/// The server credential `name` names, and a transport to it with the
/// credential's security and login.
async fn server(call: &Call<'_>, name: &str) -> Result<Server> {
    let cred = call.host.credential(name).await?;
    if cred.kind != "smtp" {
        return Err(Error::terminal(format!(
            "{KIND}: credential `{name}` is a `{}` credential; email needs an `smtp` one",
            cred.kind
        )));
    }
    let field = |k: &str| {
        cred.value
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let host = field("host").unwrap_or_default();
    let port = cred
        .value
        .get("port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| Error::terminal(format!("{KIND}: credential `{name}` has no valid port")))?;
    let security = field("security").unwrap_or_else(|| "starttls".into());
    let username = field("username");
    let tls_params = || -> Result<TlsParameters> {
        let mut b = TlsParameters::builder(host.clone());
        for path in &call.io.settings.tls.extra_roots {
            let pem = std::fs::read(path).map_err(|e| {
                Error::terminal(format!("tls.extra_roots: {}: {e}", path.display()))
            })?;
            let cert = Certificate::from_pem(&pem).map_err(|e| {
                Error::terminal(format!("tls.extra_roots: {}: {e}", path.display()))
            })?;
            b = b.add_root_certificate(cert);
        }
        b.build_rustls()
            .map_err(|e| Error::terminal(format!("{KIND}: TLS setup: {e}")))
    };
    let tls = match security.as_str() {
        "none" => Tls::None,
        "starttls" => Tls::Required(tls_params()?),
        "tls" => Tls::Wrapper(tls_params()?),
        other => {
            return Err(Error::terminal(format!(
                "{KIND}: credential `{name}`: security `{other}` is not one of none, starttls, tls"
            )));
        }
    };
    let timeout = Duration::from_millis(call.io.settings.smtp.timeout_ms);
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.clone())
        .port(port)
        .tls(tls)
        .timeout(Some(timeout));
    if let Some(u) = &username {
        transport = transport.credentials(Credentials::new(
            u.clone(),
            field("password").unwrap_or_default(),
        ));
    }
    Ok(Server {
        host,
        port,
        username,
        timeout,
        transport: transport.build(),
    })
}

/// Checks an `smtp` credential without sending anything: connects, greets,
/// upgrades to TLS and logs in as the credential says, then quits. The
/// config is an `email.send` one; only its `credential` is read.
pub async fn check(call: &Call<'_>) -> Result<String> {
    let cfg = config::<EmailConfig>(call)?;
    let Server {
        host,
        port,
        username,
        timeout,
        transport,
    } = server(call, &cfg.credential).await?;
    match tokio::time::timeout(timeout * 4, transport.test_connection()).await {
        Err(_) => Err(Error::retryable(format!(
            "{KIND}: {host}:{port} did not finish the handshake within {} ms",
            (timeout * 4).as_millis()
        ))),
        Ok(Err(e)) => Err(smtp_error(&e, &host, port)),
        Ok(Ok(false)) => Err(Error::retryable(format!(
            "{KIND}: {host}:{port} closed the connection after the handshake"
        ))),
        Ok(Ok(true)) => Ok(match username {
            Some(u) => format!("{host}:{port} accepted the connection and the login of {u}"),
            None => format!("{host}:{port} accepted the connection (no login set)"),
        }),
    }
}

pub async fn send(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<EmailConfig>(call)?;
    let Server {
        host,
        port,
        username,
        timeout,
        transport,
    } = server(call, &cfg.credential).await?;

    let from = match cfg.from {
        Some(f) => f,
        None => match &username {
            Some(u) if u.contains('@') => u.clone(),
            _ => {
                return Err(Error::terminal(format!(
                    "{KIND}: set `from` (the credential's username is not an address)"
                )));
            }
        },
    };
    let from: Mailbox = from
        .parse()
        .map_err(|e| Error::terminal(format!("{KIND}: from: `{from}` is not an address: {e}")))?;
    let to = addresses(cfg.to.as_ref(), "to")?;
    let cc = addresses(cfg.cc.as_ref(), "cc")?;
    let bcc = addresses(cfg.bcc.as_ref(), "bcc")?;
    if to.is_empty() && cc.is_empty() && bcc.is_empty() {
        return Err(Error::terminal(format!(
            "{KIND}: no recipients (set `to`, `cc` or `bcc`)"
        )));
    }
    let subject = cfg.subject.unwrap_or_default();
    let domain = from.email.domain().to_string();
    let message_id = format!(
        "<{}@{domain}>",
        &blake3::hash(call.host.idempotency_key().as_bytes()).to_hex()[..32]
    );

    let mut builder = Message::builder()
        .from(from)
        .subject(subject)
        .message_id(Some(message_id.clone()));
    for m in &to {
        builder = builder.to(m.clone());
    }
    for m in &cc {
        builder = builder.cc(m.clone());
    }
    for m in &bcc {
        builder = builder.bcc(m.clone());
    }
    if let Some(r) = cfg.reply_to {
        for m in addresses(Some(&Value::String(r)), "reply_to")? {
            builder = builder.reply_to(m);
        }
    }

    let text = cfg.text;
    let html = cfg.html;
    let attachments = attachments(call, cfg.attachments.as_ref())?;
    let content = match (text, html) {
        (Some(t), Some(h)) => Content::Multi(MultiPart::alternative_plain_html(t, h)),
        (Some(t), None) => Content::Single(SinglePart::plain(t)),
        (None, Some(h)) => Content::Single(SinglePart::html(h)),
        (None, None) if !attachments.is_empty() => {
            Content::Single(SinglePart::plain(String::new()))
        }
        (None, None) => {
            return Err(Error::terminal(format!(
                "{KIND}: set `text`, `html` or `attachments`"
            )));
        }
    };
    let build_err = |e: lettre::error::Error| Error::terminal(format!("{KIND}: {e}"));
    let message = if attachments.is_empty() {
        match content {
            Content::Multi(m) => builder.multipart(m),
            Content::Single(s) => builder.singlepart(s),
        }
        .map_err(build_err)?
    } else {
        let mut mixed = match content {
            Content::Multi(m) => MultiPart::mixed().multipart(m),
            Content::Single(s) => MultiPart::mixed().singlepart(s),
        };
        for a in attachments {
            mixed = mixed.singlepart(a);
        }
        builder.multipart(mixed).map_err(build_err)?
    };
    let accepted: Vec<String> = message
        .envelope()
        .to()
        .iter()
        .map(ToString::to_string)
        .collect();

    let send = transport.send(message);
    // lettre's timeout covers each command; this bounds the whole exchange.
    let response = match tokio::time::timeout(timeout * 4, send).await {
        Err(_) => {
            return Err(Error::retryable(format!(
                "{KIND}: {host}:{port} did not finish within {} ms",
                (timeout * 4).as_millis()
            )));
        }
        Ok(r) => r.map_err(|e| smtp_error(&e, &host, port))?,
    };
    out(Arc::new(json!({
        "message_id": message_id,
        "accepted": accepted,
        "response": format!(
            "{} {}",
            response.code(),
            response.message().collect::<Vec<_>>().join(" ")
        ),
    })))
}

enum Content {
    Multi(MultiPart),
    Single(SinglePart),
}

fn smtp_error(e: &lettre::transport::smtp::Error, host: &str, port: u16) -> Error {
    let mut msg = format!("{KIND}: {host}:{port}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !msg.contains(&s_text) {
            msg.push_str(&format!(": {s_text}"));
        }
        source = s.source();
    }
    let retryable = if e.is_permanent() || e.is_tls() || e.is_client() || crate::is_tls_failure(e) {
        false
    } else {
        // 4xx replies, timeouts, refused or dropped connections.
        true
    };
    Error {
        message: msg,
        retryable,
    }
}

fn attachments(call: &Call<'_>, value: Option<&Value>) -> Result<Vec<SinglePart>> {
    let items = match value {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(Error::terminal(format!(
                "{KIND}: attachments must be an array, got {}",
                type_name(other)
            )));
        }
    };
    let limit = call.io.settings.smtp.max_attachment_bytes;
    let mut total = 0u64;
    let mut parts = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let what = format!("{KIND}: attachments[{i}]");
        let filename = item
            .get("filename")
            .and_then(Value::as_str)
            .filter(|f| !f.trim().is_empty())
            .ok_or_else(|| Error::terminal(format!("{what}: `filename` is required")))?;
        let content = item
            .get("content")
            .ok_or_else(|| Error::terminal(format!("{what}: `content` is required")))?;
        let data = binary::data_of(content, call.host, false, &what)?;
        total += data.len();
        if total > limit {
            return Err(Error::terminal(format!(
                "{what}: attachments exceed smtp.max_attachment_bytes ({limit})"
            )));
        }
        let bytes = data.into_bytes(limit, &what)?;
        let ct_text = item
            .get("content_type")
            .and_then(Value::as_str)
            .or_else(|| binary::content_type(content))
            .unwrap_or(if content.is_string() {
                "text/plain; charset=utf-8"
            } else {
                "application/octet-stream"
            });
        let ct = ContentType::parse(ct_text).map_err(|e| {
            Error::terminal(format!(
                "{what}: content_type `{ct_text}` is not valid: {e}"
            ))
        })?;
        parts.push(Attachment::new(filename.to_string()).body(bytes, ct));
    }
    Ok(parts)
}
