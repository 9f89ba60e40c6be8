#!/usr/bin/env python3
"""t54_alignment.py: alignment.tolerance aligns runs whose steps differ.

With tolerance 5, a candidate snapshot at step 103 is compared with the
baseline's step 100 (the nearest within 5), and the row is keyed by 100;
one at 120 (no baseline step within 5) waits, and is compared when the
baseline's step 118 arrives. With the default (exact) a step off by one
is not compared.

A candidate step is compared with its own nearest baseline step, and only
there: with the baseline at 0, 10, 20, 30 and the candidate at 25 (as near
20 as 30: the lower, 20) and then 35, baseline step 30 took 25 (as near it
as 35, and lower), so its row compared the wrong snapshot and 35 was never
compared (a new user's trial). The candidate's snapshots here equal the
baseline's they belong to: W1 0 at both steps.

The same rule at a restart: a candidate step counted as computed when any
row of its run lay within T of it, so one whose own baseline step came
while the study was away (a config without it) was never computed. Now it
is computed at its own baseline step.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402


def snap(pub, step, seed, drift):
    r = np.random.default_rng(seed)
    v = (r.standard_normal(2000) * 0.02).astype(np.float32)
    v = v + (np.random.default_rng(seed + 1).standard_normal(2000) * drift).astype(np.float32)
    pub.tensor(step, "w", v, "f32")
    return pub.commit(step, 1)


def drift_at(ctx, d, step, timeout=6):
    end = time.time() + timeout
    while time.time() < end:
        r = control(ctx, d, {"v": 1, "cmd": "drift", "study": "fa", "step": step})
        if r and r.get("ok") and "fa" in r["candidates"]:
            return r
        time.sleep(0.2)
    return None


def daemon_with(prefix, tolerance):
    """A temp dir, a ZeroMQ context and a daemon (not started) whose config has alignment.tolerance."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    dm = Daemon(tmp)
    path = dm.write_config()
    with open(path, "a") as f:
        f.write(f"alignment:\n  tolerance: {tolerance}\n")
    return tmp, zmq.Context(), dm, path


def run(tolerance):
    tmp, ctx, dm, path = daemon_with("wdrift-t54-", tolerance)
    try:
        check(dm.start() is not None, f"ready with alignment.tolerance {tolerance}")
        base, fa = Publisher(ctx, tmp, "base"), Publisher(ctx, tmp, "fa")
        snap(base, 100, 1, 0.0)
        snap(fa, 103, 1, 0.001)
        got = drift_at(ctx, tmp, 100, timeout=6 if tolerance else 2)
        if tolerance:
            check(got is not None and got["step"] == 100, "candidate step 103 aligns to baseline step 100")
            # which step of each run the row compared: said, where the row's step is the baseline's
            check(got is not None and got.get("run_steps") == {"fa": 103},
                  "drift --json: run_steps, the candidate's step that the row compared", str(got and got.get("run_steps")))
            r = subprocess.run([WDRIFT, "drift", "fa", "--step", "100", "-c", path], capture_output=True, text=True,
                               timeout=30)
            line = [x for x in r.stdout.splitlines() if x.startswith("aligned ")]
            check(r.returncode == 0 and line and line[0] == "aligned    fa at its step 103 (alignment.tolerance 5)",
                  "drift: an 'aligned' line names the run and its step", r.stdout)
            snap(fa, 120, 3, 0.001)
            time.sleep(0.5)
            check(drift_at(ctx, tmp, 120, timeout=1) is None, "step 120 waits: no baseline within 5")
            snap(base, 118, 3, 0.0)
            got = drift_at(ctx, tmp, 118)
            check(got is not None and got["candidates"]["fa"]["layers"][0]["w1"] > 0,
                  "the baseline's step 118 arrives: 120 is compared with it")
            # each baseline step k's content is seed k; the candidate's 25 is base 20's, 35 is base 30's
            for st in (200, 210, 220, 230):
                snap(base, st, 10 + st, 0.0)
            snap(fa, 225, 10 + 220, 0.0)
            snap(fa, 235, 10 + 230, 0.0)
            got20, got30 = drift_at(ctx, tmp, 220), drift_at(ctx, tmp, 230)
            w20 = got20["candidates"]["fa"]["layers"][0]["w1"] if got20 else None
            w30 = got30["candidates"]["fa"]["layers"][0]["w1"] if got30 else None
            check(w20 == 0.0, f"candidate step 225 is compared at baseline step 220, its nearest: W1 0 ({w20})")
            check(w30 == 0.0, f"candidate step 235 at baseline step 230, not 225 again: W1 0 ({w30})")
            check(got30 is not None and got30.get("run_steps") == {"fa": 235},
                  "... run_steps at 230: 235", str(got30 and got30.get("run_steps")))
        else:
            check(got is None, "exact alignment: step 103 is not compared with step 100")
            snap(fa, 100, 1, 0.001)
            got = drift_at(ctx, tmp, 100)
            check(got is not None and "run_steps" not in got, "exact alignment: no run_steps (every run at the step)")
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)


def w1_settles(ctx, d, step, want, timeout=8):
    """The candidate's W1 at step once it equals want, or the last one seen after timeout."""
    end, w = time.time() + timeout, None
    while time.time() < end:
        r = control(ctx, d, {"v": 1, "cmd": "drift", "study": "fa", "step": step})
        if r and r.get("ok") and "fa" in r["candidates"]:
            w = r["candidates"]["fa"]["layers"][0]["w1"]
            if w == want:
                return w
        time.sleep(0.2)
    return w


def neighbour_case():
    """Tolerance 8: the candidate's 416 first belongs to baseline 410 (the only one near);
    baseline 420 then takes it, and 410's row is computed again with 403, its own now."""
    tmp, ctx, dm, path = daemon_with("wdrift-t54n-", 8)
    try:
        check(dm.start() is not None, "neighbour case: ready")
        base, fa = Publisher(ctx, tmp, "base"), Publisher(ctx, tmp, "fa")
        snap(base, 410, 410, 0.0)
        snap(fa, 403, 410, 0.0)     # base 410's content
        snap(fa, 416, 420, 0.0)     # base 420's, not here yet: 410's row takes it for now
        end, w = time.time() + 8, None
        while time.time() < end and w in (None, 0.0):    # 403 first, then 416, the nearer
            got = drift_at(ctx, tmp, 410)
            w = got["candidates"]["fa"]["layers"][0]["w1"] if got else None
            time.sleep(0.1)
        check(w not in (None, 0.0), f"with only baseline 410 held, its row compares 416, the nearest ({w})")
        snap(base, 420, 420, 0.0)
        w20 = w1_settles(ctx, tmp, 420, 0.0)
        w10 = w1_settles(ctx, tmp, 410, 0.0)
        check(w20 == 0.0, f"baseline 420 arrives: it compares candidate 416, its own now: W1 0 ({w20})")
        check(w10 == 0.0, f"... and 410's row is computed again, with 403: W1 0 ({w10})", dm.log_text()[-1500:])
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)


def restart_case():
    """Candidate 325's baseline step, 320, arrives while the study is away; a restart with
    the study back computes 325 at 320, though a row of 'fa' at 330 lies within 5 of it."""
    tmp, ctx, dm, path = daemon_with("wdrift-t54r-", 5)
    try:
        with open(path) as f:
            text = f.read()
        check(dm.start() is not None, "restart case: ready")
        base, fa = Publisher(ctx, tmp, "base"), Publisher(ctx, tmp, "fa")
        snap(base, 310, 310, 0.0)
        snap(base, 330, 330, 0.0)
        snap(fa, 332, 330, 0.0)
        snap(fa, 325, 320, 0.0)     # 330 is its nearest for now, and 332 is nearer to 330
        got = drift_at(ctx, tmp, 330)
        check(got is not None and got["candidates"]["fa"]["layers"][0]["w1"] == 0.0,
              "baseline step 330 compares candidate 332, the nearest of its own")
        check(dm.stop() == 0, "stopped")
        with open(path, "w") as f:
            f.write(text.replace("baseline: base", "baseline: other"))
        check(dm.start() is not None, "started with the study's baseline elsewhere")
        base = Publisher(ctx, tmp, "base")
        a = snap(base, 320, 320, 0.0)
        check(a and a.get("type") == "ack", f"baseline step 320 durable, in no study then ({a})")
        check(dm.stop() == 0, "stopped")
        with open(path, "w") as f:
            f.write(text)
        check(dm.start() is not None, "started with the study back")
        got = drift_at(ctx, tmp, 320, timeout=8)
        w = got["candidates"]["fa"]["layers"][0]["w1"] if got else None
        check(w == 0.0, f"the restart computes candidate 325 at baseline step 320, its own: W1 0 ({w})",
              dm.log_text()[-1500:])
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)


def main():
    run(5)
    run(0)
    neighbour_case()
    restart_case()
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
