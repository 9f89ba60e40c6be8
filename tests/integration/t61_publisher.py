#!/usr/bin/env python3
"""t61_publisher.py: the Python package (over libwdrift's publisher) and a live daemon.

Values round-trip exactly, bf16 included; a sharded tensor is assembled;
with no daemon, whole snapshots are dropped by policy and counted; snapshots
published while the daemon is down are sent again once it is up, and so
are those a daemon killed before acking them (one stall warning, then
"acks again": it had acked before); attach()
publishes every N steps; close() returns within its timeout.
"""
import ctypes
import os
import signal
import sys
import tempfile
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
os.environ.setdefault("WDRIFT_LIB", os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "libwdrift.so")))
import harness  # noqa: E402
import wdrift  # noqa: E402
from harness import Daemon, bf16, check  # noqa: E402


def spool(tmp, run, step):
    return os.path.join(tmp, "var", "spool", run, f"{step}.h5")


def incomplete_is_resent(tmp):
    """A daemon under a full budget drops a half-received snapshot and answers its
    commit with `incomplete` (protocol.md, flow control): the library must send
    it again, not give it up. A scripted peer on a real socket plays the daemon."""
    import json
    import zmq
    ep = f"ipc://{tmp}/peer.sock"
    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    r.setsockopt(zmq.RCVTIMEO, 10000)
    r.setsockopt(zmq.LINGER, 0)
    r.bind(ep)
    p = wdrift.Publisher(ep, "fa", ack_timeout=2.0)
    try:
        p.publish(5, {"w": np.ones(10, np.float32)})
        commits = 0
        while commits < 2:
            fr = r.recv_multipart()
            h = json.loads(fr[1])
            if h["type"] == "hello":
                rep = {"v": 1, "type": "welcome", "run": "fa", "window": 1 << 30, "max_frame": 1 << 26,
                       "max_message": 1 << 30, "durable_steps": []}
            elif h["type"] == "commit":
                commits += 1
                rep = ({"v": 1, "type": "error", "code": "incomplete", "field": "tensors",
                        "reason": "dropped under a full budget", "run": "fa", "step": 5} if commits == 1 else
                       {"v": 1, "type": "ack", "run": "fa", "step": 5, "tensors": 1, "bytes": 40,
                        "duplicate": False})
            else:
                continue
            r.send_multipart([fr[0], json.dumps(rep).encode()])
        ok = p.flush(5)
        st = p.stats()
        check(ok and st["acked"] == 1 and st["dropped"] == 0 and st["resent"] == 1,
              f"a commit answered 'incomplete' is sent again, then acked ({st})")
    except zmq.Again:
        check(False, "a commit answered 'incomplete' is sent again (it never came back)")
    finally:
        p.close(0.5)
        r.close()
        ctx.term()


class Stderr:
    """What this process writes to its fd 2 meanwhile (the library's warnings): .text;
    passed on to the real stderr too."""
    def __enter__(self):
        sys.stderr.flush()
        self.f = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.f.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.f.seek(0)
        self.text = self.f.read().decode(errors="replace")
        self.f.close()
        sys.stderr.write(self.text)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t61-")
    dm = Daemon(tmp)
    ep = f"ipc://{tmp}/run/ingest.sock"
    try:
        dm.write_config()
        # 1. with no daemon: drops by policy, counted
        p = wdrift.Publisher(ep, "lowprec", queue_bytes=100_000, ack_timeout=0.3)
        for s in range(5):
            p.publish(s, {"w": np.ones(10_000, np.float32)})
        st = p.stats()
        check(st["committed"] == 5 and st["dropped"] == 3 and st["queued"] == 2 and st["acked"] == 0,
              f"no daemon, drop_oldest: 3 of 5 snapshots dropped and counted ({st})")
        t0 = time.time()
        p.close(0.5)
        check(time.time() - t0 < 3, f"close returns within its timeout ({time.time() - t0:.1f} s)")
        pn = wdrift.Publisher(ep, "lowprec", queue_bytes=100_000, policy="drop_newest", ack_timeout=0.3)
        for s in range(5):
            pn.publish(s, {"w": np.ones(10_000, np.float32)})
        st = pn.stats()
        check(st["dropped"] == 3 and st["queued"] == 2, f"drop_newest keeps the first two ({st})")
        pn.close(0.2)
        # 2. published while the daemon is down, sent once it is up
        early = wdrift.Publisher(ep, "fa", ack_timeout=0.5)
        for s in (1, 2):
            early.publish(s, {"w": np.full(1000, s, np.float32)})
        time.sleep(1.2)
        check(dm.start() is not None, "daemon up after the publisher started")
        ok = early.flush(15)
        st = early.stats()
        check(ok and st["acked"] == 2 and st["resent"] >= 1 and st["dropped"] == 0,
              f"unacknowledged snapshots are sent again and acked ({st})")
        check(os.path.exists(spool(tmp, "fa", 1)) and os.path.exists(spool(tmp, "fa", 2)), "both are in the spool")
        early.close()
        # 3. exact round trip, every dtype, bf16 as its bits
        rng = np.random.default_rng(61)
        sent = {"f32": rng.standard_normal((30, 20)).astype(np.float32),
                "f64": rng.standard_normal(77),
                "f16": rng.standard_normal(500).astype(np.float16),
                "emb": wdrift.BF16(bf16(rng.standard_normal(3000).astype(np.float32)))}
        sent["f32"][3, 4] = np.nan
        with wdrift.Publisher(ep, "base") as pub:
            pub.publish(100, sent)
            check(pub.flush(10) and pub.stats()["acked"] == 1, "round trip: acked")
        with h5py.File(spool(tmp, "base", 100), "r") as f:
            same = (np.array_equal(f["f32"][()], sent["f32"], equal_nan=True) and f["f32"].shape == (30, 20)
                    and np.array_equal(f["f64"][()], sent["f64"])
                    and np.array_equal(f["f16"][()].view(np.uint16), sent["f16"].view(np.uint16))
                    and np.array_equal(f["emb"][()], sent["emb"].codes))
        check(same, "values round-trip exactly: f32 (NaN, 2-D), f64, f16, bf16 bits")
        # 4. a tensor sent as two shards through the C API
        lib = wdrift.publisher._get_lib()
        h = ctypes.c_void_p()
        lib.wd_publisher_open(ep.encode(), b"seed2", None, ctypes.byref(h))
        v = rng.standard_normal(1000).astype(np.float32)
        lib.wd_publisher_begin(h, 5)
        for off in (0, 600):
            part = np.ascontiguousarray(v[off:off + 600] if off == 0 else v[600:])
            lib.wd_publisher_tensor(h, b"sharded", 0, part.ctypes.data, None, 0, off, part.size, 1000)
        lib.wd_publisher_commit(h)
        lib.wd_publisher_flush(h, 10000)
        lib.wd_publisher_close(ctypes.byref(h), 1000)
        try:
            with h5py.File(spool(tmp, "seed2", 5), "r") as f:
                ok = np.array_equal(f["sharded"][()], v)
        except OSError as e:
            ok = False
            print(f"# {e}")
        check(ok, "two shards assembled into one tensor (the commit counts it once)")
        # 5. attach: every N optimizer steps
        class Model:
            def state_dict(self):
                return {"w": np.arange(4, dtype=np.float32)}
        with wdrift.Publisher(ep, "attached") as pub:
            hook = wdrift.attach(Model(), pub, every=3)
            for _ in range(7):
                hook.step()
            pub.flush(10)
            check(pub.stats()["acked"] == 3, "attach(every=3) over 7 steps publishes steps 0, 3, 6")
        check(sorted(os.listdir(os.path.join(tmp, "var", "spool", "attached"))) == ["0.h5", "3.h5", "6.h5"],
              "their spool files")
        try:
            wdrift.Publisher(ep, "bad name")
            check(False, "a bad run name is refused")
        except wdrift.WdriftError:
            check(True, "a bad run name is refused")
        # 6. the daemon dies holding snapshots it never acked: resent to the next one
        said = Stderr()
        with said:
            restarted(tmp, dm, ep)
        # it had acked step 1 before the stall: its ack of step 2 is said as "acks again"
        check(said.text.count("no ack from") == 1 and said.text.count("acks again after") == 1
              and "acks its first snapshot" not in said.text,
              "restart: one stall warning, then 'acks again' from the new daemon", said.text)
        check(dm.stop() == 0, "daemon stopped")
        incomplete_is_resent(tmp)
    finally:
        harness.teardown(dm, tmp)
    return harness.summary()


def restarted(tmp, dm, ep):
    """The daemon dies holding snapshots it never acked: resent to the next one."""
    rs = wdrift.Publisher(ep, "restart", ack_timeout=0.5, stall_warning=1.0)
    rs.publish(1, {"w": np.full(1000, 1, np.float32)})
    check(rs.flush(10) and rs.stats()["acked"] == 1, "restart: step 1 acked")
    dm.proc.send_signal(signal.SIGSTOP)	# frozen: receives nothing, acks nothing
    for s in (2, 3):
        rs.publish(s, {"w": np.full(1000, s, np.float32)})
    time.sleep(1.5)	# past stall_warning
    st = rs.stats()
    check(st["acked"] == 1 and st["queued"] + st.get("inflight", 0) >= 1,
          f"restart: steps 2 and 3 wait for an ack the frozen daemon never sends ({st})")
    dm.proc.kill()
    dm.proc.wait()
    check(dm.start() is not None, "restart: a new daemon on the same storage")
    ok = rs.flush(15)
    st = rs.stats()
    # the resend that reaches the new daemon may be the one counted while it
    # was frozen (its fresh socket reconnects to the new one): acks count
    check(ok and st["acked"] == 3 and st["dropped"] == 0 and st["resent"] >= 1,
          f"restart: steps 2 and 3 resent and acked by the new daemon ({st})")
    got = {}
    for s in (1, 2, 3):
        if os.path.exists(spool(tmp, "restart", s)):
            with h5py.File(spool(tmp, "restart", s), "r") as f:
                got[s] = float(f["w"][0])
    check(got == {1: 1.0, 2: 2.0, 3: 3.0}, f"restart: steps 1-3 in the spool with their values ({got})")
    rs.close()


if __name__ == "__main__":
    sys.exit(main())
