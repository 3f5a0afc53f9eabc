//! The canvas's palette (the node kinds to add, searchable, clicked or
//! dragged onto the canvas) and the quick-add box (a double click on the
//! background).

use sluice_model::kinds;
use wasm_bindgen::JsCast;
use web_sys::{Element, KeyboardEvent, PointerEvent};
use yew::prelude::*;

use super::gestures::{Drag, hit};
use super::{Canvas, focus, now_ms};
use crate::looks;
use crate::state::{Action, NODE_H, NODE_W};

pub enum Msg {
    /// A palette entry clicked (added at the middle of the view).
    Add(String),
    /// A palette entry pressed: it may be dragged onto the canvas.
    Down(String, PointerEvent),
    Search(String),
    SearchKey(KeyboardEvent),
    /// Double click on the background: quick-add at that point.
    QuickAdd(web_sys::MouseEvent),
    QuickSearch(String),
    QuickKey(KeyboardEvent),
    QuickPick(String),
    QuickClose,
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Palette(msg)
    }
}

/// The palette part of the canvas's state.
#[derive(Default)]
pub struct Palette {
    search: String,
    pub search_box: NodeRef,
    quick: Option<QuickAdd>,
    quick_box: NodeRef,
    /// Focus the quick-add box after the next render.
    focus_quick: bool,
    /// A palette drag just ended: the click that follows (until this
    /// time, ms) is not an add.
    pub swallow_click_until: f64,
}

/// The quick-add box (double click on the background, or the "+" on an
/// output port: then the node picked follows that port).
struct QuickAdd {
    screen: (f64, f64),
    world: (f64, f64),
    query: String,
    /// The node and output port the new node is connected from.
    after: Option<(String, String)>,
}

impl Palette {
    /// Closes the quick-add box (a gesture elsewhere).
    pub fn close_quick(&mut self) {
        self.quick = None;
    }

    /// After a render: focus the quick-add box if it just opened.
    pub fn rendered(&mut self) {
        if std::mem::take(&mut self.focus_quick) {
            focus(&self.quick_box);
        }
    }
}

impl Canvas {
    /// The quick-add box at screen point `screen` (world point `world`).
    pub(super) fn open_quick_at(&mut self, screen: (f64, f64), world: (f64, f64)) -> bool {
        self.palette.quick = Some(QuickAdd {
            screen,
            world,
            query: String::new(),
            after: None,
        });
        self.palette.focus_quick = true;
        true
    }

    /// The "+" on output `port` of `node`, pressed at screen point `at`:
    /// the quick-add box, its pick connected from that port.
    pub(super) fn quick_add_after(&mut self, node: String, port: String, at: (f64, f64)) -> bool {
        if self.viewing() {
            return false;
        }
        let Some(editor) = &self.editor else {
            return false;
        };
        let world = editor.viewport.to_world(at.0 + 40.0, at.1);
        self.palette.quick = Some(QuickAdd {
            screen: at,
            world,
            query: String::new(),
            after: Some((node, port)),
        });
        self.palette.focus_quick = true;
        true
    }

    pub(super) fn on_palette(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Add(kind) => {
                if now_ms() < self.palette.swallow_click_until {
                    return false;
                }
                self.add_at_center(kind)
            }
            Msg::Down(kind, e) => {
                if let Some(el) = e.target().and_then(|t| t.dyn_into::<Element>().ok()) {
                    el.set_pointer_capture(e.pointer_id()).ok();
                }
                self.gestures.drag = Drag::Palette {
                    kind,
                    start: (f64::from(e.client_x()), f64::from(e.client_y())),
                    now: None,
                    edge: None,
                };
                false
            }
            Msg::Search(q) => {
                self.palette.search = q;
                true
            }
            Msg::SearchKey(e) => match e.key().as_str() {
                "Enter" => {
                    let first = kinds::search(&self.palette.search)
                        .matches
                        .first()
                        .map(|k| k.kind);
                    match first {
                        Some(kind) => self.add_at_center(kind.to_string()),
                        None => false,
                    }
                }
                "Escape" => {
                    self.palette.search.clear();
                    focus(&self.svg);
                    true
                }
                _ => false,
            },
            Msg::QuickAdd(e) => {
                // On a node: open it in the node view.
                if let (Some(node), None) = hit(&e) {
                    return self.on_node_view(super::node_view::Msg::Open(node));
                }
                if self.viewing() || hit(&e).0.is_some() {
                    return false;
                }
                let at = self.point(&e);
                let Some(editor) = &self.editor else {
                    return false;
                };
                self.palette.quick = Some(QuickAdd {
                    screen: at,
                    world: editor.viewport.to_world(at.0, at.1),
                    query: String::new(),
                    after: None,
                });
                self.palette.focus_quick = true;
                true
            }
            Msg::QuickSearch(q) => {
                if let Some(quick) = &mut self.palette.quick {
                    quick.query = q;
                }
                true
            }
            Msg::QuickKey(e) => match e.key().as_str() {
                "Enter" => {
                    e.prevent_default();
                    let first = self
                        .palette
                        .quick
                        .as_ref()
                        .and_then(|q| quick_matches(q).first().map(|k| k.kind.to_string()));
                    match first {
                        Some(kind) => self.on_palette(Msg::QuickPick(kind)),
                        None => false,
                    }
                }
                "Escape" => self.on_palette(Msg::QuickClose),
                _ => false,
            },
            Msg::QuickPick(kind) => {
                let Some(quick) = self.palette.quick.take() else {
                    return false;
                };
                let at = (quick.world.0, quick.world.1 - NODE_H / 2.0);
                match quick.after {
                    Some((from, port)) => self.act(Action::AddAfter {
                        kind,
                        at,
                        from,
                        port,
                    }),
                    None => self.act(Action::AddNode { kind, at }),
                };
                focus(&self.svg);
                true
            }
            Msg::QuickClose => {
                self.palette.quick = None;
                focus(&self.svg);
                true
            }
        }
    }

    fn add_at_center(&mut self, kind: String) -> bool {
        let (w, h) = self.size();
        let Some(editor) = &self.editor else {
            return false;
        };
        let at = editor.viewport.to_world(w / 2.0 - NODE_W / 2.0, h / 2.0);
        self.act(Action::AddNode { kind, at })
    }

    /// The left-hand panel: the node kinds by category, each with its
    /// icon and name (its description on hover); a search that finds
    /// nothing says so and suggests the closest kind.
    pub(super) fn palette_view(&self, ctx: &Context<Self>) -> Html {
        let link = ctx.link();
        let found = kinds::search(&self.palette.search);
        let mut groups: Vec<(&str, Vec<&kinds::KindSpec>)> = Vec::new();
        for k in &found.matches {
            match groups.iter_mut().find(|(c, _)| *c == k.category) {
                Some((_, list)) => list.push(k),
                None => groups.push((k.category, vec![k])),
            }
        }
        let groups = groups.into_iter().map(|(category, list)| {
            html! {
                <li class="category">
                    <h3>{ category_title(category) }</h3>
                    <ul>
                        { for list.into_iter().map(|k| {
                            let kind = k.kind.to_string();
                            let onclick = { let kind = kind.clone(); link.callback(move |_| Msg::Add(kind.clone())) };
                            let onpointerdown = link.callback(move |e: PointerEvent| Msg::Down(kind.clone(), e));
                            html! {
                                <li><button class={classes!("kind", k.category)} data-kind={k.kind} title={k.summary_text()}
                                    aria-label={format!("{}: {}", k.title(), k.summary_text())} {onclick} {onpointerdown}>
                                    { looks::icon(k.kind) }<span class="kind-title">{ k.title() }</span>
                                </button></li>
                            }
                        }) }
                    </ul>
                </li>
            }
        });
        let nothing = found.matches.is_empty().then(|| {
            let suggestion = found.suggestion.map(|k| {
                let title = k.title().to_string();
                html! {
                    <>{ " Did you mean " }
                    <button class="suggestion" data-kind={k.kind}
                        onclick={link.callback(move |_| Msg::Search(title.clone()))}>{ k.title() }</button>{ "?" }</>
                }
            });
            html! {
                <p class="no-match" role="status">
                    { format!("No node matches “{}”.", self.palette.search.trim()) }{ for suggestion }
                </p>
            }
        });
        html! {
            <aside class="palette" aria-label="Nodes">
                <h2>{ "Nodes" }</h2>
                <input ref={self.palette.search_box.clone()} class="palette-search" type="search" placeholder="Search ( / )"
                    aria-label="Search nodes by name or what they do" value={self.palette.search.clone()}
                    oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); Msg::Search(i.value()) })}
                    onkeydown={link.callback(Msg::SearchKey)} />
                // A stable wrapper: an element appearing among the
                // panel's children would make Yew redraw the search box
                // under the typing (losing its focus and the next keys).
                <div class="palette-status">{ for nothing }</div>
                <ul class="categories">{ for groups }</ul>
            </aside>
        }
    }

    /// The quick-add box, when open.
    pub(super) fn quick_add(&self, ctx: &Context<Self>) -> Option<Html> {
        let link = ctx.link();
        self.palette.quick.as_ref().map(|q| {
            let found = kinds::search(&q.query);
            let matches = quick_matches(q);
            let title = match &q.after {
                Some((node, port)) => format!("Add after {node}{}", if port == "out" { String::new() } else { format!(" ({port})") }),
                None => "Add a node".to_string(),
            };
            let nothing = matches.is_empty().then(|| {
                let suggestion = found.suggestion.map(|k| {
                    let kind = k.kind.to_string();
                    html! {
                        <>{ " Did you mean " }
                        <button class="suggestion" data-kind={k.kind}
                            onclick={link.callback(move |_| Msg::QuickPick(kind.clone()))}>{ k.title() }</button>{ "?" }</>
                    }
                });
                html! { <p class="no-match" role="status">{ "No node matches." }{ for suggestion }</p> }
            });
            html! {
                <div class="quick-add" style={format!("left: {}px; top: {}px", q.screen.0, q.screen.1)}>
                    <input ref={self.palette.quick_box.clone()} class="quick-search" placeholder={format!("{title}…")} value={q.query.clone()}
                        aria-label={format!("{title}: search nodes by name or what they do")}
                        oninput={link.callback(|e: InputEvent| { let i: web_sys::HtmlInputElement = e.target_unchecked_into(); Msg::QuickSearch(i.value()) })}
                        onkeydown={link.callback(Msg::QuickKey)} />
                    <div class="palette-status">{ for nothing }</div>
                    <ul>
                        { for matches.iter().take(8).map(|k| {
                            let kind = k.kind.to_string();
                            html! { <li><button class={classes!("kind", k.category)} data-kind={k.kind} title={k.summary_text()}
                                onclick={link.callback(move |_| Msg::QuickPick(kind.clone()))}>
                                { looks::icon(k.kind) }<span class="kind-title">{ k.title() }</span></button></li> }
                        }) }
                    </ul>
                </div>
            }
        })
    }
}

/// The kinds the quick-add box offers for its query: after a port, no
/// trigger (a trigger starts runs, it follows nothing).
fn quick_matches(q: &QuickAdd) -> Vec<&'static kinds::KindSpec> {
    kinds::search(&q.query)
        .matches
        .into_iter()
        .filter(|k| q.after.is_none() || !k.is_trigger)
        .collect()
}

/// A category's heading.
fn category_title(category: &str) -> &str {
    match category {
        "trigger" => "Triggers",
        "flow" => "Flow",
        "data" => "Data",
        "integration" => "Integrations",
        "code" => "Code",
        "util" => "Utilities",
        "output" => "Outputs",
        other => other,
    }
}
