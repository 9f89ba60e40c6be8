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
import os
import sys
import tempfile

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
        dm.write_config()
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
        check(len(lines) == 1 and "re-used run name" in lines[0] and "restarted" in lines[0],
              f"the daemon says it once, with the likely causes ({lines})")
        check(dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
