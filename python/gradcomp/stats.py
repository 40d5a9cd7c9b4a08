"""Stats files of the DDP hook's communicators, in the NCCL interposer's format.

With GRADCOMP_STATS=PREFIX (what gradcomp-launch sets), each process that made
a GradcompState writes PREFIX.hook.rank<R>.json (R: its rank in the default
process group) with one entry per state, the fields of the interposer's
PREFIX.rank<R>.json (docs/usage.md, "Reading the statistics"), so
gradcomp-launch sums both into one summary. The interposer's own file keeps its
name: a job may have both (NCCL calls preloaded, gloo buckets through the hook).

What differs from the interposer's entries: "source" is "gradcomp.torch";
"passed through" means to the process group's own allreduce (gloo), with the
hook's reasons (the library's verdicts for configuration-driven states);
wire bytes are the communicator's bytes sent during each compressed call
(gcCommGetTraffic); the time of a call is not split into communication and
compute (comm_seconds null), and residual norms are not reported (null).

The file is rewritten at state.close(), at a failed call, and at exit (atexit;
a process ended by os._exit or a signal leaves what was written last).
"""
import atexit
import json
import logging
import os
import threading

_lock = threading.Lock()
_records = []  # every CommStats made in this process, in creation order
_registered = False
_prefix = None


def prefix():
    """GRADCOMP_STATS, read once per process like the library's parameters."""
    global _prefix
    if _prefix is None:
        _prefix = os.environ.get("GRADCOMP_STATS", "")
    return _prefix


class CommStats:
    """Counters of one hook communicator (one GradcompState)."""

    def __init__(self, rank, nranks, global_rank):
        global _registered
        self.rank, self.nranks, self.global_rank = rank, nranks, global_rank
        self.calls_compressed = self.calls_passed = 0
        self.logical_bytes = self.wire_bytes = self.passed_bytes = 0
        self.compressed_seconds = self.wiring_seconds = 0.0
        self.pass_reasons = {}
        self.algorithms = {}
        self.buckets = {}  # bufferKey -> per-bucket counters
        self.failed = None
        with _lock:
            self.index = len(_records)
            _records.append(self)
            if prefix() and not _registered:
                atexit.register(_write_at_exit)
                _registered = True

    def passed(self, nbytes, why):
        self.calls_passed += 1
        self.passed_bytes += nbytes
        self.pass_reasons[why] = self.pass_reasons.get(why, 0) + 1

    def compressed(self, key, count, nbytes, sent, seconds, algorithm):
        self.calls_compressed += 1
        self.logical_bytes += nbytes
        self.wire_bytes += sent
        self.compressed_seconds += seconds
        self.algorithms[algorithm] = self.algorithms.get(algorithm, 0) + 1
        b = self.buckets.setdefault(key, {"count": count, "calls": 0, "bytes_in": 0, "bytes_out": 0,
                                          "seconds": 0.0})
        b["count"] = count
        b["calls"] += 1
        b["bytes_in"] += nbytes
        b["bytes_out"] += sent
        b["seconds"] += seconds

    def json(self):
        ratio = self.logical_bytes / self.wire_bytes if self.wire_bytes else 0
        none = {"calls_compressed": 0, "calls_passed": 0, "logical_bytes": 0, "wire_bytes": 0,
                "passed_bytes": 0}
        buckets = []
        for key, b in sorted(self.buckets.items()):
            elements = b["count"] * b["calls"]
            buckets.append(dict(
                key="0x%x" % key, collective="allreduce", count=b["count"], calls=b["calls"],
                bytes_in=b["bytes_in"], bytes_out=b["bytes_out"],
                wire_fraction=b["bytes_out"] / b["bytes_in"] if b["bytes_in"] else 0,
                bits_per_element=8.0 * b["bytes_out"] / elements if elements else 0,
                seconds=b["seconds"], comm_seconds=None, compute_seconds=None, residual_norm=None))
        return {"index": self.index, "name": "gradcomp.torch", "source": "gradcomp.torch",
                "rank": self.rank, "nranks": self.nranks, "compressing": self.failed is None,
                "disabled_kind": "", "disabled_reason": "", "failed": self.failed,
                "failed_rank": None, "calls_compressed": self.calls_compressed,
                "calls_passed": self.calls_passed, "logical_bytes": self.logical_bytes,
                "wire_bytes": self.wire_bytes, "ratio": ratio, "passed_bytes": self.passed_bytes,
                "compressed_seconds": self.compressed_seconds, "compressed_comm_seconds": None,
                "wiring_seconds": self.wiring_seconds, "selftest": None,
                "reduce_scatter": dict(none), "allgather": dict(none),
                "pass_reasons": dict(self.pass_reasons), "algorithms": dict(self.algorithms),
                "buckets": buckets, "shadow": None, "auto": []}


def path():
    """This process's stats file, or None without GRADCOMP_STATS or a state."""
    with _lock:
        if not prefix() or not _records:
            return None
        return "%s.hook.rank%d.json" % (prefix(), _records[0].global_rank)


def write():
    """Rewrites this process's file (atomically: a reader never sees half of
    it); returns its path, None when there is nothing to write. An OSError
    names GRADCOMP_STATS and the file."""
    target = path()
    if target is None:
        return None
    with _lock:
        doc = {"pid": os.getpid(), "rank": _records[0].global_rank, "source": "gradcomp.torch",
               "communicators": [r.json() for r in _records]}
        tmp = "%s.tmp%d" % (target, os.getpid())
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f)
                f.write("\n")
            os.replace(tmp, target)
        except OSError as e:
            raise OSError(e.errno, "GRADCOMP_STATS=%s: writing %s failed: %s"
                          % (prefix(), target, e.strerror)) from e
    return target


def _write_at_exit():
    try:
        write()
    except OSError as e:
        logging.getLogger("gradcomp.torch").warning("gradcomp.torch: %s", e)
