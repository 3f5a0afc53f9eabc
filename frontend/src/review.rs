//! Reviewing a draft before publishing it (a peer's edits above all): what
//! changed from the published version, per node and field, with text such
//! as code as a line diff. Pure, tested natively; the publish panel shows
//! it.

use serde_json::{Map, Value};

/// One line of a text diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Same(String),
    Removed(String),
    Added(String),
}

/// How a field changed.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldChange {
    /// `config.source`, `label`, `position`…
    pub path: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// For text on several lines: the line diff.
    pub lines: Option<Vec<Line>>,
}

/// What happened to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChange {
    Added,
    Removed,
    Changed,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeReview {
    pub node: String,
    pub change: NodeChange,
    pub fields: Vec<FieldChange>,
}

/// Everything that differs between `published` (None: nothing published)
/// and `draft`, both `sluice.workflow/v1` JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Review {
    pub nodes: Vec<NodeReview>,
    /// Top-level fields (`name`, `settings`…) and edges, as field changes.
    pub workflow: Vec<FieldChange>,
}

impl Review {
    pub fn of(published: Option<&Value>, draft: &Value) -> Review {
        let empty = Value::Null;
        let published = published.unwrap_or(&empty);
        let nodes_of = |wf: &Value| -> Vec<(String, Value)> {
            wf["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| Some((n["id"].as_str()?.to_string(), n.clone())))
                .collect()
        };
        let (old, new) = (nodes_of(published), nodes_of(draft));
        let mut nodes = Vec::new();
        for (id, n) in &new {
            match old.iter().find(|(o, _)| o == id) {
                None => nodes.push(NodeReview {
                    node: id.clone(),
                    change: NodeChange::Added,
                    fields: fields(&Value::Null, n, ""),
                }),
                Some((_, before)) if before != n => nodes.push(NodeReview {
                    node: id.clone(),
                    change: NodeChange::Changed,
                    fields: fields(before, n, ""),
                }),
                Some(_) => {}
            }
        }
        for (id, n) in &old {
            if !new.iter().any(|(i, _)| i == id) {
                nodes.push(NodeReview {
                    node: id.clone(),
                    change: NodeChange::Removed,
                    fields: fields(n, &Value::Null, ""),
                });
            }
        }
        let top = |wf: &Value| -> Value {
            let mut m = wf.as_object().cloned().unwrap_or_default();
            m.remove("nodes");
            // A joined workflow's document may name it by the sharer's id.
            m.remove("id");
            Value::Object(m)
        };
        Review {
            nodes,
            workflow: fields(&top(published), &top(draft), ""),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.workflow.is_empty()
    }
}

/// The leaf fields that differ between `a` and `b` (objects are walked;
/// arrays and scalars compare whole), under `prefix`.
fn fields(a: &Value, b: &Value, prefix: &str) -> Vec<FieldChange> {
    let empty = Map::new();
    let walk = matches!(
        (a, b),
        (Value::Object(_), Value::Object(_) | Value::Null) | (Value::Null, Value::Object(_))
    );
    if !walk {
        return leaf(a, b, prefix);
    }
    let (ma, mb) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .flat_map(|k| {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            fields(
                ma.get(k).unwrap_or(&Value::Null),
                mb.get(k).unwrap_or(&Value::Null),
                &path,
            )
        })
        .collect()
}

fn leaf(a: &Value, b: &Value, path: &str) -> Vec<FieldChange> {
    if a == b {
        return Vec::new();
    }
    let some = |v: &Value| (!v.is_null()).then(|| v.clone());
    let lines = match (a, b) {
        (Value::String(x), Value::String(y)) if x.contains('\n') || y.contains('\n') => {
            Some(diff_lines(x, y))
        }
        (Value::Null, Value::String(y)) if y.contains('\n') => Some(diff_lines("", y)),
        (Value::String(x), Value::Null) if x.contains('\n') => Some(diff_lines(x, "")),
        _ => None,
    };
    vec![FieldChange {
        path: path.to_string(),
        before: some(a),
        after: some(b),
        lines,
    }]
}

/// The most lines compared line by line (beyond it, old and new are shown
/// whole: a longest-common-subsequence table grows with their product).
const MAX_CELLS: usize = 4_000_000;

/// A line diff of `a` to `b` (longest common subsequence).
pub fn diff_lines(a: &str, b: &str) -> Vec<Line> {
    let a: Vec<&str> = if a.is_empty() {
        Vec::new()
    } else {
        a.lines().collect()
    };
    let b: Vec<&str> = if b.is_empty() {
        Vec::new()
    } else {
        b.lines().collect()
    };
    // Common head and tail first: most edits touch a few lines.
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut out: Vec<Line> = a[..head]
        .iter()
        .map(|l| Line::Same(l.to_string()))
        .collect();
    if am.len().saturating_mul(bm.len()) > MAX_CELLS {
        out.extend(am.iter().map(|l| Line::Removed(l.to_string())));
        out.extend(bm.iter().map(|l| Line::Added(l.to_string())));
    } else {
        // lcs[i][j]: the LCS length of am[i..] and bm[j..].
        let w = bm.len() + 1;
        let mut lcs = vec![0u32; (am.len() + 1) * w];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i * w + j] = if am[i] == bm[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() || j < bm.len() {
            if i < am.len() && j < bm.len() && am[i] == bm[j] {
                out.push(Line::Same(am[i].to_string()));
                i += 1;
                j += 1;
            } else if j < bm.len() && (i == am.len() || lcs[i * w + j + 1] >= lcs[(i + 1) * w + j])
            {
                out.push(Line::Added(bm[j].to_string()));
                j += 1;
            } else {
                out.push(Line::Removed(am[i].to_string()));
                i += 1;
            }
        }
    }
    out.extend(
        a[a.len() - tail..]
            .iter()
            .map(|l| Line::Same(l.to_string())),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_diff_keeps_what_is_common() {
        use Line::*;
        let d = diff_lines("a\nb\nc\nd", "a\nx\nc\nd\ne");
        assert_eq!(
            d,
            [
                Same("a".into()),
                Added("x".into()),
                Removed("b".into()),
                Same("c".into()),
                Same("d".into()),
                Added("e".into())
            ]
        );
        assert_eq!(diff_lines("", "a"), [Added("a".into())]);
        assert_eq!(diff_lines("a", ""), [Removed("a".into())]);
        assert_eq!(diff_lines("same\n", "same\n"), [Same("same".into())]);
        // Every line of both sides appears once, in order.
        let (x, y) = ("1\n2\n3\n4\n5\n6", "0\n2\n3\n9\n5\n7\n8");
        let d = diff_lines(x, y);
        let old: Vec<_> = d
            .iter()
            .filter_map(|l| match l {
                Same(s) | Removed(s) => Some(s.as_str()),
                Added(_) => None,
            })
            .collect();
        let new: Vec<_> = d
            .iter()
            .filter_map(|l| match l {
                Same(s) | Added(s) => Some(s.as_str()),
                Removed(_) => None,
            })
            .collect();
        assert_eq!(old, x.lines().collect::<Vec<_>>());
        assert_eq!(new, y.lines().collect::<Vec<_>>());
    }

    #[test]
    fn a_huge_text_is_shown_whole_instead_of_compared_line_by_line() {
        let a: String = (0..3000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..3000).map(|i| format!("b{i}\n")).collect();
        let d = diff_lines(&a, &b);
        assert_eq!(d.len(), 6000);
        assert!(matches!(d[0], Line::Removed(_)) && matches!(d[5999], Line::Added(_)));
    }

    #[test]
    fn a_review_names_nodes_and_fields_and_diffs_code() {
        let published = json!({"id": "w", "name": "W", "nodes": [
            {"id": "a", "kind": "code.js", "config": {"source": "let x = 1;\nreturn x;"}},
            {"id": "gone", "kind": "output.end"},
            {"id": "same", "kind": "output.end"}]});
        let draft = json!({"id": "w", "name": "W2", "nodes": [
            {"id": "a", "kind": "code.js", "config": {"source": "let x = 2;\nreturn x;"}, "label": "A"},
            {"id": "new", "kind": "output.end"},
            {"id": "same", "kind": "output.end"}]});
        let r = Review::of(Some(&published), &draft);
        let a = r.nodes.iter().find(|n| n.node == "a").unwrap();
        assert_eq!(a.change, NodeChange::Changed);
        let paths: Vec<_> = a.fields.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["config.source", "label"]);
        let code = a.fields[0].lines.as_ref().unwrap();
        assert!(code.contains(&Line::Removed("let x = 1;".into())));
        assert!(code.contains(&Line::Added("let x = 2;".into())));
        assert!(code.contains(&Line::Same("return x;".into())));
        assert_eq!(
            r.nodes.iter().find(|n| n.node == "new").unwrap().change,
            NodeChange::Added
        );
        assert_eq!(
            r.nodes.iter().find(|n| n.node == "gone").unwrap().change,
            NodeChange::Removed
        );
        assert!(!r.nodes.iter().any(|n| n.node == "same"));
        assert_eq!(r.workflow.len(), 1);
        assert_eq!(r.workflow[0].path, "name");
        // Nothing published: everything is new.
        let r = Review::of(None, &draft);
        assert!(r.nodes.iter().all(|n| n.change == NodeChange::Added));
        assert!(Review::of(Some(&draft), &draft).is_empty());
    }
}
