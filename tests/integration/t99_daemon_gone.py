#!/usr/bin/env python3
"""t99_daemon_gone.py: a daemon that stops under a running job is said at once, once.

A new user's trial stopped wdriftd (SIGTERM) while its job published a
snapshot a second. The job said nothing for the ack timeout (30 s), its
stats() said "connected" all that while, and then two lines came: the
stall warning, and a second reason ("no socket at ...") a few seconds
later. Now the publisher reads its connection's end from the socket's
monitor: the job says once, within a second or two, that wdriftd closed
the connection, stats() says not connected, the probe of the missing
socket adds no second reason, and when the daemon is back the snapshots
that waited go, all acked, with one line saying so. The same when the
job is idle between snapshots (the monitor is read while it waits), and
after SIGKILL (the kernel closes the socket too). A daemon back while the
job is idle is seen then (stats() connected again), not at the next
snapshot.
Real daemon processes, real publisher processes; stopped by pid, the temp
dir removed, also on failure.
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, summary, teardown  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
PYDIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))

# Publishes `steps` snapshots, one each `every` s (the first `quick` 0.5 s apart), then waits until every one is acked
# (or 60 s); prints a status line per second: "t connected acked queued", to stdout.
JOB = r'''
import sys, threading, time, numpy as np, wdrift
ep, steps, every, quick = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
pub = wdrift.Publisher(ep, "lowprec")
t0 = time.monotonic()
done = threading.Event()
def watch():
    while not done.is_set():
        s = pub.stats()
        print("%.1f %d %d %d" % (time.monotonic() - t0, s["connected"], s["acked"], s["queued"]), flush=True)
        time.sleep(0.25)
threading.Thread(target=watch, daemon=True).start()
for step in range(1, steps + 1):
    pub.publish(step, {"w": np.full(4, step, np.float32)})
    time.sleep(0.5 if step < quick else every)
end = time.monotonic() + 60
while pub.stats()["acked"] < steps and time.monotonic() < end:
    time.sleep(0.1)
done.set()
time.sleep(0.3)
print("acked", pub.stats()["acked"], "diagnosis", pub.diagnosis, flush=True)
pub.close(5)
'''


class Job:
    """A publisher process; its stdout and stderr read as they come, with their times."""

    def __init__(self, ep, steps, every, quick=0):
        env = dict(os.environ, PYTHONPATH=PYDIR, WDRIFT_LIB=os.path.abspath(os.path.join(BUILD, "libwdrift.so")))
        self.t0 = time.monotonic()
        self.out, self.err = [], []
        self.proc = subprocess.Popen([PYTHON, "-c", JOB, ep, str(steps), str(every), str(quick)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.readers = [threading.Thread(target=self.read, args=(self.proc.stdout, self.out), daemon=True),
                        threading.Thread(target=self.read, args=(self.proc.stderr, self.err), daemon=True)]
        for r in self.readers:
            r.start()

    def read(self, f, into):
        for line in f:
            into.append((time.monotonic() - self.t0, line.rstrip("\n")))

    def now(self):
        return time.monotonic() - self.t0

    def wait_out(self, pred, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for t, line in list(self.out):
                if pred(line):
                    return t
            time.sleep(0.05)
        return None

    def status_after(self, t):
        """(connected, acked, queued) lines printed after job time t."""
        rows = []
        for when, line in list(self.out):
            parts = line.split()
            if when >= t and len(parts) == 4 and parts[0][0].isdigit():
                rows.append((when, int(parts[1]), int(parts[2]), int(parts[3])))
        return rows

    def finish(self, timeout=90):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for r in self.readers:
            r.join(5)
        return self.proc.returncode

    def lines(self, *words):
        return [(t, line) for t, line in self.err if all(w in line for w in words)]


def case(tmp, dm, ep, name, steps, every, sig, idle_back=False):
    job = Job(ep, steps, every, 2 if idle_back else 0)
    try:
        # two acked first: the connection is made and handshook
        check(job.wait_out(lambda line: len(line.split()) == 4 and int(line.split()[2]) >= 2, 20) is not None,
              f"{name}: two snapshots acked before the stop", "\n".join(x for _, x in job.out[-5:]))
        stopped = job.now()
        dm.stop(sig)
        time.sleep(8)    # past the 5 s after which refused connects are probed
        gone = job.lines("closed the connection")
        check(len(gone) == 1 and gone[0][0] - stopped < 3.0,
              f"{name}: said once, {gone[0][0] - stopped if gone else -1:.1f} s after the stop (< 3)",
              "\n".join(x for _, x in job.err))
        if gone:
            check(f"run 'lowprec': wdriftd at {ep} closed the connection" in gone[0][1]
                  and "snapshots wait" in gone[0][1], f"{name}: the line names the run and the endpoint", gone[0][1])
        others = [x for _, x in job.err if "publisher:" in x and "closed the connection" not in x]
        check(not others, f"{name}: no second reason while it is gone (no 'no socket at', no stall)",
              "\n".join(others))
        rows = job.status_after(stopped + 3.0)
        check(rows and all(r[1] == 0 for r in rows), f"{name}: stats() says not connected within 3 s",
              "\n".join(map(str, rows[:5])))
        check(dm.start() is not None, f"{name}: the daemon starts again")
        if idle_back:   # nothing published meanwhile: its return is seen all the same
            back_at = job.now()
            t = job.wait_out(lambda line: len(line.split()) == 4 and line.split()[1] == "1"
                             and float(line.split()[0]) >= back_at, 10)
            check(t is not None and t - back_at < 7.0, f"{name}: stats() says connected again within 7 s of the "
                  f"restart, before the next publish ({(t or 99) - back_at:.1f} s)")
        check(job.finish() == 0, f"{name}: the job ends")
        last = [x for _, x in job.out if x.startswith("acked ")]
        check(last and last[0].startswith(f"acked {steps} ") and last[0].endswith("diagnosis None"),
              f"{name}: every snapshot acked once it is back, no diagnosis left", "\n".join(last))
        back = job.lines(f"{ep} answers again" if idle_back else f"{ep} answers now")
        check(len(back) == 1 and ep in back[0][1], f"{name}: its return said once",
              "\n".join(x for _, x in job.err))
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()


def main():
    tmp = tempfile.mkdtemp(prefix="t99-")
    dm = Daemon(tmp)
    try:
        dm.write_config()
        check(dm.start() is not None, "daemon ready")
        ep = f"ipc://{tmp}/run/ingest.sock"
        case(tmp, dm, ep, "SIGTERM while publishing", 8, 0.5, signal.SIGTERM)
        case(tmp, dm, ep, "SIGKILL while publishing", 8, 0.5, signal.SIGKILL)
        case(tmp, dm, ep, "SIGTERM while the job is idle", 4, 5.0, signal.SIGTERM)
        case(tmp, dm, ep, "SIGTERM, back while the job is idle", 3, 20.0, signal.SIGTERM, idle_back=True)
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
