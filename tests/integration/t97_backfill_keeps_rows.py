#!/usr/bin/env python3
"""t97_backfill_keeps_rows.py: a reload's backfill keeps the rows it did not compute.

A study with candidates al-fa and al-fb has results at steps 0 and 10. A
reload takes al-fb out and adds a synthetic proxy, so its backfill computes
both steps again, for al-fa and the synthetic proxy. The step's results
the daemon keeps for `wdrift drift` used to be replaced by what the
backfill computed: al-fb's rows left `drift` (the drift log kept them), so
a user who had just watched al-fb drift saw it vanish without a word. Now
the kept step keeps al-fb's rows beside the new ones, marked former, and
so after a restart, which replays the same results. And al-fb, sending
again after the restart, is told that the config took it out of study
al, as it was after the reload, where it had been asked "did you mean
'al-fa'?".
A real daemon and real `wdrift` commands; stopped by pid, temp dir removed.
"""
import json
import os
import re
import shlex
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

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

CONFIG = """\
listen:
  ingest: ipc://{d}/run/ingest.sock
  control: ipc://{d}/run/control.sock
  events: ipc://{d}/run/events.sock
  metrics: 127.0.0.1:{port}
storage:
  dir: {d}/var
compute:
  backend: cpu
alignment:
  tolerance: 8
studies:
  - name: nb
    baseline: nb-base
    candidates: [nb-x, nb-y]
  - name: al
    baseline: al-base
    candidates: [{candidates}]
{extra}"""

ALERT = """\
alerts:
  - name: al-w1
    study: al
    metric: w1
    threshold: 0
"""


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def snap(pub, step, seed):
    v = (np.random.default_rng(step * 7 + seed).standard_normal(1000) * 0.02).astype(np.float32)
    pub.tensor(step, "w", v, "f32")
    return pub.commit(step, 1)


def drift_json(cfg, *args, study="al", want=lambda d: True, timeout=15):
    """`wdrift drift STUDY --json ARGS` once it answers and want(doc) holds; the last doc otherwise."""
    end, doc = time.time() + timeout, None
    while time.time() < end:
        r = wd(cfg, "drift", study, "--json", *args)
        if r.returncode == 0:
            doc = json.loads(r.stdout)
            if want(doc):
                return doc
        time.sleep(0.2)
    return doc


def w1_of(doc, run):
    """The w1 of run's layer 'w' in a drift --json doc (every run is under "candidates"), or None."""
    for layer in (doc or {}).get("candidates", {}).get(run, {}).get("layers", []):
        if layer.get("name") == "w":
            return layer.get("w1")
    return None


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t97-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg, port = os.path.join(tmp, "wdrift.yaml"), harness.free_port()
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, port=port, candidates="al-fa, al-fb", extra=""))
        check(dm.start() is not None, "the daemon starts", dm.log_text())
        pubs = {r: Publisher(ctx, tmp, r) for r in ("al-base", "al-fa", "al-fb")}
        acks = [snap(p, s, i) for s in (0, 10) for i, p in enumerate(pubs.values())]
        check(all(a and a.get("type") == "ack" for a in acks), "six snapshots durable")
        before = drift_json(cfg, want=lambda d: d.get("step") == 10 and d.get("complete"))
        fb_before = w1_of(before, "al-fb")
        check(before and fb_before is not None and w1_of(before, "al-fa") is not None,
              "before the reload: step 10 has rows of al-fa and al-fb", json.dumps(before)[:1500])

        # A step computed again because a run's step aligns to another
        # baseline step now (docs/daemon.md, "Alignment"): nb-x's step 16
        # belongs to baseline step 10 until step 20 arrives; then step 10 is
        # computed again without it, and its old row there is superseded,
        # not kept (the review's case: nb-x is still a candidate).
        nb = {r: Publisher(ctx, tmp, r) for r in ("nb-base", "nb-x", "nb-y")}
        acks = [snap(nb["nb-base"], 10, 0), snap(nb["nb-y"], 10, 1), snap(nb["nb-x"], 16, 2)]
        check(all(a and a.get("type") == "ack" for a in acks), "nb: baseline 10, nb-y 10, nb-x 16 durable")
        got = drift_json(cfg, "--step", "10", study="nb", want=lambda d: d.get("complete"))
        check(got and w1_of(got, "nb-x") is not None, "nb step 10 compares nb-x's step 16 first",
              json.dumps(got)[:1500])
        check((snap(nb["nb-base"], 20, 0) or {}).get("type") == "ack", "nb: baseline step 20 durable")
        got = drift_json(cfg, "--step", "20", study="nb", want=lambda d: w1_of(d, "nb-x") is not None)
        check(got and w1_of(got, "nb-x") is not None, "nb step 20 compares nb-x's 16 now", json.dumps(got)[:1500])
        got = drift_json(cfg, "--step", "10", study="nb", want=lambda d: "nb-x" not in d.get("candidates", {}))
        check(got and "nb-x" not in got.get("candidates", {}) and got.get("missing") == ["nb-x"]
              and got.get("complete") is False and w1_of(got, "nb-y") is not None,
              "nb step 10, computed again: nb-x's old row is not kept (its step belongs to 20), the step is "
              "incomplete and says so", json.dumps(got)[:1500])
        # nb-x lags: steps 30 of the baseline and nb-y, none of nb-x's. drift
        # of the latest step says where nb-x was compared last (a trial had to
        # guess --step after its candidate died)
        acks = [snap(nb["nb-base"], 30, 0), snap(nb["nb-y"], 30, 1)]
        check(all(a and a.get("type") == "ack" for a in acks), "nb: baseline and nb-y step 30 durable")
        got = drift_json(cfg, study="nb", want=lambda d: d.get("step") == 30)
        check(got and got.get("missing") == ["nb-x"] and got.get("missing_latest") == {"nb-x": 20},
              "drift --json: missing_latest gives the step nb-x was compared last", json.dumps(got)[:1500])
        r = wd(cfg, "drift", "nb")
        check(r.returncode == 0 and f"lagging    nb-x (candidate): compared last at step 20 (wdrift drift nb --step 20 -c {cfg})"
              in r.stdout, "drift: the lagging run, and the command that shows it, with the -c given",
              r.stdout + r.stderr)
        # the command as printed runs, also with a path a shell must have quoted (a trial's
        # copy of the hint, without its -c, found no config)
        spaced = os.path.join(os.path.dirname(cfg), "my wdrift's.yaml")
        os.symlink(cfg, spaced)
        r = wd(spaced, "drift", "nb")
        m = re.search(r"\(wdrift (drift nb --step 20 .*)\)$", r.stdout, re.M)
        again = subprocess.run([WDRIFT, *shlex.split(m.group(1))], capture_output=True, text=True,
                               timeout=60) if m else None
        check(m and again.returncode == 0 and again.stdout.startswith("study      nb, step 20,"),
              "... which runs as printed, the path shell-quoted", r.stdout + (again.stdout + again.stderr if again else ""))

        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, port=port, candidates="al-fa", extra="    synthetic_proxy: round:bf16\n"))
        r = wd(cfg, "reload")
        check(r.returncode == 0, "reload: al-fb out, a synthetic proxy in", r.stdout + r.stderr)
        end = time.time() + 15
        while time.time() < end and "computed at 2 of the 2" not in dm.log_text():
            time.sleep(0.2)
        check("computed at 2 of the 2" in dm.log_text(),
              "the reload's backfill computes both steps again (for the synthetic proxy)", dm.log_text()[-3000:])
        log = dm.log_text()
        check(not [x for x in log.splitlines() if "warning" in x and "al.h5" in x] and "al.h5': made for the proxy labels [], and the study has [round:bf16] "
              "now (a config change): rebuilding it with them from the write-ahead log" in log,
              "the drift log made again for the new proxy label is a notice that says why, not a warning "
              "(it was a warning, worded as for a damaged file)", log[-3000:])
        copies = sorted(f for f in os.listdir(os.path.join(tmp, "var", "drift")) if f.startswith("al.h5."))
        check(len(copies) == 1 and re.fullmatch(r"al\.h5\.proxies-changed-\d+\.1", copies[0])
              and f"moved the old drift log aside to '{os.path.join(tmp, 'var', 'drift', copies[0])}'" in log,
              "its copy is named for a change of proxies, not 'broken' (a trial read that as damage)",
              f"{copies} {log[-2000:]}")

        def kept(doc):
            fa = (doc or {}).get("candidates", {}).get("al-fa", {}).get("layers", [{}])
            return doc is not None and doc.get("step") == 10 and "al-fb" in doc.get("candidates", {}) and \
                bool(fa and fa[0].get("proxies"))

        for when in ("after the reload's backfill", "after a restart"):
            after = drift_json(cfg, want=kept)
            fb = (after or {}).get("candidates", {}).get("al-fb", {})
            check(kept(after) and fb.get("former") is True and w1_of(after, "al-fb") == fb_before,
                  f"{when}: step 10 keeps al-fb's rows, marked former, with the same w1",
                  json.dumps(after)[:2500])
            check(w1_of(after, "al-fa") is not None and after.get("complete") is True,
                  f"{when}: the step is complete, al-fa's rows and the synthetic proxy's beside them",
                  json.dumps(after)[:2500])
            r = wd(cfg, "drift", "al", "--step", "0")
            check(r.returncode == 0 and "former     al-fb: is no candidate of the study now" in r.stdout,
                  f"{when}: drift --step 0 shows al-fb as former too", r.stdout + r.stderr)
            if when == "after the reload's backfill":
                # a rule added now is judged at once on the latest complete
                # step (the catch-up): step 10, al-fb's rows kept beside
                with open(cfg, "a") as f:
                    f.write(ALERT)
                r = wd(cfg, "reload")
                check(r.returncode == 0 and "alerts    added: al-w1" in r.stdout, "reload: a rule added",
                      r.stdout + r.stderr)
                end, runs = time.time() + 10, []
                while time.time() < end and "al-fa" not in runs:
                    r = wd(cfg, "alerts", "--json")
                    rules = {a["name"]: a for a in json.loads(r.stdout)["alerts"]} if r.returncode == 0 else {}
                    runs = [i.get("run") for i in rules.get("al-w1", {}).get("instances", [])]
                    time.sleep(0.2)
                check("al-fa" in runs and "al-fb" not in runs,
                      "alerts: the rule added judges the study's candidate, not the former one whose rows are "
                      "kept beside it for drift", r.stdout)
                check(dm.stop() == 0 and dm.start() is not None, "a restart", dm.log_text()[-2000:])
        # al-fb sends again after the restart: told that the config took it
        # out of the study, as after the reload itself, not "did you mean
        # 'al-fa'" (the name beside it, which a trial had read as the fix)
        w = pubs["al-fb"].hello()
        left = ("run 'al-fb' belongs to no study since a config change before this start took it out of "
                "study 'al': its snapshots are stored but never compared")
        check(w and w.get("type") == "welcome" and left in w.get("notice", "")
              and "did you mean" not in w.get("notice", ""),
              "after a restart, the former candidate's welcome says the config took it out", json.dumps(w))
        check((snap(pubs["al-fb"], 20, 2) or {}).get("type") == "ack", "its next snapshot is stored")
        check(dm.log_text().count("notice: " + left) == 1, "... and the daemon's log says it once",
              dm.log_text()[-1500:])
        # and so after the restart, which judges the kept step again
        r = wd(cfg, "alerts", "--json")
        rules = {a["name"]: a for a in json.loads(r.stdout)["alerts"]} if r.returncode == 0 else {}
        runs = [i.get("run") for i in rules.get("al-w1", {}).get("instances", [])]
        check("al-fa" in runs and "al-fb" not in runs,
              "alerts after the restart: still no instance of the former candidate", r.stdout)
        # /metrics: a baseline step with only the synthetic proxy's row
        # yet hides no run's latest series (al-fa's is at step 10)
        check((snap(pubs["al-base"], 20, 0) or {}).get("type") == "ack", "baseline step 20 durable")
        body, end = "", time.time() + 15
        while time.time() < end:
            body = subprocess.run(["curl", "-sS", "-m", "5", f"http://127.0.0.1:{port}/metrics"],
                                  capture_output=True, text=True).stdout
            if 'wdrift_drift_step{study="al",run="round:bf16"' in body and \
                    'run="round:bf16",role="proxy"} 20' in body:
                break
            time.sleep(0.3)
        w1 = [x for x in body.splitlines() if x.startswith("wdrift_drift_w1{") and 'study="al"' in x]
        check(any('run="al-fa"' in x and 'role="candidate"' in x for x in w1)
              and any('run="round:bf16"' in x for x in w1),
              "/metrics: al-fa's series (step 10) beside the synthetic proxy's (step 20): a newer step with "
              "only the synthetic proxy's row hid it", "\n".join(w1) or body[-1500:])
        # al-fb named again by a reload: its kept rows at steps 0 and 10 are
        # its results there (the backfill does not compute them again), as
        # live so after a restart, which replays the records under this
        # config (a review found them dropped then: "missing" for ever)
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, port=port, candidates="al-fa, al-fb",
                                  extra="    synthetic_proxy: round:bf16\n") + ALERT)
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "studies   changed: al (candidates)" in r.stdout, "reload: al-fb back",
              r.stdout + r.stderr)
        for when in ("al-fb named again", "al-fb named again, after a restart"):
            got = drift_json(cfg, "--step", "10", want=lambda d: d.get("complete"))
            fb = (got or {}).get("candidates", {}).get("al-fb", {})
            check(got and got.get("complete") is True and "former" not in fb and w1_of(got, "al-fb") == fb_before,
                  f"{when}: step 10 is complete, al-fb's rows its own, not former", json.dumps(got)[:2000])
            if when == "al-fb named again":
                check(dm.stop() == 0 and dm.start() is not None, "a restart", dm.log_text()[-2000:])
        # `runs rm al-fb`, which the study still names: drift says it was
        # removed, not "a typo, or has 'al-fb' not sent yet?" with the
        # study's other candidate as the guess (a trial's, after runs rm)
        r = wd(cfg, "runs", "rm", "al-fb")
        check(r.returncode == 0, "runs rm al-fb", r.stdout + r.stderr)
        said = ("silent     candidate 'al-fb' has no snapshot since `wdrift runs rm al-fb` forgot its own: it "
                "sends again, or a reload takes it out of the study")
        for when in ("after runs rm", "after runs rm and a restart"):
            r = wd(cfg, "drift", "al")
            check(r.returncode == 0 and said in r.stdout and "a typo" not in r.stdout,
                  f"{when}: drift says the candidate was removed on purpose", r.stdout + r.stderr)
            if when == "after runs rm":
                check(dm.stop() == 0 and dm.start() is not None, "a restart", dm.log_text()[-2000:])
        check("did not stop cleanly" not in dm.log_text(), "clean restarts say nothing of an unclean stop",
              dm.log_text()[-1500:])
        # a stop with a snapshot partly received says it is not kept (a trial's SIGTERM said
        # "0 snapshots committing" only); a restart after SIGKILL says the stop was not clean
        # (a trial's logged as after a clean stop)
        pubs["al-fa"].tensor(40, "w", np.zeros(1000, np.float32), "f32")
        check((pubs["al-fa"].hello() or {}).get("type") == "welcome", "al-fa step 40: a tensor, no commit")
        check(dm.stop() == 0, "SIGTERM")
        check("stopping: 0 snapshots committing; 1 partly received, not kept (their publishers send them "
              "again)" in dm.log_text(), "the stop says the partly received snapshot is not kept",
              dm.log_text()[-800:])
        check(dm.start() is not None, "started again")
        pid, before = dm.proc.pid, len(dm.log_text())
        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL and dm.start() is not None, "SIGKILL, started again")
        log = dm.log_text()[before:]  # what the restart said (READY=1 may come before its "ready:" line)
        check(f"warning: the wdriftd before this one on this storage.dir (pid {pid}, " in log
              and "did not stop cleanly (killed, or a crash)" in log,
              "the restart after SIGKILL says the last stop was not clean, naming its pid", log[-1500:])
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
