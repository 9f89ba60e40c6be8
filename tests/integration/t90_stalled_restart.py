#!/usr/bin/env python3
"""t90_stalled_restart.py: a candidate that dies while the daemon is down still goes stalled.

A `stalled` rule measures the seconds since a candidate's last snapshot.
After a restart, a run known from the write-ahead log alone had no clock
(not heard from since the start), so a training job that died during the
restart never fired its stalled alert: the very failure the rule is for,
silent. Now the WAL's snapshot records carry the time they were written
("at", docs/storage.md), and such a run's clock is its last durable
snapshot's. A real daemon, killed with SIGKILL: the alert fires after the
restart with no snapshot since, stays firing across a second kill with no
second event, and resolves when the run sends again.

A rule added while the daemon is down is judged at start-up on the latest
complete step; its event used to go out as the sockets were bound, before
any subscriber could be there, and was lost. The catch-up now waits a
second: a subscriber that connects at once gets it.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check  # noqa: E402
from t53_alerts import events_until, snap  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
QUIET = 3

RULES = f"""\
alerts:
  - name: fa-quiet
    study: fa
    metric: stalled
    threshold: {QUIET}
"""


def quiet_events(sub, secs, until=None):
    """The fa-quiet events (sub subscribes to them alone) for secs, or until until(events)."""
    got = events_until(sub, lambda g: bool(until) and until([e for _, e in g]), timeout=secs)
    return [e for _, e in got]


def alert_state(cfg):
    r = subprocess.run([WDRIFT, "alerts", "--json", "-c", cfg], capture_output=True, text=True, timeout=30)
    rules = {a["name"]: a for a in json.loads(r.stdout)["alerts"]} if r.returncode == 0 else {}
    inst = [i for i in rules.get("fa-quiet", {}).get("instances", []) if i["run"] == "fa"]
    return inst[0] if inst else {}


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t90-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config(RULES)
        check(dm.start() is not None, "ready with a stalled rule")
        base, fa, low = (Publisher(ctx, tmp, r) for r in ("base", "fa", "lowprec"))
        snap(base, 1, 0.0)
        snap(low, 1, 0.0, f16=True)
        snap(fa, 1, 0.01)          # step 1 complete: every run of the study
        sent = time.time()
        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL, "SIGKILL before the run goes quiet")
        check(dm.start() is not None, "started again: the run is known from the WAL alone")
        sub = harness.subscribe(ctx, tmp, b"alert.fa-quiet", 200)
        got = quiet_events(sub, QUIET + 8, until=lambda g: any(e["state"] == "firing" for e in g))
        fired = [e for e in got if e["state"] == "firing"]
        waited = time.time() - sent
        check(len(fired) == 1 and fired[0]["run"] == "fa" and fired[0]["value"] >= QUIET
              and waited < QUIET + 6,
              f"no snapshot since the restart: fa-quiet fires, counted from the last durable one "
              f"({waited:.1f} s after it; {got})")
        st = alert_state(cfg)
        check(st.get("state") == "firing" and st.get("step") == 1,
              f"`wdrift alerts` shows it firing at the run's last step ({st})")

        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL and dm.start() is not None, "killed and started again")
        sub = harness.subscribe(ctx, tmp, b"alert.fa-quiet", 200)
        got = quiet_events(sub, 2.5)
        st = alert_state(cfg)
        check(st.get("state") == "firing" and not got,
              f"still firing after the second restart, with no second event ({st}, {got})")
        log = dm.log_text()
        check(log.count("alert 'fa-quiet' firing") == 1, "one 'firing' line across the three starts")

        fa = Publisher(ctx, tmp, "fa")
        snap(fa, 2, 0.01)
        got = quiet_events(sub, 5, until=lambda g: any(e["state"] == "resolved" for e in g))
        check(any(e["state"] == "resolved" for e in got), f"the run sends again: resolved ({got})")

        # messages that make nothing durable do not wind the clock back: a job that dies
        # mid-snapshot, a re-run refused as a conflict (a trial's stalled alert stayed quiet)
        durable = time.time()
        snap(fa, 2, 0.5)            # step 2 again, other content: a conflict, refused
        fired, start = [], time.time()
        while time.time() - start < QUIET + 6 and not fired:
            fa.tensor(3, "layers.0.w", np.zeros(4000, np.float32), "f32")    # step 3, never committed
            fired = [e for e in quiet_events(sub, 0.5) if e["state"] == "firing"]
        waited = time.time() - durable
        check(len(fired) == 1 and fired[0]["step"] == 2 and waited < QUIET + 4,
              f"a conflict and tensors of a step never committed, every 0.5 s: fa-quiet fires "
              f"{waited:.1f} s after step 2 was made durable, not never ({fired})")
        check(dm.stop() == 0, "SIGTERM: exit 0")

        # a rule added while the daemon was down: its start-up event reaches a subscriber
        snapshot_rule = "  - name: fa-big\n    study: fa\n    metric: w1\n    scope: max\n    threshold: 0\n"
        dm.write_config(RULES + snapshot_rule)
        check(dm.start() is not None, "started with a rule added while it was down")
        sub = harness.subscribe(ctx, tmp, b"alert.fa-big", 200)
        got = [e for _, e in events_until(sub, lambda g: len(g) >= 1, timeout=5)]
        check(len(got) == 1 and got[0]["state"] == "firing" and got[0]["run"] == "fa" and got[0]["step"] == 1,
              f"judged on the latest complete step (1), its start-up firing event reaches a subscriber "
              f"that connected at once ({got})")
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
