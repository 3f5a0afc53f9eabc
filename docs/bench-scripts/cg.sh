#!/usr/bin/env bash
# cg.sh BIN OUT: callgrind instructions per webhook request (wrk -t1 -c8, 12 s measured)
set -uo pipefail
BIN=$1; OUT=$2
. "$(dirname "$0")/lib.sh"
serve_bench timeout 300 valgrind --tool=callgrind --callgrind-out-file="$OUT" "$BIN"
wrk -t1 -c8 -d4s -s "$POST" $BASE/hook/bench/orders >/dev/null
callgrind_control -z >/dev/null
N=$(wrk -t1 -c8 -d12s -s "$POST" $BASE/hook/bench/orders | grep "requests in" | awk '{print $1}')
callgrind_control -d >/dev/null; sleep 2; pkill -f "callgrind.*$BIN"; sleep 2
F=$(ls -S $OUT* | head -1)
T=$(grep '^totals:' $F | awk '{print $2}')
echo "requests=$N instructions/request=$((T / N)) file=$F"
rm -rf $D
