#!/usr/bin/env python3
"""t60_cli.py: every daemon subcommand of the wdrift CLI against a live daemon.

send publishes checkpoint files (f32, a bf16 tensor, a 2-D one) as three
runs; status, runs, studies, drift, alerts and watch answer in tables and in
--json; drift --json equals wdrift compare --json on the spool files; every
subcommand has --help; usage errors exit 2; with the daemon down each says
so in one line within a few seconds and exits 1; a failed output file
(keygen, export, report) is named in the error as the user gave it.
"""
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Daemon, bf16, check, free_port  # noqa: E402

WDRIFT = os.path.abspath(os.path.join(os.environ.get("BUILD", "build"), "wdrift"))
ALERT = """\
alerts:
  - name: fa-vs-fp16
    study: fa
    metric: ratio
    proxy: fp16
    threshold: 1000
"""


def ckpt(path, step, drift, f16=False):
    r = np.random.default_rng(step)
    with h5py.File(path, "w") as f:
        for name, shape in (("layers.0.w", (50, 40)), ("norm", (40,))):
            v = (r.standard_normal(shape) * 0.02).astype(np.float32)
            v += (np.random.default_rng(step + 99).standard_normal(shape) * drift).astype(np.float32)
            f[name] = v.astype(np.float16) if f16 else v
        e = (r.standard_normal(3000) * 0.02).astype(np.float32)
        e += (np.random.default_rng(step + 98).standard_normal(3000) * drift).astype(np.float32)
        ds = f.create_dataset("emb", data=bf16(e))
        ds.attrs["dtype"] = "bfloat16"


def wd(*args, env=None, timeout=30):
    return subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def small_files():
    """The child may write files of 100 bytes at most, and gets EFBIG (not SIGXFSZ) past that:
    a disk that fills up, which a test cannot make (no full tmpfs here)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


def output_errors(tmp, cfg):
    """Errors name the output path the user gave, never FILE.tmp-PID (issue 15)."""
    out = os.path.join(tmp, "out")
    os.mkdir(out)
    cases = (
        ("keygen into a missing directory", ["keygen", os.path.join(out, "no", "such", "k")],
         os.path.join(out, "no", "such", "k") + ": cannot create", None),
        ("keygen on a full disk", ["keygen", os.path.join(out, "k")], os.path.join(out, "k") + ": cannot write",
         small_files),
        ("export -o on a full disk", ["export", "fa", "-c", cfg, "-o", os.path.join(out, "fa.csv")],
         os.path.join(out, "fa.csv") + ": cannot write", small_files),
        ("report -o into a missing directory", ["report", "fa", "-c", cfg, "-o", os.path.join(out, "x", "r.html")],
         os.path.join(out, "x", "r.html") + ": cannot create", None),
    )
    for what, args, want, pre in cases:
        r = subprocess.run([WDRIFT, *args], capture_output=True, text=True, timeout=60, preexec_fn=pre)
        err = r.stderr.strip()
        check(r.returncode == 1 and len(err.splitlines()) == 1 and want in err and ".tmp-" not in err
              and not os.listdir(out), f"{what}: exit 1, the error names the path ({err})")


def output_targets(tmp, cfg):
    """-o PATH never replaces what is not a regular file (issue 15): a symlink keeps
    pointing at its target, which gets the output; a FIFO, /dev/null and /dev/full are
    written through and stay what they were; a dangling symlink and a directory are refused."""
    ref = wd("export", "fa", "-c", cfg)
    check(ref.returncode == 0 and ref.stdout, "export to stdout", ref.stderr)
    d = os.path.join(tmp, "targets")
    os.mkdir(d)
    target, link = os.path.join(d, "target.csv"), os.path.join(d, "link.csv")
    with open(target, "w") as f:
        f.write("old\n")
    os.symlink("target.csv", link)
    r = wd("export", "fa", "-c", cfg, "-o", link)
    body = open(target).read()
    check(r.returncode == 0 and os.path.islink(link) and os.readlink(link) == "target.csv" and body == ref.stdout
          and sorted(os.listdir(d)) == ["link.csv", "target.csv"],
          "-o SYMLINK: the link stays, its target gets the output", r.stderr)
    dangling = os.path.join(d, "dangling.csv")
    os.symlink("missing.csv", dangling)
    r = wd("export", "fa", "-c", cfg, "-o", dangling)
    check(r.returncode == 1 and dangling in r.stderr and "does not exist" in r.stderr and os.path.islink(dangling)
          and not os.path.exists(os.path.join(d, "missing.csv")),
          f"-o DANGLING-SYMLINK: refused, naming it, nothing made ({r.stderr.strip()})")
    r = wd("export", "fa", "-c", cfg, "-o", d)
    check(r.returncode == 1 and d in r.stderr and "is a directory" in r.stderr and os.path.isdir(d),
          f"-o DIRECTORY: refused, naming it ({r.stderr.strip()})")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    r = wd("export", "fa", "-c", cfg, "-o", fifo)
    reader.join(10)
    if reader.is_alive():   # nothing opened the FIFO for writing: unblock the reader
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
    check(r.returncode == 0 and got == [ref.stdout] and stat.S_ISFIFO(os.lstat(fifo).st_mode),
          "-o FIFO: written through, still a FIFO", r.stderr)
    r = wd("export", "fa", "-c", cfg, "-o", "/dev/null")
    check(r.returncode == 0 and stat.S_ISCHR(os.stat("/dev/null").st_mode), "-o /dev/null: exit 0, still a device",
          r.stderr)
    if stat.S_ISCHR(os.stat("/dev/full").st_mode):
        r = wd("export", "fa", "-c", cfg, "-o", "/dev/full")
        err = r.stderr.strip()
        check(r.returncode == 1 and "/dev/full" in err and "No space left on device" in err
              and stat.S_ISCHR(os.stat("/dev/full").st_mode) and len(err.splitlines()) == 1,
              f"-o /dev/full: exit 1 naming it, still a character device ({err})")
    r = subprocess.run(f"'{WDRIFT}' export fa -c '{cfg}' -o /dev/stdout | cat", shell=True, capture_output=True,
                       text=True, timeout=30)
    check(r.returncode == 0 and r.stdout == ref.stdout, "-o /dev/stdout into a pipe: the output", r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t60-")
    dm = Daemon(tmp)
    cfg = os.path.join(tmp, "wdrift.yaml")
    try:
        with open(dm.write_config(), "a") as f:
            f.write(ALERT)
        check(dm.start() is not None, "daemon ready")
        for run, drift, f16 in (("base", 0.0, False), ("lowprec", 0.002, True), ("fa", 0.0004, False)):
            for step in (10, 20):
                p = os.path.join(tmp, f"{run}-{step}.h5")
                ckpt(p, step, drift, f16)
                r = wd("send", "--run", run, "--step", str(step), p, "-c", cfg)
                check(r.returncode == 0 and "durable" in r.stdout, f"send {run} {step}: {r.stdout.strip()}{r.stderr.strip()}")
        r = wd("send", "--run", "fa", "--step", "20", os.path.join(tmp, "fa-20.h5"), "-c", cfg, "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["duplicate"] is True, "send again: a duplicate, --json")
        r = wd("send", "--run", "fa", "--step", "20", os.path.join(tmp, "fa-20.h5"), "-c", cfg)
        check(r.returncode == 0 and "already durable with the same content (a duplicate: nothing stored anew)"
              in r.stdout and "0 bytes" not in r.stdout, "send again: said a duplicate, not '0 bytes' (a trial's "
              "read it as nothing sent)", r.stdout + r.stderr)
        # a dataset that is not a float (BatchNorm's counter): an error naming --skip-other, before anything is
        # sent; with it, left out and said (a trial's had no way past it, as compare has)
        mixed, ints = os.path.join(tmp, "mixed.h5"), os.path.join(tmp, "ints.h5")
        with h5py.File(mixed, "w") as f:
            f["w"] = np.arange(16, dtype=np.float32)
            f["bn.num_batches_tracked"] = np.array(7, dtype=np.int64)
        with h5py.File(ints, "w") as f:
            f["counter"] = np.arange(4, dtype=np.int64)
        r = wd("send", "--run", "side", "--step", "1", mixed, "-c", cfg)
        runs = json.loads(wd("runs", "-c", cfg, "--json").stdout)["runs"]
        check(r.returncode == 1 and "dataset 'bn.num_batches_tracked': unsupported element type (8-byte signed "
              "integer) (--skip-other leaves out datasets that are not floats, and empty ones)" in r.stderr
              and "side" not in [x["name"] for x in runs], "send: a dataset not a float names --skip-other, nothing "
              "sent", r.stderr)
        r = wd("send", "--run", "side", "--step", "1", mixed, "--skip-other", "-c", cfg, "--json")
        o = json.loads(r.stdout) if r.returncode == 0 else {}
        check(o.get("skipped") == ["bn.num_batches_tracked"] and o.get("tensors") == 1
              and "wdrift send: note: --skip-other left out 1 dataset that is not a float, or empty: "
                  "'bn.num_batches_tracked'\n" in r.stderr,
              "send --skip-other: the rest sent, the one left out said on stderr and in --json", r.stdout + r.stderr)
        r = wd("send", "--run", "side", "--step", "2", ints, "--skip-other", "-c", cfg)
        check(r.returncode == 1 and "nothing to send: --skip-other left out every dataset (1, such as 'counter'"
              in r.stderr, "send --skip-other with nothing left: an error", r.stderr)
        r = wd("send", "--run", "x y", "--step", "1", os.path.join(tmp, "fa-20.h5"), "-c", cfg)
        check(r.returncode == 1 and "refused" in r.stderr and "run" in r.stderr
              and "listen.ingest of" not in r.stderr,
              f"a bad run name: exit 1, refused before sending, no config to check ({r.stderr.strip()})")
        # the daemon's own refusal (other content under a durable step): its reason, and no
        # config to check, since the endpoint was right
        r = wd("send", "--run", "fa", "--step", "20", os.path.join(tmp, "fa-10.h5"), "-c", cfg)
        check(r.returncode == 1 and "the daemon refused" in r.stderr and "conflict" in r.stderr
              and "listen.ingest of" not in r.stderr,
              f"a snapshot the daemon refuses: exit 1 with its reason, no config named ({r.stderr.strip()})")
        # a mistyped option gets "did you mean", as commands, runs and keys do; a value given to
        # an option that takes none says so (a trial: only "unknown option")
        for args, needle in ((["drift", "fa", "--layr", "0.*", "-c", cfg], "did you mean '--layer'?"),
                             (["drift", "fa", "--stpe", "20", "-c", cfg], "did you mean '--step'?"),
                             (["runs", "--confg", cfg], "did you mean '--config'?"),
                             (["status", "--json=1", "-c", cfg], "option '--json' takes no value"),
                             (["status", "--js=1", "-c", cfg], "option '--json' takes no value"),
                             (["status", "-json", "-c", cfg], "unknown option '-j' (in '-json'); did you mean "
                              "'--json'?"),
                             (["drift", "fa", "--latest", "-json", "-c", cfg], "did you mean '--json'?"),
                             (["status", "--=x", "-c", cfg], "unknown option '--=x'")):
            r = wd(*args)
            check(r.returncode == 2 and needle in r.stderr, f"wdrift {' '.join(args[:2])}: {needle}", r.stderr)
        r = wd("runs", "--bogus")
        check(r.returncode == 2 and "unknown option '--bogus'" in r.stderr and "did you mean" not in r.stderr,
              "an option near none: no suggestion", r.stderr)
        r = wd("version")
        check(r.returncode == 2 and "unknown command 'version'; did you mean '--version'?" in r.stderr,
              "wdrift version: did you mean --version", r.stderr[:200])
        r = wd("help", "help")
        check(r.returncode == 0 and r.stdout.startswith("usage: wdrift"), "wdrift help help: the usage",
              r.stdout[:200] + r.stderr[:200])
        r = wd("help", "--json")
        check(r.returncode == 0 and r.stdout.startswith("usage: wdrift"), "wdrift help --json: the usage",
              r.stdout[:200] + r.stderr[:200])
        r = wd("runs", "-c", cfg)
        head = r.stdout.splitlines()[0] if r.stdout else ""
        check(r.returncode == 0 and head.startswith("run ") and head.split()[1:3] == ["role", "study"]
              and head.index("role") < head.index("study") and "  role" not in head[:head.index("role") - 2]
              and any(ln.split()[:2] == ["base", "baseline"] and ln.index("baseline") == head.index("role")
                      for ln in r.stdout.splitlines()),
              "runs: the text columns (run, role, study) left-aligned under their heads (a trial)", r.stdout)
        for cmd in ("studies", "runs", "alerts", "status"):
            r = wd(cmd, "-c", cfg)
            check(r.returncode == 0 and not any(ln != ln.rstrip() for ln in r.stdout.splitlines()),
                  f"{cmd}: no line ends in blanks", repr([ln for ln in r.stdout.splitlines() if ln != ln.rstrip()][:3]))
        # help COMMAND SUBCOMMAND is COMMAND SUBCOMMAND --help
        r, rr = wd("help", "runs", "rm"), wd("runs", "rm", "--help")
        check(r.returncode == 0 and r.stdout == rr.stdout and "--force" in r.stdout,
              "wdrift help runs rm prints what wdrift runs rm --help does", r.stdout[:300])
        # keygen's failure is JSON on stdout with --json, as every command's
        kp = os.path.join(tmp, "k1")
        r = wd("keygen", "--json", kp)
        check(r.returncode == 0 and json.loads(r.stdout).get("ok", True), "keygen --json: made", r.stdout + r.stderr)
        r = wd("keygen", "--json", kp)
        got = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        check(r.returncode == 1 and got.get("ok") is False and "exists" in got.get("error", ""),
              "keygen --json over an existing key: {\"ok\": false, \"error\": ...} on stdout, exit 1",
              r.stdout + r.stderr)
        time.sleep(1.0)   # let compute catch up
        r = wd("status", "-c", cfg)
        check(r.returncode == 0 and "snapshots" in r.stdout and "engine" in r.stdout, "status: a table")
        r = wd("status", "-c", cfg, "--json")
        st = json.loads(r.stdout) if r.returncode == 0 else {}
        check(st.get("snapshots", {}).get("durable") == 7 and "ok" not in st,
              f"status --json: 7 durable (6 of the study, 1 of run side) ({st.get('snapshots')})")
        r = wd("runs", "-c", cfg)
        check(r.returncode == 0 and all(x in r.stdout for x in ("base", "lowprec", "fa", "last step")), "runs: a table")
        r = wd("runs", "-c", cfg, "--json")
        runs = {x["name"]: x for x in json.loads(r.stdout)["runs"]}
        check(runs.get("fa", {}).get("last_step") == 20 and runs["fa"]["durable"] == 2, "runs --json")
        r = wd("studies", "-c", cfg)
        check(r.returncode == 0 and "fp16=lowprec" in r.stdout, f"studies: a table ({r.stdout.strip()})")
        r = wd("studies", "-c", cfg, "--json")
        check(json.loads(r.stdout)["studies"][0]["proxies"] == {"fp16": "lowprec"}, "studies --json")
        r = wd("drift", "fa", "--latest", "-c", cfg)
        check(r.returncode == 0 and "step 20" in r.stdout and "ratio[fp16]" in r.stdout and "layers.0.w" in r.stdout,
              "drift --latest: a table per candidate")
        r = wd("drift", "fa", "--step", "10", "--layer", "layers.*", "-c", cfg, "--json")
        d = json.loads(r.stdout) if r.returncode == 0 else {}
        layers = d.get("candidates", {}).get("fa", {}).get("layers", [])
        check(d.get("step") == 10 and [l["name"] for l in layers] == ["layers.0.w"], "drift --step --layer --json")
        r = wd("drift", "fa", "--step", "10", "--layers", "layers.*", "-c", cfg, "--json")
        check(r.returncode == 0 and json.loads(r.stdout) == d,
              "drift --layers, as compare spells it, is --layer (a trial's typed it)", r.stdout + r.stderr)
        r = wd("drift", "fa", "--layers", "layers.*", "--layer", "emb", "-c", cfg)
        check(r.returncode == 2 and "--layer is given once in drift, with one GLOB (got 'layers.*', then 'emb')"
              in r.stderr, "drift: a second --layer is a usage error, not dropped in silence", r.stderr)
        r = wd("--help")
        check(r.returncode == 0 and "runs rm RUN forgets one" in r.stdout, "wdrift --help names runs rm", r.stdout)
        spool = os.path.join(tmp, "var", "spool")
        ref = json.loads(wd("compare", f"{spool}/base/10.h5", f"{spool}/fa/10.h5", "--proxy",
                            f"fp16={spool}/lowprec/10.h5", "--json").stdout)
        refl = {l["name"]: l for l in ref["layers"]}
        d = json.loads(wd("drift", "fa", "--step", "10", "-c", cfg, "--json").stdout)
        same = True
        for l in d["candidates"]["fa"]["layers"]:
            x = refl[l["name"]]
            for k in ("w1", "max_abs_diff", "rel_l2"):
                same = same and abs(l[k] - x[k]) <= 1e-12 * abs(x[k])
            same = same and abs(l["proxies"]["fp16"]["ratio"] - x["proxies"]["fp16"]["ratio"]) <= 1e-12 * x["proxies"]["fp16"]["ratio"]
            same = same and l["numel"] == x["numel"]
        check(same and len(d["candidates"]["fa"]["layers"]) == 3, "drift --json equals wdrift compare --json")
        r = wd("drift", "nope", "-c", cfg)
        check(r.returncode == 1 and "no study 'nope'" in r.stderr, "drift of an unknown study: exit 1")
        check("(studies: fa)" in r.stderr, "... naming the studies there are", r.stderr)
        r = wd("drift", "fb", "-c", cfg)
        check(r.returncode == 1 and "no study 'fb'; did you mean 'fa'? (studies: fa)" in r.stderr,
              "drift of a typo of a study: did you mean, as runs rm says it", r.stderr)
        r = wd("-c", cfg, "runs", "--json")
        check(r.returncode == 2 and f"options go after the command: wdrift runs -c {cfg} --json" in r.stderr,
              "an option before the command: the line, reordered", r.stderr)
        r = wd("-c", "status", "runs", "--endpoint", "ipc:///a b")
        check(r.returncode == 2 and "options go after the command: wdrift runs -c status --endpoint 'ipc:///a b'"
              in r.stderr, "... an option's value that is a command's name is the value; a word with a space "
              "quoted (a review)", r.stderr)
        r = wd("studies", "fa", "-c", cfg)
        check(r.returncode == 2 and "unexpected argument 'fa': `wdrift studies` takes options only; "
              "`wdrift drift STUDY` shows one study" in r.stderr, "studies given a study: says what shows one",
              r.stderr)
        r = wd("status", "x", "-c", cfg)
        check(r.returncode == 2 and "unexpected argument 'x': `wdrift status` takes options only\n" in r.stderr,
              "status given an argument: it takes options only", r.stderr)
        r = wd("drift", "lowprec", "-c", cfg)
        check(r.returncode == 1 and "no study 'lowprec': that is a run, proxy fp16 in study 'fa' (studies: fa)"
              in r.stderr, "drift of a run's name: said to be a run, and whose", r.stderr)
        r = wd("alerts", "-c", cfg)
        check(r.returncode == 0 and "fa-vs-fp16" in r.stdout and "ratio > 1000" in r.stdout, "alerts: a table")
        r = wd("alerts", "-c", cfg, "--json")
        al = json.loads(r.stdout)["alerts"][0]
        check(al["name"] == "fa-vs-fp16" and al["instances"][0]["state"] == "inactive", "alerts --json")
        # watch: one event while a snapshot arrives
        w = subprocess.Popen([WDRIFT, "watch", "--count", "1", "--json", "-c", cfg], stdout=subprocess.PIPE, text=True)
        w2 = subprocess.Popen([WDRIFT, "watch", "--count", "1", "-c", cfg], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        # connected (a slow start under a sanitizer could outlast a fixed sleep): the text one says so;
        # --json says nothing on stderr, and, started first, is taken to be connected by then. Then
        # their subscriptions reach the daemon's PUB socket.
        check("watching" in w2.stderr.readline(), "the watches connected")
        time.sleep(0.5)
        ckpt(os.path.join(tmp, "fa-30.h5"), 30, 0.0004)
        with h5py.File(os.path.join(tmp, "fa-30.h5"), "r+") as f:   # 5 NaN and an +Inf in one tensor
            v = f["layers.0.w"][...]
            v[0, :5], v[0, 5] = np.nan, np.inf
            f["layers.0.w"][...] = v
        ckpt(os.path.join(tmp, "base-30.h5"), 30, 0.0)
        wd("send", "--run", "base", "--step", "30", os.path.join(tmp, "base-30.h5"), "-c", cfg)
        wd("send", "--run", "fa", "--step", "30", os.path.join(tmp, "fa-30.h5"), "-c", cfg)
        try:
            out, _ = w.communicate(timeout=10)
            ev = json.loads(out.strip().splitlines()[0])
            ok = ev["topic"] == "drift.fa" and ev["event"]["step"] == 30
            fa_ev = ev["event"]["runs"].get("fa", {})
        except (subprocess.TimeoutExpired, IndexError, ValueError, KeyError):
            w.kill()
            ok, fa_ev = False, {}
        check(ok, "watch --count 1 --json: the drift event of step 30")
        try:
            line = w2.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            w2.kill()
            line = w2.communicate()[0]
        check(line.startswith("drift  fa step 30:") and " NONFINITE 6" in line and "ABSENT" not in line,
              "watch's line says the candidate's 6 NaN and Inf values", line)
        check(fa_ev.get("nonfinite") == 6 and fa_ev.get("absent") == 0,
              "the event counts the candidate's NaN and Inf (a watch line read as healthy), and no absent "
              "tensor", json.dumps(fa_ev))
        # the candidate's NaN and Inf are in the table and said under it, not only in --json
        # (a trial: a NaN-ridden tensor read as max|d| 0, rel L2 0)
        r = wd("drift", "fa", "--step", "30", "-c", cfg)
        rows = {ln.split()[0]: ln.split() for ln in r.stdout.splitlines() if ln.strip()}
        head = next((ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] == ["tensor"]), [])
        col = 5   # after tensor, elements, W1, max|d|, rel L2 (two words in the header)
        check(r.returncode == 0 and head[6:7] == ["nonfinite"] and rows.get("layers.0.w", [""] * 9)[col] == "6"
              and rows.get("norm", [""] * 9)[col] == "-"
              and "nonfinite  6 values of the candidate are NaN or Inf (5 NaN, 1 +Inf, 0 -Inf), left out of "
              "W1, max|d| and rel L2" in r.stdout,
              "drift: a nonfinite column (the candidate's count, '-' for none) and a line under the candidate",
              r.stdout)
        said = [x for x in dm.log_text().splitlines() if "candidate 'fa' holds" in x]
        check(len(said) == 1 and "step 30: candidate 'fa' holds 6 values that are NaN or Inf (5 NaN, 1 +Inf, "
              "0 -Inf) in 1 of its" in said[0] and "the first 'layers.0.w'" in said[0],
              "the daemon's log says the candidate's NaN and Inf once", "\n".join(said))
        output_errors(tmp, cfg)
        output_targets(tmp, cfg)
        # an --endpoint typo beside the daemon's socket: "did you mean", and no word of a
        # listen.* edit, which is the hint for a config's endpoint (a trial's typo got it)
        r = wd("status", "--endpoint", f"ipc://{tmp}/run/contrl.sock")
        check(r.returncode == 1 and f"did you mean 'ipc://{tmp}/run/control.sock'?" in r.stderr
              and "listen.*" not in r.stderr, "status --endpoint with a typo: the socket beside it, no listen.* hint",
              r.stderr)
        r = wd("status", "--endpoint", f"ipc://{tmp}/rnu/control.sock")
        check(r.returncode == 1 and f"did you mean 'ipc://{tmp}/run/control.sock'?" in r.stderr,
              "status --endpoint with a typo in the directory: the socket in the directory it is near",
              r.stderr)
        # a trailing '/' (pasted from a path): the socket it names without it, not "Not a
        # directory" (a trial's), nor "the port must be 1 to 65535" of a good port
        for ep, meant in ((f"ipc://{tmp}/run/control.sock/", f"ipc://{tmp}/run/control.sock"),
                          ("tcp://127.0.0.1:5555/", "tcp://127.0.0.1:5555")):
            r = wd("status", "--endpoint", ep)
            check(r.returncode == 2 and f"'{ep}' ends in '/'" in r.stderr
                  and f"did you mean '{meant}'?" in r.stderr and "port must" not in r.stderr
                  and "Not a directory" not in r.stderr,
                  f"status --endpoint {ep}: the endpoint without its '/'", r.stderr)
        # a tcp:// port nothing listens on: "nothing listens", as the publisher says it, in
        # about a second (it waited 3 x 1.5 s for "not answering")
        tport = free_port()
        for args in (("status",), ("runs",), ("drift", "fa")):
            t0 = time.time()
            r = wd(*args, "--endpoint", f"tcp://127.0.0.1:{tport}")
            dt = time.time() - t0
            check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
                  and f"nothing listens at tcp://127.0.0.1:{tport}" in r.stderr and "listen.control?" in r.stderr
                  and "not answering" not in r.stderr
                  and dt < 4, f"{args[0]} --endpoint tcp:// with nothing listening: said in {dt:.1f} s, one line",
                  r.stderr)
        for sub in ("status", "runs", "studies", "drift", "alerts", "reload", "watch", "send"):
            r = wd(sub, "--help")
            check(r.returncode == 0 and r.stdout.startswith(f"usage: wdrift {sub}") and "--json" in r.stdout,
                  f"{sub} --help")
            # the usage lines name the options the body lists (a trial: no --server-key, --key there)
            synopsis = r.stdout.split("\n\n")[0]
            check("[--server-key K]" in synopsis and "[--key FILE]" in synopsis and "[-c FILE" in synopsis,
                  f"{sub} --help: the usage names -c, --server-key and --key", synopsis)
        check(wd("status", "--bogus").returncode == 2 and wd("drift").returncode == 2 and
              wd("send", "x.h5").returncode == 2 and wd("drift", "fa", "--step", "x").returncode == 2,
              "usage errors exit 2")
        # the daemon down: one line, a few seconds, exit 1 (a clean stop removed its
        # socket file, so it is said at once)
        check(dm.stop() == 0, "daemon stopped")
        for sub in ("status", "runs", "drift"):
            t0 = time.time()
            args = [sub, "-c", cfg] + (["fa"] if sub == "drift" else [])
            r = wd(*args, env={"WDRIFT_TIMEOUT_MS": "500"})
            dt = time.time() - t0
            check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "no socket at" in r.stderr
                  and "is wdriftd running?" in r.stderr and dt < 5,
                  f"{sub} with the daemon down: one line in {dt:.1f} s, exit 1", r.stderr)
        # send too: it waited 35 s in silence for acks from a socket file that was not there
        t0 = time.time()
        r = wd("send", "--run", "fa", "--step", "40", os.path.join(tmp, "fa-20.h5"), "-c", cfg)
        dt = time.time() - t0
        check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "no socket at" in r.stderr
              and "is wdriftd running?" in r.stderr and "--server-key" not in r.stderr and dt < 5
              and f"(listen.ingest of {os.path.realpath(cfg)})" in r.stderr,
              f"send with the daemon down: one line in {dt:.1f} s, exit 1, no key hint, the config "
              "that named the endpoint", r.stderr)
        # --ingest alone, from a directory with no config: no config needed (it asked for one)
        r = subprocess.run([WDRIFT, "send", "--run", "fa", "--step", "40", os.path.join(tmp, "fa-20.h5"),
                            "--ingest", f"ipc://{tmp}/nothing.sock"], capture_output=True, text=True,
                           cwd=tmp, env=dict(os.environ, WDRIFT_CONFIG=""), timeout=60)
        check(r.returncode == 1 and f"no socket at {tmp}/nothing.sock" in r.stderr
              and "no configuration" not in r.stderr and "listen.ingest of" not in r.stderr,
              "send --ingest needs no config, and names none", r.stderr)
        # no config found: send's hint named --endpoint, which send took and ignored
        # (a new user's trial followed it, and got "no ingest endpoint")
        r = subprocess.run([WDRIFT, "send", "--run", "fa", "--step", "40", os.path.join(tmp, "fa-20.h5")],
                           capture_output=True, text=True, cwd=tmp, env=dict(os.environ, WDRIFT_CONFIG=""),
                           timeout=60)
        check(r.returncode == 1 and "no configuration" in r.stderr and "give --ingest EP" in r.stderr
              and "--endpoint" not in r.stderr, "send with no config found: its hint names --ingest",
              r.stderr)
        r = subprocess.run([WDRIFT, "send", "--run", "fa", "--step", "40", os.path.join(tmp, "fa-20.h5"),
                            "--endpoint", f"ipc://{tmp}/run/ingest.sock"], capture_output=True, text=True,
                           cwd=tmp, env=dict(os.environ, WDRIFT_CONFIG=""), timeout=60)
        first = r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""
        check(r.returncode == 2 and "--endpoint" in first and "give --ingest EP" in first,
              "send --endpoint: a usage error that names --ingest", r.stderr)
        # --ingest naming a regular file: said as such, with no config to check (it named
        # "the config's listen.*" with none given)
        r = subprocess.run([WDRIFT, "send", "--run", "fa", "--step", "40", os.path.join(tmp, "fa-20.h5"),
                            "--ingest", f"ipc://{tmp}/fa-20.h5"], capture_output=True, text=True,
                           cwd=tmp, env=dict(os.environ, WDRIFT_CONFIG=""), timeout=60)
        check(r.returncode == 1 and f"{tmp}/fa-20.h5 is a regular file, not a socket" in r.stderr
              and "listen." not in r.stderr and len(r.stderr.strip().splitlines()) == 1,
              "send --ingest to a regular file: not a socket, no config named", r.stderr)
        # a socket file nothing accepts on (a daemon killed with SIGKILL leaves one) and a
        # tcp port with no daemon: send waited 35 s, then guessed at CURVE keys
        stale = os.path.join(tmp, "stale.sock")
        lsock = socket.socket(socket.AF_UNIX)
        lsock.bind(stale)
        port = free_port()
        try:
            for ep, said in ((f"ipc://{stale}", f"nothing listens on the socket file {stale}"),
                             (f"tcp://127.0.0.1:{port}", f"nothing listens at tcp://127.0.0.1:{port}")):
                t0 = time.time()
                r = wd("send", "--run", "fa", "--step", "40", os.path.join(tmp, "fa-20.h5"), "--ingest", ep)
                dt = time.time() - t0
                check(r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and said in r.stderr
                      and "--server-key" not in r.stderr and 4 < dt < 15,
                      f"send to {ep.split(':')[0]} with nothing listening: said in {dt:.1f} s, one line, exit 1",
                      r.stderr)
        finally:
            lsock.close()
        # a config whose sockets bind every interface (tcp://*:PORT, as docs/security.md
        # shows, or 0.0.0.0): the CLI reading it connects to 127.0.0.1 on that port
        # (ZeroMQ said "Invalid argument", send "ZeroMQ refuses it")
        os.makedirs(os.path.join(tmp, "wild"))
        wild = Daemon(os.path.join(tmp, "wild"))
        wcfg = wild.write_config(extra="auth:\n  allow_insecure: true\n")
        wport, wcport, weport = free_port(), free_port(), free_port()
        with open(wcfg) as f:
            text = f.read()
        with open(wcfg, "w") as f:
            f.write(text.replace(f"ingest: ipc://{wild.d}/run/ingest.sock", f"ingest: tcp://*:{wport}")
                    .replace(f"control: ipc://{wild.d}/run/control.sock", f"control: tcp://0.0.0.0:{wcport}")
                    .replace(f"events: ipc://{wild.d}/run/events.sock", f"events: tcp://*:{weport}"))
        try:
            check(wild.start() is not None, "a daemon on tcp://*:PORT starts", wild.log_text()[-2000:])
            r = wd("status", "-c", wcfg, "--json")
            check(r.returncode == 0 and "snapshots" in r.stdout,
                  "status reaches a control socket on tcp://0.0.0.0:PORT", r.stderr)
            r = wd("send", "--run", "fa", "--step", "7", os.path.join(tmp, "fa-20.h5"), "-c", wcfg)
            check(r.returncode == 0 and "durable" in r.stdout,
                  "send reaches an ingest socket on tcp://*:PORT", r.stdout + r.stderr)
        finally:
            wild.stop()
        # the same config with nothing listening: said at 127.0.0.1, naming the entry
        r = wd("send", "--run", "fa", "--step", "7", os.path.join(tmp, "fa-20.h5"), "-c", wcfg)
        check(r.returncode == 1 and f"nothing listens at tcp://127.0.0.1:{wport}" in r.stderr
              and f"(listen.ingest of {os.path.realpath(wcfg)})" in r.stderr,
              "send to a config's tcp://*:PORT with no daemon: 127.0.0.1 named, and the entry", r.stderr)
        # a port the daemon picks (tcp://HOST:*) is no port to connect to: said at once,
        # naming the entry (ZeroMQ refused it with "Invalid argument")
        with open(wcfg) as f:
            text = f.read()
        with open(wcfg, "w") as f:
            f.write(text.replace(f"ingest: tcp://*:{wport}", "ingest: tcp://127.0.0.1:*"))
        r = wd("send", "--run", "fa", "--step", "7", os.path.join(tmp, "fa-20.h5"), "-c", wcfg)
        check(r.returncode == 1 and "'tcp://127.0.0.1:*' is a port for a daemon to bind" in r.stderr
              and f"(listen.ingest of {os.path.realpath(wcfg)})" in r.stderr,
              "send to a config's tcp://HOST:*: a port to bind, and the entry", r.stderr)
        # typed endpoints a daemon binds but nothing connects to: said as that, at once; a port
        # out of range is not offered '*', which a connect refuses (a trial)
        for ep, needle in (("tcp://127.0.0.1:99999", "the port must be 1 to 65535"),
                           ("tcp://*:5555", "'tcp://*:5555' names every interface of a host, which a daemon binds"),
                           ("tcp://127.0.0.1:*", "'tcp://127.0.0.1:*' is a port for a daemon to bind")):
            r = wd("status", "--endpoint", ep)
            check(r.returncode == 2 and needle in r.stderr and "or *" not in r.stderr
                  and "Invalid argument" not in r.stderr,
                  f"status --endpoint {ep}: a usage error that says what is wrong with it", r.stderr)
        # a daemon that comes up while send waits (a restart) still gets the snapshot
        os.makedirs(os.path.join(tmp, "late"))
        late = Daemon(os.path.join(tmp, "late"))
        lcfg = late.write_config()
        with open(lcfg) as f:
            text = f.read()
        with open(lcfg, "w") as f:
            f.write(text.replace(f"ingest: ipc://{late.d}/run/ingest.sock", f"ingest: tcp://127.0.0.1:{port}"))
        p = subprocess.Popen([WDRIFT, "send", "--run", "fa", "--step", "41", os.path.join(tmp, "fa-20.h5"),
                              "--ingest", f"tcp://127.0.0.1:{port}"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.3)
            check(late.start() is not None, "a daemon starts on the port send is waiting on")
            out, err = p.communicate(timeout=60)
            check(p.returncode == 0 and "acked" in out, "send waits out a daemon that starts meanwhile", out + err)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            late.stop()
        r = wd("send", "--help")
        check(r.returncode == 0 and "--server-key K" in r.stdout and "--key FILE" in r.stdout,
              "send --help lists --server-key and --key, which its errors suggest")
        r = wd("status", "--endpoint", f"ipc://{tmp}/nothing.sock", env={"WDRIFT_TIMEOUT_MS": "300"})
        check(r.returncode == 1 and f"ipc://{tmp}/nothing.sock" in r.stderr, "--endpoint overrides the config")
        # a typo in the scheme is said as the config says it (it was "Protocol not supported"),
        # when the option is read: a usage error (exit 2), with the hint to --help
        for cmd, opt in (("status", "--endpoint"), ("watch", "--endpoint"), ("alerts", "--endpoint"),
                         ("drift", "--endpoint"), ("send", "--ingest")):
            r = wd(cmd, opt, f"icp://{tmp}/run/control.sock")
            check(r.returncode == 2 and f"{opt}: bad endpoint 'icp://" in r.stderr
                  and "expected ipc://PATH, tcp://HOST:PORT or inproc://NAME" in r.stderr
                  and f"try 'wdrift {cmd} --help'" in r.stderr
                  and "Protocol not supported" not in r.stderr, f"{cmd} {opt} icp://: the typo named, exit 2",
                  r.stderr)
        # what a daemon binds but a client never reaches
        r = wd("status", "--endpoint", "inproc://wdrift")
        check(r.returncode == 2 and "never reaches wdriftd, which runs in another process" in r.stderr,
              "--endpoint inproc://: named as unreachable from the CLI, exit 2", r.stderr)
        r = wd("status", "--endpoint", "tcp://127.0.0.1:*")
        check(r.returncode == 2 and "a port for a daemon to bind" in r.stderr, "--endpoint tcp://HOST:*: named, exit 2",
              r.stderr)
        # report and export read the drift log: --endpoint, whatever its value, does not apply
        for cmd in ("report", "export"):
            r = wd(cmd, "s", "--endpoint", "icp://x")
            check(r.returncode == 2 and "--endpoint does not apply" in r.stderr and "bad endpoint" not in r.stderr,
                  f"{cmd} --endpoint icp://x: says --endpoint does not apply, not that it is malformed", r.stderr)
        # a socket file this user may not write: said as such (as root, run as nobody; skipped
        # otherwise, and under a sanitizer, whose report file nobody could not write)
        if os.geteuid() == 0 and shutil.which("setpriv") and not os.environ.get("WDRIFT_SANITIZE"):
            d = tempfile.mkdtemp(prefix="wdrift-t60-perm-")
            os.chmod(d, 0o755)
            path = os.path.join(d, "c.sock")
            ls = socket.socket(socket.AF_UNIX)
            try:
                ls.bind(path)
                os.chmod(path, 0o755)
                ls.listen(4)
                r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", WDRIFT,
                                    "status", "--endpoint", f"ipc://{path}"], capture_output=True, text=True,
                                   timeout=30)
                check(r.returncode == 1 and "permission denied (owner uid 0, mode 755)" in r.stderr
                      and len(r.stderr.strip().splitlines()) == 1,
                      "a socket file not this user's to write: permission denied, with its owner and mode", r.stderr)
            finally:
                ls.close()
                shutil.rmtree(d, ignore_errors=True)
            # the socket behind a directory this user may not search (a system install's /run/wdrift,
            # 0750, and a job of another user): that directory named, by the CLI and by the publisher
            # at open, not "no socket ... yet" (an ops trial's), and the publisher's diagnosis is sure
            d = tempfile.mkdtemp(prefix="wdrift-t60-perm-")
            os.chmod(d, 0o750)
            path = os.path.join(d, "ingest.sock")
            ls = socket.socket(socket.AF_UNIX)
            nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            want = f"permission denied: {d} (owner uid 0, group 0, mode 750) does not let this process (uid 65534) search it"
            try:
                ls.bind(path)
                ls.listen(4)
                r = subprocess.run(nobody + [WDRIFT, "status", "--endpoint", f"ipc://{path}"], capture_output=True,
                                   text=True, timeout=30)
                check(r.returncode == 1 and f"cannot reach the socket file {path} (ipc://{path}): {want}" in r.stderr
                      and len(r.stderr.strip().splitlines()) == 1,
                      "a socket behind a directory this user may not search: the CLI names the directory", r.stderr)
                code = ("import wdrift\np = wdrift.Publisher(%r, 'r')\nprint('sure', p.diagnosis_sure)\n"
                        "print('diagnosis', p.diagnosis)\np.close(0)\n" % f"ipc://{path}")
                r = subprocess.run(nobody + [harness.PYTHON, "-c", code], capture_output=True, text=True, timeout=60,
                                   env=harness.package_env(), cwd="/")
                check(r.returncode == 0 and "sure True" in r.stdout and want in r.stdout and
                      r.stderr.count(want) == 1 and "no socket at" not in r.stderr + r.stdout,
                      "... and the publisher at open, once, with a sure diagnosis, not 'no socket yet'",
                      r.stdout + r.stderr)
            finally:
                ls.close()
                shutil.rmtree(d, ignore_errors=True)
    finally:
        harness.teardown(dm, tmp)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
