"""_tensors: what a value of a published mapping is, and which piece of which whole it names.

publish() takes a mapping of names to values. A value is a whole tensor
(a numpy array, a torch tensor on any device, wdrift.BF16 codes), or this
rank's piece of one:

- Shard(local, offset, shape): local's elements are elements
  [offset, offset + local.size) of the whole, flattened in row-major order;
- Block(local, start, shape): local is the N-D block of the whole that
  begins at index start (a column block goes as one shard per row);
- a torch DTensor (FSDP2, tensor parallel): its placements say which block
  this rank holds; a replicated tensor is sent by the ranks at coordinate 0
  of the mesh dimensions it is replicated over.

plan() turns every value into an Entry: the dtype, the whole shape, where
the piece goes, and the array that holds its elements. torch is never
imported here: if it is not imported already, no value can be one of its
tensors.
"""
import operator
import sys
from math import prod

import numpy as np

__all__ = ["BF16", "Shard", "Block", "plan", "Entry", "UnsupportedDtype", "EmptyTensor"]


class UnsupportedDtype(TypeError):
    """A value of a dtype that cannot be sent: publish(skip_other=True) leaves it out."""


class EmptyTensor(ValueError):
    """A whole tensor of no element: publish(skip_other=True) leaves it out."""


class BF16:
    """bfloat16 values given as their 16-bit codes (numpy has no bfloat16)."""

    def __init__(self, codes):
        self.codes = np.ascontiguousarray(codes, dtype=np.uint16)


def _index(v, what):
    """v as an int, refusing what int() would truncate or turn (2.5, True, "3"): TypeError naming what.
    numpy and torch integer scalars (0-d) are ints; their bools, and arrays of one element, are not."""
    dtype = str(getattr(v, "dtype", ""))
    if isinstance(v, (bool, np.bool_)) or dtype in ("bool", "torch.bool"):
        raise TypeError(f"{what} {v!r}: an integer, not a bool")
    if getattr(v, "ndim", 0) != 0:
        raise TypeError(f"{what} {v!r}: one integer, not an array of {getattr(v, 'ndim')} dimensions")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} {v!r}: an integer (int, numpy or torch integer), not "
                        f"{type(v).__name__}") from None


def _dims(shape, what):
    """A shape as a tuple of ints: a sequence of them (a tuple, a list, torch.Size, a 1-D array), or one
    int (a 0-d numpy or torch one too) for a vector, as numpy and torch take."""
    if isinstance(shape, int) or (hasattr(shape, "__index__") and getattr(shape, "ndim", 1) == 0):
        return (_index(shape, what),)
    try:
        if isinstance(shape, (str, bytes)):
            raise TypeError
        dims = list(shape)
    except TypeError:
        raise TypeError(f"{what} {shape!r}: a sequence of integers, such as (4096,) or torch.Size, "
                        f"not {type(shape).__name__}") from None
    return tuple(_index(d, what) for d in dims)


class Shard:
    """This rank's contiguous piece of a tensor: elements [offset, offset + local.numel) of the whole.

    local is a tensor or array of this rank's elements (its shape does not
    matter, only their row-major order); offset is the index of its first
    element in the whole tensor flattened in row-major order; shape is the
    whole tensor's shape (an int for a vector). local may be empty: a rank
    that holds nothing of a tensor still names it. A float, a bool or a
    non-sequence shape is a TypeError naming it.
    """

    def __init__(self, local, offset, shape):
        self.local = local
        self.offset, self.shape = _index(offset, "Shard offset"), _dims(shape, "Shard shape")
        if self.offset < 0:
            raise ValueError(f"Shard offset {offset!r} is negative")


class Block:
    """This rank's N-D block of a tensor: local, placed at index start of the whole of shape.

    For a column block of a matrix (tensor parallel's row-parallel weight)
    start is (0, first_column); it goes as one contiguous shard per row.
    """

    def __init__(self, local, start, shape):
        self.local, self.start, self.shape = local, _dims(start, "Block start"), _dims(shape, "Block shape")
        if len(self.start) != len(self.shape):
            raise ValueError(f"Block start {self.start} and shape {self.shape} differ in rank")


class Entry:
    """One name of a snapshot: what to send of it, and from where.

    kind: "f32", "f64", "f16" or "bf16". shape: the whole tensor's.
    offset: a flat shard's first element, or None for a block at start.
    array: this rank's elements: a numpy array, a torch tensor (any device),
    or None when the rank holds nothing of it.
    """
    __slots__ = ("name", "kind", "shape", "offset", "start", "local_shape", "array")

    def __init__(self, name, kind, shape, array, offset=0, start=None, local_shape=None):
        self.name, self.kind, self.shape, self.array = name, kind, tuple(shape), array
        self.offset, self.start, self.local_shape = offset, start, local_shape

    @property
    def numel(self):
        return prod(self.local_shape) if self.start is not None else _numel(self.array)

    @property
    def nbytes(self):
        return self.numel * (8 if self.kind == "f64" else 4 if self.kind == "f32" else 2)


_NP_KINDS = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.float16): "f16"}


def torch_of(t):
    """The torch module when t is a torch tensor, else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(t, torch.Tensor) else None


def _numel(a):
    if a is None:
        return 0
    return a.numel() if torch_of(a) is not None else a.size


def _kind(name, t):
    """The dtype name of a value that can be sent; TypeError naming the tensor otherwise."""
    torch = torch_of(t)
    if isinstance(t, BF16):
        return "bf16"
    if torch is not None:
        kind = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16"}.get(t.dtype)
        dtype = t.dtype
    else:
        dtype = np.asarray(t).dtype
        kind = _NP_KINDS.get(dtype)
    if kind is None:
        raise UnsupportedDtype(f"tensor {name!r}: unsupported dtype {dtype}: float32, float64, float16 or "
                         "bfloat16 (a torch tensor, or numpy codes wrapped as wdrift.BF16); "
                         "publish(..., skip_other=True) leaves such tensors out")
    return kind


def _local(t):
    """A value's elements as a numpy array or a torch tensor (detached), in row-major order."""
    if isinstance(t, BF16):
        return t.codes
    torch = torch_of(t)
    if torch is not None:
        return t.detach()
    return np.asarray(t)


def _is_dtensor(t):
    cls = type(t)
    return cls.__name__ == "DTensor" and cls.__module__.startswith("torch.distributed")


def _dtensor_block(name, t):
    """(local tensor or None, start, local_shape) of this rank's block of a DTensor.

    Shard(d) splits dimension d as torch.chunk does (ceil-sized pieces, the
    last ones smaller or empty), nested in mesh-dimension order; Replicate
    is sent by coordinate 0 only, so the daemon gets each element once.
    """
    shape = tuple(t.shape)
    start, size = [0] * len(shape), list(shape)
    coord = t.device_mesh.get_coordinate()
    if coord is None:       # this rank is not in the mesh: it holds nothing
        return None, tuple(start), tuple(0 for _ in shape)
    holder = True
    for mdim, pl in enumerate(t.placements):
        kind = type(pl).__name__
        n, c = t.device_mesh.size(mdim), coord[mdim]
        if kind == "Replicate":
            holder = holder and c == 0
        elif kind == "Shard":
            d = pl.dim if pl.dim >= 0 else pl.dim + len(shape)
            chunk = -(-size[d] // n)
            lo = min(c * chunk, size[d])
            hi = min(lo + chunk, size[d])
            start[d] += lo
            size[d] = hi - lo
        else:
            raise TypeError(f"tensor {name!r}: DTensor placement {pl!r} cannot be published by "
                            "piece (Shard and Replicate can); redistribute it first")
    local = t.to_local().detach()
    if tuple(local.shape) != tuple(size):
        raise ValueError(f"tensor {name!r}: DTensor local shape {tuple(local.shape)} is not the "
                         f"{tuple(size)} its placements {t.placements} give (uneven sharding?)")
    if not holder:
        return None, tuple(start), tuple(0 for _ in shape)
    return local, tuple(start), tuple(size)


def plan(tensors, skip_other=False):
    """The Entries of a mapping, checked before anything is sent.

    TypeError for an unsupported dtype, ValueError for a
    tensor of zero elements or a piece outside its tensor, each naming the
    tensor. skip_other=True leaves out values of another dtype and empty
    whole tensors (a state_dict's int64 counters, bool masks), as attach()
    does; a piece that cannot be placed (a DTensor placement that cannot
    be published by piece, a Block outside its tensor) always raises: left
    out, the daemon would never see that tensor.
    """
    out = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor name {name!r} is not a str")
        try:
            out.append(_entry(name, t))
        except (UnsupportedDtype, EmptyTensor):
            if not skip_other:
                raise
    return out


def _entry(name, t):
    if isinstance(t, Shard):
        kind, local = _kind(name, t.local), _local(t.local)
        total = prod(t.shape)
        n = _numel(local)
        if total == 0 or t.offset + n > total:
            raise ValueError(f"tensor {name!r}: Shard of {n} elements at offset {t.offset} is not "
                             f"inside a tensor of shape {t.shape}")
        return Entry(name, kind, t.shape, local if n else None, offset=t.offset)
    if isinstance(t, Block):
        kind, local = _kind(name, t.local), _local(t.local)
        if prod(t.shape) == 0:
            raise ValueError(f"tensor {name!r}: shape {t.shape} has zero elements")
        lshape = tuple(local.shape) if not isinstance(t.local, BF16) else tuple(t.local.codes.shape)
        if len(lshape) != len(t.shape) or any(s < 0 or s + l > d for s, l, d in zip(t.start, lshape, t.shape)):
            raise ValueError(f"tensor {name!r}: Block of shape {lshape} at {t.start} is not inside "
                             f"a tensor of shape {t.shape}")
        return Entry(name, kind, t.shape, local if prod(lshape) else None, start=t.start, local_shape=lshape)
    if _is_dtensor(t):
        kind = _kind(name, t)
        if t.numel() == 0:
            raise EmptyTensor(f"tensor {name!r}: zero elements")
        local, start, lshape = _dtensor_block(name, t)
        return Entry(name, kind, tuple(t.shape), local if prod(lshape) else None, start=start,
                     local_shape=lshape)
    kind = _kind(name, t)
    a = _local(t)
    if _numel(a) == 0:
        raise EmptyTensor(f"tensor {name!r}: zero elements")
    return Entry(name, kind, tuple(a.shape), a)
