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
                ("key", ctypes.c_char_p)]


class _Stats(ctypes.Structure):
    _fields_ = [("committed", ctypes.c_uint64), ("acked", ctypes.c_uint64),
                ("dropped", ctypes.c_uint64), ("resent", ctypes.c_uint64),
                ("queued", ctypes.c_uint64), ("queued_bytes", ctypes.c_uint64),
                ("connected", ctypes.c_int)]


def load():
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
    lib.wd_publisher_check_keys.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
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


