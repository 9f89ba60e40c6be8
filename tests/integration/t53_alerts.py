#!/usr/bin/env python3
"""t53_alerts.py: alert rules fire and resolve, as docs/config.md says.

A candidate drifts more than its fp16 proxy for two steps (ratio > 1 with
for: 2: pending, then firing), then matches the baseline (resolved); its
command runs on firing and on resolving with the alert JSON on stdin. A
per-tensor nonfinite rule fires on the tensor with a NaN only; its command
is not found (exit 127, the shell's error naming the rule), which `wdrift alerts`, the control reply and /metrics
count, with the latest failure (a pager that failed was in the log alone:
an ops trial); a slow one (sleep 20) holds its rule's resolve while it runs,
and is killed at command_timeout, counted failed. A stalled
rule fires when the candidate goes quiet and resolves when it is back.
Events arrive on the PUB socket; the control socket lists the states.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402

ALERTS = """\
alerts:
  - name: fa-vs-fp16
    study: fa
    metric: ratio
    proxy: fp16
    scope: max
    threshold: 1.0
    for: 2
    severity: critical
    command: "cat > {d}/cmd-$(date +%s%N).json"
    command_min_interval: 0
  - name: fa-nan
    study: fa
    metric: nonfinite
    scope: tensors
    tensors: "layers.*"
    threshold: 0
    command: "no-such-pager-t53 --page"
    command_min_interval: 0
  - name: fa-slow
    study: fa
    metric: nonfinite
    scope: tensors
    tensors: "layers.*"
    threshold: 0
    command: "sleep 20"
    command_min_interval: 0
    command_timeout: 4
  - name: fa-quiet
    study: fa
    metric: stalled
    threshold: 5
"""


def snap(pub, step, drift, nan=False, f16=False):
    r = np.random.default_rng(step)
    for name, n in (("layers.0.w", 4000), ("emb", 3000)):
        v = (r.standard_normal(n) * 0.02).astype(np.float32)
        v = v + (np.random.default_rng(step + 7).standard_normal(n) * drift).astype(np.float32)
        if nan and name == "layers.0.w":
            v[5] = np.nan
        if f16:
            pub.tensor(step, name, v.astype(np.float16), "f16")
        else:
            pub.tensor(step, name, v, "f32")
    return pub.commit(step, 2)


def events_until(sub, pred, timeout=15):
    got, end = [], time.time() + timeout
    while time.time() < end:
        try:
            topic, body = sub.recv_multipart()
            got.append((topic.decode(), json.loads(body)))
            if pred(got):
                break
        except zmq.Again:
            pass
    return got


REEVAL = """\
alerts:
  - name: fa-w1
    study: fa
    metric: w1
    scope: max
    threshold: 0
    for: 2
    command: "ls -l /proc/$$/fd > {d}/fds-$(date +%s%N).txt"
    command_min_interval: 0
  - name: fa-ratio
    study: fa
    metric: ratio
    proxy: fp16
    threshold: 0
"""


def recomputed_step():
    """A step is recomputed when a later run arrives at it (here the proxy after
    the candidate): that is one snapshot of the candidate, not two, for `for`."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t53-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        path = dm.write_config()
        with open(path, "a") as f:
            f.write(REEVAL.format(d=tmp))
        check(dm.start() is not None, "ready with a w1 rule, for: 2")
        sub = harness.subscribe(ctx, tmp, b"alert.", 200)
        base, low, fa = (Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa"))
        snap(base, 10, 0.0)
        snap(fa, 10, 0.01)                        # computed at step 10 ...
        snap(low, 10, 0.0, f16=True)              # ... and again, with the proxy
        ev = events_until(sub, lambda g: False, timeout=2)
        st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        inst = {a["name"]: a["instances"] for a in st["alerts"]} if st and st.get("ok") else {}
        check(not any(e[0] == "alert.fa-w1" for e in ev) and inst.get("fa-w1") and inst["fa-w1"][0]["state"] == "pending"
              and inst["fa-w1"][0]["above"] == 1,
              f"one snapshot computed twice is one snapshot above: pending ({ev}, {inst.get('fa-w1')})")
        snap(base, 20, 0.0)
        snap(fa, 20, 0.01)                        # no proxy at 20 yet: no ratio
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-w1" for e in g), timeout=5)
        step20_ev = ev
        fire = [e[1] for e in ev if e[0] == "alert.fa-w1"]
        check(len(fire) == 1 and fire[0]["state"] == "firing" and fire[0]["step"] == 20,
              f"the second snapshot above fires it, once ({fire})")
        time.sleep(0.5)
        fds = "".join(open(p).read() for p in glob.glob(os.path.join(tmp, "fds-*.txt")))
        check(fds and "/var/" not in fds and "socket:" not in fds,
              "the alert command inherits none of the daemon's files or sockets:\n# "
              + fds.replace("\n", "\n# "))
        snap(low, 20, 0.0, f16=True)              # step 20 again: still firing, no new event
        late_ev = events_until(sub, lambda g: False, timeout=2)
        check(not any(e[0] == "alert.fa-w1" for e in late_ev),
              f"recomputing step 20 sends no new transition ({late_ev})")
        snap(base, 5, 0.0)                        # an older step, late: not a newer snapshot
        snap(fa, 5, 0.0)
        ev = events_until(sub, lambda g: False, timeout=2)
        check(not any(e[0] == "alert.fa-w1" for e in ev),
              f"a late, older step does not resolve the current state ({ev})")
        st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        inst = {a["name"]: a["instances"] for a in st["alerts"]} if st and st.get("ok") else {}
        check(inst.get("fa-ratio") and inst["fa-ratio"][0]["state"] == "firing"
              and inst["fa-ratio"][0]["step"] == 20,
              f"the ratio rule fired, and is still firing at step 20 ({inst.get('fa-ratio')})")
        check(not any(e[0] == "alert.fa-ratio" for e in step20_ev + late_ev),
              "a candidate computed before its proxy (no ratio yet) does not resolve the ratio rule")
        # status, the daemon's view, names the rules firing (two trials: it said nothing of alerts)
        firing = sorted(a["name"] for a in st["alerts"] if any(i["state"] == "firing" for i in a["instances"]))
        stj = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(stj and sorted(stj.get("alerts", {}).get("firing", {})) == firing and firing
              and stj["alerts"]["rules"] == len(st["alerts"]),
              f"status --json: the rules, and those firing with their instances ({stj and stj.get('alerts')})")
        wdrift = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
        r = subprocess.run([wdrift, "status", "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True,
                           text=True, timeout=30)
        line = next((x for x in r.stdout.splitlines() if x.startswith("alerts ")), "")
        check(all(f"{n} (1 instance)" in line for n in firing) and "; firing: " in line
              and "(wdrift alerts says which)" in line, "status prints them on its alerts line", r.stdout)
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)


def main():
    recomputed_step()
    tmp = tempfile.mkdtemp(prefix="wdrift-t53-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        path = dm.write_config()
        port = harness.free_port()
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("  events: ipc://", f"  metrics: 127.0.0.1:{port}\n  events: ipc://", 1))
            f.write(ALERTS.format(d=tmp))
        check(dm.start() is not None, "ready with three alert rules")
        sub = harness.subscribe(ctx, tmp, b"alert.", 200)
        base, low, fa = (Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa"))

        def step(s, fa_drift, nan=False):
            snap(base, s, 0.0)
            snap(low, s, 0.0, f16=True)          # the proxy: fp16 rounding only
            return snap(fa, s, fa_drift, nan=nan)

        step(10, 0.01)                            # ratio >> 1: pending (for: 2)
        ev = events_until(sub, lambda g: False, timeout=2)
        check(not any(e[0] == "alert.fa-vs-fp16" for e in ev), "one snapshot above: pending, no event")
        st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        inst = {a["name"]: a["instances"] for a in st["alerts"]} if st and st.get("ok") else {}
        check(inst.get("fa-vs-fp16") and inst["fa-vs-fp16"][0]["state"] == "pending",
              f"control lists it as pending ({inst.get('fa-vs-fp16')})")
        step(20, 0.01, nan=True)                  # second snapshot above: firing
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-vs-fp16" for e in g) and
                          any(e[0] == "alert.fa-nan" for e in g))
        fire = [e[1] for e in ev if e[0] == "alert.fa-vs-fp16"]
        check(fire and fire[0]["state"] == "firing" and fire[0]["step"] == 20 and fire[0]["value"] > 1
              and fire[0]["severity"] == "critical", f"ratio alert fires at the second step ({fire})")
        nan = [e[1] for e in ev if e[0] == "alert.fa-nan"]
        check(len(nan) == 1 and nan[0]["tensor"] == "layers.0.w" and nan[0]["value"] == 1,
              f"the nonfinite rule fires on the one tensor with a NaN ({nan})")
        step(30, 0.0)                             # back to the baseline: resolved
        ev = events_until(sub, lambda g: sum(e[0] in ("alert.fa-vs-fp16", "alert.fa-nan") for e in g) >= 2)
        states = {(e[0], e[1]["state"]) for e in ev}
        check(("alert.fa-vs-fp16", "resolved") in states and ("alert.fa-nan", "resolved") in states,
              f"both resolve at step 30 ({sorted(states)})")
        # the log says the NaN too, once, and when it is gone (a trial found it only in `drift`)
        said = [x for x in dm.log_text().splitlines() if "candidate 'fa' holds" in x]
        check(len(said) == 2 and "warning: compute: study 'fa' step 20: candidate 'fa' holds 1 value that is NaN "
              "or Inf (1 NaN, 0 +Inf, 0 -Inf) in 1 of its 2 tensors, the first 'layers.0.w'" in said[0]
              and "study 'fa' step 30: candidate 'fa' holds only finite values again" in said[1],
              "the log: the NaN at step 20 once, and at step 30 that it is gone", "\n".join(said))
        # fa-slow's command (sleep 20) still runs from its firing: the resolve waits for it
        r = subprocess.run([harness.WDRIFT, "alerts", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "command    alert 'fa-slow': its command has run for " in r.stdout and
              "(command_timeout 4 s); the changes since are held until it ends" in r.stdout,
              "a slow command holds its rule's resolve, and alerts says so", r.stdout + r.stderr)
        end = time.time() + 10
        while time.time() < end:
            cmds = sorted(glob.glob(os.path.join(tmp, "cmd-*.json")))
            if len(cmds) >= 2:
                break
            time.sleep(0.1)
        time.sleep(0.2)     # the second file written whole
        docs = [json.load(open(c)) for c in cmds]
        check([d["state"] for d in docs] == ["firing", "resolved"] and docs[0]["alert"] == "fa-vs-fp16",
              f"the command ran on firing and on resolving, with the JSON on stdin ({[d['state'] for d in docs]})")
        check("alert 'fa-vs-fp16' firing" in dm.log_text(), "the transition is in the log")
        # fa-nan's command failed twice (exit 3): counted and said, not in the log alone
        end = time.time() + 10      # reaped once a second
        while True:
            st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
            cmd = {a["name"]: a.get("command") for a in st["alerts"]} if st and st.get("ok") else {}
            nanc = cmd.get("fa-nan") or {}
            if nanc.get("failed") == 2 or time.time() > end:
                break
            time.sleep(0.2)
        check(nanc.get("runs") == 2 and nanc.get("failed") == 2 and
              (nanc.get("last_failure") or "").startswith("exit 127 at ") and
              (nanc.get("last_failure") or "").endswith(" UTC (sh: command not found?)") and
              {k: v for k, v in (cmd.get("fa-vs-fp16") or {}).items() if k not in ("running_for", "held")} ==
              {"runs": 2, "failed": 0, "last_failure": None, "timeout": 60} and
              cmd.get("fa-quiet") is None, f"control: each rule's command runs and failures ({cmd})")
        # fa-slow's first run killed at its timeout, counted failed; then its held resolve ran (killed too)
        end = time.time() + 15
        while time.time() < end:
            st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
            slow = ({a["name"]: a.get("command") for a in st["alerts"]} if st and st.get("ok") else {}).get("fa-slow") or {}
            if slow.get("runs") == 2 and slow.get("failed") == 2 and "running_for" not in slow:
                break
            time.sleep(0.2)
        check(slow.get("runs") == 2 and slow.get("failed") == 2 and
              (slow.get("last_failure") or "").startswith("timed out after 4 s, killed at ") and
              "running_for" not in slow and "held" not in slow,
              f"fa-slow: each run killed at command_timeout and counted; the resolve went after the firing ({slow})")
        check("alert 'fa-slow': its command ran past command_timeout (4 s): killed, with what it started" in
              dm.log_text(), "the log says the kill")
        # status, the daemon's view, names the rules whose commands failed (an ops trial's said nothing)
        stj = control(ctx, tmp, {"v": 1, "cmd": "status"})
        r = subprocess.run([harness.WDRIFT, "status", "-c", path], capture_output=True, text=True, timeout=30)
        line = next((x for x in r.stdout.splitlines() if x.startswith("alerts ")), "")
        check(stj and stj.get("alerts", {}).get("commands_failed") == {"fa-nan": 2, "fa-slow": 2} and
              "; commands failed: fa-nan (2 runs), fa-slow (2 runs) (wdrift alerts says which)" in line,
              f"status: the rules whose commands failed ({stj and stj.get('alerts')})", r.stdout)
        r = subprocess.run([harness.WDRIFT, "alerts", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "command    alert 'fa-nan': 2 of its 2 command runs since the daemon "
              "started failed, the latest: exit 127 at " in r.stdout and "alert 'fa-vs-fp16':" not in r.stdout,
              "wdrift alerts says the failing command under the table", r.stdout + r.stderr)
        # the shell's own error names the rule, not "sh" (its $0): the journal says whose pager failed
        check("wdrift alert 'fa-nan' command: 1: no-such-pager-t53: not found" in dm.log_text(),
              "the shell's error on the daemon's stderr names the rule", dm.log_text()[-1500:])
        check("alert 'fa-nan': its command failed (exit 127) (sh: command not found?)" in dm.log_text(),
              "the log's failure line has the hint alerts gives (a trial's had the exit alone)",
              dm.log_text()[-1500:])
        r = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True,
                           timeout=30)
        check('wdrift_alert_command_failures_total{alert="fa-nan",study="fa"} 2' in r.stdout and
              'wdrift_alert_command_runs_total{alert="fa-nan",study="fa"} 2' in r.stdout and
              'wdrift_alert_command_failures_total{alert="fa-vs-fp16",study="fa"} 0' in r.stdout and
              'alert="fa-quiet"' not in "".join(x for x in r.stdout.splitlines() if "command" in x),
              "/metrics: wdrift_alert_command_runs_total and _failures_total per rule with a command",
              "\n".join(x for x in r.stdout.splitlines() if "command" in x))
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-quiet" for e in g), timeout=12)
        quiet = [e[1] for e in ev if e[0] == "alert.fa-quiet"]
        check(quiet and quiet[0]["state"] == "firing" and quiet[0]["value"] > 5,
              f"the candidate went quiet: stalled fires ({quiet})")
        snap(fa, 40, 0.0)
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-quiet" for e in g), timeout=5)
        quiet = [e[1] for e in ev if e[0] == "alert.fa-quiet"]
        check(quiet and quiet[0]["state"] == "resolved", f"and resolves when it is back ({quiet})")
        # quiet again, firing; then a reload takes fa out of the study (candidates [fb]): the instance
        # is resolved, with why, not left firing for a run the study no longer has (a trial's was)
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-quiet" for e in g), timeout=12)
        check(any(e[0] == "alert.fa-quiet" and e[1]["state"] == "firing" for e in ev), "quiet again: firing")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("candidates: [fa]", "candidates: [fb]"))
        r = control(ctx, tmp, {"v": 1, "cmd": "reload"})
        check(r and r.get("ok"), f"reload: candidates [fb] ({r})")
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-quiet" for e in g), timeout=5)
        gone = [e[1] for e in ev if e[0] == "alert.fa-quiet"]
        check(len(gone) == 1 and gone[0]["state"] == "resolved" and gone[0]["run"] == "fa"
              and gone[0].get("reason") == "'fa' is no longer a candidate of study 'fa' (a reload)",
              f"the firing instance of a run the reload took out is resolved, saying why ({gone})")
        st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        inst = {a["name"]: a["instances"] for a in st["alerts"]} if st and st.get("ok") else {}
        check(inst.get("fa-quiet") == [], f"... and no instance of it is left ({inst.get('fa-quiet')})")
        cmd = {a["name"]: a.get("command") for a in st["alerts"]} if st and st.get("ok") else {}
        check((cmd.get("fa-nan") or {}).get("runs") == 2 and (cmd.get("fa-nan") or {}).get("failed") == 2,
              f"the reload keeps the rule's command counters ({cmd.get('fa-nan')})")
        check(dm.stop() == 0 and dm.start() is not None, "restarted")
        time.sleep(1.5)     # past the start's catch-up, which drops what the config no longer names
        st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        inst = {a["name"]: a["instances"] for a in st["alerts"]} if st and st.get("ok") else {}
        check(inst.get("fa-quiet") == [] and dm.log_text().count("no longer a candidate") == 1,
              f"a restart does not bring it back, nor say it again ({inst.get('fa-quiet')})", dm.log_text()[-1500:])
        # fa a candidate again, quiet, firing; the daemon stopped, fa taken out of the config, started:
        # resolved at the start's catch-up, when subscribers can hear it, saying so
        with open(path, "w") as f:
            f.write(text)
        r = control(ctx, tmp, {"v": 1, "cmd": "reload"})
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-quiet" for e in g), timeout=12)
        check(r and r.get("ok") and any(e[0] == "alert.fa-quiet" and e[1]["state"] == "firing" for e in ev),
              "fa a candidate again by reload, quiet: firing", str(ev))
        check(dm.stop() == 0, "stopped")
        with open(path, "w") as f:
            f.write(text.replace("candidates: [fa]", "candidates: [fb]"))
        check(dm.start() is not None, "started with fa taken out of the config")
        ev = events_until(sub, lambda g: any(e[0] == "alert.fa-quiet" for e in g), timeout=8)
        gone = [e[1] for e in ev if e[0] == "alert.fa-quiet"]
        check(len(gone) == 1 and gone[0]["state"] == "resolved"
              and gone[0].get("reason") == "'fa' is no longer a candidate of study 'fa' (the config read at this start)",
              f"... resolved at the start's catch-up, an event with its reason ({gone})")
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
