#!/usr/bin/env python3
"""t85_watch_drift.py: `wdrift watch` and `wdrift drift` as a day-to-day user runs them (issue 15).

watch: with no daemon it says so within 5 s, naming the endpoint and the
config; --endpoint names the events socket; a plain line per event stays
under 200 characters with long names and many runs ("…+N runs"), while
--json prints each event whole. drift: the summary rows of compare (equal to
compare --json's summary); a missing --step names the nearest steps; a
--layer that matches nothing is an error; --latest with --step is a usage
error; the reply says whether the step is complete, and which runs are
missing. The daemon's log lines carry an ISO 8601 timestamp, and none under
the journal.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
LONG = ["candidate-with-a-rather-long-name-for-a-training-run-number-%02d" % i for i in range(12)]
ALERT_NAME = "an-alert-whose-name-goes-on-and-on-for-the-sake-of-the-line-length-check"
EXTRA = f"""\
  - name: wide-study-with-a-long-name-to-see-how-the-watch-line-copes
    baseline: base
    candidates: [{", ".join(LONG)}]
    proxies: {{fp16: lowprec}}
  - name: two
    baseline: base
    candidates: [fa, fb]
    proxies: {{fp16: lowprec}}
alerts:
  - name: {ALERT_NAME}
    study: wide-study-with-a-long-name-to-see-how-the-watch-line-copes
    metric: w1
    threshold: 0.000000001
"""
WIDE = "wide-study-with-a-long-name-to-see-how-the-watch-line-copes"
TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d"


def wd(*args, env=None, timeout=30, cwd=None):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=dict(os.environ, **(env or {})))


def tensors(step, drift, seed):
    r = np.random.default_rng(1000 + step)
    base = {"layers.0.w": r.standard_normal(4000).astype(np.float32) * 0.02,
            "layers.1.w": r.standard_normal(1000).astype(np.float32) * 0.02,
            "emb": r.standard_normal(3000).astype(np.float32) * 0.02}
    g = np.random.default_rng(seed * 7919 + step)
    return {k: v + (g.standard_normal(v.shape) * drift).astype(np.float32) for k, v in base.items()}


def publish(pub, step, drift, seed):
    t = tensors(step, drift, seed)
    for name, v in t.items():
        pub.tensor(step, name, v, "f32")
    a = pub.commit(step, len(t))
    return a is not None and a.get("type") == "ack"


def no_daemon(tmp, cfg):
    """watch with nothing listening: exit 1 within 5 s, one line naming the endpoint (and the config)."""
    for args, names in ((["--endpoint", f"ipc://{tmp}/nothing.sock"], [f"ipc://{tmp}/nothing.sock", "--endpoint"]),
                        (["-c", cfg], [f"ipc://{tmp}/run/events.sock", cfg]),
                        # refused: said after a second, as the publisher says it, naming listen.events
                        (["--endpoint", "tcp://127.0.0.1:9"], ["nothing listens at tcp://127.0.0.1:9",
                                                               "listen.events?"])):
        t0 = time.time()
        r = wd("watch", *args, timeout=20)
        dt = time.time() - t0
        err = r.stderr.strip()
        check(r.returncode == 1 and dt < 5 and len(err.splitlines()) == 1 and all(n in err for n in names)
              and "is wdriftd running" in err,
              f"watch {' '.join(args)} with no daemon: exit 1 in {dt:.1f} s, naming {names} ({err})")


def wrong_socket(tmp, cfg):
    """A daemon without auth: the control socket given to watch, or the events socket to
    status, is named as the wrong socket type at once, with no CURVE hint; a missing ipc
    socket file is said at once (issue 15)."""
    ctl, ev = f"ipc://{tmp}/run/control.sock", f"ipc://{tmp}/run/events.sock"
    for args, want in ((["watch", "--endpoint", ctl], "not wdriftd's events socket"),
                       (["status", "--endpoint", ev], "not wdriftd's control socket")):
        t0 = time.time()
        r = wd(*args, timeout=20)
        dt, err = time.time() - t0, r.stderr.strip()
        check(r.returncode == 1 and want in err and "CURVE" not in err and "server-key" not in err and dt < 2,
              f"{' '.join(args[:1])} on the other socket: the socket type, no CURVE hint, {dt:.1f} s ({err})")
    missing = os.path.join(tmp, "other.yaml")
    with open(missing, "w") as f:
        f.write(open(cfg).read().replace("/run/control.sock", "/run/gone.sock"))
    t0 = time.time()
    r = wd("status", "-c", missing, timeout=20)
    dt, err = time.time() - t0, r.stderr.strip()
    check(r.returncode == 1 and f"no socket at {tmp}/run/gone.sock" in err and "CURVE" not in err and dt < 1
          and missing in err, f"status with no socket file: said at once, naming it and the config ({dt:.2f} s, {err})")


def lines_of(p, n, timeout=15):
    """The first n lines of p's stdout, or what came before the timeout."""
    out = []
    end = time.time() + timeout
    while len(out) < n and time.time() < end:
        line = p.stdout.readline()
        if not line:
            break
        out.append(line.rstrip("\n"))
    return out


def alert_numbers(ctx, tmp):
    """An alert's value beside its threshold: as many digits as tell them apart, and a count
    whole (a trial read "ratio 1 (threshold 1)" for 1.00054, and "nonfinite 1.02e+03"). The
    events come from a PUB socket of the test's, standing for a daemon: a value a hair above its
    threshold is not one a real study can be steered to."""
    ep = f"ipc://{tmp}/fake-events.sock"
    pub = ctx.socket(zmq.XPUB)     # it hears the watcher's subscription: no fixed wait for it
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(ep)
    w = subprocess.Popen([WDRIFT, "watch", "--endpoint", ep, "--count", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        check(pub.poll(15000) and pub.recv()[:1] == b"\x01", "the watcher subscribed")
        for v, th, m in ((1.00054, 1, "ratio"), (1024, 0, "nonfinite")):
            e = {"v": 1, "alert": "a", "state": "firing", "severity": "warning", "study": "st", "run": "fa",
                 "metric": m, "value": v, "threshold": th, "step": 10, "since": 0}
            pub.send_multipart([b"alert.a", json.dumps(e).encode()])
        out = w.communicate(timeout=15)[0]
    except subprocess.TimeoutExpired:
        w.kill()
        out = w.communicate()[0]
    finally:
        pub.close()
    check("ratio 1.001 (threshold 1, warning)" in out and "nonfinite 1024 (threshold 0, warning)" in out,
          "watch: an alert's value has the digits that tell it from its threshold, a count is whole", out)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t85-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    cfg = os.path.join(tmp, "wdrift.yaml")
    watchers = []
    try:
        dm.write_config(extra=EXTRA)
        no_daemon(tmp, cfg)
        alert_numbers(ctx, tmp)
        check(dm.start() is not None, "daemon ready", dm.log_text())
        ev = f"ipc://{tmp}/run/events.sock"
        wrong_socket(tmp, cfg)
        pubs = {r: Publisher(ctx, tmp, r) for r in ["base", "lowprec", "fa", "fb"] + LONG}
        ok = publish(pubs["base"], 10, 0.0, 0) and publish(pubs["lowprec"], 10, 0.002, 1)
        for i, r in enumerate(LONG[:-1]):
            ok = publish(pubs[r], 10, 0.0003 * (i + 1), 10 + i) and ok
        check(ok, "step 10 of the wide study acked by 13 of its 14 runs")
        end = time.time() + 30
        while time.time() < end:
            a = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": WIDE, "step": 10})
            if a and a.get("ok") and len(a["candidates"]) == len(LONG) - 1:
                break
            time.sleep(0.2)
        # Two watchers, then the last run: plain, with --endpoint and no config
        # (run from an empty directory, no -c), and --json with -c FILE.
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        plain = subprocess.Popen([WDRIFT, "watch", "--endpoint", ev, "--count", "2"], cwd=empty,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        full = subprocess.Popen([WDRIFT, "watch", "-c", cfg, "--json", "--topic", f"drift.{WIDE}",
                                 "--count", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watchers += [plain, full]
        time.sleep(1.0)
        check(plain.poll() is None and full.poll() is None, "watch --endpoint EP (no config) and -c FILE connect")
        check(publish(pubs[LONG[-1]], 10, 0.004, 99), "the last run of the wide study acked")
        got = lines_of(plain, 2)
        drift_lines = [x for x in got if x.startswith("drift ")]
        alert_lines = [x for x in got if x.startswith("alert ")]
        check(len(got) == 2 and all(len(x) < 200 for x in got),
              f"watch: every plain line is under 200 characters ({[len(x) for x in got]})", "\n".join(got))
        wide = [x for x in drift_lines if "step 10" in x and "…+" in x and "runs" in x]
        check(wide, "watch: the wide study's drift line names the step and cuts its runs with '…+N runs'",
              "\n".join(got))
        shown = wide[0].split(":", 1)[1].count(";") + 1 if wide else 0
        check(shown >= 3, f"watch: long run names are cut so that several runs fit ({shown} shown)",
              "\n".join(got))
        check(alert_lines and "firing" in alert_lines[0] and "…" in alert_lines[0],
              "watch: the alert line, with its long names cut, is one line", "\n".join(got))
        try:
            out, _ = full.communicate(timeout=15)
            e = json.loads(out.strip().splitlines()[0])
            ok = e["topic"] == f"drift.{WIDE}" and e["event"]["step"] == 10 and \
                set(LONG) | {"lowprec"} == set(e["event"]["runs"])
        except (subprocess.TimeoutExpired, IndexError, ValueError, KeyError) as x:
            ok, out = False, str(x)
        check(ok, "watch --json: the whole event, every one of its 13 runs", out[:2000])
        try:
            plain.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        check(plain.returncode == 0, f"watch --count 2 exits 0 ({plain.returncode})")

        # drift: study 'two' at step 10 complete, at step 20 not (fb and the proxy missing)
        ok = publish(pubs["fa"], 10, 0.0004, 2) and publish(pubs["fb"], 10, 0.0008, 3)
        ok = publish(pubs["base"], 20, 0.0, 0) and publish(pubs["fa"], 20, 0.0004, 2) and ok
        check(ok, "study two: steps 10 and 20 acked")
        end = time.time() + 20
        while time.time() < end:
            a = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "two", "step": 10})
            b = control(ctx, tmp, {"v": 1, "cmd": "drift", "study": "two", "step": 20})
            if a and a.get("ok") and {"fa", "fb"} <= set(a["candidates"]) and \
                    a["candidates"]["fa"]["layers"][0]["proxies"]["fp16"]["w1"] is not None and b and b.get("ok"):
                break
            time.sleep(0.2)
        r = wd("drift", "two", "--step", "10", "-c", cfg, "--json")
        d10 = json.loads(r.stdout) if r.returncode == 0 else {}
        check(d10.get("complete") is True and d10.get("missing") == [],
              f"drift --json: step 10 is complete ({d10.get('complete')}, {d10.get('missing')})", r.stderr)
        r = wd("drift", "two", "--step", "20", "-c", cfg, "--json")
        d20 = json.loads(r.stdout) if r.returncode == 0 else {}
        check(d20.get("complete") is False and sorted(d20.get("missing", [])) == ["fb", "lowprec"],
              f"drift --json: step 20 is not, fb and lowprec missing ({d20.get('missing')})", r.stderr)
        r = wd("drift", "two", "--latest", "-c", cfg)
        check(r.returncode == 0 and "step 20" in r.stdout and "incomplete" in r.stdout and "fb" in r.stdout
              and "lowprec" in r.stdout, "drift (table): the latest step says it is incomplete, naming the runs",
              r.stdout + r.stderr)
        r = wd("drift", "two", "--step", "10", "-c", cfg)
        check(r.returncode == 0 and "complete" in r.stdout and "incomplete" not in r.stdout and
              all(x in r.stdout for x in ("[all] weighted", "[all] median", "[all] max")),
              "drift (table): a complete step, and the summary rows of compare under each candidate", r.stdout)

        # the summary equals wdrift compare --json's, on the spool files
        spool = os.path.join(tmp, "var", "spool")
        same = True
        for run in ("fa", "fb"):
            c = wd("compare", f"{spool}/base/10.h5", f"{spool}/{run}/10.h5", "--proxy",
                   f"fp16={spool}/lowprec/10.h5", "--json")
            ref = json.loads(c.stdout)["summary"] if c.returncode == 0 else {}
            mine = d10.get("candidates", {}).get(run, {}).get("summary", {})
            for k in ("w1_weighted", "w1_median", "w1_max", "max_abs_diff", "numel", "tensors"):
                same = same and k in ref and abs(mine.get(k, -1) - ref[k]) <= 1e-12 * abs(ref[k])
            for k in ("w1_weighted", "ratio_weighted", "ratio_median", "ratio_max"):
                x, y = mine.get("proxies", {}).get("fp16", {}).get(k), ref.get("proxies", {}).get("fp16", {}).get(k)
                same = same and x is not None and y is not None and abs(x - y) <= 1e-12 * abs(y)
            if not same:
                print(f"# {run}: daemon {json.dumps(mine)}\n# compare {json.dumps(ref)}")
                break
        check(same, "drift --json: each candidate's summary equals wdrift compare --json's")
        r = wd("drift", "two", "--step", "10", "--layer", "layers.*", "-c", cfg, "--json")
        d = json.loads(r.stdout) if r.returncode == 0 else {}
        s = d.get("candidates", {}).get("fa", {}).get("summary", {})
        check(s.get("tensors") == 2 and s.get("numel") == 5000,
              f"drift --layer: the summary is over the matching tensors ({s.get('tensors')}, {s.get('numel')})")

        # errors
        r = wd("drift", "two", "--step", "15", "-c", cfg)
        err = r.stderr.strip()
        check(r.returncode == 1 and len(err.splitlines()) == 1 and "'two'" in err and "15" in err
              and "10 and 20" in err, f"drift --step 15: exit 1, naming the study and the nearest steps ({err})")
        r = wd("drift", "two", "--step", "99", "-c", cfg)
        check(r.returncode == 1 and "nearest is 20" in r.stderr, f"drift --step 99: the nearest is 20 ({r.stderr.strip()})")
        for extra in ([], ["--json"]):
            r = wd("drift", "two", "--step", "10", "--layer", "nothing.*", "-c", cfg, *extra)
            err = r.stderr.strip()
            # with --json the error is on stdout too, as JSON (cli.md, "Output")
            out = json.loads(r.stdout) if extra and r.stdout.strip() else None
            check(r.returncode == 1 and (out == {"ok": False, "error": err.split("error: ", 1)[-1]}
                                         if extra else r.stdout == "")
                  and "nothing.*" in err and "no tensor" in err
                  and "layers.0.w" in err, f"drift --layer matching nothing {' '.join(extra)}: exit 1 ({err})")
        r = wd("drift", "two", "--latest", "--step", "10", "-c", cfg)
        check(r.returncode == 2 and "--latest" in r.stderr and "--step" in r.stderr,
              f"drift --latest --step: usage error, exit 2 ({r.stderr.strip()})")
        r = wd("drift", "two", "--step", "10", "--latest", "-c", cfg)
        check(r.returncode == 2, "drift --step --latest (the other order): exit 2")
        r = wd("drift", "two", "--latest", "--step", "20", "-c", cfg)
        check(r.returncode == 2 and "exclusive" in r.stderr and "different" not in r.stderr,
              f"drift --latest --step LATEST: refused without claiming the steps differ ({r.stderr.strip()})")

        # log lines: a timestamp, then "wdriftd: LEVEL:"
        log = [x for x in dm.log_text().splitlines() if x.strip()]
        stamped = [x for x in log if re.match(TS + r" wdriftd: (error|warning|notice|info|debug): ", x)]
        check(log and len(stamped) == len(log),
              f"every daemon log line starts with an ISO 8601 time ({len(stamped)} of {len(log)})",
              "\n".join(x for x in log if x not in stamped)[:2000])
        check(dm.stop() == 0, "daemon stopped")
        # under the journal (JOURNAL_STREAM names stderr): "<N>" and no timestamp
        st = os.stat(os.path.join(tmp, "daemon.log"))
        before = len(dm.log_text())
        check(dm.start(env_extra={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}) is not None, "restart as under the journal")
        check(dm.stop() == 0, "stopped")
        jlog = [x for x in dm.log_text()[before:].splitlines() if x.strip()]
        check(jlog and all(re.match(r"<\d>", x) and not re.search(TS, x) for x in jlog),
              f"under the journal: '<N>' lines with no timestamp ({len(jlog)})", "\n".join(jlog[:5]))
    finally:
        for p in watchers:
            if p.poll() is None:
                p.kill()
                p.wait()
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
