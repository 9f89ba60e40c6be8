#!/usr/bin/env python3
"""t51_drift.py: the daemon's drift equals `wdrift compare` on the same tensors.

Three runs publish to a real wdriftd: a baseline, a candidate that starts
only after the baseline has finished, and an fp16 proxy; the study also has
the synthetic proxy round:bf16. Checks: the drift query (its layers and its
summary) and the drift log (read by h5py in SWMR mode while the daemon runs) equal `wdrift compare`
on the spool files; events arrive on the PUB socket; after kill -9 and a
restart the drift log opens without h5clear and holds every acked step.
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
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, Publisher, bf16, check, control  # noqa: E402
import harness  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

EXTRA = "    synthetic_proxy: round:bf16\n"


def tensors(rng, step, drift, uneq=None):
    """The same three tensors for every run, drifted by `drift`; with uneq, a fourth, "uneq", of 4000
    elements, uneq of them in this run (a trial: drift weighted a tensor by the candidate's count, compare
    by the baseline's)."""
    r = np.random.default_rng(1000 + step)
    base = {"layers.0.w": r.standard_normal(5000).astype(np.float32) * 0.02,
            "emb": r.standard_normal(3000).astype(np.float32) * 0.02,
            "layers.1/w2": r.standard_normal((40, 30)).astype(np.float32) * 0.02}
    if uneq:
        base["uneq"] = r.standard_normal(4000).astype(np.float32)[:uneq] * 0.02
    return {k: v + (rng.standard_normal(v.shape) * drift).astype(np.float32) for k, v in base.items()}


def publish(pub, step, t, fp16=False):
    for name, v in t.items():
        if name == "emb" and not fp16:
            pub.tensor(step, name, bf16(v), "bf16")
        elif fp16:
            pub.tensor(step, name, v.astype(np.float16).ravel(), "f16", shape=list(v.shape))
        elif name == "layers.0.w":
            pub.tensor(step, name, v[:2500], "f32", offset=0, total=5000)
            pub.tensor(step, name, v[2500:], "f32", offset=2500, total=5000)
        else:
            pub.tensor(step, name, v.ravel(), "f32", shape=list(v.shape))
    return pub.commit(step, len(t))


def wait_drift(ctx, d, step, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        r = control(ctx, d, {"v": 1, "cmd": "drift", "study": "fa", "step": step})
        if r and r.get("ok") and "fa" in r["candidates"] and all(
                l["proxies"]["fp16"]["w1"] is not None for l in r["candidates"]["fa"]["layers"]):
            return r
        time.sleep(0.2)
    return None


def close(a, b, rel=1e-12):
    """Equal to rel; NaN (the HDF5 log) stands for null (JSON)."""
    a = None if isinstance(a, float) and a != a else a
    b = None if isinstance(b, float) and b != b else b
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * abs(b) + 1e-300


def ratios_by_label(path):
    """{(step, tensor, run, kind): {label: ratio}} of a drift log's rows."""
    with h5py.File(path, "r") as f:
        rows = f["rows"][:]
        names = f["tensors"][:].astype(str)
        runs = f["runs"][:].astype(str)
        labels = list(f["proxies"][:].astype(str))
    out = {}
    for r in rows:
        t = names[r["tensor"]] if r["kind"] == 0 else None
        out[(int(r["step"]), t, runs[r["run"]], int(r["kind"]))] = {
            lab: float(r["ratio"][k]) for k, lab in enumerate(labels)}
    return labels, out


def relabelled():
    """The study's proxies are reordered between two starts: the drift log,
    made for the old order, is rebuilt from the WAL, and every old ratio
    stays under its own proxy's label."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t51-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    rng = np.random.default_rng(52)
    path = os.path.join(tmp, "var", "drift", "fa.h5")

    def config(proxies):
        p = dm.write_config()
        with open(p) as f:
            text = f.read()
        with open(p, "w") as f:
            f.write(text.replace("proxies: {fp16: lowprec}", f"proxies: {{{proxies}}}"))

    def wait_all(step):
        end = time.time() + 20
        while time.time() < end:
            r = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": step})
            if r and r.get("ok") and "fa" in r["candidates"] and all(
                    l["proxies"][p]["ratio"] is not None
                    for l in r["candidates"]["fa"]["layers"] for p in ("fp16", "seed")):
                return True
            time.sleep(0.2)
        return False

    try:
        config("fp16: lowprec, seed: seedrun")
        check(dm.start() is not None, "ready with proxies fp16 and seed")
        base, fa, low, seed = (Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec", "seedrun"))
        publish(base, 10, tensors(rng, 10, 0.0))
        publish(low, 10, tensors(rng, 10, 0.002), fp16=True)
        publish(seed, 10, tensors(rng, 10, 0.02))
        publish(fa, 10, tensors(rng, 10, 0.0003))
        wait_all(10)
        check(dm.stop() == 0, "SIGTERM")
        labels, before = ratios_by_label(path)
        check(labels == ["fp16", "seed"] and len(before) > 0, f"the drift log has ratios for {labels}")
        config("seed: seedrun, fp16: lowprec")
        check(dm.start() is not None, "restart with the proxies in the other order")
        time.sleep(0.5)
        check(dm.stop() == 0, "SIGTERM")
        labels, after = ratios_by_label(path)
        same = labels == ["seed", "fp16"] and set(after) == set(before)
        for key, want in before.items():
            got = after.get(key, {})
            for lab, x in want.items():
                y = got.get(lab)
                ok = y is not None and (x == y or (x != x and y != y))
                if not ok and same:
                    print(f"# {key} {lab}: {x} before, {y} after the rebuild")
                same = same and ok
        check(same, f"the rebuilt drift log ({labels}) keeps each ratio under its own proxy")
        # The same through a reload: the log is rebuilt while the daemon runs,
        # and must keep what was computed since it started (step 20), too.
        check(dm.start() is not None, "start again")
        base, fa, low, seed = (Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec", "seedrun"))
        publish(base, 20, tensors(rng, 20, 0.0))
        publish(low, 20, tensors(rng, 20, 0.002), fp16=True)
        publish(seed, 20, tensors(rng, 20, 0.02))
        publish(fa, 20, tensors(rng, 20, 0.0003))
        check(wait_all(20), "step 20 computed")
        config("fp16: lowprec, seed: seedrun")
        dm.proc.send_signal(signal.SIGHUP)
        check(dm.wait_notify("READY=1", 5) is not None, "reload with the first order again")
        for pub, drift in ((base, 0.0), (low, 0.002), (seed, 0.02), (fa, 0.0003)):
            publish(pub, 30, tensors(rng, 30, drift), fp16=pub is low)
        check(wait_all(30), "step 30 computed")
        check(dm.stop() == 0, "SIGTERM")
        labels, final = ratios_by_label(path)
        steps = {k[0] for k in final}
        same = labels == ["fp16", "seed"] and steps == {10, 20, 30}
        for key, want in after.items():
            got = final.get(key, {})
            same = same and all(got.get(lab) is not None and (x == got[lab] or (x != x and got[lab] != got[lab]))
                                for lab, x in want.items())
        check(same, f"rebuilt on reload: steps {sorted(steps)} of 10, 20, 30, each ratio under its label")
    finally:
        harness.teardown(dm, tmp, ctx)


def main():
    relabelled()
    tmp = tempfile.mkdtemp(prefix="wdrift-t51-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    rng = np.random.default_rng(51)
    try:
        dm.write_config(extra=EXTRA)
        check(dm.start() is not None, "wdriftd ready")
        sub = harness.subscribe(ctx, tmp, b"drift.fa", 100)
        base, fa, low = (Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec"))
        steps = (10, 20)
        refs = {}
        # The baseline runs to the end first; the proxy and the candidate come later.
        for s in steps:
            a = publish(base, s, tensors(rng, s, 0.0, uneq=4000))
            check(a and a["type"] == "ack", f"baseline step {s} acked")
        for s in steps:
            publish(low, s, tensors(rng, s, 0.002, uneq=4000), fp16=True)
            a = publish(fa, s, tensors(rng, s, 0.0003, uneq=2500))
            check(a and a["type"] == "ack", f"candidate step {s} acked, after the baseline finished")
        for s in steps:
            got = wait_drift(ctx, tmp, s)
            check(got is not None, f"drift for step {s} is computed")
            if not got:
                continue
            spool = os.path.join(tmp, "var", "spool")
            r = subprocess.run([WDRIFT, "compare", f"{spool}/base/{s}.h5", f"{spool}/fa/{s}.h5",
                                "--proxy", f"fp16={spool}/lowprec/{s}.h5", "--round-proxy", "bf16",
                                "--json"], capture_output=True, text=True)
            ref = {l["name"]: l for l in json.loads(r.stdout)["layers"]}
            mine = {l["name"]: l for l in got["candidates"]["fa"]["layers"]}
            same = set(ref) == set(mine)
            for name, l in mine.items():
                x = ref.get(name, {})
                same = same and all(close(l[k], x.get(k)) for k in ("w1", "max_abs_diff", "rel_l2"))
                for label in ("fp16", "round:bf16"):
                    same = same and close(l["proxies"][label]["w1"], x["proxies"][label]["w1"]) \
                        and close(l["proxies"][label]["ratio"], x["proxies"][label]["ratio"])
                same = same and l["numel"] == x["numel"]
            check(same, f"step {s}: the daemon's drift equals wdrift compare (4 tensors, one of unequal sizes, "
                  f"2 proxies)", f"daemon {json.dumps(mine.get('uneq'))}\ncompare {json.dumps(ref.get('uneq'))}")
            refs[s] = ref
            # the summary rows, one definition (lib/drift.h) for both
            rs, ms = json.loads(r.stdout)["summary"], got["candidates"]["fa"].get("summary", {})
            same = all(close(ms.get(k), rs[k]) for k in ("w1_weighted", "w1_median", "w1_max", "max_abs_diff"))
            for label in ("fp16", "round:bf16"):
                same = same and all(close(ms.get("proxies", {}).get(label, {}).get(k), rs["proxies"][label][k])
                                    for k in ("w1_weighted", "ratio_weighted", "ratio_median", "ratio_max"))
            check(same and ms.get("numel") == rs["numel"] and ms.get("tensors") == 4,
                  f"step {s}: the daemon's summary equals wdrift compare's (both proxies)",
                  f"daemon {json.dumps(ms)}\ncompare {json.dumps(rs)}")
        # The drift log, read while the daemon runs.
        path = os.path.join(tmp, "var", "drift", "fa.h5")
        try:
            with h5py.File(path, "r", swmr=True) as f:
                rows = f["rows"][:]
                names = f["tensors"][:].astype(str)
                runs = f["runs"][:].astype(str)
                proxies = f["proxies"][:].astype(str)
                fa_rows = [r for r in rows if runs[r["run"]] == "fa" and r["kind"] == 0]
                ok = (list(proxies) == ["fp16", "round:bf16"] and {10, 20} <= set(rows["step"])
                      and {"layers.0.w", "emb", "layers.1/w2"} <= set(names) and len(fa_rows) >= 6)
        except OSError as e:
            ok = False
            print(f"# {e}")
        check(ok, "h5py reads the drift log in SWMR mode while the daemon runs")
        # The drift log's own rows (the latest per step, tensor, run) equal wdrift compare.
        try:
            with h5py.File(path, "r", swmr=True) as f:
                rows = f["rows"][:]
                names = f["tensors"][:].astype(str)
                runs = f["runs"][:].astype(str)
                proxies = list(f["proxies"][:].astype(str))
            latest = {}
            for r in rows:
                if r["kind"] == 0 and runs[r["run"]] == "fa":
                    latest[(int(r["step"]), names[r["tensor"]])] = r
            same = len(refs) == 2
            for s, ref in refs.items():
                for name, x in ref.items():
                    r = latest.get((s, name))
                    ok = r is not None and close(float(r["w1"]), x["w1"]) \
                        and close(float(r["max_abs_diff"]), x["max_abs_diff"]) \
                        and close(float(r["rel_l2"]), x["rel_l2"]) and int(r["numel"]) == x["numel"]
                    for k, label in enumerate(proxies):
                        ok = ok and close(float(r["ratio"][k]), x["proxies"][label]["ratio"])
                    if not ok and same:
                        print(f"# first mismatch: step {s} {name}: log {r} vs compare {x}")
                    same = same and ok
        except (OSError, KeyError) as e:
            same = False
            print(f"# {e}")
        check(same, "the drift log's rows equal wdrift compare (w1, max|d|, rel L2, numel, ratios)")
        events = []
        for _ in range(40):
            try:
                events.append(sub.recv_multipart())
            except zmq.Again:
                if events:
                    break
        check(any(e[0] == b"drift.fa" and json.loads(e[1])["study"] == "fa" for e in events),
              f"drift events arrive on the PUB socket ({len(events)})")
        # kill -9 right after more acked snapshots, then restart.
        for s in (30,):
            publish(base, s, tensors(rng, s, 0.0))
            publish(low, s, tensors(rng, s, 0.002), fp16=True)
            a = publish(fa, s, tensors(rng, s, 0.0003))
            check(a and a["type"] == "ack", "step 30 acked by every run")
        dm.stop(signal.SIGKILL)
        check(dm.start() is not None, "restart after kill -9")
        old = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": 20})
        check(old and old.get("ok") and len(old["candidates"]["fa"]["layers"]) == 4,
              f"after the restart, step 20's logged results answer from the WAL ({old and old.get('error')})")
        got = wait_drift(ctx, tmp, 30)
        check(got is not None and len(got["candidates"]["fa"]["layers"]) == 3,
              "after the restart, step 30 has its results (logged, or computed again)")
        # kill -9 once every result is in the drift log (open, flagged for SWMR
        # writing), then a restart with nothing left to compute: start-up
        # itself must rebuild the log, or it never opens without h5clear.
        publish(base, 40, tensors(rng, 40, 0.0))
        publish(low, 40, tensors(rng, 40, 0.002), fp16=True)
        publish(fa, 40, tensors(rng, 40, 0.0003))
        check(wait_drift(ctx, tmp, 40) is not None, "step 40 computed")
        # step 50: the candidate skips it (it sends 60), the proxy lags (connected, at 40): only the
        # synthetic proxy is compared there. The candidate's row never comes, so no "yet" under the
        # table: the proxy that may still come is no candidate (a trial's read as one to wait for)
        publish(base, 50, tensors(rng, 50, 0.0))
        publish(base, 60, tensors(rng, 60, 0.0))
        publish(fa, 60, tensors(rng, 60, 0.0003))
        low.hello()
        end, got = time.time() + 20, None
        while time.time() < end and not (got and got.get("ok") and "fa" in got.get("candidates", {})):
            got = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": 60})
            time.sleep(0.2)
        check(got and got.get("ok") and "fa" in got["candidates"], "step 60 computed, the proxy not there")
        r = subprocess.run([WDRIFT, "drift", "fa", "--step", "50", "-c", os.path.join(tmp, "wdrift.yaml")],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "\n(no candidate compared at this step)\n" in r.stdout
              and "lagging    lowprec (proxy): compared last at step 40" in r.stdout and "never      'fa' (candidate)" in r.stdout,
              "drift --step 50: the candidate never, the proxy lagging: no 'yet' under the table", r.stdout + r.stderr)
        # the baseline ahead: step 70 has the synthetic proxy's rows alone. drift with no step shows 60, the latest
        # a candidate was compared at, and says why (a trial's default view was "no candidate compared")
        publish(base, 70, tensors(rng, 70, 0.0))
        end, got = time.time() + 20, None
        while time.time() < end and not (got and got.get("ok")):
            got = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": 70})
            time.sleep(0.2)
        check(got and got.get("ok") and not got.get("candidates"), "step 70 computed, the baseline's alone", got)
        cfg = os.path.join(tmp, "wdrift.yaml")
        r = subprocess.run([WDRIFT, "drift", "fa", "-c", cfg], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and r.stdout.startswith("study      fa, step 60, baseline base")
              and "\nlater      step 70, the latest with results, has no candidate's (its proxies' rows alone; 'fa' "
                  "has 1 publisher connected: it lags, or its step is held up): this is step 60, the latest a candidate "
                  f"was compared at (wdrift drift fa --step 70 -c {cfg})\n" in r.stdout and "\ncandidate  fa\n" in r.stdout,
              "drift with no step: step 60, the latest with a candidate's rows, and the later step said, with the "
              "candidate's job connected", r.stdout + r.stderr)
        # its job gone: the later line says so (a trial's could not tell a lagging candidate from an ended one)
        fa.s.close(linger=0)
        end = time.time() + 10
        while True:
            r = subprocess.run([WDRIFT, "drift", "fa", "-c", cfg], capture_output=True, text=True, timeout=30)
            if "'fa' has no publisher connected" in r.stdout or time.time() > end:
                break
            time.sleep(0.2)
        check(r.returncode == 0 and "(its proxies' rows alone; 'fa' has no publisher connected: its job ended, or "
              "has not reconnected): this is step 60" in r.stdout, "... and with the candidate's job gone",
              r.stdout + r.stderr)
        r = subprocess.run([WDRIFT, "drift", "fa", "-c", cfg, "--json"], capture_output=True, text=True, timeout=30)
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        check(o.get("step") == 60 and o.get("later_step") == 70 and "fa" in o.get("candidates", {}),
              "drift --json: step 60, later_step 70", r.stdout[-1500:])
        r = subprocess.run([WDRIFT, "studies", "-c", cfg], capture_output=True, text=True, timeout=30)
        s_ = json.loads(subprocess.run([WDRIFT, "studies", "-c", cfg, "--json"], capture_output=True, text=True,
                                       timeout=30).stdout or "{}")
        check(r.returncode == 0 and " 70 (a candidate's: 60)" in r.stdout
              and s_.get("studies", [{}])[0].get("latest") == 70 and s_["studies"][0].get("latest_compared") == 60,
              "studies: the latest step, and the candidate's latest beside it", r.stdout)
        r = subprocess.run([WDRIFT, "report", "fa", "-c", cfg, "-o", "-"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and "At step 60, the latest it compared a candidate at, as <code>wdrift drift fa" in r.stdout
              and "step 70, the latest with results, has no candidate" in r.stdout,
              "report: what wdriftd says is of step 60, and the later step is said", r.stdout[-3000:] + r.stderr)
        r = subprocess.run([WDRIFT, "drift", "fa", "--step", "70", "-c", cfg], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 0 and "step 70" in r.stdout and "later " not in r.stdout
              and "(no candidate compared at this step)" in r.stdout and "never      'fa' (candidate)" in r.stdout,
              "drift --step 70 shows the baseline's step, as asked (its candidate's job gone: never, no 'yet')",
              r.stdout + r.stderr)
        dm.stop(signal.SIGKILL)
        check(dm.start() is not None, "restart after kill -9, every result already logged")
        time.sleep(0.5)
        rc = dm.stop(signal.SIGTERM)
        check(rc == 0, f"SIGTERM after a restart that replayed results: exit 0 ({rc})")
        try:
            with h5py.File(path, "r") as f:   # no h5clear, no swmr flag needed
                st = set(f["rows"]["step"])
            ok = {10, 20, 30, 40} <= st
        except OSError as e:
            ok = False
            print(f"# {e}")
        check(ok, "the drift log opens without h5clear and holds steps 10, 20, 30 and 40")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
