#!/usr/bin/env python3
"""t56_retention.py: spool.retention bounds the spool and says so.

every: 10 keeps baseline and proxy snapshots at steps that are multiples of
10 only (candidates are never thinned); disk_budget drops the oldest
snapshots (never a run's latest) until the spool fits. Each drop is logged
and written to the WAL: after a restart nothing looks for a dropped file,
and re-sending a dropped step is still acked as a duplicate.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))


def snap(pub, step, n=2000):
    v = np.random.default_rng(step).standard_normal(n).astype(np.float32)
    for i in range(0, n, 1 << 22):     # shards of at most 16 MiB
        pub.tensor(step, "w", v[i:i + (1 << 22)], "f32", offset=i, total=n)
    return pub.commit(step, 1)


def spool_bytes(d):
    total = 0
    for root, _, files in os.walk(os.path.join(d, "var", "spool")):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except FileNotFoundError:
                pass    # removed by retention between the listing and the stat: no bytes
    return total


def wait_for(pred, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def dropped_candidate():
    """Candidate snapshots dropped by the disk budget before their baseline
    came stay dropped after a restart: the baseline's later arrival does not
    compare against a file that is gone."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t56-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    spool = os.path.join(tmp, "var", "spool")
    try:
        path = dm.write_config()
        with open(path, "a") as f:
            f.write("spool:\n  retention:\n    disk_budget: 64M\n")
        check(dm.start() is not None, "ready with disk_budget: 64M")
        fa = Publisher(ctx, tmp, "fa")
        for s in range(30, 110, 10):
            snap(fa, s, 3_000_000)
        check(wait_for(lambda: not os.path.exists(os.path.join(spool, "fa", "30.h5"))),
              "the candidate's oldest step is dropped for the budget (no baseline yet)")
        check(dm.stop() == 0, "SIGTERM")
        check(dm.start() is not None, "restart")
        base = Publisher(ctx, tmp, "base")
        check(snap(base, 30, 3_000_000)["type"] == "ack", "the baseline's step 30 arrives after the restart")
        time.sleep(1.5)
        after = dm.log_text().split("ready:")[-1]
        check("cannot open" not in after, "nothing looks for the dropped candidate file")
        r = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": 30})
        check(r and not r.get("ok"), f"and no result is made up for it ({r and r.get('error')})")
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)


def main():
    dropped_candidate()
    tmp = tempfile.mkdtemp(prefix="wdrift-t56-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    spool = os.path.join(tmp, "var", "spool")
    try:
        path = dm.write_config()
        with open(path, "a") as f:
            f.write("spool:\n  retention:\n    every: 10\n    disk_budget: 64M\n")
        check(dm.start() is not None, "ready with every: 10, disk_budget: 64M")
        base, fa = Publisher(ctx, tmp, "base"), Publisher(ctx, tmp, "fa")
        for s in (5, 10, 15, 20):
            check(snap(base, s)["type"] == "ack", f"baseline step {s} acked")
        snap(fa, 5)
        kept = lambda: sorted(os.listdir(os.path.join(spool, "base")))  # noqa: E731
        check(wait_for(lambda: kept() == ["10.h5", "20.h5"]),
              f"baseline steps 5 and 15 dropped, 10 and 20 kept ({kept()})")
        check(os.path.exists(os.path.join(spool, "fa", "5.h5")), "a candidate's step 5 is not thinned")
        check("dropped run 'base' step 5" in dm.log_text() and "spool.retention.every" in dm.log_text(),
              "each drop is logged with its reason")
        # fa's step 5 came after the baseline's 5 was dropped: never compared, and drift says
        # why (a trial was told "not compared yet (wdrift status: queues)")
        r = subprocess.run([WDRIFT, "drift", "fa", "--step", "5", "-c", path], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 1 and "the baseline's snapshot at step 5 was removed by spool.retention before it "
              "was compared with what came after" in r.stderr and "not compared yet" not in r.stderr,
              "drift --step 5: the baseline's file went to retention, so nothing is compared there",
              r.stderr)
        snap(fa, 25)
        snap(base, 25)      # compared with fa's 25, then dropped (not a multiple of 10)
        check(wait_for(lambda: "25.h5" not in kept() and "dropped run 'base' step 25" in dm.log_text()),
              "the baseline's step 25: compared, then dropped")
        # disk budget: 8 snapshots of 12 MB against 64 MiB
        big = 3_000_000
        for s in range(30, 110, 10):
            snap(base, s, big)
        check(wait_for(lambda: spool_bytes(tmp) <= 64 << 20),
              f"the spool fits its disk budget: {spool_bytes(tmp) >> 20} MiB <= 64")
        check(os.path.exists(os.path.join(spool, "base", "100.h5")), "the run's latest step is kept")
        check("disk_budget" in dm.log_text(), "budget drops are logged")
        # fa's latest is 25: the budget dropped baseline steps it has not reached, which it can never be
        # compared at now; said at warning, once for the candidate (a trial's lagging candidate was acked
        # and never compared, with only notices about the drops)
        lines = [x for x in dm.log_text().splitlines() if "before candidate 'fa'" in x]
        check(len(lines) == 1 and "warning" in lines[0] and "the baseline of study 'fa'" in lines[0]
              and "(its latest is step 25)" in lines[0] and "spool.retention.disk_budget" in lines[0],
              "a baseline step dropped before its candidate reached it: a warning, once", lines)
        # what is kept, in status and /metrics: a trial saw "93 durable" with 40 files left
        def same_as_disk():  # once the compute thread is done with the last snapshots
            sp = (control(ctx, tmp, {"v": 1, "cmd": "status"}) or {}).get("spool", {})
            return sp if (sp.get("files") == sum(len(f) for _, _, f in os.walk(spool))
                          and sp.get("bytes") == spool_bytes(tmp) and sp.get("disk_budget") == 64 << 20
                          and sp.get("dropped_by_retention") == dm.log_text().count("retention: dropped run")) \
                else None
        check(wait_for(same_as_disk), "status: the spool's files and bytes as on disk, its budget, and the drops "
              "the log names", (control(ctx, tmp, {"v": 1, "cmd": "status"}) or {}).get("spool"))
        r = subprocess.run([WDRIFT, "status", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and re.search(r"\nspool      [0-9.]+ MiB in [0-9]+ files of 64M "
                                              r"\(spool\.retention\.disk_budget\); [1-9][0-9]* dropped by "
                                              r"retention since the start \(still durable: a re-send is a "
                                              r"duplicate\)\n", r.stdout),
              "wdrift status: the spool line", r.stdout + r.stderr)
        # a disk_budget lowered by reload applies at once, not at the next snapshot (a trial's
        # removed nothing until the next snapshot came): raised to 1G, filled past 64M, lowered
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("disk_budget: 64M", "disk_budget: 1G"))
        r = subprocess.run([WDRIFT, "reload", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "reload: disk_budget 64M -> 1G", r.stdout + r.stderr)
        for s in range(110, 150, 10):
            snap(base, s, big)
        check(wait_for(lambda: spool_bytes(tmp) > 64 << 20), f"the spool grows past 64M ({spool_bytes(tmp) >> 20} MiB)")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([WDRIFT, "reload", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "reload: disk_budget 1G -> 64M", r.stdout + r.stderr)
        check(wait_for(lambda: spool_bytes(tmp) <= 64 << 20),
              f"the spool fits the lowered budget at once: {spool_bytes(tmp) >> 20} MiB <= 64")
        # restart: drops are remembered
        check(dm.stop() == 0, "SIGTERM")
        check(dm.start() is not None, "restart")
        b2 = Publisher(ctx, tmp, "base")
        w = b2.hello()
        check(w and 5 in w["durable_steps"] and 30 in w["durable_steps"],
              "dropped steps are still durable for the publisher (not re-sent)")
        a = snap(b2, 5)
        check(a and a["type"] == "ack" and a["duplicate"], "re-sending a dropped step: acked as duplicate")
        check("cannot open" not in dm.log_text().split("ready:")[-1],
              "after the restart nothing looks for a dropped file")
        # fa's step 5 came after the baseline's 5 was dropped: never compared, so computed again
        # (and again compares nothing); its step 25 was compared at the baseline's 25, dropped
        # since: that row covers it (a restart counted it without results, every time)
        after = dm.log_text().split("notice: stopped")[-1]
        # the disk budget may have dropped fa's step 5 too (the oldest): then none counts
        want = "" if "dropped run 'fa' step 5" in dm.log_text() else ("compute: 1 snapshot without logged results: computing them again: 'fa' step 5 (study ")
        check((want in after) if want else "without logged results" not in after,
              f"after the restart only the step never compared counts as without results ({want or 'none'})",
              after[-1500:])
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
