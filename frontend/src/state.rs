//! The editor's state and its reducers: pure Rust, no browser, unit-tested
//! natively. The canvas renders an [`Editor`]; every gesture becomes an
//! [`Action`]; [`Editor::reduce`] applies it and says whether the workflow
//! changed (then the app turns the new workflow into Loro operations with
//! `WorkflowDoc::apply` and sends them) or only the view did.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde_json::{Map, Value, json};
use sluice_model::{Edge, Node, Workflow, kinds, validate};

/// A node's box on the canvas, in world units.
pub const NODE_W: f64 = 200.0;
/// The node settings [`Action::SetNodeSetting`] sets (its Settings tab).
pub const NODE_SETTINGS: &[&str] = &["disabled", "retry", "on_error", "timeout_ms", "notes"];
pub const NODE_H: f64 = 64.0;
/// Positions snap to this grid when a drag ends.
pub const GRID: f64 = 20.0;
pub const MIN_ZOOM: f64 = 0.1;
pub const MAX_ZOOM: f64 = 4.0;

/// A rectangle in world or screen units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Rect {
    /// The world point at `(px, py)` of an element `size` big that shows
    /// this rectangle as an SVG viewBox with `preserveAspectRatio="xMidYMid
    /// meet"` (scaled to fit, centred).
    pub fn point_in_view_box(&self, (px, py): (f64, f64), (ew, eh): (f64, f64)) -> (f64, f64) {
        let scale = (ew / self.w.max(1e-9)).min(eh / self.h.max(1e-9));
        let ox = (ew - self.w * scale) / 2.0;
        let oy = (eh - self.h * scale) / 2.0;
        (self.x + (px - ox) / scale, self.y + (py - oy) / scale)
    }

    /// The rectangle spanned by two corners, in any order.
    pub fn spanning(a: (f64, f64), b: (f64, f64)) -> Rect {
        Rect {
            x: a.0.min(b.0),
            y: a.1.min(b.1),
            w: (a.0 - b.0).abs(),
            h: (a.1 - b.1).abs(),
        }
    }

    pub fn intersects(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }

    pub fn union(&self, o: &Rect) -> Rect {
        let x = self.x.min(o.x);
        let y = self.y.min(o.y);
        Rect {
            x,
            y,
            w: (self.x + self.w).max(o.x + o.w) - x,
            h: (self.y + self.h).max(o.y + o.h) - y,
        }
    }
}

/// The camera: `screen = world * zoom + (x, y)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Viewport {
    pub x: f64,
    pub y: f64,
    pub zoom: f64,
}

impl Default for Viewport {
    fn default() -> Self {
        Viewport {
            x: 40.0,
            y: 40.0,
            zoom: 1.0,
        }
    }
}

impl Viewport {
    pub fn to_world(&self, sx: f64, sy: f64) -> (f64, f64) {
        ((sx - self.x) / self.zoom, (sy - self.y) / self.zoom)
    }

    pub fn to_screen(&self, wx: f64, wy: f64) -> (f64, f64) {
        (wx * self.zoom + self.x, wy * self.zoom + self.y)
    }

    pub fn pan(&mut self, dx: f64, dy: f64) {
        self.x += dx;
        self.y += dy;
    }

    /// Zooms by `factor` keeping the world point under `(sx, sy)` in place.
    pub fn zoom_at(&mut self, sx: f64, sy: f64, factor: f64) {
        if !factor.is_finite() || factor <= 0.0 {
            return;
        }
        let (wx, wy) = self.to_world(sx, sy);
        self.zoom = (self.zoom * factor).clamp(MIN_ZOOM, MAX_ZOOM);
        self.x = sx - wx * self.zoom;
        self.y = sy - wy * self.zoom;
    }

    /// Puts the world point `(wx, wy)` at the centre of a `width` ×
    /// `height` screen, at the same zoom.
    pub fn center_on(&mut self, wx: f64, wy: f64, width: f64, height: f64) {
        self.x = width / 2.0 - wx * self.zoom;
        self.y = height / 2.0 - wy * self.zoom;
    }

    /// Shows all of `bounds` in a `width` × `height` screen, centred, with a
    /// margin, never zoomed in past 1:1.
    pub fn fit(&mut self, bounds: Rect, width: f64, height: f64) {
        let margin = 40.0;
        let zx = (width - 2.0 * margin) / bounds.w.max(1.0);
        let zy = (height - 2.0 * margin) / bounds.h.max(1.0);
        self.zoom = zx.min(zy).clamp(MIN_ZOOM, 1.0);
        self.x = (width - bounds.w * self.zoom) / 2.0 - bounds.x * self.zoom;
        self.y = (height - bounds.h * self.zoom) / 2.0 - bounds.y * self.zoom;
    }
}

/// Something the user did.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Click on a node; `additive` (shift) toggles it in the selection.
    Select {
        id: String,
        additive: bool,
    },
    /// A rubber band in world units; `additive` keeps the selection.
    SelectBox {
        rect: Rect,
        additive: bool,
    },
    ClearSelection,
    SelectAll,
    /// Drag the selected nodes by a world-unit delta.
    MoveSelected {
        dx: f64,
        dy: f64,
    },
    /// The drag ended: snap the selected nodes to the grid.
    SnapSelected,
    /// Drop a connection from an output port on a node.
    Connect {
        from: String,
        port: String,
        to: String,
    },
    /// Remove the edge at this index.
    Disconnect {
        edge: usize,
    },
    DeleteSelected,
    DuplicateSelected,
    /// Add a node of `kind` with its top-left at `at` (world units).
    AddNode {
        kind: String,
        at: (f64, f64),
    },
    /// Lay every node out again in columns by depth from the triggers,
    /// each column keeping its nodes' top-to-bottom order.
    Tidy,
    /// Line up or space out the selected nodes.
    Arrange(Arrange),
    /// Add a node of `kind` at `at` and connect `from`'s output `port` to
    /// it (the "+" on a port): one edit.
    AddAfter {
        kind: String,
        at: (f64, f64),
        from: String,
        port: String,
    },
    /// A new node of `kind` at `at` put into connection `edge`: the edge's
    /// source feeds the new node, and the new node's first output (`out`,
    /// a condition's `true`) feeds the edge's target (what dropping a node
    /// on a connection does).
    InsertOnEdge {
        kind: String,
        at: (f64, f64),
        edge: usize,
    },
    /// Put `node`, a node with no connection of its own, into connection
    /// `edge`: the connection's source feeds it, its first output feeds the
    /// connection's target (a node dragged onto a connection).
    SpliceIntoEdge {
        node: String,
        edge: usize,
    },
    /// Paste nodes copied with [`Editor::copy_selected`] (from this or
    /// another workflow), their top-left at `at`.
    Paste {
        json: String,
        at: (f64, f64),
    },
    /// Set (or, with `None`, remove) one field of a node's config.
    SetConfig {
        node: String,
        field: String,
        value: Option<Value>,
    },
    /// A node's label (empty: none, the id is shown).
    SetLabel {
        node: String,
        label: String,
    },
    /// One of a node's settings, beside its config: `disabled`, `retry`,
    /// `on_error`, `timeout_ms` or `notes`; `None` back to the default.
    SetNodeSetting {
        node: String,
        key: String,
        value: Option<Value>,
    },
    /// Pin a node's output (messages by output port) as test data for the
    /// nodes after it, or (with `None`) unpin it. Kept with the draft
    /// (`pinned` in the file); draft runs use it, published runs never.
    SetPinned {
        node: String,
        output: Option<Value>,
    },
    /// One of the workflow's `settings` (`strict`, `publish`), or (with
    /// `None`) back to its default.
    SetSetting {
        key: String,
        value: Option<Value>,
    },
    /// A sticky note `id` (new, unique) at this world point (its top-left
    /// corner, snapped).
    AddNote {
        id: String,
        at: (f64, f64),
        text: String,
    },
    /// Sticky note `id`'s text (Markdown).
    SetNote {
        id: String,
        text: String,
    },
    /// Sticky note `id` moved (top-left corner) or resized; snapped, and at
    /// least [`NOTE_MIN`].
    PlaceNote {
        id: String,
        at: Option<(f64, f64)>,
        size: Option<(f64, f64)>,
    },
    DeleteNote {
        id: String,
    },
}

/// A new sticky note's size, and the smallest one.
pub const NOTE_SIZE: (f64, f64) = (240.0, 140.0);
pub const NOTE_MIN: (f64, f64) = (120.0, 60.0);

/// A sticky note on the canvas: Markdown at a place (`notes` in the file,
/// each `{id, text, position: [x, y], size: [w, h]}`; n8n's sticky notes
/// import as these). Notes are found by id, never by place: a peer may add
/// or delete one meanwhile.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub id: String,
    pub text: String,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Note {
    /// Note `index` as the file has it; missing or odd parts take defaults
    /// (a missing id, the one the document gives it).
    fn read(index: usize, v: &Value) -> Note {
        let pair = |key: &str, default: (f64, f64)| {
            let a = v.get(key).and_then(Value::as_array);
            let at = |i: usize| a.and_then(|a| a.get(i)).and_then(Value::as_f64);
            (at(0).unwrap_or(default.0), at(1).unwrap_or(default.1))
        };
        let (x, y) = pair("position", (0.0, 0.0));
        let (w, h) = pair("size", NOTE_SIZE);
        Note {
            id: v
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| sluice_model::doc::note_id(index), str::to_string),
            text: v
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            x,
            y,
            w: w.max(NOTE_MIN.0),
            h: h.max(NOTE_MIN.1),
        }
    }
}

/// How [`Action::Arrange`] moves the selected nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrange {
    /// Left edges on the leftmost one's.
    AlignLeft,
    /// Top edges on the topmost one's.
    AlignTop,
    /// Equal gaps from the leftmost to the rightmost (three or more).
    DistributeHorizontally,
    /// Equal gaps from the topmost to the bottommost (three or more).
    DistributeVertically,
}

/// What a reduction changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    None,
    /// Only the selection or the view: nothing to save.
    View,
    /// The workflow: save it (as document operations).
    Workflow,
    /// Only the positions of the selected nodes (a drag): saved field by
    /// field, without comparing the whole workflow; validity is unchanged.
    Positions,
}

/// An editor on one workflow.
#[derive(Debug, Clone)]
pub struct Editor {
    pub wf: Workflow,
    pub selected: BTreeSet<String>,
    pub viewport: Viewport,
}

impl Editor {
    /// The connection passing within `tolerance` (world units) of `p`, the
    /// nearest: connections are drawn as the S-curves of [`edge_curve`],
    /// measured here segment by segment. Each curve's box is checked first,
    /// so a pointer over a big graph costs a few comparisons per edge.
    /// The one node selected, when it could go into a connection: it has
    /// none of its own, and its kind can be between two nodes.
    pub fn loose_selected(&self) -> Option<&str> {
        if self.selected.len() != 1 {
            return None;
        }
        let id = self.selected.iter().next()?;
        let node = self.wf.nodes.iter().find(|n| &n.id == id)?;
        let connected = self
            .wf
            .edges
            .iter()
            .any(|e| e.source().node == id.as_str() || e.target().node == id.as_str());
        (!connected && fits_between(&node.kind)).then_some(id.as_str())
    }

    /// The connection the loose node being dragged (see
    /// [`Editor::loose_selected`]) would go into if let go now: the one
    /// that runs through its middle.
    pub fn splice_target(&self) -> Option<usize> {
        let id = self.loose_selected()?;
        let positions = self.positions();
        let at = *positions.get(id)?;
        let middle = (at.0 + NODE_W / 2.0, at.1 + NODE_H / 2.0);
        self.edge_near_in(&positions, middle, NODE_H / 2.0)
    }

    /// [`Action::SpliceIntoEdge`]: all of it or, refused, nothing.
    fn splice(&mut self, node: String, edge: usize) -> Result<Change, String> {
        let Some(e) = self.wf.edges.get(edge) else {
            return Err(format!("there is no connection {edge}"));
        };
        let (from, port) = (e.source().node.to_string(), e.source().port.to_string());
        let to = e.target().node.to_string();
        let Some(n) = self.wf.nodes.iter().find(|n| n.id == node) else {
            return Err(format!("there is no node `{node}`"));
        };
        let kind = n.kind.clone();
        if self
            .wf
            .edges
            .iter()
            .any(|e| e.source().node == node.as_str() || e.target().node == node.as_str())
        {
            return Err(format!(
                "`{node}` has connections of its own: only a node without any goes into a connection"
            ));
        }
        let out = port_between(&kind)?;
        let before = self.wf.clone();
        self.wf.edges.remove(edge);
        let spliced = self
            .reduce(Action::Connect {
                from,
                port,
                to: node.clone(),
            })
            .and_then(|_| {
                self.reduce(Action::Connect {
                    from: node,
                    port: out,
                    to,
                })
            });
        if let Err(e) = spliced {
            self.wf = before;
            return Err(e);
        }
        Ok(Change::Workflow)
    }

    pub fn edge_near(&self, p: (f64, f64), tolerance: f64) -> Option<usize> {
        self.edge_near_in(&self.positions(), p, tolerance)
    }

    /// [`Editor::edge_near`] with the nodes' positions already laid out
    /// (a drag asks on every pointer move).
    fn edge_near_in(
        &self,
        positions: &BTreeMap<String, (f64, f64)>,
        p: (f64, f64),
        tolerance: f64,
    ) -> Option<usize> {
        let nodes: HashMap<&str, &sluice_model::Node> =
            self.wf.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let mut best: Option<(f64, usize)> = None;
        for (i, e) in self.wf.edges.iter().enumerate() {
            let (s, t) = (e.source(), e.target());
            let (Some(from), Some(to), Some(node)) = (
                positions.get(s.node),
                positions.get(t.node),
                nodes.get(s.node),
            ) else {
                continue;
            };
            let end = (to.0, to.1 + NODE_H / 2.0);
            // The curve stays inside its control points' box; the start is
            // on the node's right edge, at most NODE_H below its top.
            let bend_max = ((end.0 - from.0 - NODE_W).abs() / 2.0).max(40.0);
            let (x0, x1) = (
                (from.0 + NODE_W).min(end.0 - bend_max) - tolerance,
                (from.0 + NODE_W + bend_max).max(end.0) + tolerance,
            );
            let (y0, y1) = (
                from.1.min(end.1) - tolerance,
                (from.1 + NODE_H).max(end.1) + tolerance,
            );
            if p.0 < x0 || p.0 > x1 || p.1 < y0 || p.1 > y1 {
                continue;
            }
            let ports = kinds::spec(&node.kind)
                .map(|k| k.output_ports(&node.config))
                .unwrap_or_default();
            let start = port_at(*from, &ports, s.port);
            let d = edge_curve(start, end)
                .windows(2)
                .map(|w| segment_distance(p, w[0], w[1]))
                .fold(f64::INFINITY, f64::min);
            if d <= tolerance && best.is_none_or(|(b, _)| d < b) {
                best = Some((d, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// The workflow's sticky notes, in order.
    pub fn notes(&self) -> Vec<Note> {
        match self.wf.extra.get("notes") {
            Some(Value::Array(notes)) => notes
                .iter()
                .enumerate()
                .map(|(i, v)| Note::read(i, v))
                .collect(),
            _ => Vec::new(),
        }
    }

    fn note_index(&self, id: &str) -> Option<usize> {
        self.notes().iter().position(|n| n.id == id)
    }

    /// Note `id` in the file, made an object (with its id) if it was not.
    fn note_mut(&mut self, id: &str) -> Result<&mut Value, String> {
        let index = self
            .note_index(id)
            .ok_or_else(|| format!("there is no note `{id}`"))?;
        let Some(Value::Array(notes)) = self.wf.extra.get_mut("notes") else {
            return Err(format!("there is no note `{id}`"));
        };
        let note = notes
            .get_mut(index)
            .ok_or_else(|| format!("there is no note `{id}`"))?;
        if !note.is_object() {
            *note = serde_json::json!({});
        }
        if note.get("id").and_then(Value::as_str) != Some(id) {
            note["id"] = Value::String(id.to_string());
        }
        Ok(note)
    }

    pub fn new(wf: Workflow) -> Editor {
        Editor {
            wf,
            selected: BTreeSet::new(),
            viewport: Viewport::default(),
        }
    }

    /// Where a node is drawn: its stored position, else a layered layout
    /// by depth from the triggers (not stored until the node is moved).
    pub fn positions(&self) -> BTreeMap<String, (f64, f64)> {
        let unplaced = self.wf.nodes.iter().any(|n| n.position.is_none());
        let depth = if unplaced {
            self.depths()
        } else {
            HashMap::new()
        };
        // Unplaced nodes go in their depth's column, below every placed one.
        let top = self
            .wf
            .nodes
            .iter()
            .filter_map(|n| n.position)
            .map(|[_, y]| y + NODE_H + 60.0)
            .fold(0.0_f64, f64::max);
        let mut rows: BTreeMap<usize, usize> = BTreeMap::new();
        self.wf
            .nodes
            .iter()
            .map(|node| {
                let at = node.position.map(|[x, y]| (x, y)).unwrap_or_else(|| {
                    let d = depth.get(node.id.as_str()).copied().unwrap_or(0);
                    let row = rows.entry(d).or_default();
                    *row += 1;
                    (
                        d as f64 * (NODE_W + 80.0),
                        top + (*row - 1) as f64 * (NODE_H + 60.0),
                    )
                });
                (node.id.clone(), at)
            })
            .collect()
    }

    /// Puts node `i` at `p`; whether that moved it.
    fn place(&mut self, i: usize, p: [f64; 2]) -> bool {
        let moved = self.wf.nodes[i].position != Some(p);
        self.wf.nodes[i].position = Some(p);
        moved
    }

    /// Each node's depth: the longest path to it from a node without
    /// inputs, in one topological pass (O(nodes + edges)). Nodes on a cycle
    /// (which validation reports) keep the depth reached before it.
    fn depths(&self) -> HashMap<&str, usize> {
        let nodes = &self.wf.nodes;
        let index: HashMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.as_str(), i))
            .collect();
        let mut inputs = vec![0usize; nodes.len()];
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for e in &self.wf.edges {
            if let (Some(&s), Some(&t)) = (index.get(e.source().node), index.get(e.target().node)) {
                next[s].push(t);
                inputs[t] += 1;
            }
        }
        let mut depth = vec![0usize; nodes.len()];
        let mut ready: VecDeque<usize> = (0..nodes.len()).filter(|&i| inputs[i] == 0).collect();
        while let Some(i) = ready.pop_front() {
            for &t in &next[i] {
                depth[t] = depth[t].max(depth[i] + 1);
                inputs[t] -= 1;
                if inputs[t] == 0 {
                    ready.push_back(t);
                }
            }
        }
        nodes
            .iter()
            .zip(depth)
            .map(|(n, d)| (n.id.as_str(), d))
            .collect()
    }

    /// The world rectangle around every node (None when there are none).
    pub fn bounds(&self) -> Option<Rect> {
        self.positions()
            .values()
            .map(|&(x, y)| Rect {
                x,
                y,
                w: NODE_W,
                h: NODE_H,
            })
            .reduce(|a, b| a.union(&b))
    }

    pub fn reduce(&mut self, action: Action) -> Result<Change, String> {
        match action {
            Action::Select { id, additive } => {
                if !self.wf.nodes.iter().any(|n| n.id == id) {
                    return Ok(Change::None);
                }
                if additive {
                    if !self.selected.remove(&id) {
                        self.selected.insert(id);
                    }
                } else if self.selected.len() != 1 || !self.selected.contains(&id) {
                    self.selected = BTreeSet::from([id]);
                } else {
                    return Ok(Change::None);
                }
                Ok(Change::View)
            }
            Action::SelectBox { rect, additive } => {
                let hit: BTreeSet<String> = self
                    .positions()
                    .into_iter()
                    .filter(|(_, (x, y))| {
                        rect.intersects(&Rect {
                            x: *x,
                            y: *y,
                            w: NODE_W,
                            h: NODE_H,
                        })
                    })
                    .map(|(id, _)| id)
                    .collect();
                if additive {
                    self.selected.extend(hit);
                } else {
                    self.selected = hit;
                }
                Ok(Change::View)
            }
            Action::ClearSelection => {
                if self.selected.is_empty() {
                    return Ok(Change::None);
                }
                self.selected.clear();
                Ok(Change::View)
            }
            Action::SelectAll => {
                self.selected = self.wf.nodes.iter().map(|n| n.id.clone()).collect();
                Ok(Change::View)
            }
            Action::MoveSelected { dx, dy } => {
                if self.selected.is_empty() || (dx == 0.0 && dy == 0.0) {
                    return Ok(Change::None);
                }
                let positions = self.positions();
                for node in &mut self.wf.nodes {
                    if self.selected.contains(&node.id) {
                        let (x, y) = positions[&node.id];
                        node.position = Some([x + dx, y + dy]);
                    }
                }
                Ok(Change::Positions)
            }
            Action::Tidy => {
                if self.wf.nodes.is_empty() {
                    return Ok(Change::None);
                }
                let at = self.positions();
                let origin = self.bounds().map_or((0.0, 0.0), |b| (snap(b.x), snap(b.y)));
                let depth: HashMap<String, usize> = self
                    .depths()
                    .into_iter()
                    .map(|(id, d)| (id.to_string(), d))
                    .collect();
                // Each column in its current top-to-bottom order (ties: file order).
                let mut columns: BTreeMap<usize, Vec<(f64, usize)>> = BTreeMap::new();
                for (i, n) in self.wf.nodes.iter().enumerate() {
                    let d = depth.get(&n.id).copied().unwrap_or(0);
                    let y = at.get(&n.id).map_or(0.0, |p| p.1);
                    columns.entry(d).or_default().push((y, i));
                }
                let mut changed = false;
                for (d, mut column) in columns {
                    column.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    for (row, (_, i)) in column.into_iter().enumerate() {
                        let p = [
                            origin.0 + d as f64 * (NODE_W + 80.0),
                            origin.1 + row as f64 * (NODE_H + 60.0),
                        ];
                        changed |= self.place(i, p);
                    }
                }
                Ok(if changed {
                    Change::Workflow
                } else {
                    Change::None
                })
            }
            Action::Arrange(how) => {
                let at = self.positions();
                let mut picked: Vec<(usize, (f64, f64))> = self
                    .wf
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| self.selected.contains(&n.id))
                    .filter_map(|(i, n)| Some((i, *at.get(&n.id)?)))
                    .collect();
                let needs = match how {
                    Arrange::AlignLeft | Arrange::AlignTop => 2,
                    _ => 3,
                };
                if picked.len() < needs {
                    return Err(format!(
                        "select at least {needs} nodes to {}",
                        match how {
                            Arrange::AlignLeft | Arrange::AlignTop => "align them",
                            _ => "space them out",
                        }
                    ));
                }
                let horizontal =
                    matches!(how, Arrange::AlignLeft | Arrange::DistributeHorizontally);
                let key = |p: (f64, f64)| if horizontal { p.0 } else { p.1 };
                picked.sort_by(|a, b| key(a.1).total_cmp(&key(b.1)).then(a.0.cmp(&b.0)));
                let first = key(picked[0].1);
                let last = key(picked[picked.len() - 1].1);
                let step = (last - first) / (picked.len() - 1) as f64;
                let mut changed = false;
                for (k, (i, (x, y))) in picked.into_iter().enumerate() {
                    let v = match how {
                        Arrange::AlignLeft | Arrange::AlignTop => first,
                        _ => first + step * k as f64,
                    };
                    let p = if horizontal { [v, y] } else { [x, v] };
                    changed |= self.place(i, p);
                }
                Ok(if changed {
                    Change::Positions
                } else {
                    Change::None
                })
            }
            Action::SnapSelected => {
                let mut changed = false;
                for node in &mut self.wf.nodes {
                    if let (true, Some([x, y])) = (self.selected.contains(&node.id), node.position)
                    {
                        let snapped = [snap(x), snap(y)];
                        if snapped != [x, y] {
                            node.position = Some(snapped);
                            changed = true;
                        }
                    }
                }
                Ok(if changed {
                    Change::Positions
                } else {
                    Change::None
                })
            }
            Action::Connect { from, port, to } => {
                self.can_connect(&from, &port, &to)?;
                let from_end = if port == "out" {
                    from
                } else {
                    format!("{from}:{port}")
                };
                self.wf.edges.push(Edge::new(from_end, to));
                Ok(Change::Workflow)
            }
            Action::Disconnect { edge } => {
                if edge >= self.wf.edges.len() {
                    return Ok(Change::None);
                }
                self.wf.edges.remove(edge);
                Ok(Change::Workflow)
            }
            Action::DeleteSelected => {
                if self.selected.is_empty() {
                    return Ok(Change::None);
                }
                let gone = std::mem::take(&mut self.selected);
                self.wf.nodes.retain(|n| !gone.contains(&n.id));
                self.wf
                    .edges
                    .retain(|e| !gone.contains(e.source().node) && !gone.contains(e.target().node));
                // Test data pinned for them goes with them.
                if let Some(Value::Object(pinned)) = self.wf.extra.get_mut("pinned") {
                    pinned.retain(|id, _| !gone.contains(id));
                    if pinned.is_empty() {
                        self.wf.extra.remove("pinned");
                    }
                }
                Ok(Change::Workflow)
            }
            Action::DuplicateSelected => {
                if self.selected.is_empty() {
                    return Ok(Change::None);
                }
                let copied = self.copy_selected();
                let bounds = self.selection_bounds().unwrap_or(Rect {
                    x: 0.0,
                    y: 0.0,
                    w: 0.0,
                    h: 0.0,
                });
                self.paste(&copied, (bounds.x + 2.0 * GRID, bounds.y + 2.0 * GRID))
            }
            Action::AddNode { kind, at } => {
                let spec = kinds::spec(&kind).ok_or_else(|| format!("unknown kind `{kind}`"))?;
                let id = self.fresh_id(short_name(spec.kind));
                let at = self.free_spot(at);
                self.wf.nodes.push(Node {
                    id: id.clone(),
                    kind,
                    config: default_config(&spec.config_schema()),
                    position: Some([at.0, at.1]),
                    label: None,
                    disabled: false,
                    retry: None,
                    on_error: None,
                    timeout_ms: None,
                    extra: Map::new(),
                });
                self.selected = BTreeSet::from([id]);
                Ok(Change::Workflow)
            }
            Action::AddAfter {
                kind,
                at,
                from,
                port,
            } => {
                let spec = kinds::spec(&kind).ok_or_else(|| format!("unknown kind `{kind}`"))?;
                if spec.is_trigger {
                    return Err(format!(
                        "a trigger ({kind}) starts runs: it cannot follow `{from}`"
                    ));
                }
                // Checked before anything changes: a port `from` lacks adds nothing.
                if !self.wf.nodes.iter().any(|n| n.id == from) {
                    return Err(format!("there is no node `{from}`"));
                }
                let before = (self.wf.clone(), self.selected.clone());
                self.reduce(Action::AddNode { kind, at })?;
                let Some(to) = self.selected.iter().next().cloned() else {
                    return Ok(Change::Workflow);
                };
                if let Err(e) = self.reduce(Action::Connect { from, port, to }) {
                    (self.wf, self.selected) = before;
                    return Err(e);
                }
                Ok(Change::Workflow)
            }
            Action::InsertOnEdge { kind, at, edge } => {
                let Some(e) = self.wf.edges.get(edge) else {
                    return Err(format!("there is no connection {edge}"));
                };
                let out = port_between(&kind)?;
                let (from, port) = (e.source().node.to_string(), e.source().port.to_string());
                let to = e.target().node.to_string();
                let before = (self.wf.clone(), self.selected.clone());
                self.wf.edges.remove(edge);
                let inserted = self
                    .reduce(Action::AddAfter {
                        kind,
                        at,
                        from,
                        port,
                    })
                    .and_then(|_| {
                        let new = self
                            .selected
                            .iter()
                            .next()
                            .cloned()
                            .ok_or_else(|| "the new node is missing".to_string())?;
                        self.reduce(Action::Connect {
                            from: new,
                            port: out,
                            to,
                        })
                    });
                if let Err(e) = inserted {
                    (self.wf, self.selected) = before;
                    return Err(e);
                }
                Ok(Change::Workflow)
            }
            Action::SpliceIntoEdge { node, edge } => self.splice(node, edge),
            Action::Paste { json, at } => self.paste(&json, at),
            Action::SetConfig { node, field, value } => {
                let n = self
                    .wf
                    .nodes
                    .iter_mut()
                    .find(|n| n.id == node)
                    .ok_or_else(|| format!("there is no node `{node}`"))?;
                if !n.config.is_object() {
                    n.config = Value::Object(Map::new());
                }
                let Some(config) = n.config.as_object_mut() else {
                    return Ok(Change::None);
                };
                let before = config.get(&field).cloned();
                if before == value {
                    return Ok(Change::None);
                }
                match value {
                    Some(v) => config.insert(field, v),
                    None => config.remove(&field),
                };
                Ok(Change::Workflow)
            }
            Action::SetPinned { node, output } => {
                if !self.wf.nodes.iter().any(|n| n.id == node) {
                    return Err(format!("there is no node `{node}`"));
                }
                let pinned = self
                    .wf
                    .extra
                    .entry("pinned")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !pinned.is_object() {
                    *pinned = Value::Object(Map::new());
                }
                let Some(map) = pinned.as_object_mut() else {
                    return Ok(Change::None);
                };
                let before = map.get(&node).cloned();
                if before == output {
                    return Ok(Change::None);
                }
                match output {
                    Some(v) => map.insert(node, v),
                    None => map.remove(&node),
                };
                if map.is_empty() {
                    self.wf.extra.remove("pinned");
                }
                Ok(Change::Workflow)
            }
            Action::AddNote { id, at, text } => {
                if self.note_index(&id).is_some() {
                    return Err(format!("there is a note `{id}` already"));
                }
                let note = serde_json::json!({
                    "id": id,
                    "text": text,
                    "position": [snap(at.0), snap(at.1)],
                    "size": [NOTE_SIZE.0, NOTE_SIZE.1],
                });
                match self.wf.extra.get_mut("notes") {
                    Some(Value::Array(notes)) => notes.push(note),
                    _ => {
                        self.wf
                            .extra
                            .insert("notes".into(), Value::Array(vec![note]));
                    }
                }
                Ok(Change::Workflow)
            }
            Action::SetNote { id, text } => {
                let note = self.note_mut(&id)?;
                if note.get("text").and_then(Value::as_str) == Some(text.as_str()) {
                    return Ok(Change::None);
                }
                note["text"] = Value::String(text);
                Ok(Change::Workflow)
            }
            Action::PlaceNote { id, at, size } => {
                let was = self.notes().into_iter().find(|n| n.id == id);
                let note = self.note_mut(&id)?;
                let mut changed = false;
                if let Some((x, y)) = at {
                    let to = serde_json::json!([snap(x), snap(y)]);
                    changed |= note.get("position") != Some(&to);
                    note["position"] = to;
                }
                if let Some((w, h)) = size {
                    let to = serde_json::json!([snap(w).max(NOTE_MIN.0), snap(h).max(NOTE_MIN.1)]);
                    changed |= note.get("size") != Some(&to);
                    note["size"] = to;
                }
                // A note from elsewhere written with other numbers (n8n's)
                // that lands where it was is no change.
                let now = self.notes().into_iter().find(|n| n.id == id);
                Ok(if changed && was != now {
                    Change::Workflow
                } else {
                    Change::None
                })
            }
            Action::DeleteNote { id } => {
                let index = self
                    .note_index(&id)
                    .ok_or_else(|| format!("there is no note `{id}`"))?;
                if let Some(Value::Array(notes)) = self.wf.extra.get_mut("notes") {
                    notes.remove(index);
                    if notes.is_empty() {
                        self.wf.extra.remove("notes");
                    }
                }
                Ok(Change::Workflow)
            }
            Action::SetSetting { key, value } => {
                let settings = self
                    .wf
                    .extra
                    .entry("settings")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !settings.is_object() {
                    *settings = Value::Object(Map::new());
                }
                let Some(map) = settings.as_object_mut() else {
                    return Ok(Change::None);
                };
                if map.get(&key) == value.as_ref() {
                    return Ok(Change::None);
                }
                match value {
                    Some(v) => map.insert(key, v),
                    None => map.remove(&key),
                };
                Ok(Change::Workflow)
            }
            Action::SetNodeSetting { node, key, value } => {
                if !NODE_SETTINGS.contains(&key.as_str()) {
                    return Err(format!("`{key}` is not a node setting"));
                }
                let n = self
                    .wf
                    .nodes
                    .iter_mut()
                    .find(|n| n.id == node)
                    .ok_or_else(|| format!("there is no node `{node}`"))?;
                let mut v = serde_json::to_value(&*n).map_err(|e| e.to_string())?;
                let Some(map) = v.as_object_mut() else {
                    return Ok(Change::None);
                };
                // `false`, an empty text or an empty retry is the default.
                let value = value.filter(|v| {
                    !matches!(v, Value::Bool(false))
                        && v.as_str().is_none_or(|s| !s.trim().is_empty())
                        && v.as_object().is_none_or(|o| !o.is_empty())
                });
                if map.get(&key) == value.as_ref() {
                    return Ok(Change::None);
                }
                match value {
                    Some(v) => map.insert(key.clone(), v),
                    None => map.remove(&key),
                };
                let updated: sluice_model::Node =
                    serde_json::from_value(v).map_err(|e| format!("node `{node}`: {key}: {e}"))?;
                *n = updated;
                Ok(Change::Workflow)
            }
            Action::SetLabel { node, label } => {
                let n = self
                    .wf
                    .nodes
                    .iter_mut()
                    .find(|n| n.id == node)
                    .ok_or_else(|| format!("there is no node `{node}`"))?;
                let label = Some(label.trim().to_string()).filter(|l| !l.is_empty());
                if n.label == label {
                    return Ok(Change::None);
                }
                n.label = label;
                Ok(Change::Workflow)
            }
        }
    }

    /// Why `from:port → to` cannot be drawn, or Ok.
    pub fn can_connect(&self, from: &str, port: &str, to: &str) -> Result<(), String> {
        let node = |id: &str| {
            self.wf
                .nodes
                .iter()
                .find(|n| n.id == id)
                .ok_or_else(|| format!("there is no node `{id}`"))
        };
        let (source, target) = (node(from)?, node(to)?);
        if from == to {
            return Err("a node cannot connect to itself".into());
        }
        if let Some(spec) = kinds::spec(&source.kind)
            && !spec.output_ports(&source.config).iter().any(|p| p == port)
        {
            return Err(format!("`{from}` has no output `{port}`"));
        }
        if kinds::spec(&target.kind).is_some_and(|s| s.is_trigger) {
            return Err(format!("`{to}` is a trigger: nothing can lead into it"));
        }
        if self
            .wf
            .edges
            .iter()
            .any(|e| e.source().node == from && e.source().port == port && e.target().node == to)
        {
            return Err(format!("`{from}:{port}` already leads to `{to}`"));
        }
        // Anything else the model refuses (a cycle, above all).
        let mut candidate = self.wf.clone();
        candidate
            .edges
            .push(Edge::new(format!("{from}:{port}"), to));
        let before = validate(&self.wf).len();
        let after = validate(&candidate);
        if after.len() > before
            && let Some(p) = after
                .iter()
                .find(|p| p.field.as_deref() == Some("edges") || p.edge.is_some())
        {
            return Err(p.message.clone());
        }
        Ok(())
    }

    /// The selected nodes and the edges between them, as workflow JSON
    /// (`{"format", "nodes", "edges"}`): the clipboard format, which pastes
    /// into any workflow.
    pub fn copy_selected(&self) -> String {
        let positions = self.positions();
        let nodes: Vec<Value> = self
            .wf
            .nodes
            .iter()
            .filter(|n| self.selected.contains(&n.id))
            .map(|n| {
                let mut n = n.clone();
                let (x, y) = positions[&n.id];
                n.position = Some([x, y]);
                serde_json::to_value(n).unwrap_or(Value::Null)
            })
            .collect();
        let edges: Vec<&Edge> = self
            .wf
            .edges
            .iter()
            .filter(|e| {
                self.selected.contains(e.source().node) && self.selected.contains(e.target().node)
            })
            .collect();
        json!({"format": sluice_model::FORMAT, "nodes": nodes, "edges": edges}).to_string()
    }

    fn selection_bounds(&self) -> Option<Rect> {
        let positions = self.positions();
        self.selected
            .iter()
            .filter_map(|id| positions.get(id))
            .map(|&(x, y)| Rect {
                x,
                y,
                w: NODE_W,
                h: NODE_H,
            })
            .reduce(|a, b| a.union(&b))
    }

    fn paste(&mut self, text: &str, at: (f64, f64)) -> Result<Change, String> {
        #[derive(serde::Deserialize)]
        struct Clip {
            nodes: Vec<Node>,
            #[serde(default)]
            edges: Vec<Edge>,
        }
        let clip: Clip =
            serde_json::from_str(text).map_err(|e| format!("the clipboard is not nodes: {e}"))?;
        if clip.nodes.is_empty() {
            return Ok(Change::None);
        }
        let origin = clip
            .nodes
            .iter()
            .filter_map(|n| n.position)
            .fold((f64::INFINITY, f64::INFINITY), |(x, y), [a, b]| {
                (x.min(a), y.min(b))
            });
        let origin = if origin.0.is_finite() {
            origin
        } else {
            (0.0, 0.0)
        };
        let mut renamed: BTreeMap<String, String> = BTreeMap::new();
        let mut added = BTreeSet::new();
        for (i, mut node) in clip.nodes.into_iter().enumerate() {
            let id = self.fresh_id(&node.id);
            renamed.insert(node.id.clone(), id.clone());
            let [x, y] = node
                .position
                .unwrap_or([origin.0, origin.1 + i as f64 * 100.0]);
            node.position = Some([snap(x - origin.0 + at.0), snap(y - origin.1 + at.1)]);
            node.id = id.clone();
            added.insert(id);
            self.wf.nodes.push(node);
        }
        for e in clip.edges {
            let (s, t) = (e.source(), e.target());
            if let (Some(from), Some(to)) = (renamed.get(s.node), renamed.get(t.node)) {
                let from = if s.port == "out" {
                    from.clone()
                } else {
                    format!("{from}:{}", s.port)
                };
                let to = if t.port == "in" {
                    to.clone()
                } else {
                    format!("{to}:{}", t.port)
                };
                self.wf.edges.push(Edge::new(from, to));
            }
        }
        self.selected = added;
        Ok(Change::Workflow)
    }

    /// `at` on the grid, moved down until no node is in the way.
    fn free_spot(&self, at: (f64, f64)) -> (f64, f64) {
        let taken: Vec<Rect> = self
            .positions()
            .values()
            .map(|&(x, y)| Rect {
                x: x - 10.0,
                y: y - 10.0,
                w: NODE_W + 20.0,
                h: NODE_H + 20.0,
            })
            .collect();
        let (x, mut y) = (snap(at.0), snap(at.1));
        for _ in 0..1000 {
            let here = Rect {
                x,
                y,
                w: NODE_W,
                h: NODE_H,
            };
            if !taken.iter().any(|r| r.intersects(&here)) {
                break;
            }
            y += snap(NODE_H + 40.0);
        }
        (x, y)
    }

    /// `base`, or `base_2`, `base_3`… whichever is free.
    fn fresh_id(&self, base: &str) -> String {
        let taken = |id: &str| self.wf.nodes.iter().any(|n| n.id == id);
        if !taken(base) {
            return base.to_string();
        }
        let stem = match base.rsplit_once('_') {
            Some((stem, n)) if n.parse::<u32>().is_ok() => stem,
            _ => base,
        };
        (2..)
            .map(|i| format!("{stem}_{i}"))
            .find(|id| !taken(id))
            .unwrap_or_else(|| base.to_string())
    }
}

/// A new node's config: each required field with the empty value of its
/// type, so the form starts from a config that parses.
pub fn default_config(schema: &Value) -> Value {
    let mut config = Map::new();
    let required = schema.get("required").and_then(Value::as_array);
    let props = schema.get("properties").and_then(Value::as_object);
    if let (Some(required), Some(props)) = (required, props) {
        for name in required.iter().filter_map(Value::as_str) {
            let ty = props.get(name).and_then(|p| p.get("type"));
            let ty = match ty {
                Some(Value::Array(types)) => types.iter().find(|t| *t != "null"),
                other => other,
            };
            let empty = match ty.and_then(Value::as_str) {
                Some("object") => json!({}),
                Some("array") => json!([]),
                Some("string") => json!(""),
                Some("integer" | "number") => json!(0),
                Some("boolean") => json!(false),
                _ => continue,
            };
            config.insert(name.to_string(), empty);
        }
    }
    Value::Object(config)
}

/// How far `p` is from the segment `a`–`b`.
fn segment_distance(p: (f64, f64), a: (f64, f64), b: (f64, f64)) -> f64 {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len2 = dx * dx + dy * dy;
    let t = if len2 == 0.0 {
        0.0
    } else {
        (((p.0 - a.0) * dx + (p.1 - a.1) * dy) / len2).clamp(0.0, 1.0)
    };
    (p.0 - (a.0 + t * dx)).hypot(p.1 - (a.1 + t * dy))
}

/// Whether a node of `kind` can go into a connection: it takes input (not
/// a trigger) and has an output to feed the connection's target.
/// The output of a `kind` node put into a connection that feeds the
/// connection's old target: its first (`out`; a condition's `true`).
/// Refused, saying why, for a trigger or an ending.
fn port_between(kind: &str) -> Result<String, String> {
    let spec = kinds::spec(kind).ok_or_else(|| format!("unknown kind `{kind}`"))?;
    if spec.is_trigger {
        return Err(format!(
            "a trigger ({kind}) starts runs: it cannot go into a connection"
        ));
    }
    spec.outputs.first().map(|p| p.to_string()).ok_or_else(|| {
        format!("{kind} ends a run: nothing can follow it, so it cannot go into a connection")
    })
}

pub fn fits_between(kind: &str) -> bool {
    kinds::spec(kind).is_some_and(|k| !k.is_trigger && !k.outputs.is_empty())
}

/// Where output `port` of a node at `at` is: on its right edge, the ports
/// spread evenly down it.
pub fn port_at(at: (f64, f64), ports: &[String], port: &str) -> (f64, f64) {
    let i = ports.iter().position(|p| p == port).unwrap_or(0);
    let n = ports.len().max(1);
    (
        at.0 + NODE_W,
        at.1 + NODE_H * (i as f64 + 1.0) / (n as f64 + 1.0),
    )
}

/// The two control points of the S-curve a connection from `a` to `b` is
/// drawn as (a cubic Bézier leaving and arriving horizontally).
pub fn edge_controls(a: (f64, f64), b: (f64, f64)) -> ((f64, f64), (f64, f64)) {
    let bend = ((b.0 - a.0).abs() / 2.0).max(40.0);
    ((a.0 + bend, a.1), (b.0 - bend, b.1))
}

/// Points along the S-curve a connection is drawn as, from `a` to `b`
/// ([`edge_controls`]), 64 of them.
pub fn edge_curve(a: (f64, f64), b: (f64, f64)) -> Vec<(f64, f64)> {
    let (c1, c2) = edge_controls(a, b);
    (0..=64)
        .map(|i| {
            let t = f64::from(i) / 64.0;
            let u = 1.0 - t;
            let w = [u * u * u, 3.0 * u * u * t, 3.0 * u * t * t, t * t * t];
            (
                w[0] * a.0 + w[1] * c1.0 + w[2] * c2.0 + w[3] * b.0,
                w[0] * a.1 + w[1] * c1.1 + w[2] * c2.1 + w[3] * b.1,
            )
        })
        .collect()
}

fn snap(v: f64) -> f64 {
    (v / GRID).round() * GRID
}

/// `http.request` → `request`, `trigger.manual` → `manual`.
fn short_name(kind: &str) -> &str {
    kind.rsplit('.').next().unwrap_or(kind)
}

/// Maps a caret at `pos` (UTF-16 units, as the DOM counts) in `old` to the
/// same place in `new`: unchanged before the edit, shifted after it.
pub fn carry_caret(old: &str, new: &str, pos: u32) -> u32 {
    let old: Vec<u16> = old.encode_utf16().collect();
    let new: Vec<u16> = new.encode_utf16().collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let max_suffix = old.len().min(new.len()) - prefix;
    let suffix = old
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take(max_suffix)
        .take_while(|(a, b)| a == b)
        .count();
    let pos = pos as usize;
    if pos <= prefix {
        pos as u32
    } else if pos >= old.len() - suffix {
        (pos + new.len() - old.len()) as u32
    } else {
        // Inside the replaced part: the end of what replaced it.
        (new.len() - suffix) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn editor() -> Editor {
        Editor::new(
            Workflow::from_value(json!({
                "format": "sluice.workflow/v1", "id": "w", "nodes": [
                    {"id": "t", "kind": "trigger.manual", "position": [0, 0]},
                    {"id": "check", "kind": "flow.if", "config": {"condition": "{{ input.ok }}"}, "position": [280, 0]},
                    {"id": "set", "kind": "data.set", "config": {"values": {"a": 1}}, "position": [560, 0]},
                    {"id": "end", "kind": "output.end"}],
                "edges": [{"from": "t", "to": "check"}, {"from": "check:true", "to": "set"}]
            }))
            .unwrap(),
        )
    }

    /// The editor's connections as `from:port → to`.
    fn edge_list(ed: &Editor) -> Vec<String> {
        ed.wf
            .edges
            .iter()
            .map(|e| {
                format!(
                    "{}:{} → {}",
                    e.source().node,
                    e.source().port,
                    e.target().node
                )
            })
            .collect()
    }

    #[test]
    fn a_node_dropped_on_a_connection_goes_into_it() {
        let mut ed = editor();
        // t (0,0) → check (280,0): the curve runs at y = NODE_H / 2 between.
        let mid = (NODE_W + (280.0 - NODE_W) / 2.0, NODE_H / 2.0);
        assert_eq!(ed.edge_near(mid, 8.0), Some(0));
        assert_eq!(ed.edge_near((mid.0, mid.1 + 40.0), 8.0), None);
        // A long connection is found between its sample points too.
        let mut far = editor();
        far.wf.nodes[1].position = Some([6000.0, 0.0]);
        for x in [300.0, 1234.5, 3001.0, 5900.0] {
            assert_eq!(far.edge_near((x, NODE_H / 2.0), 2.0), Some(0), "at {x}");
        }
        assert!(fits_between("util.log") && fits_between("flow.if"));
        assert!(
            !fits_between("trigger.webhook")
                && !fits_between("output.end")
                && !fits_between("nope")
        );
        // check:true → set: its port is the first of two.
        assert_eq!(
            ed.edge_near((NODE_W + 280.0 + 4.0, NODE_H / 3.0), 8.0),
            Some(1)
        );
        let c = ed
            .reduce(Action::InsertOnEdge {
                kind: "util.log".into(),
                at: (150.0, 100.0),
                edge: 1,
            })
            .unwrap();
        assert_eq!(c, Change::Workflow);
        let new = ed.selected.iter().next().cloned().unwrap();
        let edges = edge_list(&ed);
        assert_eq!(
            edges,
            [
                "t:out → check".to_string(),
                format!("check:true → {new}"),
                format!("{new}:out → set")
            ]
        );
        // A trigger, an ending or a missing connection changes nothing.
        let was = ed.wf.clone();
        for (kind, edge) in [("trigger.webhook", 0), ("output.end", 0), ("util.log", 9)] {
            assert!(
                ed.reduce(Action::InsertOnEdge {
                    kind: kind.into(),
                    at: (0.0, 0.0),
                    edge
                })
                .is_err(),
                "{kind}"
            );
            assert_eq!(ed.wf, was, "{kind}");
        }
    }

    #[test]
    fn a_node_without_connections_dragged_onto_one_goes_into_it() {
        let mut ed = editor();
        // `end` has no connection; `set` has one; neither is selected yet.
        assert_eq!(ed.loose_selected(), None);
        ed.selected = BTreeSet::from(["set".to_string()]);
        assert_eq!(ed.loose_selected(), None, "connected already");
        ed.wf.nodes.push(
            serde_json::from_value(json!(
                {"id": "note", "kind": "util.log", "config": {"message": "hi"}, "position": [140, 300]}
            ))
            .unwrap(),
        );
        ed.selected = BTreeSet::from(["note".to_string()]);
        assert_eq!(ed.loose_selected(), Some("note"));
        // Away from every connection: nothing to go into.
        assert_eq!(ed.splice_target(), None);
        // Its middle on t → check (the curve runs at y = NODE_H / 2).
        ed.wf.nodes.last_mut().unwrap().position = Some([140.0, 10.0]);
        assert_eq!(ed.splice_target(), Some(0));
        let c = ed
            .reduce(Action::SpliceIntoEdge {
                node: "note".into(),
                edge: 0,
            })
            .unwrap();
        assert_eq!(c, Change::Workflow);
        let edges = edge_list(&ed);
        assert_eq!(
            edges,
            ["check:true → set", "t:out → note", "note:out → check"]
        );
        // Connected now: it does not go into another one.
        assert_eq!(ed.loose_selected(), None);
        let was = ed.wf.clone();
        assert!(
            ed.reduce(Action::SpliceIntoEdge {
                node: "note".into(),
                edge: 0
            })
            .is_err()
        );
        // A trigger, an ending, a missing node or connection: nothing changes.
        ed.wf.nodes.push(
            serde_json::from_value(
                json!({"id": "hook", "kind": "trigger.webhook", "position": [0, 400]}),
            )
            .unwrap(),
        );
        for (node, edge) in [("hook", 0), ("end", 0), ("nope", 0), ("end", 9)] {
            let was = ed.wf.clone();
            assert!(
                ed.reduce(Action::SpliceIntoEdge {
                    node: node.into(),
                    edge
                })
                .is_err(),
                "{node} into {edge}"
            );
            assert_eq!(ed.wf, was, "{node} into {edge}");
        }
        assert_eq!(ed.wf.edges, was.edges);
    }

    #[test]
    fn sticky_notes_are_added_written_placed_and_deleted() {
        let mut ed = editor();
        assert!(ed.notes().is_empty());
        let add = |id: &str| Action::AddNote {
            id: id.into(),
            at: (33.0, 47.0),
            text: String::new(),
        };
        assert_eq!(ed.reduce(add("a")).unwrap(), Change::Workflow);
        assert!(ed.reduce(add("a")).is_err(), "ids are unique");
        assert_eq!(
            ed.notes(),
            [Note {
                id: "a".into(),
                text: String::new(),
                x: 40.0,
                y: 40.0,
                w: NOTE_SIZE.0,
                h: NOTE_SIZE.1
            }]
        );
        ed.reduce(add("b")).unwrap();
        let set = |id: &str, text: &str| Action::SetNote {
            id: id.into(),
            text: text.into(),
        };
        ed.reduce(set("a", "**Check** the totals")).unwrap();
        assert_eq!(
            ed.reduce(set("a", "**Check** the totals")).unwrap(),
            Change::None
        );
        ed.reduce(Action::PlaceNote {
            id: "a".into(),
            at: Some((101.0, 59.0)),
            size: Some((10.0, 300.0)),
        })
        .unwrap();
        let n = &ed.notes()[0];
        assert_eq!((n.x, n.y, n.w, n.h), (100.0, 60.0, NOTE_MIN.0, 300.0));
        assert_eq!(
            ed.reduce(Action::PlaceNote {
                id: "a".into(),
                at: Some((100.0, 60.0)),
                size: None
            })
            .unwrap(),
            Change::None
        );
        // Stored as the file has them.
        assert_eq!(
            ed.wf.extra["notes"][0],
            json!({"id": "a", "text": "**Check** the totals", "position": [100.0, 60.0], "size": [120.0, 300.0]})
        );
        // By id, whatever their place: `a` deleted, `b` is still `b`.
        assert!(ed.reduce(set("zz", "x")).is_err());
        assert!(ed.reduce(Action::DeleteNote { id: "zz".into() }).is_err());
        ed.reduce(Action::DeleteNote { id: "a".into() }).unwrap();
        ed.reduce(set("b", "still b")).unwrap();
        assert_eq!(
            (ed.notes()[0].id.as_str(), ed.notes()[0].text.as_str()),
            ("b", "still b")
        );
        ed.reduce(Action::DeleteNote { id: "b".into() }).unwrap();
        assert!(!ed.wf.extra.contains_key("notes"));
    }

    #[test]
    fn notes_from_elsewhere_read_with_defaults_and_keep_their_other_keys() {
        let mut ed = editor();
        ed.wf.extra.insert(
            "notes".into(),
            json!([{"text": "from n8n", "position": [10, 20], "size": [400, 90], "color": 3},
                   {"position": "odd"}, 7]),
        );
        let notes = ed.notes();
        assert_eq!(
            notes[0],
            Note {
                id: "note-0".into(),
                text: "from n8n".into(),
                x: 10.0,
                y: 20.0,
                w: 400.0,
                h: 90.0
            }
        );
        assert_eq!(
            notes[1],
            Note {
                id: "note-1".into(),
                text: String::new(),
                x: 0.0,
                y: 0.0,
                w: NOTE_SIZE.0,
                h: NOTE_SIZE.1
            }
        );
        assert_eq!(notes.len(), 3);
        ed.reduce(Action::SetNote {
            id: "note-0".into(),
            text: "changed".into(),
        })
        .unwrap();
        assert_eq!(ed.wf.extra["notes"][0]["color"], 3);
        assert_eq!(ed.wf.extra["notes"][0]["id"], "note-0");
        // A note that is not an object becomes one when written.
        ed.reduce(Action::SetNote {
            id: "note-2".into(),
            text: "now a note".into(),
        })
        .unwrap();
        assert_eq!(ed.notes()[2].text, "now a note");
    }

    #[test]
    fn a_point_of_the_minimap_is_centred() {
        // A 1000 x 500 world shown in a 200 x 200 box: scale 0.2, bands of
        // 50 px above and below.
        let view_box = Rect {
            x: -100.0,
            y: 0.0,
            w: 1000.0,
            h: 500.0,
        };
        assert_eq!(
            view_box.point_in_view_box((0.0, 50.0), (200.0, 200.0)),
            (-100.0, 0.0)
        );
        assert_eq!(
            view_box.point_in_view_box((200.0, 150.0), (200.0, 200.0)),
            (900.0, 500.0)
        );
        assert_eq!(
            view_box.point_in_view_box((100.0, 100.0), (200.0, 200.0)),
            (400.0, 250.0)
        );
        let mut v = Viewport {
            x: 7.0,
            y: 9.0,
            zoom: 0.5,
        };
        v.center_on(400.0, 250.0, 800.0, 600.0);
        assert_eq!(v.to_screen(400.0, 250.0), (400.0, 300.0));
        assert_eq!(v.zoom, 0.5);
    }

    #[test]
    fn zooming_keeps_the_point_under_the_cursor() {
        let mut v = Viewport::default();
        let before = v.to_world(300.0, 200.0);
        v.zoom_at(300.0, 200.0, 2.0);
        assert_eq!(v.zoom, 2.0);
        let after = v.to_world(300.0, 200.0);
        assert!((before.0 - after.0).abs() < 1e-9 && (before.1 - after.1).abs() < 1e-9);
        v.zoom_at(0.0, 0.0, 1000.0);
        assert_eq!(v.zoom, MAX_ZOOM);
        v.zoom_at(0.0, 0.0, 1e-9);
        assert_eq!(v.zoom, MIN_ZOOM);
        v.zoom_at(0.0, 0.0, f64::NAN);
        assert_eq!(v.zoom, MIN_ZOOM);
        let (sx, sy) = v.to_screen(10.0, 20.0);
        let (wx, wy) = v.to_world(sx, sy);
        assert!((wx - 10.0).abs() < 1e-9 && (wy - 20.0).abs() < 1e-9);
    }

    #[test]
    fn fit_shows_everything() {
        let e = editor();
        let b = e.bounds().unwrap();
        let mut v = Viewport::default();
        v.fit(b, 800.0, 600.0);
        let (x0, y0) = v.to_screen(b.x, b.y);
        let (x1, y1) = v.to_screen(b.x + b.w, b.y + b.h);
        assert!(
            x0 >= 39.0 && y0 >= 0.0 && x1 <= 761.0 && y1 <= 600.0,
            "{x0} {y0} {x1} {y1}"
        );
        assert!(v.zoom <= 1.0);
    }

    #[test]
    fn unplaced_nodes_are_laid_out_by_depth() {
        let mut e = editor();
        for n in &mut e.wf.nodes {
            n.position = None;
        }
        let p = e.positions();
        assert!(p["t"].0 < p["check"].0 && p["check"].0 < p["set"].0);
        // `end` is unconnected: depth 0, below the trigger.
        assert_eq!(p["end"].0, p["t"].0);
        assert!(p["end"].1 > p["t"].1);
    }

    #[test]
    fn a_long_chain_with_a_fork_is_laid_out_by_longest_path() {
        // n0 → n1 → … → n999, and a shortcut n0 → n999: the longest path
        // decides the column, and a cycle elsewhere must not hang it.
        let mut nodes = vec![json!({"id": "n0", "kind": "trigger.manual"})];
        let mut edges = vec![json!({"from": "n0", "to": "n999"})];
        for i in 1..1000 {
            nodes
                .push(json!({"id": format!("n{i}"), "kind": "data.set", "config": {"values": {}}}));
            edges.push(json!({"from": format!("n{}", i - 1), "to": format!("n{i}")}));
        }
        nodes.push(json!({"id": "a", "kind": "data.set", "config": {"values": {}}}));
        nodes.push(json!({"id": "b", "kind": "data.set", "config": {"values": {}}}));
        edges.push(json!({"from": "a", "to": "b"}));
        edges.push(json!({"from": "b", "to": "a"}));
        let wf: Workflow = serde_json::from_value(json!({
            "format": "sluice.workflow/v1", "id": "big", "nodes": nodes, "edges": edges
        }))
        .unwrap();
        let e = Editor::new(wf);
        let p = e.positions();
        assert_eq!(p.len(), 1002);
        assert_eq!(p["n999"].0, 999.0 * (NODE_W + 80.0));
        assert_eq!(p["n500"].0, 500.0 * (NODE_W + 80.0));
        assert_eq!(p["a"].0, 0.0);
    }

    #[test]
    fn selecting() {
        let mut e = editor();
        let sel = |e: &Editor| e.selected.iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            e.reduce(Action::Select {
                id: "t".into(),
                additive: false
            }),
            Ok(Change::View)
        );
        assert_eq!(
            e.reduce(Action::Select {
                id: "t".into(),
                additive: false
            }),
            Ok(Change::None)
        );
        e.reduce(Action::Select {
            id: "set".into(),
            additive: true,
        })
        .unwrap();
        assert_eq!(sel(&e), ["set", "t"]);
        e.reduce(Action::Select {
            id: "t".into(),
            additive: true,
        })
        .unwrap();
        assert_eq!(sel(&e), ["set"]);
        assert_eq!(
            e.reduce(Action::Select {
                id: "nope".into(),
                additive: false
            }),
            Ok(Change::None)
        );
        // A box over the first two nodes.
        let rect = Rect::spanning((-10.0, -10.0), (300.0, 30.0));
        e.reduce(Action::SelectBox {
            rect,
            additive: false,
        })
        .unwrap();
        assert_eq!(sel(&e), ["check", "t"]);
        e.reduce(Action::SelectAll).unwrap();
        assert_eq!(e.selected.len(), 4);
        assert_eq!(e.reduce(Action::ClearSelection), Ok(Change::View));
        assert_eq!(e.reduce(Action::ClearSelection), Ok(Change::None));
    }

    #[test]
    fn moving_and_snapping() {
        let mut e = editor();
        assert_eq!(
            e.reduce(Action::MoveSelected { dx: 5.0, dy: 5.0 }),
            Ok(Change::None)
        );
        e.reduce(Action::Select {
            id: "set".into(),
            additive: false,
        })
        .unwrap();
        e.reduce(Action::Select {
            id: "end".into(),
            additive: true,
        })
        .unwrap();
        let end_before = e.positions()["end"];
        assert_eq!(
            e.reduce(Action::MoveSelected { dx: 13.0, dy: -7.0 }),
            Ok(Change::Positions)
        );
        assert_eq!(e.wf.nodes[2].position, Some([573.0, -7.0]));
        // An unplaced node gets its drawn position plus the move.
        assert_eq!(
            e.wf.nodes[3].position,
            Some([end_before.0 + 13.0, end_before.1 - 7.0])
        );
        assert_eq!(e.wf.nodes[0].position, Some([0.0, 0.0]));
        assert_eq!(e.reduce(Action::SnapSelected), Ok(Change::Positions));
        assert_eq!(e.wf.nodes[2].position, Some([580.0, 0.0]));
        assert_eq!(e.reduce(Action::SnapSelected), Ok(Change::None));
    }

    #[test]
    fn connecting_refuses_what_cannot_be() {
        let mut e = editor();
        let connect = |e: &mut Editor, from: &str, port: &str, to: &str| {
            e.reduce(Action::Connect {
                from: from.into(),
                port: port.into(),
                to: to.into(),
            })
        };
        assert_eq!(
            connect(&mut e, "check", "false", "end"),
            Ok(Change::Workflow)
        );
        assert_eq!(e.wf.edges.last().unwrap().from, "check:false");
        assert_eq!(connect(&mut e, "set", "out", "end"), Ok(Change::Workflow));
        assert_eq!(e.wf.edges.last().unwrap().from, "set");
        let err = |r: Result<Change, String>| r.unwrap_err();
        assert!(err(connect(&mut e, "set", "out", "end")).contains("already leads"));
        assert!(err(connect(&mut e, "set", "nope", "end")).contains("no output `nope`"));
        assert!(err(connect(&mut e, "set", "out", "t")).contains("trigger"));
        assert!(err(connect(&mut e, "set", "out", "set")).contains("itself"));
        assert!(err(connect(&mut e, "set", "out", "ghost")).contains("no node `ghost`"));
        // set → check would close a loop: check → set → check.
        assert!(
            err(connect(&mut e, "set", "out", "check")).contains("cycle"),
            "{:?}",
            connect(&mut e, "set", "out", "check")
        );
        let edges = e.wf.edges.len();
        assert_eq!(
            e.reduce(Action::Disconnect { edge: 0 }),
            Ok(Change::Workflow)
        );
        assert_eq!(e.wf.edges.len(), edges - 1);
        assert_eq!(e.reduce(Action::Disconnect { edge: 99 }), Ok(Change::None));
    }

    #[test]
    fn tidy_lays_out_columns_by_depth_keeping_each_columns_order() {
        let mut e = editor();
        // Scatter them.
        for (n, p) in
            e.wf.nodes
                .iter_mut()
                .zip([[37.0, 900.0], [5.0, -300.0], [700.0, 40.0], [-80.0, 0.0]])
        {
            n.position = Some(p);
        }
        assert_eq!(e.reduce(Action::Tidy), Ok(Change::Workflow));
        let at = |id: &str| {
            e.wf.nodes
                .iter()
                .find(|n| n.id == id)
                .unwrap()
                .position
                .unwrap()
        };
        // t → check → set; `end` has no input: depth 0, under or over `t`
        // by its earlier y.
        let (x0, y0) = (at("end")[0], at("end")[1]);
        assert_eq!(at("t"), [x0, y0 + NODE_H + 60.0], "end was above t");
        assert_eq!(at("check"), [x0 + NODE_W + 80.0, y0]);
        assert_eq!(at("set"), [x0 + 2.0 * (NODE_W + 80.0), y0]);
        assert_eq!(
            (x0, y0),
            (-80.0, -300.0),
            "it starts where the workflow was"
        );
        assert_eq!(
            e.reduce(Action::Tidy),
            Ok(Change::None),
            "tidy twice: no change"
        );
    }

    #[test]
    fn align_and_distribute_the_selection() {
        let mut e = editor();
        for (n, p) in
            e.wf.nodes
                .iter_mut()
                .zip([[0.0, 10.0], [300.0, 50.0], [420.0, -40.0], [900.0, 0.0]])
        {
            n.position = Some(p);
        }
        let pos = |e: &Editor, id: &str| {
            e.wf.nodes
                .iter()
                .find(|n| n.id == id)
                .unwrap()
                .position
                .unwrap()
        };
        e.selected = ["t", "check"].into_iter().map(String::from).collect();
        assert_eq!(
            e.reduce(Action::Arrange(Arrange::AlignTop)),
            Ok(Change::Positions)
        );
        assert_eq!(
            (pos(&e, "t"), pos(&e, "check")),
            ([0.0, 10.0], [300.0, 10.0])
        );
        assert_eq!(
            e.reduce(Action::Arrange(Arrange::AlignLeft)),
            Ok(Change::Positions)
        );
        assert_eq!(pos(&e, "check"), [0.0, 10.0]);
        assert!(
            e.reduce(Action::Arrange(Arrange::DistributeHorizontally))
                .unwrap_err()
                .contains("at least 3")
        );
        e.selected = ["set", "end", "t"].into_iter().map(String::from).collect();
        assert_eq!(
            e.reduce(Action::Arrange(Arrange::DistributeHorizontally)),
            Ok(Change::Positions)
        );
        // t at 0, set at 420 → 450, end at 900.
        assert_eq!(
            (pos(&e, "t"), pos(&e, "set"), pos(&e, "end")),
            ([0.0, 10.0], [450.0, -40.0], [900.0, 0.0])
        );
        assert_eq!(
            e.reduce(Action::Arrange(Arrange::DistributeHorizontally)),
            Ok(Change::None)
        );
        assert_eq!(
            e.reduce(Action::Arrange(Arrange::DistributeVertically)),
            Ok(Change::Positions)
        );
        assert_eq!(
            (pos(&e, "set")[1], pos(&e, "end")[1], pos(&e, "t")[1]),
            (-40.0, -15.0, 10.0)
        );
    }

    #[test]
    fn adding_after_a_port_adds_and_connects_in_one_edit_or_not_at_all() {
        let mut e = editor();
        let nodes = e.wf.nodes.len();
        let edges = e.wf.edges.len();
        assert_eq!(
            e.reduce(Action::AddAfter {
                kind: "util.log".into(),
                at: (900.0, 0.0),
                from: "check".into(),
                port: "false".into(),
            }),
            Ok(Change::Workflow)
        );
        assert_eq!(e.wf.nodes.len(), nodes + 1);
        let new = e.selected.iter().next().unwrap().clone();
        let last = e.wf.edges.last().unwrap();
        assert_eq!((last.source().node, last.source().port), ("check", "false"));
        assert_eq!(last.target().node, new);
        assert_eq!(e.wf.edges.len(), edges + 1);
        // A trigger, a missing node, a port the node lacks: nothing changes.
        let before = e.wf.clone();
        for (kind, from, port) in [
            ("trigger.manual", "check", "true"),
            ("util.log", "ghost", "out"),
            ("util.log", "check", "nope"),
        ] {
            assert!(
                e.reduce(Action::AddAfter {
                    kind: kind.into(),
                    at: (0.0, 0.0),
                    from: from.into(),
                    port: port.into(),
                })
                .is_err(),
                "{kind} after {from}:{port}"
            );
            assert_eq!(
                e.wf, before,
                "{kind} after {from}:{port} changed the workflow"
            );
        }
    }

    #[test]
    fn node_settings_are_set_checked_and_back_to_their_defaults() {
        let mut e = editor();
        let set = |e: &mut Editor, key: &str, value: Option<Value>| {
            e.reduce(Action::SetNodeSetting {
                node: "set".into(),
                key: key.into(),
                value,
            })
        };
        let node = |e: &Editor| serde_json::to_value(&e.wf.nodes[2]).unwrap();
        assert_eq!(
            set(
                &mut e,
                "retry",
                Some(json!({"max_attempts": 5, "backoff_ms": 1000}))
            ),
            Ok(Change::Workflow)
        );
        assert_eq!(
            set(&mut e, "on_error", Some(json!("route"))),
            Ok(Change::Workflow)
        );
        assert_eq!(
            set(&mut e, "timeout_ms", Some(json!(2500))),
            Ok(Change::Workflow)
        );
        assert_eq!(
            set(&mut e, "disabled", Some(json!(true))),
            Ok(Change::Workflow)
        );
        assert_eq!(
            set(&mut e, "notes", Some(json!("Ask **Ana** first"))),
            Ok(Change::Workflow)
        );
        let n = node(&e);
        assert_eq!(n["retry"], json!({"max_attempts": 5, "backoff_ms": 1000}));
        assert_eq!(n["on_error"], "route");
        assert_eq!(n["timeout_ms"], 2500);
        assert_eq!(n["disabled"], true);
        assert_eq!(n["notes"], "Ask **Ana** first");
        assert_eq!(
            set(&mut e, "on_error", Some(json!("route"))),
            Ok(Change::None)
        );
        // A wrong value is refused, naming the node and the setting, and
        // changes nothing.
        let bad = set(&mut e, "on_error", Some(json!("explode"))).unwrap_err();
        assert!(
            bad.contains("node `set`") && bad.contains("on_error"),
            "{bad}"
        );
        assert!(set(&mut e, "timeout_ms", Some(json!(-1))).is_err());
        assert!(
            set(&mut e, "config", Some(json!({})))
                .unwrap_err()
                .contains("not a node setting")
        );
        assert_eq!(node(&e)["on_error"], "route");
        // Defaults remove the key.
        assert_eq!(
            set(&mut e, "disabled", Some(json!(false))),
            Ok(Change::Workflow)
        );
        assert_eq!(
            set(&mut e, "notes", Some(json!("  "))),
            Ok(Change::Workflow)
        );
        assert_eq!(set(&mut e, "retry", Some(json!({}))), Ok(Change::Workflow));
        assert_eq!(set(&mut e, "on_error", None), Ok(Change::Workflow));
        assert_eq!(set(&mut e, "timeout_ms", None), Ok(Change::Workflow));
        let n = node(&e);
        for key in NODE_SETTINGS {
            assert!(n.get(key).is_none(), "{key} left in {n}");
        }
    }

    #[test]
    fn editing_config_and_labels() {
        let mut e = editor();
        let set = |e: &mut Editor, field: &str, value: Option<Value>| {
            e.reduce(Action::SetConfig {
                node: "set".into(),
                field: field.into(),
                value,
            })
        };
        assert_eq!(
            set(&mut e, "values", Some(json!({"a": 2}))),
            Ok(Change::Workflow)
        );
        assert_eq!(e.wf.nodes[2].config, json!({"values": {"a": 2}}));
        assert_eq!(
            set(&mut e, "values", Some(json!({"a": 2}))),
            Ok(Change::None)
        );
        assert_eq!(set(&mut e, "values", None), Ok(Change::Workflow));
        assert_eq!(e.wf.nodes[2].config, json!({}));
        // The model sees the missing field.
        assert!(
            validate(&e.wf)
                .iter()
                .any(|p| p.node.as_deref() == Some("set"))
        );
        assert!(set(&mut e, "x", None).is_ok());
        let err = e
            .reduce(Action::SetConfig {
                node: "ghost".into(),
                field: "x".into(),
                value: None,
            })
            .unwrap_err();
        assert!(err.contains("ghost"));
        let label = |e: &mut Editor, l: &str| {
            e.reduce(Action::SetLabel {
                node: "set".into(),
                label: l.into(),
            })
        };
        assert_eq!(label(&mut e, " Tag the order "), Ok(Change::Workflow));
        assert_eq!(e.wf.nodes[2].label.as_deref(), Some("Tag the order"));
        assert_eq!(label(&mut e, "Tag the order"), Ok(Change::None));
        assert_eq!(label(&mut e, ""), Ok(Change::Workflow));
        assert_eq!(e.wf.nodes[2].label, None);
    }

    #[test]
    fn deleting_takes_the_edges_along() {
        let mut e = editor();
        e.reduce(Action::Select {
            id: "check".into(),
            additive: false,
        })
        .unwrap();
        assert_eq!(e.reduce(Action::DeleteSelected), Ok(Change::Workflow));
        assert!(e.wf.nodes.iter().all(|n| n.id != "check"));
        assert!(e.wf.edges.is_empty());
        assert!(e.selected.is_empty());
        assert_eq!(e.reduce(Action::DeleteSelected), Ok(Change::None));
        assert!(validate(&e.wf).iter().all(|p| p.edge.is_none()));
    }

    #[test]
    fn adding_duplicating_copying_and_pasting() {
        let mut e = editor();
        e.reduce(Action::AddNode {
            kind: "data.set".into(),
            at: (101.0, 309.0),
        })
        .unwrap();
        let added = e.wf.nodes.last().unwrap();
        assert_eq!(
            (added.id.as_str(), added.position),
            ("set_2", Some([100.0, 300.0]))
        );
        assert_eq!(e.selected, BTreeSet::from(["set_2".to_string()]));
        assert!(
            e.reduce(Action::AddNode {
                kind: "data.sett".into(),
                at: (0.0, 0.0)
            })
            .unwrap_err()
            .contains("unknown kind")
        );

        // Duplicate check + set (and the edge between them), offset.
        e.selected = BTreeSet::from(["check".to_string(), "set".to_string()]);
        assert_eq!(e.reduce(Action::DuplicateSelected), Ok(Change::Workflow));
        let ids: Vec<&str> = e.wf.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            ["t", "check", "set", "end", "set_2", "check_2", "set_3"]
        );
        assert_eq!(e.wf.nodes[5].position, Some([320.0, 40.0]));
        assert!(
            e.wf.edges
                .iter()
                .any(|x| x.from == "check_2:true" && x.to == "set_3")
        );
        assert_eq!(
            e.selected,
            BTreeSet::from(["check_2".to_string(), "set_3".to_string()])
        );
        assert!(validate(&e.wf).is_empty(), "{:?}", validate(&e.wf));

        // Copy from one workflow, paste into another.
        let clip = e.copy_selected();
        let mut other = Editor::new(
            Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "o", "nodes": [
                {"id": "check_2", "kind": "trigger.manual"}], "edges": []}))
            .unwrap(),
        );
        assert_eq!(
            other.reduce(Action::Paste {
                json: clip,
                at: (1000.0, 1000.0)
            }),
            Ok(Change::Workflow)
        );
        let ids: Vec<&str> = other.wf.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["check_2", "check_3", "set_3"]);
        assert_eq!(other.wf.nodes[1].position, Some([1000.0, 1000.0]));
        assert_eq!(other.wf.edges[0].from, "check_3:true");
        assert_eq!(other.wf.edges[0].to, "set_3");
        assert!(
            other
                .reduce(Action::Paste {
                    json: "{\"nodes\": 1}".into(),
                    at: (0.0, 0.0)
                })
                .unwrap_err()
                .contains("clipboard")
        );
    }

    #[test]
    fn the_caret_follows_other_peoples_edits() {
        // An insertion before the caret moves it; after, it stays.
        assert_eq!(carry_caret("let a = 1;", "// x\nlet a = 1;", 4), 9);
        assert_eq!(carry_caret("let a = 1;", "let a = 1; // x", 4), 4);
        // A deletion before it pulls it back.
        assert_eq!(carry_caret("abcdef", "def", 5), 2);
        // Astral characters count as two units, as in the DOM.
        assert_eq!(carry_caret("x", "😀x", 1), 3);
        // The caret inside a replaced range lands after the replacement.
        assert_eq!(carry_caret("abcdef", "abXYZef", 3), 5);
    }
}
