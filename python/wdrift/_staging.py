"""_staging: CUDA tensors leave the device without stalling the training step.

publish() of a snapshot that holds CUDA tensors queues their copies into
pinned host memory on a side stream and returns; a background thread
waits for the copies and hands the host buffers to the C publisher. The
contract (docs/publishing.md, "What publishing costs the training step"):

- the side stream first waits for the caller's current stream, so the
  copies see every update queued before publish();
- the caller's current stream then waits on an event recorded after the
  copies, so kernels queued after publish() (the next optimizer step) do
  not change a parameter before it has been copied. The training thread
  never waits on the host;
- pinned memory is bounded by the publisher's queue budget: staged bytes
  plus what the C queue holds. A snapshot that does not fit is dropped
  (drop_oldest and drop_newest alike: the copies in flight cannot be
  taken back) or, under policy "block", waited for. Each drop is counted.
"""
import queue
import threading
import time
import weakref

from ._tensors import torch_of


class Stager:
    """The side streams, the hand-over thread, and the pinned bytes they hold."""

    def __init__(self, publisher):
        self._pub = weakref.ref(publisher)     # the thread must not keep it alive: its __del__ closes
        self._busy = 0
        self._streams = {}
        self._queue = queue.Queue()
        self._cond = threading.Condition()
        self.staged_bytes = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="wdrift-stager", daemon=True)
        self._thread.start()

    def _stream(self, torch, device):
        s = self._streams.get(device)
        if s is None:
            s = self._streams[device] = torch.cuda.Stream(device=device)
        return s

    def room(self, nbytes, queued_bytes, budget, policy):
        """True when nbytes more can be staged; waits under "block"; counts a drop otherwise."""
        with self._cond:
            while self.staged_bytes and self.staged_bytes + queued_bytes + nbytes > budget:
                if policy != "block":
                    self.dropped += 1
                    return False
                self._cond.wait(0.1)
                pub = self._pub()
                queued_bytes = pub._queued_bytes() if pub is not None else 0
            self.staged_bytes += nbytes
            return True

    def release(self, nbytes):
        """Gives back what room() reserved, for a snapshot that was not staged after all."""
        with self._cond:
            self.staged_bytes -= nbytes
            self._cond.notify_all()

    def stage(self, step, entries, nbytes):
        """Queues device-to-host copies of the entries on CUDA; copies CPU ones now. Returns at once."""
        torch = None
        events = []
        by_device = {}
        host = []
        for e in entries:
            a = e.array
            t = torch_of(a)
            if t is not None and a.is_cuda:
                torch = t
                by_device.setdefault(a.device, []).append(e)
            elif a is not None:     # a CPU value in a mixed snapshot: the training step may change it
                host.append(e)
        staged = {}
        for device, group in by_device.items():
            cur = torch.cuda.current_stream(device)
            side = self._stream(torch, device)
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                for e in group:
                    src = e.array if e.array.is_contiguous() else e.array.contiguous()
                    buf = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
                    buf.copy_(src, non_blocking=True)
                    src.record_stream(side)
                    staged[id(e)] = buf
            ev = torch.cuda.Event()
            ev.record(side)
            cur.wait_event(ev)      # the next optimizer step waits for the copies, on the device
            events.append(ev)
        for e in host:
            a = e.array
            staged[id(e)] = a.clone() if torch_of(a) is not None else a.copy()
        out = []
        for e in entries:
            if id(e) in staged:
                e.array = staged[id(e)]
            out.append(e)
        with self._cond:
            self._busy += 1
        self._queue.put((step, out, events, nbytes))

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            step, entries, events, nbytes = item
            pub = self._pub()
            try:
                for ev in events:
                    ev.synchronize()
                if pub is not None:
                    pub._send_host(step, entries)
            except Exception as exc:    # noqa: BLE001: said, counted, and the thread goes on
                if pub is not None:
                    pub._stager_failed(step, exc)
            finally:
                del pub
                self.release(nbytes)
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def drain(self, timeout):
        """Waits until every staged snapshot has been handed to the C publisher; False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._busy:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def stop(self):
        self._queue.put(None)
        self._thread.join()
