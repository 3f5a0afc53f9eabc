//! The `sluice` command: run and validate workflows, inspect and resume runs.
//! Exit codes: 0 success, 1 the run failed, 2 invalid workflow or usage.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand};
use serde_json::Value;
use sluice_api::{RunDetail, RunSummary, StepStatus};
use sluice_model::Workflow;
use sluice_runtime::{Engine, Options, Plan, RunResult, Settings, Status, report};

/// mimalloc: the trigger port allocates and frees on every request across
/// threads, where glibc's allocator spent a fifth of the process's CPU
/// (docs/benchmarks.md, trigger port); asked for ordinary blocks where
/// they are aligned enough (see `sluice_alloc`).
#[global_allocator]
static ALLOCATOR: sluice_alloc::Mimalloc = sluice_alloc::Mimalloc;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Local-first workflow engine")]
struct Cli {
    /// Where runs are kept (default: the platform data dir).
    #[arg(long, global = true, env = "SLUICE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workflow (a *.flow.json file or a stored workflow id) and print its output.
    Run {
        workflow: String,
        /// The input message: JSON text, or @file.
        #[arg(long)]
        input: Option<String>,
        /// Which trigger to start at (default: the only manual trigger).
        #[arg(long)]
        trigger: Option<String>,
        /// Where it runs: `local`, or `worker` (handed to the shared worker
        /// of `[worker] ingress`); default: the workflow's `settings.run_on`.
        #[arg(long)]
        on: Option<String>,
    },
    /// Serve the shared worker: a Restate service endpoint that runs the
    /// runs engines hand off (`run_on: worker`), with credentials from this
    /// data dir's vault. Runs next to a restate-server (docs/worker.md).
    Worker {
        /// Where the service endpoint listens.
        #[arg(long, env = "SLUICE_WORKER_LISTEN", default_value = "127.0.0.1:9080")]
        listen: std::net::SocketAddr,
        /// Register this build as a deployment with the Restate admin API
        /// (e.g. http://127.0.0.1:9070).
        #[arg(long, env = "SLUICE_RESTATE_ADMIN")]
        restate_admin: Option<String>,
        /// The URL restate-server reaches this endpoint at (default: http://<listen>).
        #[arg(long)]
        advertise: Option<String>,
        /// Where deployed workflows' webhooks are served
        /// (`/hook/{workflow}/{path}`, as on the trigger port).
        #[arg(long, env = "SLUICE_WORKER_HOOKS", default_value = "127.0.0.1:9081")]
        hooks: std::net::SocketAddr,
        /// The Restate ingress the hook port starts runs through.
        #[arg(
            long,
            env = "SLUICE_RESTATE_INGRESS",
            default_value = "http://127.0.0.1:8080"
        )]
        restate_ingress: String,
    },
    /// Give the shared worker a workflow's published version to own: its
    /// schedules fire there (from Restate's durable timers) and its webhooks
    /// answer on the worker's hook port, while this machine is off. The runs
    /// appear in this engine's history when it runs.
    Deploy {
        id: String,
        /// Stop the deployment instead (its schedules stop, its webhooks answer 404).
        #[arg(long)]
        stop: bool,
    },
    /// Check a workflow file and list every problem.
    Validate { file: PathBuf },
    /// Run the engine in the background: resume unfinished runs and serve the
    /// trigger port (webhooks and the REST API) until SIGINT/SIGTERM.
    Serve {
        /// Address of the trigger port (default 127.0.0.1:4260).
        #[arg(long, env = "SLUICE_LISTEN")]
        listen: Option<std::net::SocketAddr>,
        /// The workflows folder: every workflow mirrored to `<id>.flow.json`,
        /// and edits to those files merged in (default: <data-dir>/workflows).
        #[arg(long, env = "SLUICE_WORKFLOWS")]
        workflows: Option<PathBuf>,
        /// The editor's built files (default: `ui` next to the binary, else
        /// the build's `target/frontend/dist`; `cargo xtask run` builds it).
        #[arg(long, env = "SLUICE_UI_DIR")]
        ui: Option<PathBuf>,
    },
    /// Print the data dir's API token (for `Authorization: Bearer`); it is
    /// shown by `sluice serve` only when it is created.
    Token,
    /// Sign a browser in to the running engine's editor: asks the engine
    /// (`sluice serve` or the desktop app) for a fresh one-time link,
    /// prints it and opens it in the default browser.
    #[command(visible_alias = "login")]
    Open {
        /// Open this workflow after signing in.
        workflow: Option<String>,
        /// Only print the link (for another machine's browser, or a script).
        #[arg(long)]
        print: bool,
    },
    /// Share a workflow with another install: prints a ticket (one line)
    /// and a `sluice://join/` link to hand over like a password. Goes
    /// through the engine running on the data dir.
    Share {
        id: String,
        /// `editor` (edits the draft) or `viewer` (sees it live).
        #[arg(long, default_value = "editor")]
        role: String,
        /// Stop letting new peers in after this long: `30m`, `12h`, `7d`
        /// (peers that joined stay until revoked).
        #[arg(long)]
        expires: Option<String>,
        /// How many peers may join with it (default: any number).
        #[arg(long)]
        uses: Option<u32>,
    },
    /// Join a workflow a peer shared (its ticket or `sluice://join/` link).
    /// It arrives as a draft: nothing of it runs here until you publish it.
    Join { ticket: String },
    /// WebAssembly components for `code.wasm` nodes.
    Modules {
        #[command(subcommand)]
        command: ModulesCommand,
    },
    /// A workflow's versions: list them, show one, restore one.
    Versions {
        #[command(subcommand)]
        command: VersionsCommand,
    },
    /// Store a workflow file in the data dir and publish it (replacing the
    /// workflow with its id). An n8n export is converted (a new workflow,
    /// its id a slug of the n8n name) and a report printed.
    Import {
        file: PathBuf,
        /// Store it as the draft only: what runs stays as it was.
        #[arg(long)]
        draft: bool,
        /// With an n8n export: import nothing, and exit 1, when a node cannot
        /// be converted.
        #[arg(long)]
        strict: bool,
        /// With an n8n export: print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make a workflow's draft (or one of its versions) what its triggers
    /// and runs by id run. Refused, with every problem named, when it does
    /// not validate.
    Publish {
        id: String,
        /// The version to publish (from `sluice versions list`; default: the draft).
        #[arg(long)]
        version: Option<String>,
    },
    /// Turn a workflow's triggers off (its webhooks answer 404) and refuse
    /// runs by id, until it is published again. The draft stays.
    Unpublish { id: String },
    /// Print a stored workflow as `sluice.workflow/v1` JSON (or write it to --out).
    Export {
        id: String,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Secrets by name, encrypted in the data dir; values are never shown.
    Credentials {
        #[command(subcommand)]
        command: CredentialsCommand,
    },
    /// Inspect and resume runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Stored workflows.
    Workflows {
        #[command(subcommand)]
        command: WorkflowsCommand,
    },
    /// Write the data dir (runs, workflows, credentials, blobs, config.toml)
    /// to one archive, consistent even while an engine runs. The vault key
    /// stays out unless --with-key: without it, restored credentials cannot
    /// be read.
    Backup {
        file: PathBuf,
        #[arg(long)]
        with_key: bool,
    },
    /// Restore a backup into a new or empty data dir (--data-dir). Runs
    /// that were in progress resume when an engine starts on it.
    Restore { file: PathBuf },
    /// What the data dir holds (database, WAL, blobs, runs per workflow)
    /// and the retention in force (`config.toml [runs]`, docs/storage.md).
    Storage {
        #[command(subcommand)]
        command: Option<StorageCommand>,
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: `sluice completions bash >
    /// /etc/bash_completion.d/sluice` (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
}

#[derive(Subcommand)]
enum StorageCommand {
    /// Prune now, as a running engine does every minute: finished runs
    /// the retention lets go, blobs nothing refers to, free pages back to
    /// the OS. Prints what it removed.
    Prune {
        #[arg(long)]
        json: bool,
    },
    /// Rewrite the database without its free pages, and switch a database
    /// made before retention existed to giving free pages back by itself.
    /// Needs the data dir to itself: stop `sluice serve` and the app first.
    Compact,
}

#[derive(Subcommand)]
enum WorkflowsCommand {
    /// Every stored workflow: id, name, and whether what runs is its draft.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CredentialsCommand {
    /// Store (or replace) a credential.
    Set {
        name: String,
        /// bearer, basic, header, query or smtp.
        #[arg(long)]
        kind: String,
        /// The value as JSON, @file, or `-` to read it from stdin (the
        /// default: a secret typed on the command line stays in the shell's
        /// history).
        #[arg(long)]
        json: Option<String>,
    },
    /// Names and kinds.
    List,
    /// Delete a credential.
    Rm { name: String },
}

#[derive(Subcommand)]
enum ModulesCommand {
    /// Check a component and store it; prints the hash nodes name in
    /// `config.module`.
    Add { file: PathBuf },
}

#[derive(Subcommand)]
enum VersionsCommand {
    /// Versions, newest first: when, who, what changed.
    List {
        workflow: String,
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Print the workflow as it was at a version.
    Show { workflow: String, version: String },
    /// Make the workflow what it was at a version (a new version on top).
    Restore { workflow: String, version: String },
}

#[derive(Subcommand)]
enum RunsCommand {
    /// Runs, newest first.
    List {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Only this workflow's runs.
        #[arg(long)]
        workflow: Option<String>,
        /// Only runs with this status: running, waiting, succeeded, failed, cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only runs started since: a time (`2026-12-04T08:00:00Z`) or a
        /// duration ago (`90s`, `15m`, `2h`, `3d`).
        #[arg(long)]
        since: Option<String>,
    },
    /// One run with every step attempt.
    Show {
        run: String,
        #[arg(long)]
        json: bool,
        /// Print the workflow exactly as this run ran it instead.
        #[arg(long)]
        workflow: bool,
    },
    /// Resume unfinished runs (all, or one) and wait for them.
    Resume { run: Option<String> },
    /// Decide an approval a run waits at (`flow.approval`): the JSON
    /// becomes its output; through the engine serving the data dir when one
    /// runs, else here (then the run goes on here until it ends or waits).
    Signal {
        run: String,
        /// The approval's node (needed when the run waits at several).
        #[arg(long)]
        node: Option<String>,
        /// Its split lineage (`""` outside splits).
        #[arg(long)]
        lineage: Option<String>,
        /// Reject instead of approve (the body goes out on `rejected`).
        #[arg(long)]
        reject: bool,
        /// The output: JSON, or `@file` (default `{}`).
        #[arg(long)]
        json: Option<String>,
    },
}

/// An error that decides the exit code.
struct Exit(u8, String);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout with success, usage errors to stderr.
            let code = if e.use_stderr() { 2 } else { 0 };
            e.print().ok();
            return ExitCode::from(code);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(Exit(code, msg)) => {
            eprintln!("{msg}");
            ExitCode::from(code)
        }
    }
}

/// A byte count for people: `12.3 MB`.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.1} GB", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} MB", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} kB", n as f64 / 1e3),
        n => format!("{n} bytes"),
    }
}

fn print_storage(r: &sluice_api::StorageReport) {
    let d = &r.database;
    println!("data dir   {}", r.data_dir);
    println!(
        "database   {} ({} free{}), WAL {}",
        bytes(d.file_bytes),
        bytes(d.free_bytes),
        if d.incremental {
            ", given back to the OS as runs are pruned"
        } else {
            "; reused, not given back until `sluice storage compact`"
        },
        bytes(d.wal_bytes)
    );
    println!(
        "blobs      {} files, {}",
        r.blobs.count,
        bytes(r.blobs.bytes)
    );
    let oldest = r
        .runs
        .oldest_started_at_us
        .map(|us| format!(", the oldest started {}", local_time(us)))
        .unwrap_or_default();
    println!(
        "runs       {} kept, {} in progress{oldest}",
        r.runs.total, r.runs.running
    );
    let keep = |x: &sluice_api::Retention| {
        format!(
            "keep_for {}, keep_max {}, keep_failed_for {}",
            x.keep_for,
            match x.keep_max {
                sluice_api::KeepMax::Unlimited => "unlimited".to_string(),
                sluice_api::KeepMax::Runs(n) => n.to_string(),
            },
            x.keep_failed_for
        )
    };
    println!("retention  {} (config.toml [runs])", keep(&r.retention));
    for o in &r.overrides {
        println!(
            "           {}: {} (settings.runs)",
            o.workflow,
            keep(&o.retention)
        );
    }
    match &r.last_prune {
        Some(p) => println!(
            "last pass  {}: {} runs, {} blobs deleted",
            local_time(p.at_us),
            p.runs_deleted,
            p.blobs_deleted
        ),
        None => println!("last pass  none in this process (a running engine prunes every minute)"),
    }
    if !r.runs.by_workflow.is_empty() {
        println!();
        println!("{:<32} RUNS", "WORKFLOW");
        for w in &r.runs.by_workflow {
            println!("{:<32} {}", w.workflow, w.runs);
        }
    }
}

fn usage(msg: impl std::fmt::Display) -> Exit {
    Exit(2, format!("sluice: {msg}"))
}

fn internal(e: impl std::fmt::Display) -> Exit {
    Exit(2, format!("sluice: {e}"))
}

fn data_dir(flag: Option<PathBuf>) -> Result<PathBuf, Exit> {
    if let Some(d) = flag {
        return Ok(d);
    }
    directories::ProjectDirs::from("dev", "sluice", "sluice")
        .map(|p| p.data_dir().to_path_buf())
        .ok_or_else(|| usage("no home directory: pass --data-dir or set SLUICE_DATA_DIR"))
}

async fn open(flag: Option<PathBuf>) -> Result<Engine, Exit> {
    let dir = data_dir(flag)?;
    let settings = Settings::load(&dir).map_err(|e| usage(e.to_string()))?;
    let options = Options {
        settings,
        // How the crash tests (tests/crash.rs) count a killed process's
        // side effects: read here, at the binary's edge, never by the
        // library's defaults.
        exec_log: std::env::var_os("SLUICE_TEST_EXEC_LOG").map(Into::into),
        ..Options::default()
    };
    Engine::open(&dir, options)
        .await
        .map_err(|e| internal(format!("cannot open the data dir {}: {e}", dir.display())))
}

async fn dispatch(cli: Cli) -> Result<u8, Exit> {
    match cli.command {
        Command::Validate { file } => {
            let wf = read_workflow(&file)?;
            let (nodes, edges) = (wf.nodes.len(), wf.edges.len());
            // Planning checks everything validation does, plus what needs the
            // engine's node kinds (jq programs).
            Plan::new(wf).map_err(|e| invalid(&file.display().to_string(), &e.0))?;
            println!("{}: ok ({nodes} nodes, {edges} edges)", file.display());
            Ok(0)
        }
        Command::Serve {
            listen,
            workflows,
            ui,
        } => serve(cli.data_dir, listen, workflows, ui).await,
        Command::Share {
            id,
            role,
            expires,
            uses,
        } => {
            let role = sluice_api::Role::parse(&role).ok_or_else(|| {
                usage(format!("--role: `{role}` is neither `editor` nor `viewer`"))
            })?;
            let expires_in_s = expires
                .as_deref()
                .map(parse_duration)
                .transpose()
                .map_err(|e| usage(format!("--expires: {e}")))?;
            let running = engine_for_peers(cli.data_dir).await?;
            let body = sluice_api::NewShare {
                role,
                expires_in_s,
                uses,
            };
            let created: sluice_api::ShareCreated = running
                .post(&id, &format!("/workflows/{id}/shares"), &body)
                .await?;
            println!("{}", created.ticket);
            eprintln!(
                "sluice: `{id}` shared as {} (share {}): hand the ticket above, or {}, to the                  peer like a password; revoke it with DELETE /api/v1/shares/{}",
                role.as_str(),
                created.id,
                created.link,
                created.id
            );
            Ok(0)
        }
        Command::Join { ticket } => {
            let running = engine_for_peers(cli.data_dir).await?;
            let joined: sluice_api::Joined = running
                .post("", "/peers/join", &sluice_api::Join { ticket })
                .await?;
            println!(
                "joined `{}` from {} as {}: it is a draft here; nothing of it runs until you                  publish it (`sluice publish {}`)",
                joined.workflow,
                joined.host_name,
                joined.role.as_str(),
                joined.workflow
            );
            Ok(0)
        }
        Command::Open { workflow, print } => {
            open_editor(cli.data_dir, workflow.as_deref(), print).await
        }
        Command::Token => {
            let dir = data_dir(cli.data_dir)?;
            let token = sluice_server::ensure_token(&dir).map_err(|e| {
                usage(format!(
                    "cannot read {}: {e}",
                    dir.join("api-token").display()
                ))
            })?;
            println!("{token}");
            Ok(0)
        }
        Command::Modules {
            command: ModulesCommand::Add { file },
        } => {
            let bytes = std::fs::read(&file)
                .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
            let engine = open(cli.data_dir).await?;
            let hash = engine
                .add_module(bytes)
                .await
                .map_err(|e| usage(format!("{}: {e}", file.display())))?;
            println!("{hash}");
            Ok(0)
        }
        Command::Versions { command } => {
            let engine = open(cli.data_dir).await?;
            match command {
                VersionsCommand::List {
                    workflow,
                    json,
                    limit,
                } => {
                    let versions = engine.history(&workflow, 0, limit).await.map_err(usage)?;
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&versions).unwrap_or_default()
                        );
                        return Ok(0);
                    }
                    println!(
                        "{:<24} {:<20} {:<14} {:<10} SUMMARY",
                        "VERSION", "WHEN", "FROM", "PUBLISHED"
                    );
                    for v in versions {
                        let when = jiff::Timestamp::from_microsecond(v.at_us)
                            .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
                            .unwrap_or_default();
                        let from = v
                            .message
                            .clone()
                            .unwrap_or_else(|| format!("peer {}", v.author));
                        let published = if v.published_at_us.is_some() {
                            "yes"
                        } else {
                            ""
                        };
                        println!(
                            "{:<24} {:<20} {:<14} {:<10} {}",
                            v.version, when, from, published, v.summary
                        );
                    }
                    Ok(0)
                }
                VersionsCommand::Show { workflow, version } => {
                    let wf = engine
                        .workflow_at(&workflow, &version)
                        .await
                        .map_err(usage)?;
                    println!("{}", wf.to_json_pretty().trim_end());
                    Ok(0)
                }
                VersionsCommand::Restore { workflow, version } => {
                    let head = engine
                        .restore_version(&workflow, &version)
                        .await
                        .map_err(usage)?;
                    println!("restored `{workflow}` to {version}: now at {head}");
                    Ok(0)
                }
            }
        }
        Command::Credentials { command } => {
            let engine = open(cli.data_dir).await?;
            let store = engine.store();
            match command {
                CredentialsCommand::Set { name, kind, json } => {
                    if !sluice_model::validate::is_slug(&name) {
                        return Err(usage(format!(
                            "credential name `{name}` must be letters, digits, `-` and `_`"
                        )));
                    }
                    let text = match json.as_deref() {
                        None | Some("-") => read_secret(&name)?,
                        Some(json) => match json.strip_prefix('@') {
                            Some(file) => std::fs::read_to_string(file)
                                .map_err(|e| usage(format!("cannot read {file}: {e}")))?,
                            None => json.to_string(),
                        },
                    };
                    // The message never quotes the text: it may be the secret.
                    let value: Value = serde_json::from_str(&text).map_err(|e| {
                        usage(format!(
                            "--json: invalid JSON at line {}, column {}",
                            e.line(),
                            e.column()
                        ))
                    })?;
                    sluice_model::credentials::check(&kind, &value)
                        .map_err(|e| usage(format!("credential `{name}` ({kind}): {e}")))?;
                    store
                        .put_credential(&name, &kind, &value)
                        .await
                        .map_err(internal)?;
                    println!("stored credential `{name}` ({kind})");
                }
                CredentialsCommand::List => {
                    for c in store.list_credentials().await.map_err(internal)? {
                        println!("{:<32} {}", c.name, c.kind);
                    }
                }
                CredentialsCommand::Rm { name } => {
                    if !store.delete_credential(&name).await.map_err(internal)? {
                        return Err(usage(format!("credential `{name}` not found")));
                    }
                    println!("deleted credential `{name}`");
                }
            }
            Ok(0)
        }
        Command::Backup { file, with_key } => {
            let engine = open(cli.data_dir).await?;
            let w = sluice_host::backup::backup(&engine, &file, with_key)
                .await
                .map_err(internal)?;
            println!(
                "wrote {} ({}): {} runs, {} blobs, workflows, credentials, config.toml",
                file.display(),
                bytes(w.bytes),
                w.manifest.runs,
                w.manifest.blobs
            );
            if w.manifest.with_key {
                println!(
                    "the vault key is inside: keep this file as safe as the credentials it opens"
                );
            } else if w.credentials_need_key {
                println!(
                    "the vault key is not inside: restored credentials can be read only with it (`sluice backup --with-key`, or copy vault.key by hand)"
                );
            }
            Ok(0)
        }
        Command::Restore { file } => {
            let dir = data_dir(cli.data_dir)?;
            let r = sluice_host::backup::restore(&file, &dir)
                .await
                .map_err(|e| match e {
                    sluice_host::backup::Error::NotEmpty(_)
                    | sluice_host::backup::Error::NotABackup { .. } => usage(e),
                    other => internal(other),
                })?;
            println!(
                "restored {} into {}: {} runs ({} to resume when an engine starts), backed up {} by Sluice {}{}",
                file.display(),
                dir.display(),
                r.runs,
                r.unfinished,
                local_time(r.manifest.created_at_us),
                r.manifest.version,
                if r.manifest.with_key {
                    ", with its vault key"
                } else {
                    "; without the vault key: put vault.key back to read its credentials"
                }
            );
            Ok(0)
        }
        Command::Storage { command, json } => {
            let engine = open(cli.data_dir).await?;
            match command {
                Some(StorageCommand::Compact) => {
                    let _lock = lock_data_dir(engine.store().data_dir())?;
                    let before = engine.storage().await.map_err(internal)?.database;
                    engine.store().compact().await.map_err(internal)?;
                    let after = engine.storage().await.map_err(internal)?.database;
                    println!(
                        "database {} → {}; free pages now go back to the OS as runs are pruned",
                        bytes(before.file_bytes),
                        bytes(after.file_bytes)
                    );
                }
                Some(StorageCommand::Prune { json }) => {
                    let r = engine.prune(true).await.map_err(internal)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&r).map_err(internal)?);
                    } else {
                        println!(
                            "deleted {} runs, {} pinned versions no run needs and {} blobs ({}); gave {} back to the OS; {} ms",
                            r.runs_deleted,
                            r.versions_deleted,
                            r.blobs_deleted,
                            bytes(r.blob_bytes_freed),
                            bytes(r.database_bytes_returned),
                            r.took_ms
                        );
                    }
                }
                None => {
                    let r = engine.storage().await.map_err(internal)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&r).map_err(internal)?);
                    } else {
                        print_storage(&r);
                    }
                }
            }
            engine.store().journal().flush().await.map_err(internal)?;
            Ok(0)
        }
        Command::Workflows {
            command: WorkflowsCommand::List { json },
        } => {
            let engine = open(cli.data_dir).await?;
            let rows = engine.store().list_workflows().await.map_err(internal)?;
            if json {
                let list = rows
                    .into_iter()
                    .map(|w| w.into_entry(Vec::new()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(internal)?;
                println!("{}", serde_json::to_string_pretty(&list).map_err(internal)?);
                return Ok(0);
            }
            println!(
                "{:<24} {:<28} {:<19} PUBLISHED",
                "WORKFLOW", "NAME", "CHANGED"
            );
            for w in rows {
                let state = if !w.published {
                    "no"
                } else if w.published_version != w.doc_version {
                    "yes, with unpublished edits"
                } else {
                    "yes"
                };
                println!(
                    "{:<24} {:<28} {:<19} {state}",
                    w.id,
                    w.name,
                    local_time(w.updated_at_us)
                );
            }
            Ok(0)
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut std::io::stdout());
            Ok(0)
        }
        Command::Import {
            file,
            draft,
            strict,
            json,
        } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
            let value: Option<serde_json::Value> = serde_json::from_str(&text).ok();
            if let Some(v) = value.filter(sluice_model::n8n::is_n8n) {
                return import_n8n(cli.data_dir, &file, &v, draft, strict, json).await;
            }
            let wf = read_workflow(&file)?;
            let plan = Plan::new(wf).map_err(|e| invalid(&file.display().to_string(), &e.0))?;
            let engine = open(cli.data_dir).await?;
            if draft {
                engine.save_draft(&plan, Some("import")).await
            } else {
                engine.save_workflow_as(&plan, Some("import")).await
            }
            .map_err(internal)?;
            println!(
                "imported workflow `{}` ({} nodes){}",
                plan.workflow.id,
                plan.workflow.nodes.len(),
                if draft {
                    " as its draft: publish it with `sluice publish` to make it run"
                } else {
                    ""
                }
            );
            Ok(0)
        }
        Command::Publish { id, version } => {
            let dir = data_dir(cli.data_dir.clone())?;
            // A running engine publishes it itself: its schedules and file
            // triggers re-arm at once, not at its next start.
            if let Some(running) = running_engine(&dir).await {
                let state: sluice_api::PublishState = running
                    .post(
                        &id,
                        &format!("/workflows/{id}/publish"),
                        &sluice_api::Publish { version },
                    )
                    .await?;
                println!(
                    "published `{id}` at {}: its triggers and runs by id run this version \
                     (through the engine at {})",
                    state.published_version.as_deref().unwrap_or("?"),
                    running.url
                );
                return Ok(0);
            }
            let engine = open(cli.data_dir).await?;
            let state = engine
                .publish(&id, version.as_deref())
                .await
                .map_err(|e| match e {
                    sluice_runtime::executor::Error::Invalid(i) => invalid(&id, &i.0),
                    other => usage(other),
                })?;
            println!(
                "published `{id}` at {}: its triggers and runs by id run this version",
                state.published_version.as_deref().unwrap_or("?")
            );
            Ok(0)
        }
        Command::Unpublish { id } => {
            let dir = data_dir(cli.data_dir.clone())?;
            if let Some(running) = running_engine(&dir).await {
                let before: sluice_api::PublishState = running
                    .get(&id, &format!("/workflows/{id}/publish"))
                    .await?;
                if !before.published {
                    println!("`{id}` was not published");
                    return Ok(0);
                }
                let _: sluice_api::PublishState = running
                    .post(
                        &id,
                        &format!("/workflows/{id}/unpublish"),
                        &serde_json::json!({}),
                    )
                    .await?;
                println!(
                    "unpublished `{id}`: its triggers are off until it is published again \
                     (through the engine at {})",
                    running.url
                );
                return Ok(0);
            }
            let engine = open(cli.data_dir).await?;
            if engine.unpublish(&id).await.map_err(usage)? {
                println!("unpublished `{id}`: its triggers are off until it is published again");
            } else {
                println!("`{id}` was not published");
            }
            Ok(0)
        }
        Command::Export { id, out } => {
            let engine = open(cli.data_dir).await?;
            let (text, _) = engine
                .workflow_text(&id)
                .await
                .map_err(internal)?
                .ok_or_else(|| usage(format!("workflow `{id}` not found")))?;
            match out {
                None => print!("{text}"),
                Some(path) => {
                    // Atomic: a reader never sees half a file.
                    let tmp = path.with_extension("tmp");
                    std::fs::write(&tmp, &text)
                        .and_then(|()| std::fs::rename(&tmp, &path))
                        .map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
                }
            }
            Ok(0)
        }
        Command::Worker {
            listen,
            restate_admin,
            advertise,
            hooks,
            restate_ingress,
        } => {
            let options = sluice_worker::WorkerOptions {
                listen,
                advertise,
                restate_admin,
                hooks: Some(hooks),
                restate_ingress,
            };
            worker(cli.data_dir, options).await
        }
        Command::Deploy { id, stop } => {
            let dir = data_dir(cli.data_dir.clone())?;
            let state: sluice_api::DeployState = if let Some(running) = running_engine(&dir).await {
                // The running engine records it and re-arms its own
                // schedules (the worker's fire instead) at once.
                let path = format!("/workflows/{id}/deploy");
                if stop {
                    running.delete(&id, &path).await?
                } else {
                    running.post(&id, &path, &serde_json::json!({})).await?
                }
            } else {
                let engine = open(cli.data_dir).await?;
                let done = if stop {
                    engine.undeploy(&id).await
                } else {
                    engine.deploy(&id).await
                };
                done.map_err(usage)?
            };
            match &state.version {
                None => println!(
                    "`{id}` is not deployed: its schedules and webhooks are this engine's again"
                ),
                Some(v) => {
                    println!("deployed `{id}` at {v} to the shared worker");
                    for (trigger, at) in &state.next_fires {
                        println!("  schedule `{trigger}` fires next at {at}");
                    }
                    for hook in &state.webhooks {
                        println!("  webhook {hook} on the worker's hook port");
                    }
                }
            }
            Ok(0)
        }
        Command::Run {
            workflow,
            input,
            trigger,
            on,
        } => {
            let on = on
                .map(|o| o.parse::<sluice_api::RunOn>())
                .transpose()
                .map_err(|e| usage(format!("--on {e}")))?;
            let input = parse_input(input.as_deref())?;
            let engine = open(cli.data_dir).await?;
            let plan = if Path::new(&workflow).exists() || workflow.ends_with(".json") {
                let path = PathBuf::from(&workflow);
                let wf = read_workflow(&path)?;
                let plan = Plan::new(wf).map_err(|e| invalid(&workflow, &e.0))?;
                // The file becomes the workflow's draft, and the draft runs:
                // running a file never changes what its triggers run.
                engine
                    .save_draft(&plan, Some("run"))
                    .await
                    .map_err(internal)?;
                engine.draft(&plan.workflow.id).await.map_err(internal)?
            } else {
                engine.workflow(&workflow).await.map_err(|e| match e {
                    sluice_runtime::executor::Error::Invalid(i) => invalid(&workflow, &i.0),
                    other => usage(other),
                })?
            };
            let handle = engine
                .start_on(plan, trigger.as_deref(), Arc::new(input), on, false)
                .await
                .map_err(usage)?;
            let id = handle.id.clone();
            eprintln!("sluice: run {id} started (Ctrl-C cancels it)");
            let wait = handle.wait();
            tokio::pin!(wait);
            let result = tokio::select! {
                r = &mut wait => r,
                _ = tokio::signal::ctrl_c() => {
                    engine.cancel(&id);
                    eprintln!("sluice: cancelling run {id}");
                    wait.await
                }
            };
            report(&result)
        }
        Command::Runs {
            command:
                RunsCommand::Signal {
                    run,
                    node,
                    lineage,
                    reject,
                    json,
                },
        } => runs_signal(cli.data_dir, run, node, lineage, reject, json).await,
        Command::Runs { command } => {
            let engine = open(cli.data_dir).await?;
            match command {
                RunsCommand::List {
                    json,
                    limit,
                    workflow,
                    status,
                    since,
                } => {
                    let filter = sluice_runtime::RunFilter {
                        workflow,
                        status: status
                            .map(|s| s.parse::<Status>())
                            .transpose()
                            .map_err(|e| usage(format!("--status: {e}")))?,
                        since_us: since.as_deref().map(parse_since).transpose()?,
                        limit,
                        ..Default::default()
                    };
                    let rows = engine.store().find_runs(&filter).await.map_err(internal)?;
                    if json {
                        let list: Vec<RunSummary> = rows.iter().map(report::run_summary).collect();
                        println!(
                            "{}",
                            serde_json::to_string_pretty(&list).unwrap_or_default()
                        );
                    } else {
                        println!(
                            "{:<32} {:<24} {:<10} {:<19} {:>10}",
                            "RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION"
                        );
                        for r in &rows {
                            let dur = r
                                .finished_at_us
                                .map(|f| format_us(f - r.created_at_us))
                                .unwrap_or_else(|| "-".into());
                            println!(
                                "{:<32} {:<24} {:<10} {:<19} {:>10}{}",
                                r.id,
                                r.workflow_id,
                                r.status,
                                local_time(r.created_at_us),
                                dur,
                                if r.draft { "  draft" } else { "" }
                            );
                        }
                    }
                    Ok(0)
                }
                RunsCommand::Show {
                    run,
                    json,
                    workflow,
                } => {
                    let run = resolve_run(&engine, &run).await?;
                    let row = engine
                        .store()
                        .get_run(&run)
                        .await
                        .map_err(internal)?
                        .ok_or_else(|| usage(format!("run `{run}` not found")))?;
                    if workflow {
                        print!("{}", row.definition);
                        if !row.definition.ends_with('\n') {
                            println!();
                        }
                        return Ok(0);
                    }
                    let v = engine.run_detail(&row).await.map_err(internal)?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                    } else {
                        print_run(&v);
                    }
                    Ok(0)
                }
                RunsCommand::Signal { .. } => Err(usage("runs signal: handled before")),
                RunsCommand::Resume { run } => {
                    let _lock = lock_data_dir(engine.store().data_dir())?;
                    let handles = match run {
                        Some(id) => {
                            let id = resolve_run(&engine, &id).await?;
                            vec![engine.resume(&id).await.map_err(usage)?]
                        }
                        None => engine.resume_all().await.map_err(internal)?,
                    };
                    if handles.is_empty() {
                        eprintln!("sluice: no unfinished runs");
                    }
                    let mut code = 0;
                    for h in handles {
                        let r = h.wait().await;
                        eprintln!("run {} {}", r.id, r.status.as_str());
                        if r.status != Status::Succeeded {
                            code = 1;
                        }
                    }
                    Ok(code)
                }
            }
        }
    }
}

/// `sluice runs signal` (see `RunsCommand::Signal`).
async fn runs_signal(
    data_dir_flag: Option<PathBuf>,
    run: String,
    node: Option<String>,
    lineage: Option<String>,
    reject: bool,
    json: Option<String>,
) -> Result<u8, Exit> {
    let body: Value = match json.as_deref() {
        None => Value::Object(Default::default()),
        Some(text) => {
            let text = match text.strip_prefix('@') {
                Some(path) => std::fs::read_to_string(path)
                    .map_err(|e| usage(format!("--json {text}: {e}")))?,
                None => text.to_string(),
            };
            serde_json::from_str(&text).map_err(|e| usage(format!("--json: {e}")))?
        }
    };
    let decision = if reject {
        sluice_api::Decision::Rejected
    } else {
        sluice_api::Decision::Approved
    };
    let dir = data_dir(data_dir_flag.clone())?;
    let done: sluice_api::Signalled = if let Some(running) = running_engine(&dir).await {
        let mut path = format!("/runs/{run}/signal?decision={}", decision.port());
        if let Some(n) = &node {
            path.push_str(&format!("&node={n}"));
        }
        if let Some(l) = &lineage {
            path.push_str(&format!("&lineage={l}"));
        }
        running.post(&run, &path, &body).await?
    } else {
        let engine = open(data_dir_flag).await?;
        // This process drives the run from here: nobody else may.
        let _lock = lock_data_dir(engine.store().data_dir())?;
        let run = resolve_run(&engine, &run).await?;
        let signal = sluice_runtime::executor::Signal {
            node,
            lineage,
            activation: None,
            kind: sluice_runtime::executor::SignalKind::Decide(decision, body),
        };
        let done = engine.signal(&run, signal).await.map_err(usage)?;
        // The run goes on in this process: until it ends or waits.
        if let Some(handle) = engine.attach(&run) {
            let r = handle.wait().await;
            eprintln!("sluice: run {} {}", r.id, r.status.as_str());
        }
        done
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&done).unwrap_or_default()
    );
    Ok(0)
}

/// Only one process resumes and drives a data dir's unfinished runs at a
/// time (`serve`, `runs resume`): two would run their steps twice. Held
/// until the process exits; the OS releases it even after a SIGKILL.
fn host_error(e: sluice_host::Error) -> Exit {
    if e.is_usage() { usage(e) } else { internal(e) }
}

fn lock_data_dir(dir: &Path) -> Result<std::fs::File, Exit> {
    sluice_host::lock_data_dir(dir).map_err(host_error)
}

/// The engine serving a data dir (`sluice serve`, the desktop app), found
/// through its `serve.json`, for commands that must go through it.
struct Running {
    client: reqwest::Client,
    url: String,
    token: String,
}

/// The engine serving `dir`, if one answers.
async fn running_engine(dir: &Path) -> Option<Running> {
    let serving = sluice_host::read_serve_file(dir).ok()??;
    let token = std::fs::read_to_string(dir.join("api-token")).ok()?;
    sluice_nodes::http::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .ok()?;
    let health = client
        .get(format!("{}/api/v1/health", serving.url))
        .bearer_auth(token.trim())
        .timeout(std::time::Duration::from_secs(3))
        .send()
        .await
        .ok()?;
    health.status().is_success().then(|| Running {
        client,
        url: serving.url,
        token: token.trim().to_string(),
    })
}

impl Running {
    async fn get<T: serde::de::DeserializeOwned>(&self, id: &str, path: &str) -> Result<T, Exit> {
        let req = self.client.get(format!("{}/api/v1{path}", self.url));
        self.answer(id, req).await
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        id: &str,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T, Exit> {
        let req = self
            .client
            .post(format!("{}/api/v1{path}", self.url))
            .json(body);
        self.answer(id, req).await
    }

    async fn delete<T: serde::de::DeserializeOwned>(
        &self,
        id: &str,
        path: &str,
    ) -> Result<T, Exit> {
        let req = self.client.delete(format!("{}/api/v1{path}", self.url));
        self.answer(id, req).await
    }

    /// The answer as `T`, or the exit an error answer means: the problems
    /// of an invalid workflow (exit 2, each named), a missing one, or the
    /// engine's message.
    async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        id: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<T, Exit> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| internal(format!("the engine at {} did not answer: {e}", self.url)))?;
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        if status.is_success() {
            return serde_json::from_str(&text)
                .map_err(|e| internal(format!("unexpected answer from {}: {e}", self.url)));
        }
        let body = serde_json::from_str::<sluice_api::ErrorBody>(&text).ok();
        let problems = body
            .as_ref()
            .and_then(|b| b.error.detail.clone())
            .and_then(|d| serde_json::from_value::<Vec<sluice_model::Problem>>(d).ok());
        if let Some(problems) = problems.filter(|p| !p.is_empty()) {
            return Err(invalid(id, &problems));
        }
        Err(usage(body.map_or(text, |b| b.error.message)))
    }
}

/// The running engine of the data dir, for peers commands (sharing and
/// joining need its endpoint), or a clear error when none runs.
async fn engine_for_peers(flag: Option<PathBuf>) -> Result<Running, Exit> {
    let dir = data_dir(flag)?;
    running_engine(&dir).await.ok_or_else(|| {
        Exit(
            1,
            format!(
                "sluice: no engine is running on the data dir {}: sharing and joining go \
                 through it. Start it with `sluice serve` (or the desktop app)",
                dir.display()
            ),
        )
    })
}

/// `30s`, `15m`, `12h`, `7d` (or plain seconds) as seconds.
fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration like 30m, 12h or 7d"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{text}`: the unit must be s, m, h or d")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// `sluice open`: a sign-in link from the engine that serves the data dir.
async fn open_editor(
    flag: Option<PathBuf>,
    workflow: Option<&str>,
    print: bool,
) -> Result<u8, Exit> {
    let dir = data_dir(flag)?;
    let not_running = || {
        Exit(
            1,
            format!(
                "sluice: no engine is running on the data dir {}: start it with `sluice serve` \
                 (or the desktop app), which prints a sign-in link",
                dir.display()
            ),
        )
    };
    // No serve file, or one a crashed engine left (nothing answers there).
    let running = running_engine(&dir).await.ok_or_else(not_running)?;
    let body = sluice_api::NewSignInLink {
        then: workflow.map(|w| format!("/#/w/{w}")),
    };
    let link: sluice_api::SignInLink = running.post("", "/sign-in-links", &body).await?;
    // The link on the address the engine wrote (what this machine reaches).
    let url = format!("{}{}", running.url, link.path);
    println!("{url}");
    if !print {
        match open_in_browser(&url) {
            Ok(()) => eprintln!("sluice: opened in your browser (the link works once)"),
            Err(e) => eprintln!(
                "sluice: could not open a browser ({e}): open the link above (it works once)"
            ),
        }
    }
    Ok(0)
}

/// Hands `url` to the desktop's default browser.
fn open_in_browser(url: &str) -> std::io::Result<()> {
    let mut cmd = if cfg!(target_os = "macos") {
        std::process::Command::new("open")
    } else if cfg!(windows) {
        let mut c = std::process::Command::new("cmd");
        c.args(["/C", "start", ""]);
        c
    } else {
        std::process::Command::new("xdg-open")
    };
    let status = cmd
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("{status}")))
    }
}

/// The editor's files built into the binary (see `build.rs`).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/ui_files.rs"));
}

/// The editor's files: `ui` next to the binary (an installed app), else
/// this build's `target/frontend/dist` (a checkout).
fn default_ui_dir() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("ui")));
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/frontend/dist");
    [beside, Some(built)]
        .into_iter()
        .flatten()
        .find(|d| d.join("index.html").is_file())
}

/// Resolves at SIGINT or SIGTERM.
async fn wait_for_shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::mem::drop(ctrl_c.await),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    drop(ctrl_c.await);
}

/// `sluice worker`: the shared worker's endpoint until SIGINT/SIGTERM.
async fn worker(
    data_dir_flag: Option<PathBuf>,
    options: sluice_worker::WorkerOptions,
) -> Result<u8, Exit> {
    let engine = open(data_dir_flag.clone()).await?;
    let dir = data_dir(data_dir_flag)?;
    let restate_admin = options.restate_admin.clone();
    let worker = sluice_worker::start(engine, options)
        .await
        .map_err(|e| Exit(2, format!("sluice worker: {e}")))?;
    // Whoever reads stdout may be gone (a supervisor, a test): never fail on it.
    let say = |line: String| {
        use std::io::Write;
        writeln!(std::io::stdout(), "{line}").ok();
    };
    say(format!("worker listening on {}", worker.addr));
    say(format!("deployment {}", worker.uri));
    if let Some(hooks) = worker.hooks {
        say(format!("deployed webhooks on http://{hooks}/hook/"));
    }
    match &restate_admin {
        Some(admin) => say(format!("registered with {admin}")),
        None => say(format!(
            "not registered: pass --restate-admin http://HOST:9070, or register {} yourself",
            worker.uri
        )),
    }
    say(format!(
        "data dir {} (credentials, blobs, config)",
        dir.display()
    ));
    wait_for_shutdown().await;
    say("worker stopping".into());
    worker.stop().await;
    Ok(0)
}

async fn serve(
    data_dir_flag: Option<PathBuf>,
    listen: Option<std::net::SocketAddr>,
    workflows: Option<PathBuf>,
    ui: Option<PathBuf>,
) -> Result<u8, Exit> {
    let dir = data_dir(data_dir_flag)?;
    let mut options = sluice_host::HostOptions::new(dir.clone());
    if let Some(listen) = listen {
        options.listen = listen;
    }
    options.workflows = workflows;
    // `--ui` first, then the editor built into this binary, then one on
    // disk beside it or in the checkout.
    options.ui_embedded = embedded::UI_FILES;
    options.ui_dir = ui.or_else(|| {
        if embedded::UI_FILES.is_empty() {
            default_ui_dir()
        } else {
            None
        }
    });
    let host = sluice_host::Host::start(options)
        .await
        .map_err(host_error)?;
    if sluice_server::is_exposed(&host.bound) {
        eprintln!(
            "sluice: warning: {} is reachable from other machines; webhooks need no token, \
             the API does (keep {} secret)",
            host.bound,
            dir.join("api-token").display()
        );
    }
    println!("listening on {}", host.base_url());
    println!("data dir {}", dir.display());
    // The token is shown once, when it is created; after that it is in
    // the file (and `sluice token`), not in every terminal and log.
    if host.token_is_new {
        println!(
            "API token {} (new; kept in {})",
            host.token,
            dir.join("api-token").display()
        );
    } else {
        println!(
            "API token in {} (`sluice token` prints it)",
            dir.join("api-token").display()
        );
    }
    if host.has_ui {
        println!(
            "editor {} (signs this browser in; the link works once)",
            host.login_url("/")
        );
    } else {
        println!("editor not built (cargo xtask run builds it)");
    }
    println!("workflows folder {}", host.workflows.display());
    if host.resumed > 0 {
        println!("resuming {} unfinished run(s)", host.resumed);
    }
    let shutdown = wait_for_shutdown();
    tokio::select! {
        () = shutdown => {}
        () = host.serving() => {}
    }
    // Whatever steps recorded is committed; unfinished runs resume at the next start.
    host.stop().await.map_err(|e| internal(e.to_string()))?;
    eprintln!("sluice: stopped");
    Ok(0)
}

fn invalid(what: &str, problems: &[sluice_model::Problem]) -> Exit {
    let mut msg = format!(
        "{what}: invalid workflow ({} problem{}):",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in problems {
        msg.push_str(&format!("\n  - {p}"));
    }
    Exit(2, msg)
}

/// `sluice import` of an n8n export: converted into a new workflow (never
/// replacing one), its report printed.
async fn import_n8n(
    data_dir: Option<PathBuf>,
    file: &Path,
    v: &serde_json::Value,
    draft: bool,
    strict: bool,
    json: bool,
) -> Result<u8, Exit> {
    let engine = open(data_dir).await?;
    let taken: std::collections::HashSet<String> = engine
        .store()
        .list_workflows()
        .await
        .map_err(internal)?
        .into_iter()
        .map(|w| w.id)
        .collect();
    let imported = sluice_model::n8n::convert(v, &|id| taken.contains(id))
        .map_err(|e| Exit(2, format!("{}: {e}", file.display())))?;
    let report = &imported.report;
    let missing = report.not_converted().count();
    if strict && missing > 0 {
        eprint!("{}", report.text());
        return Err(Exit(
            1,
            format!(
                "{}: {missing} node(s) could not be converted; nothing was imported (--strict)",
                file.display()
            ),
        ));
    }
    let wf = Workflow::from_value(imported.workflow.clone()).map_err(|e| {
        Exit(
            2,
            format!("{}: the converted workflow: {e}", file.display()),
        )
    })?;
    let plan = Plan::new(wf).map_err(|e| invalid(&file.display().to_string(), &e.0))?;
    if draft {
        engine.save_draft(&plan, Some("import from n8n")).await
    } else {
        engine
            .save_workflow_as(&plan, Some("import from n8n"))
            .await
    }
    .map_err(internal)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(internal)?
        );
    } else {
        print!("{}", report.text());
        if draft {
            println!(
                "  stored as its draft: publish it with `sluice publish {}`",
                report.id
            );
        }
    }
    Ok(0)
}

fn read_workflow(path: &Path) -> Result<Workflow, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    Workflow::from_json(&text).map_err(|e| Exit(2, format!("{}: {e}", path.display())))
}

/// A run id, or a prefix of one that names exactly one run.
async fn resolve_run(engine: &Engine, given: &str) -> Result<String, Exit> {
    if engine
        .store()
        .get_run(given)
        .await
        .map_err(internal)?
        .is_some()
    {
        return Ok(given.to_string());
    }
    let found = engine
        .store()
        .runs_with_prefix(given, 5)
        .await
        .map_err(internal)?;
    match found.as_slice() {
        [] => Err(usage(format!("run `{given}` not found"))),
        [one] => Ok(one.clone()),
        many => Err(usage(format!(
            "`{given}` is the start of several runs ({}{}): give more of the id",
            many.join(", "),
            if many.len() == 5 { ", …" } else { "" }
        ))),
    }
}

/// `--since`: a time (RFC 3339) or a duration ago (`90s`, `15m`, `2h`,
/// `3d`), as microseconds since the epoch.
fn parse_since(text: &str) -> Result<i64, Exit> {
    let bad = || {
        usage(format!(
            "--since `{text}`: expected a time like 2026-12-04T08:00:00Z or a duration ago like 15m, 2h, 3d"
        ))
    };
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t.as_microsecond());
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = text.split_at(split);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let ago = n
        .checked_mul(secs)
        .and_then(|s| s.checked_mul(1_000_000))
        .ok_or_else(bad)?;
    Ok(jiff::Timestamp::now().as_microsecond() - ago)
}

/// Microseconds since the epoch as local `YYYY-MM-DD HH:MM:SS`.
fn local_time(us: i64) -> String {
    jiff::Timestamp::from_microsecond(us)
        .map(|t| {
            t.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_default()
}

/// A credential's value from stdin (a prompt first when it is a terminal).
fn read_secret(name: &str) -> Result<String, Exit> {
    use std::io::{IsTerminal, Read};
    if std::io::stdin().is_terminal() {
        eprintln!("The value of credential `{name}` as JSON, then Ctrl-D:");
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| usage(format!("cannot read the value from stdin: {e}")))?;
    Ok(text)
}

fn parse_input(input: Option<&str>) -> Result<Value, Exit> {
    let Some(input) = input else {
        return Ok(Value::Null);
    };
    let bad = |what: &str, e: serde_json::Error| {
        usage(format!(
            "{what}: invalid JSON at line {}, column {}: {}",
            e.line(),
            e.column(),
            strip_pos(&e.to_string())
        ))
    };
    match input.strip_prefix('@') {
        // Parsed as it is read: a large input is never held as text too.
        Some(file) => {
            let f = std::fs::File::open(file)
                .map_err(|e| usage(format!("cannot read input file {file}: {e}")))?;
            serde_json::from_reader(std::io::BufReader::new(f)).map_err(|e| bad(file, e))
        }
        None => serde_json::from_str(input).map_err(|e| bad("--input", e)),
    }
}

fn strip_pos(s: &str) -> &str {
    s.rfind(" at line ").map(|i| &s[..i]).unwrap_or(s)
}

fn report(result: &RunResult) -> Result<u8, Exit> {
    // Streamed: a large output is never held twice (value and text).
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, &result.output)
        .map_err(|e| internal(format!("cannot write the output: {e}")))?;
    writeln!(out)
        .and_then(|()| out.flush())
        .map_err(|e| internal(format!("cannot write the output: {e}")))?;
    match result.status {
        Status::Succeeded => Ok(0),
        Status::Waiting => {
            eprintln!(
                "sluice: run {id} waits for a decision: `sluice runs show {id}` says where, \
                 `sluice runs signal {id}` decides",
                id = result.id
            );
            Ok(0)
        }
        status => {
            let err = result.error.as_ref();
            let node = err
                .and_then(|e| e.node.as_deref())
                .map(|n| format!(" at node `{n}`"))
                .unwrap_or_default();
            let message = err.map_or("no message", |e| e.message.as_str());
            Err(Exit(
                1,
                format!(
                    "sluice: run {} {}{node}: {message}",
                    result.id,
                    status.as_str()
                ),
            ))
        }
    }
}

fn print_run(v: &RunDetail) {
    let run = &v.run;
    println!("run       {}", run.id);
    println!("workflow  {}", run.workflow);
    println!("status    {}", run.status);
    if let Some(error) = &run.error {
        println!("error     {error}");
    }
    println!("output    {}", run.output);
    println!(
        "\n{:<20} {:<8} {:<6} {:>3} {:<10} {:>10}  input -> output",
        "NODE", "LINEAGE", "ACT", "TRY", "STATUS", "DURATION"
    );
    let null = Value::Null;
    for s in &v.steps {
        let dur = s.duration_us.map(format_us).unwrap_or_else(|| "-".into());
        let io = format!(
            "{} -> {}",
            short(s.input.as_ref().unwrap_or(&null)),
            if s.status == StepStatus::Failed {
                short(
                    &s.error
                        .as_ref()
                        .map_or(Value::Null, |e| e.message.as_str().into()),
                )
            } else {
                short(s.output.as_ref().unwrap_or(&null))
            }
        );
        println!(
            "{:<20} {:<8} {:<6} {:>3} {:<10} {:>10}  {}",
            s.node,
            s.lineage,
            s.activation.as_deref().unwrap_or(""),
            s.attempt.map(|a| a.to_string()).unwrap_or_default(),
            s.status.as_str(),
            dur,
            io
        );
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}…", &s[..s.floor_char_boundary(59)])
    } else {
        s
    }
}

fn format_us(us: i64) -> String {
    if us < 1000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1000.0)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}
