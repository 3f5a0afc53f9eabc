//! Writes the starting corpus of every fuzz target into `fuzz/corpus/`
//! (files named `seed-*`; libFuzzer adds its own, named by hash). Run by
//! hand when a target or a format changes:
//! `cargo test -p sluice-fuzz-targets --test seeds -- --ignored`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use sluice_model::Workflow;
use sluice_model::doc::{Presence, WorkflowDoc, encode_version};
use sluice_peers::wire::{Frame, write_frame};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn put(target: &str, name: &str, data: impl AsRef<[u8]>) {
    let dir = root().join("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("seed-{name}")), data).unwrap();
}

fn workflows() -> Vec<(String, Workflow)> {
    let mut out = Vec::new();
    for name in ["hello", "orders"] {
        let path = root().join(format!("assets/examples/{name}.flow.json"));
        let text = std::fs::read_to_string(path).unwrap();
        out.push((name.to_string(), Workflow::from_json(&text).unwrap()));
    }
    // One node of every kind, with an empty config: every kind's checks.
    let nodes: Vec<Value> = sluice_model::catalog()
        .iter()
        .enumerate()
        .map(|(i, k)| json!({"id": format!("n{i}"), "kind": k.kind, "config": {}}))
        .collect();
    let every = json!({"format": "sluice.workflow/v1", "id": "every", "nodes": nodes, "edges": []});
    out.push((
        "every-kind".into(),
        Workflow::from_json(&every.to_string()).unwrap(),
    ));
    out
}

#[test]
#[ignore = "writes fuzz/corpus; run by hand"]
fn write_seed_corpus() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (name, wf) in workflows() {
        put("workflow", &format!("{name}.json"), wf.to_json_pretty());
        let doc = WorkflowDoc::from_workflow(&wf, 1).unwrap();
        let full = doc.updates_since(&Default::default()).unwrap();
        put("doc_update", &format!("{name}-full"), &full);
        put(
            "doc_update",
            &format!("{name}-snapshot"),
            doc.snapshot().unwrap(),
        );
        put(
            "doc_update",
            &format!("{name}-version"),
            encode_version(&doc.version()),
        );
        // An edit on top: the kind of update the editor sends.
        let before = doc.version();
        let mut edited = wf.clone();
        edited.name = format!("{name} (edited)");
        if let Some(n) = edited.nodes.first_mut() {
            n.position = Some([40.0, 80.0]);
        }
        doc.apply(&edited).unwrap();
        let edit = doc.updates_since(&before).unwrap();
        put("doc_update", &format!("{name}-edit"), &edit);
        let mut presence = Presence::new(30_000);
        let p = presence.set(
            "peer-1",
            &json!({"name": "Ada", "selected": ["t"], "cursor": [1, 2]}),
        );
        put("doc_update", &format!("{name}-presence"), &p);

        for (kind, field, bytes) in [("doc.update", "update", &edit), ("presence", "update", &p)] {
            let msg = json!({"type": kind, "workflow": wf.id, field: B64.encode(bytes), "ref": 3});
            put("ws_message", &format!("{name}-{kind}"), msg.to_string());
        }
        let sub = json!({"type": "doc.subscribe", "workflow": wf.id, "version": B64.encode(encode_version(&before))});
        put("ws_message", &format!("{name}-subscribe"), sub.to_string());

        let mut frames = Vec::new();
        rt.block_on(async {
            write_frame(
                &mut frames,
                &Frame::Update {
                    seq: 1,
                    bytes: full.clone(),
                },
            )
            .await
            .unwrap();
            write_frame(
                &mut frames,
                &Frame::Update {
                    seq: 2,
                    bytes: edit.clone(),
                },
            )
            .await
            .unwrap();
            write_frame(&mut frames, &Frame::Ack { seq: 2 })
                .await
                .unwrap();
        });
        put("peer_frames", &format!("{name}-updates"), &frames);
    }
    put(
        "ws_message",
        "unsubscribe",
        r#"{"type":"doc.unsubscribe","workflow":"w"}"#,
    );
    put(
        "ws_message",
        "bad-base64",
        r#"{"type":"doc.update","workflow":"w","update":"!!","ref":{"a":[1]}}"#,
    );

    for (name, ct, body) in [
        (
            "json",
            "application/json",
            r#"{"n": 1, "items": [{"sku": "x", "qty": 2.5}], "s": "\u00e9"}"#,
        ),
        (
            "json-charset",
            "application/json; charset=utf-8",
            "[1, 2, null, true]",
        ),
        (
            "vendor-json",
            "application/vnd.api+json",
            r#"{"data": {"type": "x"}}"#,
        ),
        (
            "form",
            "application/x-www-form-urlencoded",
            "a=1&b=two+words&c=%E2%9C%93&a=again",
        ),
        ("text", "text/plain; charset=utf-8", "hello\nworld"),
        ("none", "", "no content type"),
        ("bytes", "application/octet-stream", "\u{0}\u{1}\u{2}binary"),
        (
            "multipart",
            "multipart/form-data; boundary=xyz",
            "--xyz\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nv\r\n--xyz--\r\n",
        ),
    ] {
        put("webhook_body", name, format!("{ct}\n{body}"));
    }

    for (name, t) in [
        ("path", "{{ input.id }}"),
        (
            "text",
            "Hello {{ input.name | upper }}, you have {{ input.tags | length }} tags",
        ),
        (
            "loop",
            "{% for i in input.body.items %}{{ i.sku }}={{ i.qty * 2 }};{% endfor %}",
        ),
        ("node-ref", "{{ nodes.set.a }}"),
        (
            "filters",
            "{{ input.nested.deep | map('string') | join(',') | replace('1', 'one') }}",
        ),
        (
            "cond",
            "{% if input.id > 3 and input.name is string %}big{% else %}small{% endif %}",
        ),
        (
            "macro",
            "{% macro f(x) %}{{ x ~ x }}{% endmacro %}{{ f(input.name) }}",
        ),
        (
            "set",
            "{% set total = 0 %}{% for i in input.body.items %}{% set total = total + i.qty %}{% endfor %}{{ total }}",
        ),
        (
            "index",
            "{{ input['body']['items'][0].sku ~ input.text[1:] }}",
        ),
        ("missing", "{{ input.nope.deeper }}"),
    ] {
        put("template", name, t);
    }

    for (name, p) in [
        ("identity", "."),
        ("map", ".body.items | map(.qty) | add"),
        (
            "select",
            "[.body.items[] | select(.qty > 0) | {sku, q: .qty}]",
        ),
        ("reduce", "reduce .[] as $x (0; . + $x)"),
        ("def", "def f(g): [.[] | g]; f(. * 2)"),
        (
            "strings",
            r#".name | ascii_downcase | split("") | join("-") | test("a")"#,
        ),
        ("try", "try error(\"x\") catch ."),
        ("paths", "[paths(type == \"number\")] | length"),
    ] {
        put("jq", name, p);
    }

    for (name, g) in [
        (
            "object",
            &b"o{\"total\":15,\"items\":[1,2.5,\"x\",null,true]}"[..],
        ),
        (
            "error",
            br#"e{"name":"RangeError","message":"bad","line":4,"column":1}"#,
        ),
        ("float", b"o10013358428028034712600133584280280347126441"),
        ("pointer", b"\x04\x00\x00\x00\x02\x00\x00\x00abcdefgh"),
    ] {
        put("guest_output", name, g);
    }
}
