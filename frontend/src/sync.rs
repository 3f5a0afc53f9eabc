//! The canvas's document sync without the browser: the workflow's Loro
//! document, this window's edits on their way to the engine (numbered,
//! then acked), undo of its own edits, and presence (the others here,
//! their pointers and selections, and this viewer's own entry).
//!
//! [`DocSync`] builds the socket messages and reads the engine's; the
//! canvas only carries them over the WebSocket, so everything here is
//! tested natively.

use std::collections::BTreeMap;

use base64::Engine as _;
use loro::VersionVector;
use serde_json::{Value, json};
use sluice_api::ws::{ClientMessage, ServerMessage};
use sluice_model::Node;
use sluice_model::doc::{DocError, Presence, WorkflowDoc, decode_version, encode_version};

use crate::state::Editor;

/// Presence entries not refreshed within this time disappear.
const PRESENCE_TIMEOUT_MS: i64 = 30_000;

/// The pointer goes to the others at most once per this many ms.
const CURSOR_EVERY_MS: f64 = 50.0;

const COLORS: &[&str] = &[
    "#e8590c", "#2b8a3e", "#5f3dc4", "#c2255c", "#1971c2", "#e67700", "#0b7285", "#862e9c",
];

/// Bytes as they travel in the socket's JSON.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| e.to_string())
}

/// Another viewer, from presence.
#[derive(Clone, Debug, PartialEq)]
pub struct Viewer {
    pub name: String,
    pub color: String,
    pub cursor: Option<(f64, f64)>,
    pub selected: Vec<String>,
}

/// What a message from the engine meant for the document and presence.
#[derive(Debug, PartialEq)]
pub enum Inbound {
    /// The document changed (`doc.update`) or is now in step with the
    /// engine (`doc.sync`, `synced`): redraw from it. `reply` holds what
    /// the engine lacks (edits made while away), to send back.
    Doc {
        synced: bool,
        reply: Option<ClientMessage>,
    },
    /// An update that could not be imported; the document is unchanged.
    Refused(String),
    /// The engine confirmed an update durable; `all` when none of this
    /// window's updates is still on its way.
    Acked { all: bool },
    /// Presence changed; `selections` when someone's selection did (the
    /// scene shows them).
    Presence { selections: bool },
}

/// What to do with a pointer position (the rate limit on cursors).
#[derive(Debug, PartialEq)]
pub enum CursorStep {
    /// Send it now ([`DocSync::cursor`]).
    Send,
    /// Too soon: call [`DocSync::flush_cursor`] in a moment.
    Schedule,
    /// Too soon, and a flush is already scheduled: it will carry this one.
    Wait,
}

/// One window's side of a workflow's document sync.
pub struct DocSync {
    workflow: String,
    doc: WorkflowDoc,
    /// Undo and redo of this window's own edits only (Loro's UndoManager
    /// skips imported operations).
    undo: loro::UndoManager,
    /// The number of the last update sent, and of the last one the engine
    /// confirmed durable.
    next_ref: u64,
    acked_ref: u64,
    presence: Presence,
    /// This viewer's presence key (its peer id in hex).
    me: String,
    /// The name others see (the engine's `GET /api/v1/me`); until it is
    /// known, `viewer <first hex digits>`.
    name: Option<String>,
    others: BTreeMap<String, Viewer>,
    last_cursor_ms: f64,
    /// The latest pointer position not yet sent (rate limit), and whether
    /// a flush is scheduled.
    pending_cursor: Option<(f64, f64)>,
    flush_scheduled: bool,
}

impl DocSync {
    /// An empty document for `workflow`, written as `peer`; it fills from
    /// the engine's `doc.sync`.
    pub fn new(workflow: &str, peer: u64) -> DocSync {
        let doc = WorkflowDoc::new();
        doc.loro().set_peer_id(peer).ok();
        let undo = loro::UndoManager::new(doc.loro());
        DocSync {
            workflow: workflow.to_string(),
            doc,
            undo,
            next_ref: 0,
            acked_ref: 0,
            presence: Presence::new(PRESENCE_TIMEOUT_MS),
            me: format!("{peer:016x}"),
            name: None,
            others: BTreeMap::new(),
            last_cursor_ms: 0.0,
            pending_cursor: None,
            flush_scheduled: false,
        }
    }

    /// The name others see from now on (the next presence carries it).
    pub fn set_name(&mut self, name: &str) {
        let name = name.trim();
        if !name.is_empty() {
            self.name = Some(name.to_string());
        }
    }

    pub fn doc(&self) -> &WorkflowDoc {
        &self.doc
    }

    /// The others looking at this workflow, by presence key.
    pub fn others(&self) -> &BTreeMap<String, Viewer> {
        &self.others
    }

    /// The first message on the socket: what this document already has.
    pub fn subscribe(&self) -> ClientMessage {
        ClientMessage::Subscribe {
            workflow: self.workflow.clone(),
            version: Some(b64(&encode_version(&self.doc.version()))),
            reference: None,
        }
    }

    /// Whether some of this window's updates are not confirmed yet.
    pub fn pending(&self) -> bool {
        self.acked_ref < self.next_ref
    }

    /// Makes the document hold `wf` (minimal operations). The version
    /// before, for [`DocSync::update`], when anything changed.
    pub fn apply(&self, wf: &sluice_model::Workflow) -> Result<Option<VersionVector>, DocError> {
        let before = self.doc.version();
        Ok(self.doc.apply(wf)?.then_some(before))
    }

    /// A drag: only `nodes`' positions into the document. The version
    /// before when anything changed; an error leaves the positions written
    /// so far (the caller then applies the whole workflow).
    pub fn set_positions<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a Node>,
    ) -> Result<Option<VersionVector>, DocError> {
        let before = self.doc.version();
        let mut changed = false;
        for node in nodes {
            let value = serde_json::to_value(node.position).unwrap_or(Value::Null);
            changed |= self.doc.set_node_field(&node.id, "position", &value)?;
        }
        Ok(changed.then_some(before))
    }

    /// The `doc.update` carrying the operations made since `before`,
    /// numbered so the engine's `doc.ack` can name it. Only call it when
    /// the message will be sent: an update never sent is never acked.
    pub fn update(&mut self, before: &VersionVector) -> Option<ClientMessage> {
        let update = self.doc.updates_since(before).ok()?;
        self.next_ref += 1;
        Some(ClientMessage::Update {
            workflow: self.workflow.clone(),
            update: b64(&update),
            reference: Some(Value::String(self.next_ref.to_string())),
        })
    }

    /// Undoes (or redoes) this window's last edit. The version before when
    /// anything changed.
    pub fn undo(&mut self, redo: bool) -> Result<Option<VersionVector>, loro::LoroError> {
        let before = self.doc.version();
        let done = if redo {
            self.undo.redo()?
        } else {
            self.undo.undo()?
        };
        Ok(done.then_some(before))
    }

    /// Starts one undo step for several edits (a drag); false if one could
    /// not be started.
    pub fn group_start(&mut self) -> bool {
        self.undo.group_start().is_ok()
    }

    pub fn group_end(&mut self) {
        self.undo.group_end();
    }

    /// The workflow from the document into `editor`, keeping its view and
    /// the selection of the nodes still there. True when this made the
    /// editor (the first full picture of the workflow).
    pub fn reload(&self, editor: &mut Option<Editor>) -> Result<bool, DocError> {
        let wf = self.doc.to_workflow()?;
        match editor {
            Some(editor) => {
                editor.wf = wf;
                let ids: std::collections::HashSet<&str> =
                    editor.wf.nodes.iter().map(|n| n.id.as_str()).collect();
                editor.selected.retain(|id| ids.contains(id.as_str()));
                Ok(false)
            }
            None => {
                *editor = Some(Editor::new(wf));
                Ok(true)
            }
        }
    }

    /// A message from the engine about documents: the document's and
    /// presence's part of it. `None` for an error (the caller shows it).
    pub fn receive(&mut self, msg: &ServerMessage) -> Option<Inbound> {
        match msg {
            ServerMessage::Update { update, .. } => Some(match self.import(update) {
                Ok(()) => Inbound::Doc {
                    synced: false,
                    reply: None,
                },
                Err(e) => Inbound::Refused(e),
            }),
            ServerMessage::Sync {
                update,
                version,
                presence,
                ..
            } => {
                if let Err(e) = self.import(update) {
                    return Some(Inbound::Refused(e));
                }
                // Send what the engine lacks (edits made while away).
                let reply = match unb64(version)
                    .and_then(|b| decode_version(&b).map_err(|e| e.to_string()))
                {
                    Ok(theirs) if theirs != self.doc.version() => self
                        .doc
                        .updates_since(&theirs)
                        .ok()
                        .map(|update| ClientMessage::Update {
                            workflow: self.workflow.clone(),
                            update: b64(&update),
                            reference: None,
                        }),
                    _ => None,
                };
                if let Ok(bytes) = unb64(presence)
                    && !bytes.is_empty()
                {
                    self.presence.apply(&bytes).ok();
                    self.read_presence();
                }
                Some(Inbound::Doc {
                    synced: true,
                    reply,
                })
            }
            ServerMessage::Ack { reference, .. } => {
                // Our refs are numbers as text (see `update`).
                if let Some(r) = reference
                    .as_ref()
                    .and_then(Value::as_str)
                    .and_then(|r| r.parse::<u64>().ok())
                {
                    self.acked_ref = self.acked_ref.max(r);
                }
                Some(Inbound::Acked {
                    all: !self.pending(),
                })
            }
            ServerMessage::Presence { update, .. } => {
                let selections = match unb64(update) {
                    Ok(bytes) => {
                        self.presence.apply(&bytes).ok();
                        self.read_presence()
                    }
                    Err(_) => false,
                };
                Some(Inbound::Presence { selections })
            }
            ServerMessage::Error { .. } => None,
        }
    }

    /// Imports a base64 Loro update; on an error the document is unchanged.
    fn import(&self, update: &str) -> Result<(), String> {
        unb64(update).and_then(|b| self.doc.import(&b).map_err(|e| e.to_string()))
    }

    /// This viewer's selection (and its last pointer position) for the
    /// others; the `presence` message to send.
    pub fn announce(&mut self, selected: Vec<String>) -> ClientMessage {
        let cursor = self
            .presence
            .states()
            .get(&self.me)
            .and_then(|v| v.get("cursor").cloned())
            .unwrap_or(Value::Null);
        self.publish(json!({"selected": selected, "cursor": cursor}))
    }

    /// The pointer moved to `at` (world coordinates): hold it, and say
    /// whether it may go now.
    pub fn hold_cursor(&mut self, at: (f64, f64), now_ms: f64) -> CursorStep {
        self.pending_cursor = Some(at);
        if now_ms - self.last_cursor_ms > CURSOR_EVERY_MS {
            CursorStep::Send
        } else if !self.flush_scheduled {
            self.flush_scheduled = true;
            CursorStep::Schedule
        } else {
            CursorStep::Wait
        }
    }

    /// The `presence` message with the held pointer position, if any.
    pub fn cursor(&mut self, selected: Vec<String>, now_ms: f64) -> Option<ClientMessage> {
        let (x, y) = self.pending_cursor.take()?;
        self.last_cursor_ms = now_ms;
        Some(self.publish(json!({"cursor": [x, y], "selected": selected})))
    }

    /// The scheduled flush: [`DocSync::cursor`], and later positions may
    /// schedule another.
    pub fn flush_cursor(&mut self, selected: Vec<String>, now_ms: f64) -> Option<ClientMessage> {
        self.flush_scheduled = false;
        self.cursor(selected, now_ms)
    }

    /// This viewer is leaving: the `presence` message that clears it.
    pub fn leave(&mut self) -> ClientMessage {
        let update = self.presence.remove(std::slice::from_ref(&self.me));
        self.presence_message(&update)
    }

    fn publish(&mut self, mut state: Value) -> ClientMessage {
        let n = u64::from_str_radix(&self.me[..self.me.len().min(8)], 16).unwrap_or(0);
        state["name"] = json!(
            self.name
                .clone()
                .unwrap_or_else(|| format!("viewer {}", &self.me[..self.me.len().min(4)]))
        );
        state["color"] = json!(COLORS[(n % COLORS.len() as u64) as usize]);
        let update = self.presence.set(&self.me, &state);
        self.presence_message(&update)
    }

    fn presence_message(&self, update: &[u8]) -> ClientMessage {
        ClientMessage::Presence {
            workflow: self.workflow.clone(),
            update: b64(update),
            reference: None,
        }
    }

    /// Others' presence, as viewers; true when someone's selection changed.
    fn read_presence(&mut self) -> bool {
        let before: Vec<(String, Vec<String>)> = self
            .others
            .iter()
            .map(|(k, v)| (k.clone(), v.selected.clone()))
            .collect();
        self.others = self
            .presence
            .states()
            .into_iter()
            .filter(|(k, _)| *k != self.me)
            .map(|(k, v)| {
                let cursor = v["cursor"]
                    .as_array()
                    .and_then(|c| Some((c.first()?.as_f64()?, c.get(1)?.as_f64()?)));
                let viewer = Viewer {
                    name: v["name"].as_str().unwrap_or("someone").to_string(),
                    color: v["color"].as_str().unwrap_or("#888").to_string(),
                    cursor,
                    selected: v["selected"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect(),
                };
                (k, viewer)
            })
            .collect();
        let after: Vec<(String, Vec<String>)> = self
            .others
            .iter()
            .map(|(k, v)| (k.clone(), v.selected.clone()))
            .collect();
        before != after
    }
}

#[cfg(test)]
mod tests {
    use sluice_model::Workflow;

    use sluice_api::ws::Frame;

    use super::*;
    use crate::state::Action;

    fn workflow() -> Workflow {
        Workflow::from_value(json!({
            "format": "sluice.workflow/v1", "id": "w", "nodes": [
                {"id": "t", "kind": "trigger.manual", "position": [0, 0]},
                {"id": "set", "kind": "data.set", "config": {"values": {"a": 1}}, "position": [280, 0]}],
            "edges": [{"from": "t", "to": "set"}]
        }))
        .unwrap()
    }

    /// The engine's side: a document holding `wf`.
    fn engine(wf: &Workflow) -> WorkflowDoc {
        WorkflowDoc::from_workflow(wf, 1).unwrap()
    }

    /// A message as the engine sends it (JSON, decoded as the canvas does).
    fn from_engine(v: Value) -> ServerMessage {
        serde_json::from_value(v).unwrap()
    }

    /// A window's message as it goes on the socket.
    fn wire(m: &ClientMessage) -> Value {
        serde_json::to_value(m).unwrap()
    }

    /// What the engine relays to the others for a window's `doc.update` or
    /// `presence`: the same message, without the sender's `ref`.
    fn relay(m: &ClientMessage) -> ServerMessage {
        let mut v = wire(m);
        v.as_object_mut().unwrap().remove("ref");
        from_engine(v)
    }

    /// The engine's answer to a window's `doc.subscribe`.
    fn sync_message(engine: &WorkflowDoc, window: &DocSync, presence: &[u8]) -> ServerMessage {
        let update = engine.updates_since(&window.doc().version()).unwrap();
        from_engine(json!({
            "type": "doc.sync", "workflow": "w", "update": b64(&update),
            "version": b64(&encode_version(&engine.version())), "presence": b64(presence)
        }))
    }

    /// A window in step with `engine`, with its editor.
    fn window(engine: &WorkflowDoc, peer: u64) -> (DocSync, Option<Editor>) {
        let mut sync = DocSync::new("w", peer);
        let msg = sync_message(engine, &sync, &[]);
        assert_eq!(
            sync.receive(&msg),
            Some(Inbound::Doc {
                synced: true,
                reply: None
            })
        );
        let mut editor = None;
        assert!(
            sync.reload(&mut editor).unwrap(),
            "the first reload makes the editor"
        );
        (sync, editor)
    }

    /// The window's edit through the editor, as the canvas does it: the
    /// `doc.update` to send.
    fn edit(sync: &mut DocSync, editor: &mut Option<Editor>, action: Action) -> ClientMessage {
        let editor = editor.as_mut().unwrap();
        editor.reduce(action).unwrap();
        let before = sync
            .apply(&editor.wf)
            .unwrap()
            .expect("the edit changes the document");
        sync.update(&before).unwrap()
    }

    fn add_node(at: (f64, f64)) -> Action {
        Action::AddNode {
            kind: "data.set".into(),
            at,
        }
    }

    #[test]
    fn the_subscription_names_the_document_version() {
        let sync = DocSync::new("w", 7);
        let msg = wire(&sync.subscribe());
        assert_eq!(msg["type"], "doc.subscribe");
        assert_eq!(msg["workflow"], "w");
        let version = decode_version(&unb64(msg["version"].as_str().unwrap()).unwrap()).unwrap();
        assert_eq!(version, sync.doc().version());
    }

    #[test]
    fn a_local_edit_reaches_another_window_as_the_same_workflow() {
        let engine = engine(&workflow());
        let (mut a, mut editor_a) = window(&engine, 10);
        let (mut b, mut editor_b) = window(&engine, 11);
        let sent = edit(&mut a, &mut editor_a, add_node((600.0, 0.0)));
        let update = wire(&sent);
        assert_eq!(update["type"], "doc.update");
        assert_eq!(update["workflow"], "w");
        assert_eq!(update["ref"], "1");

        // The engine merges it and relays it to the other window.
        engine
            .import(&unb64(update["update"].as_str().unwrap()).unwrap())
            .unwrap();
        assert_eq!(
            b.receive(&relay(&sent)),
            Some(Inbound::Doc {
                synced: false,
                reply: None
            })
        );
        assert_eq!(b.doc().to_value(), a.doc().to_value());
        assert_eq!(engine.to_value(), a.doc().to_value());

        // The other window's editor shows it, its selection kept.
        editor_b.as_mut().unwrap().selected.insert("t".into());
        assert!(!b.reload(&mut editor_b).unwrap());
        let shown = editor_b.unwrap();
        assert_eq!(shown.wf, editor_a.unwrap().wf);
        assert_eq!(shown.wf.nodes.len(), 3);
        assert!(shown.selected.contains("t"));
    }

    #[test]
    fn nothing_to_send_when_the_workflow_is_unchanged() {
        let engine = engine(&workflow());
        let (a, editor) = window(&engine, 10);
        assert_eq!(a.apply(&editor.unwrap().wf).unwrap(), None);
        assert!(!a.pending());
    }

    #[test]
    fn a_remote_deletion_drops_the_deleted_nodes_from_the_selection() {
        let engine = engine(&workflow());
        let (mut a, mut editor_a) = window(&engine, 10);
        let (mut b, mut editor_b) = window(&engine, 11);
        editor_b.as_mut().unwrap().selected = ["t".into(), "set".into()].into();
        editor_a.as_mut().unwrap().selected = ["set".into()].into();
        let update = edit(&mut a, &mut editor_a, Action::DeleteSelected);
        b.receive(&relay(&update));
        b.reload(&mut editor_b).unwrap();
        let shown = editor_b.unwrap();
        assert!(shown.wf.node("set").is_none());
        assert_eq!(shown.selected, ["t".to_string()].into());
        assert!(shown.wf.edges.is_empty(), "the edge went with its node");
    }

    #[test]
    fn acks_clear_what_is_pending() {
        let engine = engine(&workflow());
        let (mut a, mut editor) = window(&engine, 10);
        assert!(!a.pending());
        let first = wire(&edit(&mut a, &mut editor, add_node((600.0, 0.0))));
        let second = wire(&edit(&mut a, &mut editor, add_node((900.0, 0.0))));
        assert_eq!(
            (first["ref"].as_str(), second["ref"].as_str()),
            (Some("1"), Some("2"))
        );
        assert!(a.pending());

        let ack = |r: &str| from_engine(json!({"type": "doc.ack", "workflow": "w", "ref": r}));
        assert_eq!(a.receive(&ack("1")), Some(Inbound::Acked { all: false }));
        assert!(a.pending());
        assert_eq!(a.receive(&ack("2")), Some(Inbound::Acked { all: true }));
        assert!(!a.pending());
        // A late ack for an older update takes nothing back.
        assert_eq!(a.receive(&ack("1")), Some(Inbound::Acked { all: true }));
        assert!(!a.pending());
    }

    #[test]
    fn a_drag_writes_only_the_moved_positions() {
        let engine = engine(&workflow());
        let (mut a, mut editor_a) = window(&engine, 10);
        let (mut b, _) = window(&engine, 11);
        let editor = editor_a.as_mut().unwrap();
        editor.selected = ["set".into()].into();
        assert_eq!(
            editor.reduce(Action::MoveSelected { dx: 40.0, dy: 20.0 }),
            Ok(crate::state::Change::Positions)
        );
        let moved = editor
            .wf
            .nodes
            .iter()
            .filter(|n| editor.selected.contains(&n.id));
        let before = a
            .set_positions(moved)
            .unwrap()
            .expect("the position changed");
        let update = a.update(&before).unwrap();
        b.receive(&relay(&update));
        assert_eq!(b.doc().to_value(), a.doc().to_value());
        let set = b.doc().to_workflow().unwrap();
        assert_eq!(set.node("set").unwrap().position, Some([320.0, 20.0]));

        // The same positions again: nothing to send.
        let editor = editor_a.as_ref().unwrap();
        let same = editor
            .wf
            .nodes
            .iter()
            .filter(|n| editor.selected.contains(&n.id));
        assert_eq!(a.set_positions(same).unwrap(), None);
    }

    #[test]
    fn a_bad_update_is_refused_and_changes_nothing() {
        let engine = engine(&workflow());
        let (mut a, _) = window(&engine, 10);
        let before = a.doc().to_value();
        let garbage = from_engine(
            json!({"type": "doc.update", "workflow": "w", "update": b64(b"not a loro update")}),
        );
        assert!(matches!(a.receive(&garbage), Some(Inbound::Refused(_))));
        let not_base64 =
            from_engine(json!({"type": "doc.update", "workflow": "w", "update": "%%%"}));
        assert!(matches!(a.receive(&not_base64), Some(Inbound::Refused(_))));
        assert_eq!(a.doc().to_value(), before);
    }

    #[test]
    fn the_sync_answer_carries_the_edits_made_while_away() {
        let engine = engine(&workflow());
        let (mut a, mut editor) = window(&engine, 10);
        // Edited while the socket was down: the update was never sent.
        let editor = editor.as_mut().unwrap();
        editor.reduce(add_node((600.0, 0.0))).unwrap();
        assert!(a.apply(&editor.wf).unwrap().is_some());

        // Reconnected: the engine's version lacks the edit; the window
        // sends it back, unnumbered (nobody waits for its ack).
        let Some(Inbound::Doc {
            synced: true,
            reply: Some(reply),
        }) = a.receive(&sync_message(&engine, &a, &[]))
        else {
            panic!("the engine lacks the edit: a reply is due");
        };
        let reply = wire(&reply);
        assert_eq!(reply["type"], "doc.update");
        assert!(reply.get("ref").is_none());
        assert!(!a.pending());
        engine
            .import(&unb64(reply["update"].as_str().unwrap()).unwrap())
            .unwrap();
        assert_eq!(engine.to_value(), a.doc().to_value());
    }

    #[test]
    fn undo_takes_back_only_this_windows_edits() {
        let engine = engine(&workflow());
        let (mut a, mut editor_a) = window(&engine, 10);
        let (mut b, mut editor_b) = window(&engine, 11);
        let mine = edit(&mut a, &mut editor_a, add_node((600.0, 0.0)));
        // Another kind: two windows adding the same kind at once pick the
        // same fresh id, and the two nodes merge into one.
        let theirs = edit(
            &mut b,
            &mut editor_b,
            Action::AddNode {
                kind: "flow.if".into(),
                at: (0.0, 300.0),
            },
        );
        b.receive(&relay(&mine));
        a.receive(&relay(&theirs));
        a.reload(&mut editor_a).unwrap();
        assert_eq!(editor_a.as_ref().unwrap().wf.nodes.len(), 4);

        let before = a.undo(false).unwrap().expect("there is an edit to undo");
        a.reload(&mut editor_a).unwrap();
        let ids: Vec<String> = editor_a
            .as_ref()
            .unwrap()
            .wf
            .nodes
            .iter()
            .map(|n| n.id.clone())
            .collect();
        let b_ids: Vec<String> = editor_b
            .as_ref()
            .unwrap()
            .wf
            .nodes
            .iter()
            .map(|n| n.id.clone())
            .collect();
        assert_eq!(ids.len(), 3, "{ids:?}");
        assert!(
            ids.contains(b_ids.last().unwrap()),
            "the other window's node stays"
        );

        // The undo is an edit like any other: it reaches the others.
        let undone = a.update(&before).unwrap();
        b.receive(&relay(&undone));
        assert_eq!(b.doc().to_value(), a.doc().to_value());

        assert!(a.undo(true).unwrap().is_some(), "redo");
        a.reload(&mut editor_a).unwrap();
        assert_eq!(editor_a.unwrap().wf.nodes.len(), 4);
    }

    #[test]
    fn presence_shows_the_others_and_their_selections() {
        let engine = engine(&workflow());
        let (mut a, _) = window(&engine, 0xabcd_0000_0000_0001);
        let (mut b, _) = window(&engine, 0x1234_0000_0000_0002);

        // Loro keeps a presence entry's newest write by its wall-clock
        // time in ms: a second write within the same ms loses (a pointer
        // moves far less often in a browser).
        let tick = || std::thread::sleep(std::time::Duration::from_millis(3));
        let hello = a.announce(vec!["t".into()]);
        assert_eq!(wire(&hello)["type"], "presence");
        assert_eq!(
            b.receive(&relay(&hello)),
            Some(Inbound::Presence { selections: true })
        );
        let seen = &b.others()["abcd000000000001"];
        assert_eq!(seen.name, "viewer abcd");
        assert_eq!(seen.selected, vec!["t".to_string()]);
        assert_eq!(seen.cursor, None);
        assert!(a.others().is_empty(), "a viewer is not one of the others");
        // Once the engine says who this is, others see the name.
        tick();
        a.set_name("  Ada Lovelace ");
        assert!(b.receive(&relay(&a.announce(vec!["t".into()]))).is_some());
        assert_eq!(b.others()["abcd000000000001"].name, "Ada Lovelace");

        // Only the pointer moved: the scene need not change.
        tick();
        assert_eq!(a.hold_cursor((5.0, 6.0), 1_000.0), CursorStep::Send);
        let moved = a.cursor(vec!["t".into()], 1_000.0).unwrap();
        assert_eq!(
            b.receive(&relay(&moved)),
            Some(Inbound::Presence { selections: false })
        );
        assert_eq!(b.others()["abcd000000000001"].cursor, Some((5.0, 6.0)));

        // An announcement keeps the last pointer position.
        tick();
        b.receive(&relay(&a.announce(vec![])));
        let seen = &b.others()["abcd000000000001"];
        assert_eq!((seen.cursor, seen.selected.len()), (Some((5.0, 6.0)), 0));

        // A window that subscribes later learns it from the sync answer.
        let mut c = DocSync::new("w", 3);
        let all = {
            let mut engine_presence = Presence::new(PRESENCE_TIMEOUT_MS);
            engine_presence
                .apply(&unb64(wire(&hello)["update"].as_str().unwrap()).unwrap())
                .unwrap();
            engine_presence.encode_all()
        };
        c.receive(&sync_message(&engine, &c, &all));
        assert_eq!(
            c.others()["abcd000000000001"].selected,
            vec!["t".to_string()]
        );

        tick();
        assert_eq!(
            b.receive(&relay(&a.leave())),
            Some(Inbound::Presence { selections: true })
        );
        assert!(b.others().is_empty());
    }

    #[test]
    fn the_pointer_goes_out_at_most_every_50_ms_and_the_last_one_always() {
        let mut a = DocSync::new("w", 10);
        assert_eq!(a.cursor(vec![], 0.0), None, "nothing held");
        assert_eq!(a.hold_cursor((1.0, 1.0), 1_000.0), CursorStep::Send);
        assert!(a.cursor(vec![], 1_000.0).is_some());
        assert_eq!(a.hold_cursor((2.0, 2.0), 1_020.0), CursorStep::Schedule);
        assert_eq!(a.hold_cursor((3.0, 3.0), 1_030.0), CursorStep::Wait);

        let mut b = DocSync::new("w", 11);
        let flushed = a.flush_cursor(vec![], 1_080.0).unwrap();
        b.receive(&relay(&flushed));
        let seen = b.others().values().next().unwrap();
        assert_eq!(seen.cursor, Some((3.0, 3.0)), "the last position");
        assert_eq!(a.flush_cursor(vec![], 1_090.0), None, "sent once");
        // The flush is over: a position too soon schedules another.
        assert_eq!(a.hold_cursor((4.0, 4.0), 1_100.0), CursorStep::Schedule);
    }

    #[test]
    fn other_messages_are_not_for_the_document() {
        let mut a = DocSync::new("w", 10);
        // Run events are not document messages at all: the canvas never
        // hands them to the document.
        let run_started = json!({"type": "run_started", "run": "r", "workflow": "w", "at_us": 1,
            "trigger": "t"});
        let log = json!({"type": "log", "run": "r", "workflow": "w", "at_us": 2, "node": "set",
            "lineage": "", "level": "info", "message": "hi"});
        for event in [run_started, log] {
            let frame: Frame = serde_json::from_value(event).unwrap();
            assert!(matches!(frame, Frame::Run(_)), "{frame:?}");
        }
        let error = from_engine(json!({"type": "error", "message": "no such workflow"}));
        assert_eq!(a.receive(&error), None);
        assert_eq!(a.doc().to_value(), DocSync::new("w", 10).doc().to_value());
    }
}
