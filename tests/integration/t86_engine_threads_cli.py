#!/usr/bin/env python3
"""t86: `wdrift compare --threads N`, and no CUDA runtime where none is wanted.

- --threads 1, 2 and 3 give the same JSON results, to the bit (the engine's
  line says the count); a bad count is a usage error (exit 2) naming it.
- --engine cpu, and --engine auto on a machine with no /dev/nvidiactl, never
  look for libcuda nor open a /dev/nvidia* node: under strace -f (every
  openat, the reader children included) when strace is installed, and under
  the dynamic loader's own log (LD_DEBUG=libs: every library it searches
  for, dlopen's included) always. In a build without CUDA this holds
  trivially; in a CUDA build it is what the engine's device-node check buys.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, summary  # noqa: E402

WDRIFT = os.path.abspath(os.environ.get("WDRIFT", os.path.join(os.environ.get("BUILD", "build"), "wdrift")))


def run(args, env=None):
    return subprocess.run([WDRIFT, "compare"] + args, capture_output=True, text=True, env=env,
                          timeout=120)


def cuda_touches(text):
    """Lines of a trace or loader log that look for libcuda or open an NVIDIA node."""
    return [l for l in text.splitlines() if "libcuda" in l or "/dev/nvidia" in l]


def main():
    d = tempfile.mkdtemp(prefix="wdrift-t86-")
    try:
        rng = np.random.default_rng(86)
        a, b = os.path.join(d, "a.h5"), os.path.join(d, "b.h5")
        with h5py.File(a, "w") as f, h5py.File(b, "w") as g:
            for name, n in (("big", 300001), ("small", 1000), ("odd", 4097)):
                x = rng.standard_normal(n).astype(np.float32)
                x[::97] = np.nan
                x[5] = np.inf
                x[6] = -0.0
                f[name] = x
                g[name] = (x + rng.standard_normal(n).astype(np.float32) * 1e-3).astype(np.float32)
            f["half"] = rng.standard_normal(5000).astype(np.float16)
            g["half"] = rng.standard_normal(5000).astype(np.float16)

        outs = {}
        for t in ("1", "2", "3"):
            r = run([a, b, "--engine", "cpu", "--threads", t, "--json"])
            check(r.returncode == 0, f"compare --threads {t}: exit 0", r.stderr)
            if r.returncode == 0:
                j = json.loads(r.stdout)
                eng = j.pop("engine", "")
                j.pop("timings", None)
                want = "1 thread, " if t == "1" else f"{t} threads, "
                check(want in eng and (re.search(r"vqsort (avx2|avx3|avx3_dl)\)", eng) or "radix sort)" in eng),
                      f"--threads {t}: the engine says '{want}' and its sort", eng)
                outs[t] = json.dumps(j, sort_keys=True)
        check(len(outs) == 3 and outs["1"] == outs["2"] == outs["3"],
              "--threads 1, 2, 3: the same results (W1, stats, pair statistics), to the bit")
        for bad in ("x", "-1", "257", ""):
            r = run([a, b, "--threads", bad])
            check(r.returncode == 2 and "--threads" in r.stderr,
                  f"--threads '{bad}': a usage error naming --threads (exit {r.returncode})", r.stderr)

        modes = [["--engine", "cpu"]]
        if not os.path.exists("/dev/nvidiactl") and not os.path.exists("/dev/dxg"):
            modes.append(["--engine", "auto"])
        for mode in modes:
            env = dict(os.environ, LD_DEBUG="libs")
            r = run([a, b, "--json"] + mode, env=env)
            touched = cuda_touches(r.stderr)
            check(r.returncode == 0 and not touched,
                  f"compare {' '.join(mode)}: the loader never looks for libcuda (LD_DEBUG=libs)",
                  "\n".join(touched[:10]) or r.stderr[-2000:])
            strace = shutil.which("strace")
            if strace:
                log = os.path.join(d, "strace.log")
                # LeakSanitizer cannot run under ptrace and aborts the process
                # (make check-asan); the leak check of compare is the LD_DEBUG
                # run's above, so this one only turns it off.
                env = dict(os.environ)
                if os.environ.get("WDRIFT_SANITIZE"):
                    prev = env.get("ASAN_OPTIONS")
                    env["ASAN_OPTIONS"] = (prev + ":" if prev else "") + "detect_leaks=0"
                r = subprocess.run([strace, "-f", "-qq", "-e", "trace=open,openat", "-o", log, WDRIFT,
                                    "compare", a, b, "--json"] + mode, capture_output=True, text=True,
                                   timeout=120, env=env)
                touched = cuda_touches(open(log).read())
                check(r.returncode == 0 and not touched,
                      f"compare {' '.join(mode)}: no open of libcuda or /dev/nvidia* (strace -f)",
                      "\n".join(touched[:10]) or r.stderr[-2000:])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
