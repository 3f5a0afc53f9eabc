//! The shell: the workflow list and, once one is opened, its canvas.
//! Routes live in the URL hash (`#/w/<id>`), so reloads and links work.

use serde_json::{Value, json};
use yew::prelude::*;

use crate::canvas::Canvas;
use crate::net;

pub enum Msg {
    Listed(Result<Value, String>),
    Open(String),
    Back,
    NewName(String),
    Create,
    Created(Result<String, String>),
    /// The URL hash changed (back/forward, a link, an edit of the URL).
    Route,
}

pub struct App {
    workflows: Vec<(String, String)>,
    open: Option<String>,
    error: Option<String>,
    new_name: String,
    _on_hash: Option<wasm_bindgen::closure::Closure<dyn FnMut()>>,
}

fn hash_route() -> Option<String> {
    let hash = web_sys::window()?.location().hash().ok()?;
    hash.strip_prefix("#/w/")
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

fn set_hash(hash: &str) {
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

impl App {
    fn list(ctx: &Context<Self>) {
        ctx.link()
            .send_future(async { Msg::Listed(net::call("GET", "/api/v1/workflows", None).await) });
    }
}

impl Component for App {
    type Message = Msg;
    type Properties = ();

    fn create(ctx: &Context<Self>) -> Self {
        use wasm_bindgen::JsCast;
        App::list(ctx);
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
            open: hash_route(),
            error: None,
            new_name: String::new(),
            _on_hash: Some(on_hash),
        }
    }

    fn update(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Listed(Ok(list)) => {
                self.workflows = list
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|w| {
                        let id = w.get("id")?.as_str()?.to_string();
                        let name = w
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or(&id)
                            .to_string();
                        Some((id, name))
                    })
                    .collect();
                self.error = None;
            }
            Msg::Listed(Err(e)) | Msg::Created(Err(e)) => self.error = Some(e),
            Msg::Open(id) => {
                set_hash(&format!("/w/{id}"));
                self.open = Some(id);
            }
            Msg::Back => {
                set_hash("/");
                self.open = None;
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
                let body = json!({
                    "format": "sluice.workflow/v1", "id": id, "name": name,
                    "nodes": [{"id": "start", "kind": "trigger.manual", "position": [0, 0]}],
                    "edges": []
                });
                ctx.link().send_future(async move {
                    let path = format!("/api/v1/workflows/{id}");
                    Msg::Created(net::call("PUT", &path, Some(&body)).await.map(|_| id))
                });
            }
            Msg::Route => {
                let route = hash_route();
                if route == self.open {
                    return false;
                }
                if route.is_none() {
                    App::list(ctx);
                }
                self.open = route;
            }
            Msg::Created(Ok(id)) => {
                self.new_name.clear();
                ctx.link().send_message(Msg::Open(id));
            }
        }
        true
    }

    fn view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let error = self
            .error
            .as_ref()
            .map(|e| html! { <p class="error" role="alert">{ e }</p> });
        if let Some(id) = &self.open {
            return html! {
                <div class="app">
                    <header>
                        <button class="back" onclick={link.callback(|_| Msg::Back)}>{ "← Workflows" }</button>
                        <h1>{ id }</h1>
                    </header>
                    { for error }
                    <Canvas key={id.clone()} workflow={id.clone()} />
                </div>
            };
        }
        let rows = self.workflows.iter().map(|(id, name)| {
            let open = {
                let id = id.clone();
                link.callback(move |_| Msg::Open(id.clone()))
            };
            html! {
                <li><button class="workflow" data-id={id.clone()} onclick={open}>
                    <span class="name">{ name }</span><span class="id">{ id }</span>
                </button></li>
            }
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
                <header><h1>{ "Sluice" }</h1></header>
                { for error }
                <main class="list">
                    <form class="new" {onsubmit}>
                        <input id="new-name" placeholder="New workflow name" value={self.new_name.clone()} {oninput} />
                        <button type="submit">{ "Create" }</button>
                    </form>
                    <ul class="workflows">{ for rows }</ul>
                </main>
            </div>
        }
    }
}
