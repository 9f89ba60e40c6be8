#!/usr/bin/env python3
"""t66_identity.py: a (run, step) names one content (DESIGN.md, invariant 7).

Starts the real daemon in a temp dir and speaks protocol v1 to it with
pyzmq frames built per docs/protocol.md, and runs the real CLI:
- the same content again is a duplicate, acked; other content (a CRC, a
  dtype, a tensor it lacks, a tensor count) is refused with 'conflict'
  naming the run, the step and the tensor, on the tensor and on the commit,
  counted in status, logged once; `wdrift send` exits 1 with it;
- a re-sent shard with the same bytes is taken silently, other bytes over
  received elements are a conflict;
- identities survive a restart;
- `wdrift runs` shows roles and studies; a run in no study is noticed once;
- `wdrift runs rm` forgets a run durably (restart included): re-published
  under the same name, it is compared again, and `wdrift drift` shows the new
  W1, equal to scipy's; the drift log opens without repair.
Every daemon is stopped by pid and the temp dir removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib

import h5py
import numpy as np
import zmq
from scipy.stats import wasserstein_distance

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, Publisher, check, control  # noqa: E402
import harness  # noqa: E402

WDRIFT = os.path.abspath(os.environ.get("WDRIFT", os.path.join(os.environ.get("BUILD", "build"), "wdrift")))


def wd(*args, timeout=60):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=timeout)


def quiet(pub, ms=300):
    """The next reply within ms, or None: shards taken send nothing."""
    pub.s.setsockopt(zmq.RCVTIMEO, ms)
    try:
        return pub.recv()
    finally:
        pub.s.setsockopt(zmq.RCVTIMEO, 5000)


def send_snap(pub, step, w, v, split=True):
    """Two tensors: w whole, v in two shards (or whole)."""
    pub.tensor(step, "w", w, "f32")
    if split:
        pub.tensor(step, "v", v[:200], "f32", offset=0, total=v.size)
        pub.tensor(step, "v", v[200:], "f32", offset=200, total=v.size)
    else:
        pub.tensor(step, "v", v, "f32")


def wait_drift(ctx, d, step, run, timeout=30):
    """The drift reply once it has run's rows at step, else the last reply."""
    end, r = time.time() + timeout, None
    while time.time() < end:
        r = control(ctx, d, {"v": 1, "cmd": "drift", "study": "fa", "step": step})
        if r and r.get("ok") and run in r.get("candidates", {}):
            return r
        time.sleep(0.2)
    return r


def layer_w1(reply, run, name):
    for layer in reply["candidates"][run]["layers"]:
        if layer["name"] == name:
            return layer["w1"]
    return None


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t66-")
    dm = Daemon(tmp)
    ctx = zmq.Context()
    rng = np.random.default_rng(66)
    try:
        cfg = dm.write_config()
        check(dm.start() is not None, "daemon ready")
        base = Publisher(ctx, tmp, "base")
        bw = rng.standard_normal(1000).astype(np.float32)
        bv = rng.standard_normal(500).astype(np.float32)
        send_snap(base, 10, bw, bv)
        a = base.commit(10, 2)
        check(a and a["type"] == "ack" and not a["duplicate"], f"base step 10 durable ({a})")

        # The same content again, in other shards: a duplicate, acked.
        send_snap(base, 10, bw, bv, split=False)
        a = base.commit(10, 2)
        check(a and a["type"] == "ack" and a["duplicate"], f"the same content again: acked as a duplicate ({a})")

        # Other content: one element of w differs.
        bw2 = bw.copy()
        bw2[7] += 1
        base.tensor(10, "w", bw2, "f32")
        e = quiet(base, 2000)
        ok = (e and e["type"] == "error" and e["code"] == "conflict" and e["field"] == "crc32"
              and "run 'base' step 10 is durable with other content" in e["reason"]
              and "'w'" in e["reason"] and "wdrift runs rm base" in e["reason"])
        check(ok, f"other bytes in a tensor: conflict naming run, step and tensor ({e})")
        base.tensor(10, "v", bv, "f32")
        a = base.commit(10, 2)
        check(a and a["type"] == "error" and a["code"] == "conflict" and "'w'" in a["reason"],
              f"... and the commit is refused with it, not acked ({a})")
        r = wd("status", "-c", cfg)
        check(r.returncode == 0 and " 1 conflict; " in r.stdout, f"wdrift status: '1 conflict' (a trial's "
              f"'1 conflicts')", r.stdout)

        base.tensor(10, "w", bw.astype(np.float64), "f64")
        e = quiet(base, 2000)
        check(e and e["code"] == "conflict" and e["field"] == "dtype", f"another dtype: conflict ({e})")
        base.commit(10, 2)
        base.tensor(10, "extra", bv, "f32")
        e = quiet(base, 2000)
        check(e and e["code"] == "conflict" and e["field"] == "name" and "'extra'" in e["reason"],
              f"a tensor the durable snapshot lacks: conflict ({e})")
        base.commit(10, 2)
        send_snap(base, 10, bw, bv)
        a = base.commit(10, 3)
        check(a and a["code"] == "conflict" and a["field"] == "tensors" and "2 tensors" in a["reason"],
              f"another tensor count: conflict ({a})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        n_conf = st and st["snapshots"].get("conflicts")
        check(n_conf == 4, f"status counts 4 conflicts ({st and st['snapshots']})")
        r = wd("status", "-c", cfg)
        check(r.returncode == 0 and "4 conflicts" in r.stdout, f"wdrift status shows them ({r.stdout})")
        errs = [x for x in r.stdout.splitlines() if x.startswith("errors ")]
        check(errs and "conflict " in errs[0] and errs[0].endswith(
              "(error replies sent, by code: a refused snapshot can get several, one for each differing tensor, "
              "commit or waiting rank)"),
              "... and its errors line says it counts replies, which a trial had read beside '4 conflicts' "
              "as unexplained", errs)
        r = wd("status", "-c", cfg, "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["snapshots"]["conflicts"] == 4,
              "wdrift status --json has snapshots.conflicts")
        log = dm.log_text()
        check(log.count("run 'base' step 10 is durable with other content") == 1,
              "the refusal is logged once for the (run, step)", log[-2000:])

        # Shards sent again while the snapshot is assembled.
        fa = Publisher(ctx, tmp, "fa")
        fw = rng.standard_normal(1000).astype(np.float32) * 1.5
        fv = rng.standard_normal(500).astype(np.float32)
        fa.tensor(10, "w", fw[:500], "f32", offset=0, total=1000)
        fa.tensor(10, "w", fw[:500], "f32", offset=0, total=1000)
        check(quiet(fa) is None, "a re-sent shard with the same bytes is taken silently")
        bad = fw[250:750].copy()
        bad[0] += 1
        fa.tensor(10, "w", bad, "f32", offset=250, total=1000)
        e = quiet(fa, 2000)
        check(e and e["code"] == "conflict" and e["field"] == "offset" and "other bytes" in e["reason"],
              f"an overlapping shard with other bytes: conflict ({e})")
        fa.tensor(10, "w", fw[250:], "f32", offset=250, total=1000)
        check(quiet(fa) is None, "an overlapping shard with the same bytes fills in the rest")
        fa.tensor(10, "v", fv, "f32")
        a = fa.commit(10, 2)
        check(a and a["type"] == "ack" and not a["duplicate"], f"fa step 10 durable ({a})")
        with h5py.File(os.path.join(tmp, "var", "spool", "fa", "10.h5"), "r") as f:
            check(np.array_equal(f["w"][()], fw), "the spool holds the tensor as sent, overlaps and all")
        r = wait_drift(ctx, tmp, 10, "fa")
        w1 = r and r.get("candidates") and layer_w1(r, "fa", "w")
        ref = wasserstein_distance(bw.astype(np.float64), fw.astype(np.float64))
        check(w1 is not None and abs(w1 - ref) <= 1e-9 * ref, f"fa compared: W1 {w1} = scipy {ref}")

        # wdrift send: same file a duplicate (exit 0), another file a conflict (exit 1).
        f1, f2 = os.path.join(tmp, "a.h5"), os.path.join(tmp, "b.h5")
        with h5py.File(f1, "w") as f:
            f["w"] = bw
        with h5py.File(f2, "w") as f:
            f["w"] = bw2
        r1 = wd("send", "-c", cfg, "--run", "lama-fa", "--step", "5", f1)
        r2 = wd("send", "-c", cfg, "--run", "lama-fa", "--step", "5", f1)
        r3 = wd("send", "-c", cfg, "--run", "lama-fa", "--step", "5", f2)
        check(r1.returncode == 0 and r1.stderr.count("run 'lama-fa' belongs to no study") == 1,
              f"wdrift send of a run in no study: stored, and said once on stderr ({r1.stderr})")
        check(r1.returncode == 0 and r2.returncode == 0 and "duplicate" in r2.stdout,
              f"wdrift send of the same file twice: 0 and a duplicate ({r2.stdout}{r2.stderr})")
        check(r3.returncode == 1 and "conflict" in r3.stderr and "lama-fa" in r3.stderr
              and "wdrift runs rm lama-fa" in r3.stderr,
              f"wdrift send of another file for it: exit 1 with the daemon's reason ({r3.returncode}: {r3.stderr})")
        log = dm.log_text()
        check(log.count("run 'lama-fa' belongs to no study") == 1 and "studies: 'fa': base, fa, lowprec" in log,
              "a run in no study is noticed once, with the studies' runs", log[-2000:])

        # wdrift runs: role and study.
        r = wd("runs", "-c", cfg, "--json")
        runs = {x["name"]: x for x in json.loads(r.stdout)["runs"]} if r.returncode == 0 else {}
        ok = (runs.get("base", {}).get("role") == "baseline" and runs.get("fa", {}).get("role") == "candidate"
              and runs.get("lama-fa", {}).get("role") == "none"
              and runs["base"]["studies"] == [{"study": "fa", "role": "baseline"}]
              and runs["lama-fa"]["studies"] == []
              and "belongs to no study" in runs["lama-fa"].get("no_study", "") and "no_study" not in runs["base"])
        check(ok, "wdrift runs --json: role and studies", r.stdout + r.stderr)
        r = wd("runs", "-c", cfg)
        lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.strip()}
        check(r.returncode == 0 and "role" in lines.get("run", "") and "study" in lines.get("run", "")
              and "baseline" in lines.get("base", "") and " fa " in lines.get("base", "") + " "
              and "none" in lines.get("lama-fa", ""), "wdrift runs: role and study columns", r.stdout + r.stderr)
        # a run in no study is said under the table, as its job's welcome said it (a trial saw "none -")
        check("\nno_study   run 'lama-fa' belongs to no study: its snapshots are stored but never compared "
              "(studies: 'fa': base, fa, lowprec)" in r.stdout and r.stdout.count("no_study") == 1,
              "wdrift runs: the run in no study is said under the table", r.stdout)
        # two more: each said, the studies' runs once under them (a trial's five said them five times)
        for stray in ("lama-fb", "lama-fc"):
            wd("send", "-c", cfg, "--run", stray, "--step", "5", f1)
        r = wd("runs", "-c", cfg)
        said = [ln for ln in r.stdout.splitlines() if ln.startswith("no_study")]
        check(r.returncode == 0 and len(said) == 3 and "studies:" not in "".join(said)
              and all(f"run '{x}' belongs to no study: its snapshots are stored but never compared" in r.stdout
                      for x in ("lama-fa", "lama-fb", "lama-fc"))
              and r.stdout.count("'fa': base, fa, lowprec") == 1
              and "\n           studies of all 3 above: 'fa': base, fa, lowprec\n" in r.stdout,
              "wdrift runs: three runs in no study, the studies' runs said once", r.stdout)
        r = wd("runs", "-c", cfg, "--json")
        check(r.returncode == 0 and all("(studies: 'fa': base, fa, lowprec)" in x.get("no_study", "")
                                        for x in json.loads(r.stdout)["runs"] if x["name"].startswith("lama-")),
              "wdrift runs --json: each run's no_study whole", r.stdout)
        for stray in ("lama-fb", "lama-fc"):
            wd("runs", "rm", stray, "-c", cfg)

        # Restart: identities come back from the write-ahead log.
        dm.stop()
        check(dm.start() is not None, "restarted")
        base = Publisher(ctx, tmp, "base")
        base.tensor(10, "w", bw2, "f32")
        e = quiet(base, 2000)
        check(e and e["code"] == "conflict", f"after a restart, other content is still a conflict ({e})")
        base.commit(10, 2)
        send_snap(base, 10, bw, bv)
        a = base.commit(10, 2)
        check(a and a["type"] == "ack" and a["duplicate"], f"... and the same content a duplicate ({a})")

        # runs rm: bad input first.
        r = wd("runs", "rm", "-c", cfg)
        check(r.returncode == 2, f"runs rm with no run: usage error (exit {r.returncode})", r.stderr)
        r = wd("runs", "rm", "nosuch", "-c", cfg)
        check(r.returncode == 1 and "no run 'nosuch'" in r.stderr and "did you mean" not in r.stderr,
              f"runs rm of an unknown run: exit 1 ({r.stderr})")
        r = wd("runs", "rm", "lama-fx", "-c", cfg)
        check(r.returncode == 1 and "no run 'lama-fx'; did you mean 'lama-fa'?" in r.stderr,
              f"runs rm of a typo: exit 1, the nearest run named ({r.stderr})")
        # two runs as near: both named, in byte order, not whichever the daemon's list met first
        # (a trial's runs rm my-fx offered my-fb, in no study, alone where my-fa was as near)
        r = wd("send", "-c", cfg, "--run", "lama-fb", "--step", "5", f1)
        check(r.returncode == 0, "lama-fb sent", r.stderr)
        r = wd("runs", "rm", "lama-fx", "-c", cfg)
        check(r.returncode == 1 and "no run 'lama-fx'; did you mean 'lama-fa' or 'lama-fb'? (wdrift runs "
              "lists them)" in r.stderr, f"runs rm of a typo between two runs: both named ({r.stderr})")
        r = wd("runs", "rm", "lama-fb", "-c", cfg)
        check(r.returncode == 0, "lama-fb removed", r.stderr)
        rr = control(ctx, tmp, {"v": 1, "cmd": "runs_rm"})
        check(rr and not rr["ok"] and "'run'" in rr["error"], f"runs_rm without 'run' is refused ({rr})")
        fa = Publisher(ctx, tmp, "fa")
        fa.tensor(20, "w", fw[:10], "f32", offset=0, total=1000)
        r = wd("runs", "rm", "fa", "-c", cfg)
        check(r.returncode == 1 and "run 'fa' has 1 publisher connected (ipc" in r.stderr
              and "after step 20" in r.stderr and "--force" in r.stderr,
              f"runs rm while its publisher is connected: refused, naming it ({r.stderr})")
        r = wd("runs", "rm", "fa", "--force", "-c", cfg)
        check(r.returncode == 1 and "being received" in r.stderr,
              f"runs rm --force while a snapshot is being received: still refused ({r.stderr})")
        fa.tensor(20, "w", fw[10:], "f32", offset=10, total=1000)
        fa.tensor(20, "v", fv, "f32")
        a = fa.commit(20, 2)
        check(a and a["type"] == "ack", f"fa step 20 durable ({a})")
        wait_drift(ctx, tmp, 20, "fa")
        fa.s.close()    # its job ends: runs rm is no longer refused
        fa = Publisher(ctx, tmp, "fa")

        r = wd("runs", "rm", "fa", "-c", cfg)
        check(r.returncode == 0 and "removed run 'fa': 2 durable snapshots" in r.stdout
              and " result record" in r.stdout and "compared steps" not in r.stdout,
              f"runs rm fa: what was removed ({r.stdout}{r.stderr})")
        r = wd("runs", "rm", "lama-fa", "-c", cfg, "--json")
        j = json.loads(r.stdout) if r.returncode == 0 else {}
        check(j.get("run") == "lama-fa" and j.get("steps") == 1 and j.get("results") == 0,
              f"runs rm --json ({j})", r.stderr)
        check(not os.path.exists(os.path.join(tmp, "var", "spool", "fa")), "fa's spool files are gone")
        d = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": 10})
        check(d and "fa" not in d.get("candidates", {}), f"drift has no rows of fa left ({d})")
        path = os.path.join(tmp, "var", "drift", "fa.h5")
        with h5py.File(path, "r", swmr=True) as f:
            names = list(f["runs"][:].astype(str))
            rows = f["rows"][:]
            left = [r for r in rows if names[r["run"]] == "fa"]
        check(len(left) == 0, f"the drift log was rebuilt without fa's rows ({len(left)} left)")
        h = fa.hello()
        check(h and h["durable_steps"] == [], f"fa has no durable steps ({h})")

        # The name is free: new content is stored and compared.
        fw3 = rng.standard_normal(1000).astype(np.float32) * 3
        fa.tensor(10, "w", fw3, "f32")
        fa.tensor(10, "v", fv, "f32")
        a = fa.commit(10, 2)
        check(a and a["type"] == "ack" and not a["duplicate"], f"fa re-published at step 10: stored anew ({a})")
        ref3 = wasserstein_distance(bw.astype(np.float64), fw3.astype(np.float64))
        r = None
        for _ in range(100):
            r = wd("drift", "fa", "--step", "10", "-c", cfg, "--json")
            w1 = r.returncode == 0 and layer_w1(json.loads(r.stdout), "fa", "w") if "fa" in r.stdout else None
            if w1 and abs(w1 - ref3) <= 1e-9 * ref3:
                break
            time.sleep(0.2)
        check(w1 and abs(w1 - ref3) <= 1e-9 * ref3,
              f"wdrift drift shows the new W1 {w1} = scipy {ref3} (old {ref})", r.stdout + r.stderr)

        # Restart: the forget stays; the new content's identity holds.
        dm.stop()
        p = subprocess.run(["h5dump", "-H", path], capture_output=True, text=True)
        check(p.returncode == 0, "the drift log opens without repair (h5dump -H)", p.stderr)
        check(dm.start() is not None, "restarted after runs rm")
        h = fa.hello()
        check(h and h["durable_steps"] == [10], f"after the restart, fa has only its new step ({h})")
        check(dm.log_text().count("rebuilding") == 0, "no drift log rebuilt at start-up", dm.log_text()[-2000:])
        r = wait_drift(ctx, tmp, 10, "fa")
        w1 = r and r.get("candidates") and layer_w1(r, "fa", "w")
        check(w1 is not None and abs(w1 - ref3) <= 1e-9 * ref3, f"drift after the restart: the new W1 ({w1})")
        fa.tensor(10, "w", fw, "f32")
        e = quiet(fa, 2000)
        check(e and e["code"] == "conflict", f"the old content is now the conflict ({e})")
        fa.commit(10, 2)
        r = wd("runs", "-c", cfg, "--json")
        names = [x["name"] for x in json.loads(r.stdout)["runs"]]
        check("lama-fa" not in names, f"a forgotten run stays forgotten ({names})")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
