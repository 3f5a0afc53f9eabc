#!/usr/bin/env python3
"""sync-cost.py [DIR]: wall and CPU time of an 80 KiB write plus fsync(2) against the same
write plus fdatasync(2), in place in a 4 MiB file in DIR (default /tmp): the shape of one
journal commit (about 20 WAL pages written over a WAL that is reused, so its size stays)."""
import os, sys, tempfile, time

d = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
fd, path = tempfile.mkstemp(dir=d)
try:
    size, chunk, n = 4 << 20, 80 * 1024, 2000
    buf = os.urandom(chunk)
    os.pwrite(fd, os.urandom(size), 0)
    os.fsync(fd)
    for name, sync in [("fsync", os.fsync), ("fdatasync", os.fdatasync)] * 2:
        t, c = time.perf_counter(), time.process_time()
        for i in range(n):
            os.pwrite(fd, buf, (i * chunk) % (size - chunk))
            sync(fd)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        print(f"{name:9}: {wall / n * 1e6:4.0f} us wall, {cpu / n * 1e6:3.0f} us CPU per write + sync")
finally:
    os.close(fd)
    os.unlink(path)
