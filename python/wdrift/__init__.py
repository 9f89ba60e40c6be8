"""wdrift: publish weight snapshots of a training run to wdriftd.

ctypes over libwdrift.so (docs/publishing.md; docs/protocol.md for the wire):

    import wdrift
    pub = wdrift.Publisher("ipc:///run/wdrift/ingest.sock", run="llama-fa")
    for step in range(steps):
        ...train...
        if step % 100 == 0:
            pub.publish(step, model.state_dict())   # returns once the copies are queued
    pub.close()

Tensors are numpy arrays or torch tensors (any device) of float32, float64,
float16 or bfloat16; bfloat16 goes as its raw bits, with no conversion. A
rank of a sharded job publishes only its piece of each tensor: Shard,
Block, or a torch DTensor (docs/publishing.md, "Sharded tensors"). A background
thread sends snapshots and waits for each one's durable ack; when the
daemon is slow or away, whole snapshots are dropped by policy, counted in
stats(), and said on stderr.
"""
from ._errors import RefusedWarning, WdriftError
from ._tensors import BF16, Block, EmptyTensor, Shard, UnsupportedDtype
from .attach import attach
from .publisher import Publisher

__all__ = ["Publisher", "BF16", "Shard", "Block", "attach", "WdriftError", "RefusedWarning",
           "UnsupportedDtype", "EmptyTensor"]
