"""Process-wide counters of what the coalescer did, for metrics and ``ecoguard doctor``.

Only counter increments under one lock on the hot path; the snapshot is built when asked.
"""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_batch_sizes: Counter[int] = Counter()  # callers per executed generate call -> how many calls
_batch_rows: Counter[int] = Counter()  # sequences per executed generate call -> how many calls
_alone_reasons: Counter[str] = Counter()  # why a call was not eligible for coalescing
_counts: Counter[str] = Counter()


def note_batch(callers: int, rows: int) -> None:
    """One generate call ran for ``callers`` requests holding ``rows`` sequences in total."""
    with _lock:
        _batch_sizes[callers] += 1
        _batch_rows[rows] += 1
        _counts["requests"] += callers
        _counts["batches"] += 1
        if callers > 1:
            _counts["requests_coalesced"] += callers


def note_alone(reason: str) -> None:
    """A call could not be coalesced (``reason`` is a short tag such as ``kwarg:streamer``)."""
    with _lock:
        _alone_reasons[reason] += 1


def note_fallback(callers: int) -> None:
    """A batched call raised and its ``callers`` were re-run one by one."""
    with _lock:
        _counts["fallbacks"] += 1
        _counts["fallback_requests"] += callers


def batching_stats() -> dict:
    """A JSON-ready snapshot.

    ``batch_size_histogram`` maps callers per executed generate call to a count of such calls
    (1 = ran alone: eligible but no partner arrived in time); ``rows_histogram`` the same by
    sequences; ``requests_coalesced`` counts requests that shared a call with at least one other;
    ``ineligible`` counts calls that went straight through, by reason; ``fallbacks`` counts batched
    calls that raised and were re-run per caller.
    """
    with _lock:
        sizes = dict(sorted(_batch_sizes.items()))
        rows = dict(sorted(_batch_rows.items()))
        reasons = dict(sorted(_alone_reasons.items()))
        counts = dict(_counts)
    batches = counts.get("batches", 0)
    requests = counts.get("requests", 0)
    return {
        "requests_total": requests,
        "requests_coalesced": counts.get("requests_coalesced", 0),
        "batches_total": batches,
        "mean_batch_size": (requests / batches) if batches else None,
        "max_batch_size": max(sizes) if sizes else None,
        "batch_size_histogram": sizes,
        "rows_histogram": rows,
        "ineligible": reasons,
        "ineligible_total": sum(reasons.values()),
        "fallbacks": counts.get("fallbacks", 0),
        "fallback_requests": counts.get("fallback_requests", 0),
    }


def reset_batching_stats() -> None:
    """Clear every counter (tests, benchmarks)."""
    with _lock:
        _batch_sizes.clear()
        _batch_rows.clear()
        _alone_reasons.clear()
        _counts.clear()
