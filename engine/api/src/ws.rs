//! Messages on `GET /api/v1/ws` besides run events: document sync and
//! presence (DESIGN §6). Binary payloads (Loro updates, version vectors,
//! ephemeral-store updates) travel as base64 text. `ref` is the client's
//! token for an acknowledgement or error (any JSON value, echoed as sent).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::LiveEvent;

/// What a client sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum ClientMessage {
    /// Follow a workflow's document: the server answers with
    /// [`ServerMessage::Sync`] holding everything the client lacks.
    #[serde(rename = "doc.subscribe")]
    Subscribe {
        workflow: String,
        /// The client's Loro version vector (empty or absent: it has nothing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<Value>,
    },
    #[serde(rename = "doc.unsubscribe")]
    Unsubscribe {
        workflow: String,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<Value>,
    },
    /// Operations the client made: merged, persisted, relayed to the other
    /// subscribers, and acknowledged with [`ServerMessage::Ack`] once durable.
    #[serde(rename = "doc.update")]
    Update {
        workflow: String,
        update: String,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<Value>,
    },
    /// The client's presence (cursor, selection, name).
    #[serde(rename = "presence")]
    Presence {
        workflow: String,
        update: String,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<Value>,
    },
}

impl ClientMessage {
    /// The `ref` the client gave, to echo in the answer.
    pub fn reference(&self) -> Option<&Value> {
        match self {
            ClientMessage::Subscribe { reference, .. }
            | ClientMessage::Unsubscribe { reference, .. }
            | ClientMessage::Update { reference, .. }
            | ClientMessage::Presence { reference, .. } => reference.as_ref(),
        }
    }
}

/// What the server sends about documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type")]
pub enum ServerMessage {
    /// The answer to a subscribe (and, after the client fell behind, a
    /// fresh start): what the client lacks, the server's version vector
    /// (the client answers with a `doc.update` of what the server lacks)
    /// and everyone's presence.
    #[serde(rename = "doc.sync")]
    Sync {
        workflow: String,
        update: String,
        version: String,
        presence: String,
    },
    /// Another client's (or the engine's) operations.
    #[serde(rename = "doc.update")]
    Update { workflow: String, update: String },
    /// The client's update `ref` is durable.
    #[serde(rename = "doc.ack")]
    Ack {
        workflow: String,
        #[serde(rename = "ref", default)]
        reference: Option<Value>,
    },
    #[serde(rename = "presence")]
    Presence { workflow: String, update: String },
    /// A message that changed nothing, and why.
    #[serde(rename = "error")]
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workflow: Option<String>,
        message: String,
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<Value>,
    },
}

/// Any frame the server sends: a document message or a run event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Frame {
    Doc(ServerMessage),
    Run(LiveEvent),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_tell_documents_from_run_events() {
        let ack: Frame =
            serde_json::from_value(json!({"type": "doc.ack", "workflow": "w", "ref": 3})).unwrap();
        assert_eq!(
            ack,
            Frame::Doc(ServerMessage::Ack {
                workflow: "w".into(),
                reference: Some(json!(3))
            })
        );
        let run: Frame = serde_json::from_value(json!({"type": "run_started", "run": "r",
            "workflow": "w", "at_us": 1, "trigger": "t"}))
        .unwrap();
        assert!(matches!(run, Frame::Run(_)), "{run:?}");
    }

    #[test]
    fn client_messages_keep_their_wire_names() {
        let m = ClientMessage::Update {
            workflow: "w".into(),
            update: "AA==".into(),
            reference: Some(json!("1")),
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"type": "doc.update", "workflow": "w", "update": "AA==", "ref": "1"})
        );
    }
}
