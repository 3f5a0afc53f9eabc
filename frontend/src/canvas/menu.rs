//! The canvas's right-click menus: on a node, on a connection, and on the
//! background, each with what applies there.

use serde_json::Value;
use wasm_bindgen::JsCast;
use web_sys::{Element, MouseEvent};
use yew::prelude::*;

use super::Canvas;
use crate::state::{Action, Arrange};

pub enum Msg {
    /// A right click (or the context-menu key) on the surface.
    Open(MouseEvent),
    Do(Item),
    Close,
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Menu(msg)
    }
}

/// What the menu was opened on.
#[derive(Clone, PartialEq)]
enum On {
    Node(String),
    Edge(usize),
    Canvas,
}

/// An open menu.
pub struct Menu {
    screen: (f64, f64),
    world: (f64, f64),
    on: On,
}

#[derive(Clone, Copy)]
pub enum Item {
    Settings,
    Duplicate,
    SwitchOff,
    SwitchOn,
    Delete,
    Disconnect,
    AddHere,
    AddNote,
    Paste,
    SelectAll,
    Fit,
    Tidy,
    Arrange(Arrange),
}

impl Canvas {
    pub(super) fn on_menu(&mut self, ctx: &Context<Self>, msg: Msg) -> bool {
        match msg {
            Msg::Open(e) => {
                e.prevent_default();
                if self.viewing() {
                    return false;
                }
                let at = self.point(&e);
                let Some(editor) = &self.editor else {
                    return false;
                };
                let target = e.target().and_then(|t| t.dyn_into::<Element>().ok());
                let closest = |sel: &str, attr: &str| {
                    target
                        .as_ref()
                        .and_then(|t| t.closest(sel).ok().flatten())
                        .and_then(|el| el.get_attribute(attr))
                };
                let on = if let Some(node) = closest("[data-node]", "data-node") {
                    On::Node(node)
                } else if let Some(edge) = closest("[data-edge]", "data-edge") {
                    edge.parse().map_or(On::Canvas, On::Edge)
                } else {
                    On::Canvas
                };
                if let On::Node(id) = &on
                    && !editor.selected.contains(id)
                {
                    let id = id.clone();
                    self.act(Action::Select {
                        id,
                        additive: false,
                    });
                }
                let world = self
                    .editor
                    .as_ref()
                    .map_or((0.0, 0.0), |ed| ed.viewport.to_world(at.0, at.1));
                self.palette.close_quick();
                self.menu = Some(Menu {
                    screen: at,
                    world,
                    on,
                });
                self.focus_menu = true;
                true
            }
            Msg::Close => self.menu.take().is_some(),
            Msg::Do(item) => {
                let Some(menu) = self.menu.take() else {
                    return false;
                };
                let node = match &menu.on {
                    On::Node(id) => Some(id.clone()),
                    _ => None,
                };
                match item {
                    Item::Settings => {
                        self.inspector.settings_tab = true;
                        true
                    }
                    Item::Duplicate => self.act(Action::DuplicateSelected),
                    Item::SwitchOff | Item::SwitchOn => match node {
                        Some(node) => self.act(Action::SetNodeSetting {
                            node,
                            key: "disabled".into(),
                            value: Some(Value::Bool(matches!(item, Item::SwitchOff))),
                        }),
                        None => true,
                    },
                    Item::Delete => self.act(Action::DeleteSelected),
                    Item::Disconnect => match menu.on {
                        On::Edge(edge) => self.act(Action::Disconnect { edge }),
                        _ => true,
                    },
                    Item::AddHere => self.open_quick_at(menu.screen, menu.world),
                    Item::AddNote => self.on_note(super::notes::Msg::Add(menu.world)),
                    Item::Paste => match self.gestures.clipboard.clone() {
                        Some(json) => self.act(Action::Paste {
                            json,
                            at: menu.world,
                        }),
                        None => true,
                    },
                    Item::SelectAll => self.act(Action::SelectAll),
                    Item::Tidy => self.act(Action::Tidy),
                    Item::Arrange(how) => self.act(Action::Arrange(how)),
                    Item::Fit => {
                        ctx.link().send_message(super::Msg::Fit);
                        true
                    }
                }
            }
        }
    }

    /// The open menu, if any.
    pub(super) fn menu_view(&self, ctx: &Context<Self>) -> Option<Html> {
        let menu = self.menu.as_ref()?;
        let link = ctx.link();
        let item = |it: Item, text: &str, danger: bool| {
            html! {
                <button type="button" role="menuitem" class={classes!(danger.then_some("danger"))}
                    data-item={text.to_string()} onclick={link.callback(move |_| Msg::Do(it))}>{ text }</button>
            }
        };
        let items = match &menu.on {
            On::Node(id) => {
                let disabled = self
                    .editor
                    .as_ref()
                    .and_then(|ed| ed.wf.nodes.iter().find(|n| &n.id == id))
                    .is_some_and(|n| n.disabled);
                let selected = self.editor.as_ref().map_or(0, |ed| ed.selected.len());
                html! {
                    <>
                        { item(Item::Settings, "Settings", false) }
                        { item(Item::Duplicate, "Duplicate", false) }
                        if disabled { { item(Item::SwitchOn, "Switch on", false) } } else { { item(Item::SwitchOff, "Switch off", false) } }
                        if selected >= 2 {
                            { item(Item::Arrange(Arrange::AlignLeft), "Align left", false) }
                            { item(Item::Arrange(Arrange::AlignTop), "Align top", false) }
                        }
                        if selected >= 3 {
                            { item(Item::Arrange(Arrange::DistributeHorizontally), "Distribute horizontally", false) }
                            { item(Item::Arrange(Arrange::DistributeVertically), "Distribute vertically", false) }
                        }
                        { item(Item::Delete, "Delete", true) }
                    </>
                }
            }
            On::Edge(_) => item(Item::Disconnect, "Delete connection", true),
            On::Canvas => html! {
                <>
                    { item(Item::AddHere, "Add a node here", false) }
                    { item(Item::AddNote, "Add a sticky note", false) }
                    if self.gestures.clipboard.is_some() { { item(Item::Paste, "Paste", false) } }
                    { item(Item::SelectAll, "Select all", false) }
                    { item(Item::Tidy, "Tidy up", false) }
                    { item(Item::Fit, "Fit to window", false) }
                </>
            },
        };
        let label = match &menu.on {
            On::Node(id) => format!("Node {id}"),
            On::Edge(_) => "Connection".to_string(),
            On::Canvas => "Canvas".to_string(),
        };
        Some(html! {
            <div class="context-menu" role="menu" aria-label={label} ref={self.menu_ref.clone()}
                style={format!("left: {}px; top: {}px", menu.screen.0, menu.screen.1)}
                onkeydown={link.batch_callback(|e: KeyboardEvent| (e.key() == "Escape").then_some(super::Msg::Menu(Msg::Close)))}>
                { items }
            </div>
        })
    }
}
