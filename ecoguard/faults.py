"""Counting ecoguard's own faults, so a failure inside the guard is visible but never fatal.

Every ``except Exception`` around ecoguard's analysis calls ``record_fault(stage, exc)``: it logs
at debug level and increments a per-stage counter that metrics and ``ecoguard doctor`` show.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

_log = logging.getLogger("ecoguard")
_lock = threading.Lock()
_counts: Counter[str] = Counter()


def record_fault(stage: str, exc: BaseException | None = None, *, count: int = 1) -> None:
    """Count a fault in ``stage`` (``guard.extract``, ``meter.sample``, ``ledger.write``...).

    ``count``: how many things it cost at once (records dropped in one batch, for instance)."""
    with _lock:
        _counts[stage] += count
    try:
        _log.debug("ecoguard fault in %s: %r", stage, exc, exc_info=exc is not None)
    except Exception:  # logging itself must not raise into the caller
        pass


class contained:  # lower case: used like a function, ``with contained("stage"):``
    """Run an ecoguard step fail-open: an exception is counted as a fault of ``stage`` (and
    logged at debug) and swallowed, so the caller's work goes on. Exceptions of the
    ``passthrough`` types are ecoguard's own decisions (a strict-mode refusal) and propagate.

    Code after the ``with`` block runs either way; a value the block was to compute keeps the
    default the caller set before it. The object holds no state between uses, so a path can
    build one once and enter it on every call: about 0.3 µs of CPU per entry for a prebuilt one,
    0.7-1.0 µs for a fresh one (the generator it replaced: about 1.9 µs). A plain ``try`` block
    costs about 0.03 µs, which is why the guard's per-generate block stays one."""

    __slots__ = ("passthrough", "stage")

    def __init__(self, stage: str, *, passthrough: tuple[type[BaseException], ...] = ()) -> None:
        self.stage = stage
        self.passthrough = passthrough

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> bool:
        if kind is None or not issubclass(kind, Exception) or issubclass(kind, self.passthrough):
            return False
        record_fault(self.stage, exc)
        return True


def fault_counts() -> dict[str, int]:
    """A snapshot of fault counts by stage."""
    with _lock:
        return dict(_counts)


def reinit_after_fork() -> None:
    """In a forked child: a fresh lock (another thread of the parent may have held the old one
    at the fork, and no thread of the child would ever release it). Counts carry over."""
    global _lock
    _lock = threading.Lock()


def reset_faults() -> None:
    """Clear the counters (tests)."""
    with _lock:
        _counts.clear()
