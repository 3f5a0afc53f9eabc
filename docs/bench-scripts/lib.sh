# lib.sh: sourced by the scripts beside it.
# serve_bench CMD...: runs `CMD... serve --listen 127.0.0.1:0` on a fresh data dir with no
# retention pass under load, publishes the bench workflow (webhook -> data.set ->
# output.respond, when_finished) and writes wrk's POST script. Sets D (the data dir), PID,
# BASE, TOK and POST (the wrk script). CMD may start with VAR=VALUE words (given to `env`)
# or a wrapper (`valgrind ...`).
serve_bench() {
    D=$(mktemp -d /tmp/sl.XXXX)
    printf '[runs]\nprune_every = "1h"\n' > "$D/config.toml"
    env SLUICE_DATA_DIR="$D" "$@" serve --listen 127.0.0.1:0 > "$D/out" 2> "$D/err" &
    PID=$!
    # Up to 60 s: under valgrind the server takes a while to listen.
    for _ in $(seq 600); do [ -s "$D/out" ] && break; sleep 0.1; done
    BASE=$(head -1 "$D/out" | sed 's/listening on //')
    TOK=$(cat "$D/api-token")
    local wf='{"format": "sluice.workflow/v1", "id": "bench", "nodes": [
    {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
    {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
    {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
    "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}'
    curl -sf -X PUT -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' \
        --data-binary "$wf" "$BASE/api/v1/workflows/bench?publish=true" > /dev/null
    POST=$D/post.lua
    cat > "$POST" <<'L'
wrk.method = "POST"
wrk.body = '{"id": 7, "total": 250, "note": "x"}'
wrk.headers["Content-Type"] = "application/json"
L
}
