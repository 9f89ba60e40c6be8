#!/usr/bin/env python3
"""t88_reload_study.py: a study added by reload is computed over the snapshots
the daemon already holds (docs/config.md, "Reload"), without a restart.

A real daemon with study fa (base, candidate fa, proxy lowprec) takes steps
0, 10 and 20 of base, fa, lowprec and of c2, a run in no study yet. Then:
- a reload adds st2 (base, candidate c2, proxy lowprec): `wdrift drift st2`
  answers for step 20 at once, complete, and --step 0 and 10 too; st2's
  drift log has c2's and lowprec's rows at the three steps, in step order;
  the log says "study 'st2' (added by reload): computed at 3 of the 3";
  study fa, unchanged, is not computed again; an alert rule added with
  st2 fires once, at step 20, its latest complete step, not at each
  backfilled step in turn (a trial's renamed study replayed months of
  alerts, critical ones paging);
- a reload that adds fa as a candidate of st2 (its runs changed) computes
  st2 again at the three steps, now with fa; a reload that changes nothing
  computes nothing;
- after a restart, nothing is "without logged results": the backfill's
  results were in the WAL;
- a `wdrift watch` and a subscriber there before the reload see the
  backfill's steps marked as history (`step 0 (history):`, `"history":
  true`): a watch printed a new study's past as if it were arriving; a
  live step's event has no such key.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
ST2 = """\
  - name: st2
    baseline: base
    candidates: [{cands}]
    proxies: {{fp16: lowprec}}
"""
ALERT = """\
alerts:
  - {name: st2-w1, study: st2, metric: w1, scope: mean, threshold: 0}
"""


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def snap(pub, step, drift, f16=False):
    r = np.random.default_rng(step)
    for name, n in (("layers.0.w", 3000), ("emb", 2000)):
        v = (r.standard_normal(n) * 0.02).astype(np.float32)
        v = v + (np.random.default_rng(step + len(pub.run)).standard_normal(n) * drift).astype(np.float32)
        pub.tensor(step, name, v.astype(np.float16) if f16 else v, "f16" if f16 else "f32")
    return pub.commit(step, 2)


def idle(cfg, timeout=30):
    """Waits for the compute and spool queues to be empty; True when they were."""
    end = time.time() + timeout
    while time.time() < end:
        r = wd(cfg, "status", "--json")
        if r.returncode == 0:
            q = json.loads(r.stdout).get("queues", {})
            if q.get("compute") == 0 and q.get("spool") == 0:
                return True
        time.sleep(0.2)
    return False


def log_rows(path):
    """[(step, run)] of the tensor rows of a drift log, in file order; [] without the file."""
    if not os.path.exists(path):
        return []
    with h5py.File(path, "r", swmr=True) as f:
        rows = f["rows"][:]
        runs = f["runs"][:].astype(str)
    return [(int(r["step"]), runs[r["run"]]) for r in rows if r["kind"] == 0]


def drift(cfg, *args):
    r = wd(cfg, "drift", "st2", "--json", *args)
    return r, (json.loads(r.stdout) if r.returncode == 0 else {})


def wait_drift(cfg, pred, *args, timeout=30):
    """drift() until pred holds of its JSON, or timeout: the last (result, JSON)."""
    end = time.time() + timeout
    while True:
        r, o = drift(cfg, *args)
        if pred(o) or time.time() > end:
            return r, o
        time.sleep(0.2)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t88-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config()
        with open(cfg) as f:
            base_text = f.read()
        check(dm.start() is not None, "wdriftd ready with study fa")
        pubs = {r: Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec", "c2")}
        for step in (0, 10, 20):
            snap(pubs["base"], step, 0.0)
            snap(pubs["lowprec"], step, 0.0, f16=True)
            snap(pubs["fa"], step, 0.01)
            snap(pubs["c2"], step, 0.02)
        check(idle(cfg), "the 12 snapshots stored, fa compared")
        fa_log = os.path.join(tmp, "var", "drift", "fa.h5")
        fa_rows = len(log_rows(fa_log))

        # a watch and a subscriber, there before the reload: the backfill's lines say they are history
        sub = harness.subscribe(ctx, tmp, b"drift.st2", timeout=15000)
        watch = subprocess.Popen([WDRIFT, "watch", "--count", "3", "--topic", "drift.st2", "-c", cfg],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check("watching" in watch.stderr.readline(), "watch connected before the reload")
        time.sleep(0.5)     # its subscription reaches the daemon's PUB socket
        with open(cfg, "w") as f:
            f.write(base_text + ST2.format(cands="c2") + ALERT)
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "studies   added: st2" in r.stdout, "reload adds study st2", r.stdout + r.stderr)
        # no restart, no new snapshot: the reload's job computes st2 over what is held
        r, o = wait_drift(cfg, lambda o: o.get("step") == 20)
        check(o.get("step") == 20 and o.get("complete") is True and "c2" in o.get("candidates", {}),
              "wdrift drift st2 answers at once: step 20, complete, candidate c2", r.stdout + r.stderr)
        olders = [drift(cfg, "--step", str(s))[1] for s in (0, 10)]
        check(all(x.get("complete") is True and "c2" in x.get("candidates", {}) for x in olders),
              "and at steps 0 and 10, the snapshots held before the reload", json.dumps(olders)[:2000])
        check(idle(cfg), "compute queue empty after the backfill")
        try:
            out, _ = watch.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            watch.kill()
            out, _ = watch.communicate()
        lines = out.splitlines()
        check([ln.split(":")[0] for ln in lines] == [f"drift  st2 step {s} (history)" for s in (0, 10, 20)],
              "watch prints the backfilled steps 0, 10, 20 as '(history)' (they looked live)", out)
        events = []
        try:
            while len(events) < 3:
                events.append(json.loads(sub.recv_multipart()[1]))
        except zmq.Again:
            pass
        check([(e.get("step"), e.get("history")) for e in events] == [(0, True), (10, True), (20, True)],
              "the drift events of the backfill carry history: true", events)
        st2_log = os.path.join(tmp, "var", "drift", "st2.h5")
        rows = log_rows(st2_log)
        steps = [s for s, _ in rows]
        check(sorted({(s, r) for s, r in rows}) == [(s, r) for s in (0, 10, 20) for r in ("c2", "lowprec")]
              and steps == sorted(steps),
              "st2's drift log: c2 and lowprec at steps 0, 10, 20, oldest first", rows[:20])
        log = dm.log_text()
        check("compute: study 'st2' (added by reload): computed at 3 of the 3 durable steps of baseline 'base' held"
              in log, "one log line for the backfilled study, with its step count", log[-2000:])
        check(len(log_rows(fa_log)) == fa_rows and "study 'fa' (" not in log,
              "study fa, unchanged by the reload, is not computed again", log[-2000:])
        end, fired = time.time() + 15, []
        while time.time() < end and not fired:
            time.sleep(0.2)
            fired = [x for x in dm.log_text().splitlines() if "alert 'st2-w1' firing" in x]
        time.sleep(1.5)
        fired = [x for x in dm.log_text().splitlines() if "alert 'st2-w1'" in x]
        check(len(fired) == 1 and "run 'c2' step 20:" in fired[0],
              "the rule added with st2 fires once, at step 20, not at each backfilled step", "\n".join(fired))

        # st2's runs change: fa is computed at the steps held; an unchanged reload computes nothing
        with open(cfg, "w") as f:
            f.write(base_text + ST2.format(cands="c2, fa"))
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "st2" in r.stdout, "reload: st2 gains candidate fa", r.stdout + r.stderr)
        r, o = wait_drift(cfg, lambda o: "fa" in o.get("candidates", {}), "--step", "0")
        check(set(o.get("candidates", {})) == {"c2", "fa"} and o.get("complete") is True,
              "st2 at step 0 now has fa too, without a restart", r.stdout + r.stderr)
        check(idle(cfg), "compute queue empty again")
        log = dm.log_text()
        check("compute: study 'st2' (runs changed by reload): computed at 3 of the 3 durable steps" in log,
              "the runs-changed backfill is logged with its step count", log[-2000:])
        n_lines = log.count("compute: study 'st2' (")
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "nothing changed" in r.stdout, "a reload of the same file", r.stdout)
        check(idle(cfg) and dm.log_text().count("compute: study 'st2' (") == n_lines,
              "changes nothing and computes nothing")

        # the backfill's results were logged: a restart has nothing to compute again
        rows_before = len(log_rows(st2_log))
        check(dm.stop() == 0, "wdriftd stops")
        check(dm.start() is not None, "and starts again")
        check(idle(cfg), "idle after the restart")
        log = dm.log_text()
        restart = log[log.rfind("stopped"):]	# the second start's lines
        check("without logged results" not in restart and len(log_rows(st2_log)) == rows_before,
              "after a restart nothing of st2 is computed again", restart[-2000:])
        r, o = drift(cfg)
        check(o.get("step") == 20 and o.get("complete") is True, "drift st2 still answers after the restart",
              r.stdout + r.stderr)

        # a live step: its event has no history key
        sub = harness.subscribe(ctx, tmp, b"drift.st2", timeout=15000)
        pubs = {r: Publisher(ctx, tmp, r) for r in ("base", "lowprec", "c2")}
        snap(pubs["base"], 30, 0.0)
        snap(pubs["lowprec"], 30, 0.0, f16=True)
        snap(pubs["c2"], 30, 0.02)
        live = None
        try:
            while live is None or live.get("step") != 30:
                live = json.loads(sub.recv_multipart()[1])
        except zmq.Again:
            pass
        check(live is not None and live.get("step") == 30 and "history" not in live,
              "a live step's drift event has no history key", live)
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
