//! Which lines of a run's log the run panel shows: at or above a level,
//! of one node, containing some text. Pure, so it is tested without a
//! browser.

use sluice_api::LogLine;

/// The levels, lowest first (`util.log`'s `level`; the engine logs `info`
/// and `warn`, and `error` for failures).
pub const LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];

/// A level's place in [`LEVELS`]; an unknown level counts as `info`.
pub fn rank(level: &str) -> usize {
    match level.to_ascii_lowercase().as_str() {
        "debug" | "trace" => 0,
        "warn" | "warning" => 2,
        "error" | "fatal" => 3,
        _ => 1,
    }
}

/// What the log view shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// The lowest level shown (an index into [`LEVELS`]).
    pub min: usize,
    /// Only this node's lines (empty: every node's).
    pub node: String,
    /// Only lines containing this, in any case (empty: all).
    pub text: String,
}

impl LogFilter {
    pub fn shows(&self, line: &LogLine) -> bool {
        rank(&line.level) >= self.min
            && (self.node.is_empty() || line.node == self.node)
            && (self.text.is_empty()
                || line
                    .message
                    .to_lowercase()
                    .contains(&self.text.to_lowercase()))
    }
}

/// How many lines there are of each level.
pub fn counts(lines: &[LogLine]) -> [usize; 4] {
    let mut c = [0; 4];
    for l in lines {
        c[rank(&l.level)] += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(node: &str, level: &str, message: &str) -> LogLine {
        LogLine {
            node: node.into(),
            lineage: String::new(),
            level: level.into(),
            message: message.into(),
            at_us: 0,
        }
    }

    #[test]
    fn lines_are_filtered_by_level_node_and_text() {
        let lines = [
            line("fetch", "debug", "sent GET /orders"),
            line("fetch", "info", "200 OK"),
            line("check", "warn", "Total is Zero"),
            line("check", "error", "no customer"),
            line("ai", "chunk", "a model's words"),
        ];
        let shown = |f: &LogFilter| -> Vec<&str> {
            lines
                .iter()
                .filter(|l| f.shows(l))
                .map(|l| l.message.as_str())
                .collect()
        };
        assert_eq!(shown(&LogFilter::default()).len(), 5);
        let warnings = LogFilter {
            min: 2,
            ..Default::default()
        };
        assert_eq!(shown(&warnings), ["Total is Zero", "no customer"]);
        let fetch = LogFilter {
            node: "fetch".into(),
            ..Default::default()
        };
        assert_eq!(shown(&fetch), ["sent GET /orders", "200 OK"]);
        let text = LogFilter {
            text: "zero".into(),
            ..Default::default()
        };
        assert_eq!(shown(&text), ["Total is Zero"]);
        // An unknown level counts as info: shown from info up, not from warn.
        let info = LogFilter {
            min: 1,
            ..Default::default()
        };
        assert!(shown(&info).contains(&"a model's words"));
        assert!(!shown(&warnings).contains(&"a model's words"));
        assert_eq!(counts(&lines), [1, 2, 1, 1]);
    }
}
