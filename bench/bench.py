#!/usr/bin/env python3
"""bench.py: `make bench`. The CPU engine against scipy and numpy, same arrays,
same run, single thread, n = 2^24 per tensor.

Rows: fp32 and bf16 (scipy and numpy get the values upcast to float64).
Peers: scipy.stats.wasserstein_distance, and the one-liner a user would write,
np.mean(np.abs(np.sort(a) - np.sort(b))) on float64. Ours: prepare both
tensors and W1, median of REPEATS runs. Targets (issue 2): fp32 >= 50x scipy
and >= 8x numpy; bf16 >= 500x scipy. Not a test: it prints, it does not fail
on a slow machine, except when the W1 values disagree.
"""
import argparse, json, os, platform, subprocess, sys, tempfile, time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
import scipy
import scipy.stats as ss

TARGETS = {"f32": {"scipy": 50, "numpy": 8}, "bf16": {"scipy": 500}}


def bf16_round(x):
    """float32 -> bf16 codes, round to nearest even (no NaN in bench data)."""
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(codes):
    return (codes.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def timed(fn):
    t = time.perf_counter()
    v = fn()
    return v, time.perf_counter() - t


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wdrift-bench", default="build/wdrift-bench")
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = ap.parse_args()
    n = 1 << args.log2n
    rng = np.random.default_rng(2024)
    a = (rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float32)
    b = (a + rng.standard_normal(n, dtype=np.float32) * np.float32(1e-4)).astype(np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        cases = {
            "f32": (a, b, a.astype(np.float64), b.astype(np.float64)),
            "bf16": (bf16_round(a), bf16_round(b), None, None),
        }
        for dtype, (ra, rb, fa, fb) in cases.items():
            if fa is None:
                fa, fb = bf16_values(ra), bf16_values(rb)
            pa, pb = os.path.join(d, "a.raw"), os.path.join(d, "b.raw")
            ra.tofile(pa)
            rb.tofile(pb)
            out = subprocess.run([args.wdrift_bench, dtype, pa, pb, str(args.repeats)],
                                 check=True, capture_output=True, text=True).stdout
            ours = json.loads(out)
            w_scipy, t_scipy = timed(lambda: ss.wasserstein_distance(fa, fb))
            w_np, t_np = timed(lambda: np.mean(np.abs(np.sort(fa) - np.sort(fb))))
            rel = abs(ours["w1"] - w_scipy) / abs(w_scipy)
            rows.append(dict(dtype=dtype, n=n, method=ours["method"], w1=ours["w1"],
                             w1_rel_err=rel, ours_s=ours["seconds"],
                             ours_prepared_baseline_s=ours["seconds_prepared_baseline"],
                             scipy_s=t_scipy, numpy_s=t_np,
                             x_scipy=t_scipy / ours["seconds"], x_numpy=t_np / ours["seconds"]))
    print(f"wdrift CPU engine, n = 2^{args.log2n} per tensor, single thread")
    print(f"machine: {cpu_name()}, {os.cpu_count()} cpus; numpy {np.__version__}, scipy {scipy.__version__}")
    print(f"date: {time.strftime('%Y-%m-%d')}\n")
    hdr = f"{'dtype':5} {'method':7} {'ours s':>8} {'vs base':>8} {'scipy s':>8} {'numpy s':>8} {'x scipy':>8} {'x numpy':>8}  targets"
    print(hdr)
    ok = True
    for r in rows:
        t = TARGETS[r["dtype"]]
        goals = []
        for peer, want in t.items():
            got = r["x_" + peer]
            goals.append(f"{peer} >= {want}x: {'met' if got >= want else 'MISSED'}")
        print(f"{r['dtype']:5} {r['method']:7} {r['ours_s']:8.4f} {r['ours_prepared_baseline_s']:8.4f} "
              f"{r['scipy_s']:8.3f} {r['numpy_s']:8.3f} {r['x_scipy']:8.1f} {r['x_numpy']:8.1f}  {'; '.join(goals)}")
        if r["w1_rel_err"] > 1e-9:
            ok = False
            print(f"  W1 DISAGREES with scipy: ours {r['w1']!r}, rel err {r['w1_rel_err']:.3g}")
    print("\nours: prepare both tensors + W1 (median of runs); 'vs base': W1 against an")
    print("already prepared baseline (prepare the candidate + W1). W1 agrees with scipy to")
    print(", ".join(f"{r['dtype']} {r['w1_rel_err']:.1e}" for r in rows) + " relative.")
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
