#!/usr/bin/env python3
"""t65_output_signal.py: `-o FILE` is whole or not at all, also when the
command is interrupted. `wdrift export -o FILE` on a large log is sent
SIGINT (Ctrl-C), SIGTERM or SIGHUP while it writes FILE.tmp-PID: it dies of
that signal, and leaves neither FILE nor FILE.tmp-PID behind. Uninterrupted,
it writes FILE and nothing else."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402
import t63_report  # noqa: E402
from t64_export import WDRIFT  # noqa: E402


def interrupted(tmp, log, sig):
    out = os.path.join(tmp, f"{sig.name}.json")
    p = subprocess.Popen([WDRIFT, "export", "x", "--log", log, "--json", "-o", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tmpname = f"{os.path.basename(out)}.tmp-{p.pid}"
    deadline = time.time() + 60
    while p.poll() is None and time.time() < deadline:
        if os.path.exists(os.path.join(tmp, tmpname)):
            break
        time.sleep(0.002)
    seen = p.poll() is None
    if seen:
        p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    left = sorted(f for f in os.listdir(tmp) if f.startswith(os.path.basename(out)))
    if not seen:
        check(False, f"{sig.name}: export was caught writing {tmpname}", f"exit {p.returncode}: {err}")
        return
    check(p.returncode == -sig, f"{sig.name}: export dies of the signal", f"exit {p.returncode}: {err}")
    check(left == [], f"{sig.name}: neither the file nor its temporary file is left", left)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t65-")
    try:
        log = os.path.join(tmp, "big.h5")
        t63_report.synthetic(log, T=300, S=400)    # 378,750 rows: about a second of JSON
        out = os.path.join(tmp, "whole.json")
        r = subprocess.run([WDRIFT, "export", "x", "--log", log, "--json", "-o", out],
                           capture_output=True, text=True, timeout=120)
        left = sorted(f for f in os.listdir(tmp) if f.startswith("whole.json"))
        check(r.returncode == 0 and left == ["whole.json"], "uninterrupted: FILE, and no temporary file",
              f"exit {r.returncode}: {r.stderr} {left}")
        os.unlink(out)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            interrupted(tmp, log, sig)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
