"""Data safety of the SQLite ledger: kill -9 mid-write, a full disk, a read-only path, schema
migration.

Real failures where the machine allows them: the writer is a separate process killed with
SIGKILL; "disk full" is a 96 KiB tmpfs and "read-only" a read-only tmpfs (both need root to
mount; without it those variants skip and the simulated ones still run).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from ecoguard.energy import GenerationRecord
from ecoguard.export import ledger as ledger_mod
from ecoguard.export import ledger_db
from ecoguard.export.ledger import Ledger, LedgerWarning, read_rows, write_records


def make_record(i: int, *, label_prefix: str = "") -> GenerationRecord:
    return GenerationRecord(
        start_monotonic=float(i),
        end_monotonic=float(i) + 0.5,
        timestamp=1_800_000_000.0 + i,
        duration_s=0.5,
        energy_j=1.0 + i,
        tokens=10,
        requests=1,
        batch_size=1,
        prompt_tokens=4,
        model_name="tiny",
        precision="fp32",
        gpu_names=("NVIDIA A800-SXM4-80GB",),
        gpu_indices=(0,),
        tier="simulated",
        cost_usd=1e-6,
        co2_g=1e-3,
        joules_per_token=0.1,
        reference_j_per_token=None,
        reference_tier="none",
        label=f"{label_prefix}{i}",
    )


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


# ------------------------------------------------------------------ kill -9

_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from test_data_safety import make_record
    from ecoguard.export.ledger import Ledger
    ledger = Ledger({path!r}, batch_size=64).start(subscribe=False)
    prefix = {prefix!r}
    i = 0
    while True:
        ledger.submit(make_record(i, label_prefix=prefix))
        i += 1
        if i % 256 == 0:
            ledger.flush(30)
            print("flushed", i, flush=True)
    """
)


def _kill_round(path: Path, prefix: str, flushes_before_kill: int, rng: random.Random) -> dict:
    script = _WRITER.format(here=os.path.dirname(__file__), path=str(path), prefix=prefix)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    flushed = 0
    try:
        for _ in range(flushes_before_kill):
            line = proc.stdout.readline()
            assert line.startswith("flushed"), line
            flushed = int(line.split()[1])
        time.sleep(rng.uniform(0.0, 0.03))  # kill somewhere inside the next batches
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        proc.stdout.close()
    return {"flushed": flushed}


def test_kill_9_during_heavy_writing_never_corrupts_and_loses_nothing_flushed(tmp_path):
    """Three writer processes in turn, each SIGKILLed mid-stream at a random moment, on the same
    file: after each kill the database passes integrity_check, every record the writer had
    flushed is there, and each writer's rows are an exact prefix of what it submitted (no holes,
    no duplicates, no half rows); the file stays writable."""
    path = tmp_path / "ledger.sqlite"
    rng = random.Random(20_26)
    total_rows = 0
    for round_no, flushes in enumerate((2, 5, 9)):
        prefix = f"r{round_no}-"
        outcome = _kill_round(path, prefix, flushes, rng)
        assert integrity(path) == "ok"
        rows = [r for r in read_rows(path) if r["label"].startswith(prefix)]
        indices = sorted(int(r["label"][len(prefix) :]) for r in rows)
        assert indices == list(range(len(indices))), "a hole or a duplicate after kill -9"
        assert len(indices) >= outcome["flushed"], "a flushed record was lost"
        total_rows += len(indices)
        print(
            f"\n[reliability:kill9] round={round_no} flushed={outcome['flushed']} "
            f"rows={len(indices)}"
        )
    assert len(read_rows(path)) == total_rows
    assert write_records(path, [make_record(0, label_prefix="after-")]) == 1
    assert integrity(path) == "ok"


# ------------------------------------------------------------------ disk full


@contextlib.contextmanager
def tmpfs(directory: Path, *, size: str, readonly: bool = False):
    """Mount a tmpfs at ``directory`` (root only); skip the test when mounting is impossible."""
    directory.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if readonly else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'})")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)


def _fill(ledger: Ledger, count: int) -> None:
    for i in range(count):
        assert ledger.submit(make_record(i))
    assert ledger.flush(30.0)


def test_disk_full_on_a_real_tiny_filesystem_degrades_to_memory(tmp_path):
    with tmpfs(tmp_path / "tiny", size="96k") as mount:
        path = mount / "ledger.sqlite"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ledger = Ledger(path, batch_size=64).start(subscribe=False)
            _fill(ledger, 3000)
            ledger.stop()
        stats = ledger.stats()
        assert stats["degraded"] is not None and "full" in stats["degraded"]
        assert [w.category for w in caught] == [LedgerWarning]
        assert stats["written"] + stats["in_memory"] == 3000 and stats["dropped"] == 0
        assert stats["in_memory"] > 0 and len(ledger.memory) == stats["in_memory"]
        assert integrity(path) == "ok"
        assert len(read_rows(path)) == stats["written"]
        print(
            f"\n[reliability:disk-full] written={stats['written']} "
            f"in_memory={stats['in_memory']} degraded={stats['degraded']!r}"
        )


class _FullDisk:
    """A connection whose writes fail as SQLite does when the disk is full."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def executemany(self, *args: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_disk_full_simulated_degrades_to_memory_with_one_warning(tmp_path):
    ledger = Ledger(tmp_path / "ledger.sqlite").start(subscribe=False)
    _fill(ledger, 10)
    ledger._conn = _FullDisk(ledger._conn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(500):
            ledger.submit(make_record(i))
        assert ledger.flush(10.0)
    ledger.stop()
    stats = ledger.stats()
    assert [w.category for w in caught] == [LedgerWarning]
    assert "disk is full" in stats["degraded"]
    assert stats["written"] == 10 and stats["in_memory"] == 500
    assert len(read_rows(tmp_path / "ledger.sqlite")) == 10


# ------------------------------------------------------------------ read-only


def test_read_only_filesystem_degrades_to_memory(tmp_path):
    """A read-only mount (read-only even for root): a new ledger cannot be created there, and
    an existing one cannot be written; both keep the records in memory with one warning."""
    existing = tmp_path / "ro" / "ledger.sqlite"
    with tmpfs(tmp_path / "ro", size="1m") as mount:
        write_records(existing, [make_record(i) for i in range(5)])
        remount = subprocess.run(
            ["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True
        )
        assert remount.returncode == 0, remount.stderr
        for target in (mount / "new" / "ledger.sqlite", existing):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ledger = Ledger(target).start(subscribe=False)
                _fill(ledger, 20)
                ledger.stop()
            stats = ledger.stats()
            assert [w.category for w in caught] == [LedgerWarning], target
            assert stats["degraded"] is not None and stats["in_memory"] == 20
        conn = sqlite3.connect(f"file:{existing}?immutable=1", uri=True)
        assert conn.execute("SELECT count(*) FROM generations").fetchone()[0] == 5
        conn.close()


def test_report_reads_a_ledger_on_a_read_only_filesystem(tmp_path):
    """A ledger copied to (or mounted as) read-only storage must still be reportable."""
    existing = tmp_path / "ro" / "ledger.sqlite"
    with tmpfs(tmp_path / "ro", size="1m") as mount:
        write_records(existing, [make_record(i) for i in range(5)])
        remount = subprocess.run(
            ["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True
        )
        assert remount.returncode == 0, remount.stderr
        assert len(read_rows(existing)) == 5


def test_read_only_directory_for_an_ordinary_user(tmp_path):
    """The same through permissions (meaningful when not root; root ignores mode bits)."""
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions; the read-only mount test covers this")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.warns(LedgerWarning):
            ledger = Ledger(locked / "ledger.sqlite").start(subscribe=False)
        _fill(ledger, 5)
        ledger.stop()
        assert ledger.stats()["in_memory"] == 5
    finally:
        locked.chmod(0o755)


def test_ledger_failure_through_the_whole_stack_warns_once(tmp_path, monkeypatch):
    """ECOGUARD_LEDGER pointing under a regular file: the guard still measures, the warning
    shows once, the records stay in memory and on the event bus."""
    from ecoguard import events
    from ecoguard.config import Settings
    from ecoguard.energy import CallInfo
    from ecoguard.export.ledger import get_ledger
    from ecoguard.services import start_services

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    seen: list[Any] = []
    unsubscribe = events.records.subscribe(seen.append)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        services = start_services(
            Settings(backend="simulated", ledger_path=blocker / "ledger.sqlite")
        )
        meter = services.meter
        for _ in range(3):
            window = meter.begin(devices=None, info=CallInfo(model_name="m"))
            meter.end(window, tokens=1, requests=1)
        ledger = get_ledger()
        assert ledger is not None and ledger.flush(5.0)
        stats = ledger.stats()
        services.stop()
    unsubscribe()
    assert [w.category for w in caught] == [LedgerWarning]
    assert stats["in_memory"] == 3 and len(seen) == 3


# ------------------------------------------------------------------ schema migration


def test_migration_to_a_newer_schema_keeps_every_row(tmp_path, monkeypatch):
    """A database written by this version, opened by a (simulated) next version that adds a
    column and backfills it: every row and value survives, the version moves on."""
    path = tmp_path / "ledger.sqlite"
    records = [make_record(i) for i in range(1500)]
    write_records(path, records)
    before = read_rows(path)
    version = ledger_mod.SCHEMA_VERSION
    monkeypatch.setattr(ledger_db, "SCHEMA_VERSION", version + 1)
    monkeypatch.setitem(
        ledger_mod.MIGRATIONS,
        version,
        (
            "ALTER TABLE generations ADD COLUMN energy_kwh REAL",
            "UPDATE generations SET energy_kwh = energy_j / 3600000.0",
        ),
    )
    write_records(path, [make_record(9999)])
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == version + 1
    migrated = conn.execute("SELECT energy_kwh FROM generations ORDER BY id").fetchall()
    conn.close()
    after = read_rows(path)
    assert len(after) == 1501
    for old, new in zip(before, after[:1500], strict=True):
        assert {k: new[k] for k in old} == old
    assert migrated[0][0] == pytest.approx(records[0].energy_j / 3.6e6)
    assert integrity(path) == "ok"


def test_a_failed_migration_step_leaves_the_older_version_untouched(tmp_path, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    write_records(path, [make_record(i) for i in range(50)])
    version = ledger_mod.SCHEMA_VERSION
    monkeypatch.setattr(ledger_db, "SCHEMA_VERSION", version + 1)
    steps = ["ALTER TABLE generations ADD COLUMN energy_kwh REAL", "NOT VALID SQL"]
    monkeypatch.setitem(ledger_mod.MIGRATIONS, version, tuple(steps))
    with pytest.raises(sqlite3.Error):
        ledger_mod.connect(path).close()  # a crash in the middle of the step
    conn = sqlite3.connect(path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(generations)")]
    conn.close()
    assert "energy_kwh" not in columns, "half a migration step was committed"
    # With the step fixed, the next start migrates cleanly and keeps every row.
    steps[1] = "UPDATE generations SET energy_kwh = energy_j / 3600000.0"
    monkeypatch.setitem(ledger_mod.MIGRATIONS, version, tuple(steps))
    assert write_records(path, [make_record(50)]) == 1
    assert len(read_rows(path)) == 51
