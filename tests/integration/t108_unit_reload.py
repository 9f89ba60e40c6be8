#!/usr/bin/env python3
"""t108_unit_reload.py: the systemd unit's reload fails when the daemon refuses the file.

A trial found `systemctl reload wdriftd` reporting success for a reload the
daemon refused: the unit's ExecReload sent SIGHUP, whose sender reads no
reply, and only a Prometheus rule 30 minutes later said the config was not
applied. The unit now runs `wdrift reload`, which asks over the control
socket and exits 1 with the daemon's error. Here the unit's own
ExecReload line (systemd/wdriftd.service.in, its paths pointed at this
build and a test config) runs against a real daemon: a changed valid file
exits 0 and says what changed; a YAML error and a key that needs a restart
exit 1 and name the file; the daemon keeps serving. `systemd-analyze
verify` passes on the unit where it is installed.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, check, summary, teardown  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.path.abspath(os.environ.get("BUILD", "build"))


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t108-")
    dm = Daemon(tmp)
    try:
        with open(os.path.join(ROOT, "systemd", "wdriftd.service.in")) as f:
            unit = f.read()
        cfg = dm.write_config()
        line = re.search(r"^ExecReload=(.*)$", unit, re.M)
        check(line is not None and "wdrift reload" in line.group(1), "the unit reloads with `wdrift reload`",
              line.group(0) if line else unit[:800])
        if not line:
            return summary()
        argv = shlex.split(line.group(1).replace("@BINDIR@", BUILD).replace("/etc/wdrift/wdrift.yaml", cfg))
        check(dm.start() is not None, "wdriftd ready")
        with open(cfg) as f:
            text = f.read()

        with open(cfg, "w") as f:
            f.write(text.replace("candidates: [fa]", "candidates: [fa, fb]"))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and "changed: fa (candidates)" in r.stdout, "a valid change: exit 0, what changed printed",
              r.stdout + r.stderr)

        with open(cfg, "w") as f:
            f.write(text.replace("candidates: [fa]", "candidates: [fa, fb"))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        check(r.returncode == 1 and cfg in r.stderr, "a YAML error: exit 1 (systemctl reload fails), the file named",
              r.stdout + r.stderr)

        with open(cfg, "w") as f:
            f.write(text.replace("budget: 256M", "budget: 128M"))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        check(r.returncode == 1 and re.search(r"wdrift\.yaml:\d+:\d+: memory\.budget: cannot change on reload",
                                              r.stderr) and "restart" in r.stderr,
              "a key that needs a restart: exit 1, FILE:LINE:COL, the key and the restart named",
              r.stdout + r.stderr)

        with open(cfg, "w") as f:
            f.write(text)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and dm.proc.poll() is None, "the file set back: exit 0; the daemon served throughout",
              r.stdout + r.stderr)

        analyze = shutil.which("systemd-analyze")
        if analyze:
            path = os.path.join(tmp, "wdriftd.service")
            with open(path, "w") as f:
                f.write(unit.replace("@BINDIR@", BUILD))
            r = subprocess.run([analyze, "verify", path], capture_output=True, text=True, timeout=60)
            bad = [x for x in (r.stdout + r.stderr).splitlines() if "wdriftd.service" in x]
            check(not bad, "systemd-analyze verify: nothing to say of the unit", "\n".join(bad))
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
