# syscall-sum.py FILE: strace -T output summed per (call, fd): calls/s, total and longest time
import sys,re,collections
agg=collections.defaultdict(lambda:[0,0.0,0.0])
for l in open(sys.argv[1]):
    m=re.search(r'(\w+)\((\d+)[,)].*<([\d.]+)>',l)
    if not m: continue
    k=(m.group(1),m.group(2)); a=agg[k]; a[0]+=1; t=float(m.group(3)); a[1]+=t; a[2]=max(a[2],t)
for k,(n,t,mx) in sorted(agg.items()): print(k, "calls/s %.0f  total %.3f s of 3  max %.2f ms"%(n/3,t,mx*1000))
