#!/usr/bin/env python3
"""t51_drift.py: the daemon's drift equals `wdrift compare` on the same tensors.

Three runs publish to a real wdriftd: a baseline, a candidate that starts
only after the baseline has finished, and an fp16 proxy; the study also has
the synthetic proxy round:bf16. Checks: the drift query and the drift log
(read by h5py in SWMR mode while the daemon runs) equal `wdrift compare`
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
from t50_daemon import Daemon, Publisher, bf16, check, control  # noqa: E402
import t50_daemon  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

EXTRA = "    synthetic_proxy: round:bf16\n"


def tensors(rng, step, drift):
    """The same three tensors for every run, drifted by `drift`."""
    r = np.random.default_rng(1000 + step)
    base = {"layers.0.w": r.standard_normal(5000).astype(np.float32) * 0.02,
            "emb": r.standard_normal(3000).astype(np.float32) * 0.02,
            "layers.1/w2": r.standard_normal((40, 30)).astype(np.float32) * 0.02}
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


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t51-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    rng = np.random.default_rng(51)
    try:
        dm.write_config(extra=EXTRA)
        check(dm.start() is not None, "wdriftd ready")
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"drift.fa")
        sub.setsockopt(zmq.RCVTIMEO, 100)
        sub.connect(f"ipc://{tmp}/run/events.sock")
        time.sleep(0.3)   # let the subscription reach the PUB socket
        base, fa, low = (Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec"))
        steps = (10, 20)
        refs = {}
        # The baseline runs to the end first; the proxy and the candidate come later.
        for s in steps:
            a = publish(base, s, tensors(rng, s, 0.0))
            check(a and a["type"] == "ack", f"baseline step {s} acked")
        for s in steps:
            publish(low, s, tensors(rng, s, 0.002), fp16=True)
            a = publish(fa, s, tensors(rng, s, 0.0003))
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
            check(same, f"step {s}: the daemon's drift equals wdrift compare (3 tensors, 2 proxies)")
            refs[s] = ref
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
        check(old and old.get("ok") and len(old["candidates"]["fa"]["layers"]) == 3,
              f"after the restart, step 20's logged results answer from the WAL ({old and old.get('error')})")
        got = wait_drift(ctx, tmp, 30)
        check(got is not None and len(got["candidates"]["fa"]["layers"]) == 3,
              "after the restart, step 30 has its results (logged, or computed again)")
        dm.stop(signal.SIGTERM)
        try:
            with h5py.File(path, "r") as f:   # no h5clear, no swmr flag needed
                st = set(f["rows"]["step"])
            ok = {10, 20, 30} <= st
        except OSError as e:
            ok = False
            print(f"# {e}")
        check(ok, "the drift log opens without h5clear and holds steps 10, 20 and 30")
    finally:
        dm.stop(signal.SIGKILL)
        ctx.destroy(linger=0)
        if t50_daemon.n_fail:
            try:
                print("# daemon log:\n# " + dm.log_text().replace("\n", "\n# "))
            except OSError:
                pass
        subprocess.run(["rm", "-rf", tmp])
    print(f"# {t50_daemon.n_ok} passed, {t50_daemon.n_fail} failed")
    return 1 if t50_daemon.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
