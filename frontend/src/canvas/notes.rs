//! Sticky notes on the canvas: Markdown at a place, behind the nodes
//! (`notes` in the file; see [`crate::state::Note`]). Added from the
//! canvas's right-click menu or Shift + S; a double click writes in one;
//! dragged by any part to move, by the corner to resize; deleted by its ×.

use wasm_bindgen::JsCast;
use web_sys::{Element, PointerEvent};
use yew::prelude::*;

use super::Canvas;
use super::gestures::Drag;
use crate::state::{Action, Editor, GRID, NOTE_SIZE};

pub enum Msg {
    /// Pressed: on the note (move) or on its corner (resize).
    Down(String, PointerEvent, bool),
    /// Start (or stop, with `None`) writing in a note.
    Edit(Option<String>),
    Text(String, String),
    Delete(String),
    /// A new note here (world point), written in at once.
    Add((f64, f64)),
    /// Moved by the keyboard (an arrow: one grid step).
    Nudge(String, f64, f64),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Note(msg)
    }
}

/// A new note's id: random, so two people adding notes at once never
/// take the same one.
fn new_id() -> String {
    let r = (js_sys::Math::random() * f64::from(u32::MAX)) as u32;
    let t = js_sys::Date::now() as u64;
    format!("note-{t:x}{r:08x}")
}

impl Canvas {
    pub(super) fn on_note(&mut self, msg: Msg) -> bool {
        if self.read_only() {
            return false;
        }
        match msg {
            Msg::Down(id, e, resize) => {
                if e.button() != 0 || self.editing_note.as_ref() == Some(&id) {
                    return false;
                }
                let Some(editor) = &self.editor else {
                    return false;
                };
                let Some(note) = editor.notes().into_iter().find(|n| n.id == id) else {
                    return false;
                };
                if let Some(el) = e.target().and_then(|t| t.dyn_into::<Element>().ok()) {
                    el.set_pointer_capture(e.pointer_id()).ok();
                }
                let at = self.point(&e);
                let world = editor.viewport.to_world(at.0, at.1);
                self.gestures.drag = if resize {
                    Drag::NoteSize {
                        id,
                        origin: (note.x, note.y),
                        now: (note.w, note.h),
                        moved: false,
                    }
                } else {
                    Drag::Note {
                        id,
                        grab: (world.0 - note.x, world.1 - note.y),
                        now: (note.x, note.y),
                        moved: false,
                    }
                };
                false
            }
            Msg::Edit(id) => {
                let changed = self.editing_note != id;
                self.focus_note = id.is_some();
                self.editing_note = id;
                changed
            }
            Msg::Text(id, text) => self.act(Action::SetNote { id, text }),
            Msg::Delete(id) => {
                if self.editing_note.as_ref() == Some(&id) {
                    self.editing_note = None;
                }
                self.act(Action::DeleteNote { id })
            }
            Msg::Nudge(id, dx, dy) => {
                let Some(n) = self
                    .editor
                    .as_ref()
                    .and_then(|e| e.notes().into_iter().find(|n| n.id == id))
                else {
                    return false;
                };
                self.act(Action::PlaceNote {
                    id,
                    at: Some((n.x + dx, n.y + dy)),
                    size: None,
                })
            }
            Msg::Add(at) => {
                let id = new_id();
                self.act(Action::AddNote {
                    id: id.clone(),
                    at,
                    text: String::new(),
                });
                // Written in only when it was made.
                if self
                    .editor
                    .as_ref()
                    .is_some_and(|e| e.notes().iter().any(|n| n.id == id))
                {
                    self.editing_note = Some(id);
                    self.focus_note = true;
                }
                true
            }
        }
    }

    /// What a note being written in or dragged refers to, when the note is
    /// gone (a peer deleted it, a version was restored): forgotten.
    pub(super) fn forget_missing_notes(&mut self) {
        let Some(editor) = &self.editor else {
            return;
        };
        let notes = editor.notes();
        let exists = |id: &String| notes.iter().any(|n| &n.id == id);
        if self.editing_note.as_ref().is_some_and(|id| !exists(id)) {
            self.editing_note = None;
        }
        if let Drag::Note { id, .. } | Drag::NoteSize { id, .. } = &self.gestures.drag
            && !exists(id)
        {
            self.gestures.drag = Drag::None;
        }
    }

    /// A new note in the middle of the view.
    pub(super) fn add_note_at_center(&mut self) -> bool {
        let (w, h) = self.size();
        let Some(editor) = &self.editor else {
            return false;
        };
        let at = editor
            .viewport
            .to_world(w / 2.0 - NOTE_SIZE.0 / 2.0, h / 2.0 - NOTE_SIZE.1 / 2.0);
        self.on_note(Msg::Add(at))
    }

    /// The notes, in world units (inside the canvas's world group, before
    /// the nodes, so nodes stay on top).
    pub(super) fn notes_view(&self, ctx: &Context<Self>, editor: &Editor) -> Html {
        let notes = editor.notes();
        if notes.is_empty() {
            return Html::default();
        }
        let link = ctx.link();
        let read_only = self.read_only();
        html! {
            <g class="notes">{ for notes.iter().map(|n| {
                let (mut x, mut y, mut w, mut h) = (n.x, n.y, n.w, n.h);
                match &self.gestures.drag {
                    Drag::Note { id, now, .. } if *id == n.id => (x, y) = *now,
                    Drag::NoteSize { id, now, .. } if *id == n.id => {
                        (w, h) = (now.0.max(crate::state::NOTE_MIN.0), now.1.max(crate::state::NOTE_MIN.1));
                    }
                    _ => {}
                }
                let id = n.id.clone();
                let editing = self.editing_note.as_ref() == Some(&n.id) && !read_only;
                let body = if editing {
                    let i1 = id.clone();
                    html! {
                        <textarea class="sticky-text" aria-label="Note (Markdown)" ref={self.note_ref.clone()}
                            value={n.text.clone()}
                            onpointerdown={Callback::from(|e: PointerEvent| e.stop_propagation())}
                            oninput={link.callback(move |e: InputEvent| {
                                let a: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
                                Msg::Text(i1.clone(), a.value())
                            })}
                            onblur={link.callback(|_| Msg::Edit(None))}
                            onkeydown={link.batch_callback(|e: KeyboardEvent| (e.key() == "Escape").then(|| {
                                e.stop_propagation();
                                super::Msg::from(Msg::Edit(None))
                            }))} />
                    }
                } else if n.text.trim().is_empty() {
                    html! { <div class="sticky-body empty">{ if read_only { "" } else { "Double click to write (Markdown)" } }</div> }
                } else {
                    html! { <div class="sticky-body">{ markdown(&n.text) }</div> }
                };
                let (down, resize, edit, delete, keys) =
                    (id.clone(), id.clone(), id.clone(), id.clone(), id.clone());
                // From the keyboard: Enter writes, arrows move, Delete deletes.
                let onkeydown = link.batch_callback(move |e: KeyboardEvent| {
                    let msg = match e.key().as_str() {
                        "Enter" => Msg::Edit(Some(keys.clone())),
                        "ArrowLeft" => Msg::Nudge(keys.clone(), -GRID, 0.0),
                        "ArrowRight" => Msg::Nudge(keys.clone(), GRID, 0.0),
                        "ArrowUp" => Msg::Nudge(keys.clone(), 0.0, -GRID),
                        "ArrowDown" => Msg::Nudge(keys.clone(), 0.0, GRID),
                        "Delete" | "Backspace" => Msg::Delete(keys.clone()),
                        _ => return None,
                    };
                    // Only the note's own keys: the canvas must not also act.
                    let on_note = e
                        .target()
                        .and_then(|t| t.dyn_into::<Element>().ok())
                        .and_then(|t| t.get_attribute("class"))
                        .is_some_and(|c| c.split_whitespace().any(|c| c == "sticky"));
                    if !on_note {
                        return None;
                    }
                    e.prevent_default();
                    e.stop_propagation();
                    Some(super::Msg::from(msg))
                });
                let first_line = n.text.lines().next().unwrap_or_default().trim_start_matches('#').trim().to_string();
                html! {
                    <foreignObject key={id.clone()} class="note-fo" x={x.to_string()} y={y.to_string()}
                        width={w.to_string()} height={h.to_string()} data-note={id.clone()}>
                        <div xmlns="http://www.w3.org/1999/xhtml" class={classes!("sticky", editing.then_some("editing"))}
                            data-note={id.clone()} tabindex={if read_only { "-1" } else { "0" }} role="note"
                            aria-label={if first_line.is_empty() { "Sticky note".to_string() } else { format!("Sticky note: {first_line}") }}
                            onkeydown={(!read_only).then_some(onkeydown)}
                            // Stopped here, as it happens: the canvas must not
                            // start a selection band under the note.
                            onpointerdown={link.callback(move |e: PointerEvent| { e.stop_propagation(); Msg::Down(down.clone(), e, false) })}
                            ondblclick={link.callback(move |e: MouseEvent| { e.stop_propagation(); Msg::Edit(Some(edit.clone())) })}>
                            if !read_only {
                                <button type="button" class="sticky-delete" aria-label="Delete note" title="Delete note"
                                    onpointerdown={Callback::from(|e: PointerEvent| e.stop_propagation())}
                                    onclick={link.callback(move |_| Msg::Delete(delete.clone()))}>{ "×" }</button>
                            }
                            { body }
                            if !read_only {
                                <div class="sticky-resize" aria-hidden="true"
                                    onpointerdown={link.callback(move |e: PointerEvent| { e.stop_propagation(); Msg::Down(resize.clone(), e, true) })}></div>
                            }
                        </div>
                    </foreignObject>
                }
            }) }</g>
        }
    }
}

/// A note's Markdown as blocks: `#` headings, runs of `-` or `*` items,
/// and paragraphs (split by blank lines, line breaks kept); inline code,
/// bold, emphasis and links within (through [`crate::looks::rich`]).
fn markdown(text: &str) -> Html {
    enum Block<'a> {
        Heading(&'a str),
        List(Vec<&'a str>),
        Para(Vec<&'a str>),
    }
    let mut blocks: Vec<Block> = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.is_empty() {
            blocks.push(Block::Para(Vec::new()));
        } else if let Some(h) = t.strip_prefix('#') {
            blocks.push(Block::Heading(h.trim_start_matches('#').trim()));
        } else if let Some(item) = t.strip_prefix("- ").or_else(|| t.strip_prefix("* ")) {
            match blocks.last_mut() {
                Some(Block::List(items)) => items.push(item),
                _ => blocks.push(Block::List(vec![item])),
            }
        } else {
            match blocks.last_mut() {
                Some(Block::Para(lines)) => lines.push(line),
                _ => blocks.push(Block::Para(vec![line])),
            }
        }
    }
    html! {
        { for blocks.iter().map(|b| match b {
            Block::Heading(h) => html! { <p class="heading">{ crate::looks::rich(h) }</p> },
            Block::List(items) => html! { <ul>{ for items.iter().map(|i| html! { <li>{ crate::looks::rich(i) }</li> }) }</ul> },
            Block::Para(lines) if lines.is_empty() => Html::default(),
            Block::Para(lines) => html! { <p>{ for lines.iter().enumerate().map(|(j, l)| html! {
                <>{ if j > 0 { html! { <br /> } } else { Html::default() } }{ crate::looks::rich(l) }</>
            }) }</p> },
        }) }
    }
}
