//! A workflow's place in the URL: `#/w/<workflow>`, with the run shown
//! (`/r/<run>`) and the node selected (`/n/<node>`) or open in the node
//! view (`/v/<node>`), so every view of a workflow can be linked and
//! survives a reload. Segments are percent-encoded.

/// What `#/w/…` names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkflowRoute {
    pub workflow: String,
    pub run: Option<String>,
    pub node: Option<String>,
    /// `node` is open in the node view, not only selected.
    pub view: bool,
}

impl WorkflowRoute {
    /// Reads the part after `#/w/`; `decode` undoes the percent-encoding.
    /// `None` when it names no workflow.
    pub fn parse(rest: &str, decode: impl Fn(&str) -> String) -> Option<WorkflowRoute> {
        let mut parts = rest.trim_end_matches('/').split('/');
        let workflow = parts.next().filter(|w| !w.is_empty())?;
        let mut route = WorkflowRoute {
            workflow: decode(workflow),
            ..WorkflowRoute::default()
        };
        while let Some(tag) = parts.next() {
            let Some(value) = parts.next().filter(|v| !v.is_empty()) else {
                break;
            };
            match tag {
                "r" => route.run = Some(decode(value)),
                "n" => {
                    route.node = Some(decode(value));
                    route.view = false;
                }
                "v" => {
                    route.node = Some(decode(value));
                    route.view = true;
                }
                // An unknown part (a newer build's link): the rest is ignored.
                _ => break,
            }
        }
        Some(route)
    }

    /// The hash for this route (without `#`); `encode` percent-encodes.
    pub fn to_hash(&self, encode: impl Fn(&str) -> String) -> String {
        let mut hash = format!("/w/{}", encode(&self.workflow));
        if let Some(run) = &self.run {
            hash += &format!("/r/{}", encode(run));
        }
        if let Some(node) = &self.node {
            let tag = if self.view { "v" } else { "n" };
            hash += &format!("/{tag}/{}", encode(node));
        }
        hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(s: &str) -> String {
        s.replace("%2F", "/").replace("%20", " ")
    }

    fn encode(s: &str) -> String {
        s.replace('/', "%2F").replace(' ', "%20")
    }

    #[test]
    fn routes_round_trip_through_the_hash() {
        let cases = [
            (
                "orders",
                WorkflowRoute {
                    workflow: "orders".into(),
                    ..Default::default()
                },
            ),
            (
                "orders/r/r-1",
                WorkflowRoute {
                    workflow: "orders".into(),
                    run: Some("r-1".into()),
                    node: None,
                    view: false,
                },
            ),
            (
                "orders/n/fetch",
                WorkflowRoute {
                    workflow: "orders".into(),
                    run: None,
                    node: Some("fetch".into()),
                    view: false,
                },
            ),
            (
                "orders/r/r-1/n/a%20b",
                WorkflowRoute {
                    workflow: "orders".into(),
                    run: Some("r-1".into()),
                    node: Some("a b".into()),
                    view: false,
                },
            ),
            (
                "orders/r/r-1/v/a%20b",
                WorkflowRoute {
                    workflow: "orders".into(),
                    run: Some("r-1".into()),
                    node: Some("a b".into()),
                    view: true,
                },
            ),
        ];
        for (rest, route) in cases {
            assert_eq!(
                WorkflowRoute::parse(rest, decode).as_ref(),
                Some(&route),
                "{rest}"
            );
            assert_eq!(route.to_hash(encode), format!("/w/{rest}"));
        }
    }

    #[test]
    fn odd_hashes_name_what_they_can() {
        assert_eq!(WorkflowRoute::parse("", decode), None);
        assert_eq!(WorkflowRoute::parse("/", decode), None);
        let r = WorkflowRoute::parse("orders/", decode).unwrap();
        assert_eq!((r.workflow.as_str(), r.run, r.node), ("orders", None, None));
        // A tag without a value, or an unknown tag, ends the route there.
        let r = WorkflowRoute::parse("orders/r/", decode).unwrap();
        assert_eq!(r.run, None);
        let r = WorkflowRoute::parse("orders/x/1/n/a", decode).unwrap();
        assert_eq!(r.node, None);
        let r = WorkflowRoute::parse("orders/n/a/r/r-2", decode).unwrap();
        assert_eq!(
            (r.run.as_deref(), r.node.as_deref()),
            (Some("r-2"), Some("a"))
        );
        // The last node named wins, and says whether its view is open.
        let r = WorkflowRoute::parse("orders/v/a/n/b", decode).unwrap();
        assert_eq!((r.node.as_deref(), r.view), (Some("b"), false));
        let r = WorkflowRoute::parse("orders/n/a/v/b", decode).unwrap();
        assert_eq!((r.node.as_deref(), r.view), (Some("b"), true));
    }
}
