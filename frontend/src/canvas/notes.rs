//! Sticky notes on the canvas: Markdown at a place, behind the nodes
//! (`notes` in the file; see [`crate::state::Note`]). Added from the
//! canvas's right-click menu or Shift + S; a double click writes in one;
//! dragged by any part to move, by the corner to resize; deleted by its ×.

use wasm_bindgen::JsCast;
use web_sys::{Element, PointerEvent};
use yew::prelude::*;

use super::Canvas;
use super::gestures::Drag;
use crate::state::{Action, Editor, NOTE_SIZE};

pub enum Msg {
    /// Pressed: on the note (move) or on its corner (resize).
    Down(usize, PointerEvent, bool),
    /// Start (or stop, with `None`) writing in a note.
    Edit(Option<usize>),
    Text(usize, String),
    Delete(usize),
    /// A new note here (world point), written in at once.
    Add((f64, f64)),
}

impl From<Msg> for super::Msg {
    fn from(msg: Msg) -> super::Msg {
        super::Msg::Note(msg)
    }
}

impl Canvas {
    pub(super) fn on_note(&mut self, msg: Msg) -> bool {
        if self.viewing() {
            return false;
        }
        match msg {
            Msg::Down(index, e, resize) => {
                if e.button() != 0 || self.editing_note == Some(index) {
                    return false;
                }
                let Some(editor) = &self.editor else {
                    return false;
                };
                let Some(note) = editor.notes().get(index).cloned() else {
                    return false;
                };
                if let Some(el) = e.target().and_then(|t| t.dyn_into::<Element>().ok()) {
                    el.set_pointer_capture(e.pointer_id()).ok();
                }
                let at = self.point(&e);
                let world = editor.viewport.to_world(at.0, at.1);
                self.gestures.drag = if resize {
                    Drag::NoteSize {
                        index,
                        origin: (note.x, note.y),
                        now: (note.w, note.h),
                        moved: false,
                    }
                } else {
                    Drag::Note {
                        index,
                        grab: (world.0 - note.x, world.1 - note.y),
                        now: (note.x, note.y),
                        moved: false,
                    }
                };
                false
            }
            Msg::Edit(index) => {
                let changed = self.editing_note != index;
                self.editing_note = index;
                self.focus_note = index.is_some();
                changed
            }
            Msg::Text(index, text) => self.act(Action::SetNote { index, text }),
            Msg::Delete(index) => {
                if self.editing_note == Some(index) {
                    self.editing_note = None;
                }
                self.act(Action::DeleteNote { index })
            }
            Msg::Add(at) => {
                self.act(Action::AddNote {
                    at,
                    text: String::new(),
                });
                let count = self.editor.as_ref().map_or(0, |e| e.notes().len());
                self.editing_note = count.checked_sub(1);
                self.focus_note = true;
                true
            }
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
        let viewing = self.viewing();
        html! {
            <g class="notes">{ for notes.iter().enumerate().map(|(i, n)| {
                let (mut x, mut y, mut w, mut h) = (n.x, n.y, n.w, n.h);
                match &self.gestures.drag {
                    Drag::Note { index, now, .. } if *index == i => (x, y) = *now,
                    Drag::NoteSize { index, now, .. } if *index == i => {
                        (w, h) = (now.0.max(crate::state::NOTE_MIN.0), now.1.max(crate::state::NOTE_MIN.1));
                    }
                    _ => {}
                }
                let editing = self.editing_note == Some(i) && !viewing;
                let body = if editing {
                    html! {
                        <textarea class="sticky-text" aria-label="Note (Markdown)" ref={self.note_ref.clone()}
                            value={n.text.clone()}
                            onpointerdown={Callback::from(|e: PointerEvent| e.stop_propagation())}
                            oninput={link.callback(move |e: InputEvent| {
                                let a: web_sys::HtmlTextAreaElement = e.target_unchecked_into();
                                Msg::Text(i, a.value())
                            })}
                            onblur={link.callback(|_| Msg::Edit(None))}
                            onkeydown={link.batch_callback(|e: KeyboardEvent| (e.key() == "Escape").then(|| {
                                e.stop_propagation();
                                super::Msg::from(Msg::Edit(None))
                            }))} />
                    }
                } else if n.text.trim().is_empty() {
                    html! { <div class="sticky-body empty">{ "Double click to write (Markdown)" }</div> }
                } else {
                    html! { <div class="sticky-body">{ markdown(&n.text) }</div> }
                };
                html! {
                    <foreignObject key={i} class="note-fo" x={x.to_string()} y={y.to_string()}
                        width={w.to_string()} height={h.to_string()} data-note={i.to_string()}>
                        <div xmlns="http://www.w3.org/1999/xhtml" class={classes!("sticky", editing.then_some("editing"))}
                            data-note={i.to_string()}
                            // Stopped here, as it happens: the canvas must not
                            // start a selection band under the note.
                            onpointerdown={link.callback(move |e: PointerEvent| { e.stop_propagation(); Msg::Down(i, e, false) })}
                            ondblclick={link.callback(move |e: MouseEvent| { e.stop_propagation(); Msg::Edit(Some(i)) })}>
                            if !viewing {
                                <button type="button" class="sticky-delete" aria-label="Delete note" title="Delete note"
                                    onpointerdown={Callback::from(|e: PointerEvent| e.stop_propagation())}
                                    onclick={link.callback(move |_| Msg::Delete(i))}>{ "×" }</button>
                            }
                            { body }
                            if !viewing {
                                <div class="sticky-resize" aria-hidden="true"
                                    onpointerdown={link.callback(move |e: PointerEvent| { e.stop_propagation(); Msg::Down(i, e, true) })}></div>
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
