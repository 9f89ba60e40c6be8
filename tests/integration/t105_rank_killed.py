#!/usr/bin/env python3
"""t105_rank_killed.py: a rank killed mid-job is said within seconds, not at the step's expiry.

A trial killed one rank of four (SIGKILL, real processes) after its step 10.
The other ranks' step 20 waited for it, and nothing said so until
limits.pending_timeout (600 s by default) expired the step: ten minutes of
silence per step. Now, once a rank's connection has closed and its
publisher has not come back for a few seconds while a step of its run waits
for that rank, the daemon logs it once, naming the run, the step, the rank
and the dead process. A job whose ranks all end normally, and a rank that
only reconnects, are not said. Three real publisher processes per job, a
real daemon; every process stopped by pid, the temp dir removed, also on
failure.

Once the step has expired (limits.pending_timeout, 20 s here), `wdrift runs`
and the study's `wdrift drift` say it beside the rows: the run's steps
that expired incomplete, never durable, and why (a trial saw only "not
compared at this step yet", as if the step were still coming). Before it
expires, `wdrift drift` says the step held up ("stuck"), with the rank and
when it expires; so too a step begun and silent (no commit) for 10 s.
After a restart, both still say the expired steps, from the write-ahead
log's "expired" records.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import zmq  # noqa: E402
from harness import Daemon, Publisher, check, free_port, package_env, stop_procs, summary, teardown  # noqa: E402

PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
W = 3

SOLO = r'''
import sys, numpy as np, wdrift
pub = wdrift.Publisher(sys.argv[1], sys.argv[2], ack_timeout=30.0)
for step in (0, 1):
    pub.publish(step, {"w": np.arange(3000, dtype=np.float32) * (1.0 + 0.01 * len(sys.argv[2])) + step})
pub.close(30)
'''

# One rank (argv: endpoint, run, rank, go-file, ack timeout, slow, first step): publishes its third
# of "w" at step 0 and waits for it to be acked; then, once go-file exists, step 1 (rank 1 "slow" s
# later), and waits up to 60 s for its answer. slow < 0: rank 1 exits at once, having published
# nothing. Steps are counted from the first step given (0 when none).
RANK = r'''
import os, sys, time, warnings, numpy as np, wdrift
ep, run, rank, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ack, slow = float(sys.argv[5]), float(sys.argv[6])
first = int(sys.argv[7]) if len(sys.argv) > 7 else 0
ranks = 3
if rank == 1 and slow < 0:
    print("exited", flush=True)
    sys.exit(0)
pub = wdrift.Publisher(ep, run, ranks=ranks, rank=rank, ack_timeout=ack, stall_warning=5.0 if ack >= 60 else None)
x = np.arange(3000, dtype=np.float32)
lo, hi = rank * 1000, (rank + 1) * 1000
for step in (0, 1):
    if step == 1:
        while not os.path.exists(go):
            time.sleep(0.05)
        if rank == 1:
            time.sleep(slow)
    pub.publish(first + step, {"w": wdrift.Shard(x[lo:hi] + step, offset=lo, shape=(3000,))})
    t0 = time.monotonic()
    while pub.stats()["acked"] + pub.stats()["refused"] < step + 1 and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    print("step", step, "acked", pub.stats()["acked"], flush=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pub.close(1)
'''


def job(ep, run, go, ack=60.0, slow=0.0, first=0):
    return [subprocess.Popen([PYTHON, "-c", RANK, ep, run, str(r), go, str(ack), str(slow), str(first)],
                             env=package_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(W)]


def wait_line(p, want, timeout):
    """Reads p's output until a line starts with want; the lines read."""
    end, got = time.time() + timeout, []
    while time.time() < end:
        line = p.stdout.readline()
        if not line:
            break
        got.append(line.strip())
        if line.startswith(want):
            break
    return got


def wd(tmp, *args):
    return subprocess.run([os.path.join(os.environ.get("BUILD", "build"), "wdrift"), *args, "-c",
                           os.path.join(tmp, "wdrift.yaml")], capture_output=True, text=True, timeout=30)


def stuck_gauge(port):
    """wdrift_study_steps_stuck of study fa on /metrics, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            m = re.search(r'^wdrift_study_steps_stuck\{study="fa"\} (\S+)$', r.read().decode(), re.M)
    except OSError:
        return None
    return float(m.group(1)) if m else None


def said(dm, run):
    return [x for x in dm.log_text().splitlines() if f"run '{run}' step 1 waits for rank" in x]


def dead_then_later(tmp, dm):
    """A rank whose death was said (its connection closed, step 1 waiting for it) is not said
    again as a rank that "never started" at the next step, which waits for it too (a review
    found every later step said so); three raw publishers, rank 1's socket closed."""
    ctx = zmq.Context()
    pubs = [Publisher(ctx, tmp, "dead2") for _ in range(W)]
    x = np.arange(3000, dtype=np.float32)

    def send(k, step):
        pubs[k].tensor(step, "w", x[k * 1000:(k + 1) * 1000], "f32", offset=k * 1000, total=3000)
        h = {"v": 1, "type": "commit", "run": "dead2", "step": step, "tensors": 1, "ranks": W, "rank": k,
             "session": 500 + k}
        pubs[k].send_raw([json.dumps(h).encode()])
    try:
        for k in range(W):
            send(k, 0)
        acks = [pubs[k].recv() for k in range(W)]
        check(all(a and a.get("type") == "ack" for a in acks), "dead2: step 0 of 3 ranks durable", str(acks))
        # a job whose rank 1 dies and takes the others with it (torchrun, mp.spawn) after their step 1
        # commits: said as the job ended, not as a rank that never started (a trial's, of a rank that
        # had committed steps before)
        whole = [Publisher(ctx, tmp, "whole") for _ in range(W)]
        pubs.extend(whole)

        def send_whole(k, step):
            whole[k].tensor(step, "w", x[k * 1000:(k + 1) * 1000], "f32", offset=k * 1000, total=3000)
            whole[k].send_raw([json.dumps({"v": 1, "type": "commit", "run": "whole", "step": step, "tensors": 1,
                                           "ranks": W, "rank": k, "session": 800 + k}).encode()])
        for k in range(W):
            send_whole(k, 0)
        acks = [whole[k].recv() for k in range(W)]
        whole[1].s.close(linger=0)
        for k in (0, 2):
            send_whole(k, 1)
        time.sleep(1)
        for k in (0, 2):
            whole[k].s.close(linger=0)
        pubs[1].s.close()
        for k in (0, 2):
            send(k, 1)
        end = time.time() + 30
        while time.time() < end and not said(dm, "dead2"):
            time.sleep(0.2)
        check(len(said(dm, "dead2")) == 1, "dead2: rank 1's death said at step 1", dm.log_text()[-1500:])
        for k in (0, 2):
            send(k, 2)
        # the study's proxy: a tensor of step 7 begun and never committed (a job stopped mid-snapshot)
        half = Publisher(ctx, tmp, "lowprec")
        pubs.append(half)
        half.tensor(7, "w", x[:1000], "f32", offset=0, total=3000)
        # and its step 8 of 2 ranks, committed by two publishers both given rank 1, rank 0 never
        dup = [Publisher(ctx, tmp, "lowprec") for _ in range(2)]
        pubs.extend(dup)
        for k, p in enumerate(dup):
            p.tensor(8, "w", x[1000:2000], "f32", offset=1000, total=2000)
            p.send_raw([json.dumps({"v": 1, "type": "commit", "run": "lowprec", "step": 8, "tensors": 1,
                                    "ranks": 2, "rank": 1, "session": 700 + k}).encode()])
        time.sleep(12)     # past the lag line's 10 s (half of limits.pending_timeout)
        r = wd(tmp, "drift", "fa")
        lines = [x_ for x_ in r.stdout.splitlines() if x_.startswith("stuck")]
        check(r.returncode == 0 and len(lines) == 1
              and re.search(r"'lowprec' \(proxy fp16\) step 7 has had no commit, and no message for 1\d s "
                            r"\(1 tensor begun: a job stopped or stuck in the middle of it\?\): no row holds it until "
                            r"it is whole; it expires, never durable, in \d s unless a message of it comes "
                            r"\(limits.pending_timeout, 20 s\)", lines[0]) is not None,
              "drift: a proxy's step begun, uncommitted and silent for 10 s is said as stuck", r.stdout)
        check(lines and "'lowprec' (proxy fp16) step 8 has rank 1 committed by 2 publishers (the same rank= given "
              "twice?), and waits for rank 0 of 2, 1" in lines[0],
              "... and its step whose rank 1 two publishers committed, the likelier cause said first",
              lines[0] if lines else r.stdout)
        lag = [x_ for x_ in dm.log_text().splitlines() if "run 'dead2'" in x_ and "committed nothing" in x_]
        check(not lag, "... and step 2, which waits for it too, gets no 'never started' line", "\n".join(lag))
        end = time.time() + 20
        while time.time() < end and not [x_ for x_ in dm.log_text().splitlines() if "run 'whole' step 1 waits" in x_]:
            time.sleep(0.2)
        ended = [x_ for x_ in dm.log_text().splitlines() if "run 'whole'" in x_ and ("waits for rank" in x_ or
                                                                                  "committed nothing" in x_)]
        check(all(a and a.get("type") == "ack" for a in acks) and len(ended) == 1 and
              "run 'whole' step 1 waits for rank 1 of 3, whose connection (" in ended[0] and
              "its last commit step 0) closed " in ended[0] and "and every connection of the run has closed since: "
              "the job ended (a rank that died, and the others with it?)" in ended[0],
              "a rank dead and its job gone with it: said once as the job ended, not as a rank that never started",
              "\n".join(ended) or dm.log_text()[-2000:])
        # a rank still streaming its part (shards carry no rank) past the lag's 10 s: not said
        live = [Publisher(ctx, tmp, "stream") for _ in range(W)]
        pubs.extend(live)
        for k in (0, 2):
            live[k].tensor(0, "w", x[k * 1000:(k + 1) * 1000], "f32", offset=k * 1000, total=3000)
            live[k].send_raw([json.dumps({"v": 1, "type": "commit", "run": "stream", "step": 0, "tensors": 1,
                                          "ranks": W, "rank": k, "session": 600 + k}).encode()])
        for piece in range(10):        # 15 s of rank 1's part, 100 elements at a time
            lo = 1000 + piece * 100
            live[1].tensor(0, "w", x[lo:lo + 100], "f32", offset=lo, total=3000)
            time.sleep(1.5)
        live[1].send_raw([json.dumps({"v": 1, "type": "commit", "run": "stream", "step": 0, "tensors": 1,
                                      "ranks": W, "rank": 1, "session": 601}).encode()])
        acks = [live[k].recv() for k in range(W)]
        lag = [x_ for x_ in dm.log_text().splitlines() if "run 'stream'" in x_ and "committed nothing" in x_]
        check(all(a and a.get("type") == "ack" for a in acks) and not lag,
              "a rank that streams its part for 15 s, the others committed: stored, and no lag line",
              "\n".join(lag) + str(acks))
        # dead2's steps 1 and 2 expire alike (rank 1 of 3 never committed): the second is said short
        end = time.time() + 30
        while time.time() < end and "run 'dead2' step 2: expired" not in dm.log_text():
            time.sleep(0.2)
        gone = [x_ for x_ in dm.log_text().splitlines() if "run 'dead2' step" in x_ and "expired after" in x_]
        check(len(gone) == 2 and "run 'dead2' step 1: expired after 20 s waiting for the other ranks: rank 1 of 3 "
              "never committed; " in gone[0] and "(commits from 2 connections waited" in gone[0] and
              gone[1].endswith("run 'dead2' step 2: expired after 20 s as its step 1 did, for the same reason: "
                               "rank 1 of 3 never committed (2 steps of it expired; `wdrift "
                               "runs` says them)"),
              "a dead rank's later step expired alike: the log says it short, naming the step said in full",
              "\n".join(gone))
    finally:
        for p in pubs:
            p.s.close(linger=0)
        ctx.term()


def main():
    tmp = tempfile.mkdtemp(prefix="t105-")
    dm = Daemon(tmp)
    procs = []
    try:
        cfg = dm.write_config(limits="pending_timeout: 20")
        port = free_port()
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:
            f.write(text.replace("listen:\n", f"listen:\n  metrics: 127.0.0.1:{port}\n", 1))
        check(dm.start() is not None, "daemon ready")
        ep = f"ipc://{tmp}/run/ingest.sock"
        for run in ("base", "lowprec"):
            r = subprocess.run([PYTHON, "-c", SOLO, ep, run], env=package_env(), capture_output=True, text=True,
                               timeout=60)
            check(r.returncode == 0, f"'{run}': steps 0 and 1 durable", r.stdout + r.stderr)

        # a job whose rank 1 dies before its first step: the run has no durable step, and the
        # record of its expired step must outlive the snapshot (a review: the run was forgotten)
        first = job(ep, "first", os.path.join(tmp, "go-first"), slow=-1.0)
        procs += first

        # the study's candidate, a job of 3 ranks whose rank 1 is killed between its steps 0 and 1
        go = os.path.join(tmp, "go-killed")
        ranks = job(ep, "fa", go)
        procs += ranks
        firsts = [wait_line(p, "step 0", 30) for p in ranks]
        check(all(f and f[-1] == "step 0 acked 1" for f in firsts), "3 ranks: step 0 durable", str(firsts))
        dead = ranks[1].pid
        ranks[1].kill()
        ranks[1].wait()
        t_kill = time.time()
        open(go, "w").close()   # ranks 0 and 2 publish step 1, which waits for rank 1
        lines = []
        while not lines and time.time() < t_kill + 30:
            time.sleep(0.2)
            lines = said(dm, "fa")
        after = time.time() - t_kill
        check(len(lines) == 1 and "waits for rank 1 of 3, whose connection (ipc pid %d, its last commit step 0) closed" % dead
              in lines[0] and "limits.pending_timeout" in lines[0],
              f"the killed rank is said within {after:.1f} s (30 at most), by rank and pid, once", "\n".join(lines))
        check(after >= 9, f"... not before its publisher had 10 s to come back ({after:.1f} s)")
        time.sleep(2)
        check(len(said(dm, "fa")) == 1, "... and not again")
        r = wd(tmp, "status")
        check(re.search(r"pending +'fa' step 1: .*from ranks 0, 2 of 3 \(not yet: 1\)", r.stdout) is not None,
              "status names the rank the step waits for", r.stdout)
        # drift said only "not compared at this step yet", while step 1 waited on the dead rank (a trial)
        r = wd(tmp, "drift", "fa")
        lines = [x for x in r.stdout.splitlines() if x.startswith("stuck")]
        check(r.returncode == 0 and len(lines) == 1 and "stuck      'fa' (candidate) step 1 waits for rank 1 of 3, "
              in lines[0] and "after the first commit of the 2 ranks that did (a rank that died or is stuck?" in lines[0]
              and "expires, never durable, in " in lines[0]
              and "unless a new element of it comes (limits.pending_timeout, 20 s)" in lines[0],
              "drift: the step held up by the dead rank is said, beside the rows of step 1 without it", r.stdout)
        d = json.loads(wd(tmp, "drift", "fa", "--json").stdout)
        # with no step asked, step 0, the latest fa was compared at; step 1, the proxies' alone, is "later"
        check(d.get("step") == 0 and d.get("later_step") == 1 and "fa" in d.get("candidates", {})
              and "'fa' (candidate) step 1 waits for rank 1 of 3" in d.get("stuck", ""),
              "drift --json: \"stuck\", beside step 0's rows", json.dumps({k: d.get(k) for k in ("step", "later", "stuck")}))
        d = json.loads(wd(tmp, "drift", "fa", "--step", "1", "--json").stdout)
        check(d.get("step") == 1 and "fa" in d.get("missing", []) and "later" not in d,
              "drift --step 1 --json: fa missing there", json.dumps(d.get("missing")))
        r = wd(tmp, "studies")
        check(re.search(r"^stuck     study 'fa': 'fa' \(candidate\) step 1 waits for rank 1 of 3, ", r.stdout, re.M)
              is not None, "studies: the stuck line under the table", r.stdout)
        check(stuck_gauge(port) == 1, "/metrics: wdrift_study_steps_stuck{study=\"fa\"} 1 (WdriftStepStuck's)")

        # the step expires: said beside the rows, not as a step still coming
        outs = [p.communicate(timeout=60)[0] for p in (ranks[0], ranks[2])]
        check(all("step 1 acked 1" in o for o in outs), "ranks 0 and 2: step 1 refused at its expiry", "\n".join(outs))
        told = "run 'fa' step 1 waits for rank 1 of 3, whose connection closed and has not come back: a rank that died?"
        check(all(o.count(told) == 1 and "in the daemon" not in o for o in outs)
              and all(re.search(r"publisher: wdriftd at .*: " + re.escape(told) + r" This rank's part waits with the "
                                r"step until limits.pending_timeout \(20 s\) expires it, in \d+ s, and is then refused",
                                o) for o in outs),
              "... and each was told, once, which rank its step waits for (a trial's heard only 'is every rank "
              "publishing its part?')", "\n".join(outs))
        check(all("ended after" in o and "with the refusal above; 1 snapshot dropped meanwhile, the refused one "
                  "among them" in o for o in outs),
              "... and their end of the wait counts the refused snapshot as the one dropped (a trial read "
              "'1 dropped' as a second loss)", "\n".join(outs))
        r = wd(tmp, "runs")
        lines = [x for x in r.stdout.splitlines() if x.startswith("expired    'fa'")]
        want = "'fa' (candidate): 1 step expired incomplete, never durable, the latest step 1 at "
        check(len(lines) == 1 and want in lines[0] and "rank 1 of 3 never committed" in lines[0],
              "runs: an expired line under the table, with the rank", r.stdout)
        info = {x["name"]: x for x in json.loads(wd(tmp, "runs", "--json").stdout)["runs"]}["fa"]
        check(info.get("expired_steps") == 1 and isinstance(info.get("expired_at"), (int, float))
              and lines and info.get("expired") == lines[0][len("expired"):].strip(),
              "runs --json: expired_steps, expired_at, and the sentence", json.dumps(info))
        r = wd(tmp, "drift", "fa")
        lines = [x for x in r.stdout.splitlines() if x.startswith("expired")]
        check(r.returncode == 0 and len(lines) == 1 and want in lines[0], "drift: the expired line", r.stdout)
        check("\nstuck" not in r.stdout and stuck_gauge(port) == 0,
              "... and no stuck line once the step expired, and wdrift_study_steps_stuck 0", r.stdout)
        info = {x["name"]: x for x in json.loads(wd(tmp, "runs", "--json").stdout)["runs"]}.get("first", {})
        check(info.get("durable") == 0 and info.get("expired_steps") == 1
              and "'first' (in no study): 1 step expired incomplete" in info.get("expired", ""),
              "a run whose first step expired: still listed, with its expired step", json.dumps(info))
        lag = [x for x in dm.log_text().splitlines() if "run 'first' step 0 waits for rank" in x]
        check(len(lag) == 1 and "waits for rank 1 of 3, which has committed nothing of it" in lag[0]
              and "after the first of the 2 that did: a rank that never started" in lag[0]
              and "limits.pending_timeout (20 s)" in lag[0],
              "a rank that never connected: said once, half of limits.pending_timeout after the others "
              "committed, not only at the expiry (it has no connection whose close could be said)",
              "\n".join(lag))
        stop_procs(first)
        d = json.loads(wd(tmp, "drift", "fa", "--json").stdout)
        check(lines and d.get("expired") == lines[0][len("expired"):].strip(), "drift --json: \"expired\"",
              json.dumps(d.get("expired")))

        dead_then_later(tmp, dm)

        # a job whose ranks all end normally: nothing said
        go = os.path.join(tmp, "go-clean")
        clean = job(ep, "clean", go)
        procs += clean
        open(go, "w").close()
        outs = [p.communicate(timeout=90)[0] for p in clean]
        check(all("step 1 acked 2" in o for o in outs), "a job of 3 ranks that ends normally: both steps durable",
              "\n".join(outs))
        # ... and a new job of the run started at once, whose rank 1 never starts: its lag is said as
        # that, not as the ended job's rank 1 dying (its pid named: a job restarted within the 10 s the
        # daemon watches a closed rank for)
        again = job(ep, "clean", go, slow=-1, first=10)
        procs += again
        time.sleep(14)
        lagged = [x for x in dm.log_text().splitlines() if "run 'clean'" in x and "waits for rank" in x]
        check(len(lagged) == 1 and "run 'clean' step 10 waits for rank 1 of 3, which has committed nothing of it"
              in lagged[0] and "whose connection" not in lagged[0],
              "... and no rank of it is said to be missing; the next job's rank that never started is said as "
              "that, not as the ended job's rank", "\n".join(lagged))
        stop_procs(again)

        # a slow rank, while the others' ack timeouts (2 s) close their connections and they re-send
        # on new ones: every connection that closed is of a publisher that came back; nothing said
        go = os.path.join(tmp, "go-slow")
        slow = job(ep, "slow", go, ack=2.0, slow=6.0)
        procs += slow
        open(go, "w").close()
        outs = [p.communicate(timeout=90)[0] for p in slow]
        check(all("step 1 acked 2" in o for o in outs), "a rank 6 s late, the others re-sending every 2 s: "
              "both steps durable", "\n".join(outs))
        check(not [x for x in dm.log_text().splitlines() if "run 'slow'" in x and "waits for rank" in x],
              "... and no rank said to be missing (nor lagging: 10 s, half of limits.pending_timeout): those "
              "that reconnected came back", dm.log_text()[-2000:])

        # a restart: the expired steps are still said, from the WAL (they read as "sent no snapshot" before)
        before = {x["name"]: x for x in json.loads(wd(tmp, "runs", "--json").stdout)["runs"]}
        drift_before = json.loads(wd(tmp, "drift", "fa", "--json").stdout).get("expired")
        dm.stop()
        check(dm.start() is not None, "the daemon restarts")
        after = {x["name"]: x for x in json.loads(wd(tmp, "runs", "--json").stdout)["runs"]}
        keys = ("expired", "expired_steps", "expired_step", "expired_at")
        check(all(before.get(n, {}).get(k) is not None and after.get(n, {}).get(k) == before[n][k]
                  for n in ("fa", "first", "dead2") for k in keys) and after["dead2"]["expired_steps"] == 2,
              "after a restart, runs --json says each run's expired steps as before: how many, the latest, "
              "when and why", json.dumps({n: {k: after.get(n, {}).get(k) for k in keys} for n in ("fa", "first", "dead2")}))
        r = wd(tmp, "drift", "fa")
        lines = [x for x in r.stdout.splitlines() if x.startswith("expired")]
        check(r.returncode == 0 and drift_before and len(lines) == 1 and lines[0][len("expired"):].strip() == drift_before,
              "... and drift's expired line", r.stdout)
        r = wd(tmp, "drift", "fa", "--step", "1", "--json")
        never = json.loads(r.stdout).get("never", {}) if r.returncode == 0 else {}
        check("'fa' (candidate): its step 1 expired incomplete at " in never.get("fa", "") and
              "rank 1 of 3 never committed" in never.get("fa", ""),
              "... and drift --step 1 says fa's step there expired, not that it sent none", r.stdout + r.stderr)
        # dead2's next step expires as its step 2 did: this start's log says it whole once (a review:
        # the replayed expiry made it "as its step 2 did", of a line only the last process logged)
        mark = len(dm.log_text())
        ctx = zmq.Context()
        pubs = [Publisher(ctx, tmp, "dead2") for _ in range(W)]
        x = np.arange(3000, dtype=np.float32)
        try:
            for k in (0, 2):
                pubs[k].tensor(3, "w", x[k * 1000:(k + 1) * 1000], "f32", offset=k * 1000, total=3000)
                pubs[k].send_raw([json.dumps({"v": 1, "type": "commit", "run": "dead2", "step": 3, "tensors": 1,
                                              "ranks": W, "rank": k, "session": 900 + k}).encode()])
            end = time.time() + 40
            while time.time() < end and "run 'dead2' step 3: expired" not in dm.log_text()[mark:]:
                time.sleep(0.2)
            gone = [x_ for x_ in dm.log_text()[mark:].splitlines() if "run 'dead2' step 3: expired" in x_]
            check(len(gone) == 1 and "step 3: expired after 20 s waiting for the other ranks: rank 1 of 3 never "
                  "committed; " in gone[0] and "as its step" not in gone[0],
                  "after a restart, the first expiry like the last one's is logged whole", "\n".join(gone))
        finally:
            for p in pubs:
                p.s.close(linger=0)
            ctx.term()
    finally:
        stop_procs(procs)
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
