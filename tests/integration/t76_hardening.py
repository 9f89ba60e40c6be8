#!/usr/bin/env python3
"""t76_hardening.py: what an outside attack got through (issue 11, items 1, 2, 3 and 6).

1. Names. Tensor names that one HDF5 file cannot hold apart ('.', '/',
   'a//b', './x', and 'a' beside 'a/b' in one snapshot) are refused at the
   tensor frame with bad_name, naming the rule, before anything is
   reserved; the daemon serves on. The Python publisher refuses them at
   publish(). A snapshot the daemon fails to store for a cause a re-send
   cannot fix ('internal', field "storage") is tried 3 times, then dropped,
   counted and said once, and the next snapshot is acked (before the fix
   it was re-sent 79 times in 16 s and everything behind it waited).
2. Slow drip. Two runs reserve 128 MiB and 128 MiB - 4 KiB tensors of a
   256M budget and send one element every 2 s. A good publisher's
   snapshots are all acked (it got 0 acks for 20 s before); the drippers'
   snapshots are dropped and the log says why. With limits.min_rate below
   the drip, the refusal names memory.budget, not the run's window.
3. max_runs. With limits.max_runs 4, four runs whose partial snapshots
   expire hold nothing, so a fifth run is taken (it was refused too_many
   until a restart).
   A tensor's bookkeeping (about 1.5 KB) counts against memory.budget:
   one-element tensors of one snapshot are refused once they fill the
   run's window, the snapshot whole, too_large (100,000 of them held
   120 MB that the budget did not see, and nothing was evicted).
7. The welcome says limits.max_message, and libwdrift sends a tensor
   larger than it in several messages (it sent one, refused too_large).
6. Frames. A header and 4095 payload frames, 4096 in all, are taken; 4097
   are bad_frames. A 65 MiB frame, which ZeroMQ answers by dropping the
   connection, is logged with the peer.

Daemons are stopped by pid and temp dirs removed, also on failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
PYDIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
os.environ.setdefault("WDRIFT_LIB", os.path.abspath(os.path.join(os.environ.get("BUILD", "build"),
                                                                 "libwdrift.so")))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402

import numpy as np  # noqa: E402
import zmq  # noqa: E402

PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")
MIB = 1 << 20


def child(code, timeout=90):
    """Runs code in a fresh Python with the package importable; (rc, stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([PYTHON, "-c", "import numpy as np, time, wdrift\n" + code], env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def quiet(pub, ms=300):
    """The next reply within ms, or None."""
    pub.s.setsockopt(zmq.RCVTIMEO, ms)
    try:
        return json.loads(pub.s.recv())
    except zmq.Again:
        return None
    finally:
        pub.s.setsockopt(zmq.RCVTIMEO, 5000)


def one(pub, step, name, total=1):
    """Sends element 0 of tensor name (of total f32 elements) of step; no reply expected."""
    pub.tensor(step, name, np.ones(1, np.float32), "f32", offset=0, total=total)


def names(ctx, tmp):
    """Item 1: the name rule at the frame, in one snapshot, and in the Python publisher."""
    p = Publisher(ctx, tmp, "names")
    for bad in [".", "/", "a//b", "./x", "w/", "/w", "a/../b"]:
        one(p, 1, bad)
        r = p.recv()
        check(r and r["code"] == "bad_name" and r["field"] == "name" and "HDF5 path" in r["reason"],
              f"name {bad!r}: bad_name at the frame ({r and r['reason']})")
    one(p, 1, "a")
    check(quiet(p) is None, "'a' taken")
    one(p, 1, "a/b")
    r = p.recv()
    check(r and r["code"] == "bad_name" and "'a'" in r["reason"] and "group" in r["reason"],
          f"'a/b' beside 'a' in one snapshot: bad_name naming 'a' ({r and r['reason']})")
    one(p, 2, "g/h")
    one(p, 2, "g")
    r = p.recv()
    check(r and r["code"] == "bad_name" and "'g/h'" in r["reason"],
          f"'g' beside 'g/h': bad_name naming 'g/h' ({r and r['reason']})")
    one(p, 3, "x/y")
    one(p, 3, "x/z")
    one(p, 3, "x")
    r = p.recv()
    check(r and r["code"] == "bad_name", "'x' beside 'x/y' and 'x/z': bad_name")
    r = p.commit(1, 1)
    check(r and r["type"] == "ack", f"the snapshot with 'a' alone is acked ({r})")
    st = control(ctx, tmp, {"v": 1, "cmd": "status"})
    check(st and st["errors"].get("bad_name") == 10, f"status counts bad_name ({st and st['errors']})")

    ep = f"ipc://{tmp}/run/ingest.sock"
    rc, out, err = child(f"""
pub = wdrift.Publisher({ep!r}, "pynames", ack_timeout=2.0)
for bad in ({{".": np.ones(2, np.float32)}}, {{"a": np.ones(2, np.float32), "a/b": np.ones(2, np.float32)}}):
    try:
        pub.publish(1, bad)
        print("published", list(bad))
    except (wdrift.WdriftError, ValueError) as e:
        print("refused:", e)
pub.publish(1, {{"a.b": np.ones(2, np.float32)}})
print("flushed", pub.flush(20), pub.stats()["acked"])
pub.close(5)
""")
    lines = out.splitlines()
    check(rc == 0 and len(lines) == 3 and "'.'" in lines[0] and "HDF5 path" in lines[0] and
          "'a'" in lines[1] and "'a/b'" in lines[1] and lines[2] == "flushed True 1",
          "Python publisher: bad names raise at publish(), naming the rule; a good one is acked",
          out + err)


def storage_failure(ctx, tmp):
    """Item 1: an 'internal' failure a retry cannot fix: 3 tries, dropped, said, next acked."""
    ep = f"ipc://{tmp}/run/ingest.sock"
    # step 5's spool file cannot be renamed into place: a directory is there
    os.makedirs(f"{tmp}/var/spool/stuck/5.h5/x")
    t0 = time.time()
    rc, out, err = child(f"""
pub = wdrift.Publisher({ep!r}, "stuck", ack_timeout=2.0)
pub.publish(5, {{"w": np.arange(8, dtype=np.float32)}})
pub.publish(6, {{"w": np.arange(8, dtype=np.float32) + 1}})
print("flushed", pub.flush(30))
s = pub.stats()
print("stats", s["acked"], s["refused"], s["dropped"], s["resent"])
print("close", pub.close(5))
""")
    took = time.time() - t0
    print(f"# storage failure: 3 tries and the next snapshot acked in {took:.1f} s")
    check(rc == 0 and "flushed True" in out and "stats 1 1 1 2" in out,
          "step 5 refused after 3 tries (2 re-sends), dropped and counted; step 6 acked", out + err)
    said = [line for line in err.splitlines() if "step 5" in line]
    check(len(said) == 1 and "internal" in said[0] and "given up after 3 tries" in said[0],
          f"said once on stderr, with the tries ({said})", err)
    st = control(ctx, tmp, {"v": 1, "cmd": "status"})
    check(st and st["errors"].get("internal") == 3, f"the daemon refused it 3 times ({st and st['errors']})")


def frames(ctx, dm, tmp):
    """Item 6: 4096 frames in all are taken; 4097 are not; a 65 MiB frame is logged."""
    p = Publisher(ctx, tmp, "frames")
    data = np.arange(4095, dtype=np.float32)
    raw = data.tobytes()
    h = {"v": 1, "type": "tensor", "run": "frames", "step": 1, "name": "w", "dtype": "f32",
         "shape": [4095], "offset": 0, "count": 4095, "total": 4095, "crc32": zlib.crc32(raw)}
    p.send_raw([json.dumps(h).encode()] + [raw[4 * i:4 * i + 4] for i in range(4095)])
    r = quiet(p, 1000)
    check(r is None, f"a header and 4095 payload frames, 4096 in all, are taken ({r})")
    r = p.commit(1, 1)
    check(r and r["type"] == "ack", f"... and committed ({r})")
    data = np.arange(4096, dtype=np.float32)
    raw = data.tobytes()
    h.update(step=2, shape=[4096], count=4096, total=4096, crc32=zlib.crc32(raw))
    p.send_raw([json.dumps(h).encode()] + [raw[4 * i:4 * i + 4] for i in range(4096)])
    r = p.recv()
    check(r and r["code"] == "bad_frames", f"4097 frames: bad_frames ({r})")

    # A frame over ZMQ_MAXMSGSIZE: ZeroMQ drops the connection, the daemon says so.
    big = Publisher(ctx, tmp, "bigframe")
    check(big.hello() is not None, "a publisher says hello")
    payload = bytes(65 * MIB)
    h = {"v": 1, "type": "tensor", "run": "bigframe", "step": 3, "name": "w", "dtype": "f32",
         "shape": [len(payload) // 4], "offset": 0, "count": len(payload) // 4,
         "total": len(payload) // 4, "crc32": zlib.crc32(payload)}
    big.send_raw([json.dumps(h).encode(), payload])
    check(quiet(big, 2000) is None, "a 65 MiB frame gets no reply: ZeroMQ drops the connection")
    end, line = time.time() + 10, None
    while time.time() < end and not line:
        line = next((x for x in dm.log_text().splitlines() if "disconnected" in x and "bigframe" in x),
                    None)
        time.sleep(0.2)
    check(line is not None and "warning" in line and "run 'bigframe'" in line and "ipc" in line and
          "frame over 67174400 bytes" in line,
          f"the daemon logs the drop with the peer and the frame limit ({line})")
    r = p.hello()
    check(r and r["type"] == "welcome", "the daemon serves on")


def drip(ctx, tmp, dm):
    """Item 2: two slow drips hold 256M - 4K; a good publisher's snapshots are all acked."""
    drippers = [Publisher(ctx, tmp, f"drip{k}") for k in range(2)]
    # as the attack, less room for each tensor's bookkeeping, which the window counts
    elems = [(128 * MIB - 8192) // 4, (128 * MIB - 12288) // 4]
    stop = threading.Event()

    def dripping():
        i = 0
        while not stop.is_set():
            for p, n in zip(drippers, elems):
                p.tensor(1, "big", np.ones(1, np.float32), "f32", offset=i, total=n)
            i += 1
            stop.wait(2.0)

    th = threading.Thread(target=dripping)
    th.start()
    try:
        time.sleep(1.5)
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        held = st and st["memory"]["reserved"]
        check(held and held >= 255 * MIB, f"the drippers hold the budget ({held} bytes)")
        ep = f"ipc://{tmp}/run/ingest.sock"
        rc, out, err = child(f"""
pub = wdrift.Publisher({ep!r}, "good", ack_timeout=2.0)
waits = []
for step in range(8):
    t = time.monotonic()
    pub.publish(step, {{"w": np.arange(256 * 1024, dtype=np.float32) + step}})
    ok = pub.flush(30)
    waits.append(time.monotonic() - t)
    if not ok:
        break
s = pub.stats()
print("acked", s["acked"], "max_wait %.2f" % max(waits))
pub.close(5)
""")
        print(f"# slow drip: good publisher: {out.strip()}")
        check(rc == 0 and "acked 8" in out, "a good publisher's 8 snapshots are all acked beside the drip",
              out + err)
    finally:
        stop.set()
        th.join()
    log = dm.log_text()
    check("to free memory.budget" in log and "below limits.min_rate" in log,
          "the log says a dripper was dropped for being slow")
    st = control(ctx, tmp, {"v": 1, "cmd": "status"})
    check(st and st["snapshots"]["dropped_for_room"] >= 1 and
          st["snapshots"]["dropped"] >= st["snapshots"]["dropped_for_room"],
          f"status counts the drops for room ({st and st['snapshots']})")


def budget_message(ctx, tmp):
    """Item 2: with limits.min_rate under the drip, the refusal names the limit that is full."""
    total = (128 * MIB - 8192) // 4
    part = np.ones((60 * MIB) // 4, np.float32)
    holders = [Publisher(ctx, tmp, f"hold{k}") for k in range(2)]
    # 120 MiB of each 128 MiB tensor, fast: neither idle, slow, nor far from whole
    holders[0].tensor(1, "big", part, "f32", offset=0, total=total)
    # the run's own window, half the budget: 128M - 8K held, 16K more does not fit it
    holders[0].tensor(2, "small", np.ones(1, np.float32), "f32", offset=0, total=4096)
    # the daemon takes in the 60 MiB before it answers: over a second under ASan (CI, 2026-11-28)
    r = quiet(holders[0], 10000)
    check(r and r["code"] == "over_window" and "window full" in r["reason"] and "hold0" in r["reason"],
          f"over_window names the run's window when that is what is full ({r and r['reason']})")
    # all but the last 4 MiB of each, then the rest 64 KiB every 0.25 s from a
    # thread: never idle, never slow, never far from whole, whatever the machine's pace
    rest = (4 * MIB) // 4
    first = total - rest
    for k, p in enumerate(holders):
        for off in range(part.size if k == 0 else 0, first, part.size):
            p.tensor(1, "big", part[:min(part.size, first - off)], "f32", offset=off, total=total)
    stop = threading.Event()

    def keep_coming():
        chunk = np.ones((64 << 10) // 4, np.float32)
        for off in range(first, total - chunk.size, chunk.size):
            for p in holders:
                p.tensor(1, "big", chunk, "f32", offset=off, total=total)
            if stop.wait(0.25):
                break

    keeper = threading.Thread(target=keep_coming)
    keeper.start()
    try:
        time.sleep(0.5)
        late = Publisher(ctx, tmp, "late")
        late.tensor(1, "w", np.ones(1, np.float32), "f32", offset=0, total=1 << 20)
        r = late.recv()
        check(r and r["code"] == "over_window" and "memory.budget full" in r["reason"] and
              "window" not in r["reason"].split(":")[0],
              f"... and memory.budget when that is full ({r and r['reason']})")
        # a publisher refused so says why in its stall warning, not a guess
        ep = f"ipc://{tmp}/run/ingest.sock"
        rc, out, err = child(f"""
pub = wdrift.Publisher({ep!r}, "stalled", ack_timeout=0.5, stall_warning=1.0)
pub.publish(1, {{"w": np.ones(1 << 20, dtype=np.float32)}})
time.sleep(2.5)
print("dropped", pub.close(0))
""")
        said = [line for line in err.splitlines() if "no ack" in line]
        check(rc == 0 and len(said) == 1 and "memory.budget full" in said[0] and "over_window" in said[0],
              f"the stall warning quotes the daemon's refusal ({said})", out + err)
    finally:
        stop.set()
        keeper.join()
    # a tensor larger than a run's window could never be held: final, not over_window
    big = Publisher(ctx, tmp, "toolarge")
    big.tensor(1, "w", np.ones(1, np.float32), "f32", offset=0, total=(128 * MIB) // 4)
    r = big.recv()
    check(r and r["code"] == "too_large" and r["field"] == "total" and "window" in r["reason"],
          f"a tensor over a run's window is too_large ({r and r['reason']})")


def max_runs(ctx, tmp):
    """Item 3: runs whose partial snapshots expired hold nothing and do not count."""
    pubs = [Publisher(ctx, tmp, f"r{k}") for k in range(4)]
    for p in pubs:
        one(p, 1, "w", total=2)
    # four connections are read in no fixed order: the fifth run is sent only
    # once the daemon holds all four (CI once saw r5 taken before r3 arrived)
    held = None
    for _ in range(100):
        held = control(ctx, tmp, {"v": 1, "cmd": "status"})
        if held and held["runs"] == 4:
            break
        time.sleep(0.02)
    check(held and held["runs"] == 4, f"the four runs are held ({held and held['runs']})")
    p5 = Publisher(ctx, tmp, "r5")
    one(p5, 1, "w", total=2)
    r = p5.recv()
    check(r and r["code"] == "too_many" and r["field"] == "run", f"a fifth run is refused at first ({r})")
    time.sleep(4.5)    # limits.pending_timeout: 2, and a sweep
    st = control(ctx, tmp, {"v": 1, "cmd": "status"})
    check(st and st["runs"] == 0, f"the expired runs are forgotten ({st and st['runs']} runs)")
    one(p5, 1, "w", total=2)
    check(quiet(p5, 500) is None, "a fifth run is then taken")
    one(p5, 1, "w", total=2)  # same shard again: harmless
    p5.tensor(1, "w", np.ones(1, np.float32), "f32", offset=1, total=2)
    r = p5.commit(1, 1)
    check(r and r["type"] == "ack", f"... and its snapshot acked ({r})")


def control_size(ctx, tmp):
    """A control request over 64 KiB is refused unread; one over 1 MiB drops the peer."""
    t0 = time.monotonic()
    r = control(ctx, tmp, {"v": 1, "cmd": "status", "pad": "x" * (100 << 10)})
    check(r and not r["ok"] and "at most 65536" in r["error"] and time.monotonic() - t0 < 1,
          f"a 100 KiB control request: refused unread ({r})")
    r = control(ctx, tmp, {"v": 1, "cmd": "status", "pad": "x" * (2 << 20)}, timeout=1000)
    check(r is None, "a 2 MiB control request: no reply, ZeroMQ drops the peer")
    r = control(ctx, tmp, {"v": 1, "cmd": "status"})
    check(r and r["ok"], "status is answered after both")


def bookkeeping(ctx, tmp, dm):
    """A tensor's bookkeeping counts against the budget: many tiny tensors are refused in time."""
    p = Publisher(ctx, tmp, "tiny")
    one_el = np.ones(1, np.float32)
    sent = 0
    refused = None
    # under a sanitizer the daemon lags far behind: a pause every 500 keeps pyzmq's
    # queue short (CI, 2026-11-28: libzmq 4.3.4 aborted the test process at
    # session_base.cpp:260, EAGAIN, after 24500 tensors queued)
    pause = 50 if os.environ.get("WDRIFT_SANITIZE") else 0
    for i in range(60000):
        p.tensor(1, f"t{i}", one_el, "f32")
        sent += 1
        if i % 500 == 499:
            r = quiet(p, pause)
            if r:
                refused = r
                break
    refused = refused or quiet(p, 1000)
    st = control(ctx, tmp, {"v": 1, "cmd": "status"})
    rss = 0
    with open(f"/proc/{dm.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) << 10
    print(f"# {sent} one-element tensors sent; reserved {st and st['memory']['reserved']}, "
          f"daemon RSS {rss >> 20} MiB")
    check(refused and refused["code"] == "too_large" and refused["field"] == "snapshot"
          and "larger than a run's window" in refused["reason"],
          f"one-element tensors are refused once their bookkeeping fills the run's window: the snapshot, "
          f"which could never be held whole, too_large (t98) ({refused and refused['reason']})")
    check(st and st["memory"]["reserved"] <= st["memory"]["budget"],
          f"reserved stays within memory.budget 64M ({st and st['memory']['reserved']})")
    tool = os.environ.get("WDRIFT_SANITIZE") or ("valgrind" if os.environ.get("WDRIFT_VALGRIND") else "")
    if tool:
        # ASan's quarantine and shadow, or valgrind's, are in RSS too: make check holds the bound
        check(True, f"RSS under 128 MiB ({rss >> 20} MiB) # SKIP under {tool}: RSS includes the tool's")
    else:
        check(rss < (64 + 64) << 20, f"RSS under 128 MiB ({rss >> 20} MiB)")


def split_messages(ctx, tmp):
    """Item 7: the welcome says limits.max_message; libwdrift sends a larger tensor in parts."""
    p = Publisher(ctx, tmp, "welcomed")
    w = p.hello()
    check(w and w.get("max_message") == 4 << 20, f"welcome says max_message ({w})")
    ep = f"ipc://{tmp}/run/ingest.sock"
    rc, out, err = child(f"""
pub = wdrift.Publisher({ep!r}, "split", ack_timeout=5.0)
w = np.arange(10 << 18, dtype=np.float32)      # 10 MiB: three messages of at most 4 MiB
pub.publish(1, {{"w": w}})
print("flushed", pub.flush(30), pub.stats()["acked"], pub.stats()["refused"])
pub.close(5)
""")
    check(rc == 0 and "flushed True 1 0" in out, "a 10 MiB tensor under max_message 4M is acked", out + err)
    import h5py
    with h5py.File(f"{tmp}/var/spool/split/1.h5", "r") as f:
        same = np.array_equal(f["w"][...], np.arange(10 << 18, dtype=np.float32))
    check(same, "... and stored whole, equal to what was published")


def main():
    ctx = zmq.Context()
    tmp = tempfile.mkdtemp(prefix="wdrift-t76-")
    dm = Daemon(tmp)
    try:
        dm.write_config(level="info")
        check(dm.start() is not None, "daemon up")
        names(ctx, tmp)
        storage_failure(ctx, tmp)
        frames(ctx, dm, tmp)
        control_size(ctx, tmp)
        drip(ctx, tmp, dm)
        dm.stop()

        dm.write_config(extra="", level="info")
        path = os.path.join(tmp, "wdrift.yaml")
        text = open(path).read()
        with open(path, "w") as f:
            f.write(text.replace("limits:\n", "limits:\n  min_rate: 1\n"))
        check(dm.start() is not None, "daemon up with limits.min_rate: 1")
        budget_message(ctx, tmp)
        dm.stop()

        with open(path, "w") as f:
            f.write(text.replace("budget: 256M", "budget: 64M").replace("max_message: 64M", "max_message: 4M"))
        check(dm.start() is not None, "daemon up with memory.budget: 64M, limits.max_message: 4M")
        split_messages(ctx, tmp)
        bookkeeping(ctx, tmp, dm)
        dm.stop()

        with open(path, "w") as f:   # a fresh storage.dir: the runs made durable above count
            f.write(text.replace("limits:\n", "limits:\n  max_runs: 4\n  pending_timeout: 2\n")
                    .replace(f"{tmp}/var", f"{tmp}/var-runs"))
        check(dm.start() is not None, "daemon up with limits.max_runs: 4, pending_timeout: 2")
        max_runs(ctx, tmp)
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
