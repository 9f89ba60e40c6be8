#!/usr/bin/env python3
"""bench_attack.py: a good publisher's ack wait, and status latency, while wdriftd is attacked.

`make bench-attack`. One daemon (memory.budget 256M, as the attack had)
per scenario, a fresh storage dir each. In each, a good publisher (the
Python package, its own process) publishes SNAPS snapshots of 1 MiB one
after another, each flushed before the next: its ack wait is the time
from publish() to the ack. A thread asks `status` every 50 ms. The
scenarios, run in this order on the same machine, so that they compare:

- quiet: nothing else (the peer every other row is set against);
- slow drip: two runs reserve 128 MiB and 128 MiB - 4 KiB tensors and
  send one element of each every 2 s (issue 11, item 2);
- bad names: a raw peer sends a tensor named '.' and a commit, over and
  over (item 1; before the fix this poisoned the publisher that sent it);
- big frames: a raw peer sends 65 MiB frames, which ZeroMQ answers by
  dropping its connection, over and over (item 6);
- churn: 50 peers connect, say hello and leave, in a loop.

Prints a table: ack wait p50, p99, max; status p99; and p99 / quiet p99.
Targets (issue 11): ack wait p99 under 1 s, status p99 under 100 ms.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402
from harness import Daemon  # noqa: E402

import numpy as np  # noqa: E402
import zmq  # noqa: E402

PYTHON = os.environ.get("PYTHON", sys.executable)
PYDIR = os.path.join(ROOT, "python")
SNAPS = int(os.environ.get("BENCH_ATTACK_SNAPS", "200"))
MIB = 1 << 20

GOOD = """
import json, sys, time
import numpy as np, wdrift
pub = wdrift.Publisher(sys.argv[1], "good", ack_timeout=2.0)
waits = []
for step in range(int(sys.argv[2])):
    t = time.monotonic()
    pub.publish(step, {"w": np.arange(256 * 1024, dtype=np.float32) + step})
    ok = pub.flush(60)
    waits.append(time.monotonic() - t)
s = pub.stats()
pub.close(5)
print(json.dumps({"waits": waits, "acked": s["acked"]}))
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def dealer(ctx, ep):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDTIMEO, 1000)
    s.connect(ep)
    return s


def tensor(s, run, step, name, arr, offset=0, total=None):
    raw = arr.tobytes()
    h = {"v": 1, "type": "tensor", "run": run, "step": step, "name": name, "dtype": "f32",
         "shape": [total or arr.size], "offset": offset, "count": arr.size,
         "total": total or arr.size, "crc32": zlib.crc32(raw)}
    try:
        s.send_multipart([json.dumps(h).encode(), raw])
    except zmq.Again:
        pass


def slow_drip(ctx, ep, stop):
    socks = [dealer(ctx, ep) for _ in range(2)]
    elems = [(128 * MIB) // 4, (128 * MIB - 4096) // 4]
    i = 0
    while not stop.is_set():
        for k, (s, n) in enumerate(zip(socks, elems)):
            tensor(s, f"drip{k}", 1, "big", np.ones(1, np.float32), offset=i % n, total=n)
        i += 1
        stop.wait(2.0)
    for s in socks:
        s.close()


def bad_names(ctx, ep, stop):
    s = dealer(ctx, ep)
    step = 0
    while not stop.is_set():
        tensor(s, "poison", step, ".", np.ones(4, np.float32))
        try:
            s.send(json.dumps({"v": 1, "type": "commit", "run": "poison", "step": step,
                               "tensors": 1}).encode())
            while s.poll(0):
                s.recv()
        except zmq.Again:
            pass
        step += 1
        stop.wait(0.02)
    s.close()


def big_frames(ctx, ep, stop):
    payload = bytes(65 * MIB)
    h = json.dumps({"v": 1, "type": "tensor", "run": "big", "step": 1, "name": "w", "dtype": "f32",
                    "shape": [len(payload) // 4], "offset": 0, "count": len(payload) // 4,
                    "total": len(payload) // 4, "crc32": zlib.crc32(payload)}).encode()
    while not stop.is_set():
        s = dealer(ctx, ep)
        try:
            s.send_multipart([h, payload])
        except zmq.Again:
            pass
        stop.wait(0.5)
        s.close()


def churn(ctx, ep, stop):
    while not stop.is_set():
        socks = [dealer(ctx, ep) for _ in range(50)]
        for k, s in enumerate(socks):
            try:
                s.send(json.dumps({"v": 1, "type": "hello", "run": f"churn{k}"}).encode())
            except zmq.Again:
                pass
        stop.wait(0.2)
        for s in socks:
            s.close()


SCENARIOS = [("quiet", None), ("slow drip", slow_drip), ("bad names", bad_names),
             ("big frames", big_frames), ("churn", churn)]


def status_sampler(ctx, d, stop, measuring, out):
    """status every 50 ms; kept while the good publisher runs."""
    while not stop.is_set():
        t = time.monotonic()
        r = harness.control(ctx, d, {"v": 1, "cmd": "status"}, timeout=5000)
        if measuring.is_set():
            out.append(time.monotonic() - t if r else float("inf"))
        stop.wait(0.05)


def run(name, attack):
    ctx = zmq.Context()
    tmp = tempfile.mkdtemp(prefix="wdrift-bench-attack-")
    dm = Daemon(tmp)
    try:
        dm.write_config(level="notice")
        if dm.start() is None:
            raise SystemExit(f"{name}: the daemon did not start:\n{dm.log_text()}")
        ep = f"ipc://{tmp}/run/ingest.sock"
        stop, measuring = threading.Event(), threading.Event()
        lat = []
        threads = [threading.Thread(target=status_sampler, args=(ctx, tmp, stop, measuring, lat))]
        if attack:
            threads.append(threading.Thread(target=attack, args=(ctx, ep, stop)))
        for th in threads:
            th.start()
        time.sleep(1.5)    # the attack takes hold first
        env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        measuring.set()
        p = subprocess.run([PYTHON, "-c", GOOD, ep, str(SNAPS)], env=env, capture_output=True,
                           text=True, timeout=600)
        stop.set()
        for th in threads:
            th.join()
        if p.returncode:
            raise SystemExit(f"{name}: the good publisher failed:\n{p.stderr}")
        res = json.loads(p.stdout.strip().splitlines()[-1])
        return res, lat
    finally:
        harness.teardown(dm, tmp, ctx)


def main():
    print(f"# bench-attack: {SNAPS} snapshots of 1 MiB by a good publisher, status every 50 ms; "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    print("| scenario | acked | ack wait p50 | p99 | max | × quiet p99 | status p99 | status max (samples) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    base = None
    worst = 0.0
    run("warm-up", None)    # the first daemon and interpreter start cold: not a row
    for name, attack in SCENARIOS:
        res, lat = run(name, attack)
        w = res["waits"]
        p99 = pct(w, 99)
        base = base or p99
        worst = max(worst, p99)
        print(f"| {name} | {res['acked']}/{SNAPS} | {pct(w, 50) * 1e3:.1f} ms | {p99 * 1e3:.1f} ms | "
              f"{max(w) * 1e3:.1f} ms | {p99 / base:.2f} | {pct(lat, 99) * 1e3:.1f} ms | "
              f"{max(lat) * 1e3:.1f} ms ({len(lat)}) |", flush=True)
    print(f"# worst ack wait p99 {worst * 1e3:.1f} ms: target under 1000 ms "
          f"({'met' if worst < 1.0 else 'MISSED'})")


if __name__ == "__main__":
    main()
