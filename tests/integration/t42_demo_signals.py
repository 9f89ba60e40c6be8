#!/usr/bin/env python3
"""t42_demo_signals.py: `make demo`'s script stops the wdriftd it started,
by its pid, however the script ends: the training fails, Ctrl-C (SIGINT to
the terminal's process group), the terminal closes (SIGHUP to the group).
The exit status says so: the training's on failure, 128 + the signal's
number on a signal. The training is a stand-in (PYTHON is a shell script
that sleeps or fails), so this needs no torch."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

BUILD = os.environ.get("BUILD", "build")


def alive(pid):
    """pid is a live wdriftd (not a zombie, not a reused pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return state != "Z" and b"wdriftd" in cmd


def start(tmp, name, train):
    """The demo script in its own session, PYTHON a stand-in; returns (proc, daemon pid)."""
    fake = os.path.join(tmp, f"{name}.sh")
    with open(fake, "w") as f:
        f.write(f"#!/bin/sh\necho training\n{train}\n")
    os.chmod(fake, 0o755)
    env = dict(os.environ, BUILD=BUILD, PYTHON=fake, DEMO_DIR=os.path.join(tmp, name),
               DEMO_REPORT=os.path.join(tmp, f"{name}.html"))
    p = subprocess.Popen(["sh", "scripts/demo.sh"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    pid, out = None, ""
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        out += line
        if "is up on" in line:
            pid = int(line.split("(pid ")[1].split(")")[0])
        if line.strip() == "training":
            break
    return p, pid, out


def finish(p, pid, out):
    try:
        rest, _ = p.communicate(timeout=30)
        out += rest
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        out += "(the script did not exit within 30 s)"
    deadline = time.time() + 10
    while pid and alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    left = pid is not None and alive(pid)
    if left:
        os.kill(pid, signal.SIGKILL)
    return out, left


def main():
    if not os.access(os.path.join(BUILD, "wdriftd"), os.X_OK):
        print(f"not ok 1 - {BUILD}/wdriftd is built")
        return 1
    tmp = tempfile.mkdtemp(prefix="wdrift-t42-")
    try:
        p, pid, out = start(tmp, "fails", "exit 7")
        out, left = finish(p, pid, out)
        check(pid is not None, "the script starts wdriftd", out)
        check(not left, "a failed training: the daemon is stopped", out)
        check(p.returncode == 7, "a failed training: the script exits with its status (7)",
              f"exit {p.returncode}\n{out}")

        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            p, pid, out = start(tmp, sig.name, "exec sleep 60")
            check(pid is not None, f"{sig.name}: the script starts wdriftd", out)
            time.sleep(0.3)
            os.killpg(p.pid, sig)   # as the terminal does: the whole group
            out, left = finish(p, pid, out)
            check(not left, f"{sig.name} to the process group: the daemon is stopped", out)
            check(p.returncode == 128 + sig, f"{sig.name}: the script exits {128 + sig}",
                  f"exit {p.returncode}\n{out}")

        # DEMO_DIR pointing at somebody's files: refused, nothing deleted
        theirs = os.path.join(tmp, "theirs")
        os.makedirs(theirs)
        with open(os.path.join(theirs, "keep.txt"), "w") as f:
            f.write("mine")
        env = dict(os.environ, BUILD=BUILD, PYTHON="/bin/false", DEMO_DIR=theirs,
                   DEMO_REPORT=os.path.join(tmp, "theirs.html"))
        r = subprocess.run(["sh", "scripts/demo.sh"], env=env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "not a previous demo" in r.stderr,
              "a non-empty DEMO_DIR that is not a demo's is refused", r.stdout + r.stderr)
        check(os.path.exists(os.path.join(theirs, "keep.txt")), "and its files are untouched")
        # a previous demo's directory is emptied and reused
        p, pid, out = start(tmp, "fails", "exit 7")
        out, left = finish(p, pid, out)
        check(pid is not None and not left and p.returncode == 7,
              "a previous demo's DEMO_DIR is emptied and reused", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
