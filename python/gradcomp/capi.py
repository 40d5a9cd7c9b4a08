"""ctypes binding of include/gradcomp/gradcomp.h (the functions the hook uses).

The library is found, in order: LIBGRADCOMP_API (a path), the installed
library beside this package (its prefix's libdir, written by the install as
_install.py), then the dynamic loader's search (libgradcomp-api.so.0).
Every failing call raises GradcompError with gcLastError()'s message, which
names the cause (the variable, argument or peer at fault).
"""
import ctypes
import os
import threading

# gcResult_t
SUCCESS = 0
RESULT_NAMES = {0: "success", 1: "invalid argument", 2: "invalid config", 3: "system error",
                4: "remote error", 5: "timeout", 6: "unsupported", 7: "internal error"}
# gcDataType_t (values of ncclDataType_t) and gcRedOp_t
INT32, INT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = 2, 4, 6, 7, 8, 9
SUM, AVG = 0, 4
UNIQUE_ID_BYTES = 128


class GradcompError(RuntimeError):
    """A gradcomp call failed; .result is the gcResult_t, str() its message."""

    def __init__(self, result, message):
        super().__init__(message)
        self.result = result


class Traffic(ctypes.Structure):
    _fields_ = [("bytesSent", ctypes.c_uint64), ("bytesRecv", ctypes.c_uint64),
                ("msgsSent", ctypes.c_uint64), ("msgsRecv", ctypes.c_uint64)]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("LIBGRADCOMP_API")
    if env:
        return [env]
    out = []
    try:
        from gradcomp import _install  # written by cmake --install
        out.append(os.path.normpath(os.path.join(os.path.dirname(__file__), _install.LIB_RELATIVE,
                                                 "libgradcomp-api.so.0")))
    except ImportError:
        pass
    return out + ["libgradcomp-api.so.0"]


def _declare(lib):
    c_int, c_char_p, c_void_p, c_size_t, c_uint64 = (ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                                      ctypes.c_size_t, ctypes.c_uint64)
    sig = {
        "gcGetUniqueId": (c_int, [c_char_p, ctypes.POINTER(UniqueId)]),
        "gcCommInitRank": (c_int, [ctypes.POINTER(c_void_p), c_int, ctypes.POINTER(UniqueId), c_int]),
        "gcCommDestroy": (c_int, [c_void_p]),
        "gcCommRank": (c_int, [c_void_p]),
        "gcCommSize": (c_int, [c_void_p]),
        "gcAlgoConfigCreate": (c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
        "gcAlgoConfigSet": (c_int, [c_void_p, c_char_p, c_char_p]),
        "gcAlgoConfigDestroy": (None, [c_void_p]),
        "gcAlgorithmNames": (c_char_p, []),
        "gcAllreduce": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_uint64,
                                c_void_p]),
        "gcCommPolicyConfig": (c_int, [c_void_p, c_size_t, c_int, c_int, ctypes.POINTER(c_void_p),
                                       ctypes.POINTER(c_char_p)]),
        "gcCommLastAlgorithm": (c_char_p, [c_void_p]),
        "gcCommGetTraffic": (c_int, [c_void_p, ctypes.POINTER(Traffic)]),
        "gcCommResetTraffic": (c_int, [c_void_p]),
        "gcLastError": (c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def lib():
    """The loaded library (opened once); GradcompError naming each place tried."""
    global _lib
    with _lock:
        if _lib is None:
            tried = []
            for path in _candidates():
                try:
                    candidate = ctypes.CDLL(path)
                    _declare(candidate)
                    _lib = candidate
                    break
                except (OSError, AttributeError) as e:
                    tried.append("%s: %s" % (path, e))
            if _lib is None:
                raise GradcompError(3, "cannot load gradcomp's C API library (set LIBGRADCOMP_API "
                                       "to libgradcomp-api.so): " + "; ".join(tried))
        return _lib


def check(result, what):
    """Raises GradcompError for a failed gcResult_t, with gcLastError()'s message."""
    if result != SUCCESS:
        msg = (lib().gcLastError() or b"").decode("utf-8", "replace")
        raise GradcompError(result, "%s failed (%s): %s" % (what, RESULT_NAMES.get(result, result),
                                                            msg or "no message"))


def algorithm_names():
    return lib().gcAlgorithmNames().decode().split(",")


class Comm:
    """A communicator over nranks processes, met through a gcUniqueId text."""

    def __init__(self, nranks, rank, unique_id):
        uid = UniqueId()
        uid.internal = unique_id.encode() if isinstance(unique_id, str) else unique_id
        self.handle = ctypes.c_void_p()
        check(lib().gcCommInitRank(ctypes.byref(self.handle), nranks, ctypes.byref(uid), rank),
              "gcCommInitRank (rank %d of %d, id %s)" % (rank, nranks, uid.internal.decode()))

    @staticmethod
    def unique_id(host=None):
        uid = UniqueId()
        check(lib().gcGetUniqueId(host.encode() if host else None, ctypes.byref(uid)),
              "gcGetUniqueId")
        return uid.internal.decode()

    def allreduce(self, ptr, count, dtype, op, config, key):
        check(lib().gcAllreduce(ptr, ptr, count, dtype, op, config.handle if config else None, key,
                                self.handle), "gcAllreduce")

    def policy_config(self, count, dtype, op):
        """(AlgoConfig or None, verdict) of the interposer's configuration for
        this call; the first call is collective (configs compared)."""
        handle, why = ctypes.c_void_p(), ctypes.c_char_p()
        check(lib().gcCommPolicyConfig(self.handle, count, dtype, op, ctypes.byref(handle),
                                       ctypes.byref(why)), "gcCommPolicyConfig")
        return (AlgoConfig.adopt(handle) if handle.value else None,
                (why.value or b"").decode())

    def last_algorithm(self):
        return (lib().gcCommLastAlgorithm(self.handle) or b"").decode()

    def traffic(self):
        t = Traffic()
        check(lib().gcCommGetTraffic(self.handle, ctypes.byref(t)), "gcCommGetTraffic")
        return {"bytes_sent": t.bytesSent, "bytes_recv": t.bytesRecv, "msgs_sent": t.msgsSent,
                "msgs_recv": t.msgsRecv}

    def reset_traffic(self):
        check(lib().gcCommResetTraffic(self.handle), "gcCommResetTraffic")

    def destroy(self):
        if self.handle:
            handle, self.handle = self.handle, ctypes.c_void_p()
            check(lib().gcCommDestroy(handle), "gcCommDestroy")


class AlgoConfig:
    """An algorithm with parameter overrides (names without GRADCOMP_); unset
    parameters come from the GRADCOMP_* environment, then defaults."""

    @classmethod
    def adopt(cls, handle):
        config = cls.__new__(cls)
        config.handle = handle
        return config

    def __init__(self, algo, params=None):
        self.handle = ctypes.c_void_p()
        check(lib().gcAlgoConfigCreate(algo.encode(), ctypes.byref(self.handle)),
              "gcAlgoConfigCreate(%s)" % algo)
        for name, value in (params or {}).items():
            check(lib().gcAlgoConfigSet(self.handle, str(name).encode(), str(value).encode()),
                  "gcAlgoConfigSet(%s, %s=%s)" % (algo, name, value))

    def __del__(self):
        if getattr(self, "handle", None) and _lib is not None:
            _lib.gcAlgoConfigDestroy(self.handle)
            self.handle = None
