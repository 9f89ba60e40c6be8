#!/usr/bin/env python3
"""t95_second_daemon.py: a second wdriftd on the same ipc:// sockets is refused.

A new user's trial: with wdriftd running, `cd /tmp && wdriftd -c
/srv/wd/wdrift.yaml` started a second daemon. Its relative storage.dir
named another directory, so the storage.dir lock did not stop it, and
ZeroMQ's bind replaced the first daemon's socket files: the snapshots sent
next went to the second daemon's storage, and once it stopped (removing
its files), the first one ran on with no socket to reach it, and nothing
said so. Now a daemon whose listen.* socket file has a process listening
on it refuses to start, at once, naming the endpoint and its own
storage.dir, and makes nothing (no storage.dir is left behind). The first
daemon still answers. A socket file that nothing listens on (a daemon
killed with SIGKILL left it) is taken, as before. `status` names the
daemon's storage.dir, absolute (the trial's daemon from the wrong directory
showed 0 runs with nothing to say why). Real daemons, stopped
by pid; the temp dir removed, also on failure.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, check  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
WDRIFT = os.path.abspath(os.path.join(BUILD, "wdrift"))


def status(cfg):
    return subprocess.run([WDRIFT, "status", "-c", cfg], capture_output=True, text=True, timeout=60)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t95-")
    first = Daemon(tmp)
    second = None
    try:
        cfg = first.write_config()
        with open(cfg) as f:
            text = f.read()
        # the same config, storage.dir relative: the daemon started from elsewhere
        rel = os.path.join(tmp, "rel.yaml")
        with open(rel, "w") as f:
            f.write(text.replace(f"dir: {tmp}/var", "dir: ./var"))
        elsewhere = os.path.join(tmp, "elsewhere")
        os.makedirs(elsewhere)
        check(first.start() is not None, "the first daemon starts")
        t = time.monotonic()
        r = subprocess.run([harness.WDRIFTD, "-c", rel], cwd=elsewhere, capture_output=True, text=True,
                           timeout=30)
        dt = time.monotonic() - t
        check(r.returncode != 0 and f"listen.ingest: a process (pid {first.proc.pid}) already listens on "
              f"ipc://{tmp}/run/ingest.sock" in r.stderr and f"storage.dir is {elsewhere}/var;" in r.stderr and dt < 5,
              f"a second daemon on the same sockets: refused in {dt:.1f} s, naming the endpoint and its "
              f"storage.dir (exit {r.returncode})", r.stderr)
        check(not os.path.exists(os.path.join(elsewhere, "var")), "... and it made no storage.dir")
        r = subprocess.run([harness.WDRIFTD, "-c", cfg], capture_output=True, text=True, timeout=30)
        check(r.returncode != 0 and f"another wdriftd (pid {first.proc.pid}, from its lock file) uses this "
              "storage.dir" in r.stderr and "already listens" not in r.stderr,
              "a second daemon on the same storage.dir gets the lock's words, with the first's pid (a trial "
              "had to find it), not a guess", r.stderr)
        with open(os.path.join(tmp, "var", "lock")) as f:
            lock = f.read()
        check(lock == f"running {first.proc.pid}\n",
              "... and leaves the lock file as the first daemon wrote it (a review: it wrote 'stopped', and a "
              "SIGKILL of the first would then go unsaid at the next start)", lock)
        s = status(cfg)
        check(s.returncode == 0 and f"storage    {tmp}/var\n" in s.stdout,
              "the first daemon still answers, and status names its storage.dir", s.stdout + s.stderr)
        check(first.stop(signal.SIGKILL) is not None, "the first daemon killed with SIGKILL")
        check(os.path.exists(os.path.join(tmp, "run", "ingest.sock")), "... leaving its socket files")
        second = Daemon(elsewhere)
        second.proc = subprocess.Popen([harness.WDRIFTD, "-c", rel], cwd=elsewhere,
                                       env=dict(os.environ, NOTIFY_SOCKET=second.notify_path),
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ready = second.wait_notify("READY=1", 10)
        check(ready is not None, "a daemon on the socket files a killed one left starts")
        s = status(cfg)
        check(s.returncode == 0 and f"storage    {elsewhere}/var\n" in s.stdout,
              "... and answers there; status says its storage.dir is the other one", s.stdout + s.stderr)
        second.stop()
        pid = first.proc.pid
        check(first.start() is not None and f"the wdriftd before this one on this storage.dir (pid {pid}, "
              in first.log_text(), "a daemon on the killed one's storage.dir says it did not stop cleanly",
              first.log_text()[-1000:])
    finally:
        if second is not None and second.proc is not None:
            second.stop()
        harness.teardown(first, tmp)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
