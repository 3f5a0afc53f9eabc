//! Talking to `sluice serve` from the page: JSON over fetch (the answers
//! decoded as the protocol's types, `sluice_api`), and the WebSocket for
//! document sync and run events (whose messages [`crate::sync`] makes).
//!
//! The session (from a sign-in link, see `engine/server/src/ui.rs`) is in
//! this origin's `localStorage`, which no other origin (another port on
//! the same host included) can read, and travels as `Authorization:
//! Bearer` on fetches and as a WebSocket subprotocol (browsers cannot set
//! headers on a WebSocket). No cookie: a browser would send one to every
//! port of the host.

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sluice_api::ErrorBody;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{MessageEvent, RequestCredentials, RequestInit, Response, WebSocket};

/// Where the sign-in page keeps the session.
const SESSION_KEY: &str = "sluice_session";
/// The subprotocol the server answers with; the session rides in a second one.
const WS_PROTOCOL: &str = "sluice";

/// This browser's session for this server, if signed in.
fn session() -> Option<String> {
    web_sys::window()?
        .local_storage()
        .ok()??
        .get_item(SESSION_KEY)
        .ok()?
        .filter(|s| !s.is_empty())
}

/// Whether this browser holds a session for this server (it may have
/// expired: the server says so with a 401, see [`on_signed_out`]).
pub fn signed_in() -> bool {
    session().is_some()
}

thread_local! {
    /// Who to tell when the server refuses this browser's session.
    static SIGNED_OUT: RefCell<Option<yew::Callback<()>>> = const { RefCell::new(None) };
}

/// `then` is called whenever the server answers 401: this browser is not
/// signed in (no session, an expired one, or one from a replaced token).
pub fn on_signed_out(then: yew::Callback<()>) {
    SIGNED_OUT.with(|s| *s.borrow_mut() = Some(then));
}

fn signed_out() {
    if let Some(cb) = SIGNED_OUT.with(|s| s.borrow().clone()) {
        cb.emit(());
    }
}

fn js_err(e: JsValue) -> String {
    e.as_string()
        .or_else(|| js_sys::JSON::stringify(&e).ok().and_then(|s| s.as_string()))
        .unwrap_or_else(|| "unknown error".into())
}

/// `method path` with an optional JSON body: the answer's text (or the
/// server's error message).
async fn fetch(method: &str, path: &str, body: Option<&Value>) -> Result<String, String> {
    fetch_versioned(method, path, body)
        .await
        .map(|(text, _)| text)
}

/// [`fetch`], with the `x-sluice-version` the answer names (a workflow's
/// document version).
async fn fetch_versioned(
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(String, Option<String>), String> {
    let window = web_sys::window().ok_or("no window")?;
    let init = RequestInit::new();
    init.set_method(method);
    // Nothing ambient: the session goes as a header, explicitly.
    init.set_credentials(RequestCredentials::Omit);
    let headers = web_sys::Headers::new().map_err(js_err)?;
    if let Some(session) = session() {
        headers
            .set("authorization", &format!("Bearer {session}"))
            .map_err(js_err)?;
    }
    if let Some(body) = body {
        init.set_body(&JsValue::from_str(&body.to_string()));
        headers
            .set("content-type", "application/json")
            .map_err(js_err)?;
    }
    init.set_headers(&headers);
    let response: Response = JsFuture::from(window.fetch_with_str_and_init(path, &init))
        .await
        .map_err(js_err)?
        .dyn_into()
        .map_err(js_err)?;
    let text = JsFuture::from(response.text().map_err(js_err)?)
        .await
        .map_err(js_err)?
        .as_string()
        .unwrap_or_default();
    if response.ok() {
        let version = response.headers().get("x-sluice-version").ok().flatten();
        return Ok((text, version));
    }
    if response.status() == 401 {
        signed_out();
    }
    // Not an API error body (a proxy's page, a panic): the text as it came.
    let message = match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => body.error.message,
        Err(_) if text.is_empty() => response.status_text(),
        Err(_) => text,
    };
    Err(format!("{} {}: {message}", response.status(), path))
}

/// `method path` with an optional JSON body; the answer as JSON (or the
/// server's error message). For answers that are documents, not protocol
/// (a workflow); the protocol's answers go through [`call_as`].
pub async fn call(method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let text = fetch(method, path, body).await?;
    if text.is_empty() {
        return Ok(Value::Null);
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// GETs a workflow: its JSON and the document version it is, which a save
/// made from it names as its `base` (so edits made since are merged, not
/// undone).
pub async fn get_workflow(id: &str) -> Result<(Value, Option<String>), String> {
    let (text, version) = fetch_versioned("GET", &format!("/api/v1/workflows/{id}"), None).await?;
    let wf = serde_json::from_str(&text).map_err(|e| format!("workflow {id}: {e}"))?;
    Ok((wf, version))
}

/// `method path` with an optional JSON body; the answer decoded as `T`,
/// one of the protocol's types (`sluice_api`).
pub async fn call_as<T: DeserializeOwned>(
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<T, String> {
    let text = fetch(method, path, body).await?;
    // An empty answer is JSON `null` (for `T` = `()` or an `Option`).
    let json = if text.is_empty() { "null" } else { &text };
    serde_json::from_str(json).map_err(|e| format!("{method} {path}: unexpected answer: {e}"))
}

/// The live socket: JSON text frames in both directions.
pub struct Socket {
    ws: WebSocket,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_open: Closure<dyn FnMut()>,
    _on_close: Closure<dyn FnMut()>,
    /// Messages sent before the socket opened.
    queue: Rc<RefCell<Vec<String>>>,
}

impl Socket {
    /// Connects to `/api/v1/ws?{query}` (`events=none` for document sync
    /// only, `workflow=ID` for that workflow's run events too).
    /// `on_message` gets each text frame as it came: the caller decodes it.
    pub fn open(
        query: &str,
        on_message: impl Fn(String) + 'static,
        on_close: impl Fn() + 'static,
    ) -> Result<Socket, String> {
        let location = web_sys::window().ok_or("no window")?.location();
        let scheme = if location.protocol().map_err(js_err)? == "https:" {
            "wss"
        } else {
            "ws"
        };
        let host = location.host().map_err(js_err)?;
        let protocols = js_sys::Array::new();
        protocols.push(&JsValue::from_str(WS_PROTOCOL));
        if let Some(session) = session() {
            protocols.push(&JsValue::from_str(&format!(
                "{WS_PROTOCOL}.session.{session}"
            )));
        }
        let ws = WebSocket::new_with_str_sequence(
            &format!("{scheme}://{host}/api/v1/ws?{query}"),
            &protocols,
        )
        .map_err(js_err)?;
        let queue: Rc<RefCell<Vec<String>>> = Rc::default();
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
            if let Some(text) = e.data().as_string() {
                on_message(text);
            }
        });
        let on_open = {
            let (ws, queue) = (ws.clone(), queue.clone());
            Closure::<dyn FnMut()>::new(move || {
                for m in queue.borrow_mut().drain(..) {
                    ws.send_with_str(&m).ok();
                }
            })
        };
        let on_close = Closure::<dyn FnMut()>::new(on_close);
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        Ok(Socket {
            ws,
            _on_message: on_message,
            _on_open: on_open,
            _on_close: on_close,
            queue,
        })
    }

    /// Sends `message` as JSON (queued until the socket opens).
    pub fn send(&self, message: &impl Serialize) -> Result<(), String> {
        let text = serde_json::to_string(message).map_err(|e| e.to_string())?;
        if self.ws.ready_state() == WebSocket::OPEN {
            self.ws.send_with_str(&text).ok();
        } else {
            self.queue.borrow_mut().push(text);
        }
        Ok(())
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.ws.set_onclose(None);
        self.ws.close().ok();
    }
}
