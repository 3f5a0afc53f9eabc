//! Static analysis of a workflow's graph: node and edge indices, topological
//! order, cycles, and split scopes (which `flow.split` each node runs inside).

use std::collections::HashMap;

use crate::kinds::{self, Kind, KindSpec};
use crate::workflow::Workflow;

/// An edge with both ends resolved to node indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GEdge {
    /// Index in `Workflow::edges`.
    pub index: usize,
    pub from: usize,
    pub from_port: String,
    pub to: usize,
}

/// The resolved graph of a workflow. Edges whose ends do not resolve are left
/// out (validation reports them).
#[derive(Debug, Clone)]
pub struct Graph {
    pub ids: Vec<String>,
    pub kinds: Vec<Option<&'static KindSpec>>,
    pub by_id: HashMap<String, usize>,
    pub edges: Vec<GEdge>,
    /// Per node: indices into `edges` of its incoming edges, in file order.
    pub incoming: Vec<Vec<usize>>,
    /// Per node: indices into `edges` of its outgoing edges, in file order.
    pub outgoing: Vec<Vec<usize>>,
}

/// The split scopes of every node, or why they cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeError {
    /// A `flow.join` whose input is not inside any split.
    JoinOutsideSplit { join: usize },
    /// A node whose incoming edges come from different split scopes.
    Mixed { node: usize, a: usize, b: usize },
}

impl Graph {
    pub fn new(wf: &Workflow) -> Graph {
        let mut by_id = HashMap::with_capacity(wf.nodes.len());
        for (i, n) in wf.nodes.iter().enumerate() {
            by_id.entry(n.id.clone()).or_insert(i);
        }
        let ids: Vec<String> = wf.nodes.iter().map(|n| n.id.clone()).collect();
        let kinds = wf.nodes.iter().map(|n| kinds::spec(&n.kind)).collect();
        let mut edges = Vec::with_capacity(wf.edges.len());
        let mut incoming = vec![Vec::new(); ids.len()];
        let mut outgoing = vec![Vec::new(); ids.len()];
        for (index, e) in wf.edges.iter().enumerate() {
            let (src, dst) = (e.source(), e.target());
            let (Some(&from), Some(&to)) = (by_id.get(src.node), by_id.get(dst.node)) else {
                continue;
            };
            incoming[to].push(edges.len());
            outgoing[from].push(edges.len());
            edges.push(GEdge {
                index,
                from,
                from_port: src.port.to_string(),
                to,
            });
        }
        Graph {
            ids,
            kinds,
            by_id,
            edges,
            incoming,
            outgoing,
        }
    }

    /// The nodes that run before `node` in any run: everything upstream of
    /// it along edges (not `node` itself, unless a cycle leads back to it).
    pub fn upstream(&self, node: usize) -> std::collections::HashSet<usize> {
        let mut seen = std::collections::HashSet::new();
        let mut todo: Vec<usize> = self.incoming[node]
            .iter()
            .map(|&e| self.edges[e].from)
            .collect();
        while let Some(n) = todo.pop() {
            if seen.insert(n) {
                todo.extend(self.incoming[n].iter().map(|&e| self.edges[e].from));
            }
        }
        seen
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn kind_name(&self, node: usize) -> &str {
        self.kinds[node].map(|k| k.kind).unwrap_or("")
    }

    /// The kind of a node (None for an unknown kind).
    pub fn kind(&self, node: usize) -> Option<Kind> {
        self.kinds[node].map(|k| k.id)
    }

    /// Nodes in topological order, or the nodes of one cycle (in edge order,
    /// first node repeated at the end is left out).
    pub fn topo_order(&self) -> Result<Vec<usize>, Vec<usize>> {
        let n = self.len();
        let mut indeg: Vec<usize> = self.incoming.iter().map(Vec::len).collect();
        let mut ready: Vec<usize> = (0..n).rev().filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop() {
            order.push(i);
            for &e in self.outgoing[i].iter().rev() {
                let to = self.edges[e].to;
                indeg[to] -= 1;
                if indeg[to] == 0 {
                    ready.push(to);
                }
            }
        }
        if order.len() == n {
            return Ok(order);
        }
        // Every node left has an incoming edge from another node left: walk
        // backwards until a node repeats; that stretch is a cycle.
        let left: Vec<bool> = indeg.iter().map(|&d| d > 0).collect();
        let start = (0..n).find(|&i| left[i]).unwrap_or(0);
        let mut seen = HashMap::new();
        let mut path = Vec::new();
        let mut cur = start;
        loop {
            if let Some(&pos) = seen.get(&cur) {
                let mut cycle: Vec<usize> = path[pos..].to_vec();
                cycle.reverse();
                // Start the cycle at its smallest index so the message is stable.
                let min = cycle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, n)| **n)
                    .map(|(i, _)| i)
                    .unwrap_or(0);
                cycle.rotate_left(min);
                return Err(cycle);
            }
            seen.insert(cur, path.len());
            path.push(cur);
            let prev = self.incoming[cur]
                .iter()
                .map(|&e| self.edges[e].from)
                .find(|&f| left[f]);
            match prev {
                Some(p) => cur = p,
                None => return Err(path),
            }
        }
    }

    /// The split scope of the messages on edge `e`: its source's scope, plus
    /// the source itself for the element edges (`out`) of a `flow.split`.
    pub fn edge_scope(&self, e: usize, scopes: &[Vec<usize>]) -> Vec<usize> {
        let edge = &self.edges[e];
        let mut s = scopes[edge.from].clone();
        if self.kind(edge.from) == Some(Kind::Split) && edge.from_port == "out" {
            s.push(edge.from);
        }
        s
    }

    /// The split scope of each node: the stack of `flow.split` nodes whose
    /// elements it runs once per. Requires an acyclic graph (`order`).
    pub fn scopes(&self, order: &[usize]) -> Result<Vec<Vec<usize>>, ScopeError> {
        let mut scopes: Vec<Vec<usize>> = vec![Vec::new(); self.len()];
        for &node in order {
            let mut inner: Option<(usize, Vec<usize>)> = None;
            for &e in &self.incoming[node] {
                let src = self.edges[e].from;
                let s = self.edge_scope(e, &scopes);
                match &inner {
                    None => inner = Some((src, s)),
                    Some((a, first)) if *first != s => {
                        return Err(ScopeError::Mixed {
                            node,
                            a: *a,
                            b: src,
                        });
                    }
                    Some(_) => {}
                }
            }
            let mut scope = inner.map(|(_, s)| s).unwrap_or_default();
            if self.kind(node) == Some(Kind::Join) && scope.pop().is_none() {
                return Err(ScopeError::JoinOutsideSplit { join: node });
            }
            scopes[node] = scope;
        }
        Ok(scopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workflow::{Edge, Node};

    fn wf(nodes: &[(&str, &str)], edges: &[(&str, &str)]) -> Workflow {
        let mut text =
            serde_json::json!({"format": crate::FORMAT, "id": "t", "nodes": [], "edges": []});
        for (id, kind) in nodes {
            text["nodes"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"id": id, "kind": kind}));
        }
        let mut w = Workflow::from_value(text).unwrap();
        w.edges = edges.iter().map(|(f, t)| Edge::new(*f, *t)).collect();
        let _: &Vec<Node> = &w.nodes;
        w
    }

    #[test]
    fn cycle_names_its_nodes() {
        let w = wf(
            &[
                ("t", "trigger.manual"),
                ("a", "data.set"),
                ("b", "data.set"),
                ("c", "data.set"),
            ],
            &[("t", "a"), ("a", "b"), ("b", "c"), ("c", "a")],
        );
        let g = Graph::new(&w);
        let cycle: Vec<&str> = g
            .topo_order()
            .unwrap_err()
            .iter()
            .map(|&i| g.ids[i].as_str())
            .collect();
        assert_eq!(cycle, ["a", "b", "c"]);
    }

    #[test]
    fn scopes_follow_split_and_join() {
        let w = wf(
            &[
                ("t", "trigger.manual"),
                ("s", "flow.split"),
                ("x", "data.set"),
                ("j", "flow.join"),
                ("e", "output.end"),
            ],
            &[("t", "s"), ("s", "x"), ("x", "j"), ("j", "e")],
        );
        let g = Graph::new(&w);
        let order = g.topo_order().unwrap();
        let scopes = g.scopes(&order).unwrap();
        assert_eq!(scopes, vec![vec![], vec![], vec![1], vec![], vec![]]);
    }

    #[test]
    fn mixed_scopes_are_refused() {
        let w = wf(
            &[
                ("t", "trigger.manual"),
                ("s", "flow.split"),
                ("x", "data.set"),
            ],
            &[("t", "s"), ("s", "x"), ("t", "x")],
        );
        let g = Graph::new(&w);
        let order = g.topo_order().unwrap();
        assert_eq!(
            g.scopes(&order),
            Err(ScopeError::Mixed {
                node: 2,
                a: 1,
                b: 0
            })
        );
    }
}
