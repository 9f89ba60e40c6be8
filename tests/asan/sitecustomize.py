"""sitecustomize for `make check-asan`: the ASan runtime in every Python process, and in no other.

tests/run.sh puts this directory on PYTHONPATH when $BUILD holds a sanitized
build, and sets WDRIFT_ASAN_RUNTIME to the shared ASan runtime.
Python itself is not built with ASan, yet it loads the sanitized libwdrift.so
through ctypes, which needs that runtime loaded first: LD_PRELOAD. The
preload must reach only Python:

- wdriftd, wdrift and the unit tests carry ASan statically; the shared runtime
  preloaded into them as well aborts them ("incompatible ASan runtimes");
- Chromium, h5dump, make and sh are not ours and must run as they are;
- detect_leaks=0, which Python needs (CPython leaves its own allocations for
  the OS to take back), must not switch off leak detection in our daemons.

So each Python process that starts without the runtime re-executes itself
once with it (a test's Python, and demo_train.py that a test or demo.sh
starts), and the re-executed process at once takes both settings back out of
os.environ: what it starts inherits the environment run.sh gave. Python's own
flags and the script's arguments pass through unchanged (sys.orig_argv).

Depends on nothing but the standard library; does nothing when
WDRIFT_ASAN_RUNTIME is unset.
"""
import os
import sys

_RT = os.environ.get("WDRIFT_ASAN_RUNTIME")
_LEAKS_OFF = ":detect_leaks=0"
_MARK = "WDRIFT_ASAN_PRELOADED"    # the pid that was re-executed: exec keeps it


def _preloaded():
    """Takes the runtime back out of the environment our children inherit."""
    del os.environ[_MARK]
    rest = os.environ["LD_PRELOAD"].split(":")[1:]
    if rest:
        os.environ["LD_PRELOAD"] = ":".join(rest)
    else:
        del os.environ["LD_PRELOAD"]
    opts = os.environ["ASAN_OPTIONS"][:-len(_LEAKS_OFF)]
    if opts:
        os.environ["ASAN_OPTIONS"] = opts
    else:
        del os.environ["ASAN_OPTIONS"]


def _reexec():
    env = dict(os.environ)
    env["LD_PRELOAD"] = _RT + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + _LEAKS_OFF
    env[_MARK] = str(os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable] + sys.orig_argv[1:], env)


if _RT:
    if os.environ.get(_MARK) == str(os.getpid()):
        _preloaded()
    else:
        _reexec()
