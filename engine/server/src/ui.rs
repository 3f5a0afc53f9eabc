//! The editor in the browser: its static files at `/`, and signing in
//! without copying a token.
//!
//! `sluice serve` prints a link with a one-time code
//! (`/ui/login?code=…`). Opening it trades the code for a session that the
//! sign-in page puts in this origin's `localStorage`; the editor sends it as
//! `Authorization: Bearer <session>` (and, on the WebSocket, as the
//! subprotocol `sluice.session.<session>`), which the API accepts in place
//! of the token. Not a cookie: browsers send cookies to every port of a
//! host, so any other local server could replay it; storage is scoped to
//! the origin, port included. A session is a random id signed with the API
//! token (HMAC-SHA256): it survives restarts, needs no storage, and every
//! session ends when the token is replaced.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use hmac::{KeyInit, Mac};

use sluice_api::{NewSignInLink, SignInLink};

use crate::AppState;

/// The name of the session in `localStorage` (and of the cookie earlier
/// versions set, which signing in now clears).
pub(crate) const SESSION_KEY: &str = "sluice_session";
/// How long a printed sign-in link works (it works once).
const CODE_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a browser stays signed in.
const SESSION_DAYS: u64 = 30;

/// One-time sign-in codes, in memory.
#[derive(Default)]
pub struct Codes {
    codes: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for Codes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the codes themselves: they sign a browser in.
        f.debug_struct("Codes").finish_non_exhaustive()
    }
}

impl Codes {
    /// A new one-time code.
    pub fn issue(&self) -> String {
        let code = random_hex(16);
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        codes.retain(|_, at| at.elapsed() < CODE_TTL);
        codes.insert(code.clone(), Instant::now());
        code
    }

    /// Uses `code` up: true the first time, within its lifetime.
    fn redeem(&self, code: &str) -> bool {
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        matches!(codes.remove(code), Some(at) if at.elapsed() < CODE_TTL)
    }
}

fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    // The OS source; without it there is nothing safe to hand out.
    if getrandom::fill(&mut bytes).is_err() {
        return String::new();
    }
    hex::encode(bytes)
}

fn sign(token: &str, id: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes())
        .expect("HMAC takes any key length");
    mac.update(b"sluice-session:");
    mac.update(id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A new session: `<id>.<expiry, unix seconds>.<signature of both>`.
fn new_session(token: &str) -> String {
    session_until(token, now_secs() + SESSION_DAYS * 24 * 3600)
}

fn session_until(token: &str, expires: u64) -> String {
    let id = format!("{}.{expires}", random_hex(16));
    let sig = sign(token, &id);
    format!("{id}.{sig}")
}

/// Whether `value` is a session signed with `token` that has not expired.
pub(crate) fn is_session(value: &str, token: &str) -> bool {
    let Some((id, sig)) = value.rsplit_once('.') else {
        return false;
    };
    let Some((random, expires)) = id.split_once('.') else {
        return false;
    };
    random.len() == 32
        && expires.parse::<u64>().is_ok_and(|e| e > now_secs())
        && crate::security::same(sign(token, id).as_bytes(), sig.as_bytes())
}

/// The session a WebSocket request offers as a subprotocol
/// (`sluice.session.<session>`), if any.
pub(crate) fn ws_session(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(WS_SESSION))
}

/// The subprotocol prefix that carries a session on a WebSocket.
pub(crate) const WS_SESSION: &str = "sluice.session.";

#[derive(serde::Deserialize)]
pub(crate) struct Login {
    code: String,
    /// Where to land after signing in: a path on this server (`/#/w/ID`).
    then: Option<String>,
}

/// `then` when it is a path on this server (never another origin: no
/// `//host`, no scheme, no backslashes browsers read as slashes).
fn local_path(then: Option<&str>) -> &str {
    match then {
        Some(t)
            if t.starts_with('/')
                && !t.starts_with("//")
                && !t.contains('\\')
                && !t.chars().any(char::is_control) =>
        {
            t
        }
        _ => "/",
    }
}

/// `POST /api/v1/sign-in-links`: a fresh one-time sign-in link, for a
/// token holder (`sluice open`) to hand to a browser. The link is built on
/// the address the request came to (its Host, which the API has checked is
/// a loopback name or this server's own).
#[utoipa::path(post, path = "/api/v1/sign-in-links", tag = "engine",
    request_body(content = NewSignInLink, description = "`then`: where to land, a path on this server", content_type = "application/json"),
    responses((status = 201, description = "A link that signs one browser in to the editor, once", body = SignInLink),
        (status = 400, description = "The body is not a NewSignInLink")))]
pub(crate) async fn new_sign_in_link(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, axum::Json<SignInLink>), crate::ApiError> {
    let req: NewSignInLink = match crate::error::parse_json(&body)? {
        serde_json::Value::Null => NewSignInLink::default(),
        v => serde_json::from_value(v)
            .map_err(|e| crate::ApiError::bad_request(format!("body: {e}")))?,
    };
    let code = s.codes.issue();
    let mut path = format!("/ui/login?code={code}");
    let then = local_path(req.then.as_deref());
    if then != "/" {
        path.push_str("&then=");
        path.extend(url_escape(then));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map_or_else(|| s.options.listen.to_string(), str::to_string);
    Ok((
        StatusCode::CREATED,
        axum::Json(SignInLink {
            url: format!("http://{host}{path}"),
            path,
            expires_in_secs: CODE_TTL.as_secs(),
        }),
    ))
}

/// `then` as a query value: unreserved characters and `/` as they are,
/// every other byte percent-encoded.
fn url_escape(v: &str) -> impl Iterator<Item = String> + '_ {
    v.bytes().map(|b| {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            char::from(b).to_string()
        } else {
            format!("%{b:02X}")
        }
    })
}

/// `GET /ui/login?code=…`: the code for a session cookie, then the editor.
pub(crate) async fn login(State(s): State<AppState>, Query(q): Query<Login>) -> Response {
    if !s.codes.redeem(&q.code) {
        return (
            StatusCode::FORBIDDEN,
            Html(page(
                "This sign-in link was used already or has expired (a link works once). \
                 For a new one, run <code>sluice open</code> in a terminal on this machine \
                 (the engine keeps running).",
            )),
        )
            .into_response();
    }
    signed_in_page(&new_session(&s.token), local_path(q.then.as_deref()))
}

/// The page that keeps the session in this origin's storage and goes on to
/// `then`. Its one script is allowed by a nonce; nothing else runs, it is
/// never cached, and it sends no referrer.
fn signed_in_page(session: &str, then: &str) -> Response {
    let nonce = random_hex(16);
    // JSON strings, with `<` escaped so no text can close the script.
    let js = |v: &str| {
        serde_json::Value::from(v)
            .to_string()
            .replace('<', "\\u003c")
    };
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>Sluice</title>\
         <style nonce=\"{nonce}\">{PAGE_STYLE}</style><p>Signing in…</p>\
         <script nonce=\"{nonce}\">localStorage.setItem({key}, {session});\
         location.replace({then});</script>",
        key = js(SESSION_KEY),
        session = js(session),
        then = js(then),
    );
    let mut resp = Html(body).into_response();
    let headers = resp.headers_mut();
    let csp = format!(
        "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    if let Ok(v) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The cookie of earlier versions, which other local ports received.
    headers.insert(
        header::SET_COOKIE,
        HeaderValue::from_static("sluice_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    );
    resp
}

/// The look of the server's own small pages. In a `<style>` with the
/// page's nonce, or the editor's stylesheet: never a `style` attribute,
/// which the pages' Content-Security-Policy blocks (and the browser logs).
const PAGE_STYLE: &str = "body{font:16px system-ui;margin:4em}";

fn page(message: &str) -> String {
    format!(
        "<!doctype html><meta charset=utf-8><title>Sluice</title>\
         <link rel=stylesheet href=\"/style.css\"><main class=\"server-page\"><h1>Sluice</h1><p>{message}</p></main>"
    )
}

/// The editor's files (`index.html` at `/`); a page that says how to
/// build them when there are none.
pub(crate) async fn static_file(State(s): State<AppState>, req: Request) -> Response {
    // A fallback, so not behind the router's layers: check the Host here
    // (DNS rebinding) whether or not the files exist.
    if let Err(e) = crate::security::check_host_header(req.headers(), &s) {
        return e.into_response();
    }
    let path = req.uri().path().trim_start_matches('/');
    let path = if path.is_empty() { "index.html" } else { path };
    let bytes: Option<Bytes> = match (&s.options.ui_dir, s.options.ui_embedded) {
        (Some(dir), _) => match inside(dir, path) {
            Some(file) => tokio::fs::read(&file).await.ok().map(Bytes::from),
            None => None,
        },
        (None, files) if !files.is_empty() => files
            .iter()
            .find(|(name, _)| *name == path)
            .map(|(_, b)| Bytes::from_static(b)),
        (None, _) => {
            return (
                StatusCode::NOT_FOUND,
                Html(page(
                    "The editor is not built. <code>cargo xtask run</code> builds it and starts \
                     <code>sluice serve</code> with it.",
                )),
            )
                .into_response();
        }
    };
    let Some(bytes) = bytes else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut resp = bytes.into_response();
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(Path::new(path))),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    if path.ends_with(".html")
        && let Ok(v) = HeaderValue::from_str(&editor_csp(req.headers()))
    {
        headers.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    resp
}

/// The editor page's Content-Security-Policy: scripts, WebAssembly and
/// connections from this server only (the WebSocket named by the Host the
/// page was loaded under), no inline script, no plugins, no framing. An
/// injected `<script>` or a link to elsewhere cannot run or call home.
/// Inline styles stay allowed: the editor sets `style` attributes.
fn editor_csp(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            h.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']' | '-'))
        })
        .unwrap_or("");
    let ws = if host.is_empty() {
        String::new()
    } else {
        format!(" ws://{host} wss://{host}")
    };
    format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; \
         connect-src 'self'{ws}; object-src 'none'; base-uri 'none'; \
         form-action 'none'; frame-ancestors 'none'"
    )
}

/// `path` under `dir`, refusing anything that could leave it.
fn inside(dir: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(dir.join(rel))
}

fn content_type(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_signed_with_the_token() {
        let session = new_session("tok");
        assert!(is_session(&session, "tok"));
        assert!(!is_session(&session, "another token"));
        let (id, _) = session.rsplit_once('.').unwrap();
        assert!(!is_session(&format!("{id}.{}", "0".repeat(64)), "tok"));
        // An expired session, though signed, is refused.
        assert!(!is_session(&session_until("tok", now_secs() - 1), "tok"));
        assert!(is_session(&session_until("tok", now_secs() + 60), "tok"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_str(&format!("sluice, {WS_SESSION}{session}")).unwrap(),
        );
        assert_eq!(ws_session(&headers), Some(session.as_str()));
    }

    #[test]
    fn the_sign_in_page_runs_only_its_own_script() {
        let resp = signed_in_page("abc.def", "/#/w/</script>");
        let csp = resp.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(
            csp.starts_with("default-src 'none'; script-src 'nonce-"),
            "{csp}"
        );
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-store");
    }

    #[test]
    fn codes_work_once() {
        let codes = Codes::default();
        let code = codes.issue();
        assert_eq!(code.len(), 32);
        assert!(codes.redeem(&code));
        assert!(!codes.redeem(&code));
        assert!(!codes.redeem("made-up"));
    }

    #[test]
    fn sign_in_lands_only_on_this_server() {
        assert_eq!(local_path(Some("/#/w/orders")), "/#/w/orders");
        assert_eq!(local_path(None), "/");
        for bad in [
            "//evil.example/",
            "https://evil.example",
            "/\\evil.example",
            "evil",
            "/\nx",
        ] {
            assert_eq!(local_path(Some(bad)), "/", "{bad:?}");
        }
    }

    #[test]
    fn paths_stay_inside() {
        let dir = Path::new("/srv/ui");
        assert_eq!(
            inside(dir, "pkg/app.js"),
            Some(PathBuf::from("/srv/ui/pkg/app.js"))
        );
        assert_eq!(inside(dir, "../secret"), None);
        assert_eq!(inside(dir, "pkg/../../x"), None);
        assert_eq!(inside(dir, "/etc/passwd"), None);
    }
}
