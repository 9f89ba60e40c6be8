#!/usr/bin/env python3
"""bench_drift_query.py: `make bench-drift-query`. A `drift` query on a large study.

A real wdriftd (CPU engine) gets one snapshot of three runs (baseline,
candidate, fp16 proxy) of N tiny f32 tensors each, compares them, and then
answers `drift` for the step: every one of the N layers. Printed per N:

- the query's time, send to reply, median of REPEATS, and per layer;
- beside it, the peer it is judged against, measured in the same run: the
  client's own json.loads of the same reply bytes (a reply cannot be built
  much faster than it can be read back);
- the reply's size.

Then, for the study of STATUS_TENSORS tensors, the latency of `status`
requests sent every 10 ms while `drift` queries on it run back to back
(target, issue 11: p99 under 100 ms), beside the same requests on an idle
daemon.

Not a test: it fails only when a reply is wrong (a layer missing). BUILD
picks the build (an older tree's build measures "before"); a query slower
than QUERY_LIMIT seconds ends the sweep with a note.
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import numpy as np
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402  (bench_config)
BUILD = os.environ.get("BUILD", os.path.join(HERE, "..", "build"))
WDRIFTD = os.path.abspath(os.path.join(BUILD, "wdriftd"))

# Enough tensors per snapshot, and time to receive them, for the largest N.
LIMITS = {"max_tensors": 100000, "pending_timeout": 3600}


class Daemon:
    """wdriftd in its own temp dir; stopped by pid, the dir removed."""

    def __init__(self):
        self.d = tempfile.mkdtemp(prefix="wdrift-bench-drift-")
        with open(os.path.join(self.d, "wdrift.yaml"), "w") as f:
            f.write(harness.bench_config(self.d, "1G", LIMITS, "big", "base", ["cand"], {"fp16": "lowprec"}))
        self.log = open(os.path.join(self.d, "daemon.log"), "wb")
        self.proc = subprocess.Popen([WDRIFTD, "-c", os.path.join(self.d, "wdrift.yaml")],
                                     stdout=self.log, stderr=self.log)
        self.ctx = zmq.Context()

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.ctx.destroy(linger=0)
        subprocess.run(["rm", "-rf", self.d])

    def request(self, req, timeout_s):
        """(seconds, reply bytes) of one request on a fresh REQ socket; reply None on timeout."""
        s = self.ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        s.connect(f"ipc://{self.d}/control.sock")
        t0 = time.perf_counter()
        s.send_string(json.dumps(req))
        try:
            body = s.recv()
        except zmq.Again:
            body = None
        t = time.perf_counter() - t0
        s.close()
        return t, body

    def wait_ready(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            _, r = self.request({"v": 1, "cmd": "status"}, 1)
            if r:
                return True
        return False

    def publish(self, run, step, n, numel, seed):
        """One snapshot of n tensors of numel f32 values, committed; the ack's type."""
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, 600000)
        s.connect(f"ipc://{self.d}/ingest.sock")
        rng = np.random.default_rng(seed)
        vals = (rng.standard_normal((n, numel)) * 0.02).astype(np.float32)
        for i in range(n):
            payload = vals[i].tobytes()
            h = {"v": 1, "type": "tensor", "run": run, "step": step, "name": f"layers.{i}.w",
                 "dtype": "f32", "shape": [numel], "offset": 0, "count": numel, "total": numel,
                 "crc32": zlib.crc32(payload)}
            s.send_multipart([json.dumps(h).encode(), payload])
        s.send(json.dumps({"v": 1, "type": "commit", "run": run, "step": step, "tensors": n}).encode())
        # errors (none expected) come before the ack; the ack ends it
        while True:
            m = json.loads(s.recv())
            if m.get("type") != "error":
                s.close()
                return m.get("type")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def study(n, numel, repeats, limit, status_probe):
    dm = Daemon()
    try:
        if not dm.wait_ready():
            with open(os.path.join(dm.d, "daemon.log"), errors="replace") as f:
                sys.exit(f"wdriftd did not start:\n{f.read()[-2000:]}")
        sub = dm.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"drift.big")
        sub.connect(f"ipc://{dm.d}/events.sock")
        time.sleep(0.3)
        t0 = time.perf_counter()
        # the baseline last: one comparison of all three
        for run, seed in (("lowprec", 2), ("cand", 3), ("base", 1)):
            ack = dm.publish(run, 1, n, numel, seed)
            if ack != "ack":
                sys.exit(f"{run}: publish answered {ack}")
        t_pub = time.perf_counter() - t0
        sub.setsockopt(zmq.RCVTIMEO, 1800 * 1000)
        sub.recv_multipart()
        t_cmp = time.perf_counter() - t0 - t_pub
        req = {"v": 1, "cmd": "drift", "study": "big", "step": 1}
        times, parse, body = [], [], None
        for _ in range(repeats):
            t, body = dm.request(req, limit)
            if body is None:
                return {"n": n, "timeout": True, "pub": t_pub, "cmp": t_cmp}
            times.append(t)
            p0 = time.perf_counter()
            r = json.loads(body)
            parse.append(time.perf_counter() - p0)
        layers = r["candidates"]["cand"]["layers"] if r.get("ok") else []
        if len(layers) != n or any(l["proxies"]["fp16"]["w1"] is None for l in layers):
            sys.exit(f"n={n}: the reply has {len(layers)} layers, or a proxy W1 missing: {body[:300]}")
        out = {"n": n, "query": statistics.median(times), "parse": statistics.median(parse),
               "bytes": len(body), "pub": t_pub, "cmp": t_cmp}
        if status_probe:
            out["idle"] = status_latency(dm, None)
            out["busy"], out["drift_during"] = status_latency(dm, req)
        return out
    finally:
        dm.close()


def status_latency(dm, drift_req, samples=200, seconds=30):
    """Seconds of each status request, one every 10 ms, samples of them or
    for seconds, whichever ends first; with drift_req, while that query
    runs back to back on another socket: (latencies, drift queries done)."""
    stop = threading.Event()
    done = []

    def hammer():
        while not stop.is_set():
            t, body = dm.request(drift_req, 600)
            if body is not None:
                done.append(t)

    th = None
    if drift_req:
        th = threading.Thread(target=hammer)
        th.start()
        time.sleep(0.05)
    lat = []
    end = time.monotonic() + seconds
    while len(lat) < samples and time.monotonic() < end:
        t, body = dm.request({"v": 1, "cmd": "status"}, 10)
        lat.append(t if body is not None else float("inf"))
        time.sleep(0.01)
    if th is None:
        return lat
    stop.set()
    th.join()
    return lat, done


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", default=os.environ.get("BENCH_TENSORS", "2500,5000,10000,20000,50000,100000"))
    ap.add_argument("--status-tensors", type=int, default=int(os.environ.get("STATUS_TENSORS", 20000)))
    ap.add_argument("--numel", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("REPEATS", 3)))
    ap.add_argument("--limit", type=float, default=float(os.environ.get("QUERY_LIMIT", 120)))
    a = ap.parse_args()
    counts = [int(x) for x in a.tensors.split(",") if x]
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print(f"wdrift drift-query benchmark: 3 runs x N tensors of {a.numel} f32, one step; build {BUILD}")
    print(f"machine: {cpu}, {os.cpu_count()} cpus, {platform.platform()}; {time.strftime('%Y-%m-%d')}")
    print()
    print(f"{'tensors':>8} {'query s':>9} {'us/layer':>9} {'peer: parse s':>14} {'ratio':>6} "
          f"{'reply MB':>9} {'publish s':>10} {'compare s':>10}")
    probe = None
    for n in counts:
        r = study(n, a.numel, a.repeats, a.limit, n == a.status_tensors)
        if r.get("timeout"):
            print(f"{n:>8} {'> %g' % a.limit:>9}  (no reply within QUERY_LIMIT: sweep ends)")
            break
        print(f"{n:>8} {r['query']:>9.3f} {1e6 * r['query'] / n:>9.1f} {r['parse']:>14.3f} "
              f"{r['query'] / r['parse']:>6.2f} {r['bytes'] / 1e6:>9.1f} {r['pub']:>10.1f} {r['cmp']:>10.1f}",
              flush=True)
        if "busy" in r:
            probe = r
    if probe:
        print()
        print(f"status latency, {probe['n']} tensors, one request every 10 ms (ms): target p99 < 100")
        for what, lat in (("idle daemon", probe["idle"]), ("drift queries running", probe["busy"])):
            print(f"  {what:<24} p50 {1e3 * pct(lat, 50):8.1f}  p99 {1e3 * pct(lat, 99):8.1f}  "
                  f"max {1e3 * max(lat):8.1f}  ({len(lat)} requests)")
        print(f"  ({len(probe['drift_during'])} drift queries ran meanwhile, median "
              f"{statistics.median(probe['drift_during']) if probe['drift_during'] else float('nan'):.3f} s)")


if __name__ == "__main__":
    main()
