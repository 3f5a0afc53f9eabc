//! Engine metrics, rendered in the Prometheus text format: runs by workflow
//! and status, step durations by node kind, runs queued and active.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Upper bounds of the step-duration buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Counts per bucket (not cumulative), then the overflow.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

/// Counters the engine updates as it works.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Runs that ended, by workflow, then status (a workflow's name is
    /// copied once, not per run).
    runs: Mutex<BTreeMap<String, BTreeMap<&'static str, u64>>>,
    steps: Mutex<BTreeMap<&'static str, Histogram>>,
    queued: AtomicI64,
    /// Model tokens by (workflow, model, direction).
    ai_tokens: Mutex<BTreeMap<(String, String, &'static str), u64>>,
}

/// Series of `sluice_ai_tokens_total` beyond which new models count as `other`.
const MAX_AI_SERIES: usize = 1000;

impl Metrics {
    pub(crate) fn run_finished(&self, workflow: &str, status: &'static str) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let by_status = match runs.get_mut(workflow) {
            Some(by_status) => by_status,
            None => runs.entry(workflow.to_string()).or_default(),
        };
        *by_status.entry(status).or_default() += 1;
    }

    pub(crate) fn step_finished(&self, kind: &'static str, took: Duration) {
        let secs = took.as_secs_f64();
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        let h = steps.entry(kind).or_default();
        let i = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        h.counts[i] += 1;
        h.sum += secs;
    }

    pub(crate) fn ai_tokens(&self, workflow: &str, model: &str, input: u64, output: u64) {
        let mut tokens = self.ai_tokens.lock().unwrap_or_else(|e| e.into_inner());
        let known = tokens.contains_key(&(workflow.to_string(), model.to_string(), "input"));
        let model = if known || tokens.len() < MAX_AI_SERIES {
            model
        } else {
            "other"
        };
        for (direction, n) in [("input", input), ("output", output)] {
            *tokens
                .entry((workflow.to_string(), model.to_string(), direction))
                .or_default() += n;
        }
    }

    pub(crate) fn queued(&self, delta: i64) {
        self.queued.fetch_add(delta, Ordering::Relaxed);
    }

    /// The Prometheus text exposition (version 0.0.4).
    pub fn render(&self, active_runs: usize) -> String {
        let mut out = String::new();
        macro_rules! w {
            ($($arg:tt)*) => {{
                out.push_str(&format!($($arg)*));
                out.push('\n');
            }};
        }
        w!("# HELP sluice_runs_total Runs that ended, by workflow and status.");
        w!("# TYPE sluice_runs_total counter");
        for (workflow, by_status) in self.runs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (status, n) in by_status {
                w!(
                    "sluice_runs_total{{workflow=\"{}\",status=\"{status}\"}} {n}",
                    escape(workflow)
                );
            }
        }
        w!(
            "# HELP sluice_ai_tokens_total Tokens language models read and wrote (ai.chat), by workflow and model."
        );
        w!("# TYPE sluice_ai_tokens_total counter");
        for ((workflow, model, direction), n) in self
            .ai_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            w!(
                "sluice_ai_tokens_total{{workflow=\"{}\",model=\"{}\",direction=\"{direction}\"}} {n}",
                escape(workflow),
                escape(model)
            );
        }
        w!("# HELP sluice_step_duration_seconds Time a step took to execute, by node kind.");
        w!("# TYPE sluice_step_duration_seconds histogram");
        for (kind, h) in self.steps.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let mut cumulative = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                cumulative += h.counts[i];
                w!(
                    "sluice_step_duration_seconds_bucket{{kind=\"{kind}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            cumulative += h.counts[BUCKETS.len()];
            w!("sluice_step_duration_seconds_bucket{{kind=\"{kind}\",le=\"+Inf\"}} {cumulative}");
            w!(
                "sluice_step_duration_seconds_sum{{kind=\"{kind}\"}} {}",
                h.sum
            );
            w!("sluice_step_duration_seconds_count{{kind=\"{kind}\"}} {cumulative}");
        }
        w!("# HELP sluice_runs_queued Runs waiting for their workflow's concurrency limit.");
        w!("# TYPE sluice_runs_queued gauge");
        w!(
            "sluice_runs_queued {}",
            self.queued.load(Ordering::Relaxed).max(0)
        );
        w!("# HELP sluice_runs_active Runs in progress (executing or queued).");
        w!("# TYPE sluice_runs_active gauge");
        w!("sluice_runs_active {active_runs}");
        out
    }
}

/// Label values escape `\`, `"` and newlines.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges() {
        let m = Metrics::default();
        m.run_finished("orders", "succeeded");
        m.run_finished("orders", "succeeded");
        m.run_finished("a\"b", "failed");
        m.ai_tokens("orders", "llama3.2", 12, 5);
        m.ai_tokens("orders", "llama3.2", 1, 2);
        m.step_finished("data.set", Duration::from_micros(50));
        m.step_finished("data.set", Duration::from_millis(2));
        m.queued(3);
        m.queued(-1);
        let text = m.render(7);
        assert!(
            text.contains("sluice_runs_total{workflow=\"orders\",status=\"succeeded\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("sluice_runs_total{workflow=\"a\\\"b\",status=\"failed\"} 1\n"),
            "{text}"
        );
        for line in [
            "sluice_ai_tokens_total{workflow=\"orders\",model=\"llama3.2\",direction=\"input\"} 13\n",
            "sluice_ai_tokens_total{workflow=\"orders\",model=\"llama3.2\",direction=\"output\"} 7\n",
        ] {
            assert!(text.contains(line), "{text}");
        }
        assert!(
            text.contains(
                "sluice_step_duration_seconds_bucket{kind=\"data.set\",le=\"0.0001\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "sluice_step_duration_seconds_bucket{kind=\"data.set\",le=\"0.0025\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("sluice_step_duration_seconds_count{kind=\"data.set\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("sluice_runs_queued 2\n"), "{text}");
        assert!(text.contains("sluice_runs_active 7\n"), "{text}");
    }
}
