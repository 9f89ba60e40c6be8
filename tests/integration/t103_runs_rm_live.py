#!/usr/bin/env python3
"""t103_runs_rm_live.py: `wdrift runs rm` does not delete a run a live job still publishes.

A new user's trial re-ran a job under a used name while the first job was
still training. The conflict said `wdrift runs rm RUN` frees the name; the
user ran it, and the daemon deleted the live run's durable snapshots and
rows under the first job, which went on publishing into a name now holding
a mix of two jobs. Now:
- runs rm is refused (exit 1) while a publisher of the run is connected,
  naming how many, their addresses (the pid, on ipc://) and last steps,
  and --force;
- --force removes it anyway, and the daemon's log says so, once;
- once the job has closed its publisher, runs rm goes through at once;
  one that exits while rm waits (--wait, 2 s by default) is waited for,
  without stopping the daemon's loop: CI once saw the disconnect of a job
  that had exited come after the 250 ms the daemon then blocked for;
- a job that is killed counts as gone too, and so does a connection whose
  last message the daemon reads after its close (SIGSTOP holds the daemon
  while connections send and close: they stayed counted for good);
- rm interrupted while it waits removes nothing when the job exits;
- `wdrift runs` shows each run's publishers connected now (a column, and
  "publishers" in --json), so that a live run is seen before rm ("?"
  and a line from a daemon too old to say);
- a re-run refused as a conflict is told apart from the job whose
  snapshots rm would delete: with the first job gone, rm is refused for
  the re-run's sake (its refused steps are not sent again), saying so;
- the conflict's reason names both ways out: another name, or both jobs
  stopped, runs rm, and the re-run started again.
Real daemon, real publisher processes (the Python package) told by stdin
when to go on, the real CLI; all stopped by pid, the temp dir removed,
also on failure.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, Publisher, check, package_env, summary, teardown  # noqa: E402
from harness import control as harness_control  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
WDRIFT = os.path.abspath(os.path.join(BUILD, "wdrift"))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")

# ep run seed [tensor [ranks rank]]: publishes each step read from stdin ("close"
# ends it), printing "acked STEP", or "raised ..." when the daemon refused it
JOB = r'''
import sys, numpy as np, wdrift
ep, run, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
tensor = sys.argv[4] if len(sys.argv) > 4 else "w"
ranks, rank = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (1, None)
rng = np.random.default_rng(seed)
pub = wdrift.Publisher(ep, run, ack_timeout=5.0, stall_warning=None, ranks=ranks, rank=rank)
for line in sys.stdin:
    if line.strip() == "close":
        break
    step = int(line)
    try:
        x = rng.standard_normal(256).astype(np.float32)
        # a rank's half of the tensor, as a sharded job publishes it
        pub.publish(step, {tensor: x if ranks == 1 else wdrift.Shard(x[:128], offset=rank * 128, shape=(256,))})
        ok = pub.flush(20)
        print("acked" if ok else "not flushed", step, flush=True)
    except wdrift.WdriftError as e:
        print("raised", e, flush=True)
try:
    pub.close(5)
except wdrift.WdriftError as e:
    print("raised", e, flush=True)
'''


# run, then the steps: the first published and its refusal waited for, then each later one
# published catching the conflict raised; prints what raised, then what close() counts lost
CATCHER = r'''
import sys, time, numpy as np, wdrift
ep, run, first, later = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4:]]
pub = wdrift.Publisher(ep, run, ack_timeout=5.0, stall_warning=None)
pub.publish(first, {"w": np.full(256, 2.0, np.float32)})
end = time.time() + 20
while pub.stats()["conflicts"] == 0 and time.time() < end:    # the refusal has come, not raised yet
    time.sleep(0.02)
for step in later:
    try:
        pub.publish(step, {"w": np.full(256, 3.0, np.float32)})
        pub.flush(20)
        print("published", step)
    except wdrift.WdriftError as e:
        print("raised", e)
try:
    print("lost", pub.close(10))
except wdrift.WdriftError as e:    # a conflict that came while closing: raised after closing
    st = pub.stats()
    print("raised at close", e)
    print("lost", st["committed"] - st["acked"])
'''


class Job:
    """A training job as a real process, one step at a time."""

    def __init__(self, ep, run, seed, tensor="w", ranks=None):
        env = package_env()
        self.p = subprocess.Popen([PYTHON, "-c", JOB, ep, run, str(seed), tensor, *map(str, ranks or ())], env=env,
                                  stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def step(self, n):
        self.p.stdin.write(f"{n}\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def send(self, n):
        """The step, its outcome read later (read()): the ranks of a sharded job, each waiting for the others."""
        self.p.stdin.write(f"{n}\n")
        self.p.stdin.flush()

    def read(self):
        return self.p.stdout.readline().strip()

    def close(self):
        out, err = self.p.communicate("close\n", timeout=60)
        return self.p.returncode, out + err

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=30)


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def rm_waiting(cfg, run):
    """`wdrift runs rm RUN --wait 30`, started: the process, to be waited for or interrupted."""
    return subprocess.Popen([WDRIFT, "runs", "rm", run, "--wait", "30", "-c", cfg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_info(cfg, run):
    r = wd(cfg, "runs", "--json")
    runs = {x["name"]: x for x in json.loads(r.stdout)["runs"]} if r.returncode == 0 else {}
    return runs.get(run, {})


def durable(cfg, run):
    return run_info(cfg, run).get("durable")


def publishers(cfg, run, want, timeout=5):
    """The run's publishers as runs --json says, once it says want (a disconnect takes a moment)."""
    end = time.time() + timeout
    while True:
        got = run_info(cfg, run).get("publishers")
        if got == want or time.time() > end:
            return got
        time.sleep(0.05)


def main():
    tmp = tempfile.mkdtemp(prefix="t103-")
    dm = Daemon(tmp)
    jobs = []
    try:
        cfg = dm.write_config(extra="  - name: mixs\n    baseline: mixbase\n    candidates: [mix]\n")
        check(dm.start() is not None, "daemon ready")
        ep = f"ipc://{tmp}/run/ingest.sock"

        first = Job(ep, "fa", 1)
        jobs.append(first)
        check(first.step(0) == "acked 0" and first.step(10) == "acked 10", "the first job's steps 0 and 10 are durable")

        # the same name re-run beside it: its conflict says how to get out
        rerun = Job(ep, "fa", 2)
        jobs.append(rerun)
        said = rerun.step(0)
        check(said.startswith("raised") and "conflict" in said and "name it anew" in said
              and "stop both jobs, `wdrift runs rm fa`, and start the re-run again" in said,
              "a re-run beside it: the conflict names another name, or both jobs stopped, rm, the re-run again", said)
        check(publishers(cfg, "fa", 2) == 2, "runs --json: 'publishers' 2 while both jobs are up")
        r = wd(cfg, "runs")
        head = r.stdout.splitlines()[0] if r.stdout else ""
        row = [x for x in r.stdout.splitlines() if x.startswith("fa ")]
        check(head.split()[-1] == "publishers" and row and row[0].split()[-1] == "2",
              "runs: a publishers column, 2 for the run both jobs publish", r.stdout)

        # the trial's step: runs rm while the first job still publishes
        t0 = time.monotonic()
        r = wd(cfg, "runs", "rm", "fa")
        waited, first_refusal = time.monotonic() - t0, r.stderr
        check(r.returncode == 1 and "run 'fa' has 2 publishers connected (" in r.stderr
              and f"ipc pid {first.p.pid} after step 10" in r.stderr
              and f"ipc pid {rerun.p.pid}, refused as a conflict at step 0" in r.stderr
              and "whose snapshots this would delete" in r.stderr and "Stop the run's jobs first" in r.stderr
              and "--force" in r.stderr,
              "runs rm of a run a live job publishes: refused, naming each publisher (the re-run as such) "
              "and --force", r.stderr)
        check(durable(cfg, "fa") == 2, "... and nothing was removed")
        r = wd(cfg, "runs", "rm", "fa", "--json", "--wait", "0")
        j = json.loads(r.stdout or "{}")
        check(r.returncode == 1 and j.get("ok") is False and "publishers connected" in j.get("error", ""),
              "runs rm --json: the same refusal, exit 1", r.stdout + r.stderr)
        check(first.step(20) == "acked 20" and durable(cfg, "fa") == 3, "the first job goes on: step 20 durable")
        rc, out = first.close()
        check(rc == 0 and "raised" not in out, "the first job closes", out)
        check(publishers(cfg, "fa", 1) == 1, "runs --json: 'publishers' 1 once it has closed")

        # the first job stopped, the re-run still up (a trial's next step): refused, for the
        # re-run's sake, in its own words: its refused steps are not sent again
        r = wd(cfg, "runs", "rm", "fa", "--wait", "0")
        check(r.returncode == 1 and "run 'fa' has 1 publisher connected whose snapshots were all refused as "
              f"conflicts (ipc pid {rerun.p.pid}, refused as a conflict at step 0): a re-run" in r.stderr
              and "not sent again" in r.stderr and "start it again" in r.stderr and "delete" not in r.stderr,
              "runs rm with only the re-run connected: refused, saying it is the re-run and what to do",
              r.stderr)
        rc, out = rerun.close()
        check(rc == 0, "the re-run's job closes", out)

        # at once after it exited: its disconnect is waited for, not a refusal
        r = wd(cfg, "runs", "rm", "fa")
        check(r.returncode == 0 and "removed run 'fa': 3 durable snapshots" in r.stdout,
              "runs rm right after the job closed: removed", r.stdout + r.stderr)
        check(2 <= waited < 10 and "(still so after 2 s of waiting; --wait SECONDS waits longer for a job that is exiting)"
              in first_refusal,
              f"a refusal waits 2 s for disconnects by default, and says so ({waited:.2f} s)", first_refusal)
        r = wd(cfg, "runs", "rm", "fa")
        check(r.returncode == 1 and "no run 'fa': runs rm forgot it already" in r.stderr,
              "a second runs rm: said to be forgotten already, not unknown", r.stderr)
        r = wd(cfg, "runs", "rm", "mixs")
        check(r.returncode == 1 and "no run 'mixs': that is a study's name; runs rm takes a run's" in r.stderr,
              "runs rm of a study's name: said so", r.stderr)
        log = dm.log_text()
        check(log.count("runs rm: refused: run 'fa' has 2 publishers connected") == 2
              and "runs rm: refused: run 'fa' has 1 publisher connected whose snapshots were all refused" in log,
              "each refusal is in the daemon's log, as the CLI was told", log[-3000:])
        again = Job(ep, "fa", 2)
        jobs.append(again)
        check(again.step(0) == "acked 0" and durable(cfg, "fa") == 1, "the re-run started again: stored afresh")
        rc, out = again.close()
        check(rc == 0 and "raised" not in out, "... and closes", out)

        # long names: the conflict's advice is never the part cut off (a review: the reply's reason
        # holds 255 bytes, and a long run and tensor name cut the hint short)
        name, tensor = "llama-7b-sft-lr3e-5-seed1-" + "x" * 14, "model.layers.31.self_attn.q_proj.weight" * 3
        for seed in (1, 2):
            j = Job(ep, name, seed, tensor)
            jobs.append(j)
            said = j.step(0)
            j.close()
        check(said.startswith("raised") and f"has ended: rename this one, or stop it, `wdrift runs rm {name}`, and "
              "start it again)" in said, "long names: the conflict's hint whole, the tensor's words clipped instead "
              "(the first job has ended)", said)

        # a re-run with the same weights: its step is acked as a duplicate, so the run holds what
        # it was told is stored, and rm is refused for it as for a job publishing (not a re-run)
        one, same = Job(ep, "dupe", 5), Job(ep, "dupe", 5)
        jobs += [one, same]
        check(one.step(0) == "acked 0" and same.step(0) == "acked 0", "the same weights twice: both acked")
        one.close()
        r = wd(cfg, "runs", "rm", "dupe", "--wait", "0")
        check(r.returncode == 1 and f"ipc pid {same.p.pid} after step 0)" in r.stderr
              and "whose snapshots this would delete" in r.stderr and "refused as a conflict" not in r.stderr,
              "a re-run acked as duplicates counts as publishing: what it was told is stored would go", r.stderr)
        same.close()
        r = wd(cfg, "runs", "rm", "dupe")
        check(r.returncode == 0, "... and once it has closed, rm goes through", r.stderr)

        # two jobs at once under one name, their steps apart (a colleague's, resumed at another
        # step): no conflict ever comes, so the daemon says it in its log, once, and runs shows it
        base = Job(ep, "mixbase", 6)
        jobs.append(base)
        check([base.step(n) for n in (0, 5, 10, 15, 20)] == ["acked 0", "acked 5", "acked 10", "acked 15", "acked 20"]
              and base.close()[0] == 0, "study mixs: its baseline's steps 0 to 20 durable")
        mine, theirs = Job(ep, "mix", 7), Job(ep, "mix", 8)
        jobs += [mine, theirs]
        check(mine.step(0) == "acked 0" and mine.step(10) == "acked 10" and theirs.step(5) == "acked 5"
              and theirs.step(15) == "acked 15", "two jobs under one name, steps apart: all acked")
        check(mine.step(20) == "acked 20", "the first job goes on beside it: step 20")
        # ... and reaches a step the second one stored: its conflict says what happened, not "a re-run?"
        said = mine.step(15)
        check(said.startswith("raised") and "two jobs have published it at once since step 5" in said
              and "stop the one started by mistake" in said and "re-run" not in said,
              "a conflict in a run two jobs publish: the reason says so", said)
        lines = [x for x in dm.log_text().splitlines() if "run 'mix' is published by two jobs at once" in x]
        check(len(lines) == 1 and f"ipc pid {mine.p.pid} (after step 10)" in lines[0]
              and f"ipc pid {theirs.p.pid} (step 5," in lines[0], "the daemon's log says it once, naming both",
              "\n".join(lines))
        r = wd(cfg, "runs")
        mixed = [x for x in r.stdout.splitlines() if x.startswith("mixed")]
        check(len(mixed) == 1 and "'mix': 2 jobs publish it at once, each as its only rank" in mixed[0]
              and f"ipc pid {mine.p.pid}" in mixed[0] and f"ipc pid {theirs.p.pid}" in mixed[0],
              "runs: a mixed line naming both jobs", r.stdout)
        info = run_info(cfg, "mix")
        check(info.get("jobs") == 2 and "2 jobs publish it at once" in info.get("mixed", ""),
              "runs --json: 'jobs' and 'mixed'", json.dumps(info))
        said = [j.close()[1] for j in (theirs, mine)]
        told = "run 'mix' is published by two jobs at once, each as its only rank, from step 5 ("
        check(all(x.count(told) == 1 and "Stop the one started by mistake" in x for x in said),
              "each job is told on its stderr, once, by its ack (a trial's second job finished without a word)",
              "\n---\n".join(said))
        # both gone (a trial's: the jobs had ended by the time anyone looked): the run still holds
        # both jobs' steps, so runs and the study's drift keep saying it, until runs rm
        check(publishers(cfg, "mix", 0) == 0, "both jobs closed")
        info = run_info(cfg, "mix")
        past = info.get("mixed", "")
        check("jobs" not in info and past.startswith("'mix' (candidate): 2 jobs published it at once, each as its "
                                                     "only rank, from step 5 at ")
              and f"ipc pid {mine.p.pid}" in past and f"ipc pid {theirs.p.pid}" in past
              and "`wdrift runs rm mix`" in past and isinstance(info.get("mixed_at"), float),
              "runs --json after both jobs ended: 'mixed' in the past, with the step, both pids and runs rm; "
              "'mixed_at'; no 'jobs'", json.dumps(info))
        r = wd(cfg, "runs")
        mixed = [x for x in r.stdout.splitlines() if x.startswith("mixed")]
        check(len(mixed) == 1 and mixed[0][len("mixed"):].strip() == past, "runs: the same mixed line", r.stdout)
        end, lines = time.time() + 10, []
        while time.time() < end and not lines:
            r = wd(cfg, "drift", "mixs")
            lines = [x for x in r.stdout.splitlines() if x.startswith("mixed")]
            time.sleep(0.1)
        check(r.returncode == 0 and len(lines) == 1 and lines[0][len("mixed"):].strip().startswith(
              "'mix' (candidate): 2 jobs published it at once"), "drift of its study: a mixed line naming its role",
              r.stdout + r.stderr)
        comp = [x for x in r.stdout.splitlines() if x.startswith("complete")]
        check(len(comp) == 1 and comp[0].endswith(", but two jobs published a run at once, so its rows may be of "
                                                  "either: see 'mixed' below"),
              "... and the complete line above it says so (a trial's read 'complete' as all well)", r.stdout)
        refused = [x for x in r.stdout.splitlines() if x.startswith("refused")]
        check(len(refused) == 1 and "two jobs published it at once (the mixed line)" in refused[0]
              and "the first job's" not in refused[0],
              "... and its refused line says the conflict came of the two jobs, not of a re-run", r.stdout)
        d = json.loads(wd(cfg, "drift", "mixs", "--json").stdout or "{}")
        check(lines and d.get("mixed") == lines[0][len("mixed"):].strip(), "drift --json: 'mixed', the same words",
              json.dumps(d.get("mixed")))
        # a restart: both jobs' steps are still in the run, and said so (from the WAL's "mixed" record)
        dm.stop()
        check(dm.start() is not None, "the daemon restarts")
        again = run_info(cfg, "mix")
        plain = lambda x: re.sub(r"; seen \d+ times? since this start", "", x or "")
        check(plain(again.get("mixed")) == plain(past) and "since this start" not in again.get("mixed", "")
              and again.get("mixed_at") == info.get("mixed_at"),
              "after a restart, runs --json says the two jobs as before: the step, both, when", json.dumps(again))
        r = wd(cfg, "drift", "mixs")
        lines = [x for x in r.stdout.splitlines() if x.startswith("mixed")]
        check(r.returncode == 0 and len(lines) == 1 and "'mix' (candidate): 2 jobs published it at once" in lines[0],
              "... and drift of its study", r.stdout + r.stderr)
        r = wd(cfg, "runs", "rm", "mix")
        check(r.returncode == 0 and "mixed" not in run_info(cfg, "mix")
              and not any(x.startswith("mixed") for x in wd(cfg, "drift", "mixs").stdout.splitlines()),
              "runs rm mix: the mixed lines go with it", r.stdout + r.stderr)
        # a sharded job's ranks (ranks=2): each its own session, not two jobs
        r0, r1 = Job(ep, "shard", 9, "w", (2, 0)), Job(ep, "shard", 9, "w", (2, 1))
        jobs += [r0, r1]
        r0.p.stdin.write("0\n")
        r0.p.stdin.flush()
        said1 = r1.step(0)
        said0 = r0.p.stdout.readline().strip()
        check(said1 == "acked 0" and said0 == "acked 0", "a 2-rank job's step 0: acked", said0 + "\n" + said1)
        check(publishers(cfg, "shard", 2) == 2 and "mixed" not in run_info(cfg, "shard")
              and "run 'shard' is published by two jobs" not in dm.log_text(),
              "its two ranks are one job: no mixed line, nothing logged",
              json.dumps(run_info(cfg, "shard")) + "\n" + "\n".join(x for x in dm.log_text().splitlines() if "shard" in x))
        r0.close()
        r1.close()
        # ... whose rank 1 died before its part: rm waits for the step's timeout, and says how long
        alive, dead = Job(ep, "dead", 9, "w", (2, 0)), Job(ep, "dead", 9, "w", (2, 1))
        jobs += [alive, dead]
        for j in (alive, dead):
            j.p.stdin.write("0\n")
            j.p.stdin.flush()
        said = [j.p.stdout.readline().strip() for j in (alive, dead)]
        check(said == ["acked 0", "acked 0"], "run 'dead': step 0 durable", str(said))
        dead.kill()
        alive.p.stdin.write("10\n")     # its half of step 10 only: the flush waits for the other rank
        alive.p.stdin.flush()
        end = time.time() + 10
        while time.time() < end and not run_info(cfg, "dead").get("bytes_pending"):
            time.sleep(0.05)
        # --force: not at once, while the step may still be streamed (a review's: a live job's step was lost) ...
        r = wd(cfg, "runs", "rm", "dead", "--force", "--wait", "0")
        check(r.returncode == 1 and "run 'dead' has step 10 being received (nothing new for" in r.stderr
              and "1 of its 2 ranks committed" in r.stderr and "s from now (limits.pending_timeout, 600 s" in r.stderr
              and "--force drops the step once nothing new has come for 10 s or the daemon has said the rank's death"
              in r.stderr and "`wdrift reload`" in r.stderr,
              "a dead rank's step: rm --force refused at first, saying when the step is dropped and how to end the "
              "wait", r.stderr)
        # ... but once the rank's death is said, or nothing new came for 10 s (a trial's waited 10 minutes, --force
        # refused too). The job ended first: a rank still connected re-sends the step, as --force documents
        alive.kill()
        t0 = time.time()
        r = wd(cfg, "runs", "rm", "dead", "--force", "--wait", "30")
        check(r.returncode == 0 and "removed run 'dead': 1 durable snapshot" in r.stdout
              and "dropped 1 step being received (the ranks still waiting for it are told)" in r.stdout,
              f"runs rm --force --wait 30: the run removed after {time.time() - t0:.1f} s, its step being received "
              "dropped", r.stdout + r.stderr)
        # a rank that waits on its connection is told (a raw publisher: the library's re-sends reconnect)
        rctx0 = zmq.Context()
        try:
            waiting = Publisher(rctx0, tmp, "dead3")
            waiting.tensor(4, "w", np.arange(8, dtype=np.float32), "f32", offset=0, total=16)
            waiting.send_raw([json.dumps({"v": 1, "type": "commit", "run": "dead3", "step": 4, "tensors": 1,
                                          "ranks": 2, "rank": 0, "session": 4242}).encode()])
            end = time.time() + 10
            while time.time() < end and not run_info(cfg, "dead3").get("bytes_pending"):
                time.sleep(0.05)
            r = wd(cfg, "runs", "rm", "dead3", "--force", "--wait", "30")
            waiting.s.setsockopt(zmq.RCVTIMEO, 10000)
            m = waiting.recv() or {}
            check(r.returncode == 0 and "dropped 1 step being received" in r.stdout and m.get("type") == "error"
                  and m.get("code") == "incomplete" and m.get("field") == "ranks" and "the run was removed (wdrift runs rm --force) while this step "
                  "was being received: its parts are dropped; send it again, to be stored anew" in m.get("reason", ""),
                  "... and a rank that waits for the step dropped is told why, with field 'ranks': a refusal its "
              "publisher says and does not retry (a trial's re-sent the step, stuck anew)", json.dumps(m) + r.stdout + r.stderr)
            waiting.s.close(linger=0)
        finally:
            rctx0.destroy(linger=0)
        st = json.loads(wd(cfg, "status", "--json").stdout)
        check(st["snapshots"]["pending"] == 0 and not st["pending_snapshots"]["snapshots"]
              and "run 'dead' step 10: dropped while being received" in dm.log_text(),
              "nothing of it pending after, and the daemon's log says the drop", json.dumps(st["pending_snapshots"]))

        # a job that catches the conflict and goes on: the snapshot whose publish() raised it is
        # queued all the same (raised before queuing it, every other step of such a job was lost).
        # Here a job resumed from a checkpoint at step 10, whose step 10 is not bit for bit the
        # first job's: the run goes on with its later steps
        first_ = Job(ep, "catch", 1)
        jobs.append(first_)
        check(first_.step(0) == "acked 0" and first_.step(10) == "acked 10", "run 'catch': steps 0 and 10 durable")
        first_.close()
        catcher = subprocess.run([PYTHON, "-c", CATCHER, ep, "catch", "10", "20"], env=package_env(),
                                 capture_output=True, text=True, timeout=120)
        check(catcher.stdout.startswith("raised run 'catch' step 10 refused: conflict") and "lost 1" in catcher.stdout
              and durable(cfg, "catch") == 3, "a job resumed mid-run catching the conflict at publish(): "
              f"its next step (20) is stored all the same (durable {durable(cfg, 'catch')})",
              catcher.stdout + catcher.stderr)

        # ... but a job that sent the run again from its first step, with other content, is a
        # re-run under the name: its steps past the first job's are refused too, and said whole
        # once, so that the run holds one job's snapshots (a trial's re-run, catching the error,
        # had its later steps stored after the first job's, while drift said the rows were the
        # first job's)
        first_ = Job(ep, "rerun", 1)
        jobs.append(first_)
        check(first_.step(0) == "acked 0" and first_.step(10) == "acked 10", "run 'rerun': steps 0 and 10 durable")
        first_.close()
        rerun = subprocess.run([PYTHON, "-c", CATCHER, ep, "rerun", "0", "20", "30"], env=package_env(),
                               capture_output=True, text=True, timeout=120)
        said = ("run 'rerun' step 20: a re-run: it sent step 0 again and had step 0 refused as a conflict "
                "(its later steps are refused too: rename it, or stop it, `wdrift runs rm rerun`, and start it again)")
        check(rerun.stdout.startswith("raised run 'rerun' step 0 refused: conflict") and "lost 3" in rerun.stdout
              and durable(cfg, "rerun") == 2 and said in rerun.stderr
              and "run 'rerun' step 30 refused: conflict, as step 20 was" in rerun.stderr,
              f"a re-run from step 0 catching the conflict: steps 20 and 30 refused (durable "
              f"{durable(cfg, 'rerun')}), the first said whole, the next short", rerun.stdout + rerun.stderr)
        info = run_info(cfg, "rerun")
        check(info.get("conflicts") == 3 and "a re-run under the same name?" in info.get("refused", "")
              and "the latest step 30" in info.get("refused", "") and "a re-run's later step" in info.get("refused", "") and info.get("last_step") == 10,
              "runs: the run holds the first job's steps alone, and counts the re-run's 3 refusals", json.dumps(info))
        check(said in dm.log_text(), "the daemon's log says the refusal whole", dm.log_text()[-2000:])
        # a re-run whose first step is the same bytes (the same seed: a duplicate) and whose
        # conflict comes at a later step is one too; its step past the first job's is refused
        first_ = Job(ep, "rerun2", 7)
        jobs.append(first_)
        got = [first_.step(n) for n in (0, 10, 20)]
        first_.close()
        again = Job(ep, "rerun2", 7)    # its draws: step 0 the first job's, step 10 its step 5's
        jobs.append(again)
        got += [again.step(n) for n in (0, 5, 10)]
        # the daemon restarted meanwhile: the re-run's session is in its write-ahead log, and its
        # publisher, reconnected, is refused the same way
        check(dm.stop() == 0 and dm.start() is not None, "the daemon restarted during the re-run",
              dm.log_text()[-2000:])
        got.append(again.step(30))
        again.close()
        check(got[:5] == ["acked 0", "acked 10", "acked 20", "acked 0", "acked 5"] and got[5].startswith("raised")
              and got[6].startswith("raised run 'rerun2' step 30 refused: conflict: run 'rerun2' step 30: a re-run: "
                                    "it sent step 0 again and had step 10 refused as a conflict (its later steps are "
                                    "refused too: rename it, or stop it, `wdrift runs rm rerun2`, and start it again)")
              and durable(cfg, "rerun2") == 4,
              f"a re-run whose step 0 is a duplicate: refused from its first conflict on, after a restart too (durable "
              f"{durable(cfg, 'rerun2')})", "\n".join(got))

        # a re-run with a step new to the run before its first conflict: its duplicate step 0 and
        # new step 5 taken, its conflict at the first job's step 10 makes it a re-run all the same
        # (a review's: a session with a commit taken was deemed the run's own job, and its steps
        # 30 and 40 were stored after the first job's)
        first_ = Job(ep, "gap", 7)
        jobs.append(first_)
        got = [first_.step(n) for n in (0, 10, 20)]
        first_.close()
        again = Job(ep, "gap", 7)   # step 0 the first job's draw, step 5 new, step 10 its step 10's draw 3
        jobs.append(again)
        got += [again.step(n) for n in (0, 5, 10, 30, 40)]
        again.close()
        check(got[:5] == ["acked 0", "acked 10", "acked 20", "acked 0", "acked 5"]
              and got[5].startswith("raised run 'gap' step 10 refused: conflict")
              and got[6].startswith("raised run 'gap' step 30 refused: conflict: run 'gap' step 30: a re-run: it sent "
                                    "step 0 again and had step 10 refused as a conflict (its later steps are refused "
                                    "too: rename it, or stop it, `wdrift runs rm gap`, and start it again)")
              and got[7].startswith("raised run 'gap' step 40 refused: conflict")
              and durable(cfg, "gap") == 4,
              f"a re-run with a new step before its conflict: its later steps refused (durable {durable(cfg, 'gap')})",
              "\n".join(got))
        # a run first published at step 1000 and a job resumed from a checkpoint before it, which
        # sends step 1000 first, other bytes: no re-run (a job that starts over is told by step 0
        # only), its next step is stored (a review's: it was refused, as a re-run, forever)
        first_ = Job(ep, "late1k", 1)
        jobs.append(first_)
        got = [first_.step(n) for n in (1000, 2000)]
        first_.close()
        resumed = Job(ep, "late1k", 2)
        jobs.append(resumed)
        got += [resumed.step(n) for n in (1000, 3000)]
        resumed.close()
        check(got[:2] == ["acked 1000", "acked 2000"] and got[2].startswith("raised run 'late1k' step 1000 refused: "
                                                                            "conflict")
              and got[3] == "acked 3000" and durable(cfg, "late1k") == 3,
              f"a job resumed at the run's first step, not step 0: its later step stored (durable "
              f"{durable(cfg, 'late1k')})", "\n".join(got))
        # the first job still publishing: the hint says to stop both
        first_ = Job(ep, "both", 1)
        jobs.append(first_)
        got = [first_.step(0), first_.step(10)]
        again = Job(ep, "both", 2)
        jobs.append(again)
        got += [again.step(n) for n in (0, 20)]
        first_.close()
        again.close()
        check(got[:2] == ["acked 0", "acked 10"] and got[2].startswith("raised run 'both' step 0 refused: conflict")
              and got[3].startswith("raised") and "a re-run: it sent step 0 again and had step 0 refused" in got[3]
              and "stop both jobs, `wdrift runs rm both`" in got[3] and durable(cfg, "both") == 2,
              "a re-run while the first job publishes: refused, the hint says to stop both jobs", "\n".join(got))
        # a run seeded with step 0 alone (`wdrift send --step 0`), then the training, whose step 0
        # differs: nothing of a first job to keep, its next step is stored (a review's: refused)
        first_ = Job(ep, "seeded", 1)
        jobs.append(first_)
        got = [first_.step(0)]
        first_.close()
        training = Job(ep, "seeded", 2)
        jobs.append(training)
        got += [training.step(n) for n in (0, 10)]
        training.close()
        check(got[0] == "acked 0" and got[1].startswith("raised run 'seeded' step 0 refused: conflict")
              and got[2] == "acked 10" and durable(cfg, "seeded") == 2,
              f"a run seeded with step 0 alone: the training's later step stored (durable {durable(cfg, 'seeded')})",
              "\n".join(got))
        # a job that publishes step 0 (its initial weights, the first job's), then resumes from a
        # checkpoint at 15: its step 20 differs, and the steps it skipped (10) say it resumed, not
        # re-ran: its step 40 is stored (a review's: refused)
        first_ = Job(ep, "resumed0", 1)
        jobs.append(first_)
        got = [first_.step(n) for n in (0, 10, 20, 30)]
        first_.close()
        resumed = Job(ep, "resumed0", 1)   # step 0 the first job's draw; 20 its step 10's, unlike
        jobs.append(resumed)
        got += [resumed.step(n) for n in (0, 20, 40)]
        resumed.close()
        check(got[:5] == ["acked 0", "acked 10", "acked 20", "acked 30", "acked 0"]
              and got[5].startswith("raised run 'resumed0' step 20 refused: conflict") and got[6] == "acked 40"
              and durable(cfg, "resumed0") == 5,
              f"step 0 published, then a resume past step 10: its later step stored (durable "
              f"{durable(cfg, 'resumed0')})", "\n".join(got))
        # a sharded re-run is not refused so: its ranks do not all hear their conflict
        # (protocol.md); its later step is stored
        ranks = [Job(ep, "sharded", 1, ranks=(2, k)) for k in (0, 1)]
        jobs.extend(ranks)
        for j in ranks:
            j.send(0)
        got = [j.read() for j in ranks]
        for j in ranks:
            j.close()
        ranks = [Job(ep, "sharded", 2, ranks=(2, k)) for k in (0, 1)]
        jobs.extend(ranks)
        for n in (0, 10):
            for j in ranks:
                j.send(n)
            got += [j.read() for j in ranks]
        for j in ranks:
            j.close()
        check(got[:2] == ["acked 0", "acked 0"] and got[-2:] == ["acked 10", "acked 10"]
              and durable(cfg, "sharded") == 2,
              f"a sharded re-run from step 0: its later step stored (durable {durable(cfg, 'sharded')})",
              "\n".join(got))

        # a job killed mid-training: gone, so runs rm goes through. The baseline's step 0 first
        # (the content the live job below sends again), so that study fa has rows at step 0
        # beside lowprec's, which its drift log keeps when runs rm makes it again
        first = Job(ep, "base", 4)
        jobs.append(first)
        check(first.step(0) == "acked 0" and first.close()[0] == 0, "the baseline's step 0 durable")
        killed = Job(ep, "lowprec", 3)
        jobs.append(killed)
        check(killed.step(0) == "acked 0", "a job's step 0 durable")
        killed.p.send_signal(signal.SIGKILL)
        killed.kill()
        r = wd(cfg, "runs", "rm", "lowprec")
        check(r.returncode == 0 and "removed run 'lowprec': 1 durable snapshot" in r.stdout,
              "runs rm of a killed job's run: removed", r.stdout + r.stderr)
        check("was not there" not in dm.log_text(),
              "runs rm remakes the study's drift log without calling it missing", dm.log_text()[-1500:])

        # --force: removed under a live job, said in the log once; the job's next step is stored afresh
        live = Job(ep, "base", 4)
        jobs.append(live)
        check(live.step(0) == "acked 0" and live.step(1) == "acked 1", "a live job's steps 0 and 1 durable")
        r = wd(cfg, "runs", "rm", "base", "--force")
        check(r.returncode == 0 and "removed run 'base': 2 durable snapshots" in r.stdout,
              "runs rm --force under a live job: removed", r.stdout + r.stderr)
        check(f"note: 1 publisher still connected (ipc pid {live.p.pid} after step 1): the run now holds only what "
              "it sends next" in r.stderr, "... and the CLI says the job still sends (a trial saw it in the log only)",
              r.stderr)
        log = dm.log_text()
        lines = [x for x in log.splitlines() if "runs rm --force: run 'base'" in x]
        check(len(lines) == 1 and "run 'base'" in lines[0] and "1 publisher still connected" in lines[0],
              "the daemon's log says it once, naming the run and its publisher", "\n".join(lines) or log[-2000:])
        check(live.step(2) == "acked 2" and durable(cfg, "base") == 1, "the live job's next step is stored afresh")
        rc, out = live.close()
        check(rc == 0 and "raised" not in out, "the live job closes", out)

        # a job that exits while rm waits for it: a script's `python train.py; wdrift runs rm RUN` on
        # a loaded machine, where the daemon sees the disconnect late (CI saw it come after the 250 ms
        # the daemon once blocked its loop for, and rm was refused for a job that had exited)
        late = Job(ep, "late", 11)
        jobs.append(late)
        check(late.step(0) == "acked 0", "run 'late': step 0 durable")
        t0 = time.monotonic()
        rm = rm_waiting(cfg, "late")
        time.sleep(0.3)
        check(late.step(1) == "acked 1", "while rm waits, the daemon serves: the job's step 1 is acked")
        st = wd(cfg, "status", "--json")
        check(st.returncode == 0 and rm.poll() is None, "... status answers, and rm still waits",
              st.stderr + (rm.stderr.read() if rm.poll() is not None else ""))
        time.sleep(max(0.0, 0.8 - (time.monotonic() - t0)))
        rc, out = late.close()
        out_rm, err_rm = rm.communicate(timeout=60)
        waited = time.monotonic() - t0
        check(rc == 0 and rm.returncode == 0 and "removed run 'late': 2 durable snapshots" in out_rm
              and 0.8 <= waited < 10, f"runs rm --wait 30 waits for a job that exits 0.8 s later, and removes "
              f"its run as soon as it has ({waited:.2f} s)", out_rm + err_rm)
        live = Job(ep, "late", 12)
        jobs.append(live)
        check(live.step(0) == "acked 0", "run 'late' published afresh")
        t0 = time.monotonic()
        r = wd(cfg, "runs", "rm", "late", "--wait", "0")
        quick = time.monotonic() - t0
        check(r.returncode == 1 and "has 1 publisher connected" in r.stderr and "--wait" not in r.stderr
              and quick < 1.5, f"--wait 0: refused at once ({quick:.2f} s)", r.stderr)
        # rm given up (Ctrl-C) while it waits: the daemon carries out nothing once the job exits
        rm = rm_waiting(cfg, "late")
        time.sleep(0.5)
        rm.send_signal(signal.SIGINT)
        rm.communicate(timeout=30)
        rc, out = live.close()
        check(rc == 0, "... then its job exits", out)
        time.sleep(1.0)
        check(durable(cfg, "late") == 1 and not [x for x in dm.log_text().splitlines()
                                                 if "runs rm: run 'late': 1 durable" in x],
              "runs rm interrupted while it waited: nothing is removed when the job exits", dm.log_text()[-1500:])
        live = Job(ep, "late", 12)     # the same job again: its step 0 a duplicate, acked
        jobs.append(live)
        check(live.step(0) == "acked 0" and durable(cfg, "late") == 1, "run 'late' published again")
        t0 = time.monotonic()
        r = wd(cfg, "runs", "rm", "late", "--wait", "1.5")
        waited = time.monotonic() - t0
        check(r.returncode == 1 and "has 1 publisher connected" in r.stderr and "still so after 1.5 s of waiting" in r.stderr
              and "--wait SECONDS" in r.stderr and waited >= 1.5,
              f"--wait 1.5: refused once the time is up, saying how long it waited ({waited:.2f} s)", r.stderr)
        lines = [x for x in dm.log_text().splitlines() if "runs rm: refused: run 'late'" in x]
        check(len(lines) == 2, "each refusal is logged once, not once per look", "\n".join(lines))
        for bad in ("-1", "x", "61", "nan", "", "0x10", "1e1"):     # decimal seconds only (a trial's 0x10)
            r = wd(cfg, "runs", "rm", "late", "--wait", bad)
            check(r.returncode == 2 and "--wait" in r.stderr and "0 to 60" in r.stderr,
                  f"runs rm --wait {bad!r}: a usage error naming the range", r.stderr)
        rctx = zmq.Context()
        for bad, word in (("x", "'wait' must be"), (1e9, "'wait' must be"), (-1, "'wait' must be")):
            rr = harness_control(rctx, tmp, {"v": 1, "cmd": "runs_rm", "run": "late", "wait": bad})
            check(rr and rr.get("ok") is False and word in rr.get("error", ""),
                  f"control runs_rm with wait {bad!r}: refused, naming 'wait'", json.dumps(rr))
        # a client that sends no "wait" (an older wdrift, which knows no "again"): answered at once
        t0 = time.monotonic()
        rr = harness_control(rctx, tmp, {"v": 1, "cmd": "runs_rm", "run": "late"}, timeout=10000)
        quick = time.monotonic() - t0
        check(rr and rr.get("ok") is False and "again" not in rr and "has 1 publisher connected" in rr.get("error", "")
              and quick < 1.5, f"control runs_rm without 'wait': refused at once, never 'again' ({quick:.2f} s)",
              json.dumps(rr))
        rctx.destroy(linger=0)
        check(durable(cfg, "late") == 1, "... and nothing was removed")
        live.close()

        # bad input: --force on the listing, a non-boolean force on the control socket
        r = wd(cfg, "runs", "--force")
        check(r.returncode == 2, f"runs --force (no rm): usage error (exit {r.returncode})", r.stderr)
        r = wd(cfg, "runs", "remove", "fa")
        check(r.returncode == 2 and "unknown subcommand 'remove'" in r.stderr and "wdrift runs rm RUN" in r.stderr,
              "runs remove: a usage error naming rm", r.stderr)
        r = wd(cfg, "runs", "rm", "--help")
        check(r.returncode == 0 and r.stdout.startswith("usage: wdrift runs rm RUN") and "--force" in r.stdout
              and "--wait SECONDS" in r.stdout and "publisher" in r.stdout,
              "runs rm --help: rm's own help, with --force and --wait", r.stdout)
        # many ranks connected (a sharded job): whole entries, then how many more, never a pid cut short
        ctx = zmq.Context()
        ranks = Job(ep, "many", 6)
        jobs.append(ranks)
        check(ranks.step(0) == "acked 0", "a run 'many' with a step durable")
        hellos = [Publisher(ctx, tmp, "many") for _ in range(40)]     # more than the 400 bytes hold
        for h in hellos:
            h.hello()
        check(publishers(cfg, "many", 41) == 41, "runs --json: 41 publishers")
        r = wd(cfg, "runs", "rm", "many", "--wait", "0")
        m = re.search(r"has 41 publishers connected \((.*)\): a job", r.stderr)
        listed = m.group(1).split("; ") if m else []
        more = re.fullmatch(r"and (\d+) more", listed[-1]) if listed else None
        whole = [x for x in listed[:-1] if re.fullmatch(r"ipc pid \d+( after step 0)?", x)]
        check(r.returncode == 1 and more and len(whole) == len(listed) - 1 and
              len(whole) + int(more.group(1)) == 41,
              "41 publishers: whole entries, then 'and N more', adding up to 41", r.stderr)
        for h in hellos:
            h.s.close()
        ranks.close()

        # a connection whose last message and close are read together (the daemon's loop stalled:
        # a loaded machine): the monitor's disconnect is read before the message, which must not
        # count the connection as open again, for good (CI twice: runs rm refused, after its 2 s
        # wait too, for a job gone long before, named "fd 24")
        ghosts = [Publisher(ctx, tmp, "ghost") for _ in range(6)]
        check(all(h.hello() is not None for h in ghosts), "6 connections said hello for run 'ghost'")
        # ... and 3 more whose one message is that last one: connected (the handshake seen), silent
        for _ in range(3):
            h = Publisher(ctx, tmp, "ghost", connect=False)
            mon = h.s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
            h.connect()     # after the monitor: its handshake could otherwise come first, unseen (flaky)
            check(mon.poll(5000) and mon.recv_multipart(), "a silent connection's handshake")
            h.s.disable_monitor()
            mon.close()
            ghosts.append(h)
        time.sleep(0.2)     # their connection events read by the daemon's loop
        os.kill(dm.proc.pid, signal.SIGSTOP)
        try:
            for h in ghosts:
                h.s.setsockopt(zmq.LINGER, 2000)
                h.send_raw([json.dumps({"v": 1, "type": "hello", "run": "ghost"}).encode()])
                h.s.close()
            time.sleep(0.5)     # written to the kernel's buffers, then closed
        finally:
            os.kill(dm.proc.pid, signal.SIGCONT)
        ghost = Job(ep, "ghost", 14)
        jobs.append(ghost)
        check(ghost.step(0) == "acked 0" and ghost.close()[0] == 0, "run 'ghost': a step durable, its job gone")
        got = publishers(cfg, "ghost", 0)
        check(got == 0, f"connections closed while the daemon was stopped: none counted open after ({got})",
              json.dumps(run_info(cfg, "ghost")))
        r = wd(cfg, "runs", "rm", "ghost", "--wait", "0")
        check(r.returncode == 0, "... and runs rm goes through", r.stderr)

        # a daemon of an older version, which does not report publishers: '?' and a line, not '-' (none)
        old = ctx.socket(zmq.REP)
        old.setsockopt(zmq.LINGER, 0)
        old.bind(f"ipc://{tmp}/old.sock")

        def serve():
            if old.poll(20000):
                old.recv()
                old.send_string(json.dumps({"v": 1, "ok": True, "runs": [
                    {"name": "fa", "durable": 1, "last_step": 0, "idle": 1.0, "bytes_pending": 0,
                     "role": "none", "studies": [], "conflicts": 0}]}))
        th = threading.Thread(target=serve)
        th.start()
        r = subprocess.run([WDRIFT, "runs", "--endpoint", f"ipc://{tmp}/old.sock"], capture_output=True, text=True,
                           timeout=60)
        th.join()
        old.close()
        ctx.term()
        row = [x for x in r.stdout.splitlines() if x.startswith("fa ")]
        check(r.returncode == 0 and row and row[0].split()[-1] == "?" and
              "publishers ?: this wdriftd does not report them" in r.stdout,
              "runs against a daemon that does not report publishers: '?' and a line saying why", r.stdout + r.stderr)

        # the daemon stopped while a runs rm waits: the client is told, not left to time out
        last = Job(ep, "last", 13)
        jobs.append(last)
        check(last.step(0) == "acked 0", "run 'last': step 0 durable")
        t0 = time.monotonic()
        rm = rm_waiting(cfg, "last")
        time.sleep(0.5)
        check(rm.poll() is None, "runs rm --wait 30 waits")
        dm.stop()
        out_rm, err_rm = rm.communicate(timeout=60)
        check(rm.returncode == 1 and "wdriftd is stopping: run 'last' was not removed" in err_rm
              and time.monotonic() - t0 < 20, "the daemon stopping: a waiting rm is refused, saying so", err_rm)
    finally:
        for j in jobs:
            j.kill()
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
