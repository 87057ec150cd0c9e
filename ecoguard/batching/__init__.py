"""Opt-in coalescing of concurrent ``generate`` calls into one batched call.

Batch size is the largest energy lever in the reference data, and a plain transformers server
that answers one request per thread runs at batch size 1. ``Batcher`` (direct use) and
``coalescing_generate`` (the guard's hook when ``settings.batching`` is on) merge concurrent,
compatible calls on one model into one left-padded call and give each caller exactly the result
it would have got alone. See docs/batching.md.

Importing this package imports neither torch nor transformers; they are imported on first use.
"""

from __future__ import annotations

from ecoguard.batching.batcher import BATCH_ROWS, INSIDE_BATCH, Batcher
from ecoguard.batching.hook import batcher_for, close_all, coalescing_generate
from ecoguard.batching.stats import batching_stats, reset_batching_stats

__all__ = [
    "BATCH_ROWS",
    "INSIDE_BATCH",
    "Batcher",
    "batcher_for",
    "batching_stats",
    "close_all",
    "coalescing_generate",
    "reset_batching_stats",
]
