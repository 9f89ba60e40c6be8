#!/usr/bin/env python3
"""t111_never_step.py: `drift --step N` says a run whose row at step N will never come.

A trial asked `wdrift drift fa --step 1` for a step whose candidate snapshot
had expired (a rank killed), after the job's later steps had come. It read
"not compared at this step yet: fa" and "lagging fa: compared last at step
0", as if step 1 were still on its way; it never would be. Now a run with
later snapshots and none at or near step N (durable, or held in intake) is
said as never compared there: its step N expired incomplete (when, and why
when it is the latest), or it sent none. A run that truly lags is still
said to lag. `wdrift studies` says a run whose latest news is an expired
step, as `drift` does. `wdrift runs` says a run's one role in two studies
once, beside both.

A real daemon (limits.pending_timeout: 5) and raw publishers on its real
ipc socket; the daemon stopped by pid and the temp dir removed, also on
failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import zmq  # noqa: E402
from harness import WDRIFT, Daemon, Publisher, check, summary, teardown  # noqa: E402

N = 1000


def wd(tmp, *args):
    return subprocess.run([WDRIFT, *args, "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True,
                          text=True, timeout=30)


def send(p, step, scale, half=False):
    """p's snapshot of step: one tensor "w"; half: only rank 0's half of it, and its commit as rank 0
    of 2 (it waits for rank 1, which never comes: the step expires)."""
    x = (np.arange(N, dtype=np.float32) * scale + step).astype(np.float32)
    if half:
        p.tensor(step, "w", x[: N // 2], "f32", total=N, shape=[N])
        p.send_raw([json.dumps({"v": 1, "type": "commit", "run": p.run, "step": step, "tensors": 1,
                                  "ranks": 2, "rank": 0}).encode()])
        return None
    p.tensor(step, "w", x, "f32")
    return p.commit(step, 1)


def wait_step(tmp, step, timeout=20):
    """The study's drift --json at step once it is complete; the last reply otherwise."""
    end, o = time.time() + timeout, None
    while time.time() < end:
        r = wd(tmp, "drift", "fa", "--step", str(step), "--json")
        if r.returncode == 0:
            o = json.loads(r.stdout)
            if o.get("complete"):
                return o
        time.sleep(0.2)
    return o


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t111-")
    dm = Daemon(tmp)
    ctx = zmq.Context()
    try:
        # a second study of the same baseline and candidate (and lowprec a candidate there): `runs` says
        # one role once, two roles each
        dm.write_config(extra="  - name: other\n    baseline: base\n    candidates: [fa, lowprec, late]\n"
                              "  - name: alone\n    baseline: base\n    candidates: [late]\n",
                        limits="pending_timeout: 5")
        check(dm.start() is not None, "daemon ready with limits.pending_timeout: 5")
        base, fa, low = (Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec"))
        for p, s in ((base, 1.0), (fa, 1.01), (low, 1.001)):
            a = send(p, 0, s)
            check(a and a.get("type") == "ack", f"{p.run} step 0 acked ({a})")
        check(wait_step(tmp, 0) is not None, "step 0 compared")

        # step 1: fa sends half of it and commits; it expires after 5 s
        for p, s in ((base, 1.0), (low, 1.001)):
            send(p, 1, s)
            p.recv()
        send(fa, 1, 1.01, half=True)
        late = Publisher(ctx, tmp, "late")     # a candidate of study other whose first step expires
        send(late, 1, 1.02, half=True)
        fa.s.setsockopt(zmq.RCVTIMEO, 15000)
        late.s.setsockopt(zmq.RCVTIMEO, 15000)
        e = fa.recv()
        el = late.recv()
        check(e and e.get("type") == "error" and e.get("code") == "incomplete",
              f"fa's half step 1 is refused incomplete at the expiry ({e})")

        # meanwhile, before any later step of fa: studies says the expired step (as drift does)
        r = wd(tmp, "studies")
        lines = [x for x in r.stdout.splitlines() if x.startswith("expired   study 'fa':")]
        check(r.returncode == 0 and lines and "'fa' (candidate): 1 step expired incomplete" in lines[0]
              and "the latest step 1" in lines[0], "studies says fa's expired step", r.stdout + r.stderr)
        r = wd(tmp, "studies", "--json")
        got = [s for s in json.loads(r.stdout)["studies"] if s["name"] == "fa"] if r.returncode == 0 else []
        check(got and "the latest step 1" in (got[0].get("expired") or ""), "studies --json: expired",
              r.stdout[-1500:])

        # a run whose only step expired: not on its way either (a review: it read "not compared yet")
        r = wd(tmp, "drift", "other", "--step", "1")
        check(el and el.get("code") == "incomplete" and r.returncode == 0 and
              "\nnever      'late' (candidate): its step 1 expired incomplete" in r.stdout and
              "not compared at this step yet: late" not in r.stdout,
              "drift other --step 1: 'late', whose only step expired, is not on its way", r.stdout + str(el))

        # a study with no proxy has no row at all at that step: its error says the expiry, not alignment
        # (a trial's blamed alignment.tolerance)
        r = wd(tmp, "drift", "alone", "--step", "1")
        check(r.returncode == 1 and "'late' (candidate): its step 1 expired incomplete" in r.stderr and
              "rank 1 of 2 never committed" in r.stderr and "alignment.tolerance" not in r.stderr,
              "drift alone --step 1: the error names the expired step", r.stdout + r.stderr)

        # meanwhile drift --step 1 says fa's step 1 expired, not that it lags: its job may send it again,
        # but nothing is on its way (a trial's, with the job down)
        r = wd(tmp, "drift", "fa", "--step", "1")
        never = [x for x in r.stdout.splitlines() if x.startswith("never      ")]
        check(r.returncode == 0 and "lagging" not in r.stdout and "not compared at this step yet" not in r.stdout
              and never and "'fa' (candidate): its step 1 expired incomplete" in never[0] and "rank 1 of 2 never "
              "committed" in never[0] and "later step" not in never[0] and "unless its job sends that step again"
              in never[0], "drift --step 1 with fa's job down: the expired step, not lagging", r.stdout + r.stderr)

        # steps 2 and 4: every run whole; lowprec skips step 3 (base and fa send it)
        for step in (2, 3, 4):
            for p, s in ((base, 1.0), (fa, 1.01), (low, 1.001)):
                if p is low and step == 3:
                    continue
                a = send(p, step, s)
                check(a and a.get("type") == "ack", f"{p.run} step {step} acked")
        check(wait_step(tmp, 4) is not None, "step 4 compared")
        r = wd(tmp, "studies")
        check(r.returncode == 0 and "expired   study 'fa'" not in r.stdout,
              "studies no longer says the expired step once a later one of fa is durable", r.stdout)

        # drift --step 1: fa's row will never come; not "yet", not lagging
        r = wd(tmp, "drift", "fa", "--step", "1")
        out = r.stdout
        never = [x for x in out.splitlines() if x.startswith("never      ")]
        check(r.returncode == 0 and "not compared at this step yet" not in out and "lagging" not in out,
              "drift --step 1: fa is not said to be coming, nor to lag", out + r.stderr)
        check("incomplete not compared at this step, and not on its way: fa" in out,
              "drift --step 1: the incomplete line says it will not be", out)
        check(never and "'fa' (candidate): its step 1 expired incomplete" in never[0]
              and "never durable" in never[0] and "later steps (2 to 4)" in never[0] and
              "(no candidate compared at this step)" in out, "the never line says why; no 'yet' below", out)
        r = wd(tmp, "drift", "fa", "--step", "1", "--json")
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        check(o.get("missing") == ["fa"] and "fa" in o.get("never", {}) and "missing_latest" not in o,
              "drift --step 1 --json: missing and never name fa, missing_latest not", r.stdout[-2000:])

        # drift --step 3: lowprec sent no step 3, and has step 4
        r = wd(tmp, "drift", "fa", "--step", "3")
        out = r.stdout
        never = [x for x in out.splitlines() if x.startswith("never      ")]
        check(r.returncode == 0 and "lagging" not in out and
              "incomplete not compared at this step, and not on its way: lowprec" in out and never and
              "'lowprec' (proxy fp16): sent no snapshot at or within alignment.tolerance (0) of step 3" in never[0]
              and "later step (4)" in never[0],
              "drift --step 3: lowprec sent none there, and will not", out + r.stderr)

        # step 5: base and fa; lowprec truly lags: still "yet" and "lagging"
        for p, s in ((base, 1.0), (fa, 1.01)):
            a = send(p, 5, s)
            check(a and a.get("type") == "ack", f"{p.run} step 5 acked")
        end = time.time() + 20
        while time.time() < end:
            r = wd(tmp, "drift", "fa", "--step", "5")
            if r.returncode == 0:
                break
            time.sleep(0.2)
        out = r.stdout
        check(r.returncode == 0 and "incomplete not compared at this step yet: lowprec" in out and
              "lagging    lowprec (proxy): compared last at step 4" in out and "never" not in out,
              "drift --step 5: a run that lags is still said to lag", out + r.stderr)
        # ... but not once its job has gone: no publisher of it connected, nothing is on its way (a trial's
        # finished jobs were "lagging ... yet")
        low.s.close(linger=0)
        time.sleep(0.3)
        r = wd(tmp, "drift", "fa", "--step", "5")
        out = r.stdout
        check(r.returncode == 0 and "lagging" not in out and "not compared at this step yet" not in out
              and "incomplete not compared at this step, and not on its way: lowprec" in out
              and "\nnever      'lowprec' (proxy fp16): its latest snapshot is of step 4, and no publisher of it "
              "is connected now (its job has ended, or has not reconnected): nothing of it is on its way to this "
              "step\n" in out,
              "drift --step 5, lowprec's publisher gone: not lagging, nothing on its way", out + r.stderr)
        low = Publisher(ctx, tmp, "lowprec")
        low.hello()
        r = wd(tmp, "drift", "fa", "--step", "5")
        check(r.returncode == 0 and "lagging    lowprec (proxy): compared last at step 4" in r.stdout,
              "... and lagging again once a publisher of it connects", r.stdout + r.stderr)
        # and once it sends step 5, nothing is left
        a = send(low, 5, 1.001)
        check(wait_step(tmp, 5) is not None, "step 5 complete once lowprec sends it")

        # a run that lags and has a step held in intake is not "never" either: lowprec half of step 6
        for p, s in ((base, 1.0), (fa, 1.01)):
            send(p, 6, s)
            p.recv()
        send(low, 6, 1.001, half=True)
        send(low, 7, 1.001)     # a later step of it durable, while step 6 waits
        low.s.setsockopt(zmq.RCVTIMEO, 300)
        low.recv()
        time.sleep(0.5)
        r = wd(tmp, "drift", "fa", "--step", "6")
        check(r.returncode == 0 and "never      " not in r.stdout and
              "not compared at this step yet: lowprec" in r.stdout,
              "a step of it still held in intake is not said never", r.stdout + r.stderr)

        # a second expiry of fa (step 8): step 1's line still says why, from the kept expiries
        send(fa, 8, 1.01, half=True)
        e = fa.recv()
        r = wd(tmp, "drift", "fa", "--step", "1")
        never = [x for x in r.stdout.splitlines() if x.startswith("never      ")]
        check(e and e.get("code") == "incomplete" and never and "its step 1 expired incomplete" in never[0]
              and "rank 1 of 2 never committed" in never[0],
              "an older expiry keeps its why (step 8 expired since)", r.stdout + str(e))

        # wdrift runs: base is the baseline of both studies, said once beside them (a trial read
        # "baseline, baseline"); --json keeps one entry per study
        r = wd(tmp, "runs")
        rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.strip()}
        check(r.returncode == 0 and rows.get("base", [])[1:5] == ["baseline", "fa,", "other,", "alone"] and
              rows.get("fa", [])[1:4] == ["candidate", "fa,", "other"],
              "runs: one role in every study is said once, beside the studies", r.stdout + r.stderr)
        check(rows.get("lowprec", [])[1:6] == ["proxy", "fp16,", "candidate", "fa,", "other"],
              "runs: two roles are each said, in the studies' order", r.stdout)
        r = wd(tmp, "runs", "--json")
        runs = {x["name"]: x for x in json.loads(r.stdout)["runs"]} if r.returncode == 0 else {}
        check(runs.get("fa", {}).get("expired_steps") == 2 and runs["fa"].get("expired_step") == 8,
              "runs --json: how many steps of fa expired, and the latest's step", r.stdout[-1500:])
        check(runs.get("base", {}).get("studies") == [{"study": "fa", "role": "baseline"},
                                                      {"study": "other", "role": "baseline"},
                                                      {"study": "alone", "role": "baseline"}],
              "runs --json: each study's role", r.stdout[-1500:])
    finally:
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
