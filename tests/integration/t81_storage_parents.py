#!/usr/bin/env python3
"""t81_storage_parents.py: storage.dir is created with its parents, as its comment says.

A new user pointed storage.dir at ./build/paper/var, whose parents did not
exist, and wdriftd stopped with "cannot create" (one mkdir, not mkdir -p).
Now the parents are made too, and a place that cannot be made is still
refused, naming storage.dir and the reason. A real wdriftd; stopped by
pid, the temp dir removed, also on failure.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import WDRIFTD, Daemon, check, summary, teardown  # noqa: E402


def main():
    if not os.path.exists(WDRIFTD):
        print(f"not ok 1 - {WDRIFTD} is not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="wdrift-t81-")
    dm = Daemon(tmp)
    try:
        cfg = dm.write_config()
        deep = os.path.join(tmp, "a", "b", "var")
        with open(cfg) as f:
            text = f.read().replace(f"dir: {tmp}/var", f"dir: {deep}")
        with open(cfg, "w") as f:
            f.write(text)
        check(dm.start() is not None, "wdriftd starts with storage.dir under parents that do not exist",
              dm.log_text())
        check(os.path.isdir(os.path.join(deep, "wal")), "the storage directory and its write-ahead log exist")
        dm.stop()

        with open(os.path.join(tmp, "file"), "w") as f:
            f.write("x")
        with open(cfg, "w") as f:
            f.write(text.replace(f"dir: {deep}", f"dir: {tmp}/file/var"))
        r = subprocess.run([WDRIFTD, "-c", cfg], capture_output=True, text=True, timeout=30)
        check(r.returncode != 0 and f"storage.dir '{tmp}/file/var': cannot create: Not a directory" in r.stderr,
              "a storage.dir under a file is refused, naming it and why", r.stderr)
    finally:
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
