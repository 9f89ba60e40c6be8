#!/usr/bin/env python3
"""t109_proxy_rename.py: a proxy renamed by a reload keeps its history's ratios.

A trial renamed a study's proxy label in the config (the same run) and ran
`wdrift reload`: every ratio of the steps before went, in `wdrift drift`
and the rebuilt drift log, with no word, though each run had its rows (the
reload's backfill looked only at which runs had rows, not under which
labels the candidates' ratios were). Now a step whose candidate rows lack
a ratio under a label of an aligned proxy is computed again, so the
ratios are there under the new label, with the same values.
Real daemon, real publisher processes (the Python package), the real CLI;
stopped by pid, the temp dir removed, also on failure.
"""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PYTHON, WDRIFT, Daemon, check, package_env, summary, teardown  # noqa: E402

JOB = r'''
import sys, numpy as np, wdrift
ep, run, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4:]]
rng = np.random.default_rng(seed)
base = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
with wdrift.Publisher(ep, run, ack_timeout=10.0) as pub:
    for step in steps:
        w = base + np.float32(0.01 * seed) * rng.standard_normal((64, 32)).astype(np.float32)
        pub.publish(step, {"layers.0.w": w, "layers.1.w": 2 * w})
    print("flushed", pub.flush(30), flush=True)
'''


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def ratios(cfg, step, label):
    """{tensor: ratio under label} of candidate fa at step, from drift --json."""
    r = wd(cfg, "drift", "fa", "--step", str(step), "--json")
    if r.returncode:
        return None
    d = json.loads(r.stdout)
    out = {}
    for row in d.get("candidates", {}).get("fa", {}).get("layers", []):
        v = row.get("proxies", {}).get(label, {})
        out[row["name"]] = v.get("ratio")
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="t109-")
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config()
        check(dm.start() is not None, "daemon ready")
        ep = f"ipc://{tmp}/run/ingest.sock"
        for run, seed in (("base", 0), ("lowprec", 1), ("fa", 2)):
            r = subprocess.run([PYTHON, "-c", JOB, ep, run, str(seed), "0", "10"], env=package_env(),
                               capture_output=True, text=True, timeout=120)
            check(r.returncode == 0 and "flushed True" in r.stdout, f"run '{run}': steps 0 and 10 acked",
                  r.stdout + r.stderr)
        end, before = time.time() + 30, {}
        while time.time() < end and not all(before.get(s) for s in (0, 10)):
            before = {s: ratios(cfg, s, "fp16") for s in (0, 10)}
            time.sleep(0.2)
        check(all(before.get(s) and all(v is not None and v == v for v in before[s].values()) for s in (0, 10)),
              "steps 0 and 10: fa's ratios to proxy fp16", json.dumps(before))

        # the same proxy run under another label
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:
            f.write(text.replace("proxies: {fp16: lowprec}", "proxies: {seed: lowprec}"))
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "changed: fa (proxies)" in r.stdout, "reload: proxy fp16 renamed seed",
              r.stdout + r.stderr)
        end = time.time() + 30
        while time.time() < end and "computed at 2 of the 2" not in dm.log_text():
            time.sleep(0.2)
        check("study 'fa' (runs changed by reload): computed at 2 of the 2 durable steps" in dm.log_text(),
              "the reload's backfill computes both steps again, for the renamed label", dm.log_text()[-2000:])
        after = {}
        end = time.time() + 30
        while time.time() < end and after != before:
            after = {s: ratios(cfg, s, "seed") for s in (0, 10)}
            time.sleep(0.2)
        check(after == before, "drift: the history's ratios under 'seed', the same values as under 'fp16'",
              json.dumps({"before": before, "after": after}))
        r = wd(cfg, "export", "fa", "--csv")
        rows = list(csv.DictReader(io.StringIO(r.stdout))) if r.returncode == 0 else []
        have = {(x.get("step"), x.get("tensor")) for x in rows if x.get("run") == "fa" and x.get("ratio_seed")}
        check(r.returncode == 0 and rows and "ratio_seed" in rows[0] and
              {("0", "layers.0.w"), ("10", "layers.1.w")} <= have,
              "export: the drift log has them under ratio_seed at both steps", r.stdout[:1500] + r.stderr)
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
