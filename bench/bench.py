#!/usr/bin/env python3
"""bench.py: `make bench`. The CPU engine against scipy and numpy, same arrays,
same run, n = 2^24 per tensor; then the engine's scaling over threads, and
Highway's vqsort as a peer (issue 16).

Rows: fp32 and bf16 (scipy and numpy get the values upcast to float64).
Peers: scipy.stats.wasserstein_distance, and the one-liner a user would write,
np.mean(np.abs(np.sort(a) - np.sort(b))) on float64. Ours: prepare both
tensors and W1, median of REPEATS runs. Targets (issue 2): fp32 >= 50x scipy
and >= 8x numpy; bf16 >= 500x scipy. Not a test: it prints, it does not fail
on a slow machine, except when the W1 values disagree.

Scaling: the engine on fp32 at 1, 2, ... up to the cores this process may
use, each against 1 thread (target on 2 cores: >= 1.7x). The vqsort peer
(--vqsort, wdrift-bench-vqsort): two vqsort calls + the |a - b| pass on ONE
thread; its time divided by T is the ideal peer for T threads (a perfect
split of the same work), and the engine on all threads is reported against
it (target <= 1.0x). Beside it, the peer as measured on two threads (each
sorts one tensor, each sums half of |a - b|): what two cores that share a
memory bus give the best library sort, against the engine on two. And the
host's memory, in the same run: both tensors copied on one thread and on
two at once (GB/s). The ideal assumes two threads move twice the bytes;
where they copy little more than one does, no split reaches it.
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


def scale_f32(args, pa, pb):
    """The engine on fp32 at 1..cores threads, and the vqsort peer on one."""
    cores = len(os.sched_getaffinity(0))
    scaling = []
    for t in range(1, cores + 1):
        out = subprocess.run([args.wdrift_bench, "f32", pa, pb, str(args.repeats), str(t)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out)
        scaling.append(dict(threads=t, seconds=r["seconds"], w1=r["w1"], engine=r["engine"]))
    # The radix sort beside the default (vqsort where it is here), at 1 and all threads.
    for t in sorted({1, cores}):
        out = subprocess.run([args.wdrift_bench, "f32", pa, pb, str(args.repeats), str(t), "radix"],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out)
        scaling[t - 1]["radix"] = r["seconds"]
        scaling[t - 1]["radix_w1"] = r["w1"]
    peer = None
    if args.vqsort:
        out = subprocess.run([args.vqsort, "--vqsort", pa, pb, str(args.repeats)],
                             check=True, capture_output=True, text=True).stdout
        peer = json.loads(out)
    return scaling, peer


def print_scaling(scaling, peer, w1):
    ok = True
    one = scaling[0]["seconds"]
    print(f"\nscaling, fp32 2^24 pair (prepare both + W1), threads 1..{len(scaling)} "
          f"(the cores this process may use):")
    print(f"engine: {scaling[-1]['engine']}")
    print(f"{'threads':>7} {'s':>8} {'x 1 thread':>10} {'radix s':>8} {'radix/this':>10}")
    for r in scaling:
        x = one / r["seconds"]
        goal = ""
        if r["threads"] == 2:
            goal = f"  target >= 1.7x: {'met' if x >= 1.7 else 'MISSED'}"
        radix = (f" {r['radix']:8.4f} {r['radix'] / r['seconds']:10.2f}" if "radix" in r
                 else f" {'':8} {'':10}")
        print(f"{r['threads']:7d} {r['seconds']:8.4f} {x:10.2f}{radix}{goal}")
        for key in ("w1", "radix_w1"):
            if key in r and r[key] != w1:
                ok = False
                print(f"  W1 DIFFERS from one thread ({key}): {r[key]!r} against {w1!r}")
    if peer:
        t = scaling[-1]["threads"]
        ideal = peer["seconds"] / t
        x = scaling[-1]["seconds"] / ideal
        print(f"\nvqsort peer (Highway, two vqsort calls + |a-b| on 1 thread): {peer['seconds']:.4f} s "
              f"on {peer['target']} (Highway's own dispatch, {peer['target_dispatch']}: "
              f"{peer['seconds_dispatch']:.4f} s; AVX2 at most: {peer['seconds_avx2']:.4f} s); "
              f"ideal for {t} threads = that / {t} = {ideal:.4f} s")
        print(f"engine on {t} threads / ideal peer: {x:.2f}x  target <= 1.0x: "
              f"{'met' if x <= 1.0 else 'MISSED'}")
        if len(scaling) >= 2:
            two = peer["seconds_two_threads"]
            print(f"vqsort peer on 2 threads, measured (each sorts one tensor): {two:.4f} s, "
                  f"{peer['seconds'] / two:.2f}x its 1 thread; engine on 2 threads / it: "
                  f"{scaling[1]['seconds'] / two:.2f}x")
            c1, c2 = peer.get("copy_gbps_one_thread"), peer.get("copy_gbps_two_threads")
            if c1 and c2:
                print(f"host memory, both tensors copied: 1 thread {c1:.2f} GB/s, 2 threads at once "
                      f"{c2:.2f} GB/s ({c2 / c1:.2f}x; the ideal peer assumes 2x)")
        for key in ("w1", "w1_two_threads"):
            if abs(peer[key] - w1) > 1e-9 * abs(w1):
                ok = False
                print(f"  the peer's W1 ({key}) {peer[key]!r} disagrees with ours {w1!r}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wdrift-bench", default="build/wdrift-bench")
    ap.add_argument("--log2n", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON too")
    ap.add_argument("--vqsort", default=None, help="wdrift-bench-vqsort, for the vqsort peer")
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
            out = subprocess.run([args.wdrift_bench, dtype, pa, pb, str(args.repeats), "1"],
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
            if dtype == "f32":
                scaling, vq = scale_f32(args, pa, pb)
    print(f"wdrift CPU engine, n = 2^{args.log2n} per tensor, one thread against scipy and numpy")
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
    ok = print_scaling(scaling, vq, rows[0]["w1"]) and ok
    if args.json:
        print(json.dumps(dict(rows=rows, scaling=scaling, vqsort=vq), indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
