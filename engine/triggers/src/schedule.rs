//! `trigger.schedule`: cron with seconds (6 or 7 fields), in a time zone.
//! Each fire starts a run whose id derives from (workflow, trigger, scheduled
//! time), so a fire is never started twice, even across a crash.

use std::sync::Arc;

use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};
use serde_json::{Value, json};
use sluice_model::kinds::ScheduleTrigger;
use sluice_runtime::{Engine, Plan};
use tokio::task::AbortHandle;

/// Most missed occurrences counted (the fire itself is always one).
const MAX_MISSED_COUNT: u64 = 10_000;

/// A schedule that cannot be armed; the message names the expression or
/// the time zone.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cron `{expr}`: {source}")]
    Cron { expr: String, source: CronError },
    #[error("time zone `{name}`: {source}")]
    Zone { name: String, source: jiff::Error },
    /// No next occurrence (an expression that never matches again).
    #[error(transparent)]
    Next(CronError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses a cron expression with seconds (`sec min hour dom mon dow [year]`).
pub fn parse_cron(expr: &str) -> Result<Cron> {
    let parser = CronParser::builder()
        .seconds(Seconds::Required)
        .year(Year::Optional)
        .build();
    parser.parse(expr).map_err(|source| Error::Cron {
        expr: expr.to_string(),
        source,
    })
}

fn zone(name: Option<&str>) -> Result<TimeZone> {
    match name {
        None => Ok(TimeZone::UTC),
        Some(n) => TimeZone::get(n).map_err(|source| Error::Zone {
            name: n.to_string(),
            source,
        }),
    }
}

fn next_after(cron: &Cron, tz: &TimeZone, after: Timestamp) -> Result<Timestamp> {
    let z: Zoned = after.to_zoned(tz.clone());
    cron.find_next_occurrence(&z, false)
        .map(|n| n.timestamp())
        .map_err(Error::Next)
}

/// The first occurrence of `cfg` strictly after `after_us` (Unix
/// microseconds), as Unix microseconds: the shared worker's deployed
/// schedules fire from Restate timers at these instants.
pub fn next_fire(cfg: &ScheduleTrigger, after_us: i64) -> Result<i64> {
    let cron = parse_cron(&cfg.cron)?;
    let tz = zone(cfg.timezone.as_deref())?;
    let after = Timestamp::from_microsecond(after_us).unwrap_or(Timestamp::UNIX_EPOCH);
    Ok(next_after(&cron, &tz, after)?.as_microsecond())
}

/// Unix microseconds as an RFC 3339 time (what `scheduled_at` reads).
pub fn rfc3339(us: i64) -> String {
    Timestamp::from_microsecond(us)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// How many occurrences of `cfg` fall in `(from_us, to_us]` (at most
/// [`MAX_MISSED_COUNT`]): what a late fire reports as `missed`.
pub fn count_between(cfg: &ScheduleTrigger, from_us: i64, to_us: i64) -> u64 {
    let (Ok(cron), Ok(tz)) = (parse_cron(&cfg.cron), zone(cfg.timezone.as_deref())) else {
        return 0;
    };
    let mut t = Timestamp::from_microsecond(from_us).unwrap_or(Timestamp::UNIX_EPOCH);
    let mut n = 0;
    while n < MAX_MISSED_COUNT {
        match next_after(&cron, &tz, t) {
            Ok(next) if next.as_microsecond() <= to_us => {
                n += 1;
                t = next;
            }
            _ => break,
        }
    }
    n
}

/// `catch_up`: fire once for occurrences missed since the last fire (at
/// start); not when re-arming after an edit, where the old expression's
/// history says nothing about the new one.
pub(crate) fn arm(
    engine: Engine,
    plan: Arc<Plan>,
    trigger: Arc<str>,
    cfg: &ScheduleTrigger,
    catch_up: bool,
) -> Result<AbortHandle> {
    let cron = parse_cron(&cfg.cron)?;
    let tz = zone(cfg.timezone.as_deref())?;
    // Fails now, not at the first fire, when the expression never matches.
    next_after(&cron, &tz, Timestamp::now())?;
    let task =
        tokio::spawn(async move { fire_forever(engine, plan, trigger, cron, tz, catch_up).await });
    Ok(task.abort_handle())
}

async fn fire_forever(
    engine: Engine,
    plan: Arc<Plan>,
    trigger: Arc<str>,
    cron: Cron,
    tz: TimeZone,
    catch_up: bool,
) {
    // Catch up once for what was missed while the engine was down.
    let last = if !catch_up {
        None
    } else {
        engine
            .store()
            .latest_run_for_trigger(&plan.workflow.id, &trigger)
            .await
            .ok()
            .flatten()
            .and_then(|r| {
                r.input
                    .get("scheduled_at")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<Timestamp>().ok())
            })
    };
    if let Some(last) = last {
        let now = Timestamp::now();
        let mut missed = 0u64;
        let mut latest = None;
        let mut t = last;
        while let Ok(next) = next_after(&cron, &tz, t) {
            if next > now {
                break;
            }
            if missed == MAX_MISSED_COUNT {
                // Long outage, frequent schedule: stop counting (`missed`
                // saturates) and jump to the last day to find the latest slot.
                let day_ago = now
                    .checked_sub(jiff::SignedDuration::from_hours(24))
                    .unwrap_or(now);
                if t < day_ago {
                    t = day_ago;
                    continue;
                }
            }
            missed = (missed + 1).min(MAX_MISSED_COUNT);
            latest = Some(next);
            t = next;
        }
        if let Some(scheduled) = latest {
            fire(&engine, &plan, &trigger, scheduled, missed).await;
        }
    }
    let mut after = Timestamp::now();
    loop {
        let next = match next_after(&cron, &tz, after) {
            Ok(n) => n,
            Err(e) => {
                return crate::warn(&format!(
                    "workflow `{}` schedule `{trigger}`: {e}",
                    plan.workflow.id
                ));
            }
        };
        let wait = Timestamp::now().duration_until(next);
        let wait = std::time::Duration::try_from(wait).unwrap_or(std::time::Duration::ZERO);
        tokio::time::sleep(wait).await;
        fire(&engine, &plan, &trigger, next, 0).await;
        // After a stall (a suspended laptop) occurrences may lie in the past:
        // skip them rather than fire them back to back.
        after = next.max(Timestamp::now());
    }
}

async fn fire(engine: &Engine, plan: &Arc<Plan>, trigger: &str, scheduled: Timestamp, missed: u64) {
    let key = format!(
        "{}/{trigger}/{}",
        plan.workflow.id,
        scheduled.as_microsecond()
    );
    let id = format!("s{}", &blake3::hash(key.as_bytes()).to_hex()[..24]);
    match engine.store().run_exists(&id).await {
        Ok(true) => return,
        Ok(false) => {}
        Err(e) => return crate::warn(&format!("schedule `{key}`: {e}")),
    }
    let mut message = json!({
        "scheduled_at": scheduled.to_string(),
        "fired_at": Timestamp::now().to_string(),
    });
    if missed > 0 {
        message["missed"] = json!(missed);
    }
    if let Err(e) = engine
        .start_with_id(id, plan.clone(), Some(trigger), Arc::new(message), None)
        .await
    {
        crate::warn(&format!("schedule `{key}`: cannot start a run: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_with_seconds_in_a_zone() {
        let c = parse_cron("*/2 * * * * *").unwrap();
        let t0: Timestamp = "2026-12-02T10:00:01Z".parse().unwrap();
        assert_eq!(
            next_after(&c, &TimeZone::UTC, t0).unwrap().to_string(),
            "2026-12-02T10:00:02Z"
        );
        let nine = parse_cron("0 0 9 * * *").unwrap();
        let paris = zone(Some("Europe/Paris")).unwrap();
        // 09:00 in Paris is 08:00 UTC in winter.
        assert_eq!(
            next_after(&nine, &paris, t0).unwrap().to_string(),
            "2026-12-03T08:00:00Z"
        );
    }

    #[test]
    fn bad_expressions_and_zones_are_named() {
        let e = parse_cron("* * * * *").unwrap_err().to_string();
        assert!(e.starts_with("cron `* * * * *`:"), "{e}");
        assert!(
            zone(Some("Mars/Olympus"))
                .unwrap_err()
                .to_string()
                .starts_with("time zone `Mars/Olympus`")
        );
    }
}
