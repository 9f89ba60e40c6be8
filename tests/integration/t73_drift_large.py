#!/usr/bin/env python3
"""t73_drift_large.py: `drift` on a study of 20,000 tensors (issue 11, item 4).

A mixture-of-experts model has tens of thousands of tensors. Three runs (a
baseline, a candidate and an fp16 proxy) publish one snapshot of 20,000
tiny f32 tensors each to a real wdriftd, which compares them. Checks:

- a `drift` query returns all 20,000 layers, and spot-checked layers equal
  scipy.stats.wasserstein_distance on the values published (W1, the
  proxy's W1, the ratio, max|a-b|);
- `status` requests sent while drift queries run back to back are each
  answered within 1 s (a generous bound for noisy machines; the figures are
  in docs/performance.md): the drift reply is built off the main loop;
- with two alert rules on the study, one per tensor (20,000 instances)
  and one on the median, `status` requests sent while the results come in
  are each answered within 1 s: the rules are evaluated in linear time on
  the main loop (they took seconds a batch when each row scanned the ones
  before it and each tensor's instance was found by a scan). Under
  -fsanitize the bound is 5 s. On 2 cores, with this build's compute
  threads busy, one status request waited 1.5 s in CI (another test
  beside it), and 1.1-2.1 s with two busy loops beside it, while the main
  loop itself never ran longer than 0.11 s at a time (2026-11-28): that
  is waiting for a core, not for the daemon;
- the status requests come from a process of their own, which shares no
  interpreter lock with this one's publishing and parsing;
- `wdrift drift --json` with a timeout shorter than its wait (four other
  queries go first) gets the whole reply, and the daemon received the
  query once: the CLI waits for a daemon that is alive instead of sending
  the query again.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import zmq
from scipy.stats import wasserstein_distance

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, Publisher, check, control, summary, teardown  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
N = 20000
NUMEL = 8
BOUND = 5.0 if os.environ.get("WDRIFT_SANITIZE") else 1.0	# seconds: see above


def values(seed):
    """N tensors of NUMEL f32 values: one row each."""
    return (np.random.default_rng(seed).standard_normal((N, NUMEL)) * 0.02).astype(np.float32)


def publish(pub, vals):
    for i in range(N):
        pub.tensor(1, f"experts.{i}.w", vals[i], "f32")
    return pub.commit(1, N)


ALERTS = """alerts:
  - name: fa-each
    study: fa
    metric: w1
    scope: tensors
    tensors: "experts.*"
    threshold: 1.0e+9
  - name: fa-median
    study: fa
    metric: ratio
    proxy: fp16
    scope: median
    threshold: 1.0e+9
"""


# status every 20 ms from a process of its own, until its stdin closes: one
# "sent seconds" line each (CLOCK_MONOTONIC, the same clock as this
# process's time.monotonic()). In a thread of this process its answers
# waited for the GIL while this process built or parsed 20,000 tensors'
# worth of messages: that is not the daemon's latency.
SAMPLER = r"""
import json, select, sys, time, zmq
ctx = zmq.Context()
while not select.select([sys.stdin], [], [], 0.02)[0]:
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 10000)
    s.connect(f"ipc://{sys.argv[1]}/run/control.sock")
    t0 = time.monotonic()
    s.send_string(json.dumps({"v": 1, "cmd": "status"}))
    try:
        ok = json.loads(s.recv()).get("ok")
    except zmq.Again:
        ok = False
    s.close()
    print(t0, time.monotonic() - t0 if ok else "inf", flush=True)
"""


class StatusSampler:
    def __init__(self, tmp):
        self.p = subprocess.Popen([sys.executable, "-c", SAMPLER, tmp], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        self.lines = []
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)

    def stop(self, at_least=0, cap=60):
        """[(sent, seconds to answer)], once at least that many have come (cap: seconds)"""
        end = time.monotonic() + cap
        while len(self.lines) < at_least and time.monotonic() < end and self.p.poll() is None:
            time.sleep(0.05)
        self.p.stdin.write("stop\n")
        self.p.stdin.close()
        self.p.wait(timeout=60)
        self.reader.join()
        return [(float(a), float(b)) for a, b in (line.split() for line in self.lines)]


def close(a, b, rel=1e-9):
    return a is not None and abs(a - b) <= rel * abs(b) + 1e-15


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t73-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config(extra=ALERTS)
        if not check(dm.start() is not None, "the daemon is ready"):
            return
        base, cand, low = values(1), values(2), values(3)
        # the baseline last: one comparison of all three
        for run, v in (("lowprec", low), ("fa", cand)):
            ack = publish(Publisher(ctx, tmp, run), v)
            check(ack and ack.get("type") == "ack", f"{run}: {N} tensors acked", ack)
        sampler = StatusSampler(tmp)
        ack = publish(Publisher(ctx, tmp, "base"), base)
        check(ack and ack.get("type") == "ack", f"base: {N} tensors acked", ack)

        req = {"v": 1, "cmd": "drift", "study": "fa", "step": 1}
        r, end = None, time.time() + 300
        while time.time() < end:
            r = control(ctx, tmp, req, timeout=60000)
            if r and r.get("ok"):
                break
            time.sleep(0.5)
        time.sleep(1.0)     # the batch's alerts are evaluated after it is kept for drift
        arriving = sampler.stop()
        worst = max((d for _, d in arriving), default=float("inf"))
        check(len(arriving) >= 10 and worst < BOUND,
              f"{len(arriving)} status requests while the results came in and the alert rules ran, "
              f"each answered within {BOUND:g} s (max {worst * 1000:.0f} ms)", sorted(d for _, d in arriving)[-5:])
        al = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        each = next((a for a in (al or {}).get("alerts", []) if a.get("name") == "fa-each"), None)
        check(each is not None and len(each.get("instances", [])) == N,
              f"the per-tensor rule has an instance for each of the {N} tensors",
              str(al)[:300])
        layers = (r or {}).get("candidates", {}).get("fa", {}).get("layers", [])
        check(len(layers) == N and {l["name"] for l in layers} == {f"experts.{i}.w" for i in range(N)},
              f"drift returns all {N} layers, each once", f"{len(layers)} layers: {str(r)[:500]}")

        by_name = {l["name"]: l for l in layers}
        bad = []
        for i in np.random.default_rng(7).choice(N, 50, replace=False):
            l = by_name.get(f"experts.{i}.w")
            w1 = wasserstein_distance(base[i], cand[i])
            pw1 = wasserstein_distance(base[i], low[i])
            mad = float(np.max(np.abs(base[i].astype(np.float64) - cand[i])))
            if not (l and close(l["w1"], w1) and close(l["proxies"]["fp16"]["w1"], pw1) and
                    close(l["proxies"]["fp16"]["ratio"], w1 / pw1, 1e-8) and close(l["max_abs_diff"], mad)
                    and l["numel"] == NUMEL):
                bad.append((int(i), l, w1, pw1, mad))
        check(not bad, "50 layers spot-checked equal scipy: W1, the proxy's W1, the ratio, max|a-b|",
              bad[:3])

        # status while drift queries run back to back, on their own sockets
        stop = threading.Event()
        spans, results = [], []

        def hammer():
            # raw bytes, counted, not parsed: json.loads of megabytes would hold
            # this process's GIL and delay the status thread, not the daemon
            s = ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVTIMEO, 60000)
            s.connect(f"ipc://{tmp}/run/control.sock")
            body = json.dumps(req).encode()
            while not stop.is_set():
                t0 = time.monotonic()
                s.send(body)
                try:
                    x = s.recv()
                except zmq.Again:
                    results.append(False)
                    break
                spans.append((t0, time.monotonic()))
                results.append(x.startswith(b'{"v":1,"ok":true') and x.count(b'"name":') == N)
            s.close()

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for th in threads:
            th.start()
        time.sleep(0.1)
        sampler = StatusSampler(tmp)
        time.sleep(5)
        lat = sampler.stop(at_least=20)     # the interpreter's start may take a while here
        stop.set()
        for th in threads:
            th.join()
        during = [d for t0, d in lat if any(a <= t0 <= b for a, b in spans)]
        check(results and all(results), f"{len(results)} drift queries meanwhile, each with all {N} layers",
              results)
        check(len(during) >= 10, f"{len(during)} status requests sent while a drift query ran", len(lat))
        check(during and max(during) < BOUND,
              f"each answered within {BOUND:g} s (max {max(during, default=0) * 1000:.0f} ms, "
              f"median {sorted(during)[len(during) // 2] * 1000 if during else 0:.0f} ms)",
              sorted(during)[-5:])

        # the CLI: a timeout far shorter than the query; the query sent once
        dm.write_config(level="debug")
        dm.proc.send_signal(signal.SIGHUP)
        check(dm.wait_notify("READY=1", 10) is not None, "reloaded at log level debug")
        before = dm.log_text().count("control: drift 'fa'")
        # four other queries of every tensor (other globs: not joined with the
        # CLI's) go first, so that the CLI's waits past its timeout for sure
        ahead = []
        for glob in ("*", "experts.*", "e*", "*.w"):
            s = ctx.socket(zmq.REQ)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVTIMEO, 60000)
            s.connect(f"ipc://{tmp}/run/control.sock")
            s.send_string(json.dumps(dict(req, tensors=glob)))
            ahead.append(s)
        t0 = time.monotonic()
        p = subprocess.run([WDRIFT, "drift", "fa", "--step", "1", "--json", "-c", cfg],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, WDRIFT_TIMEOUT_MS="200"))
        took = time.monotonic() - t0
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = {}
        n = len(out.get("candidates", {}).get("fa", {}).get("layers", []))
        check(p.returncode == 0 and n == N,
              f"wdrift drift --json with WDRIFT_TIMEOUT_MS=200 gets all {N} layers ({took:.2f} s)",
              p.stderr[-500:])
        ok_ahead = 0
        for s in ahead:
            try:
                ok_ahead += s.recv().count(b'"name":') == N
            except zmq.Again:
                pass
            s.close()
        check(ok_ahead == 4, f"the 4 queries ahead of it answered in full ({ok_ahead})")
        sent = dm.log_text().count("control: drift 'fa'") - before - 4
        check(sent == 1, f"the daemon received the CLI's drift query once (counted {sent})",
              dm.log_text()[-2000:])
        check(control(ctx, tmp, {"v": 1, "cmd": "status"}) is not None, "the daemon still serves")
    finally:
        teardown(dm, tmp, ctx)


if __name__ == "__main__":
    main()
    sys.exit(summary())
