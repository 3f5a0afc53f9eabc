//! Text written for people: field names as labels (`fail_on_status` →
//! "Fail on status") and the inline Markdown of help texts and summaries
//! (code, bold, emphasis, links) as spans to draw, so no raw backtick
//! reaches the page. Pure, tested natively.

/// One run of inline Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Span {
    Text(String),
    Code(String),
    Strong(String),
    Em(String),
    /// Only `http(s)://` targets become links; others stay text.
    Link {
        text: String,
        href: String,
    },
}

/// The spans of one line of inline Markdown. Unclosed marks are text.
pub fn spans(md: &str) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    let mut text = String::new();
    let mut rest = md;
    let flush = |text: &mut String, out: &mut Vec<Span>| {
        if !text.is_empty() {
            out.push(Span::Text(std::mem::take(text)));
        }
    };
    while let Some(c) = rest.chars().next() {
        let taken = match c {
            '`' => rest[1..]
                .find('`')
                .map(|end| (Span::Code(rest[1..1 + end].to_string()), end + 2)),
            '*' if rest.starts_with("**") => rest[2..]
                .find("**")
                .filter(|end| *end > 0)
                .map(|end| (Span::Strong(rest[2..2 + end].to_string()), end + 4)),
            '*' | '_' => {
                // Emphasis only around a word: `a * b` and snake_case stay.
                let boundary = text.chars().last().is_none_or(|p| !p.is_alphanumeric());
                rest[1..]
                    .find(c)
                    .filter(|end| boundary && *end > 0 && !rest[1..].starts_with(' '))
                    .filter(|end| {
                        rest[1 + end + 1..]
                            .chars()
                            .next()
                            .is_none_or(|n| !n.is_alphanumeric())
                    })
                    .map(|end| (Span::Em(rest[1..1 + end].to_string()), end + 2))
            }
            '[' => link(rest),
            _ => None,
        };
        match taken {
            Some((span, len)) => {
                flush(&mut text, &mut out);
                out.push(span);
                rest = &rest[len..];
            }
            None => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    flush(&mut text, &mut out);
    // A link that stays text joins the text around it.
    let mut merged: Vec<Span> = Vec::with_capacity(out.len());
    for span in out {
        match (merged.last_mut(), span) {
            (Some(Span::Text(a)), Span::Text(b)) => a.push_str(&b),
            (_, span) => merged.push(span),
        }
    }
    merged
}

/// `[text](http…)` at the start of `s`: the link and its length.
fn link(s: &str) -> Option<(Span, usize)> {
    let close = s.find("](")?;
    let end = s[close + 2..].find(')')? + close + 2;
    let text = &s[1..close];
    let href = &s[close + 2..end];
    if text.is_empty() || text.contains('[') {
        return None;
    }
    let span = if href.starts_with("https://") || href.starts_with("http://") {
        Span::Link {
            text: text.to_string(),
            href: href.to_string(),
        }
    } else {
        Span::Text(text.to_string())
    };
    Some((span, end + 1))
}

/// Words that are written in capitals.
const ACRONYMS: &[&str] = &[
    "url", "http", "https", "json", "sql", "id", "ids", "smtp", "tls", "csv", "ai", "api", "js",
    "jq", "html", "cc", "bcc", "ca", "hmac", "utf8",
];

/// A config field's name as a label: words split at `_`, the first
/// capitalised, acronyms in capitals, units named (`timeout_ms` →
/// "Timeout (ms)").
pub fn label(name: &str) -> String {
    let mut words: Vec<&str> = name.split('_').filter(|w| !w.is_empty()).collect();
    let unit = match words.last() {
        Some(&"ms") if words.len() > 1 => Some("ms"),
        Some(&"secs") | Some(&"s") if words.len() > 1 => Some("s"),
        _ => None,
    };
    if unit.is_some() {
        words.pop();
    }
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if ACRONYMS.contains(w) {
            out.push_str(&w.to_uppercase());
        } else if i == 0 {
            let mut cs = w.chars();
            if let Some(f) = cs.next() {
                out.extend(f.to_uppercase());
                out.push_str(cs.as_str());
            }
        } else {
            out.push_str(w);
        }
    }
    if let Some(u) = unit {
        out.push_str(&format!(" ({u})"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Span {
        Span::Text(s.into())
    }

    #[test]
    fn inline_markdown_becomes_spans() {
        assert_eq!(
            spans("Fails when `status` is **not** 2xx, see [docs](https://x.dev/a)."),
            vec![
                t("Fails when "),
                Span::Code("status".into()),
                t(" is "),
                Span::Strong("not".into()),
                t(" 2xx, see "),
                Span::Link {
                    text: "docs".into(),
                    href: "https://x.dev/a".into()
                },
                t("."),
            ]
        );
        assert_eq!(
            spans("an *important* word"),
            vec![t("an "), Span::Em("important".into()), t(" word")]
        );
        // Not marks: snake_case, a lone star, an unclosed backtick, a
        // link that is not http(s).
        assert_eq!(
            spans("keep_input and max_rows"),
            vec![t("keep_input and max_rows")]
        );
        assert_eq!(spans("2 * 3 = 6"), vec![t("2 * 3 = 6")]);
        assert_eq!(spans("a `b"), vec![t("a `b")]);
        assert_eq!(spans("[x](javascript:alert(1))"), vec![t("x)")]);
        assert_eq!(
            spans("résumé `é`"),
            vec![t("résumé "), Span::Code("é".into())]
        );
        assert_eq!(spans(""), vec![]);
    }

    #[test]
    fn field_names_read_as_labels() {
        assert_eq!(label("fail_on_status"), "Fail on status");
        assert_eq!(label("timeout_ms"), "Timeout (ms)");
        assert_eq!(label("url"), "URL");
        assert_eq!(label("keep_headers"), "Keep headers");
        assert_eq!(label("json_schema"), "JSON schema");
        assert_eq!(label("max_bytes"), "Max bytes");
        assert_eq!(label("body"), "Body");
        assert_eq!(label("ms"), "Ms");
        assert_eq!(label(""), "");
    }
}
