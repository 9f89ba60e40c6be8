#!/usr/bin/env python3
"""t77_fd_limit.py: the daemon's file descriptors (docs/reliability.md, "File descriptors").

Red team t27: every ingest connection takes a descriptor, and libzmq 4.3
cannot refuse one: when they run out it aborts the daemon (SIGABRT, "Too
many open files (src/ipc_listener.cpp:325)"). The daemon raises its soft
RLIMIT_NOFILE to the hard limit at start-up and says so, and warns as the
descriptors in use approach the limit: once at 80%, once more at each
further tenth (not per connection), and once when they are back under
half. Against the real daemon started with soft 128, hard 256, and raw
DEALER connections: the limit is raised and logged; connections to ~85%
give one warning naming the limit, to ~93% one more; status is answered
throughout; closing them all gives the notice; the daemon never aborts.

The daemon is stopped by pid, the sockets closed and the temp dir removed,
also on failure.
"""
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as t50  # noqa: E402
from harness import Daemon, check, summary, teardown  # noqa: E402

SOFT, HARD = 128, 256


class LimitedDaemon(Daemon):
    """Daemon.start, with RLIMIT_NOFILE set in the child only."""

    def start(self, *args, env_extra=None):
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path, **(env_extra or {}))
        self.log = open(os.path.join(self.d, "daemon.log"), "ab")
        self.proc = subprocess.Popen(
            [t50.WDRIFTD, "-c", os.path.join(self.d, "wdrift.yaml"), *args], env=env,
            stdout=self.log, stderr=self.log,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD)))
        return self.wait_notify("READY=1", 10)


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def soft_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        line = next(x for x in f if x.startswith("Max open files"))
    return int(line.split()[3])


def status(ctx, d):
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(f"ipc://{d}/run/control.sock")
        s.send(json.dumps({"v": 1, "cmd": "status"}).encode())
        return json.loads(s.recv()) if s.poll(5000) else None
    finally:
        s.close()


def wait_for(cond, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def warnings(dm):
    return [x for x in dm.log_text().splitlines() if "file descriptors in use" in x]


def main():
    tmp = tempfile.mkdtemp(prefix="wd-t77-")
    dm = LimitedDaemon(tmp)
    ctx = zmq.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    ctx.set(zmq.MAX_SOCKETS, 4096)
    socks = []
    try:
        dm.write_config()
        check(dm.start() is not None, f"the daemon starts under a descriptor limit of {SOFT} "
              f"(hard {HARD})", dm.log_text())
        pid = dm.proc.pid
        log = dm.log_text()
        check(soft_limit(pid) == HARD and f"open files: {HARD}, raised from {SOFT} (the most "
              f"connections ZeroMQ can accept before it aborts; LimitNOFILE in the unit)" in log,
              "start-up raises the soft limit to the hard one, and says so", log[-2000:])
        ingest = f"ipc://{tmp}/run/ingest.sock"

        def connect_until(n_fds):
            """Connections until the daemon holds n_fds descriptors."""
            while fds(pid) < n_fds and len(socks) < HARD:
                before = fds(pid)
                s = ctx.socket(zmq.DEALER)
                s.connect(ingest)
                socks.append(s)
                wait_for(lambda: fds(pid) > before, 2.0)	# accepted: one more
            return fds(pid)

        base = fds(pid)
        got = connect_until(int(HARD * 0.85))
        check(wait_for(lambda: len(warnings(dm)) >= 1, 5.0) and len(warnings(dm)) == 1,
              f"{len(socks)} connections, {got} of {HARD} descriptors (from {base}): one warning",
              "\n".join(warnings(dm)) or dm.log_text()[-2000:])
        w = (warnings(dm) or [""])[0]
        m = re.search(r"ingest: (\d+) connections open, (\d+) of the daemon's (\d+) file descriptors "
                      r"in use \((\d+)%\): libzmq aborts the daemon when descriptors run out", w)
        check(m and int(m.group(3)) == HARD and 80 <= int(m.group(4)) < 90 and
              int(m.group(1)) <= len(socks) and int(m.group(2)) <= got and "warning" in w,
              "it names the connections, the descriptors, the limit and the abort", w)
        r = status(ctx, tmp)
        check(r and r.get("ok"), "status is answered at 85%", r)

        got = connect_until(int(HARD * 0.93))
        check(wait_for(lambda: len(warnings(dm)) >= 2, 5.0) and len(warnings(dm)) == 2 and
              "(9" in warnings(dm)[1],
              f"{len(socks)} connections, {got} descriptors: one more warning, at the next tenth",
              "\n".join(warnings(dm)))
        r = status(ctx, tmp)
        check(r and r.get("ok") and dm.proc.poll() is None, "status is answered at 93%", r)

        for s in socks:
            s.close()
        socks.clear()
        check(wait_for(lambda: any("back under half" in x for x in warnings(dm)), 10.0),
              "closing them all: a notice that they are back under half",
              "\n".join(warnings(dm)) or dm.log_text()[-2000:])
        calm = [x for x in warnings(dm) if "back under half" in x]
        check(len(calm) == 1 and "notice" in calm[0] and len(warnings(dm)) == 3,
              "one notice, and no more warnings", "\n".join(warnings(dm)))
        r = status(ctx, tmp)
        check(r and r.get("ok") and dm.proc.poll() is None and "Too many open files" not in
              dm.log_text(), "the daemon is alive and answers status", dm.log_text()[-2000:])
    finally:
        for s in socks:
            s.close()
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
