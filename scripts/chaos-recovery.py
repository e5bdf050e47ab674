#!/usr/bin/env python3
"""Recovery per fault of a chaos run (scripts/chaos-real.sh writes its inputs): for each fault,
the time until every worker executes again and until every waiter pending at it has its answer;
then one "peer row" for the side-by-side table (right, lost, failed, executions beyond one,
zombie worker-minutes, worst recoveries).

    scripts/chaos-recovery.py OUT [PEER]   # OUT: target/chaos/<tag>
"""
import sys, datetime, collections
out = sys.argv[1]
def ms(iso):
    return int(datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
faults = []
for line in open(f"{out}/faults.log"):
    parts = line.split()
    if len(parts) == 2 and parts[0][:2] == "20" and parts[0].endswith("Z"):
        faults.append((ms(parts[0]), parts[1]))
execs = collections.defaultdict(list)
for line in open(f"{out}/exec.log"):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 5 and f[4].isdigit():
        execs[f[3]].append(int(f[4]))
runs = []
for line in open(f"{out}/runs.tsv"):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 6 and f[4].isdigit() and f[5].isdigit():
        runs.append((int(f[4]), int(f[5])))
import os, re
killed = set(open(f"{out}/killed.txt").read().split()) if os.path.exists(f"{out}/killed.txt") else set()
load_end = max((a for (_, a) in runs), default=0)
zombie_s = 0.0
worst_workers = worst_waiters = 0.0
print("recovery per fault (s after the fault began): every worker executing again | every waiter pending at it answered")
for i, (t, kind) in enumerate(faults):
    nxt = faults[i + 1][0] if i + 1 < len(faults) else float("inf")
    # The workers up at the fault: started before it (their first execution), not killed since.
    active = [p for p, ts in execs.items() if p not in killed and min(ts) < t]
    backs = []
    for p in active:
        after = [x for x in execs[p] if x >= t]
        backs.append((min(after) - t) / 1000 if after and min(after) < nxt else None)
        # A zombie: a live worker that takes no work for more than 10 s after a fault while runs
        # are still pending (the load goes on until load_end).
        until = min(min(after) if after else load_end, load_end)
        if until - t > 10000:
            zombie_s += (until - t - 10000) / 1000
    known = [b for b in backs if b is not None]
    silent = len(backs) - len(known)
    waiters = [a for (s, a) in runs if s <= t <= a]
    w = (max(waiters) - t) / 1000 if waiters else 0.0
    wk = f"{max(known):.1f}" if known else "-"
    worst_workers = max([worst_workers] + known)
    worst_waiters = max(worst_waiters, w)
    print(f"  {kind:16} workers {wk:>6} s ({len(known)} of {len(backs)}; {silent} without work before the next fault) | waiters {w:6.1f} s ({len(waiters)} pending)")
summary = open(f"{out}/client.out").read()
def num(name):
    m = re.search(rf"\b{name} (\d+)", summary)
    return m.group(1) if m else "?"
m = re.search(r"beyond one (\d+)", summary)
twice = m.group(1) if m else "?"
peer = sys.argv[2] if len(sys.argv) > 2 else "ours"
print(f"peer row | {peer} | right {num('right')} of {num('runs')} | lost {num('lost')} | failed {num('failed')} | executions beyond one {twice} | zombie worker-minutes {zombie_s / 60:.1f} | worst recovery: workers {worst_workers:.1f} s, waiters {worst_waiters:.1f} s")
