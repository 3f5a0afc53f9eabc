//! The runs page's filters, as the page's URL (`#/runs?status=failed&…`,
//! so every view can be linked) and as the API's query
//! (`GET /api/v1/runs?…`). Pure, tested natively.

/// How far back the runs page looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    Hour,
    Day,
    Week,
}

impl Since {
    pub const ALL: [Since; 3] = [Since::Hour, Since::Day, Since::Week];

    pub fn as_str(self) -> &'static str {
        match self {
            Since::Hour => "1h",
            Since::Day => "24h",
            Since::Week => "7d",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Since::Hour => "the last hour",
            Since::Day => "the last 24 hours",
            Since::Week => "the last 7 days",
        }
    }

    fn micros(self) -> i64 {
        const HOUR: i64 = 3_600_000_000;
        match self {
            Since::Hour => HOUR,
            Since::Day => 24 * HOUR,
            Since::Week => 7 * 24 * HOUR,
        }
    }

    fn parse(s: &str) -> Option<Since> {
        Since::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// The filters of the runs page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunsQuery {
    pub workflow: Option<String>,
    /// `running`, `waiting`, `succeeded`, `failed`, `cancelled`.
    pub status: Option<String>,
    /// A trigger node's id.
    pub trigger: Option<String>,
    /// Runs of drafts only (true) or of published versions only (false).
    pub draft: Option<bool>,
    /// Text in the input or output.
    pub text: Option<String>,
    pub since: Option<Since>,
}

impl RunsQuery {
    /// Reads the part of the URL after `#/runs?` (unknown keys and bad
    /// values are ignored: a link from an older editor still opens).
    pub fn parse(query: &str) -> RunsQuery {
        let mut q = RunsQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v);
            if v.is_empty() {
                continue;
            }
            match k {
                "workflow" => q.workflow = Some(v),
                "status" => q.status = Some(v),
                "trigger" => q.trigger = Some(v),
                "draft" => q.draft = v.parse().ok(),
                "text" => q.text = Some(v),
                "since" => q.since = Since::parse(&v),
                _ => {}
            }
        }
        q
    }

    fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut push = |k: &'static str, v: Option<String>| {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                out.push((k, v));
            }
        };
        push("workflow", self.workflow.clone());
        push("status", self.status.clone());
        push("trigger", self.trigger.clone());
        push("draft", self.draft.map(|d| d.to_string()));
        push("text", self.text.clone());
        push("since", self.since.map(|s| s.as_str().to_string()));
        out
    }

    /// The page's URL hash.
    pub fn to_hash(&self) -> String {
        let pairs = self.pairs();
        if pairs.is_empty() {
            return "#/runs".to_string();
        }
        format!("#/runs?{}", join(&pairs))
    }

    /// The API path listing these runs, `now_us` being the time now.
    pub fn api_path(&self, now_us: i64, limit: u32) -> String {
        let mut pairs: Vec<(&'static str, String)> = self
            .pairs()
            .into_iter()
            .filter(|(k, _)| *k != "since")
            .collect();
        if let Some(s) = self.since {
            pairs.push(("since_us", (now_us - s.micros()).to_string()));
        }
        pairs.push(("limit", limit.to_string()));
        format!("/api/v1/runs?{}", join(&pairs))
    }
}

fn join(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` (and `+` as a space); bad escapes stay as they are.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_round_trip_through_the_url() {
        let q = RunsQuery {
            workflow: Some("orders".into()),
            status: Some("failed".into()),
            trigger: Some("hook".into()),
            draft: Some(false),
            text: Some("Ana & Bo 100%".into()),
            since: Some(Since::Day),
        };
        let hash = q.to_hash();
        assert_eq!(
            hash,
            "#/runs?workflow=orders&status=failed&trigger=hook&draft=false&text=Ana%20%26%20Bo%20100%25&since=24h"
        );
        assert_eq!(RunsQuery::parse(hash.strip_prefix("#/runs?").unwrap()), q);
        assert_eq!(RunsQuery::default().to_hash(), "#/runs");
        assert_eq!(RunsQuery::parse(""), RunsQuery::default());
        // Unknown keys, bad values and bad escapes are ignored or kept.
        let odd = RunsQuery::parse("color=red&draft=maybe&since=1y&text=a%2&status=");
        assert_eq!(odd.text.as_deref(), Some("a%2"));
        assert_eq!(odd.draft, None);
        assert_eq!(odd.since, None);
        assert_eq!(odd.status, None);
        assert_eq!(
            RunsQuery::parse("text=caf%C3%A9+au+lait").text.as_deref(),
            Some("café au lait")
        );
    }

    #[test]
    fn the_api_gets_a_time_not_a_period() {
        let q = RunsQuery {
            status: Some("succeeded".into()),
            since: Some(Since::Hour),
            ..RunsQuery::default()
        };
        assert_eq!(
            q.api_path(10_000_000_000, 100),
            "/api/v1/runs?status=succeeded&since_us=6400000000&limit=100"
        );
        assert_eq!(
            RunsQuery::default().api_path(0, 50),
            "/api/v1/runs?limit=50"
        );
    }
}
