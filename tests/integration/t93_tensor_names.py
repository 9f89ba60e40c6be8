#!/usr/bin/env python3
"""t93_tensor_names.py: a run whose tensor names differ from its baseline's is said, once.

A candidate published from a model wrapped for DDP names every tensor
"module.<name>": the daemon matched none of them, wrote a step "complete"
whose rows were all '-', and said nothing. Now, with a real daemon and
real `wdrift send` processes:
- the daemon's log warns once, naming the study, step, run, the counts and
  the prefix that explains them, and not again at the next step with the
  same names;
- `wdrift drift` says under the candidate how many of its tensors have no
  element compared, and --json carries it as "absent";
- a proxy that lacks one tensor and has one the baseline lacks is said
  with both, and the first of each;
- when the names match again, one notice says so, and the step's drift
  has numbers and no "absent" line.
The daemon is stopped by pid and the temp dir removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PYTHON, Daemon, check, package_env, summary, teardown  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
NAMES = ["layers.0.w", "layers.1.w", "norm"]


def ckpt(path, names, seed, shapes=None):
    r = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        for n in names:
            f[n] = r.standard_normal((shapes or {}).get(n, 64)).astype(np.float32)


# A live job: run argv[2] publishes [step, names] of argv[3] in turn, each when the test makes its gate file
JOB = r'''
import json, os, sys, time
import numpy as np
import wdrift
run, steps, gate = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
with wdrift.Publisher(sys.argv[1], run, stall_warning=None) as pub:
    for step, names in steps:
        end = time.time() + 60
        while not os.path.exists(f"{gate}-{step}") and time.time() < end:
            time.sleep(0.05)
        rng = np.random.default_rng(step)
        pub.publish(step, {n: rng.standard_normal(64).astype(np.float32) for n in names})
        pub.flush(30)
    print("notice", pub.notice)
    print("last", pub.last_notice)
print("closed", pub.last_notice)
'''


def live(d, run, steps, gate):
    return subprocess.Popen([PYTHON, "-c", JOB, f"ipc://{d}/run/ingest.sock", run, json.dumps(steps), gate],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=package_env())


def through_gates(job, gate, steps, at_step):
    """Lets a live() job send each step in turn, at_step(step) after each; its (stdout, stderr). Killed if
    anything fails on the way, so that no job outlives the test."""
    try:
        for step in steps:
            open(f"{gate}-{step}", "w").close()
            at_step(step)
        return job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def wd(*args):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=60)


def send(d, cfg, run, step, names, shapes=None):
    p = os.path.join(d, f"{run}-{step}.h5")
    ckpt(p, names, step, shapes)
    r = wd("send", "--run", run, "--step", str(step), p, "-c", cfg)
    check(r.returncode == 0, f"send {run} step {step}", r.stderr)


def computed(dm, step, rows_runs):
    """Waits until the study's step has results for that many runs (its log's rows lines)."""
    end = time.time() + 20
    want = f"compute: study 'fa' step {step}: {rows_runs * (len(NAMES) + 3)} rows"
    while time.time() < end:
        if want in dm.log_text():
            return True
        time.sleep(0.1)
    return False


def lines(dm, *words):
    return [line for line in dm.log_text().splitlines() if all(w in line for w in words)]


def main():
    d = tempfile.mkdtemp(prefix="wdrift-t93-")
    dm = Daemon(d)
    try:
        # rules that can judge nothing of a wrapped candidate: said, not left "inactive" (a trial's)
        cfg = dm.write_config(extra="alerts:\n"
                              "  - {name: fa-mean, study: fa, metric: w1, scope: mean, threshold: 5}\n"
                              "  - {name: fa-layers, study: fa, metric: w1, scope: tensors, tensors: 'layers.*', "
                              "threshold: 5}\n")
        check(dm.start() is not None, "daemon ready")
        wrapped = ["module." + n for n in NAMES]
        send(d, cfg, "base", 0, NAMES)      # step 0: the candidate named as the baseline; its proxy late
        send(d, cfg, "fa", 0, NAMES)
        check(computed(dm, 0, 1), "step 0 computed, the proxy not there yet", dm.log_text()[-2000:])
        for step in (1, 2):
            send(d, cfg, "base", step, NAMES)
            send(d, cfg, "lowprec", step, NAMES)
            send(d, cfg, "fa", step, wrapped)
            check(computed(dm, step, 2), f"step {step} computed", dm.log_text()[-2000:])
        warned = lines(dm, "warning: compute: study 'fa'", "candidate 'fa'")
        check(len(warned) == 1 and "step 1:" in warned[0] and "has none of the baseline's 3 tensors" in warned[0]
              and "'module.layers.0.w', where the baseline has 'layers.0.w'" in warned[0]
              and "prefix 'module.'" in warned[0],
              "the wrapped candidate: one warning over two steps, with the counts, an example and the prefix",
              "\n".join(warned) or dm.log_text()[-2000:])
        # step 0 computed again for its late proxy: the candidate's names there are not its names now (a
        # trial's log said "names again" of a run whose latest step still carried the prefix)
        send(d, cfg, "lowprec", 0, NAMES)
        check(computed(dm, 0, 2), "step 0 computed again with the proxy", dm.log_text()[-2000:])
        check(not lines(dm, "candidate 'fa' has the baseline's tensor names again"),
              "an older step computed again says nothing of the names", dm.log_text()[-2000:])
        r = wd("drift", "fa", "-c", cfg)
        check(r.returncode == 0 and "absent     3 of its 3 tensors here have no element compared" in r.stdout
              and "the daemon's log says which" in r.stdout
              and "complete   every run of the study is compared at this step, but no tensor of any candidate "
              "has drift: see 'absent' below" in r.stdout,
              "drift says the candidate's tensors have no element compared, and its 'complete' says none has "
              "drift (a trial read 'some' as a few)",
              r.stdout + r.stderr)
        # the prefix, in drift itself (a trial's empty table had it in the daemon's log alone)
        check("\nunmatched  'fa' (candidate) at its step 2 has none of the baseline's 3 tensors: its 3 are named "
              "otherwise ('module.layers.0.w', where the baseline has 'layers.0.w'), so it has no drift here; its "
              "names carry a prefix 'module.' that the baseline's lack (a wrapped model: DDP, FSDP or "
              "torch.compile?): publish every run's tensors under the same names (wdrift.attach publishes the "
              "model a wrapper holds)\n" in r.stdout,
              "drift's unmatched line: the compute thread's sentence, with the prefix", r.stdout)
        step2 = r.stdout
        r = wd("alerts", "-c", cfg, "--json")
        rules = {x["name"]: x for x in json.loads(r.stdout)["alerts"]} if r.returncode == 0 else {}
        check("its scope takes 3 of the 3 tensors of run 'fa' at step 1, none of them with an element compared "
              "(named otherwise than the baseline's? `wdrift drift` says): it has no value to judge, and cannot "
              "fire on that run" in rules.get("fa-mean", {}).get("unmatched", "")
              and "tensors 'layers.*' matched 2 of the 3 tensors of run 'fa' at step 1, none of them with an element "
              "compared" in rules.get("fa-layers", {}).get("unmatched", ""),
              "alerts: a rule with nothing to judge of the wrapped candidate says so, for each scope", r.stdout)
        r = wd("drift", "fa", "-c", cfg, "--json")
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        check(got.get("candidates", {}).get("fa", {}).get("absent") == 3, "drift --json: absent 3", r.stdout)

        # step 3: the candidate fixed; the proxy lacks norm and has an extra tensor
        watch = subprocess.Popen([os.path.join(os.environ.get("BUILD", "build"), "wdrift"), "watch", "-c", cfg],
                                 stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)
            send(d, cfg, "base", 3, NAMES)
            send(d, cfg, "lowprec", 3, NAMES[:2] + ["zz.extra"])
            send(d, cfg, "fa", 3, NAMES)
            check(computed(dm, 3, 2), "step 3 computed", dm.log_text()[-2000:])
            time.sleep(0.5)
        finally:
            watch.terminate()
            seen = watch.communicate(timeout=10)[0].splitlines()
        last = [x for x in seen if x.startswith("drift  fa step 3:")][-1:]
        check(last and "lowprec (proxy)" in last[0] and last[0].endswith(" ABSENT 1")
              and last[0].count("ABSENT") == 1 and "NONFINITE" not in last[0],
              "watch: the proxy's tensor with no element compared is on its line (ABSENT 1)", "\n".join(seen))
        again = lines(dm, "notice: compute: study 'fa' step 3: candidate 'fa' has the baseline's tensor names again")
        check(len(again) == 1, "the fixed candidate: one notice that its names match again", dm.log_text()[-2000:])
        r = wd("alerts", "-c", cfg, "--json")
        rules = {x["name"]: x for x in json.loads(r.stdout)["alerts"]} if r.returncode == 0 else {}
        check(rules and not any(x.get("unmatched") for x in rules.values()),
              "... and the rules have values to judge again: no unmatched", r.stdout)
        proxy = lines(dm, "warning: compute: study 'fa'", "proxy 'lowprec'")
        check(len(proxy) == 1 and "step 3:" in proxy[0] and "lacks 1 of the baseline's 3 tensors (the first: 'norm')"
              in proxy[0] and "has 1 that the baseline lacks (the first: 'zz.extra')" in proxy[0]
              and "prefix" not in proxy[0],
              "the proxy: both counts and the first of each, no prefix guessed", "\n".join(proxy))
        r = wd("drift", "fa", "-c", cfg, "--step", "3", "--json")
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        layers = got.get("candidates", {}).get("fa", {}).get("layers", [])
        check(got.get("candidates", {}).get("fa", {}).get("absent") == 0 and len(layers) == 3
              and all(isinstance(l.get("w1"), float) for l in layers),
              "step 3: the candidate's drift has numbers, absent 0", r.stdout)
        check(got.get("unmatched") == "'lowprec' (proxy fp16) at its step 3 lacks 1 of the baseline's 3 tensors (the "
              "first: 'norm'), which have no drift, and has 1 that the baseline lacks (the first: 'zz.extra'), which "
              "are not compared",
              "drift --json: \"unmatched\" says the proxy's tensor that no row holds (a trial's C job: only the "
              "log said it)", got.get("unmatched"))
        r = wd("drift", "fa", "-c", cfg, "--step", "3")
        check(r.returncode == 0 and "absent" not in r.stdout
              and "complete   every run of the study is compared at this step\n" in r.stdout,
              "step 3: no absent line, a plain 'complete'", r.stdout)
        check("\nunmatched  'lowprec' (proxy fp16) at its step 3 lacks 1 of the baseline's 3 tensors" in r.stdout,
              "... and the unmatched line", r.stdout)
        check(len(lines(dm, "warning: compute: study 'fa'", "candidate 'fa'")) == 1,
              "nothing more said of the candidate")

        # steps 4 to 7: the candidate's layers.1.w in another shape of as many elements (twice),
        # then of fewer, then set right: each change said once (a trial's reshaped tensor was silent)
        for step, shapes in ((4, {"layers.1.w": (8, 8)}), (5, {"layers.1.w": (8, 8)}), (6, {"layers.1.w": 32}),
                             (7, None)):
            send(d, cfg, "base", step, NAMES)
            send(d, cfg, "lowprec", step, NAMES)
            send(d, cfg, "fa", step, NAMES, shapes)
            check(computed(dm, step, 2), f"step {step} computed", dm.log_text()[-2000:])
        shaped = lines(dm, "compute: study 'fa'", "candidate 'fa'", "shape")
        check(len(shaped) == 3 and "warning: compute: study 'fa' step 4: candidate 'fa' has 1 of the baseline's "
              "tensors in another shape of as many elements ('layers.1.w' [8, 8], where the baseline's is [64]): "
              "W1 compares their values, but max|d| and rel L2 pair the elements in storage order" in shaped[0]
              and "warning: compute: study 'fa' step 6: candidate 'fa' has 1 of the baseline's tensors in another "
              "shape, of another count of elements ('layers.1.w' [32], where the baseline's is [64]): W1 compares "
              "their values, but max|d| and rel L2 need as many elements, and are empty for it" in shaped[1]
              and "notice: compute: study 'fa' step 7: candidate 'fa' has the baseline's shapes again" in shaped[2],
              "a tensor in another shape: one line per change (as many elements, then fewer), and a notice "
              "when set right", "\n".join(shaped))
        r = wd("drift", "fa", "-c", cfg, "--step", "6", "--json")
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        row = [x for x in got.get("candidates", {}).get("fa", {}).get("layers", []) if x.get("name") == "layers.1.w"]
        check(row and row[0].get("max_abs_diff") is None and isinstance(row[0].get("w1"), float),
              "step 6: max|d| empty where the counts differ, W1 a number, as the warning says", r.stdout[:1500])
        r = wd("drift", "fa", "-c", cfg, "--step", "4", "--json")
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        row = [x for x in got.get("candidates", {}).get("fa", {}).get("layers", []) if x.get("name") == "layers.1.w"]
        check(row and isinstance(row[0].get("max_abs_diff"), float),
              "step 4: max|d| a number where the counts agree, as the warning says", r.stdout[:1500])
        check(row and row[0].get("other_shape") is True and
              not any(x.get("other_shape") for x in got["candidates"]["fa"]["layers"] if x["name"] != "layers.1.w"),
              "step 4 --json: the layer in another shape says so (other_shape), and no other", r.stdout[:1500])
        r = wd("drift", "fa", "-c", cfg, "--step", "4")
        check(r.returncode == 0 and "\nnote       layers.1.w: in another shape than the baseline's; W1 compares the "
              "values, but max|d| and rel L2 pair the elements in storage order: meaningless for a transpose "
              "(the [all] max row takes it in), empty for another count\n" in r.stdout,
              "step 4: a note under the candidate's table names the tensor (the unmatched line only counts)",
              r.stdout)
        check(got.get("unmatched", "").startswith("'fa' (candidate) at its step 4 has 1 tensor in another shape "
                                                  "than the baseline's: W1 compares the values, but max|d| and "
                                                  "rel L2 pair the elements in storage order"),
              "step 4: drift says the tensor in another shape (unmatched)", got.get("unmatched"))
        r = wd("drift", "fa", "-c", cfg, "--step", "7", "--json")
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        check(r.returncode == 0 and "unmatched" not in got and
              not any(x.get("other_shape") for x in got["candidates"]["fa"]["layers"]),
              "step 7, set right: no unmatched, no layer in another shape", got.get("unmatched"))
        # step 2's unmatched line after a restart too: the result record keeps it (a trial's fell back to
        # "the daemon's log names the first", of a line the earlier process logged)
        check(dm.stop() == 0 and dm.start() is not None, "daemon restarted", dm.log_text()[-2000:])
        r = wd("drift", "fa", "-c", cfg, "--step", "2")
        check("names carry a prefix 'module.' that the baseline's lack" in r.stdout
              and r.stdout.split("\nunmatched  ")[1:2] == step2.split("\nunmatched  ")[1:2],
              "drift's unmatched line after a restart: the same sentence", r.stdout + r.stderr)

        # the job is told too, on its stderr: the compute thread finds it after the snapshot was acked (a
        # trial's job heard of it only through drift); once while what differs stays, again after the names
        # matched, and not for an older step computed again (a late proxy's; a review's). Each step goes
        # when the last one's results are in: the notice is read at the job's next send.
        for step in (20, 21, 22, 23):
            send(d, cfg, "base", step, NAMES)
        gate = os.path.join(d, "gate")
        # the candidate's steps 20-23: wrapped, named right, wrapped twice
        job = live(d, "fa", [[20, wrapped], [21, NAMES], [22, wrapped], [23, wrapped]], gate)

        def fa_step(step):
            if step < 23:
                check(computed(dm, step, 1), f"the job's step {step} computed", dm.log_text()[-2000:])
            if step == 21:
                send(d, cfg, "lowprec", 20, NAMES)   # step 20 again, its candidate still wrapped there
                check(computed(dm, 20, 2), "step 20 computed again with its proxy", dm.log_text()[-2000:])
        out, err = through_gates(job, gate, (20, 21, 22, 23), fa_step)
        told = [x for x in err.splitlines() if ": run 'fa' has none of the baseline's 3 tensors" in x]
        check(job.returncode == 0 and len(told) == 2 and "study 'fa' step 20: run 'fa' has none" in told[0]
              and "study 'fa' step 22: run 'fa' has none" in told[1]
              and all("prefix 'module.'" in x and x.endswith("`wdrift drift fa` says it") for x in told),
              "a live job publishing wrapped names is told on its stderr, with the prefix and where to look: at "
              "step 20, not again at 23 nor for step 20 computed again, and again at 22 after step 21 matched",
              out + err)
        check("notice None" in out, "... as a notice apart: Publisher.notice stays the welcome's", out)
        check("\nlast study 'fa' step 22: run 'fa' has none of the baseline's 3 tensors" in out
              and "\nclosed study 'fa' step 22: run 'fa' has none" in out,
              "... and Publisher.last_notice has it for code, also after close (a trial's: only stderr had it)",
              out)

        # the baseline wrapped, its candidate and proxy plain: the baseline's job is the one to change, and
        # hears it too, once for both runs (the same note) over two steps (a review's: only the candidates'
        # jobs were told, to change nothing of theirs). Long names: the clause that says so comes whole.
        long_names = [f"layers.{'x' * 150}.{i}" for i in range(len(NAMES))]
        gate = os.path.join(d, "bgate")
        job = live(d, "base", [[step, ["module." + n for n in long_names]] for step in (30, 31, 32)], gate)

        def base_step(step):
            if step < 32:
                send(d, cfg, "lowprec", step, long_names)
                send(d, cfg, "fa", step, long_names)
                check(computed(dm, step, 2), f"the baseline job's step {step} computed", dm.log_text()[-2000:])
        out, err = through_gates(job, gate, (30, 31, 32), base_step)
        told = [x for x in err.splitlines() if "compared with this job's run as its baseline" in x]
        check(job.returncode == 0 and len(told) == 1 and told[0].startswith("wdrift: ")
              and "study 'fa' step 30: run '" in told[0]
              and "has none of the baseline's 3 tensors" in told[0]
              and told[0].endswith("; the baseline's names carry a prefix 'module.' that the compared run's names "
                                   "lack (a wrapped model: DDP, FSDP or torch.compile?): publish every run's tensors "
                                   "under the same names (wdrift.attach publishes the model a wrapper holds); "
                                   "`wdrift drift fa` says it"),
              "a wrapped baseline's live job is told, once for its two plain runs and two steps", err)
    finally:
        teardown(dm, d)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
