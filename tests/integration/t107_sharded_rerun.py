#!/usr/bin/env python3
"""t107_sharded_rerun.py: a sharded job re-run under a used name, with other weights, is refused.

A new user's trial re-ran a three-rank job under the name of a run that
had its steps already, with other weights. A one-rank re-run is refused
as a conflict, but each rank of the sharded one was acked as a duplicate:
a tensor's identity is the CRC of its whole, and each rank's commit ended
the daemon's check of the re-send before any tensor was whole. The ranks
exited 0, nothing was said anywhere, and the drift stayed the first
job's. Now a rank's commit of a durable step waits for the other ranks'
parts, as a new snapshot's does, and every rank hears the verdict once
the re-send is whole.

Three real rank processes (the Python package, rank and ranks given),
a real daemon:
- job 1 publishes steps 10 and 20 of run 'sr': acked on every rank;
- job 2, the same weights again (a restart from a checkpoint): every rank
  acked as a duplicate, no conflict, exit 0;
- job 3, other weights in rank 1's part only: every rank is refused as a
  conflict at step 10 (WdriftError), the daemon logs the conflict, and
  `wdrift runs` says it; the durable rows are job 1's;
- a job whose rank 2 says ranks 4 (the others 3): both steps stored and
  acked on every rank, close() 0, rank 2's stderr and the daemon's log
  naming the two counts (the rank refused heard "never stored");
- a job whose rank 1 says rank=0: both steps stored, and the daemon says
  once that two publishers committed rank 0 (a trial's was said only when
  the timing left the step waiting).
Stopped by pid, the temp dir removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PYTHON, WDRIFT, Daemon, check, package_env, stop_procs, summary, teardown  # noqa: E402

W = 3

# One rank of a job: its third of two tensors at steps 10 and 20; argv: endpoint, rank, the
# rank whose part differs (-1: none), run, the ranks it says, the rank it says. Prints its
# stats, and whether flush raised.
RANK = r'''
import sys, warnings, numpy as np, wdrift
ep, rank, differs, run, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
pub = wdrift.Publisher(ep, run, ranks=ranks, rank=int(sys.argv[6]), ack_timeout=20.0)
raised = ""
for step in (10, 20):
    model = {}
    for name, n in (("w", 3000), ("b", 300)):
        x = np.random.default_rng(step + n).standard_normal(n).astype(np.float32)
        if rank == differs:
            x = x + np.float32(0.5)
        lo, hi = rank * n // 3, (rank + 1) * n // 3
        model[name] = wdrift.Shard(x[lo:hi], offset=lo, shape=(n,))
    try:
        pub.publish(step, model)
        pub.flush(40)
    except wdrift.WdriftError as e:
        raised = raised or str(e)
s = pub.stats()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        left = pub.close(5)
    except wdrift.WdriftError as e:
        raised, left = raised or str(e), -1
print("STATS", s["acked"], s["duplicates"], s["conflicts"], left, flush=True)
print("RAISED", raised, flush=True)
'''


def job(ep, differs, run="sr", ranks=(3, 3, 3), said=(0, 1, 2)):
    """Runs the three ranks at once; [((acked, duplicates, conflicts, close's count), raised, stderr)]."""
    procs = [subprocess.Popen([PYTHON, "-c", RANK, ep, str(r), str(differs), run, str(ranks[r]), str(said[r])],
                              env=package_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(W)]
    out = []
    try:
        for p in procs:
            o, e = p.communicate(timeout=120)
            stats = next((ln.split()[1:] for ln in o.splitlines() if ln.startswith("STATS")), None)
            raised = next((ln[len("RAISED "):] for ln in o.splitlines() if ln.startswith("RAISED")), "")
            out.append((tuple(int(x) for x in stats) if stats else None, raised, e[-600:]))
    finally:
        stop_procs(procs)
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t107-")
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config(extra="  - name: sr-study\n    baseline: sr\n    candidates: [other]\n")
        check(dm.start() is not None, "wdriftd ready")
        ep = f"ipc://{tmp}/run/ingest.sock"

        first = job(ep, -1)
        check(all(s and s[0] == 2 and s[2] == 0 and s[3] == 0 for s, _, _ in first),
              "job 1: both steps acked on every rank", first)

        again = job(ep, -1)
        check(all(s and s[1] == 2 and s[2] == 0 and s[3] == 0 and not raised for s, raised, _ in again),
              "job 2, the same weights (a restart from a checkpoint): duplicates on every rank, no conflict",
              again)
        log = dm.log_text()
        check("conflict" not in log.lower(), "no conflict in the daemon's log", log[-1500:])

        rerun = job(ep, 1)
        check(all(s and s[2] >= 1 and s[1] == 0 and "conflict" in raised for s, raised, _ in rerun),
              "job 3, rank 1's part other weights: every rank refused as a conflict (each was acked as a "
              "duplicate), WdriftError raised", rerun)
        log = dm.log_text()
        check("run 'sr' step 10" in log and "conflict" in log.lower() and "crc32 differs" in log,
              "the daemon logs the conflict, naming the run, the step and the tensor's crc32", log[-2000:])
        r = subprocess.run([WDRIFT, "runs", "--json", "-c", cfg], capture_output=True, text=True, timeout=30)
        runs = {x["name"]: x for x in json.loads(r.stdout).get("runs", [])} if r.returncode == 0 else {}
        check(runs.get("sr", {}).get("conflicts", 0) >= 1 and "refused" in runs.get("sr", {}),
              "`wdrift runs` counts the conflicts of run 'sr', and says why", r.stdout[-1500:])

        # rank 2 says ranks 4 (its WORLD_SIZE mistyped): the steps come whole and are stored; no rank
        # hears "refused, never stored" (a trial's ranks failed their job), each hears the two counts
        odd = job(ep, -1, run="sw", ranks=(3, 3, 4))
        check(all(s and s[0] == 2 and s[3] == 0 and not raised for s, raised, _ in odd) and "said ranks" in odd[2][2],
              "a rank that says ranks 4 beside two that say 3: both steps acked on every rank, close() 0; the "
              "odd rank's stderr names the two counts (its ack's notice, also when its step was stored first)", odd)
        said = [ln for ln in dm.log_text().splitlines() if "run 'sw'" in ln and "commits say ranks" in ln]
        check(len(said) == 1, "the daemon says it once for the run", "\n".join(said))

        # rank 1 given rank=0 (RANK mistyped): its piece still makes the steps whole, stored before
        # the second claim was looked at; said once for the run all the same (a trial: by chance only)
        twice = job(ep, -1, run="sd", said=(0, 0, 2))
        check(all(s and s[0] == 2 and s[3] == 0 for s, _, _ in twice), "rank 0 twice: both steps acked", twice)
        said = [ln for ln in dm.log_text().splitlines() if "run 'sd'" in ln and "committed by a second publisher" in ln]
        check(len(said) == 1 and "rank 0 of 3 committed by a second publisher" in said[0],
              "the daemon says rank 0 committed by two publishers, once", "\n".join(said))
    finally:
        teardown(dm, tmp, None)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
