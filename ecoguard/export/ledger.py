"""The ledger: every measured generate call, kept in an embedded SQLite database.

Why this shape. The generate path must never wait on a disk, so :meth:`Ledger.submit` only puts the
record on a bounded queue (and counts a drop when it is full, instead of blocking); one background
writer thread (``ecoguard-ledger``) inserts in batches, one transaction per batch. The database
runs in WAL mode so readers (``ecoguard report``) never block the writer and a process killed
mid-write leaves a readable database (SQLite's journal guarantees it).

The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` lists the SQL that takes
a database from each version to the next, applied in order when the ledger opens it. A database
from a newer ecoguard is opened read-only for reports and never written.

When the path cannot be written (read-only directory, full disk) the ledger warns once, clearly,
and keeps the records in a bounded in-memory buffer instead; measurements and metrics go on.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import sqlite3
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ecoguard import events
from ecoguard.faults import record_fault

_log = logging.getLogger("ecoguard.ledger")

SCHEMA_VERSION = 1
THREAD_NAME = "ecoguard-ledger"

# Columns of the ``generations`` table, in GenerationRecord field names.
COLUMNS: tuple[str, ...] = (
    "timestamp",
    "start_monotonic",
    "end_monotonic",
    "duration_s",
    "energy_j",
    "tokens",
    "requests",
    "batch_size",
    "prompt_tokens",
    "model_name",
    "precision",
    "gpu_names",
    "gpu_indices",
    "gpu_uuids",
    "tier",
    "cost_usd",
    "co2_g",
    "joules_per_token",
    "reference_j_per_token",
    "reference_tier",
    "label",
    "method",
    "idle_power_w",
    "complete",
    "error",
)
_JSON_COLUMNS = frozenset({"gpu_names", "gpu_indices", "gpu_uuids"})

# MIGRATIONS[n] takes a database at user_version n to n + 1.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    0: (
        """CREATE TABLE IF NOT EXISTS generations (
            id INTEGER PRIMARY KEY,
            timestamp REAL NOT NULL,
            start_monotonic REAL,
            end_monotonic REAL,
            duration_s REAL,
            energy_j REAL,
            tokens INTEGER,
            requests INTEGER,
            batch_size INTEGER,
            prompt_tokens INTEGER,
            model_name TEXT,
            precision TEXT,
            gpu_names TEXT,
            gpu_indices TEXT,
            gpu_uuids TEXT,
            tier TEXT,
            cost_usd REAL,
            co2_g REAL,
            joules_per_token REAL,
            reference_j_per_token REAL,
            reference_tier TEXT,
            label TEXT,
            method TEXT,
            idle_power_w REAL,
            complete INTEGER,
            error TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS generations_timestamp ON generations (timestamp)",
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)",
    ),
}


class LedgerWarning(UserWarning):
    """The ledger cannot write its database; records stay in memory."""


def connect(
    path: str | Path, *, readonly: bool = False, timeout_s: float = 5.0
) -> sqlite3.Connection:
    """A connection to the ledger at ``path`` (WAL mode; migrated to the current schema)."""
    path = Path(path)
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s)
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.OperationalError:
            # A WAL database on a read-only filesystem: mode=ro still needs to create the -shm
            # file. Nobody can be writing there, so read it as immutable (no locks, no -shm).
            conn.close()
            conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True, timeout=timeout_s)
        return conn
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        conn = sqlite3.connect(str(path), timeout=timeout_s, check_same_thread=False)
        try:
            # Switching to WAL takes an exclusive lock and can answer "locked" without waiting
            # when another process opens the same new file at once: retry until the deadline.
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable to the last commit
            migrate(conn)
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
        except BaseException:
            conn.close()
            raise


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the version found before."""
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    original = found
    if found > SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"ledger schema version {found} is newer than this ecoguard ({SCHEMA_VERSION}); "
            "upgrade ecoguard to write to it"
        )
    previous_isolation = conn.isolation_level
    # One explicit transaction per step: Python's sqlite3 (legacy transaction control) opens none
    # for DDL, so `with conn:` alone would autocommit each statement and a failure mid-step would
    # leave half a migration. user_version lives in the database header and commits with the step.
    conn.isolation_level = None
    try:
        while found < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Read again under the write lock: another process may have migrated meanwhile.
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version < SCHEMA_VERSION:
                    for statement in MIGRATIONS[version]:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {version + 1}")
                    version += 1
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            found = max(found, version)
    finally:
        conn.isolation_level = previous_isolation
    return original


def record_row(record: Any) -> tuple[Any, ...]:
    """A GenerationRecord (or anything with its fields) as a row of ``generations``."""
    values = []
    for name in COLUMNS:
        value = getattr(record, name, None)
        if name in _JSON_COLUMNS:
            value = json.dumps(list(value or ()))
        elif name == "complete":
            value = None if value is None else int(bool(value))
        values.append(value)
    return tuple(values)


# A record the schema refuses (a missing timestamp, a value of the wrong type): that record's
# problem, not the database's.
_BAD_RECORD_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, TypeError, ValueError)

_INSERT = (
    f"INSERT INTO generations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
)


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
    ) -> None:
        self.path = Path(path)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._conn: sqlite3.Connection | None = None
        self._unsubscribe: Any = None
        self.accepted = 0
        self.written = 0
        self.dropped = 0
        self._in_memory_count = 0
        self.failed_batches = 0
        self.rejected = 0  # malformed records the database refused (kept in memory, counted)
        self.degraded: str | None = None  # why the ledger is in memory only; None when healthy
        self.memory: deque[Any] = deque(maxlen=memory_size)

    # ----------------------------------------------------------------- lifecycle

    def start(self, *, subscribe: bool = True) -> Ledger:
        """Open the database (on this thread, so errors show at once) and start the writer."""
        if self._thread is not None:
            return self
        try:
            self._conn = connect(self.path)
        except Exception as exc:
            self._degrade(f"cannot open {self.path}: {exc}")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()
        if subscribe:
            self._unsubscribe = events.records.subscribe(self.submit)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued, stop the writer, close the database. Idempotent."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
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

    # ----------------------------------------------------------------- writing

    def submit(self, record: Any) -> bool:
        """Queue one record without blocking; False (and a counted drop) when the queue is full."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            with self._lock:
                self.dropped += 1
            return False
        with self._lock:
            self.accepted += 1
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every accepted record is written (or kept in memory). True if done in time."""
        deadline = time.monotonic() + timeout
        with self._done:
            while self.written + self._in_memory_count < self.accepted:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._thread is None:
                    return False
                self._done.wait(remaining)
        return True

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    self._close()
                    return
                continue
            batch = [first]
            while len(batch) < self._batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._write(batch)
            except Exception as exc:  # the writer thread must survive anything a batch does
                record_fault("ledger.writer", exc)
                with self._done:
                    self.memory.extend(batch)
                    self._in_memory_count += len(batch)
                    self._done.notify_all()

    def _write(self, batch: list[Any]) -> None:
        unwritten: list[Any] = list(batch)
        if self._conn is not None:
            try:
                rows = [record_row(r) for r in batch]
                with self._conn:
                    self._conn.executemany(_INSERT, rows)
                unwritten = []
            except _BAD_RECORD_ERRORS as exc:
                # One malformed record must cost neither the rest of its batch nor the ledger.
                record_fault("ledger.bad_record", exc)
                unwritten = self._write_each(batch)
            except Exception as exc:
                self.failed_batches += 1
                record_fault("ledger.write", exc)
                self._degrade(f"cannot write {self.path}: {exc}")
        with self._done:
            self.written += len(batch) - len(unwritten)
            self.memory.extend(unwritten)
            self._in_memory_count += len(unwritten)
            self._done.notify_all()

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
                record_fault("ledger.bad_record", exc)
                unwritten.append(record)
            except Exception as exc:
                self.failed_batches += 1
                record_fault("ledger.write", exc)
                self._degrade(f"cannot write {self.path}: {exc}")
                unwritten.extend(batch[index:])
                break
        return unwritten

    def _degrade(self, reason: str) -> None:
        """Switch to memory only, warning once (read-only or full disk, locked, corrupt)."""
        if self.degraded is not None:
            return
        self.degraded = reason
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        message = (
            f"ecoguard ledger disabled: {reason}. Measurements continue in memory and in metrics; "
            "set ECOGUARD_LEDGER to a writable path (or 'off') to choose where they go."
        )
        try:
            _log.warning(message)
            warnings.warn(message, LedgerWarning, stacklevel=2)
        except Exception as exc:  # a warnings filter set to "error" must not kill the writer
            record_fault("ledger.warn", exc)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "path": str(self.path),
                "accepted": self.accepted,
                "written": self.written,
                "dropped": self.dropped,
                "in_memory": self._in_memory_count,
                "queued": self._queue.qsize(),
                "failed_batches": self.failed_batches,
                "rejected": self.rejected,
                "degraded": self.degraded,
            }


def read_rows(
    path: str | Path, *, since: float | None = None, until: float | None = None
) -> list[dict[str, Any]]:
    """Rows of the ledger at ``path`` as dicts (JSON columns decoded), oldest first."""
    conn = connect(path, readonly=True)
    try:
        conn.row_factory = sqlite3.Row
        clauses, params = [], []
        if since is not None:
            clauses.append("timestamp >= ?")
            params.append(since)
        if until is not None:
            clauses.append("timestamp < ?")
            params.append(until)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = conn.execute(f"SELECT * FROM generations{where} ORDER BY timestamp", params)
        result = []
        for row in rows:
            item = dict(row)
            for name in _JSON_COLUMNS:
                if item.get(name):
                    item[name] = json.loads(item[name])
            result.append(item)
        return result
    finally:
        conn.close()


def write_records(path: str | Path, records: Iterable[Any]) -> int:
    """Insert ``records`` synchronously (tools, tests and imports; the live path uses Ledger)."""
    conn = connect(path)
    try:
        rows = [record_row(r) for r in records]
        with conn:
            conn.executemany(_INSERT, rows)
        return len(rows)
    finally:
        conn.close()


# ----------------------------------------------------------------- the process-wide ledger

_ledger: Ledger | None = None
_ledger_lock = threading.Lock()
_atexit_registered = False


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
