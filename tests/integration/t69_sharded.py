#!/usr/bin/env python3
"""t69_sharded.py: four ranks, each holding a quarter of every tensor, publish a sharded model.

Four OS processes (a real torch.distributed gloo process group when this
torch has one) publish steps 0, 10 and 20 of a baseline and a candidate
run. Each holds a quarter of each tensor: row blocks, column blocks (sent
as one shard per row), uneven flat shards, bf16 codes and torch tensors;
one tensor is all on rank 0, and the others name it with empty shards.
No rank waits for another; every rank sees every snapshot acked; the
spool holds the whole tensors; the daemon's drift equals `wdrift compare`
on the unsharded checkpoints, to the bit. Then a rank is killed before its
part of step 30: the others' publish() still returns at once, and once the
snapshot expires (limits.pending_timeout) they and the daemon name the
tensor that was missing, and the rank that never committed (the
publishers give their rank: the group's, or RANK when there is none).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
PYDIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, PYDIR)
os.environ.setdefault("WDRIFT_LIB", os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "libwdrift.so")))
PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
W = 4
STEPS = (0, 10, 20)
SHAPES = {"emb.weight": (40, 24), "l0.w": (30, 28), "l0.b": (30,), "l1.w": (24, 30), "head.w": (17,),
          "tiny.b": (2,)}


def full(run, step):
    """The unsharded model of run at step: what a single-process job would publish."""
    rng = np.random.default_rng(1000 * step + (run == "cand"))
    out = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    u = out["head.w"].view(np.uint32)
    out["head.w"] = (u >> 16).astype(np.uint16)    # bf16 codes, truncated: fine for a test
    return out


def chunks(n, w=W):
    """torch.chunk's split of n into w pieces: ceil-sized, the last smaller."""
    c = -(-n // w)
    return [(min(r * c, n), min(r * c + c, n)) for r in range(w)]


def pieces(run, step, rank, wdrift, torch):
    """This rank's quarter of every tensor, in every form a sharded job uses."""
    t = full(run, step)
    r0, r1 = chunks(40)[rank]
    c0, c1 = chunks(28)[rank]
    d0, d1 = chunks(30)[rank]
    f0, f1 = [(0, 7), (7, 15), (15, 23), (23, 30)][rank]
    h0, h1 = chunks(17)[rank]
    cols = t["l1.w"][:, d0:d1]
    return {
        "emb.weight": wdrift.Block(t["emb.weight"][r0:r1], start=(r0, 0), shape=(40, 24)),
        "l0.w": wdrift.Block(np.ascontiguousarray(t["l0.w"][:, c0:c1]), start=(0, c0), shape=(30, 28)),
        "l0.b": wdrift.Shard(t["l0.b"][f0:f1], offset=f0, shape=(30,)),
        "l1.w": wdrift.Block(torch.from_numpy(np.ascontiguousarray(cols)), start=(0, d0), shape=(24, 30)),
        "head.w": wdrift.Shard(wdrift.BF16(t["head.w"][h0:h1]), offset=h0, shape=(17,)),
        # rank 0 holds it all; the others hold nothing of it and still name it
        "tiny.b": wdrift.Shard(t["tiny.b"] if rank == 0 else np.empty(0, np.float32), offset=0, shape=(2,)),
    }


def rank_main(tmp, rank, steps, kill_step):
    """One rank: publishes its pieces of both runs at each step; prints its publishers' stats."""
    import torch
    import torch.distributed as dist
    import wdrift
    group = dist.is_available() and dist.is_gloo_available()
    if group:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/pg.{kill_step}", rank=rank, world_size=W)
    else:
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(W))     # as torchrun sets them
    ep = f"ipc://{tmp}/run/ingest.sock"
    # with a rank dead, the others re-send after their ack timeout, shorter than the
    # daemon's pending_timeout: the re-sends bring nothing new and must not keep it
    # alive. So short that a survivor is mostly between sockets (its backoff) when
    # the step expires: its next re-send must hear the refusal, not start it afresh
    ack = 20.0 if kill_step is None else 0.25
    pubs = {run: wdrift.Publisher(ep, run, ranks=W, ack_timeout=ack) for run in ("base", "cand")}
    blocked = 0.0
    for step in steps:
        if group:
            dist.barrier()      # ranks in lockstep, as training is
        for run, pub in pubs.items():
            t0 = time.perf_counter()
            pub.publish(step, pieces(run, step, rank, wdrift, torch))
            blocked = max(blocked, time.perf_counter() - t0)
    if kill_step is not None:   # the step a rank dies in: the others publish it alone
        open(f"{tmp}/ready.{rank}", "w").close()
        if rank == W - 1:
            time.sleep(600)     # killed by the test
        t0 = time.perf_counter()
        pubs["base"].publish(kill_step, pieces("base", kill_step, rank, wdrift, torch))
        blocked = max(blocked, time.perf_counter() - t0)
    out = {"group": bool(group), "blocked": blocked}
    for run, pub in pubs.items():
        out[run] = {"flushed": pub.flush(40), **pub.stats()}
        pub.close(1.0)
    print(json.dumps(out))
    sys.stdout.flush()
    if group:
        dist.destroy_process_group()
    return 0


def start_ranks(tmp, steps, kill_step=None):
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [PYTHON, os.path.abspath(__file__), "rank", tmp, ",".join(map(str, steps)),
           "" if kill_step is None else str(kill_step)]
    return [subprocess.Popen(cmd[:3] + [str(r)] + cmd[3:], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for r in range(W)]


def main():
    import harness
    from harness import Daemon, check, control
    import h5py
    import zmq
    tmp = tempfile.mkdtemp(prefix="wdrift-t69-")
    dm = Daemon(tmp)
    ctx = zmq.Context()
    procs = []
    try:
        with open(os.path.join(tmp, "wdrift.yaml"), "w") as f:
            f.write(harness.CONFIG.format(d=tmp, level="info", extra="").replace(
                "  max_message: 64M\n", "  max_message: 64M\n  pending_timeout: 3\n").replace(
                "  - name: fa\n    baseline: base\n    candidates: [fa]\n    proxies: {fp16: lowprec}\n",
                "  - name: sh\n    baseline: base\n    candidates: [cand]\n"))
        check(dm.start() is not None, "daemon started", dm.log_text() if dm.proc else "")
        # 1. four ranks, three steps, two runs
        procs = start_ranks(tmp, STEPS)
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            outs.append((p.returncode, out, err))
        stats = []
        for rc, out, err in outs:
            try:
                stats.append(json.loads(out.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                stats.append(None)
                print(f"# rank exited {rc}: " + err[-2000:].replace("\n", "\n# "))
        check(all(s is not None for s in stats), "four rank processes ran to the end")
        stats = [s for s in stats if s]
        if stats:
            print(f"# process group: {'gloo' if stats[0]['group'] else 'none (no gloo here)'}; "
                  f"publish() blocked at most {max(s['blocked'] for s in stats) * 1e3:.1f} ms")
        check(len(stats) == W and all(s[run]["flushed"] and s[run]["acked"] == len(STEPS)
                                      and s[run]["dropped"] == 0 for s in stats for run in ("base", "cand")),
              "every rank sees each of its 6 snapshots acked, none dropped",
              json.dumps(stats, indent=1))
        spool = os.path.join(tmp, "var", "spool")
        same = True
        for run in ("base", "cand"):
            for s in STEPS:
                with h5py.File(os.path.join(spool, run, f"{s}.h5"), "r") as f:
                    for k, v in full(run, s).items():
                        got = f[k][()]
                        same = same and got.shape == v.shape and np.array_equal(got.view(v.dtype), v)
        check(same, "the spool holds every whole tensor, shape and bits, assembled from 4 ranks' pieces")
        # 2. the drift equals wdrift compare on the unsharded checkpoints, to the bit
        for s in STEPS:
            for run in ("base", "cand"):
                with h5py.File(os.path.join(tmp, f"{run}{s}.h5"), "w") as f:
                    for k, v in full(run, s).items():
                        d = f.create_dataset(k, data=v)
                        if v.dtype == np.uint16:
                            d.attrs["dtype"] = "bfloat16"
            got = None
            end = time.time() + 20
            while time.time() < end:
                got = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "sh", "step": s})
                if got and got.get("ok") and "cand" in got.get("candidates", {}):
                    break
                time.sleep(0.2)
            r = subprocess.run([WDRIFT, "compare", os.path.join(tmp, f"base{s}.h5"),
                                os.path.join(tmp, f"cand{s}.h5"), "--json"], capture_output=True, text=True)
            ref = {l["name"]: l for l in json.loads(r.stdout)["layers"]} if r.returncode == 0 else {}
            mine = {l["name"]: l for l in got["candidates"]["cand"]["layers"]} if got and got.get("ok") else {}
            equal = set(ref) == set(SHAPES) == set(mine) and all(
                mine[k][m] == ref[k][m] for k in SHAPES for m in ("w1", "max_abs_diff", "rel_l2", "numel"))
            check(equal, f"step {s}: the daemon's drift of the sharded runs equals wdrift compare "
                         "of the unsharded checkpoints, to the bit", json.dumps([ref, mine])[:3000])
        # 3. a rank dies before its part of step 30
        procs = start_ranks(tmp, (), kill_step=30)
        end = time.time() + 60
        while not all(os.path.exists(f"{tmp}/ready.{r}") for r in range(W)) and time.time() < end:
            time.sleep(0.05)
        procs[W - 1].send_signal(signal.SIGKILL)
        outs = [p.communicate(timeout=120) for p in procs]
        check(procs[W - 1].returncode == -signal.SIGKILL, "rank 3 was killed")
        live = []
        for p, (out, err) in zip(procs[:W - 1], outs[:W - 1]):
            try:
                live.append((json.loads(out.strip().splitlines()[-1]), err))
            except (ValueError, IndexError):
                print(f"# survivor exited {p.returncode}: {err[-2000:]}")
        check(len(live) == W - 1 and all(s["blocked"] < 1.0 for s, _ in live),
              "the survivors' publish() returned at once (no rank waits for another)")
        check(len(live) == W - 1 and all(s["base"]["flushed"] and s["base"]["dropped"] == 1
                                         and s["base"]["refused"] == 1 for s, _ in live),
              "each survivor counts step 30 as refused and dropped, and goes on",
              json.dumps([s for s, _ in live]))
        check(len(live) == W - 1 and all("step 30 refused: incomplete" in e and any(f"'{k}'" in e for k in SHAPES)
                                         for _, e in live),
              "each survivor says which tensor was missing", "\n".join(e for _, e in live))
        # the ranks' commits give their rank (torch.distributed's, found by the publisher,
        # or torchrun's RANK without a group): the dead one is named by number
        check(len(live) == W - 1 and all("rank 3 of 4 never committed" in e for _, e in live),
              "each survivor's refusal names the rank that never committed", "\n".join(e for _, e in live))
        log = dm.log_text()
        check("step 30" in log and any(f"'{k}'" in log for k in SHAPES) and "elements" in log,
              "the daemon's log names the run, step and the missing tensor",
              "\n".join(l for l in log.splitlines() if "30" in l))
        check(dm.stop() == 0, "daemon stopped")
    finally:
        harness.stop_procs(procs)
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        _, _, rank, tmp, steps, kill = sys.argv
        sys.exit(rank_main(tmp, int(rank), [int(s) for s in steps.split(",") if s],
                           int(kill) if kill else None))
    sys.exit(main())
