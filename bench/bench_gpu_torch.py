#!/usr/bin/env python3
"""bench_gpu_torch.py: row 3 of `make bench-gpu`: torch on the same device.

torch.sort of both tensors and the mean of |a - b| in float64, for an fp32
pair and a bf16 pair of n elements, beside our times from the same
`make bench-gpu` run (build/bench-gpu.json). Targets: ours >= 2x faster than
torch for fp32, >= 10x for bf16.
"""
import json
import sys
import time

import torch


def timed(fn, repeats=5):
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "build/bench-gpu.json"
    ours = json.load(open(path))
    n = ours["n"]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(n, device=dev, generator=g) * 0.02
    b = a + torch.randn(n, device=dev, generator=g) * 1e-4

    def w1(x, y):
        return (torch.sort(x).values.double() - torch.sort(y).values.double()).abs().mean().item()

    t32 = timed(lambda: w1(a, b))
    a16, b16 = a.bfloat16(), b.bfloat16()
    t16 = timed(lambda: w1(a16, b16))
    print(f"\n3. torch {torch.__version__} on {torch.cuda.get_device_name()} (n = {n})")
    for name, t_torch, t_ours, want in (("fp32", t32, ours["ours_f32_s"], 2),
                                        ("bf16", t16, ours["ours_bf16_s"], 10)):
        x = t_torch / t_ours
        print(f"   {name}: torch {t_torch * 1e3:8.2f} ms, ours {t_ours * 1e3:8.2f} ms: "
              f"{x:6.1f}x faster; target >= {want}x: {'met' if x >= want else 'MISSED'}")


if __name__ == "__main__":
    main()
