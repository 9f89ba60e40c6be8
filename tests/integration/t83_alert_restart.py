#!/usr/bin/env python3
"""t83_alert_restart.py: alert state survives restarts and crashes (issue 15).

A real daemon, a real SIGKILL. Rules fire (max w1, for: 2), resolve (a NaN
that goes away), count (for: 5) and fire per tensor; the daemon is killed
with SIGKILL and started again on the same storage: `wdrift alerts --json`
says what it said before, a firing alert fires no second time (no event,
no second run of its command, one "firing" line in the log across every
start), a pending one keeps its count and goes on counting, a resolved one
stays resolved. A rule added by a reload is judged at once against the
latest complete step (every run of the study compared), not a later,
incomplete one. A rule whose scope changed while the daemon was down starts
afresh, said once. `wdrift alerts` shows each rule's scope and proxy;
`wdrift runs` shows "-" (null in --json) for the idle time of runs known
from the write-ahead log alone.
"""
import glob
import json
import re
import os
import signal
import subprocess
import sys
import tempfile
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402
from t53_alerts import snap  # noqa: E402  (a step of one run: two tensors, a drift, a NaN)

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

RULES = """\
alerts:
  - name: fa-w1
    study: fa
    metric: w1
    scope: max
    threshold: 0
    for: 2
    command: "cat > {d}/cmd-fa-w1-$(date +%s%N).json"
    command_min_interval: 0
  - name: fa-count
    study: fa
    metric: w1
    scope: {count_scope}
    threshold: 0
    for: 5
  - name: fa-nan
    study: fa
    metric: nonfinite
    scope: tensors
    tensors: "layers.*"
    threshold: 0
  - name: fa-ratio
    study: fa
    metric: ratio
    proxy: fp16
    scope: mean
    threshold: 1000000
"""

NEW_RULE = """\
  - name: fa-new
    study: fa
    metric: w1
    scope: max
    threshold: 0
    command: "cat > {d}/cmd-fa-new-$(date +%s%N).json"
    command_min_interval: 0
"""


def cli(*args):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=30)


def rules_of(ctx, tmp):
    st = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
    return {a["name"]: a for a in st["alerts"]} if st and st.get("ok") else {}


def inst(rules, name, tensor=None):
    for i in rules.get(name, {}).get("instances", []):
        if i.get("tensor") == tensor:
            return i
    return {}


def wait_for(ctx, tmp, pred, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        r = rules_of(ctx, tmp)
        if pred(r):
            return r
        time.sleep(0.1)
    return rules_of(ctx, tmp)


def events(sub, secs):
    got, end = [], time.time() + secs
    while time.time() < end:
        try:
            topic, body = sub.recv_multipart()
            got.append((topic.decode(), json.loads(body)))
        except zmq.Again:
            pass
    return got


def commands(tmp, rule):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(tmp, f"cmd-{rule}-*.json")))]


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t83-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config(RULES.format(d=tmp, count_scope="median"))
        check(dm.start() is not None, "ready with four alert rules")
        sub = harness.subscribe(ctx, tmp, b"alert.", 200)
        base, low, fa = (Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa"))

        def step(s, drift, nan=False, proxy=True):
            snap(base, s, 0.0)
            if proxy:
                snap(low, s, 0.0, f16=True)
            return snap(fa, s, drift, nan=nan)

        step(10, 0.01, nan=True)
        step(20, 0.01)
        before = wait_for(ctx, tmp, lambda r: inst(r, "fa-w1").get("state") == "firing"
                          and inst(r, "fa-count").get("above") == 2
                          and inst(r, "fa-nan", "layers.0.w").get("step") == 20)
        ev = events(sub, 1.0)
        check(inst(before, "fa-w1").get("state") == "firing" and inst(before, "fa-w1").get("step") == 20,
              f"fa-w1 fires at step 20 ({inst(before, 'fa-w1')})")
        check(inst(before, "fa-count").get("state") == "pending" and inst(before, "fa-count").get("above") == 2,
              f"fa-count is pending, 2 of 5 ({inst(before, 'fa-count')})")
        nan = inst(before, "fa-nan", "layers.0.w")
        check(nan.get("state") == "inactive" and nan.get("since"),
              f"fa-nan fired at 10 and resolved at 20 ({nan})")
        check(len(commands(tmp, "fa-w1")) == 1, "fa-w1's command ran once")

        # what a rule means, in the table and in --json
        out = cli("alerts", "-c", cfg)
        head = out.stdout.splitlines()[0].split() if out.stdout else []
        row = next((ln for ln in out.stdout.splitlines() if ln.startswith("fa-ratio")), "")
        check(out.returncode == 0 and "scope" in head and "proxy" in head and "mean (weighted)" in row
              and " fp16 " in row, f"`wdrift alerts` shows scope and proxy:\n{out.stdout}{out.stderr}")
        row = next((ln for ln in out.stdout.splitlines() if ln.startswith("fa-nan")), "")
        check("tensors layers.*" in row, f"and the glob of a per-tensor rule ({row})")
        out = cli("alerts", "--json", "-c", cfg)
        js = {a["name"]: a for a in json.loads(out.stdout)["alerts"]} if out.returncode == 0 else {}
        check(js.get("fa-ratio", {}).get("scope") == "mean" and js["fa-ratio"].get("proxy") == "fp16"
              and js.get("fa-nan", {}).get("tensors") == "layers.*" and js["fa-w1"].get("scope") == "max"
              and js["fa-w1"].get("threshold") == 0 and js["fa-w1"].get("for") == 2,
              f"--json: scope, tensors and proxy beside the fields it had ({out.stdout[:400]})")

        # SIGKILL, restart on the same storage
        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL, "SIGKILL")
        check(dm.start() is not None, "started again after the kill")
        sub = harness.subscribe(ctx, tmp, b"alert.", 200)
        after = rules_of(ctx, tmp)
        w1 = inst(after, "fa-w1")
        check(w1.get("state") == "firing" and w1.get("step") == 20 and w1.get("since") == inst(before, "fa-w1").get("since"),
              f"after the kill, fa-w1 is still firing, since the same time ({w1})")
        cnt = inst(after, "fa-count")
        check(cnt.get("state") == "pending" and cnt.get("above") == 2, f"fa-count still pending, 2 of 5 ({cnt})")
        nan = inst(after, "fa-nan", "layers.0.w")
        check(nan.get("state") == "inactive", f"fa-nan still resolved ({nan})")
        out = cli("runs", "--json", "-c", cfg)
        runs = {r["name"]: r for r in json.loads(out.stdout)["runs"]} if out.returncode == 0 else {}
        check(runs and all(r.get("idle", 0) is None for r in runs.values()),
              f"`wdrift runs --json`: idle is null for runs known from the WAL alone ({runs})")
        out = cli("runs", "-c", cfg)
        row = next((ln.split() for ln in out.stdout.splitlines() if ln.startswith("fa ")), [])
        check(len(row) >= 6 and row[5] == "-", f"and the table shows '-' ({row}):\n{out.stdout}")

        step(30, 0.01)
        after = wait_for(ctx, tmp, lambda r: inst(r, "fa-count").get("above") == 3)
        ev = events(sub, 1.5)
        check(inst(after, "fa-count").get("above") == 3 and inst(after, "fa-count").get("state") == "pending",
              f"fa-count goes on counting: 3 of 5 ({inst(after, 'fa-count')})")
        check(inst(after, "fa-w1").get("state") == "firing" and inst(after, "fa-w1").get("step") == 30
              and not any(e[0] == "alert.fa-w1" for e in ev),
              f"fa-w1, still above at 30, sends no second 'firing' ({ev})")
        time.sleep(0.3)
        check(len(commands(tmp, "fa-w1")) == 1, f"its command did not run again ({len(commands(tmp, 'fa-w1'))})")
        out = cli("runs", "-c", cfg)
        row = next((ln.split() for ln in out.stdout.splitlines() if ln.startswith("fa ")), [])
        check(len(row) >= 6 and row[5].isdigit(), f"a run heard from since the start has its idle seconds ({row})")

        # a rule added on reload: judged at the latest complete step (30), not at 40 (no proxy yet)
        step(40, 0.01, proxy=False)
        wait_for(ctx, tmp, lambda r: inst(r, "fa-w1").get("step") == 40)
        with open(cfg, "a") as f:
            f.write(NEW_RULE.format(d=tmp))
        dm.proc.send_signal(signal.SIGHUP)
        check(dm.wait_notify("READY=1", 10) is not None, "SIGHUP: reloaded (READY=1 again)")
        new = wait_for(ctx, tmp, lambda r: inst(r, "fa-new").get("state") == "firing", timeout=10)
        ev = events(sub, 1.0)
        fired = [e[1] for e in ev if e[0] == "alert.fa-new"]
        check(inst(new, "fa-new").get("state") == "firing" and inst(new, "fa-new").get("step") == 30,
              f"a rule added on reload fires at once, on the latest complete step 30 ({inst(new, 'fa-new')})")
        check(len(fired) == 1 and fired[0]["state"] == "firing" and fired[0]["step"] == 30,
              f"with one event ({fired})")
        check(not any(e[0] == "alert.fa-w1" for e in ev), "the reload sends nothing for the rules it kept")

        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL, "SIGKILL again")
        check(dm.start() is not None, "started again")
        sub = harness.subscribe(ctx, tmp, b"alert.", 200)
        step(50, 0.01)
        after = wait_for(ctx, tmp, lambda r: inst(r, "fa-new").get("step") == 50)
        ev = events(sub, 1.5)
        check(inst(after, "fa-new").get("state") == "firing" and not any(e[0] == "alert.fa-new" for e in ev),
              f"the reloaded rule's firing survives the kill: no second event ({inst(after, 'fa-new')}, {ev})")
        time.sleep(0.3)
        check(len(commands(tmp, "fa-new")) == 1 and len(commands(tmp, "fa-w1")) == 1,
              "each command ran once in all")
        log = dm.log_text()
        check(log.count("alert 'fa-w1' firing") == 1 and log.count("alert 'fa-new' firing") == 1,
              f"one 'firing' line each across three starts ({log.count('alert ' + chr(39) + 'fa-w1' + chr(39) + ' firing')})")
        check(re.search(r"alerts: (1 instance|\d+ instances) restored from the write-ahead log", log) is not None,
              "the restore is in the log")

        # a rule whose scope changed while the daemon was down starts afresh
        check(dm.stop() == 0, "SIGTERM: exit 0")
        dm.write_config(RULES.format(d=tmp, count_scope="max") + NEW_RULE.format(d=tmp))
        check(dm.start() is not None, "started with fa-count's scope changed")
        cnt = inst(rules_of(ctx, tmp), "fa-count")
        msg = "alert 'fa-count': its study, metric, scope, tensors or proxy changed"
        check(cnt.get("above", 0) <= 1 and dm.log_text().count(msg) == 1,
              f"its count starts afresh (judged on the latest complete step alone: {cnt}), said once")
        check(dm.stop() == 0 and dm.start() is not None, "restarted once more")
        check(dm.log_text().count(msg) == 1, "and not said again")

        # runs rm: the run's instances go (a firing alert of a forgotten run is stale), and stay gone
        def of_run(rules, run):
            return [(n, i.get("tensor"), i["state"]) for n, a in rules.items() for i in a["instances"]
                    if i["run"] == run]
        had = of_run(rules_of(ctx, tmp), "fa")
        firing = sum(1 for x in had if x[2] == "firing")
        sub = harness.subscribe(ctx, tmp, b"alert.", 200)
        out = cli("runs", "rm", "fa", "--json", "-c", cfg)
        gone = json.loads(out.stdout) if out.returncode == 0 else {}
        check(firing >= 2 and gone.get("alerts") == len(had) and gone.get("alerts_firing") == firing,
              f"runs rm fa: its {len(had)} alert instances dropped, {firing} of them firing ({out.stdout}{out.stderr})")
        ev = events(sub, 0.5)
        resolved = [e for e in ev if e[1].get("state") == "resolved"]
        check(not of_run(rules_of(ctx, tmp), "fa") and len(resolved) == firing == len(ev)
              and all(e[1].get("reason") == "run 'fa' was removed (wdrift runs rm): forgotten, not recovered"
                      for e in resolved),
              f"`wdrift alerts` no longer lists them, and each firing one is resolved, saying why (a pager "
              f"waited for ever) ({ev})")
        check(f"{len(had)} alert instance{'' if len(had) == 1 else 's'} dropped ({firing} were firing: resolved, saying the run was removed)"
              in dm.log_text(), "the log says how many, and how many were firing")
        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL and dm.start() is not None, "SIGKILL, started again")
        check(not of_run(rules_of(ctx, tmp), "fa"),
              f"the forget record keeps them from coming back ({of_run(rules_of(ctx, tmp), 'fa')})")
        step(60, 0.01)
        again = wait_for(ctx, tmp, lambda r: inst(r, "fa-w1").get("step") == 60)
        check(inst(again, "fa-w1").get("state") == "pending" and inst(again, "fa-w1").get("above") == 1,
              f"the name published again starts afresh: fa-w1 pending, 1 of 2 ({inst(again, 'fa-w1')})")
        n_fa = len(of_run(again, "fa"))
        n_ratio = len(again.get("fa-ratio", {}).get("instances", []))
        for p in (base, low, fa):      # the jobs end: rm is refused while one still publishes (t103)
            p.s.close()
        out = cli("runs", "rm", "lowprec", "-c", cfg)
        left = rules_of(ctx, tmp)
        check(out.returncode == 0 and n_ratio == 1 and "1 alert instance (0 firing)" in out.stdout
              and not left["fa-ratio"]["instances"] and len(of_run(left, "fa")) == n_fa - n_ratio,
              f"a proxy's removal drops the instances of the ratio rule judged against it (a trial's went on "
              f"firing with its proxy forgotten) and keeps the candidate's others; the table says so "
              f"({out.stdout})")
        out = cli("drift", "fa", "--step", "60", "--json", "-c", cfg)
        d = json.loads(out.stdout) if out.returncode == 0 else {}
        layers = [ly for c in d.get("candidates", {}).values() for ly in c.get("layers", [])]
        ratios = [ly["proxies"]["fp16"] for ly in layers if "fp16" in ly.get("proxies", {})]
        check(ratios and all(x["w1"] is None and x["ratio"] is None for x in ratios),
              f"drift after the proxy's removal: no ratio against it, as no W1 of it (a trial saw W1 '-' "
              f"beside ratio 0.407) ({ratios[:2]})", out.stdout[:1500] + out.stderr)
        # a restart judges the study's latest complete step again: the candidate's rows there kept
        # their ratios to the forgotten proxy, and a trial's rule came back on them (and could fire)
        check(dm.stop() == 0, "SIGTERM: exit 0")
        port = harness.free_port()
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:      # and /metrics, to see its ratios too
            f.write(text.replace("listen:\n", f"listen:\n  metrics: 127.0.0.1:{port}\n", 1))
        check(dm.start() is not None, "the daemon restarts")
        time.sleep(3)       # past the start's catch-up (the first tick)
        scrape = subprocess.run(["curl", "-sS", "-m", "10", f"http://127.0.0.1:{port}/metrics"],
                                capture_output=True, text=True).stdout
        check("wdrift_drift_complete_w1{" in scrape and
              not [x for x in scrape.splitlines() if x.startswith("wdrift_drift_ratio{")],
              "... nor has /metrics a ratio to it (wdrift_drift_ratio kept the rows' old ones)",
              "\n".join(x for x in scrape.splitlines() if "ratio" in x))
        left = rules_of(ctx, tmp)
        ratio_now = left.get("fa-ratio", {}).get("instances", [None])
        check(all(i and i.get("state") == "inactive" and i.get("value") is None for i in ratio_now),
              f"after a restart: the ratio rule has no value against the forgotten proxy, as drift shows none "
              f"(a trial's was judged again on the ratios the rows kept) ({ratio_now})")
        out = cli("runs", "rm", "base", "--json", "-c", cfg)
        gone = json.loads(out.stdout) if out.returncode == 0 else {}
        left = [x for x in of_run(rules_of(ctx, tmp), "fa")]
        check(gone.get("alerts", 0) >= 1 and not left,
              f"runs rm of the baseline drops every instance of its study's rules ({gone}, left {left})")
        rc = dm.stop()
        check(rc == 0, f"SIGTERM: exit 0 ({rc})")
    finally:
        harness.teardown(dm, tmp, ctx)
    newest_after_restart()
    return harness.summary()


LATE_RULE = """\
alerts:
  - name: late
    study: fa
    metric: w1
    scope: tensors
    tensors: "layers.*"
    threshold: {threshold!r}
"""


def newest_after_restart():
    """An inactive instance of a per-tensor rule is not kept across a restart (only a new state or a
    pending count is); it was judged on its candidate's newest
    results, while the study's latest complete step was older (its proxy stopped there). An ops
    trial's restart, with a threshold lowered between the two steps' values, judged it on the old
    complete step alone, and it fired on old data (running its command)."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t83-late-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        dm.write_config(LATE_RULE.format(threshold=1.0))
        check(dm.start() is not None, "ready with per-tensor rule 'late' (threshold 1)")
        base, low, fa = (Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa"))
        snap(base, 10, 0.0)
        snap(low, 10, 0.0, f16=True)
        snap(fa, 10, 0.02)
        T = "layers.0.w"
        v10 = inst(wait_for(ctx, tmp, lambda r: inst(r, "late", T).get("step") == 10), "late", T).get("value")
        snap(base, 20, 0.0)
        snap(fa, 20, 0.001)    # the proxy stopped at 10: the latest complete step stays 10
        v20 = inst(wait_for(ctx, tmp, lambda r: inst(r, "late", T).get("step") == 20), "late", T).get("value")
        check(v10 and v20 and v20 < v10, f"judged live on step 20, the candidate's newest ({v20} < {v10} at 10)")
        check(dm.stop() == 0, "SIGTERM")
        dm.write_config(LATE_RULE.format(threshold=(v10 + v20) / 2))
        check(dm.start() is not None, "started again, the threshold between the two steps' values")
        time.sleep(2.5)    # the catch-up runs a second after the start
        late = inst(rules_of(ctx, tmp), "late", T)
        check(late.get("state") == "inactive" and late.get("step") == 20 and "alert 'late' firing" not in dm.log_text(),
              f"judged on step 20 again, not on the older complete step 10: inactive, no firing ({late})",
              dm.log_text()[-1500:])
    finally:
        harness.teardown(dm, tmp, ctx)


if __name__ == "__main__":
    sys.exit(main())
