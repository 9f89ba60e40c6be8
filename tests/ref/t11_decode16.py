"""t11_decode16.py: libwdrift's 16-bit decoding and rounding against numpy.

  - wd_decode16(dtype, code) for all 65536 codes of fp16 and of bf16, NaN
    codes included, against numpy (float16 view; (code << 16) as float32);
  - wd_round16(src, to, dst) from f32, f64, f16 and bf16 sources to fp16 and
    bf16, against numpy astype(float16) for fp16 and an independent
    round-to-nearest-even (gen.round_to16, a nearest-value search) for bf16,
    on random values and on edge cases: exact ties, near ties (the double
    rounding trap of f64 -> f32 -> bf16), overflow to Inf, subnormals, NaN
    with odd payloads, signed zeros;
  - wd_round16's argument checks.

Run from the repository root; BUILD (default build) locates libwdrift.so.
"""
import ctypes
import os
import sys
import time

sys.dont_write_bytecode = True  # keep tests/ref free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402

import numpy as np  # noqa: E402

WD_F32, WD_F64, WD_F16, WD_BF16 = 0, 1, 2, 3
EINVAL = 22
NAMES = {WD_F32: "f32", WD_F64: "f64", WD_F16: "f16", WD_BF16: "bf16"}


class WdView(ctypes.Structure):
    # struct wd_view { enum wd_dtype dtype; const void *data; uint64_t numel; }
    _fields_ = [("dtype", ctypes.c_int), ("data", ctypes.c_void_p),
                ("numel", ctypes.c_uint64)]


def load_lib(tap):
    build = os.environ.get("BUILD", "build")
    path = os.path.abspath(os.path.join(build, "libwdrift.so"))
    if not os.path.exists(path):
        return None, path
    lib = ctypes.CDLL(path)
    lib.wd_decode16.argtypes = [ctypes.c_int, ctypes.c_uint16]
    lib.wd_decode16.restype = ctypes.c_double
    lib.wd_round16.argtypes = [ctypes.POINTER(WdView), ctypes.c_int, ctypes.c_void_p]
    lib.wd_round16.restype = ctypes.c_int
    return lib, path


def same_f64(a, b):
    """Element-wise: equal bits, or both NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def show_codes(idx, codes, got, want, n=8):
    lines = []
    for i in idx[:n]:
        lines.append("code 0x%04x: got %r, want %r" % (codes[i], got[i], want[i]))
    return "\n".join(lines) + ("\n... %d in all" % len(idx) if len(idx) > n else "")


def check_decode(tap, lib):
    codes = np.arange(65536, dtype=np.uint32)
    f = lib.wd_decode16
    for dt, name, want in (
            (WD_F16, "fp16", codes.astype(np.uint16).view(np.float16).astype(np.float64)),
            (WD_BF16, "bf16", (codes << 16).view(np.float32).astype(np.float64))):
        got = np.fromiter((f(dt, int(c)) for c in codes), dtype=np.float64, count=65536)
        bad = np.flatnonzero(~same_f64(got, want))
        tap.ok(len(bad) == 0, "wd_decode16(%s, c) equals numpy for all 65536 codes "
               "(NaN codes, +-0, subnormals, Inf included)" % name,
               show_codes(bad, codes, got, want))
        nan_codes = np.flatnonzero(np.isnan(want))
        tap.ok(np.all(np.isnan(got[nan_codes])) and
               len(nan_codes) == (2046 if dt == WD_F16 else 254),
               "wd_decode16(%s): all %d NaN codes decode to NaN" % (name, len(nan_codes)))
    got = [f(WD_F32, 0x3C00), f(WD_F64, 0x3C00), f(7, 0x3C00)]
    tap.ok(all(np.isnan(g) for g in got),
           "wd_decode16 of a dtype other than f16/bf16 is NaN", "got %r" % got)


def round16(lib, src, dt, to):
    """Calls wd_round16 on a contiguous numpy array (codes for 16-bit dt)."""
    src = np.ascontiguousarray(src)
    dst = np.full(src.size + 1, 0xA5A5, dtype=np.uint16)  # one guard element
    v = WdView(dt, src.ctypes.data, src.size)
    r = lib.wd_round16(ctypes.byref(v), to, dst.ctypes.data)
    return r, dst[:-1], dst[-1]


def reference16(values_f64, to, src_dtype):
    """Expected codes: numpy astype(float16) for fp16 (from the source's own
    float type, which numpy rounds correctly), gen.round_to16 for bf16."""
    if to == WD_F16:
        with np.errstate(all="ignore"):
            src = values_f64.astype(np.float32) if src_dtype == WD_F32 else values_f64
            return src.astype(np.float16).view(np.uint16)
    return gen.round_to16(values_f64, "bf16")


def compare_codes(tap, what, fmt, x, got, want):
    nan_got = gen.is_nan16(fmt, got)
    nan_want = gen.is_nan16(fmt, want)
    bad = np.flatnonzero(((got != want) & ~(nan_got & nan_want)) | (nan_got != nan_want))
    diag = "\n".join("x=%r (bits %s): got 0x%04x, want 0x%04x" % (
        x[i], hex(np.asarray(x[i]).view(np.uint64 if np.asarray(x[i]).dtype == np.float64
                                         else np.uint32)), got[i], want[i])
        for i in bad[:8])
    if len(bad) > 8:
        diag += "\n... %d mismatches in all" % len(bad)
    return tap.ok(len(bad) == 0, what, diag)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def f32_edges():
    """Bit patterns around every bf16 rounding boundary and the fp16 ones."""
    hi = np.arange(65536, dtype=np.uint32) << 16
    parts = [hi | low for low in (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF)]
    # fp16 boundaries: f32 with exponents in and around fp16's range; the low
    # 13 bits decide normal fp16 rounding, more bits for subnormals.
    e = np.arange(127 - 30, 127 + 18, dtype=np.uint32)
    m = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FF000,
                  0x7FE000, 0x7FF001, 0x7FEFFF, 0x400000, 0x200000, 0x600000,
                  0x7FFFFF], dtype=np.uint32)
    em = ((e[:, None] << 23) | m[None, :]).ravel()
    parts += [em, em | 0x80000000]
    specials = np.array([
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-Inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,  # NaNs, incl. signalling
        0x7F80FFFF, 0x7FFFFFFF, 0x7F810000, 0xFFFF0000,  # NaN payloads in each half
        0x00000001, 0x80000001, 0x007FFFFF, 0x00008000,  # f32 subnormals, bf16 ties
        0x00018000, 0x00010000, 0x7F7F0000, 0x7F7F7FFF,  # bf16 max and below a tie
        0x7F7F8000, 0x7F7FFFFF, 0x7F7F8001, 0xFF7F8000,  # overflow ties -> Inf
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x47800000,  # 65504, 65520, 65536
        0x33000000, 0x33000001, 0x33400000, 0x33C00000,  # 2^-25 (tie to 0), 1.5*2^-24
        0x387FC000, 0x387FE000, 0x38800000,              # around fp16 min normal
    ], dtype=np.uint32)
    return np.concatenate(parts + [specials]).view(np.float32)


def f64_edges():
    """Doubles at and next to bf16/fp16 ties: x = tie * (1 +- 2^-k) catches
    rounding through float32 (double rounding)."""
    bf = gen.bf16_to_f64(np.arange(0x0000, 0x7F80, 7, dtype=np.uint16))
    nxt = gen.bf16_to_f64(np.arange(0x0000, 0x7F80, 7, dtype=np.uint16) + 1)
    tie_bf = (bf + nxt) / 2                                   # exact in double
    h = np.arange(0, 0x7C00, 3, dtype=np.uint16)
    f16 = gen.f16_to_f64(h)
    f16n = gen.f16_to_f64(h + 1)
    tie_f16 = (f16 + f16n) / 2
    ties = np.concatenate([tie_bf, tie_f16])
    parts = [ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)]
    for k in (30, 40, 50):
        parts += [ties * (1 + 2.0 ** -k), ties * (1 - 2.0 ** -k)]
    specials = np.array([
        0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan,
        3.3895313892515355e38, 3.3961775292304043e38, 3.3961775292304044e38,
        3.4028234663852886e38, 3.5e38, 1e39, 1e300, 1.7976931348623157e308,
        65504.0, 65519.99999, 65520.0, 65536.0, 1e5,
        2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -40), 3 * 2.0 ** -25,
        2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 2.0 ** -133, 2.0 ** -134,
        2.0 ** -134 * (1 + 2.0 ** -45), 3 * 2.0 ** -134, 2.0 ** -126, 1e-300, 5e-324,
        -5e-324, -1e-300, 1.0, -1.0, 1.00390625, 1.01171875, 1.0 + 2.0 ** -9,
    ])
    nan_payloads = np.array([0x7FF0000000000001, 0xFFF0000000000001,
                             0x7FF8000000000000, 0x7FF0000100000000],
                            dtype=np.uint64).view(np.float64)
    x = np.concatenate(parts + [specials, -specials, nan_payloads])
    return x


def random_f32(rng, n):
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(n) * np.exp(rng.uniform(-25, 15, n))).astype(np.float32)
    return np.concatenate([bits, scaled])


def random_f64(rng, n):
    mant = rng.uniform(-2, 2, n)
    x = np.ldexp(mant, rng.integers(-160, 140, n))
    bits = rng.integers(0, 2 ** 63, n, dtype=np.uint64).view(np.float64)
    return np.concatenate([x, bits, rng.standard_normal(n)])


def main():
    np.seterr(all="ignore")  # NaN casts and overflow are what is tested here
    tap = gen.Tap()
    lib, path = load_lib(tap)
    if lib is None:
        tap.ok(False, "%s exists (build it: make CUDA=0 %s)" % (path, os.path.relpath(path)))
        return tap.done()
    t0 = time.time()
    seed = int(os.environ.get("WDRIFT_SEED", "11"))
    rng = np.random.default_rng(seed)
    tap.diag("library %s, seed %d" % (path, seed))

    check_decode(tap, lib)

    # The reference against itself: the nearest-value search equals numpy's
    # fp16 rounding and the bit-level f32 -> bf16 rounding.
    x32 = np.concatenate([f32_edges(), random_f32(rng, 200000)])
    x64 = np.concatenate([f64_edges(), random_f64(rng, 200000)])
    with np.errstate(all="ignore"):
        compare_codes(tap, "reference: nearest-value search == numpy fp16 (f32 inputs)",
                      "fp16", x32, gen.round_to16(x32, "fp16"),
                      x32.astype(np.float16).view(np.uint16))
        compare_codes(tap, "reference: nearest-value search == numpy fp16 (f64 inputs)",
                      "fp16", x64, gen.round_to16(x64, "fp16"),
                      x64.astype(np.float16).view(np.uint16))
    compare_codes(tap, "reference: nearest-value search == bit RNE for f32 -> bf16",
                  "bf16", x32, gen.round_to16(x32, "bf16"), gen.f32_to_bf16(x32))

    for dt, x in ((WD_F32, x32), (WD_F64, x64)):
        for to, fmt in ((WD_F16, "fp16"), (WD_BF16, "bf16")):
            r, got, guard = round16(lib, x, dt, to)
            tap.ok(r == 0, "wd_round16(%s -> %s) returns 0" % (NAMES[dt], fmt), "got %d" % r)
            tap.ok(guard == 0xA5A5, "wd_round16(%s -> %s) writes numel codes, no more"
                   % (NAMES[dt], fmt))
            with np.errstate(all="ignore"):
                want = reference16(x.astype(np.float64), to, dt)
            compare_codes(tap, "wd_round16(%s -> %s): %d values (edges + random) == %s"
                          % (NAMES[dt], fmt, x.size,
                             "numpy astype(float16)" if to == WD_F16 else "reference RNE"),
                          fmt, x, got, want)
            # Just the edge cases, by class, so a failure says where.
            edges = f32_edges() if dt == WD_F32 else f64_edges()
            _, g, _ = round16(lib, edges, dt, to)
            with np.errstate(all="ignore"):
                w = reference16(edges.astype(np.float64), to, dt)
            nan_in = np.isnan(edges)
            compare_codes(tap, "wd_round16(%s -> %s): NaN stays NaN (payloads, signalling)"
                          % (NAMES[dt], fmt), fmt, edges[nan_in], g[nan_in], w[nan_in])
            big = np.abs(edges.astype(np.float64)) >= (65504.0 if to == WD_F16 else 3.38e38)
            compare_codes(tap, "wd_round16(%s -> %s): overflow rounds to Inf at the tie"
                          % (NAMES[dt], fmt), fmt, edges[big & ~nan_in], g[big & ~nan_in],
                          w[big & ~nan_in])
            tiny = np.abs(edges.astype(np.float64)) < (2.0 ** -14 if to == WD_F16
                                                         else 2.0 ** -126)
            compare_codes(tap, "wd_round16(%s -> %s): subnormals and zeros (signed)"
                          % (NAMES[dt], fmt), fmt, edges[tiny], g[tiny], w[tiny])

    # 16-bit sources: identity to the same format, cross to the other one.
    all_codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for dt, fmt_src in ((WD_F16, "fp16"), (WD_BF16, "bf16")):
        vals = gen.decode16(fmt_src, all_codes)
        for to, fmt in ((WD_F16, "fp16"), (WD_BF16, "bf16")):
            r, got, guard = round16(lib, all_codes, dt, to)
            if to == dt:
                want = all_codes
            elif to == WD_F16:
                with np.errstate(all="ignore"):
                    want = vals.astype(np.float16).view(np.uint16)
            else:
                want = gen.round_to16(vals, "bf16")
            ok = r == 0 and guard == 0xA5A5
            compare_codes(tap, "wd_round16(%s -> %s) on all 65536 codes%s"
                          % (NAMES[dt], fmt, " (identity)" if to == dt else ""),
                          fmt, vals, got, want) if ok else \
                tap.ok(False, "wd_round16(%s -> %s) returns 0" % (NAMES[dt], fmt),
                       "rc %d guard 0x%04x" % (r, guard))

    # Argument checks.
    x = np.ones(4, dtype=np.float32)
    dst = np.zeros(4, dtype=np.uint16)
    v = WdView(WD_F32, x.ctypes.data, 4)
    for to in (WD_F32, WD_F64, 9):
        r = lib.wd_round16(ctypes.byref(v), to, dst.ctypes.data)
        tap.ok(r == -EINVAL, "wd_round16 to %s is -EINVAL" % NAMES.get(to, str(to)),
               "got %d" % r)
    v = WdView(WD_F32, None, 4)
    r = lib.wd_round16(ctypes.byref(v), WD_BF16, dst.ctypes.data)
    tap.ok(r == -EINVAL, "wd_round16 with NULL data and numel 4 is -EINVAL", "got %d" % r)
    v = WdView(WD_F64, None, 0)
    r = lib.wd_round16(ctypes.byref(v), WD_F16, dst.ctypes.data)
    tap.ok(r == 0, "wd_round16 of 0 elements is 0", "got %d" % r)

    tap.diag("%.1f s" % (time.time() - t0))
    return tap.done()


if __name__ == "__main__":
    sys.exit(main())
