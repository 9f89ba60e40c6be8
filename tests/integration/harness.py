#!/usr/bin/env python3
"""harness.py: what the integration tests share to run wdriftd as a user does.

- WDRIFTD, the daemon under test ($BUILD/wdriftd);
- check() and summary(): TAP lines and the closing "N passed, N failed"
  line tests/run.sh reads;
- CONFIG and Daemon: a config in a temp dir on ipc:// endpoints, and the
  real daemon started with a real NOTIFY_SOCKET listener, stopped by pid;
- bench_config(): the config text the benchmarks (bench/*.py) start wdriftd with;
- package_env(): the environment of a child process that imports the package;
- teardown(): the daemon stopped and the temp dir removed, also on failure;
- control(), subscribe(): the control socket (REQ) and the events (SUB);
- Publisher: protocol v1 (docs/protocol.md) spoken with a raw DEALER, so
  that a test can send what the library never would;
- bf16(): fp32 rounded to bf16 codes, ties to even.
Not a test itself (tests/run.sh runs t*.py).
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib

import h5py
import numpy as np
import zmq

WDRIFTD = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdriftd"))
WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")      # the one with numpy, zmq, torch
n_ok = n_fail = 0


def check(cond, what, detail=""):
    """One TAP line; on failure, the last 30 lines of detail as comments."""
    global n_ok, n_fail
    if cond:
        n_ok += 1
        print(f"ok {n_ok + n_fail} - {what}")
    else:
        n_fail += 1
        print(f"not ok {n_ok + n_fail} - {what}")
        for line in str(detail).splitlines()[-30:]:
            print(f"#   {line}")
    sys.stdout.flush()
    return cond


CONFIG = """\
listen:
  ingest: ipc://{d}/run/ingest.sock
  control: ipc://{d}/run/control.sock
  events: ipc://{d}/run/events.sock
storage:
  dir: {d}/var
compute:
  backend: cpu
memory:
  budget: 256M
limits:
  max_message: 64M
log:
  level: {level}
studies:
  - name: fa
    baseline: base
    candidates: [fa]
    proxies: {{fp16: lowprec}}
{extra}"""


def package_env(**extra):
    """The environment of a child process that imports the Python package: python/
    first on PYTHONPATH, run.sh's kept after it (under check-asan it brings the ASan
    runtime, tests/asan), and WDRIFT_LIB the library under test."""
    build = os.environ.get("BUILD", "build")
    pydir = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    return dict(os.environ, PYTHONPATH=pydir + os.pathsep + os.environ.get("PYTHONPATH", ""),
                WDRIFT_LIB=os.path.abspath(os.path.join(build, "libwdrift.so")), **extra)


def free_port():
    """A TCP port on 127.0.0.1 that nothing had bound a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, d):
        self.d = d
        self.proc = None
        self.notify_path = os.path.join(d, "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.settimeout(0.2)
        self.messages = []

    def write_config(self, extra="", level="info", limits=""):
        """The test config (CONFIG); limits: more keys of its limits section, "pending_timeout: 20"
        (one per line). Written again over the last one: a test that restarts or reloads calls it again."""
        path = os.path.join(self.d, "wdrift.yaml")
        more = "".join(f"  {line}\n" for line in limits.splitlines())
        with open(path, "w") as f:
            f.write(CONFIG.format(d=self.d, extra=extra, level=level).replace("limits:\n", "limits:\n" + more, 1))
        return path

    def start(self, *args, env_extra=None):
        # what the last daemon told (a reload's READY=1) must not pass for this one's
        self.messages = []
        self.notify.setblocking(False)
        try:
            while self.notify.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self.notify.settimeout(0.2)
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path, **(env_extra or {}))
        self.log = open(os.path.join(self.d, "daemon.log"), "ab")
        self.proc = subprocess.Popen([WDRIFTD, "-c", os.path.join(self.d, "wdrift.yaml"), *args],
                                     env=env, stdout=self.log, stderr=self.log)
        return self.wait_notify("READY=1", 10)

    def wait_notify(self, what, timeout):
        end = time.time() + timeout
        while time.time() < end:
            for i, m in enumerate(self.messages):
                if what in m:
                    del self.messages[: i + 1]
                    return m
            try:
                self.messages.append(self.notify.recv(4096).decode())
            except socket.timeout:
                if self.proc and self.proc.poll() is not None:
                    return None
        return None

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def log_text(self):
        with open(os.path.join(self.d, "daemon.log"), "rb") as f:
            return f.read().decode(errors="replace")


BENCH_CONFIG = """\
listen:
  ingest: ipc://{d}/ingest.sock
  control: ipc://{d}/control.sock
  events: ipc://{d}/events.sock
storage:
  dir: {d}/var
compute:
  backend: cpu
memory:
  budget: {budget}
limits:
{limits}log:
  level: notice
studies:
  - name: {name}
    baseline: {baseline}
    candidates: [{candidates}]
{proxies}"""


def bench_config(d, budget, limits, study, baseline, candidates, proxies=None):
    """The config text of a benchmark's wdriftd (bench/*.py): the endpoints in d itself, storage in d/var,
    the CPU engine, log level notice; the memory budget ("1G"), limits ({key: value}) and the one study
    (its name, baseline, candidates and {label: run} proxies) as the benchmark needs."""
    return BENCH_CONFIG.format(
        d=d, budget=budget, limits="".join(f"  {k}: {v}\n" for k, v in limits.items()),
        name=study, baseline=baseline, candidates=", ".join(candidates),
        proxies=f"    proxies: {{{', '.join(f'{k}: {v}' for k, v in proxies.items())}}}\n" if proxies else "")


def stop_procs(procs):
    """Kills and reaps, by pid, every process of procs still running (a test's ranks and jobs)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def teardown(dm, tmp, ctx=None):
    """Stops the daemon by pid, shows its log when a check failed, removes tmp."""
    dm.stop(signal.SIGKILL)
    if ctx is not None:
        ctx.destroy(linger=0)
    if n_fail:
        try:
            print("# daemon log:\n# " + dm.log_text()[-6000:].replace("\n", "\n# "))
        except OSError:
            pass
    subprocess.run(["rm", "-rf", tmp])


def summary():
    """The closing line tests/run.sh reads, and the exit status."""
    print(f"# {n_ok} passed, {n_fail} failed")
    return 1 if n_fail else 0


def subscribe(ctx, d, prefix, timeout=200):
    """A SUB socket on the daemon's events, given time to reach the PUB side."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, prefix)
    sub.setsockopt(zmq.RCVTIMEO, timeout)
    sub.connect(f"ipc://{d}/run/events.sock")
    time.sleep(0.3)
    return sub


def control(ctx, d, request, timeout=2000):
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout)
    s.connect(f"ipc://{d}/run/control.sock")
    s.send_string(json.dumps(request))
    try:
        return json.loads(s.recv())
    except zmq.Again:
        return None
    finally:
        s.close()


class Publisher:
    def __init__(self, ctx, d, run, connect=True):
        """connect=False: connect() later (a monitor attached after connecting may miss its events)."""
        self.s = ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.setsockopt(zmq.RCVTIMEO, 5000)
        self.endpoint = f"ipc://{d}/run/ingest.sock"
        if connect:
            self.connect()
        self.run = run

    def connect(self):
        self.s.connect(self.endpoint)

    def send_raw(self, frames):
        self.s.send_multipart(frames)

    def recv(self):
        """The next reply; a pong with a notice that came unasked (protocol.md, "ping": a run's tensor names
        differ from its baseline's, a rank committed twice) is kept in self.notices and skipped, as the
        library does, not taken for the reply awaited (t87 took one for its ack)."""
        while True:
            try:
                m = json.loads(self.s.recv())
            except zmq.Again:
                return None
            if m.get("type") == "pong" and m.get("notice"):
                self.notices = getattr(self, "notices", []) + [m["notice"]]
                continue
            return m

    def hello(self):
        self.send_raw([json.dumps({"v": 1, "type": "hello", "run": self.run}).encode()])
        return self.recv()

    def tensor(self, step, name, arr, dtype, offset=0, total=None, shape=None, frame=1 << 20, **over):
        payload = arr.tobytes()
        total = arr.size if total is None else total
        h = {"v": 1, "type": "tensor", "run": self.run, "step": step, "name": name, "dtype": dtype,
             "shape": list(shape or [total]), "offset": offset, "count": arr.size, "total": total,
             "crc32": zlib.crc32(payload)}
        h.update(over)
        frames = [json.dumps(h).encode()] + [payload[i:i + frame] for i in range(0, len(payload), frame)]
        self.send_raw(frames)

    def commit(self, step, n):
        self.send_raw([json.dumps({"v": 1, "type": "commit", "run": self.run, "step": step,
                                   "tensors": n}).encode()])
        return self.recv()


def bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
