"""wdrift: publish weight snapshots of a training run to wdriftd.

Pure Python, ctypes over libwdrift.so (docs/protocol.md for the wire side):

    import wdrift
    pub = wdrift.Publisher("ipc://./run/ingest.sock", run="llama-fa")
    for step in range(steps):
        ...train...
        if step % 100 == 0:
            pub.publish(step, model.state_dict())   # one copy into a queue
    pub.close()

Tensors are numpy arrays or torch tensors (any device) of float32, float64,
float16 or bfloat16; bfloat16 goes as its raw bits, with no conversion. A
background thread sends snapshots and waits for each one's durable ack;
when the daemon is slow or away, whole snapshots are dropped by policy
and counted in stats().
"""
import ctypes
import ctypes.util
import os

import numpy as np

__all__ = ["Publisher", "BF16", "attach", "WdriftError"]

_DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3}
_POLICIES = {"drop_oldest": 0, "drop_newest": 1, "block": 2}


class WdriftError(RuntimeError):
    pass


class _Opts(ctypes.Structure):
    _fields_ = [("queue_bytes", ctypes.c_uint64), ("policy", ctypes.c_int),
                ("ack_timeout_ms", ctypes.c_int)]


class _Stats(ctypes.Structure):
    _fields_ = [("committed", ctypes.c_uint64), ("acked", ctypes.c_uint64),
                ("dropped", ctypes.c_uint64), ("resent", ctypes.c_uint64),
                ("queued", ctypes.c_uint64), ("queued_bytes", ctypes.c_uint64),
                ("connected", ctypes.c_int)]


def _load():
    """libwdrift.so: $WDRIFT_LIB, the source tree's build/, or the system's."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.environ.get("WDRIFT_LIB"),
                 os.path.join(here, "..", "..", "build", "libwdrift.so"),
                 os.path.join(here, "..", "..", "..", "lib", "libwdrift.so"),
                 ctypes.util.find_library("wdrift")):
        if path and (os.path.exists(path) or not os.path.dirname(path)):
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError:
                continue
    else:
        raise WdriftError("cannot find libwdrift.so: set WDRIFT_LIB, or build wdrift (make)")
    P = ctypes.c_void_p
    lib.wd_publisher_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_Opts), ctypes.POINTER(P)]
    lib.wd_publisher_begin.argtypes = [P, ctypes.c_int64]
    lib.wd_publisher_tensor.argtypes = [P, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p,
                                        ctypes.POINTER(ctypes.c_uint64), ctypes.c_int,
                                        ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64]
    lib.wd_publisher_commit.argtypes = [P]
    lib.wd_publisher_get_stats.argtypes = [P, ctypes.POINTER(_Stats)]
    lib.wd_publisher_get_stats.restype = None
    lib.wd_publisher_flush.argtypes = [P, ctypes.c_int]
    lib.wd_publisher_close.argtypes = [ctypes.POINTER(P), ctypes.c_int]
    lib.wd_publisher_close.restype = None
    return lib


_lib = None


class BF16:
    """bfloat16 values given as their 16-bit codes (numpy has no bfloat16)."""

    def __init__(self, codes):
        self.codes = np.ascontiguousarray(codes, dtype=np.uint16)


def _as_array(t):
    """(dtype name, contiguous numpy array, shape) of a tensor: no conversion of values."""
    if isinstance(t, BF16):
        return "bf16", t.codes, t.codes.shape
    if type(t).__module__.startswith("torch"):
        import torch  # only when given torch tensors
        t = t.detach()
        if t.dtype == torch.bfloat16:   # its bits, as they are
            a = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
            return "bf16", a, tuple(t.shape)
        t = t.cpu().numpy()
    a = np.ascontiguousarray(t)
    kind = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
            np.dtype(np.float16): "f16"}.get(a.dtype)
    if kind is None:
        raise TypeError(f"unsupported dtype {a.dtype}: float32, float64, float16 or bfloat16")
    return kind, a, a.shape


class Publisher:
    """Publishes snapshots of one run to a wdriftd ingest endpoint."""

    def __init__(self, endpoint, run, queue_bytes=0, policy="drop_oldest", ack_timeout=30.0):
        global _lib
        if _lib is None:
            _lib = _load()
        if policy not in _POLICIES:
            raise ValueError(f"policy {policy!r}: drop_oldest, drop_newest or block")
        opts = _Opts(int(queue_bytes), _POLICIES[policy], int(ack_timeout * 1000))
        self._p = ctypes.c_void_p()
        r = _lib.wd_publisher_open(endpoint.encode(), run.encode(), ctypes.byref(opts), ctypes.byref(self._p))
        if r:
            raise WdriftError(f"cannot open a publisher for run {run!r} at {endpoint!r}: error {-r}")
        self.run = run

    def publish(self, step, tensors):
        """Copies every tensor of a mapping (a state_dict) into one snapshot and queues it."""
        if not self._p:
            raise WdriftError("publisher is closed")
        if _lib.wd_publisher_begin(self._p, int(step)):
            raise ValueError(f"bad step {step!r}")
        for name, t in tensors.items():
            kind, a, shape = _as_array(t)
            dims = (ctypes.c_uint64 * max(1, len(shape)))(*shape) if shape else None
            r = _lib.wd_publisher_tensor(self._p, name.encode(), _DTYPES[kind], a.ctypes.data, dims,
                                         len(shape), 0, a.size, a.size)
            if r:
                raise WdriftError(f"tensor {name!r}: error {-r}")
        _lib.wd_publisher_commit(self._p)

    def stats(self):
        """committed, acked, dropped, resent, queued, queued_bytes, connected."""
        s = _Stats()
        _lib.wd_publisher_get_stats(self._p, ctypes.byref(s))
        return {k: getattr(s, k) for k, _ in _Stats._fields_}

    def flush(self, timeout=30.0):
        """Waits until every queued snapshot is durable; False on timeout."""
        return _lib.wd_publisher_flush(self._p, int(timeout * 1000)) == 0

    def close(self, timeout=10.0):
        """Flushes up to timeout, then stops; what is left counts as dropped."""
        if self._p:
            _lib.wd_publisher_close(ctypes.byref(self._p), int(timeout * 1000))
            self._p = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close(0.0)
        except Exception:
            pass


class _Attached:
    def __init__(self, model, pub, every):
        self.model, self.pub, self.every, self.steps = model, pub, every, 0

    def step(self, *_):
        """Counts one optimizer step; publishes the model every `every` steps."""
        if self.steps % self.every == 0:
            self.pub.publish(self.steps, self.model.state_dict())
        self.steps += 1


def attach(model, pub, every=100, optimizer=None):
    """Publishes model.state_dict() every `every` optimizer steps.

    With a torch optimizer it hooks its step (register_step_post_hook);
    without one, call .step() after each optimizer step.
    """
    a = _Attached(model, pub, every)
    if optimizer is not None:
        optimizer.register_step_post_hook(lambda opt, args, kwargs: a.step())
    return a
