#!/usr/bin/env bash
# run.sh BIN SECS [VAR=VALUE...]: sluice serve on a fresh data dir (VAR=VALUE in its environment), wrk -t2 -cCONNS (64) on the bench workflow or, with FLOOR=1, GET /api/v1/health; prints requests/s, p50, p99, CPU per request by thread, and the cores' idle and iowait
set -euo pipefail
BIN=$1; SECS=$2; shift 2
CONNS=${CONNS:-64}
. "$(dirname "$0")/lib.sh"
serve_bench "$@" "$BIN"
if [ -n "${FLOOR:-}" ]; then URL="$BASE/api/v1/health"; ARGS=(-H "Authorization: Bearer $TOK"); S=(); else URL="$BASE/hook/bench/orders"; ARGS=(); S=(-s "$POST"); fi
wrk -t2 -c$CONNS -d2s "${S[@]}" "${ARGS[@]}" $URL >/dev/null
snap() { for t in /proc/$PID/task/*; do echo "$(cat $t/comm | tr ' ' _) $(awk '{print $14, $15}' $t/stat)"; done | awk '{u[$1]+=$2; s[$1]+=$3} END {for (k in u) print k, u[k], s[k]}' | sort; }
F0=$(awk '{print $10}' /proc/$PID/stat)
snap > $D/a
I0=$(head -1 /proc/stat)
wrk -t2 -c$CONNS -d${SECS}s --latency "${S[@]}" "${ARGS[@]}" $URL > $D/wrk
snap > $D/b
I1=$(head -1 /proc/stat)
F1=$(awk '{print $10}' /proc/$PID/stat)
REQ=$(grep 'requests in' $D/wrk | awk '{print $1}')
RPS=$(grep Requests/sec $D/wrk | awk '{print $2}')
P50=$(grep ' 50%' $D/wrk | awk '{print $2}'); P99=$(grep ' 99%' $D/wrk | awk '{print $2}')
echo "rps=$RPS p50=$P50 p99=$P99 minflt/req=$(echo "($F1-$F0)/$REQ" | bc -l | cut -c1-5) rss=$(grep VmRSS /proc/$PID/status | awk '{print $2}')kB"
join $D/a $D/b | awk -v n=$REQ '{du=($4-$2)*10000/n; ds=($5-$3)*10000/n; if (du+ds>0.3) printf "  %-18s user %6.1f sys %6.1f us/req\n", $1, du, ds; tu+=du; ts+=ds} END {printf "  %-18s user %6.1f sys %6.1f us/req\n", "TOTAL", tu, ts}'
echo "$I0" "$I1" | awk '{t0=0;for(i=2;i<=11;i++)t0+=$i; t1=0;for(i=13;i<=22;i++)t1+=$i; printf "  idle %.1f%%  iowait %.1f%% of 2 cores\n", ($16-$5)*100/(t1-t0), ($17-$6)*100/(t1-t0)}'
kill $PID; wait $PID 2>/dev/null || true
rm -rf $D
