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
import t50_daemon  # noqa: E402
from t50_daemon import Daemon, check  # noqa: E402


def pings(dm, seconds):
    n, end = 0, time.time() + seconds
    while time.time() < end:
        if dm.wait_notify("WATCHDOG=1", max(0.01, end - time.time())):
            n += 1
    return n


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
    finally:
        t50_daemon.teardown(dm, tmp)
    return t50_daemon.summary()


if __name__ == "__main__":
    sys.exit(main())
