//! The canvas's Share panel: hand the workflow to another install (a
//! ticket and a `sluice://join/` link for a role, an expiry and a number of
//! uses), see the shares and the peers that joined (connected or when last
//! seen), revoke a share or remove a peer. For a workflow joined from a
//! peer it also says where the link to the sharer stands.

use serde_json::json;
use sluice_api::{LinkEntry, LinkState, PeersInfo, ShareCreated, Shares};
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use yew::prelude::*;

use super::Canvas;
use super::runs::when;
use crate::net;

pub enum Msg {
    /// Show or hide the panel.
    Toggle,
    /// Fetch shares, peers and this install's links again.
    Refresh,
    Loaded(Result<Shares, String>),
    Info(Result<PeersInfo, String>),
    Role(String),
    Expiry(String),
    Uses(String),
    Create,
    Created(Result<ShareCreated, String>),
    Revoke(String),
    Remove(String),
    /// A revoke or remove finished.
    Done(Result<serde_json::Value, String>),
    Copy(String),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Share(msg)
    }
}

/// The share part of the canvas's state.
pub struct Sharing {
    open: bool,
    shares: Option<Shares>,
    /// This workflow's link to its sharer, when it was joined.
    pub link: Option<LinkEntry>,
    role: String,
    /// Seconds, empty for never.
    expiry: String,
    /// Empty for any number.
    uses: String,
    created: Option<ShareCreated>,
    error: Option<String>,
    notice: Option<String>,
    /// Refreshes while open (peers come and go).
    ticker: Option<i32>,
    _tick: Option<Closure<dyn FnMut()>>,
}

impl Default for Sharing {
    fn default() -> Self {
        Sharing {
            open: false,
            shares: None,
            link: None,
            role: "editor".into(),
            expiry: String::new(),
            uses: String::new(),
            created: None,
            error: None,
            notice: None,
            ticker: None,
            _tick: None,
        }
    }
}

/// How often an open panel asks again.
const REFRESH_MS: i32 = 2000;

impl Canvas {
    pub(super) fn on_share(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        let s = &mut self.sharing;
        match msg {
            Msg::Toggle => {
                s.open = !s.open;
                if s.open {
                    ctx.link().send_message(Msg::Refresh);
                } else {
                    s.created = None;
                }
                true
            }
            Msg::Refresh => {
                let id = js_sys::encode_uri_component(&ctx.props().workflow);
                if s.open {
                    let path = format!("/api/v1/workflows/{id}/shares");
                    ctx.link().send_future(async move {
                        Msg::Loaded(net::call_as("GET", &path, None).await)
                    });
                }
                ctx.link().send_future(async move {
                    Msg::Info(net::call_as("GET", "/api/v1/peers", None).await)
                });
                false
            }
            Msg::Loaded(r) => {
                match r {
                    Ok(shares) => {
                        s.shares = Some(shares);
                        s.error = None;
                    }
                    Err(e) => s.error = Some(e),
                }
                true
            }
            Msg::Info(r) => {
                let workflow = ctx.props().workflow.clone();
                let link = r
                    .ok()
                    .and_then(|i| i.links.into_iter().find(|l| l.workflow == workflow));
                let changed = link != s.link;
                s.link = link;
                changed
            }
            Msg::Role(v) => {
                s.role = v;
                false
            }
            Msg::Expiry(v) => {
                s.expiry = v;
                false
            }
            Msg::Uses(v) => {
                s.uses = v;
                false
            }
            Msg::Create => {
                let mut body = json!({ "role": s.role });
                if let Ok(secs) = s.expiry.parse::<u64>() {
                    body["expires_in_s"] = json!(secs);
                }
                if let Ok(n) = s.uses.parse::<u32>() {
                    body["uses"] = json!(n);
                }
                let path = format!(
                    "/api/v1/workflows/{}/shares",
                    js_sys::encode_uri_component(&ctx.props().workflow)
                );
                s.error = None;
                ctx.link().send_future(async move {
                    Msg::Created(net::call_as("POST", &path, Some(&body)).await)
                });
                false
            }
            Msg::Created(r) => {
                match r {
                    Ok(c) => {
                        s.created = Some(c);
                        s.notice = None;
                        ctx.link().send_message(Msg::Refresh);
                    }
                    Err(e) => s.error = Some(e),
                }
                true
            }
            Msg::Revoke(share) => {
                let path = format!("/api/v1/shares/{}", js_sys::encode_uri_component(&share));
                ctx.link()
                    .send_future(async move { Msg::Done(net::call("DELETE", &path, None).await) });
                false
            }
            Msg::Remove(peer) => {
                let path = format!(
                    "/api/v1/workflows/{}/peers/{}",
                    js_sys::encode_uri_component(&ctx.props().workflow),
                    js_sys::encode_uri_component(&peer)
                );
                ctx.link()
                    .send_future(async move { Msg::Done(net::call("DELETE", &path, None).await) });
                false
            }
            Msg::Done(r) => {
                if let Err(e) = r {
                    s.error = Some(e);
                }
                ctx.link().send_message(Msg::Refresh);
                true
            }
            Msg::Copy(text) => {
                crate::looks::copy_text(&text);
                s.notice = Some("Copied.".into());
                true
            }
        }
    }

    pub(super) fn share_panel(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let s = &self.sharing;
        let joined = s.link.as_ref().map(|l| {
            let (key, text) = link_state(l);
            html! {
                <p class="peer-link" data-state={key} role="status">
                    { format!("Joined from {} as {}: {text}", l.host_name, l.role.as_str()) }
                </p>
            }
        });
        let body = s.open.then(|| {
            let select = |f: fn(String) -> Msg| {
                link.callback(move |e: Event| {
                    let el: web_sys::HtmlSelectElement = e.target_unchecked_into();
                    f(el.value())
                })
            };
            let created = s.created.as_ref().map(|c| {
                let (ticket, l) = (c.ticket.clone(), c.link.clone());
                html! {
                    <div class="share-created">
                        <label for="share-ticket">{ "Ticket: hand it over like a password" }</label>
                        <textarea id="share-ticket" class="share-ticket" readonly=true rows="3" value={c.ticket.clone()} />
                        <p class="share-copy">
                            <button class="copy-ticket" onclick={link.callback(move |_| Msg::Copy(ticket.clone()))}>{ "Copy ticket" }</button>
                            <button class="copy-link" onclick={link.callback(move |_| Msg::Copy(l.clone()))}>{ "Copy link" }</button>
                        </p>
                        <p class="share-hint">{ "The ticket holds this machine's addresses. Anyone with it can join until it expires, is used up or is revoked." }</p>
                    </div>
                }
            });
            let shares = s.shares.as_ref().map(|sh| {
                let rows = sh.shares.iter().map(|x| {
                    let id = x.id.clone();
                    let mut facts = vec![x.role.as_str().to_string()];
                    facts.push(match x.expires_at_us {
                        Some(t) => format!("expires {}", when(t)),
                        None => "no expiry".into(),
                    });
                    if let Some(u) = x.uses_left {
                        facts.push(format!("{u} use{} left", if u == 1 { "" } else { "s" }));
                    }
                    let revoked = x.revoked_at_us.is_some();
                    if let Some(t) = x.revoked_at_us {
                        facts.push(format!("revoked {}", when(t)));
                    }
                    html! {
                        <li class="share" data-share={x.id.clone()} data-revoked={revoked.to_string()}>
                            <span>{ facts.join(" · ") }</span>
                            if !revoked {
                                <button class="revoke" onclick={link.callback(move |_| Msg::Revoke(id.clone()))}>{ "Revoke" }</button>
                            }
                        </li>
                    }
                });
                let peers = sh.peers.iter().map(|p| {
                    let peer = p.peer.clone();
                    let state = if p.removed_at_us.is_some() {
                        "removed".to_string()
                    } else if p.connected {
                        "connected".to_string()
                    } else {
                        format!("last seen {}", when(p.last_seen_us))
                    };
                    html! {
                        <li class="peer" data-peer={p.peer.clone()} data-connected={p.connected.to_string()}>
                            <span class="name">{ &p.name }</span>
                            <span class="facts">{ format!(" · {} · {state}", p.role.as_str()) }</span>
                            if p.removed_at_us.is_none() {
                                <button class="remove-peer" title="Disconnect and refuse this peer"
                                    onclick={link.callback(move |_| Msg::Remove(peer.clone()))}>{ "Remove" }</button>
                            }
                        </li>
                    }
                });
                html! {
                    <>
                        <h3>{ "Shares" }</h3>
                        <ul class="shares">{ for rows }</ul>
                        <h3>{ "Peers" }</h3>
                        if sh.peers.is_empty() {
                            <p class="no-peers">{ "Nobody has joined yet." }</p>
                        }
                        <ul class="peers">{ for peers }</ul>
                    </>
                }
            });
            html! {
                <div class="share-body">
                    <p class="share-form">
                        <label for="share-role">{ "Role" }</label>
                        <select id="share-role" onchange={select(Msg::Role)}>
                            <option value="editor" selected={s.role == "editor"}>{ "editor: edits the draft" }</option>
                            <option value="viewer" selected={s.role == "viewer"}>{ "viewer: sees it live" }</option>
                        </select>
                        <label for="share-expiry">{ "New joins" }</label>
                        <select id="share-expiry" onchange={select(Msg::Expiry)}>
                            <option value="" selected={s.expiry.is_empty()}>{ "until revoked" }</option>
                            <option value="3600">{ "for an hour" }</option>
                            <option value="86400">{ "for a day" }</option>
                            <option value="604800">{ "for a week" }</option>
                        </select>
                        <label for="share-uses">{ "Uses" }</label>
                        <select id="share-uses" onchange={select(Msg::Uses)}>
                            <option value="" selected={s.uses.is_empty()}>{ "any number" }</option>
                            <option value="1">{ "one person" }</option>
                        </select>
                        <button class="create-share" onclick={link.callback(|_| Msg::Create)}>{ "Create ticket" }</button>
                    </p>
                    { for created }
                    if let Some(n) = &s.notice {
                        <p class="notice" role="status">{ n }</p>
                    }
                    { for shares }
                </div>
            }
        });
        html! {
            <section class="share-panel">
                <h2>
                    <button class="share-toggle" aria-expanded={s.open.to_string()}
                        onclick={link.callback(|_| Msg::Toggle)}>
                        { if s.open { "▾ Share" } else { "▸ Share" } }
                    </button>
                </h2>
                { for joined }
                if let Some(e) = &s.error {
                    <p class="share-error" role="alert">{ e }</p>
                }
                { for body }
            </section>
        }
    }
}

impl Sharing {
    /// Starts asking where things stand every few seconds (the link's
    /// state shows even with the panel closed).
    pub fn start(&mut self, link: &yew::html::Scope<Canvas>) {
        let link = link.clone();
        let tick = Closure::<dyn FnMut()>::new(move || link.send_message(Msg::Refresh));
        self.ticker = web_sys::window().and_then(|w| {
            w.set_interval_with_callback_and_timeout_and_arguments_0(
                tick.as_ref().unchecked_ref(),
                REFRESH_MS,
            )
            .ok()
        });
        self._tick = Some(tick);
    }

    fn stop_ticker(&mut self) {
        if let (Some(id), Some(w)) = (self.ticker.take(), web_sys::window()) {
            w.clear_interval_with_handle(id);
        }
        self._tick = None;
    }
}

impl Drop for Sharing {
    fn drop(&mut self) {
        self.stop_ticker();
    }
}

/// A link's state for people: a key for styling and a sentence.
pub fn link_state(l: &LinkEntry) -> (&'static str, String) {
    match l.state {
        LinkState::Connected => ("connected", "connected".into()),
        LinkState::Reconnecting => (
            "reconnecting",
            if l.waiting > 0 {
                format!(
                    "offline, {} edit{} waiting",
                    l.waiting,
                    if l.waiting == 1 { "" } else { "s" }
                )
            } else {
                "offline, reconnecting".into()
            },
        ),
        LinkState::Refused => (
            "refused",
            format!(
                "the sharer refused this machine{}",
                l.error
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ),
        ),
    }
}
