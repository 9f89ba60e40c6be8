#!/usr/bin/env python3
"""t74_full_disk.py: wdriftd on a full disk (issue 11, item 7).

storage.dir is an 8 MiB tmpfs, and its wal/ and drift/ 1 MiB tmpfs of
their own, so that the spool file, the write-ahead log and the drift log
can each be the one that finds no room. Against the real daemon, with the study of t50 (base, fa, lowprec):

- Steps 0 and 1 are acked and compared.
- The spool's disk filled (a filler file; 256 KiB left free for step 2,
  so that the write fails part-way, none for step 3): every snapshot sent is refused
  with code internal, field "disk", a reason that says no space is left in
  storage.dir and to re-send; the daemon's log says so too; no spool file
  or .tmp is left behind; the daemon goes on answering.
- Only the WAL's disk filled: the spool file is written, the WAL record is
  not; the refusal says "disk" again, and the refused snapshot's spool file
  is removed at once (it used to stay until the next start). Each record is
  over 4 KiB (long tensor names), so a record that fits in part is written
  in part and must be cut off again.
- The fillers removed: every refused snapshot re-sent is acked, and
  compared.
- Only the drift log's disk (drift/, a third tmpfs) filled: snapshots are
  acked, the compute thread's log line names the full disk and says the
  rows are in the WAL; the daemon answers, and SIGTERM ends it with exit
  0 (HDF5 1.10 crashed at exit on a file whose close had failed). Started
  again with room, the drift log holds the step from the WAL.
- kill -9 and a restart: the WAL opens without a torn record or damage,
  every acked step is durable, its spool file is there, and the drift log's
  W1 of each step equals scipy's.

Needs root (mount -t tmpfs); where mounting is not permitted it tries a loop
file system, and prints a SKIP line and exits 0 where neither works. The
daemon is stopped by pid, the mounts unmounted and the temp dir removed,
also on failure.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as t50  # noqa: E402
from harness import Daemon, Publisher, check, control, summary  # noqa: E402
from t70_crash import drift_rows, latest_rows  # noqa: E402

import numpy as np  # noqa: E402
import zmq  # noqa: E402
from scipy.stats import wasserstein_distance  # noqa: E402

PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
PYDIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
os.environ.setdefault("WDRIFT_LIB", os.path.abspath(os.path.join(os.environ.get("BUILD", "build"),
                                                                 "libwdrift.so")))
N = 128 << 10                               # elements of "w": 512 KiB a snapshot
LONG = [f"layers.{i}." + "x" * 480 for i in range(10)]   # > 4 KiB of names per WAL record


def mount(kind, path, size_mb, loops):
    """A fresh file system at path: tmpfs, else an ext2 loop file. True when mounted."""
    if kind == "tmpfs":
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0750", "tmpfs", path],
                           capture_output=True, text=True)
        return r.returncode == 0
    img = path.rstrip("/") + ".img"
    ok = (subprocess.run(["truncate", "-s", f"{size_mb}M", img]).returncode == 0 and
          subprocess.run(["mkfs.ext2", "-q", "-F", "-m", "0", img], capture_output=True).returncode == 0 and
          subprocess.run(["mount", "-o", "loop", img, path], capture_output=True).returncode == 0)
    if ok:
        loops.append(img)
    return ok


def fill(path):
    """Writes path until the disk is full; True when it was ENOSPC that stopped it."""
    block = b"\x07" * 65536
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(block)
        except OSError as e:
            if e.errno != 28:
                return False
        try:
            while True:
                f.write(b"\x07")
        except OSError as e:
            return e.errno == 28


def snapshot(pub, step, seed, extra=0):
    """One snapshot: "w" (N f32, sent in 4 pieces), 10 small tensors with long names, and extra more."""
    rng = np.random.default_rng(seed * 1000 + step)
    w = rng.standard_normal(N).astype(np.float32)
    q = N // 4
    for k in range(4):
        pub.tensor(step, "w", w[k * q:(k + 1) * q], "f32", offset=k * q, total=N)
    for name in LONG + [f"extra.{i}" for i in range(extra)]:
        pub.tensor(step, name, rng.standard_normal(64).astype(np.float32), "f32")
    return w


def send(pub, step, seed, extra=0):
    w = snapshot(pub, step, seed, extra)
    return pub.commit(step, 1 + len(LONG) + extra), w


def spool_files(var, run):
    try:
        return sorted(os.listdir(os.path.join(var, "spool", run)))
    except FileNotFoundError:
        return []


def wait_rows(var, want, timeout=60):
    """Waits until the drift log has fa's row of "w" at every step in want."""
    end = time.time() + timeout
    while time.time() < end:
        t = drift_rows(os.path.join(var, "drift", "fa.h5"))
        if t is not None:
            got = {s for (s, name, run) in latest_rows(t) if name == "w" and run == "fa"}
            if want <= got:
                return t
        time.sleep(0.2)
    return None


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t74-")
    var = os.path.join(tmp, "var")
    wal = os.path.join(var, "wal")
    mounted, loops = [], []
    dm = Daemon(tmp)
    ctx = zmq.Context()
    try:
        os.makedirs(var)
        kind = "tmpfs"
        if not mount(kind, var, 8, loops):
            kind = "loop"
            if not mount(kind, var, 8, loops):
                print("ok 1 # SKIP cannot mount a small file system here (tmpfs or loop): not root?")
                print("# 0 passed, 0 failed")
                return 0
        mounted.append(var)
        os.makedirs(wal)
        check(mount(kind, wal, 1, loops), f"a 1 MiB {kind} for storage.dir/wal")
        mounted.insert(0, wal)
        drift = os.path.join(var, "drift")
        os.makedirs(drift)
        check(mount(kind, drift, 1, loops), f"a 1 MiB {kind} for storage.dir/drift")
        mounted.insert(0, drift)
        print(f"# storage.dir on an 8 MiB {kind}, its wal/ and drift/ on 1 MiB ones")

        dm.write_config()
        check(dm.start() is not None, "the daemon starts", dm.log_text())
        pubs = {run: Publisher(ctx, tmp, run) for run in ("base", "fa")}
        seeds = {"base": 1, "fa": 2}
        values, acked = {}, {"base": set(), "fa": set()}

        def publish(run, step, extra=0):
            a, w = send(pubs[run], step, seeds[run], extra)
            if a and a.get("type") == "ack":
                acked[run].add(step)
                values[(run, step)] = w
            return a

        for step in (0, 1):
            for run in ("base", "fa"):
                a = publish(run, step)
                check(a and a["type"] == "ack", f"{run} step {step} acked", a)
        check(wait_rows(var, {0, 1}) is not None, "steps 0 and 1 compared")

        # 1. the spool's disk is full
        filler = os.path.join(var, "filler")
        check(fill(filler), "storage.dir filled to ENOSPC")
        for step in (2, 3):
            # step 2 with 256 KiB free: the spool file's write fails part-way, in HDF5;
            # step 3 with none: refused before HDF5 starts
            room = (256 << 10) if step == 2 else 0
            os.truncate(filler, max(0, os.path.getsize(filler) - room))
            for run in ("base", "fa"):
                e = publish(run, step)
                check(e and e["type"] == "error" and e["code"] == "internal" and e["field"] == "disk",
                      f"{run} step {step}, spool full: refused, code internal, field disk", e)
                reason = (e or {}).get("reason", "")
                check(f"no space left on device in storage.dir '{var}'" in reason and
                      "re-send" in reason and f"spool/{run}/{step}.h5" in reason,
                      f"and the reason says so: {reason}")
        print(f"# the refusal: {reason}")
        log = dm.log_text()
        lines = [ln for ln in log.splitlines() if "not stored" in ln]
        # every re-send fails alike: one line in 10 s, with a count of the rest
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(lines and all("no space left on device in storage.dir" in ln for ln in lines) and
              st and st["spool_failures"] >= 4,
              f"the daemon's log names the full disk ({len(lines)} lines for "
              f"{st and st['spool_failures']} failures)", "\n".join(lines) or log[-3000:])
        left = {run: spool_files(var, run) for run in ("base", "fa")}
        check(all(left[r] == ["0.h5", "1.h5"] for r in left),
              f"no spool file and no .tmp are left of the refused snapshots ({left})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st.get("ok", True) and st["snapshots"]["durable"] == 4,
              "the daemon goes on answering: status, 4 durable", st)
        # libwdrift backs off from a full disk as from an absent daemon (it sent a
        # 32 MiB snapshot 6 times a second before): 100 ms doubling, 6 tries in 6 s
        env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([PYTHON, "-c", f"""
import time, numpy as np, wdrift
pub = wdrift.Publisher("ipc://{tmp}/run/ingest.sock", "fullpub", ack_timeout=2.0)
pub.publish(0, {{"w": np.ones(1 << 20, dtype=np.float32)}})
time.sleep(6)
print("resent", pub.stats()["resent"])
pub.close(0)
"""], env=env, capture_output=True, text=True, timeout=60)
        resent = int(p.stdout.split()[1]) if p.stdout.startswith("resent") else -1
        check(0 < resent <= 8, f"the Python publisher backs off from the full disk: {resent} re-sends "
              "in 6 s", p.stdout + p.stderr)
        os.unlink(filler)

        # 2. only the write-ahead log's disk is full
        wal_filler = os.path.join(wal, "filler")
        check(fill(wal_filler), "storage.dir/wal filled to ENOSPC")
        seg = os.path.join(wal, "000001.log")
        size0 = os.path.getsize(seg)
        for step in (2, 3):
            for run in ("base", "fa"):
                e = publish(run, step)
                reason = (e or {}).get("reason", "")
                check(e and e["type"] == "error" and e["field"] == "disk" and
                      "no space left on device" in reason and "write-ahead log" in reason,
                      f"{run} step {step}, WAL full: refused with field disk, naming the log: {reason}", e)
                files = spool_files(var, run)
                check(f"{step}.h5" not in files and f"{step}.h5.tmp" not in files,
                      f"and its spool file is removed at once ({files})")
        check(os.path.getsize(seg) == size0,
              f"the WAL keeps nothing of the refused records ({os.path.getsize(seg)} bytes, was {size0})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["snapshots"]["durable"] == 4, "the daemon goes on answering", st)
        os.unlink(wal_filler)

        # 3. room again: everything refused is re-sent, and acked
        for step in (2, 3):
            for run in ("base", "fa"):
                a = publish(run, step)
                check(a and a["type"] == "ack" and not a.get("duplicate"),
                      f"{run} step {step} re-sent with room again: acked", a)
        check(wait_rows(var, {0, 1, 2, 3}) is not None, "steps 2 and 3 compared")

        # 4. the drift log's disk is full: 60 new tensor names need a new chunk of its name table
        drift_filler = os.path.join(drift, "filler")
        check(fill(drift_filler), "storage.dir/drift filled to ENOSPC")
        for run in ("base", "fa"):
            a = publish(run, 4, extra=60)
            check(a and a["type"] == "ack", f"{run} step 4 (60 more tensors) acked: spool and WAL have room", a)
        end, line = time.time() + 30, None
        while time.time() < end and not line:
            line = next((ln for ln in dm.log_text().splitlines() if "drift log of 'fa'" in ln), None)
            time.sleep(0.2)
        check(line and "No space left on device" in line and "the disk is full" in line and
              "write-ahead log" in line,
              f"the compute thread logs the drift log's full disk, and what becomes of the rows: {line}")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["snapshots"]["durable"] == 10, "the daemon goes on answering: 10 durable", st)
        code = dm.stop(signal.SIGTERM)
        check(code == 0, f"SIGTERM with the drift log's disk still full: exit 0 (HDF5 left no "
              f"freed file behind to crash on; got {code})", dm.log_text()[-2000:])
        os.unlink(drift_filler)
        check(dm.start() is not None, "started again with room", dm.log_text()[-3000:])
        pubs = {run: Publisher(ctx, tmp, run) for run in ("base", "fa")}
        for run in ("base", "fa"):
            a = publish(run, 5)
            check(a and a["type"] == "ack", f"{run} step 5 acked", a)
        check(wait_rows(var, {0, 1, 2, 3, 4, 5}) is not None, "steps 4 (from the WAL) and 5 are in the drift log")

        # 5. nothing acked is lost across kill -9 and a restart
        for p in pubs.values():
            p.s.close()
        dm.stop(signal.SIGKILL)
        check(dm.start() is not None, "restart after kill -9: READY=1", dm.log_text()[-3000:])
        log = dm.log_text()
        check("torn record" not in log and "damaged record" not in log,
              "the WAL opens with no torn or damaged record", log[-3000:])
        for run in ("base", "fa"):
            w = Publisher(ctx, tmp, run).hello()
            check(w and set(w["durable_steps"]) == acked[run] == {0, 1, 2, 3, 4, 5},
                  f"every acked step of {run} is durable after the restart ({w and w['durable_steps']})")
            files = spool_files(var, run)
            check(files == [f"{s}.h5" for s in sorted(acked[run])], f"and its spool files are there ({files})")
        table = wait_rows(var, {0, 1, 2, 3, 4, 5})
        rows = latest_rows(table) if table is not None else {}
        bad = []
        for step in range(6):
            r = rows.get((step, "w", "fa"))
            want = wasserstein_distance(values[("base", step)].astype(np.float64),
                                        values[("fa", step)].astype(np.float64))
            if r is None or abs(r["w1"] - want) > 1e-9 * abs(want):
                bad.append((step, None if r is None else float(r["w1"]), want))
        check(not bad, "the drift log's W1 of every step equals scipy's (1e-9 relative)", bad)
    finally:
        dm.stop(signal.SIGKILL)
        ctx.destroy(linger=0)
        if t50.n_fail:
            try:
                print("# daemon log:\n# " + dm.log_text()[-6000:].replace("\n", "\n# "))
            except OSError:
                pass
        for m in mounted:
            r = subprocess.run(["umount", m], capture_output=True, text=True)
            if r.returncode:
                subprocess.run(["umount", "-l", m])
        subprocess.run(["rm", "-rf", tmp])
    return summary()


if __name__ == "__main__":
    sys.exit(main())
