//! Stored workflows, their versions and credentials as lists show them.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// An entry of `GET /api/v1/workflows`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowEntry {
    pub id: String,
    pub name: String,
    /// When the draft last changed: microseconds since the Unix epoch.
    pub updated_at_us: i64,
    /// The draft's document version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_version: Option<String>,
    /// Whether a version is published (what triggers and runs by id run).
    #[serde(default)]
    pub published: bool,
    /// The published document version, and when it was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at_us: Option<i64>,
    /// Its newest run (drafts' runs included), if it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Who has it open in an editor now (their names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub editing: Vec<String>,
}

/// A workflow's newest run, as its list entry shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LastRun {
    pub id: String,
    pub status: crate::RunStatus,
    pub created_at_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_us: Option<i64>,
}

/// An entry of `GET /api/v1/credentials`: never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CredentialEntry {
    pub name: String,
    /// `bearer`, `basic`, `header`, `query`, `smtp`, `openai`, `postgres`
    /// or `mysql`.
    pub kind: String,
    pub updated_at_us: i64,
    /// The nodes that name it, in the workflows' drafts and published
    /// versions.
    #[serde(default)]
    pub used_by: Vec<CredentialUse>,
}

/// A node that names a credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CredentialUse {
    pub workflow: String,
    pub node: String,
    /// The node's kind (`http.request`, `email.send`…).
    pub kind: String,
    /// The draft names it.
    pub draft: bool,
    /// The published version names it (deleting the credential would
    /// fail its runs).
    pub published: bool,
}

/// The body of `POST /api/v1/credentials/{name}/test` (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TestCredential {
    /// For `bearer`, `basic`, `header` and `query` credentials: the address
    /// to call with it (`GET`). Default: the URL of an `http.request` node
    /// that uses it, when one is written out (not a template).
    #[serde(default)]
    pub url: Option<String>,
}

/// The answer to `POST /api/v1/credentials/{name}/test`: whether the
/// server it is for took it. Never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CredentialTested {
    pub name: String,
    pub kind: String,
    pub ok: bool,
    /// What was tried and what the server said (secrets masked).
    pub message: String,
    pub duration_us: i64,
}

/// The body of `POST /api/v1/credentials`: a new credential, refused
/// (409) when the name is taken, where `PUT` would replace it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewCredential {
    pub name: String,
    pub kind: String,
    /// The secret, in the shape of its kind; write-only.
    pub value: serde_json::Value,
}

impl std::fmt::Debug for NewCredential {
    // Never the value: it is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewCredential")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The body of `PATCH /api/v1/credentials/{name}`: fields to change, the
/// others kept (an editor need not know the secrets to change the host).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchCredential {
    /// Fields of the value to set; `null` removes an optional one.
    pub value: serde_json::Map<String, serde_json::Value>,
}

impl std::fmt::Debug for PatchCredential {
    // Never the values: they are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchCredential")
            .field("fields", &self.value.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// An entry of `GET /api/v1/workflows/{id}/versions`: one author's burst of
/// edits, with what it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VersionEntry {
    /// The workflow as of the end of this version (`counter@peer,…`).
    pub version: String,
    /// The version it started from.
    pub parent: String,
    /// Who made it: Loro peer ids.
    pub author: String,
    /// Where it came from: `api`, `import`, `file`, `restore <version>`;
    /// null for edits merged from editors and peers.
    pub message: Option<String>,
    /// Microseconds since the Unix epoch.
    pub started_at_us: i64,
    pub at_us: i64,
    /// Edits folded into it.
    pub edits: i64,
    /// One line: "added fetch; changed tag (config.url)".
    pub summary: String,
    pub changes: Changes,
    /// When this version was last published (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at_us: Option<i64>,
}

/// When a workflow's draft becomes what runs (its `settings.publish`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PublishMode {
    /// When someone publishes it (the editor's Publish, the API, `sluice publish`).
    #[default]
    Manual,
    /// By itself, once the draft is valid and nobody edited it for
    /// `settings.publish_idle_secs` seconds.
    OnValidIdle,
}

impl PublishMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PublishMode::Manual => "manual",
            PublishMode::OnValidIdle => "on_valid_idle",
        }
    }
}

/// Where a workflow's draft stands against what runs
/// (`GET /api/v1/workflows/{id}/publish`, and the answer to publishing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishState {
    pub id: String,
    /// The draft's document version.
    pub draft_version: String,
    /// Whether a version is published.
    pub published: bool,
    /// The published document version and when it was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at_us: Option<i64>,
    /// What publishing the draft would change (everything when nothing is
    /// published), and that as one line.
    pub changes: Changes,
    pub summary: String,
    /// Why the draft cannot be published (empty: it can).
    pub problems: Vec<Problem>,
    pub mode: PublishMode,
    /// Edits merged from peers that are in the draft and not yet published
    /// here, by who made them (a peer's edit never publishes itself: this
    /// machine's user reviews it and publishes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_peers: Vec<FromPeer>,
    /// Whether a shared worker is configured (`[worker] ingress`): the
    /// workflow can be deployed to it.
    #[serde(default)]
    pub worker: bool,
    /// The version deployed to the shared worker (null: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at_us: Option<i64>,
}

/// Edits from one peer waiting for this machine's user to publish them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FromPeer {
    /// The peer as its versions name it: its display name and short id.
    pub peer: String,
    /// How many versions (bursts of edits) it made.
    pub versions: u32,
}

impl PublishState {
    /// Whether the published version is the draft.
    pub fn up_to_date(&self) -> bool {
        self.published && self.published_version.as_deref() == Some(self.draft_version.as_str())
    }
}

/// The body of `POST /api/v1/workflows/{id}/publish`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Publish {
    /// The document version to publish (from the history); default: the draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// The answer to `POST /api/v1/workflows/{id}/versions/{version}/restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Restored {
    pub id: String,
    /// The new version: the restore is new operations on top, so history is
    /// never rewritten and the restore can be undone the same way.
    pub version: String,
}

/// What a version changed, by workflow part.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Changes {
    pub nodes_added: Vec<String>,
    pub nodes_removed: Vec<String>,
    /// Node id → the fields changed (`config.url`, `position`…).
    pub nodes_changed: BTreeMap<String, BTreeSet<String>>,
    /// Edges added or changed (`from -> to`).
    pub edges_set: Vec<String>,
    pub edges_removed: Vec<String>,
    /// Top-level fields changed (`name`, `vars`…).
    pub fields_changed: Vec<String>,
}

impl std::fmt::Display for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.nodes_added.is_empty() {
            parts.push(format!("added {}", self.nodes_added.join(", ")));
        }
        if !self.nodes_removed.is_empty() {
            parts.push(format!("removed {}", self.nodes_removed.join(", ")));
        }
        if !self.nodes_changed.is_empty() {
            let changed: Vec<String> = self
                .nodes_changed
                .iter()
                .map(|(n, fields)| {
                    let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
                    format!("{n} ({})", fields.join(", "))
                })
                .collect();
            parts.push(format!("changed {}", changed.join(", ")));
        }
        if !self.edges_set.is_empty() {
            parts.push(format!("connected {}", self.edges_set.join(", ")));
        }
        if !self.edges_removed.is_empty() {
            parts.push(format!("disconnected {}", self.edges_removed.join(", ")));
        }
        if !self.fields_changed.is_empty() {
            parts.push(format!("set {}", self.fields_changed.join(", ")));
        }
        if parts.is_empty() {
            return f.write_str("no visible change");
        }
        f.write_str(&parts.join("; "))
    }
}

/// One thing wrong with a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    /// The node it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The edge it is about (index in `edges`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge: Option<usize>,
    /// The field, e.g. `config.cases[1].port` or `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.node, self.edge) {
            (_, Some(e)) => write!(f, "edges[{e}]")?,
            (Some(n), None) => write!(f, "node `{n}`")?,
            (None, None) => write!(f, "workflow")?,
        }
        if let Some(field) = &self.field {
            write!(f, " {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// The answer to `PUT /api/v1/workflows/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stored {
    pub id: String,
    /// How many nodes it has.
    pub nodes: usize,
    /// The draft had moved on from the `base` the body was made from, and
    /// the two were merged: the draft is the body plus the edits made
    /// since (GET it to see the whole).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merged: bool,
}

/// The answer to `POST /api/v1/validate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Validation {
    pub valid: bool,
    /// Every problem, each naming its node or edge and field.
    pub problems: Vec<Problem>,
}

/// The answer to `POST /api/v1/modules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModuleAdded {
    /// Its hash, for `config.module` of `code.wasm` nodes.
    pub module: String,
}

/// The body of `PUT /api/v1/credentials/{name}`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetCredential {
    /// `bearer`, `basic`, `header`, `query` or `smtp`.
    pub kind: String,
    /// The secret, in the shape of its kind; write-only.
    pub value: serde_json::Value,
}

impl std::fmt::Debug for SetCredential {
    // Never the value: it is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetCredential")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The answer to `PUT /api/v1/credentials/{name}`: never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CredentialStored {
    pub name: String,
    pub kind: String,
}

/// The answer to `GET /api/v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The engine's version.
    pub version: String,
}

/// The body of `POST /api/v1/sign-in-links` (optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewSignInLink {
    /// Where the link lands once signed in: a path on this server
    /// (`/#/w/<workflow id>`); the editor's start page by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<String>,
}

/// The answer to `POST /api/v1/sign-in-links`: a link that signs one
/// browser in to the editor, once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInLink {
    /// The whole link, on the address the request came to.
    pub url: String,
    /// The link's path and query (`/ui/login?code=…`), for a caller that
    /// knows the address better.
    pub path: String,
    /// How long the link works, if it is not used first.
    pub expires_in_secs: u64,
}

/// The answer to `GET /api/v1/me`: who this install is to others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Me {
    /// The display name (`[user] name` in `config.toml`, else the OS
    /// user's): what other windows and peers see.
    pub name: String,
}
