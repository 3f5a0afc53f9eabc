//! Runs that wait for a decision (`flow.approval`): signals and timeouts.
//!
//! A run whose driver has nothing left but approvals to wait for is parked
//! (see `Driver::park_run`): everything it journaled is committed, its row
//! says since when it waits, and no task, driver or memory stays behind.
//! [`Engine::signal`] decides one of its approvals: handed to the run's
//! driver when one has it, else the run is taken up again from its journal
//! (the replay re-parks the approval) with the signal queued first. The
//! driver journals the decision and commits it before answering, so a
//! decision is made once: a second signal finds nothing waiting.
//!
//! Timeouts live in the `waits` table (`deadline_us`): [`Engine::keep_waking`]
//! sleeps until the soonest one and signals it; one that passed while the
//! engine was stopped fires when it starts.
//!
//! Resume links: `/hook/resume/<token>`, where the token names (run, node,
//! lineage) and carries a MAC of them under the data dir's `resume.key`
//! (blake3, keyed, 128 bits). Nothing is stored per link, an earlier step
//! can put a link in an email before the approval starts, and a link is
//! usable once because the approval is decided once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use sluice_api::{Decision, RunOn, Signalled};
use sluice_nodes as nodes;
use tokio::sync::oneshot;

use super::driver::Wake;
use super::{Engine, Error, Result};
use crate::machine::Status;

/// A decision, or the timeout, for a run's approval. The node, lineage and
/// activation narrow which one; none is needed when only one waits.
#[derive(Clone, Debug)]
pub struct Signal {
    pub node: Option<String>,
    pub lineage: Option<String>,
    pub activation: Option<String>,
    pub kind: SignalKind,
}

#[derive(Clone, Debug)]
pub enum SignalKind {
    /// The body goes out on the decision's port.
    Decide(Decision, Value),
    /// The timeout passed (see `ApprovalConfig::on_timeout`).
    Timeout,
}

impl Signal {
    /// A decision for the approval `node` (any, when None).
    pub fn decide(node: Option<String>, decision: Decision, body: Value) -> Signal {
        Signal {
            node,
            lineage: None,
            activation: None,
            kind: SignalKind::Decide(decision, body),
        }
    }
}

/// Where a driver sends the outcome of a signal.
pub(super) type Reply = oneshot::Sender<Result<Signalled>>;

/// How long a signal keeps trying to reach a run whose driver is ending.
const DELIVERY: Duration = Duration::from_secs(5);

/// The trigger port's default (`sluice_server::DEFAULT_PORT`), for links
/// made where no port is bound (`sluice run`).
const DEFAULT_PORT: u16 = 4260;

/// How long a timeout that could not fire waits before it is tried again.
const RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest sleep of the timeout task between looks at the `waits` table.
const WAKE_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

impl Engine {
    /// Decides an approval of run `run_id` (see the module docs); returns
    /// once the decision is committed. Refused with [`Error::NotWaiting`]
    /// when the run waits for no such decision (it ended, it was decided
    /// already, it waits elsewhere), [`Error::AmbiguousWait`] when several
    /// approvals match.
    pub async fn signal(&self, run_id: &str, signal: Signal) -> Result<Signalled> {
        let give_up = Instant::now() + DELIVERY;
        loop {
            let (tx, rx) = oneshot::channel();
            self.deliver(run_id, Wake::Signal(signal.clone(), tx))
                .await?;
            match rx.await {
                Ok(answer) => return answer,
                // The driver ended before it read the signal (it was
                // parking, or finishing): try again once it is gone.
                Err(_) if Instant::now() < give_up => {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Err(_) => return Err(Error::Busy(self.active_runs())),
            }
        }
    }

    /// Hands `wake` to the run's driver, or takes the run up again with it.
    /// A wake dropped here (a driver ending) is retried by the caller.
    async fn deliver(&self, run_id: &str, wake: Wake) -> Result<()> {
        {
            let active = self.inner.active.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(a) = active.get(run_id) {
                if let Some(driver) = &a.wake {
                    // A closed channel drops the wake: the caller tries again.
                    driver.send(wake).ok();
                }
                return Ok(());
            }
        }
        self.resume_with(run_id, wake).await
    }

    /// Takes a run up again from its journal, with `wake` handled first.
    async fn resume_with(&self, run_id: &str, wake: Wake) -> Result<()> {
        let row = self.run_row(run_id).await?;
        if row.status.is_finished() {
            return Err(Error::NotWaiting {
                run: run_id.to_string(),
                why: format!("it already {}", row.status),
            });
        }
        if row.status == Status::Running {
            // Not parked, and no driver here: another process drives it (a
            // `sluice run`), or it resumes at the next start. Taking it up
            // here would run its steps twice.
            return Err(Error::DrivenElsewhere(run_id.to_string()));
        }
        if row.executor == RunOn::Worker {
            return Err(Error::NotWaiting {
                run: run_id.to_string(),
                why: "it runs on the shared worker, where nothing waits for a decision".into(),
            });
        }
        if row.status == Status::Waiting
            && let Wake::Signal(signal, _) = &wake
        {
            // Refused without taking the run up when no approval matches.
            let waits = self.store().open_waits(run_id).await?;
            let matches = waits.iter().any(|w| {
                signal.node.as_deref().is_none_or(|n| *w.key.node == *n)
                    && signal
                        .lineage
                        .as_deref()
                        .is_none_or(|l| *w.key.lineage == *l)
                    && signal
                        .activation
                        .as_deref()
                        .is_none_or(|a| *w.key.activation == *a)
            });
            if !matches {
                return Err(Error::NotWaiting {
                    run: run_id.to_string(),
                    why: match &signal.node {
                        Some(n) => format!("it does not wait for a decision at `{n}`"),
                        None => "it does not wait for a decision".to_string(),
                    },
                });
            }
        }
        match self.resume_queued(run_id, Some(wake)).await {
            Ok(_) => Ok(()),
            // Another caller took it up meanwhile: the wake was dropped,
            // and the caller tries again through that driver.
            Err(Error::AlreadyEnded { run, status }) => Err(Error::NotWaiting {
                run,
                why: format!("it already {status}"),
            }),
            Err(e) => Err(e),
        }
    }

    /// A run with its step attempts and the approvals it waits at (with
    /// their resume links), as the API and `sluice runs show` give it.
    pub async fn run_detail(&self, row: &sluice_store::RunRow) -> Result<sluice_api::RunDetail> {
        let records = self.store().run_records(&row.id).await?;
        let waits = if row.status.is_finished() {
            Vec::new()
        } else {
            self.store().open_waits(&row.id).await?
        };
        let waiting = waits
            .into_iter()
            .map(|w| sluice_api::Waiting {
                resume_url: self.resume_url(&row.id, &w.key.node, &w.key.lineage).ok(),
                node: w.key.node.to_string(),
                lineage: w.key.lineage.to_string(),
                activation: w.key.activation.to_string(),
                message: w.message,
                since_us: w.since_us,
                timeout_at_us: w.deadline_us,
            })
            .collect();
        Ok(crate::report::run_detail_waiting(row, &records, waiting))
    }

    /// Cancels a run parked at its approvals: it is taken up again with
    /// the cancel first, and ends `cancelled`. False when it is not parked.
    pub async fn cancel_waiting(&self, run_id: &str) -> Result<bool> {
        match self.store().get_run(run_id).await? {
            Some(row) if row.status == Status::Waiting => {}
            _ => return Ok(false),
        }
        self.resume_queued(run_id, Some(Wake::Cancel)).await?;
        Ok(true)
    }

    /// Waits until a run has ended, however long it waits for decisions
    /// meanwhile (a parent for its child).
    pub async fn wait_for_end(&self, run_id: &str) -> Result<super::RunResult> {
        let mut events = self.subscribe();
        loop {
            if let Some(handle) = self.attach(run_id) {
                let r = handle.wait().await;
                if r.status.is_finished() {
                    return Ok(r);
                }
                // Parked again: its driver is going away.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            let row = self.run_row(run_id).await?;
            if row.status.is_finished() {
                return Ok(super::RunResult {
                    id: row.id,
                    status: row.status,
                    output: row.output.unwrap_or(Value::Null),
                    error: row.error,
                    respond: None,
                });
            }
            // Until something happens to it (events can lag: look again
            // every few seconds anyway).
            let news = async {
                loop {
                    match events.recv().await {
                        Ok(e) if &*e.run == run_id => break,
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            std::future::pending::<()>().await;
                        }
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(3), news)
                .await
                .ok();
        }
    }

    /// The handle of a run this engine drives right now (None otherwise).
    pub fn attach(&self, run_id: &str) -> Option<super::RunHandle> {
        let active = self.inner.active.lock().unwrap_or_else(|e| e.into_inner());
        active.get(run_id).map(|a| super::RunHandle {
            id: run_id.to_string(),
            done: super::Outcome::Attached(a.done.clone()),
        })
    }

    /// Wakes the timeout task: a wait with a deadline was opened.
    pub(super) fn waits_changed(&self) {
        self.inner.waits_changed.notify_one();
    }

    /// Fires the timeouts of waiting approvals as they fall due, until the
    /// engine is dropped (run it on a task of its own while serving). Each
    /// fires on a task of its own: one run slow to take its timeout (queued
    /// behind its workflow's concurrency) holds up no other.
    pub async fn keep_waking(self) {
        use std::collections::HashMap;
        // Timeouts firing now (None), or that failed and wait to be tried
        // again (Some(when)).
        let busy: Arc<Mutex<HashMap<sluice_store::WaitKey, Option<Instant>>>> = Arc::default();
        loop {
            let mut pause = Duration::ZERO;
            match self.store().due_waits(nodes::now_us(), 256).await {
                Ok(due) => {
                    let now = Instant::now();
                    for w in due {
                        {
                            let mut busy = busy.lock().unwrap_or_else(|e| e.into_inner());
                            match busy.get(&w.key) {
                                Some(None) => continue,
                                Some(Some(at)) if *at > now => continue,
                                _ => {}
                            }
                            busy.insert(w.key.clone(), None);
                        }
                        tokio::spawn(fire_timeout(self.clone(), w.key, busy.clone()));
                    }
                }
                Err(e) => {
                    super::tracing_log(&format!("reading the approvals' timeouts: {e}"));
                    pause = Duration::from_secs(1);
                }
            }
            let next = match self.store().next_wait_deadline().await {
                Ok(Some(at)) => Duration::from_micros(
                    u64::try_from(at.saturating_sub(nodes::now_us())).unwrap_or(0),
                ),
                Ok(None) => WAKE_AT_LEAST_EVERY,
                Err(_) => Duration::from_secs(1),
            };
            // A due wait already firing (or waiting to be tried again)
            // needs no look before a second.
            let floor =
                if next.is_zero() && !busy.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                    Duration::from_secs(1)
                } else {
                    pause
                };
            let sleep = next.clamp(floor, WAKE_AT_LEAST_EVERY);
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = self.inner.waits_changed.notified() => {}
            }
        }
    }

    /// The data dir's key for resume links (made on first use).
    fn resume_key(&self) -> Result<[u8; 32]> {
        if let Some(k) = self.inner.resume_key.get() {
            return Ok(*k);
        }
        let key = self.store().resume_key()?;
        Ok(*self.inner.resume_key.get_or_init(|| key))
    }

    /// The token of the resume link of approval `node` in `lineage` of a run.
    pub fn resume_token(&self, run_id: &str, node: &str, lineage: &str) -> Result<String> {
        let payload = format!("{run_id}\n{node}\n{lineage}");
        let mac = mac(&self.resume_key()?, &payload);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        Ok(format!("{}.{}", b64.encode(payload), b64.encode(mac)))
    }

    /// The resume link of approval `node` in `lineage` of a run.
    pub fn resume_url(&self, run_id: &str, node: &str, lineage: &str) -> Result<String> {
        Ok(format!(
            "{}/hook/resume/{}",
            self.public_url(),
            self.resume_token(run_id, node, lineage)?
        ))
    }

    /// What a resume link's token names (run, node, lineage); None for
    /// anything this data dir did not make.
    pub fn read_resume_token(&self, token: &str) -> Option<(String, String, String)> {
        if token.len() > 1024 {
            return None;
        }
        let (payload, given) = token.split_once('.')?;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = String::from_utf8(b64.decode(payload).ok()?).ok()?;
        let given = b64.decode(given).ok()?;
        let key = self.resume_key().ok()?;
        // Compared in constant time.
        if !constant_time_eq(&mac(&key, &payload), &given) {
            return None;
        }
        let mut parts = payload.splitn(3, '\n');
        Some((
            parts.next()?.to_string(),
            parts.next()?.to_string(),
            parts.next()?.to_string(),
        ))
    }

    /// Where links to the trigger port start: `[server] public_url`, else
    /// the address it listens on. An address that listens on every
    /// interface (`0.0.0.0`, `[::]`) is no place to send anyone: such a
    /// link names this machine by its host name instead.
    pub fn public_url(&self) -> String {
        if let Some(url) = &self.settings().server.public_url {
            return url.trim_end_matches('/').to_string();
        }
        let own = self.inner.io.own_addresses();
        match own.first() {
            Some(addr) if addr.ip().is_unspecified() => match nodes::host_name() {
                Some(host) => format!("http://{host}:{}", addr.port()),
                None => format!("http://127.0.0.1:{}", addr.port()),
            },
            Some(addr) => format!("http://{addr}"),
            None => format!("http://127.0.0.1:{DEFAULT_PORT}"),
        }
    }
}

/// Fires one approval's timeout; on failure it is tried again later.
async fn fire_timeout(
    engine: Engine,
    key: sluice_store::WaitKey,
    busy: Arc<Mutex<std::collections::HashMap<sluice_store::WaitKey, Option<Instant>>>>,
) {
    let signal = Signal {
        node: Some(key.node.to_string()),
        lineage: Some(key.lineage.to_string()),
        activation: Some(key.activation.to_string()),
        kind: SignalKind::Timeout,
    };
    let retry_at = match engine.signal(&key.run_id, signal).await {
        Ok(_) => None,
        // Decided meanwhile, or a row its run left behind: never again.
        Err(Error::NotWaiting { .. } | Error::RunNotFound(_)) => {
            let journal = engine.store().journal();
            match journal.close_wait(key.clone()).await {
                Ok(()) => {
                    journal.flush().await.ok();
                    None
                }
                Err(e) => {
                    super::tracing_log(&format!("closing a stale wait: {e}"));
                    Some(Instant::now() + RETRY_TIMEOUT)
                }
            }
        }
        Err(e) => {
            super::tracing_log(&format!(
                "run {}: the timeout of `{}` could not fire (tried again in {} s): {e}",
                key.run_id,
                key.node,
                RETRY_TIMEOUT.as_secs()
            ));
            Some(Instant::now() + RETRY_TIMEOUT)
        }
    };
    let mut busy = busy.lock().unwrap_or_else(|e| e.into_inner());
    match retry_at {
        None => busy.remove(&key),
        Some(at) => busy.insert(key, Some(at)),
    };
}

fn mac(key: &[u8; 32], payload: &str) -> [u8; 16] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"sluice.resume.v1\n");
    h.update(payload.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize().as_bytes()[..16]);
    out
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
