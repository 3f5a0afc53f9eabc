//! `sluice://` links: what the desktop registers and opens.
//!
//! - `sluice://` or `sluice://open`: the app, on the workflow list;
//! - `sluice://workflow/<id>` (or `sluice://w/<id>`): a workflow;
//! - `sluice://run/<id>` (or `sluice://r/<id>`): a run, as it ran;
//! - `sluice://join/<ticket>`: a workflow a peer shares; the editor says who
//!   shares what with which role, and joins only when the user says so.

/// Where a link goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    Home,
    Workflow(String),
    Run(String),
    Join(String),
}

/// Ids are what the engine makes and accepts: letters, digits, `-`, `_`, `.`.
fn id(s: &str) -> Option<String> {
    let s = s.trim_end_matches('/');
    (!s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    .then(|| s.to_string())
}

/// A share ticket as links carry it: `sluice` and lowercase base32, at
/// most 8 KiB (the engine reads what it holds).
fn ticket(s: &str) -> Option<String> {
    let s = s.trim_end_matches('/');
    (s.starts_with("sluice")
        && s.len() <= 8192
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
    .then(|| s.to_string())
}

/// What is wrong with a link (each names the link).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("`{0}` is not a sluice:// link")]
    NotALink(String),
    #[error("`{0}`: no valid workflow id")]
    NoWorkflowId(String),
    #[error("`{0}`: no valid run id")]
    NoRunId(String),
    #[error("`{0}`: not a valid share ticket")]
    NoTicket(String),
    #[error("`{url}`: unknown kind of link `{kind}` (workflow, run, join or open)")]
    UnknownKind { url: String, kind: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses a `sluice://` link; the error says what is wrong with it.
pub fn parse(url: &str) -> Result<Link> {
    let rest = url
        .strip_prefix("sluice://")
        .or_else(|| url.strip_prefix("sluice:"))
        .ok_or_else(|| Error::NotALink(url.to_string()))?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (what, tail) = rest.split_once('/').unwrap_or((rest, ""));
    match what {
        "" | "open" => Ok(Link::Home),
        "workflow" | "w" => id(tail)
            .map(Link::Workflow)
            .ok_or_else(|| Error::NoWorkflowId(url.to_string())),
        "run" | "r" => id(tail)
            .map(Link::Run)
            .ok_or_else(|| Error::NoRunId(url.to_string())),
        "join" => ticket(tail)
            .map(Link::Join)
            .ok_or_else(|| Error::NoTicket(url.chars().take(80).collect())),
        other => Err(Error::UnknownKind {
            url: url.to_string(),
            kind: other.to_string(),
        }),
    }
}

/// The workflow id of an editor URL fragment (`/w/<id>` or `/w/<id>/r/<run>`).
pub fn workflow_of_fragment(fragment: &str) -> Option<String> {
    let rest = fragment.strip_prefix("/w/")?;
    id(rest.split("/r/").next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_to_places() {
        assert_eq!(parse("sluice://"), Ok(Link::Home));
        assert_eq!(
            parse("sluice://join/sluiceabc234"),
            Ok(Link::Join("sluiceabc234".into()))
        );
        assert!(matches!(
            parse("sluice://join/sluice<script>"),
            Err(Error::NoTicket(_))
        ));
        assert!(matches!(parse("sluice://join/"), Err(Error::NoTicket(_))));
        assert_eq!(parse("sluice://open"), Ok(Link::Home));
        assert_eq!(
            parse("sluice://workflow/orders"),
            Ok(Link::Workflow("orders".into()))
        );
        assert_eq!(
            parse("sluice://w/orders/"),
            Ok(Link::Workflow("orders".into()))
        );
        assert_eq!(
            parse("sluice://run/r661a5afe1fcc3040"),
            Ok(Link::Run("r661a5afe1fcc3040".into()))
        );
        assert_eq!(parse("sluice:run/r1?x=1"), Ok(Link::Run("r1".into())));
    }

    #[test]
    fn bad_links_say_why() {
        let error = |url: &str| parse(url).unwrap_err().to_string();
        assert_eq!(
            error("https://example.com"),
            "`https://example.com` is not a sluice:// link"
        );
        assert_eq!(
            error("sluice://workflow/"),
            "`sluice://workflow/`: no valid workflow id"
        );
        assert_eq!(
            error("sluice://run/../etc"),
            "`sluice://run/../etc`: no valid run id"
        );
        assert!(error("sluice://workflow/a%2Fb").contains("workflow id"));
        assert_eq!(
            error("sluice://delete/x"),
            "`sluice://delete/x`: unknown kind of link `delete` (workflow, run, join or open)"
        );
    }

    #[test]
    fn the_window_knows_its_workflow() {
        assert_eq!(workflow_of_fragment("/w/orders"), Some("orders".into()));
        assert_eq!(
            workflow_of_fragment("/w/orders/r/r1"),
            Some("orders".into())
        );
        assert_eq!(workflow_of_fragment("/"), None);
    }
}
