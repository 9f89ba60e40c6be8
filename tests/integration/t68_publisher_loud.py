#!/usr/bin/env python3
"""t68_publisher_loud.py: every failure a user can cause while attaching is loud and bounded.

- An endpoint that is not tcp://, ipc:// or inproc://, or that ZeroMQ
  refuses, raises at construction, naming it; so do a bad run name and a
  bad key, naming the Python argument; no message says "error 22".
- Against an absent daemon the sending thread backs off: its CPU use,
  measured over seconds, stays under 1% of a core; a relative ipc:// path
  is named in full at open; one warning names the endpoint after
  stall_warning seconds, and one more says when acks come back (the first
  ack, from a daemon started after the job); pub.notice is None until the
  daemon's welcome. An ipc:// file name that is a typo of a socket in its
  directory is answered "did you mean 'ipc://DIR/NAME'?".
- close() returns how many snapshots were never made durable, and says so.
- A run in no study (a typo in its name) is said once on the job's
  stderr, from the daemon's welcome, with the nearest run of a study.
- A run name used again: the same content is an acked duplicate; other
  content raises WdriftError naming run, step and tensor (at flush, or at
  close after closing) and the durable step keeps its content; after
  `wdrift runs rm` the new content is stored and its drift equals scipy.
Each publisher runs in a child process, whose stderr is what a user sees.
"""
import os
import re
import shutil
import socket
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
WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
import harness  # noqa: E402
import wdrift  # noqa: E402
from harness import Daemon, check  # noqa: E402

PYTHON = os.environ.get("PYTHON", "/usr/bin/python3")


def child(code, cwd, timeout=60):
    """Runs code in a fresh Python with the package importable; (rc, stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([PYTHON, "-c", "import numpy as np, resource, time, wdrift\n" + code],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def raises(make, *needles):
    """The WdriftError (or ValueError) that make() raises, and whether it has every needle."""
    try:
        p = make()
        p.close(0)
        return "no error", False
    except (wdrift.WdriftError, ValueError) as e:
        msg = str(e)
        return msg, all(n in msg for n in needles) and "error 22" not in msg


# A publisher against no daemon: CPU time of the whole process over `quiet`
# seconds of the main thread sleeping, which is the sending thread's.
ABSENT = """
pub = wdrift.Publisher({ep!r}, "absent", ack_timeout=1.0, stall_warning=2.0)
pub.publish(0, {{"w": np.arange(1000, dtype=np.float32)}})
t0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
time.sleep({quiet})
t1, c1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
print("cpu", cpu, "wall", t1 - t0, "resent", pub.stats()["resent"])
print("closed", pub.close(0.2))
"""


def wait_w1(ctx, tmp, step, timeout=20):
    """The daemon's W1 of candidate 'fa' at step, per tensor, once computed."""
    end = time.time() + timeout
    while time.time() < end:
        r = harness.control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "fa", "step": step})
        if r and r.get("ok") and "fa" in r.get("candidates", {}):
            return {l["name"]: l["w1"] for l in r["candidates"]["fa"]["layers"]}
        time.sleep(0.2)
    return None


def reused_name(tmp, ep):
    """A run restarted under a used name: a duplicate is harmless, other content raises, runs rm frees it."""
    import scipy.stats
    import zmq
    rng = np.random.default_rng(68)
    base = {"w": rng.standard_normal(500).astype(np.float32)}
    old = {"w": base["w"] + np.float32(0.01) * rng.standard_normal(500).astype(np.float32)}
    new = {"w": base["w"] + np.float32(0.05) * rng.standard_normal(500).astype(np.float32)}
    ctx = zmq.Context()
    try:
        with wdrift.Publisher(ep, "base") as b:
            b.publish(5, base)
            check(b.flush(20), "reuse: the baseline's step 5 is acked")
        fa = wdrift.Publisher(ep, "fa", stall_warning=None)
        fa.publish(5, old)
        fa.flush(20)
        fa.publish(5, old)      # a re-send: the same content
        ok = fa.flush(20)
        st = fa.stats()
        check(ok and st["acked"] == 2 and st["duplicates"] == 1 and st["conflicts"] == 0,
              f"reuse: the same content again is an acked duplicate ({st})")
        sn = (harness.control(ctx, tmp, {"v": 1, "cmd": "status"}) or {}).get("snapshots", {})
        check(sn.get("duplicates") == 1 and sn.get("duplicate_tensors") == 1,
              f"reuse: status counts 1 duplicate snapshot, and its tensor apart ({sn})")
        before = wait_w1(ctx, tmp, 5)
        # publish() raises the conflicts of earlier snapshots only: one whose own refusal came
        # back before it returned (CI's ASan pass saw it) is raised by the next call, as always
        send_host = fa._send_host

        def slow_tail(step, entries):     # publish() ends only once the daemon has refused it
            send_host(step, entries)
            end = time.time() + 20
            while fa.stats()["conflicts"] == 0 and time.time() < end:
                time.sleep(0.01)
        fa._send_host = slow_tail
        try:
            fa.publish(5, new)      # the run restarted under the same name, after a fix
            msg = "not raised"
        except wdrift.WdriftError as e:
            msg = str(e)
        fa._send_host = send_host
        check(msg == "not raised" and fa.stats()["conflicts"] == 1,
              f"publish() does not raise its own snapshot's conflict, come back before it returned: {msg}")
        try:
            fa.flush(20)
            msg = "no error"
        except wdrift.WdriftError as e:
            msg = str(e)
        # the same publisher, whose steps were taken: its own step count went back, not a re-run (t112)
        check("run 'fa' step 5" in msg and "conflict" in msg and "'w'" in msg and
              "this publisher has published the run before" in msg,
              f"reuse: other content raises WdriftError naming run, step and tensor: {msg}")
        st = fa.stats()
        check(st["conflicts"] == 1 and st["dropped"] == 1, f"reuse: the conflict is counted ({st})")
        check(wait_w1(ctx, tmp, 5) == before, "reuse: the durable step keeps its first content")
        fa.publish(6, old)
        check(fa.flush(20) and fa.stats()["acked"] == 3, "reuse: the publisher goes on with the next step")
        fa.publish(6, new)      # raised by close(), after closing: it comes while close() flushes
        try:
            fa.close(10)
            msg = "no error"
        except wdrift.WdriftError as e:
            msg = str(e)
        check("run 'fa' step 6" in msg and "conflict" in msg, f"reuse: close() raises a conflict not yet raised: {msg}")
        r = subprocess.run([os.environ.get("WDRIFT", os.path.join(os.environ.get("BUILD", "build"), "wdrift")),
                            "runs", "rm", "fa", "-c", os.path.join(tmp, "wdrift.yaml")],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"reuse: wdrift runs rm fa frees the name ({r.stdout.strip()})", r.stderr)
        with wdrift.Publisher(ep, "fa") as fa:
            fa.publish(5, new)
            ok = fa.flush(20)
            st = fa.stats()
        check(ok and st["acked"] == 1 and st["duplicates"] == 0 and st["conflicts"] == 0,
              f"reuse: after runs rm the new content is acked as new ({st})")
        with wdrift.Publisher(ep, "shapes") as sp:
            try:
                sp.publish(1, {"half": wdrift.Shard(np.ones(2, np.float32), offset=0, shape=(4,))})
                msg = "no error"
            except wdrift.WdriftError as e:
                msg = str(e)
            check("'half': the snapshot holds 2 of its 4 elements" in msg,
                  f"ranks=1: a Shard that is not the whole tensor raises at publish: {msg}")
            try:
                sp.publish(1, {"b": wdrift.Block(np.ones((2, 2), np.float32), start=(3, 0), shape=(4, 2))},
                           skip_other=True)
                msg = "no error"
            except ValueError as e:
                msg = str(e)
            check("not inside" in msg, f"skip_other does not hide a piece outside its tensor: {msg}")
            sp.publish(2, {"s": np.array(3.5, dtype=np.float32), "c": np.int64(1)}, skip_other=True)
            check(sp.flush(20), "a 0-d tensor is acked")
        import h5py
        with h5py.File(os.path.join(tmp, "var", "spool", "shapes", "2.h5"), "r") as f:
            got = (f["s"].shape, float(f["s"][()]), "c" in f)
        check(got == ((), 3.5, False), f"a 0-d tensor keeps its shape () ({got})")
        after = fa.stats()
        check(after["acked"] == 1 and after["dropped"] == 0 and after["queued"] == 0,
              f"stats() after close() gives the counts at close ({after})")
        want = scipy.stats.wasserstein_distance(base["w"].astype(np.float64), new["w"].astype(np.float64))
        end, got = time.time() + 20, None
        while time.time() < end:
            got = wait_w1(ctx, tmp, 5)
            if got and got != before:
                break
            time.sleep(0.2)
        check(got is not None and abs(got["w"] - want) <= 1e-9 * want,
              f"reuse: the drift shows the new run's W1, equal to scipy ({got}, {want})")
    finally:
        ctx.destroy(linger=0)


CONTROL = """
import warnings
pub = wdrift.Publisher({ep!r}, "ctl", ack_timeout=5.0)
try:
    pub.publish(1, {{"bad\\nname": np.arange(4, dtype=np.float32)}})
    print("published a control character")
except wdrift.WdriftError as e:
    print("raised", repr(str(e)))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    pub.publish(2, {{"n" * 600: np.arange(4, dtype=np.float32)}})
    ok = pub.flush(20)
    print("flush", ok, "refused", pub.stats()["refused"], "warned", len(w),
          [type(x.message).__name__ for x in w], repr(w[0].message.latest) if w else "",
          "count", w[0].message.count if w else 0, "repeats", "bad_field" in str(w[0].message) if w else "")
    pub.publish(3, {{"m" * 600: np.arange(4, dtype=np.float32)}})
    pub.close(20)
    print("close warned", len(w) - 1, repr(w[-1].message.latest) if len(w) > 1 else "")
"""


def control_name(tmp, ep):
    """A tensor name with a newline raises at publish(), the name escaped, before anything is sent
    (the daemon would refuse it). A name the daemon refuses (600 bytes, over its limits.max_name
    of 512): the library says it once on stderr, one whole line; Python's flush() and close() give a
    RefusedWarning that carries it without saying it again."""
    rc, out, err = child(CONTROL.format(ep=ep), tmp)
    check(rc == 0 and "raised" in out and "control character at byte 3" in out
          and "'bad\\\\nname'" in out,
          f"a control character in a tensor name raises at publish(), naming the byte, the name "
          f"escaped ({out.strip()[:300]})", err)
    check("flush True refused 1 warned 1 ['RefusedWarning']" in out and "bad_field" in out
          and "count 1 repeats False" in out,
          f"a snapshot the daemon refuses is a RefusedWarning from flush(), carrying the daemon's "
          f"reason (.latest) without saying it a second time ({out.strip()[:600]})", err)
    lines = [ln for ln in err.splitlines() if "refused: bad_field" in ln]
    check(len(lines) == 2 and all(ln.startswith("wdrift: publisher: run 'ctl' step") for ln in lines),
          f"the library says each refusal once, on a whole line of its own ({[ln[:120] for ln in lines]})",
          err)
    check("close warned 1" in out and "step 3" in out.split("close warned", 1)[-1],
          f"close() warns of a refusal flush() did not ({out.strip()[-300:]})", err)


def near_socket(tmp):
    """A typo in an ipc:// socket's file name, beside the daemon's sockets in tmp/run: the
    warning at open and Publisher.diagnosis suggest the socket it is near, as the endpoint
    spells its directory; so does the stall warning, and a typo in the directory's name. A name near none, among several
    sockets, gets no suggestion, nor does it beside a lone socket of a far name (a daemon's
    control.sock, whose ingest is tcp://: the publisher must not be sent there)."""
    code = """
import sys
pub = wdrift.Publisher(sys.argv[1], "r", stall_warning=float(sys.argv[2]) or None)
if float(sys.argv[2]):
    pub.publish(1, {"w": np.arange(10, dtype=np.float32)})
    time.sleep(float(sys.argv[2]) + 1.0)
print("diagnosis", pub.diagnosis)
pub.close(0)
"""
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(ep, stall=0):
        p = subprocess.run([PYTHON, "-c", "import numpy as np, time, wdrift\n" + code, ep, str(stall)],
                           cwd=tmp, env=env, capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    near = f"did you mean 'ipc://{tmp}/run/ingest.sock'?"
    rc, out, err = run(f"ipc://{tmp}/run/ingset.sock", 1.0)
    stall = [line for line in err.splitlines() if "no ack from" in line]
    check(rc == 0 and err.count(near) == 2 and f"no socket at {tmp}/run/ingset.sock yet" in err
          and f"diagnosis no socket at {tmp}/run/ingset.sock" in out and near in out
          and len(stall) == 1 and near in stall[0] and "; 1 snapshot waiting (" in stall[0],
          "ipc://DIR/ingset.sock beside the daemon's ingest.sock: the warning at open, the stall "
          "warning and Publisher.diagnosis ask 'did you mean ipc://DIR/ingest.sock'", out + err)
    rc, out, err = run("ipc://./run/ingset.sock")
    check(rc == 0 and err.count("did you mean 'ipc://./run/ingest.sock'?") == 1,
          "a relative ipc:// path: the suggestion spells the directory as it was typed", err)
    rc, out, err = run(f"ipc://{tmp}/rnu/ingest.sock")
    check(rc == 0 and err.count(near) == 1 and f"no socket at {tmp}/rnu/ingest.sock yet" in err,
          "a typo in the socket's directory (rnu/ for run/, which holds ingest.sock): the same "
          "'did you mean'", out + err)
    rc, out, err = run(f"ipc://{tmp}/run/unrelated.sock")
    check(rc == 0 and "no socket at" in err and "did you mean" not in err + out,
          "a name near none of the daemon's three sockets: no suggestion", out + err)
    import socket
    os.makedirs(os.path.join(tmp, "one"))
    lone = socket.socket(socket.AF_UNIX)
    try:
        lone.bind(os.path.join(tmp, "one", "control.sock"))
        rc, out, err = run(f"ipc://{tmp}/one/ingest.sock")
        check(rc == 0 and "no socket at" in err and "did you mean" not in err + out,
              "the only socket in the directory, of a far name (control.sock for ingest.sock): not offered",
              out + err)
    finally:
        lone.close()
    # a regular file named like a typo of the socket beside it: said as a file, with the
    # endpoint as typed and the socket it is near (a trial got "a typo in the path?" alone)
    with open(os.path.join(tmp, "run", "ingest.sok"), "w") as f:
        f.write("x\n")
    rc, out, err = run("ipc://./run/ingest.sok")
    check(rc == 0 and f"{tmp}/run/ingest.sok is a regular file, not a socket: the endpoint "
          "ipc://./run/ingest.sok names" in err and "did you mean 'ipc://./run/ingest.sock'?" in err,
          "a regular file a typo away from the daemon's socket: named, with the socket", out + err)
    os.unlink(os.path.join(tmp, "run", "ingest.sok"))
    # the daemon's run/ directory itself (an ops trial's): its sockets named, not "a file wdriftd did not make"
    rc, out, err = run(f"ipc://{tmp}/run")
    check(rc == 0 and f"{tmp}/run is a directory, not a socket: the endpoint ipc://{tmp}/run must name the socket "
          f"file itself; it holds a socket named for ingest: did you mean 'ipc://{tmp}/run/ingest.sock'?" in err
          and "did not make" not in err, "an endpoint naming the daemon's run/ directory: its sockets", out + err)
    # ... relative: said whole, at open and in the stall warning alike (a review's: the stall said "./run")
    rc, out, err = run("ipc://./run", 1.0)
    stall = [line for line in err.splitlines() if "no ack from" in line]
    check(rc == 0 and err.count(f"{tmp}/run is a directory, not a socket: the endpoint ipc://./run must") == 2
          and len(stall) == 1 and "'ipc://./run/ingest.sock'?" in stall[0],
          "a relative endpoint naming run/: the whole path at open and in the stall warning", out + err)
    # the CLI started in the wrong directory, a relative endpoint: the whole path, and the socket that
    # listens under another directory (a trial's said "no socket at run/control.sock" alone)
    os.makedirs(os.path.join(tmp, "elsewhere"), exist_ok=True)
    r = subprocess.run([WDRIFT, "status", "--endpoint", "ipc://run/control.sock"], capture_output=True, text=True,
                       timeout=30, cwd=os.path.join(tmp, "elsewhere"))
    check(r.returncode == 1 and f"no socket at {tmp}/elsewhere/run/control.sock (ipc://run/control.sock, a path "
          "relative to this process's working directory; started in another directory? a socket listens at "
          f"'ipc://{tmp}/run/control.sock'" in r.stderr, "wdrift status, relative, from the wrong directory: "
          "the whole path, and where it listens", r.stderr)
    # the CLI: its own socket, control (send's ingest, watch's events), not the first three by name
    for cmd, kind in ((["status"], "control"), (["watch", "--count", "1"], "events")):
        r = subprocess.run([WDRIFT, *cmd, "--endpoint", f"ipc://{tmp}/run"], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 1 and f"{tmp}/run is a directory, not a socket: the endpoint ipc://{tmp}/run must "
              f"name the socket file itself; it holds a socket named for {kind}: did you mean "
              f"'ipc://{tmp}/run/{kind}.sock'?" in r.stderr, f"wdrift {cmd[0]} given run/: {kind}.sock", r.stderr)

    # a path that is there but is no socket: said as what it is, at open and in the stall
    # warning, never as a socket file a stopped daemon left (a trial's "stale socket file")
    os.makedirs(os.path.join(tmp, "plain"))
    with open(os.path.join(tmp, "plain", "ingest.sock"), "w") as f:
        f.write("not a socket\n")
    os.makedirs(os.path.join(tmp, "plain", "adir.sock"))
    for name, kind in (("ingest.sock", "a regular file"), ("adir.sock", "a directory")):
        path = os.path.join(tmp, "plain", name)
        rc, out, err = run(f"ipc://{path}", 1.0)
        stall = [line for line in err.splitlines() if "no ack from" in line]
        check(rc == 0 and err.count(f"{path} is {kind}, not a socket") == 2
              and f"diagnosis {path} is {kind}, not a socket" in out and len(stall) == 1
              and "nothing listens" not in err + out and "stopped without removing" not in err + out,
              f"an ipc:// path that is {kind}: said as such at open, in the stall warning and in "
              f"Publisher.diagnosis", out + err)

    # close() ends at once on a sure diagnosis: the snapshot can go nowhere until a person
    # fixes the path, so a job's exit must not wait out close's timeout (a trial's did).
    # flush() waits on: a daemon started where the file was would take it (t72: a key reloaded)
    code_close = """
import sys, time
pub = wdrift.Publisher(sys.argv[1], "r")
pub.publish(1, {"w": np.arange(10, dtype=np.float32)})
t = time.monotonic()
print("flush", pub.flush(1.5), "in", round(time.monotonic() - t, 1))
t = time.monotonic()
print("close", pub.close(30), "in", round(time.monotonic() - t, 1))
"""
    path = os.path.join(tmp, "plain", "ingest.sock")
    p = subprocess.run([PYTHON, "-c", "import numpy as np, wdrift\n" + code_close, f"ipc://{path}"],
                       cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    m = re.search(r"flush (\w+) in ([\d.]+)\nclose (\d+) in ([\d.]+)", p.stdout)
    check(p.returncode == 0 and m and m.group(1) == "False" and float(m.group(2)) >= 1.4
          and m.group(3) == "1" and float(m.group(4)) < 10
          and "closed with 1 of 1 snapshots never made durable" in p.stderr,
          "an ipc:// path that is a regular file: flush(1.5) waits its time out, and close(30) gives "
          "the snapshot up at once, saying so", p.stdout + p.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t68-")
    dm = Daemon(tmp)
    try:
        # 1. what can never work raises at construction, with the library's words
        for ep, needle in (("http://localhost:1", "not a ZeroMQ endpoint"),
                           ("tcp://127.0.0.1:notaport", "the port must be 1 to 65535"),
                           ("tcp://127.0.0.1:82636", "the port must be 1 to 65535"),  # ZeroMQ: 17100
                           ("tcp://127.0.0.1:0", "the port must be 1 to 65535"),
                           ("tcp://127.0.0.1:*", "is a port for a daemon to bind"),
                           ("tcp://*:5555", "names every interface of a host, which a daemon binds"),
                           ("tcp://127.0.0.1:5555 ", "contains a space"),
                           ("tcp://localhost", "has no port"),
                           # pasted with a '/': the socket was there, and it waited on "no socket yet"
                           (f"ipc://{tmp}/run/ingest.sock/", f"did you mean 'ipc://{tmp}/run/ingest.sock'?"),
                           ("tcp://127.0.0.1:5555/", "did you mean 'tcp://127.0.0.1:5555'?"),
                           ("tcp://localhost:", "has no port"),
                           ("localhost:5555", "not a ZeroMQ endpoint")):
            msg, ok = raises(lambda: wdrift.Publisher(ep, "r"), ep, needle)
            check(ok, f"endpoint {ep!r} raises at construction, naming it: {msg}")
        msg, ok = raises(lambda: wdrift.Publisher(f"ipc://{tmp}/x.sock", "bad name"), "bad name", "A-Z")
        check(ok, f"a bad run name says the rule: {msg}")
        msg, ok = raises(lambda: wdrift.Publisher(f"ipc://{tmp}/x.sock", "r", key=os.path.join(tmp, "nokey")),
                         "key=", "server_key=")
        check(ok and "--key" not in msg, f"a key without server_key names the Python arguments: {msg}")
        import h5py
        h5 = os.path.join(tmp, "one.h5")
        with h5py.File(h5, "w") as f:
            f["w"] = np.arange(4, dtype=np.float32)
        r = subprocess.run([os.environ.get("WDRIFT", os.path.join(os.environ.get("BUILD", "build"), "wdrift")),
                            "send", "--run", "x", "--step", "1", h5, "-c", dm.write_config(),
                            "--server-key", "abc", "--key", os.path.join(tmp, "nokey")],
                           capture_output=True, text=True)
        check(r.returncode == 1 and "key" in r.stderr and "no ingest endpoint" not in r.stderr,
              f"wdrift send with a bad key says what is wrong with the key: {r.stderr.strip()}")
        lib = wdrift.publisher._get_lib()
        check(lib.wd_strerror(-110) == b"timed out" and lib.wd_strerror(-22) == b"invalid argument",
              "wd_strerror gives words for the library's errno returns")

        # 2. an absent daemon: a relative ipc:// path, then tcp; bounded CPU, one warning
        os.makedirs(os.path.join(tmp, "elsewhere"))
        for ep, label in (("ipc://./run/ingest.sock", "ipc, relative"), ("tcp://127.0.0.1:9", "tcp")):
            quiet = 8.0
            rc, out, err = child(ABSENT.format(ep=ep, quiet=quiet), os.path.join(tmp, "elsewhere"))
            fields = dict(zip(out.split()[::2], out.split()[1::2]))
            cpu = float(fields.get("cpu", "nan"))
            check(rc == 0 and cpu < 0.01 * quiet,
                  f"{label}: the sender against no daemon used {cpu:.3f} CPU-s in {quiet:.0f} s "
                  f"(< 1% of a core), resending {fields.get('resent')} times", out + err)
            warned = err.count("no ack from")
            check(warned == 1 and ep in err,
                  f"{label}: one stall warning naming the endpoint ({warned})", err)
            check(fields.get("closed") == "1" and "closed with 1 of 1 snapshots never made durable" in err,
                  f"{label}: close() returns 1 dropped and says so", out + err)
        full = os.path.join(tmp, "elsewhere", "run", "ingest.sock")
        rc, out, err = child(ABSENT.format(ep="ipc://./run/ingest.sock", quiet=0.1),
                             os.path.join(tmp, "elsewhere"))
        check(f"no socket at {full}" in err and "relative to this process's working directory" in err,
              "a relative ipc:// path with no socket is named in full at open", err)
        # inproc:// reaches no daemon: said once at open, and it is the publisher's diagnosis
        rc, out, err = child("""
pub = wdrift.Publisher("inproc://wdrift", "r", stall_warning=None)
print("diagnosis", pub.diagnosis)
pub.close(0)
""", tmp)
        check(rc == 0 and err.count("reaches only sockets of this publisher's own ZeroMQ context") == 1
              and "diagnosis endpoint 'inproc://wdrift' reaches only sockets" in out,
              "inproc://: said once at open, and Publisher.diagnosis says it", out + err)
        # an abstract socket (ipc://@name) has no file: none is looked for, in the cwd or anywhere
        rc, out, err = child("""
pub = wdrift.Publisher("ipc://@wdrift-t68-none", "r", stall_warning=None)
print("diagnosis", pub.diagnosis)
pub.close(0)
""", tmp)
        check(rc == 0 and "no socket at" not in err and "diagnosis None" in out,
              "ipc://@name: no socket file looked for, no diagnosis at open", out + err)

        # 3. a daemon that comes up later: snapshots go, and the recovery is said once
        dm.write_config()
        ep = f"ipc://{tmp}/run/ingest.sock"
        code = f"""
import subprocess, sys
pub = wdrift.Publisher({ep!r}, "late", ack_timeout=1.0, stall_warning=1.0)
pub.publish(7, {{"w": np.arange(10, dtype=np.float32)}})
time.sleep(2.5)
print("notice before", pub.notice)
open({os.path.join(tmp, 'go')!r}, 'w').close()
ok = pub.flush(30)
print("notice after", pub.notice)
print("flushed", ok, "acked", pub.stats()["acked"], "closed", pub.close(5))
"""
        proc = subprocess.Popen([PYTHON, "-c", "import numpy as np, time, wdrift\n" + code],
                                env=dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", "")), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        end = time.time() + 20
        while not os.path.exists(os.path.join(tmp, "go")) and time.time() < end:
            time.sleep(0.1)
        check(dm.start() is not None, "the daemon starts after the publisher")
        out, err = proc.communicate(timeout=60)
        check("flushed True acked 1 closed 0" in out,
              f"the waiting snapshot is acked once it is up ({out.strip().splitlines()[-1:]})", err)
        # it had acked nothing before: its first ack, not "acks again" (t61 has the again)
        check(err.count("no ack from") == 1 and err.count("acks its first snapshot after") == 1
              and "acks again" not in err and "answers now" not in err,
              "one warning while it was away, one when it acked its first snapshot (not two)", err)
        check("notice before None" in out and "notice after run 'late' belongs to no study" in out,
              "pub.notice: None before the daemon's welcome, its notice after", out)
        check(err.count("run 'late' belongs to no study") == 1 and "studies: 'fa': base, fa, lowprec" in err
              and f"wdriftd at ipc://{tmp}/run/ingest.sock" in err,
              "a run in no study: the daemon's welcome says so once, on the job's stderr", err)

        # a job started in another directory than its daemon, with a relative ipc:// path: the
        # daemon's socket, listening under the same relative path, is named (a trial's job waited)
        # a listener whose file was removed is still in /proc/net/unix: not offered (a review's)
        os.makedirs(os.path.join(tmp, "gone", "run"))
        gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        gone.bind(os.path.join(tmp, "gone", "run", "ingest.sock"))
        gone.listen(1)
        os.unlink(os.path.join(tmp, "gone", "run", "ingest.sock"))
        # two farther daemons' sockets (another directory tree): the nearest is named first, the
        # rest counted
        far = tempfile.mkdtemp(prefix="wdrift-t68-far-")
        farsocks = []
        try:
            for sub in ("a", "b"):
                os.makedirs(os.path.join(far, sub, "run"))
                fs = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                fs.bind(os.path.join(far, sub, "run", "ingest.sock"))
                fs.listen(1)
                farsocks.append(fs)
            rc, out, err = child(ABSENT.format(ep="ipc://./run/ingest.sock", quiet=0.1),
                                 os.path.join(tmp, "elsewhere"))
        finally:
            gone.close()
            for fs in farsocks:
                fs.close()
            shutil.rmtree(far, ignore_errors=True)
        full = os.path.join(tmp, "elsewhere", "run", "ingest.sock")
        said = err.split("started in another directory? a socket listens at ", 1)
        named = re.findall(r"'ipc://([^']+)'", said[1].split("): snapshots", 1)[0] if len(said) > 1 else "")
        # tests run in parallel: others' daemons may listen under the same relative path, and the
        # nearest is named first (a trial was shown two test daemons, not its own)
        check(f"no socket at {full} yet (ipc://./run/ingest.sock, a path relative to this process's working "
              "directory; started in another directory? a socket listens at 'ipc://" in err
              and named[:1] == [f"{tmp}/run/ingest.sock"]
              and all(n.endswith("/run/ingest.sock") for n in named) and "/gone/" not in err
              and re.search(r"'ipc://[^']+' \(and \d+ others?\)\): snapshots wait", err) is not None,
              "a relative ipc:// path with no socket, the daemon up elsewhere: its socket is named, not a "
              "listener whose file is gone", err)
        # the daemon's own directory, its run/ there without a socket (the daemon stopped): not sent to
        # another daemon's socket under the same relative path (a trial's was), asked whether it runs
        stopped = os.path.join(tmp, "stopped")
        os.makedirs(os.path.join(stopped, "run"))
        rc, out, err = child(ABSENT.format(ep="ipc://./run/ingest.sock", quiet=0.1), stopped)
        check(f"no socket at {stopped}/run/ingest.sock yet (ipc://./run/ingest.sock, a path relative to this "
              "process's working directory; its directory is here: is this directory's wdriftd running?)" in err
              and "started in another directory" not in err,
              "a relative ipc:// path whose directory is here, without its socket: is the daemon running? not "
              "another directory's daemon", err)
        # a lone name (ipc://run, the run/ directory meant, from the wrong place): its directory is the
        # working one, always here, which says nothing of a daemon (a trial was asked whether it ran)
        bare = os.path.join(tmp, "bare")
        os.makedirs(bare)
        rc, out, err = child(ABSENT.format(ep="ipc://run", quiet=0.1), bare)
        check(f"no socket at {bare}/run yet (ipc://run, a path relative to this process's working directory"
              in err and "its directory is here" not in err,
              "a relative lone name with no file: not 'its directory is here'", err)
        # an absolute path into an existing wrong directory (a trial's typo got no pointer): the socket
        # of that name that listens is named, asked as one of two causes (the daemon may not be up yet)
        os.makedirs(os.path.join(tmp, "wrong"))
        # a last name alone says little: another user's socket, and one sharing no directory below / with
        # the path, are not named (a review's)
        others, shm = [], tempfile.mkdtemp(prefix="wdrift-t68-", dir="/dev/shm") if os.path.isdir("/dev/shm") else None
        try:
            for where, uid in ((shm, None), (os.path.join(tmp, "theirs") if os.getuid() == 0 else None, 54321)):
                if not where:
                    continue
                os.makedirs(os.path.join(where, "run"))
                o = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                o.bind(os.path.join(where, "run", "ingest.sock"))
                o.listen(1)
                if uid:
                    os.chown(os.path.join(where, "run", "ingest.sock"), uid, uid)
                others.append((o, where))
            rc, out, err = child(ABSENT.format(ep=f"ipc://{tmp}/wrong/ingest.sock", quiet=0.1), tmp)
        finally:
            for o, _ in others:
                o.close()
            if shm:
                shutil.rmtree(shm, ignore_errors=True)
        check(others and not any(w in err for _, w in others),
              f"... not another user's socket, nor one sharing only / with the path ({[w for _, w in others]})", err)
        said = err.split("its daemon not up yet, or a wrong directory? a socket of that name listens at ", 1)
        named = re.findall(r"'ipc://([^']+)'", said[1].split("): snapshots", 1)[0] if len(said) > 1 else "")
        check(f"no socket at {tmp}/wrong/ingest.sock yet (ipc://{tmp}/wrong/ingest.sock; its daemon not up yet, "
              "or a wrong directory? a socket of that name listens at 'ipc://" in err
              and named[:1] == [f"{tmp}/run/ingest.sock"] and "started in another directory" not in err,
              "an absolute ipc:// path in a wrong directory: the nearest socket of that name is named", err)

        # 4. a typo in the run name is said on the job's stderr, with the nearest run; a right name is not
        for run, said in (("lowpre", "did you mean 'lowprec'?"), ("lowprec", None)):
            rc, out, err = child(f"""
with wdrift.Publisher({ep!r}, {run!r}, stall_warning=None) as pub:
    for step in (1, 2):
        pub.publish(step, {{"w": np.arange(10, dtype=np.float32)}})
    print("flushed", pub.flush(20))
    print("notice", pub.notice)
print("notice after close", pub.notice)
""", tmp)
            if said:
                check(rc == 0 and "flushed True" in out and err.count("belongs to no study") == 1 and said in err
                      and "notice run 'lowpre' belongs to no study" in out
                      and "notice after close run 'lowpre' belongs to no study" in out,
                      f"run {run!r}: stored, one warning on stderr that ends '{said}', and pub.notice, also "
                      "after close (a trial read it at the end, and it raised)",
                      out + err)
            else:
                check(rc == 0 and "flushed True" in out and "no study" not in err and "notice None" in out
                      and "notice after close None" in out,
                      f"run {run!r}, a study's proxy: no such warning, pub.notice None", out + err)
        near_socket(tmp)
        reused_name(tmp, ep)
        control_name(tmp, ep)
        check(dm.stop() == 0, "daemon stopped")
    finally:
        harness.teardown(dm, tmp)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
