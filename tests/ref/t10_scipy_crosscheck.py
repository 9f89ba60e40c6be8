"""t10_scipy_crosscheck.py: `wdrift compare --json` against scipy and numpy.

Writes checkpoint files with random weights in every element type (f32, f64,
f16, bf16 as uint16 + attribute, bf16 as a 16-bit HDF5 float, f32 that is
upcast bf16), sizes 1 to 10^6, equal and unequal, mixed types between baseline
and candidate, with NaN/+Inf/-Inf, signed zeros, heavy duplicates, random bit
patterns and big-endian storage; runs `wdrift compare BASE CAND --proxy ...
--round-proxy ... --json`, and checks every number it prints:

  - w1 against scipy.stats.wasserstein_distance on the finite values, decoded
    to float64: 1e-9 relative, or 1e-15 absolute where scipy says 0; null
    where a side has no finite value (scipy raises there);
  - nonfinite counts (NaN, +Inf, -Inf) on both sides;
  - max_abs_diff, rel_l2 = ||a-b||/||a|| (norms scaled as LAPACK's dnrm2
    would, so that tiny and huge values do not underflow or overflow) and
    n_diff over the positions where both are finite (n_diff: every
    differing position; -0 == +0; the same non-finite kind on both sides
    does not differ); null on unequal sizes;
  - numel, numel_candidate, dtype, dtype_candidate, per-side stats;
  - each proxy's w1 = W1(baseline, proxy) and ratio = w1 / proxy w1 (null
    where the proxy's w1 is 0 or undefined). round:bf16 is the baseline
    rounded to bf16 to nearest even; round:fp16 is numpy astype(float16);
  - the summary: numel-weighted mean, median and max of w1, max_abs_diff,
    nonfinite totals, and per proxy w1_weighted, ratio_median, ratio_max,
    ratio_weighted.

Run from the repository root (tests/run.sh does). WDRIFT names the binary
(default build/wdrift); WDRIFT_SEED changes the data.
"""
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep tests/ref free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402
from gen import Bf16  # noqa: E402

import numpy as np  # noqa: E402

REL = 1e-9
ABS0 = 1e-15
KINDS = ("f32", "f64", "f16", "bf16u", "bf16f", "f32up")


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

def make(kind, x):
    """A tensor of the given kind holding the values x (float64), rounded."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        if kind == "f32":
            return x.astype(np.float32)
        if kind == "f64":
            return x.copy()
        if kind == "f16":
            return x.astype(np.float16)
        codes = gen.f32_to_bf16(x.astype(np.float32)).reshape(x.shape)
        if kind == "bf16u":
            return Bf16(codes, "uint16")
        if kind == "bf16f":
            return Bf16(codes, "float")
        if kind == "f32up":
            return gen.bf16_to_f32(codes).reshape(x.shape)
    raise ValueError(kind)


def weights(rng, n, scale=0.02):
    return rng.standard_normal(n) * scale


def perturb(rng, x, rel):
    return x * (1 + rel * rng.standard_normal(x.shape)) + rel * 1e-3 * rng.standard_normal(x.shape)


def shaped(x, n):
    return x.reshape({4097: (17, 241), 65536: (256, 256), 10 ** 6: (1000, 1000)}.get(n, (n,)))


def sprinkle(rng, x, frac=0.02):
    """Puts NaN, +Inf and -Inf at random positions of a copy of x."""
    x = x.copy()
    n = x.size
    for v, f in ((np.nan, frac / 2), (np.inf, frac / 4), (-np.inf, frac / 4)):
        k = max(1, int(n * f))
        x.flat[rng.choice(n, k, replace=False)] = v
    return x


# ---------------------------------------------------------------------------
# Studies: baseline, candidate and proxy tensors, and the command's options
# ---------------------------------------------------------------------------

def study_equal(rng):
    """Every kind and size 1 .. 65536 with itself (+ 10^6 for most); a
    seed-like proxy file and both rounding proxies."""
    base, cand, prox = {}, {}, {}
    sizes = (1, 2, 7, 100, 4097, 65536)
    for kind in KINDS:
        for n in sizes:
            name = "eq/%s.n%d" % (kind, n)
            x = weights(rng, n)
            base[name] = make(kind, shaped(x, n))
            cand[name] = make(kind, shaped(perturb(rng, x, 1e-3), n))
            prox[name] = make(kind, shaped(weights(rng, n), n))
    for kind in ("f32", "f64", "f16", "bf16u", "f32up"):
        n = 10 ** 6
        name = "big.%s.n%d" % (kind, n)
        x = weights(rng, n)
        base[name] = make(kind, shaped(x, n))
        cand[name] = make(kind, shaped(perturb(rng, x, 1e-2), n))
        prox[name] = make(kind, shaped(weights(rng, n), n))
    return dict(name="equal sizes", base=base, cand=cand,
                proxies=[("seed", prox)], rounds=["bf16", "fp16"])


def study_unequal(rng):
    """Unequal sizes, and mixed element types between the two sides."""
    base, cand, prox = {}, {}, {}
    pairs = [
        (1, 2, "f32", "f32"), (2, 7, "f64", "f64"), (7, 100, "f16", "f16"),
        (100, 4097, "bf16u", "bf16u"), (4097, 65536, "bf16f", "f32up"),
        (65536, 100, "f32up", "f16"), (4097, 10 ** 6, "f32", "f32"),
        (100, 7, "f64", "bf16u"), (1, 4097, "f16", "f32"),
        # equal sizes, mixed types: pair statistics across types
        (100, 100, "f32", "f64"), (4097, 4097, "f16", "bf16u"),
        (4097, 4097, "bf16u", "f32"), (65536, 65536, "f64", "f16"),
        (7, 7, "bf16f", "bf16u"), (65536, 65536, "f32up", "bf16f"),
        (100, 100, "f32", "f32up"), (2, 2, "f16", "f64"), (1, 1, "bf16u", "f64"),
    ]
    for i, (nb, nc, kb, kc) in enumerate(pairs):
        name = "mix.%d.%s.n%d-%s.n%d" % (i, kb, nb, kc, nc)
        xb = weights(rng, nb)
        xc = perturb(rng, xb, 1e-2) if nb == nc else weights(rng, nc) + 1e-3
        base[name] = make(kb, xb)
        cand[name] = make(kc, xc)
        npx = max(1, nb // 2 + 3)
        prox[name] = make(KINDS[(i + 1) % len(KINDS)], weights(rng, npx, 0.03))
    # Shapes are not compared: 30x20 against 20x30 is element by element.
    x = weights(rng, 600)
    base["shape.30x20-20x30"] = make("f32", x.reshape(30, 20))
    cand["shape.30x20-20x30"] = make("f32", perturb(rng, x, 1e-2).reshape(20, 30))
    prox["shape.30x20-20x30"] = make("f64", weights(rng, 600).reshape(600))
    return dict(name="unequal sizes and mixed types", base=base, cand=cand,
                proxies=[("lowp", prox)], rounds=["f16"])  # alias of fp16


def study_special(rng):
    """Non-finite values, signed zeros, duplicates, degenerate layers, bit
    patterns across the whole range, big-endian storage, fixed-length
    attributes."""
    base, cand, prox = {}, {}, {}

    def add(name, b, c, p):
        base[name], cand[name], prox[name] = b, c, p

    for kind in KINDS:
        for n in (7, 4097):
            x = weights(rng, n)
            xb = sprinkle(rng, x)
            xc = sprinkle(rng, perturb(rng, x, 1e-2))
            # some positions hold the same non-finite kind on both sides
            same = rng.choice(n, max(1, n // 100), replace=False)
            xc[same] = xb[same]
            add("nf.%s.n%d" % (kind, n), make(kind, xb), make(kind, xc),
                make(kind, sprinkle(rng, weights(rng, n))))
    # NaN payloads and signalling NaNs in f32/f64 are NaN all the same.
    b = weights(rng, 100).astype(np.float32)
    b.view(np.uint32)[[3, 50, 97]] = [0x7F800001, 0xFFC00001, 0x7FBFFFFF]
    add("nf.payload.f32", b, weights(rng, 100).astype(np.float32),
        weights(rng, 100).astype(np.float32))
    b = weights(rng, 100)
    b.view(np.uint64)[[1, 2]] = [0x7FF0000000000001, 0xFFF8000000000123]
    add("nf.payload.f64", b, weights(rng, 100), weights(rng, 100))
    # Only non-finite values on one or both sides.
    add("nf.allnan.f32", np.full(100, np.nan, np.float32), np.full(100, np.nan, np.float32),
        weights(rng, 100).astype(np.float32))
    add("nf.allinf.bf16", make("bf16u", np.full(50, np.inf)),
        make("bf16u", weights(rng, 50)), make("bf16u", weights(rng, 50)))
    add("nf.onefinite.f64", np.array([np.nan, 0.5, np.inf]), np.array([np.nan, np.nan, -np.inf]),
        np.array([1.0, 2.0, 3.0]))
    # Signed zeros.
    z = np.where(rng.random(4097) < 0.5, -0.0, 0.0)
    z2 = np.where(rng.random(4097) < 0.5, -0.0, 0.0)
    for kind in KINDS:
        add("zero.%s.pm0" % kind, make(kind, z), make(kind, z2), make(kind, weights(rng, 4097)))
    add("zero.base.f32", np.zeros(100, np.float32), weights(rng, 100).astype(np.float32),
        weights(rng, 100).astype(np.float32))
    add("zero.cand.f64", weights(rng, 100), -np.zeros(100), weights(rng, 100))
    # Heavy duplicates, equal and unequal sizes.
    vals = np.array([-0.5, -0.25, 0.0, 0.25, 0.5, 1.0])
    for kind in KINDS:
        b = vals[rng.integers(0, 6, 65536)]
        c = vals[rng.integers(0, 5, 65536)]
        add("dup.%s.n65536" % kind, make(kind, b), make(kind, c),
            make(kind, vals[rng.integers(1, 6, 65536)]))
        add("dup.%s.unequal" % kind, make(kind, b[:4097]), make(kind, c),
            make(kind, vals[rng.integers(0, 3, 100)]))
    # Identical, and permuted (W1 = 0 with max|d| > 0).
    x = weights(rng, 4097).astype(np.float32)
    add("same.f32", x, x.copy(), x.copy())
    add("perm.f32", x, rng.permutation(x), weights(rng, 4097).astype(np.float32))
    xb = make("bf16u", weights(rng, 4097))
    add("perm.bf16", xb, Bf16(rng.permutation(xb.codes)), make("bf16u", weights(rng, 4097)))
    # Every bit pattern: random 16-bit codes, random f32 bits, wide f64.
    for kind, fmt in (("bf16u", "bf16"), ("bf16f", "bf16"), ("f16", "fp16")):
        def codes():
            return rng.integers(0, 65536, 65536).astype(np.uint16)
        if fmt == "fp16":
            add("bits.f16", codes().view(np.float16), codes().view(np.float16),
                codes().view(np.float16))
        else:
            form = "uint16" if kind == "bf16u" else "float"
            add("bits.%s" % kind, Bf16(codes(), form), Bf16(codes(), form), Bf16(codes(), form))

    def bits32(n):
        return rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)

    def wide64(n):
        # up to 2^500: wide, but sums of squares stay finite
        return np.ldexp(rng.uniform(-2, 2, n), rng.integers(-1070, 500, n))

    add("bits.f32", bits32(65536), bits32(4097), bits32(65536))
    add("bits.f64", wide64(65536), wide64(65536), wide64(100))
    add("tiny.f32", (weights(rng, 4097) * 1e-38).astype(np.float32),
        (weights(rng, 4097) * 1e-39).astype(np.float32),
        (weights(rng, 4097) * 1e-40).astype(np.float32))
    # Subnormal values among tiny normal ones; W1 itself stays normal (a
    # subnormal result has too few bits for a relative tolerance).
    tb = weights(rng, 4097) * 1e-300
    tb[::3] *= 1e-12
    add("tiny.f64", tb, weights(rng, 4097) * 1e-300, weights(rng, 4097) * 1e-299)
    add("large.f32", (1e30 + weights(rng, 4097) * 1e27).astype(np.float32),
        (1e30 + weights(rng, 4097) * 1e27).astype(np.float32),
        (1e30 + weights(rng, 4097) * 1e28).astype(np.float32))
    # Upcast bf16 except for the very last element: must still be exact.
    x = make("f32up", weights(rng, 4097))
    x[-1] = np.float32(0.1234567)
    add("almostup.f32", x, make("f32up", weights(rng, 4097)), make("f32up", weights(rng, 4097)))
    # Big-endian storage, fixed-length attribute, a scalar dataset.
    add("be.f32", weights(rng, 4097).astype(">f4"), weights(rng, 4097).astype(">f4"),
        weights(rng, 4097).astype(np.float32))
    add("be.f64", weights(rng, 4097).astype(">f8"), weights(rng, 100).astype(np.float32),
        weights(rng, 100).astype(">f8"))
    add("be.f16", weights(rng, 4097).astype(">f2"), weights(rng, 4097).astype(np.float16),
        weights(rng, 4097).astype(">f2"))
    cb = gen.f32_to_bf16(weights(rng, 4097).astype(np.float32))
    add("be.bf16", Bf16(cb, "uint16", int_dtype=">u2"), make("bf16f", weights(rng, 4097)),
        make("bf16u", weights(rng, 4097)))
    add("scalar.f32", np.float32(0.75), np.float32(-0.25), np.float32(0.5))
    add("scalar.f64", np.float64(0.75), np.array([0.5, 1.0]), np.float64(0.75))
    return dict(name="special values", base=base, cand=cand,
                proxies=[("fp16run", prox)], rounds=["bfloat16", "fp16"])


def study_fixed_attr(rng):
    """bf16 as uint16 whose attribute dtype is a fixed-length string (as
    h5py writes numpy bytes, NULLPAD, exactly 8 bytes) rather than a
    variable-length one. Its own study so that a failure here stops no
    other check."""
    def bf(n, attr):
        return Bf16(gen.f32_to_bf16(weights(rng, n).astype(np.float32)), "uint16", attr=attr)
    base = {"fixedattr.bf16": bf(4097, "fixed"), "vlenattr.bf16": bf(4097, "vlen")}
    cand = {"fixedattr.bf16": bf(4097, "fixed"), "vlenattr.bf16": bf(4097, "fixed")}
    prox = {"fixedattr.bf16": bf(100, "vlen"), "vlenattr.bf16": bf(100, "fixed")}
    return dict(name="fixed-length dtype attribute", base=base, cand=cand,
                proxies=[("seed", prox)], rounds=["fp16"])


# ---------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------

_w1_cache = {}


def ref_w1(u, v):
    """scipy's W1 of the finite values, or None where a side has none."""
    from scipy.stats import wasserstein_distance
    u = u[np.isfinite(u)]
    v = v[np.isfinite(v)]
    if u.size == 0 or v.size == 0:
        return None
    return float(wasserstein_distance(u, v))


def defined(x):
    """A reference number as JSON carries it: NaN and Inf are null."""
    return None if x is None or not math.isfinite(x) else x


def nonfinite(x):
    return {"nan": int(np.isnan(x).sum()), "posinf": int((x == np.inf).sum()),
            "neginf": int((x == -np.inf).sum())}


def pair_ref(a, b):
    if a.size != b.size:
        return None, None, None
    both = np.isfinite(a) & np.isfinite(b)
    d = np.abs(a[both] - b[both])
    same_nf = (np.isnan(a) & np.isnan(b)) | (a == b)
    n_diff = int((d != 0).sum() + (~both & ~same_nf).sum())
    if d.size == 0:
        return None, None, n_diff
    # ||d|| / ||a||, each scaled by a power of two (exact) so that its
    # largest element is near 1 before squaring: a plain sum of squares
    # underflows to 0 below about 1e-162 and overflows above 1e154.
    def scaled_norm(x):
        e = int(np.frexp(np.abs(x).max())[1])
        y = np.ldexp(x, -e)
        return math.sqrt(float(np.sum(y * y))), e

    av = a[both]
    if d.max() == 0:
        rel = 0.0
    elif np.abs(av).max() == 0:
        rel = None
    else:
        (nd, ed), (na, ea) = scaled_norm(d), scaled_norm(av)
        rel = defined(math.ldexp(nd / na, ed - ea))
    return float(d.max()), rel, n_diff


def stats_ref(x):
    f = x[np.isfinite(x)]
    nf = nonfinite(x)
    if f.size == 0:
        return dict(numel=x.size, n_finite=0, mean=None, std=None, min=None, max=None,
                    l2=0.0, _scale=0.0)
    return dict(numel=x.size, n_finite=int(f.size), mean=defined(float(f.mean())),
                std=defined(float(f.std())), min=float(f.min()), max=float(f.max()),
                l2=defined(float(math.sqrt(np.sum(f * f)))), _scale=float(np.abs(f).max()),
                _nf=nf)


def rounded(values, fmt):
    """The synthetic proxy round:FMT of a baseline with these float64 values."""
    if fmt == "bf16":
        return gen.bf16_to_f64(gen.round_to16(values, "bf16"))
    with np.errstate(all="ignore"):
        return values.astype(np.float16).astype(np.float64)


def ratio_ref(w1, pw1):
    if w1 is None or pw1 is None or pw1 == 0:
        return None
    return w1 / pw1


def median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    k = len(v)
    return v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2


def wmean(pairs):
    pairs = [(n, x) for n, x in pairs if x is not None]
    wsum = sum(n for n, _ in pairs)
    return sum(n * x for n, x in pairs) / wsum if wsum else None


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------

def close(got, want, rel=REL, abs0=ABS0):
    if want is None or got is None:
        return got is None and want is None
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return False
    if want == 0:
        return abs(got) <= abs0
    return abs(got - want) <= rel * abs(want)


class Mismatches:
    def __init__(self):
        self.lines = []

    def num(self, what, got, want, rel=REL, abs0=ABS0):
        if not close(got, want, rel, abs0):
            extra = ""
            if isinstance(got, float) and isinstance(want, float) and want:
                extra = " (rel err %.3g)" % (abs(got - want) / abs(want))
            self.lines.append("%s: got %r, want %r%s" % (what, got, want, extra))

    def eq(self, what, got, want):
        if got != want:
            self.lines.append("%s: got %r, want %r" % (what, got, want))

    def __bool__(self):
        return bool(self.lines)

    def text(self):
        return "\n".join(self.lines)


def check_stats(m, side, got, want):
    m.eq(side + " stats.numel", got.get("numel"), want["numel"])
    m.eq(side + " stats.n_finite", got.get("n_finite"), want["n_finite"])
    for k in ("min", "max"):
        m.eq(side + " stats." + k, got.get(k), want[k])
    scale = want["_scale"]
    for k in ("mean", "std"):
        g, w = got.get(k), want[k]
        if (g is None) != (w is None) or (w is not None and abs(g - w) > 1e-9 * scale):
            m.lines.append("%s stats.%s: got %r, want %r" % (side, k, g, w))
    m.num(side + " stats.l2", got.get("l2"), want["l2"])


def run_study(tap, wdrift, tmp, idx, st):
    t0 = time.time()
    files = {}
    files["base"] = gen.write_checkpoint(os.path.join(tmp, "s%d_base.h5" % idx), st["base"])
    files["cand"] = gen.write_checkpoint(os.path.join(tmp, "s%d_cand.h5" % idx), st["cand"])
    cmd = [wdrift, "compare", files["base"], files["cand"]]
    for label, tensors in st["proxies"]:
        p = gen.write_checkpoint(os.path.join(tmp, "s%d_%s.h5" % (idx, label)), tensors)
        cmd += ["--proxy", "%s=%s" % (label, p)]
    for r in st["rounds"]:
        cmd += ["--round-proxy", r]
    cmd.append("--json")
    t_write = time.time() - t0
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    t_run = time.time() - t0
    what = "%s: wdrift compare exits 0 with JSON (%d tensors)" % (st["name"], len(st["base"]))
    try:
        out = json.loads(proc.stdout) if proc.returncode == 0 else None
    except ValueError as e:
        out = None
        proc.stderr += "\nJSON: %s" % e
    if not tap.ok(out is not None, what,
                  "command: %s\nexit %d\nstderr: %s\nstdout: %s" % (
                      " ".join(cmd), proc.returncode, proc.stderr[-2000:], proc.stdout[:500])):
        return
    round_labels = [("round:" + ("bf16" if r in ("bf16", "bfloat16") else "fp16"),
                     "bf16" if r in ("bf16", "bfloat16") else "fp16") for r in st["rounds"]]
    labels = [lab for lab, _ in st["proxies"]] + [lab for lab, _ in round_labels]

    for name, t in st["base"].items():
        if isinstance(t, Bf16) and t.form == "float":
            bad = gen.verify_bf16_file(files["base"], name)
            tap.ok(bad is None, "%s: h5ls/h5dump see '%s' as a 16-bit float, 8-bit exponent "
                   "(bias 127), 7-bit mantissa" % (st["name"], name), bad)
            break

    layers = {l["name"]: l for l in out.get("layers", [])}
    tap.ok(sorted(layers) == sorted(st["base"]) and len(out["layers"]) == len(st["base"])
           and out.get("unmatched") == [],
           "%s: one layer per tensor, none unmatched" % st["name"],
           "got %s, unmatched %r" % (sorted(layers), out.get("unmatched")))
    tap.ok(sorted(out.get("proxies", {})) == sorted(labels),
           "%s: proxies listed: %s" % (st["name"], ", ".join(labels)),
           "got %r" % out.get("proxies"))

    t0 = time.time()
    summ_rows = []
    for name in sorted(st["base"]):
        b_t, c_t = st["base"][name], st["cand"][name]
        b, c = gen.values_f64(b_t), gen.values_f64(c_t)
        got = layers.get(name)
        m = Mismatches()
        if got is None:
            tap.ok(False, "%s: layer %s present" % (st["name"], name))
            continue
        w1 = ref_w1(b, c)
        m.num("w1", got.get("w1"), w1)
        m.eq("numel", got.get("numel"), b.size)
        m.eq("numel_candidate", got.get("numel_candidate"), c.size)
        m.eq("dtype", got.get("dtype"), gen.dtype_name(b_t))
        m.eq("dtype_candidate", got.get("dtype_candidate"), gen.dtype_name(c_t))
        m.eq("nonfinite.baseline", got.get("nonfinite", {}).get("baseline"), nonfinite(b))
        m.eq("nonfinite.candidate", got.get("nonfinite", {}).get("candidate"), nonfinite(c))
        mad, rel, ndiff = pair_ref(b, c)
        m.eq("max_abs_diff", got.get("max_abs_diff"), mad)
        m.num("rel_l2", got.get("rel_l2"), rel)
        m.eq("n_diff", got.get("n_diff"), ndiff)
        check_stats(m, "baseline", got.get("stats", {}).get("baseline", {}), stats_ref(b))
        check_stats(m, "candidate", got.get("stats", {}).get("candidate", {}), stats_ref(c))
        pw = {}
        for label, tensors in st["proxies"]:
            pw[label] = ref_w1(b, gen.values_f64(tensors[name]))
        for label, fmt in round_labels:
            pw[label] = ref_w1(b, rounded(b, fmt))
        gp = got.get("proxies", {})
        m.eq("proxy labels", sorted(gp), sorted(labels))
        for label in labels:
            g = gp.get(label, {})
            m.num("proxies[%s].w1" % label, g.get("w1"), pw[label])
            m.num("proxies[%s].ratio" % label, g.get("ratio"), ratio_ref(w1, pw[label]), rel=2 * REL)
        summ_rows.append(dict(numel=b.size, w1=w1, mad=mad, nfb=nonfinite(b), nfc=nonfinite(c),
                              pw=pw, ratio={k: ratio_ref(w1, v) for k, v in pw.items()}))
        tap.ok(not m, "%s: %s (%s %d vs %s %d): w1 %s, pair stats, counts, %d proxies" % (
            st["name"], name, gen.dtype_name(b_t), b.size, gen.dtype_name(c_t), c.size,
            "%.6g" % w1 if w1 is not None else "null", len(labels)), m.text())

    # The summary.
    s = out.get("summary", {})
    m = Mismatches()
    m.eq("summary.tensors", s.get("tensors"), len(summ_rows))
    m.eq("summary.numel", s.get("numel"), sum(r["numel"] for r in summ_rows))
    m.num("summary.w1_weighted", s.get("w1_weighted"),
          wmean([(r["numel"], r["w1"]) for r in summ_rows]))
    m.num("summary.w1_median", s.get("w1_median"), median([r["w1"] for r in summ_rows]))
    m.num("summary.w1_max", s.get("w1_max"),
          max((r["w1"] for r in summ_rows if r["w1"] is not None), default=None))
    m.eq("summary.max_abs_diff", s.get("max_abs_diff"),
         max((r["mad"] for r in summ_rows if r["mad"] is not None), default=None))
    for side, key in (("baseline", "nfb"), ("candidate", "nfc")):
        tot = {k: sum(r[key][k] for r in summ_rows) for k in ("nan", "posinf", "neginf")}
        m.eq("summary.nonfinite." + side, s.get("nonfinite", {}).get(side), tot)
    sp = s.get("proxies", {})
    m.eq("summary proxy labels", sorted(sp), sorted(labels))
    for label in labels:
        g = sp.get(label, {})
        ratios = [r["ratio"][label] for r in summ_rows]
        m.num("summary.proxies[%s].w1_weighted" % label, g.get("w1_weighted"),
              wmean([(r["numel"], r["pw"][label]) for r in summ_rows]))
        m.num("summary.proxies[%s].ratio_median" % label, g.get("ratio_median"),
              median(ratios), rel=2 * REL)
        m.num("summary.proxies[%s].ratio_max" % label, g.get("ratio_max"),
              max((x for x in ratios if x is not None), default=None), rel=2 * REL)
        m.num("summary.proxies[%s].ratio_weighted" % label, g.get("ratio_weighted"),
              wmean([(r["numel"], x) for r, x in zip(summ_rows, ratios)]), rel=2 * REL)
    tap.ok(not m, "%s: summary (weighted/median/max w1, max|d|, nonfinite, proxies)"
           % st["name"], m.text())
    tap.diag("%s: write %.1f s, wdrift %.2f s, references %.1f s" % (
        st["name"], t_write, t_run, time.time() - t0))


def main():
    np.seterr(over="ignore", invalid="ignore")  # Inf/NaN data is on purpose
    tap = gen.Tap()
    try:
        for mod in ("scipy.stats", "h5py"):
            importlib.import_module(mod)
    except ImportError as e:
        return tap.skip_all("needs scipy and h5py: %s" % e)
    wdrift = os.environ.get("WDRIFT", "build/wdrift")
    if not os.access(wdrift, os.X_OK):
        tap.ok(False, "%s is built (make CUDA=0 build/wdrift)" % wdrift)
        return tap.done()
    seed = int(os.environ.get("WDRIFT_SEED", "10"))
    tap.diag("wdrift %s, seed %d" % (wdrift, seed))
    t_all = time.time()
    with tempfile.TemporaryDirectory(prefix="wdrift-t10-") as tmp:
        for i, make_study in enumerate((study_equal, study_unequal, study_special,
                                        study_fixed_attr)):
            rng = np.random.default_rng([seed, i])
            run_study(tap, wdrift, tmp, i, make_study(rng))
    tap.diag("%.1f s in all" % (time.time() - t_all))
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
