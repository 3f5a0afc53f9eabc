//! Sharing workflows with peers (DESIGN §6, docs/peers.md): the bodies of
//! `/api/v1/workflows/{id}/shares`, `/api/v1/shares/{id}`,
//! `/api/v1/workflows/{id}/peers/{peer}` and `/api/v1/peers`.

use serde::{Deserialize, Serialize};

/// What a peer may do with a shared workflow. Enforced by the sharer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sees the workflow and every edit, live; its own edits are refused.
    Viewer,
    /// Edits the draft (never what runs on the sharer's machine).
    Editor,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "editor" => Some(Role::Editor),
            _ => None,
        }
    }
}

/// The body of `POST /api/v1/workflows/{id}/shares`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewShare {
    pub role: Role,
    /// The ticket stops letting new peers in after this many seconds
    /// (peers that joined stay until revoked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
    /// How many peers may join with the ticket (default: any number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u32>,
}

/// The answer to creating a share: hand `ticket` (or `link`) to the peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareCreated {
    pub id: String,
    /// One line of text: this engine's peer id and addresses, the workflow,
    /// the share, its secret and the role.
    pub ticket: String,
    /// `sluice://join/<ticket>`.
    pub link: String,
}

/// A share as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShareEntry {
    pub id: String,
    pub role: Role,
    pub created_at_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_us: Option<i64>,
    /// Joins left (absent: any number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_us: Option<i64>,
}

/// A peer that joined a shared workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PeerEntry {
    /// Its peer id (public key).
    pub peer: String,
    /// The name it gave (its `[user] name`).
    pub name: String,
    pub role: Role,
    /// The share it joined through.
    pub share: String,
    pub joined_at_us: i64,
    pub last_seen_us: i64,
    /// Whether it is connected now.
    pub connected: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_at_us: Option<i64>,
}

/// The answer to `GET /api/v1/workflows/{id}/shares`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Shares {
    pub shares: Vec<ShareEntry>,
    pub peers: Vec<PeerEntry>,
}

/// The body of `POST /api/v1/peers/join`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Join {
    /// A ticket, or a `sluice://join/<ticket>` link.
    pub ticket: String,
}

/// The answer to joining: the workflow's id on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Joined {
    pub workflow: String,
    /// Who shared it.
    pub host_name: String,
    pub role: Role,
}

/// What a ticket shares (`POST /api/v1/peers/tickets`), read without
/// joining or contacting anyone: what to ask before joining.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TicketInfo {
    /// The sharer's peer id and name.
    pub host: String,
    pub host_name: String,
    pub workflow: String,
    pub role: Role,
    /// The addresses the ticket gives for the sharer.
    pub addrs: Vec<String>,
    /// The local workflow, when this install joined it already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<String>,
}

/// Where a joined workflow's link to its sharer stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// Live: edits flow both ways.
    Connected,
    /// Not connected; trying again (edits made meanwhile wait and merge).
    Reconnecting,
    /// The sharer refused this install (revoked or removed): no more tries.
    Refused,
}

/// A workflow this install joined from a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkEntry {
    pub workflow: String,
    /// The sharer's peer id and name.
    pub host: String,
    pub host_name: String,
    pub role: Role,
    pub state: LinkState,
    /// Why it is not connected (the last error, or the refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Local edits the sharer has not acknowledged yet.
    pub waiting: u32,
}

/// The answer to `GET /api/v1/peers`: this install as a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PeersInfo {
    /// Whether peers are on (`[peers] enabled` in config.toml).
    pub enabled: bool,
    /// This install's peer id (absent when peers are off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// The addresses a ticket hands out.
    pub addrs: Vec<String>,
    pub links: Vec<LinkEntry>,
}
