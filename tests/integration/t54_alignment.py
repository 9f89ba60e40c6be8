#!/usr/bin/env python3
"""t54_alignment.py: alignment.tolerance aligns runs whose steps differ.

With tolerance 5, a candidate snapshot at step 103 is compared with the
baseline's step 100 (the nearest within 5), and the row is keyed by 100;
one at 120 (no baseline step within 5) waits, and is compared when the
baseline's step 118 arrives. With the default (exact) a step off by one
is not compared.
"""
import os
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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


def run(tolerance):
    tmp = tempfile.mkdtemp(prefix="wdrift-t54-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        path = dm.write_config()
        with open(path, "a") as f:
            f.write(f"alignment:\n  tolerance: {tolerance}\n")
        check(dm.start() is not None, f"ready with alignment.tolerance {tolerance}")
        base, fa = Publisher(ctx, tmp, "base"), Publisher(ctx, tmp, "fa")
        snap(base, 100, 1, 0.0)
        snap(fa, 103, 1, 0.001)
        got = drift_at(ctx, tmp, 100, timeout=6 if tolerance else 2)
        if tolerance:
            check(got is not None and got["step"] == 100, "candidate step 103 aligns to baseline step 100")
            snap(fa, 120, 3, 0.001)
            time.sleep(0.5)
            check(drift_at(ctx, tmp, 120, timeout=1) is None, "step 120 waits: no baseline within 5")
            snap(base, 118, 3, 0.0)
            got = drift_at(ctx, tmp, 118)
            check(got is not None and got["candidates"]["fa"]["layers"][0]["w1"] > 0,
                  "the baseline's step 118 arrives: 120 is compared with it")
        else:
            check(got is None, "exact alignment: step 103 is not compared with step 100")
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)


def main():
    run(5)
    run(0)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
