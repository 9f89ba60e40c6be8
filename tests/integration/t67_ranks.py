#!/usr/bin/env python3
"""t67_ranks.py: a sharded snapshot from several ranks (DESIGN.md, invariant 8).

Starts the real daemon in a temp dir (limits.pending_timeout: 2) and plays
W = 4 ranks with raw pyzmq frames built per docs/protocol.md, each on its own
DEALER socket, each sending only its quarter of every tensor and a commit
with the whole snapshot's tensor count and "ranks": 4:
- no rank gets a reply until the snapshot is whole; then all 4 get the ack,
  and the spool file holds the whole tensors, whether the last shard or the
  last commit completes it;
- ranks waiting on a snapshot dropped to free the budget get 'incomplete'
  with field 'tensors' (retryable);
- a rank that never sends: after the timeout the 3 waiting ranks get
  'incomplete' with field 'ranks', naming the tensor that lacks elements,
  and the log says so; a waiting rank whose socket closed before that
  (its ack timeout) and that sends its part again is refused at once with
  the same reason, while the whole step sent again is stored; and a new
  job's ranks (commits of sessions that did not wait for it) are taken as
  new, not as re-sends: stored;
- the same snapshot re-sent by the ranks is a duplicate for each; a commit
  from another connection while the snapshot is being stored gets its ack
  too, and a shard re-sent meanwhile is ignored;
- ranks = 1 keeps the immediate 'incomplete'; a malformed 'ranks' and ranks
  that disagree on the tensor count are refused.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, Publisher, bf16, check  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
import harness  # noqa: E402

W = 4


def quiet(pub, ms=300):
    pub.s.setsockopt(zmq.RCVTIMEO, ms)
    try:
        return pub.recv()
    finally:
        pub.s.setsockopt(zmq.RCVTIMEO, 5000)


def commit(pub, step, n, ranks=W, **over):
    h = {"v": 1, "type": "commit", "run": pub.run, "step": step, "tensors": n, "ranks": ranks}
    h.update(over)
    pub.send_raw([json.dumps(h).encode()])


def make(rng):
    return {"a": rng.standard_normal(4096).astype(np.float32),
            "b": bf16(rng.standard_normal(1000).astype(np.float32)),
            "c": rng.standard_normal((8, 16)).astype(np.float32)}


def shards(pub, step, t, k):
    """Rank k's quarter of a and b (row-major offsets); rank 0 has all of c."""
    for name, dt in (("a", "f32"), ("b", "bf16")):
        x = t[name]
        q = x.size // W
        part = x[k * q:(k + 1) * q]
        pub.tensor(step, name, part, dt, offset=k * q, total=x.size)
    if k == 0:
        pub.tensor(step, "c", t["c"].ravel(), "f32", shape=[8, 16])


def spool_equal(tmp, step, t):
    try:
        with h5py.File(os.path.join(tmp, "var", "spool", "sharded", f"{step}.h5"), "r") as f:
            return (np.array_equal(f["a"][()], t["a"]) and np.array_equal(f["b"][()], t["b"])
                    and np.array_equal(f["c"][()], t["c"]))
    except (OSError, KeyError) as e:
        print(f"# spool: {e}")
        return False


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t67-")
    dm = Daemon(tmp)
    ctx = zmq.Context()
    rng = np.random.default_rng(67)
    try:
        path = dm.write_config()
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("limits:\n", "limits:\n  pending_timeout: 2\n"))
        check(dm.start() is not None, "daemon ready with limits.pending_timeout: 2")
        ranks = [Publisher(ctx, tmp, "sharded") for _ in range(W)]

        # Step 1: ranks 0-2 send their part and commit; rank 3 last.
        t1 = make(rng)
        for k in range(W - 1):
            shards(ranks[k], 1, t1, k)
            commit(ranks[k], 1, 3)
        early = [quiet(p) for p in ranks[:W - 1]]
        check(early == [None] * (W - 1), f"ranks that committed before the snapshot is whole get no reply yet ({early})")
        shards(ranks[W - 1], 1, t1, W - 1)
        commit(ranks[W - 1], 1, 3)
        acks = [p.recv() for p in ranks]
        ok = all(a and a["type"] == "ack" and a["step"] == 1 and a["tensors"] == 3 and not a["duplicate"]
                 for a in acks)
        check(ok, f"the last commit completes it: all {W} ranks get the ack ({acks})")
        check(spool_equal(tmp, 1, t1), "the stored snapshot is the whole of the ranks' quarters")

        # Step 2: every commit first, the last shards after them.
        t2 = make(rng)
        shards(ranks[0], 2, t2, 0)
        for p in ranks:
            commit(p, 2, 3)
        early = [quiet(p) for p in ranks]
        check(early == [None] * W, f"commits of an incomplete snapshot wait ({early})")
        for k in range(1, W):
            shards(ranks[k], 2, t2, k)
        acks = [p.recv() for p in ranks]
        check(all(a and a["type"] == "ack" and a["step"] == 2 for a in acks),
              f"the last shard completes it: all {W} ranks get the ack ({acks})")
        check(spool_equal(tmp, 2, t2), "the stored snapshot is whole")

        # The same snapshot re-sent by every rank: a duplicate for each.
        for k, p in enumerate(ranks):
            shards(p, 1, t1, k)
            commit(p, 1, 3)
        acks = [p.recv() for p in ranks]
        check(all(a and a["type"] == "ack" and a["duplicate"] for a in acks),
              f"re-sent by all ranks: each acked as a duplicate ({acks})")

        # Step 3: rank 3 never sends; the others wait, then hear why.
        t3 = make(rng)
        t0 = time.time()
        for k in range(W - 1):
            shards(ranks[k], 3, t3, k)
            commit(ranks[k], 3, 3)
        errs = []
        for p in ranks[:W - 1]:
            p.s.setsockopt(zmq.RCVTIMEO, 8000)
            errs.append(p.recv())
        waited = time.time() - t0
        ok = all(e and e["type"] == "error" and e["code"] == "incomplete" and e["field"] == "ranks"
                 and "expired after 2 s waiting for the other ranks" in e["reason"]
                 and "'a' has 3072 of 4096 elements, missing [3072, 4096)" in e["reason"] for e in errs)
        check(ok and 1.5 < waited < 6, f"a missing rank: the 3 waiting get 'incomplete', field ranks, "
              f"after {waited:.1f} s ({errs})")
        log = dm.log_text()
        check("run 'sharded' step 3: expired after 2 s waiting for the other ranks: 'a' has 3072 of 4096 "
              "elements, missing [3072, 4096) (commits from 3 connections waited; a rank that sent again on a new connection counts "
              "again)" in log, "the log names the run, step and missing tensor", log[-1500:])
        check(not os.path.exists(os.path.join(tmp, "var", "spool", "sharded", "3.h5")), "nothing was stored")

        # Step 7: ranks 1 and 3 never send: the reason gives the holes, the
        # first of them naming rank 1's elements (a trial had to work out
        # which rank was missing from "has 2048 of 4096 elements")
        t7 = make(rng)
        for k in (0, 2):
            shards(ranks[k], 7, t7, k)
            commit(ranks[k], 7, 3)
        time.sleep(0.3)
        # meanwhile `status` names what waits, and for what (a trial saw only "1 pending")
        r = subprocess.run([WDRIFT, "status", "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True,
                           text=True, timeout=30)
        line = [x for x in r.stdout.splitlines() if x.startswith("pending    'sharded' step 7:")]
        check(r.returncode == 0 and line and "2 connections waiting; commit says 3 tensors, 1 complete: 'a' has "
              "2048 of 4096 elements, missing 2 ranges, the first [1024, 2048)" in line[0],
              "status names the snapshot that waits, its commits, and what it lacks", r.stdout + r.stderr)
        r = subprocess.run([WDRIFT, "status", "--json", "-c", os.path.join(tmp, "wdrift.yaml")],
                           capture_output=True, text=True, timeout=30)
        ps = json.loads(r.stdout).get("pending_snapshots", {}) if r.returncode == 0 else {}
        got = [p for p in ps.get("snapshots", []) if p.get("run") == "sharded" and p.get("step") == 7]
        check(got and got[0]["commits"] == 2 and got[0]["idle"] >= 0 and "missing 2 ranges" in got[0]["waiting"]
              and ps.get("more") == 0, "status --json: pending_snapshots", r.stdout[-1500:])
        errs = [ranks[k].recv() for k in (0, 2)]
        check(all(e and e["code"] == "incomplete" and "'a' has 2048 of 4096 elements, missing 2 ranges, the "
                  "first [1024, 2048)" in e["reason"] for e in errs),
              f"two ranks missing: the reason counts the holes and gives the first ({errs})")

        # Step 5: a waiting rank's ack timeout closes its socket before the expiry,
        # so the refusal cannot reach it; it sends its part again on a fresh
        # socket after. That re-send is refused at once, with the same reason
        # (before, it started the step afresh and waited a whole pending_timeout
        # again, and again: t69 under ASan saw a rank stuck so).
        t5 = make(rng)
        gone = Publisher(ctx, tmp, "sharded")
        shards(gone, 5, t5, 0)
        commit(gone, 5, 3)
        for k in (1, 2):
            shards(ranks[k], 5, t5, k)
            commit(ranks[k], 5, 3)
        time.sleep(0.3)
        gone.s.close()            # its ack timeout: the waiter it left is a closed socket
        errs = []
        for p in ranks[1:3]:
            p.s.setsockopt(zmq.RCVTIMEO, 8000)
            errs.append(p.recv())
        check(all(e and e["code"] == "incomplete" and e["field"] == "ranks" for e in errs),
              f"step 5 expires for the ranks still connected ({errs})")
        again = Publisher(ctx, tmp, "sharded")
        t0 = time.time()
        shards(again, 5, t5, 0)
        commit(again, 5, 3)
        e = quiet(again, 1500)
        waited = time.time() - t0
        check(e and e["code"] == "incomplete" and e["field"] == "ranks" and e["step"] == 5
              and "expired after 2 s waiting for the other ranks: 'a' has 3072 of 4096 elements" in e["reason"]
              and "said again to a re-send" in e["reason"] and "are refused for 30 s)" in e["reason"]
              and waited < 1.5,
              f"a rank that missed the expiry sends its part again: refused at once, same reason, "
              f"in {waited:.2f} s ({e})")
        shards(again, 5, t5, 0)
        commit(again, 5, 3)
        e2 = quiet(again, 1500)
        check(e2 and e2["code"] == "incomplete" and e2["field"] == "ranks",
              f"... and again each time it tries ({e2})")
        log = dm.log_text()
        said = log.count("run 'sharded' step 5: sent again by a rank")
        check(said == 1 and "refused at once, as then: expired after 2 s waiting for the other ranks" in log,
              f"the log says so once ({said} times)", log[-1500:])
        st = harness.control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["snapshots"]["pending"] == 0, f"the re-sent parts are not held ({st and st['snapshots']})")
        # a new job (every rank's part) within the 30 s after an expiry: each commit
        # gives its publisher's session, new ones, so none is taken for a re-send;
        # stored, every rank acked (a trial's restarted job lost the step: its
        # first rank's commit was refused as a re-send, its shards dropped)
        t6 = make(rng)
        for k in range(W - 1):
            shards(ranks[k], 6, t6, k)
            commit(ranks[k], 6, 3, session=100 + k)
        errs = [p.recv() for p in ranks[:W - 1]]
        check(all(e and e["code"] == "incomplete" and e["field"] == "ranks" for e in errs),
              "step 6 expires without rank 3")
        fresh = [Publisher(ctx, tmp, "sharded") for _ in range(W)]
        for k, p in enumerate(fresh):
            shards(p, 6, t6, k)
            commit(p, 6, 3, session=200 + k)
            time.sleep(0.1)
        acks = [p.recv() for p in fresh]
        check(all(a and a["type"] == "ack" and a["step"] == 6 for a in acks) and spool_equal(tmp, 6, t6),
              f"a new job's whole step, within 30 s of the expiry: stored, every rank acked ({acks})")
        # one of the old ranks' sessions again, for step 7's expiry: refused at once, as above
        t8 = make(rng)
        for k in range(W - 1):
            shards(ranks[k], 8, t8, k)
            commit(ranks[k], 8, 3, session=300 + k)
        errs = [p.recv() for p in ranks[:W - 1]]
        late = Publisher(ctx, tmp, "sharded")
        shards(late, 8, t8, 1)
        commit(late, 8, 3, session=301)
        e = quiet(late, 1500)
        check(e and e["code"] == "incomplete" and "said again to a re-send" in e["reason"],
              f"a session that waited for the step, on a new connection: refused at once ({e})")
        late.tensor(8, "a", t8["a"][:1024], "f32", offset=0, total=4096, session=300)
        e = quiet(late, 1500)
        check(e and e["code"] == "incomplete" and e["field"] == "ranks" and "said again to a re-send" in e["reason"],
              f"... and its shards are refused, not merged, when they give that session ({e})")
        for bad in (-1, "x", 1.5, 0):
            commit(late, 9, 3, session=bad)
            e = late.recv()
            check(e and e["code"] == "bad_field" and e["field"] == "session", f"session {bad!r}: bad_field ({e})")
        # only a commit that would wait is refused: one that completes the step stores it
        for k in range(W):
            shards(again, 5, t5, k)
        commit(again, 5, 3)
        a = again.recv()
        check(a and a["type"] == "ack" and a["step"] == 5 and spool_equal(tmp, 5, t5),
              f"the whole step sent again within the while: stored ({a})")
        ranks[0] = again

        # A commit (and a shard) for a snapshot being stored: the sender gets the ack too.
        big = rng.standard_normal(24 << 20).astype(np.float32)    # 96 MiB: its write and fsync take a while
        a0, b0 = Publisher(ctx, tmp, "stored"), Publisher(ctx, tmp, "stored")
        half = big.size // 2
        a0.tensor(1, "big", big[:half], "f32", offset=0, total=big.size, frame=16 << 20)
        a0.tensor(1, "big", big[half:], "f32", offset=half, total=big.size, frame=16 << 20)
        commit(a0, 1, 1, ranks=1)
        storing = False
        for _ in range(2000):     # until the spool thread has it
            st = harness.control(ctx, tmp, {"v": 1, "cmd": "status"})
            if st and st["queues"]["spool"] >= 1:
                storing = True
                break
        a0.tensor(1, "big", big[:1024], "f32", offset=0, total=big.size)   # re-sent while being stored
        commit(b0, 1, 1, ranks=1)
        ra, rb = a0.recv(), b0.recv()
        print(f"# caught the snapshot being stored: {storing}")
        check(ra and ra["type"] == "ack" and not ra["duplicate"] and quiet(a0) is None,
              f"a shard re-sent while its snapshot is stored is ignored: only the ack comes ({ra})")
        check(rb and rb["type"] == "ack" and not rb["duplicate"],
              f"a commit from another connection while it is stored gets the same ack ({rb})")

        # ranks = 1 (or absent): an incomplete commit is refused at once.
        one = Publisher(ctx, tmp, "single")
        one.tensor(1, "a", t3["a"][:100], "f32", offset=0, total=4096)
        commit(one, 1, 1, ranks=1)
        e = one.recv()
        check(e and e["code"] == "incomplete" and e["field"] == "tensors" and "'a' has 100 of 4096" in e["reason"],
              f"ranks 1: 'incomplete', field tensors, at once ({e})")
        for bad in (0, "4", -1):
            commit(one, 1, 1, ranks=bad)
            e = one.recv()
            check(e and e["code"] == "bad_field" and e["field"] == "ranks", f"ranks {bad!r}: bad_field ranks ({e})")
        p0, p1 = ranks[0], ranks[1]
        p0.tensor(4, "a", t3["a"][:1024], "f32", offset=0, total=4096)
        commit(p0, 4, 3)
        time.sleep(0.3)           # two connections: let p0's commit come first
        commit(p1, 4, 2)
        e = p1.recv()
        check(e and e["code"] == "bad_field" and e["field"] == "tensors" and "earlier commit" in e["reason"],
              f"ranks that disagree on the tensor count: refused ({e})")
        st = harness.control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["snapshots"]["conflicts"] == 0, "no conflict counted along the way")

        # Commits that give "rank": every rank committed and the snapshot is not
        # whole (two ranks sent the same piece, a trial's mistake) is said at
        # once, where it waited limits.pending_timeout (commits carried no rank:
        # a rank re-committing on a new connection looked the same).
        x = rng.standard_normal(4096).astype(np.float32)
        same = [Publisher(ctx, tmp, "overlap") for _ in range(3)]
        t0 = time.time()
        for k, p in enumerate(same):
            p.tensor(8, "a", x[:2048], "f32", offset=0, total=4096)     # each the same half
            commit(p, 8, 1, ranks=3, rank=k)
        errs = [quiet(p, 1500) for p in same]
        waited = time.time() - t0
        ok = all(e and e["code"] == "incomplete" and e["field"] == "ranks" and e["step"] == 8
                 and "every rank (3 of 3) committed, and the snapshot is not whole" in e["reason"]
                 and "'a' has 2048 of 4096 elements, missing [2048, 4096)" in e["reason"] for e in errs)
        check(ok and waited < 1.5, f"every rank committed, not whole: all refused at once ({waited:.2f} s; "
              f"pending_timeout 2 s) ({errs})")
        log = dm.log_text()
        check(log.count("run 'overlap' step 8: every rank (3 of 3) committed") == 1, "logged once", log[-1500:])
        p = Publisher(ctx, tmp, "overlap")
        p.tensor(8, "a", x[2048:], "f32", offset=2048, total=4096)
        commit(p, 8, 1, ranks=3, rank=1)
        e = quiet(p, 1500)
        check(e and e["code"] == "incomplete" and e["field"] == "ranks", f"a late part of it is refused too ({e})")
        for bad, ranks_ in ((3, 3), (1, 1), (-1, 3), ("0", 3)):
            commit(same[0], 9, 1, ranks=ranks_, rank=bad)
            e = same[0].recv()
            check(e and e["code"] == "bad_field" and e["field"] == "rank",
                  f"rank {bad!r} with ranks {ranks_}: bad_field rank ({e})")
        # ranks that disagree on the number of ranks (no rank given): the commit waits, not refused
        # (a trial's step was stored whole while the rank refused heard "never stored" and failed its job);
        # every rank's ack says it
        dis = [Publisher(ctx, tmp, "disagree") for _ in range(3)]
        dis[0].tensor(3, "a", x[:1024], "f32", offset=0, total=4096)
        commit(dis[0], 3, 1, ranks=3)
        time.sleep(0.2)
        dis[1].tensor(3, "a", x[1024:2048], "f32", offset=1024, total=4096)
        commit(dis[1], 3, 1, ranks=2)
        check(quiet(dis[1], 300) is None, "a commit with other ranks than an earlier one waits, as the others do")
        dis[2].tensor(3, "a", x[2048:], "f32", offset=2048, total=4096)
        commit(dis[2], 3, 1, ranks=3)
        acks = [p.recv() for p in dis]
        check(all(a and a.get("type") == "ack" and "said ranks 3 and 2" in a.get("notice", "") for a in acks),
              f"the step made whole: every rank acked, the ack's notice naming both counts ({acks})")
        # the smaller count first (ranks 0 and 1 say 2, rank 2 says 3, its part already here): "every
        # rank (2 of 2) committed" does not refuse the step while a publisher that sent parts has not
        # committed (a review: the step was refused, the larger count's rank too)
        sm = [Publisher(ctx, tmp, "smaller") for _ in range(3)]
        sm[2].tensor(3, "a", x[2048:3072], "f32", offset=2048, total=4096, session=303)    # half its part yet
        time.sleep(0.3)     # read before the others' commits (the daemon reads connections in turn)
        for k in (0, 1):
            sm[k].tensor(3, "a", x[k * 1024:(k + 1) * 1024], "f32", offset=k * 1024, total=4096, session=301 + k)
            commit(sm[k], 3, 1, ranks=2, rank=k, session=301 + k)
        check([quiet(p, 300) for p in sm[:2]] == [None, None],
              "ranks 0 and 1 of 2 committed, not whole, rank 2's part begun and not committed: they wait")
        sm[2].tensor(3, "a", x[3072:], "f32", offset=3072, total=4096, session=303)
        commit(sm[2], 3, 1, ranks=3, rank=2, session=303)
        acks = [p.recv() for p in sm]
        check(all(a and a.get("type") == "ack" and "said ranks 2 and 3" in a.get("notice", "") for a in acks),
              f"its commit comes: whole, stored, every rank acked with the two counts ({acks})")
        # ... and when the second one's pieces make the step whole: stored, but said once (a trial: silent)
        whole = [Publisher(ctx, tmp, "differ") for _ in range(2)]
        for step in (4, 5):
            whole[0].tensor(step, "a", x[:2048], "f32", offset=0, total=4096)
            commit(whole[0], step, 1, ranks=2)
            time.sleep(0.2)
            whole[1].tensor(step, "a", x[2048:], "f32", offset=2048, total=4096)
            commit(whole[1], step, 1, ranks=3)
            acks = [whole[1].recv(), whole[0].recv()]
            check(all(a and a.get("type") == "ack" for a in acks), f"step {step} made whole: both acked ({acks})")
        said = [ln for ln in dm.log_text().splitlines() if "run 'differ'" in ln and "commits say ranks" in ln]
        check(len(said) == 1 and "step 4: commits say ranks 2 and 3: every rank of a job gives the job's count"
              in said[0], "ranks that differ, the step whole anyway: said once for the run", "\n".join(said))
        # a rank that commits again on a new connection counts once; the one that
        # never commits is named, in status and in the expiry
        again = [Publisher(ctx, tmp, "named") for _ in range(3)]
        again[0].tensor(9, "a", x[:1024], "f32", offset=0, total=4096)
        commit(again[0], 9, 1, ranks=3, rank=0)
        again[1].tensor(9, "a", x[:1024], "f32", offset=0, total=4096)
        commit(again[1], 9, 1, ranks=3, rank=0)     # rank 0 again, a fresh socket
        again[2].tensor(9, "a", x[1024:2048], "f32", offset=1024, total=4096)
        commit(again[2], 9, 1, ranks=3, rank=1)
        check([quiet(p, 300) for p in again] == [None] * 3, "rank 0 twice and rank 1: still waiting for rank 2")
        # rank 0's first connection closes (it reconnected; or a rank that died): its commit still
        # counts, and status says the connection has gone (an ops trial read it as one waiting)
        again[0].s.close(linger=0)
        time.sleep(0.3)
        r = subprocess.run([WDRIFT, "status", "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True,
                           text=True, timeout=30)
        line = [x_ for x_ in r.stdout.splitlines() if x_.startswith("pending    'named' step 9:")]
        check(line and "2 connections waiting, 1 more closed since its commit (a rank that sent again on a new "
              "connection, or that died), from ranks 0, 1 of 3 (not yet: 2)" in line[0],
              "status names the ranks that committed and those not yet, and counts the connection closed since "
              "apart from those waiting (an ops trial read a lone rank's re-sends as ranks waiting)", r.stdout)
        r = subprocess.run([WDRIFT, "status", "-c", os.path.join(tmp, "wdrift.yaml"), "--json"],
                           capture_output=True, text=True, timeout=30)
        snap = [x_ for x_ in json.loads(r.stdout)["pending_snapshots"]["snapshots"] if x_["run"] == "named"] \
            if r.returncode == 0 else []
        check(snap and snap[0]["commits"] == 3 and snap[0]["commits_closed"] == 1,
              "status --json: commits 3, commits_closed 1", r.stdout)
        # every connection that committed has closed: none is said to wait (a review: the wording untested)
        lone = Publisher(ctx, tmp, "lone")
        lone.tensor(9, "a", x[:1024], "f32", offset=0, total=4096)
        commit(lone, 9, 1, ranks=2, rank=0)
        check(quiet(lone, 200) is None, "a lone rank of 2 committed: waiting")
        lone.s.close(linger=0)
        end = time.time() + 1.5    # until the daemon has seen the close (within pending_timeout, 2 s)
        while True:
            time.sleep(0.1)
            r = subprocess.run([WDRIFT, "status", "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True,
                               text=True, timeout=30)
            line = [x_ for x_ in r.stdout.splitlines() if x_.startswith("pending    'lone' step 9:")]
            if (line and "no connection waiting" in line[0]) or time.time() > end:
                break
        check(line and "no connection waiting: the one that committed has closed since (a rank that sent again "
              "on a new connection, or that died), from rank 0 of 2 (not yet: 1)" in line[0],
              "status: the step's only connection closed since its commit, said as none waiting", r.stdout)
        errs = []
        for p in again[1:]:
            p.s.setsockopt(zmq.RCVTIMEO, 8000)
            errs.append(p.recv())
        check(all(e and e["code"] == "incomplete" and "expired after 2 s waiting for the other ranks: rank 2 "
                  "of 3 never committed; 'a' has 2048 of 4096 elements" in e["reason"] for e in errs),
              f"the expiry names the rank that never committed ({errs})")

        # The budget full: waiting ranks of a stale snapshot dropped for room hear
        # 'incomplete' with field tensors (send it again), not ranks.
        dm.stop()
        with open(path, "w") as f:
            f.write(text.replace("limits:\n", "limits:\n  pending_timeout: 60\n")
                    .replace("budget: 256M", "budget: 200M"))
        check(dm.start() is not None, "restarted with memory.budget: 200M, limits.pending_timeout: 60")
        one = np.ones(1, np.float32)
        hogs = [Publisher(ctx, tmp, f"hog{k}") for k in range(2)]
        for p in hogs:             # 80 MB reserved each by one element of a 20M-element tensor
            p.tensor(1, "w", one, "f32", offset=0, total=20 << 20)
            commit(p, 1, 1, ranks=2)
        time.sleep(5.5)            # stale: no shard for 5 s
        late = Publisher(ctx, tmp, "late")
        late.tensor(1, "w", one, "f32", offset=0, total=20 << 20)
        errs = [p.recv() for p in hogs]
        dropped = [e for e in errs if e]
        ok = len(dropped) == 1 and all(e["code"] == "incomplete" and e["field"] == "tensors" and
                                       "send it again" in e["reason"] for e in dropped)
        # only as many as make room: 80 MB of the 200M budget frees enough
        check(ok, f"a snapshot dropped for the budget: its waiting ranks get 'incomplete', field tensors; "
                  f"one drop makes room, so the other stays ({errs})")
        check(quiet(late) is None, "... and the new run's shard is taken")

        # a sharded re-send of a durable step: each rank's commit waits for the others' parts
        # (t107); a review found two ways to leave a rank waiting
        rc = [Publisher(ctx, tmp, "rechk") for _ in range(2)]
        for k in (0, 1):
            rc[k].tensor(1, "a", x[k * 2048:(k + 1) * 2048], "f32", offset=k * 2048, total=4096, session=501 + k)
        for k in (0, 1):
            commit(rc[k], 1, 1, ranks=2, rank=k, session=501 + k)
        check(all((p.recv() or {}).get("type") == "ack" for p in rc), "run 'rechk' step 1 durable, from 2 ranks")
        # rank 1 dead: rank 0 re-sends its half and commits again after each ack timeout (4 s here);
        # its commits must not keep the check alive: it hears "duplicate" once the parts stop (15 s)
        t0, got = time.time(), None
        while got is None and time.time() - t0 < 40:
            again = Publisher(ctx, tmp, "rechk")
            again.tensor(1, "a", x[:2048], "f32", offset=0, total=4096, session=501)
            commit(again, 1, 1, ranks=2, rank=0, session=501)
            got = quiet(again, 4000)
        waited = time.time() - t0
        check(got and got.get("duplicate") is True and waited < 25,
              f"a sharded re-send whose other rank is dead: 'duplicate' within 15 s of its last new part, "
              f"though its rank commits again every 4 s ({waited:.0f} s; {got})")
        check("was not sent whole within 15 s" in dm.log_text(), "... and the log says it was not sent whole")
        # a rank that waits on such a re-send, then a commit of the step that says ranks 1: both answered
        w0, one_rank = Publisher(ctx, tmp, "rechk"), Publisher(ctx, tmp, "rechk")
        w0.tensor(1, "a", x[:2048], "f32", offset=0, total=4096, session=601)
        commit(w0, 1, 1, ranks=2, rank=0, session=601)
        check(quiet(w0, 300) is None, "a rank of a sharded re-send waits")
        one_rank.tensor(1, "a", x, "f32", offset=0, total=4096, session=602)
        commit(one_rank, 1, 1, ranks=1, session=602)
        a, b = one_rank.recv(), quiet(w0, 3000)
        check((a or {}).get("duplicate") is True and (b or {}).get("type") == "ack",
              f"a ranks-1 commit of the step ends the check: it, and the rank that waited, answered ({a}, {b})")
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
