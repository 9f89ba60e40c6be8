#!/usr/bin/env python3
"""t82_metrics.py: the Prometheus /metrics endpoint (docs/metrics.md).

A real daemon with listen.metrics on a loopback port takes snapshots of a
study (a candidate, its baseline, an fp16 proxy; a NaN in one tensor) and
is scraped with curl. The body passes `promtool check metrics`; its
counters equal `wdrift status --json`, its drift summaries equal the drift
log's latest rows (h5py), its alert states equal the control socket's.
Bad and huge HTTP requests (wrong path, POST, a 1 MB URL and header, a
half request left open, garbage bytes) get an error or are closed, and the
daemon goes on serving. The endpoint listens on loopback only, and on
nothing unless configured; bad listen.metrics values are refused with
FILE:LINE:COL. The shipped Prometheus rules pass `promtool check rules`,
and every wdrift_ series the rules and the Grafana dashboard use exists.
A candidate ahead of its proxy keeps numeric ratios: those of the study's
latest complete step (wdrift_drift_complete_step), per tensor too; and
wdrift_comparisons_total counts comparison passes, as its HELP says.
Reloads as operators make them: a proxy added whose job has not started
keeps the ratios and the alerts' catch-up; a candidate taken out has no
ratio series; a mistyped baseline exports no stale row as current, and
`promtool test rules` fires WdriftStudyRunSilent on the scraped values.
"""
import json
import os
import re
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check, control, free_port  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

ALERTS = """\
alerts:
  - name: fa-vs-fp16
    study: fa
    metric: ratio
    proxy: fp16
    scope: max
    threshold: 1.0
  - name: fa-nan
    study: fa
    metric: nonfinite
    scope: tensors
    tensors: "layers.*"
    threshold: 0
"""


def write_config(dm, metrics=None, per_tensor=False):
    path = dm.write_config(extra=ALERTS)
    with open(path) as f:
        text = f.read()
    if metrics:
        text = text.replace("  events: ipc://", f"  metrics: {metrics}\n  events: ipc://", 1)
    if per_tensor:
        text += "metrics:\n  per_tensor: true\n"
    with open(path, "w") as f:
        f.write(text)
    return path


def curl(port, path="/metrics", *args):
    """(HTTP status or None, body) of a curl request."""
    r = subprocess.run(["curl", "-sS", "-m", "10", "-o", "-", "-w", "\n%{http_code}", *args,
                        f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
    body, _, code = r.stdout.rpartition("\n")
    return (int(code) if r.returncode == 0 and code.isdigit() else None), body


def parse(body):
    """{(name, ((label, value), ...)): float} of an exposition body; labels unescaped."""
    out = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            raise ValueError(f"bad line {line!r}")
        labels = tuple(sorted((k, re.sub(r'\\(.)', lambda x: "\n" if x.group(1) == "n" else x.group(1), v))
                              for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                                     m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def select(series, selector, values):
    """The series of a PromQL selector, NAME{label="v", label=~"re", ...}, its $variables given
    by values (anchored regexes, as Prometheus's)."""
    m = re.match(r'\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s*$', selector)
    name, body = m.group(1), m.group(2)
    matchers = [(k, op, re.sub(r"\$(\w+)", lambda x: values[x.group(1)], v))
                for k, op, v in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', body)]

    def ok(labels):
        d = dict(labels)
        for k, op, v in matchers:
            got = d.get(k, "")
            hit = re.fullmatch(v, got) is not None if op in ("=~", "!~") else got == v
            if hit != (op in ("=", "=~")):
                return False
        return True
    return [k for k in series if k[0] == name and ok(k[1])]


def get(series, name, **labels):
    return series.get((name, tuple(sorted(labels.items()))))


def snap(pub, step, drift, nan=False, f16=False):
    r = np.random.default_rng(step)
    for name, n in (("layers.0.w", 4000), ("emb", 3000)):
        v = (r.standard_normal(n) * 0.02).astype(np.float32)
        v = v + (np.random.default_rng(step + 7).standard_normal(n) * drift).astype(np.float32)
        if nan and name == "layers.0.w":
            v[5] = np.nan
        pub.tensor(step, name, v.astype(np.float16) if f16 else v, "f16" if f16 else "f32")
    return pub.commit(step, 2)


def wait_scrape(port, pred, timeout=20):
    end, s = time.time() + timeout, {}
    while time.time() < end:
        code, body = curl(port)
        if code == 200:
            s = parse(body)
            if pred(s):
                return s, body
        time.sleep(0.2)
    return s, ""


def latest_log_rows(path, run):
    """{kind: (step, w1, {label: ratio})} of the run's latest summary rows in a drift log."""
    with h5py.File(path, "r", swmr=True) as f:
        rows = f["rows"][:]
        runs = f["runs"][:].astype(str)
        labels = list(f["proxies"][:].astype(str))
    out = {}
    for r in rows:   # the last one written for (step, kind) is the current one
        if runs[r["run"]] != run or r["kind"] == 0:
            continue
        k = int(r["kind"])
        if k not in out or int(r["step"]) >= out[k][0]:
            out[k] = (int(r["step"]), float(r["w1"]), {lab: float(r["ratio"][i]) for i, lab in enumerate(labels)})
    return out


def same(a, b):
    return (a != a and b != b) or a == b


def raw(port, data, wait=5):
    """Sends data on a fresh connection; returns what came back before the server closed or wait passed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    got = b""
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        end = time.time() + wait
        while time.time() < end:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            got += b
    finally:
        s.close()
    return got


def serving(ctx, tmp, port, dm):
    code, body = curl(port)
    st = subprocess.run([WDRIFT, "status", "--json", "-c", os.path.join(tmp, "wdrift.yaml")],
                        capture_output=True, text=True, timeout=20)
    return dm.proc.poll() is None and code == 200 and "wdrift_runs" in body and st.returncode == 0


def main_flow():
    tmp = tempfile.mkdtemp(prefix="wdrift-t82-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    port = free_port()
    try:
        cfg = write_config(dm, metrics=f"127.0.0.1:{port}")
        check(dm.start() is not None, f"ready with listen.metrics: 127.0.0.1:{port}")
        # the metrics port given for the control or the ingest endpoint: said to be HTTP, at once (an ops
        # trial's CLI read a CURVE hint, and its job waited 30 s for "not wdriftd's ingest socket")
        ep = f"tcp://127.0.0.1:{port}"
        r = subprocess.run([WDRIFT, "status", "--endpoint", ep], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and f"{ep} is an HTTP server, not a ZeroMQ socket (wdriftd's listen.metrics, for "
              "Prometheus?): wdriftd's control socket is its listen.control" in r.stderr and "server_key" not in r.stderr,
              "status --endpoint at the metrics port: an HTTP server, not a key hint", r.stderr)
        job = ("import time, numpy as np, wdrift\np = wdrift.Publisher(%r, 'r')\n"
               "p.publish(1, {'w': np.zeros(4, np.float32)})\nt = time.time()\n"
               "while not p.diagnosis and time.time() - t < 20:\n    time.sleep(0.1)\n"
               "print('sure', p.diagnosis_sure, 'after %%.0f' %% (time.time() - t))\np.close(0)\n" % ep)
        r = subprocess.run([harness.PYTHON, "-c", job], capture_output=True, text=True, timeout=60,
                           env=harness.package_env())
        want = f"{ep} is an HTTP server, not a ZeroMQ socket (wdriftd's listen.metrics, for Prometheus?): wdriftd's " \
               "ingest socket is its listen.ingest"
        after = int(r.stdout.split("after ")[1]) if "after " in r.stdout else 99
        check(r.returncode == 0 and "sure True" in r.stdout and after <= 5 and r.stderr.count(want) == 1,
              f"a publisher at the metrics port: a sure diagnosis in {after} s, said once", r.stdout + r.stderr)
        base, low, fa = (Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa"))
        for step in (10, 20):
            snap(base, step, 0.0)
            snap(low, step, 0.0, f16=True)
            snap(fa, step, 0.01, nan=(step == 20))
        ack = snap(fa, 10, 0.01)                    # the same content again: a duplicate
        check(ack is not None and ack.get("duplicate") is True, f"a re-sent snapshot is acked as a duplicate ({ack})")
        fa.send_raw([b"{not json"])                 # an error reply, counted by code
        fa.recv()

        def settled(s):
            return (get(s, "wdrift_drift_step", study="fa", run="fa", role="candidate") == 20
                    and get(s, "wdrift_queue_depth", queue="compute") == 0
                    and get(s, "wdrift_queue_depth", queue="spool") == 0
                    and get(s, "wdrift_alert_state", alert="fa-vs-fp16", study="fa", run="fa") is not None
                    and get(s, "wdrift_comparisons_total") and get(s, "wdrift_comparisons_total") >= 4)
        s, body = wait_scrape(port, settled)
        check(body != "", "curl scrapes /metrics: step 20 compared, queues empty", body[-2000:])
        with open(os.path.join(tmp, "scrape.txt"), "w") as f:
            f.write(body)
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        check(r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(),
              "promtool check metrics: no errors, no lint", r.stdout + r.stderr)
        names = re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M)
        check(names and all(n.startswith("wdrift_") for n, _ in names)
              and all(n.endswith("_total") == (t == "counter") for n, t in names)
              and all(k[0].startswith("wdrift_") for k in s),
              f"every series starts with wdrift_; counters, and only they, end in _total ({len(names)} families)")

        # the counters against `wdrift status --json`, the daemon idle in between
        r = subprocess.run([WDRIFT, "status", "--json", "-c", cfg], capture_output=True, text=True, timeout=20)
        st = json.loads(r.stdout) if r.returncode == 0 else {}
        sn = st.get("snapshots", {})
        pairs = [
            ("wdrift_snapshots_received_total", sn.get("received")),
            ("wdrift_durable_snapshots", sn.get("durable")),
            ("wdrift_snapshots_duplicate_total", sn.get("duplicates")),
            ("wdrift_duplicate_tensors_total", sn.get("duplicate_tensors")),
            ("wdrift_snapshots_conflict_total", sn.get("conflicts")),
            ("wdrift_snapshots_pending", sn.get("pending")),
            ("wdrift_tensors_received_total", sn.get("tensors")),
            ("wdrift_messages_received_total", sn.get("messages")),
            ("wdrift_bytes_received_total", sn.get("bytes")),
            ("wdrift_memory_reserved_bytes", st.get("memory", {}).get("reserved")),
            ("wdrift_memory_budget_bytes", st.get("memory", {}).get("budget")),
            ("wdrift_engine_spare_bytes", st.get("memory", {}).get("engine_spares")),
            ("wdrift_config_pending", int(st["config_pending"] is not None) if "config_pending" in st else None),
            ("wdrift_runs", st.get("runs")),
            ("wdrift_spool_failures_total", st.get("spool_failures")),
        ]
        bad = [(n, get(s, n), v) for n, v in pairs if v is None or get(s, n) != v]
        check(st and not bad, f"counters, queues and memory equal wdrift status --json ({bad})", r.stdout + r.stderr)
        check(get(s, "wdrift_snapshots_received_total") == 7 and get(s, "wdrift_snapshots_durable_total") == 6
              and get(s, "wdrift_durable_snapshots") == 6 and get(s, "wdrift_snapshots_duplicate_total") == 1,
              "7 snapshots received, 6 durable, 1 duplicate")
        dropped = (get(s, "wdrift_snapshots_dropped_total", reason="idle") or 0) + \
            (get(s, "wdrift_snapshots_dropped_total", reason="room") or 0)
        errs = {k[1][0][1]: v for k, v in s.items() if k[0] == "wdrift_errors_total"}
        check(dropped == sn.get("dropped") and errs == {c: float(v) for c, v in st.get("errors", {}).items()}
              and sum(errs.values()) >= 1,
              f"dropped and errors by code equal status ({errs} vs {st.get('errors')})")
        check(get(s, "wdrift_queue_depth", queue="spool") == st.get("queues", {}).get("spool")
              and get(s, "wdrift_queue_depth", queue="compute") == st.get("queues", {}).get("compute"),
              "queue depths equal status")
        sp = st.get("spool", {})
        check(sp.get("files", 0) > 0 and get(s, "wdrift_spool_files") == sp.get("files")
              and get(s, "wdrift_spool_bytes") == sp.get("bytes")
              and get(s, "wdrift_spool_disk_budget_bytes") == sp.get("disk_budget")
              and get(s, "wdrift_retention_dropped_total") == sp.get("dropped_by_retention") == 0,
              "the spool's files, bytes, budget and retention drops equal status", str(sp))
        stu = st.get("studies", {})
        check(get(s, "wdrift_study_results", study="fa") == (0 if "fa" in stu.get("no_results", [1]) else 1) == 1
              and get(s, "wdrift_study_runs_silent", study="fa") == (1 if "fa" in stu.get("runs_silent", [1]) else 0)
              == 0, "study fa: results, and no silent run, as status says", str(stu))
        check(get(s, "wdrift_compute_seconds_total", ) and get(s, "wdrift_compute_seconds_total") > 0,
              f"compute seconds counted ({get(s, 'wdrift_compute_seconds_total')} s over "
              f"{get(s, 'wdrift_comparisons_total')} comparisons)")

        # drift summaries against the drift log
        log = latest_log_rows(os.path.join(tmp, "var", "drift", "fa.h5"), "fa")
        kinds = {1: "weighted", 2: "median", 3: "max"}
        ok = len(log) == 3
        for k, summary in kinds.items():
            step, w1, ratios = log.get(k, (None, None, {}))
            ok = ok and step == 20 and same(get(s, "wdrift_drift_w1", study="fa", run="fa", role="candidate",
                                                summary=summary), w1)
            ok = ok and same(get(s, "wdrift_drift_ratio", study="fa", run="fa", proxy="fp16", summary=summary),
                             ratios.get("fp16"))
            if not ok:
                print(f"# {summary}: log {log.get(k)}; scrape w1 "
                      f"{get(s, 'wdrift_drift_w1', study='fa', run='fa', role='candidate', summary=summary)}")
                break
        check(ok, "W1 and ratio summaries (weighted, median, max) equal the drift log's latest rows, exactly")
        plog = latest_log_rows(os.path.join(tmp, "var", "drift", "fa.h5"), "lowprec")
        check(plog and same(get(s, "wdrift_drift_w1", study="fa", run="lowprec", role="proxy", summary="max"),
                            plog[3][1])
              and get(s, "wdrift_drift_ratio", study="fa", run="lowprec", proxy="fp16", summary="max") is None,
              "the proxy's W1 is there too (role proxy), without a ratio")
        check(get(s, "wdrift_drift_nonfinite", study="fa", run="fa", kind="nan") == 1,
              "the NaN at step 20 shows in wdrift_drift_nonfinite")
        check(not any(k[0].startswith("wdrift_tensor_") for k in s),
              "no per-tensor drift series without metrics.per_tensor")

        # alert states against the control socket
        al = control(ctx, tmp, {"v": 1, "cmd": "alerts"})
        code = {"inactive": 0, "pending": 1, "firing": 2}
        want, ok = {}, al is not None and al.get("ok")
        for a in (al or {}).get("alerts", []):
            for i in a["instances"]:
                lab = dict(alert=a["name"], study=a["study"], run=i["run"])
                if "tensor" in i:
                    lab["tensor"] = i["tensor"]
                want[tuple(sorted(lab.items()))] = code[i["state"]]
        got = {k[1]: v for k, v in s.items() if k[0] == "wdrift_alert_state"}
        check(ok and want and got == want, f"alert instance states equal the alerts command's ({got} vs {want})")
        check(get(s, "wdrift_alert_unmatched", alert="fa-nan", study="fa") == 0,
              "a glob that matches: wdrift_alert_unmatched 0")
        check(get(s, "wdrift_alert_state", alert="fa-nan", study="fa", run="fa", tensor="layers.0.w") == 2
              and get(s, "wdrift_alert_rule_state", alert="fa-nan", study="fa", severity="warning") == 2
              and get(s, "wdrift_alert_threshold", alert="fa-nan", study="fa", metric="nonfinite",
                      scope="tensors") == 0
              and get(s, "wdrift_alert_threshold", alert="fa-vs-fp16", study="fa", metric="ratio", scope="max",
                      proxy="fp16") == 1.0,
              "a tensor-scope rule has per-tensor series (layers.0.w firing); rule state and thresholds")

        # bad and huge requests
        code, _ = curl(port, "/nope")
        check(code == 404, f"GET /nope: 404 ({code})")
        code, _ = curl(port, "/metrics", "-X", "POST", "-d", "x=1")
        check(code == 405, f"POST /metrics: 405 ({code})")
        got = raw(port, b"GET /metrics?" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        check(not got.startswith(b"HTTP/1.1 200"), f"a 1 MB URL: an error or closed ({got[:40]!r})")
        got = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (1 << 20) + b"\r\n\r\n")
        check(not got.startswith(b"HTTP/1.1 200"), f"a 1 MB header: an error or closed ({got[:40]!r})")
        got = raw(port, os.urandom(4096) + b"\r\n\r\n")
        check(not got.startswith(b"HTTP/1.1 200"), f"garbage bytes: an error or closed ({got[:40]!r})")
        half = socket.create_connection(("127.0.0.1", port), timeout=20)
        half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")     # and never the end of the headers
        t0 = time.time()
        check(serving(ctx, tmp, port, dm) and time.time() - t0 < 5,
              "while a half request hangs open: a scrape and wdrift status answer at once")
        try:
            closed = half.recv(100) is not None
        except (ConnectionResetError, socket.timeout):
            closed = False
        waited = time.time() - t0
        half.close()
        check(closed and waited < 16, f"the half request is closed by the server after its idle timeout ({waited:.1f} s)")
        check(serving(ctx, tmp, port, dm), "after all that, the daemon still serves /metrics and wdrift status")

        # loopback only, when so configured
        r = subprocess.run(["ss", "-Htln", f"sport = :{port}"], capture_output=True, text=True)
        check(r.returncode == 0 and f"127.0.0.1:{port}" in r.stdout and len(r.stdout.strip().splitlines()) == 1,
              f"ss: it listens on 127.0.0.1:{port} only ({r.stdout.strip()})")
        r = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
        addrs = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", r.stdout)
        if addrs:
            try:
                socket.create_connection((addrs[0], port), timeout=3).close()
                refused = False
            except OSError:
                refused = True
            check(refused, f"a connection to {addrs[0]}:{port}, not loopback, is refused")
        else:
            print("ok - # SKIP no non-loopback address on this host")

        # a reload may not change listen.metrics; metrics.per_tensor applies at once
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:
            f.write(text.replace(f"metrics: 127.0.0.1:{port}", f"metrics: 127.0.0.1:{port + 1}"))
        rl = control(ctx, tmp, {"v": 1, "cmd": "reload"})
        check(rl is not None and not rl.get("ok") and "listen.metrics" in rl.get("error", ""),
              f"a reload that changes listen.metrics is refused ({rl})")
        with open(cfg, "w") as f:
            f.write(text + "metrics:\n  per_tensor: true\n")
        rl = control(ctx, tmp, {"v": 1, "cmd": "reload"})
        code, body = curl(port)
        s = parse(body) if code == 200 else {}
        with h5py.File(os.path.join(tmp, "var", "drift", "fa.h5"), "r", swmr=True) as f:
            rows = f["rows"][:]
            tensors = f["tensors"][:].astype(str)
            runs = f["runs"][:].astype(str)
        latest = {}
        for r in rows:
            if r["kind"] == 0 and int(r["step"]) == 20:
                latest[(runs[r["run"]], tensors[r["tensor"]])] = (float(r["w1"]), float(r["ratio"][0]))
        ok = rl and rl.get("ok") and len(latest) == 4
        for (run, t), (w1, ratio) in latest.items():
            ok = ok and same(get(s, "wdrift_tensor_w1", study="fa", run=run, tensor=t), w1)
            if run == "fa":
                ok = ok and same(get(s, "wdrift_tensor_ratio", study="fa", run=run, tensor=t, proxy="fp16"), ratio)
        check(ok, "metrics.per_tensor: true on reload: each tensor's W1 and ratio equal the drift log's")

        # the shipped rules and dashboard use series that exist
        families = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
        rules = os.path.join(ROOT, "docs", "alertmanager", "wdrift-rules.yml")
        r = subprocess.run(["promtool", "check", "rules", rules], capture_output=True, text=True)
        check(r.returncode == 0 and "SUCCESS" in r.stdout, "promtool check rules docs/alertmanager/wdrift-rules.yml",
              r.stdout + r.stderr)
        with open(rules) as f:
            used = set(re.findall(r"\bwdrift_[a-z0-9_]+", f.read()))
        check(used and used <= families, f"the rules use only series /metrics has ({used - families})")
        # a run's conflicts series begins at its first conflict, which increase() alone never counts
        test = os.path.join(tmp, "conflicts-test.yml")
        with open(test, "w") as f:
            f.write(f"rule_files: [{rules}]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
                    "    input_series:\n      - series: 'wdrift_run_conflicts_total{run=\"fa\",instance=\"w\",job=\"wdrift\"}'\n"
                    "        values: '_ _ _ _ _ 1 1 1'\n    alert_rule_test:\n"
                    "      - {eval_time: 6m, alertname: WdriftRunConflicts, exp_alerts: []}\n")
        r = subprocess.run(["promtool", "test", "rules", test], capture_output=True, text=True)
        check(r.returncode != 0 and "got:[\n" in r.stdout + r.stderr and 'run="fa"' in r.stdout + r.stderr,
              "WdriftRunConflicts fires on a run's first conflict (its series new: increase() saw none)",
              r.stdout + r.stderr)
        # a candidate past one rounding of the baseline (a synthetic proxy) is every run that trains:
        # WdriftCandidateDriftsMoreThanProxy fires on a trained proxy's ratio only (a trial's fired on
        # round:bf16 at 4.4 while its proxy's was 0.66)
        ratio = lambda proxy, v: {("wdrift_drift_ratio", (("study", "fa"), ("run", "fa"), ("proxy", proxy),
                                                          ("summary", "weighted"))): v}
        fired, out = promtool_fires({**ratio("round:bf16", 4.43), **ratio("fp16", 0.66)},
                                    "WdriftCandidateDriftsMoreThanProxy", tmp)
        check(not fired, "WdriftCandidateDriftsMoreThanProxy: not on a synthetic proxy's ratio", out)
        fired, out = promtool_fires({**ratio("round:bf16", 0.5), **ratio("fp16", 1.5)},
                                    "WdriftCandidateDriftsMoreThanProxy", tmp)
        check(fired and 'proxy="fp16"' in out, "... and on a trained proxy's above 1", out)
        with open(os.path.join(ROOT, "docs", "grafana", "wdrift.json")) as f:
            dash = json.load(f)
        exprs = []

        def walk(o):
            if isinstance(o, dict):
                if isinstance(o.get("expr"), str):
                    exprs.append(o["expr"])
                for v in o.values():
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)
        walk(dash)
        used = set(re.findall(r"\bwdrift_[a-z0-9_]+", " ".join(exprs)))
        ds = [v for v in dash.get("templating", {}).get("list", []) if v.get("type") == "datasource"]
        # an import input no panel uses makes Grafana ask for a data source twice (a trial)
        text = json.dumps(dash)
        unused = [i["name"] for i in dash.get("__inputs", []) if "${" + i["name"] + "}" not in text]
        check(not unused, f"the Grafana dashboard declares no import input it does not use ({unused})")
        # several daemons scraped by one Prometheus: every series picked by the instance variable, so
        # that one daemon's panels are not another's too (an ops trial's dashboard had no filter)
        qdefs = [v.get("definition", "") for v in dash.get("templating", {}).get("list", [])
                 if v.get("type") == "query" and v.get("name") != "instance"]
        sels = re.findall(r"\bwdrift_[a-z0-9_]+(?:\{[^}]*\})?", " ".join(exprs + qdefs))
        bare = [x for x in sels if 'instance=~"$instance"' not in x]
        inst = [v for v in dash.get("templating", {}).get("list", []) if v.get("name") == "instance"]
        check(inst and inst[0].get("multi") and inst[0].get("includeAll") and not bare,
              f"the Grafana dashboard: an instance variable, and every series of it filtered by it ({bare})")
        # the complete step's series, which ratios come from, and a baseline that lags (an ops
        # trial found no panel of them)
        shown = {"wdrift_drift_complete_w1", "wdrift_drift_complete_step", "wdrift_study_runs_ahead"}
        check(shown <= used, f"the Grafana dashboard shows the complete step and runs ahead ({shown - used})")
        check(ds and exprs and used <= families and len(used) >= 8,
              f"the Grafana dashboard: a datasource variable, {len(exprs)} queries over {len(used)} "
              f"series that /metrics has ({used - families})")
        # the alert table's three queries, evaluated by promtool on the scraped alert series: one
        # row per instance not ok, with the same labels in each, so that the panel's merge joins
        # state, value and threshold (a trial: the raw series never merged, ok ones listed too)
        table = next(x for x in dash["panels"] if x.get("id") == 7)
        alert_series = {k: v for k, v in s.items() if k[0].startswith("wdrift_alert_") and v == v}
        rows = {}
        for (name, labels), v in alert_series.items():
            if name == "wdrift_alert_state" and v > 0:
                rows[labels] = v
        check(rows, "an alert instance is firing to fill the table", alert_series)
        thr = {(dict(k[1])["alert"], dict(k[1])["study"]): v for k, v in alert_series.items()
               if k[0] == "wdrift_alert_threshold"}
        want = {"A": {k: v for k, v in rows.items()},
                "B": {k: alert_series[("wdrift_alert_value", k)] for k in rows},
                "C": {k: thr[(dict(k)["alert"], dict(k)["study"])] for k in rows}}
        # two daemons with the same rule and study: a row for each, apart (a review: the table's
        # by and on lists dropped instance, and merged them into one row)
        two = ("w", "w2")
        want = {ref: {labels + (("instance", i),): v for labels, v in rows_of.items() for i in two}
                for ref, rows_of in want.items()}
        ok_all, outs = True, []
        for t in table["targets"]:
            fired, out = promtool_expr(alert_series, t["expr"].replace("$study", ".*").replace("$instance", ".*"),
                                       want[t["refId"]], tmp, two)
            ok_all = ok_all and fired
            outs.append(out)
        check(ok_all, "the alert table's queries give state, value and threshold of each instance not ok, "
              "with the same labels, each daemon's apart (promtool test rules)", "\n".join(outs))
        # a panel repeated per value of a variable has series for every value: the W1-against-step
        # xychart, of candidates only, repeated per run gave a proxy an empty panel (a trial's)
        variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
        anyval = {k: ".*" for k in variables}
        anyval["summary"] = "weighted"
        repeated = [x for x in dash["panels"] if x.get("repeat")]
        empty = []
        for panel in repeated:
            var = variables[panel["repeat"]]
            vm = re.match(r"label_values\((.*),\s*(\w+)\)$", var["definition"])
            vals = {dict(k[1]).get(vm.group(2)) for k in select(s, vm.group(1), anyval)}
            for val in vals:
                for t in panel["targets"]:
                    for sel in re.findall(r"wdrift_\w+\{[^}]*\}", t["expr"]):
                        if not select(s, sel, dict(anyval, **{panel["repeat"]: re.escape(val)})):
                            empty.append((panel["title"], val, sel))
        check(repeated and not empty,
              f"each repeated panel has series for every value of its variable (empty: {empty})")
        # WdriftAlertFiring: one alert per run firing a rule, with the rule's severity (per rule, a
        # second run firing added nothing: left alone by a trial); two daemons with the same study
        # and rule scraped by one Prometheus each fire theirs (a join on alert and study alone
        # failed as many-to-many, and fired nothing: a review's)
        fired, out = promtool_fires(alert_series, "WdriftAlertFiring", tmp, ("w", "w2"))
        got = {(m["alert"], m["study"], m["run"], m.get("severity"), m.get("instance"))
               for m in (dict(re.findall(r'(\w+)="([^"]*)"', x)) for x in re.findall(r"Labels:\{([^}]*)\}", out))}
        sev = {(dict(k[1])["alert"], dict(k[1])["study"]): dict(k[1])["severity"] for k in alert_series
               if k[0] == "wdrift_alert_rule_state"}
        want_alerts = {(d["alert"], d["study"], d["run"], sev[(d["alert"], d["study"])], i)
                       for d in (dict(k[1]) for k, v in alert_series.items() if k[0] == "wdrift_alert_state" and v == 2)
                       for i in ("w", "w2")}
        check(fired and want_alerts and got == want_alerts,
              f"WdriftAlertFiring fires once per run firing a rule, with its severity and instance ({sorted(got)})",
              out)
        # its variables too; the study list from a series every configured study has, so that a
        # study with no results yet can be picked (a trial: it came from wdrift_drift_step)
        qs = {v.get("name"): v.get("definition") or str(v.get("query"))
              for v in dash.get("templating", {}).get("list", []) if v.get("type") == "query"}
        vused = set(re.findall(r"\bwdrift_[a-z0-9_]+", " ".join(qs.values())))
        check(vused and vused <= families and "wdrift_study_results" in qs.get("study", ""),
              f"the dashboard's variables query series /metrics has, studies from wdrift_study_results ({qs})")
    finally:
        harness.teardown(dm, tmp, ctx)


def off_and_bad_config():
    tmp = tempfile.mkdtemp(prefix="wdrift-t82-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        cfg = write_config(dm)
        check(dm.start() is not None, "ready without listen.metrics")
        r = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True)
        mine = [l for l in r.stdout.splitlines() if f"pid={dm.proc.pid}," in l]
        check(r.returncode == 0 and not mine, f"without listen.metrics, the daemon listens on no TCP port ({mine})")
        dm.stop()
        cases = [("127.0.0.1:0", "the port must be 1 to 65535"), ("127.0.0.1:70000", "the port must be 1 to 65535"),
                 (":9464", "expected HOST:PORT"), ("9464", "expected HOST:PORT"),
                 ("example.com:9464", "the host must be an IPv4 address"), ("\"[::1:9464\"", "the host must be")]
        for value, why in cases:
            with open(cfg) as f:
                text = f.read()
            path = os.path.join(tmp, "bad.yaml")
            with open(path, "w") as f:
                f.write(text.replace("  events: ipc://", f"  metrics: {value}\n  events: ipc://", 1))
            r = subprocess.run([harness.WDRIFTD, "-c", path, "--check-config"], capture_output=True, text=True)
            check(r.returncode == 2 and re.search(r"bad\.yaml:\d+:\d+: listen\.metrics: ", r.stderr) and why in r.stderr,
                  f"listen.metrics: {value}: refused with FILE:LINE:COL ({r.stderr.strip()})")
        with open(path, "w") as f:
            f.write(text.replace("  events: ipc://", "  metrics: \"[::1]:9464\"\n  events: ipc://", 1))
        r = subprocess.run([harness.WDRIFTD, "-c", path, "--check-config"], capture_output=True, text=True)
        check(r.returncode == 0 and "warning" not in r.stderr, f"listen.metrics: [::1]:9464 is valid, "
              f"no warning ({r.stderr.strip()})")
        # off loopback: valid, and --check-config says what the start logs (a trial's check said "ok" alone)
        with open(path, "w") as f:
            f.write(text.replace("  events: ipc://", "  metrics: 0.0.0.0:9464\n  events: ipc://", 1))
        r = subprocess.run([harness.WDRIFTD, "-c", path, "--check-config"], capture_output=True, text=True)
        check(r.returncode == 0 and ": ok (" in r.stdout and "wdriftd: warning: listen.metrics: '0.0.0.0:9464' is "
              "not a loopback address: anyone who can reach it reads run names" in r.stderr,
              "listen.metrics: 0.0.0.0:9464: valid, and --check-config warns as the start does", r.stderr)
    finally:
        harness.teardown(dm, tmp, ctx)


def log_rows_at(path, run, step):
    """{kind: (w1, {label: ratio})} of run's rows at step in a drift log (the last written of each),
    kind 0 (tensors) as {tensor: (w1, {label: ratio})}."""
    with h5py.File(path, "r", swmr=True) as f:
        rows = f["rows"][:]
        runs = f["runs"][:].astype(str)
        tensors = f["tensors"][:].astype(str)
        labels = list(f["proxies"][:].astype(str))
    out = {0: {}}
    for r in rows:
        if runs[r["run"]] != run or int(r["step"]) != step:
            continue
        v = (float(r["w1"]), {lab: float(r["ratio"][i]) for i, lab in enumerate(labels)})
        if r["kind"] == 0:
            out[0][tensors[r["tensor"]]] = v
        else:
            out[int(r["kind"])] = v
    return out


def candidate_ahead():
    """A candidate ahead of its proxy: the ratios stay those of the latest complete step
    (numbers, not NaN), with wdrift_drift_complete_step saying which; W1 per run is its latest.
    wdrift_comparisons_total counts comparison passes, as its HELP says."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t82-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    port = free_port()
    try:
        write_config(dm, metrics=f"127.0.0.1:{port}", per_tensor=True)
        check(dm.start() is not None, "ready, metrics.per_tensor: true")
        base, low, fa = (Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa"))
        for step in (10, 20):
            snap(base, step, 0.0)
            snap(low, step, 0.0, f16=True)
            snap(fa, step, 0.01)
        for step in (30, 40):       # the proxy's job lags behind: no lowprec at 30, 40
            snap(base, step, 0.0)
            snap(fa, step, 0.01)

        def settled(s):
            return (get(s, "wdrift_drift_step", study="fa", run="fa", role="candidate") == 40
                    and get(s, "wdrift_queue_depth", queue="compute") == 0)
        s, body = wait_scrape(port, settled)
        check(body != "", "step 40 of base and fa compared, lowprec at 20", body[-2000:])
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
        check(r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(),
              "promtool check metrics: no errors, no lint", r.stdout + r.stderr)
        path = os.path.join(tmp, "var", "drift", "fa.h5")
        at20, at40 = log_rows_at(path, "fa", 20), log_rows_at(path, "fa", 40)
        check(get(s, "wdrift_drift_complete_step", study="fa") == 20,
              f"wdrift_drift_complete_step{{study=fa}} is 20 ({get(s, 'wdrift_drift_complete_step', study='fa')})")
        ok = len(at20) == 4 and len(at40) == 4
        for kind, summary in {1: "weighted", 2: "median", 3: "max"}.items():
            ratio = get(s, "wdrift_drift_ratio", study="fa", run="fa", proxy="fp16", summary=summary)
            ok = ok and ratio == ratio and ratio == at20[kind][1]["fp16"]
            ok = ok and get(s, "wdrift_drift_complete_w1", study="fa", run="fa", role="candidate",
                            summary=summary) == at20[kind][0]
            ok = ok and get(s, "wdrift_drift_w1", study="fa", run="fa", role="candidate",
                            summary=summary) == at40[kind][0]
            if not ok:
                print(f"# {summary}: ratio {ratio}; log at 20 {at20.get(kind)}, at 40 {at40.get(kind)}")
                break
        check(ok, "the ratios are step 20's (numbers, not NaN), as is wdrift_drift_complete_w1; "
              "wdrift_drift_w1 is the run's latest, step 40")
        p20 = log_rows_at(path, "lowprec", 20)
        check(get(s, "wdrift_drift_complete_w1", study="fa", run="lowprec", role="proxy", summary="max") == p20[3][0],
              "the proxy's W1 at the complete step is beside them")
        ok = len(at20[0]) == 2 and len(at40[0]) == 2
        for t, (w1, ratios) in at20[0].items():
            ok = ok and get(s, "wdrift_tensor_ratio", study="fa", run="fa", tensor=t, proxy="fp16") == ratios["fp16"]
            ok = ok and get(s, "wdrift_tensor_w1", study="fa", run="fa", tensor=t) == at40[0][t][0]
        check(ok, "per tensor too: ratios of step 20, W1 of step 40")
        check(get(s, "wdrift_study_runs_ahead", study="fa") == 0, "no run ahead of the baseline")
        snap(fa, 50, 0.01)      # the baseline's job stops at 40: fa goes on
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_study_runs_ahead", study="fa") == 1)
        check(get(s, "wdrift_study_runs_ahead", study="fa") == 1,
              "fa's step 50, past the baseline's 40: wdrift_study_runs_ahead 1 (WdriftBaselineBehind's)",
              body[-1500:])
        help_line = re.search(r"^# HELP wdrift_comparisons_total (.*)$", body, re.M)
        passes = dm.log_text().count("compute: study 'fa' step ")
        check(help_line and "passes" in help_line.group(1) and get(s, "wdrift_comparisons_total") == passes
              and passes > 4,
              f"wdrift_comparisons_total counts comparison passes, as its HELP says "
              f"({get(s, 'wdrift_comparisons_total')} passes over 4 steps; {passes} in the log)",
              help_line.group(0) if help_line else body[:2000])

        # A reload that mistypes the candidate ("fx"): the study is still
        # compared (its old rows), so nothing above goes off; a trial found
        # no series that said so, and fa's rows still labelled "candidate".
        cfg = os.path.join(tmp, "wdrift.yaml")
        with open(cfg) as f:
            text = f.read()
        with open(cfg, "w") as f:
            f.write(text.replace("candidates: [fa]", "candidates: [fx]"))
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0 and "candidate 'fx' has no snapshot" in r.stdout, "reload to candidate 'fx'",
              r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_study_runs_silent", study="fa") == 1)
        check(get(s, "wdrift_study_runs_silent", study="fa") == 1 and get(s, "wdrift_study_results", study="fa") == 1,
              "wdrift_study_runs_silent 1 beside wdrift_study_results 1: compared, with a run that sent nothing",
              body[-3000:])
        check(get(s, "wdrift_drift_w1", study="fa", run="fa", role="former", summary="max") is not None
              and get(s, "wdrift_drift_w1", study="fa", run="fa", role="candidate", summary="max") is None
              and get(s, "wdrift_drift_step", study="fa", run="fa", role="former") == 40,
              "fa's rows are labelled role=\"former\", not \"candidate\"", body[-3000:])
        # a synthetic proxy added: its rows carry its label as their run
        with open(cfg, "w") as f:
            f.write(text.replace("candidates: [fa]", "candidates: [fx]\n    synthetic_proxy: round:bf16"))
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "reload: synthetic_proxy round:bf16 added", r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_drift_w1", study="fa", run="round:bf16", role="proxy",
                                                  summary="max") is not None)
        check(get(s, "wdrift_drift_w1", study="fa", run="round:bf16", role="proxy", summary="max") is not None
              and not any(k[0] == "wdrift_drift_w1" and ("run", "round:bf16") in k[1] and ("role", "former") in k[1]
                          for k in s),
              "the synthetic proxy added by the reload: role=\"proxy\" (its rows carry its label as their run)",
              body[-3000:])
        # a proxy label and then the study renamed by reloads: no series keeps the old names (a
        # trial's went on being exported, across restarts, where drift had no such study)
        relabeled = re.sub(r"  - name: fa-vs-fp16\n(    .*\n)*", "", text.replace("    proxies: {fp16: lowprec}\n", ""))
        with open(cfg, "w") as f:
            f.write(relabeled)
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0 and "fp16" not in relabeled, "reload: proxy fp16 (and its rule) taken out",
              r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: not any(("proxy", "fp16") in k[1] for k in s), timeout=10)
        old = [k for k in s if ("proxy", "fp16") in k[1]]
        check(not old, "no series names the proxy the reload took out", "\n".join(map(str, old[:5])))
        r = subprocess.run([WDRIFT, "drift", "fa", "-c", cfg], capture_output=True, text=True, timeout=20)
        rj = subprocess.run([WDRIFT, "drift", "fa", "--json", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0 and rj.returncode == 0 and "fp16" not in r.stdout and "fp16" not in rj.stdout
              and "layers.0.w" in r.stdout, "drift has no column of the proxy the reload took out (a trial's "
              "stayed, '-' in every row)", r.stdout)
        with open(cfg, "w") as f:
            f.write(relabeled.replace("name: fa\n", "name: fa2\n").replace("study: fa\n", "study: fa2\n"))
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "reload: study fa renamed fa2", r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_study_results", study="fa2") is not None)
        old = [k for k in s if ("study", "fa") in k[1]]
        check(get(s, "wdrift_study_results", study="fa2") is not None and not old,
              "no series names the study the reload renamed; the new name has its own",
              "\n".join(map(str, old[:5])))
    finally:
        harness.teardown(dm, tmp, ctx)


RULES_FILE = os.path.join(ROOT, "docs", "alertmanager", "wdrift-rules.yml")


def input_series(series, samples, instances=("w",)):
    """promtool's input_series lines for series ({(name, labels): value}, as scraped), each held
    for samples minutes, under a job and an instance as a scrape gives them (each of instances:
    daemons scraped by one Prometheus)."""
    lines = []
    for (name, labels), v in series.items():
        for instance in instances:
            inner = ",".join(f'{k}="{x}"' for k, x in labels + (("instance", instance), ("job", "wdrift")))
            lines.append(f"      - series: '{name}{{{inner}}}'\n        values: '{v:.17g}x{samples}'")
    return lines


def promtool_fires(series, alert, tmp, instances=("w",)):
    """The alerts named alert that the shipped rules fire after 61 minutes of series
    ({(name, labels): value}, as scraped, held constant), by `promtool test rules`."""
    lines = input_series(series, 70, instances)
    test = os.path.join(tmp, "rules-test.yml")
    with open(test, "w") as f:
        f.write(f"rule_files: [{RULES_FILE}]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
                f"    input_series:\n" + "\n".join(lines) + "\n"
                f"    alert_rule_test:\n      - eval_time: 61m\n        alertname: {alert}\n"
                f"        exp_alerts: []\n")
    r = subprocess.run(["promtool", "test", "rules", test], capture_output=True, text=True)
    return r.returncode != 0 and "got:[" in r.stdout + r.stderr and "got:[]" not in r.stdout + r.stderr, \
        r.stdout + r.stderr


def promtool_expr(series, expr, want, tmp, instances=("w",)):
    """Whether expr, evaluated by `promtool test rules` over series (as scraped, held constant,
    from each of instances), gives exactly want ({labels: value}); and promtool's output."""
    lines = input_series(series, 5, instances)
    exp = []
    for labels, v in want.items():
        inner = ",".join(f'{k}="{x}"' for k, x in labels)
        exp.append(f"          - labels: '{{{inner}}}'\n            value: {v:.17g}")
    test = os.path.join(tmp, "expr-test.yml")
    with open(test, "w") as f:
        f.write("rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n"
                + "\n".join(lines) + "\n    promql_expr_test:\n      - expr: " + json.dumps(expr)
                + "\n        eval_time: 2m\n        exp_samples:\n" + "\n".join(exp) + "\n")
    r = subprocess.run(["promtool", "test", "rules", test], capture_output=True, text=True)
    return r.returncode == 0, f"{expr}:\n" + r.stdout + r.stderr


def reload_mistakes():
    """Reloads as operators make them (two trials): a proxy added whose job has not started
    keeps the ratios to the others and the alerts' catch-up (they went away); a candidate
    taken out has no ratio series (a Prometheus rule went on firing on it); a mistyped
    baseline exports no old row as current, and WdriftStudyRunSilent fires (nothing did)."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t82-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    port = free_port()
    try:
        cfg = write_config(dm, metrics=f"127.0.0.1:{port}")
        with open(cfg) as f:
            text = f.read()
        check(dm.start() is not None, "ready")
        pubs = {r: Publisher(ctx, tmp, r) for r in ("base", "lowprec", "fa", "fb")}
        for step in (10, 20):
            snap(pubs["base"], step, 0.0)
            snap(pubs["lowprec"], step, 0.0, f16=True)
            snap(pubs["fa"], step, 0.01)
            snap(pubs["fb"], step, 0.02)    # a run in no study yet
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_drift_complete_step", study="fa") == 20)
        check(get(s, "wdrift_drift_ratio", study="fa", run="fa", proxy="fp16", summary="max") is not None
              and get(s, "wdrift_study_runs", study="fa") == 3, "step 20 complete, fa's ratio to fp16; 3 runs named",
              body[-2000:])

        # a proxy added whose job has not started, the study renamed, a w1 rule on it
        rule = ("alerts:\n  - {name: fa2-w1, study: fa2, metric: w1, scope: max, threshold: 0, severity: critical}\n"
                "  - {name: fa2-typo, study: fa2, metric: w1, scope: tensors, tensors: 'layrs.*', threshold: 0}\n")
        added = text[:text.index("alerts:")].replace("name: fa\n", "name: fa2\n").replace(
            "proxies: {fp16: lowprec}", "proxies: {fp16: lowprec, seed: seed2}") + rule
        with open(cfg, "w") as f:
            f.write(added)
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "reload: study renamed fa2, proxy seed (run seed2, silent) added", r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_study_runs_silent", study="fa2") == 1 and
                              get(s, "wdrift_drift_complete_step", study="fa2") == 20)   # the backfill's last
        check(get(s, "wdrift_drift_complete_step", study="fa2") == 20
              and get(s, "wdrift_drift_ratio", study="fa2", run="fa", proxy="fp16", summary="max") is not None,
              "a proxy whose job has not started is not waited for: step 20 stays complete, the ratio to fp16 "
              "stays exported (every ratio series went away)", body[-3000:])
        end, st = time.time() + 10, {}
        while time.time() < end and st.get("state") != "firing":
            a = subprocess.run([WDRIFT, "alerts", "--json", "-c", cfg], capture_output=True, text=True, timeout=20)
            rules = {x["name"]: x for x in json.loads(a.stdout)["alerts"]} if a.returncode == 0 else {}
            st = next(iter(rules.get("fa2-w1", {}).get("instances", [])), {})
            time.sleep(0.3)
        check(st.get("state") == "firing" and st.get("step") == 20,
              f"the renamed study's w1 rule is judged at the catch-up, at step 20 (it stayed inactive) ({st})")
        # a glob that matches no tensor: its rule reads ok for ever; /metrics says it, and a shipped rule fires
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_alert_unmatched", alert="fa2-typo", study="fa2") == 1)
        check(get(s, "wdrift_alert_unmatched", alert="fa2-typo", study="fa2") == 1
              and get(s, "wdrift_alert_rule_state", alert="fa2-typo", study="fa2", severity="warning") == 0,
              "wdrift_alert_unmatched 1 for the glob 'layrs.*' (its rule_state reads 0, ok)", body[-2500:])
        unmatched = {k: v for k, v in s.items() if k[0] == "wdrift_alert_unmatched"}
        fired, out = promtool_fires(unmatched, "WdriftAlertRuleMatchesNothing", tmp)
        check(fired, f"promtool: WdriftAlertRuleMatchesNothing fires on it ({unmatched})", out)

        # the candidate changed: no ratio series of the former one
        with open(cfg, "w") as f:
            f.write(added.replace("candidates: [fa]", "candidates: [fb]"))
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "reload: candidate fa replaced by fb", r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_drift_ratio", study="fa2", run="fb", proxy="fp16",
                                                  summary="max") is not None)
        old = [k for k in s if k[0] in ("wdrift_drift_ratio", "wdrift_tensor_ratio") and ("run", "fa") in k[1]]
        check(get(s, "wdrift_drift_ratio", study="fa2", run="fb", proxy="fp16", summary="max") is not None
              and not old, "fb has ratios; fa, taken out, none (WdriftCandidateDriftsMoreThanProxy went on on it)",
              "\n".join(map(str, old)) or body[-2000:])

        # the baseline mistyped: nothing of the old rows as current, and a rule fires
        with open(cfg, "w") as f:
            f.write(added.replace("candidates: [fa]", "candidates: [fb]").replace("baseline: base", "baseline: bsae"))
        r = subprocess.run([WDRIFT, "reload", "-c", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 0, "reload: baseline mistyped 'bsae'", r.stdout + r.stderr)
        s, body = wait_scrape(port, lambda s: get(s, "wdrift_study_results", study="fa2") == 0)
        drift = [k for k in s if k[0].startswith("wdrift_drift_") and ("study", "fa2") in k[1]]
        check(get(s, "wdrift_study_results", study="fa2") == 0 and not drift,
              "no wdrift_drift_ series of the stale rows (drift says 'stale'; /metrics showed them as current)",
              "\n".join(map(str, drift[:6])))
        study = {k: v for k, v in s.items() if k[0].startswith("wdrift_study_") and ("study", "fa2") in k[1]}
        fired, out = promtool_fires(study, "WdriftStudyRunSilent", tmp)
        check(fired, f"promtool: the shipped WdriftStudyRunSilent fires after an hour of these values ({study})", out)
    finally:
        harness.teardown(dm, tmp, ctx)


def rule_fired(alert, series, eval_time):
    """Whether the shipped rules fire alert at eval_time (minutes) over series, [(name{labels}, promtool
    values)], by `promtool test rules`; and its output."""
    tmp = tempfile.mkdtemp(prefix="wdrift-t82-rules-")
    try:
        lines = [f"      - series: '{n}'\n        values: '{v}'" for n, v in series]
        test = os.path.join(tmp, "rules-test.yml")
        with open(test, "w") as f:
            f.write(f"rule_files: [{RULES_FILE}]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
                    "    input_series:\n" + "\n".join(lines) + "\n    alert_rule_test:\n"
                    f"      - eval_time: {eval_time}m\n        alertname: {alert}\n        exp_alerts: []\n")
        r = subprocess.run(["promtool", "test", "rules", test], capture_output=True, text=True)
        out = r.stdout + r.stderr
        if r.returncode == 0:
            return False, out
        return ("got:[" in out and "got:[]" not in out), out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rules_on_healthy_and_broken():
    """The shipped rules on series made up as a healthy and a broken daemon would export them: a
    trial's operator was paged by WdriftStudyIncomplete for a candidate that had merely started after
    its proxy, and by WdriftStalledIngest (critical) for a job re-sending durable steps, while a job
    whose every snapshot was too large stayed under WdriftProtocolErrors' threshold, and a failing
    alert command was said in the daemon's log alone."""
    L = 'instance="w",job="wdrift",study="late"'
    behind = [(f'wdrift_drift_step{{{L},run="lowprec",role="proxy"}}', "240x100"),
              (f'wdrift_drift_step{{{L},run="late-fa",role="candidate"}}', "100+1x100"),
              (f'wdrift_drift_complete_step{{{L}}}', "100+1x100")]
    fired, out = rule_fired("WdriftStudyIncomplete", behind, 90)
    check(not fired, "WdriftStudyIncomplete: a candidate behind its proxy, still going: quiet", out)
    stopped = [(f'wdrift_drift_step{{{L},run="lowprec",role="proxy"}}', "20x100"),
               (f'wdrift_drift_step{{{L},run="late-fa",role="candidate"}}', "20+1x100"),
               (f'wdrift_drift_complete_step{{{L}}}', "20x100")]
    fired, out = rule_fired("WdriftStudyIncomplete", stopped, 90)
    check(fired, "... a proxy that stopped while the candidate goes on: fires", out)
    D = 'instance="w",job="wdrift"'
    dups = [(f"wdrift_snapshots_received_total{{{D}}}", "0+1x100"), (f"wdrift_snapshots_durable_total{{{D}}}", "15x100"),
            (f"wdrift_snapshots_duplicate_total{{{D}}}", "0+1x100")]
    fired, out = rule_fired("WdriftStalledIngest", dups, 60)
    check(not fired, "WdriftStalledIngest: a job re-sending durable steps (duplicates): quiet", out)
    stalled = [(f"wdrift_snapshots_received_total{{{D}}}", "0+1x100"), (f"wdrift_snapshots_durable_total{{{D}}}", "15x100"),
               (f"wdrift_snapshots_duplicate_total{{{D}}}", "2x100")]
    fired, out = rule_fired("WdriftStalledIngest", stalled, 60)
    check(fired, "... commits that make nothing durable, no duplicate among them: fires", out)
    big = [(f'wdrift_errors_total{{{D},code="too_large"}}', "0x10 1x90")]
    fired, out = rule_fired("WdriftSnapshotsTooLarge", big, 20)
    check(fired, "WdriftSnapshotsTooLarge: one snapshot refused too_large fires it", out)
    fired, out = rule_fired("WdriftProtocolErrors", big, 20)
    check(not fired, "... and not WdriftProtocolErrors too", out)
    A = 'instance="w",job="wdrift",alert="pager",study="fa"'
    ok = [(f"wdrift_alert_command_runs_total{{{A}}}", "0+1x100"), (f"wdrift_alert_command_failures_total{{{A}}}", "0x100")]
    fired, out = rule_fired("WdriftAlertCommandFailing", ok, 20)
    check(not fired, "WdriftAlertCommandFailing: a command that runs and succeeds: quiet", out)
    bad = [(f"wdrift_alert_command_runs_total{{{A}}}", "0+1x100"), (f"wdrift_alert_command_failures_total{{{A}}}", "0x10 1x90")]
    fired, out = rule_fired("WdriftAlertCommandFailing", bad, 20)
    check(fired, "... one that fails once: fires", out)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    rules_on_healthy_and_broken()
    main_flow()
    off_and_bad_config()
    candidate_ahead()
    reload_mistakes()
    sys.exit(harness.summary())
