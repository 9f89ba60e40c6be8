#!/usr/bin/env python3
"""t98_snapshot_over_window.py: a snapshot larger than a run's window is refused at once.

A run's snapshots in flight may hold half of memory.budget (its window).
A trial published 8 tensors of 16 MiB (128 MiB) with a 256M budget: each
tensor fitted, the snapshot never could, and the publisher was told
over_window ("retry after acks") for ever while `status` showed it
pending, the daemon logged its reconnections as peers that died, and
nothing named memory.budget as the cause. Now the tensor that takes the
snapshot past the window refuses it whole, too_large, naming
memory.budget; its memory goes at once; the rest of it and its commit get
the same refusal; the daemon says it once for the run; a snapshot that
fits is taken as before. Then the same through the Python package: its
publish() is refused once, said on stderr, and counted. A real wdriftd;
stopped by pid, temp dir removed.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402

PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
MIB4 = 1 << 20  # f32 elements in 4 MiB

JOB = r"""
import sys, numpy as np, wdrift
pub = wdrift.Publisher(sys.argv[1], "big-py", stall_warning=None)
pub.publish(0, {f"w{i}": np.zeros(1 << 20, np.float32) for i in range(9)})
ok = pub.flush(20)
st = pub.stats()
print("flushed", ok, "refused", st["refused"], "acked", st["acked"])
pub.close(0)
"""


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t98-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config()
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:  # a window of 32 MiB: eight 4 MiB tensors and their overhead pass it
            f.write(text.replace("budget: 256M", "budget: 64M").replace("max_message: 64M", "max_message: 16M"))
        check(dm.start() is not None, "the daemon starts with memory.budget 64M", dm.log_text())
        pub = Publisher(ctx, tmp, "big")
        pub.s.setsockopt(zmq.RCVTIMEO, 3000)
        replies = []
        for i in range(9):
            pub.tensor(0, f"w{i}", np.full(MIB4, i, np.float32), "f32")
        a = pub.commit(0, 9)
        while a and a.get("type") == "error" and a.get("name"):  # the tensors' refusals, then the commit's
            replies.append(a)
            a = pub.recv()
        check(replies and all(e["code"] == "too_large" and e["field"] == "snapshot" for e in replies)
              and {e["name"] for e in replies} == {"w7", "w8"},
              "the tensor that takes the snapshot past the window, and the next, are refused too_large",
              replies)
        why = replies[0]["reason"] if replies else ""
        check("is larger than a run's window, half of memory.budget (33554432 bytes)" in why
              and "raise memory.budget to at least twice the snapshot's size" in why,
              "the reason names the window and memory.budget", why)
        check(a and a.get("type") == "error" and a.get("code") == "too_large" and a.get("reason") == why,
              "its commit gets the same refusal, not an ack or an over_window to retry", a)
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        sn, mem = (st or {}).get("snapshots", {}), (st or {}).get("memory", {})
        check(sn.get("pending") == 0 and mem.get("reserved") == 0 and sn.get("dropped") == 0,
              "nothing of it held, pending or counted dropped", (sn, mem))
        # step 1, as large: refused the same; the daemon said it once for the run
        for i in range(9):
            pub.tensor(1, f"w{i}", np.full(MIB4, i, np.float32), "f32")
        a = pub.commit(1, 9)
        while a and a.get("type") == "error" and a.get("name"):
            a = pub.recv()
        check(a and a.get("code") == "too_large" and a.get("step") == 1, "step 1, as large: refused the same", a)
        lines = [x for x in dm.log_text().splitlines() if "is larger than a run's window" in x]
        check(len(lines) == 1 and "warning" in lines[0] and "(said once for the run)" in lines[0],
              "the daemon's log says it once for the run", lines)
        # 'big' is in no study: the notice once too, though the run, holding nothing after
        # each refusal, is forgotten between its snapshots (it came at every step)
        lines = [x for x in dm.log_text().splitlines() if "run 'big' belongs to no study" in x]
        check(len(lines) == 1, "the no-study notice once for the run, not at each refused snapshot", lines)
        # a snapshot that fits the window is taken as before
        for i in range(4):
            pub.tensor(2, f"w{i}", np.full(MIB4, i, np.float32), "f32")
        a = pub.commit(2, 4)
        check(a and a.get("type") == "ack", "a snapshot of 16 MiB of the same run: acked", a)

        # the Python package: refused once, said on stderr, counted, no retry for ever
        here = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ, PYTHONPATH=os.path.join(here, "..", "..", "python"))
        r = subprocess.run([PYTHON, "-c", JOB, f"ipc://{tmp}/run/ingest.sock"], capture_output=True, text=True,
                           timeout=60, env=env)
        check(r.returncode == 0 and "flushed True refused 1 acked 0" in r.stdout
              and "refused: too_large: run 'big-py' step 0 is larger than a run's window" in r.stderr
              and r.stderr.count("is larger than a run's window") == 1 and "over_window" not in r.stderr,
              "publish() of a snapshot over the window: refused once, said once on stderr, no over_window",
              r.stdout + r.stderr)

        # wdrift send of a file over the window, then of one that fits, to the same step: the
        # second is judged on its own. A trial's second send was refused with the first file's
        # counts ("its 16 tensors so far take ..."): the first process exited on the refusal,
        # its commit still queued, and the refused snapshot's marker outlived it.
        import h5py
        wdrift = os.path.join(os.environ.get("BUILD", "build"), "wdrift")
        big, small = os.path.join(tmp, "big.h5"), os.path.join(tmp, "small.h5")
        with h5py.File(big, "w") as f:
            for i in range(24):
                f[f"t{i}"] = np.full(MIB4, i, np.float32)
        with h5py.File(small, "w") as f:
            for i in range(2):
                f[f"t{i}"] = np.full(MIB4, i + 0.5, np.float32)
        send = [wdrift, "send", "-c", cfg, "--run", "sent", "--step", "5"]
        r = subprocess.run(send + [big], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "too_large" in r.stderr, "wdrift send of 96 MiB: refused too_large", r.stderr)
        r = subprocess.run(send + [small], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and "acked: run 'sent' step 5, 2 tensors" in r.stdout,
              "... then a file of 8 MiB for the same step: acked, at once", r.stdout + r.stderr)
        # a sender killed after the refusal, before its commit: the marker it leaves does not
        # refuse the next sender of that step (another connection, alone on the run) with the
        # dead one's reason until limits.pending_timeout; while the refused sender is connected
        # its own re-send is still refused
        import json
        killed = Publisher(ctx, tmp, "killed")
        killed.s.setsockopt(zmq.RCVTIMEO, 3000)
        for i in range(9):
            killed.tensor(9, f"w{i}", np.full(MIB4, i, np.float32), "f32", session=111)
        got = [killed.recv() for _ in range(2)]
        check(all(e and e.get("code") == "too_large" for e in got), "the killed sender's snapshot: too_large", got)
        killed.tensor(9, "w0", np.full(4, 1, np.float32), "f32", session=111)
        a = killed.recv()
        check(a and a.get("code") == "too_large", "... its own next shard, still connected: refused the same", a)
        killed.s.close()
        for _ in range(50):   # its disconnect reaches the daemon's monitor
            runs = control(ctx, tmp, {"v": 1, "cmd": "runs"}) or {}
            if not [x for x in runs.get("runs", []) if x.get("name") == "killed" and x.get("publishers")]:
                break
            time.sleep(0.1)
        # the same session on a new connection (a sender that reconnected) keeps its refusal
        again = Publisher(ctx, tmp, "killed")
        again.tensor(9, "w0", np.full(4, 1, np.float32), "f32", session=111)
        a = again.recv()
        check(a and a.get("code") == "too_large", "... its session again, on a new connection: refused the same", a)
        again.s.close()
        for _ in range(50):
            runs = control(ctx, tmp, {"v": 1, "cmd": "runs"}) or {}
            if not [x for x in runs.get("runs", []) if x.get("name") == "killed" and x.get("publishers")]:
                break
            time.sleep(0.1)
        fresh = Publisher(ctx, tmp, "killed")
        for i in range(2):
            fresh.tensor(9, f"w{i}", np.full(MIB4, i + 0.5, np.float32), "f32", session=222)
        fresh.send_raw([json.dumps({"v": 1, "type": "commit", "run": "killed", "step": 9, "tensors": 2,
                                    "session": 222}).encode()])
        a = fresh.recv()
        check(a and a.get("type") == "ack",
              "... the next sender of step 9, once it is gone: judged on its own, acked", a)
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
