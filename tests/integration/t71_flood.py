#!/usr/bin/env python3
"""t71_flood.py: wdriftd under floods, idle connections and every limit (issue 6).

1. Flood: four publisher processes, each with its own ZeroMQ socket over
   tcp://127.0.0.1, push snapshots at ten times the CPU engine's throughput
   (measured here first, with wdrift-bench on the flood's own tensor size)
   for 60 s, into a daemon with memory.budget 256M whose study compares the
   four runs. They pipeline up to limits.max_pending snapshots and re-send
   whatever is refused, as an eager publisher would. Throughout, the
   daemon's RSS is sampled, and `status` is asked every 0.25 s from a
   thread of its own. Pass: RSS stays within the budget plus a constant
   stated below, every status answers within 1 s, the push-back shows in
   status, and afterwards a normal snapshot is acked and SIGTERM exits 0.
2. Idle connections: 500 raw TCP connections to the ingest port that send
   nothing or half a ZMTP greeting do not keep a real publisher's snapshot
   from being acked promptly.
3. Limits: each of max_message, max_name, max_dims, max_tensors, max_runs
   and max_pending refused with its code and field, counted in status, the
   daemon serving on. (t50 covers max_message and that refused tensors do
   not use up max_runs; the rest is here.)

Figures are printed as "# ..." lines. Daemons and publisher processes are
stopped by pid, temp dirs removed, also on failure.

   python3 tests/integration/t71_flood.py            (about 2 minutes)
   T71_FLOOD_SECONDS=10 ...                          a shorter flood, for trying
"""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as t50  # noqa: E402  (Daemon, control, check, teardown, summary)
from harness import Daemon, check, control, free_port, summary, teardown  # noqa: E402

import numpy as np  # noqa: E402
import zmq  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
WDRIFTD = t50.WDRIFTD
BENCH = os.path.abspath(os.path.join(BUILD, "wdrift-bench"))
FLOOD_SECONDS = float(os.environ.get("T71_FLOOD_SECONDS", "60"))
N_PUB = 4
NUMEL = 1 << 20                 # f32 elements per tensor: 4 MiB messages
N_TENSORS = 4                   # per snapshot: 16 MiB
IN_FLIGHT = 12                  # snapshots a flood publisher keeps open: past limits.max_pending (8),
                                # so that it never idles: the extra ones are refused too_many and re-sent
BUDGET = 256 << 20
RCVHWM = 8                      # daemon/main.c INGEST_RCVHWM: messages ZeroMQ queues per peer

CONFIG = """\
listen:
  ingest: tcp://127.0.0.1:{port}
  control: ipc://{d}/run/control.sock
  events: ipc://{d}/run/events.sock
storage:
  dir: {d}/var
compute:
  backend: cpu
memory:
  budget: 256M
limits:
{limits}
log:
  level: notice
studies:
  - name: flood
    baseline: f0
    candidates: [f1, f2, f3]
"""


def drain_notify(dm):
    """Reads the daemon's NOTIFY_SOCKET from a thread, as systemd does: the
    daemon's sd_notify blocks once 10 datagrams (net.unix.max_dgram_qlen)
    wait unread, and it sends STATUS= every 5 s."""
    def loop():
        while dm.proc is not None and dm.proc.poll() is None:
            try:
                dm.messages.append(dm.notify.recv(4096).decode())
            except (socket.timeout, OSError):
                pass
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return th


def write_config(d, port, limits="  max_message: 64M"):
    with open(os.path.join(d, "wdrift.yaml"), "w") as f:
        f.write(CONFIG.format(d=d, port=port, limits=limits))


def rss_kib(pid, key="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class TcpPublisher(t50.Publisher):
    """harness.py's Publisher, over the daemon's tcp:// ingest endpoint."""

    def __init__(self, ctx, endpoint, run, timeout=5000):
        self.s = ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.setsockopt(zmq.RCVTIMEO, timeout)
        self.s.connect(endpoint)
        self.run = run

    def close(self):
        self.s.close()


def normal_snapshot(ctx, endpoint, run, step, deadline_s=10.0):
    """A well-behaved publisher: one small snapshot, re-sent after over_window
    as protocol.md says, until acked. Returns (reply, seconds)."""
    p = TcpPublisher(ctx, endpoint, run, timeout=2000)
    x = np.arange(1000, dtype=np.float32)
    t0 = time.time()
    last = None
    try:
        while time.time() - t0 < deadline_s:
            p.tensor(step, "w", x, "f32")
            last = p.commit(step, 1)
            if last and last.get("type") == "ack":
                break
            time.sleep(0.2)
        return last, time.time() - t0
    finally:
        p.close()


# --- the flood publisher: a process of its own (python3 t71_flood.py --flood-pub ...) ---

def flood_publisher(endpoint, run, rate, seconds, grace):
    """Pushes snapshots of N_TENSORS x NUMEL f32 at `rate` bytes/s for `seconds`,
    keeping up to IN_FLIGHT open, re-sending refused tensors and incomplete
    commits; then for up to `grace` s only finishes what is open. Prints its
    counts as one JSON line."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    payload = (np.random.default_rng(hash(run) & 0xFFFF).standard_normal(NUMEL)
               .astype(np.float32) * 0.02).tobytes()
    crc = zlib.crc32(payload)
    names = [f"layers.{i}.w" for i in range(N_TENSORS)]
    c = {"run": run, "sent_bytes": 0, "sent_msgs": 0, "send_blocked_s": 0.0, "idle_s": 0.0,
         "acks": 0, "dup_acks": 0, "errors": {}, "commits": 0}
    open_ = {}          # step -> {"todo": [names], "committed": bool, "since": names sent since the commit}
    next_step = 0
    t0 = time.time()
    t_end = t0 + seconds
    allowance = 0.0
    last = t0
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)

    def header(step, name):
        return json.dumps({"v": 1, "type": "tensor", "run": run, "step": step, "name": name,
                           "dtype": "f32", "shape": [NUMEL], "offset": 0, "count": NUMEL,
                           "total": NUMEL, "crc32": crc}).encode()

    def send(frames, nbytes):
        tb = time.time()
        while True:
            try:
                s.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                break
            except zmq.Again:       # ZeroMQ's and TCP's push-back: wait, reading replies
                drain(10)
                if time.time() > t_end + grace:
                    return False
        c["send_blocked_s"] += time.time() - tb
        c["sent_bytes"] += nbytes
        c["sent_msgs"] += 1
        return True

    def drain(timeout_ms):
        while dict(poller.poll(timeout_ms)):
            timeout_ms = 0
            r = json.loads(s.recv_multipart()[-1])
            step = r.get("step")
            if r.get("type") == "ack":
                c["acks"] += 1
                c["dup_acks"] += bool(r.get("duplicate"))
                open_.pop(step, None)
            elif r.get("type") == "error":
                code = r.get("code")
                c["errors"][code] = c["errors"].get(code, 0) + 1
                snap = open_.get(step)
                if snap is None:
                    continue
                if code in ("over_window", "too_many") and r.get("name"):
                    if r["name"] not in snap["todo"]:
                        snap["todo"].append(r["name"])
                    snap["committed"] = False
                elif code == "incomplete":
                    snap["committed"] = False
                    # "'NAME' has X of Y elements": send it again, unless that is under way
                    # (then its refusal came before, and this commit simply went too early)
                    reason = r.get("reason", "")
                    miss = reason.split("'")[1] if reason.count("'") >= 2 else None
                    if miss in names and miss not in snap["todo"] and miss not in snap["since"]:
                        snap["todo"].append(miss)
                    elif miss is None and not snap["since"]:    # "0 received": dropped, all again
                        snap["todo"] = list(names)

    while True:
        now = time.time()
        flooding = now < t_end
        if not flooding and (not open_ or now > t_end + grace):
            break
        allowance = min(allowance + (now - last) * rate, 2.0 * len(payload))
        last = now
        drain(0)
        if allowance < len(payload):
            drain(max(1, int(1000 * (len(payload) - allowance) / rate)))
            continue
        # the oldest open snapshot with something to (re)send, else a new one
        step = next((k for k in sorted(open_) if open_[k]["todo"] or not open_[k]["committed"]), None)
        if step is None and flooding and len(open_) < IN_FLIGHT:
            step = next_step
            next_step += 1
            open_[step] = {"todo": list(names), "committed": False, "since": set()}
        if step is None:
            ti = time.time()
            drain(5)
            c["idle_s"] += time.time() - ti
            continue
        snap = open_[step]
        if snap["todo"]:
            name = snap["todo"].pop(0)
            if send([header(step, name), payload], len(payload)):
                allowance -= len(payload)
                snap["since"].add(name)
        else:
            snap["committed"] = True
            snap["since"] = set()
            c["commits"] += 1
            send([json.dumps({"v": 1, "type": "commit", "run": run, "step": step,
                              "tensors": N_TENSORS}).encode()], 0)
            drain(2)
    c["open_left"] = len(open_)
    c["seconds"] = time.time() - t0
    print(json.dumps(c), flush=True)
    s.close()
    ctx.term()


# --- 1. the flood ---

def engine_gbps(tmp):
    """The CPU engine's throughput on the flood's tensor size: prepare two and
    W1 (what compute does per pair), as make bench-ingest measures it."""
    rng = np.random.default_rng(71)
    a, b = os.path.join(tmp, "a.raw"), os.path.join(tmp, "b.raw")
    (rng.standard_normal(NUMEL).astype(np.float32) * 0.02).tofile(a)
    (rng.standard_normal(NUMEL).astype(np.float32) * 0.02).tofile(b)
    r = subprocess.run([BENCH, "f32", a, b, "5"], capture_output=True, text=True, timeout=60)
    secs = json.loads(r.stdout)["seconds"]
    return 2 * NUMEL * 4 / secs / 1e9


class Sampler(threading.Thread):
    """RSS every 0.05 s, status every 0.25 s on a fresh REQ socket each time
    (as the CLI does), its latency recorded; None for no answer in 2 s."""

    def __init__(self, ctx, d, pid):
        super().__init__(daemon=True)
        self.ctx, self.d, self.pid = ctx, d, pid
        self.rss = []
        self.lat = []
        self.last_status = None
        self.stop = threading.Event()

    def run(self):
        next_status = 0.0
        while not self.stop.is_set():
            r = rss_kib(self.pid)
            if r is not None:
                self.rss.append(r)
            now = time.time()
            if now >= next_status:
                t0 = time.time()
                st = control(self.ctx, self.d, {"v": 1, "cmd": "status"}, timeout=2000)
                self.lat.append(time.time() - t0 if st and st.get("ok") else None)
                if st:
                    self.last_status = st
                next_status = now + 0.25
            time.sleep(0.05)


def working_set(ctx, tmp, endpoint, dm):
    """The daemon's RSS outside the budget when nothing floods: idle, then the
    peak while one snapshot of each flood run is stored and compared."""
    idle = rss_kib(dm.proc.pid)
    pubs = [TcpPublisher(ctx, endpoint, f"f{i}", timeout=20000) for i in range(N_PUB)]
    x = np.random.default_rng(1).standard_normal(NUMEL).astype(np.float32)
    for p in pubs:
        for k in range(N_TENSORS):
            p.tensor(1000000, f"layers.{k}.w", x, "f32", frame=NUMEL * 4)
    acks = [p.commit(1000000, N_TENSORS) for p in pubs]
    for _ in range(100):        # the comparisons finish after the acks
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        if st and st["queues"]["compute"] == 0:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    for p in pubs:
        p.close()
    return idle, rss_kib(dm.proc.pid, "VmHWM"), all(a and a.get("type") == "ack" for a in acks)


def flood(ctx):
    tmp = tempfile.mkdtemp(prefix="wdrift-t71-")
    dm = Daemon(tmp)
    pubs = []
    sampler = None
    try:
        gbps = engine_gbps(tmp)
        rate = 10 * gbps * 1e9              # bytes/s, all four together
        print(f"# engine (cpu, 1 thread, prepare 2 + W1 on {NUMEL} f32): {gbps:.3f} GB/s; "
              f"flood target 10x = {rate / 1e9:.2f} GB/s over {N_PUB} publishers")
        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        write_config(tmp, port)
        check(dm.start() is not None, f"ready: ingest on {endpoint}, memory.budget 256M")
        drain_notify(dm)
        time.sleep(0.3)
        idle, ws_peak, ws_ok = working_set(ctx, tmp, endpoint, dm)
        check(ws_ok, "one snapshot of each run acked before the flood (the working set)")
        # What the budget does not cover (daemon.md): ZeroMQ's queue, up to
        # RCVHWM messages per peer plus the one being read, and the engine's
        # working set, measured above as the peak beyond idle with 4 x 16 MiB
        # snapshots stored and compared one after another.
        msg = NUMEL * 4
        zmq_q = N_PUB * (RCVHWM + 1) * msg
        ws = max(0, ws_peak - idle) * 1024 - N_PUB * N_TENSORS * msg
        const = idle * 1024 + zmq_q + max(ws, 0)
        print(f"# idle RSS {idle / 1024:.0f} MiB; peak with one snapshot per run {ws_peak / 1024:.0f} MiB; "
              f"ZeroMQ queue bound {N_PUB} peers x ({RCVHWM}+1) x {msg >> 20} MiB = {zmq_q >> 20} MiB; "
              f"working set beyond the snapshots {max(ws, 0) >> 20} MiB")
        print(f"# constant = idle + ZeroMQ queues + working set = {const >> 20} MiB; "
              f"bound = budget {BUDGET >> 20} MiB + {const >> 20} MiB = {(BUDGET + const) >> 20} MiB")

        st0 = control(ctx, tmp, {"v": 1, "cmd": "status"})
        sampler = Sampler(ctx, tmp, dm.proc.pid)
        sampler.start()
        t0 = time.time()
        grace = 20.0
        for i in range(N_PUB):
            pubs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--flood-pub", endpoint, f"f{i}",
                 str(rate / N_PUB), str(FLOOD_SECONDS), str(grace)],
                stdout=subprocess.PIPE, text=True))
        outs = []
        for p in pubs:
            try:
                out, _ = p.communicate(timeout=FLOOD_SECONDS + grace + 30)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            try:
                outs.append(json.loads(out.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                outs.append(None)
        t_flood = time.time() - t0
        time.sleep(1.0)
        sampler.stop.set()
        sampler.join(5)

        check(all(outs), f"all {N_PUB} publishers ran and reported ({[o and o['run'] for o in outs]})")
        outs = [o for o in outs if o]
        sent = sum(o["sent_bytes"] for o in outs)
        push_s = max((o["seconds"] for o in outs), default=1.0)
        acks = sum(o["acks"] for o in outs)
        dup = sum(o["dup_acks"] for o in outs)
        idle_s = sum(o["idle_s"] for o in outs) / max(len(outs), 1)
        errs = {}
        for o in outs:
            for k, v in o["errors"].items():
                errs[k] = errs.get(k, 0) + v
        blocked = sum(o["send_blocked_s"] for o in outs) / max(len(outs), 1)
        print(f"# pushed {sent / 2**20:.0f} MiB in {push_s:.1f} s = {sent / push_s / 1e9:.3f} GB/s "
              f"(target {rate / 1e9:.2f} GB/s); each publisher blocked in send {blocked:.1f} s on average "
              f"(ZeroMQ/TCP push-back), idle {idle_s:.1f} s; {acks} snapshots acked ({dup} as duplicates); "
              f"replies refused: {errs}")
        rss = sampler.rss
        peak = max(rss) * 1024 if rss else 0
        hwm = (rss_kib(dm.proc.pid, "VmHWM") or 0) * 1024
        bound = BUDGET + const
        print(f"# daemon RSS: peak sampled {peak >> 20} MiB, VmHWM {hwm >> 20} MiB "
              f"(includes the working-set phase), {len(rss)} samples; budget {BUDGET >> 20} MiB, "
              f"constant {const >> 20} MiB, bound {bound >> 20} MiB")
        if os.environ.get("WDRIFT_SANITIZE"):
            # make check-asan: ASan keeps freed blocks in its quarantine (256 MiB by
            # default) and adds redzones and shadow, so RSS measures the sanitizer as
            # much as the daemon. make check holds the daemon to the bound.
            check(True, f"RSS stays within memory.budget + constant ({peak >> 20} vs {bound >> 20} MiB) "
                  f"# SKIP under -fsanitize={os.environ['WDRIFT_SANITIZE']}: RSS includes ASan's quarantine")
        else:
            check(rss and peak <= bound,
                  f"RSS stays within memory.budget + constant ({peak >> 20} <= {bound >> 20} MiB)")
        lat = sampler.lat
        answered = [x for x in lat if x is not None]
        ls = sorted(answered)
        p99 = ls[min(len(ls) - 1, int(0.99 * len(ls)))] if ls else float("nan")
        print(f"# status: {len(lat)} requests, {len(lat) - len(answered)} unanswered in 2 s, "
              f"latency max {max(ls, default=float('nan')) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
              f"median {ls[len(ls) // 2] * 1000 if ls else float('nan'):.0f} ms")
        # make check-asan: the sanitized daemon answers 5-7x slower (a fresh-clone CI's ASan pass saw a
        # median of 680 ms and a max of 1.48 s, where make check's were 90 and 318 ms on the same host),
        # and the sampler, waiting for each answer, asks fewer times: there every status must still be
        # answered, within the sampler's 2 s, and at least once a second
        limit, rate = (2.0, 1) if os.environ.get("WDRIFT_SANITIZE") else (1.0, 2)
        check(len(lat) >= FLOOD_SECONDS * rate and len(answered) == len(lat) and max(ls) < limit,
              f"every status answered within {limit:g} s throughout ({len(answered)}/{len(lat)}, "
              f"max {max(ls, default=float('nan')):.3f} s)")
        st = sampler.last_status or {}
        e0 = (st0 or {}).get("errors", {})
        e1 = st.get("errors", {})
        refused = {k: e1.get(k, 0) - e0.get(k, 0) for k in ("over_window", "too_many", "incomplete")}
        print(f"# status counters after the flood: refused {refused}, snapshots {st.get('snapshots')}, "
              f"memory {st.get('memory')}")
        # make check-asan: the ASan publishers and daemon may never put more than
        # max_pending snapshots of a run in the daemon at once (seen on a Zen 5 VM,
        # 2026-11-28: 0.067 GB/s pushed, no refusal): there the counts must still agree.
        pushed_back = refused["over_window"] + refused["too_many"]
        check((pushed_back > 0 or bool(os.environ.get("WDRIFT_SANITIZE")))
              and pushed_back == errs.get("over_window", 0) + errs.get("too_many", 0),
              f"push-back shows in status: over_window/too_many counted, as many as the publishers got "
              f"({refused}, publishers {errs})")
        check(acks > 0 and all(o["open_left"] == 0 for o in outs),
              f"the publishers got acks during the flood and finished every snapshot they opened "
              f"({acks} acks, left open {[o['open_left'] for o in outs]})")
        after = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(after and after["snapshots"]["pending"] == 0 and after["memory"]["reserved"] == 0,
              f"nothing pending, nothing reserved once the publishers are done "
              f"({after and after['snapshots']['pending']}, {after and after['memory']})")
        a, secs = normal_snapshot(ctx, endpoint, "after", 1)
        check(a and a.get("type") == "ack", f"after the flood, a normal snapshot is acked ({a}, {secs:.2f} s)")
        t1 = time.time()
        rc = dm.stop(timeout=15)
        print(f"# flood phase {t_flood:.1f} s; SIGTERM to exit {time.time() - t1:.2f} s")
        check(rc == 0, f"SIGTERM after the flood: exit {rc}")
    finally:
        if sampler:
            sampler.stop.set()
        for p in pubs:
            if p.poll() is None:
                p.kill()
                p.wait()
        teardown(dm, tmp)


# --- 2. idle connections ---

def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)


def idle_connections(ctx):
    tmp = tempfile.mkdtemp(prefix="wdrift-t71-")
    dm = Daemon(tmp)
    socks = []
    try:
        was, now = raise_nofile(2048)
        print(f"# RLIMIT_NOFILE soft {was} -> {now[0]} (hard {now[1]}); the daemon inherits it "
              f"(systemd sets LimitNOFILE=65536)")
        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        write_config(tmp, port)
        check(dm.start() is not None, "ready for the idle-connection test")
        drain_notify(dm)
        greeting = b"\xff" + b"\0" * 8 + b"\x7f\x03"   # ZMTP 3 signature and major version, then silence
        for i in range(500):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 2:
                s.sendall(greeting)
            socks.append(s)
        time.sleep(0.5)
        fds = len(os.listdir(f"/proc/{dm.proc.pid}/fd"))
        a, secs = normal_snapshot(ctx, endpoint, "real", 1, deadline_s=10)
        print(f"# 500 idle connections (250 silent, 250 with half a greeting): daemon holds {fds} fds; "
              f"a real snapshot acked in {secs * 1000:.0f} ms")
        check(a and a.get("type") == "ack" and secs < 2.0,
              f"500 idle connections: a real publisher's snapshot is acked promptly ({secs:.2f} s)")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"}, timeout=1000)
        check(st and st["ok"], "and status answers")
        for s in socks:
            s.close()
        socks = []
        check(dm.stop() == 0, "SIGTERM with idle connections closed: exit 0")
    finally:
        for s in socks:
            s.close()
        teardown(dm, tmp)


# --- 3. every configurable limit ---

def limits(ctx):
    tmp = tempfile.mkdtemp(prefix="wdrift-t71-")
    dm = Daemon(tmp)
    try:
        port = free_port()
        endpoint = f"tcp://127.0.0.1:{port}"
        write_config(tmp, port, limits="  max_message: 64K\n  max_name: 32\n  max_dims: 3\n"
                     "  max_tensors: 2\n  max_runs: 2\n  max_pending: 2")
        check(dm.start() is not None, "ready with small limits (max_message 64K, max_name 32, "
              "max_dims 3, max_tensors 2, max_runs 2, max_pending 2)")
        drain_notify(dm)
        x = np.arange(16, dtype=np.float32)
        p = TcpPublisher(ctx, endpoint, "a")
        st0 = control(ctx, tmp, {"v": 1, "cmd": "status"})
        cases = [
            ("max_message", lambda: p.tensor(1, "big", np.zeros(16385, np.float32), "f32"), "too_large", "count"),
            ("max_name (tensor)", lambda: p.tensor(1, "n" * 33, x, "f32"), "bad_field", "name"),
            ("max_name (run)", lambda: p.send_raw([json.dumps({"v": 1, "type": "hello", "run": "r" * 33})
                                                   .encode()]), "bad_field", "run"),
            ("max_dims", lambda: p.tensor(1, "d", x, "f32", shape=[2, 2, 2, 2]), "bad_field", "shape"),
            ("max_tensors", lambda: [p.tensor(1, f"t{k}", x, "f32") for k in range(3)], "too_many", "name"),
            ("max_pending", lambda: [p.tensor(s, "w", x, "f32") for s in (2, 3)], "too_many", "step"),
            ("max_runs", lambda: run_b() or p2.tensor(1, "w", x, "f32"), "too_many", "run"),
        ]
        pb = TcpPublisher(ctx, endpoint, "b")
        p2 = TcpPublisher(ctx, endpoint, "c")

        def run_b():
            """Run b takes the second slot; its pong says the daemon has it first."""
            pb.tensor(1, "w", x, "f32")
            pb.send_raw([b'{"v":1,"type":"ping"}'])
            pb.recv()
        counts = {}
        for what, send, code, field in cases:
            send()
            e = (p2 if what == "max_runs" else p).recv()
            counts[code] = counts.get(code, 0) + 1
            check(e and e["type"] == "error" and e["code"] == code and e["field"] == field,
                  f"limits.{what}: error {code}/{field} ({e and (e['code'], e['field'], e['reason'])})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        got = {k: st["errors"][k] - st0["errors"][k] for k in counts} if st else None
        check(got == counts, f"each refusal is counted by its code in status ({got}, expected {counts})")
        # still serving: run a's pending snapshot 1 (t0, t1) commits; the limits hold no residue
        a = p.commit(1, 2)
        check(a and a["type"] == "ack", f"after every limit, a snapshot is still acked ({a})")
        check(dm.proc.poll() is None and dm.stop() == 0, "the daemon served on; SIGTERM: exit 0")
    finally:
        teardown(dm, tmp, None)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--flood-pub":
        ep, run, rate, secs, grace = sys.argv[2:7]
        flood_publisher(ep, run, float(rate), float(secs), float(grace))
        return 0
    for path in (WDRIFTD, BENCH):
        if not os.path.exists(path):
            print(f"not ok 1 - {path} is not built")
            return 1
    t0 = time.time()
    ctx = zmq.Context()
    try:
        limits(ctx)
        idle_connections(ctx)
        flood(ctx)
    finally:
        ctx.destroy(linger=0)
    print(f"# t71 took {time.time() - t0:.0f} s on {os.cpu_count()} cpus")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
