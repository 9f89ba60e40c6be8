#!/usr/bin/env python3
"""t92_kept_buffers.py: the daemon keeps a stored snapshot's tensor buffers
for the next snapshot's tensors of the same size, within memory.budget.

Issue 16: every step brought the same tensors again, and each one's buffer
was fresh memory, faulted in page by page on the main loop. Now
(daemon/kept_bufs.c, docs/daemon.md "Kept buffers"):

1. Steps 1 to 3 of a baseline and a candidate, sent by `wdrift send` to a
   real wdriftd: from step 2 on the large tensors take kept buffers
   (status memory.kept_reused), and the daemon's W1, max|a-b| and rel L2
   of every tensor at every step equal `wdrift compare` of the same two
   files, bit for bit (a smoke test: a send covers every tensor whole, and
   only a whole tensor is stored).
2. Under the least budget (64M), reserved + kept stay within it (status,
   after each send), and the kept buffers give way to a snapshot that
   needs the room (memory.kept_freed): it is acked, none dropped. `runs
   rm` gives every kept buffer back.

The daemon is stopped by pid and its temp dir removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from harness import Daemon, bf16, check, summary  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

# 2 large tensors of 512 KiB and 1 MiB, one bf16 of 512 KiB, one small (never kept)
SHAPES = {"layers.0.w": ((128, 1024), "f32"), "layers.1.w": ((256, 1024), "f32"),
          "emb": ((262144,), "bf16"), "norm": ((64,), "f32")}


def ckpt(path, run, step):
    rng = np.random.default_rng([92, run == "fa", step])
    with h5py.File(path, "w") as f:
        for name, (shape, dt) in SHAPES.items():
            v = rng.standard_normal(shape).astype(np.float32) * 0.02
            if dt == "bf16":
                f.create_dataset(name, data=bf16(v)).attrs["dtype"] = "bfloat16"
            else:
                f[name] = v


def wd(*args):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=120)


def status(cfg):
    r = wd("status", "-c", cfg, "--json")
    return json.loads(r.stdout) if r.returncode == 0 else None


def daemon_rows(cfg, step):
    r = wd("drift", "fa", "--step", str(step), "-c", cfg, "--json")
    if r.returncode != 0:
        return None
    return {l["name"]: l for l in json.loads(r.stdout)["candidates"]["fa"]["layers"]}


def compare_rows(a, b):
    r = wd("compare", a, b, "--engine", "cpu", "--json")
    return {l["name"]: l for l in json.loads(r.stdout)["layers"]} if r.returncode == 0 else None


def wait_rows(cfg, step, want):
    end = time.time() + 60
    while time.time() < end:
        rows = daemon_rows(cfg, step)
        if rows and len(rows) == want:
            return rows
        time.sleep(0.2)
    return daemon_rows(cfg, step)


def steps_equal_compare(tmp):
    os.makedirs(os.path.join(tmp, "a"))
    dm = Daemon(os.path.join(tmp, "a"))
    cfg = dm.write_config()
    try:
        check(dm.start() is not None, "daemon ready")
        for step in (1, 2, 3):
            for run in ("base", "fa"):
                p = os.path.join(tmp, f"{run}-{step}.h5")
                ckpt(p, run, step)
                r = wd("send", "--run", run, "--step", str(step), p, "-c", cfg)
                check(r.returncode == 0 and "durable" in r.stdout, f"send {run} step {step}", r.stderr)
            rows = wait_rows(cfg, step, len(SHAPES))
            ref = compare_rows(os.path.join(tmp, f"base-{step}.h5"), os.path.join(tmp, f"fa-{step}.h5"))
            same = rows is not None and ref is not None and all(
                rows[n][k] == ref[n][k] for n in SHAPES for k in ("w1", "max_abs_diff", "rel_l2"))
            check(same, f"step {step}: the daemon's W1, max|a-b| and rel L2 of every tensor are "
                  "wdrift compare's, bit for bit", f"{rows} vs {ref}")
            st = status(cfg)
            mem = st and st["memory"]
            check(mem and mem["reserved"] + mem["kept"] <= mem["budget"],
                  f"step {step}: reserved + kept within the budget ({mem})")
        # 3 large tensors a run kept at step 1, taken again at steps 2 and 3 (2 runs)
        check(mem and mem["kept_reused"] >= 3 * 2 * 2 and mem["kept"] > 0,
              f"steps 2 and 3 took kept buffers ({mem})")
        r = wd("status", "-c", cfg)
        check(r.returncode == 0 and "MiB of buffers kept" in r.stdout, "status says what is kept", r.stdout)
    finally:
        dm.stop()


def small_budget(tmp):
    """memory.budget 64M (the least it may be): three runs, each sending two tensors of
    12 MiB, of sizes the other runs do not send. Two runs' stored snapshots leave 48 MiB
    kept, so the third's second tensor finds no room beside them: the oldest kept buffers
    give way, and nothing is dropped."""
    os.makedirs(os.path.join(tmp, "b"))
    dm = Daemon(os.path.join(tmp, "b"))
    cfg = dm.write_config()
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace("budget: 256M", "budget: 64M"))
    try:
        check(dm.start() is not None, "daemon with a 64M budget ready", dm.log_text()[-1000:])
        worst, budget = 0, 64 << 20
        for step in (1, 2):
            for i, run in enumerate(("base", "fa", "lowprec")):
                p = os.path.join(tmp, f"big-{run}-{step}.h5")
                rng = np.random.default_rng([92, i, step])
                with h5py.File(p, "w") as f:
                    for t in range(2):
                        f[f"w{t}"] = rng.standard_normal(3 * (1 << 20) + 1024 * i).astype(np.float32)
                r = wd("send", "--run", run, "--step", str(step), p, "-c", cfg)
                check(r.returncode == 0 and "durable" in r.stdout,
                      f"64M budget: send {run} step {step} acked", r.stderr)
                mem = (status(cfg) or {}).get("memory")
                if mem:
                    worst = max(worst, mem["reserved"] + mem["kept"])
                os.unlink(p)
        st = status(cfg)
        check(st and worst <= budget and st["snapshots"]["dropped"] == 0 and st["memory"]["kept_reused"] > 0
              and st["memory"]["kept_freed"] > 0,
              f"64M budget: reserved + kept at most {worst >> 20} MiB, none dropped, kept buffers given "
              f"back for room and others taken again ({st and st['memory']})")
        # runs rm: that run's sizes need not come again; every kept buffer is given back
        r = wd("runs", "rm", "lowprec", "-c", cfg)
        st = status(cfg)
        check(r.returncode == 0 and st and st["memory"]["kept"] == 0,
              f"runs rm gives the kept buffers back ({st and st['memory']})", r.stderr)
    finally:
        dm.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t92-")
    try:
        steps_equal_compare(tmp)
        small_budget(tmp)
    finally:
        subprocess.run(["rm", "-rf", tmp])
    return summary()


if __name__ == "__main__":
    sys.exit(main())
