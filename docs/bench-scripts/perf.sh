#!/usr/bin/env bash
# perf.sh BIN OUT: profile sluice serve under the webhook load
set -euo pipefail
BIN=$1; OUT=$2
D=$(mktemp -d /tmp/sl.XXXX)
printf '[runs]\nprune_every = "1h"\n' > $D/config.toml
env SLUICE_DATA_DIR=$D ${PRELOAD:+LD_PRELOAD=$PRELOAD} $BIN serve --listen 127.0.0.1:0 > $D/out 2>$D/err &
PID=$!
for i in $(seq 50); do [ -s $D/out ] && break; sleep 0.1; done
BASE=$(head -1 $D/out | sed 's/listening on //'); TOK=$(cat $D/api-token)
WF='{"format": "sluice.workflow/v1", "id": "bench", "nodes": [
    {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
    {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
    {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
    "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}'
curl -sf -X PUT -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' --data-binary "$WF" "$BASE/api/v1/workflows/bench?publish=true" >/dev/null
printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' "'{\"id\": 7, \"total\": 250, \"note\": \"x\"}'" > $D/post.lua
wrk -t2 -c64 -d12s -s $D/post.lua $BASE/hook/bench/orders > $D/wrk &
sleep 3
perf record -F 999 ${PERFG:---call-graph dwarf,16384} -p $PID -o $OUT -- sleep 5 2>/dev/null
wait %2 || true
grep Requests/sec $D/wrk
kill $PID; wait $PID 2>/dev/null || true; rm -rf $D
