#!/usr/bin/env python3
"""t110_fp16_overflow.py: the round:fp16 proxy of a baseline with values out of fp16's range.

An ops trial's baseline held one weight of 70000: rounded to fp16 it is +Inf,
which W1 leaves out, so the synthetic proxy's W1 measured that value's loss
(70) and not rounding, every ratio against it was about 1e-5, and nothing
said why (wdrift_drift_nonfinite of the proxy was 0). Now the daemon's log
says it once, with the count and the first tensor, and the proxy's rows
count the values as +Inf or -Inf (drift log, /metrics); `wdrift compare
--round-proxy fp16` says it on stderr. A real daemon, real HDF5 files; the
temp dir removed and the daemon stopped, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402
from harness import Daemon, Publisher, check, control, summary, teardown  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
EXTRA = """\
  - name: h16
    baseline: hbase
    candidates: [hfa]
    synthetic_proxy: round:fp16
"""


def weights(seed, drift):
    r = np.random.default_rng(7)
    w = (r.standard_normal(1000) * 0.02).astype(np.float32)
    w[0], w[1] = 70000.0, -1e6       # out of fp16's range (65504)
    w = w + (np.random.default_rng(seed).standard_normal(1000) * drift).astype(np.float32)
    return w, (r.standard_normal(500) * 0.02).astype(np.float32)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t110-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        dm.write_config(extra=EXTRA)
        check(dm.start() is not None, "daemon ready (study h16: synthetic_proxy round:fp16)")
        for run, drift in (("hbase", 0.0), ("hfa", 1e-3)):
            emb, norm = weights(1 if drift else 0, drift)
            p = Publisher(ctx, tmp, run)
            p.tensor(0, "emb", emb, "f32")
            p.tensor(0, "norm", norm, "f32")
            ack = p.commit(0, 2)
            check(ack and ack.get("type") == "ack", f"{run} step 0 acked", ack)
            p.s.close(linger=0)
        d = {}
        for _ in range(100):
            d = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "h16", "step": 0}) or {}
            if d.get("ok", True) and d.get("complete"):
                break
            dm.wait_notify("never", 0.1)
        rows = {x["name"]: x for x in d.get("candidates", {}).get("hfa", {}).get("layers", [])}
        ratio = rows.get("emb", {}).get("proxies", {}).get("round:fp16", {}).get("ratio")
        check(d.get("complete") and ratio is not None and ratio < 1e-3,
              f"the ratio against round:fp16 is tiny, as the trial saw ({ratio})", json.dumps(d)[:1500])
        said = [x for x in dm.log_text().splitlines() if "synthetic proxy 'round:fp16'" in x]
        check(len(said) == 1 and "2 values of the baseline are out of the format's range (fp16's 65504) in 1 of "
              "its 2 tensors, the first 'emb': rounded, they are +-Inf, which its W1 leaves out" in said[0],
              "the daemon's log says why, once, with the count and the first tensor", "\n".join(said))
        with h5py.File(os.path.join(tmp, "var", "drift", "h16.h5"), "r") as f:
            runs = [x.decode() for x in f["runs"][:]]
            tensors = [x.decode() for x in f["tensors"][:]]
            rs = f["rows"][:]
        mine = [r for r in rs if runs[r["run"]] == "round:fp16" and r["kind"] == 0 and tensors[r["tensor"]] == "emb"]
        check(mine and all(r["posinf"] == 1 and r["neginf"] == 1 for r in mine),
              "the drift log: the proxy's rows of 'emb' (the step computed when each run came) count +Inf 1, "
              "-Inf 1",
              [(r["posinf"], r["neginf"]) for r in mine])

        # wdrift compare --round-proxy fp16 on two files: the same, on stderr
        for name, drift in (("b.h5", 0.0), ("c.h5", 1e-3)):
            emb, norm = weights(1 if drift else 0, drift)
            with h5py.File(os.path.join(tmp, name), "w") as f:
                f["emb"], f["norm"] = emb, norm
        r = subprocess.run([WDRIFT, "compare", os.path.join(tmp, "b.h5"), os.path.join(tmp, "c.h5"),
                            "--round-proxy", "fp16"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and "warning: round:fp16: 2 values of the baseline are out of fp16's range (the "
              "first in 'emb'): rounded, they are +-Inf, which W1[round:fp16] leaves out" in r.stderr
              and r.stderr.count("round:fp16: 2 values") == 1,
              "compare --round-proxy fp16: one warning, with the count and the first tensor", r.stderr)
        r = subprocess.run([WDRIFT, "compare", os.path.join(tmp, "b.h5"), os.path.join(tmp, "c.h5"),
                            "--round-proxy", "bf16"], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and "range" not in r.stderr, "... and none for bf16, which has fp32's range",
              r.stderr)
    finally:
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
