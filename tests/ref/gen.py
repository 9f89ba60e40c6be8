"""gen.py: helpers for the wdrift tests that are written in Python.

Not a test itself (run.sh runs tests/ref/t*.py only). Import it with

    sys.path.insert(0, os.path.join(REPO, "tests", "ref"))
    import gen

What is here:
  - checkpoint writers: f32/f64/f16 datasets as numpy writes them; bf16 as a
    uint16 dataset with the attribute dtype = "bfloat16" (variable or fixed
    length string); bf16 as a true 16-bit HDF5 float (sign bit 15, exponent
    8 bits at bit 7 with bias 127, mantissa 7 bits at bit 0);
  - 16-bit conversions: float32 -> bf16 codes (round to nearest even, on the
    bits), any float64 -> bf16/fp16 codes by an independent nearest-value
    search over the format's representable values, and decoding of codes to
    float64;
  - Tap: "ok N - what" / "not ok N - what" lines with a plan and a summary.

Everything needs numpy and h5py only (Debian's python3-numpy/python3-h5py).
"""
import os
import subprocess
import sys

import numpy as np

try:
    import h5py
except ImportError:  # the caller decides whether to skip
    h5py = None

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

BF16_ATTR = "bfloat16"

# --------------------------------------------------------------------------
# 16-bit formats
# --------------------------------------------------------------------------

# Largest finite positive code and the +Inf code. In both formats the positive
# finite codes 0 .. MAXFIN are in ascending value order and +Inf = MAXFIN + 1.
_FORMATS = {
    "bf16": {"maxfin": 0x7F7F, "inf": 0x7F80, "ebits": 8, "mbits": 7},
    "fp16": {"maxfin": 0x7BFF, "inf": 0x7C00, "ebits": 5, "mbits": 10},
}
_FMT_ALIASES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "f16": "fp16",
                "float16": "fp16"}


def _fmt(name):
    return _FMT_ALIASES[name]


def f32_to_bf16(x):
    """float32 array -> bf16 codes (uint16), round to nearest even on the bits.

    NaN stays a NaN (quiet bit set, sign kept); overflow rounds to +-Inf."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = ((u & 0x7F800000) == 0x7F800000) & ((u & 0x7FFFFF) != 0)
    nan_codes = ((u >> 16) | 0x40).astype(np.uint16)
    return np.where(nan, nan_codes, rounded).astype(np.uint16)


def bf16_to_f32(codes):
    """bf16 codes -> float32 (exact)."""
    c = np.ascontiguousarray(codes, dtype=np.uint16)
    return (c.astype(np.uint32) << 16).view(np.float32)


def bf16_to_f64(codes):
    """bf16 codes -> float64 (exact; NaN payloads need not survive)."""
    with np.errstate(invalid="ignore"):
        return bf16_to_f32(codes).astype(np.float64)


def f16_to_f64(codes):
    """fp16 codes -> float64 (exact)."""
    with np.errstate(invalid="ignore"):
        return np.ascontiguousarray(codes, dtype=np.uint16).view(np.float16).astype(np.float64)


def decode16(fmt, codes):
    """Codes of bf16 or fp16 -> float64."""
    return bf16_to_f64(codes) if _fmt(fmt) == "bf16" else f16_to_f64(codes)


def _positive_values(fmt):
    """float64 values of the codes 0 .. inf, with +Inf replaced by the next
    power of two above the largest finite value (the overflow point's upper
    neighbour, an even code, so that ties there round to Inf)."""
    f = _FORMATS[_fmt(fmt)]
    codes = np.arange(f["maxfin"] + 1, dtype=np.uint16)
    vals = decode16(fmt, codes)
    emax = (1 << (f["ebits"] - 1)) - 1
    return np.append(vals, np.ldexp(1.0, emax + 1))


def round_to16(x, fmt):
    """Any float array (converted to float64 exactly) -> codes of bf16 or fp16,
    round to nearest, ties to the even code, overflow to +-Inf, sign of zero
    kept, NaN to a NaN code.

    Done by a nearest-value search over the format's sorted values, not by bit
    tricks, so that it is independent of the code it checks. The differences
    it compares are exact (Sterbenz) except next to zero, where the
    comparison still comes out right."""
    fmt = _fmt(fmt)
    f = _FORMATS[fmt]
    with np.errstate(invalid="ignore"):
        x = np.asarray(x).astype(np.float64).ravel()
    vals = _positive_values(fmt)
    a = np.abs(x)
    finite = np.isfinite(a)
    aa = np.where(finite, a, 0.0)
    hi = np.searchsorted(vals, aa, side="left")
    beyond = hi >= len(vals)
    hi_c = np.minimum(hi, len(vals) - 1)
    lo_c = np.maximum(hi_c - 1, 0)
    exact = vals[hi_c] == aa
    dlo = aa - vals[lo_c]
    dhi = vals[hi_c] - aa
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi_c % 2 == 0))
    code = np.where(exact, hi_c, np.where(pick_hi, hi_c, lo_c)).astype(np.uint32)
    code = np.where(beyond, f["inf"], code)
    code = np.where(np.isinf(a), f["inf"], code)
    code = np.where(np.isnan(a), f["inf"] | (1 << (f["mbits"] - 1)), code)
    code = code | np.where(np.signbit(x), 0x8000, 0)
    return code.astype(np.uint16)


def is_nan16(fmt, codes):
    f = _FORMATS[_fmt(fmt)]
    c = np.asarray(codes, dtype=np.uint32)
    return ((c & 0x7FFF) > f["inf"])


# --------------------------------------------------------------------------
# Tensors and checkpoint files
# --------------------------------------------------------------------------

class Bf16:
    """A bf16 tensor, given by its codes, stored as form="uint16" (a uint16
    dataset with the attribute dtype="bfloat16"; attr="vlen" or "fixed" picks
    the string kind) or form="float" (a 16-bit HDF5 float type)."""

    def __init__(self, codes, form="uint16", attr="vlen", int_dtype=np.uint16):
        self.codes = np.ascontiguousarray(codes, dtype=np.uint16)
        self.form = form
        self.attr = attr
        self.int_dtype = int_dtype

    @property
    def size(self):
        return self.codes.size

    @property
    def dtype_name(self):
        return "bf16"


def bf16_h5type():
    """The 16-bit HDF5 float type of bf16: IEEE_F32LE with its fields moved
    (sign 15, exponent at 7 for 8 bits, mantissa at 0 for 7 bits), then cut to
    2 bytes. The fields must fit the new size before set_size shrinks it."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_size(2)
    t.set_ebias(127)
    assert t.get_size() == 2 and t.get_fields() == (15, 7, 8, 0, 7) \
        and t.get_ebias() == 127, "HDF5 did not take the bf16 layout"
    return t


def write_bf16_float(group, name, codes, shape=None):
    """A dataset of the 16-bit bf16 float type holding these codes (written
    with the file type as the memory type: the bits go in unconverted)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint16)
    if shape is not None:
        codes = codes.reshape(shape)
    t = bf16_h5type()
    space = h5py.h5s.create_simple(codes.shape if codes.ndim else (1,))
    # Intermediate groups, as h5py's high-level API would make them.
    parent = group
    parts = name.strip("/").split("/")
    for p in parts[:-1]:
        parent = parent.require_group(p)
    ds = h5py.h5d.create(parent.id, parts[-1].encode(), t, space)
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, codes.reshape(space.shape), mtype=t)
    ds.close()


def write_bf16_uint16(group, name, codes, attr="vlen", int_dtype=np.uint16):
    """A uint16 (or int_dtype) dataset with the attribute dtype="bfloat16"."""
    codes = np.ascontiguousarray(codes, dtype=np.uint16)
    want = np.dtype(int_dtype)
    native = want.newbyteorder("=")
    # Keep the 16 bits (a view for 2-byte types, so int16 holds the same
    # bits), then store in the requested byte order by value.
    data = codes.view(native) if native.itemsize == 2 else codes.astype(native)
    ds = group.create_dataset(name, data=data.astype(want))
    if attr == "fixed":
        ds.attrs["dtype"] = np.bytes_(BF16_ATTR)
    else:
        ds.attrs["dtype"] = BF16_ATTR


def write_checkpoint(path, tensors, chunks=None):
    """Writes one HDF5 file: tensors maps name -> numpy array (written in its
    own dtype, so also int32, strings, big-endian floats ...) or Bf16. Names
    may contain '/' (groups). chunks=None writes contiguous datasets."""
    with h5py.File(path, "w") as f:
        for name, t in tensors.items():
            if isinstance(t, Bf16):
                if t.form == "float":
                    write_bf16_float(f, name, t.codes)
                else:
                    write_bf16_uint16(f, name, t.codes, t.attr, t.int_dtype)
            else:
                f.create_dataset(name, data=t, chunks=chunks)
    return path


def values_f64(t):
    """Every element of a tensor (numpy array or Bf16) as float64, flat."""
    if isinstance(t, Bf16):
        return bf16_to_f64(t.codes).ravel()
    return np.asarray(t).astype(np.float64).ravel()


def dtype_name(t):
    """The wdrift name of a tensor's element type."""
    if isinstance(t, Bf16):
        return "bf16"
    return {np.dtype("float32"): "f32", np.dtype("float64"): "f64",
            np.dtype("float16"): "f16"}[np.asarray(t).dtype.newbyteorder("=")]


def codes16(t):
    """(fmt, codes) of a 16-bit tensor, fp32 upcast bf16 included; else None."""
    if isinstance(t, Bf16):
        return "bf16", t.codes.ravel()
    a = np.asarray(t)
    if a.dtype.newbyteorder("=") == np.float16:
        return "fp16", a.astype(np.float16).view(np.uint16).ravel()
    return None


def verify_bf16_file(path, dataset):
    """Asks h5ls -v and h5dump (hdf5-tools) how they see a dataset written by
    write_bf16_float. Returns None when it is a 16-bit float with bf16 fields,
    else a description of what is wrong."""
    try:
        ls = subprocess.run(["h5ls", "-v", "%s/%s" % (path, dataset)],
                            capture_output=True, text=True, check=False).stdout
        dump = subprocess.run(["h5dump", "-H", "-d", "/" + dataset, path],
                              capture_output=True, text=True, check=False).stdout
    except FileNotFoundError as e:
        return "hdf5-tools missing: %s" % e
    want_ls = ["16-bit little-endian floating-point",
               "significant for 7 bits at bit 0", "exponent for 8 bits at bit 7",
               "bias is 0x7f", "sign bit at 15"]
    missing = [w for w in want_ls if w not in ls]
    if "16-bit little-endian floating-point" not in dump:
        missing.append("h5dump: 16-bit float")
    return ("missing %s in:\n%s%s" % (missing, ls, dump)) if missing else None


# --------------------------------------------------------------------------
# TAP
# --------------------------------------------------------------------------

class Tap:
    """Minimal TAP producer: ok()/fail() print one line each, done() prints
    the plan and a summary and returns the exit status (1 on any failure)."""

    def __init__(self, out=None):
        self.n = 0
        self.failed = 0
        self.out = out or sys.stdout

    def _say(self, s):
        self.out.write(s + "\n")
        self.out.flush()

    def ok(self, cond, what, diag=None):
        self.n += 1
        if cond:
            self._say("ok %d - %s" % (self.n, what))
        else:
            self.failed += 1
            self._say("not ok %d - %s" % (self.n, what))
            if diag:
                for line in str(diag).splitlines():
                    self._say("#   " + line)
        return bool(cond)

    def diag(self, msg):
        for line in str(msg).splitlines():
            self._say("# " + line)

    def skip_all(self, why):
        self._say("1..0 # SKIP " + why)
        return 77

    def done(self):
        self._say("1..%d" % self.n)
        self._say("# %d passed, %d failed" % (self.n - self.failed, self.failed))
        return 1 if self.failed else 0
