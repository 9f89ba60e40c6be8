#!/usr/bin/env python3
"""t94_idle_kill.py: a daemon killed while idle leaves drift logs that open as they are.

The compute thread kept each study's drift log open between steps, and an
HDF5 file open for writing stays flagged open in the file. So a daemon
killed while idle (the OOM killer beside a training job, SIGKILL, a power
loss) left every drift log to be moved aside as broken and rebuilt from
the whole write-ahead log at the next start. Now the compute thread closes
them when no job waits. With a real daemon and real `wdrift send`
processes:
- two steps computed, the daemon idle, then SIGKILL: the drift log opens
  with h5py as it is, and the next start moves nothing aside and rebuilds
  nothing; the drift of both steps is there;
- the next step is appended to the same file, which then holds all three;
- `runs rm` of the candidate while idle (the drift log removed and made
  again) and a SIGKILL after it: still nothing moved aside;
- a reader holding the drift log open (h5py with swmr=True, and plainly)
  while the next step is appended: the review found HDF5's file lock made
  the writer's reopen fail on it, and the file moved aside and rebuilt;
  now the reader sees the new rows on refresh and nothing is moved aside.
The daemon is stopped by pid and the temp dir removed, also on failure.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, summary, teardown  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))


def wd(*args):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=60)


def send(d, cfg, run, step):
    p = os.path.join(d, f"{run}-{step}.h5")
    with h5py.File(p, "w") as f:
        f["w"] = np.random.default_rng(step * 7 + len(run)).standard_normal(256).astype(np.float32)
    r = wd("send", "--run", run, "--step", str(step), p, "-c", cfg)
    check(r.returncode == 0, f"send {run} step {step}", r.stderr)


def idle(cfg):
    """Waits until the daemon has nothing queued (status --json), then a moment more."""
    end = time.time() + 20
    while time.time() < end:
        r = wd("status", "-c", cfg, "--json")
        if r.returncode == 0:
            q = json.loads(r.stdout).get("queues", {})
            if q.get("spool") == 0 and q.get("compute") == 0:
                time.sleep(0.5)
                return True
        time.sleep(0.1)
    return False


def steps_in(cfg):
    """The steps wdrift drift finds results at, of 1..3."""
    return [s for s in (1, 2, 3) if wd("drift", "fa", "-c", cfg, "--step", str(s)).returncode == 0]


def main():
    d = tempfile.mkdtemp(prefix="wdrift-t94-")
    dm = Daemon(d)
    log = os.path.join(d, "var", "drift", "fa.h5")
    try:
        cfg = dm.write_config()
        check(dm.start() is not None, "daemon ready")
        for step in (1, 2):
            for run in ("base", "lowprec", "fa"):
                send(d, cfg, run, step)
        check(idle(cfg), "idle after two steps")
        dm.stop(signal.SIGKILL)
        try:
            with h5py.File(log, "r") as f:
                rows = len(f["rows"])
            opened = None
        except OSError as e:
            rows, opened = 0, str(e)
        check(opened is None and rows > 0, f"killed idle: the drift log opens with h5py as it is ({rows} rows)",
              opened)
        check(dm.start() is not None, "started again")
        send(d, cfg, "base", 3)
        send(d, cfg, "lowprec", 3)
        send(d, cfg, "fa", 3)
        check(idle(cfg), "idle after step 3")
        text = dm.log_text()
        aside = [f for f in os.listdir(os.path.dirname(log)) if ".broken-" in f]
        check(not aside and "rebuilding" not in text and "moved the old drift log aside" not in text,
              f"nothing moved aside or rebuilt ({aside})", text[-1500:])
        check(steps_in(cfg) == [1, 2, 3], f"the drift of steps 1, 2 and 3 ({steps_in(cfg)})")
        dm.stop()
        with h5py.File(log, "r") as f:
            after = len(f["rows"])
        check(after > rows, f"step 3 appended to the same file ({rows} -> {after} rows)")

        check(dm.start() is not None, "started again, cleanly stopped before")
        for step, mode in ((4, {"swmr": True}), (5, {})):
            f = h5py.File(log, "r", **mode)
            try:
                before = len(f["rows"])
                for run in ("base", "lowprec", "fa"):
                    send(d, cfg, run, step)
                check(idle(cfg), f"idle after step {step}")
                if mode:
                    f["rows"].refresh()
                    seen = len(f["rows"])
                else:
                    seen = None
            finally:
                f.close()
            aside = [x for x in os.listdir(os.path.dirname(log)) if ".broken-" in x]
            text = dm.log_text()
            check(not aside and "rebuilding" not in text,
                  f"a reader ({mode or 'plain'}) holding the drift log over step {step}: nothing moved aside "
                  f"or rebuilt ({aside})", text[-1500:])
            if mode:
                check(seen > before, f"... the SWMR reader sees step {step}'s rows on refresh ({before} -> {seen})")
        r = wd("runs", "rm", "fa", "-c", cfg)
        check(r.returncode == 0, "runs rm fa", r.stderr)
        check(idle(cfg), "idle after runs rm")
        dm.stop(signal.SIGKILL)
        check(dm.start() is not None, "started again after a kill")
        time.sleep(0.5)
        text = dm.log_text()
        aside = [f for f in os.listdir(os.path.dirname(log)) if ".broken-" in f]
        check(not aside and "moved the old drift log aside" not in text,
              f"runs rm, then killed idle: nothing moved aside ({aside})", text[-1500:])
    finally:
        teardown(dm, d)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
