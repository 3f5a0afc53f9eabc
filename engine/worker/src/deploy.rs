//! `SluiceDeploy`, the Restate virtual object that owns a deployed workflow
//! (keyed by workflow id). It holds the version deployed, arms each
//! schedule as a durable Restate timer (a delayed message to itself: no
//! missed or double fire across worker or server restarts, since Restate
//! delivers it once and the run id derives from the fire's instant), starts
//! the runs of webhook calls on the worker's hook port, and logs every run
//! it starts so the engines that follow the deployment adopt them into
//! their history. Undeploying (or deploying again) bumps a generation: the
//! timers of an older one find it gone and do nothing.

use std::sync::Arc;
use std::time::Duration;

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sluice_api::{Deployed, DeployedRun, DeployedRuns, Deployment, WORKER_PROTOCOL, WorkerRun};
use sluice_core::Plan;
use sluice_model::Workflow;
use sluice_model::kinds::{ScheduleTrigger, Trigger, WebhookTrigger};
use sluice_triggers::schedule;

use crate::run::SluiceRunClient;

/// How many runs the log keeps: an engine away for longer than that many
/// runs adopts the newest ones (and the rest stay on the worker only).
pub const LOG_KEEP: u64 = 10_000;

/// The most runs one page of the log carries.
const PAGE: u64 = 256;

/// The deployment in the object's state (`deployment`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Current {
    pub version: String,
    pub definition: String,
    pub deployed_at_us: i64,
    /// Bumped by every deploy and undeploy: a timer armed under another
    /// generation does nothing.
    pub generation: u64,
}

/// A schedule's timer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tick {
    pub generation: u64,
    pub trigger: String,
    /// The occurrence it fires for (Unix microseconds).
    pub at_us: i64,
}

/// A webhook call to start a run for (from the worker's hook port).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fire {
    pub trigger: String,
    pub input: Value,
}

/// Where to read the run log from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogFrom {
    pub from: u64,
}

pub struct SluiceDeploy;

/// The plan of a deployed definition.
pub fn plan_of(workflow: &str, definition: &str) -> Result<Arc<Plan>, String> {
    Workflow::from_json(definition)
        .map_err(|e| e.to_string())
        .and_then(|wf| Plan::new(wf).map_err(|e| e.to_string()))
        .map_err(|e| format!("workflow `{workflow}` does not read: {e}"))
}

fn schedules(plan: &Plan) -> impl Iterator<Item = (&str, &ScheduleTrigger)> {
    plan.nodes.iter().filter_map(|n| match &n.trigger {
        Some(Trigger::Schedule(c)) if !n.disabled => Some((&*n.id, c)),
        _ => None,
    })
}

fn webhooks(plan: &Plan) -> impl Iterator<Item = (&str, &WebhookTrigger)> {
    plan.nodes.iter().filter_map(|n| match &n.trigger {
        Some(Trigger::Webhook(c)) if !n.disabled => Some((&*n.id, c)),
        _ => None,
    })
}

/// A run id made from `key`: `d` and 24 hex digits (see [`sluice_api::deployed_run`]).
fn run_id(key: &str) -> String {
    format!("d{}", &blake3::hash(key.as_bytes()).to_hex()[..24])
}

/// Now, journaled (a replay reads the same instant).
async fn now(ctx: &ObjectContext<'_>) -> Result<i64, HandlerError> {
    Ok(ctx
        .run(|| async { Ok(sluice_nodes::now_us()) })
        .name("now")
        .await?)
}

fn arm(ctx: &ObjectContext<'_>, generation: u64, trigger: &str, at_us: i64, now_us: i64) {
    let delay = Duration::from_micros(u64::try_from(at_us - now_us).unwrap_or(0));
    ctx.object_client::<SluiceDeployClient>(ctx.key())
        .tick(Json(Tick {
            generation,
            trigger: trigger.to_string(),
            at_us,
        }))
        .send_after(delay);
}

/// Starts a run of the deployment (a one-way send: Restate holds it from
/// here) and logs it.
async fn start(
    ctx: &ObjectContext<'_>,
    current: &Current,
    run_id: String,
    trigger: &str,
    input: Value,
    created_at_us: i64,
) -> Result<(), HandlerError> {
    let run = WorkerRun {
        protocol: WORKER_PROTOCOL,
        engine_version: env!("CARGO_PKG_VERSION").to_string(),
        run_id: run_id.clone(),
        workflow: ctx.key().to_string(),
        definition: current.definition.clone(),
        trigger: trigger.to_string(),
        input: input.clone(),
        created_at_us,
        draft: false,
        reuse: Vec::new(),
    };
    ctx.workflow_client::<SluiceRunClient>(run_id.clone())
        .run(Json(run))
        .send();
    let n: u64 = ctx.get("n").await?.unwrap_or(0);
    ctx.set(
        &format!("r{n}"),
        Json(DeployedRun {
            run_id,
            version: current.version.clone(),
            trigger: trigger.to_string(),
            input,
            created_at_us,
        }),
    );
    if n >= LOG_KEEP {
        ctx.clear(&format!("r{}", n - LOG_KEEP));
    }
    ctx.set("n", n + 1);
    Ok(())
}

fn describe(workflow: &str, current: &Current, plan: &Plan, fires: &[(String, i64)]) -> Deployed {
    Deployed {
        workflow: workflow.to_string(),
        version: current.version.clone(),
        deployed_at_us: current.deployed_at_us,
        next_fires: fires
            .iter()
            .map(|(t, at)| (t.clone(), schedule::rfc3339(*at)))
            .collect(),
        webhooks: webhooks(plan)
            .map(|(_, c)| {
                format!(
                    "{} /hook/{workflow}/{}",
                    c.method.as_str(),
                    c.path.trim_matches('/')
                )
            })
            .collect(),
    }
}

#[restate_sdk::object]
impl SluiceDeploy {
    /// Owns `deployment` from now on (replacing what was deployed): arms
    /// its schedules; its webhooks answer on the hook port.
    #[handler]
    async fn deploy(
        &self,
        ctx: ObjectContext<'_>,
        deployment: Json<Deployment>,
    ) -> HandlerResult<Json<Deployed>> {
        let d = deployment.into_inner();
        if d.protocol != WORKER_PROTOCOL {
            return Err(TerminalError::new(format!(
                "version skew: the engine deploying `{}` speaks worker protocol {} (Sluice {}), \
                 this worker speaks {} (Sluice {}): run the same Sluice version on both",
                d.workflow,
                d.protocol,
                d.engine_version,
                WORKER_PROTOCOL,
                env!("CARGO_PKG_VERSION")
            ))
            .into());
        }
        if d.workflow != ctx.key() {
            return Err(TerminalError::new(format!(
                "the deployment of `{}` was sent to `{}`",
                d.workflow,
                ctx.key()
            ))
            .into());
        }
        let plan = plan_of(&d.workflow, &d.definition).map_err(TerminalError::new)?;
        let now = now(&ctx).await?;
        // Every schedule must arm before anything changes.
        let mut fires = Vec::new();
        for (trigger, cfg) in schedules(&plan) {
            let at = schedule::next_fire(cfg, now).map_err(|e| {
                TerminalError::new(format!(
                    "workflow `{}` trigger `{trigger}`: {e}",
                    d.workflow
                ))
            })?;
            fires.push((trigger.to_string(), at));
        }
        let generation = ctx.get::<u64>("generation").await?.unwrap_or(0) + 1;
        let current = Current {
            version: d.version,
            definition: d.definition,
            deployed_at_us: now,
            generation,
        };
        ctx.set("generation", generation);
        ctx.set("deployment", Json(current.clone()));
        for (trigger, at) in &fires {
            arm(&ctx, generation, trigger, *at, now);
        }
        Ok(Json(describe(&d.workflow, &current, &plan, &fires)))
    }

    /// Stops the deployment: its timers find it gone, its webhooks answer
    /// 404. Its log stays for the engines still reading it. Whether it was
    /// deployed.
    #[handler]
    async fn undeploy(&self, ctx: ObjectContext<'_>) -> HandlerResult<bool> {
        if ctx.get::<Json<Current>>("deployment").await?.is_none() {
            return Ok(false);
        }
        let generation = ctx.get::<u64>("generation").await?.unwrap_or(0) + 1;
        ctx.set("generation", generation);
        ctx.clear("deployment");
        Ok(true)
    }

    /// A schedule's timer: starts the run of its occurrence, then arms the
    /// next one. Late (the server was down): fires once, `missed` saying
    /// how many occurrences passed meanwhile, and keeps its pace from now.
    #[handler]
    async fn tick(&self, ctx: ObjectContext<'_>, tick: Json<Tick>) -> HandlerResult<()> {
        let tick = tick.into_inner();
        let Some(Json(current)) = ctx.get::<Json<Current>>("deployment").await? else {
            return Ok(());
        };
        if current.generation != tick.generation {
            return Ok(());
        }
        let Ok(plan) = plan_of(ctx.key(), &current.definition) else {
            return Ok(());
        };
        let Some((_, cfg)) = schedules(&plan).find(|(t, _)| *t == tick.trigger) else {
            return Ok(());
        };
        let now = now(&ctx).await?;
        let mut input = json!({
            "scheduled_at": schedule::rfc3339(tick.at_us),
            "fired_at": schedule::rfc3339(now),
        });
        let missed = schedule::count_between(cfg, tick.at_us, now);
        if missed > 0 {
            input["missed"] = json!(missed);
        }
        let id = run_id(&format!(
            "schedule/{}/{}/{}",
            ctx.key(),
            tick.trigger,
            tick.at_us
        ));
        start(&ctx, &current, id, &tick.trigger, input, now).await?;
        if let Ok(next) = schedule::next_fire(cfg, tick.at_us.max(now)) {
            arm(&ctx, tick.generation, &tick.trigger, next, now);
        }
        Ok(())
    }

    /// A webhook call: starts its run; the run id.
    #[handler]
    async fn fire(&self, ctx: ObjectContext<'_>, fire: Json<Fire>) -> HandlerResult<String> {
        let fire = fire.into_inner();
        let not_here = || {
            TerminalError::new_with_code(
                404,
                format!("no deployed webhook `{}` in `{}`", fire.trigger, ctx.key()),
            )
        };
        let Some(Json(current)) = ctx.get::<Json<Current>>("deployment").await? else {
            return Err(not_here().into());
        };
        let plan = plan_of(ctx.key(), &current.definition).map_err(TerminalError::new)?;
        if !webhooks(&plan).any(|(t, _)| t == fire.trigger) {
            return Err(not_here().into());
        }
        let now = now(&ctx).await?;
        let id = run_id(&format!("hook/{}", ctx.invocation_id()));
        start(&ctx, &current, id.clone(), &fire.trigger, fire.input, now).await?;
        Ok(id)
    }

    /// What is deployed (null: nothing).
    #[handler]
    async fn get(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Option<Current>>> {
        Ok(Json(
            ctx.get::<Json<Current>>("deployment")
                .await?
                .map(Json::into_inner),
        ))
    }

    /// The run log from `from` on (a page at most; entries dropped past
    /// [`LOG_KEEP`] are skipped).
    #[handler]
    async fn log(
        &self,
        ctx: SharedObjectContext<'_>,
        from: Json<LogFrom>,
    ) -> HandlerResult<Json<DeployedRuns>> {
        let total: u64 = ctx.get("n").await?.unwrap_or(0);
        let from = from.into_inner().from.max(total.saturating_sub(LOG_KEEP));
        let mut runs = Vec::new();
        for i in from..total.min(from.saturating_add(PAGE)) {
            if let Some(Json(r)) = ctx.get::<Json<DeployedRun>>(&format!("r{i}")).await? {
                runs.push(r);
            }
        }
        Ok(Json(DeployedRuns { from, runs, total }))
    }
}
