#!/usr/bin/env python3
"""t106_listen_hosts.py: what listen.* may name, and what a wrong one says.

A trial found three things about the daemon's endpoints:
- tcp://[::1]:PORT passed the config check and the daemon could not bind
  it ("No such device"): ZeroMQ refuses IPv6 hosts unless a socket is told
  otherwise. Now the daemon binds it, and the CLI and a Python publisher
  reach it there.
- A host that is no address of the machine said only "No such device";
  now the line names the key, the config file, and what it means.
- An ipc:// path under a directory that does not exist made that directory
  in silence (a typo made a tree); now a notice says what it created.
- An ipc:// path that named a regular file had ZeroMQ delete the file and
  bind a socket there, in silence (a typo in a path lost the user's file);
  one that named a directory said "another process listens there". Now the
  daemon does not start, and says what the path is; the file is kept.
A real wdriftd per case, real ZeroMQ sockets, a real Python publisher
process; every daemon stopped by pid, the temp dir removed, also on failure.
"""
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CONFIG, Daemon, check, package_env, summary, teardown  # noqa: E402

PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

PUBLISH = r'''
import sys, numpy as np, wdrift
pub = wdrift.Publisher(sys.argv[1], "base", stall_warning=None)
pub.publish(1, {"w": np.arange(100, dtype=np.float32)})
print("flushed", pub.flush(20), "acked", pub.stats()["acked"])
pub.close(5)
'''


def ipv6_port():
    """A TCP port on [::1] that nothing had bound a moment ago; None without IPv6 loopback."""
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
    except OSError:
        return None
    port = s.getsockname()[1]
    s.close()
    return port


def with_listen(d, ingest=None, control=None, events=None, insecure=False):
    """The test config with some listen.* replaced; insecure: a network address without CURVE allowed."""
    text = CONFIG.format(d=d, extra="", level="info") + ("auth:\n  allow_insecure: true\n" if insecure else "")
    for key, ep in (("ingest", ingest), ("control", control), ("events", events)):
        if ep:
            text = text.replace(f"  {key}: ipc://{d}/run/{key}.sock", f'  {key}: "{ep}"')
    path = os.path.join(d, "wdrift.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t106-")
    dm = Daemon(tmp)
    try:
        ports = [ipv6_port() for _ in range(3)]
        if None in ports:
            print("# skip: no IPv6 loopback here")
        else:
            eps = [f"tcp://[::1]:{p}" for p in ports]
            cfg = with_listen(tmp, *eps)
            check(dm.start() is not None, "listen.* on tcp://[::1]: the daemon binds them", dm.log_text()[-800:])
            r = subprocess.run([PYTHON, "-c", PUBLISH, eps[0]], env=package_env(), capture_output=True, text=True,
                               timeout=60)
            check(r.returncode == 0 and "flushed True acked 1" in r.stdout,
                  "a Python publisher reaches the ingest socket over IPv6: acked", r.stdout + r.stderr)
            r = subprocess.run([WDRIFT, "runs", "-c", cfg], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0 and "base" in r.stdout, "wdrift runs reaches the control socket over IPv6",
                  r.stdout + r.stderr)
            check(dm.stop() == 0, "SIGTERM: exit 0")

        # a host that is no address of this machine (TEST-NET-1, never assigned)
        with_listen(tmp, ingest="tcp://192.0.2.1:5555", insecure=True)
        check(dm.start() is None, "listen.ingest on an address the machine lacks: the daemon does not start")
        lines = [x for x in dm.log_text().splitlines() if "cannot bind the ingest socket" in x]
        check(lines and "(listen.ingest of " in lines[-1] and "wdrift.yaml)" in lines[-1]
              and "the host is no address of this machine" in lines[-1],
              "the line names the key, the file and what the error means", lines[-1:])
        dm.stop()

        # an ipc:// path under directories that are not there: made, and said
        deep = os.path.join(tmp, "no", "such")
        with_listen(tmp, events=f"ipc://{deep}/events.sock")
        check(dm.start() is not None, "listen.events under a missing directory: ready")
        said = [x for x in dm.log_text().splitlines() if "events: created" in x]
        check(os.path.isdir(deep) and said and f"created 2 directories for '{deep}/events.sock' (listen.events)"
              in said[-1], "the directories it made are said, with the key", said[-1:])
        check(dm.stop() == 0, "SIGTERM: exit 0")

        # an ipc:// path that is a file or a directory of the user's: kept, and said
        kept = os.path.join(tmp, "notes.txt")
        with open(kept, "w") as f:
            f.write("the user's own\n")
        os.makedirs(os.path.join(tmp, "adir"))
        for key, path, what in (("ingest", kept, "a regular file"),
                                ("control", os.path.join(tmp, "adir"), "a directory")):
            with_listen(tmp, **{key: f"ipc://{path}"})
            check(dm.start() is None, f"listen.{key} on {what}: the daemon does not start")
            lines = [x for x in dm.log_text().splitlines() if f"cannot bind the {key} socket" in x]
            check(lines and f"'{path}' is {what}, not a socket" in lines[-1] and f"(listen.{key} of " in lines[-1]
                  and "another process listens" not in lines[-1],
                  f"the line says the path is {what}, with the key", lines[-1:])
            dm.stop()
        check(os.path.isfile(kept) and open(kept).read() == "the user's own\n",
              "the file is still there, unchanged")
        check(os.path.isdir(os.path.join(tmp, "adir")), "so is the directory")
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
