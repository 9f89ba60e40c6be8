#!/usr/bin/env python3
"""t112_unclosed.py: a Python job that never calls close() loses no snapshot, and hears why.

A trial's job published 5 steps of 16 MiB and ended without close(): the
publisher's __del__ closed it with no wait, and 4 of the 5 steps were
dropped, the exit code 0, stderr saying only "closed with 4 of 5 snapshots
never made durable". Now a publisher left open is closed at the program's
end (atexit), and one garbage-collected unclosed is closed then, each
waiting as close() does for what is on its way, and saying on stderr that
close() was not called. A job whose steps are all acked before it ends
hears nothing. Also the Python checks of a step and a Shard that int()
used to truncate (7.9 stored as step 7), and a step count that goes back
(an epoch's, reset), said once by the library and, on a conflict, in the
daemon's reason.

Real jobs (the Python package in child processes) and a real daemon on its
real ipc socket; the daemon stopped by pid and the temp dir removed, also
on failure.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PYTHON, WDRIFT, Daemon, check, package_env, summary, teardown  # noqa: E402

# A job: STEPS snapshots of one 4 Mi-element tensor, then the end its mode says: "exit" (the
# script ends), "sys.exit", "scope" (the publisher was a function's local, gone with it; the
# program goes on), or "close" (close() called: nothing to say)
JOB = r'''
import sys, time, numpy as np, wdrift
ep, run, mode, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def job():
    pub = wdrift.Publisher(ep, run, stall_warning=None)
    for s in range(steps):
        pub.publish(s, {"w": np.full(1 << 22, s, dtype=np.float32)})
    if mode == "close":
        print("unsent", pub.close(), flush=True)
    return pub if mode in ("exit", "sys.exit") else None
keep = job()
if mode == "scope":
    print("after the function", flush=True)
    time.sleep(0.5)
if mode == "sys.exit":
    sys.exit(0)
'''

CHECKS = r'''
import sys, numpy as np, torch, wdrift
pub = wdrift.Publisher(sys.argv[1], "checks", stall_warning=None)
for bad in (7.9, True, np.float32(3.7), "3"):
    try:
        pub.publish(bad, {"w": np.zeros(4, np.float32)})
        print("taken", repr(bad))
    except TypeError as e:
        print("TypeError", e)
for args in ((np.zeros(2), 2.5, (4,)), (np.zeros(2), 0, "ab"), (np.zeros(2), 0, object())):
    try:
        wdrift.Shard(*args)
        print("taken", args)
    except TypeError as e:
        print("TypeError", e)
print("shape", wdrift.Shard(np.zeros(2), np.int64(2), 4).shape, wdrift.Shard(np.zeros(2), 0, torch.Size([2, 2])).shape)
# shapes as 1-D arrays stay sequences (a review: any array was taken for one int); a 0-d one is an int
print("arrays", wdrift.Shard(np.zeros(2), 0, np.array([64])).shape, wdrift.Block(np.zeros((2, 2)), np.array([0, 0]),
      torch.tensor([8, 8])).shape, wdrift.Shard(np.zeros(2), torch.tensor(2), torch.tensor(7)).shape)
for bad in (np.True_, torch.tensor([7])):
    try:
        wdrift.Shard(np.zeros(2), bad, (4,))
        print("taken", repr(bad))
    except TypeError as e:
        print("TypeError", e)
pub.publish(torch.tensor(1), {"w": np.zeros(4, np.float32)})
pub.publish(np.int64(2), {"w": np.zeros(4, np.float32)})
pub.flush(30)
pub.publish(2, {"w": np.zeros(4, np.float32)})     # the last step again (a retry): a duplicate, not said
pub.flush(30)
# an epoch's step count, reset: step 1 again, with other content, from this job; step 1's conflict
# may come back before step 2 is handed over, which then raises it (a flake of make check's)
try:
    pub.publish(1, {"w": np.ones(4, np.float32)})
    pub.publish(2, {"w": np.ones(4, np.float32)})
    pub.flush(30)
    pub.close()
    print("no conflict raised")
except wdrift.WdriftError as e:
    print("WdriftError", e)
'''


# A re-run under a name taken: three steps of other content, then the program's end, close() never
# called: the conflicts are said by the library as they come, the hint once, and not again at the
# exit's close (a trial's was said a third time, as "run 'x': run 'x' step 5 refused")
RERUN = r'''
import sys, numpy as np, wdrift
pub = wdrift.Publisher(sys.argv[1], sys.argv[2], stall_warning=None)
for s in range(3):
    try:    # step 0's conflict may come back before step 1 or 2 is published: it raises there
        pub.publish(s, {"w": np.full(1 << 22, -1.0 - s, dtype=np.float32)})
    except wdrift.WdriftError:
        pass
'''


def wd(cfg, *args):
    return subprocess.run([WDRIFT, *args, "-c", cfg], capture_output=True, text=True, timeout=60)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t112-")
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config()
        check(dm.start() is not None, "daemon ready", dm.log_text())
        ep = f"ipc://{tmp}/run/ingest.sock"
        env = package_env()
        steps = 6
        for mode in ("exit", "sys.exit", "scope", "close"):
            run = f"u-{mode.replace('.', '-')}"
            r = subprocess.run([PYTHON, "-c", JOB, ep, run, mode, str(steps)], capture_output=True, text=True,
                               timeout=180, env=env)
            runs = {x["name"]: x for x in json.loads(wd(cfg, "runs", "--json").stdout or "{}").get("runs", [])}
            durable = runs.get(run, {}).get("durable")
            said = [x for x in r.stderr.splitlines() if "close() was not called" in x]
            when = "it was garbage-collected" if mode == "scope" else "the program's end"
            if mode == "close":
                check(r.returncode == 0 and durable == steps and "unsent 0" in r.stdout and not said,
                      f"close() called: {steps} of {steps} durable, and no word of close() ({durable})",
                      r.stdout + r.stderr)
                continue
            check(r.returncode == 0 and durable == steps, f"{mode}, close() never called: all {steps} snapshots "
                  f"durable ({durable}), exit 0", r.stdout + r.stderr)
            check(len(said) == 1 and f"run '{run}': close() was not called before {when}: waiting up to 10 s "
                  "for " in said[0] and "(call close(), or use `with wdrift.Publisher(...) as pub:`)" in said[0]
                  and "never made durable" not in r.stderr,
                  f"{mode}: stderr says once that close() was not called, and nothing was lost", r.stderr)
            if mode == "scope":
                lines = r.stdout.splitlines()
                check(lines == ["after the function"], "scope: the wait is where the publisher went, before the "
                      "program goes on", r.stdout)

        r = subprocess.run([PYTHON, "-c", RERUN, ep, "u-close"], capture_output=True, text=True, timeout=180, env=env)
        hint = [x for x in r.stderr.splitlines() if "a re-run?" in x]
        conflicts = [x for x in r.stderr.splitlines() if "refused: conflict" in x]
        check(len(hint) == 1 and "step 0 refused: conflict" in hint[0] and "run 'u-close': run 'u-close'" not in r.stderr
              and all(x == hint[0] or "refused: conflict, as step 0 was" in x for x in conflicts),
              "a re-run that never calls close(): each conflict said once as it came, the hint once, nothing "
              "said again at the exit's close", r.stderr)
        r = subprocess.run([PYTHON, "-c", CHECKS, ep], capture_output=True, text=True, timeout=120, env=env)
        out = r.stdout.splitlines()
        check(out[:4] == ["TypeError step 7.9: an integer (int, numpy or torch integer), not float",
                          "TypeError step True: an integer, not a bool",
                          "TypeError step 3.7: an integer (int, numpy or torch integer), not float32",
                          "TypeError step '3': an integer (int, numpy or torch integer), not str"],
              "publish(): a float, bool or str step is a TypeError naming it (7.9 was stored as step 7)", r.stdout + r.stderr)
        check(len(out) > 7 and out[4] == "TypeError Shard offset 2.5: an integer (int, numpy or torch integer), not float"
              and out[5].startswith("TypeError Shard shape 'ab': a sequence of integers")
              and out[6].startswith("TypeError Shard shape <object") and out[7] == "shape (4,) (2, 2)"
              and out[8] == "arrays (64,) (8, 8) (7,)" and out[9] == "TypeError Shard offset True: an integer, not a bool"
              and out[10] == "TypeError Shard offset tensor([7]): one integer, not an array of 1 dimensions",
              "Shard: a float offset or a shape that is no sequence of ints is a TypeError naming it; an int "
              "shape is a vector's", r.stdout + r.stderr)
        back = [x for x in r.stderr.splitlines() if "begun after step" in x]
        check(len(back) == 1 and "run 'checks': step 1 begun after step 2: a run's steps go up" in back[0]
              and "an epoch's reset? give each snapshot the global step" in back[0],
              "a step count that goes back: the library says it once, at the first such step (not at the last "
              "step sent again)", r.stderr)
        check(out[-1].startswith("WdriftError") and "this publisher has published the run before: does the "
              "job's step count go back" in out[-1] and "a re-run" not in out[-1],
              "... and the daemon's conflict reason says the job's own step count went back, not 'a re-run?'",
              r.stdout + r.stderr)
        # runs (and drift) say it so too, after a restart as well (a trial's CLI told it to `runs rm` the run)
        for when in ("", " after a restart"):
            if when:
                dm.stop()
                check(dm.start() is not None, "daemon restarted", dm.log_text())
            runs = {x["name"]: x for x in json.loads(wd(cfg, "runs", "--json").stdout or "{}").get("runs", [])}
            said = runs.get("checks", {}).get("refused", "")
            check(runs.get("checks", {}).get("conflicts") == 2 and "from the job that had published it before: "
                  "does its step count go back, an epoch's reset?" in said and "re-run" not in said
                  and "runs rm" not in said,
                  f"runs{when}: the step count that went back, not 'a re-run?', nor runs rm", said)
            # a re-run's stays a re-run's
            said = runs.get("u-close", {}).get("refused", "")
            check("a re-run under the same name?" in said, f"runs{when}: a re-run's conflicts are a re-run's", said)
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
