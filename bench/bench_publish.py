#!/usr/bin/env python3
"""bench_publish.py: `make bench-publish`. How long Publisher.publish() blocks the training thread.

CPU (any machine): a 100M-parameter fp32 state_dict (24 blocks of four
1024 x 1024 weights and a few small tensors). publish() against the peer a
user would otherwise pay, {k: v.clone()} of the same tensors, measured in
the same run, alternating. Target (issue 10): publish <= 1.3x the clone.

GPU (when torch sees one): a 1B-parameter bf16 state_dict on the device.
publish() (copies queued on a side stream into pinned memory) against a
synchronous .cpu() of the same tensors. Target: <= 5% of the .cpu(). The
values the daemon stored are checked bit for bit against the device's.

A real wdriftd receives every snapshot, with flush() between publishes so
that none is dropped; the run belongs to no study. Not a test: it prints
the figures (median of REPEATS) and fails only if a value did not
round-trip.
"""
import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
BUILD = os.environ.get("BUILD", os.path.join(HERE, "..", "build"))
os.environ.setdefault("WDRIFT_LIB", os.path.abspath(os.path.join(BUILD, "libwdrift.so")))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import harness  # noqa: E402  (bench_config)
import wdrift  # noqa: E402


def model(n_blocks, width, dtype, device):
    g = torch.Generator(device="cpu").manual_seed(1)
    sd = {}
    for b in range(n_blocks):
        for w in ("wq", "wk", "wv", "wo"):
            sd[f"layers.{b}.{w}.weight"] = torch.randn(width, width, generator=g).to(dtype=dtype, device=device)
        sd[f"layers.{b}.norm.weight"] = torch.ones(width, dtype=dtype, device=device)
    return sd


def daemon(d, budget):
    with open(os.path.join(d, "wdrift.yaml"), "w") as f:
        # the run is in no study: nothing is compared
        f.write(harness.bench_config(d, budget, {"max_message": "1G"}, "other", "nobody", ["nothing"]))
    log = open(os.path.join(d, "daemon.log"), "wb")
    p = subprocess.Popen([os.path.join(BUILD, "wdriftd"), "-c", os.path.join(d, "wdrift.yaml")],
                         stdout=log, stderr=log)
    end = time.time() + 10
    while not os.path.exists(os.path.join(d, "ingest.sock")) and time.time() < end:
        time.sleep(0.05)
    return p


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_cpu(pub, repeats):
    sd = model(24, 1024, torch.float32, "cpu")
    n = sum(t.numel() for t in sd.values())
    pub_t, clone_t = [], []
    for r in range(repeats + 1):
        c = timed(lambda: {k: v.clone() for k, v in sd.items()})
        p = timed(lambda: pub.publish(r, sd))
        if not pub.flush(120):
            sys.exit("bench-publish: a snapshot was not acked in 120 s")
        if r:               # the first round warms the allocators
            pub_t.append(p)
            clone_t.append(c)
    return n, statistics.median(pub_t), statistics.median(clone_t)


def bench_gpu(pub, repeats, d):
    sd = model(60, 2048, torch.bfloat16, "cuda")     # 60 x 4 x 2048^2 = 1.007e9
    n = sum(t.numel() for t in sd.values())
    torch.cuda.synchronize()
    pub_t, cpu_t = [], []
    for r in range(repeats + 1):
        torch.cuda.synchronize()
        c = timed(lambda: {k: v.cpu() for k, v in sd.items()})
        torch.cuda.synchronize()
        p = timed(lambda: pub.publish(1000 + r, sd))
        torch.cuda.synchronize()
        if not pub.flush(300):
            sys.exit("bench-publish: a GPU snapshot was not acked in 300 s")
        if r:
            pub_t.append(p)
            cpu_t.append(c)
    import h5py
    name = "layers.7.wk.weight"
    with h5py.File(os.path.join(d, "var", "spool", "bench-gpu", f"{1000 + repeats}.h5"), "r") as f:
        got = f[name][()].view(np.uint16)
    want = sd[name].view(torch.int16).cpu().numpy().view(np.uint16)
    if not np.array_equal(got, want):
        sys.exit(f"bench-publish: {name} did not round-trip bit for bit from the GPU")
    return n, statistics.median(pub_t), statistics.median(cpu_t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gpu", choices=("auto", "yes", "no"), default="auto")
    args = ap.parse_args()
    torch.set_num_threads(1)
    d = tempfile.mkdtemp(prefix="wdrift-bench-publish-")
    proc = daemon(d, "6G")
    try:
        print(f"# {platform.node()}, {os.cpu_count()} cores, torch {torch.__version__}, "
              f"{time.strftime('%Y-%m-%d')}")
        with wdrift.Publisher(f"ipc://{d}/ingest.sock", "bench-cpu", queue_bytes=2 << 30,
                              ack_timeout=120) as pub:
            n, p, c = bench_cpu(pub, args.repeats)
        print(f"cpu  fp32 {n / 1e6:.0f}M params: publish() blocks {p * 1e3:.0f} ms, "
              f"clone {c * 1e3:.0f} ms: {p / c:.2f}x the clone (target <= 1.3x)")
        gpu = args.gpu == "yes" or (args.gpu == "auto" and torch.cuda.is_available())
        if gpu:
            with wdrift.Publisher(f"ipc://{d}/ingest.sock", "bench-gpu", queue_bytes=4 << 30,
                                  ack_timeout=300) as pub:
                n, p, c = bench_gpu(pub, args.repeats, d)
            print(f"gpu  bf16 {n / 1e9:.2f}B params on {torch.cuda.get_device_name()}: publish() "
                  f"blocks {p * 1e3:.1f} ms, synchronous .cpu() {c * 1e3:.0f} ms: {100 * p / c:.1f}% "
                  f"(target <= 5%); values round-trip bit for bit")
        else:
            print("gpu  skipped: torch sees no CUDA device")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
