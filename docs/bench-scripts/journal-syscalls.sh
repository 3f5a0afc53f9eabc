#!/usr/bin/env bash
# journal-syscalls.sh BIN: fsync and pwrite calls of the journal thread of sluice serve under the webhook load (3 s, strace -T), summed per file descriptor
BIN=$1
. "$(dirname "$0")/lib.sh"
serve_bench "$BIN"
wrk -t2 -c64 -d8s -s "$POST" $BASE/hook/bench/orders > $D/wrk &
sleep 2
J=$(grep -l sluice-journal /proc/$PID/task/*/comm | head -1 | cut -d/ -f5)
timeout 3 strace -T -tt -e trace=fsync,fdatasync,pwrite64 -p $J -o $D/st 2>/dev/null
wait %2
grep Requests/sec $D/wrk; python3 "$(dirname "$0")/syscall-sum.py" $D/st; ls -la /proc/$PID/fd | grep -E "db|wal" | awk "{print \$9, \$11}" | tr "\n" " "
kill $PID; rm -rf $D
