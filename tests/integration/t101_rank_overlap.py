#!/usr/bin/env python3
"""t101_rank_overlap.py: ranks that each send the same piece are told at once, by rank.

A new user's trial ran three ranks that each published the same half of a
tensor (a sharding mistake). Every rank committed, but commits carried no
rank, so the daemon could not tell three ranks from one rank re-committing
on new connections: the snapshot waited limits.pending_timeout (60 s here)
before the ranks heard it was incomplete. Now each publisher gives its
rank (found from torchrun's RANK and WORLD_SIZE here; a torch.distributed
group in t69), and once every rank has committed a snapshot that is still
not whole is refused at once, saying so. Three real publisher processes,
a real daemon. Then a job whose rank died is restarted at once: its
new ranks (new publisher sessions) are not taken for the dead job's
re-sends, and the step is stored; restarted before the step expired, the
step is stored too, and the old job's waiting ranks get the ack. Two ranks given the same rank are said
at once in the log, and the expiry names the rank committed twice beside
the one that never was. Also the Python argument's errors (rank out of
range, rank without ranks). Stopped by pid, the temp dir removed, also on
failure.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, package_env, stop_procs, summary, teardown  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
WDRIFT = os.path.abspath(os.path.join(BUILD, "wdrift"))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
W = 3

# One rank: publishes, at step 1 (or argv[4]), the first half of a 4096-element tensor (mode
# "same": every rank the same half) or its own third (mode "own"); mode "none" publishes nothing
RANK = r'''
import sys, time, warnings, numpy as np, wdrift
ranks, mode = int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "same"
step = int(sys.argv[4]) if len(sys.argv) > 4 else 1
pub = wdrift.Publisher(sys.argv[1], sys.argv[5] if len(sys.argv) > 5 else "fa", ranks=ranks, ack_timeout=30.0)
print("rank", pub.rank, flush=True)
if mode == "none":
    sys.exit(0)
x = np.arange(4096, dtype=np.float32)
lo, hi = (0, 2048) if mode == "same" else (pub.rank * 4096 // ranks, (pub.rank + 1) * 4096 // ranks)
if mode == "floor":  # size // ranks each: the last 4096 % ranks elements in no rank's piece
    lo, hi = pub.rank * (4096 // ranks), (pub.rank + 1) * (4096 // ranks)
at = 0 if mode == "offset0" else lo  # offset0: each its own bytes, all at offset 0 (an off-by-rank slip)
total = 4096 + (1024 if mode == "total" and pub.rank == 1 else 0)  # rank 1 says another total
want = 1
if mode == "replay":  # a job restarted from a checkpoint: the step before first, then this one
    pub.publish(step - 1, {"w": wdrift.Shard(x[lo:hi], offset=lo, shape=(4096,))})
    want = 2
t0 = time.monotonic()
pub.publish(step, {"w": wdrift.Shard(x[lo:hi], offset=at, shape=(total,))})
while pub.stats()["refused"] + pub.stats()["acked"] + pub.stats()["conflicts"] < want and \
        time.monotonic() - t0 < 50:
    time.sleep(0.05)
print("after %.2f" % (time.monotonic() - t0), flush=True)
s = pub.stats()
print("refused", s["refused"], "acked", s["acked"], flush=True)
print("conflicts", s["conflicts"], flush=True)
if mode == "total":  # a job's ranks stay up a while: one started late is of this job, not a new one's
    time.sleep(5)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pub.close(1)
'''

ERRORS = r'''
import sys, wdrift
for kw in ({"ranks": 3, "rank": 3}, {"ranks": 3, "rank": -1}, {"rank": 0}):
    try:
        wdrift.Publisher(sys.argv[1], "fa", **kw)
        print("no error", kw)
    except ValueError as e:
        print("ValueError", e)
'''


def env_for(rank=None, world=None):
    env = package_env()
    for k in ("RANK", "WORLD_SIZE"):
        env.pop(k, None)
    if rank is not None:
        env.update(RANK=str(rank), WORLD_SIZE=str(world))
    return env


def main():
    tmp = tempfile.mkdtemp(prefix="t101-")
    dm = Daemon(tmp)
    procs = []
    try:
        path = dm.write_config(limits="pending_timeout: 60")
        check(dm.start() is not None, "daemon ready (limits.pending_timeout: 60)")
        ep = f"ipc://{tmp}/run/ingest.sock"
        procs = [subprocess.Popen([PYTHON, "-c", RANK, ep, str(W)], env=env_for(k, W), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for k in range(W)]
        outs = [p.communicate(timeout=120) for p in procs]
        ranks = sorted(o.splitlines()[0] for o, _ in outs if o)
        check(ranks == [f"rank {k}" for k in range(W)], "each publisher found its rank from RANK and WORLD_SIZE",
              str(ranks))
        for k, (out, err) in enumerate(outs):
            lines = out.splitlines()
            after = float(lines[1].split()[1]) if len(lines) > 1 else 99
            check(len(lines) > 2 and lines[2] == "refused 1 acked 0" and after < 20,
                  f"rank {k}: refused in {after:.2f} s, not after pending_timeout (60 s)", out + err)
            said = [x for x in err.splitlines() if "step 1 refused: incomplete" in x]
            check(len(said) == 1 and "every rank (3 of 3) committed, and the snapshot is not whole: 'w' has 2048 "
                  "of 4096 elements, missing [2048, 4096): do two ranks send the same piece, or one another's?"
                  in said[0],
                  f"rank {k}: said once on stderr, with what is missing", err)
        log = dm.log_text()
        check(log.count("run 'fa' step 1: every rank (3 of 3) committed") == 1, "the daemon logs it once",
              log[-2000:])
        # the split leaves the last element out (4096 // 3 each): no rank sent it, so the question is
        # the split, not two ranks sending the same piece (a trial's 262144 // 3 was asked that)
        procs.extend(ps := [subprocess.Popen([PYTHON, "-c", RANK, ep, str(W), "floor", "1", "ff"], env=env_for(k, W),
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                            for k in range(W)])
        outs = [p.communicate(timeout=120) for p in ps]
        check(all("refused 1 acked 0" in o and "every rank (3 of 3) committed, and the snapshot is not whole: 'w' has "
                  "4095 of 4096 elements, missing [4095, 4096): no rank sent it: does the job's split leave elements "
                  "out (size // ranks, when the size is no multiple of them)?" in e and "the same piece" not in e
                  for o, e in outs),
              "pieces that leave an element out: refused at once, asking about the split", "\n".join(e for _, e in outs))
        # a job whose rank 2 died before its part: the others are refused once the step
        # expires; the job restarted at once sends the step again, whole: stored (a trial's
        # restarted job lost it, each commit taken for the dead job's re-send)
        dm.stop()
        dm.write_config(limits="pending_timeout: 2")
        check(dm.start() is not None, "restarted with limits.pending_timeout: 2")

        def start(modes, rank_of=lambda k: k, step=1, run="fa"):
            ps = [subprocess.Popen([PYTHON, "-c", RANK, ep, str(W), m, str(step), run], env=env_for(rank_of(k), W),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for k, m in enumerate(modes)]
            procs.extend(ps)
            return ps

        def job(modes, rank_of=lambda k: k, step=1, run="fa"):
            return [p.communicate(timeout=120) for p in start(modes, rank_of, step, run)]

        def status_until(step, want):
            """status's line of the pending step, once it holds want (or after 30 s)."""
            seen, end = "", time.time() + 30
            while time.time() < end and want not in seen:
                r = subprocess.run([WDRIFT, "status", "-c", path], capture_output=True, text=True, timeout=30)
                seen = next((x for x in r.stdout.splitlines() if f"'fa' step {step}" in x), seen)
                time.sleep(0.05)
            return seen
        outs = job(["own", "own", "none"])
        check(all("refused 1 acked 0" in o and "rank 2 of 3 never committed" in e for o, e in outs[:2]),
              "rank 2 dead: ranks 0 and 1 refused, naming it", "\n".join(o + e for o, e in outs[:2]))
        outs = job(["own", "own", "own"])
        check(all("refused 0 acked 1" in o for o, _ in outs), "the job restarted at once: the step stored, "
              "every rank acked", "\n".join(o + e for o, e in outs))
        log = dm.log_text()
        check("by a publisher that had not committed this run by then (a new job?): taken as new" in log,
              "the daemon says it took the new job's commits as new", log[-1500:])
        # the same on a brand-new run whose first step expired, so that the run holds
        # nothing durable: the restarted job's step is stored too (a review feared the
        # run, and the sessions it knew, forgotten, and the step refused as a re-send)
        # a restarted job that first publishes the step before the expired one, from its checkpoint,
        # as a real one does: its sessions have committed the run by then, and are still not the dead
        # job's (a trial's restarted job lost the step, taken for the dead job's re-sends)
        outs = job(["own", "own", "own"], step=4)
        outs = job(["own", "own", "none"], step=5)
        check(all("refused 1 acked 0" in o for o, _ in outs[:2]), "step 5, rank 2 dead: refused",
              "\n".join(o + e for o, e in outs[:2]))
        outs = job(["replay", "replay", "replay"], step=5)
        check(all("refused 0 acked 2" in o for o, _ in outs), "the job restarted at step 4 (a duplicate), "
              "then step 5 at once: stored, every rank acked", "\n".join(o + e for o, e in outs))
        outs = job(["own", "own", "none"], run="fb")
        check(all("refused 1 acked 0" in o and "rank 2 of 3 never committed" in e for o, e in outs[:2]),
              "a new run's first step, rank 2 dead: refused, naming it", "\n".join(o + e for o, e in outs[:2]))
        outs = job(["own", "own", "own"], run="fb")
        check(all("refused 0 acked 1" in o for o, _ in outs), "the job restarted at once: its first step stored",
              "\n".join(o + e for o, e in outs))
        # two ranks given the same rank (RANK=1 twice, rank 0 never named): said at once in
        # the log, and the expiry names the twice-committed rank beside the missing one (it
        # named rank 0 alone, a dead rank, which it was not)
        # (limits.pending_timeout 6: a lag is said after 3 s, before the expiry)
        dm.write_config(limits="pending_timeout: 6")
        r = subprocess.run([WDRIFT, "reload", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "reload: limits.pending_timeout 6", r.stdout + r.stderr)
        ps = start(["own"] * W, rank_of=lambda k: 1 if k < 2 else k, step=2)
        # while it waits, status says so too (a trial's status said "from ranks 1, 2 of 3" alone)
        # (until the third commit too: the second rank 1 may come before rank 2, as once under load)
        seen = status_until(2, "from ranks 1, 2 of 3 (not yet: 0; rank 1 committed by 2 publishers)")
        check("from ranks 1, 2 of 3 (not yet: 0; rank 1 committed by 2 publishers)" in seen,
              "status, while it waits: the rank committed twice", seen)
        outs = [p.communicate(timeout=120) for p in ps]
        check(all("refused 1 acked 0" in o for o, _ in outs), "the same rank twice: the step refused",
              "\n".join(o + e for o, e in outs))
        check(all("rank 0 of 3 never committed" in e and "rank 1 committed by 2 publishers" in e
                  for _, e in outs), "... its refusal names the rank never committed and the one committed twice",
              "\n".join(e for _, e in outs))
        log = dm.log_text()
        check(log.count("run 'fa' step 2: rank 1 of 3 committed by a second publisher") == 1,
              "the daemon warns at once, once", log[-2000:])
        check("run 'fa' step 2 waits for" not in log,
              "... and not later as a rank that never started (a trial's log said both)", log[-2000:])
        # a job restarted BEFORE its step expired (rank 2 dead, the job started again at
        # once): the new job's ranks commit every part again, from new sessions, and the
        # step is stored; every waiter, the old job's too, gets the ack
        dm.write_config(limits="pending_timeout: 60")
        r = subprocess.run([WDRIFT, "reload", "-c", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "reload: limits.pending_timeout 60", r.stdout + r.stderr)
        old = start(["own", "own", "none"], step=3)
        seen = status_until(3, "from ranks 0, 1 of 3")
        check("from ranks 0, 1 of 3 (not yet: 2)" in seen, "the old job's ranks 0 and 1 wait", seen)
        outs = job(["own", "own", "own"], step=3)
        check(all("refused 0 acked 1" in o for o, _ in outs), "the job restarted before the expiry: stored",
              "\n".join(o + e for o, e in outs))
        outs = [p.communicate(timeout=60) for p in old]
        check(all("refused 0 acked 1" in o for o, _ in outs[:2]), "... and the old job's waiting ranks acked",
              "\n".join(o + e for o, e in outs[:2]))
        # the same rank twice under limits.pending_timeout 60: the job hears it on stderr at once,
        # from the daemon (a pong's notice), while the step still waits (a trial's job heard of it
        # only at the expiry, limits.pending_timeout later)
        errs = [os.path.join(tmp, f"twice-{k}.err") for k in range(W)]
        twice = []
        for k in range(W):
            with open(errs[k], "w") as f:
                twice.append(subprocess.Popen([PYTHON, "-c", RANK, ep, str(W), "own", "1", "fc"],
                                              env=env_for(1 if k < 2 else k, W), stdout=subprocess.DEVNULL,
                                              stderr=f))
        procs.extend(twice)
        want = ("wdriftd at " + ep + ": run 'fc' step 1: rank 1 of 3 committed by two publishers at once: two "
                "ranks of this job given the same rank (rank=, or RANK)? Each rank gives its own; with the same "
                "rank twice, a step missing a part expires after limits.pending_timeout (60 s)")
        end, said = time.time() + 40, []

        def text(path):
            with open(path) as f:
                return f.read()
        while time.time() < end and len(said) < 2:
            said = [e for e in errs[:2] if want in text(e)]
            time.sleep(0.1)
        waiting = [p.poll() is None for p in twice]
        check(len(said) == 2 and all(text(e).count(want) == 1 for e in errs[:2]) and all(waiting),
              "two ranks given rank 1: both told once on stderr, while every rank still waits for the step "
              f"(running: {waiting})", "\n".join(text(e) for e in errs))
        stop_procs(twice)
        # ranks that disagree on a tensor's total: every rank refused at once, the daemon saying what
        # differs (a trial's got a `conflict`, the code of a re-used run name, for one shard, and the
        # others waited for limits.pending_timeout)
        procs = [subprocess.Popen([PYTHON, "-c", RANK, ep, str(W), "total", "7", "tot"], env=env_for(k, W),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(W)]
        outs = [p.communicate(timeout=120) for p in procs]
        fast = [o for o, _ in outs if len(o.splitlines()) > 2 and o.splitlines()[2] == "refused 1 acked 0"
                and float(o.splitlines()[1].split()[1]) < 20]
        check(len(fast) == W, "ranks whose totals differ: each refused within 20 s, not at the 60 s expiry",
              "\n".join(o + e for o, e in outs))
        said = [x for x in dm.log_text().splitlines() if "run 'tot' step 7 refused whole" in x]
        check(len(said) == 1 and "a shard of 'w' says total" in said[0] and "and an earlier one of it" in said[0]
              and ("total 5120" in said[0] or "it 5120" in said[0]),
              "the daemon logs it once, naming the tensor and both totals", "\n".join(said))
        check(all("refused: bad_field: a shard of" in e and "refused: conflict" not in e for _, e in outs),
              "the ranks hear bad_field, not conflict", "\n".join(e for _, e in outs))
        # ranks that each send their own piece at offset 0 (an off-by-rank slip): a trial was told it had
        # re-used a run name. On a run's first step no commit has said ranks yet: the sharding mistake is
        # among the causes; once the run's commits said 3 ranks, it is named first
        def offset0(step, want, logged):
            """Every rank at offset 0: each told want; the daemon's log says it in full once (logged), or,
            within 10 minutes of the run's last full line, in the short line of a conflict"""
            outs = job(["offset0"] * W, step=step, run="off")
            said = [x for x in dm.log_text().splitlines() if f"run 'off' step {step}" in x and "conflict" in x]
            check(all("conflicts 1" in o and want in e for o, e in outs) and len(said) == 1
                  and (want in said[0]) == logged and "overlaps elements [0, " in said[0],
                  f"step {step}, every rank at offset 0: refused, each rank told '{want}'; the daemon logs "
                  f"it once{'' if logged else ', short'}", "\n".join(said + [o + e for o, e in outs]))
        offset0(1, "ranks sending overlapping pieces: each sends only its own, at its own offset;", True)
        outs = job(["own"] * W, step=2, run="off")
        check(all("refused 0 acked 1" in o for o, _ in outs), "step 2 of run 'off', each its own piece: stored",
              "\n".join(o + e for o, e in outs))
        offset0(3, "(two of its 3 ranks sending overlapping pieces: each sends only its own, at its own offset; "
                   "else a re-used run name)", False)
        r = subprocess.run([PYTHON, "-c", ERRORS, ep], env=env_for(), capture_output=True, text=True, timeout=60)
        lines = r.stdout.splitlines()
        check(len(lines) == 3 and "rank 3: from 0 to ranks - 1 (2)" in lines[0]
              and "rank -1: from 0 to ranks - 1 (2)" in lines[1]
              and "rank 0: this publisher has ranks 1, not several" in lines[2]
              and all(x.startswith("ValueError run 'fa': ") for x in lines),
              "a rank out of range, or without ranks: ValueError naming it", r.stdout + r.stderr)
    finally:
        stop_procs(procs)
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
