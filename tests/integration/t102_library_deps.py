#!/usr/bin/env python3
"""t102: a training job that loads libwdrift.so loads no HDF5; the programs
carry theirs.

- libwdrift.so needs no libhdf5 (nor libyaml), directly or through another
  library: its dynamic section and the loader's closure (ldd); nor holds
  HDF5 or the checkpoint code itself (its exported symbols, nm -D).
- A Python process that loads the package's library, as a training job
  does, has no libhdf5, libcurl or libyaml mapped (/proc/self/maps).
- In a build with HDF5_STATIC=1 ($BUILD/.link: the default where
  libhdf5-dev's static library exists, not under a sanitizer), wdrift and
  wdriftd need no shared libhdf5 either, and `wdrift compare` still reads
  two HDF5 files (the checkpoint code is in them, from libwdrift-ckpt.a).
- Datasets compressed by a filter plugin (Debian's hdf5-filter-plugin: lz4,
  bz2) read right in either build: a plugin links the shared libhdf5, which
  then loads beside the static one in the reader child (docs/checkpoints.md).
  With no plugin to load (HDF5_PLUGIN_PATH an empty directory), the error
  names the filter and what to install, not a corrupt file.
"""
import json
import os
import subprocess
import sys
import tempfile
import shutil

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check, summary  # noqa: E402

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
LIB = os.path.join(BUILD, "libwdrift.so")
PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
UNWANTED = ("libhdf5", "libcurl", "libyaml")  # libgssapi is libzmq's


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
    return [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


def closure(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    return [l.split()[0] for l in out.splitlines() if l.strip()]


def unwanted(names):
    return [n for n in names if n.startswith(UNWANTED)]


def plugins(d):
    """lz4 (32004) and bz2 (307), chunked, through the plugins HDF5 finds by default."""
    rng = np.random.default_rng(102)
    x = (rng.integers(-4096, 4096, 50000) / 1024).astype(np.float32)  # x + 0.5 exact: W1 = 0.5
    for name, fid in (("lz4", 32004), ("bz2", 307)):
        a, b = os.path.join(d, f"{name}_a.h5"), os.path.join(d, f"{name}_b.h5")
        try:
            for path, v in ((a, x), (b, x + np.float32(0.5))):
                with h5py.File(path, "w") as f:
                    f.create_dataset("w", data=v, chunks=(5000,), compression=fid)
        except (ValueError, OSError) as e:
            check(False, f"h5py writes a {name}-compressed dataset (is hdf5-filter-plugin installed? make deps)",
                  str(e))
            continue
        r = subprocess.run([os.path.join(BUILD, "wdrift"), "compare", a, b, "--engine", "cpu", "--json"],
                           capture_output=True, text=True, timeout=60)
        w1 = json.loads(r.stdout)["layers"][0]["w1"] if r.returncode == 0 else None
        check(w1 == 0.5, f"wdrift compare reads {name}-compressed checkpoints (a filter plugin): W1 = 0.5",
              r.stdout + r.stderr)
        # the plugin not found: said as such, not as a corrupt file
        empty = os.path.join(d, "no-plugins")
        os.makedirs(empty, exist_ok=True)
        r = subprocess.run([os.path.join(BUILD, "wdrift"), "compare", a, b, "--engine", "cpu"],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, HDF5_PLUGIN_PATH=empty))
        check(r.returncode == 1 and f"its compression filter {fid}" in r.stderr and
              "hdf5-filter-plugin" in r.stderr and "HDF5_PLUGIN_PATH" in r.stderr and "corrupt" not in r.stderr,
              f"with no {name} plugin to load, compare names the filter and what to install", r.stderr)


def main():
    lib_needed, lib_closure = needed(LIB), closure(LIB)
    check(lib_needed and not unwanted(lib_needed),
          "libwdrift.so needs no libhdf5 or libyaml directly", " ".join(lib_needed))
    # a static libhdf5 linked into it would need no shared one: its symbols say
    syms = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True).stdout.split()
    inside = [w for w in syms if w.startswith(("H5", "wd_ckpt_", "wd_h5_"))]
    check(syms and not inside, "libwdrift.so holds no HDF5 or checkpoint code (nm -D)", " ".join(inside[:20]))
    check(lib_closure and not unwanted(lib_closure),
          f"libwdrift.so's closure ({len(lib_closure)} libraries) has no libhdf5, libcurl or libyaml",
          " ".join(lib_closure))

    # as a training job: the package loads the library; what is then mapped into the process
    probe = ("import sys, wdrift._lib as L\n"
             "L.load()\n"
             "maps = open('/proc/self/maps').read()\n"
             "print('LOADED ' + L.path if 'libwdrift.so' in maps else 'NOT LOADED')\n"
             f"print(' '.join(sorted({{w for w in {UNWANTED!r} if w in maps}})))\n")
    # run.sh's PYTHONPATH kept: under check-asan it brings the ASan runtime (tests/asan)
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""), WDRIFT_LIB=LIB)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and lines[:1] == ["LOADED " + LIB],
          "a Python process loads this build's libwdrift.so through the package", r.stdout + r.stderr)
    check(r.returncode == 0 and len(lines) >= 1 and (lines[1:] == [""] or lines[1:] == []),
          "that process maps no libhdf5, libcurl or libyaml", r.stdout + r.stderr)

    flags = open(os.path.join(BUILD, ".link")).read()  # the Makefile's LINK_STAMP
    for prog in ("wdrift", "wdriftd") if "HDF5_STATIC=1" in flags else ():
        c = closure(os.path.join(BUILD, prog))
        check(c and not [n for n in c if n.startswith(("libhdf5", "libcurl"))],
              f"{prog} (HDF5_STATIC=1) needs no shared libhdf5 or libcurl", " ".join(c))
    d = tempfile.mkdtemp(prefix="wdrift-t102-")
    try:
        a, b = os.path.join(d, "a.h5"), os.path.join(d, "b.h5")
        x = np.arange(1000, dtype=np.float32)
        with h5py.File(a, "w") as f:
            f["w"] = x
        with h5py.File(b, "w") as f:
            f["w"] = x + np.float32(2)
        r = subprocess.run([os.path.join(BUILD, "wdrift"), "compare", a, b, "--engine", "cpu", "--json"],
                           capture_output=True, text=True, timeout=60)
        w1 = json.loads(r.stdout)["layers"][0]["w1"] if r.returncode == 0 else None
        check(w1 == 2.0, "wdrift compare, with HDF5 linked in, reads both files: W1 = 2", r.stdout + r.stderr)
        plugins(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
