#!/usr/bin/env bash
# perf.sh BIN OUT: profile sluice serve under the webhook load
set -euo pipefail
BIN=$1; OUT=$2
. "$(dirname "$0")/lib.sh"
serve_bench ${PRELOAD:+LD_PRELOAD=$PRELOAD} "$BIN"
wrk -t2 -c64 -d12s -s "$POST" $BASE/hook/bench/orders > $D/wrk &
sleep 3
perf record -F 999 ${PERFG:---call-graph dwarf,16384} -p $PID -o $OUT -- sleep 5 2>/dev/null
wait %2 || true
grep Requests/sec $D/wrk
kill $PID; wait $PID 2>/dev/null || true; rm -rf $D
