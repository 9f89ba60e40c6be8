#!/usr/bin/env python3
"""gpu_paper.py: the paper's experiment, FlashAttention against precision, on a GPU.

Trains four runs of a byte-level GPT (about 25M parameters by default) in
lockstep in one process, publishes their weights to a running wdriftd
(compute.backend: cuda, examples/gpu_paper.yaml) through the Python package,
and at the end prints each run's Wasserstein-1 drift from base per step:

  base   bf16 autocast, attention by SDPA's math backend
  fa     base's init; bf16 autocast, SDPA's FlashAttention backend
  fp32   base's init; fp32, no autocast, math backend: the precision proxy
         (the paper's FP16-vs-FP32)
  seed2  bf16 autocast, math backend, another init seed

Every run gets the same batch at every step (one seeded generator) and
steps the same AdamW. The daemon's study `paper` (baseline base,
candidates [fa], proxies {fp32: fp32, seed: seed2}) must be in its config.
The paper found FlashAttention's weight deviation 2 to 5 times below that
of low-precision training: fa/fp32 between 0.2 and 0.5.

The fa run uses FlashAttention or fails: SDPA under sdpa_kernel(FLASH_ATTENTION)
raises when that kernel cannot run, and after the first step the script
checks, in each run's autograd graph, which SDPA kernel ran.

`--device cpu` is a smoke test of the plumbing. Without SDPA (torch < 2.0)
the math runs use the explicit formula softmax(QK^T/sqrt(d))V and fa is
refused: leave it out with --runs base,fp32,seed2 (docs/demo.md says which
config that needs).
"""
import glob
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import demo_train  # noqa: E402  (make demo's model, Run, CLI and publishing; no torch until main)
RUNS = ("base", "fa", "fp32", "seed2")
STUDY = "paper"
PROXIES = {"fp32": "fp32", "seed": "seed2"}   # the study's label -> run
TEXT_CAP = 32 << 20
torch = None        # imported in main(), so that --help works without it


class PaperError(demo_train.DemoError):
    """A failure reported as one line and exit status 1, as demo_train's own are."""


def parse_args(argv):
    p = demo_train.new_parser(
        "Train four runs of a byte-level GPT (base, fa, fp32, seed2) in lockstep on a GPU, "
        "publish their weights to wdriftd every K steps, and print each run's W1 drift from "
        "base as the daemon computes it (study 'paper').",
        endpoint="ipc://./examples/run/paper-ingest.sock", config="examples/gpu_paper.yaml",
        steps=600, every=50, layers=8, d_model=512, heads=8, context=256, batch=32, lr=1e-3, timeout=120.0)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a smoke test)")
    p.add_argument("--runs", default=",".join(RUNS), help="the runs to train, base among them")
    p.add_argument("--text", help="the training text (bytes); default: the standard library's *.py, "
                                  f"sorted by path, the first {TEXT_CAP >> 20} MiB")
    a = p.parse_args(argv)
    a.runs = [r for r in a.runs.split(",") if r]
    bad = [r for r in a.runs if r not in RUNS]
    if bad or "base" not in a.runs or len(set(a.runs)) != len(a.runs):
        p.error(f"--runs: distinct names among {', '.join(RUNS)}, base included (got {','.join(a.runs)})")
    a.runs = [r for r in RUNS if r in a.runs]
    demo_train.check_common_args(p, a)
    return a


# --- attention --------------------------------------------------------------

def sdpa_context(backend):
    """A context that lets SDPA use only backend ("math" or "flash"); None without SDPA (torch < 2.0)."""
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return None
    try:                                    # torch.nn.attention: torch 2.2 or 2.3 and later
        from torch.nn.attention import SDPBackend, sdpa_kernel
        kind = SDPBackend.MATH if backend == "math" else SDPBackend.FLASH_ATTENTION
        return lambda: sdpa_kernel(kind)
    except ImportError:                     # older 2.x
        flags = dict(enable_math=backend == "math", enable_flash=backend == "flash", enable_mem_efficient=False)
        return lambda: torch.backends.cuda.sdp_kernel(**flags)


def sdpa_kernel_of(out):
    """The fused SDPA kernel in out's autograd graph near its end ('' for none: math ops)."""
    stack, seen = [(out.grad_fn, 0)], set()
    while stack:
        fn, depth = stack.pop()
        if fn is None or fn in seen or depth > 4:
            continue
        seen.add(fn)
        name = fn.name()
        if any(k in name for k in ("Flash", "EfficientAttention", "Cudnn", "Overrideable")):
            return name
        stack.extend((f, depth + 1) for f, _ in fn.next_functions)
    return ""


class Attention:
    """Causal attention of one run: SDPA restricted to one backend, or the explicit formula."""

    def __init__(self, backend):
        self.backend, self.ctx = backend, sdpa_context(backend)
        self.seen = None if self.ctx else "explicit formula"    # the kernel that ran, once known
        if self.ctx is None and backend == "flash":
            raise PaperError(f"the fa run needs torch.nn.functional.scaled_dot_product_attention (torch >= 2.0); "
                             f"this is torch {torch.__version__}: leave fa out (--runs base,fp32,seed2)")

    def __call__(self, q, k, v):
        if self.ctx is None:    # softmax(QK^T / sqrt(d)) V, the T x T scores materialised
            return demo_train.attention_plain(q, k, v)
        try:                    # raises rather than fall back when the backend cannot run
            with self.ctx():
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        except RuntimeError as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise PaperError(f"SDPA's {self.backend} backend cannot run on {q.device} with {q.dtype} "
                             f"q, k, v of shape {tuple(q.shape)}: {why}") from e
        if self.seen is None and out.grad_fn is not None:   # the first call in training
            self.seen = sdpa_kernel_of(out) or "math ops"
        return out

    def check(self, run):
        """Fails unless the kernel seen in training is the one this run asked for."""
        fused = self.seen not in ("explicit formula", "math ops")
        if self.seen is None or fused != (self.backend == "flash") or (fused and "Flash" not in self.seen):
            raise PaperError(f"run '{run}' asked for attention backend {self.backend} but ran "
                             f"{self.seen or 'nothing seen'}")


# --- data -------------------------------------------------------------------

def read_text(args):
    """(bytes, where from): --text, or the standard library's *.py sorted by path, up to TEXT_CAP."""
    if args.text:
        try:
            with open(args.text, "rb") as f:
                return f.read(TEXT_CAP), args.text
        except OSError as e:
            raise PaperError(f"cannot read --text: {e}")
    root = os.path.dirname(os.__file__)
    paths = sorted(p for p in glob.glob(os.path.join(root, "**", "*.py"), recursive=True)
                   if not {"site-packages", "dist-packages"} & set(p[len(root):].split(os.sep)))
    parts, n = [], 0
    for p in paths:
        with open(p, "rb") as f:
            parts.append(f.read(TEXT_CAP - n))
        n += len(parts[-1])
        if n >= TEXT_CAP:
            break
    return b"".join(parts), f"{root}/**/*.py ({len(parts)} files)"


# --- the daemon, through the package and the CLI ------------------------------

def cli(args, *argv):
    """demo_train's cli, with time for a drift query over a large model's tensors."""
    return demo_train.cli(args, *argv, timeout=150)


def daemon_engine(args):
    """The daemon's engine, as `wdrift status --json` names it (backend and device)."""
    rc, out, err = cli(args, "status", "--json")
    if rc:
        raise PaperError(f"cannot get the daemon's status: {err}")
    return json.loads(out).get("engine", "?")


def w1_by_run(doc):
    """{run: weighted W1 from base} of every run the study reports, as a candidate or as a proxy."""
    out = {}
    for cand, rec in doc.get("candidates", {}).items():
        layers = rec.get("layers", [])
        out[cand] = demo_train.weighted(layers, lambda layer: layer.get("w1"), every=True)
        for label, run in PROXIES.items():
            w = demo_train.weighted(layers, lambda layer: layer.get("proxies", {}).get(label, {}).get("w1"),
                                    every=True)
            out[run] = w if out.get(run) is None else out[run]
    return out


def drift_at(args, step):
    """{run: W1 from base} at step for every trained run but base, asking again until all are in."""
    want = [r for r in args.runs if r != "base"]
    end, why = time.time() + args.timeout, "no reply"
    while True:
        rc, out, err = cli(args, "drift", STUDY, "--step", str(step), "--json")
        if rc == 0:
            w = w1_by_run(json.loads(out))
            missing = [r for r in want if w.get(r) is None]
            if not missing:
                return w
            why = f"no complete W1 of {', '.join(missing)}"
        elif "no results" in err:
            why = err
        else:
            raise PaperError(f"cannot get the drift at step {step}: {err}")
        if time.time() > end:
            hint = ("" if "fa" in args.runs else
                    f"; without fa, study '{STUDY}' has no candidate: list fp32 and seed2 as candidates too")
            raise PaperError(f"no complete drift for study '{STUDY}' at step {step} after {args.timeout:g} s "
                             f"({why}){hint}")
        time.sleep(0.2)


# --- main -------------------------------------------------------------------

HEADER = (f"{'step':>5}  {'loss: base':>10} {'fa':>7} {'fp32':>7} {'seed2':>7}   "
          f"{'W1 from base: fa':>16} {'fp32':>9} {'seed2':>9}   {'fa/fp32':>8} {'fa/seed2':>8}")


def row_line(row):
    lo, w, r = row["loss"], row["w1"], row["ratio"]
    return (f"{row['step']:>5}  {demo_train.fmt(lo.get('base'), '.4f'):>10} {demo_train.fmt(lo.get('fa'), '.4f'):>7} "
            f"{demo_train.fmt(lo.get('fp32'), '.4f'):>7} {demo_train.fmt(lo.get('seed2'), '.4f'):>7}   "
            f"{demo_train.fmt(w.get('fa'), '.3e'):>16} {demo_train.fmt(w.get('fp32'), '.3e'):>9} {demo_train.fmt(w.get('seed2'), '.3e'):>9}   "
            f"{demo_train.fmt(r['fp32'], '.3g'):>8} {demo_train.fmt(r['seed2'], '.3g'):>8}")


def train(args, runs, attn, data, dev):
    """The lockstep loop: every run takes the same batch at every step. ({step: losses}, seconds)."""
    gen = torch.Generator().manual_seed(args.seed)
    offs = torch.arange(args.context + 1, device=dev)

    def batch():
        ix = torch.randint(data.numel() - args.context - 1, (args.batch,), generator=gen).to(dev)
        chunk = data[ix.unsqueeze(1) + offs].long()
        return chunk[:, :-1], chunk[:, 1:]

    x, y = batch()
    with torch.no_grad():   # step 0 is the init: the loss of the first batch, untrained
        losses = {0: {name: r.loss(x, y).item() for name, r in runs.items()}}
    demo_train.publish(args, runs, 0)
    t_train = 0.0
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        for r in runs.values():
            r.train_step(x, y)
        x, y = batch()
        if step == 1:
            for name in runs:
                attn[name].check(name)
                print(f"gpu_paper: run {name}: attention ran {attn[name].seen}", flush=True)
        if step % args.every == 0 or step == args.steps:
            losses[step] = {name: r.mean_loss() for name, r in runs.items()}   # syncs the device
            t_train += time.perf_counter() - t0
            demo_train.publish(args, runs, step)
            print(f"gpu_paper: step {step}: published; loss base {losses[step]['base']:.4f}", flush=True)
        else:
            t_train += time.perf_counter() - t0
    return losses, t_train


def set_fp32_matmuls_ieee(dev):
    """fp32 matmuls in full fp32, never TF32, so that the fp32 run is really fp32. The state, as a string."""
    if dev.type != "cuda":
        return "cpu: fp32 matmuls in fp32"
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):    # torch >= 2.9; mixing it with allow_tf32 is an error there
        m.fp32_precision = "ieee"
        return f"torch.backends.cuda.matmul.fp32_precision = {m.fp32_precision!r}"
    m.allow_tf32 = False
    return f"torch.backends.cuda.matmul.allow_tf32 = {m.allow_tf32}"


def main(argv=None):
    args = parse_args(argv)
    demo_train.use_build(args)
    global torch
    torch, wdrift = demo_train.import_torch()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PaperError(f"--device {args.device}: torch {torch.__version__} sees no CUDA device (--device cpu "
                         "for a smoke test)")
    dev_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    tf32 = set_fp32_matmuls_ieee(dev)
    # run: (attention backend, bf16 autocast, init seed)
    plans = {"base": ("math", True, args.seed), "fa": ("flash", True, args.seed),
             "fp32": ("math", False, args.seed), "seed2": ("math", True, args.seed + 1)}
    attn = {name: Attention(plans[name][0]) for name in args.runs}     # refuses fa without SDPA
    t_start = time.perf_counter()

    demo_train.check_daemon(args, RUNS, "this run's")
    engine = daemon_engine(args)
    text, source = read_text(args)
    if len(text) < args.context + 2:
        raise PaperError(f"{source}: {len(text)} bytes, fewer than --context + 2")
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(dev)

    # make demo's GPT, with 256 symbols (bytes): one model for both examples
    GPT = demo_train.build_model_class()
    dims = (256, args.d_model, args.layers, args.heads, args.context)
    models = {}
    for name in args.runs:      # base first: fa and fp32 load its init
        torch.manual_seed(plans[name][2])
        models[name] = GPT(*dims, attn[name])
        if name in ("fa", "fp32"):
            models[name].load_state_dict(models["base"].state_dict())
    n_params = sum(p.numel() for p in models["base"].parameters())
    try:
        runs = {name: demo_train.Run(name, models[name].to(dev), args.lr, plans[name][1],
                                     wdrift.Publisher(args.endpoint, name)) for name in args.runs}
    except wdrift.WdriftError as e:
        raise PaperError(str(e))

    print(f"gpu_paper: torch {torch.__version__}, device {dev} ({dev_name}); {tf32}")
    print(f"gpu_paper: daemon engine: {engine}")
    print(f"gpu_paper: text: {len(text)} bytes of {source}")
    print(f"gpu_paper: GPT with {args.layers} layers, d_model {args.d_model}, {args.heads} heads, context "
          f"{args.context}, batch {args.batch}, AdamW lr {args.lr:g}: {n_params} parameters; {args.steps} steps, "
          f"publishing every {args.every} to {args.endpoint}")
    for name, r in runs.items():
        a = attn[name]
        print(f"gpu_paper: run {name}: {'bf16 autocast' if r.bf16 else 'fp32, no autocast'}, attention "
              f"{'SDPA ' if a.ctx else ''}{a.backend}{'' if a.ctx else ' (explicit formula: no SDPA)'}, "
              f"init seed {plans[name][2]}", flush=True)
    with demo_train.publishers_closed(runs, args.timeout):
        losses, t_train = train(args, runs, attn, data, dev)

    rows = []
    for step, lo in losses.items():
        w = drift_at(args, step)
        rows.append({"step": step, "loss": lo, "w1": w,
                     "ratio": {p: (w["fa"] / w[p] if w.get("fa") is not None and w.get(p) else None)
                               for p in ("fp32", "seed2")}})
    engine = daemon_engine(args)
    print(f"gpu_paper: W1 from base per step, the mean over tensors weighted by element count; "
          f"computed by the daemon's engine: {engine}")
    print(HEADER)
    for row in rows:
        print(row_line(row))
    steps = max(args.steps, 1)
    t_all = time.perf_counter() - t_start
    print(f"gpu_paper: {args.steps} steps of {len(runs)} runs trained in {t_train:.1f} s "
          f"({1000 * t_train / steps:.1f} ms per step of all); {t_all:.1f} s in all, publishing and drift included")
    last = rows[-1]["ratio"]
    if last["fp32"] is not None:
        print(f"gpu_paper: at step {rows[-1]['step']}: fa/fp32 {last['fp32']:.3g} (the paper: 0.2 to 0.5), "
              f"fa/seed2 {demo_train.fmt(last['seed2'], '.3g')}")
    print(f"gpu_paper: per tensor: {args.wdrift} drift {STUDY} --step {rows[-1]['step']} -c {args.config}",
          flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"study": STUDY, "runs": args.runs, "torch": torch.__version__, "device": dev_name,
                       "engine": engine, "parameters": n_params, "text_bytes": len(text), "text": source,
                       "matmul_fp32": tf32, "attention": {n: attn[n].seen for n in runs},
                       "model": {**demo_train.model_setting(args), "seed": args.seed, "steps": args.steps,
                                 "every": args.every},
                       "train_seconds": t_train, "total_seconds": t_all, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    demo_train.run_script(main, "gpu_paper")   # a PaperError (a DemoError) is one line and exit status 1
