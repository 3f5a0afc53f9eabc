//! Security defaults: the API token (generated into the data dir, mode 0600),
//! bearer checks, and Host/Origin checks that stop DNS rebinding and
//! cross-site requests from web pages on the same machine.

use std::io::Write;
use std::path::Path;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::{ApiError, AppState};

/// Returns the data dir's API token, creating it (mode 0600) on first start.
pub fn ensure_token(data_dir: &Path) -> std::io::Result<String> {
    ensure_token_new(data_dir).map(|(token, _)| token)
}

/// [`ensure_token`], and whether the token was created just now (so a
/// command can show it this once, and never again on its own).
pub fn ensure_token_new(data_dir: &Path) -> std::io::Result<(String, bool)> {
    let path = data_dir.join("api-token");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok((t.trim().to_string(), false)),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(data_dir)?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let token = hex::encode(bytes);
    let tmp = data_dir.join(".api-token.tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok((token, true))
}

/// Equal in constant time, so the token cannot be guessed byte by byte.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) async fn require_token(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    // The editor's WebSocket carries its session as a subprotocol.
    if crate::ui::ws_session(req.headers()).is_some_and(|s| crate::ui::is_session(s, &state.token))
    {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    let refused = match given {
        Some(t) if same(t.as_bytes(), state.token.as_bytes()) => return next.run(req).await,
        // The editor in a browser: a signed session instead of the token.
        Some(t) if crate::ui::is_session(t, &state.token) => return next.run(req).await,
        Some(_) => ApiError::new(StatusCode::UNAUTHORIZED, "wrong API token"),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing `Authorization: Bearer <token>` (the token is in <data-dir>/api-token)",
        ),
    };
    let mut resp = refused.into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    resp
}

pub(crate) async fn check_host_and_origin(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(e) = check_headers(req.headers(), &state) {
        return e.into_response();
    }
    next.run(req).await
}

/// Webhooks on a loopback-only server: the Host check alone (against DNS
/// rebinding from a web page); no Origin check, other services call them.
pub(crate) async fn check_host(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(e) = check_host_header(req.headers(), &state) {
        return e.into_response();
    }
    next.run(req).await
}

pub(crate) fn check_host_header(headers: &HeaderMap, state: &AppState) -> Result<(), ApiError> {
    let listen = state.options.listen;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !host_allowed(host, &listen) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("Host `{host}` is not this server (expected a loopback name or {listen})"),
        ));
    }
    Ok(())
}

fn check_headers(headers: &HeaderMap, state: &AppState) -> Result<(), ApiError> {
    check_host_header(headers, state)?;
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let own = origin
            .strip_prefix("http://")
            .is_some_and(|rest| rest == host);
        if !own {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("Origin `{origin}` is not this server: cross-site requests are refused"),
            ));
        }
    }
    Ok(())
}

/// A loopback name (`localhost`, `127.0.0.1`, `[::1]`) or the configured
/// address, with this server's port (or none).
fn host_allowed(host: &str, listen: &std::net::SocketAddr) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !n.is_empty() && !p.contains(']') => (n, Some(p)),
        _ => (host, None),
    };
    if port.is_some_and(|p| p.parse::<u16>().ok() != Some(listen.port())) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    matches!(name, "localhost" | "127.0.0.1" | "::1")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip == listen.ip() && !ip.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let listen: std::net::SocketAddr = "127.0.0.1:4260".parse().unwrap();
        for ok in [
            "localhost:4260",
            "127.0.0.1:4260",
            "[::1]:4260",
            "localhost",
        ] {
            assert!(host_allowed(ok, &listen), "{ok}");
        }
        for bad in [
            "evil.example:4260",
            "localhost:80",
            "",
            "127.0.0.1.evil:4260",
            "attacker.localhost:4260",
        ] {
            assert!(!host_allowed(bad, &listen), "{bad}");
        }
        let exposed: std::net::SocketAddr = "192.168.1.5:4260".parse().unwrap();
        assert!(host_allowed("192.168.1.5:4260", &exposed));
        let any: std::net::SocketAddr = "0.0.0.0:4260".parse().unwrap();
        assert!(!host_allowed("0.0.0.0:4260", &any));
    }

    #[test]
    fn token_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let a = ensure_token(dir.path()).unwrap();
        let b = ensure_token(dir.path()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("api-token"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
