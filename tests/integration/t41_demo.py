#!/usr/bin/env python3
"""t41_demo.py: `make demo`'s script, shortened (DEMO_STEPS, DEMO_EVERY), as CI
runs it: it starts wdriftd on the shipped config, trains the four runs, prints
the drift as it goes, writes the report and stops the daemon cleanly. The
drift the daemon logged is then checked against `wdrift compare` on the very
snapshots it spooled: the same W1 and ratios, to the last bit."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
WDRIFT = os.path.join(BUILD, "wdrift")
STEPS, EVERY = 40, 20


def main():
    if importlib.util.find_spec("torch") is None:
        print("skip: no torch for Debian's python (make deps installs python3-torch)")
        return 77
    tmp = tempfile.mkdtemp(prefix="wdrift-t41-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.summary()


def run(tmp):
    demo, report = os.path.join(tmp, "demo"), os.path.join(tmp, "report.html")
    env = dict(os.environ, BUILD=BUILD, PYTHON=PYTHON, DEMO_DIR=demo, DEMO_REPORT=report,
               DEMO_STEPS=str(STEPS), DEMO_EVERY=str(EVERY))
    try:
        p = subprocess.run(["sh", "scripts/demo.sh"], env=env, capture_output=True, text=True,
                           timeout=600)
    except subprocess.TimeoutExpired as e:
        check(False, "scripts/demo.sh finishes", e)
        return
    out = p.stdout + p.stderr
    check(p.returncode == 0, "scripts/demo.sh exits 0", out)
    check("is up on" in out and "stopped cleanly" in out, "it starts wdriftd and stops it", out)
    check(os.path.isfile(report) and os.path.getsize(report) > 10000 and
          "study demo" in open(report, encoding="utf-8").read(), "it writes the report", out)
    log = open(os.path.join(demo, "wdriftd.log"), errors="replace").read()
    check("error" not in log.lower(), "the daemon logged no error", log)

    table = json.load(open(os.path.join(demo, "train.json")))
    rows = table["steps"]
    steps = [r["step"] for r in rows]
    check(steps == list(range(0, STEPS + 1, EVERY)), f"drift printed at steps 0..{STEPS} every {EVERY}",
          steps)
    for s in range(0, STEPS + 1, EVERY):
        check(re.search(rf"^ *{s} +\d", out, re.M), f"the printed table has a line for step {s}", out)

    drift_log = os.path.join(demo, "var", "drift", "demo.h5")
    e = subprocess.run([WDRIFT, "export", "demo", "--log", drift_log, "--json"], capture_output=True,
                       text=True)
    check(e.returncode == 0, "wdrift export reads the demo's drift log after the daemon stopped",
          e.stderr)
    if e.returncode:
        return
    logged = json.loads(e.stdout)["rows"]
    spool = os.path.join(demo, "var", "spool")
    for s in (EVERY, STEPS):
        c = subprocess.run([WDRIFT, "compare", f"{spool}/base/{s}.h5", f"{spool}/fa/{s}.h5",
                            "--proxy", f"lowprec={spool}/lowprec/{s}.h5",
                            "--proxy", f"seed={spool}/seed2/{s}.h5", "--json"],
                           capture_output=True, text=True)
        check(c.returncode == 0, f"wdrift compare on the spooled snapshots of step {s}", c.stderr)
        if c.returncode:
            continue
        ref = {ly["name"]: ly for ly in json.loads(c.stdout)["layers"]}
        got = {r["tensor"]: r for r in logged
               if r["step"] == s and r["run"] == "fa" and r["kind"] == "tensor"}
        check(len(ref) > 10 and set(ref) == set(got), f"step {s}: the same {len(ref)} tensors",
              sorted(set(ref) ^ set(got)))
        bad = [t for t in ref if t in got and not (
            ref[t]["w1"] == got[t]["w1"] and
            ref[t]["proxies"]["lowprec"]["ratio"] == got[t]["ratio"]["lowprec"] and
            ref[t]["proxies"]["seed"]["ratio"] == got[t]["ratio"]["seed"])]
        check(not bad, f"step {s}: the daemon's W1 and ratios equal wdrift compare's exactly",
              [(t, ref[t]["w1"], got[t]["w1"]) for t in bad[:5]])
        nz = [t for t in ref if ref[t]["proxies"]["seed"]["w1"]]
        check(len(nz) == len(ref), f"step {s}: seed2 drifts from base in every tensor")


if __name__ == "__main__":
    sys.exit(main())
