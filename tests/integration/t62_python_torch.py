#!/usr/bin/env python3
"""t62_python_torch.py: the Python package given torch tensors, against a live daemon.

Torch tensors of fp32, fp64, fp16 and bf16 (non-contiguous ones, ones that
need grad, parameters) reach the daemon's spool with the same bits; bf16
is stored as uint16 tagged dtype = "bfloat16". A tensor of another dtype
is refused before anything is queued, or left out on request. attach()
publishes the model after every N-th optimizer step, as step N, with torch
1.x's optimizer (no step hooks) and LR schedulers made before or after it.
A small nn.Module's state_dict round-trips. examples/demo_train.py runs a
short demo against the daemon: steps 0, 10, 20, with no drift of fa at
step 0 and some of seed2. Exits 77 when torch cannot be imported.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import h5py
import numpy as np

try:
    import torch
except ImportError as e:
    print(f"# skip: torch is not importable ({e})")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("WDRIFT_LIB", os.path.join(BUILD, "libwdrift.so"))
import harness  # noqa: E402
import wdrift  # noqa: E402
from harness import Daemon, check  # noqa: E402

DEMO_STUDY = """\
  - name: demo
    baseline: base
    candidates: [fa]
    proxies: {lowprec: lowprec, seed: seed2}
"""
BITS = {torch.float32: np.uint32, torch.float64: np.uint64, torch.float16: np.uint16, torch.bfloat16: np.uint16}


def spool(tmp, run, step):
    return os.path.join(tmp, "var", "spool", run, f"{step}.h5")


def bits(t):
    """A tensor's values as unsigned integers of its width: equal bits, NaN payloads included."""
    t = t.detach().cpu().contiguous()
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]).numpy().view(BITS[t.dtype])


def same_in_file(f, name, t):
    """Dataset name in f holds t exactly: its shape, its stored type, its bits."""
    if name not in f:
        print(f"# {name}: not in the file")
        return False
    d = f[name]
    if t.dtype == torch.bfloat16:
        tagged = d.dtype == np.uint16 and d.attrs.get("dtype") in ("bfloat16", b"bfloat16")
        got = d[()]
    else:
        np_type = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}[t.dtype]
        tagged = d.dtype == np_type
        got = d[()].astype(np_type).view(BITS[t.dtype])
    ok = tagged and tuple(d.shape) == tuple(t.shape) and np.array_equal(got, bits(t))
    if not ok:
        print(f"# {name}: file {d.dtype} {d.shape} attrs {dict(d.attrs)}, sent {t.dtype} {tuple(t.shape)}")
    return ok


def published_steps(tmp, run):
    d = os.path.join(tmp, "var", "spool", run)
    return sorted(int(n[:-3]) for n in os.listdir(d) if n.endswith(".h5")) if os.path.isdir(d) else []


def dtypes_round_trip(tmp, ep):
    g = torch.Generator().manual_seed(62)
    w = torch.randn(24, 10, generator=g)
    w[1, 2], w[3, 4], w[5, 6], w[7, 8] = float("nan"), float("inf"), float("-inf"), -0.0
    p = torch.nn.Parameter(torch.randn(7, 5, generator=g))
    sent = {
        "f32": w,
        "f32.transposed": w.t(),                                   # non-contiguous
        "f64": torch.randn(33, generator=g, dtype=torch.float64),
        "f16": torch.randn(4, 50, generator=g).half(),
        "f16.strided": torch.randn(8, 30, generator=g).half()[:, ::3],
        # every bf16 code, NaN payloads and subnormals too
        "bf16": torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).view(256, 256),
        "bf16.strided": torch.randn(16, 12, generator=g).bfloat16().t()[::2],
        "param": p,                                                # requires grad
        "nonleaf": p * 3.0,                                        # has a grad_fn: needs .detach()
        "param.bf16": torch.nn.Parameter(torch.randn(9, generator=g).bfloat16()),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
    }
    check(not sent["f32.transposed"].is_contiguous() and not sent["bf16.strided"].is_contiguous()
          and sent["nonleaf"].requires_grad and sent["nonleaf"].grad_fn is not None,
          "the inputs are what they claim: non-contiguous, needing grad")
    with wdrift.Publisher(ep, "torch") as pub:
        pub.publish(7, sent)
        check(pub.flush(15) and pub.stats()["acked"] == 1, "torch tensors of every dtype: acked")
    with h5py.File(spool(tmp, "torch", 7), "r") as f:
        for name, t in sent.items():
            if name == "scalar":
                check(name in f and f[name][()].ravel().view(np.uint64).tolist() == [bits(t).item()],
                      "a 0-d tensor: its value")
                continue
            check(same_in_file(f, name, t), f"{name} ({t.dtype}, {tuple(t.shape)}): the same bits")
        check(sorted(f.keys()) == sorted(sent), "the snapshot holds those tensors and no other")

    # a dtype that cannot go, a tensor with no elements
    with wdrift.Publisher(ep, "torch") as pub:
        bad = {"w": torch.ones(3), "bn.num_batches_tracked": torch.tensor(5)}
        try:
            pub.publish(8, bad)
            check(False, "an int64 tensor is refused (TypeError)")
        except TypeError as e:
            check("bn.num_batches_tracked" in str(e) and "int64" in str(e),
                  f"an int64 tensor is refused, naming it ({e})")
            check("skip_other=True" in str(e), f"... and saying how to leave such tensors out ({e})")
            check(type(e) is wdrift.UnsupportedDtype, f"... as wdrift.UnsupportedDtype, a public name "
                  f"({type(e).__module__}.{type(e).__name__})")
        try:
            pub.publish(8, {"w": torch.ones(3), "empty": torch.ones(0, 4)})
            check(False, "a tensor of zero elements is refused (ValueError)")
        except ValueError as e:
            check("empty" in str(e) and type(e) is wdrift.EmptyTensor,
                  f"a tensor of zero elements is refused as wdrift.EmptyTensor, naming it ({e!r})")
        check(pub.stats()["committed"] == 0, "refused snapshots queue nothing")
        pub.publish(9, bad, skip_other=True)
        check(pub.flush(15) and pub.stats()["acked"] == 1, "skip_other=True: sent without it")
    with h5py.File(spool(tmp, "torch", 9), "r") as f:
        check(sorted(f.keys()) == ["w"], f"... and the file has only 'w' ({sorted(f.keys())})")


def small_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                               torch.nn.Linear(16, 3))


def attach_steps(tmp, ep):
    x, y = torch.randn(32, 6), torch.randn(32, 3)

    def train(model, opt, steps, sched=None, after=None):
        snaps = {0: {k: v.clone() for k, v in model.state_dict().items()}}
        for s in range(1, steps + 1):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if sched:
                sched.step()
            snaps[s] = {k: v.clone() for k, v in model.state_dict().items()}
        return snaps

    # the optimizer's own step, hooked; an LR scheduler made after attach
    model = small_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with wdrift.Publisher(ep, "attached") as pub:
        wdrift.attach(model, pub, every=3, optimizer=opt)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            snaps = train(model, opt, 7, sched)
        check(pub.flush(15), "attach(every=3, optimizer=AdamW): acked")
    check(published_steps(tmp, "attached") == [0, 3, 6],
          f"7 optimizer steps publish steps 0, 3, 6 ({published_steps(tmp, 'attached')})")
    ok = True
    for s in (0, 3, 6):
        with h5py.File(spool(tmp, "attached", s), "r") as f:
            ok = ok and all(same_in_file(f, k, v) for k, v in snaps[s].items())
    check(ok, "step N holds the model after N optimizer steps (0: as attached)")
    sched_warnings = [str(w.message) for w in caught if "lr_scheduler" in str(w.message)
                      or "optimizer.step()" in str(w.message)]
    check(not sched_warnings and opt.param_groups[0]["lr"] == 1e-2 * 0.5 ** 3,
          f"a scheduler made after attach counts the steps, and warns of nothing ({sched_warnings})")

    # a scheduler made before attach
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with wdrift.Publisher(ep, "attached2") as pub:
        wdrift.attach(model, pub, every=2, optimizer=opt)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(model, opt, 5, sched)
        check(pub.flush(15), "attach(every=2) after a scheduler: acked")
    sched_warnings = [str(w.message) for w in caught if "optimizer.step()" in str(w.message)]
    check(published_steps(tmp, "attached2") == [0, 2, 4] and not sched_warnings,
          f"... publishes steps 0, 2, 4 and the scheduler warns of nothing "
          f"({published_steps(tmp, 'attached2')}, {sched_warnings})")

    # no optimizer: .step() by hand; a start step; a BatchNorm's int64 counter left out
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    with wdrift.Publisher(ep, "attached3") as pub:
        hook = wdrift.attach(model, pub, every=5, start=10)
        for _ in range(6):
            hook.step()
        check(pub.flush(15), "attach(every=5, start=10) with .step() by hand: acked")
    check(published_steps(tmp, "attached3") == [10, 15], f"6 steps from 10 publish 10, 15 "
          f"({published_steps(tmp, 'attached3')})")
    with h5py.File(spool(tmp, "attached3", 15), "r") as f:
        names = sorted(f.keys())
    want = sorted(k for k, v in model.state_dict().items() if v.is_floating_point())
    check(names == want and "1.num_batches_tracked" not in names,
          f"attach leaves out the BatchNorm's int64 counter ({names})")


def attach_wrapped(tmp, ep):
    """A model wrapped for DataParallel (DDP's .module) or by torch.compile (._orig_mod, imitated: torch
    1.13 has no compile) is published under the names of the model it wraps."""
    class Compiled(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self._orig_mod = m

    plain = sorted(k for k, v in small_model().state_dict().items() if v.is_floating_point())
    for run, wrap in (("dp", torch.nn.DataParallel), ("compiled", Compiled),
                      ("both", lambda m: torch.nn.DataParallel(Compiled(m)))):
        model = wrap(small_model())
        check(all(k.startswith(("module.", "_orig_mod.")) for k in model.state_dict()),
              f"{run}: the wrapper's own state_dict prefixes its names ({sorted(model.state_dict())[:2]})")
        with wdrift.Publisher(ep, f"wrapped-{run}") as pub:
            wdrift.attach(model, pub, every=1)
            check(pub.flush(15), f"attach({run}-wrapped model): acked")
        with h5py.File(spool(tmp, f"wrapped-{run}", 0), "r") as f:
            names = sorted(f.keys())
        check(names == plain, f"attach of a {run}-wrapped model: the unwrapped model's names ({names})")


def module_round_trip(tmp, ep):
    for step, (label, model) in enumerate((("fp32", small_model()), ("fp16", small_model().half()),
                                           ("bf16", small_model().bfloat16()),
                                           ("fp64", small_model().double())), start=1):
        sd = model.state_dict()
        with wdrift.Publisher(ep, "module") as pub:
            pub.publish(step, sd)
            acked = pub.flush(15)
        with h5py.File(spool(tmp, "module", step), "r") as f:
            ok = acked and sorted(f.keys()) == sorted(sd) and all(same_in_file(f, k, v) for k, v in sd.items())
        check(ok, f"an nn.Module's state_dict in {label} round-trips ({len(sd)} tensors)")


def demo_run(tmp, ep):
    out = os.path.join(tmp, "demo.json")
    cmd = [sys.executable, os.path.join(REPO, "examples", "demo_train.py"), "--steps", "20", "--every", "10",
           "--endpoint", f"ipc://{tmp}/run/ingest.sock", "--config", os.path.join(tmp, "wdrift.yaml"),
           "--wdrift", os.path.join(BUILD, "wdrift"), "--json-out", out]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, "demo_train.py --steps 20 --every 10: finishes within 120 s")
        return
    check(r.returncode == 0, f"demo_train.py --steps 20 --every 10: exit 0 ({r.returncode}, "
                             f"{time.time() - t0:.1f} s)")
    if r.returncode:
        print("# " + (r.stdout + r.stderr)[-3000:].replace("\n", "\n# "))
        return
    print("# " + r.stdout.rstrip().replace("\n", "\n# "))
    lines = r.stdout.splitlines()
    check(any(line.split()[:1] == ["step"] for line in lines) and "fa/lowprec" in r.stdout,
          "it prints a header and a summary")
    with open(out) as f:
        table = json.load(f)
    rows = {row["step"]: row for row in table["steps"]}
    check(sorted(rows) == [0, 10, 20], f"--json-out: steps 0, 10, 20 ({sorted(rows)})")
    if sorted(rows) != [0, 10, 20]:
        return
    w0, w20 = rows[0]["w1"], rows[20]["w1"]
    check(w0["fa"] == 0 and w0["lowprec"] == 0 and w0["seed2"] > 0,
          f"step 0: fa and lowprec share base's init (W1 0), seed2 does not ({w0})")
    check(0 < w20["fa"] < w20["lowprec"] < w20["seed2"],
          f"step 20: 0 < W1 fa < lowprec < seed2 ({w20})")
    check(rows[20]["loss"]["base"] < rows[0]["loss"]["base"] - 0.5,
          f"the loss falls ({rows[0]['loss']['base']:.3f} -> {rows[20]['loss']['base']:.3f})")
    # the drift the demo printed is the daemon's, per tensor
    res = subprocess.run([os.path.join(BUILD, "wdrift"), "drift", "demo", "--step", "20", "--json",
                          "-c", os.path.join(tmp, "wdrift.yaml")], capture_output=True, text=True)
    layers = json.loads(res.stdout)["candidates"]["fa"]["layers"] if res.returncode == 0 else []
    n = sum(layer["numel"] for layer in layers)
    mean = sum(layer["numel"] * layer["w1"] for layer in layers) / n if n else None
    check(mean is not None and abs(mean - w20["fa"]) <= 1e-12 * max(1.0, abs(mean)) and n == table["parameters"],
          f"its fa W1 is the element-weighted mean of the daemon's per-tensor W1, over all "
          f"{table['parameters']} parameters ({mean} vs {w20['fa']})")
    r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    check(r2.returncode == 1 and "already has" in r2.stderr and len(r2.stderr.strip().splitlines()) == 1,
          f"run again on the same storage: one line and exit 1 ({r2.returncode}: {r2.stderr.strip()[-200:]})")


def main():
    tmp = tempfile.mkdtemp(prefix="wdrift-t62-")
    dm = Daemon(tmp)
    ep = f"ipc://{tmp}/run/ingest.sock"
    try:
        dm.write_config(extra=DEMO_STUDY)
        if not check(dm.start() is not None, "daemon ready, with the demo study"):
            return harness.summary()
        for part in (dtypes_round_trip, attach_steps, attach_wrapped, module_round_trip, demo_run):
            try:
                part(tmp, ep)
            except Exception as e:  # the parts after it still run
                check(False, f"{part.__name__} raised {type(e).__name__}: {e}")
        check(dm.stop() == 0, "daemon stopped")
    finally:
        harness.teardown(dm, tmp)
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
