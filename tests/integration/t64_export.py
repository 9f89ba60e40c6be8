#!/usr/bin/env python3
"""t64_export.py: `wdrift export` gives the drift log's current rows, exactly.

A live daemon computes a study (baseline, one candidate, two proxies; the
proxies arrive after the candidate at one step, one proxy never at another;
a tensor with a comma and quotes in its name, one whose element count
differs, one all NaN). Then:

- the CSV equals what h5py reads from drift/STUDY.h5, keeping the last row
  written for each (step, run, kind, tensor): every double exact (%.17g),
  NaN an empty field, names quoted per RFC 4180;
- --json parses and equals the CSV; -o FILE writes the file whole;
- the values equal `wdrift drift STUDY --step S --json`;
- it reads while the daemon writes (SWMR), after SIGTERM, after kill -9;
- every malformed log is one line naming the file (and dataset and row),
  exit 1, no output file, within seconds; usage errors exit 2.

live_study() is shared with t63_report.py.
"""
import csv
import io
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import h5py
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, Publisher, check  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
ODD = 'odd,"name" <b>&amp; ü'  # quoted in CSV, escaped in JSON and HTML
RUNS = ("base", "fa", "lowprec", "lowbf")
DRIFT = {"base": 0.0, "fa": 0.0004, "lowprec": 0.002, "lowbf": 0.003}
FIELDS = ("numel", "w1", "max_abs_diff", "rel_l2", "nan", "posinf", "neginf")
ROW_TYPE = [("step", "<i8"), ("tensor", "<u4"), ("run", "<u2"), ("kind", "u1"), ("role", "u1"),
            ("w1", "<f8"), ("max_abs_diff", "<f8"), ("rel_l2", "<f8"), ("nan", "<u8"), ("posinf", "<u8"),
            ("neginf", "<u8"), ("wall", "<f8"), ("numel", "<u8")]
AGG = 0xFFFFFFFF


def wd(*args, timeout=60):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=timeout)


def snapshot(pub, run, step):
    """Four tensors: the same values for every run but for the run's drift (fa's emb: more than the proxies')."""
    r = np.random.default_rng(step)
    rng = np.random.default_rng(zlib.crc32(f"{run}/{step}".encode()))
    t = {"layers.0.w": (r.standard_normal(4000) * 0.02).astype(np.float32),
         ODD: (r.standard_normal(1500) * 0.02).astype(np.float32),
         "emb": (r.standard_normal(2000) * 0.02).astype(np.float32),
         "allnan": (r.standard_normal(300)).astype(np.float32)}
    for k, v in t.items():
        v += (rng.standard_normal(v.shape) * (0.01 if run == "fa" and k == "emb" else DRIFT[run])).astype(np.float32)
    if run == "fa" and step == 20:
        t["emb"] = t["emb"][:1999]         # a count that differs: max|d| and rel L2 NaN
    if run == "fa" and step == 30:
        t["allnan"][:] = np.nan            # no finite value: W1 undefined
        t["layers.0.w"][7] = np.inf
    for k, v in t.items():
        pub.tensor(step, k, v, "f32")
    return pub.commit(step, len(t))


def log_current(path):
    """The drift log as h5py reads it: (proxies, sorted current rows as dicts)."""
    with h5py.File(path, "r", swmr=True) as f:
        rows = f["rows"][:]
        tensors = [x.decode() for x in f["tensors"][:]]
        runs = [x.decode() for x in f["runs"][:]]
        proxies = [x.decode() for x in f["proxies"][:]]
    last = {}
    for r in rows:                        # file order: a later row supersedes
        last[(int(r["step"]), int(r["run"]), int(r["kind"]), int(r["tensor"]))] = r
    out = []
    # runs by name, not by their index in the log (arrival order: a trial's export put the
    # synthetic proxy before the candidate); tensors in the log's order
    for key in sorted(last, key=lambda k: (k[0], runs[k[1]], k[2], k[3])):
        r = last[key]
        d = {"step": int(r["step"]), "run": runs[r["run"]], "role": {1: "candidate", 2: "proxy"}[int(r["role"])],
             "kind": ("tensor", "mean", "median", "max")[r["kind"]],
             "tensor": tensors[r["tensor"]] if r["kind"] == 0 else None,
             "wall": float(r["wall"])}
        for k in FIELDS:
            d[k] = int(r[k]) if k in ("numel", "nan", "posinf", "neginf") else float(r[k])
        d["ratio"] = {p: float(r["ratio"][i]) for i, p in enumerate(proxies)}
        out.append(d)
    return proxies, out, len(rows)


def parse_csv(text, proxies):
    """CSV rows back into the dicts of log_current(); None where a field is empty."""
    rd = list(csv.reader(io.StringIO(text, newline="")))
    head = ["step", "run", "role", "kind", "tensor", "numel", "w1", "max_abs_diff", "rel_l2", "nan", "posinf",
            "neginf"] + [f"ratio_{p}" for p in proxies] + ["wall"]
    if not rd or rd[0] != head:
        return None
    out = []
    for f in rd[1:]:
        d = dict(zip(head, f))
        num = {}
        for k in ("w1", "max_abs_diff", "rel_l2", "wall"):
            num[k] = float(d[k]) if d[k] != "" else math.nan
        out.append({"step": int(d["step"]), "run": d["run"], "role": d["role"], "kind": d["kind"],
                    "tensor": d["tensor"] if d["kind"] == "tensor" else None,
                    "numel": int(d["numel"]), "nan": int(d["nan"]), "posinf": int(d["posinf"]),
                    "neginf": int(d["neginf"]), **num,
                    "ratio": {p: float(d[f"ratio_{p}"]) if d[f"ratio_{p}"] != "" else math.nan for p in proxies}})
    return out


def same_num(a, b):
    """Exactly equal, NaN equal to NaN (and to None, JSON's NaN)."""
    a = math.nan if a is None else a
    b = math.nan if b is None else b
    return (a != a and b != b) or a == b


def same_rows(got, want):
    """'' when equal, else the first difference."""
    if got is None:
        return "no parse (header?)"
    if len(got) != len(want):
        return f"{len(got)} rows, not {len(want)}"
    for g, w in zip(got, want):
        for k in w:
            if k == "ratio":
                bad = set(g[k]) != set(w[k]) or not all(same_num(g[k][p], w[k][p]) for p in w[k])
            elif isinstance(w[k], float):
                bad = not same_num(g[k], w[k])
            else:
                bad = g[k] != w[k]
            if bad:
                return f"{k}: {g[k]!r} != {w[k]!r} in {w}"
    return ""


def wait_log(path, want, timeout=25):
    """Until every (step, tensor) of fa has the ratios `want` says are defined."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            _, rows, _ = log_current(path)
            have = {(r["step"], r["tensor"]): r for r in rows if r["run"] == "fa" and r["kind"] == "tensor"}
            if all(k in have and all((have[k]["ratio"][p] == have[k]["ratio"][p]) == on for p, on in v.items())
                   for k, v in want.items()):
                return True
        except (OSError, KeyError):
            pass
        time.sleep(0.2)
    return False


def live_study(ctx, dm, tmp, alerts=""):
    """A study computed by the daemon in tmp: base, fa, and proxies fp16=lowprec, p2=lowbf.

    Step 10: fa before both proxies (its rows rewritten twice); step 20: fa
    last; step 30: lowbf never comes (ratio p2 undefined). Returns the
    config's path and the drift log's, or None when the daemon did not start.
    """
    cfg = dm.write_config(extra=alerts)
    with open(cfg) as f:
        text = f.read()
    with open(cfg, "w") as f:
        f.write(text.replace("proxies: {fp16: lowprec}", "proxies: {fp16: lowprec, p2: lowbf}"))
    if not check(dm.start() is not None, "daemon ready (study fa: proxies fp16=lowprec, p2=lowbf)"):
        return None
    pubs = {r: Publisher(ctx, tmp, r) for r in RUNS}
    order = {10: RUNS, 20: ("base", "lowprec", "lowbf", "fa"), 30: ("base", "fa", "lowprec")}
    acks = [snapshot(pubs[r], r, s) for s, runs in order.items() for r in runs]
    check(all(a and a["type"] == "ack" for a in acks), f"{len(acks)} snapshots acked")
    log = os.path.join(tmp, "var", "drift", "fa.h5")
    want = {}
    for s in order:
        for t in ("layers.0.w", ODD, "emb"):
            want[(s, t)] = {"fp16": True, "p2": s != 30}
    check(wait_log(log, want), "the drift log has every step, with the ratios of the proxies that came")
    return cfg, log


def bad_logs(tmp, good):
    """(what, file, text the one-line error must hold) for malformed drift logs."""
    d = os.path.join(tmp, "bad")
    os.makedirs(d)

    def p(name):
        return os.path.join(d, name)

    def write(name, rows=None, dtype=None, tensors=(b"a", b"b"), runs=(b"fa", b"low"), proxies=(b"fp16", b"p2"),
              names_dtype="S1024", skip=(), rows_data=None):
        dt = np.dtype(dtype or ROW_TYPE + [("ratio", "<f8", (len(proxies),))])
        if rows_data is None:
            rows_data = np.zeros(3, dt)
            rows_data["step"] = 5
            rows_data["tensor"] = [0, 1, AGG]
            rows_data["kind"] = [0, 0, 1]
            rows_data["role"] = 1
            for k, v in (rows or {}).items():
                rows_data[k][-1] = v
        with h5py.File(p(name), "w", libver="latest") as f:
            if "rows" not in skip:
                f.create_dataset("rows", data=rows_data, maxshape=(None,), chunks=True)
            for n, v in (("tensors", tensors), ("runs", runs), ("proxies", proxies)):
                if n not in skip:
                    f.create_dataset(n, data=np.array(v, dtype=names_dtype if n == "tensors" else "S1024"),
                                     maxshape=(None,) if np.ndim(v) == 1 else None)
        return p(name)

    with open(p("random.h5"), "wb") as f:
        f.write(np.random.default_rng(64).bytes(8192))
    open(p("empty.h5"), "wb").close()
    with open(good, "rb") as f:
        src = f.read()
    with open(p("truncated.h5"), "wb") as f:
        f.write(src[: len(src) // 2])
    # A byte changed in each index block of a chunked dataset: its checksum
    # fails. A SWMR reader retries such a block (the writer may be half-way
    # through it) and HDF5's default of 100 retries, each sleeping twice as
    # long as the last, never ends: the reader must bound them.
    damaged = bytearray(src)
    at = [i for i in range(len(src) - 4) if src[i:i + 4] == b"EAIB"]
    for i in at:
        damaged[i + 8] ^= 0x55
    with open(p("damaged.h5"), "wb") as f:
        f.write(damaged)
    cases = [
        ("a missing log", p("nope.h5"), "cannot open"),
        ("random bytes", p("random.h5"), "not an HDF5 file"),
        ("an empty file", p("empty.h5"), "not an HDF5 file"),
        # SWMR readers skip HDF5's end-of-file check (the writer may be
        # extending the file): what is cut off reads as zeros, role 0
        ("a truncated copy of a real log", p("truncated.h5"),
         ("truncated or damaged", "not an HDF5 file", "cannot be read")),
        (f"a real log with its chunk index damaged ({len(at)} blocks)", p("damaged.h5"), "'rows': cannot be read"),
        ("HDF5 without 'rows'", write("norows.h5", skip=("rows",)), "no dataset 'rows'"),
        ("HDF5 without 'proxies'", write("noproxies.h5", skip=("proxies",)), "no dataset 'proxies'"),
        ("rows without the field w1",
         write("nofield.h5", dtype=[x for x in ROW_TYPE if x[0] != "w1"] + [("ratio", "<f8", (2,))]),
         "'rows': no field 'w1'"),
        ("rows whose field step is a string",
         write("strfield.h5", dtype=[("step", "S8")] + ROW_TYPE[1:] + [("ratio", "<f8", (2,))]),
         "'rows': a non-numeric field 'step'"),
        ("rows that are not records", write("ints.h5", rows_data=np.arange(4)), "'rows': not a table of records"),
        ("a tensor index out of range", write("tensor.h5", rows={"kind": 0, "tensor": 2}),
         "rows[2]: tensor index 2 beyond"),
        ("an aggregate row with a tensor index", write("agg.h5", rows={"tensor": 0}), "rows[2]: tensor index 0"),
        ("a run index out of range", write("run.h5", rows={"run": 2}), "rows[2]: run index 2 beyond the 2 names"),
        ("a bad kind", write("kind.h5", rows={"kind": 4}), "rows[2]: kind 4"),
        ("a bad role", write("role.h5", rows={"role": 0}), "rows[2]: kind 1, role 0: out of range"),
        ("a ratio of 3 numbers for 2 proxies", write("ratio.h5", dtype=ROW_TYPE + [("ratio", "<f8", (3,))]),
         "field 'ratio' is not 2 numbers"),
        ("a scalar ratio for 1 proxy", write("ratio1.h5", dtype=ROW_TYPE + [("ratio", "<f8")], proxies=(b"fp16",)),
         "field 'ratio' is not 1 numbers"),
        ("tensor names as integers", write("names_int.h5", tensors=(1, 2), names_dtype="<i4"),
         "'tensors': not a table of fixed-length strings"),
        ("tensor names of variable length", write("names_vlen.h5", tensors=("a", "b"),
                                                  names_dtype=h5py.string_dtype()),
         "'tensors': not a table of fixed-length strings"),
        ("a 2-D table of run names", write("runs2d.h5", runs=((b"fa", b"low"), (b"x", b"y"))),
         "'runs': not a 1-D table of names"),
    ]
    return cases


def malformed(tmp, good):
    out = os.path.join(tmp, "out.csv")
    for what, path, text in bad_logs(tmp, good):
        t0 = time.time()
        try:
            r = wd("export", "fa", "--log", path, "-o", out, timeout=20)
            rc, err = r.returncode, r.stderr.strip()
        except subprocess.TimeoutExpired:
            rc, err = "timeout", ""
        dt = time.time() - t0
        lines = err.splitlines()
        left = [x for x in os.listdir(tmp) if x.startswith("out.csv")]
        texts = text if isinstance(text, tuple) else (text,)
        check(rc == 1 and len(lines) == 1 and path in err and any(t in err for t in texts) and not left
              and dt < 10,
              f"{what}: exit 1 in {dt:.1f} s, one line naming the file, no output ({rc}: {err[:300]})")
    r = wd("export", "fa", "--log", good, "-o", os.path.join(tmp, "no", "such", "dir.csv"))
    check(r.returncode == 1 and "cannot create" in r.stderr and os.path.join(tmp, "no", "such") in r.stderr,
          f"-o in a missing directory: exit 1, named ({r.stderr.strip()})")


def odd_names(tmp):
    """Names the daemon refuses (CR, LF) or cuts (at 1024 bytes, inside a character) still export."""
    path = os.path.join(tmp, "names.h5")
    raw = [b"plain", b"a\nb", b"c\r\nd", b'e"', b",", ("x" * 1022 + "\u00e9").encode()[:1023],
           ("\u00e9" * 600).encode()[:1023]]
    rows = np.zeros(len(raw), ROW_TYPE + [("ratio", "<f8", (1,))])
    rows["step"] = 1
    rows["tensor"] = np.arange(len(raw))
    rows["role"] = 1
    rows["w1"] = np.arange(len(raw)) / 7
    with h5py.File(path, "w") as f:
        f.create_dataset("rows", data=rows, maxshape=(None,))
        f.create_dataset("tensors", data=np.array(raw, "S1024"), maxshape=(None,))
        f.create_dataset("runs", data=np.array([b"fa"], "S1024"), maxshape=(None,))
        f.create_dataset("proxies", data=np.array([b"fp16"], "S1024"), maxshape=(None,))
    r = subprocess.run([WDRIFT, "export", "x", "--log", path], capture_output=True)
    text = r.stdout.decode("utf-8", "surrogateescape")
    got = [row[4] for row in csv.reader(io.StringIO(text, newline=""))][1:]
    check(r.returncode == 0 and got == [x.decode("utf-8", "surrogateescape") for x in raw],
          "CSV: names with CR, LF, quotes and commas quoted per RFC 4180, their bytes kept")
    check('"a\nb"' in text and '"e"""' in text and '\n1,fa,candidate,tensor,",",' in text,
          "CSV: a field with LF or a comma is quoted, a quote doubled")
    r = subprocess.run([WDRIFT, "export", "x", "--log", path, "--json"], capture_output=True)
    try:
        tn = [x["tensor"] for x in json.loads(r.stdout)["rows"]]
    except (ValueError, KeyError) as e:
        tn = [str(e)]
    want = [x.decode() for x in raw[:5]]
    check(r.returncode == 0 and tn[:5] == want and len(tn) == 7 and all(isinstance(x, str) for x in tn)
          and tn[5].startswith("x" * 1022) and tn[6].startswith("\u00e9" * 511),
          f"JSON: every name a string, a name cut inside a UTF-8 character too ({[x and x[-2:] for x in tn]})")


def relative_storage(cfg, tmp, text, running):
    """storage.dir relative: it is the daemon's, from the directory wdriftd started in. Run from
    elsewhere, export must not read another project's ./var (a trial: rc 0, the other's rows); with
    the daemon up it asks it, with the daemon down it says what it reads, from where."""
    rel = os.path.join(tmp, "rel.yaml")
    with open(cfg) as f, open(rel, "w") as g:
        g.write(f.read().replace(f"dir: {tmp}/var\n", "dir: ././var\n", 1))   # "././": no DIR/./var said
    other = os.path.join(tmp, "other-project")
    os.makedirs(os.path.join(other, "var", "drift"), exist_ok=True)
    with open(os.path.join(other, "var", "drift", "fa.h5"), "wb") as f:
        f.write(b"another project's drift log, not this daemon's\n")
    r = subprocess.run([WDRIFT, "export", "fa", "-c", rel], capture_output=True, text=True, timeout=60, cwd=other)
    if running:
        check(r.returncode == 0 and r.stdout == text and r.stderr == "",
              "storage.dir relative, run from another directory, the daemon up: its own log, asked of it",
              r.stderr)
    else:
        check(r.returncode == 1 and "storage.dir '././var' in " in r.stderr and "is relative to the directory "
              "wdriftd started in" in r.stderr and f"reading {other}/var/drift/fa.h5 from" in r.stderr,
              "... the daemon down: says the log it reads is from this directory, and --log", r.stderr)


def usage(cfg):
    for args, what in ((["export"], "no STUDY"), (["export", "fa", "fb", "-c", cfg], "two STUDYs"),
                       (["export", "fa", "--csv", "--json", "-c", cfg], "--csv with --json"),
                       (["export", "fa", "--endpoint", "ipc:///x", "-c", cfg], "--endpoint"),
                       (["export", "fa", "--bogus"], "an unknown option"),
                       (["export", "fa", "-c", cfg, "-o"], "-o without a file")):
        r = wd(*args)
        check(r.returncode == 2 and r.stdout == "" and r.stderr.strip() != "",
              f"usage error, exit 2: {what} ({r.stderr.strip().splitlines()[:1]})")
    r = wd("export", "--help")
    check(r.returncode == 0 and r.stdout.startswith("usage: wdrift export"), "export --help")
    r = wd("export", "nope", "-c", cfg)
    check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and cfg in r.stderr
          and "no study 'nope' (studies: fa)" in r.stderr,
          f"an unknown study: exit 1, the config's studies listed ({r.stderr.strip()})")
    r = wd("export", "af", "-c", cfg)
    check(r.returncode == 1 and "no study 'af'; did you mean 'fa'? (studies: fa)" in r.stderr,
          f"a typo of a study (two letters swapped): did you mean ({r.stderr.strip()})")
    other = os.path.join(os.path.dirname(cfg), "other.yaml")
    with open(cfg) as f, open(other, "w") as g:
        g.write(f.read().replace("var\n", "elsewhere\n", 1))
    r = wd("export", "fa", "-c", other)
    check(r.returncode == 1 and "no drift log for study 'fa'" in r.stderr and "elsewhere/drift/fa.h5" in r.stderr,
          f"a study with no log yet: exit 1, the path named ({r.stderr.strip()[:200]})")
    r = wd("export", "fa", "-c", os.path.join(os.path.dirname(cfg), "missing.yaml"))
    check(r.returncode == 1 and "missing.yaml" in r.stderr, f"-c a missing config: exit 1 ({r.stderr.strip()})")


def against_drift(cfg, rows, proxies):
    """export's rows equal the daemon's answer to `wdrift drift --json`, step by step."""
    by = {(r["step"], r["run"], r["tensor"]): r for r in rows if r["kind"] == "tensor"}
    for step in (10, 20, 30):
        r = wd("drift", "fa", "--step", str(step), "-c", cfg, "--json")
        bad = "" if r.returncode == 0 else r.stderr.strip()
        n = 0
        for l in (json.loads(r.stdout)["candidates"]["fa"]["layers"] if not bad else []):
            x = by.get((step, "fa", l["name"]))
            if x is None:
                bad = bad or f"{l['name']}: no row"
                continue
            n += 1
            for k in ("numel", "w1", "max_abs_diff", "rel_l2"):
                if not same_num(l[k], x[k]):
                    bad = bad or f"{l['name']}.{k}: drift {l[k]!r}, export {x[k]!r}"
            for k in ("nan", "posinf", "neginf"):
                if l["nonfinite"]["candidate"][k] != x[k]:
                    bad = bad or f"{l['name']}.{k}"
            for p, run in (("fp16", "lowprec"), ("p2", "lowbf")):
                px = by.get((step, run, l["name"]))
                pw = px["w1"] if px else math.nan
                if not same_num(l["proxies"][p]["ratio"], x["ratio"][p]) or not same_num(l["proxies"][p]["w1"], pw):
                    bad = bad or f"{l['name']}: proxy {p}: drift {l['proxies'][p]}, export {x['ratio'][p]!r}, {pw!r}"
        check(not bad and n == 4, f"step {step}: export equals wdrift drift --json on {n} tensors, exactly {bad}")


def concurrent(ctx, tmp, cfg, log):
    """Exports in a loop while the daemon appends rows: each one whole and consistent."""
    stop = threading.Event()
    results = []

    def loop():
        while not stop.is_set():
            r = wd("export", "fa", "-c", cfg)
            rows = None
            if r.returncode == 0:
                rows = parse_csv(r.stdout, ["fp16", "p2"])
            results.append((r.returncode, r.stderr.strip(), rows))

    th = threading.Thread(target=loop)
    th.start()
    pubs = {r: Publisher(ctx, tmp, r) for r in RUNS}
    try:
        for s in range(40, 120, 10):
            for run in RUNS:
                snapshot(pubs[run], run, s)
    finally:
        time.sleep(0.5)
        stop.set()
        th.join()
    bad = [x for x in results if x[0] != 0 or x[2] is None]
    steps = [max((r["step"] for r in x[2]), default=0) for x in results if x[2]]
    check(len(results) >= 3 and not bad,
          f"{len(results)} exports while the daemon wrote steps 40 to 110: each exit 0 and whole "
          f"(last steps {steps[0] if steps else None} .. {steps[-1] if steps else None}) {bad[:1]}")
    want = {(s, t): {"fp16": True, "p2": True} for s in range(40, 120, 10) for t in ("layers.0.w", "emb")}
    check(wait_log(log, want), "steps 40 to 110 computed")


def main():
    if not os.path.exists(WDRIFT):
        print(f"not ok 1 - {WDRIFT} is not built")
        return 1
    tmp = tempfile.mkdtemp(prefix="wdrift-t64-")
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        got = live_study(ctx, dm, tmp)
        if not got:
            return harness.summary()
        cfg, log = got
        proxies, want, n_written = log_current(log)
        r = wd("export", "fa", "-c", cfg)
        rows = parse_csv(r.stdout, proxies)
        diff = same_rows(rows, want)
        check(r.returncode == 0 and not diff,
              f"CSV, daemon running: {len(want)} current rows of {n_written} written, every value exact {diff}")
        check(len(want) < n_written, "(the log holds superseded rows: the proxies came after the candidate)")
        fa10 = [x for x in want if x["run"] == "fa" and x["step"] == 10 and x["kind"] == "tensor"]
        check(fa10 and all(x["ratio"]["fp16"] == x["ratio"]["fp16"] and x["ratio"]["p2"] == x["ratio"]["p2"]
                           for x in fa10), "step 10: fa's rows are the ones rewritten with both ratios")
        text = r.stdout
        check('"odd,""name"" <b>&amp; ü"' in text, "a name with a comma and quotes is quoted, its quotes doubled")
        emb20 = [x for x in (rows or []) if x["step"] == 20 and x["run"] == "fa" and x["tensor"] == "emb"]
        nan30 = [x for x in (rows or []) if x["step"] == 30 and x["run"] == "fa" and x["tensor"] == "allnan"]
        check(emb20 and emb20[0]["max_abs_diff"] != emb20[0]["max_abs_diff"]
              and nan30 and nan30[0]["w1"] != nan30[0]["w1"] and nan30[0]["nan"] == 300
              and all(x["ratio"]["p2"] != x["ratio"]["p2"] for x in rows if x["step"] == 30),
              "NaN is an empty field: max|d| of differing counts, W1 of an all-NaN tensor, the missing proxy")
        line = [ln for ln in text.splitlines() if ln.startswith("20,fa,candidate,tensor,emb,")]
        check(line and ",,," in line[0] and "nan" not in line[0].lower(), f"an undefined value is empty ({line[:1]})")
        r = wd("export", "fa", "-c", cfg, "--csv")
        check(r.returncode == 0 and r.stdout == text, "--csv is the default")
        r = wd("export", "fa", "-c", cfg, "--json")
        try:
            j = json.loads(r.stdout)
            jrows = [dict(x, **x.pop("nonfinite")) for x in j["rows"]]
            jdiff = same_rows(jrows, want)
            head = (j["study"], j["file"], j["proxies"])
        except (ValueError, KeyError, TypeError) as e:
            jdiff, head = str(e), None
        check(r.returncode == 0 and not jdiff and head == ("fa", log, ["fp16", "p2"]),
              f"--json parses, and equals the CSV and the log {jdiff}")
        check(r.returncode == 0 and "NaN" not in r.stdout and "null" in r.stdout, "--json: undefined is null")
        against_drift(cfg, rows or [], proxies)
        for fmt, ref in (("--csv", text), ("--json", r.stdout)):
            out = os.path.join(tmp, "o", f"export{fmt[1:]}")
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "w") as f:
                f.write("old contents\n")
            r = wd("export", "fa", "-c", cfg, fmt, "-o", out)
            with open(out) as f:
                body = f.read()
            ok = body == ref
            check(r.returncode == 0 and r.stdout == "" and ok and os.listdir(os.path.dirname(out)) == [os.path.basename(out)],
                  f"-o FILE {fmt}: the whole output replaces the file, nothing on stdout, no temp file left")
            steps = sorted({int(row["step"]) for row in csv.DictReader(io.StringIO(text))})
            said = f"wdrift export: wrote {out}: study 'fa', {len(steps)} step{'s' if len(steps) != 1 else ''} " \
                   f"({steps[0]} to {steps[-1]})\n"
            check(r.stderr == said, f"-o FILE {fmt}: says what it wrote, once, on stderr", repr(r.stderr))
            os.unlink(out)
        r = wd("export", "fa", "-c", cfg, "-o", "-")
        check(r.returncode == 0 and r.stdout == text and r.stderr == "", "-o -: standard output, nothing said")
        relative_storage(cfg, tmp, text, True)
        concurrent(ctx, tmp, cfg, log)
        # the drift log gone while the daemon has results: said so, not "no comparison computed yet"
        os.rename(log, log + ".away")
        r = wd("export", "fa", "-c", cfg)
        check(r.returncode == 1 and "the drift log of study 'fa' is not there, though wdriftd has results for it "
              "(the latest at step 110): removed?" in r.stderr and "no comparison" not in r.stderr,
              "export with the drift log removed under a daemon that has results: says so", r.stderr)
        check(dm.stop() == 0 and dm.start() is not None, "restarted with the drift log gone")
        end = time.time() + 15
        while time.time() < end and not (os.path.exists(log) and "was not there: making it again" in dm.log_text()):
            time.sleep(0.2)
        said = [x for x in dm.log_text().splitlines() if "was not there: making it again" in x]
        check(os.path.exists(log) and len(said) == 1 and f"drift log '{log}' was not there" in said[0],
              "... and the daemon says so when it makes it again from the write-ahead log", dm.log_text()[-1500:])
        if not os.path.exists(log):
            os.rename(log + ".away", log)
        else:
            os.unlink(log + ".away")
        check(dm.stop() == 0, "SIGTERM: the daemon stopped")
        proxies, want, n_written = log_current(log)
        r = wd("export", "fa", "-c", cfg)
        diff = same_rows(parse_csv(r.stdout, proxies), want)
        check(r.returncode == 0 and not diff and max(x["step"] for x in want) == 110,
              f"CSV, daemon stopped: {len(want)} rows equal the log {diff}")
        r = wd("export", "fa", "--log", log)
        check(r.returncode == 0 and r.stdout == wd("export", "fa", "-c", cfg).stdout, "--log FILE, no config needed")
        relative_storage(cfg, tmp, r.stdout, False)
        check(dm.start() is not None, "daemon started again")
        dm.stop(signal.SIGKILL)
        r = wd("export", "fa", "-c", cfg)
        diff = same_rows(parse_csv(r.stdout, proxies), want)
        check(r.returncode == 0 and not diff, f"after kill -9 (the log still flagged as written): export reads it {diff}")
        usage(cfg)
        malformed(tmp, log)
        odd_names(tmp)
    finally:
        harness.teardown(dm, tmp, ctx)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
