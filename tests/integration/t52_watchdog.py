#!/usr/bin/env python3
"""t52_watchdog.py: WATCHDOG=1 comes from wdriftd's main loop at half of
WATCHDOG_USEC, and stops while the loop is stalled (SIGSTOP), which is what
lets systemd's WatchdogSec= kill and restart a hung daemon."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, check  # noqa: E402


def pings(dm, seconds):
    n, end = 0, time.time() + seconds
    while time.time() < end:
        if dm.wait_notify("WATCHDOG=1", max(0.01, end - time.time())):
            n += 1
    return n


def status_within(tmp, seconds):
    """One status request on the control socket, answered within seconds, or None."""
    import zmq
    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, int(seconds * 1000))
    s.connect(f"ipc://{tmp}/run/control.sock")
    try:
        s.send_string('{"v": 1, "cmd": "status"}')
        return s.recv_json()
    except zmq.Again:
        return None
    finally:
        s.close()
        ctx.term()


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t52-")
    dm = Daemon(tmp)
    try:
        dm.write_config()
        check(dm.start(env_extra={"WATCHDOG_USEC": "400000"}) is not None, "ready with WATCHDOG_USEC=400000")
        n = pings(dm, 2.0)
        check(5 <= n <= 14, f"about 2 pings per WATCHDOG_USEC: {n} in 2 s (expected ~10)")
        dm.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.1)
        pings(dm, 0.3)    # drain what was queued before the stop took effect
        dm.messages.clear()
        n = pings(dm, 1.5)
        check(n == 0, f"a stopped main loop sends no pings: {n} in 1.5 s")
        dm.proc.send_signal(signal.SIGCONT)
        n = pings(dm, 1.5)
        check(n >= 3, f"pings resume with the loop: {n} in 1.5 s")
        check(dm.stop() == 0, "SIGTERM: exit 0")

        # a supervisor that never reads the notify socket: its queue fills
        # (10 datagrams) within a second of pings, and the daemon must not
        # block on it (it did: status stopped answering, SIGTERM hung)
        dm.start(env_extra={"WATCHDOG_USEC": "100000"})
        time.sleep(3)       # nobody reads dm.notify from here on
        t0 = time.time()
        st = status_within(tmp, 1.0)
        check(st, f"an unread notify socket: status still answers within 1 s ({time.time() - t0:.2f} s)")
        t0 = time.time()
        rc = dm.stop(timeout=5)
        check(rc == 0 and time.time() - t0 < 5, f"and SIGTERM still stops it: exit {rc} in {time.time() - t0:.1f} s")
    finally:
        harness.teardown(dm, tmp)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
