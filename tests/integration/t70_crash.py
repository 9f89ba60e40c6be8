#!/usr/bin/env python3
"""t70_crash.py: kill -9 at any moment loses nothing acked (issue 6).

One storage dir, 100 kills. In each round three publishers (baseline
'base', candidate 'fa', proxy 'lowprec' of study 'fa') stream snapshots
concurrently, each re-sending its step until it is acked, as a real
publisher does; the daemon is killed with SIGKILL at a random moment, aimed
in turn at ingest (a random delay), at compute (within 3 ms of the ack that
makes a comparison due) and at HDF5 writes (the moment a spool STEP.h5.tmp
appears, or when the comparison's drift log write is due). The phase a kill
hit is read back from what it left: a spool .tmp (a spool HDF5 write), a
write-ahead log (WAL) with more result rows than the drift log (a drift log
write), WAL snapshots whose comparison has no result yet (compute), else
ingest. After each restart on the same storage:

- every acked (run, step) has its WAL record and its spool file, which
  opens with h5py and holds exactly what was sent (lost = 0);
- no .tmp and no spool file without a WAL record is left;
- once the daemon has caught up, the drift log, read with swmr=True while
  the daemon runs, has the current rows of every step all three runs have
  acked, with the proxy's ratio, and they equal `wdrift compare` on the
  spooled files (one step per round, every step at the end);
- at the end, after SIGTERM, every spool file and the drift log open with
  h5py normally (no h5clear).

Then the WAL's two kinds of damage, at the daemon level (tests/unit/test_wal.c
covers the codec: every cut of a last record, trailing zeros, damage in a
non-last segment, the .corrupt file): a torn tail (a result record cut in
half, and half a snapshot record after a spool file renamed into place) is
truncated with a warning naming the segment and offset, and what it held is
computed again or was never acked; damage followed by good records stops
start-up, exit 1, with the segment and offset in the message, and --force
starts it; a drift log closed cleanly before the damage, holding more rows
than the WAL once --force has moved records aside, is rebuilt.

Then the copies of drift logs moved aside: each has a name of its own (two
in one second used to keep one, the second overwriting the first), and the
newest 3 of a study are kept, each one removed named in the log.

Figures go out as '# ' lines. Every daemon is stopped by pid and the temp
dirs removed, also on failure.
"""
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import h5py
import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, bf16, check, control  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
ROUNDS = int(os.environ.get("T70_ROUNDS", "100"))
RUNS = ("base", "fa", "lowprec")
N_TENSORS = 4
WAL_MAGIC = 0x4C574457


# --- what the publishers send: a function of (run, step) only ---

def tensors(run, step):
    """Four tensors, ~1.6 MB: large enough that spool writes and comparisons
    take milliseconds, so kills land inside them."""
    r = np.random.default_rng(step)
    base = {"layers.0.w": r.standard_normal(300_000).astype(np.float32) * 0.02,
            "emb": r.standard_normal(60_000).astype(np.float32) * 0.02,
            "layers.1/w2": r.standard_normal((200, 150)).astype(np.float32) * 0.02,
            "norm": r.standard_normal(512).astype(np.float32)}
    if run == "base":
        return base
    noise = {"fa": 0.0003, "lowprec": 0.002}[run]
    n = np.random.default_rng([step, len(run)])
    return {k: v + (n.standard_normal(v.shape) * noise).astype(np.float32) for k, v in base.items()}


def as_sent(run, name, v):
    """(array, dtype) as published: emb in bf16; lowprec entirely in fp16."""
    if run == "lowprec":
        return v.astype(np.float16).ravel(), "f16"
    if name == "emb":
        return bf16(v).ravel(), "bf16"
    return v.ravel(), "f32"


def send_snapshot(pub, step):
    for name, v in tensors(pub.run, step).items():
        flat, dt = as_sent(pub.run, name, v)
        if name == "layers.1/w2":       # in two shards
            half = flat.size // 2
            pub.tensor(step, name, flat[:half], dt, offset=0, total=flat.size, shape=list(v.shape))
            pub.tensor(step, name, flat[half:], dt, offset=half, total=flat.size, shape=list(v.shape))
        else:
            pub.tensor(step, name, flat, dt, shape=list(v.shape))
    pub.send_raw([json.dumps({"v": 1, "type": "commit", "run": pub.run, "step": step,
                              "tensors": N_TENSORS}).encode()])


# --- the write-ahead log, read as docs/storage.md defines it ---

def read_wal(waldir):
    """[(segment name, offset, length, record)] of the good records, in order."""
    out = []
    if not os.path.isdir(waldir):
        return out
    for name in sorted(f for f in os.listdir(waldir) if re.fullmatch(r"\d{6}\.log", f)):
        with open(os.path.join(waldir, name), "rb") as f:
            b = f.read()
        off = 0
        while off + 12 <= len(b):
            magic, n, crc = struct.unpack_from("<III", b, off)
            body = b[off + 12:off + 12 + n]
            if magic != WAL_MAGIC or len(body) != n or zlib.crc32(body) != crc:
                break
            out.append((name, off, n, json.loads(body)))
            off += 12 + n
    return out


def wal_state(recs):
    """Durable (run, step)s, result rows, and comparisons still owed: steps
    where the baseline and a candidate or proxy are durable and no result
    record of that step has the run's rows yet (a step's result record is
    written again when another of its runs arrives, so records are not
    counted against snapshots one for one)."""
    durable, rows, covered = set(), 0, set()
    for _, _, _, r in recs:
        if r["t"] == "snapshot":
            durable.add((r["run"], r["step"]))
        elif r["t"] == "result":
            rows += len(r["rows"])
            covered |= {(row[3], r["step"]) for row in r["rows"]}
    owed = sum(1 for run, s in durable
               if run != "base" and ("base", s) in durable and (run, s) not in covered)
    return durable, rows, owed


def drift_rows(path, swmr=True):
    """The drift log's rows and name tables, or None when it does not open."""
    try:
        with h5py.File(path, "r", swmr=swmr) as f:
            return (f["rows"][:], list(f["tensors"][:].astype(str)), list(f["runs"][:].astype(str)),
                    list(f["proxies"][:].astype(str)))
    except (OSError, KeyError):
        return None


def latest_rows(table):
    """{(step, tensor, run): row}: the current row of each, kind 0 only."""
    rows, names, runs, _ = table
    out = {}
    for r in rows[rows["kind"] == 0]:
        out[(int(r["step"]), names[r["tensor"]], runs[r["run"]])] = r
    return out


def close(a, b, rel=1e-12):
    a = None if isinstance(a, float) and a != a else a
    b = None if isinstance(b, float) and b != b else b
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= rel * abs(b) + 1e-300


def same_as_compare(spool, step, latest):
    """The drift log's current rows of step equal `wdrift compare` on the
    spool files; returns '' or what differs."""
    r = subprocess.run([WDRIFT, "compare", f"{spool}/base/{step}.h5", f"{spool}/fa/{step}.h5",
                        "--proxy", f"fp16={spool}/lowprec/{step}.h5", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return f"wdrift compare: {r.stderr.strip()}"
    layers = json.loads(r.stdout)["layers"]
    if len(layers) != N_TENSORS:
        return f"compare found {len(layers)} tensors"
    for x in layers:
        row = latest.get((step, x["name"], "fa"))
        prow = latest.get((step, x["name"], "lowprec"))
        if row is None or prow is None:
            return f"step {step} {x['name']}: no row"
        if not (close(float(row["w1"]), x["w1"]) and close(float(row["max_abs_diff"]), x["max_abs_diff"])
                and close(float(row["rel_l2"]), x["rel_l2"]) and int(row["numel"]) == x["numel"]
                and close(float(row["ratio"][0]), x["proxies"]["fp16"]["ratio"])
                and close(float(prow["w1"]), x["proxies"]["fp16"]["w1"])):
            return f"step {step} {x['name']}: log w1 {row['w1']} ratio {row['ratio']} vs {x}"
    return ""


def spool_holds_sent(spool, run, step):
    """The spool file opens (no h5clear) and holds exactly what was sent."""
    try:
        with h5py.File(f"{spool}/{run}/{step}.h5", "r") as f:
            for name, v in tensors(run, step).items():
                flat, _ = as_sent(run, name, v)
                got = f[name][()]
                if got.shape != v.shape or not np.array_equal(got.ravel().view(flat.dtype), flat):
                    return False
        return True
    except (OSError, KeyError, ValueError):
        return False


# --- the publishers ---

GONE = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED


def close_after_disconnect(s, mon, timeout=5.0):
    """Closes a publisher's socket once its connection to the killed daemon
    has dropped (the monitor's DISCONNECTED event, or CONNECT_RETRIED for
    one that had not connected yet), not while it drops.
    libzmq 4.3.4 aborts the process ("Resource temporarily unavailable
    (src/session_base.cpp:260)") when a connection breaks while a socket
    closed with linger 0 is being torn down and a multipart message was half
    written to the wire: the session's clean-up then reads the message's
    other frames from a pipe that no longer gives them (libzmq issue 3442).
    Closing right after the SIGKILL, as this test once did, hit that window
    about once in 100 rounds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if mon.poll(50):
            if recv_monitor_message(mon)["event"] & GONE:
                break
    s.disable_monitor()
    mon.close(linger=0)
    s.close(linger=0)


class Round:
    """Three publisher threads, each sending its run's next step until it is
    acked, then the next, up to `last`; stops when told or on a dead daemon."""

    def __init__(self, ctx, d, nxt, last, acked):
        self.ctx, self.d, self.nxt, self.last, self.acked = ctx, d, nxt, last, acked
        self.stop = threading.Event()
        self.errors = []
        self.in_flight = 0      # runs whose snapshot was (being) sent, not acked, at the kill
        self.duplicates = 0     # acks of a re-sent snapshot the killed daemon had made durable
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.work, args=(run,)) for run in RUNS]
        self.sockets = []       # (socket, its monitor): closed by join()

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        """After the kill: stops the threads, then closes their sockets once
        each has seen its connection drop (close_after_disconnect)."""
        self.stop.set()
        for t in self.threads:
            t.join()
        for s, mon in self.sockets:
            close_after_disconnect(s, mon)

    def work(self, run):
        pub = Publisher(self.ctx, self.d, run)
        pub.s.setsockopt(zmq.SNDTIMEO, 200)
        with self.lock:
            self.sockets.append((pub.s, pub.s.get_monitor_socket(GONE)))
        # the socket stays open: join() closes it, after the kill
        while not self.stop.is_set() and self.nxt[run] <= self.last[run]:
            step = self.nxt[run]
            try:
                send_snapshot(pub, step)
            except zmq.Again:
                with self.lock:
                    self.in_flight += 1
                return
            reply = None
            while reply is None and not self.stop.is_set():
                if pub.s.poll(20):
                    m = json.loads(pub.s.recv())
                    if m.get("step") == step and m.get("type") in ("ack", "error"):
                        reply = m
            if reply is None:
                with self.lock:
                    self.in_flight += 1
                return
            if reply["type"] != "ack":
                with self.lock:
                    self.errors.append(reply)
                return
            with self.lock:
                self.acked.add((run, step))
                self.nxt[run] = step + 1
                self.duplicates += bool(reply.get("duplicate"))
            time.sleep(random.uniform(0, 0.02))


class LogTail:
    def __init__(self, path):
        self.path = path
        self.off = os.path.getsize(path) if os.path.exists(path) else 0

    def new(self):
        with open(self.path, "rb") as f:
            f.seek(self.off)
            b = f.read()
        self.off += len(b)
        return b.decode(errors="replace")


def spool_tmp(spool):
    for run in RUNS:
        try:
            if any(f.endswith(".tmp") for f in os.listdir(os.path.join(spool, run))):
                return True
        except FileNotFoundError:
            pass
    return False


def last_segment(waldir):
    segs = sorted(f for f in os.listdir(waldir) if re.fullmatch(r"\d{6}\.log", f))
    return os.path.join(waldir, segs[-1])


def aim(dm, mode, tail, spool, waldir, durable):
    """Waits for the moment mode aims at (at most ~1.5 s), then SIGKILL."""
    end = time.time() + 1.5
    if mode == "random":
        time.sleep(random.uniform(0.0, 0.4))
    elif mode == "compute":
        # the ack that makes a comparison due (the baseline and a candidate
        # or proxy durable at one step): compute starts right after its
        # "durable" line and takes a few ms on a multi-threaded engine, so
        # the kill follows within 3 ms (a fixed 0-20 ms after any ack hit
        # compute 2 times in 25, and 0 in 40 under CI's load)
        have, text = set(durable), ""
        while time.time() < end:
            text += tail.new()
            lines = text.split("\n")
            text = lines.pop()
            due = False
            for line in lines:
                m = re.search(r"info: durable: run '(\w+)' step (\d+)", line)
                if not m:
                    continue
                run, s = m.group(1), int(m.group(2))
                have.add((run, s))
                if ("base", s) in have and (run != "base" or ("fa", s) in have
                                            or ("lowprec", s) in have):
                    due = True
            if due:
                time.sleep(random.uniform(0, 0.003))
                break
            time.sleep(0.0005)
    elif mode == "drift":
        # a result record reaches the WAL: its fsync and the drift log write follow
        seg = last_segment(waldir)
        size = os.path.getsize(seg)
        while time.time() < end:
            now = os.path.getsize(seg)
            if now > size:
                with open(seg, "rb") as f:
                    f.seek(size)
                    if b'"t":"result"' in f.read():
                        time.sleep(random.uniform(0, 0.003))
                        break
                size = now
    elif mode == "spool":
        while time.time() < end and not spool_tmp(spool):
            pass
    dm.proc.send_signal(signal.SIGKILL)
    dm.proc.wait()


def wait_caught_up(ctx, d, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        st = control(ctx, d, {"v": 1, "cmd": "status"})
        if st and st["queues"]["compute"] == 0 and st["queues"]["spool"] == 0:
            return True
        time.sleep(0.02)
    return False


def crash_loop(ctx, figures):
    tmp = tempfile.mkdtemp(prefix="wdrift-t70-")
    dm = Daemon(tmp)
    var = os.path.join(tmp, "var")
    spool, waldir = os.path.join(var, "spool"), os.path.join(var, "wal")
    drift = os.path.join(var, "drift", "fa.h5")
    acked, nxt = set(), {run: 1 for run in RUNS}
    phases = {"ingest": 0, "compute": 0, "hdf5 spool write": 0, "hdf5 drift log write": 0}
    problems = {"restart": [], "lost": [], "leftover": [], "behind": [], "rows": [], "compare": [],
                "content": [], "errors": []}
    checked_steps = set()
    in_flight = duplicates = 0
    random.seed(70)
    t0 = time.time()
    try:
        dm.write_config(level="info")
        check(dm.start() is not None, "the daemon starts on an empty storage dir")
        modes = ["random", "compute", "spool", "drift"]
        # At the soak size, a phase no kill has hit after ROUNDS gets up to
        # 40 more rounds aimed at it: an aimed kill lands in its phase about
        # one time in three or more, so "the kills hit every phase" below
        # fails only when the daemon stops reaching that phase, not by chance.
        aimed_at = {"random": "ingest", "compute": "compute", "spool": "hdf5 spool write",
                    "drift": "hdf5 drift log write"}
        k, n_rounds = -1, 0
        while True:
            k += 1
            if k < ROUNDS:
                mode = modes[k % len(modes)]
            else:
                missing = [m for m in modes if not phases[aimed_at[m]]]
                if ROUNDS < 100 or not missing or k >= ROUNDS + 40:
                    break
                mode = missing[0]
            n_rounds = k + 1
            tail = LogTail(os.path.join(tmp, "daemon.log"))
            last = {run: nxt[run] + random.randint(1, 3) for run in RUNS}
            before = set(acked)
            rnd = Round(ctx, tmp, nxt, last, acked)
            rnd.start()
            aim(dm, mode, tail, spool, waldir, before)
            rnd.join()
            problems["errors"] += rnd.errors
            in_flight += rnd.in_flight
            duplicates += rnd.duplicates
            # what the kill interrupted, from what it left
            durable, wal_rows, owed = wal_state(read_wal(waldir))
            table = drift_rows(drift) if os.path.exists(drift) else None
            have = len(table[0]) if table else 0
            if os.path.exists(drift) and (table is None or have < wal_rows):
                phases["hdf5 drift log write"] += 1
            elif spool_tmp(spool):
                phases["hdf5 spool write"] += 1
            elif owed > 0:
                phases["compute"] += 1
            else:
                phases["ingest"] += 1
            # restart on the same storage
            if dm.start() is None:
                problems["restart"].append(f"round {k}: no READY: {dm.log_text()[-400:]}")
                break
            recs = read_wal(waldir)
            durable, _, _ = wal_state(recs)
            for run, s in sorted(acked - durable):
                problems["lost"].append(f"round {k}: {run} step {s}: acked, no WAL record")
            for run, s in sorted(acked):
                if not os.path.exists(f"{spool}/{run}/{s}.h5"):
                    problems["lost"].append(f"round {k}: {run} step {s}: acked, no spool file")
            for run in RUNS:
                for f in os.listdir(os.path.join(spool, run)) if os.path.isdir(os.path.join(spool, run)) else []:
                    m = re.fullmatch(r"(\d+)\.h5", f)
                    if not m or (run, int(m.group(1))) not in durable:
                        problems["leftover"].append(f"round {k}: spool/{run}/{f}")
            if not wait_caught_up(ctx, tmp):
                problems["behind"].append(f"round {k}")
                continue
            complete = sorted({s for _, s in acked if all((r, s) in acked for r in RUNS)})
            _, wal_rows, _ = wal_state(read_wal(waldir))
            if not wal_rows and not complete and not os.path.exists(drift):
                continue        # nothing compared yet: no drift log yet
            table = drift_rows(drift)
            if table is None:
                problems["rows"].append(f"round {k}: the drift log does not open with swmr=True")
                continue
            latest = latest_rows(table)
            for s in complete:
                for name in tensors("base", 0):
                    row, prow = latest.get((s, name, "fa")), latest.get((s, name, "lowprec"))
                    if row is None or prow is None or not np.isfinite(row["ratio"][0]):
                        problems["rows"].append(f"round {k}: step {s} {name}: no current row with "
                                                f"its ratio ({row})")
                        break
            new = [s for s in complete if s not in checked_steps]
            if new:
                s = random.choice(new)
                checked_steps.add(s)
                why = same_as_compare(spool, s, latest)
                if why:
                    problems["compare"].append(f"round {k}: {why}")
                for run in RUNS:
                    if not spool_holds_sent(spool, run, s):
                        problems["content"].append(f"round {k}: spool/{run}/{s}.h5")
        check(not problems["restart"], f"every restart after kill -9 reaches READY={n_rounds} rounds "
              f"{problems['restart'][:1]}")
        check(not problems["errors"], f"no publisher got an error, only acks {problems['errors'][:2]}")
        check(not problems["lost"], f"every acked snapshot has its WAL record and spool file after "
              f"each restart ({len(acked)} acked) {problems['lost'][:3]}")
        check(not problems["leftover"], f"no .tmp or never-acked spool file survives a restart "
              f"{problems['leftover'][:3]}")
        check(not problems["behind"], f"the restarted daemon catches up (compute queue empty) "
              f"{problems['behind'][:3]}")
        check(not problems["rows"], "after each restart the drift log (swmr=True, daemon running) has "
              f"the current rows of every step all three runs acked, with ratios {problems['rows'][:2]}")
        check(not problems["compare"] and len(checked_steps) > 0,
              f"one step per round ({len(checked_steps)} steps): the drift log equals wdrift compare on "
              f"the spool files {problems['compare'][:2]}")
        check(not problems["content"], f"those steps' spool files hold exactly what was sent "
              f"{problems['content'][:2]}")
        # About two in three kills aimed at the drift log write land there:
        # with WDRIFT_SOAK's 100 rounds (25 aimed) every phase is hit all but
        # surely; the quick default's 10 missed it in 3 of 8 runs.
        if ROUNDS >= 100:
            check(all(phases.values()), f"the kills hit every phase: {phases}")
        else:
            print(f"# kills by phase in {ROUNDS} rounds (every phase checked from 100, WDRIFT_SOAK=1): {phases}")
        # the end: a clean stop, then everything opens without h5clear
        rc = dm.stop()
        check(rc == 0, f"SIGTERM after the last restart: exit {rc}")
        table = drift_rows(drift, swmr=False)
        check(table is not None, "after the stop the drift log opens with h5py normally (no h5clear)")
        bad = []
        for run in RUNS:
            for f in sorted(os.listdir(os.path.join(spool, run))):
                try:
                    with h5py.File(os.path.join(spool, run, f), "r") as h:
                        len(h.keys())
                except OSError as e:
                    bad.append(f"{run}/{f}: {e}")
        check(not bad, f"every spool file opens with h5py normally {bad[:2]}")
        complete = sorted({s for _, s in acked if all((r, s) in acked for r in RUNS)})
        latest = latest_rows(table) if table else {}
        diffs = [w for w in (same_as_compare(spool, s, latest) for s in complete) if w]
        check(complete and not diffs, f"every complete step ({len(complete)}) in the drift log equals "
              f"wdrift compare on its spool files {diffs[:2]}")
        durable, _, _ = wal_state(read_wal(waldir))
        lost = len(acked - durable)
        check(lost == 0, f"nothing acked is lost: {lost} of {len(acked)}")
        kept = [f for f in os.listdir(os.path.join(var, "drift")) if ".broken-" in f]
        log = dm.log_text()
        moved = log.count("moved the old drift log aside to")
        removed = log.count("removed the set-aside drift log")
        check(len(kept) <= 3 and len(kept) == moved - removed,
              f"of the {moved} drift logs moved aside, the newest {len(kept)} are kept, {removed} removed "
              f"with a log line each")
        figures.update(rounds=n_rounds, phases=phases, acked=len(acked), complete=len(complete),
                       lost=lost, broken=moved, kept=len(kept), durable=len(durable),
                       seconds=time.time() - t0,
                       in_flight=in_flight, duplicates=duplicates)
    finally:
        harness.teardown(dm, tmp)


def publish_steps(ctx, d, steps):
    acked = set()
    for s in steps:
        for run in RUNS:
            pub = Publisher(ctx, d, run)
            send_snapshot(pub, s)
            a = pub.recv()
            pub.s.close(linger=0)
            if a and a["type"] == "ack":
                acked.add((run, s))
    return acked


def torn_tail(ctx):
    """A crash mid-append leaves half a record at the end of the last
    segment: the daemon truncates it with a warning and goes on."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t70-torn-")
    dm = Daemon(tmp)
    var = os.path.join(tmp, "var")
    waldir, spool = os.path.join(var, "wal"), os.path.join(var, "spool")
    try:
        dm.write_config(level="info")
        check(dm.start() is not None, "torn tail: ready")
        acked = publish_steps(ctx, tmp, (1, 2))
        check(len(acked) == 6 and wait_caught_up(ctx, tmp), "torn tail: 2 steps of 3 runs acked and compared")
        dm.stop(signal.SIGKILL)
        recs = read_wal(waldir)
        seg, off, n, last = recs[-1]
        check(last["t"] == "result" and last["step"] == 2, f"the last record is step 2's result ({last['t']})")
        segpath = os.path.join(waldir, seg)
        os.truncate(segpath, off + 12 + n // 2)
        tail = LogTail(os.path.join(tmp, "daemon.log"))
        check(dm.start() is not None, "a result record cut in half: the daemon starts")
        log = tail.new()
        want = f"'{segpath}': torn record at offset {off} of {off + 12 + n // 2}"
        check(want in log and "warning" in log, f"with a warning naming the segment and offset ({want})")
        check(wait_caught_up(ctx, tmp), "and catches up")
        recs2 = read_wal(waldir)
        redone = [r for _, o, _, r in recs2 if o >= off and r["t"] == "result" and r["step"] == 2]
        table = drift_rows(os.path.join(var, "drift", "fa.h5"))
        why = same_as_compare(spool, 2, latest_rows(table)) if table else "no drift log"
        check(redone and not why, f"step 2's lost result is computed again, equal to wdrift compare {why}")

        # the spool file is renamed into place, its WAL record half written: never acked
        dm.stop(signal.SIGKILL)
        size = os.path.getsize(segpath)
        shutil.copy(f"{spool}/base/2.h5", f"{spool}/base/3.h5")
        body = json.dumps({"t": "snapshot", "run": "base", "step": 3, "tensors": 4, "bytes": 1,
                           "file": "spool/base/3.h5"}).encode()
        rec = struct.pack("<III", WAL_MAGIC, len(body), zlib.crc32(body)) + body
        with open(segpath, "ab") as f:
            f.write(rec[:30])
        tail = LogTail(os.path.join(tmp, "daemon.log"))
        check(dm.start() is not None, "half a snapshot record: the daemon starts")
        log = tail.new()
        check(f"'{segpath}': torn record at offset {size} of {size + 30}" in log,
              "the torn snapshot record is truncated with a warning naming segment and offset")
        check(not os.path.exists(f"{spool}/base/3.h5") and "never acked" in log,
              "its spool file, never acked, is removed")
        pub = Publisher(ctx, tmp, "base")
        w = pub.hello()
        check(w and w["durable_steps"] == [1, 2], f"durable: steps 1 and 2 only ({w and w['durable_steps']})")
        send_snapshot(pub, 3)
        a = pub.recv()
        check(a and a["type"] == "ack" and not a["duplicate"], "step 3, re-sent, is acked as new")
        pub.s.close(linger=0)
        check(wait_caught_up(ctx, tmp) and dm.stop() == 0, "SIGTERM: exit 0")
    finally:
        harness.teardown(dm, tmp)


def corruption(ctx):
    """Damage followed by good records is not a crash: refused, with the
    segment and offset; --force keeps the records before it."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t70-corrupt-")
    dm = Daemon(tmp)
    var = os.path.join(tmp, "var")
    waldir, spool = os.path.join(var, "wal"), os.path.join(var, "spool")
    try:
        dm.write_config(level="info")
        check(dm.start() is not None, "corruption: ready")
        acked = publish_steps(ctx, tmp, (1, 2, 3))
        check(len(acked) == 9 and wait_caught_up(ctx, tmp), "corruption: 3 steps of 3 runs acked and compared")
        # stopped cleanly: a drift log a kill left flagged open is rebuilt
        # anyway, a cleanly closed one must be rebuilt for holding more rows
        # than the WAL once --force has moved records aside
        check(dm.stop() == 0, "SIGTERM: exit 0")
        recs = read_wal(waldir)
        # the first snapshot record of step 2, with good records after it
        i = next(j for j, (_, _, _, r) in enumerate(recs) if r["t"] == "snapshot" and r["step"] == 2)
        seg, off, n, victim = recs[i]
        segpath = os.path.join(waldir, seg)
        with open(segpath, "r+b") as f:
            f.seek(off + 12 + n // 2)
            c = f.read(2)
            f.seek(off + 12 + n // 2)
            f.write(bytes(x ^ 0x5A for x in c))
        with open(segpath, "rb") as f:
            before = f.read()
        tail = LogTail(os.path.join(tmp, "daemon.log"))
        ready = dm.start()
        rc = dm.proc.wait(10) if ready is None else None
        log = tail.new()
        check(ready is None and rc == 1, f"a flipped byte with good records after it: no READY, exit {rc}")
        want = f"'{segpath}': offset {off}: damaged record with good records after it; refusing to start"
        check(want in log and "--force" in log, f"the message names the segment, the offset and --force ({want})")
        with open(segpath, "rb") as f:
            check(f.read() == before and not os.path.exists(segpath + ".corrupt"),
                  "a refused start changes nothing")
        tail = LogTail(os.path.join(tmp, "daemon.log"))
        check(dm.start("--force") is not None, "--force: the daemon starts")
        log = tail.new()
        check(f"offset {off}: damaged record; --force: keeping the {i} records before it" in log,
              "and logs what it kept")
        check(os.path.getsize(segpath + ".corrupt") == len(before) - off,
              "the records from the damage on are moved aside (.corrupt)")
        st = control(ctx, tmp, {"v": 1, "cmd": "status"})
        kept = sum(1 for _, _, _, r in recs[:i] if r["t"] == "snapshot")
        check(st and st["snapshots"]["durable"] == kept,
              f"status reports the {kept} snapshots before the damage durable ({st and st['snapshots']})")
        moved = [(r["run"], r["step"]) for _, _, _, r in recs[i:] if r["t"] == "snapshot"]
        # acked snapshots whose records --force moved aside: not deleted as never acked
        gone = [f"{run}/{s}.h5" for run, s in moved if not os.path.exists(f"{spool}/{run}/{s}.h5.orphan")]
        check(moved and not gone and "never acked" not in log,
              f"the spool files of the {len(moved)} snapshots whose records were moved aside are kept, "
              f"as STEP.h5.orphan {gone}")
        check(wait_caught_up(ctx, tmp) and dm.stop() == 0, "--force: then SIGTERM, exit 0")
        table = drift_rows(os.path.join(var, "drift", "fa.h5"), swmr=False)
        check(table is not None, "the drift log opens with h5py normally")
        _, wal_rows, _ = wal_state(read_wal(waldir))
        check(table is not None and len(table[0]) == wal_rows and "rebuilding it" in log,
              f"it holds the {wal_rows} rows of the WAL's results, not those of the records moved "
              f"aside: set aside and rebuilt ({table and len(table[0])} rows)")
        check(dm.start() is not None, "and the next start needs no --force")
        check(dm.stop() == 0, "SIGTERM: exit 0")
        gone = [f"{run}/{s}.h5" for run, s in moved if not os.path.exists(f"{spool}/{run}/{s}.h5.orphan")]
        check(not gone, f"and leaves the .orphan files alone {gone}")
    finally:
        harness.teardown(dm, tmp)


def set_aside(ctx):
    """A drift log that does not open is moved aside and rebuilt from the
    WAL. Each copy gets a name of its own: a copy already there, whatever
    second it is named for, is never overwritten (the daemon used to name
    copies by the second alone, so a second one within a second replaced the
    first); and at most 3 copies of a study are kept, the oldest removed with
    a log line naming each."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t70-aside-")
    dm = Daemon(tmp)
    var = os.path.join(tmp, "var")
    ddir, waldir = os.path.join(var, "drift"), os.path.join(var, "wal")
    drift = os.path.join(ddir, "fa.h5")

    def copies():
        out = {}
        for f in os.listdir(ddir):
            if f.startswith("fa.h5.broken-"):
                with open(os.path.join(ddir, f), "rb") as h:
                    out[f] = h.read()
        return out

    try:
        dm.write_config(level="info")
        check(dm.start() is not None, "set aside: ready")
        acked = publish_steps(ctx, tmp, (1,))
        check(len(acked) == 3 and wait_caught_up(ctx, tmp) and dm.stop() == 0,
              "set aside: one step of 3 runs acked and compared, then SIGTERM")
        _, want_rows, _ = wal_state(read_wal(waldir))
        # copies named as the daemon named them before (the second alone),
        # for this second and the next four: a restart now lands on one
        now = int(time.time())
        planted = {f"fa.h5.broken-{t}": f"planted {t}\n".encode() for t in range(now, now + 5)}
        for f, b in planted.items():
            with open(os.path.join(ddir, f), "wb") as h:
                h.write(b)
        damage, logs = [], ""
        for i in range(3):
            junk = f"not a drift log: damage {i}\n".encode()
            damage.append(junk)
            with open(drift, "wb") as h:
                h.write(junk)
            tail = LogTail(os.path.join(tmp, "daemon.log"))
            started = dm.start() is not None
            caught = started and wait_caught_up(ctx, tmp)
            log = tail.new()
            logs += log
            have = copies()
            made = [f for f, b in have.items() if b == junk]
            check(started and caught and len(made) == 1 and
                  f"moved the old drift log aside to '{os.path.join(ddir, made[0])}'" in log,
                  f"damage {i}: the daemon starts and keeps the damaged log as a copy of its own, "
                  f"logged ({made})")
            removed = re.findall(r"removed the set-aside drift log '([^']*)'", logs)
            check(len(have) <= 3 and len(removed) == len(planted) + i + 1 - len(have),
                  f"damage {i}: at most 3 copies are kept ({sorted(have)}); each one removed is "
                  f"named in the log ({[os.path.basename(r) for r in removed]})")
            table = drift_rows(drift)
            check(table is not None and len(table[0]) == want_rows,
                  f"damage {i}: the rebuilt drift log holds the WAL's {want_rows} rows "
                  f"({table and len(table[0])})")
            check(dm.stop() == 0, f"damage {i}: SIGTERM, exit 0")
        have = copies()
        check(all(have.get(f, b) == b for f, b in planted.items()),
              "no copy that was there is overwritten "
              f"{[f for f, b in planted.items() if have.get(f, b) != b]}")
        gone = [f for f in planted if f not in have]
        check(all(f"removed the set-aside drift log '{os.path.join(ddir, f)}'" in logs for f in gone),
              f"each copy removed is named in the log ({len(gone)} of {len(planted)})")
        check(sorted(have.values()) == sorted(damage),
              f"the 3 kept are the newest: the 3 the daemon made, whatever their names' seconds "
              f"({sorted(have)})")
    finally:
        harness.teardown(dm, tmp)


def main():
    for exe in (harness.WDRIFTD, WDRIFT):
        if not os.path.exists(exe):
            print(f"not ok 1 - {exe} is not built")
            return 1
    t0 = time.time()
    ctx = zmq.Context()
    figures = {}
    try:
        crash_loop(ctx, figures)
        torn_tail(ctx)
        corruption(ctx)
        set_aside(ctx)
    finally:
        ctx.destroy(linger=0)
    if figures:
        p = figures["phases"]
        print(f"# {figures['rounds']} kills (SIGKILL) and restarts on one storage dir, "
              f"{figures['seconds']:.1f} s")
        print("# kills by phase: " + ", ".join(f"{k} {v}" for k, v in p.items()))
        print(f"# snapshots acked {figures['acked']} ({figures['complete']} steps with all three runs), "
              f"durable after the last restart {figures['durable']}, lost {figures['lost']}")
        print(f"# snapshots in flight (sent, not acked) at the kills {figures['in_flight']}; re-sent ones "
              f"acked as duplicates (durable, ack lost) {figures['duplicates']}")
        print(f"# drift logs moved aside and rebuilt from the WAL: {figures['broken']} "
              f"(copies kept at the end: {figures['kept']})")
    print(f"# total {time.time() - t0:.1f} s")
    print(f"{harness.n_ok} passed, {harness.n_fail} failed")
    return 1 if harness.n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
