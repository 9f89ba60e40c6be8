#!/usr/bin/env python3
"""t80_many_runs.py: a study as large as the config allows is compared whole.

The config allows 256 candidates and 64 proxies in a study, but the daemon
compared at most 256 runs in all: with 64 proxies, candidates beyond the
192nd were left out of every step without a word (issue 14). Here a study
of 64 proxies and 200 candidates, each run one small snapshot at step 0
over a real ZeroMQ socket into a real wdriftd (the baseline last, so the
step is compared once, whole): the drift reply must hold all 200
candidates, each with its W1 and all 64 proxies' ratios, and the W1 must
be the one computed here from the sorted values. The daemon is stopped by
pid and the temp dir removed, also on failure.
"""
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import zmq  # noqa: E402

from harness import CONFIG, WDRIFTD, Daemon, Publisher, check, control, summary, teardown  # noqa: E402

N_CANDS, N_PROXIES, N = 200, 64, 64


def write_config(d):
    text = CONFIG.format(d=d, extra="", level="info")
    text = text.replace("limits:\n  max_message: 64M\n", "limits:\n  max_message: 64M\n  max_runs: 1024\n")
    text += ("  - name: many\n    baseline: b\n"
             f"    candidates: [{', '.join(f'c{i}' for i in range(N_CANDS))}]\n"
             "    proxies:\n" + "".join(f"      p{i}: p{i}\n" for i in range(N_PROXIES)))
    with open(os.path.join(d, "wdrift.yaml"), "w") as f:
        f.write(text)


def w1(a, b):
    return float(np.mean(np.abs(np.sort(a.astype(np.float64)) - np.sort(b.astype(np.float64)))))


def main():
    if not os.path.exists(WDRIFTD):
        print(f"not ok 1 - {WDRIFTD} is not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="wdrift-t80-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    rng = np.random.default_rng(80)
    try:
        write_config(tmp)
        if not check(dm.start() is not None, "wdriftd is ready with a study of 64 proxies and 200 candidates",
                     dm.log_text()):
            return 1
        runs = [f"p{i}" for i in range(N_PROXIES)] + [f"c{i}" for i in range(N_CANDS)] + ["b"]
        data = {r: rng.standard_normal(N).astype(np.float32) * (1 + 0.01 * k) for k, r in enumerate(runs)}
        acked = 0
        for r in runs:  # the baseline last: the step is compared once, with every run there
            pub = Publisher(ctx, tmp, r)
            pub.tensor(0, "w", data[r], "f32")
            a = pub.commit(0, 1)
            acked += bool(a and a.get("type") == "ack")
            pub.s.close()
        check(acked == len(runs), f"every run's snapshot is acked ({acked} of {len(runs)})")

        end, rep = time.time() + 60, None
        while time.time() < end:
            rep = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "many", "step": 0}, timeout=10000)
            if rep and rep.get("ok") and len(rep.get("candidates", {})) >= N_CANDS:
                break
            time.sleep(0.3)
        cands = (rep or {}).get("candidates", {})
        missing = sorted(set(f"c{i}" for i in range(N_CANDS)) - set(cands), key=lambda s: int(s[1:]))
        check(not missing, f"all {N_CANDS} candidates are compared (missing: {missing[:10]})",
              str(rep)[:2000])
        bad_w1, bad_ratio = [], []
        for name, c in cands.items():
            layer = c["layers"][0]
            if layer["w1"] is None or abs(layer["w1"] - w1(data[name], data["b"])) > 1e-12 * layer["w1"]:
                bad_w1.append(name)
            if len(layer["proxies"]) != N_PROXIES or any(p["ratio"] is None for p in layer["proxies"].values()):
                bad_ratio.append(name)
        check(cands and not bad_w1, f"each candidate's W1 is the one computed here ({bad_w1[:5]})")
        check(cands and not bad_ratio, f"each candidate has all {N_PROXIES} proxies' ratios ({bad_ratio[:5]})")
    finally:
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
