//! Run history retention and the data dir's storage: how long finished runs
//! are kept ([`Retention`], from `config.toml [runs]` and a workflow's
//! `settings.runs`), and what `GET /api/v1/storage` and `sluice storage`
//! report ([`StorageReport`]).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a finished run is kept after it started: a span, or forever.
///
/// Written as a number and a unit, or several: `"90s"`, `"30m"`, `"12h"`,
/// `"14d"`, `"2w"`, `"1d12h"`; or `"forever"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeepFor {
    Forever,
    Span(Duration),
}

impl KeepFor {
    /// The span, `None` for forever.
    pub fn span(self) -> Option<Duration> {
        match self {
            KeepFor::Forever => None,
            KeepFor::Span(d) => Some(d),
        }
    }
}

/// Why a span of `KeepFor` or a `KeepMax` cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRetention(pub String);

impl fmt::Display for BadRetention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadRetention {}

impl std::str::FromStr for KeepFor {
    type Err = BadRetention;

    fn from_str(s: &str) -> Result<KeepFor, BadRetention> {
        let text = s.trim();
        if text.eq_ignore_ascii_case("forever") {
            return Ok(KeepFor::Forever);
        }
        let bad = || {
            BadRetention(format!(
                "`{s}` is not a span: write a number and a unit (s, m, h, d, w), e.g. \"14d\" or \"1d12h\", or \"forever\""
            ))
        };
        if text.is_empty() {
            return Err(bad());
        }
        let mut secs: u64 = 0;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
            if digits == 0 {
                return Err(bad());
            }
            let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let per: u64 = match rest[..unit_len].trim() {
                "s" => 1,
                "m" => 60,
                "h" => 3_600,
                "d" => 86_400,
                "w" => 7 * 86_400,
                _ => return Err(bad()),
            };
            rest = &rest[unit_len..];
            secs = n
                .checked_mul(per)
                .and_then(|v| secs.checked_add(v))
                .ok_or_else(bad)?;
        }
        Ok(KeepFor::Span(Duration::from_secs(secs)))
    }
}

impl fmt::Display for KeepFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = match self {
            KeepFor::Forever => return f.write_str("forever"),
            KeepFor::Span(d) => d.as_secs(),
        };
        for (unit, per) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
            if secs > 0 && secs % per == 0 {
                return write!(f, "{}{unit}", secs / per);
            }
        }
        write!(f, "{secs}s")
    }
}

impl Serialize for KeepFor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for KeepFor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KeepFor, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How many finished runs of a workflow are kept, newest first: a number
/// (0 keeps none), or `"unlimited"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeepMax {
    Unlimited,
    Runs(u64),
}

impl KeepMax {
    pub fn limit(self) -> Option<u64> {
        match self {
            KeepMax::Unlimited => None,
            KeepMax::Runs(n) => Some(n),
        }
    }
}

impl Serialize for KeepMax {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            KeepMax::Unlimited => s.serialize_str("unlimited"),
            KeepMax::Runs(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for KeepMax {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<KeepMax, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(i64),
            S(String),
        }
        let bad = |what: &dyn fmt::Display| {
            serde::de::Error::custom(format!(
                "`{what}` is not a number of runs: write a count (0 keeps none) or \"unlimited\""
            ))
        };
        match Raw::deserialize(d)? {
            Raw::N(n) => u64::try_from(n).map(KeepMax::Runs).map_err(|_| bad(&n)),
            Raw::S(s) if s.trim().eq_ignore_ascii_case("unlimited") => Ok(KeepMax::Unlimited),
            Raw::S(s) => Err(bad(&s)),
        }
    }
}

/// How long finished runs are kept. Every field is optional where it
/// overrides (a workflow's `settings.runs`); `config.toml [runs]` gives the
/// defaults ([`Retention::DEFAULT`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct RetentionOverride {
    /// Finished runs that started longer ago than this go.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "14d"))]
    pub keep_for: Option<KeepFor>,
    /// Beyond this many finished runs of a workflow, the oldest go.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>, example = 100000))]
    pub keep_max: Option<KeepMax>,
    /// Failed runs are kept this long instead of `keep_for` (`keep_max`
    /// still applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, example = "30d"))]
    pub keep_failed_for: Option<KeepFor>,
}

/// The retention in force for a workflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Retention {
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "14d"))]
    pub keep_for: KeepFor,
    #[cfg_attr(feature = "openapi", schema(value_type = Object, example = 100000))]
    pub keep_max: KeepMax,
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "30d"))]
    pub keep_failed_for: KeepFor,
}

impl Retention {
    /// Two weeks of history, 100,000 finished runs per workflow at most;
    /// failed runs a month.
    pub const DEFAULT: Retention = Retention {
        keep_for: KeepFor::Span(Duration::from_secs(14 * 86_400)),
        keep_max: KeepMax::Runs(100_000),
        keep_failed_for: KeepFor::Span(Duration::from_secs(30 * 86_400)),
    };

    /// These defaults with `o`'s fields on top.
    pub fn with(self, o: &RetentionOverride) -> Retention {
        Retention {
            keep_for: o.keep_for.unwrap_or(self.keep_for),
            keep_max: o.keep_max.unwrap_or(self.keep_max),
            keep_failed_for: o.keep_failed_for.unwrap_or(self.keep_failed_for),
        }
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention::DEFAULT
    }
}

/// `GET /api/v1/storage`: what the data dir holds and what retention did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StorageReport {
    pub data_dir: String,
    /// `sluice.db`: its pages in use and free, and its WAL file.
    pub database: DatabaseSize,
    /// `blobs/`: large values and binary data.
    pub blobs: BlobsSize,
    pub runs: RunCounts,
    /// The defaults of `config.toml [runs]`.
    pub retention: Retention,
    /// The workflows whose `settings.runs` override them.
    pub overrides: Vec<WorkflowRetention>,
    /// The last pruning pass of this process (none yet: null).
    pub last_prune: Option<PruneReport>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DatabaseSize {
    /// Bytes of the database file (pages in use and free pages).
    pub file_bytes: u64,
    /// Bytes of free pages inside it: reused by new rows, and returned to
    /// the OS over time when `incremental` is true.
    pub free_bytes: u64,
    /// Bytes of the write-ahead log.
    pub wal_bytes: u64,
    /// Whether free pages go back to the OS by themselves (databases made
    /// by Sluice 0.1 before retention existed: not until `sluice storage
    /// compact`).
    pub incremental: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlobsSize {
    pub count: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunCounts {
    /// Runs kept, finished or not.
    pub total: u64,
    /// Runs in progress (never pruned).
    pub running: u64,
    /// When the oldest kept run started (microseconds since the epoch).
    pub oldest_started_at_us: Option<i64>,
    /// Runs kept per workflow, most first.
    pub by_workflow: Vec<WorkflowRuns>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowRuns {
    pub workflow: String,
    pub runs: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowRetention {
    pub workflow: String,
    pub retention: Retention,
}

/// What one pruning pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PruneReport {
    /// When it ended (microseconds since the epoch).
    pub at_us: i64,
    pub runs_deleted: u64,
    /// Pinned workflow versions no kept run needs any more.
    pub versions_deleted: u64,
    pub blobs_deleted: u64,
    pub blob_bytes_freed: u64,
    /// Bytes of free database pages given back to the OS.
    pub database_bytes_returned: u64,
    pub took_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_and_print_in_their_units() {
        let day = 86_400;
        for (text, secs) in [
            ("14d", 14 * day),
            ("2w", 14 * day),
            ("1d12h", day + 12 * 3_600),
            ("90s", 90),
            (" 30m ", 1_800),
        ] {
            assert_eq!(
                text.parse::<KeepFor>().unwrap(),
                KeepFor::Span(Duration::from_secs(secs)),
                "{text}"
            );
        }
        assert_eq!("Forever".parse::<KeepFor>().unwrap(), KeepFor::Forever);
        assert_eq!(
            KeepFor::Span(Duration::from_secs(14 * day)).to_string(),
            "14d"
        );
        assert_eq!(KeepFor::Span(Duration::from_secs(90)).to_string(), "90s");
        for bad in ["", "14", "d", "14x", "-1d", "1.5d", "99999999999999999999w"] {
            let e = bad.parse::<KeepFor>().unwrap_err();
            assert!(e.0.contains("is not a span"), "{bad}: {e}");
        }
    }

    #[test]
    fn overrides_read_strictly_and_lay_over_the_defaults() {
        let o: RetentionOverride =
            serde_json::from_str(r#"{"keep_max": 0, "keep_failed_for": "forever"}"#).unwrap();
        let r = Retention::DEFAULT.with(&o);
        assert_eq!(r.keep_max, KeepMax::Runs(0));
        assert_eq!(r.keep_failed_for, KeepFor::Forever);
        assert_eq!(r.keep_for, Retention::DEFAULT.keep_for);
        let u: RetentionOverride = serde_json::from_str(r#"{"keep_max": "unlimited"}"#).unwrap();
        assert_eq!(u.keep_max, Some(KeepMax::Unlimited));
        for bad in [
            r#"{"keep_max": -3}"#,
            r#"{"keep_max": "lots"}"#,
            r#"{"keep_for": "soon"}"#,
            r#"{"keep": "14d"}"#,
        ] {
            assert!(
                serde_json::from_str::<RetentionOverride>(bad).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            serde_json::to_value(Retention::DEFAULT).unwrap(),
            serde_json::json!({"keep_for": "14d", "keep_max": 100000, "keep_failed_for": "30d"})
        );
    }
}
