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
import sys
import types

import numpy as np

__all__ = ["Publisher", "BF16", "attach", "WdriftError"]

_DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3}
_POLICIES = {"drop_oldest": 0, "drop_newest": 1, "block": 2}


from . import _lib as _libmod
from ._errors import WdriftError
from ._lib import _Opts, _Stats

_lib = None


class BF16:
    """bfloat16 values given as their 16-bit codes (numpy has no bfloat16)."""

    def __init__(self, codes):
        self.codes = np.ascontiguousarray(codes, dtype=np.uint16)


_NP_KINDS = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}


def _torch_of(t):
    """The torch module when t is a torch tensor, else None.

    torch is never imported here: if it is not imported already, t cannot
    be one of its tensors, and numpy-only users need not have it.
    """
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(t, torch.Tensor) else None


def _kind(name, t):
    """The dtype name ("f32", "f64", "f16" or "bf16") of a tensor that can be sent; no copy.

    Raises TypeError for another dtype and ValueError for zero elements,
    naming the tensor.
    """
    torch = _torch_of(t)
    if isinstance(t, BF16):
        kind, n, dtype = "bf16", t.codes.size, "bfloat16"
    elif torch is not None:
        dtype, n = t.dtype, t.numel()
        kind = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16"}.get(dtype)
    else:
        dtype, n = np.asarray(t).dtype, np.size(t)
        kind = _NP_KINDS.get(dtype)
    if kind is None:
        raise TypeError(f"tensor {name!r}: unsupported dtype {dtype}: float32, float64, float16 or "
                        "bfloat16 (a torch tensor, or numpy codes wrapped as wdrift.BF16)")
    if n == 0:
        raise ValueError(f"tensor {name!r}: zero elements")
    return kind


def _as_array(t, kind):
    """A C-contiguous numpy array of t's values (bf16: its 16-bit codes), and its shape.

    Torch tensors may need grad, live on any device and be non-contiguous:
    they are detached and copied to the CPU where they are not there.
    bfloat16 keeps its bits: viewed as int16 (numpy has no bfloat16), then
    as uint16. Nothing is converted.
    """
    torch = _torch_of(t)
    if isinstance(t, BF16):
        a = t.codes
    elif torch is not None:
        t = t.detach()
        if kind == "bf16":
            a = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
        else:
            a = t.cpu().numpy()
    else:
        a = np.asarray(t)
    if not a.flags.c_contiguous:    # np.ascontiguousarray would make a 0-d array 1-d
        a = a.copy(order="C")
    return a, a.shape


class Publisher:
    """Publishes snapshots of one run to a wdriftd ingest endpoint."""

    def __init__(self, endpoint, run, queue_bytes=0, policy="drop_oldest", ack_timeout=30.0,
                 server_key=None, key=None):
        """server_key and key: CURVE, for a daemon with auth.server_key (docs/security.md).

        server_key is the daemon's public key (40 characters of Z85) or a
        file that holds it; key is this client's key pair file (wdrift
        keygen). None takes them from WDRIFT_SERVER_KEY and WDRIFT_KEY;
        with neither there, the connection is plain.
        """
        global _lib
        if _lib is None:
            _lib = _libmod.load()
        if policy not in _POLICIES:
            raise ValueError(f"policy {policy!r}: drop_oldest, drop_newest or block")
        sk = os.fsencode(server_key) if server_key is not None else None
        kf = os.fsencode(key) if key is not None else None
        err = ctypes.create_string_buffer(1024)
        if _lib.wd_publisher_check_keys(sk, kf, err, len(err)):
            raise WdriftError(f"run {run!r}: {err.value.decode(errors='replace')}")
        opts = _Opts(int(queue_bytes), _POLICIES[policy], int(ack_timeout * 1000), sk, kf)
        self._p = ctypes.c_void_p()
        r = _lib.wd_publisher_open(endpoint.encode(), run.encode(), ctypes.byref(opts), ctypes.byref(self._p))
        if r:
            raise WdriftError(f"cannot open a publisher for run {run!r} at {endpoint!r}: error {-r}")
        self.run = run

    def publish(self, step, tensors, skip_other=False):
        """Copies every tensor of a mapping (a state_dict) into one snapshot and queues it.

        Every tensor is checked before the snapshot begins, so that a bad
        one queues nothing: TypeError for a dtype other than float32,
        float64, float16 or bfloat16, ValueError for zero elements.
        skip_other=True leaves such tensors out instead (a state_dict's
        int64 counters, bool masks), as attach() does.
        """
        if not self._p:
            raise WdriftError("publisher is closed")
        todo = []
        for name, t in tensors.items():
            try:
                todo.append((name, t, _kind(name, t)))
            except (TypeError, ValueError):
                if not skip_other:
                    raise
        if _lib.wd_publisher_begin(self._p, int(step)):
            raise ValueError(f"bad step {step!r}")
        for name, t, kind in todo:
            a, shape = _as_array(t, kind)   # one tensor at a time on the host
            dims = (ctypes.c_uint64 * len(shape))(*shape) if shape else None
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
    """What attach() returns: counts optimizer steps, publishes every `every`."""

    def __init__(self, model, pub, every, start):
        if int(every) < 1:
            raise ValueError(f"every={every!r}: at least 1")
        self.model, self.pub, self.every, self.steps = model, pub, int(every), int(start)
        self._publish_if_due()

    def _publish_if_due(self):
        if self.steps % self.every == 0:
            self.pub.publish(self.steps, self.model.state_dict(), skip_other=True)

    def step(self, *_):
        """Counts one optimizer step; publishes the model when the count is a multiple of every."""
        self.steps += 1
        self._publish_if_due()


def _wrap_step(optimizer, after):
    """Calls after() after each optimizer.step(), on torch < 2.0, which has no step hooks.

    The wrapper is bound to the optimizer: an LR scheduler created later
    wraps it in turn, and reads its __self__ and __func__. When the step it
    wraps already counts for a scheduler created earlier, it says so
    (_with_counter), or that scheduler would warn that step was replaced.
    """
    inner = optimizer.step

    def step(self, *args, **kwargs):
        r = inner(*args, **kwargs)
        after()
        return r
    if getattr(inner, "_with_counter", False):
        step._with_counter = True
    optimizer.step = types.MethodType(step, optimizer)


def attach(model, pub, every=100, optimizer=None, start=0):
    """Publishes model.state_dict() as step `start` now, then after every `every`-th optimizer step.

    The model after N optimizer steps is published as step start + N, when
    that is a multiple of every: with every=100, steps 0 (as the model is
    now), 100, 200, ... Tensors that cannot be sent (int64 counters) are
    left out. With a torch optimizer it hooks its step (a post hook on
    torch >= 2.0, a wrapper of the instance's step before); without one,
    call .step() of the returned object after each optimizer step.
    """
    a = _Attached(model, pub, every, start)
    if optimizer is not None:
        if hasattr(optimizer, "register_step_post_hook"):
            optimizer.register_step_post_hook(lambda opt, args, kwargs: a.step())
        else:
            _wrap_step(optimizer, a.step)
    return a
