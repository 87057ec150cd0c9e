"""A tiny in-process event bus between the front doors and the back doors.

The guard publishes findings (with the action taken) and the meter publishes one record per
generate call; the ledger, the Prometheus collector and user callbacks (``ecoguard.on_record``)
subscribe. Subscribers are called synchronously on the publisher's thread, so they must be cheap
(enqueue, increment); a subscriber that raises is counted as a fault and never reaches the caller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ecoguard.faults import record_fault

Callback = Callable[[Any], None]


class Topic:
    """One kind of event with its subscribers. Copy-on-write list: publish takes no lock."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._subscribers: tuple[Callback, ...] = ()
        self._lock = threading.Lock()

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """Add ``callback``; returns a function that removes it again."""
        with self._lock:
            self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not callback)

        return unsubscribe

    def publish(self, event: Any) -> None:
        for callback in self._subscribers:
            try:
                callback(event)
            except Exception as exc:
                record_fault(f"subscriber.{self.name}", exc)

    def clear(self) -> None:
        with self._lock:
            self._subscribers = ()


# (finding, action, context) tuples: see ecoguard.guard for the FindingEvent record.
findings = Topic("findings")
# GenerationRecord objects: see ecoguard.energy for the record.
records = Topic("records")


def on_record(callback: Callback) -> Callable[[], None]:
    """Call ``callback(record)`` with one immutable record per measured generate call.

    Returns a function that unsubscribes."""
    return records.subscribe(callback)


def on_finding(callback: Callback) -> Callable[[], None]:
    """Call ``callback(event)`` for every finding the guard raises. Returns an unsubscriber."""
    return findings.subscribe(callback)
