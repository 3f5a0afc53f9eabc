//! What a template would evaluate to on a run's data: the editor's live
//! preview under a template field, and the paths it reads that the data
//! does not have. It builds the same context a step sees (`input`,
//! `nodes`, `run`, `vars`) from a run as the API reports it, and evaluates
//! with the engine's own template code, so the preview is what a run of the
//! same data produces.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use sluice_api::{RunDetail, Step, StepStatus};

use crate::template::{self, Missing, NodeOutputs, Scope};

/// Outputs of the nodes of one run, by node id.
#[derive(Debug, Default)]
pub struct RunOutputs(BTreeMap<String, Arc<Value>>);

impl RunOutputs {
    /// Messages by node id.
    pub fn from_messages(messages: BTreeMap<String, Value>) -> RunOutputs {
        RunOutputs(
            messages
                .into_iter()
                .map(|(k, v)| (k, Arc::new(v)))
                .collect(),
        )
    }
}

impl NodeOutputs for RunOutputs {
    fn get(&self, id: &str) -> Option<Arc<Value>> {
        self.0.get(id).cloned()
    }
    fn ids(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

/// The message a step sent on: its output is keyed by port, and a step
/// sends on one port (the first, if a kind ever sends on several).
pub fn message_of(step: &Step) -> Option<&Value> {
    match step.output.as_ref()? {
        Value::Object(ports) => ports.values().next(),
        _ => None,
    }
}

/// The data a step of `node` saw in `run`, or pinned data for it: what a
/// preview evaluates against.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Data {
    /// The node's input.
    pub input: Option<Value>,
    /// The messages of the nodes before it, by id.
    pub nodes: BTreeMap<String, Value>,
    /// The template context `run`.
    pub run: Value,
}

impl Data {
    /// `node`'s data in `run`: its input (its last attempt that has one) and
    /// the messages of every node that finished before it, on the same
    /// lineage where there are several (inside a split).
    pub fn of_run(run: &RunDetail, node: &str) -> Data {
        let own = run
            .steps
            .iter()
            .rev()
            .find(|s| s.node == node && s.input.is_some());
        let lineage = own.map_or("", |s| s.lineage.as_str());
        let mut nodes = BTreeMap::new();
        for s in &run.steps {
            if s.node == node || s.status != StepStatus::Succeeded {
                continue;
            }
            let Some(m) = message_of(s) else { continue };
            // The same lineage, or an enclosing one (a node before a split).
            let related = lineage.starts_with(s.lineage.as_str());
            if related || !nodes.contains_key(&s.node) {
                nodes.insert(s.node.clone(), m.clone());
            }
        }
        Data {
            input: own.and_then(|s| s.input.clone()),
            nodes,
            run: run_info(
                &run.run.id,
                &run.run.workflow,
                &run.run.trigger,
                run.run.created_at_us,
            ),
        }
    }

    /// The template context, with the workflow's `vars`.
    pub fn scope(&self, vars: &Value) -> Scope {
        Scope {
            input: Arc::new(self.input.clone().unwrap_or(Value::Null)),
            nodes: Arc::new(RunOutputs::from_messages(self.nodes.clone())),
            run: Arc::new(self.run.clone()),
            vars: Arc::new(vars.clone()),
        }
    }
}

/// A template's value on some data, and the paths it reads that are not
/// there.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    pub value: Result<Value, template::Error>,
    pub missing: Vec<String>,
}

/// Evaluates a config value (a template string, or an object or array
/// with templates inside) as a step would.
pub fn preview(v: &Value, scope: &Scope, missing: Missing) -> Preview {
    let value = template::compile(v, &[], missing)
        .map_err(|(_, e)| e)
        .and_then(|c| c.eval(scope))
        .map(|v| (*v).clone());
    let mut paths = Vec::new();
    strings(v, &mut |s| {
        for p in template::missing_paths(s, scope) {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
    });
    Preview {
        value,
        missing: paths,
    }
}

fn strings(v: &Value, visit: &mut impl FnMut(&str)) {
    match v {
        Value::String(s) => visit(s),
        Value::Array(items) => items.iter().for_each(|x| strings(x, visit)),
        Value::Object(map) => map.values().for_each(|x| strings(x, visit)),
        _ => {}
    }
}

/// The template context `run`: `id`, `workflow`, `trigger`, `started_at`
/// (RFC 3339, UTC). The engine builds it with this function too.
pub fn run_info(id: &str, workflow: &str, trigger: &str, started_at_us: i64) -> Value {
    json!({"id": id, "workflow": workflow, "trigger": trigger, "started_at": rfc3339(started_at_us)})
}

/// Microseconds since the Unix epoch as RFC 3339 in UTC, the fraction
/// without trailing zeros (`2026-12-04T09:37:33.12Z`); None outside the
/// years 0 to 9999.
pub fn rfc3339(us: i64) -> Option<String> {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return None;
    }
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    );
    if micros != 0 {
        let frac = format!("{:06}", micros);
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            rfc3339(1_796_376_000_123_400).as_deref(),
            Some("2026-12-04T09:20:00.1234Z")
        );
        assert_eq!(
            rfc3339(951_782_400_000_001).as_deref(),
            Some("2000-02-29T00:00:00.000001Z")
        );
        assert_eq!(rfc3339(-1).as_deref(), Some("1969-12-31T23:59:59.999999Z"));
        assert_eq!(rfc3339(i64::MAX), None);
    }
}
