//! The rules of DESIGN §3, one small workflow each with its exact expected
//! output: run against both drivers of the state machine, the local
//! executor (`engine/runtime/tests/semantics.rs`) and the shared worker
//! (`engine/worker/tests/semantics.rs`). Included by each, which provide
//! `Harness`, `run_with` (start a run on that driver and wait for it) and `ok`.

#![allow(dead_code)]

use super::*;

/// Every rule, for a harness to turn into tests: `each_rule!(my_tests)`.
macro_rules! each_rule {
    ($m:ident) => {
        $m!(
            parallel_branches_both_run,
            a_template_that_gives_null_is_a_value_not_a_missing_field,
            if_skips_the_other_branch_until_a_merge,
            switch_takes_the_first_matching_case_or_default,
            merge_modes,
            merge_of_only_skipped_edges_is_skipped,
            split_and_join_keep_index_order_and_leave_out_skipped,
            split_of_a_non_array_fails_naming_the_node,
            a_template_of_the_wrong_type_fails_naming_the_field,
            nested_splits,
            several_entries_and_exits,
            on_error_fail_continue_route,
            retries_only_retryable_errors_with_backoff,
            templates_see_earlier_nodes_on_the_path,
            a_runaway_template_fails_its_step_and_the_engine_lives,
            wait_passes_the_message_through,
            a_split_routes_its_own_error_outside_the_split,
            a_split_without_a_join_ends_the_run_only_after_its_elements,
        );
    };
}

pub async fn parallel_branches_both_run(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "a", "kind": "data.set", "config": {"values": {"a": "{{ input.x + 1 }}"}}},
            {"id": "b", "kind": "data.set", "config": {"values": {"b": "{{ input.x * 2 }}"}}},
            {"id": "m", "kind": "flow.merge"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "a"}, {"from": "t", "to": "b"}, {"from": "a", "to": "m"}, {"from": "b", "to": "m"}, {"from": "m", "to": "end"}]),
        None,
        json!({"x": 5}),
    )
    .await;
    ok(&r, json!({"end": {"a": {"a": 6}, "b": {"b": 10}}}));
}

fn if_workflow() -> (Value, Value) {
    (
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "check", "kind": "flow.if", "config": {"condition": "{{ input.total > 100 }}"}},
            {"id": "gold", "kind": "data.set", "config": {"values": {"tier": "gold"}}},
            {"id": "basic", "kind": "data.set", "config": {"values": {"tier": "basic"}}},
            {"id": "after_gold", "kind": "data.set", "config": {"values": {"seen": true}}},
            {"id": "both", "kind": "flow.merge", "config": {"mode": "all"}},
            {"id": "gold_end", "kind": "output.end"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "check"},
            {"from": "check:true", "to": "gold"}, {"from": "check:false", "to": "basic"},
            {"from": "gold", "to": "after_gold"}, {"from": "after_gold", "to": "gold_end"},
            {"from": "gold", "to": "both"}, {"from": "basic", "to": "both"},
            {"from": "both", "to": "end"}
        ]),
    )
}

pub async fn if_skips_the_other_branch_until_a_merge(h: &Harness) {
    let (nodes, edges) = if_workflow();
    let r = run_with(h, nodes.clone(), edges.clone(), None, json!({"total": 150})).await;
    ok(
        &r,
        json!({"gold_end": {"seen": true}, "end": {"gold": {"tier": "gold"}}}),
    );
    // The skip propagates through after_gold to gold_end; the merge still runs.
    let r = run_with(h, nodes, edges, None, json!({"total": 5})).await;
    ok(&r, json!({"end": {"basic": {"tier": "basic"}}}));
}

pub async fn switch_takes_the_first_matching_case_or_default(h: &Harness) {
    let nodes = json!([
        {"id": "t", "kind": "trigger.manual"},
        {"id": "sw", "kind": "flow.switch", "config": {"cases": [
            {"port": "big", "condition": "{{ input > 100 }}"},
            {"port": "medium", "condition": "{{ input > 10 }}"}]}},
        {"id": "big", "kind": "output.end", "config": {"value": "big"}},
        {"id": "medium", "kind": "output.end", "config": {"value": "medium"}},
        {"id": "small", "kind": "output.end", "config": {"value": "small {{ input }}"}}
    ]);
    let edges = json!([
        {"from": "t", "to": "sw"}, {"from": "sw:big", "to": "big"},
        {"from": "sw:medium", "to": "medium"}, {"from": "sw:default", "to": "small"}
    ]);
    ok(
        &run_with(h, nodes.clone(), edges.clone(), None, json!(500)).await,
        json!({"big": "big"}),
    );
    ok(
        &run_with(h, nodes.clone(), edges.clone(), None, json!(50)).await,
        json!({"medium": "medium"}),
    );
    ok(
        &run_with(h, nodes, edges, None, json!(5)).await,
        json!({"small": "small 5"}),
    );
}

pub async fn merge_modes(h: &Harness) {
    for (mode, expect) in [("all", json!({"a": 1, "b": 2})), ("append", json!([1, 2]))] {
        let r = run_with(
            h,
            json!([
                {"id": "t", "kind": "trigger.manual"},
                {"id": "a", "kind": "output.end"},
                {"id": "b", "kind": "data.transform", "config": {"jq": ". + 1"}},
                {"id": "a1", "kind": "data.transform", "config": {"jq": "."}},
                {"id": "m", "kind": "flow.merge", "config": {"mode": mode}},
                {"id": "end", "kind": "output.end"}
            ]),
            // Edge order decides `append` order: a1 (1) before b (2).
            json!([{"from": "t", "to": "a1"}, {"from": "t", "to": "b"}, {"from": "a1", "to": "m"}, {"from": "b", "to": "m"}, {"from": "m", "to": "end"}]),
            None,
            json!(1),
        )
        .await;
        let expect = if mode == "all" {
            json!({"a1": 1, "b": 2})
        } else {
            expect
        };
        ok(&r, json!({"end": expect}));
    }
    // `first`: only the first message to arrive; with one branch skipped it is the other.
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "c", "kind": "flow.if", "config": {"condition": "{{ input }}"}},
            {"id": "m", "kind": "flow.merge", "config": {"mode": "first"}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "c"}, {"from": "c:true", "to": "m"}, {"from": "c:false", "to": "m"}, {"from": "m", "to": "end"}]),
        None,
        json!(false),
    )
    .await;
    ok(&r, json!({"end": false}));
}

pub async fn merge_of_only_skipped_edges_is_skipped(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "c", "kind": "flow.if", "config": {"condition": "{{ false }}"}},
            {"id": "m", "kind": "flow.merge"},
            {"id": "end", "kind": "output.end"},
            {"id": "other", "kind": "output.end", "config": {"value": "ran"}}
        ]),
        json!([{"from": "t", "to": "c"}, {"from": "c:true", "to": "m"}, {"from": "m", "to": "end"}, {"from": "c:false", "to": "other"}]),
        None,
        json!(null),
    )
    .await;
    ok(&r, json!({"other": "ran"}));
}

fn split_workflow(concurrency: u32) -> (Value, Value) {
    (
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "each", "kind": "flow.split", "config": {"items": "{{ input.items }}", "concurrency": concurrency}},
            {"id": "odd", "kind": "flow.if", "config": {"condition": "{{ input % 2 == 1 }}"}},
            {"id": "double", "kind": "data.transform", "config": {"jq": ". * 2"}},
            {"id": "trace", "kind": "output.end", "config": {"value": "{{ input }}"}},
            {"id": "all", "kind": "flow.join"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "each"}, {"from": "each", "to": "odd"},
            {"from": "odd:true", "to": "double"}, {"from": "double", "to": "all"},
            {"from": "double", "to": "trace"}, {"from": "all", "to": "end"}
        ]),
    )
}

pub async fn split_and_join_keep_index_order_and_leave_out_skipped(h: &Harness) {
    for concurrency in [1, 2, 8] {
        let (nodes, edges) = split_workflow(concurrency);
        let r = run_with(h, nodes, edges, None, json!({"items": [1, 2, 3, 4, 5]})).await;
        // Exits inside a split hold an array in lineage order.
        ok(&r, json!({"trace": [2, 6, 10], "end": [2, 6, 10]}));
    }
    let (nodes, edges) = split_workflow(4);
    let r = run_with(h, nodes, edges, None, json!({"items": []})).await;
    ok(&r, json!({"end": []}));
}

pub async fn split_of_a_non_array_fails_naming_the_node(h: &Harness) {
    let (nodes, edges) = split_workflow(2);
    let r = run_with(h, nodes, edges, None, json!({"items": 7})).await;
    assert_eq!(r.status, Status::Failed);
    let err = r.error.unwrap();
    assert_eq!(err.node.as_deref(), Some("each"));
    assert_eq!(
        err.message,
        "flow.split: `items` must be an array, got a number"
    );
}

pub async fn a_template_that_gives_null_is_a_value_not_a_missing_field(h: &Harness) {
    // Nodes read their config as its kind's type after the templates ran;
    // an optional field whose template gives `null` must stay `null`, not
    // fall back to the field's default (`{{ input }}`).
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "end", "kind": "output.end", "config": {"value": "{{ input.missing }}"}},
            {"id": "reply", "kind": "output.respond", "config": {"body": "{{ input.missing }}"}}
        ]),
        json!([{"from": "t", "to": "end"}, {"from": "t", "to": "reply"}]),
        None,
        json!({"x": 1}),
    )
    .await;
    ok(
        &r,
        json!({"end": null, "reply": {"status": 200, "headers": {}, "body": null}}),
    );
}

pub async fn a_template_of_the_wrong_type_fails_naming_the_field(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "call", "kind": "flow.subworkflow", "config": {"workflow": "{{ input.n }}"}}
        ]),
        json!([{"from": "t", "to": "call"}]),
        None,
        json!({"n": 5}),
    )
    .await;
    assert_eq!(r.status, Status::Failed);
    let err = r.error.unwrap();
    assert_eq!(err.node.as_deref(), Some("call"));
    assert_eq!(
        err.message,
        "config.workflow: invalid type: integer `5`, expected a string"
    );
}

/// A split need not be joined: its elements' exits are the run's output,
/// and the run ends only once every element has (before, it ended as soon
/// as the split step did: elements of pure steps never ran, the others
/// were left "running" in a run recorded as succeeded).
pub async fn a_split_without_a_join_ends_the_run_only_after_its_elements(h: &Harness) {
    for concurrency in [1, 8] {
        let r = run_with(
            h,
            json!([
                {"id": "t", "kind": "trigger.manual"},
                {"id": "each", "kind": "flow.split", "config": {"items": "{{ input.items }}", "concurrency": concurrency}},
                {"id": "set", "kind": "data.set", "config": {"values": {"v": "{{ input }}"}}},
                {"id": "double", "kind": "data.transform", "config": {"jq": ".v * 2"}},
                {"id": "seen", "kind": "output.end"},
                {"id": "after", "kind": "output.end", "config": {"value": "split done"}}
            ]),
            json!([
                {"from": "t", "to": "each"}, {"from": "each", "to": "set"},
                {"from": "set", "to": "double"}, {"from": "double", "to": "seen"},
                {"from": "t", "to": "after"}
            ]),
            None,
            json!({"items": [1, 2, 3]}),
        )
        .await;
        ok(&r, json!({"seen": [2, 4, 6], "after": "split done"}));
    }
    // Nested, the inner split unjoined inside a joined outer one.
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "rows", "kind": "flow.split"},
            {"id": "cells", "kind": "flow.split"},
            {"id": "inc", "kind": "data.transform", "config": {"jq": ". + 1"}},
            {"id": "cell", "kind": "output.end"},
            {"id": "size", "kind": "data.transform", "config": {"jq": "length"}},
            {"id": "table", "kind": "flow.join"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "rows"}, {"from": "rows", "to": "cells"}, {"from": "cells", "to": "inc"},
            {"from": "inc", "to": "cell"}, {"from": "rows", "to": "size"}, {"from": "size", "to": "table"},
            {"from": "table", "to": "end"}
        ]),
        None,
        json!([[1, 2], [10], []]),
    )
    .await;
    ok(&r, json!({"cell": [2, 3, 11], "end": [2, 1, 0]}));
}

pub async fn nested_splits(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "rows", "kind": "flow.split"},
            {"id": "cells", "kind": "flow.split"},
            {"id": "inc", "kind": "data.transform", "config": {"jq": ". + 1"}},
            {"id": "row", "kind": "flow.join"},
            {"id": "sum", "kind": "data.transform", "config": {"jq": "add"}},
            {"id": "table", "kind": "flow.join"},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([
            {"from": "t", "to": "rows"}, {"from": "rows", "to": "cells"}, {"from": "cells", "to": "inc"},
            {"from": "inc", "to": "row"}, {"from": "row", "to": "sum"}, {"from": "sum", "to": "table"},
            {"from": "table", "to": "end"}
        ]),
        None,
        json!([[1, 2], [10], []]),
    )
    .await;
    ok(&r, json!({"end": [5, 11, null]}));
}

pub async fn several_entries_and_exits(h: &Harness) {
    let nodes = json!([
        {"id": "by_hand", "kind": "trigger.manual"},
        {"id": "from_flow", "kind": "trigger.workflow"},
        {"id": "a", "kind": "output.end", "config": {"value": "hand {{ input }}"}},
        {"id": "b", "kind": "output.end", "config": {"value": "flow {{ input }}"}},
        {"id": "c", "kind": "output.end"}
    ]);
    let edges = json!([{"from": "by_hand", "to": "a"}, {"from": "by_hand", "to": "c"}, {"from": "from_flow", "to": "b"}]);
    ok(
        &run_with(h, nodes.clone(), edges.clone(), None, json!(1)).await,
        json!({"a": "hand 1", "c": 1}),
    );
    ok(
        &run_with(h, nodes, edges, Some("from_flow"), json!(2)).await,
        json!({"b": "flow 2"}),
    );
}

pub fn failing(on_error: &str) -> (Value, Value) {
    (
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "boom", "kind": "data.transform", "config": {"jq": "error(\"nope\")"}, "on_error": on_error},
            {"id": "out", "kind": "output.end"},
            {"id": "handled", "kind": "output.end"}
        ]),
        if on_error == "route" {
            json!([{"from": "t", "to": "boom"}, {"from": "boom", "to": "out"}, {"from": "boom:error", "to": "handled"}])
        } else {
            json!([{"from": "t", "to": "boom"}, {"from": "boom", "to": "out"}])
        },
    )
}

pub async fn on_error_fail_continue_route(h: &Harness) {
    let (nodes, edges) = failing("fail");
    let r = run_with(h, nodes, edges, None, json!(1)).await;
    assert_eq!(r.status, Status::Failed);
    assert_eq!(
        serde_json::to_value(&r.error).unwrap(),
        json!({"node": "boom", "message": "data.transform: jq runtime error: \"nope\"", "retryable": false, "attempts": 1})
    );
    let error = json!({"node": "boom", "message": "data.transform: jq runtime error: \"nope\"", "retryable": false, "attempts": 1});
    let (nodes, edges) = failing("continue");
    ok(
        &run_with(h, nodes, edges, None, json!(1)).await,
        json!({"out": {"error": error, "input": 1}}),
    );
    let (nodes, edges) = failing("route");
    ok(
        &run_with(h, nodes, edges, None, json!(1)).await,
        json!({"handled": {"error": error, "input": 1}}),
    );
}

pub async fn retries_only_retryable_errors_with_backoff(h: &Harness) {
    // A timeout is retryable: three attempts, then the run fails.
    let t0 = std::time::Instant::now();
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "slow", "kind": "flow.wait", "config": {"duration_ms": 5000}, "timeout_ms": 20,
             "retry": {"max_attempts": 3, "backoff_ms": 30, "factor": 2}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "slow"}, {"from": "slow", "to": "end"}]),
        None,
        json!(null),
    )
    .await;
    assert_eq!(r.status, Status::Failed);
    assert_eq!(
        serde_json::to_value(&r.error).unwrap(),
        json!({"node": "slow", "message": "timed out after 20 ms", "retryable": true, "attempts": 3})
    );
    // 3 × 20 ms timeouts + 30 ms + 60 ms of backoff.
    assert!(
        t0.elapsed() >= std::time::Duration::from_millis(150),
        "{:?}",
        t0.elapsed()
    );
    // A terminal error is not retried even with attempts left.
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "bad", "kind": "data.transform", "config": {"jq": "error(\"x\")"}, "retry": {"max_attempts": 5}},
        ]),
        json!([{"from": "t", "to": "bad"}]),
        None,
        json!(null),
    )
    .await;
    assert_eq!(r.error.unwrap().attempts, Some(1));
}

pub async fn templates_see_earlier_nodes_on_the_path(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "user", "kind": "data.set", "config": {"values": {"name": "Ada"}}},
            {"id": "order", "kind": "data.set", "config": {"values": {"total": 3}}},
            {"id": "end", "kind": "output.end", "config": {"value": {
                "who": "{{ nodes.user.name }}", "total": "{{ input.total }}", "trigger": "{{ nodes.t.x }}",
                "text": "{{ nodes.user.name }} owes {{ input.total }}", "vars": "{{ vars.currency }}",
                "run": "{{ run.workflow }}/{{ run.trigger }}", "dated": "{{ run.started_at is string }}"}}}
        ]),
        json!([{"from": "t", "to": "user"}, {"from": "user", "to": "order"}, {"from": "order", "to": "end"}]),
        None,
        json!({"x": 1}),
    )
    .await;
    ok(
        &r,
        json!({"end": {"who": "Ada", "total": 3, "trigger": 1, "text": "Ada owes 3", "vars": null, "run": "t/t", "dated": true}}),
    );
}

pub async fn a_runaway_template_fails_its_step_and_the_engine_lives(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "loop", "kind": "data.set", "config": {"values": {"x": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}}}
        ]),
        json!([{"from": "t", "to": "loop"}]),
        None,
        json!(null),
    )
    .await;
    assert_eq!(r.status, Status::Failed);
    assert_eq!(
        r.error.unwrap().message,
        "template: template ran out of fuel (more than 200000 steps): is it looping?"
    );
    // The engine still runs other work.
    let (nodes, edges) = if_workflow();
    ok(
        &run_with(h, nodes, edges, None, json!({"total": 5})).await,
        json!({"end": {"basic": {"tier": "basic"}}}),
    );
}

pub async fn wait_passes_the_message_through(h: &Harness) {
    let t0 = std::time::Instant::now();
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "w", "kind": "flow.wait", "config": {"duration_ms": 50}},
            {"id": "end", "kind": "output.end"}
        ]),
        json!([{"from": "t", "to": "w"}, {"from": "w", "to": "end"}]),
        None,
        json!({"k": 1}),
    )
    .await;
    ok(&r, json!({"end": {"k": 1}}));
    assert!(t0.elapsed() >= std::time::Duration::from_millis(50));
}

pub async fn a_split_routes_its_own_error_outside_the_split(h: &Harness) {
    let r = run_with(
        h,
        json!([
            {"id": "t", "kind": "trigger.manual"},
            {"id": "each", "kind": "flow.split", "on_error": "route"},
            {"id": "x", "kind": "data.set", "config": {"values": {"v": "{{ input }}"}}},
            {"id": "all", "kind": "flow.join"},
            {"id": "end", "kind": "output.end"},
            {"id": "oops", "kind": "output.end", "config": {"value": "{{ input.error.message }}"}}
        ]),
        json!([
            {"from": "t", "to": "each"}, {"from": "each", "to": "x"}, {"from": "x", "to": "all"},
            {"from": "all", "to": "end"}, {"from": "each:error", "to": "oops"}
        ]),
        None,
        json!("not a list"),
    )
    .await;
    ok(
        &r,
        json!({"oops": "flow.split: `items` must be an array, got a string"}),
    );
}
