//! Credentials in the editor: the Credentials page (`#/credentials`), with
//! each credential's kind, where it is used and a Test, and the form that
//! creates or changes one, also opened from a node's credential picker
//! ("Create new…"). Values are write-only: the form never shows a stored
//! value; a field left empty when changing one keeps what is stored.

use serde_json::{Map, Value, json};
use sluice_api::{CredentialEntry, CredentialStored, CredentialTested};
use sluice_model::credentials::{FORMS, Form, Input, form};
use yew::prelude::*;

use crate::net;

/// The name people read for a credential kind.
pub fn kind_title(kind: &str) -> &str {
    form(kind).map_or(kind, |f| f.title)
}

/// What a test said, as a line with its outcome.
fn tested_view(t: &Tested) -> Html {
    match t {
        Tested::Running => {
            html! { <p class="cred-test" data-state="running" role="status">{ "Testing…" }</p> }
        }
        Tested::Done(t) if t.ok => html! {
            <p class="cred-test" data-state="ok" role="status">{ "✓ Works: " }{ &t.message }
                <span class="took">{ format!(" ({} ms)", t.duration_us / 1000) }</span></p>
        },
        Tested::Done(t) => html! {
            <p class="cred-test" data-state="failed" role="alert">{ "✗ Refused: " }{ &t.message }</p>
        },
        Tested::Error(e) => {
            html! { <p class="cred-test" data-state="failed" role="alert">{ e }</p> }
        }
    }
}

/// A test's state.
#[derive(Clone, PartialEq)]
enum Tested {
    Running,
    Done(CredentialTested),
    /// The test could not be made (no URL to call…).
    Error(String),
}

impl From<Result<CredentialTested, String>> for Tested {
    fn from(r: Result<CredentialTested, String>) -> Tested {
        match r {
            Ok(t) => Tested::Done(t),
            Err(e) => Tested::Error(e),
        }
    }
}

async fn run_test(name: String, url: String) -> Result<CredentialTested, String> {
    let body = if url.trim().is_empty() {
        json!({})
    } else {
        json!({"url": url.trim()})
    };
    net::call_as(
        "POST",
        &format!("/api/v1/credentials/{}/test", crate::app::encode(&name)),
        Some(&body),
    )
    .await
}

// ---- the form ---------------------------------------------------------------

#[derive(Properties, PartialEq)]
pub struct FormProps {
    /// The kinds offered (empty: every kind).
    #[prop_or_default]
    pub accept: Vec<String>,
    /// The credential being changed; none: a new one.
    #[prop_or_default]
    pub editing: Option<CredentialEntry>,
    /// Names already taken (a new one may not reuse them).
    #[prop_or_default]
    pub taken: Vec<String>,
    /// The URL an HTTP credential's test calls, to start with (the node's
    /// own, when opened from a node's picker).
    #[prop_or_default]
    pub test_url: String,
    /// Saved (with its name), or `None`: closed without saving.
    pub on_done: Callback<Option<String>>,
}

pub enum FormMsg {
    Name(String),
    Kind(String),
    Field(&'static str, String),
    Url(String),
    Save,
    Saved(Result<CredentialStored, String>),
    Tested(Result<CredentialTested, String>),
    Close,
}

pub struct CredentialForm {
    name: String,
    kind: String,
    values: Map<String, Value>,
    /// The URL an HTTP credential's test calls.
    url: String,
    error: Option<String>,
    saving: bool,
    /// Saved: the test that followed.
    tested: Option<Tested>,
    saved: Option<String>,
    /// The first box, focused when the form opens.
    first: NodeRef,
}

impl CredentialForm {
    fn form(&self) -> Option<&'static Form> {
        form(&self.kind)
    }

    /// A new credential's starting values: each required choice at its
    /// first word (what its box shows).
    fn defaults(kind: &str) -> Map<String, Value> {
        form(kind)
            .map(|f| f.fields)
            .unwrap_or_default()
            .iter()
            .filter(|f| f.required)
            .filter_map(|f| match f.input {
                Input::Choice(words) => Some((f.key.to_string(), Value::from(words[0]))),
                _ => None,
            })
            .collect()
    }

    fn kinds(ctx: &Context<Self>) -> Vec<&'static Form> {
        let accept = &ctx.props().accept;
        FORMS
            .iter()
            .filter(|f| accept.is_empty() || accept.iter().any(|a| a == f.kind))
            .collect()
    }

    /// The value to send: typed fields only; numbers as numbers.
    fn value(&self) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        let Some(form) = self.form() else {
            return Ok(out);
        };
        for f in form.fields {
            let Some(text) = self.values.get(f.key).and_then(Value::as_str) else {
                continue;
            };
            if text.is_empty() {
                continue;
            }
            let v = match f.input {
                Input::Number => Value::from(
                    text.trim()
                        .parse::<u16>()
                        .map_err(|_| format!("{}: `{text}` is not a port number", f.label))?,
                ),
                _ => Value::String(text.to_string()),
            };
            out.insert(f.key.to_string(), v);
        }
        Ok(out)
    }
}

impl Component for CredentialForm {
    type Message = FormMsg;
    type Properties = FormProps;

    fn create(ctx: &Context<Self>) -> Self {
        let editing = ctx.props().editing.as_ref();
        let kind = editing.map(|e| e.kind.clone()).unwrap_or_else(|| {
            CredentialForm::kinds(ctx)
                .first()
                .map_or("bearer", |f| f.kind)
                .to_string()
        });
        CredentialForm {
            name: editing.map(|e| e.name.clone()).unwrap_or_default(),
            values: if editing.is_some() {
                Map::new()
            } else {
                CredentialForm::defaults(&kind)
            },
            kind,
            url: ctx.props().test_url.clone(),
            error: None,
            saving: false,
            tested: None,
            saved: None,
            first: NodeRef::default(),
        }
    }

    fn rendered(&mut self, _ctx: &Context<Self>, first: bool) {
        if first && let Some(el) = self.first.cast::<web_sys::HtmlElement>() {
            el.focus().ok();
        }
    }

    fn update(&mut self, ctx: &Context<Self>, msg: FormMsg) -> bool {
        let editing = ctx.props().editing.is_some();
        match msg {
            FormMsg::Name(n) => {
                self.name = n;
                return false;
            }
            FormMsg::Kind(k) => {
                self.values = CredentialForm::defaults(&k);
                self.kind = k;
                self.error = None;
            }
            FormMsg::Field(key, text) => {
                self.values.insert(key.to_string(), Value::String(text));
                return false;
            }
            FormMsg::Url(u) => {
                self.url = u;
                return false;
            }
            FormMsg::Save => {
                let name = self.name.trim().to_string();
                if !editing {
                    if !sluice_model::validate::is_slug(&name) {
                        self.error = Some(
                            "Name: letters, digits, `-` and `_` (for example `github-token`)"
                                .into(),
                        );
                        return true;
                    }
                    if ctx.props().taken.contains(&name) {
                        self.error = Some(format!("Name: a credential `{name}` exists already"));
                        return true;
                    }
                }
                let value = match self.value() {
                    Ok(v) => v,
                    Err(e) => {
                        self.error = Some(e);
                        return true;
                    }
                };
                if editing && value.is_empty() {
                    self.error = Some("Nothing changed: type the fields to replace".into());
                    return true;
                }
                // New: POST, which never replaces one of the same name
                // (the list here may be stale); the one this form saved,
                // again under the same name: PUT.
                let (method, path, body) = if editing {
                    let path = format!("/api/v1/credentials/{}", crate::app::encode(&name));
                    ("PATCH", path, json!({ "value": value }))
                } else if self.saved.as_deref() == Some(name.as_str()) {
                    let path = format!("/api/v1/credentials/{}", crate::app::encode(&name));
                    ("PUT", path, json!({ "kind": self.kind, "value": value }))
                } else {
                    let path = "/api/v1/credentials".to_string();
                    (
                        "POST",
                        path,
                        json!({ "name": name, "kind": self.kind, "value": value }),
                    )
                };
                self.saving = true;
                self.error = None;
                ctx.link().send_future(async move {
                    FormMsg::Saved(net::call_as(method, &path, Some(&body)).await)
                });
            }
            FormMsg::Saved(Err(e)) => {
                self.saving = false;
                self.error = Some(e);
            }
            FormMsg::Saved(Ok(stored)) => {
                self.saving = false;
                self.saved = Some(stored.name.clone());
                self.tested = Some(Tested::Running);
                let url = self.url.clone();
                ctx.link()
                    .send_future(async move { FormMsg::Tested(run_test(stored.name, url).await) });
            }
            FormMsg::Tested(r) => self.tested = Some(r.into()),
            FormMsg::Close => ctx.props().on_done.emit(self.saved.clone()),
        }
        true
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let editing = ctx.props().editing.is_some();
        let kinds = CredentialForm::kinds(ctx);
        let form = self.form();
        let fields = form.map(|f| f.fields).unwrap_or_default().iter().map(|f| {
            let id = format!("cred-{}", f.key);
            let key = f.key;
            let typed = self
                .values
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let placeholder = if editing {
                "unchanged (type to replace)".to_string()
            } else if f.required {
                f.hint.to_string()
            } else if f.hint.is_empty() {
                "optional".to_string()
            } else {
                format!("optional: {}", f.hint)
            };
            let control = match f.input {
                Input::Choice(words) => html! {
                    <select id={id.clone()} onchange={link.callback(move |e: Event| {
                        let s: web_sys::HtmlSelectElement = e.target_unchecked_into();
                        FormMsg::Field(key, s.value())
                    })}>
                        if editing || !f.required {
                            <option value="" selected={typed.is_empty()}>{ if editing { "unchanged" } else { "(default)" } }</option>
                        }
                        { for words.iter().map(|w| html! { <option value={*w} selected={typed == *w}>{ *w }</option> }) }
                    </select>
                },
                Input::Lines => html! {
                    <textarea id={id.clone()} class="mono" rows="3" {placeholder} value={typed}
                        oninput={link.callback(move |e: InputEvent| {
                            let a: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
                            FormMsg::Field(key, a.value())
                        })} />
                },
                Input::Text | Input::Number => html! {
                    <input id={id.clone()} value={typed} {placeholder}
                        type={if f.secret { "password" } else if f.input == Input::Number { "number" } else { "text" }}
                        autocomplete={if f.secret { "new-password" } else { "off" }}
                        required={f.required && !editing}
                        oninput={link.callback(move |e: InputEvent| {
                            let i: web_sys::HtmlInputElement = e.target_unchecked_into();
                            FormMsg::Field(key, i.value())
                        })} />
                },
            };
            html! {
                <div class="cred-field" key={key}>
                    <label for={id}>{ f.label }{ if f.secret { " (secret)" } else { "" } }</label>
                    { control }
                </div>
            }
        });
        let heading = if editing {
            format!("Change {}", self.name)
        } else {
            "New credential".to_string()
        };
        html! {
            <form class="cred-form" aria-label={heading.clone()}
                onsubmit={link.callback(|e: SubmitEvent| { e.prevent_default(); FormMsg::Save })}>
                <h2>{ heading }</h2>
                if !editing {
                    <div class="cred-field">
                        <label for="cred-name">{ "Name" }</label>
                        <input id="cred-name" ref={self.first.clone()} placeholder="github-token" value={self.name.clone()} autocomplete="off"
                            oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); FormMsg::Name(i.value()) })} />
                    </div>
                    <div class="cred-field">
                        <label for="cred-kind">{ "Kind" }</label>
                        <select id="cred-kind" onchange={link.callback(|e: Event| { let s: web_sys::HtmlSelectElement = e.target_unchecked_into(); FormMsg::Kind(s.value()) })}>
                            { for kinds.iter().map(|f| html! { <option value={f.kind} selected={f.kind == self.kind}>{ f.title }</option> }) }
                        </select>
                    </div>
                } else {
                    <p class="cred-kind">{ kind_title(&self.kind) }</p>
                }
                if let Some(f) = form {
                    <p class="summary">{ crate::looks::rich(f.summary) }</p>
                }
                <div class="cred-fields">{ for fields }</div>
                if form.is_some_and(|f| f.test_needs_url) {
                    <div class="cred-field">
                        <label for="cred-test-url">{ "Test with URL" }</label>
                        <input id="cred-test-url" type="url" placeholder="https://api.example.com/me (optional)"
                            value={self.url.clone()}
                            oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); FormMsg::Url(i.value()) })} />
                    </div>
                }
                if let Some(f) = form {
                    <p class="hint">{ "Saving tests it: " }{ crate::looks::rich(f.test) }{ "." }</p>
                }
                if let Some(e) = &self.error {
                    <p class="error" role="alert">{ e }</p>
                }
                if let Some(t) = &self.tested {
                    { tested_view(t) }
                }
                <div class="buttons">
                    <button type="submit" class="save-credential" disabled={self.saving}>
                        { if self.saving { "Saving…" } else if self.saved.is_some() { "Save again" } else { "Save" } }
                    </button>
                    <button type="button" class="close-credential" onclick={link.callback(|_| FormMsg::Close)}>
                        { if self.saved.is_some() { "Done" } else { "Cancel" } }
                    </button>
                </div>
            </form>
        }
    }
}

// ---- the page ---------------------------------------------------------------

pub enum Msg {
    Listed(Result<Vec<CredentialEntry>, String>),
    New,
    Edit(String),
    /// The form closed (with the name saved, if any).
    Done(Option<String>),
    Test(String),
    TestUrl(String, String),
    Tested(String, Result<CredentialTested, String>),
    Delete(String),
    Deleted(String, Result<Value, String>),
}

#[derive(Properties, PartialEq)]
pub struct PageProps {}

pub struct CredentialsPage {
    list: Vec<CredentialEntry>,
    listed: bool,
    error: Option<String>,
    /// The form is open: `None` inside for a new credential.
    form: Option<Option<String>>,
    /// Each credential's last test, and the URL typed for it.
    tests: std::collections::HashMap<String, Tested>,
    urls: std::collections::HashMap<String, String>,
}

impl CredentialsPage {
    fn list(ctx: &Context<Self>) {
        ctx.link().send_future(async {
            Msg::Listed(net::call_as("GET", "/api/v1/credentials", None).await)
        });
    }
}

impl Component for CredentialsPage {
    type Message = Msg;
    type Properties = PageProps;

    fn create(ctx: &Context<Self>) -> Self {
        CredentialsPage::list(ctx);
        CredentialsPage {
            list: Vec::new(),
            listed: false,
            error: None,
            form: None,
            tests: Default::default(),
            urls: Default::default(),
        }
    }

    fn update(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Listed(Ok(list)) => {
                self.list = list;
                self.listed = true;
            }
            Msg::Listed(Err(e)) => self.error = Some(e),
            Msg::New => self.form = Some(None),
            Msg::Edit(name) => self.form = Some(Some(name)),
            Msg::Done(saved) => {
                self.form = None;
                if saved.is_some() {
                    CredentialsPage::list(ctx);
                }
            }
            Msg::Test(name) => {
                self.tests.insert(name.clone(), Tested::Running);
                let url = self.urls.get(&name).cloned().unwrap_or_default();
                ctx.link().send_future(async move {
                    let r = run_test(name.clone(), url).await;
                    Msg::Tested(name, r)
                });
            }
            Msg::TestUrl(name, url) => {
                self.urls.insert(name, url);
                return false;
            }
            Msg::Tested(name, r) => {
                self.tests.insert(name, r.into());
            }
            Msg::Delete(name) => {
                let uses = self
                    .list
                    .iter()
                    .find(|c| c.name == name)
                    .map_or(0, |c| c.used_by.len());
                let question = if uses == 0 {
                    format!("Delete credential {name}?")
                } else {
                    format!(
                        "Delete credential {name}? {uses} node{} use{} it: {} fail until given another.",
                        if uses == 1 { "" } else { "s" },
                        if uses == 1 { "s" } else { "" },
                        if uses == 1 { "it will" } else { "they will" },
                    )
                };
                let sure = web_sys::window()
                    .and_then(|w| w.confirm_with_message(&question).ok())
                    .unwrap_or(false);
                if sure {
                    ctx.link().send_future(async move {
                        let path = format!("/api/v1/credentials/{}", crate::app::encode(&name));
                        let r = net::call("DELETE", &path, None).await;
                        Msg::Deleted(name, r)
                    });
                }
                return false;
            }
            Msg::Deleted(_, Err(e)) => self.error = Some(e),
            Msg::Deleted(name, Ok(_)) => {
                self.list.retain(|c| c.name != name);
                self.tests.remove(&name);
            }
        }
        true
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let form = self.form.as_ref().map(|editing| {
            let editing = editing
                .as_ref()
                .and_then(|n| self.list.iter().find(|c| &c.name == n))
                .cloned();
            let taken: Vec<String> = self.list.iter().map(|c| c.name.clone()).collect();
            let key = editing
                .as_ref()
                .map_or("new".to_string(), |e| e.name.clone());
            html! {
                <div class="cred-dialog">
                    <CredentialForm {key} {editing} {taken} on_done={link.callback(Msg::Done)} />
                </div>
            }
        });
        let now = js_sys::Date::now() * 1000.0;
        let rows = self.list.iter().map(|c| {
            let name = c.name.clone();
            let on = |make: fn(String) -> Msg| {
                let name = name.clone();
                link.callback(move |_| make(name.clone()))
            };
            let needs_url = sluice_model::credentials::form(&c.kind).is_some_and(|f| f.test_needs_url);
            let used = if c.used_by.is_empty() {
                html! { <span class="unused">{ "not used" }</span> }
            } else {
                html! {
                    <ul class="uses">
                        { for c.used_by.iter().map(|u| {
                            let href = format!("#/w/{}/n/{}", crate::app::encode(&u.workflow), crate::app::encode(&u.node));
                            let state = match (u.draft, u.published) {
                                (true, true) => "",
                                (true, false) => " (draft)",
                                (false, _) => " (published only)",
                            };
                            html! { <li><a {href}>{ format!("{} › {}", u.workflow, u.node) }</a>{ state }</li> }
                        }) }
                    </ul>
                }
            };
            html! {
                <li class="credential-row" key={name.clone()} data-name={name.clone()}>
                    <div class="cred-main">
                        <span class="name">{ &c.name }</span>
                        <span class="cred-type">{ kind_title(&c.kind) }</span>
                        <span class="updated">{ format!("changed {}", crate::app::ago(now - c.updated_at_us as f64)) }</span>
                    </div>
                    <div class="cred-used"><span class="label">{ "Used by" }</span>{ used }</div>
                    <div class="actions">
                        if needs_url {
                            <input class="test-url" type="url" aria-label={format!("URL to test {} with", c.name)}
                                placeholder="URL to test with (optional)"
                                value={self.urls.get(&c.name).cloned().unwrap_or_default()}
                                oninput={{ let name = name.clone(); link.callback(move |e: InputEvent| {
                                    let i: web_sys::HtmlInputElement = e.target_unchecked_into();
                                    Msg::TestUrl(name.clone(), i.value())
                                }) }} />
                        }
                        <button class="test" onclick={on(Msg::Test)}>{ "Test" }</button>
                        <button class="edit" onclick={on(Msg::Edit)}>{ "Change" }</button>
                        <button class="delete" onclick={on(Msg::Delete)}>{ "Delete" }</button>
                    </div>
                    if let Some(t) = self.tests.get(&c.name) {
                        { tested_view(t) }
                    }
                </li>
            }
        });
        html! {
            <main class="credentials-page">
                <p class="intro">{ "Secrets your workflows use, by name. Stored encrypted on this machine, never synced to peers, never shown again once saved." }</p>
                if let Some(e) = &self.error {
                    <p class="error" role="alert">{ e }</p>
                }
                <button class="new-credential" onclick={link.callback(|_| Msg::New)}>{ "New credential" }</button>
                { for form }
                if self.listed && self.list.is_empty() {
                    <p class="empty">{ "No credentials yet." }</p>
                }
                <ul class="credentials">{ for rows }</ul>
            </main>
        }
    }
}
