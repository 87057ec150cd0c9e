"""The ledgers' life in the process: their warnings, the fork hooks, the flush at exit.

A forked child (``os.fork``, multiprocessing's ``fork`` start method, gunicorn ``--preload``)
inherits no writer thread and must not touch the parent's SQLite connection. The hooks here,
registered when the first ledger starts (never at import), make the parent wait (briefly) for
each writer to leave SQLite before the fork, and re-arm every ledger in the child
(``Ledger._rearm_in_child``: fresh queue, writer and connection). At exit, what is queued is
written and what only memory held is counted as lost; the exit hook also runs in multiprocessing
children (they leave through ``os._exit``, after ``threading._shutdown`` but without ``atexit``).
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ecoguard.faults import record_fault
from ecoguard.faults import reinit_after_fork as reinit_faults_after_fork
from ecoguard.forking import register_fork_hooks

_log = logging.getLogger("ecoguard.ledger")


class LedgerWarning(UserWarning):
    """The ledger cannot write its database (records stay in memory), or records were lost."""


def say(message: str, *, stacklevel: int, level: int = logging.WARNING) -> None:
    """Log ``message`` and issue it as a LedgerWarning (``stacklevel`` counted from here). A
    warnings filter set to "error" must reach neither the caller nor the writer thread: counted
    as a ``ledger.warn`` fault instead."""
    try:
        _log.log(level, message)
        warnings.warn(message, LedgerWarning, stacklevel=stacklevel)
    except Exception as exc:
        record_fault("ledger.warn", exc)


# Every started ledger of this process (the process-wide one and any started directly).
_live: weakref.WeakSet[Any] = weakref.WeakSet()
_quiesced: list[Any] = []
_on_child: list[Callable[[], None]] = []
_exit_registered = False
# Connections inherited across a fork: kept alive (and never closed) for the child's lifetime.
_inherited_connections: list[sqlite3.Connection] = []


def watch(ledger: Any, *, on_child: Callable[[], None] | None = None) -> None:
    """``ledger`` started: re-arm it after a fork and flush it at exit (hooks registered on the
    first call; ``on_child`` runs in a forked child before the ledgers are re-armed)."""
    global _exit_registered
    _live.add(ledger)
    if on_child is not None and on_child not in _on_child:
        _on_child.append(on_child)
    register_fork_hooks(
        "ledger",
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
    if not _exit_registered:
        _exit_registered = True
        register = getattr(threading, "_register_atexit", None)
        try:
            (register or atexit.register)(_flush_at_exit)
        except RuntimeError:  # the interpreter is already shutting down
            pass


def unwatch(ledger: Any) -> None:
    _live.discard(ledger)


def live() -> list[Any]:
    return list(_live)


def _before_fork() -> None:
    for ledger in list(_live):
        try:
            if ledger._quiesce_for_fork():
                _quiesced.append(ledger)
        except Exception as exc:
            record_fault("ledger.fork", exc)


def _after_fork_in_parent() -> None:
    while _quiesced:
        _quiesced.pop()._io_lock.release()


def _after_fork_in_child() -> None:
    """Re-arm every ledger this process inherited; say loudly if one cannot be."""
    _quiesced.clear()
    reinit_faults_after_fork()
    for hook in _on_child:
        try:
            hook()
        except Exception as exc:  # a fork hook must not raise
            record_fault("ledger.fork", exc)
    parent_pid = os.getppid()
    for ledger in list(_live):
        try:
            ledger._rearm_in_child(parent_pid)
        except Exception as exc:
            record_fault("ledger.fork", exc)
            message = (
                f"ecoguard ledger: this forked process (pid {os.getpid()}) could not restart its "
                f"writer for {ledger.path} ({exc!r}); its records will not reach the ledger"
            )
            say(message, stacklevel=3, level=logging.ERROR)


def abandon_inherited_connection(conn: sqlite3.Connection) -> None:
    """Keep a connection inherited across a fork open for good, so that nothing in the child,
    not even the interpreter's final garbage collection, ever calls sqlite3_close on it."""
    _inherited_connections.append(conn)
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))  # one reference nobody drops
    except Exception as exc:  # no ctypes: the list above still holds it until finalization
        record_fault("ledger.fork", exc)


def _flush_at_exit() -> None:
    """Write what is queued before the process ends (the writer is a daemon thread), and count
    what only memory held as lost."""
    for ledger in list(_live):
        if ledger.running and not ledger.flush(5.0):
            record_fault("ledger.exit_flush")
        ledger.count_lost_at_exit()
