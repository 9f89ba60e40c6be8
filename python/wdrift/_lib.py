"""_lib: finds and loads libwdrift.so, and declares the C functions the package calls.

Two parts with two owners: where the library is looked for (_candidates),
and the ctypes prototypes of lib/wdrift.h (_declare). Nothing else in the
package touches ctypes.CDLL.
"""
import ctypes
import ctypes.util
import os

from ._errors import WdriftError

class _Opts(ctypes.Structure):
    _fields_ = [("queue_bytes", ctypes.c_uint64), ("policy", ctypes.c_int),
                ("ack_timeout_ms", ctypes.c_int), ("server_key", ctypes.c_char_p),
                ("key", ctypes.c_char_p), ("stall_warn_ms", ctypes.c_int), ("ranks", ctypes.c_int),
                ("server_key_arg", ctypes.c_char_p), ("key_arg", ctypes.c_char_p)]


class _Stats(ctypes.Structure):
    _fields_ = [("committed", ctypes.c_uint64), ("acked", ctypes.c_uint64),
                ("dropped", ctypes.c_uint64), ("resent", ctypes.c_uint64),
                ("queued", ctypes.c_uint64), ("queued_bytes", ctypes.c_uint64),
                ("connected", ctypes.c_int), ("duplicates", ctypes.c_uint64),
                ("conflicts", ctypes.c_uint64), ("refused", ctypes.c_uint64)]


# The library load() loaded, as a path (a bare name when the system's
# loader found it): for tests and bug reports.
path = None


def _candidates():
    """Where libwdrift.so may be, in the order load() tries: (path or None, what it is).

    The first that exists and loads wins (docs/publishing.md, Install):
    $WDRIFT_LIB; the package's own copy (pip install ./python puts one in
    the wheel); make install's layout, the package in
    PREFIX/lib/python3.X/dist-packages/wdrift and the library in
    PREFIX/lib; a checkout built with make, python/wdrift beside build/;
    then the system's loader (ldconfig), which finds a bare name.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    return [(os.environ.get("WDRIFT_LIB"), "$WDRIFT_LIB"),
            (os.path.join(here, "libwdrift.so"), "the package's own copy"),
            (os.path.normpath(os.path.join(here, "..", "..", "..", "libwdrift.so")), "make install's PREFIX/lib"),
            (os.path.normpath(os.path.join(here, "..", "..", "build", "libwdrift.so")), "the source tree's build/"),
            (ctypes.util.find_library("wdrift"), "the system's library path")]


def load():
    """libwdrift.so from the first of _candidates() that loads; WdriftError naming each, else."""
    global path
    looked = []
    for cand, what in _candidates():
        if not cand:
            looked.append(f"{what}: unset" if what.startswith("$") else f"{what}: not found")
        elif not os.path.exists(cand) and os.path.dirname(cand):
            looked.append(f"{what}: no {cand}")
        else:
            try:
                lib = ctypes.CDLL(cand)
                path = cand
                break
            except OSError as e:
                looked.append(f"{what}: {cand}: {e}")
    else:
        raise WdriftError("cannot find libwdrift.so; looked in: " + "; ".join(looked) +
                          ". Build it (make), install it (make install, or pip install ./python "
                          "after make), or set WDRIFT_LIB to its path")
    _declare(lib)
    return lib


def _declare(lib):
    """The prototypes of lib/wdrift.h that the package calls."""
    P, U64, I, S = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p
    PU64 = ctypes.POINTER(U64)
    lib.wd_strerror.argtypes, lib.wd_strerror.restype = [I], S
    lib.wd_last_error.argtypes, lib.wd_last_error.restype = [], S
    lib.wd_publisher_open.argtypes = [S, S, ctypes.POINTER(_Opts), ctypes.POINTER(P)]
    lib.wd_publisher_check_keys_as.argtypes = [S, S, S, S, S, ctypes.c_size_t]
    lib.wd_publisher_begin.argtypes = [P, ctypes.c_int64]
    lib.wd_publisher_tensor.argtypes = [P, S, I, P, PU64, I, U64, U64, U64]
    lib.wd_publisher_block.argtypes = [P, S, I, P, PU64, PU64, PU64, I]
    lib.wd_publisher_commit.argtypes = [P]
    lib.wd_publisher_set_rank.argtypes = [P, I]
    lib.wd_publisher_get_stats.argtypes = [P, ctypes.POINTER(_Stats)]
    lib.wd_publisher_get_stats.restype = None
    lib.wd_publisher_refusals.argtypes, lib.wd_publisher_refusals.restype = [P, I, S, ctypes.c_size_t], U64
    lib.wd_publisher_notice.argtypes, lib.wd_publisher_notice.restype = [P, S, ctypes.c_size_t], ctypes.c_size_t
    lib.wd_publisher_last_notice.argtypes = [P, S, ctypes.c_size_t]
    lib.wd_publisher_last_notice.restype = ctypes.c_size_t
    lib.wd_publisher_diagnosis.argtypes = [P, S, ctypes.c_size_t]
    lib.wd_publisher_diagnosis.restype = I
    lib.wd_publisher_cancel.argtypes, lib.wd_publisher_cancel.restype = [P], None
    lib.wd_publisher_flush.argtypes = [P, I]
    lib.wd_publisher_settle.argtypes = [P, I]
    lib.wd_publisher_close.argtypes, lib.wd_publisher_close.restype = [ctypes.POINTER(P), I], U64


def error_text(lib, r):
    """The library's message for a failed call that returned r: its detail, else wd_strerror."""
    detail = lib.wd_last_error()
    return detail.decode(errors="replace") if detail else lib.wd_strerror(int(r)).decode()
