#!/usr/bin/env python3
"""t104_cli_other_daemon.py: a CLI that cannot reach its daemon names the wdriftd that runs.

A new user's trial started wdriftd with ./wdrift.yaml, then ran `wdrift
status` from another directory: the CLI found another config (the install
prefix's), asked "is wdriftd running?", and said nothing of the daemon that
was. Now, where the CLI reaches no daemon through the config it found (or
finds none), it names each wdriftd running with another config: its pid
and its -c file, made absolute from the daemon's working directory:
- no config found: the error names the running daemon;
- a config found (./config/wdrift.yaml) whose daemon is not running: the
  same;
- a daemon started with a relative -c is named by its absolute path;
- a daemon given no -c is named by the file its search found (its
  WDRIFT_CONFIG, ./config/wdrift.yaml in its directory, ...), and one that
  found none (the built-in config) by the --endpoint that reaches it, the
  ./run/ sockets it binds whole;
- the daemon of the config the CLI read is never named as another; with
  the right -c nothing is added, and status works.
Run alone (tests/run.sh's SERIAL): the checks that name a daemon by pid
need the daemons this test starts to be among the four named.
Real daemons (stopped by pid), the real CLI run from other directories;
temp dirs removed, also on failure.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CONFIG, Daemon, check, summary, teardown  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
WDRIFT = os.path.abspath(os.path.join(BUILD, "wdrift"))
WDRIFTD = os.path.abspath(os.path.join(BUILD, "wdriftd"))


def daemons():
    """The wdriftd processes on this machine (tests run in parallel: others may be up)."""
    n = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/comm") as f:
                n += f.read().strip() == "wdriftd"
        except OSError:
            pass
    return n


def wd(cwd, *args):
    env = {k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"}
    return subprocess.run([WDRIFT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def main():
    tmp = tempfile.mkdtemp(prefix="t104-")
    other = tempfile.mkdtemp(prefix="t104-cwd-")
    dm = Daemon(tmp)
    rel = None
    try:
        cfg = dm.write_config()
        check(dm.start() is not None, "daemon ready")
        pid = dm.proc.pid

        r = wd(other, "status")
        named = f"pid {pid} with -c {os.path.realpath(cfg)}"
        check(r.returncode == 1 and "no configuration" in r.stderr and "wdriftd runs as" in r.stderr
              and "give its config with -c FILE or WDRIFT_CONFIG" in r.stderr,
              "status from another directory, no config found: the running wdriftd is named", r.stderr)
        if daemons() <= 4:      # at most 4 are named: ours among them when no more run
            check(named in r.stderr, "... by its pid and its config's absolute path", r.stderr)

        # -c of a file that is not there (a typo, from another directory): the daemons are named
        r = wd(other, "status", "-c", "wdrift.yml")
        check(r.returncode == 1 and "wdrift.yml: cannot open: No such file or directory" in r.stderr
              and "wdriftd runs as" in r.stderr, "-c FILE missing: the running wdriftd is named", r.stderr)
        # WDRIFT_CONFIG naming a typo of the file beside it: named, as for -c
        env = {k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"}
        typo = os.path.join(tmp, "wdrift.yml")
        r = subprocess.run([WDRIFT, "status"], cwd=other, env=dict(env, WDRIFT_CONFIG=typo), capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 1 and f"WDRIFT_CONFIG names '{typo}', which does not exist: No such file or directory; "
              f"did you mean '{cfg}'?" in r.stderr and "wdriftd runs as" in r.stderr,
              "WDRIFT_CONFIG of a typo: did you mean, and the running wdriftd", r.stderr)

        # a config found in the working directory, whose daemon is not running
        os.makedirs(os.path.join(other, "config"))
        with open(os.path.join(other, "config", "wdrift.yaml"), "w") as f:
            f.write(CONFIG.format(d=other, extra="", level="info"))
        r = wd(other, "runs")
        check(r.returncode == 1 and "is wdriftd running?" in r.stderr and "wdriftd runs as" in r.stderr,
              "a config found (./config) with no daemon: the running wdriftd is named", r.stderr)
        if daemons() <= 4:
            check(named in r.stderr, "... by its pid and config", r.stderr)

        # a config the user chose (-c, WDRIFT_CONFIG) whose daemon is not running: they are told how
        # to start it, not sent to the other config's daemon (a trial's)
        mine = os.path.join(other, "mine.yaml")
        shutil.copy(os.path.join(other, "config", "wdrift.yaml"), mine)
        for how, args, extra in (("-c", ["-c", "mine.yaml"], {}), ("WDRIFT_CONFIG", [], {"WDRIFT_CONFIG": mine})):
            r = subprocess.run([WDRIFT, "runs", *args], cwd=other, env=dict(env, **extra), capture_output=True,
                               text=True, timeout=60)
            check(r.returncode == 1 and "is wdriftd running?" in r.stderr
                  and re.search(f"\\(wdriftd -c {re.escape(os.path.realpath(mine))} starts this config's daemon; "
                                "(another wdriftd runs|other wdriftd run) as", r.stderr)
                  and re.search(r"give (its|the) config with -c to ask (that one|the one meant)\)", r.stderr)
                  and "give its config with -c FILE" not in r.stderr,
                  f"{how} of a config with no daemon: how to start it, and how to ask the other daemon beside (an ops "
                  "trial had meant that one)", r.stderr)
            if daemons() <= 4:
                check(named in r.stderr, f"... {how}: the other daemon by its pid and config", r.stderr)

        # with the right config: it works, and nothing is added
        r = wd(other, "status", "-c", cfg)
        check(r.returncode == 0 and "wdriftd runs as" not in r.stdout + r.stderr, "status -c the daemon's config: works",
              r.stdout + r.stderr)

        # a daemon started with a relative -c, in its own directory
        reld = os.path.join(tmp, "rel")
        os.makedirs(os.path.join(reld, "run"))
        with open(os.path.join(reld, "wdrift.yaml"), "w") as f:
            f.write("listen:\n  ingest: ipc://./run/ingest.sock\n  control: ipc://./run/control.sock\n"
                    "  events: ipc://./run/events.sock\nstorage:\n  dir: ./var\n")
        log = open(os.path.join(reld, "log"), "wb")
        rel = subprocess.Popen([WDRIFTD, "-c", "wdrift.yaml"], cwd=reld, stdout=log, stderr=log)
        end = time.time() + 10
        while time.time() < end and not os.path.exists(os.path.join(reld, "run", "control.sock")):
            time.sleep(0.05)
        r = wd(other, "status")
        check(r.returncode == 1 and "wdriftd runs as" in r.stderr, "two daemons up: named", r.stderr)
        if daemons() <= 4:
            check(f"pid {rel.pid} with -c {os.path.join(os.path.realpath(reld), 'wdrift.yaml')}" in r.stderr
                  and named in r.stderr, "... both; the relative -c made absolute from its directory", r.stderr)
        # from the daemon's own config, the other is named, itself never
        shutil.rmtree(os.path.join(other, "config"))
        r = wd(other, "status", "-c", os.path.join(reld, "wdrift.yaml"))
        check(r.returncode == 0, "status -c the relative daemon's config (absolute): works", r.stderr)
        # its socket file gone (removed by hand): the daemon of this config is not "another"
        os.unlink(os.path.join(reld, "run", "control.sock"))
        r = wd(other, "status", "-c", os.path.join(reld, "wdrift.yaml"))
        check(r.returncode == 1 and "no socket" in r.stderr and f"pid {rel.pid} " not in r.stderr,
              "the daemon of the config read is never named as another", r.stderr)
        # ... but as its own, running: told to start it, the user started a second (a review's)
        check(f"(this config's wdriftd runs, as pid {rel.pid}, but did not answer)" in r.stderr
              and "starts this config's daemon" not in r.stderr,
              "... it is said to run, and not to be started", r.stderr)
        rel.terminate()
        rel.wait(timeout=15)
        r = wd(other, "status", "-c", os.path.join(reld, "wdrift.yaml"))
        check(r.returncode == 1 and "is wdriftd running?" in r.stderr and f"pid {rel.pid} " not in r.stderr,
              "its daemon stopped: the stopped one is not named", r.stderr)
        # ... and its socket's directory, there without the socket, is said to be its own: no socket of
        # the same name elsewhere (the test daemon's) is guessed at (a trial was sent to other projects')
        check(f"no socket at {os.path.realpath(reld)}/run/control.sock" in r.stderr
              and "its directory is there, as this config's wdriftd leaves it when it stops): is wdriftd running?"
              in r.stderr and "a socket of that name listens" not in r.stderr,
              "... its own socket directory, there: no other socket guessed at", r.stderr)
        if daemons() <= 4:
            check(named in r.stderr, "... the one still running is", r.stderr)

        # a daemon started with no -c, in a directory with ./config/wdrift.yaml: named by the
        # file its search found; from that directory (the CLI finds the same file) never
        srch = os.path.join(tmp, "searched")
        os.makedirs(os.path.join(srch, "config"))
        os.makedirs(os.path.join(srch, "run"))
        with open(os.path.join(srch, "config", "wdrift.yaml"), "w") as f:
            f.write(f"listen:\n  ingest: ipc://{srch}/run/ingest.sock\n  control: ipc://{srch}/run/control.sock\n"
                    f"  events: ipc://{srch}/run/events.sock\nstorage:\n  dir: {srch}/var\n")
        env = {k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"}
        rel = subprocess.Popen([WDRIFTD], cwd=srch, env=env, stdout=log, stderr=log)
        end = time.time() + 10
        while time.time() < end and not os.path.exists(os.path.join(srch, "run", "control.sock")):
            time.sleep(0.05)
        r = wd(other, "status")
        if daemons() <= 4:
            check(f"pid {rel.pid} with {os.path.realpath(srch)}/config/wdrift.yaml (found by its search)" in r.stderr,
                  "a daemon given no -c: named by the config its search found", r.stderr)
        os.unlink(os.path.join(srch, "run", "control.sock"))
        r = wd(srch, "status")
        check(r.returncode == 1 and "no socket" in r.stderr and f"pid {rel.pid} " not in r.stderr
              and f"(this config's wdriftd runs, as pid {rel.pid}, but did not answer)" in r.stderr,
              "... and not as another from its own directory, where the CLI finds the same file, but as "
              "its own", r.stderr)
        rel.terminate()
        rel.wait(timeout=15)

        # a daemon given no -c that found no file (the built-in config), started in another directory:
        # it binds its ./run/ sockets whole, so /proc/net/unix says where; the CLI names it by its
        # --endpoint, not "give its config with -c" (it has none: a trial's could not reach it)
        bare = os.path.realpath(os.path.join(tmp, "bare"))
        os.makedirs(bare)
        rel = subprocess.Popen([WDRIFTD], cwd=bare, env=env, stdout=log, stderr=log)
        sock = os.path.join(bare, "run", "control.sock")
        end = time.time() + 10
        while time.time() < end and not os.path.exists(sock):
            time.sleep(0.05)
        with open("/proc/net/unix") as f:
            listed = f.read()
        check(f" {sock}\n" in listed, f"the built-in config's ./run/control.sock is bound whole: {sock}",
              "\n".join(x for x in listed.splitlines() if "bare" in x))
        with open(os.path.join(reld, "log")) as f:
            builtin = "running on the built-in config" in f.read()
        r = wd(other, "status")
        if builtin and daemons() <= 4:   # else a config of this machine's (/etc/wdrift) was found
            check(f"pid {rel.pid} on the built-in config (no file found), started in {bare}: --endpoint "
                  f"ipc://{sock} reaches it" in r.stderr, "the CLI names it by its --endpoint", r.stderr)
        r = wd(other, "status", "--endpoint", f"ipc://{sock}")
        check(r.returncode == 0, "... which reaches it", r.stdout + r.stderr)
        rel.terminate()
        rel.wait(timeout=15)
        check(not os.path.exists(sock), "its socket file is removed at its stop", os.listdir(os.path.dirname(sock)))

        # -c of a typo, relative, in the daemon's directory: the file meant is named
        r = wd(tmp, "status", "-c", "wdrift.yml")
        check(r.returncode == 1 and "wdrift.yml: cannot open: No such file or directory; did you mean "
              "'wdrift.yaml'?" in r.stderr, "-c wdrift.yml beside wdrift.yaml: did you mean it", r.stderr)
    finally:
        if rel and rel.poll() is None:
            rel.kill()
            rel.wait()
        shutil.rmtree(other, ignore_errors=True)
        teardown(dm, tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
