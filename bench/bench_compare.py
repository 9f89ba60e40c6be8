#!/usr/bin/env python3
"""bench_compare.py: `make bench-compare`. The whole process `wdrift compare
A.h5 B.h5 --engine cpu`, files in the page cache, against scipy given the
arrays in memory and against the engine alone, all in the same run, n = 2^24
per tensor, fp32 and bf16 (the same arrays as bench.py).

Peers:
  scipy       scipy.stats.wasserstein_distance on the float64 values
  engine      wdrift-bench: prepare both tensors + W1, from raw files read
              before the clock starts (what `make bench` reports), on as many
              threads as compare's engine uses (the cores available)
  in compare  the engine's own time inside the same `wdrift compare` run
              (--timings: prepare, the drift statistics, W1)
Whole process: wall clock of the `wdrift compare` process, median of
REPEATS runs, started from here (fork + exec included).
Targets (issue 16): fp32 >= 80x scipy and <= 1.5x the engine alone; bf16
>= 400x scipy. Not a test: it prints, and fails only when W1 disagrees.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# bench.py sets the BLAS thread counts before numpy loads: it is imported first
from bench import bf16_round, bf16_values, cpu_name  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.stats as ss  # noqa: E402
import h5py  # noqa: E402

TARGETS = {"f32": {"scipy": 80, "engine": 1.5}, "bf16": {"scipy": 400}}


def write_h5(path, data, bf16):
    with h5py.File(path, "w") as f:
        d = f.create_dataset("w", data=data)
        if bf16:
            d.attrs["dtype"] = "bfloat16"


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", 5)))
    args = ap.parse_args()
    wdrift = os.path.join(args.build, "wdrift")
    bench = os.path.join(args.build, "wdrift-bench")
    n = 1 << args.log2n
    rng = np.random.default_rng(2024)
    a = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)
    b = (a + rng.standard_normal(n, dtype=np.float32) * np.float32(1e-4)).astype(np.float32)
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as d:
        for dtype, (ra, rb) in {"f32": (a, b), "bf16": (bf16_round(a), bf16_round(b))}.items():
            bf = dtype == "bf16"
            fa, fb = (bf16_values(ra), bf16_values(rb)) if bf else (ra.astype(np.float64), rb.astype(np.float64))
            ha, hb = os.path.join(d, "a.h5"), os.path.join(d, "b.h5")
            pa, pb = os.path.join(d, "a.raw"), os.path.join(d, "b.raw")
            write_h5(ha, ra, bf)
            write_h5(hb, rb, bf)
            ra.tofile(pa)
            rb.tofile(pb)
            warm([ha, hb, pa, pb])
            whole, in_compare, w1 = [], [], None
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = subprocess.run([wdrift, "compare", ha, hb, "--engine", "cpu", "--timings", "--json"],
                                     check=True, capture_output=True, text=True).stdout
                whole.append(time.perf_counter() - t)
                doc = json.loads(out)
                in_compare.append(doc["timings"]["engine_s"])
                w1 = doc["layers"][0]["w1"]
                engine_desc = doc["engine"]
            # the engine alone on as many threads as compare's engine has (all available)
            threads = len(os.sched_getaffinity(0))
            alone = json.loads(subprocess.run([bench, dtype, pa, pb, str(args.repeats), str(threads)],
                                              check=True, capture_output=True, text=True).stdout)
            t = time.perf_counter()
            w_scipy = ss.wasserstein_distance(fa, fb)
            t_scipy = time.perf_counter() - t
            rel = abs(w1 - w_scipy) / abs(w_scipy)
            ok &= rel <= 1e-9
            w = statistics.median(whole)
            rows.append(dict(dtype=dtype, whole_s=w, whole_min_s=min(whole),
                             in_compare_s=statistics.median(in_compare),
                             engine_s=alone["seconds"], scipy_s=t_scipy, x_scipy=t_scipy / w,
                             x_engine=w / alone["seconds"], w1_rel_err=rel))
    print(f"wdrift compare, whole process, n = 2^{args.log2n} per tensor, files in the page cache")
    print(f"machine: {cpu_name()}, {os.cpu_count()} cpus; numpy {np.__version__}, scipy {scipy.__version__}")
    print(f"engine: {engine_desc}; date: {time.strftime('%Y-%m-%d')}; median of {args.repeats} runs\n")
    print(f"{'dtype':5} {'whole s':>8} {'min s':>8} {'in cmp s':>8} {'engine s':>8} {'scipy s':>8} "
          f"{'x scipy':>8} {'/engine':>8}  targets")
    for r in rows:
        goals = []
        for peer, want in TARGETS[r["dtype"]].items():
            if peer == "scipy":
                goals.append(f"scipy >= {want}x: {'met' if r['x_scipy'] >= want else 'MISSED'}")
            else:
                goals.append(f"<= {want}x engine: {'met' if r['x_engine'] <= want else 'MISSED'}")
        print(f"{r['dtype']:5} {r['whole_s']:8.3f} {r['whole_min_s']:8.3f} {r['in_compare_s']:8.3f} "
              f"{r['engine_s']:8.4f} {r['scipy_s']:8.2f} {r['x_scipy']:8.1f} {r['x_engine']:8.2f}  "
              f"{'; '.join(goals)}")
        if r["w1_rel_err"] > 1e-9:
            print(f"  W1 DISAGREES with scipy: rel err {r['w1_rel_err']:.3g}")
    print("\nwhole: the wdrift compare process (median, and min); in cmp: the engine's time inside it")
    print("(--timings: prepare, drift statistics, W1); engine: wdrift-bench, prepare both + W1;")
    print("/engine: whole / engine. W1 agrees with scipy to " +
          ", ".join(f"{r['dtype']} {r['w1_rel_err']:.1e}" for r in rows) + " relative.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
