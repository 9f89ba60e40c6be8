#!/usr/bin/env python3
"""t79_gpu_paper_smoke.py: examples/gpu_paper.py's plumbing, without a GPU.

The smoke test of docs/demo.md, as a test: the shipped examples/gpu_paper.yaml
turned to the CPU engine and a temp dir, a real wdriftd, and the script
with --device cpu --runs base,fp32,seed2 on a tiny model. Checks that:
- it exits 0 and its --json-out has a row per published step (0, 10, 20);
- fp32 starts at base's weights (W1 0 at step 0) and then drifts, and
  seed2 does not start there;
- the W1 it reports is the daemon's, and the daemon's is right: the
  weighted mean over the spool's tensors, recomputed here from the sorted
  values of base's and fp32's snapshots, equals it;
- asking for fa where torch has no SDPA (torch < 2.0) is one clear error
  naming it, and exit status 1, before anything is sent.
The daemon is stopped by pid and the temp dir removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from harness import WDRIFTD, Daemon, check, summary, teardown  # noqa: E402

PYTHON = os.environ.get("PYTHON", sys.executable)
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(REPO, "build")))
SCRIPT = os.path.join(REPO, "examples", "gpu_paper.py")
SMALL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--context", "64", "--batch", "8",
         "--steps", "20", "--every", "10", "--timeout", "60"]


def cpu_config(tmp):
    """examples/gpu_paper.yaml, as docs/demo.md's smoke test rewrites it."""
    with open(os.path.join(REPO, "examples", "gpu_paper.yaml")) as f:
        text = f.read()
    for old, new in (("backend: cuda", "backend: cpu"),
                     ("candidates: [fa]", "candidates: [fa, fp32, seed2]"),
                     ("ipc://./run/", f"ipc://{tmp}/run/"),
                     ("./build/paper", f"{tmp}/var")):
        if old not in text:
            return None, f"'{old}' is no longer in examples/gpu_paper.yaml"
        text = text.replace(old, new)
    path = os.path.join(tmp, "wdrift.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path, ""


def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def weighted_w1(a, b):
    """The numel-weighted mean W1 over tensors of equal size: mean |sorted a - sorted b|."""
    num = den = 0.0
    for k, x in a.items():
        x = np.sort(x.astype(np.float64).ravel())
        y = np.sort(b[k].astype(np.float64).ravel())
        num += x.size * np.mean(np.abs(x - y))
        den += x.size
    return num / den


def main():
    if not os.path.exists(WDRIFTD):
        print(f"not ok 1 - {WDRIFTD} is not built")
        return 1
    try:
        import torch
    except ImportError:
        print("ok 1 # SKIP no torch for", PYTHON)
        return 0
    tmp = tempfile.mkdtemp(prefix="wdrift-t79-")
    dm = Daemon(tmp)
    try:
        cfg, why = cpu_config(tmp)
        if not check(cfg is not None, "the shipped config has what the smoke test changes", why):
            return 1
        check(dm.start() is not None, "wdriftd is ready with the paper's config on the CPU engine", dm.log_text())
        env = dict(os.environ, WDRIFT_LIB=os.path.join(BUILD, "libwdrift.so"))
        common = ["--device", "cpu", "--config", cfg, "--endpoint", f"ipc://{tmp}/run/paper-ingest.sock",
                  "--wdrift", os.path.join(BUILD, "wdrift"), *SMALL]

        if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            r = subprocess.run([PYTHON, SCRIPT, *common], capture_output=True, text=True, env=env, timeout=120)
            err = r.stderr.strip().splitlines()
            check(r.returncode == 1 and len(err) == 1 and "scaled_dot_product_attention" in err[0],
                  "fa without SDPA is one line naming it, and exit status 1", r.stderr)

        out = os.path.join(tmp, "paper.json")
        r = subprocess.run([PYTHON, SCRIPT, *common, "--runs", "base,fp32,seed2", "--json-out", out],
                           capture_output=True, text=True, env=env, timeout=300)
        if not check(r.returncode == 0, "the smoke run exits 0", r.stdout + r.stderr):
            return 1
        res = json.load(open(out))
        rows = {row["step"]: row for row in res["rows"]}
        check(sorted(rows) == [0, 10, 20], f"a row per published step ({sorted(rows)})")
        check(rows[0]["w1"]["fp32"] == 0.0 and rows[0]["w1"]["seed2"] > 0,
              f"at step 0 fp32 is base's init and seed2 is not ({rows[0]['w1']})")
        check(all(rows[s]["w1"]["fp32"] > 0 for s in (10, 20)),
              f"fp32 drifts from base once trained ({[rows[s]['w1']['fp32'] for s in (10, 20)]})")
        check(res.get("engine", "").startswith("cpu"), f"the engine is named ({res.get('engine')})")
        spool = os.path.join(tmp, "var", "spool")
        base, fp32 = tensors(os.path.join(spool, "base", "20.h5")), tensors(os.path.join(spool, "fp32", "20.h5"))
        want = weighted_w1(base, fp32)
        got = rows[20]["w1"]["fp32"]
        check(len(base) > 10 and abs(got - want) <= 1e-12 * want,
              f"step 20's fp32 W1 is the spool's, recomputed here ({got!r} against {want!r}, {len(base)} tensors)")
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
