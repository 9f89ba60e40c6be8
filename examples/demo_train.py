#!/usr/bin/env python3
"""demo_train.py: the training half of `make demo`.

Trains four runs of a small character-level GPT on the CPU, in lockstep in
one process, on the text of the GPL-3 (Debian's base-files ships it), and
streams their weights to a running wdriftd through the Python package
(python/wdrift). After each published step it asks the daemon, through the
wdrift CLI, how far each run has drifted from the baseline, and prints one
line per step:

  base     fp32, attention materialised: softmax(QK^T/sqrt(d)), causal mask
  fa       base's init, attention by a tiled online softmax (the Flash
           Attention algorithm) in plain torch ops: the same maths, in
           another order of rounding; the candidate under study
  lowprec  base's init, forward under bf16 autocast: a proxy for drift that
           is accepted (low-precision training is)
  seed2    base's model and data from another init seed: a proxy for drift
           as large as a fresh run's

All four see the same batches, drawn from one seeded generator, and step
the same AdamW. The daemon's study (name demo, baseline base, candidates
[fa], proxies {lowprec: lowprec, seed: seed2}) must be in its config.

W1 is, per tensor, the Wasserstein-1 distance between the distributions of
the two runs' weights; the line shows its mean over all tensors weighted by
their element counts. fa is numerically equal to base but for rounding, so
its W1 should stay far below lowprec's and seed2's: ratios well under 1.

It depends on torch, numpy, the wdrift package (python/, next to this
file's directory) and the wdrift CLI; not on the daemon's internals.
"""
import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TEXT = "/usr/share/common-licenses/GPL-3"
RUNS = ("base", "fa", "lowprec", "seed2")
STUDY = "demo"
PROXIES = {"lowprec": "lowprec", "seed": "seed2"}   # the study's label -> run
FLASH_BLOCK = 16    # keys and values per tile of the online softmax
torch = None        # imported in main(), so that --help works without it


class DemoError(Exception):
    """A failure the demo reports as one line and exit status 1 (gpu_paper.py's too)."""


def add_common_args(p, endpoint, config, steps, every, layers, d_model, heads, context, batch, lr, timeout):
    """The options both examples take (gpu_paper.py too), with each one's defaults."""
    p.add_argument("--endpoint", default=endpoint, help="the daemon's ingest endpoint")
    p.add_argument("--config", default=config,
                   help="the daemon's config, given to the wdrift CLI (its control endpoint)")
    p.add_argument("--wdrift", default="build/wdrift",
                   help="the wdrift CLI; libwdrift.so is taken from its directory unless $WDRIFT_LIB is set")
    p.add_argument("--steps", type=int, default=steps, help="optimizer steps")
    p.add_argument("--every", type=int, default=every, help="publish (and report) every K steps (and step 0)")
    p.add_argument("--seed", type=int, default=1234,
                   help="init seed of the runs but seed2 (seed+1), and the data order's")
    p.add_argument("--layers", type=int, default=layers, help="transformer blocks")
    p.add_argument("--d-model", type=int, default=d_model, help="model width")
    p.add_argument("--heads", type=int, default=heads, help="attention heads")
    p.add_argument("--context", type=int, default=context, help="symbols (characters, bytes) per sequence")
    p.add_argument("--batch", type=int, default=batch, help="sequences per batch")
    p.add_argument("--lr", type=float, default=lr, help="AdamW learning rate, fixed")
    p.add_argument("--timeout", type=float, default=timeout,
                   help="seconds to wait for the daemon's acks, and for each step's drift")
    p.add_argument("--json-out", metavar="FILE", help="also write the per-step table (and the setting) to FILE "
                                                      "as JSON")


def model_setting(args):
    """The model and training options of add_common_args, for a --json-out."""
    return {"layers": args.layers, "d_model": args.d_model, "heads": args.heads, "context": args.context,
            "batch": args.batch, "lr": args.lr}


def check_common_args(p, a):
    """Refuses (p.error) what add_common_args' options cannot be."""
    if a.steps < 0 or a.every < 1 or min(a.layers, a.heads, a.d_model, a.context, a.batch) < 1:
        p.error("--steps must be >= 0, and --every, --layers, --heads, --d-model, --context, --batch >= 1")
    if a.d_model % a.heads:
        p.error("--d-model must be a multiple of --heads")


def new_parser(description, **defaults):
    """A trainer's parser: its description, and add_common_args' options with these defaults."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_args(p, **defaults)
    return p


def parse_args(argv):
    p = new_parser("Train four runs of a small char-level GPT (base, fa, lowprec, seed2) in lockstep, "
                   "publish their weights to wdriftd every K steps, and print each step's drift from "
                   "base as the daemon computes it (study 'demo').",
                   endpoint="ipc://./run/ingest.sock", config="config/wdrift.yaml", steps=300, every=20,
                   layers=3, d_model=64, heads=4, context=64, batch=16, lr=3e-3, timeout=30.0)
    # One thread: on the 2-core test machine (torch 1.13, generic BLAS) a
    # step of all four runs took 75 ms with one thread and 200 to 500 ms
    # with two, whose OpenMP waits cost more than these small matmuls gain.
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    a = p.parse_args(argv)
    check_common_args(p, a)
    if a.threads < 1 or a.context % FLASH_BLOCK:
        p.error(f"--threads must be >= 1, and --context a multiple of {FLASH_BLOCK}")
    return a


# --- the model --------------------------------------------------------------

def attention_plain(q, k, v):
    """softmax(QK^T / sqrt(d)) V with a causal mask, the T x T scores materialised."""
    t = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return s.masked_fill(mask, float("-inf")).softmax(-1) @ v


def attention_flash(q, k, v):
    """The same attention by Flash Attention's online softmax, one key/value tile at a time.

    Per query it keeps a running max m, a running sum l of exp(s - m) and
    an accumulator of exp(s - m) V; each tile raises m where it must and
    rescales l and the accumulator by exp(m_old - m_new). The T x T scores
    never exist at once. Every query block is processed in one batched op,
    as a GPU runs the query blocks in parallel. The first tile holds key 0,
    which every query sees, so m is finite from then on and a tile that is
    wholly masked for a query adds exp(-inf) = 0 to it, never a NaN.
    """
    t, scale = q.shape[-2], 1.0 / math.sqrt(q.shape[-1])
    qpos = torch.arange(t, device=q.device).unsqueeze(1)
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    for j in range(0, t, FLASH_BLOCK):
        kj, vj = k[..., j:j + FLASH_BLOCK, :], v[..., j:j + FLASH_BLOCK, :]
        s = (q @ kj.transpose(-2, -1)) * scale
        kpos = torch.arange(j, j + kj.shape[-2], device=q.device).unsqueeze(0)
        s = s.masked_fill(kpos > qpos, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = torch.exp(s - m_new)
        c = torch.exp(m - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        acc = acc * c + p @ vj
        m = m_new
    return acc / l


def build_model_class():
    """The GPT class; defined once torch is imported (it is optional until main runs)."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        """Pre-LN: x + attn(ln1(x)), then x + mlp(ln2(x))."""

        def __init__(self, d, heads, attention):
            super().__init__()
            self.heads, self.attention = heads, attention
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            x = x + self.proj(self.attention(q, k, v).transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        """Token and learned position embeddings, pre-LN blocks, final LN, linear head."""

        def __init__(self, vocab, d, layers, heads, context, attention):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
            self.blocks = nn.ModuleList(Block(d, heads, attention) for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, idx):
            h = self.tok(idx) + self.pos.weight[: idx.shape[1]]
            for blk in self.blocks:
                h = blk(h)
            return self.head(self.ln(h))

    return GPT


class Run:
    """One model, its optimizer, its publisher and its forward's precision (also gpu_paper.py's)."""

    def __init__(self, name, model, lr, bf16, pub):
        self.name, self.model, self.bf16, self.pub = name, model, bf16, pub
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr)
        self.loss_sum, self.loss_n = 0.0, 0

    def loss(self, x, y):
        # bf16 autocast (on the CPU: torch >= 1.10): matmuls and linears in
        # bf16, with fp32 weights and optimizer; the loss is taken in fp32.
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(x)
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    def train_step(self, x, y):
        loss = self.loss(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        # summed where the loss is, in fp64 (what a sum of loss.item() gives):
        # on a GPU, no sync per step
        self.loss_sum = self.loss_sum + loss.detach().double()
        self.loss_n += 1

    def mean_loss(self):
        """The mean training loss since the last call (a GPU syncs here)."""
        m = float(self.loss_sum) / self.loss_n if self.loss_n else float("nan")
        self.loss_sum, self.loss_n = 0.0, 0
        return m


# --- the daemon, through the package and the CLI ------------------------------

def resolve(path):
    """path as given when it exists there, else relative to the repository."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    alt = os.path.join(REPO, path)
    return alt if os.path.exists(alt) else path


def use_build(args):
    """Resolves args.wdrift and args.config; the package from python/ and the library built with the CLI."""
    args.wdrift, args.config = resolve(args.wdrift), resolve(args.config)
    lib = os.path.join(os.path.dirname(os.path.abspath(args.wdrift)), "libwdrift.so")
    if "WDRIFT_LIB" not in os.environ and os.path.exists(lib):
        os.environ["WDRIFT_LIB"] = lib   # the library built with the CLI we run
    sys.path.insert(0, os.path.join(REPO, "python"))


def import_torch():
    """(torch, wdrift), imported only now, so that --help needs neither; torch is this module's too."""
    global torch
    try:
        import torch
        import wdrift
    except ImportError as e:
        raise DemoError(f"cannot import {e.name}: {e}")
    return torch, wdrift


def cli(args, *argv, timeout=30):
    """(exit status, stdout, last stderr line) of `wdrift ARGV -c CONFIG`."""
    try:
        r = subprocess.run([args.wdrift, *argv, "-c", args.config], capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DemoError(f"cannot run '{args.wdrift}': {e}")
    err = r.stderr.strip().splitlines()
    return r.returncode, r.stdout, err[-1] if err else f"exit status {r.returncode}"


def drift_at(args, step):
    """The study's drift at step: {"fa": [layer, ...]} once every proxy is in.

    Computation lags the acks, and the daemon recomputes a step as each
    run's snapshot arrives, so the first results may lack fa or a proxy;
    it asks again until all are there, or args.timeout passes.
    """
    end = time.time() + args.timeout
    why = "no reply"
    while True:
        rc, out, err = cli(args, "drift", STUDY, "--step", str(step), "--json")
        if rc == 0:
            layers = json.loads(out).get("candidates", {}).get("fa", {}).get("layers", [])
            missing = sorted({label for layer in layers for label in PROXIES
                              if layer.get("proxies", {}).get(label, {}).get("w1") is None})
            if layers and not missing:
                return layers
            why = f"the results lack {', '.join(missing) or 'fa'}"
        elif "no results" in err:
            why = err
        elif "no study" in err:
            raise DemoError(f"{err}: add it to '{args.config}': name {STUDY}, baseline base, candidates [fa], "
                            f"proxies {{lowprec: lowprec, seed: seed2}}")
        else:
            raise DemoError(f"cannot get the drift at step {step}: {err}")
        if time.time() > end:
            raise DemoError(f"no complete drift for study '{STUDY}' at step {step} after {args.timeout:g} s "
                            f"({why}): is the study in '{args.config}'?")
        time.sleep(0.1)


def check_daemon(args, runs=RUNS, whose="this demo's"):
    """Fails unless the daemon answers and holds no snapshot of runs.

    A step sent again is a duplicate to the daemon, which keeps the weights
    it has: a second demo against the same storage would report the first
    one's drift.
    """
    rc, out, err = cli(args, "runs", "--json")
    if rc:
        raise DemoError(f"cannot reach the daemon: {err}")
    for r in json.loads(out).get("runs", []):
        if r.get("name") in runs and r.get("durable"):
            raise DemoError(f"run '{r['name']}' already has {r['durable']} snapshots in the daemon (up to step "
                            f"{r.get('last_step')}), which it would keep over {whose}: start wdriftd "
                            "on an empty storage.dir")


def weighted(layers, w1_of, every=False):
    """The mean over tensors of w1_of(layer), weighted by element count.

    A tensor without one is left out; None when none has one, or, with
    every, unless every tensor has one.
    """
    num = den = 0.0
    for layer in layers:
        w = w1_of(layer)
        if w is not None:
            num += layer["numel"] * w
            den += layer["numel"]
        elif every:
            return None
    return num / den if den else None


def ratio(a, b):
    return a / b if a is not None and b else None


# --- main -------------------------------------------------------------------

HEADER = (f"{'step':>5}  {'loss: base':>10} {'fa':>7} {'lowprec':>7} {'seed2':>7}   "
          f"{'W1 from base: fa':>16} {'lowprec':>9} {'seed2':>9}   {'fa/lowprec':>10} {'fa/seed':>9}")


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def row_line(row):
    lo, w, r = row["loss"], row["w1"], row["ratio"]
    return (f"{row['step']:>5}  {lo['base']:>10.4f} {lo['fa']:>7.4f} {lo['lowprec']:>7.4f} {lo['seed2']:>7.4f}   "
            f"{fmt(w['fa'], '.3e'):>16} {fmt(w['lowprec'], '.3e'):>9} {fmt(w['seed2'], '.3e'):>9}   "
            f"{fmt(r['lowprec'], '.3g'):>10} {fmt(r['seed'], '.3g'):>9}")


def publish(args, runs, step):
    """Publishes every run at step and waits for the daemon's acks (durable), or fails."""
    for r in runs.values():
        r.pub.publish(step, r.model.state_dict())
    for r in runs.values():
        if not r.pub.flush(args.timeout):
            raise DemoError(f"the daemon did not acknowledge run '{r.name}' step {step} within "
                            f"{args.timeout:g} s at {args.endpoint}: is wdriftd running there?")


@contextlib.contextmanager
def publishers_closed(runs, timeout):
    """Closes every run's publisher after the block: after its acks, or at once when the block failed."""
    try:
        yield
    except BaseException:
        for r in runs.values():
            r.pub.close(0)      # what is left is given up
        raise
    for r in runs.values():
        r.pub.close(timeout)    # all acked already: returns at once


def publish_and_report(args, runs, step, losses):
    """Publishes every run at step, waits for the acks, then the drift; the table row."""
    publish(args, runs, step)
    layers = drift_at(args, step)
    w = {"fa": weighted(layers, lambda layer: layer["w1"]),
         "lowprec": weighted(layers, lambda layer: layer["proxies"]["lowprec"]["w1"]),
         "seed2": weighted(layers, lambda layer: layer["proxies"]["seed"]["w1"])}
    return {"step": step, "loss": losses, "w1": w,
            "ratio": {"lowprec": ratio(w["fa"], w["lowprec"]), "seed": ratio(w["fa"], w["seed2"])}}


def train(args, runs, data):
    """The lockstep loop: every run takes the same batch at every step."""
    gen = torch.Generator().manual_seed(args.seed)
    n, t, b = data.numel(), args.context, args.batch

    def batch():
        ix = torch.randint(n - t - 1, (b,), generator=gen).tolist()
        return (torch.stack([data[i:i + t] for i in ix]), torch.stack([data[i + 1:i + t + 1] for i in ix]))

    # Step 0 is the init; its "loss" is that of the first batch, untrained.
    x, y = batch()
    with torch.no_grad():
        losses = {name: r.loss(x, y).item() for name, r in runs.items()}
    rows = [publish_and_report(args, runs, 0, losses)]
    print(HEADER)
    print(row_line(rows[-1]), flush=True)
    t_train = 0.0
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        for r in runs.values():
            r.train_step(x, y)
        t_train += time.perf_counter() - t0
        x, y = batch()
        if step % args.every == 0 or step == args.steps:
            losses = {name: r.mean_loss() for name, r in runs.items()}
            rows.append(publish_and_report(args, runs, step, losses))
            print(row_line(rows[-1]), flush=True)
    return rows, t_train


def main(argv=None):
    args = parse_args(argv)
    use_build(args)
    # Before torch is imported: with only torch.set_num_threads(1), its
    # OpenMP pool kept a second thread spinning, a core's worth of CPU
    # (most of it system time) taken from the daemon beside it.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    _, wdrift = import_torch()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()

    check_daemon(args)
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text], dtype=torch.long)

    GPT = build_model_class()
    dims = (len(vocab), args.d_model, args.layers, args.heads, args.context)
    torch.manual_seed(args.seed)
    base = GPT(*dims, attention_plain)
    models = {"base": base}
    for name, attn in (("fa", attention_flash), ("lowprec", attention_plain)):
        models[name] = GPT(*dims, attn)
        models[name].load_state_dict(base.state_dict())
    torch.manual_seed(args.seed + 1)
    models["seed2"] = GPT(*dims, attention_plain)
    n_params = sum(p.numel() for p in base.parameters())

    try:
        runs = {name: Run(name, models[name], args.lr, name == "lowprec", wdrift.Publisher(args.endpoint, name))
                for name in RUNS}
    except wdrift.WdriftError as e:
        raise DemoError(str(e))
    print(f"demo: {len(RUNS)} runs of a GPT with {args.layers} layers, d_model {args.d_model}, "
          f"{args.heads} heads, context {args.context}, batch {args.batch}: {n_params} parameters; "
          f"{len(text)} characters of {TEXT}, {len(vocab)} symbols; {args.steps} steps, "
          f"publishing every {args.every} to {args.endpoint}", flush=True)
    with publishers_closed(runs, args.timeout):
        rows, t_train = train(args, runs, data)
    t_all = time.perf_counter() - t_start

    last = rows[-1]
    w, rt = last["w1"], last["ratio"]
    steps = max(args.steps, 1)
    print(f"demo: {args.steps} steps of {len(RUNS)} runs trained in {t_train:.1f} s "
          f"({1000 * t_train / steps:.0f} ms per step of all four); {t_all:.1f} s in all, "
          f"publishing and drift included")
    print(f"demo: at step {last['step']}, loss base {last['loss']['base']:.3f}, fa {last['loss']['fa']:.3f}, "
          f"lowprec {last['loss']['lowprec']:.3f}, seed2 {last['loss']['seed2']:.3f}")
    print(f"demo: weighted W1 from base: fa {fmt(w['fa'], '.3e')}, lowprec {fmt(w['lowprec'], '.3e')}, "
          f"seed2 {fmt(w['seed2'], '.3e')}")
    below = all(x is not None and x < 1 for x in rt.values())
    print(f"demo: fa/lowprec {fmt(rt['lowprec'], '.3g')}, fa/seed {fmt(rt['seed'], '.3g')}: "
          + ("both below 1: fa drifts less than either proxy run" if below else
             "not both below 1: fa drifts as far as a proxy run, or no proxy drifts yet"), flush=True)
    print(f"demo: per tensor: {args.wdrift} drift {STUDY} --step {last['step']} -c {args.config}", flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"study": STUDY, "runs": list(RUNS), "parameters": n_params,
                       "model": model_setting(args),
                       "train_seconds": t_train, "total_seconds": t_all, "steps": rows}, f, indent=1)
    return 0


def run_script(main, prog):
    """Runs main() as the script prog: a DemoError is one line on stderr and exit status 1; ^C is 130."""
    try:
        sys.exit(main())
    except DemoError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run_script(main, "demo_train")
