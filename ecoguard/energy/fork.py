"""The meters across ``os.fork``: quiesced before it, re-armed in the child.

A forked child has only the thread that forked. Before a fork every started meter is quiesced
(waited on, briefly, until no thread of ours is inside the backend), so the child inherits no lock
taken mid-read; in the child each one is re-armed (fresh locks, no calls left open by the
parent's threads, its sampler thread again). The hooks are registered when the first meter
starts, never at import.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any

from ecoguard.faults import record_fault
from ecoguard.faults import reinit_after_fork as reinit_faults_after_fork
from ecoguard.forking import register_fork_hooks

_log = logging.getLogger("ecoguard.energy")

QUIESCE_S = 2.0  # how long a fork waits for one of our threads to leave the backend

_live: weakref.WeakSet[Any] = weakref.WeakSet()  # started meters, re-armed in a child
_held: list[Any] = []  # locks taken before a fork, released after it in the parent


def watch(meter: Any) -> None:
    """Carry ``meter`` (started) across forks: quiesce it before, re-arm it in the child."""
    _live.add(meter)
    register_fork_hooks(
        "meter",
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


def unwatch(meter: Any) -> None:
    """``meter`` stopped: nothing to carry any more."""
    _live.discard(meter)


def _quiesce(meter: Any) -> list[Any]:
    """Take the meter's sampler pass lock and each GPU track's lock (each waited on at most
    :data:`QUIESCE_S`); returns the locks taken."""
    taken: list[Any] = []
    if meter.sampler.pass_lock.acquire(timeout=QUIESCE_S):
        taken.append(meter.sampler.pass_lock)
    for track in meter.tracks:
        if track.lock.acquire(timeout=QUIESCE_S):
            taken.append(track.lock)
    return taken


def _before_fork() -> None:
    for meter in list(_live):
        try:
            _held.extend(_quiesce(meter))
        except Exception as exc:
            record_fault("meter.fork", exc)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop().release()


def _after_fork_in_child() -> None:
    _held.clear()
    reinit_faults_after_fork()
    for meter in list(_live):
        try:
            meter.rearm_in_child()
        except Exception as exc:
            record_fault("meter.fork", exc)
            _log.error(
                "ecoguard: the meter could not restart its sampler in forked process %d (%r); "
                "calls are still measured at their edges",
                os.getpid(),
                exc,
            )
