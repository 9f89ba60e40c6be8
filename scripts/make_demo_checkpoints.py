#!/usr/bin/env python3
"""make_demo_checkpoints.py OUTDIR: writes the checkpoints `make demo` compares.

A small transformer's weights (embedding, 4 blocks of attention and MLP
weights with their norms, a bf16 lm_head), as four runs at the same step:
  baseline.h5   the reference run
  fa.h5         an optimised run (say Flash Attention): its attention weights
                drift from the baseline a little, more in later blocks
  fp16.h5       a low-precision proxy run: every weight drifts more, then is
                stored as fp16
  seed2.h5      a proxy run from another seed: different weights drawn from
                the same distributions
The file layout follows docs/checkpoints.md.
"""
import os
import sys

import h5py
import numpy as np


def shapes(d=256, ff=688, vocab=4000, blocks=4):
    out = {"tok_embeddings.weight": (vocab, d)}
    for i in range(blocks):
        p = f"layers.{i}."
        for w in ("wq", "wk", "wv", "wo"):
            out[p + f"attention.{w}.weight"] = (d, d)
        out[p + "feed_forward.w1.weight"] = (ff, d)
        out[p + "feed_forward.w2.weight"] = (d, ff)
        out[p + "feed_forward.w3.weight"] = (ff, d)
        out[p + "attention_norm.weight"] = (d,)
        out[p + "ffn_norm.weight"] = (d,)
    out["norm.weight"] = (d,)
    out["output.weight"] = (vocab, d)
    return out


def init(rng, name, shape):
    if name.endswith("norm.weight"):
        return (1 + 0.01 * rng.standard_normal(shape)).astype(np.float32)
    return (0.02 * rng.standard_normal(shape)).astype(np.float32)


def bf16_codes(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write(path, tensors):
    with h5py.File(path, "w") as f:
        for name, x in tensors.items():
            if name == "output.weight" and x.dtype == np.float32:
                ds = f.create_dataset(name, data=bf16_codes(x))
                ds.attrs["dtype"] = "bfloat16"
            else:
                f.create_dataset(name, data=x)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/demo"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    base = {n: init(rng, n, s) for n, s in shapes().items()}
    fa, fp16 = {}, {}
    for n, x in base.items():
        scale = np.abs(x).mean()
        block = int(n.split(".")[1]) if n.startswith("layers.") else 0
        attn = ".attention." in n
        fa[n] = x + (scale * 2e-3 * (1 + block) * rng.standard_normal(x.shape)).astype(np.float32) if attn \
            else x + (scale * 1e-4 * rng.standard_normal(x.shape)).astype(np.float32)
        fp16[n] = (x + (scale * 4e-3 * rng.standard_normal(x.shape)).astype(np.float32)).astype(np.float16)
    seed2 = {n: init(np.random.default_rng(8 + i), n, s) for i, (n, s) in enumerate(shapes().items())}
    for name, run in (("baseline", base), ("fa", fa), ("fp16", fp16), ("seed2", seed2)):
        write(os.path.join(out, name + ".h5"), run)
    print(f"wrote {len(base)} tensors per run to {out}/: baseline.h5 fa.h5 fp16.h5 seed2.h5")


if __name__ == "__main__":
    main()
