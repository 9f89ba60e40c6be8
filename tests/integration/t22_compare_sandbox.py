#!/usr/bin/env python3
"""t22_compare_sandbox.py: `wdrift compare` and `wdrift send` read the user's
checkpoint files in a resource-limited child (docs/checkpoints.md#sandbox).

- The file on which libhdf5 1.10.8 loops forever (fuzz/hdf5-hangs/), as
  baseline, candidate, proxy and as the file sent: exit 1 within the
  deadline (WDRIFT_CKPT_TIMEOUT=1.5), one line on stderr naming the file and
  "timed out after 1.5 s", nothing on stdout.
- The files that crash libhdf5 (fuzz/hdf5-crashes/), as candidate and as
  the file sent: exit 1, one line naming the file, no reader left.
- A file whose 16 floats sit in one deflated 256 MiB chunk: libhdf5
  allocates the whole chunk to read them. Under WDRIFT_CKPT_MEMORY=64M,
  compare and send fail with "exceeded the memory limit of 64 MiB"; with
  the defaults it compares. (Skipped under ASan: no RLIMIT_AS there.)
- A tensor larger than the memory limit is refused by name.
- A reader child killed by a signal: "crashed with signal 6 (SIGABRT)".
- The wdrift process killed with SIGKILL while its child hangs: the child
  dies with it (no reader process left behind).
- After every command: no process of this test's files is left.
- Bad WDRIFT_CKPT_* values: exit 2, naming the variable.
- A candidate stored as it is read is mapped from the file itself, not
  copied; cut short while compare reads it (the process stopped once the
  file is mapped, the file truncated, the process let go): exit 1, one line
  naming the file, the dataset and "cut short", no result and no SIGBUS.
  Every try either gives that or, had the engine finished reading first,
  the same result as an uncut compare; at least one of 5 must cut. The
  same for `wdrift send`, whose cut tensor is never sent.
"""
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

WDRIFT = os.path.abspath(os.environ.get("WDRIFT") or
                         os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
HANG_SRC = os.path.abspath("fuzz/hdf5-hangs/h5hg-read-loop.h5")
CRASH_DIR = os.path.abspath("fuzz/hdf5-crashes")
ASAN = "address" in os.environ.get("WDRIFT_SANITIZE", "")


def wd(*args, env=None, timeout=60):
    t0 = time.monotonic()
    r = subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    r.took = time.monotonic() - t0
    return r


def processes_with(needle):
    """Pids of live processes whose command line mentions needle."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd:
            found.append(f"{pid} ({state}): {cmd.replace(chr(0), ' ')}")
    return found


# ASan's runtime in a crashing reader child says so on stderr itself, and so
# does the llvm-symbolizer it runs, when the child ends before it; two
# children that crash at once (compare X X: they list side by side) interleave
# their "AddressSanitizer:DEADLYSIGNAL" lines
ASAN_NOISE = ("AddressSanitizer", "LLVM ERROR:", "pure virtual method called",
              "terminate called", ":DEADLYSIGNAL")


def one_line_error(r, *needles):
    lines = [ln for ln in r.stderr.splitlines() if not (ASAN and ln.startswith(ASAN_NOISE))]
    return (r.returncode == 1 and not r.stdout and len(lines) == 1 and
            all(n in lines[0] for n in needles))


def detail(r):
    return f"exit {r.returncode} after {r.took:.2f} s\nstdout: {r.stdout}\nstderr: {r.stderr}"


def write_good(path, seed):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f["layers.0.w"] = rng.standard_normal((64, 32)).astype(np.float32)
        f["norm"] = rng.standard_normal(32).astype(np.float16)


def child_of(pid, timeout=10):
    """The pid of pid's first child, once it has one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.02)
    return None


def maps_file(pid, path):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any(line.rstrip("\n").endswith(" " + path) for line in f)
    except OSError:
        return False


def test_cut_short(tmp):
    n = 1 << 22
    rng = np.random.default_rng(7)
    base, cand = os.path.join(tmp, "cut-base.h5"), os.path.join(tmp, "cut.h5")
    a = rng.standard_normal(n).astype(np.float32)
    with h5py.File(base, "w") as f:
        f["w"] = a
    args = ["compare", base, cand, "--engine", "cpu", "--threads", "1", "--json"]
    cuts = 0
    for attempt in range(5):
        with h5py.File(cand, "w") as f:
            f["w"] = a + np.float32(1e-3)
        if attempt == 0:
            whole = wd(*args)
            check(whole.returncode == 0 and '"w"' in whole.stdout, "the uncut pair compares",
                  detail(whole))
        out, err, rc = run_cut(args, cand)
        lines = err.splitlines()
        if rc == 1:
            cuts += 1
            check(not out and len(lines) == 1 and f"'{cand}': dataset 'w'" in lines[0] and
                  ("cut short while it was read" in lines[0] or
                   "the file ends before the dataset" in lines[0]),
                  f"try {attempt}: cut under compare: one line, exit 1: {err.strip()}")
        else:
            check(rc == 0 and json.loads(out)["layers"] == json.loads(whole.stdout)["layers"],
                  f"try {attempt}: read whole before the cut: the uncut result "
                  f"(exit {rc}, {err.strip()})")
    check(cuts >= 1, f"at least one try cut the file under compare ({cuts} of 5)")

    # send: nothing of a cut tensor goes out (no daemon needed: it fails before the commit)
    cfg = os.path.join(tmp, "cut.yaml")
    with open(cfg, "w") as f:
        f.write("studies:\n  - name: s\n    baseline: base\n    candidates: [cand]\n")
    # a socket file that nothing accepts on: send checks that it is there, then
    # copies the file, waits for a daemon and says after 5 s that none listens
    # (with no file it stops at once)
    nobody = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    nobody.bind(os.path.join(tmp, "nobody.sock"))
    args = ["send", "-c", cfg, "--ingest", f"ipc://{tmp}/nobody.sock", "--run", "cand", "--step",
            "1", cand]
    cuts = 0
    for attempt in range(5):
        with h5py.File(cand, "w") as f:
            f["w"] = a
        out, err, rc = run_cut(args, cand, wait=30)
        if rc == 1 and "cut short" in err:
            cuts += 1
            check(len(err.splitlines()) == 1 and f"'{cand}': dataset 'w'" in err,
                  f"try {attempt}: cut under send: one line, exit 1: {err.strip()}")
        else:  # copied whole before the cut: then no daemon listens
            check(rc == 1 and len(err.splitlines()) == 1 and "nothing listens on the socket file" in err,
                  f"try {attempt}: copied whole first, then no daemon listens: exit {rc}, {err.strip()}")
    nobody.close()
    check(cuts >= 1, f"at least one try cut the file under send ({cuts} of 5)")


def run_cut(args, path, wait=120):
    """Runs wdrift ARGS, stops it once it maps path, cuts path to 4 KiB, lets it go: out, err, rc;
    rc None when it still ran wait seconds later (then killed)."""
    p = subprocess.Popen([WDRIFT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not maps_file(p.pid, path) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    mapped = p.poll() is None and maps_file(p.pid, path)
    if mapped:
        os.kill(p.pid, signal.SIGSTOP)
    os.truncate(path, 4096)
    if mapped:
        os.kill(p.pid, signal.SIGCONT)
    try:
        out, err = p.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return out, err, None
    return out, err, p.returncode


def test_hang(tmp, good):
    hang = os.path.join(tmp, "hang.h5")
    with open(HANG_SRC, "rb") as src, open(hang, "wb") as dst:
        dst.write(src.read())
    env = {"WDRIFT_CKPT_TIMEOUT": "1.5"}
    cases = {
        "compare: the baseline": ["compare", hang, good],
        "compare: the candidate": ["compare", good, hang],
        "compare: a proxy": ["compare", good, good, "--proxy", f"p={hang}"],
        "send": ["send", "--run", "r", "--step", "1", hang, "--ingest", "tcp://127.0.0.1:9"],
    }
    for what, args in cases.items():
        r = wd(*args, env=env)
        check(one_line_error(r, f"'{hang}'", "listing datasets: timed out after 1.5 s",
                             "WDRIFT_CKPT_TIMEOUT"),
              f"{what}: the hanging file fails in one line naming it", detail(r))
        check(1.5 <= r.took < 4, f"{what}: within the deadline ({r.took:.2f} s)", detail(r))
        left = processes_with(tmp)
        check(not left, f"{what}: no reader process left", "\n".join(left))
    return hang


def test_crashes(tmp, good):
    """Each file in fuzz/hdf5-crashes/ crashes libhdf5 (or, without ASan,
    reads past a buffer unnoticed): it costs only the reader child. Under
    ASan the child's report is about libhdf5, so it goes to a directory of
    this test's, not to the one tests/run.sh fails a test on."""
    env = {"WDRIFT_CKPT_TIMEOUT": "10"}
    if ASAN:    # log_path is read from both variables, UBSAN_OPTIONS last
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            opts = re.sub(r"(^|:)log_path=[^:]*", "", os.environ.get(var, ""))
            env[var] = f"{opts}:log_path={tmp}/hdf5-report".lstrip(":")
    crashes = sorted(glob.glob(os.path.join(CRASH_DIR, "*.h5")))
    check(len(crashes) >= 3, f"fuzz/hdf5-crashes/ holds the crash inputs ({len(crashes)})")
    for src in crashes:
        name = os.path.basename(src)
        r = wd("compare", src, src, env=env)
        check(one_line_error(r, f"'{src}'"), f"{name}: compare fails in one line naming it", detail(r))
        r = wd("send", "--run", "r", "--step", "1", src, "--ingest", "tcp://127.0.0.1:9", env=env)
        check(one_line_error(r, f"'{src}'"), f"{name}: send fails in one line naming it", detail(r))
        left = processes_with(src)
        check(not left, f"{name}: no reader process left", "\n".join(left))
    if not ASAN:
        r = wd("compare", good, os.path.join(CRASH_DIR, "h5hl-protect-null-memcpy.h5"), env=env)
        check("the reader crashed with signal 11 (SIGSEGV)" in r.stderr,
              "a SIGSEGV inside libhdf5 is named as such", detail(r))


def test_memory(tmp, good):
    if ASAN:
        check(True, f"# SKIP the memory limit: no RLIMIT_AS under -fsanitize={os.environ['WDRIFT_SANITIZE']}")
        return
    bomb = os.path.join(tmp, "bomb.h5")
    with h5py.File(bomb, "w") as f:
        f.create_dataset("w", shape=(16,), maxshape=(None,), chunks=(1 << 26,), dtype="f4",
                         compression="gzip", compression_opts=1)[:] = np.arange(16, dtype="f4")
    env = {"WDRIFT_CKPT_MEMORY": "64M"}
    for what, args in {"compare": ["compare", bomb, bomb],
                       "send": ["send", "--run", "r", "--step", "1", bomb,
                                "--ingest", "tcp://127.0.0.1:9"]}.items():
        r = wd(*args, env=env)
        check(one_line_error(r, f"'{bomb}'", "dataset 'w'", "exceeded the memory limit of 64 MiB",
                             "WDRIFT_CKPT_MEMORY"),
              f"{what}: a 256 MiB chunk under a 64 MiB limit fails in one line", detail(r))
    r = wd("compare", bomb, bomb, "--json")
    check(r.returncode == 0 and '"w"' in r.stdout, "the same file compares under the default limit",
          detail(r))


def test_too_large(tmp):
    big = os.path.join(tmp, "big.h5")
    with h5py.File(big, "w") as f:
        f["huge"] = np.zeros(5 << 20, np.float32)
    r = wd("compare", big, big, env={"WDRIFT_CKPT_MEMORY": "16M"})
    check(one_line_error(r, f"'{big}'", "dataset 'huge'", "its 20 MiB exceed the memory limit of 16 MiB"),
          "a 20 MiB tensor under a 16 MiB limit is refused by name", detail(r))


def test_signals(tmp, good, hang):
    env = dict(os.environ, WDRIFT_CKPT_TIMEOUT="30")
    # the baseline's reader is the first child, and the one that hangs
    p = subprocess.Popen([WDRIFT, "compare", hang, good], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    kid = child_of(p.pid)
    time.sleep(0.3)
    check(kid is not None and os.kill(kid, signal.SIGABRT) is None, f"found the reader child {kid}")
    out, err = p.communicate(timeout=30)
    check(p.returncode == 1 and f"'{hang}'" in err and "crashed with signal 6 (SIGABRT)" in err and
          len(err.splitlines()) == 1, "a reader killed by SIGABRT: one line naming the signal",
          f"exit {p.returncode}\nstderr: {err}")

    # the baseline's reader idles while the candidate's hangs: both must die with wdrift
    p = subprocess.Popen([WDRIFT, "compare", good, hang], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    kid = child_of(p.pid)
    time.sleep(0.3)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while processes_with(tmp) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = processes_with(tmp)
    check(kid is not None and not left, f"wdrift killed with SIGKILL: its reader {kid} died with it",
          "\n".join(left))


def test_env(good):
    for var, value in (("WDRIFT_CKPT_TIMEOUT", "soon"), ("WDRIFT_CKPT_MEMORY", "lots"),
                       ("WDRIFT_CKPT_MEMORY", "1M")):
        r = wd("compare", good, good, env={var: value})
        check(r.returncode == 2 and var in r.stderr and f"'{value}'" in r.stderr and not r.stdout,
              f"{var}={value}: a usage error naming it", detail(r))


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t22-")
    try:
        good = os.path.join(tmp, "good.h5")
        write_good(good, 1)
        r = wd("compare", good, good)
        check(r.returncode == 0 and "layers.0.w" in r.stdout, "a good file compares", detail(r))
        hang = test_hang(tmp, good)
        test_crashes(tmp, good)
        test_memory(tmp, good)
        test_too_large(tmp)
        test_signals(tmp, good, hang)
        test_env(good)
        test_cut_short(tmp)
    finally:
        for line in processes_with(tmp):  # never leave a hung reader behind
            os.kill(int(line.split()[0]), signal.SIGKILL)
        subprocess.run(["rm", "-rf", tmp])
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
