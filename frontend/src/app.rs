//! The shell: the workflow list and, once one is opened, its canvas.
//! Routes live in the URL hash (`#/w/<id>`), so reloads and links work.

use serde_json::{Value, json};
use sluice_api::WorkflowEntry;
use yew::prelude::*;

use crate::canvas::Canvas;
use crate::net;

pub enum Msg {
    Listed(Result<Vec<WorkflowEntry>, String>),
    Open(String),
    Back,
    NewName(String),
    Create,
    /// Start a new workflow from a template (its key).
    FromTemplate(&'static str),
    Created(Result<String, String>),
    /// The URL hash changed (back/forward, a link, an edit of the URL).
    Route,
    /// Start renaming a workflow (inline).
    Rename(String),
    RenameText(String),
    RenameDone(bool),
    Duplicate(String),
    Delete(String),
    Export(String),
    /// A workflow file chosen for import.
    Import(web_sys::File),
    /// A list operation finished: refresh the list (or show the error).
    Done(Result<String, String>),
    /// The server refused this browser's session (or there is none).
    SignedOut,
    /// This install's links to workflows joined from peers.
    Peers(Result<sluice_api::PeersInfo, String>),
    JoinText(String),
    /// Join the workflow a pasted ticket shares.
    Join,
    Joined(Result<sluice_api::Joined, String>),
    /// What the ticket of a `#/join/` link shares.
    Described(String, Result<sluice_api::TicketInfo, String>),
    /// The user said yes to the link's join.
    JoinLinked,
    /// The user said no.
    CancelJoin,
}

pub struct App {
    workflows: Vec<WorkflowEntry>,
    /// The list arrived at least once (an empty one means a new install).
    listed: bool,
    /// The runs page is open, with these filters.
    runs: Option<crate::runs_query::RunsQuery>,
    open: Option<String>,
    /// A run to show on the open workflow.
    open_run: Option<String>,
    /// A node to select on the open workflow.
    open_node: Option<String>,
    /// `open_node` is to be open in the node view.
    open_view: bool,
    /// Bumped by every route to the open workflow: the same node asked for
    /// again (after the selection moved) is selected again.
    route_seq: u64,
    /// The credentials page is open.
    credentials: bool,
    error: Option<String>,
    new_name: String,
    /// The workflow being renamed, and the name typed so far.
    renaming: Option<(String, String)>,
    rename_box: NodeRef,
    /// What the last list operation did.
    notice: Option<String>,
    /// Not signed in: the sign-in page instead of the editor.
    signed_out: bool,
    /// Workflows joined from peers (by id), and where their links stand.
    links: Vec<sluice_api::LinkEntry>,
    /// The ticket pasted to join, and whether a join is on its way.
    ticket: String,
    joining: bool,
    /// A join link waiting for the user's yes: its ticket and what it shares.
    asking: Option<(String, Option<Result<sluice_api::TicketInfo, String>>)>,
    _on_hash: Option<wasm_bindgen::closure::Closure<dyn FnMut()>>,
}

/// `#/w/<workflow>[/r/<run>][/n/<node>]`: a workflow, the run shown as it
/// ran (what the desktop app's notifications and `sluice://run/...` open)
/// and the node selected.
fn hash_route() -> Option<crate::route::WorkflowRoute> {
    let hash = web_sys::window()?.location().hash().ok()?;
    let rest = hash.strip_prefix("#/w/")?;
    crate::route::WorkflowRoute::parse(rest, |s| {
        js_sys::decode_uri_component(s)
            .ok()
            .and_then(|v| v.as_string())
            .unwrap_or_else(|| s.to_string())
    })
}

/// `#/credentials`: the credentials page.
fn credentials_route() -> bool {
    web_sys::window()
        .and_then(|w| w.location().hash().ok())
        .is_some_and(|h| {
            h == "#/credentials"
                || h.starts_with("#/credentials/")
                || h.starts_with("#/credentials?")
        })
}

/// `#/runs?<filters>`: the runs page.
fn runs_route() -> Option<crate::runs_query::RunsQuery> {
    let hash = web_sys::window()?.location().hash().ok()?;
    let rest = hash.strip_prefix("#/runs")?;
    if !(rest.is_empty() || rest.starts_with('?') || rest == "/") {
        return None;
    }
    Some(crate::runs_query::RunsQuery::parse(
        rest.trim_start_matches('/').trim_start_matches('?'),
    ))
}

/// `#/join/<ticket>`: a `sluice://join/` link opened (by the desktop app, or
/// pasted in the browser): asks before joining.
fn join_route() -> Option<String> {
    let hash = web_sys::window()?.location().hash().ok()?;
    let rest = hash.strip_prefix("#/join/")?.trim_end_matches('/');
    (!rest.is_empty()).then(|| {
        js_sys::decode_uri_component(rest)
            .ok()
            .and_then(|v| v.as_string())
            .unwrap_or_else(|| rest.to_string())
    })
}

/// What an n8n import says: the new id, what was not converted, the
/// credentials to create.
fn n8n_notice(file_name: &str, report: &Value) -> String {
    let id = report["id"].as_str().unwrap_or("?");
    let mut notice = format!("imported {file_name} (n8n) as {id}");
    let missing: Vec<String> = report["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["converted"] == json!(false))
        .map(|n| {
            format!(
                "{} ({})",
                n["name"].as_str().unwrap_or("?"),
                n["note"].as_str().unwrap_or("")
            )
        })
        .collect();
    if !missing.is_empty() {
        notice += &format!("; kept disabled: {}", missing.join("; "));
    }
    let creds: Vec<String> = report["credentials"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} ({})",
                c["name"].as_str().unwrap_or("?"),
                c["kind"].as_str().unwrap_or("?")
            )
        })
        .collect();
    if !creds.is_empty() {
        notice += &format!("; credentials to create: {}", creds.join(", "));
    }
    notice
}

/// An id not among `taken`: `base`, else `base-2`, `base-3`…
fn free_id(base: &str, taken: &[WorkflowEntry]) -> String {
    let used = |id: &str| taken.iter().any(|w| w.id == id);
    if !used(base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|id| !used(id))
        .unwrap_or_default()
}

/// GETs workflow `id`, lets `change` edit its JSON, PUTs it as `to`. Onto
/// itself, the save names the version it was made from: an edit that came
/// in between (another window's, a peer's) is merged with it, not undone.
async fn rewrite(id: &str, to: &str, change: impl FnOnce(&mut Value)) -> Result<(), String> {
    let (mut wf, version) = net::get_workflow(id).await?;
    change(&mut wf);
    wf["id"] = json!(to);
    let path = match version {
        Some(v) if id == to => format!("/api/v1/workflows/{to}?base={}", query_value(&v)),
        _ => format!("/api/v1/workflows/{to}"),
    };
    net::call("PUT", &path, Some(&wf)).await.map(|_| ())
}

/// `text` for a URL's query (a version is `counter@peer,…`).
fn query_value(text: &str) -> String {
    String::from(js_sys::encode_uri_component(text))
}

/// Offers `text` as a file download named `name`.
fn download(name: &str, text: &str) -> Result<(), String> {
    use wasm_bindgen::JsCast;
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type("application/json");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options)
        .map_err(|_| "cannot make the file")?;
    let url =
        web_sys::Url::create_object_url_with_blob(&blob).map_err(|_| "cannot make the file")?;
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or("no document")?;
    let a: web_sys::HtmlAnchorElement = document
        .create_element("a")
        .map_err(|_| "no anchor")?
        .dyn_into()
        .map_err(|_| "no anchor")?;
    a.set_href(&url);
    a.set_download(name);
    a.click();
    web_sys::Url::revoke_object_url(&url).ok();
    Ok(())
}

pub(crate) fn set_hash(hash: &str) {
    if let Some(w) = web_sys::window() {
        w.location().set_hash(hash).ok();
    }
}

/// A workflow id from a name: lowercase letters, digits and dashes.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

/// What a browser that is not signed in sees: how to sign in, and
/// nothing that looks usable.
fn sign_in_page() -> Html {
    let origin = web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default();
    html! {
        <div class="app">
            <header><h1>{ "Sluice" }</h1><ThemeToggle /></header>
            <main class="sign-in">
                <h2>{ "Sign in to this engine" }</h2>
                <p>{ "This browser is not signed in to the engine at " }<code>{ origin }</code>{ ", or its session has ended." }</p>
                <p>{ "In a terminal on the machine that runs it, run" }</p>
                <pre class="command"><code>{ "sluice open" }</code></pre>
                <p>{ "It opens a sign-in link in your browser (" }<code>{ "sluice open --print" }</code>{ " only prints it, for a browser elsewhere). The engine keeps running; nothing is restarted." }</p>
            </main>
        </div>
    }
}

impl App {
    fn describe(ctx: &Context<Self>, ticket: String) {
        ctx.link().send_future(async move {
            let body = json!({ "ticket": ticket });
            let r = net::call_as("POST", "/api/v1/peers/tickets", Some(&body)).await;
            Msg::Described(ticket, r)
        });
    }

    fn list(ctx: &Context<Self>) {
        ctx.link().send_future(async {
            Msg::Listed(net::call_as("GET", "/api/v1/workflows", None).await)
        });
        ctx.link()
            .send_future(async { Msg::Peers(net::call_as("GET", "/api/v1/peers", None).await) });
    }
}

impl Component for App {
    type Message = Msg;
    type Properties = ();

    fn create(ctx: &Context<Self>) -> Self {
        use wasm_bindgen::JsCast;
        net::on_signed_out(ctx.link().callback(|()| Msg::SignedOut));
        let signed_out = !net::signed_in();
        if !signed_out {
            App::list(ctx);
            if let Some(ticket) = join_route() {
                App::describe(ctx, ticket);
            }
        }
        let on_hash = {
            let link = ctx.link().clone();
            wasm_bindgen::closure::Closure::<dyn FnMut()>::new(move || {
                link.send_message(Msg::Route)
            })
        };
        if let Some(w) = web_sys::window() {
            w.add_event_listener_with_callback("hashchange", on_hash.as_ref().unchecked_ref())
                .ok();
        }
        App {
            workflows: Vec::new(),
            listed: false,
            runs: runs_route(),
            open: hash_route().map(|r| r.workflow),
            open_run: hash_route().and_then(|r| r.run),
            open_node: hash_route().and_then(|r| r.node),
            open_view: hash_route().is_some_and(|r| r.view),
            route_seq: 0,
            credentials: credentials_route(),
            error: None,
            new_name: String::new(),
            renaming: None,
            rename_box: NodeRef::default(),
            notice: None,
            signed_out,
            links: Vec::new(),
            ticket: String::new(),
            joining: false,
            asking: None,
            _on_hash: Some(on_hash),
        }
    }

    fn update(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::SignedOut => {
                if self.signed_out {
                    return false;
                }
                self.signed_out = true;
            }
            Msg::Listed(Ok(list)) => {
                self.workflows = list;
                self.listed = true;
                self.error = None;
            }
            Msg::Listed(Err(e)) | Msg::Created(Err(e)) => self.error = Some(e),
            Msg::Open(id) => {
                set_hash(&format!("/w/{id}"));
                self.open = Some(id);
                self.open_run = None;
                self.open_node = None;
                self.open_view = false;
            }
            Msg::Back => {
                set_hash("/");
                self.open = None;
                self.runs = None;
                self.credentials = false;
                App::list(ctx);
            }
            Msg::NewName(name) => {
                self.new_name = name;
                return false;
            }
            Msg::Create => {
                let name = self.new_name.trim().to_string();
                let id = slug(&name);
                if id.is_empty() {
                    self.error = Some("give the workflow a name".into());
                    return true;
                }
                // A new workflow never replaces one of the same name.
                let id = self.free_id(&id);
                let body = json!({
                    "format": "sluice.workflow/v1", "id": id, "name": name,
                    // A typo in a template is an error, not a silent null.
                    "settings": {"strict": true},
                    "nodes": [{"id": "start", "kind": "trigger.manual", "position": [0, 0]}],
                    "edges": []
                });
                ctx.link().send_future(async move {
                    let path = format!("/api/v1/workflows/{id}");
                    Msg::Created(net::call("PUT", &path, Some(&body)).await.map(|_| id))
                });
            }
            Msg::FromTemplate(key) => {
                let Some(t) = crate::templates::all().into_iter().find(|t| t.key == key) else {
                    return false;
                };
                let id = self.free_id(key);
                let body = t.instantiate(&id);
                ctx.link().send_future(async move {
                    let path = format!("/api/v1/workflows/{id}");
                    Msg::Created(net::call("PUT", &path, Some(&body)).await.map(|_| id))
                });
                return false;
            }
            Msg::Peers(Ok(info)) => self.links = info.links,
            // Peers are extra: the list works without them.
            Msg::Peers(Err(_)) => return false,
            Msg::JoinText(t) => {
                self.ticket = t;
                return false;
            }
            Msg::Join => {
                let ticket = self.ticket.trim().to_string();
                if ticket.is_empty() {
                    self.error = Some("paste the ticket someone shared with you".into());
                    return true;
                }
                self.joining = true;
                self.error = None;
                ctx.link().send_future(async move {
                    let body = json!({ "ticket": ticket });
                    Msg::Joined(net::call_as("POST", "/api/v1/peers/join", Some(&body)).await)
                });
            }
            Msg::Described(ticket, r) => self.asking = Some((ticket, Some(r))),
            Msg::JoinLinked => {
                if let Some((ticket, _)) = self.asking.take() {
                    self.ticket = ticket;
                    ctx.link().send_message(Msg::Join);
                }
                set_hash("/");
            }
            Msg::CancelJoin => {
                self.asking = None;
                set_hash("/");
            }
            Msg::Joined(r) => {
                self.joining = false;
                match r {
                    Ok(j) => {
                        self.ticket.clear();
                        self.notice = Some(format!(
                            "joined {} from {} as {}: a draft here, nothing of it runs until you publish it",
                            j.workflow,
                            j.host_name,
                            j.role.as_str()
                        ));
                        ctx.link().send_message(Msg::Open(j.workflow));
                    }
                    Err(e) => self.error = Some(e),
                }
            }
            Msg::Route => {
                if let Some(ticket) = join_route() {
                    self.open = None;
                    App::describe(ctx, ticket);
                    return true;
                }
                let runs = runs_route();
                if runs.is_some() || self.runs.is_some() {
                    let changed = runs != self.runs;
                    self.runs = runs;
                    if self.runs.is_some() {
                        self.open = None;
                        self.open_run = None;
                        return changed;
                    }
                }
                let credentials = credentials_route();
                if credentials != self.credentials {
                    self.credentials = credentials;
                    if credentials {
                        self.open = None;
                        self.open_run = None;
                        return true;
                    }
                }
                let route = hash_route();
                let (open, run, node, view) = match route {
                    Some(r) => (Some(r.workflow), r.run, r.node, r.view),
                    None => (None, None, None, false),
                };
                self.open_view = view;
                if open == self.open && run == self.open_run {
                    self.open_node = node;
                    self.route_seq += 1;
                    return true;
                }
                if open.is_none() {
                    App::list(ctx);
                }
                self.open = open;
                self.open_run = run;
                self.open_node = node;
            }
            Msg::Rename(id) => {
                let name = self
                    .workflows
                    .iter()
                    .find(|w| w.id == id)
                    .map(|w| w.name.clone())
                    .unwrap_or_default();
                self.renaming = Some((id, name));
            }
            Msg::RenameText(text) => {
                if let Some((_, name)) = &mut self.renaming {
                    *name = text;
                }
                return false;
            }
            Msg::RenameDone(save) => {
                let Some((id, name)) = self.renaming.take() else {
                    return false;
                };
                let name = name.trim().to_string();
                if save && !name.is_empty() {
                    ctx.link().send_future(async move {
                        let done = rewrite(&id, &id, |wf| wf["name"] = json!(name)).await;
                        Msg::Done(done.map(|_| format!("renamed {id}")))
                    });
                }
            }
            Msg::Duplicate(id) => {
                let copy = free_id(&format!("{id}-copy"), &self.workflows);
                let name = self
                    .workflows
                    .iter()
                    .find(|w| w.id == id)
                    .map(|w| format!("{} (copy)", w.name))
                    .unwrap_or_else(|| copy.clone());
                ctx.link().send_future(async move {
                    let done = rewrite(&id, &copy, |wf| wf["name"] = json!(name)).await;
                    Msg::Done(done.map(|_| format!("duplicated {id} as {copy}")))
                });
            }
            Msg::Delete(id) => {
                let sure = web_sys::window()
                    .and_then(|w| {
                        w.confirm_with_message(&format!("Delete workflow {id}? Its runs are kept."))
                            .ok()
                    })
                    .unwrap_or(false);
                if sure {
                    ctx.link().send_future(async move {
                        let done =
                            net::call("DELETE", &format!("/api/v1/workflows/{id}"), None).await;
                        Msg::Done(done.map(|_| format!("deleted {id}")))
                    });
                }
            }
            Msg::Export(id) => {
                ctx.link().send_future(async move {
                    let done = match net::call("GET", &format!("/api/v1/workflows/{id}"), None)
                        .await
                    {
                        Ok(wf) => {
                            let text = serde_json::to_string_pretty(&wf).unwrap_or_default() + "\n";
                            download(&format!("{id}.flow.json"), &text)
                                .map(|_| format!("exported {id}.flow.json"))
                        }
                        Err(e) => Err(e),
                    };
                    Msg::Done(done)
                });
            }
            Msg::Import(file) => {
                let taken = self.workflows.clone();
                let file_name = file.name();
                ctx.link().send_future(async move {
                    let text = wasm_bindgen_futures::JsFuture::from(file.text())
                        .await
                        .ok()
                        .and_then(|t| t.as_string())
                        .unwrap_or_default();
                    let done = async {
                        let mut wf: Value = serde_json::from_str(&text)
                            .map_err(|e| format!("{file_name} is not JSON: {e}"))?;
                        if sluice_model::n8n::is_n8n(&wf) {
                            // Converted by the engine into a new workflow.
                            let report = net::call("POST", "/api/v1/import/n8n", Some(&wf))
                                .await
                                .map_err(|e| format!("{file_name}: {e}"))?;
                            return Ok(n8n_notice(&file_name, &report));
                        }
                        let base = wf["id"]
                            .as_str()
                            .map(slug)
                            .filter(|s| !s.is_empty())
                            .ok_or(format!("{file_name} has no workflow id"))?;
                        // Never overwrite: an id in use gets a suffix.
                        let id = free_id(&base, &taken);
                        wf["id"] = json!(id);
                        net::call("PUT", &format!("/api/v1/workflows/{id}"), Some(&wf))
                            .await
                            .map_err(|e| format!("{file_name}: {e}"))?;
                        Ok(format!("imported {file_name} as {id}"))
                    }
                    .await;
                    Msg::Done(done)
                });
            }
            Msg::Done(result) => match result {
                Ok(notice) => {
                    self.notice = Some(notice);
                    self.error = None;
                    App::list(ctx);
                }
                Err(e) => {
                    self.notice = None;
                    self.error = Some(e);
                }
            },
            Msg::Created(Ok(id)) => {
                self.new_name.clear();
                ctx.link().send_message(Msg::Open(id));
            }
        }
        true
    }

    fn rendered(&mut self, _ctx: &Context<Self>, _first: bool) {
        // The page's title names what it shows, once that is painted (two
        // animation frames on): the desktop app's window follows it, and
        // `cargo xtask bench desktop` takes the first change as "ready".
        let title = match &self.open {
            // The desktop app watches for this title and signs its window
            // in again, so it never shows the sign-in page.
            _ if self.signed_out => "Sign in — Sluice".to_string(),
            Some(id) => format!("{id} — Sluice"),
            None => "Workflows — Sluice".to_string(),
        };
        if let Some(w) = web_sys::window()
            && w.document().is_some_and(|d| d.title() != title)
        {
            use wasm_bindgen::JsCast;
            let set = wasm_bindgen::closure::Closure::once_into_js(move || {
                if let Some(d) = web_sys::window().and_then(|w| w.document()) {
                    d.set_title(&title);
                }
            });
            let twice = wasm_bindgen::closure::Closure::once_into_js(move || {
                if let Some(w) = web_sys::window() {
                    w.request_animation_frame(set.unchecked_ref()).ok();
                }
            });
            w.request_animation_frame(twice.unchecked_ref()).ok();
        }
        if let Some(input) = self.rename_box.cast::<web_sys::HtmlInputElement>() {
            let focused = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.active_element())
                .is_some_and(|el| el == **input);
            if !focused {
                input.focus().ok();
                input.select();
            }
        }
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        if self.signed_out {
            return sign_in_page();
        }
        let error = self
            .error
            .as_ref()
            .map(|e| html! { <p class="error" role="alert">{ e }</p> });
        if let Some(query) = &self.runs {
            let on_query = Callback::from(|q: crate::runs_query::RunsQuery| set_hash(&q.to_hash()));
            let on_open = Callback::from(|(wf, run): (String, String)| {
                set_hash(&format!("/w/{}/r/{}", encode(&wf), encode(&run)));
            });
            return html! {
                <div class="app">
                    <header>
                        <button class="back" onclick={link.callback(|_| Msg::Back)}>{ "← Workflows" }</button>
                        <h1>{ "Runs" }</h1>
                        <ThemeToggle />
                    </header>
                    <crate::runs_page::RunsPage query={query.clone()} {on_query} {on_open} />
                </div>
            };
        }
        if self.credentials {
            return html! {
                <div class="app">
                    <header>
                        <button class="back" onclick={link.callback(|_| Msg::Back)}>{ "← Workflows" }</button>
                        <h1>{ "Credentials" }</h1>
                        <ThemeToggle />
                    </header>
                    <crate::credentials::CredentialsPage />
                </div>
            };
        }
        if let Some(id) = &self.open {
            return html! {
                <div class="app">
                    <header>
                        <button class="back" onclick={link.callback(|_| Msg::Back)}>{ "← Workflows" }</button>
                        <h1>{ id }</h1>
                        <ThemeToggle />
                    </header>
                    { for error }
                    <Canvas key={id.clone()} workflow={id.clone()} run={self.open_run.clone()} node={self.open_node.clone()} view={self.open_view} route={self.route_seq} />
                </div>
            };
        }
        let rows = self.workflows.iter().map(|w| {
            let WorkflowEntry { id, name, .. } = w;
            // Whether what runs is the draft: a glance at what needs publishing.
            let (state, state_title) = if !w.published {
                ("not published", "Its triggers are off until it is published")
            } else if w.published_version != w.draft_version {
                ("unpublished edits", "The draft has edits that do not run yet")
            } else {
                ("", "")
            };
            let on = |make: fn(String) -> Msg| {
                let id = id.clone();
                link.callback(move |_| make(id.clone()))
            };
            let main = match &self.renaming {
                Some((r, text)) if r == id => html! {
                    <input class="rename" aria-label="New name" value={text.clone()}
                        oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); Msg::RenameText(i.value()) })}
                        ref={self.rename_box.clone()}
                        onkeydown={link.batch_callback(|e: KeyboardEvent| match e.key().as_str() {
                            "Enter" => Some(Msg::RenameDone(true)),
                            "Escape" => Some(Msg::RenameDone(false)),
                            _ => None,
                        })}
                        onblur={link.callback(|_| Msg::RenameDone(true))} />
                },
                _ => html! {
                    <button class="workflow" data-id={id.clone()} onclick={on(Msg::Open)}>
                        <span class="name">{ name }</span>
                        if !state.is_empty() {
                            <span class="publish-state" title={state_title}>{ state }</span>
                        }
                        if let Some(l) = self.links.iter().find(|l| &l.workflow == id) {
                            <span class="peer-link" data-state={crate::canvas::link_state(l).0}
                                title={format!("Shared by {}", l.host_name)}>
                                { format!("from {} · {}", l.host_name, crate::canvas::link_state(l).1) }
                            </span>
                        }
                        if !w.editing.is_empty() {
                            <span class="editing" title="Has it open in an editor now">{ format!("✎ {}", w.editing.join(", ")) }</span>
                        }
                        { last_run(w) }
                        <span class="id">{ id }</span>
                    </button>
                },
            };
            html! {
                <li key={id.clone()} class="workflow-row" data-id={id.clone()}>
                    { main }
                    <span class="actions">
                        <button class="rename-button" title="Rename" onclick={on(Msg::Rename)}>{ "Rename" }</button>
                        <button class="duplicate" title="Duplicate" onclick={on(Msg::Duplicate)}>{ "Duplicate" }</button>
                        <button class="export" title="Export as a JSON file" onclick={on(Msg::Export)}>{ "Export" }</button>
                        <button class="delete" title="Delete" onclick={on(Msg::Delete)}>{ "Delete" }</button>
                    </span>
                </li>
            }
        });
        let notice = self
            .notice
            .as_ref()
            .map(|n| html! { <p class="notice" role="status">{ n }</p> });
        let onimport = link.batch_callback(|e: Event| {
            let input: web_sys::HtmlInputElement = e.target_unchecked_into();
            let files = input.files();
            let picked: Vec<Msg> = (0..files.as_ref().map_or(0, |f| f.length()))
                .filter_map(|i| files.as_ref()?.get(i))
                .map(Msg::Import)
                .collect();
            input.set_value("");
            picked
        });
        let oninput = link.callback(|e: InputEvent| {
            let input: web_sys::HtmlInputElement = e.target_unchecked_into();
            Msg::NewName(input.value())
        });
        let onsubmit = link.callback(|e: SubmitEvent| {
            e.prevent_default();
            Msg::Create
        });
        html! {
            <div class="app">
                <header>
                    <h1>{ "Sluice" }</h1>
                    <a class="runs-link" href="#/runs">{ "Runs" }</a>
                    <a class="credentials-link" href="#/credentials">{ "Credentials" }</a>
                    <ThemeToggle />
                </header>
                { for error }
                <main class="list">
                    <form class="new" {onsubmit}>
                        <input id="new-name" placeholder="New workflow name" value={self.new_name.clone()} {oninput} />
                        <button type="submit">{ "Create" }</button>
                    </form>
                    <label class="import">{ "Import JSON…" }
                        <input id="import" type="file" accept=".json,application/json" multiple=true onchange={onimport} />
                    </label>
                    { self.ask_view(ctx) }
                    <form class="join" onsubmit={link.callback(|e: SubmitEvent| { e.prevent_default(); Msg::Join })}>
                        <input id="join-ticket" placeholder="Paste a ticket to join a shared workflow"
                            aria-label="Ticket" value={self.ticket.clone()}
                            oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); Msg::JoinText(i.value()) })} />
                        <button type="submit" class="join-button" disabled={self.joining}>
                            { if self.joining { "Joining…" } else { "Join" } }
                        </button>
                    </form>
                    { for notice }
                    if self.listed && self.workflows.is_empty() {
                        { self.welcome_view(ctx) }
                    }
                    <ul class="workflows">{ for rows }</ul>
                    if !self.workflows.is_empty() {
                        <details class="more-templates">
                            <summary>{ "New from a template" }</summary>
                            { self.templates_view(ctx) }
                        </details>
                    }
                </main>
            </div>
        }
    }
}

impl App {
    /// `base`, or `base-2`, `base-3`… : an id no stored workflow has.
    fn free_id(&self, base: &str) -> String {
        let taken: Vec<&str> = self.workflows.iter().map(|w| w.id.as_str()).collect();
        crate::templates::free_id(base, &taken)
    }

    /// The templates and examples to start from, as cards.
    fn templates_view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        html! {
            <ul class="templates">
                { for crate::templates::all().into_iter().map(|t| {
                    let key = t.key;
                    let mut kinds = t.kinds.clone();
                    kinds.dedup();
                    html! {
                        <li>
                            <button class="template" data-template={key} onclick={link.callback(move |_| Msg::FromTemplate(key))}>
                                <span class="template-icons" aria-hidden="true">
                                    { for kinds.iter().take(5).map(|k| html! {
                                        <span class={classes!("template-icon", sluice_model::kinds::spec(k).map(|s| s.category))}>{ crate::looks::icon(k) }</span>
                                    }) }
                                </span>
                                <strong class="template-name">{ &t.name }</strong>
                                <span class="template-description">{ crate::looks::rich(&t.description) }</span>
                            </button>
                        </li>
                    }
                }) }
            </ul>
        }
    }

    /// A new install's first page: what Sluice is and where to start.
    fn welcome_view(&self, ctx: &Context<Self>) -> Html {
        html! {
            <section class="welcome" aria-labelledby="welcome-title">
                <h2 id="welcome-title">{ "Welcome to Sluice" }</h2>
                <p>{ "Draw workflows from triggers, requests, conditions, code and more; run them on this machine and see every step's input and output. Start from one of these, or give a new workflow a name above." }</p>
                <h3>{ "Start from a template" }</h3>
                { self.templates_view(ctx) }
            </section>
        }
    }

    /// A join link's question: who shares which workflow, with which role.
    fn ask_view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let Some((_, described)) = &self.asking else {
            return Html::default();
        };
        let body = match described {
            None => html! { <p>{ "Reading the link…" }</p> },
            Some(Err(e)) => html! {
                <>
                    <p role="alert">{ format!("This join link cannot be used: {e}") }</p>
                    <button class="cancel-join" onclick={link.callback(|_| Msg::CancelJoin)}>{ "Close" }</button>
                </>
            },
            Some(Ok(info)) => match &info.joined {
                Some(id) => {
                    let id = id.clone();
                    html! {
                        <>
                            <p>{ format!("You joined {}'s workflow {} already.", info.host_name, info.workflow) }</p>
                            <button class="open-joined" onclick={link.batch_callback(move |_| vec![Msg::CancelJoin, Msg::Open(id.clone())])}>{ "Open it" }</button>
                        </>
                    }
                }
                None => html! {
                    <>
                        <p>{ format!("{} shares the workflow “{}” with you as {}.", info.host_name, info.workflow, info.role.as_str()) }</p>
                        <p class="join-note">{ "It arrives as a draft: nothing of it runs on this machine until you publish it." }</p>
                        <p>
                            <button class="confirm-join" onclick={link.callback(|_| Msg::JoinLinked)}>{ "Join" }</button>
                            <button class="cancel-join" onclick={link.callback(|_| Msg::CancelJoin)}>{ "Cancel" }</button>
                        </p>
                    </>
                },
            },
        };
        html! { <section class="join-ask" role="dialog" aria-label="Join a shared workflow">{ body }</section> }
    }
}

/// The theme chooser in every header: follows the system, or light, or
/// dark, kept in local storage (`sluice-theme`, read by `boot.js` before
/// the first paint).
#[component]
pub fn ThemeToggle() -> Html {
    let choice = use_state(|| {
        storage()
            .and_then(|s| s.get_item(THEME_KEY).ok().flatten())
            .filter(|t| t == "light" || t == "dark")
            .unwrap_or_default()
    });
    let onclick = {
        let choice = choice.clone();
        Callback::from(move |_| {
            let next = match choice.as_str() {
                "" => "light",
                "light" => "dark",
                _ => "",
            };
            if let Some(s) = storage() {
                if next.is_empty() {
                    s.remove_item(THEME_KEY).ok();
                } else {
                    s.set_item(THEME_KEY, next).ok();
                }
            }
            apply_theme(next);
            choice.set(next.to_string());
        })
    };
    let label = match choice.as_str() {
        "light" => "Light",
        "dark" => "Dark",
        _ => "System",
    };
    html! {
        <button type="button" class="theme-toggle" data-theme-choice={if choice.is_empty() { "system".to_string() } else { (*choice).clone() }}
            title="Theme: follow the system, light or dark" aria-label={format!("Theme: {label} (change)")} {onclick}>
            { format!("Theme: {label}") }
        </button>
    }
}

const THEME_KEY: &str = "sluice-theme";

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

/// Sets the page's theme: `choice`, or the system's when empty.
fn apply_theme(choice: &str) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let theme = match choice {
        "light" | "dark" => choice,
        _ => {
            let dark = window
                .match_media("(prefers-color-scheme: dark)")
                .ok()
                .flatten()
                .is_some_and(|m| m.matches());
            if dark { "dark" } else { "light" }
        }
    };
    if let Some(root) = window.document().and_then(|d| d.document_element()) {
        root.set_attribute("data-theme", theme).ok();
    }
}

/// A list row's last run: its status and how long ago it started.
fn last_run(w: &WorkflowEntry) -> Html {
    let Some(r) = &w.last_run else {
        return html! { <span class="last-run" data-status="none">{ "never run" }</span> };
    };
    let ago = ago(js_sys::Date::now() * 1000.0 - r.created_at_us as f64);
    html! {
        <span class="last-run" data-status={r.status.as_str()} title={format!("Last run {}", r.id)}>
            <span class="dot" aria-hidden="true"></span>{ format!("{} {ago}", r.status.as_str()) }
        </span>
    }
}

/// `us` microseconds as "just now", "5 min ago", "3 h ago", "2 days ago".
pub(crate) fn ago(us: f64) -> String {
    let s = (us / 1e6).max(0.0);
    match s {
        s if s < 45.0 => "just now".into(),
        s if s < 3600.0 => format!("{:.0} min ago", (s / 60.0).max(1.0)),
        s if s < 86400.0 => format!("{:.0} h ago", s / 3600.0),
        s => format!("{:.0} days ago", s / 86400.0),
    }
}

/// A URL path segment, percent-encoded.
pub(crate) fn encode(s: &str) -> String {
    js_sys::encode_uri_component(s)
        .as_string()
        .unwrap_or_default()
}
