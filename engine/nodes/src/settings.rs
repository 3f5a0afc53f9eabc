//! User settings: `<data-dir>/config.toml`. Every key is optional; a missing
//! file means the defaults. Unknown keys are errors (a typo must not silently
//! leave a folder unprotected or a limit unset), reported with file and line.

use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The name of the settings file inside the data dir.
pub const FILE_NAME: &str = "config.toml";

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub files: FileSettings,
    pub http: HttpSettings,
    pub smtp: SmtpSettings,
    pub tls: TlsSettings,
    pub sandbox: SandboxSettings,
    pub server: ServerSettings,
    pub workflows: WorkflowsSettings,
    pub user: UserSettings,
    pub peers: PeersSettings,
    pub worker: WorkerSettings,
    pub runs: RunsSettings,
    pub db: DbSettings,
}

impl Settings {
    /// The retention of runs whose workflow does not override it.
    pub fn retention(&self) -> sluice_api::Retention {
        sluice_api::Retention::DEFAULT.with(&sluice_api::RetentionOverride {
            keep_for: self.runs.keep_for,
            keep_max: self.runs.keep_max,
            keep_failed_for: self.runs.keep_failed_for,
        })
    }
}

/// `[runs]`: how long finished runs are kept (defaults in
/// [`sluice_api::Retention::DEFAULT`]; a workflow's `settings.runs`
/// overrides the first three for its runs), and how often the engine
/// prunes (docs/storage.md).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RunsSettings {
    pub keep_for: Option<sluice_api::KeepFor>,
    pub keep_max: Option<sluice_api::KeepMax>,
    pub keep_failed_for: Option<sluice_api::KeepFor>,
    /// How often a serving engine prunes (at least every second).
    #[serde(with = "span")]
    pub prune_every: std::time::Duration,
    /// How often blobs are collected (after a pass that deleted runs).
    #[serde(with = "span")]
    pub collect_blobs_every: std::time::Duration,
    /// A blob stored (or stored again) more recently than this is never
    /// collected (at least a minute: a value stored but not yet committed
    /// keeps its blob).
    #[serde(with = "span")]
    pub blob_grace: std::time::Duration,
}

impl Default for RunsSettings {
    fn default() -> Self {
        RunsSettings {
            keep_for: None,
            keep_max: None,
            keep_failed_for: None,
            prune_every: std::time::Duration::from_secs(60),
            collect_blobs_every: std::time::Duration::from_secs(3_600),
            blob_grace: std::time::Duration::from_secs(3_600),
        }
    }
}

/// `[db]`: the connection pools `db.query` keeps, one per database and
/// credential, shared by every run (docs/nodes.md).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DbSettings {
    /// Connections to one database at most (1 to 64).
    pub max_connections: u32,
    /// A connection unused this long is closed, and so is a pool.
    #[serde(with = "span")]
    pub idle_close: std::time::Duration,
    /// How long to wait to connect, or for a free connection.
    #[serde(with = "span")]
    pub connect_timeout: std::time::Duration,
}

impl Default for DbSettings {
    fn default() -> Self {
        DbSettings {
            max_connections: 4,
            idle_close: std::time::Duration::from_secs(300),
            connect_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// A span in settings: `"90s"`, `"1m"`, `"1h"` (as [`sluice_api::KeepFor`],
/// without `forever`).
mod span {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&sluice_api::KeepFor::Span(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match String::deserialize(d)?.parse::<sluice_api::KeepFor>() {
            Ok(sluice_api::KeepFor::Span(d)) => Ok(d),
            Ok(sluice_api::KeepFor::Forever) => Err(serde::de::Error::custom(
                "a span is needed here, e.g. \"1m\"; not \"forever\"",
            )),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

/// `[worker]`: the shared worker runs are handed to (docs/worker.md).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerSettings {
    /// The Restate ingress the worker is registered with, e.g.
    /// `"http://worker.lan:8080"` (none: runs set to `run_on: worker` fail,
    /// saying so).
    pub ingress: Option<String>,
    /// The Restate admin API (`"http://worker.lan:9070"`): cancelling a
    /// worker run and the health view's registration check use it.
    pub admin: Option<String>,
    /// A credential (bearer, basic or header) whose header every request to
    /// the ingress and the admin API carries: for a Restate behind an
    /// authenticating proxy. Read when the engine starts.
    pub auth: Option<String>,
}

/// `[peers]`: sharing workflows with other installs over iroh (docs/peers.md).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PeersSettings {
    /// Whether this install runs a peer endpoint at all (default true).
    pub enabled: bool,
    /// Where it listens, e.g. `"0.0.0.0:7070"` (default: every interface,
    /// IPv4 and IPv6, a free port).
    pub listen: Option<String>,
    /// `"default"` (n0's public relays), `"none"` (direct addresses only),
    /// or a list of relay URLs (self-hosted).
    pub relays: Relays,
}

impl Default for PeersSettings {
    fn default() -> Self {
        PeersSettings {
            enabled: true,
            listen: None,
            relays: Relays::Named("default".into()),
        }
    }
}

/// `[peers] relays`: a name or a list of URLs.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Relays {
    Named(String),
    List(Vec<String>),
}

/// `[user]`: who this install is to the people it works with.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct UserSettings {
    /// The name other windows and peers see (presence, version history).
    /// Default: the OS user's full name, else the login name.
    pub name: Option<String>,
}

/// The longest display name kept (longer names are cut).
pub const MAX_NAME_CHARS: usize = 64;

impl UserSettings {
    /// The display name: `name` when set, else the OS user's full name,
    /// else the login name; trimmed, control characters dropped, at most
    /// [`MAX_NAME_CHARS`].
    pub fn display_name(&self) -> String {
        let clean = |s: &str| -> Option<String> {
            let s: String = s
                .chars()
                .filter(|c| !c.is_control())
                .take(MAX_NAME_CHARS)
                .collect();
            let s = s.trim().to_string();
            (!s.is_empty()).then_some(s)
        };
        self.name
            .as_deref()
            .and_then(clean)
            .or_else(|| whoami::realname().ok().as_deref().and_then(clean))
            .or_else(|| whoami::username().ok().as_deref().and_then(clean))
            .unwrap_or_else(|| "someone".to_string())
    }
}

/// `[workflows]`: the workflows folder.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkflowsSettings {
    /// An edit to a file in the workflows folder (a text editor, a `git
    /// pull`) is published at once, instead of becoming the draft. For
    /// people who deploy workflows with git.
    pub publish_file_edits: bool,
}

/// `[files]`: where `file.read` and `file.write` may go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FileSettings {
    /// Folders the file nodes may read and write inside (after following
    /// symlinks). Relative entries are relative to the data dir. Empty: the
    /// file nodes refuse every path.
    pub allow: Vec<PathBuf>,
    /// Largest file `file.read` loads into a message as text, JSON or CSV.
    pub max_read_bytes: u64,
}

impl Default for FileSettings {
    fn default() -> Self {
        FileSettings {
            allow: Vec::new(),
            max_read_bytes: 16 << 20,
        }
    }
}

/// `[http]`: defaults for `http.request` (a node's own config wins).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Whole-request deadline, connect to last body byte.
    pub timeout_ms: u64,
    /// Redirects followed before the request fails.
    pub max_redirects: u32,
    /// Largest JSON or text body parsed into the message.
    pub max_response_bytes: u64,
    /// Largest body streamed into the blob store (binary responses).
    pub max_download_bytes: u64,
    /// Binary bodies up to this size travel inline as base64; larger ones
    /// become blob references.
    pub inline_bytes: u64,
    pub user_agent: String,
    /// Addresses (`10.1.2.3`, CIDRs like `10.0.0.0/8`) and host names
    /// (`api.example.com`, `*.example.com`) `http.request` may call even
    /// where the defaults or `deny` refuse them (see `net.rs`).
    pub allow: Vec<String>,
    /// Addresses, CIDRs and host names `http.request` may not call, on
    /// top of the defaults (the own trigger port, link-local and metadata
    /// addresses, names that resolve to this machine).
    pub deny: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            timeout_ms: 30_000,
            max_redirects: 10,
            max_response_bytes: 16 << 20,
            max_download_bytes: 1 << 30,
            inline_bytes: 64 << 10,
            user_agent: concat!("sluice/", env!("CARGO_PKG_VERSION")).to_string(),
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

/// `[smtp]`: defaults for `email.send`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SmtpSettings {
    /// Deadline for each SMTP command.
    pub timeout_ms: u64,
    /// Largest total size of a message's attachments.
    pub max_attachment_bytes: u64,
}

impl Default for SmtpSettings {
    fn default() -> Self {
        SmtpSettings {
            timeout_ms: 30_000,
            max_attachment_bytes: 25 << 20,
        }
    }
}

/// `[tls]`: trust for outgoing HTTPS and SMTP.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM files of extra root certificates (a company CA, a test CA),
    /// trusted in addition to the system's.
    pub extra_roots: Vec<PathBuf>,
}

/// `[sandbox]`: defaults for `code.js` and `code.wasm`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    pub timeout_ms: u64,
    pub memory_mb: u64,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            timeout_ms: 5_000,
            memory_mb: 64,
        }
    }
}

/// `[server]`: the trigger port's limits (`sluice serve` and the app).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Largest request body; larger ones get 413.
    pub body_limit_bytes: NonZeroU64,
    /// How long a `when_finished` webhook (and an API start with
    /// `"wait": true`) waits for its run before answering 202 with its id.
    pub wait_ms: NonZeroU64,
    /// Runs in progress (executing or waiting their turn) beyond which new
    /// top-level runs are refused with 429.
    pub max_active_runs: NonZeroU64,
    /// Open connections beyond which the oldest idle one is closed for a new
    /// one (and a new one refused when none is idle). Also kept under the
    /// process's open-files limit.
    pub max_connections: NonZeroU64,
    /// How long a client has to send its request headers, after connecting
    /// or after its previous response (the keep-alive idle timeout too).
    pub header_timeout_ms: NonZeroU64,
    /// Where people reach the trigger port, as resume links start with it
    /// (`https://sluice.example.com`); default: the address it listens on.
    pub public_url: Option<String>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            body_limit_bytes: nonzero(16 << 20),
            wait_ms: nonzero(30_000),
            max_active_runs: nonzero(10_000),
            max_connections: nonzero(4096),
            header_timeout_ms: nonzero(30_000),
            public_url: None,
        }
    }
}

/// A default that is not zero, checked when compiling.
const fn nonzero(n: u64) -> NonZeroU64 {
    match NonZeroU64::new(n) {
        Some(n) => n,
        None => NonZeroU64::MIN,
    }
}

/// A settings file that cannot be used; the message names file and line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, or not the settings (an unknown key, a wrong type).
    #[error("{path}:{source}")]
    Parse { path: PathBuf, source: ParseError },
    /// A `[files] allow` entry contains the data dir, which holds the API
    /// token, the vault key and compiled code.
    #[error(
        "{path}:{line}:{column}: `[files] allow` entry {} contains the data dir {}: workflows \
         could read its API token and keys; allow a folder beside it or inside it",
        allowed.display(),
        data.display()
    )]
    AllowsDataDir {
        path: PathBuf,
        line: usize,
        column: usize,
        allowed: PathBuf,
        data: PathBuf,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings text that does not parse, at a 1-based line and column.
#[derive(Debug, thiserror::Error)]
#[error("{line}:{column}: {}", self.message())]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    /// Boxed: toml's error is large, and a `Result` carries it.
    #[source]
    source: Box<toml::de::Error>,
}

impl ParseError {
    /// What is wrong, without the position.
    pub fn message(&self) -> &str {
        self.source.message().trim()
    }
}

impl Settings {
    /// Reads `<data_dir>/config.toml`; defaults when it does not exist.
    /// Relative `files.allow` and `tls.extra_roots` entries are made absolute
    /// against the data dir.
    pub fn load(data_dir: &Path) -> Result<Settings> {
        let path = data_dir.join(FILE_NAME);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
            Err(source) => return Err(Error::Io { path, source }),
        };
        let mut settings = Settings::parse(&text).map_err(|source| Error::Parse {
            path: path.clone(),
            source,
        })?;
        for p in settings
            .files
            .allow
            .iter_mut()
            .chain(settings.tls.extra_roots.iter_mut())
        {
            if p.is_relative() {
                *p = data_dir.join(&*p);
            }
        }
        // The data dir holds the API token, the vault key and compiled code:
        // an allowed folder that contains it would hand them to workflows.
        if let Ok(data) = std::fs::canonicalize(data_dir) {
            for allowed in &settings.files.allow {
                if let Ok(real) = std::fs::canonicalize(allowed)
                    && data.starts_with(&real)
                {
                    let (line, column) =
                        text.find("allow").map_or((1, 1), |at| line_col(&text, at));
                    return Err(Error::AllowsDataDir {
                        path: path.clone(),
                        line,
                        column,
                        allowed: allowed.clone(),
                        data,
                    });
                }
            }
        }
        Ok(settings)
    }

    /// Parses settings text; errors carry 1-based line and column.
    pub fn parse(text: &str) -> Result<Settings, ParseError> {
        toml::from_str::<Settings>(text).map_err(|source| {
            let (line, column) = match source.span() {
                Some(span) => line_col(text, span.start),
                None => (1, 1),
            };
            ParseError {
                line,
                column,
                source: Box::new(source),
            }
        })
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.chars().count(), |i| before[i + 1..].chars().count())
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_display_name_is_the_configured_one_cleaned_else_the_os_users() {
        let s = Settings::parse("[user]\nname = \"  Ada\\u0007 Lovelace  \"\n").unwrap();
        assert_eq!(s.user.display_name(), "Ada Lovelace");
        let long = Settings::parse(&format!("[user]\nname = \"{}\"\n", "x".repeat(200))).unwrap();
        assert_eq!(long.user.display_name().chars().count(), MAX_NAME_CHARS);
        // Unset or blank: the OS user (never empty).
        let os = Settings::parse("[user]\nname = \"  \"\n")
            .unwrap()
            .user
            .display_name();
        assert!(!os.trim().is_empty());
        assert_eq!(os, Settings::default().user.display_name());
        assert!(Settings::parse("[user]\nnick = \"a\"\n").is_err());
    }

    #[test]
    fn an_allowed_folder_may_not_contain_the_data_dir() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("data");
        std::fs::create_dir_all(data.join("files")).unwrap();
        for allow in [root.path().to_path_buf(), data.clone(), data.join(".")] {
            let text = format!("[files]\nallow = [{:?}]\n", allow.display().to_string());
            std::fs::write(data.join(FILE_NAME), text).unwrap();
            let e = Settings::load(&data).unwrap_err().to_string();
            assert!(e.contains("config.toml:2:1: `[files] allow` entry"), "{e}");
            assert!(e.contains("contains the data dir"), "{e}");
        }
        // A folder inside the data dir, or beside it, is fine.
        std::fs::write(data.join(FILE_NAME), "[files]\nallow = [\"files\"]\n").unwrap();
        assert!(Settings::load(&data).is_ok());
    }

    #[test]
    fn missing_file_gives_defaults() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Settings::load(dir.path()).unwrap(), Settings::default());
    }

    #[test]
    fn keys_are_read_and_relative_paths_resolved() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE_NAME),
            "[files]\nallow = [\"/srv/in\", \"out\"]\n\n[http]\ntimeout_ms = 1500\n",
        )
        .unwrap();
        let s = Settings::load(dir.path()).unwrap();
        assert_eq!(
            s.files.allow,
            vec![PathBuf::from("/srv/in"), dir.path().join("out")]
        );
        assert_eq!(s.http.timeout_ms, 1500);
        assert_eq!(s.http.max_redirects, 10, "unset keys keep their default");
    }

    #[test]
    fn a_typo_is_an_error_with_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(FILE_NAME),
            "[files]\nallow = []\n\n[http]\ntimeout = 5\n",
        )
        .unwrap();
        let e = Settings::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("config.toml:5:1:"), "{e}");
        assert!(e.contains("unknown field `timeout`"), "{e}");
    }

    #[test]
    fn server_limits_are_read_and_zero_is_refused() {
        let s = Settings::parse("[server]\nbody_limit_bytes = 1024\nwait_ms = 250\n").unwrap();
        assert_eq!(s.server.body_limit_bytes.get(), 1024);
        assert_eq!(s.server.wait_ms.get(), 250);
        assert_eq!(s.server.max_active_runs.get(), 10_000);
        let e = Settings::parse("[server]\n\nmax_active_runs = 0\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message().contains("nonzero"), "{e}");
    }

    #[test]
    fn a_wrong_type_names_the_line() {
        let e = Settings::parse("[http]\n\nmax_redirects = \"ten\"\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message().contains("invalid type"), "{e}");
    }
}
