#!/usr/bin/env python3
"""t96_study_waiting.py: a study that compares nothing says why; stale rows say so.

A new user's trial found three silences:
- a candidate saved at steps 5, 15, 25 beside a baseline at 0, 10, 20,
  with alignment.tolerance 0, is never compared, and `wdrift drift` said
  only "no results for study 'al' yet": it now names the candidate, its
  steps and the baseline's, and alignment.tolerance;
- a reload that raised alignment.tolerance to 5 compared none of the
  snapshots waiting (only a restart did): it now compares them at once;
- a reload that mistyped the study's baseline ("al-bsae") said nothing, and
  `drift` went on showing the old baseline's rows as "complete": the reload
  now warns, naming the run that has snapshots, and `drift` marks those
  rows stale (not complete; "stale" in --json). A study whose baseline has
  no snapshot at all says so under "no results", with the near name.
A later trial mistyped a candidate in a reload: only the reload's reply
said it, and `drift` went on showing the old candidate's rows unmarked.
Now `drift`, `studies` and `status` say which run sent nothing, with the
near name, and `drift` marks the old candidate's rows "former". And a
restart's line for the snapshots that wait names them, where it said
"3 snapshots without logged results: computing them again".
A real daemon and real `wdrift` commands; stopped by pid, temp dir removed.
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

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))

CONFIG = """\
listen:
  ingest: ipc://{d}/run/ingest.sock
  control: ipc://{d}/run/control.sock
  events: ipc://{d}/run/events.sock
storage:
  dir: {d}/var
compute:
  backend: cpu
alignment:
  tolerance: {tol}
studies:
  - name: al
    baseline: {base}
    candidates: [al-fa]
  - name: nb
    baseline: al-bse
    candidates: [al-fa]
"""

ADDED = """\
  - name: al2
    baseline: al2-base
    candidates: [al2-fa]
"""


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def snap(pub, step):
    v = (np.random.default_rng(step).standard_normal(1000) * 0.02).astype(np.float32)
    pub.tensor(step, "w", v, "f32")
    return pub.commit(step, 1)


def drift_json(cfg, study, timeout=10, until=None):
    """drift --json of study once it answers (and, with until, once until(reply) holds: the
    compute thread may have computed one step of several when it first answers)."""
    end, got = time.time() + timeout, None
    while time.time() < end:
        r = wd(cfg, "drift", study, "--json")
        if r.returncode == 0:
            got = json.loads(r.stdout)
            if until is None or until(got):
                return got
        time.sleep(0.2)
    return got


def said_under(cfg, study, key, text, part, what):
    """`wdrift drift STUDY` says text on a line of its own under the rows, labelled key, and
    --json has part in "key"; asked until it does, for 10 s (the step may still be computed)."""
    want, end = "\n%-10s %s" % (key, text), time.time() + 10
    r = wd(cfg, "drift", study)
    while not (r.returncode == 0 and want in r.stdout) and time.time() < end:
        time.sleep(0.2)
        r = wd(cfg, "drift", study)
    check(r.returncode == 0 and want in r.stdout, f"drift: {what}", r.stdout + r.stderr)
    got = drift_json(cfg, study)
    check(got is not None and part in got.get(key, ""), f"drift --json: \"{key}\"", json.dumps(got)[:1500])


def fresh(prefix):
    """A temp dir, a ZeroMQ context, a daemon there and its config, CONFIG (tolerance 0)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    ctx = zmq.Context()
    dm = Daemon(tmp)
    cfg = os.path.join(tmp, "wdrift.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(d=tmp, tol=0, base="al-base"))
    return tmp, ctx, dm, cfg


def main():
    tmp, ctx, dm, cfg = fresh("wdrift-t96-")
    try:
        check(dm.start() is not None, "the daemon starts", dm.log_text())
        base, fa = Publisher(ctx, tmp, "al-base"), Publisher(ctx, tmp, "al-fa")
        acks = [snap(base, s) for s in (0, 10, 20)] + [snap(fa, s) for s in (5, 15, 25)]
        check(all(a and a.get("type") == "ack" for a in acks), "six snapshots durable")
        time.sleep(0.5)
        r = wd(cfg, "drift", "al")
        check(r.returncode == 1 and "no results for study 'al' yet; candidate 'al-fa' has 3 snapshots "
              "(steps 5 to 25), none within alignment.tolerance (0) of a step of the baseline's 3 snapshots (steps 0 to 20)"
              in r.stderr and "need alignment.tolerance" in r.stderr,
              "drift of a study whose candidate never meets the baseline: says why", r.stderr)
        r = wd(cfg, "studies")
        check(r.returncode == 0 and "waiting   study 'al': no results yet; candidate 'al-fa' has 3 snapshots "
              "(steps 5 to 25), none within alignment.tolerance (0)" in r.stdout
              and "waiting   study 'nb': no results yet; its baseline 'al-bse' has no snapshot" in r.stdout,
              "studies: a study stuck says why, under the table", r.stdout + r.stderr)
        r = wd(cfg, "status")
        check(r.returncode == 0 and "studies    2; with no results yet: al, nb (wdrift studies says why)"
              in r.stdout, "status names the studies with no results", r.stdout + r.stderr)
        r = wd(cfg, "studies", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        al = [s for s in doc.get("studies", []) if s.get("name") == "al"]
        check(al and al[0].get("latest", 0) is None and "none within" in al[0].get("waiting", ""),
              "studies --json: latest null, waiting says why", r.stdout)
        r = wd(cfg, "drift", "al", "--step", "10")
        check(r.returncode == 1 and "no results for study 'al' yet; the baseline has a snapshot at step "
              "10, and no candidate or proxy has one within alignment.tolerance (0) of it that aligns to it"
              in r.stderr,
              "drift --step at a baseline step that no run meets: says why", r.stderr)
        r = wd(cfg, "drift", "al", "--step", "5")
        check(r.returncode == 1 and "the baseline 'al-base' has no snapshot at step 5: it has 3 snapshots "
              "(steps 0 to 20), and rows are made at the baseline's steps" in r.stderr,
              "drift --step at a step the baseline lacks: says so", r.stderr)
        r = wd(cfg, "drift", "nb")
        check(r.returncode == 1 and "no results for study 'nb' yet; its baseline 'al-bse' has no snapshot "
              "yet, and 'al-base' (a run of study 'al') has some: a typo, or has 'al-bse' not sent yet?"
              in r.stderr,
              "drift of a study whose baseline has no snapshot: names the near run, and whose it is",
              r.stderr)
        # A restart: the candidate's snapshots still meet no baseline step.
        # They wait, as before; the start-up said "6 snapshots without logged
        # results: computing them again" at every restart, naming none, and
        # counting al-fa's three twice, once for each study that names it.
        check(dm.stop() == 0 and dm.start() is not None, "a restart")
        log = dm.log_text()
        restart = log[log.rfind("stopped"):]
        check("without logged results" not in restart
              and "compute: 3 snapshots with no baseline step within alignment.tolerance (0) yet, waiting "
              "for one: 'al-fa' step 5 (study 'al'), 'al-fa' step 15 (study 'al'), 'al-fa' step 25 (study "
              "'al')\n" in restart,
              "... says which snapshots wait for a baseline step, not that they are computed again",
              restart[-3000:])

        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base"))
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "alignment.tolerance: 0 -> 5" in r.stdout and "warning" not in r.stdout,
              "reload to tolerance 5", r.stdout + r.stderr)
        got = drift_json(cfg, "al", until=lambda d: d["step"] == 20)
        check(got is not None and got["step"] == 20 and got["complete"] and "stale" not in got,
              "... compares the snapshots that waited, at once: step 20 complete", json.dumps(got))
        check("(alignment.tolerance changed by reload): computed at 3 of the 3" in dm.log_text(),
              "... the log says so", dm.log_text()[-1500:])
        # baseline step 30: the candidate's 25 is within 5 of it, but as near 20, the lower
        check((snap(base, 30) or {}).get("type") == "ack", "baseline step 30 durable")
        time.sleep(0.5)
        r = wd(cfg, "drift", "al", "--step", "30")
        check(r.returncode == 1 and "no results for study 'al' at step 30" in r.stderr
              and "no candidate or proxy has one within alignment.tolerance (5) of it that aligns to it "
              "(a step aligns to the nearest baseline step, and to the earlier of two as near" in r.stderr
              and "not compared yet" not in r.stderr,
              "drift --step 30: the candidate's 25 belongs to 20, and is not said to wait for 30",
              r.stderr)
        r = wd(cfg, "studies", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        al = [s for s in doc.get("studies", []) if s.get("name") == "al"]
        check(al and al[0].get("latest") == 20 and "waiting" not in al[0],
              "studies --json: the latest step with results, and no 'waiting'", r.stdout)
        r = wd(cfg, "status", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(doc.get("studies") == {"configured": 2, "no_results": ["nb"], "runs_silent": []},
              "status --json: studies configured, and those with no results", r.stdout)
        # the candidate goes on past the baseline's latest step (a baseline that stopped): said under
        # the rows, where every view had said all was well at the baseline's last step (a trial)
        check(all((snap(fa, s) or {}).get("type") == "ack" for s in (40, 50)), "candidate steps 40 and 50 durable")
        said_under(cfg, "al", "ahead", "'al-fa' (candidate) has 2 snapshots past the latest step of baseline "
                   "'al-base', 30 (steps 40 to 50): compared when the baseline sends those steps; the baseline's "
                   "last snapshot came ",
                   "(steps 40 to 50)", "the candidate's steps past the baseline's latest are said")

        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-bsae"))
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "warning   study 'al': baseline 'al-bsae' has no snapshot, and "
              "'al-base', its baseline before this reload, has some: a typo?" in r.stdout,
              "a reload that mistypes the baseline warns, naming the baseline it had",
              r.stdout + r.stderr)
        check("warning: reload: study 'al': baseline 'al-bsae' has no snapshot" in dm.log_text(),
              "... in the daemon's log too")
        r = wd(cfg, "reload", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(len(doc.get("changes", {}).get("warnings", [])) == 0,
              "a reload that changes nothing more warns no more (the name is not new)", r.stdout)
        r = wd(cfg, "status", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check("al" in doc.get("studies", {}).get("no_results", []),
              "status: a study whose rows are all against its old baseline has no results", r.stdout)
        r = wd(cfg, "studies")
        check(r.returncode == 0 and "waiting   study 'al': no results yet; its baseline 'al-bsae' has no "
              "snapshot: did you mean 'al-base'" in r.stdout,
              "studies: latest none, and why: the baseline a reload mistyped", r.stdout + r.stderr)
        r = wd(cfg, "drift", "al")
        check(r.returncode == 0 and "stale      the study's baseline is now 'al-bsae' (a reload), and these "
              "rows compared 'al-base': nothing is compared against the new one at this step" in r.stdout
              and "complete" not in r.stdout,
              "drift shows the old rows as stale, not complete", r.stdout + r.stderr)
        got = drift_json(cfg, "al")
        check(got is not None and got["complete"] is False and "al-bsae" in got.get("stale", "")
              and got["missing"] == ["al-fa"],
              "drift --json: complete false, stale says why, and every run is missing (a trial's "
              "consumer read \"missing\": [] as nothing missing)", json.dumps(got)[:1500])

        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base"))
        r = wd(cfg, "reload")
        got = drift_json(cfg, "al")
        check(r.returncode == 0 and got is not None and got["complete"] and "stale" not in got,
              "the baseline set right again: complete, not stale", json.dumps(got))
        lines = [x for x in dm.log_text().splitlines() if "compute: study 'al' (" in x]
        check(lines and "computed at 0 of the 4 durable steps of baseline 'al-base' held (3 with results "
              "already, 1 with no snapshot of its runs aligned)" in lines[-1],
              "... and its log line says why nothing was computed (not 'at 0 of the 4' alone)", lines[-1:])

        # A study added beside 'al', whose runs have not sent yet: their names
        # are near 'al-base' and 'al-fa', which study 'al' names: no typo.
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base") + ADDED)
        r = wd(cfg, "reload", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(doc.get("changes", {}).get("studies", {}).get("added") == ["al2"]
              and not doc.get("changes", {}).get("warnings"),
              "a study added whose runs have not sent yet: no typo warning (their near names "
              "are another study's runs)", r.stdout + r.stderr)
        why = ("its baseline 'al2-base' has no snapshot yet, and 'al-base' (a run of study 'al') has some: a "
               "typo, or has 'al2-base' not sent yet?")
        check(doc.get("changes", {}).get("waiting") == {"al2": why},
              "... and said to compare nothing yet, with why, as `wdrift studies` says it (a trial's reload "
              "said only 'studies added')", r.stdout + r.stderr)
        check("notice: reload: study 'al2' added, and it compares nothing yet; " + why in dm.log_text(),
              "... and the daemon's log says it, for SIGHUP", dm.log_text()[-2000:])
        with open(cfg, "w") as f:  # the table: one more study, its runs far from any name
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base") + ADDED
                    + "  - name: zz\n    baseline: zz-main\n    candidates: [zz-fast]\n")
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "studies   added: zz\nwaiting   study 'zz': no results yet; its baseline "
              "'zz-main' has no snapshot yet\n" in r.stdout and "study 'al2'" not in r.stdout,
              "reload's table: the study added says why it waits, under the changes; the one added before, "
              "not again", r.stdout + r.stderr)
        r = wd(cfg, "studies")
        check(r.returncode == 0 and "waiting   study 'al2': no results yet; its baseline 'al2-base' has no "
              "snapshot yet, and 'al-base' (a run of study 'al') has some: a typo, or has 'al2-base' not "
              "sent yet?" in r.stdout,
              "... studies says why it waits, as drift does, naming whose run the near one is",
              r.stdout + r.stderr)
        r = wd(cfg, "drift", "al2")
        check(r.returncode == 1 and "its baseline 'al2-base' has no snapshot yet, and 'al-base' "
              "(a run of study 'al') has some" in r.stderr, "... and drift the same", r.stderr)
        # a study there before names a new run near one another study names: asked, not accused
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base").replace(
                "    baseline: al-bse\n    candidates: [al-fa]",
                "    baseline: al-bse\n    candidates: [al-fa]\n    proxies: {lp: al-fb}") + ADDED)
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "warning   study 'nb': proxy 'al-fb' has no snapshot, and 'al-fa' (a run "
              "of study 'al') has some: a typo, or has 'al-fb' not sent yet?" in r.stdout,
              "a new proxy of a study there before, near another study's run: the warning asks",
              r.stdout + r.stderr)
        # a candidate added beside one that stays: asked, not called a typo of it
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base").replace(
                "    baseline: al-bse\n    candidates: [al-fa]",
                "    baseline: al-bse\n    candidates: [al-fa]\n    proxies: {lp: al-fb}").replace(
                "    baseline: al-base\n    candidates: [al-fa]", "    baseline: al-base\n    candidates: [al-fa, al-fd]")
                + ADDED)
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "warning   study 'al': candidate 'al-fd' has no snapshot, and 'al-fa' (a run "
              "of study 'al') has some: a typo, or has 'al-fd' not sent yet? (until a run of that name sends, "
              "the study has no rows of it)" in r.stdout and "before this reload" not in r.stdout,
              "a candidate added beside the one it is near: asked, and nothing said to be former",
              r.stdout + r.stderr)
        # ... but when the near run held that very part of the study before, it is the typo, plain
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base").replace(
                "    baseline: al-bse\n    candidates: [al-fa]", "    baseline: al-bse\n    candidates: [al-fc]")
                + ADDED)
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "warning   study 'nb': candidate 'al-fc' has no snapshot, and 'al-fa', its "
              "candidate before this reload, has some: a typo?" in r.stdout,
              "a study's candidate renamed to a near name that has sent nothing: named as the one it had, "
              "though another study names it too", r.stdout + r.stderr)

        # A reload that mistypes a candidate ("al-af"): the study keeps its
        # latest rows, of the old candidate, and every command says that the
        # new name has sent nothing, and that those rows are a former one's.
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=5, base="al-base").replace(
                "    baseline: al-bse\n    candidates: [al-fa]", "    baseline: al-bse\n    candidates: [al-fb]")
                .replace("    baseline: al-base\n    candidates: [al-fa]",
                         "    baseline: al-base\n    candidates: [al-af]") + ADDED)
        r = wd(cfg, "reload")
        check(r.returncode == 0 and "warning   study 'al': candidate 'al-af' has no snapshot, and 'al-fa', its "
              "candidate before this reload, has some: a typo? (until a run of that name sends, the study has "
              "no rows of it, and `wdrift drift` shows the old candidate's rows as former)" in r.stdout,
              "a reload that mistypes a candidate warns", r.stdout + r.stderr)
        end = time.time() + 10
        while time.time() < end and "with no snapshot at all: candidate 'al-af'" not in dm.log_text():
            time.sleep(0.1)
        lines = [x for x in dm.log_text().splitlines() if "compute: study 'al' (" in x]
        check(lines and "with results already" in lines[-1]
              and lines[-1].endswith("; with no snapshot at all: candidate 'al-af'"),
              "the reload's backfill line names the candidate with no snapshot (not only 'with results "
              "already', which counts the runs that have some)", lines[-1:])
        # named as the study's own before the reload, as the reload's warning named it
        silent = ("candidate 'al-af' has no snapshot: did you mean 'al-fa', its candidate before a reload, "
                  "which has some (a typo in the study's candidates)?")
        r = wd(cfg, "drift", "al")
        check(r.returncode == 0 and "incomplete not compared at this step yet: al-af" in r.stdout
              and "silent     " + silent in r.stdout
              and "former     al-fa: is no candidate of the study now (a reload); its rows are from before it"
              in r.stdout and "candidate  al-fa (former: no candidate of the study now)" in r.stdout,
              "drift: the mistyped candidate is silent, and the rows shown are the former one's",
              r.stdout + r.stderr)
        got = drift_json(cfg, "al")
        check(got is not None and got["complete"] is False and got["missing"] == ["al-af"]
              and got.get("silent") == silent and got["candidates"]["al-fa"].get("former") is True,
              "drift --json: missing, silent, and former", json.dumps(got)[:2000])
        r = wd(cfg, "studies")
        check(r.returncode == 0 and "silent    study 'al': " + silent in r.stdout,
              "studies: the study with results says which of its runs sent nothing", r.stdout + r.stderr)
        r = wd(cfg, "studies", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        al = [s for s in doc.get("studies", []) if s.get("name") == "al"]
        check(al and al[0].get("latest") == 20 and al[0].get("silent") == silent and "waiting" not in al[0],
              "studies --json: latest, and silent", r.stdout)
        r = wd(cfg, "status")
        check(r.returncode == 0 and "studies    3; with no results yet: nb, al2; with a run that has sent "
              "nothing: al (wdrift studies says why)" in r.stdout, "status names it", r.stdout + r.stderr)
        r = wd(cfg, "status", "--json")
        doc = json.loads(r.stdout) if r.returncode == 0 else {}
        check(doc.get("studies", {}).get("runs_silent") == ["al"], "status --json: runs_silent", r.stdout)

        # the former candidate sends again: it is told that a reload took it
        # out of the study, and which name took its place; a trial's was told
        # "did you mean 'al-af'?", the typo, and the daemon's log said nothing
        w = fa.hello()
        left = ("run 'al-fa' belongs to no study since a reload took it out of study 'al', which names "
                "'al-af' now, a run that has sent nothing (a typo in the config?): its snapshots are "
                "stored but never compared")
        check(w and w.get("type") == "welcome" and left in w.get("notice", "")
              and "did you mean" not in w.get("notice", ""),
              "the former candidate's welcome: taken out by a reload, and by which name", json.dumps(w))
        check((snap(fa, 35) or {}).get("type") == "ack", "its next snapshot is stored")
        check(dm.log_text().count("notice: " + left) == 1,
              "... and the daemon's log says it once", dm.log_text()[-1500:])

        # --json on failure: the error as JSON on stdout too, exit 1
        r = wd(cfg, "drift", "nosuch", "--json")
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        check(r.returncode == 1 and doc.get("ok") is False and "no study 'nosuch'" in doc.get("error", "")
              and "no study 'nosuch'" in r.stderr, "drift --json on failure: {\"ok\": false, \"error\"}",
              r.stdout + r.stderr)
        r = wd(cfg, "runs", "rm", "nosuch", "--json")
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        check(r.returncode == 1 and doc.get("ok") is False and r.stderr.startswith("wdrift runs rm: error: "),
              "runs rm: JSON on failure, and its messages say 'wdrift runs rm' (not 'wdrift runs')",
              r.stdout + r.stderr)
        bad = os.path.join(tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write(open(cfg).read().replace("tolerance: 5", "tolerance: five"))
        r = wd(bad, "reload", "--json")
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        check(r.returncode == 1 and "\n(a wdriftd started before this edit" in doc.get("error", "")
              and "\\n(a wdriftd" in r.stdout and "u000a" not in r.stdout,
              "a message of two lines, as JSON: the line break written \\n", r.stdout + r.stderr)
        # a YAML syntax error (a trial's reload refused it): the control socket is still read from the
        # file's lines, and status asks it all the same, with a warning
        with open(bad, "w") as f:
            f.write(open(cfg).read() + "alerts: [\n")
        r = wd(bad, "status")
        check(r.returncode == 0 and "syntax error" in r.stderr
              and f"asked all the same at its listen.control, ipc://{tmp}/run/control.sock: " in r.stderr
              and r.stdout.startswith("wdriftd "),
              "status on a file that does not parse as YAML: the error as a warning, and the daemon asked",
              r.stdout + r.stderr + open(bad).read())
        r = wd(cfg, "drift", "al", "--step", "7", "--json")
        doc = json.loads(r.stdout) if r.stdout.strip() else {}
        check(r.returncode == 1 and "no results for study 'al' at step 7" in doc.get("error", ""),
              "... and for a step with no results", r.stdout + r.stderr)

        # The file edited beside the config that runs: status says so, and,
        # after a refused reload (SIGHUP, as `systemctl reload` sends, whose
        # caller reads no reply), why; a trial saw nothing of it in status.
        with open(cfg) as f:
            running = f.read()
        doc = json.loads(wd(cfg, "status", "--json").stdout or "{}")
        check("config_pending" in doc and doc["config_pending"] is None,
              "status --json: config_pending null while the file holds what runs", json.dumps(doc)[:300])
        with open(cfg, "w") as f:
            f.write(running + "# an edit a reload takes\n")
        r = wd(cfg, "status")
        check(r.returncode == 0 and "           not running: the file changed since the config that runs was "
              "read from it: `wdrift reload` applies it" in r.stdout, "status: the file edited, not reloaded",
              r.stdout + r.stderr)
        # an edit a reload would refuse is said so before anyone tries (an ops trial's status said "`wdrift
        # reload` applies it" of a file with a bad value), and /metrics' wdrift_config_pending is 1 either way
        with open(cfg, "w") as f:
            f.write(running + "log:\n  level: verbose\n")
        r = wd(cfg, "status", "--endpoint", f"ipc://{tmp}/run/control.sock")
        check(r.returncode == 0 and "not running: the file changed since the config that runs was read from it, "
              "and a reload would refuse it: " in r.stdout and "log.level: bad value 'verbose'" in r.stdout and
              "(the config that runs stays until the file is fixed and reloaded)" in r.stdout
              and "applies it" not in r.stdout, "status: a file a reload would refuse is said so, with why",
              r.stdout + r.stderr)
        with open(cfg, "w") as f:
            f.write(running.replace("/run/ingest.sock", "/run/ingest2.sock"))
        r = wd(cfg, "status")
        check(r.returncode == 0 and "a reload would refuse it: " in r.stdout and "listen.ingest" in r.stdout and
              "restart wdriftd" in r.stdout, "... a restart key's edit too, naming the key", r.stdout + r.stderr)
        dm.proc.send_signal(signal.SIGHUP)
        end = time.time() + 10
        while time.time() < end and "reload refused" not in dm.log_text():
            time.sleep(0.1)
        r = wd(cfg, "status")
        check(r.returncode == 0 and "not running: the file differs from the config that runs: its reload was "
              "refused: " in r.stdout and "listen.ingest" in r.stdout and "restart wdriftd" in r.stdout,
              "status: a reload refused (SIGHUP), with why", r.stdout + r.stderr)
        # listen.control edited too: the CLI reads the file, and finds no socket
        # there; it names the one beside it that the running daemon answers at
        with open(cfg, "w") as f:
            f.write(running.replace("/run/control.sock", "/run/control2.sock"))
        r = wd(cfg, "status")
        check(r.returncode == 1 and f"(ipc://{tmp}/run/control2.sock; did you mean 'ipc://{tmp}/run/control.sock'?): "
              "is wdriftd running?" in r.stderr, "status with listen.control edited: the socket beside it is named",
              r.stderr)
        r = wd(cfg, "reload")
        check(r.returncode == 1 and "did you mean" in r.stderr and "(a listen.* key edited in the config takes a "
              "restart of wdriftd, not a reload: until then it answers where it bound, --endpoint that)" in r.stderr,
              "reload with listen.control edited: it says a listen.* edit takes a restart (a trial's did not)",
              r.stderr)
        with open(cfg, "w") as f:
            f.write(running)
        doc = json.loads(wd(cfg, "status", "--json").stdout or "{}")
        check("config_pending" in doc and doc["config_pending"] is None,
              "the file set back: nothing pending", json.dumps(doc)[:300])
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)
    one_snapshot()
    proxy_typo()
    refused_not_silent()
    return harness.summary()


OWN = """\
limits:
  pending_timeout: 2
studies:
  - name: own
    baseline: mlp-base
    candidates: [mlp-fa, mlp-back, mlp-kill]
  - name: other
    baseline: o-base
    candidates: [o-fa]
"""


def refused_not_silent():
    """A candidate whose one step expired incomplete (a rank that died) sent something: it is not
    'no snapshot: did you mean ...' another run (a trial's was offered 'mlp-kill2' beside the expired
    line); and a candidate that sent nothing is no typo of its own study's baseline (a trial's
    'mlp-back' was offered 'mlp-base')."""
    tmp, ctx, dm, cfg = fresh("wdrift-t96-refused-")
    try:
        with open(cfg, "w") as f:
            f.write(CONFIG.format(d=tmp, tol=0, base="x").split("studies:")[0] + OWN)
        check(dm.start() is not None, "refused: the daemon starts", dm.log_text())
        for run in ("mlp-base", "mlp-fa"):
            check((snap(Publisher(ctx, tmp, run), 0) or {}).get("type") == "ack", f"{run} step 0 durable")
        kill = Publisher(ctx, tmp, "mlp-kill")
        v = np.zeros(500, np.float32)
        kill.tensor(0, "w", v, "f32", offset=0, total=1000)
        kill.send_raw([json.dumps({"v": 1, "type": "commit", "run": "mlp-kill", "step": 0, "tensors": 1,
                                   "ranks": 2, "rank": 0}).encode()])
        kill.s.setsockopt(zmq.RCVTIMEO, 8000)
        e = kill.recv()
        check(e and e.get("code") == "incomplete", f"mlp-kill step 0 expired incomplete ({e})")
        r = wd(cfg, "drift", "own")
        silent = [x for x in r.stdout.splitlines() if x.startswith("silent")]
        said = " ".join(silent)
        check(r.returncode == 0 and "candidate 'mlp-kill' has no snapshot stored: what it sent was refused, 1 step "
              "that expired incomplete (the latest, step 0: a rank that died?)" in said and "\nexpired" in r.stdout,
              "drift: a candidate whose step expired is said refused, beside the expired line", r.stdout + r.stderr)
        check("candidate 'mlp-back' has no snapshot yet" in said and "did you mean" not in said
              and "'mlp-base' (a run of study" not in said,
              "drift: a silent candidate is not offered its own study's baseline, nor the expired run another name",
              r.stdout)
        # the report says it too: the drift log has no row of why (a trial's page left mlp-kill out unsaid)
        page = os.path.join(tmp, "own.html")
        r = wd(cfg, "report", "own", "-o", page)
        html = open(page, encoding="utf-8").read() if r.returncode == 0 else ""
        says = html[html.find('id="daemon-says"'):html.find("<h2>", html.find('id="daemon-says"'))]
        check(r.returncode == 0 and "At step 0, the latest it compared, as <code>wdrift drift own</code> says it" in says
              and "<tr><th>expired</th><td>&#39;mlp-kill&#39; (candidate): 1 step expired incomplete" in says.replace("'", "&#39;")
              and "candidate &#39;mlp-kill&#39; has no snapshot stored: what it sent was refused" in says.replace("'", "&#39;")
              and "<tr><th>never</th>" in says,
              "report: what wdriftd says of the study (expired, silent, never), as drift says it", says or r.stderr)
        # --log FILE: a log of any daemon's, maybe not this config's: not asked (a review's paired them)
        log = os.path.join(tmp, "var", "drift", "own.h5")
        r = wd(cfg, "report", "own", "--log", log, "-o", page)
        html = open(page, encoding="utf-8").read() if r.returncode == 0 else ""
        check(r.returncode == 0 and "Not asked of wdriftd (--log FILE: a drift log of any daemon&#39;s)"
              in html.replace("'", "&#39;") and "At step 0, the latest it compared" not in html,
              "report --log FILE -c CFG: the daemon not asked, and the page says so", r.stderr)
        # --log of another study's log: said, not drawn as this study's in silence (a trial's)
        r = wd(cfg, "report", "other", "--log", log, "-o", page)
        check(r.returncode == 0 and f"wdrift report: warning: {log} holds runs (" in r.stderr
              and f"of which study 'other' in {cfg} names none: another study's drift log?" in r.stderr,
              "report STUDY --log of another study's log: a warning naming both", r.stderr)
    finally:
        harness.teardown(dm, tmp, ctx)


TYPO = """\
studies:
  - name: st
    baseline: st-base
    candidates: [st-fa]
    proxies: {bf: st-bf}
  - name: st2
    baseline: st2-base
    candidates: [st2-fa]
    proxies: {bf: st2-bf}
  - name: st3
    baseline: st3-base
    candidates: [st3-fa]
    proxies: {bf: st3-bf}
"""


def proxy_typo():
    """A proxy published under a typo ('st2-fb' for 'st2-bf'), beside a candidate 'st2-fa' that
    publishes and another study's proxy 'st-bf': the publisher is asked 'did you mean st2-bf',
    the name that has sent nothing, not the candidate; and drift says the silent proxy is near
    the run in no study, not near the other study's proxy (a trial got both the other way)."""
    tmp, ctx, dm, cfg = fresh("wdrift-t96-typo-")
    try:
        with open(cfg, "w") as f:     # CONFIG's sockets and storage, these studies
            f.write(CONFIG.format(d=tmp, tol=0, base="st-base").split("studies:")[0] + TYPO)
        check(dm.start() is not None, "typo: the daemon starts", dm.log_text())
        for run in ("st-base", "st-fa", "st-bf", "st2-base", "st2-fa"):
            check((snap(Publisher(ctx, tmp, run), 0) or {}).get("type") == "ack", f"{run} step 0 durable")
        typo = Publisher(ctx, tmp, "st2-fb")
        hello = typo.hello() or {}
        check("run 'st2-fb' belongs to no study" in hello.get("notice", "")
              and hello.get("notice", "").endswith("did you mean 'st2-bf'?"),
              "the typo's welcome asks for the proxy that has sent nothing, not the candidate 'st2-fa'",
              json.dumps(hello))
        check((snap(typo, 0) or {}).get("type") == "ack", "st2-fb step 0 durable")
        time.sleep(0.5)
        r = wd(cfg, "drift", "st2")
        check(r.returncode == 0 and "proxy 'st2-bf' has no snapshot: did you mean 'st2-fb', which has some" in r.stdout
              and "'st-bf'" not in r.stdout,
              "drift: the silent proxy is near 'st2-fb', the run in no study, not another study's proxy",
              r.stdout + r.stderr)
        # a proxy saved at other steps than the baseline's: said under the rows, not "not compared
        # at this step yet" alone, which it never would be (a trial)
        for run, steps in (("st3-base", (0, 10)), ("st3-fa", (0, 10)), ("st3-bf", (5, 15))):
            pub = Publisher(ctx, tmp, run)
            check(all((snap(pub, s) or {}).get("type") == "ack" for s in steps), f"{run} durable")
        time.sleep(0.5)
        said_under(cfg, "st3", "unaligned", "proxy 'st3-bf' has 2 snapshots (steps 5 to 15), none within "
                   "alignment.tolerance (0) of a step of the baseline's 2 snapshots (steps 0 to 10): compared at "
                   "no step until one is;", "proxy 'st3-bf'", "a proxy none of whose steps aligns is said")
        r = wd(cfg, "drift", "st3")
        check(r.returncode == 0 and "incomplete not compared at this step, and not on its way: st3-bf" in r.stdout
              and "\nnever      'st3-bf' (proxy bf): sends at other steps than the baseline's, none of its snapshots "
              "at or within alignment.tolerance (0) of one (the unaligned line)" in r.stdout
              and "not compared at this step yet" not in r.stdout,
              "drift: the unaligned proxy is not said to be on its way (a trial's 'yet')", r.stdout + r.stderr)
        r = wd(cfg, "studies")
        check(r.returncode == 0 and "\nunaligned study 'st3': proxy 'st3-bf' has 2 snapshots (steps 5 to 15)" in r.stdout,
              "studies says it too, as drift does (a trial saw it in drift alone)", r.stdout + r.stderr)
        # a proxy whose steps are all past the baseline's latest: ahead, not unaligned (the baseline may
        # yet send them; a review's was told it needs alignment.tolerance)
        pub = Publisher(ctx, tmp, "st2-bf")
        check(all((snap(pub, s) or {}).get("type") == "ack" for s in (20, 30)), "st2-bf steps 20, 30 durable")
        said_under(cfg, "st2", "ahead", "'st2-bf' (proxy bf) has 2 snapshots past the latest step of baseline "
                   "'st2-base', 0 (steps 20 to 30)", "'st2-bf'", "a proxy only ahead of the baseline is said ahead")
        r = wd(cfg, "drift", "st2")
        check("unaligned" not in r.stdout, "... and not unaligned", r.stdout)
    finally:
        harness.teardown(dm, tmp, ctx)


def one_snapshot():
    """A run with one snapshot is "1 snapshot (step 7)", and so is a baseline's one (a
    trial read "1 snapshots (steps 40 to 40)")."""
    tmp, ctx, dm, cfg = fresh("wdrift-t96-one-")
    try:
        check(dm.start() is not None, "one snapshot each: the daemon starts", dm.log_text())
        acks = [snap(Publisher(ctx, tmp, "al-base"), 0), snap(Publisher(ctx, tmp, "al-fa"), 7)]
        check(all(a and a.get("type") == "ack" for a in acks), "two snapshots durable")
        time.sleep(0.3)
        r = wd(cfg, "drift", "al")
        check(r.returncode == 1 and "candidate 'al-fa' has 1 snapshot (step 7), none within alignment.tolerance "
              "(0) of a step of the baseline's 1 snapshot (step 0)" in r.stderr,
              "one snapshot: said in the singular, with its step", r.stderr)
    finally:
        harness.teardown(dm, tmp, ctx)


if __name__ == "__main__":
    sys.exit(main())
