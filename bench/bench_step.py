#!/usr/bin/env python3
"""bench_step.py: `make bench-step`. One step of a Llama-shaped study through a
real wdriftd, on compute.threads 1 and on every core (issue 16).

The snapshot: Llama-2 7B's shapes divided by 4 in every dimension (d 1024,
ff 2752, vocab 8000), BENCH_LAYERS layers (default 4; 32 is the real depth),
fp32 or bf16 (BENCH_DTYPE): at this scale the q, k, v, o, gate, up, down,
embedding and output matrices are all 2^20 elements or more, the daemon's
large tensors, as in the real model. Three runs: lowprec (a trained proxy),
fa (the candidate) and base, each an HDF5 file sent with `wdrift send`, the
baseline last, so that one comparison pass covers the step.

Timed: that pass, from /metrics' wdrift_compute_seconds_total (reading the
spool, the engine, the WAL and drift log writes), BENCH_STEPS steps, the
median; beside it the daemon's page faults and CPU seconds over the step
(taking in the three sends included). Peers in the same run: the same binary with compute.threads 1, and
numpy's copy of the same bytes (the three runs' tensors) into buffers
already touched, the machine's copy bandwidth. Storage is under /dev/shm
when there is one, so that the disk is not what is measured.

Not a test. BUILD picks the build (an older tree's build measures "before"),
BENCH_THREADS the thread counts (default 1 and the cores), BENCH_BUDGET
memory.budget (8G), BENCH_LOG a log level whose log is printed.
"""
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(HERE, "..", "build")))
LAYERS = int(os.environ.get("BENCH_LAYERS", "4"))
STEPS = int(os.environ.get("BENCH_STEPS", "3"))
DTYPE = os.environ.get("BENCH_DTYPE", "f32")
BUDGET = os.environ.get("BENCH_BUDGET", "8G")	# memory.budget: what the compute workers may hold
RUNS = (("lowprec", 3e-3), ("fa", 1e-3), ("base", 0.0))	# the baseline last


def shapes():
    """(name, numel) of the snapshot, in a checkpoint's order."""
    d, ff, vocab = 4096 // 4, 11008 // 4, 32000 // 4
    out = [("tok_embeddings.weight", vocab * d)]
    for layer in range(LAYERS):
        p = f"layers.{layer}."
        out += [(p + f"attention.w{k}.weight", d * d) for k in "qkvo"]
        out += [(p + "feed_forward.w1.weight", ff * d), (p + "feed_forward.w2.weight", d * ff),
                (p + "feed_forward.w3.weight", ff * d)]
        out += [(p + "attention_norm.weight", d), (p + "ffn_norm.weight", d)]
    return out + [("norm.weight", d), ("output.weight", vocab * d)]


def write_run(path, eps):
    """The run's file: the same weights in every run, plus its own drift of size eps. Its bytes."""
    rng, own = np.random.default_rng(16), np.random.default_rng(int(eps * 1e6) + 1)
    nbytes = 0
    with h5py.File(path, "w") as f:
        for name, n in shapes():
            x = (rng.standard_normal(n, dtype=np.float32) * 0.02
                 + (own.random(n, dtype=np.float32) - 0.5) * eps)
            if DTYPE == "bf16":
                u = x.view(np.uint32)
                x = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
                ds = f.create_dataset(name, data=x)
                ds.attrs["dtype"] = "bfloat16"
            else:
                f.create_dataset(name, data=x)
            nbytes += x.nbytes
    return nbytes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        m = re.search(rf"^{name} ([0-9.e+-]+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else 0.0


def daemon_run(files, threads, root):
    """The compute seconds of each step's pass, on a wdriftd with compute.threads threads."""
    d = tempfile.mkdtemp(prefix=f"wdrift-bench-step-{threads}-", dir=root)
    port = free_port()
    cfg = os.path.join(d, "wdrift.yaml")
    with open(cfg, "w") as f:
        f.write(f"""listen:
  ingest: ipc://{d}/ingest.sock
  control: ipc://{d}/control.sock
  events: ipc://{d}/events.sock
  metrics: 127.0.0.1:{port}
storage:
  dir: {d}/var
compute:
  backend: cpu
  threads: {threads}
memory:
  budget: {BUDGET}
limits:
  max_message: 64M
  pending_timeout: 3600
log:
  level: {os.environ.get("BENCH_LOG", "notice")}
studies:
  - name: llama
    baseline: base
    candidates: [fa]
    proxies: {{lowprec: lowprec}}
""")
    log = open(os.path.join(d, "daemon.log"), "wb")
    proc = subprocess.Popen([os.path.join(BUILD, "wdriftd"), "-c", cfg], stdout=log, stderr=log)
    times, faults, cpu, walls = [], [], [], []
    try:
        end = time.time() + 30
        while not os.path.exists(os.path.join(d, "control.sock")) and time.time() < end:
            time.sleep(0.05)
        for step in range(1, STEPS + 1):
            before = metric(port, "wdrift_compute_seconds_total")
            flt0, cpu0 = proc_counts(proc.pid)
            t0 = time.time()
            for run, _ in RUNS:
                subprocess.run([os.path.join(BUILD, "wdrift"), "send", "--run", run, "--step", str(step),
                                "-c", cfg, files[run]], check=True, stdout=subprocess.DEVNULL)
            end = time.time() + 600
            while metric(port, "wdrift_comparisons_total") < step and time.time() < end:
                time.sleep(0.05)
            if metric(port, "wdrift_comparisons_total") < step:
                sys.exit(f"bench-step: step {step} was not compared in 600 s; see {d}/daemon.log")
            walls.append(time.time() - t0)
            times.append(metric(port, "wdrift_compute_seconds_total") - before)
            flt1, cpu1 = proc_counts(proc.pid)
            faults.append(flt1 - flt0)
            cpu.append(cpu1 - cpu0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if os.environ.get("BENCH_LOG"):
            sys.stdout.write(open(os.path.join(d, "daemon.log")).read())
        subprocess.run(["rm", "-rf", d])
    return times, faults, cpu, walls


def proc_counts(pid):
    """(minor page faults, CPU seconds user + system) of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[7]), (int(fields[11]) + int(fields[12])) / tick


def copy_gbps(nbytes):
    """numpy's copy of nbytes into a buffer already touched: GB/s, the best of 5."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.zeros_like(src)
    best = min(timed(lambda: np.copyto(dst, src)) for _ in range(5))
    return nbytes / best / 1e9


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    cpus = len(os.sched_getaffinity(0))
    root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="wdrift-bench-step-", dir=root)
    try:
        files, nbytes = {}, 0
        for run, eps in RUNS:
            files[run] = os.path.join(tmp, run + ".h5")
            nbytes += write_run(files[run], eps)
        n = len(shapes())
        print(f"wdrift bench-step: Llama-2 7B shapes / 4, {LAYERS} layers, {n} tensors, {DTYPE}, "
              f"{nbytes / 3 / 1e6:.0f} MB a run, 3 runs; {STEPS} steps")
        print(f"machine: {platform.node()}, {cpus} cpus; {time.strftime('%Y-%m-%d')}")
        rows = []
        for threads in [int(x) for x in os.environ.get("BENCH_THREADS", f"1,{cpus}").split(",")]:
            t, faults, cpu, walls = daemon_run(files, threads, root)
            med, wall = statistics.median(t), statistics.median(walls)
            flt, cs = statistics.median(faults), statistics.median(cpu)
            rows.append({"threads": threads, "seconds": t, "median_s": round(med, 4),
                         "tensors_per_s": round(2 * n / med, 1), "gb_per_s": round(nbytes / med / 1e9, 3),
                         "page_faults": faults, "cpu_s": cpu, "wall_s": walls})
            print(f"compute.threads {threads}: step pass {med:.3f} s (steps {', '.join(f'{x:.3f}' for x in t)}), "
                  f"{2 * n / med:.0f} tensor pairs/s, {nbytes / med / 1e9:.2f} GB/s of the three runs; "
                  f"daemon per step (sends included): {flt:.0f} page faults, {cs:.2f} s CPU; "
                  f"a step from its first send to its results: {wall:.3f} s")
        mc = copy_gbps(nbytes)
        print(f"copy of the same bytes (numpy, one thread): {mc:.2f} GB/s")
        if len(rows) > 1:
            print(f"scaling: {rows[0]['median_s'] / rows[-1]['median_s']:.2f}x on {cpus} threads")
        print(json.dumps({"bench": "step", "layers": LAYERS, "dtype": DTYPE, "tensors": n, "bytes": nbytes,
                          "rows": rows, "copy_gb_per_s": round(mc, 2)}))
    finally:
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
