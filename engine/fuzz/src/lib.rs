//! The bodies of Sluice's fuzz targets: everything that reads bytes from
//! outside the engine (DESIGN §8: files, webhook callers, web pages, peers,
//! guests, templates and jq) must turn them into a value or an error that
//! says what is wrong, never a panic, a stack overflow or a hang.
//!
//! `fuzz/fuzz_targets/<name>.rs` calls [`TARGETS`]`[name]` under libFuzzer
//! (`cargo xtask fuzz`); `tests/corpus.rs` replays every file of
//! `fuzz/corpus/<name>/` and `fuzz/regressions/<name>/` through the same
//! body on every `cargo xtask test`, so an input that once crashed stays a
//! test.

use std::sync::LazyLock;

use serde_json::{Value, json};
use sluice_model::doc::{Presence, WorkflowDoc, decode_version, parse_version};
use sluice_model::template::{self, Missing, Scope};
use sluice_model::{Workflow, validate};

/// A fuzz target: its name (the file under `fuzz/fuzz_targets/` and the
/// corpus folder) and its body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    Target {
        name: "workflow",
        run: workflow,
    },
    Target {
        name: "doc_update",
        run: doc_update,
    },
    Target {
        name: "webhook_body",
        run: webhook_body,
    },
    Target {
        name: "ws_message",
        run: ws_message,
    },
    Target {
        name: "template",
        run: template,
    },
    Target {
        name: "jq",
        run: jq,
    },
    Target {
        name: "guest_output",
        run: guest_output,
    },
    Target {
        name: "peer_frames",
        run: peer_frames,
    },
    Target {
        name: "model_stream",
        run: model_stream,
    },
    Target {
        name: "n8n_import",
        run: n8n_import,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A workflow file (`*.flow.json`, an import, a `PUT /api/v1/workflows`
/// body): parsed, validated, planned (templates and jq compiled), and sent
/// through a document and back, which must give the same workflow.
pub fn workflow(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(wf) = Workflow::from_json(text) else {
        return;
    };
    let problems = validate(&wf);
    for p in &problems {
        assert!(!p.message.is_empty(), "a problem without a message: {p:?}");
    }
    // The canonical text parses back to the same workflow.
    let again = Workflow::from_json(&wf.to_json_pretty()).expect("the canonical form parses");
    assert_eq!(again, wf, "the canonical form changed the workflow");
    // A valid workflow survives a document unchanged (an invalid one may be
    // repaired there: a dangling edge is dropped, say).
    if problems.is_empty()
        && let Ok(doc) = WorkflowDoc::from_workflow(&wf, 1)
    {
        let back = doc
            .to_workflow()
            .expect("a document made from a workflow reads back");
        assert_eq!(
            back, wf,
            "a workflow sent through a document came back different"
        );
    }
    let _ = sluice_core::Plan::new(wf);
}

/// A small valid workflow, the document that peer and editor updates are
/// merged into.
static BASE: LazyLock<Workflow> = LazyLock::new(|| {
    Workflow::from_json(
        r#"{"format": "sluice.workflow/v1", "id": "w", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "s", "kind": "data.set", "config": {"values": {"a": "{{ input.x }}"}}}],
            "edges": [{"from": "t", "to": "s"}]}"#,
    )
    .expect("the base workflow parses")
});

/// What an update does to a document, the way the engine takes one (from
/// the editor's socket or a peer): merged, read back as a workflow,
/// validated and planned.
fn merge(update: &[u8]) {
    let doc = WorkflowDoc::from_workflow(&BASE, 1).expect("the base workflow makes a document");
    if doc.import(update).is_ok()
        && let Ok(wf) = doc.to_workflow()
    {
        let _ = validate(&wf);
        let _ = sluice_core::Plan::new(wf);
    }
}

/// Loro updates and version vectors from a peer or the editor, and
/// presence (ephemeral store) updates.
pub fn doc_update(data: &[u8]) {
    merge(data);
    let fresh = WorkflowDoc::new();
    if fresh.import(data).is_ok() {
        let _ = fresh.to_workflow();
    }
    let _ = decode_version(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_version(text);
    }
    let mut presence = Presence::new(30_000);
    let _ = presence.apply(data);
}

/// A webhook request's body: the first line is the `Content-Type` header,
/// the rest the body. Whatever comes back must serialize (it is journaled).
pub fn webhook_body(data: &[u8]) {
    let (ct, body) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&data[..0], data),
    };
    let ct = String::from_utf8_lossy(ct);
    match sluice_server::hook::parse_body(&ct, body) {
        Ok(v) => {
            let text = serde_json::to_string(&v).expect("a body value serializes");
            assert!(body.is_empty() || !v.is_null() || text == "null");
        }
        Err(e) => assert!(
            e.status.is_client_error() && !e.message.is_empty(),
            "{}: {}",
            e.status,
            e.message
        ),
    }
}

/// A text frame on the editor's WebSocket, decoded and then applied the
/// way the server applies it (minus the engine).
pub fn ws_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return; // WebSocket text frames are UTF-8 by the protocol
    };
    match sluice_server::decode_ws_message(text) {
        Ok((msg, _)) => match msg {
            sluice_server::Incoming::Subscribe { since, .. } => {
                let _ = decode_version(&since);
            }
            sluice_server::Incoming::Update { update, .. } => merge(&update),
            sluice_server::Incoming::Presence { update, .. } => {
                let _ = Presence::new(30_000).apply(&update);
            }
            sluice_server::Incoming::Unsubscribe { .. } => {}
        },
        Err(r) => assert!(!r.message.is_empty()),
    }
}

/// The input templates are evaluated against.
static SCOPE: LazyLock<Scope> = LazyLock::new(|| {
    Scope::with_input(json!({
        "id": 7, "name": "Ada", "tags": ["a", "b"], "nested": {"deep": [1, 2.5, null, true]},
        "body": {"items": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 0}]}, "text": "a\nb"
    }))
});

/// A template in a node's config: checked, compiled in both modes and
/// evaluated (bounded by fuel and output size).
pub fn template(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = template::check(text);
    let _ = template::node_refs(text);
    let _ = template::missing_paths(text, &SCOPE);
    for missing in [Missing::Null, Missing::Error] {
        if let Ok(c) = template::compile_str(text, missing) {
            match c.eval(&SCOPE) {
                Ok(v) => {
                    let _: &Value = &v;
                }
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
    }
}

/// A `data.transform` jq program, checked when a workflow is planned.
pub fn jq(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        // The checked entry point (length limit, a thread with a large stack).
        let _ = sluice_core::jq::Program::compile(text);
    }
}

/// What a guest hands back: see `sluice_sandbox::fuzz_guest_output`.
pub fn guest_output(data: &[u8]) {
    sluice_sandbox::fuzz_guest_output(data);
}

/// What a connected peer can send: frames read off the stream, tickets
/// pasted in, and the updates they carry merged into a document.
pub fn peer_frames(data: &[u8]) {
    use sluice_peers::wire::{Frame, MAX_FRAME, read_frame};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut r = data;
        while let Ok(frame) = read_frame(&mut r, MAX_FRAME).await {
            if let Frame::Update { bytes, .. } | Frame::Welcome { update: bytes, .. } = frame {
                merge(&bytes);
                let doc = WorkflowDoc::new();
                if doc.import(&bytes).is_ok() {
                    let _ = doc.to_workflow();
                }
            }
        }
    });
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = sluice_peers::Ticket::decode(text);
    }
}

/// What a model server streams to `ai.chat` (server-sent events): read
/// whole, and read in three pieces split where the input's first two
/// bytes say, the events are the same (or both refused).
pub fn model_stream(data: &[u8]) {
    use sluice_nodes::ai::Sse;
    let Some((&[a, b], body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let whole = {
        let mut sse = Sse::default();
        let mut out = Vec::new();
        sse.push(body, &mut out).map(|()| out)
    };
    let (i, j) = (
        usize::from(a).min(body.len()),
        usize::from(b).min(body.len()),
    );
    let (i, j) = (i.min(j), i.max(j));
    let pieces = {
        let mut sse = Sse::default();
        let mut out = Vec::new();
        sse.push(&body[..i], &mut out)
            .and_then(|()| sse.push(&body[i..j], &mut out))
            .and_then(|()| sse.push(&body[j..], &mut out))
            .map(|()| out)
    };
    match (whole, pieces) {
        (Ok(w), Ok(p)) => assert_eq!(w, p, "the events depend on where the stream was split"),
        (Err(_), Err(_)) => {}
        (w, p) => panic!("whole: {w:?}, in pieces: {p:?}"),
    }
}

/// An n8n export (`sluice import`, `POST /api/v1/import/n8n`, the editor's
/// Import): converted, and what comes out is always a workflow that parses
/// and validates its shape (a node the import could not make is a disabled
/// pass-through, never a broken file).
pub fn n8n_import(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(imported) = sluice_model::n8n::convert(&v, &|id| id.len() % 3 == 0) else {
        return;
    };
    let text = imported.workflow.to_string();
    if let Err(e) = Workflow::from_json(&text) {
        panic!("the converted workflow does not parse: {e}\n{text}");
    }
    let _ = imported.report.text();
}
