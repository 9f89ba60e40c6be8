#!/usr/bin/env python3
"""t50_daemon.py: wdriftd as systemd and publishers see it.

Starts the real daemon in a temp dir on ipc:// endpoints, with a real
NOTIFY_SOCKET listener, and speaks protocol v1 (docs/protocol.md) to it
with pyzmq: readiness, status, snapshots made durable and acked (one
sharded tensor, one bf16), idempotent re-sends, every malformed message
answered with its error code while the daemon keeps serving, SIGHUP reload
(good and bad config), kill -9 then restart with nothing acked lost, and
SIGTERM. Every daemon is stopped by pid and the temp dir removed, also on
failure.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib

import h5py
import numpy as np
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CONFIG, WDRIFTD, Daemon, Publisher, bf16, check, control, summary,  # noqa: E402
                     teardown)

WDRIFT = os.path.join(os.path.dirname(WDRIFTD), "wdrift")


def snapshot(pub, step, rng):
    """Three tensors: fp32 in two shards, bf16, and a 2-D fp32; returns them."""
    a = rng.standard_normal(5000).astype(np.float32)
    b = bf16(rng.standard_normal(3000).astype(np.float32))
    c = rng.standard_normal((40, 30)).astype(np.float32)
    pub.tensor(step, "layers.0.w", a[:2000], "f32", offset=0, total=5000)
    pub.tensor(step, "layers.0.w", a[2000:], "f32", offset=2000, total=5000, frame=4096)
    pub.tensor(step, "emb", b, "bf16")
    pub.tensor(step, "layers.1/w2", c.ravel(), "f32", shape=[40, 30])
    return {"layers.0.w": a, "emb": b, "layers.1/w2": c}


def run_limit(ctx):
    """Refused tensors do not use up limits.max_runs: runs that never had
    anything accepted are not 'known', and must not lock real runs out."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t50-")
    dm = Daemon(tmp)
    try:
        path = dm.write_config()
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("limits:\n", "limits:\n  max_runs: 2\n"))
        check(dm.start() is not None, "ready with limits.max_runs: 2")
        x = np.arange(8, dtype=np.float32)
        for k in range(4):
            p = Publisher(ctx, tmp, f"junk{k}")
            p.tensor(1, "w", x, "f32", total=1 << 40, shape=[1 << 40], offset=0)  # too large
            e = p.recv()
            check(e and e["code"] == "too_large", f"junk{k}: a tensor over the budget is refused ({e and e['code']})")
        good = Publisher(ctx, tmp, "real")
        good.tensor(1, "w", x, "f32")
        a = good.commit(1, 1)
        check(a and a["type"] == "ack", f"a real run is still taken ({a})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["runs"] == 1 and st["snapshots"]["pending"] == 0,
              f"status: 1 run, nothing pending ({st and (st['runs'], st['snapshots'])})")
        # another daemon given the same path since (a bind replaces the file): its file stays
        other = os.path.join(tmp, "run", "events.sock")
        os.unlink(other)
        theirs = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.bind(other)
        check(dm.stop() == 0, "SIGTERM: exit 0")
        theirs.close()
        gone = [n for n in ("ingest.sock", "control.sock") if not os.path.exists(os.path.join(tmp, "run", n))]
        check(gone == ["ingest.sock", "control.sock"] and os.path.exists(other),
              f"a clean stop removes its socket files, not one that another bound since ({gone})")
        t0 = time.time()
        r = subprocess.run([WDRIFT, "status", "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True,
                           text=True, timeout=30)
        check(r.returncode == 1 and "no socket at" in r.stderr and "SIGKILL" not in r.stderr
              and time.time() - t0 < 1, f"status after it: no socket, at once, no crash blamed ({r.stderr.strip()})")
    finally:
        teardown(dm, tmp)


def main():
    if not os.path.exists(WDRIFTD):
        print(f"not ok 1 - {WDRIFTD} is not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="wdrift-t50-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    rng = np.random.default_rng(50)
    try:
        run_limit(ctx)
        cfg = dm.write_config()
        r = subprocess.run([WDRIFTD, "--check-config", "-c", cfg], capture_output=True, text=True)
        check(r.returncode == 0 and "ok" in r.stdout, "--check-config accepts the test config")
        bad = os.path.join(tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("memory:\n  budjet: 1G\n")
        r = subprocess.run([WDRIFTD, "--check-config", "-c", bad], capture_output=True, text=True)
        check(r.returncode == 2 and "bad.yaml:2:3" in r.stderr and "memory.budget" in r.stderr,
              f"a bad key: exit 2 with file:line:col and a suggestion ({r.stderr.strip()})")
        # compute.backend cuda on a device this machine lacks (every machine
        # has fewer than 1000): start-up fails, naming the file, both keys
        # and the engine's reason, and the daemon does not come up
        nogpu = os.path.join(tmp, "nogpu.yaml")
        os.makedirs(os.path.join(tmp, "nogpu", "run"), exist_ok=True)
        with open(nogpu, "w") as f:
            f.write(CONFIG.format(d=os.path.join(tmp, "nogpu"), extra="", level="info")
                    .replace("backend: cpu", "backend: cuda\n  device: 999"))
        try:
            r = subprocess.run([WDRIFTD, "-c", nogpu], capture_output=True, text=True, timeout=20)
            ok = (r.returncode == 1 and "nogpu.yaml" in r.stderr and "compute.backend cuda" in r.stderr
                  and "compute.device 999" in r.stderr and "cuda asked for, but" in r.stderr)
        except subprocess.TimeoutExpired as e:
            ok, r = False, e
        check(ok, f"compute.backend cuda with no such device: exit 1, the file, the keys and why "
              f"({getattr(r, 'stderr', '')})")

        ready = dm.start()
        check(ready is not None and "READY=1" in ready, "READY=1 after start-up")
        for _ in range(40):     # the line follows READY=1
            m = re.search(r"ready: wdriftd \S+, libzmq (\d+)\.(\d+)\.(\d+)", dm.log_text())
            if m:
                break
            time.sleep(0.05)
        check(m and tuple(map(int, m.groups())) >= (4, 3, 3),
              f"the ready line names libzmq, at least 4.3.3, the floor it checks ({m and m.group(0)})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["ok"] and st["engine"].startswith("cpu") and st["memory"]["budget"] == 256 << 20,
              "status answers: engine, memory budget")

        pub = Publisher(ctx, tmp, "base")
        w = pub.hello()
        check(w and w["type"] == "welcome" and w["window"] > 0 and w["durable_steps"] == [],
              f"hello gets a welcome with a window ({w})")
        sent = snapshot(pub, 100, rng)
        ack = pub.commit(100, 3)
        check(ack and ack["type"] == "ack" and ack["step"] == 100 and ack["tensors"] == 3
              and not ack["duplicate"], f"commit acked once durable ({ack})")
        spool = os.path.join(tmp, "var", "spool", "base", "100.h5")
        try:
            with h5py.File(spool, "r") as f:
                same = (np.array_equal(f["layers.0.w"][()], sent["layers.0.w"])
                        and np.array_equal(f["emb"][()], sent["emb"])
                        and f["emb"].attrs["dtype"] in ("bfloat16", b"bfloat16")
                        and np.array_equal(f["layers.1/w2"][()], sent["layers.1/w2"]))
        except (OSError, KeyError) as e:
            same = False
            print(f"# spool file: {e}")
        check(same, "the spool file holds what was sent: shards assembled, bf16 tagged, shape kept")
        r = subprocess.run([os.path.join(os.path.dirname(WDRIFTD), "wdrift"), "compare", spool, spool,
                            "--json"], capture_output=True, text=True)
        check(r.returncode == 0 and json.loads(r.stdout)["summary"]["w1_max"] == 0.0,
              "the spool file is a checkpoint wdrift compare reads")

        a = sent["layers.0.w"]      # the same content again (other content is a conflict: t66)
        pub.tensor(100, "layers.0.w", a[:2000], "f32", offset=0, total=5000)
        pub.tensor(100, "layers.0.w", a[2000:], "f32", offset=2000, total=5000, frame=4096)
        pub.tensor(100, "emb", sent["emb"], "bf16")
        pub.tensor(100, "layers.1/w2", sent["layers.1/w2"].ravel(), "f32", shape=[40, 30])
        ack = pub.commit(100, 3)
        check(ack and ack["type"] == "ack" and ack["duplicate"], "re-sending a durable snapshot: acked as duplicate")

        inc = Publisher(ctx, tmp, "fa")
        inc.tensor(7, "w", np.ones(10, np.float32)[:4], "f32", offset=0, total=10)
        e = inc.commit(7, 1)
        check(e and e["code"] == "incomplete" and "4 of 10" in e["reason"],
              f"an incomplete commit names what is missing ({e and e['reason']})")

        # Malformed messages: each gets its error, the daemon goes on.
        bad_cases = [
            ("not JSON", [b"{nope"], "bad_frame", ""),
            ("wrong version", [b'{"v":2,"type":"ping"}'], "bad_version", "v"),
            ("bad dtype", None, "bad_field", "dtype"),
            ("checksum mismatch", None, "bad_checksum", "crc32"),
            ("short payload", None, "bad_frames", "frames"),
            ("oversized", None, "too_large", "count"),
            ("payload on a commit", [b'{"v":1,"type":"commit","run":"x","step":1,"tensors":1}', b"xx"],
             "bad_frames", "frames"),
            ("overlapping shard", None, "conflict", "offset"),
            # 1 to limits.max_name (512) bytes, but a run names a directory: at most 255
            ("a run name too long for a directory",
             [json.dumps({"v": 1, "type": "hello", "run": "r" * 300}).encode()], "bad_field", "run"),
            # total x 8 bytes wraps 64 bits to 8: the reservation must not wrap with it
            ("a total whose bytes overflow", None, "too_large", "total"),
        ]
        p2 = Publisher(ctx, tmp, "lowprec")
        x = np.arange(8, dtype=np.float32)
        for what, frames, code, field in bad_cases:
            if frames:
                p2.send_raw(frames)
            elif what == "bad dtype":
                p2.tensor(1, "w", x, "f8")
            elif what == "checksum mismatch":
                p2.tensor(1, "w", x, "f32", crc32=12345)
            elif what == "short payload":
                h = {"v": 1, "type": "tensor", "run": "lowprec", "step": 1, "name": "w", "dtype": "f32",
                     "shape": [8], "offset": 0, "count": 8, "total": 8, "crc32": zlib.crc32(x.tobytes()[:16])}
                p2.send_raw([json.dumps(h).encode(), x.tobytes()[:16]])
            elif what == "oversized":
                h = {"v": 1, "type": "tensor", "run": "lowprec", "step": 1, "name": "big", "dtype": "f64",
                     "shape": [1 << 28], "offset": 0, "count": 1 << 28, "total": 1 << 28, "crc32": 0}
                p2.send_raw([json.dumps(h).encode(), b"\0" * 8])
            elif what == "a total whose bytes overflow":
                total = (1 << 61) + 1
                h = {"v": 1, "type": "tensor", "run": "lowprec", "step": 3, "name": "wrap", "dtype": "f64",
                     "shape": [total], "offset": 1 << 40, "count": 1, "total": total,
                     "crc32": zlib.crc32(b"\0" * 8)}
                p2.send_raw([json.dumps(h).encode(), b"\0" * 8])
            elif what == "overlapping shard":
                p2.tensor(2, "o", x[:4], "f32", offset=0, total=8)
                p2.tensor(2, "o", x[:4], "f32", offset=2, total=8)
            e = p2.recv()
            check(e and e["type"] == "error" and e["code"] == code and e["field"] == field,
                  f"{what}: error {code}/{field} ({e})")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        check(st and st["errors"]["bad_field"] >= 1 and st["errors"]["bad_checksum"] == 1,
              "errors are counted by code in status, and the daemon still answers")
        check(dm.proc.poll() is None, f"the daemon survived every malformed message ({dm.proc.poll()})")
        # the operator hears of a publisher's bad messages too, naming it (they were debug only)
        log = dm.log_text()
        check("ingest: refused run 'lowprec' step 1 tensor 'w': bad_field dtype:" in log
              and "ingest: refused run 'lowprec' step 1 tensor 'w': bad_checksum crc32:" in log
              and "ingest: refused a message: bad_frame: header is not JSON" in log,
              "a bad message is logged as a warning, naming the run, step and tensor", log[-2000:])
        # a name or run with a newline cannot forge a log line: escaped (they reach the
        # log before the name rule refuses them)
        p2.tensor(1, "w\n<0>wdriftd: emerg: FORGED", x, "f8")
        p2.recv()
        log = dm.log_text()
        check("FORGED" in log and not any(line.startswith("<0>") or line.startswith("wdriftd: emerg")
                                          for line in log.splitlines())
              and "tensor 'w\\n<0>wdriftd: emerg: FORGED'" in log,
              "a newline in a refused message's name is escaped in the log", log[-800:])
        for _ in range(11):
            p2.tensor(1, "w", x, "f8")
            p2.recv()
        n = dm.log_text().count(": bad_field ")
        check(n == 10, f"... ten of a code a minute, the rest counted for a line later ({n} lines)")
        sn = st["snapshots"] if st else {}
        check(sn.get("received") == 3 and sn.get("durable") == 1 and sn.get("duplicates", 0) >= 1
              and sn.get("pending") == 2 and sn.get("dropped") == 0 and st["queues"]["spool"] == 0,
              f"status counts snapshots received, durable, pending, dropped; queue depths ({sn})")
        r = subprocess.run([os.path.join(os.environ.get("BUILD", "build"), "wdrift"), "status", "-c",
                            os.path.join(tmp, "wdrift.yaml")], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "snapshots  1 durable in all (the write-ahead log's); since this start: 3 "
              "received," in r.stdout and "; 2 pending now" in r.stdout,
              "status says which counts are of the whole log and which since this start (a trial read "
              "'10 received, 102 durable' as 92 from nothing)", r.stdout)
        # Shards that never touch: each is a separate piece the daemon must
        # remember, outside the budget, so their number is capped.
        pieces = Publisher(ctx, tmp, "pieces")
        one = np.ones(1, np.float32).tobytes()
        n = 65537
        h = {"v": 1, "type": "tensor", "run": "pieces", "step": 1, "name": "w", "dtype": "f32",
             "shape": [2 * n], "offset": 0, "count": 1, "total": 2 * n, "crc32": zlib.crc32(one)}
        t0 = time.time()
        for i in range(n):
            h["offset"] = 2 * i
            pieces.send_raw([json.dumps(h).encode(), one])
        e = pieces.recv()
        check(e and e["code"] == "too_many" and e["field"] == "offset" and "pieces" in e["reason"],
              f"a tensor in more than 65536 separate pieces is refused ({e}, {time.time() - t0:.1f} s)")
        h["offset"] = 1                   # adjacent to two pieces: joins them, still taken
        pieces.send_raw([json.dumps(h).encode(), one])
        h["offset"] = 2 * n - 1           # so is one that extends a piece
        pieces.send_raw([json.dumps(h).encode(), one])
        h["offset"] = 2                   # other bytes over a piece (the same bytes: a duplicate)
        two = np.full(1, 2, np.float32).tobytes()
        h["crc32"] = zlib.crc32(two)
        pieces.send_raw([json.dumps(h).encode(), two])
        e = pieces.recv()
        check(e and e["code"] == "conflict", f"an overlap among coalesced pieces is still found ({e})")
        bad_req = control(ctx, tmp, {"v": 1, "cmd": "nope"})
        check(bad_req and not bad_req["ok"] and "unknown command 'nope'" in bad_req["error"],
              "an unknown control command gets a clear error")

        # SIGHUP: a good config is swapped in; a bad one is refused, the old one stays.
        dm.write_config(extra="  - name: seed\n    baseline: base\n    candidates: [seed2]\n")
        dm.proc.send_signal(signal.SIGHUP)
        rl = dm.wait_notify("RELOADING=1", 5)
        check(rl is not None and "MONOTONIC_USEC=" in rl, "SIGHUP: RELOADING=1 with MONOTONIC_USEC")
        check(dm.wait_notify("READY=1", 5) is not None, "then READY=1")
        sts = control(ctx, tmp, {"v": 1, "cmd": "studies"})
        check(sts and [s["name"] for s in sts["studies"]] == ["fa", "seed"], "the new study is in")
        with open(os.path.join(tmp, "wdrift.yaml"), "a") as f:
            f.write("alerts: 7\n")
        dm.proc.send_signal(signal.SIGHUP)
        check(dm.wait_notify("RELOADING=1", 5) is not None and dm.wait_notify("READY=1", 5) is not None,
              "a bad config on reload: RELOADING=1 then READY=1 still")
        sts = control(ctx, tmp, {"v": 1, "cmd": "studies"})
        check(sts and [s["name"] for s in sts["studies"]] == ["fa", "seed"], "and the old config stays")
        check("reload refused" in dm.log_text() and "wdrift.yaml:" in dm.log_text(),
              "the refusal is logged with the file and line")
        dm.write_config(extra="  - name: seed\n    baseline: base\n    candidates: [seed2]\n")

        # kill -9 while more snapshots stream, then restart: every acked step is there.
        acked = {100}
        for step in (200, 300):
            snapshot(pub, step, rng)
            a = pub.commit(step, 3)
            if a and a.get("type") == "ack":
                acked.add(step)
        snapshot(pub, 400, rng)          # in flight, never committed
        dm.stop(signal.SIGKILL)
        check(dm.proc.returncode == -signal.SIGKILL, "kill -9")
        # what a crash can leave in the spool: a file renamed into place whose
        # WAL record never made it (never acked), and a write cut short
        base_dir = os.path.join(tmp, "var", "spool", "base")
        for leftover in ("999.h5", "998.h5.tmp"):
            with open(os.path.join(base_dir, leftover), "wb") as f:
                f.write(b"\0" * 4096)
        check(dm.start() is not None, "restart after kill -9: READY=1")
        left = sorted(os.listdir(base_dir))
        check("999.h5" not in left and "998.h5.tmp" not in left,
              f"a spool file never acked, and a torn .tmp, are removed at start-up ({left})")
        pub2 = Publisher(ctx, tmp, "base")
        w = pub2.hello()
        check(w and set(w["durable_steps"]) == acked, f"every acked step is durable after the crash ({w})")
        files = sorted(os.listdir(os.path.join(tmp, "var", "spool", "base")))
        check(all(f"{s}.h5" in files for s in acked), f"their spool files are there ({files})")
        snapshot(pub2, 400, rng)
        a = pub2.commit(400, 3)
        check(a and a["type"] == "ack" and not a["duplicate"], "the unacked snapshot is simply re-sent")

        # Under systemd's journal (JOURNAL_STREAM names stderr): <N> priority prefixes.
        dm.stop()
        logp = os.path.join(tmp, "daemon.log")
        st = os.stat(logp)
        check(dm.start(env_extra={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}) is not None,
              "restart with JOURNAL_STREAM naming its stderr")
        for _ in range(40):   # READY=1 goes out just before the "ready:" line
            tail = dm.log_text()
            if "<5>ready: wdriftd" in tail:
                break
            time.sleep(0.05)
        ok = "<5>ready: wdriftd" in tail and "wdriftd: notice:" not in tail.split("<5>ready")[-1]
        check(ok, "log lines carry <5> (notice) prefixes for the journal")
        if not ok:
            print("# " + tail[-800:].replace("\n", "\n# "))

        # SIGTERM: STOPPING=1, exit 0 well within 10 s.
        t0 = time.time()
        dm.proc.send_signal(signal.SIGTERM)
        stopping = dm.wait_notify("STOPPING=1", 5)
        rc = dm.stop(timeout=10)
        check(stopping is not None and rc == 0 and time.time() - t0 < 10, f"SIGTERM: STOPPING=1, exit {rc}")
    finally:
        teardown(dm, tmp, ctx)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
