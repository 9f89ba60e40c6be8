"""publisher: Publisher, one run's snapshots to a wdriftd ingest endpoint (docs/publishing.md).

The training thread pays for one copy of each tensor (CPU), or only for
queueing the copies (CUDA, _staging.py); a C thread sends, waits for the
durable ack, and re-sends after a timeout or a daemon restart.
"""
import atexit
import ctypes
import os
import sys
import threading
import time
import warnings
import weakref
from math import prod

from . import _lib as _libmod
from ._errors import RefusedWarning, WdriftError
from ._lib import _Opts, _Stats
from ._staging import Stager
from ._tensors import _index, plan, torch_of

__all__ = ["Publisher"]

_DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3}
_POLICIES = {"drop_oldest": 0, "drop_newest": 1, "block": 2}
_lib = None


def _get_lib():
    global _lib
    if _lib is None:
        _lib = _libmod.load()
    return _lib


def _host(a):
    """(pointer, keep-alive) of a host value's C-contiguous elements; no copy when they are."""
    if a is None:
        return None, None
    if torch_of(a) is not None:
        if a.device.type != "cpu":      # not CUDA (staged) either: mps, xla, ...
            a = a.cpu()
        if not a.is_contiguous():
            a = a.contiguous()
        return a.data_ptr(), a
    if not a.flags.c_contiguous:    # np.ascontiguousarray would make a 0-d array 1-d
        a = a.copy(order="C")
    return a.ctypes.data, a


def _u64s(xs):
    """A C array of xs; a 0-d shape is an empty array, not NULL (which C reads as 1-D)."""
    return (ctypes.c_uint64 * len(xs))(*xs)


def _ms(seconds):
    """Seconds as the C int of milliseconds, clamped (a large timeout must not wrap)."""
    return max(0, min(int(seconds * 1000), 2**31 - 1))


def _own_rank(ranks):
    """This process's rank among ranks publishers, when the job says it: torch.distributed's
    (a process group of that world size), or torchrun's RANK (with WORLD_SIZE ranks); else None."""
    if ranks <= 1:
        return None
    dist = sys.modules.get("torch.distributed")     # imported by the job: not imported here
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank() if dist.get_world_size() == ranks else None
    except (RuntimeError, ValueError):
        return None
    try:
        r, w = int(os.environ.get("RANK", "")), int(os.environ.get("WORLD_SIZE", ""))
    except ValueError:
        return None
    return r if w == ranks and 0 <= r < ranks else None


# Publishers open now: those a program leaves unclosed are closed at its end (_close_at_exit)
_OPEN = weakref.WeakSet()
# Seconds an unclosed publisher waits for its snapshots at the program's end, as close()'s default
_UNCLOSED_WAIT = 10.0


def _close_at_exit():
    """Closes every publisher the program left open, before the interpreter tears down: its
    snapshots not yet durable were dropped at once, in silence but for a count (a trial's job
    lost 4 of its 5 steps). One deadline for them all, not _UNCLOSED_WAIT each."""
    end = time.monotonic() + _UNCLOSED_WAIT
    for pub in list(_OPEN):
        pub._close_unclosed("the program's end", max(0.0, end - time.monotonic()))


atexit.register(_close_at_exit)


class Publisher:
    """Publishes snapshots of one run to a wdriftd ingest endpoint."""

    def __init__(self, endpoint, run, queue_bytes=0, policy="drop_oldest", ack_timeout=30.0,
                 server_key=None, key=None, ranks=1, stall_warning=30.0, rank=None):
        """Opens a publisher; raises at once for what can never work.

        endpoint: tcp://HOST:PORT, ipc://PATH or inproc://NAME; anything else,
        or an address ZeroMQ refuses, raises WdriftError naming it. An ipc://
        socket that does not exist yet is a warning on stderr with its full
        path: the daemon may start later. When a socket file in its
        directory has a name it looks like a typo of, or the directory is
        missing and one beside it of a near name holds a socket of that
        name, the warning and diagnosis add "did you mean 'ipc://DIR/NAME'?".

        queue_bytes (0: 1 GiB) bounds the snapshots waiting to be sent, and
        for CUDA tensors the pinned host memory they are staged in; policy
        says what happens when a snapshot does not fit: drop_oldest,
        drop_newest or block.

        ranks: the number of publishers (one per rank of a sharded job) that
        share each snapshot of this run, each publishing only its own pieces
        (wdrift.Shard, wdrift.Block, DTensor) under every tensor name.

        rank: this publisher's rank among them, from 0 (ranks > 1 only). None
        finds it: torch.distributed's rank when a process group is up and its
        world size is ranks, else the RANK environment variable (torchrun's)
        when WORLD_SIZE is ranks; else it is not said. Said, the daemon knows
        when every rank has committed: a snapshot still not whole then (two
        ranks sent the same piece) is refused at once, and a rank that never
        commits is named by number.

        stall_warning: seconds without an ack, while snapshots wait, before
        one warning on stderr naming the endpoint (None: never).

        server_key and key: CURVE, for a daemon with auth.server_key
        (docs/security.md). server_key is a file that holds the daemon's
        public key (an existing file wins, whatever its name looks like), or
        the key itself: "z85:" and its 40 characters of Z85, or the 40
        characters alone; key is this client's key pair file (wdrift keygen). None takes them from WDRIFT_SERVER_KEY and
        WDRIFT_KEY; with neither there, the connection is plain.
        """
        self._p = ctypes.c_void_p()
        lib = _get_lib()
        if policy not in _POLICIES:
            raise ValueError(f"policy {policy!r}: drop_oldest, drop_newest or block")
        if not isinstance(run, str) or not isinstance(endpoint, str):
            raise TypeError("endpoint and run are str")
        if int(ranks) < 1:
            raise ValueError(f"ranks={ranks!r}: at least 1")
        sk = os.fsencode(server_key) if server_key is not None else None
        kf = os.fsencode(key) if key is not None else None
        err = ctypes.create_string_buffer(1024)
        if lib.wd_publisher_check_keys_as(sk, kf, b"server_key=", b"key=", err, len(err)):
            raise WdriftError(f"run {run!r}: {err.value.decode(errors='replace')}")
        stall = -1 if stall_warning is None else max(1, _ms(stall_warning))
        opts = _Opts(int(queue_bytes), _POLICIES[policy], max(1, _ms(ack_timeout)), sk, kf, stall,
                     int(ranks))
        r = lib.wd_publisher_open(endpoint.encode(), run.encode(), ctypes.byref(opts), ctypes.byref(self._p))
        if r:
            raise WdriftError(f"cannot publish run {run!r}: {_libmod.error_text(lib, r)}")
        self.run, self.endpoint, self.ranks = run, endpoint, int(ranks)
        self.rank = _own_rank(int(ranks)) if rank is None else int(rank)
        if self.rank is not None and lib.wd_publisher_set_rank(self._p, self.rank):
            msg = _libmod.error_text(lib, -22)
            lib.wd_publisher_close(ctypes.byref(self._p), 0)
            raise ValueError(f"run {run!r}: {msg}")
        self._policy = policy
        self._budget = int(queue_bytes) or 1 << 30
        self._build = threading.Lock()     # begin..commit of one snapshot at a time
        self._stager = None
        self._conflicts_seen = 0
        self._refused_seen = 0
        self._stager_error = None
        _OPEN.add(self)

    # --- publishing ---

    def publish(self, step, tensors, skip_other=False):
        """Queues a snapshot of a mapping of names to tensors (a state_dict); returns without waiting.

        Values: numpy arrays, torch tensors on any device, wdrift.BF16, or
        this rank's piece of a tensor: wdrift.Shard, wdrift.Block, a torch
        DTensor. Every value is checked before anything is queued:
        UnsupportedDtype (a TypeError) for a dtype other than float32,
        float64, float16 or bfloat16, EmptyTensor (a ValueError) for zero
        elements, ValueError for a piece outside its tensor, each naming
        the tensor; skip_other=True leaves such values
        out instead (int64 counters, bool masks), as attach() does.

        CPU values are copied once, here. CUDA values are copied to pinned
        memory on a side stream, which the current stream then waits for
        (docs/publishing.md, "What publishing costs the training step"): this returns once the copies are queued.

        Raises WdriftError when the daemon has refused an earlier snapshot
        as a conflict (its (run, step) is durable with other content), once
        this snapshot is queued: a job that catches it loses nothing more,
        unless it is a re-run under the name (it sent step 0 again, then had
        a conflict), whose later steps the daemon refuses too
        (docs/publishing.md).
        """
        if not self._p:
            self._check()   # closed: raises
        # 7.9 was stored as step 7, True as 1 (a trial's): refused, not truncated
        step = _index(step, "step")
        if step < 0:
            raise ValueError(f"step {step}: steps are integers >= 0")
        entries = plan(tensors, skip_other)
        earlier = self._conflict_now()      # before this one is queued: its own come later
        if any(torch_of(e.array) is not None and e.array.is_cuda for e in entries):
            if self._stager is None:
                self._stager = Stager(self)
            nbytes = sum(e.nbytes for e in entries)
            if self._stager.room(nbytes, self._queued_bytes(), self._budget, self._policy):
                try:
                    self._stager.stage(step, entries, nbytes)
                except BaseException:
                    self._stager.release(nbytes)
                    raise
        else:
            self._send_host(step, entries)
        # an earlier snapshot's conflict, after this one is queued: raised first, it cost a job
        # that caught it every other snapshot (a trial's). Not this one's, which may come back
        # before this returns: the next call raises that, so where it is raised does not race
        self._raise_refusals(upto=earlier)

    def _send_host(self, step, entries):
        """Hands a snapshot of host values to the C publisher (its one copy)."""
        lib = _get_lib()
        with self._build:
            if not self._p:
                self._check()   # closed meanwhile (another thread, or the program's end): raises
            if lib.wd_publisher_begin(self._p, step):
                raise ValueError(f"step {step}: {_libmod.error_text(lib, -22)}")
            for e in entries:
                ptr, keep = _host(e.array)
                dt, name = _DTYPES[e.kind], e.name.encode()
                if e.start is None:
                    n = e.numel
                    r = lib.wd_publisher_tensor(self._p, name, dt, ptr, _u64s(e.shape), len(e.shape),
                                                e.offset, n, prod(e.shape))
                else:
                    r = lib.wd_publisher_block(self._p, name, dt, ptr, _u64s(e.shape), _u64s(e.start),
                                               _u64s(e.local_shape), len(e.shape))
                del keep
                if r:
                    raise WdriftError(f"run {self.run!r} step {step}: {_libmod.error_text(lib, r)}")
            r = lib.wd_publisher_commit(self._p)
            if r:
                e = WdriftError(f"run {self.run!r} step {step}: {_libmod.error_text(lib, r)}")
                e.counted = True    # the library counts a refused commit at close (wd_publisher_close)
                raise e

    def _stager_failed(self, step, exc):
        """A staged snapshot that could not be handed over: said, counted as dropped, raised next."""
        msg = f"wdrift: publisher: run {self.run!r} step {step}: not published: {exc}"
        print(msg, file=sys.stderr)
        if not getattr(exc, "counted", False):     # not twice (a review)
            self._stager.dropped += 1
        self._stager_error = WdriftError(msg)

    def _queued_bytes(self):
        s = _Stats()
        _get_lib().wd_publisher_get_stats(self._p, ctypes.byref(s))
        return s.queued_bytes

    # --- what happened ---

    @property
    def notice(self):
        """The daemon's notice for this run from its welcome, or None: today, that the run belongs to
        no study (a typo in its name; its snapshots are stored but never compared), with the nearest
        run of a study. Also said once on stderr when it came.

        None until the publisher's first exchange with the daemon: the sending thread connects,
        and the daemon welcomes it, only once a snapshot is queued (the first publish()). So it is
        None before that, and while the daemon does not answer (not started yet, a wrong
        endpoint); once stats() counts a snapshot acked or refused the welcome has come, since it
        is the daemon's first reply. None also when the welcome had no notice. The first notice
        is kept for the publisher's life, and read after close() too."""
        return self._notice_text("wd_publisher_notice", "_final_notice")

    @property
    def last_notice(self):
        """The daemon's latest notice after its welcome, or None: an ack's (the run published by
        two jobs at once, ranks that give two counts) or one it sent unasked (two publishers of one
        rank; this run's tensor names match none or not all of its study's baseline's, such as a
        'module.' prefix). Each is also said once on stderr as it comes; this is for code (a CI
        check, a training loop that stops). Notices come with the daemon's replies, so one about
        a step's results is here after a later publish() or flush(). Read after close() too."""
        return self._notice_text("wd_publisher_last_notice", "_final_last_notice")

    def _notice_text(self, call, final):
        """What the C call copies (None for ""), or after close() what it gave at close."""
        if not self._p and hasattr(self, final):
            return getattr(self, final)
        self._check()
        return self._read_notice(call)

    def _read_notice(self, call):
        buf = ctypes.create_string_buffer(1100)
        getattr(_get_lib(), call)(self._p, buf, len(buf))
        return buf.value.decode(errors="replace") or None

    @property
    def diagnosis(self):
        """Why the daemon does not answer, when the publisher has found out, or None: the endpoint
        is wdriftd's control or events socket, not listen.ingest, the CURVE handshake failed
        (keys missing, not allowed, or given to a daemon without auth), or nothing listens there
        (connects refused for 5 s, or no ipc socket file). None again once the daemon answers. Also said once on stderr as a warning, and in the stall warning."""
        self._check()
        buf = ctypes.create_string_buffer(1100)
        _get_lib().wd_publisher_diagnosis(self._p, buf, len(buf))
        return buf.value.decode(errors="replace") or None

    @property
    def diagnosis_sure(self):
        """Whether diagnosis is settled (True: the peer answered or refused, so waiting will not
        help: fix the endpoint or the keys) or a guess (False: nothing listens there yet, or a
        handshake closed without a word, as a daemon starting or restarting does too); None
        when there is no diagnosis. A job that may start before its daemon should end only on
        a sure one."""
        self._check()
        buf = ctypes.create_string_buffer(8)
        how = _get_lib().wd_publisher_diagnosis(self._p, buf, len(buf))
        return None if how == 0 else how == 1

    def stats(self):
        """committed, acked, dropped, resent, queued, queued_bytes, connected, duplicates, conflicts, refused.

        dropped counts every snapshot never made durable: by the queue's
        policy (staging included), refused by the daemon (conflicts and
        refused are those), or left at close. After close(): the counts at
        close.
        """
        if not self._p:            # closed: what it was at close
            return dict(self._final_stats) if getattr(self, "_final_stats", None) else {
                k: 0 for k, _ in _Stats._fields_}
        s = _Stats()
        _get_lib().wd_publisher_get_stats(self._p, ctypes.byref(s))
        d = {k: getattr(s, k) for k, _ in _Stats._fields_}
        if self._stager is not None:
            d["dropped"] += self._stager.dropped
            d["committed"] += self._stager.dropped
        return d

    def _conflict_now(self):
        """(count, the latest's words) of the C publisher's conflicts, read together: a later
        conflict's words must not stand for an earlier count's (a publish quoted step 10's
        conflict as the step 0 one it raised; t100)."""
        buf = ctypes.create_string_buffer(1024)
        n = _get_lib().wd_publisher_refusals(self._p, 1, buf, len(buf))
        return n, buf.value.decode(errors="replace")

    def _raise_refusals(self, upto=None):
        """WdriftError for a conflict (only those counted by upto, a _conflict_now(), when
        given, in its words) or a staging failure not yet raised."""
        if self._stager_error is not None:
            e, self._stager_error = self._stager_error, None
            raise e
        count, words = self._conflict_now()
        if upto is not None and upto[0] < count:
            count, words = upto
        e = self._conflicts_past(count, words)
        if e is not None:
            raise e

    def _conflicts_past(self, count, words):
        """WdriftError for the conflicts counted (count, the latest's words) past those raised
        before, which are then raised; None when there are none."""
        if count <= self._conflicts_seen:
            return None
        n, self._conflicts_seen = count - self._conflicts_seen, count
        more = f" (the latest of {n} conflicts since the last call)" if n > 1 else ""
        e = WdriftError(f"{words}{more}")
        e._said = True      # the library said each conflict on stderr as it came
        return e

    def _warn_refused(self, refused):
        """RefusedWarning for the snapshots refused (not conflicts) since the last one, with the latest reason."""
        if refused <= self._refused_seen:
            return
        n, self._refused_seen = refused - self._refused_seen, refused
        buf = ctypes.create_string_buffer(1024)
        _get_lib().wd_publisher_refusals(self._p, 0, buf, len(buf))
        latest = buf.value.decode(errors="replace")
        warnings.warn(RefusedWarning(f"wdrift: run {self.run!r}: {n} snapshot{'s' if n > 1 else ''} refused by "
                                     "the daemon, never stored (each said above as it came; the warning's "
                                     ".latest has the last reason)", n, latest),
                      stacklevel=3)

    def _check(self):
        if not self._p:
            raise WdriftError(f"publisher of run {getattr(self, 'run', '?')!r} is closed")
        self._raise_refusals()

    def flush(self, timeout=30.0):
        """Waits until no snapshot waits to be sent; False on timeout. Raises as publish() does, once the wait is over.

        It waits even while diagnosis_sure is True: a reload that adds this
        job's key, or a daemon started on a path freed, lets the snapshots go.

        Snapshots the daemon refused leave the queue too: stats() says how
        many were acked and how many dropped. Those it refused for good
        (a name over the daemon's limits.max_name, a bad field; not a
        conflict, which raises) are a wdrift.RefusedWarning: how many since
        the last one (.count), and the latest reason (.latest); the reasons
        themselves were said on stderr as they came, once.
        """
        if not self._p:
            raise WdriftError(f"publisher of run {self.run!r} is closed")
        # refusals are raised once the wait is over, not before it: a conflict is counted when
        # its tensor is refused, and its snapshot leaves the queue at the commit's reply, so
        # that stats() read after the raise had it still queued (CI's ASan pass; t68)
        end = time.monotonic() + timeout
        if self._stager is not None and not self._stager.drain(timeout):
            self._raise_refusals()
            return False
        ok = _get_lib().wd_publisher_flush(self._p, _ms(end - time.monotonic())) == 0
        self._raise_refusals()
        self._warn_refused(self.stats()["refused"])
        return ok

    def close(self, timeout=10.0):
        """Flushes up to timeout, then stops. Returns how many snapshots were never made durable.

        Does not wait while diagnosis_sure is True: the program is ending,
        and what waits can go nowhere until a person fixes the endpoint or
        the keys.

        Those are also said on stderr; refused ones not yet warned of are a
        wdrift.RefusedWarning, as in flush(). Raises WdriftError, after closing,
        for a conflict not yet raised, also one that came while flushing.
        """
        if not self._p:
            return 0
        lib = _get_lib()
        end = time.monotonic() + timeout
        staged = 0
        if self._stager is not None:
            if not self._stager.drain(timeout):
                lib.wd_publisher_cancel(self._p)    # a hand-over waiting for room (block) gives up
                self._stager.drain(None)
            self._stager.stop()
            staged = self._stager.dropped
        lib.wd_publisher_settle(self._p, _ms(end - time.monotonic()))
        pending = self._stager_error
        final = self.stats()
        self._warn_refused(final["refused"])
        self._final_notice = self._read_notice("wd_publisher_notice")     # not raising: close() goes on
        self._final_last_notice = self._read_notice("wd_publisher_last_notice")
        # the count and its words read together, the last thing before close: the sending
        # thread runs until then, and a conflict between two reads went unraised (a review's)
        count, words = self._conflict_now()
        final["conflicts"] = max(final["conflicts"], count)
        # not while another thread is between begin and commit: a daemon thread still publishing at
        # the program's end (the atexit close) would use the freed publisher (a review's)
        with self._build:
            dropped = lib.wd_publisher_close(ctypes.byref(self._p), 0)
            self._p = ctypes.c_void_p()
        left = int(dropped) + staged - final["dropped"]    # given up by close itself
        final.update(dropped=final["dropped"] + left, queued=0, queued_bytes=0, connected=0)
        self._final_stats = final
        if staged:
            warnings.warn(f"wdrift: run {self.run!r}: {staged} snapshots of CUDA tensors dropped before "
                          f"they reached the queue (queue_bytes={self._budget} full, or a failed copy)",
                          stacklevel=2)
        if pending is not None:
            raise pending
        e = self._conflicts_past(count, words)
        if e is not None:
            raise e
        return int(dropped) + staged

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _close_unclosed(self, when, wait=_UNCLOSED_WAIT):
        """close() for a publisher the program did not close: said on stderr when snapshots are
        still on their way (CUDA ones still staged too), which it waits for as close() would."""
        if not self._p:
            return
        s = self.stats()
        left = s["committed"] - s["acked"] - s["dropped"]
        staging = self._stager is not None and self._stager._busy > 0
        if left > 0 or staging:
            what = f"{left} snapshot{'s' if left != 1 else ''}" if left > 0 else "the snapshots being staged"
            print(f"wdrift: publisher: run {self.run!r}: close() was not called before {when}: waiting up to "
                  f"{wait:.0f} s for {what} not yet durable (call close(), or use `with wdrift.Publisher(...) "
                  f"as pub:`)", file=sys.stderr)
        try:
            self.close(wait)    # returns at once when nothing is left
        except Exception as e:  # noqa: BLE001: nothing to raise to (atexit, __del__), and the rest close
            # a conflict was said by the library as it came, and its close counts them: not again, whole
            # (a trial's re-run had its hint said a third time, as "run 'x': run 'x' step 5 refused")
            if not getattr(e, "_said", False):
                said = str(e)
                named = said.startswith((f"run '{self.run}'", f"run {self.run!r}"))     # the library's, Python's
                print(f"wdrift: publisher: {'' if named else f'run {self.run!r}: '}{said}", file=sys.stderr)

    def __del__(self):
        try:
            self._close_unclosed("it was garbage-collected")
        except Exception:       # noqa: BLE001: nothing can be raised from __del__
            pass
