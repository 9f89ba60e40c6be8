#!/usr/bin/env python3
"""t84_config_discovery.py: the CLI finds its daemon (docs/config.md, "Which file").

- A config with relative ipc:// endpoints: the daemon, started in another
  directory, binds them beside the file; `wdrift status -c /abs/wdrift.yaml`
  from / reaches it and says which file it read.
- WDRIFT_CONFIG names the file; one naming a missing file is an error
  that names it, for wdrift and wdriftd alike, not a fall back.
- A copy of wdrift under PREFIX/bin finds PREFIX/etc/wdrift/wdrift.yaml.
- `wdrift reload`: what changed (studies, alerts, keys), in a table and in
  --json; a broken file is refused with FILE:LINE:COL and exit 1 while
  the old config keeps serving; so is a change to a restart key.
- wdriftd started where no config is found warns, naming where it looked,
  where its files go and the --endpoint the CLI reaches it at.
- A relative storage.dir is said with the absolute path it names (start-up
  log, --check-config, --print-config); the reload log line gives each
  key from and to.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, check  # noqa: E402

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
WDRIFT = os.path.join(BUILD, "wdrift")

BASE = """\
listen:
  ingest: ipc://./run/ingest.sock
  control: ipc://./run/control.sock
  events: ipc://./run/events.sock
storage:
  dir: {d}/var
memory:
  budget: 256M
limits:
  max_message: 64M
studies:
  - name: fa
    baseline: base
    candidates: [fa]
    proxies: {{fp16: lowprec}}
"""
MORE = """\
  - name: fa2
    baseline: base
    candidates: [fa2]
alerts:
  - name: fa2-w1
    study: fa2
    metric: w1
    threshold: 0.5
log:
  level: info
"""


def wd(*args, cwd="/", env=None, exe=WDRIFT):
    e = {k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"}
    e.update(env or {})
    e.setdefault("WDRIFT_TIMEOUT_MS", "500")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=e)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t84-")
    cfgdir = os.path.join(tmp, "cfg")
    os.makedirs(cfgdir)
    dm = Daemon(tmp)
    cfg = os.path.join(tmp, "wdrift.yaml")	# Daemon starts on this one
    try:
        with open(cfg, "w") as f:
            f.write(BASE.format(d=tmp))
        elsewhere = os.path.join(tmp, "elsewhere")
        os.makedirs(elsewhere)
        here = os.getcwd()
        os.chdir(elsewhere)	# the daemon's working directory: not the config's
        try:
            ready = dm.start()
        finally:
            os.chdir(here)
        check(ready is not None, "wdriftd starts on a config with relative ipc:// endpoints", dm.log_text())
        check(os.path.exists(os.path.join(tmp, "run", "control.sock")) and
              not os.path.exists(os.path.join(elsewhere, "run")),
              "its sockets are beside the config file, not in the daemon's working directory",
              dm.log_text())

        r = wd("status", "-c", cfg)
        check(r.returncode == 0 and f"cli config {cfg}" in r.stdout,
              "wdrift status -c /abs/wdrift.yaml from / reaches it, and names the file it read",
              r.stdout + r.stderr)
        r = wd("status", "--json", env={"WDRIFT_CONFIG": cfg})
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        check(o.get("cli_config") == cfg and o.get("config") == cfg,
              "WDRIFT_CONFIG names the file; --json has cli_config, and the daemon's own file "
              "(absolute)", r.stdout + r.stderr)

        missing = os.path.join(tmp, "nope.yaml")
        r = wd("status", env={"WDRIFT_CONFIG": missing})
        check(r.returncode == 1 and f"WDRIFT_CONFIG names '{missing}', which does not exist" in r.stderr,
              "a WDRIFT_CONFIG naming a missing file is an error naming it", r.stderr)
        r = subprocess.run([harness.WDRIFTD, "--check-config"], capture_output=True, text=True,
                           cwd="/", env=dict(os.environ, WDRIFT_CONFIG=missing), timeout=30)
        check(r.returncode == 2 and missing in r.stderr, "for wdriftd too (exit 2)", r.stderr)
        r = subprocess.run([harness.WDRIFTD, "--check-config"], capture_output=True, text=True,
                           cwd="/", env=dict(os.environ, WDRIFT_CONFIG=cfg), timeout=30)
        check(r.returncode == 0 and r.stdout.startswith(f"{cfg}: ok"),
              "wdriftd without -c reads WDRIFT_CONFIG", r.stdout + r.stderr)
        # a FIFO as the config: refused at once, also by the look for its control socket
        fifo = os.path.join(tmp, "config.fifo")
        os.mkfifo(fifo)
        try:
            r = wd("status", env={"WDRIFT_CONFIG": fifo})
            check(r.returncode == 1 and "FIFO" in r.stderr and fifo in r.stderr,
                  f"WDRIFT_CONFIG naming a FIFO: exit 1 naming it, no hang ({r.stderr.strip()})")
        except subprocess.TimeoutExpired:
            check(False, "WDRIFT_CONFIG naming a FIFO: exit 1 naming it, no hang", "still running after 60 s")

        # an installed copy: PREFIX/bin/wdrift reads PREFIX/etc/wdrift/wdrift.yaml
        prefix = os.path.join(tmp, "prefix")
        for sub in ("bin", "lib", "etc/wdrift"):
            os.makedirs(os.path.join(prefix, sub))
        shutil.copy(WDRIFT, os.path.join(prefix, "bin", "wdrift"))
        shutil.copy(os.path.join(BUILD, "libwdrift.so"), os.path.join(prefix, "lib"))
        pcfg = os.path.join(prefix, "etc", "wdrift", "wdrift.yaml")
        with open(pcfg, "w") as f:
            f.write(f"listen:\n  control: ipc://{tmp}/run/control.sock\n  ingest: ipc://{tmp}/run/ingest.sock\n"
                    f"  events: ipc://{tmp}/run/events.sock\n")
        r = wd("status", exe=os.path.join(prefix, "bin", "wdrift"))
        check(r.returncode == 0 and f"cli config {pcfg}" in r.stdout,
              "an installed wdrift finds PREFIX/etc/wdrift/wdrift.yaml from /", r.stdout + r.stderr)
        os.unlink(pcfg)
        r = wd("status", exe=os.path.join(prefix, "bin", "wdrift"))
        check(r.returncode == 1 and "no configuration: none of ./config/wdrift.yaml, " + pcfg in r.stderr,
              "with none, it says where it looked", r.stderr)
        # ./config/wdrift.yaml found from its directory: watch names it as status does,
        # by its absolute path (it said config/wdrift.yaml, wrong from anywhere else)
        here = os.path.join(tmp, "here")
        os.makedirs(os.path.join(here, "config"))
        with open(os.path.join(here, "config", "wdrift.yaml"), "w") as f:
            f.write(f"listen:\n  events: ipc://{tmp}/nowhere/events.sock\n")
        r = wd("watch", cwd=here)
        check(r.returncode == 1 and f"(listen.events of {here}/config/wdrift.yaml)" in r.stderr,
              "watch names the config it found by its absolute path", r.stderr)
        # a wdrift.yaml in the working directory (as the README's first steps make) is not
        # searched for: named, with the -c that reads it
        near = os.path.join(tmp, "near")
        os.makedirs(near)
        open(os.path.join(near, "wdrift.yaml"), "w").close()
        r = wd("status", cwd=near, exe=os.path.join(prefix, "bin", "wdrift"))
        check(r.returncode == 1 and "(./wdrift.yaml is here, but is not searched for: -c wdrift.yaml reads it)"
              in r.stderr, "a ./wdrift.yaml is named as not searched for", r.stderr)
        # ...and so it is when the search found another file (`make install` puts one under
        # PREFIX/etc) whose daemon is not there: a trial's installed wdrift said only "is
        # wdriftd running?" beside the wdrift.yaml of the daemon that ran
        with open(pcfg, "w") as f:
            f.write(f"listen:\n  control: ipc://{tmp}/nowhere/control.sock\n  ingest: "
                    f"ipc://{tmp}/nowhere/ingest.sock\n  events: ipc://{tmp}/nowhere/events.sock\n")
        with h5py.File(os.path.join(near, "x.h5"), "w") as f:
            f["w"] = np.zeros(8, np.float32)
        for args, key in ((("status",), "control"), (("watch",), "events"),
                          (("send", "--run", "r", "--step", "1", "x.h5"), "ingest")):
            r = wd(*args, cwd=near, exe=os.path.join(prefix, "bin", "wdrift"))
            check(r.returncode == 1 and f"listen.{key} of {pcfg}" in r.stderr
                  and "(./wdrift.yaml is here, but is not searched for: -c wdrift.yaml reads it)" in r.stderr,
                  f"{args[0]}: the installed config's daemon absent, ./wdrift.yaml named too", r.stderr)
        r = wd("status", "-c", pcfg, cwd=near, exe=os.path.join(prefix, "bin", "wdrift"))
        check(r.returncode == 1 and "is not searched for" not in r.stderr, "... but not when -c names the file",
              r.stderr)
        os.unlink(pcfg)
        r = subprocess.run([harness.WDRIFTD, "--check-config"], capture_output=True, text=True, cwd=near,
                           timeout=30, env={k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"})
        check(r.returncode == 0 and "wdriftd: warning: " in r.stderr and "./wdrift.yaml is here" in r.stderr
              and f"running on the built-in config, whose relative paths are under {near}" in r.stderr
              and f"the CLI reaches it with `wdrift status --endpoint ipc://{near}/run/control.sock`" in r.stderr,
              "wdriftd says so too, before the built-in, with where its files go and how the CLI reaches it "
              "(a trial got only the first)", r.stderr)
        # started in a directory with no config at all (the wrong one, often): a warning
        # naming where it looked and where its files then go, not only a notice in the log
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        r = subprocess.run([harness.WDRIFTD, "--check-config"], capture_output=True, text=True, cwd=empty,
                           timeout=30, env={k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"})
        warn = [x for x in r.stderr.splitlines() if x.startswith("wdriftd: warning: no configuration: none of ")]
        check(r.returncode == 0 and len(warn) == 1 and "give -c FILE or set WDRIFT_CONFIG; running" in warn[0]
              and f"running on the built-in config, whose relative paths are under {empty}" in warn[0],
              "no config found: one warning, where it looked and where its files go", r.stderr)
        # ...and, started so, the endpoint the CLI reaches it at: the CLI, run in the
        # same directory, finds no config either (a trial's did not find the daemon)
        env = {k: v for k, v in os.environ.items() if k != "WDRIFT_CONFIG"}
        dp = subprocess.Popen([harness.WDRIFTD], cwd=empty, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        try:
            first = dp.stderr.readline()
            ep = f"ipc://{empty}/run/control.sock"
            check(first.startswith("wdriftd: warning: no configuration: ") and
                  f"`wdrift status --endpoint {ep}`" in first,
                  "wdriftd with no config: the warning gives the CLI's --endpoint", first)
            r = None
            for _ in range(100):
                r = subprocess.run([WDRIFT, "status", "--endpoint", ep], capture_output=True, text=True,
                                   cwd=empty, env=env, timeout=30)
                if r.returncode == 0:
                    break
                time.sleep(0.1)
            check(r.returncode == 0 and "up" in r.stdout, "that --endpoint reaches it", r.stdout + r.stderr)
        finally:
            dp.terminate()
            try:
                dp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dp.kill()
                dp.wait()
        rest = dp.stderr.read()
        dp.stderr.close()
        check(f"control: listening on {ep}\n" in rest and "listening on ipc://./" not in rest,
              "its log names the sockets whole, not ./run/... (a trial)", rest[-600:])

        # reload: what changed
        r = wd("reload", "-c", cfg)
        check(r.returncode == 0 and "nothing changed" in r.stdout, "reload of the same file: nothing changed",
              r.stdout + r.stderr)
        with open(cfg, "a") as f:
            f.write(MORE)
        r = wd("reload", "-c", cfg)
        check(r.returncode == 0 and "studies   added: fa2" in r.stdout and "alerts    added: fa2-w1" in r.stdout
              and "key       log.level: notice -> info" in r.stdout,
              "reload prints the study and alert added and the key changed", r.stdout + r.stderr)
        with open(cfg, "w") as f:
            f.write(BASE.format(d=tmp).replace("proxies: {fp16: lowprec}", "proxies: {fp16: lowprec2}"))
        r = wd("reload", "-c", cfg, "--json")
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        ch = o.get("changes", {})
        check(ch.get("studies") == {"added": [], "removed": ["fa2"],
                                    "changed": [{"name": "fa", "keys": ["proxies"]}]}
              and ch.get("alerts", {}).get("removed") == ["fa2-w1"]
              and {"key": "log.level", "from": "info", "to": "notice"} in ch.get("keys", []),
              "--json: studies removed and changed (with the key), alerts removed, keys from and to", r.stdout)
        log = dm.log_text()
        check("studies +0 -1 ~1, alerts +0 -1 ~0" in log, "the daemon's log line says the same",
              log[-2000:])

        # refused: a syntax error, with FILE:LINE:COL; the old config serves on
        with open(cfg, "a") as f:
            f.write("  - name: [\n")
        ep = f"ipc://{tmp}/run/control.sock"
        r = wd("reload", "-c", cfg, "--endpoint", ep)
        check(r.returncode == 1 and "reload refused, the old config stays" in r.stderr and
              re.search(re.escape(cfg) + r":17:1: syntax error", r.stderr),
              "a broken file: the daemon refuses with FILE:LINE:COL, exit 1",
              r.stderr)
        r = wd("reload", "-c", cfg)
        check(r.returncode == 1 and f"{cfg}:17:1:" in r.stderr and "nothing was reloaded" in r.stderr,
              "without --endpoint the CLI cannot read the file either, and says nothing was reloaded",
              r.stderr)
        # a file that is YAML but not a valid config (the trial's typo): every command names the
        # socket the daemon, still on its previous config, answers at; and that endpoint works
        with open(cfg) as f:
            good = f.read()
        with open(cfg, "w") as f:
            f.write(good.replace("  - name: [\n", "").replace("listen:", "bogus_key: 1\nlisten:", 1))
        r = wd("status", "-c", cfg)
        hint = re.search(r"asked all the same at its listen.control, (\S+): ", r.stderr)
        check(r.returncode == 0 and "wdrift: warning: " in r.stderr and "unknown key 'bogus_key'" in r.stderr and hint
              and hint.group(1) == ep and "not running: " in r.stdout and "a reload would refuse it" in r.stdout
              and "a reload would refuse this file until the error is fixed)" in r.stderr
              and "`wdrift status` says" not in r.stderr,
              "a config with an error: status warns, and asks the daemon at the file's control socket (absolute) "
              f"all the same, which says its reload would be refused (a trial's typo locked out every command; "
              f"{hint and hint.group(1)})", r.stdout + r.stderr)
        r = wd("reload", "-c", cfg)
        check(r.returncode == 1 and "unknown key 'bogus_key'" in r.stderr and "nothing was reloaded" in r.stderr
              and "asked all the same" not in r.stderr, "... but reload is refused by the CLI, as the daemon would",
              r.stderr)
        r = wd("status", "--endpoint", ep, "--json")
        check(r.returncode == 0 and '"engine"' in r.stdout,
              "and wdrift status --endpoint reaches the daemon, still serving", r.stderr)
        # the error is the endpoint itself: no hint offering it back (the new-user trial)
        with open(cfg, "w") as f:
            f.write(re.sub(r"control: ipc://", "control: icp://", good.replace("  - name: [\n", ""), count=1))
        r = wd("status", "-c", cfg)
        check(r.returncode == 1 and "bad endpoint 'icp://" in r.stderr and "it answers at" not in r.stderr,
              "a config whose listen.control is malformed: the error, without a hint naming it", r.stderr)
        with open(cfg, "w") as f:
            f.write(good)
        for extra in (["--endpoint", ep], []):
            r = wd("reload", "-c", cfg, "--json", *extra)
            try:
                o = json.loads(r.stdout)
            except ValueError:
                o = {}
            check(r.returncode == 1 and o.get("ok") is False and f"{cfg}:17:1:" in o.get("error", ""),
                  f"reload --json {' '.join(extra)} refused: JSON on stdout, ok false, the error, exit 1",
                  r.stdout + r.stderr)
        r = wd("studies", "--endpoint", ep, "--json")
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        names = [s.get("name") for s in o.get("studies", [])]
        check(names == ["fa"], "the old config still serves: study fa only", r.stdout + r.stderr)
        with open(cfg, "w") as f:
            f.write(BASE.format(d=tmp).replace("budget: 256M", "budget: 512M"))
        r = wd("reload", "-c", cfg)
        check(r.returncode == 1 and "memory.budget: cannot change on reload" in r.stderr,
              "a restart key is refused, exit 1", r.stderr)
        r = wd("status", "-c", cfg)
        check(r.returncode == 0, "and the daemon still answers", r.stderr)
        rel = os.path.relpath(cfg, os.path.join(tmp, "var"))
        r = subprocess.run([WDRIFT, "status", "-c", rel], capture_output=True, text=True, timeout=30,
                           cwd=os.path.join(tmp, "var"))
        check(r.returncode == 0 and f"cli config {os.path.realpath(cfg)}" in r.stdout and f"cli config {rel}\n" not in r.stdout,
              f"status -c {rel}: cli config is the absolute path", r.stdout + r.stderr)
        check(wd("reload", "--help").returncode == 0 and "FILE:LINE:COL" in wd("reload", "--help").stdout,
              "reload --help")
    finally:
        harness.teardown(dm, tmp)
    storage_and_reload_log()
    storage_beside_config()
    return harness.summary()


def relative_storage(tmp, sub):
    """The test config in tmp with storage.dir './var', and tmp/sub made, another working directory: (cfg, dir)."""
    cfg = os.path.join(tmp, "wdrift.yaml")
    with open(cfg, "w") as f:
        f.write(BASE.format(d=tmp).replace(f"dir: {tmp}/var", "dir: ./var"))
    work = os.path.join(tmp, sub)
    os.makedirs(work)
    return cfg, work


def storage_beside_config():
    """A relative storage.dir, the daemon restarted from another directory: it starts on a new, empty
    storage.dir, and says, in its log and in status, that the one beside the config holds a write-ahead log
    (a trial's restart from another directory looked like every result lost, a notice its only word)."""
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="wdrift-t84s-"))
    dm = Daemon(tmp)
    here = os.getcwd()
    try:
        cfg, work = relative_storage(tmp, "other")
        ck = os.path.join(tmp, "base.h5")
        with h5py.File(ck, "w") as f:
            f["w"] = np.arange(64, dtype=np.float32)
        os.chdir(tmp)
        check(dm.start() is not None, "wdriftd starts in the config's directory", dm.log_text()[-2000:])
        r = wd("send", "--run", "base", "--step", "1", ck, "-c", cfg)
        check(r.returncode == 0, "a snapshot sent", r.stdout + r.stderr)
        check(dm.stop() == 0, "stopped")
        check(not any("new here" in line for line in dm.log_text().splitlines()),
              "started in the config's directory: no warning", dm.log_text()[-2000:])
        os.chdir(work)
        before = len(dm.log_text())
        check(dm.start() is not None, "wdriftd starts again, in another directory", dm.log_text()[-2000:])
        log = dm.log_text()[before:]
        warning = (f"storage: './var' is {work}/var, new here (relative to the working directory), but {tmp}/var, "
                   f"the same path beside the config, holds a write-ahead log of ")
        check(warning in log and f"start it in {tmp}, or make storage.dir absolute" in log,
              "its log warns that the storage.dir beside the config holds the data, and how to start", log[-3000:])
        r = wd("status", "-c", cfg)
        check(r.returncode == 0 and f"           warning: {warning}" in r.stdout,
              "status says it under storage", r.stdout + r.stderr)
        r = wd("status", "-c", cfg, "--json")
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        check(str(o.get("storage_note", "")).startswith(warning), "status --json: storage_note", r.stdout)
        r = wd("drift", "fa", "-c", cfg)
        check(r.returncode == 1 and "no results for study 'fa' yet" in r.stderr and f"; and {warning}" in r.stderr,
              "drift's no-results error says it too (a trial's read 'has no snapshot')", r.stderr)
        for cmd in ("runs", "studies"):    # a trial's read their empty lists as every run lost
            r = wd(cmd, "-c", cfg)
            check(r.returncode == 0 and f"storage    warning: {warning}" in r.stdout, f"{cmd} says it under its table",
                  r.stdout + r.stderr)
            r = wd(cmd, "-c", cfg, "--json")
            o = json.loads(r.stdout) if r.returncode == 0 else {}
            check(str(o.get("storage_note", "")).startswith(warning), f"{cmd} --json: storage_note", r.stdout)
        check(dm.stop() == 0, "stopped")
        os.chdir(tmp)
        before = len(dm.log_text())
        check(dm.start() is not None, "started in the config's directory again", dm.log_text()[-2000:])
        r = wd("status", "-c", cfg, "--json")
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        check(r.returncode == 0 and "storage_note" not in o and "new here" not in dm.log_text()[before:],
              "back in the config's directory: no warning, and its runs are there", r.stdout)
        check(o.get("runs") == 1, "the run sent before is there", r.stdout)
        r = wd("runs", "-c", cfg, "--json")
        check(r.returncode == 0 and "storage_note" not in json.loads(r.stdout), "... and runs has no note", r.stdout)
    finally:
        os.chdir(here)
        harness.teardown(dm, tmp)


def storage_and_reload_log():
    """A relative storage.dir is said, with the absolute path it names, at start and by
    --check-config / --print-config; the reload log line gives each key from and to."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t84-")
    dm = Daemon(tmp)
    try:
        cfg, work = relative_storage(tmp, "work")
        note = (f"storage: './var' is relative to the working directory: {work}/var (an absolute "
                "storage.dir does not depend on where wdriftd starts)")
        for opt in ("--check-config", "--print-config"):
            r = subprocess.run([harness.WDRIFTD, "-c", cfg, opt], capture_output=True, text=True,
                               cwd=work, timeout=30)
            check(r.returncode == 0 and note in r.stderr and note not in r.stdout,
                  f"wdriftd {opt}: the relative storage.dir and its absolute path, on stderr", r.stderr)
        here = os.getcwd()
        os.chdir(work)
        try:
            ready = dm.start()
        finally:
            os.chdir(here)
        check(ready is not None and os.path.isdir(os.path.join(work, "var")), "wdriftd starts; var/ is in its "
              "working directory", dm.log_text())
        check(note in dm.log_text(), "its log says so, with the absolute path", dm.log_text()[-2000:])
        with open(cfg, "a") as f:
            f.write("log:\n  level: info\n")
        r = wd("reload", "-c", cfg)
        check(r.returncode == 0 and "key       log.level: notice -> info" in r.stdout, "reload: log.level changed",
              r.stdout + r.stderr)
        log = dm.log_text()
        check("keys: log.level: notice -> info" in log, "the daemon's reload log line gives the key from and to",
              log[-2000:])
        r = subprocess.run([harness.WDRIFTD, "-c", cfg, "--check-config"], capture_output=True, text=True,
                           cwd="/", timeout=30)
        check(r.returncode == 0 and "storage: './var' is relative to the working directory: /var " in r.stderr,
              "from /, the path named is /var", r.stderr)
        # killed: its socket files stay, and nothing answers there
        check(dm.stop(signal.SIGKILL) == -signal.SIGKILL, "SIGKILL")
        # told once the connections have been refused for a second (WD_HS_REFUSED_S), not
        # after the whole wait of the requests (which said "no connection got through")
        r = wd("status", "-c", cfg)
        check(r.returncode == 1 and "nothing listens on the socket file" in r.stderr
              and "SIGKILL" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
              f"status after the kill: the socket file is named as left behind, in one line "
              f"({r.stderr.strip()})")
        r = wd("watch", "-c", cfg, "--count", "1")
        check(r.returncode == 1 and "nothing listens on the socket file" in r.stderr,
              f"watch after the kill: the same ({r.stderr.strip()})")
    finally:
        harness.teardown(dm, tmp)


if __name__ == "__main__":
    sys.exit(main())
