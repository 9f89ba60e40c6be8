"""attach: publish a torch model every N optimizer steps, with no change to the training loop."""
import types

__all__ = ["attach"]


def _unwrapped(model):
    """The model a DDP or DataParallel wrapper (.module) or torch.compile (._orig_mod) holds, to any
    depth: its state_dict names tensors as the model does, where the wrapper's prefixes them
    'module.' or '_orig_mod.', and a run attached through one matched none of an unwrapped
    baseline's names (the daemon said so, and compared nothing)."""
    try:
        import torch
    except ImportError:
        return model
    parallel = tuple(c for c in (getattr(torch.nn.parallel, "DistributedDataParallel", None),
                                 getattr(torch.nn, "DataParallel", None)) if isinstance(c, type))
    for _ in range(8):     # a compiled DDP model, or a DDP of a compiled one
        if parallel and isinstance(model, parallel):
            model = model.module
        elif isinstance(model, torch.nn.Module) and isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            break
    return model


class _Attached:
    """What attach() returns: counts optimizer steps, publishes every `every`."""

    def __init__(self, model, pub, every, start):
        if int(every) < 1:
            raise ValueError(f"every={every!r}: at least 1")
        self.model, self.pub, self.every, self.steps = _unwrapped(model), pub, int(every), int(start)
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

    A model wrapped for DDP or DataParallel, or by torch.compile, is
    published as the model it wraps: under the same names as an unwrapped
    run's, without the wrapper's 'module.' or '_orig_mod.' prefix.
    """
    a = _Attached(model, pub, every, start)
    if optimizer is not None:
        if hasattr(optimizer, "register_step_post_hook"):
            optimizer.register_step_post_hook(lambda opt, args, kwargs: a.step())
        else:
            _wrap_step(optimizer, a.step)
    return a
