#!/usr/bin/env python3
"""t100_rerun_conflict.py: a re-run under the same name is said beside the rows it leaves standing.

A new user's trial re-ran its candidate job from step 0 under the same run
name. Each snapshot it re-sent was refused as a conflict (the job raised
WdriftError), but `wdrift drift` went on showing the first run's rows with
no word of it; only `status` counted "2 conflicts", naming no run. Now the
daemon keeps, per run, the conflicts since its start (how many, the latest
step and when), and says it where the rows are read:
- `wdrift drift STUDY` prints a `refused` line naming the run, its role,
  the count, the latest step and `wdrift runs rm RUN`; `--json` has
  "refused";
- `wdrift runs` says it under the table; `--json` gives each run
  "conflicts" (and "refused", the sentence, only then);
- a run with no conflict has neither; after `wdrift runs rm` the line goes;
- /metrics has wdrift_run_conflicts_total{run}, for a Grafana alert;
- `drift` also says when the step's rows were computed ("compared_at"),
  so that an old result does not pass for a fresh one.
Real daemon, real publisher processes (the Python package), the real CLI;
stopped by pid, the temp dir removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, free_port, package_env, summary, teardown  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
WDRIFT = os.path.abspath(os.path.join(BUILD, "wdrift"))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")

# run, seed, steps...: publishes each step and waits for all to be acked or refused
JOB = r'''
import sys, numpy as np, wdrift
ep, run, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4:]]
rng = np.random.default_rng(seed)
pub = wdrift.Publisher(ep, run, ack_timeout=5.0)
for step in steps:
    try:
        pub.publish(step, {"w": rng.standard_normal(256).astype(np.float32)})
    except wdrift.WdriftError as e:
        print("raised", e, flush=True)
try:
    pub.flush(20)
    pub.close(5)
except wdrift.WdriftError as e:
    print("raised", e, flush=True)
'''

# The two races' start: a publisher of the re-run, and a wait for its conflict count
RACE_HEAD = r'''
import sys, time, numpy as np, wdrift
ep, run = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(8)
pub = wdrift.Publisher(ep, run, ack_timeout=10.0)
def conflicts(want):
    end = time.time() + 20
    while pub.stats()["conflicts"] < want and time.time() < end:
        time.sleep(0.02)
    return pub.stats()["conflicts"]
'''

# The re-run of steps 0 and 10, with step 10's conflict made to come back before publish(10)
# returns: its error must be step 0's, the earlier snapshot's, and step 10's the next call's.
# (publish quoted the latest refusal's text, step 10's, beside step 0's count: seen once.)
RACE = RACE_HEAD + r'''
pub.publish(0, {"w": rng.standard_normal(256).astype(np.float32)})
print("conflicts after step 0:", conflicts(1), flush=True)
send = pub._send_host
def send_then_wait(step, entries):
    send(step, entries)
    print("conflicts inside publish(10):", conflicts(2), flush=True)
pub._send_host = send_then_wait
for what in ("publish", "flush"):
    try:
        pub.publish(10, {"w": rng.standard_normal(256).astype(np.float32)}) if what == "publish" else pub.flush(20)
        print(what, "raised nothing", flush=True)
    except wdrift.WdriftError as e:
        print(what, "raised", e, flush=True)
pub.close(5)
'''

# close(0.5) while step 10's conflict is on its way (a relay holds the daemon's replies 1.5 s): it
# must come back between close's reads and be raised, not lost (close read the count, then the
# words, and raised by the count alone: a review's)
RACE_CLOSE = RACE_HEAD + r'''
pub.publish(0, {"w": rng.standard_normal(256).astype(np.float32)})
conflicts(1)
try:
    pub.publish(10, {"w": rng.standard_normal(256).astype(np.float32)})
except wdrift.WdriftError as e:
    print("publish raised", e, flush=True)
stats = pub.stats
def stats_then_wait():
    s = stats()
    pub.stats = stats
    print("conflicts in close's stats:", s["conflicts"], "then", conflicts(2), flush=True)
    return s
pub.stats = stats_then_wait
try:
    print("close returned", pub.close(0.5), flush=True)
except wdrift.WdriftError as e:
    print("close raised", e, flush=True)
print("final conflicts", pub.stats()["conflicts"], flush=True)
'''


class SlowReplies:
    """A relay between publishers and the daemon's ingest that holds each reply `delay` seconds:
    a ROUTER where the publishers connect, one DEALER to the daemon per publisher connection."""

    def __init__(self, front, back, delay):
        self.front, self.back, self.delay = front, back, delay
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.ready = threading.Event()
        self.thread.start()
        self.ready.wait(10)

    def run(self):
        ctx = zmq.Context()
        fr = ctx.socket(zmq.ROUTER)
        fr.setsockopt(zmq.LINGER, 0)
        fr.bind(self.front)
        self.ready.set()
        backs, held = {}, []
        poller = zmq.Poller()
        poller.register(fr, zmq.POLLIN)
        while not self.stop.is_set():
            for sock, _ in poller.poll(20):
                if sock is fr:
                    ident, *frames = fr.recv_multipart()
                    if ident not in backs:
                        b = ctx.socket(zmq.DEALER)
                        b.setsockopt(zmq.LINGER, 0)
                        b.connect(self.back)
                        backs[ident] = b
                        poller.register(b, zmq.POLLIN)
                    backs[ident].send_multipart(frames)
                else:
                    ident = next(i for i, b in backs.items() if b is sock)
                    held.append((time.time() + self.delay, [ident, *sock.recv_multipart()]))
            while held and held[0][0] <= time.time():
                fr.send_multipart(held.pop(0)[1])
        for b in backs.values():
            b.close()
        fr.close()
        ctx.term()

    def close(self):
        self.stop.set()
        self.thread.join(10)


def job(ep, run, seed, *steps):
    env = package_env()
    return subprocess.run([PYTHON, "-c", JOB, ep, run, str(seed), *map(str, steps)], env=env,
                          capture_output=True, text=True, timeout=120)


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def wait_drift(cfg, step, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        r = wd(cfg, "drift", "fa", "--json")
        if r.returncode == 0:
            d = json.loads(r.stdout)
            if d.get("step") == step and d.get("complete"):
                return d
        time.sleep(0.2)
    return None


def main():
    tmp = tempfile.mkdtemp(prefix="t100-")
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config()
        port = free_port()
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:
            f.write(text.replace("  events: ipc://", f"  metrics: 127.0.0.1:{port}\n  events: ipc://", 1))
        check(dm.start() is not None, "daemon ready")
        ep = f"ipc://{tmp}/run/ingest.sock"
        t_first = time.time()
        for run, seed in (("base", 1), ("lowprec", 2), ("fa", 3)):
            r = job(ep, run, seed, 0, 10)
            check(r.returncode == 0 and "raised" not in r.stdout, f"first run of '{run}': published", r.stdout + r.stderr)
        d = wait_drift(cfg, 10)
        check(d is not None, "step 10 compared")
        # when its rows were computed: an old result must not pass for a fresh one
        at = d.get("compared_at") if d else None
        check(isinstance(at, (int, float)) and t_first - 1 <= at <= time.time(),
              "drift --json: compared_at, when the step's rows were computed (Unix seconds)", str(at))
        r = wd(cfg, "drift", "fa")
        head = r.stdout.splitlines()[0] if r.stdout else ""
        check(head.startswith("study      fa, step 10, baseline base, compared ") and head.endswith(" s ago)")
              and " UTC (" in head, "drift's first line says when, and how long ago", head)
        check(d is not None and "refused" not in d, "no conflict yet: no 'refused' in drift --json")
        r = wd(cfg, "drift", "fa")
        check(r.returncode == 0 and "refused" not in r.stdout, "... nor a refused line", r.stdout)

        # the candidate's job re-run from step 0 under the same name, with other weights
        t0 = time.time()
        r = job(ep, "fa", 99, 0, 10)
        check("raised" in r.stdout and "conflict" in r.stdout, "the re-run's job is refused (WdriftError)",
              r.stdout + r.stderr)
        # the first job has ended: "stop both jobs" would send the user looking for it
        check("the first job has ended: rename this one, or stop it, `wdrift runs rm fa`, and start it again)"
              in r.stdout and "both jobs" not in r.stdout,
              "... told that the first job has ended, and the way out for this one alone", r.stdout)

        r = wd(cfg, "drift", "fa")
        lines = [x for x in r.stdout.splitlines() if x.startswith("refused")]
        check(r.returncode == 0 and len(lines) == 1, "drift: one refused line beside the rows", r.stdout)
        line = lines[0] if lines else ""
        check("'fa' (candidate)" in line and "2 snapshots refused as conflicts" in line
              and "the latest step 10" in line and "wdrift runs rm fa" in line and "first" in line,
              "... naming the run, its role, the count, the latest step and runs rm", line)
        # no job runs now: a trial read "stop both jobs" here beside the job's own "the first job has ended"
        check("stop every job still publishing it (`wdrift runs` counts them), `wdrift runs rm fa`" in line
              and "both jobs" not in line, "... and its way out holds whether a job runs or not", line)
        d = json.loads(wd(cfg, "drift", "fa", "--json").stdout)
        check(d.get("refused") == line[len("refused"):].strip(), "drift --json: \"refused\", the same words",
              json.dumps(d.get("refused")))
        check(d["step"] == 10 and d["complete"], "the rows shown are still step 10's, complete")

        r = wd(cfg, "runs")
        lines = [x for x in r.stdout.splitlines() if x.startswith("refused")]
        check(r.returncode == 0 and len(lines) == 1 and "'fa' (candidate)" in lines[0], "runs: the refused line",
              r.stdout)
        runs = {x["name"]: x for x in json.loads(wd(cfg, "runs", "--json").stdout)["runs"]}
        check(runs["fa"].get("conflicts") == 2 and "2 snapshots refused" in runs["fa"].get("refused", "")
              and runs["base"].get("conflicts") == 0 and "refused" not in runs["base"],
              "runs --json: conflicts per run, the sentence only where there are some",
              json.dumps(runs["fa"]) + json.dumps(runs["base"]))
        at = runs["fa"].get("conflict_at")
        check(isinstance(at, (int, float)) and t0 - 2 <= at <= time.time() + 1,
              "runs --json: conflict_at, when the latest was refused (Unix seconds)", str(at))

        r = subprocess.run(["curl", "-sS", "-m", "10", f"http://127.0.0.1:{port}/metrics"], capture_output=True,
                           text=True)
        lines = [x for x in r.stdout.splitlines() if x.startswith("wdrift_run_conflicts_total")]
        check(lines == ['wdrift_run_conflicts_total{run="fa"} 2'] and
              "# TYPE wdrift_run_conflicts_total counter" in r.stdout,
              "/metrics: wdrift_run_conflicts_total, by run, for the runs that have some", "\n".join(lines))
        # the daemon's log: the first conflict whole, with its way out; the next one short, and
        # both findable by the word the CLI and docs use (a trial grepped "conflict": nothing)
        log = [x for x in dm.log_text().splitlines() if "refused as a conflict: run 'fa'" in x]
        check(len(log) == 2 and "run 'fa' step 0 is durable with other content: tensor 'w' crc32 differs (a "
              "re-run? the first job has ended" in log[0] and "run 'fa' step 10: tensor 'w' crc32 differs (2 of its "
              "snapshots refused so; the way out as said at step 0)" in log[1], "daemon log: the first conflict whole, the "
              "second in short", "\n".join(log))
        # a re-run of many steps: a line for each, 10 a minute at most, not the whole reason each time
        steps = [str(s) for s in range(15)]
        r = job(ep, "flood", 5, *steps)
        check(r.returncode == 0 and "raised" not in r.stdout, "a run 'flood' of 15 steps", r.stdout + r.stderr)
        r = job(ep, "flood", 6, *steps)
        check(r.stdout.count("raised") >= 1, "its re-run: refused", r.stdout + r.stderr)
        log = [x for x in dm.log_text().splitlines() if "refused as a conflict: run 'flood'" in x]
        # (the 10 a minute are the daemon's, for every run: 'fa''s short line above may be among them)
        check(5 <= len(log) <= 11 and sum("(a re-run? the first job has ended" in x for x in log) == 1
              and "run 'flood' step 1: tensor 'w' crc32 differs (2 of its snapshots refused so;" in log[1],
              "15 conflicts of a re-run: the first whole, then short lines, at most 10 in the minute",
              "\n".join(log))
        # a conflict that comes back while publish() runs is the next call's: publish's error is the
        # earlier snapshot's, in its own words
        r = job(ep, "race", 7, 0, 10)
        check(r.returncode == 0 and "raised" not in r.stdout, "a run 'race', steps 0 and 10", r.stdout + r.stderr)
        r = subprocess.run([PYTHON, "-c", RACE, ep, "race"], env=package_env(), capture_output=True, text=True,
                           timeout=120)
        said = {x.split(" raised")[0]: x for x in r.stdout.splitlines() if " raised" in x}
        check("conflicts inside publish(10): 2" in r.stdout and "run 'race' step 0 refused: conflict" in
              said.get("publish", "") and "step 10" not in said.get("publish", ""),
              "publish(10), step 10's conflict already in: it raises step 0's, in step 0's words",
              r.stdout + r.stderr)
        check("run 'race' step 10 refused: conflict" in said.get("flush", ""),
              "... and the next call raises step 10's", r.stdout + r.stderr)
        check(wd(cfg, "runs", "rm", "race").returncode == 0, "runs rm race")
        r = job(ep, "slow", 7, 0, 10)
        check(r.returncode == 0 and "raised" not in r.stdout, "a run 'slow', steps 0 and 10", r.stdout + r.stderr)
        relay = SlowReplies(f"ipc://{tmp}/run/slow.sock", ep, 1.5)
        try:
            r = subprocess.run([PYTHON, "-c", RACE_CLOSE, f"ipc://{tmp}/run/slow.sock", "slow"],
                               env=package_env(), capture_output=True, text=True, timeout=120)
        finally:
            relay.close()
        check("publish raised run 'slow' step 0 refused: conflict" in r.stdout
              and "conflicts in close's stats: 1 then 2" in r.stdout
              and "close raised run 'slow' step 10 refused: conflict" in r.stdout
              and "final conflicts 2" in r.stdout,
              "close(0.5), step 10's conflict coming back between its reads: raised, and in its stats",
              r.stdout + r.stderr)
        # a restart: the conflicts are still counted and said, from the WAL (they went with the process)
        keys = ("conflicts", "conflict_at", "refused")
        before = {x["name"]: x for x in json.loads(wd(cfg, "runs", "--json").stdout)["runs"]}
        drift_before = json.loads(wd(cfg, "drift", "fa", "--json").stdout).get("refused")
        dm.stop()
        check(dm.start() is not None, "the daemon restarts")
        after = {x["name"]: x for x in json.loads(wd(cfg, "runs", "--json").stdout)["runs"]}
        check(all(before[n].get(k) is not None and after.get(n, {}).get(k) == before[n][k]
                  for n in ("fa", "flood", "slow") for k in keys) and after["fa"]["conflicts"] == 2,
              "after a restart, runs --json says each run's conflicts as before: how many, the latest, when",
              json.dumps({n: {k: after.get(n, {}).get(k) for k in keys} for n in ("fa", "flood", "slow")}))
        check(drift_before and json.loads(wd(cfg, "drift", "fa", "--json").stdout).get("refused") == drift_before,
              "... and drift's refused line", drift_before or "")
        check(wd(cfg, "runs", "rm", "slow").returncode == 0, "runs rm slow")
        check(wd(cfg, "runs", "rm", "flood").returncode == 0, "runs rm flood")
        r = wd(cfg, "runs", "rm", "fa")
        check(r.returncode == 0, "runs rm fa", r.stderr)
        r = wd(cfg, "runs")
        check(not any(x.startswith("refused") for x in r.stdout.splitlines()), "after runs rm: no refused line",
              r.stdout)
        # the step's candidate rows went with it: no time on the first line, where it
        # would read as the step's (a trial read "compared ... ago" above "no candidate",
        # the next "proxies compared" beside no proxy numbers)
        r = wd(cfg, "drift", "fa")
        head = r.stdout.splitlines()[0] if r.stdout else ""
        check(r.returncode == 0 and "(no candidate compared at this step yet)" in r.stdout
              and head == "study      fa, step 10, baseline base", "after runs rm: no time on drift's first line",
              r.stdout)
        dm.stop()
        check(dm.start() is not None, "the daemon restarts again")
        r = wd(cfg, "runs", "--json")
        check(r.returncode == 0 and not [x for x in json.loads(r.stdout)["runs"] if x.get("conflicts")],
              "... and the runs removed stay without conflicts: their records went with runs rm", r.stdout)
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
