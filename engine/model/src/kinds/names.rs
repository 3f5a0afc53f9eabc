//! How the editor names the kinds to people: a display name, the words
//! people search for them by (n8n's and Node-RED's names among them), and
//! the search over those, with a suggestion when nothing matches.

use super::{CATALOG, KindSpec};

/// `(kind, display name, synonyms)`. Every kind of the catalog has one
/// (checked by a test); synonyms are lower case.
static NAMES: &[(&str, &str, &[&str])] = &[
    (
        "trigger.manual",
        "Manual trigger",
        &["start", "button", "run by hand", "click", "inject"],
    ),
    (
        "trigger.workflow",
        "Called by a workflow",
        &[
            "execute workflow trigger",
            "subworkflow trigger",
            "called",
            "tool",
            "link in",
        ],
    ),
    (
        "trigger.webhook",
        "Webhook",
        &["http in", "endpoint", "incoming request", "post", "hook"],
    ),
    (
        "trigger.schedule",
        "Schedule",
        &["cron", "timer", "interval", "every", "daily", "hourly"],
    ),
    (
        "trigger.file",
        "File watch",
        &["folder", "directory", "file changed", "watch", "new file"],
    ),
    (
        "trigger.error",
        "Error trigger",
        &["failure", "failed run", "alert", "catch", "on error"],
    ),
    (
        "flow.if",
        "Condition",
        &["if", "branch", "filter", "else", "when", "compare"],
    ),
    (
        "flow.switch",
        "Switch",
        &["route", "router", "case", "cases", "match"],
    ),
    (
        "flow.merge",
        "Merge",
        &["combine", "wait for all", "zip", "join branches"],
    ),
    (
        "flow.split",
        "Split into items",
        &["loop", "for each", "iterate", "items", "split out", "batch"],
    ),
    (
        "flow.join",
        "Join items",
        &["aggregate", "collect", "gather", "end loop"],
    ),
    ("flow.wait", "Wait", &["delay", "sleep", "pause", "later"]),
    (
        "flow.approval",
        "Approval",
        &[
            "human", "review", "confirm", "sign off", "decision", "approve",
        ],
    ),
    (
        "flow.subworkflow",
        "Run a workflow",
        &[
            "execute workflow",
            "sub-workflow",
            "subworkflow",
            "call",
            "child workflow",
        ],
    ),
    (
        "data.set",
        "Set fields",
        &["edit fields", "assign", "object", "change", "set"],
    ),
    (
        "data.transform",
        "Transform with jq",
        &["jq", "reshape", "map", "convert"],
    ),
    (
        "http.request",
        "HTTP request",
        &["api", "rest", "fetch", "get", "url", "call an api", "curl"],
    ),
    (
        "email.send",
        "Send email",
        &["mail", "smtp", "e-mail", "notify"],
    ),
    (
        "ai.chat",
        "AI chat",
        &[
            "llm",
            "gpt",
            "openai",
            "language model",
            "prompt",
            "agent",
            "ollama",
        ],
    ),
    (
        "db.query",
        "Database query",
        &[
            "sql",
            "postgres",
            "postgresql",
            "mysql",
            "mariadb",
            "sqlite",
            "select",
            "insert",
        ],
    ),
    (
        "file.read",
        "Read file",
        &["open", "load", "csv", "import file"],
    ),
    (
        "file.write",
        "Write file",
        &["save", "export", "store file"],
    ),
    (
        "code.js",
        "JavaScript",
        &["js", "code", "script", "function", "program"],
    ),
    (
        "code.wasm",
        "WebAssembly",
        &["wasm", "component", "module", "rust"],
    ),
    ("util.log", "Log", &["print", "debug", "console", "trace"]),
    (
        "output.end",
        "Output",
        &["end", "result", "return", "finish", "exit"],
    ),
    (
        "output.respond",
        "Respond to webhook",
        &["response", "reply", "http response", "answer"],
    ),
];

fn entry(kind: &str) -> Option<&'static (&'static str, &'static str, &'static [&'static str])> {
    NAMES.iter().find(|(k, _, _)| *k == kind)
}

impl KindSpec {
    /// The name people see (`Condition` for `flow.if`).
    pub fn title(&self) -> &'static str {
        entry(self.kind).map_or(self.kind, |e| e.1)
    }

    /// The other words a kind is found by (`if`, `branch`…).
    pub fn synonyms(&self) -> &'static [&'static str] {
        entry(self.kind).map_or(&[], |e| e.2)
    }

    /// The summary as plain text: Markdown's code marks taken out.
    pub fn summary_text(&self) -> String {
        self.summary.replace('`', "")
    }
}

/// What a palette search found.
#[derive(Debug)]
pub struct Search {
    /// The kinds that match, best first (catalog order within a rank).
    pub matches: Vec<&'static KindSpec>,
    /// When nothing matches: the kind whose name or synonym is closest to
    /// what was typed.
    pub suggestion: Option<&'static KindSpec>,
}

/// Searches the kinds by display name, kind name, synonyms, category and
/// description. Empty: every kind, in catalog order.
pub fn search(query: &str) -> Search {
    let q = query.trim().to_lowercase();
    let mut ranked: Vec<(u8, &'static KindSpec)> = CATALOG
        .iter()
        .filter_map(|k| rank(k, &q).map(|r| (r, k)))
        .collect();
    ranked.sort_by_key(|(rank, _)| *rank);
    let matches: Vec<&'static KindSpec> = ranked.into_iter().map(|(_, k)| k).collect();
    let suggestion = if matches.is_empty() {
        closest(&q)
    } else {
        None
    };
    Search {
        matches,
        suggestion,
    }
}

/// How well `k` matches the lower-case query `q` (lower is better).
fn rank(k: &KindSpec, q: &str) -> Option<u8> {
    if q.is_empty() {
        return Some(0);
    }
    let title = k.title().to_lowercase();
    let tail = k.kind.rsplit('.').next().unwrap_or(k.kind);
    let synonyms = k.synonyms();
    if title == q || k.kind == q || tail == q || synonyms.contains(&q) {
        return Some(0);
    }
    if title.starts_with(q) || title.split_whitespace().any(|w| w.starts_with(q)) {
        return Some(1);
    }
    if k.kind.contains(q) || synonyms.iter().any(|s| s.starts_with(q)) {
        return Some(2);
    }
    if title.contains(q) || synonyms.iter().any(|s| s.contains(q)) {
        return Some(3);
    }
    let summary = k.summary_text().to_lowercase();
    if k.category.contains(q) || summary.contains(q) {
        return Some(4);
    }
    // Several words: each found somewhere.
    let haystack = format!("{title} {} {} {summary}", k.kind, synonyms.join(" "));
    let words: Vec<&str> = q.split_whitespace().collect();
    (words.len() > 1 && words.iter().all(|w| haystack.contains(w))).then_some(5)
}

/// The kind with a name, word of its name, or synonym closest to `q` by
/// edit distance (ties: catalog order).
fn closest(q: &str) -> Option<&'static KindSpec> {
    if q.is_empty() {
        return None;
    }
    CATALOG
        .iter()
        .map(|k| {
            let title = k.title().to_lowercase();
            let tail = k.kind.rsplit('.').next().unwrap_or(k.kind).to_string();
            let mut terms: Vec<String> = vec![title.clone(), tail];
            terms.extend(title.split_whitespace().map(str::to_string));
            terms.extend(k.synonyms().iter().map(|s| s.to_string()));
            let best = terms
                .iter()
                .map(|t| distance(q, t))
                .min()
                .unwrap_or(usize::MAX);
            (best, k)
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, counting an adjacent swap as one edit.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(q: &str) -> &'static str {
        search(q).matches.first().map_or("", |k| k.kind)
    }

    #[test]
    fn every_kind_has_a_name_and_synonyms_and_names_are_unique() {
        let mut titles = std::collections::HashSet::new();
        for k in CATALOG {
            assert!(entry(k.kind).is_some(), "{} has no display name", k.kind);
            assert!(
                titles.insert(k.title()),
                "{} is a second `{}`",
                k.kind,
                k.title()
            );
            for s in k.synonyms() {
                assert_eq!(*s, s.to_lowercase(), "{}: synonyms are lower case", k.kind);
            }
        }
        for (kind, _, _) in NAMES {
            assert!(
                super::super::spec(kind).is_some(),
                "a name for no kind: {kind}"
            );
        }
    }

    #[test]
    fn people_find_kinds_by_the_words_they_know() {
        assert_eq!(first("if"), "flow.if");
        assert_eq!(first("api"), "http.request");
        assert_eq!(first("Condition"), "flow.if");
        assert_eq!(first("cron"), "trigger.schedule");
        assert_eq!(first("sql"), "db.query");
        assert_eq!(first("loop"), "flow.split");
        assert_eq!(first("mail"), "email.send");
        assert_eq!(first("http"), "http.request");
        assert_eq!(first("trigger.webhook"), "trigger.webhook");
        // By description.
        assert_eq!(first("one-time link"), "flow.approval");
        assert!(
            search("decides the HTTP response")
                .matches
                .iter()
                .any(|k| k.kind == "output.respond")
        );
        // Several words, each somewhere.
        assert_eq!(first("jq program"), "data.transform");
        assert_eq!(search("").matches.len(), CATALOG.len());
    }

    #[test]
    fn nothing_matching_suggests_the_closest() {
        let s = search("shedule");
        assert!(s.matches.is_empty());
        assert_eq!(s.suggestion.map(|k| k.kind), Some("trigger.schedule"));
        assert_eq!(
            search("emial").suggestion.map(|k| k.kind),
            Some("email.send")
        );
        assert_eq!(
            search("condtion").suggestion.map(|k| k.kind),
            Some("flow.if")
        );
        assert_eq!(
            search("webhok").suggestion.map(|k| k.kind),
            Some("trigger.webhook")
        );
        assert!(search("if").suggestion.is_none());
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn summaries_read_as_text() {
        for k in CATALOG {
            assert!(!k.summary_text().contains('`'), "{}", k.kind);
        }
    }
}
