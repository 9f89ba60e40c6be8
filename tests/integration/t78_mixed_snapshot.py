#!/usr/bin/env python3
"""t78_mixed_snapshot.py: a snapshot is never stored from two senders' different bytes.

A new user's trial: a job killed (kill -9) in the middle of step 1, then
resumed from step 1 by a process that does not send the same bytes (a
GPU job that is not bit-for-bit reproducible, or a re-used run name).
The tensors the dead process had sent were refused to the new one as
"overlaps ... with other bytes", but its other tensors were taken and its
commit acked: step 1 was stored with two tensors of the dead process and
one of the new, and compared like any other step.

Now the first clash refuses the snapshot whole: every later shard and the
commit get the same conflict, the daemon logs it once, naming the run and
step and the likely causes, nothing of it is stored, and the step can be
sent again, whole and consistent, afterwards. Against a real wdriftd over
a real ZeroMQ socket; the daemon is stopped by pid and the temp dir
removed, also on failure.
"""
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import zmq  # noqa: E402

from harness import WDRIFTD, Daemon, Publisher, check, control, summary, teardown  # noqa: E402


def main():
    if not os.path.exists(WDRIFTD):
        print(f"not ok 1 - {WDRIFTD} is not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="wdrift-t78-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    rng = np.random.default_rng(78)
    try:
        cfg = dm.write_config()
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:  # the refused snapshot of the second part is forgotten in seconds
            f.write(text.replace("  max_message: 64M\n", "  max_message: 64M\n  pending_timeout: 3\n"))
        check(dm.start() is not None, "wdriftd is ready")
        old = {k: rng.standard_normal(1000).astype(np.float32) for k in ("l0", "l1", "l2")}
        new = {k: rng.standard_normal(1000).astype(np.float32) for k in ("l0", "l1", "l2")}

        dead = Publisher(ctx, tmp, "kill2")
        dead.tensor(1, "l0", old["l0"], "f32")
        dead.tensor(1, "l1", old["l1"], "f32")
        w = dead.hello()        # answered after both tensors: they were taken
        check(w and w.get("type") == "welcome", f"the first process's tensors are in ({w})")
        dead.s.close()          # killed before its commit

        resumed = Publisher(ctx, tmp, "kill2")
        resumed.s.setsockopt(zmq.RCVTIMEO, 3000)
        resumed.tensor(1, "l0", new["l0"], "f32")
        e = resumed.recv()
        check(e and e.get("code") == "conflict",
              f"the clash with the dead process's bytes is a conflict ({e})")
        resumed.tensor(1, "l2", new["l2"], "f32")
        e2 = resumed.recv()
        check(e2 and e2.get("code") == "conflict",
              f"a tensor the dead process never sent is refused too: the snapshot is refused whole ({e2})")
        a = resumed.commit(1, 3)
        check(a and a.get("type") != "ack" and a.get("code") == "conflict",
              f"the commit is refused, not acked ({a})")
        path = os.path.join(tmp, "var", "spool", "kill2", "1.h5")
        check(not os.path.exists(path), f"nothing of step 1 is stored ({path})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["snapshots"]["pending"] == 0,
              f"the refused snapshot holds no memory ({st and st['snapshots']})")

        for k in ("l0", "l1", "l2"):
            resumed.tensor(1, k, new[k], "f32")
        a = resumed.commit(1, 3)
        check(a and a.get("type") == "ack", f"step 1 sent again whole and consistent: acked ({a})")

        log = dm.log_text()
        lines = [ln for ln in log.splitlines() if "kill2" in ln and "step 1" in ln and "refused" in ln]
        check(len(lines) == 1 and "re-used run name" in lines[0] and "restarted" in lines[0]
              and "two ranks of a sharded job sending overlapping pieces" in lines[0],
              f"the daemon says it once, with the likely causes ({lines})")

        # Two ranks' pieces of one tensor clash, and neither commits (the
        # refused rank gave up): a trial's `status` went on showing the
        # refused snapshot as pending, holding the first rank's piece, and
        # pending_timeout later the daemon warned that it expired and
        # counted it dropped too. It is refused whole at once: it holds
        # nothing, is no pending snapshot, and is forgotten without a word.
        x, y = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
        ra, rb = Publisher(ctx, tmp, "ghost"), Publisher(ctx, tmp, "ghost")
        ra.tensor(5, "w", x[:500], "f32", offset=0, total=1000)
        check((ra.hello() or {}).get("type") == "welcome", "rank a's piece [0, 500) is in")
        rb.tensor(5, "w", y[:500], "f32", offset=0, total=1000)
        e = rb.recv()
        check(e and e.get("code") == "conflict" and "refused whole" in e.get("reason", ""),
              f"rank b's other bytes for [0, 500): the snapshot is refused whole ({e})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        sn, mem = (st or {}).get("snapshots", {}), (st or {}).get("memory", {})
        check(sn.get("pending") == 0 and mem.get("reserved") == 0 and sn.get("conflicts") == 2,
              f"refused: no pending snapshot, nothing reserved, one conflict more ({sn}, {mem})")
        # rank b commits (ranks 2): refused, and the refusal stays for rank a, still sending (a
        # review: the first commit dropped it, and a's next piece began the step afresh)
        rb.send_raw([json.dumps({"v": 1, "type": "commit", "run": "ghost", "step": 5, "tensors": 1,
                                 "ranks": 2}).encode()])
        e = rb.recv()
        check(e and e.get("code") == "conflict", f"rank b's commit: the same conflict ({e})")
        ra.tensor(5, "w", x[500:], "f32", offset=500, total=1000)
        e = ra.recv()
        check(e and e.get("code") == "conflict" and "refused whole" in e.get("reason", ""),
              f"rank a's next piece gets the same conflict ({e})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check((st or {}).get("memory", {}).get("reserved") == 0, "... and nothing of it is held",
              (st or {}).get("memory"))
        time.sleep(5)  # pending_timeout 3, and the daemon's check each second
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        sn = (st or {}).get("snapshots", {})
        later = [ln for ln in dm.log_text().splitlines() if "ghost" in ln and "belongs to no study" not in ln]
        check(sn.get("dropped") == 0 and sn.get("conflicts") == 2 and len(later) == 1 and "refused" in later[0],
              f"forgotten after pending_timeout, not counted dropped too, not said again ({sn}, {later})")
        ra.tensor(5, "w", x, "f32")
        a = ra.commit(5, 1)
        check(a and a.get("type") == "ack", f"then step 5, sent whole by one rank, is acked ({a})")

        # a refused step of a run holds nothing, so `runs rm` of the run is not kept waiting for it
        # (a review: "has step 3 being received" until pending_timeout)
        ra.tensor(7, "w", x[:500], "f32", offset=0, total=1000)
        ra.hello()
        rb.tensor(7, "w", y[:500], "f32", offset=0, total=1000)
        e = rb.recv()
        check(e and e.get("code") == "conflict", f"ghost step 7 refused whole ({e})")
        ra.s.close()    # its ranks end: rm is refused while one still publishes (t103)
        rb.s.close()
        # their closes reach the daemon after a moment: asked at once, rm was refused for them
        # (CI, once); "wait" holds it until they are read, and "again" asks once more (t103)
        r, end = None, time.time() + 20
        while time.time() < end:
            r = control(ctx, tmp, {"v": 1, "cmd": "runs_rm", "run": "ghost", "wait": 5})
            if not (r and r.get("again")):
                break
        check(r and r.get("ok") and r.get("steps") == 1, f"runs rm ghost: done once its ranks have closed ({r})")

        # a new run whose only snapshot was refused whole holds nothing: forgotten, and a restart
        # does not bring it back from its "conflict" record (a review's came back, with a conflict)
        ga, gb = Publisher(ctx, tmp, "ghost2"), Publisher(ctx, tmp, "ghost2")
        ga.tensor(1, "w", x[:500], "f32", offset=0, total=1000)
        ga.hello()
        gb.tensor(1, "w", y[:500], "f32", offset=0, total=1000)
        e = gb.recv()
        check(e and e.get("code") == "conflict", f"ghost2 step 1 refused whole ({e})")
        ga.s.close()
        gb.s.close()

        def runs_now():
            r = control(ctx, tmp, {"v": 1, "cmd": "runs"})
            return [x["name"] for x in (r or {}).get("runs", [])]
        end = time.time() + 15
        while time.time() < end and "ghost2" in runs_now():
            time.sleep(0.5)
        check("ghost2" not in runs_now(), "ghost2 holds nothing: forgotten", str(runs_now()))
        check(dm.stop() == 0, "SIGTERM: exit 0")
        check(dm.start() is not None, "the daemon restarts")
        check("ghost2" not in runs_now() and "kill2" in runs_now(),
              "after the restart: ghost2 still forgotten, kill2 (durable steps) still there", str(runs_now()))
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
