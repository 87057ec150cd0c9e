"""The ledger's database file: schema, migrations, whose file it is, reading and writing rows.

The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` lists the SQL that takes
a database from each version to the next, applied in order when the ledger opens it. A database
from a newer ecoguard is opened read-only for reports and never written. The database runs in WAL
mode so readers (``ecoguard report``) never block the writer and a process killed mid-write
leaves a readable database (SQLite's journal guarantees it).

The ledger only writes to a database that is its own. ``PRAGMA application_id`` marks the file
as ecoguard's; an unmarked file is adopted only when it is empty or holds nothing but ecoguard's
tables (a ledger from before the marker). Anything else, an application's database or a file that
is not SQLite at all, is refused before a single byte of it changes (no table, no
``user_version``, no WAL switch). :func:`check_integrity` (``PRAGMA quick_check``) runs when the
background writer (:mod:`ecoguard.export.ledger`) opens the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ecoguard.printable import valid_utf8

SCHEMA_VERSION = 2
# PRAGMA application_id of an ecoguard ledger: SQLite's own file-format marker ("ECOG").
APPLICATION_ID = 0x45434F47
# The schema objects of every ledger version (a ledger from before the marker holds only these).
_OWN_OBJECTS = frozenset({"generations", "generations_timestamp", "meta"})

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
    "batching_saved_j",
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
        f"PRAGMA application_id = {APPLICATION_ID}",
    ),
    # The energy a call coalesced by ecoguard's batching saved (GenerationRecord.batching_saved_j);
    # rows written before it read NULL (not estimated).
    1: ("ALTER TABLE generations ADD COLUMN batching_saved_j REAL",),
}


class LedgerRefusedError(sqlite3.DatabaseError):
    """The file is not an ecoguard ledger (another application's database, or not SQLite).

    It is refused before anything in it changes."""


class LedgerCorruptError(sqlite3.DatabaseError):
    """``PRAGMA quick_check`` found damage in the ledger file."""


def check_ownership(conn: sqlite3.Connection, path: str | Path) -> bool:
    """Raise :class:`LedgerRefusedError` unless the database at ``conn`` is empty or ecoguard's.

    Only reads. Returns True when the file already carries ecoguard's ``application_id``."""
    try:
        application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        names = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE substr(name, 1, 7) != 'sqlite_'"
            )
        }
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise LedgerRefusedError(
                f"{path} is not a SQLite database ({exc}); it was left untouched"
            ) from exc
        raise
    if application_id == APPLICATION_ID:
        return True
    where = f"{path} is not an ecoguard ledger"
    if application_id != 0:
        raise LedgerRefusedError(
            f"{where}: its application_id is {application_id:#x} (ecoguard's is "
            f"{APPLICATION_ID:#x}); it was left untouched"
        )
    foreign = sorted(names - _OWN_OBJECTS)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise LedgerRefusedError(
            f"{where}: it holds another application's tables ({shown}); it was left untouched"
        )
    if (names and "generations" not in names) or (not names and 0 < version <= SCHEMA_VERSION):
        raise LedgerRefusedError(
            f"{where}: user_version {version} without ecoguard's generations table; "
            "it was left untouched"
        )
    return False


def check_integrity(conn: sqlite3.Connection, path: str | Path) -> None:
    """Raise :class:`LedgerCorruptError` when ``PRAGMA quick_check`` finds damage (~80 ms for
    200,000 rows: it checks every page's structure, not index contents)."""
    try:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)").fetchall()]
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    if problems != ["ok"]:
        raise LedgerCorruptError(
            f"{path} is damaged (PRAGMA quick_check: {'; '.join(problems)}); it was left as it "
            "is: move it aside to keep it, and ecoguard starts a new ledger there"
        )


def _uri(path: Path, query: str) -> str:
    """An SQLite ``file:`` URI for ``path``: every character a URI gives meaning to (``?``,
    ``#``, ``%``, spaces) percent-encoded, so the path names exactly that file (an unescaped
    ``?`` read another ledger, a ``#`` created a stray empty file)."""
    return f"file:{quote(os.fsencode(path.absolute()), safe='/')}?{query}"


def connect(
    path: str | Path,
    *,
    readonly: bool = False,
    timeout_s: float = 5.0,
    integrity: bool = False,
) -> sqlite3.Connection:
    """A connection to the ledger at ``path`` (WAL mode; migrated to the current schema).

    Raises :class:`LedgerRefusedError` for a file that is not ecoguard's (untouched) and, with
    ``integrity``, :class:`LedgerCorruptError` for a damaged one."""
    path = Path(path)
    if readonly:
        conn = sqlite3.connect(_uri(path, "mode=ro"), uri=True, timeout=timeout_s)
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.OperationalError:
            # A WAL database on a read-only filesystem: mode=ro still needs to create the -shm
            # file. Nobody can be writing there, so read it as immutable (no locks, no -shm).
            conn.close()
            conn = sqlite3.connect(_uri(path, "immutable=1"), uri=True, timeout=timeout_s)
        except sqlite3.DatabaseError:
            pass  # not a database at all: check_ownership says so clearly
        try:
            check_ownership(conn, path)
        except BaseException:
            conn.close()
            raise
        return conn
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    while True:
        conn = sqlite3.connect(str(path), timeout=timeout_s, check_same_thread=False)
        try:
            # Before anything is written: whose file is this, and is it whole?
            marked = check_ownership(conn, path)
            if integrity:
                check_integrity(conn, path)
            # Switching to WAL takes an exclusive lock and can answer "locked" without waiting
            # when another process opens the same new file at once: retry until the deadline.
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable to the last commit
            migrate(conn)
            if not marked and int(conn.execute("PRAGMA application_id").fetchone()[0]) == 0:
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")  # a pre-marker ledger
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
        except BaseException:
            conn.close()
            raise


def has_column(conn: sqlite3.Connection, name: str) -> bool:
    """True when ``generations`` has column ``name`` (a ledger opened read-only is never
    migrated: an older one lacks the later columns)."""
    return any(row[1] == name for row in conn.execute("PRAGMA table_info(generations)"))


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
            value = json.dumps([_storable(item) for item in value or ()])
        elif name == "complete":
            value = None if value is None else int(bool(value))
        else:
            value = _storable(value)
        values.append(value)
    return tuple(values)


def _storable(value: Any) -> Any:
    """A label SQLite can store: undecodable bytes in a name (``os.fsdecode``'s surrogate
    escapes) as ``\\xff`` text, so the record is kept instead of refused."""
    return valid_utf8(value) if isinstance(value, str) else value


# A record the schema refuses (a missing timestamp, a value of the wrong type): that record's
# problem, not the database's.
_BAD_RECORD_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, TypeError, ValueError)

_INSERT = (
    f"INSERT INTO generations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"
)


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
