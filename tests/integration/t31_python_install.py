#!/usr/bin/env python3
"""t31_python_install.py: the Python package, installed, finds libwdrift.so by itself.

As a user would install it, and with no WDRIFT_LIB, from a directory
outside the checkout, the package imports, loads the right library and
publishes a snapshot that a real wdriftd acks:

- make install PREFIX=P: the package in P/lib/python3.X/dist-packages
  (named by PYTHONPATH), the library from P/lib, the daemon from P/bin;
- pip install --no-build-isolation --no-index ./python in a
  --system-site-packages venv: offline, the library copied into the
  package, and nothing left behind in python/;
- the checkout itself (PYTHONPATH=python): the library from build/;
- none of these: an error that names every place looked;
- make install DESTDIR=D PREFIX=/usr/local: the package where Debian's
  Python looks by default; make uninstall takes it away again.

Exits 77 when venv, pip, setuptools or wheel are missing (make deps installs
them). The daemon is stopped by pid and the temp dir removed, also on failure.
"""
import filecmp
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import Daemon, check, summary  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
BUILD_ABS = os.path.abspath(os.path.join(REPO, BUILD))
PYDIR = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/dist-packages"

# What a training job does, run by the Python under test: publish one
# snapshot, wait for its ack, and say which package and library it used.
JOB = r"""
import importlib, json, os, sys
import numpy as np
import wdrift
endpoint, run, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"package": os.path.dirname(os.path.abspath(wdrift.__file__))}
try:
    pub = wdrift.Publisher(endpoint, run)
except wdrift.WdriftError as e:
    out["error"] = str(e)
else:
    pub.publish(step, {"w": np.arange(1000, dtype=np.float32)})
    out["flushed"] = pub.flush(30)
    out["acked"] = pub.stats()["acked"]
    pub.close()
    out["lib"] = importlib.import_module("wdrift._lib").path
    with open("/proc/self/maps") as f:
        out["maps"] = sorted({l.split()[-1] for l in f if l.rstrip().endswith("/libwdrift.so")})
print(json.dumps(out))
"""


def run(cmd, cwd=REPO, env=None, timeout=300):
    """(exit status, stdout and stderr) of a command; never raises on failure."""
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def job_env(pythonpath):
    """The environment of a job: no WDRIFT_LIB, PYTHONPATH ours before what run.sh set (tests/asan)."""
    env = dict(os.environ)
    env.pop("WDRIFT_LIB", None)
    paths = [p for p in [pythonpath, env.get("PYTHONPATH")] if p]
    if paths:
        env["PYTHONPATH"] = ":".join(paths)
    else:
        env.pop("PYTHONPATH", None)
    return env


def job(python, pythonpath, cwd, endpoint, step, extra_env=None):
    """Runs JOB; its JSON report, or {"failed": output}."""
    env = job_env(pythonpath)
    env.update(extra_env or {})
    rc, out = run([python, "-c", JOB, endpoint, "base", str(step)], cwd=cwd, env=env, timeout=120)
    try:
        return json.loads(out.strip().splitlines()[-1]) if rc == 0 else {"failed": out}
    except (ValueError, IndexError):
        return {"failed": out}


def same(a, b):
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def check_job(r, package, lib, what, spool):
    check(same(r.get("package"), package), f"{what}: imports the package from {package}", r)
    check(same(r.get("lib"), lib) and [os.path.realpath(m) for m in r.get("maps", [])] == [os.path.realpath(lib)],
          f"{what}: loads {lib}, and no other libwdrift.so", r)
    check(r.get("flushed") is True and r.get("acked") == 1 and os.path.exists(spool),
          f"{what}: a snapshot published to wdriftd is acked and spooled", r)


def main():
    rc, out = run([sys.executable, "-c", "import ensurepip, venv, setuptools, wheel"])
    if rc != 0:
        print(f"SKIP: {sys.executable} has no venv (with ensurepip: pip), setuptools or wheel (make deps): {out.strip()}")
        return 77
    tmp = tempfile.mkdtemp(prefix="wdrift-t31-")
    elsewhere = os.path.join(tmp, "elsewhere")     # the jobs' working directory: not the checkout
    os.mkdir(elsewhere)
    prefix = os.path.join(tmp, "prefix")
    dm = Daemon(tmp)
    ep = f"ipc://{tmp}/run/ingest.sock"
    spool = lambda step: os.path.join(tmp, "var", "spool", "base", f"{step}.h5")  # noqa: E731
    try:
        # 1. make install PREFIX=P, and the daemon it installed
        rc, out = run(["make", "-s", "install", f"PREFIX={prefix}", f"BUILD={BUILD}"])
        check(rc == 0, f"make install PREFIX={prefix}", out)
        site = os.path.join(prefix, PYDIR)
        pkg = os.path.join(site, "wdrift")
        srcs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "python", "wdrift", "*.py")))
        check(bool(srcs) and sorted(os.listdir(pkg) if os.path.isdir(pkg) else []) == srcs,
              f"installs the package's modules in PREFIX/{PYDIR}/wdrift", f"{srcs} vs {pkg}")
        dm.write_config()
        harness.WDRIFTD = os.path.join(prefix, "bin", "wdriftd")
        check(dm.start() is not None, "the installed wdriftd starts and is ready")
        r = job(sys.executable, site, elsewhere, ep, 1)
        check_job(r, pkg, os.path.join(prefix, "lib", "libwdrift.so"), "make install, PYTHONPATH", spool(1))

        # 2. pip install ./python in a venv that sees Debian's numpy, offline
        venv = os.path.join(tmp, "venv")
        rc, out = run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        check(rc == 0, "a --system-site-packages venv is made", out)
        before = sorted(os.listdir(os.path.join(REPO, "python")))
        rc, out = run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index",
                       "./python"], env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
        check(rc == 0, "pip install --no-build-isolation --no-index ./python (offline)", out)
        after = sorted(os.listdir(os.path.join(REPO, "python")))
        check(after == before, "the build leaves python/ as it was (no build/, no egg-info)",
              f"before {before}, after {after}")
        vpkg = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "wdrift"))
        vlib = os.path.join(vpkg[0], "libwdrift.so") if vpkg else None
        check(vlib and os.path.exists(vlib) and filecmp.cmp(vlib, os.path.join(BUILD_ABS, "libwdrift.so"), shallow=False),
              f"the package carries a copy of {BUILD}/libwdrift.so", vpkg)
        r = job(os.path.join(venv, "bin", "python"), None, elsewhere, ep, 2)
        check_job(r, vpkg[0] if vpkg else None, vlib, "pip install in a venv", spool(2))

        # 3. the checkout, as make built it: the library from build/
        if os.path.realpath(BUILD_ABS) == os.path.realpath(os.path.join(REPO, "build")):
            r = job(sys.executable, os.path.join(REPO, "python"), elsewhere, ep, 3)
            check_job(r, os.path.join(REPO, "python", "wdrift"), os.path.join(REPO, "build", "libwdrift.so"),
                      "the checkout, PYTHONPATH=python", spool(3))
        else:
            print(f"ok {harness.n_ok + harness.n_fail + 1} - # SKIP the checkout's build/: BUILD is {BUILD}")
            harness.n_ok += 1

        # 4. nowhere to be found: the error names each place looked
        bare = os.path.join(tmp, "bare", "lib", "python3", "dist-packages")
        shutil.copytree(os.path.join(REPO, "python", "wdrift"), os.path.join(bare, "wdrift"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        missing = os.path.join(tmp, "no-such", "libwdrift.so")
        r = job(sys.executable, bare, elsewhere, ep, 4, {"WDRIFT_LIB": missing})
        err = r.get("error", "")
        import ctypes.util
        if ctypes.util.find_library("wdrift"):
            print(f"ok {harness.n_ok + harness.n_fail + 1} - # SKIP the error: the system has a libwdrift.so")
            harness.n_ok += 1
        else:
            places = [missing, os.path.join(bare, "wdrift", "libwdrift.so"),
                      os.path.join(tmp, "bare", "lib", "libwdrift.so"),
                      os.path.join(tmp, "bare", "lib", "python3", "build", "libwdrift.so"), "system"]
            check(err.startswith("cannot find libwdrift.so") and all(p in err for p in places),
                  "with no library anywhere, the error names every place looked", r)

        # 5. DESTDIR, PREFIX=/usr/local: where Debian's Python looks by default
        stage = os.path.join(tmp, "stage")
        rc, out = run(["make", "-s", "install", "PREFIX=/usr/local", f"DESTDIR={stage}", f"BUILD={BUILD}"])
        check(rc == 0, "make install PREFIX=/usr/local DESTDIR=D", out)
        staged = os.path.join(stage, "usr", "local", PYDIR)
        rc, out = run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"], cwd=elsewhere,
                      env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        check(os.path.isfile(os.path.join(staged, "wdrift", "__init__.py")) and
              f"/usr/local/{PYDIR}" in out.splitlines(),
              f"the package goes to D/usr/local/{PYDIR}, which Debian's Python searches unasked", out)
        r = job(sys.executable, staged, elsewhere, ep, 5)
        check_job(r, os.path.join(staged, "wdrift"), os.path.join(stage, "usr", "local", "lib", "libwdrift.so"),
                  "staged under DESTDIR", spool(5))
        rc, out = run(["make", "-s", "uninstall", "PREFIX=/usr/local", f"DESTDIR={stage}"])
        check(rc == 0 and not os.path.exists(os.path.join(staged, "wdrift")),
              "make uninstall DESTDIR=D removes the package", out)
        rc, out = run(["make", "-s", "uninstall", f"PREFIX={prefix}"])
        check(rc == 0 and not os.path.exists(pkg) and not os.path.exists(os.path.join(prefix, "lib", "libwdrift.so")),
              "make uninstall PREFIX=P removes the package and the library", out)
    finally:
        dm.stop()
        if harness.n_fail:
            try:
                print("# daemon log:\n# " + dm.log_text()[-4000:].replace("\n", "\n# "))
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
