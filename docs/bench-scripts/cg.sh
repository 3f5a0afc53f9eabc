#!/usr/bin/env bash
# cg.sh BIN OUT: callgrind instructions per webhook request (wrk -t1 -c8, 12 s measured)
set -uo pipefail
BIN=$1; OUT=$2
D=$(mktemp -d /tmp/cg.XXXX); printf '[runs]\nprune_every = "1h"\n' > $D/config.toml
(SLUICE_DATA_DIR=$D timeout 300 valgrind --tool=callgrind --callgrind-out-file=$OUT $BIN serve --listen 127.0.0.1:0 > $D/out 2>$D/err &)
for i in $(seq 100); do [ -s $D/out ] && break; sleep 0.5; done
BASE=$(head -1 $D/out | sed 's/listening on //'); TOK=$(cat $D/api-token)
WF='{"format": "sluice.workflow/v1", "id": "bench", "nodes": [
    {"id": "hook", "kind": "trigger.webhook", "config": {"method": "POST", "path": "orders", "respond": "when_finished"}},
    {"id": "set", "kind": "data.set", "config": {"values": {"id": "{{ input.body.id }}", "tier": "gold"}}},
    {"id": "reply", "kind": "output.respond", "config": {"status": 200, "body": "{{ input }}"}}],
    "edges": [{"from": "hook", "to": "set"}, {"from": "set", "to": "reply"}]}'
curl -sf -X PUT -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' --data-binary "$WF" "$BASE/api/v1/workflows/bench?publish=true" >/dev/null
printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' "'{\"id\": 7, \"total\": 250, \"note\": \"x\"}'" > $D/post.lua
wrk -t1 -c8 -d4s -s $D/post.lua $BASE/hook/bench/orders >/dev/null
callgrind_control -z >/dev/null
N=$(wrk -t1 -c8 -d12s -s $D/post.lua $BASE/hook/bench/orders | grep "requests in" | awk '{print $1}')
callgrind_control -d >/dev/null; sleep 2; pkill -f "callgrind.*$BIN"; sleep 2
F=$(ls -S $OUT* | head -1)
T=$(grep '^totals:' $F | awk '{print $2}')
echo "requests=$N instructions/request=$((T / N)) file=$F"
rm -rf $D
