"""The ledger: every measured generate call, kept in an embedded SQLite database.

Why this shape. The generate path must never wait on a disk, so :meth:`Ledger.submit` only puts the
record on a bounded queue (and counts a drop when it is full, instead of blocking); one background
writer thread (``ecoguard-ledger``) inserts in batches, one transaction per batch. The file itself
(schema, migrations, whose file it is, integrity) is :mod:`ecoguard.export.ledger_db`; its names
are re-exported here.

When the path cannot be written (read-only directory, full disk, another application's file, a
damaged database) the ledger warns once, clearly, and keeps the records in a bounded in-memory
buffer instead; measurements and metrics go on. Every record that buffer (or the queue) cannot
hold is counted (``stats()["dropped"]``, the ``ledger.dropped_*`` fault stages) and the first loss
is warned about once.

A forked child (``os.fork``, multiprocessing's ``fork`` start method, gunicorn ``--preload``)
inherits no writer thread and must not touch the parent's SQLite connection: a fork hook,
registered when a ledger first starts, gives the child a fresh queue, a fresh writer thread and its
own connection, so the child's records land in the same file (:mod:`ecoguard.export.ledger_process`).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sqlite3
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from ecoguard import events
from ecoguard.export import ledger_process
from ecoguard.export.ledger_db import (
    _BAD_RECORD_ERRORS,
    _INSERT,
    APPLICATION_ID,
    COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    LedgerCorruptError,
    LedgerRefusedError,
    check_integrity,
    check_ownership,
    connect,
    migrate,
    read_rows,
    record_row,
    write_records,
)
from ecoguard.export.ledger_process import LedgerWarning
from ecoguard.export.ledger_process import say as _say
from ecoguard.faults import record_fault

__all__ = [
    "APPLICATION_ID",
    "COLUMNS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Ledger",
    "LedgerCorruptError",
    "LedgerRefusedError",
    "LedgerWarning",
    "check_integrity",
    "check_ownership",
    "connect",
    "flush",
    "get_ledger",
    "migrate",
    "read_rows",
    "record_row",
    "start_ledger",
    "stop_ledger",
    "write_records",
]

_log = logging.getLogger("ecoguard.ledger")

THREAD_NAME = "ecoguard-ledger"
# How long a fork waits for the writer to finish the batch in hand, so the child never inherits
# SQLite (or its own) locks held mid-write by a thread that does not exist in the child.
_FORK_QUIESCE_S = 2.0
# A batch that finds the database locked (other processes writing: forked workers, a second
# service) is tried again this many times, each after SQLite's own busy wait, before the ledger
# gives up on the file.
_LOCKED_ATTEMPTS = 6
# A ledger disabled by a lock another process holds (a long migration, a backup, sqlite3 open in
# a shell) tries its file again after this long, doubling up to the cap, and writes the records
# it kept in memory meanwhile: a lock is not a reason to lose the rest of the process' records.
_RETRY_FIRST_S = 2.0
_RETRY_MAX_S = 30.0
# After a batch the writer waits this long (or until flush/stop) before taking the next, so the
# records submitted meanwhile queue without waking it. Woken per record, it cost the generating
# thread about 15 us of CPU per record (a futex wake and the GIL handed back and forth), ten
# times the enqueue itself (benchmarks/measured_call_overhead.py); now it wakes once per batch.
_WRITE_LINGER_S = 0.05


class Ledger:
    """A background writer of records to ``path``. Use :func:`start_ledger` in applications."""

    def __init__(
        self,
        path: str | Path,
        *,
        # ~1.2 KB per queued record: at most ~40 MB of backlog when the writer falls behind a
        # burst (64 threads x 200 calls fit); past that records are dropped and counted.
        queue_size: int = 32_768,
        batch_size: int = 512,
        memory_size: int = 10_000,
        busy_timeout_s: float = 5.0,
    ) -> None:
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        # Held by the writer while it is inside SQLite (opening, writing a batch): a fork waits
        # for it, so the child never inherits a lock taken mid-write (see _before_fork).
        self._io_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # cuts the writer's linger short (flush, stop)
        self._conn: sqlite3.Connection | None = None
        self._unsubscribe: Any = None
        self.pid = os.getpid()
        self.forked_from: int | None = None  # the parent's pid when re-armed after a fork
        self.degraded: str | None = None  # why the ledger is in memory only; None when healthy
        self._retry_at: float | None = None  # when a transient degradation is tried again
        self._retry_s = _RETRY_FIRST_S
        self.memory: deque[Any] = deque(maxlen=memory_size)
        self._reset_counts()

    def _reset_counts(self) -> None:
        self.accepted = 0
        self.written = 0
        self.dropped_queue_full = 0  # submit() found the queue full
        self.memory_dropped = 0  # the in-memory fallback was full: its oldest record went
        self._in_memory_count = 0
        self.failed_batches = 0
        self.rejected = 0  # malformed records the database refused (kept in memory, counted)
        self._rejected_ids: set[int] = set()  # those records (in memory), never retried
        self.recovered = 0  # records written from memory after a transient degradation
        self.lost_at_exit = 0  # records still only in memory when the process exited
        self._loss_warned = False

    @property
    def dropped(self) -> int:
        """Records lost for good: the queue was full, the in-memory fallback overflowed, or they
        were still only in memory when the process exited."""
        return self.dropped_queue_full + self.memory_dropped + self.lost_at_exit

    # ----------------------------------------------------------------- lifecycle

    def start(self, *, subscribe: bool = True) -> Ledger:
        """Open the database (on this thread, so errors show at once) and start the writer.

        The integrity check (``PRAGMA quick_check``, ~80 ms per 200,000 rows) runs on the writer
        thread before its first batch, so a large ledger does not hold up ``install()``."""
        if self._thread is not None:
            return self
        if self.degraded is None:
            try:
                self._conn = connect(self.path, timeout_s=self._busy_timeout_s)
            except Exception as exc:
                self._degrade(f"cannot open {self.path}: {exc}")
        self._start_writer(open_first=False, check_first=True)
        if subscribe:
            self._unsubscribe = events.records.subscribe(self.submit)
        ledger_process.watch(self, on_child=_after_fork_in_child)
        return self

    def _start_writer(self, *, open_first: bool, check_first: bool = False) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(open_first, check_first), name=THREAD_NAME, daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued, stop the writer, close the database. Idempotent."""
        ledger_process.unwatch(self)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        self._wake.set()
        thread.join(timeout)
        # A writer still draining a backlog closes the database itself when it is done;
        # closing it under the writer would turn its next batch into a false "disabled" warning.
        if not thread.is_alive():
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:
                record_fault("ledger.close", exc)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    # ----------------------------------------------------------------- fork

    def _quiesce_for_fork(self) -> bool:
        """Before a fork: wait (briefly) for the writer to leave SQLite. True when it did."""
        return self._io_lock.acquire(timeout=_FORK_QUIESCE_S)

    def _rearm_in_child(self, parent_pid: int) -> None:
        """In a forked child: everything the fork broke, rebuilt for this process.

        The child has no writer thread, its locks may have been taken by parent threads that
        do not exist here, and the queue holds the parent's records (the parent writes those).
        The parent's SQLite connection must be neither used nor closed here (SQLite's "How To
        Corrupt": closing it can delete the parent's WAL content), so it is abandoned and the
        writer opens the child's own connection. Counts start at zero: they describe this process.
        """
        inherited, self._conn = self._conn, None
        if inherited is not None:
            ledger_process.abandon_inherited_connection(inherited)
        was_running = self._thread is not None
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._io_lock = threading.Lock()
        self._queue = queue.Queue(maxsize=self._queue.maxsize)
        self.memory = deque(maxlen=self.memory.maxlen)
        self._reset_counts()
        self.forked_from, self.pid = parent_pid, os.getpid()
        self._thread = None
        if was_running:
            # Opened on the writer thread: a fork hook must not wait on another process' lock.
            self._start_writer(open_first=self.degraded is None)

    # ----------------------------------------------------------------- writing

    def submit(self, record: Any) -> bool:
        """Queue one record without blocking; False (and a counted drop) when the queue is full."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            with self._lock:
                self.dropped_queue_full += 1
                first = not self._loss_warned
                self._loss_warned = True
            record_fault("ledger.dropped_queue_full")
            if first:
                self._warn_loss(
                    f"the write queue is full ({self._queue.maxsize} records waiting): new records "
                    "are dropped until the writer catches up"
                )
            return False
        with self._lock:
            self.accepted += 1
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every accepted record is written (or kept in memory). True if done in time.

        False at once when no writer is running (never started, stopped, or lost)."""
        deadline = time.monotonic() + timeout
        self._wake.set()
        with self._done:
            while self.written + self._in_memory_count < self.accepted:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.running:
                    return False
                self._done.wait(min(remaining, 0.5))
        return True

    def _run(self, open_first: bool = False, check_first: bool = False) -> None:
        with self._io_lock:
            try:
                if open_first:
                    self._conn = connect(self.path, timeout_s=self._busy_timeout_s)
                if check_first and self._conn is not None:
                    check_integrity(self._conn, self.path)
            except Exception as exc:
                self._degrade(f"cannot open {self.path}: {exc}", retry=_is_transient(exc))
        while True:
            if self._retry_at is not None and time.monotonic() >= self._retry_at:
                with self._io_lock:
                    self._recover()
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    self._finish()
                    return
                continue
            batch = [first]
            while len(batch) < self._batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._wake.clear()  # (before writing: a flush during the write ends the linger)
            try:
                with self._io_lock:
                    self._write(batch)
            except Exception as exc:  # the writer thread must survive anything a batch does
                record_fault("ledger.writer", exc)
                self._keep_in_memory(batch)
            if len(batch) < self._batch_size:  # a full batch: more may be waiting, go on
                self._wake.wait(_WRITE_LINGER_S)

    def _write(self, batch: list[Any]) -> None:
        unwritten: list[Any] = list(batch)
        if self._conn is not None:
            try:
                self._insert([record_row(r) for r in batch])
                unwritten = []
            except _BAD_RECORD_ERRORS as exc:
                # One malformed record must cost neither the rest of its batch nor the ledger.
                record_fault("ledger.bad_record", exc)
                unwritten = self._write_each(batch)
            except Exception as exc:
                self.failed_batches += 1
                record_fault("ledger.write", exc)
                self._degrade(f"cannot write {self.path}: {exc}", retry=_is_transient(exc))
        with self._done:
            self.written += len(batch) - len(unwritten)
            self._done.notify_all()
        self._keep_in_memory(unwritten)

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        """One transaction for ``rows``; a locked database is waited out, not given up on."""
        for attempt in range(_LOCKED_ATTEMPTS):
            conn = self._conn
            if conn is None:
                raise sqlite3.OperationalError("the ledger's connection is closed")
            try:
                with conn:
                    conn.executemany(_INSERT, rows)
                return
            except sqlite3.OperationalError as exc:
                locked = "locked" in str(exc) or "busy" in str(exc)
                if not locked or attempt == _LOCKED_ATTEMPTS - 1:
                    raise
                record_fault("ledger.locked", exc)
                time.sleep(min(1.0, 0.05 * 2**attempt))

    def _keep_in_memory(self, records: list[Any]) -> None:
        """Hand ``records`` to the bounded in-memory fallback, counting what it pushes out."""
        if not records:
            return
        with self._done:
            limit = self.memory.maxlen
            overflow = 0 if limit is None else max(0, len(self.memory) + len(records) - limit)
            self.memory.extend(records)
            self._in_memory_count += len(records)
            self.memory_dropped += overflow
            first = overflow > 0 and not self._loss_warned
            self._loss_warned = self._loss_warned or overflow > 0
            self._done.notify_all()
        if overflow:
            record_fault("ledger.dropped_memory_full", count=overflow)
        if first:
            self._warn_loss(
                f"the in-memory fallback is full ({limit} records): the oldest records are "
                "dropped as new ones arrive"
            )

    def _warn_loss(self, what: str) -> None:
        """Warn, once per ledger, that records are being lost (they are counted either way)."""
        message = (
            f"ecoguard ledger {self.path} is losing records: {what}. Every lost record is "
            "counted (ledger stats()['dropped'], fault stages ledger.dropped_*)."
        )
        _say(message, stacklevel=4)

    def _write_each(self, batch: list[Any]) -> list[Any]:
        """Insert one record at a time; returns the records that could not be written."""
        unwritten: list[Any] = []
        for index, record in enumerate(batch):
            if self._conn is None:
                unwritten.extend(batch[index:])
                break
            try:
                row = record_row(record)
                with self._conn:
                    self._conn.execute(_INSERT, row)
            except _BAD_RECORD_ERRORS as exc:
                self.rejected += 1
                self._rejected_ids.add(id(record))
                record_fault("ledger.bad_record", exc)
                unwritten.append(record)
            except Exception as exc:
                self.failed_batches += 1
                record_fault("ledger.write", exc)
                self._degrade(f"cannot write {self.path}: {exc}", retry=_is_transient(exc))
                unwritten.extend(batch[index:])
                break
        return unwritten

    def _degrade(self, reason: str, *, retry: bool = False) -> None:
        """Switch to memory only, warning once (read-only or full disk, locked, corrupt, refused).

        With ``retry`` (the file was locked or busy) the writer tries the file again later and
        writes what it kept in memory (:meth:`_recover`)."""
        if retry:
            self._retry_at = time.monotonic() + self._retry_s
        if self.degraded is not None:
            return
        self.degraded = reason
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception as exc:  # already broken: memory only either way
                record_fault("ledger.close", exc)
            self._conn = None
        record_fault("ledger.degraded")
        message = (
            f"ecoguard ledger disabled: {reason}. Measurements continue in memory and in metrics; "
            "set ECOGUARD_LEDGER to a writable path (or 'off') to choose where they go."
        )
        _say(message, stacklevel=3)

    def _recover(self) -> None:
        """Writer thread, after a transient degradation: open the file again and write the
        records kept in memory meanwhile (all but those the database refused as malformed)."""
        try:
            conn = connect(self.path, timeout_s=self._busy_timeout_s)
        except Exception as exc:
            record_fault("ledger.retry", exc)
            self._retry_s = min(_RETRY_MAX_S, self._retry_s * 2)
            self._retry_at = time.monotonic() + self._retry_s
            return
        self._conn, self.degraded, self._retry_at = conn, None, None
        self._retry_s = _RETRY_FIRST_S
        with self._done:
            pending = [r for r in self.memory if id(r) not in self._rejected_ids]
            kept = [r for r in self.memory if id(r) in self._rejected_ids]
            self.memory.clear()
            self.memory.extend(kept)
            self._in_memory_count -= len(pending)
        written_before = self.written
        self._write(pending)
        self.recovered += self.written - written_before
        _log.warning(
            "ecoguard ledger %s is writable again: %d records kept in memory were written",
            self.path,
            self.written - written_before,
        )

    def _finish(self) -> None:
        """Writer thread, stopping: one last try at a transiently degraded file, then close."""
        if self._retry_at is not None:
            with self._io_lock:
                self._recover()
        self._close()

    def count_lost_at_exit(self) -> int:
        """At interpreter exit: the records still only in memory die with the process. Count
        them as dropped and say so (stats said ``dropped: 0`` while they were lost)."""
        with self._done:
            held = sum(1 for record in self.memory if id(record) not in self._rejected_ids)
            lost = held - self.lost_at_exit
            self.lost_at_exit += max(0, lost)
        if lost > 0:
            record_fault("ledger.lost_at_exit", count=lost)
            _log.warning(
                "ecoguard ledger %s: %d records held in memory (%s) are lost as the process exits",
                self.path,
                lost,
                self.degraded or "the writer could not write them",
            )
        return max(0, lost)

    def health(self) -> tuple[str, str | None]:
        """(status, reason): ``ok``; ``degraded`` (records go to memory only); ``losing``
        (records were dropped); ``stopped`` (no writer running)."""
        if self.degraded is not None:
            return "degraded", self.degraded
        if self.dropped:
            return "losing", f"{self.dropped} records dropped"
        if not self.running:
            return "stopped", "no writer thread is running in this process"
        return "ok", None

    def stats(self) -> dict[str, Any]:
        status, reason = self.health()
        with self._lock:
            return {
                "path": str(self.path),
                "pid": self.pid,
                "forked_from": self.forked_from,
                "status": status,
                "healthy": status == "ok",
                "reason": reason,
                "accepted": self.accepted,
                "written": self.written,
                "dropped": self.dropped,
                "dropped_queue_full": self.dropped_queue_full,
                "dropped_memory_full": self.memory_dropped,
                "in_memory": self._in_memory_count,
                "memory_held": len(self.memory),
                "queued": self._queue.qsize(),
                "failed_batches": self.failed_batches,
                "rejected": self.rejected,
                "recovered": self.recovered,
                "lost_at_exit": self.lost_at_exit,
                "degraded": self.degraded,
            }


# ----------------------------------------------------------------- the process-wide ledger

_ledger: Ledger | None = None
_ledger_lock = threading.Lock()
_atexit_registered = False


def _after_fork_in_child() -> None:
    """The process-wide ledger's lock, which a parent thread may have held at the fork."""
    global _ledger_lock
    _ledger_lock = threading.Lock()


def _is_transient(exc: BaseException) -> bool:
    """A lock or busy database (another process holds it): worth trying again later."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def start_ledger(settings: Any) -> Ledger | None:
    """Start the process-wide ledger at ``settings.ledger_path`` (None: disabled). Idempotent."""
    global _ledger
    path = getattr(settings, "ledger_path", None)
    if path is None:
        return None
    global _atexit_registered
    with _ledger_lock:
        if _ledger is None:
            _ledger = Ledger(path).start()
            if not _atexit_registered:
                # The writer is a daemon thread: write what is queued when the interpreter exits.
                atexit.register(stop_ledger)
                _atexit_registered = True
        return _ledger


def get_ledger() -> Ledger | None:
    return _ledger


def flush(timeout: float = 5.0) -> bool:
    """Wait for the process-wide ledger's queue to be written; True when there is none."""
    ledger = _ledger
    return True if ledger is None else ledger.flush(timeout)


def stop_ledger(timeout: float = 5.0) -> None:
    global _ledger
    with _ledger_lock:
        ledger, _ledger = _ledger, None
    if ledger is not None:
        ledger.stop(timeout)
