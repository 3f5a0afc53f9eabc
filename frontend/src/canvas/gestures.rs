//! The canvas's pointer and keyboard gestures: panning, zooming, moving
//! nodes, box selection, wiring ports, dropping a palette entry, and the
//! keyboard shortcuts.

use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{Element, KeyboardEvent, PointerEvent, WheelEvent};
use yew::prelude::*;

use super::{Canvas, Msg, focus, now_ms, runs};
use crate::state::{Action, NODE_H, NODE_W, Rect};
use crate::sync::CursorStep;

/// What the pointer is doing.
pub enum Drag {
    None,
    Pan {
        last: (f64, f64),
    },
    /// Selected nodes being moved, and the connection the one node moved
    /// (when it has no connection of its own) would go into if let go now.
    Nodes {
        last: (f64, f64),
        moved: bool,
        edge: Option<usize>,
    },
    Band {
        start: (f64, f64),
        now: (f64, f64),
        additive: bool,
    },
    Wire {
        from: String,
        port: String,
        now: (f64, f64),
    },
    /// A palette entry being dragged in (screen point of the page), and
    /// the connection it would go into if dropped now.
    Palette {
        kind: String,
        start: (f64, f64),
        now: Option<(f64, f64)>,
        edge: Option<usize>,
    },
    /// A sticky note being moved: where it was grabbed (world units from
    /// its corner) and where its corner is now.
    Note {
        id: String,
        grab: (f64, f64),
        now: (f64, f64),
        moved: bool,
    },
    /// A sticky note being resized from its corner at `origin`.
    NoteSize {
        id: String,
        origin: (f64, f64),
        now: (f64, f64),
        moved: bool,
    },
    /// A field of the node view's input being dragged onto a parameter:
    /// the template that reads it (screen points of the page).
    Field {
        expr: String,
        start: (f64, f64),
        now: Option<(f64, f64)>,
    },
}

/// The gestures' part of the canvas's state.
pub struct Gestures {
    pub drag: Drag,
    /// Space is held: a drag anywhere pans.
    space: bool,
    /// A drag is one undo step: one was started.
    grouping: bool,
    pub clipboard: Option<String>,
}

impl Default for Gestures {
    fn default() -> Gestures {
        Gestures {
            drag: Drag::None,
            space: false,
            grouping: false,
            clipboard: None,
        }
    }
}

impl Canvas {
    pub(super) fn on_down(&mut self, e: PointerEvent) -> bool {
        self.refused = None;
        self.palette.close_quick();
        self.size();
        let at = self.point(&e);
        if let Some(svg) = self.svg.cast::<Element>() {
            svg.set_pointer_capture(e.pointer_id()).ok();
        }
        let viewing = self.viewing();
        let Some(editor) = self.shown() else {
            return false;
        };
        let world = editor.viewport.to_world(at.0, at.1);
        let selected = editor.selected.clone();
        if self.gestures.space {
            self.gestures.drag = Drag::Pan { last: at };
            return true;
        }
        self.menu = None;
        if let Some((node, port)) = add_hit(&e) {
            self.gestures.drag = Drag::None;
            return self.quick_add_after(node, port, at);
        }
        match hit(&e) {
            (Some(node), Some(port)) if port != "in" && !viewing => {
                self.gestures.drag = Drag::Wire {
                    from: node,
                    port,
                    now: world,
                };
                true
            }
            (Some(node), _) => {
                if !selected.contains(&node) || e.shift_key() {
                    self.act(Action::Select {
                        id: node,
                        additive: e.shift_key(),
                    });
                }
                if !viewing {
                    self.gestures.drag = Drag::Nodes {
                        last: world,
                        moved: false,
                        edge: None,
                    };
                    self.gestures.grouping = self.sync.group_start();
                }
                true
            }
            (None, _) if e.shift_key() => {
                self.gestures.drag = Drag::Band {
                    start: world,
                    now: world,
                    additive: true,
                };
                true
            }
            (None, _) => {
                self.act(Action::ClearSelection);
                self.gestures.drag = if e.alt_key() || e.button() == 1 {
                    Drag::Band {
                        start: world,
                        now: world,
                        additive: false,
                    }
                } else {
                    Drag::Pan { last: at }
                };
                true
            }
        }
    }

    /// The connection under the pointer (within a few screen pixels), for
    /// a node dropped there to go into.
    fn edge_under(&self, e: &PointerEvent) -> Option<usize> {
        let on_canvas = under(e)
            .and_then(|el| el.closest(".surface").ok().flatten())
            .is_some();
        if !on_canvas || self.viewing() {
            return None;
        }
        let editor = self.editor.as_ref()?;
        let at = self.point(e);
        let world = editor.viewport.to_world(at.0, at.1);
        editor.edge_near(world, 12.0 / editor.viewport.zoom)
    }

    pub(super) fn on_move(&mut self, ctx: &Context<Self>, e: PointerEvent) -> bool {
        let at = self.point(&e);
        if let Drag::Palette {
            now: Some(_), kind, ..
        } = &self.gestures.drag
        {
            let near = self
                .edge_under(&e)
                .filter(|_| crate::state::fits_between(kind));
            if let Drag::Palette { edge, .. } = &mut self.gestures.drag {
                *edge = near;
            }
        }
        if let Drag::Palette { start, now, .. } | Drag::Field { start, now, .. } =
            &mut self.gestures.drag
        {
            let p = (f64::from(e.client_x()), f64::from(e.client_y()));
            if now.is_some() || (p.0 - start.0).hypot(p.1 - start.1) > 4.0 {
                *now = Some(p);
                return true;
            }
            return false;
        }
        let Some(world) = self.shown().map(|e| e.viewport.to_world(at.0, at.1)) else {
            return false;
        };
        let mut drag = std::mem::replace(&mut self.gestures.drag, Drag::None);
        let changed = match &mut drag {
            Drag::None | Drag::Palette { .. } | Drag::Field { .. } => false,
            Drag::Note {
                grab, now, moved, ..
            } => {
                *now = (world.0 - grab.0, world.1 - grab.1);
                *moved = true;
                true
            }
            Drag::NoteSize {
                origin, now, moved, ..
            } => {
                *now = (world.0 - origin.0, world.1 - origin.1);
                *moved = true;
                true
            }
            Drag::Pan { last } => {
                if let Some(editor) = self.shown_mut() {
                    editor.viewport.pan(at.0 - last.0, at.1 - last.1);
                }
                *last = at;
                true
            }
            Drag::Nodes { last, moved, edge } => {
                let (dx, dy) = (world.0 - last.0, world.1 - last.1);
                *last = world;
                *moved = true;
                let was = *edge;
                let acted = self.act(Action::MoveSelected { dx, dy });
                *edge = self
                    .editor
                    .as_ref()
                    .and_then(crate::state::Editor::splice_target);
                acted || *edge != was
            }
            Drag::Band { now, .. } | Drag::Wire { now, .. } => {
                *now = world;
                true
            }
        };
        self.gestures.drag = drag;
        // The cursor for the others, at most 20 times a second;
        // the last position is always sent (a trailing flush).
        if !self.viewing() {
            match self.sync.hold_cursor(world, now_ms()) {
                CursorStep::Send => self.send_cursor(),
                CursorStep::Schedule => {
                    let link = ctx.link().clone();
                    let flush = Closure::once_into_js(move || link.send_message(Msg::FlushCursor));
                    if let Some(w) = web_sys::window() {
                        w.set_timeout_with_callback_and_timeout_and_arguments_0(
                            flush.unchecked_ref(),
                            60,
                        )
                        .ok();
                    }
                }
                CursorStep::Wait => {}
            }
        }
        changed
    }

    pub(super) fn on_up(&mut self, e: PointerEvent) -> bool {
        let drag = std::mem::replace(&mut self.gestures.drag, Drag::None);
        let grouped = std::mem::take(&mut self.gestures.grouping);
        match drag {
            Drag::Nodes { moved, edge, .. } => {
                if moved {
                    self.act(Action::SnapSelected);
                    // Let go over a connection: the node goes into it (one
                    // undo step with the move).
                    let loose = self
                        .editor
                        .as_ref()
                        .and_then(|e| e.loose_selected())
                        .map(str::to_string);
                    if let (Some(node), Some(edge)) = (loose, edge) {
                        self.act(Action::SpliceIntoEdge { node, edge });
                    }
                }
                if grouped {
                    self.sync.group_end();
                }
                true
            }
            Drag::Band {
                start,
                now,
                additive,
            } => {
                let rect = Rect::spanning(start, now);
                self.act(Action::SelectBox { rect, additive })
            }
            Drag::Wire { from, port, .. } => {
                match hit(&e) {
                    (Some(to), _) if to != from => {
                        self.act(Action::Connect { from, port, to });
                    }
                    _ => {}
                }
                true
            }
            Drag::Palette { kind, now, .. } => {
                let Some(_) = now else {
                    return false;
                };
                self.palette.swallow_click_until = now_ms() + 400.0;
                let on_canvas = under(&e)
                    .and_then(|el| el.closest(".surface").ok().flatten())
                    .is_some();
                if on_canvas && !self.viewing() {
                    let at = self.point(&e);
                    let edge = self.edge_under(&e);
                    if let Some(editor) = &self.editor {
                        let (x, y) = editor.viewport.to_world(at.0, at.1);
                        let at = (x - NODE_W / 2.0, y - NODE_H / 2.0);
                        // On a connection: into it (when the kind can be
                        // between two nodes); elsewhere: on its own.
                        self.act(match edge.filter(|_| crate::state::fits_between(&kind)) {
                            Some(edge) => Action::InsertOnEdge { kind, at, edge },
                            None => Action::AddNode { kind, at },
                        });
                    }
                }
                true
            }
            // One edit when let go; the drag itself only moved the picture.
            Drag::Note { id, now, moved, .. } => {
                if moved {
                    self.act(Action::PlaceNote {
                        id,
                        at: Some(now),
                        size: None,
                    });
                }
                moved
            }
            Drag::NoteSize { id, now, moved, .. } => {
                if moved {
                    self.act(Action::PlaceNote {
                        id,
                        at: None,
                        size: Some(now),
                    });
                }
                moved
            }
            Drag::Field { expr, now, .. } => match now {
                Some(_) => self.drop_field(&expr, &e),
                None => false,
            },
            Drag::Pan { .. } | Drag::None => true,
        }
    }

    /// The pointer was taken away mid-gesture: nodes dragged so far stay
    /// (snapped, one undo step), anything else is dropped without effect.
    pub(super) fn on_cancel(&mut self) -> bool {
        let drag = std::mem::replace(&mut self.gestures.drag, Drag::None);
        if let Drag::Nodes { moved: true, .. } = drag {
            self.act(Action::SnapSelected);
        }
        if std::mem::take(&mut self.gestures.grouping) {
            self.sync.group_end();
        }
        !matches!(drag, Drag::None)
    }

    pub(super) fn on_wheel(&mut self, e: WheelEvent) -> bool {
        e.prevent_default();
        let at = self.point(&e);
        let Some(editor) = self.shown_mut() else {
            return false;
        };
        let factor = (-e.delta_y() * 0.0015).exp();
        editor.viewport.zoom_at(at.0, at.1, factor);
        true
    }

    pub(super) fn on_key(&mut self, ctx: &Context<Self>, e: KeyboardEvent) -> bool {
        let typing = e
            .target()
            .and_then(|t| t.dyn_into::<Element>().ok())
            .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"));
        let command = e.ctrl_key() || e.meta_key();
        let key = e.key();
        if typing && !(command && key == "Enter") {
            return false;
        }
        // The node view is open over the canvas: its keys are its own
        // (Escape closes it; Delete must not delete the node behind it).
        if self.open_view_node().is_some() {
            if key == "Escape" {
                return self.on_node_view(super::node_view::Msg::Close);
            }
            return false;
        }
        // A node reached with Tab: Enter selects it (shift: adds it).
        let focused_node = e
            .target()
            .and_then(|t| t.dyn_into::<Element>().ok())
            .filter(|el| el.tag_name() == "g")
            .and_then(|el| el.get_attribute("data-node"));
        if let (Some(id), false, "Enter") = (focused_node, command, key.as_str()) {
            e.prevent_default();
            return self.act(Action::Select {
                id,
                additive: e.shift_key(),
            });
        }
        if self.menu.is_some() && key == "Escape" {
            self.menu = None;
            focus(&self.svg);
            return true;
        }
        let arrow = match key.as_str() {
            "ArrowLeft" => Some((-20.0, 0.0)),
            "ArrowRight" => Some((20.0, 0.0)),
            "ArrowUp" => Some((0.0, -20.0)),
            "ArrowDown" => Some((0.0, 20.0)),
            _ => None,
        };
        if let Some((dx, dy)) = arrow
            && !command
            && !self.viewing()
            && self.shown().is_some_and(|ed| !ed.selected.is_empty())
        {
            e.prevent_default();
            self.act(Action::MoveSelected { dx, dy });
            return self.act(Action::SnapSelected);
        }
        let action = match (command, key.as_str()) {
            (false, "?") => {
                self.shortcuts = !self.shortcuts;
                e.prevent_default();
                return true;
            }
            (false, "Escape") if self.shortcuts => {
                self.shortcuts = false;
                return true;
            }
            (false, " ") => {
                self.gestures.space = true;
                e.prevent_default();
                return false;
            }
            (false, "Delete" | "Backspace") => Some(Action::DeleteSelected),
            (false, "Escape") if self.history.view.is_some() => {
                self.history.view = None;
                self.touch();
                return true;
            }
            (false, "Escape") if self.viewing() => {
                ctx.link().send_message(Msg::CloseRun);
                None
            }
            (false, "Escape") => Some(Action::ClearSelection),
            (false, "/") => {
                focus(&self.palette.search_box);
                None
            }
            (false, "S") if e.shift_key() && !self.viewing() => {
                e.prevent_default();
                return self.add_note_at_center();
            }
            (true, "a") => Some(Action::SelectAll),
            (true, "z" | "Z") => {
                ctx.link()
                    .send_message(if e.shift_key() { Msg::Redo } else { Msg::Undo });
                None
            }
            (true, "y") => {
                ctx.link().send_message(Msg::Redo);
                None
            }
            (true, "Enter") => {
                ctx.link().send_message(runs::Msg::Run);
                None
            }
            (true, "d") => Some(Action::DuplicateSelected),
            (true, "c") => {
                if let Some(editor) = self.shown() {
                    let text = editor.copy_selected();
                    crate::looks::copy_text(&text);
                    self.gestures.clipboard = Some(text);
                }
                None
            }
            (true, "v") => self.gestures.clipboard.clone().map(|json| {
                let (w, h) = self.size();
                let at = self
                    .editor
                    .as_ref()
                    .map_or((0.0, 0.0), |ed| ed.viewport.to_world(w / 3.0, h / 3.0));
                Action::Paste { json, at }
            }),
            (false, "f") => {
                ctx.link().send_message(Msg::Fit);
                None
            }
            _ => return false,
        };
        e.prevent_default();
        match action {
            Some(a) => self.act(a),
            None => false,
        }
    }

    pub(super) fn on_key_up(&mut self, e: KeyboardEvent) -> bool {
        if e.key() == " " {
            self.gestures.space = false;
        }
        false
    }
}

/// The "+" of an output port under the pointer: its node and port.
fn add_hit(e: &web_sys::MouseEvent) -> Option<(String, String)> {
    let target = under(e)?;
    let add = target.closest("[data-add]").ok().flatten()?;
    let node = add.closest("[data-node]").ok().flatten()?;
    Some((
        node.get_attribute("data-node")?,
        add.get_attribute("data-add")?,
    ))
}

/// What is under the pointer: a port, a node, or the background. By
/// position, not the event's target: the surface captures the pointer
/// during a drag, so every event then targets it.
pub fn hit(e: &web_sys::MouseEvent) -> (Option<String>, Option<String>) {
    let Some(target) = under(e) else {
        return (None, None);
    };
    let port = target
        .closest("[data-port]")
        .ok()
        .flatten()
        .and_then(|el| el.get_attribute("data-port"));
    let node = target
        .closest("[data-node]")
        .ok()
        .flatten()
        .and_then(|el| el.get_attribute("data-node"));
    (node, port)
}

pub(super) fn under(e: &web_sys::MouseEvent) -> Option<Element> {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.element_from_point(e.client_x() as f32, e.client_y() as f32))
        .or_else(|| e.target().and_then(|t| t.dyn_into::<Element>().ok()))
}
