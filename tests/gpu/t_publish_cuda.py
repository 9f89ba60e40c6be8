#!/usr/bin/env python3
"""t_publish_cuda.py: `make check-gpu-publish`. publish() of CUDA tensors, on a real GPU and daemon.

- fp32, bf16, fp16 and a non-contiguous (transposed) CUDA tensor round-trip
  to the spool bit for bit;
- the copies see every update queued before publish(), and none queued
  after it: the model is changed in place on the current stream right
  after publish() returns, and the spool holds the values from before;
- a second publish() (warm) is acked too; how long each publish() blocked
  is printed beside a synchronous .cpu() of the same tensors, as a figure
  (speed belongs to `make bench-publish`, not to a test).
Exits 77 when torch sees no CUDA device.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
BUILD = os.environ.get("BUILD", os.path.join(HERE, "..", "..", "build"))
os.environ.setdefault("WDRIFT_LIB", os.path.abspath(os.path.join(BUILD, "libwdrift.so")))
import numpy as np  # noqa: E402
import torch  # noqa: E402

n_ok = n_fail = 0


def check(cond, what):
    global n_ok, n_fail
    n_ok, n_fail = n_ok + bool(cond), n_fail + (not cond)
    print(f"{'ok' if cond else 'not ok'} {n_ok + n_fail} - {what}")
    sys.stdout.flush()


def bits(t):
    t = t.detach().contiguous().cpu()
    return (t.view(torch.int16) if t.element_size() == 2 else t).numpy().tobytes()


def main():
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    import h5py
    import wdrift
    d = tempfile.mkdtemp(prefix="wdrift-gpu-publish-")
    with open(os.path.join(d, "wdrift.yaml"), "w") as f:
        f.write(f"listen:\n  ingest: ipc://{d}/ingest.sock\n  control: ipc://{d}/control.sock\n"
                f"  events: ipc://{d}/events.sock\nstorage:\n  dir: {d}/var\ncompute:\n  backend: cpu\n"
                f"memory:\n  budget: 4G\nlimits:\n  max_message: 1G\nstudies:\n  - name: s\n"
                f"    baseline: gpu\n    candidates: [other]\n")
    log = open(os.path.join(d, "daemon.log"), "wb")
    proc = subprocess.Popen([os.path.join(BUILD, "wdriftd"), "-c", os.path.join(d, "wdrift.yaml")],
                            stdout=log, stderr=log)
    try:
        end = time.time() + 10
        while not os.path.exists(os.path.join(d, "ingest.sock")) and time.time() < end:
            time.sleep(0.05)
        g = torch.Generator(device="cuda").manual_seed(3)
        sd = {"f32": torch.randn(1024, 1024, device="cuda", generator=g),
              "bf16": torch.randn(4096, 1024, device="cuda", generator=g).bfloat16(),
              "f16": torch.randn(333, 77, device="cuda", generator=g).half(),
              "t.weight": torch.randn(512, 256, device="cuda", generator=g).t()}
        want = {k: bits(v) for k, v in sd.items()}
        with wdrift.Publisher(f"ipc://{d}/ingest.sock", "gpu", ack_timeout=60) as pub:
            for v in sd.values():   # the step's last kernels, still running when publish() is called
                v.mul_(1.0)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            pub.publish(0, sd)
            blocked = time.perf_counter() - t0
            for v in sd.values():   # the next optimizer step, queued right after publish()
                v.add_(1.0)
            ok = pub.flush(60)
            st = pub.stats()
            check(ok and st["acked"] == 1 and st["dropped"] == 0, f"the CUDA snapshot is acked ({st})")
            with h5py.File(os.path.join(d, "var", "spool", "gpu", "0.h5"), "r") as f:
                got = {k: f[k][()] for k in sd}
            for k in sd:
                g_ = got[k]
                raw = g_.view(np.uint16).tobytes() if g_.dtype in (np.uint16, np.float16) else g_.tobytes()
                check(raw == want[k], f"{k}: the spool holds the values from before the next step, bit for bit")
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            pub.publish(1, sd)      # warm: the pinned buffers come from torch's cache
            warm = time.perf_counter() - t0
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            {k: v.cpu() for k, v in sd.items()}
            sync = time.perf_counter() - t0
            check(pub.flush(60), "the second snapshot is acked")
        # A figure, not a check: timings are for benchmarks (bench-publish).
        print(f"# publish() blocked {blocked * 1e3:.2f} ms (first), {warm * 1e3:.2f} ms (warm); "
              f"a synchronous .cpu() took {sync * 1e3:.2f} ms")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["rm", "-rf", d])
    print(f"# {n_ok} passed, {n_fail} failed")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
