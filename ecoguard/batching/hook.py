"""The guard's entry point: ``coalescing_generate`` and its per-model batcher registry.

When ``settings.batching`` is on, the guard's ``generate`` wrapper calls
``coalescing_generate(wrapped, model, args, kwargs, settings)`` for the outermost call, inside the
meter window it opened for that caller. The batched call invokes ``wrapped`` (the original,
unpatched ``generate``) directly, so the guard is not re-entered and nothing is counted twice:
each caller keeps exactly one window and one record with its own tokens, and the meter shares
the batched call's energy among the overlapping windows (docs/batching.md, "Energy").
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from ecoguard.batching.batcher import CLOSE_TIMEOUT_S, INSIDE_BATCH, Batcher, Runner
from ecoguard.faults import record_fault
from ecoguard.forking import register_fork_hooks

_registry: weakref.WeakKeyDictionary[Any, Batcher] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def coalescing_generate(
    wrapped: Runner, model: Any, args: tuple, kwargs: dict, settings: Any
) -> Any:
    """Run one guarded ``generate`` call, coalesced with concurrent compatible calls on the same
    model when ``settings.batching`` is on; otherwise, or when the call is not eligible, run
    ``wrapped(*args, **kwargs)`` alone and untouched."""
    if INSIDE_BATCH.get() or not getattr(settings, "batching", False):
        # INSIDE_BATCH: a user's own Batcher is calling the guarded generate with a batch it
        # already built; coalescing it again would only add a wait.
        return wrapped(*args, **kwargs)
    try:
        batcher = batcher_for(model, settings)
    except Exception as exc:  # ecoguard must never break the user's call
        record_fault("batching.registry", exc)
        return wrapped(*args, **kwargs)
    return batcher.submit(wrapped, args, kwargs)


def batcher_for(model: Any, settings: Any) -> Batcher:
    """The registry's batcher for ``model``, rebuilt when the batch settings changed (a new
    ``install``); the old one is closed after its pending callers finish."""
    max_batch_size = int(getattr(settings, "max_batch_size", 16))
    max_wait_ms = float(getattr(settings, "max_wait_ms", 10.0))
    register_fork_hooks("batching.registry", after_in_child=_fresh_registry_lock)
    stale = None
    with _registry_lock:
        batcher = _registry.get(model)
        if batcher is not None and (
            batcher.max_batch_size != max_batch_size
            or batcher.max_wait_ms != max_wait_ms
            or batcher.closed
        ):
            stale, batcher = batcher, None
        if batcher is None:
            batcher = Batcher(
                model, max_batch_size=max_batch_size, max_wait_ms=max_wait_ms, _weak_model=True
            )
            _registry[model] = batcher
    if stale is not None:
        stale.close()
    return batcher


def close_all(timeout_s: float | None = CLOSE_TIMEOUT_S) -> bool:
    """Close and forget every registry batcher (the guard's uninstall; tests), waiting at most
    ``timeout_s`` seconds for all of them together. True when every caller had its result."""
    with _registry_lock:
        batchers = list(_registry.values())
        _registry.clear()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    drained = True
    for batcher in batchers:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        drained = batcher.close(remaining) and drained
    return drained


def _fresh_registry_lock() -> None:
    """In a forked child: a parent thread may have held the registry lock at the fork."""
    global _registry_lock
    _registry_lock = threading.Lock()
