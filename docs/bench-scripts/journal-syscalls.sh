#!/usr/bin/env bash
# journal-syscalls.sh BIN: fsync and pwrite calls of the journal thread of sluice serve under the webhook load (3 s, strace -T), summed per file descriptor
BIN=$1
D=$(mktemp -d /tmp/st.XXXX); printf '[runs]\nprune_every = "1h"\n' > $D/config.toml
SLUICE_DATA_DIR=$D $BIN serve --listen 127.0.0.1:0 > $D/out 2>$D/err &
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
wrk -t2 -c64 -d8s -s $D/post.lua $BASE/hook/bench/orders > $D/wrk &
sleep 2
J=$(grep -l sluice-journal /proc/$PID/task/*/comm | head -1 | cut -d/ -f5)
timeout 3 strace -T -tt -e trace=fsync,fdatasync,pwrite64 -p $J -o $D/st 2>/dev/null
wait %2
grep Requests/sec $D/wrk; python3 "$(dirname "$0")/syscall-sum.py" $D/st; ls -la /proc/$PID/fd | grep -E "db|wal" | awk "{print \$9, \$11}" | tr "\n" " "
kill $PID; rm -rf $D
